/* strbuf.h: the growable text buffer the chat renderer, the DSML code and
 * the Python-JSON writer build their output in.
 *
 * Out of memory is sticky (oom set, later appends ignored) so that builders
 * can append freely and check once at the end. After any append, even of
 * zero bytes, p is a NUL-terminated string unless oom: callers hand p on as
 * text without a NULL case.
 */
#ifndef MINKE_TEXT_STRBUF_H
#define MINKE_TEXT_STRBUF_H

#include <stddef.h>

typedef struct {
    char *p;    /* malloc'd, NUL-terminated; NULL until the first append */
    size_t n;   /* bytes of text, without the NUL */
    size_t cap;
    int oom;
} strbuf;

void strbuf_add(strbuf *b, const char *s, size_t n);
void strbuf_str(strbuf *b, const char *s);
/* The text so far ("" before any append). */
const char *strbuf_text(const strbuf *b);
/* Hands the text over (malloc'd, "" when empty) and empties b; NULL and b
 * freed if an append ran out of memory. */
char *strbuf_take(strbuf *b);
void strbuf_free(strbuf *b);

#endif
