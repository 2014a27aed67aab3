/* cu_attn_tc.cu: prefill attention with sinks (spec §10) on the f16 tensor
 * cores. All heads of a token attend to the same rows (one shared K = V head:
 * the window rows, then the compressed rows, for ratio 4 those the indexer
 * selected), so per token attention is two small GEMMs with the 64 heads as
 * the M dimension: S = Q K^T (64 x rows) and O = P V (64 x hd).
 *
 * Block (token, group of 64 heads), 16 warps. Q is staged once as f16 in
 * shared memory; rows come in tiles of 32 (f32 -> f16, read from L2 once per
 * token instead of once per 8 heads). Per tile: S on mma.m16n8k16 (warp = 16
 * heads x 8 rows, f32 accumulate over all of hd), an online softmax per head
 * (warp = 4 heads, lane = row; the f16-rounded p are the ones summed into the
 * denominator, so the weights match what the tensor cores multiply), then
 * O += P V (warp = 16 heads x hd/4 dims, V fragments by ldmatrix.trans from
 * the same tile). The sink, normalisation and inverse RoPE of the output
 * follow in registers (a RoPE pair is one accumulator pair).
 *
 * Why not for every model and batch: q, k and p rounded to f16 (11 bits) put
 * the output within ~5e-4 of the f32 kernel (gemv_check), which the F32
 * reference check (1e-3 of max logit on a random tiny model that amplifies
 * every rounding) does not allow; for quantized models it is far below their
 * own int8 activation rounding. So cu_attention takes this path only for
 * models whose attention projections are not F32 (the backend's tc) and
 * batches of at least MINKE_CUDA_ATT_TC_MIN tokens (default 256);
 * MINKE_CUDA_ATT_TC=2 forces it for all models, 0 turns it off.
 * k_attention_tcp (below, MINKE_CUDA_ATT_TC_PIPE=1) is the same arithmetic
 * with the next tile's rows copied by cp.async during this one's products;
 * PIPE=0 runs k_attention_tc. On sm_90a devices the default (PIPE=2) is
 * cu_attn_wg.cu's wgmma kernel. */
#include "cuda/cu_common.cuh"
#include "cuda/cu_ops.h"
#include <cuda_fp16.h>
#include <stdlib.h>

#define ATC_HEADS 64
#define ATC_ROWS 32
#define ATC_WARPS 16
#define ATC_THREADS (ATC_WARPS * 32)
#define ATC_SS (ATC_ROWS + 1)      /* floats per score row in shared memory */
#define ATC_PS (ATC_ROWS + 8)      /* halves per probability row (conflict-free fragments) */

template <int HD> struct atc_layout {
    static constexpr int QS = HD + 8;     /* halves per Q / KV row: +16 bytes spreads the banks */
    static constexpr size_t q_off = 0;
    static constexpr size_t kv_off = q_off + (size_t)ATC_HEADS * QS * 2;
    static constexpr size_t s_off = kv_off + (size_t)ATC_ROWS * QS * 2;
    static constexpr size_t p_off = s_off + (size_t)ATC_HEADS * ATC_SS * 4;
    static constexpr size_t m_off = p_off + (size_t)ATC_HEADS * ATC_PS * 2;
    static constexpr size_t r_off = m_off + (size_t)(3 * ATC_HEADS + HD) * 4;
    static constexpr size_t bytes = r_off + (size_t)ATC_ROWS * sizeof(void *);
};

__device__ __forceinline__ void atc_mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void atc_ldm_x4_trans(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3, const void *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
}

__device__ __forceinline__ uint32_t atc_ld32(const __half *p) { return *(const uint32_t *)p; }

/* row i of token qp's attention list (window rows first, then compressed) */
__device__ __forceinline__ const float *atc_row(int i, int nraw, int qp, int pos0, int W, int hd, int ratio,
                                                const float *kv_batch, const float *ring, const float *comp,
                                                const int *sel_t) {
    if (i < nraw) {
        int j = qp - nraw + 1 + i;
        return j >= pos0 ? kv_batch + (int64_t)(j - pos0) * hd : ring + (int64_t)(j % W) * hd;
    }
    int c = i - nraw;
    if (ratio == 4) c = sel_t[c];
    return comp + (int64_t)c * hd;
}

/* The pieces both prefill kernels share (k_attention_tc and its pipelined
 * form below), one copy so that their outputs keep the same bits. */

/* Q of the block's 64 heads as f16 in shared memory, the softmax state, and
 * the inverse RoPE's angles at the token's position */
template <int HD>
__device__ __forceinline__ void atc_stage_q(const float *q, int t, int nh, int h0, int qp, int nrot,
                                            const float *inv_freq, __half *sQ, float *sM, float *sL, float *sCos,
                                            float *sSin, int tid) {
    constexpr int QS = atc_layout<HD>::QS;
    const float *qt = q + ((int64_t)t * nh + h0) * HD;
#pragma unroll 8
    for (int idx = tid; idx < ATC_HEADS * HD / 4; idx += ATC_THREADS) {
        int hh = idx / (HD / 4), d4 = idx - hh * (HD / 4);
        float4 v = h0 + hh < nh ? ((const float4 *)(qt + (int64_t)hh * HD))[d4] : make_float4(0.f, 0.f, 0.f, 0.f);
        __half2 *dst = (__half2 *)(sQ + hh * QS + d4 * 4);
        dst[0] = __floats2half2_rn(v.x, v.y);
        dst[1] = __floats2half2_rn(v.z, v.w);
    }
    if (tid < ATC_HEADS) { sM[tid] = -INFINITY; sL[tid] = 0.f; }
    for (int k = tid; k < nrot / 2; k += ATC_THREADS) {
        float ang = (float)qp * inv_freq[k];
        double sd, cd;
        sincos((double)ang, &sd, &cd);
        sCos[k] = (float)cd;
        sSin[k] = -(float)sd;             /* inverse rotation */
    }
}

/* the online softmax of a tile's nr scores: warp = 4 heads, lane = row; the
 * f16-rounded p are the ones summed, so the weights match what the tensor
 * cores multiply */
__device__ __forceinline__ void atc_softmax(const float *sS, __half *sP, float *sM, float *sL, float *sC, int nr,
                                            float scale, int w, int lane) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int hh = w * 4 + i;
        float sv = lane < nr ? sS[hh * ATC_SS + lane] * scale : -INFINITY;
        float Mo = sM[hh];
        float Mn = fmaxf(Mo, warp_max(sv));
        __half ph = __float2half_rn(expf(sv - Mn));
        sP[hh * ATC_PS + lane] = ph;
        float sum = warp_sum(__half2float(ph));
        if (lane == 0) {
            float corr = expf(Mo - Mn);
            sC[hh] = corr;
            sL[hh] = sL[hh] * corr + sum;
            sM[hh] = Mn;
        }
    }
}

/* O = corr O + P V for the warp's 16 heads x hd/4 dims (V fragments by
 * ldmatrix.trans from the f16 row tile) */
template <int HD>
__device__ __forceinline__ void atc_pv(float (&acc)[HD / 32][4], const __half *sP, const __half *sK, const float *sC,
                                       int hg, int part, int g, int c, int lane) {
    constexpr int QS = atc_layout<HD>::QS, NT = HD / 32;
    float c0 = sC[hg * 16 + g], c1 = sC[hg * 16 + g + 8];
#pragma unroll
    for (int i = 0; i < NT; i++) { acc[i][0] *= c0; acc[i][1] *= c0; acc[i][2] *= c1; acc[i][3] *= c1; }
    const __half *pa = sP + (hg * 16 + g) * ATC_PS + 2 * c;
#pragma unroll
    for (int k0 = 0; k0 < ATC_ROWS; k0 += 16) {
        uint32_t a0 = atc_ld32(pa + k0), a1 = atc_ld32(pa + 8 * ATC_PS + k0);
        uint32_t a2 = atc_ld32(pa + k0 + 8), a3 = atc_ld32(pa + 8 * ATC_PS + k0 + 8);
        /* lanes 0-7 / 8-15: rows k0..+7 / k0+8..+15 of dims n0..n0+7; lanes 16-31: dims n0+8.. */
        const __half *vb = sK + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * QS + part * (HD / 4) + ((lane >> 4) & 1) * 8;
#pragma unroll
        for (int i = 0; i < NT; i += 2) {
            uint32_t b0, b1, b2, b3;
            atc_ldm_x4_trans(b0, b1, b2, b3, vb + i * 8);
            atc_mma(acc[i], a0, a1, a2, a3, b0, b1);
            atc_mma(acc[i + 1], a0, a1, a2, a3, b2, b3);
        }
    }
}

/* the sink, the normalisation and the inverse RoPE of the warp's outputs, in
 * registers (a RoPE pair is one accumulator pair), then the stores */
template <int HD>
__device__ __forceinline__ void atc_finish(const float (&acc)[HD / 32][4], const float *sM, const float *sL,
                                           const float *sinks, const float *sCos, const float *sSin, int nrot, int t,
                                           int nh, int h0, int hg, int part, int g, int c, float *o) {
    constexpr int NT = HD / 32;
    int off = HD - nrot;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        int hl = hg * 16 + g + 8 * half, h = h0 + hl;
        if (h >= nh) continue;
        float M = sM[hl], L = sL[hl], sk = sinks[h];
        float Mt = fmaxf(sk, M);
        float fac = M == -INFINITY ? 0.f : expf(M - Mt);
        float den = expf(sk - Mt) + L * fac;
        float f = fac * (1.0f / den);
        float *out = o + ((int64_t)t * nh + h) * HD;
#pragma unroll
        for (int i = 0; i < NT; i++) {
            int d = part * (HD / 4) + i * 8 + 2 * c;
            float x0 = acc[i][2 * half] * f, x1 = acc[i][2 * half + 1] * f;
            if (d >= off) {
                int k = (d - off) >> 1;
                float cs = sCos[k], sn = sSin[k];
                float y0 = x0 * cs - x1 * sn, y1 = x0 * sn + x1 * cs;
                x0 = y0; x1 = y1;
            }
            *(float2 *)(out + d) = make_float2(x0, x1);
        }
    }
}

/* Both kernels' shared regions of atc_layout: Q, the K/V tile, S, P, the
 * heads' running max / sum / correction and the RoPE angles. */
template <int HD>
__device__ __forceinline__ void atc_carve(unsigned char *sh, __half *&sQ, __half *&sK, float *&sS, __half *&sP, float *&sM,
                                          float *&sL, float *&sC, float *&sCos, float *&sSin) {
    typedef atc_layout<HD> Lt;
    sQ = (__half *)(sh + Lt::q_off);
    sK = (__half *)(sh + Lt::kv_off);
    sS = (float *)(sh + Lt::s_off);
    sP = (__half *)(sh + Lt::p_off);
    sM = (float *)(sh + Lt::m_off); sL = sM + ATC_HEADS; sC = sL + ATC_HEADS;
    sCos = sC + ATC_HEADS; sSin = sCos + HD / 2;
}

template <int HD>
__global__ void __launch_bounds__(ATC_THREADS, 1)
k_attention_tc(const float *q, const float *kv_batch, const float *ring, const float *comp, const int *sel,
               const int *nsel, int topk, const float *sinks, int nh, int W, int ratio, int nrot,
               const float *inv_freq, float scale, const int *pos0p, float *o) {
    cu_pdl_enter();
    typedef atc_layout<HD> Lt;
    constexpr int QS = Lt::QS;
    constexpr int NT = HD / 32;           /* n8 tiles of a warp's hd/4 output dims */
    extern __shared__ __align__(16) unsigned char atc_sh[];
    __half *sQ, *sK, *sP;
    float *sS, *sM, *sL, *sC, *sCos, *sSin;
    atc_carve<HD>(atc_sh, sQ, sK, sS, sP, sM, sL, sC, sCos, sSin);
    const float **sRow = (const float **)(atc_sh + Lt::r_off);   /* the next tile's row addresses */

    int t = blockIdx.y, h0 = blockIdx.x * ATC_HEADS;
    int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    int g = lane >> 2, c = lane & 3;
    int pos0 = *pos0p, qp = pos0 + t;
    int nraw = attn_nraw(qp, W), n = attn_nrows(t, qp, W, ratio, nsel);
    const int *sel_t = sel ? sel + (int64_t)t * topk : nullptr;

    atc_stage_q<HD>(q, t, nh, h0, qp, nrot, inv_freq, sQ, sM, sL, sCos, sSin, tid);

    if (w == 0) sRow[lane] = lane < n ? atc_row(lane, nraw, qp, pos0, W, HD, ratio, kv_batch, ring, comp, sel_t) : nullptr;
    __syncthreads();

    int hg = w & 3, part = w >> 2;        /* 16-head group; row block (S) / dim quarter (O) */
    bool hg_on = h0 + hg * 16 < nh;
    float acc[NT][4];
#pragma unroll
    for (int i = 0; i < NT; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

    for (int base = 0; base < n; base += ATC_ROWS) {
        int nr = n - base < ATC_ROWS ? n - base : ATC_ROWS;
        /* stage the tile as f16, all loads in flight at once (row addresses
         * from the previous pass); rows past the end are zero (their p is 0) */
        {
            constexpr int PER = ATC_ROWS * HD / 4 / ATC_THREADS;
            float4 v[PER];
#pragma unroll
            for (int j = 0; j < PER; j++) {
                int idx = tid + j * ATC_THREADS, r = idx / (HD / 4), d4 = idx - r * (HD / 4);
                v[j] = r < nr ? __ldg((const float4 *)sRow[r] + d4) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
            for (int j = 0; j < PER; j++) {
                int idx = tid + j * ATC_THREADS, r = idx / (HD / 4), d4 = idx - r * (HD / 4);
                __half2 *dst = (__half2 *)(sK + r * QS + d4 * 4);
                dst[0] = __floats2half2_rn(v[j].x, v[j].y);
                dst[1] = __floats2half2_rn(v[j].z, v[j].w);
            }
        }
        __syncthreads();
        /* S: warp = 16 heads x 8 rows */
        if (hg_on) {
            float s[4] = {0.f, 0.f, 0.f, 0.f};
            const __half *qa = sQ + (hg * 16 + g) * QS + 2 * c;
            const __half *kb = sK + (part * 8 + g) * QS + 2 * c;
#pragma unroll 8
            for (int k0 = 0; k0 < HD; k0 += 16)
                atc_mma(s, atc_ld32(qa + k0), atc_ld32(qa + 8 * QS + k0), atc_ld32(qa + k0 + 8),
                        atc_ld32(qa + 8 * QS + k0 + 8), atc_ld32(kb + k0), atc_ld32(kb + k0 + 8));
            float *sr = sS + (hg * 16 + g) * ATC_SS + part * 8 + 2 * c;
            sr[0] = s[0];
            sr[1] = s[1];
            sr[8 * ATC_SS] = s[2];
            sr[8 * ATC_SS + 1] = s[3];
        }
        __syncthreads();
        atc_softmax(sS, sP, sM, sL, sC, nr, scale, w, lane);
        if (w == 0) {       /* the next tile's rows (the staging above has read this tile's) */
            int i = base + ATC_ROWS + lane;
            sRow[lane] = i < n ? atc_row(i, nraw, qp, pos0, W, HD, ratio, kv_batch, ring, comp, sel_t) : nullptr;
        }
        __syncthreads();
        /* O += P V: warp = 16 heads x hd/4 dims */
        if (hg_on) atc_pv<HD>(acc, sP, sK, sC, hg, part, g, c, lane);
        __syncthreads();
    }
    if (!hg_on) return;
    atc_finish<HD>(acc, sM, sL, sinks, sCos, sSin, nrot, t, nh, h0, hg, part, g, c, o);
}

/* ---- pipelined form (MINKE_CUDA_ATT_TC_PIPE, default 1; 0 = the kernel above) ----
 * The same arithmetic per output as k_attention_tc (bit-identical), with the
 * next tile's rows in flight during the current tile's products: the raw f32
 * rows of tile k+1 are copied by cp.async (16 bytes a copy, L2 -> shared) into
 * a raw buffer while tile k runs S, the softmax and P V; at the top of tile
 * k+1 the raw rows are converted to the same f16 tile as before
 * (__floats2half2_rn of the same f32 values; rows past the end zero), so the
 * only wait left is the tail of a copy that had a whole tile's products to
 * land. Row addresses are worked out two tiles ahead (warp 0 in the softmax
 * step), in two buffers by tile parity.
 * S on 8 warps of 16 heads x 16 rows (two n8 accumulators sharing each Q
 * fragment: 2/3 of the shared-memory reads of 16 warps of 16 x 8, the limit
 * of that step), every score the same chain of mma over the same k order as
 * before. (The pipeline with the 16 x 8 split was slower than both on the
 * H200: 3,013 tok/s prefill against 3,018 and 3,028.)
 * Shared memory: the layout above + 32 rows x HD f32 (64 KB at HD 512:
 * 178 KB a block, over sm_80's 163 KB opt-in: there cudaFuncSetAttribute
 * refuses it and the launcher runs the kernel above). */
template <int HD> struct atcp_layout {
    typedef atc_layout<HD> B;
    static constexpr size_t r_off = B::r_off;
    static constexpr size_t raw_off = r_off + (size_t)2 * ATC_ROWS * sizeof(void *);
    static constexpr size_t bytes = raw_off + (size_t)ATC_ROWS * HD * 4;
    static_assert(raw_off % 16 == 0, "raw tile alignment");
};

/* cp.async of a tile's nr raw rows (addresses in rows[]) into raw (HD floats a row) */
template <int HD>
__device__ __forceinline__ void atcp_issue(float *raw, const float *const *rows, int nr, int tid) {
    constexpr int PER = ATC_ROWS * HD / 4 / ATC_THREADS;
#pragma unroll
    for (int j = 0; j < PER; j++) {
        int idx = tid + j * ATC_THREADS, r = idx / (HD / 4), d4 = idx - r * (HD / 4);
        if (r < nr) cp_async16(raw + r * HD + d4 * 4, rows[r] + d4 * 4);
    }
    cp_async_commit();
}

template <int HD>
__global__ void __launch_bounds__(ATC_THREADS, 1)
k_attention_tcp(const float *q, const float *kv_batch, const float *ring, const float *comp, const int *sel,
                const int *nsel, int topk, const float *sinks, int nh, int W, int ratio, int nrot,
                const float *inv_freq, float scale, const int *pos0p, float *o) {
    cu_pdl_enter();
    typedef atc_layout<HD> Lt;
    typedef atcp_layout<HD> Lp;
    constexpr int QS = Lt::QS;
    constexpr int NT = HD / 32;           /* n8 tiles of a warp's hd/4 output dims */
    extern __shared__ __align__(16) unsigned char atc_sh[];
    __half *sQ, *sK, *sP;
    float *sS, *sM, *sL, *sC, *sCos, *sSin;
    atc_carve<HD>(atc_sh, sQ, sK, sS, sP, sM, sL, sC, sCos, sSin);
    const float **sRow = (const float **)(atc_sh + Lp::r_off);   /* tile k's row addresses: sRow[(k & 1) * 32 + r] */
    float *sRaw = (float *)(atc_sh + Lp::raw_off);

    int t = blockIdx.y, h0 = blockIdx.x * ATC_HEADS;
    int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    int g = lane >> 2, c = lane & 3;
    int pos0 = *pos0p, qp = pos0 + t;
    int nraw = attn_nraw(qp, W), n = attn_nrows(t, qp, W, ratio, nsel);
    const int *sel_t = sel ? sel + (int64_t)t * topk : nullptr;

    /* the first two tiles' addresses, then tile 0 in flight while Q is staged */
    if (w == 0) {
        sRow[lane] = lane < n ? atc_row(lane, nraw, qp, pos0, W, HD, ratio, kv_batch, ring, comp, sel_t) : nullptr;
        int i = ATC_ROWS + lane;
        sRow[ATC_ROWS + lane] = i < n ? atc_row(i, nraw, qp, pos0, W, HD, ratio, kv_batch, ring, comp, sel_t) : nullptr;
    }
    __syncthreads();
    atcp_issue<HD>(sRaw, sRow, n < ATC_ROWS ? n : ATC_ROWS, tid);

    atc_stage_q<HD>(q, t, nh, h0, qp, nrot, inv_freq, sQ, sM, sL, sCos, sSin, tid);

    int hg = w & 3, part = w >> 2;        /* 16-head group; row block (S) / dim quarter (O) */
    bool hg_on = h0 + hg * 16 < nh;
    float acc[NT][4];
#pragma unroll
    for (int i = 0; i < NT; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

    for (int base = 0, it = 0; base < n; base += ATC_ROWS, it++) {
        int nr = n - base < ATC_ROWS ? n - base : ATC_ROWS;
        /* this tile's raw rows have landed (own copies, then the barrier for
         * everyone's; the barrier also ends the previous tile's reads of sK) */
        cp_async_wait<0>();
        __syncthreads();
        {
            constexpr int PER = ATC_ROWS * HD / 4 / ATC_THREADS;
#pragma unroll
            for (int j = 0; j < PER; j++) {
                int idx = tid + j * ATC_THREADS, r = idx / (HD / 4), d4 = idx - r * (HD / 4);
                uint2 hv = make_uint2(0u, 0u);
                if (r < nr) {
                    float4 v = *(const float4 *)(sRaw + r * HD + d4 * 4);
                    __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
                    hv.x = *(const uint32_t *)&a;
                    hv.y = *(const uint32_t *)&b;
                }
                *(uint2 *)(sK + r * QS + d4 * 4) = hv;
            }
        }
        __syncthreads();
        /* the next tile in flight during this one's products (the raw buffer
         * was read above) */
        if (base + ATC_ROWS < n) {
            int nr1 = n - base - ATC_ROWS < ATC_ROWS ? n - base - ATC_ROWS : ATC_ROWS;
            atcp_issue<HD>(sRaw, sRow + ((it + 1) & 1) * ATC_ROWS, nr1, tid);
        }
        /* S: warps 0-7 = 16 heads x 16 rows (two n8 accumulators, one Q fragment) */
        int rb = w >> 2;
        if (w < 8 && hg_on) {
            float s0[4] = {0.f, 0.f, 0.f, 0.f}, s1[4] = {0.f, 0.f, 0.f, 0.f};
            const __half *qa = sQ + (hg * 16 + g) * QS + 2 * c;
            const __half *kb = sK + (rb * 16 + g) * QS + 2 * c;
#pragma unroll 8
            for (int k0 = 0; k0 < HD; k0 += 16) {
                uint32_t a0 = atc_ld32(qa + k0), a1 = atc_ld32(qa + 8 * QS + k0);
                uint32_t a2 = atc_ld32(qa + k0 + 8), a3 = atc_ld32(qa + 8 * QS + k0 + 8);
                atc_mma(s0, a0, a1, a2, a3, atc_ld32(kb + k0), atc_ld32(kb + k0 + 8));
                atc_mma(s1, a0, a1, a2, a3, atc_ld32(kb + 8 * QS + k0), atc_ld32(kb + 8 * QS + k0 + 8));
            }
            float *sr = sS + (hg * 16 + g) * ATC_SS + rb * 16 + 2 * c;
            sr[0] = s0[0];
            sr[1] = s0[1];
            sr[8 * ATC_SS] = s0[2];
            sr[8 * ATC_SS + 1] = s0[3];
            sr[8] = s1[0];
            sr[9] = s1[1];
            sr[8 * ATC_SS + 8] = s1[2];
            sr[8 * ATC_SS + 9] = s1[3];
        }
        __syncthreads();
        atc_softmax(sS, sP, sM, sL, sC, nr, scale, w, lane);
        if (w == 0) {       /* tile it+2's rows, into the buffer tile it's copies read from */
            int i = base + 2 * ATC_ROWS + lane;
            sRow[(it & 1) * ATC_ROWS + lane] = i < n ? atc_row(i, nraw, qp, pos0, W, HD, ratio, kv_batch, ring, comp, sel_t) : nullptr;
        }
        __syncthreads();
        /* O += P V: warp = 16 heads x hd/4 dims */
        if (hg_on) atc_pv<HD>(acc, sP, sK, sC, hg, part, g, c, lane);
    }
    cp_async_wait<0>();     /* nothing is in flight here (no copy past the last tile); kept for safety */
    if (!hg_on) return;
    atc_finish<HD>(acc, sM, sL, sinks, sCos, sSin, nrot, t, nh, h0, hg, part, g, c, o);
}

/* MINKE_CUDA_ATT_TC_PIPE: 2 (default) k_attention_wg (cu_attn_wg.cu, sm_90a;
 * where it does not apply, 1), 1 k_attention_tcp, 0 k_attention_tc; 1 and 0
 * give the same bits. Read at each call (attn_check switches it); where the
 * pipelined kernel's shared memory is refused (sm_80: 178 KB at hd 512) the
 * launcher runs k_attention_tc. */
#define ATC_PIPE_DEFAULT 2
static int atc_pipe_mode(void) {
    const char *e = getenv("MINKE_CUDA_ATT_TC_PIPE");
    return e ? atoi(e) : ATC_PIPE_DEFAULT;
}

/* per device: 0 not tried, 1 set, -1 refused */
template <typename K> static int atc_smem_ready(int *ready, int dev, K kern, size_t smem) {
    if (!ready[dev]) {
        if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) {
            cudaGetLastError();
            ready[dev] = -1;
        } else ready[dev] = 1;
    }
    return ready[dev] > 0;
}

template <int HD>
static int atc_launch(const float *q, const float *kv_batch, const float *ring, const float *comp, const int *sel,
                      const int *nsel, int topk, const float *sinks, int T, int nh, int W, int ratio, int nrot,
                      const float *inv_freq, float scale, const int *pos0p, int pos0, float qeps, float *o,
                      unsigned *o_amax, cudaStream_t st) {
    static int ready[32], ready_p[32];
    const int dev = cu_cur_dev();
    const dim3 grid((nh + ATC_HEADS - 1) / ATC_HEADS, T);
    const int mode = atc_pipe_mode();
    if (mode == 2 && pos0 >= 0 &&
        cu_attention_wg(q, kv_batch, ring, comp, sel, nsel, topk, sinks, T, nh, HD, W, ratio, nrot, inv_freq, scale,
                        pos0p, pos0, qeps, o, o_amax, st))
        return 1;
    /* the mma.sync kernels (the same parameters): q normed in place before, o's amax after */
    const bool pipe = mode >= 1 && atc_smem_ready(ready_p, dev, k_attention_tcp<HD>, atcp_layout<HD>::bytes);
    const size_t smem = pipe ? atcp_layout<HD>::bytes : atc_layout<HD>::bytes;
    if (!pipe && !atc_smem_ready(ready, dev, k_attention_tc<HD>, smem)) return 0;
    if (qeps >= 0.f) cu_qhead_norm_rope((float *)q, T, nh, HD, nrot, inv_freq, pos0p, qeps, st);
    cu_launch(pipe ? k_attention_tcp<HD> : k_attention_tc<HD>, grid, ATC_THREADS, smem, st,
              q, kv_batch, ring, comp, sel, nsel, topk, sinks, nh, W, ratio, nrot, inv_freq, scale, pos0p, o);
    if (o_amax) cu_amax_f32(o, T, nh * HD, nh * HD, o_amax, st);
    return 1;
}

int cu_attention_tc(const float *q, const float *kv_batch, const float *ring, const float *comp, const int *sel,
                    const int *nsel, int topk, const float *sinks, int T, int nh, int hd, int W, int ratio, int nrot,
                    const float *inv_freq, float scale, const int *pos0p, int pos0, float qeps, float *o,
                    unsigned *o_amax, cudaStream_t st) {
    if (nrot > hd || nrot % 2) return 0;
    switch (hd) {
    case 128: return atc_launch<128>(q, kv_batch, ring, comp, sel, nsel, topk, sinks, T, nh, W, ratio, nrot, inv_freq, scale, pos0p, pos0, qeps, o, o_amax, st);
    case 256: return atc_launch<256>(q, kv_batch, ring, comp, sel, nsel, topk, sinks, T, nh, W, ratio, nrot, inv_freq, scale, pos0p, pos0, qeps, o, o_amax, st);
    case 512: return atc_launch<512>(q, kv_batch, ring, comp, sel, nsel, topk, sinks, T, nh, W, ratio, nrot, inv_freq, scale, pos0p, pos0, qeps, o, o_amax, st);
    default: return 0;
    }
}
