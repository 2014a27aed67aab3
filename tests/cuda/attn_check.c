/* attn_check.c: the decode-path kernels of cu_attn.cu, cu_indexer.cu and
 * cu_comp.cu against their previous versions (cu_dec.h) on random inputs of
 * DeepSeek V4 Flash shape (64 heads x 512 dims, RoPE 64, window 128; indexer
 * 64 heads x 128 dims, top-512 of 1024 / 16384 compressed rows; ratio-128
 * compressor) at T = 1 and T = 2.
 *
 * Kernels that keep their arithmetic must match the previous ones bit for
 * bit: indexer q prep, scores, top-k (also with many exact ties, and past the
 * top-k key cache), q head, kv finish (+ ring row), ratio-128 compressor
 * state. The split attention changed its summation order: old and new are
 * both compared with a double-precision reference (max |diff| / max |ref|).
 * The tensor-core prefill attention (cu_attn_tc.cu, forced by calling
 * cu_attention_tc) must give the same bits with MINKE_CUDA_ATT_TC_PIPE 0
 * (k_attention_tc) and 1 (k_attention_tcp, S on 16 x 16 warps): on every
 * attention shape above, at 40 heads, and at Flash size (4096 tokens: a first chunk and a second one
 * with window 128 + 512 selected rows a token, and ratio 128), with a
 * "time attention_tc" line for each Flash case (always printed). The wgmma
 * kernel (cu_attn_wg.cu, PIPE 2, called as cu_attention_wg) sums in other
 * orders: within 2e-3 of max|o| of PIPE 0 and within the reference bound, all
 * outputs written; its o amax bit for bit the largest finite |o|; on an sm_90
 * device it must run. q's norm + RoPE by the attention (qeps) against the
 * norm kernel first: bit for bit on PIPE 1 (in place), within 2e-3 on PIPE 2
 * (inside the kernel). cu_attention's o amax after the split decode kernels:
 * bit for bit.
 * The compressed rows hold the FP8 simulation's values (nm_fp8_sim on the
 * first HD - NROT dims, as the compressors' rows with the simulations on),
 * and the decode paths (split decode k_attn_dec, the previous k_attention
 * with its combine) must give the same bits reading them packed as FP8 rows
 * (issue #6, comp_fmt CU_KV_FP8; packed on the host by nm_fp8_pack) as
 * reading them as f32 rows; the prefill kernels read f32 rows (the backend
 * unpacks a batch's packed rows first, kvfmt_check checks the unpack).
 * Prints one ok/FAIL line per check; exit 1 on any FAIL.
 *   attn_check            the checks
 *   attn_check --shapes   only the split decode on other shapes (check_attention_shape)
 *   attn_check --time     also median kernel times, old vs new (cudaEvent
 *                         pairs around each of 200 launches, and the mean of
 *                         200 back-to-back launches)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "cuda/cu_ops.h"
#include "cuda/cu_dec.h"
#include "cuda/cu_gemv3.h"
#include "cpu/numerics.h"
#include "quant/quant.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL cuda %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)

enum { NH = 64, HD = 512, NROT = 64, WIN = 128, IH = 64, IHD = 128, TOPK = 512 };

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}
static void fill(float *x, int64_t n, float scale) { for (int64_t i = 0; i < n; i++) x[i] = frand() * scale; }

static int fails = 0;
static void report(int ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) fails++;
}

/* the kernels' order of scores: f32 bits mapped to ordered keys (-0 below +0),
 * larger key first, then lower index */
static const float *cmp_scores;
static uint32_t okey(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
static int cmp_idx(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    uint32_t ui = okey(cmp_scores[i]), uj = okey(cmp_scores[j]);
    if (ui != uj) return ui > uj ? -1 : 1;
    return i - j;
}

static void *dmalloc(size_t n) { void *p; CK(cudaMalloc(&p, n)); return p; }
static void *dup_to_dev(const void *h, size_t n) { void *p = dmalloc(n); CK(cudaMemcpy(p, h, n, cudaMemcpyHostToDevice)); return p; }
static void to_host(void *h, const void *d, size_t n) { CK(cudaDeviceSynchronize()); CK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost)); }
static void set_pos(int *dpos, int pos) { CK(cudaMemcpy(dpos, &pos, sizeof pos, cudaMemcpyHostToDevice)); }

static int do_time = 0;
static cudaStream_t st;

/* ---- timing: fn(arg) enqueues one launch on st ---- */
typedef void (*launch_fn)(void *arg);
static int cmpf(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return x < y ? -1 : x > y; }
static void time_one(const char *name, launch_fn fn, void *arg, float *med, float *mean) {
    enum { N = 200 };
    cudaEvent_t ev[N + 1], b0, b1;
    for (int i = 0; i <= N; i++) CK(cudaEventCreate(&ev[i]));
    CK(cudaEventCreate(&b0)); CK(cudaEventCreate(&b1));
    for (int i = 0; i < 10; i++) fn(arg);
    CK(cudaStreamSynchronize(st));
    float t[N];
    for (int i = 0; i < N; i++) {
        CK(cudaEventRecord(ev[i], st));
        fn(arg);
        CK(cudaEventRecord(ev[N], st));
        CK(cudaEventSynchronize(ev[N]));
        CK(cudaEventElapsedTime(&t[i], ev[i], ev[N]));
    }
    qsort(t, N, sizeof(float), cmpf);
    *med = t[N / 2] * 1000.f;
    CK(cudaEventRecord(b0, st));
    for (int i = 0; i < N; i++) fn(arg);
    CK(cudaEventRecord(b1, st));
    CK(cudaEventSynchronize(b1));
    float ms;
    CK(cudaEventElapsedTime(&ms, b0, b1));
    *mean = ms * 1000.f / N;
    CK(cudaGetLastError());
    for (int i = 0; i <= N; i++) cudaEventDestroy(ev[i]);
    cudaEventDestroy(b0); cudaEventDestroy(b1);
    (void)name;
}
/* old (mask) vs new timing of one launch function */
static void time_pair(const char *name, int bit, launch_fn fn, void *arg) {
    if (!do_time) return;
    float mo, ao, mn, an;
    cu_dec_old_set(bit); time_one(name, fn, arg, &mo, &ao);
    cu_dec_old_set(0); time_one(name, fn, arg, &mn, &an);
    printf("time %-44s old %8.2f us (b2b %8.2f)  new %8.2f us (b2b %8.2f)  x%.2f\n", name, mo, ao, mn, an, mo / mn);
}

/* ------------------------------------------------------------------ */
/* indexer: q prep, scores, top-k                                      */

typedef struct {
    int T, nctx, icap, sims;
    float *qI0, *qI, *wI, *rows, *scores, *inv_freq;
    int *pos, *sel, *nsel;
} idx_ctx;

static void l_qprep(void *a) { idx_ctx *c = a; cu_idx_q_prep(c->qI, c->T, IH, IHD, NROT, c->inv_freq, c->pos, c->sims, st); }
static void l_scores(void *a) {
    idx_ctx *c = a;
    cu_idx_scores(c->qI, c->wI, c->rows, CU_KV_F32, c->T, IH, IHD, 1.0f / 8.0f / 64.0f, TOPK, c->icap, c->pos, c->scores, c->icap, st);
}
static void l_topk(void *a) { idx_ctx *c = a; cu_idx_topk(c->scores, c->icap, c->T, TOPK, c->pos, c->sel, c->nsel, st); }

static int run_old_new(int bit, launch_fn fn, void *arg, void *dbuf, const void *init, size_t n, void *out_old, void *out_new) {
    if (init) CK(cudaMemcpy(dbuf, init, n, cudaMemcpyHostToDevice));
    cu_dec_old_set(bit); fn(arg); CK(cudaGetLastError());
    to_host(out_old, dbuf, n);
    if (init) CK(cudaMemcpy(dbuf, init, n, cudaMemcpyHostToDevice));
    cu_dec_old_set(0); fn(arg); CK(cudaGetLastError());
    to_host(out_new, dbuf, n);
    return memcmp(out_old, out_new, n) == 0;
}

/* top-k of n random scores with `kind` 0 random, 1 many ties (few distinct
 * values, +-0), 2 all equal */
static void check_topk_kind(idx_ctx *c, int nI, int kind, const char *label) {
    int T = c->T;
    float *h = malloc(sizeof(float) * (size_t)c->icap * T);
    for (int64_t i = 0; i < (int64_t)c->icap * T; i++) {
        float v = frand();
        if (kind == 1) { v = (float)((int)(v * 6.0f)) * 0.25f; if (v == 0.0f && i % 7 == 0) v = -0.0f; }
        if (kind == 2) v = 1.5f;
        h[i] = v;
    }
    CK(cudaMemcpy(c->scores, h, sizeof(float) * (size_t)c->icap * T, cudaMemcpyHostToDevice));
    set_pos(c->pos, 4 * nI - 1);
    int *so = malloc(sizeof(int) * TOPK * T), *sn = malloc(sizeof(int) * TOPK * T), no[4], nn[4];
    cu_dec_old_set(CU_OLD_IDX_TOPK); l_topk(c); to_host(so, c->sel, sizeof(int) * TOPK * T); to_host(no, c->nsel, sizeof(int) * T);
    CK(cudaMemset(c->sel, 0xff, sizeof(int) * TOPK * T));
    cu_dec_old_set(0); l_topk(c); to_host(sn, c->sel, sizeof(int) * TOPK * T); to_host(nn, c->nsel, sizeof(int) * T);
    int ok = memcmp(so, sn, sizeof(int) * TOPK * T) == 0 && memcmp(no, nn, sizeof(int) * T) == 0;
    /* and against a host reference for token 0 (score desc, index asc; ascending output) */
    {
        int n0 = nI, cnt = 0;
        int *idx = malloc(sizeof(int) * n0);
        for (int i = 0; i < n0; i++) idx[i] = i;
        cmp_scores = h;
        qsort(idx, n0, sizeof(int), cmp_idx);
        char *mark = calloc(n0, 1);
        for (int i = 0; i < TOPK; i++) mark[idx[i]] = 1;
        for (int i = 0; i < n0 && cnt <= TOPK; i++)
            if (mark[i]) { if (cnt >= TOPK || sn[cnt] != i) { ok = 0; break; } cnt++; }
        free(mark); free(idx);
    }
    char what[160];
    snprintf(what, sizeof what, "idx_topk %s nI=%d T=%d: old == new == host reference", label, nI, T);
    report(ok, what);
    if (kind == 0) {
        snprintf(what, sizeof what, "idx_topk nI=%d T=%d", nI, T);
        time_pair(what, CU_OLD_IDX_TOPK, l_topk, c);
    }
    free(h); free(so); free(sn);
}

static void check_indexer(int T, int nI) {
    idx_ctx c = {0};
    c.T = T; c.nctx = 4 * (nI + T); c.icap = c.nctx / 4 + 1; c.sims = 1;
    size_t nq = (size_t)T * IH * IHD;
    float *hq = malloc(sizeof(float) * nq), *hw = malloc(sizeof(float) * T * IH);
    float *hrows = malloc(sizeof(float) * (size_t)c.icap * IHD), inv[NROT / 2];
    fill(hq, nq, 1.0f); fill(hw, T * IH, 1.0f); fill(hrows, (int64_t)c.icap * IHD, 1.0f);
    for (int k = 0; k < NROT / 2; k++) inv[k] = powf(160000.0f, -2.0f * k / NROT);
    c.qI0 = dup_to_dev(hq, sizeof(float) * nq);
    c.qI = dmalloc(sizeof(float) * nq);
    c.wI = dup_to_dev(hw, sizeof(float) * T * IH);
    c.rows = dup_to_dev(hrows, sizeof(float) * (size_t)c.icap * IHD);
    c.scores = dmalloc(sizeof(float) * (size_t)c.icap * T);
    c.inv_freq = dup_to_dev(inv, sizeof inv);
    c.pos = dmalloc(sizeof(int));
    c.sel = dmalloc(sizeof(int) * TOPK * T); c.nsel = dmalloc(sizeof(int) * T);
    set_pos(c.pos, 4 * nI - 1);
    char what[160];
    /* q prep (sims on and off) */
    float *o1 = malloc(sizeof(float) * nq), *o2 = malloc(sizeof(float) * nq);
    for (int sims = 0; sims < 2; sims++) {
        c.sims = sims;
        int ok = run_old_new(CU_OLD_IDX_Q_PREP, l_qprep, &c, c.qI, hq, sizeof(float) * nq, o1, o2);
        snprintf(what, sizeof what, "idx_q_prep sims=%d T=%d: bit-identical", sims, T);
        report(ok, what);
    }
    if (T == 1) { snprintf(what, sizeof what, "idx_q_prep T=%d", T); time_pair(what, CU_OLD_IDX_Q_PREP, l_qprep, &c); }
    /* scores on the prepared q */
    CK(cudaMemcpy(c.qI, o2, sizeof(float) * nq, cudaMemcpyHostToDevice));
    size_t ns = sizeof(float) * (size_t)c.icap * T;
    float *s1 = malloc(ns), *s2 = malloc(ns);
    CK(cudaMemset(c.scores, 0, ns));
    int ok = run_old_new(CU_OLD_IDX_SCORES, l_scores, &c, c.scores, NULL, ns, s1, s2);
    for (int t = 0; t < T && ok; t++) {
        int n = (4 * nI - 1 + t + 1) / 4;
        if (memcmp(s1 + (size_t)t * c.icap, s2 + (size_t)t * c.icap, sizeof(float) * n)) ok = 0;
    }
    /* one score against a double reference, as a sanity check of both */
    double ref = 0, got = s2[5];
    for (int h = 0; h < IH; h++) {
        double d = 0;
        for (int i = 0; i < IHD; i++) d += (double)o2[h * IHD + i] * hrows[5 * IHD + i];
        if (d > 0) ref += d * hw[h] * (1.0 / 8.0 / 64.0);
    }
    snprintf(what, sizeof what, "idx_scores rows=%d T=%d: bit-identical (score[5] %.6g vs double %.6g)", nI, T, got, ref);
    report(ok && fabs(got - ref) <= 1e-4 * (fabs(ref) + 1e-3), what);
    for (int force = 1; force <= 4 && T == 1; force *= 2) {
        char v[8]; snprintf(v, sizeof v, "%d", force);
        setenv("MINKE_CUDA_IDX_RPT", v, 1);
        /* the launcher reads the variable each call */
        cu_dec_old_set(0); CK(cudaMemset(c.scores, 0, ns)); l_scores(&c); to_host(s2, c.scores, ns);
        snprintf(what, sizeof what, "idx_scores rows=%d rpt=%d: bit-identical", nI, force);
        report(memcmp(s1, s2, sizeof(float) * nI) == 0, what);
        unsetenv("MINKE_CUDA_IDX_RPT");
    }
    if (T == 1) { snprintf(what, sizeof what, "idx_scores rows=%d T=%d", nI, T); time_pair(what, CU_OLD_IDX_SCORES, l_scores, &c); }
    /* top-k on the real scores, then on tie-heavy and constant scores */
    int *so = malloc(sizeof(int) * TOPK * T), *sn = malloc(sizeof(int) * TOPK * T);
    cu_dec_old_set(CU_OLD_IDX_TOPK); l_topk(&c); to_host(so, c.sel, sizeof(int) * TOPK * T);
    cu_dec_old_set(0); l_topk(&c); to_host(sn, c.sel, sizeof(int) * TOPK * T);
    snprintf(what, sizeof what, "idx_topk of the scores rows=%d T=%d: bit-identical", nI, T);
    report(memcmp(so, sn, sizeof(int) * TOPK * T) == 0, what);
    check_topk_kind(&c, nI, 0, "random");
    check_topk_kind(&c, nI, 1, "ties");
    check_topk_kind(&c, nI, 2, "constant");
    free(hq); free(hw); free(hrows); free(o1); free(o2); free(s1); free(s2); free(so); free(sn);
    cudaFree(c.qI0); cudaFree(c.qI); cudaFree(c.wI); cudaFree(c.rows); cudaFree(c.scores); cudaFree(c.inv_freq);
    cudaFree(c.pos); cudaFree(c.sel); cudaFree(c.nsel);
}

/* top-k past the shared-memory key cache (and 1M context), random + ties */
static void check_topk_big(int nI) {
    idx_ctx c = {0};
    c.T = 1; c.icap = nI + 1;
    c.scores = dmalloc(sizeof(float) * (size_t)c.icap);
    c.pos = dmalloc(sizeof(int));
    c.sel = dmalloc(sizeof(int) * TOPK); c.nsel = dmalloc(sizeof(int));
    check_topk_kind(&c, nI, 0, "random");
    check_topk_kind(&c, nI, 1, "ties");
    cudaFree(c.scores); cudaFree(c.pos); cudaFree(c.sel); cudaFree(c.nsel);
}

/* ------------------------------------------------------------------ */
/* q head, kv finish + ring, compressor state                          */

typedef struct {
    int T, sims, f16, W;
    float *q, *kvp, *kvw, *kvb, *ring, *inv_freq;
    int *pos;
    int ring_store;
} qkv_ctx;
static void l_qhead(void *a) { qkv_ctx *c = a; cu_qhead_norm_rope(c->q, c->T, NH, HD, NROT, c->inv_freq, c->pos, 1e-6f, st); }
static void l_kv_old(void *a) {
    qkv_ctx *c = a;
    cu_kv_finish(c->kvp, c->kvw, c->T, HD, NROT, c->inv_freq, c->pos, 1e-6f, c->sims, c->f16, c->kvb, st);
    cu_raw_store(c->kvb, c->T, HD, c->W, c->pos, c->ring, st);
}
static void l_kv_new(void *a) {
    qkv_ctx *c = a;
    if (!cu_kv_finish_ring(c->kvp, c->kvw, c->T, HD, NROT, c->inv_freq, c->pos, 1e-6f, c->sims, c->f16, c->kvb, c->W, c->ring, st))
        cu_raw_store(c->kvb, c->T, HD, c->W, c->pos, c->ring, st);
}
static void l_kv_dispatch(void *a) { if (cu_dec_old(CU_OLD_KV_FINISH)) l_kv_old(a); else l_kv_new(a); }

static void check_qkv(int T) {
    qkv_ctx c = {0};
    c.T = T; c.W = WIN;
    size_t nq = (size_t)T * NH * HD;
    float *hq = malloc(sizeof(float) * nq), inv[NROT / 2], hkv[4 * HD], hw[HD];
    fill(hq, nq, 2.0f); fill(hkv, T * HD, 3.0f); fill(hw, HD, 1.0f);
    for (int k = 0; k < NROT / 2; k++) inv[k] = powf(10000.0f, -2.0f * k / NROT);
    c.q = dmalloc(sizeof(float) * nq);
    c.inv_freq = dup_to_dev(inv, sizeof inv);
    c.pos = dmalloc(sizeof(int));
    c.kvp = dup_to_dev(hkv, sizeof(float) * T * HD);
    c.kvw = dup_to_dev(hw, sizeof hw);
    c.kvb = dmalloc(sizeof(float) * T * HD);
    c.ring = dmalloc(sizeof(float) * WIN * HD);
    int pos = 4095 + 7;
    set_pos(c.pos, pos);
    char what[160];
    float *o1 = malloc(sizeof(float) * nq), *o2 = malloc(sizeof(float) * nq);
    int ok = run_old_new(CU_OLD_QHEAD, l_qhead, &c, c.q, hq, sizeof(float) * nq, o1, o2);
    snprintf(what, sizeof what, "qhead T=%d: bit-identical", T);
    report(ok, what);
    if (T == 1) time_pair("qhead T=1", CU_OLD_QHEAD, l_qhead, &c);
    /* kv finish: the row and the ring, old (finish + raw store) vs new */
    float *ring0 = malloc(sizeof(float) * WIN * HD), *r1 = malloc(sizeof(float) * WIN * HD), *r2 = malloc(sizeof(float) * WIN * HD);
    fill(ring0, WIN * HD, 1.0f);
    for (c.sims = 0; c.sims < 2; c.sims++)
        for (c.f16 = 0; c.f16 < 2; c.f16++) {
            float k1[4 * HD], k2[4 * HD];
            CK(cudaMemcpy(c.ring, ring0, sizeof(float) * WIN * HD, cudaMemcpyHostToDevice));
            cu_dec_old_set(CU_OLD_KV_FINISH);
            l_kv_old(&c); to_host(k1, c.kvb, sizeof(float) * T * HD); to_host(r1, c.ring, sizeof(float) * WIN * HD);
            cu_dec_old_set(0);
            for (int way = 0; way < 2; way++) {   /* new finish + raw store; new finish with the ring row */
                CK(cudaMemcpy(c.ring, ring0, sizeof(float) * WIN * HD, cudaMemcpyHostToDevice));
                CK(cudaMemset(c.kvb, 0, sizeof(float) * T * HD));
                if (way == 0) l_kv_old(&c); else l_kv_new(&c);
                to_host(k2, c.kvb, sizeof(float) * T * HD); to_host(r2, c.ring, sizeof(float) * WIN * HD);
                ok = !memcmp(k1, k2, sizeof(float) * T * HD) && !memcmp(r1, r2, sizeof(float) * WIN * HD);
                snprintf(what, sizeof what, "kv_finish%s sims=%d f16=%d T=%d: row and ring bit-identical",
                         way ? "_ring" : " + raw_store", c.sims, c.f16, T);
                report(ok, what);
            }
        }
    c.sims = 1; c.f16 = 0;
    if (T == 1) time_pair("kv_finish + raw_store T=1 (new: one launch)", CU_OLD_KV_FINISH, l_kv_dispatch, &c);
    free(hq); free(o1); free(o2); free(ring0); free(r1); free(r2);
    cudaFree(c.q); cudaFree(c.inv_freq); cudaFree(c.pos); cudaFree(c.kvp); cudaFree(c.kvw); cudaFree(c.kvb); cudaFree(c.ring);
}

typedef struct { int T, m, d; float *a, *s, *ape, *Skv, *Ssc; int *pos; } cs_ctx;
static void l_cstate(void *a) { cs_ctx *c = a; cu_comp_state(c->a, c->s, c->T, c->ape, 0, c->m, c->d, c->Skv, c->Ssc, c->pos, st); }

static void check_comp_state(int T, int m, int pos) {
    cs_ctx c = {0};
    c.T = T; c.m = m; c.d = HD;
    int Wd = (m == 4 ? 2 : 1) * HD, rows = m == 4 ? 8 : m;
    size_t na = (size_t)T * Wd, nS = (size_t)rows * Wd;
    float *ha = malloc(sizeof(float) * na), *hs = malloc(sizeof(float) * na), *hape = malloc(sizeof(float) * (size_t)m * Wd);
    float *hS = malloc(sizeof(float) * 2 * nS);
    fill(ha, na, 1.0f); fill(hs, na, 1.0f); fill(hape, (int64_t)m * Wd, 1.0f); fill(hS, 2 * nS, 1.0f);
    c.a = dup_to_dev(ha, sizeof(float) * na); c.s = dup_to_dev(hs, sizeof(float) * na);
    c.ape = dup_to_dev(hape, sizeof(float) * (size_t)m * Wd);
    c.Skv = dmalloc(sizeof(float) * 2 * nS); c.Ssc = c.Skv + nS;
    c.pos = dmalloc(sizeof(int));
    set_pos(c.pos, pos);
    float *o1 = malloc(sizeof(float) * 2 * nS), *o2 = malloc(sizeof(float) * 2 * nS);
    int ok = run_old_new(CU_OLD_COMP_STATE, l_cstate, &c, c.Skv, hS, sizeof(float) * 2 * nS, o1, o2);
    char what[160];
    snprintf(what, sizeof what, "comp_state m=%d pos=%d T=%d: bit-identical", m, pos, T);
    report(ok, what);
    if (T == 1 && m == 128 && pos % 128 == 5) time_pair("comp_state m=128 T=1", CU_OLD_COMP_STATE, l_cstate, &c);
    free(ha); free(hs); free(hape); free(hS); free(o1); free(o2);
    cudaFree(c.a); cudaFree(c.s); cudaFree(c.ape); cudaFree(c.Skv); cudaFree(c.pos);
}

/* ------------------------------------------------------------------ */
/* attention                                                           */

typedef struct {
    int T, ratio, nsplit, pos0;
    float *q, *kvb, *ring, *comp, *sinks, *inv_freq, *o, *part;
    int *sel, *nsel, *pos;
    void *comp8;        /* the compressed rows packed as FP8 (read when fmt is CU_KV_FP8) */
    int fmt;
    unsigned *amax;     /* o's amax asked of cu_attention (NULL: not) */
} att_ctx;
static void l_att(void *a) {
    att_ctx *c = a;
    cu_attention(c->q, c->kvb, c->ring, c->fmt == CU_KV_FP8 ? c->comp8 : c->comp, c->fmt, c->ratio == 4 ? c->sel : NULL,
                 c->nsel, TOPK, c->sinks, c->T, NH, HD, WIN, c->ratio, NROT, c->inv_freq, 1.0f / sqrtf((float)HD), c->pos,
                 c->pos0, -1.f, c->o, c->amax, c->part, c->nsplit, 1, NULL, st);
}

/* ---- compressed rows stored as FP8 (issue #6) ----
 * With the simulations on, a compressed row's first HD - NROT values are the
 * FP8 simulation's (blocks of 64) and its RoPE tail is f32: fp8_sim_rows
 * makes random rows such, fp8_rows_dev packs them in the cache's FP8 layout
 * (cu_ops.h: the codes, a scale byte per block, the tail at kv8_rope_off)
 * and uploads them (NULL and a FAIL line when a row does not pack). */
static void fp8_sim_rows(float *rows, int nrows) {
    /* some blocks scaled down first, so their FP8 scales 2^k reach every route
     * of the f16 unpack (kv8_load4_h): k in [-14, 15] (f16 products), in
     * [-24, -15] (f16 subnormal products) and below (the f32 route) */
    static const int shift[7] = {0, -10, -18, 0, -10, 0, -30};
    for (int r = 0; r < nrows; r++) {
        float *x = rows + (size_t)r * HD;
        for (int b = 0; b < (HD - NROT) / 64; b++)
            for (int i = 0; i < 64; i++) x[64 * b + i] = ldexpf(x[64 * b + i], shift[(r + b) % 7]);
        nm_fp8_sim(x, HD - NROT, NULL);
    }
}
static void *fp8_rows_dev(const float *rows, int nrows, const char *label) {
    const int nope = HD - NROT, stride = kv8_stride(HD, NROT);
    uint8_t *h = calloc((size_t)nrows, (size_t)stride);
    for (int r = 0; r < nrows; r++) {
        const float *x = rows + (size_t)r * HD;
        uint8_t *row = h + (size_t)r * stride;
        if (!nm_fp8_pack(x, nope, row, row + nope)) {
            char what[240];
            snprintf(what, sizeof what, "fp8 rows %s: row %d of %d does not pack as FP8 (not the simulation's values)",
                     label, r, nrows);
            report(0, what);
            free(h);
            return NULL;
        }
        memcpy(row + kv8_rope_off(HD, NROT), x + nope, sizeof(float) * NROT);
    }
    void *d = dup_to_dev(h, (size_t)nrows * stride);
    free(h);
    return d;
}
/* fn on ctx with *fmt CU_KV_F32, then CU_KV_FP8 (the n output floats at dout
 * NaN-filled before each run): an ok line when the two outputs are the same
 * bits and all finite (every output written) */
static void fp8_compare(const char *label, launch_fn fn, void *ctx, int *fmt, float *dout, size_t n) {
    float *o32 = malloc(sizeof(float) * n), *o8 = malloc(sizeof(float) * n);
    for (int k = 0; k < 2; k++) {
        *fmt = k ? CU_KV_FP8 : CU_KV_F32;
        CK(cudaMemset(dout, 0xff, sizeof(float) * n));
        fn(ctx); CK(cudaGetLastError());
        to_host(k ? o8 : o32, dout, sizeof(float) * n);
    }
    *fmt = CU_KV_F32;
    size_t ndiff = 0, nbad = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&o32[i], &o8[i], 4)) ndiff++;
        if (!isfinite(o8[i])) nbad++;
    }
    char what[300];
    snprintf(what, sizeof what, "%s: FP8 comp rows vs f32 rows bit-identical (%zu of %zu differ, %zu not finite)", label,
             ndiff, n, nbad);
    report(ndiff == 0 && nbad == 0, what);
    free(o32); free(o8);
}

/* double reference of one token's attention output (all heads) */
static void att_ref(const float *q, const float *kvb, const float *ring, const float *comp, const int *sel, int nsel,
                    const float *sinks, const float *inv, int ratio, int pos0, int t, double *out) {
    int qp = pos0 + t, nraw = qp + 1 < WIN ? qp + 1 : WIN;
    int ncomp = ratio == 4 ? nsel : ratio > 0 ? (qp + 1) / ratio : 0;
    int n = nraw + ncomp;
    const float **rows = malloc(sizeof(float *) * n);
    for (int i = 0; i < n; i++) {
        if (i < nraw) {
            int j = qp - nraw + 1 + i;
            rows[i] = j >= pos0 ? kvb + (size_t)(j - pos0) * HD : ring + (size_t)(j % WIN) * HD;
        } else {
            int cc = i - nraw;
            if (ratio == 4) cc = sel[cc];
            rows[i] = comp + (size_t)cc * HD;
        }
    }
    double *s = malloc(sizeof(double) * n);
    for (int h = 0; h < NH; h++) {
        const float *qv = q + ((size_t)t * NH + h) * HD;
        double M = sinks[h];
        for (int i = 0; i < n; i++) {
            double d = 0;
            for (int k = 0; k < HD; k++) d += (double)qv[k] * rows[i][k];
            s[i] = d * (1.0 / sqrt((double)HD));
            if (s[i] > M) M = s[i];
        }
        double den = exp(sinks[h] - M);
        double *o = out + (size_t)h * HD;
        for (int k = 0; k < HD; k++) o[k] = 0;
        for (int i = 0; i < n; i++) {
            double p = exp(s[i] - M);
            den += p;
            for (int k = 0; k < HD; k++) o[k] += p * rows[i][k];
        }
        for (int k = 0; k < HD; k++) o[k] /= den;
        for (int k = 0; k < NROT / 2; k++) {
            float ang = (float)qp * inv[k];
            double c = (float)cos((double)ang), sn = -(float)sin((double)ang);
            double x0 = o[HD - NROT + 2 * k], x1 = o[HD - NROT + 2 * k + 1];
            o[HD - NROT + 2 * k] = x0 * c - x1 * sn;
            o[HD - NROT + 2 * k + 1] = x0 * sn + x1 * c;
        }
    }
    free(rows); free(s);
}

/* the largest finite |v| as float bits (what the attention's o amax must equal) */
static unsigned amax_bits(const float *v, size_t n) {
    float m = 0.f;
    for (size_t i = 0; i < n; i++) if (fabsf(v[i]) <= 3.4028235e38f && fabsf(v[i]) > m) m = fabsf(v[i]);
    unsigned b;
    memcpy(&b, &m, 4);
    return b;
}

/* ---- tensor-core prefill attention: pipe 0 / 1 bit for bit, pipe 2 (wgmma) close ---- */
typedef struct {
    int T, nh, ratio, pos0;
    float *q, *kvb, *ring, *comp, *sinks, *inv_freq, *o;
    int *sel, *nsel, *pos;
    int pipe;           /* 0, 1: cu_attention_tc under MINKE_CUDA_ATT_TC_PIPE; 2: cu_attention_wg itself */
    float qeps;         /* pipe 2's q norm (-1: q is ready; the timing of the fused norm sets it) */
    unsigned *amax;     /* pipe 2's o amax (NULL: not asked) */
} tc_ctx;
static int tc_refused;
static void l_tc(void *a) {
    tc_ctx *c = a;
    const float scale = 1.0f / sqrtf((float)HD);
    int ran = c->pipe == 2
        ? cu_attention_wg(c->q, c->kvb, c->ring, c->comp, c->ratio == 4 ? c->sel : NULL, c->nsel, TOPK, c->sinks, c->T,
                          c->nh, HD, WIN, c->ratio, NROT, c->inv_freq, scale, c->pos, c->pos0, c->qeps, c->o, c->amax, st)
        : cu_attention_tc(c->q, c->kvb, c->ring, c->comp, c->ratio == 4 ? c->sel : NULL, c->nsel, TOPK, c->sinks, c->T,
                          c->nh, HD, WIN, c->ratio, NROT, c->inv_freq, scale, c->pos, c->pos0, -1.f, c->o, NULL, st);
    if (!ran) tc_refused = 1;
}
static void tc_pipe_set(tc_ctx *c, int v) {
    char b[16];
    snprintf(b, sizeof b, "%d", v);
    setenv("MINKE_CUDA_ATT_TC_PIPE", b, 1);     /* the launcher reads it at each call */
    c->pipe = v;
}
/* runs pipes 0, 1 and 2 on c; out0 gets pipe 0's output (T x nh x HD floats);
 * an ok line for 1 == 0 bit for bit and for 2 close to 0 (the wgmma kernel
 * sums in other orders; a skip line where it does not run: not sm_90a); with
 * ref (the tokens toks[0..ntok) of a double reference, NH heads) also pipe 0's
 * and 2's errors; with tflop > 0 a time line (pipe 1, the previous default,
 * against 2) */
static void tc_compare(tc_ctx *c, const char *label, float *out0, const double *ref, const int *toks, int ntok,
                       double tflop) {
    size_t no = (size_t)c->T * c->nh * HD;
    float *o1 = malloc(sizeof(float) * no);
    char what[240];
    int wg_ran = 0;
    for (int pipe = 0; pipe <= 2; pipe++) {
        tc_refused = 0;
        tc_pipe_set(c, pipe);
        CK(cudaMemset(c->o, 0xff, sizeof(float) * no));      /* NaN: every output must be written */
        l_tc(c); CK(cudaGetLastError());
        to_host(pipe ? o1 : out0, c->o, sizeof(float) * no);
        if (tc_refused && pipe == 2) {
            /* on an sm_90 device the wgmma kernel must run (the build carries sm_90a code) */
            int major = 0;
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
            tc_refused = 0;
            if (major == 9) { snprintf(what, sizeof what, "attention_wg %s: refused on an sm_90 device (no sm_90a code?)", label); report(0, what); }
            else printf("skip attention_wg %s: not an sm_90 device\n", label);
            break;
        }
        if (tc_refused) { snprintf(what, sizeof what, "attention_tc %s: the launcher refused hd %d", label, HD); report(0, what); break; }
        const float *ob = pipe ? o1 : out0;
        if ((pipe == 0 || pipe == 2) && ref) {
            double md = 0, rmax = 0;
            for (int k = 0; k < ntok; k++)
                for (size_t i = 0; i < (size_t)NH * HD; i++) {
                    double r = ref[(size_t)k * NH * HD + i], d = fabs(ob[(size_t)toks[k] * NH * HD + i] - r);
                    if (fabs(r) > rmax) rmax = fabs(r);
                    if (!(d <= md)) md = d;
                }
            snprintf(what, sizeof what, "attention_tc %s pipe=%d: max|o-ref|/max|ref| %.2e over %d token(s) (f16 q/k/p)",
                     label, pipe, md / rmax, ntok);
            report(md / rmax < 1e-2, what);
        }
        if (pipe == 1) {
            size_t ndiff = 0;
            for (size_t i = 0; i < no; i++) if (memcmp(&o1[i], &out0[i], 4)) ndiff++;
            snprintf(what, sizeof what, "attention_tc %s pipe=1 (cp.async, S 16x16) vs pipe=0: bit-identical (%zu of %zu differ)",
                     label, ndiff, no);
            report(ndiff == 0, what);
        }
        if (pipe == 2) {
            /* o's amax found as the kernel stores o: the largest finite |o|, bit for bit */
            unsigned *da = dmalloc(4), got = 0;
            CK(cudaMemset(da, 0, 4));
            c->amax = da;
            l_tc(c); CK(cudaGetLastError());
            c->amax = NULL;
            to_host(&got, da, 4);
            cudaFree(da);
            const unsigned hb = amax_bits(o1, no);
            float hmax;
            memcpy(&hmax, &hb, 4);
            snprintf(what, sizeof what, "attention_wg %s o amax from the kernel %.6g, from o %.6g (bits equal: %d)", label,
                     (double)*(float *)&got, (double)hmax, got == hb);
            report(got == hb, what);
            double md = 0, mx = 0;
            int finite = 1;
            for (size_t i = 0; i < no; i++) {
                if (!isfinite(o1[i])) finite = 0;
                double d = fabs((double)o1[i] - out0[i]);
                if (!(d <= md)) md = d;
                if (fabs(out0[i]) > mx) mx = fabs(out0[i]);
            }
            snprintf(what, sizeof what, "attention_wg %s pipe=2 (wgmma) vs pipe=0: max|diff|/max|o| %.2e, all finite %d",
                     label, mx > 0 ? md / mx : md, finite);
            report(finite && md <= 2e-3 * mx, what);
            wg_ran = 1;
        }
    }
    if (tflop > 0 && !tc_refused) {
        float med[3], mean[3];
        for (int k = 0; k < 1 + wg_ran; k++) { tc_pipe_set(c, 1 + k); time_one(label, l_tc, c, &med[k], &mean[k]); }
        if (wg_ran) {
            c->qeps = 1e-6f;      /* q read as raw: normed as it is staged (q is left as it is) */
            time_one(label, l_tc, c, &med[2], &mean[2]);
            c->qeps = -1.f;
            printf("time attention_tc %s: mma.sync (pipe 1) %.1f us, wgmma (pipe 2) %.1f us, with the q norm %.1f us; "
                   "b2b %.1f / %.1f; x%.2f; %.0f TFLOP/s\n", label, med[0], med[1], med[2], mean[0], mean[1],
                   med[0] / med[1], tflop / (med[1] * 1e-6));
        }
        else
            printf("time attention_tc %s: mma.sync (pipe 1) %.1f us (b2b %.1f); %.0f TFLOP/s\n", label, med[0], mean[0],
                   tflop / (med[0] * 1e-6));
    }
    unsetenv("MINKE_CUDA_ATT_TC_PIPE");
    free(o1);
}
/* q's per-head norm and RoPE (qeps >= 0): inside the wgmma kernel as it stages q
 * (close to the norm kernel's output fed to it: another summation order), and in
 * place before the mma.sync kernel (bit for bit the two launches); c->q is read
 * as q_b's raw output and left as it was */
static void tc_qnorm(tc_ctx *c, const char *label) {
    const size_t nq = (size_t)c->T * c->nh * HD, nb = sizeof(float) * nq;
    const float eps = 1e-6f, scale = 1.0f / sqrtf((float)HD);
    float *qn = dmalloc(nb), *qr = dmalloc(nb), *oa = malloc(nb), *ob = malloc(nb);
    char what[240];
    CK(cudaMemcpy(qn, c->q, nb, cudaMemcpyDeviceToDevice));
    cu_qhead_norm_rope(qn, c->T, c->nh, HD, NROT, c->inv_freq, c->pos, eps, st);
    for (int pipe = 1; pipe <= 2; pipe++) {
        CK(cudaMemcpy(qr, c->q, nb, cudaMemcpyDeviceToDevice));
        tc_pipe_set(c, pipe);
        int ran_a, ran_b;
        if (pipe == 2) {
            ran_a = cu_attention_wg(qn, c->kvb, c->ring, c->comp, c->ratio == 4 ? c->sel : NULL, c->nsel, TOPK, c->sinks,
                                    c->T, c->nh, HD, WIN, c->ratio, NROT, c->inv_freq, scale, c->pos, c->pos0, -1.f, c->o, NULL, st);
            to_host(oa, c->o, nb);
            ran_b = cu_attention_wg(qr, c->kvb, c->ring, c->comp, c->ratio == 4 ? c->sel : NULL, c->nsel, TOPK, c->sinks,
                                    c->T, c->nh, HD, WIN, c->ratio, NROT, c->inv_freq, scale, c->pos, c->pos0, eps, c->o, NULL, st);
        } else {
            ran_a = cu_attention_tc(qn, c->kvb, c->ring, c->comp, c->ratio == 4 ? c->sel : NULL, c->nsel, TOPK, c->sinks,
                                    c->T, c->nh, HD, WIN, c->ratio, NROT, c->inv_freq, scale, c->pos, c->pos0, -1.f, c->o, NULL, st);
            to_host(oa, c->o, nb);
            ran_b = cu_attention_tc(qr, c->kvb, c->ring, c->comp, c->ratio == 4 ? c->sel : NULL, c->nsel, TOPK, c->sinks,
                                    c->T, c->nh, HD, WIN, c->ratio, NROT, c->inv_freq, scale, c->pos, c->pos0, eps, c->o, NULL, st);
        }
        CK(cudaGetLastError());
        to_host(ob, c->o, nb);
        if (!ran_a || !ran_b) { printf("skip q norm fused %s pipe=%d: the kernel does not run here\n", label, pipe); continue; }
        double md = 0, mx = 0;
        size_t ndiff = 0;
        for (size_t i = 0; i < nq; i++) {
            double d = fabs((double)ob[i] - oa[i]);
            if (!(d <= md)) md = d;
            if (fabs(oa[i]) > mx) mx = fabs(oa[i]);
            if (memcmp(&oa[i], &ob[i], 4)) ndiff++;
        }
        if (pipe == 2) {
            snprintf(what, sizeof what, "attention_wg %s q norm + RoPE fused vs the norm kernel first: max|diff|/max|o| %.2e",
                     label, mx > 0 ? md / mx : md);
            report(md <= 2e-3 * mx, what);
        } else {
            snprintf(what, sizeof what, "attention_tc %s pipe=1 q norm + RoPE by qeps vs the norm kernel first: %zu of %zu differ",
                     label, ndiff, nq);
            report(ndiff == 0, what);
        }
    }
    unsetenv("MINKE_CUDA_ATT_TC_PIPE");
    cudaFree(qn); cudaFree(qr); free(oa); free(ob);
}
/* a batch of T tokens from pos0 with nh heads: random q / rows, ratio 4
 * selections (ascending, distinct, min(nI, 512) of nI = (pos+1)/4), then
 * tc_compare (the reference on 3 tokens when nh == NH) */
static void check_attention_tc(int T, int nh, int ratio, int pos0, int timed) {
    tc_ctx c = {0};
    c.T = T; c.nh = nh; c.ratio = ratio; c.pos0 = pos0; c.qeps = -1.f;
    int ncap = ratio ? (pos0 + T) / (ratio == 4 ? 4 : ratio) + 8 : 8;
    size_t nq = (size_t)T * nh * HD;
    float *hq = malloc(sizeof(float) * nq), *hkvb = malloc(sizeof(float) * (size_t)T * HD);
    float *hring = malloc(sizeof(float) * WIN * HD), *hcomp = malloc(sizeof(float) * (size_t)ncap * HD);
    float hs[NH], inv[NROT / 2];
    fill(hq, nq, 3.0f); fill(hkvb, (int64_t)T * HD, 1.0f); fill(hring, WIN * HD, 1.0f); fill(hcomp, (int64_t)ncap * HD, 1.0f);
    fp8_sim_rows(hcomp, ncap);
    fill(hs, NH, 2.0f);
    for (int k = 0; k < NROT / 2; k++) inv[k] = powf(160000.0f, -2.0f * k / NROT);
    int *hsel = malloc(sizeof(int) * TOPK * (size_t)T), *hnsel = malloc(sizeof(int) * T);
    double tflop = 0;
    for (int t = 0; t < T; t++) {
        int qp = pos0 + t, nI = (qp + 1) / 4, take = nI < TOPK ? nI : TOPK, got = 0;
        for (int i = 0; ratio == 4 && i < nI && got < take; i++)
            if ((frand() * 0.5f + 0.5f) * (nI - i) < take - got) hsel[(size_t)t * TOPK + got++] = i;
        hnsel[t] = got;
        int n = (qp + 1 < WIN ? qp + 1 : WIN) + (ratio == 4 ? got : ratio ? (qp + 1) / ratio : 0);
        tflop += (double)nh * n * HD * 4;
    }
    c.q = dup_to_dev(hq, sizeof(float) * nq); c.kvb = dup_to_dev(hkvb, sizeof(float) * (size_t)T * HD);
    c.ring = dup_to_dev(hring, sizeof(float) * WIN * HD); c.comp = dup_to_dev(hcomp, sizeof(float) * (size_t)ncap * HD);
    c.sinks = dup_to_dev(hs, sizeof hs); c.inv_freq = dup_to_dev(inv, sizeof inv);
    c.sel = dup_to_dev(hsel, sizeof(int) * TOPK * (size_t)T); c.nsel = dup_to_dev(hnsel, sizeof(int) * T);
    c.pos = dmalloc(sizeof(int)); set_pos(c.pos, pos0);
    c.o = dmalloc(sizeof(float) * nq);
    int toks[3] = {0, T / 2, T - 1}, ntok = nh == NH ? (T >= 3 ? 3 : T) : 0;
    if (T < 3) for (int k = 0; k < ntok; k++) toks[k] = k;
    double *ref = ntok ? malloc(sizeof(double) * (size_t)ntok * NH * HD) : NULL;
    for (int k = 0; k < ntok; k++)
        att_ref(hq, hkvb, hring, hcomp, hsel + (size_t)toks[k] * TOPK, hnsel[toks[k]], hs, inv, ratio, pos0, toks[k],
                ref + (size_t)k * NH * HD);
    char label[160];
    snprintf(label, sizeof label, "T=%d nh=%d ratio=%d pos0=%d rows<=%d+%d", T, nh, ratio, pos0, WIN,
             ratio == 4 ? TOPK : ratio ? (pos0 + T) / ratio : 0);
    float *o0 = malloc(sizeof(float) * nq);
    tc_compare(&c, label, o0, ref, toks, ntok, timed ? tflop * 1e-12 : 0);
    if (!timed || pos0 > 0) tc_qnorm(&c, label);
    free(hq); free(hkvb); free(hring); free(hcomp); free(hsel); free(hnsel); free(ref); free(o0);
    cudaFree(c.q); cudaFree(c.kvb); cudaFree(c.ring); cudaFree(c.comp); cudaFree(c.sinks); cudaFree(c.inv_freq);
    cudaFree(c.sel); cudaFree(c.nsel); cudaFree(c.pos); cudaFree(c.o);
}

static void check_attention(int T, int ratio, int ncomp_rows) {
    att_ctx c = {0};
    c.T = T; c.ratio = ratio;
    /* decode position: ratio 4 uses rows 0..ncomp_rows-1 through 512 selected, ratio 128 (pos+1)/128 rows */
    c.pos0 = ratio == 128 ? 128 * ncomp_rows - 1 : ratio == 4 ? 4 * ncomp_rows - 1 : 4095;
    int ncap = ncomp_rows + 8;
    size_t nq = (size_t)T * NH * HD;
    float *hq = malloc(sizeof(float) * nq), *hkvb = malloc(sizeof(float) * T * HD), *hring = malloc(sizeof(float) * WIN * HD);
    float *hcomp = malloc(sizeof(float) * (size_t)ncap * HD), hs[NH], inv[NROT / 2];
    fill(hq, nq, 3.0f); fill(hkvb, T * HD, 1.0f); fill(hring, WIN * HD, 1.0f); fill(hcomp, (int64_t)ncap * HD, 1.0f); fill(hs, NH, 2.0f);
    fp8_sim_rows(hcomp, ncap);
    for (int k = 0; k < NROT / 2; k++) inv[k] = powf(160000.0f, -2.0f * k / NROT);
    int *hsel = malloc(sizeof(int) * TOPK * T), hnsel[2];
    for (int t = 0; t < T; t++) {
        /* TOPK distinct ascending rows out of the nI = (pos+1)/4 available */
        int nI = (c.pos0 + t + 1) / 4;
        int take = nI < TOPK ? nI : TOPK;
        hnsel[t] = take;
        int got = 0;
        for (int i = 0; i < nI && got < take; i++)     /* selection sampling: ascending, distinct */
            if ((frand() * 0.5f + 0.5f) * (nI - i) < take - got) hsel[t * TOPK + got++] = i;
        hnsel[t] = got;
    }
    c.q = dup_to_dev(hq, sizeof(float) * nq); c.kvb = dup_to_dev(hkvb, sizeof(float) * T * HD);
    c.ring = dup_to_dev(hring, sizeof(float) * WIN * HD); c.comp = dup_to_dev(hcomp, sizeof(float) * (size_t)ncap * HD);
    c.sinks = dup_to_dev(hs, sizeof hs); c.inv_freq = dup_to_dev(inv, sizeof inv);
    c.sel = dup_to_dev(hsel, sizeof(int) * TOPK * T); c.nsel = dup_to_dev(hnsel, sizeof(int) * T);
    c.pos = dmalloc(sizeof(int)); set_pos(c.pos, c.pos0);
    c.o = dmalloc(sizeof(float) * nq);
    c.part = dmalloc(sizeof(float) * (size_t)cu_attention_part_floats(4, NH, HD, 64));
    double *ref = malloc(sizeof(double) * nq);
    double rmax = 0;
    for (int t = 0; t < T; t++)
        att_ref(hq, hkvb, hring, hcomp, hsel + t * TOPK, hnsel[t], hs, inv, ratio, c.pos0, t, ref + (size_t)t * NH * HD);
    for (size_t i = 0; i < nq; i++) if (fabs(ref[i]) > rmax) rmax = fabs(ref[i]);
    float *o = malloc(sizeof(float) * nq), *oold = malloc(sizeof(float) * nq);
    char what[200];
    int nraw = WIN, ncomp = ratio == 4 ? hnsel[0] : ratio ? (c.pos0 + 1) / ratio : 0;
    static const int splits[] = {8, 16, 32, 64};
    for (int vi = -1; vi < 4; vi++) {
        c.nsplit = vi < 0 ? 8 : splits[vi];
        cu_dec_old_set(vi < 0 ? CU_OLD_ATTENTION : 0);
        CK(cudaMemset(c.o, 0, sizeof(float) * nq));
        l_att(&c); CK(cudaGetLastError());
        to_host(o, c.o, sizeof(float) * nq);
        double md = 0, mdo = 0;
        for (size_t i = 0; i < nq; i++) {
            double d = fabs(o[i] - ref[i]);
            if (!(d <= md)) md = d;
        }
        if (vi < 0) memcpy(oold, o, sizeof(float) * nq);
        else for (size_t i = 0; i < nq; i++) { double d = fabs(o[i] - oold[i]); if (!(d <= mdo)) mdo = d; }
        snprintf(what, sizeof what, "attention %s nsplit=%d ratio=%d rows=%d+%d T=%d: max|o-ref|/max|ref| %.2e%s",
                 vi < 0 ? "old" : "new", c.nsplit, ratio, nraw, ncomp, T, md / rmax, "");
        if (vi >= 0) {
            char extra[64]; snprintf(extra, sizeof extra, " (vs old %.2e)", mdo / rmax);
            strncat(what, extra, sizeof what - strlen(what) - 1);
        }
        report(md / rmax < 2e-5, what);
    }
    {   /* o's amax by cu_attention after the split kernels: the largest finite |o|, bit for bit */
        unsigned *da = dmalloc(4), got = 0;
        CK(cudaMemset(da, 0xff, 4));      /* cu_attention zeroes it first */
        c.amax = da; c.nsplit = 16;
        l_att(&c); CK(cudaGetLastError());
        c.amax = NULL;
        to_host(&got, da, 4);
        to_host(o, c.o, sizeof(float) * nq);
        cudaFree(da);
        const unsigned hb = amax_bits(o, nq);
        snprintf(what, sizeof what, "attention o amax ratio=%d T=%d nsplit=16: from cu_attention == from o (%d)", ratio, T, got == hb);
        report(got == hb, what);
    }
    {   /* o also stored as split items by the combine (cu_attention's o_items): out_a's
         * product over token 0's o from them gives the bits it gives splitting o itself
         * (the dp4a kernel, 8 groups of 64 rows, each over 8 heads' 4096 inputs) */
        const int64_t in = (int64_t)NH * HD / 8, rows = 8 * 64;
        const uint64_t rb = quant_row_bytes(GGML_TYPE_Q8_0, in);
        int *items = dmalloc(cu_gemv3_items_bytes((int64_t)T * NH * HD));
        void *w = dmalloc(rb * rows);
        float *ya = dmalloc(rows * 4), *yb = dmalloc(rows * 4);
        cu_synth_fill(w, GGML_TYPE_Q8_0, rows * in, 77 + T, 0.05f, 0, 0);
        int stored = 0, bad = 0;
        if (cu_repack_q8_0(w, rows, in, rb, st)) {
            c.nsplit = 16;
            stored = cu_attention(c.q, c.kvb, c.ring, c.comp, CU_KV_F32, ratio == 4 ? c.sel : NULL, c.nsel, TOPK, c.sinks, T,
                                  NH, HD, WIN, ratio, NROT, c.inv_freq, 1.0f / sqrtf((float)HD), c.pos, c.pos0, -1.f, c.o,
                                  NULL, c.part, 16, 1, items, st);
            cu_gemv3_set(3);
            cu_gemv3s_set(0);
            for (int k = 0; k < 2; k++) {
                cu_gemv_args g;
                memset(&g, 0, sizeof g);
                g.w = w; g.wtype = 108; g.rows = rows; g.in = in; g.row_bytes = rb; g.act = c.o; g.act_f32 = 1;
                g.act_stride = in * 4; g.act_div = 1; g.out = k ? yb : ya; g.out_stride = rows; g.ntok = 1; g.nt_hint = 1;
                g.group_rows = 64; g.group_act_bytes = in * 4;
                g.xitems = k ? items : NULL;
                cu_gemv(&g, 1, st);
            }
            cu_gemv3_set(-1);
            cu_gemv3s_set(-1);
            float *ha = malloc(rows * 4), *hb = malloc(rows * 4);
            to_host(ha, ya, rows * 4); to_host(hb, yb, rows * 4);
            for (int64_t r = 0; r < rows; r++) bad += memcmp(&ha[r], &hb[r], 4) != 0 || ha[r] == 0.f;
            /* a negative control: group 0's first item with its scale zeroed must change group 0's rows */
            CK(cudaMemset(items + 24, 0, 4));
            {
                cu_gemv_args g;
                memset(&g, 0, sizeof g);
                g.w = w; g.wtype = 108; g.rows = rows; g.in = in; g.row_bytes = rb; g.act = c.o; g.act_f32 = 1;
                g.act_stride = in * 4; g.act_div = 1; g.out = yb; g.out_stride = rows; g.ntok = 1; g.nt_hint = 1;
                g.group_rows = 64; g.group_act_bytes = in * 4; g.xitems = items;
                cu_gemv3_set(3);
                cu_gemv3s_set(0);
                cu_gemv(&g, 1, st);
                cu_gemv3_set(-1);
                cu_gemv3s_set(-1);
            }
            to_host(hb, yb, rows * 4);
            int changed = 0;
            for (int64_t r = 0; r < 64; r++) changed += memcmp(&ha[r], &hb[r], 4) != 0;
            bad += changed < 32;
            free(ha); free(hb);
        }
        snprintf(what, sizeof what, "attention o items ratio=%d T=%d: stored %d, out_a from them: %d of %d outputs differ or 0",
                 ratio, T, stored, bad, (int)rows);
        report(stored == 1 && bad == 0, what);
        cudaFree(items); cudaFree(w); cudaFree(ya); cudaFree(yb);
    }
    if (T == 1)
        for (int vi = 0; vi < 4; vi++) {
            c.nsplit = splits[vi];
            snprintf(what, sizeof what, "attention+combine ratio=%d rows=%d+%d nsplit=%d", ratio, nraw, ncomp, c.nsplit);
            if (!do_time) break;
            float mo, ao, mn, an;
            int ns = c.nsplit;
            c.nsplit = 8; cu_dec_old_set(CU_OLD_ATTENTION); time_one(what, l_att, &c, &mo, &ao);
            c.nsplit = ns; cu_dec_old_set(0); time_one(what, l_att, &c, &mn, &an);
            printf("time %-44s old(8) %7.2f us (b2b %7.2f)  new %7.2f us (b2b %7.2f)  x%.2f\n", what, mo, ao, mn, an, mo / mn);
        }
    char label[96];
    snprintf(label, sizeof label, "T=%d ratio=%d rows=%d+%d", T, ratio, nraw, ncomp);
    c.comp8 = fp8_rows_dev(hcomp, ncap, label);
    {   /* the tensor-core kernel, forced, on the same inputs */
        tc_ctx tc = {T, NH, ratio, c.pos0, c.q, c.kvb, c.ring, c.comp, c.sinks, c.inv_freq, c.o, c.sel, c.nsel, c.pos, 0, -1.f, NULL};
        int toks[2] = {0, 1};
        tc_compare(&tc, label, o, ref, toks, T, 0);
    }
    /* every other path on the FP8 rows: split decode (k_attn_dec; at T = 1
     * on an H200 the 64-split case stages chunks that hold both window and
     * compressed rows), the previous kernel (k_attention + combine) */
    static const struct { int old, nsplit; const char *what; } fp8_cases[] = {
        {0, 8, "k_attn_dec"}, {0, 64, "k_attn_dec"}, {1, 8, "k_attention"}};
    for (int k = 0; c.comp8 && k < (int)(sizeof fp8_cases / sizeof fp8_cases[0]); k++) {
        cu_dec_old_set(fp8_cases[k].old ? CU_OLD_ATTENTION : 0);
        c.nsplit = fp8_cases[k].nsplit;
        snprintf(what, sizeof what, "attention %s nsplit=%d %s", fp8_cases[k].what, c.nsplit, label);
        fp8_compare(what, l_att, &c, &c.fmt, c.o, nq);
    }
    cu_dec_old_set(0);
    free(hq); free(hkvb); free(hring); free(hcomp); free(hsel); free(ref); free(o); free(oold);
    cudaFree(c.q); cudaFree(c.kvb); cudaFree(c.ring); cudaFree(c.comp); cudaFree(c.sinks); cudaFree(c.inv_freq);
    cudaFree(c.sel); cudaFree(c.nsel); cudaFree(c.pos); cudaFree(c.o); cudaFree(c.part); cudaFree(c.comp8);
}

/* Other shapes of the split decode (window rows only, ratio 0), against a
 * double reference: heads not a multiple of 8 (the last block's padded
 * warps), hd 128 / 256, 3 and 4 tokens, and positions whose splits hold 1-4
 * rows (a row group with no rows). `attn_check --shapes` runs only these;
 * run-cuda.sh runs it with MINKE_CUDA_ATT_HPB=8 MINKE_CUDA_ATT_MIN_ROWS=1
 * (8 heads a block, a split per row), with one and two row groups. */
static void check_attention_shape(int nh, int hd, int T, int pos0) {
    const int nrot = 64, W = WIN;
    const size_t nq = (size_t)T * nh * hd;
    float *hq = malloc(sizeof(float) * nq), *hkvb = malloc(sizeof(float) * T * hd), *hring = malloc(sizeof(float) * W * hd);
    float *hs = malloc(sizeof(float) * nh), inv[32], *o = malloc(sizeof(float) * nq);
    fill(hq, nq, 3.0f); fill(hkvb, (int64_t)T * hd, 1.0f); fill(hring, (int64_t)W * hd, 1.0f); fill(hs, nh, 2.0f);
    for (int k = 0; k < nrot / 2; k++) inv[k] = powf(160000.0f, -2.0f * k / nrot);
    float *dq = dup_to_dev(hq, sizeof(float) * nq), *dkvb = dup_to_dev(hkvb, sizeof(float) * T * hd);
    float *dring = dup_to_dev(hring, sizeof(float) * W * hd), *ds = dup_to_dev(hs, sizeof(float) * nh);
    float *dinv = dup_to_dev(inv, sizeof inv), *dout = dmalloc(sizeof(float) * nq);
    float *dpart = dmalloc(sizeof(float) * (size_t)cu_attention_part_floats(T, nh, hd, 16));
    int *dpos = dmalloc(sizeof(int));
    set_pos(dpos, pos0);
    CK(cudaMemset(dout, 0xff, sizeof(float) * nq));
    cu_attention(dq, dkvb, dring, NULL, CU_KV_F32, NULL, NULL, TOPK, ds, T, nh, hd, W, 0, nrot, dinv,
                 1.0f / sqrtf((float)hd), dpos, pos0, -1.f, dout, NULL, dpart, 16, 1, NULL, st);
    CK(cudaGetLastError());
    to_host(o, dout, sizeof(float) * nq);
    double md = 0, rmax = 0;
    double *ref = malloc(sizeof(double) * hd), *sc = malloc(sizeof(double) * (W + T));
    for (int t = 0; t < T; t++) {
        const int qp = pos0 + t, nraw = qp + 1 < W ? qp + 1 : W;
        for (int h = 0; h < nh; h++) {
            const float *qv = hq + ((size_t)t * nh + h) * hd;
            double M = hs[h];
            for (int i = 0; i < nraw; i++) {
                const int j = qp - nraw + 1 + i;
                const float *r = j >= pos0 ? hkvb + (size_t)(j - pos0) * hd : hring + (size_t)(j % W) * hd;
                double d = 0;
                for (int k = 0; k < hd; k++) d += (double)qv[k] * r[k];
                sc[i] = d / sqrt((double)hd);
                if (sc[i] > M) M = sc[i];
            }
            double den = exp(hs[h] - M);
            for (int k = 0; k < hd; k++) ref[k] = 0;
            for (int i = 0; i < nraw; i++) {
                const int j = qp - nraw + 1 + i;
                const float *r = j >= pos0 ? hkvb + (size_t)(j - pos0) * hd : hring + (size_t)(j % W) * hd;
                const double p = exp(sc[i] - M);
                den += p;
                for (int k = 0; k < hd; k++) ref[k] += p * r[k];
            }
            for (int k = 0; k < hd; k++) ref[k] /= den;
            for (int k = 0; k < nrot / 2; k++) {
                const float ang = (float)qp * inv[k];
                const double c = (float)cos((double)ang), sn = -(float)sin((double)ang);
                const double x0 = ref[hd - nrot + 2 * k], x1 = ref[hd - nrot + 2 * k + 1];
                ref[hd - nrot + 2 * k] = x0 * c - x1 * sn;
                ref[hd - nrot + 2 * k + 1] = x0 * sn + x1 * c;
            }
            for (int k = 0; k < hd; k++) {
                const double d = fabs(o[((size_t)t * nh + h) * hd + k] - ref[k]);
                if (!(d <= md)) md = d;
                if (fabs(ref[k]) > rmax) rmax = fabs(ref[k]);
            }
        }
    }
    char what[160];
    snprintf(what, sizeof what, "attention shape nh=%d hd=%d T=%d pos0=%d (window rows only): max|o-ref|/max|ref| %.2e", nh,
             hd, T, pos0, md / rmax);
    report(md / rmax < 2e-5, what);
    free(hq); free(hkvb); free(hring); free(hs); free(o); free(ref); free(sc);
    cudaFree(dq); cudaFree(dkvb); cudaFree(dring); cudaFree(ds); cudaFree(dinv); cudaFree(dout); cudaFree(dpart);
    cudaFree(dpos);
}

int main(int argc, char **argv) {
    int shapes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--time")) do_time = 1;
        else if (!strcmp(argv[i], "--shapes")) shapes = 1;
        else { fprintf(stderr, "usage: attn_check [--time | --shapes]\n"); return 2; }
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) { printf("FAIL no CUDA device\n"); return 1; }
    cu_ops_init();
    CK(cudaStreamCreate(&st));     /* blocking: ordered with the cudaMemcpy / cudaMemset of the checks */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (shapes) {
        static const int cases[][4] = {{12, 128, 1, 0}, {12, 128, 1, 3}, {12, 128, 3, 2}, {16, 256, 4, 5},
                                       {8, 128, 1, 200}, {20, 384, 2, 130}, {64, 512, 1, 4}, {64, 512, 4, 300}};
        for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++)
            check_attention_shape(cases[k][0], cases[k][1], cases[k][2], cases[k][3]);
        CK(cudaDeviceSynchronize());
        printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
        return fails ? 1 : 0;
    }
    for (int T = 1; T <= 2; T++) {
        check_indexer(T, 1024);
        check_indexer(T, 16384);
        check_qkv(T);
        check_comp_state(T, 128, 4095);
        check_comp_state(T, 128, 4096 + 5);
        check_comp_state(T, 128, 4096 + 126);
        check_comp_state(T, 4, 4096 + 2);
        check_attention(T, 4, 1024);
        check_attention(T, 4, 16384);
        check_attention(T, 128, 32);
        check_attention(T, 128, 512);
        check_attention(T, 0, 0);
    }
    /* the tensor-core prefill kernel: 40 heads (warps of heads 48-63 idle), then Flash size, timed */
    check_attention_tc(64, 40, 4, 1000, 0);
    check_attention_tc(300, NH, 128, 200, 0);
    check_attention_tc(4096, NH, 4, 0, 1);
    check_attention_tc(4096, NH, 4, 4096, 1);
    check_attention_tc(4096, NH, 128, 0, 1);
    check_topk_big(40000);
    check_topk_big(262144);
    CK(cudaDeviceSynchronize());
    printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
    return fails ? 1 : 0;
}
