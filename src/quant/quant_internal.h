/* quant_internal.h: declarations shared between the files of src/quant.
 *
 * Each block format lives in its own file (minifloat.c, q8.c, kquants.c,
 * iq2xxs.c, mxfp4.c, floats.c) and exports its row functions here so that
 * quant.c can assemble the traits table. The AVX2 kernels (quant_avx2.c)
 * are selected at run time through quant_use_simd.
 */
#ifndef MINKE_QUANT_INTERNAL_H
#define MINKE_QUANT_INTERNAL_H

#include <math.h>

#include "quant/quant.h"

/* ---- block layouts (spec model.md §5) ---- */
typedef struct { uint16_t d; int8_t q[32]; } block_q8_0;            /* 34 bytes */
typedef struct { float d; int8_t q[32]; } block_q8_0f;              /* 36 bytes, activation only */
typedef struct { float d; int8_t q[256]; int16_t bsums[16]; } block_q8_K;   /* 292 bytes */
typedef struct { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; } block_q2_K; /* 84 */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } block_q4_K; /* 144 */
typedef struct { uint16_t d; uint16_t qs[32]; } block_iq2_xxs;      /* 66 bytes */
typedef struct { uint8_t e; uint8_t qs[16]; } block_mxfp4;          /* 17 bytes */

_Static_assert(sizeof(block_q8_0) == 34, "q8_0 size");
_Static_assert(sizeof(block_q8_0f) == 36, "q8_0f size");
_Static_assert(sizeof(block_q8_K) == 292, "q8_K size");
_Static_assert(sizeof(block_q2_K) == 84, "q2_K size");
_Static_assert(sizeof(block_q4_K) == 144, "q4_K size");
_Static_assert(sizeof(block_iq2_xxs) == 66, "iq2_xxs size");
_Static_assert(sizeof(block_mxfp4) == 17, "mxfp4 size");

/* ---- plain floats (floats.c) ---- */
void dequant_f32(const void *src, float *dst, int64_t n);
void quant_f32(const float *src, void *dst, int64_t n);
void dot_f32(int64_t n, float *s, const void *w, const void *a);
void dequant_f16(const void *src, float *dst, int64_t n);
void quant_f16(const float *src, void *dst, int64_t n);
void dot_f16(int64_t n, float *s, const void *w, const void *a);
void dequant_bf16(const void *src, float *dst, int64_t n);
void quant_bf16(const float *src, void *dst, int64_t n);
void dot_bf16(int64_t n, float *s, const void *w, const void *a);
void dot_bf16_scalar(int64_t n, float *s, const void *w, const void *a);
void dequant_i32(const void *src, float *dst, int64_t n);

/* ---- 8-bit formats (q8.c) ---- */
void dequant_q8_0(const void *src, float *dst, int64_t n);
void quant_q8_0(const float *src, void *dst, int64_t n);
void dot_q8_0_q8_0f(int64_t n, float *s, const void *w, const void *a);
void dequant_q8_0f(const void *src, float *dst, int64_t n);
void quant_q8_0f(const float *src, void *dst, int64_t n);
void dequant_q8_K(const void *src, float *dst, int64_t n);
void quant_q8_K(const float *src, void *dst, int64_t n);

/* ---- k-quants (kquants.c) ---- */
void dequant_q2_K(const void *src, float *dst, int64_t n);
void quant_q2_K(const float *src, void *dst, int64_t n);
void dot_q2_K_q8_K(int64_t n, float *s, const void *w, const void *a);
void dequant_q4_K(const void *src, float *dst, int64_t n);
void quant_q4_K(const float *src, void *dst, int64_t n);
void dot_q4_K_q8_K(int64_t n, float *s, const void *w, const void *a);

/* ---- IQ2_XXS (iq2xxs.c) ---- */
extern uint64_t iq2xxs_grid_data[256];      /* filled at start-up (iq2xxs.c) */
extern uint8_t ksigns_iq2xs_data[128];
void dequant_iq2_xxs(const void *src, float *dst, int64_t n);
void quant_iq2_xxs(const float *src, void *dst, int64_t n);
void dot_iq2_xxs_q8_K(int64_t n, float *s, const void *w, const void *a);

/* ---- MXFP4 (mxfp4.c) ---- */
extern const int8_t mxfp4_kvalues[16];   /* E2M1 values times 2 */
void dequant_mxfp4(const void *src, float *dst, int64_t n);
void quant_mxfp4(const float *src, void *dst, int64_t n);
void dot_mxfp4_q8_0f(int64_t n, float *s, const void *w, const void *a);

/* ---- scalar reference dots, always available (the AVX2 ones check against them) ---- */
void dot_f32_scalar(int64_t n, float *s, const void *w, const void *a);
void dot_f16_scalar(int64_t n, float *s, const void *w, const void *a);
void dot_q8_0_q8_0f_scalar(int64_t n, float *s, const void *w, const void *a);
void dot_q2_K_q8_K_scalar(int64_t n, float *s, const void *w, const void *a);
void dot_q4_K_q8_K_scalar(int64_t n, float *s, const void *w, const void *a);
void dot_iq2_xxs_q8_K_scalar(int64_t n, float *s, const void *w, const void *a);
void dot_mxfp4_q8_0f_scalar(int64_t n, float *s, const void *w, const void *a);

/* ---- AVX2 kernels (quant_avx2.c); only called when quant_use_simd != 0 ---- */
void dot_f32_avx2(int64_t n, float *s, const void *w, const void *a);
void dot_f16_avx2(int64_t n, float *s, const void *w, const void *a);
void dot_bf16_avx2(int64_t n, float *s, const void *w, const void *a);
void dot_q8_0_q8_0f_avx2(int64_t n, float *s, const void *w, const void *a);
void dot_q2_K_q8_K_avx2(int64_t n, float *s, const void *w, const void *a);
void dot_q4_K_q8_K_avx2(int64_t n, float *s, const void *w, const void *a);
void dot_iq2_xxs_q8_K_avx2(int64_t n, float *s, const void *w, const void *a);
void dot_mxfp4_q8_0f_avx2(int64_t n, float *s, const void *w, const void *a);

/* f16 encoding of a block scale: saturates at the largest finite half so
 * that absurdly large inputs clamp instead of decoding to inf/NaN. */
static inline uint16_t f16_scale(float d)
{
    return f32_to_f16(d > 65504.0f ? 65504.0f : d);
}

/* Largest |x[j]| over a block of n. NaNs are skipped (fmaxf returns the
 * other operand), so one NaN cannot make a whole block's scale NaN. */
static inline float block_amax(const float *x, int n)
{
    float amax = 0.0f;
    for (int j = 0; j < n; j++) amax = fmaxf(amax, fabsf(x[j]));
    return amax;
}

/* Round to nearest (ties to even, like lrintf in the default mode) after
 * clamping to [lo, hi]; clamping first keeps the int conversion defined and
 * gives the same result since the bounds are integers (NaN gives lo). rintf inlines to one
 * instruction with SSE4.1, where lrintf is a library call. */
static inline int round_clamp(float v, int lo, int hi)
{
    if (!(v >= (float)lo)) v = (float)lo;   /* also NaN */
    if (v > (float)hi) v = (float)hi;
    return (int)rintf(v);
}

/* Unpack the 6-bit scale and min of Q4_K sub-block j (spec §5.4). */
static inline void q4_K_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

#endif
