/* strbuf.c: the growable text buffer of src/text (see strbuf.h). */
#include "text/strbuf.h"

#include <stdlib.h>
#include <string.h>

void strbuf_add(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void strbuf_str(strbuf *b, const char *s) { strbuf_add(b, s, strlen(s)); }

const char *strbuf_text(const strbuf *b) { return b->p ? b->p : ""; }

char *strbuf_take(strbuf *b) {
    if (!b->oom) strbuf_add(b, "", 0);
    char *t = b->oom ? NULL : b->p;
    if (!t) free(b->p);
    *b = (strbuf){0};
    return t;
}

void strbuf_free(strbuf *b) {
    free(b->p);
    *b = (strbuf){0};
}
