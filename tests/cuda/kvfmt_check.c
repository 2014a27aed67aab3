/* kvfmt_check.c: the GPU's KV row formats (cu_kvfmt.cu) against the CPU
 * reference (nm_fp8_pack / nm_fp4_pack, src/cpu/numerics.c): rows the
 * simulations produced (fresh random rows each run, magnitudes 1e-12 .. 1e6,
 * zero, -0 and floor-scale blocks; FP4 rows through the Hadamard rotation
 * first) must give the same code and exponent bytes as the CPU and come
 * back bit for bit; rows with a value between codes, a NaN or an infinity
 * must be refused. Then whole cache rows (check_rows): what the compressors
 * store unpacks to the simulation's bits. Run on a GPU machine
 * (tests/run-cuda.sh).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>

#include "cpu/numerics.h"
#include "cuda/cu_ops.h"
#include "../kvrows.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL cuda %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static int check(int fp4, int nrows, int n) {
    const int bs = fp4 ? 32 : 64, nb = n / bs, cb = fp4 ? n / 2 : n;
    float *x = malloc(sizeof(float) * (size_t)nrows * n), *y = malloc(sizeof(float) * (size_t)nrows * n);
    uint8_t *codes = malloc((size_t)nrows * cb), *exps = malloc((size_t)nrows * nb);
    uint8_t *rc = malloc((size_t)cb), *re = malloc((size_t)nb);
    int *ok = malloc(sizeof(int) * nrows), *want = malloc(sizeof(int) * nrows);
    for (int r = 0; r < nrows; r++) {
        float *row = x + (size_t)r * n;
        kvrows_random(row, n, bs);
        if (fp4) {
            for (int h = 0; h + 128 <= n; h += 128) nm_hadamard128(row + h);
            nm_fp4_sim(row, n, NULL);
        } else {
            nm_fp8_sim(row, n, NULL);
        }
        /* every eighth row: one value made unpackable */
        if (r % 8 == 7) {
            int i = (int)(kvrows_u01() * n), kind = r % 3;
            row[i] = kind == 0 ? NAN : kind == 1 ? INFINITY : (row[i] == 0.0f ? 1.0f : row[i]) * (1.0f + ldexpf(1.0f, -12));
        }
        ok[r] = 1;
    }
    float *dx, *dy; uint8_t *dc, *de; int *dok;
    CK(cudaMalloc((void **)&dx, sizeof(float) * (size_t)nrows * n)); CK(cudaMalloc((void **)&dy, sizeof(float) * (size_t)nrows * n));
    CK(cudaMalloc((void **)&dc, (size_t)nrows * cb)); CK(cudaMalloc((void **)&de, (size_t)nrows * nb));
    CK(cudaMalloc((void **)&dok, sizeof(int) * nrows));
    CK(cudaMemcpy(dx, x, sizeof(float) * (size_t)nrows * n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dok, ok, sizeof(int) * nrows, cudaMemcpyHostToDevice));
    cu_kvfmt_roundtrip(fp4, dx, nrows, n, dc, de, dy, dok, 0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(y, dy, sizeof(float) * (size_t)nrows * n, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(codes, dc, (size_t)nrows * cb, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(exps, de, (size_t)nrows * nb, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ok, dok, sizeof(int) * nrows, cudaMemcpyDeviceToHost));
    int bad_ok = 0, bad_bytes = 0, bad_vals = 0, refused = 0;
    for (int r = 0; r < nrows; r++) {
        const float *row = x + (size_t)r * n;
        want[r] = fp4 ? nm_fp4_pack(row, n, rc, re) : nm_fp8_pack(row, n, rc, re);
        refused += !want[r];
        if (ok[r] != want[r]) { bad_ok++; continue; }
        if (!want[r]) continue;
        bad_bytes += memcmp(rc, codes + (size_t)r * cb, (size_t)cb) != 0 || memcmp(re, exps + (size_t)r * nb, (size_t)nb) != 0;
        bad_vals += memcmp(row, y + (size_t)r * n, sizeof(float) * (size_t)n) != 0;
    }
    int bad = bad_ok || bad_bytes || bad_vals || refused < nrows / 8 || refused > nrows / 8 + 1;
    printf("%s kvfmt %s rows %d x %d: %d refused (CPU), %d packing verdicts differ, %d rows with other bytes, %d rows "
           "not back bit for bit\n", bad ? "FAIL" : "ok", fp4 ? "fp4" : "fp8", nrows, n, refused, bad_ok, bad_bytes, bad_vals);
    cudaFree(dx); cudaFree(dy); cudaFree(dc); cudaFree(de); cudaFree(dok);
    free(x); free(y); free(codes); free(exps); free(rc); free(re); free(ok); free(want);
    return bad;
}

/* Whole cache rows (cu_kvrow.cuh layouts; fmt FP8: hd with an f32 tail of
 * nrot, FP4: hd): the compressors' writer path (cu_kvrows_sim: simulate and
 * pack in shared memory) must store what the simulation gives (unpacked, the
 * same bits as the GPU's and the CPU's simulation), and the state copy's pack
 * of those f32 rows must accept them and come back bit for bit; a row with a
 * value between codes must be refused. */
static int check_rows(int fmt, int nrows, int hd, int nrot) {
    const int fp4 = fmt == CU_KV_FP4, rb = kv_row_bytes(fmt, hd, nrot), npk = fp4 ? hd : hd - nrot;
    const size_t fb = sizeof(float) * (size_t)nrows * hd;
    float *x = malloc(fb), *sim = malloc(fb), *y = malloc(fb), *cpu = malloc(fb);
    for (int r = 0; r < nrows; r++) {
        float *row = x + (size_t)r * hd;
        kvrows_random(row, hd, fp4 ? 32 : 64);
        memcpy(cpu + (size_t)r * hd, row, sizeof(float) * hd);
        if (fp4) nm_fp4_sim(cpu + (size_t)r * hd, npk, NULL);
        else nm_fp8_sim(cpu + (size_t)r * hd, npk, NULL);
    }
    float *dx, *dsim, *dy; uint8_t *drows, *drows2; int *dok;
    CK(cudaMalloc((void **)&dx, fb)); CK(cudaMalloc((void **)&dsim, fb)); CK(cudaMalloc((void **)&dy, fb));
    CK(cudaMalloc((void **)&drows, (size_t)nrows * rb)); CK(cudaMalloc((void **)&drows2, (size_t)nrows * rb));
    CK(cudaMalloc((void **)&dok, sizeof(int)));
    CK(cudaMemcpy(dx, x, fb, cudaMemcpyHostToDevice));
    cu_kvrows_sim(fmt, dx, nrows, hd, nrot, dsim, drows, 0);
    cu_kvrows_unpack(fmt, drows, nrows, hd, nrot, dy, 0);
    CK(cudaGetLastError());
    CK(cudaMemcpy(sim, dsim, fb, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(y, dy, fb, cudaMemcpyDeviceToHost));
    int bad_sim = 0, bad_store = 0, bad_back = 0, ok = 1, refused = 0;
    for (int r = 0; r < nrows; r++) {
        bad_sim += memcmp(sim + (size_t)r * hd, cpu + (size_t)r * hd, sizeof(float) * hd) != 0;
        bad_store += memcmp(sim + (size_t)r * hd, y + (size_t)r * hd, sizeof(float) * hd) != 0;
    }
    /* the state-load path: pack the simulated f32 rows, unpack, compare */
    CK(cudaMemcpy(dok, &ok, sizeof(int), cudaMemcpyHostToDevice));
    cu_kvrows_pack(fmt, dsim, nrows, hd, nrot, drows2, dok, 0);
    CK(cudaMemset(dy, 0, fb));
    cu_kvrows_unpack(fmt, drows2, nrows, hd, nrot, dy, 0);
    CK(cudaMemcpy(&ok, dok, sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(y, dy, fb, cudaMemcpyDeviceToHost));
    for (int r = 0; r < nrows; r++) bad_back += memcmp(sim + (size_t)r * hd, y + (size_t)r * hd, sizeof(float) * hd) != 0;
    /* one value between codes in the last row: the pack must refuse */
    float v = sim[(size_t)(nrows - 1) * hd + 5];
    v = (v == 0.0f ? 1.0f : v) * (1.0f + ldexpf(1.0f, -12));
    CK(cudaMemcpy(dsim + (size_t)(nrows - 1) * hd + 5, &v, sizeof v, cudaMemcpyHostToDevice));
    int ok2 = 1;
    CK(cudaMemcpy(dok, &ok2, sizeof(int), cudaMemcpyHostToDevice));
    cu_kvrows_pack(fmt, dsim, nrows, hd, nrot, drows2, dok, 0);
    CK(cudaMemcpy(&ok2, dok, sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaDeviceSynchronize());
    refused = !ok2;
    int bad = bad_sim || bad_store || bad_back || !ok || !refused;
    printf("%s kvrows %s %d rows of %d (%d bytes a row): %d rows differ from the CPU's simulation, %d stored rows "
           "unpack to other bits, pack of the simulated rows %s, %d rows not back bit for bit, a value between codes %s\n",
           bad ? "FAIL" : "ok", fp4 ? "fp4" : "fp8", nrows, hd, rb, bad_sim, bad_store, ok ? "accepted" : "REFUSED",
           bad_back, refused ? "refused" : "ACCEPTED");
    cudaFree(dx); cudaFree(dsim); cudaFree(dy); cudaFree(drows); cudaFree(drows2); cudaFree(dok);
    free(x); free(sim); free(y); free(cpu);
    return bad;
}

int main(void) {
    int dev = 0;
    if (cudaGetDeviceCount(&dev) != cudaSuccess || dev < 1) { printf("skip kvfmt_check: no CUDA device\n"); return 0; }
    kvrows_rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
    printf("kvfmt_check: seed 0x%016llx\n", (unsigned long long)kvrows_rng);
    int bad = 0;
    bad += check(0, 2000, 448);     /* the FP8 part of a 512-dim row with 64 RoPE dims */
    bad += check(0, 300, 64);
    bad += check(1, 2000, 128);     /* an indexer row */
    bad += check_rows(CU_KV_FP8, 2000, 512, 64);   /* Flash's attention rows */
    bad += check_rows(CU_KV_FP8, 300, 128, 64);    /* tiny-a's */
    bad += check_rows(CU_KV_FP4, 2000, 128, 0);    /* indexer rows */
    printf("kvfmt_check: %s\n", bad ? "FAIL" : "all ok");
    return bad != 0;
}
