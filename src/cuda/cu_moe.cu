/* cu_moe.cu: routing and MoE glue (spec model.md §6.10-§6.11): router
 * (sqrt-softplus, selection-only bias, top-k, normalise, scale; hash
 * routing), pairs grouped into per-expert tiles, SwiGLU with the asymmetric
 * clamp, and the sum over a token's experts. The router, SwiGLU and sum
 * have faster v2 schedules with bit-identical results; env MINKE_CUDA_MOE_V1=1
 * (or cu_moe_use_v1(1)) runs the v1 kernels (tests/cuda/hc_check compares).
 *
 * Several GPUs (expert parallel): every GPU routes all experts (the same
 * bits), then keeps only the pairs of the experts it owns, [own0, own1):
 * the others get sel = -1 (weights unchanged), no tile (tcount 0) and no
 * term in the sum, and the partial sums are added across GPUs afterwards.
 */
#include <stdint.h>
#include <stdlib.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_numerics.cuh"
#include "cuda/cu_ops.h"
#include "cuda/cu_g3.cuh"

/* ------------------------------------------------------------------ */
/* router and MoE (spec §11)                                           */

/* One warp per token: scores, then K rounds of a warp arg-max over the
 * selection values (ties: the lower expert index, as nm_topk). */
__global__ void k_router(const float *logits, const float *bias, const int32_t *tid2eid, const int32_t *tokens,
                         int E, int K, float route_scale, int own0, int own1, int *sel, float *wout) {
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
        sel[t * K + k] = idx[k] >= own0 && idx[k] < own1 ? idx[k] : -1;
        wout[t * K + k] = sc[idx[k]] / sum * route_scale;
    }
}
/* Router, v2 schedule (default for E <= 1024, K <= 16): one block per token,
 * one expert per thread, results identical to k_router. The selection value
 * and score of each expert are computed as k_router does; the top K in
 * k_router's order (value descending, the lower expert index first on exact
 * ties: what K rounds of arg-max give) come from ranks instead of K serial
 * rounds: each warp ranks its 32 experts by shuffles and keeps its best K as
 * candidates (any overall top-K expert is among its warp's top K), then each
 * candidate's overall rank among the nw*K candidates is its slot. The weights
 * are normalised with k_router's sum (slots in order) and division. With
 * pairs set (decode tiles, nt == 1) the block also writes k_moe_tiles1's
 * tiles of its pairs. The bias (a weight) is read before the PDL wait.
 * (Degenerate inputs: with NaN or -inf selection values k_router's rounds can
 * repeat an expert; these ranks never do.) */
#define RT2_MAXK 16
__global__ void __launch_bounds__(1024)
k_router2(const float *logits, const float *bias, const int32_t *tid2eid, const int32_t *tokens, int E, int K,
          float route_scale, int own0, int own1, int *sel, float *wout, int *pairs, int *tstart, int *tcount,
          int *texpert, int *ntiles) {
    __shared__ float sc[1024];
    __shared__ float cand_v[32 * RT2_MAXK];
    __shared__ int cand_i[32 * RT2_MAXK];
    __shared__ int s_idx[RT2_MAXK];
    const int t = blockIdx.x, e = threadIdx.x, lane = e & 31, w = e >> 5, nw = blockDim.x >> 5;
    const bool valid = e < E;
    float bv = 0.f;
    if (bias && valid) bv = bias[e];
    cu_pdl_enter();
    float v = -INFINITY;
    if (valid) {
        float s = sqrtf(softplus_stable(logits[(int64_t)t * E + e]));
        sc[e] = s;
        v = bias ? s + bv : s;
    }
    if (tid2eid) {
        if (e < K) s_idx[e] = tid2eid[(int64_t)tokens[t] * K + e];
    } else {
        unsigned vmask = __ballot_sync(0xffffffffu, valid);
        int rank = 0;
        for (int j = 0; j < 32; j++) {
            float vj = __shfl_sync(0xffffffffu, v, j);
            rank += ((vmask >> j) & 1u) && (vj > v || (vj == v && j < lane));
        }
        if (valid && rank < K) { cand_v[w * K + rank] = v; cand_i[w * K + rank] = e; }
        int nvalid = __popc(vmask);
        if (lane < K && lane >= nvalid) cand_i[w * K + lane] = -1;
        __syncthreads();
        int nc = nw * K;
        for (int c = e; c < nc; c += blockDim.x) {
            int mi = cand_i[c];
            if (mi < 0) continue;
            float mv = cand_v[c];
            int g = 0;
            for (int o = 0; o < nc; o++) {
                int oi = cand_i[o];
                float ov = cand_v[o];
                g += oi >= 0 && (ov > mv || (ov == mv && oi < mi));
            }
            if (g < K) s_idx[g] = mi;
        }
    }
    __syncthreads();
    if (e < K) {
        float sum = 0.f;
        for (int k = 0; k < K; k++) sum += sc[s_idx[k]];
        if (sum < 6.103515625e-5f) sum = 6.103515625e-5f;
        int id = s_idx[e];
        int p = t * K + e;
        const bool own = id >= own0 && id < own1;
        sel[p] = own ? id : -1;
        wout[p] = sc[id] / sum * route_scale;
        if (pairs) {
            pairs[p] = p; tstart[p] = p; tcount[p] = own; texpert[p] = own ? id : own0;
            if (t == 0 && e == 0) *ntiles = gridDim.x * K;
        }
    }
}

static int moe_v1 = -1;
extern "C" void cu_moe_use_v1(int on) { moe_v1 = on; }
static int moe_use_v1(void) {
    if (moe_v1 < 0) { const char *e = getenv("MINKE_CUDA_MOE_V1"); moe_v1 = e ? atoi(e) != 0 : 0; }
    return moe_v1;
}
static int router2_ok(int E, int K) { return E >= 1 && E <= 1024 && K >= 1 && K <= RT2_MAXK; }

/* cu_router followed by cu_moe_tiles(sel, T*K, E, 1, ...) in one launch
 * (decode: one tile per pair); the same outputs as the two calls. */
extern "C" void cu_router_tiles1(const float *logits, const float *bias, const int32_t *tid2eid, const int32_t *tokens,
                                 int T, int E, int K, float route_scale, int own0, int own1, int *sel, float *w,
                                 int *pairs, int *tstart, int *tcount, int *texpert, int *ntiles, cudaStream_t st) {
    if (moe_use_v1() || !router2_ok(E, K) || T * K > 1024) {
        cu_router(logits, bias, tid2eid, tokens, T, E, K, route_scale, own0, own1, sel, w, st);
        cu_moe_tiles(sel, T * K, E, 1, pairs, tstart, tcount, texpert, ntiles, st);
        return;
    }
    int threads = (E + 31) / 32 * 32;
    cu_launch(k_router2, T, threads, 0, st, logits, bias, tid2eid, tokens, E, K, route_scale, own0, own1, sel, w, pairs,
              tstart, tcount, texpert, ntiles);
}

void cu_router(const float *logits, const float *bias, const int32_t *tid2eid, const int32_t *tokens,
               int T, int E, int K, float route_scale, int own0, int own1, int *sel, float *w, cudaStream_t st) {
    if (!moe_use_v1() && router2_ok(E, K)) {
        int threads = (E + 31) / 32 * 32;
        cu_launch(k_router2, T, threads, 0, st, logits, bias, tid2eid, tokens, E, K, route_scale, own0, own1, sel, w,
                  (int *)NULL, (int *)NULL, (int *)NULL, (int *)NULL, (int *)NULL);
        return;
    }
    cu_launch(k_router, T, 32, 2 * E * sizeof(float), st, logits, bias, tid2eid, tokens, E, K, route_scale, own0, own1,
              sel, w);
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
    for (int p = threadIdx.x; p < P; p += blockDim.x)
        if (sel[p] >= 0) atomicAdd(&cnt[sel[p]], 1);      /* -1: another GPU's expert */
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
    if (p < P) { pairs[p] = p; tstart[p] = p; tcount[p] = sel[p] >= 0; texpert[p] = sel[p] >= 0 ? sel[p] : 0; }
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
/* The same per element, four elements per thread (float4 loads and store);
 * items (one row, F a multiple of 32): mid also as the next product's input
 * items (cu_gemv_args.xitems), 8 consecutive threads an item. */
__global__ void k_swiglu4(const float4 *g, const float4 *u, const float *w, int F4, float limit, float4 *mid, int *items) {
    cu_pdl_enter();
    int p = blockIdx.y;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= F4) return;
    float4 gv = g[(int64_t)p * F4 + i], uv = u[(int64_t)p * F4 + i];
    float4 s;
    s.x = cu_swiglu1(gv.x, uv.x, limit);
    s.y = cu_swiglu1(gv.y, uv.y, limit);
    s.z = cu_swiglu1(gv.z, uv.z, limit);
    s.w = cu_swiglu1(gv.w, uv.w, limit);
    if (w) { float wp = w[p]; s.x *= wp; s.y *= wp; s.z *= wp; s.w *= wp; }
    mid[(int64_t)p * F4 + i] = s;
    if (items) g3_item_store(items + (i >> 3) * G3_IW, s, g3_item_amax(s, 0xffu << (threadIdx.x & 24)), i & 7);
}
static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* k_swiglu4 where it applies (F a multiple of 4, 16-byte rows); 0 otherwise */
static int swiglu4_launch(const float *g, const float *u, const float *w, int P, int F, float limit, float *mid,
                          int *items, cudaStream_t st) {
    if (moe_use_v1() || F % 4 || !aligned16(g) || !aligned16(u) || !aligned16(mid)) return 0;
    const int F4 = F / 4, bs = F4 < 256 ? (F4 + 31) / 32 * 32 : 256;
    cu_launch(k_swiglu4, dim3((F4 + bs - 1) / bs, P), bs, 0, st, (const float4 *)g, (const float4 *)u, w, F4, limit,
              (float4 *)mid, items);
    return 1;
}

void cu_swiglu(const float *g, const float *u, const float *w, int P, int F, float limit, float *mid,
               cudaStream_t st) {
    if (swiglu4_launch(g, u, w, P, F, limit, mid, NULL, st)) return;
    cu_launch(k_swiglu, dim3((F + 255) / 256, P), 256, 0, st, g, u, w, F, limit, mid);
}

int cu_swiglu_items(const float *g, const float *u, int F, float limit, float *mid, int *items, cudaStream_t st) {
    if (F % 32 == 0 && aligned16(items) && swiglu4_launch(g, u, NULL, 1, F, limit, mid, items, st)) return 1;
    cu_swiglu(g, u, NULL, 1, F, limit, mid, st);
    return 0;
}

__global__ void k_moe_sum(const float *outp, const int *sel, int K, int D, float *m) {
    cu_pdl_enter();
    int t = blockIdx.y;
    int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= D) return;
    float s = 0.f;
    for (int k = 0; k < K; k++)
        if (!sel || sel[t * K + k] >= 0) s += outp[((int64_t)t * K + k) * D + d];
    m[(int64_t)t * D + d] = s;
}
/* The same sums (k = 0..K-1 in order), four elements per thread. */
__global__ void k_moe_sum4(const float4 *outp, const int *sel, int K, int D4, float4 *m) {
    cu_pdl_enter();
    int t = blockIdx.y;
    int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= D4) return;
    float4 o[8];
    int k0 = 0;
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    for (; k0 < K; k0 += 8) {
        int nk = K - k0 < 8 ? K - k0 : 8;
        unsigned own = 0xffu;       /* pairs of experts another GPU owns add nothing */
        if (sel)
            for (int k = 0; k < nk; k++) if (sel[t * K + k0 + k] < 0) own &= ~(1u << k);
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (k < nk && (own >> k & 1u)) o[k] = outp[((int64_t)t * K + k0 + k) * D4 + d];
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (k < nk && (own >> k & 1u)) { s.x += o[k].x; s.y += o[k].y; s.z += o[k].z; s.w += o[k].w; }
    }
    m[(int64_t)t * D4 + d] = s;
}
void cu_moe_sum(const float *outp, const int *sel, int T, int K, int D, float *m, cudaStream_t st) {
    if (!moe_use_v1() && D % 4 == 0 && aligned16(outp) && aligned16(m)) {
        int D4 = D / 4, bs = D4 < 256 ? (D4 + 31) / 32 * 32 : 256;
        cu_launch(k_moe_sum4, dim3((D4 + bs - 1) / bs, T), bs, 0, st, (const float4 *)outp, sel, K, D4, (float4 *)m);
        return;
    }
    cu_launch(k_moe_sum, dim3((D + 255) / 256, T), 256, 0, st, outp, sel, K, D, m);
}

