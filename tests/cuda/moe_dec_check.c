/* moe_dec_check.c: the one-token MoE kernels of cu_gemv3.cu (gate + up +
 * SwiGLU on IQ2_XXS, as stored and repacked: on dp4a, and repacked on the
 * tensor cores (MINKE_CUDA_MOE_MMA=1, the default, and 2: the streamed mma kernel
 * with 8 or 16 computing warps), then the Q2_K down summed over
 * the selected experts) against a double reference built from src/quant's
 * dequantization of the same random weights: mid within 3e-5 of max|mid|,
 * the output within 3e-5 of max|out| (the activations are split into 24-bit
 * pieces of each group's amax, so an element is exact to ~6e-8 of its
 * group's largest, not of itself: a few 1e-6 of the result); the down
 * kernel's rings of rows in flight (MINKE_CUDA_DOWN_SR = 0: registers, 8,
 * 12; the default 4) must all give the same bits. --time times both launches on the Flash
 * shape (4096 -> 2048 experts, 6 of 32 selected, a different set every
 * launch so the weights come from memory) alone and in a graph of 43.
 * --time-ffn times a decode step's FFN half on that shape (timing_ffn).
 * Run on a GPU machine (tests/run-cuda.sh).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "quant/quant.h"
#include "cuda/cu_ops.h"
#include "cuda/cu_gemv3.h"
#include "moe_ref.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL cuda %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

/* MINKE_CUDA_MOE_MMA for the IQ2R cases: 1 (2) the tensor-core gate + up with 8 (16) warps, 0 the dp4a one */
static int mma_mode = 1;

/* random blocks of a type with sane scales: IQ2_XXS and Q8_0 d at byte 0, Q2_K d/dmin at 80/82 */
static void fill(int type, uint8_t *p, size_t nblocks) {
    size_t bs = quant_get(type)->bytes;
    for (size_t b = 0; b < nblocks; b++) {
        uint8_t *q = p + b * bs;
        for (size_t i = 0; i < bs; i++) q[i] = (uint8_t)urand();
        if (type == GGML_TYPE_IQ2_XXS) { uint16_t d = f16_bits(0.002f + 0.004f * fabsf(frand())); memcpy(q, &d, 2); }
        else if (type == GGML_TYPE_Q8_0) { uint16_t d = f16_bits(0.001f + 0.002f * fabsf(frand())); memcpy(q, &d, 2); }
        else { uint16_t d = f16_bits(0.001f + 0.002f * fabsf(frand())), m = f16_bits(0.0005f + 0.001f * fabsf(frand()));
               memcpy(q + 80, &d, 2); memcpy(q + 82, &m, 2); }
    }
}

/* one check: E experts of (ff x in) gate/up and (in x ff) down, nsel selected */
static int check(int64_t in, int64_t ff, int E, int nsel, int repack, float limit) {
    const quant_traits *tg = quant_get(GGML_TYPE_IQ2_XXS), *td = quant_get(GGML_TYPE_Q2_K);
    uint64_t rbg = (uint64_t)(in / 256) * tg->bytes, rbd = (uint64_t)(ff / 256) * td->bytes;
    size_t ng = (size_t)E * ff * rbg, nd = (size_t)E * in * rbd;
    uint8_t *hg = malloc(ng), *hu = malloc(ng), *hd = malloc(nd);
    fill(GGML_TYPE_IQ2_XXS, hg, ng / tg->bytes);
    fill(GGML_TYPE_IQ2_XXS, hu, ng / tg->bytes);
    fill(GGML_TYPE_Q2_K, hd, nd / td->bytes);
    float *x = malloc(sizeof(float) * in), *rw = malloc(sizeof(float) * nsel);
    int *sel = malloc(sizeof(int) * nsel);
    moe_inputs(in, E, nsel, x, sel, rw);
    /* reference */
    double *mid = malloc(sizeof(double) * nsel * ff);
    float *row = malloc(sizeof(float) * (in > ff ? in : ff)), *row2 = malloc(sizeof(float) * in);
    float *midf = malloc(sizeof(float) * nsel * ff);
    const double mmax = moe_ref_mid(tg, hg, hu, rbg, sel, nsel, ff, in, x, rw, limit, mid, row, row2);
    /* the GPU's mid feeds the reference down, so the two checks are independent */
    struct moe_dev dv;
    CK(moe_dev_upload(&dv, hg, hu, ng, hd, nd, x, in, rw, sel, nsel, ff));
    int wt = GGML_TYPE_IQ2_XXS;
    if (repack) {
        if (!cu_repack_iq2_xxs(dv.g, (int64_t)E * ff, in, rbg, 0) || !cu_repack_iq2_xxs(dv.u, (int64_t)E * ff, in, rbg, 0)) {
            printf("FAIL repack refused for in %lld\n", (long long)in); return 1;
        }
        wt = 116;   /* CU_TYPE_IQ2R */
    }
    if (!cu_moe_dec_supported(wt, wt, GGML_TYPE_Q2_K, in, ff, nsel)) { printf("FAIL moe_dec unsupported shape\n"); return 1; }
    cu_moe_dec_glu(wt, dv.g, dv.u, rbg, rbg * ff, ff, in, dv.x, dv.sel, dv.rw, nsel, limit, dv.mid, 0);
    cu_moe_dec_down(dv.d, rbd, rbd * in, in, ff, dv.mid, dv.sel, nsel, dv.out, 0);
    CK(cudaDeviceSynchronize());
    float *gout = malloc(sizeof(float) * in);
    CK(cudaMemcpy(midf, dv.mid, sizeof(float) * nsel * ff, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gout, dv.out, sizeof(float) * in, cudaMemcpyDeviceToHost));
    double md = 0;
    for (int64_t i = 0; i < nsel * ff; i++) md = fmax(md, fabs(midf[i] - mid[i]));
    /* the down kernel with its shared-memory rings of rows (MINKE_CUDA_DOWN_SR)
     * and not streamed (MINKE_CUDA_DOWN_S=0): the same bits as the default */
    int srbad = 0;
    {
        static const int srs[4] = {0, 4, 8, 12};     /* against gout: the default (streamed on sm_90) */
        float *o1 = malloc(sizeof(float) * in);
        cu_moe_down_stream_set(0);
        for (int k = 0; k < 4; k++) {
            cu_moe_down_sr_set(srs[k]);
            CK(cudaMemset(dv.out, 0xFF, sizeof(float) * in));
            cu_moe_dec_down(dv.d, rbd, rbd * in, in, ff, dv.mid, dv.sel, nsel, dv.out, 0);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(o1, dv.out, sizeof(float) * in, cudaMemcpyDeviceToHost));
            int dq = 0;
            for (int64_t i = 0; i < in; i++) dq += memcmp(&o1[i], &gout[i], 4) != 0;
            if (dq) {
                printf("FAIL moe_dec down SR=%d: %d of %lld values differ from the default kernel's bits\n", srs[k], dq, (long long)in);
                srbad = 1;
            }
        }
        cu_moe_down_sr_set(-1);
        cu_moe_down_stream_set(-1);
        free(o1);
    }
    double od;
    const double omax = moe_ref_down(td, hd, rbd, sel, NULL, nsel, in, ff, midf, gout, &od, row);
    int bad = srbad || !(md <= 3e-5 * mmax) || !(od <= 3e-5 * omax) || !(mmax > 0) || !(omax > 0);
    printf("%s moe_dec in %lld ff %lld sel %d/%d %s%s limit %g: mid max|diff| %.3g of %.3g, out %.3g of %.3g\n", bad ? "FAIL" : "ok",
           (long long)in, (long long)ff, nsel, E, repack ? "IQ2R" : "IQ2_XXS", repack && mma_mode ? (mma_mode == 2 ? " mma16" : " mma8") : "", limit, md, mmax,
           od, omax);
    /* one GPU of two (expert parallel): the slots of experts >= E/2 belong to
     * the other GPU (sel -1). The owned slots' mid must be the same bits as
     * above, the others untouched, and out the sum over the owned slots only. */
    {
        int *msel = malloc(sizeof(int) * nsel), nown = 0;
        for (int e = 0; e < nsel; e++) { msel[e] = sel[e] < E / 2 ? sel[e] : -1; nown += msel[e] >= 0; }
        CK(cudaMemcpy(dv.sel, msel, sizeof(int) * nsel, cudaMemcpyHostToDevice));
        CK(cudaMemset(dv.mid, 0xFF, sizeof(float) * nsel * ff));      /* NaN: a slot read that should not be */
        cu_moe_dec_glu(wt, dv.g, dv.u, rbg, rbg * ff, ff, in, dv.x, dv.sel, dv.rw, nsel, limit, dv.mid, 0);
        cu_moe_dec_down(dv.d, rbd, rbd * in, in, ff, dv.mid, dv.sel, nsel, dv.out, 0);
        CK(cudaDeviceSynchronize());
        float *mmid = malloc(sizeof(float) * nsel * ff);
        CK(cudaMemcpy(mmid, dv.mid, sizeof(float) * nsel * ff, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gout, dv.out, sizeof(float) * in, cudaMemcpyDeviceToHost));
        int mbad = 0;
        for (int e = 0; e < nsel; e++) {
            uint32_t nanbits = 0xFFFFFFFFu;
            for (int64_t i = 0; i < ff; i++)
                mbad += msel[e] >= 0 ? memcmp(&mmid[e * ff + i], &midf[e * ff + i], 4) != 0
                                     : memcmp(&mmid[e * ff + i], &nanbits, 4) != 0;
        }
        double mod;
        const double mo = moe_ref_down(td, hd, rbd, sel, msel, nsel, in, ff, midf, gout, &mod, row);
        int b2 = mbad != 0 || !(mod <= 3e-5 * mo) || (nown && !(mo > 0));
        printf("%s moe_dec owned slots %d of %d: mid %d values differ, out %.3g of %.3g\n", b2 ? "FAIL" : "ok", nown, nsel,
               mbad, mod, mo);
        bad |= b2;
        free(msel); free(mmid);
    }
    moe_dev_free(&dv);
    free(hg); free(hu); free(hd); free(x); free(rw); free(sel); free(mid); free(row); free(row2); free(midf); free(gout);
    return bad;
}

/* one token's product of Q8_0R rows (and a second matrix w2 into out2, as
 * the backend's gate + up pair) with f32 activations, as the backend's
 * matmul; beside: cu_gemv_args.beside (the shared down's small blocks) */
static void q8r_gemv(const void *w, const void *w2, int64_t rows, int64_t in, uint64_t row_bytes, const float *x, float *out,
                     float *out2, int beside, cudaStream_t st) {
    cu_gemv_args g;
    memset(&g, 0, sizeof g);
    g.act_f32 = 1; g.w = w; g.w2 = w2; g.wtype = 108 /* CU_TYPE_Q8_0R */; g.rows = rows; g.in = in; g.row_bytes = row_bytes;
    g.act = x; g.act_stride = in * 4; g.act_div = 1; g.out = out; g.out2 = out2; g.out_stride = rows; g.ntok = 1; g.nt_hint = 1;
    g.beside = beside;
    cu_gemv(&g, 1, st);
}

/* The shared down's small-block launch (cu_gemv_args.beside: k_g3_q8 in
 * 4-warp blocks) against the default one on random Q8_0 rows (repacked) and
 * activations: every output bit the same. */
static int check_beside(int64_t rows, int64_t in) {
    const quant_traits *t8 = quant_get(GGML_TYPE_Q8_0);
    const uint64_t rb = (uint64_t)(in / 32) * t8->bytes;
    const size_t n = (size_t)rows * rb;
    uint8_t *h = malloc(n), *w;
    float *x = malloc(sizeof(float) * in), *o0 = malloc(sizeof(float) * rows), *o1 = malloc(sizeof(float) * rows);
    fill(GGML_TYPE_Q8_0, h, n / t8->bytes);
    for (int64_t i = 0; i < in; i++) x[i] = frand() * (i % 7 == 0 ? 40.f : 1.f);
    float *dx, *d0, *d1;
    CK(cudaMalloc((void **)&w, n)); CK(cudaMalloc((void **)&dx, sizeof(float) * in));
    CK(cudaMalloc((void **)&d0, sizeof(float) * rows)); CK(cudaMalloc((void **)&d1, sizeof(float) * rows));
    CK(cudaMemcpy(w, h, n, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dx, x, sizeof(float) * in, cudaMemcpyHostToDevice));
    if (!cu_repack_q8_0(w, rows, in, rb, 0)) { printf("FAIL beside: q8_0 repack refused\n"); return 1; }
    CK(cudaMemset(d1, 0xFF, sizeof(float) * rows));
    q8r_gemv(w, NULL, rows, in, rb, dx, d0, NULL, 0, 0);
    q8r_gemv(w, NULL, rows, in, rb, dx, d1, NULL, 1, 0);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(o0, d0, sizeof(float) * rows, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(o1, d1, sizeof(float) * rows, cudaMemcpyDeviceToHost));
    int diff = 0;
    double mx = 0;
    for (int64_t i = 0; i < rows; i++) { diff += memcmp(&o0[i], &o1[i], 4) != 0; mx = fmax(mx, fabs(o0[i])); }
    const int bad = diff || !(mx > 0);
    printf("%s beside rows %lld in %lld: %d of %lld outputs differ from the default launch (max|out| %.3g)\n",
           bad ? "FAIL" : "ok", (long long)rows, (long long)in, diff, (long long)rows, mx);
    cudaFree(w); cudaFree(dx); cudaFree(d0); cudaFree(d1);
    free(h); free(x); free(o0); free(o1);
    return bad;
}

/* Flash shape timing (moe_ref.h): IQ2R gate + up (type 116), Q2_K down */
static void dec_launch(const struct moe_time *t, int which, const int *s, cudaStream_t st) {
    const struct moe_dev *m = &t->dv;
    if (which == 0) cu_moe_dec_glu(116, m->g, m->u, t->rbg, t->rbg * t->ff, t->ff, t->in, m->x, s, m->rw, t->nsel, 0.f, m->mid, st);
    else cu_moe_dec_down(m->d, t->rbd, t->rbd * t->in, t->in, t->ff, m->mid, s, t->nsel, m->out, st);
}
static void timing(int64_t in, int64_t ff, int E, int nsel) {
    const quant_traits *tg = quant_get(GGML_TYPE_IQ2_XXS), *td = quant_get(GGML_TYPE_Q2_K);
    uint64_t rbg = (uint64_t)(in / 256) * tg->bytes, rbd = (uint64_t)(ff / 256) * td->bytes;
    struct moe_time t;
    CK(moe_time_alloc(&t, 116, in, ff, E, nsel, rbg, rbd, 1));
    if (cu_repack_iq2_xxs(t.dv.g, (int64_t)E * ff, in, rbg, 0) && cu_repack_iq2_xxs(t.dv.u, (int64_t)E * ff, in, rbg, 0))
        CK(moe_time_run(&t, dec_launch, "moe_dec"));
    moe_dev_free(&t.dv);
}

/* --time-ffn: a decode step's FFN half on the Flash shape, in a graph of
 * MOE_TIME_NS layers: the routed gate + up and down (as --time) on one
 * stream, and the shared expert (the Q8_0R gate + up pair over the same x,
 * the SwiGLU, the down: 2 x 2048 x 4096 and 4096 x 2048) forked onto a second
 * stream after the layer's start and joined after the routed down, as the
 * backend's ffn_layer runs them; then each half alone, and "both" with the
 * shared down in small blocks (cu_gemv_args.beside: "beside"). The difference
 * between "both" and "routed" is what the shared expert costs the step
 * (docs/performance.md, twenty-second session: 9-12 us a layer in the whole
 * step), measured apart from the rest of it. Weights are constant bytes. */
static void timing_ffn(void) {
    const int64_t in = 4096, ff = 2048;
    const int E = 32, nsel = 6, NS = MOE_TIME_NS;
    const quant_traits *tg = quant_get(GGML_TYPE_IQ2_XXS), *td = quant_get(GGML_TYPE_Q2_K);
    const uint64_t rbg = (uint64_t)(in / 256) * tg->bytes, rbd = (uint64_t)(ff / 256) * td->bytes;
    const uint64_t rbs = (uint64_t)(in / 32) * 34, rbsd = (uint64_t)(ff / 32) * 34;    /* Q8_0R rows */
    struct moe_time t;
    CK(moe_time_alloc(&t, 116, in, ff, E, nsel, rbg, rbd, 1));
    if (!cu_repack_iq2_xxs(t.dv.g, (int64_t)E * ff, in, rbg, 0) || !cu_repack_iq2_xxs(t.dv.u, (int64_t)E * ff, in, rbg, 0)) {
        printf("skip time ffn: the IQ2 rows do not repack\n");
        moe_dev_free(&t.dv);
        return;
    }
    uint8_t *sg, *su, *sd;
    float *sgo, *suo, *smid, *so;
    CK(cudaMalloc((void **)&sg, ff * rbs)); CK(cudaMalloc((void **)&su, ff * rbs)); CK(cudaMalloc((void **)&sd, in * rbsd));
    CK(cudaMemset(sg, 0x11, ff * rbs)); CK(cudaMemset(su, 0x12, ff * rbs)); CK(cudaMemset(sd, 0x13, in * rbsd));
    CK(cudaMalloc((void **)&sgo, sizeof(float) * ff)); CK(cudaMalloc((void **)&suo, sizeof(float) * ff));
    CK(cudaMalloc((void **)&smid, sizeof(float) * ff)); CK(cudaMalloc((void **)&so, sizeof(float) * in));
    cudaStream_t st, st2;
    cudaEvent_t fork, join, a, b;
    CK(cudaStreamCreate(&st)); CK(cudaStreamCreate(&st2));
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming)); CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
    const double bytes_r = 2.0 * nsel * ff * rbg + (double)nsel * in * rbd, bytes_s = 2.0 * ff * rbs + (double)in * rbsd;
    const char *name[4] = {"routed", "shared", "both", "beside"};
    for (int mode = 0; mode < 4; mode++) {
        cudaGraph_t gr;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        for (int k = 0; k < NS; k++) {
            const int *sel = t.dv.sel + k * nsel;
            cudaStream_t ss = st;
            if (mode >= 2) {
                CK(cudaEventRecord(fork, st));
                CK(cudaStreamWaitEvent(st2, fork, 0));
                ss = st2;
            }
            if (mode >= 1) {
                q8r_gemv(sg, su, ff, in, rbs, t.dv.x, sgo, suo, 0, ss);
                cu_swiglu(sgo, suo, NULL, 1, (int)ff, 0.f, smid, ss);
                q8r_gemv(sd, NULL, in, ff, rbsd, smid, so, NULL, mode == 3, ss);
                if (mode >= 2) CK(cudaEventRecord(join, st2));
            }
            if (mode != 1) {
                dec_launch(&t, 0, sel, st);
                dec_launch(&t, 1, sel, st);
            }
            if (mode >= 2) CK(cudaStreamWaitEvent(st, join, 0));
        }
        CK(cudaStreamEndCapture(st, &gr));
        CK(cudaGraphInstantiate(&ge, gr, 0));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaStreamSynchronize(st));
        float best = 1e30f;
        for (int rep = 0; rep < 5; rep++) {
            CK(cudaEventRecord(a, st)); CK(cudaGraphLaunch(ge, st)); CK(cudaEventRecord(b, st));
            CK(cudaEventSynchronize(b));
            float ms; CK(cudaEventElapsedTime(&ms, a, b)); if (ms < best) best = ms;
        }
        const double by = mode == 0 ? bytes_r : mode == 1 ? bytes_s : bytes_r + bytes_s;     /* both, beside: all */
        printf("time ffn %-6s graph of %d layers: %.2f us a layer (%.0f GB/s)\n", name[mode], NS, best * 1e3 / NS,
               by / (best * 1e-3 / NS) / 1e9);
        cudaGraphExecDestroy(ge); cudaGraphDestroy(gr);
    }
    cudaEventDestroy(fork); cudaEventDestroy(join); cudaEventDestroy(a); cudaEventDestroy(b);
    cudaStreamDestroy(st); cudaStreamDestroy(st2);
    cudaFree(sg); cudaFree(su); cudaFree(sd); cudaFree(sgo); cudaFree(suo); cudaFree(smid); cudaFree(so);
    moe_dev_free(&t.dv);
}

int main(int argc, char **argv) {
    int dev = 0;
    if (cudaGetDeviceCount(&dev) != cudaSuccess || dev < 1) { printf("skip moe_dec_check: no CUDA device\n"); return 0; }
    if (cu_tables_init_from_quant()) { printf("FAIL tables\n"); return 1; }
    if (argc > 1 && !strcmp(argv[1], "--time-ffn")) {
        timing_ffn();
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--time-only")) {     /* for profilers: the default kernels' timing alone */
        timing(4096, 2048, 32, 6);
        return 0;
    }
    int bad = 0;
    bad += check(256, 256, 16, 6, 0, 0.f);
    bad += check(4096, 2048, 8, 6, 0, 7.f);
    /* repacked: the tensor-core gate + up (8, 16 computing warps), then the dp4a one */
    static const int mms[3] = {1, 2, 0};
    for (int mi = 0; mi < 3; mi++) {
        const int mm = mms[mi];
        mma_mode = mm;
        cu_moe_mma_set(mm);
        bad += check(1024, 512, 8, 6, 1, 0.f);     /* 264-byte rows: the dp4a kernel either way */
        bad += check(2048, 256, 8, 6, 1, 0.f);
        bad += check(4096, 2048, 8, 6, 1, 0.f);
        bad += check(4096, 2048, 8, 6, 1, 7.f);
        bad += check(2048, 1024, 4, 3, 1, 0.5f);
        if (argc > 1 && !strcmp(argv[1], "--time")) {
            printf("MINKE_CUDA_MOE_MMA=%d: ", mm); timing(4096, 2048, 32, 6);
            for (int sr = 0; !mm && sr <= 12; sr += 4) {
                cu_moe_down_stream_set(0);
                cu_moe_down_sr_set(sr); printf("MINKE_CUDA_DOWN_S=0 MINKE_CUDA_DOWN_SR=%d: ", sr); timing(4096, 2048, 32, 6);
                cu_moe_down_sr_set(-1);
                cu_moe_down_stream_set(-1);
            }
        }
    }
    cu_moe_mma_set(-1);
    /* the shared down's shape (Flash: 4096 x 2048), and one with a partial last block */
    bad += check_beside(4096, 2048);
    bad += check_beside(1000, 512);
    printf("moe_dec_check: %s\n", bad ? "FAIL" : "all ok");
    return bad != 0;
}
