/* test_tokenizer.c: the DeepSeek V4 tokenizer against Hugging Face's output.
 *
 * Builds a tokenizer-only GGUF from tests/fixtures/tokenizer's tokenizer.json
 * with tokjson_write_gguf, loads it back with tokenizer_from_gguf (the
 * official path) and replays every encode case (cases.jsonl,
 * fuzz_cases.jsonl, hf_random_cases.jsonl) and decode case (decode_cases.jsonl). Also: the spec's
 * pre-tokenizer piece table, streaming decode of split UTF-8, the "no
 * tokenizer" error, and synthetic tokenizers of several sizes.
 */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "text/tokenizer.h"
#include "text/tokjson.h"
#include "testutil.h"

#define FIX "tests/fixtures/tokenizer/"

static void print_ids(FILE *f, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n && i < 40; i++) fprintf(f, "%s%d", i ? "," : "", ids[i]);
    if (n > 40) fprintf(f, ",...");
}

static void check_threads(const tokenizer *t, const char *text, size_t len, const int32_t *want, size_t n);

/* All case texts joined by EOS, and the expected ids joined by EOS's id: the
 * same cases through one long input (which takes the piece-cache path). */
typedef struct { char *text; size_t tlen, tcap; int32_t *ids; size_t n, cap; } joined;
static void joined_add(joined *j, const char *text, size_t len, json_t *ids) {
    const char *eos = tokenizer_special_string(TOK_EOS);
    size_t el = strlen(eos), n = json_array_size(ids);
    while (j->tlen + len + el > j->tcap) { j->tcap = j->tcap ? j->tcap * 2 : 65536; j->text = realloc(j->text, j->tcap); }
    while (j->n + n + 1 > j->cap) { j->cap = j->cap ? j->cap * 2 : 16384; j->ids = realloc(j->ids, j->cap * sizeof *j->ids); }
    memcpy(j->text + j->tlen, text, len);
    memcpy(j->text + j->tlen + len, eos, el);
    j->tlen += len + el;
    for (size_t i = 0; i < n; i++) j->ids[j->n++] = (int32_t)json_integer_value(json_array_get(ids, i));
    j->ids[j->n++] = 1;
}

static void check_joined(const tokenizer *t, joined *j, const char *what) {
    int32_t *ids = NULL;
    size_t n = 0;
    int ok = tokenizer_encode(t, j->text, j->tlen, 0, &ids, &n) == 0 && n == j->n;
    size_t i = 0;
    for (; ok && i < n; i++) ok = ids[i] == j->ids[i];
    CHECK(ok, "%s joined into one %zu-byte text: mismatch (n %zu vs %zu, at id %zu)", what, j->tlen, n, j->n, i);
    if (ok) check_threads(t, j->text, j->tlen, j->ids, j->n);
    free(ids);
    free(j->text);
    free(j->ids);
}

/* Several threads encoding the same text at once get the same ids (the
 * tokenizer is immutable; scratch and caches are per call). */
typedef struct { const tokenizer *t; const char *text; size_t len; const int32_t *want; size_t n; int ok; } thr_job;
static void *thr_encode(void *arg) {
    thr_job *j = arg;
    j->ok = 1;
    for (int r = 0; r < 3 && j->ok; r++) {
        int32_t *ids = NULL;
        size_t n = 0;
        j->ok = tokenizer_encode(j->t, j->text, j->len, 0, &ids, &n) == 0 && n == j->n &&
                !memcmp(ids, j->want, n * sizeof *ids);
        free(ids);
    }
    return NULL;
}
static void check_threads(const tokenizer *t, const char *text, size_t len, const int32_t *want, size_t n) {
    pthread_t th[4];
    thr_job jobs[4];
    int started[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thr_job){t, text, len, want, n, 0};
        started[i] = pthread_create(&th[i], NULL, thr_encode, &jobs[i]) == 0;
    }
    for (int i = 0; i < 4; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        CHECK(started[i] && jobs[i].ok == 1, "thread %d encode differs", i);
    }
}

/* Replays one encode case file; returns the number of cases, counts passes. */
static size_t run_encode_file(const tokenizer *t, const char *path, size_t *passed) {
    joined jn = {0};
    FILE *f = fopen(path, "r");
    CHECK(f, "cannot open %s", path);
    if (!f) return 0;
    char *line = NULL;
    size_t cap = 0, total = 0;
    *passed = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        json_error_t je;
        json_t *c = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &je);
        if (!c) continue;
        json_t *jt = json_object_get(c, "text"), *jids = json_object_get(c, "ids");
        if (!json_is_string(jt) || !json_is_array(jids)) { json_decref(c); continue; }
        total++;
        int add_bos = json_is_true(json_object_get(c, "add_bos"));
        int32_t *ids = NULL;
        size_t n = 0;
        int rc = tokenizer_encode(t, json_string_value(jt), json_string_length(jt), add_bos, &ids, &n);
        int ok = rc == 0 && n == json_array_size(jids);
        for (size_t i = 0; ok && i < n; i++) ok = ids[i] == json_integer_value(json_array_get(jids, i));
        /* and the ids decode back to the text */
        char *back = NULL;
        size_t blen = 0;
        if (ok && !add_bos) {
            ok = tokenizer_decode(t, ids, n, &back, &blen) == 0 && blen == json_string_length(jt) &&
                 !memcmp(back, json_string_value(jt), blen);
        }
        if (!add_bos) joined_add(&jn, json_string_value(jt), json_string_length(jt), jids);
        if (ok) (*passed)++;
        else if (total - *passed <= 5) {
            fprintf(stderr, "MISMATCH %s: %.80s\n  want ", path, json_string_value(jt));
            size_t wn = json_array_size(jids);
            int32_t *w = malloc((wn ? wn : 1) * sizeof *w);
            for (size_t i = 0; i < wn; i++) w[i] = (int32_t)json_integer_value(json_array_get(jids, i));
            print_ids(stderr, w, wn);
            free(w);
            fprintf(stderr, "\n  got  ");
            print_ids(stderr, ids, n);
            fprintf(stderr, "\n");
        }
        free(back);
        free(ids);
        json_decref(c);
    }
    free(line);
    fclose(f);
    check_joined(t, &jn, path);
    return total;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Decode cases: whole-sequence decode, and the streaming decoder fed token by
 * token must give the same bytes with no incomplete UTF-8 in any chunk. */
static size_t run_decode_file(const tokenizer *t, const char *path, size_t *passed) {
    FILE *f = fopen(path, "r");
    CHECK(f, "cannot open %s", path);
    if (!f) return 0;
    char *line = NULL;
    size_t cap = 0, total = 0;
    *passed = 0;
    ssize_t len;
    char *sbuf = malloc(tokenizer_max_token_bytes(t) + TOK_STREAM_SLACK);
    while ((len = getline(&line, &cap, f)) > 0) {
        json_error_t je;
        json_t *c = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &je);
        if (!c) continue;
        json_t *jids = json_object_get(c, "ids"), *jhex = json_object_get(c, "hex");
        if (!json_is_array(jids) || !json_is_string(jhex)) { json_decref(c); continue; }
        total++;
        size_t n = json_array_size(jids);
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        for (size_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(jids, i));
        const char *hex = json_string_value(jhex);
        size_t hl = strlen(hex);
        unsigned char *want = malloc(hl / 2 + 1);
        for (size_t i = 0; i < hl / 2; i++) want[i] = (unsigned char)(hexval(hex[2 * i]) * 16 + hexval(hex[2 * i + 1]));
        char *got = NULL;
        size_t glen = 0;
        int ok = tokenizer_decode(t, ids, n, &got, &glen) == 0 && glen == hl / 2 && !memcmp(got, want, glen);
        /* streaming */
        tok_stream st;
        tok_stream_init(&st);
        char *acc = malloc(glen + 8);
        size_t alen = 0;
        for (size_t i = 0; ok && i < n; i++) {
            size_t k = tok_stream_feed_token(&st, t, ids[i], sbuf);
            ok = utf8_stream_safe_len(sbuf, k) == k && alen + k <= glen;
            if (ok) { memcpy(acc + alen, sbuf, k); alen += k; }
        }
        if (ok) {
            size_t k = tok_stream_flush(&st, sbuf);
            ok = alen + k == glen;
            if (ok) { memcpy(acc + alen, sbuf, k); alen += k; ok = !memcmp(acc, want, glen); }
        }
        if (ok) (*passed)++;
        else if (total - *passed <= 5) fprintf(stderr, "DECODE MISMATCH %s: hex %s\n", path, hex);
        free(acc); free(got); free(want); free(ids);
        json_decref(c);
    }
    free(sbuf);
    free(line);
    fclose(f);
    return total;
}

/* ---- pre-tokenizer pieces (serving.md §1.3.1 table) ---- */
typedef struct { char buf[1024]; size_t n; int count; } pieces;
static void collect(void *ctx, const char *p, size_t n) {
    pieces *ps = ctx;
    if (ps->n + n + 1 < sizeof ps->buf) { memcpy(ps->buf + ps->n, p, n); ps->n += n; ps->buf[ps->n++] = '\x01'; }
    ps->count++;
}
static void check_pieces(const char *text, const char *const *want) {
    pieces ps = {.n = 0};
    tok_pretokenize(text, strlen(text), collect, &ps);
    char exp[1024];
    size_t en = 0;
    for (int i = 0; want[i]; i++) { size_t l = strlen(want[i]); memcpy(exp + en, want[i], l); en += l; exp[en++] = '\x01'; }
    CHECK(en == ps.n && !memcmp(exp, ps.buf, en), "pieces of \"%s\" differ (got %d pieces)", text, ps.count);
}

static void test_pieces(void) {
    check_pieces("Hello world", (const char *[]){"Hello", " world", NULL});
    check_pieces("    int x = 10;\n", (const char *[]){"   ", " int", " x", " =", " ", "10", ";\n", NULL});
    check_pieces("a  b", (const char *[]){"a", " ", " b", NULL});
    check_pieces("1234567", (const char *[]){"123", "456", "7", NULL});
    check_pieces("3.14159", (const char *[]){"3", ".", "141", "59", NULL});
    check_pieces("x\t\ty", (const char *[]){"x", "\t", "\ty", NULL});
    check_pieces("a \n\n b", (const char *[]){"a", " \n\n", " b", NULL});
    check_pieces("def f(x):\n", (const char *[]){"def", " f", "(x", "):\n", NULL});
    check_pieces("{\"key\": \"value\", \"n\": [1, 2]}",
                 (const char *[]){"{\"", "key", "\":", " \"", "value", "\",", " \"", "n", "\":", " [", "1", ",", " ",
                                  "2", "]}", NULL});
    check_pieces("Hello! \xe6\xaf\x95\xe8\x80\x81\xe5\xb8\x88\xef\xbc\x81" "1 + 1 = 2",
                 (const char *[]){"Hello", "!", " ", "\xe6\xaf\x95\xe8\x80\x81\xe5\xb8\x88", "\xef\xbc\x81", "1", " +",
                                  " ", "1", " =", " ", "2", NULL});
    check_pieces("\xe4\xb8\xad\xe6\x96\x87" "123English\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",
                 (const char *[]){"\xe4\xb8\xad\xe6\x96\x87", "123", "English", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", NULL});
    check_pieces("\xe3\x80\x82\n", (const char *[]){"\xe3\x80\x82\n", NULL});
    check_pieces("\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c", (const char *[]){"\xef\xbc\x8c", "\xe4\xb8\x96\xe7\x95\x8c", NULL});
    check_pieces("\xef\xbc\x92\xef\xbc\x90\xef\xbc\x92\xef\xbc\x94",
                 (const char *[]){"\xef\xbc\x92\xef\xbc\x90\xef\xbc\x92", "\xef\xbc\x94", NULL});
    check_pieces("<think>reasoning</think>", (const char *[]){"<think", ">reasoning", "</", "think", ">", NULL});
}

/* ---- streaming: split UTF-8 ---- */
static void test_stream(const tokenizer *t) {
    /* 🙂🎉 -> bytes F0 9F 99 | 82 | F0 9F 8E | 89 (serving.md §1.6) */
    const char *text = "\xf0\x9f\x99\x82\xf0\x9f\x8e\x89";
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(tokenizer_encode(t, text, strlen(text), 0, &ids, &n) == 0, "encode emoji");
    CHECK(n == 4 && ids[0] == 80300 && ids[1] == 227 && ids[2] == 53153 && ids[3] == 234, "emoji ids");
    tok_stream s;
    tok_stream_init(&s);
    char out[256];
    size_t k = tok_stream_feed_token(&s, t, ids[0], out);
    CHECK(k == 0, "first 3 bytes of a 4-byte char are held back (got %zu)", k);
    k = tok_stream_feed_token(&s, t, ids[1], out);
    CHECK(k == 4 && !memcmp(out, text, 4), "the completed emoji is emitted");
    k = tok_stream_feed_token(&s, t, ids[2], out);
    CHECK(k == 0, "held again");
    k = tok_stream_flush(&s, out);
    CHECK(k == 3 && !memcmp(out, text + 4, 3), "flush gives the partial bytes");
    free(ids);
    /* byte-wise feeding of mixed text */
    const char *mixed = "a\xc3\xa9\xe4\xb8\xad\xf0\x9f\x99\x82z";
    tok_stream_init(&s);
    char acc[64];
    size_t alen = 0;
    for (size_t i = 0; i < strlen(mixed); i++) {
        k = tok_stream_feed(&s, mixed + i, 1, out);
        CHECK(utf8_stream_safe_len(out, k) == k, "chunk is complete UTF-8");
        memcpy(acc + alen, out, k);
        alen += k;
    }
    alen += tok_stream_flush(&s, acc + alen);
    CHECK(alen == strlen(mixed) && !memcmp(acc, mixed, alen), "byte-wise stream round-trips");
    CHECK(utf8_stream_safe_len("ab\xe4\xb8", 4) == 2, "cut 3-byte char held");
    CHECK(utf8_stream_safe_len("ab\x80\x80", 4) == 4, "stray continuation bytes pass");
    CHECK(utf8_stream_safe_len("\xff", 1) == 1, "invalid lead passes");
}

static void test_no_tokenizer(void) {
    char path[600], err[256] = "";
    test_path(path, sizeof path, "notok.gguf");
    gguf_writer *w = gguf_writer_open(path, 32, err, sizeof err);
    CHECK(w, "writer: %s", err);
    if (!w) return;
    gguf_w_str(w, "general.architecture", "deepseek4");
    gguf_w_str(w, "general.name", "no tokenizer");
    CHECK(gguf_writer_begin_data(w) == 0 && gguf_writer_close(w) == 0, "write notok.gguf");
    gguf_file *f = gguf_open(path, err, sizeof err);
    CHECK(f, "open notok.gguf: %s", err);
    if (!f) return;
    err[0] = 0;
    tokenizer *t = tokenizer_from_gguf(f, err, sizeof err);
    CHECK(!t && strstr(err, "has no tokenizer"), "missing tokenizer error, got \"%s\"", err);
    tokenizer_free(t);
    gguf_close(f);
}

/* tokenizer_config.json decides bos/eos/pad and add_bos/add_eos */
static void test_config(void) {
    char cfg[600], path[600], err[256] = "";
    test_path(cfg, sizeof cfg, "tokenizer_config.json");
    test_path(path, sizeof path, "cfg.gguf");
    FILE *f = fopen(cfg, "w");
    CHECK(f, "write config");
    if (!f) return;
    fputs("{\"add_bos_token\": true, \"add_eos_token\": false, \"bos_token\": {\"content\": "
          "\"<\uff5cbegin\u2581of\u2581sentence\uff5c>\"}, \"eos_token\": \"<\uff5cend\u2581of\u2581sentence\uff5c>\", "
          "\"pad_token\": \"<\uff5cend\u2581of\u2581sentence\uff5c>\"}\n", f);
    fclose(f);
    gguf_writer *w = gguf_writer_open(path, 32, err, sizeof err);
    CHECK(w, "writer: %s", err);
    if (!w) return;
    CHECK(tokjson_write_gguf(w, FIX "deepseek_v4_tokenizer.json", cfg, err, sizeof err) == 0, "tokjson+cfg: %s", err);
    CHECK(gguf_writer_begin_data(w) == 0 && gguf_writer_close(w) == 0, "write cfg.gguf");
    gguf_file *g = gguf_open(path, err, sizeof err);
    CHECK(g, "open cfg.gguf: %s", err);
    if (!g) return;
    uint32_t u = 99;
    int b = -1;
    CHECK(!gguf_get_u32(g, "tokenizer.ggml.padding_token_id", &u) && u == 1, "pad from config");
    CHECK(!gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) && b == 1, "add_bos from config");
    CHECK(!gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b) && b == 0, "add_eos from config");
    gguf_close(g);
    /* a broken config is an error, not a silent default */
    f = fopen(cfg, "w");
    if (f) { fputs("{not json", f); fclose(f); }
    w = gguf_writer_open(path, 32, err, sizeof err);
    if (w) {
        err[0] = 0;
        CHECK(tokjson_write_gguf(w, FIX "deepseek_v4_tokenizer.json", cfg, err, sizeof err) == -1 && err[0],
              "bad config refused");
        gguf_writer_abort(w);
    }
    err[0] = 0;
    CHECK(tokjson_vocab_size(FIX "cases.jsonl", err, sizeof err) == -1 && err[0], "not a tokenizer.json: %s", err);
}

/* damaged vocabularies are refused with a message, never crash */
static void test_bad_arrays(void) {
    char err[256];
    gguf_str toks[300], mers[2];
    static char store[300][8];
    size_t n = 0;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE ? (uint32_t)b : 0;
        if (!cp) { int k = 0; for (int x = 0; x < b; x++) if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) k++; cp = 0x100 + (uint32_t)k; }
        size_t l = cp < 0x80 ? 1 : 2;
        if (l == 1) store[n][0] = (char)cp;
        else { store[n][0] = (char)(0xC0 | (cp >> 6)); store[n][1] = (char)(0x80 | (cp & 0x3F)); }
        toks[n] = (gguf_str){l, store[n]};
        n++;
    }
    toks[n++] = (gguf_str){2, "ab"};
    err[0] = 0;
    tokenizer *t = tokenizer_from_arrays(toks, NULL, n, NULL, 0, err, sizeof err);
    CHECK(t, "bytes + one token, no merges: %s", err);
    tokenizer_free(t);
    mers[0] = (gguf_str){3, "a b"};
    t = tokenizer_from_arrays(toks, NULL, n, mers, 1, err, sizeof err);
    CHECK(t, "one merge: %s", err);
    if (t) {
        int32_t *ids = NULL;
        size_t k = 0;
        CHECK(tokenizer_encode(t, "abab", 4, 0, &ids, &k) == 0 && k == 2 && ids[0] == 256 && ids[1] == 256, "tiny merge");
        free(ids);
        tokenizer_free(t);
    }
    mers[0] = (gguf_str){2, "ab"};
    err[0] = 0;
    CHECK(!tokenizer_from_arrays(toks, NULL, n, mers, 1, err, sizeof err) && strstr(err, "merge 0"), "bad merge: %s", err);
    mers[0] = (gguf_str){3, "a c"};
    err[0] = 0;
    CHECK(!tokenizer_from_arrays(toks, NULL, n, mers, 1, err, sizeof err) && strstr(err, "missing"), "merge of unknown token: %s", err);
    err[0] = 0;
    CHECK(!tokenizer_from_arrays(toks + 1, NULL, n - 1, NULL, 0, err, sizeof err) && strstr(err, "byte token"),
          "missing byte token: %s", err);
    err[0] = 0;
    CHECK(!tokenizer_from_arrays(toks, NULL, 0, NULL, 0, err, sizeof err) && err[0], "empty vocabulary");
}

static void test_synthetic(void) {
    static const uint32_t sizes[] = {TOKSYNTH_MIN_VOCAB, 300, 1024, 4096};
    const char *texts[] = {"Hello world! The quick brown fox.", "int main(void) {\n    return 0;\n}\n",
                           "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c><\xef\xbd\x9cUser\xef\xbd\x9c>Hi<\xef\xbd\x9c"
                           "Assistant\xef\xbd\x9c></think>caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x99\x82"};
    char err[256] = "";
    CHECK(toksynth_write_gguf((gguf_writer *)1, 100, err, sizeof err) == -1 && err[0], "too small synthetic vocab refused");
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        char path[600];
        { char nm[64]; snprintf(nm, sizeof nm, "synth%u.gguf", sizes[si]); test_path(path, sizeof path, nm); }
        gguf_writer *w = gguf_writer_open(path, 32, err, sizeof err);
        CHECK(w, "writer: %s", err);
        if (!w) return;
        gguf_w_str(w, "general.architecture", "deepseek4");
        CHECK(toksynth_write_gguf(w, sizes[si], err, sizeof err) == 0, "toksynth %u: %s", sizes[si], err);
        CHECK(gguf_writer_begin_data(w) == 0 && gguf_writer_close(w) == 0, "write synth");
        gguf_file *f = gguf_open(path, err, sizeof err);
        CHECK(f, "open synth: %s", err);
        if (!f) return;
        tokenizer *t = tokenizer_from_gguf(f, err, sizeof err);
        CHECK(t, "load synth %u: %s", sizes[si], err);
        if (t) {
            CHECK(tokenizer_n_vocab(t) == sizes[si], "synth n_vocab %zu != %u", tokenizer_n_vocab(t), sizes[si]);
            CHECK(tokenizer_check_required(t, err, sizeof err) == 0, "synth %u: %s", sizes[si], err);
            CHECK(tokenizer_bos(t) == 0 && tokenizer_eos(t) == 1, "synth bos/eos ids");
            for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
                int32_t *ids = NULL;
                size_t n = 0;
                char *back = NULL;
                size_t bl = 0;
                CHECK(tokenizer_encode(t, texts[k], strlen(texts[k]), 0, &ids, &n) == 0, "synth encode");
                CHECK(tokenizer_decode(t, ids, n, &back, &bl) == 0 && bl == strlen(texts[k]) &&
                          !memcmp(back, texts[k], bl), "synth round trip %u/%zu", sizes[si], k);
                if (k == 2) CHECK(n > 4 && ids[0] == 0 && ids[1] == tokenizer_special(t, TOK_USER),
                                  "synth specials matched in text");
                if (k == 0 && sizes[si] >= 1024) CHECK(n < strlen(texts[k]) / 2, "synth merges shorten text (%zu ids)", n);
                free(ids);
                free(back);
            }
            tokenizer_free(t);
        }
        gguf_close(f);
    }
}

int main(int argc, char **argv) {
    (void)argc; (void)argv;
    test_pieces();

    char gpath[600], err[512] = "";
    test_path(gpath, sizeof gpath, "tok.gguf");
    gguf_writer *w = gguf_writer_open(gpath, 32, err, sizeof err);
    CHECK(w, "writer: %s", err);
    if (!w) return 1;
    gguf_w_str(w, "general.architecture", "deepseek4");
    gguf_w_str(w, "general.name", "tokenizer only");
    CHECK(tokjson_write_gguf(w, FIX "deepseek_v4_tokenizer.json", NULL, err, sizeof err) == 0, "tokjson: %s", err);
    CHECK(gguf_writer_begin_data(w) == 0 && gguf_writer_close(w) == 0, "write tok.gguf");
    CHECK(tokjson_vocab_size(FIX "deepseek_v4_tokenizer.json", err, sizeof err) == 129280, "vocab size");
    gguf_file *f = gguf_open(gpath, err, sizeof err);
    CHECK(f, "open tok.gguf: %s", err);
    if (!f) return 1;
    uint32_t u = 99;
    gguf_str s;
    CHECK(!gguf_get_str(f, "tokenizer.ggml.pre", &s) && s.len == 9 && !memcmp(s.ptr, "joyai-llm", 9), "pre key");
    CHECK(!gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &u) && u == 0, "bos id key");
    CHECK(!gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &u) && u == 1, "eos id key");
    const gguf_kv *km = gguf_find_kv(f, "tokenizer.ggml.merges");
    CHECK(km && km->arr_n == 127741, "127741 merges");
    tokenizer *t = tokenizer_from_gguf(f, err, sizeof err);
    CHECK(t, "tokenizer_from_gguf: %s", err);
    if (!t) return 1;
    CHECK(tokenizer_n_vocab(t) == 129280, "n_vocab %zu", tokenizer_n_vocab(t));
    CHECK(tokenizer_check_required(t, err, sizeof err) == 0, "%s", err);
    static const struct { enum tok_special k; int32_t id; } sp[] = {
        {TOK_BOS, 0}, {TOK_EOS, 1}, {TOK_PAD, 2}, {TOK_USER, 128803}, {TOK_ASSISTANT, 128804}, {TOK_THINK, 128821},
        {TOK_THINK_END, 128822}, {TOK_DSML, 128825}, {TOK_LATEST_REMINDER, 128828}, {TOK_ACTION, 128829},
        {TOK_QUERY, 128830}, {TOK_AUTHORITY, 128831}, {TOK_DOMAIN, 128832}, {TOK_TITLE, 128836},
        {TOK_READ_URL, 128845}, {TOK_EOT, 128805}, {TOK_FIM_HOLE, 128800}};
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++)
        CHECK(tokenizer_special(t, sp[i].k) == sp[i].id, "special %s: %d != %d", tokenizer_special_string(sp[i].k),
              tokenizer_special(t, sp[i].k), sp[i].id);
    CHECK(tokenizer_find(t, "\xc4\xa0world") == 2058, "find Gworld");

    size_t ok, n;
    n = run_encode_file(t, FIX "cases.jsonl", &ok);
    printf("cases.jsonl: %zu/%zu\n", ok, n);
    CHECK(n > 500 && ok == n, "cases.jsonl %zu/%zu", ok, n);
    n = run_encode_file(t, FIX "fuzz_cases.jsonl", &ok);
    printf("fuzz_cases.jsonl: %zu/%zu\n", ok, n);
    CHECK(n > 900 && ok == n, "fuzz_cases.jsonl %zu/%zu", ok, n);
    n = run_encode_file(t, FIX "hf_random_cases.jsonl", &ok);
    printf("hf_random_cases.jsonl: %zu/%zu\n", ok, n);
    CHECK(n == 8000 && ok == n, "hf_random_cases.jsonl %zu/%zu", ok, n);
    n = run_decode_file(t, FIX "decode_cases.jsonl", &ok);
    printf("decode_cases.jsonl: %zu/%zu\n", ok, n);
    CHECK(n > 1600 && ok == n, "decode_cases.jsonl %zu/%zu", ok, n);

    /* the development path gives the same tokenizer */
    tokenizer *tj = tokenizer_from_json_file(FIX "deepseek_v4_tokenizer.json", err, sizeof err);
    CHECK(tj, "from json: %s", err);
    if (tj) {
        n = run_encode_file(tj, FIX "cases.jsonl", &ok);
        CHECK(ok == n, "json path cases %zu/%zu", ok, n);
        tokenizer_free(tj);
    }

    /* without tokenizer.ggml.token_type, added tokens are inferred (neither a
     * byte nor a merge result): same ids */
    {
        const gguf_kv *kt = gguf_find_kv(f, "tokenizer.ggml.tokens");
        gguf_str *toks = malloc(kt->arr_n * sizeof *toks), *mers = malloc(km->arr_n * sizeof *mers);
        CHECK(!gguf_arr_strings(kt, toks) && !gguf_arr_strings(km, mers), "read arrays");
        tokenizer *tn = tokenizer_from_arrays(toks, NULL, kt->arr_n, mers, km->arr_n, err, sizeof err);
        CHECK(tn, "from arrays without types: %s", err);
        if (tn) {
            n = run_encode_file(tn, FIX "cases.jsonl", &ok);
            CHECK(ok == n, "no-token_type path cases %zu/%zu", ok, n);
            n = run_decode_file(tn, FIX "decode_cases.jsonl", &ok);
            CHECK(ok == n, "no-token_type path decode %zu/%zu", ok, n);
            tokenizer_free(tn);
        }
        free(toks);
        free(mers);
    }

    /* TOK_NO_SPECIAL: special strings are plain text */
    {
        const char *txt = "<think>";
        int32_t *ids = NULL;
        size_t k = 0;
        CHECK(tokenizer_encode_flags(t, txt, strlen(txt), TOK_NO_SPECIAL, &ids, &k) == 0 && k > 1, "no-special");
        free(ids);
        CHECK(tokenizer_encode_flags(t, txt, strlen(txt), 0, &ids, &k) == 0 && k == 1 && ids[0] == 128821, "special");
        free(ids);
        /* invalid UTF-8 round-trips */
        const char bad[] = "a\xff\xfe b\xc3(\xed\xa0\x80z";
        char *back = NULL;
        size_t bl = 0;
        CHECK(tokenizer_encode(t, bad, sizeof bad - 1, 0, &ids, &k) == 0 && tokenizer_decode(t, ids, k, &back, &bl) == 0 &&
                  bl == sizeof bad - 1 && !memcmp(back, bad, bl), "invalid UTF-8 round trip");
        free(ids);
        free(back);
    }

    /* random bytes (mostly invalid UTF-8, with special-token fragments) round-trip */
    {
        uint64_t x = 0x9E3779B97F4A7C15ull;
        static const char *frag[] = {"<\xef\xbd\x9c", "\xef\xbd\x9c>", "<think>", "\xef\xbd\x9c" "DSML\xef\xbd\x9c", "\xe2\x96\x81",
                                     " ", "\n", "\xf0\x9f", "\xe3\x83\xbb", "12"};
        int rt_ok = 1;
        for (int it = 0; it < 3000 && rt_ok; it++) {
            char buf[200];
            size_t bl = 0, want = (size_t)(it % 97);
            while (bl < want) {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                if ((x & 7) == 0) {
                    const char *fr = frag[(x >> 8) % 10];
                    size_t fl = strlen(fr);
                    if (bl + fl > sizeof buf) break;
                    memcpy(buf + bl, fr, fl);
                    bl += fl;
                } else buf[bl++] = (char)(x >> 24);
            }
            int32_t *ids = NULL;
            size_t k = 0;
            char *back = NULL;
            size_t backl = 0;
            rt_ok = tokenizer_encode(t, buf, bl, 0, &ids, &k) == 0 && tokenizer_decode(t, ids, k, &back, &backl) == 0 &&
                    backl == bl && !memcmp(back, buf, bl);
            free(ids);
            free(back);
        }
        CHECK(rt_ok, "random bytes round trip");
    }

    test_stream(t);
    tokenizer_free(t);
    gguf_close(f);
    test_no_tokenizer();
    test_config();
    test_bad_arrays();
    test_synthetic();

    return test_finish("test_tokenizer");
}
