/* quant_avx2.c: AVX2+FMA versions of the hot dot kernels. Each computes the
 * same integer partial sums as its scalar twin (in q8.c, kquants.c, iq2xxs.c,
 * mxfp4.c, floats.c) and differs only in the order of the final float
 * additions; tests/test_quant.c checks the two agree within float rounding.
 *
 * Signed-by-signed int8 products use the usual maddubs trick: |w| as the
 * unsigned operand and the activation with w's sign applied. That is exact
 * as long as activation bytes are never -128, which the activation
 * quantizers guarantee (their scales map the largest |x| to 127).
 */
#ifdef __AVX2__
#include <immintrin.h>
#include <string.h>

#include "quant/quant_internal.h"

static inline float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int hsum_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* 8 int32 lanes of sum(w*y) over 32 signed bytes each. */
static inline __m256i dot_i8(__m256i w, __m256i y)
{
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(y, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

void dot_f32_avx2(int64_t n, float *s, const void *w, const void *a)
{
    const float *x = w, *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
    }
    float sum = hsum_ps(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

void dot_f16_avx2(int64_t n, float *s, const void *w, const void *a)
{
#ifdef __F16C__
    const uint16_t *x = w;
    const float *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8)));
        acc0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(y + i + 8), acc1);
    }
    float sum = hsum_ps(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += f16_to_f32(x[i]) * y[i];
    *s = sum;
#else
    dot_f16_scalar(n, s, w, a);
#endif
}

static inline float half_to_float(uint16_t h)
{
#ifdef __F16C__
    return _cvtsh_ss(h);
#else
    return f16_to_f32(h);
#endif
}

void dot_bf16_avx2(int64_t n, float *s, const void *w, const void *a)
{
    const uint16_t *x = w;
    const float *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(x + i));
        __m256 w0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)), 16));
        __m256 w1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1)), 16));
        acc0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(y + i + 8), acc1);
    }
    float sum = hsum_ps(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += bf16_to_f32(x[i]) * y[i];
    *s = sum;
}

void dot_q8_0_q8_0f_avx2(int64_t n, float *s, const void *w, const void *a)
{
    const block_q8_0 *x = w;
    const block_q8_0f *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t nb = n / 32, i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m256i p0 = dot_i8(_mm256_loadu_si256((const __m256i *)x[i].q), _mm256_loadu_si256((const __m256i *)y[i].q));
        __m256i p1 = dot_i8(_mm256_loadu_si256((const __m256i *)x[i + 1].q), _mm256_loadu_si256((const __m256i *)y[i + 1].q));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(x[i].d) * y[i].d), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(x[i + 1].d) * y[i + 1].d), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; i < nb; i++) {
        __m256i p = dot_i8(_mm256_loadu_si256((const __m256i *)x[i].q), _mm256_loadu_si256((const __m256i *)y[i].q));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(x[i].d) * y[i].d), _mm256_cvtepi32_ps(p), acc0);
    }
    *s = hsum_ps(_mm256_add_ps(acc0, acc1));
}

void dot_q2_K_q8_K_avx2(int64_t n, float *s, const void *w, const void *a)
{
    const block_q2_K *x = w;
    const block_q8_K *y = a;
    const __m256i m3 = _mm256_set1_epi8(3);
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int32_t msum = 0;
        for (int sb = 0; sb < 16; sb++) msum += (x[i].scales[sb] >> 4) * y[i].bsums[sb];
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int s4 = 0; s4 < 4; s4++) {
                __m256i c = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s4), m3);
                __m256i yq = _mm256_loadu_si256((const __m256i *)(y[i].q + 128 * h + 32 * s4));
                __m256i p = _mm256_maddubs_epi16(c, yq);
                int sb = 8 * h + 2 * s4;
                __m256i sc = _mm256_set_m128i(_mm_set1_epi16(x[i].scales[sb + 1] & 0xF),
                                              _mm_set1_epi16(x[i].scales[sb] & 0xF));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, sc));
            }
        }
        sum += y[i].d * half_to_float(x[i].d) * (float)hsum_epi32(isum) -
               y[i].d * half_to_float(x[i].dmin) * (float)msum;
    }
    *s = sum;
}

void dot_q4_K_q8_K_avx2(int64_t n, float *s, const void *w, const void *a)
{
    const block_q4_K *x = w;
    const block_q8_K *y = a;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        uint8_t sc[8], mn[8];
        int32_t msum = 0;
        for (int j = 0; j < 8; j++) {
            q4_K_scale_min(j, x[i].scales, &sc[j], &mn[j]);
            msum += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        __m256i isum = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * k));
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            __m256i y0 = _mm256_loadu_si256((const __m256i *)(y[i].q + 64 * k));
            __m256i y1 = _mm256_loadu_si256((const __m256i *)(y[i].q + 64 * k + 32));
            __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), _mm256_set1_epi16(sc[2 * k]));
            __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), _mm256_set1_epi16(sc[2 * k + 1]));
            isum = _mm256_add_epi32(isum, _mm256_add_epi32(p0, p1));
        }
        sum += y[i].d * half_to_float(x[i].d) * (float)hsum_epi32(isum) -
               y[i].d * half_to_float(x[i].dmin) * (float)msum;
    }
    *s = sum;
}

void dot_iq2_xxs_q8_K_avx2(int64_t n, float *s, const void *w, const void *a)
{
    const block_iq2_xxs *x = w;
    const block_q8_K *y = a;
    /* byte i of the expanded sign mask tests bit (i & 7) of sign byte i / 8 */
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                             0x0101010101010101LL, 0x0000000000000000LL);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        const uint8_t *q = (const uint8_t *)x[i].qs;
        __m256i bsum = _mm256_setzero_si256();
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
            __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(sv, bits), bits);
            __m256i yq = _mm256_loadu_si256((const __m256i *)(y[i].q + 32 * g));
            yq = _mm256_sub_epi8(_mm256_xor_si256(yq, neg), neg);
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(grid, yq), _mm256_set1_epi16(1));
            bsum = _mm256_add_epi32(bsum, _mm256_mullo_epi32(p, _mm256_set1_epi32((int)(2 * (aux >> 28) + 1))));
        }
        sum += half_to_float(x[i].d) * y[i].d * (float)hsum_epi32(bsum) * 0.125f;
    }
    *s = sum;
}

void dot_mxfp4_q8_0f_avx2(int64_t n, float *s, const void *w, const void *a)
{
    const block_mxfp4 *x = w;
    const block_q8_0f *y = a;
    const __m128i kv = _mm_loadu_si128((const __m128i *)mxfp4_kvalues);
    const __m128i m4 = _mm_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m128i q = _mm_loadu_si128((const __m128i *)x[i].qs);
        __m128i lo = _mm_shuffle_epi8(kv, _mm_and_si128(q, m4));
        __m128i hi = _mm_shuffle_epi8(kv, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
        __m256i wv = _mm256_set_m128i(hi, lo);
        __m256i yq = _mm256_loadu_si256((const __m256i *)y[i].q);
        uint32_t bits = x[i].e < 2 ? 0x00200000u << x[i].e : (uint32_t)(x[i].e - 1) << 23;
        float d;
        memcpy(&d, &bits, 4);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * y[i].d), _mm256_cvtepi32_ps(dot_i8(wv, yq)), acc);
    }
    *s = hsum_ps(acc);
}
#endif
