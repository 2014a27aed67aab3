/* weights.c: bind the tensors of a DeepSeek V4 GGUF to dsv4_weights.
 *
 * The config (model/config.c) gives every dimension; each tensor is looked up
 * by its spec §4 name and its rank, shape and type are checked here, so a
 * wrong or missing tensor is one clear error at load time instead of a bad
 * read in the forward pass. The hash-routing tables are range-checked whole.
 */
#include "model/weights.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gguf/gguf.h"
#include "quant/quant.h"

typedef struct bind_ctx {
    const gguf_file *f;
    char *err;
    size_t errlen;
    uint64_t total;
} bind_ctx;

static int fail(bind_ctx *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err, b->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* Types the CPU forward can read per use: vectors need a float format,
 * matrices anything with a dot product, tid2eid I32. */
enum use { USE_VEC, USE_MAT, USE_I32 };

static int type_ok(int type, enum use u) {
    const quant_traits *t = quant_get(type);
    if (!t) return 0;
    switch (u) {
    case USE_VEC: return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16;
    case USE_I32: return type == GGML_TYPE_I32;
    case USE_MAT: return type != GGML_TYPE_I32 && type != GGML_TYPE_Q8_K && t->dot != NULL;
    }
    return 0;
}

/* Bind name with expected dims (ne[i] == 0 ends the list). required=0: absent is fine. */
static int bind(bind_ctx *b, dsv4_tensor *out, const char *name, enum use u, int required,
                int64_t ne0, int64_t ne1, int64_t ne2) {
    memset(out, 0, sizeof *out);
    const gguf_tensor *t = gguf_find_tensor(b->f, name);
    if (!t) {
        if (required) return fail(b, "tensor %s is missing", name);
        return 0;
    }
    int64_t want[3] = {ne0, ne1, ne2};
    int nd = ne2 ? 3 : ne1 ? 2 : 1;
    int tnd = (int)t->n_dims;
    while (tnd > nd && t->ne[tnd - 1] == 1) tnd--;  /* trailing 1s are harmless */
    int shape_ok = tnd <= nd;
    for (int i = 0; i < nd && shape_ok; i++) if ((int64_t)t->ne[i] != want[i]) shape_ok = 0;
    if (!shape_ok) {
        char got[96] = "", exp[96] = "";
        for (uint32_t i = 0; i < t->n_dims; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%llu", i ? ", " : "", (unsigned long long)t->ne[i]);
        for (int i = 0; i < nd; i++)
            snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s%lld", i ? ", " : "", (long long)want[i]);
        return fail(b, "tensor %s has shape [%s], expected [%s]", name, got, exp);
    }
    if (!type_ok((int)t->type, u))
        return fail(b, "tensor %s has type %s, which minke cannot use there", name, quant_name((int)t->type));
    uint64_t rb = quant_row_bytes((int)t->type, (int64_t)t->ne[0]);
    if (rb == 0) return fail(b, "tensor %s: row of %llu elements does not fit %s blocks", name,
                             (unsigned long long)t->ne[0], quant_name((int)t->type));
    if (!t->data) return fail(b, "tensor %s has no data", name);
    out->name = t->cname;
    out->data = t->data;
    out->type = (int)t->type;
    out->n_dims = nd;
    for (int i = 0; i < 4; i++) out->ne[i] = i < nd ? want[i] : 1;
    out->row_bytes = rb;
    out->nbytes = t->nbytes;
    b->total += t->nbytes;
    return 0;
}

int dsv4_weights_bind(const gguf_file *f, dsv4_weights *w, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    if (dsv4_config_from_gguf(f, &w->cfg, err, errlen) != 0) return -1;
    const dsv4_config *c = &w->cfg;
    if (c->n_layer > DSV4_MAX_LAYERS) { snprintf(err, errlen, "too many layers (%u)", c->n_layer); return -1; }
    bind_ctx b = {f, err, errlen, 0};
    int64_t D = c->n_embd, V = c->n_vocab, nhc = c->n_hc, Dh = c->head_dim;
#define B(t, name, u, req, a, bb, cc) do { if (bind(&b, &(t), name, u, req, a, bb, cc)) return -1; } while (0)
    B(w->token_embd, "token_embd.weight", USE_MAT, 1, D, V, 0);
    B(w->output_hc_base, "output_hc_base.weight", USE_VEC, 1, nhc, 0, 0);
    B(w->output_hc_fn, "output_hc_fn.weight", USE_MAT, 1, nhc * D, nhc, 0);
    B(w->output_hc_scale, "output_hc_scale.weight", USE_VEC, 1, 1, 0, 0);
    B(w->output_norm, "output_norm.weight", USE_VEC, 1, D, 0, 0);
    B(w->output, "output.weight", USE_MAT, 1, D, V, 0);
    for (uint32_t il = 0; il < c->n_layer; il++) {
        dsv4_layer *L = &w->layers[il];
        int r = (int)c->compress_ratio[il];
        int64_t coff = r == 4 ? 2 : 1, ihd = c->indexer_head_dim;
        L->ratio = r;
        char n[128];
#define N(s) (snprintf(n, sizeof n, "blk.%u." s, il), n)
        B(L->hc_attn_fn, N("hc_attn_fn.weight"), USE_MAT, 1, nhc * D, c->hc_mix, 0);
        B(L->hc_attn_scale, N("hc_attn_scale.weight"), USE_VEC, 1, 3, 0, 0);
        B(L->hc_attn_base, N("hc_attn_base.weight"), USE_VEC, 1, c->hc_mix, 0, 0);
        B(L->attn_norm, N("attn_norm.weight"), USE_VEC, 1, D, 0, 0);
        B(L->q_a, N("attn_q_a.weight"), USE_MAT, 1, D, c->q_lora_rank, 0);
        B(L->q_a_norm, N("attn_q_a_norm.weight"), USE_VEC, 1, c->q_lora_rank, 0, 0);
        B(L->q_b, N("attn_q_b.weight"), USE_MAT, 1, c->q_lora_rank, c->q_dim, 0);
        B(L->kv, N("attn_kv.weight"), USE_MAT, 1, D, Dh, 0);
        B(L->kv_norm, N("attn_kv_a_norm.weight"), USE_VEC, 1, Dh, 0, 0);
        B(L->sinks, N("attn_sinks.weight"), USE_VEC, 1, c->n_head, 0, 0);
        B(L->out_a, N("attn_output_a.weight"), USE_MAT, 1, c->o_group_in, c->o_dim, 0);
        B(L->out_b, N("attn_output_b.weight"), USE_MAT, 1, c->o_dim, D, 0);
        if (r != 0) {
            B(L->comp_ape, N("attn_compressor_ape.weight"), USE_VEC, 1, coff * Dh, r, 0);
            B(L->comp_kv, N("attn_compressor_kv.weight"), USE_MAT, 1, D, coff * Dh, 0);
            B(L->comp_gate, N("attn_compressor_gate.weight"), USE_MAT, 1, D, coff * Dh, 0);
            B(L->comp_norm, N("attn_compressor_norm.weight"), USE_VEC, 1, Dh, 0, 0);
        }
        if (r == 4) {
            B(L->idx_q_b, N("indexer.attn_q_b.weight"), USE_MAT, 1, c->q_lora_rank, (int64_t)c->indexer_n_head * ihd, 0);
            B(L->idx_proj, N("indexer.proj.weight"), USE_MAT, 1, D, c->indexer_n_head, 0);
            B(L->idx_comp_ape, N("indexer_compressor_ape.weight"), USE_VEC, 1, 2 * ihd, 4, 0);
            B(L->idx_comp_kv, N("indexer_compressor_kv.weight"), USE_MAT, 1, D, 2 * ihd, 0);
            B(L->idx_comp_gate, N("indexer_compressor_gate.weight"), USE_MAT, 1, D, 2 * ihd, 0);
            B(L->idx_comp_norm, N("indexer_compressor_norm.weight"), USE_VEC, 1, ihd, 0, 0);
        }
        B(L->hc_ffn_fn, N("hc_ffn_fn.weight"), USE_MAT, 1, nhc * D, c->hc_mix, 0);
        B(L->hc_ffn_scale, N("hc_ffn_scale.weight"), USE_VEC, 1, 3, 0, 0);
        B(L->hc_ffn_base, N("hc_ffn_base.weight"), USE_VEC, 1, c->hc_mix, 0, 0);
        B(L->ffn_norm, N("ffn_norm.weight"), USE_VEC, 1, D, 0, 0);
        B(L->gate_inp, N("ffn_gate_inp.weight"), USE_MAT, 1, D, c->n_expert, 0);
        if (il < c->n_hash_layer) {
            B(L->tid2eid, N("ffn_gate_tid2eid.weight"), USE_I32, 1, c->n_expert_used, V, 0);
            const int32_t *ids = L->tid2eid.data;
            for (int64_t i = 0; i < (int64_t)c->n_expert_used * V; i++)
                if (ids[i] < 0 || ids[i] >= (int32_t)c->n_expert) {
                    snprintf(err, errlen, "tensor %s: expert id %d for token %lld is outside 0..%u",
                             L->tid2eid.name, ids[i], (long long)(i / c->n_expert_used), c->n_expert - 1);
                    return -1;
                }
        } else {
            B(L->exp_bias, N("exp_probs_b.bias"), USE_VEC, 1, c->n_expert, 0, 0);
        }
        B(L->gate_exps, N("ffn_gate_exps.weight"), USE_MAT, 1, D, c->expert_ff, c->n_expert);
        B(L->up_exps, N("ffn_up_exps.weight"), USE_MAT, 1, D, c->expert_ff, c->n_expert);
        B(L->down_exps, N("ffn_down_exps.weight"), USE_MAT, 1, c->expert_ff, D, c->n_expert);
        if (L->gate_exps.type != L->up_exps.type) {
            snprintf(err, errlen, "blk.%u: ffn_gate_exps (%s) and ffn_up_exps (%s) must share a type",
                     il, quant_name(L->gate_exps.type), quant_name(L->up_exps.type));
            return -1;
        }
        B(L->gate_shexp, N("ffn_gate_shexp.weight"), USE_MAT, 1, D, c->shexp_ff, 0);
        B(L->up_shexp, N("ffn_up_shexp.weight"), USE_MAT, 1, D, c->shexp_ff, 0);
        B(L->down_shexp, N("ffn_down_shexp.weight"), USE_MAT, 1, c->shexp_ff, D, 0);
#undef N
    }
#undef B
    w->total_bytes = b.total;
    return 0;
}

int dsv4_mtp_weights_bind(const gguf_file *f, const dsv4_config *c, dsv4_mtp_weights *w, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    bind_ctx b = {f, err, errlen, 0};
    int64_t D = c->n_embd, nhc = c->n_hc, Dh = c->head_dim;
    dsv4_layer *L = &w->blk;
    L->ratio = 0;
#define B(t, name, u, a, bb, cc) do { if (bind(&b, &(t), "mtp.0." name, u, 1, a, bb, cc)) return -1; } while (0)
    B(w->hc_head_base, "hc_head_base.weight", USE_VEC, nhc, 0, 0);
    B(w->hc_head_fn, "hc_head_fn.weight", USE_MAT, nhc * D, nhc, 0);
    B(w->hc_head_scale, "hc_head_scale.weight", USE_VEC, 1, 0, 0);
    B(w->e_proj, "e_proj.weight", USE_MAT, D, D, 0);
    B(w->h_proj, "h_proj.weight", USE_MAT, D, D, 0);
    B(w->enorm, "enorm.weight", USE_VEC, D, 0, 0);
    B(w->hnorm, "hnorm.weight", USE_VEC, D, 0, 0);
    B(w->norm, "norm.weight", USE_VEC, D, 0, 0);
    B(L->hc_attn_fn, "hc_attn_fn.weight", USE_MAT, nhc * D, c->hc_mix, 0);
    B(L->hc_attn_scale, "hc_attn_scale.weight", USE_VEC, 3, 0, 0);
    B(L->hc_attn_base, "hc_attn_base.weight", USE_VEC, c->hc_mix, 0, 0);
    B(L->attn_norm, "attn_norm.weight", USE_VEC, D, 0, 0);
    B(L->q_a, "attn_q_a.weight", USE_MAT, D, c->q_lora_rank, 0);
    B(L->q_a_norm, "attn_q_a_norm.weight", USE_VEC, c->q_lora_rank, 0, 0);
    B(L->q_b, "attn_q_b.weight", USE_MAT, c->q_lora_rank, c->q_dim, 0);
    B(L->kv, "attn_kv.weight", USE_MAT, D, Dh, 0);
    B(L->kv_norm, "attn_kv_a_norm.weight", USE_VEC, Dh, 0, 0);
    B(L->sinks, "attn_sinks.weight", USE_VEC, c->n_head, 0, 0);
    B(L->out_a, "attn_output_a.weight", USE_MAT, c->o_group_in, c->o_dim, 0);
    B(L->out_b, "attn_output_b.weight", USE_MAT, c->o_dim, D, 0);
    B(L->hc_ffn_fn, "hc_ffn_fn.weight", USE_MAT, nhc * D, c->hc_mix, 0);
    B(L->hc_ffn_scale, "hc_ffn_scale.weight", USE_VEC, 3, 0, 0);
    B(L->hc_ffn_base, "hc_ffn_base.weight", USE_VEC, c->hc_mix, 0, 0);
    B(L->ffn_norm, "ffn_norm.weight", USE_VEC, D, 0, 0);
    B(L->gate_inp, "ffn_gate_inp.weight", USE_MAT, D, c->n_expert, 0);
    B(L->exp_bias, "exp_probs_b.bias", USE_VEC, c->n_expert, 0, 0);
    B(L->gate_exps, "ffn_gate_exps.weight", USE_MAT, D, c->expert_ff, c->n_expert);
    B(L->up_exps, "ffn_up_exps.weight", USE_MAT, D, c->expert_ff, c->n_expert);
    B(L->down_exps, "ffn_down_exps.weight", USE_MAT, c->expert_ff, D, c->n_expert);
    if (L->gate_exps.type != L->up_exps.type) {
        snprintf(err, errlen, "mtp.0: ffn_gate_exps (%s) and ffn_up_exps (%s) must share a type",
                 quant_name(L->gate_exps.type), quant_name(L->up_exps.type));
        return -1;
    }
    B(L->gate_shexp, "ffn_gate_shexp.weight", USE_MAT, D, c->shexp_ff, 0);
    B(L->up_shexp, "ffn_up_shexp.weight", USE_MAT, D, c->shexp_ff, 0);
    B(L->down_shexp, "ffn_down_shexp.weight", USE_MAT, c->shexp_ff, D, 0);
#undef B
    w->total_bytes = b.total;
    return 0;
}
