/* quant_multi.c: multi-token weight x activation products (quant_multi.h).
 *
 * Each kernel below takes one weight row and a tile of up to TILE_MAX
 * activation rows: it decodes a weight block (loads, |w|, signs, grid
 * look-ups, scales) once and applies it to every token of the tile. Per
 * (row, token) it performs exactly the float operations of its one-token
 * twin (quant_avx2.c for the AVX2 and AVX-512 kernels, the scalar dots for
 * the scalar ones), in the same order, on the same values:
 *   - float accumulators are per token and fed block by block as there
 *     (Q8_0 keeps the even/odd pair of accumulators, MXFP4 one, floats the
 *     pair over 16-element steps, then the same horizontal sum and tail);
 *   - integer partial sums are regrouped where that is exact (no int16
 *     saturation, no int32 overflow): e.g. IQ2_XXS multiplies the group
 *     scale inside madd instead of after it, Q2_K/Q4_K sum the mins with
 *     one madd; integers add associatively, so the int fed to the float
 *     step is the same;
 *   - the per-block float steps the twins write in plain C (which the
 *     compiler may or may not fuse into FMAs, see mul_add) get the same
 *     rounding.
 * tests/test_matmul_multi.c checks bit-equality against quant_traits.dot
 * for every type on every path. A type without a kernel on the current
 * path falls back to per-pair dots, which is trivially identical.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant_internal.h"
#include "quant/quant_multi.h"

#define TILE_MAX 16      /* tokens per kernel call */
#define ROW_BLOCK 16     /* weight rows kept hot while all token tiles pass */

int quant_multi_use_avx512 = 1;

/* The one-token dots do their per-block float steps in plain C, which GCC
 * (GNU C: -ffp-contract=fast) fuses into FMAs or not depending on the build:
 * yes at -O2 with -mfma, no at -O1 (ASan builds) or without FMA hardware.
 * fp_fused records which, probed once on the scalar Q8_0 dot, and mul_add
 * takes the same rounding: fmaf where the dots fuse (vectorising this file
 * must not undo it), plain C where they do not (then this file, built with
 * the same flags, does not fuse either). */
static int fp_fused = -1;

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE float mul_add_as(int fused, float a, float b, float c)
{
    return fused ? fmaf(a, b, c) : a * b + c;
}

ALWAYS_INLINE float mul_add(float a, float b, float c) { return mul_add_as(fp_fused > 0, a, b, c); }

/* Two Q8_0 blocks with sums -3 and 3 * (1 + 2^-23): fused, the dot is
 * exactly 3 * 2^-23; rounded in between, 3 + 3 * 2^-23 loses its low bit
 * first and the dot becomes 2^-22 or 2^-21. */
static void probe_fp_fused(void)
{
    if (__atomic_load_n(&fp_fused, __ATOMIC_RELAXED) >= 0) return;
    block_q8_0 w[2];
    block_q8_0f x[2];
    memset(w, 0, sizeof w);
    memset(x, 0, sizeof x);
    w[0].d = w[1].d = 0x3C00;           /* f16 1.0 */
    w[0].q[0] = -3;
    w[1].q[0] = 3;
    x[0].d = 1.0f;
    x[1].d = 1.0f + 0x1p-23f;
    x[0].q[0] = x[1].q[0] = 1;
    float r;
    dot_q8_0_q8_0f_scalar(64, &r, w, x);
    __atomic_store_n(&fp_fused, r == 3.0f * 0x1p-23f, __ATOMIC_RELAXED);
}

/* one weight row against nt (<= TILE_MAX) activation rows a[t]: s[t] */
typedef void (*multi_kernel)(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s);

#ifdef __AVX2__
#include <immintrin.h>

/* The same reductions as quant_avx2.c (order matters for the float one). */
ALWAYS_INLINE float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

ALWAYS_INLINE int hsum_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

ALWAYS_INLINE float half_to_float(uint16_t h)
{
#ifdef __F16C__
    return _cvtsh_ss(h);
#else
    return f16_to_f32(h);
#endif
}

/* 8 int32 lanes of sum(w*y) over 32 signed bytes, with |w| precomputed:
 * lane k sums bytes 4k..4k+3, as dot_i8 in quant_avx2.c. */
ALWAYS_INLINE __m256i dot_i8_abs(__m256i wabs, __m256i w, __m256i y)
{
    __m256i p = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(y, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* ---- Q8_0 x Q8_0_F32 ----
 * The one-token kernel feeds even blocks to one accumulator and odd blocks
 * to another (its tail block, always even, to the first) and sums them at
 * the end; taking the even blocks in one pass and the odd ones in a second
 * gives each accumulator the same additions in the same order with half
 * the registers live, so a tile of 8 tokens fits. */
ALWAYS_INLINE void q8_0_kernel(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s)
{
    const block_q8_0 *x = w;
    int64_t nb = n / 32;
    __m256 even[TILE_MAX], acc[TILE_MAX];
#pragma GCC unroll 8
    for (int t = 0; t < TILE_MAX; t++) even[t] = _mm256_setzero_ps();   /* all: -Wmaybe-uninitialized */
    for (int parity = 0; parity < 2; parity++) {
#pragma GCC unroll 8
        for (int t = 0; t < TILE_MAX; t++) acc[t] = _mm256_setzero_ps();
        for (int64_t i = parity; i < nb; i += 2) {
            __m256i w0 = _mm256_loadu_si256((const __m256i *)x[i].q), a0 = _mm256_sign_epi8(w0, w0);
            __m256 dw = _mm256_set1_ps(half_to_float(x[i].d));
#pragma GCC unroll 8
            for (int t = 0; t < nt; t++) {
                const block_q8_0f *y = (const block_q8_0f *)a[t];
                __m256i p = dot_i8_abs(a0, w0, _mm256_loadu_si256((const __m256i *)y[i].q));
                /* == set1(d_w * d_y): one IEEE product either way */
                __m256 d = _mm256_mul_ps(dw, _mm256_broadcast_ss(&y[i].d));
                acc[t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[t]);
            }
        }
        if (parity == 0) {
#pragma GCC unroll 8
            for (int t = 0; t < nt; t++) even[t] = acc[t];
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) s[t] = hsum_ps(_mm256_add_ps(even[t], acc[t]));
}

/* ---- MXFP4 x Q8_0_F32 ---- */
ALWAYS_INLINE void mxfp4_kernel(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s)
{
    const block_mxfp4 *x = w;
    const __m128i kv = _mm_loadu_si128((const __m128i *)mxfp4_kvalues);
    const __m128i m4 = _mm_set1_epi8(0xF);
    __m256 acc[TILE_MAX];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m128i q = _mm_loadu_si128((const __m128i *)x[i].qs);
        __m128i lo = _mm_shuffle_epi8(kv, _mm_and_si128(q, m4));
        __m128i hi = _mm_shuffle_epi8(kv, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
        __m256i wv = _mm256_set_m128i(hi, lo), wa = _mm256_sign_epi8(wv, wv);
        uint32_t bits = x[i].e < 2 ? 0x00200000u << x[i].e : (uint32_t)(x[i].e - 1) << 23;
        float d;
        memcpy(&d, &bits, 4);
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            const block_q8_0f *y = (const block_q8_0f *)a[t];
            __m256i p = dot_i8_abs(wa, wv, _mm256_loadu_si256((const __m256i *)y[i].q));
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * y[i].d), _mm256_cvtepi32_ps(p), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) s[t] = hsum_ps(acc[t]);
}

/* sum over 16 sub-blocks of mins[j] * bsums[j] (exact in int32) */
ALWAYS_INLINE int32_t mins_dot_bsums(__m256i mins16, const int16_t *bsums)
{
    return hsum_epi32(_mm256_madd_epi16(mins16, _mm256_loadu_si256((const __m256i *)bsums)));
}

/* The k-quant block's float step as the one-token kernels compute
 *   sum += y.d * d * (float)isum - y.d * dmin * (float)msum
 * (a multiply-subtract, fused or not as probed, then a plain add), spelled
 * out so that vectorising the token loop cannot contract it differently. */
ALWAYS_INLINE float ksum_step(float yd, float xd, float xm, int32_t isum, int32_t msum)
{
    return mul_add(yd * xd, (float)isum, -(yd * xm * (float)msum));
}

/* ---- Q2_K x Q8_K ---- */
ALWAYS_INLINE void q2_K_kernel(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s)
{
    const block_q2_K *x = w;
    const __m256i m3 = _mm256_set1_epi8(3);
    float sum[TILE_MAX];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) sum[t] = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0xF)));
        __m256i isum[TILE_MAX];
#pragma GCC unroll 8
        for (int t = 0; t < TILE_MAX; t++) isum[t] = _mm256_setzero_si256();   /* all: quiets -Wmaybe-uninitialized */
        for (int h = 0; h < 2; h++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int s4 = 0; s4 < 4; s4++) {
                __m256i c = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s4), m3);
                int sb = 8 * h + 2 * s4;
                __m256i sc = _mm256_set_m128i(_mm_set1_epi16(x[i].scales[sb + 1] & 0xF),
                                              _mm_set1_epi16(x[i].scales[sb] & 0xF));
#pragma GCC unroll 8
                for (int t = 0; t < nt; t++) {
                    const block_q8_K *y = (const block_q8_K *)a[t];
                    __m256i yq = _mm256_loadu_si256((const __m256i *)(y[i].q + 128 * h + 32 * s4));
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(c, yq), sc));
                }
            }
        }
        float xd = half_to_float(x[i].d), xm = half_to_float(x[i].dmin);
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            const block_q8_K *y = (const block_q8_K *)a[t];
            int32_t msum = mins_dot_bsums(mins16, y[i].bsums);
            sum[t] += ksum_step(y[i].d, xd, xm, hsum_epi32(isum[t]), msum);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) s[t] = sum[t];
}

/* ---- Q4_K x Q8_K ---- */
ALWAYS_INLINE void q4_K_kernel(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s)
{
    const block_q4_K *x = w;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    float sum[TILE_MAX];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) sum[t] = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        uint8_t sc[8];
        int16_t mn2[16];     /* min of sub-block j for both halves 2j, 2j+1 of its bsums */
        for (int j = 0; j < 8; j++) {
            uint8_t m;
            q4_K_scale_min(j, x[i].scales, &sc[j], &m);
            mn2[2 * j] = mn2[2 * j + 1] = m;
        }
        __m256i mins16 = _mm256_loadu_si256((const __m256i *)mn2);
        __m256i isum[TILE_MAX];
#pragma GCC unroll 8
        for (int t = 0; t < TILE_MAX; t++) isum[t] = _mm256_setzero_si256();   /* all: quiets -Wmaybe-uninitialized */
        for (int k = 0; k < 4; k++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * k));
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            __m256i s0 = _mm256_set1_epi16(sc[2 * k]), s1 = _mm256_set1_epi16(sc[2 * k + 1]);
#pragma GCC unroll 8
            for (int t = 0; t < nt; t++) {
                const block_q8_K *y = (const block_q8_K *)a[t];
                __m256i y0 = _mm256_loadu_si256((const __m256i *)(y[i].q + 64 * k));
                __m256i y1 = _mm256_loadu_si256((const __m256i *)(y[i].q + 64 * k + 32));
                __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), s0);
                __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), s1);
                isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(p0, p1));
            }
        }
        float xd = half_to_float(x[i].d), xm = half_to_float(x[i].dmin);
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            const block_q8_K *y = (const block_q8_K *)a[t];
            int32_t msum = mins_dot_bsums(mins16, y[i].bsums);
            sum[t] += ksum_step(y[i].d, xd, xm, hsum_epi32(isum[t]), msum);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) s[t] = sum[t];
}

/* ---- IQ2_XXS x Q8_K ---- */
ALWAYS_INLINE void iq2_xxs_kernel(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s)
{
    const block_iq2_xxs *x = w;
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                             0x0101010101010101LL, 0x0000000000000000LL);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i one8 = _mm256_set1_epi8(1);
    float sum[TILE_MAX];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) sum[t] = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        const uint8_t *q = (const uint8_t *)x[i].qs;
        __m256i bsum[TILE_MAX];
#pragma GCC unroll 8
        for (int t = 0; t < TILE_MAX; t++) bsum[t] = _mm256_setzero_si256();   /* all: quiets -Wmaybe-uninitialized */
        for (int g = 0; g < 8; g++) {
            const uint8_t *gq = q + 8 * g;
            uint32_t aux = (uint32_t)gq[4] | ((uint32_t)gq[5] << 8) | ((uint32_t)gq[6] << 16) | ((uint32_t)gq[7] << 24);
            __m256i grid = _mm256_set_epi64x((long long)iq2xxs_grid_data[gq[3]], (long long)iq2xxs_grid_data[gq[2]],
                                             (long long)iq2xxs_grid_data[gq[1]], (long long)iq2xxs_grid_data[gq[0]]);
            uint32_t sm = (uint32_t)ksigns_iq2xs_data[aux & 127] |
                          ((uint32_t)ksigns_iq2xs_data[(aux >> 7) & 127] << 8) |
                          ((uint32_t)ksigns_iq2xs_data[(aux >> 14) & 127] << 16) |
                          ((uint32_t)ksigns_iq2xs_data[(aux >> 21) & 127] << 24);
            __m256i sv = _mm256_shuffle_epi8(_mm256_set1_epi32((int)sm), spread);
            /* -1 where the element is negative, +1 elsewhere: sign_epi8 then
             * negates y exactly where the one-token kernel's xor/sub does */
            __m256i sgn = _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(sv, bits), bits), one8);
            /* (a + b) * ls == a * ls + b * ls: products fit easily in int32 */
            __m256i ls = _mm256_set1_epi16((short)(2 * (aux >> 28) + 1));
#pragma GCC unroll 8
            for (int t = 0; t < nt; t++) {
                const block_q8_K *y = (const block_q8_K *)a[t];
                __m256i yq = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(y[i].q + 32 * g)), sgn);
                bsum[t] = _mm256_add_epi32(bsum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(grid, yq), ls));
            }
        }
        float xd = half_to_float(x[i].d);
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            const block_q8_K *y = (const block_q8_K *)a[t];
            sum[t] = mul_add(xd * y[i].d * (float)hsum_epi32(bsum[t]), 0.125f, sum[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) s[t] = sum[t];
}

/* ---- F32 / F16 / BF16 x F32: 16 weights at a time as two f32 vectors ---- */
ALWAYS_INLINE void load16_f32(const void *w, int64_t i, __m256 *w0, __m256 *w1)
{
    const float *x = w;
    *w0 = _mm256_loadu_ps(x + i);
    *w1 = _mm256_loadu_ps(x + i + 8);
}
ALWAYS_INLINE void load16_f16(const void *w, int64_t i, __m256 *w0, __m256 *w1)
{
    const uint16_t *x = w;
    *w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
    *w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8)));
}
ALWAYS_INLINE void load16_bf16(const void *w, int64_t i, __m256 *w0, __m256 *w1)
{
    const uint16_t *x = w;
    __m256i h = _mm256_loadu_si256((const __m256i *)(x + i));
    *w0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)), 16));
    *w1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1)), 16));
}
/* the tails convert one weight with the same scalar function as the one-token kernels */
ALWAYS_INLINE float one_f32(const void *w, int64_t i) { return ((const float *)w)[i]; }
ALWAYS_INLINE float one_f16(const void *w, int64_t i) { return f16_to_f32(((const uint16_t *)w)[i]); }
ALWAYS_INLINE float one_bf16(const void *w, int64_t i) { return bf16_to_f32(((const uint16_t *)w)[i]); }

#define FLOAT_KERNEL(fmt)                                                                          \
    ALWAYS_INLINE void fmt##_kernel(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s) \
    {                                                                                              \
        __m256 acc0[TILE_MAX], acc1[TILE_MAX];                                                     \
        _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) acc0[t] = acc1[t] = _mm256_setzero_ps(); \
        int64_t i = 0;                                                                             \
        for (; i + 16 <= n; i += 16) {                                                             \
            __m256 w0, w1;                                                                         \
            load16_##fmt(w, i, &w0, &w1);                                                          \
            _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) {                                 \
                const float *y = (const float *)a[t];                                              \
                acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(y + i), acc0[t]);                    \
                acc1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(y + i + 8), acc1[t]);                \
            }                                                                                      \
        }                                                                                          \
        for (int t = 0; t < nt; t++) {                                                             \
            const float *y = (const float *)a[t];                                                  \
            float sum = hsum_ps(_mm256_add_ps(acc0[t], acc1[t]));                                  \
            for (int64_t k = i; k < n; k++) sum = mul_add(one_##fmt(w, k), y[k], sum);                \
            s[t] = sum;                                                                            \
        }                                                                                          \
    }
FLOAT_KERNEL(f32)
FLOAT_KERNEL(bf16)

/* Q8_0 decoded on the fly (d * q, exact: the values dequant_q8_0 gives) into
 * the f32 kernel's two vectors: the same products and sums as the F32 kernel
 * on the dequantized row, without storing it (quant_matvec_exact). */
ALWAYS_INLINE void load16_q8_0x(const void *w, int64_t i, __m256 *w0, __m256 *w1)
{
    const block_q8_0 *b = (const block_q8_0 *)w + (i >> 5);
    __m256 d = _mm256_set1_ps(half_to_float(b->d));
    const int8_t *q = b->q + (i & 31);
    *w0 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q))));
    *w1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8)))));
}
ALWAYS_INLINE float one_q8_0x(const void *w, int64_t i)
{
    const block_q8_0 *b = (const block_q8_0 *)w + (i >> 5);
    return half_to_float(b->d) * b->q[i & 31];
}
FLOAT_KERNEL(q8_0x)
#ifdef __F16C__
FLOAT_KERNEL(f16)
#endif

/* Full tiles get a copy with the tile width fixed (unrolled, accumulators
 * in registers); the last partial tile the general one. */
#define KERNEL_PAIR(name, width)                                                                     \
    static void name##_full(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s)      \
    { (void)nt; name##_kernel(n, w, a, width, s); }                                                  \
    static void name##_part(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s)      \
    { name##_kernel(n, w, a, nt, s); }
KERNEL_PAIR(q8_0, 8)
KERNEL_PAIR(mxfp4, 8)
KERNEL_PAIR(q2_K, 8)
KERNEL_PAIR(q4_K, 8)
KERNEL_PAIR(iq2_xxs, 8)
KERNEL_PAIR(f32, 4)
KERNEL_PAIR(bf16, 4)
#ifdef __F16C__
KERNEL_PAIR(f16, 4)
#endif

/* ---- Q8_0 with AVX-512 VNNI (chosen at run time) ----
 * A 512-bit register holds the one-token kernel's two accumulators side by
 * side: the low half gets the even blocks, the high half the odd ones, so
 * one instruction advances both, in the same order with the same per-lane
 * operations. vpdpbusd sums the same four byte products per int32 lane as
 * maddubs+madd (no int16 saturation is possible there either: activations
 * are never -128, so a pair of products stays within +-32512). */
#if defined(__x86_64__) && (defined(__clang__) || __GNUC__ >= 9)
#define HAVE_Q8_0_AVX512 1
#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

TARGET_AVX512 static inline __attribute__((always_inline)) __m512i load_two_blocks(const int8_t *lo, const int8_t *hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)),
                              _mm256_loadu_si256((const __m256i *)hi), 1);
}

TARGET_AVX512 static inline __attribute__((always_inline)) __m512 two_scales(__m256 lo, __m256 hi)
{
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

/* Activations repacked per token for this kernel (q8_0_512_pack): block pairs
 * as one 64-byte load each, with their scales already spread over the
 * lanes they multiply, so the loop does no shuffles; an odd last block
 * follows as a plain block_q8_0f in a 64-byte slot. */
typedef struct q8_pair { int8_t q[64]; float d[16]; } q8_pair;   /* 128 bytes */

static size_t q8_0_512_packed_bytes(int64_t cols)
{
    int64_t nb = cols / 32;
    return (size_t)(nb / 2) * sizeof(q8_pair) + (size_t)(nb & 1) * 64;
}

static void q8_0_512_pack(const uint8_t *xq, int64_t cols, uint8_t *out)
{
    const block_q8_0f *y = (const block_q8_0f *)xq;
    int64_t nb = cols / 32, np = nb / 2;
    q8_pair *pp = (q8_pair *)out;
    for (int64_t p = 0; p < np; p++) {
        memcpy(pp[p].q, y[2 * p].q, 32);
        memcpy(pp[p].q + 32, y[2 * p + 1].q, 32);
        for (int l = 0; l < 8; l++) {
            pp[p].d[l] = y[2 * p].d;
            pp[p].d[l + 8] = y[2 * p + 1].d;
        }
    }
    if (nb & 1) memcpy(out + (size_t)np * sizeof(q8_pair), &y[nb - 1], sizeof(block_q8_0f));
}

TARGET_AVX512 static inline __attribute__((always_inline))
void q8_0_kernel_512(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s)
{
    const block_q8_0 *x = w;
    int64_t nb = n / 32, np = nb / 2;
    __m512 acc[TILE_MAX];
#pragma GCC unroll 16
    for (int t = 0; t < TILE_MAX; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t p = 0; p < np; p++) {
        int64_t i = 2 * p;
        __m512i wq = load_two_blocks(x[i].q, x[i + 1].q);
        __m512i wa = _mm512_abs_epi8(wq);
        __mmask64 neg = _mm512_movepi8_mask(wq);
        __m512 dw = two_scales(_mm256_set1_ps(half_to_float(x[i].d)), _mm256_set1_ps(half_to_float(x[i + 1].d)));
#pragma GCC unroll 16
        for (int t = 0; t < nt; t++) {
            const q8_pair *y = (const q8_pair *)a[t] + p;
            __m512i yq = _mm512_load_si512((const void *)y->q);
            yq = _mm512_mask_sub_epi8(yq, neg, _mm512_setzero_si512(), yq);   /* sign(y, w) */
            __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wa, yq);
            /* lanes: d_w * d_y of their own block, one IEEE product as before */
            __m512 d = _mm512_mul_ps(dw, _mm512_load_ps(y->d));
            acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dp), acc[t]);
        }
    }
#pragma GCC unroll 16
    for (int t = 0; t < nt; t++) {
        __m256 acc0 = _mm512_castps512_ps256(acc[t]), acc1 = _mm512_extractf32x8_ps(acc[t], 1);
        if (nb & 1) {   /* odd block count: the last block goes to the even accumulator */
            const block_q8_0f *y = (const block_q8_0f *)(a[t] + (size_t)np * sizeof(q8_pair));
            const block_q8_0 *xl = &x[nb - 1];
            __m256i w0 = _mm256_loadu_si256((const __m256i *)xl->q);
            __m256i dp = dot_i8_abs(_mm256_sign_epi8(w0, w0), w0, _mm256_loadu_si256((const __m256i *)y->q));
            acc0 = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(xl->d) * y->d), _mm256_cvtepi32_ps(dp), acc0);
        }
        s[t] = hsum_ps(_mm256_add_ps(acc0, acc1));
    }
}

TARGET_AVX512 static void q8_0_512_full(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s)
{ (void)nt; q8_0_kernel_512(n, w, a, 16, s); }
TARGET_AVX512 static void q8_0_512_part(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s)
{ q8_0_kernel_512(n, w, a, nt, s); }

static int cpu_has_avx512_vnni(void)
{
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                __builtin_cpu_supports("avx512vnni");
    }
    return known;
}
#endif
#endif /* __AVX2__ */


/* ---- scalar kernels: twins of the scalar dots (q8.c, kquants.c, iq2xxs.c,
 * mxfp4.c, floats.c). A weight block is decoded once to plain integers (or
 * floats) and every token of the tile takes the same integer sums and the
 * same float steps (mul_add for the multiply-adds the compiler may fuse
 * there), so the results stay bit-identical. ---- */

static void q8_0_scalar(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s)
{
    const block_q8_0 *x = w;
    float sum[TILE_MAX] = {0};
    for (int64_t i = 0; i < n / 32; i++) {
        float d = f16_to_f32(x[i].d);
        for (int t = 0; t < nt; t++) {
            const block_q8_0f *y = (const block_q8_0f *)a[t] + i;
            int32_t isum = 0;
            for (int j = 0; j < 32; j++) isum += x[i].q[j] * y->q[j];
            sum[t] = mul_add(d * y->d, (float)isum, sum[t]);
        }
    }
    for (int t = 0; t < nt; t++) s[t] = sum[t];
}

static void mxfp4_scalar(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s)
{
    const block_mxfp4 *x = w;
    float sum[TILE_MAX] = {0};
    for (int64_t i = 0; i < n / 32; i++) {
        int8_t v[32];
        for (int j = 0; j < 16; j++) {
            v[j] = mxfp4_kvalues[x[i].qs[j] & 0xF];
            v[j + 16] = mxfp4_kvalues[x[i].qs[j] >> 4];
        }
        /* 2^(e-128), exact also for e = 0, 1 (as mxfp4.c) */
        uint32_t bits = x[i].e < 2 ? 0x00200000u << x[i].e : (uint32_t)(x[i].e - 1) << 23;
        float d;
        memcpy(&d, &bits, 4);
        for (int t = 0; t < nt; t++) {
            const block_q8_0f *y = (const block_q8_0f *)a[t] + i;
            int32_t isum = 0;
            for (int j = 0; j < 32; j++) isum += v[j] * y->q[j];
            sum[t] = mul_add(d * y->d, (float)isum, sum[t]);
        }
    }
    for (int t = 0; t < nt; t++) s[t] = sum[t];
}

/* a k-quant block decoded: codes in element order, scale and min per 16 elements */
typedef struct kblock { uint8_t c[256]; int32_t sc[16], mn[16]; float d, dmin; } kblock;

static void kblock_dot(const kblock *kb, const block_q8_K *y, int32_t *isum, int32_t *msum)
{
    int32_t is = 0, ms = 0;
    for (int sb = 0; sb < 16; sb++) {
        int32_t part = 0;
        for (int l = 0; l < 16; l++) part += kb->c[16 * sb + l] * y->q[16 * sb + l];
        is += kb->sc[sb] * part;
        ms += kb->mn[sb] * y->bsums[sb];
    }
    *isum = is;
    *msum = ms;
}

static void kblock_tokens(const kblock *kb, int64_t i, const uint8_t *const *a, int nt, float *sum)
{
    for (int t = 0; t < nt; t++) {
        const block_q8_K *y = (const block_q8_K *)a[t] + i;
        int32_t isum, msum;
        kblock_dot(kb, y, &isum, &msum);
        sum[t] += mul_add(y->d * kb->d, (float)isum, -(y->d * kb->dmin * (float)msum));
    }
}

static void q2_K_scalar(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s)
{
    const block_q2_K *x = w;
    float sum[TILE_MAX] = {0};
    kblock kb;
    for (int64_t i = 0; i < n / 256; i++) {
        for (int e = 0; e < 256; e++) {
            int h = e / 128, s4 = (e % 128) / 32, l = e % 32;
            kb.c[e] = (uint8_t)((x[i].qs[32 * h + l] >> (2 * s4)) & 3);
        }
        for (int sb = 0; sb < 16; sb++) {
            kb.sc[sb] = x[i].scales[sb] & 0xF;
            kb.mn[sb] = x[i].scales[sb] >> 4;
        }
        kb.d = f16_to_f32(x[i].d);
        kb.dmin = f16_to_f32(x[i].dmin);
        kblock_tokens(&kb, i, a, nt, sum);
    }
    for (int t = 0; t < nt; t++) s[t] = sum[t];
}

static void q4_K_scalar(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s)
{
    const block_q4_K *x = w;
    float sum[TILE_MAX] = {0};
    kblock kb;
    for (int64_t i = 0; i < n / 256; i++) {
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            q4_K_scale_min(j, x[i].scales, &sc, &m);
            kb.sc[2 * j] = kb.sc[2 * j + 1] = sc;
            kb.mn[2 * j] = kb.mn[2 * j + 1] = m;
            for (int l = 0; l < 32; l++)
                kb.c[32 * j + l] = (uint8_t)((x[i].qs[32 * (j >> 1) + l] >> (4 * (j & 1))) & 0xF);
        }
        kb.d = f16_to_f32(x[i].d);
        kb.dmin = f16_to_f32(x[i].dmin);
        kblock_tokens(&kb, i, a, nt, sum);
    }
    for (int t = 0; t < nt; t++) s[t] = sum[t];
}

static void iq2_xxs_scalar(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s)
{
    const block_iq2_xxs *x = w;
    float sum[TILE_MAX] = {0};
    for (int64_t i = 0; i < n / 256; i++) {
        const uint8_t *q = (const uint8_t *)x[i].qs;
        int8_t v[256];          /* signed lattice magnitudes (<= 43) */
        int32_t ls[8];
        for (int g = 0; g < 8; g++) {
            const uint8_t *gq = q + 8 * g;
            uint32_t aux = (uint32_t)gq[4] | ((uint32_t)gq[5] << 8) | ((uint32_t)gq[6] << 16) | ((uint32_t)gq[7] << 24);
            ls[g] = (int32_t)(2 * (aux >> 28) + 1);
            for (int l = 0; l < 4; l++) {
                uint64_t gv = iq2xxs_grid_data[gq[l]];
                uint8_t S = ksigns_iq2xs_data[(aux >> (7 * l)) & 127];
                for (int j = 0; j < 8; j++) {
                    int m = (int)((gv >> (8 * j)) & 0xFF);
                    v[32 * g + 8 * l + j] = (int8_t)((S >> j) & 1 ? -m : m);
                }
            }
        }
        float d = f16_to_f32(x[i].d);
        for (int t = 0; t < nt; t++) {
            const block_q8_K *y = (const block_q8_K *)a[t] + i;
            int32_t bsum = 0;
            for (int g = 0; g < 8; g++) {
                int32_t gsum = 0;
                for (int j = 0; j < 32; j++) gsum += v[32 * g + j] * y->q[32 * g + j];
                bsum += ls[g] * gsum;
            }
            sum[t] = mul_add(d * y->d * (float)bsum, 0.125f, sum[t]);
        }
    }
    for (int t = 0; t < nt; t++) s[t] = sum[t];
}

/* floats.c's dot_lanes on weights already converted to f32 (the conversions
 * are exact, so the products are the same) */
#define FLOAT_CHUNK 256
#define FLOAT_SCALAR(fmt, conv)                                                                    \
    ALWAYS_INLINE void fmt##_scalar_as(int fused, int64_t n, const void *w, const uint8_t *const *a, int nt, float *s) \
    {                                                                                              \
        float acc[TILE_MAX][8] = {{0}}, wf[FLOAT_CHUNK];                                           \
        for (int64_t c0 = 0; c0 < n; c0 += FLOAT_CHUNK) {                                          \
            int64_t c1 = c0 + FLOAT_CHUNK < n ? c0 + FLOAT_CHUNK : n;                              \
            for (int64_t i = c0; i < c1; i++) wf[i - c0] = conv;                                   \
            for (int t = 0; t < nt; t++) {                                                         \
                const float *y = (const float *)a[t] + c0;                                         \
                float l[8];                                                                        \
                memcpy(l, acc[t], sizeof l);                                                       \
                int64_t i = 0, m = c1 - c0;                                                        \
                for (; i + 8 <= m; i += 8)                                                         \
                    for (int k = 0; k < 8; k++) l[k] = mul_add_as(fused, wf[i + k], y[i + k], l[k]); \
                for (; i < m; i++) l[0] = mul_add_as(fused, wf[i], y[i], l[0]);                    \
                memcpy(acc[t], l, sizeof l);                                                       \
            }                                                                                      \
        }                                                                                          \
        for (int t = 0; t < nt; t++) {                                                             \
            const float *c = acc[t];                                                               \
            s[t] = ((c[0] + c[4]) + (c[1] + c[5])) + ((c[2] + c[6]) + (c[3] + c[7]));              \
        }                                                                                          \
    }                                                                                              \
    /* the rounding mode fixed per call, so each copy vectorises */                                \
    static void fmt##_scalar(int64_t n, const void *w, const uint8_t *const *a, int nt, float *s)  \
    {                                                                                              \
        if (fp_fused > 0) fmt##_scalar_as(1, n, w, a, nt, s);                                      \
        else fmt##_scalar_as(0, n, w, a, nt, s);                                                   \
    }
FLOAT_SCALAR(f16, f16_to_f32(((const uint16_t *)w)[i]))
FLOAT_SCALAR(bf16, bf16_to_f32(((const uint16_t *)w)[i]))

typedef struct kernel_set {
    multi_kernel full, part;
    int width;
    /* optional: the kernels read activations repacked by pack (a token's
     * row into packed_bytes(cols) bytes, 64-byte aligned) */
    size_t (*packed_bytes)(int64_t cols);
    void (*pack)(const uint8_t *xq, int64_t cols, uint8_t *out);
} kernel_set;

/* The kernels for `type` on the path the traits' dot takes now; 0 if none. */
static int pick_kernels(int type, kernel_set *k)
{
    probe_fp_fused();
#ifdef __AVX2__
    if (quant_use_simd) {
#define PICK(t, name, wd) case t: *k = (kernel_set){name##_full, name##_part, wd, NULL, NULL}; return 1
#ifdef HAVE_Q8_0_AVX512
        if (type == GGML_TYPE_Q8_0 && quant_multi_use_avx512 && cpu_has_avx512_vnni()) {
            *k = (kernel_set){q8_0_512_full, q8_0_512_part, 16, q8_0_512_packed_bytes, q8_0_512_pack};
            return 1;
        }
#endif
        switch (type) {
        PICK(GGML_TYPE_Q8_0, q8_0, 8);
        PICK(GGML_TYPE_MXFP4, mxfp4, 8);
        PICK(GGML_TYPE_Q2_K, q2_K, 8);
        PICK(GGML_TYPE_Q4_K, q4_K, 8);
        PICK(GGML_TYPE_IQ2_XXS, iq2_xxs, 8);
        PICK(GGML_TYPE_F32, f32, 4);
        PICK(GGML_TYPE_BF16, bf16, 4);
#ifdef __F16C__
        PICK(GGML_TYPE_F16, f16, 4);
#endif
        default: return 0;   /* no AVX2 kernel here: per-pair dots */
        }
#undef PICK
    }
#endif
#define PICK_SCALAR(t, name) case t: *k = (kernel_set){name##_scalar, name##_scalar, TILE_MAX, NULL, NULL}; return 1
    switch (type) {
    PICK_SCALAR(GGML_TYPE_Q8_0, q8_0);
    PICK_SCALAR(GGML_TYPE_MXFP4, mxfp4);
    PICK_SCALAR(GGML_TYPE_Q2_K, q2_K);
    PICK_SCALAR(GGML_TYPE_Q4_K, q4_K);
    PICK_SCALAR(GGML_TYPE_IQ2_XXS, iq2_xxs);
    /* F32: nothing to decode, the per-pair dot is as fast */
    PICK_SCALAR(GGML_TYPE_F16, f16);
    PICK_SCALAR(GGML_TYPE_BF16, bf16);
    default: return 0;
    }
#undef PICK_SCALAR
}

int quant_matvec_exact(int type, const void *W, size_t row_bytes, int64_t rows, int64_t cols, const float *x, float *y)
{
#ifdef __AVX2__
    if (quant_use_simd && type == GGML_TYPE_Q8_0 && cols % 32 == 0) {
        probe_fp_fused();
        const uint8_t *a[1] = {(const uint8_t *)x};
        for (int64_t r = 0; r < rows; r++) q8_0x_kernel(cols, (const uint8_t *)W + (size_t)r * row_bytes, a, 1, &y[r]);
        return 0;
    }
#endif
    (void)W; (void)row_bytes; (void)rows; (void)cols; (void)x; (void)y; (void)type;
    return -1;
}

int quant_matmul_has_kernel(int type)
{
    kernel_set k;
    return pick_kernels(type, &k);
}

int quant_matmul_prequant(int type, const void *W, size_t row_bytes, int64_t rows, int64_t cols,
                          const void *xq, size_t xq_stride, int T, float *y, int64_t ys)
{
    const quant_traits *tr = quant_get(type);
    if (!tr || !tr->dot || cols < 0 || quant_row_bytes(type, cols) == 0 ||
        quant_row_bytes(tr->vec_dot_type, cols) == 0)
        return -1;
    const uint8_t *w = W, *x = xq;
    kernel_set k;
    if (!pick_kernels(type, &k)) {
        for (int64_t r = 0; r < rows; r++)
            for (int t = 0; t < T; t++)
                tr->dot(cols, &y[(int64_t)t * ys + r], w + (size_t)r * row_bytes, x + (size_t)t * xq_stride);
        return 0;
    }
    uint8_t *packed = NULL;
    if (k.pack) {
        size_t pb = k.packed_bytes(cols);
        packed = aligned_alloc(64, pb * (size_t)T + 64);
        if (!packed) {   /* still exact, just slower */
            for (int64_t r = 0; r < rows; r++)
                for (int t = 0; t < T; t++)
                    tr->dot(cols, &y[(int64_t)t * ys + r], w + (size_t)r * row_bytes, x + (size_t)t * xq_stride);
            return 0;
        }
        for (int t = 0; t < T; t++) k.pack(x + (size_t)t * xq_stride, cols, packed + (size_t)t * pb);
        x = packed;
        xq_stride = pb;
    }
    /* a block of rows stays in cache while every token tile passes over it */
    for (int64_t r0 = 0; r0 < rows; r0 += ROW_BLOCK) {
        int64_t r1 = r0 + ROW_BLOCK < rows ? r0 + ROW_BLOCK : rows;
        for (int t0 = 0; t0 < T; t0 += k.width) {
            int nt = T - t0 < k.width ? T - t0 : k.width;
            const uint8_t *a[TILE_MAX];
            for (int t = 0; t < nt; t++) a[t] = x + (size_t)(t0 + t) * xq_stride;
            multi_kernel fn = nt == k.width ? k.full : k.part;
            for (int64_t r = r0; r < r1; r++) {
                float s[TILE_MAX];
                fn(cols, w + (size_t)r * row_bytes, a, nt, s);
                for (int t = 0; t < nt; t++) y[(int64_t)(t0 + t) * ys + r] = s[t];
            }
        }
    }
    free(packed);
    return 0;
}
