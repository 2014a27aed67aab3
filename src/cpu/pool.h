/* pool.h: a fixed pthread pool that runs one parallel-for at a time.
 * The CPU backend splits matmul output rows and attention heads over it. */
#ifndef MINKE_CPU_POOL_H
#define MINKE_CPU_POOL_H

#include <stdint.h>

typedef struct cpu_pool cpu_pool;

/* fn(ctx, i0, i1) processes items [i0, i1). */
typedef void (*cpu_task_fn)(void *ctx, int64_t i0, int64_t i1);

/* n_threads >= 1 (the calling thread counts as one). NULL on failure. */
cpu_pool *cpu_pool_create(int n_threads);
void cpu_pool_free(cpu_pool *p);
int cpu_pool_threads(const cpu_pool *p);
/* Split [0, n) into contiguous ranges, at least `grain` items each, and run
 * them on the pool; returns when all are done. Not reentrant. */
void cpu_pool_for(cpu_pool *p, int64_t n, int64_t grain, cpu_task_fn fn, void *ctx);

#endif
