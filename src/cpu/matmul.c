/* matmul.c: weight x activation products for the CPU backend.
 *
 * Every weight format goes through its quant traits (spec §16): the f32
 * activation row is quantized once to the format's vec_dot_type (F32 stays
 * f32, Q8_0 -> int8 with an f32 scale, K-quants -> Q8_K), then output rows
 * are split over the thread pool; within a slice the multi-token kernels
 * reuse each decoded weight block for a tile of tokens.
 */
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
    const uint8_t *xq;      /* T quantized activation rows */
    uint64_t xq_bytes;
    int T;
    float *y;
    int64_t ys;
    const float *x;         /* f32 activations (exact mode) */
    int64_t xs;
} mm_job;

#define MM_BLOCK 16

/* Exact mode: dequantized weight rows times f32 activations, f32 sums. */
static void mm_task_exact(void *ctx, int64_t i0, int64_t i1) {
    mm_job *j = ctx;
    const quant_traits *tr = quant_get(j->type);
    float *row = malloc(sizeof(float) * (size_t)j->cols * MM_BLOCK);
    if (!row) return;
    for (int64_t r = i0; r < i1; r += MM_BLOCK) {
        int64_t nr = i1 - r < MM_BLOCK ? i1 - r : MM_BLOCK;
        for (int64_t k = 0; k < nr; k++) tr->dequant(j->w + (uint64_t)(r + k) * j->row_bytes, row + k * j->cols, j->cols);
        for (int t = 0; t < j->T; t++) {
            const float *x = j->x + (int64_t)t * j->xs;
            for (int64_t k = 0; k < nr; k++) {
                const float *w = row + k * j->cols;
                float s = 0.0f;
                for (int64_t i = 0; i < j->cols; i++) s += w[i] * x[i];
                j->y[(int64_t)t * j->ys + r + k] = s;
            }
        }
    }
    free(row);
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
    for (int t = 0; t < T; t++) quant_quantize_activation(vt, x + (int64_t)t * xs, xq + (uint64_t)t * *row_bytes, cols);
    *owned = xq;
    return xq;
}

/* One token: the traits' matvec. Several: the multi-token kernels, which
 * decode each weight block once per tile of tokens and give bit-identical
 * results (quant_multi.h), so a chunked prefill equals token-by-token decode. */
static void mm_task(void *ctx, int64_t i0, int64_t i1) {
    mm_job *j = ctx;
    const uint8_t *w = j->w + (uint64_t)i0 * j->row_bytes;
    if (j->T == 1) {
        quant_matvec_prequant(j->type, w, i1 - i0, j->cols, j->xq, j->y + i0);
        return;
    }
    quant_matmul_prequant(j->type, w, j->row_bytes, i1 - i0, j->cols, j->xq, j->xq_bytes, j->T, j->y + i0, j->ys);
}

void cpu_matmul(const cpu_model *cm, const dsv4_tensor *W, int expert, int64_t row0, int64_t nrows,
                const float *x, int64_t xs, int T, float *y, int64_t ys) {
    const quant_traits *tr = quant_get(W->type);
    int64_t cols = W->ne[0];
    int vt = tr->vec_dot_type;
    if (cm->exact_act && vt != GGML_TYPE_F32) {
        mm_job j = {
            .w = (const uint8_t *)W->data + ((uint64_t)expert * (uint64_t)W->ne[1] + (uint64_t)row0) * W->row_bytes,
            .row_bytes = W->row_bytes, .type = W->type, .cols = cols, .T = T, .y = y, .ys = ys, .x = x, .xs = xs,
        };
        cpu_pool_for(cm->pool, nrows, MM_BLOCK, mm_task_exact, &j);
        return;
    }
    uint64_t xq_bytes;
    uint8_t *xq_owned = NULL;
    const uint8_t *xq = activation_rows(vt, x, xs, T, cols, &xq_bytes, &xq_owned);
    mm_job j = {
        .w = (const uint8_t *)W->data + ((uint64_t)expert * (uint64_t)W->ne[1] + (uint64_t)row0) * W->row_bytes,
        .row_bytes = W->row_bytes, .type = W->type, .cols = cols,
        .xq = xq, .xq_bytes = xq_bytes, .T = T, .y = y, .ys = ys,
    };
    /* enough work per slice to pay for waking a thread */
    int64_t grain = (int64_t)(65536 / (cols * (T > 0 ? T : 1))) + 1;
    if (grain < MM_BLOCK) grain = MM_BLOCK;
    cpu_pool_for(cm->pool, nrows, grain, mm_task, &j);
    free(xq_owned);
}

/* Both halves of a pair job share the quantized activations; the pool
 * range covers the rows of W1 then those of W2. */
typedef struct mm_pair_job { mm_job j[2]; int64_t nrows; } mm_pair_job;

static void mm_pair_task(void *ctx, int64_t i0, int64_t i1) {
    mm_pair_job *p = ctx;
    if (i0 < p->nrows) mm_task(&p->j[0], i0, i1 < p->nrows ? i1 : p->nrows);
    if (i1 > p->nrows) mm_task(&p->j[1], (i0 > p->nrows ? i0 : p->nrows) - p->nrows, i1 - p->nrows);
}

void cpu_matmul_pair(const cpu_model *cm, const dsv4_tensor *W1, const dsv4_tensor *W2, int expert, int64_t nrows,
                     const float *x, int64_t xs, int T, float *y1, float *y2, int64_t ys) {
    const quant_traits *tr = quant_get(W1->type);
    int64_t cols = W1->ne[0];
    int vt = tr->vec_dot_type;
    if (W2->type != W1->type || W2->ne[0] != cols || (cm->exact_act && vt != GGML_TYPE_F32)) {
        cpu_matmul(cm, W1, expert, 0, nrows, x, xs, T, y1, ys);
        cpu_matmul(cm, W2, expert, 0, nrows, x, xs, T, y2, ys);
        return;
    }
    uint64_t xq_bytes;
    uint8_t *xq_owned = NULL;
    const uint8_t *xq = activation_rows(vt, x, xs, T, cols, &xq_bytes, &xq_owned);
    mm_pair_job p = { .nrows = nrows };
    const dsv4_tensor *Ws[2] = { W1, W2 };
    float *ys_out[2] = { y1, y2 };
    for (int k = 0; k < 2; k++)
        p.j[k] = (mm_job){
            .w = (const uint8_t *)Ws[k]->data + (uint64_t)expert * (uint64_t)Ws[k]->ne[1] * Ws[k]->row_bytes,
            .row_bytes = Ws[k]->row_bytes, .type = Ws[k]->type, .cols = cols,
            .xq = xq, .xq_bytes = xq_bytes, .T = T, .y = ys_out[k], .ys = ys,
        };
    int64_t grain = (int64_t)(65536 / (cols * (T > 0 ? T : 1))) + 1;
    if (grain < MM_BLOCK) grain = MM_BLOCK;
    cpu_pool_for(cm->pool, 2 * nrows, grain, mm_pair_task, &p);
    free(xq_owned);
}

void cpu_get_row(const dsv4_tensor *W, int64_t r, float *out) {
    const quant_traits *tr = quant_get(W->type);
    tr->dequant((const uint8_t *)W->data + (uint64_t)r * W->row_bytes, out, W->ne[0]);
}
