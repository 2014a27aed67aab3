/* tokjson.c: tokenizer metadata for GGUF files (see tokjson.h).
 *
 * Reads a Hugging Face tokenizer.json (jansson) into id-ordered arrays and
 * writes them as `tokenizer.ggml.*` keys the way llama.cpp's converter does;
 * the same arrays also build an in-memory tokenizer for development
 * (tokenizer_from_json_file). The synthetic writer learns a few merges from a
 * built-in corpus with plain BPE training over our own pre-tokenizer, so
 * synthetic models tokenize text into multi-byte tokens like a real one.
 */
#include "text/tokjson.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "text/unicode.h"

enum { TT_NORMAL = 1, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5 };

/* ---------------------------------------------------------------- HF json */

typedef struct {
    size_t n_vocab;
    char **tok;        /* owned, NUL-terminated */
    size_t *tok_len;
    int32_t *type;
    size_t n_merges;
    char **merge;      /* owned "LEFT RIGHT" */
    size_t *merge_len;
} hf_tok;

static void hf_free(hf_tok *h) {
    if (h->tok) for (size_t i = 0; i < h->n_vocab; i++) free(h->tok[i]);
    if (h->merge) for (size_t i = 0; i < h->n_merges; i++) free(h->merge[i]);
    free(h->tok); free(h->tok_len); free(h->type); free(h->merge); free(h->merge_len);
    memset(h, 0, sizeof *h);
}

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) { memcpy(d, s, n); d[n] = 0; }
    return d;
}

/* llama.cpp marks added tokens that look like `<|...|>` / `<｜...｜>` as
 * control even when tokenizer.json does not flag them special. */
static int looks_special(const char *s, size_t n) {
    static const char fw[] = "\xef\xbd\x9c"; /* ｜ */
    if (n >= 4 && s[0] == '<' && s[1] == '|' && s[n - 2] == '|' && s[n - 1] == '>') return 1;
    if (n >= 8 && s[0] == '<' && !memcmp(s + 1, fw, 3) && !memcmp(s + n - 4, fw, 3) && s[n - 1] == '>') return 1;
    return 0;
}

static int hf_set_token(hf_tok *h, size_t id, const char *s, size_t n, int32_t type) {
    free(h->tok[id]);
    h->tok[id] = dupn(s, n);
    if (!h->tok[id]) return -1;
    h->tok_len[id] = n;
    h->type[id] = type;
    return 0;
}

static int hf_load(const char *path, hf_tok *h, int want_arrays, char *err, size_t errlen) {
    memset(h, 0, sizeof *h);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!root) {
        gguf_set_err(err, errlen, "%s: %s (line %d)", path, je.text, je.line);
        return -1;
    }
    int rc = -1;
    json_t *model = json_object_get(root, "model");
    json_t *vocab = model ? json_object_get(model, "vocab") : NULL;
    json_t *merges = model ? json_object_get(model, "merges") : NULL;
    json_t *added = json_object_get(root, "added_tokens");
    json_t *mtype = model ? json_object_get(model, "type") : NULL;
    if (!json_is_object(vocab) || !json_is_array(merges)) {
        gguf_set_err(err, errlen, "%s: not a BPE tokenizer.json (model.vocab / model.merges missing)", path);
        goto done;
    }
    if (mtype && json_is_string(mtype) && strcmp(json_string_value(mtype), "BPE")) {
        gguf_set_err(err, errlen, "%s: tokenizer model is %s, expected BPE", path, json_string_value(mtype));
        goto done;
    }
    if (added && !json_is_array(added)) { gguf_set_err(err, errlen, "%s: added_tokens is not an array", path); goto done; }
    /* vocabulary size = highest id + 1 */
    int64_t max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) > 10000000) {
            gguf_set_err(err, errlen, "%s: vocab entry \"%.40s\" has a bad id", path, key);
            goto done;
        }
        if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
    }
    size_t ai;
    json_t *at;
    json_array_foreach(added, ai, at) {
        json_t *id = json_object_get(at, "id");
        json_t *content = json_object_get(at, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > 10000000 ||
            !json_is_string(content)) {
            gguf_set_err(err, errlen, "%s: added_tokens[%zu] lacks a valid id or content", path, ai);
            goto done;
        }
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    if (max_id < 0) { gguf_set_err(err, errlen, "%s: empty vocabulary", path); goto done; }
    h->n_vocab = (size_t)max_id + 1;
    if (!want_arrays) { rc = 0; goto done; }

    h->tok = calloc(h->n_vocab, sizeof *h->tok);
    h->tok_len = calloc(h->n_vocab, sizeof *h->tok_len);
    h->type = calloc(h->n_vocab, sizeof *h->type);
    if (!h->tok || !h->tok_len || !h->type) { gguf_set_err(err, errlen, "out of memory"); goto done; }
    json_object_foreach(vocab, key, val) {
        if (hf_set_token(h, (size_t)json_integer_value(val), key, strlen(key), TT_NORMAL)) {
            gguf_set_err(err, errlen, "out of memory");
            goto done;
        }
    }
    json_array_foreach(added, ai, at) {
        json_t *content = json_object_get(at, "content");
        const char *s = json_string_value(content);
        size_t n = json_string_length(content);
        int special = json_is_true(json_object_get(at, "special"));
        int32_t type = (special || looks_special(s, n)) ? TT_CONTROL : TT_USER_DEFINED;
        if (hf_set_token(h, (size_t)json_integer_value(json_object_get(at, "id")), s, n, type)) {
            gguf_set_err(err, errlen, "out of memory");
            goto done;
        }
    }
    for (size_t i = 0; i < h->n_vocab; i++) /* ids nobody defines, as llama.cpp fills them */
        if (!h->tok[i]) {
            char pad[32];
            int n = snprintf(pad, sizeof pad, "[PAD%zu]", i);
            if (hf_set_token(h, i, pad, (size_t)n, TT_UNUSED)) { gguf_set_err(err, errlen, "out of memory"); goto done; }
        }

    h->n_merges = json_array_size(merges);
    h->merge = calloc(h->n_merges ? h->n_merges : 1, sizeof *h->merge);
    h->merge_len = calloc(h->n_merges ? h->n_merges : 1, sizeof *h->merge_len);
    if (!h->merge || !h->merge_len) { gguf_set_err(err, errlen, "out of memory"); goto done; }
    size_t mi;
    json_t *m;
    json_array_foreach(merges, mi, m) {
        if (json_is_string(m)) {
            h->merge[mi] = dupn(json_string_value(m), json_string_length(m));
            h->merge_len[mi] = json_string_length(m);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            /* newer tokenizers store merges as ["LEFT", "RIGHT"] */
            json_t *l = json_array_get(m, 0), *r = json_array_get(m, 1);
            size_t ln = json_string_length(l), rn = json_string_length(r);
            h->merge[mi] = malloc(ln + rn + 2);
            if (h->merge[mi]) {
                memcpy(h->merge[mi], json_string_value(l), ln);
                h->merge[mi][ln] = ' ';
                memcpy(h->merge[mi] + ln + 1, json_string_value(r), rn);
                h->merge[mi][ln + rn + 1] = 0;
            }
            h->merge_len[mi] = ln + rn + 1;
        } else {
            gguf_set_err(err, errlen, "%s: merges[%zu] is neither \"LEFT RIGHT\" nor [LEFT, RIGHT]", path, mi);
            goto done;
        }
        if (!h->merge[mi]) { gguf_set_err(err, errlen, "out of memory"); goto done; }
    }
    rc = 0;
done:
    json_decref(root);
    if (rc) hf_free(h);
    return rc;
}

int tokjson_vocab_size(const char *tokenizer_json, char *err, size_t errlen) {
    hf_tok h;
    if (hf_load(tokenizer_json, &h, 0, err, errlen)) return -1;
    int n = (int)h.n_vocab;
    hf_free(&h);
    return n;
}

/* A token named in tokenizer_config.json: a string or {"content": ...}. */
static const char *config_token(json_t *cfg, const char *name) {
    json_t *v = json_object_get(cfg, name);
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v) && json_is_string(json_object_get(v, "content")))
        return json_string_value(json_object_get(v, "content"));
    return NULL;
}

static int64_t hf_find(const hf_tok *h, const char *s) {
    size_t n = strlen(s);
    /* added tokens sit at the end: search backwards */
    for (size_t i = h->n_vocab; i-- > 0;)
        if (h->tok_len[i] == n && !memcmp(h->tok[i], s, n)) return (int64_t)i;
    return -1;
}

int tokjson_write_gguf(gguf_writer *w, const char *tokenizer_json, const char *tokenizer_config_or_null,
                       char *err, size_t errlen) {
    if (!w || !tokenizer_json) { gguf_set_err(err, errlen, "tokjson_write_gguf: no writer or path"); return -1; }
    hf_tok h;
    if (hf_load(tokenizer_json, &h, 1, err, errlen)) return -1;
    const char *bos = tokenizer_special_string(TOK_BOS), *eos = tokenizer_special_string(TOK_EOS);
    const char *pad = tokenizer_special_string(TOK_PAD);
    int add_bos = 0, add_eos = 0;
    json_t *cfg = NULL;
    if (tokenizer_config_or_null) {
        json_error_t je;
        cfg = json_load_file(tokenizer_config_or_null, 0, &je);
        if (!cfg || !json_is_object(cfg)) {
            gguf_set_err(err, errlen, "%s: %s", tokenizer_config_or_null, cfg ? "not a JSON object" : je.text);
            json_decref(cfg);
            hf_free(&h);
            return -1;
        }
        if (config_token(cfg, "bos_token")) bos = config_token(cfg, "bos_token");
        if (config_token(cfg, "eos_token")) eos = config_token(cfg, "eos_token");
        if (config_token(cfg, "pad_token")) pad = config_token(cfg, "pad_token");
        add_bos = json_is_true(json_object_get(cfg, "add_bos_token"));
        add_eos = json_is_true(json_object_get(cfg, "add_eos_token"));
    }
    int64_t bos_id = hf_find(&h, bos), eos_id = hf_find(&h, eos), pad_id = hf_find(&h, pad);

    gguf_str *toks = malloc(h.n_vocab * sizeof *toks);
    gguf_str *mers = malloc((h.n_merges ? h.n_merges : 1) * sizeof *mers);
    if (!toks || !mers) {
        free(toks); free(mers); json_decref(cfg); hf_free(&h);
        gguf_set_err(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < h.n_vocab; i++) toks[i] = (gguf_str){h.tok_len[i], h.tok[i]};
    for (size_t i = 0; i < h.n_merges; i++) mers[i] = (gguf_str){h.merge_len[i], h.merge[i]};

    gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_w_str(w, "tokenizer.ggml.pre", "joyai-llm");
    gguf_w_arr_strn(w, "tokenizer.ggml.tokens", toks, h.n_vocab);
    gguf_w_arr_i32(w, "tokenizer.ggml.token_type", h.type, h.n_vocab);
    gguf_w_arr_strn(w, "tokenizer.ggml.merges", mers, h.n_merges);
    if (bos_id >= 0) gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos_id);
    if (eos_id >= 0) gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos_id);
    if (pad_id >= 0) gguf_w_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)pad_id);
    gguf_w_bool(w, "tokenizer.ggml.add_bos_token", add_bos);
    gguf_w_bool(w, "tokenizer.ggml.add_eos_token", add_eos);

    free(toks); free(mers);
    json_decref(cfg);
    hf_free(&h);
    return 0;
}

tokenizer *tokenizer_from_json_file(const char *path, char *err, size_t errlen) {
    hf_tok h;
    if (hf_load(path, &h, 1, err, errlen)) return NULL;
    gguf_str *toks = malloc(h.n_vocab * sizeof *toks);
    gguf_str *mers = malloc((h.n_merges ? h.n_merges : 1) * sizeof *mers);
    tokenizer *t = NULL;
    if (toks && mers) {
        for (size_t i = 0; i < h.n_vocab; i++) toks[i] = (gguf_str){h.tok_len[i], h.tok[i]};
        for (size_t i = 0; i < h.n_merges; i++) mers[i] = (gguf_str){h.merge_len[i], h.merge[i]};
        t = tokenizer_from_arrays(toks, h.type, h.n_vocab, mers, h.n_merges, err, errlen);
    } else {
        gguf_set_err(err, errlen, "out of memory");
    }
    free(toks); free(mers);
    hf_free(&h);
    return t;
}

/* ---------------------------------------------------------------- synthetic */

/* Our own text: English prose, code and chat-ish phrases, so that the learnt
 * merges cover what synthetic-model tests typically feed in. */
static const char synth_corpus[] =
    "Hello world! Hello there, how are you today? I am fine, thank you.\n"
    "The quick brown fox jumps over the lazy dog. The dog sleeps in the sun.\n"
    "You are a helpful assistant. Answer the question of the user as well as you can.\n"
    "What is the capital of France? The capital of France is Paris.\n"
    "What is 2+2? The answer is 4. What is 10 times 12? It is 120.\n"
    "Please write a short story about a cat who learns to read.\n"
    "Once upon a time there was a little cat that lived in a big house near the river.\n"
    "Every morning the cat would sit by the window and watch the people walk by.\n"
    "Let me think about this step by step. First, we need to understand the problem.\n"
    "The function returns the sum of the numbers in the list.\n"
    "int main(void) {\n    int x = 10;\n    printf(\"%d\\n\", x);\n    return 0;\n}\n"
    "def add(a, b):\n    return a + b\n\nfor i in range(10):\n    print(i)\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}\n"
    "<tool_result>The weather in Paris is sunny and 22 degrees.</tool_result>\n"
    "## Tools\n\nYou have access to a set of tools to help answer the question.\n"
    "invoke name parameter string true false tool_calls\n"
    "Reasoning Effort: think carefully before you answer, then give the final answer.\n"
    "Ciao, come stai? Bonjour, comment allez-vous? Hola, que tal? Guten Tag!\n"
    "This is a test. This is only a test. Testing, testing, one two three.\n"
    "In the beginning the model was small, and the tokenizer had only a few merges.\n";

typedef struct {
    char **w;        /* distinct pieces (byte-level strings are built later) */
    size_t *wl;
    int *count;
    size_t n, cap;
} wordset;

static void synth_piece(void *ctx, const char *p, size_t n) {
    wordset *ws = ctx;
    for (size_t i = 0; i < ws->n; i++)
        if (ws->wl[i] == n && !memcmp(ws->w[i], p, n)) { ws->count[i]++; return; }
    if (ws->n == ws->cap) {
        size_t cap = ws->cap ? ws->cap * 2 : 256;
        char **a = realloc(ws->w, cap * sizeof *a);
        if (a) ws->w = a;
        size_t *b = realloc(ws->wl, cap * sizeof *b);
        if (b) ws->wl = b;
        int *c = realloc(ws->count, cap * sizeof *c);
        if (c) ws->count = c;
        if (!a || !b || !c) return;
        ws->cap = cap;
    }
    ws->w[ws->n] = dupn(p, n);
    if (!ws->w[ws->n]) return;
    ws->wl[ws->n] = n;
    ws->count[ws->n] = 1;
    ws->n++;
}

/* The synthetic vocabulary being built. */
typedef struct {
    char **s;
    size_t *len;
    int32_t *type;
    size_t n, cap;
    char **merge;
    size_t *merge_len;
    size_t n_merges, merge_cap;
    int oom;
} synth_vocab;

static int32_t sv_find(const synth_vocab *v, const char *s, size_t n) {
    for (size_t i = 0; i < v->n; i++)
        if (v->len[i] == n && !memcmp(v->s[i], s, n)) return (int32_t)i;
    return -1;
}

static int32_t sv_add(synth_vocab *v, const char *s, size_t n, int32_t type) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 512;
        char **a = realloc(v->s, cap * sizeof *a);
        if (a) v->s = a;
        size_t *b = realloc(v->len, cap * sizeof *b);
        if (b) v->len = b;
        int32_t *c = realloc(v->type, cap * sizeof *c);
        if (c) v->type = c;
        if (!a || !b || !c) { v->oom = 1; return -1; }
        v->cap = cap;
    }
    v->s[v->n] = dupn(s, n);
    if (!v->s[v->n]) { v->oom = 1; return -1; }
    v->len[v->n] = n;
    v->type[v->n] = type;
    return (int32_t)v->n++;
}

static void sv_add_merge(synth_vocab *v, const char *l, size_t ln, const char *r, size_t rn) {
    if (v->n_merges == v->merge_cap) {
        size_t cap = v->merge_cap ? v->merge_cap * 2 : 512;
        char **a = realloc(v->merge, cap * sizeof *a);
        if (a) v->merge = a;
        size_t *b = realloc(v->merge_len, cap * sizeof *b);
        if (b) v->merge_len = b;
        if (!a || !b) { v->oom = 1; return; }
        v->merge_cap = cap;
    }
    char *m = malloc(ln + rn + 2);
    if (!m) { v->oom = 1; return; }
    memcpy(m, l, ln);
    m[ln] = ' ';
    memcpy(m + ln + 1, r, rn);
    m[ln + rn + 1] = 0;
    v->merge[v->n_merges] = m;
    v->merge_len[v->n_merges++] = ln + rn + 1;
}

static void sv_free(synth_vocab *v) {
    for (size_t i = 0; i < v->n; i++) free(v->s[i]);
    for (size_t i = 0; i < v->n_merges; i++) free(v->merge[i]);
    free(v->s); free(v->len); free(v->type); free(v->merge); free(v->merge_len);
}

/* GPT-2 byte alphabet, as UTF-8 (same table as the tokenizer's). */
static size_t byte_symbol(unsigned b, char *out) {
    int direct = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    if (direct) return uc_encode(b, out);
    unsigned k = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) k++;
    return uc_encode(0x100 + k, out);
}

/* Classic BPE training: repeatedly merge the most frequent adjacent pair
 * (ties: smaller left id, then smaller right id) until max_merges merges are
 * made or no pair is left. Words are arrays of token ids. */
static void synth_train(synth_vocab *v, wordset *ws, size_t max_merges) {
    int32_t **sym = calloc(ws->n ? ws->n : 1, sizeof *sym);
    size_t *ns = calloc(ws->n ? ws->n : 1, sizeof *ns);
    if (!sym || !ns) { v->oom = 1; free(sym); free(ns); return; }
    for (size_t i = 0; i < ws->n; i++) {
        sym[i] = malloc((ws->wl[i] ? ws->wl[i] : 1) * sizeof **sym);
        if (!sym[i]) { v->oom = 1; goto out; }
        for (size_t k = 0; k < ws->wl[i]; k++) {
            char b[4];
            size_t bl = byte_symbol((unsigned char)ws->w[i][k], b);
            sym[i][k] = sv_find(v, b, bl);
        }
        ns[i] = ws->wl[i];
    }
    size_t made = 0;
    while (made < max_merges && !v->oom) {
        /* count pairs in an open-addressing table sized for every occurrence */
        int32_t best_l = -1, best_r = -1;
        long best_c = 0;
        typedef struct { int32_t l, r; long c; } pc;
        size_t occ = 0;
        for (size_t i = 0; i < ws->n; i++) occ += ns[i];
        size_t cap = 64;
        while (cap < occ * 2) cap <<= 1;
        pc *tab = malloc(cap * sizeof *tab);
        if (!tab) { v->oom = 1; goto out; }
        for (size_t q = 0; q < cap; q++) tab[q].l = -1;
        for (size_t i = 0; i < ws->n; i++)
            for (size_t k = 0; k + 1 < ns[i]; k++) {
                int32_t l = sym[i][k], r = sym[i][k + 1];
                size_t q = ((size_t)l * 0x9E3779B1u + (size_t)r * 0x85EBCA77u) & (cap - 1);
                while (tab[q].l >= 0 && !(tab[q].l == l && tab[q].r == r)) q = (q + 1) & (cap - 1);
                if (tab[q].l < 0) tab[q] = (pc){l, r, 0};
                tab[q].c += ws->count[i];
            }
        for (size_t q = 0; q < cap; q++)
            if (tab[q].l >= 0 &&
                (tab[q].c > best_c || (tab[q].c == best_c &&
                                       (tab[q].l < best_l || (tab[q].l == best_l && tab[q].r < best_r))))) {
                best_c = tab[q].c;
                best_l = tab[q].l;
                best_r = tab[q].r;
            }
        free(tab);
        if (best_c == 0) break;
        size_t ln = v->len[best_l], rn = v->len[best_r];
        char *cat = malloc(ln + rn);
        if (!cat) { v->oom = 1; break; }
        memcpy(cat, v->s[best_l], ln);
        memcpy(cat + ln, v->s[best_r], rn);
        int32_t m = sv_find(v, cat, ln + rn);
        if (m < 0) m = sv_add(v, cat, ln + rn, TT_NORMAL);
        free(cat);
        if (m < 0) break;
        sv_add_merge(v, v->s[best_l], ln, v->s[best_r], rn);
        made++;
        for (size_t i = 0; i < ws->n; i++) {
            size_t o = 0;
            for (size_t k = 0; k < ns[i]; k++) {
                if (k + 1 < ns[i] && sym[i][k] == best_l && sym[i][k + 1] == best_r) { sym[i][o++] = m; k++; }
                else sym[i][o++] = sym[i][k];
            }
            ns[i] = o;
        }
    }
out:
    for (size_t i = 0; i < ws->n; i++) free(sym[i]);
    free(sym);
    free(ns);
}

int toksynth_write_gguf(gguf_writer *w, uint32_t n_vocab, char *err, size_t errlen) {
    if (!w) { gguf_set_err(err, errlen, "toksynth_write_gguf: no writer"); return -1; }
    if (n_vocab < TOKSYNTH_MIN_VOCAB) {
        gguf_set_err(err, errlen, "a synthetic tokenizer needs at least %d tokens (asked for %u)", TOKSYNTH_MIN_VOCAB,
               n_vocab);
        return -1;
    }
    static const enum tok_special required[] = {TOK_USER, TOK_ASSISTANT, TOK_THINK, TOK_THINK_END, TOK_DSML};
    static const enum tok_special optional[] = {TOK_LATEST_REMINDER, TOK_ACTION, TOK_QUERY, TOK_AUTHORITY,
                                                TOK_DOMAIN, TOK_TITLE, TOK_READ_URL, TOK_EXTRACTED_URL,
                                                TOK_FIM_HOLE, TOK_FIM_BEGIN, TOK_FIM_END, TOK_EOT};
    const size_t n_req = sizeof required / sizeof required[0], n_opt = sizeof optional / sizeof optional[0];
    size_t spare = n_vocab - 259 - n_req;
    size_t k_opt = spare / 2 < n_opt ? spare / 2 : n_opt;
    size_t merge_budget = spare - k_opt;

    synth_vocab v = {0};
    wordset ws = {0};
    int rc = -1;
    sv_add(&v, tokenizer_special_string(TOK_BOS), strlen(tokenizer_special_string(TOK_BOS)), TT_CONTROL);
    sv_add(&v, tokenizer_special_string(TOK_EOS), strlen(tokenizer_special_string(TOK_EOS)), TT_CONTROL);
    sv_add(&v, tokenizer_special_string(TOK_PAD), strlen(tokenizer_special_string(TOK_PAD)), TT_CONTROL);
    for (unsigned b = 0; b < 256; b++) {
        char s[4];
        sv_add(&v, s, byte_symbol(b, s), TT_NORMAL);
    }
    if (tok_pretokenize(synth_corpus, sizeof synth_corpus - 1, synth_piece, &ws)) v.oom = 1;
    synth_train(&v, &ws, merge_budget);
    /* whatever the corpus could not fill becomes unused filler */
    size_t n_special_tail = n_req + k_opt;
    for (size_t i = 0; !v.oom && v.n + n_special_tail < n_vocab; i++) {
        char s[40];
        int n = snprintf(s, sizeof s, "<|unused_%zu|>", i);
        sv_add(&v, s, (size_t)n, TT_UNUSED);
    }
    for (size_t i = 0; i < n_req; i++) {
        const char *s = tokenizer_special_string(required[i]);
        sv_add(&v, s, strlen(s), looks_special(s, strlen(s)) ? TT_CONTROL : TT_USER_DEFINED);
    }
    for (size_t i = 0; i < k_opt; i++) {
        const char *s = tokenizer_special_string(optional[i]);
        sv_add(&v, s, strlen(s), looks_special(s, strlen(s)) ? TT_CONTROL : TT_USER_DEFINED);
    }
    if (v.oom || v.n != n_vocab) {
        gguf_set_err(err, errlen, v.oom ? "out of memory" : "synthetic tokenizer size mismatch (%zu != %u)", v.n, n_vocab);
        goto done;
    }
    gguf_str *toks = malloc(v.n * sizeof *toks);
    gguf_str *mers = malloc((v.n_merges ? v.n_merges : 1) * sizeof *mers);
    if (!toks || !mers) { free(toks); free(mers); gguf_set_err(err, errlen, "out of memory"); goto done; }
    for (size_t i = 0; i < v.n; i++) toks[i] = (gguf_str){v.len[i], v.s[i]};
    for (size_t i = 0; i < v.n_merges; i++) mers[i] = (gguf_str){v.merge_len[i], v.merge[i]};
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_w_str(w, "tokenizer.ggml.pre", "joyai-llm");
    gguf_w_arr_strn(w, "tokenizer.ggml.tokens", toks, v.n);
    gguf_w_arr_i32(w, "tokenizer.ggml.token_type", v.type, v.n);
    gguf_w_arr_strn(w, "tokenizer.ggml.merges", mers, v.n_merges);
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 0);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 1);
    gguf_w_u32(w, "tokenizer.ggml.padding_token_id", 2);
    gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 0);
    gguf_w_bool(w, "tokenizer.ggml.add_eos_token", 0);
    free(toks);
    free(mers);
    rc = 0;
done:
    for (size_t i = 0; i < ws.n; i++) free(ws.w[i]);
    free(ws.w); free(ws.wl); free(ws.count);
    sv_free(&v);
    return rc;
}
