/* cmd_render.c: `minke render`, the official chat encoding as a filter.
 *
 * Reads JSON lines in the input format of tests/fixtures/chat/cases.jsonl
 * (messages, tools, thinking_mode, ...) and writes one line per input:
 * {"rendered": "..."} (plus "ids" with -m MODEL.gguf), or {"error": "..."}
 * when the official encoder would reject the conversation. Input lines are
 * read with Python's number rules so tool schemas re-serialize byte-exactly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "jsonl.h"
#include "gguf/gguf.h"
#include "text/chat.h"
#include "text/pyjson.h"
#include "text/tokenizer.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: minke render [-m MODEL.gguf] [FILE]\n"
            "  Renders each JSON line of FILE (default stdin) with DeepSeek V4's official chat\n"
            "  encoding: {\"messages\": [...], \"tools\": [...]|null, \"thinking_mode\": \"chat\"|\"thinking\"|\"max\",\n"
            "  \"reasoning_effort\": null|\"high\"|\"max\", \"drop_thinking\": bool, \"context\": N}.\n"
            "  Writes {\"rendered\": TEXT} or {\"error\": MESSAGE} per line.\n"
            "  -m MODEL.gguf  also write \"ids\", the rendered text tokenized with the model's tokenizer\n");
}

typedef struct {
    tokenizer *tok; /* with -m: also tokenize */
    int bad;        /* some line was not JSON or failed to tokenize */
} render_run;

static void render_line(void *ctx, const char *line, size_t len, json_t *out) {
    render_run *run = ctx;
    char err[512];
    json_t *input = pyjson_loads(line, len, err, sizeof err);
    if (!input) {
        char msg[600];
        snprintf(msg, sizeof msg, "invalid JSON: %s", err);
        json_object_set_new(out, "error", json_string(msg));
        run->bad = 1;
        return;
    }
    json_t *name = json_object_get(input, "name");
    if (json_is_string(name)) json_object_set(out, "name", name);
    char *text = chat_render(input, err, sizeof err);
    json_decref(input);
    if (!text) {
        json_object_set_new(out, "error", json_string(err));
        return;
    }
    json_t *r = json_string(text);
    json_object_set_new(out, "rendered", r ? r : json_string(""));
    if (run->tok) {
        int32_t *ids = NULL;
        size_t n = 0;
        /* special-token text is matched; nothing is added (BOS is in the text) */
        if (tokenizer_encode_flags(run->tok, text, strlen(text), 0, &ids, &n) == 0) {
            json_t *a = json_array();
            for (size_t k = 0; k < n; k++) json_array_append_new(a, json_integer(ids[k]));
            json_object_set_new(out, "ids", a);
        } else {
            json_object_set_new(out, "ids_error", json_string("tokenization failed"));
            run->bad = 1;
        }
        free(ids);
    }
    free(text);
}

int cmd_render(int argc, char **argv) {
    const char *model = NULL, *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1]) { usage(stderr); return 2; }
        else path = argv[i];
    }
    gguf_file *gf = NULL;
    render_run run = {0};
    if (model) {
        char err[512];
        gf = gguf_open(model, err, sizeof err);
        if (!gf) { fprintf(stderr, "minke render: %s\n", err); return 1; }
        run.tok = tokenizer_from_gguf(gf, err, sizeof err);
        if (!run.tok) {
            fprintf(stderr, "minke render: %s: %s\n", model, err);
            gguf_close(gf);
            return 1;
        }
    }
    int rc = jsonl_filter(path, render_line, &run);
    tokenizer_free(run.tok);
    if (gf) gguf_close(gf);
    return rc || run.bad ? 1 : 0;
}
