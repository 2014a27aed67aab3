/* cu_numerics.cuh: the device twins of src/cpu/numerics.c that several
 * kernel files share: power-of-two scales, E4M3 / E2M1 / f16 rounding,
 * RoPE of a head's tail, the FP8 and FP4 simulations, Hadamard-128.
 * Each kernel file includes it; everything here is static inline device code.
 */
#ifndef MINKE_CU_NUMERICS_CUH
#define MINKE_CU_NUMERICS_CUH
#include "cuda/cu_common.cuh"


static __device__ __forceinline__ float d_pow2_ceil(float v) {
    uint32_t b = __float_as_uint(v);
    int e = (int)((b >> 23) & 255u) - 127 + ((b & 0x7fffffu) != 0);
    return ldexpf(1.0f, e);
}
static __device__ __forceinline__ float d_e4m3_round(float u) {
    float a = fabsf(u);
    if (a >= 448.0f) return u < 0 ? -448.0f : 448.0f;
    float q;
    if (a < 0.015625f) q = 0.001953125f;
    else { int e; frexpf(a, &e); q = ldexpf(1.0f, e - 1 - 3); }
    float r = rintf(a / q) * q;
    if (r > 448.0f) r = 448.0f;
    return u < 0 ? -r : r;
}
static __device__ __forceinline__ float d_e2m1_round(float u) {
    float a = fabsf(u);
    if (a >= 6.0f) return u < 0 ? -6.0f : 6.0f;
    float q = a < 2.0f ? 0.5f : a < 4.0f ? 1.0f : 2.0f;
    float r = rintf(a / q) * q;
    if (r > 6.0f) r = 6.0f;
    return u < 0 ? -r : r;
}
static __device__ __forceinline__ float d_f16_round(float v) { return __half2float(__float2half_rn(v)); }

/* RoPE pair k's cosine and sine at position pos (the angle in float, its
 * sincos in double), and the rotation of pair k of the tail at off; split so
 * that a kernel can take the angles before its PDL wait (k_comp_emit) */
static __device__ __forceinline__ void d_rope_cs(int pos, const float *inv_freq, int k, float &c, float &s) {
    float ang = (float)pos * inv_freq[k];
    double sd, cd;
    sincos((double)ang, &sd, &cd);
    c = (float)cd; s = (float)sd;
}
static __device__ __forceinline__ void d_rope_pair_sh(float *x, int off, int k, float c, float s) {
    float x0 = x[off + 2 * k], x1 = x[off + 2 * k + 1];
    x[off + 2 * k] = x0 * c - x1 * s;
    x[off + 2 * k + 1] = x0 * s + x1 * c;
}

/* RoPE on the tail of a vector held in shared memory: threads stride over pairs. */
static __device__ void d_rope_tail_sh(float *x, int hd, int nrot, const float *inv_freq, int pos, int inverse) {
    int off = hd - nrot;
    for (int k = threadIdx.x; k < nrot / 2; k += blockDim.x) {
        float c, s;
        d_rope_cs(pos, inv_freq, k, c, s);
        if (inverse) s = -s;
        d_rope_pair_sh(x, off, k, c, s);
    }
}

/* One block of the simulations, a warp's: the block scale s (returned) and
 * the lane's values divided by it and clamped (u0, u1), which the simulation
 * rounds (d_e4m3_round / d_e2m1_round) and multiplies by s again, and the KV
 * cache's writer stores as codes (cu_kvrow.cuh). FP8: values l and l + 32 of
 * 64 in a0, a1; FP4: value l of 32 in a0. */
static __device__ __forceinline__ float d_fp8_block(float a0, float a1, float &u0, float &u1) {
    float amax = warp_max(fmaxf(fabsf(a0), fabsf(a1)));
    amax = fmaxf(amax, 1e-4f);
    const float s = d_pow2_ceil(amax * (1.0f / 448.0f));
    u0 = fminf(fmaxf(a0 / s, -448.f), 448.f);
    u1 = fminf(fmaxf(a1 / s, -448.f), 448.f);
    return s;
}
static __device__ __forceinline__ float d_fp4_block(float a, float &u) {
    const float amax = fmaxf(warp_max(fabsf(a)), 7.052966104933725e-38f);
    const float s = d_pow2_ceil(amax * (1.0f / 6.0f));
    u = fminf(fmaxf(a / s, -6.f), 6.f);
    return s;
}

/* FP8 sim over n (multiple of 64) values in shared memory; blockDim >= 64 multiple of 32. */
static __device__ void d_fp8_sim_sh(float *x, int n, float *red) {
    int nb = n / 64;
    /* each warp handles blocks w, w+nw, ... ; a block of 64 = 2 values per lane */
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    for (int b = w; b < nb; b += nw) {
        float *v = x + 64 * b;
        float u0, u1;
        const float s = d_fp8_block(v[lane], v[lane + 32], u0, u1);
        v[lane] = d_e4m3_round(u0) * s;
        v[lane + 32] = d_e4m3_round(u1) * s;
    }
    __syncthreads();
}
static __device__ void d_fp4_sim_sh(float *x, int n) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    for (int b = w; b < n / 32; b += nw) {
        float u;
        const float s = d_fp4_block(x[32 * b + lane], u);
        x[32 * b + lane] = d_e2m1_round(u) * s;
    }
    __syncthreads();
}
/* KV rows in the simulations' formats: the twins of nm_e4m3_encode / _decode,
 * nm_e2m1_encode / _decode and the pack checks of nm_fp8_pack / nm_fp4_pack
 * (src/cpu/numerics.c says why they are lossless). Codes of exact values only. */
static __device__ __forceinline__ float d_e4m3_decode(uint32_t c) {
    int e = (c >> 3) & 15, m = c & 7;
    float a = (e == 15 && m == 7) ? __int_as_float(0x7fc00000) : e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10);
    return (c & 0x80) ? -a : a;
}
static __device__ __forceinline__ uint32_t d_e4m3_encode(float u) {
    uint32_t sgn = signbit(u) ? 0x80u : 0u;
    float a = fabsf(u);
    if (a < 0.015625f) return sgn | (uint32_t)(int)(a * 512.0f);
    int e;
    frexpf(a, &e);
    return sgn | (uint32_t)((e + 6) << 3) | (uint32_t)((int)ldexpf(a, 4 - e) - 8);
}
static __device__ __forceinline__ float d_e2m1_decode(uint32_t c) {
    const float a = (c & 7) < 4 ? 0.5f * (float)(c & 7) : (c & 7) == 4 ? 2.0f : (c & 7) == 5 ? 3.0f : (c & 7) == 6 ? 4.0f : 6.0f;
    return (c & 8) ? -a : a;
}
static __device__ __forceinline__ uint32_t d_e2m1_encode(float u) {
    float a = fabsf(u);
    uint32_t k = a < 2.0f ? (uint32_t)(int)(a * 2.0f) : a < 4.0f ? (uint32_t)(4 + (int)(a - 2.0f)) : a < 6.0f ? 6u : 7u;
    return (signbit(u) ? 8u : 0u) | k;
}
/* The scale exponent k of a block whose largest magnitude is amax (values up to
 * vmax): -127 for zeros, -1000 outside UE8M0 or for a non-finite amax. */
static __device__ __forceinline__ int d_kv_block_exp(float amax, float vmax) {
    if (!(amax < INFINITY)) return -1000;
    if (amax == 0.0f) return -127;
    int e;
    frexpf(d_pow2_ceil(amax / vmax), &e);
    return e - 1 >= -127 && e - 1 <= 127 ? e - 1 : -1000;
}
/* One value of a block with exponent k: its code (FP4: E2M1, else E4M3), and
 * whether it comes back bit for bit (the pack's check, per value). */
template <bool FP4>
static __device__ __forceinline__ uint32_t d_kv_code(float v, int k, bool &ok) {
    const float u = ldexpf(v, -k);
    ok = fabsf(u) <= (FP4 ? 6.0f : 448.0f) && (FP4 ? d_e2m1_round(u) : d_e4m3_round(u)) == u;
    const uint32_t c = ok ? (FP4 ? d_e2m1_encode(u) : d_e4m3_encode(u)) : 0u;
    ok = ok && __float_as_uint(ldexpf(FP4 ? d_e2m1_decode(c) : d_e4m3_decode(c), k)) == __float_as_uint(v);
    return c;
}

/* Hadamard-128 in double (as the CPU) on shared memory; needs 128 doubles of scratch. */
static __device__ void d_hadamard128_sh(float *x, double *t) {
    __syncthreads();
    for (int i = threadIdx.x; i < 128; i += blockDim.x) t[i] = x[i];
    __syncthreads();
    for (int st = 1; st < 128; st <<= 1) {
        for (int p = threadIdx.x; p < 64; p += blockDim.x) {
            int blk = p / st, j = p % st;
            int i0 = blk * 2 * st + j;
            double a = t[i0], b = t[i0 + st];
            t[i0] = a + b; t[i0 + st] = a - b;
        }
        __syncthreads();
    }
    for (int i = threadIdx.x; i < 128; i += blockDim.x) x[i] = (float)(t[i] * 0.08838834764831845);
    __syncthreads();
}


#endif
