/* pool.c: the CPU backend's thread pool (see pool.h). Workers sleep on a
 * condition variable between jobs; a job is a range split into one slice
 * per thread, the caller runs slice 0 itself. */
#include "cpu/pool.h"

#include <pthread.h>
#include <stdlib.h>

struct cpu_pool {
    int n;                      /* threads including the caller */
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    uint64_t gen;               /* job generation */
    int pending;                /* workers still running the current job */
    int quit;
    /* current job */
    cpu_task_fn fn;
    void *ctx;
    int64_t n_items, per;
};

typedef struct { cpu_pool *p; int id; } worker_arg;

static void run_slice(cpu_pool *p, int id) {
    int64_t i0 = (int64_t)id * p->per, i1 = i0 + p->per;
    if (i1 > p->n_items) i1 = p->n_items;
    if (i0 < i1) p->fn(p->ctx, i0, i1);
}

static void *worker(void *arg) {
    worker_arg *wa = arg;
    cpu_pool *p = wa->p;
    int id = wa->id;
    free(wa);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->gen == seen) pthread_cond_wait(&p->start, &p->mu);
        if (p->quit) break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        run_slice(p, id);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

cpu_pool *cpu_pool_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->done, NULL);
    p->th = calloc((size_t)n_threads, sizeof *p->th);
    if (!p->th) { free(p); return NULL; }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) { p->n = i; break; }
        wa->p = p;
        wa->id = i;
        if (pthread_create(&p->th[i], NULL, worker, wa) != 0) { free(wa); p->n = i; break; }
    }
    return p;
}

void cpu_pool_free(cpu_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->start);
    pthread_cond_destroy(&p->done);
    free(p->th);
    free(p);
}

int cpu_pool_threads(const cpu_pool *p) { return p ? p->n : 1; }

void cpu_pool_for(cpu_pool *p, int64_t n, int64_t grain, cpu_task_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int nt = p ? p->n : 1;
    int64_t max_slices = (n + grain - 1) / grain;
    if (nt > max_slices) nt = (int)max_slices;
    if (nt <= 1) { fn(ctx, 0, n); return; }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n;
    p->per = (n + nt - 1) / nt;
    /* workers whose slice is empty still take part, so all are counted */
    p->pending = p->n - 1;
    p->gen++;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    run_slice(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
