/* cu_mmh.cu: the dense Q8_0 (and F16) products of prefill batches (exact activations)
 * as one cuBLASLt f16 GEMM each, on the f16 tensor cores.
 *
 * Why: the int8 tensor-core kernels (cu_mmq.cu) meet three int8 pieces of
 * every activation and fold each 32-element item's integer dots into f32 on
 * the CUDA cores; that fold and mma.sync's issue rate hold them near 100
 * TFLOP/s of useful work (docs/performance.md). Here the fold disappears:
 *   - a weight code times its item's f16 scale is exact in 18 bits, so a
 *     matrix scaled by a power of two 2^ew (its largest 127 |d| into
 *     [2^14, 2^15)) is exactly Wh + Wl, two f16 numbers (Wl has at most
 *     8 significant bits: exact, short of the f16 subnormals);
 *   - an activation scaled by 2^ex (the batch's amax into [2^14, 2^15)) is
 *     xh + xl to ~22 bits, xh = f16(x), xl = f16(x - xh) (as cu_mmf16.cu);
 *   - W.x = Wh.xh + Wl.xh + Wh.xl + (Wl.xl, 2^-22 relative, dropped): one
 *     GEMM with K' = 3K over A' = [Wh | Wl | Wh] and B' = [xh | xh | xl],
 *     every f16 x f16 product exact in f32 and summed in f32, scaled back by
 *     alpha = 2^-(ew + ex) (exact) as cuBLASLt writes the f32 output.
 * So an output is the f32 product within float rounding, as the CPU's, at
 * f16 tensor-core rates through a library kernel (TMA, wgmma) instead of
 * ours. The expansion costs a pass over the weights (6 bytes a weight
 * written) and the activations (6 bytes an element) per product.
 *
 * Measured on the H200 (twelfth session, docs/performance.md): Flash's dense
 * prefill shapes at T = 4096 1.4-2.3x the int8 path (q_b 2.78 -> 1.22 ms,
 * out_b 2.69 -> 1.25), a 4096-token prompt 3,030 -> 3,340-3,430 tok/s, the
 * interval ending at 65536 2,560 -> 2,906. Error: ~2.5e-6 of max|y| (the f32
 * sums of ~3K products; the int8 pieces sum exactly inside an item: 2e-7),
 * mmh_check. On by default from 256 tokens and 1M weights (MINKE_CUDA_MMH=0
 * turns it off, _MIN / _MINW move the thresholds); a batch shares one
 * activation scale, so a row 1e-7 of the batch's amax keeps fewer bits.
 *
 * Grouped input (out_a: 8 groups of rows, each over its slice of the row)
 * is one strided-batched GEMM with one scale for the whole row (1.61 against
 * 1.73 ms as one GEMM a group, MINKE_CUDA_MMH_BATCH=0).
 *
 * Scratch (per stream: the side branches run products concurrently): the
 * cuBLASLt workspace, the scales, A' and B'; reserved when a session is set
 * up (cu_mmh_reserve), grown on demand outside graph capture (never
 * captured: prefill batches only), released with the model's streams.
 * F16 weights (the compressors', indexer's and router's projections) take the
 * same path with two pieces: an f16 weight is exact as it is, so A' = [W | W],
 * B' = [xh | xl], K' = 2K (k_mmf16p, cu_mmf16.cu, multiplied the same pieces
 * on mma.sync at ~150 TFLOP/s of useful work; a GEMM here runs near the
 * tensor rate).
 * A sub-layer's input x is split once for all its products (cu_mmh_share_x: the
 * nineteenth session, 1.7% of a prompt), and a matrix's largest |d| is found once
 * while its model lives (mmh_dmax_slot).
 * cu_mmh returns 0 where it does not apply, and the caller runs cu_mmq.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_fp16.h>
#include <cublasLt.h>

#include "cuda/cu_common.cuh"
#include "cuda/cu_ops.h"

#define MMH_THREADS 256
#define MMH_WS_BYTES (32u << 20)      /* cuBLASLt workspace a stream */
#define MMH_SMALL 256                 /* dmax, amax, alpha, beta 0 / 1 */

/* ------------------------------------------------------------------ */
/* kernels */

/* the weight scale's exponent: 127 dmax 2^ew in [2^14, 2^15) (0 for an
 * all-zero or non-finite matrix) */
__device__ __forceinline__ int mmh_wexp_of(unsigned dmax_bits) {
    float m = 127.f * __half2float(__ushort_as_half((unsigned short)dmax_bits));
    if (!(m > 0.f) || !isfinite(m)) return 0;
    int e;
    frexpf(m, &e);
    return 15 - e;
}
/* the activations' exponent: amax 2^ex in [2^14, 2^15), kept where 2^ex is a
 * normal float */
__device__ __forceinline__ int mmh_xexp_of(unsigned amax_bits) {
    float a = __uint_as_float(amax_bits);
    if (!(a > 0.f) || !isfinite(a)) return 0;
    int e;
    frexpf(a, &e);
    e = 15 - e;
    return e > 120 ? 120 : e < -120 ? -120 : e;
}
__device__ __forceinline__ float mmh_pow2(int e) { return __int_as_float((127 + e) << 23); }

/* a row's item it: its f16 scale's bits and its 8 codes from sub * 8 */
template <bool REP>
__device__ __forceinline__ const uint8_t *mmh_item(const uint8_t *row, int it, int items, unsigned *dbits) {
    if (REP) {
        *dbits = (unsigned)row[(int64_t)items * 32 + 2 * it] | (unsigned)row[(int64_t)items * 32 + 2 * it + 1] << 8;
        return row + (int64_t)it * 32;
    }
    const uint8_t *b = row + (int64_t)it * 34;
    *dbits = (unsigned)b[0] | (unsigned)b[1] << 8;
    return b + 2;
}

/* the largest |d| of the matrix (f16 bits without the sign order like the values) */
template <bool REP>
__global__ void k_mmh_dmax(const uint8_t *w, int64_t rows, int items, uint64_t row_bytes, unsigned *dmax) {
    cu_pdl_enter();
    unsigned m = 0;
    const int64_t n = rows * items;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        unsigned d;
        mmh_item<REP>(w + (i / items) * row_bytes, (int)(i % items), items, &d);
        d &= 0x7fffu;
        if (d < 0x7c00u) m = d > m ? d : m;      /* Inf / NaN scales do not set the scale */
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) { unsigned v = __shfl_xor_sync(0xffffffffu, m, o); m = v > m ? v : m; }
    if ((threadIdx.x & 31) == 0 && m) atomicMax(dmax, m);
}

/* A' rows: [Wh | Wl | Wh] of 3 in halves; a thread makes 8 consecutive weights */
template <bool REP>
__global__ void k_mmh_wexpand(const uint8_t *w, int64_t rows, int in, uint64_t row_bytes, const unsigned *dmax,
                              __half *A) {
    cu_pdl_enter();
    const int per_row = in / 8, items = in / 32;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * per_row) return;
    const int64_t r = i / per_row;
    const int c8 = (int)(i % per_row), it = c8 >> 2;
    unsigned dbits;
    const uint8_t *q = mmh_item<REP>(w + r * row_bytes, it, items, &dbits) + (c8 & 3) * 8;
    const float ds = __half2float(__ushort_as_half((unsigned short)dbits)) * mmh_pow2(mmh_wexp_of(*dmax));
    __align__(16) __half hi[8], lo[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float v = (float)(int8_t)q[j] * ds;       /* 8 x 11 bits: exact */
        hi[j] = __float2half_rn(v);
        lo[j] = __float2half_rn(v - __half2float(hi[j]));
    }
    __half *a = A + r * 3 * (int64_t)in + (int64_t)c8 * 8;
    *(uint4 *)a = *(const uint4 *)hi;
    *(uint4 *)(a + in) = *(const uint4 *)lo;
    *(uint4 *)(a + 2 * in) = *(const uint4 *)hi;
}

/* the batch's largest finite |x| (float bits order like the values) */
__global__ void k_mmh_amax(const float *x, int T, int in, int64_t xs, unsigned *amax) {
    cu_pdl_enter();
    const int per_row = in / 4;
    float m = 0.f;
    const int64_t n = (int64_t)T * per_row;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float4 v = *(const float4 *)(x + (i / per_row) * xs + (i % per_row) * 4);
        /* Inf / NaN do not set the batch's scale (they reach their own outputs through the GEMM) */
        const float a[4] = {fabsf(v.x), fabsf(v.y), fabsf(v.z), fabsf(v.w)};
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (a[j] <= 3.4028235e38f) m = fmaxf(m, a[j]);
    }
    unsigned b = __float_as_uint(m);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) { unsigned v = __shfl_xor_sync(0xffffffffu, b, o); b = v > b ? v : b; }
    if ((threadIdx.x & 31) == 0 && b) atomicMax(amax, b);
}

/* B' rows: per group of gw inputs, [xh | xh | xl] of 3 gw halves (NP 3: Q8_0
 * weights) or [xh | xl] (NP 2: F16 weights); one group: gw = in; a thread
 * splits 8 activations; the first thread writes alpha = 2^-(ew + ex) and the
 * betas */
template <int NP>
__global__ void k_mmh_xsplit(const float *x, int T, int in, int gw, int64_t xs, unsigned *small, __half *B) {
    cu_pdl_enter();
    const int per_row = in / 8;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int ex = mmh_xexp_of(small[1]);
    if (i == 0) {
        float *f = (float *)small;
        f[2] = ldexpf(1.f, -(ex + mmh_wexp_of(small[0])));
        f[3] = 0.f;      /* beta: cuBLASLt reads alpha and beta from device memory */
        f[4] = 1.f;
    }
    if (i >= (int64_t)T * per_row) return;
    const int64_t t = i / per_row;
    const int c = (int)(i % per_row) * 8, grp = c / gw, cc = c - grp * gw;
    const float *p = x + t * xs + c;
    float4 v0 = *(const float4 *)p, v1 = *(const float4 *)(p + 4);
    const float v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    const float s = mmh_pow2(ex);
    __align__(16) __half hi[8], lo[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float y = v[j] * s;                        /* a power of two: exact */
        hi[j] = __float2half_rn(y);
        lo[j] = __float2half_rn(y - __half2float(hi[j]));
    }
    __half *b = B + t * NP * (int64_t)in + (int64_t)grp * NP * gw + cc;
    *(uint4 *)b = *(const uint4 *)hi;
    if (NP == 3) *(uint4 *)(b + gw) = *(const uint4 *)hi;
    *(uint4 *)(b + (NP - 1) * gw) = *(const uint4 *)lo;
}

/* a product's alpha and betas (small[4..]) when its B' is a shared split (cu_mmh_share_x):
 * k_mmh_xsplit's formula with the share's amax */
__global__ void k_mmh_alpha(unsigned *small, const unsigned *amax) {
    cu_pdl_enter();
    const unsigned a = *amax;
    small[1] = a;
    float *f = (float *)small;
    f[2] = ldexpf(1.f, -(mmh_xexp_of(a) + mmh_wexp_of(small[0])));
    f[3] = 0.f;
    f[4] = 1.f;
}

/* A' rows of F16 weights: [W | W] (each f16 weight exact: W.xh + W.xl, K' = 2 K);
 * a thread copies 8 weights */
__global__ void k_mmh_wcopy2(const __half *w, int64_t rows, int in, uint64_t row_bytes, __half *A) {
    cu_pdl_enter();
    const int per_row = in / 8;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * per_row) return;
    const int64_t r = i / per_row;
    const int c8 = (int)(i % per_row);
    const uint4 v = *(const uint4 *)((const uint8_t *)w + r * row_bytes + (int64_t)c8 * 16);
    __half *a = A + r * 2 * (int64_t)in + (int64_t)c8 * 8;
    *(uint4 *)a = v;
    *(uint4 *)(a + in) = v;
}

/* ------------------------------------------------------------------ */
/* host: the switch, per-stream scratch, cuBLASLt plans */

extern "C" void cu_amax_f32(const float *x, int T, int n, int64_t xs, unsigned *amax, cudaStream_t st) {
    int ga = (int)(((int64_t)T * (n / 4) + MMH_THREADS - 1) / MMH_THREADS);
    if (ga > 8 * cu_num_sms()) ga = 8 * cu_num_sms();
    if (ga > 0) cu_launch(k_mmh_amax, dim3(ga), MMH_THREADS, 0, st, x, T, n, xs, amax);
}

static int mmh_mode = -1, mmh_min_t = 256;
static int64_t mmh_min_w = 1 << 20;
static void mmh_env(void) {
    if (mmh_mode >= 0) return;
    const char *e = getenv("MINKE_CUDA_MMH"), *m = getenv("MINKE_CUDA_MMH_MIN"), *w = getenv("MINKE_CUDA_MMH_MINW");
    if (m && atoi(m) > 0) mmh_min_t = atoi(m);
    if (w && atoll(w) > 0) mmh_min_w = atoll(w);
    mmh_mode = e && *e ? atoi(e) != 0 : 1;
}
extern "C" void cu_mmh_set(int on, int min_tokens, int64_t min_weights) {
    mmh_env();
    mmh_mode = on != 0;
    if (min_tokens > 0) mmh_min_t = min_tokens;
    if (min_weights > 0) mmh_min_w = min_weights;
}

/* the fewest tokens cu_mmh takes (0: off) */
extern "C" int cu_mmh_min_tokens(void) {
    mmh_env();
    return mmh_mode ? mmh_min_t : 0;
}

extern "C" int cu_mmh_taken(const cu_gemv_args *g, int64_t ntok) {
    mmh_env();
    /* F16 weights always meet the f32 activations (act_f32 is the quantized types' flag) */
    if (!mmh_mode || (!g->act_f32 && g->wtype != CU_TYPE_F16) || g->tile_pairs) return 0;
    if (g->wtype != CU_TYPE_Q8_0 && g->wtype != CU_TYPE_Q8_0R && g->wtype != CU_TYPE_F16) return 0;
    if (g->wtype == CU_TYPE_F16 && (((uintptr_t)g->w & 15) || g->row_bytes % 16)) return 0;
    if (g->in % 32 || g->in > (1 << 20) || ntok < mmh_min_t || ntok > (1 << 24) || g->rows * g->in < mmh_min_w ||
        g->rows * g->in > CU_MMH_MAX_WEIGHTS)
        return 0;
    if (g->group_act_bytes && (g->group_rows <= 0 || g->rows % g->group_rows || g->group_act_bytes % 16)) return 0;
    return ((uintptr_t)g->act & 15) == 0 && g->act_stride % 16 == 0;
}

static pthread_mutex_t mmh_lock = PTHREAD_MUTEX_INITIALIZER;

/* used, dev, st: under the lock; sbuf: the stream's shared split of x (cu_mmh_share_x) */
typedef struct { int used, dev; cudaStream_t st; uint8_t *buf, *sbuf; size_t bytes, sbytes; } mmh_ws;
static mmh_ws ws_tab[32];

/* the table's entry of (dev, st), NULL if none (the lock held) */
static mmh_ws *mmh_ws_find(int dev, cudaStream_t st) {
    for (int i = 0; i < 32; i++)
        if (ws_tab[i].used && ws_tab[i].st == st && ws_tab[i].dev == dev) return &ws_tab[i];
    return NULL;
}

/* the stream's scratch of at least `bytes` (NULL: capturing, or no memory);
 * share: its buffer for a shared split of x instead (which other streams read
 * after this one forks them: growing it waits for the whole device).
 * The lock covers the table only: a stream's entry is used by the one host
 * thread that drives that stream, and growing it (a sync, cudaFree) under
 * the lock could hold another GPU's thread back from the collective this
 * stream waits for. */
static uint8_t *mmh_scratch(cudaStream_t st, size_t bytes, int share = 0) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(st, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) return NULL;
    int dev = 0;
    cudaGetDevice(&dev);
    pthread_mutex_lock(&mmh_lock);
    mmh_ws *e = mmh_ws_find(dev, st);
    for (int i = 0; i < 32 && !e; i++)
        if (!ws_tab[i].used) { e = &ws_tab[i]; e->used = 1; e->dev = dev; e->st = st; }
    pthread_mutex_unlock(&mmh_lock);
    if (!e) return NULL;
    uint8_t **buf = share ? &e->sbuf : &e->buf;
    size_t *have = share ? &e->sbytes : &e->bytes;
    if (*have < bytes) {
        if (*buf) {
            if (share) cudaDeviceSynchronize(); else cudaStreamSynchronize(st);
            cudaFree(*buf);
            *buf = NULL;
        }
        size_t want = bytes + (bytes >> 3);
        *have = 0;
        if (cudaMalloc((void **)buf, want) == cudaSuccess) *have = want;
        else { *buf = NULL; cudaGetLastError(); }
    }
    return *buf;
}

/* The weights' largest |d| (k_mmh_dmax), kept per matrix: weights do not change while a
 * model lives, so a matrix's first product finds it and later ones copy it (every prompt
 * read each dense matrix once more for it: 5.2 ms of a 4096-token prompt of Flash, ncu).
 * Per device; forgotten when a model's streams are released (its weights go with them). */
#define MMH_DMAX_SLOTS 2048
typedef struct { const void *w; int64_t rows; int in; uint64_t row_bytes; int rep; } mmh_dkey;
static mmh_dkey dmax_keys[32][MMH_DMAX_SLOTS];
static int dmax_n[32];
static unsigned *dmax_dev[32];

/* the matrix's slot on device dev (-1: no room or memory: found every time); *fresh: not yet found */
static int mmh_dmax_slot(int dev, const void *w, int64_t rows, int in, uint64_t rb, int rep, int *fresh) {
    int k = -1;
    *fresh = 1;
    pthread_mutex_lock(&mmh_lock);
    for (int i = 0; i < dmax_n[dev] && k < 0; i++) {
        const mmh_dkey *e = &dmax_keys[dev][i];
        if (e->w == w && e->rows == rows && e->in == in && e->row_bytes == rb && e->rep == rep) { k = i; *fresh = 0; }
    }
    if (k < 0 && !dmax_dev[dev] && cudaMalloc((void **)&dmax_dev[dev], sizeof(unsigned) * MMH_DMAX_SLOTS) != cudaSuccess) {
        dmax_dev[dev] = NULL;
        cudaGetLastError();
    }
    if (k < 0 && dmax_dev[dev] && dmax_n[dev] < MMH_DMAX_SLOTS) {
        k = dmax_n[dev]++;
        dmax_keys[dev][k] = (mmh_dkey){w, rows, in, rb, rep};
    }
    pthread_mutex_unlock(&mmh_lock);
    return k;
}
static void mmh_dmax_forget(int dev, int k) {
    pthread_mutex_lock(&mmh_lock);
    dmax_keys[dev][k].w = NULL;
    pthread_mutex_unlock(&mmh_lock);
}

/* the stream is going away (its model is freed): its scratch too, and the device's kept dmax */
extern "C" void cu_mmh_release(cudaStream_t st) {
    int dev = 0;
    cudaGetDevice(&dev);
    uint8_t *buf = NULL, *sbuf = NULL;
    pthread_mutex_lock(&mmh_lock);
    /* the kept dmax: forgotten, their slots not handed out again (work of another model on this
     * device may still read its own); a full table just stops keeping new ones */
    for (int i = 0; i < dmax_n[dev & 31]; i++) dmax_keys[dev & 31][i].w = NULL;
    mmh_ws *e = mmh_ws_find(dev, st);
    if (e) {
        buf = e->buf; sbuf = e->sbuf;
        memset(e, 0, sizeof *e);
    }
    pthread_mutex_unlock(&mmh_lock);
    /* outside the lock (another GPU's thread may need it to reach a collective this device waits for) */
    if (buf || sbuf) cudaDeviceSynchronize();    /* (other streams may read the shared split) */
    if (buf) cudaFree(buf);
    if (sbuf) cudaFree(sbuf);
}

/* cuBLASLt: a handle a device, a plan a shape */
typedef struct {
    int dev; int64_t m, n, k, ldc, ldb; int align, batch;
    cublasLtMatmulDesc_t desc; cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo; int ok;
} mmh_plan;
/* per host thread (one drives each GPU), so that a full cache can evict: a
 * plan is only used inside the call that looked it up */
#define MMH_PLANS 64
static thread_local mmh_plan plans[MMH_PLANS];
static thread_local int nplans, plan_next;
static cublasLtHandle_t handles[32];

/* D (m x n, ldc) = alpha A'^T B' over k, `batch` times: A' batch stride m k,
 * B' the next k of a row of batch k (ld: ldb, batch k unless a shared split's), D the next m rows */
static const mmh_plan *mmh_plan_get(int64_t m, int64_t n, int64_t k, int64_t ldc, int align, int batch, int64_t ldb) {
    int dev = 0;
    cudaGetDevice(&dev);
    dev &= 31;
    pthread_mutex_lock(&mmh_lock);
    int hok = handles[dev] || cublasLtCreate(&handles[dev]) == CUBLAS_STATUS_SUCCESS;
    pthread_mutex_unlock(&mmh_lock);
    if (!hok) return NULL;
    mmh_plan *p = NULL;
    for (int i = 0; i < nplans && !p; i++)
        if (plans[i].dev == dev && plans[i].m == m && plans[i].n == n && plans[i].k == k && plans[i].ldc == ldc &&
            plans[i].align == align && plans[i].batch == batch && plans[i].ldb == ldb)
            p = &plans[i];
    if (!p) {
        if (nplans < MMH_PLANS) p = &plans[nplans++];
        else {     /* full (prompts of many lengths): the oldest goes */
            p = &plans[plan_next];
            plan_next = (plan_next + 1) % MMH_PLANS;
            if (p->desc) cublasLtMatmulDescDestroy(p->desc);
            if (p->a) cublasLtMatrixLayoutDestroy(p->a);
            if (p->b) cublasLtMatrixLayoutDestroy(p->b);
            if (p->c) cublasLtMatrixLayoutDestroy(p->c);
        }
        memset(p, 0, sizeof *p);
        p->dev = dev; p->m = m; p->n = n; p->k = k; p->ldc = ldc; p->align = align; p->batch = batch; p->ldb = ldb;
        int ok = 1;
        cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_DEVICE;
        ok = ok && cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
        ok = ok && cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS;
        ok = ok && cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS;
        ok = ok && cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm) == CUBLAS_STATUS_SUCCESS;
        /* A' stored as m rows of k halves = a k x m column-major matrix, transposed */
        ok = ok && cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16F, k, m, k) == CUBLAS_STATUS_SUCCESS;
        ok = ok && cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16F, k, n, ldb) == CUBLAS_STATUS_SUCCESS;
        ok = ok && cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, m, n, ldc) == CUBLAS_STATUS_SUCCESS;
        if (batch > 1) {
            int32_t bc = batch;
            int64_t sa = m * k, sb = k, sc = m;
            const cublasLtMatrixLayout_t lay[3] = {p->a, p->b, p->c};
            const int64_t str[3] = {sa, sb, sc};
            for (int i = 0; i < 3 && ok; i++)
                ok = cublasLtMatrixLayoutSetAttribute(lay[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc) ==
                             CUBLAS_STATUS_SUCCESS &&
                     cublasLtMatrixLayoutSetAttribute(lay[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &str[i],
                                                      sizeof str[i]) == CUBLAS_STATUS_SUCCESS;
        }
        cublasLtMatmulPreference_t pref = NULL;
        uint64_t wsb = MMH_WS_BYTES;
        uint32_t al = (uint32_t)align;
        ok = ok && cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS;
        ok = ok && cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb) == CUBLAS_STATUS_SUCCESS;
        ok = ok && cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al) == CUBLAS_STATUS_SUCCESS;
        ok = ok && cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al) == CUBLAS_STATUS_SUCCESS;
        cublasLtMatmulHeuristicResult_t res;
        int nres = 0;
        ok = ok && cublasLtMatmulAlgoGetHeuristic(handles[dev], p->desc, p->a, p->b, p->c, p->c, pref, 1, &res, &nres) ==
                       CUBLAS_STATUS_SUCCESS && nres > 0;
        if (ok) p->algo = res.algo;
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        p->ok = ok;
        if (!ok) fprintf(stderr, "minke: cuBLASLt has no f16 GEMM for %lld x %lld x %lld (batch %d): the int8 kernels run it\n",
                         (long long)m, (long long)n, (long long)k, batch);
    }
    return p->ok ? p : NULL;
}

/* MINKE_CUDA_MMH_BATCH=0: grouped input as one GEMM a group (A/B) */
static int mmh_batch_off(void) {
    static int off = -1;
    if (off < 0) { const char *e = getenv("MINKE_CUDA_MMH_BATCH"); off = e && *e && atoi(e) == 0; }
    return off;
}

static int mmh_grid(int64_t threads) { return (int)((threads + MMH_THREADS - 1) / MMH_THREADS); }

/* the scratch of a product of `weights` weights over T rows of `in` */
static size_t mmh_a_bytes(int64_t weights) { return (size_t)(weights * 6 + 255) & ~(size_t)255; }
static size_t mmh_bytes(int64_t weights, int64_t T, int64_t in) {
    return MMH_WS_BYTES + MMH_SMALL + mmh_a_bytes(weights) + mmh_a_bytes(T * in);
}

extern "C" int cu_mmh_reserve(cudaStream_t st, int64_t T, int64_t max_in, int64_t max_weights) {
    mmh_env();
    if (!mmh_mode || T < mmh_min_t || max_in <= 0 || max_weights < mmh_min_w) return 0;
    return mmh_scratch(st, mmh_bytes(max_weights, T, max_in)) != NULL ? 1 : -1;
}

/* One split of x for all its products (cu_mmh_share_x): the backend splits a sub-layer's
 * input once, on the stream that forks the side streams, and the products of that x on
 * every stream take it instead of finding the amax and splitting again (Flash: q_a, kv,
 * the compressors', the indexer's and the router's F16 products, the shared expert's
 * gate and up: up to 7 splits of 4096 x 4096 floats a sub-layer, ~80 us each, become 1).
 * The layout is the Q8_0 products' [xh | xh | xl] with the batch's amax, so those take
 * the same B' as their own split (the same bits); an F16 product reads its [xh | xl] from
 * the second third on (ld 3 in; where in % 128 == 0, so that B keeps cuBLASLt's default
 * 256-byte alignment). Per host thread (one drives each GPU). */
typedef struct { const float *x; int64_t T, in, xs; const __half *B; const unsigned *amax; int dev; } mmh_share;
static thread_local mmh_share cur_share;

extern "C" void cu_mmh_share_clear(void) { cur_share.x = NULL; }

/* a share for a batch of T tokens: cu_mmh on, T taken, and not MINKE_CUDA_MMH_SHARE=0 (every product
 * then splits x itself: A/B) */
static int mmh_share_on(int64_t T) {
    static int off = -1;
    if (off < 0) { const char *e = getenv("MINKE_CUDA_MMH_SHARE"); off = e && *e && atoi(e) == 0; }
    mmh_env();
    return !off && mmh_mode && T >= mmh_min_t;
}

extern "C" int cu_mmh_share_reserve(cudaStream_t st, int64_t T, int64_t in) {
    if (!mmh_share_on(T) || in <= 0) return 0;
    return mmh_scratch(st, MMH_SMALL + mmh_a_bytes(T * in), 1) != NULL ? 1 : -1;
}

extern "C" int cu_mmh_share_x(const float *x, int T, int in, int64_t xs, cudaStream_t st) {
    cur_share.x = NULL;
    if (!mmh_share_on(T) || in % 32 || in > (1 << 20) || xs % 4 || ((uintptr_t)x & 15)) return 0;
    uint8_t *b = mmh_scratch(st, MMH_SMALL + mmh_a_bytes((int64_t)T * in), 1);
    if (!b) return 0;
    unsigned *small = (unsigned *)b;
    __half *B = (__half *)(b + MMH_SMALL);
    if (cudaMemsetAsync(small, 0, 8, st) != cudaSuccess) return 0;
    cu_amax_f32(x, T, in, xs, small + 1, st);
    cu_launch(k_mmh_xsplit<3>, dim3(mmh_grid((int64_t)T * (in / 8))), MMH_THREADS, 0, st, x, T, in, in, xs, small, B);
    if (cudaGetLastError() != cudaSuccess) return 0;
    int dev = 0;
    cudaGetDevice(&dev);
    cur_share.x = x; cur_share.T = T; cur_share.in = in; cur_share.xs = xs; cur_share.B = B; cur_share.amax = small + 1;
    cur_share.dev = dev;
    return 1;
}

/* one product: rows x in weights w (ng groups of rows / ng rows, each over
 * its in / ng inputs: grouped input, one batched GEMM), T rows of x (xs
 * floats apart) into out */
static int mmh_one(const cu_gemv_args *g, const uint8_t *w, int64_t rows, int in, int ng, const float *x, int64_t xs,
                   int T, float *out, const unsigned *amax_in, cudaStream_t st) {
    const int gw = in / ng;
    const bool f16 = g->wtype == CU_TYPE_F16;
    const int np = f16 ? 2 : 3;          /* pieces: [Wh|Wl|Wh] x [xh|xh|xl], or [W|W] x [xh|xl] */
    const int64_t gk = np * (int64_t)gw, grows = rows / ng;
    const size_t abytes = mmh_a_bytes(rows * gw);
    int dev = 0;
    cudaGetDevice(&dev);
    const mmh_share *sh = &cur_share;
    /* (an F16 product reads from the second third: 256-byte aligned, cuBLASLt's default for B, when in % 128 == 0) */
    const bool shared = sh->x && ng == 1 && x == sh->x && T == sh->T && in == sh->in && xs == sh->xs && dev == sh->dev &&
                        (!f16 || gw % 128 == 0);
    uint8_t *s = mmh_scratch(st, shared ? MMH_WS_BYTES + MMH_SMALL + abytes : mmh_bytes(rows * gw, T, in));
    if (!s) return 0;
    uintptr_t o = (uintptr_t)out;
    /* D's alignment, that of every batch's first row too (out + j grows) */
    const int64_t step = g->out_stride | (ng > 1 ? grows : 0);
    int align = (o & 15) == 0 && step % 4 == 0 ? 16 : (o & 7) == 0 && step % 2 == 0 ? 8 : 4;
    const mmh_plan *p = mmh_plan_get(grows, T, gk, g->out_stride, align, ng, shared ? 3 * (int64_t)gw : gk * ng);
    if (!p) return 0;
    unsigned *small = (unsigned *)(s + MMH_WS_BYTES);
    __half *A = (__half *)(s + MMH_WS_BYTES + MMH_SMALL), *B = (__half *)((uint8_t *)A + abytes);
    if (shared) B = (__half *)sh->B + (f16 ? gw : 0);
    /* small: [0] dmax bits, [1] amax bits, then (k_mmh_xsplit) [2] alpha, [3] 0.f, [4] 1.f */
    if (cudaMemsetAsync(small, 0, 8, st) != cudaSuccess) return 0;
    const int items = gw / 32;
    const bool rep = g->wtype == CU_TYPE_Q8_0R;
    if (f16) {      /* no weight scale: small[0] stays 0, so ew = 0 */
        cu_launch(k_mmh_wcopy2, dim3(mmh_grid(rows * (gw / 8))), MMH_THREADS, 0, st, (const __half *)w, rows, gw,
                  g->row_bytes, A);
    } else {
        int fresh = 1;
        const int slot = mmh_dmax_slot(dev & 31, w, rows, gw, g->row_bytes, rep, &fresh);
        unsigned *dm = slot >= 0 ? dmax_dev[dev & 31] + slot : small;
        if (fresh) {
            if (slot >= 0 && cudaMemsetAsync(dm, 0, 4, st) != cudaSuccess) { mmh_dmax_forget(dev & 31, slot); return 0; }
            int gd = mmh_grid(rows * items);
            if (gd > 4 * cu_num_sms() * 8) gd = 4 * cu_num_sms() * 8;
            cu_launch(rep ? k_mmh_dmax<true> : k_mmh_dmax<false>, dim3(gd), MMH_THREADS, 0, st, w, rows, items,
                      g->row_bytes, dm);
            if (cudaPeekAtLastError() != cudaSuccess) { if (slot >= 0) mmh_dmax_forget(dev & 31, slot); }
        }
        if (dm != small && cudaMemcpyAsync(small, dm, 4, cudaMemcpyDeviceToDevice, st) != cudaSuccess) return 0;
        cu_launch(rep ? k_mmh_wexpand<true> : k_mmh_wexpand<false>, dim3(mmh_grid(rows * (gw / 8))), MMH_THREADS, 0, st,
                  w, rows, gw, g->row_bytes, (const unsigned *)small, A);
    }
    if (shared) {       /* the split is made: only this product's alpha */
        cu_launch(k_mmh_alpha, dim3(1), 1, 0, st, small, sh->amax);
    } else {
        if (amax_in) {      /* found by the kernel that wrote x (the same maximum) */
            if (cudaMemcpyAsync(small + 1, amax_in, 4, cudaMemcpyDeviceToDevice, st) != cudaSuccess) return 0;
        } else {
            cu_amax_f32(x, T, in, xs, small + 1, st);
        }
        cu_launch(f16 ? k_mmh_xsplit<2> : k_mmh_xsplit<3>, dim3(mmh_grid((int64_t)T * (in / 8))), MMH_THREADS, 0, st, x,
                  T, in, gw, xs, small, B);
    }
    cudaError_t le = cudaGetLastError();
    if (le != cudaSuccess) {     /* a launch failed: out is untouched, the int8 kernels run it */
        fprintf(stderr, "minke: cu_mmh: %s; the int8 kernels run this product\n", cudaGetErrorString(le));
        return 0;
    }
    const float *alpha = (const float *)(small + 2), *beta = (const float *)(small + (g->accumulate ? 4 : 3));
    cublasStatus_t r = cublasLtMatmul(handles[p->dev], p->desc, alpha, A, p->a, B, p->b, beta, out, p->c, out, p->c,
                                      &p->algo, s, MMH_WS_BYTES, st);
    if (r != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "minke: cublasLtMatmul failed (%d)\n", (int)r);
        return 0;
    }
    return 1;
}

/* y[t][r] (+)= W[r] . x[t], t < ntok: g as for cu_mmq with f32 activations
 * (dense, grouped input allowed); 1 when done here. Grouped input whose
 * groups tile the activation row (out_a) is one batched GEMM; other groups
 * one GEMM each. */
extern "C" int cu_mmh(const cu_gemv_args *g, int64_t ntok, cudaStream_t st) {
    if (!cu_mmh_taken(g, ntok)) return 0;
    const int64_t xs = g->act_stride / 4;
    if (!g->group_act_bytes)
        return mmh_one(g, (const uint8_t *)g->w, g->rows, (int)g->in, 1, (const float *)g->act, xs, (int)ntok, g->out,
                       g->act_amax, st);
    const int64_t ng = g->rows / g->group_rows;
    if (g->group_act_bytes == g->in * 4 && ng * g->in <= (1 << 20) && !mmh_batch_off())
        return mmh_one(g, (const uint8_t *)g->w, g->rows, (int)(ng * g->in), (int)ng, (const float *)g->act, xs,
                       (int)ntok, g->out, g->act_amax, st);
    for (int64_t j = 0; j < ng; j++) {
        const uint8_t *w = (const uint8_t *)g->w + j * g->group_rows * g->row_bytes;
        const float *x = (const float *)g->act + j * (g->group_act_bytes / 4);
        /* a group's own slice sets its scale: act_amax (the whole row's) does not apply */
        if (!mmh_one(g, w, g->group_rows, (int)g->in, 1, x, xs, (int)ntok, g->out + j * g->group_rows, NULL, st)) {
            if (j == 0) return 0;
            fprintf(stderr, "minke: cu_mmh failed after %lld of %lld groups\n", (long long)j, (long long)ng);
            abort();
        }
    }
    return 1;
}
