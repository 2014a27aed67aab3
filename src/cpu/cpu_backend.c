/* cpu_backend.c: the CPU backend's ops table (engine/backend.h): model
 * setup (f32 copies of vector tensors, RoPE tables, thread pool), session
 * KV state (spec §15) and its copy to/from the shared payload layout.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "quant/quant.h"

static float *vec_f32(const dsv4_tensor *t) {
    if (!t->data) return NULL;
    int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    float *v = malloc(sizeof(float) * (size_t)n);
    if (!v) return NULL;
    quant_get(t->type)->dequant(t->data, v, n);
    return v;
}

static void cpu_model_free(minke_model *m) {
    cpu_model *cm = m->be;
    if (!cm) return;
    cpu_mtp_free(m);
    cpu_pool_free(cm->pool);
    if (cm->lv) {
        for (uint32_t il = 0; il < m->w.cfg.n_layer; il++) {
            float **p = (float **)&cm->lv[il];
            for (size_t i = 0; i < sizeof(cpu_layer_vecs) / sizeof(float *); i++) free(p[i]);
        }
        free(cm->lv);
    }
    free(cm->output_hc_base);
    free(cm->output_hc_scale);
    free(cm->output_norm);
    pthread_mutex_destroy(&cm->lock);
    free(cm);
    m->be = NULL;
}

static int cpu_model_init(minke_model *m) {
    const dsv4_config *c = &m->w.cfg;
    if (c->n_hc > 64 || c->rope_dim > 256 || c->rope_dim % 2 || c->rope_dim > c->head_dim ||
        c->rope_dim > c->indexer_head_dim) {
        minke_set_error("cpu backend: unsupported dims (n_hc %u, rope dims %u)", c->n_hc, c->rope_dim);
        return -1;
    }
    if (m->params.sims && ((c->head_dim - c->rope_dim) % 64 != 0 || (c->n_csa && c->indexer_head_dim != 128))) {
        minke_set_error("simulations need head_dim - rope_dim divisible by 64 and indexer_head_dim 128 "
                        "(use --sims off for this model)");
        return -1;
    }
    cpu_model *cm = calloc(1, sizeof *cm);
    if (!cm) { minke_set_error("out of memory"); return -1; }
    cm->exact_act = m->params.act != MINKE_ACT_Q8;
    pthread_mutex_init(&cm->lock, NULL);
    m->be = cm;
    cm->pool = cpu_pool_create(m->params.n_threads);
    cm->lv = calloc(c->n_layer, sizeof *cm->lv);
    if (!cm->pool || !cm->lv) { cpu_model_free(m); minke_set_error("out of memory"); return -1; }
    for (uint32_t il = 0; il < c->n_layer; il++) {
        const dsv4_layer *L = &m->w.layers[il];
        cpu_layer_vecs *v = &cm->lv[il];
        v->hc_attn_scale = vec_f32(&L->hc_attn_scale); v->hc_attn_base = vec_f32(&L->hc_attn_base);
        v->attn_norm = vec_f32(&L->attn_norm); v->q_a_norm = vec_f32(&L->q_a_norm);
        v->kv_norm = vec_f32(&L->kv_norm); v->sinks = vec_f32(&L->sinks);
        v->comp_ape = vec_f32(&L->comp_ape); v->comp_norm = vec_f32(&L->comp_norm);
        v->idx_comp_ape = vec_f32(&L->idx_comp_ape); v->idx_comp_norm = vec_f32(&L->idx_comp_norm);
        v->hc_ffn_scale = vec_f32(&L->hc_ffn_scale); v->hc_ffn_base = vec_f32(&L->hc_ffn_base);
        v->ffn_norm = vec_f32(&L->ffn_norm); v->exp_bias = vec_f32(&L->exp_bias);
    }
    cm->output_hc_base = vec_f32(&m->w.output_hc_base);
    cm->output_hc_scale = vec_f32(&m->w.output_hc_scale);
    cm->output_norm = vec_f32(&m->w.output_norm);
    nm_rope_init(&cm->rope_main, (int)c->rope_dim, c->rope_freq_base, 0, 0, 0, 0, 0);
    nm_rope_init(&cm->rope_comp, (int)c->rope_dim, c->compress_rope_freq_base, 1, c->yarn_factor,
                 (double)c->yarn_orig_ctx, c->yarn_beta_fast, c->yarn_beta_slow);
    if (m->mtp && cpu_mtp_init(m) != 0) {
        cpu_model_free(m);
        return -1;
    }
    return 0;
}

static void comp_state_clear(cpu_comp_state *cs) {
    size_t n = (size_t)cs->rows * cs->width;
    if (cs->kv) memset(cs->kv, 0, n * sizeof(float));
    for (size_t i = 0; cs->sc && i < n; i++) cs->sc[i] = -INFINITY;
}

void cpu_session_clear(minke_model *m, cpu_session *s) {
    const dsv4_config *c = &m->w.cfg;
    for (uint32_t il = 0; il < c->n_layer; il++) {
        cpu_layer_cache *lc = &s->layers[il];
        memset(lc->raw, 0, sizeof(float) * c->sliding_window * c->head_dim);
        comp_state_clear(&lc->cs);
        comp_state_clear(&lc->is);
    }
    cpu_mtp_session_clear(m, s);
}

static void cpu_session_free(minke_model *m, void *bs) {
    cpu_session *s = bs;
    if (!s) return;
    if (s->layers) {
        for (uint32_t il = 0; il < m->w.cfg.n_layer; il++) {
            cpu_layer_cache *lc = &s->layers[il];
            free(lc->raw); free(lc->comp); free(lc->index);
            free(lc->cs.kv); free(lc->cs.sc); free(lc->is.kv); free(lc->is.sc);
        }
        free(s->layers);
    }
    cpu_mtp_session_free(s);
    free(s);
}

static void *cpu_session_alloc(minke_model *m, int n_ctx) {
    const dsv4_config *c = &m->w.cfg;
    cpu_session *s = calloc(1, sizeof *s);
    if (!s) { minke_set_error("out of memory"); return NULL; }
    s->n_ctx = n_ctx;
    s->layers = calloc(c->n_layer, sizeof *s->layers);
    if (!s->layers) goto oom;
    size_t Dh = c->head_dim, ihd = c->indexer_head_dim;
    for (uint32_t il = 0; il < c->n_layer; il++) {
        cpu_layer_cache *lc = &s->layers[il];
        int r = (int)c->compress_ratio[il];
        lc->ratio = r;
        lc->raw = malloc(sizeof(float) * c->sliding_window * Dh);
        if (!lc->raw) goto oom;
        s->bytes += sizeof(float) * c->sliding_window * Dh;
        if (r) {
            int cf = r == 4 ? 2 : 1;
            lc->comp_cap = n_ctx / r + 1;
            lc->comp = malloc(sizeof(float) * lc->comp_cap * Dh);
            lc->cs.rows = cf * r;
            lc->cs.width = cf * (int)Dh;
            lc->cs.kv = malloc(sizeof(float) * (size_t)lc->cs.rows * lc->cs.width);
            lc->cs.sc = malloc(sizeof(float) * (size_t)lc->cs.rows * lc->cs.width);
            if (!lc->comp || !lc->cs.kv || !lc->cs.sc) goto oom;
            s->bytes += sizeof(float) * (lc->comp_cap * Dh + 2 * (size_t)lc->cs.rows * lc->cs.width);
        }
        if (r == 4) {
            lc->index_cap = n_ctx / 4 + 1;
            lc->index = malloc(sizeof(float) * lc->index_cap * ihd);
            lc->is.rows = 8;
            lc->is.width = 2 * (int)ihd;
            lc->is.kv = malloc(sizeof(float) * (size_t)lc->is.rows * lc->is.width);
            lc->is.sc = malloc(sizeof(float) * (size_t)lc->is.rows * lc->is.width);
            if (!lc->index || !lc->is.kv || !lc->is.sc) goto oom;
            s->bytes += sizeof(float) * (lc->index_cap * ihd + 2 * (size_t)lc->is.rows * lc->is.width);
        }
    }
    if (m->mtp && cpu_mtp_session_alloc(m, s) != 0) goto oom;
    cpu_session_clear(m, s);
    return s;
oom:
    cpu_session_free(m, s);
    minke_set_error("out of memory for a session of %d tokens", n_ctx);
    return NULL;
}

static void cpu_session_reset(minke_model *m, void *bs) { cpu_session_clear(m, bs); }
static uint64_t cpu_session_bytes(minke_model *m, void *bs) { return ((cpu_session *)bs)->bytes; }

/* Copy between the session and the payload; save = 1 writes dst. */
static int state_copy(minke_model *m, cpu_session *s, int pos, uint8_t *buf, int save) {
    const dsv4_config *c = &m->w.cfg;
    minke_kv_layer_layout *lay = malloc(sizeof *lay * c->n_layer);
    if (!lay) { minke_set_error("out of memory"); return -1; }
    minke_kv_layout(c, pos, lay);
    size_t Dh = c->head_dim, ihd = c->indexer_head_dim;
    int W = (int)c->sliding_window;
    const uint64_t base = 0;   /* layout offsets are absolute */
#define CP(off, ptr, nbytes) do { if (save) memcpy(buf + base + (off), (ptr), (nbytes)); \
                                  else memcpy((ptr), buf + base + (off), (nbytes)); } while (0)
    for (uint32_t il = 0; il < c->n_layer; il++) {
        const minke_kv_layer_layout *L = &lay[il];
        cpu_layer_cache *lc = &s->layers[il];
        if (!save) memset(lc->raw, 0, sizeof(float) * W * Dh);
        for (int i = 0; i < L->n_raw; i++) {
            int p = pos - L->n_raw + i;
            CP(L->off_raw + (uint64_t)i * Dh * 4, lc->raw + (size_t)(p % W) * Dh, Dh * 4);
        }
        if (L->n_comp) CP(L->off_comp, lc->comp, (size_t)L->n_comp * Dh * 4);
        if (L->n_index) CP(L->off_index, lc->index, (size_t)L->n_index * ihd * 4);
        if (L->ratio) {
            size_t n = (size_t)L->state_rows * L->state_width * 4;
            CP(L->off_comp_kv, lc->cs.kv, n);
            CP(L->off_comp_sc, lc->cs.sc, n);
        }
        if (L->ratio == 4) {
            size_t n = (size_t)L->istate_rows * L->istate_width * 4;
            CP(L->off_index_kv, lc->is.kv, n);
            CP(L->off_index_sc, lc->is.sc, n);
        }
    }
#undef CP
    free(lay);
    return 0;
}

static int cpu_state_save(minke_model *m, void *bs, int pos, void *dst) { return state_copy(m, bs, pos, dst, 1); }
static int cpu_state_load(minke_model *m, void *bs, int pos, const void *src) {
    return state_copy(m, bs, pos, (uint8_t *)src, 0);
}

/* Frontier (backend.h): raw rings and compressor states of every layer, then
 * the MTP state; buf NULL only counts. Appended rows are never rewritten
 * below the counters, so they need no copy. */
static uint64_t frontier_copy(minke_model *m, cpu_session *s, uint8_t *buf, int save) {
    const dsv4_config *c = &m->w.cfg;
    uint64_t off = 0;
#define FC(ptr, nbytes) do { if (buf) { if (save) memcpy(buf + off, (ptr), (nbytes)); \
                                       else memcpy((ptr), buf + off, (nbytes)); } \
                             off += (nbytes); } while (0)
    for (uint32_t il = 0; il < c->n_layer; il++) {
        cpu_layer_cache *lc = &s->layers[il];
        FC(lc->raw, sizeof(float) * c->sliding_window * c->head_dim);
        cpu_comp_state *cs[2] = {&lc->cs, &lc->is};
        for (int k = 0; k < 2; k++)
            if (cs[k]->kv) {
                size_t n = sizeof(float) * (size_t)cs[k]->rows * cs[k]->width;
                FC(cs[k]->kv, n);
                FC(cs[k]->sc, n);
            }
    }
#undef FC
    return off + cpu_mtp_frontier_copy(m, s, buf ? buf + off : NULL, save);
}

static uint64_t cpu_frontier_bytes(minke_model *m, void *bs) { return frontier_copy(m, bs, NULL, 1); }
static void cpu_frontier_save(minke_model *m, void *bs, void *dst) { frontier_copy(m, bs, dst, 1); }
static void cpu_frontier_load(minke_model *m, void *bs, const void *src) { frontier_copy(m, bs, (uint8_t *)src, 0); }

static const minke_backend_ops cpu_ops = {
    .name = "cpu",
    .model_init = cpu_model_init,
    .model_free = cpu_model_free,
    .session_alloc = cpu_session_alloc,
    .session_free = cpu_session_free,
    .session_reset = cpu_session_reset,
    .session_bytes = cpu_session_bytes,
    .forward = cpu_forward,
    .state_save = cpu_state_save,
    .state_load = cpu_state_load,
    .mtp_draft = cpu_mtp_draft,
    .mtp_state_save = cpu_mtp_state_save,
    .mtp_state_load = cpu_mtp_state_load,
    .frontier_bytes = cpu_frontier_bytes,
    .frontier_save = cpu_frontier_save,
    .frontier_load = cpu_frontier_load,
};

const minke_backend_ops *minke_backend_cpu(void) { return &cpu_ops; }
