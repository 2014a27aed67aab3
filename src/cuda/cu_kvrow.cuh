/* cu_kvrow.cuh: the KV cache's packed rows on the GPU (issue #6), the code
 * that writes them (the compressors) and reads them (attention, indexer).
 *
 * With the simulations on, a compressed attention row's first hd - nrot
 * values are FP8 blocks of 64 (E4M3 times a power-of-two scale) and an
 * indexer row's values FP4 blocks of 32 (E2M1 times a power of two): the
 * values the model's simulations produce, so the cache keeps the codes and
 * the scales' exponents instead of f32 and loses nothing. Unpacking
 * multiplies the same two operands the simulation multiplied (the rounded
 * code's value and the block scale), so a reader sees the simulation's float
 * bits. The row layouts (strides and offsets: cu_ops.h, kv8_* / kv4_*):
 *   FP8 attention row: [0, nope) E4M3 codes, [nope, nope + nope / 64) the
 *     blocks' scale bytes, then from kv8_rope_off the RoPE tail as f32 (it is
 *     not rounded); nope = hd - nrot, a multiple of 64.
 *   FP4 indexer row: [0, hd / 2) codes (value 2i in the low nibble of byte
 *     i), [hd / 2, hd / 2 + hd / 32) the scale bytes.
 * A scale byte is k + 127 for the scale 2^k (0: 2^-127, a subnormal).
 * Rows start 16-byte aligned. The sliding-window ring keeps f32 rows (128 a
 * layer, fixed), as does a session with the simulations off.
 */
#ifndef MINKE_CU_KVROW_CUH
#define MINKE_CU_KVROW_CUH
#include "cuda/cu_common.cuh"
#include "cuda/cu_numerics.cuh"
#include "cuda/cu_ops.h"

/* the scale 2^k of a block from its byte */
static __device__ __forceinline__ float kv_scale(uint32_t b) {
    return __uint_as_float(b ? b << 23 : 0x00400000u);
}
/* one E4M3 code (bits 0..7 of c) times the block scale s: the code's bits go
 * to an f32's exponent and mantissa top (a float 2^-120 times the code's
 * value, subnormal codes included), 2^120 restores it exactly, and the
 * product with s is the simulation's (d_fp8_sim_sh: rounded value times s) */
static __device__ __forceinline__ float kv8_val(uint32_t c, float s) {
    const float v = __uint_as_float(((c & 0x7fu) << 20) | ((c & 0x80u) << 24));
    return __fmul_rn(__fmul_rn(v, 0x1p120f), s);
}
/* four codes of a word, byte j value j */
static __device__ __forceinline__ float4 kv8_dec4(uint32_t w, float s) {
    return make_float4(kv8_val(w, s), kv8_val(w >> 8, s), kv8_val(w >> 16, s), kv8_val(w >> 24, s));
}
/* one E2M1 code (bits 0..3 of c) times s, as kv8_val: 2^126 restores the value */
static __device__ __forceinline__ float kv4_val(uint32_t c, float s) {
    const float v = __uint_as_float(((c & 7u) << 22) | ((c & 8u) << 28));
    return __fmul_rn(__fmul_rn(v, 0x1p126f), s);
}
/* value col of an FP8 attention row */
static __device__ __forceinline__ float kv8_load1(const uint8_t *row, int col, int hd, int nrot) {
    const int nope = hd - nrot;
    if (col >= nope) return *(const float *)(row + kv8_rope_off(hd, nrot) + 4 * (col - nope));
    return kv8_val(row[col], kv_scale(row[nope + col / 64]));
}
/* values col .. col + 3 of an FP8 attention row (col a multiple of 4) */
static __device__ __forceinline__ float4 kv8_load4(const uint8_t *row, int col, int hd, int nrot) {
    const int nope = hd - nrot;
    if (col >= nope) return *(const float4 *)(row + kv8_rope_off(hd, nrot) + 4 * (col - nope));
    return kv8_dec4(*(const uint32_t *)(row + col), kv_scale(row[nope + col / 64]));
}
/* values col .. col + 7 of an FP4 indexer row (col a multiple of 8) */
static __device__ __forceinline__ void kv4_load8(const uint8_t *row, int col, int hd, float (&v)[8]) {
    const uint32_t w = *(const uint32_t *)(row + col / 2);
    const float s = kv_scale(row[hd / 2 + col / 32]);
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = kv4_val(w >> (4 * j), s);
}

/* The writers: the simulation of d_fp8_sim_sh / d_fp4_sim_sh over n values of
 * shared memory x (the same block step, d_fp8_block / d_fp4_block), stored
 * as codes and scale bytes instead of rounded floats; x is left as it was.
 * Called by every thread of the block (blockDim a multiple of 32). */
static __device__ void d_fp8_pack_sh(const float *x, int n, uint8_t *codes, uint8_t *exps) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    for (int b = w; b < n / 64; b += nw) {
        const float *v = x + 64 * b;
        float u0, u1;
        const float s = d_fp8_block(v[lane], v[lane + 32], u0, u1);
        codes[64 * b + lane] = (uint8_t)d_e4m3_encode(d_e4m3_round(u0));
        codes[64 * b + lane + 32] = (uint8_t)d_e4m3_encode(d_e4m3_round(u1));
        if (lane == 0) exps[b] = (uint8_t)((__float_as_uint(s) >> 23) & 255u);
    }
    __syncthreads();
}
static __device__ void d_fp4_pack_sh(const float *x, int n, uint8_t *codes, uint8_t *exps) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    for (int b = w; b < n / 32; b += nw) {
        float u;
        const float s = d_fp4_block(x[32 * b + lane], u);
        const uint32_t c = d_e2m1_encode(d_e2m1_round(u));
        const uint32_t hi = __shfl_down_sync(0xffffffffu, c, 1);
        if (!(lane & 1)) codes[16 * b + lane / 2] = (uint8_t)(c | (hi << 4));
        if (lane == 0) exps[b] = (uint8_t)((__float_as_uint(s) >> 23) & 255u);
    }
    __syncthreads();
}

#endif
