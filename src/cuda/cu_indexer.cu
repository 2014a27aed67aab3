/* cu_indexer.cu: the lightning indexer (spec model.md §6.6): query prep
 * (RoPE, Hadamard, FP4 simulation), scores of the compressed index rows and
 * the deterministic top-k (lowest index wins ties).
 */
#include <stdlib.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_numerics.cuh"
#include "cuda/cu_ops.h"

/* ------------------------------------------------------------------ */
/* indexer (spec §9)                                                   */

__global__ void k_idx_q_prep(float *qI, int nh, int hd, int nrot, const float *inv_freq, const int *pos0p, int sims) {
    cu_pdl_enter();
    extern __shared__ float sh[];     /* hd floats + 128 doubles */
    int h = blockIdx.x, t = blockIdx.y;
    float *v = qI + ((int64_t)t * nh + h) * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) sh[i] = v[i];
    __syncthreads();
    d_rope_tail_sh(sh, hd, nrot, inv_freq, *pos0p + t, 0);
    __syncthreads();
    if (sims) {
        d_hadamard128_sh(sh, (double *)(sh + hd + (hd & 1)));
        d_fp4_sim_sh(sh, hd);
    }
    for (int i = threadIdx.x; i < hd; i += blockDim.x) v[i] = sh[i];
}
void cu_idx_q_prep(float *qI, int T, int nh, int hd, int nrot, const float *inv_freq, const int *pos0p,
                   int sims, cudaStream_t st) {
    size_t shm = (size_t)(hd + 2) * sizeof(float) + 128 * sizeof(double);
    cu_launch(k_idx_q_prep, dim3(nh, T), 128, shm, st, qI, nh, hd, nrot, inv_freq, pos0p, sims);
}

/* scores[t][c] = sum_h wI[h]*scale * relu(qI[h] . row[c]) for c < nI(t), only when nI(t) > topk.
 * Block: 256 threads = 32 row slots x 8 head groups, each slot taking 4 rows
 * (128 rows per block, so the query staged in shared memory - padded rows,
 * no bank conflicts between the head groups - serves 4x more rows per load);
 * the 8 partial scores of a row are summed with shuffles. */
#define IDX_ROWS 128
#define IDX_RPT 4
__global__ void __launch_bounds__(256) k_idx_scores(const float *qI, const float *wI, const float *rows, int nh, int hd,
                                                    float wscale, int topk, const int *pos0p, float *scores, int64_t sstride) {
    cu_pdl_enter();
    extern __shared__ float qs[];     /* nh*(hd+4) floats + nh */
    int t = blockIdx.y;
    int nI = (*pos0p + t + 1) / 4;
    if (nI <= topk) return;
    int c0 = blockIdx.x * IDX_ROWS;
    if (c0 >= nI) return;
    int qstride = hd + 4;
    const float *q = qI + (int64_t)t * nh * hd;
    for (int i = threadIdx.x; i < nh * hd; i += blockDim.x) qs[(i / hd) * qstride + i % hd] = q[i];
    float *ws = qs + nh * qstride;
    for (int i = threadIdx.x; i < nh; i += blockDim.x) ws[i] = wI[(int64_t)t * nh + i] * wscale;
    __syncthreads();
    int g = threadIdx.x % 8;
    int hpg = (nh + 7) / 8;
    const float *kr[IDX_RPT];
    int cr[IDX_RPT];
#pragma unroll
    for (int j = 0; j < IDX_RPT; j++) {
        cr[j] = c0 + threadIdx.x / 8 + 32 * j;
        kr[j] = rows + (int64_t)(cr[j] < nI ? cr[j] : c0) * hd;
    }
    float acc[IDX_RPT][8];
#pragma unroll
    for (int j = 0; j < IDX_RPT; j++)
#pragma unroll
        for (int k = 0; k < 8; k++) acc[j][k] = 0.f;
    for (int d0 = 0; d0 < hd; d0 += 4) {
        float4 kv[IDX_RPT];
#pragma unroll
        for (int j = 0; j < IDX_RPT; j++) kv[j] = *(const float4 *)(kr[j] + d0);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int h = g * hpg + k;
            if (k < hpg && h < nh) {
                float4 qq = *(const float4 *)(qs + h * qstride + d0);
#pragma unroll
                for (int j = 0; j < IDX_RPT; j++)
                    acc[j][k] += qq.x * kv[j].x + qq.y * kv[j].y + qq.z * kv[j].z + qq.w * kv[j].w;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < IDX_RPT; j++) {
        float sc = 0.f;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int h = g * hpg + k;
            if (k < hpg && h < nh && acc[j][k] > 0.f) sc += ws[h] * acc[j][k];
        }
        sc += __shfl_xor_sync(0xffffffffu, sc, 1);
        sc += __shfl_xor_sync(0xffffffffu, sc, 2);
        sc += __shfl_xor_sync(0xffffffffu, sc, 4);
        if (cr[j] < nI && g == 0) scores[(int64_t)t * sstride + cr[j]] = sc;
    }
}
void cu_idx_scores(const float *qI, const float *wI, const float *rows, int T, int nh, int hd, float wscale,
                   int topk, int max_rows, const int *pos0p, float *scores, int64_t score_stride, cudaStream_t st) {
    size_t shm = (size_t)(nh * (hd + 4) + nh) * sizeof(float);
    int gx = (max_rows + IDX_ROWS - 1) / IDX_ROWS;
    if (gx < 1) gx = 1;
    cu_launch(k_idx_scores, dim3(gx, T), 256, shm, st, qI, wI, rows, nh, hd, wscale, topk, pos0p, scores, score_stride);
}

/* Top-k by (score desc, index asc) with a 4-pass 8-bit radix select on
 * order-preserving keys; output ascending by index. One block per query. */
__device__ __forceinline__ uint32_t f2key(float f) {
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
#define TOPK_THREADS 1024
__global__ void __launch_bounds__(TOPK_THREADS) k_idx_topk(const float *scores, int64_t sstride, int topk,
                                                          const int *pos0p, int *sel, int *nsel) {
    cu_pdl_enter();
    int t = blockIdx.x;
    int nI = (*pos0p + t + 1) / 4;
    int *out = sel + (int64_t)t * topk;
    if (nI <= topk) {
        for (int i = threadIdx.x; i < nI; i += blockDim.x) out[i] = i;
        if (threadIdx.x == 0) nsel[t] = nI;
        return;
    }
    const float *sc = scores + (int64_t)t * sstride;
    __shared__ int hist[256];
    __shared__ uint32_t prefix_sh, mask_sh;
    __shared__ int need_sh;
    __shared__ int base_gt, base_eq;
    if (threadIdx.x == 0) { prefix_sh = 0; mask_sh = 0; need_sh = topk; }
    __syncthreads();
    for (int pass = 0; pass < 4; pass++) {
        int shift = 24 - 8 * pass;
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        uint32_t prefix = prefix_sh, mask = mask_sh;
        for (int i = threadIdx.x; i < nI; i += blockDim.x) {
            uint32_t k = f2key(sc[i]);
            if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255], 1);
        }
        __syncthreads();
        if (threadIdx.x < 32) {
            /* warp 0 finds the bin holding the need-th largest key: lane l owns
             * bins 255-8l .. 248-8l, a scan over lanes finds the crossing */
            int l = threadIdx.x, need = need_sh, cnt[8], tot = 0;
#pragma unroll
            for (int j = 0; j < 8; j++) { cnt[j] = hist[255 - (8 * l + j)]; tot += cnt[j]; }
            int inc = tot;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) { int v = __shfl_up_sync(0xffffffffu, inc, o); if (l >= o) inc += v; }
            int exc = inc - tot;
            unsigned bal = __ballot_sync(0xffffffffu, exc < need && inc >= need);
            int src = bal ? __ffs(bal) - 1 : 31;
            if (l == src) {
                int acc = exc, b = 255 - 8 * l;
                for (int j = 0; j < 8; j++) {
                    b = 255 - (8 * l + j);
                    if (acc + cnt[j] >= need || b == 0) break;
                    acc += cnt[j];
                }
                need_sh = need - acc;
                prefix_sh = prefix | ((uint32_t)b << shift);
                mask_sh = mask | (255u << shift);
            }
        }
        __syncthreads();
    }
    uint32_t thr = prefix_sh;     /* key of the k-th largest; need_sh of its ties are taken */
    int need_eq = need_sh;
    /* ordered compaction over index chunks: every key above the threshold,
     * then the first need_eq ties in index order */
    __shared__ int weq[TOPK_THREADS / 32 + 1], wtk[TOPK_THREADS / 32 + 1];
    if (threadIdx.x == 0) { base_gt = 0; base_eq = 0; }
    __syncthreads();
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int c0 = 0; c0 < nI; c0 += blockDim.x) {
        int i = c0 + threadIdx.x;
        uint32_t k = i < nI ? f2key(sc[i]) : 0;
        int gt = i < nI && k > thr, eq = i < nI && k == thr;
        unsigned be = __ballot_sync(0xffffffffu, eq);
        if (lane == 0) weq[w] = __popc(be);
        __syncthreads();
        if (threadIdx.x == 0) {
            int a = 0;
            for (int q = 0; q < nw; q++) { int v = weq[q]; weq[q] = a; a += v; }
            weq[nw] = a;
        }
        __syncthreads();
        int eq_rank = base_eq + weq[w] + __popc(be & ((1u << lane) - 1));
        int take = gt || (eq && eq_rank < need_eq);
        unsigned bt = __ballot_sync(0xffffffffu, take);
        if (lane == 0) wtk[w] = __popc(bt);
        __syncthreads();
        if (threadIdx.x == 0) {
            int a = 0;
            for (int q = 0; q < nw; q++) { int v = wtk[q]; wtk[q] = a; a += v; }
            wtk[nw] = a;
        }
        __syncthreads();
        if (take) out[base_gt + wtk[w] + __popc(bt & ((1u << lane) - 1))] = i;
        __syncthreads();
        if (threadIdx.x == 0) { base_gt += wtk[nw]; base_eq += weq[nw]; }
        __syncthreads();
    }
    if (threadIdx.x == 0) nsel[t] = topk;
}
void cu_idx_topk(const float *scores, int64_t score_stride, int T, int topk, const int *pos0p,
                 int *sel, int *nsel, cudaStream_t st) {
    cu_launch(k_idx_topk, T, TOPK_THREADS, 0, st, scores, score_stride, topk, pos0p, sel, nsel);
}


void cu_indexer_init(void) {
    cudaFuncSetAttribute(k_idx_scores, cudaFuncAttributeMaxDynamicSharedMemorySize, 160 * 1024);
}
