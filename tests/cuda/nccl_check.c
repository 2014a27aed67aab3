/* nccl_check.c: the all-reduce the several-GPU backend runs once (expert
 * parallel) or more a layer, on every GPU of this machine: correct sums on
 * fresh random data (every element is the sum of the ranks' values, added in
 * f32), and with --time its latency inside a CUDA graph of 100 calls (how
 * a decode step runs them) for the sizes of one token's hidden state
 * (4096 floats) up to a prefill chunk, from plain cudaMalloc buffers and from
 * NCCL symmetric windows (ncclMemAlloc + ncclCommWindowRegister, NCCL's
 * low-latency kernels, when this NCCL has them). The backend does not use
 * the windows: with NCCL 2.28.9 they measured 4.1 us against 6.6 us a call
 * here, but no faster inside a decode step, and the backend's logits went
 * wrong with them (tiny-a, 2 H200s: docs/multigpu.md).
 * One host thread per GPU, as in the backend. NVLink multicast stays off.
 * Exit 1 on a wrong sum; skips with one GPU.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#define MAXG 8
#define NREP 100

typedef struct {
    int rank, n, sym, timing;
    ncclComm_t comm;
    size_t count;
    uint64_t seed;
    int bad;
    float us;
    char err[200];
} job;

static pthread_barrier_t bar;

static float val(uint64_t seed, int rank, size_t i) {
    uint64_t x = seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(rank + 1)) ^ (i * 0xBF58476D1CE4E5B9ull);
    x ^= x >> 31; x *= 0x94D049BB133111EBull; x ^= x >> 29;
    return (float)(int64_t)(x >> 40) / (float)(1 << 23) - 1.0f;
}

#define TRY(x, msg) do { if (!(x)) { snprintf(j->err, sizeof j->err, "%s", msg); j->bad = 1; goto out; } } while (0)

static void *run(void *a) {
    job *j = (job *)a;
    float *buf = NULL, *h = NULL;
    ncclWindow_t win = NULL;
    cudaStream_t st = NULL;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    size_t bytes = j->count * sizeof(float);
    cudaSetDevice(j->rank);
    TRY(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess, "stream");
    if (j->sym) {
        TRY(ncclMemAlloc((void **)&buf, bytes < 4096 ? 4096 : bytes) == ncclSuccess, "ncclMemAlloc");
        TRY(ncclCommWindowRegister(j->comm, buf, bytes < 4096 ? 4096 : bytes, &win, NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess,
            "ncclCommWindowRegister");
    } else {
        TRY(cudaMalloc((void **)&buf, bytes) == cudaSuccess, "cudaMalloc");
    }
    h = malloc(bytes);
    for (size_t i = 0; i < j->count; i++) h[i] = val(j->seed, j->rank, i);
    TRY(cudaMemcpy(buf, h, bytes, cudaMemcpyHostToDevice) == cudaSuccess, "copy in");
    TRY(ncclAllReduce(buf, buf, j->count, ncclFloat, ncclSum, j->comm, st) == ncclSuccess, "ncclAllReduce");
    TRY(cudaStreamSynchronize(st) == cudaSuccess, "sync");
    TRY(cudaMemcpy(h, buf, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "copy out");
    for (size_t i = 0; i < j->count; i++) {
        float want = 0.0f;
        for (int r = 0; r < j->n; r++) want += val(j->seed, r, i);
        /* the order of the additions is NCCL's: within a few ulps */
        if (!(fabsf(h[i] - want) <= 1e-6f * (float)j->n)) {
            snprintf(j->err, sizeof j->err, "element %zu: %g, want %g", i, h[i], want);
            j->bad = 1;
            break;
        }
    }
    if (j->timing && !j->bad) {
        TRY(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "capture");
        for (int k = 0; k < NREP; k++) ncclAllReduce(buf, buf, j->count, ncclFloat, ncclSum, j->comm, st);
        TRY(cudaStreamEndCapture(st, &g) == cudaSuccess, "end capture");
        TRY(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess, "instantiate");
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0); cudaEventCreate(&e1);
        for (int w = 0; w < 3; w++) {
            pthread_barrier_wait(&bar);
            cudaEventRecord(e0, st);
            cudaGraphLaunch(ge, st);
            cudaEventRecord(e1, st);
            cudaEventSynchronize(e1);
        }
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        j->us = ms * 1000.0f / NREP;
        cudaEventDestroy(e0); cudaEventDestroy(e1);
    }
out:
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
    if (win) ncclCommWindowDeregister(j->comm, win);
    if (buf) { if (j->sym) ncclMemFree(buf); else cudaFree(buf); }
    if (st) cudaStreamDestroy(st);
    free(h);
    return NULL;
}

int main(int argc, char **argv) {
    int timing = argc > 1 && !strcmp(argv[1], "--time");
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) { printf("skip nccl_check: %d GPU\n", n); return 0; }
    if (n > MAXG) n = MAXG;
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    int ver = 0;
    ncclGetVersion(&ver);
    ncclComm_t comms[MAXG];
    int devs[MAXG];
    for (int r = 0; r < n; r++) devs[r] = r;
    if (ncclCommInitAll(comms, n, devs) != ncclSuccess) { printf("FAIL ncclCommInitAll over %d GPUs\n", n); return 1; }
    printf("nccl_check: NCCL %d, %d GPUs\n", ver, n);
    pthread_barrier_init(&bar, NULL, (unsigned)n);
    const size_t sizes[] = {4096, 7 * 4096, 64 * 4096, 4096 * 4096};
    int fails = 0;
    uint64_t seed = (uint64_t)time(NULL) * 2654435761u;
    for (int sym = 0; sym < 2; sym++)
        for (int si = 0; si < 4; si++) {
            job jobs[MAXG];
            pthread_t th[MAXG];
            for (int r = 0; r < n; r++) {
                memset(&jobs[r], 0, sizeof jobs[r]);
                jobs[r].rank = r; jobs[r].n = n; jobs[r].sym = sym; jobs[r].comm = comms[r];
                jobs[r].count = sizes[si]; jobs[r].seed = seed + si; jobs[r].timing = timing && si != 3;
                pthread_create(&th[r], NULL, run, &jobs[r]);
            }
            int bad = 0;
            float us = 0;
            for (int r = 0; r < n; r++) {
                pthread_join(th[r], NULL);
                if (jobs[r].bad) {
                    bad = 1;
                    printf("%s %s %zu floats, rank %d: %s\n", sym ? "SKIP" : "FAIL", sym ? "symmetric" : "plain",
                           sizes[si], r, jobs[r].err);
                }
                if (jobs[r].us > us) us = jobs[r].us;
            }
            /* a NCCL without symmetric windows (before 2.27, or no VMM) is not a failure */
            if (bad && !sym) fails++;
            if (bad && sym) break;
            printf("ok   all-reduce %s %zu floats over %d GPUs%s", sym ? "symmetric" : "plain", sizes[si], n,
                   timing && si != 3 ? "" : "\n");
            if (timing && si != 3) printf(": %.2f us a call in a graph of %d\n", us, NREP);
        }
    for (int r = 0; r < n; r++) ncclCommDestroy(comms[r]);
    printf("nccl_check: %s\n", fails ? "FAIL" : "all ok");
    return fails != 0;
}
