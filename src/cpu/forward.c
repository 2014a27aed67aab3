/* forward.c: the DeepSeek V4 forward pass on the CPU, read top to bottom.
 *
 * A batch of T tokens at positions pos0.. goes through the model layer by
 * layer (spec model.md §12.1): per-token work (HC, norms, projections, MoE)
 * is batched into matmuls, while the cache updates, compressors, indexer and
 * attention walk the tokens in order, so a prefill gives the same numbers as
 * token-by-token decode. Step names (A1..A13, B1..B5) follow spec §7.2.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/selections.h"

typedef struct fw {
    minke_model *m;
    cpu_model *cm;
    cpu_session *s;
    const dsv4_config *c;
    int T, pos0, sims;
    const int32_t *tok;
    int D, nhc, hcD, Dh, H, nrot;
    /* per-token activations, row-major [T][...] */
    float *X, *Xn, *mix, *pre, *post, *comb, *u, *x;
    float *ql, *qn, *q, *kv, *o, *z, *a;
    float *ca, *cg, *ia, *ig, *qi, *wi;
    float *logits_r, *m_out, *sh_out, *f;
    /* set for a block outside the main stack (the MTP block, src/cpu/mtp.c):
     * its weights, vectors, cache and SwiGLU clamp replace those of layer il */
    const dsv4_layer *ext_L;
    const cpu_layer_vecs *ext_V;
    cpu_layer_cache *ext_lc;
    float ext_clamp;
} fw;

static void *xcalloc(size_t n, size_t sz) {
    return calloc(n ? n : 1, sz);
}

/* Scratch inside a layer is bounded by the batch cap (CPU_MAX_BATCH), so
 * running out of it is not recoverable mid-layer: say so and stop. */
static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "minke: out of memory in the CPU forward pass (%zu bytes)\n", n);
        abort();
    }
    return p;
}

static void tap(fw *f, const char *fmt, int il, int t, const float *data, int64_t n) {
    if (!f->m->tap || f->ext_L) return;   /* taps name main-model layers only */
    char name[64];
    snprintf(name, sizeof name, fmt, il);
    minke_tap_emit(f->m, name, f->pos0 + t, data, n);
}

/* ---- hyper-connections (spec §6.7, §6.8) ---- */

/* A1 / B1: mix = fn . rmsnorm(X); split; u = sum pre[i] X[i]. */
static void hc_pre(fw *f, const dsv4_tensor *fn, const float *scale, const float *base) {
    const dsv4_config *c = f->c;
    for (int t = 0; t < f->T; t++) {
        const float *X = f->X + (size_t)t * f->hcD;
        nm_rmsnorm(f->Xn + (size_t)t * f->hcD, X, NULL, f->hcD, c->rms_eps);
    }
    cpu_matmul(f->cm, fn, 0, 0, c->hc_mix, f->Xn, f->hcD, f->T, f->mix, c->hc_mix);
    for (int t = 0; t < f->T; t++) {
        float *pre = f->pre + (size_t)t * f->nhc;
        nm_hc_split(f->mix + (size_t)t * c->hc_mix, scale, base, f->nhc, (int)c->hc_sinkhorn_iters,
                    c->hc_eps, pre, f->post + (size_t)t * f->nhc, f->comb + (size_t)t * f->nhc * f->nhc);
        nm_hc_weighted_sum(f->X + (size_t)t * f->hcD, pre, f->nhc, f->D, f->u + (size_t)t * f->D);
    }
}

/* A13 / B5: X[c] = post[c] * out + sum_r comb[r][c] X[r]. */
static void hc_post(fw *f, const float *out) {
    for (int t = 0; t < f->T; t++) {
        float *X = f->X + (size_t)t * f->hcD, *Xo = f->Xn + (size_t)t * f->hcD;
        nm_hc_post(X, out + (size_t)t * f->D, f->post + (size_t)t * f->nhc,
                   f->comb + (size_t)t * f->nhc * f->nhc, f->nhc, f->D, Xo);
        memcpy(X, Xo, sizeof(float) * (size_t)f->hcD);
    }
}

/* ---- compressor (spec §8.2): one token's update, returns 1 when a row is emitted ---- */
static int compressor_step(cpu_comp_state *st, const float *a, const float *s, const float *ape,
                           int m, int d, int p, const float *norm, float eps, const nm_rope *rope,
                           int is_indexer, int sims, float *row) {
    int Wd = st->width, pm = p % m;
    int slot = m == 4 ? 4 + pm : pm;
    memcpy(st->kv + (size_t)slot * Wd, a, sizeof(float) * (size_t)Wd);
    for (int j = 0; j < Wd; j++) st->sc[(size_t)slot * Wd + j] = s[j] + ape[(size_t)pm * Wd + j];
    if ((p + 1) % m != 0) return 0;

    int ncand = m == 4 ? 8 : m;
    for (int j = 0; j < d; j++) {
        float mx = -INFINITY;
        for (int r = 0; r < ncand; r++) {
            int col = (m == 4 && r >= 4) ? d + j : j;
            float sc = st->sc[(size_t)r * Wd + col];
            if (sc > mx) mx = sc;
        }
        if (mx == -INFINITY) { row[j] = 0.0f; continue; }
        float num = 0.0f, den = 0.0f;
        for (int r = 0; r < ncand; r++) {
            int col = (m == 4 && r >= 4) ? d + j : j;
            float w = expf(st->sc[(size_t)r * Wd + col] - mx);
            den += w;
            num += w * st->kv[(size_t)r * Wd + col];
        }
        row[j] = num / den;
    }
    nm_rmsnorm(row, row, norm, d, eps);
    nm_rope_tail(rope, row, d, p + 1 - m, 0);
    if (sims) {
        if (!is_indexer) nm_fp8_sim(row, d - rope->n_rot, NULL);
        else { nm_hadamard128(row); nm_fp4_sim(row, d, NULL); }
    }
    if (m == 4) {
        /* this window's lane A becomes the "previous window" of the next one */
        memcpy(st->kv, st->kv + (size_t)4 * Wd, sizeof(float) * (size_t)4 * Wd);
        memcpy(st->sc, st->sc + (size_t)4 * Wd, sizeof(float) * (size_t)4 * Wd);
    }
    return 1;
}

/* ---- lightning indexer (spec §9): visible compressed rows for one query ---- */
typedef struct idx_job {
    const float *qi;      /* n_head x ihd, rotated + simulated */
    const float *wi;      /* n_head, scaled */
    const float *rows;    /* nI x ihd */
    int nh, ihd;
    float *scores;
} idx_job;

static void idx_task(void *ctx, int64_t c0, int64_t c1) {
    idx_job *j = ctx;
    for (int64_t cr = c0; cr < c1; cr++) {
        const float *k = j->rows + (size_t)cr * j->ihd;
        float sc = 0.0f;
        for (int h = 0; h < j->nh; h++) {
            float dot = nm_dot(j->qi + (size_t)h * j->ihd, k, j->ihd);
            if (dot > 0.0f) sc += j->wi[h] * dot;
        }
        j->scores[cr] = sc;
    }
}

static int cmp_int(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

/* Fills sel with the visible row indices (ascending); returns their count. */
static int indexer_select(fw *f, int il, int t, cpu_layer_cache *lc, int n_index, int *sel) {
    const dsv4_config *c = f->c;
    int topk = (int)c->indexer_top_k;
    if (n_index <= topk) {
        for (int i = 0; i < n_index; i++) sel[i] = i;
        return n_index;
    }
    int nh = (int)c->indexer_n_head, ihd = (int)c->indexer_head_dim, p = f->pos0 + t;
    float *qi = xmalloc(sizeof(float) * (size_t)nh * ihd), *wi = xmalloc(sizeof(float) * (size_t)nh);
    float *scores = xmalloc(sizeof(float) * (size_t)n_index);
    memcpy(qi, f->qi + (size_t)t * nh * ihd, sizeof(float) * (size_t)nh * ihd);
    for (int h = 0; h < nh; h++) {
        float *qh = qi + (size_t)h * ihd;
        nm_rope_tail(&f->cm->rope_comp, qh, ihd, p, 0);
        if (f->sims) { nm_hadamard128(qh); nm_fp4_sim(qh, ihd, NULL); }
        wi[h] = f->wi[(size_t)t * nh + h] * c->indexer_scale;
    }
    idx_job j = {qi, wi, lc->index, nh, ihd, scores};
    cpu_pool_for(f->cm->pool, n_index, 64, idx_task, &j);
    nm_topk(scores, n_index, topk, sel);
    qsort(sel, (size_t)topk, sizeof(int), cmp_int);
    if (!f->ext_L) cpu_sel_hook(f->m, CPU_SEL_INDEXER, il, p, sel, topk, n_index);   /* debug record/replay */
    free(qi); free(wi); free(scores);
    return topk;
}

/* ---- attention with sinks over raw + compressed rows (spec §10) ---- */
typedef struct attn_job {
    fw *f;
    const float *const *rows;
    int n_rows, t;
    const float *sinks;
    const nm_rope *rope;
} attn_job;

static void attn_task(void *ctx, int64_t h0, int64_t h1) {
    attn_job *j = ctx;
    fw *f = j->f;
    for (int64_t h = h0; h < h1; h++) {
        const float *q = f->q + ((size_t)j->t * f->H + h) * f->Dh;
        float *o = f->o + ((size_t)j->t * f->H + h) * f->Dh;
        nm_attn_sinks_head(q, j->rows, j->n_rows, f->Dh, j->sinks[h], f->c->attn_scale, o);
        nm_rope_tail(j->rope, o, f->Dh, f->pos0 + j->t, 1);   /* A11 */
    }
}

/* ---- attention sub-layer (spec §7.2 A1-A13) ---- */
static void attention_layer(fw *f, int il) {
    const dsv4_config *c = f->c;
    const dsv4_layer *L = f->ext_L ? f->ext_L : &f->m->w.layers[il];
    const cpu_layer_vecs *V = f->ext_L ? f->ext_V : &f->cm->lv[il];
    cpu_layer_cache *lc = f->ext_L ? f->ext_lc : &f->s->layers[il];
    cpu_pool *pool = f->cm->pool;
    int T = f->T, D = f->D, Dh = f->Dh, H = f->H, ratio = L->ratio;
    int W = (int)c->sliding_window, ql = (int)c->q_lora_rank;
    const nm_rope *rope = ratio ? &f->cm->rope_comp : &f->cm->rope_main;

    hc_pre(f, &L->hc_attn_fn, V->hc_attn_scale, V->hc_attn_base);          /* A1 */
    for (int t = 0; t < T; t++) {                                           /* A2 */
        nm_rmsnorm(f->x + (size_t)t * D, f->u + (size_t)t * D, V->attn_norm, D, c->rms_eps);
        tap(f, "blk.%d.attn_norm", il, t, f->x + (size_t)t * D, D);
    }
    cpu_matmul(f->cm, &L->q_a, 0, 0, ql, f->x, D, T, f->ql, ql);             /* A3 */
    for (int t = 0; t < T; t++)
        nm_rmsnorm(f->qn + (size_t)t * ql, f->ql + (size_t)t * ql, V->q_a_norm, ql, c->rms_eps);
    cpu_matmul(f->cm, &L->q_b, 0, 0, (int64_t)H * Dh, f->qn, ql, T, f->q, (int64_t)H * Dh);  /* A4 */
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < H; h++) {
            float *qh = f->q + ((size_t)t * H + h) * Dh;
            nm_rmsnorm(qh, qh, NULL, Dh, c->rms_eps);
            nm_rope_tail(rope, qh, Dh, f->pos0 + t, 0);                    /* A5 */
        }
        tap(f, "blk.%d.q", il, t, f->q + (size_t)t * H * Dh, (int64_t)H * Dh);
    }
    cpu_matmul(f->cm, &L->kv, 0, 0, Dh, f->x, D, T, f->kv, Dh);              /* A6 */
    for (int t = 0; t < T; t++) {
        float *kv = f->kv + (size_t)t * Dh;
        nm_rmsnorm(kv, kv, V->kv_norm, Dh, c->rms_eps);
        nm_rope_tail(rope, kv, Dh, f->pos0 + t, 0);
        if (f->sims) nm_fp8_sim(kv, Dh - f->nrot, NULL);                   /* A7 */
        tap(f, "blk.%d.kv", il, t, kv, Dh);
    }
    int ihd = (int)c->indexer_head_dim, nih = (int)c->indexer_n_head;
    int cw = ratio == 4 ? 2 * Dh : Dh;
    if (ratio) {
        cpu_matmul(f->cm, &L->comp_kv, 0, 0, cw, f->x, D, T, f->ca, cw);
        cpu_matmul(f->cm, &L->comp_gate, 0, 0, cw, f->x, D, T, f->cg, cw);
    }
    if (ratio == 4) {
        cpu_matmul(f->cm, &L->idx_comp_kv, 0, 0, 2 * ihd, f->x, D, T, f->ia, 2 * ihd);
        cpu_matmul(f->cm, &L->idx_comp_gate, 0, 0, 2 * ihd, f->x, D, T, f->ig, 2 * ihd);
        cpu_matmul(f->cm, &L->idx_q_b, 0, 0, (int64_t)nih * ihd, f->qn, ql, T, f->qi, (int64_t)nih * ihd);
        cpu_matmul(f->cm, &L->idx_proj, 0, 0, nih, f->x, D, T, f->wi, nih);
    }

    /* cache updates, compressors, indexer and attention, token by token */
    int max_rows = W + lc->comp_cap;
    const float **rows = xmalloc(sizeof(float *) * (size_t)max_rows);
    int *sel = xmalloc(sizeof(int) * (size_t)(lc->index_cap + 1));
    for (int t = 0; t < T; t++) {
        int p = f->pos0 + t;
        memcpy(lc->raw + (size_t)(p % W) * Dh, f->kv + (size_t)t * Dh, sizeof(float) * (size_t)Dh);
        int n_comp = ratio ? p / ratio : 0;     /* rows before this token's step */
        if (ratio) {                                                        /* A8 */
            float *row = lc->comp + (size_t)n_comp * Dh;
            if (compressor_step(&lc->cs, f->ca + (size_t)t * cw, f->cg + (size_t)t * cw, V->comp_ape, ratio, Dh, p,
                                V->comp_norm, c->rms_eps, rope, 0, f->sims, row)) {
                tap(f, "blk.%d.comp_row", il, t, row, Dh);
                n_comp++;
            }
        }
        int n_vis = 0;
        int lo = p - W + 1 < 0 ? 0 : p - W + 1;
        for (int q = lo; q <= p; q++) rows[n_vis++] = lc->raw + (size_t)(q % W) * Dh;
        if (ratio == 4) {                                                   /* A9 */
            int n_index = p / 4;
            float *irow = lc->index + (size_t)n_index * ihd;
            if (compressor_step(&lc->is, f->ia + (size_t)t * 2 * ihd, f->ig + (size_t)t * 2 * ihd, V->idx_comp_ape,
                                4, ihd, p, V->idx_comp_norm, c->rms_eps, rope, 1, f->sims, irow)) {
                tap(f, "blk.%d.index_row", il, t, irow, ihd);
                n_index++;
            }
            int ns = indexer_select(f, il, t, lc, n_index, sel);
            for (int i = 0; i < ns; i++) rows[n_vis++] = lc->comp + (size_t)sel[i] * Dh;
        } else if (ratio) {
            for (int i = 0; i < n_comp; i++) rows[n_vis++] = lc->comp + (size_t)i * Dh;
        }
        attn_job j = {f, rows, n_vis, t, V->sinks, rope};                   /* A10, A11 */
        cpu_pool_for(pool, H, 1, attn_task, &j);
        tap(f, "blk.%d.attn_o", il, t, f->o + (size_t)t * H * Dh, (int64_t)H * Dh);
    }
    free(rows);
    free(sel);

    /* A12: grouped low-rank output */
    int G = (int)c->o_groups, ol = (int)c->o_lora_rank, gin = (int)c->o_group_in;
    for (int g = 0; g < G; g++)
        cpu_matmul(f->cm, &L->out_a, 0, (int64_t)g * ol, ol, f->o + (size_t)g * gin, (int64_t)H * Dh, T,
                   f->z + (size_t)g * ol, c->o_dim);
    cpu_matmul(f->cm, &L->out_b, 0, 0, D, f->z, c->o_dim, T, f->a, D);
    for (int t = 0; t < T; t++) tap(f, "blk.%d.attn_out", il, t, f->a + (size_t)t * D, D);
    hc_post(f, f->a);                                                       /* A13 */
}

/* ---- FFN sub-layer (spec §7.2 B1-B5, §11) ---- */
static void ffn_layer(fw *f, int il) {
    const dsv4_config *c = f->c;
    const dsv4_layer *L = f->ext_L ? f->ext_L : &f->m->w.layers[il];
    const cpu_layer_vecs *V = f->ext_L ? f->ext_V : &f->cm->lv[il];
    int T = f->T, D = f->D, E = (int)c->n_expert, K = (int)c->n_expert_used, F = (int)c->expert_ff;
    float clamp = f->ext_L ? f->ext_clamp : c->swiglu_clamp[il];

    hc_pre(f, &L->hc_ffn_fn, V->hc_ffn_scale, V->hc_ffn_base);              /* B1 */
    for (int t = 0; t < T; t++) {                                           /* B2 */
        nm_rmsnorm(f->x + (size_t)t * D, f->u + (size_t)t * D, V->ffn_norm, D, c->rms_eps);
        tap(f, "blk.%d.ffn_norm", il, t, f->x + (size_t)t * D, D);
    }
    /* router (§11.1-11.3) */
    cpu_matmul(f->cm, &L->gate_inp, 0, 0, E, f->x, D, T, f->logits_r, E);
    int *sel = xmalloc(sizeof(int) * (size_t)T * K);
    float *wt = xmalloc(sizeof(float) * (size_t)T * K), *scores = xmalloc(sizeof(float) * (size_t)E);
    for (int t = 0; t < T; t++) {
        const float *lg = f->logits_r + (size_t)t * E;
        if ((uint32_t)il < c->n_hash_layer && !f->ext_L) {
            /* hash routing: the token's fixed experts, weights from the unbiased scores */
            const int32_t *ids = (const int32_t *)L->tid2eid.data + (size_t)f->tok[t] * K;
            for (int e = 0; e < E; e++) scores[e] = nm_sqrt_softplus(lg[e]);
            for (int k = 0; k < K; k++) sel[t * K + k] = ids[k];
            nm_route_weights(scores, sel + t * K, K, c->expert_weights_scale, wt + t * K);
        } else {
            nm_router(lg, V->exp_bias, E, K, c->expert_weights_scale, scores, sel + t * K, wt + t * K);
            /* debug record/replay: pinned ids take their weights from this run's scores */
            if (!f->ext_L && cpu_sel_hook(f->m, CPU_SEL_ROUTER, il, f->pos0 + t, sel + t * K, K, E))
                nm_route_weights(scores, sel + t * K, K, c->expert_weights_scale, wt + t * K);
        }
    }
    free(scores);
    /* routed experts, grouped by expert so each runs once over its tokens */
    memset(f->m_out, 0, sizeof(float) * (size_t)T * D);
    int *tk = xmalloc(sizeof(int) * (size_t)T * K);
    float *tw = xmalloc(sizeof(float) * (size_t)T * K);
    float *xg = xmalloc(sizeof(float) * (size_t)T * K * D), *g = xmalloc(sizeof(float) * (size_t)T * K * F);
    float *up = xmalloc(sizeof(float) * (size_t)T * K * F), *dn = xmalloc(sizeof(float) * (size_t)T * K * D);
    for (int e = 0; e < E; e++) {
        int n = 0;
        for (int t = 0; t < T; t++)
            for (int k = 0; k < K; k++)
                if (sel[t * K + k] == e) { tk[n] = t; tw[n] = wt[t * K + k]; n++; }
        if (!n) continue;
        for (int i = 0; i < n; i++) memcpy(xg + (size_t)i * D, f->x + (size_t)tk[i] * D, sizeof(float) * (size_t)D);
        cpu_matmul_pair(f->cm, &L->gate_exps, &L->up_exps, e, F, xg, D, n, g, up, F);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < F; j++)
                g[(size_t)i * F + j] = nm_swiglu_clamp(g[(size_t)i * F + j], up[(size_t)i * F + j], clamp) * tw[i];
        cpu_matmul(f->cm, &L->down_exps, e, 0, D, g, F, n, dn, D);
        for (int i = 0; i < n; i++) {
            float *mo = f->m_out + (size_t)tk[i] * D;
            for (int d = 0; d < D; d++) mo[d] += dn[(size_t)i * D + d];
        }
    }
    free(tk); free(tw); free(xg); free(dn);
    /* shared expert (§11.4) */
    int SF = (int)c->shexp_ff;
    float *sg = xmalloc(sizeof(float) * (size_t)T * SF), *su = xmalloc(sizeof(float) * (size_t)T * SF);
    cpu_matmul_pair(f->cm, &L->gate_shexp, &L->up_shexp, 0, SF, f->x, D, T, sg, su, SF);
    for (size_t i = 0; i < (size_t)T * SF; i++) sg[i] = nm_swiglu_clamp(sg[i], su[i], clamp);
    cpu_matmul(f->cm, &L->down_shexp, 0, 0, D, sg, SF, T, f->sh_out, D);
    free(sg); free(su); free(g); free(up); free(sel); free(wt);
    for (int t = 0; t < T; t++) {
        tap(f, "blk.%d.moe_out", il, t, f->m_out + (size_t)t * D, D);
        tap(f, "blk.%d.shexp_out", il, t, f->sh_out + (size_t)t * D, D);
    }
    for (size_t i = 0; i < (size_t)T * D; i++) f->f[i] = f->m_out[i] + f->sh_out[i];   /* B5 */
    hc_post(f, f->f);
}

/* ---- output head (spec §7.3) for token rows t0..T-1 ---- */
static void output_head(fw *f, int t0, float *logits) {
    const dsv4_config *c = f->c;
    const dsv4_weights *w = &f->m->w;
    int n = f->T - t0, D = f->D, nhc = f->nhc;
    float *y = xmalloc(sizeof(float) * (size_t)n * D), *mix = xmalloc(sizeof(float) * (size_t)n * nhc);
    for (int i = 0; i < n; i++)
        nm_rmsnorm(f->Xn + (size_t)i * f->hcD, f->X + (size_t)(t0 + i) * f->hcD, NULL, f->hcD, c->rms_eps);
    cpu_matmul(f->cm, &w->output_hc_fn, 0, 0, nhc, f->Xn, f->hcD, n, mix, nhc);
    for (int i = 0; i < n; i++) {
        float hw[64];
        nm_hc_head_weights(mix + (size_t)i * nhc, f->cm->output_hc_scale[0], f->cm->output_hc_base, nhc, c->hc_eps, hw);
        float *yi = y + (size_t)i * D;
        nm_hc_weighted_sum(f->X + (size_t)(t0 + i) * f->hcD, hw, nhc, D, yi);
        tap(f, "hc_head.out", -1, t0 + i, yi, D);
        nm_rmsnorm(yi, yi, f->cm->output_norm, D, c->rms_eps);
        tap(f, "output_norm.out", -1, t0 + i, yi, D);
    }
    cpu_matmul(f->cm, &w->output, 0, 0, c->n_vocab, y, D, n, logits, c->n_vocab);
    for (int i = 0; i < n; i++) tap(f, "logits", -1, t0 + i, logits + (size_t)i * c->n_vocab, c->n_vocab);
    free(y);
    free(mix);
}

/* Scratch for a batch of n tokens; 0, or -1 with the error set (fw_release frees either way). */
static int fw_setup(fw *fp, minke_model *m, void *bs, const int32_t *tokens, int n, int pos0) {
    const dsv4_config *c = &m->w.cfg;
    fw f = {0};
    f.m = m; f.cm = m->be; f.s = bs; f.c = c;
    f.T = n; f.pos0 = pos0; f.tok = tokens; f.sims = m->params.sims;
    f.D = (int)c->n_embd; f.nhc = (int)c->n_hc; f.hcD = (int)c->hc_dim;
    f.Dh = (int)c->head_dim; f.H = (int)c->n_head; f.nrot = (int)c->rope_dim;
    size_t T = (size_t)n, D = f.D, hcD = f.hcD, qd = c->q_dim;
    size_t ihd = c->indexer_head_dim, nih = c->indexer_n_head;
    f.X = xcalloc(T * hcD, 4); f.Xn = xcalloc(T * hcD, 4);
    f.mix = xcalloc(T * c->hc_mix, 4); f.pre = xcalloc(T * f.nhc, 4); f.post = xcalloc(T * f.nhc, 4);
    f.comb = xcalloc(T * f.nhc * f.nhc, 4); f.u = xcalloc(T * D, 4); f.x = xcalloc(T * D, 4);
    f.ql = xcalloc(T * c->q_lora_rank, 4); f.qn = xcalloc(T * c->q_lora_rank, 4);
    f.q = xcalloc(T * qd, 4); f.kv = xcalloc(T * f.Dh, 4); f.o = xcalloc(T * qd, 4);
    f.z = xcalloc(T * c->o_dim, 4); f.a = xcalloc(T * D, 4);
    f.ca = xcalloc(T * 2 * f.Dh, 4); f.cg = xcalloc(T * 2 * f.Dh, 4);
    f.ia = xcalloc(T * 2 * ihd, 4); f.ig = xcalloc(T * 2 * ihd, 4);
    f.qi = xcalloc(T * nih * ihd, 4); f.wi = xcalloc(T * nih, 4);
    f.logits_r = xcalloc(T * c->n_expert, 4); f.m_out = xcalloc(T * D, 4);
    f.sh_out = xcalloc(T * D, 4); f.f = xcalloc(T * D, 4);
    int rc = 0;
    void *all[] = {f.X, f.Xn, f.mix, f.pre, f.post, f.comb, f.u, f.x, f.ql, f.qn, f.q, f.kv, f.o, f.z, f.a,
                   f.ca, f.cg, f.ia, f.ig, f.qi, f.wi, f.logits_r, f.m_out, f.sh_out, f.f};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!all[i]) { minke_set_error("out of memory for a batch of %d tokens", n); rc = -1; }
    *fp = f;
    return rc;
}

static void fw_release(fw *f) {
    void *all[] = {f->X, f->Xn, f->mix, f->pre, f->post, f->comb, f->u, f->x, f->ql, f->qn, f->q, f->kv, f->o,
                   f->z, f->a, f->ca, f->cg, f->ia, f->ig, f->qi, f->wi, f->logits_r, f->m_out, f->sh_out, f->f};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

int cpu_block_forward(minke_model *m, const dsv4_layer *L, const cpu_layer_vecs *V, cpu_layer_cache *lc,
                      float clamp, const int32_t *tokens, int n, int pos0, float *X, int cache_only) {
    fw f;
    int rc = fw_setup(&f, m, NULL, tokens, n, pos0);
    if (!rc) {
        f.ext_L = L; f.ext_V = V; f.ext_lc = lc; f.ext_clamp = clamp;
        int il = (int)f.c->n_layer;   /* the block's logical index, after the main stack */
        memcpy(f.X, X, sizeof(float) * (size_t)n * f.hcD);
        attention_layer(&f, il);
        if (!cache_only) {
            ffn_layer(&f, il);
            memcpy(X, f.X, sizeof(float) * (size_t)n * f.hcD);
        }
    }
    fw_release(&f);
    return rc;
}

static int forward_batch(minke_model *m, void *bs, const int32_t *tokens, int n, int pos0,
                         float *all_logits, float *last_logits) {
    const dsv4_config *c = &m->w.cfg;
    fw f;
    int rc = fw_setup(&f, m, bs, tokens, n, pos0);
    size_t hcD = f.hcD, D = f.D;
    if (!rc) {
        /* §7.1: embedding, replicated to every HC stream */
        float *e = f.Xn;
        for (int t = 0; t < n; t++) {
            cpu_get_row(&m->w.token_embd, tokens[t], e);
            tap(&f, "embd", -1, t, e, f.D);
            for (int i = 0; i < f.nhc; i++) memcpy(f.X + (size_t)t * hcD + (size_t)i * D, e, sizeof(float) * D);
        }
        for (int il = 0; il < (int)c->n_layer; il++) {
            attention_layer(&f, il);
            ffn_layer(&f, il);
            for (int t = 0; t < n; t++) tap(&f, "blk.%d.out", il, t, f.X + (size_t)t * hcD, (int64_t)hcD);
        }
        if (f.cm->mtp) rc = cpu_mtp_commit(m, bs, tokens, n, pos0, f.X);   /* MTP rows of these tokens */
    }
    if (!rc) {
        if (all_logits) {
            output_head(&f, 0, all_logits);
            memcpy(last_logits, all_logits + (size_t)(n - 1) * c->n_vocab, sizeof(float) * c->n_vocab);
        } else {
            output_head(&f, n - 1, last_logits);
        }
    }
    fw_release(&f);
    return rc;
}

/* Scratch memory grows with the batch, so long prompts run in pieces (the
 * result does not depend on how a prompt is split, spec §12). */
#define CPU_MAX_BATCH 512

int cpu_forward(minke_model *m, void *bs, const int32_t *tokens, int n, int pos0,
                float *all_logits, float *last_logits) {
    size_t V = m->w.cfg.n_vocab;
    cpu_model *cm = m->be;
    int rc = 0;
    pthread_mutex_lock(&cm->lock);   /* sessions of one model may run from several threads */
    for (int i = 0; i < n && rc == 0; i += CPU_MAX_BATCH) {
        int len = n - i < CPU_MAX_BATCH ? n - i : CPU_MAX_BATCH;
        rc = forward_batch(m, bs, tokens + i, len, pos0 + i, all_logits ? all_logits + (size_t)i * V : NULL,
                           last_logits);
    }
    pthread_mutex_unlock(&cm->lock);
    return rc;
}
