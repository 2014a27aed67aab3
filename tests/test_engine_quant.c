/* test_engine_quant.c: the CPU engine on quantized GGUFs of tiny-a.
 *
 * For each conversion policy (q2 = ds4's IQ2_XXS/Q2_K experts + Q8_0 dense,
 * q4 = Q4_K experts, mxfp4 = lossless FP4 experts) the quantized file is
 * converted back to an F32 twin with `minke convert in.gguf --experts f32
 * --dense f32`, which holds exactly the dequantized weights. Then:
 *   - default numerics (MINKE_ACT_EXACT: weights decoded exactly, f32
 *     activations, the F32 kernels; spec §16.3): issue #3's bound, logits
 *     within 1e-2 x max|logit| of the twin's. The CPU engine gives the twin's
 *     logits bit for bit (src/cpu/matmul.c), which is asserted too: it proves
 *     the weights are bound and decoded right, expert offsets right, and the
 *     prefill takes the same kernels as an F32 file;
 *   - ds4 numerics (MINKE_ACT_Q8: activations quantized to Q8_0/Q8_K, spec
 *     §16.1): the logits differ only through activation quantization, but the
 *     rounding (~0.5 % per product, ~2 % after one layer) compounds and flips
 *     discrete choices (indexer top-4, router top-6) of this random 6-layer
 *     model, so the bound does not hold there (docs/numerics.md); asserted:
 *     argmax agreement >= 75 % and mean KL <= 0.05 nats against the twin;
 *     the max differences are printed (test_engine_pinned.c pins the choices);
 *   - default numerics: token-by-token decode and chunks of 7 give one
 *     prefill's logits bit for bit (first policy of each binary);
 *   - q2 against the original F32 conversion, in both numerics: top-1
 *     agreement and mean KL printed (the 2-bit experts are a real loss).
 */
#include "engine_test_util.h"

/* This file runs q2; test_engine_quant_k.c includes it for q4 and mxfp4 so
 * each binary stays well under a minute. */
#ifndef QUANT_FROM
#define QUANT_FROM 0
#define QUANT_TO 1
#define QUANT_TEST_NAME "test_engine_quant"
#endif

static double mean_kl(const float *p_logits, const float *q_logits, int T, int V) {
    double total = 0;
    for (int t = 0; t < T; t++) {
        const float *a = p_logits + (size_t)t * V, *b = q_logits + (size_t)t * V;
        double ma = a[0], mb = b[0], sa = 0, sb = 0;
        for (int i = 1; i < V; i++) { if (a[i] > ma) ma = a[i]; if (b[i] > mb) mb = b[i]; }
        for (int i = 0; i < V; i++) { sa += exp(a[i] - ma); sb += exp(b[i] - mb); }
        double la = log(sa), lb = log(sb), kl = 0;
        for (int i = 0; i < V; i++) {
            double lpa = a[i] - ma - la, lpb = b[i] - mb - lb;
            kl += exp(lpa) * (lpa - lpb);
        }
        total += kl;
    }
    return total / T;
}

static double top1(const float *a, const float *b, int T, int V) {
    int n = 0;
    for (int t = 0; t < T; t++) n += tu_argmax(a + (size_t)t * V, V) == tu_argmax(b + (size_t)t * V, V);
    return (double)n / T;
}

/* Token-by-token decode logits, or prefill in chunks of `chunk` (> 1). */
static float *stepped_logits(const char *path, const int32_t *tok, int T, int chunk) {
    minke_model_params p;
    minke_model_params_default(&p);
    p.path = path;
    p.sims = 0;
    p.n_threads = 2;
    minke_model *m = minke_model_open(&p);
    if (!m) { fprintf(stderr, "open %s: %s\n", path, minke_last_error()); return NULL; }
    int V = minke_model_get_info(m)->n_vocab;
    minke_session *s = minke_session_create(m, T);
    float *l = malloc(sizeof(float) * (size_t)T * V);
    for (int pos = 0; l && pos < T;) {
        int n = chunk < T - pos ? chunk : T - pos, rc;
        if (chunk == 1) {
            rc = minke_decode(s, tok[pos]);
            if (rc == 0) memcpy(l + (size_t)pos * V, minke_logits(s), sizeof(float) * V);
        } else {
            rc = minke_prefill(s, tok + pos, n, l + (size_t)pos * V);
        }
        if (rc != 0) { fprintf(stderr, "step: %s\n", minke_last_error()); free(l); l = NULL; }
        pos += n;
    }
    minke_session_free(s);
    minke_model_close(m);
    return l;
}

/* act < 0: the default numerics (params left as minke_model_params_default sets them). */
static float *logits_of(const char *path, int act, const int32_t *tok, int T) {
    minke_model_params p;
    minke_model_params_default(&p);
    p.path = path;
    p.sims = 0;
    p.n_threads = 2;
    if (act >= 0) p.act = act;
    minke_model *m = minke_model_open(&p);
    if (!m) { fprintf(stderr, "open %s: %s\n", path, minke_last_error()); return NULL; }
    float *l = tu_logits(m, tok, T, 0);
    minke_model_close(m);
    return l;
}

int main(void) {
    int asan = getenv("MINKE_ASAN") != NULL;
    const char *dir = test_tmpdir();
    size_t nb = 0;
    int32_t *tok = (int32_t *)test_read_file(TINY_A_DIR "/tokens.i32", &nb);
    if (!tok) { fprintf(stderr, "cannot read tokens\n"); return 1; }
    int T = (int)(nb / 4), V = 1024;
    char f32[1200];
    snprintf(f32, sizeof f32, "%s/tiny-a-f32.gguf", dir);
    if (tu_convert(TINY_A_DIR, f32, "--experts f32 --dense f32") != 0) return 1;
    float *orig = logits_of(f32, -1, tok, T);
    if (!orig) return 1;

    struct { const char *name, *args; } pol[] = {
        {"q2", ""}, {"q4", "--experts q4k"}, {"mxfp4", "--experts mxfp4"},
    };
    int stepped_done = 0;
    for (int i = QUANT_FROM; i < QUANT_TO; i++) {
        if (asan && i < 2) continue;   /* K-quant conversion is slow under ASan */
        char q[1200], twin[1200];
        snprintf(q, sizeof q, "%s/tiny-a-%s.gguf", dir, pol[i].name);
        snprintf(twin, sizeof twin, "%s/tiny-a-%s-f32.gguf", dir, pol[i].name);
        if (tu_convert(TINY_A_DIR, q, pol[i].args) != 0 || tu_convert(q, twin, "--experts f32 --dense f32") != 0) {
            CHECK(0, "%s conversion", pol[i].name);
            continue;
        }
        /* lx: default numerics (exact); lq: ds4 numerics; lt: the twin (F32 weights, so act is moot) */
        float *lx = logits_of(q, -1, tok, T), *lq = logits_of(q, MINKE_ACT_Q8, tok, T), *lt = logits_of(twin, -1, tok, T);
        if (!lq || !lx || !lt) { CHECK(0, "%s forward", pol[i].name); free(lq); free(lx); free(lt); continue; }
        size_t TV = (size_t)T * V;
        float mx = tu_maxabs(lt, TV);
        float dx = tu_maxdiff(lx, lt, TV), d0 = tu_maxdiff(lq, lt, V), da = tu_maxdiff(lq, lt, TV);
        int same = memcmp(lx, lt, sizeof(float) * TV) == 0;
        double ag = top1(lq, lt, T, V), kl = mean_kl(lt, lq, T, V);
        printf("%-6s default (exact) numerics vs F32 twin: max|diff| %.3g of max|logit| (%s), top-1 %.3f, mean KL %.3g\n",
               pol[i].name, dx / mx, same ? "bit-identical" : "not bit-identical", top1(lx, lt, T, V),
               mean_kl(lt, lx, T, V));
        printf("%-6s ds4 (q8) numerics vs F32 twin: pos 0 %.3g, all %.3g of max|logit|, top-1 %.3f, mean KL %.3g\n",
               pol[i].name, d0 / mx, da / mx, ag, kl);
        CHECK(dx <= 1e-2f * mx, "%s: default-numerics logits differ from the twin by %g x max|logit| (issue #3: <= 1e-2)",
              pol[i].name, dx / mx);
        CHECK(same, "%s: default-numerics logits are not bit-identical to the F32 twin's (max|diff| %g x max|logit|)",
              pol[i].name, dx / mx);
        CHECK(ag >= 0.75, "%s: q8 top-1 agreement %.3f", pol[i].name, ag);
        CHECK(kl <= 0.05, "%s: q8 mean KL %.4g", pol[i].name, kl);
        if (!stepped_done) {   /* once per binary, on its first policy run (mxfp4 under ASan) */
            stepped_done = 1;
            /* the exact path's multi-token kernels equal its one-token dots bit for bit */
            float *ld = stepped_logits(q, tok, T, 1), *lc = stepped_logits(q, tok, T, 7);
            CHECK(ld && memcmp(ld, lx, sizeof(float) * TV) == 0, "%s: default numerics, token-by-token decode "
                  "differs from one prefill (max|diff| %g)", pol[i].name, ld ? tu_maxdiff(ld, lx, TV) : -1.0f);
            CHECK(lc && memcmp(lc, lx, sizeof(float) * TV) == 0, "%s: default numerics, chunks of 7 differ from "
                  "one prefill (max|diff| %g)", pol[i].name, lc ? tu_maxdiff(lc, lx, TV) : -1.0f);
            printf("%-6s default numerics: decode and chunks of 7 %s one prefill\n", pol[i].name,
                   ld && lc && !memcmp(ld, lx, sizeof(float) * TV) && !memcmp(lc, lx, sizeof(float) * TV)
                       ? "bit-identical to" : "DIFFER from");
            free(ld); free(lc);
        }
        if (i == 0) {
            printf("q2 (default numerics) vs original F32 model: top-1 agreement %.3f, mean KL %.4f nats\n",
                   top1(lx, orig, T, V), mean_kl(orig, lx, T, V));
            printf("q2 (ds4 q8 numerics)  vs original F32 model: top-1 agreement %.3f, mean KL %.4f nats\n",
                   top1(lq, orig, T, V), mean_kl(orig, lq, T, V));
        }
        free(lq); free(lx); free(lt);
    }
    free(orig);
    free(tok);
    return test_finish(QUANT_TEST_NAME);
}
