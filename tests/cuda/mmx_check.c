/* mmx_check.c: the routed experts' prefill products on the f16 tensor cores
 * (cu_mmx_split + cu_mmx, src/cuda/cu_mmx.cu) against a double reference of
 * the dequantized weights times the f32 activations.
 *
 * Cases: IQ2_XXS (repacked on the device, as the backend loads it) and Q2_K
 * in MoE tiles of (token, expert) pairs built by cu_moe_tiles, gate-shaped
 * (activation row = pair / K) and down-shaped (a row per pair), experts with
 * one pair and with several tiles, rows filling no block, activation rows of
 * several kinds (plain, six decades inside a row, all zero, spikes, tiny and
 * huge rows in one batch), the output added to (accumulate) or written over
 * NaN, and Inf / NaN in two token rows (their outputs not finite, the others
 * as without them). Lines:
 *   ok/FAIL mmx ... : max|diff| / max|W x| over all outputs <= 2e-5 and the
 *                     worst row's own ratio <= 3e-4 (the error beyond one
 *                     ulp of the stored output); the int8 kernel's ratio on
 *                     the same data beside it (info); and the block layout
 *                     MINKE_CUDA_MMX_TILE asks for ran (cu_mmx_last_layout);
 *   time mmx ...    : Flash's MoE prefill shapes (4096 tokens x 6 of 256
 *                     experts: IQ2 gate 2048 x 4096, Q2_K down 4096 x 2048),
 *                     the int8 path (split + pre-split product) against
 *                     cu_mmx (split + product), TFLOP/s of useful work.
 * --time adds the timings (--time-only: only them, for profilers). Ends with 'mmx_check: all ok' or 'FAIL ...'.
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
#define TYPE_IQ2R 116
#define TOL_ALL 2e-5
#define TOL_ROW 3e-4

static int failures;
/* K distinct experts of E per token: uniform, or skewed so that some experts get several
 * tiles and some one pair */
static void pick_experts(int *sel, int T, int E, int K, int skewed) {
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) {
            int e, dup;
            do {
                double u = urand();
                e = (int)((skewed ? u * u : u) * E);
                dup = 0;
                for (int j = 0; j < k; j++) dup |= sel[t * K + j] == e;
            } while (dup);
            sel[t * K + k] = e;
        }
}

/* One expert a token (K = 1) with given pair counts: expert e gets counts[e] of the T = sum
 * tokens, in a random order (check's deterministic routing: which block bodies run is known) */
static const int *g_counts;
static void pick_counts(int *sel, int T, int E, const int *counts) {
    int t = 0;
    for (int e = 0; e < E; e++)
        for (int i = 0; i < counts[e] && t < T; i++) sel[t++] = e;
    for (int i = T - 1; i > 0; i--) {
        const int j = (int)(urand() * (i + 1)) % (i + 1), v = sel[i];
        sel[i] = sel[j];
        sel[j] = v;
    }
}

/* MoE tiles of 64 pairs from dsel into dt (P + 4 maxt + 1 ints) */
static int tiles_set(cu_gemv_args *g, const int *dsel, int P, int E, int *dt) {
    int maxt = P / 64 + 1 + E;
    int *pairs = dt, *ts = dt + P, *tc = ts + maxt, *tx = tc + maxt, *nt = tx + maxt;
    cu_moe_tiles(dsel, P, E, 64, pairs, ts, tc, tx, nt, 0);
    g->tile_pairs = pairs; g->tile_start = ts; g->tile_count = tc; g->tile_expert = tx; g->n_tiles = nt;
    return maxt;
}

/* the block layout cu_mmx should take for a weight type under MINKE_CUDA_MMX_TILE: 6 and 8
 * (wgmma) for IQ2 and Q2_K on an sm_90 device, 7, 9, 11 and 12 for IQ2 there (Q2_K: 6 under 9,
 * 11 and 12); layout 1 for their other cases; 1-5 as asked */
static int want_layout(int type) {
    const char *e = getenv("MINKE_CUDA_MMX_TILE"), *q = getenv("MINKE_CUDA_MMX_TILE_Q2K");
    int t = e && *e ? atoi(e) : 9;
    if (t < 1 || t > 12 || t == 10) t = 9;
    if (type == GGML_TYPE_Q2_K) t = q && *q && atoi(q) >= 1 && atoi(q) <= 9 ? atoi(q) : t >= 9 ? 6 : t;
    if (t < 6) return t;
    int dev = 0, major = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (major != 9) return 1;
    if (type == GGML_TYPE_Q2_K) return t == 7 || t == 9 ? 1 : t;
    return t;
}

/* The product of g (exact activations dx, nact rows of in floats) through cu_mmx (path 0) or
 * the int8 kernels (path 1) into g->out; 0 when refused */
static int run_path(const cu_gemv_args *g, int path, const float *dx, int64_t nact, int ntiles, void *dsp) {
    cu_gemv_args q = *g;
    if (path == 1) return cu_mmq(&q, ntiles, 0);
    if (!cu_mmx_split(g->wtype, dx, nact, g->in, g->in * 4, dsp, 0)) return 0;
    q.act = dsp;
    q.act_stride = cu_mmx_split_row_bytes(g->wtype, g->in);
    return cu_mmx(&q, ntiles, 0);
}

/* one case: E experts of rows x in, T tokens with K experts each; per_pair: an activation row
 * per pair (down) else per token (gate); xscale scales the activations; accumulate adds to a
 * random output; bad: Inf / NaN in token rows 1 and 3 */
static void check(int type, int64_t rows, int64_t in, int T, int E, int K, int per_pair, float xscale, int accumulate,
                  int bad) {
    const quant_traits *tr = quant_get(type);
    uint64_t rb = quant_row_bytes(type, in);
    int P = T * K, nact = per_pair ? P : T;
    float *wf = malloc(sizeof(float) * in), *wd = malloc(sizeof(float) * rows * E * in), *x = malloc(sizeof(float) * nact * in);
    uint8_t *W = malloc(rb * rows * E);
    for (int64_t r = 0; r < rows * E; r++) {
        float mag = (1.0f + (float)(r % 7)) * (r % 5 == 0 ? 1.0f / 4096 : 1.0f);
        for (int64_t i = 0; i < in; i++) wf[i] = frand() * mag * (i % 512 < 256 ? 1.0f : 0.125f);
        tr->quant(wf, W + r * rb, in);
        tr->dequant(W + r * rb, wd + r * in, in);
    }
    for (int a = 0; a < nact; a++) {
        act_row(x + (int64_t)a * in, in, a, 6);
        for (int64_t i = 0; i < in; i++) x[(int64_t)a * in + i] *= xscale;
    }
    int rinf = per_pair ? 1 * K : 1, rnan = per_pair ? 3 * K : 3;    /* activation rows of tokens 1 and 3 */
    if (bad) { x[(int64_t)rinf * in + 7] = INFINITY; x[(int64_t)rnan * in + in - 2] = NAN; }
    int *sel = malloc(sizeof(int) * P);
    if (g_counts) pick_counts(sel, T, E, g_counts);
    else pick_experts(sel, T, E, K, 1);
    float *y0 = malloc(sizeof(float) * P * rows), *y = malloc(sizeof(float) * P * rows);
    for (int64_t i = 0; i < (int64_t)P * rows; i++) y0[i] = accumulate ? frand() : NAN;
    double *yr = malloc(sizeof(double) * P * rows), *yp = malloc(sizeof(double) * P * rows);
    for (int p = 0; p < P; p++) {
        const float *xa = x + (int64_t)(per_pair ? p : p / K) * in;
        for (int64_t r = 0; r < rows; r++) {
            const float *w = wd + ((int64_t)sel[p] * rows + r) * in;
            double s = 0;
            for (int64_t i = 0; i < in; i++) s += (double)w[i] * xa[i];
            yp[(int64_t)p * rows + r] = s;
            yr[(int64_t)p * rows + r] = s + (accumulate ? y0[(int64_t)p * rows + r] : 0.0);
        }
    }
    void *dW, *dsp; float *dx, *dy; int *dsel, *dt;
    int maxt = P / 64 + 1 + E;
    CK(cudaMalloc(&dW, rb * rows * E)); CK(cudaMalloc((void **)&dx, sizeof(float) * nact * in));
    CK(cudaMalloc((void **)&dy, sizeof(float) * P * rows)); CK(cudaMalloc((void **)&dsel, sizeof(int) * P));
    CK(cudaMalloc((void **)&dt, sizeof(int) * (P + 4 * maxt + 1)));
    CK(cudaMalloc(&dsp, cu_mmx_split_row_bytes(type, in) * nact));
    CK(cudaMemcpy(dW, W, rb * rows * E, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x, sizeof(float) * nact * in, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dsel, sel, sizeof(int) * P, cudaMemcpyHostToDevice));
    int wt = type;
    if (type == GGML_TYPE_IQ2_XXS && cu_repack_iq2_xxs(dW, rows * E, in, rb, 0)) wt = TYPE_IQ2R;
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    g.w = dW; g.wtype = wt; g.rows = rows; g.in = in; g.row_bytes = rb; g.expert_bytes = rb * rows;
    g.act = dx; g.act_f32 = 1; g.act_stride = in * 4; g.act_div = per_pair ? 1 : K;
    g.out = dy; g.out_stride = rows; g.accumulate = accumulate;
    int ntiles = tiles_set(&g, dsel, P, E, dt);
    char what[200];
    snprintf(what, sizeof what, "%s rows %lld in %lld T %d E %d K %d%s x%g%s%s", wt == TYPE_IQ2R ? "iq2r" : tr->name,
             (long long)rows, (long long)in, T, E, K, per_pair ? " per pair" : "", xscale,
             accumulate ? " accumulate" : " over NaN", bad ? " Inf/NaN rows" : "");
    double rel_mmq = -1;
    for (int path = 0; path < 2; path++) {
        CK(cudaMemcpy(dy, y0, sizeof(float) * P * rows, cudaMemcpyHostToDevice));
        int ran = run_path(&g, path, dx, nact, ntiles, dsp);
        CK(cudaDeviceSynchronize());
        if (!ran) {
            if (path == 0) { printf("FAIL mmx %s: refused\n", what); failures++; }
            continue;
        }
        CK(cudaMemcpy(y, dy, sizeof(float) * P * rows, cudaMemcpyDeviceToHost));
        pr_err e = {0, 0, 0, 0};
        int finite_bad = 0;
        for (int p = 0; p < P; p++) {
            int arow = per_pair ? p : p / K;
            const float *yrow = y + (int64_t)p * rows;
            if (bad && (arow == rinf || arow == rnan)) {     /* Inf / NaN rows: no finite output */
                for (int64_t r = 0; r < rows; r++) finite_bad += isfinite(yrow[r]) != 0 && !accumulate;
                continue;
            }
            pr_row(&e, yrow, yr + (int64_t)p * rows, yp + (int64_t)p * rows, rows);
        }
        double rel = pr_rel(&e), worst = e.worst;
        int nonfinite = e.nonfinite;
        if (path == 1) { rel_mmq = rel; continue; }
        /* the layout asked for ran (6, wgmma: IQ2 on sm_90; elsewhere layout 1 stands in) */
        const int layout = cu_mmx_last_layout(), want = want_layout(type);
        int ok = rel <= TOL_ALL && worst <= TOL_ROW && !nonfinite && !finite_bad && layout == want;
        printf("%s mmx %s (layout %d): max|diff|/max|y| %.2e, worst row %.2e%s%s%s\n", ok ? "ok" : "FAIL", what, layout, rel,
               worst, nonfinite ? ", NON-FINITE OUTPUTS" : "", finite_bad ? ", FINITE OUTPUTS OF INF/NAN ROWS" : "",
               layout != want ? ", NOT THE LAYOUT ASKED FOR" : "");
        failures += !ok;
    }
    if (rel_mmq >= 0) printf("info mmx %s: the int8 kernel %.2e\n", what, rel_mmq);
    cudaFree(dW); cudaFree(dx); cudaFree(dy); cudaFree(dsel); cudaFree(dt); cudaFree(dsp);
    free(wf); free(wd); free(x); free(W); free(sel); free(y0); free(y); free(yr); free(yp);
}

/* Flash's MoE prefill shapes: T tokens x K of E experts */
static void time_case(int type, int64_t rows, int64_t in, int per_pair, int skewed) {
    const int T = 4096, E = 256, K = 6, P = T * K, reps = 5;
    int nact = per_pair ? P : T;
    uint64_t rb = quant_row_bytes(type, in);
    void *dW, *dsp8, *dspx; float *dx, *dy; int *dsel, *dt;
    int64_t sb8 = cu_mmq_split_row_bytes(in), sbx = cu_mmx_split_row_bytes(type, in);
    int maxt = P / 64 + 1 + E;
    if (cudaMalloc(&dW, rb * rows * E) != cudaSuccess || cudaMalloc((void **)&dx, 4 * (size_t)nact * in) != cudaSuccess ||
        cudaMalloc((void **)&dy, 4 * (size_t)P * rows) != cudaSuccess || cudaMalloc(&dsp8, sb8 * nact) != cudaSuccess ||
        cudaMalloc(&dspx, sbx * nact) != cudaSuccess) {
        printf("skip time (memory)\n");
        cudaGetLastError();
        return;
    }
    CK(cudaMalloc((void **)&dsel, sizeof(int) * P)); CK(cudaMalloc((void **)&dt, sizeof(int) * (P + 4 * maxt + 1)));
    cu_synth_fill(dW, type, rows * E * in, 99, 0.01f, 0, 0);
    cu_synth_fill(dx, GGML_TYPE_F32, (int64_t)nact * in, 7, 1.0f, 0, 0);
    int wt = type;
    if (type == GGML_TYPE_IQ2_XXS && cu_repack_iq2_xxs(dW, rows * E, in, rb, 0)) wt = TYPE_IQ2R;
    int *sel = malloc(sizeof(int) * P);
    pick_experts(sel, T, E, K, skewed);
    CK(cudaMemcpy(dsel, sel, sizeof(int) * P, cudaMemcpyHostToDevice));
    free(sel);
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    g.w = dW; g.wtype = wt; g.rows = rows; g.in = in; g.row_bytes = rb; g.expert_bytes = rb * rows;
    g.act_f32 = 1; g.act_div = per_pair ? 1 : K; g.out = dy; g.out_stride = rows;
    int ntiles = tiles_set(&g, dsel, P, E, dt);
    cu_gemv_args q8 = g, qx = g;
    q8.act = dsp8; q8.act_stride = sb8;
    qx.act = dspx; qx.act_stride = sbx;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    float t[2][2] = {{0, 0}, {0, 0}};    /* [path][split, product] */
    for (int path = 0; path < 2; path++)
        for (int part = 0; part < 2; part++) {
            for (int i = 0; i <= reps; i++) {
                if (i == 1) cudaEventRecord(e0, 0);
                if (part == 0) {
                    if (path == 0) cu_mmq_split_act(wt, dx, nact, in, in * 4, dsp8, 0);
                    else cu_mmx_split(wt, dx, nact, in, in * 4, dspx, 0);
                } else {
                    if (path == 0) cu_mmq_presplit(&q8, ntiles, 0);
                    else if (!cu_mmx(&qx, ntiles, 0)) { printf("FAIL time mmx: refused\n"); failures++; }
                }
            }
            cudaEventRecord(e1, 0);
            CK(cudaEventSynchronize(e1));
            CK(cudaGetLastError());
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            t[path][part] = ms / reps;
        }
    double fl = 2.0 * rows * in * P;
    float a = t[0][0] + t[0][1], b = t[1][0] + t[1][1];
    printf("time mmx %-6s moe %lld x %lld, %d tokens x %d of %d%s: int8 pieces %.3f + %.3f ms (%.0f TFLOP/s), f16 %.3f + %.3f ms "
           "(%.0f TFLOP/s), x%.2f\n", wt == TYPE_IQ2R ? "iq2r" : "q2_K", (long long)rows, (long long)in, T, K, E,
           skewed ? " (skewed)" : "", t[0][0], t[0][1],
           fl / a / 1e9, t[1][0], t[1][1], fl / b / 1e9, a / b);
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    cudaFree(dW); cudaFree(dx); cudaFree(dy); cudaFree(dsp8); cudaFree(dspx); cudaFree(dsel); cudaFree(dt);
}

int main(int argc, char **argv) {
    pr_rng = 0x2545F4914F6CDD1Dull;    /* not mmh_check's sequence */
    int timed = argc > 1 && !strncmp(argv[1], "--time", 6), only = argc > 1 && !strcmp(argv[1], "--time-only");
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) { printf("FAIL no CUDA device\n"); return 1; }
    setvbuf(stdout, NULL, _IOLBF, 0);
    cu_ops_init();
    if (cu_tables_init_from_quant()) { printf("FAIL tables\n"); return 1; }
    cu_mmx_set(1, 1, 0);
    for (int ti = 0; ti < 2 && !only; ti++) {
        int type = ti ? GGML_TYPE_Q2_K : GGML_TYPE_IQ2_XXS;
        check(type, 256, 512, 70, 8, 3, 0, 1.0f, 0, 0);        /* gate-shaped */
        check(type, 512, 256, 70, 8, 3, 1, 1.0f, 0, 0);        /* down-shaped: a row per pair */
        check(type, 200, 1024, 150, 5, 2, 0, 1e-6f, 1, 0);     /* rows filling no block, tiny rows, accumulate */
        check(type, 128, 768, 96, 16, 6, 1, 3e3f, 0, 1);       /* huge rows, Inf / NaN */
        check(type, 384, 2048, 33, 40, 4, 0, 1.0f, 1, 1);
        check(type, 128, 512, 600, 3, 2, 0, 1.0f, 0, 0);       /* an expert of ~11 tiles: layout 9's pairing far
                                                                  from the expert's first tile */
        check(type, 256, 512, 360, 8, 2, 0, 1.0f, 0, 0);       /* ~90 and ~110 pairs an expert (skewed routing) */
        check(type, 256, 512, 440, 8, 2, 0, 1.0f, 0, 0);
        {
            /* every block width the wgmma layouts pick, by construction: lone tiles of 10, 30, 45
             * and 60 pairs (16-, 32-, 48-, 64-pair bodies), tile pairs of 90, 105, 120 and 128
             * (96, 112, 128; layout 6: a full tile and a partial one of 26, 41, 56, 64) */
            static const int counts[8] = {10, 30, 45, 60, 90, 105, 120, 128};
            g_counts = counts;
            check(type, 256, 512, 588, 8, 1, 0, 1.0f, 0, 0);
            check(type, 256, 512, 588, 8, 1, 1, 1.0f, 1, 0);   /* down-shaped, accumulate */
            g_counts = NULL;
        }
    }
    /* the down's split straight from the gate and up rows (cu_mmx_split_glu) against the SwiGLU
     * rows split (cu_swiglu + cu_mmx_split): the same bytes, with and without router weights,
     * clamped or not, for both row formats, with Inf / NaN among the gates */
    for (int ti = 0; ti < 2 && !only; ti++) {
        const int type = ti ? GGML_TYPE_Q2_K : TYPE_IQ2R, P = 37, n = ti ? 768 : 512;
        const int64_t rb = cu_mmx_split_row_bytes(type, n);
        float *hg = malloc(sizeof(float) * P * n), *hu = malloc(sizeof(float) * P * n), *hw = malloc(sizeof(float) * P);
        for (int64_t i = 0; i < (int64_t)P * n; i++) { hg[i] = 12.f * frand(); hu[i] = 12.f * frand(); }
        for (int p = 0; p < P; p++) hw[p] = 0.5f + 0.5f * frand();
        hg[5 * n + 7] = INFINITY; hg[9 * n + 300] = NAN;
        float *dg, *du, *dw, *dmid;
        uint8_t *o1, *o2, *h1 = malloc(rb * P), *h2 = malloc(rb * P);
        CK(cudaMalloc((void **)&dg, sizeof(float) * P * n)); CK(cudaMalloc((void **)&du, sizeof(float) * P * n));
        CK(cudaMalloc((void **)&dw, sizeof(float) * P)); CK(cudaMalloc((void **)&dmid, sizeof(float) * P * n));
        CK(cudaMalloc((void **)&o1, rb * P)); CK(cudaMalloc((void **)&o2, rb * P));
        CK(cudaMemcpy(dg, hg, sizeof(float) * P * n, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(du, hu, sizeof(float) * P * n, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dw, hw, sizeof(float) * P, cudaMemcpyHostToDevice));
        int ok = 1;
        for (int v = 0; v < 4; v++) {
            const float *w = v & 1 ? dw : NULL;
            const float limit = v & 2 ? 7.f : 0.f;
            CK(cudaMemset(o1, 0x5A, rb * P)); CK(cudaMemset(o2, 0xA5, rb * P));
            cu_swiglu(dg, du, w, P, n, limit, dmid, 0);
            const int r1 = cu_mmx_split(type, dmid, P, n, (int64_t)n * 4, o1, 0);
            const int r2 = cu_mmx_split_glu(type, dg, du, w, limit, P, n, o2, 0);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(h1, o1, rb * P, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(h2, o2, rb * P, cudaMemcpyDeviceToHost));
            size_t nd = 0;
            const int64_t used = 16 + 4 * (int64_t)n + (ti ? n / 4 : 0);   /* exponent, padding, pieces (, sums) */
            for (int p = 0; p < P; p++)
                for (int64_t b = 0; b < used && b < rb; b++) nd += h1[p * rb + b] != h2[p * rb + b] && !(b >= 4 && b < 16);
            if (!r1 || !r2 || nd) {
                printf("FAIL mmx split from gate / up (%s, weights %d, limit %g): %zu bytes differ (ran %d %d)\n",
                       ti ? "Q2_K" : "IQ2R", v & 1, limit, nd, r1, r2);
                ok = 0;
            }
        }
        if (ok) printf("ok mmx split from gate / up (%s): the bytes of the SwiGLU rows' split, 4 cases\n", ti ? "Q2_K" : "IQ2R");
        failures += !ok;
        cudaFree(dg); cudaFree(du); cudaFree(dw); cudaFree(dmid); cudaFree(o1); cudaFree(o2);
        free(hg); free(hu); free(hw); free(h1); free(h2);
    }
    /* the switch: MoE tiles of IQ2R / Q2_K with f32 activations, nothing else */
    {
        cu_gemv_args g;
        int one = 1;
        memset(&g, 0, sizeof g);
        g.wtype = TYPE_IQ2R; g.rows = 2048; g.in = 4096; g.act_f32 = 1; g.tile_pairs = &one;
        g.w = (const void *)(uintptr_t)4096; g.row_bytes = 1056; g.expert_bytes = 1056 * 2048;
        int a = cu_mmx_supported(&g);
        g.act_f32 = 0; int b = cu_mmx_supported(&g); g.act_f32 = 1;
        g.tile_pairs = NULL; int c = cu_mmx_supported(&g); g.tile_pairs = &one;
        g.wtype = GGML_TYPE_Q8_0; int d = cu_mmx_supported(&g); g.wtype = TYPE_IQ2R;
        cu_mmx_set(0, 1, 0); int e = cu_mmx_supported(&g); cu_mmx_set(1, 1, 0);
        g.wtype = GGML_TYPE_Q2_K; g.row_bytes = 84 * 16; g.expert_bytes = 84 * 16 * 2048;
        int f = cu_mmx_supported(&g);
        cu_mmx_set(1, 0, 0); int h = cu_mmx_supported(&g); cu_mmx_set(1, 1, 0);
        int ok = a && !b && !c && !d && !e && f && !h;
        printf("%s mmx switch: taken for IQ2R MoE tiles with f32 activations; not for q8 activations, dense products, "
               "Q8_0, or when off; Q2_K only where asked\n", ok ? "ok" : "FAIL");
        failures += !ok;
    }
    if (timed) {
        time_case(GGML_TYPE_IQ2_XXS, 2048, 4096, 0, 0);
        time_case(GGML_TYPE_Q2_K, 4096, 2048, 1, 0);
        time_case(GGML_TYPE_IQ2_XXS, 2048, 4096, 0, 1);   /* some experts many tiles, some one pair */
    }
    if (failures) { printf("FAIL mmx_check: %d failure(s)\n", failures); return 1; }
    printf("mmx_check: all ok\n");
    return 0;
}
