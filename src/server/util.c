/* util.c: small helpers of the server: the byte-buffer policy over
 * text/strbuf (abort on out of memory, printf, clear), random hex ids,
 * UTF-8 boundary checks (never send half a character to a client), JSON
 * nesting-depth pre-check, and the one-line log writer. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>

#include "server/server.h"

void sbuf_add(sbuf *b, const void *data, size_t n) {
    strbuf_add(b, data, n);
    if (b->oom) {
        fprintf(stderr, "minke serve: out of memory\n");
        abort();
    }
}

void sbuf_adds(sbuf *b, const char *s) { sbuf_add(b, s, strlen(s)); }

void sbuf_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) { sbuf_add(b, tmp, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) return;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sbuf_add(b, big, (size_t)n);
    free(big);
}

void sbuf_free(sbuf *b) { strbuf_free(b); }
void sbuf_clear(sbuf *b) { b->n = 0; if (b->p) b->p[0] = 0; }

char *sbuf_take(sbuf *b) {
    sbuf_add(b, "", 0); /* strbuf_take returns NULL only after an out-of-memory */
    return strbuf_take(b);
}

char *json_body_line(json_t *body) {
    char *s = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(body);
    if (!s) {
        fprintf(stderr, "minke serve: out of memory\n");
        abort();
    }
    size_t n = strlen(s);
    char *line = realloc(s, n + 2);
    if (!line) {
        fprintf(stderr, "minke serve: out of memory\n");
        abort();
    }
    line[n] = '\n';
    line[n + 1] = 0;
    return line;
}

/* Tool-call ids must be unguessable (they key exact DSML replay), so they come
 * from /dev/urandom; a counter+time fallback keeps them unique if it fails. */
void random_hex(char *out, int n_hex) {
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[64];
    int nbytes = (n_hex + 1) / 2;
    if (nbytes > (int)sizeof raw) nbytes = sizeof raw;
    int ok = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ok = read(fd, raw, (size_t)nbytes) == nbytes;
        close(fd);
    }
    if (!ok) {
        static unsigned long long counter;
        unsigned long long x = (unsigned long long)time(NULL) * 0x9E3779B97F4A7C15ull ^ __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
        for (int i = 0; i < nbytes; i++) {
            x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
            raw[i] = (unsigned char)((x * 0x2545F4914F6CDD1Dull) >> 56);
        }
    }
    for (int i = 0; i < n_hex; i++) out[i] = hex[(raw[i / 2] >> ((i & 1) ? 0 : 4)) & 15];
    out[n_hex] = 0;
}

/* Length of the prefix of s that does not end inside a UTF-8 sequence. */
size_t utf8_safe_len(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && (u[i - 1] & 0xC0) == 0x80) { i--; back++; }
    if (i == 0) return back ? 0 : n;
    unsigned char lead = u[i - 1];
    size_t need = 1;
    if (lead >= 0xC2 && lead <= 0xDF) need = 2;
    else if (lead >= 0xE0 && lead <= 0xEF) need = 3;
    else if (lead >= 0xF0 && lead <= 0xF4) need = 4;
    if (need > back + 1) return i - 1;
    return n;
}

int utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        size_t len;
        unsigned cp;
        if (c < 0x80) { i++; continue; }
        else if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
        else return 0;
        if (i + len > n) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((u[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (u[i + k] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += len;
    }
    return 1;
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

char *json_compact(const json_t *v) {
    if (!v) return strdup("null");
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    return s ? s : strdup("null");
}

/* jansson's own limit is far higher; a hostile body of nested brackets is
 * rejected before parsing. Brackets inside strings do not count. */
int json_max_depth_ok(const char *body, size_t n, int limit) {
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char c = body[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
            continue;
        }
        if (c == '"') in_str = 1;
        else if (c == '{' || c == '[') { if (++depth > limit) return 0; }
        else if (c == '}' || c == ']') depth--;
    }
    return 1;
}

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

void server_log(const char *fmt, ...) {
    char ts[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    pthread_mutex_lock(&log_mu);
    fprintf(stderr, "%s minke-serve: ", ts);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    pthread_mutex_unlock(&log_mu);
}
