/* matmul.c: weight x activation products for the CPU backend.
 *
 * Two numerics for quantized weights (minke_model_params.act):
 *   - exact (the default, spec model.md §16.3): each thread decodes a block
 *     of weight rows to f32 (the format's dequant values, by the AVX2 kernels
 *     of dequant_fast.c) and multiplies it with the f32 activations through the F32 kernels, the very code an F32
 *     weight takes. A quantized file therefore gives logits bit-identical to
 *     its dequantized F32 twin (docs/numerics.md);
 *   - q8 (ds4's numerics, §16.1): the f32 activation row is quantized once to
 *     the format's vec_dot_type (Q8_0 -> int8 with an f32 scale, K-quants ->
 *     Q8_K) and the traits' integer dots run on it.
 * Float weights (F32/F16/BF16) take their own f32 kernels either way. Output
 * rows are split over the thread pool; within a slice the multi-token
 * kernels reuse each weight block for a tile of tokens and are bit-identical
 * to the one-token dots, so a chunked prefill equals token-by-token decode.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "quant/quant.h"
#include "quant/quant_multi.h"

typedef struct mm_job {
    const uint8_t *w;       /* first row of the selected matrix */
    uint64_t row_bytes;
    int type;
    int64_t cols;
    int exact;              /* decode rows to f32, F32 kernels on x (xq unused) */
    const uint8_t *xq;      /* T activation rows in the dots' format (q8 mode, float weights) */
    uint64_t xq_bytes;
    int T;
    float *y;
    int64_t ys;
    const float *x;         /* f32 activations (exact mode) */
    int64_t xs;
} mm_job;

/* Rows decoded together in exact mode: 16 rows of a 4096-wide matrix are
 * 256 KiB of f32, which stay in L2 while every token tile passes over them
 * (quant_multi.c blocks rows the same way). */
#define MM_BLOCK 16

/* Per-thread scratch for the decoded rows: grown on demand and kept for the
 * thread's life (freed by the key's destructor when a pool worker exits), so
 * a matmul allocates nothing in the steady state. */
typedef struct mm_scratch { float *p; size_t cap; } mm_scratch;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;

static void scratch_destroy(void *v) {
    mm_scratch *s = v;
    free(s->p);
    free(s);
}

static void scratch_key_init(void) { scratch_key_ok = pthread_key_create(&scratch_key, scratch_destroy) == 0; }

static float *scratch_floats(size_t n) {
    pthread_once(&scratch_once, scratch_key_init);
    if (!scratch_key_ok) return NULL;
    mm_scratch *s = pthread_getspecific(scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) return NULL;
        if (pthread_setspecific(scratch_key, s) != 0) { free(s); return NULL; }
    }
    if (s->cap < n) {
        size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
        float *p = aligned_alloc(64, bytes);
        if (!p) return NULL;
        free(s->p);
        s->p = p;
        s->cap = bytes / sizeof(float);
    }
    return s->p;
}

/* Exact mode: rows [i0, i1) decoded MM_BLOCK at a time into f32 and
 * multiplied by the F32 kernels, exactly as if the file held those f32
 * values (one token: the F32 traits dot per row; several: the F32
 * multi-token kernel, bit-identical to it). One token of a type with a
 * fused kernel (Q8_0) skips the stored copy. */
static void mm_task_exact(mm_job *j, int64_t i0, int64_t i1) {
    if (j->T == 1 && quant_matvec_exact(j->type, j->w + (uint64_t)i0 * j->row_bytes, j->row_bytes, i1 - i0, j->cols,
                                        j->x, j->y + i0) == 0)
        return;   /* decoded in registers (Q8_0: the LM head and dense products of a decode step) */
    float *rows = scratch_floats((size_t)j->cols * MM_BLOCK);
    if (!rows) {   /* out of memory: make it visible rather than wrong */
        for (int t = 0; t < j->T; t++)
            for (int64_t r = i0; r < i1; r++) j->y[(int64_t)t * j->ys + r] = NAN;
        return;
    }
    size_t f32_row = (size_t)j->cols * sizeof(float);
    for (int64_t r = i0; r < i1; r += MM_BLOCK) {
        int64_t nr = i1 - r < MM_BLOCK ? i1 - r : MM_BLOCK;
        for (int64_t k = 0; k < nr; k++) quant_dequant_exact(j->type, j->w + (uint64_t)(r + k) * j->row_bytes, rows + k * j->cols, j->cols);
        if (j->T == 1)
            quant_matvec_prequant(GGML_TYPE_F32, rows, nr, j->cols, j->x, j->y + r);
        else
            quant_matmul_prequant(GGML_TYPE_F32, rows, f32_row, nr, j->cols, j->x, (size_t)j->xs * sizeof(float), j->T,
                                  j->y + r, j->ys);
    }
}

/* The T activation rows in the dots' format vt: f32 rows are used in place
 * (the F32 "quantization" is a copy); others are quantized into *owned. */
static const uint8_t *activation_rows(int vt, const float *x, int64_t xs, int T, int64_t cols,
                                      uint64_t *row_bytes, uint8_t **owned) {
    if (vt == GGML_TYPE_F32) {
        *row_bytes = (uint64_t)xs * sizeof(float);
        return (const uint8_t *)x;
    }
    *row_bytes = quant_row_bytes(vt, cols);
    uint8_t *xq = malloc(*row_bytes * (uint64_t)T);
    if (!xq) return NULL;
    for (int t = 0; t < T; t++) quant_quantize_activation(vt, x + (int64_t)t * xs, xq + (uint64_t)t * *row_bytes, cols);
    *owned = xq;
    return xq;
}

/* One token: the traits' matvec. Several: the multi-token kernels, which
 * decode each weight block once per tile of tokens and give bit-identical
 * results (quant_multi.h), so a chunked prefill equals token-by-token decode. */
static void mm_run(mm_job *j, int64_t i0, int64_t i1) {
    if (i1 <= i0) return;
    if (j->exact) {
        mm_task_exact(j, i0, i1);
        return;
    }
    const uint8_t *w = j->w + (uint64_t)i0 * j->row_bytes;
    if (j->T == 1) {
        quant_matvec_prequant(j->type, w, i1 - i0, j->cols, j->xq, j->y + i0);
        return;
    }
    quant_matmul_prequant(j->type, w, j->row_bytes, i1 - i0, j->cols, j->xq, j->xq_bytes, j->T, j->y + i0, j->ys);
}

static void mm_task(void *ctx, int64_t i0, int64_t i1) { mm_run(ctx, i0, i1); }

/* Enough work per slice to pay for waking a thread, and whole decode blocks. */
static int64_t mm_grain(int64_t cols, int T) {
    int64_t grain = (int64_t)(65536 / (cols * (T > 0 ? T : 1))) + 1;
    if (grain < MM_BLOCK) grain = MM_BLOCK;
    return grain;
}

/* Fills *j for matrix `expert` of W from row row0; xq: the activations in
 * W's dot format when needs_quantized_x (else unused). */
static void mm_job_init(mm_job *j, const cpu_model *cm, const dsv4_tensor *W, int expert, int64_t row0,
                       const float *x, int64_t xs, int T, float *y, int64_t ys, const uint8_t *xq, uint64_t xq_bytes) {
    const quant_traits *tr = quant_get(W->type);
    *j = (mm_job){
        .w = (const uint8_t *)W->data + ((uint64_t)expert * (uint64_t)W->ne[1] + (uint64_t)row0) * W->row_bytes,
        .row_bytes = W->row_bytes, .type = W->type, .cols = W->ne[0],
        .exact = cm->exact_act && tr->vec_dot_type != GGML_TYPE_F32,
        .xq = xq, .xq_bytes = xq_bytes, .T = T, .y = y, .ys = ys, .x = x, .xs = xs,
    };
}

/* Whether W's products need activations quantized to its dot type. */
static int needs_quantized_x(const cpu_model *cm, const dsv4_tensor *W) {
    return !cm->exact_act || quant_get(W->type)->vec_dot_type == GGML_TYPE_F32;
}

static void fill_nan(float *y, int64_t ys, int T, int64_t nrows) {
    for (int t = 0; t < T; t++)
        for (int64_t r = 0; r < nrows; r++) y[(int64_t)t * ys + r] = NAN;
}

void cpu_matmul(const cpu_model *cm, const dsv4_tensor *W, int expert, int64_t row0, int64_t nrows,
                const float *x, int64_t xs, int T, float *y, int64_t ys) {
    int64_t cols = W->ne[0];
    uint64_t xq_bytes = 0;
    uint8_t *xq_owned = NULL;
    const uint8_t *xq = NULL;
    if (needs_quantized_x(cm, W)) {
        xq = activation_rows(quant_get(W->type)->vec_dot_type, x, xs, T, cols, &xq_bytes, &xq_owned);
        if (!xq) { fill_nan(y, ys, T, nrows); return; }
    }
    mm_job j;
    mm_job_init(&j, cm, W, expert, row0, x, xs, T, y, ys, xq, xq_bytes);
    cpu_pool_for(cm->pool, nrows, mm_grain(cols, T), mm_task, &j);
    free(xq_owned);
}

/* Both halves of a pair job share the activations; the pool range covers
 * the rows of W1 then those of W2. */
typedef struct mm_pair_job { mm_job j[2]; int64_t nrows; } mm_pair_job;

static void mm_pair_task(void *ctx, int64_t i0, int64_t i1) {
    mm_pair_job *p = ctx;
    if (i0 < p->nrows) mm_run(&p->j[0], i0, i1 < p->nrows ? i1 : p->nrows);
    if (i1 > p->nrows) mm_run(&p->j[1], (i0 > p->nrows ? i0 : p->nrows) - p->nrows, i1 - p->nrows);
}

void cpu_matmul_pair(const cpu_model *cm, const dsv4_tensor *W1, const dsv4_tensor *W2, int expert, int64_t nrows,
                     const float *x, int64_t xs, int T, float *y1, float *y2, int64_t ys) {
    int64_t cols = W1->ne[0];
    if (W2->type != W1->type || W2->ne[0] != cols) {
        cpu_matmul(cm, W1, expert, 0, nrows, x, xs, T, y1, ys);
        cpu_matmul(cm, W2, expert, 0, nrows, x, xs, T, y2, ys);
        return;
    }
    uint64_t xq_bytes = 0;
    uint8_t *xq_owned = NULL;
    const uint8_t *xq = NULL;
    if (needs_quantized_x(cm, W1)) {
        xq = activation_rows(quant_get(W1->type)->vec_dot_type, x, xs, T, cols, &xq_bytes, &xq_owned);
        if (!xq) { fill_nan(y1, ys, T, nrows); fill_nan(y2, ys, T, nrows); return; }
    }
    mm_pair_job p = { .nrows = nrows };
    mm_job_init(&p.j[0], cm, W1, expert, 0, x, xs, T, y1, ys, xq, xq_bytes);
    mm_job_init(&p.j[1], cm, W2, expert, 0, x, xs, T, y2, ys, xq, xq_bytes);
    cpu_pool_for(cm->pool, 2 * nrows, mm_grain(cols, T), mm_pair_task, &p);
    free(xq_owned);
}

void cpu_get_row(const dsv4_tensor *W, int64_t r, float *out) {
    const quant_traits *tr = quant_get(W->type);
    tr->dequant((const uint8_t *)W->data + (uint64_t)r * W->row_bytes, out, W->ne[0]);
}
