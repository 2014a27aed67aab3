/* cu_gemvh.cu: y = W x for one f32 activation row and plain-float weights
 * (F16, BF16, F32): the decode GEMVs of the router, the indexer and the
 * compressors. cu_gemv() sends dense launches with tiles of one row here.
 *
 * Why a kernel of its own: the generic kernel gives a row to a warp and
 * walks it with one 16-byte load a lane in flight, so a 2 MB matrix keeps
 * ~200 GB/s of the H200's ~4.3 TB/s busy and its launches cost 7-10 us. Here
 * a row is split over KS warps of a block (KS = 1..8, chosen so that there
 * are enough blocks), each lane requests all its U (<= 8) items of a row at
 * once, the first row group's weights before cu_pdl_enter() (weights are
 * never written during a step; activations are read only after it), and a
 * block that loops over row groups requests the next group's weights before
 * it sums the current one. A warp's activation slice is the same for every
 * row it takes, so it stays in registers (grouped input reloads it when the
 * group changes).
 *
 * Numerics: f32 products and sums. Each lane adds its items' products in
 * element order (one fma chain), the warp adds its lanes by the usual
 * butterfly, and the KS warp sums of a row are added in warp order through
 * shared memory: a fixed order (the same bits every run and in every launch
 * schedule), different from the CPU's and from the generic kernel's.
 */
#include <stdlib.h>
#include "cuda/cu_common.cuh"
#include "cuda/cu_gemvh.h"

#define GH_WARPS 8

/* weights are read once: past L1 */
__device__ __forceinline__ uint4 gh_ldw(const uint8_t *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

/* A 16-byte weight item against its activations (AV float4): acc plus the
 * products in element order. */
template <int TYPE> struct GH;
template <> struct GH<CU_TYPE_F16> {
    static constexpr int AV = 2;
    static __device__ __forceinline__ float dot(uint4 w, const float4 (&a)[AV], float acc) {
        float2 f0 = __half22float2(*(const __half2 *)&w.x), f1 = __half22float2(*(const __half2 *)&w.y);
        float2 f2 = __half22float2(*(const __half2 *)&w.z), f3 = __half22float2(*(const __half2 *)&w.w);
        acc = fmaf(f0.x, a[0].x, acc); acc = fmaf(f0.y, a[0].y, acc);
        acc = fmaf(f1.x, a[0].z, acc); acc = fmaf(f1.y, a[0].w, acc);
        acc = fmaf(f2.x, a[1].x, acc); acc = fmaf(f2.y, a[1].y, acc);
        acc = fmaf(f3.x, a[1].z, acc); acc = fmaf(f3.y, a[1].w, acc);
        return acc;
    }
};
template <> struct GH<CU_TYPE_BF16> {
    static constexpr int AV = 2;
    static __device__ __forceinline__ float lo(uint32_t u) { return __uint_as_float(u << 16); }
    static __device__ __forceinline__ float hi(uint32_t u) { return __uint_as_float(u & 0xFFFF0000u); }
    static __device__ __forceinline__ float dot(uint4 w, const float4 (&a)[AV], float acc) {
        acc = fmaf(lo(w.x), a[0].x, acc); acc = fmaf(hi(w.x), a[0].y, acc);
        acc = fmaf(lo(w.y), a[0].z, acc); acc = fmaf(hi(w.y), a[0].w, acc);
        acc = fmaf(lo(w.z), a[1].x, acc); acc = fmaf(hi(w.z), a[1].y, acc);
        acc = fmaf(lo(w.w), a[1].z, acc); acc = fmaf(hi(w.w), a[1].w, acc);
        return acc;
    }
};
template <> struct GH<CU_TYPE_F32> {
    static constexpr int AV = 1;
    static __device__ __forceinline__ float dot(uint4 w, const float4 (&a)[AV], float acc) {
        acc = fmaf(__uint_as_float(w.x), a[0].x, acc); acc = fmaf(__uint_as_float(w.y), a[0].y, acc);
        acc = fmaf(__uint_as_float(w.z), a[0].z, acc); acc = fmaf(__uint_as_float(w.w), a[0].w, acc);
        return acc;
    }
};

struct gh_params {
    cu_gemv_args g;
    int ks_log;          /* log2 of the warps that split a row (KS) */
    int slice;           /* items (16 bytes of weights) a warp takes of a row */
    int ni;              /* items a row */
    int64_t ngrp;        /* row groups (GH_WARPS / KS rows) of one matrix */
    int64_t ntasks;      /* row groups of both matrices of a paired launch */
};

/* Block = 8 warps = 8 / KS rows (a row group, a "task"); warp w takes row
 * w / KS, items [s0, s1) with s0 = (w % KS) * slice; lane l item s0 + 32 j + l,
 * j < U. Blocks take tasks blockIdx.x, + gridDim.x, ...; blockIdx.y is the
 * activation row (token). PP: the next task's weights are requested before
 * the current task's sums (two register buffers; 3 blocks an SM fit in 80
 * registers without spills up to U = 4). GR: grouped input (its reloads of the
 * activations cost registers, so it is a variant of its own). */
template <int TYPE, int U, bool PP, bool GR>
__global__ void __launch_bounds__(GH_WARPS * 32, U > 4 ? 1 : PP ? 3 : 4) k_gemvh(gh_params p) {
    constexpr int AV = GH<TYPE>::AV;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int ks_log = p.ks_log;
    const int rl = warp >> ks_log, rpb = GH_WARPS >> ks_log;
    const int s0 = (warp & ((1 << ks_log) - 1)) * p.slice;
    const int s1 = min(s0 + p.slice, p.ni);
    const int tok = blockIdx.y;
    const bool live = tok < p.g.ntok;
    const int64_t rows = p.g.rows;
    __shared__ float part[2][GH_WARPS];

    /* the row of task t that this warp takes, and which matrix */
    auto row_of = [&](int64_t t, int &pair) -> int64_t {
        pair = t >= p.ngrp;
        return (t - (pair ? p.ngrp : 0)) * rpb + rl;
    };
    auto load_w = [&](uint4 (&w)[U], int64_t t) {
        int pair;
        const int64_t r = row_of(t, pair);
        const bool rv = live && r < rows;
        const uint8_t *row = (const uint8_t *)(pair ? p.g.w2 : p.g.w) + r * (int64_t)p.g.row_bytes;
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int it = s0 + j * 32 + lane;
            w[j] = rv && it < s1 ? gh_ldw(row + (int64_t)it * 16) : make_uint4(0u, 0u, 0u, 0u);
        }
    };

    uint4 wa[U], wb[U];
    int64_t t = blockIdx.x;
    load_w(wa, t);
    cu_pdl_enter();
    if (!live) return;     /* a whole block: blockIdx.y past the tokens */

    float4 a[U][AV];
    const uint8_t *arow = (const uint8_t *)p.g.act + (int64_t)(tok / p.g.act_div) * p.g.act_stride;
    int64_t aoff_cur = -1;
    auto load_a = [&](int64_t aoff) {
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int it = s0 + j * 32 + lane;
            const float4 *src = (const float4 *)(arow + aoff + (int64_t)it * (16 * AV));
#pragma unroll
            for (int v = 0; v < AV; v++) a[j][v] = it < s1 ? src[v] : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        aoff_cur = aoff;
    };
    if (!GR) load_a(0);

    float *const out1 = p.g.out + (int64_t)tok * p.g.out_stride;
    float *const out2 = p.g.out2 ? p.g.out2 + (int64_t)tok * p.g.out_stride : out1;
    int par = 0;
    auto finish = [&](const uint4 (&w)[U], int64_t tt) {
        int pair;
        const int64_t r = row_of(tt, pair);
        if (GR) {
            /* grouped input: row r reads the activations of its group */
            const int64_t ao = ((r < rows ? r : rows - 1) / p.g.group_rows) * p.g.group_act_bytes;
            if (ao != aoff_cur) load_a(ao);
        }
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < U; j++) acc = GH<TYPE>::dot(w[j], a[j], acc);
        const float s = warp_sum(acc);
        float *const out = pair ? out2 : out1;
        if (ks_log == 0) {
            if (lane == 0 && r < rows) {
                if (p.g.accumulate) out[r] += s; else out[r] = s;
            }
        } else {
            /* two buffers: a warp writes part[par] only after the readers of
             * the previous use of that buffer have passed the barrier between */
            if (lane == 0) part[par][warp] = s;
            __syncthreads();
            if ((int)threadIdx.x < rpb) {
                const int64_t ro = r - rl + threadIdx.x;
                const float *ps = part[par] + (threadIdx.x << ks_log);
                float v = ps[0];
                for (int k = 1; k < (1 << ks_log); k++) v += ps[k];
                if (ro < rows) {
                    if (p.g.accumulate) out[ro] += v; else out[ro] = v;
                }
            }
            par ^= 1;
        }
    };

    const int64_t stride = gridDim.x, n = p.ntasks;
    if (PP) {
        for (;;) {
            const int64_t tb = t + stride;
            if (tb < n) load_w(wb, tb);
            finish(wa, t);
            if (tb >= n) break;
            const int64_t tc = tb + stride;
            if (tc < n) load_w(wa, tc);
            finish(wb, tb);
            if (tc >= n) break;
            t = tc;
        }
    } else {
        for (;;) {
            finish(wa, t);
            t += stride;
            if (t >= n) break;
            load_w(wa, t);
        }
    }
}

/* ------------------------------------------------------------------ */
/* host side                                                           */

static int gh_var = -1;
extern "C" void cu_gemvh_set_variant(int v) { gh_var = v < 0 ? -1 : v; }
static int gh_variant(void) {
    if (gh_var < 0) {
        const char *off = getenv("MINKE_CUDA_GEMVH"), *e = getenv("MINKE_CUDA_GEMVH_V");
        gh_var = off && *off && atoi(off) == 0 ? 9 : e && *e ? atoi(e) : 0;
        if (gh_var < 0 || (gh_var > 2 && gh_var != 9)) gh_var = 0;
    }
    return gh_var;
}

struct gh_plan { int ks_log, slice, u; int64_t ngrp, ntasks; };

static int gh_aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Whether the kernel takes the launch, and its shape: KS the fewest warps a
 * row that keep a lane at <= 4 items (8 past 1024 items a row), then doubled
 * while there are fewer than two blocks an SM and a lane keeps >= 1 item. */
static int gh_plan_for(const cu_gemv_args *g, int ntiles, gh_plan *pl) {
    int esz;
    switch (g->wtype) {
    case CU_TYPE_F16: case CU_TYPE_BF16: esz = 2; break;
    case CU_TYPE_F32: esz = 4; break;
    default: return 0;
    }
    const int epi = 16 / esz;
    if (gh_variant() == 9) return 0;
    if (g->tile_pairs || g->nt_hint > 1 || ntiles < 1 || ntiles > 65535 || g->ntok < 1 || g->rows < 1) return 0;
    if (g->in < epi || g->in % epi || g->in / epi > 2048) return 0;
    if (!g->w || !g->act || !g->out || (g->w2 && !g->out2)) return 0;
    if (!gh_aligned(g->w) || (g->w2 && !gh_aligned(g->w2)) || !gh_aligned(g->act)) return 0;
    if (g->row_bytes % 16 || g->row_bytes < (uint64_t)g->in * esz) return 0;
    if (ntiles > 1 && g->act_stride % 16) return 0;
    if (g->group_rows && (g->group_rows < 0 || g->group_act_bytes % 16)) return 0;
    const int ni = (int)(g->in / epi);
    const int64_t pairs = g->w2 ? 2 : 1;
    auto tasks = [&](int ks) { int64_t rpb = GH_WARPS / ks; return (g->rows + rpb - 1) / rpb * pairs; };
    int ks = 1;
    while (ks < GH_WARPS && (ni + ks - 1) / ks > 128) ks *= 2;
    /* the split (hence each row's summation order) from one matrix's tasks, so
     * that a paired launch sums each row as the single launch does */
    const int64_t want = 2 * (int64_t)cu_num_sms();
    while (ks < GH_WARPS && tasks(ks) / pairs * ntiles < want && (ni + 2 * ks - 1) / (2 * ks) >= 32) ks *= 2;
    int slice = (ni + ks - 1) / ks;
    slice = (slice + 7) & ~7;      /* 128-byte aligned slices (F16/BF16) */
    int u = 1;
    while (32 * u < slice) u *= 2;
    pl->ks_log = ks == 1 ? 0 : ks == 2 ? 1 : ks == 4 ? 2 : 3;
    pl->slice = slice;
    pl->u = u;
    pl->ngrp = tasks(ks) / pairs;
    pl->ntasks = tasks(ks);
    return 1;
}

extern "C" int cu_gemvh_applies(const cu_gemv_args *g, int ntiles) {
    gh_plan pl;
    return gh_plan_for(g, ntiles, &pl);
}

template <int TYPE, int U, bool PP, bool GR>
static int gh_occupancy(void) {
    static int n = 0;
    if (!n) {
        int b = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, k_gemvh<TYPE, U, PP, GR>, GH_WARPS * 32, 0) != cudaSuccess || b < 1)
            b = 1;
        n = b;
    }
    return n;
}

template <int TYPE, int U, bool PP, bool GR>
static void gh_launch(const gh_params &p, int ntiles, int loop, cudaStream_t st) {
    int64_t grid = p.ntasks;
    if (loop) {
        /* no more blocks than fit at once; the tasks shared out evenly */
        int64_t cap = (int64_t)gh_occupancy<TYPE, U, PP, GR>() * cu_num_sms() / ntiles;
        if (cap < 1) cap = 1;
        if (grid > cap) {
            int64_t loops = (grid + cap - 1) / cap;
            grid = (p.ntasks + loops - 1) / loops;
        }
    }
    cu_launch(k_gemvh<TYPE, U, PP, GR>, dim3((unsigned)grid, (unsigned)ntiles), dim3(GH_WARPS * 32), 0, st, p);
}

/* variant 0: looping blocks, early requests (grouped input: looping blocks);
 * 1: a block per task; 2: looping blocks without early requests */
template <int TYPE, int U>
static void gh_launch_v(const gh_params &p, int ntiles, int variant, cudaStream_t st) {
    if (p.g.group_rows) gh_launch<TYPE, U, false, true>(p, ntiles, variant != 1, st);
    else if (variant == 0) gh_launch<TYPE, U, true, false>(p, ntiles, 1, st);
    else gh_launch<TYPE, U, false, false>(p, ntiles, variant == 2, st);
}

template <int TYPE>
static void gh_launch_type(const gh_params &p, int u, int ntiles, int variant, cudaStream_t st) {
    switch (u) {
    case 1: gh_launch_v<TYPE, 1>(p, ntiles, variant, st); break;
    case 2: gh_launch_v<TYPE, 2>(p, ntiles, variant, st); break;
    case 4: gh_launch_v<TYPE, 4>(p, ntiles, variant, st); break;
    default: gh_launch_v<TYPE, 8>(p, ntiles, variant, st); break;
    }
}

extern "C" int cu_gemvh(const cu_gemv_args *g, int ntiles, cudaStream_t st) {
    gh_plan pl;
    if (!gh_plan_for(g, ntiles, &pl)) return 0;
    gh_params p;
    p.g = *g;
    if (p.g.act_div < 1) p.g.act_div = 1;
    if (!p.g.w2) p.g.out2 = NULL;
    p.ks_log = pl.ks_log;
    p.slice = pl.slice;
    p.ni = (int)(g->in / (g->wtype == CU_TYPE_F32 ? 4 : 8));
    p.ngrp = pl.ngrp;
    p.ntasks = pl.ntasks;
    const int variant = gh_variant();
    switch (g->wtype) {
    case CU_TYPE_F16: gh_launch_type<CU_TYPE_F16>(p, pl.u, ntiles, variant, st); break;
    case CU_TYPE_BF16: gh_launch_type<CU_TYPE_BF16>(p, pl.u, ntiles, variant, st); break;
    default: gh_launch_type<CU_TYPE_F32>(p, pl.u, ntiles, variant, st); break;
    }
    return 1;
}
