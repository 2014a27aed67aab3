/* cu_mmx.cu: the routed experts' prefill products (IQ2_XXS gate / up as
 * repacked on the device, Q2_K down) with exact activations, on the f16
 * tensor cores with one fold per 256-element super-block.
 *
 * Why not the int8 kernels (cu_mmq.cu): those meet the activations as int8
 * pieces with a scale per 32-element item and turn every item's integer dots
 * into floats, scaled and summed on the CUDA cores; that fold, not the tensor
 * cores, sets their speed (the sixth session's ncu: 56% of the instructions
 * float, 8% IMMA). Here the weights carry their small integer factors into
 * f16, the activations are two f16 pieces per element, and only the
 * super-block's f16 scale is applied outside the tensor cores:
 *   - IQ2_XXS: w = d (2 ls + 1) g / 8 with g a signed grid byte (|g| <= 43)
 *     and ls the group's 4-bit scale: (2 ls + 1) g (|.| <= 1333) is an exact
 *     f16 integer, d / 8 the super-block's factor (the 1/8 a power of two);
 *   - Q2_K: w = d sc_j q - dmin m_j with q in 0..3 and the 4-bit sub-block
 *     scale sc_j, min m_j: sc_j q (<= 45) is an exact f16 integer, and the min
 *     term is dmin times sum_j m_j S_j, S_j the activation's sum over
 *     sub-block j: one more product per super-block (16 values of m_j against
 *     16 sums) at 1/16 of the work;
 *   - an activation row scaled by 2^e (its amax into [2^14, 2^15)) is
 *     xh + xl, xh = f16(x 2^e), xl = f16(x 2^e - xh): ~22 bits of each
 *     element (cu_mmh.cu, cu_mmf16.cu do the same), and the sub-block sums
 *     likewise (scaled by 2^-5 more to stay inside f16's range);
 *   - a super-block's products W.xh + W.xl sum on the tensor cores (every
 *     f16 x f16 product is exact in f32; the additions keep about f32's
 *     precision, truncating), then y += d acc (Q2_K: y += d acc - 32 dmin
 *     acc_min), and y 2^-e is the output.
 * The result is the f32 product of the dequantized weights and the f32
 * activations to ~1e-6 of max|W x| (mmx_check; the int8 pieces, whose item
 * sums are exact integers, reach 1.5e-7).
 *
 * Work layout: a block of 8 warps computes 128 weight rows x 64 pairs (one MoE
 * tile of CU_MMQ_TILE (token, expert) pairs), each warp 32 x 32 with
 * m16n8k16 mma.sync; stages of 64 elements, double-buffered: the next stage's
 * activation pieces go to shared memory by cp.async and its raw weights to
 * registers before the current stage's products, and are decoded to f16 in
 * shared memory after them; one barrier a stage.
 *
 * The activations are split by their own launch (cu_mmx_split) into rows of
 * cu_mmx_split_row_bytes: the exponent e (an int, 16 bytes with padding), n
 * halves xh, n halves xl, and for Q2_K n/16 halves of sums' high pieces and
 * n/16 of their low pieces.
 *
 * The block layouts: mma.sync (layouts 1-5, below) everywhere, and on sm_90a the wgmma
 * kernels that take the weights from registers: 6, 7 and 8 (k_mmx_wg) and 9 (k_mmx_wg2, the
 * IQ2 products' default there; the Q2_K down runs 6 under it), and 11 and 12 (k_mmx_ws2: 9's
 * work warp-specialised, the weights decoded into shared memory by a producer warpgroup; 12 with
 * the consumers copying the activations). Measured (H200, Flash's
 * shapes: 4096 tokens x 6 of 256 experts): the IQ2 gate (2048 x 4096) 4.27 ms (layout 1), 3.96
 * (6), 3.16 (9) against the int8 path's 5.16; the Q2_K down (4096 x 2048) 6.0 (1), 4.30 (6)
 * against 5.7: layout 1 leaves it to the int8 path.
 * ncu of layout 1's gate: L1 / shared memory 75% busy, the tensor pipe 40%: each
 * warp's 32 x 32 tile reads 192 bytes of fragments from shared memory a
 * product (the two activation pieces double B's), and the IQ2 grid lookups
 * meet 3.8-way bank conflicts; wider warp tiles (R = 64, mx_tile) read a
 * third less but measured slower (4.40-4.66 ms for the gate).
 *
 * On by default for the IQ2 gate / up in MoE tiles with exact activations in
 * prompts of >= 256 tokens, and for the Q2_K down where layout 6 runs (MINKE_CUDA_MMX=0: the
 * int8 kernels; MINKE_CUDA_MMX_Q2K=1 / 0: the Q2_K down on / off; MINKE_CUDA_MMX_MIN=tokens);
 * the backend's mmq_exact takes it first. mmx_check compares with a double
 * reference and times it against the int8 path.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_fp16.h>

#include "cuda/cu_bulk.cuh"
#include "cuda/cu_common.cuh"
#include "cuda/cu_gemv3.h"
#include "cuda/cu_ops.h"
#include "cuda/cu_wgmma.cuh"

#define MX_BN 64                  /* pairs a block: one MoE tile */
#define MX_BK 64                  /* elements a stage */
#define MX_LD 72                  /* halves a shared row: 64 + 8 spread ldmatrix's rows over the banks */
#define MX_LDM 24                 /* halves a shared row of the 16 Q2_K mins / sums */
#define MX_TAB_BYTES (256 * 16 + 128 * 16)   /* layouts 11 and 12's IQ2 decode tables (mx_tabs_init) */
static_assert(CU_MMQ_TILE == MX_BN, "a block is one MoE tile");

/* this file's copy of the IQ2_XXS grid (cu_mmx_tables_init) */
__device__ uint64_t cu_mmx_grid[256];
/* timing ablations (MINKE_CUDA_MMX_ABL, results then wrong: for measurements only): layout
 * 12: 1 no A decode, 2 no fold, 4 no B copies; layouts 9, 11 and 12 (mx_pair_tile): 8 the
 * lone tiles' blocks return, 16 the tile pairs' blocks return */
__device__ int cu_mmx_abl;

/* shared memory, in bytes from the start (BM weight rows a block) */
template <bool Q2K, int BM, int NS>
struct mx_smem {
    static constexpr int a = 0;                                   /* [2][BM][LD] halves: weights */
    static constexpr int b = a + 2 * BM * MX_LD * 2;              /* [NS][2 pieces][BN][LD] halves */
    static constexpr int d = b + NS * 2 * MX_BN * MX_LD * 2;      /* [2][BM] floats: d (IQ2: d / 8) per super-block parity */
    static constexpr int dm = d + 2 * BM * 4;                     /* Q2_K: [2][BM] floats dmin */
    static constexpr int am = dm + (Q2K ? 2 * BM * 4 : 0);        /* Q2_K: [2][BM][LDM] halves m_j */
    static constexpr int bm = am + (Q2K ? 2 * BM * MX_LDM * 2 : 0);      /* Q2_K: [2][2][BN][LDM] sums */
    static constexpr int grid = bm + (Q2K ? 2 * 2 * MX_BN * MX_LDM * 2 : 0);  /* IQ2: 256 grid entries */
    static constexpr int off = grid + (Q2K ? 0 : 256 * 8);        /* [BN] int64: activation row offsets */
    static constexpr int sid = off + MX_BN * 8;                   /* [BN] ints: pair ids */
    static constexpr int se = sid + MX_BN * 4;                    /* [BN] ints: the rows' exponents */
    static constexpr int bytes = se + MX_BN * 4;
};

__device__ __forceinline__ void mx_mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mx_ldsm4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void mx_cp16(unsigned dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

/* Four bytes c' (0..255: the caller has added a bias to signed values, x ^ 0x80 adds 128)
 * times an integer factor f as two f16 pairs, exactly: a byte becomes the half 1024 + c'
 * (the bits 0x64 c'), and fma(1024 + c', f, off) with off = -(1024 + bias) f rounds the
 * exact product c f once: an integer below 2048 in magnitude, so it is exact. */
__device__ __forceinline__ void mx_bytes_f16(uint32_t u, __half2 f, __half2 off, uint32_t &lo, uint32_t &hi) {
    uint32_t p0 = __byte_perm(u, 0x64u, 0x4140), p1 = __byte_perm(u, 0x64u, 0x4342);
    __half2 h0 = __hfma2(*(__half2 *)&p0, f, off), h1 = __hfma2(*(__half2 *)&p1, f, off);
    lo = *(uint32_t *)&h0;
    hi = *(uint32_t *)&h1;
}

/* One IQ2_XXS group (a: 4 grid indices, w: 4 x 7 sign bits under the 4-bit scale ls) as 32
 * exact f16 integers (2 ls + 1) g, in 16 words of two halves */
__device__ __forceinline__ void mx_iq2_group(uint32_t a, uint32_t w, const uint64_t *grid, uint32_t (&o)[16]) {
    int q[8];
    cu_iq2_group_codes(a, w, grid, q);
    const float f = (float)(2 * (w >> 28) + 1);
    const __half2 f2 = __float2half2_rn(f), off2 = __float2half2_rn(-1152.f * f);
#pragma unroll
    for (int k = 0; k < 8; k++) mx_bytes_f16((uint32_t)q[k] ^ 0x80808080u, f2, off2, o[2 * k], o[2 * k + 1]);
}
/* 32 halves to shared memory (16-byte aligned) */
__device__ __forceinline__ void mx_st32h(uint8_t *p, const uint32_t (&o)[16]) {
    uint4 *dst = (uint4 *)p;
    dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
    dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
    dst[2] = make_uint4(o[8], o[9], o[10], o[11]);
    dst[3] = make_uint4(o[12], o[13], o[14], o[15]);
}

/* One k16 step of a warp's MI x 16 rows x 32 pairs: both pieces' B fragments, then each row
 * group's A fragment and its 8 products. sa: the stage's A at this lane's ldmatrix row, sb0 /
 * sb1: the stage's pieces at this lane's row (LD halves a row). */
template <int MI, int LD>
__device__ __forceinline__ void mx_kk(float (&acc)[MI][4][4], unsigned sa, unsigned sb0, unsigned sb1, int kk) {
    unsigned bf[2][2][4];
#pragma unroll
    for (int nj = 0; nj < 2; nj++) mx_ldsm4(bf[0][nj], sb0 + (unsigned)((nj * 16 * LD + kk * 16) * 2));
#pragma unroll
    for (int nj = 0; nj < 2; nj++) mx_ldsm4(bf[1][nj], sb1 + (unsigned)((nj * 16 * LD + kk * 16) * 2));
#pragma unroll
    for (int mi = 0; mi < MI; mi++) {
        unsigned af[4];
        mx_ldsm4(af, sa + (unsigned)((mi * 16 * LD + kk * 16) * 2));
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int p = 0; p < 2; p++)
                mx_mma(acc[mi][ni], af, bf[p][ni >> 1][(ni & 1) * 2], bf[p][ni >> 1][(ni & 1) * 2 + 1]);
    }
}

/* The super-block's fold y += d acc, acc = 0; d: the scales of the warp's rows, this lane's
 * first (row wm + gq) */
template <int MI>
__device__ __forceinline__ void mx_fold(float (&y)[MI][4][4], float (&acc)[MI][4][4], const float *d) {
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const float dv = d[mi * 16 + 8 * hr];
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                y[mi][ni][2 * hr] = fmaf(dv, acc[mi][ni][2 * hr], y[mi][ni][2 * hr]);
                y[mi][ni][2 * hr + 1] = fmaf(dv, acc[mi][ni][2 * hr + 1], y[mi][ni][2 * hr + 1]);
                acc[mi][ni][2 * hr] = 0.f;
                acc[mi][ni][2 * hr + 1] = 0.f;
            }
        }
}

/* An IQ2 weight row's group of item it (a: 4 grid indices, w: signs and scale) and the f16 d
 * of its super-block blk, from the repacked rows (groups, then the nsb scales) or as stored
 * (66-byte blocks) */
template <int TYPE>
__device__ __forceinline__ void mx_iq2_raw(const uint8_t *row, int it, uint32_t &a, uint32_t &w) {
    if constexpr (TYPE == CU_TYPE_IQ2R) {
        const uint2 v = *(const uint2 *)(row + (int64_t)(it >> 3) * 64 + (it & 7) * 8);
        a = v.x; w = v.y;
    } else {
        const uint16_t *q = (const uint16_t *)(row + (int64_t)(it >> 3) * 66) + 1 + 4 * (it & 7);
        a = (uint32_t)q[0] | ((uint32_t)q[1] << 16);
        w = (uint32_t)q[2] | ((uint32_t)q[3] << 16);
    }
}
template <int TYPE>
__device__ __forceinline__ uint32_t mx_iq2_d(const uint8_t *row, int blk, int nsb) {
    if constexpr (TYPE == CU_TYPE_IQ2R) return *(const uint16_t *)(row + (int64_t)nsb * 64 + blk * 2);
    else return *(const uint16_t *)(row + (int64_t)blk * 66);
}

/* this lane's ldmatrix addresses (bytes from a stage's start, LD halves a row): weights (row
 * wm + lane % 16, column 8 (lane / 16)), pieces (pair wn + 8 (lane / 16) + lane % 8, column
 * 8 ((lane / 8) % 2)) */
template <int LD>
__device__ __forceinline__ unsigned mx_lane_a(int wm, int lane) { return (unsigned)(((wm + (lane & 15)) * LD + (lane >> 4) * 8) * 2); }
template <int LD>
__device__ __forceinline__ unsigned mx_lane_b(int wn, int lane) {
    return (unsigned)(((wn + (lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8) * 2);
}

template <int MI>
__device__ __forceinline__ void mx_zero(float (&y)[MI][4][4], float (&acc)[MI][4][4]) {
#pragma unroll
    for (int a = 0; a < MI; a++)
#pragma unroll
        for (int b = 0; b < 4; b++)
#pragma unroll
            for (int c = 0; c < 4; c++) { y[a][b][c] = 0.f; acc[a][b][c] = 0.f; }
}

/* A tile's pairs (bn of them from start, padded with the first past nt), their activation
 * rows' offsets and exponents, by the block's nthr threads */
__device__ __forceinline__ void mx_tile_rows(const cu_gemv_args &g, int start, int nt, int tid, int nthr, int *sid,
                                             int64_t *soff, int *se, int bn = MX_BN) {
    for (int k = tid; k < bn; k += nthr) {
        const int p = g.tile_pairs[start + (k < nt ? k : 0)];
        sid[k] = p;
        const int64_t o = (int64_t)(p / g.act_div) * g.act_stride;
        soff[k] = o;
        se[k] = *(const int *)((const uint8_t *)g.act + o);
    }
}

/* The warp's outputs: y 2^-e of each pair's activation row, rows r0 + wm .. of the pairs
 * wn .. below nt */
template <int MI>
__device__ __forceinline__ void mx_store(const cu_gemv_args &g, const float (&y)[MI][4][4], const int *sid, const int *se,
                                         int nt, int64_t r0, int wm, int wn, int lane) {
    const int gq = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int ni = 0; ni < 4; ni++)
#pragma unroll
        for (int cc = 0; cc < 2; cc++) {
            const int col = wn + ni * 8 + 2 * tq + cc;
            if (col >= nt) continue;
            const int e = se[col];
            float *out = g.out + (int64_t)sid[col] * g.out_stride;
#pragma unroll
            for (int mi = 0; mi < MI; mi++)
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    const int64_t row = r0 + wm + mi * 16 + gq + 8 * hr;
                    if (row >= g.rows) continue;
                    const float v = ldexpf(y[mi][ni][2 * hr + cc], -e);
                    if (g.accumulate) out[row] += v; else out[row] = v;
                }
        }
}

/* two scaled elements as their high f16 pieces (one word) and low pieces (another); a row with
 * an Inf keeps e = 0: its Inf stays in xh, xl 0 (not Inf - Inf) */
__device__ __forceinline__ void mx_split2(float v0, float v1, uint32_t &hw, uint32_t &lw) {
    const __half a = __float2half_rn(v0), b = __float2half_rn(v1);
    const __half c = __float2half_rn(isfinite(v0) ? v0 - __half2float(a) : 0.f);
    const __half d = __float2half_rn(isfinite(v1) ? v1 - __half2float(b) : 0.f);
    const __half2 h = __halves2half2(a, b), l = __halves2half2(c, d);
    hw = *(const uint32_t *)&h;
    lw = *(const uint32_t *)&l;
}

/* GLU (cu_mmx_split_glu): the row is the routed experts' SwiGLU of pair r, made here from
 * the gate and up rows as k_swiglu4 makes it (cu_swiglu1, then the router weight), once by
 * all 256 threads into shared memory (the split's loops have n / 32 active threads: made
 * there, the 4096-token prompt was 1.2% slower), so the down's split needs no mid rows (one
 * launch and a write and read of P x F floats less). */
struct mx_glu { const float *u, *w; float limit; };
template <bool GLU>
__device__ __forceinline__ float4 mx_row4(const float *xr, const float *ur, float wr, float limit, int64_t i) {
    const float4 g = *(const float4 *)(xr + i);
    if (!GLU) return g;
    const float4 u = *(const float4 *)(ur + i);
    float4 v = make_float4(cu_swiglu1(g.x, u.x, limit), cu_swiglu1(g.y, u.y, limit), cu_swiglu1(g.z, u.z, limit),
                           cu_swiglu1(g.w, u.w, limit));
    v.x *= wr; v.y *= wr; v.z *= wr; v.w *= wr;
    return v;
}

/* Rows in cu_mmx_split_row_bytes format; see the header comment. One block of 256
 * threads a row, 16 elements (one Q2_K sub-block) a thread at a time. */
template <bool Q2K, bool PERM, bool GLU>
__global__ void __launch_bounds__(256) k_mmx_split(const float *x, int64_t nrows, int64_t n, int64_t xstride, uint8_t *out,
                                                    int64_t ostride, mx_glu glu) {
    cu_pdl_enter();
    __shared__ float red[33];
    const int64_t r = blockIdx.x;
    const float *xr = (const float *)((const uint8_t *)x + r * xstride);
    const float *ur = GLU ? (const float *)((const uint8_t *)glu.u + r * xstride) : nullptr;
    const float wr = GLU && glu.w ? glu.w[r] : 1.f;
    uint8_t *o = out + r * ostride;
    /* GLU: the row's SwiGLU values, made once by all threads, for the split below */
    extern __shared__ float4 mx_glu_row[];
    float m = 0.f;
    for (int64_t i = threadIdx.x * 4; i < n; i += 256 * 4) {
        float4 v = mx_row4<GLU>(xr, ur, wr, glu.limit, i);
        if (GLU) mx_glu_row[i / 4] = v;
        m = fmaxf(m, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
        if (v.x != v.x || v.y != v.y || v.z != v.z || v.w != v.w) m = INFINITY;
    }
    if (GLU) {
        __syncthreads();
        xr = (const float *)mx_glu_row;     /* the split reads the values from shared memory */
    }
    m = block_max(m, red);
    int e = 0;
    if (m > 0.f && m < INFINITY) {
        int ex;
        frexpf(m, &ex);          /* m in [2^(ex-1), 2^ex): m 2^(15-ex) in [2^14, 2^15) */
        e = 15 - ex;
    }
    /* 2^e in two factors: e reaches 163 for the smallest subnormal amax */
    const float s1 = ldexpf(1.f, e / 2), s2 = ldexpf(1.f, e - e / 2);
    if (threadIdx.x == 0) *(int *)o = e;
    __half *xh = (__half *)(o + 16), *xl = xh + n;
    __half *sh = xl + n, *sl = sh + n / 16;
    if constexpr (PERM) {
        /* k_mmx_wg's order: in each 32-element group, the element pair Q = 4 c + 2 h + u goes
         * to the pair slot 8 h + 4 u + c (see there) */
        for (int64_t j = threadIdx.x; j < n / 32; j += 256) {
            float v[32];
#pragma unroll
            for (int q = 0; q < 8; q++) {
                const float4 f = *(const float4 *)(xr + 32 * j + 4 * q);
                v[4 * q] = f.x * s1 * s2; v[4 * q + 1] = f.y * s1 * s2; v[4 * q + 2] = f.z * s1 * s2; v[4 * q + 3] = f.w * s1 * s2;
            }
            uint32_t hw[16], lw[16];
#pragma unroll
            for (int q = 0; q < 16; q++) mx_split2(v[2 * q], v[2 * q + 1], hw[q], lw[q]);
            if (Q2K) {
                /* the two sub-blocks' sums, in the unpermuted loop's order */
#pragma unroll
                for (int b = 0; b < 2; b++) {
                    float sum = 0.f;
#pragma unroll
                    for (int q = 0; q < 16; q++) sum += v[16 * b + q];
                    sum *= 0.03125f;
                    const __half a = __float2half_rn(sum);
                    sh[2 * j + b] = a;
                    sl[2 * j + b] = __float2half_rn(sum - __half2float(a));
                }
            }
            uint32_t ph[16], pl[16];
#pragma unroll
            for (int P = 0; P < 16; P++) {
                const int Q = 4 * (P & 3) + 2 * (P >> 3) + ((P >> 2) & 1);
                ph[P] = hw[Q];
                pl[P] = lw[Q];
            }
            uint4 *dh = (uint4 *)(xh + 32 * j), *dl = (uint4 *)(xl + 32 * j);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                dh[q] = make_uint4(ph[4 * q], ph[4 * q + 1], ph[4 * q + 2], ph[4 * q + 3]);
                dl[q] = make_uint4(pl[4 * q], pl[4 * q + 1], pl[4 * q + 2], pl[4 * q + 3]);
            }
        }
    } else {
        for (int64_t j = threadIdx.x; j < n / 16; j += 256) {
            float v[16];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float4 f = *(const float4 *)(xr + 16 * j + 4 * q);
                v[4 * q] = f.x * s1 * s2; v[4 * q + 1] = f.y * s1 * s2; v[4 * q + 2] = f.z * s1 * s2; v[4 * q + 3] = f.w * s1 * s2;
            }
            uint32_t hw[8], lw[8];
            float s = 0.f;
#pragma unroll
            for (int q = 0; q < 8; q++) {
                mx_split2(v[2 * q], v[2 * q + 1], hw[q], lw[q]);
                s += v[2 * q];
                s += v[2 * q + 1];
            }
            uint4 *dh = (uint4 *)(xh + 16 * j), *dl = (uint4 *)(xl + 16 * j);
            dh[0] = make_uint4(hw[0], hw[1], hw[2], hw[3]); dh[1] = make_uint4(hw[4], hw[5], hw[6], hw[7]);
            dl[0] = make_uint4(lw[0], lw[1], lw[2], lw[3]); dl[1] = make_uint4(lw[4], lw[5], lw[6], lw[7]);
            if (Q2K) {
                s *= 0.03125f;       /* 16 elements of < 2^15: the sum / 32 stays below f16's 65504 */
                __half a = __float2half_rn(s);
                sh[j] = a;
                sl[j] = __float2half_rn(s - __half2float(a));
            }
        }
    }
}

/* The products. TYPE: CU_TYPE_IQ2R (64-byte groups of 8 items, then the rows' f16 d per
 * super-block), CU_TYPE_IQ2_XXS (66-byte blocks as stored) or CU_TYPE_Q2_K; R: weight rows a
 * warp (32 or 64); MW x 2 warps, so BM = MW R rows a block (mx_tile). R = 64 reads 2/3 of the
 * fragments per product from shared memory (the limit of R = 32 under ncu: L1 75% busy, the
 * tensor pipe 40%) at ~190-250 registers. */
template <int TYPE, int R, int MW, int NS>
__global__ void __launch_bounds__(MW * 64, R == 32 || MW == 2 ? 2 : 1) k_mmx(cu_gemv_args g) {
    constexpr bool Q2K = TYPE == CU_TYPE_Q2_K;
    static_assert(NS == 2 || NS == 3, "stages of the activation ring");
    constexpr int THREADS = MW * 64, BM = MW * R, MI = R / 16;
    constexpr int NJ = 2 * BM / THREADS;     /* weight (row, item) jobs a thread and stage */
    static_assert(NJ >= 1 && 2 * BM % THREADS == 0, "jobs");
    using L = mx_smem<Q2K, BM, NS>;
    extern __shared__ __align__(16) uint8_t mx_sm[];
    cu_pdl_enter();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gq = lane >> 2;
    const int wm = (warp % MW) * R, wn = (warp / MW) * 32;
    const int64_t r0 = (int64_t)blockIdx.x * BM;
    const int tile = blockIdx.y;
    if (tile >= *g.n_tiles) return;
    const int start = g.tile_start[tile], nt = g.tile_count[tile];
    if (nt <= 0) return;                  /* an expert another GPU owns */
    const uint8_t *wbase = (const uint8_t *)g.w + (int64_t)g.tile_expert[tile] * g.expert_bytes;
    int64_t *soff = (int64_t *)(mx_sm + L::off);
    int *sid = (int *)(mx_sm + L::sid), *se = (int *)(mx_sm + L::se);
    float *sd = (float *)(mx_sm + L::d), *sdm = (float *)(mx_sm + L::dm);
    uint64_t *sgrid = (uint64_t *)(mx_sm + L::grid);
    const uint8_t *act = (const uint8_t *)g.act;
    const int64_t n = g.in;
    mx_tile_rows(g, start, nt, tid, THREADS, sid, soff, se);
    if (!Q2K)
        for (int i = tid; i < 256; i += THREADS) sgrid[i] = cu_mmx_grid[i];
    __syncthreads();

    const unsigned s_a = (unsigned)__cvta_generic_to_shared(mx_sm + L::a);
    const unsigned s_b = (unsigned)__cvta_generic_to_shared(mx_sm + L::b);
    const unsigned s_am = (unsigned)__cvta_generic_to_shared(mx_sm + L::am);
    const unsigned s_bm = (unsigned)__cvta_generic_to_shared(mx_sm + L::bm);
    /* staging roles: weight rows wr0 + (THREADS / 2) j, item half wi of the stage; activation
     * chunks tid + THREADS i */
    const int wr0 = tid >> 1, wi = tid & 1;
    const uint8_t *wrow[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int64_t r = r0 + wr0 + (THREADS / 2) * j;
        wrow[j] = wbase + (r < g.rows ? r : g.rows - 1) * (int64_t)g.row_bytes;
    }
    const int nsb = (int)(n / 256), nst = (int)(n / MX_BK);

    /* the activation pieces of stage s into buffer s % NS (and at a super-block's start, its
     * sums), one commit group a call; past the last stage an empty group, so that the waits
     * below count the same */
    auto stage_act = [&](int s) {
        if (NS > 2 && s >= nst) { asm volatile("cp.async.commit_group;\n" ::: "memory"); return; }
        const int buf = s % NS;
        const int64_t k0 = (int64_t)s * MX_BK;
#pragma unroll
        for (int i = 0; i < 1024 / THREADS; i++) {
            int c = tid + THREADS * i;
            int piece = c >> 9, pr = (c >> 3) & 63, part = c & 7;
            const uint8_t *src = act + soff[pr] + 16 + (piece * n + k0 + part * 8) * 2;
            unsigned dst = s_b + (unsigned)((((buf * 2 + piece) * MX_BN + pr) * MX_LD + part * 8) * 2);
            mx_cp16(dst, src);
        }
        if (Q2K && (s & 3) == 0) {
            const int sb = s >> 2, par = sb & 1;
#pragma unroll
            for (int i = 0; i < 256 / THREADS; i++) {
                const int c = tid + THREADS * i;
                int piece = c >> 7, pr = (c >> 1) & 63, part = c & 1;
                const uint8_t *src = act + soff[pr] + 16 + (4 * n + piece * (n / 16) * 2) + ((int64_t)sb * 16 + part * 8) * 2;
                unsigned dst = s_bm + (unsigned)((((par * 2 + piece) * MX_BN + pr) * MX_LDM + part * 8) * 2);
                mx_cp16(dst, src);
            }
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };

    /* raw weights of stage s: IQ2 one group (8 bytes: 4 grid indices, signs + scale) a job;
     * Q2_K one item's 32 code bytes and its two scale bytes */
    uint32_t raw[NJ][Q2K ? 8 : 2];
    uint32_t rsc[NJ];       /* Q2_K: the two scale bytes; IQ2: d at a super-block's start */
    uint32_t rsb[NJ][4];    /* Q2_K at a super-block's start: the 16 scale bytes (wi 0) or d, dmin (wi 1) */
    auto load_w = [&](int s) {
        const int it = s * 2 + wi;               /* item of 32 elements */
        const int blk = it >> 3;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            if constexpr (!Q2K) {
                mx_iq2_raw<TYPE>(wrow[j], it, raw[j][0], raw[j][1]);
                if ((s & 3) == 0) rsc[j] = mx_iq2_d<TYPE>(wrow[j], blk, nsb);
            } else {
                const uint8_t *b = wrow[j] + (int64_t)blk * 84;
                const uint32_t *qs = (const uint32_t *)(b + 16 + 32 * ((it >> 2) & 1));
#pragma unroll
                for (int k = 0; k < 8; k++) raw[j][k] = qs[k];
                rsc[j] = *(const uint16_t *)(b + 2 * (it & 7));
                if ((s & 3) == 0) {
                    if (wi == 0) {
                        const uint32_t *sc = (const uint32_t *)b;
                        rsb[j][0] = sc[0]; rsb[j][1] = sc[1]; rsb[j][2] = sc[2]; rsb[j][3] = sc[3];
                    } else {
                        rsb[j][0] = *(const uint32_t *)(b + 80);
                    }
                }
            }
        }
    };
    /* decode the raw weights of stage s into buffer s & 1 */
    auto decode_w = [&](int s) {
        const int buf = s & 1;
        const int it = s * 2 + wi;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const int wr = wr0 + (THREADS / 2) * j;
            uint32_t o[16];
            if constexpr (!Q2K) {
                mx_iq2_group(raw[j][0], raw[j][1], sgrid, o);
                if ((s & 3) == 0 && wi == 0) sd[((s >> 2) & 1) * BM + wr] = cu_h2f((uint16_t)rsc[j]) * 0.125f;
            } else {
                const int sh = 2 * (it & 3);
                const float f0 = (float)(rsc[j] & 15), f1 = (float)((rsc[j] >> 8) & 15);
                const __half2 a0 = __float2half2_rn(f0), b0 = __float2half2_rn(-1024.f * f0);
                const __half2 a1 = __float2half2_rn(f1), b1 = __float2half2_rn(-1024.f * f1);
#pragma unroll
                for (int k = 0; k < 8; k++)
                    mx_bytes_f16((raw[j][k] >> sh) & 0x03030303u, k < 4 ? a0 : a1, k < 4 ? b0 : b1, o[2 * k], o[2 * k + 1]);
                if ((s & 3) == 0) {
                    const int par = (s >> 2) & 1;
                    if (wi == 0) {
                        /* m_j = scales[j] >> 4 as 16 halves */
                        uint32_t m[8];
                        const __half2 one = __float2half2_rn(1.f), moff = __float2half2_rn(-1024.f);
#pragma unroll
                        for (int k = 0; k < 4; k++) mx_bytes_f16((rsb[j][k] >> 4) & 0x0F0F0F0Fu, one, moff, m[2 * k], m[2 * k + 1]);
                        uint4 *dst = (uint4 *)(mx_sm + L::am + (par * BM + wr) * MX_LDM * 2);
                        dst[0] = make_uint4(m[0], m[1], m[2], m[3]);
                        dst[1] = make_uint4(m[4], m[5], m[6], m[7]);
                    } else {
                        sd[par * BM + wr] = cu_h2f((uint16_t)(rsb[j][0] & 0xFFFF));
                        sdm[par * BM + wr] = cu_h2f((uint16_t)(rsb[j][0] >> 16));
                    }
                }
            }
            mx_st32h(mx_sm + L::a + ((buf * BM + wr) * MX_LD + wi * 32) * 2, o);
        }
    };

    float y[MI][4][4], acc[MI][4][4];
    mx_zero<MI>(y, acc);
    const unsigned la = mx_lane_a<MX_LD>(wm, lane), lb = mx_lane_b<MX_LD>(wn, lane);

    /* the activation ring runs NS - 1 stages ahead, the weights one (raw in registers during
     * the products, decoded after them) */
#pragma unroll
    for (int i = 0; i < NS - 1; i++) stage_act(i);
    load_w(0);
    decode_w(0);
    asm volatile("cp.async.wait_group %0;\n" ::"n"(NS - 2) : "memory");
    __syncthreads();

    for (int s = 0; s < nst; s++) {
        const int buf = s & 1, bbuf = NS == 2 ? buf : s % NS;
        if (NS > 2 || s + 1 < nst) stage_act(s + NS - 1);     /* NS 2: wait_group 0 needs no empty group */
        if (s + 1 < nst) load_w(s + 1);
#pragma unroll
        for (int kk = 0; kk < MX_BK / 16; kk++) {
            mx_kk<MI, MX_LD>(acc, s_a + (unsigned)(buf * BM * MX_LD * 2) + la, s_b + (unsigned)(bbuf * 2 * MX_BN * MX_LD * 2) + lb,
                             s_b + (unsigned)((bbuf * 2 + 1) * MX_BN * MX_LD * 2) + lb, kk);
            /* one block an SM (R = 64): the next stage's decode between the products, so that
             * the tensor pipe has work while it runs */
            if (R == 64 && kk == 1 && s + 1 < nst) decode_w(s + 1);
        }
        if ((s & 3) == 3) {
            /* the super-block's fold */
            const int par = (s >> 2) & 1;
            mx_fold<MI>(y, acc, sd + (par * BM + wm + gq));
            if constexpr (Q2K) {
                /* the min term: acc_min = sum_j m_j S_j (both pieces), y -= 32 dmin acc_min */
                const unsigned lam = mx_lane_a<MX_LDM>(wm, lane), lbm = mx_lane_b<MX_LDM>(wn, lane);
                unsigned bm[2][2][4];
#pragma unroll
                for (int p = 0; p < 2; p++)
#pragma unroll
                    for (int nj = 0; nj < 2; nj++)
                        mx_ldsm4(bm[p][nj], s_bm + (unsigned)((par * 2 + p) * MX_BN * MX_LDM * 2) + lbm +
                                                (unsigned)(nj * 16 * MX_LDM * 2));
#pragma unroll
                for (int mi = 0; mi < MI; mi++) {
                    unsigned am[4];
                    mx_ldsm4(am, s_am + (unsigned)(par * BM * MX_LDM * 2) + lam + (unsigned)(mi * 16 * MX_LDM * 2));
#pragma unroll
                    for (int ni = 0; ni < 4; ni++) {
                        float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                        for (int p = 0; p < 2; p++)
                            mx_mma(c, am, bm[p][ni >> 1][(ni & 1) * 2], bm[p][ni >> 1][(ni & 1) * 2 + 1]);
#pragma unroll
                        for (int hr = 0; hr < 2; hr++) {
                            const float dm = -32.f * sdm[par * BM + wm + mi * 16 + gq + 8 * hr];
                            y[mi][ni][2 * hr] = fmaf(dm, c[2 * hr], y[mi][ni][2 * hr]);
                            y[mi][ni][2 * hr + 1] = fmaf(dm, c[2 * hr + 1], y[mi][ni][2 * hr + 1]);
                        }
                    }
                }
            }
        }
        if (R == 32 && s + 1 < nst) decode_w(s + 1);
        asm volatile("cp.async.wait_group %0;\n" ::"n"(NS - 2) : "memory");
        __syncthreads();
    }

    mx_store<MI>(g, y, sid, se, nt, r0, wm, wn, lane);
}

/* ---- The warp-specialised variant (MINKE_CUDA_MMX_TILE=5, IQ2 only, sm_90) ----
 * The layouts above alternate within a block: decode, barrier, products (ncu: the tensor pipe
 * 40% busy, no unit saturated). Here MX_WS_PROD producer warps decode the weights and copy
 * the activation pieces into a ring of MX_WS_NS stages while MX_WS_CONS consumer warps (4 x 2
 * of 32 x 32, as layout 1) only multiply: stage slot b's full barrier completes when the
 * producers' 128 threads have written it (each after its own copies landed), its empty barrier
 * when the 8 consumer warps have read it. Every slot carries the d of its stage's super-block,
 * so the fold reads the slot it multiplied. Written after the thirteenth session's device
 * time: checked by mmx_check under the switch, not yet run or timed. */
#define MX_WS_NS 4
#define MX_WS_CONS 8
#define MX_WS_PROD 4
#define MX_WS_THREADS ((MX_WS_CONS + MX_WS_PROD) * 32)

struct mx_ws_smem {
    static constexpr int a = 0;                                    /* [NS][128][LD] halves: weights */
    static constexpr int b = a + MX_WS_NS * 128 * MX_LD * 2;       /* [NS][2 pieces][BN][LD] halves */
    static constexpr int d = b + MX_WS_NS * 2 * MX_BN * MX_LD * 2; /* [NS][128] floats: d / 8 */
    static constexpr int bar = d + MX_WS_NS * 128 * 4;             /* full[NS], empty[NS] */
    static constexpr int grid = bar + 2 * MX_WS_NS * 8;            /* 256 grid entries */
    static constexpr int off = grid + 256 * 8;                     /* [BN] int64: activation row offsets */
    static constexpr int sid = off + MX_BN * 8;                    /* [BN] ints: pair ids */
    static constexpr int se = sid + MX_BN * 4;                     /* [BN] ints: the rows' exponents */
    static constexpr int bytes = se + MX_BN * 4;
};

template <int TYPE>
__global__ void __launch_bounds__(MX_WS_THREADS, 1) k_mmx_ws(cu_gemv_args g) {
#if CU_BULK_ARCH
    static_assert(TYPE == CU_TYPE_IQ2R || TYPE == CU_TYPE_IQ2_XXS, "IQ2 only");
    using L = mx_ws_smem;
    extern __shared__ __align__(16) uint8_t mx_sm[];
    cu_pdl_enter();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t r0 = (int64_t)blockIdx.x * 128;
    const int tile = blockIdx.y;
    if (tile >= *g.n_tiles) return;
    const int start = g.tile_start[tile], nt = g.tile_count[tile];
    if (nt <= 0) return;
    const uint8_t *wbase = (const uint8_t *)g.w + (int64_t)g.tile_expert[tile] * g.expert_bytes;
    int64_t *soff = (int64_t *)(mx_sm + L::off);
    int *sid = (int *)(mx_sm + L::sid), *se = (int *)(mx_sm + L::se);
    float *sd = (float *)(mx_sm + L::d);
    uint64_t *sgrid = (uint64_t *)(mx_sm + L::grid);
    uint64_t *full = (uint64_t *)(mx_sm + L::bar), *empty = full + MX_WS_NS;
    const uint8_t *act = (const uint8_t *)g.act;
    const int64_t n = g.in;
    mx_tile_rows(g, start, nt, tid, MX_WS_THREADS, sid, soff, se);
    for (int i = tid; i < 256; i += MX_WS_THREADS) sgrid[i] = cu_mmx_grid[i];
    if (tid == 0) {
        for (int i = 0; i < MX_WS_NS; i++) { mbar_init(&full[i], MX_WS_PROD * 32); mbar_init(&empty[i], MX_WS_CONS); }
        mbar_init_fence();
    }
    __syncthreads();
    const int nsb = (int)(n / 256), nst = (int)(n / MX_BK);
    const unsigned s_a = (unsigned)__cvta_generic_to_shared(mx_sm + L::a);
    const unsigned s_b = (unsigned)__cvta_generic_to_shared(mx_sm + L::b);

    if (warp >= MX_WS_CONS) {
        /* producers: 128 threads; weights: rows pt / 2 and 64 + pt / 2, item half pt % 2 of the
         * stage (two groups of 8 bytes each); pieces: 8 chunks of 16 bytes each */
        const int pt = tid - MX_WS_CONS * 32, wr0 = pt >> 1, wi = pt & 1;
        const uint8_t *wrow[2];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int64_t r = r0 + wr0 + 64 * j;
            wrow[j] = wbase + (r < g.rows ? r : g.rows - 1) * (int64_t)g.row_bytes;
        }
        /* stage s's raw groups (8 bytes a row) and d (wi 0) */
        uint32_t ra[2], rw[2], rd[2] = {0, 0};
        auto load_w = [&](int s) {
            const int it = s * 2 + wi, blk = it >> 3;
#pragma unroll
            for (int j = 0; j < 2; j++) {
                mx_iq2_raw<TYPE>(wrow[j], it, ra[j], rw[j]);
                if (wi == 0) rd[j] = mx_iq2_d<TYPE>(wrow[j], blk, nsb);
            }
        };
        load_w(0);
        for (int s = 0; s < nst; s++) {
            const int b = s % MX_WS_NS;
            /* this stage's raw weights are in registers; the next stage's loads go out now, and
             * land while this one waits for its slot and decodes */
            const uint32_t ca[2] = {ra[0], ra[1]}, cw[2] = {rw[0], rw[1]}, cd[2] = {rd[0], rd[1]};
            if (s + 1 < nst) load_w(s + 1);
            if (s >= MX_WS_NS) mbar_wait(&empty[b], (uint32_t)((s / MX_WS_NS) - 1) & 1u);
            const int64_t k0 = (int64_t)s * MX_BK;
#pragma unroll
            for (int i = 0; i < 1024 / (MX_WS_PROD * 32); i++) {
                const int c = pt + MX_WS_PROD * 32 * i;
                const int piece = c >> 9, pr = (c >> 3) & 63, part = c & 7;
                mx_cp16(s_b + (unsigned)((((b * 2 + piece) * MX_BN + pr) * MX_LD + part * 8) * 2),
                        act + soff[pr] + 16 + (piece * n + k0 + part * 8) * 2);
            }
            asm volatile("cp.async.commit_group;\n" ::: "memory");
#pragma unroll
            for (int j = 0; j < 2; j++) {
                uint32_t o[16];
                mx_iq2_group(ca[j], cw[j], sgrid, o);
                const int wr = wr0 + 64 * j;
                mx_st32h(mx_sm + L::a + ((b * 128 + wr) * MX_LD + wi * 32) * 2, o);
                if (wi == 0) sd[b * 128 + wr] = cu_h2f((uint16_t)cd[j]) * 0.125f;
            }
            asm volatile("cp.async.wait_all;\n" ::: "memory");
            mbar_arrive(&full[b]);     /* release: this thread's stores and landed copies */
        }
        return;
    }

    /* consumers: 4 x 2 warps of 32 x 32, as layout 1 */
    const int gq = lane >> 2;
    const int wm = (warp & 3) * 32, wn = (warp >> 2) * 32;
    const unsigned la = mx_lane_a<MX_LD>(wm, lane), lb = mx_lane_b<MX_LD>(wn, lane);
    float y[2][4][4], acc[2][4][4];
    mx_zero<2>(y, acc);
    for (int s = 0; s < nst; s++) {
        const int b = s % MX_WS_NS;
        mbar_wait(&full[b], (uint32_t)(s / MX_WS_NS) & 1u);
#pragma unroll
        for (int kk = 0; kk < MX_BK / 16; kk++)
            mx_kk<2, MX_LD>(acc, s_a + (unsigned)(b * 128 * MX_LD * 2) + la, s_b + (unsigned)(b * 2 * MX_BN * MX_LD * 2) + lb,
                            s_b + (unsigned)((b * 2 + 1) * MX_BN * MX_LD * 2) + lb, kk);
        if ((s & 3) == 3) mx_fold<2>(y, acc, sd + b * 128 + wm + gq);
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[b]);
    }
    mx_store<2>(g, y, sid, se, nt, r0, wm, wn, lane);
#endif
}

/* the block's dynamic shared memory from its first 1024-byte boundary (the 128-byte swizzle's
 * atoms): the generic pointer, and its shared-window address in s_b */
__device__ __forceinline__ uint8_t *mx_sm_1024(uint8_t *mx_sm, unsigned &s_b) {
    const unsigned s0 = (unsigned)__cvta_generic_to_shared(mx_sm);
    s_b = (s0 + 1023u) & ~1023u;
    return mx_sm + (s_b - s0);
}

/* Tile's index among its expert's tiles (tile_expert ascends): doubling steps back, then
 * bisection, a few dependent loads even for an expert of many tiles */
__device__ __forceinline__ int mx_tile_index(const cu_gemv_args &g, int tile, int ex) {
    int first = tile;
    if (tile > 0 && g.tile_expert[tile - 1] == ex) {
        int step = 1;
        while (first - step >= 0 && g.tile_expert[first - step] == ex) { first -= step; step *= 2; }
        int lo = first - step < -1 ? -1 : first - step;     /* not ex (or before the list) */
        while (first - lo > 1) {
            const int mid = (lo + first) / 2;
            if (g.tile_expert[mid] == ex) first = mid; else lo = mid;
        }
    }
    return tile - first;
}

/* ---- The wgmma variants (MINKE_CUDA_MMX_TILE=6, 7 and 8; IQ2, and Q2_K in 6 and 8; sm_90a) ----
 * Layout 1 spends its shared-memory bandwidth three ways: the decoded weights go to shared
 * memory and come back by ldmatrix, and every warp re-reads the activation fragments it
 * shares with three others (ncu: L1 / shared 75% busy, tensor 40%). Here two warpgroups
 * multiply with wgmma: each thread decodes its own rows' weights straight into the A
 * registers (no shared-memory round trip for the weights), and the activation pieces of the
 * block's pairs are B, read by the tensor cores from shared memory (128-byte swizzled rows,
 * one per (pair, piece)). MH m64 row blocks a warpgroup: layout 6 (MH 1) 128 rows x 64
 * pairs a block (m64n128k16), layout 7 (MH 2) 256 rows x 32 pairs (m64n64k16): the same
 * registers, and each activation byte brought from L2 serves twice the rows (at 128 rows a
 * block the activation tiles alone need ~6 TB/s of L2 for the tensor rate).
 *
 * A's register fragment gives thread (g = lane / 4, c = lane % 4) of a warp the k slots 2c,
 * 2c + 1, 2c + 8, 2c + 9 of rows g and g + 8. The activation rows are split in a permuted
 * order (cu_mmx_split under these layouts, mx_wg_ok) so that in each 32-element group thread
 * c's four slots of the group's two k16 steps are the eight elements of grid entry c: one
 * grid lookup a thread, row and group. The columns alternate xh, xl of each pair, so a
 * thread's accumulator pair (2 i, 2 i + 1) of a row is one pair's two pieces, folded at the end
 * of each super-block as y += d (acc_h + acc_l).
 *
 * Pipeline: a ring of 4 activation stages (64 elements) filled two stages ahead by cp.async;
 * raw weights loaded two stages ahead into registers; each stage's wgmma are one commit group,
 * and a stage waits for the group two back before reusing its A registers and its ring slot. */
#define MX_WG_NS 4
#define MX_WG_THREADS 256

template <int MH, bool Q2K = false>
struct mx_wg_smem {
    static constexpr int bn = MX_BN / MH;                 /* pairs a block */
    static constexpr int stage = 2 * bn * 128;            /* bytes a stage: 2 bn rows of 64 halves */
    static constexpr int b = 0;                           /* [NS][2 bn][128 B], 1024-aligned */
    static constexpr int bm = b + MX_WG_NS * stage;      /* Q2_K: [2][2 bn][128 B] sub-block sums (32 B used) */
    static constexpr int grid = bm + (Q2K ? 2 * stage : 0);  /* IQ2: 256 grid entries */
    static constexpr int off = grid + (Q2K ? 0 : 256 * 8);
    static constexpr int sid = off + bn * 8;
    static constexpr int se = sid + bn * 4;
    static constexpr int bar = se + bn * 4;               /* layout 8: full[NS], empty[NS] */
    static constexpr int bytes = bar + 2 * MX_WG_NS * 8 + 1024;   /* + the alignment slack */
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* The wgmma wrappers: D[64 x 2 NP] += A[64 x 16] B[16 x 2 NP] for NP pairs (two f16 pieces a
 * pair), A in registers (mx_wgmma: the weights decoded by the multiplying warps) or in shared
 * memory (mx_wgmma_ss: layouts 11 and 12), B in shared memory (K-major, 128-byte swizzle).
 * MX_ACCn / MX_Dn (cu_wgmma.cuh): the accumulators' operands and constraints. */
#define MX_WGMMA_RS(NP, N, A0, A1, A2, A3, DB) WG_MMA_RS(mx_wgmma, NP, N, A0, A1, A2, A3, DB, 0)
#define MX_WGMMA_SS(NP, N, DA, DB) WG_MMA_SS(mx_wgmma_ss, NP, N, DA, DB, 0)
MX_WGMMA_RS(16, 32, 16, 17, 18, 19, 20)
MX_WGMMA_RS(32, 64, 32, 33, 34, 35, 36)
MX_WGMMA_RS(48, 96, 48, 49, 50, 51, 52)
MX_WGMMA_RS(64, 128, 64, 65, 66, 67, 68)
MX_WGMMA_RS(96, 192, 96, 97, 98, 99, 100)
MX_WGMMA_RS(112, 224, 112, 113, 114, 115, 116)
MX_WGMMA_RS(128, 256, 128, 129, 130, 131, 132)
MX_WGMMA_SS(64, 128, 64, 65)
MX_WGMMA_SS(96, 192, 96, 97)
MX_WGMMA_SS(112, 224, 112, 113)
MX_WGMMA_SS(128, 256, 128, 129)
/* a shared-memory matrix descriptor: K-major rows of 128 bytes, 128-byte swizzle, 8-row groups
 * 1024 bytes apart */
__device__ __forceinline__ uint64_t mx_wg_desc(unsigned saddr) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
#endif

/* One grid entry c of an IQ2 group (a: 4 grid indices, w: 4 x 7 sign bits under the 4-bit
 * scale ls) as four f16 pairs of exact integers (2 ls + 1) g: elements 0-1, 2-3, 4-5, 6-7.
 * The grid's unsigned bytes become f16 products |g| (2 ls + 1) first and the signs are XORed
 * into the halves' sign bits after (the same bits as negating the bytes before: no product is
 * zero). (Lookups of the grid as f16 and of the sign masks in shared tables take fewer
 * instructions but measured slower: 4.57 against 3.93 ms for Flash's gate in layout 6, 3.39
 * against 3.16 in layout 9, the 16-byte lookups' bank conflicts; layouts 11 and 12, whose
 * producer warps alone decode, take them: mx_iq2_entry_t) */
__device__ __forceinline__ void mx_iq2_entry(uint32_t a, uint32_t w, int c, const uint64_t *grid, uint32_t (&o)[4]) {
    const uint64_t gv = grid[(a >> (8 * c)) & 255];
    const uint32_t s7 = (w >> (7 * c)) & 127;
    const uint32_t S = s7 | ((__popc(s7) & 1) << 7);
    const float f = (float)(2 * (w >> 28) + 1);
    const __half2 f2 = __float2half2_rn(f), off2 = __float2half2_rn(-1024.f * f);
    uint32_t h[4];
    mx_bytes_f16((uint32_t)gv, f2, off2, h[0], h[1]);
    mx_bytes_f16((uint32_t)(gv >> 32), f2, off2, h[2], h[3]);
    /* the signs of weights 2 k, 2 k + 1 (bits 2 k, 2 k + 1 of S) to bits 15 and 31 of word k:
     * S >> 2 k times 2^15 + 2^30 puts them there (the other bits it sets, 16-22 and 30, are
     * masked off; no two land on one bit, so nothing carries) */
#pragma unroll
    for (int k = 0; k < 4; k++) o[k] = h[k] ^ (((S >> (2 * k)) * 0x40008000u) & 0x80008000u);
}

/* Layouts 11 and 12's IQ2 decode by shared tables (MX_TAB_BYTES at 16-byte alignment): the 256
 * grid entries as 8 f16 values each (the grid's bytes 8, 25, 43: exact), then the 128 sign
 * patterns s7 as four words of f16 sign bits (weight k's sign: bit k of s7, for k = 7 the parity
 * of s7; at bit 15 + 16 (k & 1) of word k / 2). An entry is then two 16-byte loads, four XORs
 * and four f16 products by 2 ls + 1 (|g (2 ls + 1)| <= 1333: exact), the same halves as
 * mx_iq2_entry in about a third of its instructions. */
__device__ __forceinline__ void mx_tabs_init(uint8_t *tab, int tid, int nthr) {
    uint4 *t = (uint4 *)tab;
    for (int i = tid; i < 384; i += nthr) {
        uint32_t w[4];
        if (i < 256) {
            const uint64_t gv = cu_mmx_grid[i];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const unsigned lo = (unsigned)(gv >> (16 * k)) & 255u, hi = (unsigned)(gv >> (16 * k + 8)) & 255u;
                w[k] = (uint32_t)__half_as_ushort(__uint2half_rn(lo)) | ((uint32_t)__half_as_ushort(__uint2half_rn(hi)) << 16);
            }
        } else {
            const uint32_t s7 = (uint32_t)(i - 256), S = s7 | ((uint32_t)(__popc(s7) & 1) << 7);
#pragma unroll
            for (int k = 0; k < 4; k++) w[k] = (((S >> (2 * k)) & 1u) << 15) | (((S >> (2 * k + 1)) & 1u) << 31);
        }
        t[i] = make_uint4(w[0], w[1], w[2], w[3]);
    }
}
__device__ __forceinline__ uint32_t mx_h2mul(uint32_t x, __half2 f2) {
    __half2 h = __hmul2(*(__half2 *)&x, f2);
    return *(uint32_t *)&h;
}
__device__ __forceinline__ void mx_iq2_entry_t(uint32_t a, uint32_t w, int c, const uint4 *tab, uint32_t (&o)[4]) {
    const uint4 gv = tab[(a >> (8 * c)) & 255], sg = tab[256 + ((w >> (7 * c)) & 127)];
    const __half2 f2 = __float2half2_rn((float)(2 * (w >> 28) + 1));
    o[0] = mx_h2mul(gv.x ^ sg.x, f2);
    o[1] = mx_h2mul(gv.y ^ sg.y, f2);
    o[2] = mx_h2mul(gv.z ^ sg.z, f2);
    o[3] = mx_h2mul(gv.w ^ sg.w, f2);
}

/* Eight Q2_K codes (bytes 8 c .. 8 c + 7 of a half-block's 32 in w0, w1, at bit shift sh)
 * times the sub-block scale sc as four f16 pairs of exact integers sc q (<= 45) */
__device__ __forceinline__ void mx_q2k_entry(uint32_t w0, uint32_t w1, int sh, uint32_t sc, uint32_t (&o)[4]) {
    const float f = (float)sc;
    const __half2 f2 = __float2half2_rn(f), off2 = __float2half2_rn(-1024.f * f);
    mx_bytes_f16((w0 >> sh) & 0x03030303u, f2, off2, o[0], o[1]);
    mx_bytes_f16((w1 >> sh) & 0x03030303u, f2, off2, o[2], o[3]);
}

/* MB (layout 8): the ring's slots on mbarriers instead of one block barrier a stage: a slot is
 * full when every thread's copies into it have landed (cp.async.mbarrier.arrive), empty when
 * all 8 warps' products of it are done. Meant to let the two warpgroups drift apart (one's
 * super-block fold under the other's products), but every thread also refills the ring, and
 * the slot it refills at stage s is freed by all 8 warps reaching stage s: in effect a barrier
 * a stage still (a deeper ring, e.g. 6 slots filled two ahead and waited four back, or copies
 * by one warpgroup only, would let them drift). Measured slower than the block barrier
 * (Flash's gate 4.08 against 3.95 ms, the down 4.51 against 4.34; a prompt 3,853-3,863 against
 * 3,899-3,908 tok/s): kept for A/B. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* NP: the block's pairs as multiplied (MH = 1: the tile's count rounded up to 16, 32, 48 or 64,
 * m64n32k16 .. m64n128k16, so an expert's partial last tile multiplies and copies less padding;
 * MH = 2: 32) */
template <int TYPE, int MH, bool MB, int NP>
__device__ __forceinline__ void mx_wg_body(const cu_gemv_args &g, uint8_t *mx_sm, int tile, int start, int nt) {
    constexpr bool Q2K = TYPE == CU_TYPE_Q2_K;
    using L = mx_wg_smem<MH, Q2K>;
    static_assert(NP <= L::bn && NP % 16 == 0, "at most the block's pairs, in 16s");
    constexpr int BN = NP, NACC = NP, NCH = NP / 4, NR = 2 * MH;   /* NR: rows a thread */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t r0 = (int64_t)blockIdx.x * 128 * MH;
    const uint8_t *wbase = (const uint8_t *)g.w + (int64_t)g.tile_expert[tile] * g.expert_bytes;
    unsigned s_b;
    uint8_t *sm = mx_sm_1024(mx_sm, s_b);
    int64_t *soff = (int64_t *)(sm + L::off);
    int *sid = (int *)(sm + L::sid), *se = (int *)(sm + L::se);
    uint64_t *sgrid = (uint64_t *)(sm + L::grid);
    const uint8_t *act = (const uint8_t *)g.act;
    const int64_t n = g.in;
    mx_tile_rows(g, start, nt, tid, MX_WG_THREADS, sid, soff, se, BN);
    if (!Q2K)
        for (int i = tid; i < 256; i += MX_WG_THREADS) sgrid[i] = cu_mmx_grid[i];
    uint64_t *full = (uint64_t *)(sm + L::bar), *empty = full + MX_WG_NS;
    if (MB && tid == 0) {
        for (int i = 0; i < MX_WG_NS; i++) { mbar_init(&full[i], MX_WG_THREADS); mbar_init(&empty[i], MX_WG_THREADS / 32); }
        mbar_init_fence();
    }
    __syncthreads();
    const int nsb = (int)(n / 256), nst = nsb * 4;

    /* this thread's rows: warpgroup wg's 64 MH, in each m64 block hh the warp's 16, g and g + 8
     * (row j = 2 hh + (g + 8 ?)) */
    const int gq = lane >> 2, c = lane & 3;
    const uint8_t *wr[NR];
    int64_t rrow[NR];
#pragma unroll
    for (int j = 0; j < NR; j++) {
        rrow[j] = r0 + (warp >> 2) * 64 * MH + (j >> 1) * 64 + (warp & 3) * 16 + gq + 8 * (j & 1);
        wr[j] = wbase + (rrow[j] < g.rows ? rrow[j] : g.rows - 1) * (int64_t)g.row_bytes;
    }

    /* stage s's activation pieces into slot s % NS: row 2 p + piece, 16-byte chunk j at chunk
     * j ^ (row % 8); past the last stage an empty group, so that the waits count the same */
    auto stage_act = [&](int s) {
        if (s < nst) {
            /* MB: the slot's previous stage (s - 4) multiplied by all warps */
            if (MB && s >= MX_WG_NS) mbar_wait(&empty[s % MX_WG_NS], (uint32_t)((s - MX_WG_NS) / MX_WG_NS) & 1u);
            const unsigned dst0 = s_b + (unsigned)((s % MX_WG_NS) * L::stage);
            const int64_t k0 = (int64_t)s * MX_BK;
#pragma unroll
            for (int i = 0; i < 16 * BN / MX_WG_THREADS; i++) {
                const int ci = tid + MX_WG_THREADS * i, row = ci >> 3, j = ci & 7;
                /* padding pairs keep whatever the slot held: their columns are never stored */
                if ((row >> 1) >= nt) continue;
                const uint8_t *src = act + soff[row >> 1] + 16 + ((row & 1) * n + k0 + j * 8) * 2;
                mx_cp16(dst0 + (unsigned)(row * 128 + ((j ^ (row & 7)) << 4)), src);
            }
            if (Q2K && s % 4 == 0 && (tid >> 2) < nt) {
                /* the super-block's 16 sums of each (pair, piece): two chunks of a swizzled row */
                const int sb = s / 4, row = tid >> 1, j = tid & 1;
                const uint8_t *src = act + soff[row >> 1] + 16 + 4 * n + ((row & 1) * (n / 16) + sb * 16 + j * 8) * 2;
                mx_cp16(s_b + (unsigned)(L::bm + (sb & 1) * L::stage + row * 128 + ((j ^ (row & 7)) << 4)), src);
            }
            if (MB)
                asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bulk_saddr(&full[s % MX_WG_NS]))
                             : "memory");
        }
        if (!MB) asm volatile("cp.async.commit_group;\n" ::: "memory");
    };
    /* stage s's raw groups (items 2 s, 2 s + 1) of the thread's rows */
    uint32_t raw[2][2][NR][2];
    auto load_w = [&](int s, uint32_t (&r)[2][NR][2]) {
        if (s >= nst) return;
#pragma unroll
        for (int q = 0; q < 2; q++)
#pragma unroll
            for (int j = 0; j < NR; j++) {
                if constexpr (Q2K) {
                    /* items 2 s, 2 s + 1 share their code bytes (shifts 2 jj, 2 jj + 2): bytes 8 c .. 8 c + 7 */
                    if (q == 0) {
                        const uint8_t *b = wr[j] + (int64_t)(s >> 2) * 84 + 16 + ((s & 3) >> 1) * 32 + 8 * c;
                        r[0][j][0] = *(const uint32_t *)b;
                        r[0][j][1] = *(const uint32_t *)(b + 4);
                    }
                } else {
                    mx_iq2_raw<TYPE>(wr[j], 2 * s + q, r[q][j][0], r[q][j][1]);
                }
            }
    };
    /* a super-block's scales: IQ2 d / 8 in d; Q2_K d in d, dmin in dm, the 16 scale bytes in sc */
    auto load_d = [&](int sb, float (&d)[NR], float (&dm)[NR], uint32_t (&sc)[NR][4]) {
        if (sb >= nsb) return;
#pragma unroll
        for (int j = 0; j < NR; j++) {
            if constexpr (Q2K) {
                const uint32_t *b = (const uint32_t *)(wr[j] + (int64_t)sb * 84);
                sc[j][0] = b[0]; sc[j][1] = b[1]; sc[j][2] = b[2]; sc[j][3] = b[3];
                const uint32_t w = b[20];
                d[j] = cu_h2f((uint16_t)(w & 0xFFFF));
                dm[j] = cu_h2f((uint16_t)(w >> 16));
            } else {
                d[j] = cu_h2f((uint16_t)mx_iq2_d<TYPE>(wr[j], sb, nsb)) * 0.125f;
            }
        }
    };

    float acc[MH][NACC], y[MH][NCH][2];
#pragma unroll
    for (int hh = 0; hh < MH; hh++) {
#pragma unroll
        for (int i = 0; i < NACC; i++) acc[hh][i] = 0.f;
#pragma unroll
        for (int i = 0; i < NCH; i++) { y[hh][i][0] = 0.f; y[hh][i][1] = 0.f; }
    }
    uint32_t af[2][MH][4][4];
    float dcur[NR], dnext[NR], dmcur[NR], dmnext[NR];
    uint32_t sccur[NR][4], scnext[NR][4];
#pragma unroll
    for (int j = 0; j < NR; j++) {
        dcur[j] = dnext[j] = dmcur[j] = dmnext[j] = 0.f;
#pragma unroll
        for (int k = 0; k < 4; k++) sccur[j][k] = scnext[j][k] = 0;
    }

    stage_act(0);
    stage_act(1);
    load_w(0, raw[0]);
    load_w(1, raw[1]);
    load_d(0, dcur, dmcur, sccur);

    for (int sb = 0; sb < nsb; sb++) {
        load_d(sb + 1, dnext, dmnext, scnext);
#pragma unroll
        for (int st = 0; st < 4; st++) {
            const int s = sb * 4 + st;
            /* stage s landed (stage s + 1 may not have), the products of stage s - 2 done (s - 1's
             * may run): its A registers and ring slot are free; copies visible to the tensor cores */
            if (MB) mbar_wait(&full[s % MX_WG_NS], (uint32_t)(s / MX_WG_NS) & 1u);
            else asm volatile("cp.async.wait_group 1;\n" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
#pragma unroll
            for (int hh = 0; hh < MH; hh++) wg_pin(acc[hh]);
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            if (MB) {
                __syncwarp();
                if (s >= 2 && lane == 0) mbar_arrive(&empty[(s - 2) % MX_WG_NS]);
            } else {
                __syncthreads();
            }
            stage_act(s + 2);
            /* this stage's A fragments: k16 step 2 q + h takes elements 4 h .. 4 h + 3 of entry c */
            uint32_t (&a)[MH][4][4] = af[st & 1];
#pragma unroll
            for (int q = 0; q < 2; q++)
#pragma unroll
                for (int hh = 0; hh < MH; hh++) {
                    uint32_t oa[4], ob[4];
                    if constexpr (Q2K) {
                        /* item 2 st + q of the super-block: codes at shift 2 jj, scale of sub-block
                         * 2 (2 st + q) + c / 2 */
                        const int itb = 2 * st + q, sh = 2 * (itb & 3);
                        const int bsh = 8 * (2 * (itb & 1) + (c >> 1));
                        mx_q2k_entry(raw[st & 1][0][0][0], raw[st & 1][0][0][1], sh, (sccur[0][itb >> 1] >> bsh) & 15, oa);
                        mx_q2k_entry(raw[st & 1][0][1][0], raw[st & 1][0][1][1], sh, (sccur[1][itb >> 1] >> bsh) & 15, ob);
                    } else {
                        mx_iq2_entry(raw[st & 1][q][2 * hh][0], raw[st & 1][q][2 * hh][1], c, sgrid, oa);
                        mx_iq2_entry(raw[st & 1][q][2 * hh + 1][0], raw[st & 1][q][2 * hh + 1][1], c, sgrid, ob);
                    }
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        a[hh][2 * q + h][0] = oa[2 * h];
                        a[hh][2 * q + h][1] = ob[2 * h];
                        a[hh][2 * q + h][2] = oa[2 * h + 1];
                        a[hh][2 * q + h][3] = ob[2 * h + 1];
                    }
                }
            load_w(s + 2, raw[st & 1]);
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
            const unsigned sl = s_b + (unsigned)((s % MX_WG_NS) * L::stage);
#pragma unroll
            for (int k = 0; k < 4; k++)
#pragma unroll
                for (int hh = 0; hh < MH; hh++) mx_wgmma(acc[hh], a[hh][k], mx_wg_desc(sl + (unsigned)(k * 32)));
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#pragma unroll
            for (int hh = 0; hh < MH; hh++) wg_pin(acc[hh]);
        }
        /* the super-block's fold */
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
        for (int hh = 0; hh < MH; hh++) {
            wg_pin(acc[hh]);
#pragma unroll
            for (int i = 0; i < NCH; i++) {
                y[hh][i][0] = fmaf(dcur[2 * hh], acc[hh][4 * i] + acc[hh][4 * i + 1], y[hh][i][0]);
                y[hh][i][1] = fmaf(dcur[2 * hh + 1], acc[hh][4 * i + 2] + acc[hh][4 * i + 3], y[hh][i][1]);
                acc[hh][4 * i] = 0.f; acc[hh][4 * i + 1] = 0.f; acc[hh][4 * i + 2] = 0.f; acc[hh][4 * i + 3] = 0.f;
            }
        }
        if constexpr (Q2K) {
            /* the min term: acc = sum_j m_j S_j (k16 over the 16 sub-blocks, natural order: this
             * thread's slots are sub-blocks 2c, 2c + 1, 2c + 8, 2c + 9), y -= 32 dmin acc */
            uint32_t am[4];
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const uint32_t lo = (c >> 1) ? sccur[j][1] : sccur[j][0], hi = (c >> 1) ? sccur[j][3] : sccur[j][2];
                const int bs = 16 * (c & 1);
                const uint32_t u = ((((lo >> bs) & 0xFFFFu) | (((hi >> bs) & 0xFFFFu) << 16)) >> 4) & 0x0F0F0F0Fu;
                mx_bytes_f16(u, __float2half2_rn(1.f), __float2half2_rn(-1024.f), am[j], am[2 + j]);
            }
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
            mx_wgmma(acc[0], am, mx_wg_desc(s_b + (unsigned)(L::bm + (sb & 1) * L::stage)));
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
            wg_pin(acc[0]);
#pragma unroll
            for (int i = 0; i < NCH; i++) {
                y[0][i][0] = fmaf(-32.f * dmcur[0], acc[0][4 * i] + acc[0][4 * i + 1], y[0][i][0]);
                y[0][i][1] = fmaf(-32.f * dmcur[1], acc[0][4 * i + 2] + acc[0][4 * i + 3], y[0][i][1]);
                acc[0][4 * i] = 0.f; acc[0][4 * i + 1] = 0.f; acc[0][4 * i + 2] = 0.f; acc[0][4 * i + 3] = 0.f;
            }
        }
#pragma unroll
        for (int j = 0; j < NR; j++) {
            dcur[j] = dnext[j];
            dmcur[j] = dmnext[j];
#pragma unroll
            for (int k = 0; k < 4; k++) sccur[j][k] = scnext[j][k];
        }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");

    /* pair 4 i + c of the thread's rows: y 2^-e */
#pragma unroll
    for (int i = 0; i < NCH; i++) {
        const int p = 4 * i + c;
        if (p >= nt) continue;
        const int e = se[p];
        float *out = g.out + (int64_t)sid[p] * g.out_stride;
#pragma unroll
        for (int j = 0; j < NR; j++) {
            if (rrow[j] >= g.rows) continue;
            const float v = ldexpf(y[j >> 1][i][j & 1], -e);
            if (g.accumulate) out[rrow[j]] += v; else out[rrow[j]] = v;
        }
    }
}
#endif

template <int TYPE, int MH, bool MB = false>
__global__ void __launch_bounds__(MX_WG_THREADS, 1) k_mmx_wg(cu_gemv_args g) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr bool Q2K = TYPE == CU_TYPE_Q2_K;
    static_assert(TYPE == CU_TYPE_IQ2R || TYPE == CU_TYPE_IQ2_XXS || (Q2K && MH == 1), "IQ2, or Q2_K in 64-row blocks");
    constexpr int BN = mx_wg_smem<MH, Q2K>::bn;
    extern __shared__ __align__(16) uint8_t mx_sm[];
    cu_pdl_enter();
    const int tile = blockIdx.y / MH, part = blockIdx.y % MH;
    if (tile >= *g.n_tiles) return;
    const int start = g.tile_start[tile] + part * BN, nt = g.tile_count[tile] - part * BN;
    if (nt <= 0) return;                  /* an expert another GPU owns, or a tile of <= BN pairs */
    /* a branch around the whole pipeline (a branch around wgmma makes ptxas serialize them) */
    if constexpr (MH == 1) {
        if (nt <= 16) mx_wg_body<TYPE, MH, MB, 16>(g, mx_sm, tile, start, nt);
        else if (nt <= 32) mx_wg_body<TYPE, MH, MB, 32>(g, mx_sm, tile, start, nt);
        else if (nt <= 48) mx_wg_body<TYPE, MH, MB, 48>(g, mx_sm, tile, start, nt);
        else mx_wg_body<TYPE, MH, MB, 64>(g, mx_sm, tile, start, nt);
    } else {
        mx_wg_body<TYPE, MH, MB, BN>(g, mx_sm, tile, start, nt);
    }
#endif
}

/* Layouts 9, 11 and 12: y (128 rows of yl floats, a column a pair) times 2^-e into the pairs' output
 * rows: warp w0, w0 + nw, ... a pair at a time, lanes along the rows */
__device__ __forceinline__ void mx_y_store(const cu_gemv_args &g, const float *ys, int yl, const int *sid, const int *se,
                                           int nt, int64_t r0, int w0, int nw, int lane) {
    for (int p = w0; p < nt; p += nw) {
        const int e = se[p];
        float *out = g.out + (int64_t)sid[p] * g.out_stride;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int rr = 32 * k + lane;
            if (r0 + rr >= g.rows) continue;
            const float v = ldexpf(ys[rr * yl + p], -e);
            if (g.accumulate) out[r0 + rr] += v; else out[r0 + rr] = v;
        }
    }
}
/* Layouts 9, 11 and 12's blocks: the expert's tiles pair up from its first (cu_moe_tiles' tiles,
 * the only ones that reach cu_mmx: prompts of >= 256 tokens, sorted by expert, an expert's
 * tiles contiguous and all but its last of 64 pairs): tile 2 i + 1 belongs to the block of
 * 2 i, and a lone tile (2 i the expert's last) takes a body of at most 64 pairs. 0: nothing for
 * this block (an odd tile, or none); else *start, *nt, *ex and *two (65 to 128 pairs) */
__device__ __forceinline__ int mx_pair_tile(const cu_gemv_args &g, int *start, int *nt, int *ex, bool *two) {
    const int tile = blockIdx.y, ntl = *g.n_tiles;
    if (tile >= ntl || g.tile_count[tile] <= 0) return 0;
    *ex = g.tile_expert[tile];
    if (mx_tile_index(g, tile, *ex) & 1) return 0;
    *start = g.tile_start[tile];
    *two = tile + 1 < ntl && g.tile_expert[tile + 1] == *ex;
    if (cu_mmx_abl & (*two ? 16 : 8)) return 0;         /* timing ablations only */
    *nt = g.tile_count[tile] + (*two ? g.tile_count[tile + 1] : 0);
    return 1;
}

/* Layouts 9, 11 and 12's fold at a super-block's end: y[row] += d (acc_h + acc_l) for this thread's
 * rows yrow[0] (accumulators 4 i, 4 i + 1) and yrow[1] (4 i + 2, 4 i + 3), pair 4 i + c; the
 * accumulators back to 0 */
template <int NP>
__device__ __forceinline__ void mx_y_fold(float *ys, int yl, const int (&yrow)[2], int c, float d0, float d1,
                                          float (&acc)[NP]) {
#pragma unroll
    for (int i = 0; i < NP / 4; i++) {
        float *y0 = ys + yrow[0] * yl + 4 * i + c, *y1 = ys + yrow[1] * yl + 4 * i + c;
        *y0 = fmaf(d0, acc[4 * i] + acc[4 * i + 1], *y0);
        *y1 = fmaf(d1, acc[4 * i + 2] + acc[4 * i + 3], *y1);
        acc[4 * i] = 0.f; acc[4 * i + 1] = 0.f; acc[4 * i + 2] = 0.f; acc[4 * i + 3] = 0.f;
    }
}

/* ---- Layout 9 (MINKE_CUDA_MMX_TILE=9, the default; IQ2 only, sm_90a): 128 rows x 128 pairs, y in shared memory ----
 * Layout 6 decodes a block's 128 rows once for 64 pairs, and Flash's ~96 pairs an expert make
 * two tiles (64 and ~32) that each decode the expert's rows again (ncu: layout 6 is bound by
 * the decode's integer work and latency, not by L2). Its y (64 pairs x 2 rows a thread) and
 * accumulators leave no registers for more pairs. Here a block takes an expert's tiles 2 i and
 * 2 i + 1 (65 to 128 pairs; cu_moe_tiles' tiles of 64 unchanged, the odd tiles' blocks return
 * at once; an expert's lone last tile takes a 64-pair body, m64n128k16) and keeps y in shared
 * memory, folded into at the end of each super-block, so that a
 * warpgroup's accumulators can span all 128 pairs (m64n256k16): the same decode into A
 * registers as layout 6 (permuted split) serves twice the pairs, and the activation bytes
 * brought from L2 a product stay as layout 6's (128 rows a block). Flash's gate: 3.16 ms against
 * layout 6's 3.96 (skewed routing 3.22 against 3.87). Measured and not kept: 64 rows decoded
 * once into shared memory for both warpgroups' 64 pairs, 4.88 ms (64 rows a block double the
 * activation traffic); y's pairs XOR-swizzled instead of padded, 3.54 (the fold's addresses
 * cost more than the padding's 2 KB); the lone tiles by layout 6's kernel in a second launch
 * (its mostly empty grid); the Q2_K down on this layout (the min term a second fold), 4.49
 * against 4.28 ms. */
#define MX_W2_NS 4
struct mx_wg2_smem {
    static constexpr int stage = 256 * 128;               /* 128 pairs x 2 pieces, rows of 64 halves */
    static constexpr int b = 0;                           /* [NS][256][128 B], 1024-aligned */
    static constexpr int yl = 132;                        /* floats a y row: 128 pairs + 4, so that a
                                                             fold's lanes (rows g, pairs 4 i + c) hit
                                                             32 banks with constant offsets */
    static constexpr int y = b + MX_W2_NS * stage;        /* [128 rows][yl] floats */
    static constexpr int grid = y + 128 * yl * 4;         /* 256 grid entries */
    static constexpr int off = grid + 256 * 8;
    static constexpr int sid = off + 128 * 8;
    static constexpr int se = sid + 128 * 4;
    static constexpr int bytes = se + 128 * 4 + 1024;     /* + the alignment slack */
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* One block's products: NP pairs (an expert's two tiles: 96, 112 or 128, the pair count
 * rounded up, m64n192k16 / m64n224k16 / m64n256k16: Flash's ~96 pairs an expert multiply and
 * copy less padding; a lone tile: 16, 32, 48 or 64, m64n32k16 .. m64n128k16), its rows r0 ..
 * r0 + 127 */
template <int TYPE, int NP>
__device__ __forceinline__ void mx_wg2_body(const cu_gemv_args &g, uint8_t *mx_sm, int start, int nt, int ex) {
    using L = mx_wg2_smem;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t r0 = (int64_t)blockIdx.x * 128;
    const uint8_t *wbase = (const uint8_t *)g.w + (int64_t)ex * g.expert_bytes;
    unsigned s_b;
    uint8_t *sm = mx_sm_1024(mx_sm, s_b);
    int64_t *soff = (int64_t *)(sm + L::off);
    int *sid = (int *)(sm + L::sid), *se = (int *)(sm + L::se);
    uint64_t *sgrid = (uint64_t *)(sm + L::grid);
    float *ys = (float *)(sm + L::y);
    const uint8_t *act = (const uint8_t *)g.act;
    const int64_t n = g.in;
    mx_tile_rows(g, start, nt, tid, MX_WG_THREADS, sid, soff, se, NP);
    for (int i = tid; i < 256; i += MX_WG_THREADS) sgrid[i] = cu_mmx_grid[i];
    for (int i = tid; i < 128 * L::yl; i += MX_WG_THREADS) ys[i] = 0.f;
    __syncthreads();
    const int nsb = (int)(n / 256), nst = nsb * 4;

    /* this thread's rows: warpgroup warp / 4's 64, the warp's 16 of them, g and g + 8 */
    const int gq = lane >> 2, c = lane & 3;
    const uint8_t *wr[2];
    int yrow[2];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        yrow[j] = (warp >> 2) * 64 + (warp & 3) * 16 + gq + 8 * j;
        const int64_t rr = r0 + yrow[j];
        wr[j] = wbase + (rr < g.rows ? rr : g.rows - 1) * (int64_t)g.row_bytes;
    }

    /* stage s's activation pieces into slot s % NS (layout 6's rows, 2 NP of them) */
    auto stage_act = [&](int s) {
        if (s < nst) {
            const unsigned dst0 = s_b + (unsigned)(L::b + (s % MX_W2_NS) * L::stage);
            const int64_t k0 = (int64_t)s * MX_BK;
#pragma unroll
            for (int i = 0; i < NP / 16; i++) {
                const int ci = tid + MX_WG_THREADS * i, row = ci >> 3, j = ci & 7;
                /* padding pairs keep whatever the slot held: their columns are never stored */
                if ((row >> 1) >= nt) continue;
                const uint8_t *src = act + soff[row >> 1] + 16 + ((row & 1) * n + k0 + j * 8) * 2;
                mx_cp16(dst0 + (unsigned)(row * 128 + ((j ^ (row & 7)) << 4)), src);
            }
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };
    uint32_t raw[2][2][2][2];
    auto load_w = [&](int s, uint32_t (&r)[2][2][2]) {
        if (s >= nst) return;
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int q = 0; q < 2; q++) mx_iq2_raw<TYPE>(wr[j], 2 * s + q, r[q][j][0], r[q][j][1]);
    };
    auto load_d = [&](int sb, float (&d)[2]) {
        if (sb >= nsb) return;
#pragma unroll
        for (int j = 0; j < 2; j++) d[j] = cu_h2f((uint16_t)mx_iq2_d<TYPE>(wr[j], sb, nsb)) * 0.125f;
    };
    float acc[NP];
#pragma unroll
    for (int i = 0; i < NP; i++) acc[i] = 0.f;
    uint32_t af[2][4][4];
    float dcur[2] = {0.f, 0.f}, dnext[2] = {0.f, 0.f};

    stage_act(0);
    stage_act(1);
    load_w(0, raw[0]);
    load_w(1, raw[1]);
    load_d(0, dcur);

    for (int sb = 0; sb < nsb; sb++) {
        load_d(sb + 1, dnext);
#pragma unroll
        for (int st = 0; st < 4; st++) {
            const int s = sb * 4 + st;
            /* stage s landed, the products of stage s - 2 done: its A registers and ring slot are
             * free (layout 6's pipeline) */
            asm volatile("cp.async.wait_group 1;\n" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
            wg_pin(acc);
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            __syncthreads();
            stage_act(s + 2);
            uint32_t (&a)[4][4] = af[st & 1];
#pragma unroll
            for (int q = 0; q < 2; q++) {
                uint32_t oa[4], ob[4];
                mx_iq2_entry(raw[st & 1][q][0][0], raw[st & 1][q][0][1], c, sgrid, oa);
                mx_iq2_entry(raw[st & 1][q][1][0], raw[st & 1][q][1][1], c, sgrid, ob);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    a[2 * q + h][0] = oa[2 * h];
                    a[2 * q + h][1] = ob[2 * h];
                    a[2 * q + h][2] = oa[2 * h + 1];
                    a[2 * q + h][3] = ob[2 * h + 1];
                }
            }
            load_w(s + 2, raw[st & 1]);
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
            const unsigned sl = s_b + (unsigned)(L::b + (s % MX_W2_NS) * L::stage);
#pragma unroll
            for (int k = 0; k < 4; k++) mx_wgmma(acc, a[k], mx_wg_desc(sl + (unsigned)(k * 32)));
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            wg_pin(acc);
        }
        /* the super-block's fold into y (each thread its own entries: no barrier) */
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        wg_pin(acc);
        mx_y_fold<NP>(ys, L::yl, yrow, c, dcur[0], dcur[1], acc);
        dcur[0] = dnext[0];
        dcur[1] = dnext[1];
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();

    mx_y_store(g, ys, L::yl, sid, se, nt, r0, warp, MX_WG_THREADS / 32, lane);
}
#endif

template <int TYPE>
__global__ void __launch_bounds__(MX_WG_THREADS, 1) k_mmx_wg2(cu_gemv_args g) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(TYPE == CU_TYPE_IQ2R || TYPE == CU_TYPE_IQ2_XXS, "IQ2 only");
    extern __shared__ __align__(16) uint8_t mx_sm[];
    cu_pdl_enter();
    int start, nt, ex;
    bool two;
    if (!mx_pair_tile(g, &start, &nt, &ex, &two)) return;
    /* a branch around the whole pipeline (a branch around wgmma makes ptxas serialize them) */
    if (!two) {
        if (nt <= 16) mx_wg2_body<TYPE, 16>(g, mx_sm, start, nt, ex);
        else if (nt <= 32) mx_wg2_body<TYPE, 32>(g, mx_sm, start, nt, ex);
        else if (nt <= 48) mx_wg2_body<TYPE, 48>(g, mx_sm, start, nt, ex);
        else mx_wg2_body<TYPE, 64>(g, mx_sm, start, nt, ex);
    } else if (nt <= 96) mx_wg2_body<TYPE, 96>(g, mx_sm, start, nt, ex);
    else if (nt <= 112) mx_wg2_body<TYPE, 112>(g, mx_sm, start, nt, ex);
    else mx_wg2_body<TYPE, 128>(g, mx_sm, start, nt, ex);
#endif
}

/* ---- Layout 11 (MINKE_CUDA_MMX_TILE=11; IQ2 only, sm_90a; an experiment): layout 9's work
 * (128 rows x 128 pairs a block, y in shared memory, one fold a super-block) warp-specialised.
 * Layout 9's 8 warps each decode their rows into wgmma's A registers, wait at a block barrier
 * a stage and fold (ncu, sixteenth session: the tensor pipe 34% busy, stalls spread over
 * dependencies, loads and barriers, 2 warps a scheduler). Here warpgroup 0 only produces: its
 * thread t decodes row t's 64 weights of a stage into a shared-memory A tile (the same 128-byte
 * swizzled rows as B, the split unpermuted: grid entry c of a 32-element group is one 16-byte
 * chunk) and copies its share of the stage's activation pieces (cp.async), and warpgroups 1 and
 * 2 multiply rows 0-63 and 64-127 with both operands in shared memory (m64n256k16 SS) and fold.
 * A ring of MX_W3_NS stages on mbarriers: full (128 copy completions + 128 arrivals after the A
 * stores), empty (the 8 consumer warps, after their products of the stage are done). Each
 * slot carries the d of its stage's super-block for the fold. The same exact f16 products as
 * layouts 6 and 9 and one fold a super-block, but the natural k order puts other elements in
 * each k16 step than their permuted one, so the tensor cores' sums may round differently (not
 * bit-identical to 9; mmx_check's tolerance against the double reference holds). Measured
 * (sixteenth session, Flash's gate): 3.28 ms against layout 9's 3.17, correct (mmx_check);
 * one producer warpgroup is likely its limit (two, or a deeper ring, are the next steps).
 * Layout 12 (seventeenth session): the consumers copy B (the producer only decodes A, by shared
 * tables: mx_iq2_entry_t) and the pair count picks a 96-, 112- or 128-pair body: 2.63 ms on
 * Flash's gate with uniform routing against layout 9's 3.16 (without the 96 / 112 bodies 2.94;
 * timing ablations, MINKE_CUDA_MMX_ABL: no A decode 2.69, no fold 2.62, no B copies 2.30, none
 * of the three 1.64), but in a prompt of the synthetic Flash model (learned layers: ~125 of an
 * expert row's ~316 blocks are lone tiles, decode-bound) 3.42-3.47 against 3.31-3.37. Two
 * producer warpgroups (512 threads) do not compile: ptxas holds every thread to the launch
 * bound's 128 registers (setmaxnreg does not raise it), and the consumers' 128 accumulators
 * need ~160. */
#define MX_W3_NS 3
#define MX_W3_THREADS 384
struct mx_ws2_smem {
    static constexpr int bst = 256 * 128;                 /* B stage: 128 pairs x 2 pieces, rows of 128 B */
    static constexpr int ast = 128 * 128;                 /* A stage: 128 weight rows of 128 B */
    static constexpr int b = 0;                           /* [NS][bst], 1024-aligned */
    static constexpr int a = b + MX_W3_NS * bst;          /* [NS][ast], 1024-aligned */
    static constexpr int d = a + MX_W3_NS * ast;          /* [NS][128] floats: d / 8 of the stage's super-block */
    static constexpr int yl = 132;
    static constexpr int y = d + MX_W3_NS * 128 * 4;      /* [128][yl] floats */
    static constexpr int grid = y + 128 * yl * 4;         /* the decode's tables (mx_tabs_init) */
    static constexpr int off = grid + MX_TAB_BYTES;
    static constexpr int sid = off + 128 * 8;
    static constexpr int se = sid + 128 * 4;
    static constexpr int bar = se + 128 * 4;              /* full[NS], empty[NS] */
    static constexpr int bytes = bar + 2 * MX_W3_NS * 8 + 1024;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

/* CB (layout 12): the consumers copy B (each of their 256 threads NP / 16 chunks a stage, two
 * stages ahead, once all 8 consumer warps have released the slot), the producer only decodes A */
template <int TYPE, int NP, bool CB>
__device__ __forceinline__ void mx_ws2_body(const cu_gemv_args &g, uint8_t *mx_sm, int start, int nt, int ex) {
    using L = mx_ws2_smem;
    const int abl = CB ? cu_mmx_abl : 0;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t r0 = (int64_t)blockIdx.x * 128;
    const uint8_t *wbase = (const uint8_t *)g.w + (int64_t)ex * g.expert_bytes;
    unsigned s_b;
    uint8_t *sm = mx_sm_1024(mx_sm, s_b);
    int64_t *soff = (int64_t *)(sm + L::off);
    int *sid = (int *)(sm + L::sid), *se = (int *)(sm + L::se);
    const uint4 *stab = (const uint4 *)(sm + L::grid);
    float *ys = (float *)(sm + L::y), *dsm = (float *)(sm + L::d);
    uint64_t *full = (uint64_t *)(sm + L::bar), *empty = full + MX_W3_NS;
    const uint8_t *act = (const uint8_t *)g.act;
    const int64_t n = g.in;
    mx_tile_rows(g, start, nt, tid, MX_W3_THREADS, sid, soff, se, NP);
    mx_tabs_init(sm + L::grid, tid, MX_W3_THREADS);
    for (int i = tid; i < 128 * L::yl; i += MX_W3_THREADS) ys[i] = 0.f;
    if (tid == 0) {
        for (int i = 0; i < MX_W3_NS; i++) { mbar_init(&full[i], CB ? 384 : 256); mbar_init(&empty[i], 8); }
        mbar_init_fence();
    }
    __syncthreads();
    const int nsb = (int)(n / 256), nst = nsb * 4;

    if (warp < 4) {
        /* the producer: thread tid's weight row, and its share of each stage's activation rows */
        const int row = tid;
        const int64_t rr = r0 + row;
        const uint8_t *wr = wbase + (rr < g.rows ? rr : g.rows - 1) * (int64_t)g.row_bytes;
        uint32_t raw[2][2][2];
        auto load_w = [&](int s, uint32_t (&r)[2][2]) {
            if (s >= nst) return;
#pragma unroll
            for (int q = 0; q < 2; q++) mx_iq2_raw<TYPE>(wr, 2 * s + q, r[q][0], r[q][1]);
        };
        load_w(0, raw[0]);
        load_w(1, raw[1]);
        float dv = 0.f;
        for (int sb = 0; sb < nsb; sb++) {
            dv = cu_h2f((uint16_t)mx_iq2_d<TYPE>(wr, sb, nsb)) * 0.125f;
#pragma unroll
            for (int st = 0; st < 4; st++) {
                const int s = sb * 4 + st, slot = s % MX_W3_NS;
                if (s >= MX_W3_NS) mbar_wait(&empty[slot], (uint32_t)((s / MX_W3_NS) - 1) & 1u);
                if constexpr (!CB) {
                    const unsigned bdst = s_b + (unsigned)(L::b + slot * L::bst);
                    const int64_t k0 = (int64_t)s * MX_BK;
#pragma unroll
                    for (int i = 0; i < NP / 8; i++) {
                        const int ci = tid + 128 * i, brow = ci >> 3, j = ci & 7;
                        const uint8_t *src = act + soff[brow >> 1] + 16 + ((brow & 1) * n + k0 + j * 8) * 2;
                        mx_cp16(bdst + (unsigned)(brow * 128 + ((j ^ (brow & 7)) << 4)), src);
                    }
                    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bulk_saddr(&full[slot])) : "memory");
                }
                dsm[slot * 128 + row] = dv;
                uint8_t *arow = sm + L::a + slot * L::ast + row * 128;
                if (!(abl & 1)) {
#pragma unroll
                    for (int q = 0; q < 2; q++)
#pragma unroll
                        for (int c = 0; c < 4; c++) {
                            uint32_t o[4];
                            mx_iq2_entry_t(raw[st & 1][q][0], raw[st & 1][q][1], c, stab, o);
                            const int j = 4 * q + c;
                            *(uint4 *)(arow + ((j ^ (row & 7)) << 4)) = make_uint4(o[0], o[1], o[2], o[3]);
                        }
                }
                load_w(s + 2, raw[st & 1]);
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   /* the A stores, for the tensor cores */
                mbar_arrive(&full[slot]);
            }
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        return;
    }

    /* the consumers: warpgroup 1 rows 0-63, 2 rows 64-127; thread (g, c) of a warp: rows g, g + 8 */
    const int cw = warp - 4, cwg = cw >> 2, gq = lane >> 2, c = lane & 3;
    int yrow[2];
#pragma unroll
    for (int j = 0; j < 2; j++) yrow[j] = cwg * 64 + (cw & 3) * 16 + gq + 8 * j;
    float acc[NP];
#pragma unroll
    for (int i = 0; i < NP; i++) acc[i] = 0.f;
    auto release = [&](int s) {
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s % MX_W3_NS]);
    };
    /* CB: stage s's B (its slot free: the 8 consumer warps' releases of stage s - NS), each
     * consumer thread NP / 16 chunks; the copies arrive on full[slot] as they land */
    const int ct = tid - 128;
    auto copy_b = [&](int s) {
        if constexpr (CB) {
            if (s >= nst) return;
            const int slot = s % MX_W3_NS;
            if (s >= MX_W3_NS) mbar_wait(&empty[slot], (uint32_t)((s / MX_W3_NS) - 1) & 1u);
            if (!(abl & 4)) {
                const unsigned bdst = s_b + (unsigned)(L::b + slot * L::bst);
                const int64_t k0 = (int64_t)s * MX_BK;
#pragma unroll
                for (int i = 0; i < NP / 16; i++) {
                    const int ci = ct + 256 * i, brow = ci >> 3, j = ci & 7;
                    /* padding pairs keep whatever the slot held: their columns are never stored */
                    if ((brow >> 1) >= nt) continue;
                    const uint8_t *src = act + soff[brow >> 1] + 16 + ((brow & 1) * n + k0 + j * 8) * 2;
                    mx_cp16(bdst + (unsigned)(brow * 128 + ((j ^ (brow & 7)) << 4)), src);
                }
                asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bulk_saddr(&full[slot])) : "memory");
            } else {
                mbar_arrive(&full[slot]);
            }
        }
    };
    copy_b(0);
    copy_b(1);
    for (int sb = 0; sb < nsb; sb++) {
#pragma unroll
        for (int st = 0; st < 4; st++) {
            const int s = sb * 4 + st, slot = s % MX_W3_NS;
            mbar_wait(&full[slot], (uint32_t)(s / MX_W3_NS) & 1u);
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
            const unsigned sa = s_b + (unsigned)(L::a + slot * L::ast + cwg * 64 * 128);
            const unsigned sbb = s_b + (unsigned)(L::b + slot * L::bst);
#pragma unroll
            for (int k = 0; k < 4; k++) mx_wgmma_ss(acc, mx_wg_desc(sa + (unsigned)(k * 32)), mx_wg_desc(sbb + (unsigned)(k * 32)));
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            wg_pin(acc);
            if (st != 3) {
                asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
                wg_pin(acc);
                if (st != 0) release(s - 1);
                copy_b(s + 2);
            } else {
                asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
                wg_pin(acc);
                release(s - 1);
                copy_b(s + 2);
                if (!(abl & 2)) mx_y_fold<NP>(ys, L::yl, yrow, c, dsm[slot * 128 + yrow[0]], dsm[slot * 128 + yrow[1]], acc);
                release(s);
            }
        }
    }
    if constexpr (CB) asm volatile("cp.async.wait_all;\n" ::: "memory");
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
    mx_y_store(g, ys, L::yl, sid, se, nt, r0, cw, 8, lane);
}
#endif

template <int TYPE, bool CB>
__global__ void __launch_bounds__(MX_W3_THREADS, 1) k_mmx_ws2(cu_gemv_args g) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(TYPE == CU_TYPE_IQ2R || TYPE == CU_TYPE_IQ2_XXS, "IQ2 only");
    extern __shared__ __align__(16) uint8_t mx_sm[];
    cu_pdl_enter();
    int start, nt, ex;
    bool two;
    if (!mx_pair_tile(g, &start, &nt, &ex, &two)) return;
    /* layout 12: the pair count rounded up to 96, 112 or 128 (n192, n224, n256: Flash's ~96
     * pairs an expert multiply less padding); layout 11 as measured, 64 or 128 */
    if (!two) mx_ws2_body<TYPE, 64, CB>(g, mx_sm, start, nt, ex);
    else if constexpr (CB) {
        if (nt <= 96) mx_ws2_body<TYPE, 96, CB>(g, mx_sm, start, nt, ex);
        else if (nt <= 112) mx_ws2_body<TYPE, 112, CB>(g, mx_sm, start, nt, ex);
        else mx_ws2_body<TYPE, 128, CB>(g, mx_sm, start, nt, ex);
    } else {
        mx_ws2_body<TYPE, 128, CB>(g, mx_sm, start, nt, ex);
    }
#endif
}

/* ------------------------------------------------------------------ */
/* host side */

/* The switches: MINKE_CUDA_MMX (default on), MINKE_CUDA_MMX_Q2K (the Q2_K down products too:
 * by default where the wgmma layout takes them, 4.30 against the int8 path's 5.68 ms on
 * Flash's shape; layout 1's are slower than the int8 path, 6.0 ms: 1 forces them on, 0 off),
 * and the prompt size from which the backend takes it (MINKE_CUDA_MMX_MIN tokens, default
 * 256: the tiny models' prompts keep the int8 kernels, whose exact item sums the CPU
 * comparisons with the simulations on rely on; run-cuda.sh forces this path there too). */
static int mx_on = -1, mx_q2k = -1, mx_min = 256;
static int mx_enabled(void) {
    if (mx_on < 0) {
        const char *e = getenv("MINKE_CUDA_MMX");
        mx_on = e ? atoi(e) != 0 : 1;
        const char *q = getenv("MINKE_CUDA_MMX_Q2K");
        mx_q2k = q && *q ? atoi(q) != 0 : -1;
        const char *m = getenv("MINKE_CUDA_MMX_MIN");
        if (m && atoi(m) > 0) mx_min = atoi(m);
    }
    return mx_on;
}
extern "C" void cu_mmx_set(int on, int q2k, int min_tokens) {
    (void)mx_enabled();
    mx_on = on != 0;
    mx_q2k = q2k < 0 ? -1 : q2k != 0;
    if (min_tokens > 0) mx_min = min_tokens;
}
extern "C" int cu_mmx_min_tokens(void) { return mx_enabled() ? mx_min : 0; }

extern "C" int64_t cu_mmx_split_row_bytes(int wtype, int64_t n) {
    return 16 + 4 * n + (wtype == CU_TYPE_Q2_K ? n / 4 : 0);
}

/* The block layout (MINKE_CUDA_MMX_TILE): 9 (default; layout 1 where it cannot run; IQ2 only,
 * the Q2_K down then runs 6), 6, 7 and 8: the wgmma kernels (k_mmx_wg2, k_mmx_wg; sm_90a: IQ2
 * and, in 6 and 8, Q2_K; MINKE_CUDA_MMX_TILE_Q2K picks the down's own). 1: 4 x 2 warps of 32 x 32, 128 weight rows,
 * two blocks an SM; 2: 4 x 2 warps of 64 x 32, 256 rows, one block an SM; 3: 2 x 2 warps of
 * 64 x 32, 128 rows, two blocks an SM; 4: layout 1 with a ring of three activation stages (two
 * ahead; IQ2 only, Q2_K's larger blocks run 1). 2 and 3 read a third less from shared memory a
 * product but measured slower on Flash's IQ2 gate (4.66 and 4.40 ms against 4.27; the Q2_K down
 * 6.19 and 5.76 against 5.93); 4 gains 2% on the gate (4.12 against 4.21) and nothing measurable
 * on a prompt. 5: warp-specialised (k_mmx_ws: producer warps decode into a ring of four
 * stages, consumer warps multiply; IQ2 on sm_90: Q2_K runs 1, IQ2 elsewhere keeps the int8
 * path): 4.71 against layout 1's 4.20 ms. Flash's gate under 6: 3.93 ms, 7: 4.50, 8 (6 with
 * the ring on mbarriers, IQ2 and Q2_K): 4.08, 9: 3.16 (3.22 with skewed routing, 6: 3.87),
 * 11 (k_mmx_ws2, layout 9 warp-specialised; IQ2 only, the Q2_K down runs 6): 3.28 (3.47), 12
 * (11 with the consumers copying B, 96- / 112-pair bodies): 2.63-2.76 (3.04-3.26) against 9's
 * 3.12-3.16 (3.16-3.26), but 3.42-3.47 ms against 9's 3.31-3.37 in a prompt (its learned layers'
 * many lone tiles: one producer warpgroup decodes slower than layout 9's eight warps).
 * Kept for A/B (mmx_check --time; run-cuda.sh checks each). */
static int mx_tile(int wtype) {
    static int t = 0, tq = 0;
    if (!t) {
        const char *e = getenv("MINKE_CUDA_MMX_TILE"), *q = getenv("MINKE_CUDA_MMX_TILE_Q2K");
        t = e && *e ? atoi(e) : 9;
        if (t < 1 || t > 12 || t == 10) t = 9;
        /* the Q2_K down's own layout (for A/B): by default the IQ2 products', 6 under 9, 11 and 12 */
        tq = q && *q ? atoi(q) : t >= 9 ? 6 : t;
        if (tq < 1 || tq > 9) tq = t >= 9 ? 6 : t;
    }
    return wtype == CU_TYPE_Q2_K ? tq : t;
}

/* layouts 6-9, 11 and 12 apply to the IQ2 products (6 and 8: Q2_K too) where the sm_90a bodies
 * run: an sm_90 device running the sm_90a code (binary version 90). The split then writes the
 * permuted order 6-9 read (11 and 12: the natural order); both ask here, so the two always agree. */
static int mx_wg_ok(int wtype) {
    const int t = mx_tile(wtype), iq2 = wtype == CU_TYPE_IQ2R || wtype == CU_TYPE_IQ2_XXS;
    if (!(iq2 && t >= 6) && !(wtype == CU_TYPE_Q2_K && (t == 6 || t == 8))) return 0;
    static int ok[32];
    const int dev = cu_cur_dev();
    if (!ok[dev]) {
        int optin = 0;
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        ok[dev] = cu_sm90a_body((const void *)k_mmx_wg<CU_TYPE_IQ2R, 1>, dev) && optin >= mx_wg_smem<1, true>::bytes &&
                  optin >= (mx_tile(CU_TYPE_IQ2R) >= 11 ? mx_ws2_smem::bytes : mx_wg2_smem::bytes) ? 1 : -1;
    }
    return ok[dev] > 0;
}
static int mx_last_layout;
extern "C" int cu_mmx_last_layout(void) { return mx_last_layout; }

extern "C" int cu_mmx_supported(const cu_gemv_args *g) {
    if (!mx_enabled() || !g->act_f32 || !g->tile_pairs || g->group_rows) return 0;
    if (g->wtype == CU_TYPE_Q2_K ? !(mx_q2k > 0 || (mx_q2k < 0 && mx_wg_ok(CU_TYPE_Q2_K)))
                                 : g->wtype != CU_TYPE_IQ2R && g->wtype != CU_TYPE_IQ2_XXS) return 0;
    if (g->in % 256 || g->in <= 0 || g->rows <= 0) return 0;
    const uint64_t al = g->wtype == CU_TYPE_IQ2R ? 8 : g->wtype == CU_TYPE_Q2_K ? 4 : 2;
    if (((uintptr_t)g->w | g->row_bytes | g->expert_bytes) & (al - 1)) return 0;
    return 1;
}

/* k_mmx_split over nrows rows of n (x xstride bytes apart; GLU: the SwiGLU of x and glu.u,
 * its row in smem bytes of shared memory) */
template <bool GLU>
static void mx_split_launch(int wtype, const float *x, int64_t nrows, int64_t n, int64_t xstride, void *out,
                           const mx_glu &glu, size_t smem, cudaStream_t st) {
    const int64_t os = cu_mmx_split_row_bytes(wtype, n);
    /* the wgmma layouts read the permuted order (mx_wg_ok decides both) */
    const bool q2k = wtype == CU_TYPE_Q2_K, perm = mx_wg_ok(wtype) && mx_tile(wtype) < 11;   /* 11, 12: A in shared memory, natural order */
    void (*k)(const float *, int64_t, int64_t, int64_t, uint8_t *, int64_t, mx_glu) =
        q2k ? (perm ? k_mmx_split<true, true, GLU> : k_mmx_split<true, false, GLU>)
            : (perm ? k_mmx_split<false, true, GLU> : k_mmx_split<false, false, GLU>);
    cu_launch(k, dim3((unsigned)nrows), 256, smem, st, x, nrows, n, xstride, (uint8_t *)out, os, glu);
}

extern "C" int cu_mmx_split(int wtype, const float *x, int64_t nrows, int64_t n, int64_t xstride, void *out,
                            cudaStream_t st) {
    if (nrows <= 0 || n <= 0 || n % 256 || ((uintptr_t)x & 15) || xstride % 16 || ((uintptr_t)out & 15)) return 0;
    const mx_glu none = {nullptr, nullptr, 0.f};
    mx_split_launch<false>(wtype, x, nrows, n, xstride, out, none, 0, st);
    return 1;
}

/* MINKE_CUDA_MMX_GLU=0: the SwiGLU rows are written first (cu_swiglu) and split as any input */
extern "C" int cu_mmx_glu_enabled(void) {
    static int on = -1;
    if (on < 0) { const char *e = getenv("MINKE_CUDA_MMX_GLU"); on = !(e && *e && atoi(e) == 0); }
    return on;
}

extern "C" int cu_mmx_split_glu(int wtype, const float *g, const float *u, const float *w, float limit, int64_t nrows,
                                int64_t n, void *out, cudaStream_t st) {
    /* the row in shared memory beside the kernel's 144 static bytes: at most 48 KB without an opt-in */
    if (nrows <= 0 || n <= 0 || n % 256 || n > 12032 || ((uintptr_t)g & 15) || ((uintptr_t)u & 15) || ((uintptr_t)out & 15))
        return 0;
    const mx_glu glu = {u, w, limit};
    mx_split_launch<true>(wtype, g, nrows, n, n * 4, out, glu, (size_t)n * 4, st);
    return cudaGetLastError() == cudaSuccess;     /* a refused launch: the caller splits the SwiGLU rows instead */
}

/* A kernel's shared-memory request, once per device (attr: its per-device state, 1 set, -1
 * refused): 0 where the device cannot give the block smem bytes (the 99 KB of sm_86 / sm_89
 * for the larger layouts) or, with bulk, lacks the sm_90 body; the caller then keeps the int8
 * path */
static int mx_attr_ok(int *attr, const void *kernel, int smem, bool bulk) {
    const int dev = cu_cur_dev();
    int a = __atomic_load_n(&attr[dev], __ATOMIC_ACQUIRE);
    if (!a) {
        int optin = 0;
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        a = (!bulk || cu_gemv3_bulk_ok()) && smem <= optin &&
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) == cudaSuccess ? 1 : -1;
        cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared);
        cudaGetLastError();
        __atomic_store_n(&attr[dev], a, __ATOMIC_RELEASE);
    }
    return a > 0;
}

template <int TYPE, int R, int MW, int NS = 2>
static int mx_launch(const cu_gemv_args &g, int ntiles, cudaStream_t st) {
    const int smem = mx_smem<TYPE == CU_TYPE_Q2_K, MW * R, NS>::bytes;
    static int attr[32];
    if (!mx_attr_ok(attr, (const void *)k_mmx<TYPE, R, MW, NS>, smem, false)) return 0;
    dim3 grid((unsigned)((g.rows + MW * R - 1) / (MW * R)), (unsigned)ntiles);
    cu_launch(k_mmx<TYPE, R, MW, NS>, grid, MW * 64, (size_t)smem, st, g);
    return 1;
}

/* the wgmma variants (mx_wg_ok has checked the device) */
template <int TYPE, int MH, bool MB = false>
static int mx_launch_wg(const cu_gemv_args &g, int ntiles, cudaStream_t st) {
    static int attr[32];
    constexpr int smem = mx_wg_smem<MH, TYPE == CU_TYPE_Q2_K>::bytes;
    if ((int64_t)ntiles * MH > 65535) return 0;
    if (!mx_attr_ok(attr, (const void *)k_mmx_wg<TYPE, MH, MB>, smem, false)) return 0;
    dim3 grid((unsigned)((g.rows + 128 * MH - 1) / (128 * MH)), (unsigned)(ntiles * MH));
    cu_launch(k_mmx_wg<TYPE, MH, MB>, grid, MX_WG_THREADS, (size_t)smem, st, g);
    return 1;
}

/* the timing ablations' switch into cu_mmx_abl, once per device (unset: the variable's 0
 * stands, nothing is copied) */
static int mx_abl_set(void) {
    static int abl_set[32];
    const int dev = cu_cur_dev();
    if (!__atomic_load_n(&abl_set[dev], __ATOMIC_ACQUIRE)) {
        const char *e = getenv("MINKE_CUDA_MMX_ABL");
        const int v = e ? atoi(e) : 0;
        if (v && cudaMemcpyToSymbol(cu_mmx_abl, &v, sizeof v) != cudaSuccess) { cudaGetLastError(); return 0; }
        __atomic_store_n(&abl_set[dev], 1, __ATOMIC_RELEASE);
    }
    return 1;
}

/* layout 9: a block per expert's tile pair or lone last tile (the odd tiles' blocks return at
 * once) */
template <int TYPE>
static int mx_launch_wg2(const cu_gemv_args &g, int ntiles, cudaStream_t st) {
    static int attr[32];
    constexpr int smem = mx_wg2_smem::bytes;
    if (ntiles > 65535) return 0;
    if (!mx_attr_ok(attr, (const void *)k_mmx_wg2<TYPE>, smem, false)) return 0;
    if (!mx_abl_set()) return 0;
    dim3 grid((unsigned)((g.rows + 127) / 128), (unsigned)ntiles);
    cu_launch(k_mmx_wg2<TYPE>, grid, MX_WG_THREADS, (size_t)smem, st, g);
    return 1;
}

/* layout 11: as layout 9's grid, 384 threads */
template <int TYPE, bool CB>
static int mx_launch_ws2(const cu_gemv_args &g, int ntiles, cudaStream_t st) {
    static int attr[32];
    constexpr int smem = mx_ws2_smem::bytes;
    if (ntiles > 65535) return 0;
    if (!mx_attr_ok(attr, (const void *)k_mmx_ws2<TYPE, CB>, smem, false)) return 0;
    if (!mx_abl_set()) return 0;
    dim3 grid((unsigned)((g.rows + 127) / 128), (unsigned)ntiles);
    cu_launch(k_mmx_ws2<TYPE, CB>, grid, MX_W3_THREADS, (size_t)smem, st, g);
    return 1;
}

/* the warp-specialised variant: its body exists only in the sm_90 code */
template <int TYPE>
static int mx_launch_ws(const cu_gemv_args &g, int ntiles, cudaStream_t st) {
    static int attr[32];
    if (!mx_attr_ok(attr, (const void *)k_mmx_ws<TYPE>, mx_ws_smem::bytes, true)) return 0;
    dim3 grid((unsigned)((g.rows + 127) / 128), (unsigned)ntiles);
    cu_launch(k_mmx_ws<TYPE>, grid, MX_WS_THREADS, (size_t)mx_ws_smem::bytes, st, g);
    return 1;
}

template <int TYPE>
static int mx_pick_run(const cu_gemv_args &g, int ntiles, cudaStream_t st, int *layout) {
    /* the split was permuted for layouts 6-9 exactly where mx_wg_ok holds (not for 11) */
    if (mx_wg_ok(g.wtype)) {
        const int t = mx_tile(g.wtype);
        *layout = t;
        if (t == 8) return mx_launch_wg<TYPE, 1, true>(g, ntiles, st);
        if constexpr (TYPE == CU_TYPE_Q2_K) return mx_launch_wg<TYPE, 1>(g, ntiles, st);
        else return t == 12 ? mx_launch_ws2<TYPE, true>(g, ntiles, st) : t == 11 ? mx_launch_ws2<TYPE, false>(g, ntiles, st) : t == 9 ? mx_launch_wg2<TYPE>(g, ntiles, st)
                    : t == 7 ? mx_launch_wg<TYPE, 2>(g, ntiles, st) : mx_launch_wg<TYPE, 1>(g, ntiles, st);
    }
    *layout = mx_tile(g.wtype) >= 6 ? 1 : mx_tile(g.wtype);
    switch (mx_tile(g.wtype)) {
    case 5:
        if constexpr (TYPE != CU_TYPE_Q2_K) return mx_launch_ws<TYPE>(g, ntiles, st);
        return mx_launch<TYPE, 32, 4>(g, ntiles, st);
    case 2: return mx_launch<TYPE, 64, 4>(g, ntiles, st);
    case 3: return mx_launch<TYPE, 64, 2>(g, ntiles, st);
    case 4:     /* three activation stages: two blocks an SM hold them for the IQ2 layouts only */
        if constexpr (TYPE != CU_TYPE_Q2_K) return mx_launch<TYPE, 32, 4, 3>(g, ntiles, st);
        return mx_launch<TYPE, 32, 4>(g, ntiles, st);
    default: return mx_launch<TYPE, 32, 4>(g, ntiles, st);
    }
}
/* the layout reported (cu_mmx_last_layout) only for a product that launched; 0 when refused */
template <int TYPE>
static int mx_pick(const cu_gemv_args &g, int ntiles, cudaStream_t st) {
    int layout = 0;
    const int ok = mx_pick_run<TYPE>(g, ntiles, st, &layout);
    mx_last_layout = ok ? layout : 0;
    return ok;
}

/* MINKE_CUDA_MMX_HIST=n (a diagnostic): the first n products print their experts' pair counts
 * as a histogram of the blocks layouts 9 and 12 make (synchronises: not under graph capture) */
static void mx_hist(const cu_gemv_args &g, int ntiles, cudaStream_t st) {
    static int left = -2;     /* -2: the environment not read yet; <= 0 after: nothing to print */
    int l = __atomic_load_n(&left, __ATOMIC_ACQUIRE);
    if (l == -2) {
        const char *e = getenv("MINKE_CUDA_MMX_HIST");
        l = e && atoi(e) > 0 ? atoi(e) : 0;
        __atomic_store_n(&left, l, __ATOMIC_RELEASE);
    }
    if (l <= 0 || __atomic_fetch_sub(&left, 1, __ATOMIC_ACQ_REL) <= 0) return;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(st, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) { cudaGetLastError(); return; }
    int nt = 0;
    int *tc = (int *)malloc(sizeof(int) * ntiles), *tx = (int *)malloc(sizeof(int) * ntiles);
    if (tc && tx && cudaStreamSynchronize(st) == cudaSuccess &&
        cudaMemcpy(&nt, g.n_tiles, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess && nt <= ntiles &&
        cudaMemcpy(tc, g.tile_count, sizeof(int) * nt, cudaMemcpyDeviceToHost) == cudaSuccess &&
        cudaMemcpy(tx, g.tile_expert, sizeof(int) * nt, cudaMemcpyDeviceToHost) == cudaSuccess) {
        /* blocks by pairs: a lone tile <= 64, two tiles <= 96, <= 112, <= 128 (tiles of experts
         * another GPU owns, count 0, make none) */
        long bl[4] = {0, 0, 0, 0}, pairs = 0, experts = 0;
        for (int i = 0; i < nt;) {
            int j = i, cnt = 0;
            for (; j < nt && tx[j] == tx[i]; j++)
                if (tc[j] > 0) cnt += tc[j];
            if (tc[i] > 0) {
                experts++;
                pairs += cnt;
                for (int k = i; k < j; k += 2) {
                    const int p = tc[k] + (k + 1 < j ? tc[k + 1] : 0);
                    bl[k + 1 < j ? (p <= 96 ? 1 : p <= 112 ? 2 : 3) : 0]++;
                }
            }
            i = j;
        }
        fprintf(stderr, "mmx hist: %lld rows x %ld pairs in %d tiles of %ld experts; blocks a row tile: lone %ld, "
                "two <= 96 pairs %ld, <= 112 %ld, <= 128 %ld\n", (long long)g.rows, pairs, nt, experts, bl[0], bl[1], bl[2],
                bl[3]);
    }
    cudaGetLastError();
    free(tc);
    free(tx);
}

/* g: MoE tiles, act = rows of cu_mmx_split (act_stride their bytes), act_div pairs -> rows */
extern "C" int cu_mmx(const cu_gemv_args *ga, int ntiles, cudaStream_t st) {
    if (!cu_mmx_supported(ga) || ntiles <= 0) return 0;
    mx_hist(*ga, ntiles, st);
    cu_gemv_args g = *ga;
    /* rows split for this product: the pieces' offsets come from g.in, Q2_K's sums must exist */
    if (((uintptr_t)g.act & 15) || g.act_stride != cu_mmx_split_row_bytes(g.wtype, g.in)) return 0;
    if (g.act_div <= 0) g.act_div = 1;
    switch (g.wtype) {
    case CU_TYPE_Q2_K: return mx_pick<CU_TYPE_Q2_K>(g, ntiles, st);
    case CU_TYPE_IQ2R: return mx_pick<CU_TYPE_IQ2R>(g, ntiles, st);
    default: return mx_pick<CU_TYPE_IQ2_XXS>(g, ntiles, st);
    }
}

extern "C" int cu_mmx_tables_init(const uint64_t *grid) {
    return cudaMemcpyToSymbol(cu_mmx_grid, grid, sizeof(uint64_t) * 256) == cudaSuccess ? 0 : -1;
}
