/* cu_mmq.cu: tensor-core matrix products for prefill batches (int8 mma.sync
 * m16n8k32 over quantized weights and quantized activations).
 *
 * Why int8 and not dequantized bf16: the activations are quantized exactly as
 * for the GEMV kernels (cu_gemv.cu) and the CPU (Q8_0_F32 for Q8_0, Q8_K for
 * the k-quants and IQ2_XXS), and every 32-element integer dot the tensor core
 * produces is the same integer the CPU's dot produces; only the order of the
 * float sums differs. No dequantized copy of the weights is needed.
 *
 * Work layout: a block of 4 warps computes 64 weight rows x 64 activation
 * rows (tokens, or (token, expert) pairs of one MoE tile built with tiles of
 * 64 by cu_moe_tiles); each warp 32 x 32. The reduction dimension runs in
 * stages of 8 items of 32 elements: weights are decoded to int8 in shared
 * memory with one float scale per item (Q2_K: scale bytes folded into the
 * codes, d/dmin per block, the min term as a second mma against the same
 * activations), activations are copied as int8 with their scales.
 *
 * Exact activations (cu_gemv_args.act_f32, MINKE_ACT_EXACT): k_mmqx takes the
 * f32 rows and splits each item into 2 int8 pieces (16 bits of its amax; 3
 * with MINKE_CUDA_MMQ_PIECES=3) while staging, one more mma per piece, the
 * piece dots combined exactly; cu_mmq_split_act + cu_mmq_presplit do the same
 * with the split in a launch of its own. Two versions of k_mmqx: V1 (default:
 * fewer float operations, Q2_K's pieces and min term summed per block in
 * int32, ldmatrix fragments, 3 blocks per SM with 3 pieces) and V0
 * (MINKE_CUDA_MMQ_X=0), the first one, kept for A/B; see "V1" below. Other
 * tilings of V1's arithmetic (the same bits), MINKE_CUDA_MMQ_V=2..7: V2 128
 * weight rows x 32 pairs, V4 128 x 64 with 8 warps, V6 256 x 32 with 8 warps
 * (odd numbers: only for MoE tiles), with a cheaper IQ2_XXS decode and
 * cp.async activation staging; see "V2" below. Q2_K's V2 kernel copies the
 * next stage's weights by cp.async during the products (MINKE_CUDA_MMQ_WPIPE,
 * default 1; the same bits; see "WP" below). Q8_0R's pre-split products in
 * V4 tiles run k_mmqp, weights and pieces double-buffered by cp.async
 * (MINKE_CUDA_MMQ_QPIPE, default 1; V4's bits; see "QP" below). F16 weights run k_mmf16
 * (cu_mmf16.cu: f16 hi + lo split of the f32 activations) in both modes.
 *
 * Types: Q8_0 (as stored and repacked, Q8_0R), IQ2_XXS (as stored and
 * repacked, IQ2R), Q2_K and MXFP4 in both modes (MXFP4 as Q8_0: 32 int8 codes
 * and one float scale per item, decoded by mq_wload); Q4_K with exact
 * activations only (V1-V6; V0 runs V1): its codes 0..15 with d sc_j per item
 * and the min term dmin m_j times the item's activation sum in float (see
 * "Q4_K" below); with q8 activations it keeps the GEMV kernels.
 */
#include <stdlib.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_split.cuh"
#include "cuda/cu_ops.h"

#define MQ_BM 64
#define MQ_BN 64
#define MQ_KI 8                   /* items of 32 elements per stage */
#define MQ_LDI (MQ_KI * 8 + 4)    /* ints per shared row; the pad spreads the banks */
#define MQ_THREADS 128
static_assert(CU_MMQ_TILE == MQ_BN, "a MoE tile (cu_moe_tiles) is one V1 block of activation rows, two of V2");

/* this file's copy of the IQ2_XXS grid (cu_tables_init fills both copies) */
__device__ uint64_t cu_mmq_grid[256];

__device__ __forceinline__ void mma_s8(int (&c)[4], int a0, int a1, int a2, int a3, int b0, int b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* One weight item (32 elements) as 8 packed int8 words and its float scale.
 * Q2_K gives codes x sub-block scale (<= 45) and no scale (per block, below). */
template <int TYPE>
__device__ __forceinline__ void mq_wload(const uint8_t *row, int it, int nit, const uint64_t *tab, int (&q)[8], float &s);

template <> __device__ __forceinline__ void mq_wload<CU_TYPE_Q8_0R>(const uint8_t *row, int it, int nit, const uint64_t *tab,
                                                                     int (&q)[8], float &s) {
    const uint4 *b = (const uint4 *)(row + (int64_t)it * 32);
    uint4 a0 = b[0], a1 = b[1];
    q[0] = (int)a0.x; q[1] = (int)a0.y; q[2] = (int)a0.z; q[3] = (int)a0.w;
    q[4] = (int)a1.x; q[5] = (int)a1.y; q[6] = (int)a1.z; q[7] = (int)a1.w;
    s = cu_h2f(((const uint16_t *)(row + (int64_t)nit * 32))[it]);
}
template <> __device__ __forceinline__ void mq_wload<CU_TYPE_Q8_0>(const uint8_t *row, int it, int nit, const uint64_t *tab,
                                                                    int (&q)[8], float &s) {
    const uint16_t *b = (const uint16_t *)(row + (int64_t)it * 34);
    s = cu_h2f(b[0]);
#pragma unroll
    for (int k = 0; k < 8; k++) q[k] = (int)((uint32_t)b[1 + 2 * k] | ((uint32_t)b[2 + 2 * k] << 16));
}
template <> __device__ __forceinline__ void mq_wload<CU_TYPE_IQ2R>(const uint8_t *row, int it, int nit, const uint64_t *tab,
                                                                    int (&q)[8], float &s) {
    int blk = it >> 3, g = it & 7;
    uint2 v = *(const uint2 *)(row + (int64_t)blk * 64 + g * 8);
    uint32_t a = v.x, w = v.y;
    cu_iq2_group_codes(a, w, tab, q);
    /* the CPU's x 0.125 is a power of two: folding it into the scale changes no rounding */
    s = cu_h2f(((const uint16_t *)(row + (int64_t)(nit >> 3) * 64))[blk]) * (float)(2 * (w >> 28) + 1) * 0.125f;
}
/* IQ2_XXS as stored (rows not 8-byte aligned, e.g. 256 wide: no repack) */
template <> __device__ __forceinline__ void mq_wload<CU_TYPE_IQ2_XXS>(const uint8_t *row, int it, int nit, const uint64_t *tab,
                                                                       int (&q)[8], float &s) {
    int blk = it >> 3, g = it & 7;
    const uint8_t *b = row + (int64_t)blk * 66;
    const uint16_t *qs = (const uint16_t *)(b + 2 + 8 * g);
    uint32_t a = (uint32_t)qs[0] | ((uint32_t)qs[1] << 16);
    uint32_t w = (uint32_t)qs[2] | ((uint32_t)qs[3] << 16);
    cu_iq2_group_codes(a, w, tab, q);
    s = cu_h2f(*(const uint16_t *)b) * (float)(2 * (w >> 28) + 1) * 0.125f;
}
template <> __device__ __forceinline__ void mq_wload<CU_TYPE_Q2_K>(const uint8_t *row, int it, int nit, const uint64_t *tab,
                                                                    int (&q)[8], float &s) {
    int blk = it >> 3, n = (it >> 2) & 1, sh = 2 * (it & 3), sb = 2 * (it & 7);
    const uint8_t *b = row + (int64_t)blk * 84;
    const int *qs = (const int *)(b + 16 + 32 * n);
    uint32_t sc0 = b[sb] & 15, sc1 = b[sb + 1] & 15;
#pragma unroll
    for (int k = 0; k < 8; k++) q[k] = (int)((((uint32_t)qs[k] >> sh) & 0x03030303u) * (k < 4 ? sc0 : sc1));
    s = 0.f;
}

/* MXFP4 (src/quant/mxfp4.c): 17 bytes per item, the E8M0 byte e, then 16 bytes
 * whose low nibbles are elements 0..15 and high nibbles 16..31. A code becomes
 * mxfp4_kvalues[code] (E2M1 doubled: 0 1 2 3 4 6 8 12, codes 8..15 the same
 * negated) and the scale e8m0_half(e) = 2^(e - 128) (f32 subnormals for e < 2),
 * so each item's integer dot and scale are dot_mxfp4_q8_0f's. The codes: one
 * PRMT per 4 nibbles from an 8-byte table of magnitudes, one from their
 * negations, the nibble's sign bit (bit 3) choosing (a table of negations, not
 * a negation: code 8, -0, must stay 0 without a carry into the next byte). */
#define MQ_E2M1_POS_LO 0x03020100u     /* magnitudes of codes 0..3, then 4..7 */
#define MQ_E2M1_POS_HI 0x0C080604u
#define MQ_E2M1_NEG_LO 0xFDFEFF00u     /* the same negated */
#define MQ_E2M1_NEG_HI 0xF4F8FAFCu
/* prmt.b32 with its sign mode (a selector nibble with bit 3 set replicates the
 * chosen byte's top bit), which __byte_perm does not document */
__device__ __forceinline__ uint32_t mq_prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}
/* 4 code bytes (elements 4k..4k+3 in the low nibbles, 16+4k..16+4k+3 in the
 * high ones) -> the int8 codes of those elements (lo, hi) */
__device__ __forceinline__ void mq_e2m1_word(uint32_t w, uint32_t &lo, uint32_t &hi) {
    /* nibble n's sign is bit 4n + 3: the top bit of a byte of w (n odd) or of w << 4 (n even) */
    const uint32_t w4 = w << 4, m0 = mq_prmt(w, w4, 0x9D8Cu), m1 = mq_prmt(w, w4, 0xBFAEu);
    const uint32_t s0 = w & 0x7777u, s1 = (w >> 16) & 0x7777u;
    /* nibbles in order: elements 4k, 16+4k, 4k+1, 16+4k+1 (v0), then 4k+2 .. (v1) */
    const uint32_t v0 = (__byte_perm(MQ_E2M1_POS_LO, MQ_E2M1_POS_HI, s0) & ~m0) |
                        (__byte_perm(MQ_E2M1_NEG_LO, MQ_E2M1_NEG_HI, s0) & m0);
    const uint32_t v1 = (__byte_perm(MQ_E2M1_POS_LO, MQ_E2M1_POS_HI, s1) & ~m1) |
                        (__byte_perm(MQ_E2M1_NEG_LO, MQ_E2M1_NEG_HI, s1) & m1);
    lo = __byte_perm(v0, v1, 0x6420);
    hi = __byte_perm(v0, v1, 0x7531);
}
template <> __device__ __forceinline__ void mq_wload<CU_TYPE_MXFP4>(const uint8_t *row, int it, int nit, const uint64_t *tab,
                                                                     int (&q)[8], float &s) {
    const uint8_t *b = row + (int64_t)it * 17;
    const uint32_t e = b[0];
    /* the 16 code bytes from the aligned words that hold them (a fifth only when they straddle one) */
    const uintptr_t a = (uintptr_t)(b + 1);
    const uint32_t *p = (const uint32_t *)(a & ~(uintptr_t)3);
    const uint32_t sh = 8 * (uint32_t)(a & 3);
    uint32_t u[5];
#pragma unroll
    for (int k = 0; k < 4; k++) u[k] = p[k];
    u[4] = sh ? p[4] : 0u;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        uint32_t lo, hi;
        mq_e2m1_word(__funnelshift_r(u[k], u[k + 1], sh), lo, hi);
        q[k] = (int)lo;
        q[4 + k] = (int)hi;
    }
    s = __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1u) << 23);
}

/* ---- Q4_K (exact activations only) ----
 * A block of 256 (144 bytes: d, dmin as f16, 12 bytes of 6-bit scales and
 * mins, 128 bytes of nibbles) is one stage of 8 items, item j its sub-block j:
 * w = d sc_j q - dmin m_j, q = 0..15. q sc_j does not fit int8, so the codes
 * are q with the item scale d sc_j (an exact float: 11 x 6 bits), as Q8_0's;
 * the min term, -dmin m_j times the sum of the item's activations, is one
 * FFMA per output and item: the weight side -dmin m_j per row and item (smn),
 * the activation side D S (ssx: S the exact int32 sum of the item's piece
 * integers, mq_item_xsum), both in shared memory. One more FFMA per output and
 * item than Q8_0; the codes need no table. */
__device__ __forceinline__ void mq_q4k_item(const uint8_t *row, int it, int (&q)[8], float &s, float &mn) {
    const int j = it & 7;
    const uint8_t *b = row + (int64_t)(it >> 3) * 144;
    /* 16-byte loads, as cu_gemv.cu's XW<CU_TYPE_Q4_K> (blocks 16-byte aligned) */
    const uint4 h = *(const uint4 *)b;              /* d | dmin, scales[0..11] */
    const uint4 c0 = *(const uint4 *)(b + 16 + 32 * (j >> 1)), c1 = *(const uint4 *)(b + 32 + 32 * (j >> 1));
    const int sh = 4 * (j & 1);
    q[0] = (int)((c0.x >> sh) & 0x0F0F0F0Fu); q[1] = (int)((c0.y >> sh) & 0x0F0F0F0Fu);
    q[2] = (int)((c0.z >> sh) & 0x0F0F0F0Fu); q[3] = (int)((c0.w >> sh) & 0x0F0F0F0Fu);
    q[4] = (int)((c1.x >> sh) & 0x0F0F0F0Fu); q[5] = (int)((c1.y >> sh) & 0x0F0F0F0Fu);
    q[6] = (int)((c1.z >> sh) & 0x0F0F0F0Fu); q[7] = (int)((c1.w >> sh) & 0x0F0F0F0Fu);
    /* q4_K_scale_min: j < 4: scales[j] & 63, scales[j + 4] & 63; j >= 4: the low nibbles of
     * scales[j + 4], the top 2 bits of scales[j - 4] and scales[j] (branch-free: j is per lane) */
    const int k = 8 * (j & 3);
    const uint32_t bs = (h.y >> k) & 255, bm = (h.z >> k) & 255, bl = (h.w >> k) & 255;
    const uint32_t sc = j < 4 ? bs & 63 : (bl & 15) | ((bs >> 6) << 4);
    const uint32_t m = j < 4 ? bm & 63 : (bl >> 4) | ((bm >> 6) << 4);
    s = cu_h2f((uint16_t)h.x) * (float)sc;
    mn = cu_h2f((uint16_t)(h.x >> 16)) * (float)m;
}
/* The sum of an item's activations from its P staged pieces (w: word 0 of piece 0,
 * pstride ints between pieces) and D: D S in the units of x (S = the sum of the 32
 * integers q, exact in int32: |S| <= 32 x 2^23; x = D q, with 3 pieces D q / 256) */
template <int P>
__device__ __forceinline__ float mq_item_xsum(const int *w, int pstride, float D) {
    int S = 0;
#pragma unroll
    for (int p = 0; p < P; p++) {
        const int4 a = *(const int4 *)(w + p * pstride), c = *(const int4 *)(w + p * pstride + 4);
        int t = __dp4a(a.x, 0x01010101, 0);
        t = __dp4a(a.y, 0x01010101, t); t = __dp4a(a.z, 0x01010101, t); t = __dp4a(a.w, 0x01010101, t);
        t = __dp4a(c.x, 0x01010101, t); t = __dp4a(c.y, 0x01010101, t);
        t = __dp4a(c.z, 0x01010101, t); t = __dp4a(c.w, 0x01010101, t);
        S = S * 256 + t;
    }
    return D * ((float)S * (P == 3 ? 1.f / 256.f : 1.f));
}

/* MINB: blocks per SM the register allocation must allow. 1 (MINKE_CUDA_MMQ_OCC=1):
 * the compiler's choice, 162-254 registers, 2 blocks for Q8_0/IQ2_XXS; 3 (the
 * default): <= 168 registers without spills, 3 blocks, +8.6% prefill on the
 * H200 (bit-identical results); 4: <= 128 registers with 20-200 bytes spilled,
 * no faster than 3. */
#define MQ_OCC_DEFAULT 3
template <int TYPE, int MINB>
__global__ void __launch_bounds__(MQ_THREADS, MINB) k_mmq(cu_gemv_args g) {
    cu_pdl_enter();
    constexpr bool Q2K = TYPE == CU_TYPE_Q2_K;
    constexpr bool ACT_K = TYPE == CU_TYPE_Q2_K || TYPE == CU_TYPE_IQ2R || TYPE == CU_TYPE_IQ2_XXS;   /* Q8_K activations */
    constexpr bool IQ2 = TYPE == CU_TYPE_IQ2R || TYPE == CU_TYPE_IQ2_XXS;
    __shared__ __align__(16) int sw[MQ_BM * MQ_LDI];
    __shared__ __align__(16) int sa[MQ_BN * MQ_LDI];
    __shared__ float sws[MQ_BM * MQ_KI];    /* per item; Q2_K: [0] = d, [1] = dmin of the block */
    __shared__ float sas[MQ_BN * MQ_KI];
    __shared__ uint8_t smin[Q2K ? MQ_BM * 16 : 4];
    __shared__ uint64_t sgrid[IQ2 ? 256 : 1];
    __shared__ int sid[MQ_BN];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gq = lane >> 2, tq = lane & 3;
    const int wm = (warp & 1) * 32, wn = (warp >> 1) * 32;
    const int64_t r0 = (int64_t)blockIdx.x * MQ_BM;
    const uint8_t *wbase = (const uint8_t *)g.w;
    int nt;
    if (g.tile_pairs) {
        int tile = blockIdx.y;
        if (tile >= *g.n_tiles) return;
        int start = g.tile_start[tile];
        nt = g.tile_count[tile];
        if (nt <= 0) return;              /* a pair of an expert another GPU owns */
        wbase += (int64_t)g.tile_expert[tile] * g.expert_bytes;
        for (int k = tid; k < MQ_BN; k += MQ_THREADS) sid[k] = g.tile_pairs[start + (k < nt ? k : 0)];
    } else {
        int t0 = blockIdx.y * MQ_BN;
        nt = g.ntok - t0 < MQ_BN ? g.ntok - t0 : MQ_BN;
        for (int k = tid; k < MQ_BN; k += MQ_THREADS) sid[k] = t0 + (k < nt ? k : 0);
    }
    const uint64_t *tab = sgrid;
    if (IQ2)
        for (int i = tid; i < 256; i += MQ_THREADS) sgrid[i] = cu_mmq_grid[i];
    __syncthreads();
    const int nit = g.items;
    /* rows this thread loads: r = tid / 8 + 16 j, item tid % 8 (8 threads per row, coalesced) */
    constexpr int NJ = MQ_BM * MQ_KI / MQ_THREADS;
    const int li = tid & 7;
    const uint8_t *wrow[NJ];
    const uint8_t *arow[NJ];
    int64_t aoff = g.group_rows ? (r0 / g.group_rows) * g.group_act_bytes : 0;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        int r = (tid >> 3) + 16 * j;
        int64_t row = r0 + r < g.rows ? r0 + r : g.rows - 1;
        wrow[j] = wbase + row * (int64_t)g.row_bytes;
        arow[j] = (const uint8_t *)g.act + (int64_t)(sid[r] / g.act_div) * g.act_stride + aoff;
    }
    float acc[2][4][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 4; b++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[a][b][c] = 0.f;

    for (int it0 = 0; it0 < nit; it0 += MQ_KI) {
        const int it = it0 + li;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            int r = (tid >> 3) + 16 * j;
            int q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            float s = 0.f;
            if (it < nit) mq_wload<TYPE>(wrow[j], it, nit, tab, q, s);
            int4 *d = (int4 *)&sw[r * MQ_LDI + li * 8];
            d[0] = make_int4(q[0], q[1], q[2], q[3]);
            d[1] = make_int4(q[4], q[5], q[6], q[7]);
            if (Q2K) {
                if (li == 0) {
                    const uint8_t *b = wrow[j] + (int64_t)(it0 >> 3) * 84;
                    sws[r * MQ_KI + 0] = cu_h2f(*(const uint16_t *)(b + 80));
                    sws[r * MQ_KI + 1] = cu_h2f(*(const uint16_t *)(b + 82));
                } else if (li == 1) {
                    const uint8_t *b = wrow[j] + (int64_t)(it0 >> 3) * 84;
#pragma unroll
                    for (int k = 0; k < 16; k++) smin[r * 16 + k] = b[k] >> 4;
                }
            } else {
                sws[r * MQ_KI + li] = s;
            }
            /* activations of token slot r, item it */
            int aq[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            float as = 0.f;
            if (it < nit) {
                const int *p;
                if (ACT_K) {
                    const cu_block_q8_K *ab = (const cu_block_q8_K *)arow[j] + (it >> 3);
                    as = ab->d;
                    p = (const int *)(ab->q + 32 * (it & 7));
                } else {
                    const cu_block_q8_0f *ab = (const cu_block_q8_0f *)arow[j] + it;
                    as = ab->d;
                    p = (const int *)ab->q;
                }
#pragma unroll
                for (int k = 0; k < 8; k++) aq[k] = p[k];
            }
            int4 *e = (int4 *)&sa[r * MQ_LDI + li * 8];
            e[0] = make_int4(aq[0], aq[1], aq[2], aq[3]);
            e[1] = make_int4(aq[4], aq[5], aq[6], aq[7]);
            sas[r * MQ_KI + li] = as;
        }
        __syncthreads();
        if (Q2K) {
            int ci[2][4][4], cm[2][4][4];
#pragma unroll
            for (int a = 0; a < 2; a++)
#pragma unroll
                for (int b = 0; b < 4; b++)
#pragma unroll
                    for (int c = 0; c < 4; c++) { ci[a][b][c] = 0; cm[a][b][c] = 0; }
#pragma unroll
            for (int i = 0; i < MQ_KI; i++) {
                int bf[4][2];
#pragma unroll
                for (int n4 = 0; n4 < 4; n4++) {
                    int rb = (wn + n4 * 8 + gq) * MQ_LDI + i * 8 + tq;
                    bf[n4][0] = sa[rb]; bf[n4][1] = sa[rb + 4];
                }
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    int rw = wm + mt * 16 + gq;
                    int ra = rw * MQ_LDI + i * 8 + tq;
                    int a0 = sw[ra], a1 = sw[ra + 8 * MQ_LDI], a2 = sw[ra + 4], a3 = sw[ra + 8 * MQ_LDI + 4];
                    /* the min term: every element of sub-block j carries mins[j] */
                    int m0 = (int)(smin[rw * 16 + 2 * i] * 0x01010101u);
                    int m1 = (int)(smin[(rw + 8) * 16 + 2 * i] * 0x01010101u);
                    int m2 = (int)(smin[rw * 16 + 2 * i + 1] * 0x01010101u);
                    int m3 = (int)(smin[(rw + 8) * 16 + 2 * i + 1] * 0x01010101u);
#pragma unroll
                    for (int n4 = 0; n4 < 4; n4++) {
                        mma_s8(ci[mt][n4], a0, a1, a2, a3, bf[n4][0], bf[n4][1]);
                        mma_s8(cm[mt][n4], m0, m1, m2, m3, bf[n4][0], bf[n4][1]);
                    }
                }
            }
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                int rw = wm + mt * 16 + gq;
                float d0 = sws[rw * MQ_KI], dm0 = sws[rw * MQ_KI + 1];
                float d1 = sws[(rw + 8) * MQ_KI], dm1 = sws[(rw + 8) * MQ_KI + 1];
#pragma unroll
                for (int n4 = 0; n4 < 4; n4++) {
                    int tk = wn + n4 * 8 + 2 * tq;
                    float ad0 = sas[tk * MQ_KI], ad1 = sas[(tk + 1) * MQ_KI];
                    acc[mt][n4][0] += ad0 * d0 * (float)ci[mt][n4][0] - ad0 * dm0 * (float)cm[mt][n4][0];
                    acc[mt][n4][1] += ad1 * d0 * (float)ci[mt][n4][1] - ad1 * dm0 * (float)cm[mt][n4][1];
                    acc[mt][n4][2] += ad0 * d1 * (float)ci[mt][n4][2] - ad0 * dm1 * (float)cm[mt][n4][2];
                    acc[mt][n4][3] += ad1 * d1 * (float)ci[mt][n4][3] - ad1 * dm1 * (float)cm[mt][n4][3];
                }
            }
        } else {
#pragma unroll
            for (int i = 0; i < MQ_KI; i++) {
                int bf[4][2];
                float as[4][2];
#pragma unroll
                for (int n4 = 0; n4 < 4; n4++) {
                    int tk = wn + n4 * 8 + gq;
                    int rb = tk * MQ_LDI + i * 8 + tq;
                    bf[n4][0] = sa[rb]; bf[n4][1] = sa[rb + 4];
                    int tc = wn + n4 * 8 + 2 * tq;
                    as[n4][0] = sas[tc * MQ_KI + i]; as[n4][1] = sas[(tc + 1) * MQ_KI + i];
                }
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    int rw = wm + mt * 16 + gq;
                    int ra = rw * MQ_LDI + i * 8 + tq;
                    int a0 = sw[ra], a1 = sw[ra + 8 * MQ_LDI], a2 = sw[ra + 4], a3 = sw[ra + 8 * MQ_LDI + 4];
                    float w0 = sws[rw * MQ_KI + i], w1 = sws[(rw + 8) * MQ_KI + i];
#pragma unroll
                    for (int n4 = 0; n4 < 4; n4++) {
                        int c[4] = {0, 0, 0, 0};
                        mma_s8(c, a0, a1, a2, a3, bf[n4][0], bf[n4][1]);
                        acc[mt][n4][0] += (float)c[0] * (w0 * as[n4][0]);
                        acc[mt][n4][1] += (float)c[1] * (w0 * as[n4][1]);
                        acc[mt][n4][2] += (float)c[2] * (w1 * as[n4][0]);
                        acc[mt][n4][3] += (float)c[3] * (w1 * as[n4][1]);
                    }
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int n4 = 0; n4 < 4; n4++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int64_t row = r0 + wm + mt * 16 + gq + (c >> 1) * 8;
                int n = wn + n4 * 8 + 2 * tq + (c & 1);
                if (row < g.rows && n < nt) {
                    float *o = g.out + (int64_t)sid[n] * g.out_stride + row;
                    if (g.accumulate) *o += acc[mt][n4][c]; else *o = acc[mt][n4][c];
                }
            }
}

/* ------------------------------------------------------------------ */
/* Exact activations (cu_gemv_args.act_f32: MINKE_ACT_EXACT). The f32
 * activation rows are split into P int8 pieces while the tile is staged in
 * shared memory: per scale group (an item of 32 elements; Q2_K: its block of
 * 256), amax over the group and D = amax / (127 * 256);
 *   P = 2: q = rint(x / D) in [-32512, 32512] = 256 hi + lo, hi in [-127, 127],
 *          lo in [-128, 127]; x = D q within D / 2 (16 bits of the group's amax);
 *   P = 3: q = rint(256 x / D) (24 bits) = 65536 top + 256 mid + lo.
 * Each piece is one more s8 mma against the same weight codes. Per item each
 * piece's dot is an exact integer (< 2^22, read as a float without I2F:
 * mx_dot_f), dot = 256 dot_hi + dot_lo (+ dot_3 / 256) in one FFMA (one
 * rounding) and scaled once by d_w D, so the epilogue keeps one scale per
 * item. Q2_K keeps its per-block integer sums, 256 (hi dots) + (lo dots)
 * (<= 256 * 45 * 32512 < 2^31; P = 3: the third piece per item in float), and
 * its per-block epilogue, which is why its activation scale is per block of
 * 256 there.
 *
 * Every block that stages an activation row computes the same pieces with
 * the same instructions, so results do not depend on the grid, and there is
 * no extra launch or scratch buffer (cu_mmq_presplit below: the alternative
 * with a split launch into a buffer). Loads are coalesced: the 8 threads of a
 * row each read one float4 of each of the stage's 8 items (one 128-byte line
 * per 8 threads), and the group amax is 3 shuffles within those 8 threads. */


/* mx_mma_s8 (d = A.B + c, the same c in all four accumulators), mx_dot_f,
 * mx_split4, mx_inv_scale and the magic accumulator start
 * (MX_MAGIC_BITS: a piece dot read as a float without I2F) are in
 * cu_split.cuh, shared with the decode kernels of cu_gemv3.cu. */

/* The pieces of one activation row over one stage of 8 items, by the 8
 * threads li = 0..7 of an aligned group of 8 lanes: thread li reads float4 li
 * of each item (arow points at item 0's float4 li), so each item is one
 * 128-byte line per group and its amax 3 shuffles. Piece p's word li of item
 * i goes to dst[p * pstride + i * istride + li], D to dsc[i] (BLK: one scale
 * for the 8 items, Q2_K's block; nvalid items of the 8 exist, the rest are 0).
 * k_mmqx stages into shared memory with it and k_mmq_split writes pre-split
 * rows with it: the same instructions, the same pieces. */
template <bool BLK, int P>
__device__ __forceinline__ void mx_split_stage(const uint8_t *arow, int nvalid, int nstore, int nd, int li, int *dst,
                                               int pstride, int istride, float *dsc) {
    if (BLK) {
        float4 v[MQ_KI];
        float m = 0.f;
#pragma unroll
        for (int i = 0; i < MQ_KI; i++) {
            v[i] = i < nvalid ? __ldg((const float4 *)(arow + i * 128)) : make_float4(0.f, 0.f, 0.f, 0.f);
            m = fmaxf(m, fmaxf(fmaxf(fabsf(v[i].x), fabsf(v[i].y)), fmaxf(fabsf(v[i].z), fabsf(v[i].w))));
        }
#pragma unroll
        for (int o = 1; o < 8; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        float idv = mx_inv_scale<P>(m), D = m * (1.f / 32512.f);
#pragma unroll
        for (int i = 0; i < MQ_KI; i++) {
            int pc[P];
            mx_split4<P>(v[i], idv, pc);
            if (i < nstore) {
#pragma unroll
                for (int p = 0; p < P; p++) dst[p * pstride + i * istride + li] = pc[p];
                if (li == 0 && i < nd) dsc[i] = D;
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < MQ_KI; i++) {
            float4 v = i < nvalid ? __ldg((const float4 *)(arow + i * 128)) : make_float4(0.f, 0.f, 0.f, 0.f);
            float m = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
            for (int o = 1; o < 8; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
            float idv = mx_inv_scale<P>(m);
            int pc[P];
            mx_split4<P>(v, idv, pc);
            if (i < nstore) {
#pragma unroll
                for (int p = 0; p < P; p++) dst[p * pstride + i * istride + li] = pc[p];
                if (li == 0 && i < nd) dsc[i] = m * (1.f / 32512.f);
            }
        }
    }
}

/* ---- V1 (default; MINKE_CUDA_MMQ_X=0 gives V0, the first version) ----
 * Where V0's time went (instruction counts per stage from the source and
 * ptxas -v; no disassembler here): with 3 pieces every output item spent
 * 3 FADD (the magic offsets) + 2 FFMA (combine) + FMUL + FFMA, Q2_K's third
 * piece was converted per item (8 I2F per mma pair, on the slow conversion
 * pipe) and its min term took one more mma per piece and item; 76 KB of
 * shared memory kept 2 blocks per SM. V1:
 * - the magic offsets cancel inside the combine constants: per output item
 *   fma(h, 256, -K) (exact), + m (one rounding), fma(., 256, l) (one rounding),
 *   the 1/256 of the third piece folded into the weight scale (a power of two);
 * - Q2_K: each piece's dots summed over the block of 256 in an int32 that
 *   starts at the magic bits (|sum| < 2^22: exact float, no I2F), folded once
 *   per block as above; the min term from the 16 sub-block sums S_j of the
 *   activation integers (exact in int32, written as 4 signed base-256 digits
 *   while staging): 4 mma per block instead of one per piece and item;
 * - fragments by ldmatrix (one instruction per 4 of V0's 32-bit loads);
 * - shared memory trimmed per type (no grid without IQ2, one D per Q2_K block):
 *   <= 75.5 KB, so 3 blocks per SM with 3 pieces (168 registers).
 * The integers are the same; the float roundings per output (order, not count)
 * differ from V0, and are the same in every launch shape. */
template <int TYPE, int P, int V, bool WP = false>
struct mx_lay {
    static constexpr bool Q2K = TYPE == CU_TYPE_Q2_K;
    static constexpr bool IQ2 = TYPE == CU_TYPE_IQ2R || TYPE == CU_TYPE_IQ2_XXS;
    static constexpr bool Q4K = TYPE == CU_TYPE_Q4_K;
    /* V2 (wide tiles, see "V2" below): 128 weight rows x 32 activation rows; V4: 128 x 64,
     * 8 warps; V6: 256 x 32, 8 warps */
    static constexpr int BM = V == 6 ? 4 * MQ_BM : V >= 2 ? 2 * MQ_BM : MQ_BM;
    static constexpr int BN = (V == 2 || V == 6) ? MQ_BN / 2 : MQ_BN;
    static constexpr int THREADS = (V == 4 || V == 6) ? 2 * MQ_THREADS : MQ_THREADS;
    static constexpr int LDS = BN * MQ_LDI;                                /* ints of one activation piece */
    static constexpr int n_ws = (V && Q2K) ? BM * 2 : BM * MQ_KI;          /* floats */
    static constexpr int n_as = (V && Q2K) ? BN : BN * MQ_KI;              /* floats */
    static constexpr int n_sum = (V && Q2K) ? BN * 16 : 0;                 /* ints */
    static constexpr int n_grid = (!V || IQ2) ? 256 : 0;                   /* uint64 */
    static constexpr int n_smask = (V >= 2 && IQ2) ? 128 : 0;              /* uint64: mq_wload_tab's sign masks */
    static constexpr int n_min = (!V || Q2K) ? BM * 16 : 0;                /* bytes */
    static constexpr int n_mn = Q4K ? BM * MQ_KI : 0;                      /* floats: Q4_K's -dmin m_j */
    static constexpr int n_sx = Q4K ? BN * MQ_KI : 0;                      /* floats: Q4_K's item sums D S */
    static constexpr size_t o_sa = (size_t)BM * MQ_LDI * 4;
    static constexpr size_t o_ws = o_sa + (size_t)P * LDS * 4;
    static constexpr size_t o_as = o_ws + (size_t)n_ws * 4;
    static constexpr size_t o_sum = o_as + (size_t)n_as * 4;
    static constexpr size_t o_grid = o_sum + (size_t)n_sum * 4;
    static constexpr size_t o_off = o_grid + (size_t)(n_grid + n_smask) * 8;
    static constexpr size_t o_min = o_off + (size_t)BN * 8;
    static constexpr size_t o_id = o_min + (size_t)n_min;
    static constexpr size_t o_mn = o_id + (size_t)BN * 4;
    static constexpr size_t o_sx = o_mn + (size_t)n_mn * 4;
    static constexpr size_t o_end = o_sx + (size_t)n_sx * 4;
    /* WP (MINKE_CUDA_MMQ_WPIPE, Q2_K in V2 tiles): the next stage's raw blocks, 64 code bytes per
     * row, then d|dmin per row (the 16 scale bytes go to the pad of the row's sw line) */
    static constexpr size_t o_raw = (o_end + 15) & ~(size_t)15;
    static constexpr size_t bytes = WP ? o_raw + (size_t)BM * (64 + 4) : o_end;
};

/* 4 8x8 b16 matrices from shared memory: lane L gives the address of row L % 8
 * of matrix L / 8 (16 bytes) and gets int L % 4 of row L / 4 of each: the
 * m16n8k32 s8 fragment layout. */
__device__ __forceinline__ void ldsm4(int (&r)[4], unsigned a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm4(int (&r)[4], const void *p) { ldsm4(r, (unsigned)__cvta_generic_to_shared(p)); }
/* 2 of them (lanes 0..15 give the addresses) */
__device__ __forceinline__ void ldsm2(int (&r)[2], unsigned a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}
/* v, opaque to the compiler: per-stage copies of the fragment base addresses, so
 * that the unrolled loads' addresses (base + constant) are not all hoisted out
 * of the stage loop into registers of their own */
__device__ __forceinline__ unsigned mx_opaque(unsigned v) {
    asm volatile("mov.b32 %0, %0;\n" : "+r"(v));
    return v;
}

/* fold constants: 257 magics (h x 256 + m) and, with 3 pieces, the magic / 256
 * that fma(., 256, l) adds back; both exact floats (771 x 2^22, 197379 x 2^14) */
#define MX_K2 (257.f * MX_MAGIC)
#define MX_K3 (257.f * MX_MAGIC + MX_MAGIC / 256.f)

/* One item of V4's products for a warp's 32 x 32 outputs (k_mmqx's V path and
 * k_mmqp): the weight fragments of both row tiles, then per 16-token half the
 * P pieces' fragments, P mma per 16 x 8 tile and the fold of each output:
 * 256 h exact, + m one rounding, (x 256 + l) one rounding, times d_w D. KI:
 * items per shared row of scales, LD: ints per shared code row, LDS: ints of
 * one activation piece. One copy, so both kernels have the same bits. MIN
 * (Q4_K): then + the min term, smn (weight row, item) x ssx (activation row,
 * item), one more FFMA per output. */
template <int P, int KI, int LD, int LDS, bool MIN = false>
__device__ __forceinline__ void mx_item_v4(float (&acc)[2][4][4], unsigned wl, unsigned al, int i, int wm, int wn, int gq,
                                           int tq, const float *sws, const float *sas, const float *smn = nullptr,
                                           const float *ssx = nullptr) {
    int af[2][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++) ldsm4(af[mt], wl + (mt * 16 * LD + i * 8) * 4);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        /* token tiles 2h and 2h + 1: b0, b1 of each, per piece */
        int bf[P][4];
#pragma unroll
        for (int p = 0; p < P; p++) ldsm4(bf[p], al + (p * LDS + h * 16 * LD + i * 8) * 4);
#pragma unroll
        for (int nn = 0; nn < 2; nn++) {
            const int n4 = 2 * h + nn;
            const int tc = wn + n4 * 8 + 2 * tq;
            const float as0 = sas[tc * KI + i], as1 = sas[(tc + 1) * KI + i];
            const float sx0 = MIN ? ssx[tc * KI + i] : 0.f, sx1 = MIN ? ssx[(tc + 1) * KI + i] : 0.f;
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                int hv[4], mv[4], lv[4];
                mx_mma_s8(hv, af[mt][0], af[mt][1], af[mt][2], af[mt][3], bf[0][2 * nn], bf[0][2 * nn + 1], MX_MAGIC_BITS);
                mx_mma_s8(mv, af[mt][0], af[mt][1], af[mt][2], af[mt][3], bf[1][2 * nn], bf[1][2 * nn + 1], MX_MAGIC_BITS);
                if (P == 3)
                    mx_mma_s8(lv, af[mt][0], af[mt][1], af[mt][2], af[mt][3], bf[P - 1][2 * nn], bf[P - 1][2 * nn + 1],
                              MX_MAGIC_BITS);
                const int rw = wm + mt * 16 + gq;
                const float w0 = sws[rw * KI + i], w1 = sws[(rw + 8) * KI + i];
                const float sc[4] = {w0 * as0, w0 * as1, w1 * as0, w1 * as1};
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    float dot = __fadd_rn(__fmaf_rn(__int_as_float(hv[k]), 256.f, P == 3 ? -MX_K3 : -MX_K2),
                                          __int_as_float(mv[k]));
                    if (P == 3) dot = __fmaf_rn(dot, 256.f, __int_as_float(lv[k]));
                    acc[mt][n4][k] = __fmaf_rn(dot, sc[k], acc[mt][n4][k]);
                    if (MIN) acc[mt][n4][k] = __fmaf_rn(smn[(rw + (k >> 1) * 8) * KI + i], (k & 1) ? sx1 : sx0, acc[mt][n4][k]);
                }
            }
        }
    }
}

/* Q2_K (V1): the sums S_j of the activation integers q over sub-blocks j = 2 li
 * and 2 li + 1 of row r (x: item li's P pieces, piece 0 the most significant;
 * |S| <= 16 x 8323072 < 2^27), as 4 signed base-256 digits (the low three with
 * the 0x80 offset trick, the top one in [-8, 8]). Digit b of sub-blocks 4c..4c+3
 * is int c of the row's 16-byte segment b ^ ((r >> 1) & 3) (the xor spreads the
 * rows of one ldmatrix over the banks). */
template <int P>
__device__ __forceinline__ void mx_q2k_sums(const int4 (&x)[P][2], int r, int li, uint8_t *ssum) {
    uint32_t w[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int s = 0;
#pragma unroll
        for (int p = 0; p < P; p++) {
            int t = __dp4a(x[p][h].x, 0x01010101, 0);
            t = __dp4a(x[p][h].y, 0x01010101, t);
            t = __dp4a(x[p][h].z, 0x01010101, t);
            t = __dp4a(x[p][h].w, 0x01010101, t);
            s = s * 256 + t;
        }
        w[h] = ((uint32_t)s + 0x808080u) ^ 0x808080u;
    }
    uint8_t *row = ssum + r * 64 + 2 * li;
    const int sw = (r >> 1) & 3;
#pragma unroll
    for (int b = 0; b < 4; b++) *(uint16_t *)(row + ((b ^ sw) * 16)) = (uint16_t)__byte_perm(w[0], w[1], b | ((4 + b) << 4));
}

/* cp.async (sm_80+): n of the 16 (4) bytes at src into shared dst, the rest zeros;
 * src must be a valid address even when n = 0 */
__device__ __forceinline__ void mq_cp16(unsigned dst, const void *src, int n) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void mq_cp4(unsigned dst, const void *src, int n) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void mq_cp_wait() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

/* V2+ weight decode: IQ2_XXS with the signs of a group from a table of 128
 * byte masks in shared memory (0xFF where the element is negative; the 8th
 * sign is the parity of the 7 stored ones) and the negation as (g ^ m) + (m &
 * 1) per byte: the grid's bytes are 8, 25 or 43, so ~g + 1 <= 248 carries into
 * no other byte. The same codes and scales as mq_wload (cu_iq2_group_codes)
 * in ~35 instructions per item instead of ~90 (the parity, the mask
 * arithmetic and __vsub4's emulation, and the odd scale factor converted
 * without I2F). Other types: mq_wload. */
__device__ __forceinline__ uint64_t mq_sign_mask(int s7) {
    uint32_t S = (uint32_t)s7 | ((__popc(s7) & 1) << 7);
    uint64_t m = 0;
#pragma unroll
    for (int k = 0; k < 8; k++)
        if ((S >> k) & 1) m |= (uint64_t)0xFF << (8 * k);
    return m;
}
__device__ __forceinline__ void mq_iq2_codes_tab(uint32_t a, uint32_t w, const uint64_t *grid, const uint64_t *smask,
                                                 int (&v)[8]) {
#pragma unroll
    for (int l = 0; l < 4; l++) {
        uint64_t gv = grid[(a >> (8 * l)) & 255];
        uint64_t m = smask[(w >> (7 * l)) & 127];
        uint32_t m0 = (uint32_t)m, m1 = (uint32_t)(m >> 32);
        v[2 * l] = (int)(((uint32_t)gv ^ m0) + (m0 & 0x01010101u));
        v[2 * l + 1] = (int)(((uint32_t)(gv >> 32) ^ m1) + (m1 & 0x01010101u));
    }
}
/* 2 (w >> 28) + 1 as a float: exact from the bits of 2^23 + k (no I2F) */
__device__ __forceinline__ float mq_odd_f(uint32_t w) {
    return __int_as_float(0x4B000000 | (2 * (w >> 28) + 1)) - 8388608.f;
}
/* One IQ2 item (IQ2R or IQ2_XXS as stored): its codes, the word whose top 4
 * bits are the item's ls, and its block's d */
template <int TYPE>
__device__ __forceinline__ void mq_iq2_item(const uint8_t *row, int it, int nit, const uint64_t *tab, const uint64_t *smask,
                                            int (&q)[8], uint32_t &w, float &d) {
    static_assert(TYPE == CU_TYPE_IQ2R || TYPE == CU_TYPE_IQ2_XXS, "IQ2 weights");
    const int blk = it >> 3, g = it & 7;
    if constexpr (TYPE == CU_TYPE_IQ2R) {
        const uint2 v = *(const uint2 *)(row + (int64_t)blk * 64 + g * 8);
        mq_iq2_codes_tab(v.x, v.y, tab, smask, q);
        w = v.y;
        d = cu_h2f(((const uint16_t *)(row + (int64_t)(nit >> 3) * 64))[blk]);
    } else {
        const uint8_t *b = row + (int64_t)blk * 66;
        const uint16_t *qs = (const uint16_t *)(b + 2 + 8 * g);
        const uint32_t a = (uint32_t)qs[0] | ((uint32_t)qs[1] << 16);
        w = (uint32_t)qs[2] | ((uint32_t)qs[3] << 16);
        mq_iq2_codes_tab(a, w, tab, smask, q);
        d = cu_h2f(*(const uint16_t *)b);
    }
}
template <int TYPE>
__device__ __forceinline__ void mq_wload_tab(const uint8_t *row, int it, int nit, const uint64_t *tab, const uint64_t *smask,
                                             int (&q)[8], float &s) {
    if constexpr (TYPE == CU_TYPE_IQ2R || TYPE == CU_TYPE_IQ2_XXS) {
        uint32_t w;
        float d;
        mq_iq2_item<TYPE>(row, it, nit, tab, smask, q, w, d);
        s = d * mq_odd_f(w) * 0.125f;
    } else {
        mq_wload<TYPE>(row, it, nit, tab, q, s);
    }
}

/* ---- V2 (MINKE_CUDA_MMQ_V=2; 3: only for MoE tiles) ----
 * Wide tiles: a block computes 128 weight rows x 32 activation rows (V1: 64 x
 * 64), each warp the same 32 x 32 with the same per-output arithmetic, so the
 * results are V1's bit for bit. Why: with 3 pieces an activation element is
 * 3.125 bytes pre-split against 0.26 (IQ2_XXS) or 0.33 (Q2_K) for a weight,
 * and every 64-row block re-reads each of its pairs' rows: Flash's MoE gate
 * read ~13 GB of activations per launch (2.2 TB/s, against ~4.5 GB for the q8
 * kernel). 128 rows per block halve that; the weight decode per output
 * doubles (a tenth of the instructions for IQ2_XXS). And a MoE tile of 64
 * pairs runs as two blocks of 32: the second half of an expert's last tile
 * (4096 tokens x 6 of 256 experts: ~96 pairs, so 64 + 32) exits at once
 * instead of computing 32 empty slots, and slots past the last pair are not
 * loaded (zeros). Shared memory 64-68 KB: 3 blocks per SM as V1. (A skip of
 * empty 16-pair steps inside the product loop cost ~50 registers of
 * scheduling freedom per ptxas; V2 does not need it.) Staging, for V2, V4 and
 * V6: IQ2_XXS decoded by mq_wload_tab (the decode runs per 32 pairs now, so
 * it is made ~2.5x cheaper), and pre-split activation pieces copied by
 * cp.async issued before the weight decode (Q2_K: its sub-block sums then
 * read the pieces back from shared memory after one more barrier). ptxas -v (sm_90a, 3 pieces, pre-split): V2 168
 * registers, no spills (IQ2R, IQ2_XXS, Q8_0R, Q2_K); V6 128, none; V4 128, 16
 * bytes for IQ2R and Q8_0R.
 * V4 (MINKE_CUDA_MMQ_V=4; 5: only for MoE tiles): 128 rows x 64 activation
 * rows with 8 warps (4 x 2 of 32 x 32), __launch_bounds__(256, 2): V2's
 * activation traffic per output with V1's weight decode per output; 2 blocks
 * of ~95 KB per SM (16 warps against V1's 12) under a 128-register cap.
 * One block per MoE tile; a warp whose 32 activation rows are all past the
 * tile's last pair skips the products (the upper 4 warps of a tile of <= 32
 * pairs idle while the SM's others run). Q2_K runs V2 (spills at 128
 * registers). Same bits as V1.
 * V6 (MINKE_CUDA_MMQ_V=6; 7: only for MoE tiles): 256 rows x 32 activation
 * rows with 8 warps stacked over the rows, __launch_bounds__(256, 2): a
 * quarter of V1's activation traffic per output, V2's weight decode per
 * output, 2 blocks of ~105 KB per SM. Q2_K runs V2. Same bits as V1. */

/* ---- WP: pipelined weight loads (MINKE_CUDA_MMQ_WPIPE=1: Q2_K in V2 tiles) ----
 * Why: ncu on Flash's MoE down product (Q2_K, V2, pre-split) showed the warps
 * stalled on the weight words: each stage loads them with LDG into registers
 * and decodes them at once, a global-memory round trip per stage with only
 * the other blocks' warps to cover it. WP copies stage s + 1's raw blocks
 * (one Q2_K block of 84 bytes per row: a stage is 256 elements) to shared
 * memory by cp.async right after stage s's staging barrier, so the copy runs
 * during stage s's products, and stage s + 1 decodes from shared memory: the
 * same integer codes, scales and mins as mq_wload, so the same bits. Space
 * (3 blocks per SM keep <= 75 KB each): 64 code bytes + d|dmin per row in
 * their own area (8.5 KB), the 16 scale bytes in the 16-byte pad at the end
 * of the row's sw line, which no fragment load reads. Single-buffered: the
 * decode of stage s is done (staging barrier) before stage s + 1's copy is
 * issued, and the copy is waited for before the stage's closing barrier.
 * H200, mmq_exact --time, Flash's MoE down (4096 x 2048, 4096 tokens x 6 of
 * 256): the pre-split product 6.97 -> 5.59 ms, on the fly 7.39 -> 6.02 ms;
 * ncu: long-scoreboard stalls 2.87 -> 0.55 cycles per issued instruction.
 * IQ2R (the MoE gate and up, V4) the same way was measured and removed: there
 * the 16 warps per SM hid the loads already (seventh session, MoE gate,
 * pre-split: 5.15 -> 5.23 ms, slower; on the fly 7.32 -> 7.07; prefill 2,801
 * against 2,814). */
/* cp.async of 4 bytes where on (predicated: no branch around it) */
__device__ __forceinline__ void mq_cp4_if(unsigned dst, const void *src, bool on) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\n@p cp.async.ca.shared.global [%0], [%1], 4;\n}\n" ::"r"(dst),
                 "l"(src), "r"((int)on) : "memory");
}
/* stage blk's raw blocks of the BM rows: cp.async of 4 bytes (a block is 4-byte aligned),
 * per row 21 words among its 8 threads li: code words li and li + 8, then scale word li
 * (li < 4) or d|dmin (li = 4); rows past the last repeat it, as the direct loads do */
template <int BM, int THREADS>
__device__ __forceinline__ void mq_q2k_fetch(const uint8_t *wbase, int64_t r0, int64_t rows, int64_t row_bytes, int blk,
                                             int tid, unsigned raw_s, unsigned sw_s) {
    const int li = tid & 7;
#pragma unroll
    for (int j = 0; j < BM * MQ_KI / THREADS; j++) {
        const int r = (tid >> 3) + (THREADS / 8) * j;
        const uint8_t *b = wbase + (r0 + r < rows ? r0 + r : rows - 1) * row_bytes + (int64_t)blk * 84;
        mq_cp4(raw_s + r * 64 + li * 4, b + 16 + li * 4, 4);
        mq_cp4(raw_s + r * 64 + 32 + li * 4, b + 48 + li * 4, 4);
        mq_cp4_if(li < 4 ? sw_s + (r * MQ_LDI + 64 + li) * 4 : raw_s + BM * 64 + r * 4, b + (li < 4 ? li * 4 : 80), li <= 4);
    }
}
/* row r, item li of the stage from the raw copy: mq_wload<CU_TYPE_Q2_K>'s codes into sw, and
 * (li = 0) d, -dmin times sc3 into sws, (li = 1) the 16 mins into smin, as the direct path */
template <int BM>
__device__ __forceinline__ void mq_q2k_stage_row(const uint8_t *raw, int *sw, float *sws, uint8_t *smin, int r, int li,
                                                 float sc3) {
    const int4 *c = (const int4 *)(raw + r * 64 + 32 * (li >> 2));
    const int4 c0 = c[0], c1 = c[1];
    const int qs[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    const uint8_t *scl = (const uint8_t *)&sw[r * MQ_LDI + 64];
    const uint32_t sc = *(const uint16_t *)(scl + 2 * li), sc0 = sc & 15, sc1 = (sc >> 8) & 15;
    const int sh = 2 * (li & 3);
    int q[8];
#pragma unroll
    for (int k = 0; k < 8; k++) q[k] = (int)((((uint32_t)qs[k] >> sh) & 0x03030303u) * (k < 4 ? sc0 : sc1));
    int4 *d = (int4 *)&sw[r * MQ_LDI + li * 8];
    d[0] = make_int4(q[0], q[1], q[2], q[3]);
    d[1] = make_int4(q[4], q[5], q[6], q[7]);
    if (li == 0) {
        const uint32_t dd = *(const uint32_t *)(raw + BM * 64 + r * 4);
        sws[r * 2 + 0] = cu_h2f((uint16_t)dd) * sc3;
        sws[r * 2 + 1] = -cu_h2f((uint16_t)(dd >> 16)) * sc3;
    } else if (li == 1) {
        const uint4 b4 = *(const uint4 *)scl;
        *(uint4 *)&smin[r * 16] = make_uint4((b4.x >> 4) & 0x0F0F0F0Fu, (b4.y >> 4) & 0x0F0F0F0Fu, (b4.z >> 4) & 0x0F0F0F0Fu,
                                             (b4.w >> 4) & 0x0F0F0F0Fu);
    }
}

/* PRE: the activations are pre-split rows (k_mmq_split, cu_mmq_presplit) instead of f32. V: 0, 1, 2, 4 or 6 (above).
 * WP: pipelined weight loads (above; Q2_K with V = 2). */
template <int TYPE, int MINB, int P, bool PRE, int V, bool WP = false>
__global__ void __launch_bounds__(mx_lay<TYPE, P, V>::THREADS, MINB) k_mmqx(cu_gemv_args g) {
    cu_pdl_enter();
    typedef mx_lay<TYPE, P, V, WP> L;
    static_assert(!WP || (TYPE == CU_TYPE_Q2_K && V == 2), "WP: Q2_K in V2");
    static_assert(!L::Q4K || V >= 1, "Q4_K: V1 and the wide tilings (its min term is mx_item_v4's)");
    constexpr bool Q2K = L::Q2K;
    constexpr bool Q4K = L::Q4K;
    constexpr bool IQ2 = L::IQ2;
    constexpr bool WIDE = V >= 2;       /* 128 or 256 rows; empty slots neither loaded nor multiplied */
    constexpr bool HALVES = L::BN == MQ_BN / 2;   /* 32 activation rows: two blocks per MoE tile */
    constexpr int BM = L::BM, BN = L::BN, LDS = L::LDS, THREADS = L::THREADS;
    constexpr float SC3 = (V && P == 3) ? 1.f / 256.f : 1.f;   /* V1: the third piece's 1/256 in the weight scale */
    extern __shared__ __align__(16) int mx_smem[];
    uint8_t *sbase = (uint8_t *)mx_smem;
    int *sw = mx_smem;
    int *sa = (int *)(sbase + L::o_sa);                     /* P pieces of LDS ints */
    float *sws = (float *)(sbase + L::o_ws);                /* per item; Q2_K: [0] = d, [1] = dmin */
    float *sas = (float *)(sbase + L::o_as);                /* D per item (V1 Q2_K: per block) */
    uint8_t *ssum = sbase + L::o_sum;                       /* V1 Q2_K: sub-block sums (mx_q2k_sums) */
    uint64_t *sgrid = (uint64_t *)(sbase + L::o_grid);
    uint64_t *smask = sgrid + L::n_grid;                    /* V2+ IQ2_XXS: sign masks (mq_wload_tab) */
    int64_t *soff = (int64_t *)(sbase + L::o_off);          /* byte offset of each slot's activation row */
    uint8_t *smin = sbase + L::o_min;
    int *sid = (int *)(sbase + L::o_id);
    uint8_t *sraw = sbase + L::o_raw;                       /* WP: the next stage's raw weight blocks */
    float *smn = (float *)(sbase + L::o_mn);                /* Q4_K: -dmin m_j per row and item */
    float *ssx = (float *)(sbase + L::o_sx);                /* Q4_K: the item sums D S per activation row */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gq = lane >> 2, tq = lane & 3;
    /* V2, V6: warps stacked over the 128 or 256 rows, each over all 32 activation rows; V4: 4 x 2 warps */
    const int wm = HALVES ? warp * 32 : WIDE ? (warp & 3) * 32 : (warp & 1) * 32;
    const int wn = HALVES ? 0 : WIDE ? (warp >> 2) * 32 : (warp >> 1) * 32;
    const int64_t r0 = (int64_t)blockIdx.x * BM;
    const uint8_t *wbase = (const uint8_t *)g.w;
    int nt;
    if (g.tile_pairs) {
        /* V2: blocks 2 t and 2 t + 1 take pairs 0..31 and 32..63 of tile t */
        int tile = HALVES ? (int)(blockIdx.y >> 1) : (int)blockIdx.y;
        if (tile >= *g.n_tiles) return;
        int start = g.tile_start[tile];
        nt = g.tile_count[tile];
        if (nt <= 0) return;              /* a pair of an expert another GPU owns */
        if (HALVES) {
            const int h = (int)(blockIdx.y & 1) * BN;
            start += h;
            nt -= h;
            if (nt <= 0) return;
            if (nt > BN) nt = BN;
        }
        wbase += (int64_t)g.tile_expert[tile] * g.expert_bytes;
        for (int k = tid; k < BN; k += THREADS) sid[k] = g.tile_pairs[start + (k < nt ? k : 0)];
    } else {
        int t0 = blockIdx.y * BN;
        nt = g.ntok - t0 < BN ? g.ntok - t0 : BN;
        if (WIDE && nt <= 0) return;
        for (int k = tid; k < BN; k += THREADS) sid[k] = t0 + (k < nt ? k : 0);
    }
    const uint64_t *tab = sgrid;
    if (IQ2)
        for (int i = tid; i < 256; i += THREADS) sgrid[i] = cu_mmq_grid[i];
    if (IQ2 && WIDE)
        for (int i = tid; i < 128; i += THREADS) smask[i] = mq_sign_mask(i);
    __syncthreads();
    const int nit = g.items;
    /* rows this thread stages: r = tid / 8 + (THREADS / 8) j; weights: item tid % 8 (NJW rows); activations:
     * float4 tid % 8 of each of the stage's 8 items (NJA rows, the first ones) */
    constexpr int NJW = BM * MQ_KI / THREADS, NJA = BN * MQ_KI / THREADS;
    static_assert(NJA <= NJW, "activation rows staged inside the weight rows' loop");
    const int li = tid & 7;
    /* V2: the weight row addresses of the 8 rows are computed per stage (registers for the cap) */
    const uint8_t *wrow[WIDE ? 1 : NJW];
    /* grouped input: the group's first element; pre-split rows address it in items */
    const int64_t aoff = g.group_rows ? (r0 / g.group_rows) * g.group_act_bytes : 0;
    for (int k = tid; k < BN; k += THREADS) soff[k] = (int64_t)(sid[k] / g.act_div) * g.act_stride + (PRE ? 0 : aoff);
    const int gitem = PRE ? (int)(aoff / 128) : 0;
    const int64_t sc_off = PRE ? g.act_stride / (32 * P + 4) * 32 * P : 0;   /* scales after the row's pieces */
    const uint8_t *act = (const uint8_t *)g.act;
    if (!WIDE) {
#pragma unroll
        for (int j = 0; j < NJW; j++) {
            int r = (tid >> 3) + (THREADS / 8) * j;
            int64_t row = r0 + r < g.rows ? r0 + r : g.rows - 1;
            wrow[j] = wbase + row * (int64_t)g.row_bytes;
        }
    }
    /* WP: stage 0's raw weights, then each stage's copy of the next one during the products */
    const unsigned sraw_s = (unsigned)__cvta_generic_to_shared(sraw), sw_s = (unsigned)__cvta_generic_to_shared(sw);
    if constexpr (WP) {
        mq_q2k_fetch<BM, THREADS>(wbase, r0, g.rows, g.row_bytes, 0, tid, sraw_s, sw_s);
        mq_cp_wait();
    }
    /* the activation rows' addresses come from shared memory each stage (registers for the cap) */
    __syncthreads();
    /* V1: this lane's ldmatrix rows: weights (row wm + lane % 16, ints 4 (lane / 16)), activations
     * (token wn + 8 (lane / 16) + lane % 8, ints 4 ((lane / 8) % 2)) */
    const unsigned sw_l = (unsigned)__cvta_generic_to_shared(sw) + ((wm + (lane & 15)) * MQ_LDI + (lane >> 4) * 4) * 4;
    const unsigned sa_l = (unsigned)__cvta_generic_to_shared(sa) +
                          ((wn + (lane >> 4) * 8 + (lane & 7)) * MQ_LDI + ((lane >> 3) & 1) * 4) * 4;
    float acc[2][4][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 4; b++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[a][b][c] = 0.f;

    /* V2+, pre-split rows: the activation pieces go to shared memory by cp.async, issued
     * before the weight decode so their latency overlaps it (no registers held); Q2_K's
     * sub-block sums are then taken from shared memory, as for f32 rows */
    constexpr bool ACP = WIDE && PRE;
    for (int it0 = 0; it0 < nit; it0 += MQ_KI) {
        const int it = it0 + li;
        if constexpr (ACP) {
            const unsigned sa_s = (unsigned)__cvta_generic_to_shared(sa), sas_s = (unsigned)__cvta_generic_to_shared(sas);
#pragma unroll
            for (int j = 0; j < NJA; j++) {
                int r = (tid >> 3) + (THREADS / 8) * j;
                const bool ok = it < nit && r < nt;
                const uint8_t *pr = act + soff[r];
                /* past the row's items or the tile's pairs: zeros, from a valid address */
                const uint8_t *src = ok ? pr + (int64_t)(gitem + it) * 32 * P : act;
                const uint8_t *dsrc = ok ? pr + sc_off + (int64_t)(gitem + it) * 4 : act;
                const unsigned dst = sa_s + (r * MQ_LDI + li * 8) * 4;
#pragma unroll
                for (int p = 0; p < P; p++) {
                    mq_cp16(dst + p * LDS * 4, src + 32 * p, ok ? 16 : 0);
                    mq_cp16(dst + p * LDS * 4 + 16, src + 32 * p + 16, ok ? 16 : 0);
                }
                /* D per item; Q2_K: per block, from item it0 (lane li = 0) */
                if (!Q2K) mq_cp4(sas_s + (r * MQ_KI + li) * 4, dsrc, ok ? 4 : 0);
                else if (li == 0) mq_cp4(sas_s + r * 4, dsrc, ok ? 4 : 0);
            }
        }
        /* 4 rows at a time (V1: all 4; V2, V6: 8 in two steps, fewer registers in flight) */
#pragma unroll 4
        for (int j = 0; j < NJW; j++) {
            int r = (tid >> 3) + (THREADS / 8) * j;
            if constexpr (WP) {
                mq_q2k_stage_row<BM>(sraw, sw, sws, smin, r, li, SC3);
            } else {
                const uint8_t *wr;
                if (WIDE) wr = wbase + (r0 + r < g.rows ? r0 + r : g.rows - 1) * (int64_t)g.row_bytes;
                else wr = wrow[j];
                int q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                float s = 0.f, mn = 0.f;
                if (it < nit) {
                    if constexpr (Q4K) mq_q4k_item(wr, it, q, s, mn);
                    else if (WIDE) mq_wload_tab<TYPE>(wr, it, nit, tab, smask, q, s);
                    else mq_wload<TYPE>(wr, it, nit, tab, q, s);
                }
                int4 *d = (int4 *)&sw[r * MQ_LDI + li * 8];
                d[0] = make_int4(q[0], q[1], q[2], q[3]);
                d[1] = make_int4(q[4], q[5], q[6], q[7]);
                if (Q2K) {
                    if (li == 0) {
                        const uint8_t *b = wr + (int64_t)(it0 >> 3) * 84;
                        if (V) {
                            /* d / 256 with 3 pieces; -dmin: the min term adds with the same FFMA */
                            sws[r * 2 + 0] = cu_h2f(*(const uint16_t *)(b + 80)) * SC3;
                            sws[r * 2 + 1] = -cu_h2f(*(const uint16_t *)(b + 82)) * SC3;
                        } else {
                            sws[r * MQ_KI + 0] = cu_h2f(*(const uint16_t *)(b + 80));
                            sws[r * MQ_KI + 1] = cu_h2f(*(const uint16_t *)(b + 82));
                        }
                    } else if (li == 1) {
                        const uint8_t *b = wr + (int64_t)(it0 >> 3) * 84;
                        if (V) {
                            const uint32_t *b4 = (const uint32_t *)b;
                            *(uint4 *)&smin[r * 16] = make_uint4((b4[0] >> 4) & 0x0F0F0F0Fu, (b4[1] >> 4) & 0x0F0F0F0Fu,
                                                                 (b4[2] >> 4) & 0x0F0F0F0Fu, (b4[3] >> 4) & 0x0F0F0F0Fu);
                        } else {
#pragma unroll
                            for (int k = 0; k < 16; k++) smin[r * 16 + k] = b[k] >> 4;
                        }
                    }
                } else {
                    sws[r * MQ_KI + li] = s * SC3;
                    if (Q4K) smn[r * MQ_KI + li] = -mn;
                }
            }
            if (!PRE && j < NJA)
                /* f32 row: the stage's 8 items, float4 li of each (V2: slots past the last pair read nothing) */
                mx_split_stage<Q2K, P>(act + soff[r] + li * 16 + (int64_t)it0 * 128, (WIDE && r >= nt) ? 0 : nit - it0,
                                       MQ_KI, (V && Q2K) ? 1 : MQ_KI, li, sa + r * MQ_LDI, LDS, 8,
                                       (V && Q2K) ? sas + r : sas + r * MQ_KI);
        }
        if (ACP) {
            mq_cp_wait();
        } else if (PRE) {
#pragma unroll
            for (int j = 0; j < NJA; j++) {
                int r = (tid >> 3) + (THREADS / 8) * j;
                /* pre-split row: P pieces of 32 bytes per item, then a float D per item */
                int4 x[P][2];
                float D = 0.f;
                if (it < nit && (!WIDE || r < nt)) {
                    const uint8_t *pr = act + soff[r];
                    const int4 *q4 = (const int4 *)(pr + (int64_t)(gitem + it) * 32 * P);
#pragma unroll
                    for (int p = 0; p < P; p++) { x[p][0] = q4[2 * p]; x[p][1] = q4[2 * p + 1]; }
                    D = ((const float *)(pr + sc_off))[gitem + it];
                } else {
#pragma unroll
                    for (int p = 0; p < P; p++) { x[p][0] = make_int4(0, 0, 0, 0); x[p][1] = x[p][0]; }
                }
#pragma unroll
                for (int p = 0; p < P; p++) {
                    int4 *e = (int4 *)&sa[p * LDS + r * MQ_LDI + li * 8];
                    e[0] = x[p][0]; e[1] = x[p][1];
                }
                if (V && Q2K) {
                    if (li == 0) sas[r] = D;
                    mx_q2k_sums<P>(x, r, li, ssum);
                } else {
                    sas[r * MQ_KI + li] = D;
                }
            }
        }
        if constexpr (Q4K) {
            /* item li's pieces and D: staged by this thread (pre-split rows) or by the 8 lanes
             * of row r's group in this warp (f32 rows, mx_split_stage; D by lane 0) */
            __syncwarp();
#pragma unroll
            for (int j = 0; j < NJA; j++) {
                const int r = (tid >> 3) + (THREADS / 8) * j;
                ssx[r * MQ_KI + li] = mq_item_xsum<P>(sa + r * MQ_LDI + li * 8, LDS, sas[r * MQ_KI + li]);
            }
        }
        if ((!PRE || ACP) && V && Q2K) {
            /* the sub-block sums from the staged pieces (the same integers as the pre-split path's) */
            __syncthreads();
#pragma unroll
            for (int j = 0; j < NJA; j++) {
                int r = (tid >> 3) + (THREADS / 8) * j;
                int4 x[P][2];
#pragma unroll
                for (int p = 0; p < P; p++) {
                    const int4 *e = (const int4 *)&sa[p * LDS + r * MQ_LDI + li * 8];
                    x[p][0] = e[0]; x[p][1] = e[1];
                }
                mx_q2k_sums<P>(x, r, li, ssum);
            }
        }
        __syncthreads();
        /* WP: every thread is past its decode of this stage's raw blocks */
        if (WP && it0 + MQ_KI < nit)
            mq_q2k_fetch<BM, THREADS>(wbase, r0, g.rows, g.row_bytes, (it0 >> 3) + 1, tid, sraw_s, sw_s);
        /* V2, V4: a warp whose 32 activation rows are all past the last one (V4: tiles of <= 32
         * pairs) skips the products (warp-uniform, no barrier inside) */
        if (WIDE && wn >= nt) {
        } else if (V && Q2K) {
            /* per piece: its dots over the block in int32 from the magic bits (each |sum| <=
             * 256 x 45 x 128 < 2^22: an exact float), folded into f = 256 hi + mid (+ lo / 256,
             * times 256) in two or three float operations */
            float f[2][4][4];
#pragma unroll 1
            for (int p = 0; p < P; p++) {
                int c[2][4][4];
#pragma unroll
                for (int a = 0; a < 2; a++)
#pragma unroll
                    for (int b = 0; b < 4; b++)
#pragma unroll
                        for (int k = 0; k < 4; k++) c[a][b][k] = MX_MAGIC_BITS;
                const unsigned wl = mx_opaque(sw_l), al = mx_opaque(sa_l + p * LDS * 4);
#pragma unroll
                for (int i = 0; i < MQ_KI; i++) {
                    int af[2][4], bf[4][2];
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) ldsm4(af[mt], wl + (mt * 16 * MQ_LDI + i * 8) * 4);
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        int t4[4];
                        ldsm4(t4, al + (h * 16 * MQ_LDI + i * 8) * 4);
                        bf[2 * h][0] = t4[0]; bf[2 * h][1] = t4[1]; bf[2 * h + 1][0] = t4[2]; bf[2 * h + 1][1] = t4[3];
                    }
#pragma unroll
                    for (int mt = 0; mt < 2; mt++)
#pragma unroll
                        for (int n4 = 0; n4 < 4; n4++)
                            mma_s8(c[mt][n4], af[mt][0], af[mt][1], af[mt][2], af[mt][3], bf[n4][0], bf[n4][1]);
                }
#pragma unroll
                for (int a = 0; a < 2; a++)
#pragma unroll
                    for (int b = 0; b < 4; b++)
#pragma unroll
                        for (int k = 0; k < 4; k++) {
                            float v = __int_as_float(c[a][b][k]);
                            if (p == 0) f[a][b][k] = __fmaf_rn(v, 256.f, P == 3 ? -MX_K3 : -MX_K2);
                            else if (p == 1) f[a][b][k] = __fadd_rn(f[a][b][k], v);
                            else f[a][b][k] = __fmaf_rn(f[a][b][k], 256.f, v);
                        }
            }
            /* the min term: sum_j mins_j S_j = sum_b 256^b E_b, E_b = the mma of the 16 mins
             * (k 16..31 zero) with digit b of the S_j */
            int am[4];
            ldsm4(am, smin + (wm + lane) * 16);     /* a0, a1 of row tile 0, then of row tile 1 */
#pragma unroll
            for (int n4 = 0; n4 < 4; n4++) {
                int bs[4];
                {
                    int tok = wn + n4 * 8 + (lane & 7), b = lane >> 3;
                    ldsm4(bs, ssum + tok * 64 + ((b ^ ((tok >> 1) & 3)) * 16));
                }
                int tk = wn + n4 * 8 + 2 * tq;
                float ad0 = sas[tk], ad1 = sas[tk + 1];
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    int e[4][4];
#pragma unroll
                    for (int b = 0; b < 4; b++) mx_mma_s8(e[b], am[2 * mt], am[2 * mt + 1], 0, 0, bs[b], 0, MX_MAGIC_BITS);
                    int rw = wm + mt * 16 + gq;
                    float d0 = sws[rw * 2], nm0 = sws[rw * 2 + 1], d1 = sws[(rw + 8) * 2], nm1 = sws[(rw + 8) * 2 + 1];
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        /* 256 E3 + E2 and 256 E1 + E0 exact, then one rounding */
                        float yh = __fadd_rn(__fmaf_rn(__int_as_float(e[3][k]), 256.f, -MX_K2), __int_as_float(e[2][k]));
                        float yl = __fadd_rn(__fmaf_rn(__int_as_float(e[1][k]), 256.f, -MX_K2), __int_as_float(e[0][k]));
                        float y = __fmaf_rn(yh, 65536.f, yl);
                        float ad = (k & 1) ? ad1 : ad0, dd = k < 2 ? d0 : d1, nm = k < 2 ? nm0 : nm1;
                        acc[mt][n4][k] = __fmaf_rn(__fmul_rn(ad, dd), f[mt][n4][k], acc[mt][n4][k]);
                        acc[mt][n4][k] = __fmaf_rn(__fmul_rn(ad, nm), y, acc[mt][n4][k]);
                    }
                }
            }
        } else if (V) {
            const unsigned wl = mx_opaque(sw_l), al = mx_opaque(sa_l);
            /* 2 items at a time (8 warps: 1, under their 128-register cap): fully unrolled, ptxas keeps the 8 items' loads in flight
             * and spills 100-300 bytes under any register cap */
#pragma unroll (THREADS == 128 ? 2 : 1)
            for (int i = 0; i < MQ_KI; i++)
                mx_item_v4<P, MQ_KI, MQ_LDI, LDS, Q4K>(acc, wl, al, i, wm, wn, gq, tq, sws, sas, smn, ssx);
        } else if (Q2K) {
            int ci[2][4][4], cm[2][4][4];
#pragma unroll
            for (int a = 0; a < 2; a++)
#pragma unroll
                for (int b = 0; b < 4; b++)
#pragma unroll
                    for (int c = 0; c < 4; c++) { ci[a][b][c] = 0; cm[a][b][c] = 0; }
            /* piece by piece over the block: ci = 256 (hi dots) + (lo dots), exact in int32
             * with no temporaries (the register cap) */
#pragma unroll 1
            for (int p = 0; p < P; p++) {
                if (p == 1) {
#pragma unroll
                    for (int a = 0; a < 2; a++)
#pragma unroll
                        for (int b = 0; b < 4; b++)
#pragma unroll
                            for (int c = 0; c < 4; c++) { ci[a][b][c] *= 256; cm[a][b][c] *= 256; }
                }
#pragma unroll
                for (int i = 0; i < MQ_KI; i++) {
                    int bf[4][2];
#pragma unroll
                    for (int n4 = 0; n4 < 4; n4++) {
                        int rb = p * LDS + (wn + n4 * 8 + gq) * MQ_LDI + i * 8 + tq;
                        bf[n4][0] = sa[rb]; bf[n4][1] = sa[rb + 4];
                    }
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        int rw = wm + mt * 16 + gq;
                        int ra = rw * MQ_LDI + i * 8 + tq;
                        int a0 = sw[ra], a1 = sw[ra + 8 * MQ_LDI], a2 = sw[ra + 4], a3 = sw[ra + 8 * MQ_LDI + 4];
                        int m0 = (int)(smin[rw * 16 + 2 * i] * 0x01010101u);
                        int m1 = (int)(smin[(rw + 8) * 16 + 2 * i] * 0x01010101u);
                        int m2 = (int)(smin[rw * 16 + 2 * i + 1] * 0x01010101u);
                        int m3 = (int)(smin[(rw + 8) * 16 + 2 * i + 1] * 0x01010101u);
                        if (p < 2) {
#pragma unroll
                            for (int n4 = 0; n4 < 4; n4++) {
                                mma_s8(ci[mt][n4], a0, a1, a2, a3, bf[n4][0], bf[n4][1]);
                                mma_s8(cm[mt][n4], m0, m1, m2, m3, bf[n4][0], bf[n4][1]);
                            }
                        } else {
                            /* the third piece (P = 3) in float, scale D / 256 */
                            float d0 = sws[rw * MQ_KI] * (1.f / 256.f), dm0 = sws[rw * MQ_KI + 1] * (1.f / 256.f);
                            float d1 = sws[(rw + 8) * MQ_KI] * (1.f / 256.f), dm1 = sws[(rw + 8) * MQ_KI + 1] * (1.f / 256.f);
#pragma unroll
                            for (int n4 = 0; n4 < 4; n4++) {
                                int l[4] = {0, 0, 0, 0}, lm[4] = {0, 0, 0, 0};
                                mma_s8(l, a0, a1, a2, a3, bf[n4][0], bf[n4][1]);
                                mma_s8(lm, m0, m1, m2, m3, bf[n4][0], bf[n4][1]);
                                int tk = wn + n4 * 8 + 2 * tq;
                                float ad0 = sas[tk * MQ_KI], ad1 = sas[(tk + 1) * MQ_KI];
                                acc[mt][n4][0] += ad0 * d0 * (float)l[0] - ad0 * dm0 * (float)lm[0];
                                acc[mt][n4][1] += ad1 * d0 * (float)l[1] - ad1 * dm0 * (float)lm[1];
                                acc[mt][n4][2] += ad0 * d1 * (float)l[2] - ad0 * dm1 * (float)lm[2];
                                acc[mt][n4][3] += ad1 * d1 * (float)l[3] - ad1 * dm1 * (float)lm[3];
                            }
                        }
                    }
                }
            }
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                int rw = wm + mt * 16 + gq;
                float d0 = sws[rw * MQ_KI], dm0 = sws[rw * MQ_KI + 1];
                float d1 = sws[(rw + 8) * MQ_KI], dm1 = sws[(rw + 8) * MQ_KI + 1];
#pragma unroll
                for (int n4 = 0; n4 < 4; n4++) {
                    int tk = wn + n4 * 8 + 2 * tq;
                    float ad0 = sas[tk * MQ_KI], ad1 = sas[(tk + 1) * MQ_KI];
                    acc[mt][n4][0] += ad0 * d0 * (float)ci[mt][n4][0] - ad0 * dm0 * (float)cm[mt][n4][0];
                    acc[mt][n4][1] += ad1 * d0 * (float)ci[mt][n4][1] - ad1 * dm0 * (float)cm[mt][n4][1];
                    acc[mt][n4][2] += ad0 * d1 * (float)ci[mt][n4][2] - ad0 * dm1 * (float)cm[mt][n4][2];
                    acc[mt][n4][3] += ad1 * d1 * (float)ci[mt][n4][3] - ad1 * dm1 * (float)cm[mt][n4][3];
                }
            }
        } else {
#pragma unroll
            for (int i = 0; i < MQ_KI; i++) {
                /* weight fragments of both row tiles, then token tile by token tile
                 * (fewer live fragments than k_mmq's order: the register cap) */
                int af[2][4];
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    int rw = wm + mt * 16 + gq;
                    int ra = rw * MQ_LDI + i * 8 + tq;
                    af[mt][0] = sw[ra]; af[mt][1] = sw[ra + 8 * MQ_LDI]; af[mt][2] = sw[ra + 4]; af[mt][3] = sw[ra + 8 * MQ_LDI + 4];
                }
#pragma unroll
                for (int n4 = 0; n4 < 4; n4++) {
                    int bf[P][2];
                    int rb = (wn + n4 * 8 + gq) * MQ_LDI + i * 8 + tq;
#pragma unroll
                    for (int p = 0; p < P; p++) { bf[p][0] = sa[p * LDS + rb]; bf[p][1] = sa[p * LDS + rb + 4]; }
                    int tc = wn + n4 * 8 + 2 * tq;
                    float as0 = sas[tc * MQ_KI + i], as1 = sas[(tc + 1) * MQ_KI + i];
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        /* dot = 256 dot_hi + dot_lo (+ dot_3 / 256), each piece's dot exact in
                         * float, one rounding for the sum, one scale per item */
                        int h[4], l[4], l3[4];
                        mx_mma_s8(h, af[mt][0], af[mt][1], af[mt][2], af[mt][3], bf[0][0], bf[0][1], MX_MAGIC_BITS);
                        mx_mma_s8(l, af[mt][0], af[mt][1], af[mt][2], af[mt][3], bf[1][0], bf[1][1], MX_MAGIC_BITS);
                        if (P == 3)
                            mx_mma_s8(l3, af[mt][0], af[mt][1], af[mt][2], af[mt][3], bf[P - 1][0], bf[P - 1][1], MX_MAGIC_BITS);
                        const int rw = wm + mt * 16 + gq;
                        const float w0 = sws[rw * MQ_KI + i], w1 = sws[(rw + 8) * MQ_KI + i];
                        float s[4] = {w0 * as0, w0 * as1, w1 * as0, w1 * as1};
#pragma unroll
                        for (int k = 0; k < 4; k++) {
                            float dot = __fmaf_rn(mx_dot_f(h[k]), 256.f, mx_dot_f(l[k]));
                            if (P == 3) dot = __fmaf_rn(mx_dot_f(l3[k]), 1.f / 256.f, dot);
                            acc[mt][n4][k] = __fmaf_rn(dot, s[k], acc[mt][n4][k]);
                        }
                    }
                }
            }
        }
        if (WP) mq_cp_wait();     /* the next stage's raw weights, visible to all after the barrier */
        __syncthreads();
    }
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int n4 = 0; n4 < 4; n4++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int64_t row = r0 + wm + mt * 16 + gq + (c >> 1) * 8;
                int n = wn + n4 * 8 + 2 * tq + (c & 1);
                if (row < g.rows && n < nt) {
                    float *o = g.out + (int64_t)sid[n] * g.out_stride + row;
                    if (g.accumulate) *o += acc[mt][n4][c]; else *o = acc[mt][n4][c];
                }
            }
}

/* ---- QP: pipelined Q8_0R products (MINKE_CUDA_MMQ_QPIPE=1, the default; pre-split rows, V4 tiles) ----
 * Why: ncu of a 4096-token prefill (1,445 ms) put the dense Q8_0R products
 * (q_a, kv, q_b, out_a, out_b, the shared expert) at 458 ms, 31%, in V4's
 * k_mmqx<Q8_0R, PRE>: ~100 TOPS of useful int8 (~300 on the tensor cores with
 * 3 pieces). Each V4 stage loads its weights with LDG into registers and
 * stores them to shared memory, so the warps wait a global round trip per
 * stage (the IQ2R kernel of the same shape: 20% of stalls on long scoreboard,
 * issue slots ~44% busy), and the activation pieces' cp.async is waited for
 * in the same stage. Q8_0R's codes need no decode (they are the mma's int8
 * operands, 16-byte aligned; the row's f16 scales follow its codes), so
 * cp.async can put them straight into the next stage's weight tile, as WP
 * does for Q2_K's raw blocks (+20% there).
 * Layout: V4's tiles (128 weight rows x 64 activation rows, 8 warps of 32 x
 * 32, 2 blocks of 256 per SM under the 128-register cap) in stages of 4 items
 * (half of k_mmqx's 8), double-buffered: per buffer the weight codes (rows of
 * 36 ints: 4 items and the pad that spreads an ldmatrix's 8 rows over the
 * banks), the P activation pieces (the same rows), the weight scales as f16
 * (as copied) and as V4's floats, and the activation D per item: 49 KB, 99 KB
 * a block. Why half stages and not k_mmqx's 8 items: both buffers of 8-item
 * stages (~186 KB) leave one block of 8 warps per SM, and with it nothing to
 * run during a block's barrier or its fragment-load and mma latencies; half
 * stages keep the 16 warps of V4 and the same bytes in flight per SM (two
 * blocks a stage ahead each). A stage of 4 items at V4's issue rate is
 * thousands of cycles, longer than a load's latency, so one stage ahead
 * covers it. (Weights alone double-buffered with 8-item stages would be
 * ~132 KB a block: one block per SM as well.) The scales' and D's row stride
 * of 4 floats also reads them without V4's two-way bank conflicts.
 * Schedule per stage s: wait for this thread's copies of stage s, convert
 * its f16 scales (its own copies: visible to it after the wait) into the
 * float scales, one barrier (stage s visible to all, and every warp past
 * stage s - 1's products, so their buffer is free), issue stage s + 1's
 * copies into that buffer, then stage s's products.
 * Copies (sectors read whole): a weight row's 128 code bytes of the stage by
 * 8 lanes (16 bytes each), its 8 scale bytes by the first of them; an
 * activation row's 4 items x P pieces of 32 bytes by 4 lanes, 16 bytes each
 * (lanes 0..3 take 64 consecutive bytes per copy), and D of item (tid % 4).
 * Past the row's items or the tile's pairs: zeros (src-size 0), as V4's.
 * Bits: each output adds the same items in the same order with V4's mma
 * (the magic start), fold, FMUL of w x D (w = f16 x SC3 exact, as V4 stores
 * it) and FFMA, so V4's bits and V1's (mmq_exact checks both); an item slot
 * past the last (zero codes, scale and D) adds +0, which changes no sum. */
#define MP_KI 4                   /* items per stage */
#define MP_LD (MP_KI * 8 + 4)     /* ints per shared row */
template <int P>
struct mp_lay {
    static constexpr int BM = 2 * MQ_BM, BN = MQ_BN, THREADS = 2 * MQ_THREADS;
    static constexpr int LDS = BN * MP_LD;                                 /* ints of one activation piece */
    static constexpr size_t o_sa = (size_t)BM * MP_LD * 4;                 /* after the weight codes */
    static constexpr size_t o_ws = o_sa + (size_t)P * LDS * 4;             /* float per row and item */
    static constexpr size_t o_wh = o_ws + (size_t)BM * MP_KI * 4;          /* f16 per row and item, as copied */
    static constexpr size_t o_as = o_wh + (size_t)BM * MP_KI * 2;          /* D per activation row and item */
    static constexpr size_t buf = o_as + (size_t)BN * MP_KI * 4;           /* one stage's buffer */
    static constexpr size_t o_off = 2 * buf;
    static constexpr size_t o_id = o_off + (size_t)BN * 8;
    static constexpr size_t bytes = o_id + (size_t)BN * 4;
    static_assert(buf % 16 == 0 && o_sa % 16 == 0 && o_ws % 16 == 0 && o_wh % 16 == 0 && o_as % 16 == 0, "16-byte copies");
    static_assert(BN * MP_KI == THREADS, "one activation (row, item) per thread");
};
/* cp.async of n of 8 bytes (the rest zeros) */
__device__ __forceinline__ void mq_cp8(unsigned dst, const void *src, int n) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
/* stage it0's copies (above) into the buffer at buf_s; the block's first row and the D's
 * offset are recomputed here, not held across the products (registers for the cap) */
template <int P>
__device__ __forceinline__ void mp_fetch(const uint8_t *wbase, const uint8_t *act, const cu_gemv_args &g, const int64_t *soff,
                                         int nt, int gitem, int it0, int tid, unsigned buf_s) {
    typedef mp_lay<P> L;
    const int nit = g.items;
    const int64_t r0 = (int64_t)blockIdx.x * L::BM, sc_off = g.act_stride / (32 * P + 4) * 32 * P;
    const int part = tid & 7;
    const bool wok = it0 + (part >> 1) < nit;
    const int nv = nit - it0 < MP_KI ? nit - it0 : MP_KI;
#pragma unroll
    for (int j = 0; j < L::BM * 8 / L::THREADS; j++) {
        const int r = (tid >> 3) + (L::THREADS / 8) * j;
        const uint8_t *row = wbase + (r0 + r < g.rows ? r0 + r : g.rows - 1) * g.row_bytes;
        mq_cp16(buf_s + (r * MP_LD + part * 4) * 4, wok ? row + (int64_t)it0 * 32 + part * 16 : row, wok ? 16 : 0);
        if (part == 0) mq_cp8(buf_s + (unsigned)L::o_wh + r * 8, row + (int64_t)nit * 32 + it0 * 2, 2 * nv);
    }
    const int r = tid >> 2, sub = tid & 3;
    const bool rok = r < nt;
    const uint8_t *pr = act + soff[r] + (int64_t)(gitem + it0) * 32 * P;
    /* chunk c = sub + 4 k of the row's 2 P x 4 chunks of 16 bytes: item c / (2 P), piece (c / 2) % P, half c % 2 */
#pragma unroll
    for (int k = 0; k < 2 * P; k++) {
        const int c = sub + 4 * k, i = c / (2 * P), p = (c >> 1) % P;
        const bool ok = rok && it0 + i < nit;
        mq_cp16(buf_s + (unsigned)L::o_sa + (p * L::LDS + r * MP_LD + i * 8 + (c & 1) * 4) * 4, ok ? pr + c * 16 : act,
                ok ? 16 : 0);
    }
    const bool dok = rok && it0 + sub < nit;
    mq_cp4(buf_s + (unsigned)L::o_as + (r * MP_KI + sub) * 4, dok ? act + soff[r] + sc_off + (int64_t)(gitem + it0 + sub) * 4 : act,
           dok ? 4 : 0);
}

template <int P>
__global__ void __launch_bounds__(2 * MQ_THREADS, 2) k_mmqp(cu_gemv_args g) {
    cu_pdl_enter();
    typedef mp_lay<P> L;
    constexpr int BN = L::BN, LDS = L::LDS, THREADS = L::THREADS;
    constexpr float SC3 = P == 3 ? 1.f / 256.f : 1.f;   /* the third piece's 1/256 in the weight scale, as V4 */
    extern __shared__ __align__(16) int mx_smem[];
    uint8_t *sbase = (uint8_t *)mx_smem;
    int64_t *soff = (int64_t *)(sbase + L::o_off);          /* byte offset of each slot's pre-split row */
    int *sid = (int *)(sbase + L::o_id);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gq = lane >> 2, tq = lane & 3;
    const int wm = (warp & 3) * 32, wn = (warp >> 2) * 32;  /* V4's 4 x 2 warps */
    const int64_t r0 = (int64_t)blockIdx.x * L::BM;
    const uint8_t *wbase = (const uint8_t *)g.w;
    int nt;
    if (g.tile_pairs) {
        const int tile = (int)blockIdx.y;
        if (tile >= *g.n_tiles) return;
        const int start = g.tile_start[tile];
        nt = g.tile_count[tile];
        if (nt <= 0) return;              /* a pair of an expert another GPU owns */
        wbase += (int64_t)g.tile_expert[tile] * g.expert_bytes;
        for (int k = tid; k < BN; k += THREADS) sid[k] = g.tile_pairs[start + (k < nt ? k : 0)];
    } else {
        const int t0 = (int)blockIdx.y * BN;
        nt = g.ntok - t0 < BN ? g.ntok - t0 : BN;
        if (nt <= 0) return;
        for (int k = tid; k < BN; k += THREADS) sid[k] = t0 + (k < nt ? k : 0);
    }
    const int nit = g.items;
    /* grouped input: the group's first item of the pre-split row */
    const int gitem = g.group_rows ? (int)((r0 / g.group_rows) * g.group_act_bytes / 128) : 0;
    const uint8_t *act = (const uint8_t *)g.act;
    for (int k = tid; k < BN; k += THREADS) soff[k] = (int64_t)(sid[k] / g.act_div) * g.act_stride;
    __syncthreads();
    const unsigned smem_s = (unsigned)__cvta_generic_to_shared(mx_smem);
    mp_fetch<P>(wbase, act, g, soff, nt, gitem, 0, tid, smem_s);
    /* this lane's ldmatrix rows in buffer 0, as k_mmqx's */
    const unsigned sw_l = smem_s + ((wm + (lane & 15)) * MP_LD + (lane >> 4) * 4) * 4;
    const unsigned sa_l = smem_s + (unsigned)L::o_sa + ((wn + (lane >> 4) * 8 + (lane & 7)) * MP_LD + ((lane >> 3) & 1) * 4) * 4;
    float acc[2][4][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 4; b++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[a][b][c] = 0.f;

    const int nst = (nit + MP_KI - 1) / MP_KI;
    for (int s = 0; s < nst; s++) {
        const unsigned boff = (unsigned)((s & 1) * L::buf);
        const uint8_t *bp = sbase + boff;
        mq_cp_wait();
        if ((tid & 7) == 0) {
            /* the f16 scales this thread copied, as V4 stores them (s x SC3, exact) */
#pragma unroll
            for (int j = 0; j < L::BM * 8 / THREADS; j++) {
                const int r = (tid >> 3) + (THREADS / 8) * j;
                const uint2 h = *(const uint2 *)(bp + L::o_wh + r * 8);
                *(float4 *)(sbase + boff + L::o_ws + r * 16) =
                    make_float4(cu_h2f((uint16_t)h.x) * SC3, cu_h2f((uint16_t)(h.x >> 16)) * SC3, cu_h2f((uint16_t)h.y) * SC3,
                                cu_h2f((uint16_t)(h.y >> 16)) * SC3);
            }
        }
        __syncthreads();
        if (s + 1 < nst) mp_fetch<P>(wbase, act, g, soff, nt, gitem, (s + 1) * MP_KI, tid, smem_s + (boff ^ (unsigned)L::buf));
        /* a warp whose 32 activation rows are all past the last one skips the products (as V4) */
        if (wn >= nt) continue;
        const float *sws = (const float *)(bp + L::o_ws), *sas = (const float *)(bp + L::o_as);
        const unsigned wl = mx_opaque(sw_l + boff), al = mx_opaque(sa_l + boff);
        /* k_mmqx's V4 products item by item (the same instructions per output) */
#pragma unroll 1
        for (int i = 0; i < MP_KI; i++) mx_item_v4<P, MP_KI, MP_LD, LDS>(acc, wl, al, i, wm, wn, gq, tq, sws, sas);
    }
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int n4 = 0; n4 < 4; n4++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int64_t row = r0 + wm + mt * 16 + gq + (c >> 1) * 8;
                const int n = wn + n4 * 8 + 2 * tq + (c & 1);
                if (row < g.rows && n < nt) {
                    float *o = g.out + (int64_t)sid[n] * g.out_stride + row;
                    if (g.accumulate) *o += acc[mt][n4][c]; else *o = acc[mt][n4][c];
                }
            }
}

/* Pre-split activation rows for cu_mmq_presplit: per row of n elements
 * (items = n / 32), the items' pieces (P x 32 bytes each, piece 0 first), then
 * one float D per item, the row padded to 16 bytes. A group of 8 threads per
 * (row, stage of 8 items) runs mx_split_stage as k_mmqx's staging does, so the
 * pieces are the ones k_mmqx computes on the fly (groups past the end redo the
 * last group's work and store the same values). */
template <bool BLK, int P>
__global__ void __launch_bounds__(256) k_mmq_split(const float *x, int64_t nrows, int items, int64_t xstride,
                                                   uint8_t *out, int64_t ostride) {
    cu_pdl_enter();
    const int stages = (items + MQ_KI - 1) / MQ_KI, li = threadIdx.x & 7;
    int64_t grp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 3;
    if (grp >= nrows * stages) grp = nrows * stages - 1;     /* every lane takes part in the shuffles */
    const int64_t row = grp / stages;
    const int it0 = (int)(grp % stages) * MQ_KI;
    uint8_t *o = out + row * ostride;
    int nvalid = items - it0 < MQ_KI ? items - it0 : MQ_KI;
    mx_split_stage<BLK, P>((const uint8_t *)x + row * xstride + li * 16 + (int64_t)it0 * 128, nvalid, nvalid, nvalid, li,
                           (int *)(o + (int64_t)it0 * 32 * P), 8, 8 * P, (float *)(o + (int64_t)items * 32 * P) + it0);
}


/* Default of MINKE_CUDA_MMQ (verified on the H200: gemv_check and run-cuda.sh). */
#define MQ_DEFAULT_ON 1
static int mmq_mode = -1, mmq_min = 32;

extern "C" int cu_mmq_min_rows(void) {
    if (mmq_mode < 0) {
        const char *e = getenv("MINKE_CUDA_MMQ");
        mmq_mode = e ? atoi(e) != 0 : MQ_DEFAULT_ON;
        const char *m = getenv("MINKE_CUDA_MMQ_MIN");
        if (m && atoi(m) > 0) mmq_min = atoi(m);
    }
    return mmq_mode ? mmq_min : 0;
}

/* exact: the product takes exact activations (f32 rows, or pre-split ones: cu_mmq_presplit
 * asks with act_f32 = 0, which only drops the f32 rows' alignment rules); Q4_K has only those */
static int mq_supported(const cu_gemv_args *g, bool exact) {
    if (g->wtype == CU_TYPE_F16) return cu_mmf16_supported(g);
    switch (g->wtype) {
    case CU_TYPE_Q8_0: case CU_TYPE_Q8_0R: case CU_TYPE_MXFP4: break;
    case CU_TYPE_IQ2R: case CU_TYPE_IQ2_XXS: case CU_TYPE_Q2_K: if (g->in % 256) return 0; break;
    case CU_TYPE_Q4_K: if (!exact || g->in % 256) return 0; break;
    default: return 0;
    }
    if (g->in % 32) return 0;
    if (g->group_rows && g->group_rows % MQ_BM) return 0;
    /* exact activations: float4 loads (the backend's f32 rows: cudaMalloc'd, in % 32 == 0) */
    if (g->act_f32 && (((uintptr_t)g->act & 15) || g->act_stride % 16 || g->group_act_bytes % 16)) return 0;
    return 1;
}
extern "C" int cu_mmq_supported(const cu_gemv_args *g) { return mq_supported(g, g->act_f32 != 0); }

/* Pieces of the exact-activation kernels: 3 (default: 24 bits, the tiny model matches the CPU to
 * 1.7e-5 of max|logit|) or MINKE_CUDA_MMQ_PIECES=2 (16 bits, faster; off by 0.18 there). */
static int mx_pieces(void) {
    static int p = 0;
    if (!p) { const char *e = getenv("MINKE_CUDA_MMQ_PIECES"); p = e && atoi(e) == 2 ? 2 : 3; }
    return p;
}

/* The exact-activation kernel version: 4 (default: the fastest prefill on the H200, 2,710 tok/s
 * against V1's 2,488, docs/performance.md; every version gives V1's bits, mmq_exact), MINKE_CUDA_MMQ_X=0 (V0, for A/B),
 * MINKE_CUDA_MMQ_V=2 (V2: wide tiles for every product), 3 (V2 for MoE tiles, V1 for the dense
 * products), 4 (V4: 128 x 64 tiles of 8 warps for every product), 5 (V4 for MoE tiles, V1 for
 * the dense products), 6 (V6: 256 x 32 tiles of 8 warps for every product) or 7 (V6 for MoE
 * tiles, V1 for the dense products); MINKE_CUDA_MMQ_V=0 or 1 as MINKE_CUDA_MMQ_X. And the blocks per SM
 * the 3-piece kernels are built for: 3 (default, <= 168 registers) or MINKE_CUDA_MMQ_XOCC=2 (no
 * register cap). Read once per process; cu_mmq_set_version overrides the version (mmq_exact
 * compares the versions' bits in one process). */
static int mx_ver = -1;
static int mx_version(void) {
    if (mx_ver < 0) {
        const char *v = getenv("MINKE_CUDA_MMQ_V");
        int n = v ? atoi(v) : -1;
        if (n >= 0 && n <= 7) {
            mx_ver = n;
        } else {
            const char *e = getenv("MINKE_CUDA_MMQ_X");
            mx_ver = e && atoi(e) == 0 ? 0 : 4;
        }
    }
    return mx_ver;
}
extern "C" void cu_mmq_set_version(int v) { mx_ver = v >= 0 && v <= 7 ? v : 1; }
static int mx_occ3(void) {
    static int o = 0;
    if (!o) {
        const char *e = getenv("MINKE_CUDA_MMQ_XOCC");
        o = e && atoi(e) == 2 ? 2 : 3;
        /* 3 blocks of <= 76.5 KB (+ 1 KB each the runtime keeps) need the H100/H200's 228 KB per SM;
         * elsewhere (the A100's 164 KB) 2 fit, and the 168-register cap would only cost spills */
        constexpr size_t b2 = mx_lay<CU_TYPE_IQ2R, 3, 1>::bytes, bk = mx_lay<CU_TYPE_Q2_K, 3, 1>::bytes,
                         b8 = mx_lay<CU_TYPE_Q8_0R, 3, 1>::bytes;
        constexpr size_t w2 = mx_lay<CU_TYPE_IQ2R, 3, 2>::bytes, wk = mx_lay<CU_TYPE_Q2_K, 3, 2>::bytes,
                         w8 = mx_lay<CU_TYPE_Q8_0R, 3, 2>::bytes;
        constexpr size_t most1 = b2 > bk ? (b2 > b8 ? b2 : b8) : (bk > b8 ? bk : b8);
        constexpr size_t most2 = w2 > wk ? (w2 > w8 ? w2 : w8) : (wk > w8 ? wk : w8);
        constexpr size_t most = most1 > most2 ? most1 : most2;
        static_assert(3 * (most + 1024) <= 228 * 1024, "V1 and V2 with 3 pieces: 3 blocks per SM on the H200");
        constexpr size_t v2 = mx_lay<CU_TYPE_IQ2R, 3, 4>::bytes, vk = mx_lay<CU_TYPE_Q2_K, 3, 4>::bytes,
                         v8 = mx_lay<CU_TYPE_Q8_0R, 3, 4>::bytes;
        static_assert(2 * (v2 + 1024) <= 228 * 1024 && 2 * (vk + 1024) <= 228 * 1024 && 2 * (v8 + 1024) <= 228 * 1024,
                      "V4 with 3 pieces: 2 blocks per SM on the H200");
        constexpr size_t x2 = mx_lay<CU_TYPE_IQ2R, 3, 6>::bytes, x8 = mx_lay<CU_TYPE_Q8_0R, 3, 6>::bytes;
        static_assert(2 * (x2 + 1024) <= 228 * 1024 && 2 * (x8 + 1024) <= 228 * 1024, "V6 with 3 pieces: 2 blocks per SM on the H200");
        int dev = 0, smem = 0;
        if (!e && cudaGetDevice(&dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) == cudaSuccess &&
            (size_t)smem < 3 * (most + 1024))
            o = 2;
    }
    return o;
}

static_assert(3 * (mx_lay<CU_TYPE_Q4_K, 3, 2>::bytes + 1024) <= 228 * 1024 &&
                  2 * (mx_lay<CU_TYPE_Q4_K, 3, 4>::bytes + 1024) <= 228 * 1024 &&
                  2 * (mx_lay<CU_TYPE_Q4_K, 3, 6>::bytes + 1024) <= 228 * 1024,
              "Q4_K with 3 pieces: V2 3 blocks per SM, V4 and V6 2 on the H200");

/* k_mmqx needs more than the 48 KB of static shared memory: opt in once per
 * instantiation, and ask for the largest carveout so 3 blocks fit per SM. */
template <int T, int MINB, int P, bool PRE, int V, bool WP = false>
static void mx_launch(dim3 grid, cudaStream_t st, const cu_gemv_args &g) {
    static unsigned ready = 0;
    const size_t smem = mx_lay<T, P, V, WP>::bytes;
    if (cu_dev_first(&ready)) {
        cudaFuncSetAttribute(k_mmqx<T, MINB, P, PRE, V, WP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        cudaFuncSetAttribute(k_mmqx<T, MINB, P, PRE, V, WP>, cudaFuncAttributePreferredSharedMemoryCarveout,
                             (int)cudaSharedmemCarveoutMaxShared);
    }
    cu_launch(k_mmqx<T, MINB, P, PRE, V, WP>, grid, mx_lay<T, P, V>::THREADS, smem, st, g);
}

/* MINKE_CUDA_MMQ_WPIPE=1 (default): Q2_K's V2 kernels with pipelined weight loads (WP,
 * above; the same bits), 0: the direct loads. A 4096-token prompt of Flash q2 on the
 * H200: 2,813-2,815 tok/s with 1 against 2,701-2,702 with 0 (seventh session). Read
 * once per process; cu_mmq_set_wpipe overrides it (mmq_exact compares them in one
 * process). */
#define MX_WPIPE_DEFAULT 1
static int mx_wp = -1;
static int mx_wpipe(void) {
    if (mx_wp < 0) {
        const char *e = getenv("MINKE_CUDA_MMQ_WPIPE");
        const int n = e ? atoi(e) : MX_WPIPE_DEFAULT;
        mx_wp = n == 0 || n == 1 ? n : 1;
    }
    return mx_wp;
}
extern "C" void cu_mmq_set_wpipe(int level) { mx_wp = level == 0 ? 0 : 1; }
static_assert(3 * (mx_lay<CU_TYPE_Q2_K, 3, 2, true>::bytes + 1024) <= 228 * 1024,
              "WP: 3 blocks per SM (Q2_K, V2) on the H200");

/* MINKE_CUDA_MMQ_QPIPE=1 (default): Q8_0R's pre-split products in V4 tiles run k_mmqp (QP,
 * above; V4's bits), 0: k_mmqx's V4 kernel. Read once per process; cu_mmq_set_qpipe
 * overrides it (mmq_exact compares them in one process). */
#define MX_QPIPE_DEFAULT 1
static int mx_qp = -1;
static int mx_qpipe(void) {
    if (mx_qp < 0) {
        const char *e = getenv("MINKE_CUDA_MMQ_QPIPE");
        mx_qp = e ? atoi(e) != 0 : MX_QPIPE_DEFAULT;
    }
    return mx_qp;
}
extern "C" void cu_mmq_set_qpipe(int on) { mx_qp = on != 0; }
static_assert(2 * (mp_lay<3>::bytes + 1024) <= 228 * 1024, "QP with 3 pieces: 2 blocks per SM on the H200");
template <int P>
static void mp_launch(dim3 grid, cudaStream_t st, const cu_gemv_args &g) {
    static unsigned ready = 0;
    const size_t smem = mp_lay<P>::bytes;
    if (cu_dev_first(&ready)) {
        cudaFuncSetAttribute(k_mmqp<P>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        cudaFuncSetAttribute(k_mmqp<P>, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared);
    }
    cu_launch(k_mmqp<P>, grid, mp_lay<P>::THREADS, smem, st, g);
}

/* V2 or V4 tiles, with WP where asked and built (Q2_K in V2) */
template <int T, int MINB, int P, bool PRE, int V>
static void mx_launch_wp(dim3 grid, cudaStream_t st, const cu_gemv_args &g) {
    if constexpr (T == CU_TYPE_Q2_K && V == 2)
        if (mx_wpipe()) { mx_launch<T, MINB, P, PRE, V, true>(grid, st, g); return; }
    mx_launch<T, MINB, P, PRE, V>(grid, st, g);
}

/* ntiles: blocks of 64 activation rows (the backend's MoE tiles of CU_MMQ_TILE pairs) */
template <int T, bool PRE>
static void mx_pick(int ntiles, cudaStream_t st, const cu_gemv_args &g) {
    const int ver = mx_version();
    const bool moe = g.tile_pairs != NULL;
    int tiling = 1;     /* 1: V1 (or V0), 2: V2, 4: V4, 6: V6 */
    if (ver == 2 || (ver == 3 && moe)) tiling = 2;
    /* V4's Q2_K kernel spills 36-40 bytes under the 128-register cap: Q2_K runs V2's there (and in V6) */
    else if (ver == 4 || (ver == 5 && moe)) tiling = T == CU_TYPE_Q2_K ? 2 : 4;
    else if (ver == 6 || (ver == 7 && moe)) tiling = T == CU_TYPE_Q2_K ? 2 : 6;
    /* V6: 256-row blocks, else 128: a grouped input's groups must be whole blocks (else V2, V1) */
    if (tiling == 6 && g.group_rows && g.group_rows % (4 * MQ_BM)) tiling = 2;
    if (tiling > 1 && g.group_rows && g.group_rows % (2 * MQ_BM)) tiling = 1;
    const int bm = tiling == 6 ? 4 * MQ_BM : 2 * MQ_BM;
    const unsigned wrows = (unsigned)((g.rows + bm - 1) / bm);
    if (tiling == 2) {
        dim3 wgrid(wrows, (unsigned)ntiles * 2);
        if (mx_pieces() == 3) {
            if (mx_occ3() == 2) mx_launch_wp<T, 2, 3, PRE, 2>(wgrid, st, g);
            else mx_launch_wp<T, 3, 3, PRE, 2>(wgrid, st, g);
        } else {
            mx_launch_wp<T, MQ_OCC_DEFAULT, 2, PRE, 2>(wgrid, st, g);
        }
        return;
    }
    if constexpr (T != CU_TYPE_Q2_K) {
        if (tiling == 4) {
            /* 2 blocks of 8 warps per SM (shared memory and registers), for 2 or 3 pieces */
            dim3 wgrid(wrows, (unsigned)ntiles);
            /* QP: its copies need 16-byte aligned code rows (cu_repack_q8_0 keeps them so) */
            if constexpr (T == CU_TYPE_Q8_0R && PRE) {
                if (mx_qpipe() && g.row_bytes % 16 == 0 && ((uintptr_t)g.w & 15) == 0 && g.expert_bytes % 16 == 0) {
                    if (mx_pieces() == 3) mp_launch<3>(wgrid, st, g);
                    else mp_launch<2>(wgrid, st, g);
                    return;
                }
            }
            if (mx_pieces() == 3) mx_launch_wp<T, 2, 3, PRE, 4>(wgrid, st, g);
            else mx_launch_wp<T, 2, 2, PRE, 4>(wgrid, st, g);
            return;
        }
        if (tiling == 6) {
            dim3 wgrid(wrows, (unsigned)ntiles * 2);
            if (mx_pieces() == 3) mx_launch<T, 2, 3, PRE, 6>(wgrid, st, g);
            else mx_launch<T, 2, 2, PRE, 6>(wgrid, st, g);
            return;
        }
    }
    dim3 grid((unsigned)((g.rows + MQ_BM - 1) / MQ_BM), (unsigned)ntiles);
    if constexpr (T != CU_TYPE_Q4_K) {     /* V0 predates Q4_K: it runs V1 there */
        if (ver == 0) {
            /* V0: 2 pieces under the same register cap as k_mmq (3 blocks per SM: 58 KB of shared
             * memory each); 3 pieces take 76 KB, so 2 blocks per SM and no cap */
            if (mx_pieces() == 3) mx_launch<T, 2, 3, PRE, 0>(grid, st, g);
            else mx_launch<T, MQ_OCC_DEFAULT, 2, PRE, 0>(grid, st, g);
            return;
        }
    }
    if (mx_pieces() == 3) {
        /* V1, 3 pieces: <= 75.5 KB of shared memory, 3 blocks per SM fit the H200's 228 KB
         * (Q4_K's mins and item sums take 4 KB more: 2 blocks, no register cap) */
        if constexpr (3 * (mx_lay<T, 3, 1>::bytes + 1024) > 228 * 1024) mx_launch<T, 2, 3, PRE, 1>(grid, st, g);
        else if (mx_occ3() == 2) mx_launch<T, 2, 3, PRE, 1>(grid, st, g);
        else mx_launch<T, 3, 3, PRE, 1>(grid, st, g);
    } else {
        mx_launch<T, MQ_OCC_DEFAULT, 2, PRE, 1>(grid, st, g);
    }
}

/* The exact-activation kernel for g.wtype; 0 when the type has none. */
template <bool PRE>
static int mx_run(const cu_gemv_args &g, int ntiles, cudaStream_t st) {
    switch (g.wtype) {
    case CU_TYPE_Q8_0: mx_pick<CU_TYPE_Q8_0, PRE>(ntiles, st, g); break;
    case CU_TYPE_Q8_0R: mx_pick<CU_TYPE_Q8_0R, PRE>(ntiles, st, g); break;
    case CU_TYPE_IQ2R: mx_pick<CU_TYPE_IQ2R, PRE>(ntiles, st, g); break;
    case CU_TYPE_IQ2_XXS: mx_pick<CU_TYPE_IQ2_XXS, PRE>(ntiles, st, g); break;
    case CU_TYPE_Q2_K: mx_pick<CU_TYPE_Q2_K, PRE>(ntiles, st, g); break;
    case CU_TYPE_MXFP4: mx_pick<CU_TYPE_MXFP4, PRE>(ntiles, st, g); break;
    case CU_TYPE_Q4_K: mx_pick<CU_TYPE_Q4_K, PRE>(ntiles, st, g); break;
    default: return 0;
    }
    return 1;
}

extern "C" int cu_mmq(const cu_gemv_args *ga, int ntiles, cudaStream_t st) {
    if (!cu_mmq_supported(ga)) return 0;
    cu_gemv_args g = *ga;
    g.items = (int)(g.in / 32);
    if (g.act_div <= 0) g.act_div = 1;
    dim3 grid((unsigned)((g.rows + MQ_BM - 1) / MQ_BM), (unsigned)ntiles);
    if (g.act_f32 && g.wtype != CU_TYPE_F16) return mx_run<false>(g, ntiles, st);
    static int occ = -1;
    if (occ < 0) { const char *e = getenv("MINKE_CUDA_MMQ_OCC"); occ = e ? atoi(e) : MQ_OCC_DEFAULT; if (occ != 3 && occ != 4) occ = 1; }
#define MQ_LAUNCH(T) (occ == 4 ? cu_launch(k_mmq<T, 4>, grid, MQ_THREADS, 0, st, g) : \
                      occ == 3 ? cu_launch(k_mmq<T, 3>, grid, MQ_THREADS, 0, st, g) : cu_launch(k_mmq<T, 1>, grid, MQ_THREADS, 0, st, g))
    switch (g.wtype) {
    case CU_TYPE_Q8_0: MQ_LAUNCH(CU_TYPE_Q8_0); break;
    case CU_TYPE_Q8_0R: MQ_LAUNCH(CU_TYPE_Q8_0R); break;
    case CU_TYPE_IQ2R: MQ_LAUNCH(CU_TYPE_IQ2R); break;
    case CU_TYPE_IQ2_XXS: MQ_LAUNCH(CU_TYPE_IQ2_XXS); break;
    case CU_TYPE_F16: cu_mmf16(&g, ntiles, st); break;
    case CU_TYPE_Q2_K: MQ_LAUNCH(CU_TYPE_Q2_K); break;
    case CU_TYPE_MXFP4: MQ_LAUNCH(CU_TYPE_MXFP4); break;
    default: return 0;
    }
#undef MQ_LAUNCH
    return 1;
}

/* ---- pre-split activations: a split launch into a caller's buffer, then the
 * product reading pieces instead of f32 (about half the bytes per element and
 * no split work per block; the same pieces and results as act_f32). Declared
 * here until cu_ops.h takes them:
 *   int64_t cu_mmq_split_row_bytes(int64_t n);
 *   int cu_mmq_split_act(int wtype, const float *x, int64_t nrows, int64_t n, int64_t xstride, void *out, cudaStream_t st);
 *   int cu_mmq_presplit(const cu_gemv_args *g, int ntiles, cudaStream_t st);
 * split_act: nrows f32 rows of n elements, xstride bytes apart, into rows of
 * cu_mmq_split_row_bytes(n) bytes (wtype: the weights they will meet; Q2_K
 * has one scale per 256). presplit: cu_mmq with act = those rows, act_stride =
 * cu_mmq_split_row_bytes(n), act_f32 ignored; grouped input as for f32 rows
 * (group_act_bytes in bytes of the f32 row, a multiple of 128). */
extern "C" int64_t cu_mmq_split_row_bytes(int64_t n) {
    int64_t items = n / 32;
    return (items * (32 * mx_pieces() + 4) + 15) & ~(int64_t)15;
}

extern "C" int cu_mmq_split_act(int wtype, const float *x, int64_t nrows, int64_t n, int64_t xstride, void *out,
                                cudaStream_t st) {
    int blk = wtype == CU_TYPE_Q2_K;
    if (nrows <= 0 || n % (blk ? 256 : 32) || ((uintptr_t)x & 15) || xstride % 16 || ((uintptr_t)out & 15)) return 0;
    int items = (int)(n / 32), stages = (items + MQ_KI - 1) / MQ_KI;
    int64_t threads = nrows * stages * 8;
    dim3 grid((unsigned)((threads + 255) / 256));
    int64_t os = cu_mmq_split_row_bytes(n);
    uint8_t *o = (uint8_t *)out;
    if (mx_pieces() == 3) {
        if (blk) cu_launch(k_mmq_split<true, 3>, grid, 256, 0, st, x, nrows, items, xstride, o, os);
        else cu_launch(k_mmq_split<false, 3>, grid, 256, 0, st, x, nrows, items, xstride, o, os);
    } else {
        if (blk) cu_launch(k_mmq_split<true, 2>, grid, 256, 0, st, x, nrows, items, xstride, o, os);
        else cu_launch(k_mmq_split<false, 2>, grid, 256, 0, st, x, nrows, items, xstride, o, os);
    }
    return 1;
}

extern "C" int cu_mmq_presplit(const cu_gemv_args *ga, int ntiles, cudaStream_t st) {
    cu_gemv_args g = *ga;
    g.act_f32 = 0;
    if (g.wtype == CU_TYPE_F16 || !mq_supported(&g, true)) return 0;
    if (((uintptr_t)g.act & 15) || g.act_stride % 16 || g.group_act_bytes % 128) return 0;
    g.items = (int)(g.in / 32);
    if (g.act_div <= 0) g.act_div = 1;
    return mx_run<true>(g, ntiles, st);
}

extern "C" int cu_mmq_tables_init(const uint64_t *grid) {
    return cudaMemcpyToSymbol(cu_mmq_grid, grid, sizeof(uint64_t) * 256) == cudaSuccess ? 0 : -1;
}
