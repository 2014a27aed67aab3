/* hc_check.c: the newer schedules of the decode-path small kernels against
 * the older kernels they replace, on random inputs.
 *
 * The fused hyper-connection pre step (cu_hc_pre_fused) has three schedules
 * (v1, v2, v3 = the default, with 64 blocks a token; also run with 128) and
 * an unfused form (cu_hc_post + cu_hc_pre).
 * Each is checked against a double-precision CPU reference of the same math
 * (spec model.md §6.7: post step, mix = fn . X * rms, sigmoid pre/post,
 * Sinkhorn comb, weighted sum, RMSNorm) to a relative tolerance of max|ref|
 * per output (Xout 1e-6, x/post/comb 1e-5; the measured errors are printed;
 * a C emulation of v1's float arithmetic lands at 1e-7 .. 5e-7),
 * and must be deterministic (a repeat launch gives the same bits, the ticket
 * counters come back to zero). The schedules are designed to be bit-identical
 * to v1 (same per-element operations and summation orders); each line says
 * whether they are ("bits v2 = v1 yes/NO", including the partial/psq scratch),
 * but only the tolerance and determinism decide ok/FAIL.
 * The unfused form's mixes 16 tokens a block (k_hc_mix_tiled,
 * MINKE_CUDA_HC_MIXT, default on from T = 16: prefill) must give the bits of
 * a block per token (k_hc_mix_partial): through cu_hc_pre in every run from
 * 16 tokens, and alone (cu_hc_mix_partials: partial and psq) over more
 * shapes and T up to 4096, with a timing of both at T 4096 printed always
 * ("hc_check time: hc mixes T 4096 ...").
 * The tensor-core mixes of batches (k_hc_mix_tc, MINKE_CUDA_HC_TC, default on
 * from 64 tokens): each partial within 5e-7 of sum |fn x| of the double dot (1.3e-7 measured),
 * psq within 1e-12, slots past nmix untouched, refused where the chunk is not
 * a multiple of 64; and through cu_hc_pre (T 65 .. 100) against the reference
 * like the other schedules. The unfused step's finish in two launches
 * (k_hc_split_tok + k_hc_pre_apply, MINKE_CUDA_HC_FIN) must give k_hc_pre_finish's
 * bits (x, post, comb; the unfused bits lines compare those, not the scratch).
 * The router, RMSNorm, SwiGLU and MoE sum: v2 must be BIT-identical to v1.
 * With --time, the median microseconds per launch of each schedule (200
 * back-to-back launches between events, PDL as in the engine, 7 repeats);
 * for the HC pre step also with cold weights (each launch reads the next of
 * 128 MB of copies of fn, more than the L2 holds, as the 86 pre steps of a
 * decode step do: 86 x 0.8 MB).
 * Run on a GPU machine: build/cuda/tests/cuda/hc_check [--time].
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "cuda/cu_ops.h"

/* switches and the fused router+tiles entry of cu_hc.cu / cu_moe.cu / cu_ops.cu */
void cu_hc_use_version(int v);
void cu_hc3_set_blocks(int n);
void cu_hc_mix_t_set(int on);
int cu_hc_mix_partials(const float *X, int T, int hcdim, const void *fn, int fntype, int nmix, float *partial,
                       double *psq, int tiled, cudaStream_t st);
int cu_hc_fused_version(int D, int nhc, int nmix, int head);
void cu_hc_mix_tc_set(int on);
void cu_hc_fin_set(int on);
int cu_hc_mix_tc(const float *X, int T, int hcdim, const void *fn, int fntype, int nmix, float *partial, double *psq,
                 cudaStream_t st);
void cu_moe_use_v1(int on);
void cu_ops_use_v1(int on);
void cu_router_tiles1(const float *logits, const float *bias, const int32_t *tid2eid, const int32_t *tokens, int T,
                      int E, int K, float route_scale, int own0, int own1, int *sel, float *w, int *pairs,
                      int *tstart, int *tcount, int *texpert, int *ntiles, cudaStream_t st);

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL cuda %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t urand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float frand(void) { return (float)(urand() >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f; }
static float *rand_f(size_t n, float lo, float hi) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * 0.5f * (frand() + 1.0f);
    return p;
}
static void *dup_dev(const void *h, size_t bytes) {
    void *d;
    CK(cudaMalloc(&d, bytes ? bytes : 4));
    if (h && bytes) CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}
static void *to_host(const void *d, size_t bytes) {
    void *h = malloc(bytes ? bytes : 1);
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    if (bytes) CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
    return h;
}
static int same(const char *what, const char *out, const void *a, const void *b, size_t bytes) {
    if (!memcmp(a, b, bytes)) return 1;
    size_t i = 0;
    while (i < bytes && ((const uint8_t *)a)[i] == ((const uint8_t *)b)[i]) i++;
    printf("FAIL %s: %s differs (first byte %zu of %zu)\n", what, out, i, bytes);
    return 0;
}
static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* the median over 7 repeats of the mean time of 200 launches of fn */
static float time_us(void (*fn)(void *), void *ctx) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (int i = 0; i < 20; i++) fn(ctx);
    float v[7];
    for (int r = 0; r < 7; r++) {
        CK(cudaEventRecord(e0, 0));
        for (int i = 0; i < 200; i++) fn(ctx);
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        v[r] = ms * 1000.0f / 200.0f;
    }
    CK(cudaGetLastError());
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    qsort(v, 7, sizeof(float), cmp_f);
    return v[3];
}

/* ------------------------------------------------------------------ */
/* hyper-connection pre step                                           */

/* cold weights: as many copies of fn as fill 128 MB (> the 50 MB L2) */
#define HC_COLD_BYTES (128u << 20)

typedef struct {
    int T, D, nhc, nmix, iters, head, fntype, use_f1, use_f2, use_norm;
    float hc_eps, rms_eps;
    /* host inputs */
    float *X, *f1, *f2, *post, *comb, *scale, *base, *norm_w;
    void *fn;
    size_t fn_bytes;
    /* device */
    float *dX, *df1, *df2, *dpost, *dcomb, *dscale, *dbase, *dnorm, *dXout, *dpart, *dx;
    double *dpsq;
    int *dcnt;
    void *dfn;
    /* timing with cold weights: ncold copies of fn, used in turn */
    char *dfn_cold;
    int cold, cold_next, ncold;
} hc_case;

typedef struct { float *Xout, *x, *post, *comb, *part; double *psq; int *cnt; } hc_out;

static uint16_t rand_half(void) {
    /* |v| in [2^-6, 2^-2): exponent field 9..12 (bias 15), random mantissa and sign */
    uint32_t r = urand();
    return (uint16_t)(((r & 1u) << 15) | ((9u + ((r >> 1) & 3u)) << 10) | ((r >> 3) & 0x3FFu));
}
static double half_to_double(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp((double)m, -24) : e == 31 ? INFINITY : ldexp((double)(m + 1024), e - 25);
    return (h & 0x8000u) ? -v : v;
}

static void hc_setup(hc_case *c) {
    int T = c->T, D = c->D, nhc = c->nhc, hcdim = D * nhc;
    c->X = rand_f((size_t)T * hcdim, -2.0f, 2.0f);
    c->f1 = rand_f((size_t)T * D, -1.0f, 1.0f);
    c->f2 = rand_f((size_t)T * D, -1.0f, 1.0f);
    c->post = rand_f((size_t)T * nhc, 0.0f, 2.0f);
    c->comb = rand_f((size_t)T * nhc * nhc, 0.0f, 1.0f);
    c->scale = rand_f(3, 0.5f, 2.0f);
    c->base = rand_f(c->nmix, -1.0f, 1.0f);
    c->norm_w = rand_f(D, 0.5f, 1.5f);
    if (c->fntype == 1) {
        c->fn_bytes = sizeof(uint16_t) * (size_t)c->nmix * hcdim;
        uint16_t *h = malloc(c->fn_bytes);
        for (size_t i = 0; i < (size_t)c->nmix * hcdim; i++) h[i] = rand_half();
        c->fn = h;
    } else {
        c->fn_bytes = sizeof(float) * (size_t)c->nmix * hcdim;
        c->fn = rand_f((size_t)c->nmix * hcdim, -0.25f, 0.25f);
    }
    c->dX = dup_dev(c->X, sizeof(float) * T * hcdim);
    c->df1 = dup_dev(c->f1, sizeof(float) * T * D);
    c->df2 = dup_dev(c->f2, sizeof(float) * T * D);
    c->dpost = dup_dev(NULL, sizeof(float) * T * nhc);
    c->dcomb = dup_dev(NULL, sizeof(float) * T * nhc * nhc);
    c->dscale = dup_dev(c->scale, sizeof(float) * 3);
    c->dbase = dup_dev(c->base, sizeof(float) * c->nmix);
    c->dnorm = dup_dev(c->norm_w, sizeof(float) * D);
    c->dfn = dup_dev(c->fn, c->fn_bytes);
    c->dXout = dup_dev(NULL, sizeof(float) * T * hcdim);
    c->dpart = dup_dev(NULL, sizeof(float) * T * 16 * 32);
    c->dpsq = dup_dev(NULL, sizeof(double) * T * 16);
    c->dx = dup_dev(NULL, sizeof(float) * T * D);
    c->dcnt = dup_dev(NULL, sizeof(int) * T);
}
static void hc_free(hc_case *c) {
    free(c->X); free(c->f1); free(c->f2); free(c->post); free(c->comb); free(c->scale); free(c->base);
    free(c->norm_w); free(c->fn);
    cudaFree(c->dX); cudaFree(c->df1); cudaFree(c->df2); cudaFree(c->dpost); cudaFree(c->dcomb);
    cudaFree(c->dscale); cudaFree(c->dbase); cudaFree(c->dnorm); cudaFree(c->dfn); cudaFree(c->dXout);
    cudaFree(c->dpart); cudaFree(c->dpsq); cudaFree(c->dx); cudaFree(c->dcnt);
    if (c->dfn_cold) cudaFree(c->dfn_cold);
}
/* the inputs again, and the outputs filled with the same garbage */
static void hc_reset(hc_case *c) {
    int T = c->T, D = c->D, nhc = c->nhc;
    CK(cudaMemcpy(c->dpost, c->post, sizeof(float) * T * nhc, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c->dcomb, c->comb, sizeof(float) * T * nhc * nhc, cudaMemcpyHostToDevice));
    CK(cudaMemset(c->dXout, 0x7F, sizeof(float) * T * D * nhc));
    CK(cudaMemset(c->dpart, 0x7F, sizeof(float) * T * 16 * 32));
    CK(cudaMemset(c->dpsq, 0x7F, sizeof(double) * T * 16));
    CK(cudaMemset(c->dx, 0x7F, sizeof(float) * T * D));
    CK(cudaMemset(c->dcnt, 0, sizeof(int) * T));
}
/* post_in/comb_in and post/comb are the same buffers, as in the engine;
 * returns what cu_hc_pre_fused says of sk_defer */
static int hc_launch_sk(hc_case *c, int sk_defer) {
    const void *fn = c->dfn;
    if (c->cold) {
        fn = c->dfn_cold + (size_t)c->cold_next * c->fn_bytes;
        c->cold_next = (c->cold_next + 1) % c->ncold;
    }
    return cu_hc_pre_fused(c->dX, c->use_f1 ? c->df1 : NULL, c->use_f1 && c->use_f2 ? c->df2 : NULL, c->dpost,
                           c->dcomb, c->dXout, c->T, c->D, c->nhc, fn, c->fntype, c->nmix, c->dscale, c->dbase,
                           c->use_norm ? c->dnorm : NULL, c->iters, c->hc_eps, c->rms_eps, c->head, c->dpart, c->dpsq,
                           c->dcnt, c->dx, c->dpost, c->dcomb, sk_defer, 0);
}
static void hc_launch(hc_case *c) { hc_launch_sk(c, 0); }
/* the same with comb's Sinkhorn deferred to cu_hc_sinkhorn (on another stream, as the
 * engine runs it, joined by an event); returns what cu_hc_pre_fused said */
static int hc_launch_deferred(hc_case *c, cudaStream_t side, cudaEvent_t ev) {
    int d = hc_launch_sk(c, 1);
    if (d) {
        CK(cudaEventRecord(ev, 0));
        CK(cudaStreamWaitEvent(side, ev, 0));
        cu_hc_sinkhorn(c->dcomb, c->T, c->nhc, c->iters, c->hc_eps, side);
        CK(cudaStreamSynchronize(side));
    }
    return d;
}
static void hc_launch_v(void *p) { hc_launch((hc_case *)p); }
/* the unfused form: cu_hc_post into Xout, then cu_hc_pre on it */
static void hc_launch_unfused(hc_case *c) {
    const float *X = c->dX;
    if (c->use_f1) {
        cu_hc_post(c->dX, c->df1, c->use_f2 ? c->df2 : NULL, c->dpost, c->dcomb, c->T, c->D, c->nhc, c->dXout, 0);
        X = c->dXout;
    }
    cu_hc_pre(X, c->T, c->D, c->nhc, c->dfn, c->fntype, c->nmix, c->dscale, c->dbase, c->use_norm ? c->dnorm : NULL,
              c->iters, c->hc_eps, c->rms_eps, c->head, c->dpart, c->dpsq, c->dx, c->dpost, c->dcomb, 0);
}
static hc_out hc_fetch(hc_case *c) {
    int T = c->T, D = c->D, nhc = c->nhc;
    hc_out o;
    o.Xout = to_host(c->dXout, sizeof(float) * T * D * nhc);
    o.x = to_host(c->dx, sizeof(float) * T * D);
    o.post = to_host(c->dpost, sizeof(float) * T * nhc);
    o.comb = to_host(c->dcomb, sizeof(float) * T * nhc * nhc);
    o.part = to_host(c->dpart, sizeof(float) * T * 16 * 32);
    o.psq = to_host(c->dpsq, sizeof(double) * T * 16);
    o.cnt = to_host(c->dcnt, sizeof(int) * T);
    return o;
}

/* the unfused step with a switch off (o[0]) and on (o[1]), then back to its default */
static void hc_unfused_ab(hc_case *c, void (*set)(int), hc_out o[2]) {
    for (int k = 0; k < 2; k++) {
        hc_reset(c);
        set(k);
        hc_launch_unfused(c);
        o[k] = hc_fetch(c);
    }
    set(-1);
}
static void hc_out_free(hc_out *o) { free(o->Xout); free(o->x); free(o->post); free(o->comb); free(o->part); free(o->psq); free(o->cnt); }

/* The reference: the same math in double from the same (float / f16) inputs. */
typedef struct { double *Xout, *x, *post, *comb; } hc_ref;

static double sigmoid_d(double v) { return 1.0 / (1.0 + exp(-v)); }

static hc_ref hc_reference(const hc_case *c) {
    int T = c->T, D = c->D, nhc = c->nhc, nmix = c->nmix, hcdim = D * nhc, nn = nhc * nhc;
    hc_ref r;
    r.Xout = calloc((size_t)T * hcdim, sizeof(double));
    r.x = calloc((size_t)T * D, sizeof(double));
    r.post = calloc((size_t)T * nhc, sizeof(double));
    r.comb = calloc((size_t)T * nn, sizeof(double));
    double *mix = calloc(nmix, sizeof(double)), *pre = calloc(nhc, sizeof(double));
    for (int t = 0; t < T; t++) {
        double *Xo = r.Xout + (size_t)t * hcdim;
        const float *X = c->X + (size_t)t * hcdim;
        for (int ch = 0; ch < nhc; ch++)
            for (int d = 0; d < D; d++) {
                if (!c->use_f1) { Xo[(size_t)ch * D + d] = X[(size_t)ch * D + d]; continue; }
                double f = c->f1[(size_t)t * D + d] + (c->use_f2 ? (double)c->f2[(size_t)t * D + d] : 0.0);
                double v = (double)c->post[t * nhc + ch] * f;
                for (int rr = 0; rr < nhc; rr++) v += (double)c->comb[t * nn + rr * nhc + ch] * X[(size_t)rr * D + d];
                Xo[(size_t)ch * D + d] = v;
            }
        double sq = 0;
        for (int k = 0; k < hcdim; k++) sq += Xo[k] * Xo[k];
        double rms = 1.0 / sqrt(sq / hcdim + c->rms_eps);
        for (int m = 0; m < nmix; m++) {
            double a = 0;
            for (int k = 0; k < hcdim; k++) {
                size_t i = (size_t)m * hcdim + k;
                double wv = c->fntype == 1 ? half_to_double(((const uint16_t *)c->fn)[i]) : ((const float *)c->fn)[i];
                a += wv * Xo[k];
            }
            mix[m] = a * rms;
        }
        for (int i = 0; i < nhc; i++) pre[i] = sigmoid_d(mix[i] * c->scale[0] + c->base[i]) + c->hc_eps;
        if (!c->head) {
            double *post = r.post + (size_t)t * nhc, *cb = r.comb + (size_t)t * nn;
            for (int i = 0; i < nhc; i++) post[i] = 2.0 * sigmoid_d(mix[nhc + i] * c->scale[1] + c->base[nhc + i]);
            int o = 2 * nhc;
            for (int rr = 0; rr < nhc; rr++) {
                double mx = -INFINITY, s = 0;
                for (int cc = 0; cc < nhc; cc++) {
                    cb[rr * nhc + cc] = mix[o + rr * nhc + cc] * c->scale[2] + c->base[o + rr * nhc + cc];
                    if (cb[rr * nhc + cc] > mx) mx = cb[rr * nhc + cc];
                }
                for (int cc = 0; cc < nhc; cc++) { cb[rr * nhc + cc] = exp(cb[rr * nhc + cc] - mx); s += cb[rr * nhc + cc]; }
                for (int cc = 0; cc < nhc; cc++) cb[rr * nhc + cc] = cb[rr * nhc + cc] / s + c->hc_eps;
            }
            for (int it = 0; it < c->iters; it++) {
                if (it > 0)
                    for (int rr = 0; rr < nhc; rr++) {
                        double s = 0;
                        for (int cc = 0; cc < nhc; cc++) s += cb[rr * nhc + cc];
                        for (int cc = 0; cc < nhc; cc++) cb[rr * nhc + cc] /= s + c->hc_eps;
                    }
                for (int cc = 0; cc < nhc; cc++) {
                    double s = 0;
                    for (int rr = 0; rr < nhc; rr++) s += cb[rr * nhc + cc];
                    for (int rr = 0; rr < nhc; rr++) cb[rr * nhc + cc] /= s + c->hc_eps;
                }
            }
        }
        double *x = r.x + (size_t)t * D, s2 = 0;
        for (int d = 0; d < D; d++) {
            double u = 0;
            for (int i = 0; i < nhc; i++) u += pre[i] * Xo[(size_t)i * D + d];
            x[d] = u;
            s2 += u * u;
        }
        if (c->use_norm) {
            double rn = 1.0 / sqrt(s2 / D + c->rms_eps);
            for (int d = 0; d < D; d++) x[d] = x[d] * rn * c->norm_w[d];
        }
    }
    free(mix); free(pre);
    return r;
}
static void hc_ref_free(hc_ref *r) { free(r->Xout); free(r->x); free(r->post); free(r->comb); }

/* max |got - ref| / max |ref| (inf when got is not finite) */
static double rel_err(const float *got, const double *ref, size_t n) {
    double mx = 0, e = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        if (fabs(ref[i]) > mx) mx = fabs(ref[i]);
        if (fabs(got[i] - ref[i]) > e) e = fabs(got[i] - ref[i]);
    }
    return mx > 0 ? e / mx : e;
}

#define HC_TOL_XOUT 1e-6
#define HC_TOL 1e-5

/* one output set against the reference; prints FAIL lines, returns ok; *ex: the x error */
static int hc_check_ref(const char *what, const char *name, const hc_case *c, const hc_out *o, const hc_ref *r,
                        double *ex) {
    int T = c->T, D = c->D, nhc = c->nhc, ok = 1;
    *ex = rel_err(o->x, r->x, (size_t)T * D);
    if (!(*ex <= HC_TOL)) { printf("FAIL %s: %s x off the reference by %.3g of max|x|\n", what, name, *ex); ok = 0; }
    if (c->use_f1) {
        double e = rel_err(o->Xout, r->Xout, (size_t)T * D * nhc);
        if (!(e <= HC_TOL_XOUT)) { printf("FAIL %s: %s Xout off by %.3g of max|Xout|\n", what, name, e); ok = 0; }
    }
    if (!c->head) {
        double ep = rel_err(o->post, r->post, (size_t)T * nhc), ec = rel_err(o->comb, r->comb, (size_t)T * nhc * nhc);
        if (!(ep <= HC_TOL)) { printf("FAIL %s: %s post off by %.3g of max|post|\n", what, name, ep); ok = 0; }
        if (!(ec <= HC_TOL)) { printf("FAIL %s: %s comb off by %.3g of max|comb|\n", what, name, ec); ok = 0; }
    } else {
        /* the head leaves post/comb alone */
        if (memcmp(o->post, c->post, sizeof(float) * T * nhc) || memcmp(o->comb, c->comb, sizeof(float) * T * nhc * nhc)) {
            printf("FAIL %s: %s (head) wrote post/comb\n", what, name);
            ok = 0;
        }
    }
    return ok;
}
/* bit identity of two output sets (scratch included): 1 = same */
static int hc_bits(const hc_case *c, const hc_out *a, const hc_out *b) {
    int T = c->T, D = c->D, nhc = c->nhc;
    return !memcmp(a->x, b->x, sizeof(float) * T * D) &&
           (!c->use_f1 || !memcmp(a->Xout, b->Xout, sizeof(float) * T * D * nhc)) &&
           !memcmp(a->post, b->post, sizeof(float) * T * nhc) &&
           !memcmp(a->comb, b->comb, sizeof(float) * T * nhc * nhc) &&
           !memcmp(a->part, b->part, sizeof(float) * T * 16 * 32) &&
           !memcmp(a->psq, b->psq, sizeof(double) * T * 16);
}

/* the results only (x, Xout, post, comb): the unfused step leaves other values in its scratch
 * (the split's pre weights in psq) */
static int hc_bits_res(const hc_case *c, const hc_out *a, const hc_out *b) {
    int T = c->T, D = c->D, nhc = c->nhc;
    return !memcmp(a->x, b->x, sizeof(float) * T * D) &&
           (!c->use_f1 || !memcmp(a->Xout, b->Xout, sizeof(float) * T * D * nhc)) &&
           !memcmp(a->post, b->post, sizeof(float) * T * nhc) &&
           !memcmp(a->comb, b->comb, sizeof(float) * T * nhc * nhc);
}

static int hc_nbits_differ = 0;

static int hc_run(int T, int D, int nhc, int nmix, int head, int fntype, int use_f1, int use_f2, int use_norm,
                  int timing) {
    hc_case c;
    memset(&c, 0, sizeof c);
    c.T = T; c.D = D; c.nhc = nhc; c.nmix = nmix; c.iters = 20; c.head = head; c.fntype = fntype;
    c.use_f1 = use_f1; c.use_f2 = use_f2; c.use_norm = use_norm; c.hc_eps = 1e-6f; c.rms_eps = 1e-6f;
    hc_setup(&c);
    char what[160];
    snprintf(what, sizeof what, "hc_pre_fused T %d D %d nhc %d nmix %d head %d fn %s f1 %d f2 %d norm %d", T, D, nhc,
             nmix, head, fntype == 1 ? "f16" : "f32", use_f1, use_f1 && use_f2, use_norm);
    /* the schedules: v1, v2, v3 (64 blocks a token, the default), v3 with
     * 128 blocks a token, and the unfused pair */
    enum { NS = 5 };
    static const char *names[NS] = {"v1", "v2", "v3", "v3/128", "unfused"};
    static const int vers[NS] = {1, 2, 3, 3, 0}, blocks[NS] = {0, 0, 64, 128, 0};
    int ran[NS];
    hc_out o[NS];
    for (int i = 0; i < NS; i++) {
        hc_reset(&c);
        if (vers[i]) {
            cu_hc_use_version(vers[i]);
            cu_hc3_set_blocks(blocks[i]);
            ran[i] = cu_hc_fused_version(D, nhc, nmix, head);
            hc_launch(&c);
        } else {
            ran[i] = 0;
            hc_launch_unfused(&c);
        }
        o[i] = hc_fetch(&c);
    }
    /* the unfused pre step's mixes 16 tokens a block (from 16 tokens,
     * MINKE_CUDA_HC_MIXT, k_hc_mix_tiled) against a block per token: the same bits */
    int ntbad = 0;
    if (T >= 16) {
        hc_out o2[2];
        cu_hc_mix_tc_set(0);        /* (the tensor-core mixes have their own check, hc_mix_run) */
        hc_unfused_ab(&c, cu_hc_mix_t_set, o2);
        cu_hc_mix_tc_set(-1);
        ntbad = !hc_bits(&c, &o2[1], &o2[0]);
        if (ntbad) printf("FAIL %s: the unfused mixes 16 tokens a block differ from a block per token\n", what);
        hc_out_free(&o2[0]);
        hc_out_free(&o2[1]);
    }
    /* the unfused step's finish in two launches (k_hc_split_tok + k_hc_pre_apply, the default)
     * against k_hc_pre_finish: the same bits */
    {
        hc_out o3[2];
        hc_unfused_ab(&c, cu_hc_fin_set, o3);
        if (!hc_bits_res(&c, &o3[1], &o3[0])) {
            printf("FAIL %s: the unfused finish in two launches differs from k_hc_pre_finish\n", what);
            ntbad = 1;
        }
        hc_out_free(&o3[0]);
        hc_out_free(&o3[1]);
    }
    /* v3 with the Sinkhorn deferred (the engine's decode with side streams): every
     * result bit as v3's; only v3 defers, and never for the head */
    if (ran[2] == 3) {
        cudaStream_t side;
        cudaEvent_t ev;
        CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
        CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        cu_hc_use_version(3);
        cu_hc3_set_blocks(0);
        hc_reset(&c);
        int d = hc_launch_deferred(&c, side, ev);
        hc_out od = hc_fetch(&c);
        if (d != !head) {
            printf("FAIL %s: cu_hc_pre_fused deferred %d (want %d)\n", what, d, !head);
            ntbad = 1;
        }
        if (!hc_bits(&c, &od, &o[2])) {
            printf("FAIL %s: the deferred Sinkhorn differs from v3's in-step one\n", what);
            ntbad = 1;
        }
        hc_out_free(&od);
        cudaStreamDestroy(side);
        cudaEventDestroy(ev);
    }
    /* the default twice: the ticket counters must come back to zero and the result repeat */
    cu_hc_use_version(0);
    cu_hc3_set_blocks(0);
    int vdef = cu_hc_fused_version(D, nhc, nmix, head);
    hc_reset(&c); hc_launch(&c); hc_launch(&c); hc_out orep = hc_fetch(&c);
    hc_ref ref = hc_reference(&c);

    double ex[NS];
    int ok = !ntbad;
    for (int i = 0; i < NS; i++) ok &= hc_check_ref(what, names[i], &c, &o[i], &ref, &ex[i]);
    for (int t = 0; t < T; t++) {
        int bad = orep.cnt[t] != 0;
        for (int i = 0; i < NS; i++) bad |= o[i].cnt[t] != 0;
        if (bad) {
            printf("FAIL %s: ticket counter of token %d not back to zero\n", what, t);
            ok = 0;
            break;
        }
    }
    /* with f1 the second launch re-reads post/comb, which the first overwrote: compare x only without */
    if (!use_f1) ok &= same(what, "x of a repeated launch", o[vdef == 1 ? 0 : vdef == 2 ? 1 : 2].x, orep.x,
                            sizeof(float) * T * D);
    char errs[256], bits[256];
    int ne = 0, nb = 0;
    for (int i = 0; i < NS; i++) {
        ne += snprintf(errs + ne, sizeof errs - ne, " %s %.2g", names[i], ex[i]);
        if (i) {
            int b = vers[i] ? hc_bits(&c, &o[i], &o[0]) : hc_bits_res(&c, &o[i], &o[0]);
            hc_nbits_differ += !b;
            nb += snprintf(bits + nb, sizeof bits - nb, "%s%s %s", i > 1 ? ", " : "", names[i], b ? "yes" : "NO");
        }
    }
    printf("%s %s: x err%s; bits = v1: %s (ran v%d v%d v%d v%d)\n", ok ? "ok  " : "FAIL", what, errs, bits, ran[0],
           ran[1], ran[2], ran[3]);
    if (timing) {
        /* hot: the same weights each launch (L2); cold: the next copy of 128 MB of them */
        float tv[4], tc[4];
        c.ncold = (int)(HC_COLD_BYTES / c.fn_bytes) + 1;
        CK(cudaMalloc((void **)&c.dfn_cold, c.fn_bytes * c.ncold));
        for (int i = 0; i < c.ncold; i++)
            CK(cudaMemcpy(c.dfn_cold + (size_t)i * c.fn_bytes, c.dfn, c.fn_bytes, cudaMemcpyDeviceToDevice));
        for (int i = 0; i < 4; i++) {
            cu_hc_use_version(vers[i]);
            cu_hc3_set_blocks(blocks[i]);
            c.cold = 0; tv[i] = time_us(hc_launch_v, &c);
            c.cold = 1; tc[i] = time_us(hc_launch_v, &c);
        }
        c.cold = 0;
        cu_hc_use_version(0);
        cu_hc3_set_blocks(0);
        printf("time %s: v1 %.2f us  v2 %.2f us  v3 %.2f us  v3/128 %.2f us;  cold weights: v1 %.2f us  v2 %.2f us"
               "  v3 %.2f us  v3/128 %.2f us\n", what, tv[0], tv[1], tv[2], tv[3], tc[0], tc[1], tc[2], tc[3]);
    }
    for (int i = 0; i < NS; i++) hc_out_free(&o[i]);
    hc_out_free(&orep);
    hc_ref_free(&ref);
    hc_free(&c);
    return ok;
}

/* The unfused pre step's first kernel alone: partial and psq from 16 tokens
 * a block (k_hc_mix_tiled) against a block per token (k_hc_mix_partial), bit
 * for bit; the tiled kernel must have run (a refused shape falls back). */
typedef struct { hc_case *c; int tiled; } hc_mix_ctx;
static void hc_mix_launch(void *p) {
    hc_mix_ctx *m = p;
    hc_case *c = m->c;
    if (m->tiled == 2) cu_hc_mix_tc(c->dX, c->T, c->D * c->nhc, c->dfn, c->fntype, c->nmix, c->dpart, c->dpsq, 0);
    else cu_hc_mix_partials(c->dX, c->T, c->D * c->nhc, c->dfn, c->fntype, c->nmix, c->dpart, c->dpsq, m->tiled, 0);
}

static int hc_mix_run(int T, int D, int nhc, int nmix, int fntype, int timing) {
    hc_case c;
    memset(&c, 0, sizeof c);
    c.T = T; c.D = D; c.nhc = nhc; c.nmix = nmix; c.iters = 20; c.fntype = fntype;
    c.hc_eps = 1e-6f; c.rms_eps = 1e-6f;
    hc_setup(&c);
    int hcdim = D * nhc, chunk = hcdim / 16;
    char what[160];
    snprintf(what, sizeof what, "hc mixes T %d D %d nhc %d nmix %d fn %s (chunk %d)", T, D, nhc, nmix,
             fntype == 1 ? "f16" : "f32", chunk);
    float *part[2];
    double *psq[2];
    int ran = 0;
    for (int k = 0; k < 2; k++) {
        hc_reset(&c);
        int r = cu_hc_mix_partials(c.dX, T, hcdim, c.dfn, fntype, nmix, c.dpart, c.dpsq, k, 0);
        if (k) ran = r;
        part[k] = to_host(c.dpart, sizeof(float) * T * 16 * 32);
        psq[k] = to_host(c.dpsq, sizeof(double) * T * 16);
    }
    int ok = 1;
    if (!ran) { printf("FAIL %s: the tiled kernel did not run (shape refused)\n", what); ok = 0; }
    /* the first difference, as (token, split, mix) */
    for (int i = 0; i < T * 16 * 32 && ok; i++)
        if (memcmp(&part[0][i], &part[1][i], sizeof(float))) {
            printf("FAIL %s: partial of token %d split %d mix %d: tiled %.9g, per token %.9g\n", what, i / 512,
                   i / 32 % 16, i % 32, part[1][i], part[0][i]);
            ok = 0;
        }
    for (int i = 0; i < T * 16 && ok; i++)
        if (memcmp(&psq[0][i], &psq[1][i], sizeof(double))) {
            printf("FAIL %s: psq of token %d split %d: tiled %.17g, per token %.17g\n", what, i / 16, i % 16,
                   psq[1][i], psq[0][i]);
            ok = 0;
        }
    printf("%s %s: 16 tokens a block = a block per token, bit for bit (partial, psq)\n", ok ? "ok  " : "FAIL", what);
    /* the tensor-core kernel (the default from 64 tokens where it fits): against the double
     * dots, each within 5e-7 of its sum |fn x|; psq within 1e-12; slots past nmix untouched */
    int tc = 0;
    if (fntype == 1) {
        hc_reset(&c);
        tc = cu_hc_mix_tc(c.dX, T, hcdim, c.dfn, fntype, nmix, c.dpart, c.dpsq, 0);
        float *pt = to_host(c.dpart, sizeof(float) * T * 16 * 32);
        double *qt = to_host(c.dpsq, sizeof(double) * T * 16);
        int tcok = 1;
        if (tc != (chunk % 64 == 0)) {
            printf("FAIL %s: the tensor-core mixes %s (chunk %d)\n", what, tc ? "ran" : "were refused", chunk);
            tcok = 0;
        }
        double emax = 0.0, qmax = 0.0;
        const uint16_t *fh = c.fn;
        uint32_t garbage;
        memset(&garbage, 0x7F, sizeof garbage);
        for (int t = 0; t < T && tc && tcok; t++)
            for (int sp = 0; sp < 16 && tcok; sp++) {
                const float *x = c.X + (size_t)t * hcdim + (size_t)sp * chunk;
                double q = 0.0;
                for (int k = 0; k < chunk; k++) q += (double)x[k] * (double)x[k];
                double qe = fabs(qt[t * 16 + sp] - q) / (q > 0 ? q : 1.0);
                if (qe > qmax) qmax = qe;
                for (int m = 0; m < 32; m++) {
                    const float v = pt[((size_t)t * 16 + sp) * 32 + m];
                    if (m >= nmix) {
                        if (memcmp(&v, &garbage, sizeof v)) {
                            printf("FAIL %s: tensor cores wrote slot %d (nmix %d) of token %d\n", what, m, nmix, t);
                            tcok = 0;
                        }
                        continue;
                    }
                    const uint16_t *f = fh + (size_t)m * hcdim + (size_t)sp * chunk;
                    double d = 0.0, a = 0.0;
                    for (int k = 0; k < chunk; k++) {
                        const double p = half_to_double(f[k]) * (double)x[k];
                        d += p;
                        a += fabs(p);
                    }
                    const double e = fabs((double)v - d) / (a > 0 ? a : 1.0);
                    if (!(e <= 5e-7)) {
                        printf("FAIL %s: tensor-core partial of token %d split %d mix %d: %.9g, double %.9g (%.2g of "
                               "sum |fn x|)\n", what, t, sp, m, v, d, e);
                        tcok = 0;
                    }
                    if (e > emax) emax = e;
                }
            }
        if (qmax > 1e-12) { printf("FAIL %s: tensor-core psq off by %.2g\n", what, qmax); tcok = 0; }
        if (tc) printf("%s %s: tensor cores (TF32 pieces) within %.2g of sum |fn x|, psq within %.2g\n",
                       tcok ? "ok  " : "FAIL", what, emax, qmax);
        ok &= tcok;
        free(pt); free(qt);
    }
    if (timing) {
        hc_mix_ctx m0 = {&c, 0}, m1 = {&c, 1}, m2 = {&c, 2};
        float t0 = time_us(hc_mix_launch, &m0), t1 = time_us(hc_mix_launch, &m1);
        float t2 = tc ? time_us(hc_mix_launch, &m2) : 0.f;
        printf("hc_check time: %s, cu_hc_pre's first kernel: a block per token %.1f us, 16 tokens a block %.1f us "
               "per launch (%.2fx), tensor cores %.1f us\n", what, t0, t1, t0 / t1, t2);
    }
    for (int k = 0; k < 2; k++) { free(part[k]); free(psq[k]); }
    hc_free(&c);
    return ok;
}

/* ------------------------------------------------------------------ */
/* router                                                              */

typedef struct {
    int T, E, K;
    float scale;
    float *dlog, *dbias;
    int32_t *dtid, *dtok;
    int *dsel, *dpairs, *dtstart, *dtcount, *dtexp, *dnt;
    float *dw;
    int hash, tiles;
    int own0, own1;     /* the experts "this GPU" owns */
} rt_case;

static void rt_reset(rt_case *r) {
    int P = r->T * r->K;
    CK(cudaMemset(r->dsel, 0x7F, sizeof(int) * P));
    CK(cudaMemset(r->dw, 0x7F, sizeof(float) * P));
    CK(cudaMemset(r->dpairs, 0x7F, sizeof(int) * P));
    CK(cudaMemset(r->dtstart, 0x7F, sizeof(int) * P));
    CK(cudaMemset(r->dtcount, 0x7F, sizeof(int) * P));
    CK(cudaMemset(r->dtexp, 0x7F, sizeof(int) * P));
    CK(cudaMemset(r->dnt, 0x7F, sizeof(int)));
}
static void rt_launch(void *p) {
    rt_case *r = p;
    const float *bias = r->hash ? NULL : r->dbias;
    const int32_t *tid = r->hash ? r->dtid : NULL;
    if (r->tiles)
        cu_router_tiles1(r->dlog, bias, tid, r->dtok, r->T, r->E, r->K, r->scale, r->own0, r->own1, r->dsel, r->dw,
                         r->dpairs, r->dtstart, r->dtcount, r->dtexp, r->dnt, 0);
    else
        cu_router(r->dlog, bias, tid, r->dtok, r->T, r->E, r->K, r->scale, r->own0, r->own1, r->dsel, r->dw, 0);
}
/* the v1 pair of launches that cu_router_tiles1 replaces */
static void rt_launch_pair(void *p) {
    rt_case *r = p;
    cu_router(r->dlog, r->hash ? NULL : r->dbias, r->hash ? r->dtid : NULL, r->dtok, r->T, r->E, r->K, r->scale,
              r->own0, r->own1, r->dsel, r->dw, 0);
    cu_moe_tiles(r->dsel, r->T * r->K, r->E, 1, r->dpairs, r->dtstart, r->dtcount, r->dtexp, r->dnt, 0);
}

/* ties: logits on a coarse grid and a zero bias make many selection values equal */
static int rt_run(int T, int E, int K, int hash, int ties, int timing) {
    rt_case r;
    memset(&r, 0, sizeof r);
    r.T = T; r.E = E; r.K = K; r.scale = 1.5f; r.hash = hash; r.own0 = 0; r.own1 = E;
    int P = T * K, vocab = 1000;
    float *lg = rand_f((size_t)T * E, -6.0f, 6.0f), *bias = rand_f(E, -0.5f, 0.5f);
    if (ties) {
        for (int i = 0; i < T * E; i++) lg[i] = floorf(lg[i] * 2.0f) * 0.5f;
        for (int e = 0; e < E; e++) bias[e] = 0.0f;
    }
    int32_t *tid = malloc(sizeof(int32_t) * vocab * K), *tok = malloc(sizeof(int32_t) * T);
    for (int i = 0; i < vocab * K; i++) tid[i] = (int32_t)(urand() % (uint32_t)E);
    for (int t = 0; t < T; t++) tok[t] = (int32_t)(urand() % (uint32_t)vocab);
    r.dlog = dup_dev(lg, sizeof(float) * T * E);
    r.dbias = dup_dev(bias, sizeof(float) * E);
    r.dtid = dup_dev(tid, sizeof(int32_t) * vocab * K);
    r.dtok = dup_dev(tok, sizeof(int32_t) * T);
    r.dsel = dup_dev(NULL, sizeof(int) * P); r.dw = dup_dev(NULL, sizeof(float) * P);
    r.dpairs = dup_dev(NULL, sizeof(int) * P); r.dtstart = dup_dev(NULL, sizeof(int) * P);
    r.dtcount = dup_dev(NULL, sizeof(int) * P); r.dtexp = dup_dev(NULL, sizeof(int) * P);
    r.dnt = dup_dev(NULL, sizeof(int));
    char what[128];
    snprintf(what, sizeof what, "router T %d E %d K %d%s%s", T, E, K, hash ? " hash" : "", ties ? " ties" : "");
    int ok = 1;
    /* cu_router: v1 vs v2 */
    r.tiles = 0;
    rt_reset(&r); cu_moe_use_v1(1); rt_launch(&r);
    int *s1 = to_host(r.dsel, sizeof(int) * P); float *w1 = to_host(r.dw, sizeof(float) * P);
    rt_reset(&r); cu_moe_use_v1(0); rt_launch(&r);
    int *s2 = to_host(r.dsel, sizeof(int) * P); float *w2 = to_host(r.dw, sizeof(float) * P);
    ok &= same(what, "sel", s1, s2, sizeof(int) * P);
    ok &= same(what, "weights", w1, w2, sizeof(float) * P);
    /* the selection is K distinct experts per token (non-hash) */
    for (int t = 0; t < T && !hash; t++)
        for (int a = 0; a < K; a++)
            for (int b = a + 1; b < K; b++)
                if (s2[t * K + a] == s2[t * K + b] || s2[t * K + a] < 0 || s2[t * K + a] >= E) {
                    if (ok) printf("FAIL %s: token %d selects expert %d twice or out of range\n", what, t, s2[t * K + a]);
                    ok = 0;
                }
    /* cu_router_tiles1 (v2) vs cu_router + cu_moe_tiles (v1) */
    int *outs1[5], *outs2[5];
    int *dev[5] = {r.dsel, r.dpairs, r.dtstart, r.dtcount, r.dtexp};
    const char *names[5] = {"tiles sel", "pairs", "tstart", "tcount", "texpert"};
    rt_reset(&r); cu_moe_use_v1(1); rt_launch_pair(&r);
    for (int i = 0; i < 5; i++) outs1[i] = to_host(dev[i], sizeof(int) * P);
    float *tw1 = to_host(r.dw, sizeof(float) * P); int *nt1 = to_host(r.dnt, sizeof(int));
    r.tiles = 1;
    rt_reset(&r); cu_moe_use_v1(0); rt_launch(&r);
    for (int i = 0; i < 5; i++) outs2[i] = to_host(dev[i], sizeof(int) * P);
    float *tw2 = to_host(r.dw, sizeof(float) * P); int *nt2 = to_host(r.dnt, sizeof(int));
    for (int i = 0; i < 5; i++) ok &= same(what, names[i], outs1[i], outs2[i], sizeof(int) * P);
    ok &= same(what, "tiles weights", tw1, tw2, sizeof(float) * P);
    ok &= same(what, "ntiles", nt1, nt2, sizeof(int));
    /* one GPU of several (expert parallel): owning [E/3, 2E/3) keeps those
     * pairs as they were, marks the others -1 with no tile, weights unchanged;
     * the same from v1, v2 and the fused router+tiles */
    for (int v = 0; v < 3; v++) {
        r.own0 = E / 3; r.own1 = 2 * E / 3; r.tiles = v == 2;
        rt_reset(&r); cu_moe_use_v1(v == 0); rt_launch(&r);
        int *ms = to_host(r.dsel, sizeof(int) * P), *mc = to_host(r.dtcount, sizeof(int) * P);
        float *mw = to_host(r.dw, sizeof(float) * P);
        int bad = 0;
        for (int p = 0; p < P; p++) {
            int own = s2[p] >= r.own0 && s2[p] < r.own1;
            if (ms[p] != (own ? s2[p] : -1) || (v == 2 && mc[p] != own)) bad++;
        }
        if (bad) { printf("FAIL %s: owned range v%d: %d pairs wrong\n", what, v, bad); ok = 0; }
        ok &= same(what, "owned-range weights", w2, mw, sizeof(float) * P);
        free(ms); free(mc); free(mw);
        r.own0 = 0; r.own1 = E;
    }
    cu_moe_use_v1(0);
    printf("%s %s (cu_router v1 == v2; cu_router_tiles1 == cu_router + cu_moe_tiles)\n", ok ? "ok  " : "FAIL", what);
    if (timing) {
        r.tiles = 0;
        cu_moe_use_v1(1); float t1 = time_us(rt_launch, &r);
        cu_moe_use_v1(0); float t2 = time_us(rt_launch, &r);
        cu_moe_use_v1(1); float t3 = time_us(rt_launch_pair, &r);
        r.tiles = 1;
        cu_moe_use_v1(0); float t4 = time_us(rt_launch, &r);
        printf("time %s: router v1 %.2f us  v2 %.2f us;  router+tiles v1 %.2f us  fused v2 %.2f us\n", what, t1, t2, t3, t4);
    }
    for (int i = 0; i < 5; i++) { free(outs1[i]); free(outs2[i]); }
    free(s1); free(s2); free(w1); free(w2); free(tw1); free(tw2); free(nt1); free(nt2);
    free(lg); free(bias); free(tid); free(tok);
    cudaFree(r.dlog); cudaFree(r.dbias); cudaFree(r.dtid); cudaFree(r.dtok); cudaFree(r.dsel); cudaFree(r.dw);
    cudaFree(r.dpairs); cudaFree(r.dtstart); cudaFree(r.dtcount); cudaFree(r.dtexp); cudaFree(r.dnt);
    return ok;
}

/* ------------------------------------------------------------------ */
/* RMSNorm, SwiGLU, MoE sum                                            */

typedef struct { const float *x, *w; int rows, n; float *y; } rms_ctx;
static void rms_launch(void *p) { rms_ctx *c = p; cu_rmsnorm(c->x, c->w, c->rows, c->n, 1e-6f, c->y, 0); }

static int rms_run(int rows, int n, int use_w, int inplace, int timing) {
    float *x = rand_f((size_t)rows * n, -3.0f, 3.0f), *w = rand_f(n, 0.5f, 1.5f);
    float *dx = dup_dev(x, sizeof(float) * rows * n), *dw = dup_dev(w, sizeof(float) * n);
    float *dy = inplace ? dx : dup_dev(NULL, sizeof(float) * rows * n);
    rms_ctx c = {dx, use_w ? dw : NULL, rows, n, dy};
    char what[96];
    snprintf(what, sizeof what, "rmsnorm rows %d n %d%s%s", rows, n, use_w ? "" : " no-weight", inplace ? " in-place" : "");
    cu_ops_use_v1(1); rms_launch(&c);
    float *y1 = to_host(dy, sizeof(float) * rows * n);
    CK(cudaMemcpy(dx, x, sizeof(float) * rows * n, cudaMemcpyHostToDevice));
    cu_ops_use_v1(0); rms_launch(&c);
    float *y2 = to_host(dy, sizeof(float) * rows * n);
    int ok = same(what, "y", y1, y2, sizeof(float) * rows * n);
    printf("%s %s (v1 == v2)\n", ok ? "ok  " : "FAIL", what);
    if (timing && !inplace) {
        cu_ops_use_v1(1); float t1 = time_us(rms_launch, &c);
        cu_ops_use_v1(0); float t2 = time_us(rms_launch, &c);
        printf("time %s: v1 %.2f us  v2 %.2f us\n", what, t1, t2);
    }
    free(x); free(w); free(y1); free(y2);
    cudaFree(dx); cudaFree(dw);
    if (!inplace) cudaFree(dy);
    return ok;
}

typedef struct { const float *g, *u, *w; int P, F; float limit; float *mid; } sw_ctx;
static void sw_launch(void *p) { sw_ctx *c = p; cu_swiglu(c->g, c->u, c->w, c->P, c->F, c->limit, c->mid, 0); }

static int swiglu_run(int P, int F, int use_w, float limit, int timing) {
    float *g = rand_f((size_t)P * F, -12.0f, 12.0f), *u = rand_f((size_t)P * F, -12.0f, 12.0f);
    float *w = rand_f(P, 0.0f, 1.0f);
    float *dg = dup_dev(g, sizeof(float) * P * F), *du = dup_dev(u, sizeof(float) * P * F);
    float *dw = dup_dev(w, sizeof(float) * P), *dm = dup_dev(NULL, sizeof(float) * P * F);
    sw_ctx c = {dg, du, use_w ? dw : NULL, P, F, limit, dm};
    char what[96];
    snprintf(what, sizeof what, "swiglu P %d F %d%s limit %g", P, F, use_w ? " weighted" : "", limit);
    cu_moe_use_v1(1); sw_launch(&c);
    float *m1 = to_host(dm, sizeof(float) * P * F);
    CK(cudaMemset(dm, 0x7F, sizeof(float) * P * F));
    cu_moe_use_v1(0); sw_launch(&c);
    float *m2 = to_host(dm, sizeof(float) * P * F);
    int ok = same(what, "mid", m1, m2, sizeof(float) * P * F);
    printf("%s %s (v1 == v2)\n", ok ? "ok  " : "FAIL", what);
    if (timing) {
        cu_moe_use_v1(1); float t1 = time_us(sw_launch, &c);
        cu_moe_use_v1(0); float t2 = time_us(sw_launch, &c);
        printf("time %s: v1 %.2f us  v2 %.2f us\n", what, t1, t2);
    }
    free(g); free(u); free(w); free(m1); free(m2);
    cudaFree(dg); cudaFree(du); cudaFree(dw); cudaFree(dm);
    return ok;
}

typedef struct { const float *o; int T, K, D; float *m; } ms_ctx;
static void ms_launch(void *p) { ms_ctx *c = p; cu_moe_sum(c->o, NULL, c->T, c->K, c->D, c->m, 0); }

static int moesum_run(int T, int K, int D, int timing) {
    float *o = rand_f((size_t)T * K * D, -4.0f, 4.0f);
    float *dO = dup_dev(o, sizeof(float) * T * K * D), *dm = dup_dev(NULL, sizeof(float) * T * D);
    ms_ctx c = {dO, T, K, D, dm};
    char what[96];
    snprintf(what, sizeof what, "moe_sum T %d K %d D %d", T, K, D);
    cu_moe_use_v1(1); ms_launch(&c);
    float *m1 = to_host(dm, sizeof(float) * T * D);
    CK(cudaMemset(dm, 0x7F, sizeof(float) * T * D));
    cu_moe_use_v1(0); ms_launch(&c);
    float *m2 = to_host(dm, sizeof(float) * T * D);
    int ok = same(what, "sum", m1, m2, sizeof(float) * T * D);
    /* pairs of another GPU's experts (sel -1, their rows garbage): the sum of
     * the others, in order, as with those rows zero */
    {
        int P = T * K;
        int *sel = malloc(sizeof(int) * P);
        float *oz = malloc(sizeof(float) * P * D);
        memcpy(oz, o, sizeof(float) * P * D);
        for (int p = 0; p < P; p++) {
            sel[p] = urand() % 3 ? p % 7 : -1;
            if (sel[p] < 0) for (int d = 0; d < D; d++) { oz[(size_t)p * D + d] = 0.0f; o[(size_t)p * D + d] = NAN; }
        }
        int *dsel = dup_dev(sel, sizeof(int) * P);
        float *dz = dup_dev(oz, sizeof(float) * P * D), *dnan = dup_dev(o, sizeof(float) * P * D);
        cu_moe_use_v1(1); cu_moe_sum(dz, NULL, T, K, D, dm, 0);
        float *z1 = to_host(dm, sizeof(float) * T * D);
        for (int v = 1; v >= 0; v--) {
            CK(cudaMemset(dm, 0x7F, sizeof(float) * T * D));
            cu_moe_use_v1(v); cu_moe_sum(dnan, dsel, T, K, D, dm, 0);
            float *z2 = to_host(dm, sizeof(float) * T * D);
            ok &= same(what, v ? "masked sum v1" : "masked sum v2", z1, z2, sizeof(float) * T * D);
            free(z2);
        }
        free(sel); free(oz); free(z1);
        cudaFree(dsel); cudaFree(dz); cudaFree(dnan);
    }
    printf("%s %s (v1 == v2; pairs of other GPUs' experts skipped)\n", ok ? "ok  " : "FAIL", what);
    if (timing) {
        cu_moe_use_v1(1); float t1 = time_us(ms_launch, &c);
        cu_moe_use_v1(0); float t2 = time_us(ms_launch, &c);
        printf("time %s: v1 %.2f us  v2 %.2f us\n", what, t1, t2);
    }
    free(o); free(m1); free(m2);
    cudaFree(dO); cudaFree(dm);
    return ok;
}

int main(int argc, char **argv) {
    int timing = argc > 1 && !strcmp(argv[1], "--time");
    int ok = 1;
    CK(cudaFree(0));
    static const int Ts[3] = {1, 2, 7};
    for (int i = 0; i < 3; i++) {
        int T = Ts[i], tm = timing && T != 7;
        /* Flash: D 4096, 4 streams, 24 mixes, f16 weights; the sub-layer pre steps
         * (pending post step with one or two inputs, or none) and the head */
        ok &= hc_run(T, 4096, 4, 24, 0, 1, 1, 1, 1, tm);
        ok &= hc_run(T, 4096, 4, 24, 0, 1, 1, 0, 1, 0);
        ok &= hc_run(T, 4096, 4, 24, 0, 1, 0, 0, 1, tm && T == 1);
        ok &= hc_run(T, 4096, 4, 4, 1, 1, 1, 1, 0, tm);
        ok &= hc_run(T, 4096, 4, 4, 1, 1, 0, 0, 1, 0);
    }
    /* small shapes: the half2 path with one weight pair per lane, the generic path (chunk % 64 != 0), f32 weights */
    ok &= hc_run(3, 256, 4, 24, 0, 1, 1, 1, 1, 0);
    ok &= hc_run(2, 64, 4, 24, 0, 1, 1, 1, 1, 0);
    ok &= hc_run(2, 512, 4, 24, 0, 0, 1, 1, 1, 0);
    ok &= hc_run(1, 4096, 4, 24, 0, 0, 1, 1, 1, 0);
    /* the largest fused batch: 31 x 64 blocks, more than are resident at once */
    ok &= hc_run(31, 4096, 4, 24, 0, 1, 1, 1, 1, 0);
    /* the unfused mixes 16 tokens a block: f32 weights, and the generic f16 path (chunk % 64 != 0), partial last tiles */
    ok &= hc_run(17, 512, 4, 24, 0, 0, 1, 1, 1, 0);
    ok &= hc_run(19, 64, 4, 24, 0, 1, 1, 1, 1, 0);
    ok &= hc_run(16, 4096, 4, 4, 1, 1, 0, 0, 1, 0);
    /* prefill batches: the unfused step's mixes on the tensor cores (from 64 tokens) against the reference */
    ok &= hc_run(100, 4096, 4, 24, 0, 1, 1, 1, 1, 0);
    ok &= hc_run(70, 256, 4, 24, 0, 1, 0, 0, 1, 0);
    ok &= hc_run(65, 4096, 4, 4, 1, 1, 0, 0, 0, 0);
    /* the same kernels alone (partial, psq) over more shapes; timed at T 4096 (Flash) */
    static const int mTs[7] = {1, 15, 16, 33, 47, 100, 4096};
    for (int i = 0; i < 7; i++) ok &= hc_mix_run(mTs[i], 4096, 4, 24, 1, mTs[i] == 4096);
    ok &= hc_mix_run(33, 4096, 4, 24, 0, 0);     /* f32 weights: the generic path */
    ok &= hc_mix_run(100, 4096, 4, 24, 0, 0);
    ok &= hc_mix_run(47, 4096, 4, 4, 1, 0);      /* the head's 4 mixes */
    ok &= hc_mix_run(33, 4096, 4, 32, 1, 0);     /* 32 mixes: two slices of row groups */
    ok &= hc_mix_run(20, 512, 4, 7, 0, 0);       /* a partial row group, chunk 128 */
    ok &= hc_mix_run(47, 64, 4, 24, 1, 0);       /* chunk 16: the generic f16 path */
    ok &= hc_mix_run(33, 256, 4, 24, 1, 0);      /* chunk 64: one half2 step a lane */
    ok &= hc_mix_run(33, 8192, 4, 24, 1, 0);     /* chunk 2048: 128 KB of tile */
    ok &= hc_mix_run(130, 4096, 4, 17, 1, 0);    /* 17 mixes (three n8 tiles, the last partial), tokens past 128 */
    ok &= hc_mix_run(64, 512, 4, 32, 1, 0);      /* 32 mixes, chunk 128 */
    /* a shape v2 and v3 do not take (v1 each time) */
    ok &= hc_run(1, 8192, 4, 24, 0, 1, 1, 1, 1, 0);

    static const int rTs[4] = {1, 2, 7, 31};
    for (int i = 0; i < 4; i++) {
        int T = rTs[i], tm = timing && T <= 2;
        ok &= rt_run(T, 256, 6, 0, 0, tm);
        ok &= rt_run(T, 256, 6, 0, 1, 0);
        ok &= rt_run(T, 256, 6, 1, 0, tm);
    }
    ok &= rt_run(3, 16, 4, 0, 1, 0);
    ok &= rt_run(3, 72, 6, 0, 0, 0);
    ok &= rt_run(2, 1024, 8, 0, 1, 0);

    ok &= rms_run(1, 1024, 1, 0, timing);
    ok &= rms_run(7, 1024, 1, 0, 0);
    ok &= rms_run(1, 4096, 1, 1, 0);
    ok &= rms_run(1, 4096, 1, 0, timing);
    ok &= rms_run(2, 64, 0, 0, 0);
    ok &= rms_run(1, 5000, 1, 0, 0);
    ok &= swiglu_run(6, 2048, 1, 7.0f, timing);
    ok &= swiglu_run(1, 2048, 0, 7.0f, timing);
    ok &= swiglu_run(3, 100, 1, 0.0f, 0);
    ok &= moesum_run(1, 6, 4096, timing);
    ok &= moesum_run(7, 6, 4096, 0);
    ok &= moesum_run(2, 9, 64, 0);
    printf("%s%s\n", ok ? "hc_check: all ok" : "hc_check: FAIL",
           hc_nbits_differ ? " (note: some HC pre step outputs not bit-identical to v1, see the bits lines)" : "");
    return ok ? 0 : 1;
}
