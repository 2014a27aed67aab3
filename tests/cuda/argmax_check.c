/* argmax_check.c: cu_argmax (the bench's on-device greedy pick) against a host
 * scan on fresh random vectors: vocabulary-sized and odd sizes, planted exact
 * ties (the lowest index must win), the maximum at the skipped index, at the
 * first and the last element, and all-equal input.
 * Run on a GPU machine: build/cuda/tests/cuda/argmax_check; exit 1 on failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cuda_runtime_api.h>

#include "cuda/cu_ops.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL cuda %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static uint64_t rng;
static uint32_t urand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 32); }

static int host_argmax(const float *x, int64_t n, int skip) {
    int best = -1;
    for (int64_t i = 0; i < n; i++) {
        if (i == skip) continue;
        if (best < 0 || x[i] > x[best]) best = (int)i;
    }
    return best;
}

int main(void) {
    rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
    int fails = 0, cases = 0;
    const int64_t sizes[] = {129280, 1, 7, 1000, 33333, 262147};
    float *d; int *dout;
    CK(cudaMalloc((void **)&d, sizeof(float) * 262147));
    CK(cudaMalloc((void **)&dout, sizeof(int)));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    float *x = malloc(sizeof(float) * 262147);
    for (int si = 0; si < 6; si++) {
        int64_t n = sizes[si];
        for (int kind = 0; kind < 6; kind++) {
            for (int64_t i = 0; i < n; i++) x[i] = (float)(urand() % 2000) * 0.01f - 10.f;   /* many exact ties */
            int skip = -1;
            if (kind == 1 && n > 2) { x[n - 1] = 50.f; }
            if (kind == 2) { x[0] = 50.f; }
            if (kind == 3 && n > 3) { skip = (int)(urand() % n); x[skip] = 99.f; }
            if (kind == 4) for (int64_t i = 0; i < n; i++) x[i] = 1.5f;
            if (kind == 5 && n > 10) { int64_t a = urand() % n, b = urand() % n; x[a] = x[b] = 60.f; }
            CK(cudaMemcpy(d, x, sizeof(float) * n, cudaMemcpyHostToDevice));
            cu_argmax(d, n, skip, dout, st);
            int got = -2;
            CK(cudaStreamSynchronize(st));
            CK(cudaMemcpy(&got, dout, sizeof(int), cudaMemcpyDeviceToHost));
            int want = host_argmax(x, n, skip);
            cases++;
            if (got != want) { fails++; printf("FAIL argmax n %lld kind %d skip %d: got %d want %d\n", (long long)n, kind, skip, got, want); }
        }
    }
    printf("%s argmax_check: %d cases, %d failed\n", fails ? "FAIL" : "ok", cases, fails);
    return fails ? 1 : 0;
}
