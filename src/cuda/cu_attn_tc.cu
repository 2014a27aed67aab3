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
 * MINKE_CUDA_ATT_TC=2 forces it for all models, 0 turns it off. */
#include "cuda/cu_common.cuh"
#include "cuda/cu_ops.h"
#include <cuda_fp16.h>

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
    __half *sQ = (__half *)(atc_sh + Lt::q_off);
    __half *sK = (__half *)(atc_sh + Lt::kv_off);
    float *sS = (float *)(atc_sh + Lt::s_off);
    __half *sP = (__half *)(atc_sh + Lt::p_off);
    float *sM = (float *)(atc_sh + Lt::m_off), *sL = sM + ATC_HEADS, *sC = sL + ATC_HEADS;
    float *sCos = sC + ATC_HEADS, *sSin = sCos + HD / 2;
    const float **sRow = (const float **)(atc_sh + Lt::r_off);   /* the next tile's row addresses */

    int t = blockIdx.y, h0 = blockIdx.x * ATC_HEADS;
    int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    int g = lane >> 2, c = lane & 3;
    int pos0 = *pos0p, qp = pos0 + t;
    int nraw = qp + 1 < W ? qp + 1 : W;
    int ncomp = 0;
    if (ratio == 4) ncomp = nsel[t];
    else if (ratio > 0) ncomp = (qp + 1) / ratio;
    int n = nraw + ncomp;
    const int *sel_t = sel ? sel + (int64_t)t * topk : nullptr;

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
        /* online softmax: warp = 4 heads, lane = row */
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
        if (w == 0) {       /* the next tile's rows (the staging above has read this tile's) */
            int i = base + ATC_ROWS + lane;
            sRow[lane] = i < n ? atc_row(i, nraw, qp, pos0, W, HD, ratio, kv_batch, ring, comp, sel_t) : nullptr;
        }
        __syncthreads();
        /* O += P V: warp = 16 heads x hd/4 dims */
        if (hg_on) {
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
        __syncthreads();
    }
    if (!hg_on) return;
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

template <int HD>
static int atc_launch(const float *q, const float *kv_batch, const float *ring, const float *comp, const int *sel,
                      const int *nsel, int topk, const float *sinks, int T, int nh, int W, int ratio, int nrot,
                      const float *inv_freq, float scale, const int *pos0p, float *o, cudaStream_t st) {
    static int ready[32];           /* per device: 0 not tried, 1 set, -1 refused */
    size_t smem = atc_layout<HD>::bytes;
    const int dev = cu_cur_dev();
    if (!ready[dev]) {
        if (cudaFuncSetAttribute(k_attention_tc<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) {
            cudaGetLastError();
            ready[dev] = -1;
        } else ready[dev] = 1;
    }
    if (ready[dev] < 0) return 0;
    cu_launch(k_attention_tc<HD>, dim3((nh + ATC_HEADS - 1) / ATC_HEADS, T), ATC_THREADS, smem, st,
              q, kv_batch, ring, comp, sel, nsel, topk, sinks, nh, W, ratio, nrot, inv_freq, scale, pos0p, o);
    return 1;
}

int cu_attention_tc(const float *q, const float *kv_batch, const float *ring, const float *comp, const int *sel,
                    const int *nsel, int topk, const float *sinks, int T, int nh, int hd, int W, int ratio, int nrot,
                    const float *inv_freq, float scale, const int *pos0p, float *o, cudaStream_t st) {
    if (nrot > hd || nrot % 2) return 0;
    switch (hd) {
    case 128: return atc_launch<128>(q, kv_batch, ring, comp, sel, nsel, topk, sinks, T, nh, W, ratio, nrot, inv_freq, scale, pos0p, o, st);
    case 256: return atc_launch<256>(q, kv_batch, ring, comp, sel, nsel, topk, sinks, T, nh, W, ratio, nrot, inv_freq, scale, pos0p, o, st);
    case 512: return atc_launch<512>(q, kv_batch, ring, comp, sel, nsel, topk, sinks, T, nh, W, ratio, nrot, inv_freq, scale, pos0p, o, st);
    default: return 0;
    }
}
