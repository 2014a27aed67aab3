/* cu_hc.cu: the hyper-connection kernels (spec model.md §6.7, §6.8): the
 * pre step (mix GEMV over the flattened streams, Sinkhorn split, weighted sum,
 * RMSNorm), its one-launch fused form with the previous post step folded
 * in, and the post step. Arithmetic follows src/cpu/numerics.c.
 *
 * The fused pre step has three schedules with bit-identical results:
 * k_hc_pre_fused (v1, env MINKE_CUDA_HC_V1=1 or cu_hc_use_v1(1)),
 * k_hc_pre_fused2 (v2, 16 blocks of 1024; env MINKE_CUDA_HC_V2=1) and
 * k_hc_pre_fused3 (v3, 64 blocks of 288; default where the shape fits,
 * see its comment). tests/cuda/hc_check.c checks them against each other
 * and a double-precision CPU reference, and times them.
 *
 * The unfused pre step's first kernel (the mix partials) has two forms with
 * the same bits: a block per token (k_hc_mix_partial) and, for prefill, 16
 * tokens a block (k_hc_mix_tiled, MINKE_CUDA_HC_MIXT); hc_check compares them.
 * From 64 tokens the mixes run on the TF32 tensor cores instead (k_hc_mix_tc,
 * MINKE_CUDA_HC_TC; within 1.3e-7 of the double dots, other bits), and the
 * finish is two launches (k_hc_split_tok, k_hc_pre_apply; MINKE_CUDA_HC_FIN)
 * with k_hc_pre_finish's bits.
 */
#include <stdlib.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_numerics.cuh"
#include "cuda/cu_ops.h"

/* ------------------------------------------------------------------ */
/* hyper-connections                                                   */

#define HC_SPLIT 16
#define HC_MAXMIX 32

/* partial[t][split][m] = sum over this split's chunk of fn[m] . X_flat; psq = sum of squares. */
__global__ void k_hc_mix_partial(const float *X, int hcdim, const void *fn, int fntype, int nmix,
                                 float *partial, double *psq) {
    cu_pdl_enter();
    int t = blockIdx.y, sp = blockIdx.x;
    int chunk = hcdim / HC_SPLIT;
    const float *x = X + (int64_t)t * hcdim + (int64_t)sp * chunk;
    __shared__ double shd[33];
    double ss = 0.0;
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) ss += (double)x[i] * (double)x[i];
    ss = block_sum_d(ss, shd);
    if (threadIdx.x == 0) psq[t * HC_SPLIT + sp] = ss;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int m = w; m < nmix; m += nw) {
        float acc = 0.f;
        int64_t base = (int64_t)m * hcdim + (int64_t)sp * chunk;
        if (fntype == CU_TYPE_F16 && (chunk % 64) == 0) {
            const __half2 *h = (const __half2 *)((const uint16_t *)fn + base);
            for (int i = lane; i < chunk / 2; i += 32) {
                float2 f = __half22float2(h[i]);
                acc += f.x * x[2 * i] + f.y * x[2 * i + 1];
            }
        } else {
            for (int i = lane; i < chunk; i += 32) acc += cu_wload(fn, fntype, base + i) * x[i];
        }
        acc = warp_sum(acc);
        if (lane == 0) partial[((int64_t)t * HC_SPLIT + sp) * HC_MAXMIX + m] = acc;
    }
}

/* warp_sum of each of a lane's N values at once, in about N shuffles instead
 * of 5 N (the prefill mix kernel below sums 48 values a lane). At each
 * butterfly offset o = 16 .. 1, while N is even a lane keeps half of its
 * values (the upper half where its bit o is set), sends its partner (lane ^ o)
 * the other half and adds what it receives; once N is odd the values take the
 * plain butterfly. Partners agree on every higher bit, so they kept the same
 * values: each value meets the same partial sums in the same pairs, in the
 * same tree, as in warp_sum's butterfly (warp_sum at lane 0 adds
 * lower + upper group; a lane here adds its own + its partner's, which for a
 * lane with bit o set is upper + lower: the same bits, IEEE addition being
 * exactly commutative). Afterwards slot s (< warp_sum_many_left<N>()) of a
 * lane holds the sum of input warp_sum_many_index<N>(s, lane), the same in
 * the lanes that differ only in the plain steps' bits; warp_sum_many_owner
 * picks one of them to store it. */
template <int N, int O = 16, typename F>
__device__ __forceinline__ void warp_sum_many(F *v, int lane) {
    if constexpr (O > 0) {
        if constexpr (N % 2 == 0) {
            constexpr int H = N / 2;
            const bool up = (lane & O) != 0;
#pragma unroll
            for (int s = 0; s < H; s++) {
                const F keep = up ? v[s + H] : v[s], give = up ? v[s] : v[s + H];
                v[s] = keep + __shfl_xor_sync(0xffffffffu, give, O);
            }
            warp_sum_many<H, O / 2>(v, lane);
        } else {
#pragma unroll
            for (int s = 0; s < N; s++) v[s] += __shfl_xor_sync(0xffffffffu, v[s], O);
            warp_sum_many<N, O / 2>(v, lane);
        }
    }
}
template <int N, int O = 16>
__host__ __device__ constexpr int warp_sum_many_left() {
    if constexpr (O == 0) return N;
    else if constexpr (N % 2 == 0) return warp_sum_many_left<N / 2, O / 2>();
    else return warp_sum_many_left<N, O / 2>();
}
template <int N, int O = 16>
__device__ __forceinline__ int warp_sum_many_index(int s, int lane) {
    if constexpr (O == 0) return s;
    else if constexpr (N % 2 == 0) return ((lane & O) ? N / 2 : 0) + warp_sum_many_index<N / 2, O / 2>(s, lane);
    else return warp_sum_many_index<N, O / 2>(s, lane);
}
template <int N, int O = 16>
__device__ __forceinline__ bool warp_sum_many_owner(int lane) {
    if constexpr (O == 0) return true;
    else if constexpr (N % 2 == 0) return warp_sum_many_owner<N / 2, O / 2>(lane);
    else return !(lane & O) && warp_sum_many_owner<N, O / 2>(lane);
}

/* k_hc_mix_partial for HCT_NT tokens a block (prefill, MINKE_CUDA_HC_MIXT).
 * A block per (split, token) re-reads the split's 24 fn rows from L2 for
 * every token (~3 GB a 4096-token pre step) and each lane walks one
 * dependent chain: 627 us on the H200 against a ~70 us floor (reading X
 * once). Here a block (split sp, HCT_NT tokens) stages its tokens' chunks in
 * shared memory and a warp keeps a register tile of HCT_MR mix rows x HCT_TG
 * tokens, so one fn load serves HCT_TG tokens and one x load HCT_MR rows;
 * the 8 warps are HCT_WM row groups x 2 token groups (rows past the
 * first HCT_WM x HCT_MR = 24, none in Flash: more blocks along z, which
 * stage the tile again).
 *
 * The same bits as k_hc_mix_partial, by construction (hc_check compares):
 * - partial[t][sp][m]: lane L of the warp owning (m, t) runs the chain over
 *   i = L, L+32, ... in the same order, on the same values (x copied
 *   unchanged, fn converted alike), with the expression written as there so
 *   nvcc contracts it alike; the 32 chains are summed by warp_sum_many, the
 *   additions of warp_sum.
 * - psq[t][sp]: thread i of 256 sums (double) x[k]^2 for k = i, i+256, ...
 *   in order, as there; block_sum_d's two butterflies (in each warp, then
 *   over the 8 warp sums and 24 zero lanes) by warp_sum_many.
 * Tokens past T in the last tile compute on zeros and are not stored.
 * With f16 fn (H2) the block also stages its fn rows over the split in
 * shared memory beside the tile where both fit in HCT_SMEM_MAX (FS; 48 KB
 * in Flash), so the products' loop reads no L2: 276 -> 249 us a 4096-token
 * launch on the H200 (sixteenth session, ncu); wider rows (D 8192) load
 * them from L2 a step ahead as before. Flash: 64 + 48 KB a block, two
 * blocks an SM. */
#define HCT_NT 16        /* tokens a block */
#define HCT_TG 8         /* tokens a warp */
#define HCT_MR 6         /* mix rows a warp */
#define HCT_WM 4         /* row groups at once: warps = HCT_WM x HCT_NT / HCT_TG */
#define HCT_THREADS 256  /* k_hc_mix_partial's block: the squares' order depends on it */
#define HCT_SMEM_MAX (160 * 1024)
static_assert(HCT_WM * (HCT_NT / HCT_TG) * 32 == HCT_THREADS, "the warps are row groups x token groups");
template <bool H2, bool FS>
__global__ void __launch_bounds__(HCT_THREADS, 2)
k_hc_mix_tiled(const float *X, int T, int hcdim, const void *fn, int fntype, int nmix, float *partial, double *psq) {
    cu_pdl_enter();
    extern __shared__ float4 hct_xs4[];   /* [HCT_NT][chunk] floats: the tile's chunks of X */
    __shared__ double wsum[HCT_NT][HCT_THREADS / 32];
    const float *xs = (const float *)hct_xs4;
    const int sp = blockIdx.x, t0 = blockIdx.y * HCT_NT, chunk = hcdim / HC_SPLIT;
    const int nt = T - t0 < HCT_NT ? T - t0 : HCT_NT;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;

    const int c4 = chunk / 4;
    for (int tt = 0; tt < HCT_NT; tt++)
        for (int j = tid; j < c4; j += HCT_THREADS) {
            if (tt < nt) cp_async16(&hct_xs4[tt * c4 + j], X + (int64_t)(t0 + tt) * hcdim + (int64_t)sp * chunk + 4 * j);
            else hct_xs4[tt * c4 + j] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
    /* FS: the block's fn rows (HCT_WM x HCT_MR from this z slice's first, those past nmix
     * as the last row) over this split, after the tile: [row][chunk] halves */
    if constexpr (FS) {
        const int r0 = HCT_WM * HCT_MR * blockIdx.z, c8 = chunk / 8;
        float4 *fs4 = hct_xs4 + HCT_NT * c4;
        for (int k = tid; k < HCT_WM * HCT_MR * c8; k += HCT_THREADS) {
            const int r = k / c8, j = k - r * c8, m = r0 + r < nmix ? r0 + r : nmix - 1;
            cp_async16(&fs4[k], (const uint16_t *)fn + (int64_t)m * hcdim + (int64_t)sp * chunk + 8 * j);
        }
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    /* the squares (in the first slice of row groups): each thread's sums, then each warp's */
    if (blockIdx.z == 0) {
        double ss[HCT_NT];
#pragma unroll
        for (int tt = 0; tt < HCT_NT; tt++) {
            const float *x = xs + tt * chunk;
            double s = 0.0;
            for (int i = tid; i < chunk; i += HCT_THREADS) s += (double)x[i] * (double)x[i];
            ss[tt] = s;
        }
        warp_sum_many<HCT_NT>(ss, lane);
        if (warp_sum_many_owner<HCT_NT>(lane)) wsum[warp_sum_many_index<HCT_NT>(0, lane)][w] = ss[0];
    }

    /* the mixes: warp (wm, wt) takes rows g*HCT_MR.. (row group g = wm + HCT_WM * blockIdx.z) of tokens wt*HCT_TG.. */
    const int wm = w % HCT_WM, wt = w / HCT_WM, g = wm + HCT_WM * blockIdx.z;
    if (g * HCT_MR < nmix) {
        /* row r of the group starts at fn element off0 + row(r) * hcdim; rows past nmix read the last row, not stored */
        const int off0 = g * HCT_MR * hcdim + sp * chunk, last = nmix - 1 - g * HCT_MR;
#define HCT_ROW(r) ((r) < last ? (r) : last)
        float acc[HCT_MR * HCT_TG];
#pragma unroll
        for (int k = 0; k < HCT_MR * HCT_TG; k++) acc[k] = 0.f;
        if constexpr (FS) {
            /* the group's rows in shared memory (staged above: row wm * HCT_MR + HCT_ROW(r) of the block's) */
            const __half2 *h = (const __half2 *)(hct_xs4 + HCT_NT * c4) + wm * HCT_MR * (chunk / 2);
            const float2 *x2 = (const float2 *)(xs + wt * HCT_TG * chunk);
            const int half = chunk / 2;
#pragma unroll 2
            for (int i = lane; i < half; i += 32) {
                float2 f[HCT_MR];
#pragma unroll
                for (int r = 0; r < HCT_MR; r++) f[r] = __half22float2(h[HCT_ROW(r) * half + i]);
#pragma unroll
                for (int tt = 0; tt < HCT_TG; tt++) {
                    const float2 xv = x2[tt * half + i];
#pragma unroll
                    for (int r = 0; r < HCT_MR; r++) acc[r * HCT_TG + tt] += f[r].x * xv.x + f[r].y * xv.y;
                }
            }
        } else if constexpr (H2) {
            /* the fn loads from L2, a step ahead */
            const __half2 *h = (const __half2 *)fn + off0 / 2;   /* off0, hcdim even: chunk % 64 == 0 */
            const float2 *x2 = (const float2 *)(xs + wt * HCT_TG * chunk);
            const int half = chunk / 2;
            __half2 hn[HCT_MR];
#pragma unroll
            for (int r = 0; r < HCT_MR; r++) hn[r] = h[HCT_ROW(r) * (hcdim / 2) + lane];   /* half >= 32 */
#pragma unroll 1
            for (int i = lane; i < half; i += 32) {
                float2 f[HCT_MR];
#pragma unroll
                for (int r = 0; r < HCT_MR; r++) f[r] = __half22float2(hn[r]);
                if (i + 32 < half) {
#pragma unroll
                    for (int r = 0; r < HCT_MR; r++) hn[r] = h[HCT_ROW(r) * (hcdim / 2) + i + 32];
                }
#pragma unroll
                for (int tt = 0; tt < HCT_TG; tt++) {
                    const float2 xv = x2[tt * half + i];
#pragma unroll
                    for (int r = 0; r < HCT_MR; r++) acc[r * HCT_TG + tt] += f[r].x * xv.x + f[r].y * xv.y;
                }
            }
        } else {
            /* the fn loads run a step ahead (their latency is L2's) */
            const float *xw = xs + wt * HCT_TG * chunk;
            float wn[HCT_MR];
            if (lane < chunk) {
#pragma unroll
                for (int r = 0; r < HCT_MR; r++) wn[r] = cu_wload(fn, fntype, off0 + HCT_ROW(r) * hcdim + lane);
            }
#pragma unroll 1
            for (int i = lane; i < chunk; i += 32) {
                float wv[HCT_MR];
#pragma unroll
                for (int r = 0; r < HCT_MR; r++) wv[r] = wn[r];
                if (i + 32 < chunk) {
#pragma unroll
                    for (int r = 0; r < HCT_MR; r++) wn[r] = cu_wload(fn, fntype, off0 + HCT_ROW(r) * hcdim + i + 32);
                }
#pragma unroll
                for (int tt = 0; tt < HCT_TG; tt++) {
                    const float xv = xw[tt * chunk + i];
#pragma unroll
                    for (int r = 0; r < HCT_MR; r++) acc[r * HCT_TG + tt] += wv[r] * xv;
                }
            }
        }
#undef HCT_ROW
        warp_sum_many<HCT_MR * HCT_TG>(acc, lane);
        if (warp_sum_many_owner<HCT_MR * HCT_TG>(lane)) {
#pragma unroll
            for (int s = 0; s < warp_sum_many_left<HCT_MR * HCT_TG>(); s++) {
                const int k = warp_sum_many_index<HCT_MR * HCT_TG>(s, lane);
                const int m = g * HCT_MR + k / HCT_TG, tt = wt * HCT_TG + k % HCT_TG;
                if (m < nmix && tt < nt) partial[((int64_t)(t0 + tt) * HC_SPLIT + sp) * HC_MAXMIX + m] = acc[s];
            }
        }
    }

    /* block_sum_d's second butterfly: lane l < 8 holds warp l's sum, the others 0 */
    __syncthreads();
    if (blockIdx.z == 0 && w == 0) {
        double v[HCT_NT];
#pragma unroll
        for (int tt = 0; tt < HCT_NT; tt++) v[tt] = lane < HCT_THREADS / 32 ? wsum[tt][lane] : 0.0;
        warp_sum_many<HCT_NT>(v, lane);
        const int tt = warp_sum_many_index<HCT_NT>(0, lane);
        if (warp_sum_many_owner<HCT_NT>(lane) && tt < nt) psq[(t0 + tt) * HC_SPLIT + sp] = v[0];
    }
}

/* The hyper-connection split of token t on one warp (spec model.md §6.7):
 * pre weights sigmoid(mix*scale0+base)+eps, post weights 2*sigmoid(...), and
 * the comb matrix by Sinkhorn with one lane per entry, each sum taken in the
 * CPU's sequential order so both backends round alike. head: pre weights only
 * (post_out and comb_out are not touched). */
__device__ __forceinline__ void hc_split_warp(const float *mix, const float *scale, const float *base, int nhc,
                                              int iters, float hc_eps, int head, int lane, int t, float *wpre,
                                              float *post_out, float *comb_out) {
    if (lane < nhc) {
        wpre[lane] = sigmoid_stable(mix[lane] * scale[0] + base[lane]) + hc_eps;
        if (!head) post_out[t * nhc + lane] = 2.0f * sigmoid_stable(mix[nhc + lane] * scale[1] + base[nhc + lane]);
    }
    if (head) return;
    int nn = nhc * nhc;
    int rr = lane / nhc, cc = lane % nhc;
    int rb = rr * nhc; /* first lane of my row */
    int o = 2 * nhc;
    float v = lane < nn ? mix[o + lane] * scale[2] + base[o + lane] : 0.f;
    float mx = -INFINITY;
    for (int k = 0; k < nhc; k++) { float w = __shfl_sync(0xffffffffu, v, (rb + k) & 31); if (w > mx) mx = w; }
    float e = expf(v - mx);
    float sum = 0.f;
    for (int k = 0; k < nhc; k++) sum += __shfl_sync(0xffffffffu, e, (rb + k) & 31);
    float c = e / sum + hc_eps;
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            float s2 = 0.f;
            for (int k = 0; k < nhc; k++) s2 += __shfl_sync(0xffffffffu, c, (rb + k) & 31);
            c /= (s2 + hc_eps);
        }
        float s3 = 0.f;
        for (int k = 0; k < nhc; k++) s3 += __shfl_sync(0xffffffffu, c, (k * nhc + cc) & 31);
        c /= (s3 + hc_eps);
    }
    if (lane < nn) comb_out[t * nn + lane] = c;
}

/* one warp: token t's mixes from the splits' partial dots (their squares' sum sets the RMS),
 * then its split (hc_split_warp: Sinkhorn with one lane per matrix entry, sums in the CPU's
 * sequential order); mix and wpre in shared memory */
__device__ __forceinline__ void hc_mix_split_warp(int t, int hcdim, int nhc, int nmix, const float *partial,
                                                  const double *psq, const float *scale, const float *base, int iters,
                                                  float hc_eps, float rms_eps, int head, int lane, float *mix,
                                                  float *wpre, float *post_out, float *comb_out) {
    double ss = 0.0;
    for (int sp = 0; sp < HC_SPLIT; sp++) ss += psq[t * HC_SPLIT + sp];
    float r = (float)(1.0 / sqrt(ss / hcdim + (double)rms_eps));
    if (lane < nmix) {
        float a = 0.f;
        for (int sp = 0; sp < HC_SPLIT; sp++) a += partial[((int64_t)t * HC_SPLIT + sp) * HC_MAXMIX + lane];
        mix[lane] = a * r;
    }
    __syncwarp();
    hc_split_warp(mix, scale, base, nhc, iters, hc_eps, head, lane, t, wpre, post_out, comb_out);
}

__global__ void k_hc_pre_finish(const float *X, int D, int nhc, int nmix, const float *partial, const double *psq,
                                const float *scale, const float *base, const float *norm_w, int iters,
                                float hc_eps, float rms_eps, int head, float *xout, float *post_out, float *comb_out) {
    cu_pdl_enter();
    int t = blockIdx.x;
    int hcdim = D * nhc;
    __shared__ float mix[HC_MAXMIX], wpre[8];
    __shared__ double shd[33];
    int lane = threadIdx.x & 31;
    if (threadIdx.x < 32)   /* warp 0: the mixes, then the split */
        hc_mix_split_warp(t, hcdim, nhc, nmix, partial, psq, scale, base, iters, hc_eps, rms_eps, head, lane, mix, wpre,
                          post_out, comb_out);
    __syncthreads();
    const float *x = X + (int64_t)t * hcdim;
    float *y = xout + (int64_t)t * D;
    double ss = 0.0;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float u = 0.f;
        for (int i = 0; i < nhc; i++) u += wpre[i] * x[(int64_t)i * D + d];
        y[d] = u;
        ss += (double)u * (double)u;
    }
    if (!norm_w) return;
    ss = block_sum_d(ss, shd);
    float r = (float)(1.0 / sqrt(ss / D + (double)rms_eps));
    for (int d = threadIdx.x; d < D; d += blockDim.x) y[d] = y[d] * r * norm_w[d];
}

/* k_hc_pre_finish in two launches (the default where nhc <= 4 and D <= 256 HCF_FPT;
 * MINKE_CUDA_HC_FIN=0 keeps it): k_hc_pre_finish spends most of a block's life in warp 0's
 * mixes and Sinkhorn split (~40 dependent rounds) with seven warps waiting, then reads the
 * streams one strided step at a time: 195 us a 4096-token launch of Flash at 29% of issue
 * slots and 1.9 TB/s (ncu, nineteenth session). Here k_hc_split_tok runs that warp's code for
 * 8 tokens a block (every token's chain at once), leaving the pre weights in the token's
 * first two psq slots (read by then), and k_hc_pre_apply is the weighted sum and RMSNorm with
 * every stream value requested first. The same expressions in the same order (thread j of
 * 256: d = j, j + 256, ...; block_sum_d): k_hc_pre_finish's bits (hc_check). */
#define HCF_FPT 16
__global__ void __launch_bounds__(256)
k_hc_split_tok(int T, int hcdim, int nhc, int nmix, const float *partial, double *psq, const float *scale,
               const float *base, int iters, float hc_eps, float rms_eps, int head, float *post_out, float *comb_out) {
    cu_pdl_enter();
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, t = blockIdx.x * 8 + w;
    __shared__ float mix[8][HC_MAXMIX], wpre[8][8];
    if (t >= T) return;
    hc_mix_split_warp(t, hcdim, nhc, nmix, partial, psq, scale, base, iters, hc_eps, rms_eps, head, lane, mix[w], wpre[w],
                      post_out, comb_out);
    __syncwarp();       /* every lane's psq reads done, wpre written */
    if (lane < nhc) ((float *)(psq + (int64_t)t * HC_SPLIT))[lane] = wpre[w][lane];
}
__global__ void __launch_bounds__(256, 2)
k_hc_pre_apply(const float *X, int D, int nhc, const double *psq, const float *norm_w, float rms_eps, float *xout) {
    const int t = blockIdx.x, tid = threadIdx.x;
    __shared__ double shd[33];
    float nw[HCF_FPT];
#pragma unroll
    for (int j = 0; j < HCF_FPT; j++) {
        const int d = tid + 256 * j;
        nw[j] = norm_w && d < D ? norm_w[d] : 0.f;      /* a weight: never written in a step */
    }
    cu_pdl_enter();
    const float *x = X + (int64_t)t * D * nhc;
    float xr[4][HCF_FPT], wp[4];
#pragma unroll
    for (int j = 0; j < HCF_FPT; j++) {
        const int d = tid + 256 * j;
#pragma unroll
        for (int i = 0; i < 4; i++) xr[i][j] = i < nhc && d < D ? x[(int64_t)i * D + d] : 0.f;
    }
#pragma unroll
    for (int i = 0; i < 4; i++) wp[i] = i < nhc ? ((const float *)(psq + (int64_t)t * HC_SPLIT))[i] : 0.f;
    float *y = xout + (int64_t)t * D;
    double ss = 0.0;
    float u[HCF_FPT];
#pragma unroll
    for (int j = 0; j < HCF_FPT; j++) {
        const int d = tid + 256 * j;
        u[j] = 0.f;
        if (d < D) {
            float v = 0.f;
#pragma unroll
            for (int i = 0; i < 4; i++)
                if (i < nhc) v += wp[i] * xr[i][j];
            u[j] = v;
            ss += (double)v * (double)v;
        }
    }
    if (!norm_w) {
#pragma unroll
        for (int j = 0; j < HCF_FPT; j++)
            if (tid + 256 * j < D) y[tid + 256 * j] = u[j];
        return;
    }
    ss = block_sum_d(ss, shd);
    float r = (float)(1.0 / sqrt(ss / D + (double)rms_eps));
#pragma unroll
    for (int j = 0; j < HCF_FPT; j++)
        if (tid + 256 * j < D) y[tid + 256 * j] = u[j] * r * nw[j];
}

/* MINKE_CUDA_HC_FIN=0 keeps k_hc_pre_finish (A/B); cu_hc_fin_set for the checks (-1: the environment) */
static int hc_fin = -1;
extern "C" void cu_hc_fin_set(int on) { hc_fin = on; }
static int hc_fin_on(void) {
    if (hc_fin < 0) { const char *e = getenv("MINKE_CUDA_HC_FIN"); hc_fin = e && *e ? atoi(e) != 0 : 1; }
    return hc_fin;
}

/* MINKE_CUDA_HC_MIXT: the unfused pre step's mixes HCT_NT tokens a block
 * (k_hc_mix_tiled; 1, the default, from HCT_NT tokens) or a block per token
 * (0): 275 instead of 613 us a 4096-token launch on the H200 (eighth session;
 * hc_check compares both bit for bit and times them).
 * cu_hc_mix_t_set for the checks (-1: the environment again). */
static int hc_mix_t = -1;
extern "C" void cu_hc_mix_t_set(int on) { hc_mix_t = on; }
static int hc_mix_t_on(void) {
    if (hc_mix_t < 0) { const char *e = getenv("MINKE_CUDA_HC_MIXT"); hc_mix_t = e && *e ? atoi(e) != 0 : 1; }
    return hc_mix_t;
}

/* the opt-in above 48 KB of dynamic shared memory, per device (a refusal: the per-token kernel) */
static int hct_smem_ok(size_t bytes) {
    static size_t granted[32], refused[32];
    const int dev = cu_cur_dev();
    if (bytes <= 48 * 1024 || bytes <= granted[dev]) return 1;
    if (refused[dev] && bytes >= refused[dev]) return 0;
    /* all of L1 as shared memory: two blocks an SM (Flash: 113 KB each with the fn rows) */
    cudaFuncSetAttribute(k_hc_mix_tiled<true, true>, cudaFuncAttributePreferredSharedMemoryCarveout,
                         (int)cudaSharedmemCarveoutMaxShared);
    if (cudaFuncSetAttribute(k_hc_mix_tiled<true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) !=
            cudaSuccess ||
        cudaFuncSetAttribute(k_hc_mix_tiled<true, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) !=
            cudaSuccess ||
        cudaFuncSetAttribute(k_hc_mix_tiled<false, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) !=
            cudaSuccess) {
        cudaGetLastError();
        refused[dev] = bytes;
        return 0;
    }
    granted[dev] = bytes;
    return 1;
}

/* two blocks of `bytes` dynamic shared memory (and the kernel's 1 KB static, 1 KB reserved
 * each) fit one SM of this device */
static int hct_two_fit(size_t bytes) {
    static int per_sm[32];
    const int dev = cu_cur_dev();
    if (!per_sm[dev]) {
        int v = 0;
        cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
        per_sm[dev] = v > 0 ? v : -1;
    }
    return per_sm[dev] > 0 && 2 * (bytes + 2048) <= (size_t)per_sm[dev];
}

/* cu_hc_pre's first kernel: partial and psq of T tokens, by k_hc_mix_tiled
 * when tiled is set and the shape fits (16-byte rows for cp.async, int fn
 * offsets, the tile in HCT_SMEM_MAX; f16 fn 16-byte aligned for its copies), else a block per
 * token; the same bits.
 * Returns 1 when it ran the tiled kernel (hc_check calls it directly). */
extern "C" int cu_hc_mix_partials(const float *X, int T, int hcdim, const void *fn, int fntype, int nmix,
                                  float *partial, double *psq, int tiled, cudaStream_t st) {
    const int chunk = hcdim / HC_SPLIT;
    const bool h2 = fntype == CU_TYPE_F16 && chunk % 64 == 0;
    const size_t tile = sizeof(float) * HCT_NT * (size_t)chunk, fsb = (size_t)2 * HCT_WM * HCT_MR * chunk;
    const bool shape = tiled && T > 0 && nmix >= 1 && nmix <= HC_MAXMIX && hcdim % (4 * HC_SPLIT) == 0 && chunk > 0 &&
                       ((uintptr_t)X & 15) == 0 && (int64_t)nmix * hcdim <= INT32_MAX;
    /* the fn rows beside the tile where they fit (and can be copied: 16-byte aligned) and two
     * blocks still fit an SM (not so on sm_80's 164 KB: one block there would lose more) */
    const bool fs = shape && h2 && !((uintptr_t)fn & 15) && tile + fsb <= HCT_SMEM_MAX && hct_two_fit(tile + fsb) &&
                    hct_smem_ok(tile + fsb);
    const size_t smem = tile + (fs ? fsb : 0);
    if (shape && smem <= HCT_SMEM_MAX && hct_smem_ok(smem)) {
        const dim3 grid(HC_SPLIT, (T + HCT_NT - 1) / HCT_NT, (nmix + HCT_WM * HCT_MR - 1) / (HCT_WM * HCT_MR));
        if (fs)
            cu_launch(k_hc_mix_tiled<true, true>, grid, HCT_THREADS, smem, st, X, T, hcdim, fn, fntype, nmix, partial, psq);
        else if (h2)
            cu_launch(k_hc_mix_tiled<true, false>, grid, HCT_THREADS, smem, st, X, T, hcdim, fn, fntype, nmix, partial, psq);
        else
            cu_launch(k_hc_mix_tiled<false, false>, grid, HCT_THREADS, smem, st, X, T, hcdim, fn, fntype, nmix, partial, psq);
        return 1;
    }
    cu_launch(k_hc_mix_partial, dim3(HC_SPLIT, T), 256, 0, st, X, hcdim, fn, fntype, nmix, partial, psq);
    return 0;
}

/* ---- The unfused pre step's mixes on the tensor cores (k_hc_mix_tc; prefill batches) ----
 * Why: k_hc_mix_tiled issues ~2.6 warp instructions an element of X (24 FMAs, the f16
 * conversions, the double squares): 250 us a 4096-token launch of Flash, bound by issue at
 * 1.1 TB/s (ncu, nineteenth session), where its 269 MB need ~75 us. Here a token's nmix dots
 * are a row of m16n8k8 TF32 products: fn's f16 values are exact in TF32, and X goes in as
 * two TF32 pieces, xh = tf32(x), xl = tf32(x - xh) (~22 bits of x), so fn . x is
 * fn . xh + fn . xl with every product exact. The tensor cores add a product's terms with
 * truncation, so each k8 sub-step's two products start from zero and their sum joins the
 * running f32 sum by an ordinary (rounded) add: within 1.3e-7 of the double dot relative to
 * sum |fn x| (hc_check), not k_hc_mix_tiled's bits (the first form, one accumulator over the
 * whole split, was ~8x further off: an HC step's x 1e-5 of the reference). psq stays in
 * double: a lane's squares in order, then its row's four lanes by two butterflies.
 * Block: HCTC_WARPS warps of 16 tokens each, one split. A 32-element step of a lane's row is
 * two adjacent float4 (elements 8 t .. 8 t + 7, t = lane % 4: 128 bytes a row a warp) and the
 * same eight halves of each fn row (16 bytes); its four k8 sub-steps s take the permutation
 * logical k (t, t + 4) <-> physical (8 t + 2 s, 8 t + 2 s + 1), the same for A and B, so the
 * dot is unchanged. HCTC_D steps are loaded before they are used (X from HBM, fn from L2).
 * Tokens past T load row T - 1 and are not stored. */
#define HCTC_WARPS 4
#define HCTC_TOK (16 * HCTC_WARPS)
#define HCTC_D 2            /* 32-element steps in flight a lane */
#define HCTC_MIN 64         /* the fewest tokens it runs for (cu_hc_pre) */

__device__ __forceinline__ uint32_t hc_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ void hc_mma_tf32(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}
/* the two TF32 pieces of x */
__device__ __forceinline__ void hc_tf32_split(float x, uint32_t &hi, uint32_t &lo) {
    hi = hc_tf32(x);
    lo = hc_tf32(x - __uint_as_float(hi));
}
__device__ __forceinline__ uint32_t hc_h2f_bits(uint32_t h) {
    return __float_as_uint(__half2float(__ushort_as_half((unsigned short)h)));
}

template <int NT>
__global__ void __launch_bounds__(HCTC_WARPS * 32)
k_hc_mix_tc(const float *X, int T, int hcdim, const uint16_t *fn, int nmix, float *partial, double *psq) {
    cu_pdl_enter();
    const int sp = blockIdx.x, chunk = hcdim / HC_SPLIT;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    const int ta = blockIdx.y * HCTC_TOK + w * 16 + g, tb = ta + 8;
    const int64_t col = (int64_t)sp * chunk + 8 * tq;
    const float *xa = X + (int64_t)(ta < T ? ta : T - 1) * hcdim + col;
    const float *xb = X + (int64_t)(tb < T ? tb : T - 1) * hcdim + col;
    const uint16_t *fr[NT];
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int m = n * 8 + g;
        fr[n] = fn + (int64_t)(m < nmix ? m : nmix - 1) * hcdim + col;
    }
    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    double sa = 0.0, sb = 0.0;
    const int nst = chunk / 32;
    for (int s0 = 0; s0 < nst; s0 += HCTC_D) {
        float4 va[HCTC_D][2], vb[HCTC_D][2];
        uint4 vf[HCTC_D][NT];
#pragma unroll
        for (int j = 0; j < HCTC_D; j++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                va[j][h] = __ldg((const float4 *)(xa + 32 * (s0 + j) + 4 * h));
                vb[j][h] = __ldg((const float4 *)(xb + 32 * (s0 + j) + 4 * h));
            }
#pragma unroll
            for (int n = 0; n < NT; n++) vf[j][n] = __ldg((const uint4 *)(fr[n] + 32 * (s0 + j)));
        }
#pragma unroll
        for (int j = 0; j < HCTC_D; j++) {
            const float ea[8] = {va[j][0].x, va[j][0].y, va[j][0].z, va[j][0].w, va[j][1].x, va[j][1].y, va[j][1].z, va[j][1].w};
            const float eb[8] = {vb[j][0].x, vb[j][0].y, vb[j][0].z, vb[j][0].w, vb[j][1].x, vb[j][1].y, vb[j][1].z, vb[j][1].w};
#pragma unroll
            for (int e = 0; e < 8; e++) {
                sa = __fma_rn((double)ea[e], (double)ea[e], sa);
                sb = __fma_rn((double)eb[e], (double)eb[e], sb);
            }
#pragma unroll
            for (int s = 0; s < 4; s++) {
                uint32_t ah0, al0, ah1, al1, ah2, al2, ah3, al3;
                hc_tf32_split(ea[2 * s], ah0, al0);        /* row g,     logical k t     */
                hc_tf32_split(eb[2 * s], ah1, al1);        /* row g + 8, logical k t     */
                hc_tf32_split(ea[2 * s + 1], ah2, al2);    /* row g,     logical k t + 4 */
                hc_tf32_split(eb[2 * s + 1], ah3, al3);    /* row g + 8, logical k t + 4 */
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    const uint32_t h2 = s == 0 ? vf[j][n].x : s == 1 ? vf[j][n].y : s == 2 ? vf[j][n].z : vf[j][n].w;
                    const uint32_t b0 = hc_h2f_bits(h2 & 0xffffu), b1 = hc_h2f_bits(h2 >> 16);
                    float c[4] = {0.f, 0.f, 0.f, 0.f};
                    hc_mma_tf32(c, ah0, ah1, ah2, ah3, b0, b1);
                    hc_mma_tf32(c, al0, al1, al2, al3, b0, b1);
#pragma unroll
                    for (int q = 0; q < 4; q++) acc[n][q] += c[q];
                }
            }
        }
    }
    /* a row's four lanes: the same sum in each (IEEE addition commutes) */
    sa += __shfl_xor_sync(0xffffffffu, sa, 1);
    sb += __shfl_xor_sync(0xffffffffu, sb, 1);
    sa += __shfl_xor_sync(0xffffffffu, sa, 2);
    sb += __shfl_xor_sync(0xffffffffu, sb, 2);
    if (tq == 0) {
        if (ta < T) psq[(int64_t)ta * HC_SPLIT + sp] = sa;
        if (tb < T) psq[(int64_t)tb * HC_SPLIT + sp] = sb;
    }
    /* C: rows g / g + 8, mixes n * 8 + 2 t, + 1 */
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int m = n * 8 + 2 * tq;
        float *pa = partial + ((int64_t)ta * HC_SPLIT + sp) * HC_MAXMIX, *pb = partial + ((int64_t)tb * HC_SPLIT + sp) * HC_MAXMIX;
        if (ta < T) {
            if (m < nmix) pa[m] = acc[n][0];
            if (m + 1 < nmix) pa[m + 1] = acc[n][1];
        }
        if (tb < T) {
            if (m < nmix) pb[m] = acc[n][2];
            if (m + 1 < nmix) pb[m + 1] = acc[n][3];
        }
    }
}

/* MINKE_CUDA_HC_TC: 0 keeps k_hc_mix_tiled for batches (default 1: k_hc_mix_tc from
 * HCTC_MIN tokens where the shape fits); cu_hc_mix_tc_set for the checks (-1: the
 * environment again) */
static int hc_mix_tc = -1;
extern "C" void cu_hc_mix_tc_set(int on) { hc_mix_tc = on; }
static int hc_mix_tc_on(void) {
    if (hc_mix_tc < 0) { const char *e = getenv("MINKE_CUDA_HC_TC"); hc_mix_tc = e && *e ? atoi(e) != 0 : 1; }
    return hc_mix_tc;
}

/* partial and psq of T tokens by k_hc_mix_tc; 0 (nothing launched) where the shape does not
 * fit: f16 fn and X 16-byte aligned, chunk a multiple of 32 HCTC_D, nmix <= 32
 * (the backend needs sm_80, which has the TF32 mma) */
extern "C" int cu_hc_mix_tc(const float *X, int T, int hcdim, const void *fn, int fntype, int nmix, float *partial,
                            double *psq, cudaStream_t st) {
    const int chunk = hcdim / HC_SPLIT;
    if (T <= 0 || fntype != CU_TYPE_F16 || nmix < 1 || nmix > HC_MAXMIX || hcdim % HC_SPLIT || chunk % (32 * HCTC_D) ||
        ((uintptr_t)X & 15) || ((uintptr_t)fn & 15))
        return 0;
    const dim3 grid(HC_SPLIT, (T + HCTC_TOK - 1) / HCTC_TOK);
    const uint16_t *f = (const uint16_t *)fn;
    switch ((nmix + 7) / 8) {
    case 1: cu_launch(k_hc_mix_tc<1>, grid, HCTC_WARPS * 32, 0, st, X, T, hcdim, f, nmix, partial, psq); break;
    case 2: cu_launch(k_hc_mix_tc<2>, grid, HCTC_WARPS * 32, 0, st, X, T, hcdim, f, nmix, partial, psq); break;
    case 3: cu_launch(k_hc_mix_tc<3>, grid, HCTC_WARPS * 32, 0, st, X, T, hcdim, f, nmix, partial, psq); break;
    default: cu_launch(k_hc_mix_tc<4>, grid, HCTC_WARPS * 32, 0, st, X, T, hcdim, f, nmix, partial, psq); break;
    }
    return 1;
}

void cu_hc_pre(const float *X, int T, int D, int nhc, const void *fn, int fntype, int nmix,
               const float *scale, const float *base, const float *norm_w, int iters, float hc_eps,
               float rms_eps, int head, float *partial, double *psq, float *x, float *post, float *comb,
               cudaStream_t st) {
    if (!(T >= HCTC_MIN && hc_mix_tc_on() && cu_hc_mix_tc(X, T, D * nhc, fn, fntype, nmix, partial, psq, st)))
        cu_hc_mix_partials(X, T, D * nhc, fn, fntype, nmix, partial, psq, T >= HCT_NT && hc_mix_t_on(), st);
    if (hc_fin_on() && nhc <= 4 && D <= 256 * HCF_FPT) {
        cu_launch(k_hc_split_tok, (T + 7) / 8, 256, 0, st, T, D * nhc, nhc, nmix, (const float *)partial, psq, scale,
                  base, iters, hc_eps, rms_eps, head, post, comb);
        cu_launch(k_hc_pre_apply, T, 256, 0, st, X, D, nhc, (const double *)psq, norm_w, rms_eps, x);
        return;
    }
    cu_launch(k_hc_pre_finish, T, 256, 0, st, X, D, nhc, nmix, partial, psq, scale, base, norm_w, iters, hc_eps,
              rms_eps, head, x, post, comb);
}

/* One kernel per hyper-connection pre step (MINKE_CUDA_HC_FUSED, default on
 * for batches below 32 tokens), optionally with the previous sub-layer's post
 * step folded in, and bit-identical to cu_hc_post + cu_hc_pre: the same 16
 * splits of the input, the same per-lane and per-split summation orders,
 * the same finish. What changes is the schedule: a block of one warp per mix
 * row (24 warps instead of 8 walking 3 rows each in turn, so all rows' loads
 * are in flight at once), the split's input staged in shared memory, and the
 * finish done by the last block of a token to complete (ticket counter, reset
 * by that block for the next call) instead of a second launch. With f1 set
 * each block first computes its split of the post step (k_hc_post's
 * arithmetic, same order) into Xout and mixes that. post/comb are read by
 * every block before the last block overwrites them. */
__global__ void __launch_bounds__(1024)
k_hc_pre_fused(const float *X, const float *f1, const float *f2, const float *post_in, const float *comb_in,
               float *Xout, int D, int nhc, const void *fn, int fntype, int nmix, const float *scale,
               const float *base, const float *norm_w, int iters, float hc_eps, float rms_eps, int head,
               float *partial, double *psq, int *cnt, float *xout, float *post_out, float *comb_out) {
    cu_pdl_enter();
    extern __shared__ float xs[];      /* this split's input (chunk floats) */
    int t = blockIdx.y, sp = blockIdx.x;
    int hcdim = D * nhc, chunk = hcdim / HC_SPLIT;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __shared__ double shd[33];
    __shared__ float mix[HC_MAXMIX], wpre[8];
    __shared__ int is_last;
    int64_t off = (int64_t)t * hcdim + (int64_t)sp * chunk;
    if (f1) {
        for (int k = threadIdx.x; k < chunk; k += blockDim.x) {
            int64_t i = (int64_t)sp * chunk + k;
            int c = (int)(i / D), d = (int)(i % D);
            float f = f1[(int64_t)t * D + d];
            if (f2) f += f2[(int64_t)t * D + d];
            const float *xr = X + (int64_t)t * hcdim;
            float v = post_in[t * nhc + c] * f;
            for (int r = 0; r < nhc; r++) v += comb_in[t * nhc * nhc + r * nhc + c] * xr[(int64_t)r * D + d];
            Xout[off + k] = v;
            xs[k] = v;
        }
    } else {
        for (int k = threadIdx.x; k < chunk; k += blockDim.x) xs[k] = X[off + k];
    }
    __syncthreads();
    /* sum of squares: threads 0..255 as k_hc_mix_partial's block of 256 (the others add 0) */
    double ss = 0.0;
    if (threadIdx.x < 256)
        for (int k = threadIdx.x; k < chunk; k += 256) ss += (double)xs[k] * (double)xs[k];
    ss = block_sum_d(ss, shd);
    if (threadIdx.x == 0) psq[t * HC_SPLIT + sp] = ss;
    for (int m = w; m < nmix; m += blockDim.x >> 5) {
        float acc = 0.f;
        int64_t wb = (int64_t)m * hcdim + (int64_t)sp * chunk;
        if (fntype == CU_TYPE_F16 && (chunk % 64) == 0) {
            const __half2 *h = (const __half2 *)((const uint16_t *)fn + wb);
#pragma unroll 4
            for (int i = lane; i < chunk / 2; i += 32) {
                float2 fv = __half22float2(h[i]);
                acc += fv.x * xs[2 * i] + fv.y * xs[2 * i + 1];
            }
        } else {
#pragma unroll 4
            for (int i = lane; i < chunk; i += 32) acc += cu_wload(fn, fntype, wb + i) * xs[i];
        }
        acc = warp_sum(acc);
        if (lane == 0) partial[((int64_t)t * HC_SPLIT + sp) * HC_MAXMIX + m] = acc;
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        int ticket = atomicAdd(&cnt[t], 1);
        is_last = ticket == HC_SPLIT - 1;
        if (is_last) cnt[t] = 0;
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    /* the last block of token t: k_hc_pre_finish (L2 reads of what the other blocks wrote) */
    if (threadIdx.x < 32) {
        double sq = 0.0;
        for (int k = 0; k < HC_SPLIT; k++) sq += __ldcg(&psq[t * HC_SPLIT + k]);
        float r = (float)(1.0 / sqrt(sq / hcdim + (double)rms_eps));
        if (lane < nmix) {
            float a = 0.f;
            for (int k = 0; k < HC_SPLIT; k++) a += __ldcg(&partial[((int64_t)t * HC_SPLIT + k) * HC_MAXMIX + lane]);
            mix[lane] = a * r;
        }
        __syncwarp();
        hc_split_warp(mix, scale, base, nhc, iters, hc_eps, head, lane, t, wpre, post_out, comb_out);
    }
    __syncthreads();
    const float *x = (f1 ? Xout : X) + (int64_t)t * hcdim;
    float *y = xout + (int64_t)t * D;
    /* threads 0..255 as k_hc_pre_finish's block of 256 */
    double s2 = 0.0;
    if (threadIdx.x < 256)
        for (int d = threadIdx.x; d < D; d += 256) {
            float u = 0.f;
            for (int k = 0; k < nhc; k++) u += wpre[k] * __ldcg(&x[(int64_t)k * D + d]);
            y[d] = u;
            s2 += (double)u * (double)u;
        }
    if (!norm_w) return;
    s2 = block_sum_d(s2, shd);
    float r = (float)(1.0 / sqrt(s2 / D + (double)rms_eps));
    if (threadIdx.x < 256)
        for (int d = threadIdx.x; d < D; d += 256) y[d] = y[d] * r * norm_w[d];
}

/* ------------------------------------------------------------------ */
/* The fused pre step, v2 schedule (default): the same arithmetic as
 * k_hc_pre_fused, element by element and in the same summation orders, with
 * the ~30 us serial chain of v1 cut down:
 *  - the block's mix weights (16 half2 per lane), norm_w (4 floats per
 *    thread), scale and base are loaded before the PDL wait: they are model
 *    weights, never written by the previous kernel, so their DRAM latency
 *    overlaps the previous kernel instead of following it;
 *  - one input element per thread (1024 threads, chunk <= 1024) with all of
 *    its loads issued together (v1's loops could not hoist loads above the
 *    previous iteration's aliasing store);
 *  - the sum of squares on warps 24..31 (as v1's threads 0..255: the same
 *    per-thread order and the same 8-warp tree) with a named barrier, while
 *    warps 0..nmix-1 do the mix dots;
 *  - one fence + ticket by thread 0 (the cooperative-groups grid-sync
 *    pattern) instead of a fence on every thread;
 *  - in the last block, warp 31 computes the mixes and the pre weights,
 *    publishes them (bar.arrive) and then runs Sinkhorn alone (~1.6 us of
 *    shuffles and divisions, the longest path), while the other warps load
 *    the stream rows (64 KB from L2) and do the weighted sum; the RMS double sum is taken by threads 0..255 over
 *    the staged sums in v1's order (thread j: d = j, j+256, ...) and the
 *    8-warp tree; normalised outputs are written from registers.
 * Shapes: nhc <= 4, nmix <= 32, chunk = D*nhc/16 <= 1024, D <= 4096 (Flash:
 * D 4096, nhc 4, nmix 24 or 4); others use v1. */

#define HC2_THREADS 1024
#define HC2_DPT 4          /* stream elements per thread in the finish: D <= 4096 */
#define HC2_MAXHC 4
#define HC2_NPL 16         /* half2 weights per lane: chunk <= 1024 */
#define HC2_SPLIT_WARP 31
#define HC2_SQ_WARP0 24    /* warps 24..31: the sum of squares */

__device__ __forceinline__ void hc_bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void hc_bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}

/* hc_split_warp's Sinkhorn part, statement for statement (comb_out only). */
__device__ __forceinline__ void hc_sinkhorn_warp(const float *mix, const float *scale, const float *base, int nhc,
                                                 int iters, float hc_eps, int lane, int t, float *comb_out) {
    int nn = nhc * nhc;
    int rr = lane / nhc, cc = lane % nhc;
    int rb = rr * nhc;
    int o = 2 * nhc;
    float v = lane < nn ? mix[o + lane] * scale[2] + base[o + lane] : 0.f;
    float mx = -INFINITY;
    for (int k = 0; k < nhc; k++) { float w = __shfl_sync(0xffffffffu, v, (rb + k) & 31); if (w > mx) mx = w; }
    float e = expf(v - mx);
    float sum = 0.f;
    for (int k = 0; k < nhc; k++) sum += __shfl_sync(0xffffffffu, e, (rb + k) & 31);
    float c = e / sum + hc_eps;
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            float s2 = 0.f;
            for (int k = 0; k < nhc; k++) s2 += __shfl_sync(0xffffffffu, c, (rb + k) & 31);
            c /= (s2 + hc_eps);
        }
        float s3 = 0.f;
        for (int k = 0; k < nhc; k++) s3 += __shfl_sync(0xffffffffu, c, (k * nhc + cc) & 31);
        c /= (s3 + hc_eps);
    }
    if (lane < nn) comb_out[t * nn + lane] = c;
}

__device__ __forceinline__ void hc2_load_rows(float (&xv)[HC2_DPT][HC2_MAXHC], const float *xin, int tid, int D,
                                              int nhc) {
#pragma unroll
    for (int i = 0; i < HC2_DPT; i++) {
        int d = tid + HC2_THREADS * i;
#pragma unroll
        for (int k = 0; k < HC2_MAXHC; k++) xv[i][k] = d < D && k < nhc ? __ldcg(&xin[(int64_t)k * D + d]) : 0.f;
    }
}

__global__ void __launch_bounds__(HC2_THREADS, 1)
k_hc_pre_fused2(const float *X, const float *f1, const float *f2, const float *post_in, const float *comb_in,
                float *Xout, int D, int nhc, const void *fn, int fntype, int nmix, const float *scale,
                const float *base, const float *norm_w, int iters, float hc_eps, float rms_eps, int head,
                float *partial, double *psq, int *cnt, float *xout, float *post_out, float *comb_out) {
    extern __shared__ float hc2_smem[];
    __shared__ double shd[8];
    __shared__ float s_scale[4], s_base[HC_MAXMIX], s_mix[HC_MAXMIX], s_wpre[HC2_MAXHC], s_r;
    __shared__ int is_last;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int t = blockIdx.y, sp = blockIdx.x;
    const int hcdim = D * nhc, chunk = hcdim / HC_SPLIT;
    float *xs = hc2_smem;          /* this split's input: chunk floats */
    float *us = hc2_smem + chunk;  /* the last block's weighted sums: D floats */
    const int npl = chunk / 64;
    const bool f16 = fntype == CU_TYPE_F16 && (chunk % 64) == 0;

    /* weights, before the wait (nothing in the step writes them) */
    __half2 hw[HC2_NPL];
#pragma unroll
    for (int j = 0; j < HC2_NPL; j++) hw[j] = __floats2half2_rn(0.f, 0.f);
    if (f16 && w < nmix) {
        const __half2 *h = (const __half2 *)((const uint16_t *)fn + (int64_t)w * hcdim + (int64_t)sp * chunk);
#pragma unroll
        for (int j = 0; j < HC2_NPL; j++)
            if (j < npl) hw[j] = h[lane + 32 * j];
    }
    float nwv[HC2_DPT];
#pragma unroll
    for (int i = 0; i < HC2_DPT; i++) {
        int d = tid + HC2_THREADS * i;
        nwv[i] = norm_w && d < D ? norm_w[d] : 0.f;
    }
    if (tid < (head ? 1 : 3)) s_scale[tid] = scale[tid];
    if (tid < nmix) s_base[tid] = base[tid];
    cu_pdl_enter();

    /* this split of the input (with the pending post step: k_hc_post's arithmetic) */
    const float *Xt = X + (int64_t)t * hcdim;
    int64_t off = (int64_t)t * hcdim + (int64_t)sp * chunk;
    for (int k = tid; k < chunk; k += HC2_THREADS) {
        float v;
        if (f1) {
            int i = sp * chunk + k;
            int c = i / D, d = i - c * D;
            float cv[HC2_MAXHC], xv[HC2_MAXHC];
#pragma unroll
            for (int r = 0; r < HC2_MAXHC; r++)
                if (r < nhc) { cv[r] = comb_in[t * nhc * nhc + r * nhc + c]; xv[r] = Xt[(int64_t)r * D + d]; }
            float pc = post_in[t * nhc + c];
            float f = f1[(int64_t)t * D + d];
            if (f2) f += f2[(int64_t)t * D + d];
            v = pc * f;
#pragma unroll
            for (int r = 0; r < HC2_MAXHC; r++)
                if (r < nhc) v += cv[r] * xv[r];
            Xout[off + k] = v;
        } else {
            v = X[off + k];
        }
        xs[k] = v;
    }
    __syncthreads();

    /* sum of squares: warps 24..31 as a block of 256 (v1's threads 0..255, the
     * other warps of v1's block adding exact zeros to the tree) */
    if (w >= HC2_SQ_WARP0) {
        int j = tid - HC2_SQ_WARP0 * 32;
        double ss = 0.0;
        for (int k = j; k < chunk; k += 256) ss += (double)xs[k] * (double)xs[k];
        ss = warp_sum_d(ss);
        if (lane == 0) shd[w - HC2_SQ_WARP0] = ss;
        hc_bar_sync(1, 256);
        if (w == HC2_SQ_WARP0) {
            double tt = lane < 8 ? shd[lane] : 0.0;
            tt = warp_sum_d(tt);
            if (lane == 0) psq[t * HC_SPLIT + sp] = tt;
        }
    }
    /* mix dots: one warp per row, v1's lane order */
    if (w < nmix) {
        float acc = 0.f;
        if (f16) {
#pragma unroll
            for (int j = 0; j < HC2_NPL; j++)
                if (j < npl) {
                    int i = lane + 32 * j;
                    float2 fv = __half22float2(hw[j]);
                    acc += fv.x * xs[2 * i] + fv.y * xs[2 * i + 1];
                }
        } else {
            int64_t wb = (int64_t)w * hcdim + (int64_t)sp * chunk;
            for (int i = lane; i < chunk; i += 32) acc += cu_wload(fn, fntype, wb + i) * xs[i];
        }
        acc = warp_sum(acc);
        if (lane == 0) partial[((int64_t)t * HC_SPLIT + sp) * HC_MAXMIX + w] = acc;
    }

    /* ticket: the last block of token t does the finish */
    __syncthreads();
    if (tid == 0) {
        __threadfence();
        int ticket = atomicAdd(&cnt[t], 1);
        int last = ticket == HC_SPLIT - 1;
        if (last) { cnt[t] = 0; __threadfence(); }
        is_last = last;
    }
    __syncthreads();
    if (!is_last) return;

    /* this thread's stream elements (L2: other blocks wrote Xout): warp 31
     * loads them after its partials; the other warps only once the pre
     * weights are out, so that warp 31's loads, which start Sinkhorn (the
     * longest path), do not queue behind these 64 KB */
    const float *xin = (f1 ? Xout : X) + (int64_t)t * hcdim;
    float xv[HC2_DPT][HC2_MAXHC];
    if (w == HC2_SPLIT_WARP) {
        /* all 16 + 16 loads in flight before the double math */
        float pv[HC_SPLIT];
        double qv[HC_SPLIT];
        int ml = lane < nmix ? lane : 0;
#pragma unroll
        for (int k = 0; k < HC_SPLIT; k++) {
            pv[k] = __ldcg(&partial[((int64_t)t * HC_SPLIT + k) * HC_MAXMIX + ml]);
            qv[k] = __ldcg(&psq[t * HC_SPLIT + k]);
        }
        hc2_load_rows(xv, xin, tid, D, nhc);
        double sq = 0.0;
#pragma unroll
        for (int k = 0; k < HC_SPLIT; k++) sq += qv[k];
        float r = (float)(1.0 / sqrt(sq / hcdim + (double)rms_eps));
        float a = 0.f;
#pragma unroll
        for (int k = 0; k < HC_SPLIT; k++) a += pv[k];
        if (lane < nmix) s_mix[lane] = a * r;
        __syncwarp();
        if (lane < nhc) s_wpre[lane] = sigmoid_stable(s_mix[lane] * s_scale[0] + s_base[lane]) + hc_eps;
        __syncwarp();
        hc_bar_arrive(2, HC2_THREADS);
    } else {
        hc_bar_sync(2, HC2_THREADS);
        hc2_load_rows(xv, xin, tid, D, nhc);
    }
    float wp[HC2_MAXHC];
#pragma unroll
    for (int k = 0; k < HC2_MAXHC; k++) wp[k] = k < nhc ? s_wpre[k] : 0.f;
    float u[HC2_DPT];
#pragma unroll
    for (int i = 0; i < HC2_DPT; i++) {
        float uu = 0.f;
#pragma unroll
        for (int k = 0; k < HC2_MAXHC; k++)
            if (k < nhc) uu += wp[k] * xv[i][k];
        u[i] = uu;
    }
    float *y = xout + (int64_t)t * D;
    if (!norm_w) {
#pragma unroll
        for (int i = 0; i < HC2_DPT; i++) {
            int d = tid + HC2_THREADS * i;
            if (d < D) y[d] = u[i];
        }
    } else {
#pragma unroll
        for (int i = 0; i < HC2_DPT; i++) {
            int d = tid + HC2_THREADS * i;
            if (d < D) us[d] = u[i];
        }
    }

    if (w == HC2_SPLIT_WARP) {
        if (norm_w) hc_bar_arrive(3, HC2_THREADS);
        if (!head) {
            if (lane < nhc)
                post_out[t * nhc + lane] = 2.0f * sigmoid_stable(s_mix[nhc + lane] * s_scale[1] + s_base[nhc + lane]);
            hc_sinkhorn_warp(s_mix, s_scale, s_base, nhc, iters, hc_eps, lane, t, comb_out);
        }
        if (!norm_w) return;
        hc_bar_sync(6, 64);     /* s_r from warp 0 */
    } else {
        if (!norm_w) return;
        if (w < 8) {
            /* v1's double sum: thread j of 256 over d = j, j+256, ..., then the 8-warp tree */
            hc_bar_sync(3, HC2_THREADS);
            double s2 = 0.0;
            for (int d = tid; d < D; d += 256) s2 += (double)us[d] * (double)us[d];
            s2 = warp_sum_d(s2);
            if (lane == 0) shd[w] = s2;
            hc_bar_sync(4, 256);
            if (w == 0) {
                double tt = lane < 8 ? shd[lane] : 0.0;
                tt = warp_sum_d(tt);
                if (lane == 0) s_r = (float)(1.0 / sqrt(tt / D + (double)rms_eps));
                __syncwarp();
                hc_bar_arrive(5, HC2_THREADS - 32);
                hc_bar_arrive(6, 64);
            } else {
                hc_bar_sync(5, HC2_THREADS - 32);
            }
        } else {
            hc_bar_arrive(3, HC2_THREADS);
            hc_bar_sync(5, HC2_THREADS - 32);
        }
    }
    float r = s_r;
#pragma unroll
    for (int i = 0; i < HC2_DPT; i++) {
        int d = tid + HC2_THREADS * i;
        if (d < D) y[d] = u[i] * r * nwv[i];
    }
}

/* ------------------------------------------------------------------ */
/* The fused pre step, v3 schedule (default where the shape fits): v1's
 * arithmetic again, element by element and in the same summation orders
 * (bit-identical), but spread over 16 x G blocks per token instead of 16,
 * so that the step is a few latencies instead of v2's 16 SMs pulling
 * 0.8 MB of weights and a long serial tail:
 *  - block (g, sp) takes v1's K-split sp (chunk = D*nhc/16 inputs) and the
 *    mix rows g*rpb .. g*rpb+rpb-1, one warp per row in v1's lane order;
 *    rpb = ceil(nmix*16/64): Flash's 24 mixes 6 rows a block, 64 blocks;
 *    the head's 4 mixes 1 row a block, 64 blocks. Its weights (rpb rows x
 *    chunk halves, 12 KB) are loaded before the PDL wait, as are scale and
 *    base on the split warp, and block (0, 0) prefetches norm_w into L2;
 *  - the G blocks of a split each recompute its chunk of the pending post
 *    step (k_hc_post's arithmetic; 24 KB of L2 reads a block); only g = 0
 *    writes it to Xout and takes the split's sum of squares (v1's thread j
 *    of 256: k = j, j+256, ..., the warp sum interleaved with the dot's, the
 *    8-warp tree on the otherwise idle split warp);
 *  - one ticket per token, with acq_rel fences; the last block finishes:
 *    warp 8 (the split warp) loads the 16 partials of its lane's mix and
 *    the 16 sums of squares, lets warps 0..7 start loading the stream rows
 *    (bar 1), computes the mixes, publishes the pre weights (bar 2), then
 *    post and Sinkhorn (nhc = 4 unrolled: the four shuffles of a sum issue
 *    together, the sum in the CPU's sequential order; the longest path of
 *    the step, ~40 dependent shuffle+divide rounds, so with sk_defer the
 *    warp leaves the logits in comb and k_hc_sinkhorn finishes them on a
 *    side stream: the next kernel waits for x only). Warps 0..7 are v1's
 *    finishing block of 256 (thread j: d = j, j+256, ...), the RMS tree
 *    taken by every warp from shared memory instead of one warp and a
 *    second barrier.
 * Block: 288 threads (256 + the split warp), 4 KB of shared memory and ~114
 * registers, so the neighbouring kernels' blocks stay resident beside it
 * under PDL. Shapes: nhc = 4, nmix <= 32 (>= 24 unless head), chunk <= 1024,
 * D <= 4096; others use v2 or v1. Scratch: v1's partial[T][16][32] and
 * psq[T][16]; the rounding steps v1's compiler chose are spelled out with
 * __fmul_rn/__fmaf_rn/__fadd_rn/__fma_rn where the unrolled code could
 * contract differently. */

#define HC3_XT 256                 /* v1's block of 256: the post step, the dots, the finish */
#define HC3_THREADS (HC3_XT + 32)  /* + the split warp */
#define HC3_SW 8                   /* the split warp */
#define HC3_XPT 4                  /* chunk elements per thread: chunk <= 1024 */
#define HC3_DPT 16                 /* finish: stream elements per thread: D <= 4096 */
#define HC3_NHC 4
#define HC3_BLOCKS 64              /* blocks per token aimed at (MINKE_CUDA_HC3_BLOCKS) */
#define HC3_MAXRPB 8

__device__ __forceinline__ void hc_prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(__cvta_generic_to_global(p)));
}

/* hc_split_warp's Sinkhorn from this lane's logit v (lane < nhc^2), with
 * nhc a constant so that the four shuffles of each sum issue together. The
 * sums start from their first term instead of 0 + it: the same value, as
 * no term is -0 (all are >= +0: exp, then quotients of such), and one add
 * less on the ~40 rounds of the longest path. */
template <int NHC>
__device__ __forceinline__ float hc3_sum_from(float x, int first, int stride) {
    float s = __shfl_sync(0xffffffffu, x, first & 31);
#pragma unroll
    for (int k = 1; k < NHC; k++) s += __shfl_sync(0xffffffffu, x, (first + k * stride) & 31);
    return s;
}
template <int NHC>
__device__ __forceinline__ void hc3_sinkhorn(float v, int iters, float hc_eps, int lane, float *comb_t) {
    constexpr int nn = NHC * NHC;
    const int rb = (lane / NHC) * NHC, cc = lane % NHC;
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < NHC; k++) { float w = __shfl_sync(0xffffffffu, v, (rb + k) & 31); if (w > mx) mx = w; }
    float e = expf(v - mx);
    float sum = hc3_sum_from<NHC>(e, rb, 1);
    float c = e / sum + hc_eps;
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            float s2 = hc3_sum_from<NHC>(c, rb, 1);
            c /= (s2 + hc_eps);
        }
        float s3 = hc3_sum_from<NHC>(c, cc, NHC);
        c /= (s3 + hc_eps);
    }
    if (lane < nn) comb_t[lane] = c;
}

template <int NHC>
__global__ void __launch_bounds__(HC3_THREADS)
k_hc_pre_fused3(const float *X, const float *f1, const float *f2, const float *post_in, const float *comb_in,
                float *Xout, int D, const void *fn, int fntype, int nmix, int rpb, const float *scale,
                const float *base, const float *norm_w, int iters, float hc_eps, float rms_eps, int head,
                float *partial, double *psq, int *cnt, float *xout, float *post_out, float *comb_out, int sk_defer) {
    __shared__ __align__(16) float xs[HC3_XPT * HC3_XT];   /* this split's input: chunk floats */
    __shared__ double shd[8];
    __shared__ float s_wpre[NHC];
    __shared__ int is_last;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int t = blockIdx.y, sp = blockIdx.x % HC_SPLIT, g = blockIdx.x / HC_SPLIT;
    const int hcdim = D * NHC, chunk = hcdim / HC_SPLIT;
    const int m = g * rpb + w;                         /* this warp's mix row */
    const bool dot = w < rpb && m < nmix;
    const int npl = chunk / 64;
    const bool f16 = fntype == CU_TYPE_F16 && (chunk % 64) == 0;

    /* model weights before the wait (nothing in the step writes them) */
    __half2 hw[HC2_NPL];
#pragma unroll
    for (int j = 0; j < HC2_NPL; j++) hw[j] = __floats2half2_rn(0.f, 0.f);
    if (f16 && dot) {
        const __half2 *h = (const __half2 *)((const uint16_t *)fn + (int64_t)m * hcdim + (int64_t)sp * chunk);
#pragma unroll
        for (int j = 0; j < HC2_NPL; j++)
            if (j < npl) hw[j] = h[lane + 32 * j];
    }
    float sc0 = 0.f, sc1 = 0.f, sc2 = 0.f, bpre = 0.f, bpost = 0.f, bcomb = 0.f;
    if (w == HC3_SW) {
        sc0 = scale[0];
        if (lane < NHC) bpre = base[lane];
        if (!head) {
            sc1 = scale[1]; sc2 = scale[2];
            if (lane < NHC) bpost = base[NHC + lane];
            if (lane < NHC * NHC) bcomb = base[2 * NHC + lane];
        }
    }
    if (norm_w && blockIdx.x == 0 && blockIdx.y == 0 && tid < HC3_XT)
        for (int d = tid * 32; d < D; d += HC3_XT * 32) hc_prefetch_l2(norm_w + d);
    cu_pdl_enter();

    /* this split of the input: thread j holds k = j, j+256, j+512, j+768
     * (with the pending post step: k_hc_post's arithmetic). All loads first:
     * the stores to Xout could alias them otherwise. */
    const int64_t off = (int64_t)t * hcdim + (int64_t)sp * chunk;
    float xv[HC3_XPT];
    if (tid < HC3_XT) {
        if (f1) {
            const float *Xt = X + (int64_t)t * hcdim;
            float xr[HC3_XPT][NHC], cv[HC3_XPT][NHC], pc[HC3_XPT], fa[HC3_XPT], fb[HC3_XPT];
#pragma unroll
            for (int i = 0; i < HC3_XPT; i++) {
                int k = tid + HC3_XT * i;
                int e = sp * chunk + (k < chunk ? k : 0);
                int c = e / D, d = e - c * D;
#pragma unroll
                for (int r = 0; r < NHC; r++) {
                    cv[i][r] = comb_in[t * NHC * NHC + r * NHC + c];
                    xr[i][r] = Xt[(int64_t)r * D + d];
                }
                pc[i] = post_in[t * NHC + c];
                fa[i] = f1[(int64_t)t * D + d];
                fb[i] = f2 ? f2[(int64_t)t * D + d] : 0.f;
            }
#pragma unroll
            for (int i = 0; i < HC3_XPT; i++) {
                int k = tid + HC3_XT * i;
                float f = fa[i];
                if (f2) f += fb[i];
                /* v1's rounding steps spelled out (the unrolled sum would
                 * otherwise contract the first product the other way) */
                float v = __fmul_rn(pc[i], f);
#pragma unroll
                for (int r = 0; r < NHC; r++) v = __fmaf_rn(cv[i][r], xr[i][r], v);
                xv[i] = v;
                if (k < chunk) {
                    xs[k] = v;
                    if (g == 0) Xout[off + k] = v;
                }
            }
        } else {
#pragma unroll
            for (int i = 0; i < HC3_XPT; i++) {
                int k = tid + HC3_XT * i;
                xv[i] = k < chunk ? X[off + k] : 0.f;
            }
#pragma unroll
            for (int i = 0; i < HC3_XPT; i++) {
                int k = tid + HC3_XT * i;
                if (k < chunk) xs[k] = xv[i];
            }
        }
    }
    __syncthreads();

    /* mix dots (one warp per row, v1's lane order) and, in block g = 0, the
     * split's sum of squares (v1's thread j of 256: k = j, j+256, ..., then
     * the warp and the 8-warp tree), the two warp sums interleaved; the
     * split warp takes the tree meanwhile */
    if (tid < HC3_XT) {
        double ss = 0.0;
        if (g == 0) {
#pragma unroll
            for (int i = 0; i < HC3_XPT; i++)
                if (tid + HC3_XT * i < chunk) ss = __fma_rn((double)xv[i], (double)xv[i], ss);
        }
        float acc = 0.f;
        if (dot) {
            if (f16) {
                const float2 *xs2 = (const float2 *)xs;
#pragma unroll
                for (int j = 0; j < HC2_NPL; j++)
                    if (j < npl) {
                        float2 fv = __half22float2(hw[j]);
                        float2 xx = xs2[lane + 32 * j];
                        acc = __fadd_rn(acc, __fmaf_rn(fv.x, xx.x, __fmul_rn(fv.y, xx.y)));   /* as v1 compiles */
                    }
            } else {
                int64_t wb = (int64_t)m * hcdim + (int64_t)sp * chunk;
                for (int i = lane; i < chunk; i += 32) acc += cu_wload(fn, fntype, wb + i) * xs[i];
            }
        }
        if (dot || g == 0) {
            /* warp_sum and warp_sum_d, step for step */
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                acc += __shfl_xor_sync(0xffffffffu, acc, o);
                ss += __shfl_xor_sync(0xffffffffu, ss, o);
            }
        }
        if (g == 0) {
            if (lane == 0) shd[w] = ss;
            hc_bar_arrive(4, HC3_THREADS);
        }
        if (dot && lane == 0) partial[((int64_t)t * HC_SPLIT + sp) * HC_MAXMIX + m] = acc;
    } else if (g == 0) {
        hc_bar_sync(4, HC3_THREADS);
        double tt = lane < 8 ? shd[lane] : 0.0;
        tt = warp_sum_d(tt);
        if (lane == 0) psq[t * HC_SPLIT + sp] = tt;
    }
    __syncthreads();

    /* one fence + ticket (the grid-sync pattern) */
    if (tid == 0) {
        /* release (the block's writes, ordered before by the barrier),
         * the ticket, and for the last block the acquire of the other
         * blocks' writes (cumulative through the next barrier). acq_rel
         * fences, not __threadfence's fence.sc; the acquire comes before
         * the counter's reset so that it does not wait for that store
         * (the kernel's end publishes it to the next launch). */
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
        int ticket = atomicAdd(&cnt[t], 1);
        int last = ticket == (int)gridDim.x - 1;
        if (last) {
            asm volatile("fence.acq_rel.gpu;" ::: "memory");
            cnt[t] = 0;
        }
        is_last = last;
    }
    __syncthreads();
    if (!is_last) return;

    /* the last block of token t: the finish (L2 reads of what the other blocks wrote) */
    if (w == HC3_SW) {
        float pv[HC_SPLIT];
        double qv[HC_SPLIT];
        const int ml = lane < nmix ? lane : 0;
#pragma unroll
        for (int k = 0; k < HC_SPLIT; k++) {
            pv[k] = __ldcg(&partial[((int64_t)t * HC_SPLIT + k) * HC_MAXMIX + ml]);
            qv[k] = __ldcg(&psq[t * HC_SPLIT + k]);
        }
        hc_bar_arrive(1, HC3_THREADS);     /* my loads are out: the stream rows may follow */
        double sq = 0.0;
#pragma unroll
        for (int k = 0; k < HC_SPLIT; k++) sq += qv[k];
        /* sq / hcdim as a product where hcdim is a power of two (the same
         * double: both are exact scalings by 2^-k, or round that one exact
         * value alike), one double division less on the longest path */
        const double mean = (hcdim & (hcdim - 1)) == 0 ? sq * (1.0 / hcdim) : sq / hcdim;
        float r = (float)(1.0 / sqrt(mean + (double)rms_eps));
        float a = 0.f;
#pragma unroll
        for (int k = 0; k < HC_SPLIT; k++) a += pv[k];
        const float mixv = a * r;           /* mix[lane] */
        if (lane < NHC) s_wpre[lane] = sigmoid_stable(mixv * sc0 + bpre) + hc_eps;
        __syncwarp();
        hc_bar_arrive(2, HC3_THREADS);
        if (head) return;
        float mpost = __shfl_sync(0xffffffffu, mixv, (NHC + lane) & 31);
        float mcomb = __shfl_sync(0xffffffffu, mixv, (2 * NHC + lane) & 31);
        float v = lane < NHC * NHC ? mcomb * sc2 + bcomb : 0.f;
        if (lane < NHC) post_out[t * NHC + lane] = 2.0f * sigmoid_stable(mpost * sc1 + bpost);
        if (sk_defer) {
            if (lane < NHC * NHC) comb_out[t * NHC * NHC + lane] = v;     /* for k_hc_sinkhorn */
        } else {
            hc3_sinkhorn<NHC>(v, iters, hc_eps, lane, comb_out + t * NHC * NHC);
        }
        return;
    }

    /* warps 0..7: v1's finishing block of 256 */
    const float *xin = (f1 ? Xout : X) + (int64_t)t * hcdim;
    hc_bar_sync(1, HC3_THREADS);
    float xr[HC3_DPT][NHC];
#pragma unroll
    for (int i = 0; i < HC3_DPT; i++) {
        int d = tid + HC3_XT * i;
#pragma unroll
        for (int k = 0; k < NHC; k++) xr[i][k] = d < D ? __ldcg(&xin[(int64_t)k * D + d]) : 0.f;
    }
    hc_bar_sync(2, HC3_THREADS);
    float wp[NHC];
#pragma unroll
    for (int k = 0; k < NHC; k++) wp[k] = s_wpre[k];
    float u[HC3_DPT];
#pragma unroll
    for (int i = 0; i < HC3_DPT; i++) {
        float uu = 0.f;
#pragma unroll
        for (int k = 0; k < NHC; k++) uu = __fmaf_rn(wp[k], xr[i][k], uu);
        u[i] = uu;
    }
    float *y = xout + (int64_t)t * D;
    if (!norm_w) {
#pragma unroll
        for (int i = 0; i < HC3_DPT; i++) {
            int d = tid + HC3_XT * i;
            if (d < D) y[d] = u[i];
        }
        return;
    }
    double s2 = 0.0;
#pragma unroll
    for (int i = 0; i < HC3_DPT; i++)
        if (tid + HC3_XT * i < D) s2 = __fma_rn((double)u[i], (double)u[i], s2);
    /* norm_w (in L2 from block 0's prefetch) only now: registers; this
     * path is shorter than Sinkhorn's */
    float nwv[HC3_DPT];
#pragma unroll
    for (int i = 0; i < HC3_DPT; i++) {
        int d = tid + HC3_XT * i;
        nwv[i] = d < D ? norm_w[d] : 0.f;
    }
    s2 = warp_sum_d(s2);
    if (lane == 0) shd[w] = s2;
    hc_bar_sync(3, HC3_XT);
    double tt = lane < 8 ? shd[lane] : 0.0;
    tt = warp_sum_d(tt);
    float rn = (float)(1.0 / sqrt(tt / D + (double)rms_eps));
#pragma unroll
    for (int i = 0; i < HC3_DPT; i++) {
        int d = tid + HC3_XT * i;
        if (d < D) y[d] = u[i] * rn * nwv[i];
    }
}

/* Blocks per token aimed at: 64 by default (Flash: 6 rows a block; the G
 * blocks of a split each read its 24 KB of inputs, so 128 blocks double the
 * L2 traffic and the tickets for no shorter path: the rows of a block run on
 * parallel warps). Env MINKE_CUDA_HC3_BLOCKS or cu_hc3_set_blocks (hc_check
 * times both); the results do not depend on it. */
static int hc3_blocks = -1;
extern "C" void cu_hc3_set_blocks(int n) { hc3_blocks = n > 0 ? n : -1; }
static int hc3_rows_per_block(int nmix) {
    if (hc3_blocks < 0) {
        const char *e = getenv("MINKE_CUDA_HC3_BLOCKS");
        hc3_blocks = e && atoi(e) > 0 ? atoi(e) : HC3_BLOCKS;
    }
    int r = (nmix * HC_SPLIT + hc3_blocks - 1) / hc3_blocks;
    return r < 1 ? 1 : r > HC3_MAXRPB ? HC3_MAXRPB : r;
}

static int hc3_ok(int D, int nhc, int nmix, int head) {
    if (nhc != HC3_NHC || nmix < 1 || nmix > HC_MAXMIX || (D * nhc) % HC_SPLIT) return 0;
    if (nmix < (head ? nhc : 2 * nhc + nhc * nhc)) return 0;
    return D * nhc / HC_SPLIT <= HC3_XPT * HC3_XT && D <= HC3_DPT * HC3_XT && hc3_rows_per_block(nmix) <= HC3_MAXRPB;
}

static int hc2_ok(int D, int nhc, int nmix) {
    int chunk = D * nhc / HC_SPLIT;
    return nhc >= 1 && nhc <= HC2_MAXHC && nmix <= HC_MAXMIX && (D * nhc) % HC_SPLIT == 0 && chunk <= HC2_THREADS &&
           D <= HC2_THREADS * HC2_DPT && nmix <= HC2_THREADS / 32;
}

/* Which schedule of the fused pre step: 0 the default (v3 where the shape
 * fits, else v2, else v1), 1, 2 or 3 that one where it fits (else the next
 * older). Env MINKE_CUDA_HC_V1=1 or MINKE_CUDA_HC_V2=1; hc_check switches. */
static int hc_ver = -1;
extern "C" void cu_hc_use_v1(int on) { hc_ver = on ? 1 : 0; }
extern "C" void cu_hc_use_version(int v) { hc_ver = v; }
static int hc_version(void) {
    if (hc_ver < 0) {
        const char *e1 = getenv("MINKE_CUDA_HC_V1"), *e2 = getenv("MINKE_CUDA_HC_V2");
        hc_ver = e1 && atoi(e1) ? 1 : e2 && atoi(e2) ? 2 : 0;
    }
    return hc_ver;
}

/* the schedule a cu_hc_pre_fused call of this shape runs now (hc_check) */
extern "C" int cu_hc_fused_version(int D, int nhc, int nmix, int head) {
    int ver = hc_version();
    if ((ver == 0 || ver == 3) && hc3_ok(D, nhc, nmix, head)) return 3;
    return ver != 1 && hc2_ok(D, nhc, nmix) ? 2 : 1;
}

int cu_hc_fused_enabled(void) {
    static int on = -1;
    if (on < 0) { const char *e = getenv("MINKE_CUDA_HC_FUSED"); on = e ? atoi(e) != 0 : 1; }
    return on;
}

int cu_hc_fused_ok(int D, int nhc, int nmix) {
    return nmix <= HC_MAXMIX && nhc <= 8 && (D * nhc) % HC_SPLIT == 0 && (D * nhc / HC_SPLIT) * 4 <= 48 * 1024;
}

/* The deferred Sinkhorn: a warp per token, hc3_sinkhorn on the logits the
 * step left in comb (lanes past nhc^2 take 0, as in the step) */
__global__ void __launch_bounds__(32) k_hc_sinkhorn(float *comb, int iters, float hc_eps) {
    cu_pdl_enter();
    const int t = blockIdx.x, lane = threadIdx.x;
    float *c = comb + t * HC3_NHC * HC3_NHC;
    const float v = lane < HC3_NHC * HC3_NHC ? c[lane] : 0.f;
    __syncwarp();
    hc3_sinkhorn<HC3_NHC>(v, iters, hc_eps, lane, c);
}

extern "C" void cu_hc_sinkhorn(float *comb, int T, int nhc, int iters, float hc_eps, cudaStream_t st) {
    if (nhc != HC3_NHC || T < 1) return;     /* cu_hc_pre_fused defers only for this nhc */
    cu_launch(k_hc_sinkhorn, dim3(T), 32, 0, st, comb, iters, hc_eps);
}

int cu_hc_pre_fused(const float *X, const float *f1, const float *f2, const float *post_in, const float *comb_in,
                    float *Xout, int T, int D, int nhc, const void *fn, int fntype, int nmix, const float *scale,
                    const float *base, const float *norm_w, int iters, float hc_eps, float rms_eps, int head,
                    float *part, double *psq, int *cnt, float *x, float *post, float *comb, int sk_defer,
                    cudaStream_t st) {
    int ver = hc_version();
    if ((ver == 0 || ver == 3) && hc3_ok(D, nhc, nmix, head)) {
        int rpb = hc3_rows_per_block(nmix), ng = (nmix + rpb - 1) / rpb;
        const int defer = sk_defer && !head && nhc == HC3_NHC;
        cu_launch(k_hc_pre_fused3<HC3_NHC>, dim3(HC_SPLIT * ng, T), HC3_THREADS, 0, st, X, f1, f2, post_in, comb_in,
                  Xout, D, fn, fntype, nmix, rpb, scale, base, norm_w, iters, hc_eps, rms_eps, head, part, psq, cnt,
                  x, post, comb, defer);
        return defer;
    }
    if (ver != 1 && hc2_ok(D, nhc, nmix)) {
        size_t shm2 = sizeof(float) * (size_t)(D * nhc / HC_SPLIT + D);
        cu_launch(k_hc_pre_fused2, dim3(HC_SPLIT, T), HC2_THREADS, shm2, st, X, f1, f2, post_in, comb_in, Xout, D, nhc,
                  fn, fntype, nmix, scale, base, norm_w, iters, hc_eps, rms_eps, head, part, psq, cnt, x, post, comb);
        return 0;
    }
    int threads = 32 * (nmix > 8 ? nmix : 8);
    size_t shm = sizeof(float) * (size_t)(D * nhc / HC_SPLIT);
    cu_launch(k_hc_pre_fused, dim3(HC_SPLIT, T), threads, shm, st, X, f1, f2, post_in, comb_in, Xout, D, nhc, fn,
              fntype, nmix, scale, base, norm_w, iters, hc_eps, rms_eps, head, part, psq, cnt, x, post, comb);
    return 0;
}


__global__ void k_hc_post(const float *X, const float *f1, const float *f2, const float *post, const float *comb,
                          int D, int nhc, float *Xout) {
    cu_pdl_enter();
    int t = blockIdx.y;
    int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= D) return;
    float f = f1[(int64_t)t * D + d];
    if (f2) f += f2[(int64_t)t * D + d];
    const float *x = X + (int64_t)t * nhc * D;
    if (nhc == 4) {
        /* the 4 streams' inputs and the weights loaded once: with Xout possibly aliasing X
         * for the compiler, the general loop reloaded them after every store (the same
         * expressions in the same order: the same bits) */
        float xr[4], pc[4], cb[16];
#pragma unroll
        for (int r = 0; r < 4; r++) { xr[r] = x[(int64_t)r * D + d]; pc[r] = post[t * 4 + r]; }
#pragma unroll
        for (int k = 0; k < 16; k++) cb[k] = comb[t * 16 + k];
#pragma unroll
        for (int c = 0; c < 4; c++) {
            /* the rounding steps spelled out: unrolled, v = p f; v += c x may contract
             * the other way (fma(p, f, c x)), not the loop's (and the fused kernels') */
            float v = __fmul_rn(pc[c], f);
#pragma unroll
            for (int r = 0; r < 4; r++) v = __fmaf_rn(cb[r * 4 + c], xr[r], v);
            Xout[((int64_t)t * 4 + c) * D + d] = v;
        }
        return;
    }
    for (int c = 0; c < nhc; c++) {
        float v = post[t * nhc + c] * f;
        for (int r = 0; r < nhc; r++) v += comb[t * nhc * nhc + r * nhc + c] * x[(int64_t)r * D + d];
        Xout[((int64_t)t * nhc + c) * D + d] = v;
    }
}
void cu_hc_post(const float *X, const float *f1, const float *f2, const float *post, const float *comb,
                int T, int D, int nhc, float *Xout, cudaStream_t st) {
    cu_launch(k_hc_post, dim3((D + 255) / 256, T), 256, 0, st, X, f1, f2, post, comb, D, nhc, Xout);
}

