/* cu_attn_wg.cu: prefill attention with sinks (spec §10) on Hopper's
 * warpgroup tensor cores (wgmma, sm_90a).
 *
 * Why: k_attention_tcp (cu_attn_tc.cu) multiplies on mma.sync with 16 warps
 * and four barriers a 32-row tile, ~120 TFLOP/s (a 4096-token Flash prompt
 * spends ~75 ms there). Here a block (token, 64 heads) runs two warpgroups:
 *   - the rows come in tiles of 64 as f16, copied by cp.async straight into
 *     shared memory in wgmma's core-matrix layout (8 rows x 16 bytes a core
 *     matrix); the same tile is K (K-major B of S) and V (N-major B of O), so
 *     a row is brought from L2 once per token, as f16 (the rows are converted
 *     once per batch by k_rows_f16, not once per token and head group);
 *   - S = Q K^T (64 heads x 64 rows): each warpgroup multiplies half of hd
 *     (m64n64k16, both operands in shared memory) and the two halves are
 *     added through shared memory (the same sum in both warpgroups);
 *   - the online softmax in registers (a head is a row of the accumulators:
 *     four threads a head), p rounded to f16 as the tensor cores take it and
 *     the rounded p summed into the denominator (as k_attention_tc);
 *   - O += P V: P stays in registers as wgmma's A fragment; each warpgroup
 *     owns half of hd's output columns (m64n{hd/2}k16, V N-major);
 *   - the next tile's copies are in flight during this tile's softmax and
 *     P V; the sink, normalisation and inverse RoPE follow in registers.
 * Precision: the same roundings as k_attention_tc (q, k and p in f16, f32
 * sums), other summation orders: within attn_check's bound of the double
 * reference, not bit-identical to it. cu_attention_tc takes this kernel by
 * default on sm_90a devices (MINKE_CUDA_ATT_TC_PIPE=2; 1 and 0 select the
 * mma.sync kernels). */
#include <stdint.h>
#include <stdlib.h>
#include <cuda_fp16.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_ops.h"
#include "cuda/cu_wgmma.cuh"

#define ATW_HEADS 64
#define ATW_ROWS 64
#define ATW_THREADS 256
#define ATW_MAX_SEL 512       /* indexer rows a token staged in shared memory */
#define ATW_MAX_ROT 128       /* RoPE dims of the output's inverse rotation */

template <int HD> struct atw_layout {
    static constexpr int tile = ATW_ROWS * HD * 2;              /* a row tile: 64 rows of hd halves */
    static constexpr size_t q = 0;                              /* Q: 64 heads of hd halves */
    static constexpr size_t k = q + (size_t)ATW_HEADS * HD * 2; /* two row tiles */
    static constexpr size_t x = k + 2 * (size_t)tile;           /* the S halves: 2 x 128 threads x 32 floats */
    static constexpr size_t sel = x + 2 * 128 * 32 * 4;
    static constexpr size_t rot = sel + ATW_MAX_SEL * 4;        /* cos, sin */
    static constexpr size_t bytes = rot + ATW_MAX_ROT * 4;
};

/* the byte offset of row r's 16-byte group dg (elements 8 dg .. 8 dg + 7) in
 * a core-matrix tile of hd-element rows: 8-row groups of hd / 8 core matrices */
template <int HD>
__device__ __forceinline__ unsigned atw_off(int r, int dg) {
    return (unsigned)(((r >> 3) * (HD / 8) + dg) * 128 + (r & 7) * 16);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* S[64 x 64] += Q[64 x 16] K[16 x 64], both K-major in shared memory; O[64 x N] += P[64 x 16]
 * V[16 x N], P in registers, V N-major */
WG_MMA_SS(atw_mma_s, 32, 64, 32, 33, 0)
WG_MMA_RS(atw_mma_pv, 32, 64, 32, 33, 34, 35, 36, 1)
WG_MMA_RS(atw_mma_pv, 64, 128, 64, 65, 66, 67, 68, 1)
WG_MMA_RS(atw_mma_pv, 128, 256, 128, 129, 130, 131, 132, 1)
__device__ __forceinline__ uint32_t atw_h2u(__half2 h) { return *(const uint32_t *)&h; }
#endif

/* rows of hd f32 as f16 (the kernel's row tiles are f16 copies of the batch's
 * kv rows, the ring and the compressed rows) */
__global__ void k_rows_f16(const float *src, __half *dst, int64_t n4) {
    cu_pdl_enter();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 v = ((const float4 *)src)[i];
    __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
    ((uint2 *)dst)[i] = make_uint2(*(const uint32_t *)&a, *(const uint32_t *)&b);
}

/* ncomp: the compressed rows converted (those below pos0 + T). qeps >= 0: q is
 * the raw q_b output, and its per-head RMS norm (eps qeps) and RoPE happen
 * here as Q is staged (k_qhead_w's math, its sums in another order); < 0: q
 * is already normed and rotated. */
template <int HD>
__global__ void __launch_bounds__(ATW_THREADS, 1)
k_attention_wg(const float *q, const __half *kvh, const __half *ringh, const __half *comph, const int *sel,
               const int *nsel, int topk, const float *sinks, int nh, int W, int ratio, int nrot,
               const float *inv_freq, float scale, const int *pos0p, float *o, int ncomp, float qeps, int T,
               unsigned *o_amax) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef atw_layout<HD> L;
    constexpr int NO = HD / 4;            /* O accumulators a thread: m64 x n(hd / 2) */
    extern __shared__ __align__(128) unsigned char atw_sh[];
    cu_pdl_enter();
    const unsigned sb = (unsigned)__cvta_generic_to_shared(atw_sh);
    int *sSel = (int *)(atw_sh + L::sel);
    float *sCos = (float *)(atw_sh + L::rot), *sSin = sCos + ATW_MAX_ROT / 2;
    const int h0 = blockIdx.x * ATW_HEADS;
    const int tid = threadIdx.x, wg = tid >> 7, wt = tid & 127, lane = tid & 31, wq = (tid >> 5) & 3;
    const int g = lane >> 2, c = lane & 3;
    const int pos0 = *pos0p;
    const int qbytes = (nh - h0 < ATW_HEADS ? nh - h0 : ATW_HEADS) * HD * 4;
    float amax = 0.f;       /* the largest finite |o| this thread stores (o_amax) */
    /* persistent over tokens (one block an SM): the next token's q is prefetched into L2
     * while this one's tiles run, so its staging does not wait on HBM */
    for (int t = blockIdx.y; t < T; t += gridDim.y) {
        __syncthreads();        /* the previous token's reads of the shared buffers are done */
        const int qp = pos0 + t;
        const int nraw = attn_nraw(qp, W), n = attn_nrows(t, qp, W, ratio, nsel);
        if (ratio == 4)
            for (int i = tid; i < n - nraw; i += ATW_THREADS) sSel[i] = sel[(int64_t)t * topk + i];
        for (int k = tid; k < nrot / 2; k += ATW_THREADS) {
            float ang = (float)qp * inv_freq[k];
            double sd, cd;
            sincos((double)ang, &sd, &cd);
            sCos[k] = (float)cd;
            sSin[k] = (float)sd;
        }
        __syncthreads();

        /* row i of the token's list: window rows (this batch's or the ring's), then compressed */
        auto row_ptr = [&](int i) -> const __half * {
            if (i < nraw) {
                const int j = qp - nraw + 1 + i;
                return j >= pos0 ? kvh + (int64_t)(j - pos0) * HD : ringh + (int64_t)(j % W) * HD;
            }
            /* the indexer selects among the (qp + 1) / 4 rows the position has; the clamp only
             * keeps a caller's wrong index inside the converted rows */
            const int ci = ratio == 4 ? max(0, min(sSel[i - nraw], ncomp - 1)) : i - nraw;
            return comph + (int64_t)ci * HD;
        };
        /* tile it's rows by cp.async (rows past the end zero-filled: their p is 0, and 0 x garbage
         * could be NaN): thread = row tid / 4 and every fourth 16-byte group of it, so that four
         * neighbouring threads read 64 contiguous bytes and a row's address is worked out once */
        auto issue_tile = [&](int it) {
            const int r = tid >> 2, p = tid & 3, row = it * ATW_ROWS + r;
            const bool in = row < n;
            const __half *src = in ? row_ptr(row) : kvh;
            const unsigned dst = sb + (unsigned)(L::k + (size_t)(it & 1) * L::tile) + atw_off<HD>(r, 0);
#pragma unroll
            for (int j = 0; j < HD / 32; j++) {
                const int dg = 4 * j + p;
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst + (unsigned)dg * 128u),
                             "l"(src + (in ? dg * 8 : 0)), "r"(in ? 16 : 0)
                             : "memory");
            }
            asm volatile("cp.async.commit_group;\n" ::: "memory");
        };
        issue_tile(0);
        if (tid == 0 && t + (int)gridDim.y < T) {
            const float *qn = q + ((int64_t)(t + gridDim.y) * nh + h0) * HD;
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(qn), "r"(qbytes) : "memory");
            if (ratio == 4 && (topk & 3) == 0 && !((uintptr_t)sel & 15))
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(sel + (int64_t)(t + gridDim.y) * topk),
                             "r"(topk * 4) : "memory");
        }

        /* Q as f16 in the core-matrix layout (heads past nh zero); every load of the
         * block's 64 heads is issued before the first use (one round trip: the
         * prologue is not overlapped, one block an SM) */
        const float *qt = q + ((int64_t)t * nh + h0) * HD;
        if (qeps >= 0.f) {
            /* warp w: heads 8 w .. 8 w + 7; lane: dims 4 lane + 128 m */
            constexpr int NM = HD / 128;
            const int w = tid >> 5, off = HD - nrot;
            float4 v[8][NM];
#pragma unroll
            for (int u = 0; u < 8; u++)
#pragma unroll
                for (int m = 0; m < NM; m++) {
                    const int hh = 8 * w + u;
                    v[u][m] = h0 + hh < nh ? __ldg((const float4 *)(qt + (int64_t)hh * HD + 128 * m) + lane)
                                           : make_float4(0.f, 0.f, 0.f, 0.f);
                }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int hh = 8 * w + u;
                double ss = 0.0;
#pragma unroll
                for (int m = 0; m < NM; m++)
                    ss += (double)v[u][m].x * v[u][m].x + (double)v[u][m].y * v[u][m].y +
                          (double)v[u][m].z * v[u][m].z + (double)v[u][m].w * v[u][m].w;
                ss = warp_sum_d(ss);
                const float r = (float)(1.0 / sqrt(ss / HD + (double)qeps));
#pragma unroll
                for (int m = 0; m < NM; m++) {
                    float x[4] = {v[u][m].x * r, v[u][m].y * r, v[u][m].z * r, v[u][m].w * r};
                    const int d = 128 * m + 4 * lane;
#pragma unroll
                    for (int e = 0; e < 4; e += 2)
                        if (d + e >= off) {
                            const int k = (d + e - off) >> 1;
                            const float cs = sCos[k], sn = sSin[k];
                            const float x0 = x[e], x1 = x[e + 1];
                            x[e] = x0 * cs - x1 * sn;
                            x[e + 1] = x0 * sn + x1 * cs;
                        }
                    const uint2 hv = make_uint2(atw_h2u(__floats2half2_rn(x[0], x[1])), atw_h2u(__floats2half2_rn(x[2], x[3])));
                    *(uint2 *)(atw_sh + L::q + atw_off<HD>(hh, d >> 3) + (d & 7) * 2) = hv;
                }
            }
        } else {
            constexpr int NI = ATW_HEADS * HD / 8 / ATW_THREADS;
            float4 a[NI], b[NI];
#pragma unroll
            for (int j = 0; j < NI; j++) {
                const int i = tid + j * ATW_THREADS;
                const int r8 = i & 7, rest = i >> 3, dg = rest % (HD / 8), hh = (rest / (HD / 8)) * 8 + r8;
                a[j] = b[j] = make_float4(0.f, 0.f, 0.f, 0.f);
                if (h0 + hh < nh) {
                    const float4 *src = (const float4 *)(qt + (int64_t)hh * HD + dg * 8);
                    a[j] = __ldg(src);
                    b[j] = __ldg(src + 1);
                }
            }
#pragma unroll
            for (int j = 0; j < NI; j++) {
                const int i = tid + j * ATW_THREADS;
                const int r8 = i & 7, rest = i >> 3, dg = rest % (HD / 8), hh = (rest / (HD / 8)) * 8 + r8;
                const uint4 hv = make_uint4(atw_h2u(__floats2half2_rn(a[j].x, a[j].y)), atw_h2u(__floats2half2_rn(a[j].z, a[j].w)),
                                            atw_h2u(__floats2half2_rn(b[j].x, b[j].y)), atw_h2u(__floats2half2_rn(b[j].z, b[j].w)));
                *(uint4 *)(atw_sh + L::q + atw_off<HD>(hh, dg)) = hv;
            }
        }

        float oacc[NO];
#pragma unroll
        for (int i = 0; i < NO; i++) oacc[i] = 0.f;
        wg_pin(oacc);
        float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.f, 0.f};
        const int ntile = (n + ATW_ROWS - 1) / ATW_ROWS;
        const unsigned qa = sb + (unsigned)L::q;
        float4 *xown = (float4 *)(atw_sh + L::x) + wg * 8 * 128;
        const float4 *xoth = (const float4 *)(atw_sh + L::x) + (wg ^ 1) * 8 * 128;

        for (int it = 0; it < ntile; it++) {
            const unsigned kt = sb + (unsigned)(L::k + (size_t)(it & 1) * L::tile);
            /* tile it landed (own copies, then everyone's), visible to the tensor cores */
            asm volatile("cp.async.wait_group 0;\n" ::: "memory");
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            __syncthreads();
            /* this warpgroup's half of hd: S_half = Q[:, half] K[:, half]^T */
            float s[32];
#pragma unroll
            for (int i = 0; i < 32; i++) s[i] = 0.f;
            wg_pin(s);
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
            for (int j = 0; j < HD / 32; j++) {
                const unsigned off = (unsigned)((wg * (HD / 32) + j) * 256);
                atw_mma_s(s, wg_desc(qa + off, 128, HD * 16), wg_desc(kt + off, 128, HD * 16));
            }
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            /* also waits for the previous tile's P V (groups complete in order) */
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
            wg_pin(s);
            wg_pin(oacc);
            /* the two halves added (thread wt of both warpgroups holds the same elements) */
#pragma unroll
            for (int k = 0; k < 8; k++) xown[k * 128 + wt] = make_float4(s[4 * k], s[4 * k + 1], s[4 * k + 2], s[4 * k + 3]);
            __syncthreads();
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float4 v = xoth[k * 128 + wt];
                s[4 * k] += v.x; s[4 * k + 1] += v.y; s[4 * k + 2] += v.z; s[4 * k + 3] += v.w;
            }
            /* both warpgroups' products of tile it - 1 are done (each waited before the
             * barrier): its buffer takes tile it + 1 */
            if (it + 1 < ntile) issue_tile(it + 1);

            /* online softmax: thread rows g (accumulators i with bit 1 clear) and g + 8 */
            const int cb = it * ATW_ROWS;
            float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
            for (int i = 0; i < 32; i++) {
                const int col = 8 * (i >> 2) + 2 * c + (i & 1);
                const float v = cb + col < n ? s[i] * scale : -INFINITY;
                s[i] = v;
                if (i & 2) mx1 = fmaxf(mx1, v); else mx0 = fmaxf(mx0, v);
            }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            const float mn0 = fmaxf(m_r[0], mx0), mn1 = fmaxf(m_r[1], mx1);
            const float corr0 = expf(m_r[0] - mn0), corr1 = expf(m_r[1] - mn1);
            uint32_t pa[4][4];
            float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                const __half2 p0 = __floats2half2_rn(expf(s[8 * kk] - mn0), expf(s[8 * kk + 1] - mn0));
                const __half2 p1 = __floats2half2_rn(expf(s[8 * kk + 2] - mn1), expf(s[8 * kk + 3] - mn1));
                const __half2 p2 = __floats2half2_rn(expf(s[8 * kk + 4] - mn0), expf(s[8 * kk + 5] - mn0));
                const __half2 p3 = __floats2half2_rn(expf(s[8 * kk + 6] - mn1), expf(s[8 * kk + 7] - mn1));
                ps0 += __low2float(p0) + __high2float(p0) + __low2float(p2) + __high2float(p2);
                ps1 += __low2float(p1) + __high2float(p1) + __low2float(p3) + __high2float(p3);
                pa[kk][0] = atw_h2u(p0); pa[kk][1] = atw_h2u(p1); pa[kk][2] = atw_h2u(p2); pa[kk][3] = atw_h2u(p3);
            }
            ps0 += __shfl_xor_sync(0xffffffffu, ps0, 1);
            ps0 += __shfl_xor_sync(0xffffffffu, ps0, 2);
            ps1 += __shfl_xor_sync(0xffffffffu, ps1, 1);
            ps1 += __shfl_xor_sync(0xffffffffu, ps1, 2);
            l_r[0] = l_r[0] * corr0 + ps0;
            l_r[1] = l_r[1] * corr1 + ps1;
            m_r[0] = mn0;
            m_r[1] = mn1;

            /* O = corr O + P V over this warpgroup's hd / 2 columns */
#pragma unroll
            for (int i = 0; i < NO; i++) oacc[i] *= (i & 2) ? corr1 : corr0;
            wg_pin(oacc);
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                const unsigned boff = (unsigned)((2 * kk * (HD / 8) + wg * (HD / 16)) * 128);
                /* V N-major: core matrices adjacent in K (8-row groups) hd * 16 bytes apart, in N 128 */
                atw_mma_pv(oacc, pa[kk], wg_desc(kt + boff, HD * 16, 128));
            }
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            wg_pin(oacc);
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        wg_pin(oacc);

        /* the sink, the normalisation and the inverse RoPE (a RoPE pair is one accumulator pair) */
        const int off = HD - nrot;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int h = h0 + 16 * wq + g + 8 * half;
            if (h >= nh) continue;
            const float M = m_r[half], sk = sinks[h];
            const float Mt = fmaxf(sk, M);
            const float fac = M == -INFINITY ? 0.f : expf(M - Mt);
            const float den = expf(sk - Mt) + l_r[half] * fac;
            const float f = fac * (1.0f / den);
            float *out = o + ((int64_t)t * nh + h) * HD;
#pragma unroll
            for (int j = 0; j < HD / 16; j++) {
                const int d = wg * (HD / 2) + 8 * j + 2 * c;
                float x0 = oacc[4 * j + 2 * half] * f, x1 = oacc[4 * j + 2 * half + 1] * f;
                if (d >= off) {
                    const int k = (d - off) >> 1;
                    const float cs = sCos[k], sn = -sSin[k];       /* the inverse rotation */
                    const float y0 = x0 * cs - x1 * sn, y1 = x0 * sn + x1 * cs;
                    x0 = y0; x1 = y1;
                }
                *(float2 *)(out + d) = make_float2(x0, x1);
                if (fabsf(x0) <= 3.4028235e38f) amax = fmaxf(amax, fabsf(x0));
                if (fabsf(x1) <= 3.4028235e38f) amax = fmaxf(amax, fabsf(x1));
            }
        }
    }   /* tokens */
    if (o_amax) {
        unsigned b = __float_as_uint(amax);
#pragma unroll
        for (int k = 16; k > 0; k >>= 1) b = max(b, __shfl_xor_sync(0xffffffffu, b, k));
        if (lane == 0 && b) atomicMax(o_amax, b);
    }
#endif
}

/* ---- launcher ---- */

/* per device: the f16 row copies (grown outside graph capture; prefill batches only). One
 * buffer a device, not a stream: the attention runs on the main stream only (a second
 * stream calling it would need its own, as cu_mmh keeps its scratch a stream). */
static __half *atw_rows[32];
static size_t atw_cap[32];

/* the sm_90a body runs here: an sm_90 device running the sm_90a code (the compute_80 PTX
 * compiled at load time has an empty kernel) with the shared memory it asks */
template <int HD> static int atw_ok(int dev) {
    static int ok[32];
    if (!ok[dev]) {
        int optin = 0;
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        ok[dev] = cu_sm90a_body((const void *)k_attention_wg<HD>, dev) && optin >= (int)atw_layout<HD>::bytes &&
                          cudaFuncSetAttribute(k_attention_wg<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)atw_layout<HD>::bytes) == cudaSuccess
                      ? 1 : -1;
        cudaGetLastError();
    }
    return ok[dev] > 0;
}

static void rows_f16(const float *src, __half *dst, int64_t rows, int hd, cudaStream_t st) {
    const int64_t n4 = rows * hd / 4;
    if (n4 > 0) cu_launch(k_rows_f16, (unsigned)((n4 + 255) / 256), 256, 0, st, src, dst, n4);
}

template <int HD>
static int atw_launch(const float *q, const float *kv_batch, const float *ring, const float *comp, const int *sel,
                      const int *nsel, int topk, const float *sinks, int T, int nh, int W, int ratio, int nrot,
                      const float *inv_freq, float scale, const int *pos0p, int pos0, float qeps, float *o,
                      unsigned *o_amax, cudaStream_t st) {
    const int dev = cu_cur_dev();
    if (dev < 0 || dev >= 32 || !atw_ok<HD>(dev)) return 0;
    if ((ratio == 4 && topk > ATW_MAX_SEL) || nrot > ATW_MAX_ROT || nrot % 2 || nrot > HD) return 0;
    /* the rows the batch reads: its own, the ring's W (earlier positions), the compressed ones */
    const int64_t ncomp = ratio ? (int64_t)(pos0 + T) / ratio : 0;
    const int64_t rows = (int64_t)T + W + ncomp;
    const size_t need = (size_t)rows * HD * 2;
    if (need > atw_cap[dev]) {
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(st, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) return 0;
        if (atw_rows[dev]) { cudaStreamSynchronize(st); cudaFree(atw_rows[dev]); atw_rows[dev] = NULL; atw_cap[dev] = 0; }
        const size_t cap = need + need / 4;
        if (cudaMalloc((void **)&atw_rows[dev], cap) != cudaSuccess) { cudaGetLastError(); return 0; }
        atw_cap[dev] = cap;
    }
    __half *kvh = atw_rows[dev], *ringh = kvh + (int64_t)T * HD, *comph = ringh + (int64_t)W * HD;
    rows_f16(kv_batch, kvh, T, HD, st);
    if (pos0 > 0) rows_f16(ring, ringh, W, HD, st);
    if (ncomp) rows_f16(comp, comph, ncomp, HD, st);
    const int ng = (nh + ATW_HEADS - 1) / ATW_HEADS, per = cu_num_sms() / ng;
    const dim3 grid(ng, T < per ? T : per > 0 ? per : 1);
    cu_launch(k_attention_wg<HD>, grid, ATW_THREADS, atw_layout<HD>::bytes, st, q, (const __half *)kvh,
              (const __half *)ringh, (const __half *)comph, sel, nsel, topk, sinks, nh, W, ratio, nrot, inv_freq, scale,
              pos0p, o, (int)ncomp, qeps, T, o_amax);
    return 1;
}

/* 1 when it ran; 0 where it does not apply (the caller runs the mma.sync kernels;
 * nothing was launched). pos0: the batch's first position as the host knows it
 * (the rows to convert); qeps: see k_attention_wg; o_amax (NULL: not wanted):
 * atomicMax of the largest finite |o| (float bits; the caller zeroes it). */
int cu_attention_wg(const float *q, const float *kv_batch, const float *ring, const float *comp, const int *sel,
                    const int *nsel, int topk, const float *sinks, int T, int nh, int hd, int W, int ratio, int nrot,
                    const float *inv_freq, float scale, const int *pos0p, int pos0, float qeps, float *o,
                    unsigned *o_amax, cudaStream_t st) {
    switch (hd) {
    case 128: return atw_launch<128>(q, kv_batch, ring, comp, sel, nsel, topk, sinks, T, nh, W, ratio, nrot, inv_freq, scale, pos0p, pos0, qeps, o, o_amax, st);
    case 256: return atw_launch<256>(q, kv_batch, ring, comp, sel, nsel, topk, sinks, T, nh, W, ratio, nrot, inv_freq, scale, pos0p, pos0, qeps, o, o_amax, st);
    case 512: return atw_launch<512>(q, kv_batch, ring, comp, sel, nsel, topk, sinks, T, nh, W, ratio, nrot, inv_freq, scale, pos0p, pos0, qeps, o, o_amax, st);
    default: return 0;
    }
}
