/* cu_moes.cu: the routed experts of one token (decode) for Q4_K and MXFP4
 * experts: gate + up with the SwiGLU and the router weight in one launch,
 * down summed over the experts in another, the weights streamed into shared
 * memory by bulk copies (sm_90, cu_bulk.cuh), exact activations on dp4a.
 *
 * Why: these formats took the general MoE GEMVs (separate gate, up, SwiGLU,
 * down and sum launches, f32 FMAs on decoded weights, loads a lane at a
 * time) at ~1 TB/s, which left Flash q4 / MXFP4 decode at 28-33% of their
 * bandwidth limits. Their items are 32 weights with their own scales (a Q4_K
 * sub-block, an MXFP4 block), so each item meets the activations' three int8
 * pieces of the same 32 inputs (cu_g3.cuh, one scale an item) in 24 dp4a,
 * and its float fold is one FMA (Q4_K: minus dmin m times the item's sum).
 *
 * Work split: a computing warp takes one row at a time, whole (lane l items
 * l, l + 32, ...), so a stage of rows is one contiguous piece of a matrix:
 *   k_moes_glu   blocks split the owned slots' gate / up rows; a stage is RPS
 *                rows of one slot's gate and the same rows of its up (two
 *                copies); warps take stages in turn;
 *   k_moes_down  blocks split the output rows; a stage is RPS rows of one
 *                slot's down; warp (slot e, group) takes e's chunks in turn,
 *                the per-(row, slot) sums meet in shared memory and one
 *                thread a row adds the slots in order.
 * The ring of nst stage buffers has full / empty barriers; nst is a multiple
 * of the computing warps (glu) or of the slot x group warps (down), so every
 * fill of a buffer is consumed by one warp in order and no parity wait can
 * pass a phase early. Every output is summed in a fixed order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_ops.h"
#include "cuda/cu_gemv3.h"
#include "cuda/cu_split.cuh"
#include "cuda/cu_bulk.cuh"
#include "cuda/cu_g3.cuh"
extern "C" {
#include "quant/quant.h"
}

struct ms_args {
    const uint8_t *w, *w2;          /* glu: gate, up (expert 0); down: down */
    uint64_t row_bytes, expert_bytes;
    int rows, in;                   /* glu: F rows of in = D; down: D rows of in = F */
    const float *x;                 /* glu: x [in]; down: mid [nsel][in] */
    const int *sel; const float *rw; int nsel; float limit;
    float *out;                     /* glu: mid [nsel][F]; down: out [D] */
    uint4 tab;                      /* MXFP4: src/quant's kvalues as 4 words */
};

/* ------------------------------------------------------------------ */
/* one item (32 weights) of a row in shared memory against the activation item */

template <int FMT> struct ms_item;

/* Q4_K (144-byte blocks of 256: d, dmin, 12 bytes of 6-bit scales and mins,
 * 128 bytes of nibbles): item it = sub-block j = it & 7 of block it >> 3,
 * codes (qs[32 (j / 2) + l] >> 4 (j & 1)) & 15; value d sc q - dmin m */
template <> struct ms_item<CU_TYPE_Q4_K> {
    static constexpr bool sums = true;
    __device__ __forceinline__ static float dot(const uint8_t *row, int it, const g3_act &act, const int *ai, uint4) {
        const uint8_t *b = row + (it >> 3) * 144;
        const int j = it & 7, sh = 4 * (j & 1);
        const uint4 q0 = *(const uint4 *)(b + 16 + 32 * (j >> 1)), q1 = *(const uint4 *)(b + 32 + 32 * (j >> 1));
        const uint32_t qw[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
        int s0 = MX_MAGIC_BITS, s1 = MX_MAGIC_BITS, s2 = MX_MAGIC_BITS;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int c = (int)((qw[k] >> sh) & 0x0F0F0F0Fu);
            s0 = __dp4a(c, g3_word(act, 0, k), s0);
            s1 = __dp4a(c, g3_word(act, 1, k), s1);
            s2 = __dp4a(c, g3_word(act, 2, k), s2);
        }
        const uint8_t *q = b + 4;
        int sc, m;
        if (j < 4) { sc = q[j] & 63; m = q[j + 4] & 63; }
        else { sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4); m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4); }
        const uint32_t dd = *(const uint32_t *)b;
        const float d = cu_h2f((uint16_t)dd), dmin = cu_h2f((uint16_t)(dd >> 16));
        const float xs = __int_as_float(ai[25]) + __int_as_float(ai[26]);
        return __fmaf_rn(d * (float)sc * act.D, mx_combine3(s0, s1, s2), -(dmin * (float)m) * xs);
    }
};

/* MXFP4 (17-byte blocks: E8M0 e, 16 bytes of nibbles, low nibbles elements
 * 0..15, high 16..31): code kvalues[nibble] (E2M1 x 2), scale 2^(e - 128)
 * (src/quant's e8m0_half). The block's bytes are read as 5 aligned words and
 * funnel-shifted; a word's 4 nibbles become 4 codes by two PRMTs over the
 * table's halves (tab: kvalues as 4 words), the nibble's bit 3 choosing. */
__device__ __forceinline__ uint32_t ms_fp4_codes(uint32_t nib, uint32_t hi_bits, const uint4 &tab) {
    /* nib: 4 nibbles in the low halves of its bytes; hi_bits: bit 7 of byte i = bit 3 of nibble i */
    const uint32_t n3 = nib & 0x07070707u;
    const uint32_t sel = __byte_perm(n3 | (n3 >> 4), 0, 0x0020);      /* nibbles 0..3 of the selector */
    const uint32_t lo = __byte_perm(tab.x, tab.y, sel), hi = __byte_perm(tab.z, tab.w, sel);
    uint32_t m;     /* bytes 0xFF where bit 3 is set: PRMT's sign replication (__byte_perm would mask it off) */
    asm("prmt.b32 %0, %1, 0, 0xBA98;" : "=r"(m) : "r"(hi_bits));
    return (lo & ~m) | (hi & m);
}
template <> struct ms_item<CU_TYPE_MXFP4> {
    static constexpr bool sums = false;
    __device__ __forceinline__ static float dot(const uint8_t *row, int it, const g3_act &act, const int *, uint4 tab) {
        const uint8_t *blk = row + it * 17;
        const uint32_t e = blk[0];
        /* the 16 code bytes from the aligned words around them (rows start
         * 16-byte aligned; a row's last block ends aligned, so the fifth
         * word, needed only when unaligned, stays inside the row) */
        const int q0 = it * 17 + 1, sh = 8 * (q0 & 3);
        const uint32_t *wp = (const uint32_t *)(row + (q0 & ~3));
        uint32_t w[5];
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = wp[k];
        w[4] = sh ? wp[4] : 0u;
        int s0 = MX_MAGIC_BITS, s1 = MX_MAGIC_BITS, s2 = MX_MAGIC_BITS;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t v = __funnelshift_r(w[k], w[k + 1], sh);     /* code bytes 4k .. 4k + 3 */
            const uint32_t clo = ms_fp4_codes(v, v << 4, tab), chi = ms_fp4_codes(v >> 4, v, tab);
            s0 = __dp4a((int)clo, g3_word(act, 0, k), s0);
            s1 = __dp4a((int)clo, g3_word(act, 1, k), s1);
            s2 = __dp4a((int)clo, g3_word(act, 2, k), s2);
            s0 = __dp4a((int)chi, g3_word(act, 0, k + 4), s0);
            s1 = __dp4a((int)chi, g3_word(act, 1, k + 4), s1);
            s2 = __dp4a((int)chi, g3_word(act, 2, k + 4), s2);
        }
        /* src/quant's e8m0_half: 2^(e - 128), f32 subnormals for e < 2 */
        const float d = __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1u) << 23);
        return mx_combine3(s0, s1, s2) * (d * act.D);
    }
};

/* ------------------------------------------------------------------ */

#define MS_MAXST 32
#define MSD_MAXST 48

/* MS_RPS: rows a stage (of each matrix); MS_NW: computing warps */
template <int FMT, int MS_RPS, int MS_NW>
__global__ void __launch_bounds__((MS_NW + 1) * 32, 1) k_moes_glu(ms_args a, int nst) {
#if CU_BULK_ARCH
    extern __shared__ int4 ms_sm[];
    __shared__ uint64_t full[MS_MAXST], empty[MS_MAXST];
    __shared__ int oslot[16];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nit = a.in >> 5, F = a.rows;
    int *sh = (int *)ms_sm;
    uint8_t *stg = (uint8_t *)sh + g3_items_smem(nit);
    const size_t half = (size_t)MS_RPS * a.row_bytes, sbytes = 2 * half;
    const uint4 tab = a.tab;
    bulk_ring_init(full, empty, nst);
    cu_pdl_enter();     /* the selection comes from the kernel before */
    if (threadIdx.x == 0) {
        int n = 0;
        for (int k = 0; k < a.nsel && k < 16; k++)
            if (a.sel[k] >= 0) oslot[n++] = k;
        oslot[15] = n;      /* at most 8 slots: 15 is free */
    }
    __syncthreads();
    const int nown = oslot[15];
    if (!nown) return;
    /* blocks over the owned slots: bps a slot, rows [F bi / bps, F (bi + 1) / bps) */
    const int bps = gridDim.x / nown, jj = blockIdx.x / bps;
    if (jj >= nown) return;
    const int bi = blockIdx.x - jj * bps, e = oslot[jj];
    const int r0 = (int)((int64_t)F * bi / bps), r1 = (int)((int64_t)F * (bi + 1) / bps);
    const int ns = (r1 - r0 + MS_RPS - 1) / MS_RPS;
    const int64_t eoff = (int64_t)a.sel[e] * (int64_t)a.expert_bytes;
    if (warp == MS_NW) {
        if (lane == 0)
            for (int s = 0; s < ns; s++) {
                const int b = s % nst;
                if (s >= nst) mbar_wait(&empty[b], (uint32_t)((s / nst) - 1) & 1u);
                const int rs = r0 + s * MS_RPS, nr = r1 - rs < MS_RPS ? r1 - rs : MS_RPS;
                const uint32_t bytes = (uint32_t)nr * (uint32_t)a.row_bytes;
                const int64_t off = eoff + (int64_t)rs * (int64_t)a.row_bytes;
                mbar_arrive_tx(&full[b], 2 * bytes);
                bulk_g2s(stg + b * sbytes, a.w + off, bytes, &full[b]);
                bulk_g2s(stg + b * sbytes + half, a.w2 + off, bytes, &full[b]);
            }
        return;
    }
    g3_stage<false, ms_item<FMT>::sums>(a.x, a.in, sh, MS_NW * 32);
    asm volatile("bar.sync 1, %0;" ::"n"(MS_NW * 32) : "memory");
    for (int s = warp; s < ns; s += MS_NW) {
        const int b = s % nst;
        mbar_wait(&full[b], (uint32_t)(s / nst) & 1u);
        const int rs = r0 + s * MS_RPS, nr = r1 - rs < MS_RPS ? r1 - rs : MS_RPS;
        const uint8_t *gp = stg + b * sbytes, *up = gp + half;
        float ga[MS_RPS], ua[MS_RPS];
#pragma unroll
        for (int j = 0; j < MS_RPS; j++) { ga[j] = 0.f; ua[j] = 0.f; }
        for (int it = lane; it < nit; it += 32) {
            g3_act act;
            g3_act_load(act, sh, it);
            const int *ai = sh + it * G3_IW;
#pragma unroll
            for (int j = 0; j < MS_RPS; j++)
                if (j < nr) {
                    ga[j] += ms_item<FMT>::dot(gp + (size_t)j * a.row_bytes, it, act, ai, tab);
                    ua[j] += ms_item<FMT>::dot(up + (size_t)j * a.row_bytes, it, act, ai, tab);
                }
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[b]);
#pragma unroll
        for (int j = 0; j < MS_RPS; j++) {
            const float g = warp_sum(ga[j]), u = warp_sum(ua[j]);
            if (lane == 0 && j < nr) a.out[e * F + rs + j] = cu_swiglu1(g, u, a.limit) * (a.rw ? a.rw[e] : 1.f);
        }
    }
#endif
}

/* MSD_RPS: rows a stage; MSD_NG: computing warps a slot */
template <int FMT, int NE, int MSD_RPS, int MSD_NG>
__global__ void __launch_bounds__((MSD_NG * NE + 1) * 32, 1) k_moes_down(ms_args a, int nst) {
#if CU_BULK_ARCH
    extern __shared__ int4 ms_sm[];
    __shared__ uint64_t full[MSD_MAXST], empty[MSD_MAXST];
    constexpr int NCW = MSD_NG * NE;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nitr = a.in >> 5;
    const int rows_pb = (a.rows + gridDim.x - 1) / gridDim.x;
    int *sh = (int *)ms_sm;
    float *part = (float *)((uint8_t *)ms_sm + g3_items_smem((size_t)NE * nitr));
    uint8_t *stg = (uint8_t *)part + g3_down_part_bytes(NE, rows_pb);
    const int r0 = (int)((int64_t)a.rows * blockIdx.x / gridDim.x), r1 = (int)((int64_t)a.rows * (blockIdx.x + 1) / gridDim.x);
    const int nch = (r1 - r0 + MSD_RPS - 1) / MSD_RPS, ns = nch * NE;
    const size_t sbytes = (size_t)MSD_RPS * a.row_bytes;
    const uint4 tab = a.tab;
    bulk_ring_init(full, empty, nst);
    __syncthreads();
    if (warp == NCW) {
        /* the selection before the PDL wait: see cu_moe_dec_down (cu_gemv3.h) */
        bulk_moe_rows_producer<NE, MSD_RPS>(full, empty, nst, ns, r0, r1, a.w, a.row_bytes, a.expert_bytes, a.sel, stg, sbytes,
                                          lane);
        return;
    }
    cu_pdl_enter();
    const int grp = warp / NE, e = warp - grp * NE;
    const bool active = a.sel[e] >= 0;
    g3_stage<false, ms_item<FMT>::sums>(a.x, NE * a.in, sh, NCW * 32);
    asm volatile("bar.sync 1, %0;" ::"n"(NCW * 32) : "memory");
    for (int c = grp; c < nch; c += MSD_NG) {
        const int s = c * NE + e, b = s % nst;
        mbar_wait(&full[b], (uint32_t)(s / nst) & 1u);
        const int rs = r0 + c * MSD_RPS, nr = r1 - rs < MSD_RPS ? r1 - rs : MSD_RPS;
        const uint8_t *rowp = stg + b * sbytes;
        float acc[MSD_RPS];
#pragma unroll
        for (int j = 0; j < MSD_RPS; j++) acc[j] = 0.f;
        if (active)
            for (int i = lane; i < nitr; i += 32) {
                const int it = e * nitr + i;
                g3_act act;
                g3_act_load(act, sh, it);
#pragma unroll
                for (int j = 0; j < MSD_RPS; j++)
                    if (j < nr) acc[j] += ms_item<FMT>::dot(rowp + (size_t)j * a.row_bytes, i, act, sh + it * G3_IW, tab);
            }
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[b]);
#pragma unroll
        for (int j = 0; j < MSD_RPS; j++) {
            const float v = warp_sum(acc[j]);
            if (lane == 0 && j < nr) part[(rs - r0 + j) * NE + e] = v;
        }
    }
    asm volatile("bar.sync 1, %0;" ::"n"(NCW * 32) : "memory");
    bulk_moe_rows_sum(part, NE, r0, r1, a.out, 0, NCW * 32);
#endif
}

/* ------------------------------------------------------------------ */
/* host */

template <typename K>
static void ms_attr(K k, size_t smem) {
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
}

/* MINKE_CUDA_MOES_RPS=g,d: rows a stage of the gate + up kernel (1, 2 or
 * 4) and of the down kernel (4 or 8); MINKE_CUDA_MOES_KB=g,d: their shared
 * memory budgets in KB (the ring takes what the activations leave);
 * MINKE_CUDA_MOES_W=g,d: computing warps of the gate + up kernel (8 or 16),
 * warps a slot of the down kernel (2 or 4). Defaults 2,4 / 170,200 / 16,2
 * from moes_check --time on the H200 (tenth session; a glu + down pair in
 * a graph of 43, Flash shape): q4 38.5 us, MXFP4 43.0 us, against 42.7 /
 * 45.7 with 8 gate + up warps, 43.4 / 46.5 with 4 down warps a slot, 43.3 /
 * 45.9 with stages of 4 and 8 rows, 42.7 / 47.2 with 16 warps on 1-row stages. */
struct ms_cfg { int rps_g, rps_d, kb_g, kb_d, w_g, w_d; };
static ms_cfg ms_read_cfg(void) {
    const char *e = getenv("MINKE_CUDA_MOES_RPS"), *k = getenv("MINKE_CUDA_MOES_KB"), *w = getenv("MINKE_CUDA_MOES_W");
    int g = 2, d = 4, kg = 170, kd = 200, wg = 16, wd = 2;
    if (e && *e) sscanf(e, "%d,%d", &g, &d);
    if (k && *k) sscanf(k, "%d,%d", &kg, &kd);
    if (w && *w) sscanf(w, "%d,%d", &wg, &wd);
    ms_cfg c;
    c.w_g = wg == 8 ? 8 : 16; c.w_d = wd == 4 ? 4 : 2;
    /* 16 gate + up warps have instances for stages of 1 and 2 rows */
    c.rps_g = g == 1 ? 1 : g == 4 && c.w_g == 8 ? 4 : 2;
    c.rps_d = d == 8 ? 8 : 4; c.kb_g = kg > 0 ? kg : 170; c.kb_d = kd > 0 ? kd : 200;
    return c;
}
/* read once, by whichever GPU's host thread comes first (a C++ static: thread-safe) */
static const ms_cfg &ms_conf(void) {
    static const ms_cfg c = ms_read_cfg();
    return c;
}

/* The launch plans: the ring's stages (nst) and the shared memory a block
 * takes (0 when it exceeds what a block may have: the shape is refused) */
static size_t ms_glu_plan(int64_t in, uint64_t row_bytes, int rps, int nw, int *nst_out) {
    const size_t act = g3_items_smem((size_t)(in >> 5));
    const size_t sbytes = 2 * (size_t)rps * row_bytes;
    *nst_out = g3_ring_stages((size_t)ms_conf().kb_g * 1024, act, sbytes, nw, MS_MAXST);
    const size_t smem = act + (size_t)*nst_out * sbytes;
    return smem <= G3_SMEM_MAX ? smem : 0;
}
static int ms_down_ng(int ne) { return ms_conf().w_d == 4 && ne * 4 + 1 <= 32 ? 4 : 2; }
static size_t ms_down_plan(int ne, int ng, int rps, int64_t rows, int64_t ff, uint64_t row_bytes, int *nst_out, int *nb_out) {
    return g3_down_plan(ne, ng, rps, rows, ff, row_bytes, (size_t)ms_conf().kb_d * 1024, MSD_MAXST, cu_num_sms(), nst_out,
                        nb_out);
}

template <int FMT, int RPS, int NW>
static void ms_launch_glu(const ms_args &a, cudaStream_t st) {
    int nst;
    const size_t smem = ms_glu_plan(a.in, a.row_bytes, RPS, NW, &nst);     /* > 0: the caller checked it */
    ms_attr(k_moes_glu<FMT, RPS, NW>, smem);
    /* at least a block a slot (8 at most): the kernel gives each owned slot gridDim / nown blocks */
    cu_launch(k_moes_glu<FMT, RPS, NW>, dim3((unsigned)(cu_num_sms() < 8 ? 8 : cu_num_sms())), (NW + 1) * 32, smem, st, a, nst);
}

template <int FMT, int NE, int RPS, int NG>
static void ms_launch_down(const ms_args &a, cudaStream_t st) {
    int nst, nb;
    const size_t smem = ms_down_plan(NE, NG, RPS, a.rows, a.in, a.row_bytes, &nst, &nb);
    ms_attr(k_moes_down<FMT, NE, RPS, NG>, smem);
    cu_launch(k_moes_down<FMT, NE, RPS, NG>, dim3((unsigned)nb), (NG * NE + 1) * 32, smem, st, a, nst);
}

/* MINKE_CUDA_MOES: 1 (default) these kernels for Q4_K / MXFP4 experts where
 * they apply, 0 the general GEMVs; cu_moes_set for the checks */
static int moes_on = -1;
extern "C" void cu_moes_set(int v) { moes_on = v; }

extern "C" int cu_moes_supported(int gate_type, int up_type, int down_type, int64_t in, int64_t ff, int nsel,
                                 uint64_t gate_row_bytes, uint64_t down_row_bytes) {
    if (moes_on < 0) { const char *e = getenv("MINKE_CUDA_MOES"); moes_on = e && *e ? atoi(e) : 1; }
    if (!moes_on || !cu_gemv3_bulk_ok()) return 0;
    if (gate_type != up_type || gate_type != down_type) return 0;
    if (gate_type != CU_TYPE_Q4_K && gate_type != CU_TYPE_MXFP4) return 0;
    if (in % 256 || ff % 256 || in > 8192 || ff > 4096 || (gate_row_bytes | down_row_bytes) & 15) return 0;
    if (nsel != 1 && nsel != 2 && nsel != 4 && nsel != 6 && nsel != 8) return 0;
    int nst, nb;
    return ms_glu_plan(in, gate_row_bytes, ms_conf().rps_g, ms_conf().w_g, &nst) > 0 &&
           ms_down_plan(nsel, ms_down_ng(nsel), ms_conf().rps_d, in, ff, down_row_bytes, &nst, &nb) > 0;
}

static uint4 ms_table(void) {
    const int8_t *kv = quant_mxfp4_kvalues();
    uint32_t t[4];
    for (int k = 0; k < 4; k++)
        t[k] = (uint32_t)(uint8_t)kv[4 * k] | (uint32_t)(uint8_t)kv[4 * k + 1] << 8 | (uint32_t)(uint8_t)kv[4 * k + 2] << 16 |
               (uint32_t)(uint8_t)kv[4 * k + 3] << 24;
    return make_uint4(t[0], t[1], t[2], t[3]);
}

template <int FMT>
static void ms_glu(const ms_args &a, cudaStream_t st) {
    const ms_cfg &c = ms_conf();
    if (c.w_g == 16) { if (c.rps_g == 1) ms_launch_glu<FMT, 1, 16>(a, st); else ms_launch_glu<FMT, 2, 16>(a, st); }
    else if (c.rps_g == 4) ms_launch_glu<FMT, 4, 8>(a, st);
    else if (c.rps_g == 1) ms_launch_glu<FMT, 1, 8>(a, st);
    else ms_launch_glu<FMT, 2, 8>(a, st);
}

template <int FMT, int NE>
static void ms_down(const ms_args &a, cudaStream_t st) {
    if (ms_down_ng(NE) == 4) {
        constexpr int NG = NE * 4 + 1 <= 32 ? 4 : 2;     /* what ms_down_ng gives where it says 4 */
        if (ms_conf().rps_d == 8) ms_launch_down<FMT, NE, 8, NG>(a, st); else ms_launch_down<FMT, NE, 4, NG>(a, st);
    }
    else if (ms_conf().rps_d == 8) ms_launch_down<FMT, NE, 8, 2>(a, st);
    else ms_launch_down<FMT, NE, 4, 2>(a, st);
}

extern "C" void cu_moes_glu(int wtype, const void *wg, const void *wu, uint64_t row_bytes, uint64_t expert_bytes,
                            int64_t ff, int64_t in, const float *x, const int *sel, const float *rw, int nsel, float limit,
                            float *mid, cudaStream_t st) {
    ms_args a;
    memset(&a, 0, sizeof a);
    a.w = (const uint8_t *)wg; a.w2 = (const uint8_t *)wu; a.row_bytes = row_bytes; a.expert_bytes = expert_bytes;
    a.rows = (int)ff; a.in = (int)in; a.x = x; a.sel = sel; a.rw = rw; a.nsel = nsel; a.limit = limit; a.out = mid;
    a.tab = ms_table();
    if (wtype == CU_TYPE_Q4_K) ms_glu<CU_TYPE_Q4_K>(a, st);
    else ms_glu<CU_TYPE_MXFP4>(a, st);
}

extern "C" void cu_moes_down(int wtype, const void *wd, uint64_t row_bytes, uint64_t expert_bytes, int64_t rows, int64_t ff,
                             const float *mid, const int *sel, int nsel, float *out, cudaStream_t st) {
    ms_args a;
    memset(&a, 0, sizeof a);
    a.w = (const uint8_t *)wd; a.row_bytes = row_bytes; a.expert_bytes = expert_bytes;
    a.rows = (int)rows; a.in = (int)ff; a.x = mid; a.sel = sel; a.nsel = nsel; a.out = out;
    a.tab = ms_table();
#define MS_DOWN(NE) do { if (wtype == CU_TYPE_Q4_K) ms_down<CU_TYPE_Q4_K, NE>(a, st); else ms_down<CU_TYPE_MXFP4, NE>(a, st); } while (0)
    switch (nsel) {
    case 1: MS_DOWN(1); break;
    case 2: MS_DOWN(2); break;
    case 4: MS_DOWN(4); break;
    case 6: MS_DOWN(6); break;
    default: MS_DOWN(8); break;
    }
#undef MS_DOWN
}
