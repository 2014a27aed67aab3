/* config.c: DeepSeek V4 hyperparameters: read/validate from GGUF metadata,
 * write them the way ds4 requires, presets, and the tokenizer check.
 *
 * Shapes are never assumed to be Flash's: tiny test models (6 layers, dim
 * 256, ...) go through the same reader, so validation checks internal
 * consistency only. dsv4_config_is_flash separately answers "would ds4's
 * hard-coded constants accept this".
 */
#include "model/config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K(x) "deepseek4." x

/* ---- reading ---- */

static int need_u32(const gguf_file *f, const char *key, uint32_t *out, char *err, size_t errlen) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) { gguf_set_err(err, errlen, "metadata key '%s' is missing", key); return -1; }
    if (kv->type != GGUF_U32) {
        gguf_set_err(err, errlen, "metadata key '%s' has type %s (must be u32)", key, gguf_vtype_name(kv->type));
        return -1;
    }
    return gguf_get_u32(f, key, out);
}

static int need_f32(const gguf_file *f, const char *key, float *out, char *err, size_t errlen) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) { gguf_set_err(err, errlen, "metadata key '%s' is missing", key); return -1; }
    if (gguf_get_f32(f, key, out)) {
        gguf_set_err(err, errlen, "metadata key '%s' has type %s (must be f32, f64, u32 or i32)", key,
                gguf_vtype_name(kv->type));
        return -1;
    }
    if (!isfinite(*out)) { gguf_set_err(err, errlen, "metadata key '%s' is not a finite number", key); return -1; }
    return 0;
}

/* Per-layer numeric array with at least n entries of one of the allowed element types. */
static const gguf_kv *need_layer_array(const gguf_file *f, const char *key, uint32_t n, uint32_t t1, uint32_t t2,
                                       char *err, size_t errlen) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) { gguf_set_err(err, errlen, "metadata key '%s' is missing", key); return NULL; }
    if (kv->type != GGUF_ARRAY || (kv->arr_type != t1 && kv->arr_type != t2)) {
        gguf_set_err(err, errlen, "metadata key '%s' has type %s%s%s (must be an array of %s or %s)", key,
                gguf_vtype_name(kv->type), kv->type == GGUF_ARRAY ? " of " : "",
                kv->type == GGUF_ARRAY ? gguf_vtype_name(kv->arr_type) : "", gguf_vtype_name(t1), gguf_vtype_name(t2));
        return NULL;
    }
    if (kv->arr_n < n) {
        gguf_set_err(err, errlen, "metadata key '%s' has %llu entries, fewer than the %u layers", key,
                (unsigned long long)kv->arr_n, n);
        return NULL;
    }
    return kv;
}

int dsv4_config_from_gguf(const gguf_file *f, dsv4_config *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    gguf_str s;
    if (gguf_find_kv(f, "general.architecture")) {
        if (gguf_get_str(f, "general.architecture", &s)) {
            gguf_set_err(err, errlen, "metadata key 'general.architecture' is not a string");
            return -1;
        }
        if (s.len != strlen(DSV4_ARCH) || memcmp(s.ptr, DSV4_ARCH, s.len)) {
            gguf_set_err(err, errlen, "general.architecture is '%.*s', not '" DSV4_ARCH "'",
                    (int)(s.len > 40 ? 40 : s.len), s.ptr);
            return -1;
        }
    }
    if (!gguf_get_str(f, "general.name", &s)) {
        size_t n = s.len < sizeof c->name - 1 ? (size_t)s.len : sizeof c->name - 1;
        memcpy(c->name, s.ptr, n);
        c->name[n] = 0;
    }

    static const struct { const char *key; size_t off; } u32_keys[] = {
        {K("block_count"), offsetof(dsv4_config, n_layer)},
        {K("embedding_length"), offsetof(dsv4_config, n_embd)},
        {K("vocab_size"), offsetof(dsv4_config, n_vocab)},
        {K("attention.head_count"), offsetof(dsv4_config, n_head)},
        {K("attention.head_count_kv"), offsetof(dsv4_config, n_head_kv)},
        {K("attention.key_length"), offsetof(dsv4_config, head_dim)},
        {K("attention.value_length"), offsetof(dsv4_config, value_dim)},
        {K("rope.dimension_count"), offsetof(dsv4_config, rope_dim)},
        {K("attention.q_lora_rank"), offsetof(dsv4_config, q_lora_rank)},
        {K("attention.output_lora_rank"), offsetof(dsv4_config, o_lora_rank)},
        {K("attention.output_group_count"), offsetof(dsv4_config, o_groups)},
        {K("expert_count"), offsetof(dsv4_config, n_expert)},
        {K("expert_used_count"), offsetof(dsv4_config, n_expert_used)},
        {K("expert_shared_count"), offsetof(dsv4_config, n_expert_shared)},
        {K("expert_feed_forward_length"), offsetof(dsv4_config, expert_ff)},
        {K("hash_layer_count"), offsetof(dsv4_config, n_hash_layer)},
        {K("attention.sliding_window"), offsetof(dsv4_config, sliding_window)},
        {K("attention.indexer.head_count"), offsetof(dsv4_config, indexer_n_head)},
        {K("attention.indexer.key_length"), offsetof(dsv4_config, indexer_head_dim)},
        {K("attention.indexer.top_k"), offsetof(dsv4_config, indexer_top_k)},
        {K("hyper_connection.count"), offsetof(dsv4_config, n_hc)},
        {K("hyper_connection.sinkhorn_iterations"), offsetof(dsv4_config, hc_sinkhorn_iters)},
    };
    for (size_t i = 0; i < sizeof u32_keys / sizeof u32_keys[0]; i++)
        if (need_u32(f, u32_keys[i].key, (uint32_t *)((char *)c + u32_keys[i].off), err, errlen)) return -1;

    static const struct { const char *key; size_t off; } f32_keys[] = {
        {K("expert_weights_scale"), offsetof(dsv4_config, expert_weights_scale)},
        {K("hyper_connection.epsilon"), offsetof(dsv4_config, hc_eps)},
        {K("attention.layer_norm_rms_epsilon"), offsetof(dsv4_config, rms_eps)},
        {K("rope.freq_base"), offsetof(dsv4_config, rope_freq_base)},
        {K("attention.compress_rope_freq_base"), offsetof(dsv4_config, compress_rope_freq_base)},
        {K("rope.scaling.factor"), offsetof(dsv4_config, yarn_factor)},
        {K("rope.scaling.yarn_beta_fast"), offsetof(dsv4_config, yarn_beta_fast)},
        {K("rope.scaling.yarn_beta_slow"), offsetof(dsv4_config, yarn_beta_slow)},
    };
    for (size_t i = 0; i < sizeof f32_keys / sizeof f32_keys[0]; i++)
        if (need_f32(f, f32_keys[i].key, (float *)((char *)c + f32_keys[i].off), err, errlen)) return -1;

    {
        const char *key = K("expert_weights_norm");
        const gguf_kv *kv = gguf_find_kv(f, key);
        if (!kv) { gguf_set_err(err, errlen, "metadata key '%s' is missing", key); return -1; }
        if (kv->type != GGUF_BOOL) {
            gguf_set_err(err, errlen, "metadata key '%s' has type %s (must be bool)", key, gguf_vtype_name(kv->type));
            return -1;
        }
        gguf_get_bool(f, key, &c->expert_weights_norm);
    }
    {
        const char *key = K("rope.scaling.original_context_length");
        const gguf_kv *kv = gguf_find_kv(f, key);
        if (!kv) { gguf_set_err(err, errlen, "metadata key '%s' is missing", key); return -1; }
        if (gguf_get_u64(f, key, &c->yarn_orig_ctx)) {
            gguf_set_err(err, errlen, "metadata key '%s' has type %s (must be u32 or u64)", key, gguf_vtype_name(kv->type));
            return -1;
        }
    }
    {   /* informational: any integer type or absent */
        const gguf_kv *kv = gguf_find_kv(f, K("context_length"));
        if (kv && kv->type != GGUF_ARRAY && kv->type != GGUF_STRING) {
            double d = 0;
            gguf_kv one = *kv;
            one.type = GGUF_ARRAY; one.arr_type = kv->type; one.arr_n = 1;
            if (!gguf_arr_get_num(&one, 0, &d) && d >= 0 && d < 1.8e19) c->context_length = (uint64_t)d;
        }
    }
    {   /* optional (llama.cpp's key); V4 routing is sqrt(softplus) only */
        uint32_t v;
        if (!gguf_get_u32(f, K("expert_gating_func"), &v) && v != DSV4_GATING_SQRT_SOFTPLUS) {
            gguf_set_err(err, errlen, "metadata key '" K("expert_gating_func") "' is %u: only sqrt(softplus) scoring (%d) is supported",
                    v, DSV4_GATING_SQRT_SOFTPLUS);
            return -1;
        }
    }
    for (int g = 0; g < 2; g++) {
        const char *key = g ? K("expert_group_used_count") : K("expert_group_count");
        uint32_t v;
        if (!gguf_get_u32(f, key, &v) && v != 0) {
            gguf_set_err(err, errlen, "metadata key '%s' is %u: group-limited routing is not supported (must be 0)", key, v);
            return -1;
        }
    }

    if (c->n_layer < 1 || c->n_layer > DSV4_MAX_LAYERS) {
        gguf_set_err(err, errlen, "metadata key '" K("block_count") "' is %u (must be 1..%d)", c->n_layer, DSV4_MAX_LAYERS);
        return -1;
    }
    {
        const char *key = K("attention.compress_ratios");
        const gguf_kv *kv = need_layer_array(f, key, c->n_layer, GGUF_U32, GGUF_I32, err, errlen);
        if (!kv) return -1;
        for (uint32_t il = 0; il < c->n_layer; il++) {
            double d;
            gguf_arr_get_num(kv, il, &d);
            if (d < 0) { gguf_set_err(err, errlen, "metadata key '%s': layer %u has negative ratio %.0f", key, il, d); return -1; }
            c->compress_ratio[il] = (uint32_t)d;
        }
    }
    {
        const char *key = K("swiglu_clamp_exp");
        const gguf_kv *kv = need_layer_array(f, key, c->n_layer, GGUF_F32, GGUF_F64, err, errlen);
        if (!kv) return -1;
        for (uint32_t il = 0; il < c->n_layer; il++) {
            double d;
            gguf_arr_get_num(kv, il, &d);
            c->swiglu_clamp[il] = (float)d;
        }
    }
    dsv4_config_derive(c);
    return dsv4_config_validate(c, err, errlen);
}

void dsv4_config_derive(dsv4_config *c) {
    c->nope_dim = c->head_dim > c->rope_dim ? c->head_dim - c->rope_dim : 0;
    c->q_dim = c->n_head * c->head_dim;
    c->o_group_in = c->o_groups ? c->q_dim / c->o_groups : 0;
    c->o_dim = c->o_groups * c->o_lora_rank;
    c->hc_dim = c->n_hc * c->n_embd;
    c->hc_mix = (2 + c->n_hc) * c->n_hc;
    c->shexp_ff = c->expert_ff * c->n_expert_shared;
    c->n_csa = c->n_hca = c->n_swa = 0;
    for (uint32_t il = 0; il < c->n_layer && il < DSV4_MAX_LAYERS; il++) {
        int k = dsv4_layer_kind(c, il);
        if (k == DSV4_ATTN_CSA) c->n_csa++;
        else if (k == DSV4_ATTN_HCA) c->n_hca++;
        else c->n_swa++;
    }
    c->attn_scale = c->head_dim ? 1.0f / sqrtf((float)c->head_dim) : 0;
    c->indexer_scale = c->indexer_head_dim && c->indexer_n_head
        ? 1.0f / sqrtf((float)c->indexer_head_dim * (float)c->indexer_n_head) : 0;
}

static int pow2(uint32_t v) { return v && !(v & (v - 1)); }

int dsv4_config_validate(const dsv4_config *c, char *err, size_t errlen) {
#define BAD(...) do { gguf_set_err(err, errlen, __VA_ARGS__); return -1; } while (0)
    /* width limits keep every product below 2^32 and every tensor size far below 2^63 */
    const uint32_t MAXW = 1u << 20;
    if (c->n_layer < 1 || c->n_layer > DSV4_MAX_LAYERS) BAD("block_count %u must be 1..%d", c->n_layer, DSV4_MAX_LAYERS);
    if (c->n_embd < 1 || c->n_embd > MAXW) BAD("embedding_length %u must be 1..%u", c->n_embd, MAXW);
    if (c->n_vocab < 1 || c->n_vocab > (1u << 24)) BAD("vocab_size %u must be 1..%u", c->n_vocab, 1u << 24);
    if (c->n_head < 1 || c->n_head > 4096) BAD("attention.head_count %u must be 1..4096", c->n_head);
    if (c->n_head_kv != 1) BAD("attention.head_count_kv is %u; DeepSeek V4 has one shared KV head", c->n_head_kv);
    if (c->head_dim < 2 || c->head_dim > 65536) BAD("attention.key_length %u must be 2..65536", c->head_dim);
    if (c->rope_dim < 2 || c->rope_dim % 2) BAD("rope.dimension_count %u must be even and >= 2", c->rope_dim);
    if (c->rope_dim >= c->head_dim) BAD("rope.dimension_count %u must be smaller than key_length %u", c->rope_dim, c->head_dim);
    if (c->value_dim != c->head_dim) BAD("attention.value_length %u differs from key_length %u (K and V share one head)", c->value_dim, c->head_dim);
    if ((c->head_dim - c->rope_dim) % 64)
        BAD("key_length - rope.dimension_count = %u must be a multiple of 64 (FP8 KV blocks)", c->head_dim - c->rope_dim);
    if ((uint64_t)c->n_head * c->head_dim > MAXW) BAD("head_count x key_length is too large");
    if (c->q_lora_rank < 1 || c->q_lora_rank > MAXW) BAD("attention.q_lora_rank %u must be 1..%u", c->q_lora_rank, MAXW);
    if (c->o_groups < 1 || c->n_head % c->o_groups)
        BAD("attention.output_group_count %u must divide head_count %u", c->o_groups, c->n_head);
    if (c->o_lora_rank < 1 || (uint64_t)c->o_lora_rank * c->o_groups > MAXW)
        BAD("attention.output_lora_rank %u is out of range", c->o_lora_rank);
    if (c->n_expert < 1 || c->n_expert > 65536) BAD("expert_count %u must be 1..65536", c->n_expert);
    if (c->n_expert_used < 1 || c->n_expert_used > c->n_expert)
        BAD("expert_used_count %u must be 1..expert_count (%u)", c->n_expert_used, c->n_expert);
    if (c->n_expert_shared < 1 || c->n_expert_shared > 64) BAD("expert_shared_count %u must be 1..64", c->n_expert_shared);
    if (c->expert_ff < 1 || (uint64_t)c->expert_ff * c->n_expert_shared > MAXW)
        BAD("expert_feed_forward_length %u is out of range", c->expert_ff);
    if (c->n_hash_layer > c->n_layer) BAD("hash_layer_count %u exceeds block_count %u", c->n_hash_layer, c->n_layer);
    if (c->sliding_window < 1) BAD("attention.sliding_window must be >= 1");
    if (c->n_hc < 1 || c->n_hc > 64 || (uint64_t)c->n_hc * c->n_embd > (1u << 24))
        BAD("hyper_connection.count %u is out of range", c->n_hc);
    if (c->hc_sinkhorn_iters < 1) BAD("hyper_connection.sinkhorn_iterations must be >= 1");
    if (!(c->hc_eps >= 0) || !isfinite(c->hc_eps)) BAD("hyper_connection.epsilon %g must be >= 0", c->hc_eps);
    if (!(c->rms_eps >= 0) || !isfinite(c->rms_eps)) BAD("attention.layer_norm_rms_epsilon %g must be >= 0", c->rms_eps);
    if (!(c->expert_weights_scale > 0) || !isfinite(c->expert_weights_scale))
        BAD("expert_weights_scale %g must be > 0", c->expert_weights_scale);
    if (!(c->rope_freq_base > 0)) BAD("rope.freq_base %g must be > 0", c->rope_freq_base);
    if (!(c->compress_rope_freq_base > 0)) BAD("attention.compress_rope_freq_base %g must be > 0", c->compress_rope_freq_base);
    if (!(c->yarn_factor > 0)) BAD("rope.scaling.factor %g must be > 0", c->yarn_factor);
    if (c->yarn_orig_ctx < 1) BAD("rope.scaling.original_context_length must be >= 1");
    if (!(c->yarn_beta_fast > 0) || !(c->yarn_beta_slow > 0)) BAD("rope.scaling.yarn_beta_fast/slow must be > 0");
    int any_csa = 0;
    for (uint32_t il = 0; il < c->n_layer; il++) {
        uint32_t r = c->compress_ratio[il];
        if (r != 0 && r < 4) BAD("attention.compress_ratios: layer %u has ratio %u (must be 0, 4 or > 4)", il, r);
        if (r > 65536) BAD("attention.compress_ratios: layer %u has ratio %u (too large)", il, r);
        if (r == 4) any_csa = 1;
        if (!(c->swiglu_clamp[il] > 0) || !isfinite(c->swiglu_clamp[il]))
            BAD("swiglu_clamp_exp: layer %u has %g (must be > 0)", il, c->swiglu_clamp[il]);
    }
    if (any_csa) {
        if (c->indexer_n_head < 1 || c->indexer_n_head > 4096) BAD("attention.indexer.head_count %u must be 1..4096", c->indexer_n_head);
        if (!pow2(c->indexer_head_dim) || c->indexer_head_dim < 32 || c->indexer_head_dim > 4096)
            BAD("attention.indexer.key_length %u must be a power of two in 32..4096 (Hadamard rotation)", c->indexer_head_dim);
        if (c->indexer_head_dim <= c->rope_dim)
            BAD("attention.indexer.key_length %u must exceed rope.dimension_count %u", c->indexer_head_dim, c->rope_dim);
        if (c->indexer_top_k < 1) BAD("attention.indexer.top_k must be >= 1");
    }
    return 0;
#undef BAD
}

/* ---- presets ---- */

static void common_defaults(dsv4_config *c) {
    c->n_head_kv = 1;
    c->n_expert_shared = 1;
    c->expert_weights_norm = 1;
    c->expert_weights_scale = 1.5f;
    c->hc_sinkhorn_iters = 20;
    c->hc_eps = 1e-6f;
    c->rms_eps = 1e-6f;
    c->rope_freq_base = 10000.0f;
    c->compress_rope_freq_base = 160000.0f;
    c->yarn_factor = 16.0f;
    c->yarn_orig_ctx = 65536;
    c->yarn_beta_fast = 32.0f;
    c->yarn_beta_slow = 1.0f;
    c->n_hc = 4;
    if (!c->context_length) c->context_length = 1048576;
}

/* The shapes of the presets; common_defaults supplies everything else. */
static const dsv4_config PRESET_FLASH = {
    .name = "DeepSeek-V4-Flash",
    .n_layer = 43, .n_embd = 4096, .n_vocab = 129280, .n_head = 64, .head_dim = 512, .rope_dim = 64,
    .q_lora_rank = 1024, .o_lora_rank = 1024, .o_groups = 8,
    .n_expert = 256, .n_expert_used = 6, .expert_ff = 2048, .n_hash_layer = 3,
    .sliding_window = 128, .indexer_n_head = 64, .indexer_head_dim = 128, .indexer_top_k = 512,
    /* compress_ratio: two sliding layers, then CSA (4) and HCA (128) alternating; set below */
};
/* every attention kind and both routings, real vocabulary (so the real tokenizer fits),
 * widths that are multiples of 256 so every quant type can hold them */
static const dsv4_config PRESET_SMALL = {
    .name = "minke-small",
    .n_layer = 6, .n_embd = 512, .n_vocab = 129280, .n_head = 8, .head_dim = 128, .rope_dim = 64,
    .q_lora_rank = 256, .o_lora_rank = 128, .o_groups = 2,
    .n_expert = 16, .n_expert_used = 4, .expert_ff = 256, .n_hash_layer = 2,
    .sliding_window = 32, .indexer_n_head = 8, .indexer_head_dim = 128, .indexer_top_k = 16,
    .compress_ratio = {0, 0, 4, 16, 4, 16},
    .context_length = 65536,
};
/* same hyperparameters as fixtures/oracle/tiny-a/config.json */
static const dsv4_config PRESET_TINY = {
    .name = "minke-tiny",
    .n_layer = 6, .n_embd = 256, .n_vocab = 1024, .n_head = 4, .head_dim = 128, .rope_dim = 64,
    .q_lora_rank = 128, .o_lora_rank = 64, .o_groups = 2,
    .n_expert = 16, .n_expert_used = 6, .expert_ff = 256, .n_hash_layer = 3,
    .sliding_window = 8, .indexer_n_head = 32, .indexer_head_dim = 128, .indexer_top_k = 4,
    .compress_ratio = {0, 0, 4, 8, 4, 8},
};

int dsv4_config_preset(dsv4_config *c, const char *name) {
    const dsv4_config *shape = !strcmp(name, "flash") ? &PRESET_FLASH
                               : !strcmp(name, "small") ? &PRESET_SMALL
                               : !strcmp(name, "tiny")  ? &PRESET_TINY
                                                        : NULL;
    if (!shape) return -1;
    memcpy(c, shape, sizeof *c); /* padding too: configs are compared with memcmp */
    common_defaults(c);
    if (shape == &PRESET_FLASH)
        for (uint32_t il = 0; il < c->n_layer; il++) c->compress_ratio[il] = il < 2 ? 0 : il % 2 == 0 ? 4 : 128;
    c->value_dim = c->head_dim;
    for (uint32_t il = 0; il < c->n_layer; il++) c->swiglu_clamp[il] = 10.0f;
    dsv4_config_derive(c);
    return 0;
}

static int feq(float got, float want) {
    float tol = 1e-6f * (fabsf(want) > 1 ? fabsf(want) : 1);
    return fabsf(got - want) <= tol;
}

int dsv4_config_is_flash(const dsv4_config *c) {
    dsv4_config fl;
    dsv4_config_preset(&fl, "flash");
    if (c->n_layer != fl.n_layer || c->n_embd != fl.n_embd || c->n_vocab != fl.n_vocab || c->n_head != fl.n_head ||
        c->n_head_kv != fl.n_head_kv || c->head_dim != fl.head_dim || c->value_dim != fl.value_dim ||
        c->rope_dim != fl.rope_dim || c->q_lora_rank != fl.q_lora_rank || c->o_lora_rank != fl.o_lora_rank ||
        c->o_groups != fl.o_groups || c->n_expert != fl.n_expert || c->n_expert_used != fl.n_expert_used ||
        c->n_expert_shared != fl.n_expert_shared || c->expert_ff != fl.expert_ff ||
        c->n_hash_layer != fl.n_hash_layer || !c->expert_weights_norm || c->sliding_window != fl.sliding_window ||
        c->indexer_n_head != fl.indexer_n_head || c->indexer_head_dim != fl.indexer_head_dim ||
        c->indexer_top_k != fl.indexer_top_k || c->n_hc != fl.n_hc || c->hc_sinkhorn_iters != fl.hc_sinkhorn_iters ||
        c->yarn_orig_ctx != fl.yarn_orig_ctx)
        return 0;
    if (!feq(c->expert_weights_scale, fl.expert_weights_scale) || !feq(c->hc_eps, fl.hc_eps) ||
        !feq(c->rms_eps, fl.rms_eps) || !feq(c->rope_freq_base, fl.rope_freq_base) ||
        !feq(c->compress_rope_freq_base, fl.compress_rope_freq_base) || !feq(c->yarn_factor, fl.yarn_factor) ||
        !feq(c->yarn_beta_fast, fl.yarn_beta_fast) || !feq(c->yarn_beta_slow, fl.yarn_beta_slow))
        return 0;
    for (uint32_t il = 0; il < fl.n_layer; il++)
        if (c->compress_ratio[il] != fl.compress_ratio[il] || !feq(c->swiglu_clamp[il], 10.0f)) return 0;
    return 1;
}

void dsv4_config_summary(const dsv4_config *c, char *buf, size_t n) {
    snprintf(buf, n,
             "%u layers (%u sliding, %u CSA, %u HCA), dim %u, %u heads x %u (rope %u), q rank %u, "
             "%u out groups x %u, %u experts (%u used, %u shared) x %u, %u hash layers, window %u, "
             "indexer %u x %u top %u, %u HC streams, vocab %u",
             c->n_layer, c->n_swa, c->n_csa, c->n_hca, c->n_embd, c->n_head, c->head_dim, c->rope_dim,
             c->q_lora_rank, c->o_groups, c->o_lora_rank, c->n_expert, c->n_expert_used, c->n_expert_shared,
             c->expert_ff, c->n_hash_layer, c->sliding_window, c->indexer_n_head, c->indexer_head_dim,
             c->indexer_top_k, c->n_hc, c->n_vocab);
}

/* ---- writing ---- */

void dsv4_config_write_gguf(gguf_writer *w, const dsv4_config *c) {
    gguf_w_str(w, "general.architecture", DSV4_ARCH);
    gguf_w_str(w, "general.name", c->name[0] ? c->name : "DeepSeek-V4");
    gguf_w_u32(w, "general.alignment", gguf_writer_alignment(w));
    if (c->context_length) gguf_w_u32(w, K("context_length"), c->context_length > UINT32_MAX ? UINT32_MAX : (uint32_t)c->context_length);
    gguf_w_u32(w, K("block_count"), c->n_layer);
    gguf_w_u32(w, K("embedding_length"), c->n_embd);
    gguf_w_u32(w, K("vocab_size"), c->n_vocab);
    gguf_w_u32(w, K("attention.head_count"), c->n_head);
    gguf_w_u32(w, K("attention.head_count_kv"), c->n_head_kv);
    gguf_w_u32(w, K("attention.key_length"), c->head_dim);
    gguf_w_u32(w, K("attention.value_length"), c->value_dim);
    gguf_w_u32(w, K("rope.dimension_count"), c->rope_dim);
    gguf_w_u32(w, K("attention.q_lora_rank"), c->q_lora_rank);
    gguf_w_u32(w, K("attention.output_lora_rank"), c->o_lora_rank);
    gguf_w_u32(w, K("attention.output_group_count"), c->o_groups);
    gguf_w_u32(w, K("expert_count"), c->n_expert);
    gguf_w_u32(w, K("expert_used_count"), c->n_expert_used);
    gguf_w_u32(w, K("expert_shared_count"), c->n_expert_shared);
    gguf_w_u32(w, K("expert_feed_forward_length"), c->expert_ff);
    gguf_w_u32(w, K("expert_group_count"), 0);
    gguf_w_u32(w, K("expert_group_used_count"), 0);
    gguf_w_u32(w, K("hash_layer_count"), c->n_hash_layer);
    /* not read by ds4; llama.cpp's deepseek4 loader requires it (4 = sqrt(softplus) scoring) */
    gguf_w_u32(w, K("expert_gating_func"), DSV4_GATING_SQRT_SOFTPLUS);
    gguf_w_bool(w, K("expert_weights_norm"), c->expert_weights_norm);
    gguf_w_f32(w, K("expert_weights_scale"), c->expert_weights_scale);
    gguf_w_arr_f32(w, K("swiglu_clamp_exp"), c->swiglu_clamp, c->n_layer);
    gguf_w_u32(w, K("attention.sliding_window"), c->sliding_window);
    gguf_w_arr_u32(w, K("attention.compress_ratios"), c->compress_ratio, c->n_layer);
    gguf_w_u32(w, K("attention.indexer.head_count"), c->indexer_n_head);
    gguf_w_u32(w, K("attention.indexer.key_length"), c->indexer_head_dim);
    gguf_w_u32(w, K("attention.indexer.top_k"), c->indexer_top_k);
    gguf_w_u32(w, K("hyper_connection.count"), c->n_hc);
    gguf_w_u32(w, K("hyper_connection.sinkhorn_iterations"), c->hc_sinkhorn_iters);
    gguf_w_f32(w, K("hyper_connection.epsilon"), c->hc_eps);
    gguf_w_f32(w, K("attention.layer_norm_rms_epsilon"), c->rms_eps);
    gguf_w_f32(w, K("rope.freq_base"), c->rope_freq_base);
    gguf_w_f32(w, K("attention.compress_rope_freq_base"), c->compress_rope_freq_base);
    /* not read by ds4; without it llama.cpp assumes linear scaling and mis-rotates compressed rows */
    gguf_w_str(w, K("rope.scaling.type"), "yarn");
    gguf_w_f32(w, K("rope.scaling.factor"), c->yarn_factor);
    gguf_w_u32(w, K("rope.scaling.original_context_length"),
               c->yarn_orig_ctx > UINT32_MAX ? UINT32_MAX : (uint32_t)c->yarn_orig_ctx);
    gguf_w_f32(w, K("rope.scaling.yarn_beta_fast"), c->yarn_beta_fast);
    gguf_w_f32(w, K("rope.scaling.yarn_beta_slow"), c->yarn_beta_slow);
}

/* ---- tokenizer ---- */

const char *const dsv4_special_tokens[7] = {
    "<\xef\xbd\x9c" "begin\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", /* <｜begin▁of▁sentence｜> */
    "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>",   /* <｜end▁of▁sentence｜> */
    "<\xef\xbd\x9c" "User\xef\xbd\x9c>",                                         /* <｜User｜> */
    "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>",                                    /* <｜Assistant｜> */
    "<think>",
    "</think>",
    "\xef\xbd\x9c" "DSML\xef\xbd\x9c",                                           /* ｜DSML｜ */
};

int dsv4_check_tokenizer(const gguf_file *f, const dsv4_config *c, char *err, size_t errlen) {
    const gguf_kv *tok = gguf_find_kv(f, "tokenizer.ggml.tokens");
    const gguf_kv *mer = gguf_find_kv(f, "tokenizer.ggml.merges");
    if (!tok && !mer) { gguf_set_err(err, errlen, "no tokenizer"); return 0; }
    if (!tok) { gguf_set_err(err, errlen, "tokenizer.ggml.merges present but tokenizer.ggml.tokens is missing"); return -1; }
    if (tok->type != GGUF_ARRAY || tok->arr_type != GGUF_STRING) {
        gguf_set_err(err, errlen, "tokenizer.ggml.tokens is not an array of strings");
        return -1;
    }
    if (!mer) { gguf_set_err(err, errlen, "tokenizer.ggml.merges is missing"); return -1; }
    if (mer->type != GGUF_ARRAY || mer->arr_type != GGUF_STRING) {
        gguf_set_err(err, errlen, "tokenizer.ggml.merges is not an array of strings");
        return -1;
    }
    if (c && tok->arr_n != c->n_vocab) {
        gguf_set_err(err, errlen, "tokenizer.ggml.tokens has %llu entries but vocab_size is %u",
                (unsigned long long)tok->arr_n, c->n_vocab);
        return -1;
    }
    /* walk the encoded strings directly: no allocation proportional to a hostile count */
    int found[7] = {0};
    size_t slen[7];
    for (int i = 0; i < 7; i++) slen[i] = strlen(dsv4_special_tokens[i]);
    const uint8_t *p = tok->data, *end = tok->data + tok->data_len;
    for (uint64_t i = 0; i < tok->arr_n; i++) {
        uint64_t len;
        if (end - p < 8) break;
        memcpy(&len, p, 8);
        p += 8;
        if (len > (uint64_t)(end - p)) break;
        for (int k = 0; k < 7; k++)
            if (!found[k] && len == slen[k] && !memcmp(p, dsv4_special_tokens[k], len)) found[k] = 1;
        p += len;
    }
    for (int k = 0; k < 7; k++)
        if (!found[k]) {
            gguf_set_err(err, errlen, "tokenizer.ggml.tokens lacks the special token '%s'", dsv4_special_tokens[k]);
            return -1;
        }
    return 1;
}
