/* test_quant_dot.c: quantizer quality and dot-product correctness.
 *  - round trip RMSE on unit Gaussian data, per format, below the figure
 *    ggml's reference quantizers reach on the same kind of data (docs/quant.md);
 *  - every dot equals "dequantize both sides, then dot" within float rounding;
 *  - the scalar and AVX2 kernels agree;
 *  - quant_matvec equals row-by-row dots.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "testutil.h"

static unsigned long long rng = 42;
static double uniform01(void)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((rng >> 11) + 0.5) / 9007199254740992.0;
}
static float gauss(void)
{
    double u1 = uniform01(), u2 = uniform01();
    return (float)(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
}

static const int weight_types[] = {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
    GGML_TYPE_Q4_K, GGML_TYPE_Q2_K, GGML_TYPE_IQ2_XXS, GGML_TYPE_MXFP4,
};
#define N_TYPES (int)(sizeof weight_types / sizeof weight_types[0])

/* Upper bounds of the round-trip RMSE on N(0,1) data. The quantized ones are
 * ggml's reference quantizers' RMSE on the same generator (measured, see
 * docs/quant.md): ours must be at least as good. */
static double rmse_bound(int type)
{
    switch (type) {
    case GGML_TYPE_F32: return 0.0;
    case GGML_TYPE_F16: return 2.5e-4;       /* 2^-11 relative, uniform rounding */
    case GGML_TYPE_BF16: return 2.0e-3;      /* 2^-8 relative */
    case GGML_TYPE_Q8_0: return 0.0055;      /* same algorithm as ggml (0.005342 on its sample) */
    case GGML_TYPE_Q4_K: return 0.0725;      /* ggml 0.07125 (ours ~0.0713) */
    case GGML_TYPE_Q2_K: return 0.2955;      /* ggml quantize_row_q2_K_ref */
    case GGML_TYPE_IQ2_XXS: return 0.3436;   /* ggml quantize_iq2_xxs, uniform importance */
    case GGML_TYPE_MXFP4: return 0.1148;     /* ggml quantize_row_mxfp4_ref */
    }
    return 0;
}

static void test_round_trips(void)
{
    const int64_t n = 256 * 128;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    void *q = malloc(n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = gauss();
    for (int t = 0; t < N_TYPES; t++) {
        const quant_traits *tr = quant_get(weight_types[t]);
        tr->quant(x, q, n);
        tr->dequant(q, y, n);
        double e = 0;
        for (int64_t i = 0; i < n; i++) e += (double)(x[i] - y[i]) * (x[i] - y[i]);
        double rmse = sqrt(e / n);
        printf("  %-8s %6.4f bpw  rmse %.6f (bound %.6f)\n", tr->name, 8.0 * tr->bytes / tr->blck, rmse,
               rmse_bound(weight_types[t]));
        CHECK(rmse <= rmse_bound(weight_types[t]), "%s rmse %.6f above %.6f", tr->name, rmse, rmse_bound(weight_types[t]));
        /* a scaled copy quantizes to a scaled result (scales are not clamped) */
        for (int64_t i = 0; i < 4096; i++) y[i] = x[i] * 1e-3f;
        tr->quant(y, q, 4096);
        tr->dequant(q, y, 4096);
        double e2 = 0;
        for (int64_t i = 0; i < 4096; i++) e2 += (double)(x[i] * 1e-3f - y[i]) * (x[i] * 1e-3f - y[i]);
        CHECK(sqrt(e2 / 4096) <= 1.3e-3 * fmax(rmse_bound(weight_types[t]), 1e-3), "%s small-scale rmse %g", tr->name,
              sqrt(e2 / 4096));
    }
    /* extreme magnitudes: finite output, never NaN/inf */
    static const float extreme[] = {1e-30f, 1e-12f, 1e6f, 1e12f};
    for (size_t k = 0; k < sizeof extreme / sizeof extreme[0]; k++) {
        for (int64_t i = 0; i < 4096; i++) y[i] = x[i] * extreme[k];
        for (int t = 0; t < N_TYPES; t++) {
            const quant_traits *tr = quant_get(weight_types[t]);
            float *z = malloc(4096 * sizeof(float));
            tr->quant(y, q, 4096);
            tr->dequant(q, z, 4096);
            int bad = 0;
            for (int64_t i = 0; i < 4096; i++) bad += !isfinite(z[i]);
            CHECK(bad == 0 || weight_types[t] == GGML_TYPE_F16, "%s scale %g: %d non-finite", tr->name, extreme[k], bad);
            free(z);
        }
    }
    /* all-zero rows stay (nearly) zero; IQ2_XXS cannot encode 0 but must give d = 0 */
    memset(x, 0, 4096 * sizeof(float));
    for (int t = 0; t < N_TYPES; t++) {
        const quant_traits *tr = quant_get(weight_types[t]);
        tr->quant(x, q, 4096);
        tr->dequant(q, y, 4096);
        int nz = 0;
        for (int i = 0; i < 4096; i++) nz += y[i] != 0;
        CHECK(nz == 0, "%s zero row dequantizes to %d non-zeros", tr->name, nz);
    }
    free(x); free(y); free(q);
}

/* dot(w, quant(x)) vs sum(dequant(w) * dequant(quant(x))) in double. */
static void test_dots(void)
{
    const int64_t n = 1024;
    float *w = malloc(n * sizeof(float)), *x = malloc(n * sizeof(float));
    float *wd = malloc(n * sizeof(float)), *xd = malloc(n * sizeof(float));
    void *wq = malloc(n * 4), *xq = malloc(n * 4);
    for (int trial = 0; trial < 20; trial++) {
        float xs = trial % 3 == 0 ? 100.0f : trial % 3 == 1 ? 1.0f : 1e-3f;
        for (int64_t i = 0; i < n; i++) { w[i] = gauss(); x[i] = gauss() * xs; }
        if (trial == 5) for (int64_t i = 0; i < 256; i++) x[i] = 0;   /* a zero activation block */
        for (int t = 0; t < N_TYPES; t++) {
            const quant_traits *tr = quant_get(weight_types[t]);
            const quant_traits *at = quant_get(tr->vec_dot_type);
            tr->quant(w, wq, n);
            tr->dequant(wq, wd, n);
            CHECK(quant_quantize_activation(tr->vec_dot_type, x, xq, n) == 0, "%s activation", tr->name);
            at->dequant(xq, xd, n);
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) { ref += (double)wd[i] * xd[i]; mag += fabs((double)wd[i] * xd[i]); }
            float s_scalar, s_simd;
            quant_use_simd = 0;
            tr->dot(n, &s_scalar, wq, xq);
            quant_use_simd = 1;
            tr->dot(n, &s_simd, wq, xq);
            double tol = 2e-6 * mag + 1e-30;
            CHECK(fabs(s_scalar - ref) <= tol, "%s scalar dot %.9g vs %.9g (trial %d)", tr->name, s_scalar, ref, trial);
            CHECK(fabs(s_simd - ref) <= tol, "%s simd dot %.9g vs %.9g (trial %d)", tr->name, s_simd, ref, trial);
            CHECK(fabs(s_simd - s_scalar) <= tol, "%s scalar vs simd", tr->name);
            /* the activation quantization itself is close to x */
            double ex = 0, nx = 0;
            for (int64_t i = 0; i < n; i++) { ex += (double)(xd[i] - x[i]) * (xd[i] - x[i]); nx += (double)x[i] * x[i]; }
            CHECK(ex <= 1e-4 * nx + 1e-30, "%s activation error %g of %g", at->name, ex, nx);
        }
    }
    free(w); free(x); free(wd); free(xd); free(wq); free(xq);
}

static void test_matvec(void)
{
    const int64_t rows = 7, cols = 512;
    float *W = malloc(rows * cols * sizeof(float)), *x = malloc(cols * sizeof(float));
    void *Wq = malloc(rows * cols * 4), *xq = malloc(cols * 4);
    float y[7], yr;
    for (int64_t i = 0; i < rows * cols; i++) W[i] = gauss();
    for (int64_t i = 0; i < cols; i++) x[i] = gauss();
    for (int t = 0; t < N_TYPES; t++) {
        const quant_traits *tr = quant_get(weight_types[t]);
        tr->quant(W, Wq, rows * cols);
        CHECK(quant_matvec(weight_types[t], Wq, rows, cols, x, y) == 0, "%s matvec", tr->name);
        quant_quantize_activation(tr->vec_dot_type, x, xq, cols);
        size_t rb = quant_row_bytes(weight_types[t], cols);
        for (int64_t r = 0; r < rows; r++) {
            tr->dot(cols, &yr, (uint8_t *)Wq + r * rb, xq);
            CHECK(yr == y[r], "%s matvec row %d", tr->name, (int)r);
        }
    }
    CHECK(quant_matvec(GGML_TYPE_Q4_K, Wq, 1, 100, x, y) != 0, "bad cols rejected");
    CHECK(quant_matvec(3, Wq, 1, 256, x, y) != 0, "unknown type rejected");
    free(W); free(x); free(Wq); free(xq);
}

int main(void)
{
    test_round_trips();
    test_dots();
    test_matvec();
    return test_finish("test_quant_dot");
}
