/* layout.c: the DeepSeek V4 tensor table (spec model.md §4.1, §4.2) built
 * from a config, and the checks that a GGUF carries it.
 *
 * One list drives the converter, mkmodel, the weight binder and `minke
 * info`, so a name or shape is written down exactly once. ds4_type records
 * the type in ds4's published q2 layout; dsv4_check_tensors accepts any type
 * minke can compute with, dsv4_check_ds4_compat only what ds4 binds.
 */
#include "model/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

static const char *const kind_names[DSV4_T_COUNT] = {
    [DSV4_T_TOKEN_EMBD] = "token_embd.weight",
    [DSV4_T_OUTPUT_HC_BASE] = "output_hc_base.weight",
    [DSV4_T_OUTPUT_HC_FN] = "output_hc_fn.weight",
    [DSV4_T_OUTPUT_HC_SCALE] = "output_hc_scale.weight",
    [DSV4_T_OUTPUT_NORM] = "output_norm.weight",
    [DSV4_T_OUTPUT] = "output.weight",
    [DSV4_T_HC_ATTN_FN] = "hc_attn_fn.weight",
    [DSV4_T_HC_ATTN_SCALE] = "hc_attn_scale.weight",
    [DSV4_T_HC_ATTN_BASE] = "hc_attn_base.weight",
    [DSV4_T_ATTN_NORM] = "attn_norm.weight",
    [DSV4_T_ATTN_Q_A] = "attn_q_a.weight",
    [DSV4_T_ATTN_Q_A_NORM] = "attn_q_a_norm.weight",
    [DSV4_T_ATTN_Q_B] = "attn_q_b.weight",
    [DSV4_T_ATTN_KV] = "attn_kv.weight",
    [DSV4_T_ATTN_KV_A_NORM] = "attn_kv_a_norm.weight",
    [DSV4_T_ATTN_SINKS] = "attn_sinks.weight",
    [DSV4_T_ATTN_OUTPUT_A] = "attn_output_a.weight",
    [DSV4_T_ATTN_OUTPUT_B] = "attn_output_b.weight",
    [DSV4_T_ATTN_COMPRESSOR_APE] = "attn_compressor_ape.weight",
    [DSV4_T_ATTN_COMPRESSOR_KV] = "attn_compressor_kv.weight",
    [DSV4_T_ATTN_COMPRESSOR_GATE] = "attn_compressor_gate.weight",
    [DSV4_T_ATTN_COMPRESSOR_NORM] = "attn_compressor_norm.weight",
    [DSV4_T_INDEXER_ATTN_Q_B] = "indexer.attn_q_b.weight",
    [DSV4_T_INDEXER_PROJ] = "indexer.proj.weight",
    [DSV4_T_INDEXER_COMPRESSOR_APE] = "indexer_compressor_ape.weight",
    [DSV4_T_INDEXER_COMPRESSOR_KV] = "indexer_compressor_kv.weight",
    [DSV4_T_INDEXER_COMPRESSOR_GATE] = "indexer_compressor_gate.weight",
    [DSV4_T_INDEXER_COMPRESSOR_NORM] = "indexer_compressor_norm.weight",
    [DSV4_T_HC_FFN_FN] = "hc_ffn_fn.weight",
    [DSV4_T_HC_FFN_SCALE] = "hc_ffn_scale.weight",
    [DSV4_T_HC_FFN_BASE] = "hc_ffn_base.weight",
    [DSV4_T_FFN_NORM] = "ffn_norm.weight",
    [DSV4_T_FFN_GATE_INP] = "ffn_gate_inp.weight",
    [DSV4_T_EXP_PROBS_B] = "exp_probs_b.bias",
    [DSV4_T_FFN_GATE_TID2EID] = "ffn_gate_tid2eid.weight",
    [DSV4_T_FFN_GATE_EXPS] = "ffn_gate_exps.weight",
    [DSV4_T_FFN_UP_EXPS] = "ffn_up_exps.weight",
    [DSV4_T_FFN_DOWN_EXPS] = "ffn_down_exps.weight",
    [DSV4_T_FFN_GATE_SHEXP] = "ffn_gate_shexp.weight",
    [DSV4_T_FFN_UP_SHEXP] = "ffn_up_shexp.weight",
    [DSV4_T_FFN_DOWN_SHEXP] = "ffn_down_shexp.weight",
    [DSV4_T_MTP_HC_HEAD_BASE] = "hc_head_base.weight",
    [DSV4_T_MTP_HC_HEAD_FN] = "hc_head_fn.weight",
    [DSV4_T_MTP_HC_HEAD_SCALE] = "hc_head_scale.weight",
    [DSV4_T_MTP_E_PROJ] = "e_proj.weight",
    [DSV4_T_MTP_H_PROJ] = "h_proj.weight",
    [DSV4_T_MTP_ENORM] = "enorm.weight",
    [DSV4_T_MTP_HNORM] = "hnorm.weight",
    [DSV4_T_MTP_NORM] = "norm.weight",
};

const char *dsv4_tensor_kind_name(int kind) {
    return kind >= 0 && kind < DSV4_T_COUNT ? kind_names[kind] : "?";
}

const char *dsv4_role_name(int role) {
    static const char *const names[DSV4_ROLE_COUNT] = {"embed", "norm", "hc_fn", "small_f16", "dense",
                                                       "expert_gateup", "expert_down", "tid2eid"};
    return role >= 0 && role < DSV4_ROLE_COUNT ? names[role] : "?";
}

static int role_ds4_type(int role) {
    switch (role) {
    case DSV4_ROLE_EMBED: return GGML_TYPE_F16;
    case DSV4_ROLE_NORM: return GGML_TYPE_F32;
    case DSV4_ROLE_HC_FN: return GGML_TYPE_F16;
    case DSV4_ROLE_SMALL_F16: return GGML_TYPE_F16;
    case DSV4_ROLE_DENSE: return GGML_TYPE_Q8_0;
    case DSV4_ROLE_EXPERT_GATEUP: return GGML_TYPE_IQ2_XXS;
    case DSV4_ROLE_EXPERT_DOWN: return GGML_TYPE_Q2_K;
    case DSV4_ROLE_TID2EID: return GGML_TYPE_I32;
    default: return -1;
    }
}

int dsv4_role_accepts_type(int role, uint32_t type) {
    if (role == DSV4_ROLE_NORM) return type == GGML_TYPE_F32;
    if (role == DSV4_ROLE_TID2EID) return type == GGML_TYPE_I32;
    if (role < 0 || role >= DSV4_ROLE_COUNT) return 0;
    switch (type) {
    case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q2_K: case GGML_TYPE_Q4_K: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_MXFP4:
        return 1;
    default:
        return 0;
    }
}

typedef struct spec_list {
    dsv4_tensor_spec *v;
    int n, cap;
    int failed;
    int mtp;      /* names "mtp.0.*", MTP file types */
} spec_list;

static void add(spec_list *l, int layer, int kind, int role, uint32_t n_dims, uint64_t ne0, uint64_t ne1, uint64_t ne2) {
    if (l->failed) return;
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 1024;
        dsv4_tensor_spec *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) { l->failed = 1; return; }
        l->v = v;
        l->cap = cap;
    }
    dsv4_tensor_spec *s = &l->v[l->n++];
    memset(s, 0, sizeof *s);
    if (l->mtp) snprintf(s->name, sizeof s->name, "mtp.0.%s", kind_names[kind]);
    else if (layer < 0) snprintf(s->name, sizeof s->name, "%s", kind_names[kind]);
    else snprintf(s->name, sizeof s->name, "blk.%d.%s", layer, kind_names[kind]);
    s->n_dims = n_dims;
    s->ne[0] = ne0;
    s->ne[1] = n_dims > 1 ? ne1 : 1;
    s->ne[2] = n_dims > 2 ? ne2 : 1;
    s->role = role;
    s->kind = kind;
    s->ds4_type = role_ds4_type(role);
    if (l->mtp) {
        if (role == DSV4_ROLE_HC_FN || role == DSV4_ROLE_SMALL_F16) s->ds4_type = GGML_TYPE_F32;
        if (role == DSV4_ROLE_EXPERT_GATEUP || role == DSV4_ROLE_EXPERT_DOWN) s->ds4_type = GGML_TYPE_Q4_K;
    }
    s->layer = layer;
}

/* The attention and FFN tensors of a sliding-window, top-k routed block (shared by the
 * MTP block, which has neither compressor nor hash routing). */
static void add_mtp_block(spec_list *l, const dsv4_config *c, int L) {
    const uint64_t D = c->n_embd, E = c->n_expert, F = c->expert_ff;
    add(l, L, DSV4_T_HC_ATTN_FN, DSV4_ROLE_HC_FN, 2, c->hc_dim, c->hc_mix, 1);
    add(l, L, DSV4_T_HC_ATTN_SCALE, DSV4_ROLE_NORM, 1, 3, 1, 1);
    add(l, L, DSV4_T_HC_ATTN_BASE, DSV4_ROLE_NORM, 1, c->hc_mix, 1, 1);
    add(l, L, DSV4_T_ATTN_NORM, DSV4_ROLE_NORM, 1, D, 1, 1);
    add(l, L, DSV4_T_ATTN_Q_A, DSV4_ROLE_DENSE, 2, D, c->q_lora_rank, 1);
    add(l, L, DSV4_T_ATTN_Q_A_NORM, DSV4_ROLE_NORM, 1, c->q_lora_rank, 1, 1);
    add(l, L, DSV4_T_ATTN_Q_B, DSV4_ROLE_DENSE, 2, c->q_lora_rank, c->q_dim, 1);
    add(l, L, DSV4_T_ATTN_KV, DSV4_ROLE_DENSE, 2, D, c->head_dim, 1);
    add(l, L, DSV4_T_ATTN_KV_A_NORM, DSV4_ROLE_NORM, 1, c->head_dim, 1, 1);
    add(l, L, DSV4_T_ATTN_SINKS, DSV4_ROLE_NORM, 1, c->n_head, 1, 1);
    add(l, L, DSV4_T_ATTN_OUTPUT_A, DSV4_ROLE_DENSE, 2, c->o_group_in, c->o_dim, 1);
    add(l, L, DSV4_T_ATTN_OUTPUT_B, DSV4_ROLE_DENSE, 2, c->o_dim, D, 1);
    add(l, L, DSV4_T_HC_FFN_FN, DSV4_ROLE_HC_FN, 2, c->hc_dim, c->hc_mix, 1);
    add(l, L, DSV4_T_HC_FFN_SCALE, DSV4_ROLE_NORM, 1, 3, 1, 1);
    add(l, L, DSV4_T_HC_FFN_BASE, DSV4_ROLE_NORM, 1, c->hc_mix, 1, 1);
    add(l, L, DSV4_T_FFN_NORM, DSV4_ROLE_NORM, 1, D, 1, 1);
    add(l, L, DSV4_T_FFN_GATE_INP, DSV4_ROLE_SMALL_F16, 2, D, E, 1);
    add(l, L, DSV4_T_EXP_PROBS_B, DSV4_ROLE_NORM, 1, E, 1, 1);
    add(l, L, DSV4_T_FFN_GATE_EXPS, DSV4_ROLE_EXPERT_GATEUP, 3, D, F, E);
    add(l, L, DSV4_T_FFN_UP_EXPS, DSV4_ROLE_EXPERT_GATEUP, 3, D, F, E);
    add(l, L, DSV4_T_FFN_DOWN_EXPS, DSV4_ROLE_EXPERT_DOWN, 3, F, D, E);
    add(l, L, DSV4_T_FFN_GATE_SHEXP, DSV4_ROLE_DENSE, 2, D, c->shexp_ff, 1);
    add(l, L, DSV4_T_FFN_UP_SHEXP, DSV4_ROLE_DENSE, 2, D, c->shexp_ff, 1);
    add(l, L, DSV4_T_FFN_DOWN_SHEXP, DSV4_ROLE_DENSE, 2, c->shexp_ff, D, 1);
}

int dsv4_mtp_tensor_specs(const dsv4_config *c, dsv4_tensor_spec **out) {
    *out = NULL;
    if (dsv4_config_validate(c, NULL, 0)) return -1;
    spec_list l = {0};
    l.mtp = 1;
    const uint64_t D = c->n_embd;
    int L = (int)c->n_layer;
    add(&l, L, DSV4_T_MTP_HC_HEAD_BASE, DSV4_ROLE_NORM, 1, c->n_hc, 1, 1);
    add(&l, L, DSV4_T_MTP_HC_HEAD_FN, DSV4_ROLE_HC_FN, 2, c->hc_dim, c->n_hc, 1);
    add(&l, L, DSV4_T_MTP_HC_HEAD_SCALE, DSV4_ROLE_NORM, 1, 1, 1, 1);
    add(&l, L, DSV4_T_MTP_E_PROJ, DSV4_ROLE_DENSE, 2, D, D, 1);
    add(&l, L, DSV4_T_MTP_H_PROJ, DSV4_ROLE_DENSE, 2, D, D, 1);
    add(&l, L, DSV4_T_MTP_ENORM, DSV4_ROLE_NORM, 1, D, 1, 1);
    add(&l, L, DSV4_T_MTP_HNORM, DSV4_ROLE_NORM, 1, D, 1, 1);
    add(&l, L, DSV4_T_MTP_NORM, DSV4_ROLE_NORM, 1, D, 1, 1);
    add_mtp_block(&l, c, L);
    if (l.failed) { free(l.v); return -1; }
    *out = l.v;
    return l.n;
}

int dsv4_tensor_specs(const dsv4_config *c, dsv4_tensor_spec **out) {
    *out = NULL;
    if (dsv4_config_validate(c, NULL, 0)) return -1;
    spec_list l = {0};
    const uint64_t D = c->n_embd, V = c->n_vocab, E = c->n_expert, F = c->expert_ff;
    add(&l, -1, DSV4_T_TOKEN_EMBD, DSV4_ROLE_EMBED, 2, D, V, 1);
    for (uint32_t il = 0; il < c->n_layer; il++) {
        int L = (int)il;
        uint32_t ratio = c->compress_ratio[il];
        uint64_t coff = dsv4_layer_coff(c, il);
        add(&l, L, DSV4_T_HC_ATTN_FN, DSV4_ROLE_HC_FN, 2, c->hc_dim, c->hc_mix, 1);
        add(&l, L, DSV4_T_HC_ATTN_SCALE, DSV4_ROLE_NORM, 1, 3, 1, 1);
        add(&l, L, DSV4_T_HC_ATTN_BASE, DSV4_ROLE_NORM, 1, c->hc_mix, 1, 1);
        add(&l, L, DSV4_T_ATTN_NORM, DSV4_ROLE_NORM, 1, D, 1, 1);
        add(&l, L, DSV4_T_ATTN_Q_A, DSV4_ROLE_DENSE, 2, D, c->q_lora_rank, 1);
        add(&l, L, DSV4_T_ATTN_Q_A_NORM, DSV4_ROLE_NORM, 1, c->q_lora_rank, 1, 1);
        add(&l, L, DSV4_T_ATTN_Q_B, DSV4_ROLE_DENSE, 2, c->q_lora_rank, c->q_dim, 1);
        add(&l, L, DSV4_T_ATTN_KV, DSV4_ROLE_DENSE, 2, D, c->head_dim, 1);
        add(&l, L, DSV4_T_ATTN_KV_A_NORM, DSV4_ROLE_NORM, 1, c->head_dim, 1, 1);
        add(&l, L, DSV4_T_ATTN_SINKS, DSV4_ROLE_NORM, 1, c->n_head, 1, 1);
        add(&l, L, DSV4_T_ATTN_OUTPUT_A, DSV4_ROLE_DENSE, 2, c->o_group_in, c->o_dim, 1);
        add(&l, L, DSV4_T_ATTN_OUTPUT_B, DSV4_ROLE_DENSE, 2, c->o_dim, D, 1);
        if (ratio != 0) {
            add(&l, L, DSV4_T_ATTN_COMPRESSOR_APE, DSV4_ROLE_SMALL_F16, 2, coff * c->head_dim, ratio, 1);
            add(&l, L, DSV4_T_ATTN_COMPRESSOR_KV, DSV4_ROLE_SMALL_F16, 2, D, coff * c->head_dim, 1);
            add(&l, L, DSV4_T_ATTN_COMPRESSOR_GATE, DSV4_ROLE_SMALL_F16, 2, D, coff * c->head_dim, 1);
            add(&l, L, DSV4_T_ATTN_COMPRESSOR_NORM, DSV4_ROLE_NORM, 1, c->head_dim, 1, 1);
        }
        if (ratio == 4) {
            uint64_t ID = c->indexer_head_dim, IH = c->indexer_n_head;
            add(&l, L, DSV4_T_INDEXER_ATTN_Q_B, DSV4_ROLE_SMALL_F16, 2, c->q_lora_rank, IH * ID, 1);
            add(&l, L, DSV4_T_INDEXER_PROJ, DSV4_ROLE_SMALL_F16, 2, D, IH, 1);
            add(&l, L, DSV4_T_INDEXER_COMPRESSOR_APE, DSV4_ROLE_SMALL_F16, 2, 2 * ID, 4, 1);
            add(&l, L, DSV4_T_INDEXER_COMPRESSOR_KV, DSV4_ROLE_SMALL_F16, 2, D, 2 * ID, 1);
            add(&l, L, DSV4_T_INDEXER_COMPRESSOR_GATE, DSV4_ROLE_SMALL_F16, 2, D, 2 * ID, 1);
            add(&l, L, DSV4_T_INDEXER_COMPRESSOR_NORM, DSV4_ROLE_NORM, 1, ID, 1, 1);
        }
        add(&l, L, DSV4_T_HC_FFN_FN, DSV4_ROLE_HC_FN, 2, c->hc_dim, c->hc_mix, 1);
        add(&l, L, DSV4_T_HC_FFN_SCALE, DSV4_ROLE_NORM, 1, 3, 1, 1);
        add(&l, L, DSV4_T_HC_FFN_BASE, DSV4_ROLE_NORM, 1, c->hc_mix, 1, 1);
        add(&l, L, DSV4_T_FFN_NORM, DSV4_ROLE_NORM, 1, D, 1, 1);
        add(&l, L, DSV4_T_FFN_GATE_INP, DSV4_ROLE_SMALL_F16, 2, D, E, 1);
        if (dsv4_layer_is_hash(c, il))
            add(&l, L, DSV4_T_FFN_GATE_TID2EID, DSV4_ROLE_TID2EID, 2, c->n_expert_used, V, 1);
        else
            add(&l, L, DSV4_T_EXP_PROBS_B, DSV4_ROLE_NORM, 1, E, 1, 1);
        add(&l, L, DSV4_T_FFN_GATE_EXPS, DSV4_ROLE_EXPERT_GATEUP, 3, D, F, E);
        add(&l, L, DSV4_T_FFN_UP_EXPS, DSV4_ROLE_EXPERT_GATEUP, 3, D, F, E);
        add(&l, L, DSV4_T_FFN_DOWN_EXPS, DSV4_ROLE_EXPERT_DOWN, 3, F, D, E);
        add(&l, L, DSV4_T_FFN_GATE_SHEXP, DSV4_ROLE_DENSE, 2, D, c->shexp_ff, 1);
        add(&l, L, DSV4_T_FFN_UP_SHEXP, DSV4_ROLE_DENSE, 2, D, c->shexp_ff, 1);
        add(&l, L, DSV4_T_FFN_DOWN_SHEXP, DSV4_ROLE_DENSE, 2, c->shexp_ff, D, 1);
    }
    add(&l, -1, DSV4_T_OUTPUT_HC_BASE, DSV4_ROLE_NORM, 1, c->n_hc, 1, 1);
    add(&l, -1, DSV4_T_OUTPUT_HC_FN, DSV4_ROLE_HC_FN, 2, c->hc_dim, c->n_hc, 1);
    add(&l, -1, DSV4_T_OUTPUT_HC_SCALE, DSV4_ROLE_NORM, 1, 1, 1, 1);
    add(&l, -1, DSV4_T_OUTPUT_NORM, DSV4_ROLE_NORM, 1, D, 1, 1);
    add(&l, -1, DSV4_T_OUTPUT, DSV4_ROLE_DENSE, 2, D, V, 1);
    if (l.failed) { free(l.v); return -1; }
    *out = l.v;
    return l.n;
}

static void shape_str(const uint64_t *ne, uint32_t n_dims, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (uint32_t d = 0; d < n_dims && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%llu", d ? ", " : "", (unsigned long long)ne[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* Shape equality ignoring trailing unit dimensions ([3] == [3, 1]). */
static int same_shape(const gguf_tensor *t, const dsv4_tensor_spec *s) {
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t want = d < 3 ? s->ne[d] : 1;
        uint64_t got = d < t->n_dims ? t->ne[d] : 1;
        if (want != got) return 0;
    }
    return 1;
}

static int check_tid2eid(const gguf_tensor *t, const dsv4_config *c, char *err, size_t errlen) {
    uint64_t n = gguf_tensor_nel(t);
    const uint8_t *p = t->data;
    for (uint64_t i = 0; i < n; i++) {
        int32_t v;
        memcpy(&v, p + 4 * i, 4);
        if (v < 0 || (uint32_t)v >= c->n_expert) {
            gguf_set_err(err, errlen, "tensor '%s': token %llu routes to expert %d (must be 0..%u)", t->cname,
                    (unsigned long long)(i / c->n_expert_used), v, c->n_expert - 1);
            return -1;
        }
    }
    return 0;
}

static int check_tensors(const gguf_file *f, const dsv4_config *c, int strict_ds4, int mtp, char *err, size_t errlen) {
    dsv4_tensor_spec *specs;
    int n = mtp ? dsv4_mtp_tensor_specs(c, &specs) : dsv4_tensor_specs(c, &specs);
    if (n < 0) {
        char e[200];
        if (dsv4_config_validate(c, e, sizeof e)) gguf_set_err(err, errlen, "invalid config: %s", e);
        else gguf_set_err(err, errlen, "out of memory");
        return -1;
    }
    int rc = -1;
    uint32_t gate_type = 0;
    const char *gate_name = "ffn_gate_exps.weight";
    for (int i = 0; i < n; i++) {
        const dsv4_tensor_spec *s = &specs[i];
        const gguf_tensor *t = gguf_find_tensor(f, s->name);
        char want[96], got[96];
        if (!t) { gguf_set_err(err, errlen, "missing tensor '%s'", s->name); goto out; }
        shape_str(s->ne, s->n_dims, want, sizeof want);
        shape_str(t->ne, t->n_dims, got, sizeof got);
        if (!same_shape(t, s) || (strict_ds4 && t->n_dims != s->n_dims)) {
            gguf_set_err(err, errlen, "tensor '%s' has shape %s, expected %s", s->name, got, want);
            goto out;
        }
        if (strict_ds4) {
            int ok;
            if (s->role == DSV4_ROLE_EXPERT_GATEUP || s->role == DSV4_ROLE_EXPERT_DOWN)
                ok = t->type == GGML_TYPE_IQ2_XXS || t->type == GGML_TYPE_Q2_K || t->type == GGML_TYPE_Q4_K;
            else
                ok = t->type == (uint32_t)s->ds4_type;
            if (!ok) {
                gguf_set_err(err, errlen, "tensor '%s' has type %s; ds4 requires %s", s->name, quant_name((int)t->type),
                        s->role == DSV4_ROLE_EXPERT_GATEUP || s->role == DSV4_ROLE_EXPERT_DOWN
                            ? "IQ2_XXS, Q2_K or Q4_K" : quant_name(s->ds4_type));
                goto out;
            }
        } else if (!dsv4_role_accepts_type(s->role, t->type)) {
            gguf_set_err(err, errlen, "tensor '%s' has type %s, which minke does not support for %s tensors", s->name,
                    quant_name((int)t->type), dsv4_role_name(s->role));
            goto out;
        }
        if (!t->data || !quant_get((int)t->type)) {
            gguf_set_err(err, errlen, "tensor '%s' has type %s, unknown to this build", s->name, quant_name((int)t->type));
            goto out;
        }
        if (quant_row_bytes((int)t->type, (int64_t)t->ne[0]) == 0) {
            gguf_set_err(err, errlen, "tensor '%s': row of %llu elements is not a multiple of %s's block size", s->name,
                    (unsigned long long)t->ne[0], quant_name((int)t->type));
            goto out;
        }
        if (s->kind == DSV4_T_FFN_GATE_EXPS) { gate_type = t->type; gate_name = s->name; }
        if (s->kind == DSV4_T_FFN_UP_EXPS && t->type != gate_type) {
            gguf_set_err(err, errlen, "tensor '%s' has type %s but %s has %s (gate and up must match)",
                    s->name, quant_name((int)t->type), gate_name, quant_name((int)gate_type));
            goto out;
        }
        if (s->kind == DSV4_T_FFN_GATE_TID2EID && check_tid2eid(t, c, err, errlen)) goto out;
    }
    rc = 0;
out:
    free(specs);
    return rc;
}

int dsv4_check_tensors(const gguf_file *f, const dsv4_config *c, char *err, size_t errlen) {
    return check_tensors(f, c, 0, 0, err, errlen);
}

int dsv4_check_ds4_compat(const gguf_file *f, const dsv4_config *c, char *err, size_t errlen) {
    if (!dsv4_config_is_flash(c)) {
        gguf_set_err(err, errlen, "hyperparameters differ from DeepSeek V4 Flash (ds4 hard-codes them)");
        return -1;
    }
    if (dsv4_check_tokenizer(f, c, err, errlen) != 1) {
        if (!gguf_find_kv(f, "tokenizer.ggml.tokens")) gguf_set_err(err, errlen, "no tokenizer (ds4 requires one)");
        return -1;
    }
    return check_tensors(f, c, 1, 0, err, errlen);
}

int dsv4_check_mtp_tensors(const gguf_file *f, const dsv4_config *c, char *err, size_t errlen) {
    return check_tensors(f, c, 0, 1, err, errlen);
}
