/* cu_gemv.cu: matrix-vector products over quantized weights (decode and
 * batched prefill), and the activation quantizers that feed them.
 *
 * Numerics follow the CPU backend (src/quant): Q8_0 and MXFP4 weights take
 * the activation quantized to Q8_0_F32 (f32 scale per 32), the k-quants and
 * IQ2_XXS take Q8_K (per 256, bsums), plain-float weights take f32. The
 * integer parts of every dot are the same as the CPU's; only the order of
 * the float sums differs. With cu_gemv_args.act_f32 (MINKE_ACT_EXACT) the
 * quantized weights are decoded exactly and multiplied with the f32
 * activations instead (k_gemvf, below).
 *
 * Layout of the work: one warp per output row; a row is cut into "items" of
 * 32 elements (4 or 8 for plain floats) that the lanes stride over; each
 * block handles 8 rows for a tile of up to NT activation rows, so a weight
 * item is fetched once per tile. A tile is either a run of tokens (dense) or
 * a run of (token, expert) pairs that share one expert (MoE, built on the
 * device by cu_moe_build_tiles so decode graphs need no host decisions).
 */
#include "cuda/cu_common.cuh"
#include "cuda/cu_ops.h"
#include "cuda/cu_gemv3.h"
#include "cuda/cu_gemvh.h"
#include "cuda/cu_gemvq8.h"

extern "C" {
#include "quant/quant.h"
}

/* IQ2_XXS grid / signs and MXFP4 values; uploaded once from src/quant's
 * decoders (cu_tables_init) so the data lives in one place. */
__device__ uint64_t cu_iq2xxs_grid[256];
__device__ uint8_t cu_ksigns_iq2xs[128];
__device__ int8_t cu_mxfp4_kvalues[16];

/* ------------------------------------------------------------------ */
/* activation quantizers                                               */

/* Q8_0_F32: one warp per 32-block; d = amax/127, q = rint(x/d) (CPU: lrintf(x/d)). */
__global__ void k_quant_q8_0f(const float *x, cu_block_q8_0f *out, int64_t nblocks) {
    cu_pdl_enter();
    int64_t b = (int64_t)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (b >= nblocks) return;
    float v = x[b * 32 + lane];
    float amax = warp_max(fabsf(v));
    float d = amax / 127.0f;
    int q = 0;
    if (d != 0.0f) { q = __float2int_rn(v / d); q = q < -128 ? -128 : q > 127 ? 127 : q; }
    out[b].q[lane] = (int8_t)q;
    if (lane == 0) out[b].d = d;
}

/* Q8_K: one warp per 256-block, 8 values per lane. The scale comes from the
 * signed element of largest magnitude, the first one on ties. */
__global__ void k_quant_q8_K(const float *x, cu_block_q8_K *out, int64_t nblocks) {
    cu_pdl_enter();
    int64_t b = (int64_t)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (b >= nblocks) return;
    const float *xb = x + b * 256;
    float v[8];
    float amax = 0.f; int idx = 1 << 30;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        v[j] = xb[j * 32 + lane];
        float a = fabsf(v[j]);
        int i = j * 32 + lane;
        if (a > amax || (a == amax && i < idx && a > 0.f)) { amax = a; idx = i; }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float oa = __shfl_xor_sync(0xffffffffu, amax, o);
        int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (oa > amax || (oa == amax && oi < idx)) { amax = oa; idx = oi; }
    }
    cu_block_q8_K *ob = out + b;
    if (amax == 0.f) {
#pragma unroll
        for (int j = 0; j < 8; j++) ob->q[j * 32 + lane] = 0;
        if (lane < 16) ob->bsums[lane] = 0;
        if (lane == 0) ob->d = 0.f;
        return;
    }
    float xm = xb[idx];
    float is = -127.0f / xm;
    int q[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        int t = __float2int_rn(is * v[j]);
        q[j] = t < -128 ? -128 : t > 127 ? 127 : t;
        ob->q[j * 32 + lane] = (int8_t)q[j];
    }
    /* bsums: sub-block g = 16 elements: j*32+lane in [16g, 16g+16) -> g = 2j + (lane>=16) */
#pragma unroll
    for (int j = 0; j < 8; j++) {
        int s = q[j];
#pragma unroll
        for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if ((lane & 15) == 0) ob->bsums[2 * j + (lane >> 4)] = (int16_t)s;
    }
    if (lane == 0) ob->d = 1.0f / is;
}

/* ------------------------------------------------------------------ */
/* per-type item dots                                                  */

__device__ __forceinline__ int ld_i32_u16(const uint8_t *p) {   /* 2-byte aligned */
    const uint16_t *h = (const uint16_t *)p;
    return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
}

template <int TYPE> struct WItem;

/* An item of 32 int8 codes with one float scale, dotted with a Q8_0_F32
 * activation block: what Q8_0, its repacked form and MXFP4 decode to. */
struct Q8Item32 {
    float d; int q[8];
    __device__ __forceinline__ float dot(const uint8_t *act, int it) const {
        const cu_block_q8_0f *a = (const cu_block_q8_0f *)act + it;
        const int *aq = (const int *)a->q;
        int s = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) s = __dp4a(q[k], aq[k], s);
        return d * a->d * (float)s;
    }
};

/* Q8_0 weight block (34 B, 2-aligned) x Q8_0_F32 activation block. */
template <> struct WItem<CU_TYPE_Q8_0> : Q8Item32 {
    __device__ __forceinline__ void load(const uint8_t *row, int it, int nit, const uint64_t *tab) {
        const uint8_t *b = row + (int64_t)it * 34;
        d = cu_h2f(*(const uint16_t *)b);
#pragma unroll
        for (int k = 0; k < 8; k++) q[k] = ld_i32_u16(b + 2 + 4 * k);
    }
};

/* Q8_0 repacked on upload (cu_repack_q8_0): a row is nit x 32 int8 codes
 * (16-byte aligned) followed by nit f16 scales, so a block is two 16-byte
 * loads instead of seventeen 2-byte ones. Same bytes per row as Q8_0. */
template <> struct WItem<CU_TYPE_Q8_0R> : Q8Item32 {
    __device__ __forceinline__ void load(const uint8_t *row, int it, int nit, const uint64_t *tab) {
        const uint4 *b = (const uint4 *)(row + (int64_t)it * 32);
        uint4 a0 = b[0], a1 = b[1];
        q[0] = (int)a0.x; q[1] = (int)a0.y; q[2] = (int)a0.z; q[3] = (int)a0.w;
        q[4] = (int)a1.x; q[5] = (int)a1.y; q[6] = (int)a1.z; q[7] = (int)a1.w;
        d = cu_h2f(((const uint16_t *)(row + (int64_t)nit * 32))[it]);
    }
};

/* MXFP4 block (17 B): E8M0 scale, 16 bytes of nibbles; low nibbles are
 * elements 0..15, high 16..31; values are kvalues (E2M1 x2) x 2^(e-128). */
template <> struct WItem<CU_TYPE_MXFP4> : Q8Item32 {
    __device__ __forceinline__ void load(const uint8_t *row, int it, int nit, const uint64_t *tab) {
        const uint8_t *b = row + (int64_t)it * 17;
        uint8_t e = b[0];
        /* src/quant's e8m0_half: e = 0, 1 are f32 subnormals, e = 255 is 2^127 */
        d = __uint_as_float(e < 2 ? 0x00200000u << e : ((uint32_t)e - 1u) << 23);
        uint8_t lo[16], hi[16];
#pragma unroll
        for (int k = 0; k < 16; k++) {
            uint8_t v = b[1 + k];
            lo[k] = (uint8_t)cu_mxfp4_kvalues[v & 15];
            hi[k] = (uint8_t)cu_mxfp4_kvalues[v >> 4];
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            q[k] = (int)(lo[4 * k] | (lo[4 * k + 1] << 8) | (lo[4 * k + 2] << 16) | ((uint32_t)lo[4 * k + 3] << 24));
            q[4 + k] = (int)(hi[4 * k] | (hi[4 * k + 1] << 8) | (hi[4 * k + 2] << 16) | ((uint32_t)hi[4 * k + 3] << 24));
        }
    }
};

/* Q2_K: item = (block, half n, shift s): 32 codes from qs[32n..32n+31]. */
template <> struct WItem<CU_TYPE_Q2_K> {
    int c[8]; int sc0, sc1, mn0, mn1, blk, qoff, sb0; float d, dmin;
    __device__ __forceinline__ void load(const uint8_t *row, int it, int nit, const uint64_t *tab) {
        blk = it >> 3; int n = (it >> 2) & 1, s = it & 3;
        const uint8_t *b = row + (int64_t)blk * 84;
        const int *qs = (const int *)(b + 16 + 32 * n);
#pragma unroll
        for (int k = 0; k < 8; k++) c[k] = (qs[k] >> (2 * s)) & 0x03030303;
        sb0 = 8 * n + 2 * s;
        uint8_t s0 = b[sb0], s1 = b[sb0 + 1];
        sc0 = s0 & 15; mn0 = s0 >> 4; sc1 = s1 & 15; mn1 = s1 >> 4;
        d = cu_h2f(*(const uint16_t *)(b + 80)); dmin = cu_h2f(*(const uint16_t *)(b + 82));
        qoff = 128 * n + 32 * s;
    }
    __device__ __forceinline__ float dot(const uint8_t *act, int it) const {
        const cu_block_q8_K *a = (const cu_block_q8_K *)act + blk;
        const int *aq = (const int *)(a->q + qoff);
        int p0 = 0, p1 = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) p0 = __dp4a(c[k], aq[k], p0);
#pragma unroll
        for (int k = 4; k < 8; k++) p1 = __dp4a(c[k], aq[k], p1);
        int isum = sc0 * p0 + sc1 * p1;
        int msum = mn0 * a->bsums[sb0] + mn1 * a->bsums[sb0 + 1];
        return a->d * d * (float)isum - a->d * dmin * (float)msum;
    }
};

/* Q4_K: item = (block, sub-block j). */
template <> struct WItem<CU_TYPE_Q4_K> {
    int c[8]; int sc, m, blk, j; float d, dmin;
    __device__ __forceinline__ void load(const uint8_t *row, int it, int nit, const uint64_t *tab) {
        blk = it >> 3; j = it & 7;
        const uint8_t *b = row + (int64_t)blk * 144;
        const int *qs = (const int *)(b + 16 + 32 * (j >> 1));
        int sh = 4 * (j & 1);
#pragma unroll
        for (int k = 0; k < 8; k++) c[k] = (qs[k] >> sh) & 0x0F0F0F0F;
        const uint8_t *q = b + 4;
        if (j < 4) { sc = q[j] & 63; m = q[j + 4] & 63; }
        else { sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4); m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4); }
        d = cu_h2f(*(const uint16_t *)b); dmin = cu_h2f(*(const uint16_t *)(b + 2));
    }
    __device__ __forceinline__ float dot(const uint8_t *act, int it) const {
        const cu_block_q8_K *a = (const cu_block_q8_K *)act + blk;
        const int *aq = (const int *)(a->q + 32 * j);
        int p = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) p = __dp4a(c[k], aq[k], p);
        int msum = m * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
        return a->d * d * (float)(sc * p) - a->d * dmin * (float)msum;
    }
};

/* IQ2_XXS: item = (block, group g): 4 grid points with their sign masks. */
template <> struct WItem<CU_TYPE_IQ2_XXS> {
    int v[8]; int blk, g; float scale;
    __device__ __forceinline__ void load(const uint8_t *row, int it, int nit, const uint64_t *tab) {
        blk = it >> 3; g = it & 7;
        const uint8_t *b = row + (int64_t)blk * 66;
        const uint16_t *qs = (const uint16_t *)(b + 2 + 8 * g);
        uint32_t w = (uint32_t)qs[2] | ((uint32_t)qs[3] << 16);
        cu_iq2_group_codes((uint32_t)qs[0] | ((uint32_t)qs[1] << 16), w, tab, v);
        scale = cu_h2f(*(const uint16_t *)b) * (float)(2 * (w >> 28) + 1);
    }
    __device__ __forceinline__ float dot(const uint8_t *act, int it) const {
        const cu_block_q8_K *a = (const cu_block_q8_K *)act + blk;
        const int *aq = (const int *)(a->q + 32 * g);
        int p = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) p = __dp4a(v[k], aq[k], p);
        return scale * a->d * (float)p * 0.125f;
    }
};

/* IQ2_XXS repacked on upload (cu_repack_iq2_xxs): a row is nb x 64 bytes of
 * groups, then nb f16 scales; a group (4 grid indices + signs/scale word) is
 * one 8-byte load. */
template <> struct WItem<CU_TYPE_IQ2R> {
    int v[8]; int blk, g; float scale;
    __device__ __forceinline__ void load(const uint8_t *row, int it, int nit, const uint64_t *tab) {
        blk = it >> 3; g = it & 7;
        uint2 q = *(const uint2 *)(row + (int64_t)blk * 64 + g * 8);
        uint32_t w = q.y;
        cu_iq2_group_codes(q.x, w, tab, v);
        float d = cu_h2f(((const uint16_t *)(row + (int64_t)(nit >> 3) * 64))[blk]);
        scale = d * (float)(2 * (w >> 28) + 1);
    }
    __device__ __forceinline__ float dot(const uint8_t *act, int it) const {
        const cu_block_q8_K *a = (const cu_block_q8_K *)act + blk;
        const int *aq = (const int *)(a->q + 32 * g);
        int p = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) p = __dp4a(v[k], aq[k], p);
        return scale * a->d * (float)p * 0.125f;
    }
};

/* Plain floats: F16/BF16 item = 8 elements (16 B), F32 item = 4 elements. */
template <> struct WItem<CU_TYPE_F16> {
    float w[8];
    __device__ __forceinline__ void load(const uint8_t *row, int it, int nit, const uint64_t *tab) {
        uint4 u = *(const uint4 *)(row + (int64_t)it * 16);
        const __half2 *h = (const __half2 *)&u;
#pragma unroll
        for (int k = 0; k < 4; k++) { float2 f = __half22float2(h[k]); w[2 * k] = f.x; w[2 * k + 1] = f.y; }
    }
    __device__ __forceinline__ float dot(const uint8_t *act, int it) const {
        const float4 *a = (const float4 *)(act + (int64_t)it * 32);
        float4 a0 = a[0], a1 = a[1];
        return w[0] * a0.x + w[1] * a0.y + w[2] * a0.z + w[3] * a0.w + w[4] * a1.x + w[5] * a1.y + w[6] * a1.z + w[7] * a1.w;
    }
};
template <> struct WItem<CU_TYPE_BF16> {
    float w[8];
    __device__ __forceinline__ void load(const uint8_t *row, int it, int nit, const uint64_t *tab) {
        uint4 u = *(const uint4 *)(row + (int64_t)it * 16);
        const uint32_t *p = (const uint32_t *)&u;
#pragma unroll
        for (int k = 0; k < 4; k++) { w[2 * k] = __uint_as_float(p[k] << 16); w[2 * k + 1] = __uint_as_float(p[k] & 0xFFFF0000u); }
    }
    __device__ __forceinline__ float dot(const uint8_t *act, int it) const {
        const float4 *a = (const float4 *)(act + (int64_t)it * 32);
        float4 a0 = a[0], a1 = a[1];
        return w[0] * a0.x + w[1] * a0.y + w[2] * a0.z + w[3] * a0.w + w[4] * a1.x + w[5] * a1.y + w[6] * a1.z + w[7] * a1.w;
    }
};
template <> struct WItem<CU_TYPE_F32> {
    float4 w;
    __device__ __forceinline__ void load(const uint8_t *row, int it, int nit, const uint64_t *tab) { w = *(const float4 *)(row + (int64_t)it * 16); }
    __device__ __forceinline__ float dot(const uint8_t *act, int it) const {
        float4 a = *(const float4 *)(act + (int64_t)it * 16);
        return w.x * a.x + w.y * a.y + w.z * a.z + w.w * a.w;
    }
};

/* ------------------------------------------------------------------ */
/* the GEMV kernel                                                     */

#define GEMV_WARPS 8

/* RPW rows per warp: prefill tiles (NT > 1) take 4 so the weights of 4 rows
 * are in flight together and the activation loads are shared between them. */
template <int TYPE, int NT, int RPW>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
k_gemv(cu_gemv_args g) {
    cu_pdl_enter();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    /* paired launch (w2): the second half of the grid computes the second matrix */
    int bx = blockIdx.x;
    const uint8_t *wbase = (const uint8_t *)g.w;
    float *gout = g.out;
    if (g.w2 && bx >= (int)(gridDim.x >> 1)) { bx -= gridDim.x >> 1; wbase = (const uint8_t *)g.w2; gout = g.out2; }
    int64_t r0 = ((int64_t)bx * GEMV_WARPS + warp) * RPW;
    const uint64_t *tab = cu_iq2xxs_grid;
    if (TYPE == CU_TYPE_IQ2_XXS || TYPE == CU_TYPE_IQ2R) {
        /* the grid in shared memory: random lookups stay on-chip */
        __shared__ uint64_t sgrid[256];
        for (int i = threadIdx.x; i < 256; i += blockDim.x) sgrid[i] = cu_iq2xxs_grid[i];
        __syncthreads();
        tab = sgrid;
    }
    if (r0 >= g.rows) return;
    int nr = g.rows - r0 < RPW ? (int)(g.rows - r0) : RPW;
    /* which activation / output rows this tile covers */
    int ids[NT]; int nt = 0;
    if (g.tile_pairs) {
        int tile = blockIdx.y;
        if (tile >= *g.n_tiles) return;
        int start = g.tile_start[tile], cnt = g.tile_count[tile];
        int e = g.tile_expert[tile];
        wbase += (int64_t)e * g.expert_bytes;
        for (int k = 0; k < NT; k++) if (k < cnt) ids[nt++] = g.tile_pairs[start + k];
        if (nt == 0) return;              /* a pair of an expert another GPU owns */
    } else {
        int t0 = blockIdx.y * NT;
        for (int k = 0; k < NT; k++) if (t0 + k < g.ntok) ids[nt++] = t0 + k;
    }
    const uint8_t *row[RPW];
#pragma unroll
    for (int rr = 0; rr < RPW; rr++) row[rr] = wbase + (r0 + (rr < nr ? rr : 0)) * (int64_t)g.row_bytes;
    /* grouped input: all rows of a warp lie in one group when group_rows % RPW == 0 */
    int64_t aoff = g.group_rows ? (r0 / g.group_rows) * g.group_act_bytes : 0;
    const uint8_t *__restrict__ act[NT];
#pragma unroll
    for (int k = 0; k < NT; k++)
        act[k] = (const uint8_t *)g.act + (int64_t)(k < nt ? ids[k] / g.act_div : 0) * g.act_stride + aoff;
    float acc[NT][RPW];
#pragma unroll
    for (int k = 0; k < NT; k++)
#pragma unroll
        for (int rr = 0; rr < RPW; rr++) acc[k][rr] = 0.f;
#pragma unroll 2
    for (int it = lane; it < g.items; it += 32) {
        WItem<TYPE> w[RPW];
#pragma unroll
        for (int rr = 0; rr < RPW; rr++) w[rr].load(row[rr], it, g.items, tab);
#pragma unroll
        for (int k = 0; k < NT; k++)
            if (k < nt) {
#pragma unroll
                for (int rr = 0; rr < RPW; rr++) acc[k][rr] += w[rr].dot(act[k], it);
            }
    }
#pragma unroll
    for (int k = 0; k < NT; k++) {
        if (k < nt) {
#pragma unroll
            for (int rr = 0; rr < RPW; rr++) {
                float s = warp_sum(acc[k][rr]);
                if (lane == 0 && rr < nr) {
                    float *o = gout + (int64_t)ids[k] * g.out_stride + r0 + rr;
                    if (g.accumulate) *o += s; else *o = s;
                }
            }
        }
    }
}

template <int TYPE>
static void launch_type(const cu_gemv_args &g, int ntiles, cudaStream_t st) {
    dim3 block(GEMV_WARPS * 32);
    int rpw = g.nt_hint <= 1 || (g.group_rows && g.group_rows % 4) ? 1 : 4;
    int gx = (int)((g.rows + GEMV_WARPS * rpw - 1) / (GEMV_WARPS * rpw));
    if (g.w2) gx *= 2;
    if (g.nt_hint <= 1) cu_launch(k_gemv<TYPE, 1, 1>, dim3(gx, ntiles), block, 0, st, g);
    else if (rpw == 1 && g.nt_hint <= 4) cu_launch(k_gemv<TYPE, 4, 1>, dim3(gx, ntiles), block, 0, st, g);
    else if (rpw == 1) cu_launch(k_gemv<TYPE, 8, 1>, dim3(gx, ntiles), block, 0, st, g);
    else if (g.nt_hint <= 4) cu_launch(k_gemv<TYPE, 4, 4>, dim3(gx, ntiles), block, 0, st, g);
    else cu_launch(k_gemv<TYPE, 8, 4>, dim3(gx, ntiles), block, 0, st, g);
}

/* ------------------------------------------------------------------ */
/* exact activations (cu_gemv_args.act_f32, MINKE_ACT_EXACT)          */
/*
 * The weights are decoded exactly (the values src/quant's dequant gives; the
 * block scale is factored out of each item's sum) and multiplied with f32
 * activations, f32 accumulation. Codes become floats without I2F: a byte put
 * into the low mantissa byte of 2^23 reads 2^23 + byte, one FADD takes 2^23
 * off (PRMT + FADD per element). K-quant codes are masked in place (c * 4^s,
 * c * 16^h) and the power of two goes into the scale; their min term uses the
 * sums of 16 activations computed once per block. IQ2_XXS reads a f16 copy of
 * its grid from shared memory; the signs go onto the f16 sign bits, two
 * elements per LOP3, the f16 -> f32 conversion is exact.
 *
 * A block stages the activation rows of its tile in shared memory as f32,
 * through L1 (the next blocks on the SM find them there; the weights are
 * loaded with L1::no_allocate so they do not push them out), in chunks of at
 * most 32 KB. The layout is planes: float4 k of item it sits at
 * [it / 32][k][it % 32], so the 32 lanes of a warp (consecutive items) read
 * 32 consecutive float4, free of bank conflicts, at an immediate offset.
 * Warps take RPW rows each (the activation loads are shared between them);
 * with KS > 1 the KS warps of a row group split the items and add their
 * partial sums through shared memory in a fixed order (small matrices: more
 * blocks in flight). At T = 1 the loads are pipelined (MINKE_CUDA_GEMVF_V): a
 * lane keeps a ring of D items a row in flight, dense launches request their
 * first items before the PDL wait, a block requests its next row group before
 * the current one's sums and prefetches row groups ahead into L2; none of it
 * changes the order of any sum.
 */


/* byte b of v as a float (0..255): 2^23 + byte, less 2^23 */
__device__ __forceinline__ float xf_u8(uint32_t v, int b) {
    return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7650u | (uint32_t)b)) - 8388608.0f;
}
/* byte b of v ^ 0x80808080 as the int8 it was: 2^23 + 128 + q, less 2^23 + 128 */
__device__ __forceinline__ float xf_s8(uint32_t vx, int b) {
    return __uint_as_float(__byte_perm(vx, 0x4B000000u, 0x7650u | (uint32_t)b)) - 8388736.0f;
}

/* shared tables of the decoders */
/* grid16: this lane's copy of the IQ2_XXS grid as f16 (entry e at grid16[8 e]): eight
 * copies, copy c in bank quad c only, so the 8 lanes of an LDS.128 phase (lane & 7 = c)
 * never conflict however random their entries are. */
struct XTabs { const uint4 *grid16; const uint8_t *signs; const float *kv; };

/* A decoded item: dec8(l) gives elements 8l..8l+7 without the scale; the
 * item's value is sum_h scale(h) * sum(elements of half h) - mscale(h) * sum(x of half h).
 * HALVES = 2: two scales (Q2_K sub-blocks of 16: l = 0,1 and 2,3). */
template <int TYPE> struct XW;

/* dh: the f16 scale's bits, converted where it is used (converted at the
 * load, the conversion waits for the load and stalls the warp) */
struct XWQ8 {
    static constexpr int HALVES = 1, MINS = 0;
    uint32_t q[8], dh;
    __device__ __forceinline__ void dec8(int l, float *w, const XTabs &) const {
        uint32_t a = q[2 * l] ^ 0x80808080u, b = q[2 * l + 1] ^ 0x80808080u;
#pragma unroll
        for (int j = 0; j < 4; j++) { w[j] = xf_s8(a, j); w[4 + j] = xf_s8(b, j); }
    }
    __device__ __forceinline__ float scale(int) const { return cu_h2f((uint16_t)dh); }
    __device__ __forceinline__ float mscale(int) const { return 0.f; }
};
template <> struct XW<CU_TYPE_Q8_0R> : XWQ8 {
    __device__ __forceinline__ void load(const uint8_t *row, int it, int nit) {
        uint4 a0 = ldw_v4(row + (int64_t)it * 32), a1 = ldw_v4(row + (int64_t)it * 32 + 16);
        q[0] = a0.x; q[1] = a0.y; q[2] = a0.z; q[3] = a0.w; q[4] = a1.x; q[5] = a1.y; q[6] = a1.z; q[7] = a1.w;
        dh = ldw_u16(row + (int64_t)nit * 32 + 2 * it);
    }
};
template <> struct XW<CU_TYPE_Q8_0> : XWQ8 {
    __device__ __forceinline__ void load(const uint8_t *row, int it, int nit) {
        const uint8_t *b = row + (int64_t)it * 34;
        dh = *(const uint16_t *)b;
#pragma unroll
        for (int k = 0; k < 8; k++) q[k] = (uint32_t)ld_i32_u16(b + 2 + 4 * k);
    }
};

/* E8M0 scale as src/quant's e8m0_half: 2^(e-128), denormal below */
__device__ __forceinline__ float xf_e8m0_half(uint32_t e) {
    return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1u) << 23);
}
template <> struct XW<CU_TYPE_MXFP4> {
    static constexpr int HALVES = 1, MINS = 0;
    uint32_t q[4]; float d;
    __device__ __forceinline__ void load(const uint8_t *row, int it, int nit) {
        const uint8_t *b = row + (int64_t)it * 17;
        d = xf_e8m0_half(b[0]);
#pragma unroll
        for (int k = 0; k < 4; k++)
            q[k] = (uint32_t)b[1 + 4 * k] | ((uint32_t)b[2 + 4 * k] << 8) | ((uint32_t)b[3 + 4 * k] << 16) |
                   ((uint32_t)b[4 + 4 * k] << 24);
    }
    /* elements 0..15 are the low nibbles of bytes 0..15, 16..31 the high ones */
    __device__ __forceinline__ void dec8(int l, float *w, const XTabs &tb) const {
        const int sh = l >= 2 ? 4 : 0;
        uint32_t a = q[2 * (l & 1)], b = q[2 * (l & 1) + 1];
#pragma unroll
        for (int j = 0; j < 4; j++) { w[j] = tb.kv[(a >> (8 * j + sh)) & 15]; w[4 + j] = tb.kv[(b >> (8 * j + sh)) & 15]; }
    }
    __device__ __forceinline__ float scale(int) const { return d; }
    __device__ __forceinline__ float mscale(int) const { return 0.f; }
};

/* Q2_K item (block, n, s): codes (qs[32n + l] >> 2s) & 3, read in place as c * 4^s. */
template <> struct XW<CU_TYPE_Q2_K> {
    static constexpr int HALVES = 2, MINS = 1;
    uint32_t c[8]; float s0, s1, m0, m1;
    __device__ __forceinline__ void load(const uint8_t *row, int it, int nit) {
        int blk = it >> 3, n = (it >> 2) & 1, s = it & 3;
        const uint8_t *b = row + (int64_t)blk * 84;
        uint32_t mask = 0x03030303u << (2 * s);
#pragma unroll
        for (int k = 0; k < 8; k++) c[k] = ldw_u32(b + 16 + 32 * n + 4 * k) & mask;
        uint32_t sc = ldw_u16(b + 8 * n + 2 * s);
        uint32_t dd = ldw_u32(b + 80);
        float d = cu_h2f((uint16_t)dd), dmin = cu_h2f((uint16_t)(dd >> 16));
        float p = __uint_as_float((uint32_t)(127 - 2 * s) << 23);     /* 4^-s */
        s0 = d * (float)(sc & 15) * p; s1 = d * (float)((sc >> 8) & 15) * p;
        m0 = dmin * (float)((sc >> 4) & 15); m1 = dmin * (float)((sc >> 12) & 15);
    }
    __device__ __forceinline__ void dec8(int l, float *w, const XTabs &) const {
#pragma unroll
        for (int j = 0; j < 4; j++) { w[j] = xf_u8(c[2 * l], j); w[4 + j] = xf_u8(c[2 * l + 1], j); }
    }
    __device__ __forceinline__ float scale(int h) const { return h ? s1 : s0; }
    __device__ __forceinline__ float mscale(int h) const { return h ? m1 : m0; }
};

/* Q4_K item (block, sub-block j): codes (qs[32(j/2) + l] >> 4(j&1)) & 15, read in place as c * 16^(j&1). */
template <> struct XW<CU_TYPE_Q4_K> {
    static constexpr int HALVES = 1, MINS = 1;
    uint32_t c[8]; float s0, m0;
    __device__ __forceinline__ void load(const uint8_t *row, int it, int nit) {
        int blk = it >> 3, j = it & 7;
        const uint8_t *b = row + (int64_t)blk * 144;
        uint32_t mask = 0x0F0F0F0Fu << (4 * (j & 1));
        uint4 a0 = ldw_v4(b + 16 + 32 * (j >> 1)), a1 = ldw_v4(b + 32 + 32 * (j >> 1));
        c[0] = a0.x & mask; c[1] = a0.y & mask; c[2] = a0.z & mask; c[3] = a0.w & mask;
        c[4] = a1.x & mask; c[5] = a1.y & mask; c[6] = a1.z & mask; c[7] = a1.w & mask;
        uint32_t dd = ldw_u32(b), w0 = ldw_u32(b + 4), w1 = ldw_u32(b + 8), w2 = ldw_u32(b + 12);
        uint32_t sc, m;
        /* q4_K_scale_min: bytes 0..3 scales, 4..7 mins, 8..11 low nibbles of both for j >= 4 */
        if (j < 4) { sc = (w0 >> (8 * j)) & 63; m = (w1 >> (8 * j)) & 63; }
        else {
            uint32_t qj4 = (w2 >> (8 * (j - 4))) & 255, qm4 = (w0 >> (8 * (j - 4))) & 255, qj = (w1 >> (8 * (j - 4))) & 255;
            sc = (qj4 & 15) | ((qm4 >> 6) << 4); m = (qj4 >> 4) | ((qj >> 6) << 4);
        }
        float d = cu_h2f((uint16_t)dd), dmin = cu_h2f((uint16_t)(dd >> 16));
        s0 = d * (float)sc * ((j & 1) ? 0.0625f : 1.0f);
        m0 = dmin * (float)m;
    }
    __device__ __forceinline__ void dec8(int l, float *w, const XTabs &) const {
#pragma unroll
        for (int j = 0; j < 4; j++) { w[j] = xf_u8(c[2 * l], j); w[4 + j] = xf_u8(c[2 * l + 1], j); }
    }
    __device__ __forceinline__ float scale(int) const { return s0; }
    __device__ __forceinline__ float mscale(int) const { return m0; }
};

/* IQ2_XXS group: a = 4 grid indices, w = 4 x 7 sign bits + 4-bit scale. */
struct XWIQ2 {
    static constexpr int HALVES = 1, MINS = 0;
    uint32_t a, w; float dg;
    __device__ __forceinline__ void dec8(int l, float *v, const XTabs &tb) const {
        uint4 e = tb.grid16[((a >> (8 * l)) & 255) * 8];
        uint32_t S = tb.signs[(w >> (7 * l)) & 127];
        /* S * C puts sign bit 2i at bit 15 and 2i+1 at bit 31 (no carries) */
        uint32_t h0 = e.x ^ ((S * 0x40008000u) & 0x80008000u), h1 = e.y ^ ((S * 0x10002000u) & 0x80008000u);
        uint32_t h2 = e.z ^ ((S * 0x04000800u) & 0x80008000u), h3 = e.w ^ ((S * 0x01000200u) & 0x80008000u);
        float2 f0 = __half22float2(*(const __half2 *)&h0), f1 = __half22float2(*(const __half2 *)&h1);
        float2 f2 = __half22float2(*(const __half2 *)&h2), f3 = __half22float2(*(const __half2 *)&h3);
        v[0] = f0.x; v[1] = f0.y; v[2] = f1.x; v[3] = f1.y; v[4] = f2.x; v[5] = f2.y; v[6] = f3.x; v[7] = f3.y;
    }
    /* the CPU's dg = d * (0.5 + ls) * 0.25 */
    __device__ __forceinline__ void set_scale(float d) { dg = d * (0.5f + (float)(w >> 28)) * 0.25f; }
    __device__ __forceinline__ float scale(int) const { return dg; }
    __device__ __forceinline__ float mscale(int) const { return 0.f; }
};
template <> struct XW<CU_TYPE_IQ2R> : XWIQ2 {
    __device__ __forceinline__ void load(const uint8_t *row, int it, int nit) {
        int blk = it >> 3, g = it & 7;
        uint2 q = ldw_v2(row + (int64_t)blk * 64 + g * 8);
        a = q.x; w = q.y;
        set_scale(__half2float(__ushort_as_half((unsigned short)ldw_u16(row + (int64_t)(nit >> 3) * 64 + 2 * blk))));
    }
};
template <> struct XW<CU_TYPE_IQ2_XXS> : XWIQ2 {
    __device__ __forceinline__ void load(const uint8_t *row, int it, int nit) {
        int blk = it >> 3, g = it & 7;
        const uint8_t *b = row + (int64_t)blk * 66;
        const uint16_t *qs = (const uint16_t *)(b + 2 + 8 * g);
        a = (uint32_t)qs[0] | ((uint32_t)qs[1] << 16);
        w = (uint32_t)qs[2] | ((uint32_t)qs[3] << 16);
        set_scale(cu_h2f(*(const uint16_t *)b));
    }
};

/* activation chunk per block: 8192 floats of one token, 2048 of 4, 1024 of 8 (32 KB) */
template <int NT> struct XChunk { static constexpr int K = NT == 1 ? 8192 : NT <= 4 ? 2048 : 1024; };

__host__ __device__ constexpr int xf_is_iq2(int t) { return t == CU_TYPE_IQ2_XXS || t == CU_TYPE_IQ2R; }

/* dynamic shared memory: the activation planes of the largest chunk, the
 * sums of 16 (K-quants), then (IQ2_XXS) the grid copies; in 16-byte units */
template <int NT> __host__ __device__ inline int xf_grid_off(int64_t in, int mins) {
    int kc = in < XChunk<NT>::K ? (int)in : XChunk<NT>::K, ni = kc / 32;
    return NT * ((ni + 31) / 32) * 256 + (mins ? (NT * ni + 1) / 2 : 0);
}

/* Knobs of the T = 1 pipeline (MINKE_CUDA_GEMVF_V, see gemvf_variant): early: a dense
 * launch requests its first row group's weights before cu_pdl_enter() (weights are
 * never written during a step; activations and tiles are read only after it), and
 * a block requests the next row group's weights before the warp sums of the
 * current one; l2ahead: row groups a block prefetches into L2 ahead of use. */
struct xf_opts { int early, l2ahead; };

/* Prefetch bytes [p, p + n) into L2, spread over the block's threads; the range is
 * shrunk to 16-byte bounds (no byte outside it is touched). */
__device__ __forceinline__ void xf_l2_prefetch(const uint8_t *p, uint64_t n) {
    size_t a = (__cvta_generic_to_global(p) + 15) & ~(size_t)15, e = (__cvta_generic_to_global(p) + n) & ~(size_t)15;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const size_t CH = 4096;
    for (size_t q = a + (size_t)threadIdx.x * CH; q < e; q += (size_t)blockDim.x * CH) {
        uint32_t sz = (uint32_t)(e - q < CH ? e - q : CH);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(q), "r"(sz));
    }
#else
    for (size_t q = (a & ~(size_t)127) + (size_t)threadIdx.x * 128; q < e; q += (size_t)blockDim.x * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(q));
#endif
}

/* the weight rows of row group rg (rows past the end repeat the last one) */
template <int RPW>
__device__ __forceinline__ void xf_rows(const cu_gemv_args &g, const uint8_t *wbase, int64_t r0, const uint8_t *(&row)[RPW]) {
#pragma unroll
    for (int rr = 0; rr < RPW; rr++) {
        int64_t r = r0 + rr < g.rows ? r0 + rr : g.rows - 1;
        row[rr] = wbase + r * (int64_t)g.row_bytes;
    }
}

/* the ring's D items it0 + d S of the chunk starting at item cit (those below ni) */
template <typename W, int D, int RPW>
__device__ __forceinline__ void xf_ring_load(W (&w)[D][RPW], const uint8_t *const (&row)[RPW], int cit, int it0, int S,
                                             int ni, int nitems) {
#pragma unroll
    for (int d = 0; d < D; d++)
        if (it0 + d * S < ni) {
#pragma unroll
            for (int rr = 0; rr < RPW; rr++) w[d][rr].load(row[rr], cit + it0 + d * S, nitems);
        }
}

/* one item into the sums: acc[t][rr] += scales x (decoded item . activations) */
template <int TYPE, int NT, int RPW>
__device__ __forceinline__ void xf_item(float (&acc)[NT][RPW], const XW<TYPE> (&w)[RPW], const float4 *xsh, const float2 *xsum,
                                        int it, int ts, int ni, const XTabs &tb) {
    typedef XW<TYPE> W;
    constexpr int H = W::HALVES;
    const float4 *xb = xsh + (it >> 5) * 256 + (it & 31);
    /* two partial sums per (token, row): the halves of a Q2_K item, else even / odd l */
    float p[NT][RPW][2];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int rr = 0; rr < RPW; rr++) p[t][rr][0] = p[t][rr][1] = 0.f;
#pragma unroll
    for (int l = 0; l < 4; l++) {
        const int h = H == 2 ? l >> 1 : l & 1;
        float4 xa[NT], xc[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) { xa[t] = xb[t * ts + 64 * l]; xc[t] = xb[t * ts + 64 * l + 32]; }
#pragma unroll
        for (int rr = 0; rr < RPW; rr++) {
            float v[8];
            w[rr].dec8(l, v, tb);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                float s = p[t][rr][h];
                s = fmaf(v[0], xa[t].x, s); s = fmaf(v[1], xa[t].y, s);
                s = fmaf(v[2], xa[t].z, s); s = fmaf(v[3], xa[t].w, s);
                s = fmaf(v[4], xc[t].x, s); s = fmaf(v[5], xc[t].y, s);
                s = fmaf(v[6], xc[t].z, s); s = fmaf(v[7], xc[t].w, s);
                p[t][rr][h] = s;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float2 xs = make_float2(0.f, 0.f);
        if (W::MINS) xs = xsum[t * ni + it];
#pragma unroll
        for (int rr = 0; rr < RPW; rr++) {
            float a = acc[t][rr];
            if (H == 2) {
                a = fmaf(w[rr].scale(0), p[t][rr][0], a);
                a = fmaf(w[rr].scale(1), p[t][rr][1], a);
                if (W::MINS) { a = fmaf(-w[rr].mscale(0), xs.x, a); a = fmaf(-w[rr].mscale(1), xs.y, a); }
            } else {
                a = fmaf(w[rr].scale(0), p[t][rr][0] + p[t][rr][1], a);
                if (W::MINS) a = fmaf(-w[rr].mscale(0), xs.x + xs.y, a);
            }
            acc[t][rr] = a;
        }
    }
}

/* D: the items of a row a lane has in flight (a ring of D loaded items; each is
 * refilled with the item D steps on as soon as it has been used). The items of a
 * row are summed in the same order whatever D is. */
template <int TYPE, int NT, int RPW, int KS, int D>
__global__ void __launch_bounds__(GEMV_WARPS * 32, 2)
k_gemvf(cu_gemv_args g, xf_opts xo) {
    extern __shared__ uint4 xsh_raw[];
    float4 *xsh = (float4 *)xsh_raw;
    __shared__ uint8_t ssigns[xf_is_iq2(TYPE) ? 128 : 1];
    __shared__ float skv[TYPE == CU_TYPE_MXFP4 ? 16 : 1];
    __shared__ float sred[KS > 1 ? GEMV_WARPS * NT * RPW : 1];
    typedef XW<TYPE> W;
    constexpr int KC = XChunk<NT>::K;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nthr = blockDim.x;
    const int nwr = (blockDim.x >> 5) / KS, wr = warp / KS, ks = warp - wr * KS;
    int bx = blockIdx.x;
    const uint8_t *wbase = (const uint8_t *)g.w;
    float *gout = g.out;
    if (g.w2 && bx >= (int)(gridDim.x >> 1)) { bx -= gridDim.x >> 1; wbase = (const uint8_t *)g.w2; gout = g.out2; }
    /* row groups (nwr * RPW rows): block bx takes bx, bx + gx, ...; with one chunk the
     * staged activations serve them all (unless a grouped input moves to another group) */
    const int64_t rpb = (int64_t)nwr * RPW;
    const int nrg = (int)((g.rows + rpb - 1) / rpb);
    const int gxh = g.w2 ? (int)(gridDim.x >> 1) : (int)gridDim.x;
    const int in = (int)g.in, nitems = g.items, nchunks = (in + KC - 1) / KC;
    const int ni0 = (in < KC ? in : KC) >> 5;
    const int S = 32 * KS, it0 = ks * 32 + lane;
    W w[D][RPW];
    /* the row group whose weights are already requested (-1: none) */
    int loaded_rg = -1;
    if (xo.early && !g.tile_pairs && bx < nrg) {
        /* dense: rows and weights do not depend on earlier kernels */
        const int64_t r0 = (int64_t)bx * rpb + (int64_t)wr * RPW;
        if (r0 < g.rows) {
            const uint8_t *row[RPW];
            xf_rows<RPW>(g, wbase, r0, row);
            xf_ring_load<W, D, RPW>(w, row, 0, it0, S, ni0, nitems);
        }
        loaded_rg = bx;
        for (int j = D * S >= ni0 && nchunks == 1; j < xo.l2ahead; j++) {
            int64_t rb = (int64_t)(bx + j * gxh) * rpb;
            if (rb < g.rows) xf_l2_prefetch(wbase + rb * (int64_t)g.row_bytes, (uint64_t)((g.rows - rb < rpb ? g.rows - rb : rpb) * (int64_t)g.row_bytes));
        }
    }
    /* the decoders' tables are constant (set once at start-up): built before the wait */
    XTabs tb;
    tb.signs = ssigns; tb.kv = skv;
    tb.grid16 = xsh_raw + xf_grid_off<NT>(g.in, W::MINS) + (lane & 7);
    if (xf_is_iq2(TYPE)) {
        uint4 *sg = xsh_raw + xf_grid_off<NT>(g.in, W::MINS);
        for (int e = threadIdx.x; e < 256; e += nthr) {
            uint64_t gv = cu_iq2xxs_grid[e];
            uint32_t h[4];
#pragma unroll
            for (int p = 0; p < 4; p++) {
                __half2 v = __floats2half2_rn((float)((gv >> (16 * p)) & 255), (float)((gv >> (16 * p + 8)) & 255));
                h[p] = *(const uint32_t *)&v;
            }
            uint4 v = make_uint4(h[0], h[1], h[2], h[3]);
            /* copy (c + e) & 7 at step c: the 8 lanes of a store phase hit 8 bank quads */
#pragma unroll
            for (int c = 0; c < 8; c++) sg[e * 8 + ((c + e) & 7)] = v;
        }
        for (int i = threadIdx.x; i < 128; i += nthr) ssigns[i] = cu_ksigns_iq2xs[i];
    }
    if (TYPE == CU_TYPE_MXFP4)
        for (int i = threadIdx.x; i < 16; i += nthr) skv[i] = (float)cu_mxfp4_kvalues[i];
    cu_pdl_enter();
    int ids[NT]; int nt = 0;
    if (g.tile_pairs) {
        int tile = blockIdx.y;
        if (tile >= *g.n_tiles) return;
        int start = g.tile_start[tile], cnt = g.tile_count[tile];
        wbase += (int64_t)g.tile_expert[tile] * g.expert_bytes;
#pragma unroll
        for (int k = 0; k < NT; k++) ids[k] = k < cnt ? g.tile_pairs[start + k] : 0;
        nt = cnt < NT ? cnt : NT;
    } else {
        int t0 = blockIdx.y * NT;
#pragma unroll
        for (int k = 0; k < NT; k++) ids[k] = t0 + k;
        nt = g.ntok - t0 < NT ? g.ntok - t0 : NT;
    }
    if (nt <= 0) return;
    if (loaded_rg < 0 && xo.l2ahead)
        for (int j = D * S >= ni0 && nchunks == 1; j < xo.l2ahead; j++) {
            int64_t rb = (int64_t)(bx + j * gxh) * rpb;
            if (rb < g.rows) xf_l2_prefetch(wbase + rb * (int64_t)g.row_bytes, (uint64_t)((g.rows - rb < rpb ? g.rows - rb : rpb) * (int64_t)g.row_bytes));
        }
    int64_t staged_aoff = -1;
    for (int rg = bx; rg < nrg; rg += gxh) {
        const int64_t rb0 = (int64_t)rg * rpb, r0 = rb0 + (int64_t)wr * RPW;
        const bool active = r0 < g.rows;
        /* grouped input: the launcher makes a block's rows lie in one group */
        const int64_t aoff = g.group_rows ? (rb0 / g.group_rows) * g.group_act_bytes : 0;
        const bool al16 = (((uintptr_t)g.act | (uintptr_t)g.act_stride | (uintptr_t)aoff) & 15) == 0;
        const uint8_t *row[RPW];
        xf_rows<RPW>(g, wbase, r0, row);
        if (xo.l2ahead) {
            int64_t rb = (int64_t)(rg + xo.l2ahead * gxh) * rpb;
            if (rb < g.rows) xf_l2_prefetch(wbase + rb * (int64_t)g.row_bytes, (uint64_t)((g.rows - rb < rpb ? g.rows - rb : rpb) * (int64_t)g.row_bytes));
        }
        float acc[NT][RPW];
#pragma unroll
        for (int k = 0; k < NT; k++)
#pragma unroll
            for (int rr = 0; rr < RPW; rr++) acc[k][rr] = 0.f;
        /* the first items' weights are requested before the staging: their latency overlaps it */
        if (active && loaded_rg != rg) xf_ring_load<W, D, RPW>(w, row, 0, it0, S, ni0, nitems);
        for (int c0 = 0; c0 < in; c0 += KC) {
            const int kc = in - c0 < KC ? in - c0 : KC, ni = kc >> 5, ts = ((ni + 31) >> 5) * 256;
            if (nchunks > 1 || aoff != staged_aoff) {
                __syncthreads();     /* the previous chunk has been read */
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    const float *src = (const float *)((const uint8_t *)g.act +
                                                       (int64_t)(t < nt ? ids[t] / g.act_div : 0) * g.act_stride + aoff) + c0;
                    /* 32 threads take float4 k0..k0+3 of 8 items: 8 lines a load, and the 8
                     * stores of a phase (one k, 8 consecutive items) hit 8 bank quads;
                     * four loads are in flight before their stores */
                    for (int s0 = threadIdx.x; s0 < ts; s0 += 4 * nthr) {
                        float4 x[4];
#pragma unroll
                        for (int u4 = 0; u4 < 4; u4++) {
                            const int s = s0 + u4 * nthr;
                            int u = s & 31, v = s >> 5;
                            int it = ((v >> 1) << 3) | (u & 7), k = ((v & 1) << 2) | (u >> 3);
                            x[u4] = make_float4(0.f, 0.f, 0.f, 0.f);
                            if (s < ts && t < nt && it < ni) {
                                const float *p = src + it * 32 + k * 4;
                                if (al16) x[u4] = __ldg((const float4 *)p);
                                else x[u4] = make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
                            }
                        }
#pragma unroll
                        for (int u4 = 0; u4 < 4; u4++) {
                            const int s = s0 + u4 * nthr;
                            int u = s & 31, v = s >> 5;
                            int it = ((v >> 1) << 3) | (u & 7), k = ((v & 1) << 2) | (u >> 3);
                            if (s < ts) xsh[t * ts + ((it >> 5) << 8) + (k << 5) + (it & 31)] = x[u4];
                        }
                    }
                }
                if (W::MINS) {
                    float2 *xsum = (float2 *)(xsh + NT * ts);
                    __syncthreads();
#pragma unroll
                    for (int t = 0; t < NT; t++)
                        for (int it = threadIdx.x; it < ni; it += nthr) {
                            const float4 *b = xsh + t * ts + (it >> 5) * 256 + (it & 31);
                            float lo = 0.f, hi = 0.f;
#pragma unroll
                            for (int k = 0; k < 4; k++) { float4 v = b[32 * k]; lo += (v.x + v.y) + (v.z + v.w); }
#pragma unroll
                            for (int k = 4; k < 8; k++) { float4 v = b[32 * k]; hi += (v.x + v.y) + (v.z + v.w); }
                            xsum[t * ni + it] = make_float2(lo, hi);
                        }
                }
                __syncthreads();
                staged_aoff = aoff;
            }
            const float2 *xsum = (const float2 *)(xsh + NT * ts);
            if (active) {
                if (c0 > 0) xf_ring_load<W, D, RPW>(w, row, c0 >> 5, it0, S, ni, nitems);
                for (int it = it0; it < ni; it += D * S) {
#pragma unroll
                    for (int d = 0; d < D; d++) {
                        const int itd = it + d * S;
                        if (itd < ni) {
                            xf_item<TYPE, NT, RPW>(acc, w[d], xsh, xsum, itd, ts, ni, tb);
                            if (itd + D * S < ni) {
#pragma unroll
                                for (int rr = 0; rr < RPW; rr++) w[d][rr].load(row[rr], (c0 >> 5) + itd + D * S, nitems);
                            }
                        }
                    }
                }
            }
        }
        /* the next row group's first items are requested before this one's sums */
        loaded_rg = -1;
        if (xo.early && nchunks == 1 && rg + gxh < nrg) {
            const int64_t rn = (int64_t)(rg + gxh) * rpb + (int64_t)wr * RPW;
            if (rn < g.rows) {
                const uint8_t *rown[RPW];
                xf_rows<RPW>(g, wbase, rn, rown);
                xf_ring_load<W, D, RPW>(w, rown, 0, it0, S, ni0, nitems);
            }
            loaded_rg = rg + gxh;
        }
        if (KS == 1) {
            if (active) {
#pragma unroll
                for (int t = 0; t < NT; t++)
#pragma unroll
                    for (int rr = 0; rr < RPW; rr++) {
                        float s = warp_sum(acc[t][rr]);
                        if (lane == 0 && t < nt && r0 + rr < g.rows) {
                            float *o = gout + (int64_t)ids[t] * g.out_stride + r0 + rr;
                            if (g.accumulate) *o += s; else *o = s;
                        }
                    }
            }
        } else {
            /* the KS warps of a row group add their sums in warp order */
#pragma unroll
            for (int t = 0; t < NT; t++)
#pragma unroll
                for (int rr = 0; rr < RPW; rr++) {
                    float s = warp_sum(acc[t][rr]);
                    if (lane == 0) sred[warp * NT * RPW + t * RPW + rr] = s;
                }
            __syncthreads();
            if (ks == 0 && active && lane < NT * RPW) {
                int t = lane / RPW, rr = lane - t * RPW;
                float s = 0.f;
#pragma unroll
                for (int k = 0; k < KS; k++) s += sred[(warp + k) * NT * RPW + lane];
                int id = 0;
#pragma unroll
                for (int k = 0; k < NT; k++) if (k == t) id = ids[k];
                if (t < nt && r0 + rr < g.rows) {
                    float *o = gout + (int64_t)id * g.out_stride + r0 + rr;
                    if (g.accumulate) *o += s; else *o = s;
                }
            }
            __syncthreads();     /* sred is written again by the next row group */
        }
    }
}

/* MINKE_CUDA_GEMVF_LOOPS: the most row groups a block takes in turn (default 8; 1 = a block per group) */
static int gemvf_max_loops(void) {
    static int n = 0;
    if (!n) { const char *e = getenv("MINKE_CUDA_GEMVF_LOOPS"); n = e && atoi(e) > 0 ? atoi(e) : 8; }
    return n;
}

/* MINKE_CUDA_GEMVF_V: the T = 1 pipeline (default 1: the fastest decode on the H200,
 * 112.2 tok/s against 111.4 (0), 107.2 (2), 106.2 (3), 105.6 (5); docs/performance.md):
 *   0: two items a row in flight, nothing before cu_pdl_enter() (the schedule before the knob)
 *   1: deep ring (xf_deep) + early weight requests (before cu_pdl_enter() for dense
 *      launches, before the warp sums for a block's next row group)
 *   2: 1 + L2 prefetch of a block's next row group
 *   3: 1 + L2 prefetch two row groups ahead
 *   4: 2 without the deep ring
 *   5: 1 + L2 prefetch of all of a block's row groups (up to 8) at its start
 * Every variant sums each output in the same order (the same bits). */
struct xf_variant { int deep; xf_opts o; };
static int gemvf_v = -1;
extern "C" void cu_gemvf_set_variant(int v) { gemvf_v = v; }
static xf_variant gemvf_variant(void) {
    if (gemvf_v < 0) { const char *e = getenv("MINKE_CUDA_GEMVF_V"); gemvf_v = e && *e ? atoi(e) : 1; }
    xf_variant v;
    v.deep = gemvf_v >= 1 && gemvf_v != 4;
    v.o.early = gemvf_v >= 1;
    v.o.l2ahead = gemvf_v == 2 || gemvf_v == 4 ? 1 : gemvf_v == 3 ? 2 : gemvf_v == 5 ? 8 : 0;
    return v;
}

/* items a row in the deep ring: as many as the registers allow under the
 * 128 of two blocks an SM (Q8_0 items hold 9 words, IQ2_XXS 3); Q2_K (12
 * words) keeps 2, which is all of a row of the MoE down projection */
template <int TYPE, int RPW, int KS> constexpr int xf_deep() {
    return KS != 1 ? 2 : TYPE == CU_TYPE_Q8_0R ? (RPW <= 2 ? 4 : 2) : TYPE == CU_TYPE_IQ2R ? 4 : 2;
}

template <int TYPE, int NT, int RPW, int KS, int D>
static void launch_f(const cu_gemv_args &g, int nwarps, int ntiles, cudaStream_t st, xf_opts xo) {
    int64_t rpb = (int64_t)(nwarps / KS) * RPW;
    int gx = (int)((g.rows + rpb - 1) / rpb);
    size_t smem = (size_t)xf_grid_off<NT>(g.in, XW<TYPE>::MINS) * 16;
    if (xf_is_iq2(TYPE)) smem += 256 * 8 * 16;
    /* per instantiation, once per larger size: the opt-in for dynamic shared memory
     * (its default limit is 48 KB less the static part) */
    static size_t smem_set[32];     /* per device */
    const int dev = cu_cur_dev();
    if (smem > smem_set[dev]) {
        cudaFuncSetAttribute(k_gemvf<TYPE, NT, RPW, KS, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        smem_set[dev] = smem;
    }
    /* More row groups than blocks that fit on the GPU at once: each block takes
     * several (one activation staging and, for IQ2_XXS, one grid table for them
     * all, and no tail wave), when the activations fit in one chunk. Half the
     * MoE tiles of a launch are taken as empty (the grid is sized for the most). */
    if (g.in <= XChunk<NT>::K) {
        static size_t occ_smem[32];           /* per device (a host thread each) */
        static int occ_blocks[32], occ_threads[32];
        if (occ_smem[dev] != smem || occ_threads[dev] != nwarps * 32) {
            int nb = 0;
            if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k_gemvf<TYPE, NT, RPW, KS, D>, nwarps * 32, smem) != cudaSuccess)
                nb = 0;
            occ_smem[dev] = smem; occ_threads[dev] = nwarps * 32; occ_blocks[dev] = nb;
        }
        int64_t cap = (int64_t)occ_blocks[dev] * cu_num_sms();
        int64_t eff_tiles = g.tile_pairs ? (ntiles + 1) / 2 : ntiles;
        int64_t total = (int64_t)gx * (g.w2 ? 2 : 1) * (eff_tiles > 0 ? eff_tiles : 1);
        if (cap > 0 && total > cap) {
            int64_t loops = (total + cap - 1) / cap;
            if (loops > gemvf_max_loops()) loops = gemvf_max_loops();
            gx = (int)((gx + loops - 1) / loops);
        }
    }
    if (g.w2) gx *= 2;
    cu_launch(k_gemvf<TYPE, NT, RPW, KS, D>, dim3(gx, ntiles), dim3(nwarps * 32), smem, st, g, xo);
}

/* T = 1: the deep ring where the variant asks for it and the type has one */
template <int TYPE, int RPW, int KS>
static void launch_f1(const cu_gemv_args &g, int nwarps, int ntiles, cudaStream_t st) {
    const xf_variant v = gemvf_variant();
    constexpr int DD = xf_deep<TYPE, RPW, KS>();
    if (DD != 2 && v.deep) launch_f<TYPE, 1, RPW, KS, DD>(g, nwarps, ntiles, st, v.o);
    else launch_f<TYPE, 1, RPW, KS, 2>(g, nwarps, ntiles, st, v.o);
}

/* The shape of the launch: rows per warp (RPW) and the item split (KS) so
 * that enough blocks are in flight; with grouped input a block's rows must lie
 * in one group (fewer rows per block, at worst one warp of one row). */
template <int TYPE>
static void launch_type_f(const cu_gemv_args &g, int ntiles, cudaStream_t st) {
    const int64_t gr = g.group_rows;
    const int64_t want = 4 * (int64_t)cu_num_sms();    /* 2 rows a warp from 1.5 blocks an SM */
    const int pairs = g.w2 ? 2 : 1;
    auto blocks = [&](int64_t rpb) { return (g.rows + rpb - 1) / rpb * pairs * ntiles; };
    auto fits = [&](int64_t rpb) { return !gr || gr % rpb == 0; };
    /* 4 rows a warp where a row's item state is small (K-quants and MXFP4 would spill) */
    constexpr int R4 = xf_is_iq2(TYPE) || TYPE == CU_TYPE_Q8_0R || TYPE == CU_TYPE_Q8_0 ? 4 : 2;
    const xf_opts o0 = {0, 0};
    if (g.nt_hint <= 1) {
        if (R4 == 4 && fits(32) && blocks(32) >= want) { launch_f1<TYPE, R4, 1>(g, 8, ntiles, st); return; }
        if (fits(16) && blocks(16) >= want * 3 / 8) { launch_f1<TYPE, 2, 1>(g, 8, ntiles, st); return; }
        if (fits(2) && blocks(8) < want / 2 && g.items >= 128) { launch_f1<TYPE, 1, 4>(g, 8, ntiles, st); return; }
        if (fits(8)) { launch_f1<TYPE, 1, 1>(g, 8, ntiles, st); return; }
        launch_f1<TYPE, 1, 1>(g, 1, ntiles, st);
    } else if (g.nt_hint <= 4) {
        if (fits(16)) launch_f<TYPE, 4, 2, 1, 2>(g, 8, ntiles, st, o0);
        else if (fits(8)) launch_f<TYPE, 4, 1, 1, 2>(g, 8, ntiles, st, o0);
        else launch_f<TYPE, 4, 1, 1, 2>(g, 1, ntiles, st, o0);
    } else {
        launch_f<TYPE, 8, 1, 1, 2>(g, fits(8) ? 8 : 1, ntiles, st, o0);
    }
}

int cu_gemv_items(int type, int64_t in) {
    switch (type) {
    case CU_TYPE_F32: return (int)(in / 4);
    case CU_TYPE_F16: case CU_TYPE_BF16: return (int)(in / 8);
    default: return (int)(in / 32);
    }
}

int cu_act_type(int wtype) {
    switch (wtype) {
    case CU_TYPE_Q8_0: case CU_TYPE_Q8_0R: case CU_TYPE_MXFP4: return CU_TYPE_Q8_0_F32;
    case CU_TYPE_Q2_K: case CU_TYPE_Q4_K: case CU_TYPE_IQ2_XXS: case CU_TYPE_IQ2R: return CU_TYPE_Q8_K;
    default: return CU_TYPE_F32;
    }
}

int64_t cu_act_row_bytes(int atype, int64_t n) {
    if (atype == CU_TYPE_Q8_0_F32) return n / 32 * 36;
    if (atype == CU_TYPE_Q8_K) return n / 256 * 292;
    return n * 4;
}

int cu_gemv_supported(int type) {
    switch (type) {
    case CU_TYPE_F32: case CU_TYPE_F16: case CU_TYPE_BF16: case CU_TYPE_Q8_0:
    case CU_TYPE_Q2_K: case CU_TYPE_Q4_K: case CU_TYPE_IQ2_XXS: case CU_TYPE_MXFP4: return 1;
    default: return 0;
    }
}

void cu_gemv(const cu_gemv_args *ga, int ntiles, cudaStream_t st) {
    cu_gemv_args g = *ga;
    g.items = cu_gemv_items(g.wtype, g.in);
    if (g.nt_hint > 8) g.nt_hint = 8;     /* callers size the grid for tiles of 1, 4 or 8 */
    if (g.act_div <= 0) g.act_div = 1;
    if (g.act_f32) {
        if (cu_gemvq8(&g, st)) return;    /* dense Q8_0 of one token on the tensor cores (cu_gemvq8.cu) */
        if (cu_gemv3(&g, st)) return;     /* dense Q8_0 of one token on dp4a (cu_gemv3.cu) */
        switch (g.wtype) {
        case CU_TYPE_Q8_0: launch_type_f<CU_TYPE_Q8_0>(g, ntiles, st); return;
        case CU_TYPE_Q8_0R: launch_type_f<CU_TYPE_Q8_0R>(g, ntiles, st); return;
        case CU_TYPE_MXFP4: launch_type_f<CU_TYPE_MXFP4>(g, ntiles, st); return;
        case CU_TYPE_Q2_K: launch_type_f<CU_TYPE_Q2_K>(g, ntiles, st); return;
        case CU_TYPE_Q4_K: launch_type_f<CU_TYPE_Q4_K>(g, ntiles, st); return;
        case CU_TYPE_IQ2_XXS: launch_type_f<CU_TYPE_IQ2_XXS>(g, ntiles, st); return;
        case CU_TYPE_IQ2R: launch_type_f<CU_TYPE_IQ2R>(g, ntiles, st); return;
        default: break;     /* plain floats: the kernel below already takes f32 rows */
        }
    }
    switch (g.wtype) {
    case CU_TYPE_Q8_0: launch_type<CU_TYPE_Q8_0>(g, ntiles, st); break;
    case CU_TYPE_Q8_0R: launch_type<CU_TYPE_Q8_0R>(g, ntiles, st); break;
    case CU_TYPE_MXFP4: launch_type<CU_TYPE_MXFP4>(g, ntiles, st); break;
    case CU_TYPE_Q2_K: launch_type<CU_TYPE_Q2_K>(g, ntiles, st); break;
    case CU_TYPE_Q4_K: launch_type<CU_TYPE_Q4_K>(g, ntiles, st); break;
    case CU_TYPE_IQ2_XXS: launch_type<CU_TYPE_IQ2_XXS>(g, ntiles, st); break;
    case CU_TYPE_IQ2R: launch_type<CU_TYPE_IQ2R>(g, ntiles, st); break;
    /* F16 / BF16, one row a tile: cu_gemvh.cu where it applies. F32 weights
     * (reference models only) keep this file's kernel: with cu_gemvh's order
     * the tiny F32 model's FP8 simulation rounded one decode value the other
     * way from the CPU (make test-cuda, tiny-f32-simson-decode: 0.14 of max|logit|) */
    case CU_TYPE_F16: if (!cu_gemvh(&g, ntiles, st)) launch_type<CU_TYPE_F16>(g, ntiles, st); break;
    case CU_TYPE_BF16: if (!cu_gemvh(&g, ntiles, st)) launch_type<CU_TYPE_BF16>(g, ntiles, st); break;
    default: launch_type<CU_TYPE_F32>(g, ntiles, st); break;
    }
}

void cu_quantize_act(int atype, const float *x, void *out, int64_t nrows, int64_t n, cudaStream_t st) {
    if (atype == CU_TYPE_Q8_0_F32) {
        int64_t nb = nrows * n / 32;
        cu_launch(k_quant_q8_0f, (unsigned)((nb + 7) / 8), 256, 0, st, x, (cu_block_q8_0f *)out, nb);
    } else if (atype == CU_TYPE_Q8_K) {
        int64_t nb = nrows * n / 256;
        cu_launch(k_quant_q8_K, (unsigned)((nb + 7) / 8), 256, 0, st, x, (cu_block_q8_K *)out, nb);
    }
}

/* k_gemvf requests dense weights before its cu_pdl_enter(), so it may run
 * while the kernel launched just before it still runs (never a kernel two
 * launches back: that one completed before its successor's wait returned).
 * The repacks write weights: an empty launch after them keeps any GEMV at
 * least two launches away. */
__global__ void k_pdl_fence(int unused) { cu_pdl_enter(); }

/* Repacks on upload: a row of nb blocks of (f16 scale + `payload` code bytes)
 * becomes the nb payloads, then the nb scales, so the codes stay aligned
 * (Q8_0 -> Q8_0R: 32-byte payloads; IQ2_XXS -> IQ2R: 64-byte payloads). One
 * block per row. */
__global__ void k_repack_rows(const uint8_t *src, uint8_t *dst, int nb, int payload, uint64_t row_bytes) {
    cu_pdl_enter();
    const uint8_t *s = src + blockIdx.x * row_bytes;
    uint8_t *d = dst + blockIdx.x * row_bytes;
    int bsz = payload + 2;
    for (int i = threadIdx.x; i < nb * payload; i += blockDim.x) d[i] = s[(i / payload) * bsz + 2 + (i % payload)];
    for (int b = threadIdx.x; b < nb; b += blockDim.x) ((uint16_t *)(d + nb * payload))[b] = *(const uint16_t *)(s + b * bsz);
}
static int repack_rows(void *data, int64_t rows, int nb, int payload, uint64_t row_bytes, cudaStream_t st) {
    void *tmp = NULL;
    if (cudaMallocAsync(&tmp, rows * row_bytes, st) != cudaSuccess) return 0;
    cudaMemcpyAsync(tmp, data, rows * row_bytes, cudaMemcpyDeviceToDevice, st);
    cu_launch(k_repack_rows, (unsigned)rows, 256, 0, st, (const uint8_t *)tmp, (uint8_t *)data, nb, payload, row_bytes);
    cu_launch(k_pdl_fence, 1, 32, 0, st, 0);
    cudaFreeAsync(tmp, st);
    return 1;
}
int cu_repack_q8_0(void *data, int64_t rows, int64_t in, uint64_t row_bytes, cudaStream_t st) {
    int nb = (int)(in / 32);
    if (nb % 8 || row_bytes != (uint64_t)nb * 34) return 0;     /* rows must stay 16-byte aligned */
    return repack_rows(data, rows, nb, 32, row_bytes, st);
}
int cu_repack_iq2_xxs(void *data, int64_t rows, int64_t in, uint64_t row_bytes, cudaStream_t st) {
    int nb = (int)(in / 256);
    if (row_bytes % 8 || row_bytes != (uint64_t)nb * 66) return 0;   /* rows must stay 8-byte aligned */
    return repack_rows(data, rows, nb, 64, row_bytes, st);
}

/* The tables read back through src/quant's public decoders, so the data lives
 * in one place: the IQ2_XXS grid from one group of scale nibble 3 (dg = 0.875
 * d), d = 1, grid index k in slot 0, no signs; the sign bytes with their
 * parity bit; the MXFP4 values x 2 (scale byte 128 = 2^0 in the half-scale
 * convention). -2 when there is no IQ2_XXS decoder. */
int cu_tables_init_from_quant(void) {
    uint64_t grid[256]; uint8_t signs[128]; int8_t kv[16];
    const quant_traits *iq = quant_get(GGML_TYPE_IQ2_XXS), *mx = quant_get(GGML_TYPE_MXFP4);
    if (!iq) return -2;
    for (int k = 0; k < 256; k++) {
        uint8_t blk[66] = {0}; float out[256];
        blk[1] = 0x3C;                   /* f16 1.0 */
        blk[2] = (uint8_t)k;
        blk[2 + 7] = 0x30;               /* t = 3 in bits 28..31 */
        iq->dequant(blk, out, 256);
        uint64_t v = 0;
        for (int j = 0; j < 8; j++) v |= (uint64_t)(uint8_t)lrintf(out[j] / 0.875f) << (8 * j);
        grid[k] = v;
    }
    for (int i = 0; i < 128; i++) signs[i] = (uint8_t)(i | ((__builtin_popcount(i) & 1) << 7));
    for (int i = 0; i < 16; i++) {
        kv[i] = 0;
        if (mx) {
            uint8_t blk[17] = {0}; float out[32];
            blk[0] = 128; blk[1] = (uint8_t)i;
            mx->dequant(blk, out, 32);
            kv[i] = (int8_t)lrintf(out[0]);
        }
    }
    return cu_tables_init(grid, signs, kv);
}

int cu_tables_init(const uint64_t *grid, const uint8_t *signs, const int8_t *kvalues) {
    if (cudaMemcpyToSymbol(cu_iq2xxs_grid, grid, sizeof(uint64_t) * 256) != cudaSuccess) return -1;
    if (cudaMemcpyToSymbol(cu_ksigns_iq2xs, signs, 128) != cudaSuccess) return -1;
    if (cudaMemcpyToSymbol(cu_mxfp4_kvalues, kvalues, 16) != cudaSuccess) return -1;
    if (cu_gemv3_tables_init(grid) || cu_mmx_tables_init(grid)) return -1;
    return cu_mmq_tables_init(grid);
}
