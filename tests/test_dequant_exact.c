/* test_dequant_exact.c: quant_dequant_exact (src/quant/dequant_fast.c), the
 * weight decoding of the exact-activation products, against the traits'
 * dequant, bit for bit.
 *
 * The engine's default numerics decode every weight a product reads and
 * multiply with f32 activations, and promise logits bit-identical to the
 * file's dequantized F32 twin (test_engine_quant.c); that holds only if the
 * fast decoding gives exactly the floats `minke convert` wrote. Checked for
 * every quantized weight type on rows quantized from random data (scales as
 * the quantizers make them) and on random bytes with random finite f16
 * scales (every code, every sub-block scale), several rows of uneven block
 * counts, on the AVX2 path (where each type must really have its fast kernel,
 * or decoding silently falls back to the slow scalar traits) and with
 * quant_use_simd = 0; and the fused one-token Q8_0 kernel (quant_matvec_exact)
 * against decoding followed by the F32 dot.
 */
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "quant/quant_multi.h"
#include "testutil.h"

/* Random bytes, then the f16 scales made finite (offsets per type). */
static void random_row(int type, uint8_t *row, size_t bytes, size_t block_bytes) {
    for (size_t k = 0; k < bytes; k++) row[k] = (uint8_t)(test_rand() >> 8);
    for (size_t b = 0; b < bytes / block_bytes; b++) {
        uint8_t *p = row + b * block_bytes;
        int at[2] = {-1, -1};
        if (type == GGML_TYPE_Q8_0 || type == GGML_TYPE_IQ2_XXS) at[0] = 0;
        if (type == GGML_TYPE_Q4_K) { at[0] = 0; at[1] = 2; }
        if (type == GGML_TYPE_Q2_K) { at[0] = 80; at[1] = 82; }
        if (type == GGML_TYPE_MXFP4 && p[0] == 0xFF) p[0] = 0xFE;   /* 0xFF is NaN */
        for (int k = 0; k < 2; k++) {
            if (at[k] < 0) continue;
            float f = (test_randf() - 0.5f) * 8.0f;
            uint16_t h = f32_to_f16(f);
            memcpy(p + at[k], &h, 2);
        }
    }
}

static int same_bits(const float *a, const float *b, int64_t n, int64_t *first) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof(float)) != 0) { *first = i; return 0; }
    return 1;
}

int main(void) {
    static const int types[] = {GGML_TYPE_Q8_0, GGML_TYPE_IQ2_XXS, GGML_TYPE_Q2_K, GGML_TYPE_Q4_K, GGML_TYPE_MXFP4,
                                GGML_TYPE_F16, GGML_TYPE_BF16};
    static const int64_t blocks[] = {1, 3, 8, 17};
    test_rand_seed(7);
    for (int simd = 1; simd >= 0; simd--) {
        quant_use_simd = simd;
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            int type = types[ti];
            const quant_traits *tr = quant_get(type);
            int blck = tr->is_quantized ? tr->blck : 32;
#ifdef __AVX2__
            if (simd && tr->is_quantized)
                CHECK(quant_dequant_exact_is_fast(type), "%s: no verified AVX2 decoding kernel", tr->name);
#endif
            for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
                int64_t n = blocks[bi] * blck;
                size_t bytes = (size_t)quant_row_bytes(type, n);
                uint8_t *row = malloc(bytes);
                float *src = malloc(sizeof(float) * (size_t)n), *want = malloc(sizeof(float) * (size_t)n),
                      *got = malloc(sizeof(float) * (size_t)n);
                for (int kind = 0; kind < 2; kind++) {
                    if (kind == 0) {
                        for (int64_t i = 0; i < n; i++) src[i] = (test_randf() - 0.5f) * (1.0f + (float)(i % 7));
                        tr->quant(src, row, n);
                    } else {
                        random_row(type, row, bytes, tr->bytes);
                    }
                    tr->dequant(row, want, n);
                    memset(got, 0xAB, sizeof(float) * (size_t)n);
                    quant_dequant_exact(type, row, got, n);
                    int64_t at = -1;
                    CHECK(same_bits(want, got, n, &at), "%s (%s, %s row of %lld): element %lld is %.9g, dequant %.9g",
                          tr->name, simd ? "simd" : "scalar", kind ? "random-byte" : "quantized", (long long)n,
                          (long long)at, at >= 0 ? got[at] : 0.0, at >= 0 ? want[at] : 0.0);
                }
                free(row); free(src); free(want); free(got);
            }
        }
    }
    /* the fused one-token kernel (Q8_0) equals decoding then the F32 dot (add
     * types here when they get one; IQ2_XXS and Q2_K were slower fused: their
     * decoding dominates and the headers are re-read every 16 elements) */
    static const int fused[] = {GGML_TYPE_Q8_0};
    for (int simd = 1; simd >= 0; simd--) {
        quant_use_simd = simd;
        for (size_t fi = 0; fi < sizeof fused / sizeof fused[0]; fi++) {
            int type = fused[fi];
            const quant_traits *tr = quant_get(type);
            const int64_t cols = 256 * 5, rows = 5;
            size_t rb = (size_t)quant_row_bytes(type, cols);
            uint8_t *w = malloc(rb * rows);
            float *x = malloc(sizeof(float) * cols), *row = malloc(sizeof(float) * cols), y[5], want[5];
            for (int64_t i = 0; i < cols; i++) x[i] = test_randf() - 0.5f;
            random_row(type, w, rb * rows, tr->bytes);
            for (int64_t r = 0; r < rows; r++) {
                quant_dequant_exact(type, w + r * rb, row, cols);
                quant_matvec_prequant(GGML_TYPE_F32, row, 1, cols, x, &want[r]);
            }
            int rc = quant_matvec_exact(type, w, rb, rows, cols, x, y);
#ifdef __AVX2__
            if (simd) CHECK(rc == 0, "%s: no fused one-token exact kernel on the AVX2 path", tr->name);
#endif
            if (rc == 0)
                CHECK(memcmp(y, want, sizeof y) == 0, "%s fused exact matvec (%s) differs from decode + F32 dot: "
                      "%.9g vs %.9g", tr->name, simd ? "simd" : "scalar", y[0], want[0]);
            free(w); free(x); free(row);
        }
    }
    return test_finish("test_dequant_exact");
}
