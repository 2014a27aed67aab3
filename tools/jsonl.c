/* jsonl.c: the JSON Lines filter loop (see jsonl.h); its own file because
 * two subcommands share it. */
#include "jsonl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int jsonl_filter(const char *path, jsonl_line_fn fn, void *ctx) {
    FILE *in = stdin;
    if (path && strcmp(path, "-")) {
        in = fopen(path, "rb");
        if (!in) { perror(path); return 1; }
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, in)) > 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        if (len == 0) continue;
        line[len] = 0;
        json_t *out = json_object();
        fn(ctx, line, (size_t)len, out);
        char *s = json_dumps(out, JSON_PRESERVE_ORDER);
        if (s) {
            fputs(s, stdout);
            fputc('\n', stdout);
            free(s);
        }
        json_decref(out);
    }
    free(line);
    if (in != stdin) fclose(in);
    return 0;
}
