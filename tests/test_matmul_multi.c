/* test_matmul_multi.c: the multi-token product (src/quant/quant_multi.h)
 * must give bit-identical results to the per-pair dot of the type traits,
 * for every weight type, on the AVX-512 (where the CPU has it), AVX2 and
 * scalar paths, for token
 * counts around the kernel tile widths and row counts around the row block
 * (the engine relies on it: chunked prefill == token-by-token decode).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "quant/quant_multi.h"
#include "testutil.h"

static float gauss(void)
{
    float u1 = (test_rand() + 1.0f) / 4294967296.0f, u2 = test_randf();
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

static const int weight_types[] = {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
    GGML_TYPE_Q4_K, GGML_TYPE_Q2_K, GGML_TYPE_IQ2_XXS, GGML_TYPE_MXFP4,
};

/* cols for a type: several blocks, including an odd block count (Q8_0's
 * even/odd accumulators) and, for the float formats, a tail under 16 */
static int64_t pick_cols(const quant_traits *tr, int variant)
{
    if (tr->blck == 1) return variant ? 16 * 5 + 7 : 128;
    if (tr->blck == 32) return variant ? 32 * 7 : 32 * 8;
    return variant ? 256 * 3 : 256 * 2;
}

static int mismatches;

static void check_type(int type, int variant, int rows, int T, int simd)
{
    const quant_traits *tr = quant_get(type);
    const quant_traits *at = quant_get(tr->vec_dot_type);
    int64_t cols = pick_cols(tr, variant);
    size_t rb = (size_t)quant_row_bytes(type, cols);
    size_t xb = (size_t)quant_row_bytes(tr->vec_dot_type, cols);
    size_t xstride = xb + 2 * at->bytes;       /* rows not packed: the stride is honoured */
    int64_t ys = rows + 3;
    float *f = malloc(sizeof(float) * (size_t)cols);
    uint8_t *W = malloc(rb * (size_t)rows), *X = calloc(xstride, (size_t)T);
    float *y = malloc(sizeof(float) * (size_t)ys * (size_t)T);
    for (int r = 0; r < rows; r++) {
        /* rows of different magnitudes, some with outliers */
        float sc = 0.01f + 2.0f * test_randf();
        for (int64_t i = 0; i < cols; i++) f[i] = gauss() * sc * (test_rand() % 61 == 0 ? 30.0f : 1.0f);
        tr->quant(f, W + (size_t)r * rb, cols);
    }
    for (int t = 0; t < T; t++) {
        float sc = 0.001f + 10.0f * test_randf();
        for (int64_t i = 0; i < cols; i++) f[i] = gauss() * sc;
        if (t % 5 == 2) f[test_rand() % cols] = 40.0f * sc;
        CHECK(quant_quantize_activation(tr->vec_dot_type, f, X + (size_t)t * xstride, cols) == 0, "quantize act");
    }
    for (size_t i = 0; i < (size_t)ys * (size_t)T; i++) y[i] = NAN;
    quant_use_simd = simd;
    int rc = quant_matmul_prequant(type, W, rb, rows, cols, X, xstride, T, y, ys);
    CHECK(rc == 0, "%s: rc %d", tr->name, rc);
    int bad = 0;
    for (int t = 0; t < T; t++) {
        for (int r = 0; r < rows; r++) {
            float ref;
            tr->dot(cols, &ref, W + (size_t)r * rb, X + (size_t)t * xstride);
            float got = y[(int64_t)t * ys + r];
            if (memcmp(&ref, &got, sizeof ref) != 0) {
                if (bad++ < 3)
                    fprintf(stderr, "  %s simd=%d cols=%lld rows=%d T=%d: y[%d][%d] = %.9g, dot %.9g\n", tr->name,
                            simd, (long long)cols, rows, T, t, r, got, ref);
            }
        }
        for (int64_t r = rows; r < ys; r++)
            CHECK(isnan(y[(int64_t)t * ys + r]), "%s wrote past rows", tr->name);
    }
    CHECK(bad == 0, "%s simd=%d avx512=%d rows=%d T=%d: %d of %d results differ from the per-pair dot", tr->name, simd,
          quant_multi_use_avx512, rows, T, bad, rows * T);
    mismatches += bad;
    quant_use_simd = 1;
    free(f); free(W); free(X); free(y);
}

int main(void)
{
    test_rand_seed(7);
    static const int Ts[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 17};
    static const int rows_list[] = {1, 5, 16, 19, 37};
    int ntypes = (int)(sizeof weight_types / sizeof weight_types[0]);
    /* path 2: AVX2 + AVX-512 where the CPU has it, 1: AVX2 kernels only, 0: scalar */
    for (int path = 2; path >= 0; path--) {
        int simd = path > 0;
        quant_multi_use_avx512 = path == 2;
        for (int k = 0; k < ntypes; k++) {
            if (path == 2) printf("  %-8s multi-token kernel: %s\n", quant_name(weight_types[k]),
                             quant_matmul_has_kernel(weight_types[k]) ? "yes" : "no (per-pair dots)");
            for (int variant = 0; variant < 2; variant++)
                for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
                    check_type(weight_types[k], variant, rows_list[(ti + (size_t)k) % 5], Ts[ti], simd);
        }
    }
    quant_multi_use_avx512 = 1;
    /* every weight type has its own kernel on the scalar path (F32 has
     * nothing to decode and keeps the per-pair dot there) and, where
     * compiled in, on the AVX2 one */
#ifdef __AVX2__
    const int avx2_built = 1;
#else
    const int avx2_built = 0;
#endif
    for (int simd = 0; simd <= 1; simd++) {
        quant_use_simd = simd;
        int scalar = !simd || !avx2_built;
        for (int k = 0; k < ntypes; k++)
            CHECK(quant_matmul_has_kernel(weight_types[k]) || (scalar && weight_types[k] == GGML_TYPE_F32),
                  "%s simd=%d: no multi-token kernel", quant_name(weight_types[k]), simd);
    }
    quant_use_simd = 1;
    /* bad input: no dot / cols not whole blocks -> -1, nothing written */
    float y = 1.0f;
    uint8_t buf[64] = {0};
    CHECK(quant_matmul_prequant(GGML_TYPE_I32, buf, 4, 1, 1, buf, 4, 1, &y, 1) == -1, "i32 has no dot");
    CHECK(quant_matmul_prequant(GGML_TYPE_Q8_0, buf, 34, 1, 33, buf, 36, 1, &y, 1) == -1, "cols not whole blocks");
    CHECK(quant_matmul_prequant(12345, buf, 34, 1, 32, buf, 36, 1, &y, 1) == -1, "unknown type");
    CHECK(y == 1.0f, "output written on error");
    printf("  %d mismatching results\n", mismatches);
    return test_finish("test_matmul_multi");
}
