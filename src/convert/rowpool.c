/* rowpool.c: row-parallel worker pool and a stderr progress bar (see rowpool.h). */
#include "convert/rowpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int rowpool_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > 256) n = 256;
    return (int)n;
}

typedef struct {
    rowpool_fn fn;
    void *ctx;
    int64_t n_rows, grain;
    atomic_llong next;
    atomic_int rc;
} pool_job;

typedef struct {
    pool_job *job;
    int tid;
} pool_arg;

static void *pool_worker(void *arg) {
    pool_arg *a = arg;
    pool_job *j = a->job;
    for (;;) {
        if (atomic_load(&j->rc)) break;
        int64_t r0 = atomic_fetch_add(&j->next, j->grain);
        if (r0 >= j->n_rows) break;
        int64_t r1 = r0 + j->grain < j->n_rows ? r0 + j->grain : j->n_rows;
        int rc = j->fn(j->ctx, r0, r1, a->tid);
        if (rc) {
            int zero = 0;
            atomic_compare_exchange_strong(&j->rc, &zero, rc);
            break;
        }
    }
    return NULL;
}

int rowpool_run(int n_threads, int64_t n_rows, int64_t grain, rowpool_fn fn, void *ctx) {
    if (n_rows <= 0) return 0;
    if (n_threads <= 0) n_threads = rowpool_default_threads();
    if (grain < 1) grain = 1;
    int64_t chunks = (n_rows + grain - 1) / grain;
    if (n_threads > chunks) n_threads = (int)chunks;
    pool_job job;
    job.fn = fn;
    job.ctx = ctx;
    job.n_rows = n_rows;
    job.grain = grain;
    atomic_init(&job.next, 0);
    atomic_init(&job.rc, 0);
    if (n_threads <= 1) {
        pool_arg a = {&job, 0};
        pool_worker(&a);
        return atomic_load(&job.rc);
    }
    pthread_t *th = malloc((size_t)n_threads * sizeof *th);
    pool_arg *args = malloc((size_t)n_threads * sizeof *args);
    if (!th || !args) {
        free(th);
        free(args);
        pool_arg a = {&job, 0};
        pool_worker(&a);
        return atomic_load(&job.rc);
    }
    int started = 0;
    for (int i = 1; i < n_threads; i++) {
        args[i].job = &job;
        args[i].tid = i;
        if (pthread_create(&th[i], NULL, pool_worker, &args[i]) != 0) break;
        started = i;
    }
    args[0].job = &job;
    args[0].tid = 0;
    pool_worker(&args[0]);
    for (int i = 1; i <= started; i++) pthread_join(th[i], NULL);
    free(th);
    free(args);
    return atomic_load(&job.rc);
}

double progress_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fmt_bytes(char *b, size_t n, double v) {
    if (v >= 1e9) snprintf(b, n, "%.1f GB", v / 1e9);
    else if (v >= 1e6) snprintf(b, n, "%.1f MB", v / 1e6);
    else snprintf(b, n, "%.0f kB", v / 1e3);
}

static void fmt_secs(char *b, size_t n, double s) {
    if (s < 0 || s > 1e7) snprintf(b, n, "--");
    else if (s >= 3600) snprintf(b, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else if (s >= 60) snprintf(b, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(b, n, "%ds", (int)s);
}

static void progress_draw(progress *p, int final) {
    double now = progress_now(), el = now - p->t_start;
    double frac = p->total ? (double)p->done / (double)p->total : 1.0;
    if (frac > 1) frac = 1;
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : ' ';
    bar[30] = 0;
    char db[32], tb[32], eta[32], rate[32];
    fmt_bytes(db, sizeof db, (double)p->done);
    fmt_bytes(tb, sizeof tb, (double)p->total);
    fmt_bytes(rate, sizeof rate, el > 0 ? (double)p->done / el : 0);
    if (final) fmt_secs(eta, sizeof eta, el);
    else fmt_secs(eta, sizeof eta, frac > 0 ? el * (1 - frac) / frac : -1);
    fprintf(stderr, "\r%s [%s] %3d%% %s / %s  %s/s  %s %s\033[K", p->label ? p->label : "", bar, (int)(frac * 100),
            db, tb, rate, final ? "took" : "ETA", eta);
    if (final) fputc('\n', stderr);
    fflush(stderr);
}

void progress_start(progress *p, const char *label, uint64_t total, int mode) {
    p->enabled = mode < 0 ? isatty(2) : mode;
    p->label = label;
    p->total = total;
    p->done = 0;
    p->t_start = p->t_last = progress_now();
}

void progress_add(progress *p, uint64_t n) {
    p->done += n;
    if (!p->enabled) return;
    double now = progress_now();
    if (now - p->t_last < 0.25) return;
    p->t_last = now;
    progress_draw(p, 0);
}

void progress_finish(progress *p) {
    if (p->enabled) progress_draw(p, 1);
}

typedef struct {
    rowpool_fill_fn fn;
    void *ctx;
    uint8_t *buf;
    int64_t r0;
    uint64_t row_bytes;
} fill_chunk;

static int fill_chunk_rows(void *ctx, int64_t a, int64_t b, int tid) {
    fill_chunk *fc = ctx;
    return fc->fn(fc->ctx, fc->buf + (uint64_t)a * fc->row_bytes, fc->r0 + a, fc->r0 + b, tid);
}

typedef struct {
    gguf_writer *w;
    const void *buf;
    uint64_t n;
    int rc;
} write_job;

static void *write_thread(void *arg) {
    write_job *wj = arg;
    wj->rc = gguf_w_data(wj->w, wj->buf, wj->n);
    return NULL;
}

int rowpool_write_rows(gguf_writer *w, int n_threads, int64_t n_rows, uint64_t row_bytes, int64_t grain,
                       rowpool_fill_fn fn, void *ctx, uint8_t *bufs[2], uint64_t buf_bytes, progress *pg) {
    if (grain < 1) grain = 1;
    int64_t chunk_rows = (int64_t)(buf_bytes / row_bytes) / grain * grain;
    if (chunk_rows < 1) return -1;
    pthread_t wt;
    write_job wj = {w, NULL, 0, 0};
    int writing = 0, which = 0, rc = 0;
    for (int64_t r0 = 0; r0 < n_rows; r0 += chunk_rows) {
        int64_t nr = n_rows - r0 < chunk_rows ? n_rows - r0 : chunk_rows;
        fill_chunk fc = {fn, ctx, bufs[which], r0, row_bytes};
        rc = rowpool_run(n_threads, nr, grain, fill_chunk_rows, &fc);
        if (writing) {
            pthread_join(wt, NULL);
            writing = 0;
            if (wj.rc != 0) break;
            if (pg) progress_add(pg, wj.n);
        }
        if (rc != 0) break;
        wj.buf = bufs[which];
        wj.n = (uint64_t)nr * row_bytes;
        if (pthread_create(&wt, NULL, write_thread, &wj) == 0) writing = 1;
        else {
            write_thread(&wj);
            if (wj.rc != 0) break;
            if (pg) progress_add(pg, wj.n);
        }
        which ^= 1;
    }
    if (writing) {
        pthread_join(wt, NULL);
        if (wj.rc == 0 && pg) progress_add(pg, wj.n);
    }
    if (rc != 0) return rc;
    return wj.rc != 0 ? -1 : 0;
}
