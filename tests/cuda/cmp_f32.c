/* cmp_f32.c: compares two float32 files made of rows of N values (logits or
 * taps from `minke logits`), the first being the reference. Prints the worst
 * row's max|diff| relative to the largest |ref| of the whole file and the
 * number of rows whose argmax differs; exits 1 when the relative error is
 * above TOL or (with --argmax) any argmax differs.
 *   usage: cmp_f32 REF.f32 TEST.f32 N TOL [--argmax] [--label TEXT] [--noise REF2.f32]
 * With --noise, REF2 is the reference computed another legitimate way (for a
 * model with quantized activations: the CPU with f32 activations). Such models
 * amplify rounding-level differences (an int8 rounding flip early on changes
 * everything after it), so TEST then passes when it is no further from REF
 * than 1.5x REF2 is (and TOL), with at most 1.5x as many argmax changes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *load(const char *p, long *n) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *v = malloc(sz > 0 ? (size_t)sz : 1);
    if (!v || fread(v, 1, (size_t)sz, f) != (size_t)sz) { fclose(f); free(v); return NULL; }
    fclose(f);
    *n = sz / 4;
    return v;
}

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: cmp_f32 REF TEST N TOL [--argmax] [--label TEXT]\n"); return 2; }
    long na = 0, nb = 0, N = atol(argv[3]);
    double tol = atof(argv[4]);
    int check_arg = 0;
    const char *label = argv[2], *noise_path = NULL;
    for (int i = 5; i < argc; i++) {
        if (!strcmp(argv[i], "--argmax")) check_arg = 1;
        else if (!strcmp(argv[i], "--label") && i + 1 < argc) label = argv[++i];
        else if (!strcmp(argv[i], "--noise") && i + 1 < argc) noise_path = argv[++i];
    }
    float *a = load(argv[1], &na), *b = load(argv[2], &nb);
    if (!a || !b) { printf("FAIL %s: cannot read %s or %s\n", label, argv[1], argv[2]); return 1; }
    if (na != nb || N <= 0 || na % N) { printf("FAIL %s: sizes %ld vs %ld (row %ld)\n", label, na, nb, N); return 1; }
    long rows = na / N, bad_arg = 0, worst_row = 0, nan = 0, first_bad = -1;
    double maxref = 0, maxdiff = 0;
    for (long i = 0; i < na; i++) if (fabs(a[i]) > maxref) maxref = fabs(a[i]);
    for (long r = 0; r < rows; r++) {
        const float *x = a + r * N, *y = b + r * N;
        long ia = 0, ib = 0;
        for (long j = 0; j < N; j++) {
            if (isnan(y[j]) || isinf(y[j])) nan++;
            double d = fabs((double)x[j] - y[j]);
            if (d > maxdiff) { maxdiff = d; worst_row = r; }
            if (x[j] > x[ia]) ia = j;
            if (y[j] > y[ib]) ib = j;
        }
        if (ia != ib) bad_arg++;
    }
    for (long r = 0; r < rows && first_bad < 0; r++)
        for (long j = 0; j < N; j++)
            if (!(fabs((double)a[r * N + j] - b[r * N + j]) <= tol * (maxref > 0 ? maxref : 1))) { first_bad = r; break; }
    double rel = maxref > 0 ? maxdiff / maxref : maxdiff;
    double lim = tol;
    long arg_lim = 0;
    if (noise_path) {
        long nn = 0;
        float *c = load(noise_path, &nn);
        if (!c || nn != na) { printf("FAIL %s: cannot read %s\n", label, noise_path); return 1; }
        double nd = 0;
        long narg = 0;
        for (long r = 0; r < rows; r++) {
            long ia = 0, ic = 0;
            for (long j = 0; j < N; j++) {
                double d = fabs((double)a[r * N + j] - c[r * N + j]);
                if (d > nd) nd = d;
                if (a[r * N + j] > a[r * N + ia]) ia = j;
                if (c[r * N + j] > c[r * N + ic]) ic = j;
            }
            if (ia != ic) narg++;
        }
        double nrel = maxref > 0 ? nd / maxref : nd;
        if (1.5 * nrel > lim) lim = 1.5 * nrel;
        arg_lim = (long)(1.5 * narg);
        printf("     %s: noise reference %s: rel %.3g, argmax differs in %ld rows\n", label, noise_path, nrel, narg);
        tol = lim;
    }
    int fail = nan || !(rel <= lim) || (check_arg && bad_arg > arg_lim);
    printf("%s %s: rows %ld, max|diff| %.3g, max|ref| %.3g, rel %.3g (tol %.3g, worst row %ld, first bad row %ld), argmax differs in %ld rows%s\n",
           fail ? "FAIL" : "ok  ", label, rows, maxdiff, maxref, rel, tol, worst_row, first_bad, bad_arg, nan ? ", NaN/inf!" : "");
    return fail;
}
