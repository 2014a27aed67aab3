/* cu_gemv3.cu: decode (one token) products of quantized weights with exact
 * activations, on the integer dot-product units (dp4a).
 *
 * Why: with f32 FMAs a quantized weight costs a decode to float plus an FMA
 * per element, and the decode GEMVs of a Flash q2 step were bound by those
 * instructions (ncu: 5.7 instructions a weight for IQ2_XXS, 6.7 for Q8_0, 8
 * for Q2_K). Here every block splits the f32 activations it stages into three
 * int8 pieces (cu_split.cuh: 24 bits of each group's amax, the pieces the
 * tensor-core prefill uses), and each weight code meets each piece in one
 * dp4a lane; a group's three integer dots are exact and become one float dot
 * (mx_combine3), scaled once: each element is exact to ~6e-8 of its group's
 * amax, at about half the instructions of the f32 kernels (measured time:
 * docs/performance.md, third session).
 *
 * The kernels:
 *   k_g3_iq2_glu_b the routed experts' gate and up (IQ2_XXS / IQ2R) for the
 *                 selected experts of one token, with the SwiGLU and the
 *                 router weight in the epilogue (no separate SwiGLU launch),
 *                 sums batched over 8 units, no branches between its loads;
 *   k_g3_q2k_down the routed experts' down (Q2_K) summed over the selected
 *                 experts in each output row (no separate sum launch);
 *                 both keep their blocks resident and give each lane one
 *                 fixed slice of the activations, held in registers;
 *   k_g3_q8       dense Q8_0 / Q8_0R of one token (the decode projections;
 *                 default since the seventh session: blocks of up to 32 rows,
 *                 about one an SM, so a block's split of the input serves
 *                 many rows; MINKE_CUDA_G3=1 gives them back to k_gemvf);
 *                 an input its writer already split (cu_gemv_args.xitems) is
 *                 copied instead, and blocks of 32 rows can store their
 *                 output split for the next product (oitems);
 *   k_moe_glu_mma k_g3_iq2_glu_b's work on the int8 tensor cores, the
 *                 weights streamed (sm_90, rows of 16-byte multiples: the
 *                 default there since the twenty-sixth session; see there);
 *   k_g3_q8s, k_g3_q2k_downs  k_g3_q8's and k_g3_q2k_down's products with
 *                 the weights streamed into shared memory by bulk copies
 *                 (sm_90, cu_bulk.cuh), the same arithmetic and order (the
 *                 same bits as k_g3_q8 with KS = 1 and as k_g3_q2k_down).
 * Each output is summed in a fixed order (the same bits every run).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_ops.h"
#include "cuda/cu_gemv3.h"
#include "cuda/cu_split.cuh"
#include "cuda/cu_bulk.cuh"
#include "cuda/cu_g3.cuh"

/* the IQ2_XXS grid as byte selectors, and the sign selectors of the 128
 * stored sign patterns (cu_gemv3_tables_init, from the grid src/quant
 * decodes with; see k_g3_iq2_glu_b) */
__device__ uint32_t g3_tsel[256];
__device__ uint32_t g3_ssel[128];
/* both, 32 copies of each entry (entry e, copy l at e * 32 + l): what the
 * kernels keep in shared memory, for k_moe_glu_mma's one bulk copy */
__device__ __align__(16) uint32_t g3_texp[(256 + 128) * 32];

#define G3_MAXIN 16384
#define G3_DENSE_MIN 2048     /* dense: the least rows and inputs with MINKE_CUDA_G3=2 */

/* MINKE_CUDA_G3: 0 turns these kernels off (the f32 GEMVs run instead), 1
 * keeps the MoE kernels only, 2 (default) uses the dense one too where it is
 * faster (cu_gemv3), 3 the dense one for every shape (the checks) */
static int g3_on = -1;
extern "C" void cu_gemv3_set(int v) { g3_on = v; }
extern "C" int cu_gemv3_enabled(void) {
    if (g3_on < 0) { const char *e = getenv("MINKE_CUDA_G3"); g3_on = e && *e ? atoi(e) : 2; }
    return g3_on;
}

/* the MoE kernels decode the grid's bytes as selectors of {8, 25, 43}: a grid
 * with other bytes turns them off (cu_moe_dec_supported) */
static int g3_grid_ok = 0;
extern "C" int cu_gemv3_tables_init(const uint64_t *grid) {
    uint32_t tsel[256], ssel[128];
    g3_grid_ok = 1;
    for (int k = 0; k < 256; k++) {
        tsel[k] = 0;
        for (int j = 0; j < 8; j++) {
            unsigned b = (unsigned)(grid[k] >> (8 * j)) & 255u;
            if (b != 8 && b != 25 && b != 43) g3_grid_ok = 0;
            tsel[k] |= (b == 8 ? 0u : b == 25 ? 1u : 2u) << (4 * j);
        }
    }
    /* the eighth sign is the parity of the seven stored ones; sign j moves selector j to NEG (+4) */
    for (int i = 0; i < 128; i++) {
        unsigned S = (unsigned)i | ((unsigned)__builtin_popcount((unsigned)i) & 1u) << 7;
        ssel[i] = 0;
        for (int j = 0; j < 8; j++) ssel[i] |= ((S >> j) & 1u) << (4 * j + 2);
    }
    if (cudaMemcpyToSymbol(g3_tsel, tsel, sizeof tsel) != cudaSuccess) return -1;
    static uint32_t texp[(256 + 128) * 32];
    for (int e = 0; e < 256 + 128; e++)
        for (int l = 0; l < 32; l++) texp[e * 32 + l] = e < 256 ? tsel[e] : ssel[e - 256];
    if (cudaMemcpyToSymbol(g3_texp, texp, sizeof texp) != cudaSuccess) return -1;
    return cudaMemcpyToSymbol(g3_ssel, ssel, sizeof ssel) == cudaSuccess ? 0 : -1;
}

struct g3_args {
    const uint8_t *w, *w2;          /* weights (MoE: expert 0); w2: a second matrix (dense pair, or up) */
    uint64_t row_bytes, expert_bytes;
    int rows, in;                   /* rows of a matrix, inputs */
    const float *x;                 /* f32 activations (down: nsel rows of `in`) */
    int64_t group_rows, group_floats;   /* grouped input: row r reads x + (r / group_rows) * group_floats */
    float *out, *out2;
    int accumulate;
    const int *sel; const float *rw; int nsel; float limit;   /* MoE */
    const int *xi;                  /* dense, one token: x split ahead (cu_gemv_args.xitems) */
    int *oi;                        /* k_g3_q8 with KS = 1: out's rows also stored as items (cu_gemv_args.oitems) */
};

/* ------------------------------------------------------------------ */
/* Q8_0 (34-byte blocks) and Q8_0R (codes, then the scales): one item = 32 codes */

template <bool REP>
__device__ __forceinline__ void g3_q8_load(const uint8_t *row, int it, int nit, uint32_t (&q)[8], float &d) {
    if (REP) {
        uint4 a = ldw_v4(row + (int64_t)it * 32), b = ldw_v4(row + (int64_t)it * 32 + 16);
        q[0] = a.x; q[1] = a.y; q[2] = a.z; q[3] = a.w; q[4] = b.x; q[5] = b.y; q[6] = b.z; q[7] = b.w;
        d = cu_h2f((uint16_t)ldw_u16(row + (int64_t)nit * 32 + 2 * it));
    } else {
        const uint8_t *b = row + (int64_t)it * 34;
        d = cu_h2f((uint16_t)ldw_u16(b));
#pragma unroll
        for (int k = 0; k < 8; k++) q[k] = ldw_u16(b + 2 + 4 * k) | (ldw_u16(b + 4 + 4 * k) << 16);
    }
}

/* 8 warps: 8 / KS row groups of R rows, each row's items split over KS
 * warps. A lane keeps a ring of NI items of its R rows in flight: the first
 * NI are requested before cu_pdl_enter() (weights are never written in a
 * step), and each slot is refilled with the item NI steps on once used. */
template <bool REP, int R, int KS, int NI>
__global__ void __launch_bounds__(256) k_g3_q8(g3_args a) {
    extern __shared__ int4 g3_sm[];
    int *sh = (int *)g3_sm;
    __shared__ float sred[KS > 1 ? 8 * R : 1];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const int wr = warp / KS, ks = warp - wr * KS, nwr = nw / KS;
    const int nit = a.in >> 5;
    const uint8_t *wb = a.w;
    float *out = a.out;
    if (blockIdx.y) { wb = a.w2; out = a.out2; }
    const int64_t rb = (int64_t)blockIdx.x * nwr * R, r0 = rb + (int64_t)wr * R;
    const uint8_t *row[R];
#pragma unroll
    for (int rr = 0; rr < R; rr++) row[rr] = wb + (r0 + rr < a.rows ? r0 + rr : a.rows - 1) * (int64_t)a.row_bytes;
    const int S = 32 * KS, it0 = ks * 32 + lane;
    const int nl = it0 < nit ? (nit - it0 + S - 1) / S : 0;     /* this lane's items */
    uint32_t q[NI][R][8]; float d[NI][R];
#pragma unroll
    for (int k = 0; k < NI; k++)
        if (k < nl) {
#pragma unroll
            for (int rr = 0; rr < R; rr++) g3_q8_load<REP>(row[rr], it0 + k * S, nit, q[k][rr], d[k][rr]);
        }
    cu_pdl_enter();
    const int64_t grp = a.group_rows ? rb / a.group_rows : 0;
    if (a.xi) g3_items_copy(a.xi + grp * (a.group_floats >> 5) * G3_IW, nit, sh, threadIdx.x, blockDim.x);
    else g3_stage<false, false>(a.x + grp * a.group_floats, a.in, sh);
    __syncthreads();
    float acc[R];
#pragma unroll
    for (int rr = 0; rr < R; rr++) acc[rr] = 0.f;
    for (int k0 = 0; k0 < nl; k0 += NI) {
#pragma unroll
        for (int k = 0; k < NI; k++) {
            if (k0 + k >= nl) break;
            g3_act act;
            g3_act_load(act, sh, it0 + (k0 + k) * S);
#pragma unroll
            for (int rr = 0; rr < R; rr++) {
                int s0 = MX_MAGIC_BITS, s1 = MX_MAGIC_BITS, s2 = MX_MAGIC_BITS;
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    s0 = __dp4a((int)q[k][rr][j], g3_word(act, 0, j), s0);
                    s1 = __dp4a((int)q[k][rr][j], g3_word(act, 1, j), s1);
                    s2 = __dp4a((int)q[k][rr][j], g3_word(act, 2, j), s2);
                }
                acc[rr] = __fmaf_rn(mx_combine3(s0, s1, s2), d[k][rr] * act.D, acc[rr]);
            }
            if (k0 + k + NI < nl) {
#pragma unroll
                for (int rr = 0; rr < R; rr++) g3_q8_load<REP>(row[rr], it0 + (k0 + k + NI) * S, nit, q[k][rr], d[k][rr]);
            }
        }
    }
#pragma unroll
    for (int rr = 0; rr < R; rr++) acc[rr] = warp_sum(acc[rr]);
    if (KS > 1) {
        if (lane == 0) {
#pragma unroll
            for (int rr = 0; rr < R; rr++) sred[warp * R + rr] = acc[rr];
        }
        __syncthreads();
        if (ks != 0) return;
#pragma unroll
        for (int rr = 0; rr < R; rr++) {
            float s = 0.f;
            for (int k = 0; k < KS; k++) s += sred[(warp + k) * R + rr];
            acc[rr] = s;
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int rr = 0; rr < R; rr++)
            if (r0 + rr < a.rows) {
                float *o = out + r0 + rr;
                if (a.accumulate) *o += acc[rr]; else *o = acc[rr];
            }
    }
    if constexpr (KS == 1 && R == 4) {
        /* the block's 32 rows (one whole item: the launcher sets oi only for
         * this instance, 8 warps) as the next product's input item, lane li
         * of 8 taking float4 li; compiled only here, so that the other
         * instances (out_b's, the shared down's small blocks) keep their
         * registers */
        __shared__ __align__(16) float orow[8 * R];
        if (a.oi) {
            if (lane == 0) {
#pragma unroll
                for (int rr = 0; rr < R; rr++) orow[wr * R + rr] = acc[rr];
            }
            __syncthreads();
            if ((int)threadIdx.x < nwr * R / 4) {
                const float4 v = *(const float4 *)(orow + 4 * threadIdx.x);
                const float m = g3_item_amax(v, 0xffu << (lane & 24));
                g3_item_store(a.oi + ((rb >> 5) + (threadIdx.x >> 3)) * G3_IW, v, m, lane & 7);
            }
        }
    }
}

/* Q8_0R streamed through shared memory (sm_90: cu_bulk.cuh). A block takes
 * a contiguous range of rows (in one input group) and streams it in stages
 * of RPS rows (a row, or a few short ones: stages of a few KB, so the first
 * products start soon after the first bytes arrive), one bulk copy a stage,
 * through a ring of nst stage buffers: a producer warp (warp G3S_NW) issues
 * the first nst stages before the PDL wait, then each stage as soon as its
 * buffer's computing warp has released it (the empty barrier). The G3S_NW
 * computing warps take the stages in turn (warp w: stages w, w + G3S_NW, ...),
 * each of the stage's rows whole: lane l items l, l + 32, ... in that order,
 * then warp_sum, which is k_g3_q8's order with KS = 1 (the same bits). */
#define G3S_NW 8
#define G3S_MAXST 32
template <int RPS>
__global__ void __launch_bounds__((G3S_NW + 1) * 32, 1) k_g3_q8s(g3_args a, int nst) {
#if CU_BULK_ARCH
    extern __shared__ int4 g3_sm[];
    __shared__ uint64_t full[G3S_MAXST], empty[G3S_MAXST];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nit = a.in >> 5;
    int *sh = (int *)g3_sm;
    uint8_t *stg = (uint8_t *)g3_sm + g3_items_smem(nit);
    const uint8_t *wb = blockIdx.y ? a.w2 : a.w;
    float *out = blockIdx.y ? a.out2 : a.out;
    /* the block's rows: blocks split each input group evenly (gridDim.x a multiple of the groups) */
    const int64_t gr = a.group_rows ? a.group_rows : a.rows, ngroups = a.rows / gr, bpg = gridDim.x / ngroups;
    const int64_t g = blockIdx.x / bpg, bi = blockIdx.x - g * bpg;
    const int64_t r0 = g * gr + gr * bi / bpg, r1 = g * gr + gr * (bi + 1) / bpg;
    const int ns = (int)((r1 - r0 + RPS - 1) / RPS);
    const size_t sbytes = (size_t)RPS * a.row_bytes;
    bulk_ring_init(full, empty, nst);
    __syncthreads();
    if (warp == G3S_NW) {
        /* this warp reads only weights: no wait for the previous kernel */
        auto issue = [&](int s) {
            const int b = s % nst;
            if (s >= nst) mbar_wait(&empty[b], (uint32_t)((s / nst) - 1) & 1u);
            const int64_t rs = r0 + (int64_t)s * RPS, nr = r1 - rs < RPS ? r1 - rs : RPS;
            const uint32_t bytes = (uint32_t)(nr * (int64_t)a.row_bytes);
            mbar_arrive_tx(&full[b], bytes);
            bulk_g2s(stg + b * sbytes, wb + rs * (int64_t)a.row_bytes, bytes, &full[b]);
        };
        bulk_produce(nst, ns, lane, issue);
        return;
    }
    cu_pdl_enter();
    g3_stage<false, false>(a.x + (a.group_rows ? g * a.group_floats : 0), a.in, sh, G3S_NW * 32);
    asm volatile("bar.sync 1, %0;" ::"n"(G3S_NW * 32) : "memory");
    for (int s = warp; s < ns; s += G3S_NW) {
        const int b = s % nst;
        mbar_wait(&full[b], (uint32_t)(s / nst) & 1u);
        const int64_t rs = r0 + (int64_t)s * RPS;
        const uint8_t *rowp = stg + b * sbytes;
        float acc[RPS];
#pragma unroll
        for (int j = 0; j < RPS; j++) acc[j] = 0.f;
        for (int it = lane; it < nit; it += 32) {
            g3_act act;
            g3_act_load(act, sh, it);
#pragma unroll
            for (int j = 0; j < RPS; j++) {
                const uint8_t *rp = rowp + (size_t)j * a.row_bytes;
                const uint4 c0 = *(const uint4 *)(rp + it * 32), c1 = *(const uint4 *)(rp + it * 32 + 16);
                const float d = cu_h2f(*(const uint16_t *)(rp + nit * 32 + 2 * it));
                const uint32_t q[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
                int s0 = MX_MAGIC_BITS, s1 = MX_MAGIC_BITS, s2 = MX_MAGIC_BITS;
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    s0 = __dp4a((int)q[k], g3_word(act, 0, k), s0);
                    s1 = __dp4a((int)q[k], g3_word(act, 1, k), s1);
                    s2 = __dp4a((int)q[k], g3_word(act, 2, k), s2);
                }
                acc[j] = __fmaf_rn(mx_combine3(s0, s1, s2), d * act.D, acc[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < RPS; j++) acc[j] = warp_sum(acc[j]);
        __syncwarp();
        if (lane == 0) {
            mbar_arrive(&empty[b]);     /* rows past r1 in the last stage were not copied: their sums are not stored */
#pragma unroll
            for (int j = 0; j < RPS; j++)
                if (rs + j < r1) {
                    float *o = out + rs + j;
                    if (a.accumulate) *o += acc[j]; else *o = acc[j];
                }
        }
    }
#endif
}

/* ------------------------------------------------------------------ */
/* IQ2_XXS gate + up of the selected experts, SwiGLU in the epilogue (the
 * selector tables and the signed-code PRMT: cu_g3.cuh). */


/* Both IQ2_XXS MoE kernels: the selector tables into shared memory (32
 * copies of an entry, copy = lane, as 8 16-byte stores; constant, so before
 * the PDL wait), and the selected slots this GPU owns (sel >= 0; all of them
 * with one GPU), 4 bits a slot. */
__device__ __forceinline__ void g3_tables_copy(uint32_t *tgrid) {
    const int n = (256 + 128) * 8;
    for (int i0 = threadIdx.x; i0 < n; i0 += 4 * blockDim.x) {
        uint32_t v[4];      /* four loads in flight before the stores */
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int i = i0 + u * blockDim.x, e = i >> 3;
            v[u] = i < n ? (e < 256 ? g3_tsel[e] : g3_ssel[e - 256]) : 0u;
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int i = i0 + u * blockDim.x;
            if (i < n) ((uint4 *)tgrid)[i] = make_uint4(v[u], v[u], v[u], v[u]);
        }
    }
}
__device__ __forceinline__ int g3_owned(const int *sel, int nsel, uint32_t &own) {
    int nown = 0;
    own = 0;
    for (int k = 0; k < nsel; k++)
        if (sel[k] >= 0) own |= (uint32_t)k << (4 * nown++);
    return nown;
}

/* REP: IQ2R (8-byte groups, then the scales) else IQ2_XXS (66-byte blocks) */
template <bool REP>
/* d: the f16 block scale's bits, converted where it is used (a conversion
 * here would wait for the load and stall the warp for its whole latency) */
__device__ __forceinline__ void g3_iq2_load(const uint8_t *row, int it, int nb, uint2 &c, uint32_t &d) {
    const int blk = it >> 3, g = it & 7;
    if (REP) {
        c = ldw_v2(row + (int64_t)blk * 64 + g * 8);
        d = ldw_u16(row + (int64_t)nb * 64 + 2 * blk);
    } else {
        const uint8_t *b = row + (int64_t)blk * 66;
        d = ldw_u16(b);
        c.x = ldw_u16(b + 2 + 8 * g) | (ldw_u16(b + 4 + 8 * g) << 16);
        c.y = ldw_u16(b + 6 + 8 * g) | (ldw_u16(b + 8 + 8 * g) << 16);
    }
}

/* Transposed warp sum: 16 values a lane in, the warp's sum of value L >> 1
 * out in lane L (and in lane L ^ 1). Each step halves the values a lane
 * holds: it keeps one half, sends the other to the lane o away and adds what
 * that lane sent, so the pairs added are those of warp_sum (xor 16, 8, 4, 2,
 * 1) and every sum has warp_sum's bits, at 16 shuffles instead of 80. */
template <int H>
__device__ __forceinline__ void g3_xstep(float (&v)[16], uint32_t hi, int o) {
#pragma unroll
    for (int i = 0; i < H; i++) {
        /* selp in asm: a C select of two array elements becomes a select of
         * their addresses, which sends the array to local memory */
        float keep, send;
        asm("{ .reg .pred p; setp.ne.u32 p, %4, 0; selp.f32 %0, %2, %3, p; selp.f32 %1, %3, %2, p; }"
            : "=f"(keep), "=f"(send) : "f"(v[i + H]), "f"(v[i]), "r"(hi));
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
    }
}
__device__ __forceinline__ float g3_xsum16(float (&v)[16], int lane) {
    g3_xstep<8>(v, lane & 16u, 16);
    g3_xstep<4>(v, lane & 8u, 8);
    g3_xstep<2>(v, lane & 4u, 4);
    g3_xstep<1>(v, lane & 2u, 2);
    return v[0] + __shfl_xor_sync(0xffffffffu, v[0], 1);
}

/* Work split: a row's items are split over the 4 warps of a group
 * ("quarters": warp q takes items q * 32 + lane), so each lane meets one item
 * of the activations for the whole launch and keeps its pieces in registers.
 * A group takes a contiguous range of units (selected expert e, row r: the
 * gate row and the up row), GB_B of them a batch, with a ring of GB_D units'
 * codes in flight. Each lane keeps its item's scaled dot of every gate and up
 * row of the batch; the warp adds them with one transposed sum (g3_xsum16, the
 * pairs of warp_sum) and the group meets at one named barrier a batch, where
 * warp 0 adds the 4 quarter sums in quarter order and applies the SwiGLU and
 * the router weight. Blocks stay resident (grid: as many as fit) so the
 * tables and the split are made once a block. The first version summed and
 * met once a unit (two warp sums, a barrier and a division each): the same
 * bits, 35 us alone against 25 (docs/performance.md, sixth session). */
#define GB_B 8     /* units a batch: 2 GB_B = 16 values to g3_xsum16 */
#define GB_D 4
template <bool REP>
__global__ void __launch_bounds__(256, 2) k_g3_iq2_glu_b(g3_args a) {
    extern __shared__ int4 g3_sm[];
    uint32_t *tgrid = (uint32_t *)g3_sm;                 /* 256 x 32 copies */
    uint32_t *tsgn = tgrid + 256 * 32;                    /* 128 x 32 copies */
    int *sh = (int *)(tsgn + 128 * 32);                   /* the split activations */
    __shared__ float part[2][2][4][2 * GB_B];             /* [group][slot][quarter][gate 0..B-1, up 0..B-1] */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int grp = warp >> 2, q = warp & 3;
    g3_tables_copy(tgrid);
    cu_pdl_enter();
    __shared__ int64_t eoff[16];                          /* the owned slots' expert offsets */
    uint32_t own;
    const int nown = g3_owned(a.sel, a.nsel, own);
    const int F = a.rows, nit = a.in >> 5, nb = a.in >> 8, nunits = nown * F;
    const int it = q * 32 + lane;
    const bool has = it < nit;
    const int itc = has ? it : nit - 1;                   /* lanes past the input load a real item (their act is 0) */
    if (threadIdx.x < nown) eoff[threadIdx.x] = (int64_t)a.sel[(own >> (4 * threadIdx.x)) & 15] * (int64_t)a.expert_bytes;
    __syncthreads();
    const int ng = gridDim.x * 2, gi = blockIdx.x * 2 + grp;
    const int u0 = (int)((int64_t)nunits * gi / ng), u1 = (int)((int64_t)nunits * (gi + 1) / ng);
    /* The loader: next unit lu = (slot lj, row lr) at byte offset loff of both
     * matrices. Every call issues the same loads (past the range it reloads the
     * last unit) and the advance reads only shared memory: with a fixed count
     * of loads in flight the compiler can wait for the oldest one only. */
    int lu = u0, lj = F ? u0 / F : 0, lr = u0 - lj * F;
    int64_t loff = u0 < u1 ? eoff[lj] + (int64_t)lr * (int64_t)a.row_bytes : 0;
    uint2 c[GB_D][2]; uint32_t d[GB_D][2];
    auto load_next = [&](uint2 (&cc)[2], uint32_t (&dd)[2]) {
        g3_iq2_load<REP>(a.w + loff, itc, nb, cc[0], dd[0]);
        g3_iq2_load<REP>(a.w2 + loff, itc, nb, cc[1], dd[1]);
        if (lu + 1 < u1) {
            lu++; lr++; loff += (int64_t)a.row_bytes;
            if (lr == F) { lr = 0; lj++; loff = eoff[lj]; }
        }
    };
#pragma unroll
    for (int k = 0; k < GB_D; k++) load_next(c[k], d[k]);
    g3_stage<false, false>(a.x, a.in, sh);
    __syncthreads();
    g3_act act;
    if (has) g3_act_load(act, sh, it);
    else { for (int k = 0; k < 6; k++) act.p[k] = make_int4(0, 0, 0, 0); act.D = 0.f; }
    /* a lane's copies of the tables, addressed in bytes: entry i at i * 128 */
    const char *tgb = (const char *)(tgrid + lane), *tsb = (const char *)(tsgn + lane);
    int slot = 0;
    for (int b = u0; b < u1; b += GB_B) {
        /* no branches inside a batch: units past the range compute from
         * the reloaded last unit, and their sums are not stored */
        float v[2 * GB_B];
#pragma unroll
        for (int i = 0; i < GB_B; i++) {
            const int k = i % GB_D;
#pragma unroll
            for (int rr = 0; rr < 2; rr++) {
                const uint2 cw = c[k][rr];
                int s0 = MX_MAGIC_BITS, s1 = MX_MAGIC_BITS, s2 = MX_MAGIC_BITS;
#pragma unroll
                for (int l = 0; l < 4; l++) {
                    /* grid index l and sign group l times 128, shifted and masked in one step each */
                    const uint32_t go = (l == 0 ? cw.x << 7 : cw.x >> (8 * l - 7)) & 0x7f80u;
                    const uint32_t so = (l == 0 ? cw.y << 7 : cw.y >> (7 * l - 7)) & 0x3f80u;
                    const uint32_t sel = *(const uint32_t *)(tgb + go) | *(const uint32_t *)(tsb + so);
                    const int v0 = (int)g3_prmt(G3_POS, G3_NEG, sel), v1 = (int)g3_prmt(G3_POS, G3_NEG, sel >> 16);
                    s0 = __dp4a(v0, g3_word(act, 0, 2 * l), s0); s0 = __dp4a(v1, g3_word(act, 0, 2 * l + 1), s0);
                    s1 = __dp4a(v0, g3_word(act, 1, 2 * l), s1); s1 = __dp4a(v1, g3_word(act, 1, 2 * l + 1), s1);
                    s2 = __dp4a(v0, g3_word(act, 2, 2 * l), s2); s2 = __dp4a(v1, g3_word(act, 2, 2 * l + 1), s2);
                }
                const float dg = cu_h2f((uint16_t)d[k][rr]) * (0.5f + (float)(cw.y >> 28)) * 0.25f;
                v[rr * GB_B + i] = mx_combine3(s0, s1, s2) * (dg * act.D);
            }
            load_next(c[k], d[k]);
        }
        const float sum = g3_xsum16(v, lane);
        if (!(lane & 1)) part[grp][slot][q][lane >> 1] = sum;
        asm volatile("bar.sync %0, 128;" ::"r"(1 + grp) : "memory");
        if (q == 0 && lane < GB_B && b + lane < u1) {
            const float *p0 = part[grp][slot][0], *p1 = part[grp][slot][1], *p2 = part[grp][slot][2], *p3 = part[grp][slot][3];
            const float gs = ((p0[lane] + p1[lane]) + p2[lane]) + p3[lane];
            const float us = ((p0[GB_B + lane] + p1[GB_B + lane]) + p2[GB_B + lane]) + p3[GB_B + lane];
            const int un = b + lane, j = un / F, e = (int)(own >> (4 * j)) & 15;
            a.out[e * F + (un - j * F)] = cu_swiglu1(gs, us, a.limit) * (a.rw ? a.rw[e] : 1.f);   /* mid[e][r] */
        }
        slot ^= 1;
    }
}

/* ------------------------------------------------------------------ */
/* Q2_K down of the selected experts, summed per output row. A lane's unit is
 * 16 bytes of a block's codes, qs[32 n + 16 h ...]: with the four 2-bit
 * planes s that is the four 16-element sub-blocks 8 n + 2 s + h (64 weights).
 * The activations have one scale per block of 256 (BLK), so a unit's integer
 * sums take the 4-bit sub-block scales in the integers (IMAD) and only the
 * mins (dmin m sum(x)) and the final scale stay in float. The input has at
 * most 32 units a row (2048), one per lane. */
struct g3_q2k_w { uint4 qs; uint2 sc; uint32_t dd; };
__device__ __forceinline__ void g3_q2k_load(const uint8_t *row, int u, g3_q2k_w &w) {
    const int blk = u >> 2, n = (u >> 1) & 1, h = u & 1;
    /* 84-byte blocks: only 4-byte aligned */
    const uint8_t *b = row + (int64_t)blk * 84, *q = b + 16 + 32 * n + 16 * h;
    w.qs = make_uint4(ldw_u32(q), ldw_u32(q + 4), ldw_u32(q + 8), ldw_u32(q + 12));
    w.sc = make_uint2(ldw_u32(b + 8 * n), ldw_u32(b + 8 * n + 4));
    w.dd = ldw_u32(b + 80);
}

/* the unit's dot with one row's weights: sum over its 4 planes of the sub-block
 * scale x the integer dots of the 3 pieces, minus dmin x the mins' sums */
__device__ __forceinline__ float g3_q2k_unit(const g3_q2k_w &w, const int (&xw)[4][3][4], const float (&xs)[4], float D) {
    const uint32_t qw[4] = {w.qs.x, w.qs.y, w.qs.z, w.qs.w};
    const int h = threadIdx.x & 1;
    int i0 = MX_MAGIC_BITS, i1 = MX_MAGIC_BITS, i2 = MX_MAGIC_BITS;
    float mm = 0.f;
#pragma unroll
    for (int s = 0; s < 4; s++) {
        /* sub-block 8 n + 2 s + h: byte 2 s + h of the 8 scale bytes at 8 n */
        const uint32_t sb = ((s < 2 ? w.sc.x : w.sc.y) >> (8 * (2 * (s & 1) + h))) & 255u;
        int t0 = 0, t1 = 0, t2 = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int cj = (int)((qw[j] >> (2 * s)) & 0x03030303u);
            t0 = __dp4a(cj, xw[s][0][j], t0);
            t1 = __dp4a(cj, xw[s][1][j], t1);
            t2 = __dp4a(cj, xw[s][2][j], t2);
        }
        const int sc = (int)(sb & 15u);
        i0 += sc * t0; i1 += sc * t1; i2 += sc * t2;
        mm = __fmaf_rn((float)(sb >> 4), xs[s], mm);
    }
    const float dd = cu_h2f((uint16_t)w.dd), dmin = cu_h2f((uint16_t)(w.dd >> 16));
    return __fmaf_rn(dd * D, mx_combine3(i0, i1, i2), -dmin * mm);
}

/* A lane's activations for its unit (staged with BLK and SUMS): plane s is
 * item it0 + s, words 4h .. 4h + 3 of its pieces, the half sums and D. An
 * inactive lane (past the input, or another GPU's slot) reads item 0 and
 * never uses what it read: its callers compute a unit only when active. (The
 * values used to be zeroed here with `active ? v : 0`, and the compiler sank
 * those selects into the loop: one SEL a dp4a, 18% of the down's
 * instructions in ncu, twenty-eighth session.) */
__device__ __forceinline__ void g3_q2k_xload(const int *sh, int it0, int h, bool active, int (&xw)[4][3][4], float (&xs)[4],
                                             float &D) {
    const int ib = active ? it0 : 0;
#pragma unroll
    for (int s = 0; s < 4; s++) {
        const int *ip = sh + (ib + (active ? s : 0)) * G3_IW;
#pragma unroll
        for (int p = 0; p < 3; p++) {
            const int4 v = *(const int4 *)(ip + 8 * p + 4 * h);
            xw[s][p][0] = v.x; xw[s][p][1] = v.y; xw[s][p][2] = v.z; xw[s][p][3] = v.w;
        }
        xs[s] = __int_as_float(ip[25 + h]);
    }
    D = __int_as_float(sh[ib * G3_IW + 24]);
}

/* SR: the unit's 28 bytes of a row by cp.async into the lane's ring slot
 * (codes at qs_s, scales and d|dmin at sd_s: 16-byte lanes, no bank conflict) */
__device__ __forceinline__ void g3_q2k_fetch(const uint8_t *row, int u, unsigned qs_s, unsigned sd_s) {
    const int blk = u >> 2, n = (u >> 1) & 1, h = u & 1;
    const uint8_t *b = row + (int64_t)blk * 84, *q = b + 16 + 32 * n + 16 * h;
#pragma unroll
    for (int k = 0; k < 4; k++) cp_async4(qs_s + 4 * k, q + 4 * k);
    cp_async4(sd_s, b + 8 * n);
    cp_async4(sd_s + 4, b + 8 * n + 4);
    cp_async4(sd_s + 8, b + 80);
}

/* Work split: a group of nsel warps per output row, warp e taking selected
 * expert e's part of it (lane u: unit u), so each lane meets one unit of the
 * activations for the whole launch and keeps its pieces in registers. The
 * split activations of all experts are staged once per block (blocks stay
 * resident); a group takes rows in turn with the codes of the next rows in
 * flight, and per row the expert sums meet in shared memory (named barrier
 * of the group), added by warp 0 in expert order.
 * SR = 0: a ring of G3_DOWN_D rows' codes in registers (47% of the stall
 * samples on their first use, 12 warps an SM at 127 registers: ncu, sixth
 * session). SR > 0 (MINKE_CUDA_DOWN_SR, default 4): a ring of SR rows in
 * shared memory, filled by cp.async, 98 registers; each lane reads back only
 * what it copied, so a wait_group suffices. The same bits. */
#define G3_DOWN_D 4
#define G3_DOWN_GPB 2
template <int NE, int SR>
__global__ void __launch_bounds__(G3_DOWN_GPB * NE * 32) k_g3_q2k_down(g3_args a) {
    extern __shared__ int4 g3_sm[];
    int *sh = (int *)g3_sm;
    __shared__ float part[G3_DOWN_GPB][2][NE];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nsel = a.nsel;
    const int grp = warp / nsel, e = warp - grp * nsel;
    cu_pdl_enter();
    const int nu = a.in >> 6, nitr = a.in >> 5;
    const int u = lane, blk = u >> 2, n = (u >> 1) & 1, h = u & 1;
    /* a slot of an expert another GPU owns (sel -1) adds 0 to the row's sum */
    const int ex = a.sel[e];
    const bool active = u < nu && ex >= 0;
    const uint8_t *wbase = a.w + (int64_t)(ex >= 0 ? ex : 0) * (int64_t)a.expert_bytes;
    const int G = gridDim.x * G3_DOWN_GPB;
    int r = blockIdx.x * G3_DOWN_GPB + grp;
    g3_q2k_w w[SR ? 1 : G3_DOWN_D];
    /* SR: this lane's ring slots, after the staged activations (slot k at
     * + k 1024: codes, then + 512 scales and d|dmin), as a pointer and as the
     * shared address cp.async takes */
    const uint8_t *ringp = (const uint8_t *)sh + nsel * nitr * G3_IW * 4 + warp * SR * 1024 + lane * 16;
    const unsigned ring = (unsigned)__cvta_generic_to_shared(ringp);
    if constexpr (SR > 0) {
#pragma unroll
        for (int k = 0; k < SR; k++) {
            if (active && r + k * G < a.rows)
                g3_q2k_fetch(wbase + (int64_t)(r + k * G) * (int64_t)a.row_bytes, u, ring + k * 1024u, ring + k * 1024u + 512u);
            cp_async_commit();
        }
    } else if (active) {
#pragma unroll
        for (int k = 0; k < G3_DOWN_D; k++)
            if (r + k * G < a.rows) g3_q2k_load(wbase + (int64_t)(r + k * G) * (int64_t)a.row_bytes, u, w[k]);
    }
    g3_stage<true, true>(a.x, nsel * a.in, sh);
    __syncthreads();
    /* this lane's unit: plane s is item 8 blk + 4 n + s of expert e's row, words 4h .. 4h + 3 */
    int xw[4][3][4];
    float xs[4], D;
    g3_q2k_xload(sh, e * nitr + blk * 8 + 4 * n, h, active, xw, xs, D);
    int slot = 0;
    /* one output row: this expert's part, then the group's sum in expert order */
    auto row_out = [&](int rk, float acc) {
        acc = warp_sum(acc);
        if (lane == 0) part[grp][slot][e] = acc;
        asm volatile("bar.sync %0, %1;" ::"r"(1 + grp), "r"(nsel * 32) : "memory");
        if (e == 0 && lane == 0) {
            float o = 0.f;
            for (int k2 = 0; k2 < nsel; k2++) o += part[grp][slot][k2];
            if (a.accumulate) a.out[rk] += o; else a.out[rk] = o;
        }
        slot ^= 1;
    };
    if constexpr (SR > 0) {
        for (int k = 0; r < a.rows; r += G) {
            cp_async_wait<SR - 1>();     /* this lane's copy of row r has landed */
            float acc = 0.f;
            if (active) {
                const unsigned qs_s = ring + k * 1024u;
                g3_q2k_w wk;
                wk.qs = *(const uint4 *)(ringp + k * 1024);
                const uint4 sd = *(const uint4 *)(ringp + k * 1024 + 512);
                wk.sc = make_uint2(sd.x, sd.y); wk.dd = sd.z;
                acc = g3_q2k_unit(wk, xw, xs, D);
                /* the slot, read and used, takes the row SR steps on */
                if (r + SR * G < a.rows)
                    g3_q2k_fetch(wbase + (int64_t)(r + SR * G) * (int64_t)a.row_bytes, u, qs_s, qs_s + 512u);
            }
            cp_async_commit();
            row_out(r, acc);
            k = k + 1 == SR ? 0 : k + 1;
        }
    } else {
        for (; r < a.rows; r += G3_DOWN_D * G) {
#pragma unroll
            for (int k = 0; k < G3_DOWN_D; k++) {
                const int rk = r + k * G;
                if (rk >= a.rows) break;
                float acc = 0.f;
                if (active) {
                    acc = g3_q2k_unit(w[k], xw, xs, D);
                    /* refill the slot with the row D steps on */
                    if (rk + G3_DOWN_D * G < a.rows) g3_q2k_load(wbase + (int64_t)(rk + G3_DOWN_D * G) * (int64_t)a.row_bytes, u, w[k]);
                }
                row_out(rk, acc);
            }
        }
    }
}

/* The same products streamed through shared memory (sm_90: cu_bulk.cuh). A
 * block takes a contiguous range of output rows; each selected expert's rows
 * of that range are contiguous, so a stage is RPS rows of one expert, one
 * bulk copy. Stage s holds expert s % NE's rows chunk s / NE, in a ring of
 * nst buffers (a multiple of NE x G3DS_NG: every fill of a buffer is consumed
 * by the same warp, in order). The copy warp reads the selection before the
 * PDL wait: cu_moe_dec_down follows cu_moe_dec_glu, which waited for the
 * selection's writer, so it is complete when this grid can start; the
 * weights' first stages are in flight while the gate+up kernel drains.
 * Computing warp w (expert w % NE, group w / NE) takes its expert's chunks
 * grp, grp + G3DS_NG, ...: per row the unit of k_g3_q2k_down and its
 * warp_sum, stored per (row, expert); at the end one thread a row adds the
 * experts in order from 0: k_g3_q2k_down's bits. */
#define G3DS_NG 2
#define G3DS_RPS 8
#define G3DS_MAXST 48
template <int NE>
__global__ void __launch_bounds__((G3DS_NG * NE + 1) * 32, 1) k_g3_q2k_downs(g3_args a, int nst) {
#if CU_BULK_ARCH
    extern __shared__ int4 g3_sm[];
    __shared__ uint64_t full[G3DS_MAXST], empty[G3DS_MAXST];
    constexpr int NCW = G3DS_NG * NE;       /* computing warps */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nsel = NE;
    const int nitr = a.in >> 5;
    const int rows_pb = (a.rows + gridDim.x - 1) / gridDim.x;
    int *sh = (int *)g3_sm;
    float *part = (float *)((uint8_t *)g3_sm + g3_items_smem((size_t)NE * nitr));     /* [row - r0][expert] */
    uint8_t *stg = (uint8_t *)part + g3_down_part_bytes(NE, rows_pb);
    const int r0 = (int)((int64_t)a.rows * blockIdx.x / gridDim.x), r1 = (int)((int64_t)a.rows * (blockIdx.x + 1) / gridDim.x);
    const int nch = (r1 - r0 + G3DS_RPS - 1) / G3DS_RPS, ns = nch * NE;
    const size_t sbytes = (size_t)G3DS_RPS * a.row_bytes;
    bulk_ring_init(full, empty, nst);
    __syncthreads();
    if (warp == NCW) {
        bulk_moe_rows_producer<NE, G3DS_RPS>(full, empty, nst, ns, r0, r1, a.w, a.row_bytes, a.expert_bytes, a.sel, stg, sbytes,
                                          lane);
        return;
    }
    cu_pdl_enter();
    const int grp = warp / NE, e = warp - grp * NE;
    const int nu = a.in >> 6;
    const int u = lane, blk = u >> 2, n = (u >> 1) & 1, h = u & 1;
    const bool active = u < nu && a.sel[e] >= 0;
    g3_stage<true, true>(a.x, nsel * a.in, sh, NCW * 32);
    asm volatile("bar.sync 1, %0;" ::"n"(NCW * 32) : "memory");
    int xw[4][3][4];
    float xs[4], D;
    g3_q2k_xload(sh, e * nitr + blk * 8 + 4 * n, h, active, xw, xs, D);
    for (int c = grp; c < nch; c += G3DS_NG) {
        const int s = c * NE + e, b = s % nst;
        mbar_wait(&full[b], (uint32_t)(s / nst) & 1u);
        const int rs = r0 + c * G3DS_RPS, nr = r1 - rs < G3DS_RPS ? r1 - rs : G3DS_RPS;
        const uint8_t *rowp = stg + b * sbytes;
        float acc[G3DS_RPS];
#pragma unroll
        for (int j = 0; j < G3DS_RPS; j++) {
            acc[j] = 0.f;
            if (active && j < nr) {
                const uint8_t *bb = rowp + (size_t)j * a.row_bytes + blk * 84, *q = bb + 16 + 32 * n + 16 * h;
                g3_q2k_w wk;
                wk.qs = make_uint4(*(const uint32_t *)q, *(const uint32_t *)(q + 4), *(const uint32_t *)(q + 8),
                                   *(const uint32_t *)(q + 12));
                wk.sc = make_uint2(*(const uint32_t *)(bb + 8 * n), *(const uint32_t *)(bb + 8 * n + 4));
                wk.dd = *(const uint32_t *)(bb + 80);
                acc[j] = g3_q2k_unit(wk, xw, xs, D);
            }
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[b]);
#pragma unroll
        for (int j = 0; j < G3DS_RPS; j++) {
            const float v = warp_sum(acc[j]);
            if (lane == 0 && j < nr) part[(rs - r0 + j) * NE + e] = v;
        }
    }
    asm volatile("bar.sync 1, %0;" ::"n"(NCW * 32) : "memory");
    bulk_moe_rows_sum(part, NE, r0, r1, a.out, a.accumulate, NCW * 32);
#endif
}

/* ------------------------------------------------------------------ */
/* host launchers */

static size_t g3_items_bytes(int64_t n) { return (size_t)(n / 32) * G3_IW * 4; }
extern "C" size_t cu_gemv3_items_bytes(int64_t n) { return g3_items_bytes(n); }
extern "C" int cu_gemv3_items_enabled(void) {
    static int on = -1;
    if (on < 0) { const char *e = getenv("MINKE_CUDA_G3_ITEMS"); on = e && *e ? atoi(e) != 0 : 1; }
    return on;
}

template <typename K>
static void g3_smem_attr(K k, size_t smem) {
    if (smem > 48 * 1024) cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
}

template <bool REP, int R, int KS>
static void g3_launch_q8(const g3_args &a, int pairs, cudaStream_t st) {
    /* 4 row-items of 34 bytes a lane in flight (8 was slower: 124-126 against
     * 147-148 tok/s in decode, seventh session) */
    constexpr int NI = 4 / R;
    const int nwr = 8 / KS;
    const size_t smem = g3_items_bytes(a.in);
    g3_smem_attr(k_g3_q8<REP, R, KS, NI>, smem);
    cu_launch(k_g3_q8<REP, R, KS, NI>, dim3((unsigned)((a.rows + nwr * R - 1) / (nwr * R)), pairs), 256, smem, st, a);
}

/* cu_gemv_args.beside: k_g3_q8 in blocks of 4 warps (2 rows a warp), ~13 K
 * registers and ~7 KB of shared memory a block for 2048 inputs, where the
 * streamed launch takes 288 threads and ~100 KB a block. In the decode graph
 * the shared expert's down becomes ready as the routed gate + up ends and
 * its blocks start only as the routed down (k_g3_q2k_downs, an SM a block)
 * drains; small blocks finish 5.1 us a layer after it instead of 6.1 (a
 * kernel trace, tools/dev/ktrace.c; docs/performance.md, twenty-third
 * session; blocks held to 64 registers were slower: twenty-fourth). A row's
 * lane l takes items l, l + 32, ..., then warp_sum: the bits of k_g3_q8s and
 * of the default launch (KS = 1). */
static void g3_launch_q8_beside(const g3_args &a, cudaStream_t st) {
    constexpr int R = 2, NI = 2, W = 4;
    const size_t smem = g3_items_bytes(a.in);
    g3_smem_attr(k_g3_q8<true, R, 1, NI>, smem);
    cu_launch(k_g3_q8<true, R, 1, NI>, dim3((unsigned)((a.rows + W * R - 1) / (W * R))), W * 32, smem, st, a);
}

/* The streamed kernels have their bodies on this device: code built for
 * sm_90+ (their bodies are empty in the sm_80 build and its PTX, which a
 * newer GPU without its own code would run) */
static int g3_bulk_ok(void) {
    static int ok[32];
    const int d = cu_cur_dev();
    if (!ok[d]) {
        cudaFuncAttributes fa;
        ok[d] = cudaFuncGetAttributes(&fa, k_g3_q8s<1>) == cudaSuccess && fa.ptxVersion >= 90 ? 1 : -1;
    }
    return ok[d] > 0;
}

extern "C" int cu_gemv3_bulk_ok(void) { return g3_bulk_ok(); }

/* MINKE_CUDA_G3S: streams dense Q8_0R decode products through shared
 * memory (k_g3_q8s) where the device has bulk copies: 2 (default) those with
 * rows of at most 2048 inputs or matrices of at most 6 MB (q_b, q_a, kv, the
 * shared expert's down), 1 every shape, 0 none (k_g3_q8 / k_gemvf).
 * MINKE_CUDA_G3S_KB: the shared memory a block may take (default 100 KB).
 * gemv_check --time, graphs of 43 on the H200 (tenth session): q_b 32768 x
 * 1024 12.2 us against 13.8 (k_gemvf), q_a 3.7 against 4.8, kv 3.3 against
 * 3.7, 4096 x 2048 4.2-4.4 against 4.9 (k_g3_q8); but out_b 4096 x 8192 12.7
 * against 11.8 and 4096 x 4096 7.3-8.0 against 7.2: decode 154.4-154.7 tok/s
 * with 2, 143.0-145.8 with 1, 150.9-152.2 with 0. */
static int g3s_on = -1;
extern "C" void cu_gemv3s_set(int v) { g3s_on = v; }
static int g3s_enabled(void) {
    if (g3s_on < 0) { const char *e = getenv("MINKE_CUDA_G3S"); g3s_on = e && *e ? atoi(e) : 2; }
    return g3_bulk_ok() ? g3s_on : 0;
}
static size_t g3s_budget(void) {
    static int kb = -1;
    if (kb < 0) { const char *e = getenv("MINKE_CUDA_G3S_KB"); kb = e && atoi(e) > 0 ? atoi(e) : 100; }
    return (size_t)kb * 1024;
}

template <int RPS>
static int g3_launch_q8s(const g3_args &a, int pairs, int nbx, cudaStream_t st) {
    const size_t sbytes = (size_t)RPS * a.row_bytes, items = g3_items_smem(a.in >> 5);
    const int nst = g3_ring_stages(g3s_budget(), items, sbytes, G3S_NW, G3S_MAXST);
    const size_t smem = items + (size_t)nst * sbytes;
    if (smem > G3_SMEM_MAX) return 0;
    g3_smem_attr(k_g3_q8s<RPS>, smem);
    static unsigned carve;     /* all of L1 as shared memory: room for the next launch's blocks beside this one's */
    if (cu_dev_first(&carve))
        cudaFuncSetAttribute(k_g3_q8s<RPS>, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared);
    cu_launch(k_g3_q8s<RPS>, dim3((unsigned)nbx, pairs), (G3S_NW + 1) * 32, smem, st, a, nst);
    return 1;
}

/* the streamed kernel for a Q8_0R product (0: it does not apply) */
static int g3_try_q8s(const g3_args &a, int pairs, cudaStream_t st) {
    const int on = g3s_enabled();
    if (!on) return 0;
    /* 2: only the short rows and small matrices (q_b, q_a, kv), judged by
     * one matrix: a paired launch takes the kernel (and the bits) of two
     * single ones */
    if (on == 2 && a.in > 2048 && (int64_t)a.rows * (int64_t)a.row_bytes > (6 << 20)) return 0;
    if (((uintptr_t)a.w | (uintptr_t)(a.w2 ? a.w2 : a.w) | a.row_bytes) & 15) return 0;
    /* about one block an SM; a block's rows in one input group */
    int64_t nbx = cu_num_sms() / pairs;
    if (nbx < 1) nbx = 1;
    if (a.group_rows) {
        const int64_t ngroups = a.rows / a.group_rows;
        if (ngroups * a.group_rows != a.rows) return 0;
        int64_t bpg = nbx / ngroups;
        if (bpg < 1) bpg = 1;
        if (bpg > a.group_rows) bpg = a.group_rows;
        nbx = bpg * ngroups;
    } else if (nbx > a.rows) nbx = a.rows;
    if (nbx > 65535 * 16) return 0;
    /* stages of a row, or of 2 or 4 rows under 4 KB */
    if (a.row_bytes >= 4096) return g3_launch_q8s<1>(a, pairs, (int)nbx, st);
    if (2 * a.row_bytes >= 4096) return g3_launch_q8s<2>(a, pairs, (int)nbx, st);
    return g3_launch_q8s<4>(a, pairs, (int)nbx, st);
}

/* Dense T = 1 products of Q8_0 / Q8_0R weights with f32 activations (cu_gemv
 * calls it first for those); 0 when it does not apply. */
extern "C" int cu_gemv3(const cu_gemv_args *g, cudaStream_t st) {
    const int on = cu_gemv3_enabled();
    if (on < 2 || !g->act_f32 || g->ntok != 1 || g->tile_pairs) return 0;
    if (g->wtype != CU_TYPE_Q8_0 && g->wtype != CU_TYPE_Q8_0R) return 0;
    if (g->in % 32 || g->in > G3_MAXIN || g->rows <= 0 || g->rows > 0x7fffffff) return 0;
    g3_args a;
    memset(&a, 0, sizeof a);
    a.w = (const uint8_t *)g->w; a.w2 = (const uint8_t *)g->w2;
    a.row_bytes = g->row_bytes; a.rows = (int)g->rows; a.in = (int)g->in;
    a.x = (const float *)g->act;
    a.group_rows = g->group_rows; a.group_floats = g->group_act_bytes / 4;
    a.out = g->out; a.out2 = g->out2; a.accumulate = g->accumulate;
    const int pairs = g->w2 ? 2 : 1;
    /* x split ahead: k_g3_q8 takes it (every group's items whole), the streamed kernel splits x itself */
    const int *xi = g->xitems && !(a.group_rows && (a.group_floats & 31)) ? g->xitems : NULL;
    if (g->beside && g->wtype == CU_TYPE_Q8_0R && !g->w2 && !g->group_rows && !((uintptr_t)g->act & 15) &&
        !(((uintptr_t)g->w | g->row_bytes) & 15)) {
        a.xi = xi;
        g3_launch_q8_beside(a, st);
        return 1;
    }
    if (g->wtype == CU_TYPE_Q8_0R && !((uintptr_t)g->act & 15) && !(g->group_rows && (g->group_act_bytes & 15)) &&
        g3_try_q8s(a, pairs, st))
        return 1;
    /* where it is faster (gemv_check --time, graphs of 43 on the H200): out_b
     * 4096 x 8192 11.8 us against 14.7, 4096 x 4096 7.3 against 8.7, but q_b
     * 32768 x 1024 16.3 against 12.9 (rows of 32 items: too little work a
     * block for its split) and kv 512 x 4096 4.1 against 3.7 */
    if (on == 2 && (g->in < G3_DENSE_MIN || g->rows < G3_DENSE_MIN)) return 0;
    if (((uintptr_t)g->act & 15) || (g->group_rows && (g->group_act_bytes & 15))) return 0;
    const bool rep = g->wtype == CU_TYPE_Q8_0R;
    if (rep && (((uintptr_t)g->w | (uintptr_t)(g->w2 ? g->w2 : g->w) | g->row_bytes) & 15)) return 0;
    /* the shape: K split over warps (KS) only where one matrix gives too few
     * blocks of 8 warp rows, then 4 rows a warp while that leaves a block an
     * SM, else fewer; a block's rows stay in one input group. KS sets the
     * order of a row's sums, so it is chosen from one matrix: a paired launch
     * gives the same bits as two single ones.
     * A block splits the whole input for its rows, so few large blocks win:
     * wanting 2 blocks an SM (out_a in 512 blocks of 16 rows, out_b 8 rows a
     * block) gave 133.7 tok/s in decode, 1 block an SM 147.0-148.1, against
     * 137.8-140.2 for the f32 kernels (seventh session). MINKE_CUDA_G3_WANT:
     * the blocks wanted in half SMs (default 2). */
    static int want_half = -1;
    if (want_half < 0) { const char *e = getenv("MINKE_CUDA_G3_WANT"); want_half = e && atoi(e) > 0 ? atoi(e) : 2; }
    const int64_t want = want_half * (int64_t)cu_num_sms() / 2, gr = g->group_rows;
    auto blocks1 = [&](int64_t rpb) { return (g->rows + rpb - 1) / rpb; };
    auto blocks = [&](int64_t rpb) { return blocks1(rpb) * pairs; };
    auto fits = [&](int64_t rpb) { return !gr || gr % rpb == 0; };
#define G3_Q8(R, KS) do { if (rep) g3_launch_q8<true, R, KS>(a, pairs, st); else g3_launch_q8<false, R, KS>(a, pairs, st); } while (0)
    a.xi = xi;
    if (fits(8) && blocks1(8) >= want) {
        if (fits(32) && blocks(32) >= want) {
            /* blocks of 32 rows: out's items whole in a block, so it can store them (cu_gemv_args.oitems) */
            if (g->oitems && g->oitems_done && !g->w2 && !g->accumulate && g->rows % 32 == 0) {
                a.oi = g->oitems;
                *g->oitems_done = 1;
            }
            G3_Q8(4, 1);
        }
        else if (fits(16) && blocks(16) >= want) G3_Q8(2, 1);
        else G3_Q8(1, 1);
    } else if (fits(4) && blocks1(4) >= want) G3_Q8(1, 2);
    else if (fits(2)) G3_Q8(1, 4);
    else return 0;
#undef G3_Q8
    return 1;
}

/* ------------------------------------------------------------------ */
/* IQ2R gate + up of the selected experts on the int8 tensor cores, the
 * weights streamed into shared memory (sm_90; MINKE_CUDA_MOE_MMA below).
 *
 * Why: k_g3_iq2_glu_b issues ~4.2 thread instructions a weight (ncu,
 * twenty-fifth session: 54% of issue slots, DRAM 23%): 6 dp4a and ~12
 * instructions of table decoding a grid index (8 weights), and ~35 a unit row
 * (the three pieces' fold, scales, loads, the transposed sums). Here a lane
 * decodes its grid index once into an mma fragment: mma.sync m16n8k32 takes
 * 16 rows x one 32-weight group, the activation's three int8 pieces as three
 * of its eight columns, lane (g, t) holding grid index t of the group for
 * rows g and g + 8 (its k slots 4t..4t+3 and 16+4t..16+4t+3 are elements
 * 8t..8t+7, and the activation pieces are staged in that order), so the
 * pieces cost nothing extra and the per-row work is once a super-block. The
 * fifth session's version of this (registers holding the codes, shuffles to
 * hand them round) was latency-bound at 128 registers; here a copy warp
 * streams whole 16-row tiles of gate and up (bulk copies, a ring of stages)
 * and the computing warps read them from shared memory. ncu (one launch,
 * Flash shape): 8.7 M warp instructions against 13.1 M for dp4a, ~34 an mma
 * in the loop (2 x 12 decoding, the mma, 4 IMAD scalings); 21.6 us against
 * 23.8. Still issue / latency bound (43% of issue slots, 2 warps a scheduler).
 *
 * Work split: a stage is one tile (16 rows of one owned slot's gate and the
 * same rows of its up), tiles go to blocks in turn; within a tile warp w
 * takes super-blocks (256 inputs) w, w + NW, ...: 8 groups, each an mma
 * whose int32 results take the group's 4-bit scale (2 ls + 1) as an integer
 * multiplier, then per super-block one float fold (d and the activation's
 * scale). The 4 lanes of a row add in order (t0 + t1) + (t2 + t3); the
 * warps leave their sums of every tile in shared memory and meet once, after
 * the block's last tile, where a thread a row adds them in warp order and
 * applies the SwiGLU and the router weight. Integers exact, float
 * order fixed (moe_dec_check: within 3e-5 of max|mid| of the double
 * reference, as the dp4a kernel). */
#define MM_IW 32          /* words of a group's activation pieces (3 x 8) and 8 zero words (the mma's other columns) */
#define MM_MAXST 8

/* grid index t of a group (w0: the 4 indices, w1: 4 x 7 sign bits and the scale)
 * as 8 signed codes (lo: elements 8t..8t+3, hi: 8t+4..8t+7); f = 2 ls + 1.
 * tga: the shared address of the lane's copy of grid entry 0 (entry i at
 * i x 128, the sign table 32 KB on); the tables start 16 KB-aligned, so the
 * sign entry's address is an OR: w1 rotated by rot = 7 - 7t puts sign group t
 * at bits 7..13. Each step is one instruction (ncu showed the compiler's
 * index arithmetic from array subscripts at twice that). */
__device__ __forceinline__ void mm_dec(uint32_t w0, uint32_t w1, uint32_t bsel, uint32_t rot, uint32_t tga,
                                       uint32_t &lo, uint32_t &hi, int &f) {
    const uint32_t ga = g3_prmt(w0, 0u, bsel) * 128u + tga;
    const uint32_t sa = (__funnelshift_l(w1, w1, rot) & 0x3f80u) | tga;
    uint32_t gs, ss;
    asm("ld.shared.u32 %0, [%1];" : "=r"(gs) : "r"(ga));
    asm("ld.shared.u32 %0, [%1+32768];" : "=r"(ss) : "r"(sa));
    const uint32_t sel = gs | ss;
    lo = g3_prmt(G3_POS, G3_NEG, sel);
    hi = g3_prmt(G3_POS, G3_NEG, sel >> 16);
    f = (int)((w1 >> 27) | 1u);
}

/* the activation as pieces, one scale per 256 (word li of piece p of group q at
 * pw[q * MM_IW + 8 p + li], D of super-block b at dsc[b]): threads tid of
 * nthr, 8 a super-block, thread li reading float4 li of each of its 8 groups */
__device__ __forceinline__ void mm_stage(const float *x, int nit, int *pw, float *dsc, int tid, int nthr) {
    const int li = tid & 7, ngrp = nthr >> 3, nblk = nit >> 3;
    for (int b = tid >> 3; b - (tid >> 3) < nblk; b += ngrp) {
        const bool in = b < nblk;     /* the loop is uniform per warp (the shuffles) */
        float4 v[8];
        float m = 0.f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            v[i] = in ? __ldg((const float4 *)(x + ((int64_t)b * 8 + i) * 32 + li * 4)) : make_float4(0.f, 0.f, 0.f, 0.f);
            m = fmaxf(m, fmaxf(fmaxf(fabsf(v[i].x), fabsf(v[i].y)), fmaxf(fabsf(v[i].z), fabsf(v[i].w))));
        }
#pragma unroll
        for (int o = 1; o < 8; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        const float idv = mx_inv_scale<3>(m);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int pc[3];
            mx_split4<3>(v[i], idv, pc);
            if (in) {
                int *d = pw + (b * 8 + i) * MM_IW;
                d[li] = pc[0]; d[8 + li] = pc[1]; d[16 + li] = pc[2]; d[24 + li] = 0;
            }
        }
        if (in && li == 0) dsc[b] = m * (1.f / 32512.f);
    }
}

/* shared memory before the ring: the tables' lane copies, the pieces, the scales */
__host__ __device__ static inline size_t mm_fixed_bytes(int64_t in) {
    return ((size_t)(256 + 128) * 32 * 4 + (size_t)(in / 32) * MM_IW * 4 + (size_t)(in / 256) * 4 + 127) & ~(size_t)127;
}
#define MM_ALIGN 16384     /* the tables' alignment (mm_dec); the launch adds it to the shared memory */

/* a: g3_args of the gate (w) and up (w2) matrices, F = a.rows; nst: the
 * ring's stages; rs: a row's stride in a stage (row_bytes padded: 16 x odd) */
template <int NW>
__global__ void __launch_bounds__((NW + 1) * 32, 1) k_moe_glu_mma(g3_args a, int nst, int rs) {
#if CU_BULK_ARCH
    extern __shared__ int4 mm_sm[];
    uint32_t *tgrid = (uint32_t *)((uint8_t *)mm_sm + ((0u - bulk_saddr(mm_sm)) & (MM_ALIGN - 1)));  /* 256 x 32 copies */
    uint32_t *tsgn = tgrid + 256 * 32;                    /* 128 x 32 copies */
    const int nit = a.in >> 5, nb = a.in >> 8;
    int *pw = (int *)(tsgn + 128 * 32);                   /* the activation's pieces */
    float *dsc = (float *)(pw + nit * MM_IW);
    uint8_t *stg = (uint8_t *)tgrid + mm_fixed_bytes(a.in);
    float *red = (float *)(stg + (size_t)nst * 32 * rs);   /* [block's tile][warp][gate, up][row] */
    __shared__ uint64_t full[MM_MAXST], empty[MM_MAXST], tbar;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int i = 0; i < nst; i++) { mbar_init(&full[i], 1); mbar_init(&empty[i], NW); }
        mbar_init(&tbar, 1);
        mbar_init_fence();
    }
    __syncthreads();
    /* the tables' lane copies as one bulk copy (constant: before the PDL wait,
     * waited for only before the first decode) */
    if (warp == NW && lane == 0) {
        mbar_arrive_tx(&tbar, (uint32_t)sizeof g3_texp);
        bulk_g2s_keep(tgrid, g3_texp, (uint32_t)sizeof g3_texp, &tbar);
    }
    cu_pdl_enter();     /* the selection and x come from the kernels before */
    /* the owned slots (sel >= 0; nsel <= 8) as a mask: every warp reads them
     * itself (the computing warps after staging x, so the loads overlap) */
    const int sk = lane < a.nsel ? a.sel[lane] : -1;
    uint32_t omask = 0;
    auto slot_of = [&](int j) {     /* the j-th owned slot */
        uint32_t m = omask;
        for (int i = 0; i < j; i++) m &= m - 1;
        return __ffs(m) - 1;
    };
    const int F = a.rows, tpe = F >> 4;
    const size_t sbytes = 32 * (size_t)rs;                /* a stage: 16 gate rows, then 16 up rows */
    /* the block's s-th tile: owned slot j, rows r0 .. r0 + 15 */
    auto tile_of = [&](int s, int &j, int &r0) {
        const int tile = blockIdx.x + s * gridDim.x;
        j = tile / tpe;
        r0 = (tile - j * tpe) * 16;
    };
    auto tiles_of_block = [&]() {
        omask = __ballot_sync(0xffffffffu, sk >= 0);
        const int ntiles = __popc(omask) * tpe;
        return (int)blockIdx.x < ntiles ? (ntiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    };
    if (warp == NW) {
        const int ns = tiles_of_block();
        /* the copy warp: lane l copies row l & 15 of gate (l < 16) or up */
        for (int s = 0; s < ns; s++) {
            const int b = s % nst;
            int j, r0;
            tile_of(s, j, r0);
            const int ex = __shfl_sync(0xffffffffu, sk, slot_of(j));
            if (s >= nst) mbar_wait(&empty[b], (uint32_t)((s / nst) - 1) & 1u);
            const int64_t off = (int64_t)ex * (int64_t)a.expert_bytes + (int64_t)(r0 + (lane & 15)) * (int64_t)a.row_bytes;
            if (lane == 0) mbar_arrive_tx(&full[b], 32u * (uint32_t)a.row_bytes);
            __syncwarp();
            bulk_g2s(stg + b * sbytes + (size_t)lane * rs, (lane < 16 ? a.w : a.w2) + off, (uint32_t)a.row_bytes, &full[b]);
        }
        return;
    }
    mm_stage(a.x, nit, pw, dsc, threadIdx.x, NW * 32);
    const int ns = tiles_of_block();
    asm volatile("bar.sync 1, %0;" ::"n"(NW * 32) : "memory");
    mbar_wait(&tbar, 0);
    const int g = lane >> 2, t = lane & 3;
    const uint32_t bsel = 0x4440u | (uint32_t)t, rot = (7u - 7u * (uint32_t)t) & 31u;
    /* mm_dec's table loads are plain asm (no memory clobber): their addresses
     * come from stage words read after the waits, which keeps them after
     * the table's wait too (a review's note: keep it so if mm_dec changes) */
    const uint32_t tga = bulk_saddr(tgrid) + 4u * (uint32_t)lane;
    /* the lane's B fragment words: piece g (columns 3..7: the zero words) */
    const int *pwl = pw + 8 * (g < 3 ? g : 3) + 2 * t;
    /* the pieces' weights: lane t = 0 holds columns 0, 1 (pieces 0, 1), t = 1 column 2 */
    const float w0 = t == 0 ? 256.f : t == 1 ? 1.f / 256.f : 0.f, w1 = t == 0 ? 1.f : 0.f;
    for (int s = 0; s < ns; s++) {
        const int b = s % nst;
        mbar_wait(&full[b], (uint32_t)(s / nst) & 1u);
        /* the lane's rows g and g + 8 of gate (m 0) and up (m 1) in the stage */
        const uint8_t *rw0[2][2];
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int h = 0; h < 2; h++) rw0[m][h] = stg + b * sbytes + (size_t)(16 * m + g + 8 * h) * rs;
        float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
        for (int q = warp; q < nb; q += NW) {
            int ia[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
            const int *pq = pwl + q * 8 * MM_IW;
#pragma unroll
            for (int jj = 0; jj < 8; jj += 2) {
                int2 bx[2];
#pragma unroll
                for (int u = 0; u < 2; u++) bx[u] = *(const int2 *)(pq + (jj + u) * MM_IW);
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    const uint4 wa = *(const uint4 *)(rw0[m][0] + q * 64 + jj * 8);
                    const uint4 wb = *(const uint4 *)(rw0[m][1] + q * 64 + jj * 8);
#pragma unroll
                    for (int u = 0; u < 2; u++) {
                        uint32_t lo0, hi0, lo1, hi1;
                        int f0, f1, c[4];
                        mm_dec(u ? wa.z : wa.x, u ? wa.w : wa.y, bsel, rot, tga, lo0, hi0, f0);
                        mm_dec(u ? wb.z : wb.x, u ? wb.w : wb.y, bsel, rot, tga, lo1, hi1, f1);
                        mx_mma_s8(c, (int)lo0, (int)lo1, (int)hi0, (int)hi1, bx[u].x, bx[u].y, 0);
                        ia[m][0] += c[0] * f0; ia[m][1] += c[1] * f0;
                        ia[m][2] += c[2] * f1; ia[m][3] += c[3] * f1;
                    }
                }
            }
            /* dg = d (0.5 + ls) / 4 = d (2 ls + 1) / 8; x = D (pieces) */
            const float D = dsc[q] * 0.125f;
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float d = cu_h2f(*(const uint16_t *)(rw0[m][h] + nb * 64 + 2 * q));
                    const float v = __fmaf_rn((float)ia[m][2 * h], w0, (float)ia[m][2 * h + 1] * w1);
                    acc[m][h] = __fmaf_rn(v, d * D, acc[m][h]);
                }
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[b]);
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float v = acc[m][h] + __shfl_xor_sync(0xffffffffu, acc[m][h], 1);
                v += __shfl_xor_sync(0xffffffffu, v, 2);
                if (t == 0) red[((s * NW + warp) * 2 + m) * 16 + g + 8 * h] = v;
            }
    }
    /* the warps' sums meet once, after the block's last tile (no barrier a tile) */
    asm volatile("bar.sync 1, %0;" ::"n"(NW * 32) : "memory");
    for (int i = threadIdx.x; i < ns * 16; i += NW * 32) {
        const int s = i >> 4, r = i & 15;
        int j, r0;
        tile_of(s, j, r0);
        float gs = 0.f, us = 0.f;
        for (int k = 0; k < NW; k++) { gs += red[((s * NW + k) * 2) * 16 + r]; us += red[((s * NW + k) * 2 + 1) * 16 + r]; }
        const int e = slot_of(j);
        a.out[e * F + r0 + r] = cu_swiglu1(gs, us, a.limit) * (a.rw ? a.rw[e] : 1.f);
    }
#endif
}

/* MINKE_CUDA_MOE_MMA: 1 (default) k_moe_glu_mma with 8 computing warps where
 * it applies, 2 with 16, 0 the dp4a kernel; MINKE_CUDA_MOE_MMA_ST: the ring's
 * stages (default 3; at most what fits). On the H200 (docs/performance.md,
 * twenty-sixth session): decode at ctx 4096 177.6 tok/s with 3 stages, 176-178
 * with 2, 174-176 with 4 (the whole share of an SM: the shared expert's
 * blocks on the other stream then wait for the SM), 173-174 with dp4a. */
#define MM_ST 3
static int mm_on = -1;
extern "C" void cu_moe_mma_set(int v) { mm_on = v; }
static int moe_mma_enabled(void) {
    if (mm_on < 0) { const char *e = getenv("MINKE_CUDA_MOE_MMA"); mm_on = e && *e ? atoi(e) : 1; }
    return mm_on;
}

/* k_moe_glu_mma where it applies (sm_90 code on this device, 16-byte rows,
 * 16-row tiles, a ring of at least 2 stages); 0: the caller takes dp4a */
template <int NW>
static int mm_launch_nw(const g3_args &g, cudaStream_t st) {
    static size_t avail = 0;
    if (!avail) {
        int optin = 0;
        cudaFuncAttributes fa;
        if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, cu_cur_dev()) != cudaSuccess ||
            cudaFuncGetAttributes(&fa, k_moe_glu_mma<NW>) != cudaSuccess)
            return 0;
        avail = (size_t)optin > fa.sharedSizeBytes ? (size_t)optin - fa.sharedSizeBytes : 1;
    }
    /* a row's stride: row_bytes up to an odd multiple of 16, so the 8 rows a
     * warp reads at once start 16 x odd bytes apart: no bank conflicts */
    const int rs = (int)(((g.row_bytes / 16) | 1) * 16);
    static int stmax = -1;
    if (stmax < 0) { const char *e = getenv("MINKE_CUDA_MOE_MMA_ST"); stmax = e && atoi(e) >= 2 ? atoi(e) : MM_ST; }
    if (stmax > MM_MAXST) stmax = MM_MAXST;     /* the kernel's barrier arrays */
    const int64_t ntiles = (int64_t)g.nsel * g.rows / 16;
    const int nb = (int)(ntiles < cu_num_sms() ? ntiles : cu_num_sms());
    /* the warps' sums of the block's tiles (at most ceil(ntiles / nb) of them) */
    const size_t redb = (size_t)((ntiles + nb - 1) / nb) * NW * 32 * 4;
    const size_t fixed = MM_ALIGN + mm_fixed_bytes(g.in) + redb, sbytes = 32 * (size_t)rs;
    int nst = avail > fixed ? (int)((avail - fixed) / sbytes) : 0;
    if (nst > stmax) nst = stmax;
    if (nst < 2) return 0;
    const size_t smem = fixed + (size_t)nst * sbytes;
    g3_smem_attr(k_moe_glu_mma<NW>, smem);
    cu_launch(k_moe_glu_mma<NW>, dim3((unsigned)nb), (NW + 1) * 32, smem, st, g, nst, rs);
    return 1;
}
static int mm_launch(const g3_args &g, cudaStream_t st) {
    if (!g3_bulk_ok() || g.rows < 16 || g.rows % 16 || g.in % 256 || g.nsel < 1 || g.nsel > 32 || (g.row_bytes & 15) ||
        (g.expert_bytes & 15) ||
        (((uintptr_t)g.w | (uintptr_t)g.w2) & 15))
        return 0;
    return moe_mma_enabled() == 2 ? mm_launch_nw<16>(g, st) : mm_launch_nw<8>(g, st);
}

/* MoE decode of one token (cu_gemv3.h). */
#define G3_NE 8
extern "C" int cu_moe_dec_supported(int gate_type, int up_type, int down_type, int64_t in, int64_t ff, int nsel) {
    if (cu_gemv3_enabled() < 1 || !g3_grid_ok) return 0;
    if (gate_type != up_type || (gate_type != CU_TYPE_IQ2_XXS && gate_type != CU_TYPE_IQ2R)) return 0;
    if (down_type != CU_TYPE_Q2_K) return 0;
    if (in % 256 || in > 4096 || ff % 256 || ff > 2048 || nsel < 1 || nsel > G3_NE) return 0;
    return 1;
}

/* as many blocks as fit on the GPU at once (they loop over the work) */
template <typename K>
static int g3_resident_blocks(K k, int threads, size_t smem, int64_t work_warps) {
    int nb = 1;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k, threads, smem) != cudaSuccess || nb < 1) nb = 1;
    int64_t g = (int64_t)nb * cu_num_sms(), need = (work_warps + threads / 32 - 1) / (threads / 32);
    return (int)(g < need ? g : need);
}

extern "C" void cu_moe_dec_glu(int wtype, const void *wg, const void *wu, uint64_t row_bytes, uint64_t expert_bytes,
                               int64_t ff, int64_t in, const float *x, const int *sel, const float *rw, int nsel,
                               float limit, float *mid, cudaStream_t st) {
    g3_args a;
    memset(&a, 0, sizeof a);
    a.w = (const uint8_t *)wg; a.w2 = (const uint8_t *)wu;
    a.row_bytes = row_bytes; a.expert_bytes = expert_bytes;
    a.rows = (int)ff; a.in = (int)in; a.x = x; a.sel = sel; a.rw = rw; a.nsel = nsel; a.limit = limit; a.out = mid;
    if (wtype == CU_TYPE_IQ2R && moe_mma_enabled() && mm_launch(a, st)) return;
    const size_t smem = (size_t)(256 + 128) * 32 * 4 + g3_items_bytes(in);
#define G3_GLU(REP) do { \
        g3_smem_attr(k_g3_iq2_glu_b<REP>, smem); \
        int nb = g3_resident_blocks(k_g3_iq2_glu_b<REP>, 256, smem, (int64_t)nsel * ff * 4); \
        cu_launch(k_g3_iq2_glu_b<REP>, dim3((unsigned)nb), 256, smem, st, a); \
    } while (0)
    if (wtype == CU_TYPE_IQ2R) G3_GLU(true); else G3_GLU(false);
#undef G3_GLU
}

/* MINKE_CUDA_DOWN_SR: the down kernel's ring of rows in flight: 4 (default), 8
 * or 12 rows in shared memory, 0 the register ring (k_g3_q2k_down). On the
 * H200 (moe_dec_check --time, seventh session): down alone 19.7 / 20.7 / 22.7
 * us against 21.5 for the register ring, the gate+up, down pair in a graph of
 * 43: 34.1 / 35.5 / 36.9 against 36.5 us; decode at ctx 4096 152.9-153.3 tok/s
 * with 4 against 148.8-151.6 with 0. cu_moe_down_sr_set for the checks. */
static int down_sr_v = -1;
extern "C" void cu_moe_down_sr_set(int v) { down_sr_v = v; }
static int down_sr(void) {
    if (down_sr_v < 0) { const char *e = getenv("MINKE_CUDA_DOWN_SR"); down_sr_v = e && *e ? atoi(e) : 4; }
    return down_sr_v == 4 || down_sr_v == 8 || down_sr_v == 12 ? down_sr_v : 0;
}

/* MINKE_CUDA_DOWN_S: 1 (default where the device has bulk copies) streams
 * the down products through shared memory (k_g3_q2k_downs), 0 keeps
 * k_g3_q2k_down; MINKE_CUDA_DOWN_S_KB: its shared memory (default 200 KB:
 * Flash's whole share of a block, 24 stages, in flight at once) */
static int down_s_v = -1;
extern "C" void cu_moe_down_stream_set(int v) { down_s_v = v; }
static int down_stream(void) {
    if (down_s_v < 0) { const char *e = getenv("MINKE_CUDA_DOWN_S"); down_s_v = e && *e ? atoi(e) : 1; }
    return down_s_v > 0 && g3_bulk_ok();
}

template <int NE>
static int g3_launch_downs(const g3_args &a, cudaStream_t st) {
    static int kb = -1;
    if (kb < 0) { const char *e = getenv("MINKE_CUDA_DOWN_S_KB"); kb = e && atoi(e) > 0 ? atoi(e) : 200; }
    int nst, nb;
    const size_t smem = g3_down_plan(NE, G3DS_NG, G3DS_RPS, a.rows, a.in, a.row_bytes, (size_t)kb * 1024, G3DS_MAXST,
                                     cu_num_sms(), &nst, &nb);
    if (!smem) return 0;
    g3_smem_attr(k_g3_q2k_downs<NE>, smem);
    cu_launch(k_g3_q2k_downs<NE>, dim3((unsigned)nb), (G3DS_NG * NE + 1) * 32, smem, st, a, nst);
    return 1;
}

extern "C" void cu_moe_dec_down(const void *wd, uint64_t row_bytes, uint64_t expert_bytes, int64_t rows, int64_t ff,
                                const float *mid, const int *sel, int nsel, float *out, cudaStream_t st) {
    g3_args a;
    memset(&a, 0, sizeof a);
    a.w = (const uint8_t *)wd; a.row_bytes = row_bytes; a.expert_bytes = expert_bytes;
    a.rows = (int)rows; a.in = (int)ff; a.x = mid; a.sel = sel; a.nsel = nsel; a.out = out;
    if (down_stream() && !(((uintptr_t)wd | row_bytes | expert_bytes) & 15)) {
        int done = 0;
        switch (nsel) {     /* the experts are the kernel's warps: one instance per count */
        case 6: done = g3_launch_downs<6>(a, st); break;
        case 8: done = g3_launch_downs<8>(a, st); break;
        case 4: done = g3_launch_downs<4>(a, st); break;
        case 3: done = g3_launch_downs<3>(a, st); break;
        case 2: done = g3_launch_downs<2>(a, st); break;
        case 1: done = g3_launch_downs<1>(a, st); break;
        default: break;
        }
        if (done) return;
    }
    const int threads = G3_DOWN_GPB * nsel * 32, sr = down_sr();
    const size_t smem = g3_items_bytes((int64_t)nsel * ff) + (size_t)(threads / 32) * sr * 1024;
#define G3_DOWN(SR) do { \
        g3_smem_attr(k_g3_q2k_down<G3_NE, SR>, smem); \
        int nb = g3_resident_blocks(k_g3_q2k_down<G3_NE, SR>, threads, smem, rows * nsel); \
        cu_launch(k_g3_q2k_down<G3_NE, SR>, dim3((unsigned)nb), threads, smem, st, a); \
    } while (0)
    if (sr == 4) G3_DOWN(4);
    else if (sr == 8) G3_DOWN(8);
    else if (sr == 12) G3_DOWN(12);
    else G3_DOWN(0);
#undef G3_DOWN
}
