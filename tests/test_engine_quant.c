/* test_engine_quant.c: the CPU engine on quantized GGUFs of tiny-a.
 *
 * For each conversion policy (q2 = ds4's IQ2_XXS/Q2_K experts + Q8_0 dense,
 * q4 = Q4_K experts, mxfp4 = lossless FP4 experts) the quantized file is
 * converted back to an F32 twin with `minke convert in.gguf --experts f32
 * --dense f32`, which holds exactly the dequantized weights. Then:
 *   - with f32 activations (minke_model_params.f32_activations) the quantized
 *     file must give the twin's logits to 1e-4 (weights bound and decoded
 *     right, expert offsets right, dots consistent with dequantization);
 *   - with ds4 numerics (activations quantized to Q8_0/Q8_K, spec §16) the
 *     logits differ only through activation quantization: argmax agreement
 *     >= 75 % and mean KL <= 0.05 nats against the twin. The activation
 *     rounding (~0.5 % per product, ~2 % after one layer) compounds and flips
 *     discrete choices (indexer top-4, router top-6) of this random 6-layer
 *     model (e.g. q4 at position 0, layer 5), so a 1e-2 max-abs bound is not a
 *     property of the numerics; the max differences are printed.
 *     (test_engine_pinned.c pins the twin's choices: ~0.04 x max|logit| remain.)
 *   - q2 against the original F32 conversion: top-1 agreement and mean KL printed.
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

static float *logits_of(const char *path, int f32_act, const int32_t *tok, int T) {
    minke_model_params p;
    minke_model_params_default(&p);
    p.path = path;
    p.sims = 0;
    p.n_threads = 2;
    p.act = f32_act ? MINKE_ACT_EXACT : MINKE_ACT_Q8;
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
    float *orig = logits_of(f32, 0, tok, T);
    if (!orig) return 1;

    struct { const char *name, *args; } pol[] = {
        {"q2", ""}, {"q4", "--experts q4k"}, {"mxfp4", "--experts mxfp4"},
    };
    for (int i = QUANT_FROM; i < QUANT_TO; i++) {
        if (asan && i < 2) continue;   /* K-quant conversion is slow under ASan */
        char q[1200], twin[1200];
        snprintf(q, sizeof q, "%s/tiny-a-%s.gguf", dir, pol[i].name);
        snprintf(twin, sizeof twin, "%s/tiny-a-%s-f32.gguf", dir, pol[i].name);
        if (tu_convert(TINY_A_DIR, q, pol[i].args) != 0 || tu_convert(q, twin, "--experts f32 --dense f32") != 0) {
            CHECK(0, "%s conversion", pol[i].name);
            continue;
        }
        float *lq = logits_of(q, 0, tok, T), *lx = logits_of(q, 1, tok, T), *lt = logits_of(twin, 0, tok, T);
        if (!lq || !lx || !lt) { CHECK(0, "%s forward", pol[i].name); continue; }
        size_t TV = (size_t)T * V;
        float mx = tu_maxabs(lt, TV);
        float dx = tu_maxdiff(lx, lt, TV), d0 = tu_maxdiff(lq, lt, V), da = tu_maxdiff(lq, lt, TV);
        double ag = top1(lq, lt, T, V), kl = mean_kl(lt, lq, T, V);
        printf("%-6s f32-activations vs F32 twin: %.3g of max|logit|\n", pol[i].name, dx / mx);
        printf("%-6s ds4 numerics vs F32 twin: pos 0 %.3g, all %.3g of max|logit|, top-1 %.3f, mean KL %.3g\n",
               pol[i].name, d0 / mx, da / mx, ag, kl);
        CHECK(dx <= 1e-4f * mx, "%s: f32-activation logits differ from the twin by %g", pol[i].name, dx / mx);
        CHECK(ag >= 0.75, "%s: top-1 agreement %.3f", pol[i].name, ag);
        CHECK(kl <= 0.05, "%s: mean KL %.4g", pol[i].name, kl);
        if (i == 0)
            printf("q2 vs original F32 model: top-1 agreement %.3f, mean KL %.4f nats\n", top1(lq, orig, T, V),
                   mean_kl(orig, lq, T, V));
        free(lq); free(lx); free(lt);
    }
    free(orig);
    free(tok);
    return test_finish(QUANT_TEST_NAME);
}
