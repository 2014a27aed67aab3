/* gemv_check.c: the CUDA matrix-vector kernels against src/quant on random
 * data, for every weight type the backend supports: activation quantization
 * must match the CPU byte for byte, and y = W x within float rounding
 * (relative 1e-5 of max|y|). Also times a Flash-sized row set per type.
 * The exact-activation GEMV (act_f32) is checked against a double reference
 * (3e-6 of max|y|) in every T = 1 pipeline variant (MINKE_CUDA_GEMVF_V), and
 * --time prints the decode shapes of Flash per variant: the median of 20
 * launches and the mean of 43 back-to-back launches in one CUDA graph.
 * The tensor-core Q8_0 decode GEMV (cu_gemvq8.cu, MINKE_CUDA_Q8MMA) and the
 * dense dp4a one (cu_gemv3.cu, MINKE_CUDA_G3=3: every shape) are checked and
 * timed beside them.
 * The one-row GEMV of plain-float weights (cu_gemvh.cu) is checked against a
 * double reference in each launch schedule (bit-identical to each other), and
 * --time compares it with the generic kernel on the F16 decode shapes of Flash.
 * Run on a GPU machine (tests/run-cuda.sh).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "quant/quant.h"
#include "cuda/cu_ops.h"
#include "cuda/cu_gemvh.h"
#include "cuda/cu_gemvq8.h"
#include "cuda/cu_gemv3.h"

/* cu_gemv.cu: the T = 1 pipeline variant of the exact-activation GEMV (MINKE_CUDA_GEMVF_V) */
void cu_gemvf_set_variant(int v);

static uint64_t rng = 88172645463325252ull;
static float frand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL cuda %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)


static int check_type(int type, int64_t rows, int64_t in, int T, int timing) {
    const quant_traits *tr = quant_get(type);
    uint64_t rb = quant_row_bytes(type, in);
    float *wf = malloc(sizeof(float) * in), *x = malloc(sizeof(float) * T * in);
    uint8_t *W = malloc(rb * rows);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < in; i++) wf[i] = frand() * (1.0f + (r % 7));
        tr->quant(wf, W + r * rb, in);
    }
    for (int64_t i = 0; i < T * in; i++) x[i] = frand() * (i % 13 == 0 ? 10.0f : 1.0f);
    float *yref = malloc(sizeof(float) * T * rows), *ygpu = malloc(sizeof(float) * T * rows);
    double cpu_md = 0, cpu_mr = 0;
    for (int t = 0; t < T; t++) {
        float *yt = malloc(sizeof(float) * rows), *ys = malloc(sizeof(float) * rows);
        quant_matvec(type, W, rows, in, x + t * in, yt);
        quant_use_simd = 0;
        quant_matvec(type, W, rows, in, x + t * in, ys);
        quant_use_simd = 1;
        for (int64_t r = 0; r < rows; r++) {
            yref[t * rows + r] = yt[r];
            if (fabs(ys[r]) > cpu_mr) cpu_mr = fabs(ys[r]);
            if (fabs((double)ys[r] - yt[r]) > cpu_md) cpu_md = fabs((double)ys[r] - yt[r]);
        }
        free(yt); free(ys);
    }
    if (cpu_md > 1e-5 * cpu_mr) printf("NOTE %s in %lld: CPU simd vs scalar dots differ by %.2e of max\n", tr->name, (long long)in, cpu_md / cpu_mr);
    void *dW, *dact; float *dx, *dy;
    int at = cu_act_type(type);
    int64_t arb = cu_act_row_bytes(at, in);
    CK(cudaMalloc(&dW, rb * rows)); CK(cudaMalloc((void **)&dx, sizeof(float) * T * in));
    CK(cudaMalloc(&dact, arb * T + 64)); CK(cudaMalloc((void **)&dy, sizeof(float) * T * rows));
    CK(cudaMemcpy(dW, W, rb * rows, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x, sizeof(float) * T * in, cudaMemcpyHostToDevice));
    int fail = 0;
    const void *act = dx;
    int64_t astride = in * 4;
    if (at != 0) {
        cu_quantize_act(at, dx, dact, T, in, 0);
        act = dact; astride = arb;
        /* byte-exact against the CPU quantizer */
        uint8_t *hq = malloc(arb * T), *cq = malloc(arb * T);
        CK(cudaMemcpy(hq, dact, arb * T, cudaMemcpyDeviceToHost));
        for (int t = 0; t < T; t++) quant_quantize_activation(tr->vec_dot_type, x + t * in, cq + t * arb, in);
        if (memcmp(hq, cq, arb * T)) { printf("FAIL %s: activation quantization differs from the CPU\n", tr->name); fail = 1; }
        free(hq); free(cq);
    }
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    g.w = dW; g.wtype = type; g.rows = rows; g.in = in; g.row_bytes = rb; g.act = act; g.act_stride = astride;
    g.act_div = 1; g.out = dy; g.out_stride = rows; g.ntok = T;
    static const int nts[3] = {1, 4, 8};
    int repackable = type == GGML_TYPE_Q8_0 || type == GGML_TYPE_IQ2_XXS;
    for (int ni = 0; ni < (repackable ? 6 : 3); ni++) {
        int nt = nts[ni % 3];
        if (ni == 3) {
            /* the second round runs the device-repacked layout */
            if (type == GGML_TYPE_Q8_0) { if (!cu_repack_q8_0(dW, rows, in, rb, 0)) break; g.wtype = 108; }
            else { if (!cu_repack_iq2_xxs(dW, rows, in, rb, 0)) break; g.wtype = 116; }
        }
        g.nt_hint = nt;
        CK(cudaMemset(dy, 0xFF, sizeof(float) * T * rows));
        cu_gemv(&g, (T + nt - 1) / nt, 0);
        CK(cudaGetLastError());
        CK(cudaMemcpy(ygpu, dy, sizeof(float) * T * rows, cudaMemcpyDeviceToHost));
        double md = 0, mr = 0;
        for (int64_t i = 0; i < T * rows; i++) {
            if (fabs(yref[i]) > mr) mr = fabs(yref[i]);
            double d = fabs((double)yref[i] - ygpu[i]);
            if (!(d <= md)) md = isnan(d) ? INFINITY : d;
        }
        double rel = md / (mr > 0 ? mr : 1);
        int bad = !(rel <= 1e-5);
        printf("%s gemv %-8s rows %5lld in %5lld T %d tile %d: rel err %.2e\n", bad ? "FAIL" : "ok  ", ni >= 3 ? (type == GGML_TYPE_Q8_0 ? "q8_0r" : "iq2r") : tr->name,
               (long long)rows, (long long)in, T, nt, rel);
        fail |= bad;
        {
            /* paired launch (w2/out2: gate and up in one grid): both halves give
             * exactly the single launch's results */
            float *dy2, *y1 = malloc(sizeof(float) * T * rows), *y2 = malloc(sizeof(float) * T * rows);
            CK(cudaMalloc((void **)&dy2, sizeof(float) * T * rows));
            cu_gemv_args p2 = g;
            p2.w2 = g.w; p2.out2 = dy2;
            CK(cudaMemset(dy, 0xFF, sizeof(float) * T * rows));
            CK(cudaMemset(dy2, 0xFF, sizeof(float) * T * rows));
            cu_gemv(&p2, (T + nt - 1) / nt, 0);
            CK(cudaGetLastError());
            CK(cudaMemcpy(y1, dy, sizeof(float) * T * rows, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(y2, dy2, sizeof(float) * T * rows, cudaMemcpyDeviceToHost));
            int pb = memcmp(y1, ygpu, sizeof(float) * T * rows) || memcmp(y2, ygpu, sizeof(float) * T * rows);
            if (pb) printf("FAIL gemv pair %s rows %lld in %lld T %d tile %d: differs from the single launch\n",
                           tr->name, (long long)rows, (long long)in, T, nt);
            fail |= pb;
            cudaFree(dy2); free(y1); free(y2);
        }
    }
    if (timing) {
        /* decode-shaped timing: T = 1 over a weight set far larger than L2 */
        int64_t R = (int64_t)((1ull << 30) / rb);
        void *big;
        if (cudaMalloc(&big, rb * R) == cudaSuccess) {
            float *yb; CK(cudaMalloc((void **)&yb, sizeof(float) * R));
            cu_synth_fill(big, type, R * in, 1234, 0.01f, 0, 0);
            cu_gemv_args b = g;
            if (type == GGML_TYPE_Q8_0 && cu_repack_q8_0(big, R, in, rb, 0)) b.wtype = 108;
            if (type == GGML_TYPE_IQ2_XXS && cu_repack_iq2_xxs(big, R, in, rb, 0)) b.wtype = 116;
            b.w = big; b.rows = R; b.out = yb; b.out_stride = R; b.ntok = 1; b.nt_hint = 1;
            cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
            cu_gemv(&b, 1, 0);
            cudaEventRecord(e0, 0);
            for (int i = 0; i < 20; i++) cu_gemv(&b, 1, 0);
            cudaEventRecord(e1, 0);
            cudaEventSynchronize(e1);
            float ms; cudaEventElapsedTime(&ms, e0, e1);
            ms /= 20;
            printf("time gemv %-8s %6.2f MB: %.3f ms, %.0f GB/s\n", tr->name, rb * R / 1e6, ms, rb * R / (ms * 1e-3) / 1e9);
            cudaFree(yb); cudaFree(big);
        }
    }
    cudaFree(dW); cudaFree(dx); cudaFree(dact); cudaFree(dy);
    free(wf); free(x); free(W); free(yref); free(ygpu);
    return fail;
}

/* The tensor-core kernel (cu_mmq) against the CPU on the same data: dense
 * batches (T tokens, partial tiles of 64 rows and tokens) and, with E > 0,
 * MoE tiles of (token, expert) pairs, K pairs per token, built on the device
 * by cu_moe_tiles like the backend does. Q8_0 and IQ2_XXS run repacked
 * where their rows allow it (as on upload), as stored otherwise. refuse: a
 * type with only the exact kernels (Q4_K) must be refused instead. */
static int check_mmq(int type, int64_t rows, int64_t in, int T, int E, int K, int refuse) {
    const quant_traits *tr = quant_get(type);
    uint64_t rb = quant_row_bytes(type, in);
    int ne = E > 0 ? E : 1, P = E > 0 ? T * K : T;
    float *wf = malloc(sizeof(float) * in), *x = malloc(sizeof(float) * T * in);
    uint8_t *W = malloc(rb * rows * ne);
    for (int64_t r = 0; r < rows * ne; r++) {
        for (int64_t i = 0; i < in; i++) wf[i] = frand() * (1.0f + (r % 7));
        tr->quant(wf, W + r * rb, in);
    }
    for (int64_t i = 0; i < T * in; i++) x[i] = frand() * (i % 13 == 0 ? 10.0f : 1.0f);
    int *sel = malloc(sizeof(int) * P);
    for (int p = 0; p < P; p++) sel[p] = E > 0 ? (p * 5 + p / 3 + (p % 7 == 0 ? 1 : 0)) % E : 0;
    float *yref = malloc(sizeof(float) * P * rows), *ygpu = malloc(sizeof(float) * P * rows);
    for (int p = 0; p < P; p++)
        quant_matvec(type, W + (uint64_t)sel[p] * rows * rb, rows, in, x + (int64_t)(E > 0 ? p / K : p) * in, yref + (int64_t)p * rows);
    void *dW, *dact; float *dx, *dy; int *dsel, *dt;
    int at = cu_act_type(type);
    int64_t arb = cu_act_row_bytes(at, in);
    int maxt = P / 64 + 1 + ne;
    CK(cudaMalloc(&dW, rb * rows * ne)); CK(cudaMalloc((void **)&dx, sizeof(float) * T * in));
    CK(cudaMalloc(&dact, arb * T + 64)); CK(cudaMalloc((void **)&dy, sizeof(float) * P * rows));
    CK(cudaMalloc((void **)&dsel, sizeof(int) * P)); CK(cudaMalloc((void **)&dt, sizeof(int) * (P + 4 * maxt + 1)));
    CK(cudaMemcpy(dW, W, rb * rows * ne, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x, sizeof(float) * T * in, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dsel, sel, sizeof(int) * P, cudaMemcpyHostToDevice));
    cu_quantize_act(at, dx, dact, T, in, 0);
    int wt = type;
    if (type == GGML_TYPE_Q8_0 && cu_repack_q8_0(dW, rows * ne, in, rb, 0)) wt = 108;
    if (type == GGML_TYPE_IQ2_XXS && cu_repack_iq2_xxs(dW, rows * ne, in, rb, 0)) wt = 116;
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    g.w = dW; g.wtype = wt; g.rows = rows; g.in = in; g.row_bytes = rb; g.act = dact; g.act_stride = arb;
    g.act_div = 1; g.out = dy; g.out_stride = rows; g.ntok = T;
    if (at == 0) { g.act = dx; g.act_stride = in * 4; }     /* plain-float weights take f32 activations */
    int ntiles = (T + 63) / 64;
    if (E > 0) {
        int *pairs = dt, *ts = dt + P, *tc = ts + maxt, *tx = tc + maxt, *nt = tx + maxt;
        cu_moe_tiles(dsel, P, E, 64, pairs, ts, tc, tx, nt, 0);
        g.tile_pairs = pairs; g.tile_start = ts; g.tile_count = tc; g.tile_expert = tx; g.n_tiles = nt;
        g.expert_bytes = rb * rows; g.act_div = K;
        ntiles = maxt;
    }
    CK(cudaMemset(dy, 0xFF, sizeof(float) * P * rows));
    int fail = 0;
    if (refuse) {
        /* exact activations only: the backend keeps the GEMV kernels for q8 activations */
        fail = cu_mmq_supported(&g) || cu_mmq(&g, ntiles, 0);
        printf("%s mmq  %-8s rows %5lld in %5lld T %d experts %d: %s\n", fail ? "FAIL" : "ok  ", tr->name, (long long)rows,
               (long long)in, T, E, fail ? "not refused" : "refused (exact activations only)");
    } else if (!cu_mmq_supported(&g)) { printf("FAIL mmq %s: not supported\n", tr->name); fail = 1; }
    else {
        cu_mmq(&g, ntiles, 0);
        CK(cudaGetLastError());
        CK(cudaMemcpy(ygpu, dy, sizeof(float) * P * rows, cudaMemcpyDeviceToHost));
        double md = 0, mr = 0;
        for (int64_t i = 0; i < (int64_t)P * rows; i++) {
            if (fabs(yref[i]) > mr) mr = fabs(yref[i]);
            double d = fabs((double)yref[i] - ygpu[i]);
            if (!(d <= md)) md = isnan(d) ? INFINITY : d;
        }
        double rel = md / (mr > 0 ? mr : 1);
        fail = !(rel <= 1e-5);
        printf("%s mmq  %-8s rows %5lld in %5lld T %d experts %d: rel err %.2e\n", fail ? "FAIL" : "ok  ", tr->name,
               (long long)rows, (long long)in, T, E, rel);
    }
    cudaFree(dW); cudaFree(dx); cudaFree(dact); cudaFree(dy); cudaFree(dsel); cudaFree(dt);
    free(wf); free(x); free(W); free(yref); free(ygpu); free(sel);
    return fail;
}

/* Prefill-shaped timing of cu_mmq against the 8-token GEMV tiles (T = 512). */
static void time_mmq(int type, int64_t rows, int64_t in) {
    const int T = 512;
    uint64_t rb = quant_row_bytes(type, in);
    void *dW, *dact; float *dy, *dx;
    int at = cu_act_type(type);
    int64_t arb = cu_act_row_bytes(at, in);
    CK(cudaMalloc(&dW, rb * rows)); CK(cudaMalloc(&dact, arb * T)); CK(cudaMalloc((void **)&dy, sizeof(float) * T * rows));
    CK(cudaMalloc((void **)&dx, sizeof(float) * T * in));
    cu_synth_fill(dW, type, rows * in, 99, 0.01f, 0, 0);
    cu_synth_fill(dx, GGML_TYPE_F32, T * in, 7, 1.0f, 0, 0);
    cu_quantize_act(at, dx, dact, T, in, 0);
    int wt = type;
    if (type == GGML_TYPE_Q8_0 && cu_repack_q8_0(dW, rows, in, rb, 0)) wt = 108;
    if (type == GGML_TYPE_IQ2_XXS && cu_repack_iq2_xxs(dW, rows, in, rb, 0)) wt = 116;
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    g.w = dW; g.wtype = wt; g.rows = rows; g.in = in; g.row_bytes = rb; g.act = dact; g.act_stride = arb;
    g.act_div = 1; g.out = dy; g.out_stride = rows; g.ntok = T; g.nt_hint = 8;
    if (at == 0) { g.act = dx; g.act_stride = in * 4; }
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    float ms[2];
    for (int k = 0; k < 2; k++) {
        if (k) cu_mmq(&g, T / 64, 0); else cu_gemv(&g, T / 8, 0);
        cudaEventRecord(e0, 0);
        for (int i = 0; i < 5; i++) { if (k) cu_mmq(&g, T / 64, 0); else cu_gemv(&g, T / 8, 0); }
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms[k], e0, e1);
        ms[k] /= 5;
    }
    double ops = 2.0 * rows * in * T;
    printf("time mmq  %-8s %lld x %lld, T %d: gemv %.3f ms (%.1f TOPS), mmq %.3f ms (%.1f TOPS)\n", quant_get(type)->name,
           (long long)rows, (long long)in, T, ms[0], ops / ms[0] / 1e9, ms[1], ops / ms[1] / 1e9);
    cudaFree(dW); cudaFree(dact); cudaFree(dy); cudaFree(dx);
}

/* ---- exact activations (act_f32) ---- */

/* y = dequant(W) . x in double: the values src/quant's dequant gives, an
 * exact dot; the GPU differs by its f32 summation only. */
static void ref_rows(const float *wd, int64_t rows, int64_t in, const float *x, double *y) {
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t i = 0; i < in; i++) s += (double)wd[r * in + i] * x[i];
        y[r] = s;
    }
}

/* 1: f32_compare prints failures only (the pipeline variants before the default one) */
static int f32_quiet = 0;

static int f32_compare(const char *what, const double *ref, const float *got, int64_t n) {
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
        double d = fabs(ref[i] - got[i]);
        if (!(d <= md)) md = isnan(d) ? INFINITY : d;
    }
    double rel = md / (mr > 0 ? mr : 1);
    int bad = !(rel <= 3e-6);
    if (bad || !f32_quiet) printf("%s gemvf %s: rel err %.2e\n", bad ? "FAIL" : "ok  ", what, rel);
    return bad;
}

/* One product with act_f32 = 1 against the double reference, then the same
 * launch paired (w2/out2: both halves bit-identical to it) and accumulating
 * (out = before + the same result, bit for bit). */
static int run_f32(const char *what, cu_gemv_args g, int ntiles, const double *ref, int64_t nout) {
    float *dy2, *y = malloc(sizeof(float) * nout), *y1 = malloc(sizeof(float) * nout), *y2 = malloc(sizeof(float) * nout);
    CK(cudaMalloc((void **)&dy2, sizeof(float) * nout));
    CK(cudaMemset(g.out, 0xFF, sizeof(float) * nout));
    cu_gemv(&g, ntiles, 0);
    CK(cudaGetLastError());
    CK(cudaMemcpy(y, g.out, sizeof(float) * nout, cudaMemcpyDeviceToHost));
    int fail = f32_compare(what, ref, y, nout);
    /* rows the product does not write keep the 0xFF fill: the reference has NaN-free values everywhere */
    cu_gemv_args p = g;
    p.w2 = g.w; p.out2 = dy2;
    CK(cudaMemset(g.out, 0xFF, sizeof(float) * nout));
    CK(cudaMemset(dy2, 0xFF, sizeof(float) * nout));
    cu_gemv(&p, ntiles, 0);
    CK(cudaGetLastError());
    CK(cudaMemcpy(y1, g.out, sizeof(float) * nout, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(y2, dy2, sizeof(float) * nout, cudaMemcpyDeviceToHost));
    if (memcmp(y1, y, sizeof(float) * nout) || memcmp(y2, y, sizeof(float) * nout)) {
        printf("FAIL gemvf %s: the paired launch differs from the single one\n", what);
        fail = 1;
    }
    for (int64_t i = 0; i < nout; i++) y1[i] = (float)(i % 17) - 8.0f;
    CK(cudaMemcpy(g.out, y1, sizeof(float) * nout, cudaMemcpyHostToDevice));
    cu_gemv_args a = g;
    a.accumulate = 1;
    cu_gemv(&a, ntiles, 0);
    CK(cudaGetLastError());
    CK(cudaMemcpy(y2, g.out, sizeof(float) * nout, cudaMemcpyDeviceToHost));
    int ab = 0;
    for (int64_t i = 0; i < nout; i++) {
        float want = y1[i] + y[i];
        if (memcmp(&want, &y2[i], 4)) ab = 1;
    }
    if (ab) { printf("FAIL gemvf %s: accumulate is not out + the product\n", what); fail = 1; }
    cudaFree(dy2); free(y); free(y1); free(y2);
    return fail;
}

/* Random weights of `type` (E experts of rows x in, or one matrix), random x.
 * mode 0: dense T tokens; E > 0: MoE tiles of T*K (token, expert) pairs built
 * by cu_moe_tiles; G > 0: grouped input, G groups of grows rows, row r reads
 * in floats at (r / grows) * in of an activation row of G * in. Every tile
 * size (1, 4, 8); Q8_0 and IQ2_XXS also repacked (108, 116) where the rows allow. */
static int check_f32(int type, int64_t rows, int64_t in, int T, int E, int K, int G, int64_t grows) {
    const quant_traits *tr = quant_get(type);
    uint64_t rb = quant_row_bytes(type, in);
    int ne = E > 0 ? E : 1, P = E > 0 ? T * K : T;
    if (G > 0) rows = G * grows;
    int64_t xin = G > 0 ? G * in : in;
    float *wf = malloc(sizeof(float) * in), *x = malloc(sizeof(float) * T * xin), *wd = malloc(sizeof(float) * rows * ne * in);
    uint8_t *W = malloc(rb * rows * ne);
    /* at most ~1M distinct quantized elements (the K-quant and IQ2_XXS quantizers
     * are slow); further rows repeat them with an odd period, so a row group
     * taken for another one (power-of-two row steps) still shows */
    int64_t distinct = ((1 << 20) / in) | 1;
    for (int64_t r = 0; r < rows * ne; r++) {
        if (r < distinct) {
            for (int64_t i = 0; i < in; i++) wf[i] = frand() * (1.0f + (r % 7));
            tr->quant(wf, W + r * rb, in);
            tr->dequant(W + r * rb, wd + r * in, in);
        } else {
            memcpy(W + r * rb, W + (r % distinct) * rb, rb);
            memcpy(wd + r * in, wd + (r % distinct) * in, sizeof(float) * in);
        }
    }
    for (int64_t i = 0; i < T * xin; i++) x[i] = frand() * (i % 13 == 0 ? 10.0f : 1.0f);
    int *sel = malloc(sizeof(int) * P);
    for (int p = 0; p < P; p++) sel[p] = E > 0 ? (p * 5 + p / 3 + (p % 7 == 0 ? 1 : 0)) % E : 0;
    double *ref = malloc(sizeof(double) * P * rows);
    for (int p = 0; p < P; p++) {
        if (G > 0) {
            for (int gi = 0; gi < G; gi++)
                ref_rows(wd + gi * grows * in, grows, in, x + (int64_t)p * xin + gi * in, ref + (int64_t)p * rows + gi * grows);
        } else {
            ref_rows(wd + (int64_t)sel[p] * rows * in, rows, in, x + (int64_t)(E > 0 ? p / K : p) * xin, ref + (int64_t)p * rows);
        }
    }
    void *dW; float *dx, *dy; int *dsel, *dt;
    int maxt = P + ne + 1;
    CK(cudaMalloc(&dW, rb * rows * ne)); CK(cudaMalloc((void **)&dx, sizeof(float) * T * xin));
    CK(cudaMalloc((void **)&dy, sizeof(float) * P * rows));
    CK(cudaMalloc((void **)&dsel, sizeof(int) * P)); CK(cudaMalloc((void **)&dt, sizeof(int) * (P + 4 * maxt + 1)));
    CK(cudaMemcpy(dx, x, sizeof(float) * T * xin, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dsel, sel, sizeof(int) * P, cudaMemcpyHostToDevice));
    int fail = 0;
    int repackable = type == GGML_TYPE_Q8_0 || type == GGML_TYPE_IQ2_XXS;
    for (int rp = 0; rp < (repackable ? 2 : 1); rp++) {
        CK(cudaMemcpy(dW, W, rb * rows * ne, cudaMemcpyHostToDevice));
        int wt = type;
        const char *tn = tr->name;
        if (rp) {
            if (type == GGML_TYPE_Q8_0) { if (!cu_repack_q8_0(dW, rows * ne, in, rb, 0)) break; wt = 108; tn = "q8_0r"; }
            else { if (!cu_repack_iq2_xxs(dW, rows * ne, in, rb, 0)) break; wt = 116; tn = "iq2r"; }
        }
        static const int nts[3] = {1, 4, 8};
        for (int ni = 0; ni < 3; ni++) {
            int nt = nts[ni];
            cu_gemv_args g;
            memset(&g, 0, sizeof g);
            g.w = dW; g.wtype = wt; g.rows = rows; g.in = in; g.row_bytes = rb; g.act = dx; g.act_f32 = 1;
            g.act_stride = xin * 4; g.act_div = 1; g.out = dy; g.out_stride = rows; g.ntok = T; g.nt_hint = nt;
            int ntiles = (T + nt - 1) / nt;
            if (E > 0) {
                int *pairs = dt, *ts = dt + P, *tc = ts + maxt, *tx = tc + maxt, *ntp = tx + maxt;
                cu_moe_tiles(dsel, P, E, nt, pairs, ts, tc, tx, ntp, 0);
                g.tile_pairs = pairs; g.tile_start = ts; g.tile_count = tc; g.tile_expert = tx; g.n_tiles = ntp;
                g.expert_bytes = rb * rows; g.act_div = K;
                ntiles = (P + nt - 1) / nt + (E < P ? E : P);
            }
            if (G > 0) { g.group_rows = grows; g.group_act_bytes = in * 4; }
            char what[160];
            snprintf(what, sizeof what, "%-8s rows %5lld in %5lld T %2d tile %d%s", tn, (long long)rows, (long long)in, T, nt,
                     E > 0 ? " moe" : G > 0 ? " grouped" : "");
            if (E > 0) snprintf(what + strlen(what), sizeof what - strlen(what), " (E %d K %d)", E, K);
            if (G > 0) snprintf(what + strlen(what), sizeof what - strlen(what), " (%d x %lld rows)", G, (long long)grows);
            if (nt > 1) { fail |= run_f32(what, g, ntiles, ref, (int64_t)P * rows); continue; }
            /* T = 1: every pipeline variant of k_gemvf (MINKE_CUDA_GEMVF_V 0..5, the
             * tensor-core and dp4a kernels off), the tensor-core kernel
             * (MINKE_CUDA_Q8MMA=1, 2: Q8_0R only, cu_gemvq8.cu), the dense dp4a
             * kernel on every shape (MINKE_CUDA_G3=3, cu_gemv3.cu: Q8_0 and Q8_0R) (failures
             * only), then the default */
            size_t wl = strlen(what);
            for (int v = 0; v <= 10; v++) {
                if (v < 6) snprintf(what + wl, sizeof what - wl, " V%d", v);
                else if (v < 8) snprintf(what + wl, sizeof what - wl, " Q8MMA=%d", v - 5);
                else if (v == 8) snprintf(what + wl, sizeof what - wl, " G3=3 G3S=0");
                else if (v == 9) snprintf(what + wl, sizeof what - wl, " G3=3 G3S=1");
                else snprintf(what + wl, sizeof what - wl, " (variants checked, default)");
                cu_gemvf_set_variant(v < 6 ? v : -1);
                cu_gemvq8_set(v < 6 || v == 8 || v == 9 ? 0 : v < 8 ? v - 5 : -1);
                cu_gemv3_set(v < 8 ? 1 : v < 10 ? 3 : -1);
                cu_gemv3s_set(v == 8 ? 0 : v == 9 ? 1 : -1);
                f32_quiet = v < 10;
                fail |= run_f32(what, g, ntiles, ref, (int64_t)P * rows);
            }
            f32_quiet = 0;
            cu_gemvf_set_variant(-1);
            cu_gemvq8_set(-1);
            cu_gemv3_set(-1);
            cu_gemv3s_set(-1);
        }
    }
    cudaFree(dW); cudaFree(dx); cudaFree(dy); cudaFree(dsel); cudaFree(dt);
    free(wf); free(x); free(wd); free(W); free(sel); free(ref);
    return fail;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Decode-shaped timing (T = 1) of the exact-activation GEMV next to the q8
 * one on the same weights: E experts (MoE tiles of the E pairs of one token,
 * E = 0: a dense matrix), optionally gate+up paired. The weights are rotated
 * over a pool far larger than L2; median of 20 launches. */
/* Time one launch shape over a pool of nsets weight copies of `set` bytes
 * (rotated so weights come from memory; paired: w2 is the second half of a
 * copy): *med_ms = the median of 20 launches, *graph_us = the mean of 43
 * back-to-back launches in one CUDA graph (as in a decode step: PDL lets each
 * launch start while the one before runs), -1 when the graph fails. */
static void time_rotated(cu_gemv_args *g, int ntiles, const void *pool, int64_t set, int nsets, int paired,
                         cudaEvent_t *ev, cudaStream_t gs, float *med_ms, float *graph_us) {
    float ms[20];
    for (int i = -2; i < 20; i++) {
        int s = (i + 2) % nsets;
        g->w = (const uint8_t *)pool + (int64_t)s * set;
        if (paired) g->w2 = (const uint8_t *)g->w + set / 2;
        if (i >= 0) cudaEventRecord(ev[i], 0);
        cu_gemv(g, ntiles, 0);
        if (i >= 0) cudaEventRecord(ev[i + 1], 0);
    }
    CK(cudaGetLastError());
    cudaEventSynchronize(ev[20]);
    for (int i = 0; i < 20; i++) cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]);
    qsort(ms, 20, sizeof(float), cmp_float);
    *med_ms = (ms[9] + ms[10]) / 2;
    const int NG = 43, REP = 5;
    cudaGraph_t graph; cudaGraphExec_t exec;
    *graph_us = -1.f;
    CK(cudaStreamSynchronize(0));
    if (cudaStreamBeginCapture(gs, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
        for (int i = 0; i < NG; i++) {
            g->w = (const uint8_t *)pool + (int64_t)(i % nsets) * set;
            if (paired) g->w2 = (const uint8_t *)g->w + set / 2;
            cu_gemv(g, ntiles, gs);
        }
        if (cudaStreamEndCapture(gs, &graph) == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
            cudaGraphLaunch(exec, gs);
            cudaEventRecord(ev[0], gs);
            for (int r = 0; r < REP; r++) cudaGraphLaunch(exec, gs);
            cudaEventRecord(ev[1], gs);
            if (cudaEventSynchronize(ev[1]) == cudaSuccess) {
                float t; cudaEventElapsedTime(&t, ev[0], ev[1]);
                *graph_us = t * 1e3f / (NG * REP);
            }
            cudaGraphExecDestroy(exec);
            cudaGraphDestroy(graph);
        }
    }
    if (cudaGetLastError() != cudaSuccess) *graph_us = -1.f;
}

static void time_f32(int type, int64_t rows, int64_t in, int E, int paired, int down) {
    uint64_t rb = quant_row_bytes(type, in);
    int ne = E > 0 ? E : 1;
    int64_t set = (int64_t)rb * rows * ne * (paired ? 2 : 1);
    int nsets = (int)((768ll << 20) / set);
    if (nsets < 4) nsets = 4;
    void *pool;
    if (cudaMalloc(&pool, set * nsets) != cudaSuccess) { printf("skip time gemvf: no memory\n"); return; }
    cu_synth_fill(pool, type, set * nsets / rb * in, 4321, 0.01f, 0, 0);
    int wt = type;
    if (type == GGML_TYPE_Q8_0 && cu_repack_q8_0(pool, set * nsets / rb, in, rb, 0)) wt = 108;
    if (type == GGML_TYPE_IQ2_XXS && cu_repack_iq2_xxs(pool, set * nsets / rb, in, rb, 0)) wt = 116;
    int P = E > 0 ? E : 1, nin = down ? P : 1;
    float *dx, *dy, *dy2; void *dq; int *dsel, *dt;
    int at = cu_act_type(wt);
    int64_t arb = cu_act_row_bytes(at, in);
    CK(cudaMalloc((void **)&dx, sizeof(float) * nin * in)); CK(cudaMalloc(&dq, arb * nin + 64));
    CK(cudaMalloc((void **)&dy, sizeof(float) * P * rows)); CK(cudaMalloc((void **)&dy2, sizeof(float) * P * rows));
    CK(cudaMalloc((void **)&dsel, sizeof(int) * P)); CK(cudaMalloc((void **)&dt, sizeof(int) * (P + 4 * (2 * P + 1) + 1)));
    cu_synth_fill(dx, GGML_TYPE_F32, nin * in, 77, 1.0f, 0, 0);
    cu_quantize_act(at, dx, dq, nin, in, 0);
    int sel[64];
    for (int p = 0; p < P; p++) sel[p] = p;
    CK(cudaMemcpy(dsel, sel, sizeof(int) * P, cudaMemcpyHostToDevice));
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    g.wtype = wt; g.rows = rows; g.in = in; g.row_bytes = rb; g.act_div = 1; g.out = dy; g.out_stride = rows;
    g.ntok = 1; g.nt_hint = 1;
    int ntiles = 1;
    if (E > 0) {
        int maxt = 2 * P + 1;
        int *pairs = dt, *ts = dt + P, *tc = ts + maxt, *tx = tc + maxt, *ntp = tx + maxt;
        cu_moe_tiles(dsel, P, E, 1, pairs, ts, tc, tx, ntp, 0);
        g.tile_pairs = pairs; g.tile_start = ts; g.tile_count = tc; g.tile_expert = tx; g.n_tiles = ntp;
        g.expert_bytes = rb * rows; g.act_div = down ? 1 : E;
        ntiles = P + (E < P ? E : P);
    }
    if (paired) g.out2 = dy2;
    char shape[96];
    if (E > 0) snprintf(shape, sizeof shape, "%d x %lld x %lld%s", E, (long long)rows, (long long)in, paired ? " gate+up" : "");
    else snprintf(shape, sizeof shape, "%s%lld x %lld", paired ? "2 x " : "", (long long)rows, (long long)in);
    cudaEvent_t ev[21];
    for (int i = 0; i < 21; i++) cudaEventCreate(&ev[i]);
    cudaStream_t gs;
    CK(cudaStreamCreateWithFlags(&gs, cudaStreamNonBlocking));
    /* mode 0: the q8 kernel; 1..6: act_f32 with MINKE_CUDA_GEMVF_V = mode - 1 (the
     * tensor-core and dense dp4a kernels off); 7..11: act_f32 with MINKE_CUDA_Q8MMA =
     * 1..5 (Q8_0 only); 12: the dense dp4a kernel (MINKE_CUDA_G3=3, Q8_0 only) */
    const int nvar = wt == 108 ? 13 : 6;
    float med[1 + 15], graph_us[1 + 15];
    for (int mode = 0; mode < 1 + nvar; mode++) {
        int f32 = mode > 0;
        if (f32) cu_gemvf_set_variant(mode <= 6 ? mode - 1 : -1);
        cu_gemvq8_set(mode <= 6 || mode >= 12 ? 0 : mode - 6);
        cu_gemv3_set(mode >= 12 ? 3 : 1);
        cu_gemv3s_set(mode == 13 ? 1 : 0);
        g.act_f32 = f32;
        g.act = f32 ? (const void *)dx : dq;
        g.act_stride = f32 ? in * 4 : arb;
        time_rotated(&g, ntiles, pool, set, nsets, paired, ev, gs, &med[mode], &graph_us[mode]);
    }
    cu_gemvf_set_variant(-1);
    cu_gemvq8_set(-1);
    cu_gemv3_set(-1);
    cu_gemv3s_set(-1);
    printf("time gemvf %-8s %-26s %6.2f MB: q8 %.2f us (%.0f GB/s), graph %.2f us (%.0f GB/s)\n", quant_get(type)->name, shape,
           set / 1e6, med[0] * 1e3, set / (med[0] * 1e-3) / 1e9, graph_us[0], set / (graph_us[0] * 1e-6) / 1e9);
    for (int v = 0; v < nvar; v++)
        printf("time gemvf %-8s %-26s    f32 %s%d: %.2f us (%.0f GB/s), graph of 43: %.2f us (%.0f GB/s)\n", quant_get(type)->name,
               shape, v < 6 ? "V" : v < 11 ? "Q8MMA=" : v == 11 ? "G3=" : "G3S=", v < 6 ? v : v < 11 ? v - 5 : v == 11 ? 3 : 1, med[1 + v] * 1e3, set / (med[1 + v] * 1e-3) / 1e9, graph_us[1 + v], set / (graph_us[1 + v] * 1e-6) / 1e9);
    for (int i = 0; i < 21; i++) cudaEventDestroy(ev[i]);
    cudaStreamDestroy(gs);
    cudaFree(pool); cudaFree(dx); cudaFree(dq); cudaFree(dy); cudaFree(dy2); cudaFree(dsel); cudaFree(dt);
}

/* Inputs split ahead (cu_gemv_args.xitems / oitems, twenty-eighth session): a
 * one-token Q8_0R product with blocks of 32 rows stores its output as items,
 * and the next product given them must give the bits it gives splitting the
 * f32 input itself; grouped (out_a) and plain (out_b) inputs. Shapes as in
 * decode: P0 8192 x 256 (its items: x), P1 8 groups of 1024 rows over 1024
 * inputs each (x's 8192: out_a's layout), P2 1024 x 8192 over P1's output. */
static int g3_items_run(const void *w, uint64_t rb, int64_t rows, int64_t in, int64_t grows, const float *x,
                        const int *xi, float *y, int *yi, int want_yi, const char *what) {
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    int done = 0;
    g.w = w; g.wtype = 108; g.rows = rows; g.in = in; g.row_bytes = rb; g.act = x; g.act_f32 = 1;
    g.act_stride = in * 4; g.act_div = 1; g.out = y; g.out_stride = rows; g.ntok = 1; g.nt_hint = 1;
    if (grows) { g.group_rows = grows; g.group_act_bytes = in * 4; }
    g.xitems = xi; g.oitems = yi; g.oitems_done = yi ? &done : NULL;
    cu_gemv(&g, 1, 0);
    CK(cudaDeviceSynchronize());
    if (want_yi && !done) { printf("FAIL g3 items %s: the product did not store its output's items\n", what); return 1; }
    return 0;
}
static int check_g3_items(void) {
    const int64_t R0 = 8192, I0 = 256, G = 8, GR = 1024, I1 = 1024, R2 = 1024, I2 = 8192;
    const int64_t n0 = R0 * I0, n1 = G * GR * I1, n2 = R2 * I2;
    const uint64_t rb0 = quant_row_bytes(GGML_TYPE_Q8_0, I0), rb1 = quant_row_bytes(GGML_TYPE_Q8_0, I1),
                   rb2 = quant_row_bytes(GGML_TYPE_Q8_0, I2);
    void *w0, *w1, *w2;
    float *x, *y0, *y1a, *y1b, *y2a, *y2b;
    int *i0, *i1a, *i1b;
    CK(cudaMalloc(&w0, rb0 * R0)); CK(cudaMalloc(&w1, rb1 * G * GR)); CK(cudaMalloc(&w2, rb2 * R2));
    CK(cudaMalloc((void **)&x, I0 * 4)); CK(cudaMalloc((void **)&y0, R0 * 4));
    CK(cudaMalloc((void **)&y1a, G * GR * 4)); CK(cudaMalloc((void **)&y1b, G * GR * 4));
    CK(cudaMalloc((void **)&y2a, R2 * 4)); CK(cudaMalloc((void **)&y2b, R2 * 4));
    CK(cudaMalloc((void **)&i0, cu_gemv3_items_bytes(R0)));
    CK(cudaMalloc((void **)&i1a, cu_gemv3_items_bytes(G * GR))); CK(cudaMalloc((void **)&i1b, cu_gemv3_items_bytes(G * GR)));
    cu_synth_fill(w0, GGML_TYPE_Q8_0, n0, 901, 0.05f, 0, 0);
    cu_synth_fill(w1, GGML_TYPE_Q8_0, n1, 902, 0.05f, 0, 0);
    cu_synth_fill(w2, GGML_TYPE_Q8_0, n2, 903, 0.05f, 0, 0);
    cu_synth_fill(x, GGML_TYPE_F32, I0, 904, 1.0f, 0, 0);
    int fail = 0;
    if (!cu_repack_q8_0(w0, R0, I0, rb0, 0) || !cu_repack_q8_0(w1, G * GR, I1, rb1, 0) || !cu_repack_q8_0(w2, R2, I2, rb2, 0)) {
        printf("skip g3 items: no Q8_0R repack\n");
        goto out;
    }
    cu_gemv3_set(3);     /* the dp4a kernel for these shapes, not the streamed one */
    cu_gemv3s_set(0);
    fail |= g3_items_run(w0, rb0, R0, I0, 0, x, NULL, y0, i0, 1, "P0");
    /* P1 from x's f32 (storing its items) and from x's items (storing again): outputs and items equal */
    fail |= g3_items_run(w1, rb1, G * GR, I1, GR, y0, NULL, y1a, i1a, 1, "P1");
    fail |= g3_items_run(w1, rb1, G * GR, I1, GR, y0, i0, y1b, i1b, 1, "P1 items");
    /* P2 from P1's f32 and from its items */
    fail |= g3_items_run(w2, rb2, R2, I2, 0, y1a, NULL, y2a, NULL, 0, "P2");
    fail |= g3_items_run(w2, rb2, R2, I2, 0, y1a, i1b, y2b, NULL, 0, "P2 items");
    if (!fail) {
        float *h1a = (float *)malloc(G * GR * 4), *h1b = (float *)malloc(G * GR * 4), *h2a = (float *)malloc(R2 * 4),
              *h2b = (float *)malloc(R2 * 4);
        size_t ib = cu_gemv3_items_bytes(G * GR);
        int *hia = (int *)malloc(ib), *hib = (int *)malloc(ib);
        CK(cudaMemcpy(h1a, y1a, G * GR * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(h1b, y1b, G * GR * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(h2a, y2a, R2 * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(h2b, y2b, R2 * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hia, i1a, ib, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(hib, i1b, ib, cudaMemcpyDeviceToHost));
        int d1 = 0, d2 = 0, di = 0, nz = 0;
        for (int64_t r = 0; r < G * GR; r++) { d1 += memcmp(&h1a[r], &h1b[r], 4) != 0; nz += h1a[r] != 0.f; }
        for (int64_t r = 0; r < R2; r++) d2 += memcmp(&h2a[r], &h2b[r], 4) != 0;
        for (int64_t it = 0; it < G * GR / 32; it++) di += memcmp(hia + it * 28, hib + it * 28, 25 * 4) != 0;  /* pieces and scale */
        /* a negative control: item 0's scale zeroed, P2 from the items must change (they are read) */
        int dn = 0;
        CK(cudaMemset(i1b + 24, 0, 4));
        fail |= g3_items_run(w2, rb2, R2, I2, 0, y1a, i1b, y2b, NULL, 0, "P2 corrupted items");
        CK(cudaMemcpy(h2b, y2b, R2 * 4, cudaMemcpyDeviceToHost));
        for (int64_t r = 0; r < R2; r++) dn += memcmp(&h2a[r], &h2b[r], 4) != 0;
        if (dn < R2 / 2) { printf("FAIL g3 items: P2 from a corrupted item changed only %d of %lld outputs\n", dn, (long long)R2); fail = 1; }
        if (d1 || d2 || di || nz < G * GR / 2) {
            printf("FAIL g3 items: P1 %d of %lld outputs differ, P2 %d of %lld, items %d (nonzero P1 outputs %d)\n", d1,
                   (long long)(G * GR), d2, (long long)R2, di, nz);
            fail = 1;
        } else
            printf("ok   g3 items: out_a / out_b shapes from split-ahead inputs, every output bit equal (P1 %lld, P2 %lld;"
                   " a corrupted item changes %d)\n", (long long)(G * GR), (long long)R2, dn);
        free(h1a); free(h1b); free(h2a); free(h2b); free(hia); free(hib);
    }
    cu_gemv3_set(-1);
    cu_gemv3s_set(-1);
out:
    cudaFree(w0); cudaFree(w1); cudaFree(w2); cudaFree(x); cudaFree(y0); cudaFree(y1a); cudaFree(y1b); cudaFree(y2a);
    cudaFree(y2b); cudaFree(i0); cudaFree(i1a); cudaFree(i1b);
    return fail;
}

static int check_f32_all(int timing) {
    int types[] = {GGML_TYPE_Q8_0, GGML_TYPE_IQ2_XXS, GGML_TYPE_Q2_K, GGML_TYPE_Q4_K, GGML_TYPE_MXFP4};
    int fail = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        int t = types[i];
        if (!quant_get(t)) continue;
        fail |= check_f32(t, 300, 1024, 5, 0, 0, 0, 0);       /* 8 rows a block */
        fail |= check_f32(t, 77, 4096, 9, 0, 0, 0, 0);        /* T = 1: 4 warps split the items; chunks of 2048 and 1024 */
        fail |= check_f32(t, 4133, 256, 5, 0, 0, 0, 0);       /* T = 1: 4 rows a warp */
        fail |= check_f32(t, 2000, 512, 5, 0, 0, 0, 0);       /* T = 1: 2 rows a warp */
        fail |= check_f32(t, 40, 9216, 2, 0, 0, 0, 0);        /* two chunks of 8192 + 1024 */
        fail |= check_f32(t, 200, 1024, 7, 5, 3, 0, 0);       /* MoE tiles */
        fail |= check_f32(t, 2048, 256, 1, 6, 6, 0, 0);       /* MoE decode: 6 experts of one token */
        fail |= check_f32(t, 0, 512, 3, 0, 0, 4, 64);         /* grouped */
        fail |= check_f32(t, 0, 256, 6, 0, 0, 3, 24);         /* grouped, 24-row groups */
        fail |= check_f32(t, 0, 256, 3, 0, 0, 3, 5);          /* grouped, 5-row groups: one-warp blocks */
        fail |= check_f32(t, 0, 4096, 2, 0, 0, 2, 10);        /* grouped, split items */
        fail |= check_f32(t, 0, 256, 2, 0, 0, 8, 512);        /* grouped, blocks looping over row groups of several groups */
        /* T = 1 in the launch shapes of decode: */
        fail |= check_f32(t, 3200, 8192, 1, 0, 0, 0, 0);      /* 2 rows a warp, 8 items a lane: the ring wraps */
        fail |= check_f32(t, 9000, 1024, 1, 0, 0, 0, 0);      /* blocks looping over row groups */
        fail |= check_f32(t, 1408, 4096, 1, 6, 6, 0, 0);      /* MoE decode, 4 rows a warp, 4 items a lane */
        fail |= check_f32(t, 4096, 2048, 1, 6, 6, 0, 0);      /* MoE decode, looping over row groups */
        fail |= check_f32(t, 300, 16384, 1, 0, 0, 0, 0);      /* two chunks */
        if (t == GGML_TYPE_Q8_0) {
            /* the tensor-core kernel's shapes (cu_gemvq8.cu): 8 warps a tile, a
             * grouped decode launch (out_a), one step a row, a partial tile */
            fail |= check_f32(t, 4096, 2048, 1, 0, 0, 0, 0);
            fail |= check_f32(t, 0, 4096, 1, 0, 0, 8, 1024);
            fail |= check_f32(t, 1000, 128, 1, 0, 0, 0, 0);
            fail |= check_f32(t, 37, 512, 1, 0, 0, 0, 0);
            fail |= check_f32(t, 0, 256, 1, 0, 0, 2, 64);
        }
    }
    if (timing) {
        /* the decode shapes of Flash: dense Q8_0 (repacked), then the MoE tiles */
        time_f32(GGML_TYPE_Q8_0, 1024, 4096, 0, 0, 0);      /* q_a */
        time_f32(GGML_TYPE_Q8_0, 4096, 4096, 0, 0, 0);
        time_f32(GGML_TYPE_Q8_0, 2048, 4096, 0, 1, 0);      /* shared expert gate + up */
        time_f32(GGML_TYPE_Q8_0, 4096, 2048, 0, 0, 0);      /* shared expert down */
        time_f32(GGML_TYPE_Q8_0, 4096, 8192, 0, 0, 0);      /* out_b */
        time_f32(GGML_TYPE_Q8_0, 32768, 1024, 0, 0, 0);     /* q_b */
        time_f32(GGML_TYPE_Q8_0, 512, 4096, 0, 0, 0);       /* kv */
        time_f32(GGML_TYPE_IQ2_XXS, 2048, 4096, 6, 1, 0);   /* routed experts gate + up */
        time_f32(GGML_TYPE_Q2_K, 4096, 2048, 6, 0, 1);      /* routed experts down */
        time_f32(GGML_TYPE_Q2_K, 2048, 4096, 6, 1, 0);
        time_f32(GGML_TYPE_Q4_K, 2048, 4096, 6, 1, 0);
        time_f32(GGML_TYPE_MXFP4, 2048, 4096, 6, 1, 0);
    }
    return fail;
}

/* ---- one-row GEMV for plain-float weights (cu_gemvh.cu) ---- */

/* Random rows*in weights of `type` (F16/BF16/F32) and T activation rows (nt_hint 1,
 * a tile per row; padded strides when T > 1), G > 0: grouped input (G groups of
 * grows rows). Against a double reference (1e-5 of max|y|) in every launch
 * schedule (MINKE_CUDA_GEMVH_V 0..2), which must agree bit for bit and give the
 * same bits on a second run; then paired with a second matrix (w2/out2: both
 * halves equal to their single launches), and accumulate (out = before + y
 * exactly). take: whether cu_gemvh must take the launch (0: must fall back, the
 * generic kernel is checked instead). */
static int check_h(int type, int64_t rows, int64_t in, int T, int G, int64_t grows, int take) {
    const quant_traits *tr = quant_get(type);
    uint64_t rb = quant_row_bytes(type, in);
    if (G > 0) rows = G * grows;
    int64_t xin = G > 0 ? G * in : in;
    int64_t astride = xin + (T > 1 ? 4 : 0), ostride = rows + (T > 1 ? 3 : 0);   /* floats */
    int64_t nout = (int64_t)T * ostride;
    float *wf = malloc(sizeof(float) * in), *wd = malloc(sizeof(float) * rows * in * 2), *x = malloc(sizeof(float) * T * astride);
    uint8_t *W = malloc(rb * rows * 2);
    for (int64_t r = 0; r < 2 * rows; r++) {
        for (int64_t i = 0; i < in; i++) wf[i] = frand() * (1.0f + (r % 7));
        tr->quant(wf, W + r * rb, in);
        tr->dequant(W + r * rb, wd + r * in, in);
    }
    for (int64_t i = 0; i < T * astride; i++) x[i] = frand() * (i % 13 == 0 ? 10.0f : 1.0f);
    /* ref[m][t * ostride + r]: matrix m (0: w, 1: w2); padding stays 0 */
    double *ref = calloc((size_t)nout * 2, sizeof(double));
    for (int m = 0; m < 2; m++)
        for (int t = 0; t < T; t++)
            for (int64_t r = 0; r < rows; r++) {
                const float *xr = x + t * astride + (G > 0 ? (r / grows) * in : 0), *wr = wd + (m * rows + r) * in;
                double s = 0;
                for (int64_t i = 0; i < in; i++) s += (double)wr[i] * xr[i];
                ref[m * nout + t * ostride + r] = s;
            }
    void *dW; float *dx, *dy, *dy2;
    CK(cudaMalloc(&dW, rb * rows * 2)); CK(cudaMalloc((void **)&dx, sizeof(float) * T * astride));
    CK(cudaMalloc((void **)&dy, sizeof(float) * nout)); CK(cudaMalloc((void **)&dy2, sizeof(float) * nout));
    CK(cudaMemcpy(dW, W, rb * rows * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x, sizeof(float) * T * astride, cudaMemcpyHostToDevice));
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    g.w = dW; g.wtype = type; g.rows = rows; g.in = in; g.row_bytes = rb; g.act = dx; g.act_stride = astride * 4;
    g.act_div = 1; g.out = dy; g.out_stride = ostride; g.ntok = T; g.nt_hint = 1;
    if (G > 0) { g.group_rows = grows; g.group_act_bytes = in * 4; }
    char what[128];
    snprintf(what, sizeof what, "%-4s rows %5lld in %5lld T %d%s", tr->name, (long long)rows, (long long)in, T, G > 0 ? " grouped" : "");
    if (G > 0) snprintf(what + strlen(what), sizeof what - strlen(what), " (%d x %lld rows)", G, (long long)grows);
    int fail = 0;
    cu_gemvh_set_variant(take ? 0 : -1);     /* on even where MINKE_CUDA_GEMVH=0 */
    if (cu_gemvh_applies(&g, T) != take) {
        printf("FAIL gemvh %s: cu_gemvh %s the launch\n", what, take ? "does not take" : "takes");
        fail = 1;
    }
    float *y = malloc(sizeof(float) * nout), *y0 = malloc(sizeof(float) * nout), *y2 = malloc(sizeof(float) * nout);
    float *pre = malloc(sizeof(float) * nout);
    double rel_max = 0;
    int nvar = take ? 3 : 1;
    for (int v = 0; v < nvar; v++) {
        for (int rep = 0; rep < 2; rep++) {
            cu_gemvh_set_variant(take ? v : -1);
            CK(cudaMemset(dy, 0xFF, sizeof(float) * nout));
            /* cu_gemvh itself (cu_gemv keeps F32 weights on the generic kernel) */
            if (!take || !cu_gemvh(&g, T, 0)) cu_gemv(&g, T, 0);
            CK(cudaGetLastError());
            CK(cudaMemcpy(y, dy, sizeof(float) * nout, cudaMemcpyDeviceToHost));
            if (v == 0 && rep == 0) {
                memcpy(y0, y, sizeof(float) * nout);
                double md = 0, mr = 0;
                for (int t = 0; t < T; t++)
                    for (int64_t r = 0; r < ostride; r++) {
                        int64_t i = t * ostride + r;
                        uint32_t bits; memcpy(&bits, &y[i], 4);
                        if (r >= rows) { if (bits != 0xFFFFFFFFu) md = INFINITY; continue; }   /* padding untouched */
                        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
                        double d = fabs(ref[i] - y[i]);
                        if (!(d <= md)) md = isnan(d) ? INFINITY : d;
                    }
                rel_max = md / (mr > 0 ? mr : 1);
                if (!(rel_max <= 1e-5)) fail = 1;
            } else if (memcmp(y, y0, sizeof(float) * nout)) {
                printf("FAIL gemvh %s: schedule V%d run %d differs from V0's bits\n", what, v, rep);
                fail = 1;
            }
        }
    }
    printf("%s gemvh %s: rel err %.2e%s\n", fail ? "FAIL" : "ok  ", what, rel_max,
           take ? " (schedules 0..2 and a rerun bit-identical)" : " (generic kernel)");
    /* paired: w2 = the second matrix into out2 */
    for (int v = 0; v < nvar; v++) {
        cu_gemvh_set_variant(take ? v : -1);
        cu_gemv_args p = g;
        p.w2 = (const uint8_t *)dW + rb * rows; p.out2 = dy2;
        CK(cudaMemset(dy, 0xFF, sizeof(float) * nout));
        CK(cudaMemset(dy2, 0xFF, sizeof(float) * nout));
        if (!take || !cu_gemvh(&p, T, 0)) cu_gemv(&p, T, 0);
        CK(cudaGetLastError());
        CK(cudaMemcpy(y, dy, sizeof(float) * nout, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(y2, dy2, sizeof(float) * nout, cudaMemcpyDeviceToHost));
        int pb = memcmp(y, y0, sizeof(float) * nout) != 0;
        double md = 0, mr = 0;
        for (int t = 0; t < T; t++)
            for (int64_t r = 0; r < rows; r++) {
                int64_t i = t * ostride + r;
                if (fabs(ref[nout + i]) > mr) mr = fabs(ref[nout + i]);
                double d = fabs(ref[nout + i] - y2[i]);
                if (!(d <= md)) md = isnan(d) ? INFINITY : d;
            }
        if (pb || !(md <= 1e-5 * (mr > 0 ? mr : 1))) {
            printf("FAIL gemvh %s V%d paired: out %s the single launch, out2 rel err %.2e\n", what, v, pb ? "differs from" : "equals",
                   md / (mr > 0 ? mr : 1));
            fail = 1;
        }
    }
    /* accumulate */
    for (int64_t i = 0; i < nout; i++) pre[i] = (float)(i % 17) - 8.0f;
    for (int v = 0; v < nvar; v++) {
        cu_gemvh_set_variant(take ? v : -1);
        CK(cudaMemcpy(dy, pre, sizeof(float) * nout, cudaMemcpyHostToDevice));
        cu_gemv_args a = g;
        a.accumulate = 1;
        if (!take || !cu_gemvh(&a, T, 0)) cu_gemv(&a, T, 0);
        CK(cudaGetLastError());
        CK(cudaMemcpy(y, dy, sizeof(float) * nout, cudaMemcpyDeviceToHost));
        int ab = 0;
        for (int t = 0; t < T; t++)
            for (int64_t r = 0; r < ostride; r++) {
                int64_t i = t * ostride + r;
                float want = r < rows ? pre[i] + y0[i] : pre[i];
                if (memcmp(&want, &y[i], 4)) ab = 1;
            }
        if (ab) { printf("FAIL gemvh %s V%d: accumulate is not out + the product\n", what, v); fail = 1; }
    }
    cu_gemvh_set_variant(-1);
    cudaFree(dW); cudaFree(dx); cudaFree(dy); cudaFree(dy2);
    free(wf); free(wd); free(x); free(W); free(ref); free(y); free(y0); free(y2); free(pre);
    return fail;
}

static int check_h_all(void) {
    int types[] = {GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_F32};
    int fail = 0;
    for (int k = 0; k < 3; k++) {
        int t = types[k];
        if (!quant_get(t)) continue;
        fail |= check_h(t, 256, 4096, 1, 0, 0, 1);        /* the MoE router */
        fail |= check_h(t, 1024, 4096, 1, 0, 0, 1);       /* compressor kv / gate */
        fail |= check_h(t, 64, 4096, 1, 0, 0, 1);         /* indexer weights */
        fail |= check_h(t, 8, 512, 1, 0, 0, 1);
        fail |= check_h(t, 4096, 1024, 1, 0, 0, 1);
        fail |= check_h(t, 8192, 1024, 1, 0, 0, 1);      /* indexer q_b: blocks loop over row groups */
        fail |= check_h(t, 1, 4096, 1, 0, 0, 1);
        fail |= check_h(t, 256, 4096 + 64, 1, 0, 0, 1);  /* odd split: the last warps of a row get fewer items */
        fail |= check_h(t, 77, 40, 1, 0, 0, 1);          /* 5 or 10 items a row */
        fail |= check_h(t, 300, 1024, 3, 0, 0, 1);       /* 3 tokens, one a tile, padded strides */
        fail |= check_h(t, 0, 512, 1, 4, 64, 1);         /* grouped input */
        fail |= check_h(t, 0, 256, 1, 3, 5, 1);          /* grouped, 5-row groups (a block spans groups) */
        fail |= check_h(t, 0, 1024, 2, 3, 24, 1);        /* grouped, 2 tokens */
        fail |= check_h(t, 40, t == GGML_TYPE_F32 ? 8192 : 16384, 1, 0, 0, 1);   /* 2048 items a row: 8 a lane */
        fail |= check_h(t, 40, t == GGML_TYPE_F32 ? 8196 : 16392, 1, 0, 0, 0);   /* 2049 items: the generic kernel */
    }
    return fail;
}

/* Decode-shaped timing (T = 1) of cu_gemvh in each schedule against the generic
 * kernel, weights rotated over a pool far larger than L2: the median of 20
 * launches and the mean of 43 back-to-back launches in one CUDA graph. */
static void time_h(int type, int64_t rows, int64_t in, int paired, const char *name) {
    uint64_t rb = quant_row_bytes(type, in);
    int64_t set = (int64_t)rb * rows * (paired ? 2 : 1);
    int nsets = (int)((768ll << 20) / set);
    if (nsets < 4) nsets = 4;
    void *pool;
    float *dx, *dy, *dy2;
    if (cudaMalloc(&pool, set * nsets) != cudaSuccess) { printf("skip time gemvh: no memory\n"); return; }
    cu_synth_fill(pool, type, set * nsets / rb * in, 4321, 0.01f, 0, 0);
    CK(cudaMalloc((void **)&dx, sizeof(float) * in)); CK(cudaMalloc((void **)&dy, sizeof(float) * rows));
    CK(cudaMalloc((void **)&dy2, sizeof(float) * rows));
    cu_synth_fill(dx, GGML_TYPE_F32, in, 77, 1.0f, 0, 0);
    CK(cudaDeviceSynchronize());
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    g.wtype = type; g.rows = rows; g.in = in; g.row_bytes = rb; g.act = dx; g.act_stride = in * 4; g.act_div = 1;
    g.out = dy; g.out_stride = rows; g.ntok = 1; g.nt_hint = 1;
    if (paired) g.out2 = dy2;
    cudaEvent_t ev[21];
    for (int i = 0; i < 21; i++) cudaEventCreate(&ev[i]);
    cudaStream_t gs;
    CK(cudaStreamCreateWithFlags(&gs, cudaStreamNonBlocking));
    static const int modes[4] = {9, 0, 1, 2};     /* the generic kernel, then the schedules */
    float med[4], graph_us[4];
    for (int mi = 0; mi < 4; mi++) {
        cu_gemvh_set_variant(modes[mi]);
        time_rotated(&g, 1, pool, set, nsets, paired, ev, gs, &med[mi], &graph_us[mi]);
        med[mi] *= 1e3f;     /* us */
    }
    cu_gemvh_set_variant(-1);
    char shape[64];
    snprintf(shape, sizeof shape, "%s%lld x %lld", paired ? "2 x " : "", (long long)rows, (long long)in);
    printf("time gemvh %-4s %-16s %-13s %6.2f MB: generic %6.2f us (%4.0f GB/s), graph %6.2f us\n", quant_get(type)->name, shape, name,
           set / 1e6, med[0], set / (med[0] * 1e-6) / 1e9, graph_us[0]);
    for (int mi = 1; mi < 4; mi++)
        printf("time gemvh %-4s %-16s %-13s           V%d %6.2f us (%4.0f GB/s), graph %6.2f us (%4.0f GB/s)\n", quant_get(type)->name,
               shape, name, modes[mi], med[mi], set / (med[mi] * 1e-6) / 1e9, graph_us[mi], set / (graph_us[mi] * 1e-6) / 1e9);
    for (int i = 0; i < 21; i++) cudaEventDestroy(ev[i]);
    cudaStreamDestroy(gs);
    cudaFree(pool); cudaFree(dx); cudaFree(dy); cudaFree(dy2);
}

static void time_h_all(void) {
    /* the F16 decode launches of Flash (docs/runs/ncu-decode-final.txt) */
    time_h(GGML_TYPE_F16, 256, 4096, 0, "router");
    time_h(GGML_TYPE_F16, 1024, 4096, 1, "comp kv+gate");
    time_h(GGML_TYPE_F16, 512, 4096, 1, "comp kv+gate");
    time_h(GGML_TYPE_F16, 256, 4096, 1, "idx comp");
    time_h(GGML_TYPE_F16, 64, 4096, 0, "idx proj");
    time_h(GGML_TYPE_F16, 8192, 1024, 0, "idx q_b");
    time_h(GGML_TYPE_BF16, 256, 4096, 0, "");
    time_h(GGML_TYPE_F32, 256, 4096, 0, "");
    time_h(GGML_TYPE_F32, 4096, 1024, 0, "");
}

/* Prefill attention on the f16 tensor cores (cu_attention_tc) against the f32
 * kernel (cu_attention without tc) on random rows: Flash shape (64 heads of
 * 512, window 128, indexer-selected or every-128th compressed rows, ring rows
 * before the batch) and the tiny model's (4 heads of 128). q and k rounded to
 * f16 give ~1e-3 of max|o|; a wrong row or weight would give O(1). */
static int check_attention(int nh, int hd, int W, int ratio, int T, int pos0, int ncomp_all, int topk) {
    int nrot = 64;
    float *dq, *dkv, *dring, *dcomp, *dsinks, *dfreq, *dref, *dtc; int *dsel = NULL, *dnsel, *dpos;
    int64_t qn = (int64_t)T * nh * hd;
    CK(cudaMalloc((void **)&dq, qn * 4)); CK(cudaMalloc((void **)&dkv, (int64_t)T * hd * 4));
    CK(cudaMalloc((void **)&dring, (int64_t)W * hd * 4)); CK(cudaMalloc((void **)&dcomp, (int64_t)ncomp_all * hd * 4));
    CK(cudaMalloc((void **)&dsinks, nh * 4)); CK(cudaMalloc((void **)&dfreq, nrot / 2 * 4));
    CK(cudaMalloc((void **)&dref, qn * 4)); CK(cudaMalloc((void **)&dtc, qn * 4));
    CK(cudaMalloc((void **)&dnsel, T * 4)); CK(cudaMalloc((void **)&dpos, 4));
    cu_synth_fill(dq, GGML_TYPE_F32, qn, 11, 3.0f, 0, 0);
    cu_synth_fill(dkv, GGML_TYPE_F32, (int64_t)T * hd, 12, 1.5f, 0, 0);
    cu_synth_fill(dring, GGML_TYPE_F32, (int64_t)W * hd, 13, 1.5f, 0, 0);
    cu_synth_fill(dcomp, GGML_TYPE_F32, (int64_t)ncomp_all * hd, 14, 1.5f, 0, 0);
    float hs[64], fr[32];
    for (int h = 0; h < nh && h < 64; h++) hs[h] = 2.0f * frand();
    for (int k = 0; k < nrot / 2; k++) fr[k] = powf(10000.0f, -2.0f * k / nrot);
    CK(cudaMemcpy(dsinks, hs, nh * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dfreq, fr, nrot / 2 * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dpos, &pos0, 4, cudaMemcpyHostToDevice));
    if (ratio == 4) {
        int *sel = malloc(sizeof(int) * T * topk), *ns = malloc(sizeof(int) * T);
        for (int t = 0; t < T; t++) {
            /* among the (pos + 1) / 4 rows the token's position has (the indexer's choice; the
             * wgmma kernel converts only those rows to f16) */
            int nI = (pos0 + t + 1) / 4;
            if (nI > ncomp_all) nI = ncomp_all;
            ns[t] = topk - (t % 5) * (topk / 8);
            if (ns[t] > nI) ns[t] = nI;
            for (int i = 0; i < topk; i++) sel[t * topk + i] = nI ? (int)((unsigned)(i * 7 + t * 13) % (unsigned)nI) : 0;
        }
        CK(cudaMalloc((void **)&dsel, sizeof(int) * T * topk));
        CK(cudaMemcpy(dsel, sel, sizeof(int) * T * topk, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dnsel, ns, sizeof(int) * T, cudaMemcpyHostToDevice));
        free(sel); free(ns);
    }
    float scale = 1.0f / sqrtf((float)hd);
    cu_attention(dq, dkv, dring, dcomp, CU_KV_F32, dsel, dnsel, topk, dsinks, T, nh, hd, W, ratio, nrot, dfreq, scale,
                 dpos, pos0, -1.f, dref, NULL, NULL, 1, 0, NULL, 0);
    int ran = cu_attention_tc(dq, dkv, dring, dcomp, dsel, dnsel, topk, dsinks, T, nh, hd, W, ratio, nrot,
                              dfreq, scale, dpos, pos0, -1.f, dtc, NULL, 0);
    CK(cudaDeviceSynchronize());
    float *ref = malloc(qn * 4), *tc = malloc(qn * 4);
    CK(cudaMemcpy(ref, dref, qn * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(tc, dtc, qn * 4, cudaMemcpyDeviceToHost));
    double md = 0, mr = 0;
    int finite = 1;
    for (int64_t i = 0; i < qn; i++) {
        if (!isfinite(tc[i])) finite = 0;
        double d = fabs((double)tc[i] - ref[i]);
        if (d > md) md = d;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    double rel = mr > 0 ? md / mr : md;
    int bad = !ran || !finite || !(rel <= 1e-2);
    printf("%s attn tc  heads %d hd %d W %d ratio %d T %d pos0 %d: rel err %.2e (max|o| %.3f)\n", bad ? "FAIL" : "ok  ",
           nh, hd, W, ratio, T, pos0, rel, mr);
    {   /* q's norm + RoPE by the attention (qeps: inside the wgmma kernel on sm_90a, in place before
         * the mma.sync one) against the norm kernel first; dq read as q_b's raw output */
        float *dqn, *dqr, *hn = malloc(qn * 4);
        CK(cudaMalloc((void **)&dqn, qn * 4)); CK(cudaMalloc((void **)&dqr, qn * 4));
        CK(cudaMemcpy(dqn, dq, qn * 4, cudaMemcpyDeviceToDevice)); CK(cudaMemcpy(dqr, dq, qn * 4, cudaMemcpyDeviceToDevice));
        cu_qhead_norm_rope(dqn, T, nh, hd, nrot, dfreq, dpos, 1e-6f, 0);
        int r1 = cu_attention_tc(dqn, dkv, dring, dcomp, dsel, dnsel, topk, dsinks, T, nh, hd, W, ratio, nrot, dfreq, scale,
                                 dpos, pos0, -1.f, dtc, NULL, 0);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(hn, dtc, qn * 4, cudaMemcpyDeviceToHost));
        int r2 = cu_attention_tc(dqr, dkv, dring, dcomp, dsel, dnsel, topk, dsinks, T, nh, hd, W, ratio, nrot, dfreq, scale,
                                 dpos, pos0, 1e-6f, dtc, NULL, 0);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(tc, dtc, qn * 4, cudaMemcpyDeviceToHost));
        double qd = 0, qm = 0;
        for (int64_t i = 0; i < qn; i++) {
            double d = fabs((double)tc[i] - hn[i]);
            if (!(d <= qd)) qd = d;
            if (fabs(hn[i]) > qm) qm = fabs(hn[i]);
        }
        int qbad = !r1 || !r2 || !(qd <= 2e-3 * qm);
        printf("%s attn tc  heads %d hd %d ratio %d T %d: q norm + RoPE inside vs the norm kernel first: %.2e of max|o|\n",
               qbad ? "FAIL" : "ok  ", nh, hd, ratio, T, qm > 0 ? qd / qm : qd);
        bad |= qbad;
        cudaFree(dqn); cudaFree(dqr); free(hn);
    }
    if (T >= 256) {
        cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
        float ms[2];
        for (int k = 0; k < 2; k++) {
            cudaEventRecord(e0, 0);
            for (int i = 0; i < 3; i++) {
                if (k) cu_attention_tc(dq, dkv, dring, dcomp, dsel, dnsel, topk, dsinks, T, nh, hd, W, ratio, nrot, dfreq, scale, dpos, pos0, -1.f, dtc, NULL, 0);
                else cu_attention(dq, dkv, dring, dcomp, CU_KV_F32, dsel, dnsel, topk, dsinks, T, nh, hd, W, ratio, nrot, dfreq, scale, dpos, pos0, -1.f, dref, NULL, NULL, 1, 0, NULL, 0);
            }
            cudaEventRecord(e1, 0);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&ms[k], e0, e1);
            ms[k] /= 3;
        }
        printf("time attn ratio %d T %d: f32 kernel %.3f ms, tensor cores %.3f ms\n", ratio, T, ms[0], ms[1]);
    }
    free(ref); free(tc);
    cudaFree(dq); cudaFree(dkv); cudaFree(dring); cudaFree(dcomp); cudaFree(dsinks); cudaFree(dfreq);
    cudaFree(dref); cudaFree(dtc); cudaFree(dnsel); cudaFree(dpos); if (dsel) cudaFree(dsel);
    return bad;
}

int main(int argc, char **argv) {
    int timing = argc > 1 && !strcmp(argv[1], "--time");
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) { printf("SKIP no CUDA device\n"); return 0; }
    if (cu_tables_init_from_quant()) { printf("FAIL tables\n"); return 1; }
    int types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q4_K,
                   GGML_TYPE_IQ2_XXS, GGML_TYPE_MXFP4};
    int fail = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (!quant_get(types[i])) { printf("skip type %d (not in src/quant)\n", types[i]); continue; }
        fail |= check_type(types[i], 300, 1024, 5, 0);
        fail |= check_type(types[i], 128, 256, 24, 0);
        if (types[i] != GGML_TYPE_Q2_K && types[i] != GGML_TYPE_Q4_K && types[i] != GGML_TYPE_IQ2_XXS)
            fail |= check_type(types[i], 512, 128, 24, 0);
        fail |= check_type(types[i], 77, 4096, 9, timing);
    }
    fail |= check_f32_all(timing);
    fail |= check_g3_items();
    fail |= check_h_all();
    if (timing) time_h_all();
    int mq_types[] = {GGML_TYPE_Q8_0, GGML_TYPE_IQ2_XXS, GGML_TYPE_Q2_K};
    for (int i = 0; i < 3; i++) {
        fail |= check_mmq(mq_types[i], 300, 1024, 100, 0, 1, 0);
        fail |= check_mmq(mq_types[i], 64, 1024, 37, 0, 1, 0);
        fail |= check_mmq(mq_types[i], 200, 1024, 90, 5, 3, 0);
        fail |= check_mmq(mq_types[i], 96, 512, 70, 3, 2, 0);      /* IQ2_XXS 512 wide stays unrepacked */
        if (timing) time_mmq(mq_types[i], 4096, 4096);
    }
    fail |= check_mmq(GGML_TYPE_Q8_0, 130, 128, 70, 0, 1, 0);    /* 4 items: Q8_0 not repacked, a partial stage */
    fail |= check_mmq(GGML_TYPE_F16, 300, 1024, 100, 0, 1, 0);   /* f16 tensor cores, activation split hi + lo */
    fail |= check_mmq(GGML_TYPE_F16, 72, 256, 33, 0, 1, 0);
    /* MXFP4 on the q8 kernel (3 items a row: a partial stage), Q4_K refused (exact kernels only) */
    fail |= check_mmq(GGML_TYPE_MXFP4, 300, 1024, 100, 0, 1, 0);
    fail |= check_mmq(GGML_TYPE_MXFP4, 64, 96, 37, 0, 1, 0);
    fail |= check_mmq(GGML_TYPE_MXFP4, 200, 1024, 90, 5, 3, 0);
    fail |= check_mmq(GGML_TYPE_Q4_K, 64, 256, 37, 0, 1, 1);
    if (timing) time_mmq(GGML_TYPE_F16, 8192, 1024);
    fail |= check_attention(64, 512, 128, 4, 40, 3000, 900, 512);     /* Flash, ring rows + selected rows */
    fail |= check_attention(64, 512, 128, 128, 37, 0, 8, 0);          /* Flash, window filling up in the batch */
    fail |= check_attention(4, 128, 8, 4, 33, 5, 20, 4);              /* tiny: 4 heads of one 16-head tile */
    fail |= check_attention(4, 128, 8, 8, 21, 30, 8, 0);
    if (timing) check_attention(64, 512, 128, 4, 2048, 2048, 1024, 512);
    printf("%s\n", fail ? "gemv_check: FAILED" : "gemv_check: all ok");
    return fail;
}
