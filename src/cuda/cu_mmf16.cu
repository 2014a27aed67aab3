/* cu_mmf16.cu: F16 weights x exact f32 activations for prefill batches on
 * the f16 tensor cores (the compressor, indexer and router projections),
 * reached through cu_mmq (cu_mmq.cu) like the quantized types. A file of its
 * own: f16 operands need none of cu_mmq.cu's int8 machinery.
 */
#include <stdint.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_ops.h"

#define MF_BM 64
#define MF_BN 64
#define MF_THREADS 128

/* ------------------------------------------------------------------ */
/* F16 weights x f32 activations on the f16 tensor cores (m16n8k16, f32
 * accumulate). The activation is split into hi = f16(x) and lo = f16(x - hi)
 * and both are multiplied (the f16 x f16 products are exact in f32), so the
 * result keeps ~22 bits of the activation instead of f16's 11: the CPU's f32
 * product within float rounding. Block: 64 rows x 64 tokens, stages of 64. */
#define MF_K 64
#define MF_LDW (MF_K / 2 + 4)     /* 32-bit words per shared row (f16 pairs) + pad */

__device__ __forceinline__ void mma_f16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__global__ void __launch_bounds__(MF_THREADS) k_mmf16(cu_gemv_args g) {
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
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int n4 = 0; n4 < 4; n4++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int64_t row = r0 + wm + mt * 16 + gq + (c >> 1) * 8;
                int n = wn + n4 * 8 + 2 * tq + (c & 1);
                if (row < g.rows && n < nt) {
                    float *o = g.out + (int64_t)(t0 + n) * g.out_stride + row;
                    if (g.accumulate) *o += acc[mt][n4][c]; else *o = acc[mt][n4][c];
                }
            }
}

extern "C" int cu_mmf16_supported(const cu_gemv_args *g) {
    /* dense only, 16-byte aligned rows and activations */
    return !g->tile_pairs && !g->group_rows && g->in % MF_K == 0 && g->row_bytes % 16 == 0 &&
           g->act_stride % 16 == 0 && ((uintptr_t)g->w & 15) == 0 && ((uintptr_t)g->act & 15) == 0;
}

extern "C" void cu_mmf16(const cu_gemv_args *g, int ntiles, cudaStream_t st) {
    dim3 grid((unsigned)((g->rows + MF_BM - 1) / MF_BM), (unsigned)ntiles);
    cu_launch(k_mmf16, grid, MF_THREADS, 0, st, *g);
}
