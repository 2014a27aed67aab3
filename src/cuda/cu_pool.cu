/* cu_pool.cu: the host threads of a multi-GPU model (cu_pool.h). Threads are
 * made once and kept: a decode step runs one job (~10 us of wake-up against
 * a step of milliseconds), and each thread keeps its device current and its
 * CUDA graph captures thread-local.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda/cu_pool.h"

extern "C" {
#include "engine/backend.h"
}

#define POOL_MAX 32

struct cu_pool {
    int n;
    int dev[POOL_MAX];
    pthread_t thr[POOL_MAX];
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned gen;             /* job number; workers run when it moves */
    int pending, quit, nthreads;
    cu_pool_fn fn;
    void *arg;
    int rc[POOL_MAX];
    char err[POOL_MAX][256];
};

typedef struct { cu_pool *p; int rank; } worker_arg;

static void run_one(cu_pool *p, int rank) {
    int rc = cudaSetDevice(p->dev[rank]) != cudaSuccess ? (minke_set_error("cuda: cannot select device %d", p->dev[rank]), -1)
                                                        : p->fn(p->arg, rank);
    p->rc[rank] = rc;
    if (rc) snprintf(p->err[rank], sizeof p->err[rank], "%s", minke_last_error());
}

static void *worker(void *a) {
    worker_arg *wa = (worker_arg *)a;
    cu_pool *p = wa->p;
    int rank = wa->rank;
    free(wa);
    unsigned seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->quit) pthread_cond_wait(&p->go, &p->mu);
        if (p->quit) break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        run_one(p, rank);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

cu_pool *cu_pool_new(int n, const int *devs) {
    if (n < 1 || n > POOL_MAX) { minke_set_error("cuda: %d GPUs (at most %d)", n, POOL_MAX); return NULL; }
    cu_pool *p = (cu_pool *)calloc(1, sizeof *p);
    if (!p) { minke_set_error("out of memory"); return NULL; }
    p->n = n;
    memcpy(p->dev, devs, sizeof(int) * n);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int r = 1; r < n; r++) {
        worker_arg *wa = (worker_arg *)malloc(sizeof *wa);
        if (!wa) { minke_set_error("out of memory"); cu_pool_free(p); return NULL; }
        wa->p = p; wa->rank = r;
        if (pthread_create(&p->thr[r], NULL, worker, wa)) {
            free(wa);
            minke_set_error("cuda: cannot start the thread of GPU %d", r);
            cu_pool_free(p);
            return NULL;
        }
        p->nthreads = r;
    }
    return p;
}

void cu_pool_free(cu_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int r = 1; r <= p->nthreads; r++) pthread_join(p->thr[r], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p);
}

int cu_pool_run(cu_pool *p, cu_pool_fn fn, void *arg) {
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->pending = p->n - 1;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    run_one(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
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
