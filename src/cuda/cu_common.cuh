/* cu_common.cuh: shared pieces of the CUDA backend's kernels: error checks,
 * the block layouts of the weight and activation formats (spec model.md §5),
 * scalar conversions, warp/block reductions and the lookup tables.
 *
 * The layouts mirror src/quant/quant_internal.h byte for byte; the kernels
 * reproduce the CPU's integer dot products exactly so the two backends differ
 * only by float summation order.
 */
#ifndef MINKE_CU_COMMON_CUH
#define MINKE_CU_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

#define CU_TYPE_F32 0
#define CU_TYPE_F16 1
#define CU_TYPE_Q8_0 8
#define CU_TYPE_Q2_K 10
#define CU_TYPE_Q4_K 12
#define CU_TYPE_Q8_K 15
#define CU_TYPE_IQ2_XXS 16
#define CU_TYPE_I32 26
#define CU_TYPE_BF16 30
#define CU_TYPE_MXFP4 39
#define CU_TYPE_Q8_0_F32 64   /* activation-only: f32 d + 32 int8 */
#define CU_TYPE_IQ2R 116      /* IQ2_XXS repacked on the device: groups, then scales */
#define CU_TYPE_Q8_0R 108     /* Q8_0 repacked on the device: codes, then scales (cu_repack_q8_0) */

struct __align__(2) cu_block_q8_0 { uint16_t d; int8_t q[32]; };                    /* 34 */
struct __align__(4) cu_block_q8_0f { float d; int8_t q[32]; };                      /* 36 */
struct __align__(4) cu_block_q8_K { float d; int8_t q[256]; int16_t bsums[16]; };   /* 292 */
struct __align__(2) cu_block_q2_K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; }; /* 84 */
struct __align__(2) cu_block_q4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; }; /* 144 */
struct __align__(2) cu_block_iq2_xxs { uint16_t d; uint16_t qs[32]; };              /* 66 */
struct cu_block_mxfp4 { uint8_t e; uint8_t qs[16]; };                               /* 17 */

static_assert(sizeof(cu_block_q8_0) == 34, "q8_0");
static_assert(sizeof(cu_block_q8_0f) == 36, "q8_0f");
static_assert(sizeof(cu_block_q8_K) == 292, "q8_K");
static_assert(sizeof(cu_block_q2_K) == 84, "q2_K");
static_assert(sizeof(cu_block_q4_K) == 144, "q4_K");
static_assert(sizeof(cu_block_iq2_xxs) == 66, "iq2_xxs");

/* One IQ2_XXS group as 8 words of 4 signed int8 codes (the GEMV and the
 * tensor-core kernels both decode it this way): a holds the 4 grid indices
 * (byte l), w the 4 x 7 stored sign bits (the eighth is the parity) under the
 * 4-bit scale; tab is the grid. Sign bits are spread to 0x00/0xFF bytes. */
__device__ __forceinline__ void cu_iq2_group_codes(uint32_t a, uint32_t w, const uint64_t *tab, int (&v)[8]) {
#pragma unroll
    for (int l = 0; l < 4; l++) {
        uint64_t gv = tab[(a >> (8 * l)) & 255];
        uint32_t s7 = (w >> (7 * l)) & 127;
        uint32_t S = s7 | ((__popc(s7) & 1) << 7);
        uint32_t m0 = (((S & 15) * 0x00204081u) & 0x01010101u) * 0xFFu;
        uint32_t m1 = ((((S >> 4) & 15) * 0x00204081u) & 0x01010101u) * 0xFFu;
        v[2 * l] = (int)__vsub4((uint32_t)gv ^ m0, m0);
        v[2 * l + 1] = (int)__vsub4((uint32_t)(gv >> 32) ^ m1, m1);
    }
}
static_assert(sizeof(cu_block_mxfp4) == 17, "mxfp4");

/* Weight loads: read-only, not kept in L1 (weights are streamed once a step). */
__device__ __forceinline__ uint4 ldw_v4(const uint8_t *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ uint2 ldw_v2(const uint8_t *p) {
    uint2 v;
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
__device__ __forceinline__ uint32_t ldw_u32(const uint8_t *p) {
    uint32_t v;
    asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ uint32_t ldw_u16(const uint8_t *p) {
    unsigned short v;
    asm("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ float cu_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float cu_bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The rows token t (at position qp) attends to (spec §10): its window's raw
 * rows, then the compressed rows (ratio 4: the nsel[t] the indexer kept;
 * ratio 128: all closed windows; ratio 0: none). Every attention kernel
 * counts them here. */
__device__ __forceinline__ int attn_nraw(int qp, int W) { return qp + 1 < W ? qp + 1 : W; }
__device__ __forceinline__ int attn_nrows(int t, int qp, int W, int ratio, const int *nsel) {
    int ncomp = 0;
    if (ratio == 4) ncomp = nsel[t];
    else if (ratio > 0) ncomp = (qp + 1) / ratio;
    return attn_nraw(qp, W) + ncomp;
}

/* Block-wide sum (any blockDim multiple of 32, <= 1024); every thread gets it. */
__device__ __forceinline__ float block_sum(float v, float *sh /* >= 33 floats */) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float t = 0.f;
    if (w == 0) {
        t = lane < nw ? sh[lane] : 0.f;
        t = warp_sum(t);
        if (lane == 0) sh[32] = t;
    }
    __syncthreads();
    return sh[32];
}
__device__ __forceinline__ double block_sum_d(double v, double *sh /* >= 33 */) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        double t = lane < nw ? sh[lane] : 0.0;
        t = warp_sum_d(t);
        if (lane == 0) sh[32] = t;
    }
    __syncthreads();
    return sh[32];
}
__device__ __forceinline__ float block_max(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        float t = lane < nw ? sh[lane] : -INFINITY;
        t = warp_max(t);
        if (lane == 0) sh[32] = t;
    }
    __syncthreads();
    return sh[32];
}

/* One element of a plain-float weight tensor (F32/F16/BF16). */
__device__ __forceinline__ float cu_wload(const void *base, int type, int64_t i) {
    if (type == CU_TYPE_F16) return cu_h2f(((const uint16_t *)base)[i]);
    if (type == CU_TYPE_BF16) return cu_bf2f(((const uint16_t *)base)[i]);
    return ((const float *)base)[i];
}

__device__ __forceinline__ float sigmoid_stable(float x) {
    if (x >= 0.f) { float e = expf(-x); return 1.f / (1.f + e); }
    float e = expf(x); return e / (1.f + e);
}
__device__ __forceinline__ float softplus_stable(float x) {
    if (x > 20.f) return x;
    if (x < -20.f) return expf(x);
    return log1pf(expf(x));
}

/* SwiGLU of one gate/up pair with the model's clamp (limit <= 1e-6: none),
 * as src/cpu computes it: the MoE kernels of cu_moe.cu and cu_gemv3.cu. */
__device__ __forceinline__ float cu_swiglu1(float gv, float uv, float limit) {
    if (limit > 1e-6f) {
        if (gv > limit) gv = limit;
        if (uv > limit) uv = limit;
        if (uv < -limit) uv = -limit;
    }
    return gv * sigmoid_stable(gv) * uv;
}

/* The current device's SM count (132 when it cannot be read), read once per
 * file that asks: launch shapes size their grids by it. */
static inline int cu_num_sms(void) {
    static int n = 0;
    if (!n) {
        int dev = 0, v = 0;
        n = cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
                    v > 0 ? v : 132;
    }
    return n;
}

/* "First time on this device": kernel attributes (the dynamic shared memory
 * opt-in, carveouts) and __device__ tables belong to one device's context,
 * so a launcher that sets them once must do it once per device (several
 * GPUs in one process run a host thread each). Bit d of *mask records
 * device d. */
static inline int cu_dev_first(unsigned *mask) {
    int d = 0;
    cudaGetDevice(&d);
    unsigned b = 1u << (d & 31);
    return !(__atomic_fetch_or(mask, b, __ATOMIC_ACQ_REL) & b);
}
static inline int cu_cur_dev(void) { int d = 0; cudaGetDevice(&d); return d & 31; }

/* A kernel whose body is compiled for sm_90a only (the wgmma kernels; an
 * empty body elsewhere) runs that body on device dev: compute capability 9
 * running the sm_90a machine code. A plain sm_90 build, or code compiled at
 * load time from the compute_80 PTX, has the empty kernel (a few registers). */
static inline int cu_sm90a_body(const void *kernel, int dev) {
    cudaFuncAttributes fa;
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    const int ok = major == 9 && cudaFuncGetAttributes(&fa, kernel) == cudaSuccess && fa.binaryVersion == 90 &&
                   fa.numRegs >= 64;
    cudaGetLastError();
    return ok;
}

/* cp.async (sm_80+) into shared memory: 16 bytes (generic shared pointer) or
 * 4 bytes (shared address), and the commit / wait of groups of them */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async4(unsigned dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

/* An argmax reduction's step: (v, i) replaces (bv, bi) when larger, or
 * equal at a lower index (cu_argmax, cu_sample_cands) */
__device__ __forceinline__ void cu_argmax_take(float &bv, int &bi, float v, int i) {
    if (v > bv || (v == bv && i < bi)) { bv = v; bi = i; }
}

/* Programmatic dependent launch (MINKE_CUDA_PDL, default on): every kernel of
 * the backend starts with cu_pdl_enter(): wait until the grids it depends on
 * have completed and their writes are visible (a no-op when it was launched
 * without the attribute), then let the next kernel of the stream be launched
 * while this one runs. The next kernel's blocks become resident early and
 * wait at their own cu_pdl_enter(), so the launch latency between the ~1900
 * small kernels of a decode step overlaps the previous kernel. The wait comes
 * before any memory access, so a kernel's completion still implies its
 * predecessors' completion. */
/* Grids of fewer than CU_PDL_EARLY_MIN_BLOCKS blocks do not trigger: their
 * dependents launch as they exit. Measured (tools/dev/chainbench.cu, H200):
 * a one-block kernel that triggers at its start costs ~2.1 us more a link of
 * a chain of such kernels than one that does not (two blocks ~0.5 us, eight
 * ~0.1). In the decode step (its one-block norm, routing, compressor and KV
 * kernels, the shared expert's two-block SwiGLU) +0.35% at ctx 4096. */
#ifndef CU_PDL_EARLY_MIN_BLOCKS
#define CU_PDL_EARLY_MIN_BLOCKS 3
#endif
__device__ __forceinline__ void cu_pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (gridDim.x * gridDim.y * gridDim.z >= CU_PDL_EARLY_MIN_BLOCKS)
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
/* cu_pdl_enter that lets the next kernel launch whatever this grid's size:
 * the indexer's one-block top-k, whose successor (the attention) measured
 * better launched early (decode +0.6% at 4096, +1.1% at 65536 over the rule
 * above; the routing likewise measured -0.5%: docs/performance.md,
 * twenty-fourth session). */
__device__ __forceinline__ void cu_pdl_enter_early() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Only the second half of cu_pdl_enter(): for threads that read nothing a
 * grid before writes (the streamed products' copy warp, which reads only
 * weights), so that they do not hold back the next kernel's launch. */
__device__ __forceinline__ void cu_pdl_launch_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* cu_rope_early: a kernel may read the step's position (pos0p) and the RoPE
 * frequency tables before cu_pdl_enter(): the position is copied in before
 * the step's first kernel (an ordinary stream dependency) and the tables at
 * start-up, so neither is written by a kernel it could overlap. The RoPE
 * kernels compute their (double) sincos there, off the critical path. */

extern "C" int cu_pdl_enabled(void);

/* Timing ablation (MINKE_CUDA_SKIP, a measuring aid only: the results are
 * wrong while it is on): the backend sets this while it launches a decode
 * stage named in the switch, and cu_launch then launches nothing, so a
 * bench shows what that stage costs inside the decode graph. One per host
 * thread (each GPU's forward runs on its own). */
extern thread_local int cu_skip_launch;

/* k<<<grid, block, smem, st>>>(args...), with the PDL attribute when enabled. */
template <typename... KArgs, typename... Args>
static inline void cu_launch(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                             Args &&...args) {
    if (cu_skip_launch) return;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    cfg.gridDim = grid; cfg.blockDim = block; cfg.dynamicSmemBytes = smem; cfg.stream = st;
    if (cu_pdl_enabled()) {
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at; cfg.numAttrs = 1;
    }
    cudaLaunchKernelEx(&cfg, k, static_cast<Args &&>(args)...);
}

#endif
