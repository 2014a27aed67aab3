/* moe_ref.h: what the one-token MoE checks (moe_dec_check.c, moes_check.c)
 * share: their random inputs, the double references built from src/quant's
 * dequantization, the device upload and the Flash-shape timing. Each check has its own generator state (its
 * seed). Header-only: static functions for the two programs. */
#ifndef MINKE_TESTS_MOE_REF_H
#define MINKE_TESTS_MOE_REF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "quant/quant.h"

static uint64_t moe_rng = 0x9E3779B97F4A7C15ull;
static uint32_t urand(void) { moe_rng ^= moe_rng << 13; moe_rng ^= moe_rng >> 7; moe_rng ^= moe_rng << 17; return (uint32_t)(moe_rng >> 32); }
static float frand(void) { return (float)(urand() * (1.0 / 4294967296.0)) * 2.0f - 1.0f; }

/* a normal half near f (|f| in [2^-14, 65504]), enough for random scales */
static uint16_t f16_bits(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    int e = (int)((u >> 23) & 255) - 127 + 15;
    return (uint16_t)(((u >> 16) & 0x8000) | ((uint32_t)e << 10) | ((u >> 13) & 0x3FF));
}

static double swiglu_d(double g, double u, double lim) {
    if (lim > 1e-6) { if (g > lim) g = lim; if (u > lim) u = lim; if (u < -lim) u = -lim; }
    return g / (1.0 + exp(-g)) * u;
}

/* one token's inputs: x with a few large values, nsel distinct experts of E, router weights */
static void moe_inputs(int64_t in, int E, int nsel, float *x, int *sel, float *rw) {
    for (int64_t i = 0; i < in; i++) x[i] = frand() * (i % 97 == 0 ? 20.f : 1.f);
    for (int e = 0; e < nsel; e++) {
        int ok;
        do { sel[e] = (int)(urand() % (uint32_t)E); ok = 1; for (int k = 0; k < e; k++) ok &= sel[k] != sel[e]; } while (!ok);
        rw[e] = 0.1f + fabsf(frand());
    }
}

/* mid[e][r] = swiglu(gate_sel[e] x, up_sel[e] x) rw[e] in double (ff rows of
 * `in`, rows of rbg bytes); returns max|mid|. row, row2: scratch of `in`. */
static double moe_ref_mid(const quant_traits *tg, const uint8_t *hg, const uint8_t *hu, uint64_t rbg, const int *sel, int nsel,
                          int64_t ff, int64_t in, const float *x, const float *rw, float limit, double *mid, float *row,
                          float *row2) {
    double mmax = 0;
    for (int e = 0; e < nsel; e++)
        for (int64_t r = 0; r < ff; r++) {
            tg->dequant(hg + ((size_t)sel[e] * ff + r) * rbg, row, in);
            tg->dequant(hu + ((size_t)sel[e] * ff + r) * rbg, row2, in);
            double g = 0, u = 0;
            for (int64_t i = 0; i < in; i++) { g += (double)row[i] * x[i]; u += (double)row2[i] * x[i]; }
            mid[e * ff + r] = swiglu_d(g, u, limit) * rw[e];
            mmax = fmax(mmax, fabs(mid[e * ff + r]));
        }
    return mmax;
}

/* out[r] = the sum over the slots e with use[e] >= 0 (all when use is NULL)
 * of down_sel[e] row r . mid[e] in double (in rows of ff, rows of rbd
 * bytes); returns max|out| and, with got, max|got - out| in *maxdiff (a NaN
 * counts as infinite). row: scratch of ff. */
static double moe_ref_down(const quant_traits *td, const uint8_t *hd, uint64_t rbd, const int *sel, const int *use, int nsel,
                           int64_t in, int64_t ff, const float *mid, const float *got, double *maxdiff, float *row) {
    double omax = 0, od = 0;
    for (int64_t r = 0; r < in; r++) {
        double s = 0;
        for (int e = 0; e < nsel; e++) {
            if (use && use[e] < 0) continue;
            td->dequant(hd + ((size_t)sel[e] * in + r) * rbd, row, ff);
            for (int64_t i = 0; i < ff; i++) s += (double)row[i] * mid[e * ff + i];
        }
        omax = fmax(omax, fabs(s));
        if (got) od = fmax(od, isnan(got[r]) ? INFINITY : fabs(got[r] - s));
    }
    if (maxdiff) *maxdiff = od;
    return omax;
}

/* one case's device buffers: the E experts' gate, up and down, x, the
 * router weights, the selection, and room for mid [nsel][ff] and out [in] */
struct moe_dev { uint8_t *g, *u, *d; float *x, *rw, *mid, *out; int *sel; };

/* allocate and upload (mid and out are left unset); the first error */
static cudaError_t moe_dev_upload(struct moe_dev *m, const uint8_t *hg, const uint8_t *hu, size_t ng, const uint8_t *hd,
                                  size_t nd, const float *x, int64_t in, const float *rw, const int *sel, int nsel, int64_t ff) {
    cudaError_t e;
    memset(m, 0, sizeof *m);
    if ((e = cudaMalloc((void **)&m->g, ng)) || (e = cudaMalloc((void **)&m->u, ng)) || (e = cudaMalloc((void **)&m->d, nd)) ||
        (e = cudaMalloc((void **)&m->x, sizeof(float) * in)) || (e = cudaMalloc((void **)&m->rw, sizeof(float) * nsel)) ||
        (e = cudaMalloc((void **)&m->mid, sizeof(float) * nsel * ff)) || (e = cudaMalloc((void **)&m->out, sizeof(float) * in)) ||
        (e = cudaMalloc((void **)&m->sel, sizeof(int) * nsel)))
        return e;
    if ((e = cudaMemcpy(m->g, hg, ng, cudaMemcpyHostToDevice)) || (e = cudaMemcpy(m->u, hu, ng, cudaMemcpyHostToDevice)) ||
        (e = cudaMemcpy(m->d, hd, nd, cudaMemcpyHostToDevice)) ||
        (e = cudaMemcpy(m->x, x, sizeof(float) * in, cudaMemcpyHostToDevice)) ||
        (e = cudaMemcpy(m->rw, rw, sizeof(float) * nsel, cudaMemcpyHostToDevice)))
        return e;
    return cudaMemcpy(m->sel, sel, sizeof(int) * nsel, cudaMemcpyHostToDevice);
}

static void moe_dev_free(struct moe_dev *m) {
    cudaFree(m->g); cudaFree(m->u); cudaFree(m->d); cudaFree(m->x); cudaFree(m->rw); cudaFree(m->mid); cudaFree(m->out);
    cudaFree(m->sel);
}

/* The Flash-shape timing both checks print: E experts of constant bytes, x
 * (random when x_random, else zeros), zero router weights and MOE_TIME_NS
 * selections of nsel, a different one for each launch; the gate + up and the
 * down each alone (the best of 20), then a graph of MOE_TIME_NS (gate + up,
 * down) pairs. The check's launch(t, which, sel, st) runs the gate + up
 * (which 0) or the down (1) over one selection. */
#define MOE_TIME_NS 43
struct moe_time {
    struct moe_dev dv;     /* dv.sel holds the MOE_TIME_NS selections */
    int type, nsel;
    int64_t in, ff;
    uint64_t rbg, rbd;     /* bytes of a gate / up row, of a down row */
};
typedef void (*moe_time_launch)(const struct moe_time *t, int which, const int *sel, cudaStream_t st);

static cudaError_t moe_time_alloc(struct moe_time *t, int type, int64_t in, int64_t ff, int E, int nsel, uint64_t rbg,
                                  uint64_t rbd, int x_random) {
    struct moe_dev *m = &t->dv;
    const size_t ng = (size_t)E * ff * rbg, nd = (size_t)E * in * rbd;
    cudaError_t e;
    memset(t, 0, sizeof *t);
    t->type = type; t->nsel = nsel; t->in = in; t->ff = ff; t->rbg = rbg; t->rbd = rbd;
    if ((e = cudaMalloc((void **)&m->g, ng)) || (e = cudaMalloc((void **)&m->u, ng)) || (e = cudaMalloc((void **)&m->d, nd)) ||
        (e = cudaMalloc((void **)&m->x, sizeof(float) * in)) || (e = cudaMalloc((void **)&m->rw, sizeof(float) * nsel)) ||
        (e = cudaMalloc((void **)&m->mid, sizeof(float) * nsel * ff)) || (e = cudaMalloc((void **)&m->out, sizeof(float) * in)) ||
        (e = cudaMalloc((void **)&m->sel, sizeof(int) * nsel * MOE_TIME_NS)))
        return e;
    if ((e = cudaMemset(m->g, 0x11, ng)) || (e = cudaMemset(m->u, 0x22, ng)) || (e = cudaMemset(m->d, 0x13, nd)) ||
        (e = cudaMemset(m->x, 0, sizeof(float) * in)) || (e = cudaMemset(m->rw, 0, sizeof(float) * nsel)))
        return e;
    float *x = malloc(sizeof(float) * in);
    int *sel = malloc(sizeof(int) * nsel * MOE_TIME_NS);
    for (int64_t i = 0; x_random && i < in; i++) x[i] = frand();
    for (int k = 0; k < MOE_TIME_NS * nsel; k++) sel[k] = (k * 7 + k / nsel) % E;
    e = x_random ? cudaMemcpy(m->x, x, sizeof(float) * in, cudaMemcpyHostToDevice) : cudaSuccess;
    if (!e) e = cudaMemcpy(m->sel, sel, sizeof(int) * nsel * MOE_TIME_NS, cudaMemcpyHostToDevice);
    free(x); free(sel);
    return e;
}

/* times t's launches and prints "time <label> glu ..., down ...; graph of ..." */
static cudaError_t moe_time_run(const struct moe_time *t, moe_time_launch launch, const char *label) {
    const int NS = MOE_TIME_NS, nsel = t->nsel;
    const int *dsel = t->dv.sel;
    cudaStream_t st;
    cudaEvent_t a, b;
    cudaError_t e;
    if ((e = cudaStreamCreate(&st)) || (e = cudaEventCreate(&a)) || (e = cudaEventCreate(&b))) return e;
    float ms[2] = {0, 0};
    for (int which = 0; which < 2; which++) {
        float best = 1e30f;
        for (int rep = 0; rep < 20; rep++) {
            cudaEventRecord(a, st);
            launch(t, which, dsel + (rep % NS) * nsel, st);
            cudaEventRecord(b, st);
            if ((e = cudaEventSynchronize(b))) return e;
            float ti; cudaEventElapsedTime(&ti, a, b); if (ti < best) best = ti;
        }
        ms[which] = best;
    }
    cudaGraph_t gr; cudaGraphExec_t ge;
    if ((e = cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal))) return e;
    for (int k = 0; k < NS; k++) {
        launch(t, 0, dsel + k * nsel, st);
        launch(t, 1, dsel + k * nsel, st);
    }
    if ((e = cudaStreamEndCapture(st, &gr)) || (e = cudaGraphInstantiate(&ge, gr, 0))) return e;
    if ((e = cudaGraphLaunch(ge, st)) || (e = cudaStreamSynchronize(st))) return e;
    cudaEventRecord(a, st); cudaGraphLaunch(ge, st); cudaEventRecord(b, st);
    if ((e = cudaEventSynchronize(b))) return e;
    float tg; cudaEventElapsedTime(&tg, a, b);
    const double bg = 2.0 * nsel * t->ff * t->rbg, bd = (double)nsel * t->in * t->rbd;
    printf("time %s glu %.2f us (%.0f GB/s), down %.2f us (%.0f GB/s); graph of %d pairs: %.2f us a pair (%.0f GB/s)\n",
           label, ms[0] * 1e3, bg / (ms[0] * 1e-3) / 1e9, ms[1] * 1e3, bd / (ms[1] * 1e-3) / 1e9, NS, tg * 1e3 / NS,
           (bg + bd) / (tg * 1e-3 / NS) / 1e9);
    cudaGraphExecDestroy(ge); cudaGraphDestroy(gr);
    cudaEventDestroy(a); cudaEventDestroy(b); cudaStreamDestroy(st);
    return cudaSuccess;
}

#endif
