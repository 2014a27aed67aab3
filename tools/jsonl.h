/* jsonl.h: the JSON Lines filter loop of `minke render` and `minke parse`
 * (one JSON object out for each non-empty line in). */
#ifndef MINKE_TOOLS_JSONL_H
#define MINKE_TOOLS_JSONL_H

#include <stddef.h>

#include <jansson.h>

/* Fills out (an empty object) for one input line; the line is NUL-terminated
 * at len, its line ending already stripped. */
typedef void (*jsonl_line_fn)(void *ctx, const char *line, size_t len, json_t *out);

/* Runs fn over each non-empty line of path (stdin when NULL or "-") and
 * prints each out object as one line, keys in insertion order. Returns 0, or
 * 1 when path cannot be opened (said on stderr). */
int jsonl_filter(const char *path, jsonl_line_fn fn, void *ctx);

#endif
