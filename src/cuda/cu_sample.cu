/* cu_sample.cu: what the sampler needs from a decode step's logits, found
 * where they are (engine/backend.h sample_cands): the argmax over the
 * finite logits and the candidates above the min-p floor, so that chat and
 * serve copy ~8 KB a token instead of the vocabulary's 517 KB and scan a
 * handful of values instead of 129,280 (the copy and the host scan cost ~8%
 * of a decode step on an H200: docs/performance.md, twenty-fourth session).
 *
 * One block of 1024 threads over the row: the argmax (the lowest id on
 * ties, as sampler_argmax), then the finite logits >= lmax + floor_off in
 * increasing id order: each warp counts its contiguous slice, a scan of the
 * 32 counts places the slices, and each warp writes its slice's hits in
 * order (ballots). The row is ~0.5 MB, read three times from L2.
 */
#include <limits.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_ops.h"

#define SC_THREADS 1024

/* out: int count, int amax, float lmax, int (unused); then cap ids, then cap values */
__global__ void __launch_bounds__(SC_THREADS) k_sample_cands(const float *x, int n, float floor_off, int cap, int *out) {
    cu_pdl_enter();
    __shared__ float sv[32];
    __shared__ int si[32], wbase[33];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int i = tid; i < n; i += SC_THREADS) {
        const float v = x[i];
        if (isfinite(v)) cu_argmax_take(bv, bi, v, i);
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        cu_argmax_take(bv, bi, ov, oi);
    }
    if (lane == 0) { sv[w] = bv; si[w] = bi; }
    __syncthreads();
    bv = sv[lane]; bi = si[lane];
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        cu_argmax_take(bv, bi, ov, oi);
    }
    const int amax = bi == INT_MAX ? -1 : bi;
    if (amax < 0 || cap == 0) {
        if (tid == 0) { out[0] = 0; out[1] = amax; out[2] = __float_as_int(amax < 0 ? 0.f : bv); out[3] = 0; }
        return;
    }
    const float thr = bv + floor_off;
    const int C = ((n + 31) / 32 + 31) / 32 * 32;
    const int start = w * C, end = min(n, start + C);
    int cnt = 0;
    for (int i0 = start; i0 < end; i0 += 32) {
        const int i = i0 + lane;
        const float v = i < end ? x[i] : -INFINITY;
        cnt += __popc(__ballot_sync(0xffffffffu, i < end && isfinite(v) && v >= thr));
    }
    if (lane == 0) wbase[w] = cnt;
    __syncthreads();
    if (w == 0) {
        const int c = wbase[lane];
        int inc = c;
        for (int o = 1; o < 32; o <<= 1) {
            const int t = __shfl_up_sync(0xffffffffu, inc, o);
            if (lane >= o) inc += t;
        }
        __syncwarp();
        wbase[lane] = inc - c;
        if (lane == 31) wbase[32] = inc;
    }
    __syncthreads();
    int *ids = out + 4;
    float *vals = (float *)(out + 4 + cap);
    int pos = wbase[w];
    const unsigned lt = (1u << lane) - 1u;
    for (int i0 = start; i0 < end && pos < cap; i0 += 32) {
        const int i = i0 + lane;
        const float v = i < end ? x[i] : -INFINITY;
        const bool hit = i < end && isfinite(v) && v >= thr;
        const unsigned b = __ballot_sync(0xffffffffu, hit);
        const int p = pos + __popc(b & lt);
        if (hit && p < cap) { ids[p] = i; vals[p] = v; }
        pos += __popc(b);
    }
    if (tid == 0) { out[0] = wbase[32]; out[1] = amax; out[2] = __float_as_int(bv); out[3] = 0; }
}

size_t cu_sample_cands_bytes(int cap) { return 16 + (size_t)cap * 8; }

void cu_sample_cands(const float *logits, int n, float floor_off, int cap, int *out, cudaStream_t st) {
    cu_launch(k_sample_cands, 1, SC_THREADS, 0, st, logits, n, floor_off, cap, out);
}
