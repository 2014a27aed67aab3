/* prefill_ref.h: what the prefill product checks (mmh_check.c, mmx_check.c)
 * share: their generator, the kinds of activation rows, and the per-row
 * error against a double reference. Header-only: static functions for each
 * program (each has its own generator state). */
#ifndef MINKE_TESTS_PREFILL_REF_H
#define MINKE_TESTS_PREFILL_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static uint64_t pr_rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {   /* [0, 1) */
    pr_rng ^= pr_rng << 13; pr_rng ^= pr_rng >> 7; pr_rng ^= pr_rng << 17;
    return (double)(pr_rng >> 11) * (1.0 / 9007199254740992.0);
}
static float frand(void) { return (float)(2.0 * urand() - 1.0); }

/* Activation row t of n elements; the kind cycles with t over `kinds` (4 or 6): plain,
 * six decades inside the row, all zero, zero items with spikes, then rows of 1e-3 and of
 * 1e3 .. 1e4. */
static void act_row(float *x, int64_t n, int t, int kinds) {
    switch (t % kinds) {
    case 0: for (int64_t i = 0; i < n; i++) x[i] = frand(); break;
    case 1: for (int64_t i = 0; i < n; i++) x[i] = frand() * (float)pow(10.0, 6.0 * urand() - 3.0); break;
    case 2: memset(x, 0, sizeof(float) * n); break;
    case 3: for (int64_t i = 0; i < n; i++) x[i] = (i / 32) % 3 == 0 ? 0.f : frand() * (i % 29 == 0 ? 100.f : 1.f); break;
    case 4: for (int64_t i = 0; i < n; i++) x[i] = frand() * 1e-3f; break;
    default: for (int64_t i = 0; i < n; i++) x[i] = frand() * (i % 13 == 0 ? 1e4f : 1e3f); break;
    }
}

/* Errors of outputs against a reference, a row at a time: the error beyond the f32
 * output's own rounding (one ulp of |ref|: with accumulate, y0 + a small product cannot
 * be stored closer), scaled by the largest |W x| (prod: the product alone). */
typedef struct pr_err { double ymax, dmax, worst; int nonfinite; } pr_err;

static void pr_row(pr_err *e, const float *y, const double *ref, const double *prod, int64_t n) {
    double rmax = 0, rd = 0;
    for (int64_t r = 0; r < n; r++) {
        double d = fabs((double)y[r] - ref[r]) - fabs(ref[r]) * 0x1p-23;
        if (d < 0) d = 0;
        if (!isfinite(y[r])) { e->nonfinite++; d = INFINITY; }
        if (fabs(prod[r]) > rmax) rmax = fabs(prod[r]);
        if (d > rd) rd = d;
    }
    if (rmax > e->ymax) e->ymax = rmax;
    if (rd > e->dmax) e->dmax = rd;
    if (rmax > 0 && rd / rmax > e->worst) e->worst = rd / rmax;
    if (rmax == 0 && rd > 0) e->worst = INFINITY;     /* a zero row must give its reference exactly */
}

/* max|diff| / max|W x| over all rows seen */
static double pr_rel(const pr_err *e) { return e->ymax > 0 ? e->dmax / e->ymax : e->dmax; }

#endif
