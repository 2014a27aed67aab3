/* dsml.c: DSML tool calls in both directions and the parsers of generated
 * text: the official strict parser (byte-faithful to the reference
 * parse_message_from_completion_text, serving.md §2.7), a tolerant parser
 * for servers, and the streaming parser with the forced-greedy tracker
 * (serving.md §3.3).
 *
 * The strict parser reproduces the reference's regular expressions by hand:
 * the invoke header `^\s*name="(.*?)">\n$` and the parameter
 * `^ name="(.*?)" string="(true|false)">(.*?)<$` (Python's `$` also matches
 * before one final newline), which is what makes it accept the odd inputs
 * pinned by tests/fixtures/chat/parse_cases.jsonl.
 */
#define _GNU_SOURCE
#include "text/dsml.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "text/pyjson.h"
#include "text/unicode.h"

#define DSML_INVOKE_OPEN "<" CHAT_DSML "invoke"
#define DSML_INVOKE_CLOSE "</" CHAT_DSML "invoke"
#define DSML_PARAM_OPEN "<" CHAT_DSML "parameter"
#define DSML_PARAM_CLOSE_TAIL "/" CHAT_DSML "parameter"
#define DSML_TOOL_CALLS_OPEN_BARE "\n\n<" CHAT_DSML "tool_calls"

/* ---- small helpers ---- */

static void setf(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid/truncated. */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp) {
    size_t len = uc_decode(s, n, cp);
    return *cp == UC_INVALID ? 0 : len;
}

/* A jansson string from bytes that may hold invalid UTF-8 (model output):
 * invalid bytes become U+FFFD. */
static json_t *jstr(const char *s, size_t n) {
    json_t *v = json_stringn(s, n);
    if (v) return v;
    strbuf b = {0};
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = utf8_seq((const unsigned char *)s + i, n - i, &cp);
        if (l) { strbuf_add(&b, s + i, l); i += l; }
        else { strbuf_str(&b, "\xef\xbf\xbd"); i++; }
    }
    v = json_stringn(strbuf_text(&b), b.n);
    strbuf_free(&b);
    return v;
}

static const char *find_from(const char *s, size_t n, size_t from, const char *pat, size_t plen) {
    if (from > n || plen > n - from) return NULL;
    return memmem(s + from, n - from, pat, plen);
}

/* Python str.isspace() for the code point at s; returns its byte length or 0. */
static size_t unicode_space(const unsigned char *s, size_t n) {
    if (!n) return 0;
    unsigned c = s[0];
    if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) return 1;
    uint32_t cp;
    size_t l = utf8_seq(s, n, &cp);
    if (l < 2) return 0;
    if (cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
        cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000)
        return l;
    return 0;
}

/* ---- encoding an assistant tool call ---- */

static const char *py_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_ARRAY: return "list";
    case JSON_STRING: return "str";
    case JSON_INTEGER: return "int";
    case JSON_REAL: return "float";
    case JSON_TRUE:
    case JSON_FALSE: return "bool";
    case JSON_NULL: return "NoneType";
    case JSON_OBJECT: return pyjson_raw(v) ? "float" : "dict";
    }
    return "object";
}

char *dsml_encode_invoke(const char *name, const char *arguments, char *err, size_t errlen) {
    strbuf b = {0};
    strbuf_str(&b, "<" CHAT_DSML "invoke name=\"");
    strbuf_str(&b, name);
    strbuf_str(&b, "\">\n");
    json_t *args = pyjson_loads(arguments, strlen(arguments), NULL, 0);
    if (!args) {
        strbuf_str(&b, "<" CHAT_DSML "parameter name=\"arguments\" string=\"true\">");
        strbuf_str(&b, arguments);
        strbuf_str(&b, "</" CHAT_DSML "parameter>");
    } else {
        if (!json_is_object(args) || pyjson_raw(args)) {
            setf(err, errlen, "'%s' object has no attribute 'items'", py_type_name(args));
            json_decref(args);
            free(b.p);
            return NULL;
        }
        const char *k;
        size_t kl;
        json_t *v;
        int first = 1;
        json_object_keylen_foreach(args, k, kl, v) {
            if (!first) strbuf_str(&b, "\n");
            first = 0;
            strbuf_str(&b, "<" CHAT_DSML "parameter name=\"");
            strbuf_add(&b, k, kl);
            if (json_is_string(v)) {
                strbuf_str(&b, "\" string=\"true\">");
                strbuf_add(&b, json_string_value(v), json_string_length(v));
            } else {
                strbuf_str(&b, "\" string=\"false\">");
                pyjson_dump_to(&b, v);
            }
            strbuf_str(&b, "</" CHAT_DSML "parameter>");
        }
        json_decref(args);
    }
    strbuf_str(&b, "\n</" CHAT_DSML "invoke>");
    char *text = strbuf_take(&b);
    if (!text) setf(err, errlen, "out of memory");
    return text;
}

/* ---- the strict (official) parser ---- */

typedef struct {
    const char *s;
    size_t n;
} span;

/* _read_until_stop: from *idx, the earliest of the stops (first listed wins a
 * tie). Sets *before to the text before it and moves *idx past it. Returns
 * the stop's number, or -1 (then *before is the rest and *idx = n). */
static int read_until(const char *t, size_t n, size_t *idx, const char *const *stops, int nstops, span *before) {
    const char *best = NULL;
    int which = -1;
    for (int k = 0; k < nstops; k++) {
        const char *p = find_from(t, n, *idx, stops[k], strlen(stops[k]));
        if (p && (!best || p < best)) { best = p; which = k; }
    }
    before->s = t + *idx;
    if (which < 0) {
        before->n = n - *idx;
        *idx = n;
        return -1;
    }
    before->n = (size_t)(best - (t + *idx));
    *idx = (size_t)(best - t) + strlen(stops[which]);
    return which;
}

static int span_is(span s, const char *lit) { return s.n == strlen(lit) && !memcmp(s.s, lit, s.n); }

/* `^\s*name="(.*?)">\n$` over the invoke header text. */
static int match_invoke_header(span h, span *name) {
    size_t i = 0, l;
    while ((l = unicode_space((const unsigned char *)h.s + i, h.n - i))) i += l;
    static const char pre[] = "name=\"";
    if (h.n - i < 6 || memcmp(h.s + i, pre, 6)) return -1;
    i += 6;
    size_t end;
    if (h.n >= i + 3 && !memcmp(h.s + h.n - 3, "\">\n", 3)) end = h.n - 3;
    else if (h.n >= i + 4 && !memcmp(h.s + h.n - 4, "\">\n\n", 4)) end = h.n - 4;
    else return -1;
    name->s = h.s + i;
    name->n = end - i;
    return 0;
}

/* `^ name="(.*?)" string="(true|false)">(.*?)<$` over a parameter's text. */
static int match_param(span p, span *name, int *is_string, span *value) {
    static const char pre[] = " name=\"";
    if (p.n < 7 || memcmp(p.s, pre, 7)) return -1;
    size_t vend;
    if (p.n >= 1 && p.s[p.n - 1] == '<') vend = p.n - 1;
    else if (p.n >= 2 && p.s[p.n - 2] == '<' && p.s[p.n - 1] == '\n') vend = p.n - 2;
    else return -1;
    static const char mid[] = "\" string=\"";
    for (size_t j = 7; j + 10 <= p.n; j++) {
        if (memcmp(p.s + j, mid, 10)) continue;
        size_t a = j + 10, vstart;
        int str;
        if (a + 6 <= p.n && !memcmp(p.s + a, "true\">", 6)) { vstart = a + 6; str = 1; }
        else if (a + 7 <= p.n && !memcmp(p.s + a, "false\">", 7)) { vstart = a + 7; str = 0; }
        else continue;
        if (vstart > vend) continue;
        name->s = p.s + 7;
        name->n = j - 7;
        *is_string = str;
        value->s = p.s + vstart;
        value->n = vend - vstart;
        return 0;
    }
    return -1;
}

static void quoted(char *out, size_t outlen, span s) {
    size_t n = s.n < outlen - 1 ? s.n : outlen - 1;
    memcpy(out, s.s, n);
    out[n] = 0;
}

static json_t *tool_call_object(span name, const char *args, size_t args_len) {
    json_t *fn = json_object();
    json_object_set_new(fn, "name", jstr(name.s, name.n));
    json_object_set_new(fn, "arguments", jstr(args, args_len));
    json_t *tc = json_object();
    json_object_set_new(tc, "type", json_string("function"));
    json_object_set_new(tc, "function", fn);
    return tc;
}

#define MAX_PARAMS 4096

static int parse_tool_calls(const char *t, size_t n, size_t *idx, json_t *calls, char *err, size_t errlen) {
    static const char *const stop_block[] = {DSML_INVOKE_OPEN, CHAT_TOOL_CALLS_END};
    static const char *const stop_param[] = {DSML_PARAM_OPEN, DSML_INVOKE_CLOSE};
    static const char *const stop_pclose[] = {DSML_PARAM_CLOSE_TAIL};
    char q[120];
    while (*idx < n) {
        span before;
        int st = read_until(t, n, idx, stop_block, 2, &before);
        if (!span_is(before, ">\n")) {
            quoted(q, sizeof q, before);
            setf(err, errlen, "Tool call format error: expected '>\\n' but got '%s'", q);
            return -1;
        }
        if (st == 1) break;
        if (st < 0) { setf(err, errlen, "Missing special token in tool calls"); return -1; }
        span head;
        st = read_until(t, n, idx, stop_param, 2, &head);
        span name;
        if (match_invoke_header(head, &name)) {
            quoted(q, sizeof q, head);
            setf(err, errlen, "Tool name format error: '%s'", q);
            return -1;
        }
        span pname[64];
        span *names = pname;
        size_t np = 0, cap = 64;
        strbuf args = {0};
        strbuf_str(&args, "{");
        int rc = 0;
        while (st == 0) {
            span body;
            read_until(t, n, idx, stop_pclose, 1, &body);
            span k, v;
            int is_string;
            if (match_param(body, &k, &is_string, &v)) {
                quoted(q, sizeof q, body);
                setf(err, errlen, "Parameter format error: '%s'", q);
                rc = -1;
                break;
            }
            for (size_t j = 0; j < np; j++)
                if (names[j].n == k.n && !memcmp(names[j].s, k.s, k.n)) {
                    quoted(q, sizeof q, k);
                    setf(err, errlen, "Duplicate parameter name: '%s'", q);
                    rc = -1;
                }
            if (rc) break;
            if (np == cap) {
                if (cap >= MAX_PARAMS) { setf(err, errlen, "too many parameters"); rc = -1; break; }
                span *nn = malloc(sizeof *nn * cap * 2);
                if (!nn) { setf(err, errlen, "out of memory"); rc = -1; break; }
                memcpy(nn, names, sizeof *nn * np);
                if (names != pname) free(names);
                names = nn;
                cap *= 2;
            }
            names[np++] = k;
            if (np > 1) strbuf_str(&args, ", ");
            pyjson_dump_string_to(&args, k.s, k.n);
            strbuf_str(&args, ": ");
            if (is_string) {
                pyjson_dump_string_to(&args, v.s, v.n);
            } else {
                strbuf_add(&args, v.s, v.n);
            }
            span after;
            st = read_until(t, n, idx, stop_param, 2, &after);
            if (!span_is(after, ">\n")) {
                quoted(q, sizeof q, after);
                setf(err, errlen, "Parameter format error: expected '>\\n' but got '%s'", q);
                rc = -1;
                break;
            }
        }
        if (names != pname) free(names);
        strbuf_str(&args, "}");
        if (!rc && args.oom) { setf(err, errlen, "out of memory"); rc = -1; }
        if (!rc) json_array_append_new(calls, tool_call_object(name, args.p, args.n));
        free(args.p);
        if (rc) return -1;
    }
    return 0;
}

static int mode_thinks(const char *thinking_mode) {
    return thinking_mode && (!strcmp(thinking_mode, "thinking") || !strcmp(thinking_mode, "max"));
}

static json_t *message_object(const char *content, size_t cl, const char *reasoning, size_t rl, json_t *calls) {
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "content", jstr(content, cl));
    json_object_set_new(m, "reasoning_content", jstr(reasoning, rl));
    json_object_set_new(m, "tool_calls", calls ? calls : json_array());
    return m;
}

json_t *chat_parse(const char *t, size_t n, const char *thinking_mode, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!t) { t = ""; n = 0; }
    if (!thinking_mode || (strcmp(thinking_mode, "chat") && !mode_thinks(thinking_mode))) {
        setf(err, errlen, "Invalid thinking_mode (chat, thinking or max)");
        return NULL;
    }
    static const char *const stop_think[] = {CHAT_THINK_CLOSE, DSML_TOOL_CALLS_OPEN_BARE};
    static const char *const stop_content[] = {CHAT_EOS, DSML_TOOL_CALLS_OPEN_BARE};
    static const char *const stop_eos[] = {CHAT_EOS};
    size_t idx = 0;
    span reasoning = {"", 0}, content;
    if (mode_thinks(thinking_mode)) {
        if (read_until(t, n, &idx, stop_think, 2, &reasoning) != 0) {
            setf(err, errlen, "Invalid thinking format: missing </think>");
            return NULL;
        }
    }
    int st = read_until(t, n, &idx, stop_content, 2, &content);
    json_t *calls = json_array();
    if (st == 1) {
        if (parse_tool_calls(t, n, &idx, calls, err, errlen)) {
            json_decref(calls);
            return NULL;
        }
        span tail;
        st = read_until(t, n, &idx, stop_eos, 1, &tail);
        if (tail.n) {
            setf(err, errlen, "Unexpected content after tool calls");
            json_decref(calls);
            return NULL;
        }
    } else if (st != 0) {
        setf(err, errlen, "Invalid format: missing EOS token");
        json_decref(calls);
        return NULL;
    }
    if (idx != n || st > 0) {
        setf(err, errlen, "Unexpected content at end");
        json_decref(calls);
        return NULL;
    }
    static const char *const specials[] = {CHAT_BOS, CHAT_EOS, CHAT_THINK_OPEN, CHAT_THINK_CLOSE, CHAT_DSML};
    for (size_t k = 0; k < 5; k++) {
        size_t l = strlen(specials[k]);
        if (memmem(content.s, content.n, specials[k], l) || memmem(reasoning.s, reasoning.n, specials[k], l)) {
            setf(err, errlen, "Unexpected special token '%s' in content", specials[k]);
            json_decref(calls);
            return NULL;
        }
    }
    return message_object(content.s, content.n, reasoning.s, reasoning.n, calls);
}

/* ---- the tolerant parser ---- */

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The tool-block start markers a drifting model may write. */
static const char *const BLOCK_STARTS[] = {"<" CHAT_DSML "tool_calls>", "<DSML\xef\xbd\x9ctool_calls>"};

/* Earliest block start at or after from; returns its offset or -1. */
static long find_block_start(const char *t, size_t n, size_t from, size_t *mlen) {
    long best = -1;
    for (size_t k = 0; k < 2; k++) {
        size_t l = strlen(BLOCK_STARTS[k]);
        const char *p = find_from(t, n, from, BLOCK_STARTS[k], l);
        if (p && (best < 0 || p - t < best)) { best = p - t; *mlen = l; }
    }
    return best;
}

/* Finds "<" [｜]DSML｜ tag at or after from (tag e.g. "invoke", "/invoke").
 * Returns the offset of '<' and sets *end past the tag name. */
static long find_tag(const char *t, size_t n, size_t from, const char *tag, size_t *end) {
    char a[64], b[64];
    int close = tag[0] == '/';
    snprintf(a, sizeof a, "<%s" CHAT_DSML "%s", close ? "/" : "", tag + close);
    snprintf(b, sizeof b, "<%sDSML\xef\xbd\x9c%s", close ? "/" : "", tag + close);
    const char *pa = find_from(t, n, from, a, strlen(a));
    const char *pb = find_from(t, n, from, b, strlen(b));
    if (pa && (!pb || pa <= pb)) { *end = (size_t)(pa - t) + strlen(a); return pa - t; }
    if (pb) { *end = (size_t)(pb - t) + strlen(b); return pb - t; }
    return -1;
}

/* attr="value" inside [s, e); returns 0 and the value span. */
static int find_attr(const char *t, size_t s, size_t e, const char *attr, span *val) {
    char pat[32];
    snprintf(pat, sizeof pat, "%s=\"", attr);
    size_t pl = strlen(pat);
    const char *p = find_from(t, e, s, pat, pl);
    if (!p) return -1;
    size_t vs = (size_t)(p - t) + pl;
    const char *q = memchr(t + vs, '"', e - vs);
    if (!q) return -1;
    val->s = t + vs;
    val->n = (size_t)(q - (t + vs));
    return 0;
}

/* Whether a value holds NaN or +-Infinity (kept as pyjson raw markers). */
static int has_nonfinite(const json_t *v) {
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            if (has_nonfinite(json_array_get(v, i))) return 1;
    } else if (json_is_object(v)) {
        const json_t *raw = pyjson_raw(v);
        if (raw) {
            const char *r = json_string_value(raw);
            return !strcmp(r, "NaN") || !strcmp(r, "Infinity") || !strcmp(r, "-Infinity");
        }
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) if (has_nonfinite(x)) return 1;
    }
    return 0;
}

/* Parses a drifted tool block in [from, n). Appends calls; returns how many. */
static int tolerant_tool_calls(const char *t, size_t n, size_t from, json_t *calls) {
    size_t pos = from, end;
    long block_end = find_tag(t, n, from, "/tool_calls", &end);
    size_t limit = block_end >= 0 ? (size_t)block_end : n;
    int count = 0;
    for (;;) {
        long inv = find_tag(t, limit, pos, "invoke", &end);
        if (inv < 0) break;
        const char *gt = memchr(t + end, '>', limit - end);
        if (!gt) break;
        size_t head_end = (size_t)(gt - t);
        span name;
        if (find_attr(t, end, head_end, "name", &name)) break;
        size_t body = head_end + 1, inv_end_tag_end;
        long inv_close = find_tag(t, limit, body, "/invoke", &inv_end_tag_end);
        size_t body_end = inv_close >= 0 ? (size_t)inv_close : limit;
        strbuf args = {0};
        strbuf_str(&args, "{");
        int np = 0;
        size_t p = body;
        for (;;) {
            size_t pend;
            long par = find_tag(t, body_end, p, "parameter", &pend);
            if (par < 0) break;
            const char *pgt = memchr(t + pend, '>', body_end - pend);
            if (!pgt) break;
            size_t vstart = (size_t)(pgt - t) + 1, cend;
            span pname, sattr;
            if (find_attr(t, pend, (size_t)(pgt - t), "name", &pname)) break;
            int is_string = find_attr(t, pend, (size_t)(pgt - t), "string", &sattr) || !span_is(sattr, "false");
            long close = find_tag(t, body_end, vstart, "/parameter", &cend);
            size_t vend = close >= 0 ? (size_t)close : body_end;
            if (np++) strbuf_str(&args, ", ");
            pyjson_dump_string_to(&args, pname.s, pname.n);
            strbuf_str(&args, ": ");
            json_t *jv = NULL;
            if (!is_string) {
                size_t a = vstart, b = vend;
                while (a < b && is_ws(t[a])) a++;
                while (b > a && is_ws(t[b - 1])) b--;
                jv = b > a ? pyjson_loads(t + a, b - a, NULL, 0) : json_null();
                if (jv && has_nonfinite(jv)) { /* NaN/Infinity are not JSON for clients */
                    json_decref(jv);
                    jv = NULL;
                }
            }
            if (jv) {
                pyjson_dump_to(&args, jv);
                json_decref(jv);
            } else {
                pyjson_dump_string_to(&args, t + vstart, vend - vstart);
            }
            if (close < 0) break;
            const char *cgt = memchr(t + cend, '>', body_end - cend);
            p = cgt ? (size_t)(cgt - t) + 1 : body_end;
        }
        strbuf_str(&args, "}");
        if (!args.oom) {
            json_array_append_new(calls, tool_call_object(name, args.p, args.n));
            count++;
        }
        free(args.p);
        if (inv_close < 0) break;
        pos = inv_end_tag_end;
    }
    return count;
}

json_t *chat_parse_tolerant(const char *t, size_t n, const char *thinking_mode, int *strict_ok) {
    if (!t) { t = ""; n = 0; }
    if (strict_ok) *strict_ok = 0;
    const char *tm = mode_thinks(thinking_mode) ? "thinking" : "chat";
    json_t *m = chat_parse(t, n, tm, NULL, 0);
    size_t eos_len = strlen(CHAT_EOS);
    if (!m && (n < eos_len || memcmp(t + n - eos_len, CHAT_EOS, eos_len))) {
        /* generation stopped on the EOS id without its text */
        char *tt = malloc(n + eos_len + 1);
        if (tt) {
            memcpy(tt, t, n);
            memcpy(tt + n, CHAT_EOS, eos_len);
            m = chat_parse(tt, n + eos_len, tm, NULL, 0);
            free(tt);
        }
    }
    if (m) {
        /* officially plain content, but a drifted block start ("<DSML｜" with
         * the first bar missing) means the model meant a tool call */
        const json_t *c = json_object_get(m, "content");
        size_t ml;
        if (find_block_start(json_string_value(c), json_string_length(c), 0, &ml) < 0) {
            if (strict_ok) *strict_ok = 1;
            return m;
        }
        json_decref(m);
    }
    /* everything after the first EOS is ignored */
    const char *eos = memmem(t, n, CHAT_EOS, eos_len);
    if (eos) n = (size_t)(eos - t);
    size_t body = 0;
    span reasoning = {"", 0};
    if (mode_thinks(thinking_mode)) {
        const char *close = memmem(t, n, CHAT_THINK_CLOSE, strlen(CHAT_THINK_CLOSE));
        if (!close) return message_object("", 0, t, n, NULL); /* cut off while thinking */
        reasoning.s = t;
        reasoning.n = (size_t)(close - t);
        body = reasoning.n + strlen(CHAT_THINK_CLOSE);
    }
    size_t mlen = 0;
    long start = find_block_start(t, n, body, &mlen);
    if (start >= 0) {
        json_t *calls = json_array();
        if (tolerant_tool_calls(t, n, (size_t)start + mlen, calls) > 0) {
            size_t cend = (size_t)start;
            if (cend >= body + 2 && t[cend - 1] == '\n' && t[cend - 2] == '\n') cend -= 2;
            else while (cend > body && is_ws(t[cend - 1])) cend--;
            return message_object(t + body, cend - body, reasoning.s, reasoning.n, calls);
        }
        json_decref(calls);
    }
    return message_object(t + body, n - body, reasoning.s, reasoning.n, NULL);
}

/* ---- the streaming parser ---- */

enum stream_state {
    ST_REASONING,
    ST_CONTENT,
    ST_TOOLS,  /* inside the block; see tool_state */
    ST_AFTER,  /* block closed: only EOS expected */
    ST_BROKEN, /* the block went off grammar: no more events */
    ST_DONE,   /* EOS seen */
};

enum tool_state {
    TS_BETWEEN,    /* expecting <invoke or </tool_calls> */
    TS_INV_HEAD,   /* inside <invoke ...> */
    TS_INV_BODY,   /* expecting <parameter or </invoke> */
    TS_PARAM_HEAD, /* inside <parameter ...> */
    TS_PARAM_STR,  /* string="true" value */
    TS_PARAM_JSON, /* string="false" value */
    TS_CLOSE_TAIL, /* after a closing tag name, expecting '>' */
};

struct chat_stream {
    chat_event_fn fn;
    void *user;
    int thinking;
    strbuf all;   /* everything fed */
    size_t cur; /* first byte not yet consumed */
    enum stream_state st;
    enum tool_state ts;
    enum tool_state after_close; /* state after TS_CLOSE_TAIL */
    int close_is_invoke;         /* closing tag was </invoke */
    int ntools, nparams;
    int json_in_string, json_escape; /* in a string="false" value */
    size_t held_partial; /* bytes of a possible closing tag held in a value */
    int finished;
};

chat_stream *chat_stream_new(const char *thinking_mode, chat_event_fn fn, void *user) {
    chat_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->fn = fn;
    s->user = user;
    s->thinking = mode_thinks(thinking_mode);
    s->st = s->thinking ? ST_REASONING : ST_CONTENT;
    return s;
}

void chat_stream_free(chat_stream *s) {
    if (!s) return;
    free(s->all.p);
    free(s);
}

static void emit(chat_stream *s, chat_event_kind k, const char *text, size_t len) {
    if (!s->fn || (!len && (k == CHAT_EV_REASONING || k == CHAT_EV_CONTENT || k == CHAT_EV_TOOL_ARGS))) return;
    chat_event ev = {k, (k >= CHAT_EV_TOOL_START) ? s->ntools - 1 : -1, text ? text : "", len};
    s->fn(s->user, &ev);
}

static void emit_json_escaped(chat_stream *s, const char *text, size_t len) {
    if (!len) return;
    strbuf b = {0};
    pyjson_escape(&b, text, len);
    emit(s, CHAT_EV_TOOL_ARGS, b.p, b.n);
    strbuf_free(&b);
}

/* Bytes at the end of [s, s+n) that form an incomplete UTF-8 sequence. */
static size_t utf8_incomplete_tail(const char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > k ? k : 0;
    }
    return 0;
}

/* Length of the longest suffix of [s, s+n) that is a proper prefix of pat. */
static size_t partial_suffix(const char *s, size_t n, const char *pat) {
    size_t pl = strlen(pat);
    for (size_t k = pl - 1 < n ? pl - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, pat, k)) return k;
    return 0;
}

/* Text region [a, b): the earliest full marker among pats (returns index and
 * sets *at), else -1 and *safe = how many leading bytes can be emitted now. */
static int scan_markers(const char *t, size_t a, size_t b, const char *const *pats, int np, size_t *at, size_t *safe) {
    const char *best = NULL;
    int which = -1;
    for (int k = 0; k < np; k++) {
        const char *p = find_from(t, b, a, pats[k], strlen(pats[k]));
        if (p && (!best || p < best)) { best = p; which = k; }
    }
    if (which >= 0) { *at = (size_t)(best - t); return which; }
    size_t hold = 0;
    for (int k = 0; k < np; k++) {
        size_t h = partial_suffix(t + a, b - a, pats[k]);
        if (h > hold) hold = h;
    }
    *safe = b - a - hold;
    return -1;
}

static int starts_with(const char *s, size_t n, const char *pat, int *partial) {
    size_t pl = strlen(pat);
    if (n >= pl) return !memcmp(s, pat, pl);
    if (!memcmp(s, pat, n)) *partial = 1;
    return 0;
}

/* One step of the tool-block machine; returns 1 if it consumed something. */
static int tools_step(chat_stream *s, int final) {
    const char *t = s->all.p;
    size_t n = s->all.n, a = s->cur;
    switch (s->ts) {
    case TS_BETWEEN:
    case TS_INV_BODY: {
        while (a < n && is_ws(t[a])) a++;
        s->cur = a;
        if (a == n) return 0;
        int partial = 0;
        const char *const *tags;
        static const char *const between[] = {"<" CHAT_DSML "invoke", "<DSML\xef\xbd\x9cinvoke",
                                              "</" CHAT_DSML "tool_calls", "</DSML\xef\xbd\x9ctool_calls"};
        static const char *const body[] = {"<" CHAT_DSML "parameter", "<DSML\xef\xbd\x9cparameter",
                                           "</" CHAT_DSML "invoke", "</DSML\xef\xbd\x9cinvoke"};
        tags = s->ts == TS_BETWEEN ? between : body;
        for (int k = 0; k < 4; k++) {
            if (starts_with(t + a, n - a, tags[k], &partial)) {
                s->cur = a + strlen(tags[k]);
                if (k < 2) {
                    s->ts = s->ts == TS_BETWEEN ? TS_INV_HEAD : TS_PARAM_HEAD;
                } else {
                    s->close_is_invoke = s->ts == TS_INV_BODY;
                    s->ts = TS_CLOSE_TAIL;
                }
                return 1;
            }
        }
        if (!partial || final) s->st = ST_BROKEN;
        return 0;
    }
    case TS_CLOSE_TAIL: {
        while (a < n && is_ws(t[a])) a++;
        if (a == n) return 0;
        if (t[a] != '>') { s->st = ST_BROKEN; return 0; }
        s->cur = a + 1;
        if (s->close_is_invoke) {
            emit(s, CHAT_EV_TOOL_ARGS, "}", 1);
            emit(s, CHAT_EV_TOOL_END, NULL, 0);
            s->ts = TS_BETWEEN;
        } else {
            s->st = ST_AFTER;
        }
        return 1;
    }
    case TS_INV_HEAD:
    case TS_PARAM_HEAD: {
        /* attributes up to the '>' that follows a closing quote */
        const char *q = find_from(t, n, a, "\">", 2);
        if (!q) {
            if (n - a > 4096 || final) s->st = ST_BROKEN;
            return 0;
        }
        size_t he = (size_t)(q - t) + 1;
        span name, str;
        if (find_attr(t, a, he, "name", &name)) { s->st = ST_BROKEN; return 0; }
        s->cur = he + 1;
        if (s->ts == TS_INV_HEAD) {
            s->ntools++;
            s->nparams = 0;
            emit(s, CHAT_EV_TOOL_START, name.s, name.n);
            emit(s, CHAT_EV_TOOL_ARGS, "{", 1);
            s->ts = TS_INV_BODY;
        } else {
            int is_string = find_attr(t, a, he, "string", &str) || !span_is(str, "false");
            strbuf b = {0};
            if (s->nparams++) strbuf_str(&b, ", ");
            strbuf_str(&b, "\"");
            pyjson_escape(&b, name.s, name.n);
            strbuf_str(&b, is_string ? "\": \"" : "\": ");
            emit(s, CHAT_EV_TOOL_ARGS, b.p, b.n);
            free(b.p);
            s->ts = is_string ? TS_PARAM_STR : TS_PARAM_JSON;
            s->json_in_string = s->json_escape = 0;
            s->held_partial = 0;
        }
        return 1;
    }
    case TS_PARAM_STR:
    case TS_PARAM_JSON: {
        static const char *const closes[] = {"</" CHAT_DSML "parameter>", "</DSML\xef\xbd\x9cparameter>"};
        size_t at = 0, safe = 0;
        int w = scan_markers(t, a, n, closes, 2, &at, &safe);
        size_t upto = w >= 0 ? at : a + safe;
        if (w < 0) {
            s->held_partial = n - upto;
            if (!final) upto -= utf8_incomplete_tail(t + a, upto - a);
        }
        if (upto > a) {
            if (s->ts == TS_PARAM_STR) {
                emit_json_escaped(s, t + a, upto - a);
            } else {
                for (size_t i = a; i < upto; i++) {
                    char c = t[i];
                    if (s->json_escape) s->json_escape = 0;
                    else if (s->json_in_string && c == '\\') s->json_escape = 1;
                    else if (c == '"') s->json_in_string = !s->json_in_string;
                }
                emit(s, CHAT_EV_TOOL_ARGS, t + a, upto - a);
            }
            s->cur = upto;
        }
        if (w < 0) return upto > a;
        if (s->ts == TS_PARAM_STR) emit(s, CHAT_EV_TOOL_ARGS, "\"", 1);
        s->cur = at + strlen(closes[w]);
        s->held_partial = 0;
        s->ts = TS_INV_BODY;
        return 1;
    }
    }
    return 0;
}

static const char *const CONTENT_MARKERS[] = {CHAT_EOS, "<" CHAT_DSML "tool_calls>", "<DSML\xef\xbd\x9ctool_calls>"};

static void advance(chat_stream *s, int final) {
    for (;;) {
        const char *t = s->all.p;
        size_t n = s->all.n, a = s->cur;
        if (!t) return;
        if (s->st == ST_REASONING) {
            static const char *const pats[] = {CHAT_THINK_CLOSE, CHAT_EOS};
            size_t at = 0, safe = 0;
            int w = scan_markers(t, a, n, pats, 2, &at, &safe);
            if (w < 0) {
                size_t upto = final ? n : a + safe - utf8_incomplete_tail(t + a, safe);
                emit(s, CHAT_EV_REASONING, t + a, upto - a);
                s->cur = upto;
                return;
            }
            emit(s, CHAT_EV_REASONING, t + a, at - a);
            s->cur = at + strlen(pats[w]);
            s->st = w == 0 ? ST_CONTENT : ST_DONE;
        } else if (s->st == ST_CONTENT) {
            size_t at = 0, safe = 0;
            int w = scan_markers(t, a, n, CONTENT_MARKERS, 3, &at, &safe);
            if (w < 0) {
                size_t upto = a + safe;
                if (final) {
                    upto = n;
                } else {
                    while (upto > a && is_ws(t[upto - 1])) upto--;
                    upto -= utf8_incomplete_tail(t + a, upto - a);
                }
                emit(s, CHAT_EV_CONTENT, t + a, upto - a);
                s->cur = upto;
                return;
            }
            size_t cend = at;
            if (w > 0) { /* the blank line before the block is not content */
                if (cend >= a + 2 && t[cend - 1] == '\n' && t[cend - 2] == '\n') cend -= 2;
                else while (cend > a && is_ws(t[cend - 1])) cend--;
            }
            emit(s, CHAT_EV_CONTENT, t + a, cend - a);
            s->cur = at + strlen(CONTENT_MARKERS[w]);
            if (w == 0) {
                s->st = ST_DONE;
            } else {
                s->st = ST_TOOLS;
                s->ts = TS_BETWEEN;
            }
        } else if (s->st == ST_TOOLS) {
            if (!tools_step(s, final)) return;
        } else {
            s->cur = n;
            return;
        }
    }
}

void chat_stream_feed(chat_stream *s, const char *piece, size_t len) {
    if (!s || s->finished || s->st == ST_DONE) return;
    strbuf_add(&s->all, piece, len);
    if (s->all.oom) { s->st = ST_BROKEN; return; }
    advance(s, 0);
}

json_t *chat_stream_finish(chat_stream *s, int *strict_ok) {
    if (!s) return NULL;
    if (!s->finished) {
        s->finished = 1;
        advance(s, 1);
    }
    return chat_parse_tolerant(strbuf_text(&s->all), s->all.n, s->thinking ? "thinking" : "chat", strict_ok);
}

int dsml_in_structure(const chat_stream *s) {
    if (!s || s->st != ST_TOOLS) return 0;
    switch (s->ts) {
    case TS_PARAM_STR: return s->held_partial >= 2;
    case TS_PARAM_JSON: return !s->json_in_string || s->held_partial >= 2;
    default: return 1;
    }
}

int chat_stream_in_tool_block(const chat_stream *s) { return s && s->st == ST_TOOLS; }
int chat_stream_tool_count(const chat_stream *s) { return s ? s->ntools : 0; }
