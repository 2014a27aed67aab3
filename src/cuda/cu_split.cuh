/* cu_split.cuh: exact activations as int8 pieces (docs/numerics.md).
 *
 * The kernels that multiply quantized weights with exact (f32) activations on
 * integer units split each group of activations (an item of 32 elements, or
 * Q2_K's block of 256) into P int8 pieces against the group's amax:
 *   D = amax / 32512;
 *   P = 2: q = rint(x / D) in [-32512, 32512] = 256 hi + lo (16 bits);
 *   P = 3: q = rint(256 x / D) = 65536 top + 256 mid + lo (24 bits).
 * A dot with integer weight codes is then one integer dot per piece, each
 * exact, combined in float: P = 3: dot = D (256 S_top + S_mid + S_lo / 256).
 * The tensor-core prefill (cu_mmq.cu) and the dp4a decode GEMVs
 * (cu_gemv3.cu) use these same functions, so a piece is the same integer
 * wherever it is made.
 */
#ifndef MINKE_CU_SPLIT_CUH
#define MINKE_CU_SPLIT_CUH

#include <stdint.h>

/* An integer dot read as a float without I2F (a quarter-rate instruction): an
 * accumulator started from the bits of 1.5 * 2^23 holds 1.5 * 2^23 + dot,
 * exactly a float while |dot| < 2^22, and one FADD removes the offset. */
#define MX_MAGIC_BITS 0x4B400000
#define MX_MAGIC 12582912.f
__device__ __forceinline__ float mx_dot_f(int bits) { return __int_as_float(bits) - MX_MAGIC; }

/* Split 4 activations (one float4 of an item) into P int8 words, piece 0 the
 * most significant; idv = 32512 / amax (P = 2) or 8323072 / amax (P = 3). */
template <int P>
__device__ __forceinline__ void mx_split4(float4 v, float idv, int (&pc)[P]) {
    uint32_t b0, b1, b2, b3;
    if (P == 2) {
        /* x / D + 1.5 * 2^23 + 128 rounds once to an integer float whose low 16 bits
         * are q + 128 (two's complement): byte 1 = hi, byte 0 ^ 0x80 = lo */
        b0 = __float_as_uint(__fmaf_rn(v.x, idv, 12583040.f));
        b1 = __float_as_uint(__fmaf_rn(v.y, idv, 12583040.f));
        b2 = __float_as_uint(__fmaf_rn(v.z, idv, 12583040.f));
        b3 = __float_as_uint(__fmaf_rn(v.w, idv, 12583040.f));
    } else {
        /* q + 128 * 257: byte 2 = top, bytes 1 and 0 ^ 0x80 = mid and lo */
        b0 = (uint32_t)(__float2int_rn(v.x * idv) + 32896);
        b1 = (uint32_t)(__float2int_rn(v.y * idv) + 32896);
        b2 = (uint32_t)(__float2int_rn(v.z * idv) + 32896);
        b3 = (uint32_t)(__float2int_rn(v.w * idv) + 32896);
    }
    uint32_t A = __byte_perm(b0, b1, 0x5140), B = __byte_perm(b2, b3, 0x5140);
    uint32_t lo = __byte_perm(A, B, 0x5410) ^ 0x80808080u, hi = __byte_perm(A, B, 0x7632);
    if (P == 2) {
        pc[0] = (int)hi;
        pc[P - 1] = (int)lo;
    } else {
        uint32_t C = __byte_perm(b0, b1, 0x62), E = __byte_perm(b2, b3, 0x62);
        pc[0] = (int)__byte_perm(C, E, 0x5410);
        pc[1] = (int)(hi ^ 0x80808080u);
        pc[P - 1] = (int)lo;
    }
}

/* 1 / (the scale of piece P - 1) for a group of amax m: q = rint(x idv). The
 * kernels store D = m / 32512 (P = 2: x = D q; P = 3: x = D q / 256); 3 pieces
 * take the correctly rounded reciprocal of D (within 1.5e-7 of amax instead of
 * 2e-7). Groups under 1e-30 (denormal scales) become zeros. */
template <int P>
__device__ __forceinline__ float mx_inv_scale(float m) {
    if (!(m > 1e-30f)) return 0.f;
    return P == 2 ? __fdividef(32512.f, m) : __frcp_rn(m * (1.f / 32512.f)) * 256.f;
}

/* The three piece dots of one group as the float dot / D (P = 3). */
__device__ __forceinline__ float mx_combine3(int s_top, int s_mid, int s_lo) {
    return __fmaf_rn(mx_dot_f(s_lo), 1.f / 256.f, __fmaf_rn(mx_dot_f(s_top), 256.f, mx_dot_f(s_mid)));
}

/* d = A.B + c in all four accumulators (int8 m16n8k32, c: a start such as
 * MX_MAGIC_BITS or 0): the tensor-core kernels' one mma form */
__device__ __forceinline__ void mx_mma_s8(int (&d)[4], int a0, int a1, int a2, int a3, int b0, int b1, int c) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(c));
}

#endif
