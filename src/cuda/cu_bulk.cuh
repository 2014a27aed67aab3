/* cu_bulk.cuh: bulk copies from global into shared memory (cp.async.bulk,
 * sm_90) completed on mbarriers, for the streamed decode products.
 *
 * Why: a decode product reads each weight byte once, and on the H200 a
 * kernel of plain loads keeps too few bytes in flight per SM to cover the
 * memory latency (Little's law: ~30 KB an SM at 4.8 TB/s), the more so while
 * its blocks start and drain. One thread can put a whole stage of rows (tens
 * of KB) in flight with one instruction, before the kernel even waits for the
 * previous one (weights are never written in a step), and the warps that
 * compute read the rows from shared memory when the stage's barrier says
 * they have arrived. Everything here exists only on sm_90+: callers check
 * cu_bulk_supported() on the host and compile their kernels' bodies under
 * CU_BULK_ARCH. */
#ifndef MINKE_CU_BULK_CUH
#define MINKE_CU_BULK_CUH

#include <stdint.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define CU_BULK_ARCH 1
#else
#define CU_BULK_ARCH 0
#endif

__device__ __forceinline__ uint32_t bulk_saddr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

#if CU_BULK_ARCH
/* one barrier expecting `count` arrivals a phase; the fence makes the
 * initialised barrier visible to the bulk copies (the async proxy) */
__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bulk_saddr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bulk_saddr(bar)) : "memory");
}
/* the producer's arrival, announcing the bytes the phase's copies bring */
__device__ __forceinline__ void mbar_arrive_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bulk_saddr(bar)), "r"(bytes) : "memory");
}
/* wait until the phase of the given parity has completed */
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT;\n"
                 "}\n" ::"r"(bulk_saddr(bar)),
                 "r"(parity)
                 : "memory");
}
/* bytes (a multiple of 16; both addresses 16-byte aligned) from global to
 * shared, completing on bar; evict-first in L2: weights are read once a step */
__device__ __forceinline__ void bulk_g2s(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
                 ::"r"(bulk_saddr(dst)), "l"(src), "r"(bytes), "r"(bulk_saddr(bar)), "l"(pol)
                 : "memory");
}
#endif

#endif
