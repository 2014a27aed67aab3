/* pyjson.h: JSON read and written exactly as Python's json module does it.
 *
 * The official DeepSeek V4 encoder re-serializes tool schemas and tool-call
 * arguments with json.dumps(..., ensure_ascii=False), so a byte-exact C
 * renderer needs Python's reading rules (NaN/Infinity accepted, huge
 * integers exact, duplicate keys: last value at the first key's place) and
 * Python's writing rules (", " and ": " separators, float repr, raw UTF-8).
 * Values live in jansson trees; what jansson cannot hold (integers beyond 64
 * bits, NaN, +-Infinity) is kept as a one-member marker object
 * {PYJSON_RAW_KEY: "<text to print>"} that pyjson_dumps prints verbatim.
 */
#ifndef MINKE_TEXT_PYJSON_H
#define MINKE_TEXT_PYJSON_H

#include <stddef.h>
#include <jansson.h>

#include "text/strbuf.h"

#define PYJSON_RAW_KEY "\x01pyjson-raw"

/* Parse like Python json.loads (strict: no control characters in strings,
 * nothing but whitespace after the value). NULL with err set on failure. */
json_t *pyjson_loads(const char *text, size_t len, char *err, size_t errlen);

/* Serialize like json.dumps(v, ensure_ascii=False). Returns malloc'd text. */
char *pyjson_dumps(const json_t *v);
/* Python's json.dumps of one string (quotes included), malloc'd. */
char *pyjson_dumps_string(const char *s, size_t len);

/* The same, appended to b (for code that builds JSON text by hand). */
void pyjson_dump_to(strbuf *b, const json_t *v);
void pyjson_dump_string_to(strbuf *b, const char *s, size_t len);
/* A string's json.dumps without the quotes, for text streamed in pieces. */
void pyjson_escape(strbuf *b, const char *s, size_t len);

/* The text of a raw marker object (see above) as a jansson string, or NULL
 * when v is not one. */
const json_t *pyjson_raw(const json_t *v);

/* Python repr of a float ("1.0", "1e-07", "1e+16", "inf" -> "Infinity"). */
void pyjson_format_double(double d, char *buf, size_t buflen);

#endif
