/* rowpool.h: run a function over row ranges on all cores, and a progress bar.
 *
 * Conversion and synthetic generation are embarrassingly parallel over the
 * rows of a tensor. Work is handed out in grains from an atomic counter, so
 * the result never depends on the thread count (each row is computed the
 * same way whichever thread takes it).
 */
#ifndef MINKE_CONVERT_ROWPOOL_H
#define MINKE_CONVERT_ROWPOOL_H

#include <stdint.h>

#include "gguf/gguf.h"

/* fn(ctx, r0, r1, tid) is called for disjoint [r0, r1) covering [0, n_rows).
 * It returns 0, or non-zero to stop handing out work (the first non-zero is
 * returned). n_threads <= 0 means one per online CPU. */
typedef int (*rowpool_fn)(void *ctx, int64_t r0, int64_t r1, int tid);
int rowpool_run(int n_threads, int64_t n_rows, int64_t grain, rowpool_fn fn, void *ctx);
/* Threads rowpool_run would use for n_threads <= 0. */
int rowpool_default_threads(void);

/* Progress bar on stderr (only when stderr is a terminal, or forced). */
typedef struct progress {
    int enabled;
    const char *label;
    uint64_t total, done;
    double t_start, t_last;
} progress;

/* mode: -1 auto (a TTY), 0 off, 1 on. */
void progress_start(progress *p, const char *label, uint64_t total, int mode);
void progress_add(progress *p, uint64_t n);
void progress_finish(progress *p);
double progress_now(void);

/* Produce a tensor of n_rows rows of row_bytes each and append it to w: the
 * rows are filled chunk by chunk into bufs[0]/bufs[1] (buf_bytes each, at
 * least grain * row_bytes) by fn on n_threads threads, while the previous
 * chunk is written by a writer thread. fn(ctx, dst, r0, r1, tid) fills global
 * rows [r0, r1) at dst. Returns 0, the first non-zero of fn, or -1 when the
 * write fails (gguf_writer_error says why). */
typedef int (*rowpool_fill_fn)(void *ctx, uint8_t *dst, int64_t r0, int64_t r1, int tid);
int rowpool_write_rows(gguf_writer *w, int n_threads, int64_t n_rows, uint64_t row_bytes, int64_t grain,
                       rowpool_fill_fn fn, void *ctx, uint8_t *bufs[2], uint64_t buf_bytes, progress *pg);

#endif
