/* sample.c: next-token sampling (serving.md §3.1-3.2).
 *
 * Same selection rules as ds4 (top-k, temperature, top-p, min-p relative to
 * the best token) and the same xorshift64* generator, so a seeded request is
 * reproducible. The vocabulary (129k) is never fully sorted: min-p bounds
 * the candidates to logits >= max + T*ln(min_p), and when that bound does not
 * apply (min_p = 0) the candidates are found by partial selection, growing
 * the selected prefix until it covers top_p.
 */
#include "engine/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sampler {
    sampler_params p;
    uint64_t rng;
    int32_t *idx; /* scratch: candidate ids */
    float *w;     /* scratch: candidate weights */
    int cap;
};

sampler_params sampler_params_default(void) {
    sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = SAMPLER_DEFAULT_TEMPERATURE;
    p.top_p = SAMPLER_DEFAULT_TOP_P;
    p.min_p = SAMPLER_DEFAULT_MIN_P;
    p.top_k = SAMPLER_DEFAULT_TOP_K;
    return p;
}

sampler_params sampler_params_for_mode(const sampler_params *client, int thinking) {
    sampler_params p = client ? *client : sampler_params_default();
    if (thinking) {
        sampler_params d = sampler_params_default();
        d.seed = p.seed;
        d.greedy = p.greedy;
        p = d;
    }
    return p;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void sampler_seed(sampler *s, uint64_t seed) {
    if (!seed) {
        /* unseeded: clock, an address and a counter, mixed */
        static uint64_t counter;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)s ^
                     (++counter << 32);
        seed = splitmix64(&x);
    }
    s->rng = seed ? seed : 0x9E3779B97F4A7C15ull;
}

uint64_t sampler_rng_next(sampler *s) {
    /* xorshift64* as in ds4 (sample_rng_next) */
    uint64_t x = s->rng ? s->rng : 0x9E3779B97F4A7C15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    s->rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [0, 1) with 24 bits, as ds4 draws it. */
static float rng_uniform(sampler *s) {
    return (float)((sampler_rng_next(s) >> 40) & 0xFFFFFF) / 16777216.0f;
}

static void sanitize(sampler_params *p) {
    if (!(p->top_p > 0.0f) || p->top_p > 1.0f) p->top_p = 1.0f;
    if (!(p->min_p >= 0.0f)) p->min_p = 0.0f;
    if (p->min_p > 1.0f) p->min_p = 1.0f;
    if (p->top_k < 0) p->top_k = 0;
    if (p->top_k > SAMPLER_MAX_TOP_K) p->top_k = SAMPLER_MAX_TOP_K;
    if (!(p->temperature == p->temperature)) p->temperature = 0.0f;
}

sampler *sampler_new(const sampler_params *p) {
    sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = p ? *p : sampler_params_default();
    sanitize(&s->p);
    sampler_seed(s, s->p.seed);
    return s;
}

void sampler_set_params(sampler *s, const sampler_params *p) {
    s->p = *p;
    sanitize(&s->p);
}

void sampler_free(sampler *s) {
    if (!s) return;
    free(s->idx);
    free(s->w);
    free(s);
}

int32_t sampler_argmax(const float *logits, int n_vocab) {
    int32_t best = -1;
    float bv = 0;
    for (int i = 0; i < n_vocab; i++) {
        float v = logits[i];
        if (!isfinite(v)) continue;
        if (best < 0 || v > bv) { best = i; bv = v; }
    }
    return best;
}

static int reserve(sampler *s, int n) {
    if (n <= s->cap) return 0;
    int32_t *ni = realloc(s->idx, sizeof *ni * (size_t)n);
    if (!ni) return -1;
    s->idx = ni;
    float *nw = realloc(s->w, sizeof *nw * (size_t)n);
    if (!nw) return -1;
    s->w = nw;
    s->cap = n;
    return 0;
}

/* Orders candidate ids by logit, descending, lower id first on ties. */
static int before(const float *l, int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); }

/* Sorts idx[0..n) by logit, descending (quicksort; insertion sort when small). */
static void sort_desc(const float *l, int32_t *idx, int n) {
    while (n > 24) {
        int32_t pivot = idx[n / 2];
        int i = 0, j = n - 1;
        while (i <= j) {
            while (before(l, idx[i], pivot)) i++;
            while (before(l, pivot, idx[j])) j--;
            if (i <= j) {
                int32_t t = idx[i];
                idx[i] = idx[j];
                idx[j] = t;
                i++;
                j--;
            }
        }
        /* recurse into the smaller side, loop on the larger */
        if (j + 1 < n - i) {
            sort_desc(l, idx, j + 1);
            idx += i;
            n -= i;
        } else {
            sort_desc(l, idx + i, n - i);
            n = j + 1;
        }
    }
    for (int a = 1; a < n; a++) {
        int32_t v = idx[a];
        int j = a;
        while (j > 0 && before(l, v, idx[j - 1])) { idx[j] = idx[j - 1]; j--; }
        idx[j] = v;
    }
}

static int32_t draw(sampler *s, const int32_t *idx, const float *w, int n) {
    double total = 0;
    for (int i = 0; i < n; i++) total += w[i];
    double r = (double)rng_uniform(s) * total;
    for (int i = 0; i < n; i++) {
        r -= w[i];
        if (r <= 0) return idx[i];
    }
    return idx[n - 1];
}

/* The k best finite logits (any order) into out via a min-heap; returns count. */
static int top_k_heap(const float *l, int n_vocab, int k, int32_t *heap) {
    int n = 0;
    for (int i = 0; i < n_vocab; i++) {
        if (!isfinite(l[i])) continue;
        if (n < k) {
            int c = n++;
            heap[c] = i;
            while (c > 0 && before(l, heap[(c - 1) / 2], heap[c])) { /* sift up: worst on top */
                int32_t t = heap[c];
                heap[c] = heap[(c - 1) / 2];
                heap[(c - 1) / 2] = t;
                c = (c - 1) / 2;
            }
        } else if (before(l, i, heap[0])) {
            heap[0] = i;
            int c = 0;
            for (;;) {
                int a = 2 * c + 1, b = a + 1, w = c;
                if (a < n && before(l, heap[w], heap[a])) w = a;
                if (b < n && before(l, heap[w], heap[b])) w = b;
                if (w == c) break;
                int32_t t = heap[c];
                heap[c] = heap[w];
                heap[w] = t;
                c = w;
            }
        }
    }
    return n;
}

/* Walks idx[from..m) (sorted) adding weights to w[] until min-p stops it or
 * the cumulative probability (starting at cum) reaches top_p. Returns the
 * prefix length counted from idx[0]. */
static int nucleus_prefix(const float *l, const int32_t *idx, int from, int m, float lmax, float inv_t, float min_p,
                          float top_p, double total, double cum, float *w) {
    int take = from;
    for (; take < m; take++) {
        float wi = expf((l[idx[take]] - lmax) * inv_t);
        if (take > 0 && wi < min_p) return take;
        w[take] = wi;
        cum += wi / total;
        if (cum >= top_p) return take + 1;
    }
    return take;
}

/* Large candidate sets (flat distributions, min_p 0): bucket the candidates
 * by logit, take whole buckets from the top while they stay below top_p, and
 * sort only the bucket where the nucleus ends. */
static int nucleus_by_buckets(sampler *s, const float *l, int32_t *idx, int m, float lmax, float inv_t, float min_p,
                              float top_p, double total) {
    enum { B = 2048 };
    double mass[B];
    int cnt[B];
    memset(mass, 0, sizeof mass);
    memset(cnt, 0, sizeof cnt);
    float lo = lmax;
    for (int i = 0; i < m; i++)
        if (l[idx[i]] < lo) lo = l[idx[i]];
    float span = lmax - lo;
    if (!(span > 0)) span = 1;
    float scale = (B - 1) / span;
#define BUCKET(v) ((int)((lmax - (v)) * scale))
    for (int i = 0; i < m; i++) {
        float v = l[idx[i]];
        int b = BUCKET(v);
        mass[b] += exp((double)(v - lmax) * inv_t) / total;
        cnt[b]++;
    }
    double cum = 0;
    int stop = 0;
    for (; stop < B - 1; stop++) {
        if (cum + mass[stop] >= top_p) break;
        cum += mass[stop];
    }
    /* order: buckets < stop first, then bucket stop (sorted), rest after */
    int a = 0;
    for (int i = 0; i < m; i++)
        if (BUCKET(l[idx[i]]) < stop) {
            int32_t t = idx[a];
            idx[a++] = idx[i];
            idx[i] = t;
        }
    int e = a;
    for (int i = a; i < m; i++)
        if (BUCKET(l[idx[i]]) == stop) {
            int32_t t = idx[e];
            idx[e++] = idx[i];
            idx[i] = t;
        }
#undef BUCKET
    sort_desc(l, idx + a, e - a);
    /* the whole buckets are in (their min-p check is the floor already applied) */
    for (int i = 0; i < a; i++) s->w[i] = expf((l[idx[i]] - lmax) * inv_t);
    return nucleus_prefix(l, idx, a, e, lmax, inv_t, min_p, top_p, total, cum, s->w);
}

static int is_greedy(const sampler_params *p, int force_greedy) {
    return force_greedy || p->greedy || p->temperature <= 0.0f || p->top_k == 1;
}

/* With min_p > 0 only logits >= lmax + T*ln(min_p) can be chosen (their
 * weight relative to the best is >= min_p). One function for the full scan
 * and the candidate one, so both round it alike. */
static float __attribute__((noinline)) min_p_floor(const sampler_params *p, float lmax) {
    return p->min_p > 0.0f ? lmax + p->temperature * logf(p->min_p) : -INFINITY;
}

/* The fast path (top_k 0, top_p 1): over the logits vals[0..n) of token ids
 * ids[0..n) (NULL: ids 0..n-1) in increasing id order, the candidates and
 * their weights relative to the best token, then one draw. */
static int32_t sample_fast(sampler *s, const int32_t *ids, const float *vals, int n, int32_t amax, float lmax) {
    const sampler_params *p = &s->p;
    const float inv_t = 1.0f / p->temperature;
    const float floor_logit = min_p_floor(p, lmax);
    if (reserve(s, 1024)) return amax;
    int m = 0;
    for (int i = 0; i < n; i++) {
        float v = vals[i];
        if (!(v >= floor_logit) || !isfinite(v)) continue;
        float w = expf((v - lmax) * inv_t);
        if (w < p->min_p) continue;
        if (m == s->cap && reserve(s, s->cap * 2)) break;
        s->idx[m] = ids ? ids[i] : i;
        s->w[m] = w;
        m++;
    }
    return m ? draw(s, s->idx, s->w, m) : amax;
}

int sampler_cands_plan(const sampler *s, int force_greedy, float *floor_off) {
    const sampler_params *p = &s->p;
    if (is_greedy(p, force_greedy)) return 1;
    if (p->top_k != 0 || p->top_p < 1.0f || !(p->min_p > 0.0f)) return 0;
    /* below the floor by a margin: the set is a superset of what min_p_floor
     * admits whatever the rounding; sample_fast applies the exact test */
    const float off = p->temperature * logf(p->min_p);
    *floor_off = off - (fabsf(off) * 1e-3f + 1e-3f);
    if (!isfinite(*floor_off)) return 0;
    return 2;
}

int32_t sampler_sample_cands(sampler *s, const int32_t *ids, const float *vals, int n, int32_t amax, float lmax,
                             int force_greedy) {
    if (amax < 0) return 0;
    if (is_greedy(&s->p, force_greedy)) return amax;
    return sample_fast(s, ids, vals, n, amax, lmax);
}

int32_t sampler_sample(sampler *s, const float *logits, int n_vocab, int force_greedy) {
    if (n_vocab <= 0) return -1;
    const sampler_params *p = &s->p;
    int32_t amax = sampler_argmax(logits, n_vocab);
    if (amax < 0) return 0;
    if (is_greedy(p, force_greedy)) return amax;
    const float lmax = logits[amax];
    const float inv_t = 1.0f / p->temperature;

    /* Candidates: only logits >= the min-p floor can be chosen; skip the rest early. */
    float floor_logit = min_p_floor(p, lmax);

    /* fast path: one pass, weights relative to the best token */
    if (p->top_k == 0 && p->top_p >= 1.0f) return sample_fast(s, NULL, logits, n_vocab, amax, lmax);

    /* general path: the kept set (top-k or all finite) and its normaliser,
     * then the prefix in logit order bounded by min-p and top-p */
    int32_t *idx;
    int n = 0;
    if (p->top_k > 0) {
        if (reserve(s, p->top_k)) return amax;
        idx = s->idx;
        n = top_k_heap(logits, n_vocab, p->top_k, idx);
    } else {
        if (reserve(s, n_vocab)) return amax;
        idx = s->idx;
        for (int i = 0; i < n_vocab; i++)
            if (isfinite(logits[i])) idx[n++] = i;
    }
    double total = 0;
    for (int i = 0; i < n; i++) total += exp((double)(logits[idx[i]] - lmax) * inv_t);
    /* only candidates above the min-p floor can enter the prefix */
    int m = 0;
    for (int i = 0; i < n; i++)
        if (logits[idx[i]] >= floor_logit) {
            int32_t t = idx[m];
            idx[m++] = idx[i];
            idx[i] = t;
        }
    int take;
    if (m <= 1024) {
        sort_desc(logits, idx, m);
        take = nucleus_prefix(logits, idx, 0, m, lmax, inv_t, p->min_p, p->top_p, total, 0.0, s->w);
    } else {
        take = nucleus_by_buckets(s, logits, idx, m, lmax, inv_t, p->min_p, p->top_p, total);
    }
    if (take <= 0) return amax;
    return draw(s, idx, s->w, take);
}
