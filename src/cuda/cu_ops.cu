/* cu_ops.cu: the small shared kernels of the forward pass: embedding,
 * RMSNorm, add, argmax, the synthetic-weight fill, the PDL switch and the
 * once-per-process kernel setup. The model's larger stages have their own
 * files: cu_hc.cu, cu_attn.cu (+ cu_attn_tc.cu, cu_attn_wg.cu), cu_comp.cu, cu_indexer.cu,
 * cu_moe.cu, and the products cu_gemv.cu / cu_mmq.cu.
 *
 * All kernels take T tokens at positions *pos0p + t, so prefill chunks and
 * single-token decode run the same code, and the position is device data
 * (one captured graph per step shape). Arithmetic follows src/cpu/numerics.c.
 * RMSNorm has a v2 schedule with bit-identical results (env MINKE_CUDA_OPS_V1=1
 * or cu_ops_use_v1(1): the v1 kernel).
 */
#include <stdlib.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_numerics.cuh"
#include "cuda/cu_ops.h"


/* ------------------------------------------------------------------ */
/* embedding                                                           */

__global__ void k_embed(const int32_t *tokens, const void *emb, int etype, int D, int nhc, float *X) {
    cu_pdl_enter();
    int t = blockIdx.y;
    int64_t tok = tokens[t];
    for (int d = blockIdx.x * blockDim.x + threadIdx.x; d < D; d += gridDim.x * blockDim.x) {
        float v = cu_wload(emb, etype, tok * D + d);
        for (int i = 0; i < nhc; i++) X[((int64_t)t * nhc + i) * D + d] = v;
    }
}
void cu_embed(const int32_t *tokens, int T, const void *emb, int etype, int D, int nhc, float *X, cudaStream_t st) {
    cu_launch(k_embed, dim3((D + 255) / 256, T), 256, 0, st, tokens, emb, etype, D, nhc, X);
}


int cu_pdl_enabled(void) {
    static int on = -1;
    if (on < 0) { const char *e = getenv("MINKE_CUDA_PDL"); on = e ? atoi(e) != 0 : 1; }
    return on;
}

/* ------------------------------------------------------------------ */
/* norms                                                               */

__global__ void k_rmsnorm(const float *x, const float *w, int n, float eps, float *y) {
    cu_pdl_enter();
    __shared__ double shd[33];
    const float *xr = x + (int64_t)blockIdx.x * n;
    float *yr = y + (int64_t)blockIdx.x * n;
    double ss = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += (double)xr[i] * (double)xr[i];
    ss = block_sum_d(ss, shd);
    float r = (float)(1.0 / sqrt(ss / n + (double)eps));
    for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = w ? xr[i] * r * w[i] : xr[i] * r;
}
/* k_rmsnorm's arithmetic (thread j of 256 sums i = j, j+256, ... in order,
 * then the block tree) with every load issued at once: the row and the weight
 * go to registers (the weight before the PDL wait: norm weights are never
 * written by the previous kernel), so the second pass does not wait on a
 * load after each store (y may alias x). n <= 256 * RMS2_PER. */
#define RMS2_PER 16
__global__ void __launch_bounds__(256) k_rmsnorm2(const float *x, const float *w, int n, float eps, float *y) {
    __shared__ double shd[33];
    float wv[RMS2_PER], xv[RMS2_PER];
    const int tid = threadIdx.x;
#pragma unroll
    for (int m = 0; m < RMS2_PER; m++) {
        int i = tid + 256 * m;
        wv[m] = w && i < n ? w[i] : 0.f;
    }
    cu_pdl_enter();
    const float *xr = x + (int64_t)blockIdx.x * n;
    float *yr = y + (int64_t)blockIdx.x * n;
#pragma unroll
    for (int m = 0; m < RMS2_PER; m++) {
        int i = tid + 256 * m;
        xv[m] = i < n ? xr[i] : 0.f;
    }
    double ss = 0.0;
#pragma unroll
    for (int m = 0; m < RMS2_PER; m++)
        if (tid + 256 * m < n) ss += (double)xv[m] * (double)xv[m];
    ss = block_sum_d(ss, shd);
    float r = (float)(1.0 / sqrt(ss / n + (double)eps));
#pragma unroll
    for (int m = 0; m < RMS2_PER; m++) {
        int i = tid + 256 * m;
        if (i < n) yr[i] = w ? xv[m] * r * wv[m] : xv[m] * r;
    }
}

static int ops_v1 = -1;
extern "C" void cu_ops_use_v1(int on) { ops_v1 = on; }
static int ops_use_v1(void) {
    if (ops_v1 < 0) { const char *e = getenv("MINKE_CUDA_OPS_V1"); ops_v1 = e ? atoi(e) != 0 : 0; }
    return ops_v1;
}

/* w: a weight (read before the PDL wait by k_rmsnorm2) */
void cu_rmsnorm(const float *x, const float *w, int nrows, int n, float eps, float *y, cudaStream_t st) {
    if (!ops_use_v1() && n <= 256 * RMS2_PER) {
        cu_launch(k_rmsnorm2, nrows, 256, 0, st, x, w, n, eps, y);
        return;
    }
    cu_launch(k_rmsnorm, nrows, 256, 0, st, x, w, n, eps, y);
}

__global__ void k_add(const float *a, const float *b, float *y, int64_t n) {
    cu_pdl_enter();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a[i] + b[i];
}
void cu_add(const float *a, const float *b, float *y, int64_t n, cudaStream_t st) {
    cu_launch(k_add, (unsigned)((n + 255) / 256), 256, 0, st, a, b, y, n);
}


/* ------------------------------------------------------------------ */
/* argmax (greedy bench decode) and synthetic weights                  */

/* Argmax (lowest index wins exact ties, `skip` excluded) in two launches:
 * AM_BLOCKS blocks each reduce a slice (4 independent loads in flight per
 * thread), then one warp reduces the partials. One reduction at a time per
 * device (the partials are static device memory): the bench's greedy loop. */
#define AM_BLOCKS 128
__device__ float am_part_v[AM_BLOCKS];
__device__ int am_part_i[AM_BLOCKS];

__global__ void __launch_bounds__(256) k_argmax_part(const float *x, int64_t n, int skip) {
    cu_pdl_enter();
    __shared__ float sv[8];
    __shared__ int si[8];
    int64_t per = (n + AM_BLOCKS - 1) / AM_BLOCKS;
    int64_t lo = blockIdx.x * per, hi = lo + per < n ? lo + per : n;
    float best = -INFINITY; int idx = 0x7fffffff;
    for (int64_t i0 = lo + threadIdx.x; i0 < hi; i0 += 4 * 256) {
        float v[4];
#pragma unroll
        for (int k = 0; k < 4; k++) { int64_t i = i0 + k * 256; v[k] = i < hi && i != skip ? x[i] : -INFINITY; }
#pragma unroll
        for (int k = 0; k < 4; k++) { int64_t i = i0 + k * 256; if (i < hi && i != skip) cu_argmax_take(best, idx, v[k], (int)i); }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_down_sync(0xffffffffu, best, o); int oi = __shfl_down_sync(0xffffffffu, idx, o);
        cu_argmax_take(best, idx, ov, oi);
    }
    if ((threadIdx.x & 31) == 0) { sv[threadIdx.x >> 5] = best; si[threadIdx.x >> 5] = idx; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < 8; w++) cu_argmax_take(best, idx, sv[w], si[w]);
        am_part_v[blockIdx.x] = best; am_part_i[blockIdx.x] = idx;
    }
}

__global__ void k_argmax_final(int *out) {
    cu_pdl_enter();
    float best = -INFINITY; int idx = 0x7fffffff;
    for (int b = threadIdx.x; b < AM_BLOCKS; b += 32) cu_argmax_take(best, idx, am_part_v[b], am_part_i[b]);
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_down_sync(0xffffffffu, best, o); int oi = __shfl_down_sync(0xffffffffu, idx, o);
        cu_argmax_take(best, idx, ov, oi);
    }
    if (threadIdx.x == 0) *out = idx;
}

void cu_argmax(const float *x, int64_t n, int skip, int *out, cudaStream_t st) {
    cu_launch(k_argmax_part, AM_BLOCKS, 256, 0, st, x, n, skip);
    cu_launch(k_argmax_final, 1, 32, 0, st, out);
}

__device__ __forceinline__ uint32_t hash32(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return (uint32_t)x;
}
__device__ __forceinline__ float hash_unit(uint64_t x) { return (float)(hash32(x) >> 8) * (1.0f / 16777216.0f) * 2.f - 1.f; }

/* Synthetic weights: plain floats uniform in [-scale, scale]; block formats get
 * random codes with block scales chosen so the dequantized values are of
 * order `scale` (never NaN/inf). */
__global__ void k_synth(uint8_t *dst, int type, int64_t nbytes_or_nel, int64_t nblocks, uint64_t seed, float scale,
                        int64_t base) {
    cu_pdl_enter();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    /* base: the index (element, or 32-bit word of a block format) of dst[0] in
     * the whole tensor, so a slice gets the values of its part of the whole */
    if (type == CU_TYPE_F32) {
        for (; i < nbytes_or_nel; i += stride) ((float *)dst)[i] = hash_unit(seed + base + i) * scale;
    } else if (type == CU_TYPE_F16) {
        for (; i < nbytes_or_nel; i += stride) ((__half *)dst)[i] = __float2half(hash_unit(seed + base + i) * scale);
    } else if (type == CU_TYPE_BF16) {
        for (; i < nbytes_or_nel; i += stride) ((__nv_bfloat16 *)dst)[i] = __float2bfloat16(hash_unit(seed + base + i) * scale);
    } else if (type == CU_TYPE_I32) {
        for (; i < nbytes_or_nel; i += stride) ((int32_t *)dst)[i] = (int32_t)(hash32(seed + base + i) % (uint32_t)scale);
    } else {
        /* block formats: random bytes, then fix the scale fields per block */
        for (int64_t b = i; b < nbytes_or_nel / 4; b += stride) ((uint32_t *)dst)[b] = hash32(seed * 31 + base + b);
        /* trailing bytes (block sizes not multiple of 4 overall are handled by the caller's padding) */
    }
}
__global__ void k_synth_scales(uint8_t *dst, int type, int64_t nblocks, float scale) {
    cu_pdl_enter();
    int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; b < nblocks; b += stride) {
        switch (type) {
        case CU_TYPE_Q8_0: { __half h = __float2half(scale / 127.f); *(__half *)(dst + b * 34) = h; break; }
        case CU_TYPE_Q2_K: { uint8_t *p = dst + b * 84; *(__half *)(p + 80) = __float2half(scale / 24.f); *(__half *)(p + 82) = __float2half(scale / 48.f); break; }
        case CU_TYPE_Q4_K: { uint8_t *p = dst + b * 144; *(__half *)p = __float2half(scale / 400.f); *(__half *)(p + 2) = __float2half(scale / 800.f); break; }
        case CU_TYPE_IQ2_XXS: { uint8_t *p = dst + b * 66; *(__half *)p = __float2half(scale / 100.f); break; }
        case CU_TYPE_MXFP4: { dst[b * 17] = (uint8_t)(127 - 2); break; }
        default: break;
        }
    }
}
void cu_synth_fill(void *dst, int type, int64_t nel, uint64_t seed, float scale, uint64_t byte_off, cudaStream_t st) {
    int64_t nbytes = 0, nblocks = 0;
    switch (type) {
    case CU_TYPE_F32: case CU_TYPE_I32: nbytes = nel; break;
    case CU_TYPE_F16: case CU_TYPE_BF16: nbytes = nel; break;
    case CU_TYPE_Q8_0: nblocks = nel / 32; nbytes = nblocks * 34; break;
    case CU_TYPE_Q2_K: nblocks = nel / 256; nbytes = nblocks * 84; break;
    case CU_TYPE_Q4_K: nblocks = nel / 256; nbytes = nblocks * 144; break;
    case CU_TYPE_IQ2_XXS: nblocks = nel / 256; nbytes = nblocks * 66; break;
    case CU_TYPE_MXFP4: nblocks = nel / 32; nbytes = nblocks * 17; break;
    default: return;
    }
    const int64_t base = (int64_t)(type == CU_TYPE_F16 || type == CU_TYPE_BF16 ? byte_off / 2 : byte_off / 4);
    cu_launch(k_synth, 4096, 256, 0, st, (uint8_t *)dst, type, nbytes, nblocks, seed, scale, base);
    if (nblocks) cu_launch(k_synth_scales, 4096, 256, 0, st, (uint8_t *)dst, type, nblocks, scale);
}

void cu_ops_init(void) {
    cu_indexer_init();
}

