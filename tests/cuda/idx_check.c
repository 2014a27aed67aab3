/* idx_check.c: the lightning indexer's scores on the tensor cores
 * (k_idx_scores_tc through cu_idx_scores_sims, cu_indexer.cu) against the
 * FMA kernel (k_idx_scores_w through cu_idx_scores), prefill batches at
 * DeepSeek V4 Flash's indexer shape (64 heads x 128 dims, top-512).
 *
 * Queries and rows are made as the simulations make them (random vectors,
 * Hadamard-128, the FP4 E2M1 round trip in blocks of 32: src/cpu/numerics.c),
 * head magnitudes spread over 2^-2..2^2, weights random. Each run starts from
 * score and selection buffers filled with a NaN pattern; the tensor-core
 * kernel (both row tilings, several token tiles) must give the FMA kernel's
 * bits in every score AND leave the same entries unwritten (rows c >= nI(t),
 * tokens with nI <= 512), and cu_idx_topk must select the same rows.
 * Printed per run: how many scores differ in their bits (expected 0), the
 * largest relative difference, and how many scores the kernel's exactness
 * test sends to its f32 fallback (computed here on the host the same way).
 *
 * Cases: nI just above 512 with T not a multiple of the token tile; nI
 * crossing the 1024 row tile; T = 16 with ~5000 rows; inactive tokens at the
 * start of the batch; FP4 data with poisoned rows and heads (not bf16, a
 * subnormal block, scales 2^14 / 2^20 apart, a NaN, 2^120, zero vectors: the
 * fallback, still bit-identical); plain random f32 data through the public
 * entry with sims off (the FMA kernel) and forced onto the tensor-core kernel
 * (MINKE_CUDA_IDX_TC=2: every score by the fallback); T = 8 (decode side:
 * the FMA kernel); the Flash-size prompt (T = 4096, pos0 = 0) with timings.
 *
 * FP4 rows (issue #6): the rows packed on the host into the KV cache's FP4
 * layout (nm_fp4_pack: kv4_stride(128) bytes a row, codes at 0, scale bytes
 * at 64; cu_kvrow.cuh); each path (the FMA kernel at decode T = 1 with 16 and
 * 32 row slots and at prefill T, the previous FMA kernel k_idx_scores, the
 * tensor-core kernel and its f32 fallback) must give from the packed rows
 * the bits it gives from the f32 rows: scores, unwritten entries, top-k.
 * Rows that are not FP4 values (the poisoned and the random f32 data) go
 * through the FP4 simulation first, as the cache's writer does; a row that
 * then does not pack is a failure. Decode is timed with both row formats.
 *
 *   idx_check          the checks and the Flash-size timing ('time' lines)
 *   idx_check --time   also the row / token tile variants timed
 * Decode on the tensor cores (the default where the cache's capacity holds
 * 4096 index rows or more, MINKE_CUDA_IDX_TC_DEC_ROWS) is checked against
 * the FMA kernel bit for bit (and that it is taken) at 4096,
 * 16384, 40000 and 40003 rows, with spare capacity, with no token past the
 * top-k, at T = 5 and 12, and poisoned (the fallback), with time lines for
 * the first three.
 * The tensor-core kernel's form is the default one: its wgmma form on sm_90a
 * (MINKE_CUDA_IDX_WG=0: mma.sync; run-cuda.sh runs the check both ways).
 * Ends with 'idx_check: all ok' (exit 0) or 'FAIL idx_check: N failure(s)'.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "cpu/numerics.h"
#include "cuda/cu_ops.h"
#include "cuda/cu_dec.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL cuda %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)

enum { NH = 64, HD = 128, TOPK = 512, TC_MIN_T = 16 };   /* TC_MIN_T: cu_indexer.cu's IDXT_MIN_T */
#define WSCALE 0.011048543456039806f     /* 1 / sqrt(128 * 64), the model's indexer scale */

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double u01(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (rng >> 11) * (1.0 / 9007199254740992.0);
}
static float frand(void) { return (float)(u01() * 2.0 - 1.0); }
static float gauss(void) { return (float)((u01() + u01() + u01() + u01() - 2.0) * 1.7320508075688772); }

static int fails = 0, do_time = 0;
static void report(int ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) fails++;
}
static cudaStream_t st;

/* a vector as the simulations leave it (§6.5, §6.6) */
static void fp4_vec(float *v, float mag) {
    for (int i = 0; i < HD; i++) v[i] = gauss() * mag;
    nm_hadamard128(v);
    nm_fp4_sim(v, HD, NULL);
}

/* ---- the kernel's exactness test, mirrored (only to print how many scores take the fallback) ---- */
#define BAD (1 << 20)
typedef struct { int E, L, span, bad; } vstat;     /* span: E + 9 - L (query head) or E - L (row) */
static vstat vec_stat(const float *v, int extra) {
    int emax = 0, kmin = 4096;
    uint32_t inexact = 0;
    for (int i = 0; i < HD; i++) {
        uint32_t b;
        memcpy(&b, &v[i], 4);
        b &= 0x7fffffffu;
        inexact |= b & 0xffffu;
        int e = (int)(b >> 23), key = e + __builtin_ctz((b & 0x7fffffu) | 0x800000u);
        if (e > emax) emax = e;
        if (b && key < kmin) kmin = key;
    }
    vstat s;
    int zero = kmin == 4096;
    s.E = zero ? -1000 : emax - 127;
    s.L = zero ? 1000 : kmin - 150;
    s.span = zero ? -2000 : s.E + extra - s.L;
    s.bad = inexact != 0;
    return s;
}
/* scores of the active tokens that the kernel computes in f32 (and all active scores) */
static void fallback_count(const float *q, const float *rows, int T, int pos0, long long *nfb, long long *nall) {
    int nmax = (pos0 + T) / 4;
    int *rB = malloc(sizeof(int) * (nmax + 1)), *rL = malloc(sizeof(int) * (nmax + 1)), *rE = malloc(sizeof(int) * (nmax + 1));
    for (int c = 0; c < nmax; c++) {
        vstat s = vec_stat(rows + (size_t)c * HD, 0);
        rE[c] = s.E; rL[c] = s.L;
        rB[c] = s.bad || s.L < -126 || s.E > 127 ? BAD : s.span;
    }
    *nfb = 0; *nall = 0;
    for (int t = 0; t < T; t++) {
        int nI = (pos0 + t + 1) / 4;
        if (nI <= TOPK) continue;
        int A = -1000000, Lq = 1000000, Eq = -1000000;
        for (int h = 0; h < NH; h++) {
            vstat s = vec_stat(q + ((size_t)t * NH + h) * HD, 9);
            int a = s.bad ? BAD : s.span;
            if (a > A) A = a;
            if (s.L < Lq) Lq = s.L;
            if (s.E > Eq) Eq = s.E;
        }
        if (Lq < -126 || Eq > 127) A = BAD;
        for (int c = 0; c < nI; c++) {
            int exact = A + rB[c] <= 24 && Lq + rL[c] >= -126 && Eq + rE[c] <= 118;
            *nfb += !exact;
            (*nall)++;
        }
    }
    free(rB); free(rL); free(rE);
}

/* ---- a case: T tokens from position pos0; rows up to nI of the last token ---- */
typedef struct {
    int T, pos0, icap;                 /* icap: rows allocated = max_rows = score stride */
    float *hq, *hw, *hrows;            /* host */
    float *q, *w, *rows, *sc;          /* device */
    int *pos, *sel, *nsel;
    uint8_t *rows4;                    /* device: the rows in FP4 (pack_rows), or NULL */
    int fmt;                           /* the rows the kernels read: CU_KV_F32 (rows) or CU_KV_FP4 (rows4) */
} icase;

enum { DATA_FP4, DATA_FP4_POISON, DATA_F32 };

static int case_extra_cap = 0;     /* index rows past the last token's nI (a cache's spare capacity) */
static void case_init(icase *c, int T, int pos0, int data) {
    memset(c, 0, sizeof *c);
    c->T = T; c->pos0 = pos0;
    int nmax = (pos0 + T) / 4;
    c->icap = nmax + 3 + case_extra_cap;
    size_t nq = (size_t)T * NH * HD, nr = (size_t)c->icap * HD;
    c->hq = malloc(sizeof(float) * nq); c->hw = malloc(sizeof(float) * T * NH); c->hrows = malloc(sizeof(float) * nr);
    for (int i = 0; i < T * NH; i++) c->hw[i] = frand();
    for (size_t v = 0; v < (size_t)T * NH; v++) {
        float *x = c->hq + v * HD;
        if (data == DATA_F32) for (int i = 0; i < HD; i++) x[i] = frand();
        else fp4_vec(x, exp2f(2.0f * frand()));
    }
    for (int r = 0; r < c->icap; r++) {
        float *x = c->hrows + (size_t)r * HD;
        if (r >= nmax) for (int i = 0; i < HD; i++) x[i] = NAN;     /* never read */
        else if (data == DATA_F32) for (int i = 0; i < HD; i++) x[i] = frand();
        else fp4_vec(x, exp2f(0.5f * frand()));
    }
    if (data == DATA_FP4_POISON) {
        /* rows: not bf16; a subnormal block; blocks 2^14 apart; a value near the top of the range; all zero */
        int rr[5] = {5, 17, nmax - 1, 300 % nmax, 100 % nmax};
        float *x = c->hrows + (size_t)rr[0] * HD;
        x[3] = (x[3] == 0.0f ? 1.0f : x[3]) * (1.0f + ldexpf(1.0f, -12));
        x = c->hrows + (size_t)rr[1] * HD;
        for (int i = 64; i < 96; i++) x[i] = ldexpf(x[i], -135);
        x = c->hrows + (size_t)rr[2] * HD;
        for (int i = 96; i < 128; i++) x[i] = ldexpf(x[i], -14);
        x = c->hrows + (size_t)rr[3] * HD;
        x[40] = ldexpf(1.5f, 120);
        x = c->hrows + (size_t)rr[4] * HD;
        for (int i = 0; i < HD; i++) x[i] = 0.0f;
        /* query heads: a block 2^20 below the rest; a NaN; not bf16; all zero */
        float *q = c->hq + ((size_t)(T / 2) * NH + 7) * HD;
        for (int i = 32; i < 64; i++) q[i] = ldexpf(q[i], -20);
        q = c->hq + ((size_t)(T - 1) * NH + 63) * HD;
        q[5] = NAN;
        q = c->hq + ((size_t)(T - 2) * NH + 0) * HD;
        q[9] = (q[9] == 0.0f ? 1.0f : q[9]) * (1.0f + ldexpf(1.0f, -10));
        q = c->hq + ((size_t)(T - 3) * NH + 3) * HD;
        for (int i = 0; i < HD; i++) q[i] = 0.0f;
    }
    CK(cudaMalloc((void **)&c->q, sizeof(float) * nq));
    CK(cudaMalloc((void **)&c->w, sizeof(float) * T * NH));
    CK(cudaMalloc((void **)&c->rows, sizeof(float) * nr));
    CK(cudaMalloc((void **)&c->sc, sizeof(float) * (size_t)T * c->icap));
    CK(cudaMalloc((void **)&c->pos, sizeof(int)));
    CK(cudaMalloc((void **)&c->sel, sizeof(int) * (size_t)T * TOPK));
    CK(cudaMalloc((void **)&c->nsel, sizeof(int) * T));
    CK(cudaMemcpy(c->q, c->hq, sizeof(float) * nq, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c->w, c->hw, sizeof(float) * T * NH, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c->rows, c->hrows, sizeof(float) * nr, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c->pos, &pos0, sizeof(int), cudaMemcpyHostToDevice));
}
static void case_free(icase *c) {
    free(c->hq); free(c->hw); free(c->hrows);
    cudaFree(c->q); cudaFree(c->w); cudaFree(c->rows); cudaFree(c->sc);
    cudaFree(c->pos); cudaFree(c->sel); cudaFree(c->nsel); cudaFree(c->rows4);
}

/* paths: the FMA kernel itself (P_FMA_OLD: the previous one, k_idx_scores);
 * the public entry with sims on / off; sims off forced onto the tensor-core
 * kernel */
enum { P_FMA, P_FMA_OLD, P_SIMS_ON, P_SIMS_OFF, P_TC_FORCED };
static void launch(icase *c, int path, int mt, int tok) {
    char b[16];
    snprintf(b, sizeof b, "%d", mt); setenv("MINKE_CUDA_IDX_TC_MT", b, 1);
    snprintf(b, sizeof b, "%d", tok); setenv("MINKE_CUDA_IDX_TC_TOK", b, 1);
    setenv("MINKE_CUDA_IDX_TC", path == P_TC_FORCED ? "2" : "1", 1);
    const void *rows = c->fmt == CU_KV_FP4 ? (const void *)c->rows4 : (const void *)c->rows;
    if (path == P_FMA || path == P_FMA_OLD) {
        cu_dec_old_set(path == P_FMA_OLD ? CU_OLD_IDX_SCORES : 0);
        cu_idx_scores(c->q, c->w, rows, c->fmt, c->T, NH, HD, WSCALE, TOPK, c->icap, c->pos, c->sc, c->icap, st);
        cu_dec_old_set(0);
    } else {
        cu_idx_scores_sims(c->q, c->w, rows, c->fmt, c->T, NH, HD, WSCALE, TOPK, c->icap, c->pos, c->sc, c->icap,
                           path == P_SIMS_ON, st);
    }
}

typedef struct { float *sc; int *sel, *nsel; } result;
static void result_alloc(result *r, const icase *c) {
    r->sc = malloc(sizeof(float) * (size_t)c->T * c->icap);
    r->sel = malloc(sizeof(int) * (size_t)c->T * TOPK);
    r->nsel = malloc(sizeof(int) * c->T);
}
static void result_free(result *r) { free(r->sc); free(r->sel); free(r->nsel); }

/* scores (on a buffer of 0xff bytes: a NaN pattern) and the top-k of them */
static void run(icase *c, int path, int mt, int tok, result *r) {
    CK(cudaMemsetAsync(c->sc, 0xff, sizeof(float) * (size_t)c->T * c->icap, st));
    CK(cudaMemsetAsync(c->sel, 0xff, sizeof(int) * (size_t)c->T * TOPK, st));
    CK(cudaMemsetAsync(c->nsel, 0xff, sizeof(int) * c->T, st));
    launch(c, path, mt, tok);
    CK(cudaGetLastError());
    cu_idx_topk(c->sc, c->icap, c->T, TOPK, c->pos, c->sel, c->nsel, st);
    CK(cudaStreamSynchronize(st));
    CK(cudaGetLastError());
    CK(cudaMemcpy(r->sc, c->sc, sizeof(float) * (size_t)c->T * c->icap, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(r->sel, c->sel, sizeof(int) * (size_t)c->T * TOPK, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(r->nsel, c->nsel, sizeof(int) * c->T, cudaMemcpyDeviceToHost));
}

static void compare(const icase *c, const result *ref, const result *got, const char *label) {
    long long n = 0, ndiff = 0;
    double maxrel = 0;
    for (int t = 0; t < c->T; t++) {
        int nI = (c->pos0 + t + 1) / 4;
        if (nI <= TOPK) continue;
        const float *a = ref->sc + (size_t)t * c->icap, *b = got->sc + (size_t)t * c->icap;
        for (int i = 0; i < nI; i++) {
            n++;
            if (memcmp(&a[i], &b[i], 4) == 0) continue;
            ndiff++;
            double d = fabs((double)a[i] - b[i]) / fmax(fabs((double)a[i]), 1e-30);
            if (d > maxrel || isnan(d)) maxrel = d;      /* a NaN sticks */
        }
    }
    int whole = memcmp(ref->sc, got->sc, sizeof(float) * (size_t)c->T * c->icap) == 0;
    int topk = memcmp(ref->sel, got->sel, sizeof(int) * (size_t)c->T * TOPK) == 0 &&
               memcmp(ref->nsel, got->nsel, sizeof(int) * c->T) == 0;
    char what[320];
    snprintf(what, sizeof what, "%s: %lld of %lld scores differ in bits (max rel %.3g), unwritten entries %s, top-k %s",
             label, ndiff, n, maxrel, whole ? "same" : "DIFFER", topk ? "same" : "DIFFERS");
    report(ndiff == 0 && whole && topk, what);
}

/* a few scores of the last token against a double-precision sum (both kernels' sanity) */
static void check_double(const icase *c, const result *r, const char *label) {
    int t = c->T - 1, nI = (c->pos0 + t + 1) / 4;
    if (nI <= TOPK) return;
    int cs[4] = {0, nI / 3, nI / 2, nI - 1};
    double worst = 0;
    for (int k = 0; k < 4; k++) {
        double ref = 0, mag = 0;
        for (int h = 0; h < NH; h++) {
            double d = 0;
            for (int i = 0; i < HD; i++) d += (double)c->hq[((size_t)t * NH + h) * HD + i] * c->hrows[(size_t)cs[k] * HD + i];
            if (d > 0) { ref += d * c->hw[t * NH + h] * WSCALE; mag += fabs(d * c->hw[t * NH + h] * WSCALE); }
        }
        double e = fabs(r->sc[(size_t)t * c->icap + cs[k]] - ref) / (mag > 0 ? mag : 1);
        if (e > worst) worst = e;
    }
    char what[320];
    snprintf(what, sizeof what, "%s: 4 scores of token %d against a double sum: max err %.2g of sum|terms|", label, t, worst);
    report(worst <= 1e-5, what);
}

static int cmpf(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return x < y ? -1 : x > y; }
/* median us of one scores launch (cudaEvent pairs, 20 launches after 3) */
static float time_launch(icase *c, int path, int mt, int tok) {
    enum { N = 20 };
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) launch(c, path, mt, tok);
    float t[N];
    for (int i = 0; i < N; i++) {
        CK(cudaEventRecord(e0, st));
        launch(c, path, mt, tok);
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&t[i], e0, e1));
    }
    CK(cudaGetLastError());
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    qsort(t, N, sizeof(float), cmpf);
    return t[N / 2] * 1000.f;
}

static int pack_rows(icase *c);

/* FP4 data: the FMA kernel against the tensor-core kernel's variants */
static void check_fp4(int T, int pos0, int data, int flash) {
    icase c;
    case_init(&c, T, pos0, data);
    long long nfb, nall;
    fallback_count(c.hq, c.hrows, T, pos0, &nfb, &nall);
    printf("     T=%d pos0=%d nI %d..%d%s: %lld of %lld active scores take the f32 fallback (host mirror of the test)\n",
           T, pos0, (pos0 + 1) / 4, (pos0 + T) / 4, data == DATA_FP4_POISON ? " (poisoned)" : "", nfb, nall);
    result ref, got;
    result_alloc(&ref, &c); result_alloc(&got, &c);
    run(&c, P_FMA, 2, 8, &ref);
    static const int var[][2] = {{2, 8}, {1, 8}, {2, 3}, {1, 16}};
    for (int v = 0; v < 4; v++) {
        if (flash && v >= 2) break;
        run(&c, P_SIMS_ON, var[v][0], var[v][1], &got);
        char label[160];
        snprintf(label, sizeof label, "idx_scores_tc T=%d pos0=%d%s rows %d tok %d", T, pos0,
                 data == DATA_FP4_POISON ? " poisoned" : "", 16 * 8 * var[v][0], var[v][1]);
        compare(&c, &ref, &got, label);
        if (v == 0 && data == DATA_FP4) check_double(&c, &got, label);
    }
    if (flash) {
        float tf = time_launch(&c, P_FMA, 2, 8), tt = time_launch(&c, P_SIMS_ON, 2, 8);
        printf("time idx_scores T=%d pos0=%d (Flash prompt): FMA k_idx_scores_w %9.1f us, tensor cores %8.1f us  x%.1f\n",
               T, pos0, tf, tt, tf / tt);
        if (pack_rows(&c)) {
            c.fmt = CU_KV_FP4;
            float t4 = time_launch(&c, P_SIMS_ON, 2, 8);
            c.fmt = CU_KV_F32;
            printf("time idx_scores_tc T=%d pos0=%d (Flash prompt): f32 rows %8.1f us, FP4 rows %8.1f us\n", T, pos0, tt, t4);
        }
        if (do_time) {
            static const int mts[2] = {2, 1}, toks[5] = {4, 8, 12, 16, 32};
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 5; b++)
                    printf("time idx_scores_tc T=%d pos0=%d rows %d tok %2d: %8.1f us\n", T, pos0, 16 * 8 * mts[a], toks[b],
                           time_launch(&c, P_SIMS_ON, mts[a], toks[b]));
        }
    }
    result_free(&ref); result_free(&got);
    case_free(&c);
}

/* plain f32 data: sims off keeps the FMA kernel; forced onto the tensor-core
 * kernel, every score takes the fallback, still the same bits */
static void check_f32(int T, int pos0) {
    icase c;
    case_init(&c, T, pos0, DATA_F32);
    long long nfb, nall;
    fallback_count(c.hq, c.hrows, T, pos0, &nfb, &nall);
    result ref, got;
    result_alloc(&ref, &c); result_alloc(&got, &c);
    run(&c, P_FMA, 2, 8, &ref);
    char label[200];
    run(&c, P_SIMS_OFF, 2, 8, &got);
    snprintf(label, sizeof label, "idx_scores random f32 T=%d pos0=%d, sims off (the FMA kernel)", T, pos0);
    compare(&c, &ref, &got, label);
    for (int mt = 2; mt >= 1; mt--) {
        run(&c, P_TC_FORCED, mt, 8, &got);
        snprintf(label, sizeof label, "idx_scores random f32 T=%d pos0=%d forced tc rows %d (%lld of %lld by fallback)",
                 T, pos0, 16 * 8 * mt, nfb, nall);
        compare(&c, &ref, &got, label);
    }
    result_free(&ref); result_free(&got);
    case_free(&c);
}

/* T below the tensor-core threshold: the public entry with sims on is the FMA kernel */
static void check_small(int T, int pos0) {
    icase c;
    case_init(&c, T, pos0, DATA_FP4);
    result ref, got;
    result_alloc(&ref, &c); result_alloc(&got, &c);
    run(&c, P_FMA, 2, 8, &ref);
    run(&c, P_SIMS_ON, 2, 8, &got);
    char label[160];
    snprintf(label, sizeof label, "idx_scores T=%d pos0=%d sims on (decode side: the FMA kernel)", T, pos0);
    compare(&c, &ref, &got, label);
    result_free(&ref); result_free(&got);
    case_free(&c);
}

/* decode on the tensor cores (MINKE_CUDA_IDX_TC_DEC_ROWS):
 * T tokens' scores by k_idx_scores_tc against the FMA kernel, bit for bit,
 * with 128 and 256 rows a block, f32 and FP4 rows (FP4 when the data packs);
 * extra: spare capacity past the last token's rows; timed: time lines */
static void check_dec_tc(int T, int pos0, int data, int extra, int timed) {
    icase c;
    case_extra_cap = extra;
    case_init(&c, T, pos0, data);
    case_extra_cap = 0;
    result ref, got;
    result_alloc(&ref, &c); result_alloc(&got, &c);
    int packed = data == DATA_FP4 ? pack_rows(&c) : 0;     /* poisoned rows do not pack: f32 rows only */
    char label[240];
    for (int f4 = 0; f4 <= packed; f4++) {
        c.fmt = f4 ? CU_KV_FP4 : CU_KV_F32;
        setenv("MINKE_CUDA_IDX_TC_DEC_ROWS", "0", 1);
        run(&c, P_FMA, 2, 8, &ref);
        float tf = timed ? time_launch(&c, P_SIMS_ON, 2, 8) : 0.f;     /* the threshold off: the FMA kernel */
        setenv("MINKE_CUDA_IDX_TC_DEC_ROWS", "1", 1);
        int taken = cu_idx_scores_tc_taken(T, NH, HD, c.icap, 1);
        for (int mt = 2; mt >= 1; mt--) {
            run(&c, P_SIMS_ON, mt, 8, &got);
            snprintf(label, sizeof label, "idx_scores decode on the tensor cores T=%d pos0=%d%s %s rows (capacity %d), "
                     "%d rows a block, %s", T, pos0, data == DATA_FP4_POISON ? " poisoned" : "", f4 ? "FP4" : "f32",
                     c.icap, 16 * 8 * mt, taken ? "taken" : "NOT TAKEN");
            compare(&c, &ref, &got, label);
            if (!taken) report(0, label);
            if (timed)
                printf("time idx_scores decode T=%d pos0=%d %s rows: FMA kernel %7.1f us, tensor cores (%d rows a block) "
                       "%7.1f us\n", T, pos0, f4 ? "FP4" : "f32", tf, 16 * 8 * mt, time_launch(&c, P_SIMS_ON, mt, 8));
        }
    }
    setenv("MINKE_CUDA_IDX_TC_DEC_ROWS", "0", 1);
    c.fmt = CU_KV_F32;
    result_free(&ref); result_free(&got);
    case_free(&c);
}

/* the case's rows in the KV cache's FP4 layout, on the device in c->rows4:
 * row r at r kv4_stride(HD) bytes, its codes at 0, its scale bytes at HD / 2;
 * the rows past the last token's nI (never read) are 0xff bytes (-6 times
 * an infinite scale). Returns 0, reported, when a row does not pack. */
static int pack_rows(icase *c) {
    int nmax = (c->pos0 + c->T) / 4, rb = kv4_stride(HD);
    uint8_t *h = malloc((size_t)c->icap * rb);
    memset(h, 0xff, (size_t)c->icap * rb);
    for (int r = 0; r < nmax; r++) {
        uint8_t *row = h + (size_t)r * rb;
        memset(row, 0, rb);
        if (!nm_fp4_pack(c->hrows + (size_t)r * HD, HD, row, row + HD / 2)) {
            char what[160];
            snprintf(what, sizeof what, "FP4 rows T=%d pos0=%d: row %d does not pack (not FP4-simulated values)",
                     c->T, c->pos0, r);
            report(0, what);
            free(h);
            return 0;
        }
    }
    CK(cudaMalloc((void **)&c->rows4, (size_t)c->icap * rb));
    CK(cudaMemcpy(c->rows4, h, (size_t)c->icap * rb, cudaMemcpyHostToDevice));
    free(h);
    return 1;
}

/* FP4 rows against f32 rows of the same values, path by path (the FMA
 * kernels; from T = 16 the tensor-core kernel with both row tilings: sims on,
 * or forced for random f32 queries, whose scores all take the fallback) */
static void check_fp4_rows(int T, int pos0, int data, int timed) {
    icase c;
    case_init(&c, T, pos0, data);
    int nmax = (pos0 + T) / 4;
    if (data != DATA_FP4) {       /* the writer's simulation: what a cache row can hold */
        for (int r = 0; r < nmax; r++) nm_fp4_sim(c.hrows + (size_t)r * HD, HD, NULL);
        CK(cudaMemcpy(c.rows, c.hrows, sizeof(float) * (size_t)nmax * HD, cudaMemcpyHostToDevice));
    }
    if (!pack_rows(&c)) { case_free(&c); return; }
    long long nfb, nall;
    fallback_count(c.hq, c.hrows, T, pos0, &nfb, &nall);
    int tc = data == DATA_F32 ? P_TC_FORCED : P_SIMS_ON;
    static const char *const names[] = {
        [P_FMA] = "FMA kernel", [P_FMA_OLD] = "k_idx_scores (old kernels)", [P_SIMS_ON] = "tensor cores",
        [P_TC_FORCED] = "forced tensor cores"};
    const int runs[][2] = {{P_FMA, 2}, {P_FMA_OLD, 2}, {tc, 2}, {tc, 1}};
    result ref, got;
    result_alloc(&ref, &c); result_alloc(&got, &c);
    for (int v = 0; v < 4; v++) {
        int path = runs[v][0], mt = runs[v][1];
        if (path == tc && T < TC_MIN_T) break;      /* below it the public entry is the FMA kernel */
        c.fmt = CU_KV_F32; run(&c, path, mt, 8, &ref);
        c.fmt = CU_KV_FP4; run(&c, path, mt, 8, &got);
        char label[240];
        snprintf(label, sizeof label, "FP4 rows vs f32 rows T=%d pos0=%d%s, %s%s", T, pos0,
                 data == DATA_FP4_POISON ? " poisoned" : data == DATA_F32 ? " random queries" : "", names[path],
                 path == tc ? (mt == 2 ? " rows 256" : " rows 128") : "");
        if (path == tc) {
            size_t n = strlen(label);
            snprintf(label + n, sizeof label - n, " (%lld of %lld by fallback)", nfb, nall);
        }
        compare(&c, &ref, &got, label);
        if (v == 0 && data == DATA_FP4) check_double(&c, &got, label);
        if (timed) {
            c.fmt = CU_KV_F32; float tf = time_launch(&c, path, mt, 8);
            c.fmt = CU_KV_FP4; float t4 = time_launch(&c, path, mt, 8);
            printf("time idx_scores %s T=%d pos0=%d: f32 rows %9.1f us, FP4 rows %9.1f us  x%.2f\n", names[path], T,
                   pos0, tf, t4, tf / t4);
        }
    }
    result_free(&ref); result_free(&got);
    case_free(&c);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--time")) do_time = 1;
        else { fprintf(stderr, "usage: idx_check [--time]\n"); return 2; }
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) { printf("FAIL no CUDA device\n"); return 1; }
    setvbuf(stdout, NULL, _IOLBF, 0);
    cu_ops_init();
    cu_dec_old_set(0);
    /* the default switch: decode takes the tensor cores from a capacity of 4096 rows */
    unsetenv("MINKE_CUDA_IDX_TC_DEC_ROWS");
    report(cu_idx_scores_tc_taken(1, NH, HD, 4096, 1) == 1 && cu_idx_scores_tc_taken(1, NH, HD, 4095, 1) == 0 &&
           cu_idx_scores_tc_taken(1, NH, HD, 65536, 0) == 0,
           "decode scores on the tensor cores by default from a capacity of 4096 rows (sims on)");
    /* the other checks mean the FMA kernel for decode; check_dec_tc turns it on where it means to */
    setenv("MINKE_CUDA_IDX_TC_DEC_ROWS", "0", 1);
    CK(cudaStreamCreate(&st));     /* blocking: ordered with the plain cudaMemcpy of the checks */
    check_fp4(37, 2048, DATA_FP4, 0);          /* nI 512..521: tokens 0-2 inactive, 34 of 37 active */
    check_fp4(200, 4000, DATA_FP4, 0);         /* nI 1000..1050: across the 1024 row tile */
    check_fp4(16, 20000, DATA_FP4, 0);         /* the smallest batch, ~5000 rows */
    check_fp4(100, 1900, DATA_FP4, 0);         /* nI 475..500: no token active */
    check_fp4(100, 2040, DATA_FP4, 0);         /* nI 510..535 */
    check_fp4(64, 2400, DATA_FP4_POISON, 0);   /* the fallback */
    check_f32(48, 3000);
    check_small(8, 3000);
    check_dec_tc(1, 16383, DATA_FP4, 0, 1);          /* decode at ctx 16384 (4096 rows) */
    check_dec_tc(1, 65535, DATA_FP4, 0, 1);          /* ctx 65536: 16384 rows */
    check_dec_tc(1, 160000, DATA_FP4, 0, 1);         /* 40000 rows */
    check_dec_tc(1, 160011, DATA_FP4, 0, 0);         /* 40003 rows: an active warp's rows past nI */
    check_dec_tc(1, 16383, DATA_FP4, 60000, 0);      /* a capacity far past the rows held */
    check_dec_tc(1, 1500, DATA_FP4, 0, 0);           /* 375 rows, no more than the top-k: nothing scored */
    check_dec_tc(5, 16380, DATA_FP4, 0, 0);          /* short batches under the prefill threshold */
    check_dec_tc(12, 16380, DATA_FP4, 0, 0);
    check_dec_tc(4, 20000, DATA_FP4_POISON, 0, 0);   /* the f32 fallback (the poison needs T >= 3) */
    check_fp4(4096, 0, DATA_FP4, 1);           /* the Flash prompt */
    /* row slots and rows a thread as cu_idx_scores picks them on the H200 (132 SMs) */
    check_fp4_rows(1, 20000, DATA_FP4, 0);     /* decode, 5000 rows: 16 row slots, a row a thread */
    check_fp4_rows(1, 160000, DATA_FP4, 1);    /* decode, 40000 rows: 32 row slots, 4 rows a thread; timed */
    check_fp4_rows(37, 2048, DATA_FP4, 0);     /* prefill, tokens 0-2 inactive; 2 rows a thread */
    check_fp4_rows(200, 4000, DATA_FP4, 0);    /* across the 1024 row tile; 4 rows a thread */
    check_fp4_rows(64, 2400, DATA_FP4_POISON, 0);   /* the tensor cores' f32 fallback reading FP4 rows */
    check_fp4_rows(48, 3000, DATA_F32, 0);     /* every tensor-core score by the fallback */
    CK(cudaDeviceSynchronize());
    if (fails) { printf("FAIL idx_check: %d failure(s)\n", fails); return 1; }
    printf("idx_check: all ok\n");
    return 0;
}
