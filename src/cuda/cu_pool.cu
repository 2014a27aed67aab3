/* cu_pool.cu: the host threads of a multi-GPU model (cu_pool.h), on the CPU
 * backend's pool (src/cpu/pool.c): its persistent threads take one item each
 * when there are as many items as threads, so rank r always runs on thread r
 * and keeps its device current; a decode step is one job (~10 us of wake-up
 * against a step of milliseconds). What is ours: selecting the device, and
 * carrying each rank's error message back (minke_last_error is
 * thread-local).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda/cu_pool.h"

extern "C" {
#include "cpu/pool.h"
#include "engine/backend.h"
}

#define POOL_MAX 32

struct cu_pool {
    int n;
    int dev[POOL_MAX];
    cpu_pool *threads;
    cu_pool_fn fn;
    void *arg;
    int rc[POOL_MAX];
    char err[POOL_MAX][256];
};

static void run_ranks(void *ctx, int64_t r0, int64_t r1) {
    cu_pool *p = (cu_pool *)ctx;
    for (int64_t r = r0; r < r1; r++) {
        int rc = cudaSetDevice(p->dev[r]) != cudaSuccess
                     ? (minke_set_error("cuda: cannot select device %d", p->dev[r]), -1)
                     : p->fn(p->arg, (int)r);
        p->rc[r] = rc;
        if (rc) snprintf(p->err[r], sizeof p->err[r], "%s", minke_last_error());
    }
}

cu_pool *cu_pool_new(int n, const int *devs) {
    if (n < 1 || n > POOL_MAX) { minke_set_error("cuda: %d GPUs (at most %d)", n, POOL_MAX); return NULL; }
    cu_pool *p = (cu_pool *)calloc(1, sizeof *p);
    if (!p) { minke_set_error("out of memory"); return NULL; }
    p->n = n;
    memcpy(p->dev, devs, sizeof(int) * n);
    p->threads = cpu_pool_create(n);
    /* every rank needs a thread of its own: two ranks on one thread would wait
     * for each other in their first all-reduce */
    if (!p->threads || cpu_pool_threads(p->threads) != n) {
        minke_set_error("cuda: cannot start a host thread for each of %d GPUs", n);
        cu_pool_free(p);
        return NULL;
    }
    return p;
}

void cu_pool_free(cu_pool *p) {
    if (!p) return;
    cpu_pool_free(p->threads);
    free(p);
}

int cu_pool_run(cu_pool *p, cu_pool_fn fn, void *arg) {
    p->fn = fn;
    p->arg = arg;
    cpu_pool_for(p->threads, p->n, 1, run_ranks, p);
    for (int r = 0; r < p->n; r++)
        if (p->rc[r]) {
            char msg[300];
            snprintf(msg, sizeof msg, "%s", p->err[r]);
            if (p->n > 1) minke_set_error("GPU %d: %s", r, msg);
            else minke_set_error("%s", msg);
            return -1;
        }
    return 0;
}
