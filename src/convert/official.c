/* official.c: official DeepSeek V4 checkpoint names, dtypes and decoding
 * (spec model.md §4.5), and config.json -> dsv4_config (see official.h).
 */
#include "convert/official.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

/* ------------------------------------------------------------------------------------------ */
/* names */

static const char *official_suffix(int kind) {
    switch (kind) {
    case DSV4_T_TOKEN_EMBD: return "embed.weight";
    case DSV4_T_OUTPUT_HC_BASE: return "hc_head_base";
    case DSV4_T_OUTPUT_HC_FN: return "hc_head_fn";
    case DSV4_T_OUTPUT_HC_SCALE: return "hc_head_scale";
    case DSV4_T_OUTPUT_NORM: return "norm.weight";
    case DSV4_T_OUTPUT: return "head.weight";
    case DSV4_T_HC_ATTN_FN: return "hc_attn_fn";
    case DSV4_T_HC_ATTN_SCALE: return "hc_attn_scale";
    case DSV4_T_HC_ATTN_BASE: return "hc_attn_base";
    case DSV4_T_ATTN_NORM: return "attn_norm.weight";
    case DSV4_T_ATTN_Q_A: return "attn.wq_a.weight";
    case DSV4_T_ATTN_Q_A_NORM: return "attn.q_norm.weight";
    case DSV4_T_ATTN_Q_B: return "attn.wq_b.weight";
    case DSV4_T_ATTN_KV: return "attn.wkv.weight";
    case DSV4_T_ATTN_KV_A_NORM: return "attn.kv_norm.weight";
    case DSV4_T_ATTN_SINKS: return "attn.attn_sink";
    case DSV4_T_ATTN_OUTPUT_A: return "attn.wo_a.weight";
    case DSV4_T_ATTN_OUTPUT_B: return "attn.wo_b.weight";
    case DSV4_T_ATTN_COMPRESSOR_APE: return "attn.compressor.ape";
    case DSV4_T_ATTN_COMPRESSOR_KV: return "attn.compressor.wkv.weight";
    case DSV4_T_ATTN_COMPRESSOR_GATE: return "attn.compressor.wgate.weight";
    case DSV4_T_ATTN_COMPRESSOR_NORM: return "attn.compressor.norm.weight";
    case DSV4_T_INDEXER_ATTN_Q_B: return "attn.indexer.wq_b.weight";
    case DSV4_T_INDEXER_PROJ: return "attn.indexer.weights_proj.weight";
    case DSV4_T_INDEXER_COMPRESSOR_APE: return "attn.indexer.compressor.ape";
    case DSV4_T_INDEXER_COMPRESSOR_KV: return "attn.indexer.compressor.wkv.weight";
    case DSV4_T_INDEXER_COMPRESSOR_GATE: return "attn.indexer.compressor.wgate.weight";
    case DSV4_T_INDEXER_COMPRESSOR_NORM: return "attn.indexer.compressor.norm.weight";
    case DSV4_T_HC_FFN_FN: return "hc_ffn_fn";
    case DSV4_T_HC_FFN_SCALE: return "hc_ffn_scale";
    case DSV4_T_HC_FFN_BASE: return "hc_ffn_base";
    case DSV4_T_FFN_NORM: return "ffn_norm.weight";
    case DSV4_T_FFN_GATE_INP: return "ffn.gate.weight";
    case DSV4_T_EXP_PROBS_B: return "ffn.gate.bias";
    case DSV4_T_FFN_GATE_TID2EID: return "ffn.gate.tid2eid";
    case DSV4_T_FFN_GATE_EXPS: return "w1.weight";
    case DSV4_T_FFN_UP_EXPS: return "w3.weight";
    case DSV4_T_FFN_DOWN_EXPS: return "w2.weight";
    case DSV4_T_FFN_GATE_SHEXP: return "ffn.shared_experts.w1.weight";
    case DSV4_T_FFN_UP_SHEXP: return "ffn.shared_experts.w3.weight";
    case DSV4_T_FFN_DOWN_SHEXP: return "ffn.shared_experts.w2.weight";
    case DSV4_T_MTP_HC_HEAD_BASE: return "hc_head_base";
    case DSV4_T_MTP_HC_HEAD_FN: return "hc_head_fn";
    case DSV4_T_MTP_HC_HEAD_SCALE: return "hc_head_scale";
    case DSV4_T_MTP_E_PROJ: return "e_proj.weight";
    case DSV4_T_MTP_H_PROJ: return "h_proj.weight";
    case DSV4_T_MTP_ENORM: return "enorm.weight";
    case DSV4_T_MTP_HNORM: return "hnorm.weight";
    case DSV4_T_MTP_NORM: return "norm.weight";
    default: return NULL;
    }
}

static int is_expert_kind(int kind) {
    return kind == DSV4_T_FFN_GATE_EXPS || kind == DSV4_T_FFN_UP_EXPS || kind == DSV4_T_FFN_DOWN_EXPS;
}

int official_name(const dsv4_tensor_spec *s, int expert, char *buf, size_t n) {
    const char *suf = official_suffix(s->kind);
    if (!suf) return -1;
    int k;
    /* the MTP block: official "mtp.0.<name inside a layer>" */
    int mtp = !strncmp(s->name, "mtp.", 4);
    if (mtp && is_expert_kind(s->kind)) k = snprintf(buf, n, "mtp.0.ffn.experts.%d.%s", expert, suf);
    else if (mtp) k = snprintf(buf, n, "mtp.0.%s", suf);
    else if (s->layer < 0) k = snprintf(buf, n, "%s", suf);
    else if (is_expert_kind(s->kind)) k = snprintf(buf, n, "layers.%d.ffn.experts.%d.%s", s->layer, expert, suf);
    else k = snprintf(buf, n, "layers.%d.%s", s->layer, suf);
    return k > 0 && (size_t)k < n ? 0 : -1;
}

/* ------------------------------------------------------------------------------------------ */
/* resolve */

static void shape_str(const st_tensor *t, char *b, size_t n) {
    size_t o = 0;
    o += (size_t)snprintf(b + o, n - o, "[");
    for (int d = 0; d < t->n_dims && o < n; d++)
        o += (size_t)snprintf(b + o, n - o, "%s%llu", d ? ", " : "", (unsigned long long)t->shape[d]);
    if (o < n) snprintf(b + o, n - o, "]");
}

static int shape_is(const st_tensor *t, int nd, uint64_t d0, uint64_t d1) {
    if (nd == 1) return t->n_dims == 1 && t->shape[0] == d0;
    return t->n_dims == 2 && t->shape[0] == d0 && t->shape[1] == d1;
}

static int resolve_part(const st_set *st, const dsv4_tensor_spec *s, const char *name, official_part *p,
                        char *err, size_t errlen) {
    const st_tensor *w = st_find(st, name);
    char sh[96];
    if (!w) {
        snprintf(err, errlen, "checkpoint lacks tensor '%s' (needed for %s)", name, s->name);
        return -1;
    }
    p->w = w;
    p->scale = NULL;
    /* rows/cols of the official 2-D matrix (or the 1-D vector) for this part */
    uint64_t cols = s->ne[0], rows = s->n_dims >= 2 ? s->ne[1] : 1;
    int nd = s->n_dims >= 2 ? 2 : 1;
    if (s->kind == DSV4_T_FFN_GATE_TID2EID) {
        if (w->dtype != ST_I64 && w->dtype != ST_I32) {
            snprintf(err, errlen, "tensor '%s' has dtype %s; expected I64 or I32", name, w->dtype_name);
            return -1;
        }
        if (!shape_is(w, 2, rows, cols)) {
            shape_str(w, sh, sizeof sh);
            snprintf(err, errlen, "tensor '%s' has shape %s, expected [%llu, %llu] (from config.json)", name, sh,
                     (unsigned long long)rows, (unsigned long long)cols);
            return -1;
        }
        p->fmt = OFF_INT;
        return 0;
    }
    char sname[512];
    snprintf(sname, sizeof sname, "%.*s.scale", (int)(strlen(name) - (strstr(name, ".weight") ? 7 : 0)), name);
    switch (w->dtype) {
    case ST_F32: case ST_F16: case ST_BF16: case ST_F64:
        p->fmt = OFF_PLAIN;
        if (!(nd == 1 ? shape_is(w, 1, cols, 0) : shape_is(w, 2, rows, cols))) {
            shape_str(w, sh, sizeof sh);
            if (nd == 1)
                snprintf(err, errlen, "tensor '%s' has shape %s, expected [%llu] (from config.json)", name, sh,
                         (unsigned long long)cols);
            else
                snprintf(err, errlen, "tensor '%s' has shape %s, expected [%llu, %llu] (from config.json)", name, sh,
                         (unsigned long long)rows, (unsigned long long)cols);
            return -1;
        }
        return 0;
    case ST_F8_E4M3: {
        p->fmt = OFF_FP8_BLOCK;
        if (!shape_is(w, 2, rows, cols) || nd != 2) {
            shape_str(w, sh, sizeof sh);
            snprintf(err, errlen, "tensor '%s' has shape %s, expected [%llu, %llu] (from config.json)", name, sh,
                     (unsigned long long)rows, (unsigned long long)cols);
            return -1;
        }
        const st_tensor *sc = st_find(st, sname);
        if (!sc) {
            /* Hugging Face style FP8 checkpoints name the block scales weight_scale_inv */
            char alt[600];
            snprintf(alt, sizeof alt, "%.500s_scale_inv", name);
            sc = st_find(st, alt);
        }
        if (!sc) {
            snprintf(err, errlen, "checkpoint lacks tensor '%s' (block scales of FP8 tensor '%s')", sname, name);
            return -1;
        }
        if (sc->dtype != ST_F8_E8M0 && sc->dtype != ST_F32 && sc->dtype != ST_BF16) {
            snprintf(err, errlen, "tensor '%s' has dtype %s; expected F8_E8M0 (or F32) block scales", sname, sc->dtype_name);
            return -1;
        }
        if (!shape_is(sc, 2, (rows + 127) / 128, (cols + 127) / 128)) {
            shape_str(sc, sh, sizeof sh);
            snprintf(err, errlen, "tensor '%s' has shape %s, expected [%llu, %llu] (one scale per 128x128 block)", sname, sh,
                     (unsigned long long)((rows + 127) / 128), (unsigned long long)((cols + 127) / 128));
            return -1;
        }
        p->scale = sc;
        return 0;
    }
    case ST_I8: case ST_U8: {
        p->fmt = OFF_FP4;
        if (nd != 2 || cols % 32 || !shape_is(w, 2, rows, cols / 2)) {
            shape_str(w, sh, sizeof sh);
            snprintf(err, errlen, "tensor '%s' (packed FP4) has shape %s, expected [%llu, %llu] (from config.json)", name, sh,
                     (unsigned long long)rows, (unsigned long long)(cols / 2));
            return -1;
        }
        const st_tensor *sc = st_find(st, sname);
        if (!sc) {
            snprintf(err, errlen, "checkpoint lacks tensor '%s' (scales of FP4 tensor '%s')", sname, name);
            return -1;
        }
        if (sc->dtype != ST_F8_E8M0) {
            snprintf(err, errlen, "tensor '%s' has dtype %s; expected F8_E8M0 FP4 scales", sname, sc->dtype_name);
            return -1;
        }
        if (!shape_is(sc, 2, rows, cols / 32)) {
            shape_str(sc, sh, sizeof sh);
            snprintf(err, errlen, "tensor '%s' has shape %s, expected [%llu, %llu] (one scale per 32 inputs)", sname, sh,
                     (unsigned long long)rows, (unsigned long long)(cols / 32));
            return -1;
        }
        p->scale = sc;
        return 0;
    }
    default:
        snprintf(err, errlen, "tensor '%s' has dtype %s, which convert cannot read (F32/F16/BF16/F8_E4M3/I8-FP4/I64)",
                 name, w->dtype_name);
        return -1;
    }
}

int official_resolve(const st_set *st, const dsv4_tensor_spec *s, official_src *src, char *err, size_t errlen) {
    memset(src, 0, sizeof *src);
    src->spec = s;
    int experts = is_expert_kind(s->kind);
    src->n_parts = experts ? (int)s->ne[2] : 1;
    src->rows_per_part = s->n_dims >= 2 ? (int64_t)s->ne[1] : 1;
    src->parts = calloc((size_t)src->n_parts, sizeof *src->parts);
    if (!src->parts) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    char name[512];
    for (int e = 0; e < src->n_parts; e++) {
        if (official_name(s, e, name, sizeof name) != 0) {
            snprintf(err, errlen, "no official name for %s", s->name);
            official_src_free(src);
            return -1;
        }
        if (resolve_part(st, s, name, &src->parts[e], err, errlen) != 0) {
            official_src_free(src);
            return -1;
        }
    }
    return 0;
}

void official_src_free(official_src *src) {
    free(src->parts);
    src->parts = NULL;
}

void official_release(const st_set *st, const official_src *src) {
    for (int e = 0; e < src->n_parts; e++) {
        st_release(st, src->parts[e].w);
        if (src->parts[e].scale) st_release(st, src->parts[e].scale);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* decode */

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline float rdf32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

static float scale_value(const st_tensor *sc, uint64_t idx) {
    switch (sc->dtype) {
    case ST_F8_E8M0: return e8m0_to_f32(sc->data[idx]);
    case ST_F32: return rdf32(sc->data + 4 * idx);
    case ST_BF16: return bf16_to_f32(rd16(sc->data + 2 * idx));
    default: return NAN;
    }
}

/* Decode tables (built once): every E4M3 byte (NaN codes as 0, as the official conversion does) and
 * every E2M1 nibble. */
static float e4m3_table[256], e2m1_table[16];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
    for (int i = 0; i < 256; i++) e4m3_table[i] = fp8_e4m3_to_f32_nan0((uint8_t)i);
    for (int i = 0; i < 16; i++) e2m1_table[i] = e2m1_to_f32((uint8_t)i);
}

static void decode_row(const official_part *p, uint64_t row, uint64_t cols, float *dst) {
    pthread_once(&tables_once, build_tables);
    const st_tensor *w = p->w;
    switch (p->fmt) {
    case OFF_PLAIN: {
        const uint8_t *b = w->data + row * cols * st_dtype_size(w->dtype);
        if (w->dtype == ST_F32) memcpy(dst, b, cols * 4);
        else if (w->dtype == ST_BF16) for (uint64_t i = 0; i < cols; i++) dst[i] = bf16_to_f32(rd16(b + 2 * i));
        else if (w->dtype == ST_F16) for (uint64_t i = 0; i < cols; i++) dst[i] = f16_to_f32(rd16(b + 2 * i));
        else for (uint64_t i = 0; i < cols; i++) {
            double d;
            memcpy(&d, b + 8 * i, 8);
            dst[i] = (float)d;
        }
        break;
    }
    case OFF_FP8_BLOCK: {
        const uint8_t *b = w->data + row * cols;
        uint64_t sc_cols = (cols + 127) / 128, sr = row / 128;
        for (uint64_t blk = 0; blk < sc_cols; blk++) {
            float s = scale_value(p->scale, sr * sc_cols + blk);
            uint64_t i1 = (blk + 1) * 128 < cols ? (blk + 1) * 128 : cols;
            for (uint64_t i = blk * 128; i < i1; i++) dst[i] = e4m3_table[b[i]] * s;
        }
        break;
    }
    case OFF_FP4: {
        const uint8_t *b = w->data + row * (cols / 2);
        const uint8_t *sc = p->scale->data + row * (cols / 32);
        for (uint64_t blk = 0; blk < cols / 32; blk++) {
            float s = e8m0_to_f32(sc[blk]);
            for (int j = 0; j < 16; j++) {
                uint8_t byte = b[blk * 16 + j];
                dst[blk * 32 + 2 * j] = e2m1_table[byte & 15] * s;
                dst[blk * 32 + 2 * j + 1] = e2m1_table[byte >> 4] * s;
            }
        }
        break;
    }
    default:
        for (uint64_t i = 0; i < cols; i++) dst[i] = 0;
    }
}

void official_read_rows(const official_src *src, int64_t r0, int64_t n, float *dst) {
    uint64_t cols = src->spec->ne[0];
    for (int64_t r = r0; r < r0 + n; r++) {
        int64_t part = r / src->rows_per_part, row = r % src->rows_per_part;
        decode_row(&src->parts[part], (uint64_t)row, cols, dst + (uint64_t)(r - r0) * cols);
    }
}

int official_fp4_row(const official_src *src, int64_t r, const uint8_t **packed, const uint8_t **scales) {
    int64_t part = r / src->rows_per_part, row = r % src->rows_per_part;
    const official_part *p = &src->parts[part];
    if (p->fmt != OFF_FP4) return -1;
    uint64_t cols = src->spec->ne[0];
    *packed = p->w->data + (uint64_t)row * (cols / 2);
    *scales = p->scale->data + (uint64_t)row * (cols / 32);
    return 0;
}

int official_read_i32(const official_src *src, uint32_t n_expert, int32_t *dst, char *err, size_t errlen) {
    const st_tensor *w = src->parts[0].w;
    for (uint64_t i = 0; i < w->nel; i++) {
        int64_t v;
        if (w->dtype == ST_I64) memcpy(&v, w->data + 8 * i, 8);
        else {
            int32_t v32;
            memcpy(&v32, w->data + 4 * i, 4);
            v = v32;
        }
        if (v < 0 || v >= (int64_t)n_expert) {
            snprintf(err, errlen, "tensor '%s' element %llu is %lld, outside [0, %u)", w->name, (unsigned long long)i,
                     (long long)v, n_expert);
            return -1;
        }
        dst[i] = (int32_t)v;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* config.json */

/* First present key among alternatives (NULL-terminated list). */
static json_t *jget(json_t *o, const char *const *keys) {
    for (; *keys; keys++) {
        json_t *v = json_object_get(o, *keys);
        if (v && !json_is_null(v)) return v;
    }
    return NULL;
}

#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

static int jnum(json_t *o, const char *const *keys, double *out) {
    json_t *v = jget(o, keys);
    if (!v || !json_is_number(v)) return -1;
    *out = json_number_value(v);
    return 0;
}

int official_config_load(const char *path, dsv4_config *c, char *err, size_t errlen) {
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root || !json_is_object(root)) {
        snprintf(err, errlen, "%s: cannot read JSON (%s)", path, root ? "not an object" : jerr.text);
        json_decref(root);
        return -1;
    }
    int rc = -1;
    memset(c, 0, sizeof *c);
    json_t *mt = json_object_get(root, "model_type");
    if (json_is_string(mt) && strcmp(json_string_value(mt), "deepseek_v4") != 0) {
        snprintf(err, errlen, "%s: not a DeepSeek V4 config (model_type \"%s\")", path, json_string_value(mt));
        goto out;
    }
    /* The V4-only keys: hyper-connections and per-layer compression. */
    if (!jget(root, KEYS("hc_mult")) ||
        !jget(root, KEYS("compress_ratios", "compress_rates", "layer_types"))) {
        snprintf(err, errlen, "%s: not a DeepSeek V4 config (no hc_mult / compress_ratios)", path);
        goto out;
    }
    json_t *rp = json_object_get(root, "rope_parameters");
    json_t *rp_comp = json_is_object(rp) ? json_object_get(rp, "compress") : NULL;
    json_t *rs = json_object_get(root, "rope_scaling");
    double v;
    struct { uint32_t *dst; const char *const *keys; int required; double def; } u32s[] = {
        {&c->n_layer, KEYS("n_layers", "num_hidden_layers"), 1, 0},
        {&c->n_embd, KEYS("dim", "hidden_size"), 1, 0},
        {&c->n_vocab, KEYS("vocab_size"), 1, 0},
        {&c->n_head, KEYS("n_heads", "num_attention_heads"), 1, 0},
        {&c->n_head_kv, KEYS("n_kv_heads", "num_key_value_heads"), 0, 1},
        {&c->head_dim, KEYS("head_dim"), 1, 0},
        {&c->rope_dim, KEYS("rope_head_dim", "qk_rope_head_dim"), 0, 0},
        {&c->q_lora_rank, KEYS("q_lora_rank"), 1, 0},
        {&c->o_lora_rank, KEYS("o_lora_rank"), 1, 0},
        {&c->o_groups, KEYS("o_groups"), 1, 0},
        {&c->n_expert, KEYS("n_routed_experts", "num_local_experts"), 1, 0},
        {&c->n_expert_used, KEYS("n_activated_experts", "num_experts_per_tok"), 1, 0},
        {&c->n_expert_shared, KEYS("n_shared_experts"), 0, 1},
        {&c->expert_ff, KEYS("moe_inter_dim", "moe_intermediate_size"), 1, 0},
        {&c->sliding_window, KEYS("window_size", "sliding_window"), 1, 0},
        {&c->indexer_n_head, KEYS("index_n_heads"), 1, 0},
        {&c->indexer_head_dim, KEYS("index_head_dim"), 1, 0},
        {&c->indexer_top_k, KEYS("index_topk"), 1, 0},
        {&c->n_hc, KEYS("hc_mult"), 1, 0},
        {&c->hc_sinkhorn_iters, KEYS("hc_sinkhorn_iters"), 0, 20},
    };
    for (size_t i = 0; i < sizeof u32s / sizeof u32s[0]; i++) {
        if (jnum(root, u32s[i].keys, &v) == 0) {
            if (v < 0 || v > 4294967295.0 || v != floor(v)) {
                snprintf(err, errlen, "%s: '%s' must be a non-negative integer", path, u32s[i].keys[0]);
                goto out;
            }
            *u32s[i].dst = (uint32_t)v;
        } else if (u32s[i].required) {
            snprintf(err, errlen, "%s: not a DeepSeek V4 config (missing '%s')", path, u32s[i].keys[0]);
            goto out;
        } else {
            *u32s[i].dst = (uint32_t)u32s[i].def;
        }
    }
    if (c->n_layer == 0 || c->n_layer > DSV4_MAX_LAYERS) {
        snprintf(err, errlen, "%s: n_layers %u outside 1..%d", path, c->n_layer, DSV4_MAX_LAYERS);
        goto out;
    }
    if (!c->rope_dim) {
        if (jnum(root, KEYS("partial_rotary_factor"), &v) == 0) c->rope_dim = (uint32_t)lround(v * c->head_dim);
        else {
            snprintf(err, errlen, "%s: missing 'rope_head_dim'", path);
            goto out;
        }
    }
    c->value_dim = c->head_dim;
    /* hash layers: official n_hash_layers, HF mlp_layer_types or num_hash_layers */
    json_t *mlt = json_object_get(root, "mlp_layer_types");
    if (jnum(root, KEYS("n_hash_layers", "num_hash_layers"), &v) == 0) c->n_hash_layer = (uint32_t)v;
    else if (json_is_array(mlt)) {
        size_t i;
        for (i = 0; i < json_array_size(mlt); i++) {
            json_t *e = json_array_get(mlt, i);
            if (!json_is_string(e) || strcmp(json_string_value(e), "hash_moe") != 0) break;
        }
        c->n_hash_layer = (uint32_t)i;
    } else {
        snprintf(err, errlen, "%s: not a DeepSeek V4 config (missing 'n_hash_layers')", path);
        goto out;
    }
    /* compression ratio per layer */
    json_t *cr = json_object_get(root, "compress_ratios"), *lt = json_object_get(root, "layer_types");
    if (json_is_array(cr)) {
        if (json_array_size(cr) < c->n_layer) {
            snprintf(err, errlen, "%s: compress_ratios has %zu entries for %u layers", path, json_array_size(cr), c->n_layer);
            goto out;
        }
        for (uint32_t i = 0; i < c->n_layer; i++) {
            json_t *e = json_array_get(cr, i);
            if (!json_is_integer(e) || json_integer_value(e) < 0) {
                snprintf(err, errlen, "%s: compress_ratios[%u] is not a non-negative integer", path, i);
                goto out;
            }
            c->compress_ratio[i] = (uint32_t)json_integer_value(e);
        }
    } else if (json_is_array(lt)) {
        json_t *rates = json_object_get(root, "compress_rates");
        if (json_array_size(lt) < c->n_layer) {
            snprintf(err, errlen, "%s: layer_types has %zu entries for %u layers", path, json_array_size(lt), c->n_layer);
            goto out;
        }
        for (uint32_t i = 0; i < c->n_layer; i++) {
            const char *k = json_string_value(json_array_get(lt, i));
            if (!k) k = "";
            if (!strcmp(k, "sliding_attention")) c->compress_ratio[i] = 0;
            else {
                json_t *r = json_is_object(rates) ? json_object_get(rates, k) : NULL;
                if (!json_is_integer(r)) {
                    snprintf(err, errlen, "%s: layer type '%s' has no compress_rates entry", path, k);
                    goto out;
                }
                c->compress_ratio[i] = (uint32_t)json_integer_value(r);
            }
        }
    } else {
        snprintf(err, errlen, "%s: not a DeepSeek V4 config (no compress_ratios)", path);
        goto out;
    }
    double swl = 10.0;
    jnum(root, KEYS("swiglu_limit"), &swl);
    for (uint32_t i = 0; i < c->n_layer; i++) c->swiglu_clamp[i] = (float)swl;
    c->expert_weights_norm = 1;
    json_t *ntp = json_object_get(root, "norm_topk_prob");
    if (json_is_boolean(ntp)) c->expert_weights_norm = json_is_true(ntp);
    json_t *sf = jget(root, KEYS("score_func", "scoring_func"));
    if (sf && (!json_is_string(sf) || strcmp(json_string_value(sf), "sqrtsoftplus") != 0)) {
        snprintf(err, errlen, "%s: score function '%s' is not DeepSeek V4's sqrtsoftplus", path,
                 json_is_string(sf) ? json_string_value(sf) : "?");
        goto out;
    }
    v = 1.5;
    jnum(root, KEYS("route_scale", "routed_scaling_factor"), &v);
    c->expert_weights_scale = (float)v;
    v = 1e-6;
    jnum(root, KEYS("hc_eps"), &v);
    c->hc_eps = (float)v;
    v = 1e-6;
    jnum(root, KEYS("norm_eps", "rms_norm_eps"), &v);
    c->rms_eps = (float)v;
    /* RoPE: official flat keys, else HF rope_parameters / rope_scaling */
    json_t *rp_main = json_is_object(rp) ? json_object_get(rp, "main") : NULL;
    v = 10000;
    if (jnum(root, KEYS("rope_theta"), &v) != 0 && rp_main) jnum(rp_main, KEYS("rope_theta"), &v);
    c->rope_freq_base = (float)v;
    v = 160000;
    if (jnum(root, KEYS("compress_rope_theta"), &v) != 0 && rp_comp) jnum(rp_comp, KEYS("rope_theta"), &v);
    c->compress_rope_freq_base = (float)v;
    json_t *ysrc = rp_comp ? rp_comp : json_is_object(rs) ? rs : NULL;
    double yf = 16, yo = 65536, bf = 32, bs = 1;
    if (jnum(root, KEYS("rope_factor"), &yf) != 0 && ysrc) jnum(ysrc, KEYS("factor"), &yf);
    if (jnum(root, KEYS("original_seq_len"), &yo) != 0 && ysrc) jnum(ysrc, KEYS("original_max_position_embeddings"), &yo);
    if (jnum(root, KEYS("beta_fast"), &bf) != 0 && ysrc) jnum(ysrc, KEYS("beta_fast"), &bf);
    if (jnum(root, KEYS("beta_slow"), &bs) != 0 && ysrc) jnum(ysrc, KEYS("beta_slow"), &bs);
    c->yarn_factor = (float)yf;
    c->yarn_orig_ctx = (uint64_t)yo;
    c->yarn_beta_fast = (float)bf;
    c->yarn_beta_slow = (float)bs;
    v = 0;
    jnum(root, KEYS("max_seq_len", "max_position_embeddings"), &v);
    c->context_length = (uint64_t)v;
    snprintf(c->name, sizeof c->name, "DeepSeek-V4");
    dsv4_config_derive(c);
    if (dsv4_config_validate(c, err, errlen) != 0) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", err);
        snprintf(err, errlen, "%s: %s", path, tmp);
        goto out;
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}
