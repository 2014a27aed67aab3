/* moes_check.c: the one-token MoE kernels for Q4_K and MXFP4 experts
 * (cu_moes.cu: gate + up + SwiGLU x router weight, then the down summed over
 * the selected experts, weights streamed by bulk copies on sm_90) against a
 * double reference built from src/quant's dequantization of the same random
 * blocks: mid within 3e-5 of max|mid|, the output within 3e-5 of max|out|
 * (the reference down takes the GPU's mid, so the two checks are
 * independent). Then one GPU of two: slots of experts >= E/2 belong to
 * another GPU (sel -1): the owned slots' mid the same bits, the others
 * untouched, the output the sum over the owned slots only. A run twice
 * gives the same bits. --time: the Flash shape (4096 -> 2048, 6 of 32
 * experts, a different set every launch) alone and in a graph of 43 pairs.
 * Skips (exit 0) where the kernels do not apply (no sm_90 code).
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

/* random blocks with sane scales: Q4_K d / dmin at bytes 0 / 2, MXFP4 E8M0 at byte 0 */
static void fill(int type, uint8_t *p, size_t nblocks) {
    size_t bs = quant_get(type)->bytes;
    for (size_t b = 0; b < nblocks; b++) {
        uint8_t *q = p + b * bs;
        for (size_t i = 0; i < bs; i++) q[i] = (uint8_t)urand();
        if (type == GGML_TYPE_Q4_K) {
            uint16_t d = f16_bits(0.0002f + 0.0004f * fabsf(frand())), m = f16_bits(0.0001f + 0.0002f * fabsf(frand()));
            memcpy(q, &d, 2); memcpy(q + 2, &m, 2);
        } else q[0] = (uint8_t)(118 + urand() % 6);
    }
}

static int check(int type, int64_t in, int64_t ff, int E, int nsel, float limit) {
    const quant_traits *tq = quant_get(type);
    uint64_t rbg = (uint64_t)(in / tq->blck) * tq->bytes, rbd = (uint64_t)(ff / tq->blck) * tq->bytes;
    if (!cu_moes_supported(type, type, type, in, ff, nsel, rbg, rbd)) {
        printf("FAIL moes %s in %lld ff %lld sel %d: not supported\n", tq->name, (long long)in, (long long)ff, nsel);
        return 1;
    }
    size_t ng = (size_t)E * ff * rbg, nd = (size_t)E * in * rbd;
    uint8_t *hg = malloc(ng), *hu = malloc(ng), *hd = malloc(nd);
    fill(type, hg, ng / tq->bytes); fill(type, hu, ng / tq->bytes); fill(type, hd, nd / tq->bytes);
    float *x = malloc(sizeof(float) * in), *rw = malloc(sizeof(float) * nsel);
    int *sel = malloc(sizeof(int) * nsel);
    moe_inputs(in, E, nsel, x, sel, rw);
    double *mid = malloc(sizeof(double) * nsel * ff);
    float *row = malloc(sizeof(float) * (in > ff ? in : ff)), *row2 = malloc(sizeof(float) * in);
    const double mmax = moe_ref_mid(tq, hg, hu, rbg, sel, nsel, ff, in, x, rw, limit, mid, row, row2);
    struct moe_dev dv;
    CK(moe_dev_upload(&dv, hg, hu, ng, hd, nd, x, in, rw, sel, nsel, ff));
    CK(cudaMemset(dv.mid, 0xFF, sizeof(float) * nsel * ff)); CK(cudaMemset(dv.out, 0xFF, sizeof(float) * in));
    cu_moes_glu(type, dv.g, dv.u, rbg, rbg * ff, ff, in, dv.x, dv.sel, dv.rw, nsel, limit, dv.mid, 0);
    cu_moes_down(type, dv.d, rbd, rbd * in, in, ff, dv.mid, dv.sel, nsel, dv.out, 0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    float *midf = malloc(sizeof(float) * nsel * ff), *gout = malloc(sizeof(float) * in), *g2 = malloc(sizeof(float) * in);
    CK(cudaMemcpy(midf, dv.mid, sizeof(float) * nsel * ff, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gout, dv.out, sizeof(float) * in, cudaMemcpyDeviceToHost));
    double md = 0;
    for (int64_t i = 0; i < nsel * ff; i++) md = fmax(md, isnan(midf[i]) ? INFINITY : fabs(midf[i] - mid[i]));
    double od;
    const double omax = moe_ref_down(tq, hd, rbd, sel, NULL, nsel, in, ff, midf, gout, &od, row);
    /* again: the same bits */
    cu_moes_glu(type, dv.g, dv.u, rbg, rbg * ff, ff, in, dv.x, dv.sel, dv.rw, nsel, limit, dv.mid, 0);
    cu_moes_down(type, dv.d, rbd, rbd * in, in, ff, dv.mid, dv.sel, nsel, dv.out, 0);
    CK(cudaMemcpy(g2, dv.out, sizeof(float) * in, cudaMemcpyDeviceToHost));
    int rerun = memcmp(g2, gout, sizeof(float) * in) != 0;
    int bad = rerun || !(md <= 3e-5 * mmax) || !(od <= 3e-5 * omax) || !(mmax > 0) || !(omax > 0);
    printf("%s moes %s in %lld ff %lld sel %d/%d limit %g: mid max|diff| %.3g of %.3g, out %.3g of %.3g%s\n", bad ? "FAIL" : "ok",
           tq->name, (long long)in, (long long)ff, nsel, E, limit, md, mmax, od, omax, rerun ? ", a second run differs" : "");
    /* one GPU of two */
    {
        int *msel = malloc(sizeof(int) * nsel), nown = 0;
        for (int e = 0; e < nsel; e++) { msel[e] = sel[e] < E / 2 ? sel[e] : -1; nown += msel[e] >= 0; }
        CK(cudaMemcpy(dv.sel, msel, sizeof(int) * nsel, cudaMemcpyHostToDevice));
        CK(cudaMemset(dv.mid, 0xFF, sizeof(float) * nsel * ff));
        cu_moes_glu(type, dv.g, dv.u, rbg, rbg * ff, ff, in, dv.x, dv.sel, dv.rw, nsel, limit, dv.mid, 0);
        cu_moes_down(type, dv.d, rbd, rbd * in, in, ff, dv.mid, dv.sel, nsel, dv.out, 0);
        CK(cudaDeviceSynchronize());
        float *mmid = malloc(sizeof(float) * nsel * ff);
        CK(cudaMemcpy(mmid, dv.mid, sizeof(float) * nsel * ff, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(g2, dv.out, sizeof(float) * in, cudaMemcpyDeviceToHost));
        int mbad = 0;
        const uint32_t nanbits = 0xFFFFFFFFu;
        for (int e = 0; e < nsel; e++)
            for (int64_t i = 0; i < ff; i++)
                mbad += msel[e] >= 0 ? memcmp(&mmid[e * ff + i], &midf[e * ff + i], 4) != 0 : memcmp(&mmid[e * ff + i], &nanbits, 4) != 0;
        double mod;
        const double mo = moe_ref_down(tq, hd, rbd, sel, msel, nsel, in, ff, midf, g2, &mod, row);
        int b2 = mbad != 0 || !(mod <= 3e-5 * (mo > 0 ? mo : 1)) || (nown && !(mo > 0));
        printf("%s moes %s owned slots %d of %d: mid %d values differ, out %.3g of %.3g\n", b2 ? "FAIL" : "ok", tq->name, nown,
               nsel, mbad, mod, mo);
        bad |= b2;
        free(msel); free(mmid);
    }
    moe_dev_free(&dv);
    free(hg); free(hu); free(hd); free(x); free(rw); free(sel); free(mid); free(row); free(row2); free(midf); free(gout);
    free(g2);
    return bad;
}

static void moes_launch(const struct moe_time *t, int which, const int *s, cudaStream_t st) {
    const struct moe_dev *m = &t->dv;
    if (which == 0) cu_moes_glu(t->type, m->g, m->u, t->rbg, t->rbg * t->ff, t->ff, t->in, m->x, s, m->rw, t->nsel, 0.f, m->mid, st);
    else cu_moes_down(t->type, m->d, t->rbd, t->rbd * t->in, t->in, t->ff, m->mid, s, t->nsel, m->out, st);
}
static void timing(int type, int64_t in, int64_t ff, int E, int nsel) {
    const quant_traits *tq = quant_get(type);
    uint64_t rbg = (uint64_t)(in / tq->blck) * tq->bytes, rbd = (uint64_t)(ff / tq->blck) * tq->bytes;
    struct moe_time t;
    CK(moe_time_alloc(&t, type, in, ff, E, nsel, rbg, rbd, 0));
    char label[64];
    snprintf(label, sizeof label, "moes %s", tq->name);
    CK(moe_time_run(&t, moes_launch, label));
    moe_dev_free(&t.dv);
}

int main(int argc, char **argv) {
    int dev = 0;
    if (cudaGetDeviceCount(&dev) != cudaSuccess || dev < 1) { printf("skip moes_check: no CUDA device\n"); return 0; }
    if (cu_tables_init_from_quant()) { printf("FAIL tables\n"); return 1; }
    if (!cu_moes_supported(GGML_TYPE_Q4_K, GGML_TYPE_Q4_K, GGML_TYPE_Q4_K, 4096, 2048, 6, 2304, 1152)) {
        printf("skip moes_check: the streamed MoE kernels do not apply on this device\n");
        return 0;
    }
    moe_rng = 0x2545F4914F6CDD1Dull;
    int bad = 0;
    const int types[2] = {GGML_TYPE_Q4_K, GGML_TYPE_MXFP4};
    for (int t = 0; t < 2; t++) {
        bad += check(types[t], 4096, 2048, 8, 6, 0.f);
        bad += check(types[t], 4096, 2048, 8, 6, 7.f);
        bad += check(types[t], 2048, 1024, 6, 4, 0.f);
        bad += check(types[t], 1024, 512, 16, 8, 0.f);
        bad += check(types[t], 512, 512, 4, 1, 0.f);
        bad += check(types[t], 2048, 512, 4, 2, 0.5f);
    }
    /* a shape whose down kernel would need more shared memory than a block may have: refused, not launched */
    if (cu_moes_supported(GGML_TYPE_Q4_K, GGML_TYPE_Q4_K, GGML_TYPE_Q4_K, 4096, 4096, 8, 2304, 2304)) {
        printf("FAIL moes: 8 slots of 4096 x 4096 (a down ring over 227 KB) accepted\n");
        bad++;
    } else printf("ok moes: 8 slots of 4096 x 4096 refused (its down ring would not fit a block)\n");
    if (argc > 1 && !strcmp(argv[1], "--time"))
        for (int t = 0; t < 2; t++) timing(types[t], 4096, 2048, 32, 6);
    printf("moes_check: %s\n", bad ? "FAIL" : "all ok");
    return bad != 0;
}
