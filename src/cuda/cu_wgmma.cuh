/* cu_wgmma.cuh: operand lists for the inline-assembly wrappers of Hopper's
 * warpgroup MMA (wgmma.mma_async, sm_90a), shared by the kernels that issue it
 * (cu_mmx.cu's expert products, cu_attn_wg.cu's prefill attention).
 *
 * Why macros: a wgmma of N output columns has N / 2 f32 accumulators a thread,
 * each an asm operand; MX_ACCn spells the operands %0 .. %(n - 1) and MX_Dn
 * their "+f" constraints on an array d[n], so that a wrapper is one line:
 * WG_MMA_RS / WG_MMA_SS define FN(d, a or desc_a, desc_b), D[64 x N] += A B
 * over k16 in f16 with f32 sums, A in registers (RS) or shared memory (SS),
 * B in shared memory, N-major where TB is 1. The instantiations belong in
 * sm_90a code (__CUDA_ARCH_FEAT_SM90_ALL). */
#pragma once

#define MX_WG_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define MX_ACC16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define MX_D16 MX_WG_D8(0), MX_WG_D8(8)
#define MX_ACC32 MX_ACC16 ", " "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define MX_D32 MX_D16, MX_WG_D8(16), MX_WG_D8(24)
#define MX_ACC48 MX_ACC32 ", " "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define MX_D48 MX_D32, MX_WG_D8(32), MX_WG_D8(40)
#define MX_ACC64 MX_ACC48 ", " "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define MX_D64 MX_D48, MX_WG_D8(48), MX_WG_D8(56)
#define MX_ACC96 MX_ACC64 ", " "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define MX_D96 MX_D64, MX_WG_D8(64), MX_WG_D8(72), MX_WG_D8(80), MX_WG_D8(88)
#define MX_ACC112 MX_ACC96 ", " "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define MX_D112 MX_D96, MX_WG_D8(96), MX_WG_D8(104)
#define MX_ACC128 MX_ACC112 ", " "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define MX_D128 MX_D112, MX_WG_D8(112), MX_WG_D8(120)
#define WG_MMA_RS_AB(FN, NP, N, A0, A1, A2, A3, DB, TB, AB)                                              \
    __device__ __forceinline__ void FN(float (&d)[NP], const uint32_t (&a)[4], uint64_t desc) {              \
        asm volatile("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #AB "." #AB " {" MX_ACC##NP "}, "        \
                     "{%" #A0 ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #DB ", 1, 1, 1, " #TB ";\n"                 \
                     : MX_D##NP                                                                               \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));                               \
    }
/* f16 operands (WG_MMA_RS_AB with bf16: the same for bf16 operands) */
#define WG_MMA_RS(FN, NP, N, A0, A1, A2, A3, DB, TB) WG_MMA_RS_AB(FN, NP, N, A0, A1, A2, A3, DB, TB, f16)
#define WG_MMA_SS(FN, NP, N, DA, DB, TB)                                                                   \
    __device__ __forceinline__ void FN(float (&d)[NP], uint64_t da, uint64_t db) {                           \
        asm volatile("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16 {" MX_ACC##NP "}, "                \
                     "%" #DA ", %" #DB ", 1, 1, 1, 0, " #TB ";\n"                                             \
                     : MX_D##NP                                                                               \
                     : "l"(da), "l"(db));                                                                     \
    }
/* the accumulators pinned around the asynchronous products (the compiler must not move their
 * reads or writes across a wgmma fence or wait) */
template <int N>
__device__ __forceinline__ void wg_pin(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* a no-swizzle shared-memory matrix descriptor: core matrices of 8 rows x 16
 * bytes stored as 128 contiguous bytes; lbo / sbo the byte distances between
 * core matrices adjacent in K / in M or N */
__device__ __forceinline__ uint64_t wg_desc(unsigned saddr, unsigned lbo, unsigned sbo) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}
