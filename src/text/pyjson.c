/* pyjson.c: Python-compatible JSON reading and writing (see pyjson.h for why).
 *
 * The reader follows CPython's json scanner: the number grammar decides int
 * vs float (so "1e3" is a float and prints "1000.0"), NaN/Infinity/-Infinity
 * are accepted, huge integers are kept digit-exact, and a repeated key keeps
 * its first position with the last value (jansson's replace-in-place does
 * exactly that). The writer follows json.dumps(ensure_ascii=False).
 */
#include "text/pyjson.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/unicode.h"

#define PYJSON_MAX_DEPTH 512

/* ---- reader ---- */

typedef struct {
    const char *s;
    size_t n, i;
    char *err;
    size_t errlen;
    int failed;
} preader;

static void rd_fail(preader *r, const char *fmt, ...) {
    if (r->failed) return;
    r->failed = 1;
    if (!r->err || !r->errlen) return;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, r->errlen, "%s (char %zu)", msg, r->i);
}

static void rd_ws(preader *r) {
    while (r->i < r->n) {
        char c = r->s[r->i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') r->i++;
        else break;
    }
}

static json_t *raw_marker(const char *text, size_t len) {
    json_t *o = json_object();
    json_t *t = json_stringn(text, len);
    if (!o || !t || json_object_set_new(o, PYJSON_RAW_KEY, t)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int rd_hex4(preader *r, size_t at, unsigned *out) {
    if (at + 4 > r->n) return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(r->s[at + k]);
        if (h < 0) return -1;
        v = v * 16 + (unsigned)h;
    }
    *out = v;
    return 0;
}

/* Reads a string body after the opening quote into b. */
static int rd_string(preader *r, strbuf *b) {
    for (;;) {
        size_t start = r->i;
        while (r->i < r->n) {
            unsigned char c = (unsigned char)r->s[r->i];
            if (c == '"' || c == '\\' || c < 0x20) break;
            r->i++;
        }
        strbuf_add(b, r->s + start, r->i - start);
        if (r->i >= r->n) { rd_fail(r, "Unterminated string starting"); return -1; }
        char c = r->s[r->i];
        if (c == '"') { r->i++; break; }
        if (c != '\\') { rd_fail(r, "Invalid control character"); return -1; }
        if (r->i + 1 >= r->n) { rd_fail(r, "Unterminated string"); return -1; }
        char e = r->s[r->i + 1];
        r->i += 2;
        switch (e) {
        case '"': strbuf_add(b, "\"", 1); break;
        case '\\': strbuf_add(b, "\\", 1); break;
        case '/': strbuf_add(b, "/", 1); break;
        case 'b': strbuf_add(b, "\b", 1); break;
        case 'f': strbuf_add(b, "\f", 1); break;
        case 'n': strbuf_add(b, "\n", 1); break;
        case 'r': strbuf_add(b, "\r", 1); break;
        case 't': strbuf_add(b, "\t", 1); break;
        case 'u': {
            unsigned cp;
            char utf8[4];
            if (rd_hex4(r, r->i, &cp)) { rd_fail(r, "Invalid \\uXXXX escape"); return -1; }
            r->i += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (r->i + 6 <= r->n && r->s[r->i] == '\\' && r->s[r->i + 1] == 'u' &&
                    !rd_hex4(r, r->i + 2, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
                    r->i += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else {
                    cp = 0xFFFD; /* lone surrogate: not representable in UTF-8 */
                }
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                cp = 0xFFFD;
            }
            strbuf_add(b, utf8, uc_encode(cp, utf8));
            break;
        }
        default: rd_fail(r, "Invalid \\escape"); return -1;
        }
    }
    return b->oom ? -1 : 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static json_t *rd_number(preader *r) {
    size_t start = r->i;
    int is_float = 0;
    if (r->i < r->n && r->s[r->i] == '-') r->i++;
    if (r->i >= r->n || !is_digit(r->s[r->i])) { rd_fail(r, "Expecting value"); return NULL; }
    if (r->s[r->i] == '0') r->i++;
    else while (r->i < r->n && is_digit(r->s[r->i])) r->i++;
    if (r->i + 1 < r->n && r->s[r->i] == '.' && is_digit(r->s[r->i + 1])) {
        is_float = 1;
        r->i++;
        while (r->i < r->n && is_digit(r->s[r->i])) r->i++;
    }
    if (r->i < r->n && (r->s[r->i] == 'e' || r->s[r->i] == 'E')) {
        size_t j = r->i + 1;
        if (j < r->n && (r->s[j] == '+' || r->s[j] == '-')) j++;
        if (j < r->n && is_digit(r->s[j])) {
            is_float = 1;
            while (j < r->n && is_digit(r->s[j])) j++;
            r->i = j;
        }
    }
    size_t len = r->i - start;
    char small[64];
    char *tmp = len < sizeof small ? small : malloc(len + 1);
    if (!tmp) { rd_fail(r, "out of memory"); return NULL; }
    memcpy(tmp, r->s + start, len);
    tmp[len] = 0;
    json_t *v;
    if (is_float) {
        double d = strtod(tmp, NULL);
        if (isinf(d)) v = raw_marker(d < 0 ? "-Infinity" : "Infinity", d < 0 ? 9 : 8);
        else v = json_real(d);
    } else {
        errno = 0;
        long long ll = strtoll(tmp, NULL, 10);
        if (errno == ERANGE) v = raw_marker(tmp, len); /* exact digits, like a Python int */
        else v = json_integer(ll);
    }
    if (tmp != small) free(tmp);
    if (!v) rd_fail(r, "out of memory");
    return v;
}

static json_t *rd_value(preader *r, int depth);

static int match_word(preader *r, const char *w) {
    size_t n = strlen(w);
    if (r->i + n <= r->n && !memcmp(r->s + r->i, w, n)) { r->i += n; return 1; }
    return 0;
}

static json_t *rd_value(preader *r, int depth) {
    if (depth > PYJSON_MAX_DEPTH) { rd_fail(r, "JSON nested too deeply"); return NULL; }
    rd_ws(r);
    if (r->i >= r->n) { rd_fail(r, "Expecting value"); return NULL; }
    char c = r->s[r->i];
    if (c == '"') {
        r->i++;
        strbuf b = {0};
        if (rd_string(r, &b)) { free(b.p); return NULL; }
        json_t *v = json_stringn(strbuf_text(&b), b.n);
        free(b.p);
        if (!v) rd_fail(r, "string is not valid UTF-8");
        return v;
    }
    if (c == '{') {
        r->i++;
        json_t *o = json_object();
        rd_ws(r);
        if (r->i < r->n && r->s[r->i] == '}') { r->i++; return o; }
        for (;;) {
            rd_ws(r);
            if (r->i >= r->n || r->s[r->i] != '"') {
                rd_fail(r, "Expecting property name enclosed in double quotes");
                break;
            }
            r->i++;
            strbuf k = {0};
            if (rd_string(r, &k)) { free(k.p); break; }
            rd_ws(r);
            if (r->i >= r->n || r->s[r->i] != ':') { free(k.p); rd_fail(r, "Expecting ':' delimiter"); break; }
            r->i++;
            json_t *v = rd_value(r, depth + 1);
            if (!v) { free(k.p); break; }
            int bad = json_object_setn_new(o, strbuf_text(&k), k.n, v);
            free(k.p);
            if (bad) { rd_fail(r, "invalid object key"); break; }
            rd_ws(r);
            if (r->i < r->n && r->s[r->i] == ',') { r->i++; continue; }
            if (r->i < r->n && r->s[r->i] == '}') { r->i++; return o; }
            rd_fail(r, "Expecting ',' delimiter");
            break;
        }
        json_decref(o);
        return NULL;
    }
    if (c == '[') {
        r->i++;
        json_t *a = json_array();
        rd_ws(r);
        if (r->i < r->n && r->s[r->i] == ']') { r->i++; return a; }
        for (;;) {
            json_t *v = rd_value(r, depth + 1);
            if (!v) break;
            json_array_append_new(a, v);
            rd_ws(r);
            if (r->i < r->n && r->s[r->i] == ',') { r->i++; continue; }
            if (r->i < r->n && r->s[r->i] == ']') { r->i++; return a; }
            rd_fail(r, "Expecting ',' delimiter");
            break;
        }
        json_decref(a);
        return NULL;
    }
    if (match_word(r, "null")) return json_null();
    if (match_word(r, "true")) return json_true();
    if (match_word(r, "false")) return json_false();
    if (match_word(r, "NaN")) return raw_marker("NaN", 3);
    if (match_word(r, "Infinity")) return raw_marker("Infinity", 8);
    if (match_word(r, "-Infinity")) return raw_marker("-Infinity", 9);
    return rd_number(r);
}

json_t *pyjson_loads(const char *text, size_t len, char *err, size_t errlen) {
    preader r = {text, len, 0, err, errlen, 0};
    if (err && errlen) err[0] = 0;
    json_t *v = rd_value(&r, 0);
    if (!v) {
        if (!r.failed) rd_fail(&r, "Expecting value");
        return NULL;
    }
    rd_ws(&r);
    if (r.i != r.n) {
        rd_fail(&r, "Extra data");
        json_decref(v);
        return NULL;
    }
    return v;
}

/* ---- writer ---- */

void pyjson_format_double(double d, char *buf, size_t buflen) {
    if (isnan(d)) { snprintf(buf, buflen, "NaN"); return; }
    if (isinf(d)) { snprintf(buf, buflen, d < 0 ? "-Infinity" : "Infinity"); return; }
    /* Shortest digits that read back to the same double (CPython's repr). */
    char e[40];
    int prec;
    for (prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, d);
        if (strtod(e, NULL) == d) break;
    }
    if (prec == 17) snprintf(e, sizeof e, "%.16e", d);
    /* e = [-]D[.DDD]e[+-]XX: split into sign, digits, exponent */
    const char *p = e;
    int neg = 0;
    if (*p == '-') { neg = 1; p++; }
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.' && nd < 23) digits[nd++] = *p;
    int exp10 = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int decpt = exp10 + 1; /* value = 0.DIGITS * 10^decpt */
    strbuf b = {0};
    if (neg) strbuf_add(&b, "-", 1);
    if (d == 0) {
        strbuf_str(&b, "0.0");
    } else if (decpt > 16 || decpt < -3) {
        strbuf_add(&b, digits, 1);
        if (nd > 1) { strbuf_add(&b, ".", 1); strbuf_add(&b, digits + 1, (size_t)nd - 1); }
        char x[16];
        snprintf(x, sizeof x, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        strbuf_str(&b, x);
    } else if (decpt <= 0) {
        strbuf_str(&b, "0.");
        for (int k = 0; k < -decpt; k++) strbuf_add(&b, "0", 1);
        strbuf_add(&b, digits, (size_t)nd);
    } else if (decpt < nd) {
        strbuf_add(&b, digits, (size_t)decpt);
        strbuf_add(&b, ".", 1);
        strbuf_add(&b, digits + decpt, (size_t)(nd - decpt));
    } else {
        strbuf_add(&b, digits, (size_t)nd);
        for (int k = nd; k < decpt; k++) strbuf_add(&b, "0", 1);
        strbuf_str(&b, ".0");
    }
    snprintf(buf, buflen, "%s", b.p ? b.p : "0.0");
    free(b.p);
}

void pyjson_escape(strbuf *b, const char *s, size_t n) {
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (esc) {
            strbuf_add(b, s + run, i - run);
            strbuf_str(b, esc);
            run = i + 1;
        }
    }
    strbuf_add(b, s + run, n - run);
}

void pyjson_dump_string_to(strbuf *b, const char *s, size_t n) {
    strbuf_add(b, "\"", 1);
    pyjson_escape(b, s, n);
    strbuf_add(b, "\"", 1);
}

const json_t *pyjson_raw(const json_t *v) {
    if (!json_is_object(v) || json_object_size(v) != 1) return NULL;
    const json_t *raw = json_object_get(v, PYJSON_RAW_KEY);
    return json_is_string(raw) ? raw : NULL;
}

void pyjson_dump_to(strbuf *b, const json_t *v) {
    char num[64];
    switch (json_typeof(v)) {
    case JSON_NULL: strbuf_str(b, "null"); break;
    case JSON_TRUE: strbuf_str(b, "true"); break;
    case JSON_FALSE: strbuf_str(b, "false"); break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        strbuf_str(b, num);
        break;
    case JSON_REAL:
        pyjson_format_double(json_real_value(v), num, sizeof num);
        strbuf_str(b, num);
        break;
    case JSON_STRING: pyjson_dump_string_to(b, json_string_value(v), json_string_length(v)); break;
    case JSON_ARRAY: {
        strbuf_add(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) strbuf_add(b, ", ", 2);
            pyjson_dump_to(b, json_array_get(v, i));
        }
        strbuf_add(b, "]", 1);
        break;
    }
    case JSON_OBJECT: {
        const json_t *raw = pyjson_raw(v);
        if (raw) {
            strbuf_add(b, json_string_value(raw), json_string_length(raw));
            break;
        }
        strbuf_add(b, "{", 1);
        int first = 1;
        const char *key;
        size_t klen;
        json_t *val;
        json_object_keylen_foreach((json_t *)v, key, klen, val) {
            if (!first) strbuf_add(b, ", ", 2);
            first = 0;
            pyjson_dump_string_to(b, key, klen);
            strbuf_add(b, ": ", 2);
            pyjson_dump_to(b, val);
        }
        strbuf_add(b, "}", 1);
        break;
    }
    }
}

char *pyjson_dumps(const json_t *v) {
    strbuf b = {0};
    pyjson_dump_to(&b, v);
    return strbuf_take(&b);
}

char *pyjson_dumps_string(const char *s, size_t len) {
    strbuf b = {0};
    pyjson_dump_string_to(&b, s, len);
    return strbuf_take(&b);
}
