/* engine.c: the server's handle on the model: opening it, the tokenizer
 * built from its GGUF, and thin wrappers over tokenizer and renderer so the
 * rest of the server reaches the text layer through one place. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "text/chat.h"
#include "text/tokenizer.h"

static const server_config *g_cfg;
static minke_model *g_model;
static tokenizer *g_tok;
static char g_name[256];

const server_config *server_cfg(void) { return g_cfg; }
minke_model *engine_model(void) { return g_model; }
const char *engine_model_name(void) { return g_name; }

int engine_open(const server_config *cfg) {
    g_cfg = cfg;
    minke_model_params p;
    minke_model_params_default(&p);
    p.path = cfg->model_path;
    p.backend = cfg->backend;
    p.n_threads = cfg->n_threads;
    p.n_gpus = cfg->n_gpus;
    p.act = cfg->act;
    p.progress = 1;
    g_model = minke_model_open(&p);
    if (!g_model) {
        fprintf(stderr, "minke serve: cannot open model %s: %s\n", cfg->model_path, minke_last_error());
        return -1;
    }
    char err[256] = "";
    g_tok = tokenizer_from_gguf(minke_model_gguf(g_model), err, sizeof err);
    if (!g_tok || tokenizer_check_required(g_tok, err, sizeof err)) {
        fprintf(stderr, "minke serve: %s: %s\n", cfg->model_path, err);
        return -1;
    }
    const minke_model_info *info = minke_model_get_info(g_model);
    snprintf(g_name, sizeof g_name, "%s", info && info->name ? info->name : "minke");
    return 0;
}

void engine_close(void) {
    tokenizer_free(g_tok);
    g_tok = NULL;
    minke_model_close(g_model);
    g_model = NULL;
}

int engine_n_vocab(void) { return minke_model_get_info(g_model)->n_vocab; }
int32_t engine_eos(void) { return tokenizer_eos(g_tok); }

char *engine_render(json_t *chat_input, size_t *len, char *err, size_t errlen) {
    char *s = chat_render(chat_input, err, errlen);
    if (s) *len = strlen(s);
    return s;
}

int32_t *engine_tokenize(const char *text, size_t len, int *n_out) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (tokenizer_encode(g_tok, text, len, 0, &ids, &n)) { *n_out = -1; return NULL; }
    *n_out = (int)n;
    if (!ids) ids = calloc(1, sizeof *ids);
    return ids;
}

const char *engine_token_bytes(int32_t id, size_t *len) {
    const char *b = tokenizer_token_bytes(g_tok, id, len);
    if (!b) { *len = 0; return ""; }
    return b;
}

int32_t engine_special_user(void) { return tokenizer_special(g_tok, TOK_USER); }
int32_t engine_special_assistant(void) { return tokenizer_special(g_tok, TOK_ASSISTANT); }
