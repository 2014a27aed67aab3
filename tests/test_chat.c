/* test_chat.c: the chat renderer and the completion parsers against the
 * official encoder's fixtures (tests/fixtures/chat/, made by DeepSeek's
 * encoding_dsv4.py): every rendering byte-exact, every parse JSON-equal,
 * every rejection rejected. Then the streaming parser (random splits must
 * give the same reasoning, content and tool calls as the one-shot parse),
 * the forced-greedy tracker, the tolerant parser on drifted DSML, Python
 * JSON number formatting, and a small fuzz of malformed completions.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "text/dsml.h"
#include "text/pyjson.h"
#include "text/strbuf.h"
#include "testutil.h"

static uint64_t rng = 0x1234567887654321ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static const char *FIX = "tests/fixtures/chat/";

static char **read_lines(const char *name, int *count) {
    char path[512];
    snprintf(path, sizeof path, "%s%s", FIX, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s (run from the repository root)\n", path);
        exit(1);
    }
    char **lines = NULL;
    int n = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len) continue;
        lines = realloc(lines, sizeof *lines * (size_t)(n + 1));
        lines[n++] = strdup(line);
    }
    free(line);
    fclose(f);
    *count = n;
    return lines;
}

static const char *name_of(const json_t *c) {
    const char *s = json_string_value(json_object_get(c, "name"));
    return s ? s : "?";
}

/* ---- rendering ---- */

static void test_render_cases(void) {
    int n;
    char **lines = read_lines("cases.jsonl", &n);
    int ok = 0, rejected = 0;
    for (int i = 0; i < n; i++) {
        char err[512];
        json_t *c = pyjson_loads(lines[i], strlen(lines[i]), err, sizeof err);
        CHECK(c != NULL, "line %d: %s", i + 1, err);
        if (!c) continue;
        const json_t *want = json_object_get(c, "rendered");
        char *got = chat_render(c, err, sizeof err);
        if (json_is_null(want)) {
            CHECK(got == NULL, "%s: the official encoder rejects this, we rendered it", name_of(c));
            if (!got) rejected++;
        } else {
            CHECK(got != NULL, "%s: rejected: %s", name_of(c), err);
            if (got) {
                int same = strlen(got) == json_string_length(want) && !strcmp(got, json_string_value(want));
                if (!same) {
                    size_t k = 0;
                    const char *w = json_string_value(want);
                    while (got[k] && got[k] == w[k]) k++;
                    CHECK(0, "%s: differs at byte %zu: got \"%.60s\" want \"%.60s\"", name_of(c), k, got + k, w + k);
                } else {
                    ok++;
                }
            }
        }
        free(got);
        json_decref(c);
        free(lines[i]);
    }
    free(lines);
    printf("render: %d byte-exact, %d rejected as expected, of %d cases\n", ok, rejected, n);
    CHECK(n >= 80, "only %d render cases", n);
}

/* ---- one-shot parsing ---- */

typedef struct {
    int n;
    json_t **parsed;       /* expected (NULL for rejected) */
    char **completion;
    size_t *completion_len;
    char **mode;
    char **name;
} parse_set;

static parse_set load_parse_cases(void) {
    parse_set ps = {0};
    char **lines = read_lines("parse_cases.jsonl", &ps.n);
    ps.parsed = calloc((size_t)ps.n, sizeof *ps.parsed);
    ps.completion = calloc((size_t)ps.n, sizeof *ps.completion);
    ps.completion_len = calloc((size_t)ps.n, sizeof *ps.completion_len);
    ps.mode = calloc((size_t)ps.n, sizeof *ps.mode);
    ps.name = calloc((size_t)ps.n, sizeof *ps.name);
    for (int i = 0; i < ps.n; i++) {
        json_error_t je;
        json_t *c = json_loads(lines[i], JSON_ALLOW_NUL, &je);
        if (!c) { fprintf(stderr, "parse_cases line %d: %s\n", i + 1, je.text); exit(1); }
        const json_t *comp = json_object_get(c, "completion");
        ps.completion_len[i] = json_string_length(comp);
        ps.completion[i] = malloc(ps.completion_len[i] + 1);
        memcpy(ps.completion[i], json_string_value(comp), ps.completion_len[i] + 1);
        ps.mode[i] = strdup(json_string_value(json_object_get(c, "thinking_mode")));
        ps.name[i] = strdup(name_of(c));
        json_t *p = json_object_get(c, "parsed");
        ps.parsed[i] = json_is_null(p) ? NULL : json_incref(p);
        json_decref(c);
        free(lines[i]);
    }
    free(lines);
    return ps;
}

static void test_parse_cases(const parse_set *ps) {
    int ok = 0, rejected = 0;
    for (int i = 0; i < ps->n; i++) {
        char err[512];
        json_t *got = chat_parse(ps->completion[i], ps->completion_len[i], ps->mode[i], err, sizeof err);
        if (!ps->parsed[i]) {
            CHECK(got == NULL, "%s: the official parser rejects this, we accepted it", ps->name[i]);
            if (!got) rejected++;
        } else {
            CHECK(got != NULL, "%s: rejected: %s", ps->name[i], err);
            if (got) {
                int same = json_equal(got, ps->parsed[i]);
                if (!same) {
                    char *a = json_dumps(got, JSON_COMPACT), *b = json_dumps(ps->parsed[i], JSON_COMPACT);
                    CHECK(0, "%s: got %s want %s", ps->name[i], a, b);
                    free(a);
                    free(b);
                } else {
                    ok++;
                }
            }
        }
        /* the tolerant parser agrees with the strict one wherever that accepts */
        if (ps->parsed[i]) {
            int strict = 0;
            json_t *t = chat_parse_tolerant(ps->completion[i], ps->completion_len[i], ps->mode[i], &strict);
            CHECK(strict && json_equal(t, ps->parsed[i]), "%s: tolerant parse differs from strict", ps->name[i]);
            json_decref(t);
        }
        json_decref(got);
    }
    printf("parse: %d equal, %d rejected as expected, of %d cases\n", ok, rejected, ps->n);
    CHECK(ps->n >= 39, "only %d parse cases", ps->n);
}

/* ---- streaming ---- */

typedef struct {
    char *reasoning, *content;
    size_t rl, cl;
    int ntools;
    char *names[16];
    char *args[16];
    size_t argl[16];
    int ended[16];
    int order_error;
} collected;

static void append(char **buf, size_t *len, const char *s, size_t n) {
    *buf = realloc(*buf, *len + n + 1);
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
}

static void on_event(void *user, const chat_event *ev) {
    collected *c = user;
    switch (ev->kind) {
    case CHAT_EV_REASONING:
        if (c->cl || c->ntools) c->order_error = 1;
        append(&c->reasoning, &c->rl, ev->text, ev->len);
        break;
    case CHAT_EV_CONTENT:
        if (c->ntools) c->order_error = 1;
        append(&c->content, &c->cl, ev->text, ev->len);
        break;
    case CHAT_EV_TOOL_START:
        if (ev->tool_index != c->ntools || c->ntools >= 16) { c->order_error = 1; break; }
        c->names[c->ntools] = strndup(ev->text, ev->len);
        c->ntools++;
        break;
    case CHAT_EV_TOOL_ARGS:
        if (ev->tool_index != c->ntools - 1 || ev->tool_index < 0 || c->ended[ev->tool_index]) {
            c->order_error = 1;
            break;
        }
        append(&c->args[ev->tool_index], &c->argl[ev->tool_index], ev->text, ev->len);
        break;
    case CHAT_EV_TOOL_END:
        if (ev->tool_index != c->ntools - 1 || ev->tool_index < 0) { c->order_error = 1; break; }
        c->ended[ev->tool_index] = 1;
        break;
    }
}

static void collected_free(collected *c) {
    free(c->reasoning);
    free(c->content);
    for (int k = 0; k < c->ntools; k++) {
        free(c->names[k]);
        free(c->args[k]);
    }
    memset(c, 0, sizeof *c);
}

static int str_eq(const char *a, size_t al, const json_t *want) {
    if (!a) { a = ""; al = 0; }
    return json_is_string(want) && al == json_string_length(want) && !memcmp(a, json_string_value(want), al);
}

/* Feeds text in random pieces; checks events and the final message against want. */
static void stream_check(const char *name, const char *text, size_t n, const char *mode, const json_t *want,
                         int max_piece) {
    collected c = {0};
    chat_stream *s = chat_stream_new(mode, on_event, &c);
    size_t at = 0;
    while (at < n) {
        size_t piece = 1 + rnd() % (unsigned)max_piece;
        if (piece > n - at) piece = n - at;
        chat_stream_feed(s, text + at, piece);
        at += piece;
    }
    int strict = 0;
    json_t *final = chat_stream_finish(s, &strict);
    CHECK(json_equal(final, (json_t *)want), "%s: stream final message differs", name);
    CHECK(strict, "%s: stream final not strict-accepted", name);
    CHECK(!c.order_error, "%s: events out of order", name);
    CHECK(str_eq(c.reasoning, c.rl, json_object_get(want, "reasoning_content")), "%s: reasoning deltas \"%s\"",
          name, c.reasoning ? c.reasoning : "");
    CHECK(str_eq(c.content, c.cl, json_object_get(want, "content")), "%s: content deltas \"%s\"", name,
          c.content ? c.content : "");
    const json_t *calls = json_object_get(want, "tool_calls");
    CHECK((size_t)c.ntools == json_array_size(calls), "%s: %d tool calls streamed, want %zu", name, c.ntools,
          json_array_size(calls));
    for (int k = 0; k < c.ntools && (size_t)k < json_array_size(calls); k++) {
        const json_t *fn = json_object_get(json_array_get(calls, k), "function");
        CHECK(str_eq(c.names[k], strlen(c.names[k]), json_object_get(fn, "name")), "%s: tool %d name", name, k);
        CHECK(str_eq(c.args[k], c.argl[k], json_object_get(fn, "arguments")), "%s: tool %d arguments \"%s\"",
              name, k, c.args[k] ? c.args[k] : "");
        CHECK(c.ended[k], "%s: tool %d never ended", name, k);
    }
    CHECK(!dsml_in_structure(s), "%s: still in DSML structure after the end", name);
    json_decref(final);
    chat_stream_free(s);
    collected_free(&c);
}

static void test_streaming(const parse_set *ps) {
    int checked = 0;
    const char *eos = CHAT_EOS;
    size_t eosl = strlen(eos);
    for (int i = 0; i < ps->n; i++) {
        if (!ps->parsed[i]) continue;
        for (int rep = 0; rep < 40; rep++)
            stream_check(ps->name[i], ps->completion[i], ps->completion_len[i], ps->mode[i], ps->parsed[i],
                         rep < 10 ? 1 : rep < 20 ? 3 : 17);
        /* servers stop on the EOS id and never feed its text */
        size_t n = ps->completion_len[i];
        if (n >= eosl && !memcmp(ps->completion[i] + n - eosl, eos, eosl))
            stream_check(ps->name[i], ps->completion[i], n - eosl, ps->mode[i], ps->parsed[i], 5);
        checked++;
    }
    printf("stream: %d accepted completions, 41 random splits each, events == one-shot parse\n", checked);
}

/* ---- forced-greedy tracker ---- */

static void test_structure_tracker(void) {
    const char *text =
        "Sure.\n\n<" CHAT_DSML "tool_calls>\n<" CHAT_DSML "invoke name=\"f\">\n<" CHAT_DSML
        "parameter name=\"a\" string=\"true\">hello world</" CHAT_DSML "parameter>\n<" CHAT_DSML
        "parameter name=\"b\" string=\"false\">{\"k\": \"v v\", \"n\": [1, 2]}</" CHAT_DSML "parameter>\n</" CHAT_DSML
        "invoke>\n</" CHAT_DSML "tool_calls>";
    size_t n = strlen(text);
    char *flags = calloc(n + 1, 1);
    chat_stream *s = chat_stream_new("chat", NULL, NULL);
    flags[0] = (char)dsml_in_structure(s);
    for (size_t i = 0; i < n; i++) {
        chat_stream_feed(s, text + i, 1);
        flags[i + 1] = (char)dsml_in_structure(s);
    }
    /* flag after the prefix ending with `needle` (first occurrence) */
#define FLAG_AFTER(needle) flags[(size_t)(strstr(text, needle) - text) + strlen(needle)]
    CHECK(FLAG_AFTER("Sure.") == 0, "content is not structure");
    CHECK(FLAG_AFTER("tool_calls>") == 1, "after the block start: structure");
    CHECK(FLAG_AFTER("invoke name=\"f") == 1, "invoke header: structure");
    CHECK(FLAG_AFTER("string=\"true\">") == 0, "string value start: payload");
    CHECK(FLAG_AFTER("hello wo") == 0, "string value: payload");
    CHECK(FLAG_AFTER("hello world<") == 0, "one '<' may be payload");
    CHECK(FLAG_AFTER("hello world</") == 1, "partial closing tag: structure");
    CHECK(FLAG_AFTER("string=\"false\">") == 1, "JSON value start: structure");
    CHECK(FLAG_AFTER("{\"k\": \"v") == 0, "JSON string: payload");
    CHECK(FLAG_AFTER("{\"k\": \"v v\"") == 1, "after the JSON string: structure");
    CHECK(FLAG_AFTER("[1, ") == 1, "JSON numbers: structure");
    CHECK(flags[n] == 0, "after the block: outside");
#undef FLAG_AFTER
    CHECK(chat_stream_tool_count(s) == 1, "one tool call");
    json_t *m = chat_stream_finish(s, NULL);
    const json_t *fn = json_object_get(json_array_get(json_object_get(m, "tool_calls"), 0), "function");
    CHECK(!strcmp(json_string_value(json_object_get(fn, "arguments")),
                  "{\"a\": \"hello world\", \"b\": {\"k\": \"v v\", \"n\": [1, 2]}}"),
          "tracker text arguments");
    json_decref(m);
    chat_stream_free(s);
    free(flags);

    /* DSML quoted inside reasoning is not a tool call and never forces greedy */
    s = chat_stream_new("thinking", NULL, NULL);
    const char *r = "I could write <" CHAT_DSML "tool_calls>\n<" CHAT_DSML "invoke name=\"x\">";
    chat_stream_feed(s, r, strlen(r));
    CHECK(!dsml_in_structure(s) && !chat_stream_in_tool_block(s), "DSML in reasoning is not structure");
    chat_stream_free(s);
}

/* ---- tolerant parsing ---- */

static json_t *args_of(const json_t *m, size_t k) {
    const json_t *fn = json_object_get(json_array_get(json_object_get(m, "tool_calls"), k), "function");
    const char *a = json_string_value(json_object_get(fn, "arguments"));
    return a ? json_loads(a, 0, NULL) : NULL;
}

static void test_tolerant(void) {
    struct {
        const char *mode, *text, *content, *reasoning, *tool, *args;
    } cases[] = {
        /* single newline before the block, no EOS */
        {"chat", "Let me check.\n<" CHAT_DSML "tool_calls>\n<" CHAT_DSML "invoke name=\"ls\">\n<" CHAT_DSML
                 "parameter name=\"path\" string=\"true\">/tmp</" CHAT_DSML "parameter>\n</" CHAT_DSML
                 "invoke>\n</" CHAT_DSML "tool_calls>",
         "Let me check.", "", "ls", "{\"path\": \"/tmp\"}"},
        /* first bar missing, whitespace between tags, missing string attribute */
        {"thinking", "hmm</think>\n\n<DSML\xef\xbd\x9ctool_calls>\n\n  <DSML\xef\xbd\x9cinvoke name=\"f\">\n"
                     "<DSML\xef\xbd\x9cparameter name=\"q\">a b</DSML\xef\xbd\x9cparameter>\n"
                     "<DSML\xef\xbd\x9cparameter name=\"n\" string=\"false\"> 3 </DSML\xef\xbd\x9cparameter>\n"
                     "</DSML\xef\xbd\x9cinvoke>\n</DSML\xef\xbd\x9ctool_calls>" CHAT_EOS,
         "", "hmm", "f", "{\"q\": \"a b\", \"n\": 3}"},
        /* invalid JSON in a string="false" value becomes a string */
        {"chat", "\n\n<" CHAT_DSML "tool_calls>\n<" CHAT_DSML "invoke name=\"g\">\n<" CHAT_DSML
                 "parameter name=\"x\" string=\"false\">not json</" CHAT_DSML "parameter>\n</" CHAT_DSML
                 "invoke>\n</" CHAT_DSML "tool_calls>junk",
         "", "", "g", "{\"x\": \"not json\"}"},
        /* NaN is not JSON: kept as a string */
        {"chat", "\n\n<" CHAT_DSML "tool_calls>\n<" CHAT_DSML "invoke name=\"h\">\n<" CHAT_DSML
                 "parameter name=\"x\" string=\"false\">[NaN]</" CHAT_DSML "parameter>\n</" CHAT_DSML
                 "invoke>\n</" CHAT_DSML "tool_calls>junk",
         "", "", "h", "{\"x\": \"[NaN]\"}"},
        /* cut off while thinking: all reasoning */
        {"thinking", "still thinking about", "", "still thinking about", NULL, NULL},
        /* unusable block: everything is content */
        {"chat", "text <" CHAT_DSML "tool_calls> nothing", "text <" CHAT_DSML "tool_calls> nothing", "", NULL, NULL},
        /* no EOS text, plain answer */
        {"thinking", "r</think>answer", "answer", "r", NULL, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int strict = 1;
        json_t *m = chat_parse_tolerant(cases[i].text, strlen(cases[i].text), cases[i].mode, &strict);
        CHECK(m != NULL, "tolerant %zu: NULL", i);
        if (!m) continue;
        const char *content = json_string_value(json_object_get(m, "content"));
        const char *reasoning = json_string_value(json_object_get(m, "reasoning_content"));
        CHECK(content && !strcmp(content, cases[i].content), "tolerant %zu: content \"%s\"", i, content);
        CHECK(reasoning && !strcmp(reasoning, cases[i].reasoning), "tolerant %zu: reasoning \"%s\"", i, reasoning);
        size_t ncalls = json_array_size(json_object_get(m, "tool_calls"));
        CHECK(ncalls == (cases[i].tool ? 1u : 0u), "tolerant %zu: %zu calls", i, ncalls);
        if (cases[i].tool && ncalls) {
            const json_t *fn = json_object_get(json_array_get(json_object_get(m, "tool_calls"), 0), "function");
            CHECK(!strcmp(json_string_value(json_object_get(fn, "name")), cases[i].tool), "tolerant %zu: name", i);
            json_t *got = args_of(m, 0), *want = json_loads(cases[i].args, 0, NULL);
            CHECK(got && json_equal(got, want), "tolerant %zu: arguments %s", i,
                  json_string_value(json_object_get(fn, "arguments")));
            json_decref(got);
            json_decref(want);
        }
        json_decref(m);
    }
}

/* ---- Python JSON ---- */

static void test_pyjson(void) {
    struct {
        const char *in, *out;
    } cases[] = {
        {"1e3", "1000.0"}, {"1E5", "100000.0"}, {"1e-7", "1e-07"}, {"1E16", "1e+16"}, {"1e15", "1000000000000000.0"},
        {"-0.0", "-0.0"}, {"1.0", "1.0"}, {"0.1", "0.1"}, {"0.0001", "0.0001"}, {"0.00001", "1e-05"},
        {"2.5e-5", "2.5e-05"}, {"1e22", "1e+22"}, {"123456789012345678.0", "1.2345678901234568e+17"},
        {"12345678901234567890123", "12345678901234567890123"}, {"-0", "0"}, {"NaN", "NaN"},
        {"-Infinity", "-Infinity"}, {"1e400", "Infinity"}, {"[1,{\"b\":1,\"a\":[]},\"\\u00e9/\\u0001\"]",
                                                            "[1, {\"b\": 1, \"a\": []}, \"\xc3\xa9/\\u0001\"]"},
        {"{\"k\": 1, \"j\": 2, \"k\": 3}", "{\"k\": 3, \"j\": 2}"}, {"\"\\ud83d\\ude42\"", "\"\xf0\x9f\x99\x82\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[200];
        json_t *v = pyjson_loads(cases[i].in, strlen(cases[i].in), err, sizeof err);
        CHECK(v != NULL, "pyjson %s: %s", cases[i].in, err);
        if (!v) continue;
        char *d = pyjson_dumps(v);
        CHECK(d && !strcmp(d, cases[i].out), "pyjson %s -> %s, want %s", cases[i].in, d, cases[i].out);
        free(d);
        json_decref(v);
    }
    const char *bad[] = {"", "01", "1.", "[1,]", "{\"a\" 1}", "\"a\nb\"", "tru", "1 2", "{\"a\":1,}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *v = pyjson_loads(bad[i], strlen(bad[i]), NULL, 0);
        CHECK(v == NULL, "pyjson accepted bad JSON '%s'", bad[i]);
        json_decref(v);
    }
    /* the appending forms build the same text as the malloc'ing ones */
    strbuf b = {0};
    CHECK(!strcmp(strbuf_text(&b), ""), "empty strbuf reads as \"\"");
    json_t *v = json_pack("{s:[i,f,s]}", "k", 1, 0.5, "q\"\n");
    pyjson_dump_to(&b, v);
    strbuf_str(&b, " ");
    pyjson_dump_string_to(&b, "\t\x01", 2);
    strbuf_str(&b, " ");
    pyjson_escape(&b, "\"", 1);
    CHECK(!strcmp(strbuf_text(&b), "{\"k\": [1, 0.5, \"q\\\"\\n\"]} \"\\t\\u0001\" \\\""), "appended JSON: %s",
          strbuf_text(&b));
    char *whole = pyjson_dumps(v), *str = pyjson_dumps_string("\t\x01", 2);
    CHECK(whole && !strncmp(strbuf_text(&b), whole, strlen(whole)), "pyjson_dumps agrees");
    CHECK(str && strstr(strbuf_text(&b), str), "pyjson_dumps_string agrees");
    free(whole);
    free(str);
    json_decref(v);
    char *t = strbuf_take(&b);
    CHECK(t && !b.p && !b.n, "take empties the buffer");
    free(t);
    t = strbuf_take(&b);
    CHECK(t && !strcmp(t, ""), "take of an empty buffer gives \"\"");
    free(t);
}

static void test_modes(void) {
    chat_mode m;
    CHECK(chat_mode_from_name("max", &m) == 0 && m == CHAT_MODE_MAX, "max name");
    CHECK(chat_mode_from_name("bogus", &m) == -1, "bogus name");
    CHECK(chat_mode_for_context(CHAT_MODE_MAX, 393215) == CHAT_MODE_THINKING, "max falls back below 384K");
    CHECK(chat_mode_for_context(CHAT_MODE_MAX, 393216) == CHAT_MODE_MAX, "max kept at 384K");
    CHECK(chat_mode_for_context(CHAT_MODE_CHAT, 10) == CHAT_MODE_CHAT, "chat unchanged");
    m = CHAT_MODE_CHAT;
    CHECK(chat_mode_from_effort("medium", &m) == 0 && m == CHAT_MODE_THINKING, "effort medium");
    CHECK(chat_mode_from_effort("none", &m) == 0 && m == CHAT_MODE_CHAT, "effort none");
    CHECK(chat_mode_from_effort("extreme", &m) == -1, "effort unknown");
    char err[200];
    char *inv = dsml_encode_invoke("f", "[1]", err, sizeof err);
    CHECK(inv == NULL, "arguments that are a JSON list are rejected");
    inv = dsml_encode_invoke("f", "{}", err, sizeof err);
    CHECK(inv && !strcmp(inv, "<" CHAT_DSML "invoke name=\"f\">\n\n</" CHAT_DSML "invoke>"), "empty arguments");
    free(inv);
}

/* ---- fuzz ---- */

static void test_fuzz(const parse_set *ps) {
    int iters = getenv("MINKE_ASAN") ? 600 : 4000;
    static const char *frags[] = {CHAT_EOS, CHAT_THINK_CLOSE, "<" CHAT_DSML "invoke name=\"", "</" CHAT_DSML "invoke>",
                                  "<" CHAT_DSML "parameter name=\"a\" string=\"", "</" CHAT_DSML "parameter>",
                                  "\n\n<" CHAT_DSML "tool_calls>", "</" CHAT_DSML "tool_calls>", "\">\n", "\"",
                                  "<DSML\xef\xbd\x9c", "\xef\xbd", "\xff", "\n"};
    size_t nf = sizeof frags / sizeof frags[0];
    for (int it = 0; it < iters; it++) {
        int src = (int)(rnd() % (unsigned)ps->n);
        size_t n = ps->completion_len[src];
        char *t = malloc(n + 256);
        memcpy(t, ps->completion[src], n);
        int muts = 1 + (int)(rnd() % 4);
        for (int k = 0; k < muts; k++) {
            unsigned op = rnd() % 4;
            size_t at = n ? rnd() % (n + 1) : 0;
            if (op == 0 && n) { /* truncate */
                n = at;
            } else if (op == 1 && n) { /* flip a byte */
                t[at % n] ^= (char)(1 + rnd() % 255);
            } else if (op == 2) { /* insert a fragment */
                const char *f = frags[rnd() % nf];
                size_t fl = strlen(f);
                if (n + fl < n + 256 - 1 && n + fl <= ps->completion_len[src] + 200) {
                    memmove(t + at + fl, t + at, n - at);
                    memcpy(t + at, f, fl);
                    n += fl;
                }
            } else if (n) { /* delete a span */
                size_t len = rnd() % 12;
                if (at + len > n) len = n - at;
                memmove(t + at, t + at + len, n - at - len);
                n -= len;
            }
        }
        const char *mode = (rnd() & 1) ? "chat" : "thinking";
        char err[300];
        json_t *a = chat_parse(t, n, mode, err, sizeof err);
        int strict = 0;
        json_t *b = chat_parse_tolerant(t, n, mode, &strict);
        CHECK(b && json_is_string(json_object_get(b, "content")) &&
                  json_is_string(json_object_get(b, "reasoning_content")) &&
                  json_is_array(json_object_get(b, "tool_calls")),
              "fuzz %d: tolerant result malformed", it);
        collected c = {0};
        chat_stream *s = chat_stream_new(mode, on_event, &c);
        for (size_t at = 0; at < n;) {
            size_t piece = 1 + rnd() % 7;
            if (piece > n - at) piece = n - at;
            chat_stream_feed(s, t + at, piece);
            (void)dsml_in_structure(s);
            at += piece;
        }
        json_t *f = chat_stream_finish(s, NULL);
        CHECK(f != NULL && json_equal(f, b), "fuzz %d: stream final != tolerant parse", it);
        if (a && strict) {
            /* what the strict parser accepts, the tolerant one returns unchanged */
            CHECK(json_equal(a, b), "fuzz %d: tolerant != strict on an accepted text", it);
        }
        json_decref(f);
        chat_stream_free(s);
        collected_free(&c);
        json_decref(a);
        json_decref(b);
        free(t);
    }
    printf("fuzz: %d mutated completions through strict, tolerant and streaming parsers\n", iters);
}

/* Random type confusion in conversations: every input either renders or is
 * rejected with a message; nothing crashes (run under ASan in CI). */
static void test_render_fuzz(void) {
    int n;
    char **lines = read_lines("cases.jsonl", &n);
    static const char *pool[] = {"null", "5", "1.5", "\"x\"", "\"\"", "[]", "{}", "[1]", "{\"a\": 1}", "true",
                                 "[{\"type\": \"text\", \"text\": \"t\"}]", "[{\"type\": \"image\"}]",
                                 "[{\"id\": 1, \"function\": {\"name\": 2, \"arguments\": {\"k\": 1}}}]",
                                 "[{\"function\": {\"name\": \"f\", \"arguments\": \"{\\\"a\\\": NaN}\"}}]",
                                 "[{\"type\": \"function\"}]", "\"action\"", "\"tool\"", "\"user\"",
                                 "\"assistant\"", "\"developer\"", "\"latest_reminder\""};
    static const char *fields[] = {"role", "content", "tool_calls", "reasoning_content", "tools", "task", "wo_eos",
                                   "tool_call_id", "response_format"};
    static const char *top[] = {"tools", "thinking_mode", "reasoning_effort", "drop_thinking", "context"};
    int iters = getenv("MINKE_ASAN") ? 1500 : 6000, rendered = 0, rejected = 0;
    for (int it = 0; it < iters; it++) {
        json_t *c = pyjson_loads(lines[it % n], strlen(lines[it % n]), NULL, 0);
        json_t *msgs = json_object_get(c, "messages");
        int muts = 1 + (int)(rnd() % 3);
        for (int k = 0; k < muts; k++) {
            const char *v = pool[rnd() % (sizeof pool / sizeof pool[0])];
            json_t *val = json_loads(v, 0, NULL);
            unsigned op = rnd() % 8;
            if (op == 0 && json_array_size(msgs)) {
                json_array_set_new(msgs, rnd() % json_array_size(msgs), val);
            } else if (op == 1) {
                json_object_set_new(c, top[rnd() % 5], val);
            } else if (json_array_size(msgs)) {
                json_t *m = json_array_get(msgs, rnd() % json_array_size(msgs));
                if (json_is_object(m)) json_object_set_new(m, fields[rnd() % 9], val);
                else json_decref(val);
            } else {
                json_decref(val);
            }
        }
        char err[256] = "";
        char *r = chat_render(c, err, sizeof err);
        if (r) rendered++;
        else {
            rejected++;
            CHECK(err[0], "render fuzz %d: rejected without a message", it);
        }
        free(r);
        json_decref(c);
    }
    for (int i = 0; i < n; i++) free(lines[i]);
    free(lines);
    printf("render fuzz: %d mutated conversations, %d rendered, %d rejected with a message\n", iters, rendered,
           rejected);
}

int main(void) {
    test_render_cases();
    parse_set ps = load_parse_cases();
    test_parse_cases(&ps);
    test_streaming(&ps);
    test_structure_tracker();
    test_tolerant();
    test_pyjson();
    test_modes();
    test_fuzz(&ps);
    test_render_fuzz();
    for (int i = 0; i < ps.n; i++) {
        json_decref(ps.parsed[i]);
        free(ps.completion[i]);
        free(ps.mode[i]);
        free(ps.name[i]);
    }
    free(ps.parsed);
    free(ps.completion);
    free(ps.completion_len);
    free(ps.mode);
    free(ps.name);
    return test_finish("test_chat");
}
