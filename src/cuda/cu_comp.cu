/* cu_comp.cu: the KV compressors (spec model.md §6.5): rows emitted when a
 * window closes (pooled, normed, RoPE at the window's first position, FP8 /
 * FP4 simulations) and the streaming state carried between calls. With the
 * simulations on, the rows are stored packed (cu_kvrow.cuh: FP8 attention
 * rows, FP4 indexer rows), the simulations' codes instead of their floats.
 * The ratio-128 state has a parallel kernel and the previous one (cu_dec.h).
 */
#include <stdlib.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_numerics.cuh"
#include "cuda/cu_kvrow.cuh"
#include "cuda/cu_ops.h"
#include "cuda/cu_dec.h"

/* ------------------------------------------------------------------ */
/* compressor (spec §8)                                                */

/* value and score (ape included) of token position p, column col (of Wd). */
__device__ __forceinline__ void comp_cand(int p, int col, int pos0, const float *a, const float *s,
                                          const void *ape, int apetype, int m, int Wd,
                                          const float *Skv, const float *Ssc, float *v, float *sc) {
    if (p >= pos0) {
        int t = p - pos0;
        *v = a[(int64_t)t * Wd + col];
        *sc = s[(int64_t)t * Wd + col] + cu_wload(ape, apetype, (int64_t)(p % m) * Wd + col);
    } else {
        int open0 = (pos0 / m) * m;     /* first position of the window open at pos0 */
        int slot = p >= open0 ? (m == 4 ? 4 : 0) + p % m : p % m;
        *v = Skv[(int64_t)slot * Wd + col];
        *sc = Ssc[(int64_t)slot * Wd + col];
    }
}

/* the pooling's softmax over a window's candidates: the sum step of one
 * candidate (score sc, value v) given the max mx, and the pooled value */
__device__ __forceinline__ void comp_pool_add(float sc, float v, float mx, float &num, float &den) {
    if (sc > -5e29f) { float e = expf(sc - mx); num += e * v; den += e; }
}
__device__ __forceinline__ float comp_pooled(float mx, float num, float den) {
    return (mx <= -5e29f || den == 0.f) ? 0.f : num / den;
}

#define COMP_EMIT_MAXT 512
#define COMP_EMIT_MAXROT 64

__global__ void __launch_bounds__(COMP_EMIT_MAXT, 1) k_comp_emit(const float *a, const float *s, int T, const void *ape, int apetype, int m, int d,
                            const float *Skv, const float *Ssc, const float *norm_w, float eps, int nrot,
                            const float *inv_freq, const int *pos0p, int sims, int is_index, int f16round,
                            void *rows, int fmt) {
    extern __shared__ float sh[];        /* d floats + 128 doubles */
    __shared__ double shd[33];
    /* the window's RoPE angles before the PDL wait (cu_rope_early): thread k
     * of the tail's nrot / 2 pairs, the (double) sincos d_rope_tail_sh took
     * on the critical path after the pooling */
    const int pos0 = *pos0p;
    const int first = pos0 / m, last = (pos0 + T) / m;   /* windows first .. last-1 emit in this batch */
    const int w = first + blockIdx.x;
    __shared__ float r_cs[2][COMP_EMIT_MAXROT];
    const bool early = nrot / 2 <= COMP_EMIT_MAXROT && nrot / 2 <= (int)blockDim.x;   /* else d_rope_tail_sh */
    if (early && w < last && (int)threadIdx.x < nrot / 2)
        d_rope_cs(w * m, inv_freq, threadIdx.x, r_cs[0][threadIdx.x], r_cs[1][threadIdx.x]);
    cu_pdl_enter();
    if (w >= last) return;
    int c = m == 4 ? 2 : 1, Wd = c * d;
    double ss = 0.0;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float mx = -INFINITY;
        if (m == 4) {
            /* ratio 4: the 8 candidates (the previous window's 4 on the first
             * half of the columns, this window's 4 on the second) loaded at
             * once, then the two passes of the other ratios over them in the
             * same order (the same bits) */
            float cv[8], cs[8];
#pragma unroll
            for (int r = 0; r < 4; r++) {
                cv[r] = 0.f; cs[r] = -INFINITY;
                if (w > 0) comp_cand((w - 1) * 4 + r, j, pos0, a, s, ape, apetype, m, Wd, Skv, Ssc, &cv[r], &cs[r]);
                comp_cand(w * 4 + r, d + j, pos0, a, s, ape, apetype, m, Wd, Skv, Ssc, &cv[4 + r], &cs[4 + r]);
            }
#pragma unroll
            for (int r = 0; r < 8; r++) if (cs[r] > mx) mx = cs[r];
            float num = 0.f, den = 0.f;
#pragma unroll
            for (int r = 0; r < 8; r++) comp_pool_add(cs[r], cv[r], mx, num, den);
            const float pooled = comp_pooled(mx, num, den);
            sh[j] = pooled;
            ss += (double)pooled * pooled;
            continue;
        }
        /* two passes over the candidates: max, then the weighted sum */
        for (int pass = 0; pass < 2; pass++) {
            float num = 0.f, den = 0.f;
#pragma unroll 4
            for (int r = 0; r < m; r++) {
                float v, sc;
                comp_cand(w * m + r, j, pos0, a, s, ape, apetype, m, Wd, Skv, Ssc, &v, &sc);
                if (pass == 0) { if (sc > mx) mx = sc; }
                else comp_pool_add(sc, v, mx, num, den);
            }
            if (pass == 1) {
                const float pooled = comp_pooled(mx, num, den);
                sh[j] = pooled;
                ss += (double)pooled * pooled;
            }
        }
    }
    ss = block_sum_d(ss, shd);
    float r = (float)(1.0 / sqrt(ss / d + (double)eps));
    for (int j = threadIdx.x; j < d; j += blockDim.x) sh[j] = sh[j] * r * norm_w[j];
    __syncthreads();
    if (!early) {
        d_rope_tail_sh(sh, d, nrot, inv_freq, w * m, 0);
    } else if ((int)threadIdx.x < nrot / 2) {     /* d_rope_tail_sh with the angles from before the wait (the same thread) */
        d_rope_pair_sh(sh, d - nrot, threadIdx.x, r_cs[0][threadIdx.x], r_cs[1][threadIdx.x]);
    }
    __syncthreads();
    if (sims && is_index) d_hadamard128_sh(sh, (double *)(sh + d + (d & 1)));
    if (fmt == CU_KV_FP8) {
        /* the simulation's codes and scales, then the RoPE tail as f32 */
        uint8_t *row = (uint8_t *)rows + (int64_t)w * kv8_stride(d, nrot);
        d_fp8_pack_sh(sh, d - nrot, row, row + (d - nrot));
        float *tail = (float *)(row + kv8_rope_off(d, nrot));
        for (int j = threadIdx.x; j < nrot; j += blockDim.x) tail[j] = sh[d - nrot + j];
        return;
    }
    if (fmt == CU_KV_FP4) {
        uint8_t *row = (uint8_t *)rows + (int64_t)w * kv4_stride(d);
        d_fp4_pack_sh(sh, d, row, row + d / 2);
        return;
    }
    if (sims) {
        if (is_index) d_fp4_sim_sh(sh, d);
        else d_fp8_sim_sh(sh, d - nrot, nullptr);
    }
    float *frow = (float *)rows + (int64_t)w * d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) frow[j] = f16round ? d_f16_round(sh[j]) : sh[j];
}

void cu_comp_emit(const float *a, const float *s, int T, const void *ape, int apetype, int m, int d,
                  float *Skv, float *Ssc, const float *norm_w, float eps, int nrot, const float *inv_freq,
                  const int *pos0p, int sims, int is_index, int f16round, void *rows, int fmt, cudaStream_t st) {
    int maxe = T / m + 1;
    size_t shm = (size_t)(d + 2) * sizeof(float) + 128 * sizeof(double);
    /* a thread per column (512 for the attention rows): each column walks its window's
     * candidates twice with dependent loads, and a ratio-128 window with 4 columns a
     * thread was latency-bound (484 us for a 4096-token prefill's 33 windows) */
    int threads = d < 128 ? 128 : d > COMP_EMIT_MAXT ? COMP_EMIT_MAXT : (d + 31) / 32 * 32;
    cu_launch(k_comp_emit, maxe, threads, shm, st, a, s, T, ape, apetype, m, d, Skv, Ssc, norm_w, eps, nrot, inv_freq,
                                        pos0p, sims, is_index, f16round, rows, fmt);
}

/* Carried state after the batch: thread per column of Wd. */
__global__ void k_comp_state(const float *a, const float *s, int T, const void *ape, int apetype, int m, int d,
                             float *Skv, float *Ssc, const int *pos0p) {
    cu_pdl_enter();
    int c = m == 4 ? 2 : 1, Wd = c * d;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= Wd) return;
    int pos0 = *pos0p, end = pos0 + T;
    int open_end = (end / m) * m;          /* first position of the window open after the batch */
    int closed_any = end / m > pos0 / m;   /* a window closed inside the batch */
    int lo = m == 4 ? 4 : 0;
    float nv[8], ns[8];
    if (m == 4) {
        for (int r = 0; r < 4; r++) { nv[r] = Skv[(int64_t)r * Wd + col]; ns[r] = Ssc[(int64_t)r * Wd + col]; }
        if (closed_any)      /* slots 0..3: the last closed window's tokens (lane A is what is read later) */
            for (int r = 0; r < 4; r++)
                comp_cand(open_end - 4 + r, col, pos0, a, s, ape, apetype, m, Wd, Skv, Ssc, &nv[r], &ns[r]);
    }
    for (int r = 0; r < m; r++) {
        int p = open_end + r;
        int64_t o = (int64_t)(lo + r) * Wd + col;
        float v, sc;
        if (p >= end) { v = 0.f; sc = -INFINITY; }
        else if (p >= pos0) comp_cand(p, col, pos0, a, s, ape, apetype, m, Wd, Skv, Ssc, &v, &sc);
        else continue;       /* written before the batch, still in its slot */
        if (m == 4) { nv[4 + r] = v; ns[4 + r] = sc; }
        else { Skv[o] = v; Ssc[o] = sc; }
    }
    if (m == 4) {
        for (int r = 0; r < 8; r++) {
            if (r >= 4 && open_end + (r - 4) < pos0) continue;
            Skv[(int64_t)r * Wd + col] = nv[r]; Ssc[(int64_t)r * Wd + col] = ns[r];
        }
    }
}

/* The state of the m != 4 compressors (one window of slots, each slot on its
 * own: no slot reads another) with a thread per (column, 4 slots) instead of
 * per column: a ratio-128 decode step rewrites 128 slots of each column and
 * a thread walking all of them was most of k_comp_state's time. Same values
 * as k_comp_state. */
#define CS_SLOTS 4
__global__ void k_comp_state_slots(const float *a, const float *s, int T, const void *ape, int apetype, int m, int d,
                                   float *Skv, float *Ssc, const int *pos0p) {
    cu_pdl_enter();
    int Wd = d;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= Wd) return;
    int pos0 = *pos0p, end = pos0 + T;
    int open_end = (end / m) * m;
#pragma unroll
    for (int u = 0; u < CS_SLOTS; u++) {
        int r = blockIdx.y * CS_SLOTS + u;
        if (r >= m) break;
        int p = open_end + r;
        int64_t o = (int64_t)r * Wd + col;
        float v, sc;
        if (p >= end) { v = 0.f; sc = -INFINITY; }
        else if (p >= pos0) comp_cand(p, col, pos0, a, s, ape, apetype, m, Wd, Skv, Ssc, &v, &sc);
        else continue;
        Skv[o] = v; Ssc[o] = sc;
    }
}

void cu_comp_state(const float *a, const float *s, int T, const void *ape, int apetype, int m, int d,
                   float *Skv, float *Ssc, const int *pos0p, cudaStream_t st) {
    int Wd = (m == 4 ? 2 : 1) * d;
    if (m != 4 && !cu_dec_old(CU_OLD_COMP_STATE)) {
        cu_launch(k_comp_state_slots, dim3((Wd + 127) / 128, (m + CS_SLOTS - 1) / CS_SLOTS), 128, 0, st, a, s, T, ape,
                  apetype, m, d, Skv, Ssc, pos0p);
        return;
    }
    cu_launch(k_comp_state, (Wd + 127) / 128, 128, 0, st, a, s, T, ape, apetype, m, d, Skv, Ssc, pos0p);
}

