/* dequant_fast.c: AVX2 decoding of weight rows to f32 for the exact-activation
 * products (quant_multi.h: quant_dequant_exact).
 *
 * In exact mode (the engine's default numerics) every weight a product reads
 * is decoded to f32 first, so the scalar traits' dequant (IQ2_XXS: a grid
 * look-up and a sign branch per element) would dominate decoding. These
 * kernels give the very floats the traits' dequant gives: every product they
 * form is exact (an f16 scale has 11 significant bits, a sub-block scale
 * times a quant at most 11 more: Q8_0 7, Q4_K 6+4, IQ2_XXS 5+6, Q2_K 4+2,
 * MXFP4 4 times a power of two; so d*sc*q fits in f32's 24 bits), leaving the
 * one rounding the C code also has (the K-quants' "- dmin*m", which is the
 * same whether the compiler fuses it into an FMA or not). A type's kernel is
 * still compared with the traits' dequant once, on a pseudo-random probe
 * row, before it is used; a mismatch falls back to the traits for good.
 */
#include <string.h>

#include "quant/quant_internal.h"
#include "quant/quant_multi.h"

typedef void (*dequant_fn)(const void *src, float *dst, int64_t n);

#ifdef __AVX2__
#include <immintrin.h>

static inline float half_f32(uint16_t h)
{
#ifdef __F16C__
    return _cvtsh_ss(h);
#else
    return f16_to_f32(h);
#endif
}

/* 8 int32 lanes -> f32 times a broadcast scale */
static inline __m256 scaled(__m256i q, __m256 d) { return _mm256_mul_ps(d, _mm256_cvtepi32_ps(q)); }

static void dq_q8_0(const void *src, float *dst, int64_t n)
{
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / 32; i++) {
        __m256 d = _mm256_set1_ps(half_f32(b[i].d));
        for (int k = 0; k < 4; k++) {
            __m128i q = _mm_loadl_epi64((const __m128i *)(b[i].q + 8 * k));
            _mm256_storeu_ps(dst + 32 * i + 8 * k, scaled(_mm256_cvtepi8_epi32(q), d));
        }
    }
}

/* Per 7-bit sign index: the 8 f32 sign-bit masks of its 8 elements (the
 * eighth sign is the parity bit, as ksigns_iq2xs_data has it); built here,
 * not from that table, so no constructor order matters (the probe check
 * compares the result with the traits anyway). */
static uint32_t iq2_sign_masks[128][8] __attribute__((aligned(32)));

__attribute__((constructor)) static void iq2_sign_masks_init(void)
{
    for (int i = 0; i < 128; i++) {
        int s = i | ((__builtin_popcount((unsigned)i) & 1) << 7);
        for (int j = 0; j < 8; j++) iq2_sign_masks[i][j] = (s >> j) & 1 ? 0x80000000u : 0;
    }
}

static void dq_iq2_xxs(const void *src, float *dst, int64_t n)
{
    const block_iq2_xxs *b = src;
    for (int64_t i = 0; i < n / 256; i++) {
        float d = half_f32(b[i].d);
        const uint8_t *q = (const uint8_t *)b[i].qs;
        for (int g = 0; g < 8; g++) {
            const uint8_t *gq = q + 8 * g;
            uint32_t w = (uint32_t)gq[4] | ((uint32_t)gq[5] << 8) | ((uint32_t)gq[6] << 16) | ((uint32_t)gq[7] << 24);
            __m256 dg = _mm256_set1_ps(d * (0.5f + (float)(w >> 28)) * 0.25f);
            for (int l = 0; l < 4; l++) {
                __m128i mag = _mm_cvtsi64_si128((long long)iq2xxs_grid_data[gq[l]]);
                __m256 v = scaled(_mm256_cvtepu8_epi32(mag), dg);
                /* times -1.0f where the sign bit is set: an exact sign flip */
                __m256 neg = _mm256_load_ps((const float *)iq2_sign_masks[(w >> (7 * l)) & 127]);
                _mm256_storeu_ps(dst + 256 * i + 32 * g + 8 * l, _mm256_xor_ps(v, neg));
            }
        }
    }
}

/* 16 codes c (bytes) -> dsc*c - dm into y[0..15] */
static inline void kquant16(__m128i c, __m256 dsc, __m256 dm, float *y)
{
    __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c));
    __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(c, 8)));
    _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(dsc, lo), dm));
    _mm256_storeu_ps(y + 8, _mm256_sub_ps(_mm256_mul_ps(dsc, hi), dm));
}

static void dq_q2_K(const void *src, float *dst, int64_t n)
{
    const block_q2_K *b = src;
    const __m128i three = _mm_set1_epi8(3);
    for (int64_t i = 0; i < n / 256; i++) {
        float d = half_f32(b[i].d), dmin = half_f32(b[i].dmin);
        float *y = dst + 256 * i;
        for (int h = 0; h < 2; h++)
            for (int half = 0; half < 2; half++) {
                __m128i qs = _mm_loadu_si128((const __m128i *)(b[i].qs + 32 * h + 16 * half));
                for (int s = 0; s < 4; s++) {
                    int sb = 8 * h + 2 * s + half;
                    __m256 dsc = _mm256_set1_ps(d * (b[i].scales[sb] & 0xF));
                    __m256 dm = _mm256_set1_ps(dmin * (b[i].scales[sb] >> 4));
                    /* a 16-bit shift then the byte mask: no bits cross between bytes */
                    __m128i c = _mm_and_si128(_mm_srl_epi16(qs, _mm_cvtsi32_si128(2 * s)), three);
                    kquant16(c, dsc, dm, y + 128 * h + 32 * s + 16 * half);
                }
            }
    }
}

static void dq_q4_K(const void *src, float *dst, int64_t n)
{
    const block_q4_K *b = src;
    const __m128i fifteen = _mm_set1_epi8(0xF);
    for (int64_t i = 0; i < n / 256; i++) {
        float d = half_f32(b[i].d), dmin = half_f32(b[i].dmin);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            q4_K_scale_min(j, b[i].scales, &sc, &m);
            __m256 dsc = _mm256_set1_ps(d * sc), dm = _mm256_set1_ps(dmin * m);
            for (int part = 0; part < 2; part++) {
                __m128i qs = _mm_loadu_si128((const __m128i *)(b[i].qs + 32 * (j >> 1) + 16 * part));
                __m128i c = _mm_and_si128(_mm_srl_epi16(qs, _mm_cvtsi32_si128(4 * (j & 1))), fifteen);
                kquant16(c, dsc, dm, dst + 256 * i + 32 * j + 16 * part);
            }
        }
    }
}

/* E8M0 exponent byte -> 2^(e-128), as mxfp4.c decodes it (e < 2: subnormal) */
static inline float e8m0_half_scale(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void dq_mxfp4(const void *src, float *dst, int64_t n)
{
    const block_mxfp4 *b = src;
    const __m128i table = _mm_loadu_si128((const __m128i *)mxfp4_kvalues);
    const __m128i low4 = _mm_set1_epi8(0xF);
    for (int64_t i = 0; i < n / 32; i++) {
        __m256 d = _mm256_set1_ps(e8m0_half_scale(b[i].e));
        __m128i q = _mm_loadu_si128((const __m128i *)b[i].qs);
        __m128i v[2] = {_mm_shuffle_epi8(table, _mm_and_si128(q, low4)),
                        _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), low4))};
        for (int k = 0; k < 2; k++) {   /* low nibbles: elements 0..15, high: 16..31 */
            _mm256_storeu_ps(dst + 32 * i + 16 * k, scaled(_mm256_cvtepi8_epi32(v[k]), d));
            _mm256_storeu_ps(dst + 32 * i + 16 * k + 8, scaled(_mm256_cvtepi8_epi32(_mm_srli_si128(v[k], 8)), d));
        }
    }
}

static dequant_fn fast_kernel(int type)
{
    switch (type) {
    case GGML_TYPE_Q8_0: return dq_q8_0;
    case GGML_TYPE_IQ2_XXS: return dq_iq2_xxs;
    case GGML_TYPE_Q2_K: return dq_q2_K;
    case GGML_TYPE_Q4_K: return dq_q4_K;
    case GGML_TYPE_MXFP4: return dq_mxfp4;
    default: return NULL;
    }
}

/* A pseudo-random row of `type`: random bytes, but the f16 scales finite
 * and the MXFP4 exponents away from the NaN byte. */
static void probe_row(int type, uint8_t *buf, size_t bytes, size_t block_bytes)
{
    uint32_t x = 0x9E3779B9u ^ (uint32_t)type;
    for (size_t k = 0; k < bytes; k++) {
        x = x * 1664525u + 1013904223u;
        buf[k] = (uint8_t)(x >> 24);
    }
    for (size_t blk = 0; blk < bytes / block_bytes; blk++) {
        uint8_t *p = buf + blk * block_bytes;
        int f16_at[2] = {-1, -1};
        switch (type) {
        case GGML_TYPE_Q8_0: case GGML_TYPE_IQ2_XXS: f16_at[0] = 0; break;
        case GGML_TYPE_Q4_K: f16_at[0] = 0; f16_at[1] = 2; break;
        case GGML_TYPE_Q2_K: f16_at[0] = 80; f16_at[1] = 82; break;
        case GGML_TYPE_MXFP4: p[0] = (uint8_t)(96 + p[0] % 64); break;   /* includes none of the NaN byte */
        }
        for (int k = 0; k < 2; k++) {
            if (f16_at[k] < 0) continue;
            x = x * 1664525u + 1013904223u;
            /* sign and mantissa random, exponent 3..28: no subnormals, far from overflow */
            uint16_t h = (uint16_t)((x >> 16 & 0x83FFu) | (uint32_t)(3 + (x >> 8) % 26) << 10);
            memcpy(p + f16_at[k], &h, 2);
        }
    }
}

/* 1: the kernel reproduces the traits bit for bit on the probe; -1: it does not (use the traits). */
static int verified[GGML_TYPE_COUNT];

static int kernel_verified(int type, dequant_fn fn)
{
    int v = __atomic_load_n(&verified[type], __ATOMIC_ACQUIRE);
    if (v) return v > 0;
    const quant_traits *tr = quant_get(type);
    enum { PROBE_ELEMS = 1024 };
    uint8_t row[4 * 292];
    float want[PROBE_ELEMS], got[PROBE_ELEMS];
    size_t bytes = (size_t)quant_row_bytes(type, PROBE_ELEMS);
    v = -1;
    if (bytes && bytes <= sizeof row) {
        probe_row(type, row, bytes, tr->bytes);
        tr->dequant(row, want, PROBE_ELEMS);
        fn(row, got, PROBE_ELEMS);
        v = memcmp(want, got, sizeof want) == 0 ? 1 : -1;
    }
    __atomic_store_n(&verified[type], v, __ATOMIC_RELEASE);
    return v > 0;
}
#endif /* __AVX2__ */

void quant_dequant_exact(int type, const void *src, float *dst, int64_t n)
{
#ifdef __AVX2__
    if (quant_use_simd && type >= 0 && type < GGML_TYPE_COUNT) {
        dequant_fn fn = fast_kernel(type);
        if (fn && kernel_verified(type, fn)) {
            fn(src, dst, n);
            return;
        }
    }
#endif
    quant_get(type)->dequant(src, dst, n);
}

int quant_dequant_exact_is_fast(int type)
{
#ifdef __AVX2__
    if (quant_use_simd && type >= 0 && type < GGML_TYPE_COUNT) {
        dequant_fn fn = fast_kernel(type);
        return fn && kernel_verified(type, fn);
    }
#endif
    (void)type;
    return 0;
}
