/* unicode.h: the Unicode facts the DeepSeek V4 pre-tokenizer needs.
 *
 * Class bits per code point (general-category groups and White_Space as
 * Oniguruma's Unicode \s defines it), from a generated two-stage table
 * (unicode_tables.c, made by tools/gen/gen_unicode_tables.py), plus a
 * lenient UTF-8 decoder: invalid bytes come back one at a time with class 0
 * so that any byte string can be pre-tokenized and still round-trips.
 */
#ifndef MINKE_TEXT_UNICODE_H
#define MINKE_TEXT_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#define UC_L 1u   /* \p{L} letter */
#define UC_M 2u   /* \p{M} mark */
#define UC_N 4u   /* \p{N} number */
#define UC_P 8u   /* \p{P} punctuation */
#define UC_S 16u  /* \p{S} symbol */
#define UC_WS 32u /* \s: U+0009-000D, U+0085, Zs, Zl, Zp */

extern const char unicode_tables_version[];
extern const uint16_t unicode_stage1[0x110000 >> 8];
extern const uint8_t unicode_stage2[][256];

static inline unsigned uc_class(uint32_t cp) {
    if (cp >= 0x110000) return 0;
    return unicode_stage2[unicode_stage1[cp >> 8]][cp & 0xff];
}

/* The CJK/kana class of the pre-tokenizer's second pass:
 * U+4E00-U+9FA5, U+3040-U+309F, U+30A0-U+30FF. */
static inline int uc_is_cjk_pass2(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF);
}

/* Decode one code point from s[0..n) (n >= 1). Returns its byte length;
 * *cp gets the code point, or UC_INVALID for a byte that does not start a
 * well-formed sequence (overlong, surrogate, > U+10FFFF, truncated). */
#define UC_INVALID 0xFFFFFFFFu
static inline size_t uc_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    if (c >= 0xC2 && c <= 0xDF) {
        if (n >= 2 && (s[1] & 0xC0) == 0x80) { *cp = ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu); return 2; }
    } else if (c >= 0xE0 && c <= 0xEF) {
        if (n >= 3 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80) {
            uint32_t v = ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
            if (v >= 0x800 && (v < 0xD800 || v > 0xDFFF)) { *cp = v; return 3; }
        }
    } else if (c >= 0xF0 && c <= 0xF4) {
        if (n >= 4 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80 && (s[3] & 0xC0) == 0x80) {
            uint32_t v = ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
            if (v >= 0x10000 && v < 0x110000) { *cp = v; return 4; }
        }
    }
    *cp = UC_INVALID;
    return 1;
}

/* Encode cp (< 0x110000) as UTF-8 into out (4 bytes room); returns length. */
static inline size_t uc_encode(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

#endif
