/* mxfp4.c: MXFP4 (ggml type 39): 32 elements = one E8M0 scale byte e plus
 * 16 bytes of E2M1 codes, 17 bytes (4.25 bits per weight).
 *
 * Nibble order is ggml's (checked against ggml-quants.c dequantize_row_mxfp4):
 * byte j's low nibble is element j, its high nibble element j+16. This is not
 * the official checkpoint's order (spec §4.5: low nibble = element 2j, high =
 * 2j+1), so mxfp4_from_official() re-pairs the nibbles; the codes and the
 * scale byte are copied bit-exactly, so the conversion is lossless.
 * Value = e2m1(code) * 2^(e-127); ggml writes it as kvalues (E2M1 doubled, all
 * integers) times 2^(e-128), which lets the dot stay in integers.
 */
#include <math.h>
#include <string.h>

#include "quant/quant_internal.h"

const int8_t mxfp4_kvalues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* 2^(e-128): half the block scale, exact also for e = 0, 1 (f32 subnormals). */
static inline float e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

void dequant_mxfp4(const void *src, float *dst, int64_t n)
{
    const block_mxfp4 *b = src;
    for (int64_t i = 0; i < n / 32; i++) {
        float d = e8m0_half(b[i].e);
        for (int j = 0; j < 16; j++) {
            dst[32 * i + j] = mxfp4_kvalues[b[i].qs[j] & 0xF] * d;
            dst[32 * i + j + 16] = mxfp4_kvalues[b[i].qs[j] >> 4] * d;
        }
    }
}

/* Squared error of a block quantized with exponent byte e; codes into c. */
static float mxfp4_try(const float *x, int e, uint8_t *c)
{
    float d = e8m0_half((uint8_t)e), scale = 2.0f * d, inv = 1.0f / scale, err = 0;
    for (int j = 0; j < 32; j++) {
        c[j] = f32_to_e2m1(x[j] * inv);
        float diff = mxfp4_kvalues[c[j]] * d - x[j];
        err += diff * diff;
    }
    return err;
}

/* Best E8M0 scale per block: the exponents that put amax at the top of the
 * E2M1 range (6) or one octave around, each tried with round-to-nearest. */
void quant_mxfp4(const float *src, void *dst, int64_t n)
{
    block_mxfp4 *b = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + 32 * i;
        float amax = block_amax(x, 32);
        uint8_t c[32], best_c[32];
        int best_e = 0;
        if (amax == 0) {
            memset(best_c, 0, sizeof best_c);
        } else {
            int ex;
            frexpf(amax / 6.0f, &ex);      /* amax/6 in [2^(ex-1), 2^ex) */
            int e0 = ex + 127;             /* smallest power with amax/scale <= 6, roughly */
            float best = INFINITY;
            for (int e = e0 - 2; e <= e0 + 1; e++) {
                if (e < 1 || e > 254) continue;
                float err = mxfp4_try(x, e, c);
                if (err < best) { best = err; best_e = e; memcpy(best_c, c, 32); }
            }
            if (best == INFINITY) {        /* out of the E8M0 range: clamp */
                best_e = e0 < 1 ? 1 : 254;
                mxfp4_try(x, best_e, best_c);
            }
        }
        b[i].e = (uint8_t)best_e;
        for (int j = 0; j < 16; j++) b[i].qs[j] = (uint8_t)(best_c[j] | (best_c[j + 16] << 4));
    }
}

void dot_mxfp4_q8_0f_scalar(int64_t n, float *s, const void *w, const void *a)
{
    const block_mxfp4 *x = w;
    const block_q8_0f *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += mxfp4_kvalues[x[i].qs[j] & 0xF] * y[i].q[j];
            isum += mxfp4_kvalues[x[i].qs[j] >> 4] * y[i].q[j + 16];
        }
        sum += e8m0_half(x[i].e) * y[i].d * (float)isum;
    }
    *s = sum;
}

void mxfp4_from_official(const uint8_t *packed, const uint8_t *scales, void *dst, int64_t n)
{
    block_mxfp4 *b = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const uint8_t *p = packed + 16 * i;
        uint8_t code[32];
        for (int j = 0; j < 16; j++) {
            code[2 * j] = p[j] & 0xF;
            code[2 * j + 1] = p[j] >> 4;
        }
        b[i].e = scales[i];
        for (int j = 0; j < 16; j++) b[i].qs[j] = (uint8_t)(code[j] | (code[j + 16] << 4));
    }
}
