/* floats.c: the unblocked formats F32, F16, BF16 and I32 (spec §5.1).
 * Their dots take the activation in plain f32 (spec §5.7: ds4 feeds F16/F32
 * weight matmuls the f32 activation directly); scalar kernels accumulate in
 * f32 with eight independent lanes so they vectorise and match the AVX2
 * kernels' summation order closely.
 */
#include <string.h>

#include "quant/quant_internal.h"

void dequant_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
void quant_f32(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

/* Weight i as f32, one per format; constant arguments of dot_lanes, so the
 * compiler inlines them there. */
static inline float weight_f32(const void *w, int64_t i) { return ((const float *)w)[i]; }
static inline float weight_f16(const void *w, int64_t i) { return f16_to_f32(((const uint16_t *)w)[i]); }
static inline float weight_bf16(const void *w, int64_t i) { return bf16_to_f32(((const uint16_t *)w)[i]); }

/* The scalar dot of every unblocked format: eight lanes, folded pairwise
 * the way the AVX2 kernels reduce their 8-float registers. */
static inline float dot_lanes(int64_t n, const void *w, const float *y, float (*weight)(const void *, int64_t))
{
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += weight(w, i + k) * y[i + k];
    for (; i < n; i++) acc[0] += weight(w, i) * y[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

void dot_f32_scalar(int64_t n, float *s, const void *w, const void *a) { *s = dot_lanes(n, w, a, weight_f32); }

void dequant_f16(const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = f16_to_f32(h[i]);
}

void quant_f16(const float *src, void *dst, int64_t n)
{
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = f32_to_f16(src[i]);
}

void dot_f16_scalar(int64_t n, float *s, const void *w, const void *a) { *s = dot_lanes(n, w, a, weight_f16); }

void dequant_bf16(const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(h[i]);
}

void quant_bf16(const float *src, void *dst, int64_t n)
{
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = f32_to_bf16(src[i]);
}

void dot_bf16_scalar(int64_t n, float *s, const void *w, const void *a) { *s = dot_lanes(n, w, a, weight_bf16); }

void dequant_i32(const void *src, float *dst, int64_t n)
{
    const int32_t *v = src;
    for (int64_t i = 0; i < n; i++) dst[i] = (float)v[i];
}
