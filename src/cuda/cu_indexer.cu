/* cu_indexer.cu: the lightning indexer (spec model.md §6.6): query prep
 * (RoPE, Hadamard, FP4 simulation), scores of the compressed index rows and
 * the deterministic top-k (lowest index wins ties).
 *
 * The index rows are f32 (CU_KV_F32: hd floats) or, with the simulations on,
 * packed FP4 (CU_KV_FP4: E2M1 codes and a scale byte per 32, cu_kvrow.cuh).
 * Every score kernel is a template of the format: it unpacks FP4 to the
 * simulation's float bits and then does the f32 kernel's arithmetic, so the
 * scores of packed rows are bit-identical to those of f32 rows holding the
 * same values (and the f32 instantiations are the kernels as they were).
 *
 * Each part has the current kernel and the previous one (cu_dec.h,
 * MINKE_CUDA_OLD_KERNELS); both give bit-identical results.
 */
#include <stdlib.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_numerics.cuh"
#include "cuda/cu_ops.h"
#include "cuda/cu_dec.h"
#include "cuda/cu_kvrow.cuh"
#include "cuda/cu_wgmma.cuh"

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

/* The index rows as the score kernels read them: the kernels take the rows
 * as elem pointers (float for f32 rows, as before, so the f32 instantiations
 * are the kernels they were: a void pointer moves an address conversion in
 * k_idx_scores_tc's PTX); load4 / load2 give values d .. d + 3 (d a multiple
 * of 4) / d, d + 1 (d even) as floats, FP4 through kv4_val (the
 * simulation's bits). */
template <int FMT> struct idx_rows;
template <int FMT> using idx_elem = typename idx_rows<FMT>::elem;
template <> struct idx_rows<CU_KV_F32> {
    typedef float elem;
    static __device__ __forceinline__ const float *row(const float *rows, int64_t c, int hd) { return rows + c * hd; }
    static __device__ __forceinline__ float4 load4(const float *row, int d, int hd) {
        return *(const float4 *)(row + d);
    }
    static __device__ __forceinline__ float2 load2(const float *row, int d, int hd) {
        return *(const float2 *)(row + d);
    }
};
template <> struct idx_rows<CU_KV_FP4> {
    typedef uint8_t elem;
    static __device__ __forceinline__ const uint8_t *row(const uint8_t *rows, int64_t c, int hd) {
        return rows + c * kv4_stride(hd);
    }
    static __device__ __forceinline__ float4 load4(const uint8_t *row, int d, int hd) {
        const uint32_t w = *(const uint16_t *)(row + d / 2);      /* 4 codes, value d in the low nibble */
        const float s = kv_scale(row[hd / 2 + d / 32]);
        return make_float4(kv4_val(w, s), kv4_val(w >> 4, s), kv4_val(w >> 8, s), kv4_val(w >> 12, s));
    }
    static __device__ __forceinline__ float2 load2(const uint8_t *row, int d, int hd) {
        const uint32_t w = row[d / 2];
        const float s = kv_scale(row[hd / 2 + d / 32]);
        return make_float2(kv4_val(w, s), kv4_val(w >> 4, s));
    }
};

/* scores[t][c] = sum_h wI[h]*scale * relu(qI[h] . row[c]) for c < nI(t), only when nI(t) > topk.
 * Block: 256 threads = 32 row slots x 8 head groups, each slot taking 4 rows
 * (128 rows per block, so the query staged in shared memory - padded rows,
 * no bank conflicts between the head groups - serves 4x more rows per load);
 * the 8 partial scores of a row are summed with shuffles. FP4 rows are
 * unpacked as they are read (by each of a row's 8 head groups: this is the
 * fallback and MINKE_CUDA_OLD_KERNELS kernel, k_idx_scores_w unpacks once). */
#define IDX_ROWS 128
#define IDX_RPT 4
template <int FMT>
__global__ void __launch_bounds__(256) k_idx_scores(const float *qI, const float *wI, const idx_elem<FMT> *rows, int nh,
                                                    int hd, float wscale, int topk, const int *pos0p, float *scores,
                                                    int64_t sstride) {
    typedef idx_rows<FMT> R;
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
    const idx_elem<FMT> *kr[IDX_RPT];
    int cr[IDX_RPT];
#pragma unroll
    for (int j = 0; j < IDX_RPT; j++) {
        cr[j] = c0 + threadIdx.x / 8 + 32 * j;
        kr[j] = R::row(rows, cr[j] < nI ? cr[j] : c0, hd);
    }
    float acc[IDX_RPT][8];
#pragma unroll
    for (int j = 0; j < IDX_RPT; j++)
#pragma unroll
        for (int k = 0; k < 8; k++) acc[j][k] = 0.f;
    for (int d0 = 0; d0 < hd; d0 += 4) {
        float4 kv[IDX_RPT];
#pragma unroll
        for (int j = 0; j < IDX_RPT; j++) kv[j] = R::load4(kr[j], d0, hd);
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
 * bit-identical. FP4 rows are staged packed (kv4_stride(hd) bytes a row,
 * after the f32 tile) and unpacked once, by the whole block, into the f32
 * tile that idx_scores_rows reads: each value is unpacked once instead of by
 * each of its row's 8 head groups. */
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
template <int SLOTS, int FMT>
__global__ void __launch_bounds__(SLOTS * 8)
k_idx_scores_w(const float *qI, const float *wI, const idx_elem<FMT> *rows, int nh, int hd, float wscale, int topk,
               const int *pos0p, float *scores, int64_t sstride, int nsm, int force_rpt) {
    typedef idx_rows<FMT> R;
    cu_pdl_enter();
    /* query (idxw_q_floats), nh weights (padded to 4), f32 rows, then (FP4) the packed rows */
    extern __shared__ __align__(16) float qs[];
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
    uint8_t *pk = (uint8_t *)(rs + SLOTS * IDXW_MAXRPT * (hd + 4));     /* FP4: the packed rows */
    if constexpr (FMT == CU_KV_FP4) {
        /* the rows are contiguous: nr kv4_stride(hd) bytes, a multiple of 16 */
        const uint8_t *src = R::row(rows, c0, hd);
        for (int i = threadIdx.x; i < nr * kv4_stride(hd) / 16; i += blockDim.x) cp_async16(pk + 16 * i, src + 16 * i);
    } else {
        const float *src = R::row(rows, c0, hd);
        for (int i = threadIdx.x; i < nr * hd4; i += blockDim.x) {
            int r = i / hd4, d = i - r * hd4;
            cp_async16(rs + r * (hd + 4) + 4 * d, src + 4 * i);
        }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    for (int i = threadIdx.x; i < nh; i += blockDim.x) ws[i] = wI[(int64_t)t * nh + i] * wscale;
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    if constexpr (FMT == CU_KV_FP4) {     /* unpacked into the f32 tile, 8 values a thread */
        int hd8 = hd / 8;
        for (int i = threadIdx.x; i < nr * hd8; i += blockDim.x) {
            int r = i / hd8, d = 8 * (i - r * hd8);
            float v[8];
            kv4_load8(pk + r * kv4_stride(hd), d, hd, v);
            float4 *dst = (float4 *)(rs + r * (hd + 4) + d);
            dst[0] = make_float4(v[0], v[1], v[2], v[3]);
            dst[1] = make_float4(v[4], v[5], v[6], v[7]);
        }
        __syncthreads();
    }
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
static size_t idxw_smem(int slots, int nh, int hd, int fmt) {
    size_t packed = fmt == CU_KV_FP4 ? (size_t)slots * IDXW_MAXRPT * kv4_stride(hd) : 0;
    return sizeof(float) * ((size_t)idxw_q_floats(nh, hd) + ((nh + 3) & ~3) + (size_t)slots * IDXW_MAXRPT * (hd + 4)) +
           packed;
}

template <int FMT>
static void idx_scores_launch(const float *qI, const float *wI, const void *rows_any, int T, int nh, int hd,
                              float wscale, int topk, int max_rows, const int *pos0p, float *scores,
                              int64_t score_stride, cudaStream_t st) {
    const idx_elem<FMT> *rows = (const idx_elem<FMT> *)rows_any;
    size_t shm = (size_t)(nh * (hd + 4) + nh) * sizeof(float);
    if (!cu_dec_old(CU_OLD_IDX_SCORES) && hd % 4 == 0 && nh <= 64) {
        /* decode: 16 row slots (128 threads) while the rows fit ~4 blocks per SM, else 32 */
        int nsm = cu_num_sms(), force = env_int("MINKE_CUDA_IDX_RPT", 0);
        int slots = env_int("MINKE_CUDA_IDX_SLOTS", T == 1 && max_rows <= 16 * 4 * nsm ? 16 : 32);
        if (slots != 16) slots = 32;
        int gx = (max_rows + slots - 1) / slots;
        if (gx < 1) gx = 1;
        size_t wsh = idxw_smem(slots, nh, hd, FMT);
        if (wsh <= (size_t)idxw_smem_max()) {
            idx_attrs_once();
            if (slots == 16)
                cu_launch(k_idx_scores_w<16, FMT>, dim3(gx, T), 16 * 8, wsh, st, qI, wI, rows, nh, hd, wscale, topk,
                          pos0p, scores, score_stride, nsm, force);
            else
                cu_launch(k_idx_scores_w<32, FMT>, dim3(gx, T), 32 * 8, wsh, st, qI, wI, rows, nh, hd, wscale, topk,
                          pos0p, scores, score_stride, nsm, force);
            return;
        }
    }
    int gx = (max_rows + IDX_ROWS - 1) / IDX_ROWS;
    if (gx < 1) gx = 1;
    cu_launch(k_idx_scores<FMT>, dim3(gx, T), 256, shm, st, qI, wI, rows, nh, hd, wscale, topk, pos0p, scores,
              score_stride);
}

void cu_idx_scores(const float *qI, const float *wI, const void *rows, int rows_fmt, int T, int nh, int hd,
                   float wscale, int topk, int max_rows, const int *pos0p, float *scores, int64_t score_stride,
                   cudaStream_t st) {
    if (rows_fmt == CU_KV_FP4)
        idx_scores_launch<CU_KV_FP4>(qI, wI, rows, T, nh, hd, wscale, topk, max_rows, pos0p, scores, score_stride, st);
    else
        idx_scores_launch<CU_KV_F32>(qI, wI, rows, T, nh, hd, wscale, topk, max_rows, pos0p, scores, score_stride, st);
}

/* ------------------------------------------------------------------ */
/* Indexer scores on the tensor cores (prefill batches, simulations on). */
/*
 * With the simulations on, every query head (k_idx_q_prep) and every index
 * row (k_comp_emit, is_index) is E2M1 codes times a power-of-two scale per 32
 * dims: a handful of significant bits, so bf16 holds each value exactly, the
 * products are exact in f32 and the 128-term sums stay exact in any order.
 * k_idx_scores_tc computes the 64 dots of a (token, row) on bf16 mma.sync
 * (m16n8k16, f32 accumulate) and then folds them into the score with
 * idx_scores_rows' own operations, so the score has the FMA kernel's bits.
 *
 * Exactness is not assumed, it is checked per (token, row): each vector v
 * (a query head, a row) gives E = floor(log2 max|v_i|) and L = the exponent
 * of the lowest set bit of any nonzero v_i (read off the f32 bits). Every
 * product q_i k_i is then a multiple of 2^(Lq + Lk) and the 128 of them sum
 * in magnitude to < 2^(Eq + Ek + 9). When Eq + Ek + 9 <= Lq + Lk + 24, every
 * partial sum, in any order, is an integer below 2^24 times 2^(Lq + Lk): an
 * f32 value, so the FMA chain, the tensor core's accumulation (exact
 * products, sums aligned to the largest addend with >= 24 bits) and the
 * exact dot coincide. Also required: every value bf16-exact (low 16 f32
 * bits zero), Lq, Lk >= -126 and Lq + Lk >= -126 (no subnormal input,
 * product or partial sum: tensor cores may flush those), Eq + Ek + 9 <= 127
 * (no overflow; also rejects Inf / NaN). A (token, row) that fails (an
 * inexact, tiny or Inf/NaN value, or scales 2^9+ apart: not from the FP4
 * simulation, or far outside its usual range) takes the dots from
 * idxt_dot_fma, k_idx_scores_w's exact arithmetic in f32 from global memory
 * (FP4 rows unpacked as they are read): slow, but only for such scores. So
 * the result is bit-identical to k_idx_scores_w for any input (sims off
 * keeps k_idx_scores_w all the same: every score would take the slow path).
 *
 * The aggregate per token: A = max over heads of (Eq + 9 - Lq), min Lq, max
 * Eq; per row: B = Ek - Lk, Lk, Ek. The test is A + B <= 24 (Hadamard-rotated
 * FP4 vectors: A ~ 12-13, B ~ 3-4).
 *
 * Layout: the rows are the mma's M (A operand, 16 rows an m-tile), the heads
 * its N (B operand, 8 heads an n-tile), dims K (8 steps of 16). A block has 8
 * warps, each holding MT m-tiles of rows as bf16 fragments in registers
 * (converted once from f32, or from FP4 unpacked to the same f32 bits, then
 * tested and converted as f32 rows are; straight from global memory: a lane
 * reads 16 code bytes of a row instead of 16 float pairs), and walks the
 * block's tokens: a token's 64 heads are staged once per block as bf16 in
 * shared memory (two buffers; the next token's f32 loads are issued before
 * the current token's products) and read by ldmatrix. The heads are staged
 * in a permuted order (idxt_slot): n-tile i, column 2 qd + e holds head
 * 8 (2 qd + i / 4) + 2 (i % 4) + e, so the lane with column pair qd holds,
 * for its rows, exactly the 16 dots of head groups 2 qd and 2 qd + 1 (the
 * FMA kernel's threads g = 2 qd, 2 qd + 1), in head order: the per-group
 * chains need no data movement, and the xor-1 / xor-2 shuffles inside a
 * quad are the FMA kernel's xor-2 / xor-4 ones (the xor-1 sum is in-lane).
 * Rows c >= nI(t) are computed (zero past the batch's last row) but never
 * written; a warp skips a token whose nI(t) its first row reaches; tokens
 * with nI <= topk or nI <= the block's first row are skipped by the block.
 */
#define IDXT_NH 64
#define IDXT_HD 128
#define IDXT_WARPS 8
#define IDXT_THREADS (IDXT_WARPS * 32)
#define IDXT_QS (IDXT_HD + 8)       /* bf16 a staged head: +16 bytes, conflict-free ldmatrix rows */
#define IDXT_MIN_T 16               /* fewer tokens (decode, short batches): k_idx_scores_w */
#define IDXT_DEC_ROWS 4096          /* ... unless the cache holds this many rows (cu_idx_scores_tc_taken) */
#define IDXT_BAD (1 << 20)          /* A or B of a vector that fails outright */
#define IDXT_NOBIT 4096             /* lowest-bit key of a vector with no nonzero value */

/* head staged at row `slot` of the shared query (see above) */
__device__ __forceinline__ int idxt_slot(int h) {
    int g = h >> 3, k = h & 7;                      /* group (FMA thread) and place in it */
    int ntile = 4 * (g & 1) + (k >> 1), col = 2 * (g >> 1) + (k & 1);
    return 8 * ntile + col;
}

/* running (max biased exponent, min lowest-bit key, inexact bits) of values */
__device__ __forceinline__ void idxt_stat(float x, int &emax, int &kmin, uint32_t &inexact) {
    uint32_t b = __float_as_uint(x) & 0x7fffffffu;
    inexact |= b & 0xffffu;                          /* bf16 keeps the top 16 bits */
    int e = (int)(b >> 23);
    int key = e + __ffs((b & 0x7fffffu) | 0x800000u) - 1;   /* lowest set bit: 2^(key - 150) */
    emax = max(emax, e);
    kmin = min(kmin, b ? key : IDXT_NOBIT);
}
__device__ __forceinline__ void idxt_stat_quad(int &emax, int &kmin, uint32_t &inexact) {
#pragma unroll
    for (int m = 1; m <= 2; m <<= 1) {
        emax = max(emax, __shfl_xor_sync(0xffffffffu, emax, m));
        kmin = min(kmin, __shfl_xor_sync(0xffffffffu, kmin, m));
        inexact |= __shfl_xor_sync(0xffffffffu, inexact, m);
    }
}
/* E, L (unbiased) of a vector; a vector of zeros gives E = -1000, L = 1000 */
__device__ __forceinline__ void idxt_el(int emax, int kmin, int &E, int &L) {
    bool zero = kmin == IDXT_NOBIT;
    E = zero ? -1000 : emax - 127;
    L = zero ? 1000 : kmin - 150;
}

__device__ __forceinline__ uint32_t idxt_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);    /* exact for the values the test admits */
    return *(uint32_t *)&v;
}

__device__ __forceinline__ void idxt_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void idxt_ldm_x4(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3, const void *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
}

/* one head's dot with one row in idx_scores_rows' arithmetic (4 dims a step,
 * the same expression, so the same contraction): the scores the test rejects */
template <int FMT>
__device__ __forceinline__ float idxt_dot_fma(const float *q, const idx_elem<FMT> *k) {
    float acc = 0.f;
#pragma unroll 1
    for (int d0 = 0; d0 < IDXT_HD; d0 += 4) {
        float4 qq = *(const float4 *)(q + d0), kv = idx_rows<FMT>::load4(k, d0, IDXT_HD);
        acc += qq.x * kv.x + qq.y * kv.y + qq.z * kv.z + qq.w * kv.w;
    }
    return acc;
}

/* a token's query: thread i reads head i / 4, dims 4 (i % 4) + 16 j (j < 8),
 * and threads < 64 the head weights */
__device__ __forceinline__ void idxt_q_load(const float *qI, const float *wI, float wscale, int t, float4 (&pf)[8],
                                            float &pw) {
    const float4 *src = (const float4 *)(qI + ((int64_t)t * IDXT_NH + (threadIdx.x >> 2)) * IDXT_HD) + (threadIdx.x & 3);
#pragma unroll
    for (int j = 0; j < 8; j++) pf[j] = src[4 * j];
    pw = threadIdx.x < IDXT_NH ? wI[(int64_t)t * IDXT_NH + threadIdx.x] * wscale : 0.f;
}
/* ... converted to bf16 into its slot, the weights stored, and the warp's
 * part of the token's test values (A, min L, max E over its 8 heads). The
 * slots: WG, wgmma's core-matrix layout (8 slots x 8 dims a 128-byte core
 * matrix, the 16 of a slot group along the dims, groups 2048 bytes apart);
 * else rows of IDXT_QS for ldmatrix */
template <bool WG>
__device__ __forceinline__ void idxt_q_store(const float4 (&pf)[8], float pw, __nv_bfloat16 *qs, float *ws,
                                             int (*qstat)[3]) {
    int emax = 0, kmin = IDXT_NOBIT;
    uint32_t inexact = 0;
    const int n = idxt_slot(threadIdx.x >> 2), d0 = 4 * (threadIdx.x & 3);
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float4 v = pf[j];
        idxt_stat(v.x, emax, kmin, inexact); idxt_stat(v.y, emax, kmin, inexact);
        idxt_stat(v.z, emax, kmin, inexact); idxt_stat(v.w, emax, kmin, inexact);
        const int k = d0 + 16 * j;
        __nv_bfloat16 *dst = WG ? qs + (((n >> 3) * 16 + (k >> 3)) * 64 + (n & 7) * 8 + (k & 7)) : qs + n * IDXT_QS + k;
        *(uint2 *)dst = make_uint2(idxt_bf16x2(v.x, v.y), idxt_bf16x2(v.z, v.w));
    }
    if (WG) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   /* for the tensor cores' reads */
    if (threadIdx.x < IDXT_NH) ws[threadIdx.x] = pw;
    idxt_stat_quad(emax, kmin, inexact);              /* the head's 4 threads */
    int E, L;
    idxt_el(emax, kmin, E, L);
    int A = inexact ? IDXT_BAD : kmin == IDXT_NOBIT ? -2000 : E + 9 - L;
#pragma unroll
    for (int m = 4; m < 32; m <<= 1) {                /* the warp's 8 heads */
        A = max(A, __shfl_xor_sync(0xffffffffu, A, m));
        L = min(L, __shfl_xor_sync(0xffffffffu, L, m));
        E = max(E, __shfl_xor_sync(0xffffffffu, E, m));
    }
    if ((threadIdx.x & 31) == 0) {
        int w = threadIdx.x >> 5;
        qstat[w][0] = A; qstat[w][1] = L; qstat[w][2] = E;
    }
}

/* grid (row tiles of RB = 16 MT IDXT_WARPS rows, token tiles of tok_tile);
 * a block takes row tiles blockIdx.x, + gridDim.x, ... until its tokens see
 * no more rows (the host caps gridDim.x: max_rows may be far above the rows
 * of this batch, and blocks that find nothing to do still cost time) */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
WG_MMA_RS_AB(idxt_wgmma, 32, 64, 32, 33, 34, 35, 36, 0, bf16)
#endif
/* WG (sm_90a): a warpgroup's four warps multiply their m-tile mt together as
 * one m64n64k16 wgmma a k step (A: the same row fragments, B: the staged
 * token from shared memory), instead of 8 m16n8k16 mma.sync a warp: the same
 * exact products and sums (see above), the same accumulator layout, so the
 * same epilogue and the same bits (idx_check). A warpgroup skips a token only
 * when all its rows are past nI. Flash q2 prefill of 65536 tokens
 * 4,939-4,955 -> 4,991-5,001 tok/s (twenty-first session, alternating;
 * MINKE_CUDA_IDX_WG=0 gives mma.sync). */
template <int MT, int FMT, bool WG>
__global__ void __launch_bounds__(IDXT_THREADS, 1)
k_idx_scores_tc(const float *qI, const float *wI, const idx_elem<FMT> *rows, int T, float wscale, int topk,
                const int *pos0p, float *scores, int64_t sstride, int tok_tile) {
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (WG) return;       /* launched only where idxt_wg_ok() */
    else {
#endif
    typedef idx_rows<FMT> R;
    cu_pdl_enter();
    constexpr int RB = 16 * MT * IDXT_WARPS;
    __shared__ __align__(16) __nv_bfloat16 qs[2][IDXT_NH * IDXT_QS];
    __shared__ __align__(16) float ws[2][IDXT_NH];
    __shared__ int qstat[2][IDXT_WARPS][3];
    int pos0 = *pos0p;
    /* the latest tokens (the most rows) first: the light blocks make the tail */
    int t0 = (gridDim.y - 1 - blockIdx.y) * tok_tile, t_end = min(T, t0 + tok_tile);
    int n_last = (pos0 + t_end) / 4;                 /* nI of the tile's last token: rows below it exist */
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, qd = lane & 3;
    for (int c0 = blockIdx.x * RB;; c0 += gridDim.x * RB) {
        /* the tokens with nI(t) = (pos0 + t + 1) / 4 > max(topk, c0): a suffix
         * of the token tile (nI grows with t); none: none for later row tiles either */
        int ta = max(t0, 4 * max(topk, c0) + 3 - pos0);
        if (ta >= t_end) return;
        int rw0 = c0 + w * 16 * MT;                      /* the warp's first row */

        /* the warp's rows as A fragments (a0a1: row g, dims 16 ks + 2 qd; a2a3:
         * row g + 8; a4a5, a6a7: dims + 8) and each row's test values */
        uint32_t af[MT][8][4];
        int rB[MT][2], rL[MT][2], rE[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h2 = 0; h2 < 2; h2++) {
                int c = rw0 + 16 * mt + g + 8 * h2;
                const idx_elem<FMT> *row = R::row(rows, c < n_last ? c : 0, IDXT_HD);
                int emax = 0, kmin = IDXT_NOBIT;
                uint32_t inexact = 0;
#pragma unroll
                for (int ks = 0; ks < 8; ks++)
#pragma unroll
                    for (int half = 0; half < 2; half++) {
                        float2 v = c < n_last ? R::load2(row, 16 * ks + 8 * half + 2 * qd, IDXT_HD)
                                              : make_float2(0.f, 0.f);
                        idxt_stat(v.x, emax, kmin, inexact); idxt_stat(v.y, emax, kmin, inexact);
                        af[mt][ks][h2 + 2 * half] = idxt_bf16x2(v.x, v.y);
                    }
                idxt_stat_quad(emax, kmin, inexact);
                int E, L;
                idxt_el(emax, kmin, E, L);
                rE[mt][h2] = E; rL[mt][h2] = L;
                rB[mt][h2] = inexact || L < -126 || E > 127 ? IDXT_BAD : kmin == IDXT_NOBIT ? -2000 : E - L;
            }

        float4 pf[8];
        float pw;
        idxt_q_load(qI, wI, wscale, ta, pf, pw);
        idxt_q_store<WG>(pf, pw, qs[0], ws[0], qstat[0]);
        __syncthreads();
        for (int t = ta; t < t_end; t++) {
            int buf = (t - ta) & 1;
            bool more = t + 1 < t_end;
            if (more) idxt_q_load(qI, wI, wscale, t + 1, pf, pw);    /* consumed after the products */
            int nI = (pos0 + t + 1) / 4;
            /* wgmma: the warpgroup's first row (its four warps multiply together) */
            if ((WG ? c0 + (w & ~3) * 16 * MT : rw0) < nI) {
                float acc[MT][8][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int i = 0; i < 8; i++)
#pragma unroll
                        for (int r = 0; r < 4; r++) acc[mt][i][r] = 0.f;
                if constexpr (WG) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
                    /* D[64 rows x 64 slots] over k 16 ks .. 16 ks + 15: the k step's two core
                     * matrices 128 bytes apart, slot groups 2048 */
                    const unsigned qa = (unsigned)__cvta_generic_to_shared(qs[buf]);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) wg_pin(*reinterpret_cast<float(*)[32]>(&acc[mt][0][0]));
                    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
                    for (int ks = 0; ks < 8; ks++)
#pragma unroll
                        for (int mt = 0; mt < MT; mt++)
                            idxt_wgmma(*reinterpret_cast<float(*)[32]>(&acc[mt][0][0]), af[mt][ks],
                                       wg_desc(qa + (unsigned)(ks * 256), 128, 2048));
                    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
                    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) wg_pin(*reinterpret_cast<float(*)[32]>(&acc[mt][0][0]));
#endif
                } else {
                    /* ldmatrix x4: lanes 8m..8m+7 address matrix m = (n-tile 2 np + m / 2, dims + 8 (m % 2)) */
                    const __nv_bfloat16 *qb = qs[buf] + (8 * (lane >> 4) + (lane & 7)) * IDXT_QS + 8 * ((lane >> 3) & 1);
#pragma unroll
                    for (int ks = 0; ks < 8; ks++) {
                        uint32_t b[8][2];
#pragma unroll
                        for (int np = 0; np < 4; np++)
                            idxt_ldm_x4(b[2 * np][0], b[2 * np][1], b[2 * np + 1][0], b[2 * np + 1][1],
                                        qb + 16 * np * IDXT_QS + 16 * ks);
#pragma unroll
                        for (int mt = 0; mt < MT; mt++)
#pragma unroll
                            for (int i = 0; i < 8; i++) idxt_mma(acc[mt][i], af[mt][ks], b[i][0], b[i][1]);
                    }
                }
                /* the token's test values */
                int A = qstat[buf][0][0], Lq = qstat[buf][0][1], Eq = qstat[buf][0][2];
#pragma unroll
                for (int v = 1; v < IDXT_WARPS; v++) {
                    A = max(A, qstat[buf][v][0]); Lq = min(Lq, qstat[buf][v][1]); Eq = max(Eq, qstat[buf][v][2]);
                }
                if (Lq < -126 || Eq > 127) A = IDXT_BAD;
                /* this lane's heads: groups 2 qd (wv[0..7]) and 2 qd + 1 (wv[8..15]) */
                float wv[16];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    float4 x = *(const float4 *)(ws[buf] + 16 * qd + 4 * j);
                    wv[4 * j] = x.x; wv[4 * j + 1] = x.y; wv[4 * j + 2] = x.z; wv[4 * j + 3] = x.w;
                }
                float *srow = scores + (int64_t)t * sstride;
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int h2 = 0; h2 < 2; h2++) {
                        int c = rw0 + 16 * mt + g + 8 * h2;
                        bool exact = A + rB[mt][h2] <= 24 && Lq + rL[mt][h2] >= -126 && Eq + rE[mt][h2] <= 118;
                        if (!exact && c < nI) {      /* the same for the quad's 4 lanes */
                            const float *qt = qI + (int64_t)t * IDXT_NH * IDXT_HD;
                            const idx_elem<FMT> *kr = R::row(rows, c, IDXT_HD);
#pragma unroll 1
                            for (int j = 0; j < 16; j++) {     /* n-tile j / 2, column 2 qd + j % 2 */
                                int h = 8 * (2 * qd + (j >> 3)) + 2 * ((j >> 1) & 3) + (j & 1);
                                float d = idxt_dot_fma<FMT>(qt + h * IDXT_HD, kr);
#pragma unroll
                                for (int i = 0; i < 8; i++)     /* constant indices: acc stays in registers */
#pragma unroll
                                    for (int e = 0; e < 2; e++)
                                        if (2 * i + e == j) acc[mt][i][2 * h2 + e] = d;
                            }
                        }
                        /* idx_scores_rows' fold: per group, heads in order, sc += w a for a > 0;
                         * then the groups by xor 1, 2, 4 (here: in-lane, quad xor 1, 2) */
                        float s_lo = 0.f, s_hi = 0.f;
#pragma unroll
                        for (int i = 0; i < 4; i++)
#pragma unroll
                            for (int e = 0; e < 2; e++) {
                                float a = acc[mt][i][2 * h2 + e];
                                if (a > 0.f) s_lo += wv[2 * i + e] * a;
                            }
#pragma unroll
                        for (int i = 4; i < 8; i++)
#pragma unroll
                            for (int e = 0; e < 2; e++) {
                                float a = acc[mt][i][2 * h2 + e];
                                if (a > 0.f) s_hi += wv[8 + 2 * (i - 4) + e] * a;
                            }
                        float sc = s_lo + s_hi;
                        sc += __shfl_xor_sync(0xffffffffu, sc, 1);
                        sc += __shfl_xor_sync(0xffffffffu, sc, 2);
                        if (qd == 0 && c < nI) srow[c] = sc;
                    }
            }
            if (more) idxt_q_store<WG>(pf, pw, qs[buf ^ 1], ws[buf ^ 1], qstat[buf ^ 1]);
            __syncthreads();
        }
    }
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    }
#endif
}

/* the wgmma form runs here (cu_sm90a_body) and MINKE_CUDA_IDX_WG is not 0
 * (read at each call) */
static int idxt_wg_ok(void) {
    static int ok[32];
    const int d = cu_cur_dev();
    if (!ok[d]) ok[d] = cu_sm90a_body((const void *)k_idx_scores_tc<1, CU_KV_F32, true>, d) ? 1 : -1;
    return ok[d] > 0 && env_int("MINKE_CUDA_IDX_WG", 1) != 0;
}

template <int FMT>
static void idxt_launch(int mt, dim3 grid, const float *qI, const float *wI, const void *rows, int T, float wscale,
                        int topk, const int *pos0p, float *scores, int64_t score_stride, int tok, cudaStream_t st) {
    const bool wg = idxt_wg_ok();
    auto k = mt == 1 ? (wg ? k_idx_scores_tc<1, FMT, true> : k_idx_scores_tc<1, FMT, false>)
                     : (wg ? k_idx_scores_tc<2, FMT, true> : k_idx_scores_tc<2, FMT, false>);
    cu_launch(k, grid, IDXT_THREADS, 0, st, qI, wI, (const idx_elem<FMT> *)rows, T, wscale, topk, pos0p, scores,
              score_stride, tok);
}

/* MINKE_CUDA_IDX_TC: 1 (default) tensor cores for prefill batches with the
 * simulations on; 0 never; 2 also with them off (a check of the fallback:
 * then nearly every score takes it). Batches under IDXT_MIN_T tokens
 * (decode) too, where the cache's capacity (max_rows, not the rows it holds
 * now: a decode graph is captured once) is at least IDXT_DEC_ROWS rows
 * (MINKE_CUDA_IDX_TC_DEC_ROWS=N moves it, 0 turns it off): one token's
 * scores over 4096 / 16384 / 40000 rows take 12.0 / 13.2 / 22.9 us there
 * against 18.0 / 32.9 / 65.0 on k_idx_scores_w, and Flash q2 decode at ctx
 * 65536 runs 150.5-152.0 tok/s against 143.3-143.5 (twelfth session); the
 * same bits either way (see above). Both read at each call. */
int cu_idx_scores_tc_taken(int T, int nh, int hd, int max_rows, int sims) {
    int mode = env_int("MINKE_CUDA_IDX_TC", 1), dec_rows = env_int("MINKE_CUDA_IDX_TC_DEC_ROWS", IDXT_DEC_ROWS);
    int batch_ok = T >= IDXT_MIN_T || (dec_rows > 0 && max_rows >= dec_rows);
    return nh == IDXT_NH && hd == IDXT_HD && batch_ok && !cu_dec_old(CU_OLD_IDX_SCORES) &&
           (mode == 2 || (mode == 1 && sims));
}

void cu_idx_scores_sims(const float *qI, const float *wI, const void *rows, int rows_fmt, int T, int nh, int hd,
                        float wscale, int topk, int max_rows, const int *pos0p, float *scores, int64_t score_stride,
                        int sims, cudaStream_t st) {
    if (cu_idx_scores_tc_taken(T, nh, hd, max_rows, sims)) {
        /* 128 rows a block for decode (12.0 against 14.2 us at 4096 rows, the
         * same at 40000), 256 for prompts */
        int mt = env_int("MINKE_CUDA_IDX_TC_MT", T < IDXT_MIN_T ? 1 : 2) == 1 ? 1 : 2;
        /* 32 tokens a block (8 before the twentieth session): a warp's rows,
         * loaded, tested and converted once a row tile, serve four times as
         * many tokens; Flash q2 prefill of 65536 tokens +0.6%, of 4096 +0.3%
         * (alternating A/B, docs/performance.md); the same bits (idx_check) */
        int tok = env_int("MINKE_CUDA_IDX_TC_TOK", 32);
        if (tok < 1) tok = 1;
        if (tok < (T + 65534) / 65535) tok = (T + 65534) / 65535;
        int rb = 16 * mt * IDXT_WARPS, gy = (T + tok - 1) / tok;
        int tiles = (max_rows + rb - 1) / rb, gx = (8 * cu_num_sms() + gy - 1) / gy;    /* ~8 blocks an SM */
        if (gx > tiles) gx = tiles;
        if (gx < 1) gx = 1;
        dim3 grid(gx, gy);
        if (rows_fmt == CU_KV_FP4)
            idxt_launch<CU_KV_FP4>(mt, grid, qI, wI, rows, T, wscale, topk, pos0p, scores, score_stride, tok, st);
        else
            idxt_launch<CU_KV_F32>(mt, grid, qI, wI, rows, T, wscale, topk, pos0p, scores, score_stride, tok, st);
        return;
    }
    cu_idx_scores(qI, wI, rows, rows_fmt, T, nh, hd, wscale, topk, max_rows, pos0p, scores, score_stride, st);
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
    cu_pdl_enter_early();
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
    cudaFuncSetAttribute(k_idx_scores<CU_KV_F32>, cudaFuncAttributeMaxDynamicSharedMemorySize, 160 * 1024);
    cudaFuncSetAttribute(k_idx_scores<CU_KV_FP4>, cudaFuncAttributeMaxDynamicSharedMemorySize, 160 * 1024);
    cudaFuncSetAttribute(k_idx_scores_w<16, CU_KV_F32>, cudaFuncAttributeMaxDynamicSharedMemorySize, idxw_smem_max());
    cudaFuncSetAttribute(k_idx_scores_w<32, CU_KV_F32>, cudaFuncAttributeMaxDynamicSharedMemorySize, idxw_smem_max());
    cudaFuncSetAttribute(k_idx_scores_w<16, CU_KV_FP4>, cudaFuncAttributeMaxDynamicSharedMemorySize, idxw_smem_max());
    cudaFuncSetAttribute(k_idx_scores_w<32, CU_KV_FP4>, cudaFuncAttributeMaxDynamicSharedMemorySize, idxw_smem_max());
    {
        int cmax = (idxw_smem_max() - 16 * 1024) / 4;
        cudaFuncSetAttribute(k_idx_topk_r, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * (cmax < TK_CACHE ? cmax : TK_CACHE));
    }
    cu_attn_init();
}
