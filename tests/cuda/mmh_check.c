/* mmh_check.c: the dense Q8_0 prefill products as one cuBLASLt f16 GEMM of
 * exact pieces (cu_mmh, src/cuda/cu_mmh.cu) against a double reference of
 * the dequantized weights times the f32 activations.
 *
 * Cases: Q8_0 as stored and repacked (Q8_0R), F16 weights ([W | W] x [xh | xl]), dense and grouped input (one
 * batched GEMM; MINKE_CUDA_MMH_BATCH=0: one GEMM a group, run-cuda.sh runs both),
 * token counts that fill no tile, activation rows of several kinds (plain,
 * six decades inside a row, all zero, spikes, tiny and huge rows in one
 * batch), weight rows whose scales span 2^-12, the output written with a
 * stride (the gaps must stay untouched) over NaN (cuBLASLt must not read it
 * with beta = 0) or added to (accumulate), Inf / NaN in some rows (the
 * others as without them); x split once for several products (cu_mmh_share_x: a Q8_0
 * product gives the bits of its own split, an F16 one stays within the tolerance, another
 * buffer's share is not taken). Lines:
 *   ok/FAIL mmh ... : max|diff| / max|W x| over all outputs <= 4e-5 (f32 sums
 *                     of ~1e4 products, as mmf16_check), and the worst
 *                     row's own ratio <= 3e-4 (|W x| without the added
 *                     output when accumulating, and the error beyond one
 *                     ulp of the stored output; a row 1e-7 of the batch's
 *                     amax keeps fewer bits: the batch shares one scale);
 *                     the int8 kernel's ratio on the same data beside it;
 *   time mmh ...    : Flash's dense prefill shapes at T = 4096, the int8
 *                     path (split launch + pre-split product) against
 *                     cu_mmh (expansion + GEMM), TFLOP/s of useful work.
 * --time adds the timings. Ends with 'mmh_check: all ok' or 'FAIL ...'.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "quant/quant.h"
#include "cuda/cu_ops.h"
#include "prefill_ref.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL cuda %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define TYPE_Q8_0R 108
#define TOL_ALL 4e-5
#define TOL_ROW 3e-4

static int failures;
/* one case: rows x in weights (ngroups: grouped input, row r reads slice r / (rows / ngroups)),
 * T tokens, activations scaled by xscale, output stride rows + pad */
/* repack: 0 Q8_0 as stored, 1 repacked (Q8_0R), 2 F16 weights */
static void check(int repack, int64_t rows, int64_t in, int T, int ngroups, int wide, float xscale, int pad, int accumulate) {
    const int f16 = repack == 2, qt = f16 ? GGML_TYPE_F16 : GGML_TYPE_Q8_0;
    const quant_traits *tr = quant_get(qt);
    uint64_t rb = quant_row_bytes(qt, in);
    int64_t arow = in * ngroups, ostride = rows + pad, grows = rows / ngroups;
    float *wf = malloc(sizeof(float) * in), *wd = malloc(sizeof(float) * rows * in), *x = malloc(sizeof(float) * T * arow);
    uint8_t *W = malloc(rb * rows);
    for (int64_t r = 0; r < rows; r++) {
        float mag = (1.0f + (float)(r % 7)) * (r % 5 == 0 ? 1.0f / 4096 : 1.0f);
        for (int64_t i = 0; i < in; i++) wf[i] = frand() * mag * (i % 64 < 32 ? 1.0f : 0.25f);
        tr->quant(wf, W + r * rb, in);
        tr->dequant(W + r * rb, wd + r * in, in);
    }
    for (int t = 0; t < T; t++) {
        act_row(x + (int64_t)t * arow, arow, t, wide ? 6 : 4);
        for (int64_t i = 0; i < arow; i++) x[(int64_t)t * arow + i] *= xscale;
    }
    float *y0 = malloc(sizeof(float) * T * ostride), *y = malloc(sizeof(float) * T * ostride);
    for (int64_t i = 0; i < (int64_t)T * ostride; i++) y0[i] = accumulate ? frand() : NAN;
    /* yr: the expected output; yp: the product alone (the scale of the errors) */
    double *yr = malloc(sizeof(double) * T * rows), *yp = malloc(sizeof(double) * T * rows);
    for (int t = 0; t < T; t++)
        for (int64_t r = 0; r < rows; r++) {
            const float *w = wd + r * in, *xr = x + (int64_t)t * arow + (r / grows) * in;
            double s = 0.0;
            for (int64_t i = 0; i < in; i++) s += (double)w[i] * xr[i];
            yp[(int64_t)t * rows + r] = s;
            yr[(int64_t)t * rows + r] = s + (accumulate ? y0[(int64_t)t * ostride + r] : 0.0);
        }
    void *dW; float *dx, *dy;
    CK(cudaMalloc(&dW, rb * rows)); CK(cudaMalloc((void **)&dx, sizeof(float) * T * arow));
    CK(cudaMalloc((void **)&dy, sizeof(float) * T * ostride));
    CK(cudaMemcpy(dW, W, rb * rows, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x, sizeof(float) * T * arow, cudaMemcpyHostToDevice));
    int wt = qt;
    if (repack == 1 && cu_repack_q8_0(dW, rows, in, rb, 0)) wt = TYPE_Q8_0R;
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    /* F16 weights reach cu_mmh with act_f32 0 (it is the quantized types' flag) */
    g.w = dW; g.wtype = wt; g.rows = rows; g.in = in; g.row_bytes = rb; g.act = dx; g.act_f32 = !f16;
    g.act_stride = arow * 4; g.act_div = 1; g.out = dy; g.out_stride = ostride; g.ntok = T; g.accumulate = accumulate;
    if (ngroups > 1) { g.group_rows = grows; g.group_act_bytes = in * 4; }
    char what[200];
    snprintf(what, sizeof what, "%s rows %lld in %lld T %d%s%s x%g out stride %lld%s",
             wt == TYPE_Q8_0R ? "q8_0r" : f16 ? "f16" : "q8_0",
             (long long)rows, (long long)in, T, ngroups > 1 ? " grouped" : "", wide ? " wide rows" : "", xscale,
             (long long)ostride, accumulate ? " accumulate" : " over NaN");
    double rel_mmq = -1;
    for (int path = 0; path < 2; path++) {     /* 0: cu_mmh, 1: the int8 kernel on the same data (info) */
        CK(cudaMemcpy(dy, y0, sizeof(float) * T * ostride, cudaMemcpyHostToDevice));
        /* path 1: the int8 kernel (Q8_0) or k_mmf16p (F16) on the same data */
        int ran = path == 0 ? cu_mmh(&g, T, 0) : cu_mmq(&g, (T + 63) / 64, 0);
        CK(cudaDeviceSynchronize());
        if (!ran) {
            if (path == 0) { printf("FAIL mmh %s: cu_mmh refused it\n", what); failures++; }
            continue;
        }
        CK(cudaMemcpy(y, dy, sizeof(float) * T * ostride, cudaMemcpyDeviceToHost));
        pr_err e = {0, 0, 0, 0};
        int bad_gap = 0;
        for (int t = 0; t < T; t++) {
            for (int64_t r = rows; r < ostride; r++)     /* the gaps: untouched */
                if (memcmp(&y[(int64_t)t * ostride + r], &y0[(int64_t)t * ostride + r], 4)) bad_gap++;
            pr_row(&e, y + (int64_t)t * ostride, yr + (int64_t)t * rows, yp + (int64_t)t * rows, rows);
        }
        double rel = pr_rel(&e), worst = e.worst;    /* against the largest |W x| */
        int nonfinite = e.nonfinite;
        if (path == 1) { rel_mmq = rel; continue; }
        int ok = rel <= TOL_ALL && worst <= TOL_ROW && !bad_gap && !nonfinite;
        printf("%s mmh %s: max|diff|/max|y| %.2e, worst row %.2e%s%s\n", ok ? "ok" : "FAIL", what, rel, worst,
               bad_gap ? ", GAPS WRITTEN" : "", nonfinite ? ", NON-FINITE OUTPUTS" : "");
        failures += !ok;
    }
    if (rel_mmq >= 0) printf("info mmh %s: the int8 kernel %.2e\n", what, rel_mmq);
    if (ngroups == 1 || ngroups * in <= (1 << 20)) {
        /* the activations' amax handed in (cu_gemv_args.act_amax, as the attention finds o's):
         * the same bits as cu_mmh finding it (one GEMM for the whole row: its amax is the batch's) */
        float am = 0.f;
        for (int64_t i = 0; i < (int64_t)T * arow; i++) if (fabsf(x[i]) <= 3.4028235e38f && fabsf(x[i]) > am) am = fabsf(x[i]);
        unsigned *da;
        float *y2 = malloc(sizeof(float) * T * ostride);
        CK(cudaMalloc((void **)&da, 4));
        CK(cudaMemcpy(da, &am, 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dy, y0, sizeof(float) * T * ostride, cudaMemcpyHostToDevice));
        int r1 = cu_mmh(&g, T, 0);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(y, dy, sizeof(float) * T * ostride, cudaMemcpyDeviceToHost));
        g.act_amax = da;
        CK(cudaMemcpy(dy, y0, sizeof(float) * T * ostride, cudaMemcpyHostToDevice));
        int r2 = cu_mmh(&g, T, 0);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(y2, dy, sizeof(float) * T * ostride, cudaMemcpyDeviceToHost));
        g.act_amax = NULL;
        size_t nd = 0;
        for (int64_t i = 0; i < (int64_t)T * ostride; i++) if (memcmp(&y[i], &y2[i], 4)) nd++;
        int ok = r1 && r2 && nd == 0;
        printf("%s mmh %s: with the amax handed in, %zu outputs differ\n", ok ? "ok" : "FAIL", what, nd);
        failures += !ok;
        cudaFree(da); free(y2);
    }
    if (ngroups == 1) {
        /* x split once for all its products (cu_mmh_share_x): a Q8_0 product takes the same B' as
         * its own split (the same bits); an F16 product reads [xh | xl] from it (ld 3 in: within the
         * tolerance); a share of another buffer (the same values) is not taken */
        float *y1 = malloc(sizeof(float) * T * ostride), *y2 = malloc(sizeof(float) * T * ostride);
        float *y3 = malloc(sizeof(float) * T * ostride), *dx2;
        CK(cudaMalloc((void **)&dx2, sizeof(float) * T * arow));
        CK(cudaMemcpy(dx2, x, sizeof(float) * T * arow, cudaMemcpyHostToDevice));
        float *outs[3] = {y1, y2, y3};
        int ran = 1, made = 1;
        for (int k = 0; k < 3; k++) {
            if (k == 1) made &= cu_mmh_share_x(dx, T, (int)arow, arow, 0);
            if (k == 2) made &= cu_mmh_share_x(dx2, T, (int)arow, arow, 0);
            CK(cudaMemcpy(dy, y0, sizeof(float) * T * ostride, cudaMemcpyHostToDevice));
            ran &= cu_mmh(&g, T, 0);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(outs[k], dy, sizeof(float) * T * ostride, cudaMemcpyDeviceToHost));
        }
        /* the share is what the product reads: x zeroed behind it gives the shared result again,
         * and after cu_mmh_share_clear the product splits the zeros itself */
        float *y4 = malloc(sizeof(float) * T * ostride), *y5 = malloc(sizeof(float) * T * ostride);
        made &= cu_mmh_share_x(dx, T, (int)arow, arow, 0);
        CK(cudaMemset(dx, 0, sizeof(float) * T * arow));
        for (int k = 0; k < 2; k++) {
            if (k == 1) cu_mmh_share_clear();
            CK(cudaMemcpy(dy, y0, sizeof(float) * T * ostride, cudaMemcpyHostToDevice));
            ran &= cu_mmh(&g, T, 0);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(k ? y5 : y4, dy, sizeof(float) * T * ostride, cudaMemcpyDeviceToHost));
        }
        CK(cudaMemcpy(dx, x, sizeof(float) * T * arow, cudaMemcpyHostToDevice));
        size_t nd4 = 0, nd5 = 0;
        for (int64_t i = 0; i < (int64_t)T * ostride; i++) {
            nd4 += memcmp(&y2[i], &y4[i], 4) != 0;
            nd5 += memcmp(&y2[i], &y5[i], 4) != 0;
        }
        free(y4); free(y5);
        size_t nd = 0, nd2 = 0;
        for (int64_t i = 0; i < (int64_t)T * ostride; i++) {
            nd += memcmp(&y1[i], &y2[i], 4) != 0;
            nd2 += memcmp(&y1[i], &y3[i], 4) != 0;
        }
        pr_err e = {0, 0, 0, 0};
        for (int t = 0; t < T; t++) pr_row(&e, y2 + (int64_t)t * ostride, yr + (int64_t)t * rows, yp + (int64_t)t * rows, rows);
        const double rel = pr_rel(&e);
        int ok = ran && made && nd2 == 0 && nd4 == 0 && nd5 > 0 &&
                 (f16 ? rel <= TOL_ALL && e.worst <= TOL_ROW && !e.nonfinite : nd == 0);
        printf("%s mmh %s: x split once (shared): %zu outputs differ from its own split (%s), max|diff|/max|y| %.2e; "
               "another buffer's share not taken (%zu differ); x zeroed behind the share: %zu differ (0 wanted), "
               "after clearing %zu (some wanted)\n", ok ? "ok" : "FAIL", what, nd, f16 ? "ld 3 in: any" : "must be 0", rel,
               nd2, nd4, nd5);
        failures += !ok;
        cudaFree(dx2); free(y1); free(y2); free(y3);
    }
    cudaFree(dW); cudaFree(dx); cudaFree(dy);
    cu_mmh_release(0);     /* the weights go: their kept dmax too (as when a model is freed) */
    free(wf); free(wd); free(x); free(W); free(y0); free(y); free(yr); free(yp);
}

/* a batch with an Inf in one row and a NaN in another: those rows' outputs
 * are not finite, every other row is as without them (the batch's scale
 * comes from the finite values only) */
static void check_nonfinite(void) {
    const int64_t rows = 128, in = 512;
    const int T = 40, rinf = 5, rnan = 9;
    const quant_traits *tr = quant_get(GGML_TYPE_Q8_0);
    uint64_t rb = quant_row_bytes(GGML_TYPE_Q8_0, in);
    float *wf = malloc(sizeof(float) * in), *wd = malloc(sizeof(float) * rows * in), *x = malloc(sizeof(float) * T * in);
    float *y = malloc(sizeof(float) * T * rows);
    uint8_t *W = malloc(rb * rows);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < in; i++) wf[i] = frand() * 0.05f;
        tr->quant(wf, W + r * rb, in);
        tr->dequant(W + r * rb, wd + r * in, in);
    }
    for (int64_t i = 0; i < (int64_t)T * in; i++) x[i] = frand();
    x[(int64_t)rinf * in + 3] = INFINITY;
    x[(int64_t)rnan * in + 100] = NAN;
    void *dW; float *dx, *dy;
    CK(cudaMalloc(&dW, rb * rows)); CK(cudaMalloc((void **)&dx, sizeof(float) * T * in));
    CK(cudaMalloc((void **)&dy, sizeof(float) * T * rows));
    CK(cudaMemcpy(dW, W, rb * rows, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x, sizeof(float) * T * in, cudaMemcpyHostToDevice));
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    g.w = dW; g.wtype = GGML_TYPE_Q8_0; g.rows = rows; g.in = in; g.row_bytes = rb; g.act = dx; g.act_f32 = 1;
    g.act_stride = in * 4; g.act_div = 1; g.out = dy; g.out_stride = rows; g.ntok = T;
    int ran = cu_mmh(&g, T, 0);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(y, dy, sizeof(float) * T * rows, cudaMemcpyDeviceToHost));
    double ymax = 0, dmax = 0;
    int finite_bad = 0;
    for (int t = 0; t < T; t++)
        for (int64_t r = 0; r < rows; r++) {
            float v = y[(int64_t)t * rows + r];
            if (t == rinf || t == rnan) { finite_bad += isfinite(v) != 0; continue; }
            double s = 0;
            for (int64_t i = 0; i < in; i++) s += (double)wd[r * in + i] * x[(int64_t)t * in + i];
            if (fabs(s) > ymax) ymax = fabs(s);
            double d = isfinite(v) ? fabs(v - s) : INFINITY;
            if (d > dmax) dmax = d;
        }
    int ok = ran && ymax > 0 && dmax / ymax <= TOL_ALL && !finite_bad;
    printf("%s mmh Inf / NaN activations in two rows: the other rows within %.2e of max|y|, %d finite outputs in "
           "those two rows\n", ok ? "ok" : "FAIL", ymax > 0 ? dmax / ymax : 0.0, finite_bad);
    failures += !ok;
    cudaFree(dW); cudaFree(dx); cudaFree(dy);
    free(wf); free(wd); free(x); free(y); free(W);
}

static float time_ms(cudaEvent_t a, cudaEvent_t b, int reps) {
    float ms = 0;
    CK(cudaEventSynchronize(b));
    cudaEventElapsedTime(&ms, a, b);
    return ms / reps;
}

/* Flash's dense prefill shapes, T = 4096 */
static void time_case(const char *name, int64_t rows, int64_t in, int ngroups) {
    const int T = 4096, reps = 5;
    uint64_t rb = quant_row_bytes(GGML_TYPE_Q8_0, in);
    int64_t arow = in * ngroups;
    void *dW, *dsp; float *dx, *dy;
    int64_t sb = cu_mmq_split_row_bytes(arow);
    if (cudaMalloc(&dW, rb * rows) != cudaSuccess || cudaMalloc((void **)&dx, 4 * T * arow) != cudaSuccess ||
        cudaMalloc((void **)&dy, 4 * T * rows) != cudaSuccess || cudaMalloc(&dsp, sb * T) != cudaSuccess) {
        printf("skip time %s (memory)\n", name);
        cudaGetLastError();
        return;
    }
    cu_synth_fill(dW, GGML_TYPE_Q8_0, rows * in, 99, 0.01f, 0, 0);
    cu_synth_fill(dx, GGML_TYPE_F32, (int64_t)T * arow, 7, 1.0f, 0, 0);
    if (!cu_repack_q8_0(dW, rows, in, rb, 0)) { printf("skip time %s (repack)\n", name); return; }
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    g.w = dW; g.wtype = TYPE_Q8_0R; g.rows = rows; g.in = in; g.row_bytes = rb; g.act = dx; g.act_f32 = 1;
    g.act_stride = arow * 4; g.act_div = 1; g.out = dy; g.out_stride = rows; g.ntok = T;
    if (ngroups > 1) { g.group_rows = rows / ngroups; g.group_act_bytes = in * 4; }
    cu_gemv_args ps = g;
    ps.act = dsp; ps.act_stride = sb; ps.act_f32 = 0;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    float t8 = 0, th = 0;
    for (int path = 0; path < 2; path++) {
        for (int i = 0; i <= reps; i++) {
            if (i == 1) cudaEventRecord(e0, 0);
            if (path == 0) { cu_mmq_split_act(TYPE_Q8_0R, dx, T, arow, arow * 4, dsp, 0); cu_mmq_presplit(&ps, T / 64, 0); }
            else if (!cu_mmh(&g, T, 0)) { printf("FAIL time %s: cu_mmh refused it\n", name); failures++; break; }
        }
        cudaEventRecord(e1, 0);
        if (path == 0) t8 = time_ms(e0, e1, reps); else th = time_ms(e0, e1, reps);
    }
    double fl = 2.0 * rows * in * T;
    printf("time mmh %-22s %5lld x %5lld%s T %d: int8 pieces %.3f ms (%.0f TFLOP/s), f16 GEMM %.3f ms (%.0f TFLOP/s), x%.2f\n",
           name, (long long)rows, (long long)in, ngroups > 1 ? " grouped" : "", T, t8, fl / t8 / 1e9, th, fl / th / 1e9, t8 / th);
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    cudaFree(dW); cudaFree(dx); cudaFree(dy); cudaFree(dsp);
}

int main(int argc, char **argv) {
    int timed = argc > 1 && !strcmp(argv[1], "--time");
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) { printf("FAIL no CUDA device\n"); return 1; }
    setvbuf(stdout, NULL, _IOLBF, 0);
    cu_ops_init();
    cu_mmh_set(1, 1, 1);
    check(1, 256, 1024, 96, 1, 0, 1.0f, 0, 0);
    check(0, 256, 1024, 96, 1, 0, 1.0f, 0, 0);
    check(1, 300, 512, 77, 1, 1, 1.0f, 3, 0);          /* rows and tokens filling no tile, a stride */
    check(1, 200, 2048, 130, 1, 0, 1e-6f, 0, 1);       /* tiny activations, accumulate */
    check(1, 200, 2048, 64, 1, 0, 3e3f, 5, 1);
    check(1, 512, 256, 160, 4, 0, 1.0f, 0, 0);         /* grouped input (out_a) */
    check(0, 384, 512, 45, 3, 1, 1.0f, 2, 1);
    check(1, 64, 4096, 33, 1, 1, 1.0f, 0, 0);
    /* F16 weights (compressors, indexer, router): [W | W] x [xh | xl] */
    check(2, 256, 1024, 96, 1, 0, 1.0f, 0, 0);
    check(2, 300, 512, 77, 1, 1, 1.0f, 3, 0);
    check(2, 200, 2048, 130, 1, 0, 1e-6f, 0, 1);
    check(2, 1024, 4096, 257, 1, 1, 3e3f, 0, 0);
    check_nonfinite();
    /* the switch: only dense Q8_0 with f32 activations from the thresholds */
    {
        cu_gemv_args g;
        memset(&g, 0, sizeof g);
        g.wtype = TYPE_Q8_0R; g.rows = 4096; g.in = 4096; g.act_f32 = 1; g.act_stride = 4 * 4096;
        g.act = (const void *)(uintptr_t)4096;
        cu_mmh_set(1, 256, 1 << 20);
        int a = cu_mmh_taken(&g, 4096), b = cu_mmh_taken(&g, 255);
        g.act_f32 = 0; int c = cu_mmh_taken(&g, 4096); g.act_f32 = 1;
        g.wtype = GGML_TYPE_Q2_K; int d = cu_mmh_taken(&g, 4096); g.wtype = TYPE_Q8_0R;
        g.rows = 128; int e = cu_mmh_taken(&g, 4096); g.rows = 4096;
        g.wtype = GGML_TYPE_F16; g.row_bytes = 2 * 4096; g.w = (const uint8_t *)(uintptr_t)4096;
        int f = cu_mmh_taken(&g, 4096);
        g.act_f32 = 0; f = f && cu_mmh_taken(&g, 4096); g.act_f32 = 1;      /* F16 weights: f32 x either way */
        int ok = a && !b && !c && !d && !e && f;
        printf("%s mmh switch: taken for 4096 x 4096 Q8_0R and F16 at 4096 tokens, not at 255, not for q8 activations, "
               "Q2_K or a 128-row matrix\n", ok ? "ok" : "FAIL");
        failures += !ok;
    }
    if (timed) {
        cu_mmh_set(1, 1, 1);
        time_case("q_b", 32768, 1024, 1);
        time_case("out_a (8 groups)", 8192, 4096, 8);
        time_case("out_b", 4096, 8192, 1);
        time_case("shared gate / up", 2048, 4096, 1);
        time_case("shared down", 4096, 2048, 1);
        time_case("q_a", 1024, 4096, 1);
        time_case("kv", 512, 4096, 1);
    }
    if (failures) { printf("FAIL mmh_check: %d failure(s)\n", failures); return 1; }
    printf("mmh_check: all ok\n");
    return 0;
}
