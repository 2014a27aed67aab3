/* request.c: what all four generation endpoints share: reading the common
 * fields with type checks (a wrong type is a 400, never a crash), thinking /
 * effort resolution (serving.md §4.3), stop sequences, model-name checks,
 * the API error bodies, and preparing a request for the worker: exact DSML
 * replay patches, rendering, tokenization and the context-length check. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "text/chat.h"

void perr(parse_error *e, int status, const char *type, const char *fmt, ...) {
    e->status = status;
    snprintf(e->type, sizeof e->type, "%s", type);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
}

json_t *openai_error_json(const char *type, const char *msg, const char *param, const char *code) {
    json_t *err = json_pack("{s:s, s:s}", "message", msg, "type", type);
    json_object_set_new(err, "param", param ? json_string(param) : json_null());
    json_object_set_new(err, "code", code ? json_string(code) : json_null());
    return json_pack("{s:o}", "error", err);
}

json_t *anthropic_error_json(const char *type, const char *msg) {
    return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", type, "message", msg);
}

void gen_request_free(gen_request *r) {
    if (!r) return;
    free(r->model);
    json_decref(r->chat_input);
    free(r->raw_prompt);
    free(r->script);
    free(r->raw_body);
    free(r->prompt_text);
    free(r->tokens);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    for (int i = 0; i < r->n_tool_names; i++) {
        free(r->tool_names[i].rendered);
        free(r->tool_names[i].name);
        free(r->tool_names[i].ns);
    }
    free(r->tool_names);
    free(r);
}

/* Served names: our id, the DeepSeek API aliases, and the GGUF's own name.
 * --accept-any-model lets clients with hard-coded model names (Claude Code) in. */
int req_model_ok(const char *model) {
    const server_config *cfg = server_cfg();
    if (cfg->accept_any_model) return 1;
    if (!strcmp(model, cfg->model_id) || !strcmp(model, "deepseek-v4-flash") || !strcmp(model, "deepseek-chat") ||
        !strcmp(model, "deepseek-reasoner"))
        return 1;
    const char *n = engine_model_name();
    return n && !strcmp(model, n);
}

static int read_number(json_t *body, const char *key, float *out, float lo, float hi, parse_error *e) {
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) {
        perr(e, 400, "invalid_request_error", "'%s' must be a number", key);
        snprintf(e->param, sizeof e->param, "%s", key);
        return -1;
    }
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi) {
        perr(e, 400, "invalid_request_error", "'%s' must be between %g and %g", key, lo, hi);
        snprintf(e->param, sizeof e->param, "%s", key);
        return -1;
    }
    *out = (float)d;
    return 0;
}

static int read_int(json_t *body, const char *key, int *out, long long lo, parse_error *e) {
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) && !(json_is_real(v) && json_real_value(v) == floor(json_real_value(v)))) {
        perr(e, 400, "invalid_request_error", "'%s' must be an integer", key);
        snprintf(e->param, sizeof e->param, "%s", key);
        return -1;
    }
    double d = json_number_value(v);
    if (d < (double)lo) {
        perr(e, 400, "invalid_request_error", "'%s' must be at least %lld", key, lo);
        snprintf(e->param, sizeof e->param, "%s", key);
        return -1;
    }
    *out = d > INT_MAX ? INT_MAX : (int)d;
    return 0;
}

int req_read_stop(gen_request *r, json_t *v, parse_error *e) {
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) {
        if (!json_string_length(v)) return 0;
        r->stop = calloc(1, sizeof(char *));
        r->stop[r->n_stop++] = strdup(json_string_value(v));
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) > 16) {
        perr(e, 400, "invalid_request_error", "'stop' must be a string or an array of at most 16 strings");
        return -1;
    }
    r->stop = calloc(json_array_size(v) + 1, sizeof(char *));
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s)) {
            perr(e, 400, "invalid_request_error", "'stop' entries must be strings");
            return -1;
        }
        if (json_string_length(s)) r->stop[r->n_stop++] = strdup(json_string_value(s));
    }
    return 0;
}

int req_effort(json_t *v, think_mode *mode, int *explicit_set, parse_error *e) {
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) {
        perr(e, 400, "invalid_request_error", "reasoning effort must be a string");
        return -1;
    }
    chat_mode m = *mode == THINK_NONE ? CHAT_MODE_CHAT : *mode == THINK_MAX ? CHAT_MODE_MAX : CHAT_MODE_THINKING;
    if (*mode == THINK_NONE) m = CHAT_MODE_THINKING; /* an effort name re-enables thinking unless "none" */
    if (chat_mode_from_effort(json_string_value(v), &m)) {
        perr(e, 400, "invalid_request_error", "unknown reasoning effort '%s' (use none, minimal, low, medium, high, xhigh or max)",
             json_string_value(v));
        return -1;
    }
    *mode = m == CHAT_MODE_CHAT ? THINK_NONE : m == CHAT_MODE_MAX ? THINK_MAX : THINK_HIGH;
    if (explicit_set) *explicit_set = 1;
    return 0;
}

/* model, max tokens, sampling, seed, stream, stream_options, stop. */
int req_read_common(gen_request *r, json_t *body, parse_error *e) {
    json_t *m = json_object_get(body, "model");
    if (m && !json_is_null(m) && !json_is_string(m)) {
        perr(e, 400, "invalid_request_error", "'model' must be a string");
        snprintf(e->param, sizeof e->param, "model");
        return -1;
    }
    const char *model = json_is_string(m) ? json_string_value(m) : server_cfg()->model_id;
    if (!req_model_ok(model)) {
        perr(e, 404, r->api == API_ANTHROPIC ? "not_found_error" : "invalid_request_error",
             "The model '%s' does not exist (this server serves '%s')", model, server_cfg()->model_id);
        snprintf(e->param, sizeof e->param, "model");
        snprintf(e->code, sizeof e->code, "model_not_found");
        return -1;
    }
    r->model = strdup(model);
    r->max_tokens = -1;
    r->temperature = 1.0f;
    r->top_p = 1.0f;
    r->min_p = 0.05f;
    r->top_k = 0;
    static const char *max_keys[] = {"max_tokens", "max_completion_tokens", "max_output_tokens"};
    for (int i = 0; i < 3; i++) {
        int v = -1;
        if (read_int(body, max_keys[i], &v, 1, e)) return -1;
        if (v > 0) r->max_tokens = v;
    }
    if (read_number(body, "temperature", &r->temperature, 0, 2, e)) return -1;
    if (read_number(body, "top_p", &r->top_p, 0, 1, e)) return -1;
    if (read_number(body, "min_p", &r->min_p, 0, 1, e)) return -1;
    if (read_int(body, "top_k", &r->top_k, 0, e)) return -1;
    json_t *seed = json_object_get(body, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed)) {
            perr(e, 400, "invalid_request_error", "'seed' must be an integer");
            snprintf(e->param, sizeof e->param, "seed");
            return -1;
        }
        r->seed = (uint64_t)json_integer_value(seed);
    }
    json_t *st = json_object_get(body, "stream");
    if (st && !json_is_null(st)) {
        if (!json_is_boolean(st)) {
            perr(e, 400, "invalid_request_error", "'stream' must be a boolean");
            snprintf(e->param, sizeof e->param, "stream");
            return -1;
        }
        r->stream = json_is_true(st);
    }
    json_t *so = json_object_get(body, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            perr(e, 400, "invalid_request_error", "'stream_options' must be an object");
            return -1;
        }
        json_t *iu = json_object_get(so, "include_usage");
        if (iu && !json_is_boolean(iu) && !json_is_null(iu)) {
            perr(e, 400, "invalid_request_error", "'stream_options.include_usage' must be a boolean");
            return -1;
        }
        r->include_usage = json_is_true(iu);
    }
    r->think = THINK_HIGH;
    json_t *script = json_object_get(body, "minke_script");
    if (server_cfg()->test_hooks && json_is_string(script)) r->script = strdup(json_string_value(script));
    return 0;
}

/* Text of a content value: a string, null, or an array of strings and
 * {"type":"text"|..., "text": ...} parts concatenated (non-text parts such as
 * images are dropped). */
char *content_text(json_t *content, parse_error *e, int allow_null) {
    if (!content || json_is_null(content)) {
        if (allow_null) return strdup("");
        perr(e, 400, "invalid_request_error", "message content is missing");
        return NULL;
    }
    if (json_is_string(content)) return strdup(json_string_value(content));
    if (!json_is_array(content)) {
        perr(e, 400, "invalid_request_error", "message content must be a string or an array of content parts");
        return NULL;
    }
    sbuf b = {0};
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part) {
        if (json_is_string(part)) { sbuf_adds(&b, json_string_value(part)); continue; }
        if (!json_is_object(part)) {
            sbuf_free(&b);
            perr(e, 400, "invalid_request_error", "content parts must be objects or strings");
            return NULL;
        }
        json_t *t = json_object_get(part, "text");
        if (t && !json_is_string(t)) {
            sbuf_free(&b);
            perr(e, 400, "invalid_request_error", "content part 'text' must be a string");
            return NULL;
        }
        if (t) sbuf_adds(&b, json_string_value(t));
    }
    return sbuf_take(&b);
}

void req_set_tools(gen_request *r, json_t *tools, int tools_off) {
    if (json_array_size(tools) && !tools_off) {
        r->has_tools = 1;
        json_object_set_new(r->chat_input, "tools", tools);
    } else {
        json_decref(tools);
    }
}

/* A tool result must answer a call made earlier in the conversation (all
 * three APIs reject orphans; rendering one would feed the model a result for
 * a call it never made). Unlike ds4 we never bind a result to the live
 * session's calls alone (spec 4.11 steps 2-4): clients replay the call, so a
 * request can never lose its live binding and the 409 of spec 4.9 does not
 * arise. Responses and Anthropic get the spec's 4.9 wording. */
static int check_tool_results(api_kind api, json_t *msgs, parse_error *e) {
    size_t i, k;
    json_t *m, *c;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || strcmp(role, "tool")) continue;
        const char *id = json_string_value(json_object_get(m, "tool_call_id"));
        int found = 0;
        for (size_t p = 0; p < i && !found && id; p++) {
            json_array_foreach(json_object_get(json_array_get(msgs, p), "tool_calls"), k, c) {
                const char *cid = json_string_value(json_object_get(c, "id"));
                if (cid && !strcmp(cid, id)) { found = 1; break; }
            }
        }
        if (!found) {
            if (api == API_RESPONSES)
                perr(e, 400, "invalid_request_error",
                     "Responses continuation state is not available for call_id %s; retry by replaying the full input history", id ? id : "");
            else if (api == API_ANTHROPIC)
                perr(e, 400, "invalid_request_error",
                     "Anthropic continuation state is not available for tool_use_id %s; retry by replaying the full messages history", id ? id : "");
            else
                perr(e, 400, "invalid_request_error", "tool result for unknown tool call id '%s': replay the assistant turn that made the call", id ? id : "");
            return -1;
        }
    }
    return 0;
}

int req_prepare(gen_request *r, parse_error *e) {
    const server_config *cfg = server_cfg();
    char err[256] = "";
    if (r->think == THINK_MAX && cfg->ctx < CHAT_THINK_MAX_MIN_CONTEXT) r->think = THINK_HIGH;
    if (r->api == API_COMPLETIONS) {
        sbuf b = {0};
        sbuf_adds(&b, CHAT_BOS);
        if (r->think == THINK_MAX) sbuf_adds(&b, CHAT_REASONING_EFFORT_MAX);
        sbuf_adds(&b, "You are a helpful assistant" CHAT_USER);
        sbuf_adds(&b, r->raw_prompt);
        sbuf_adds(&b, CHAT_ASSISTANT);
        sbuf_adds(&b, r->think ? CHAT_THINK_OPEN : CHAT_THINK_CLOSE);
        r->prompt_len = b.n;
        r->prompt_text = sbuf_take(&b);
    } else {
        json_t *in = r->chat_input;
        json_object_set_new(in, "thinking_mode", json_string(r->think == THINK_NONE ? "chat" : r->think == THINK_MAX ? "max" : "thinking"));
        json_t *tools = json_object_get(in, "tools");
        json_t *msgs = json_object_get(in, "messages");
        if (json_is_array(tools) && json_array_size(tools) > 0) {
            json_t *m0 = json_array_get(msgs, 0);
            const char *role = json_string_value(json_object_get(m0, "role"));
            if (!role || (strcmp(role, "system") && strcmp(role, "developer")))
                json_array_insert_new(msgs, 0, json_pack("{s:s, s:s}", "role", "system", "content", ""));
        } else if (tools) {
            json_object_del(in, "tools");
        }
        if (check_tool_results(r->api, msgs, e)) return -1;
        dsml_patch *patches = NULL;
        int n_patches = 0;
        if (cfg->tool_replay) r->n_replayed = toolmem_patch_messages(msgs, &patches, &n_patches);
        size_t len = 0;
        char *text = engine_render(in, &len, err, sizeof err);
        if (!text) {
            dsml_patches_free(patches, n_patches);
            perr(e, 400, "invalid_request_error", "cannot render the conversation: %s", err);
            return -1;
        }
        if (n_patches) {
            char *patched = toolmem_apply_patches(text, len, patches, n_patches, &len);
            free(text);
            text = patched;
        }
        dsml_patches_free(patches, n_patches);
        r->prompt_text = text;
        r->prompt_len = len;
    }
    r->tokens = engine_tokenize(r->prompt_text, r->prompt_len, &r->n_tokens);
    if (!r->tokens && r->n_tokens < 0) {
        perr(e, 500, "server_error", "tokenization failed");
        return -1;
    }
    if (r->n_tokens >= cfg->ctx) {
        perr(e, 400, "invalid_request_error", "Prompt has %d tokens, but the configured context size is %d tokens", r->n_tokens, cfg->ctx);
        snprintf(e->param, sizeof e->param, "%s", r->api == API_COMPLETIONS ? "prompt" : r->api == API_RESPONSES ? "input" : "messages");
        snprintf(e->code, sizeof e->code, "context_length_exceeded");
        e->n_prompt_tokens = r->n_tokens;
        e->n_ctx = cfg->ctx;
        return -1;
    }
    if (r->max_tokens < 0) r->max_tokens = cfg->default_max_tokens;
    return 0;
}
