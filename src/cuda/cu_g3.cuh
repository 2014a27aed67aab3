/* cu_g3.cuh: the exact activations of the decode products on dp4a, as the
 * kernels stage them in shared memory (cu_gemv3.cu for IQ2_XXS / Q2_K /
 * Q8_0, cu_moes.cu for Q4_K / MXFP4): f32 activations split into three int8
 * pieces a 32-element item (cu_split.cuh) with the item's scale, and the
 * f32 sums of its halves for formats with mins. */
#ifndef MINKE_CU_G3_CUH
#define MINKE_CU_G3_CUH

#include "cuda/cu_common.cuh"
#include "cuda/cu_split.cuh"

/* Shared activation items: item i at sh + i * G3_IW ints: piece p's word j
 * (elements 4j .. 4j + 3) at p * 8 + j, D (float bits) at 24, the sums of the
 * item's two halves at 25 and 26 (Q2_K mins). 28 ints = 112 bytes: 16-byte
 * aligned, and 8 lanes reading 8 consecutive items hit 8 different bank quads. */
#define G3_IW 28

/* shared bytes of nit staged items (32 inputs each), rounded to 128 (what
 * the streamed kernels put after them starts aligned) */
__host__ __device__ __forceinline__ size_t g3_items_smem(size_t nit) { return (nit * G3_IW * 4 + 127) & ~(size_t)127; }

/* The streamed MoE down kernels' shared memory (cu_gemv3.cu, cu_moes.cu):
 * the ne slots' staged items (g3_items_smem of ne x the items of a slot),
 * then the per-(row, slot) sums of a block's rows_pb rows (these bytes),
 * then the ring of stages */
__host__ __device__ __forceinline__ size_t g3_down_part_bytes(int ne, int rows_pb) {
    return ((size_t)rows_pb * ne * 4 + 127) & ~(size_t)127;
}

/* One item's amax (32 elements, a float4 in each of 8 aligned lanes; mask:
 * at least those lanes) in each of its lanes */
__device__ __forceinline__ float g3_item_amax(float4 v, unsigned mask) {
    float m = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) m = fmaxf(m, __shfl_xor_sync(mask, m, o));
    return m;
}

/* Lane li's words of an item at d (G3_IW ints): its three pieces pc, and
 * lane 0 the scale from the amax m (what g3_stage stores, and its callers) */
__device__ __forceinline__ void g3_item_words(int *d, const int (&pc)[3], float m, int li) {
    d[li] = pc[0]; d[8 + li] = pc[1]; d[16 + li] = pc[2];
    if (li == 0) d[24] = __float_as_int(m * (1.f / 32512.f));
}

/* Lane li's words of an item with one scale (g3_stage without BLK / SUMS)
 * from its float4 and the item's amax m, at d (G3_IW ints) */
__device__ __forceinline__ void g3_item_store(int *d, float4 v, float m, int li) {
    int pc[3];
    mx_split4<3>(v, mx_inv_scale<3>(m), pc);
    g3_item_words(d, pc, m, li);
}

/* Items split ahead: a one-token product whose input's writer also stored
 * it as items (g3_item_amax + g3_item_store: the bits g3_stage gives, see
 * cu_gemv_args.xitems) copies nit of them into shared memory instead of
 * splitting the f32 input itself, threads tid of nthr. Why (twenty-eighth
 * session, docs/performance.md): each of out_a's 256 blocks split all 4096
 * inputs of its group and each of out_b's all 8192, ~40% of those kernels'
 * instructions, after their PDL wait and before their first product. */
__device__ __forceinline__ void g3_items_copy(const int *xi, int nit, int *sh, int tid, int nthr) {
    const int4 *s = (const int4 *)xi;
    int4 *d = (int4 *)sh;
    const int n = nit * (G3_IW / 4);
    /* 8 loads in flight a thread before the stores (one L2 round trip for out_b's 28 KB) */
    for (int i0 = tid; i0 < n; i0 += 8 * nthr) {
        int4 v[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (i0 + k * nthr < n) v[k] = __ldg(s + i0 + k * nthr);
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (i0 + k * nthr < n) d[i0 + k * nthr] = v[k];
    }
}

/* Stage n f32 activations (n a multiple of 32; BLK: of 256) into shared
 * items, split into 3 pieces. Threads work in aligned groups of 8 lanes, a
 * group per block of 8 items: lane li takes float4 li of each item, so an
 * item is one 128-byte line and its amax three shuffles. BLK: one scale per
 * block of 8 items (Q2_K's super-block, whose integer sums span it); SUMS:
 * the f32 sums of each 16-element half item. The loop is uniform per warp
 * (the shuffles need all lanes). */
template <bool BLK, bool SUMS>
__device__ __forceinline__ void g3_stage(const float *x, int n, int *sh, int nthr = 0) {
    /* nthr: the threads taking part (the first nthr of the block; all by default) */
    const int li = threadIdx.x & 7, grp = threadIdx.x >> 3, ngrp = (nthr ? nthr : (int)blockDim.x) >> 3;
    const int nit = n >> 5, nblk = (nit + 7) >> 3;
    for (int b0 = 0; b0 < nblk; b0 += ngrp) {
        const int b = b0 + grp;
        float4 v[8];
        float ma = 0.f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int it = b * 8 + i;
            v[i] = b < nblk && it < nit ? __ldg((const float4 *)(x + (int64_t)it * 32 + li * 4)) : make_float4(0.f, 0.f, 0.f, 0.f);
            if (BLK) ma = fmaxf(ma, fmaxf(fmaxf(fabsf(v[i].x), fabsf(v[i].y)), fmaxf(fabsf(v[i].z), fabsf(v[i].w))));
        }
        if (BLK) {
#pragma unroll
            for (int o = 1; o < 8; o <<= 1) ma = fmaxf(ma, __shfl_xor_sync(0xffffffffu, ma, o));
        }
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int it = b * 8 + i;
            const float m = BLK ? ma : g3_item_amax(v[i], 0xffffffffu);
            int pc[3];
            mx_split4<3>(v[i], mx_inv_scale<3>(m), pc);
            float hs = 0.f;
            if (SUMS) {
                hs = (v[i].x + v[i].y) + (v[i].z + v[i].w);
                hs += __shfl_xor_sync(0xffffffffu, hs, 1);
                hs += __shfl_xor_sync(0xffffffffu, hs, 2);
            }
            if (b < nblk && it < nit) {
                int *d = sh + it * G3_IW;
                g3_item_words(d, pc, m, li);
                if (SUMS && (li & 3) == 0) d[25 + (li >> 2)] = __float_as_int(hs);
            }
        }
    }
}

/* the three pieces of one item (8 words each) */
struct g3_act { int4 p[6]; float D; };
__device__ __forceinline__ void g3_act_load(g3_act &a, const int *sh, int it) {
    const int4 *ip = (const int4 *)(sh + it * G3_IW);
#pragma unroll
    for (int k = 0; k < 6; k++) a.p[k] = ip[k];
    a.D = __int_as_float(sh[it * G3_IW + 24]);
}
__device__ __forceinline__ int g3_word(const g3_act &a, int p, int j) {
    const int4 v = a.p[2 * p + (j >> 2)];
    return (j & 3) == 0 ? v.x : (j & 3) == 1 ? v.y : (j & 3) == 2 ? v.z : v.w;
}

/* The ring's stage count for a block's shared-memory budget: what the budget
 * leaves after `fixed` bytes, in stages of sbytes, rounded down to a multiple
 * of unit (the consuming warps: then every fill of a buffer is consumed by
 * the same warp, in order, so no warp can wait on a buffer's barrier two
 * phases ahead, where a parity wait would pass at once), at least unit, at
 * most maxst rounded the same way. */
static inline int g3_ring_stages(size_t budget, size_t fixed, size_t sbytes, int unit, int maxst) {
    int nst = budget > fixed ? (int)((budget - fixed) / sbytes) : 0;
    nst -= nst % unit;
    if (nst < unit) nst = unit;
    if (nst > maxst) nst = maxst - maxst % unit;
    return nst;
}
/* a block's shared memory: 227 KB less 1 KB for the kernels' static barriers */
#define G3_SMEM_MAX (226 * 1024)

/* The down kernels' plan: nb blocks (one an SM, at most a row each), nst
 * stages of rps rows for ne slots x ng warps; returns the shared bytes, 0
 * when they exceed G3_SMEM_MAX */
static inline size_t g3_down_plan(int ne, int ng, int rps, int64_t rows, int64_t in, uint64_t row_bytes, size_t budget,
                                  int maxst, int nsms, int *nst, int *nb) {
    *nb = nsms < rows ? nsms : (int)rows;
    const int rows_pb = (int)((rows + *nb - 1) / *nb);
    const size_t fixed = g3_items_smem((size_t)ne * (size_t)(in >> 5)) + g3_down_part_bytes(ne, rows_pb);
    const size_t sbytes = (size_t)rps * row_bytes;
    *nst = g3_ring_stages(budget, fixed, sbytes, ne * ng, maxst);
    const size_t smem = fixed + (size_t)*nst * sbytes;
    return smem <= G3_SMEM_MAX ? smem : 0;
}

/* IQ2_XXS codes on dp4a. The grid's code bytes are all 8, 25 or 43, so an
 * entry is 8 byte selectors (nibbles 0..2) and a group's signs move a
 * selector to the negated table (nibble + 4): a signed code word is one
 * PRMT of POS = {8, 25, 43} and NEG = {-8, -25, -43} by (grid selectors |
 * sign selectors). The kernels keep both tables in shared memory with 32
 * copies of their 32-bit entries, copy = lane, so the 32 lanes of a load
 * never share a bank. (cu_gemv3_tables_init refuses a grid with other bytes.) */
#define G3_POS 0x002B1908u
#define G3_NEG 0x00D5E7F8u
/* PRMT as the instruction: __byte_perm masks the selector to 0x7777 first
 * (two more instructions a group); the selectors here never set a nibble's
 * bit 3 (sign replication), so the plain instruction gives the same bytes */
__device__ __forceinline__ uint32_t g3_prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

#endif
