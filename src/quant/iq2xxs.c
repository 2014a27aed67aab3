/* iq2xxs.c: IQ2_XXS (spec model.md §5.5), 2.0625 bits per weight: decode,
 * dot against Q8_K, and a reference quantizer.
 *
 * Tables: iq2xxs_grid (256 lattice points of 8 magnitudes in {8,25,43},
 * expanded from iq2xxs_grid.inc at start-up) and ksigns_iq2xs (7 stored sign
 * bits plus an implied parity bit, so every 8-group negates an even count).
 *
 * Quantizer (minke's own): for each 8-element sub-group the sign mask is
 * taken from x, and if it has odd parity the smallest |x| is flipped (its
 * target becomes -|x|). With targets t, the squared error of lattice point k
 * at scale s is s^2*G2[k] - 2s*D[k] + |t|^2, with G2 the point's squared norm
 * and D[k] = <g_k, t>; D is computed once per sub-group (a 256x8 product),
 * after which each candidate scale costs one argmin over 256 values. Each
 * 32-group first gets its best free scale (a fan of candidates, then a
 * least-squares refit); the block scale d is set from the largest group
 * scale, every group's 4-bit scale t is chosen by exact search around its
 * ideal, and d is refitted by least squares with the choices fixed. Last,
 * sub-groups with a forced sign flip try flipping another of their three
 * smallest elements instead, at the final scale.
 */
#include <math.h>
#include <string.h>

#include "quant/quant_internal.h"

#ifdef __AVX2__
#include <immintrin.h>
#endif

uint64_t iq2xxs_grid_data[256];
uint8_t ksigns_iq2xs_data[128];
static float grid_t[8][256];   /* grid_t[j][k] = magnitude j of point k */
static float grid_n2[256];     /* squared norm of point k */

static const uint16_t grid_levels[256] = {
#include "quant/iq2xxs_grid.inc"
};

__attribute__((constructor)) static void iq2xxs_init(void)
{
    static const uint8_t level[3] = {8, 25, 43};
    for (int k = 0; k < 256; k++) {
        uint64_t v = 0;
        float n2 = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t m = level[(grid_levels[k] >> (2 * j)) & 3];
            v |= (uint64_t)m << (8 * j);
            grid_t[j][k] = m;
            n2 += (float)(m * m);
        }
        iq2xxs_grid_data[k] = v;
        grid_n2[k] = n2;
    }
    for (int i = 0; i < 128; i++)
        ksigns_iq2xs_data[i] = (uint8_t)(i | ((__builtin_popcount(i) & 1) << 7));
}

void dequant_iq2_xxs(const void *src, float *dst, int64_t n)
{
    const block_iq2_xxs *b = src;
    for (int64_t i = 0; i < n / 256; i++) {
        float d = f16_to_f32(b[i].d);
        const uint8_t *q = (const uint8_t *)b[i].qs;
        for (int g = 0; g < 8; g++) {
            const uint8_t *gq = q + 8 * g;
            uint32_t w = (uint32_t)gq[4] | ((uint32_t)gq[5] << 8) | ((uint32_t)gq[6] << 16) | ((uint32_t)gq[7] << 24);
            float dg = d * (0.5f + (float)(w >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++) {
                uint64_t gv = iq2xxs_grid_data[gq[l]];
                uint8_t S = ksigns_iq2xs_data[(w >> (7 * l)) & 127];
                for (int j = 0; j < 8; j++) {
                    float m = (float)((gv >> (8 * j)) & 0xFF);
                    dst[256 * i + 32 * g + 8 * l + j] = dg * m * ((S >> j) & 1 ? -1.0f : 1.0f);
                }
            }
        }
    }
}

void dot_iq2_xxs_q8_K_scalar(int64_t n, float *s, const void *w, const void *a)
{
    const block_iq2_xxs *x = w;
    const block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        const uint8_t *q = (const uint8_t *)x[i].qs;
        const int8_t *yq = y[i].q;
        int32_t bsum = 0;
        for (int g = 0; g < 8; g++) {
            const uint8_t *gq = q + 8 * g;
            uint32_t aux = (uint32_t)gq[4] | ((uint32_t)gq[5] << 8) | ((uint32_t)gq[6] << 16) | ((uint32_t)gq[7] << 24);
            int32_t gsum = 0;
            for (int l = 0; l < 4; l++) {
                uint64_t gv = iq2xxs_grid_data[gq[l]];
                uint8_t S = ksigns_iq2xs_data[(aux >> (7 * l)) & 127];
                for (int j = 0; j < 8; j++) {
                    int m = (int)((gv >> (8 * j)) & 0xFF);
                    int v = m * yq[32 * g + 8 * l + j];
                    gsum += (S >> j) & 1 ? -v : v;
                }
            }
            bsum += (int32_t)(2 * (aux >> 28) + 1) * gsum;
        }
        sum += f16_to_f32(x[i].d) * y[i].d * (float)bsum * 0.125f;
    }
    *s = sum;
}

/* ---------------- quantizer ---------------- */

typedef struct {
    float D[256];     /* <g_k, t> */
    float t2;         /* |t|^2 */
    float a[8];       /* |x| */
    uint8_t signs;    /* bit j: element j stored negative (even popcount) */
    int8_t flipped;   /* element whose sign was flipped for parity, or -1 */
} subgroup;

static void subgroup_prepare(const float *x, subgroup *sg)
{
    float t[8];
    uint8_t neg = 0;
    int smallest = 0;
    for (int j = 0; j < 8; j++) {
        t[j] = fabsf(x[j]);
        if (x[j] < 0) neg |= (uint8_t)(1 << j);
        if (t[j] < t[smallest]) smallest = j;
    }
    memcpy(sg->a, t, sizeof t);
    sg->flipped = -1;
    if (__builtin_popcount(neg) & 1) {
        neg ^= (uint8_t)(1 << smallest);
        t[smallest] = -t[smallest];
        sg->flipped = (int8_t)smallest;
    }
    sg->signs = neg;
    sg->t2 = 0;
    for (int j = 0; j < 8; j++) sg->t2 += t[j] * t[j];
#ifdef __AVX2__
    __m256 tv[8];
    for (int j = 0; j < 8; j++) tv[j] = _mm256_set1_ps(t[j]);
    for (int k = 0; k < 256; k += 8) {
        __m256 acc = _mm256_mul_ps(tv[0], _mm256_loadu_ps(&grid_t[0][k]));
        for (int j = 1; j < 8; j++) acc = _mm256_fmadd_ps(tv[j], _mm256_loadu_ps(&grid_t[j][k]), acc);
        _mm256_storeu_ps(sg->D + k, acc);
    }
#else
    for (int k = 0; k < 256; k++) sg->D[k] = 0;
    for (int j = 0; j < 8; j++) {
        float tj = t[j];
        for (int k = 0; k < 256; k++) sg->D[k] += tj * grid_t[j][k];
    }
#endif
}

/* Best lattice point at scale s (> 0); *err gets its squared error. Ties go
 * to the lowest index in both versions, so they choose identically. */
#ifdef __AVX2__
/* Pick, lane by lane, the smaller (value, index) pair of two candidates. */
static inline void min_pair(__m256 *b, __m256i *bi, __m256 v, __m256i vi)
{
    __m256 lt = _mm256_or_ps(_mm256_cmp_ps(v, *b, _CMP_LT_OQ),
                             _mm256_and_ps(_mm256_cmp_ps(v, *b, _CMP_EQ_OQ),
                                           _mm256_castsi256_ps(_mm256_cmpgt_epi32(*bi, vi))));
    *b = _mm256_blendv_ps(*b, v, lt);
    *bi = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(*bi), _mm256_castsi256_ps(vi), lt));
}

/* Four independent running minima (vectors k+0, k+8, k+16, k+24) so the
 * compare/blend chains overlap; merged by (value, lowest index), which is
 * the same choice as a first-minimum scalar scan. */
static int subgroup_best(const subgroup *sg, float s, float *err)
{
    const __m256 vs = _mm256_set1_ps(s), m2 = _mm256_set1_ps(-2.0f), inf = _mm256_set1_ps(INFINITY);
    const __m256i step = _mm256_set1_epi32(32);
    __m256 b0 = inf, b1 = inf, b2 = inf, b3 = inf;
    __m256i i0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i i1 = _mm256_add_epi32(i0, _mm256_set1_epi32(8));
    __m256i i2 = _mm256_add_epi32(i0, _mm256_set1_epi32(16));
    __m256i i3 = _mm256_add_epi32(i0, _mm256_set1_epi32(24));
    __m256i x0 = i0, x1 = i1, x2 = i2, x3 = i3;
#define IQ2_STEP(b, x, i, off)                                                                      \
    do {                                                                                            \
        __m256 v = _mm256_fmadd_ps(m2, _mm256_loadu_ps(sg->D + k + (off)),                          \
                                   _mm256_mul_ps(vs, _mm256_loadu_ps(grid_n2 + k + (off))));        \
        __m256 lt = _mm256_cmp_ps(v, b, _CMP_LT_OQ);                                                \
        b = _mm256_blendv_ps(b, v, lt);                                                             \
        x = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(x), _mm256_castsi256_ps(i), lt)); \
        i = _mm256_add_epi32(i, step);                                                              \
    } while (0)
    for (int k = 0; k < 256; k += 32) {
        IQ2_STEP(b0, x0, i0, 0);
        IQ2_STEP(b1, x1, i1, 8);
        IQ2_STEP(b2, x2, i2, 16);
        IQ2_STEP(b3, x3, i3, 24);
    }
#undef IQ2_STEP
    min_pair(&b0, &x0, b1, x1);
    min_pair(&b2, &x2, b3, x3);
    min_pair(&b0, &x0, b2, x2);
    /* across lanes: swap halves, then pairs, then neighbours */
    __m256 v = _mm256_permute2f128_ps(b0, b0, 1);
    __m256i vi = _mm256_permute2f128_si256(x0, x0, 1);
    min_pair(&b0, &x0, v, vi);
    v = _mm256_permute_ps(b0, _MM_SHUFFLE(1, 0, 3, 2));
    vi = _mm256_shuffle_epi32(x0, _MM_SHUFFLE(1, 0, 3, 2));
    min_pair(&b0, &x0, v, vi);
    v = _mm256_permute_ps(b0, _MM_SHUFFLE(2, 3, 0, 1));
    vi = _mm256_shuffle_epi32(x0, _MM_SHUFFLE(2, 3, 0, 1));
    min_pair(&b0, &x0, v, vi);
    *err = s * _mm256_cvtss_f32(b0) + sg->t2;
    return _mm256_cvtsi256_si32(x0);
}
#else
static int subgroup_best(const subgroup *sg, float s, float *err)
{
    float best = INFINITY;
    int bi = 0;
    for (int k = 0; k < 256; k++) {
        float v = s * grid_n2[k] - 2.0f * sg->D[k];
        if (v < best) { best = v; bi = k; }
    }
    *err = s * best + sg->t2;
    return bi;
}
#endif

/* With the scale fixed, try flipping another small element instead of the
 * one subgroup_prepare chose; updates sg (D, signs) and *idx if it helps. */
static void subgroup_refine_flip(subgroup *sg, float s, uint8_t *idx)
{
    if (sg->flipped < 0) return;
    float cur_err;
    *idx = (uint8_t)subgroup_best(sg, s, &cur_err);
    int order[8];
    for (int j = 0; j < 8; j++) order[j] = j;
    for (int i = 0; i < 3; i++)            /* the three smallest |x| */
        for (int j = i + 1; j < 8; j++)
            if (sg->a[order[j]] < sg->a[order[i]]) { int tmp = order[i]; order[i] = order[j]; order[j] = tmp; }
    subgroup alt = *sg;
    for (int c = 0; c < 3; c++) {
        int f = order[c], f0 = sg->flipped;
        if (f == f0) continue;
        /* undo the flip of f0, apply one on f: D += 2|x_f0| g[f0] - 2|x_f| g[f] */
        for (int k = 0; k < 256; k++)
            alt.D[k] = sg->D[k] + 2.0f * sg->a[f0] * grid_t[f0][k] - 2.0f * sg->a[f] * grid_t[f][k];
        float e;
        int k = subgroup_best(&alt, s, &e);
        if (e < cur_err) {
            cur_err = e;
            alt.signs = (uint8_t)(sg->signs ^ (1 << f0) ^ (1 << f));
            alt.flipped = (int8_t)f;
            *sg = alt;
            *idx = (uint8_t)k;
        }
    }
}

/* Error of a 32-group (4 sub-groups) at scale s; idx receives the points. */
static float group_eval(const subgroup *sg, float s, uint8_t idx[4])
{
    float total = 0, e;
    for (int l = 0; l < 4; l++) {
        idx[l] = (uint8_t)subgroup_best(&sg[l], s, &e);
        total += e;
    }
    return total;
}

void quant_iq2_xxs(const float *src, void *dst, int64_t n)
{
    block_iq2_xxs *b = dst;
    subgroup sg[32];
    for (int64_t i = 0; i < n / 256; i++) {
        const float *x = src + 256 * i;
        float gscale[8];
        uint8_t idx[8][4];
        for (int l = 0; l < 32; l++) subgroup_prepare(x + 8 * l, &sg[l]);

        /* 1. best free scale per 32-group */
        float max_scale = 0;
        for (int g = 0; g < 8; g++) {
            float amax = block_amax(x + 32 * g, 32);
            if (amax == 0) { gscale[g] = 0; continue; }
            float best_err = INFINITY, best_s = amax / 43;
            uint8_t tmp[4];
            /* coarse fan over amax/43 * [0.45, 1.5], then the two half-steps around the best */
            float best_f = 0;
            for (int c = 0; c < 8; c++) {
                float f = 0.45f + 0.15f * c, s = amax / 43.0f * f;
                float e = group_eval(&sg[4 * g], s, tmp);
                if (e < best_err) { best_err = e; best_s = s; best_f = f; memcpy(idx[g], tmp, 4); }
            }
            for (int c = -1; c <= 1; c += 2) {
                float s = amax / 43.0f * (best_f + 0.075f * c);
                float e = group_eval(&sg[4 * g], s, tmp);
                if (e < best_err) { best_err = e; best_s = s; memcpy(idx[g], tmp, 4); }
            }
            /* least-squares scale for the chosen points */
            float num = 0, den = 0;
            for (int l = 0; l < 4; l++) { num += sg[4 * g + l].D[idx[g][l]]; den += grid_n2[idx[g][l]]; }
            if (num > 0 && den > 0) {
                float s = num / den;
                float e = group_eval(&sg[4 * g], s, tmp);
                if (e < best_err) { best_s = s; memcpy(idx[g], tmp, 4); }
            }
            gscale[g] = best_s;
            if (best_s > max_scale) max_scale = best_s;
        }
        if (max_scale == 0) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }

        /* 2. block scale d, 4-bit group scales, d refitted */
        float d = max_scale * 8.0f / 31.0f;
        float best_total = INFINITY;
        uint8_t best_t[8], best_idx[8][4];
        uint16_t best_dh = 0;
        for (int iter = 0; iter < 3; iter++) {
            uint16_t dh = f16_scale(d);
            float dq = f16_to_f32(dh);
            if (!(dq > 0)) break;
            float total = 0, num = 0, den = 0;
            uint8_t tsel[8], isel[8][4];
            for (int g = 0; g < 8; g++) {
                int t0 = round_clamp((gscale[g] * 8.0f / dq - 1.0f) * 0.5f, -1, 16);
                float gbest = INFINITY;
                uint8_t tmp[4];
                for (int t = t0 - 1; t <= t0 + 1; t++) {
                    if (t < 0 || t > 15) continue;
                    float e = group_eval(&sg[4 * g], dq * (2 * t + 1) * 0.125f, tmp);
                    if (e < gbest) { gbest = e; tsel[g] = (uint8_t)t; memcpy(isel[g], tmp, 4); }
                }
                if (gbest == INFINITY) {   /* t0 far out of range: clamp */
                    int t = t0 < 0 ? 0 : 15;
                    gbest = group_eval(&sg[4 * g], dq * (2 * t + 1) * 0.125f, tmp);
                    tsel[g] = (uint8_t)t;
                    memcpy(isel[g], tmp, 4);
                }
                total += gbest;
                float c = (2 * tsel[g] + 1) * 0.125f;
                for (int l = 0; l < 4; l++) {
                    num += c * sg[4 * g + l].D[isel[g][l]];
                    den += c * c * grid_n2[isel[g][l]];
                }
            }
            if (total < best_total) {
                best_total = total;
                best_dh = dh;
                memcpy(best_t, tsel, 8);
                memcpy(best_idx, isel, 32);
            }
            if (!(num > 0 && den > 0)) break;
            d = num / den;
        }

        if (best_total == INFINITY) {   /* d underflows f16: the block is ~0 */
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        /* 3. sign-parity alternatives at the final scales */
        float dq = f16_to_f32(best_dh);
        for (int g = 0; g < 8; g++)
            for (int l = 0; l < 4; l++)
                subgroup_refine_flip(&sg[4 * g + l], dq * (2 * best_t[g] + 1) * 0.125f, &best_idx[g][l]);

        b[i].d = best_dh;
        uint8_t *q = (uint8_t *)b[i].qs;
        for (int g = 0; g < 8; g++) {
            uint32_t w = (uint32_t)best_t[g] << 28;
            for (int l = 0; l < 4; l++) {
                q[8 * g + l] = best_idx[g][l];
                w |= (uint32_t)(sg[4 * g + l].signs & 127) << (7 * l);
            }
            q[8 * g + 4] = (uint8_t)w;
            q[8 * g + 5] = (uint8_t)(w >> 8);
            q[8 * g + 6] = (uint8_t)(w >> 16);
            q[8 * g + 7] = (uint8_t)(w >> 24);
        }
    }
}
