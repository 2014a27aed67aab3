/* cmd_tokenize.c: `minke tokenize`, JSON lines text <-> ids with the GGUF's tokenizer.
 *
 * Encode (default): each input line {"text": "...", optional "add_bos": true}
 * gives {"ids": [...]}. --decode: {"ids": [...]} gives {"hex": "..."} (the
 * decoded bytes, lowercase hex). --pieces: the pre-tokenizer's pieces only.
 * A bad line gives {"error": "..."} and processing continues, so output
 * line k always answers input line k. --bench FILE measures encode speed.
 * The tokenizer comes from the GGUF (-m); --json loads a Hugging Face
 * tokenizer.json directly (development only). --write-gguf OUT writes a
 * GGUF holding only general.* keys and the tokenizer of --json FILE or
 * --synthetic N (neither: no tokenizer at all), for tests without a model.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "gguf/gguf.h"
#include "text/tokenizer.h"
#include "text/tokjson.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: minke tokenize -m MODEL.gguf [options] < in.jsonl > out.jsonl\n"
            "  -m, --model FILE   GGUF whose tokenizer.ggml.* metadata is used\n"
            "  --json FILE        use a Hugging Face tokenizer.json instead (development)\n"
            "  --decode           input {\"ids\": [...]}, output {\"hex\": \"...\"}\n"
            "  --pieces           input {\"text\": ...}, output the pre-tokenizer pieces\n"
            "  --no-special       do not match special/added tokens in the text\n"
            "  --bench FILE       encode FILE repeatedly and print MB/s\n"
            "  -i FILE, -o FILE   read/write files instead of stdin/stdout\n"
            "  --write-gguf OUT   write a tokenizer-only GGUF from --json FILE or --synthetic N\n"
            "                     (with neither: a GGUF without tokenizer), then exit\n"
            "Encode input lines: {\"text\": \"...\", \"add_bos\": true (optional)} -> {\"ids\": [...]}\n");
}

static void put_error(FILE *out, const char *msg) {
    json_t *o = json_string(msg);
    char *s = o ? json_dumps(o, JSON_ENCODE_ANY) : NULL;
    fprintf(out, "{\"error\": %s}\n", s ? s : "\"bad input\"");
    free(s);
    json_decref(o);
}

typedef struct { json_t *arr; } piece_ctx;
static void add_piece(void *ctx, const char *p, size_t n) {
    piece_ctx *pc = ctx;
    json_array_append_new(pc->arr, json_stringn(p, n));
}

static int write_gguf(const char *out, const char *json_path, long synth) {
    char err[512] = "";
    gguf_writer *w = gguf_writer_open(out, 32, err, sizeof err);
    if (!w) { fprintf(stderr, "minke tokenize: %s\n", err); return 1; }
    gguf_w_str(w, "general.architecture", "deepseek4");
    gguf_w_str(w, "general.name", json_path ? "tokenizer only" : synth > 0 ? "synthetic tokenizer only" : "no tokenizer");
    if ((json_path && tokjson_write_gguf(w, json_path, NULL, err, sizeof err)) ||
        (!json_path && synth > 0 && toksynth_write_gguf(w, (uint32_t)synth, err, sizeof err))) {
        fprintf(stderr, "minke tokenize: %s\n", err);
        gguf_writer_abort(w);
        return 1;
    }
    if (gguf_writer_begin_data(w) || gguf_writer_close(w)) {
        fprintf(stderr, "minke tokenize: writing %s failed\n", out);
        return 1;
    }
    return 0;
}

static int run_bench(const tokenizer *t, const char *path, unsigned flags) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "minke tokenize: cannot open %s\n", path); return 1; }
    size_t cap = 1 << 20, len = 0, k;
    char *buf = malloc(cap);
    while (buf && (k = fread(buf + len, 1, cap - len, f)) > 0) {
        len += k;
        if (len == cap) { cap *= 2; char *nb = realloc(buf, cap); if (!nb) { free(buf); buf = NULL; } else buf = nb; }
    }
    fclose(f);
    if (!buf) { fprintf(stderr, "minke tokenize: out of memory\n"); return 1; }
    struct timespec t0, t1, c0, c1;
    size_t iters = 0, ntok = 0;
    double secs = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    do {
        int32_t *ids = NULL;
        if (tokenizer_encode_flags(t, buf, len, flags, &ids, &ntok)) { fprintf(stderr, "encode failed\n"); free(buf); return 1; }
        free(ids);
        iters++;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    } while (secs < 1.0 || iters < 2);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    /* CPU time too: on a busy machine wall time understates the speed */
    double cpu = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
    double mb = (double)len * (double)iters / 1e6;
    printf("{\"bytes\": %zu, \"tokens\": %zu, \"iterations\": %zu, \"seconds\": %.3f, \"MB_per_s\": %.2f, "
           "\"cpu_seconds\": %.3f, \"MB_per_cpu_s\": %.2f, \"bytes_per_token\": %.3f}\n",
           len, ntok, iters, secs, mb / secs, cpu, cpu > 0 ? mb / cpu : 0.0, ntok ? (double)len / (double)ntok : 0.0);
    free(buf);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *json_path = NULL, *bench = NULL, *in_path = NULL, *out_path = NULL;
    const char *write_out = NULL;
    long synth = 0;
    int decode = 0, pieces = 0;
    unsigned flags = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_next = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_next) model = argv[++i];
        else if (!strcmp(a, "--json") && has_next) json_path = argv[++i];
        else if (!strcmp(a, "--bench") && has_next) bench = argv[++i];
        else if (!strcmp(a, "-i") && has_next) in_path = argv[++i];
        else if (!strcmp(a, "-o") && has_next) out_path = argv[++i];
        else if (!strcmp(a, "--write-gguf") && has_next) write_out = argv[++i];
        else if (!strcmp(a, "--synthetic") && has_next) synth = strtol(argv[++i], NULL, 10);
        else if (!strcmp(a, "--decode")) decode = 1;
        else if (!strcmp(a, "--pieces")) pieces = 1;
        else if (!strcmp(a, "--no-special")) flags |= TOK_NO_SPECIAL;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else {
            fprintf(stderr, "minke tokenize: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (write_out) return write_gguf(write_out, json_path, synth);
    if (!model && !json_path && !pieces) {
        fprintf(stderr, "minke tokenize: -m MODEL.gguf is required\n\n");
        usage(stderr);
        return 2;
    }

    char err[512] = "";
    gguf_file *g = NULL;
    tokenizer *t = NULL;
    if (model) {
        g = gguf_open(model, err, sizeof err);
        if (!g) { fprintf(stderr, "minke tokenize: %s\n", err); return 1; }
        t = tokenizer_from_gguf(g, err, sizeof err);
        if (!t) { fprintf(stderr, "minke tokenize: %s: %s\n", model, err); gguf_close(g); return 1; }
    } else if (json_path) {
        t = tokenizer_from_json_file(json_path, err, sizeof err);
        if (!t) { fprintf(stderr, "minke tokenize: %s\n", err); return 1; }
    }
    int rc = 0;
    if (bench) {
        rc = t ? run_bench(t, bench, flags) : 2;
        goto done;
    }

    FILE *in = stdin, *out = stdout;
    if (in_path && !(in = fopen(in_path, "r"))) { fprintf(stderr, "minke tokenize: cannot open %s\n", in_path); rc = 1; goto done; }
    if (out_path && !(out = fopen(out_path, "w"))) {
        fprintf(stderr, "minke tokenize: cannot write %s\n", out_path);
        if (in != stdin) fclose(in);
        rc = 1;
        goto done;
    }
    char *line = NULL, *hexbuf = NULL;
    size_t cap = 0, hexcap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, in)) > 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        if (len == 0) { put_error(out, "empty line"); continue; }
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &je);
        if (!j || !json_is_object(j)) {
            char msg[300];
            snprintf(msg, sizeof msg, "not a JSON object: %s", j ? "wrong type" : je.text);
            put_error(out, msg);
            json_decref(j);
            continue;
        }
        if (decode) {
            json_t *ids = json_object_get(j, "ids");
            if (!json_is_array(ids)) { put_error(out, "expected {\"ids\": [...]}"); json_decref(j); continue; }
            size_t n = json_array_size(ids), total = 0;
            const char *bad = NULL;
            for (size_t i = 0; i < n && !bad; i++) {
                json_t *v = json_array_get(ids, i);
                size_t bl = 0;
                if (!json_is_integer(v)) bad = "ids must be integers";
                else if (json_integer_value(v) < 0 || json_integer_value(v) >= (json_int_t)tokenizer_n_vocab(t)) bad = "id out of range";
                else { tokenizer_token_bytes(t, (int32_t)json_integer_value(v), &bl); total += bl; }
            }
            if (bad) { put_error(out, bad); json_decref(j); continue; }
            if (total * 2 + 1 > hexcap) {
                hexcap = total * 2 + 1;
                char *nh = realloc(hexbuf, hexcap);
                if (!nh) { put_error(out, "out of memory"); json_decref(j); continue; }
                hexbuf = nh;
            }
            size_t p = 0;
            static const char hx[] = "0123456789abcdef";
            for (size_t i = 0; i < n; i++) {
                size_t bl = 0;
                const unsigned char *b = (const unsigned char *)tokenizer_token_bytes(t, (int32_t)json_integer_value(json_array_get(ids, i)), &bl);
                for (size_t k = 0; k < bl; k++) { hexbuf[p++] = hx[b[k] >> 4]; hexbuf[p++] = hx[b[k] & 15]; }
            }
            hexbuf[p] = 0;
            fprintf(out, "{\"hex\": \"%s\"}\n", hexbuf);
        } else {
            json_t *text = json_object_get(j, "text");
            json_t *ab = json_object_get(j, "add_bos");
            if (!json_is_string(text)) { put_error(out, "expected {\"text\": \"...\"}"); json_decref(j); continue; }
            if (ab && !json_is_boolean(ab)) { put_error(out, "add_bos must be true or false"); json_decref(j); continue; }
            if (pieces) {
                piece_ctx pc = {json_array()};
                tok_pretokenize(json_string_value(text), json_string_length(text), add_piece, &pc);
                json_t *o = json_pack("{s:o}", "pieces", pc.arr);
                char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
                fprintf(out, "%s\n", s ? s : "{\"error\": \"out of memory\"}");
                free(s);
                json_decref(o);
            } else {
                int32_t *ids = NULL;
                size_t n = 0;
                unsigned f = flags | (json_is_true(ab) ? TOK_ADD_BOS : 0);
                if (tokenizer_encode_flags(t, json_string_value(text), json_string_length(text), f, &ids, &n)) {
                    put_error(out, "out of memory");
                } else {
                    fputs("{\"ids\": [", out);
                    for (size_t i = 0; i < n; i++) fprintf(out, i ? ", %d" : "%d", ids[i]);
                    fputs("]}\n", out);
                }
                free(ids);
            }
        }
        json_decref(j);
    }
    free(line);
    free(hexbuf);
    if (in != stdin) fclose(in);
    if (out != stdout && fclose(out)) { fprintf(stderr, "minke tokenize: write error\n"); rc = 1; }
    else if (out == stdout && fflush(stdout)) rc = 1;
done:
    tokenizer_free(t);
    gguf_close(g);
    return rc;
}
