/* cu_mmf16.cu: F16 weights x exact f32 activations for prefill batches on
 * the f16 tensor cores (the compressor, indexer and router projections),
 * reached through cu_mmq (cu_mmq.cu) like the quantized types, and
 * cu_mmf16_multi: several F16 matrices over one input in one launch. A file
 * of its own: f16 operands need none of cu_mmq.cu's int8 machinery.
 *
 * Numerics (both kernels): every activation x is split into hi = f16(x) and
 * lo = f16(x - hi), and W.lo then W.hi are multiplied per step of 16 inputs
 * (mma m16n8k16, f16 x f16 products exact in f32, f32 accumulation), so the
 * result keeps ~22 bits of x: the CPU's f32 product within float rounding.
 * A token's output depends only on its own activation row and on the
 * weights' shape (never on the batch size or on timing): the tile shape is
 * chosen from the row count alone, and partial sums over K meet in a fixed
 * order inside a block (no atomics, no scratch memory).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_ops.h"

#define MF_BM 64
#define MF_BN 64
#define MF_THREADS 128

/* ------------------------------------------------------------------ */
/* The first kernel (MINKE_CUDA_MMF16=0, kept for A/B): F16 weights x f32
 * activations on the f16 tensor cores (m16n8k16, f32 accumulate), the split
 * done while staging. Block: 64 rows x 64 tokens, stages of 64 inputs loaded
 * synchronously (no overlap of loads and mma). */
#define MF_K 64
#define MF_LDW (MF_K / 2 + 4)     /* 32-bit words per shared row (f16 pairs) + pad */

__device__ __forceinline__ void mma_f16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* a warp's MT x 4 tiles of 16 x 8 outputs (rows from row0, tokens t0 + n0 ..)
 * stored or added, rows past `rows` and tokens past nt left alone: both
 * kernels' last step */
template <int MT>
__device__ __forceinline__ void mf_store(const float (&acc)[MT][4][4], float *out, int64_t ostride, int64_t rows,
                                         int64_t row0, int t0, int n0, int nt, int gq, int tq, int accumulate) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n4 = 0; n4 < 4; n4++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int64_t row = row0 + mt * 16 + gq + (c >> 1) * 8;
                int n = n0 + n4 * 8 + 2 * tq + (c & 1);
                if (row < rows && n < nt) {
                    float *o = out + (int64_t)(t0 + n) * ostride + row;
                    if (accumulate) *o += acc[mt][n4][c]; else *o = acc[mt][n4][c];
                }
            }
}

__global__ void __launch_bounds__(MF_THREADS) k_mmf16_v0(cu_gemv_args g) {
    cu_pdl_enter();
    __shared__ __align__(16) uint32_t sw[MF_BM * MF_LDW];
    __shared__ __align__(16) uint32_t sh[MF_BN * MF_LDW];
    __shared__ __align__(16) uint32_t sl[MF_BN * MF_LDW];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gq = lane >> 2, tq = lane & 3;
    const int wm = (warp & 1) * 32, wn = (warp >> 1) * 32;
    const int64_t r0 = (int64_t)blockIdx.x * MF_BM;
    const int t0 = blockIdx.y * MF_BN;
    const int nt = g.ntok - t0 < MF_BN ? g.ntok - t0 : MF_BN;
    float acc[2][4][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 4; b++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[a][b][c] = 0.f;
    for (int k0 = 0; k0 < g.in; k0 += MF_K) {
        /* weights: 64 rows x 64 halves = 8 uint4 per row; 4 per thread */
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int idx = tid + j * MF_THREADS, r = idx >> 3, c = idx & 7;
            int64_t row = r0 + r < g.rows ? r0 + r : g.rows - 1;
            uint4 v = *(const uint4 *)((const uint8_t *)g.w + row * (int64_t)g.row_bytes + (int64_t)(k0 + 8 * c) * 2);
            *(uint4 *)&sw[r * MF_LDW + 4 * c] = v;
        }
        /* activations: 64 tokens x 64 floats = 16 float4 per token; 8 per thread */
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int idx = tid + j * MF_THREADS, n = idx >> 4, c = idx & 15;
            int tok = t0 + (n < nt ? n : 0);
            float4 x = *(const float4 *)((const uint8_t *)g.act + (int64_t)tok * g.act_stride + (int64_t)(k0 + 4 * c) * 4);
            __half h0 = __float2half_rn(x.x), h1 = __float2half_rn(x.y), h2 = __float2half_rn(x.z), h3 = __float2half_rn(x.w);
            __half l0 = __float2half_rn(x.x - __half2float(h0)), l1 = __float2half_rn(x.y - __half2float(h1));
            __half l2 = __float2half_rn(x.z - __half2float(h2)), l3 = __float2half_rn(x.w - __half2float(h3));
            uint2 hv, lv;
            hv.x = (uint32_t)__half_as_ushort(h0) | ((uint32_t)__half_as_ushort(h1) << 16);
            hv.y = (uint32_t)__half_as_ushort(h2) | ((uint32_t)__half_as_ushort(h3) << 16);
            lv.x = (uint32_t)__half_as_ushort(l0) | ((uint32_t)__half_as_ushort(l1) << 16);
            lv.y = (uint32_t)__half_as_ushort(l2) | ((uint32_t)__half_as_ushort(l3) << 16);
            *(uint2 *)&sh[n * MF_LDW + 2 * c] = hv;
            *(uint2 *)&sl[n * MF_LDW + 2 * c] = lv;
        }
        __syncthreads();
#pragma unroll
        for (int s16 = 0; s16 < MF_K / 16; s16++) {
            uint32_t bh[4][2], bl[4][2];
#pragma unroll
            for (int n4 = 0; n4 < 4; n4++) {
                int rb = (wn + n4 * 8 + gq) * MF_LDW + s16 * 8 + tq;
                bh[n4][0] = sh[rb]; bh[n4][1] = sh[rb + 4];
                bl[n4][0] = sl[rb]; bl[n4][1] = sl[rb + 4];
            }
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                int ra = (wm + mt * 16 + gq) * MF_LDW + s16 * 8 + tq;
                uint32_t a0 = sw[ra], a1 = sw[ra + 8 * MF_LDW], a2 = sw[ra + 4], a3 = sw[ra + 8 * MF_LDW + 4];
#pragma unroll
                for (int n4 = 0; n4 < 4; n4++) {
                    mma_f16(acc[mt][n4], a0, a1, a2, a3, bl[n4][0], bl[n4][1]);
                    mma_f16(acc[mt][n4], a0, a1, a2, a3, bh[n4][0], bh[n4][1]);
                }
            }
        }
        __syncthreads();
    }
    mf_store(acc, g.out, g.out_stride, g.rows, r0 + wm, t0, wn, nt, gq, tq, g.accumulate);
}

/* ------------------------------------------------------------------ */
/* The pipelined kernel (default). Each block computes BM weight rows x BN
 * tokens; warps own 64-row x 32-token tiles (4 x 4 mma tiles, 64 f32
 * accumulators a thread). KS > 1 splits every K stage between KS groups of
 * warps (group g takes the stage's k16 steps g, g + KS, ...); after the loop
 * the groups' accumulators are summed through shared memory in group order,
 * so small row counts still fill the SMs without atomics or a second pass.
 *
 * Stages of BK inputs stream in with cp.async, NST deep: the f16 weights go
 * straight into their mma layout (rows of BK + 8 halves: the 8 row addresses
 * of an ldmatrix fall on distinct 16-byte bank groups), the activations stay
 * f32 (rows of BK + 8 floats: each 8-byte B-fragment load of a half warp
 * covers the 32 banks once) and are split into hi/lo while the fragments are
 * built, so no block writes shared memory twice and no launch needs a
 * scratch buffer (the compressor runs on a side stream concurrently with
 * other products, and each GPU has its own thread). Each warp converts its
 * 32 tokens once per k16 step for 4 row tiles: 8 conversions for 32 mma. */

struct mf_set {                /* one matrix of a launch */
    const uint8_t *w;
    float *out;
    int64_t rows, out_stride;
    uint64_t row_bytes;
    int blk0;                  /* first blockIdx.x of this matrix */
};
struct mf_args {
    mf_set set[CU_MMF16_MAX_SETS];
    int nsets;
    const uint8_t *act;        /* f32 rows */
    int64_t act_stride;        /* bytes */
    int in, ntok, accumulate;
};

template <int BM, int BN, int KS, int BK, int NST>
struct mf_cfg {
    static constexpr int WM = BM / 64, WN = BN / 32, WARPS = WM * WN * KS, THREADS = 32 * WARPS;
    static constexpr int LDW = BK + 8;           /* halves per shared weight row */
    static constexpr int LDA = BK + 8;           /* floats per shared activation row */
    static constexpr int W_BYTES = BM * LDW * 2, A_BYTES = BN * LDA * 4, STAGE = W_BYTES + A_BYTES;
    static constexpr int RED = (KS - 1) * BM * BN * 4;   /* the k groups' partial sums */
    static constexpr int SMEM = NST * STAGE > RED ? NST * STAGE : RED;
    static constexpr int WCH = BM * BK / 8, ACH = BN * BK / 4;   /* 16-byte chunks a stage */
    static constexpr int WPT = WCH / THREADS, APT = ACH / THREADS;
    static_assert(BM % 64 == 0 && BN % 32 == 0 && (BK / 16) % KS == 0, "tile");
    static_assert(WCH % THREADS == 0 && ACH % THREADS == 0, "staging");
};

/* mma_f16 without volatile: no side effects, so the compiler may schedule it */
__device__ __forceinline__ void mf_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mf_ldmatrix4(uint32_t (&r)[4], const void *p) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

/* hi = f16(x), lo = f16(x - hi) for a pair of consecutive inputs (the low
 * half holds the first), the same values as the first kernel's split */
__device__ __forceinline__ void mf_split2(float2 x, uint32_t &hi, uint32_t &lo) {
    __half2 h = __float22half2_rn(x);
    float2 hf = __half22float2(h);
    __half2 l = __float22half2_rn(make_float2(x.x - hf.x, x.y - hf.y));
    hi = *(uint32_t *)&h;
    lo = *(uint32_t *)&l;
}

template <int BM, int BN, int KS, int BK, int NST, int MINB>
__global__ void __launch_bounds__(mf_cfg<BM, BN, KS, BK, NST>::THREADS, MINB) k_mmf16p(mf_args a) {
    using C = mf_cfg<BM, BN, KS, BK, NST>;
    cu_pdl_enter();
    extern __shared__ __align__(16) uint8_t mf_smem[];
    /* the matrix of this block: unrolled so the parameters stay in the constant bank */
    const int bx = blockIdx.x;
    const uint8_t *W = a.set[0].w;
    float *out = a.set[0].out;
    int64_t rows = a.set[0].rows, ostride = a.set[0].out_stride;
    uint64_t rbytes = a.set[0].row_bytes;
    int blk0 = 0;
#pragma unroll
    for (int i = 1; i < CU_MMF16_MAX_SETS; i++)
        if (i < a.nsets && bx >= a.set[i].blk0) {
            W = a.set[i].w; out = a.set[i].out; rows = a.set[i].rows; ostride = a.set[i].out_stride;
            rbytes = a.set[i].row_bytes; blk0 = a.set[i].blk0;
        }
    const int64_t r0 = (int64_t)(bx - blk0) * BM;
    const int t0 = blockIdx.y * BN;
    const int nt = a.ntok - t0 < BN ? a.ntok - t0 : BN;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gq = lane >> 2, tq = lane & 3;
    const int wmn = warp % (C::WM * C::WN), kg = warp / (C::WM * C::WN);
    const int wm = (wmn % C::WM) * 64, wn = (wmn / C::WM) * 32;

    /* this thread's staging chunks: the global row pointers (rows and tokens
     * past the end read the last valid one; their results are never stored)
     * and the shared offsets within a stage */
    const uint8_t *wsrc[C::WPT], *asrc[C::APT];
    int wdst[C::WPT], adst[C::APT];
#pragma unroll
    for (int j = 0; j < C::WPT; j++) {
        int idx = tid + j * C::THREADS, r = idx / (BK / 8), c = idx % (BK / 8);
        int64_t row = r0 + r < rows ? r0 + r : rows - 1;
        wsrc[j] = W + row * (int64_t)rbytes + c * 16;
        wdst[j] = (r * C::LDW + c * 8) * 2;
    }
#pragma unroll
    for (int j = 0; j < C::APT; j++) {
        int idx = tid + j * C::THREADS, n = idx / (BK / 4), c = idx % (BK / 4);
        int tok = t0 + (n < nt ? n : nt - 1);
        asrc[j] = a.act + (int64_t)tok * a.act_stride + c * 16;
        adst[j] = C::W_BYTES + (n * C::LDA + c * 4) * 4;
    }
    auto stage_in = [&](int slot, int k0) {
        uint8_t *s = mf_smem + slot * C::STAGE;
#pragma unroll
        for (int j = 0; j < C::WPT; j++) cp_async16(s + wdst[j], wsrc[j] + (int64_t)k0 * 2);
#pragma unroll
        for (int j = 0; j < C::APT; j++) cp_async16(s + adst[j], asrc[j] + (int64_t)k0 * 4);
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[i][j][c] = 0.f;

    const int nk = a.in / BK;
#pragma unroll
    for (int s = 0; s < NST - 1; s++) {
        if (s < nk) stage_in(s, s * BK);
        cp_async_commit();
    }
    for (int kt = 0; kt < nk; kt++) {
        cp_async_wait<NST - 2>();
        __syncthreads();   /* stage kt landed for every thread; slot (kt - 1) % NST is free */
        if (kt + NST - 1 < nk) stage_in((kt + NST - 1) % NST, (kt + NST - 1) * BK);
        cp_async_commit();
        const uint8_t *s = mf_smem + (kt % NST) * C::STAGE;
        const __half *sw = (const __half *)s;
        const float *sa = (const float *)(s + C::W_BYTES);
#pragma unroll
        for (int ks = kg; ks < BK / 16; ks += KS) {
            uint32_t af[4][4];
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
                mf_ldmatrix4(af[mt], sw + (wm + mt * 16 + (lane & 15)) * C::LDW + ks * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int n4 = 0; n4 < 4; n4++) {
                const float *p = sa + (wn + n4 * 8 + gq) * C::LDA + ks * 16 + 2 * tq;
                uint32_t h0, l0, h1, l1;
                mf_split2(*(const float2 *)p, h0, l0);
                mf_split2(*(const float2 *)(p + 8), h1, l1);
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    mf_mma(acc[mt][n4], af[mt], l0, l1);
                    mf_mma(acc[mt][n4], af[mt], h0, h1);
                }
            }
        }
    }
    if (KS > 1) {
        /* the k groups' sums meet in group order: ((g0 + g1) + g2) + g3 */
        cp_async_wait<0>();
        __syncthreads();   /* every warp is done with the stages: reuse them */
        float *red = (float *)mf_smem;
        if (kg > 0) {
            float *p = red + ((kg - 1) * (C::WM * C::WN) + wmn) * 2048 + lane;
#pragma unroll
            for (int i = 0; i < 64; i++) p[i * 32] = acc[i >> 4][(i >> 2) & 3][i & 3];
        }
        __syncthreads();
        if (kg > 0) return;
#pragma unroll
        for (int g = 1; g < KS; g++) {
            const float *p = red + ((g - 1) * (C::WM * C::WN) + wmn) * 2048 + lane;
#pragma unroll
            for (int i = 0; i < 64; i++) acc[i >> 4][(i >> 2) & 3][i & 3] += p[i * 32];
        }
    }
    mf_store(acc, out, ostride, rows, r0 + wm, t0, wn, nt, gq, tq, a.accumulate);
}

/* The tile shapes, picked by the launch's total row count (never by the
 * token count: a token's bits must not depend on its batch). A block reads
 * K (2 BM + 4 BN) bytes from L2 (f16 weights, f32 activations) for BM BN K
 * products: tall tiles keep that traffic under the tensor cores' pace, and
 * every Flash shape gets about one block an SM at T = 4096:
 *   MF_HUGE  256 x 128 tokens, 16 warps, BK 32, 3 stages (120 KB): >= 1024
 *            rows (ratio-4 compressor kv or gate: 128 blocks; indexer q_b:
 *            1024 blocks);
 *   MF_BIG   128 x 128, 8 warps, BK 32, 3 stages (90 KB, 2 blocks an SM):
 *            385..1023 rows (ratio-128 compressor: 128 blocks);
 *   MF_MID   128 x 64, 8 warps as 2 k groups, BK 64, 3 stages (108 KB):
 *            129..384 rows (router, indexer compressor: 128 blocks);
 *   MF_SMALL 64 x 32, 4 warps as 4 k groups, BK 64, 4 stages (72 KB):
 *            <= 128 rows (indexer weights: 128 blocks). */
enum { MF_OLD = 0, MF_AUTO = 1, MF_HUGE = 2, MF_BIG = 3, MF_MID = 4, MF_SMALL = 5 };

template <int BM, int BN, int KS, int BK, int NST, int MINB>
static void mf_launch(const mf_args &a, int row_blocks, cudaStream_t st) {
    using C = mf_cfg<BM, BN, KS, BK, NST>;
    static unsigned ready = 0;
    if (cu_dev_first(&ready)) {
        cudaFuncSetAttribute(k_mmf16p<BM, BN, KS, BK, NST, MINB>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
        cudaFuncSetAttribute(k_mmf16p<BM, BN, KS, BK, NST, MINB>, cudaFuncAttributePreferredSharedMemoryCarveout,
                             (int)cudaSharedmemCarveoutMaxShared);
    }
    dim3 grid((unsigned)row_blocks, (unsigned)((a.ntok + BN - 1) / BN));
    cu_launch(k_mmf16p<BM, BN, KS, BK, NST, MINB>, grid, C::THREADS, (size_t)C::SMEM, st, a);
}

static int mf_bm(int v) { return v == MF_HUGE ? 256 : v == MF_SMALL ? 64 : 128; }

static void mf_run(mf_args &a, int v, cudaStream_t st) {
    const int bm = mf_bm(v);
    int blocks = 0;
    for (int i = 0; i < a.nsets; i++) {
        a.set[i].blk0 = blocks;
        blocks += (int)((a.set[i].rows + bm - 1) / bm);
    }
    switch (v) {
    case MF_SMALL: mf_launch<64, 32, 4, 64, 4, 2>(a, blocks, st); break;
    case MF_MID: mf_launch<128, 64, 2, 64, 3, 1>(a, blocks, st); break;
    case MF_BIG: mf_launch<128, 128, 1, 32, 3, 2>(a, blocks, st); break;
    default: mf_launch<256, 128, 1, 32, 3, 1>(a, blocks, st); break;
    }
}

/* MINKE_CUDA_MMF16: 0 the first kernel, 1 (default) the pipelined one with
 * the shape by row count, 2..5 force MF_HUGE/BIG/MID/SMALL; cu_mmf16_mode()
 * overrides it (the checks). */
static int mf_mode_set = -1;
static int mf_mode(void) {
    static int env = -1;
    if (mf_mode_set >= 0) return mf_mode_set;
    if (env < 0) {
        const char *e = getenv("MINKE_CUDA_MMF16");
        env = e ? atoi(e) : MF_AUTO;
        if (env < MF_OLD || env > MF_SMALL) env = MF_AUTO;
    }
    return env;
}
extern "C" int cu_mmf16_mode(int mode) {
    int prev = mf_mode_set;
    mf_mode_set = mode >= MF_OLD && mode <= MF_SMALL ? mode : -1;
    return prev;
}

static int mf_pick(int64_t total_rows) {
    int v = mf_mode();
    if (v != MF_AUTO) return v;
    return total_rows <= 128 ? MF_SMALL : total_rows <= 384 ? MF_MID : total_rows < 1024 ? MF_BIG : MF_HUGE;
}

static int mf_aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }

extern "C" int cu_mmf16_supported(const cu_gemv_args *g) {
    /* dense only, 16-byte aligned rows and activations */
    return !g->tile_pairs && !g->group_rows && g->in % MF_K == 0 && g->row_bytes % 16 == 0 &&
           g->act_stride % 16 == 0 && mf_aligned(g->w) && mf_aligned(g->act);
}

extern "C" void cu_mmf16(const cu_gemv_args *g, int ntiles, cudaStream_t st) {
    int v = mf_pick(g->rows);
    if (v == MF_OLD) {
        dim3 grid((unsigned)((g->rows + MF_BM - 1) / MF_BM), (unsigned)ntiles);
        cu_launch(k_mmf16_v0, grid, MF_THREADS, 0, st, *g);
        return;
    }
    /* the tokens the first kernel's ntiles tiles of 64 cover */
    int64_t ntok = (int64_t)ntiles * MF_BN < g->ntok ? (int64_t)ntiles * MF_BN : g->ntok;
    if (ntok <= 0 || g->rows <= 0) return;
    mf_args a;
    memset(&a, 0, sizeof a);
    a.set[0].w = (const uint8_t *)g->w; a.set[0].out = g->out; a.set[0].rows = g->rows;
    a.set[0].out_stride = g->out_stride; a.set[0].row_bytes = g->row_bytes;
    a.nsets = 1;
    a.act = (const uint8_t *)g->act; a.act_stride = g->act_stride;
    a.in = (int)g->in; a.ntok = (int)ntok; a.accumulate = g->accumulate;
    mf_run(a, v, st);
}

extern "C" int cu_mmf16_multi(const cu_mmf16_set *sets, int nsets, const float *x, int64_t in, int64_t x_stride,
                              int ntok, int accumulate, cudaStream_t st) {
    if (nsets < 1 || nsets > CU_MMF16_MAX_SETS || in % MF_K || in > INT32_MAX || x_stride % 16 || !mf_aligned(x))
        return 0;
    int64_t total = 0;
    for (int i = 0; i < nsets; i++) {
        if (sets[i].row_bytes % 16 || !mf_aligned(sets[i].w) || sets[i].row_bytes < (uint64_t)in * 2 || sets[i].rows <= 0)
            return 0;
        total += sets[i].rows;
    }
    if (ntok <= 0) return 1;
    int v = mf_pick(total);
    if (v == MF_OLD) {
        /* one launch of the first kernel a matrix */
        for (int i = 0; i < nsets; i++) {
            cu_gemv_args g;
            memset(&g, 0, sizeof g);
            g.w = sets[i].w; g.wtype = CU_TYPE_F16; g.rows = sets[i].rows; g.in = in; g.row_bytes = sets[i].row_bytes;
            g.act = x; g.act_f32 = 1; g.act_stride = x_stride; g.act_div = 1;
            g.out = sets[i].out; g.out_stride = sets[i].out_stride; g.accumulate = accumulate; g.ntok = ntok;
            dim3 grid((unsigned)((g.rows + MF_BM - 1) / MF_BM), (unsigned)((ntok + MF_BN - 1) / MF_BN));
            cu_launch(k_mmf16_v0, grid, MF_THREADS, 0, st, g);
        }
        return 1;
    }
    mf_args a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < nsets; i++) {
        a.set[i].w = (const uint8_t *)sets[i].w; a.set[i].out = sets[i].out; a.set[i].rows = sets[i].rows;
        a.set[i].out_stride = sets[i].out_stride; a.set[i].row_bytes = sets[i].row_bytes;
    }
    a.nsets = nsets;
    a.act = (const uint8_t *)x; a.act_stride = x_stride;
    a.in = (int)in; a.ntok = ntok; a.accumulate = accumulate;
    mf_run(a, v, st);
    return 1;
}
