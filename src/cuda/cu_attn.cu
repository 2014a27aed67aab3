/* cu_attn.cu: attention inputs and attention with sinks (spec model.md
 * §6.3-§6.4, §6.9): per-head q norm + RoPE, the kv row finish (norm, RoPE,
 * FP8 simulation), the raw-row ring store, and the f32 attention kernels
 * (decode with row splits + combine, prefill 8 heads per block); the
 * tensor-core prefill attention is cu_attn_tc.cu.
 */
#include <stdlib.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_numerics.cuh"
#include "cuda/cu_ops.h"

/* q: block per (head, token): unweighted RMSNorm then RoPE tail. */
__global__ void k_qhead(float *q, int nh, int hd, int nrot, const float *inv_freq, const int *pos0p, float eps) {
    cu_pdl_enter();
    extern __shared__ float sh[];
    __shared__ double shd[33];
    int h = blockIdx.x, t = blockIdx.y;
    float *v = q + ((int64_t)t * nh + h) * hd;
    double ss = 0.0;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) { float a = v[i]; sh[i] = a; ss += (double)a * a; }
    ss = block_sum_d(ss, shd);
    float r = (float)(1.0 / sqrt(ss / hd + (double)eps));
    for (int i = threadIdx.x; i < hd; i += blockDim.x) sh[i] *= r;
    __syncthreads();
    d_rope_tail_sh(sh, hd, nrot, inv_freq, *pos0p + t, 0);
    __syncthreads();
    for (int i = threadIdx.x; i < hd; i += blockDim.x) v[i] = sh[i];
}
void cu_qhead_norm_rope(float *q, int T, int nh, int hd, int nrot, const float *inv_freq,
                        const int *pos0p, float eps, cudaStream_t st) {
    cu_launch(k_qhead, dim3(nh, T), 128, hd * sizeof(float), st, q, nh, hd, nrot, inv_freq, pos0p, eps);
}

__global__ void k_kv_finish(const float *kvp, const float *w, int hd, int nrot, const float *inv_freq,
                            const int *pos0p, float eps, int sims, int f16round, float *out) {
    cu_pdl_enter();
    extern __shared__ float sh[];
    __shared__ double shd[33];
    int t = blockIdx.x;
    const float *v = kvp + (int64_t)t * hd;
    double ss = 0.0;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) { float a = v[i]; sh[i] = a; ss += (double)a * a; }
    ss = block_sum_d(ss, shd);
    float r = (float)(1.0 / sqrt(ss / hd + (double)eps));
    for (int i = threadIdx.x; i < hd; i += blockDim.x) sh[i] = sh[i] * r * w[i];
    __syncthreads();
    d_rope_tail_sh(sh, hd, nrot, inv_freq, *pos0p + t, 0);
    __syncthreads();
    if (sims) d_fp8_sim_sh(sh, hd - nrot, nullptr);
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        out[(int64_t)t * hd + i] = f16round ? d_f16_round(sh[i]) : sh[i];
}
void cu_kv_finish(const float *kvp, const float *w, int T, int hd, int nrot, const float *inv_freq,
                  const int *pos0p, float eps, int sims, int f16round, float *kv_out, cudaStream_t st) {
    cu_launch(k_kv_finish, T, 128, hd * sizeof(float), st, kvp, w, hd, nrot, inv_freq, pos0p, eps, sims, f16round, kv_out);
}

/* After attention: the last min(T, W) rows of the batch go to ring slot pos % W. */
__global__ void k_raw_store(const float *kv, int T, int hd, int W, const int *pos0p, float *ring) {
    cu_pdl_enter();
    int k = blockIdx.x;                 /* 0 .. min(T,W)-1 */
    int n = T < W ? T : W;
    int t = T - n + k;
    int pos = *pos0p + t;
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        ring[(int64_t)(pos % W) * hd + i] = kv[(int64_t)t * hd + i];
}
void cu_raw_store(const float *kv, int T, int hd, int W, const int *pos0p, float *ring, cudaStream_t st) {
    int n = T < W ? T : W;
    cu_launch(k_raw_store, n, 128, 0, st, kv, T, hd, W, pos0p, ring);
}


/* ------------------------------------------------------------------ */
/* attention with sinks (spec §10)                                     */

#define ATT_WARPS 8
#define ATT_MAXV 16     /* hd / 32 values per lane, hd <= 512 */

__device__ __forceinline__ const float *att_row(int i, int nraw, int q, int pos0, int W, int hd, int ratio,
                                                const float *kv_batch, const float *ring, const float *comp,
                                                const int *sel_t) {
    if (i < nraw) {
        int j = q - nraw + 1 + i;
        return j >= pos0 ? kv_batch + (int64_t)(j - pos0) * hd : ring + (int64_t)(j % W) * hd;
    }
    int c = i - nraw;
    if (ratio == 4) c = sel_t[c];
    return comp + (int64_t)c * hd;
}

/* Block (head, token, split): the split's rows are spread over 8 warps, each
 * with an online softmax; the warps are merged in shared memory. With one
 * split the sink, normalisation and inverse RoPE follow in the same block;
 * with several the partial (M, L, acc) go to `part` and k_attn_combine
 * finishes (decode: 64 heads x 8 splits keep the GPU busy). */
__global__ void __launch_bounds__(ATT_WARPS * 32)
k_attention(const float *q, const float *kv_batch, const float *ring, const float *comp, const int *sel,
            const int *nsel, int topk, const float *sinks, int nh, int hd, int W, int ratio, int nrot,
            const float *inv_freq, float scale, const int *pos0p, float *o, int nsplit, float *part) {
    cu_pdl_enter();
    int h = blockIdx.x, t = blockIdx.y, sp = blockIdx.z;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int pos0 = *pos0p, qp = pos0 + t;
    int nraw = qp + 1 < W ? qp + 1 : W;
    int ncomp = 0;
    if (ratio == 4) ncomp = nsel[t];
    else if (ratio > 0) ncomp = (qp + 1) / ratio;
    int n = nraw + ncomp;
    int i0 = (int)((int64_t)n * sp / nsplit), i1 = (int)((int64_t)n * (sp + 1) / nsplit);
    const int *sel_t = sel ? sel + (int64_t)t * topk : nullptr;
    const float *qv = q + ((int64_t)t * nh + h) * hd;
    int nv = hd / 32;
    float qr[ATT_MAXV], acc[ATT_MAXV];
#pragma unroll
    for (int k = 0; k < ATT_MAXV; k++) { qr[k] = k < nv ? qv[k * 32 + lane] : 0.f; acc[k] = 0.f; }
    float M = -INFINITY, L = 0.f;
    for (int i = i0 + w; i < i1; i += ATT_WARPS) {
        const float *row = att_row(i, nraw, qp, pos0, W, hd, ratio, kv_batch, ring, comp, sel_t);
        float rv[ATT_MAXV];
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < ATT_MAXV; k++) if (k < nv) { rv[k] = row[k * 32 + lane]; s += qr[k] * rv[k]; }
        s = warp_sum(s) * scale;
        float Mn = fmaxf(M, s);
        float corr = expf(M - Mn), p = expf(s - Mn);
        L = L * corr + p;
#pragma unroll
        for (int k = 0; k < ATT_MAXV; k++) if (k < nv) acc[k] = acc[k] * corr + p * rv[k];
        M = Mn;
    }
    __shared__ float sM[ATT_WARPS], sL[ATT_WARPS];
    __shared__ float sacc[ATT_WARPS][512 + 1];
    if (lane == 0) { sM[w] = M; sL[w] = L; }
#pragma unroll
    for (int k = 0; k < ATT_MAXV; k++) if (k < nv) sacc[w][k * 32 + lane] = acc[k];
    __syncthreads();
    float Mt = nsplit == 1 ? sinks[h] : -INFINITY;
    for (int k = 0; k < ATT_WARPS; k++) Mt = fmaxf(Mt, sM[k]);
    float den = nsplit == 1 ? expf(sinks[h] - Mt) : 0.f;
    float fac[ATT_WARPS];
    for (int k = 0; k < ATT_WARPS; k++) {
        fac[k] = sM[k] == -INFINITY ? 0.f : expf(sM[k] - Mt);
        den += sL[k] * fac[k];
    }
    if (nsplit > 1) {
        float *pp = part + (((int64_t)t * nh + h) * nsplit + sp) * (hd + 2);
        if (threadIdx.x == 0) { pp[0] = Mt; pp[1] = den; }
        for (int d = threadIdx.x; d < hd; d += blockDim.x) {
            float v = 0.f;
            for (int k = 0; k < ATT_WARPS; k++) v += sacc[k][d] * fac[k];
            pp[2 + d] = v;
        }
        return;
    }
    float inv = 1.0f / den;
    __shared__ float ov[512];
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float v = 0.f;
        for (int k = 0; k < ATT_WARPS; k++) v += sacc[k][d] * fac[k];
        ov[d] = v * inv;
    }
    __syncthreads();
    d_rope_tail_sh(ov, hd, nrot, inv_freq, qp, 1);
    __syncthreads();
    float *out = o + ((int64_t)t * nh + h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) out[d] = ov[d];
}

__global__ void k_attn_combine(const float *part, const float *sinks, int nh, int hd, int nsplit, int nrot,
                               const float *inv_freq, const int *pos0p, float *o) {
    cu_pdl_enter();
    int h = blockIdx.x, t = blockIdx.y;
    const float *pp = part + ((int64_t)t * nh + h) * nsplit * (hd + 2);
    float Mt = sinks[h];
    for (int k = 0; k < nsplit; k++) Mt = fmaxf(Mt, pp[k * (hd + 2)]);
    float den = expf(sinks[h] - Mt);
    __shared__ float fac[64];
    __shared__ float ov[512];
    for (int k = 0; k < nsplit; k++) {
        float m = pp[k * (hd + 2)];
        float f = m == -INFINITY ? 0.f : expf(m - Mt);
        if (threadIdx.x == 0) fac[k] = f;
        den += pp[k * (hd + 2) + 1] * f;
    }
    __syncthreads();
    float inv = 1.0f / den;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float v = 0.f;
        for (int k = 0; k < nsplit; k++) v += pp[k * (hd + 2) + 2 + d] * fac[k];
        ov[d] = v * inv;
    }
    __syncthreads();
    d_rope_tail_sh(ov, hd, nrot, inv_freq, *pos0p + t, 1);
    __syncthreads();
    float *out = o + ((int64_t)t * nh + h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) out[d] = ov[d];
}

/* Prefill attention: block (group of 8 heads, token), warp = head. All heads
 * of a token attend to the same rows (one KV head), so the block stages 16
 * rows at a time in shared memory and every row is read from L2 once per 8
 * heads instead of once per head. Each warp keeps its own online softmax
 * over all rows in order, 4 rows per step: a lane holds dims 4 lane + 128 j
 * (float4 loads), the 4 dots reduce together in 6 shuffles (a transposing
 * butterfly) and share one rescale. The sink, normalisation and inverse RoPE
 * follow. Needs hd a multiple of 128 (<= 512); MINKE_CUDA_ATT_HEADS=0 keeps
 * k_attention. */
#define ATH_HEADS 8
#define ATH_ROWS 16
#define ATH_V4 4        /* float4 per lane: hd / 128 */
__global__ void __launch_bounds__(ATH_HEADS * 32)
k_attention_heads(const float *q, const float *kv_batch, const float *ring, const float *comp, const int *sel,
                  const int *nsel, int topk, const float *sinks, int nh, int hd, int W, int ratio, int nrot,
                  const float *inv_freq, float scale, const int *pos0p, float *o) {
    cu_pdl_enter();
    __shared__ __align__(16) float srow[ATH_ROWS * 512];
    int t = blockIdx.y;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int h = blockIdx.x * ATH_HEADS + w;
    int pos0 = *pos0p, qp = pos0 + t;
    int nraw = qp + 1 < W ? qp + 1 : W;
    int ncomp = 0;
    if (ratio == 4) ncomp = nsel[t];
    else if (ratio > 0) ncomp = (qp + 1) / ratio;
    int n = nraw + ncomp;
    const int *sel_t = sel ? sel + (int64_t)t * topk : nullptr;
    int nv = hd / 128;
    float4 qr[ATH_V4], acc[ATH_V4];
    const float4 *qv = (const float4 *)(q + ((int64_t)t * nh + (h < nh ? h : 0)) * hd);
#pragma unroll
    for (int k = 0; k < ATH_V4; k++) {
        qr[k] = k < nv ? qv[k * 32 + lane] : make_float4(0.f, 0.f, 0.f, 0.f);
        acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float M = -INFINITY, L = 0.f;
    int per_row = hd / 4;
    const bool b4 = lane & 16, b3 = lane & 8;
    for (int base = 0; base < n; base += ATH_ROWS) {
        int nr = n - base < ATH_ROWS ? n - base : ATH_ROWS;
        for (int idx = threadIdx.x; idx < nr * per_row; idx += blockDim.x) {
            int r = idx / per_row, c = idx - r * per_row;
            const float *row = att_row(base + r, nraw, qp, pos0, W, hd, ratio, kv_batch, ring, comp, sel_t);
            ((float4 *)(srow + r * hd))[c] = ((const float4 *)row)[c];
        }
        __syncthreads();
        if (h < nh)
            for (int r = 0; r < nr; r += 4) {
                float4 rv[4][ATH_V4];
                float sc[4];
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    const float4 *row = (const float4 *)(srow + (r + u < nr ? r + u : r) * hd);
                    sc[u] = 0.f;
#pragma unroll
                    for (int k = 0; k < ATH_V4; k++)
                        if (k < nv) {
                            float4 v = row[k * 32 + lane];
                            rv[u][k] = v;
                            sc[u] += qr[k].x * v.x + qr[k].y * v.y + qr[k].z * v.z + qr[k].w * v.w;
                        }
                }
                /* lanes with bit 4 clear keep rows 0,1, the others 2,3; then bit 3 picks one */
                float v0 = (b4 ? sc[2] : sc[0]) + __shfl_xor_sync(0xffffffffu, b4 ? sc[0] : sc[2], 16);
                float v1 = (b4 ? sc[3] : sc[1]) + __shfl_xor_sync(0xffffffffu, b4 ? sc[1] : sc[3], 16);
                float x = (b3 ? v1 : v0) + __shfl_xor_sync(0xffffffffu, b3 ? v0 : v1, 8);
                x += __shfl_xor_sync(0xffffffffu, x, 4);
                x += __shfl_xor_sync(0xffffffffu, x, 2);
                x += __shfl_xor_sync(0xffffffffu, x, 1);
                /* lane 8 b4 + ... : row 2 b4 + b3 lives in lanes 16 (row / 2) + 8 (row % 2) */
                float Mn = M;
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    float d = __shfl_sync(0xffffffffu, x, 16 * (u >> 1) + 8 * (u & 1));
                    sc[u] = r + u < nr ? d * scale : -INFINITY;
                    Mn = fmaxf(Mn, sc[u]);
                }
                float corr = expf(M - Mn), p[4];
#pragma unroll
                for (int u = 0; u < 4; u++) p[u] = expf(sc[u] - Mn);
                L = L * corr + ((p[0] + p[1]) + (p[2] + p[3]));
#pragma unroll
                for (int k = 0; k < ATH_V4; k++)
                    if (k < nv) {
                        acc[k].x = acc[k].x * corr + p[0] * rv[0][k].x + p[1] * rv[1][k].x + p[2] * rv[2][k].x + p[3] * rv[3][k].x;
                        acc[k].y = acc[k].y * corr + p[0] * rv[0][k].y + p[1] * rv[1][k].y + p[2] * rv[2][k].y + p[3] * rv[3][k].y;
                        acc[k].z = acc[k].z * corr + p[0] * rv[0][k].z + p[1] * rv[1][k].z + p[2] * rv[2][k].z + p[3] * rv[3][k].z;
                        acc[k].w = acc[k].w * corr + p[0] * rv[0][k].w + p[1] * rv[1][k].w + p[2] * rv[2][k].w + p[3] * rv[3][k].w;
                    }
                M = Mn;
            }
        __syncthreads();
    }
    if (h >= nh) return;
    float Mt = fmaxf(sinks[h], M);
    float fac = M == -INFINITY ? 0.f : expf(M - Mt);
    float den = expf(sinks[h] - Mt) + L * fac;
    float f = fac * (1.0f / den);
    float *ov = srow + w * 512;    /* free after the last row pass */
#pragma unroll
    for (int k = 0; k < ATH_V4; k++)
        if (k < nv) ((float4 *)ov)[k * 32 + lane] = make_float4(acc[k].x * f, acc[k].y * f, acc[k].z * f, acc[k].w * f);
    __syncwarp();
    int off = hd - nrot;
    for (int k = lane; k < nrot / 2; k += 32) {
        float ang = (float)qp * inv_freq[k];
        double sd, cd;
        sincos((double)ang, &sd, &cd);
        float c = (float)cd, s = -(float)sd;
        float x0 = ov[off + 2 * k], x1 = ov[off + 2 * k + 1];
        ov[off + 2 * k] = x0 * c - x1 * s;
        ov[off + 2 * k + 1] = x0 * s + x1 * c;
    }
    __syncwarp();
    float *out = o + ((int64_t)t * nh + h) * hd;
    for (int d = lane; d < hd; d += 32) out[d] = ov[d];
}

/* Default of MINKE_CUDA_ATT_HEADS (k_attention_heads for batches of more than
 * ATT_SPLIT_MAX_T tokens): on once verified on a GPU (run-cuda.sh). */
#define ATH_DEFAULT_ON 1
static int att_heads_mode(void) {
    static int mode = -1;
    if (mode < 0) { const char *e = getenv("MINKE_CUDA_ATT_HEADS"); mode = e ? atoi(e) != 0 : ATH_DEFAULT_ON; }
    return mode;
}

/* MINKE_CUDA_ATT_TC: 0 off, 1 (default) the tensor-core kernel for batches of
 * at least MINKE_CUDA_ATT_TC_MIN tokens (default 256) of models whose
 * attention projections are not F32 (the caller's tc), 2 for every model.
 * Why the limits (f16 q/k/p, see cu_attn_tc.cu and docs/performance.md): the
 * kernel is within ~5e-4 of the f32 one, but the random tiny test model
 * amplifies that: forced on, tiny-a F32 moves 0.08-0.2 from the CPU (the F32
 * check allows 1e-3) and tiny-a q2 sims off gets 19-22 argmax changes against
 * the noise bound's 18; prompts of fewer tokens keep the f32 kernel. */
#define ATT_TC_DEFAULT 1
#define ATT_TC_MIN_T 256
static int att_tc_mode(void) {
    static int mode = -1;
    if (mode < 0) { const char *e = getenv("MINKE_CUDA_ATT_TC"); mode = e ? atoi(e) : ATT_TC_DEFAULT; }
    return mode;
}
static int att_tc_min(void) {
    static int min_t = -1;
    if (min_t < 0) { const char *e = getenv("MINKE_CUDA_ATT_TC_MIN"); min_t = e ? atoi(e) : ATT_TC_MIN_T; if (min_t < 0) min_t = 0; }
    return min_t;
}

void cu_attention(const float *q, const float *kv_batch, const float *ring, const float *comp,
                  const int *sel, const int *nsel, int topk, const float *sinks, int T, int nh, int hd,
                  int W, int ratio, int nrot, const float *inv_freq, float scale, const int *pos0p,
                  float *o, float *part, int nsplit, int tc, cudaStream_t st) {
    if (!part || nsplit < 1) nsplit = 1;
    if (nsplit > 64) nsplit = 64;
    if (nsplit == 1 && T >= att_tc_min() && (att_tc_mode() == 2 || (tc && att_tc_mode() == 1)) &&
        cu_attention_tc(q, kv_batch, ring, comp, sel, nsel, topk, sinks, T, nh, hd, W, ratio, nrot, inv_freq, scale,
                        pos0p, o, st))
        return;
    if (nsplit == 1 && hd <= 512 && hd % 128 == 0 && att_heads_mode()) {
        cu_launch(k_attention_heads, dim3((nh + ATH_HEADS - 1) / ATH_HEADS, T), ATH_HEADS * 32, 0, st,
            q, kv_batch, ring, comp, sel, nsel, topk, sinks, nh, hd, W, ratio, nrot, inv_freq, scale, pos0p, o);
        return;
    }
    cu_launch(k_attention, dim3(nh, T, nsplit), ATT_WARPS * 32, 0, st, q, kv_batch, ring, comp, sel, nsel, topk, sinks, nh, hd,
                                                                W, ratio, nrot, inv_freq, scale, pos0p, o, nsplit, part);
    if (nsplit > 1)
        cu_launch(k_attn_combine, dim3(nh, T), 128, 0, st, part, sinks, nh, hd, nsplit, nrot, inv_freq, pos0p, o);
}

