/* numerics.h: every numerical primitive of DeepSeek V4 (spec model.md §6,
 * §9-§11) as a named scalar function, so the CPU forward reads like the spec
 * and tests can check each one against fixtures/primitives/primitives.json.
 * Activations are f32; sums of squares accumulate in double as ds4 does.
 */
#ifndef MINKE_CPU_NUMERICS_H
#define MINKE_CPU_NUMERICS_H

#include <stdint.h>

/* f32 dot product with 8 partial sums (vectorizes; fixed order, so results
 * do not depend on batching or threading). */
float nm_dot(const float *a, const float *b, int n);

/* ---- §6.1 RMSNorm ---- */
/* 1/sqrt(mean(x^2) + eps), sum of squares in double. */
float nm_rms_scale(const float *x, int n, float eps);
/* y = x * r * w (w NULL: unweighted). y may alias x. */
void nm_rmsnorm(float *y, const float *x, const float *w, int n, float eps);

/* ---- §6.2 scalars ---- */
float nm_sigmoid(float x);
float nm_silu(float x);
float nm_softplus(float x);        /* thresholded stable form (ds4) */
float nm_sqrt_softplus(float x);
/* silu(min(g, limit)) * clamp(u, -limit, limit); limit <= 1e-6 disables the clamp. */
float nm_swiglu_clamp(float g, float u, float limit);

/* ---- §6.3 RoPE ---- */
typedef struct nm_rope {
    int n_rot;          /* rotated dims (even) at the tail of each vector */
    float inv_freq[128];/* n_rot/2 entries */
} nm_rope;
/* Plain: f_k = base^(-2k/n_rot). YaRN when yarn != 0 (no magnitude scaling). */
void nm_rope_init(nm_rope *r, int n_rot, float base, int yarn, float factor,
                  double orig_ctx, float beta_fast, float beta_slow);
/* Rotate interleaved pairs of x[hd-n_rot .. hd) by pos*f_k (inverse: -pos*f_k). */
void nm_rope_tail(const nm_rope *r, float *x, int hd, int pos, int inverse);

/* ---- §6.4 / §6.5 / §6.6 simulations ---- */
/* Power-of-two scale 2^ceil(log2(v)) from the f32 bits of v (v > 0, normal). */
float nm_pow2_ceil(float v);
/* FP8 E4M3FN round trip, blocks of 64, ue8m0 scale; n multiple of 64. Optional scales out. */
void nm_fp8_sim(float *x, int n, float *scales);
/* FP4 E2M1 round trip, blocks of 32; n multiple of 32. */
void nm_fp4_sim(float *x, int n, float *scales);
/* y = H x / sqrt(128) in place (Sylvester order). */
void nm_hadamard128(float *x);
/* Nearest representable value (ties to even code). */
float nm_e4m3_round(float u);   /* |u| <= 448 */
float nm_e2m1_round(float u);   /* |u| <= 6 */

/* ---- KV rows in the simulations' own formats (issue #6, docs/numerics.md) ----
 * A block that nm_fp8_sim (nm_fp4_sim) produced is exactly code x 2^k for
 * E4M3FN (E2M1) codes and one power-of-two scale, so it can be stored as
 * one byte (half a byte) a value and one exponent byte (UE8M0: k + 127) a
 * block, and read back bit for bit. The pack functions find the scale from
 * the block itself (2^ceil(log2(amax / 448)), at most the simulation's own,
 * and any smaller power of two keeps every code representable), check that
 * every value comes back bit for bit, and return 0 when one does not (a
 * block these formats cannot hold: keep the row in f32). */
uint8_t nm_e4m3_encode(float u);        /* u an E4M3FN value (|u| <= 448): its code */
float nm_e4m3_decode(uint8_t c);        /* the value of a code (0x7F / 0xFF: NaN) */
uint8_t nm_e2m1_encode(float u);        /* u an E2M1 value (|u| <= 6): its 4-bit code */
float nm_e2m1_decode(uint8_t c);        /* the value of the low 4 bits */
/* n a multiple of 64: codes[n], exps[n / 64] */
int nm_fp8_pack(const float *x, int n, uint8_t *codes, uint8_t *exps);
void nm_fp8_unpack(const uint8_t *codes, const uint8_t *exps, int n, float *x);
/* n a multiple of 32: codes[n / 2] (value 2i in the low nibble of byte i), exps[n / 32] */
int nm_fp4_pack(const float *x, int n, uint8_t *codes, uint8_t *exps);
void nm_fp4_unpack(const uint8_t *codes, const uint8_t *exps, int n, float *x);

/* ---- §6.7 / §6.8 hyper-connections ---- */
/* mix: (2+nhc)*nhc values; outputs pre[nhc], post[nhc], comb[nhc*nhc] (row r, col c at r*nhc+c). */
void nm_hc_split(const float *mix, const float *scale, const float *base, int nhc,
                 int iters, float eps, float *pre, float *post, float *comb);
/* out[d] = sum_i w[i] * X[i*D + d]. */
void nm_hc_weighted_sum(const float *X, const float *w, int nhc, int D, float *out);
/* Xout[c] = post[c]*f + sum_r comb[r][c]*X[r]. Xout must not alias X. */
void nm_hc_post(const float *X, const float *f, const float *post, const float *comb,
                int nhc, int D, float *Xout);
/* Head weights w[i] = sigmoid(mix[i]*scale + base[i]) + eps. */
void nm_hc_head_weights(const float *mix, float scale, const float *base, int nhc,
                        float eps, float *w);

/* ---- §11 router ---- */
/* Indices of the k largest v (descending; ties: lower index first). */
void nm_topk(const float *v, int n, int k, int *idx);
/* w[j] = scores[sel[j]] / max(sum of the k selected, 6.103515625e-5) * route_scale. */
void nm_route_weights(const float *scores, const int *sel, int k, float route_scale, float *w);
/* scores[e] = sqrt(softplus(logit)); sel = top-k of scores+bias (bias NULL = none);
 * w from nm_route_weights. */
void nm_router(const float *logits, const float *bias, int n_exp, int k, float route_scale,
               float *scores, int *sel, float *w);

/* ---- §10 attention with sinks (one head) ---- */
/* rows: n_rows pointers to hd-vectors (K = V). out[hd]. */
void nm_attn_sinks_head(const float *q, const float *const *rows, int n_rows, int hd,
                        float sink, float scale, float *out);

#endif
