/* weights.h: a DeepSeek V4 GGUF bound to plain structs.
 *
 * The dimensions come from model/config.h (dsv4_config, read from the
 * deepseek4.* metadata, never hard-coded, so tiny test models work).
 * dsv4_weights holds one dsv4_tensor per GGUF tensor the forward reads,
 * pointing into the mmapped file (the backend decides how to use the bytes).
 * Binding checks every shape against the hyperparameters and every type
 * against the quant table, and range-checks the hash-routing table, so the
 * forward never has to.
 */
#ifndef MINKE_MODEL_WEIGHTS_H
#define MINKE_MODEL_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"


typedef struct dsv4_tensor {
    const char *name;      /* NULL when absent */
    const void *data;      /* into the mmap */
    int type;              /* ggml type id */
    int n_dims;
    int64_t ne[4];
    uint64_t row_bytes;    /* bytes of one ne0 row */
    uint64_t nbytes;
} dsv4_tensor;

typedef struct dsv4_layer {
    int ratio;
    dsv4_tensor hc_attn_fn, hc_attn_scale, hc_attn_base, attn_norm;
    dsv4_tensor q_a, q_a_norm, q_b, kv, kv_norm, sinks, out_a, out_b;
    /* compressors (ratio != 0) */
    dsv4_tensor comp_ape, comp_kv, comp_gate, comp_norm;
    /* indexer (ratio == 4) */
    dsv4_tensor idx_q_b, idx_proj, idx_comp_ape, idx_comp_kv, idx_comp_gate, idx_comp_norm;
    dsv4_tensor hc_ffn_fn, hc_ffn_scale, hc_ffn_base, ffn_norm;
    dsv4_tensor gate_inp, exp_bias, tid2eid;   /* exp_bias: layers >= n_hash; tid2eid: < n_hash */
    dsv4_tensor gate_exps, up_exps, down_exps;
    dsv4_tensor gate_shexp, up_shexp, down_shexp;
} dsv4_layer;

typedef struct dsv4_weights {
    dsv4_config cfg;
    dsv4_tensor token_embd, output_hc_base, output_hc_fn, output_hc_scale, output_norm, output;
    dsv4_layer layers[DSV4_MAX_LAYERS];
    uint64_t total_bytes;  /* bytes of tensor data bound */
} dsv4_weights;

/* Read the config and bind + check every tensor; 0 or -1 with err. */
int dsv4_weights_bind(const gguf_file *f, dsv4_weights *w, char *err, size_t errlen);

/* The MTP block of a separate MTP GGUF (spec §4.4, §13.1): one decoder block
 * (sliding window only, top-k routed, so blk.ratio = 0 and no compressor,
 * indexer or tid2eid) plus its input projections and own HC head / norm.
 * token_embd and output.weight are the main model's. */
typedef struct dsv4_mtp_weights {
    dsv4_layer blk;
    dsv4_tensor hc_head_base, hc_head_fn, hc_head_scale;
    dsv4_tensor e_proj, h_proj, enorm, hnorm, norm;
    uint64_t total_bytes;
} dsv4_mtp_weights;

/* Bind the mtp.0.* tensors of f with the main model's config c (the MTP file
 * carries no hyperparameters); 0 or -1 with err naming the tensor. */
int dsv4_mtp_weights_bind(const gguf_file *f, const dsv4_config *c, dsv4_mtp_weights *w, char *err, size_t errlen);

#endif
