/* cu_pool.h: one host thread per GPU (several GPUs in one process). A job
 * runs on every rank at once: rank 0 on the caller's thread, the others on
 * their own threads, each with its device current; errors come back with
 * their message (minke_last_error is thread-local).
 */
#ifndef MINKE_CU_POOL_H
#define MINKE_CU_POOL_H

typedef struct cu_pool cu_pool;
/* fn(arg, rank) returns 0 or -1 with minke_set_error on its own thread */
typedef int (*cu_pool_fn)(void *arg, int rank);

/* n ranks on devices devs[0..n-1]; NULL with minke_set_error on failure */
cu_pool *cu_pool_new(int n, const int *devs);
void cu_pool_free(cu_pool *p);
/* Run fn on every rank and wait for all; 0, or -1 with the first failing
 * rank's message set on the caller's thread. */
int cu_pool_run(cu_pool *p, cu_pool_fn fn, void *arg);

#endif
