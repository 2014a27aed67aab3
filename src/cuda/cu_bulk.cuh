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

#include "cuda/cu_common.cuh"

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

/* the same with the default L2 policy: data every block reads (a table) */
__device__ __forceinline__ void bulk_g2s_keep(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(bulk_saddr(dst)), "l"(src), "r"(bytes), "r"(bulk_saddr(bar))
                 : "memory");
}

/* A ring of nst stage buffers: full[i] completes when stage i's copies have
 * landed (one producer arrival + the bytes), empty[i] when its consumer
 * warp has released it (one arrival). Thread 0 initialises; the caller
 * then synchronises the block. */
__device__ __forceinline__ void bulk_ring_init(uint64_t *full, uint64_t *empty, int nst) {
    if (threadIdx.x == 0) {
        for (int i = 0; i < nst; i++) { mbar_init(&full[i], 1); mbar_init(&empty[i], 1); }
        mbar_init_fence();
    }
}

/* A copy warp's schedule: lane 0 issues stages 0 .. nst - 1 (every buffer
 * free), then the warp lets the next kernel launch (a copy warp reads only
 * what no kernel it overlaps writes), then lane 0 issues the rest, each as
 * its buffer is released (issue(s) waits for that itself). */
template <typename Issue>
__device__ __forceinline__ void bulk_produce(int nst, int ns, int lane, Issue &issue) {
    const int first = ns < nst ? ns : nst;
    if (lane == 0)
        for (int s = 0; s < first; s++) issue(s);
    __syncwarp();
    cu_pdl_launch_next();
    if (lane == 0)
        for (int s = first; s < ns; s++) issue(s);
}

/* The copy warp of the streamed MoE down kernels (cu_gemv3.cu, cu_moes.cu):
 * stage s holds rows r0 + (s / ne) rps .. (at most rps, up to r1) of slot
 * s % ne's expert sel[s % ne] (a slot of another GPU, sel < 0: an empty
 * stage, the barrier completed without bytes), on bulk_produce's schedule
 * (the selection is complete before the kernel starts: the callers' contract,
 * cu_moe_dec_down in cu_gemv3.h; not under MINKE_CUDA_SKIP=moe_gate_up, a
 * timing aid whose results are wrong anyway: the router then comes right
 * before and the copies may read an older selection). */
template <int ne, int rps>
__device__ __forceinline__ void bulk_moe_rows_producer(uint64_t *full, uint64_t *empty, int nst, int ns, int r0, int r1,
                                                       const uint8_t *w, uint64_t row_bytes, uint64_t expert_bytes,
                                                       const int *sel, uint8_t *stg, size_t sbytes, int lane) {
    /* sbytes = rps x row_bytes: a stage buffer */
    auto issue = [&](int s) {
        const int b = s % nst, e = s % ne, c = s / ne;
        if (s >= nst) mbar_wait(&empty[b], (uint32_t)((s / nst) - 1) & 1u);
        const int ex = sel[e];
        if (ex < 0) { mbar_arrive(&full[b]); return; }
        const int rs = r0 + c * rps, nr = r1 - rs < rps ? r1 - rs : rps;
        const uint32_t bytes = (uint32_t)nr * (uint32_t)row_bytes;
        mbar_arrive_tx(&full[b], bytes);
        bulk_g2s(stg + b * sbytes, w + (int64_t)ex * (int64_t)expert_bytes + (int64_t)rs * (int64_t)row_bytes, bytes, &full[b]);
    };
    bulk_produce(nst, ns, lane, issue);
}
#endif

/* out[r0 + r] (+)= the sum over the ne slots of part[r][slot], in slot
 * order from 0, for the block's rows (the first nthr threads) */
__device__ __forceinline__ void bulk_moe_rows_sum(const float *part, int ne, int r0, int r1, float *out, int accumulate,
                                                  int nthr) {
    for (int r = threadIdx.x; r < r1 - r0; r += nthr) {
        float o = 0.f;
        for (int k = 0; k < ne; k++) o += part[r * ne + k];
        if (accumulate) out[r0 + r] += o; else out[r0 + r] = o;
    }
}

#endif
