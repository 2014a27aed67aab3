/* cu_kvfmt.cu: KV rows in the simulations' own formats on the GPU (issue #6):
 * pack a row's FP8 blocks (E4M3 codes + a UE8M0 exponent per 64 values) or
 * FP4 blocks (E2M1 codes + an exponent per 32) and unpack them, with the
 * device twins of src/cpu/numerics.c (cu_numerics.cuh). The cache's writers
 * and readers will call the same device functions; this file's round trip is
 * what tests/cuda/kvfmt_check.c holds against nm_fp8_pack / nm_fp4_pack.
 */
#include "cuda/cu_common.cuh"
#include "cuda/cu_numerics.cuh"
#include "cuda/cu_ops.h"

/* A warp a block: FP8 lanes take values l and l + 32 of 64, FP4 value l of 32.
 * ok[row] ends 0 when a block of the row does not pack (as nm_*_pack's 0). */
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
    const float a0 = v[lane], a1 = FP4 ? 0.0f : v[lane + 32];
    const float amax = warp_max(fmaxf(fabsf(a0), fabsf(a1)));
    const bool nan = __any_sync(0xffffffffu, a0 != a0 || a1 != a1);
    const int k = nan ? -1000 : d_kv_block_exp(amax, FP4 ? 6.0f : 448.0f);
    bool g0 = k != -1000, g1 = g0;
    uint32_t c0 = 0, c1 = 0;
    if (g0) {
        c0 = d_kv_code<FP4>(a0, k, g0);
        if (!FP4) c1 = d_kv_code<FP4>(a1, k, g1);
    }
    const bool good = __all_sync(0xffffffffu, g0 && g1);
    if (lane == 0) {
        exps[blk] = (uint8_t)(good ? k + 127 : 0);
        if (!good) atomicAnd(&ok[row], 0);
    }
    if (FP4) {
        /* value 2i in the low nibble of byte i */
        const uint32_t hi = __shfl_down_sync(0xffffffffu, c0, 1);
        if (!(lane & 1)) codes[blk * 16 + lane / 2] = (uint8_t)(c0 | (hi << 4));
        y[blk * BS + lane] = ldexpf(d_e2m1_decode(c0), k);
    } else {
        codes[blk * 64 + lane] = (uint8_t)c0;
        codes[blk * 64 + lane + 32] = (uint8_t)c1;
        y[blk * BS + lane] = ldexpf(d_e4m3_decode(c0), k);
        y[blk * BS + lane + 32] = ldexpf(d_e4m3_decode(c1), k);
    }
}

extern "C" void cu_kvfmt_roundtrip(int fp4, const float *x, int nrows, int n, uint8_t *codes, uint8_t *exps, float *y,
                                   int *ok, cudaStream_t st) {
    const int bs = fp4 ? 32 : 64;
    const int64_t nblk = (int64_t)nrows * (n / bs);
    const unsigned grid = (unsigned)((nblk + 7) / 8);
    if (fp4) cu_launch(k_kvfmt_roundtrip<true>, grid, 256, 0, st, x, nrows, n, codes, exps, y, ok);
    else cu_launch(k_kvfmt_roundtrip<false>, grid, 256, 0, st, x, nrows, n, codes, exps, y, ok);
}
