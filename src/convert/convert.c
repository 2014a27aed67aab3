/* convert.c: the conversion driver (see convert.h).
 *
 * For each output tensor (ds4 order from dsv4_tensor_specs) the rows are
 * produced chunk by chunk: worker threads decode source rows to f32 (or copy
 * / repack them when no requantization is needed) and quantize them into an
 * output buffer; a writer thread appends the previous chunk to the GGUF
 * meanwhile. Everything the conversion needs is checked before the output
 * file is created, so errors never leave a partial file.
 */
#define _GNU_SOURCE
#include "convert/convert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert/official.h"
#include "convert/rowpool.h"
#include "convert/safetensors.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "quant/quant.h"
#include "text/tokjson.h"

#define CHUNK_OUT_BYTES (64ull << 20)
#define GRAIN_FLOATS (1 << 18)

void convert_opts_default(convert_opts *o) {
    memset(o, 0, sizeof *o);
    policy_default(&o->policy);
    o->progress = -1;
}

typedef struct conv_tensor {
    const dsv4_tensor_spec *spec;
    int out_type;
    official_src off;          /* official source (off.parts != NULL) */
    const gguf_tensor *gt;     /* GGUF source */
    uint64_t out_row_bytes;
} conv_tensor;

typedef struct conv_ctx {
    int n_threads;
    float **scratch;           /* per thread, grain * ne0 floats (sized for the widest row) */
    size_t scratch_floats;
} conv_ctx;

typedef struct chunk_job {
    conv_ctx *cc;
    conv_tensor *t;
} chunk_job;

static const char *src_desc(const conv_tensor *t) {
    if (t->gt) return quant_name((int)t->gt->type);
    const official_part *p = &t->off.parts[0];
    switch (p->fmt) {
    case OFF_FP8_BLOCK: return "FP8";
    case OFF_FP4: return "FP4";
    case OFF_INT: return p->w->dtype_name;
    default: return p->w->dtype_name;
    }
}

static int conv_rows(void *ctx, uint8_t *dst, int64_t g0, int64_t g1, int tid) {
    chunk_job *j = ctx;
    conv_tensor *t = j->t;
    const int64_t ne0 = (int64_t)t->spec->ne[0];
    const uint64_t rb = t->out_row_bytes;
    const int64_t n = g1 - g0;
    if (t->gt) {
        uint64_t src_rb = quant_row_bytes((int)t->gt->type, ne0);
        const uint8_t *src = (const uint8_t *)t->gt->data + (uint64_t)g0 * src_rb;
        if ((int)t->gt->type == t->out_type) {
            memcpy(dst, src, (uint64_t)n * rb);
            return 0;
        }
        float *f = t->out_type == GGML_TYPE_F32 ? (float *)dst : j->cc->scratch[tid];
        quant_get((int)t->gt->type)->dequant(src, f, n * ne0);
        if (t->out_type != GGML_TYPE_F32) quant_get(t->out_type)->quant(f, dst, n * ne0);
        return 0;
    }
    if (t->out_type == GGML_TYPE_MXFP4) {
        /* FP4 experts repack losslessly; other sources go through f32 */
        const uint8_t *pk, *sc;
        int all_fp4 = 1;
        for (int64_t r = 0; r < n && all_fp4; r++)
            if (official_fp4_row(&t->off, g0 + r, &pk, &sc) != 0) all_fp4 = 0;
        if (all_fp4) {
            for (int64_t r = 0; r < n; r++) {
                official_fp4_row(&t->off, g0 + r, &pk, &sc);
                mxfp4_from_official(pk, sc, dst + (uint64_t)r * rb, ne0);
            }
            return 0;
        }
    }
    float *f = t->out_type == GGML_TYPE_F32 ? (float *)dst : j->cc->scratch[tid];
    official_read_rows(&t->off, g0, n, f);
    if (t->out_type != GGML_TYPE_F32) quant_get(t->out_type)->quant(f, dst, n * ne0);
    return 0;
}

/* Produce and write one tensor. */
static int convert_tensor(conv_ctx *cc, conv_tensor *t, gguf_writer *w, uint8_t *bufs[2], progress *pg,
                          uint32_t n_expert, char *err, size_t errlen) {
    const dsv4_tensor_spec *s = t->spec;
    int64_t ne0 = (int64_t)s->ne[0];
    int64_t n_rows = (int64_t)(s->ne[1] * s->ne[2]);
    if (t->out_type == GGML_TYPE_I32) {
        /* tid2eid: small; one piece */
        uint64_t nb = (uint64_t)ne0 * (uint64_t)n_rows * 4;
        int32_t *v = malloc(nb);
        if (!v) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        int rc = 0;
        if (t->gt) {
            if (t->gt->type != GGML_TYPE_I32) {
                snprintf(err, errlen, "%s: source type %s, expected I32", s->name, quant_name((int)t->gt->type));
                rc = -1;
            } else {
                memcpy(v, t->gt->data, nb);
                for (uint64_t i = 0; i < nb / 4 && rc == 0; i++)
                    if (v[i] < 0 || (uint32_t)v[i] >= n_expert) {
                        snprintf(err, errlen, "%s: element %llu is %d, outside [0, %u)", s->name, (unsigned long long)i, v[i], n_expert);
                        rc = -1;
                    }
            }
        } else {
            rc = official_read_i32(&t->off, n_expert, v, err, errlen);
        }
        if (rc == 0 && gguf_w_data(w, v, nb) != 0) {
            snprintf(err, errlen, "%s: write failed: %s", s->name, gguf_writer_error(w));
            rc = -1;
        }
        free(v);
        progress_add(pg, nb);
        return rc;
    }
    int64_t grain = GRAIN_FLOATS / ne0;
    if (grain < 1) grain = 1;
    chunk_job cj = {cc, t};
    if (rowpool_write_rows(w, cc->n_threads, n_rows, t->out_row_bytes, grain, conv_rows, &cj, bufs, CHUNK_OUT_BYTES,
                           pg) != 0) {
        snprintf(err, errlen, "%s: write failed: %s", s->name, gguf_writer_error(w));
        return -1;
    }
    return 0;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

static int file_exists(const char *p) { return access(p, R_OK) == 0; }

/* The source pages of a finished tensor are not needed again: keep the mapping from growing
 * the resident set over a whole 80-150 GB input. */
static void drop_pages(const void *p, uint64_t n) {
    if (!p || !n) return;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + pg - 1) & ~(pg - 1), b = ((uintptr_t)p + n) & ~(pg - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

static void policy_desc(const convert_policy *p, char *b, size_t n) {
    size_t o = (size_t)snprintf(b, n, "experts %s/%s, dense %s%s", quant_name(p->expert_gateup),
                                quant_name(p->expert_down), quant_name(p->dense), p->small_f32 ? ", small tensors F32" : "");
    for (int i = 0; i < p->n_overrides && o < n; i++)
        o += (size_t)snprintf(b + o, n - o, ", layers %d-%d experts %s/%s", p->overrides[i].from, p->overrides[i].to,
                              quant_name(p->overrides[i].gateup), quant_name(p->overrides[i].down));
}

/* The opened input. */
typedef struct conv_input {
    dsv4_config cfg;
    st_set *st;
    gguf_file *gin;
    int gguf_is_mtp;          /* the input GGUF is an MTP file (mtp.0.* tensors only) */
    char tok_json[4200], tok_cfg[4200];
} conv_input;

/* Map every spec to its source and output type; nothing is written yet. */
static int resolve_all(const convert_opts *o, conv_input *in, const dsv4_tensor_spec *specs, int n, conv_tensor *ct,
                       char *err, size_t errlen) {
    if (policy_check(&o->policy, specs, n, err, errlen) != 0) return -1;
    for (int i = 0; i < n; i++) {
        const dsv4_tensor_spec *s = &specs[i];
        ct[i].spec = s;
        ct[i].out_type = policy_type(&o->policy, s);
        ct[i].out_row_bytes = quant_row_bytes(ct[i].out_type, (int64_t)s->ne[0]);
        if (in->gin) {
            const gguf_tensor *g = gguf_find_tensor(in->gin, s->name);
            if (!g) {
                snprintf(err, errlen, "%s: GGUF lacks tensor '%s'", o->input, s->name);
                return -1;
            }
            int same = g->n_dims == s->n_dims;
            for (uint32_t d = 0; d < 3 && same; d++) same = g->ne[d] == s->ne[d];
            if (!same) {
                snprintf(err, errlen, "%s: tensor '%s' has shape [%llu, %llu, %llu], expected [%llu, %llu, %llu]", o->input,
                         s->name, (unsigned long long)g->ne[0], (unsigned long long)g->ne[1], (unsigned long long)g->ne[2],
                         (unsigned long long)s->ne[0], (unsigned long long)s->ne[1], (unsigned long long)s->ne[2]);
                return -1;
            }
            const quant_traits *q = quant_get((int)g->type);
            if (!q || !g->data || (g->type != GGML_TYPE_I32 && !q->dequant)) {
                snprintf(err, errlen, "%s: tensor '%s' has type %u, which convert cannot read", o->input, s->name, g->type);
                return -1;
            }
            if ((g->type == GGML_TYPE_I32) != (ct[i].out_type == GGML_TYPE_I32)) {
                snprintf(err, errlen, "%s: tensor '%s' has type %s, expected %s", o->input, s->name, quant_name((int)g->type),
                         quant_name(ct[i].out_type));
                return -1;
            }
            ct[i].gt = g;
        } else if (official_resolve(in->st, s, &ct[i].off, err, errlen) != 0) {
            return -1;
        }
    }
    return 0;
}

/* Write one GGUF: metadata (config, tokenizer for the main file), tensors. */
static int write_file(const convert_opts *o, conv_input *in, const dsv4_tensor_spec *specs, conv_tensor *ct, int n,
                      const char *out, int is_mtp, conv_ctx *cc, uint8_t *bufs[2], char *err, size_t errlen) {
    uint64_t total_out = 0;
    for (int i = 0; i < n; i++) total_out += ct[i].out_row_bytes * specs[i].ne[1] * specs[i].ne[2];
    gguf_writer *w = gguf_writer_open(out, 32, err, errlen);
    if (!w) return -1;
    dsv4_config_write_gguf(w, &in->cfg);
    char pdesc[600];
    policy_desc(&o->policy, pdesc, sizeof pdesc);
    if (in->gin) {
        for (uint64_t i = 0; i < in->gin->n_kv; i++) {
            const gguf_kv *kv = &in->gin->kv[i];
            if ((kv->key.len >= 8 && !memcmp(kv->key.ptr, "general.", 8)) ||
                (kv->key.len >= 10 && !memcmp(kv->key.ptr, "deepseek4.", 10)) ||
                (kv->key.len == 17 && !memcmp(kv->key.ptr, "minke.type_policy", 17)))
                continue;
            if ((o->no_tokenizer || in->tok_json[0]) && kv->key.len >= 10 && !memcmp(kv->key.ptr, "tokenizer.", 10)) continue;
            gguf_w_kv_copy(w, kv);
        }
    }
    if (in->tok_json[0] && !is_mtp &&
        tokjson_write_gguf(w, in->tok_json, in->tok_cfg[0] ? in->tok_cfg : NULL, err, errlen) != 0) {
        gguf_writer_abort(w);
        return -1;
    }
    gguf_w_str(w, "minke.type_policy", pdesc);
    for (int i = 0; i < n; i++) gguf_w_tensor(w, specs[i].name, specs[i].n_dims, specs[i].ne, (uint32_t)ct[i].out_type);
    if (gguf_writer_begin_data(w) != 0) {
        snprintf(err, errlen, "%s", gguf_writer_error(w));
        gguf_writer_abort(w);
        return -1;
    }
    progress pg;
    progress_start(&pg, is_mtp ? "convert MTP" : "convert", total_out, o->progress);
    char label[160];
    for (int i = 0; i < n; i++) {
        double t0 = progress_now();
        snprintf(label, sizeof label, "%s %-28.28s", is_mtp ? "MTP" : "convert", specs[i].name);
        pg.label = label;
        if (convert_tensor(cc, &ct[i], w, bufs, &pg, in->cfg.n_expert, err, errlen) != 0) {
            gguf_writer_abort(w);
            return -1;
        }
        if (in->st) official_release(in->st, &ct[i].off);
        if (ct[i].gt) drop_pages(ct[i].gt->data, ct[i].gt->nbytes);
        if (o->verbose) {
            if (pg.enabled) fprintf(stderr, "\r\033[K");
            fprintf(stderr, "%-40s [%llu, %llu, %llu] %-7s <- %-7s %.2fs\n", specs[i].name,
                    (unsigned long long)specs[i].ne[0], (unsigned long long)specs[i].ne[1],
                    (unsigned long long)specs[i].ne[2], quant_name(ct[i].out_type), src_desc(&ct[i]),
                    progress_now() - t0);
        }
    }
    pg.label = is_mtp ? "MTP" : "convert";
    progress_finish(&pg);
    if (gguf_writer_close(w) != 0) {
        snprintf(err, errlen, "%s: %s", out, gguf_writer_error(NULL));
        return -1;
    }
    return 0;
}

static const char *human_bytes(uint64_t b, char *buf, size_t n) {
    if (b >= 1000000000ull) snprintf(buf, n, "%.2f GB", (double)b / 1e9);
    else if (b >= 1000000ull) snprintf(buf, n, "%.2f MB", (double)b / 1e6);
    else snprintf(buf, n, "%.1f kB", (double)b / 1e3);
    return buf;
}

/* --check: what would be written, per output type. */
static void print_plan(const convert_opts *o, const conv_input *in, const conv_tensor *ct, int n, const char *what) {
    uint64_t bytes[GGML_TYPE_COUNT] = {0}, total = 0;
    int count[GGML_TYPE_COUNT] = {0};
    for (int i = 0; i < n; i++) {
        uint64_t nb = ct[i].out_row_bytes * ct[i].spec->ne[1] * ct[i].spec->ne[2];
        if (ct[i].out_type >= 0 && ct[i].out_type < GGML_TYPE_COUNT) {
            bytes[ct[i].out_type] += nb;
            count[ct[i].out_type]++;
        }
        total += (nb + 31) / 32 * 32;
    }
    char summ[512];
    dsv4_config_summary(&in->cfg, summ, sizeof summ);
    char hb[32];
    fprintf(stderr, "%s: input OK; %s would hold %d tensors, %s of tensor data%s\n  %s\n", o->input, what, n,
            human_bytes(total, hb, sizeof hb), !strcmp(what, "main file") && in->tok_json[0] ? " and the tokenizer" : "",
            summ);
    for (int t = 0; t < GGML_TYPE_COUNT; t++)
        if (count[t]) fprintf(stderr, "  %-8s %5d tensors %12s\n", quant_name(t), count[t], human_bytes(bytes[t], hb, sizeof hb));
}

static void mark_used(conv_tensor *ct, int n) {
    for (int i = 0; i < n; i++)
        for (int e = 0; e < ct[i].off.n_parts; e++) {
            ((st_tensor *)ct[i].off.parts[e].w)->used = 1;
            if (ct[i].off.parts[e].scale) ((st_tensor *)ct[i].off.parts[e].scale)->used = 1;
        }
}

int convert_model(const convert_opts *o, char *err, size_t errlen) {
    int rc = -1;
    conv_input in;
    memset(&in, 0, sizeof in);
    dsv4_tensor_spec *specs = NULL, *mspecs = NULL;
    int n_specs = 0, n_mspecs = 0;
    conv_tensor *ct = NULL, *mct = NULL;
    conv_ctx cc = {0};
    uint8_t *bufs[2] = {NULL, NULL};
    char dir[4096], path[4200];

    if (!o->input || (!o->output && !o->check_only)) {
        snprintf(err, errlen, "input and output are required");
        return -1;
    }
    if (o->tokenizer_json && o->no_tokenizer) {
        snprintf(err, errlen, "--tokenizer and --no-tokenizer contradict each other");
        return -1;
    }
    int from_gguf = !is_dir(o->input) && ends_with(o->input, ".gguf");
    if (from_gguf) {
        in.gin = gguf_open(o->input, err, errlen);
        if (!in.gin) return -1;
        if (dsv4_config_from_gguf(in.gin, &in.cfg, err, errlen) != 0) {
            char tmp[800];
            snprintf(tmp, sizeof tmp, "%s", err);
            snprintf(err, errlen, "%s: not a usable DeepSeek V4 GGUF (%s)", o->input, tmp);
            goto out;
        }
        in.gguf_is_mtp = gguf_find_tensor(in.gin, "mtp.0.e_proj.weight") && !gguf_find_tensor(in.gin, "token_embd.weight");
        if (o->tokenizer_json) snprintf(in.tok_json, sizeof in.tok_json, "%s", o->tokenizer_json);
        if (o->tokenizer_config) snprintf(in.tok_cfg, sizeof in.tok_cfg, "%s", o->tokenizer_config);
        if (o->mtp_output) {
            snprintf(err, errlen, "--mtp-out needs an official checkpoint (convert an MTP GGUF as its own input)");
            goto out;
        }
    } else {
        if (is_dir(o->input)) snprintf(dir, sizeof dir, "%s", o->input);
        else {
            snprintf(dir, sizeof dir, "%s", o->input);
            char *sl = strrchr(dir, '/');
            if (sl) *sl = 0;
            else snprintf(dir, sizeof dir, ".");
        }
        snprintf(path, sizeof path, "%s/config.json", dir);
        if (!file_exists(path)) {
            snprintf(err, errlen, "%s: no config.json (a DeepSeek V4 checkpoint directory needs one)", dir);
            return -1;
        }
        if (official_config_load(path, &in.cfg, err, errlen) != 0) return -1;
        in.st = is_dir(o->input) ? st_open_dir(o->input, err, errlen) : st_open_file(o->input, err, errlen);
        if (!in.st) goto out;
        if (!o->no_tokenizer) {
            if (o->tokenizer_json) snprintf(in.tok_json, sizeof in.tok_json, "%s", o->tokenizer_json);
            else {
                snprintf(path, sizeof path, "%s/tokenizer.json", dir);
                if (file_exists(path)) snprintf(in.tok_json, sizeof in.tok_json, "%s", path);
            }
            if (o->tokenizer_config) snprintf(in.tok_cfg, sizeof in.tok_cfg, "%s", o->tokenizer_config);
            else {
                snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
                if (in.tok_json[0] && file_exists(path)) snprintf(in.tok_cfg, sizeof in.tok_cfg, "%s", path);
            }
        }
    }

    if (o->max_layers > 0 && (uint32_t)o->max_layers < in.cfg.n_layer) {
        in.cfg.n_layer = (uint32_t)o->max_layers;
        if (in.cfg.n_hash_layer > in.cfg.n_layer) in.cfg.n_hash_layer = in.cfg.n_layer;
        dsv4_config_derive(&in.cfg);
    }
    n_specs = in.gguf_is_mtp ? dsv4_mtp_tensor_specs(&in.cfg, &specs) : dsv4_tensor_specs(&in.cfg, &specs);
    if (n_specs <= 0) {
        snprintf(err, errlen, "cannot build the tensor list for this config");
        goto out;
    }
    /* resolve every source (main and MTP) before creating any output */
    ct = calloc((size_t)n_specs, sizeof *ct);
    if (!ct) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (resolve_all(o, &in, specs, n_specs, ct, err, errlen) != 0) goto out;
    if (o->mtp_output) {
        n_mspecs = dsv4_mtp_tensor_specs(&in.cfg, &mspecs);
        mct = n_mspecs > 0 ? calloc((size_t)n_mspecs, sizeof *mct) : NULL;
        if (!mct) {
            snprintf(err, errlen, "cannot build the MTP tensor list");
            goto out;
        }
        if (!st_find(in.st, "mtp.0.e_proj.weight")) {
            snprintf(err, errlen, "--mtp-out: the checkpoint has no MTP block (no mtp.0.* tensors)");
            goto out;
        }
        if (resolve_all(o, &in, mspecs, n_mspecs, mct, err, errlen) != 0) goto out;
    }
    if (in.st) {
        /* checkpoint tensors nothing maps to (e.g. the MTP block without --mtp-out) */
        int64_t unused = 0;
        const char *first = NULL;
        for (int64_t k = 0; k < in.st->n_tensors; k++) in.st->tensors[k].used = 0;
        mark_used(ct, n_specs);
        if (mct) mark_used(mct, n_mspecs);
        for (int64_t k = 0; k < in.st->n_tensors; k++)
            if (!in.st->tensors[k].used && !unused++) first = in.st->tensors[k].name;
        if (unused)
            fprintf(stderr, "minke convert: note: %lld checkpoint tensors are not converted (e.g. %s%s)\n", (long long)unused,
                    first, !strncmp(first, "mtp.", 4) ? "; --mtp-out FILE writes the MTP block" : "");
    }
    if (in.tok_json[0] && !in.gguf_is_mtp) {
        int nv = tokjson_vocab_size(in.tok_json, err, errlen);
        if (nv < 0) goto out;
        if ((uint32_t)nv != in.cfg.n_vocab) {
            snprintf(err, errlen, "%s has %d tokens but the model's vocab_size is %u", in.tok_json, nv, in.cfg.n_vocab);
            goto out;
        }
    }

    if (o->check_only) {
        print_plan(o, &in, ct, n_specs, "main file");
        if (mct) print_plan(o, &in, mct, n_mspecs, "MTP file");
        rc = 0;
        goto out;
    }

    size_t max_ne0 = 0;
    for (int i = 0; i < n_specs; i++) max_ne0 = specs[i].ne[0] > max_ne0 ? specs[i].ne[0] : max_ne0;
    for (int i = 0; i < n_mspecs; i++) max_ne0 = mspecs[i].ne[0] > max_ne0 ? mspecs[i].ne[0] : max_ne0;
    cc.n_threads = o->n_threads > 0 ? o->n_threads : rowpool_default_threads();
    cc.scratch_floats = (size_t)GRAIN_FLOATS > max_ne0 ? (size_t)GRAIN_FLOATS : max_ne0;
    cc.scratch = calloc((size_t)cc.n_threads, sizeof *cc.scratch);
    bufs[0] = malloc(CHUNK_OUT_BYTES + (64u << 10) + max_ne0 * 8);
    bufs[1] = malloc(CHUNK_OUT_BYTES + (64u << 10) + max_ne0 * 8);
    if (!cc.scratch || !bufs[0] || !bufs[1]) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (int i = 0; i < cc.n_threads; i++)
        if (!(cc.scratch[i] = malloc(cc.scratch_floats * sizeof(float)))) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }

    if (write_file(o, &in, specs, ct, n_specs, o->output, in.gguf_is_mtp, &cc, bufs, err, errlen) != 0) goto out;
    if (mct && write_file(o, &in, mspecs, mct, n_mspecs, o->mtp_output, 1, &cc, bufs, err, errlen) != 0) {
        char tmp[900];
        snprintf(tmp, sizeof tmp, "%s", err);
        snprintf(err, errlen, "%s (the main file %s was written)", tmp, o->output);
        goto out;
    }
    rc = 0;
out:
    if (ct)
        for (int i = 0; i < n_specs; i++) official_src_free(&ct[i].off);
    if (mct)
        for (int i = 0; i < n_mspecs; i++) official_src_free(&mct[i].off);
    free(ct);
    free(mct);
    if (cc.scratch)
        for (int i = 0; i < cc.n_threads; i++) free(cc.scratch[i]);
    free(cc.scratch);
    free(bufs[0]);
    free(bufs[1]);
    free(specs);
    free(mspecs);
    st_close(in.st);
    if (in.gin) gguf_close(in.gin);
    return rc;
}
