/* test_config.c: DeepSeek V4 config and tensor layout.
 *
 * Presets round-trip through GGUF metadata exactly; the tensor table for
 * Flash matches the spec's published counts and byte totals (§4.2, §4.3,
 * §4.6); a tiny model written from the specs passes dsv4_check_tensors and
 * each single deliberate breakage (missing/retyped key, missing tensor, wrong
 * shape/type, bad tid2eid id, broken tokenizer) is refused by name. A
 * full-size Flash file is written sparse (holes, ~2 MB on disk) and must
 * pass the ds4-compatibility check.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "model/config.h"
#include "quant/quant.h"
#include "testutil.h"

/* ---- writing a model from the specs, with optional deliberate breakage ---- */

typedef struct model_opts {
    const char *skip_tensor;       /* leave this tensor out */
    const char *retype_tensor;     /* give this tensor type retype_to */
    int retype_to;
    const char *reshape_tensor;    /* swap... no: give this tensor shape reshape_ne */
    uint64_t reshape_ne[3];
    uint32_t reshape_dims;
    int bad_tid2eid;               /* put expert id n_expert into blk.0's table */
    int alt_policy;                /* F16 dense, Q4_K experts, BF16 small (a minke-only type policy) */
    int tokenizer;                 /* 0 none, 1 synthetic with the 7 specials, 2 lacking "<think>" */
    int sparse;                    /* write tensor data as holes */
    int extra_tensor;              /* add an unrelated tensor */
} model_opts;

static void write_tokenizer(gguf_writer *w, uint32_t n_vocab, int variant) {
    char **toks = malloc(n_vocab * sizeof *toks);
    for (uint32_t i = 0; i < n_vocab; i++) {
        toks[i] = malloc(16);
        snprintf(toks[i], 16, "t%u", i);
    }
    for (int k = 0; k < 7 && (uint32_t)k < n_vocab; k++) {
        free(toks[n_vocab - 1 - k]);
        toks[n_vocab - 1 - k] = strdup(variant == 2 && k == 4 ? "<thunk>" : dsv4_special_tokens[k]);
    }
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, n_vocab);
    const char *merges[2] = {"t 1", "t 2"};
    gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 2);
    for (uint32_t i = 0; i < n_vocab; i++) free(toks[i]);
    free(toks);
}

static int spec_type(const dsv4_tensor_spec *s, const model_opts *o) {
    if (o->retype_tensor && !strcmp(s->name, o->retype_tensor)) return o->retype_to;
    if (o->alt_policy) {
        switch (s->role) {
        case DSV4_ROLE_DENSE: return GGML_TYPE_F16;
        case DSV4_ROLE_EXPERT_GATEUP: case DSV4_ROLE_EXPERT_DOWN: return GGML_TYPE_Q4_K;
        case DSV4_ROLE_SMALL_F16: return GGML_TYPE_BF16;
        case DSV4_ROLE_EMBED: return GGML_TYPE_Q8_0;
        default: break;
        }
    }
    return s->ds4_type;
}

static int write_model(const char *path, const dsv4_config *c, const model_opts *o) {
    char err[256];
    gguf_writer *w = gguf_writer_open(path, 32, err, sizeof err);
    CHECK(w, "writer: %s", err);
    if (!w) return -1;
    dsv4_config_write_gguf(w, c);
    if (o->tokenizer) write_tokenizer(w, c->n_vocab, o->tokenizer);
    dsv4_tensor_spec *specs;
    int n = dsv4_tensor_specs(c, &specs);
    CHECK(n > 0, "specs");
    int *declared = calloc((size_t)n + 1, sizeof *declared);
    for (int i = 0; i < n; i++) {
        const dsv4_tensor_spec *s = &specs[i];
        if (o->skip_tensor && !strcmp(s->name, o->skip_tensor)) { declared[i] = -1; continue; }
        uint64_t ne[3] = {s->ne[0], s->ne[1], s->ne[2]};
        uint32_t nd = s->n_dims;
        if (o->reshape_tensor && !strcmp(s->name, o->reshape_tensor)) {
            memcpy(ne, o->reshape_ne, sizeof ne);
            nd = o->reshape_dims;
        }
        declared[i] = gguf_w_tensor(w, s->name, nd, ne, (uint32_t)spec_type(s, o));
    }
    if (o->extra_tensor) {
        uint64_t ne1[1] = {8};
        gguf_w_tensor(w, "extra.unused", 1, ne1, GGML_TYPE_F32);
    }
    CHECK(gguf_writer_begin_data(w) == 0, "begin: %s", gguf_writer_error(w));
    uint64_t seed = 12345;
    for (int i = 0; i < n; i++) {
        if (declared[i] < 0) continue;
        const dsv4_tensor_spec *s = &specs[i];
        uint64_t nb = gguf_writer_tensor_nbytes(w, declared[i]);
        if (s->role == DSV4_ROLE_TID2EID) {
            uint64_t nel = nb / 4;
            int32_t *ids = malloc(nb);
            for (uint64_t j = 0; j < nel; j++) ids[j] = (int32_t)((j * 7 + (uint64_t)s->layer) % c->n_expert);
            if (o->bad_tid2eid && s->layer == 0) ids[nel / 2] = (int32_t)c->n_expert;
            gguf_w_data(w, ids, nb);
            free(ids);
        } else if (o->sparse) {
            gguf_w_zeros(w, nb);
        } else if (s->role == DSV4_ROLE_NORM) {
            float *v = malloc(nb);
            for (uint64_t j = 0; j < nb / 4; j++) v[j] = 1.0f + 0.01f * (float)(j % 7);
            gguf_w_data(w, v, nb);
            free(v);
        } else {
            uint8_t *v = malloc(nb);
            for (uint64_t j = 0; j < nb; j++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                v[j] = (uint8_t)(seed >> 56) & 0x3f; /* keeps f16/bf16/scales finite */
            }
            gguf_w_data(w, v, nb);
            free(v);
        }
    }
    if (o->extra_tensor) { float z[8] = {0}; gguf_w_data(w, z, sizeof z); }
    free(declared);
    free(specs);
    int rc = gguf_writer_close(w);
    CHECK(rc == 0, "close %s: %s", path, gguf_writer_error(NULL));
    return rc;
}

/* Copy src to dst with metadata key `drop` left out and, if `add` is given, added by it. */
typedef void (*kv_adder)(gguf_writer *w);
static int rewrite(const char *src, const char *dst, const char *drop, kv_adder add) {
    char err[256];
    gguf_file *f = gguf_open(src, err, sizeof err);
    CHECK(f, "open %s: %s", src, err);
    if (!f) return -1;
    gguf_writer *w = gguf_writer_open(dst, f->alignment, err, sizeof err);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (drop && kv->key.len == strlen(drop) && !memcmp(kv->key.ptr, drop, kv->key.len)) continue;
        gguf_w_kv_copy(w, kv);
    }
    if (add) add(w);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        gguf_w_tensor(w, t->cname, t->n_dims, t->ne, t->type);
    }
    gguf_writer_begin_data(w);
    for (uint64_t i = 0; i < f->n_tensors; i++) gguf_w_data(w, f->tensors[i].data, f->tensors[i].nbytes);
    int rc = gguf_writer_close(w);
    CHECK(rc == 0, "rewrite close: %s", gguf_writer_error(NULL));
    gguf_close(f);
    return rc;
}

/* ---- tests ---- */

static void test_presets(void) {
    dsv4_config c;
    char err[256];
    static const char *names[] = {"flash", "small", "tiny"};
    for (int i = 0; i < 3; i++) {
        CHECK(dsv4_config_preset(&c, names[i]) == 0, "preset %s", names[i]);
        CHECK(dsv4_config_validate(&c, err, sizeof err) == 0, "preset %s invalid: %s", names[i], err);
        CHECK(dsv4_config_is_flash(&c) == (i == 0), "is_flash(%s)", names[i]);
    }
    CHECK(dsv4_config_preset(&c, "huge") == -1, "unknown preset");

    dsv4_config_preset(&c, "flash");
    CHECK(c.n_csa == 21 && c.n_hca == 20 && c.n_swa == 2, "flash schedule %u/%u/%u", c.n_csa, c.n_hca, c.n_swa);
    CHECK(c.compress_ratio[2] == 4 && c.compress_ratio[3] == 128 && c.compress_ratio[42] == 4, "flash ratios");
    CHECK(c.hc_mix == 24 && c.hc_dim == 16384 && c.o_group_in == 4096 && c.o_dim == 8192 && c.nope_dim == 448, "flash derived");
    CHECK(fabsf(c.attn_scale - 1.0f / sqrtf(512.0f)) < 1e-9f && fabsf(c.indexer_scale - 1.0f / sqrtf(8192.0f)) < 1e-9f, "scales");
    char sum[400];
    dsv4_config_summary(&c, sum, sizeof sum);
    CHECK(strstr(sum, "43 layers") && strstr(sum, "vocab 129280"), "summary: %s", sum);

    /* the tiny preset is fixtures/oracle/tiny-a's config */
    dsv4_config_preset(&c, "tiny");
    static const uint32_t tiny_ratios[6] = {0, 0, 4, 8, 4, 8};
    CHECK(c.n_layer == 6 && c.n_embd == 256 && c.n_vocab == 1024 && c.n_head == 4 && c.head_dim == 128 &&
          c.sliding_window == 8 && !memcmp(c.compress_ratio, tiny_ratios, sizeof tiny_ratios) &&
          c.indexer_n_head == 32 && c.indexer_top_k == 4 && c.o_groups == 2 && c.o_lora_rank == 64, "tiny values");

    /* validation names the problem */
    dsv4_config b = c;
    b.rope_dim = b.head_dim;
    CHECK(dsv4_config_validate(&b, err, sizeof err) == -1 && strstr(err, "rope.dimension_count"), "rope >= head: %s", err);
    b = c; b.compress_ratio[3] = 2;
    CHECK(dsv4_config_validate(&b, err, sizeof err) == -1 && strstr(err, "layer 3 has ratio 2"), "ratio 2: %s", err);
    b = c; b.o_groups = 3;
    CHECK(dsv4_config_validate(&b, err, sizeof err) == -1 && strstr(err, "output_group_count"), "groups: %s", err);
    b = c; b.n_expert_used = 17;
    CHECK(dsv4_config_validate(&b, err, sizeof err) == -1 && strstr(err, "expert_used_count"), "used: %s", err);
    b = c; b.n_head_kv = 2;
    CHECK(dsv4_config_validate(&b, err, sizeof err) == -1 && strstr(err, "head_count_kv"), "kv heads: %s", err);
    b = c; b.n_hash_layer = 7;
    CHECK(dsv4_config_validate(&b, err, sizeof err) == -1 && strstr(err, "hash_layer_count"), "hash: %s", err);
    b = c; b.indexer_head_dim = 96;
    CHECK(dsv4_config_validate(&b, err, sizeof err) == -1 && strstr(err, "indexer.key_length"), "indexer dim: %s", err);
    b = c; b.swiglu_clamp[5] = 0;
    CHECK(dsv4_config_validate(&b, err, sizeof err) == -1 && strstr(err, "swiglu"), "clamp: %s", err);
    dsv4_tensor_spec *sp;
    CHECK(dsv4_tensor_specs(&b, &sp) == -1, "specs refuse an invalid config");
}

/* Bytes tensor s takes in a file as type: its data padded to the default
 * 32-byte alignment, as the spec's published totals count it. */
static uint64_t file_bytes(const dsv4_tensor_spec *s, int type) {
    return (quant_nbytes(type, s->ne[0] * s->ne[1] * s->ne[2]) + 31) / 32 * 32;
}

static void test_flash_specs(void) {
    dsv4_config c;
    dsv4_config_preset(&c, "flash");
    dsv4_tensor_spec *s;
    int n = dsv4_tensor_specs(&c, &s);
    CHECK(n == 1328, "flash tensor count %d", n);
    if (n <= 0) return;
    /* type counts of ds4's q2 file as reported by `ds4 --inspect` (spec §4.6) */
    int cnt[64] = {0};
    uint64_t q2 = 0, q4 = 0;
    for (int i = 0; i < n; i++) {
        cnt[s[i].ds4_type]++;
        int t4 = s[i].role == DSV4_ROLE_EXPERT_GATEUP || s[i].role == DSV4_ROLE_EXPERT_DOWN ? GGML_TYPE_Q4_K : s[i].ds4_type;
        q2 += file_bytes(&s[i], s[i].ds4_type);
        q4 += file_bytes(&s[i], t4);
    }
    CHECK(cnt[GGML_TYPE_F32] == 492 && cnt[GGML_TYPE_F16] == 359 && cnt[GGML_TYPE_Q8_0] == 345 &&
          cnt[GGML_TYPE_IQ2_XXS] == 86 && cnt[GGML_TYPE_Q2_K] == 43 && cnt[GGML_TYPE_I32] == 3,
          "type counts F32 %d F16 %d Q8_0 %d IQ2_XXS %d Q2_K %d I32 %d", cnt[0], cnt[1], cnt[8], cnt[16], cnt[10], cnt[26]);
    /* tensor data totals of the published files (spec §4.3) */
    CHECK(q2 == 86714777664ull, "q2 data bytes %llu", (unsigned long long)q2);
    CHECK(q4 == 164628168768ull, "q4 data bytes %llu", (unsigned long long)q4);
    /* spot checks against the §4.1/§4.2 tables */
    struct { const char *name; uint64_t ne0, ne1, ne2; int type; } want[] = {
        {"token_embd.weight", 4096, 129280, 1, GGML_TYPE_F16},
        {"output.weight", 4096, 129280, 1, GGML_TYPE_Q8_0},
        {"output_hc_fn.weight", 16384, 4, 1, GGML_TYPE_F16},
        {"output_hc_scale.weight", 1, 1, 1, GGML_TYPE_F32},
        {"blk.0.hc_attn_fn.weight", 16384, 24, 1, GGML_TYPE_F16},
        {"blk.0.ffn_gate_tid2eid.weight", 6, 129280, 1, GGML_TYPE_I32},
        {"blk.2.attn_compressor_ape.weight", 1024, 4, 1, GGML_TYPE_F16},
        {"blk.3.attn_compressor_ape.weight", 512, 128, 1, GGML_TYPE_F16},
        {"blk.3.attn_compressor_kv.weight", 4096, 512, 1, GGML_TYPE_F16},
        {"blk.4.indexer.attn_q_b.weight", 1024, 8192, 1, GGML_TYPE_F16},
        {"blk.4.indexer_compressor_ape.weight", 256, 4, 1, GGML_TYPE_F16},
        {"blk.4.indexer_compressor_norm.weight", 128, 1, 1, GGML_TYPE_F32},
        {"blk.42.attn_q_b.weight", 1024, 32768, 1, GGML_TYPE_Q8_0},
        {"blk.42.attn_output_a.weight", 4096, 8192, 1, GGML_TYPE_Q8_0},
        {"blk.42.attn_output_b.weight", 8192, 4096, 1, GGML_TYPE_Q8_0},
        {"blk.42.exp_probs_b.bias", 256, 1, 1, GGML_TYPE_F32},
        {"blk.42.ffn_gate_exps.weight", 4096, 2048, 256, GGML_TYPE_IQ2_XXS},
        {"blk.42.ffn_down_exps.weight", 2048, 4096, 256, GGML_TYPE_Q2_K},
        {"blk.42.ffn_down_shexp.weight", 2048, 4096, 1, GGML_TYPE_Q8_0},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        int found = 0;
        for (int i = 0; i < n; i++)
            if (!strcmp(s[i].name, want[k].name)) {
                found = 1;
                CHECK(s[i].ne[0] == want[k].ne0 && s[i].ne[1] == want[k].ne1 && s[i].ne[2] == want[k].ne2 &&
                      s[i].ds4_type == want[k].type, "%s: [%llu,%llu,%llu] type %d", want[k].name,
                      (unsigned long long)s[i].ne[0], (unsigned long long)s[i].ne[1], (unsigned long long)s[i].ne[2], s[i].ds4_type);
            }
        CHECK(found, "flash specs lack %s", want[k].name);
    }
    /* layers 0-2 carry tid2eid, 3-42 exp_probs_b, never both */
    int tid = 0, bias = 0;
    for (int i = 0; i < n; i++) {
        if (s[i].kind == DSV4_T_FFN_GATE_TID2EID) { tid++; CHECK(s[i].layer < 3, "tid2eid on layer %d", s[i].layer); }
        if (s[i].kind == DSV4_T_EXP_PROBS_B) { bias++; CHECK(s[i].layer >= 3, "bias on layer %d", s[i].layer); }
        CHECK(!strcmp(dsv4_tensor_kind_name(s[i].kind), s[i].layer < 0 ? s[i].name : strchr(s[i].name + 4, '.') + 1),
              "kind name of %s", s[i].name);
    }
    CHECK(tid == 3 && bias == 40, "tid2eid %d bias %d", tid, bias);
    free(s);
}

static void test_tiny_roundtrip(void) {
    char path[600], err[300];
    dsv4_config c, r;
    dsv4_config_preset(&c, "tiny");
    test_path(path, sizeof path, "tiny.gguf");
    model_opts o = {0};
    o.tokenizer = 1;
    if (write_model(path, &c, &o)) return;
    gguf_file *f = gguf_open(path, err, sizeof err);
    CHECK(f, "open tiny: %s", err);
    if (!f) return;
    CHECK(dsv4_config_from_gguf(f, &r, err, sizeof err) == 0, "tiny config: %s", err);
    CHECK(!memcmp(&c, &r, sizeof c), "tiny config round trip is exact");
    CHECK(dsv4_check_tensors(f, &r, err, sizeof err) == 0, "tiny tensors: %s", err);
    CHECK(dsv4_check_tokenizer(f, &r, err, sizeof err) == 1, "tiny tokenizer: %s", err);
    CHECK(dsv4_check_ds4_compat(f, &r, err, sizeof err) == -1 && strstr(err, "hyperparameters"), "tiny is not ds4: %s", err);
    /* value types ds4 insists on */
    const gguf_kv *kv = gguf_find_kv(f, "deepseek4.block_count");
    CHECK(kv && kv->type == GGUF_U32, "block_count u32");
    kv = gguf_find_kv(f, "deepseek4.expert_weights_norm");
    CHECK(kv && kv->type == GGUF_BOOL, "expert_weights_norm bool");
    kv = gguf_find_kv(f, "deepseek4.attention.compress_ratios");
    CHECK(kv && kv->type == GGUF_ARRAY && kv->arr_type == GGUF_U32 && kv->arr_n == 6, "ratios u32[6]");
    kv = gguf_find_kv(f, "deepseek4.swiglu_clamp_exp");
    CHECK(kv && kv->arr_type == GGUF_F32 && kv->arr_n == 6, "swiglu f32[6]");
    kv = gguf_find_kv(f, "general.alignment");
    CHECK(kv && kv->type == GGUF_U32, "general.alignment u32");
    gguf_str s;
    CHECK(gguf_get_str(f, "general.architecture", &s) == 0 && s.len == 9 && !memcmp(s.ptr, "deepseek4", 9), "architecture");
    gguf_close(f);

    /* small preset: config only (it carries the real vocabulary size) */
    dsv4_config_preset(&c, "small");
    dsv4_tensor_spec *sp;
    int n = dsv4_tensor_specs(&c, &sp);
    CHECK(n == 6 + 2 * 24 + 2 * 34 + 2 * 28 - 0, "small tensor count %d", n);
    for (int i = 0; i < n; i++) {
        int t = sp[i].ds4_type;
        CHECK(quant_row_bytes(t, (int64_t)sp[i].ne[0]) > 0, "small %s row fits %s", sp[i].name, quant_name(t));
    }
    free(sp);
}

static const char *tiny_path(void) {
    static char p[600];
    test_path(p, sizeof p, "tiny.gguf");
    return p;
}

/* open path and expect dsv4 config or tensor checks to fail with `want` in the message */
static void expect_model_error(const char *path, const char *want, const char *what) {
    char err[300] = "";
    gguf_file *f = gguf_open(path, err, sizeof err);
    CHECK(f, "%s: open: %s", what, err);
    if (!f) return;
    dsv4_config c;
    int rc = dsv4_config_from_gguf(f, &c, err, sizeof err);
    if (rc == 0) rc = dsv4_check_tensors(f, &c, err, sizeof err);
    CHECK(rc == -1, "%s: accepted", what);
    CHECK(rc == -1 && strstr(err, want), "%s: error '%s' lacks '%s'", what, err, want);
    gguf_close(f);
}

static void expect_model_ok(const char *path, const char *what) {
    char err[300] = "";
    gguf_file *f = gguf_open(path, err, sizeof err);
    CHECK(f, "%s: open: %s", what, err);
    if (!f) return;
    dsv4_config c;
    int rc = dsv4_config_from_gguf(f, &c, err, sizeof err);
    if (rc == 0) rc = dsv4_check_tensors(f, &c, err, sizeof err);
    CHECK(rc == 0, "%s: refused: %s", what, err);
    gguf_close(f);
}

static void add_expert_count_u64(gguf_writer *w) { gguf_w_u64(w, "deepseek4.expert_count", 16); }
static void add_norm_u8(gguf_writer *w) { uint8_t v = 1; gguf_w_scalar(w, "deepseek4.expert_weights_norm", GGUF_U8, &v); }
static void add_ratios_negative(gguf_writer *w) {
    int32_t r[6] = {0, 0, 4, -8, 4, 8};
    gguf_w_arr_i32(w, "deepseek4.attention.compress_ratios", r, 6);
}
static void add_ratios_i32(gguf_writer *w) {
    int32_t r[7] = {0, 0, 4, 8, 4, 8, 0};   /* i32 and one extra entry (MTP) are fine */
    gguf_w_arr_i32(w, "deepseek4.attention.compress_ratios", r, 7);
}
static void add_ratios_short(gguf_writer *w) {
    uint32_t r[5] = {0, 0, 4, 8, 4};
    gguf_w_arr_u32(w, "deepseek4.attention.compress_ratios", r, 5);
}
static void add_ratios_3(gguf_writer *w) {
    uint32_t r[6] = {0, 0, 3, 8, 4, 8};
    gguf_w_arr_u32(w, "deepseek4.attention.compress_ratios", r, 6);
}
static void add_swiglu_f64(gguf_writer *w) {
    double v[6] = {10, 10, 10, 10, 10, 10};
    gguf_w_arr(w, "deepseek4.swiglu_clamp_exp", GGUF_F64, v, 6);
}
static void add_orig_ctx_u64(gguf_writer *w) { gguf_w_u64(w, "deepseek4.rope.scaling.original_context_length", 65536); }
static void add_arch_llama(gguf_writer *w) { gguf_w_str(w, "general.architecture", "llama"); }
static void add_groups_2(gguf_writer *w) { gguf_w_u32(w, "deepseek4.expert_group_count", 2); }
static void add_groups_u64(gguf_writer *w) { gguf_w_u64(w, "deepseek4.expert_group_count", 2); }
static void add_gating_sigmoid(gguf_writer *w) { gguf_w_u32(w, "deepseek4.expert_gating_func", 2); }
static void add_key_len_64(gguf_writer *w) { gguf_w_u32(w, "deepseek4.attention.key_length", 64); }
static void add_eps_f64(gguf_writer *w) {
    double v = 1e-6;
    gguf_w_scalar(w, "deepseek4.attention.layer_norm_rms_epsilon", GGUF_F64, &v);
}

static void test_metadata_breakage(void) {
    char path[600];
    test_path(path, sizeof path, "meta.gguf");
    struct { const char *drop; kv_adder add; const char *want; const char *what; } cases[] = {
        {"deepseek4.expert_count", NULL, "metadata key 'deepseek4.expert_count' is missing", "missing u32 key"},
        {"deepseek4.rope.freq_base", NULL, "metadata key 'deepseek4.rope.freq_base' is missing", "missing f32 key"},
        {"deepseek4.swiglu_clamp_exp", NULL, "'deepseek4.swiglu_clamp_exp' is missing", "missing array"},
        {"deepseek4.expert_count", add_expert_count_u64, "'deepseek4.expert_count' has type u64 (must be u32)", "u32 as u64"},
        {"deepseek4.expert_weights_norm", add_norm_u8, "has type u8 (must be bool)", "bool as u8"},
        {"deepseek4.attention.compress_ratios", add_ratios_negative, "negative", "negative ratio"},
        {"deepseek4.attention.compress_ratios", add_ratios_short, "fewer than the 6 layers", "short ratios"},
        {"deepseek4.attention.compress_ratios", add_ratios_3, "layer 2 has ratio 3", "ratio 3"},
        {"general.architecture", add_arch_llama, "not 'deepseek4'", "architecture"},
        {"deepseek4.expert_group_count", add_groups_2, "group-limited", "expert groups"},
        {"deepseek4.attention.key_length", add_key_len_64, "must be smaller than key_length", "key_length = rope"},
        {"deepseek4.expert_gating_func", add_gating_sigmoid, "only sqrt(softplus)", "sigmoid gating"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unlink(path);
        if (rewrite(tiny_path(), path, cases[i].drop, cases[i].add) == 0) expect_model_error(path, cases[i].want, cases[i].what);
    }
    struct { const char *drop; kv_adder add; const char *what; } ok[] = {
        {"deepseek4.attention.compress_ratios", add_ratios_i32, "i32 ratios with an extra entry"},
        {"deepseek4.swiglu_clamp_exp", add_swiglu_f64, "f64 swiglu array"},
        {"deepseek4.rope.scaling.original_context_length", add_orig_ctx_u64, "u64 original context"},
        {"deepseek4.expert_group_count", add_groups_u64, "non-u32 expert groups ignored"},
        {"deepseek4.attention.layer_norm_rms_epsilon", add_eps_f64, "f64 epsilon"},
        {"deepseek4.context_length", NULL, "no context_length"},
        {"general.name", NULL, "no general.name"},
        {"general.architecture", NULL, "no general.architecture"},
        {"deepseek4.expert_gating_func", NULL, "no expert_gating_func (ds4 files)"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        unlink(path);
        if (rewrite(tiny_path(), path, ok[i].drop, ok[i].add) == 0) expect_model_ok(path, ok[i].what);
    }
    /* the tokenizer: dropped merges is broken, dropped both is "no tokenizer" */
    char err[300];
    unlink(path);
    if (rewrite(tiny_path(), path, "tokenizer.ggml.merges", NULL) == 0) {
        gguf_file *f = gguf_open(path, err, sizeof err);
        dsv4_config c;
        if (f && dsv4_config_from_gguf(f, &c, err, sizeof err) == 0)
            CHECK(dsv4_check_tokenizer(f, &c, err, sizeof err) == -1 && strstr(err, "merges"), "no merges: %s", err);
        if (f) gguf_close(f);
    }
}

static void test_tensor_breakage(void) {
    char path[600];
    test_path(path, sizeof path, "broken.gguf");
    dsv4_config c;
    dsv4_config_preset(&c, "tiny");
    model_opts o;

    o = (model_opts){0}; o.skip_tensor = "blk.3.exp_probs_b.bias";
    if (!write_model(path, &c, &o)) expect_model_error(path, "missing tensor 'blk.3.exp_probs_b.bias'", "missing bias");
    o = (model_opts){0}; o.skip_tensor = "blk.2.indexer.proj.weight";
    if (!write_model(path, &c, &o)) expect_model_error(path, "missing tensor 'blk.2.indexer.proj.weight'", "missing indexer");
    o = (model_opts){0}; o.skip_tensor = "output.weight";
    if (!write_model(path, &c, &o)) expect_model_error(path, "missing tensor 'output.weight'", "missing head");
    o = (model_opts){0}; o.reshape_tensor = "blk.2.attn_compressor_ape.weight";
    o.reshape_ne[0] = 256; o.reshape_ne[1] = 8; o.reshape_ne[2] = 1; o.reshape_dims = 2;
    if (!write_model(path, &c, &o))
        expect_model_error(path, "tensor 'blk.2.attn_compressor_ape.weight' has shape [256, 8], expected [256, 4]", "ape shape");
    o = (model_opts){0}; o.reshape_tensor = "blk.5.ffn_down_exps.weight";
    o.reshape_ne[0] = 256; o.reshape_ne[1] = 256; o.reshape_ne[2] = 15; o.reshape_dims = 3;
    if (!write_model(path, &c, &o)) expect_model_error(path, "blk.5.ffn_down_exps.weight' has shape", "expert count");
    o = (model_opts){0}; o.reshape_tensor = "blk.0.hc_attn_scale.weight";
    o.reshape_ne[0] = 3; o.reshape_ne[1] = 1; o.reshape_ne[2] = 1; o.reshape_dims = 2;
    if (!write_model(path, &c, &o)) expect_model_ok(path, "trailing unit dimension");
    o = (model_opts){0}; o.retype_tensor = "blk.0.attn_norm.weight"; o.retype_to = GGML_TYPE_F16;
    if (!write_model(path, &c, &o))
        expect_model_error(path, "tensor 'blk.0.attn_norm.weight' has type f16", "norm f16");
    o = (model_opts){0}; o.retype_tensor = "blk.4.ffn_up_exps.weight"; o.retype_to = GGML_TYPE_Q4_K;
    if (!write_model(path, &c, &o)) expect_model_error(path, "gate and up must match", "gate/up mismatch");
    o = (model_opts){0}; o.retype_tensor = "blk.1.ffn_gate_tid2eid.weight"; o.retype_to = GGML_TYPE_F32;
    if (!write_model(path, &c, &o)) expect_model_error(path, "blk.1.ffn_gate_tid2eid.weight' has type f32", "tid2eid f32");
    o = (model_opts){0}; o.bad_tid2eid = 1;
    if (!write_model(path, &c, &o)) expect_model_error(path, "routes to expert 16", "tid2eid id");
    o = (model_opts){0}; o.alt_policy = 1; o.extra_tensor = 1;
    if (!write_model(path, &c, &o)) {
        expect_model_ok(path, "F16/BF16/Q4_K/Q8_0 type policy with an extra tensor");
        char err[300];
        gguf_file *f = gguf_open(path, err, sizeof err);
        dsv4_config r;
        if (f && dsv4_config_from_gguf(f, &r, err, sizeof err) == 0)
            CHECK(dsv4_check_tokenizer(f, &r, err, sizeof err) == 0 && !strcmp(err, "no tokenizer"), "no tokenizer: %s", err);
        if (f) gguf_close(f);
    }
    o = (model_opts){0}; o.tokenizer = 2;
    if (!write_model(path, &c, &o)) {
        char err[300];
        gguf_file *f = gguf_open(path, err, sizeof err);
        dsv4_config r;
        if (f && dsv4_config_from_gguf(f, &r, err, sizeof err) == 0)
            CHECK(dsv4_check_tokenizer(f, &r, err, sizeof err) == -1 && strstr(err, "<think>"), "missing special: %s", err);
        if (f) gguf_close(f);
    }
    {   /* a token table of the wrong length */
        dsv4_config small = c;
        small.n_vocab = 1000;
        char err[300];
        gguf_file *f = gguf_open(tiny_path(), err, sizeof err);
        if (f) {
            CHECK(dsv4_check_tokenizer(f, &small, err, sizeof err) == -1 && strstr(err, "1024 entries but vocab_size is 1000"),
                  "vocab mismatch: %s", err);
            gguf_close(f);
        }
    }
    unlink(path);
}

/* The MTP file's table: spec §4.4 tensor list and §4.3's byte total. */
static void test_mtp(void) {
    dsv4_config c;
    dsv4_config_preset(&c, "flash");
    dsv4_tensor_spec *s;
    int n = dsv4_mtp_tensor_specs(&c, &s);
    CHECK(n == 32, "MTP tensor count %d", n);
    if (n <= 0) return;
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        total += file_bytes(&s[i], s[i].ds4_type);
        CHECK(!strncmp(s[i].name, "mtp.0.", 6) && s[i].layer == 43, "MTP name/layer %s %d", s[i].name, s[i].layer);
    }
    CHECK(total == 3807600192ull, "MTP data bytes %llu", (unsigned long long)total);
    free(s);

    /* a tiny MTP file with only general.* metadata */
    char path[600], err[300];
    dsv4_config_preset(&c, "tiny");
    for (int drop = 0; drop < 2; drop++) {
        snprintf(path, sizeof path, "%s/mtp%d.gguf", test_tmpdir(), drop);
        gguf_writer *w = gguf_writer_open(path, 32, err, sizeof err);
        gguf_w_str(w, "general.architecture", "deepseek4");
        n = dsv4_mtp_tensor_specs(&c, &s);
        for (int i = 0; i < n; i++)
            if (!(drop && s[i].kind == DSV4_T_EXP_PROBS_B)) gguf_w_tensor(w, s[i].name, s[i].n_dims, s[i].ne, (uint32_t)s[i].ds4_type);
        gguf_writer_begin_data(w);
        for (int i = 0; i < n - drop; i++) gguf_w_zeros(w, gguf_writer_tensor_nbytes(w, i));
        CHECK(gguf_writer_close(w) == 0, "MTP close: %s", gguf_writer_error(NULL));
        free(s);
        gguf_file *f = gguf_open(path, err, sizeof err);
        CHECK(f, "MTP open: %s", err);
        if (!f) continue;
        int rc = dsv4_check_mtp_tensors(f, &c, err, sizeof err);
        if (drop) CHECK(rc == -1 && strstr(err, "missing tensor 'mtp.0.exp_probs_b.bias'"), "MTP without bias: %s", err);
        else CHECK(rc == 0, "tiny MTP: %s", err);
        gguf_close(f);
    }
}

/* Full-size Flash, data as holes: header, table and ds4's checks at real scale. */
static void test_flash_sparse(void) {
    char path[600], err[300];
    test_path(path, sizeof path, "probe");
    FILE *fp = fopen(path, "wb");
    int sparse_ok = fp && ftruncate(fileno(fp), 1ll << 30) == 0;
    if (fp) fclose(fp);
    struct stat st;
    if (sparse_ok && (stat(path, &st) != 0 || st.st_blocks * 512ll > (1ll << 20))) sparse_ok = 0;
    unlink(path);
    if (!sparse_ok) { printf("SKIP flash sparse file: filesystem has no sparse files\n"); return; }

    dsv4_config c, r;
    dsv4_config_preset(&c, "flash");
    test_path(path, sizeof path, "flash.gguf");
    model_opts o = {0};
    o.sparse = 1;
    o.tokenizer = 1;
    if (write_model(path, &c, &o)) return;
    stat(path, &st);
    CHECK(st.st_blocks * 512ll < (64ll << 20), "flash file is sparse (%lld bytes on disk)", (long long)st.st_blocks * 512);
    gguf_file *f = gguf_open(path, err, sizeof err);
    CHECK(f, "open flash: %s", err);
    if (!f) { unlink(path); return; }
    CHECK(f->n_tensors == 1328, "flash n_tensors");
    uint64_t last_end = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        uint64_t e = f->tensors[i].offset + (f->tensors[i].nbytes + 31) / 32 * 32;
        if (e > last_end) last_end = e;
    }
    CHECK(last_end == 86714777664ull, "flash data region %llu", (unsigned long long)last_end);
    CHECK(f->size == f->data_offset + 86714777664ull, "flash file size %llu", (unsigned long long)f->size);
    CHECK(dsv4_config_from_gguf(f, &r, err, sizeof err) == 0, "flash config: %s", err);
    CHECK(!memcmp(&c, &r, sizeof c), "flash config round trip is exact");
    CHECK(dsv4_config_is_flash(&r), "is flash");
    CHECK(dsv4_check_tensors(f, &r, err, sizeof err) == 0, "flash tensors: %s", err);
    CHECK(dsv4_check_ds4_compat(f, &r, err, sizeof err) == 0, "flash ds4 compat: %s", err);
    gguf_close(f);
    unlink(path);
}

int main(void) {
    test_presets();
    test_flash_specs();
    test_tiny_roundtrip();
    test_metadata_breakage();
    test_tensor_breakage();
    test_mtp();
    test_flash_sparse();
    return test_finish("test_config");
}
