/* cu_indexer.cu: the lightning indexer (spec model.md §6.6): query prep
 * (RoPE, Hadamard, FP4 simulation), scores of the compressed index rows and
 * the deterministic top-k (lowest index wins ties).
 *
 * Each part has the current kernel and the previous one (cu_dec.h,
 * MINKE_CUDA_OLD_KERNELS); both give bit-identical results.
 */
#include <stdlib.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_numerics.cuh"
#include "cuda/cu_ops.h"
#include "cuda/cu_dec.h"

/* kernel attributes (cu_indexer_init) also when the caller skipped cu_ops_init */
static void idx_attrs_once(void) {
    static unsigned done = 0;
    if (cu_dev_first(&done)) cu_indexer_init();
}
static int env_int(const char *name, int dflt) {
    const char *e = getenv(name);
    return e ? atoi(e) : dflt;
}

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

/* The same for hd == 128, a warp per head with no shared memory and no block
 * barriers: lane l holds dims 4l..4l+3, so each RoPE pair of the tail sits in
 * one lane, the Hadamard stages 1, 2 are in-lane and 4..64 pair lane l with
 * l ^ (st / 4) (the lower index of a pair takes a + b, the upper a - b: the
 * same double operations as d_hadamard128_sh), and an FP4 block of 32 dims is
 * 8 lanes (the block max is order-free). Bit-identical to k_idx_q_prep. */
#define QP_WARPS 4
__global__ void __launch_bounds__(QP_WARPS * 32)
k_idx_q_prep_w(float *qI, int nh, int hd, int nrot, const float *inv_freq, const int *pos0p, int sims) {
    int lane = threadIdx.x & 31, h = blockIdx.x * QP_WARPS + (threadIdx.x >> 5), t = blockIdx.y;
    /* the angles before the wait (see cu_rope_early) */
    int pos = *pos0p + t;
    int off = 128 - nrot;
    float cs[2] = {1.f, 1.f}, sn[2] = {0.f, 0.f};
    if (4 * lane >= off) {
#pragma unroll
        for (int u = 0; u < 2; u++) {
            float ang = (float)pos * inv_freq[(4 * lane - off) / 2 + u];
            double sd, cd;
            sincos((double)ang, &sd, &cd);
            cs[u] = (float)cd; sn[u] = (float)sd;
        }
    }
    cu_pdl_enter();
    if (h >= nh) return;
    float4 *v4 = (float4 *)(qI + ((int64_t)t * nh + h) * 128);
    float4 xv = v4[lane];
    float x[4] = {xv.x, xv.y, xv.z, xv.w};
    if (4 * lane >= off) {
#pragma unroll
        for (int u = 0; u < 2; u++) {
            float c = cs[u], s = sn[u];
            float x0 = x[2 * u], x1 = x[2 * u + 1];
            x[2 * u] = x0 * c - x1 * s;
            x[2 * u + 1] = x0 * s + x1 * c;
        }
    }
    if (sims) {
        double d[4];
#pragma unroll
        for (int j = 0; j < 4; j++) d[j] = x[j];
        { double a = d[0], b = d[1]; d[0] = a + b; d[1] = a - b; a = d[2]; b = d[3]; d[2] = a + b; d[3] = a - b; }
        { double a = d[0], b = d[2]; d[0] = a + b; d[2] = a - b; a = d[1]; b = d[3]; d[1] = a + b; d[3] = a - b; }
#pragma unroll
        for (int m = 1; m < 32; m <<= 1) {
            int upper = lane & m;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                double p = __shfl_xor_sync(0xffffffffu, d[j], m);
                d[j] = upper ? p - d[j] : d[j] + p;
            }
        }
#pragma unroll
        for (int j = 0; j < 4; j++) x[j] = (float)(d[j] * 0.08838834764831845);
        float am = fmaxf(fmaxf(fabsf(x[0]), fabsf(x[1])), fmaxf(fabsf(x[2]), fabsf(x[3])));
        am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 1));
        am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 2));
        am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 4));
        float amax = fmaxf(am, 7.052966104933725e-38f);
        float s = d_pow2_ceil(amax * (1.0f / 6.0f));
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float u = fminf(fmaxf(x[j] / s, -6.f), 6.f);
            x[j] = d_e2m1_round(u) * s;
        }
    }
    v4[lane] = make_float4(x[0], x[1], x[2], x[3]);
}

void cu_idx_q_prep(float *qI, int T, int nh, int hd, int nrot, const float *inv_freq, const int *pos0p,
                   int sims, cudaStream_t st) {
    if (!cu_dec_old(CU_OLD_IDX_Q_PREP) && hd == 128 && nrot % 4 == 0 && nrot <= 128) {
        cu_launch(k_idx_q_prep_w, dim3((nh + QP_WARPS - 1) / QP_WARPS, T), QP_WARPS * 32, 0, st,
                  qI, nh, hd, nrot, inv_freq, pos0p, sims);
        return;
    }
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

/* The same scores spread over many blocks: a block of SLOTS x 8 threads takes
 * SLOTS x rpt rows, rpt (1, 2 or 4 rows per thread) picked on the device
 * from the row count so that a decode step's ~1024 rows still fill the GPU
 * and 16k+ rows reuse the staged query for more rows (the grid is sized for
 * rpt = 1 at max_rows; blocks past the rows return). The query and the
 * block's rows are staged in shared memory with one round of cp.async; head
 * h starts at h hd + 4 (h / hpg) and row r at r (hd + 4), so the 8 head
 * groups of a warp (and its 4 row slots) read distinct banks. Each score's
 * arithmetic is k_idx_scores' (a thread's 8 heads in order, dots 4 dims at a
 * time, the 8 head groups summed by the same xor shuffles), so results are
 * bit-identical. */
#define IDXW_MAXRPT 4
#define IDXW_SMEM_MAX (200 * 1024)
__host__ __device__ __forceinline__ int idxw_q_floats(int nh, int hd) { return nh * hd + 4 * nh; }

template <int SLOTS, int RPT>
__device__ __forceinline__ void idx_scores_rows(const float *qs, const float *ws, const float *rs, int nh, int hd,
                                                int c0, int nI, float *srow) {
    int g = threadIdx.x % 8, slot = threadIdx.x / 8;
    int hpg = (nh + 7) / 8;
    const float *kr[RPT];
    int cr[RPT];
#pragma unroll
    for (int j = 0; j < RPT; j++) {
        cr[j] = c0 + slot + SLOTS * j;
        kr[j] = rs + (int64_t)(cr[j] < nI ? slot + SLOTS * j : 0) * (hd + 4);
    }
    const float *qg = qs + (int64_t)g * hpg * hd + 4 * g;     /* head g hpg + k at qg + k hd */
    float acc[RPT][8];
#pragma unroll
    for (int j = 0; j < RPT; j++)
#pragma unroll
        for (int k = 0; k < 8; k++) acc[j][k] = 0.f;
    for (int d0 = 0; d0 < hd; d0 += 4) {
        float4 kv[RPT];
#pragma unroll
        for (int j = 0; j < RPT; j++) kv[j] = *(const float4 *)(kr[j] + d0);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int h = g * hpg + k;
            if (k < hpg && h < nh) {
                float4 qq = *(const float4 *)(qg + k * hd + d0);
#pragma unroll
                for (int j = 0; j < RPT; j++)
                    acc[j][k] += qq.x * kv[j].x + qq.y * kv[j].y + qq.z * kv[j].z + qq.w * kv[j].w;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < RPT; j++) {
        float sc = 0.f;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int h = g * hpg + k;
            if (k < hpg && h < nh && acc[j][k] > 0.f) sc += ws[h] * acc[j][k];
        }
        sc += __shfl_xor_sync(0xffffffffu, sc, 1);
        sc += __shfl_xor_sync(0xffffffffu, sc, 2);
        sc += __shfl_xor_sync(0xffffffffu, sc, 4);
        if (cr[j] < nI && g == 0) srow[cr[j]] = sc;
    }
}

/* rows per thread for nI rows of each of T tokens: 4 or 2 once that still
 * leaves >= 2 blocks per SM (prefill batches: 4, the query staged once per
 * 128 rows as in k_idx_scores) */
__device__ __forceinline__ int idx_rpt(int nI, int T, int slots, int nsm, int force) {
    if (force == 1 || force == 2 || force == 4) return force;
    int64_t rows = (int64_t)nI * T;
    if (rows >= (int64_t)slots * 4 * 2 * nsm) return 4;
    if (rows >= (int64_t)slots * 2 * 2 * nsm) return 2;
    return 1;
}

/* needs hd % 4 == 0 and nh <= 64 (8 heads per group, as k_idx_scores) */
template <int SLOTS>
__global__ void __launch_bounds__(SLOTS * 8)
k_idx_scores_w(const float *qI, const float *wI, const float *rows, int nh, int hd, float wscale, int topk,
               const int *pos0p, float *scores, int64_t sstride, int nsm, int force_rpt) {
    cu_pdl_enter();
    extern __shared__ __align__(16) float qs[];   /* query (idxw_q_floats), nh weights (padded to 4), rows */
    int t = blockIdx.y;
    int nI = (*pos0p + t + 1) / 4;
    if (nI <= topk) return;
    int rpt = idx_rpt(nI, gridDim.y, SLOTS, nsm, force_rpt);
    int c0 = blockIdx.x * SLOTS * rpt;
    if (c0 >= nI) return;
    int hpg = (nh + 7) / 8, hd4 = hd / 4;
    float *ws = qs + idxw_q_floats(nh, hd);
    float *rs = ws + ((nh + 3) & ~3);
    const float *q = qI + (int64_t)t * nh * hd;
    for (int i = threadIdx.x; i < nh * hd4; i += blockDim.x) {
        int h = i / hd4, d = i - h * hd4;
        cp_async16(qs + (int64_t)h * hd + 4 * (h / hpg) + 4 * d, q + 4 * i);
    }
    int nr = min(SLOTS * rpt, nI - c0);
    const float *src = rows + (int64_t)c0 * hd;
    for (int i = threadIdx.x; i < nr * hd4; i += blockDim.x) {
        int r = i / hd4, d = i - r * hd4;
        cp_async16(rs + r * (hd + 4) + 4 * d, src + 4 * i);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    for (int i = threadIdx.x; i < nh; i += blockDim.x) ws[i] = wI[(int64_t)t * nh + i] * wscale;
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    float *srow = scores + (int64_t)t * sstride;
    if (rpt == 4) idx_scores_rows<SLOTS, 4>(qs, ws, rs, nh, hd, c0, nI, srow);
    else if (rpt == 2) idx_scores_rows<SLOTS, 2>(qs, ws, rs, nh, hd, c0, nI, srow);
    else idx_scores_rows<SLOTS, 1>(qs, ws, rs, nh, hd, c0, nI, srow);
}
/* the dynamic shared memory k_idx_scores_w may take: 200 KB or the device's opt-in limit */
static int idxw_smem_max(void) {
    static int mx = 0;
    if (!mx) {
        int dev = 0, optin = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess || optin < 1)
            optin = 48 * 1024;
        mx = optin < IDXW_SMEM_MAX ? optin : IDXW_SMEM_MAX;
    }
    return mx;
}
static size_t idxw_smem(int slots, int nh, int hd) {
    return sizeof(float) * ((size_t)idxw_q_floats(nh, hd) + ((nh + 3) & ~3) + (size_t)slots * IDXW_MAXRPT * (hd + 4));
}

void cu_idx_scores(const float *qI, const float *wI, const float *rows, int T, int nh, int hd, float wscale,
                   int topk, int max_rows, const int *pos0p, float *scores, int64_t score_stride, cudaStream_t st) {
    size_t shm = (size_t)(nh * (hd + 4) + nh) * sizeof(float);
    if (!cu_dec_old(CU_OLD_IDX_SCORES) && hd % 4 == 0 && nh <= 64) {
        /* decode: 16 row slots (128 threads) while the rows fit ~4 blocks per SM, else 32 */
        int nsm = cu_num_sms(), force = env_int("MINKE_CUDA_IDX_RPT", 0);
        int slots = env_int("MINKE_CUDA_IDX_SLOTS", T == 1 && max_rows <= 16 * 4 * nsm ? 16 : 32);
        if (slots != 16) slots = 32;
        int gx = (max_rows + slots - 1) / slots;
        if (gx < 1) gx = 1;
        size_t wsh = idxw_smem(slots, nh, hd);
        if (wsh <= (size_t)idxw_smem_max()) {
            idx_attrs_once();
            if (slots == 16)
                cu_launch(k_idx_scores_w<16>, dim3(gx, T), 16 * 8, wsh, st, qI, wI, rows, nh, hd, wscale, topk, pos0p,
                          scores, score_stride, nsm, force);
            else
                cu_launch(k_idx_scores_w<32>, dim3(gx, T), 32 * 8, wsh, st, qI, wI, rows, nh, hd, wscale, topk, pos0p,
                          scores, score_stride, nsm, force);
            return;
        }
    }
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

/* The same selection with fewer block barriers and less atomic contention:
 * the keys are read once into shared memory (up to TK_CACHE of them; more
 * are re-read from global memory), the radix select takes 11 + 11 + 10 bits
 * (2048-bin histograms, so the first pass spreads the keys of one binade
 * over 4 bins instead of 1; it stops early once the threshold bin's keys are
 * all taken), and the ordered compaction gives each warp a contiguous index
 * range: one counting pass, one scan of the 32 warp counts, one writing
 * pass (ballots keep index order inside a warp). The selected set is the
 * unique top-k by (score desc, index asc) and the output is ascending, so the
 * result is identical to k_idx_topk. */
#define TK_CACHE 32768
__global__ void __launch_bounds__(TOPK_THREADS) k_idx_topk_r(const float *scores, int64_t sstride, int topk,
                                                            const int *pos0p, int *sel, int *nsel, int cache) {
    cu_pdl_enter();
    extern __shared__ uint32_t keys[];
    __shared__ int hist[2048];
    __shared__ int wsa[32], wsb[32];
    __shared__ uint32_t prefix_sh, mask_sh;
    __shared__ int need_sh, cnt_sh;
    int t = blockIdx.x;
    int nI = (*pos0p + t + 1) / 4;
    int *out = sel + (int64_t)t * topk;
    if (nI <= topk) {
        for (int i = threadIdx.x; i < nI; i += blockDim.x) out[i] = i;
        if (threadIdx.x == 0) nsel[t] = nI;
        return;
    }
    const float *sc = scores + (int64_t)t * sstride;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const bool cached = nI <= cache;
    if (cached)
        for (int i = threadIdx.x; i < nI; i += TOPK_THREADS) keys[i] = f2key(sc[i]);
#define TK_KEY(i) (cached ? keys[i] : f2key(sc[i]))
    uint32_t prefix = 0, mask = 0;
    int need = topk;
    for (int pass = 0; pass < 3; pass++) {
        int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
        int bits = pass == 2 ? 10 : 11, nb = 1 << bits;
        uint32_t bmask = (uint32_t)nb - 1;
        for (int i = threadIdx.x; i < nb; i += TOPK_THREADS) hist[i] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < nI; i += TOPK_THREADS) {
            uint32_t k = TK_KEY(i);
            if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & bmask], 1);
        }
        __syncthreads();
        /* thread i owns bins nb-1-bpt*i ... (descending); an inclusive scan over
         * the threads finds the bin holding the need-th largest key */
        int bpt = nb / TOPK_THREADS, cnt[2] = {0, 0}, tot = 0;
#pragma unroll
        for (int j = 0; j < 2; j++)
            if (j < bpt) { cnt[j] = hist[nb - 1 - (bpt * threadIdx.x + j)]; tot += cnt[j]; }
        int inc = tot;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) { int v = __shfl_up_sync(0xffffffffu, inc, o); if (lane >= o) inc += v; }
        if (lane == 31) wsa[w] = inc;
        __syncthreads();
        if (w == 0) {
            int x = wsa[lane], y = x;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) { int v = __shfl_up_sync(0xffffffffu, y, o); if (lane >= o) y += v; }
            wsb[lane] = y - x;
        }
        __syncthreads();
        inc += wsb[w];
        int exc = inc - tot;
        if (exc < need && inc >= need) {
            int acc = exc;
#pragma unroll
            for (int j = 0; j < 2; j++)
                if (j < bpt) {
                    if (acc + cnt[j] >= need) {
                        int b = nb - 1 - (bpt * threadIdx.x + j);
                        prefix_sh = prefix | ((uint32_t)b << shift);
                        mask_sh = mask | (bmask << shift);
                        need_sh = need - acc;
                        cnt_sh = cnt[j];
                        break;
                    }
                    acc += cnt[j];
                }
        }
        __syncthreads();
        prefix = prefix_sh; mask = mask_sh; need = need_sh;
        int c = cnt_sh;
        if (c == need) break;     /* every key of the threshold prefix is taken */
    }
    /* take: masked key above the prefix, or equal and among the first `need` equal ones */
    int R = ((nI + 32 * 32 - 1) / (32 * 32)) * 32;
    int start = w * R, end = min(start + R, nI);
    unsigned lt = (1u << lane) - 1;
    int ngt = 0, neq = 0;
    for (int i0 = start; i0 < start + R; i0 += 32) {
        int i = i0 + lane;
        bool ok = i < end;
        uint32_t km = ok ? (TK_KEY(i) & mask) : 0;
        ngt += __popc(__ballot_sync(0xffffffffu, ok && km > prefix));
        neq += __popc(__ballot_sync(0xffffffffu, ok && km == prefix));
    }
    if (lane == 0) { wsa[w] = ngt; wsb[w] = neq; }
    __syncthreads();
    if (w == 0) {
        int a = wsa[lane], b = wsb[lane], ia = a, ib = b;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int va = __shfl_up_sync(0xffffffffu, ia, o), vb = __shfl_up_sync(0xffffffffu, ib, o);
            if (lane >= o) { ia += va; ib += vb; }
        }
        __syncwarp();
        wsa[lane] = ia - a; wsb[lane] = ib - b;
    }
    __syncthreads();
    int eq_seen = wsb[w];
    int pos = wsa[w] + min(eq_seen, need);
    for (int i0 = start; i0 < start + R; i0 += 32) {
        int i = i0 + lane;
        bool ok = i < end;
        uint32_t km = ok ? (TK_KEY(i) & mask) : 0;
        bool eq = ok && km == prefix;
        unsigned be = __ballot_sync(0xffffffffu, eq);
        bool take = (ok && km > prefix) || (eq && eq_seen + __popc(be & lt) < need);
        unsigned bt = __ballot_sync(0xffffffffu, take);
        if (take) out[pos + __popc(bt & lt)] = i;
        pos += __popc(bt);
        eq_seen += __popc(be);
    }
#undef TK_KEY
    if (threadIdx.x == 0) nsel[t] = topk;
}

void cu_idx_topk(const float *scores, int64_t score_stride, int T, int topk, const int *pos0p,
                 int *sel, int *nsel, cudaStream_t st) {
    if (!cu_dec_old(CU_OLD_IDX_TOPK)) {
        /* keys cached in shared memory: TK_CACHE, less on devices with less (static arrays: ~9 KB) */
        int cmax = (idxw_smem_max() - 16 * 1024) / 4;
        if (cmax > TK_CACHE) cmax = TK_CACHE;
        if (cmax < 0) cmax = 0;
        int cache = score_stride < cmax ? (int)score_stride : cmax;
        idx_attrs_once();
        cu_launch(k_idx_topk_r, T, TOPK_THREADS, (size_t)cache * 4, st, scores, score_stride, topk, pos0p, sel, nsel,
                  cache);
        return;
    }
    cu_launch(k_idx_topk, T, TOPK_THREADS, 0, st, scores, score_stride, topk, pos0p, sel, nsel);
}


void cu_indexer_init(void) {
    cudaFuncSetAttribute(k_idx_scores, cudaFuncAttributeMaxDynamicSharedMemorySize, 160 * 1024);
    cudaFuncSetAttribute(k_idx_scores_w<16>, cudaFuncAttributeMaxDynamicSharedMemorySize, idxw_smem_max());
    cudaFuncSetAttribute(k_idx_scores_w<32>, cudaFuncAttributeMaxDynamicSharedMemorySize, idxw_smem_max());
    {
        int cmax = (idxw_smem_max() - 16 * 1024) / 4;
        cudaFuncSetAttribute(k_idx_topk_r, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * (cmax < TK_CACHE ? cmax : TK_CACHE));
    }
    cu_attn_init();
}
