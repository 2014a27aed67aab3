/* q8.c: the 8-bit block formats.
 *   Q8_0 (type 8)          weights: f16 d + 32 int8 (spec §5.2).
 *   Q8_0_F32 (minke id 64) activations for Q8_0 and MXFP4 weights: f32 d + 32
 *                          int8, quantized like ds4's quantize_q8_0_activation
 *                          (spec §5.7: d_x = amax/127 kept in f32).
 *   Q8_K (type 15)         activations for the k-quants and IQ2_XXS: f32 d,
 *                          256 int8 and 16 per-16 sums (spec §5.6).
 */
#include <math.h>
#include <string.h>

#include "quant/quant_internal.h"

void dequant_q8_0(const void *src, float *dst, int64_t n)
{
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / 32; i++) {
        float d = f16_to_f32(b[i].d);
        for (int j = 0; j < 32; j++) dst[32 * i + j] = d * b[i].q[j];
    }
}

/* Weight quantizer: d = amax/127 (stored as f16), q = round(x/d). Rounding
 * uses the unrounded d so |q| never exceeds 127. */
void quant_q8_0(const float *src, void *dst, int64_t n)
{
    block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + 32 * i;
        float d = block_amax(x, 32) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = f16_scale(d);
        for (int j = 0; j < 32; j++) b[i].q[j] = (int8_t)roundf(x[j] * id);
    }
}

void dequant_q8_0f(const void *src, float *dst, int64_t n)
{
    const block_q8_0f *b = src;
    for (int64_t i = 0; i < n / 32; i++)
        for (int j = 0; j < 32; j++) dst[32 * i + j] = b[i].d * b[i].q[j];
}

void quant_q8_0f(const float *src, void *dst, int64_t n)
{
    block_q8_0f *b = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + 32 * i;
        float d = block_amax(x, 32) / 127.0f;
        b[i].d = d;
        for (int j = 0; j < 32; j++) {
            b[i].q[j] = (int8_t)(d != 0.0f ? round_clamp(x[j] / d, -128, 127) : 0);
        }
    }
}

void dot_q8_0_q8_0f_scalar(int64_t n, float *s, const void *w, const void *a)
{
    const block_q8_0 *x = w;
    const block_q8_0f *y = a;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int32_t isum = 0;
        for (int j = 0; j < 32; j++) isum += x[i].q[j] * y[i].q[j];
        sum += f16_to_f32(x[i].d) * y[i].d * (float)isum;
    }
    *s = sum;
}

void dequant_q8_K(const void *src, float *dst, int64_t n)
{
    const block_q8_K *b = src;
    for (int64_t i = 0; i < n / 256; i++)
        for (int j = 0; j < 256; j++) dst[256 * i + j] = b[i].d * b[i].q[j];
}

/* ds4_quantize_row_q8_K: the scale is taken from the signed largest element
 * (is = -127/xm), so that element maps to -127 exactly and the others can
 * reach +128 only through rounding, which the clamp catches. */
void quant_q8_K(const float *src, void *dst, int64_t n)
{
    block_q8_K *b = dst;
    for (int64_t i = 0; i < n / 256; i++) {
        const float *x = src + 256 * i;
        float amax = 0.0f, xm = 0.0f;
        for (int j = 0; j < 256; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; xm = x[j]; }
        }
        if (amax == 0.0f) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        float is = -127.0f / xm;
        for (int j = 0; j < 256; j++) {
            b[i].q[j] = (int8_t)round_clamp(is * x[j], -128, 127);
        }
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += b[i].q[16 * g + j];
            b[i].bsums[g] = (int16_t)sum;
        }
        b[i].d = 1.0f / is;
    }
}
