/* mmf16_check.c: the F16-weight prefill products (cu_mmf16.cu) on random
 * data, in each kernel: the first one (MINKE_CUDA_MMF16=0) and the pipelined
 * one with its tile shapes picked by row count (auto) and forced (huge,
 * big, mid, small). Lines to look for:
 *   ok/FAIL ref     : y = W x against a double reference: the first kernel's
 *                     max|diff| <= 4e-5 x max|y| (f32 sums of 4096 products
 *                     reach 1.1e-5 on the H200), every other kernel within
 *                     max(1e-5, 2 x the first kernel's error on the same
 *                     data), partial row and token tiles, strided input and
 *                     output (the gaps must stay untouched), accumulate;
 *   ok/FAIL batch   : a token's bits do not depend on its batch: T = 4096,
 *                     then 64 tokens from 0, 64 from 1000 and 37 from 4000
 *                     (other positions in the tiles) give the same bits;
 *   ok/FAIL multi   : cu_mmf16_multi (several matrices, one input, one
 *                     launch) against the reference, bit for bit equal to
 *                     one launch a matrix in the same forced shape, and
 *                     batch-independent;
 *   info            : whether a kernel's bits equal the first kernel's
 *                     (expected for huge and big: the same order of mma);
 *   time            : the Flash prefill shapes (T = 4096 tokens), mean of
 *                     10 launches, first kernel vs the pipelined one, TFLOPS
 *                     counting both the hi and the lo product.
 * Run on a GPU machine (tests/run-cuda.sh); --quick skips the timings.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "quant/quant.h"
#include "cuda/cu_ops.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL cuda %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

enum { M_OLD = 0, M_AUTO = 1, M_HUGE = 2, M_BIG = 3, M_MID = 4, M_SMALL = 5, N_MODES = 6 };
static const char *mode_name[N_MODES] = {"first", "auto", "huge", "big", "mid", "small"};

static uint64_t rng = 88172645463325252ull;
#define MF_TOL_FIRST 4e-5

static float frand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* rows x in F16 weights (device) and their exact values (host) */
typedef struct { int64_t rows, in; uint16_t *dW; float *wf; } mat;

static mat mat_new(int64_t rows, int64_t in) {
    const quant_traits *f16 = quant_get(GGML_TYPE_F16);
    mat m = {rows, in, NULL, malloc(sizeof(float) * rows * in)};
    uint16_t *h = malloc(2 * rows * in);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < in; i++) m.wf[r * in + i] = frand() * (1.0f + (r % 7)) * 0.05f;
        f16->quant(m.wf + r * in, h + r * in, in);
        f16->dequant(h + r * in, m.wf + r * in, in);
    }
    CK(cudaMalloc((void **)&m.dW, 2 * rows * in));
    CK(cudaMemcpy(m.dW, h, 2 * rows * in, cudaMemcpyHostToDevice));
    free(h);
    return m;
}
static void mat_free(mat *m) { cudaFree(m->dW); free(m->wf); }

/* T activation rows of in floats, xs floats apart */
static float *x_new(int T, int64_t in, int64_t xs) {
    float *x = malloc(sizeof(float) * T * xs);
    for (int64_t i = 0; i < (int64_t)T * xs; i++) x[i] = frand() * (i % 13 == 0 ? 10.0f : 1.0f);
    return x;
}

static void ref(const mat *m, const float *x, int T, int64_t xs, double *y) {
    for (int t = 0; t < T; t++)
        for (int64_t r = 0; r < m->rows; r++) {
            const float *w = m->wf + r * m->in, *a = x + (int64_t)t * xs;
            double s = 0;
            for (int64_t i = 0; i < m->in; i++) s += (double)w[i] * a[i];
            y[(int64_t)t * m->rows + r] = s;
        }
}

static void run(int mode, const mat *m, const float *dx, int64_t xs, int T, float *dy, int64_t ys, int acc) {
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    g.w = m->dW; g.wtype = 1; g.rows = m->rows; g.in = m->in; g.row_bytes = 2 * m->in;
    g.act = dx; g.act_f32 = 1; g.act_stride = xs * 4; g.act_div = 1;
    g.out = dy; g.out_stride = ys; g.ntok = T; g.accumulate = acc;
    if (!cu_mmf16_supported(&g)) { printf("FAIL not supported\n"); exit(1); }
    cu_mmf16_mode(mode);
    cu_mmf16(&g, (T + 63) / 64, 0);
    cu_mmf16_mode(-1);
}

/* max|y - ref| / max|ref| over T x rows, out rows ys floats apart */
static double rel_err(const float *y, int64_t ys, const double *yr, int T, int64_t rows, const float *base) {
    double md = 0, mr = 0;
    for (int t = 0; t < T; t++)
        for (int64_t r = 0; r < rows; r++) {
            double v = yr[(int64_t)t * rows + r] + (base ? base[(int64_t)t * ys + r] : 0.0);
            double d = fabs(v - y[(int64_t)t * ys + r]);
            if (fabs(v) > mr) mr = fabs(v);
            if (!(d <= md)) md = isnan(d) ? INFINITY : d;
        }
    return md / (mr > 0 ? mr : 1);
}

/* gaps between strided output rows hold this pattern and must keep it */
#define CANARY 0x7fc0dead
static int gaps_intact(const float *y, int64_t ys, int T, int64_t rows) {
    for (int t = 0; t < T; t++)
        for (int64_t r = rows; r < ys; r++) {
            uint32_t u;
            memcpy(&u, &y[(int64_t)t * ys + r], 4);
            if (u != CANARY) return 0;
        }
    return 1;
}

/* Against the reference in every kernel; strided input (in + 16 floats) and
 * output (rows + 5), then accumulate onto the stored result. */
static int check_ref(int64_t rows, int64_t in, int T) {
    mat m = mat_new(rows, in);
    int64_t xs = in + 16, ys = rows + 5;
    float *x = x_new(T, in, xs);
    double *yr = malloc(sizeof(double) * T * rows);
    ref(&m, x, T, xs, yr);
    float *dx, *dy;
    size_t ybytes = sizeof(float) * T * ys;
    CK(cudaMalloc((void **)&dx, sizeof(float) * T * xs)); CK(cudaMalloc((void **)&dy, ybytes));
    CK(cudaMemcpy(dx, x, sizeof(float) * T * xs, cudaMemcpyHostToDevice));
    float *y = malloc(ybytes), *y0 = malloc(ybytes), *ya = malloc(ybytes);
    int fail = 0;
    double old_err = 0;
    for (int mode = 0; mode < N_MODES; mode++) {
        CK(cudaMemset(dy, 0, ybytes));
        uint32_t c = CANARY;
        for (int64_t i = 0; i < (int64_t)T * ys; i++) memcpy(&y[i], &c, 4);
        CK(cudaMemcpy(dy, y, ybytes, cudaMemcpyHostToDevice));
        run(mode, &m, dx, xs, T, dy, ys, 0);
        CK(cudaGetLastError());
        CK(cudaMemcpy(y, dy, ybytes, cudaMemcpyDeviceToHost));
        run(mode, &m, dx, xs, T, dy, ys, 1);     /* y + W x */
        CK(cudaMemcpy(ya, dy, ybytes, cudaMemcpyDeviceToHost));
        double e = rel_err(y, ys, yr, T, rows, NULL), ea = rel_err(ya, ys, yr, T, rows, y);
        int gaps = gaps_intact(y, ys, T, rows) && gaps_intact(ya, ys, T, rows);
        if (mode == M_OLD) { old_err = e; memcpy(y0, y, ybytes); }
        /* the first kernel's f32 sums of K = 4096 products reach ~1.1e-5 of max|y| here; the
         * others are held to it: a wrong index or a lost piece is orders of magnitude above */
        const double tol = mode == M_OLD ? MF_TOL_FIRST : fmax(1e-5, 2.0 * old_err);
        int bad = !(e <= tol) || !(ea <= tol) || !gaps;
        fail |= bad;
        int same = 1;
        for (int t = 0; t < T && same; t++) same = !memcmp(y + (int64_t)t * ys, y0 + (int64_t)t * ys, 4 * rows);
        printf("%s ref   %-5s rows %5lld in %5lld T %4d: rel err %.2e (first kernel %.2e), accumulate %.2e%s\n",
               bad ? "FAIL" : "ok  ", mode_name[mode], (long long)rows, (long long)in, T, e, old_err, ea,
               gaps ? "" : ", WROTE OUTSIDE ITS ROWS");
        if (mode != M_OLD)
            printf("info  %-5s rows %5lld in %5lld T %4d: bits %s the first kernel's\n", mode_name[mode], (long long)rows,
                   (long long)in, T, same ? "equal" : "differ from");
    }
    cudaFree(dx); cudaFree(dy);
    free(x); free(yr); free(y); free(y0); free(ya); mat_free(&m);
    return fail;
}

/* A token's bits whatever its batch: sub-batches of the T = 4096 input. */
static int check_batch(int64_t rows, int64_t in) {
    const int T = 4096;
    mat m = mat_new(rows, in);
    float *x = x_new(T, in, in);
    float *dx, *dy, *ds;
    CK(cudaMalloc((void **)&dx, sizeof(float) * T * in));
    CK(cudaMalloc((void **)&dy, sizeof(float) * T * rows)); CK(cudaMalloc((void **)&ds, sizeof(float) * 64 * rows));
    CK(cudaMemcpy(dx, x, sizeof(float) * T * in, cudaMemcpyHostToDevice));
    float *y = malloc(sizeof(float) * T * rows), *ys = malloc(sizeof(float) * 64 * rows);
    const int sub0[3] = {0, 1000, 4000}, subn[3] = {64, 64, 37};
    int fail = 0;
    for (int mode = 0; mode < N_MODES; mode++) {
        run(mode, &m, dx, in, T, dy, rows, 0);
        CK(cudaGetLastError());
        CK(cudaMemcpy(y, dy, sizeof(float) * T * rows, cudaMemcpyDeviceToHost));
        int same = 1;
        for (int s = 0; s < 3; s++) {
            CK(cudaMemset(ds, 0, sizeof(float) * 64 * rows));
            run(mode, &m, dx + (int64_t)sub0[s] * in, in, subn[s], ds, rows, 0);
            CK(cudaMemcpy(ys, ds, sizeof(float) * subn[s] * rows, cudaMemcpyDeviceToHost));
            same &= !memcmp(ys, y + (int64_t)sub0[s] * rows, sizeof(float) * subn[s] * rows);
        }
        /* the first kernel is only kept for A/B: reported, not held to it */
        int bad = !same && mode != M_OLD;
        fail |= bad;
        printf("%s batch %-5s rows %5lld in %5lld: T 4096 vs 64 @0, 64 @1000, 37 @4000: %s\n",
               mode == M_OLD ? "info" : bad ? "FAIL" : "ok  ", mode_name[mode], (long long)rows, (long long)in,
               same ? "same bits" : "bits differ");
    }
    cudaFree(dx); cudaFree(dy); cudaFree(ds);
    free(x); free(y); free(ys); mat_free(&m);
    return fail;
}

/* cu_mmf16_multi: 256 + 256 + 64 rows (the indexer's projections of a
 * ratio-4 layer), outputs of their own strides. */
static int check_multi(int64_t in, int T) {
    const int n = 3;
    const int64_t rows[3] = {256, 256, 64}, ostr[3] = {256, 260, 64};
    mat m[3];
    for (int i = 0; i < n; i++) m[i] = mat_new(rows[i], in);
    float *x = x_new(T, in, in), *dx;
    CK(cudaMalloc((void **)&dx, sizeof(float) * T * in));
    CK(cudaMemcpy(dx, x, sizeof(float) * T * in, cudaMemcpyHostToDevice));
    float *dy[3], *ds[3], *y[3], *ys[3];
    double *yr[3];
    for (int i = 0; i < n; i++) {
        CK(cudaMalloc((void **)&dy[i], sizeof(float) * T * ostr[i])); CK(cudaMalloc((void **)&ds[i], sizeof(float) * T * ostr[i]));
        y[i] = malloc(sizeof(float) * T * ostr[i]); ys[i] = malloc(sizeof(float) * T * ostr[i]);
        yr[i] = malloc(sizeof(double) * 64 * rows[i]);
        ref(&m[i], x, T < 64 ? T : 64, in, yr[i]);
    }
    int fail = 0;
    for (int mode = 0; mode < N_MODES; mode++) {
        cu_mmf16_set s[3];
        for (int i = 0; i < n; i++) {
            s[i].w = m[i].dW; s[i].row_bytes = 2 * in; s[i].rows = rows[i]; s[i].out = dy[i]; s[i].out_stride = ostr[i];
            CK(cudaMemset(dy[i], 0, sizeof(float) * T * ostr[i]));
        }
        cu_mmf16_mode(mode);
        int ran = cu_mmf16_multi(s, n, dx, in, in * 4, T, 0, 0);
        cu_mmf16_mode(-1);
        CK(cudaGetLastError());
        double e = 0;
        int single_same = 1, batch_same = 1;
        for (int i = 0; i < n; i++) {
            CK(cudaMemcpy(y[i], dy[i], sizeof(float) * T * ostr[i], cudaMemcpyDeviceToHost));
            double ei = rel_err(y[i], ostr[i], yr[i], T < 64 ? T : 64, rows[i], NULL);
            if (!(ei <= e)) e = ei;
            CK(cudaMemset(ds[i], 0, sizeof(float) * T * ostr[i]));
            run(mode, &m[i], dx, in, T, ds[i], ostr[i], 0);
            CK(cudaMemcpy(ys[i], ds[i], sizeof(float) * T * ostr[i], cudaMemcpyDeviceToHost));
            single_same &= !memcmp(y[i], ys[i], sizeof(float) * T * ostr[i]);
        }
        /* the same launch on tokens 1000..1063 alone */
        for (int i = 0; i < n; i++) { s[i].out = ds[i]; CK(cudaMemset(ds[i], 0, sizeof(float) * 64 * ostr[i])); }
        cu_mmf16_mode(mode);
        ran &= cu_mmf16_multi(s, n, dx + (int64_t)1000 * in, in, in * 4, 64, 0, 0);
        cu_mmf16_mode(-1);
        for (int i = 0; i < n; i++) {
            CK(cudaMemcpy(ys[i], ds[i], sizeof(float) * 64 * ostr[i], cudaMemcpyDeviceToHost));
            batch_same &= !memcmp(ys[i], y[i] + 1000 * ostr[i], sizeof(float) * 64 * ostr[i]);
        }
        /* auto picks the shape from the launch's total rows: one launch a
         * matrix may take other shapes, so only forced shapes must match */
        int need_single = mode != M_AUTO;
        int bad = !ran || !(e <= MF_TOL_FIRST) || (need_single && !single_same) || (mode != M_OLD && !batch_same);
        fail |= bad;
        printf("%s multi %-5s 256+256+64 rows in %lld T %d: rel err %.2e, %s one launch a matrix, batch %s\n",
               bad ? "FAIL" : "ok  ", mode_name[mode], (long long)in, T, e, single_same ? "equals" : "differs from",
               batch_same ? "same bits" : "bits differ");
    }
    for (int i = 0; i < n; i++) { cudaFree(dy[i]); cudaFree(ds[i]); free(y[i]); free(ys[i]); free(yr[i]); mat_free(&m[i]); }
    cudaFree(dx); free(x);
    return fail;
}

/* mean of 10 launches after one warm-up, in microseconds */
static double time_launches(int mode, const cu_mmf16_set *s, int n, const float *dx, int64_t in, int T) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    cu_mmf16_mode(mode);
    cu_mmf16_multi(s, n, dx, in, in * 4, T, 0, 0);
    cudaEventRecord(e0, 0);
    for (int i = 0; i < 10; i++) cu_mmf16_multi(s, n, dx, in, in * 4, T, 0, 0);
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    cu_mmf16_mode(-1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    return ms * 100.0;
}

/* The Flash prefill launches (T = 4096): one matrix a launch in each kernel,
 * then the multi launches the backend makes. */
static void time_flash(void) {
    const int T = 4096;
    const int64_t shapes[5][2] = {{1024, 4096}, {512, 4096}, {256, 4096}, {64, 4096}, {8192, 1024}};
    const char *what[5] = {"compressor kv or gate (ratio 4)", "compressor kv or gate (ratio 128)",
                           "router, indexer compressor kv or gate", "indexer weights proj", "indexer q_b"};
    float *dx, *dy[5];
    CK(cudaMalloc((void **)&dx, sizeof(float) * T * 4096));
    cu_synth_fill(dx, GGML_TYPE_F32, (int64_t)T * 4096, 7, 1.0f, 0, 0);
    uint16_t *dW[5];
    for (int i = 0; i < 5; i++) {
        CK(cudaMalloc((void **)&dW[i], 2 * 8192 * 1024));
        cu_synth_fill(dW[i], GGML_TYPE_F16, 8192 * 1024, 99 + i, 0.01f, 0, 0);
        CK(cudaMalloc((void **)&dy[i], sizeof(float) * T * 8192));
    }
    CK(cudaDeviceSynchronize());
    for (int k = 0; k < 5; k++) {
        cu_mmf16_set s = {dW[0], 2 * shapes[k][1], shapes[k][0], dy[0], shapes[k][0]};
        double us[N_MODES];
        for (int mode = 0; mode < N_MODES; mode++) us[mode] = time_launches(mode, &s, 1, dx, shapes[k][1], T);
        double flop = 4.0 * shapes[k][0] * shapes[k][1] * T;
        printf("time mmf16 %5lld x %4lld T %d (%s): first %.1f us (%.0f TFLOPS), new %.1f us (%.0f TFLOPS), %.2fx;"
               " huge %.1f big %.1f mid %.1f small %.1f us\n", (long long)shapes[k][0], (long long)shapes[k][1], T, what[k],
               us[M_OLD], flop / us[M_OLD] / 1e6, us[M_AUTO], flop / us[M_AUTO] / 1e6, us[M_OLD] / us[M_AUTO],
               us[M_HUGE], us[M_BIG], us[M_MID], us[M_SMALL]);
    }
    /* the multi launches: compressor kv + gate, indexer compressor kv + gate + weights proj */
    const int64_t mr[2][3] = {{1024, 1024, 0}, {256, 256, 64}};
    const int mn[2] = {2, 3};
    const char *mw[2] = {"compressor kv + gate (ratio 4)", "indexer compressor kv + gate + weights proj"};
    for (int k = 0; k < 2; k++) {
        cu_mmf16_set s[3];
        double sep = 0, flop = 0;
        for (int i = 0; i < mn[k]; i++) {
            cu_mmf16_set si = {dW[i], 2 * 4096, mr[k][i], dy[i], mr[k][i]};
            s[i] = si;
            sep += time_launches(M_AUTO, &si, 1, dx, 4096, T);
            flop += 4.0 * mr[k][i] * 4096 * T;
        }
        double one = time_launches(M_AUTO, s, mn[k], dx, 4096, T), first = 0;
        for (int i = 0; i < mn[k]; i++) first += time_launches(M_OLD, &s[i], 1, dx, 4096, T);
        printf("time mmf16 multi %s T %d: first kernel %.1f us, new one launch a matrix %.1f us, one launch %.1f us"
               " (%.0f TFLOPS)\n", mw[k], T, first, sep, one, flop / one / 1e6);
    }
    cudaFree(dx);
    for (int i = 0; i < 5; i++) { cudaFree(dW[i]); cudaFree(dy[i]); }
}

int main(int argc, char **argv) {
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) { printf("SKIP no CUDA device\n"); return 0; }
    int fail = 0;
    fail |= check_ref(300, 1024, 100);    /* partial row and token tiles */
    fail |= check_ref(72, 256, 33);
    fail |= check_ref(200, 192, 65);      /* 3 stages of 64 */
    fail |= check_ref(64, 4096, 130);
    fail |= check_ref(256, 4096, 70);
    fail |= check_ref(1024, 4096, 40);
    fail |= check_ref(8192, 1024, 36);
    fail |= check_batch(64, 4096);
    fail |= check_batch(256, 4096);
    fail |= check_batch(1024, 4096);
    fail |= check_batch(8192, 1024);
    fail |= check_multi(4096, 1100);
    if (!quick) time_flash();
    printf("%s\n", fail ? "mmf16_check: FAILED" : "mmf16_check: all ok");
    return fail;
}
