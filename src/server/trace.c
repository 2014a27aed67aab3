/* trace.c: the `--trace FILE` session trace of `minke serve` (serving.md
 * §4.14): one human-readable entry per request, appended to FILE: header
 * (kind, model, stream, tools, think mode, token counts, sampling), the cache
 * decision (live tokens, common prefix, source, and for misses the tokens
 * around the first mismatch), the raw request JSON, the rendered prompt, the
 * generated text as it is produced, and the parsed message. Only the worker
 * thread writes entries; the mutex still guards the FILE so a write can never
 * interleave with opening or closing it. Writes are unbuffered so a trace is
 * complete up to the last token even if the server dies; write errors are
 * ignored (the trace must never take a request down). */
#define _GNU_SOURCE 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"

static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *trace_fp;
static int entry_open;   /* an entry was begun and not yet ended */

int trace_open(const char *path) {
    FILE *f = fopen(path, "a");
    if (!f) return -1;
    setvbuf(f, NULL, _IONBF, 0);
    pthread_mutex_lock(&trace_mu);
    trace_fp = f;
    pthread_mutex_unlock(&trace_mu);
    return 0;
}

void trace_close(void) {
    pthread_mutex_lock(&trace_mu);
    if (trace_fp) fclose(trace_fp);
    trace_fp = NULL;
    entry_open = 0;
    pthread_mutex_unlock(&trace_mu);
}

int trace_enabled(void) { return trace_fp != NULL; }

static const char *api_name(api_kind a) {
    switch (a) {
    case API_CHAT: return "chat.completions";
    case API_COMPLETIONS: return "completions";
    case API_RESPONSES: return "responses";
    case API_ANTHROPIC: return "messages";
    }
    return "?";
}

static const char *finish_name(finish_reason f) {
    switch (f) {
    case FINISH_NONE: return "none";
    case FINISH_STOP: return "stop";
    case FINISH_LENGTH: return "length";
    case FINISH_TOOL_CALLS: return "tool_calls";
    case FINISH_ERROR: return "error";
    }
    return "?";
}

/* One token as "id 'bytes'" with control bytes escaped, appended to b. */
static void token_desc(sbuf *b, int32_t id) {
    size_t len = 0;
    const char *p = engine_token_bytes(id, &len);
    sbuf_printf(b, "%d '", id);
    for (size_t i = 0; p && i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n') sbuf_adds(b, "\\n");
        else if (c == '\'' || c == '\\') sbuf_printf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7f) sbuf_printf(b, "\\x%02x", c);
        else sbuf_add(b, &p[i], 1);
    }
    sbuf_adds(b, "'");
}

char *trace_mismatch_window(const int32_t *live, int n_live, const int32_t *req, int n_req, int at) {
    sbuf b = {0};
    int from = at > 8 ? at - 8 : 0;
    for (int i = from; i < at + 8 && (i < n_live || i < n_req); i++) {
        sbuf_printf(&b, "  %s%6d live ", i == at ? ">" : " ", i);
        if (i < n_live) token_desc(&b, live[i]);
        else sbuf_adds(&b, "-");
        sbuf_adds(&b, " | prompt ");
        if (i < n_req) token_desc(&b, req[i]);
        else sbuf_adds(&b, "-");
        sbuf_adds(&b, "\n");
    }
    return sbuf_take(&b);
}

void trace_begin(const job *j, const trace_cache_info *c) {
    const gen_request *r = j->req;
    const gen_result *res = &j->res;
    pthread_mutex_lock(&trace_mu);
    if (!trace_fp) { pthread_mutex_unlock(&trace_mu); return; }
    FILE *f = trace_fp;
    char when[32];
    time_t t = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
    fprintf(f, "\n=== request %ld %s %s ===\n", j->seq, j->id, when);
    fprintf(f, "kind: %s\nmodel: %s\nstream: %d\ntools: %d\nthink_mode: %s\n", api_name(r->api), r->model ? r->model : "-", r->stream,
            r->has_tools, r->think == THINK_NONE ? "chat" : r->think == THINK_MAX ? "max" : "thinking");
    fprintf(f, "prompt_tokens: %d\neffective_tokens: %d\ncached_tokens: %d\n", r->n_tokens, res->prompt_tokens, res->cached_tokens);
    fprintf(f, "sampling: temperature=%g top_p=%g top_k=%d min_p=%g max_tokens=%d stops=%d\nseed: %llu\n", r->temperature, r->top_p, r->top_k,
            r->min_p, r->max_tokens, r->n_stop, (unsigned long long)r->seed);
    fprintf(f, "--- cache decision ---\nlive_tokens: %d\ncommon_prefix: %d\nsource: %s\n", c->live_tokens, c->common_prefix,
            res->cache_source ? res->cache_source : "-");
    if (c->window) fprintf(f, "first mismatch at token %d:\n%s", c->common_prefix, c->window);
    fprintf(f, "--- request ---\n%s\n", r->raw_body ? r->raw_body : "(not kept)");
    fputs("--- rendered prompt ---\n", f);
    fwrite(r->prompt_text ? r->prompt_text : "", 1, r->prompt_len, f);
    fputs("\n--- generated ---\n", f);
    entry_open = 1;
    pthread_mutex_unlock(&trace_mu);
}

void trace_generated(const char *s, size_t n) {
    pthread_mutex_lock(&trace_mu);
    if (trace_fp && entry_open && n) fwrite(s, 1, n, trace_fp);
    pthread_mutex_unlock(&trace_mu);
}

void trace_end(const job *j) {
    const gen_result *res = &j->res;
    pthread_mutex_lock(&trace_mu);
    if (!trace_fp || !entry_open) { pthread_mutex_unlock(&trace_mu); return; }
    FILE *f = trace_fp;
    fprintf(f, "\n--- parsed message ---\nfinish: %s\n", finish_name(res->finish));
    if (res->error[0]) fprintf(f, "error: %s\n", res->error);
    fprintf(f, "prompt_tokens: %d cached_tokens: %d completion_tokens: %d prefill_s: %.3f decode_s: %.3f\n", res->prompt_tokens,
            res->cached_tokens, res->completion_tokens, res->prefill_s, res->decode_s);
    fputs("reasoning: ", f);
    fwrite(res->reasoning.p ? res->reasoning.p : "", 1, res->reasoning.n, f);
    fputs("\ncontent: ", f);
    fwrite(res->content.p ? res->content.p : "", 1, res->content.n, f);
    fputs("\n", f);
    for (int i = 0; i < res->n_calls; i++)
        fprintf(f, "tool_call: %s %s %s\n", res->calls[i].id, res->calls[i].name, res->calls[i].arguments);
    fprintf(f, "=== end %ld ===\n", j->seq);
    entry_open = 0;
    pthread_mutex_unlock(&trace_mu);
}
