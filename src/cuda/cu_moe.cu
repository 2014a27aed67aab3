/* cu_moe.cu: routing and MoE glue (spec model.md §6.10-§6.11): router
 * (sqrt-softplus, selection-only bias, top-k, normalise, scale; hash
 * routing), pairs grouped into per-expert tiles, SwiGLU with the asymmetric
 * clamp, and the sum over a token's experts.
 */
#include <stdlib.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_numerics.cuh"
#include "cuda/cu_ops.h"

/* ------------------------------------------------------------------ */
/* router and MoE (spec §11)                                           */

/* One warp per token: scores, then K rounds of a warp arg-max over the
 * selection values (ties: the lower expert index, as nm_topk). */
__global__ void k_router(const float *logits, const float *bias, const int32_t *tid2eid, const int32_t *tokens,
                         int E, int K, float route_scale, int *sel, float *wout) {
    cu_pdl_enter();
    int t = blockIdx.x, lane = threadIdx.x;
    extern __shared__ float sc[];     /* E scores + E selection values */
    float *sv = sc + E;
    for (int e = lane; e < E; e += 32) {
        float s = sqrtf(softplus_stable(logits[(int64_t)t * E + e]));
        sc[e] = s;
        sv[e] = bias ? s + bias[e] : s;
    }
    __syncwarp();
    int idx[16];
    if (tid2eid) {
        for (int k = 0; k < K; k++) idx[k] = tid2eid[(int64_t)tokens[t] * K + k];
    } else {
        for (int k = 0; k < K; k++) {
            float bv = -INFINITY; int bi = 0x7fffffff;
            for (int e = lane; e < E; e += 32) {
                float v = sv[e];
                if (v > bv || (v == bv && e < bi)) { bv = v; bi = e; }
            }
            for (int o = 16; o > 0; o >>= 1) {
                float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                int oi = __shfl_xor_sync(0xffffffffu, bi, o);
                if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
            }
            idx[k] = bi;
            __syncwarp();
            if (lane == 0) sv[bi] = -INFINITY;
            __syncwarp();
        }
    }
    if (lane != 0) return;
    float sum = 0.f;
    for (int k = 0; k < K; k++) sum += sc[idx[k]];
    if (sum < 6.103515625e-5f) sum = 6.103515625e-5f;
    for (int k = 0; k < K; k++) {
        sel[t * K + k] = idx[k];
        wout[t * K + k] = sc[idx[k]] / sum * route_scale;
    }
}
void cu_router(const float *logits, const float *bias, const int32_t *tid2eid, const int32_t *tokens,
               int T, int E, int K, float route_scale, int *sel, float *w, cudaStream_t st) {
    cu_launch(k_router, T, 32, 2 * E * sizeof(float), st, logits, bias, tid2eid, tokens, E, K, route_scale, sel, w);
}

/* Pairs (token*K + slot) grouped by expert into tiles of at most nt pairs.
 * Every block counts all pairs and takes the prefix over experts (cheap), then
 * its warps each compact one expert's pairs; with one block per 32 experts
 * (MINKE_CUDA_TILES_GRID, default on) the compaction scans run on E/32 SMs
 * instead of one (it was ~0.5 ms per layer for 2048 tokens: 8 sequential
 * 12288-pair scans per warp). The output is the same for any grid. */
__global__ void k_moe_tiles(const int *sel, int P, int E, int nt, int *pairs, int *tstart, int *tcount,
                            int *texpert, int *ntiles) {
    cu_pdl_enter();
    extern __shared__ int smem[];
    int *cnt = smem, *off = smem + E, *fill = smem + 2 * E, *toff = smem + 3 * E;
    for (int e = threadIdx.x; e < E; e += blockDim.x) { cnt[e] = 0; fill[e] = 0; }
    __syncthreads();
    for (int p = threadIdx.x; p < P; p += blockDim.x) atomicAdd(&cnt[sel[p]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int a = 0, tt = 0;
        for (int e = 0; e < E; e++) { off[e] = a; a += cnt[e]; toff[e] = tt; tt += (cnt[e] + nt - 1) / nt; }
        if (blockIdx.x == 0) *ntiles = tt;
    }
    __syncthreads();
    /* deterministic order inside an expert: by pair id; a warp per expert
     * scans the pairs 32 at a time and compacts the matches with a ballot */
    int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    for (int e = blockIdx.x * nw + (threadIdx.x >> 5); e < E; e += gridDim.x * nw) {
        if (!cnt[e]) continue;
        int k = 0;
        for (int p0 = 0; p0 < P; p0 += 32) {
            int p = p0 + lane;
            bool m = p < P && sel[p] == e;
            unsigned b = __ballot_sync(0xffffffffu, m);
            if (m) pairs[off[e] + k + __popc(b & ((1u << lane) - 1u))] = p;
            k += __popc(b);
        }
        for (int i = lane; i < (cnt[e] + nt - 1) / nt; i += 32) {
            int ti = toff[e] + i;
            tstart[ti] = off[e] + i * nt;
            tcount[ti] = min(nt, cnt[e] - i * nt);
            texpert[ti] = e;
        }
    }
}
/* Decode-sized batches: one tile per pair, no sorting. */
__global__ void k_moe_tiles1(const int *sel, int P, int *pairs, int *tstart, int *tcount, int *texpert, int *ntiles) {
    cu_pdl_enter();
    int p = threadIdx.x;
    if (p < P) { pairs[p] = p; tstart[p] = p; tcount[p] = 1; texpert[p] = sel[p]; }
    if (p == 0) *ntiles = P;
}
void cu_moe_tiles(const int *sel, int P, int E, int nt, int *pairs, int *tstart, int *tcount, int *texpert,
                  int *ntiles, cudaStream_t st) {
    if (nt == 1 && P <= 1024) cu_launch(k_moe_tiles1, 1, P < 32 ? 32 : P, 0, st, sel, P, pairs, tstart, tcount, texpert, ntiles);
    else {
        static int grid_on = -1;
        if (grid_on < 0) { const char *e = getenv("MINKE_CUDA_TILES_GRID"); grid_on = e ? atoi(e) != 0 : 1; }
        cu_launch(k_moe_tiles, grid_on ? (E + 31) / 32 : 1, 1024, 4 * E * sizeof(int), st, sel, P, E, nt, pairs, tstart,
                  tcount, texpert, ntiles);
    }
}

__global__ void k_swiglu(const float *g, const float *u, const float *w, int F, float limit, float *mid) {
    cu_pdl_enter();
    int p = blockIdx.y;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= F) return;
    float gv = g[(int64_t)p * F + i], uv = u[(int64_t)p * F + i];
    if (limit > 1e-6f) {
        if (gv > limit) gv = limit;
        if (uv > limit) uv = limit;
        if (uv < -limit) uv = -limit;
    }
    float s = gv * sigmoid_stable(gv) * uv;
    if (w) s *= w[p];
    mid[(int64_t)p * F + i] = s;
}
void cu_swiglu(const float *g, const float *u, const float *w, int P, int F, float limit, float *mid,
               cudaStream_t st) {
    cu_launch(k_swiglu, dim3((F + 255) / 256, P), 256, 0, st, g, u, w, F, limit, mid);
}

__global__ void k_moe_sum(const float *outp, int K, int D, float *m) {
    cu_pdl_enter();
    int t = blockIdx.y;
    int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= D) return;
    float s = 0.f;
    for (int k = 0; k < K; k++) s += outp[((int64_t)t * K + k) * D + d];
    m[(int64_t)t * D + d] = s;
}
void cu_moe_sum(const float *outp, int T, int K, int D, float *m, cudaStream_t st) {
    cu_launch(k_moe_sum, dim3((D + 255) / 256, T), 256, 0, st, outp, K, D, m);
}

