/* test_convert.c: `minke convert` on the tiny-a official-format checkpoint.
 *
 * The checkpoint is decoded here independently of src/convert (own
 * safetensors parse, own name table written from spec model.md §4.5, FP8 /
 * FP4 / E8M0 / BF16 decoded from their bit definitions), then:
 *  - --experts f32 --dense f32: every GGUF tensor equals the exact decoded
 *    official values, bit for bit, and every official tensor is used;
 *  - --experts mxfp4: every expert block carries the checkpoint's E8M0 scale
 *    byte and FP4 codes unchanged (ggml nibble order);
 *  - default policy (ds4 q2): F32 tensors exact, every other tensor equal to
 *    the library quantizer applied to the exact values and within the
 *    format's error (Q8_0 per-block bound, F16 rounding, K/IQ RMS bounds);
 *  - GGUF -> GGUF: the q2 file rewritten with f32 policies is its exact
 *    dequantization (the "F32 twin");
 *  - bad inputs (corrupt header, missing tensor, wrong shape, unreadable
 *    dtype, a config that is not DeepSeek V4) fail with a clear message and
 *    leave no output file.
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert/convert.h"
#include "convert/safetensors.h"
#include "model/config.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "testutil.h"

static const char *ckpt_dir = "tests/fixtures/oracle/tiny-a";

static int write_all(const char *path, const void *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return -1;
    size_t w = fwrite(p, 1, n, fp);
    fclose(fp);
    return w == n ? 0 : -1;
}

/* ---------------------------------------------------------------------------------------- */
/* independent checkpoint reader */

typedef struct {
    char name[200];
    char dtype[16];
    int nd;
    uint64_t shape[4];
    const uint8_t *data;
    uint64_t nbytes;
    int used;
} ck_tensor;

typedef struct {
    uint8_t *file;
    size_t size;
    json_t *header;
    ck_tensor *t;
    int n;
} ckpt;

static int ckpt_load(ckpt *c, const char *path) {
    memset(c, 0, sizeof *c);
    c->file = test_read_file(path, &c->size);
    if (!c->file) return -1;
    uint64_t hl;
    memcpy(&hl, c->file, 8);
    json_error_t je;
    c->header = json_loadb((const char *)c->file + 8, hl, 0, &je);
    if (!c->header) return -1;
    c->t = calloc(json_object_size(c->header), sizeof *c->t);
    const char *k;
    json_t *v;
    json_object_foreach(c->header, k, v) {
        if (!strcmp(k, "__metadata__")) continue;
        ck_tensor *t = &c->t[c->n++];
        snprintf(t->name, sizeof t->name, "%s", k);
        snprintf(t->dtype, sizeof t->dtype, "%s", json_string_value(json_object_get(v, "dtype")));
        json_t *sh = json_object_get(v, "shape");
        t->nd = (int)json_array_size(sh);
        for (int d = 0; d < t->nd; d++) t->shape[d] = (uint64_t)json_integer_value(json_array_get(sh, d));
        json_t *off = json_object_get(v, "data_offsets");
        uint64_t b0 = (uint64_t)json_integer_value(json_array_get(off, 0));
        uint64_t b1 = (uint64_t)json_integer_value(json_array_get(off, 1));
        t->data = c->file + 8 + hl + b0;
        t->nbytes = b1 - b0;
    }
    return 0;
}

static ck_tensor *ck_find(ckpt *c, const char *name) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->t[i].name, name)) return &c->t[i];
    return NULL;
}

/* bit-level definitions (spec model.md §4.5) */
static double ref_e4m3(uint8_t b) {
    if ((b & 0x7F) == 0x7F) return 0.0;
    int e = (b >> 3) & 15, m = b & 7;
    double v = e == 0 ? m * ldexp(1.0, -9) : (1.0 + m / 8.0) * ldexp(1.0, e - 7);
    return (b & 0x80) ? -v : v;
}
static double ref_e8m0(uint8_t b) { return ldexp(1.0, (int)b - 127); }
static double ref_e2m1(int c) {
    static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    return (c & 8) ? -mag[c & 7] : mag[c & 7];
}
static float ref_bf16(const uint8_t *p) {
    uint32_t u = (uint32_t)(p[0] | (p[1] << 8)) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Decode one official matrix/vector (+ its .scale) into out (rows x cols, row-major). */
static int ck_decode(ckpt *c, const char *name, uint64_t rows, uint64_t cols, float *out) {
    ck_tensor *t = ck_find(c, name);
    if (!t) return -1;
    t->used = 1;
    if (!strcmp(t->dtype, "F32")) {
        if (t->nbytes != rows * cols * 4) return -1;
        memcpy(out, t->data, t->nbytes);
    } else if (!strcmp(t->dtype, "BF16")) {
        if (t->nbytes != rows * cols * 2) return -1;
        for (uint64_t i = 0; i < rows * cols; i++) out[i] = ref_bf16(t->data + 2 * i);
    } else if (!strcmp(t->dtype, "F8_E4M3")) {
        char sn[256];
        snprintf(sn, sizeof sn, "%.*s.scale", (int)(strlen(name) - 7), name);
        ck_tensor *s = ck_find(c, sn);
        if (!s || t->nbytes != rows * cols) return -1;
        s->used = 1;
        uint64_t sc_cols = s->shape[1];
        for (uint64_t r = 0; r < rows; r++)
            for (uint64_t i = 0; i < cols; i++)
                out[r * cols + i] = (float)(ref_e4m3(t->data[r * cols + i]) * ref_e8m0(s->data[(r / 128) * sc_cols + i / 128]));
    } else if (!strcmp(t->dtype, "I8")) {
        char sn[256];
        snprintf(sn, sizeof sn, "%.*s.scale", (int)(strlen(name) - 7), name);
        ck_tensor *s = ck_find(c, sn);
        if (!s || t->nbytes != rows * cols / 2) return -1;
        s->used = 1;
        for (uint64_t r = 0; r < rows; r++)
            for (uint64_t i = 0; i < cols; i++) {
                uint8_t byte = t->data[r * cols / 2 + i / 2];
                int code = (i & 1) ? byte >> 4 : byte & 15;
                out[r * cols + i] = (float)(ref_e2m1(code) * ref_e8m0(s->data[r * (cols / 32) + i / 32]));
            }
    } else {
        return -1;
    }
    return 0;
}

/* GGUF name -> official name (the table of spec §4.5, written out independently). */
static const char *const name_map[][2] = {
    {"token_embd.weight", "embed.weight"}, {"output_norm.weight", "norm.weight"},
    {"output.weight", "head.weight"}, {"output_hc_base.weight", "hc_head_base"},
    {"output_hc_fn.weight", "hc_head_fn"}, {"output_hc_scale.weight", "hc_head_scale"},
    {"hc_attn_fn.weight", "hc_attn_fn"}, {"hc_attn_base.weight", "hc_attn_base"},
    {"hc_attn_scale.weight", "hc_attn_scale"}, {"hc_ffn_fn.weight", "hc_ffn_fn"},
    {"hc_ffn_base.weight", "hc_ffn_base"}, {"hc_ffn_scale.weight", "hc_ffn_scale"},
    {"attn_norm.weight", "attn_norm.weight"}, {"ffn_norm.weight", "ffn_norm.weight"},
    {"attn_sinks.weight", "attn.attn_sink"}, {"attn_q_a.weight", "attn.wq_a.weight"},
    {"attn_q_a_norm.weight", "attn.q_norm.weight"}, {"attn_q_b.weight", "attn.wq_b.weight"},
    {"attn_kv.weight", "attn.wkv.weight"}, {"attn_kv_a_norm.weight", "attn.kv_norm.weight"},
    {"attn_output_a.weight", "attn.wo_a.weight"}, {"attn_output_b.weight", "attn.wo_b.weight"},
    {"attn_compressor_ape.weight", "attn.compressor.ape"},
    {"attn_compressor_kv.weight", "attn.compressor.wkv.weight"},
    {"attn_compressor_gate.weight", "attn.compressor.wgate.weight"},
    {"attn_compressor_norm.weight", "attn.compressor.norm.weight"},
    {"indexer.attn_q_b.weight", "attn.indexer.wq_b.weight"},
    {"indexer.proj.weight", "attn.indexer.weights_proj.weight"},
    {"indexer_compressor_ape.weight", "attn.indexer.compressor.ape"},
    {"indexer_compressor_kv.weight", "attn.indexer.compressor.wkv.weight"},
    {"indexer_compressor_gate.weight", "attn.indexer.compressor.wgate.weight"},
    {"indexer_compressor_norm.weight", "attn.indexer.compressor.norm.weight"},
    {"ffn_gate_inp.weight", "ffn.gate.weight"}, {"exp_probs_b.bias", "ffn.gate.bias"},
    {"ffn_gate_tid2eid.weight", "ffn.gate.tid2eid"},
    {"ffn_gate_shexp.weight", "ffn.shared_experts.w1.weight"},
    {"ffn_up_shexp.weight", "ffn.shared_experts.w3.weight"},
    {"ffn_down_shexp.weight", "ffn.shared_experts.w2.weight"},
    {"ffn_gate_exps.weight", "w1.weight"}, {"ffn_up_exps.weight", "w3.weight"},
    {"ffn_down_exps.weight", "w2.weight"},
};

/* MTP-only names (spec §4.4/§4.5: "mtp.0.<official name>") */
static const char *const mtp_map[][2] = {
    {"hc_head_base.weight", "hc_head_base"}, {"hc_head_fn.weight", "hc_head_fn"},
    {"hc_head_scale.weight", "hc_head_scale"}, {"e_proj.weight", "e_proj.weight"},
    {"h_proj.weight", "h_proj.weight"}, {"enorm.weight", "enorm.weight"},
    {"hnorm.weight", "hnorm.weight"}, {"norm.weight", "norm.weight"},
};

/* Official name for GGUF tensor `g` (expert e for *_exps); 0 ok. */
static int map_name(const char *g, int e, char *out, size_t n) {
    int layer = -1;
    const char *suf = g;
    if (!strncmp(g, "mtp.0.", 6)) {
        suf = g + 6;
        for (size_t i = 0; i < sizeof mtp_map / sizeof mtp_map[0]; i++)
            if (!strcmp(suf, mtp_map[i][0])) {
                snprintf(out, n, "mtp.0.%s", mtp_map[i][1]);
                return 0;
            }
        for (size_t i = 0; i < sizeof name_map / sizeof name_map[0]; i++) {
            if (strcmp(suf, name_map[i][0])) continue;
            if (strstr(suf, "_exps")) snprintf(out, n, "mtp.0.ffn.experts.%d.%s", e, name_map[i][1]);
            else snprintf(out, n, "mtp.0.%s", name_map[i][1]);
            return 0;
        }
        return -1;
    }
    if (!strncmp(g, "blk.", 4)) {
        layer = atoi(g + 4);
        suf = strchr(g + 4, '.') + 1;
    }
    for (size_t i = 0; i < sizeof name_map / sizeof name_map[0]; i++) {
        if (strcmp(suf, name_map[i][0])) continue;
        if (layer < 0) snprintf(out, n, "%s", name_map[i][1]);
        else if (strstr(suf, "_exps")) snprintf(out, n, "layers.%d.ffn.experts.%d.%s", layer, e, name_map[i][1]);
        else snprintf(out, n, "layers.%d.%s", layer, name_map[i][1]);
        return 0;
    }
    return -1;
}

/* Exact values of GGUF tensor gt (ne0 x rest) from the checkpoint; NULL when it cannot. */
static float *expected_values(ckpt *c, const gguf_tensor *gt) {
    uint64_t ne0 = gt->ne[0], ne1 = gt->ne[1], ne2 = gt->ne[2];
    float *v = malloc(ne0 * ne1 * ne2 * sizeof *v);
    char on[256];
    int parts = strstr(gt->cname, "_exps") ? (int)ne2 : 1;
    for (int e = 0; e < parts; e++) {
        if (map_name(gt->cname, e, on, sizeof on) != 0 ||
            ck_decode(c, on, parts > 1 ? ne1 : ne1 * ne2, ne0, v + (uint64_t)e * ne0 * ne1) != 0) {
            fprintf(stderr, "cannot decode %s for %s\n", on, gt->cname);
            free(v);
            return NULL;
        }
    }
    return v;
}

static int check_tid2eid(ckpt *c, const gguf_tensor *gt) {
    char on[256];
    if (map_name(gt->cname, 0, on, sizeof on) != 0) return -1;
    ck_tensor *t = ck_find(c, on);
    if (!t || strcmp(t->dtype, "I64") || gt->type != GGML_TYPE_I32) return -1;
    t->used = 1;
    uint64_t n = gt->ne[0] * gt->ne[1];
    if (t->nbytes != n * 8) return -1;
    for (uint64_t i = 0; i < n; i++) {
        int64_t want;
        int32_t got;
        memcpy(&want, t->data + 8 * i, 8);
        memcpy(&got, (const uint8_t *)gt->data + 4 * i, 4);
        if (want != got) return -1;
    }
    return 0;
}

static gguf_file *convert_to(const char *out_name, const char *input, const char *experts, const char *dense,
                             char *path, size_t pn) {
    convert_opts o;
    convert_opts_default(&o);
    o.input = input;
    snprintf(path, pn, "%s/%s", test_tmpdir(), out_name);
    o.output = path;
    o.progress = 0;
    if (experts) policy_set_experts(&o.policy, experts);
    if (dense) policy_set_dense(&o.policy, dense);
    char err[1024] = "";
    int rc = convert_model(&o, err, sizeof err);
    CHECK(rc == 0, "convert %s -> %s failed: %s", input, out_name, err);
    if (rc != 0) return NULL;
    gguf_file *g = gguf_open(path, err, sizeof err);
    CHECK(g != NULL, "cannot open %s: %s", path, err);
    return g;
}

/* ---------------------------------------------------------------------------------------- */

static void test_f32_exact(ckpt *c) {
    char path[1024];
    gguf_file *g = convert_to("f32.gguf", ckpt_dir, "f32", "f32", path, sizeof path);
    if (!g) return;
    for (int i = 0; i < c->n; i++) c->t[i].used = 0;
    int n_checked = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *gt = &g->tensors[i];
        if (strstr(gt->cname, "tid2eid")) {
            CHECK(check_tid2eid(c, gt) == 0, "%s differs from the checkpoint's tid2eid", gt->cname);
            n_checked++;
            continue;
        }
        CHECK(gt->type == GGML_TYPE_F32, "%s has type %s under --experts f32 --dense f32", gt->cname, quant_name((int)gt->type));
        if (gt->type != GGML_TYPE_F32) continue;
        float *want = expected_values(c, gt);
        CHECK(want != NULL, "no checkpoint values for %s", gt->cname);
        if (!want) continue;
        uint64_t nel = gt->ne[0] * gt->ne[1] * gt->ne[2];
        uint64_t bad = 0;
        for (uint64_t k = 0; k < nel; k++)
            if (memcmp(&want[k], (const float *)gt->data + k, 4) != 0) bad++;
        CHECK(bad == 0, "%s: %llu of %llu values differ from the exact dequantized checkpoint", gt->cname,
              (unsigned long long)bad, (unsigned long long)nel);
        free(want);
        n_checked++;
    }
    int unused = 0;
    for (int i = 0; i < c->n; i++)
        if (!c->t[i].used) {
            unused++;
            fprintf(stderr, "checkpoint tensor %s not used\n", c->t[i].name);
        }
    CHECK(unused == 0, "%d checkpoint tensors were not converted", unused);
    CHECK(n_checked > 100, "only %d tensors checked", n_checked);
    fprintf(stderr, "f32: %d tensors bit-exact, every checkpoint tensor used\n", n_checked);
    gguf_close(g);
}

static void test_mxfp4_lossless(ckpt *c) {
    char path[1024];
    gguf_file *g = convert_to("mxfp4.gguf", ckpt_dir, "mxfp4", NULL, path, sizeof path);
    if (!g) return;
    int n_exps = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *gt = &g->tensors[i];
        if (!strstr(gt->cname, "_exps")) continue;
        n_exps++;
        CHECK(gt->type == GGML_TYPE_MXFP4, "%s has type %s", gt->cname, quant_name((int)gt->type));
        if (gt->type != GGML_TYPE_MXFP4) continue;
        uint64_t ne0 = gt->ne[0], ne1 = gt->ne[1];
        uint64_t bad = 0;
        for (uint64_t e = 0; e < gt->ne[2]; e++) {
            char on[256], sn[256];
            map_name(gt->cname, (int)e, on, sizeof on);
            snprintf(sn, sizeof sn, "%.*s.scale", (int)(strlen(on) - 7), on);
            ck_tensor *w = ck_find(c, on), *s = ck_find(c, sn);
            CHECK(w && s, "checkpoint lacks %s", on);
            if (!w || !s) continue;
            for (uint64_t r = 0; r < ne1; r++)
                for (uint64_t b = 0; b < ne0 / 32; b++) {
                    const uint8_t *blk = (const uint8_t *)gt->data + ((e * ne1 + r) * (ne0 / 32) + b) * 17;
                    if (blk[0] != s->data[r * (ne0 / 32) + b]) bad++;
                    for (int j = 0; j < 32; j++) {
                        uint64_t col = b * 32 + (uint64_t)j;
                        uint8_t ob = w->data[r * (ne0 / 2) + col / 2];
                        int want = (col & 1) ? ob >> 4 : ob & 15;
                        int got = j < 16 ? blk[1 + j] & 15 : blk[1 + j - 16] >> 4;
                        if (want != got) bad++;
                    }
                }
        }
        CHECK(bad == 0, "%s: %llu scale bytes / codes differ from the checkpoint's FP4", gt->cname, (unsigned long long)bad);
    }
    CHECK(n_exps == 18, "expected 18 expert tensors, found %d", n_exps);
    fprintf(stderr, "mxfp4: %d expert tensors carry the checkpoint's FP4 codes and scales unchanged\n", n_exps);
    gguf_close(g);
}

/* Error bound check of one quantized/rounded tensor against the exact values. */
static void check_quantized(const gguf_tensor *gt, const float *want, int check_rows_every) {
    const quant_traits *q = quant_get((int)gt->type);
    uint64_t ne0 = gt->ne[0], rows = gt->ne[1] * gt->ne[2];
    uint64_t rb = quant_row_bytes((int)gt->type, (int64_t)ne0);
    float *deq = malloc(ne0 * sizeof *deq);
    uint8_t *mine = malloc(rb);
    double se = 0, sx = 0;
    uint64_t bytes_bad = 0, bound_bad = 0;
    for (uint64_t r = 0; r < rows; r++) {
        const uint8_t *row = (const uint8_t *)gt->data + r * rb;
        const float *x = want + r * ne0;
        q->dequant(row, deq, (int64_t)ne0);
        /* the converter must produce exactly what the quantizer makes of the exact values */
        if (r % (uint64_t)check_rows_every == 0) {
            q->quant(x, mine, (int64_t)ne0);
            if (memcmp(mine, row, rb) != 0) bytes_bad++;
        }
        for (uint64_t i = 0; i < ne0; i++) {
            double d = (double)deq[i] - x[i];
            se += d * d;
            sx += (double)x[i] * x[i];
        }
        if (gt->type == GGML_TYPE_F16) {
            for (uint64_t i = 0; i < ne0; i++)
                if (fabs((double)deq[i] - x[i]) > fabs(x[i]) * ldexp(1, -11) + ldexp(1, -25)) bound_bad++;
        } else if (gt->type == GGML_TYPE_Q8_0) {
            for (uint64_t b = 0; b < ne0 / 32; b++) {
                double amax = 0;
                for (int j = 0; j < 32; j++) amax = fmax(amax, fabs(x[b * 32 + j]));
                for (int j = 0; j < 32; j++)
                    if (fabs((double)deq[b * 32 + j] - x[b * 32 + j]) > 0.6 * amax / 127 + 1e-30) bound_bad++;
            }
        }
    }
    double rel = sx > 0 ? sqrt(se / sx) : 0;
    double limit = gt->type == GGML_TYPE_F16 ? 1e-3 : gt->type == GGML_TYPE_Q8_0 ? 0.01
                 : gt->type == GGML_TYPE_Q2_K ? 0.35 : gt->type == GGML_TYPE_IQ2_XXS ? 0.45 : 0;
    if (strstr(gt->cname, "blk.3.")) fprintf(stderr, "%s (%s): relative RMS error %.4f (limit %g)\n", gt->cname, q->name, rel, limit);
    CHECK(bytes_bad == 0, "%s (%s): %llu rows differ from quantizing the exact values", gt->cname, q->name,
          (unsigned long long)bytes_bad);
    CHECK(bound_bad == 0, "%s (%s): %llu values outside the format's error bound", gt->cname, q->name, (unsigned long long)bound_bad);
    CHECK(rel <= limit, "%s (%s): relative RMS error %.4f > %.4f", gt->cname, q->name, rel, limit);
    free(deq);
    free(mine);
}

static void test_default_policy(ckpt *c, int quick) {
    char path[1024];
    gguf_file *g = convert_to("q2.gguf", ckpt_dir, NULL, NULL, path, sizeof path);
    if (!g) return;
    int counts[GGML_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *gt = &g->tensors[i];
        if (gt->type < GGML_TYPE_COUNT) counts[gt->type]++;
        if (strstr(gt->cname, "tid2eid")) {
            CHECK(check_tid2eid(c, gt) == 0, "%s differs", gt->cname);
            continue;
        }
        /* ds4 q2 layout types */
        int want_type = strstr(gt->cname, "ffn_down_exps") ? GGML_TYPE_Q2_K
                      : strstr(gt->cname, "_exps") ? GGML_TYPE_IQ2_XXS
                      : strstr(gt->cname, "indexer") && !strstr(gt->cname, "_norm") ? GGML_TYPE_F16
                      : (strstr(gt->cname, "attn_q_a.") || strstr(gt->cname, "attn_q_b.") || strstr(gt->cname, "attn_kv.") ||
                         strstr(gt->cname, "attn_output_") || strstr(gt->cname, "shexp") || !strcmp(gt->cname, "output.weight"))
                          ? GGML_TYPE_Q8_0
                      : (strstr(gt->cname, "_fn.") || strstr(gt->cname, "compressor_kv") || strstr(gt->cname, "compressor_gate") ||
                         strstr(gt->cname, "compressor_ape") || strstr(gt->cname, "gate_inp") ||
                         !strcmp(gt->cname, "token_embd.weight"))
                          ? GGML_TYPE_F16
                          : GGML_TYPE_F32;
        CHECK((int)gt->type == want_type, "%s has type %s, ds4's q2 layout has %s", gt->cname, quant_name((int)gt->type),
              quant_name(want_type));
        float *want = expected_values(c, gt);
        if (!want) {
            CHECK(0, "no values for %s", gt->cname);
            continue;
        }
        if (gt->type == GGML_TYPE_F32) {
            CHECK(!memcmp(want, gt->data, gt->ne[0] * gt->ne[1] * gt->ne[2] * 4), "%s: F32 values differ", gt->cname);
        } else {
            /* IQ2_XXS quantization is slow: check the quantizer bytes on a sample of rows in quick mode */
            int every = gt->type == GGML_TYPE_IQ2_XXS ? 16 : 1;
            check_quantized(gt, want, every);
        }
        free(want);
    }
    fprintf(stderr, "default policy: F32 %d, F16 %d, Q8_0 %d, IQ2_XXS %d, Q2_K %d, I32 %d tensors checked\n",
            counts[GGML_TYPE_F32], counts[GGML_TYPE_F16], counts[GGML_TYPE_Q8_0], counts[GGML_TYPE_IQ2_XXS],
            counts[GGML_TYPE_Q2_K], counts[GGML_TYPE_I32]);
    CHECK(counts[GGML_TYPE_IQ2_XXS] == 12 && counts[GGML_TYPE_Q2_K] == 6, "expert type counts wrong");

    /* GGUF -> GGUF: the F32 twin of the q2 file is its exact dequantization */
    char path2[1024];
    gguf_file *twin = convert_to("q2-twin.gguf", path, "f32", "f32", path2, sizeof path2);
    if (twin) {
        CHECK(twin->n_tensors == g->n_tensors, "twin has %llu tensors, source %llu", (unsigned long long)twin->n_tensors,
              (unsigned long long)g->n_tensors);
        int bad = 0;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const gguf_tensor *s = &g->tensors[i];
            const gguf_tensor *t = gguf_find_tensor(twin, s->cname);
            if (!t) {
                bad++;
                continue;
            }
            uint64_t nel = s->ne[0] * s->ne[1] * s->ne[2];
            if (s->type == GGML_TYPE_I32) {
                if (t->type != GGML_TYPE_I32 || memcmp(s->data, t->data, nel * 4)) bad++;
                continue;
            }
            float *d = malloc(nel * sizeof *d);
            quant_get((int)s->type)->dequant(s->data, d, (int64_t)nel);
            if (t->type != GGML_TYPE_F32 || memcmp(d, t->data, nel * 4)) {
                bad++;
                fprintf(stderr, "twin %s differs\n", s->cname);
            }
            free(d);
        }
        CHECK(bad == 0, "%d tensors of the F32 twin are not the exact dequantization", bad);
        /* and the metadata (config + tokenizer-less) survives */
        uint32_t nl = 0;
        CHECK(gguf_get_u32(twin, "deepseek4.block_count", &nl) == 0 && nl == 6, "twin block_count %u", nl);
        gguf_close(twin);
    }
    gguf_close(g);
}

/* ---------------------------------------------------------------------------------------- */
/* bad inputs */

/* Write dir/config.json (copy or given text) and dir/model.safetensors with header `h` and the fixture's data. */
static void make_variant(const char *dir, ckpt *c, json_t *h, const char *config_text) {
    mkdir(dir, 0755);
    char p[1024];
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (config_text) write_all(p, config_text, strlen(config_text));
    else {
        char src[1024];
        size_t n;
        snprintf(src, sizeof src, "%s/config.json", ckpt_dir);
        uint8_t *b = test_read_file(src, &n);
        write_all(p, b, n);
        free(b);
    }
    char *hs = json_dumps(h, JSON_COMPACT);
    size_t hl = strlen(hs);
    size_t padded = (hl + 7) / 8 * 8;
    uint64_t old_hl;
    memcpy(&old_hl, c->file, 8);
    uint64_t data_n = c->size - 8 - old_hl;
    uint8_t *buf = malloc(8 + padded + data_n);
    uint64_t hl64 = padded;
    memcpy(buf, &hl64, 8);
    memcpy(buf + 8, hs, hl);
    memset(buf + 8 + hl, ' ', padded - hl);
    memcpy(buf + 8 + padded, c->file + 8 + old_hl, data_n);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    write_all(p, buf, 8 + padded + data_n);
    free(buf);
    free(hs);
}

static void expect_fail(const char *what, const char *dir, const char *needle1, const char *needle2) {
    convert_opts o;
    convert_opts_default(&o);
    char out[1024];
    snprintf(out, sizeof out, "%s/bad.gguf", test_tmpdir());
    unlink(out);
    o.input = dir;
    o.output = out;
    o.progress = 0;
    policy_set_experts(&o.policy, "f32");
    policy_set_dense(&o.policy, "f32");
    char err[1024] = "";
    int rc = convert_model(&o, err, sizeof err);
    CHECK(rc != 0, "%s: convert succeeded", what);
    CHECK(strstr(err, needle1) != NULL, "%s: message '%s' lacks '%s'", what, err, needle1);
    if (needle2) CHECK(strstr(err, needle2) != NULL, "%s: message '%s' lacks '%s'", what, err, needle2);
    CHECK(access(out, F_OK) != 0, "%s: an output file was left behind", what);
    fprintf(stderr, "%s -> %s\n", what, err);
}

static void test_errors(ckpt *c) {
    char dir[1024];
    /* missing tensor */
    json_t *h = json_deep_copy(c->header);
    json_object_del(h, "layers.3.attn.wq_a.weight");
    snprintf(dir, sizeof dir, "%s/missing", test_tmpdir());
    make_variant(dir, c, h, NULL);
    expect_fail("missing tensor", dir, "lacks tensor", "layers.3.attn.wq_a.weight");
    json_decref(h);
    /* missing FP8 scale */
    h = json_deep_copy(c->header);
    json_object_del(h, "layers.1.ffn.shared_experts.w2.scale");
    snprintf(dir, sizeof dir, "%s/noscale", test_tmpdir());
    make_variant(dir, c, h, NULL);
    expect_fail("missing scale", dir, "layers.1.ffn.shared_experts.w2.scale", NULL);
    json_decref(h);
    /* wrong shape (same byte count) */
    h = json_deep_copy(c->header);
    json_t *sh = json_object_get(json_object_get(h, "layers.2.attn.wkv.weight"), "shape");
    json_array_set_new(sh, 0, json_integer(64));
    json_array_set_new(sh, 1, json_integer(512));
    snprintf(dir, sizeof dir, "%s/shape", test_tmpdir());
    make_variant(dir, c, h, NULL);
    expect_fail("wrong shape", dir, "shape", "layers.2.attn.wkv.weight");
    json_decref(h);
    /* unreadable dtype */
    h = json_deep_copy(c->header);
    json_object_set_new(json_object_get(h, "norm.weight"), "dtype", json_string("I16"));
    snprintf(dir, sizeof dir, "%s/dtype", test_tmpdir());
    make_variant(dir, c, h, NULL);
    expect_fail("unknown dtype", dir, "dtype", "norm.weight");
    json_decref(h);
    /* data range past the end */
    h = json_deep_copy(c->header);
    json_t *off = json_object_get(json_object_get(h, "embed.weight"), "data_offsets");
    json_array_set_new(off, 1, json_integer((json_int_t)c->size * 2));
    snprintf(dir, sizeof dir, "%s/range", test_tmpdir());
    make_variant(dir, c, h, NULL);
    expect_fail("data range", dir, "corrupt", "embed.weight");
    json_decref(h);
    /* not DeepSeek V4 */
    snprintf(dir, sizeof dir, "%s/llama", test_tmpdir());
    make_variant(dir, c, c->header, "{\"model_type\": \"llama\", \"hidden_size\": 256}");
    expect_fail("llama config", dir, "not a DeepSeek V4", NULL);
    snprintf(dir, sizeof dir, "%s/nohc", test_tmpdir());
    make_variant(dir, c, c->header, "{\"dim\": 256, \"n_layers\": 6, \"vocab_size\": 1024}");
    expect_fail("config without V4 keys", dir, "not a DeepSeek V4", NULL);
    /* corrupt header: garbage JSON and a header length beyond the file */
    snprintf(dir, sizeof dir, "%s/garbage", test_tmpdir());
    make_variant(dir, c, c->header, NULL);
    char p[1100];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    FILE *fp = fopen(p, "r+b");
    if (fp) {
        fseek(fp, 8, SEEK_SET);
        fwrite("{\"x\": [1,", 1, 9, fp);
        fclose(fp);
    }
    expect_fail("garbage header", dir, "corrupt", "model.safetensors");
    snprintf(dir, sizeof dir, "%s/hlen", test_tmpdir());
    make_variant(dir, c, c->header, NULL);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    fp = fopen(p, "r+b");
    if (fp) {
        uint64_t big = 1ull << 40;
        fwrite(&big, 8, 1, fp);
        fclose(fp);
    }
    expect_fail("header length", dir, "corrupt", NULL);
    /* truncated file */
    snprintf(dir, sizeof dir, "%s/trunc", test_tmpdir());
    make_variant(dir, c, c->header, NULL);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (truncate(p, (off_t)(c->size / 2)) != 0) perror("truncate");
    expect_fail("truncated file", dir, "corrupt", NULL);
    /* no such directory */
    snprintf(dir, sizeof dir, "%s/nonexistent", test_tmpdir());
    expect_fail("missing input", dir, "config.json", NULL);
}

/* The tiny-a checkpoint widened to the real vocabulary (embed, head and tid2eid of 129280 rows,
 * values k/64 so BF16 -> F16 is exact) converted together with the DeepSeek tokenizer.json. */
static void test_with_tokenizer(ckpt *c) {
    const uint64_t V = 129280, D = 256;
    const char *tok = "tests/fixtures/tokenizer/deepseek_v4_tokenizer.json";
    if (access(tok, R_OK) != 0) {
        fprintf(stderr, "no %s: tokenizer test skipped\n", tok);
        return;
    }
    char dir[1024], p[1100];
    snprintf(dir, sizeof dir, "%s/bigvocab", test_tmpdir());
    mkdir(dir, 0755);
    /* config with the new vocabulary */
    snprintf(p, sizeof p, "%s/config.json", ckpt_dir);
    json_t *cfg = json_load_file(p, 0, NULL);
    json_object_set_new(cfg, "vocab_size", json_integer((json_int_t)V));
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_dump_file(cfg, p, 0);
    json_decref(cfg);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    if (symlink("../../../../../tests/fixtures/tokenizer/deepseek_v4_tokenizer.json", p) != 0 || access(p, R_OK) != 0) {
        /* tmpdir may live elsewhere: fall back to an absolute link */
        char cwd[700], abs_tok[1000];
        unlink(p);
        if (getcwd(cwd, sizeof cwd)) snprintf(abs_tok, sizeof abs_tok, "%s/%s", cwd, tok);
        if (symlink(abs_tok, p) != 0) perror("symlink");
    }
    /* header: old tensors keep their data; the widened ones are appended */
    uint64_t old_hl;
    memcpy(&old_hl, c->file, 8);
    uint64_t data_n = c->size - 8 - old_hl;
    json_t *h = json_deep_copy(c->header);
    uint64_t extra = 2 * V * D * 2 + 3 * V * 6 * 8;
    uint8_t *add = malloc(extra), *q = add;
    uint64_t off = data_n;
    const char *wide[5] = {"embed.weight", "head.weight", "layers.0.ffn.gate.tid2eid", "layers.1.ffn.gate.tid2eid",
                           "layers.2.ffn.gate.tid2eid"};
    for (int k = 0; k < 5; k++) {
        json_t *e = json_object_get(h, wide[k]);
        int is_tid = k >= 2;
        uint64_t cols = is_tid ? 6 : D, es = is_tid ? 8 : 2, nb = V * cols * es;
        json_t *shape = json_array(), *offs = json_array();
        json_array_append_new(shape, json_integer((json_int_t)V));
        json_array_append_new(shape, json_integer((json_int_t)cols));
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + nb)));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", offs);
        for (uint64_t i = 0; i < V * cols; i++) {
            if (is_tid) {
                int64_t v = (int64_t)((i / 6 + (i % 6) * 3 + (uint64_t)k) % 16);
                memcpy(q + 8 * i, &v, 8);
            } else {
                float f = (float)((int)((i * 7 + (uint64_t)k) % 129) - 64) / 64.0f;
                uint32_t u;
                memcpy(&u, &f, 4);
                uint16_t b = (uint16_t)(u >> 16);
                memcpy(q + 2 * i, &b, 2);
            }
        }
        q += nb;
        off += nb;
    }
    char *hs = json_dumps(h, JSON_COMPACT);
    size_t hl = strlen(hs), padded = (hl + 7) / 8 * 8;
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    FILE *fp = fopen(p, "wb");
    uint64_t hl64 = padded;
    fwrite(&hl64, 8, 1, fp);
    fwrite(hs, 1, hl, fp);
    for (size_t i = hl; i < padded; i++) fputc(' ', fp);
    fwrite(c->file + 8 + old_hl, 1, data_n, fp);
    fwrite(add, 1, extra, fp);
    fclose(fp);
    free(hs);
    json_decref(h);

    char out[1024];
    gguf_file *g = convert_to("bigvocab.gguf", dir, "mxfp4", NULL, out, sizeof out);
    if (g) {
        const gguf_kv *kv = gguf_find_kv(g, "tokenizer.ggml.tokens");
        CHECK(kv && kv->type == GGUF_ARRAY && kv->arr_n == V, "tokenizer.ggml.tokens missing or wrong length");
        CHECK(gguf_find_kv(g, "tokenizer.ggml.merges") != NULL, "no merges");
        const gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
        CHECK(te && te->type == GGML_TYPE_F16 && te->ne[1] == V, "token_embd wrong");
        if (te) {
            uint64_t bad = 0;
            const uint8_t *eb = add;
            for (uint64_t i = 0; i < V * D; i += 997) {
                uint16_t h16;
                memcpy(&h16, (const uint8_t *)te->data + 2 * i, 2);
                if (f16_to_f32(h16) != ref_bf16(eb + 2 * i)) bad++;
            }
            CHECK(bad == 0, "token_embd: %llu sampled values differ", (unsigned long long)bad);
        }
        const gguf_tensor *tt = gguf_find_tensor(g, "blk.2.ffn_gate_tid2eid.weight");
        CHECK(tt && tt->type == GGML_TYPE_I32 && tt->ne[0] == 6 && tt->ne[1] == V, "tid2eid wrong");
        if (tt) {
            const uint8_t *tb = add + 2 * V * D * 2 + 2 * V * 6 * 8;
            uint64_t bad = 0;
            for (uint64_t i = 0; i < V * 6; i++) {
                int64_t want;
                memcpy(&want, tb + 8 * i, 8);
                if (((const int32_t *)tt->data)[i] != want) bad++;
            }
            CHECK(bad == 0, "tid2eid: %llu values differ", (unsigned long long)bad);
        }
        gguf_close(g);
        fprintf(stderr, "tokenizer: converted with the DeepSeek tokenizer (%llu tokens)\n", (unsigned long long)V);
    }
    free(add);
}

/* A checkpoint with an MTP block: mtp.0.* header entries aliasing existing data (layer 5's
 * attention/FFN, the shared expert matrices as e_proj/h_proj, the final norm as the MTP norms),
 * converted with --mtp-out: every MTP tensor equals its decoded official tensor. */
static void test_mtp(ckpt *c) {
    char dir[1024], p[1100];
    snprintf(dir, sizeof dir, "%s/withmtp", test_tmpdir());
    json_t *h = json_deep_copy(c->header);
    const char *k;
    json_t *v;
    json_t *add = json_object();
    json_object_foreach(c->header, k, v) {
        char nk[300];
        if (!strncmp(k, "layers.5.", 9) && !strstr(k, "compressor") && !strstr(k, "indexer")) {
            snprintf(nk, sizeof nk, "mtp.0.%s", k + 9);
            json_object_set_new(add, nk, json_deep_copy(v));
        } else if (!strncmp(k, "hc_head_", 8)) {
            snprintf(nk, sizeof nk, "mtp.0.%s", k);
            json_object_set_new(add, nk, json_deep_copy(v));
        }
    }
    static const char *const alias[][2] = {
        {"mtp.0.e_proj.weight", "layers.5.ffn.shared_experts.w1.weight"},
        {"mtp.0.e_proj.scale", "layers.5.ffn.shared_experts.w1.scale"},
        {"mtp.0.h_proj.weight", "layers.5.ffn.shared_experts.w3.weight"},
        {"mtp.0.h_proj.scale", "layers.5.ffn.shared_experts.w3.scale"},
        {"mtp.0.enorm.weight", "norm.weight"}, {"mtp.0.hnorm.weight", "layers.5.attn_norm.weight"},
        {"mtp.0.norm.weight", "layers.5.ffn_norm.weight"},
    };
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        json_object_set_new(add, alias[i][0], json_deep_copy(json_object_get(c->header, alias[i][1])));
    json_object_update(h, add);
    json_decref(add);
    make_variant(dir, c, h, NULL);
    json_decref(h);

    convert_opts o;
    convert_opts_default(&o);
    char out[1024], mout[1024], err[1024] = "";
    snprintf(out, sizeof out, "%s/main-mtp.gguf", test_tmpdir());
    snprintf(mout, sizeof mout, "%s/mtp.gguf", test_tmpdir());
    o.input = dir;
    o.output = out;
    o.mtp_output = mout;
    o.progress = 0;
    policy_set_experts(&o.policy, "f32");
    policy_set_dense(&o.policy, "f32");
    int rc = convert_model(&o, err, sizeof err);
    CHECK(rc == 0, "convert with --mtp-out: %s", err);
    if (rc != 0) return;
    ckpt c2;
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (ckpt_load(&c2, p) != 0) {
        CHECK(0, "cannot reload %s", p);
        return;
    }
    gguf_file *g = gguf_open(mout, err, sizeof err), *gm = gguf_open(out, err, sizeof err);
    CHECK(g && gm, "cannot open the outputs: %s", err);
    if (g && gm) {
        CHECK(g->n_tensors == 32, "MTP file has %llu tensors, spec §4.4 lists 32", (unsigned long long)g->n_tensors);
        dsv4_config cfg;
        CHECK(dsv4_config_from_gguf(gm, &cfg, err, sizeof err) == 0, "main config: %s", err);
        CHECK(dsv4_check_mtp_tensors(g, &cfg, err, sizeof err) == 0, "dsv4_check_mtp_tensors: %s", err);
        int bad = 0;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const gguf_tensor *gt = &g->tensors[i];
            CHECK(gt->type == GGML_TYPE_F32, "%s: type %s", gt->cname, quant_name((int)gt->type));
            float *want = expected_values(&c2, gt);
            uint64_t nel = gt->ne[0] * gt->ne[1] * gt->ne[2];
            if (!want || gt->type != GGML_TYPE_F32 || memcmp(want, gt->data, nel * 4)) {
                bad++;
                fprintf(stderr, "MTP %s differs from its official tensor\n", gt->cname);
            }
            free(want);
        }
        CHECK(bad == 0, "%d MTP tensors differ", bad);
        fprintf(stderr, "mtp: %llu MTP tensors written and bit-exact\n", (unsigned long long)g->n_tensors);
    }
    if (g) gguf_close(g);
    if (gm) gguf_close(gm);
    json_decref(c2.header);
    free(c2.t);
    free(c2.file);
    /* without an MTP block --mtp-out is an error */
    o.input = ckpt_dir;
    snprintf(out, sizeof out, "%s/nomtp.gguf", test_tmpdir());
    o.output = out;
    rc = convert_model(&o, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "MTP"), "--mtp-out on a checkpoint without MTP: rc %d '%s'", rc, err);
    CHECK(access(out, F_OK) != 0, "output left behind");
}

/* Write the tensors of c whose index i satisfies i % n_shards == shard into one safetensors file. */
static void write_shard(ckpt *c, const char *path, int shard, int n_shards, json_t *weight_map, const char *fname) {
    json_t *h = json_object();
    uint64_t off = 0;
    for (int i = 0; i < c->n; i++) {
        if (i % n_shards != shard) continue;
        ck_tensor *t = &c->t[i];
        json_t *e = json_deep_copy(json_object_get(c->header, t->name));
        json_t *offs = json_array();
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + t->nbytes)));
        json_object_set_new(e, "data_offsets", offs);
        json_object_set_new(h, t->name, e);
        if (weight_map) json_object_set_new(weight_map, t->name, json_string(fname));
        off += t->nbytes;
    }
    char *hs = json_dumps(h, JSON_COMPACT);
    size_t hl = strlen(hs), padded = (hl + 7) / 8 * 8;
    FILE *fp = fopen(path, "wb");
    uint64_t hl64 = padded;
    fwrite(&hl64, 8, 1, fp);
    fwrite(hs, 1, hl, fp);
    for (size_t i = hl; i < padded; i++) fputc(' ', fp);
    for (int i = 0; i < c->n; i++)
        if (i % n_shards == shard) fwrite(c->t[i].data, 1, c->t[i].nbytes, fp);
    fclose(fp);
    free(hs);
    json_decref(h);
}

/* The checkpoint split into 3 shards, with and without model.safetensors.index.json, converts to
 * exactly the same file as the single-file checkpoint. */
static void test_sharded(ckpt *c) {
    char ref[1024];
    gguf_file *g0 = convert_to("single.gguf", ckpt_dir, "mxfp4", "f32", ref, sizeof ref);
    if (!g0) return;
    gguf_close(g0);
    size_t n0;
    uint8_t *b0 = test_read_file(ref, &n0);
    for (int with_index = 0; with_index < 2; with_index++) {
        char dir[1024], p[1200], src[1024];
        snprintf(dir, sizeof dir, "%s/sharded%d", test_tmpdir(), with_index);
        mkdir(dir, 0755);
        snprintf(src, sizeof src, "%s/config.json", ckpt_dir);
        snprintf(p, sizeof p, "%s/config.json", dir);
        size_t n;
        uint8_t *cfg = test_read_file(src, &n);
        write_all(p, cfg, n);
        free(cfg);
        json_t *wm = json_object();
        for (int sh = 0; sh < 3; sh++) {
            char fname[64];
            snprintf(fname, sizeof fname, "model-%05d-of-00003.safetensors", sh + 1);
            snprintf(p, sizeof p, "%s/%s", dir, fname);
            write_shard(c, p, sh, 3, wm, fname);
        }
        if (with_index) {
            json_t *idx = json_object();
            json_object_set_new(idx, "metadata", json_object());
            json_object_set(idx, "weight_map", wm);
            snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
            json_dump_file(idx, p, JSON_INDENT(1));
            json_decref(idx);
        }
        json_decref(wm);
        char out[1024], name[64];
        snprintf(name, sizeof name, "sharded%d.gguf", with_index);
        gguf_file *g = convert_to(name, dir, "mxfp4", "f32", out, sizeof out);
        if (!g) continue;
        gguf_close(g);
        uint8_t *b = test_read_file(out, &n);
        CHECK(b && n == n0 && !memcmp(b, b0, n), "3 shards (%s index) convert to a different file", with_index ? "with" : "without");
        free(b);
    }
    /* the Hugging Face config.json (DeepseekV4Config keys) describes the same model */
    {
        char hdir[1024], hp[1200], src[1024];
        snprintf(hdir, sizeof hdir, "%s/sharded0", test_tmpdir());
        snprintf(src, sizeof src, "%s/hf_config.json", ckpt_dir);
        snprintf(hp, sizeof hp, "%s/config.json", hdir);
        size_t n;
        uint8_t *cfg = test_read_file(src, &n);
        if (cfg) {
            write_all(hp, cfg, n);
            free(cfg);
            char out[1024];
            gguf_file *g = convert_to("hfconfig.gguf", hdir, "mxfp4", "f32", out, sizeof out);
            if (g) {
                gguf_close(g);
                uint8_t *b = test_read_file(out, &n);
                CHECK(b && n == n0 && !memcmp(b, b0, n), "the HF config.json gives a different file than the official one");
                free(b);
            }
        }
    }
    /* an index naming a shard that is not there */
    char dir[1024], p[1200];
    snprintf(dir, sizeof dir, "%s/sharded1", test_tmpdir());
    snprintf(p, sizeof p, "%s/model-00002-of-00003.safetensors", dir);
    unlink(p);
    expect_fail("missing shard", dir, "model-00002-of-00003.safetensors", NULL);
    free(b0);
    fprintf(stderr, "sharded: 3 shards with and without an index, and the HF config.json, give the same file\n");
}

/* Random damage to a small safetensors file: the reader reports an error or reads it, never crashes
 * (the interesting part runs under ASan). Tensors it accepts must lie inside the file. */
static void test_reader_fuzz(ckpt *c) {
    char path[1024];
    snprintf(path, sizeof path, "%s/small.safetensors", test_tmpdir());
    write_shard(c, path, 0, 100, NULL, NULL);
    size_t n;
    uint8_t *orig = test_read_file(path, &n);
    if (!orig) return;
    uint64_t hl;
    memcpy(&hl, orig, 8);
    uint8_t *buf = malloc(n);
    uint64_t st = 12345;
    int errors = 0, accepted = 0;
    for (int it = 0; it < 300; it++) {
        memcpy(buf, orig, n);
        int flips = 1 + it % 4;
        for (int f = 0; f < flips; f++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t pos = (st >> 20) % (8 + hl);
            buf[pos] = (uint8_t)(st >> 52);
        }
        uint64_t len = (it % 7 == 0) ? n - (st >> 40) % n : n; /* sometimes truncated too */
        write_all(path, buf, len);
        char err[512] = "";
        st_set *s = st_open_file(path, err, sizeof err);
        if (!s) {
            errors++;
            CHECK(err[0] != 0, "iteration %d: error without a message", it);
            continue;
        }
        accepted++;
        for (int64_t i = 0; i < s->n_tensors; i++) {
            const st_tensor *t = &s->tensors[i];
            CHECK(t->data >= s->shards[0].map && t->data + t->nbytes <= s->shards[0].map + s->shards[0].size,
                  "iteration %d: tensor %s outside the file", it, t->name);
        }
        st_close(s);
    }
    fprintf(stderr, "reader fuzz: %d damaged files refused, %d still readable, no crash\n", errors, accepted);
    CHECK(errors > 0, "no damaged file was refused");
    free(buf);
    free(orig);
}

/* F16 source tensors (tiny-a has F32, BF16, FP8, FP4 and I64 but no F16): two BF16 tensors
 * re-stored as F16 (the same values, exactly representable) convert to the same F32 values. */
static void test_other_float_dtypes(ckpt *c) {
    char dir[1024], p[1200];
    snprintf(dir, sizeof dir, "%s/f16src", test_tmpdir());
    json_t *h = json_deep_copy(c->header);
    json_object_set_new(json_object_get(h, "norm.weight"), "dtype", json_string("F16"));
    json_object_set_new(json_object_get(h, "layers.0.ffn.gate.weight"), "dtype", json_string("F16"));
    make_variant(dir, c, h, NULL);
    json_decref(h);
    /* rewrite the two tensors' bytes as F16 of the same values */
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    size_t n;
    uint8_t *b = test_read_file(p, &n);
    uint64_t hl, old_hl;
    memcpy(&hl, b, 8);
    memcpy(&old_hl, c->file, 8);
    const char *names[2] = {"norm.weight", "layers.0.ffn.gate.weight"};
    for (int k = 0; k < 2; k++) {
        ck_tensor *t = ck_find(c, names[k]);
        uint64_t off = (uint64_t)(t->data - (c->file + 8 + old_hl));
        uint8_t *d = b + 8 + hl + off;
        for (uint64_t i = 0; i < t->nbytes / 2; i++) {
            uint16_t h16 = f32_to_f16(ref_bf16(t->data + 2 * i));
            memcpy(d + 2 * i, &h16, 2);
        }
    }
    write_all(p, b, n);
    free(b);
    char out[1024], ref[1024];
    gguf_file *g = convert_to("f16src.gguf", dir, "f32", "f32", out, sizeof out);
    gguf_file *r = convert_to("f16ref.gguf", ckpt_dir, "f32", "f32", ref, sizeof ref);
    if (g && r) {
        const char *gn[2] = {"output_norm.weight", "blk.0.ffn_gate_inp.weight"};
        for (int k = 0; k < 2; k++) {
            const gguf_tensor *a = gguf_find_tensor(g, gn[k]), *e = gguf_find_tensor(r, gn[k]);
            CHECK(a && e && a->nbytes == e->nbytes && !memcmp(a->data, e->data, a->nbytes), "%s from F16 differs", gn[k]);
        }
        fprintf(stderr, "F16 source tensors convert exactly\n");
    }
    if (g) gguf_close(g);
    if (r) gguf_close(r);
}

int main(void) {
    int quick = getenv("MINKE_ASAN") && atoi(getenv("MINKE_ASAN"));
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", ckpt_dir);
    ckpt c;
    if (ckpt_load(&c, path) != 0) {
        fprintf(stderr, "FAIL: cannot read %s (run from the repository root)\n", path);
        return 1;
    }
    test_f32_exact(&c);
    test_mxfp4_lossless(&c);
    test_errors(&c);
    test_with_tokenizer(&c);
    test_mtp(&c);
    test_sharded(&c);
    test_reader_fuzz(&c);
    test_other_float_dtypes(&c);
    /* the IQ2_XXS quantizer is too slow under sanitizers for the whole default-policy pass */
    if (!quick) test_default_policy(&c, quick);
    else fprintf(stderr, "MINKE_ASAN: default-policy conversion skipped\n");
    json_decref(c.header);
    free(c.t);
    free(c.file);
    return test_finish("test_convert");
}
