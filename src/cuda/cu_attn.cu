/* cu_attn.cu: attention inputs and attention with sinks (spec model.md
 * §6.3-§6.4, §6.9): per-head q norm + RoPE, the kv row finish (norm, RoPE,
 * FP8 simulation), the raw-row ring store, and the f32 attention kernels
 * (decode with row splits + combine, prefill 8 heads per block); the
 * tensor-core prefill attention is cu_attn_tc.cu (mma.sync) and cu_attn_wg.cu
 * (wgmma, the default on sm_90a).
 *
 * The compressed rows (comp) come as f32 rows or, with the simulations on,
 * as packed FP8 rows (cu_kvrow.cuh, issue #6): the decode kernels (k_attn_dec,
 * k_attention) take the format as a template parameter (cu_attention picks
 * the instantiation from comp_fmt), unpack a value to the float bits the
 * simulation produced and then do exactly what the f32 instantiation does,
 * so both give the same output bits. The head-batch kernel and the
 * tensor-core prefill read f32 rows: the backend unpacks a prefill batch's
 * rows once (cu_kvrows_unpack). The window rows (kv_batch, ring) are f32.
 *
 * The decode kernels have a current and a previous version (cu_dec.h,
 * MINKE_CUDA_OLD_KERNELS): q head and kv finish are bit-identical, the split
 * attention is not (other splits, see k_attn_dec).
 */
#include <stdlib.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_numerics.cuh"
#include "cuda/cu_ops.h"
#include "cuda/cu_dec.h"
#include "cuda/cu_kvrow.cuh"
#include "cuda/cu_g3.cuh"

static int dec_old_mask = -2;     /* -2: not read yet */
void cu_dec_old_set(int mask) { dec_old_mask = mask; }
int cu_dec_old(int bit) {
    if (dec_old_mask == -2) {
        const char *e = getenv("MINKE_CUDA_OLD_KERNELS");
        dec_old_mask = e ? atoi(e) : 0;
    }
    return (dec_old_mask & bit) != 0;
}

/* The sum of squares of k_qhead / k_kv_finish, (double) x^2 summed by
 * block_sum_d over 128 threads (thread v: dims v, v+128, ... in order, then
 * the warp butterflies, then the 4 warp sums), computed by one warp: lane l
 * stands for threads l, l+32, l+64, l+96. x(i) gives dim i. Every lane gets
 * the bit-identical sum. */
template <typename F>
__device__ __forceinline__ double ss128_warp(int hd, int lane, F x) {
    double ws[4];
#pragma unroll
    for (int m = 0; m < 4; m++) {
        double p = 0.0;
        for (int i = lane + 32 * m; i < hd; i += 128) { float a = x(i); p += (double)a * a; }
        ws[m] = warp_sum_d(p);
    }
    double t = lane == 0 ? ws[0] : lane == 1 ? ws[1] : lane == 2 ? ws[2] : lane == 3 ? ws[3] : 0.0;
    return warp_sum_d(t);
}

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

/* The same with a warp per head (no block barriers; the RoPE angles are
 * computed while the head's loads are in flight); bit-identical to k_qhead.
 * hd <= 512, a multiple of 32; nrot / 2 <= 64. */
#define QH_WARPS 2
__global__ void __launch_bounds__(QH_WARPS * 32)
k_qhead_w(float *q, int nh, int hd, int nrot, const float *inv_freq, const int *pos0p, float eps) {
    __shared__ float sh[QH_WARPS][512];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int h = blockIdx.x * QH_WARPS + w, t = blockIdx.y;
    /* the angles before the wait (see cu_rope_early) */
    int pos = *pos0p + t;
    float cs[2], sn[2];
#pragma unroll
    for (int u = 0; u < 2; u++) {
        int k = lane + 32 * u;
        cs[u] = 1.f; sn[u] = 0.f;
        if (k < nrot / 2) {
            float ang = (float)pos * inv_freq[k];
            double sd, cd;
            sincos((double)ang, &sd, &cd);
            cs[u] = (float)cd; sn[u] = (float)sd;
        }
    }
    cu_pdl_enter();
    if (h >= nh) return;
    float *v = q + ((int64_t)t * nh + h) * hd;
    float *x = sh[w];
    int nv = hd / 32;
#pragma unroll
    for (int j = 0; j < 16; j++) if (j < nv) x[lane + 32 * j] = v[lane + 32 * j];
    __syncwarp();
    double ss = ss128_warp(hd, lane, [&](int i) { return x[i]; });
    float r = (float)(1.0 / sqrt(ss / hd + (double)eps));
#pragma unroll
    for (int j = 0; j < 16; j++) if (j < nv) x[lane + 32 * j] *= r;
    __syncwarp();
    int off = hd - nrot;
#pragma unroll
    for (int u = 0; u < 2; u++) {
        int k = lane + 32 * u;
        if (k < nrot / 2) {
            float c = cs[u], s = sn[u];
            float x0 = x[off + 2 * k], x1 = x[off + 2 * k + 1];
            x[off + 2 * k] = x0 * c - x1 * s;
            x[off + 2 * k + 1] = x0 * s + x1 * c;
        }
    }
    __syncwarp();
#pragma unroll
    for (int j = 0; j < 16; j++) if (j < nv) v[lane + 32 * j] = x[lane + 32 * j];
}

void cu_qhead_norm_rope(float *q, int T, int nh, int hd, int nrot, const float *inv_freq,
                        const int *pos0p, float eps, cudaStream_t st) {
    if (!cu_dec_old(CU_OLD_QHEAD) && hd <= 512 && hd % 32 == 0 && nrot / 2 <= 64 && nrot <= hd) {
        cu_launch(k_qhead_w, dim3((nh + QH_WARPS - 1) / QH_WARPS, T), QH_WARPS * 32, 0, st,
                  q, nh, hd, nrot, inv_freq, pos0p, eps);
        return;
    }
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

/* The same with a thread per dim: warp 0 sums the squares as k_kv_finish's
 * 128 threads do (ss128_warp) while the RoPE threads compute their angles,
 * and the FP8 blocks of 64 dims get a warp each in one round. With a ring
 * (T == 1 only, see cu_kv_finish_ring) the row also goes to slot pos % W.
 * Bit-identical to k_kv_finish. */
__global__ void __launch_bounds__(512)
k_kv_finish_w(const float *kvp, const float *w, int hd, int nrot, const float *inv_freq, const int *pos0p,
              float eps, int sims, int f16round, float *out, int W, float *ring) {
    extern __shared__ float sh[];
    __shared__ float r_sh;
    int t = blockIdx.x, lane = threadIdx.x & 31;
    /* the angles before the wait (see cu_rope_early) */
    int pos = *pos0p + t;
    float c = 1.f, s = 0.f;
    int k = threadIdx.x;
    if (k < nrot / 2) {
        float ang = (float)pos * inv_freq[k];
        double sd, cd;
        sincos((double)ang, &sd, &cd);
        c = (float)cd; s = (float)sd;
    }
    cu_pdl_enter();
    const float *v = kvp + (int64_t)t * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) sh[i] = v[i];
    __syncthreads();
    if (threadIdx.x < 32) {
        double ss = ss128_warp(hd, lane, [&](int i) { return sh[i]; });
        if (lane == 0) r_sh = (float)(1.0 / sqrt(ss / hd + (double)eps));
    }
    __syncthreads();
    float r = r_sh;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) sh[i] = sh[i] * r * w[i];
    __syncthreads();
    if (k < nrot / 2) {
        int off = hd - nrot;
        float x0 = sh[off + 2 * k], x1 = sh[off + 2 * k + 1];
        sh[off + 2 * k] = x0 * c - x1 * s;
        sh[off + 2 * k + 1] = x0 * s + x1 * c;
    }
    __syncthreads();
    if (sims) d_fp8_sim_sh(sh, hd - nrot, nullptr);
    float *ro = ring ? ring + (int64_t)(pos % W) * hd : nullptr;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float y = f16round ? d_f16_round(sh[i]) : sh[i];
        out[(int64_t)t * hd + i] = y;
        if (ro) ro[i] = y;
    }
}

static int kv_finish_w_ok(int hd, int nrot) { return !cu_dec_old(CU_OLD_KV_FINISH) && hd <= 1024 && nrot / 2 <= 512 && nrot <= hd; }
static int kv_finish_threads(int hd) {
    int n = (hd + 31) / 32 * 32;
    if (n < 128) n = 128;
    return n > 512 ? 512 : n;
}

void cu_kv_finish(const float *kvp, const float *w, int T, int hd, int nrot, const float *inv_freq,
                  const int *pos0p, float eps, int sims, int f16round, float *kv_out, cudaStream_t st) {
    if (kv_finish_w_ok(hd, nrot)) {
        cu_launch(k_kv_finish_w, T, kv_finish_threads(hd), hd * sizeof(float), st, kvp, w, hd, nrot, inv_freq,
                  pos0p, eps, sims, f16round, kv_out, 1, (float *)nullptr);
        return;
    }
    cu_launch(k_kv_finish, T, 128, hd * sizeof(float), st, kvp, w, hd, nrot, inv_freq, pos0p, eps, sims, f16round, kv_out);
}

int cu_kv_finish_ring(const float *kvp, const float *w, int T, int hd, int nrot, const float *inv_freq,
                      const int *pos0p, float eps, int sims, int f16round, float *kv_out, int W, float *ring,
                      cudaStream_t st) {
    if (T != 1 || !ring || W < 1 || !kv_finish_w_ok(hd, nrot)) {
        cu_kv_finish(kvp, w, T, hd, nrot, inv_freq, pos0p, eps, sims, f16round, kv_out, st);
        return 0;
    }
    cu_launch(k_kv_finish_w, T, kv_finish_threads(hd), hd * sizeof(float), st, kvp, w, hd, nrot, inv_freq,
              pos0p, eps, sims, f16round, kv_out, W, ring);
    return 1;
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

/* Row i of token q's attention list: a window row (kv_batch or ring, f32) for
 * i < nraw, else a compressed row in FMT's layout (CU_KV_F32: hd floats;
 * CU_KV_FP8: kv8_stride(hd, nrot) bytes, a row of the list is packed exactly
 * when FMT is CU_KV_FP8 and i >= nraw). */
template <int FMT>
__device__ __forceinline__ const void *att_row(int i, int nraw, int q, int pos0, int W, int hd, int nrot, int ratio,
                                               const float *kv_batch, const float *ring, const void *comp,
                                               const int *sel_t) {
    if (i < nraw) {
        int j = q - nraw + 1 + i;
        return j >= pos0 ? kv_batch + (int64_t)(j - pos0) * hd : ring + (int64_t)(j % W) * hd;
    }
    int c = i - nraw;
    if (ratio == 4) c = sel_t[c];
    if (FMT == CU_KV_FP8) return (const uint8_t *)comp + (int64_t)c * kv8_stride(hd, nrot);
    return (const float *)comp + (int64_t)c * hd;
}

/* value col of a row (packed: an FP8 row) */
template <int FMT>
__device__ __forceinline__ float att_val(const void *row, bool packed, int col, int hd, int nrot) {
    if (FMT == CU_KV_FP8 && packed) return kv8_load1((const uint8_t *)row, col, hd, nrot);
    return ((const float *)row)[col];
}

/* Block (head, token, split): the split's rows are spread over 8 warps, each
 * with an online softmax; the warps are merged in shared memory. With one
 * split the sink, normalisation and inverse RoPE follow in the same block;
 * with several the partial (M, L, acc) go to `part` and k_attn_combine
 * finishes (decode: 64 heads x 8 splits keep the GPU busy). */
template <int FMT>
__global__ void __launch_bounds__(ATT_WARPS * 32)
k_attention(const float *q, const float *kv_batch, const float *ring, const void *comp, const int *sel,
            const int *nsel, int topk, const float *sinks, int nh, int hd, int W, int ratio, int nrot,
            const float *inv_freq, float scale, const int *pos0p, float *o, int nsplit, float *part) {
    cu_pdl_enter();
    int h = blockIdx.x, t = blockIdx.y, sp = blockIdx.z;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int pos0 = *pos0p, qp = pos0 + t;
    int nraw = attn_nraw(qp, W), n = attn_nrows(t, qp, W, ratio, nsel);
    int i0 = (int)((int64_t)n * sp / nsplit), i1 = (int)((int64_t)n * (sp + 1) / nsplit);
    const int *sel_t = sel ? sel + (int64_t)t * topk : nullptr;
    const float *qv = q + ((int64_t)t * nh + h) * hd;
    int nv = hd / 32;
    float qr[ATT_MAXV], acc[ATT_MAXV];
#pragma unroll
    for (int k = 0; k < ATT_MAXV; k++) { qr[k] = k < nv ? qv[k * 32 + lane] : 0.f; acc[k] = 0.f; }
    float M = -INFINITY, L = 0.f;
    for (int i = i0 + w; i < i1; i += ATT_WARPS) {
        const void *row = att_row<FMT>(i, nraw, qp, pos0, W, hd, nrot, ratio, kv_batch, ring, comp, sel_t);
        const bool packed = i >= nraw;
        float rv[ATT_MAXV];
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < ATT_MAXV; k++)
            if (k < nv) { rv[k] = att_val<FMT>(row, packed, k * 32 + lane, hd, nrot); s += qr[k] * rv[k]; }
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

/* Decode attention with splits that follow the row count (k_attn_dec +
 * k_attn_dec_combine; MINKE_CUDA_OLD_KERNELS bit 4 keeps k_attention +
 * k_attn_combine).
 *
 * Row groups (RG = 2, the default for 8 heads a block; MINKE_CUDA_ATT_RG=1
 * for one): a block has RG x HPB warps, warp w taking head w % HPB and the
 * staged chunk's 4-row steps w / HPB, w / HPB + RG, ...; at the end group 0
 * merges the others' (M, L, acc) in order (M = max, each side rescaled by
 * exp(M_g - M)). Twice the warps an SM hide the loop's latencies (one block
 * an SM: 128 blocks of 16 warps at 128 registers, no spills); measured on
 * the H200 (docs/performance.md, twenty-seventh session): attention +
 * combine 21.5 -> 19.0 us alone, decode +1.2% at ctx 4096 and 65536.
 *
 * Splits: a token's n rows (window, then compressed or selected) are cut into
 * S = clamp(min(ceil(n / min_rows), fill), 1, nsplit) contiguous ranges,
 * split sp taking rows [n sp / S, n (sp + 1) / S) (min_rows:
 * MINKE_CUDA_ATT_MIN_ROWS, default 16; fill = SMs / (head groups x T), so
 * the splits grow with the rows until every SM has a block, x
 * MINKE_CUDA_ATT_FILL; nsplit: the caller's partial buffer). Block (head group, token,
 * split): HPB warps (x RG row groups, above), one head each, stage the split's rows in shared memory
 * (cp.async, ADEC_NST stages of ADEC_CH rows) so a row is read from L2 once
 * per head group, not once per head. Each warp runs k_attention_heads' online
 * softmax over its split's rows in order, 4 rows per step, and stores the
 * unnormalised (M, L, acc). The combine (block per head and token) takes the
 * splits in ascending order: Mt = max(sink, M_s), f_s = exp(M_s - Mt) (0 for
 * an empty split), den = exp(sink - Mt) + L_0 f_0 + L_1 f_1 + ... (summed in
 * split order), o_d = (acc_0d f_0 + acc_1d f_1 + ...) / den (in split order),
 * then the inverse RoPE of the tail.
 * Partial layout in `part`: acc [T][nh][nsplit][hd], then (M, L) [T][nh][nsplit].
 *
 * FP8 compressed rows (k_attn_dec<HPB, CU_KV_FP8>): a chunk holds its window
 * rows (f32, staged as above) and then its compressed rows. One warp copies
 * a compressed row's packed bytes by cp.async into the last kv8_stride bytes
 * of the row's f32 slot and, after its wait, unpacks them in place
 * (adec_unpack_fp8) before the block barrier: the products then read f32
 * rows exactly as in the f32 kernel, with no extra shared memory and no extra
 * block barrier (the warp's own __syncwarp orders its lanes' copies). With
 * nrot % 4 == 0 (the launcher's condition) the packed RoPE tail already lies
 * where the f32 row has it: 4 hd - kv8_stride + kv8_rope_off = 4 (hd - nrot). */
#define ADEC_CH 16
#define ADEC_NST 3
#define ADEC_MAXS 64
#define ADEC_V4 4     /* float4 per lane: hd / 128 */

/* rows of a chunk (rows base .. base + nr - 1) that are window rows */
__device__ __forceinline__ int adec_nwin(int base, int nr, int nraw) {
    int k = nraw - base;
    return k < 0 ? 0 : k < nr ? k : nr;
}
/* where the packed bytes of an FP8 row go in its f32 slot: its last pk_stride bytes */
__device__ __forceinline__ uint8_t *adec_pk_slot(float *slot, int hd, int pk_stride) {
    return (uint8_t *)(slot + hd) - pk_stride;
}
/* The FP8 row staged in slot (by this warp's cp.async, each lane past its
 * wait) becomes the f32 row, in place: the codes and scales are read into
 * registers first (the floats overwrite them), then the values written; the
 * tail is already in place. nope = hd - nrot <= 512, a multiple of 64. */
__device__ __forceinline__ void adec_unpack_fp8(float *slot, int hd, int nrot, int pk_stride, int lane) {
    const int nope = hd - nrot;
    const uint8_t *pk = adec_pk_slot(slot, hd, pk_stride);
    uint32_t code4[ADEC_V4];
    float bscale[ADEC_V4];
    __syncwarp();               /* every lane's copies visible to the warp */
#pragma unroll
    for (int k = 0; k < ADEC_V4; k++) {
        const int g = lane + 32 * k;        /* values 4 g .. 4 g + 3 */
        code4[k] = 0u; bscale[k] = 0.f;
        if (4 * g < nope) { code4[k] = *(const uint32_t *)(pk + 4 * g); bscale[k] = kv_scale(pk[nope + g / 16]); }
    }
    __syncwarp();               /* all reads of the packed bytes done */
#pragma unroll
    for (int k = 0; k < ADEC_V4; k++) {
        const int g = lane + 32 * k;
        if (4 * g < nope) ((float4 *)slot)[g] = kv8_dec4(code4[k], bscale[k]);
    }
}

__device__ __forceinline__ int adec_splits(int n, int nsplit, int min_rows, int fill) {
    int s = (n + min_rows - 1) / min_rows;
    if (s > fill) s = fill;
    if (s > nsplit) s = nsplit;
    return s < 1 ? 1 : s;
}

/* The split combine's inverse RoPE of dims d0 .. d0 + 3 (tail pairs; the
 * angles in double, as the CPU): the cos / -sin of the two pairs, then the
 * rotation. (1, 0) outside the tail leaves y as it is. */
__device__ __forceinline__ void adec_rope_angles(int d0, int off, int qp, const float *inv_freq, float (&cs)[2],
                                                 float (&sn)[2]) {
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int k = (d0 - off) / 2 + u;
        const float ang = (float)qp * inv_freq[k];
        double sd, cd;
        sincos((double)ang, &sd, &cd);
        cs[u] = (float)cd; sn[u] = -(float)sd;
    }
}
__device__ __forceinline__ void adec_rope_apply(float (&y)[4], const float (&cs)[2], const float (&sn)[2]) {
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const float c = cs[u], s = sn[u], x0 = y[2 * u], x1 = y[2 * u + 1];
        y[2 * u] = x0 * c - x1 * s;
        y[2 * u + 1] = x0 * s + x1 * c;
    }
}

/* nrot (read for the FP8 rows only) is the last parameter, so the f32
 * kernel's parameters keep the offsets they had before the FP8 rows.
 * ADEC_MINB: the blocks per SM the launch bounds ask for. 0 (none) leaves the
 * f32 kernels' code as it was (127 registers: two blocks of 8 heads per SM,
 * as the shared memory allows); the FP8 kernel of 8 heads would take 137 and
 * fit one, so it asks for two (128 registers, 20 / 60 bytes of spills).
 * Where the grid has no more blocks than SMs (one token: 128 blocks), two a
 * SM cannot matter, so an FP8 8-head instance without the request runs there
 * (137 registers, no spills): Flash q2 decode at ctx 4096 164.9-165.2 tok/s
 * against 162.3-163.9 (twelfth session). MINKE_CUDA_ATT_MINB=1 keeps the
 * capped instance everywhere (A/B). */
#define ADEC_MINB(HPB, FMT) ((FMT) == CU_KV_FP8 && (HPB) == 8 ? 2 : 0)
template <int HPB, int FMT, int MINB = ADEC_MINB(HPB, FMT), int RG = 1>
__global__ void __launch_bounds__(HPB * RG * 32, MINB)
k_attn_dec(const float *q, const float *kv_batch, const float *ring, const void *comp, const int *sel,
           const int *nsel, int topk, int nh, int hd, int W, int ratio, float scale, const int *pos0p,
           int nsplit, int min_rows, int fill, float *part, int nrot) {
    cu_pdl_enter();
    extern __shared__ __align__(16) float srow[];     /* ADEC_NST x ADEC_CH rows of hd */
    int t = blockIdx.y, sp = blockIdx.z, T = gridDim.y;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    constexpr int NWB = HPB * RG;      /* warps a block: RG row groups of HPB heads */
    const int rg = w / HPB;            /* this warp's row group: the chunk's 4-row steps rg, rg + RG, ... */
    int h = blockIdx.x * HPB + (w - rg * HPB);
    int pos0 = *pos0p, qp = pos0 + t;
    int nraw = qp + 1 < W ? qp + 1 : W;
    int n = attn_nrows(t, pos0 + t, W, ratio, nsel);
    int S = adec_splits(n, nsplit, min_rows, fill);
    if (sp >= S) return;
    int i0 = (int)((int64_t)n * sp / S), i1 = (int)((int64_t)n * (sp + 1) / S);
    const int *sel_t = sel ? sel + (int64_t)t * topk : nullptr;
    int nv = hd / 128, per_row = hd / 4;
    int nrows = i1 - i0, nchunk = (nrows + ADEC_CH - 1) / ADEC_CH;
    const int pk_stride = FMT == CU_KV_FP8 ? kv8_stride(hd, nrot) : 0;
    /* stage chunk c into buffer c % ADEC_NST (always one commit group per
     * call); FP8: the compressed rows (from nf on) a warp each, see above */
    auto issue = [&](int c) {
        if (c < nchunk) {
            int base = i0 + c * ADEC_CH, nr = min(ADEC_CH, i1 - base);
            float *dst = srow + (c % ADEC_NST) * ADEC_CH * hd;
            int nf = FMT == CU_KV_FP8 ? adec_nwin(base, nr, nraw) : nr;     /* rows copied as f32 */
            for (int idx = threadIdx.x; idx < nf * per_row; idx += blockDim.x) {
                int r = idx / per_row, col = idx - r * per_row;
                const float *row = (const float *)att_row<FMT>(base + r, nraw, qp, pos0, W, hd, nrot, ratio,
                                                               kv_batch, ring, comp, sel_t);
                cp_async16(dst + r * hd + 4 * col, row + 4 * col);
            }
            if (FMT == CU_KV_FP8)
                for (int r = nf + w; r < nr; r += NWB) {
                    const uint8_t *row = (const uint8_t *)att_row<FMT>(base + r, nraw, qp, pos0, W, hd, nrot, ratio,
                                                                       kv_batch, ring, comp, sel_t);
                    uint8_t *pk = adec_pk_slot(dst + r * hd, hd, pk_stride);
                    for (int j = lane; j < pk_stride / 16; j += 32) cp_async16(pk + 16 * j, row + 16 * j);
                }
        }
        cp_async_commit();
    };
#pragma unroll
    for (int c = 0; c < ADEC_NST - 1; c++) issue(c);
    float4 qr[ADEC_V4], acc[ADEC_V4];
    const float4 *qv = (const float4 *)(q + ((int64_t)t * nh + (h < nh ? h : 0)) * hd);
#pragma unroll
    for (int k = 0; k < ADEC_V4; k++) {
        qr[k] = k < nv ? qv[k * 32 + lane] : make_float4(0.f, 0.f, 0.f, 0.f);
        acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float M = -INFINITY, L = 0.f;
    const bool b4 = lane & 16, b3 = lane & 8;
    for (int c = 0; c < nchunk; c++) {
        issue(c + ADEC_NST - 1);
        cp_async_wait<ADEC_NST - 1>();
        if (FMT == CU_KV_FP8) {     /* this warp's compressed rows of chunk c, as issue() assigned them */
            int base = i0 + c * ADEC_CH, nr = min(ADEC_CH, i1 - base);
            float *dst = srow + (c % ADEC_NST) * ADEC_CH * hd;
            for (int r = adec_nwin(base, nr, nraw) + w; r < nr; r += NWB)
                adec_unpack_fp8(dst + r * hd, hd, nrot, pk_stride, lane);
        }
        __syncthreads();
        const float *buf = srow + (c % ADEC_NST) * ADEC_CH * hd;
        int nr = min(ADEC_CH, i1 - (i0 + c * ADEC_CH));
        if (h < nh)
            for (int r = 4 * rg; r < nr; r += 4 * RG) {
                float4 rv[4][ADEC_V4];
                float sc[4];
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    const float4 *row = (const float4 *)(buf + (r + u < nr ? r + u : r) * hd);
                    sc[u] = 0.f;
#pragma unroll
                    for (int k = 0; k < ADEC_V4; k++)
                        if (k < nv) {
                            float4 v = row[k * 32 + lane];
                            rv[u][k] = v;
                            sc[u] += qr[k].x * v.x + qr[k].y * v.y + qr[k].z * v.z + qr[k].w * v.w;
                        }
                }
                float v0 = (b4 ? sc[2] : sc[0]) + __shfl_xor_sync(0xffffffffu, b4 ? sc[0] : sc[2], 16);
                float v1 = (b4 ? sc[3] : sc[1]) + __shfl_xor_sync(0xffffffffu, b4 ? sc[1] : sc[3], 16);
                float x = (b3 ? v1 : v0) + __shfl_xor_sync(0xffffffffu, b3 ? v0 : v1, 8);
                x += __shfl_xor_sync(0xffffffffu, x, 4);
                x += __shfl_xor_sync(0xffffffffu, x, 2);
                x += __shfl_xor_sync(0xffffffffu, x, 1);
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
                for (int k = 0; k < ADEC_V4; k++)
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
    cp_async_wait<0>();
    if constexpr (RG > 1) {
        /* the row groups' (M, L, acc) of a head meet in shared memory (the
         * staging buffers, free after the loop's last barrier): group 0
         * takes groups 1 .. RG - 1 in order, each with its own rescale */
        /* group g >= 1's warp w writes slot w - HPB: [acc hd, M, L, pad] */
        if (rg > 0 && h < nh) {
            float *pm = srow + (size_t)(w - HPB) * (hd + 4);
#pragma unroll
            for (int k = 0; k < ADEC_V4; k++)
                if (k < nv) ((float4 *)pm)[k * 32 + lane] = acc[k];
            if (lane == 0) { pm[hd] = M; pm[hd + 1] = L; }
        }
        __syncthreads();
        if (rg > 0) return;
#pragma unroll
        for (int g = 1; g < RG; g++) {
            const float *po = srow + (size_t)(w + (g - 1) * HPB) * (hd + 4);
            const float Mo = po[hd], Lo = po[hd + 1], Mn = fmaxf(M, Mo);
            /* -inf on both sides (no rows yet): the factors would be NaN */
            const float f0 = M == -INFINITY ? 0.f : expf(M - Mn), f1 = Mo == -INFINITY ? 0.f : expf(Mo - Mn);
            L = L * f0 + Lo * f1;
#pragma unroll
            for (int k = 0; k < ADEC_V4; k++)
                if (k < nv) {
                    const float4 o = ((const float4 *)po)[k * 32 + lane];
                    acc[k].x = acc[k].x * f0 + o.x * f1; acc[k].y = acc[k].y * f0 + o.y * f1;
                    acc[k].z = acc[k].z * f0 + o.z * f1; acc[k].w = acc[k].w * f0 + o.w * f1;
                }
            M = Mn;
        }
    }
    if (h >= nh) return;
    int64_t rec = ((int64_t)t * nh + h) * nsplit + sp;
    float4 *pa = (float4 *)(part + rec * hd);
#pragma unroll
    for (int k = 0; k < ADEC_V4; k++)
        if (k < nv) pa[k * 32 + lane] = acc[k];
    if (lane == 0) {
        float *ml = part + (int64_t)T * nh * nsplit * hd + rec * 2;
        ml[0] = M; ml[1] = L;
    }
}

/* block (head, token); thread = 4 dims (hd <= 4 x blockDim). See above for the order. */
#define ACMB_PRE 16
__global__ void __launch_bounds__(128)
k_attn_dec_combine(const float *part, const float *sinks, const int *nsel, int nh, int hd, int W, int ratio,
                   int nsplit, int min_rows, int fill, int nrot, const float *inv_freq, const int *pos0p, float *o,
                   int *o_items) {
    __shared__ float fac[ADEC_MAXS];
    __shared__ float inv_sh;
    int h = blockIdx.x, t = blockIdx.y, T = gridDim.y, lane = threadIdx.x & 31;
    int pos0 = *pos0p, qp = pos0 + t;
    /* the RoPE angles of this thread's tail pairs, before the wait (see cu_rope_early) */
    int d0 = 4 * threadIdx.x, off = hd - nrot;
    float cs[2] = {1.f, 1.f}, sn[2] = {0.f, 0.f};
    bool rot = d0 < hd && d0 >= off;
    if (rot) adec_rope_angles(d0, off, qp, inv_freq, cs, sn);
    cu_pdl_enter();
    int n = attn_nrows(t, qp, W, ratio, nsel);
    int S = adec_splits(n, nsplit, min_rows, fill);
    int64_t rec0 = ((int64_t)t * nh + h) * nsplit;
    const float *ml = part + (int64_t)T * nh * nsplit * hd + rec0 * 2;
    /* the first ACMB_PRE splits' sums in flight while warp 0 weighs the splits
     * (one round trip to L2 instead of two); added below in split order */
    const float *pa = part + rec0 * hd + d0;
    float4 pre[ACMB_PRE];
#pragma unroll
    for (int u = 0; u < ACMB_PRE; u++)
        if (u < S && d0 < hd) pre[u] = *(const float4 *)(pa + (int64_t)u * hd);
    if (threadIdx.x < 32) {
        float sink = sinks[h];
        float m0 = lane < S ? ml[2 * lane] : -INFINITY, m1 = lane + 32 < S ? ml[2 * (lane + 32)] : -INFINITY;
        float l0 = lane < S ? ml[2 * lane + 1] : 0.f, l1 = lane + 32 < S ? ml[2 * (lane + 32) + 1] : 0.f;
        float Mt = fmaxf(sink, warp_max(fmaxf(m0, m1)));
        float f0 = m0 == -INFINITY ? 0.f : expf(m0 - Mt), f1 = m1 == -INFINITY ? 0.f : expf(m1 - Mt);
        if (lane < S) fac[lane] = f0;
        if (lane + 32 < S) fac[lane + 32] = f1;
        float lf0 = l0 * f0, lf1 = l1 * f1;
        __syncwarp();
        /* den in split order: lane 0 walks the products (lanes hold splits l, l + 32) */
        float den = expf(sink - Mt);
        for (int k = 0; k < S; k++) {
            float v = __shfl_sync(0xffffffffu, k < 32 ? lf0 : lf1, k & 31);
            den += v;
        }
        if (lane == 0) inv_sh = 1.0f / den;
    }
    __syncthreads();
    if (d0 >= hd) return;
    float inv = inv_sh;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int u = 0; u < ACMB_PRE; u++)
        if (u < S) {
            float f = fac[u];
            v.x += pre[u].x * f; v.y += pre[u].y * f; v.z += pre[u].z * f; v.w += pre[u].w * f;
        }
    for (int k = ACMB_PRE; k < S; k += 8) {      /* 8 loads in flight, then the products in split order */
        float4 a[8];
#pragma unroll
        for (int u = 0; u < 8; u++)
            if (k + u < S) a[u] = *(const float4 *)(pa + (int64_t)(k + u) * hd);
#pragma unroll
        for (int u = 0; u < 8; u++)
            if (k + u < S) {
                float f = fac[k + u];
                v.x += a[u].x * f; v.y += a[u].y * f; v.z += a[u].z * f; v.w += a[u].w * f;
            }
    }
    float y[4] = {v.x * inv, v.y * inv, v.z * inv, v.w * inv};
    if (rot) adec_rope_apply(y, cs, sn);
    const float4 yv = make_float4(y[0], y[1], y[2], y[3]);
    const int64_t oi = ((int64_t)t * nh + h) * hd + d0;
    *(float4 *)(o + oi) = yv;
    /* o as out_a's input items too (hd a multiple of 32: an item's 8 lanes are all here) */
    if (o_items) g3_item_store(o_items + (oi >> 5) * G3_IW, yv, g3_item_amax(yv, 0xffu << (lane & 24)), lane & 7);
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
k_attention_heads(const float *q, const float *kv_batch, const float *ring, const void *comp, const int *sel,
                  const int *nsel, int topk, const float *sinks, int nh, int hd, int W, int ratio, int nrot,
                  const float *inv_freq, float scale, const int *pos0p, float *o) {
    cu_pdl_enter();
    __shared__ __align__(16) float srow[ATH_ROWS * 512];
    int t = blockIdx.y;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int h = blockIdx.x * ATH_HEADS + w;
    int pos0 = *pos0p, qp = pos0 + t;
    int nraw = attn_nraw(qp, W), n = attn_nrows(t, qp, W, ratio, nsel);
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
            const float *row = (const float *)att_row<CU_KV_F32>(base + r, nraw, qp, pos0, W, hd, nrot, ratio, kv_batch,
                                                                 ring, comp, sel_t);
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

/* the f32 kernels: prefill 8 heads a block, split decode + combine, the generic one;
 * 1 when the split decode's combine stored o's items too (o_items) */
static int attention_f32(const float *q, const float *kv_batch, const float *ring, const void *comp, bool fp8,
                          const int *sel, const int *nsel, int topk, const float *sinks, int T, int nh, int hd, int W,
                          int ratio, int nrot, const float *inv_freq, float scale, const int *pos0p, float *o,
                          float *part, int nsplit, int *o_items, cudaStream_t st) {
    if (!fp8 && nsplit == 1 && hd <= 512 && hd % 128 == 0 && att_heads_mode()) {
        cu_launch(k_attention_heads,
            dim3((nh + ATH_HEADS - 1) / ATH_HEADS, T), ATH_HEADS * 32, 0, st,
            q, kv_batch, ring, comp, sel, nsel, topk, sinks, nh, hd, W, ratio, nrot, inv_freq, scale, pos0p, o);
        return 0;
    }
    if (nsplit > 1 && hd % 128 == 0 && hd <= 512 && nrot % 4 == 0 && nrot <= hd && !cu_dec_old(CU_OLD_ATTENTION)) {
        static int min_rows = -1, hpb_env = -1, fill_mult = 1, nsm = 0;
        if (min_rows < 0) {
            const char *e = getenv("MINKE_CUDA_ATT_MIN_ROWS");
            min_rows = e && atoi(e) > 0 ? atoi(e) : 16;
            e = getenv("MINKE_CUDA_ATT_HPB");
            hpb_env = e ? atoi(e) : 0;
            e = getenv("MINKE_CUDA_ATT_FILL");
            fill_mult = e && atoi(e) > 0 ? atoi(e) : 1;
            nsm = cu_num_sms();
        }
        if (nsplit > ADEC_MAXS) nsplit = ADEC_MAXS;
        /* 8 heads per block (a row read from L2 once per 8 heads, 2 warps per
         * scheduler) when the splits can still give every SM a block, else 4 */
        int hg8 = (nh + 7) / 8;
        int hpb = hpb_env == 4 || hpb_env == 8 ? hpb_env : 4 * nsplit * hg8 * T >= 3 * nsm ? 8 : 4;
        int fill = fill_mult * nsm / (((nh + hpb - 1) / hpb) * T);
        if (fill < 1) fill = 1;
        size_t smem = (size_t)ADEC_NST * ADEC_CH * hd * sizeof(float);
        static unsigned attr_done = 0;
        if (cu_dev_first(&attr_done)) cu_attn_init();
        static int minb_env = -2;
        if (minb_env == -2) { const char *e = getenv("MINKE_CUDA_ATT_MINB"); minb_env = e && *e ? atoi(e) : 0; }
        const bool uncapped = minb_env == 0 && (int64_t)((nh + hpb - 1) / hpb) * T * nsplit <= nsm;
        /* two row groups of 8 warps where a block has 8 heads (see k_attn_dec; MINKE_CUDA_ATT_RG=1: one) */
        static int rg_env = -1;
        if (rg_env < 0) { const char *e = getenv("MINKE_CUDA_ATT_RG"); rg_env = e && atoi(e) == 1 ? 1 : 2; }
        const int rg = hpb == 8 ? rg_env : 1;
        auto kdec = hpb == 4    ? (fp8 ? k_attn_dec<4, CU_KV_FP8> : k_attn_dec<4, CU_KV_F32>)
                    : rg == 2   ? (fp8 ? k_attn_dec<8, CU_KV_FP8, 1, 2> : k_attn_dec<8, CU_KV_F32, 1, 2>)
                    : !fp8      ? k_attn_dec<8, CU_KV_F32>
                    : uncapped  ? k_attn_dec<8, CU_KV_FP8, 0>
                                : k_attn_dec<8, CU_KV_FP8>;
        cu_launch(kdec, dim3((nh + hpb - 1) / hpb, T, nsplit), hpb * 32 * rg, smem, st, q, kv_batch, ring, comp, sel,
                  nsel, topk, nh, hd, W, ratio, scale, pos0p, nsplit, min_rows, fill, part, nrot);
        cu_launch(k_attn_dec_combine, dim3(nh, T), 128, 0, st, part, sinks, nsel, nh, hd, W, ratio, nsplit, min_rows, fill,
                  nrot, inv_freq, pos0p, o, o_items);
        return o_items != nullptr;
    }
    cu_launch(fp8 ? k_attention<CU_KV_FP8> : k_attention<CU_KV_F32>, dim3(nh, T, nsplit), ATT_WARPS * 32, 0, st,
              q, kv_batch, ring, comp, sel, nsel, topk, sinks, nh, hd, W, ratio, nrot, inv_freq, scale, pos0p, o, nsplit, part);
    if (nsplit > 1)
        cu_launch(k_attn_combine, dim3(nh, T), 128, 0, st, part, sinks, nh, hd, nsplit, nrot, inv_freq, pos0p, o);
    return 0;
}

int cu_attention(const float *q, const float *kv_batch, const float *ring, const void *comp, int comp_fmt,
                 const int *sel, const int *nsel, int topk, const float *sinks, int T, int nh, int hd,
                 int W, int ratio, int nrot, const float *inv_freq, float scale, const int *pos0p, int pos0,
                 float qeps, float *o, unsigned *o_amax, float *part, int nsplit, int tc, int *o_items, cudaStream_t st) {
    const bool fp8 = comp_fmt == CU_KV_FP8;
    if (o_amax) cudaMemsetAsync(o_amax, 0, 4, st);
    if (!part || nsplit < 1) nsplit = 1;
    if (nsplit > 64) nsplit = 64;
    /* FP8 rows: the decode kernels read them; a batch's (nsplit 1) take k_attention,
     * the backend unpacks them first (cu_kvrows_unpack) for the prefill kernels */
    if (!fp8 && nsplit == 1 && T >= att_tc_min() && (att_tc_mode() == 2 || (tc && att_tc_mode() == 1)) &&
        cu_attention_tc(q, kv_batch, ring, (const float *)comp, sel, nsel, topk, sinks, T, nh, hd, W, ratio, nrot,
                        inv_freq, scale, pos0p, pos0, qeps, o, o_amax, st))
        return 0;     /* o's amax included */
    /* the other kernels read q normed */
    if (qeps >= 0.f) cu_qhead_norm_rope((float *)q, T, nh, hd, nrot, inv_freq, pos0p, qeps, st);
    const int items = attention_f32(q, kv_batch, ring, comp, fp8, sel, nsel, topk, sinks, T, nh, hd, W, ratio, nrot,
                                    inv_freq, scale, pos0p, o, part, nsplit, o_items, st);
    if (o_amax) cu_amax_f32(o, T, nh * hd, (int64_t)nh * hd, o_amax, st);
    return items;
}

int64_t cu_attention_part_floats(int T, int nh, int hd, int nsplit) { return (int64_t)T * nh * nsplit * (hd + 2); }

void cu_attn_init(void) {
    size_t smem = (size_t)ADEC_NST * ADEC_CH * 512 * sizeof(float);
    cudaFuncSetAttribute(k_attn_dec<8, CU_KV_F32>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    cudaFuncSetAttribute(k_attn_dec<4, CU_KV_F32>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    cudaFuncSetAttribute(k_attn_dec<8, CU_KV_FP8>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    cudaFuncSetAttribute(k_attn_dec<8, CU_KV_FP8, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    cudaFuncSetAttribute(k_attn_dec<4, CU_KV_FP8>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    cudaFuncSetAttribute(k_attn_dec<8, CU_KV_F32, 1, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    cudaFuncSetAttribute(k_attn_dec<8, CU_KV_FP8, 1, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
}

