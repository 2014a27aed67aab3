/* config.h: DeepSeek V4 hyperparameters and tensor layout.
 *
 * Every shape of the model comes from the GGUF metadata (spec model.md §1,
 * §3.1), so test models of a few layers and small widths run through the
 * same code as Flash. dsv4_config_from_gguf reads and validates the keys
 * (internal consistency, not Flash's values); dsv4_config_write_gguf writes
 * them the way ds4 requires (u32 keys as type u32, bool as type 7, ...).
 *
 * The tensor layout (spec §4.1, §4.2) is described once, as a list of
 * dsv4_tensor_spec built from a config: the converter, mkmodel and the
 * weight binder all take names, shapes and roles from it.
 */
#ifndef MINKE_MODEL_CONFIG_H
#define MINKE_MODEL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

#define DSV4_MAX_LAYERS 256
#define DSV4_ARCH "deepseek4"
/* llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS, stored in deepseek4.expert_gating_func */
#define DSV4_GATING_SQRT_SOFTPLUS 4

typedef struct dsv4_config {
    char name[64];               /* general.name ("" if absent) */

    /* ---- read from metadata (spec §1) ---- */
    uint32_t n_layer;            /* deepseek4.block_count */
    uint32_t n_embd;             /* deepseek4.embedding_length */
    uint32_t n_vocab;            /* deepseek4.vocab_size */
    uint32_t n_head;             /* deepseek4.attention.head_count */
    uint32_t n_head_kv;          /* deepseek4.attention.head_count_kv (must be 1) */
    uint32_t head_dim;           /* deepseek4.attention.key_length */
    uint32_t value_dim;          /* deepseek4.attention.value_length (must equal head_dim) */
    uint32_t rope_dim;           /* deepseek4.rope.dimension_count (tail of each head) */
    uint32_t q_lora_rank;        /* deepseek4.attention.q_lora_rank */
    uint32_t o_lora_rank;        /* deepseek4.attention.output_lora_rank (per group) */
    uint32_t o_groups;           /* deepseek4.attention.output_group_count */
    uint32_t n_expert;           /* deepseek4.expert_count */
    uint32_t n_expert_used;      /* deepseek4.expert_used_count */
    uint32_t n_expert_shared;    /* deepseek4.expert_shared_count */
    uint32_t expert_ff;          /* deepseek4.expert_feed_forward_length */
    uint32_t n_hash_layer;       /* deepseek4.hash_layer_count (layers < this route by tid2eid) */
    int expert_weights_norm;     /* deepseek4.expert_weights_norm (bool) */
    float expert_weights_scale;  /* deepseek4.expert_weights_scale */
    float swiglu_clamp[DSV4_MAX_LAYERS]; /* deepseek4.swiglu_clamp_exp, per layer */
    uint32_t sliding_window;     /* deepseek4.attention.sliding_window (raw rows incl. current) */
    uint32_t compress_ratio[DSV4_MAX_LAYERS]; /* deepseek4.attention.compress_ratios: 0, 4 (CSA) or >4 (HCA) */
    uint32_t indexer_n_head;     /* deepseek4.attention.indexer.head_count */
    uint32_t indexer_head_dim;   /* deepseek4.attention.indexer.key_length */
    uint32_t indexer_top_k;      /* deepseek4.attention.indexer.top_k */
    uint32_t n_hc;               /* deepseek4.hyper_connection.count */
    uint32_t hc_sinkhorn_iters;  /* deepseek4.hyper_connection.sinkhorn_iterations */
    float hc_eps;                /* deepseek4.hyper_connection.epsilon */
    float rms_eps;               /* deepseek4.attention.layer_norm_rms_epsilon */
    float rope_freq_base;        /* deepseek4.rope.freq_base (sliding-only layers) */
    float compress_rope_freq_base; /* deepseek4.attention.compress_rope_freq_base (compressed layers) */
    float yarn_factor;           /* deepseek4.rope.scaling.factor */
    uint64_t yarn_orig_ctx;      /* deepseek4.rope.scaling.original_context_length (u32 or u64) */
    float yarn_beta_fast;        /* deepseek4.rope.scaling.yarn_beta_fast */
    float yarn_beta_slow;        /* deepseek4.rope.scaling.yarn_beta_slow */
    uint64_t context_length;     /* deepseek4.context_length (optional, informational; 0 if absent) */

    /* ---- derived by dsv4_config_derive (also done by from_gguf and preset) ---- */
    uint32_t nope_dim;           /* head_dim - rope_dim */
    uint32_t q_dim;              /* n_head * head_dim */
    uint32_t o_group_in;         /* n_head * head_dim / o_groups: input width of one output group */
    uint32_t o_dim;              /* o_groups * o_lora_rank */
    uint32_t hc_dim;             /* n_hc * n_embd: flattened HC state */
    uint32_t hc_mix;             /* (2 + n_hc) * n_hc: pre + post + combine matrix */
    uint32_t shexp_ff;           /* expert_ff * n_expert_shared */
    uint32_t n_csa, n_hca, n_swa; /* layer counts per attention kind */
    float attn_scale;            /* 1/sqrt(head_dim) */
    float indexer_scale;         /* 1/sqrt(indexer_head_dim * indexer_n_head) */
} dsv4_config;

enum dsv4_attn_kind { DSV4_ATTN_SLIDING = 0, DSV4_ATTN_CSA = 1, DSV4_ATTN_HCA = 2 };

static inline int dsv4_layer_kind(const dsv4_config *c, uint32_t il) {
    uint32_t r = c->compress_ratio[il];
    return r == 0 ? DSV4_ATTN_SLIDING : r == 4 ? DSV4_ATTN_CSA : DSV4_ATTN_HCA;
}
/* Compressor overlap factor: 2 for ratio 4 (two lanes), 1 otherwise. */
static inline uint32_t dsv4_layer_coff(const dsv4_config *c, uint32_t il) {
    return c->compress_ratio[il] == 4 ? 2 : 1;
}
static inline int dsv4_layer_is_hash(const dsv4_config *c, uint32_t il) {
    return il < c->n_hash_layer;
}

/* Read and validate every key; 0 on success, -1 with err naming the key and the problem. */
int dsv4_config_from_gguf(const gguf_file *f, dsv4_config *c, char *err, size_t errlen);
/* Fill the derived fields from the read ones. */
void dsv4_config_derive(dsv4_config *c);
/* Internal consistency (head_dim > rope_dim, ratios 0/4/>4, divisibility, ...); 0 ok, -1 + err. */
int dsv4_config_validate(const dsv4_config *c, char *err, size_t errlen);
/* general.architecture, general.name, general.alignment (u32 32) and every deepseek4.* key with
 * the value types ds4 requires (spec §1, §3.1). Call before declaring tensors. */
void dsv4_config_write_gguf(gguf_writer *w, const dsv4_config *c);
/* "flash" (exact Flash values), "small" (a few layers, runs quickly on CPU), "tiny" (test-sized,
 * like fixtures/oracle/tiny-a). 0 on success, -1 for an unknown name. */
int dsv4_config_preset(dsv4_config *c, const char *name);
/* 1 when every value equals what ds4 hard-codes (so ds4 would accept the metadata). */
int dsv4_config_is_flash(const dsv4_config *c);
/* One line: "43 layers, dim 4096, 64 heads x 512, 256 experts (6 used), vocab 129280, ..." */
void dsv4_config_summary(const dsv4_config *c, char *buf, size_t n);

/* ---- tensor layout ---- */
enum dsv4_role {
    DSV4_ROLE_EMBED = 0,        /* token_embd: F16 in ds4 files */
    DSV4_ROLE_NORM,             /* F32 vectors: norms, HC scale/base, sinks, exp_probs_b */
    DSV4_ROLE_HC_FN,            /* F16 hyper-connection projections */
    DSV4_ROLE_SMALL_F16,        /* compressor, indexer, router (F16 in ds4 files) */
    DSV4_ROLE_DENSE,            /* Q8_0 matrices: attention, shared experts, output head */
    DSV4_ROLE_EXPERT_GATEUP,    /* routed experts gate/up [D, F, E] */
    DSV4_ROLE_EXPERT_DOWN,      /* routed experts down [F, D, E] */
    DSV4_ROLE_TID2EID,          /* I32 hash routing table [n_expert_used, V] */
    DSV4_ROLE_COUNT
};

/* Which tensor it is (so the weight binder can switch instead of comparing names). */
enum dsv4_tensor_kind {
    /* global */
    DSV4_T_TOKEN_EMBD = 0, DSV4_T_OUTPUT_HC_BASE, DSV4_T_OUTPUT_HC_FN, DSV4_T_OUTPUT_HC_SCALE,
    DSV4_T_OUTPUT_NORM, DSV4_T_OUTPUT,
    /* per layer */
    DSV4_T_HC_ATTN_FN, DSV4_T_HC_ATTN_SCALE, DSV4_T_HC_ATTN_BASE, DSV4_T_ATTN_NORM,
    DSV4_T_ATTN_Q_A, DSV4_T_ATTN_Q_A_NORM, DSV4_T_ATTN_Q_B, DSV4_T_ATTN_KV, DSV4_T_ATTN_KV_A_NORM,
    DSV4_T_ATTN_SINKS, DSV4_T_ATTN_OUTPUT_A, DSV4_T_ATTN_OUTPUT_B,
    DSV4_T_ATTN_COMPRESSOR_APE, DSV4_T_ATTN_COMPRESSOR_KV, DSV4_T_ATTN_COMPRESSOR_GATE,
    DSV4_T_ATTN_COMPRESSOR_NORM,
    DSV4_T_INDEXER_ATTN_Q_B, DSV4_T_INDEXER_PROJ, DSV4_T_INDEXER_COMPRESSOR_APE,
    DSV4_T_INDEXER_COMPRESSOR_KV, DSV4_T_INDEXER_COMPRESSOR_GATE, DSV4_T_INDEXER_COMPRESSOR_NORM,
    DSV4_T_HC_FFN_FN, DSV4_T_HC_FFN_SCALE, DSV4_T_HC_FFN_BASE, DSV4_T_FFN_NORM,
    DSV4_T_FFN_GATE_INP, DSV4_T_EXP_PROBS_B, DSV4_T_FFN_GATE_TID2EID,
    DSV4_T_FFN_GATE_EXPS, DSV4_T_FFN_UP_EXPS, DSV4_T_FFN_DOWN_EXPS,
    DSV4_T_FFN_GATE_SHEXP, DSV4_T_FFN_UP_SHEXP, DSV4_T_FFN_DOWN_SHEXP,
    /* MTP block only (spec §4.4; names "mtp.0.<kind name>") */
    DSV4_T_MTP_HC_HEAD_BASE, DSV4_T_MTP_HC_HEAD_FN, DSV4_T_MTP_HC_HEAD_SCALE,
    DSV4_T_MTP_E_PROJ, DSV4_T_MTP_H_PROJ, DSV4_T_MTP_ENORM, DSV4_T_MTP_HNORM, DSV4_T_MTP_NORM,
    DSV4_T_COUNT
};

typedef struct dsv4_tensor_spec {
    char name[96];       /* GGUF name, e.g. "blk.3.attn_kv.weight" */
    uint32_t n_dims;     /* 1..3 */
    uint64_t ne[3];      /* ggml order (ne0 contiguous); unused dims are 1 */
    int role;            /* enum dsv4_role */
    int kind;            /* enum dsv4_tensor_kind */
    int ds4_type;        /* ggml type in ds4's q2 layout (spec §4.1-4.3) */
    int layer;           /* -1 for global tensors */
} dsv4_tensor_spec;

/* The full tensor list for c, in file order: token_embd, then blk.0 .. blk.N-1 (each in spec §4.2
 * table order, exp_probs_b only on layers >= n_hash_layer, tid2eid only below), then the output
 * head tensors. *out is malloc'd (caller frees). Returns the count (1328 for Flash) or -1. */
int dsv4_tensor_specs(const dsv4_config *c, dsv4_tensor_spec **out);
/* The MTP GGUF's 32 tensors (spec §4.4), names "mtp.0.*", layer = n_layer (the block's logical
 * index). ds4_type is the published MTP file's type: F32 for plain tensors (hc_*_fn,
 * ffn_gate_inp), Q8_0 dense, Q4_K routed experts. Returns the count or -1. */
int dsv4_mtp_tensor_specs(const dsv4_config *c, dsv4_tensor_spec **out);
/* dsv4_check_tensors for an MTP file (config from the main file). */
int dsv4_check_mtp_tensors(const gguf_file *f, const dsv4_config *c, char *err, size_t errlen);
/* Name of a tensor kind without the "blk.N." / "mtp.0." prefix, e.g. "attn_kv.weight". */
const char *dsv4_tensor_kind_name(int kind);
const char *dsv4_role_name(int role);
/* Whether minke can use a tensor of ggml type `type` in role `role`
 * (norms F32; tid2eid I32; matrices F32/F16/BF16/Q8_0/Q2_K/Q4_K/IQ2_XXS/MXFP4). */
int dsv4_role_accepts_type(int role, uint32_t type);

/* Every required tensor present with the right rank, shape and a type minke supports for its role;
 * gate and up experts of a layer share a type; each row length fits the type's block size;
 * tid2eid values < n_expert (checked over the whole table). 0 ok, -1 with err naming the tensor. */
int dsv4_check_tensors(const gguf_file *f, const dsv4_config *c, char *err, size_t errlen);
/* Stricter: the exact types ds4 binds (q2 or q4 routed experts, everything else as spec §4.1/4.2)
 * plus dsv4_config_is_flash; 0 when ds4 would load the file, -1 with the first reason. */
int dsv4_check_ds4_compat(const gguf_file *f, const dsv4_config *c, char *err, size_t errlen);

/* Tokenizer metadata: 1 when tokenizer.ggml.tokens (length n_vocab) and .merges are string arrays
 * and the 7 special tokens ds4 looks up are present; 0 when the file has no tokenizer at all
 * (fine for token-id tools); -1 with err for a broken one. */
int dsv4_check_tokenizer(const gguf_file *f, const dsv4_config *c, char *err, size_t errlen);
/* The 7 special token strings of spec §3.1 (BOS, EOS, User, Assistant, <think>, </think>, DSML). */
extern const char *const dsv4_special_tokens[7];

#endif
