/* numerics.c: the DeepSeek V4 numerical primitives (spec model.md §6, §10,
 * §11), written once as plain scalar code. The forward pass and the tests
 * both call these; see numerics.h for what each one is.
 */
#include "cpu/numerics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

float nm_dot(const float *a, const float *b, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- §6.1 ---- */
float nm_rms_scale(const float *x, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    return (float)(1.0 / sqrt(ss / n + (double)eps));
}

void nm_rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    float r = nm_rms_scale(x, n, eps);
    if (w) for (int i = 0; i < n; i++) y[i] = x[i] * r * w[i];
    else   for (int i = 0; i < n; i++) y[i] = x[i] * r;
}

/* ---- §6.2 ---- */
float nm_sigmoid(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}
float nm_silu(float x) { return x * nm_sigmoid(x); }
float nm_softplus(float x) {
    if (x > 20.0f) return x;
    if (x < -20.0f) return expf(x);
    return log1pf(expf(x));
}
float nm_sqrt_softplus(float x) { return sqrtf(nm_softplus(x)); }

float nm_swiglu_clamp(float g, float u, float limit) {
    if (limit > 1e-6f) {
        if (g > limit) g = limit;
        if (u > limit) u = limit;
        if (u < -limit) u = -limit;
    }
    return nm_silu(g) * u;
}

/* ---- §6.3 ---- */
static double yarn_corr_dim(int n_rot, double base, double orig_ctx, double beta) {
    return n_rot * log(orig_ctx / (beta * 2.0 * M_PI)) / (2.0 * log(base));
}

void nm_rope_init(nm_rope *r, int n_rot, float base, int yarn, float factor,
                  double orig_ctx, float beta_fast, float beta_slow) {
    memset(r, 0, sizeof *r);
    r->n_rot = n_rot;
    int half = n_rot / 2;
    double low = 0, high = 0;
    if (yarn) {
        low = floor(yarn_corr_dim(n_rot, base, orig_ctx, beta_fast));
        high = ceil(yarn_corr_dim(n_rot, base, orig_ctx, beta_slow));
        if (low < 0) low = 0;
        if (high > n_rot - 1) high = n_rot - 1;
        if (high == low) high += 0.001;
    }
    for (int k = 0; k < half && k < 128; k++) {
        /* f32 arithmetic step by step as transformers' YaRN code does */
        float pf = powf(base, (float)(2 * k) / (float)n_rot);
        float f = 1.0f / pf;
        if (yarn) {
            float ramp = (float)(((float)k - (float)low) / (float)(high - low));
            if (ramp < 0) ramp = 0;
            if (ramp > 1) ramp = 1;
            float extrap_factor = 1.0f - ramp;
            float interp = 1.0f / (factor * pf);
            f = interp * (1.0f - extrap_factor) + f * extrap_factor;
        }
        r->inv_freq[k] = f;
    }
}

void nm_rope_tail(const nm_rope *r, float *x, int hd, int pos, int inverse) {
    int off = hd - r->n_rot;
    for (int k = 0; k < r->n_rot / 2; k++) {
        float ang = (float)pos * r->inv_freq[k];
        float c = (float)cos((double)ang), s = (float)sin((double)ang);
        if (inverse) s = -s;
        float x0 = x[off + 2 * k], x1 = x[off + 2 * k + 1];
        x[off + 2 * k] = x0 * c - x1 * s;
        x[off + 2 * k + 1] = x0 * s + x1 * c;
    }
}

/* ---- §6.4-§6.6 ---- */
float nm_pow2_ceil(float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    int e = (int)((b >> 23) & 255u) - 127 + ((b & 0x7fffffu) != 0);
    return ldexpf(1.0f, e);
}

float nm_e4m3_round(float u) {
    float a = fabsf(u);
    if (a >= 448.0f) return u < 0 ? -448.0f : 448.0f;
    float q;
    if (a < 0.015625f) q = 0.001953125f;          /* subnormal step 2^-9 */
    else { int e; frexpf(a, &e); q = ldexpf(1.0f, e - 1 - 3); }
    float r = rintf(a / q) * q;                    /* ties to even = even code */
    if (r > 448.0f) r = 448.0f;
    return u < 0 ? -r : r;
}

float nm_e2m1_round(float u) {
    float a = fabsf(u);
    if (a >= 6.0f) return u < 0 ? -6.0f : 6.0f;
    float q = a < 2.0f ? 0.5f : a < 4.0f ? 1.0f : 2.0f;
    float r = rintf(a / q) * q;
    if (r > 6.0f) r = 6.0f;
    return u < 0 ? -r : r;
}

void nm_fp8_sim(float *x, int n, float *scales) {
    for (int b = 0; b < n / 64; b++) {
        float *v = x + 64 * b;
        float amax = 1e-4f;
        for (int i = 0; i < 64; i++) if (fabsf(v[i]) > amax) amax = fabsf(v[i]);
        float s = nm_pow2_ceil(amax * (1.0f / 448.0f));
        for (int i = 0; i < 64; i++) {
            float u = v[i] / s;
            if (u > 448.0f) u = 448.0f;
            if (u < -448.0f) u = -448.0f;
            v[i] = nm_e4m3_round(u) * s;
        }
        if (scales) scales[b] = s;
    }
}

void nm_fp4_sim(float *x, int n, float *scales) {
    for (int b = 0; b < n / 32; b++) {
        float *v = x + 32 * b;
        float amax = 7.052966104933725e-38f;
        for (int i = 0; i < 32; i++) if (fabsf(v[i]) > amax) amax = fabsf(v[i]);
        float s = nm_pow2_ceil(amax * (1.0f / 6.0f));
        for (int i = 0; i < 32; i++) {
            float u = v[i] / s;
            if (u > 6.0f) u = 6.0f;
            if (u < -6.0f) u = -6.0f;
            v[i] = nm_e2m1_round(u) * s;
        }
        if (scales) scales[b] = s;
    }
}

/* ---- KV rows in the simulations' formats ---- */
float nm_e4m3_decode(uint8_t c) {
    int e = (c >> 3) & 15, m = c & 7;
    float a;
    if (e == 15 && m == 7) a = NAN;
    else if (e == 0) a = ldexpf((float)m, -9);
    else a = ldexpf((float)(8 + m), e - 10);
    return (c & 0x80) ? -a : a;
}

uint8_t nm_e4m3_encode(float u) {
    uint8_t sgn = signbit(u) ? 0x80 : 0;
    float a = fabsf(u);
    if (a < 0.015625f) return sgn | (uint8_t)(int)(a * 512.0f);      /* subnormal: m x 2^-9 */
    int e;
    frexpf(a, &e);                                                   /* a = f x 2^e, f in [0.5, 1) */
    int m = (int)ldexpf(a, 4 - e) - 8;                               /* a = (8 + m) x 2^(e - 4) */
    return sgn | (uint8_t)((e + 6) << 3) | (uint8_t)m;
}

float nm_e2m1_decode(uint8_t c) {
    static const float v[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float a = v[c & 7];
    return (c & 8) ? -a : a;
}

uint8_t nm_e2m1_encode(float u) {
    float a = fabsf(u);
    uint8_t k = a < 2.0f ? (uint8_t)(int)(a * 2.0f) : a < 4.0f ? (uint8_t)(4 + (int)(a - 2.0f)) : a < 6.0f ? 6 : 7;
    return (signbit(u) ? 8 : 0) | k;
}

/* the block's scale exponent k (s = 2^k) for values up to vmax: 2^ceil(log2(amax / vmax)),
 * or -127 (the smallest) for an all-zero block; -1000 when it is out of UE8M0's range */
static int kv_block_exp(const float *x, int n, float vmax) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
    if (!(amax < INFINITY)) return -1000;
    if (amax == 0.0f) return -127;
    int e;
    frexpf(nm_pow2_ceil(amax / vmax), &e);
    return e - 1 >= -127 && e - 1 <= 127 ? e - 1 : -1000;
}

/* The pack of either format: blocks of blk values up to vmax; fp4 stores two
 * codes a byte (value 2i in the low nibble of byte i). */
static int kv_pack(const float *x, int n, int fp4, uint8_t *codes, uint8_t *exps) {
    const int blk = fp4 ? 32 : 64;
    const float vmax = fp4 ? 6.0f : 448.0f;
    for (int b = 0; b < n / blk; b++) {
        const float *v = x + blk * b;
        int k = kv_block_exp(v, blk, vmax);
        if (k == -1000) return 0;
        exps[b] = (uint8_t)(k + 127);
        for (int i = 0; i < blk; i++) {
            float u = ldexpf(v[i], -k);
            if (!(fabsf(u) <= vmax) || (fp4 ? nm_e2m1_round(u) : nm_e4m3_round(u)) != u) return 0;
            uint8_t c = fp4 ? nm_e2m1_encode(u) : nm_e4m3_encode(u);
            float back = ldexpf(fp4 ? nm_e2m1_decode(c) : nm_e4m3_decode(c), k);
            if (memcmp(&back, &v[i], 4)) return 0;      /* bit for bit, the sign of zero too */
            int at = blk * b + i;
            if (!fp4) codes[at] = c;
            else codes[at / 2] = (at & 1) ? (uint8_t)((codes[at / 2] & 0x0F) | (c << 4)) : c;
        }
    }
    return 1;
}

int nm_fp8_pack(const float *x, int n, uint8_t *codes, uint8_t *exps) { return kv_pack(x, n, 0, codes, exps); }

void nm_fp8_unpack(const uint8_t *codes, const uint8_t *exps, int n, float *x) {
    for (int i = 0; i < n; i++) x[i] = ldexpf(nm_e4m3_decode(codes[i]), (int)exps[i / 64] - 127);
}

int nm_fp4_pack(const float *x, int n, uint8_t *codes, uint8_t *exps) { return kv_pack(x, n, 1, codes, exps); }

void nm_fp4_unpack(const uint8_t *codes, const uint8_t *exps, int n, float *x) {
    for (int i = 0; i < n; i++)
        x[i] = ldexpf(nm_e2m1_decode((uint8_t)(codes[i / 2] >> (4 * (i & 1)))), (int)exps[i / 32] - 127);
}

void nm_hadamard128(float *x) {
    /* double inside so the result is the exactly rounded rotation */
    double t[128];
    for (int i = 0; i < 128; i++) t[i] = x[i];
    for (int st = 1; st < 128; st <<= 1)
        for (int i = 0; i < 128; i += 2 * st)
            for (int j = i; j < i + st; j++) {
                double a = t[j], b = t[j + st];
                t[j] = a + b;
                t[j + st] = a - b;
            }
    for (int i = 0; i < 128; i++) x[i] = (float)(t[i] * 0.08838834764831845);
}

/* ---- §6.7 / §6.8 ---- */
void nm_hc_split(const float *mix, const float *scale, const float *base, int nhc,
                 int iters, float eps, float *pre, float *post, float *comb) {
    for (int i = 0; i < nhc; i++) {
        pre[i] = nm_sigmoid(mix[i] * scale[0] + base[i]) + eps;
        post[i] = 2.0f * nm_sigmoid(mix[nhc + i] * scale[1] + base[nhc + i]);
    }
    int o = 2 * nhc;
    for (int r = 0; r < nhc; r++) {
        float mx = -INFINITY;
        for (int c = 0; c < nhc; c++) {
            float v = mix[o + r * nhc + c] * scale[2] + base[o + r * nhc + c];
            comb[r * nhc + c] = v;
            if (v > mx) mx = v;
        }
        float sum = 0.0f;
        for (int c = 0; c < nhc; c++) { comb[r * nhc + c] = expf(comb[r * nhc + c] - mx); sum += comb[r * nhc + c]; }
        for (int c = 0; c < nhc; c++) comb[r * nhc + c] = comb[r * nhc + c] / sum + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            for (int r = 0; r < nhc; r++) {
                float s = 0.0f;
                for (int c = 0; c < nhc; c++) s += comb[r * nhc + c];
                for (int c = 0; c < nhc; c++) comb[r * nhc + c] /= (s + eps);
            }
        }
        for (int c = 0; c < nhc; c++) {
            float s = 0.0f;
            for (int r = 0; r < nhc; r++) s += comb[r * nhc + c];
            for (int r = 0; r < nhc; r++) comb[r * nhc + c] /= (s + eps);
        }
    }
}

void nm_hc_weighted_sum(const float *X, const float *w, int nhc, int D, float *out) {
    for (int d = 0; d < D; d++) {
        float s = 0.0f;
        for (int i = 0; i < nhc; i++) s += w[i] * X[(size_t)i * D + d];
        out[d] = s;
    }
}

void nm_hc_post(const float *X, const float *f, const float *post, const float *comb,
                int nhc, int D, float *Xout) {
    for (int c = 0; c < nhc; c++)
        for (int d = 0; d < D; d++) {
            float s = post[c] * f[d];
            for (int r = 0; r < nhc; r++) s += comb[r * nhc + c] * X[(size_t)r * D + d];
            Xout[(size_t)c * D + d] = s;
        }
}

void nm_hc_head_weights(const float *mix, float scale, const float *base, int nhc,
                        float eps, float *w) {
    for (int i = 0; i < nhc; i++) w[i] = nm_sigmoid(mix[i] * scale + base[i]) + eps;
}

/* ---- §11 ---- */
typedef struct { float v; int i; } topk_item;
static int topk_cmp(const void *a, const void *b) {
    const topk_item *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return (x->i > y->i) - (x->i < y->i);
}

void nm_topk(const float *v, int n, int k, int *idx) {
    if (k > n) k = n;
    if (k <= 16) {
        /* repeated arg-max with strict '>': lowest index wins ties (ds4) */
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int i = 0; i < n; i++) {
                int taken = 0;
                for (int t = 0; t < j; t++) if (idx[t] == i) { taken = 1; break; }
                if (taken) continue;
                if (best < 0 || v[i] > v[best]) best = i;
            }
            idx[j] = best;
        }
        return;
    }
    topk_item *it = malloc(sizeof *it * (size_t)n);
    if (!it) { for (int j = 0; j < k; j++) idx[j] = j; return; }
    for (int i = 0; i < n; i++) { it[i].v = v[i]; it[i].i = i; }
    qsort(it, (size_t)n, sizeof *it, topk_cmp);
    for (int j = 0; j < k; j++) idx[j] = it[j].i;
    free(it);
}

void nm_router(const float *logits, const float *bias, int n_exp, int k, float route_scale,
               float *scores, int *sel, float *w) {
    float *biased = malloc(sizeof(float) * (size_t)n_exp);
    for (int e = 0; e < n_exp; e++) {
        scores[e] = nm_sqrt_softplus(logits[e]);
        if (biased) biased[e] = scores[e] + (bias ? bias[e] : 0.0f);
    }
    nm_topk(biased ? biased : scores, n_exp, k, sel);
    free(biased);
    nm_route_weights(scores, sel, k, route_scale, w);
}

void nm_route_weights(const float *scores, const int *sel, int k, float route_scale, float *w) {
    float sum = 0.0f;
    for (int j = 0; j < k; j++) sum += scores[sel[j]];
    if (sum < 6.103515625e-5f) sum = 6.103515625e-5f;
    for (int j = 0; j < k; j++) w[j] = scores[sel[j]] / sum * route_scale;
}

/* ---- §10 ---- */
void nm_attn_sinks_head(const float *q, const float *const *rows, int n_rows, int hd,
                        float sink, float scale, float *out) {
    /* one pass with a running max (online softmax): no buffer for the logits */
    float M = sink;
    double den = 1.0;                  /* exp(sink - M) */
    for (int d = 0; d < hd; d++) out[d] = 0.0f;
    for (int i = 0; i < n_rows; i++) {
        float l = nm_dot(q, rows[i], hd) * scale;
        if (l > M) {
            float r = expf(M - l);
            den *= r;
            for (int d = 0; d < hd; d++) out[d] *= r;
            M = l;
        }
        float p = expf(l - M);
        den += p;
        const float *k = rows[i];
        for (int d = 0; d < hd; d++) out[d] += p * k[d];
    }
    float inv = (float)(1.0 / den);
    for (int d = 0; d < hd; d++) out[d] *= inv;
}
