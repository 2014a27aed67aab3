/* mtp.c: the MTP (multi-token prediction) block on the CPU backend (spec
 * model.md §13): its vectors, its per-session state, greedy drafts and the
 * copy of that state to/from the snapshot payload (engine/backend.h).
 *
 * One MTP step takes a token τ, a main-model HC state Hs and a position p:
 *   U[i] = e_proj·rmsnorm(embd[τ]; enorm) + h_proj·rmsnorm(Hs[i]; hnorm)
 *   V    = the MTP decoder block on U (forward.c's layer code with the MTP
 *          weights: sliding window only, main RoPE, top-k routing with the
 *          MTP's exp_probs_b, no hash routing) at position p, with its own
 *          raw cache of `window` rows
 *   logits = output · rmsnorm(HCHead(V; mtp hc_head); mtp norm)
 *
 * Which Hs goes with τ = t_p is the pairing (minke.h, MINKE_MTP_PAIR_*):
 * PREV uses H_{p-1} (H_{-1} = 0), SAME uses H_p (ds4). The MTP cache holds,
 * for every processed position q, the row of the step (t_q, H_q or H_{q-1},
 * q): the forward calls cpu_mtp_commit with the final HC states of each
 * batch (only the block's attention half runs there: the rows are all that
 * is kept), so the cache is a pure function of the token sequence (prefill in
 * any chunking gives the same rows) and snapshots carry it. Drafting runs
 * steps beyond the committed positions on a copy-restored ring, so it never
 * changes the session.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "engine/sample.h"
#include "quant/quant.h"

struct cpu_mtp_model {
    cpu_layer_vecs v;                     /* the block's vectors (compressor ones stay NULL) */
    float *hc_head_base, *hc_head_scale, *enorm, *hnorm, *norm;
    float clamp;                          /* SwiGLU limit: the main stack's last layer's */
};

struct cpu_mtp_state {
    cpu_layer_cache lc;                   /* ratio 0: only the raw window ring */
    float *H;                             /* main final HC state of the last processed token */
    int32_t last_tok;
};

static float *vec_f32(const dsv4_tensor *t) {
    int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    float *v = malloc(sizeof(float) * (size_t)n);
    if (v) quant_get(t->type)->dequant(t->data, v, n);
    return v;
}

void cpu_mtp_free(minke_model *m) {
    cpu_model *cm = m->be;
    cpu_mtp_model *mm = cm ? cm->mtp : NULL;
    if (!mm) return;
    float **p = (float **)&mm->v;
    for (size_t i = 0; i < sizeof(cpu_layer_vecs) / sizeof(float *); i++) free(p[i]);
    free(mm->hc_head_base); free(mm->hc_head_scale); free(mm->enorm); free(mm->hnorm); free(mm->norm);
    free(mm);
    cm->mtp = NULL;
}

int cpu_mtp_init(minke_model *m) {
    cpu_model *cm = m->be;
    const dsv4_mtp_weights *w = m->mtp;
    const dsv4_layer *L = &w->blk;
    const dsv4_config *c = &m->w.cfg;
    cpu_mtp_model *mm = calloc(1, sizeof *mm);
    if (!mm) { minke_set_error("out of memory"); return -1; }
    cm->mtp = mm;
    cpu_layer_vecs *v = &mm->v;
    v->hc_attn_scale = vec_f32(&L->hc_attn_scale); v->hc_attn_base = vec_f32(&L->hc_attn_base);
    v->attn_norm = vec_f32(&L->attn_norm); v->q_a_norm = vec_f32(&L->q_a_norm);
    v->kv_norm = vec_f32(&L->kv_norm); v->sinks = vec_f32(&L->sinks);
    v->hc_ffn_scale = vec_f32(&L->hc_ffn_scale); v->hc_ffn_base = vec_f32(&L->hc_ffn_base);
    v->ffn_norm = vec_f32(&L->ffn_norm); v->exp_bias = vec_f32(&L->exp_bias);
    mm->hc_head_base = vec_f32(&w->hc_head_base); mm->hc_head_scale = vec_f32(&w->hc_head_scale);
    mm->enorm = vec_f32(&w->enorm); mm->hnorm = vec_f32(&w->hnorm); mm->norm = vec_f32(&w->norm);
    /* OFF uses one SwiGLU limit for every block; minke reads it per layer, so
     * the MTP block (logical layer n_layer) takes the last layer's value. */
    mm->clamp = c->swiglu_clamp[c->n_layer - 1];
    if (!v->hc_attn_scale || !v->hc_attn_base || !v->attn_norm || !v->q_a_norm || !v->kv_norm || !v->sinks ||
        !v->hc_ffn_scale || !v->hc_ffn_base || !v->ffn_norm || !v->exp_bias || !mm->hc_head_base ||
        !mm->hc_head_scale || !mm->enorm || !mm->hnorm || !mm->norm) {
        cpu_mtp_free(m);
        minke_set_error("out of memory for the MTP block");
        return -1;
    }
    return 0;
}

/* ---- session state ---- */
int cpu_mtp_session_alloc(minke_model *m, cpu_session *s) {
    const dsv4_config *c = &m->w.cfg;
    cpu_mtp_state *st = calloc(1, sizeof *st);
    if (!st) return -1;
    s->mtp = st;
    size_t raw = (size_t)c->sliding_window * c->head_dim;
    st->lc.ratio = 0;
    st->lc.raw = malloc(sizeof(float) * raw);
    st->H = malloc(sizeof(float) * c->hc_dim);
    if (!st->lc.raw || !st->H) return -1;   /* caller frees */
    s->bytes += sizeof(float) * (raw + c->hc_dim);
    cpu_mtp_session_clear(m, s);
    return 0;
}

void cpu_mtp_session_free(cpu_session *s) {
    if (!s->mtp) return;
    free(s->mtp->lc.raw);
    free(s->mtp->H);
    free(s->mtp);
    s->mtp = NULL;
}

void cpu_mtp_session_clear(minke_model *m, cpu_session *s) {
    const dsv4_config *c = &m->w.cfg;
    cpu_mtp_state *st = s->mtp;
    if (!st) return;
    memset(st->lc.raw, 0, sizeof(float) * c->sliding_window * c->head_dim);
    memset(st->H, 0, sizeof(float) * c->hc_dim);
    st->last_tok = 0;
}

/* ---- the block ---- */

/* n MTP steps (tok[t], Hs[t], pos0 + t) in one batch; V (n x hc_dim) gets the block outputs
 * (cache_only: only the cache rows are wanted, V is scratch). */
static int mtp_block(minke_model *m, cpu_mtp_state *st, const int32_t *tok, const float *Hs, int n, int pos0,
                     float *V, int cache_only) {
    const dsv4_config *c = &m->w.cfg;
    cpu_model *cm = m->be;
    const cpu_mtp_model *mm = cm->mtp;
    const dsv4_mtp_weights *w = m->mtp;
    size_t D = c->n_embd, nhc = c->n_hc, hcD = c->hc_dim;
    float *e = calloc((size_t)n * D, sizeof(float)), *ep = malloc(sizeof(float) * n * D);
    float *h = calloc((size_t)n * hcD, sizeof(float)), *hp = malloc(sizeof(float) * n * hcD);
    int rc = -1;
    if (!e || !ep || !h || !hp) { minke_set_error("out of memory in the MTP block"); goto out; }
    for (int t = 0; t < n; t++) {
        cpu_get_row(&m->w.token_embd, tok[t], e + t * D);
        nm_rmsnorm(e + t * D, e + t * D, mm->enorm, (int)D, c->rms_eps);
        for (size_t i = 0; i < nhc; i++)
            nm_rmsnorm(h + t * hcD + i * D, Hs + t * hcD + i * D, mm->hnorm, (int)D, c->rms_eps);
    }
    cpu_matmul(cm, &w->e_proj, 0, 0, (int64_t)D, e, (int64_t)D, n, ep, (int64_t)D);
    cpu_matmul(cm, &w->h_proj, 0, 0, (int64_t)D, h, (int64_t)D, (int)(n * nhc), hp, (int64_t)D);
    for (int t = 0; t < n; t++)
        for (size_t i = 0; i < nhc; i++)
            for (size_t d = 0; d < D; d++) V[t * hcD + i * D + d] = ep[t * D + d] + hp[t * hcD + i * D + d];
    rc = cpu_block_forward(m, &w->blk, &mm->v, &st->lc, mm->clamp, tok, n, pos0, V, cache_only);
out:
    free(e); free(ep); free(h); free(hp);
    return rc;
}

/* MTP logits of one block output V (spec §13.1 step 5). */
static int mtp_head(minke_model *m, const float *V, int pos, float *logits) {
    const dsv4_config *c = &m->w.cfg;
    cpu_model *cm = m->be;
    const cpu_mtp_model *mm = cm->mtp;
    int D = (int)c->n_embd, nhc = (int)c->n_hc, hcD = (int)c->hc_dim;
    float *Vn = malloc(sizeof(float) * hcD), *y = malloc(sizeof(float) * D);
    if (!Vn || !y) { free(Vn); free(y); minke_set_error("out of memory in the MTP head"); return -1; }
    float mix[64], hw[64];
    nm_rmsnorm(Vn, V, NULL, hcD, c->rms_eps);
    cpu_matmul(cm, &m->mtp->hc_head_fn, 0, 0, nhc, Vn, hcD, 1, mix, nhc);
    nm_hc_head_weights(mix, mm->hc_head_scale[0], mm->hc_head_base, nhc, c->hc_eps, hw);
    nm_hc_weighted_sum(V, hw, nhc, D, y);
    nm_rmsnorm(y, y, mm->norm, D, c->rms_eps);
    cpu_matmul(cm, &m->w.output, 0, 0, c->n_vocab, y, D, 1, logits, c->n_vocab);
    minke_tap_emit(m, "mtp.logits", pos, logits, c->n_vocab);
    free(Vn); free(y);
    return 0;
}

int cpu_mtp_commit(minke_model *m, cpu_session *s, const int32_t *tokens, int n, int pos0, const float *X) {
    cpu_mtp_state *st = s->mtp;
    if (!st || n <= 0) return 0;
    size_t hcD = m->w.cfg.hc_dim;
    float *V = malloc(sizeof(float) * n * hcD), *Hs = NULL;
    int rc = -1;
    if (!V) goto oom;
    if (m->params.mtp_pairing == MINKE_MTP_PAIR_SAME) {
        rc = mtp_block(m, st, tokens, X, n, pos0, V, 1);
    } else {
        Hs = malloc(sizeof(float) * n * hcD);
        if (!Hs) goto oom;
        if (pos0 > 0) memcpy(Hs, st->H, sizeof(float) * hcD);
        else memset(Hs, 0, sizeof(float) * hcD);
        memcpy(Hs + hcD, X, sizeof(float) * (n - 1) * hcD);
        rc = mtp_block(m, st, tokens, Hs, n, pos0, V, 1);
    }
    if (rc == 0) {
        memcpy(st->H, X + (size_t)(n - 1) * hcD, sizeof(float) * hcD);
        st->last_tok = tokens[n - 1];
    }
    free(V); free(Hs);
    return rc;
oom:
    free(V); free(Hs);
    minke_set_error("out of memory in the MTP block");
    return -1;
}

int cpu_mtp_draft(minke_model *m, void *bs, int pos, int32_t token, int n_draft, int32_t *drafts) {
    cpu_model *cm = m->be;
    cpu_session *s = bs;
    cpu_mtp_state *st = s->mtp;
    const dsv4_config *c = &m->w.cfg;
    size_t hcD = c->hc_dim, ring = (size_t)c->sliding_window * c->head_dim;
    float *saved = malloc(sizeof(float) * ring), *Hs = malloc(sizeof(float) * hcD);
    float *V = malloc(sizeof(float) * hcD), *logits = malloc(sizeof(float) * c->n_vocab);
    int produced = -1;
    if (!saved || !Hs || !V || !logits) {
        minke_set_error("out of memory for MTP drafts");
        goto out;
    }
    pthread_mutex_lock(&cm->lock);
    memcpy(saved, st->lc.raw, sizeof(float) * ring);
    memcpy(Hs, st->H, sizeof(float) * hcD);
    produced = 0;
    int32_t tok = token;
    int p = pos, ok = 1;
    if (m->params.mtp_pairing == MINKE_MTP_PAIR_SAME) {
        /* ds4: the step of the last processed token guesses `token` first */
        ok = mtp_block(m, st, &st->last_tok, Hs, 1, pos - 1, V, 0) == 0 && mtp_head(m, V, pos - 1, logits) == 0;
        if (ok && sampler_argmax(logits, (int)c->n_vocab) != token) n_draft = 0;
        if (ok) memcpy(Hs, V, sizeof(float) * hcD);
    }
    for (int k = 0; ok && k < n_draft; k++) {
        ok = mtp_block(m, st, &tok, Hs, 1, p, V, 0) == 0 && mtp_head(m, V, p, logits) == 0;
        if (!ok) break;
        tok = sampler_argmax(logits, (int)c->n_vocab);
        if (tok < 0) break;
        drafts[produced++] = tok;
        memcpy(Hs, V, sizeof(float) * hcD);
        p++;
    }
    memcpy(st->lc.raw, saved, sizeof(float) * ring);
    pthread_mutex_unlock(&cm->lock);
    if (!ok) produced = -1;
out:
    free(saved); free(Hs); free(V); free(logits);
    return produced;
}

/* ---- payload (engine/backend.h: last token, H, raw rows oldest first) ---- */
static int mtp_state_copy(minke_model *m, cpu_session *s, int pos, uint8_t *buf, int save) {
    const dsv4_config *c = &m->w.cfg;
    cpu_mtp_state *st = s->mtp;
    if (!st) return 0;
    if (!save) cpu_mtp_session_clear(m, s);
    if (pos == 0) return 0;
    size_t Dh = c->head_dim, hcD = c->hc_dim;
    int W = (int)c->sliding_window, n_raw = pos < W ? pos : W;
    uint8_t *p = buf;
#define CP(ptr, nbytes) do { if (save) memcpy(p, (ptr), (nbytes)); else memcpy((ptr), p, (nbytes)); \
                             p += (nbytes); } while (0)
    CP(&st->last_tok, 4);
    CP(st->H, hcD * 4);
    for (int i = 0; i < n_raw; i++) CP(st->lc.raw + (size_t)((pos - n_raw + i) % W) * Dh, Dh * 4);
#undef CP
    if (!save && (st->last_tok < 0 || (uint32_t)st->last_tok >= c->n_vocab)) {
        cpu_mtp_session_clear(m, s);
        minke_set_error("session state: MTP last token %d is out of range", st->last_tok);
        return -1;
    }
    return 0;
}

int cpu_mtp_state_save(minke_model *m, void *bs, int pos, void *dst) { return mtp_state_copy(m, bs, pos, dst, 1); }
int cpu_mtp_state_load(minke_model *m, void *bs, int pos, const void *src) {
    return mtp_state_copy(m, bs, pos, (uint8_t *)src, 0);
}

uint64_t cpu_mtp_frontier_copy(minke_model *m, cpu_session *s, uint8_t *buf, int save) {
    cpu_mtp_state *st = s->mtp;
    if (!st) return 0;
    const dsv4_config *c = &m->w.cfg;
    size_t ring = sizeof(float) * c->sliding_window * c->head_dim, h = sizeof(float) * c->hc_dim;
    if (buf) {
        if (save) { memcpy(buf, st->lc.raw, ring); memcpy(buf + ring, st->H, h); memcpy(buf + ring + h, &st->last_tok, 4); }
        else { memcpy(st->lc.raw, buf, ring); memcpy(st->H, buf + ring, h); memcpy(&st->last_tok, buf + ring + h, 4); }
    }
    return ring + h + 4;
}
