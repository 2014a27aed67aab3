/* cu_kvfmt.cu: KV rows in the simulations' own formats on the GPU (issue #6):
 * pack a row's FP8 blocks (E4M3 codes + a UE8M0 exponent per 64 values) or
 * FP4 blocks (E2M1 codes + an exponent per 32) and unpack them, with the
 * device twins of src/cpu/numerics.c (cu_numerics.cuh).
 *   k_kvfmt_roundtrip  separate code and exponent arrays, what
 *                      tests/cuda/kvfmt_check.c holds against nm_fp8_pack /
 *                      nm_fp4_pack;
 *   k_kvrows_pack / k_kvrows_unpack  whole cache rows in the layouts of
 *                      cu_kvrow.cuh, for the state payload (saved and loaded
 *                      as f32 rows, engine/backend.h) and kvfmt_check;
 *   k_kvrows_sim       the compressors' writer path (simulate + pack in
 *                      shared memory) against the simulation, for kvfmt_check.
 */
#include "cuda/cu_common.cuh"
#include "cuda/cu_numerics.cuh"
#include "cuda/cu_kvrow.cuh"
#include "cuda/cu_ops.h"

/* One block packed by a warp (FP8: a lane's values l and l + 32 of 64 in a0,
 * a1; FP4: value l of 32 in a0): its codes stored at codes (value 2i of FP4
 * in the low nibble of byte i), its exponent k (-1000 for a NaN or an
 * amax out of UE8M0's range) and the lane's codes c0, c1 returned; false
 * when a value of the block does not come back bit for bit (nm_*_pack's 0). */
template <bool FP4>
__device__ __forceinline__ bool kv_pack_block(float a0, float a1, uint8_t *codes, int &k, uint32_t &c0, uint32_t &c1) {
    const int lane = threadIdx.x & 31;
    const float amax = warp_max(fmaxf(fabsf(a0), fabsf(a1)));
    const bool nan = __any_sync(0xffffffffu, a0 != a0 || a1 != a1);
    k = nan ? -1000 : d_kv_block_exp(amax, FP4 ? 6.0f : 448.0f);
    bool g0 = k != -1000, g1 = g0;
    c0 = c1 = 0;
    if (g0) {
        c0 = d_kv_code<FP4>(a0, k, g0);
        if (!FP4) c1 = d_kv_code<FP4>(a1, k, g1);
    }
    if (FP4) {
        const uint32_t hi = __shfl_down_sync(0xffffffffu, c0, 1);
        if (!(lane & 1)) codes[lane / 2] = (uint8_t)(c0 | (hi << 4));
    } else {
        codes[lane] = (uint8_t)c0;
        codes[lane + 32] = (uint8_t)c1;
    }
    return __all_sync(0xffffffffu, g0 && g1);
}

/* A warp a block. ok[row] ends 0 when a block of the row does not pack. */
template <bool FP4>
__global__ void k_kvfmt_roundtrip(const float *x, int nrows, int n, uint8_t *codes, uint8_t *exps, float *y, int *ok) {
    cu_pdl_enter();
    constexpr int BS = FP4 ? 32 : 64;
    const int lane = threadIdx.x & 31;
    const int nb = n / BS;
    const int64_t blk = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= (int64_t)nrows * nb) return;
    const int row = (int)(blk / nb);
    const float *v = x + blk * BS;
    int k;
    uint32_t c0, c1;
    const bool good = kv_pack_block<FP4>(v[lane], FP4 ? 0.0f : v[lane + 32], codes + blk * (FP4 ? 16 : 64), k, c0, c1);
    if (lane == 0) {
        exps[blk] = (uint8_t)(good ? k + 127 : 0);
        if (!good) atomicAnd(&ok[row], 0);
    }
    y[blk * BS + lane] = ldexpf(FP4 ? d_e2m1_decode(c0) : d_e4m3_decode(c0), k);
    if (!FP4) y[blk * BS + lane + 32] = ldexpf(d_e4m3_decode(c1), k);
}

extern "C" void cu_kvfmt_roundtrip(int fp4, const float *x, int nrows, int n, uint8_t *codes, uint8_t *exps, float *y,
                                   int *ok, cudaStream_t st) {
    const int bs = fp4 ? 32 : 64;
    const int64_t nblk = (int64_t)nrows * (n / bs);
    const unsigned grid = (unsigned)((nblk + 7) / 8);
    if (fp4) cu_launch(k_kvfmt_roundtrip<true>, grid, 256, 0, st, x, nrows, n, codes, exps, y, ok);
    else cu_launch(k_kvfmt_roundtrip<false>, grid, 256, 0, st, x, nrows, n, codes, exps, y, ok);
}

/* ------------------------------------------------------------------ */
/* whole rows (cu_kvrow.cuh layouts)                                   */

/* A block a row: f32 rows in, packed rows out. The packed part goes a block
 * of values at a time (a warp each, as the roundtrip); a row whose values are
 * not the format's (a state saved with the simulations off) clears ok. */
template <bool FP4>
__global__ void k_kvrows_pack(const float *x, int nrows, int hd, int nrot, uint8_t *rows, int *ok) {
    cu_pdl_enter();
    constexpr int BS = FP4 ? 32 : 64;
    const int r = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (r >= nrows) return;
    const int npk = FP4 ? hd : hd - nrot, stride = FP4 ? kv4_stride(hd) : kv8_stride(hd, nrot);
    const float *v = x + (int64_t)r * hd;
    uint8_t *row = rows + (int64_t)r * stride, *exps = row + (FP4 ? hd / 2 : npk);
    for (int b = w; b < npk / BS; b += nw) {
        int k;
        uint32_t c0, c1;
        const bool good = kv_pack_block<FP4>(v[b * BS + lane], FP4 ? 0.0f : v[b * BS + lane + 32],
                                             row + b * (FP4 ? 16 : 64), k, c0, c1);
        if (lane == 0) {
            exps[b] = (uint8_t)(k + 127);
            if (!good) atomicAnd(ok, 0);
        }
    }
    if (!FP4) {
        float *tail = (float *)(row + kv8_rope_off(hd, nrot));
        for (int j = threadIdx.x; j < nrot; j += blockDim.x) tail[j] = v[npk + j];
    }
}

/* Thread per value (4 for FP8, 8 for FP4 at a time): packed rows to f32 rows. */
template <bool FP4>
__global__ void k_kvrows_unpack(const uint8_t *rows, int nrows, int hd, int nrot, float *y) {
    cu_pdl_enter();
    constexpr int G = FP4 ? 8 : 4;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, per = hd / G;
    if (i >= (int64_t)nrows * per) return;
    const int r = (int)(i / per), col = (int)(i - (int64_t)r * per) * G;
    float *o = y + (int64_t)r * hd + col;
    if (FP4) {
        float v[8];
        kv4_load8(rows + (int64_t)r * kv4_stride(hd), col, hd, v);
        for (int j = 0; j < 8; j++) o[j] = v[j];
    } else {
        const float4 v = kv8_load4(rows + (int64_t)r * kv8_stride(hd, nrot), col, hd, nrot);
        o[0] = v.x; o[1] = v.y; o[2] = v.z; o[3] = v.w;
    }
}

extern "C" void cu_kvrows_pack(int fmt, const float *x, int nrows, int hd, int nrot, void *rows, int *ok,
                               cudaStream_t st) {
    if (nrows <= 0) return;
    if (fmt == CU_KV_FP4) cu_launch(k_kvrows_pack<true>, (unsigned)nrows, 128, 0, st, x, nrows, hd, nrot, (uint8_t *)rows, ok);
    else cu_launch(k_kvrows_pack<false>, (unsigned)nrows, 256, 0, st, x, nrows, hd, nrot, (uint8_t *)rows, ok);
}
extern "C" void cu_kvrows_unpack(int fmt, const void *rows, int nrows, int hd, int nrot, float *y, cudaStream_t st) {
    if (nrows <= 0) return;
    const int64_t n = (int64_t)nrows * hd / (fmt == CU_KV_FP4 ? 8 : 4);
    const unsigned grid = (unsigned)((n + 255) / 256);
    if (fmt == CU_KV_FP4) cu_launch(k_kvrows_unpack<true>, grid, 256, 0, st, (const uint8_t *)rows, nrows, hd, nrot, y);
    else cu_launch(k_kvrows_unpack<false>, grid, 256, 0, st, (const uint8_t *)rows, nrows, hd, nrot, y);
}

/* The writer's path against the simulation, a block a row of shared values:
 * sim[] gets d_fp8_sim_sh's / d_fp4_sim_sh's floats (the f32 cache's rows),
 * rows[] d_fp8_pack_sh's / d_fp4_pack_sh's (the packed cache's, tail
 * included); unpacked, the two must be the same bits. */
template <bool FP4>
__global__ void k_kvrows_sim(const float *x, int nrows, int hd, int nrot, float *sim, uint8_t *rows) {
    cu_pdl_enter();
    extern __shared__ float kvs[];
    const int r = blockIdx.x;
    const int npk = FP4 ? hd : hd - nrot;
    for (int j = threadIdx.x; j < hd; j += blockDim.x) kvs[j] = x[(int64_t)r * hd + j];
    __syncthreads();
    if (FP4) {
        uint8_t *row = rows + (int64_t)r * kv4_stride(hd);
        d_fp4_pack_sh(kvs, hd, row, row + hd / 2);
        d_fp4_sim_sh(kvs, hd);
    } else {
        uint8_t *row = rows + (int64_t)r * kv8_stride(hd, nrot);
        d_fp8_pack_sh(kvs, npk, row, row + npk);
        float *tail = (float *)(row + kv8_rope_off(hd, nrot));
        for (int j = threadIdx.x; j < nrot; j += blockDim.x) tail[j] = kvs[npk + j];
        d_fp8_sim_sh(kvs, npk, nullptr);
    }
    for (int j = threadIdx.x; j < hd; j += blockDim.x) sim[(int64_t)r * hd + j] = kvs[j];
}
extern "C" void cu_kvrows_sim(int fmt, const float *x, int nrows, int hd, int nrot, float *sim, void *rows,
                              cudaStream_t st) {
    if (nrows <= 0) return;
    const size_t sh = sizeof(float) * (size_t)hd;
    if (fmt == CU_KV_FP4) cu_launch(k_kvrows_sim<true>, (unsigned)nrows, 128, sh, st, x, nrows, hd, nrot, sim, (uint8_t *)rows);
    else cu_launch(k_kvrows_sim<false>, (unsigned)nrows, 256, sh, st, x, nrows, hd, nrot, sim, (uint8_t *)rows);
}
