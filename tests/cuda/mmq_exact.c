/* mmq_exact.c: the exact-activation tensor-core products (cu_mmq with
 * cu_gemv_args.act_f32 = 1: f32 activations split into int8 pieces in
 * k_mmqx, src/cuda/cu_mmq.cu) against a CPU reference that multiplies the
 * dequantized weights with the f32 activations in double.
 *
 * Every int8 weight type (Q8_0 as stored and repacked, IQ2_XXS as stored and
 * repacked, Q2_K, MXFP4, Q4_K) in dense, grouped-input and MoE-tile mode (MXFP4
 * and Q4_K also in Flash's MoE shapes, gate/up 2048 x 4096 and down 4096 x
 * 2048, with 2 experts, in the V4 and V1 runs with 3 pieces; fresh random
 * weights per case), on activation rows
 * of several kinds (plain, a large dynamic range inside an item, all zero,
 * zero items with spikes, tiny and huge scales). Prints one ok/FAIL line per
 * case with max|err| / max|y| (all outputs) and the worst row's ratio; MoE
 * outputs must also equal the dense launch on the same expert bit for bit
 * (the pieces do not depend on the grid), and the pre-split path (a split
 * launch into a buffer, then cu_mmq_presplit) must give the same bits.
 * Limits (all outputs / worst row): 1e-4 / 3e-4 with 2 pieces, 2e-6 / 6e-6
 * with 3. Two pieces are 16 bits of each item's amax: a CPU transcription of
 * the kernel's arithmetic gives ~1.5-2e-5 of max|y| on uniform rows and 3-6e-5
 * on heavy-tailed ones (spikes, 6 decades inside an item); three pieces give
 * 2-3e-7, float scales and sums being then the larger part.
 *
 * The number of pieces and the kernel variant are read once per process
 * (MINKE_CUDA_MMQ_PIECES, MINKE_CUDA_MMQ_X, MINKE_CUDA_MMQ_V, MINKE_CUDA_MMQ_XOCC),
 * so without MINKE_CUDA_MMQ_PIECES the program runs itself once per
 * combination: V1 with 3 pieces (3 and 2 blocks per SM), V1 with 2, V0 with 3
 * and 2, V2 (128 x 32 tiles) with 3 (3 and 2 blocks per SM) and 2, V3 (V2 for
 * MoE tiles only) with 3, V4 (128 x 64 tiles of 8 warps) with 3 and 2, V5 (V4
 * for MoE tiles only) with 3, V6 (256 x 32 tiles of 8 warps) with 3 and 2, V7
 * (V6 for MoE tiles only) with 3. V2-V7 keep V1's per-output arithmetic: their
 * outputs must also equal V1's bit for bit (cu_mmq_set_version switches
 * in-process). Then V2 with 3 at 2 blocks per SM with MINKE_CUDA_MMQ_WPIPE=1
 * (pipelined weight loads for Q2_K in V2 tiles, the default): in every run
 * where they are on (all but WPIPE=0) the outputs, on the fly and pre-split,
 * must equal the direct loads' bit for bit (cu_mmq_set_wpipe switches
 * in-process).
 * QP (MINKE_CUDA_MMQ_QPIPE, default 1: Q8_0R's pre-split products in V4 tiles
 * by k_mmqp, weights and pieces double-buffered by cp.async; cu_mmq.cu "QP"):
 * in every run where it is on and a case meets it (Q8_0 repacked, V4, or V5's
 * MoE tiles, grouped only with groups of whole 128-row blocks) the pre-split
 * rows' check above holds it to the on-the-fly V4 bits, and the same product
 * with QPIPE=0 (k_mmqx's V4) and with V1 must give its bits too
 * (cu_mmq_set_qpipe, cu_mmq_set_version switch in-process); a run with
 * QPIPE=0 keeps V4's own pre-split kernel checked. The Q8_0 cases include
 * small forms of Flash's dense shapes (q_a / out_b: K 4096 / 8192, q_b: 32
 * items per row, out_a: 8 groups, one token, partial token blocks).
 * --time adds prefill-shaped timings: the q8 kernel against the exact ones
 * (on the fly; pre-split: split launch + product) on
 * 4096 x 4096 weights at T = 512 and on Flash's MoE shapes (4096 tokens x 6
 * experts of 256: IQ2_XXS gate 2048 x 4096, Q2_K down 4096 x 2048), and in
 * the V4 runs the pre-split Q8_0R product of Flash's dense shapes at 4096
 * tokens with QPIPE=0 (k_mmqx V4) and 1 (k_mmqp), us per launch and whether
 * their bits agree ("time mmq qpipe" lines).
 * (The q8 kernel for MXFP4, and Q4_K's refusal there, are gemv_check's mmq
 * lines.) --time also times MXFP4 and Q4_K in Flash's MoE shapes (Q4_K
 * without a q8 figure).
 * Run on a GPU machine: build/cuda/tests/cuda/mmq_exact [--time].
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "quant/quant.h"
#include "cuda/cu_ops.h"

/* cu_mmq.cu's pre-split path (not in cu_ops.h yet) */
int64_t cu_mmq_split_row_bytes(int64_t n);
int cu_mmq_split_act(int wtype, const float *x, int64_t nrows, int64_t n, int64_t xstride, void *out, cudaStream_t st);
int cu_mmq_presplit(const cu_gemv_args *g, int ntiles, cudaStream_t st);
void cu_mmq_set_version(int v);
void cu_mmq_set_wpipe(int level);
void cu_mmq_set_qpipe(int on);

#define TYPE_Q8_0R 108
#define TYPE_IQ2R 116

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {   /* [0, 1) */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}
static float frand(void) { return (float)(urand() * 2.0 - 1.0); }

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL cuda %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static int pieces;
static int version = 1;    /* the exact kernels' version under test (MINKE_CUDA_MMQ_X / MINKE_CUDA_MMQ_V) */
static int wpipe;          /* MINKE_CUDA_MMQ_WPIPE (1): pipelined weight loads, compared with the direct ones */
static int qpipe;          /* MINKE_CUDA_MMQ_QPIPE (default 1): k_mmqp for Q8_0R's pre-split products in V4 tiles */
static char variant[64];   /* kernel version, occupancy and weight loads from the environment, for the lines printed */


/* Activation row t of n elements; the kind cycles with t. */
static void act_row(float *x, int64_t n, int t) {
    switch (t % 6) {
    case 0: for (int64_t i = 0; i < n; i++) x[i] = frand(); break;
    case 1: /* magnitudes 1e-3 .. 1e3 inside every item */
        for (int64_t i = 0; i < n; i++) x[i] = frand() * (float)pow(10.0, 6.0 * urand() - 3.0);
        break;
    case 2: memset(x, 0, sizeof(float) * n); break;
    case 3: /* every third item zero, spikes of 100 */
        for (int64_t i = 0; i < n; i++) x[i] = (i / 32) % 3 == 0 ? 0.f : frand() * (i % 29 == 0 ? 100.f : 1.f);
        break;
    case 4: for (int64_t i = 0; i < n; i++) x[i] = frand() * 1e-3f; break;
    default: for (int64_t i = 0; i < n; i++) x[i] = frand() * (i % 13 == 0 ? 1e4f : 1e3f); break;
    }
}

static const char *tname(int wt) {
    switch (wt) {
    case TYPE_Q8_0R: return "q8_0r";
    case TYPE_IQ2R: return "iq2r";
    default: return quant_get(wt)->name;
    }
}

/* One case. E > 0: MoE tiles of (token, expert) pairs, K per token, built on
 * the device by cu_moe_tiles; ngroups > 1: grouped input (weight row r reads
 * the in-wide slice r / (rows / ngroups) of a wider activation row). repack:
 * run the device layout (Q8_0 -> 108, IQ2_XXS -> 116). */
/* The product g again with a kernel switch set to `other` (then back to
 * `back`): 1 (a FAIL line) unless it gives the bits of ygpu. */
static int rerun_same(const cu_gemv_args *g, int ntiles, float *dy, const float *ygpu, int64_t n, void (*set)(int),
                      int other, int back, const char *what, const char *claim) {
    float *y = malloc(sizeof(float) * n);
    CK(cudaMemset(dy, 0xFF, sizeof(float) * n));
    set(other);
    int ran = cu_mmq(g, ntiles, 0);
    set(back);
    CK(cudaGetLastError());
    CK(cudaMemcpy(y, dy, sizeof(float) * n, cudaMemcpyDeviceToHost));
    int same = ran && !memcmp(y, ygpu, sizeof(float) * n);
    printf("%s mmq exact %d pieces%s %s: %s%s\n", same ? "ok  " : "FAIL", pieces, variant, what, claim,
           !ran ? " (refused)" : same ? "" : " (they differ)");
    free(y);
    return !same;
}

/* max|err| / max|y| over all outputs (*rel) and the worst row's ratio (*worst; a zero
 * row must give exact zeros); 1 when they pass the limits for `pieces` */
static int out_err(const double *yref, const float *y, int P, int64_t rows, double *rel, double *worst) {
    double md = 0, mr = 0, worst_row = 0;
    for (int p = 0; p < P; p++) {
        double rmd = 0, rmr = 0;
        for (int64_t r = 0; r < rows; r++) {
            double ref = yref[(int64_t)p * rows + r], d = fabs(ref - y[(int64_t)p * rows + r]);
            if (!(d <= rmd)) rmd = isnan(d) ? INFINITY : d;
            if (fabs(ref) > rmr) rmr = fabs(ref);
        }
        if (rmr > 0 && rmd / rmr > worst_row) worst_row = rmd / rmr;
        if (rmr == 0 && rmd > 0) worst_row = INFINITY;     /* a zero row must give exact zeros */
        if (!(rmd <= md)) md = rmd;
        if (rmr > mr) mr = rmr;
    }
    *rel = md / (mr > 0 ? mr : 1);
    *worst = worst_row;
    double lim = pieces == 3 ? 2e-6 : 1e-4;
    return *rel <= lim && worst_row <= 3 * lim;
}

/* MoE mode: g's tiles of 64 (token, expert) pairs built from dsel by
 * cu_moe_tiles into dt (P + 4 maxt + 1 ints); returns the tiles to launch */
static int moe_tiles_set(cu_gemv_args *g, const int *dsel, int P, int E, int K, int *dt, int maxt) {
    int *pairs = dt, *ts = dt + P, *tc = ts + maxt, *tx = tc + maxt, *nt = tx + maxt;
    cu_moe_tiles(dsel, P, E, 64, pairs, ts, tc, tx, nt, 0);
    g->tile_pairs = pairs; g->tile_start = ts; g->tile_count = tc; g->tile_expert = tx; g->n_tiles = nt;
    g->expert_bytes = g->row_bytes * g->rows; g->act_div = K; g->ntok = 0;
    return maxt;
}

static int check(int type, int repack, int64_t rows, int64_t in, int T, int E, int K, int ngroups) {
    const quant_traits *tr = quant_get(type);
    uint64_t rb = quant_row_bytes(type, in);
    int ne = E > 0 ? E : 1, P = E > 0 ? T * K : T;
    int64_t arow = in * ngroups;          /* floats per activation row */
    float *wf = malloc(sizeof(float) * in), *x = malloc(sizeof(float) * T * arow);
    float *wd = malloc(sizeof(float) * rows * ne * in);
    uint8_t *W = malloc(rb * rows * ne);
    for (int64_t r = 0; r < rows * ne; r++) {
        for (int64_t i = 0; i < in; i++) wf[i] = frand() * (1.0f + (r % 7));
        tr->quant(wf, W + r * rb, in);
        tr->dequant(W + r * rb, wd + r * in, in);
    }
    for (int t = 0; t < T; t++) act_row(x + (int64_t)t * arow, arow, t);
    int *sel = malloc(sizeof(int) * (P > 0 ? P : 1));
    for (int p = 0; p < P; p++) sel[p] = E > 0 ? (p * 5 + p / 3 + (p % 7 == 0 ? 1 : 0)) % E : 0;
    /* reference in double: row r of expert sel[p] . activation row p / K */
    double *yref = malloc(sizeof(double) * P * rows);
    int64_t grows = rows / ngroups;
    for (int p = 0; p < P; p++) {
        const float *xa = x + (int64_t)(E > 0 ? p / K : p) * arow;
        for (int64_t r = 0; r < rows; r++) {
            const float *w = wd + ((int64_t)sel[p] * rows + r) * in;
            const float *xr = xa + (ngroups > 1 ? (r / grows) * in : 0);
            double s = 0;
            for (int64_t i = 0; i < in; i++) s += (double)w[i] * xr[i];
            yref[(int64_t)p * rows + r] = s;
        }
    }
    void *dW; float *dx, *dy, *dyd; int *dsel, *dt;
    int maxt = P / 64 + 1 + ne;
    CK(cudaMalloc(&dW, rb * rows * ne)); CK(cudaMalloc((void **)&dx, sizeof(float) * T * arow));
    CK(cudaMalloc((void **)&dy, sizeof(float) * P * rows)); CK(cudaMalloc((void **)&dyd, sizeof(float) * T * rows));
    CK(cudaMalloc((void **)&dsel, sizeof(int) * P)); CK(cudaMalloc((void **)&dt, sizeof(int) * (P + 4 * maxt + 1)));
    CK(cudaMemcpy(dW, W, rb * rows * ne, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x, sizeof(float) * T * arow, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dsel, sel, sizeof(int) * P, cudaMemcpyHostToDevice));
    int wt = type;
    if (repack && type == GGML_TYPE_Q8_0 && cu_repack_q8_0(dW, rows * ne, in, rb, 0)) wt = TYPE_Q8_0R;
    if (repack && type == GGML_TYPE_IQ2_XXS && cu_repack_iq2_xxs(dW, rows * ne, in, rb, 0)) wt = TYPE_IQ2R;
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    g.w = dW; g.wtype = wt; g.rows = rows; g.in = in; g.row_bytes = rb; g.act = dx; g.act_f32 = 1;
    g.act_stride = arow * 4; g.act_div = 1; g.out = dy; g.out_stride = rows; g.ntok = T;
    if (ngroups > 1) { g.group_rows = grows; g.group_act_bytes = in * 4; }
    cu_gemv_args gd = g;           /* dense launch over the same tokens (MoE: per expert) */
    gd.out = dyd;
    int ntiles = E > 0 ? moe_tiles_set(&g, dsel, P, E, K, dt, maxt) : (T + 63) / 64;
    char what[160];
    snprintf(what, sizeof what, "%-6s rows %4lld in %5lld T %3d%s%s", tname(wt), (long long)rows, (long long)in, T,
             E > 0 ? " moe" : ngroups > 1 ? " grouped" : " dense", "");
    if (E > 0) snprintf(what + strlen(what), sizeof what - strlen(what), " E %d K %d", E, K);
    if (ngroups > 1) snprintf(what + strlen(what), sizeof what - strlen(what), " groups %d", ngroups);
    int fail = 0;
    float *ygpu = malloc(sizeof(float) * P * rows);
    if (!cu_mmq_supported(&g)) { printf("FAIL mmq exact %s: not supported\n", what); fail = 1; goto done; }
    CK(cudaMemset(dy, 0xFF, sizeof(float) * P * rows));
    if (!cu_mmq(&g, ntiles, 0)) { printf("FAIL mmq exact %s: cu_mmq refused\n", what); fail = 1; goto done; }
    CK(cudaGetLastError());
    CK(cudaMemcpy(ygpu, dy, sizeof(float) * P * rows, cudaMemcpyDeviceToHost));
    {
        double rel, worst_row;
        int bad = !out_err(yref, ygpu, P, rows, &rel, &worst_row);
        printf("%s mmq exact %d pieces%s %s: max|err|/max|y| %.2e, worst row %.2e\n", bad ? "FAIL" : "ok  ", pieces, variant,
               what, rel, worst_row);
        fail |= bad;
    }
    /* V2-V7 change the tiling, not the arithmetic: V1's bits; the pipelined weight loads
     * change the schedule, not the arithmetic: the direct loads' bits */
    if (version >= 2)
        fail |= rerun_same(&g, ntiles, dy, ygpu, P * rows, cu_mmq_set_version, 1, version, what, "V1 gives the same bits");
    if (wpipe) fail |= rerun_same(&g, ntiles, dy, ygpu, P * rows, cu_mmq_set_wpipe, 0, wpipe, what, "direct weight loads give the same bits");
    {
        /* pre-split rows (a split launch, then the product on pieces): the same bits */
        int64_t sb = cu_mmq_split_row_bytes(arow);
        void *dsp;
        float *ys = malloc(sizeof(float) * P * rows);
        CK(cudaMalloc(&dsp, sb * T));
        cu_gemv_args gs = g;
        gs.act = dsp; gs.act_stride = sb;
        CK(cudaMemset(dy, 0xFF, sizeof(float) * P * rows));
        int ran = cu_mmq_split_act(wt, dx, T, arow, arow * 4, dsp, 0) && cu_mmq_presplit(&gs, ntiles, 0);
        CK(cudaGetLastError());
        CK(cudaMemcpy(ys, dy, sizeof(float) * P * rows, cudaMemcpyDeviceToHost));
        int same = ran && !memcmp(ys, ygpu, sizeof(float) * P * rows);
        printf("%s mmq exact %d pieces%s %s: pre-split rows %s\n", same ? "ok  " : "FAIL", pieces, variant, what,
               !ran ? "refused" : same ? "give the same bits" : "differ");
        fail |= !same;
        /* QP (Q8_0R, pre-split, where V4 tiles run): V4's k_mmqx and V1 on the same rows */
        const int qp = qpipe && wt == TYPE_Q8_0R && (version == 4 || (version == 5 && E > 0)) &&
                       (ngroups == 1 || grows % 128 == 0);
        if (qp && ran) {
            static const char *const claim[2] = {"pre-split rows, QPIPE=0 (k_mmqx V4) gives the same bits",
                                                 "pre-split rows, V1 gives the same bits as QP"};
            for (int k = 0; k < 2; k++) {
                CK(cudaMemset(dy, 0xFF, sizeof(float) * P * rows));
                if (k == 0) cu_mmq_set_qpipe(0); else cu_mmq_set_version(1);
                int ran0 = cu_mmq_presplit(&gs, ntiles, 0);
                if (k == 0) cu_mmq_set_qpipe(1); else cu_mmq_set_version(version);
                CK(cudaGetLastError());
                float *y0 = malloc(sizeof(float) * P * rows);
                CK(cudaMemcpy(y0, dy, sizeof(float) * P * rows, cudaMemcpyDeviceToHost));
                int same0 = ran0 && !memcmp(y0, ys, sizeof(float) * P * rows);
                printf("%s mmq exact %d pieces%s %s: %s%s\n", same0 ? "ok  " : "FAIL", pieces, variant, what, claim[k],
                       !ran0 ? " (refused)" : same0 ? "" : " (they differ)");
                fail |= !same0;
                free(y0);
            }
        }
        if (wpipe && ran) {
            /* pre-split rows with the direct weight loads: the same bits */
            CK(cudaMemset(dy, 0xFF, sizeof(float) * P * rows));
            cu_mmq_set_wpipe(0);
            int ran0 = cu_mmq_presplit(&gs, ntiles, 0);
            cu_mmq_set_wpipe(wpipe);
            CK(cudaGetLastError());
            CK(cudaMemcpy(ys, dy, sizeof(float) * P * rows, cudaMemcpyDeviceToHost));
            int same0 = ran0 && !memcmp(ys, ygpu, sizeof(float) * P * rows);
            printf("%s mmq exact %d pieces%s %s: pre-split rows, direct weight loads %s\n", same0 ? "ok  " : "FAIL", pieces,
                   variant, what, !ran0 ? "refused" : same0 ? "give the same bits" : "differ");
            fail |= !same0;
        }
        cudaFree(dsp); free(ys);
    }
    if (E > 0) {
        /* the dense launch on each expert gives the MoE outputs bit for bit */
        float *yd = malloc(sizeof(float) * T * rows);
        int diff = 0;
        for (int e = 0; e < E && !diff; e++) {
            gd.w = (const uint8_t *)dW + (uint64_t)e * rb * rows;
            CK(cudaMemset(dyd, 0xFF, sizeof(float) * T * rows));
            cu_mmq(&gd, (T + 63) / 64, 0);
            CK(cudaMemcpy(yd, dyd, sizeof(float) * T * rows, cudaMemcpyDeviceToHost));
            for (int p = 0; p < P; p++)
                if (sel[p] == e && memcmp(yd + (int64_t)(p / K) * rows, ygpu + (int64_t)p * rows, sizeof(float) * rows))
                    diff = 1;
        }
        printf("%s mmq exact %d pieces%s %s: MoE tiles %s the dense launch\n", diff ? "FAIL" : "ok  ", pieces, variant, what,
               diff ? "differ from" : "equal");
        fail |= diff;
        free(yd);
    }
done:
    cudaFree(dW); cudaFree(dx); cudaFree(dy); cudaFree(dyd); cudaFree(dsel); cudaFree(dt);
    free(wf); free(x); free(wd); free(W); free(sel); free(yref); free(ygpu);
    return fail;
}

/* ms per launch of cu_mmq(g) or cu_mmq_presplit(g): mean of reps after one warm-up */
static float time_launch(const cu_gemv_args *g, int ntiles, int reps, int presplit) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    if (presplit) cu_mmq_presplit(g, ntiles, 0); else cu_mmq(g, ntiles, 0);
    cudaEventRecord(e0, 0);
    for (int i = 0; i < reps; i++) { if (presplit) cu_mmq_presplit(g, ntiles, 0); else cu_mmq(g, ntiles, 0); }
    cudaEventRecord(e1, 0);
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    return ms / reps;
}

/* Dense T = 512 on rows x in weights (E = 0), or Flash's MoE shape: T tokens,
 * K experts each of E, (rows x in) per expert; act rows per token (gate) or per
 * pair (down, act_div 1). Prints the q8 kernel and the exact one. */
static void time_case(int type, int64_t rows, int64_t in, int T, int E, int K, int per_pair) {
    uint64_t rb = quant_row_bytes(type, in);
    int ne = E > 0 ? E : 1, P = E > 0 ? T * K : T;
    int nact = per_pair ? P : T;
    void *dW, *dq; float *dx, *dy; int *dsel = NULL, *dt = NULL;
    int at = cu_act_type(type);
    int64_t qrb = cu_act_row_bytes(at, in);
    if (cudaMalloc(&dW, rb * rows * ne) != cudaSuccess) { printf("skip time (memory)\n"); cudaGetLastError(); return; }
    CK(cudaMalloc((void **)&dx, sizeof(float) * nact * in)); CK(cudaMalloc(&dq, qrb * nact));
    CK(cudaMalloc((void **)&dy, sizeof(float) * P * rows));
    cu_synth_fill(dW, type, rows * ne * in, 99, 0.01f, 0, 0);
    cu_synth_fill(dx, GGML_TYPE_F32, (int64_t)nact * in, 7, 1.0f, 0, 0);
    cu_quantize_act(at, dx, dq, nact, in, 0);
    int wt = type;
    if (type == GGML_TYPE_Q8_0 && cu_repack_q8_0(dW, rows * ne, in, rb, 0)) wt = TYPE_Q8_0R;
    if (type == GGML_TYPE_IQ2_XXS && cu_repack_iq2_xxs(dW, rows * ne, in, rb, 0)) wt = TYPE_IQ2R;
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    g.w = dW; g.wtype = wt; g.rows = rows; g.in = in; g.row_bytes = rb; g.act_div = 1;
    g.out = dy; g.out_stride = rows; g.ntok = T;
    int ntiles = (T + 63) / 64;
    if (E > 0) {
        int *sel = malloc(sizeof(int) * P);
        for (int t = 0; t < T; t++)
            for (int k = 0; k < K; k++) {
                int e, dup;
                do {    /* K distinct experts per token, uniform */
                    e = (int)(urand() * E);
                    dup = 0;
                    for (int j = 0; j < k; j++) dup |= sel[t * K + j] == e;
                } while (dup);
                sel[t * K + k] = e;
            }
        int maxt = P / 64 + 1 + E;
        CK(cudaMalloc((void **)&dsel, sizeof(int) * P)); CK(cudaMalloc((void **)&dt, sizeof(int) * (P + 4 * maxt + 1)));
        CK(cudaMemcpy(dsel, sel, sizeof(int) * P, cudaMemcpyHostToDevice));
        int *pairs = dt, *ts = dt + P, *tc = ts + maxt, *tx = tc + maxt, *nt = tx + maxt;
        cu_moe_tiles(dsel, P, E, 64, pairs, ts, tc, tx, nt, 0);
        g.tile_pairs = pairs; g.tile_start = ts; g.tile_count = tc; g.tile_expert = tx; g.n_tiles = nt;
        g.expert_bytes = rb * rows; g.act_div = per_pair ? 1 : K; g.ntok = 0;
        ntiles = maxt;
        free(sel);
    }
    cu_gemv_args q8 = g, ex = g;
    q8.act = dq; q8.act_stride = qrb; q8.act_f32 = 0;
    ex.act = dx; ex.act_stride = in * 4; ex.act_f32 = 1;
    int reps = E > 0 ? 3 : 10;
    /* Q4_K: no q8 kernel (exact activations only) */
    float tq = cu_mmq_supported(&q8) ? time_launch(&q8, ntiles, reps, 0) : NAN, te = time_launch(&ex, ntiles, reps, 0);
    /* pre-split: the split launch and the product on pieces */
    int64_t sb = cu_mmq_split_row_bytes(in);
    void *dsp = NULL;
    float tsplit = -1, tpre = -1;
    if (cudaMalloc(&dsp, sb * nact) == cudaSuccess) {
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0); cudaEventCreate(&e1);
        cu_mmq_split_act(wt, dx, nact, in, in * 4, dsp, 0);
        cudaEventRecord(e0, 0);
        for (int i = 0; i < reps; i++) cu_mmq_split_act(wt, dx, nact, in, in * 4, dsp, 0);
        cudaEventRecord(e1, 0);
        CK(cudaEventSynchronize(e1));
        cudaEventElapsedTime(&tsplit, e0, e1);
        tsplit /= reps;
        cudaEventDestroy(e0); cudaEventDestroy(e1);
        cu_gemv_args ps = ex;
        ps.act = dsp; ps.act_stride = sb;
        tpre = time_launch(&ps, ntiles, reps, 1);
    } else {
        cudaGetLastError();
    }
    double ops = 2.0 * rows * in * P;
    char shape[96];
    if (E > 0) snprintf(shape, sizeof shape, "moe %lld x %lld, %d tokens x %d of %d experts", (long long)rows, (long long)in, T, K, E);
    else snprintf(shape, sizeof shape, "%lld x %lld, T %d", (long long)rows, (long long)in, T);
    printf("time mmq %-6s %s: q8 %.3f ms (%.1f TOPS); exact %d pieces%s: on the fly %.3f ms (x%.2f), pre-split %.3f + %.3f ms "
           "split (x%.2f; product alone x%.2f)\n", tname(wt), shape, tq, ops / tq / 1e9, pieces, variant, te, te / tq, tpre, tsplit,
           (tpre + tsplit) / tq, tpre / tq);
    if (dsp) cudaFree(dsp);
    cudaFree(dW); cudaFree(dx); cudaFree(dq); cudaFree(dy);
    if (dsel) cudaFree(dsel);
    if (dt) cudaFree(dt);
}

/* The pre-split Q8_0R product of rows x in weights (ngroups > 1: grouped input, in per
 * group) over T tokens, with QPIPE=0 (k_mmqx V4) and 1 (k_mmqp): us per launch, useful
 * int8 TOPS, and whether the outputs agree bit for bit (1 when they do not). */
static int time_qpipe(int64_t rows, int64_t in, int T, int ngroups) {
    uint64_t rb = quant_row_bytes(GGML_TYPE_Q8_0, in);
    int64_t arow = in * ngroups, sb = cu_mmq_split_row_bytes(arow);
    void *dW, *dsp; float *dx, *dy;
    if (cudaMalloc(&dW, rb * rows) != cudaSuccess) { printf("skip time qpipe (memory)\n"); cudaGetLastError(); return 0; }
    CK(cudaMalloc((void **)&dx, sizeof(float) * T * arow)); CK(cudaMalloc(&dsp, sb * T));
    CK(cudaMalloc((void **)&dy, sizeof(float) * T * rows));
    cu_synth_fill(dW, GGML_TYPE_Q8_0, rows * in, 99, 0.01f, 0, 0);
    cu_synth_fill(dx, GGML_TYPE_F32, (int64_t)T * arow, 7, 1.0f, 0, 0);
    int wt = cu_repack_q8_0(dW, rows, in, rb, 0) ? TYPE_Q8_0R : GGML_TYPE_Q8_0;
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    g.w = dW; g.wtype = wt; g.rows = rows; g.in = in; g.row_bytes = rb; g.act_div = 1;
    g.out = dy; g.out_stride = rows; g.ntok = T; g.act = dsp; g.act_stride = sb;
    if (ngroups > 1) { g.group_rows = rows / ngroups; g.group_act_bytes = in * 4; }
    int ntiles = (T + 63) / 64, reps = 10;
    CK(cu_mmq_split_act(wt, dx, T, arow, arow * 4, dsp, 0) ? cudaSuccess : cudaErrorInvalidValue);
    float us[2];
    float *y[2];
    for (int q = 0; q < 2; q++) {
        cu_mmq_set_qpipe(q);
        us[q] = 1000.f * time_launch(&g, ntiles, reps, 1);
        y[q] = malloc(sizeof(float) * T * rows);
        CK(cudaMemcpy(y[q], dy, sizeof(float) * T * rows, cudaMemcpyDeviceToHost));
    }
    cu_mmq_set_qpipe(qpipe);
    int same = !memcmp(y[0], y[1], sizeof(float) * T * rows);
    double ops = 2.0 * rows * in * T;
    printf("time mmq qpipe %-6s %lld x %lld%s, T %d, %d pieces: V4 (QPIPE=0) %.1f us (%.0f TOPS), QP %.1f us (%.0f TOPS), x%.3f, %s\n",
           tname(wt), (long long)rows, (long long)in, ngroups > 1 ? " grouped" : "", T, pieces, us[0], ops / us[0] / 1e6, us[1],
           ops / us[1] / 1e6, us[0] / us[1], same ? "same bits" : "BITS DIFFER");
    free(y[0]); free(y[1]);
    cudaFree(dW); cudaFree(dx); cudaFree(dsp); cudaFree(dy);
    return !same;
}

int main(int argc, char **argv) {
    int timing = argc > 1 && !strcmp(argv[1], "--time");
    const char *pe = getenv("MINKE_CUDA_MMQ_PIECES");
    if (!pe) {
        /* one child per piece count and kernel variant (the kernels read them once per process):
         * V1 with 3 pieces at 3 and 2 blocks per SM and with 2 pieces, then V0, V2-V7 (V4 is the default) */
        static const char *const runs[] = {
            "MINKE_CUDA_MMQ_PIECES=3 MINKE_CUDA_MMQ_V=1", "MINKE_CUDA_MMQ_PIECES=3 MINKE_CUDA_MMQ_V=1 MINKE_CUDA_MMQ_XOCC=2",
            "MINKE_CUDA_MMQ_PIECES=2 MINKE_CUDA_MMQ_V=1",
            "MINKE_CUDA_MMQ_PIECES=3 MINKE_CUDA_MMQ_X=0", "MINKE_CUDA_MMQ_PIECES=2 MINKE_CUDA_MMQ_X=0",
            "MINKE_CUDA_MMQ_PIECES=3 MINKE_CUDA_MMQ_V=2", "MINKE_CUDA_MMQ_PIECES=3 MINKE_CUDA_MMQ_V=2 MINKE_CUDA_MMQ_XOCC=2",
            "MINKE_CUDA_MMQ_PIECES=2 MINKE_CUDA_MMQ_V=2", "MINKE_CUDA_MMQ_PIECES=3 MINKE_CUDA_MMQ_V=3",
            "MINKE_CUDA_MMQ_PIECES=3 MINKE_CUDA_MMQ_V=4", "MINKE_CUDA_MMQ_PIECES=2 MINKE_CUDA_MMQ_V=4",
            "MINKE_CUDA_MMQ_PIECES=3 MINKE_CUDA_MMQ_V=5", "MINKE_CUDA_MMQ_PIECES=3 MINKE_CUDA_MMQ_V=6",
            "MINKE_CUDA_MMQ_PIECES=2 MINKE_CUDA_MMQ_V=6", "MINKE_CUDA_MMQ_PIECES=3 MINKE_CUDA_MMQ_V=7",
            "MINKE_CUDA_MMQ_PIECES=3 MINKE_CUDA_MMQ_V=2 MINKE_CUDA_MMQ_XOCC=2 MINKE_CUDA_MMQ_WPIPE=1",
            "MINKE_CUDA_MMQ_PIECES=3 MINKE_CUDA_MMQ_V=4 MINKE_CUDA_MMQ_QPIPE=0"};
        char cmd[4096];
        int rc = 0;
        /* each child gets exactly its run's settings, whatever this process was started with */
        unsetenv("MINKE_CUDA_MMQ_X");
        unsetenv("MINKE_CUDA_MMQ_V");
        unsetenv("MINKE_CUDA_MMQ_XOCC");
        unsetenv("MINKE_CUDA_MMQ_WPIPE");
        unsetenv("MINKE_CUDA_MMQ_QPIPE");
        for (int k = 0; k < (int)(sizeof runs / sizeof runs[0]); k++) {
            snprintf(cmd, sizeof cmd, "%s '%s'%s", runs[k], argv[0], timing ? " --time" : "");
            fflush(stdout);
            int r = system(cmd);
            if (r != 0) rc = 1;
        }
        printf("%s\n", rc ? "mmq_exact: FAILED" : "mmq_exact: all ok");
        return rc;
    }
    pieces = atoi(pe) == 3 ? 3 : 2;
    {
        /* as cu_mmq.cu reads them: MINKE_CUDA_MMQ_V 0..7 first, else MINKE_CUDA_MMQ_X=0 for V0 */
        const char *xv = getenv("MINKE_CUDA_MMQ_X"), *vv = getenv("MINKE_CUDA_MMQ_V"), *xo = getenv("MINKE_CUDA_MMQ_XOCC");
        int n = vv ? atoi(vv) : -1;
        version = n >= 0 && n <= 7 ? n : xv && atoi(xv) == 0 ? 0 : 4;
        const char *wp = getenv("MINKE_CUDA_MMQ_WPIPE");
        wpipe = wp ? atoi(wp) : 1;     /* cu_mmq.cu's MX_WPIPE_DEFAULT */
        if (wpipe != 0) wpipe = 1;    /* as cu_mmq.cu reads it */
        const char *qe = getenv("MINKE_CUDA_MMQ_QPIPE");
        qpipe = qe ? atoi(qe) != 0 : 1;    /* as cu_mmq.cu reads it (MX_QPIPE_DEFAULT 1) */
        snprintf(variant, sizeof variant, " V%d%s%s%s", version, version && pieces == 3 && xo && atoi(xo) == 2 ? " occ2" : "",
                 wpipe ? " wpipe" : "", qpipe ? "" : " noqpipe");
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) { printf("SKIP no CUDA device\n"); return 0; }
    if (cu_tables_init_from_quant()) { printf("FAIL tables\n"); return 1; }
    int fail = 0;
    /* Q8_0 */
    fail |= check(GGML_TYPE_Q8_0, 1, 300, 1024, 100, 0, 1, 1);
    fail |= check(GGML_TYPE_Q8_0, 0, 300, 1024, 100, 0, 1, 1);
    fail |= check(GGML_TYPE_Q8_0, 1, 64, 96, 37, 0, 1, 1);          /* 3 items: a partial stage */
    fail |= check(GGML_TYPE_Q8_0, 1, 256, 512, 70, 0, 1, 2);        /* grouped (out_a) */
    fail |= check(GGML_TYPE_Q8_0, 1, 512, 256, 40, 0, 1, 2);        /* groups of 256 rows (V6's blocks) */
    fail |= check(GGML_TYPE_Q8_0, 1, 200, 1024, 90, 5, 3, 1);
    fail |= check(GGML_TYPE_Q8_0, 1, 256, 512, 40, 6, 2, 1);        /* ~13 pairs per expert: V4's idle warps */
    /* Flash's dense shapes, small (QP: 4-item stages over K 4096 / 8192, partial token blocks) */
    fail |= check(GGML_TYPE_Q8_0, 1, 192, 4096, 70, 0, 1, 1);       /* q_a, kv, shared gate/up */
    fail |= check(GGML_TYPE_Q8_0, 1, 512, 1024, 130, 0, 1, 1);      /* q_b: 2 tokens in the last block */
    fail |= check(GGML_TYPE_Q8_0, 1, 128, 1024, 1, 0, 1, 1);        /* one token: the upper warps idle */
    fail |= check(GGML_TYPE_Q8_0, 1, 1024, 512, 33, 0, 1, 8);       /* out_a: 8 groups of 128 rows */
    fail |= check(GGML_TYPE_Q8_0, 1, 256, 8192, 20, 0, 1, 1);       /* out_b, shared down */
    /* IQ2_XXS */
    fail |= check(GGML_TYPE_IQ2_XXS, 1, 300, 1024, 100, 0, 1, 1);
    fail |= check(GGML_TYPE_IQ2_XXS, 0, 96, 512, 70, 0, 1, 1);      /* 512 wide: stays unrepacked */
    fail |= check(GGML_TYPE_IQ2_XXS, 1, 200, 1024, 90, 5, 3, 1);
    fail |= check(GGML_TYPE_IQ2_XXS, 0, 96, 512, 70, 3, 2, 1);
    fail |= check(GGML_TYPE_IQ2_XXS, 1, 256, 512, 150, 7, 2, 1);    /* tiles of ~43 pairs: V2's partial halves */
    fail |= check(GGML_TYPE_IQ2_XXS, 1, 128, 1024, 30, 4, 3, 1);    /* ~22 pairs per expert */
    fail |= check(GGML_TYPE_IQ2_XXS, 1, 256, 512, 40, 0, 1, 2);
    /* Q2_K */
    fail |= check(GGML_TYPE_Q2_K, 0, 300, 1024, 100, 0, 1, 1);
    fail |= check(GGML_TYPE_Q2_K, 0, 64, 256, 37, 0, 1, 1);
    fail |= check(GGML_TYPE_Q2_K, 0, 200, 1024, 90, 5, 3, 1);
    fail |= check(GGML_TYPE_Q2_K, 0, 256, 512, 100, 3, 2, 1);       /* ~67 pairs per expert: 64 + a few */
    fail |= check(GGML_TYPE_Q2_K, 0, 128, 512, 33, 0, 1, 2);
    /* MXFP4: 17-byte blocks, so rows and items at every byte alignment */
    fail |= check(GGML_TYPE_MXFP4, 0, 300, 1024, 100, 0, 1, 1);
    fail |= check(GGML_TYPE_MXFP4, 0, 64, 96, 37, 0, 1, 1);        /* 3 items: a partial stage */
    fail |= check(GGML_TYPE_MXFP4, 0, 200, 1024, 90, 5, 3, 1);
    fail |= check(GGML_TYPE_MXFP4, 0, 256, 512, 40, 6, 2, 1);      /* ~13 pairs per expert: V4's idle warps */
    fail |= check(GGML_TYPE_MXFP4, 0, 256, 512, 70, 0, 1, 2);      /* grouped */
    /* Flash's MoE shapes (gate / up, down) in the default tiling (V4) and V1 only,
     * 3 pieces: the host quantization of their weights is most of a run's time */
    const int flash_shapes = pieces == 3 && (version == 1 || version == 4) && !getenv("MINKE_CUDA_MMQ_XOCC") && qpipe;
    if (flash_shapes) {
        fail |= check(GGML_TYPE_MXFP4, 0, 2048, 4096, 40, 2, 2, 1);
        fail |= check(GGML_TYPE_MXFP4, 0, 4096, 2048, 40, 2, 2, 1);
    }
    /* Q4_K: codes with a scale per item, the min term from the items' activation sums */
    fail |= check(GGML_TYPE_Q4_K, 0, 300, 1024, 100, 0, 1, 1);
    fail |= check(GGML_TYPE_Q4_K, 0, 64, 256, 37, 0, 1, 1);        /* one block per row */
    fail |= check(GGML_TYPE_Q4_K, 0, 200, 1024, 90, 5, 3, 1);
    fail |= check(GGML_TYPE_Q4_K, 0, 256, 512, 100, 3, 2, 1);      /* ~67 pairs per expert: 64 + a few */
    fail |= check(GGML_TYPE_Q4_K, 0, 256, 512, 40, 6, 2, 1);       /* ~13 pairs per expert: V4's idle warps */
    fail |= check(GGML_TYPE_Q4_K, 0, 256, 512, 33, 0, 1, 2);       /* grouped */
    if (flash_shapes) {
        fail |= check(GGML_TYPE_Q4_K, 0, 2048, 4096, 40, 2, 2, 1);
        fail |= check(GGML_TYPE_Q4_K, 0, 4096, 2048, 40, 2, 2, 1);
    }
    if (timing) {
        time_case(GGML_TYPE_Q8_0, 4096, 4096, 512, 0, 0, 0);
        time_case(GGML_TYPE_IQ2_XXS, 4096, 4096, 512, 0, 0, 0);
        time_case(GGML_TYPE_Q2_K, 4096, 4096, 512, 0, 0, 0);
        time_case(GGML_TYPE_IQ2_XXS, 2048, 4096, 4096, 256, 6, 0);  /* MoE gate (and up): token activations */
        time_case(GGML_TYPE_Q2_K, 4096, 2048, 4096, 256, 6, 1);     /* MoE down: one activation row per pair */
        time_case(GGML_TYPE_MXFP4, 2048, 4096, 4096, 256, 6, 0);
        time_case(GGML_TYPE_MXFP4, 4096, 2048, 4096, 256, 6, 1);
        time_case(GGML_TYPE_Q4_K, 2048, 4096, 4096, 256, 6, 0);
        time_case(GGML_TYPE_Q4_K, 4096, 2048, 4096, 256, 6, 1);
        if (version == 4 && qpipe) {
            /* Flash's dense Q8_0R products at 4096 tokens, pre-split: k_mmqx V4 against k_mmqp */
            fail |= time_qpipe(4096, 8192, 4096, 1);     /* out_b */
            fail |= time_qpipe(1024, 4096, 4096, 1);     /* q_a */
            fail |= time_qpipe(32768, 1024, 4096, 1);    /* q_b */
            fail |= time_qpipe(8192, 4096, 4096, 8);     /* out_a: 8 groups of 1024 rows */
        }
    }
    printf("%s (%d pieces%s)\n", fail ? "mmq_exact: FAILED" : "mmq_exact: all ok", pieces, variant);
    return fail;
}
