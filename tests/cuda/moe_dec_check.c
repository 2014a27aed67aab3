/* moe_dec_check.c: the one-token MoE kernels of cu_gemv3.cu (gate + up +
 * SwiGLU on IQ2_XXS, as stored and repacked: on dp4a, and repacked on the
 * tensor cores (MINKE_CUDA_MOE_MMA), then the Q2_K down summed over
 * the selected experts) against a double reference built from src/quant's
 * dequantization of the same random weights: mid within 3e-5 of max|mid|,
 * the output within 3e-5 of max|out| (the activations are split into 24-bit
 * pieces of each group's amax, so an element is exact to ~6e-8 of its
 * group's largest, not of itself: a few 1e-6 of the result); the down
 * kernel's rings of rows in flight (MINKE_CUDA_DOWN_SR = 0: registers, 8,
 * 12; the default 4) must all give the same bits. --time times both launches on the Flash
 * shape (4096 -> 2048 experts, 6 of 32 selected, a different set every
 * launch so the weights come from memory) alone and in a graph of 43.
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

/* MINKE_CUDA_MOE_MMA for the IQ2R cases: 1 the tensor-core gate + up, 0 the dp4a one */
static int mma_mode = 1;

/* random blocks of a type with sane scales: IQ2_XXS d at byte 0, Q2_K d/dmin at 80/82 */
static void fill(int type, uint8_t *p, size_t nblocks) {
    size_t bs = quant_get(type)->bytes;
    for (size_t b = 0; b < nblocks; b++) {
        uint8_t *q = p + b * bs;
        for (size_t i = 0; i < bs; i++) q[i] = (uint8_t)urand();
        if (type == GGML_TYPE_IQ2_XXS) { uint16_t d = f16_bits(0.002f + 0.004f * fabsf(frand())); memcpy(q, &d, 2); }
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
           (long long)in, (long long)ff, nsel, E, repack ? "IQ2R" : "IQ2_XXS", repack && mma_mode ? " mma" : "", limit, md, mmax,
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

int main(int argc, char **argv) {
    int dev = 0;
    if (cudaGetDeviceCount(&dev) != cudaSuccess || dev < 1) { printf("skip moe_dec_check: no CUDA device\n"); return 0; }
    if (cu_tables_init_from_quant()) { printf("FAIL tables\n"); return 1; }
    if (argc > 1 && !strcmp(argv[1], "--time-only")) {     /* for profilers: the default kernels' timing alone */
        cu_moe_mma_set(0);
        timing(4096, 2048, 32, 6);
        return 0;
    }
    int bad = 0;
    bad += check(256, 256, 16, 6, 0, 0.f);
    bad += check(4096, 2048, 8, 6, 0, 7.f);
    /* repacked: the tensor-core gate + up, then the dp4a one */
    for (int mm = 1; mm >= 0; mm--) {
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
    printf("moe_dec_check: %s\n", bad ? "FAIL" : "all ok");
    return bad != 0;
}
