/* cmd_parse.c: `minke parse`, generated text -> assistant message.
 *
 * Reads JSON lines {"thinking_mode": "chat"|"thinking"|"max", "completion": TEXT}
 * and writes one line per input: {"parsed": {role, content, reasoning_content,
 * tool_calls}} as DeepSeek's official parser returns it, or {"error": MESSAGE}
 * where the official parser rejects the text. --tolerant uses the server's
 * tolerant parser instead (never an error; adds "strict": true|false).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "jsonl.h"
#include "text/chat.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: minke parse [--tolerant] [FILE]\n"
            "  Parses each JSON line {\"thinking_mode\": ..., \"completion\": TEXT} of FILE (default stdin)\n"
            "  into {\"parsed\": {...}} or {\"error\": MESSAGE} (official strict parser).\n"
            "  --tolerant  the server's tolerant parser (drifted DSML accepted, never an error)\n");
}

typedef struct {
    int tolerant;
    int bad; /* some line was not a parse request */
} parse_run;

static void parse_line(void *ctx, const char *line, size_t len, json_t *out) {
    parse_run *run = ctx;
    json_error_t jerr;
    json_t *input = json_loadb(line, len, JSON_ALLOW_NUL, &jerr);
    const json_t *tm = input ? json_object_get(input, "thinking_mode") : NULL;
    const json_t *comp = input ? json_object_get(input, "completion") : NULL;
    if (!input || !json_is_string(tm) || !json_is_string(comp)) {
        json_object_set_new(out, "error", json_string(input ? "need \"thinking_mode\" and \"completion\" strings"
                                                            : "invalid JSON"));
        run->bad = 1;
        json_decref(input);
        return;
    }
    json_t *name = json_object_get(input, "name");
    if (json_is_string(name)) json_object_set(out, "name", name);
    if (run->tolerant) {
        int ok = 0;
        json_t *m = chat_parse_tolerant(json_string_value(comp), json_string_length(comp), json_string_value(tm), &ok);
        json_object_set_new(out, "parsed", m);
        json_object_set_new(out, "strict", json_boolean(ok));
    } else {
        char err[512];
        json_t *m = chat_parse(json_string_value(comp), json_string_length(comp), json_string_value(tm), err,
                               sizeof err);
        if (m) json_object_set_new(out, "parsed", m);
        else json_object_set_new(out, "error", json_string(err));
    }
    json_decref(input);
}

int cmd_parse(int argc, char **argv) {
    const char *path = NULL;
    parse_run run = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        if (!strcmp(argv[i], "--tolerant")) run.tolerant = 1;
        else if (argv[i][0] == '-' && argv[i][1]) { usage(stderr); return 2; }
        else path = argv[i];
    }
    if (jsonl_filter(path, parse_line, &run)) return 1;
    return run.bad ? 1 : 0;
}
