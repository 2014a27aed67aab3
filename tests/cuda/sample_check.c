/* sample_check.c: cu_sample_cands (the sampler's candidates found on the
 * device, cu_sample.cu) against a host scan on fresh random rows: the
 * vocabulary's size and odd sizes, sharp and flat rows, planted ties for the
 * best (the lowest id must win), NaN and +-inf (never an argmax or a
 * candidate), all non-finite rows (argmax -1), a floor that keeps more than
 * the cap (the count past the cap, the first cap ids written in order), and
 * cap 0 (the argmax only). Then the candidates through sampler_sample_cands
 * must draw what sampler_sample draws from the whole row.
 * Run on a GPU machine: build/cuda/tests/cuda/sample_check; exit 1 on failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>

#include "cuda/cu_ops.h"
#include "engine/sample.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL cuda %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static uint64_t rng;
static uint32_t urand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 32); }
static float frand(void) { return (float)(urand() >> 8) / 16777216.0f; }

int main(void) {
    rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
    int fails = 0, cases = 0;
    enum { NMAX = 262147, CAP = CU_CANDS_MAX };
    const int sizes[] = {129280, 1, 37, 1000, 262147};
    float *d; int *dout;
    CK(cudaMalloc((void **)&d, sizeof(float) * NMAX));
    CK(cudaMalloc((void **)&dout, cu_sample_cands_bytes(CAP)));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    float *x = malloc(sizeof(float) * NMAX), *vals = malloc(sizeof(float) * NMAX);
    int *out = malloc(cu_sample_cands_bytes(CAP)), *ids = malloc(sizeof(int) * NMAX);
    for (int si = 0; si < 5; si++)
        for (int kind = 0; kind < 5; kind++) {
            const int n = sizes[si];
            /* 0 sharp, 1 flat (more than the cap above the floor), 2 ties + NaN / inf, 3 no finite value, 4 constant */
            const float spread = kind == 0 ? 30.f : kind == 1 ? 0.2f : 10.f;
            for (int i = 0; i < n; i++) x[i] = (frand() * 2 - 1) * spread;
            if (kind == 2 && n > 10) {
                int a = (int)(urand() % (uint32_t)n), b = (int)(urand() % (uint32_t)n);
                x[a] = x[b] = 50.f;
                x[urand() % (uint32_t)n] = NAN; x[urand() % (uint32_t)n] = INFINITY; x[urand() % (uint32_t)n] = -INFINITY;
            }
            if (kind == 3) for (int i = 0; i < n; i++) x[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
            if (kind == 4) for (int i = 0; i < n; i++) x[i] = 1.25f;
            CK(cudaMemcpy(d, x, sizeof(float) * n, cudaMemcpyHostToDevice));
            const float offs[] = {-3.0f, -0.05f, -INFINITY};
            for (int oi = 0; oi < 3; oi++)
                for (int cap = 0; cap <= CAP; cap += CAP) {
                    const float off = offs[oi];
                    cu_sample_cands(d, n, off, cap, dout, st);
                    CK(cudaMemcpyAsync(out, dout, cu_sample_cands_bytes(cap), cudaMemcpyDeviceToHost, st));
                    CK(cudaStreamSynchronize(st));
                    const int amax = sampler_argmax(x, n);
                    int cnt = 0, ok = out[1] == amax;
                    float lmax;
                    memcpy(&lmax, &out[2], 4);
                    if (amax >= 0 && memcmp(&lmax, &x[amax], 4)) ok = 0;
                    if (amax >= 0 && cap > 0) {
                        const float thr = x[amax] + off;
                        for (int i = 0; i < n; i++)
                            if (isfinite(x[i]) && x[i] >= thr) {
                                if (cnt < cap && (out[4 + cnt] != i || memcmp(&out[4 + cap + cnt], &x[i], 4))) ok = 0;
                                ids[cnt] = i; vals[cnt] = x[i]; cnt++;
                            }
                    }
                    if (out[0] != cnt) ok = 0;
                    /* the draws: candidates (when they fit) against the whole row */
                    if (ok && cap > 0 && amax >= 0 && cnt <= cap && off == -3.0f) {
                        sampler_params p = sampler_params_default();
                        p.seed = urand() | 1u;
                        sampler *a = sampler_new(&p), *b = sampler_new(&p);
                        float foff = 0;
                        if (sampler_cands_plan(b, 0, &foff) != 2 || !(foff <= off + 0.01f) || !(foff >= -3.1f)) ok = 0;
                        for (int k = 0; k < 64 && ok; k++)
                            if (sampler_sample(a, x, n, 0) != sampler_sample_cands(b, out + 4, (const float *)(out + 4 + cap),
                                                                                   out[0], out[1], lmax, 0)) ok = 0;
                        sampler_free(a); sampler_free(b);
                    }
                    cases++;
                    if (!ok) {
                        fails++;
                        printf("FAIL sample_cands n %d kind %d off %g cap %d: count %d (host %d), argmax %d (host %d)\n", n,
                               kind, off, cap, out[0], cnt, out[1], amax);
                    }
                }
        }
    printf("sample_check: %d of %d cases ok\n", cases - fails, cases);
    cudaFree(d); cudaFree(dout); free(x); free(vals); free(out); free(ids);
    return fails ? 1 : 0;
}
