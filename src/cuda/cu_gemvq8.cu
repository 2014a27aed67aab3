/* cu_gemvq8.cu: the one-token product of dense Q8_0 weights (the repacked
 * Q8_0R layout) with exact activations on the int8 tensor cores. Off by
 * default (MINKE_CUDA_Q8MMA=1 turns it on): measured, it does not make the
 * decode step faster (docs/performance.md, fifth session).
 *
 * The idea: dense Q8_0 matrices are 70% of the bytes a decode step reads,
 * and the f32 GEMV (cu_gemv.cu k_gemvf) spends ~6.7 instructions a weight on
 * them. Here one mma.sync m16n8k32 multiplies 16 rows x one 32-block of codes
 * with the activation split into three int8 pieces (cu_split.cuh, the pieces
 * of the exact prefill) as three of the mma's eight columns: ~20
 * instructions for 512 weights. What the H200 showed: the big decode GEMVs
 * are not bound by instructions but by each launch's ramp and tail (35.6 MB
 * in a graph of 43 launches: this kernel 14.6-15.1 us, k_gemvf 13.9, the old
 * int8-activation kernel 12.2, a plain 16-byte stream of the same bytes 9.7);
 * it wins only on the small q_a / kv shapes (3.2-3.7 against 5.1 us).
 *
 * Fragments: lane (g = lane / 4, t = lane % 4) holds bytes 8t..8t+7 of a
 * block of rows g and g + 8 (one 8-byte load each, straight from the Q8_0R
 * row) and the same bytes of piece g of the activation block (g < 3; the
 * other columns are zero). The mma's k slots 4t..4t+3 and 16+4t..16+4t+3
 * then mean elements 8t..8t+7 on both sides, so the integer dot is the
 * block's. The accumulators start at the bits of 1.5 * 2^23 (a piece dot read
 * as a float without I2F, cu_split.cuh). Lane t = 0 gets the top and middle
 * piece dots of its two rows, t = 1 the low one: each adds its share times
 * the weight scale times the activation scale D of the block, and the four
 * lanes of a row add their sums at the end (a fixed order: results do not
 * depend on the grid). Against k_gemvf the difference is the activation
 * split (within 1.5e-7 of each block's amax) and the float order.
 *
 * Work: a block of 8 warps takes row groups of 16 x (8 / KS) rows; the KS
 * warps of a 16-row tile split the row's 4-block steps and add their sums
 * through shared memory in warp order. A lane keeps RING steps of loads in
 * flight (20 registers a step); the first ones are requested before the PDL
 * wait (weights are never written during a step), the next row group's
 * before the current one's sums. Each warp splits the 4 activation blocks of
 * a step itself, just before it needs them (a block-wide split of the whole
 * activation after the PDL wait cost 2-3 us a launch: its loads queue behind
 * the weights). Applies when the row has a multiple of 4 blocks (8-byte
 * aligned rows and scale quads) and at most 16384 elements.
 */
#include "cuda/cu_common.cuh"
#include "cuda/cu_split.cuh"
#include "cuda/cu_ops.h"
#include "cuda/cu_gemvq8.h"

#define QM_NW 8           /* warps a block */
#define QM_SB 4           /* 32-blocks a step */
#define QM_IW 24          /* words of an activation block in shared memory: 3 pieces x 8 */
#define QM_MAXIN 16384

typedef struct {
    const uint8_t *w, *w2;    /* Q8_0R rows; w2: a second matrix on the same activations (gate + up) */
    float *out, *out2;
    int rows, nit;            /* rows; 32-blocks a row */
    uint64_t row_bytes;
    const float *x;           /* the activation (f32) */
    int64_t group_rows, group_floats;     /* grouped input: row r reads x + (r / group_rows) * group_floats */
    int accumulate;
} qm_args;

/* one step of a lane: bytes 8t..8t+7 of 4 blocks of rows g and g + 8, and their 4 scales */
typedef struct { uint2 cg[QM_SB], c8[QM_SB], sg, s8; } qm_step;

__device__ __forceinline__ void qm_load(qm_step &s, const uint8_t *pg, const uint8_t *p8, int b0, int sc0, int t) {
#pragma unroll
    for (int j = 0; j < QM_SB; j++) {
        s.cg[j] = ldw_v2(pg + (b0 + j) * 32 + 8 * t);
        s.c8[j] = ldw_v2(p8 + (b0 + j) * 32 + 8 * t);
    }
    s.sg = ldw_v2(pg + sc0 + 2 * b0);
    s.s8 = ldw_v2(p8 + sc0 + 2 * b0);
}

__device__ __forceinline__ float2 qm_h2(uint32_t v) { return __half22float2(*(const __half2 *)&v); }

/* One step into the lane's sums of rows g (acc0) and g + 8 (acc1). (w0, w1):
 * the weights of the lane's two columns 2t, 2t + 1 among (top 256, middle 1,
 * low 1/256, zeros): dot / D = 256 S_top + S_mid + S_low / 256. */
__device__ __forceinline__ void qm_step_sum(const qm_step &s, const int *pw, const float *dsc, int b0, int g, int t, float w0,
                                            float w1, float &acc0, float &acc1) {
    const float4 D = *(const float4 *)(dsc + b0);
    const float2 dg01 = qm_h2(s.sg.x), dg23 = qm_h2(s.sg.y), d801 = qm_h2(s.s8.x), d823 = qm_h2(s.s8.y);
    const float dg[4] = {dg01.x, dg01.y, dg23.x, dg23.y}, d8[4] = {d801.x, d801.y, d823.x, d823.y};
    const float Dv[4] = {D.x, D.y, D.z, D.w};
#pragma unroll
    for (int j = 0; j < QM_SB; j++) {
        int2 b = make_int2(0, 0);
        if (g < 3) b = *(const int2 *)(pw + (b0 + j) * QM_IW + 8 * g + 2 * t);
        int c[4];
        mx_mma_s8(c, s.cg[j].x, s.c8[j].x, s.cg[j].y, s.c8[j].y, b.x, b.y, MX_MAGIC_BITS);
        const float v0 = __fmaf_rn(mx_dot_f(c[0]), w0, mx_dot_f(c[1]) * w1);
        const float v1 = __fmaf_rn(mx_dot_f(c[2]), w0, mx_dot_f(c[3]) * w1);
        acc0 = __fmaf_rn(v0, dg[j] * Dv[j], acc0);
        acc1 = __fmaf_rn(v1, d8[j] * Dv[j], acc1);
    }
}

/* float4 lane % 8 of activation block lane / 8 of step s of this warp's
 * steps (ks + s KS), zeros past them */
__device__ __forceinline__ float4 qm_xl(const float *xg, int ks, int KS, int s, int nmine, int lane) {
    if (s >= nmine) return make_float4(0.f, 0.f, 0.f, 0.f);
    const int b = (ks + s * KS) * QM_SB + (lane >> 3);
    return __ldg((const float4 *)(xg + (int64_t)b * 32 + (lane & 7) * 4));
}

/* The pieces of one step's 4 blocks by one warp into the warp's buffer (word
 * li of piece p of block j at pw[j * QM_IW + 8 p + li], D at dsc[j]): 8 lanes
 * a block, lane li holding float4 li, so the block's amax is 3 shuffles. */
__device__ __forceinline__ void qm_split_warp(float4 v, int lane, int *pw, float *dsc) {
    const int li = lane & 7, j = lane >> 3;
    float m = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    int pc[3];
    mx_split4<3>(v, mx_inv_scale<3>(m), pc);
    pw[j * QM_IW + li] = pc[0];
    pw[j * QM_IW + 8 + li] = pc[1];
    pw[j * QM_IW + 16 + li] = pc[2];
    if (li == 0) dsc[j] = m * (1.f / 32512.f);
}

/* this lane's rows r0 and r0 + 8 (rows past the end repeat the last one) */
__device__ __forceinline__ void qm_rows(const qm_args &a, const uint8_t *wbase, int64_t r0, const uint8_t *&pg,
                                        const uint8_t *&p8) {
    int64_t ra = r0 < a.rows ? r0 : a.rows - 1, rb = r0 + 8 < a.rows ? r0 + 8 : a.rows - 1;
    pg = wbase + ra * (int64_t)a.row_bytes;
    p8 = wbase + rb * (int64_t)a.row_bytes;
}

template <int KS, int RING>
__global__ void __launch_bounds__(QM_NW * 32, 2) k_gemv_q8mma(qm_args a) {
    __shared__ float red[KS > 1 ? QM_NW : 1][16];
    /* each warp's pieces of its current step (two buffers: a step's are
     * written while no lane still reads the ones of two steps before) */
    __shared__ __align__(16) int jpw[QM_NW][2][QM_SB * QM_IW];
    __shared__ __align__(16) float jd[QM_NW][2][QM_SB];
    constexpr int TPB = QM_NW / KS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tw = warp / KS, ks = warp - tw * KS;
    int bx = blockIdx.x;
    const int gxh = a.w2 ? (int)(gridDim.x >> 1) : (int)gridDim.x;
    const uint8_t *wbase = a.w;
    float *out = a.out;
    if (a.w2 && bx >= gxh) { bx -= gxh; wbase = a.w2; out = a.out2; }
    const int64_t rpb = TPB * 16;
    const int nrg = (int)((a.rows + rpb - 1) / rpb);
    const int nsteps = a.nit / QM_SB, sc0 = a.nit * 32;
    const int nmine = (nsteps - ks + KS - 1) / KS;     /* steps ks, ks + KS, ... */
    qm_step ring[RING];
    const uint8_t *pg = 0, *p8 = 0;
    int loaded = -1;
    if (bx < nrg) {
        qm_rows(a, wbase, (int64_t)bx * rpb + tw * 16 + g, pg, p8);
#pragma unroll
        for (int d = 0; d < RING; d++)
            if (d < nmine) qm_load(ring[d], pg, p8, (ks + d * KS) * QM_SB, sc0, t);
        loaded = bx;
    }
    cu_pdl_enter();
    const float w0 = t == 0 ? 256.f : t == 1 ? 1.f / 256.f : 0.f, w1 = t == 0 ? 1.f : 0.f;
    for (int rg = bx; rg < nrg; rg += gxh) {
        const int64_t rb0 = (int64_t)rg * rpb;
        const int64_t aoff = a.group_rows ? (rb0 / a.group_rows) * a.group_floats : 0;
        if (loaded != rg) {
            qm_rows(a, wbase, rb0 + tw * 16 + g, pg, p8);
#pragma unroll
            for (int d = 0; d < RING; d++)
                if (d < nmine) qm_load(ring[d], pg, p8, (ks + d * KS) * QM_SB, sc0, t);
        }
        float acc0 = 0.f, acc1 = 0.f;
        const float *xg = a.x + aoff;
        float4 xa[2];
        xa[0] = qm_xl(xg, ks, KS, 0, nmine, lane);
        xa[1] = qm_xl(xg, ks, KS, 1, nmine, lane);
        for (int i = 0; i < nmine; i += RING) {
#pragma unroll
            for (int d = 0; d < RING; d++)
                if (i + d < nmine) {
                    const float4 v = xa[d & 1];
                    xa[d & 1] = qm_xl(xg, ks, KS, i + d + 2, nmine, lane);
                    qm_split_warp(v, lane, jpw[warp][d & 1], jd[warp][d & 1]);
                    __syncwarp();
                    qm_step_sum(ring[d], jpw[warp][d & 1], jd[warp][d & 1], 0, g, t, w0, w1, acc0, acc1);
                    if (i + d + RING < nmine) qm_load(ring[d], pg, p8, (ks + (i + d + RING) * KS) * QM_SB, sc0, t);
                }
        }
        /* the next row group's first steps are requested before this one's sums */
        loaded = -1;
        if (rg + gxh < nrg) {
            qm_rows(a, wbase, (int64_t)(rg + gxh) * rpb + tw * 16 + g, pg, p8);
#pragma unroll
            for (int d = 0; d < RING; d++)
                if (d < nmine) qm_load(ring[d], pg, p8, (ks + d * KS) * QM_SB, sc0, t);
            loaded = rg + gxh;
        }
        /* the four lanes of a row: (t0 + t1) + (t2 + t3) */
        float s0 = acc0 + __shfl_xor_sync(0xffffffffu, acc0, 1);
        float s1 = acc1 + __shfl_xor_sync(0xffffffffu, acc1, 1);
        s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
        if (KS == 1) {
            if (t == 0) {
                const int64_t r = rb0 + tw * 16 + g;
                if (r < a.rows) { float *o = out + r; *o = a.accumulate ? *o + s0 : s0; }
                if (r + 8 < a.rows) { float *o = out + r + 8; *o = a.accumulate ? *o + s1 : s1; }
            }
        } else {
            if (t == 0) { red[warp][g] = s0; red[warp][g + 8] = s1; }
            __syncthreads();
            if (threadIdx.x < TPB * 16) {
                const int tt = threadIdx.x >> 4, rr = threadIdx.x & 15;
                float s = 0.f;
#pragma unroll
                for (int k = 0; k < KS; k++) s += red[tt * KS + k][rr];
                const int64_t r = rb0 + tt * 16 + rr;
                if (r < a.rows) { float *o = out + r; *o = a.accumulate ? *o + s : s; }
            }
            __syncthreads();     /* red is written again by the next row group */
        }
    }
}

/* MINKE_CUDA_Q8MMA: 0 (default) leaves dense Q8_0 decode to k_gemvf; 1: this
 * kernel with 4 steps a lane in flight; 2: with 2 steps (the same sums).
 * cu_gemvq8_set overrides it (-1: back to the environment). */
static int qm_forced = -1, qm_env = -1;
extern "C" void cu_gemvq8_set(int v) { qm_forced = v; }
static int qm_mode(void) {
    if (qm_forced >= 0) return qm_forced;
    if (qm_env < 0) { const char *e = getenv("MINKE_CUDA_Q8MMA"); qm_env = e && *e ? atoi(e) : 0; }
    return qm_env;
}

template <int KS, int RING>
static void qm_launch(const qm_args &a, int pairs, cudaStream_t st) {
    const int64_t rpb = (QM_NW / KS) * 16;
    int64_t gx = (a.rows + rpb - 1) / rpb;
    /* at most the blocks that fit at once (2 an SM), up to 8 row groups a block */
    const int64_t cap = 2 * (int64_t)cu_num_sms();
    if (gx * pairs > cap) {
        int64_t loops = (gx * pairs + cap - 1) / cap;
        if (loops > 8) loops = 8;
        gx = (gx + loops - 1) / loops;
    }
    cu_launch(k_gemv_q8mma<KS, RING>, dim3((unsigned)(gx * pairs)), dim3(QM_NW * 32), 0, st, a);
}

extern "C" int cu_gemvq8(const cu_gemv_args *g, cudaStream_t st) {
    const int mode = qm_mode();
    if (mode <= 0 || !g->act_f32 || g->ntok != 1 || g->tile_pairs || g->wtype != CU_TYPE_Q8_0R) return 0;
    if (g->in % (32 * QM_SB) || g->in > QM_MAXIN || g->rows <= 0 || g->rows > 0x7fffffff) return 0;
    if (((uintptr_t)g->act & 15) || (g->group_rows && (g->group_act_bytes & 15))) return 0;
    if (((uintptr_t)g->w | (uintptr_t)(g->w2 ? g->w2 : g->w) | g->row_bytes) & 7) return 0;
    qm_args a;
    memset(&a, 0, sizeof a);
    a.w = (const uint8_t *)g->w; a.w2 = (const uint8_t *)g->w2;
    a.out = g->out; a.out2 = g->out2;
    a.rows = (int)g->rows; a.nit = (int)(g->in / 32); a.row_bytes = g->row_bytes;
    a.x = (const float *)g->act;
    a.group_rows = g->group_rows; a.group_floats = g->group_act_bytes / 4;
    a.accumulate = g->accumulate;
    const int pairs = g->w2 ? 2 : 1, nsteps = a.nit / QM_SB;
    /* KS: the fewest warps a tile that give >= 2 blocks an SM (each warp keeping
     * >= 2 steps), and a block's rows inside one input group */
    const int64_t want = 2 * (int64_t)cu_num_sms(), gr = g->group_rows;
    auto fits = [&](int ks) { return !gr || gr % ((QM_NW / ks) * 16) == 0; };
    /* (not counting a paired matrix: a pair sums as the single launch) */
    auto blocks = [&](int ks) { return (g->rows + (QM_NW / ks) * 16 - 1) / ((QM_NW / ks) * 16); };
    int ks = 1;
    while (ks < QM_NW && (!fits(ks) || (blocks(ks) < want && nsteps >= 4 * ks))) ks *= 2;
    if (!fits(ks)) return 0;
#define QM_GO(K) do { if (mode == 2) qm_launch<K, 2>(a, pairs, st); else qm_launch<K, 4>(a, pairs, st); } while (0)
    switch (ks) {
    case 1: QM_GO(1); break;
    case 2: QM_GO(2); break;
    case 4: QM_GO(4); break;
    default: QM_GO(8); break;
    }
#undef QM_GO
    return 1;
}
