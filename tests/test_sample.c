/* test_sample.c: the sampler (serving.md §3): greedy is the argmax, a seed
 * reproduces a sequence, top_k=1 is greedy, sampled frequencies follow the
 * softmax of logits/T (chi-square), top-p and min-p never pick the excluded
 * tail and renormalise the rest, non-finite logits are never chosen, a
 * full 129,280-token vocabulary samples fast, and sampling from the
 * candidates a device sends back (sampler_cands_plan / sampler_sample_cands)
 * picks the very tokens, with the same draws, as sampling from all logits.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/sample.h"
#include "testutil.h"


static sampler_params params(float t, float top_p, float min_p, int top_k, uint64_t seed) {
    sampler_params p = sampler_params_default();
    p.temperature = t;
    p.top_p = top_p;
    p.min_p = min_p;
    p.top_k = top_k;
    p.seed = seed;
    return p;
}

static void test_defaults(void) {
    sampler_params d = sampler_params_default();
    CHECK(d.temperature == 1.0f && d.top_p == 1.0f && fabsf(d.min_p - 0.05f) < 1e-7f && d.top_k == 0 && !d.greedy,
          "defaults T=1 top_p=1 min_p=0.05 top_k=0");
    sampler_params c = params(0.3f, 0.5f, 0.2f, 7, 42);
    sampler_params t = sampler_params_for_mode(&c, 1);
    CHECK(t.temperature == 1.0f && t.top_p == 1.0f && fabsf(t.min_p - 0.05f) < 1e-7f && t.top_k == 0 && t.seed == 42,
          "thinking ignores client knobs but keeps the seed");
    sampler_params n = sampler_params_for_mode(&c, 0);
    CHECK(n.temperature == 0.3f && n.top_p == 0.5f && n.top_k == 7, "chat mode keeps client knobs");
}

static void test_greedy(void) {
    enum { V = 5000 };
    float *l = malloc(sizeof *l * V);
    for (int rep = 0; rep < 20; rep++) {
        for (int i = 0; i < V; i++) l[i] = test_randf() * 20 - 10;
        int best = 0;
        for (int i = 1; i < V; i++)
            if (l[i] > l[best]) best = i;
        sampler_params p0 = params(0.0f, 1, 0.05f, 0, 1);
        sampler *s = sampler_new(&p0);
        CHECK(sampler_sample(s, l, V, 0) == best, "T=0 is the argmax");
        sampler_free(s);
        sampler_params p1 = params(1.0f, 1, 0.0f, 1, 7);
        s = sampler_new(&p1);
        CHECK(sampler_sample(s, l, V, 0) == best, "top_k=1 is the argmax");
        sampler_free(s);
        sampler_params p2 = params(5.0f, 1, 0.0f, 0, 3);
        s = sampler_new(&p2);
        CHECK(sampler_sample(s, l, V, 1) == best, "force_greedy is the argmax");
        sampler_free(s);
        sampler_params p3 = params(5.0f, 1, 0.0f, 0, 3);
        p3.greedy = 1;
        s = sampler_new(&p3);
        CHECK(sampler_sample(s, l, V, 0) == best, "greedy flag is the argmax");
        sampler_free(s);
    }
    /* ties: first index; non-finite skipped */
    float t[6] = {NAN, 2, INFINITY, 5, 5, -INFINITY};
    CHECK(sampler_argmax(t, 6) == 3, "argmax skips non-finite, first of ties");
    float allbad[3] = {NAN, INFINITY, -INFINITY};
    CHECK(sampler_argmax(allbad, 3) == -1, "argmax of nothing finite");
    free(l);
}

static void test_seed(void) {
    enum { V = 300, N = 200 };
    float l[V];
    for (int i = 0; i < V; i++) l[i] = test_randf() * 6;
    sampler_params p = params(1.2f, 0.9f, 0.01f, 0, 12345);
    sampler *a = sampler_new(&p), *b = sampler_new(&p);
    p.seed = 54321;
    sampler *c = sampler_new(&p);
    int same_ab = 1, same_ac = 1;
    for (int i = 0; i < N; i++) {
        int32_t x = sampler_sample(a, l, V, 0), y = sampler_sample(b, l, V, 0), z = sampler_sample(c, l, V, 0);
        if (x != y) same_ab = 0;
        if (x != z) same_ac = 0;
    }
    CHECK(same_ab, "same seed, same sequence");
    CHECK(!same_ac, "different seed, different sequence");
    sampler_seed(a, 777);
    sampler_seed(b, 777);
    CHECK(sampler_rng_next(a) == sampler_rng_next(b), "reseed");
    sampler_free(a);
    sampler_free(b);
    sampler_free(c);
}

/* Draws n tokens with p and returns the chi-square of their counts against
 * the expected probabilities prob (0 for excluded ids, which must then never
 * appear: *excluded_hit). *dof: degrees of freedom (kept ids - 1). */
static double sampled_chi2(const sampler_params *p, const float *l, int v, long n, const double *prob, int *dof,
                           int *excluded_hit) {
    long *count = calloc((size_t)v, sizeof *count);
    sampler *s = sampler_new(p);
    for (long i = 0; i < n; i++) {
        int32_t k = sampler_sample(s, l, v, 0);
        if (k >= 0 && k < v) count[k]++;
    }
    sampler_free(s);
    double x = 0;
    *excluded_hit = 0;
    *dof = -1;
    for (int i = 0; i < v; i++) {
        if (prob[i] == 0) {
            if (count[i]) *excluded_hit = 1;
            continue;
        }
        ++*dof;
        double e = prob[i] * (double)n;
        x += (count[i] - e) * (count[i] - e) / e;
    }
    free(count);
    return x;
}

static void expected_probs(const float *l, int v, float t, float top_p, float min_p, int top_k, double *prob) {
    /* reference: full sort, then the rules of serving.md §3.2 spelled out */
    int *ord = malloc(sizeof *ord * (size_t)v);
    for (int i = 0; i < v; i++) ord[i] = i;
    for (int a = 0; a < v; a++)
        for (int b = a + 1; b < v; b++)
            if (l[ord[b]] > l[ord[a]]) { int tmp = ord[a]; ord[a] = ord[b]; ord[b] = tmp; }
    int kept = top_k > 0 && top_k < v ? top_k : v;
    double z = 0;
    for (int i = 0; i < kept; i++) z += exp((l[ord[i]] - l[ord[0]]) / t);
    double cum = 0, tot = 0;
    int take = 0;
    for (int i = 0; i < kept; i++) {
        double pi = exp((l[ord[i]] - l[ord[0]]) / t) / z;
        double p0 = 1.0 / z;
        if (i > 0 && pi < min_p * p0) break;
        take = i + 1;
        cum += pi;
        if (cum >= top_p) break;
    }
    for (int i = 0; i < v; i++) prob[i] = 0;
    for (int i = 0; i < take; i++) tot += exp((l[ord[i]] - l[ord[0]]) / t);
    for (int i = 0; i < take; i++) prob[ord[i]] = exp((l[ord[i]] - l[ord[0]]) / t) / tot;
    free(ord);
}

static void test_distribution(void) {
    enum { V = 10 };
    const float l[V] = {2.0f, 1.5f, 1.0f, 0.7f, 0.2f, -0.3f, -1.0f, -1.6f, -2.5f, -4.0f};
    struct {
        float t, top_p, min_p;
        int top_k;
        const char *what;
    } cfg[] = {
        {1.0f, 1.0f, 0.0f, 0, "plain softmax"},
        {0.7f, 1.0f, 0.0f, 0, "temperature 0.7"},
        {1.0f, 1.0f, 0.05f, 0, "min_p 0.05 (fast path)"},
        {1.0f, 0.8f, 0.0f, 0, "top_p 0.8"},
        {1.3f, 1.0f, 0.0f, 4, "top_k 4"},
        {1.0f, 0.9f, 0.1f, 6, "top_k 6 + top_p 0.9 + min_p 0.1"},
    };
    const long N = getenv("MINKE_ASAN") ? 60000 : 200000;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        double prob[V];
        expected_probs(l, V, cfg[c].t, cfg[c].top_p, cfg[c].min_p, cfg[c].top_k, prob);
        sampler_params p = params(cfg[c].t, cfg[c].top_p, cfg[c].min_p, cfg[c].top_k, 1000 + c);
        int hit, dof;
        double x = sampled_chi2(&p, l, V, N, prob, &dof, &hit);
        /* 99.99th percentile of chi-square with <= 9 dof is about 33.7 */
        CHECK(!hit, "%s: sampled an excluded token", cfg[c].what);
        CHECK(x < 34.0, "%s: chi-square %.1f with %d dof", cfg[c].what, x, dof);
        printf("distribution %-34s chi2 %6.2f (dof %d), kept %d of %d\n", cfg[c].what, x, dof, dof + 1, V);
    }
}

/* Large flat candidate sets take the bucketed nucleus path. */
static void test_large_nucleus(void) {
    enum { V = 1500 };
    float *l = malloc(sizeof *l * V);
    double *prob = malloc(sizeof *prob * V);
    for (int i = 0; i < V; i++) l[i] = test_randf() * 2.0f;
    expected_probs(l, V, 1.0f, 0.6f, 0.0f, 0, prob);
    sampler_params p = params(1.0f, 0.6f, 0.0f, 0, 4242);
    const long N = getenv("MINKE_ASAN") ? 20000 : 60000;
    int hit, dof;
    double x = sampled_chi2(&p, l, V, N, prob, &dof, &hit);
    double limit = dof + 6.0 * sqrt(2.0 * dof);
    CHECK(!hit, "large nucleus: sampled outside top_p");
    CHECK(x < limit, "large nucleus: chi-square %.1f with %d dof (limit %.0f)", x, dof, limit);
    printf("distribution %-34s chi2 %6.1f (dof %d), kept %d of %d\n", "top_p 0.6 over a flat 1500 vocab", x, dof,
           dof + 1, V);
    free(l);
    free(prob);
}

static void test_tail_exclusion(void) {
    /* min_p: tokens below min_p * p_max are never drawn */
    enum { V = 2000 };
    float *l = malloc(sizeof *l * V);
    for (int i = 0; i < V; i++) l[i] = -5.0f - test_randf();
    l[17] = 3.0f;
    l[900] = 3.0f + logf(0.2f); /* p = 0.2 p_max: survives min_p 0.1 */
    l[901] = 3.0f + logf(0.05f); /* p = 0.05 p_max: excluded by min_p 0.1 */
    sampler_params p = params(1.0f, 1.0f, 0.1f, 0, 5);
    sampler *s = sampler_new(&p);
    int seen900 = 0, bad = 0;
    for (int i = 0; i < 20000; i++) {
        int32_t k = sampler_sample(s, l, V, 0);
        if (k == 900) seen900++;
        else if (k != 17) bad++;
    }
    CHECK(bad == 0, "min_p: %d draws from the excluded tail", bad);
    CHECK(seen900 > 2000 && seen900 < 4600, "min_p: survivor drawn %d times of 20000 (expect ~3333)", seen900);
    sampler_free(s);
    /* top_p with min_p 0 over a long flat tail: only the nucleus is drawn */
    for (int i = 0; i < V; i++) l[i] = -8.0f;
    l[3] = 4.0f;
    l[4] = 3.5f;
    p = params(1.0f, 0.5f, 0.0f, 0, 6);
    s = sampler_new(&p);
    bad = 0;
    for (int i = 0; i < 5000; i++) {
        int32_t k = sampler_sample(s, l, V, 0);
        if (k != 3) bad++;
    }
    CHECK(bad == 0, "top_p 0.5: %d draws outside the nucleus", bad);
    sampler_free(s);
    /* non-finite logits are never drawn */
    float f[5] = {NAN, 1.0f, INFINITY, 1.0f, -INFINITY};
    p = params(1.0f, 1.0f, 0.0f, 0, 8);
    s = sampler_new(&p);
    bad = 0;
    for (int i = 0; i < 2000; i++) {
        int32_t k = sampler_sample(s, f, 5, 0);
        if (k != 1 && k != 3) bad++;
    }
    CHECK(bad == 0, "non-finite logits drawn %d times", bad);
    p.top_p = 0.7f;
    sampler_set_params(s, &p);
    bad = 0;
    for (int i = 0; i < 2000; i++) {
        int32_t k = sampler_sample(s, f, 5, 0);
        if (k != 1 && k != 3) bad++;
    }
    CHECK(bad == 0, "non-finite logits drawn %d times (sorted path)", bad);
    sampler_free(s);
    free(l);
}

static void test_speed(void) {
    enum { V = 129280 };
    float *l = malloc(sizeof *l * V);
    for (int i = 0; i < V; i++) l[i] = test_randf() * 4 + (i % 97 == 0 ? 6 : 0);
    struct {
        sampler_params p;
        const char *what;
    } cfg[] = {
        {params(1.0f, 1.0f, 0.05f, 0, 1), "defaults (min_p 0.05)"},
        {params(0.8f, 0.95f, 0.05f, 40, 2), "top_k 40, top_p 0.95"},
        {params(1.0f, 0.9f, 0.0f, 0, 3), "top_p 0.9, min_p 0"},
    };
    int n = getenv("MINKE_ASAN") ? 20 : 200;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        sampler *s = sampler_new(&cfg[c].p);
        struct timespec a, b;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
        for (int i = 0; i < n; i++) {
            int32_t k = sampler_sample(s, l, V, 0);
            CHECK(k >= 0 && k < V, "token in range");
        }
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
        double us = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 / n;
        printf("speed %-26s %8.1f us/token (CPU) over %d vocab\n", cfg[c].what, us, V);
        sampler_free(s);
    }
    free(l);
}

/* The candidates a backend would send for plan 2: finite logits >= lmax +
 * floor_off, increasing ids. Against sampler_sample on the same logits with
 * a sampler of the same seed: every draw the same token. Logits: random,
 * sharp (a few candidates) and flat (thousands), with ties, NaN and +-inf. */
static void test_candidates(void) {
    enum { V = 20000, DRAWS = 200 };
    float *l = malloc(sizeof *l * V), *cv = malloc(sizeof *cv * V);
    int32_t *ci = malloc(sizeof *ci * V);
    const float temps[] = {1.0f, 0.6f, 1.7f, 0.0f}, minps[] = {0.05f, 0.2f, 0.001f, 0.0f};
    int plans[3] = {0, 0, 0}, same = 1, maxn = 0;
    for (int shape = 0; shape < 3; shape++)
        for (int ti = 0; ti < 4; ti++)
            for (int mi = 0; mi < 4; mi++) {
                const float spread = shape == 0 ? 8.0f : shape == 1 ? 40.0f : 0.5f;
                for (int i = 0; i < V; i++) l[i] = (test_randf() * 2 - 1) * spread;
                l[17] = l[9000] = 3.0f * spread;                        /* a tie for the best */
                l[5] = NAN; l[6] = INFINITY; l[7] = -INFINITY;
                for (int i = 100; i < 140; i++) l[i] = l[9000] - 0.01f * (float)(i - 100);   /* near the top */
                sampler_params p = params(temps[ti], 1.0f, minps[mi], 0, 1234 + shape * 16 + ti * 4 + mi);
                sampler *a = sampler_new(&p), *b = sampler_new(&p);
                float off = 0;
                const int plan = sampler_cands_plan(b, 0, &off);
                plans[plan]++;
                const int32_t amax = sampler_argmax(l, V);
                int n = 0;
                if (plan == 2)
                    for (int i = 0; i < V; i++)
                        if (isfinite(l[i]) && l[i] >= l[amax] + off) { ci[n] = i; cv[n] = l[i]; n++; }
                if (n > maxn) maxn = n;
                for (int d = 0; d < DRAWS && plan; d++) {
                    const int32_t ta = sampler_sample(a, l, V, 0);
                    const int32_t tb = sampler_sample_cands(b, ci, cv, n, amax, l[amax], 0);
                    if (ta != tb) same = 0;
                }
                /* force_greedy: plan 1 whatever the settings */
                if (sampler_cands_plan(b, 1, &off) != 1 || sampler_sample_cands(b, ci, cv, n, amax, l[amax], 1) != amax)
                    same = 0;
                sampler_free(a); sampler_free(b);
            }
    CHECK(same, "sampling from the candidates picks the same tokens as from all logits");
    CHECK(plans[1] == 12 && plans[2] == 27 && plans[0] == 9, "plans: %d greedy (T 0), %d candidates, %d whole (min_p 0)",
          plans[1], plans[2], plans[0]);
    CHECK(maxn > 1000, "a flat distribution gives many candidates (%d)", maxn);
    /* no finite logit: token 0, as sampler_sample */
    sampler_params p = params(1.0f, 1.0f, 0.05f, 0, 5);
    sampler *c = sampler_new(&p);
    CHECK(sampler_sample_cands(c, ci, cv, 0, -1, 0.0f, 0) == 0, "no finite logit: token 0");
    sampler_free(c);
    free(l); free(cv); free(ci);
}

int main(void) {
    test_rand_seed(99);
    test_defaults();
    test_greedy();
    test_seed();
    test_distribution();
    test_large_nucleus();
    test_tail_exclusion();
    test_speed();
    test_candidates();
    return test_finish("test_sample");
}
