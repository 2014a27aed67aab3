/* anthropic.c: the Anthropic Messages API (/v1/messages): request parsing
 * (system, content blocks, tool_use/tool_result, thinking controls) into the
 * chat-input format, and the response writers: one message object, or the
 * message_start / content_block_* / message_delta / message_stop event
 * stream with thinking, text and tool_use blocks (serving.md §4.8). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

/* ---- request parsing ---- */

static int flush_text(json_t *out, const char *role, sbuf *text, sbuf *reasoning, json_t **calls) {
    if (!text->n && !reasoning->n && (!*calls || !json_array_size(*calls))) return 0;
    json_t *m = json_pack("{s:s, s:s%}", "role", role, "content", text->p ? text->p : "", text->n);
    if (reasoning->n) json_object_set_new(m, "reasoning_content", json_stringn(reasoning->p, reasoning->n));
    if (*calls && json_array_size(*calls)) { json_object_set_new(m, "tool_calls", *calls); *calls = NULL; }
    json_array_append_new(out, m);
    sbuf_clear(text);
    sbuf_clear(reasoning);
    return 0;
}

static int convert_message(json_t *out, json_t *m, size_t idx, parse_error *e) {
    if (!json_is_object(m)) { perr(e, 400, "invalid_request_error", "messages.%zu: must be an object", idx); return -1; }
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant"))) {
        perr(e, 400, "invalid_request_error", "messages.%zu.role: must be \"user\" or \"assistant\"", idx);
        return -1;
    }
    int is_asst = !strcmp(role, "assistant");
    json_t *content = json_object_get(m, "content");
    if (json_is_string(content)) {
        json_array_append_new(out, json_pack("{s:s, s:s}", "role", role, "content", json_string_value(content)));
        return 0;
    }
    if (!json_is_array(content)) {
        perr(e, 400, "invalid_request_error", "messages.%zu.content: must be a string or an array of content blocks", idx);
        return -1;
    }
    sbuf text = {0}, reasoning = {0};
    json_t *calls = NULL;
    size_t i;
    json_t *b;
    int rc = 0;
    json_array_foreach(content, i, b) {
        if (json_is_string(b)) { sbuf_adds(&text, json_string_value(b)); continue; }
        if (!json_is_object(b)) { perr(e, 400, "invalid_request_error", "messages.%zu.content.%zu: must be an object", idx, i); rc = -1; break; }
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!type) { perr(e, 400, "invalid_request_error", "messages.%zu.content.%zu.type: missing", idx, i); rc = -1; break; }
        if (!strcmp(type, "text")) {
            json_t *t = json_object_get(b, "text");
            if (!json_is_string(t)) { perr(e, 400, "invalid_request_error", "messages.%zu.content.%zu.text: must be a string", idx, i); rc = -1; break; }
            sbuf_adds(&text, json_string_value(t));
        } else if (!strcmp(type, "thinking")) {
            json_t *t = json_object_get(b, "thinking");
            if (json_is_string(t)) sbuf_adds(&reasoning, json_string_value(t));
        } else if (!strcmp(type, "tool_use")) {
            json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *input = json_object_get(b, "input");
            if (!json_is_string(id) || !json_is_string(name)) {
                perr(e, 400, "invalid_request_error", "messages.%zu.content.%zu: tool_use needs string 'id' and 'name'", idx, i);
                rc = -1;
                break;
            }
            char *args = input && !json_is_null(input) ? json_dumps(input, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER) : strdup("{}");
            if (!calls) calls = json_array();
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", id, "type", "function", "function", "name", name, "arguments", args));
            free(args);
        } else if (!strcmp(type, "tool_result")) {
            json_t *id = json_object_get(b, "tool_use_id");
            if (!json_is_string(id)) { perr(e, 400, "invalid_request_error", "messages.%zu.content.%zu.tool_use_id: must be a string", idx, i); rc = -1; break; }
            char *res = content_text(json_object_get(b, "content"), e, 1);
            if (!res) { rc = -1; break; }
            flush_text(out, role, &text, &reasoning, &calls);
            json_array_append_new(out, json_pack("{s:s, s:s, s:O}", "role", "tool", "content", res, "tool_call_id", id));
            free(res);
        } else {
            json_t *t = json_object_get(b, "text"); /* images and documents are dropped */
            if (json_is_string(t)) sbuf_adds(&text, json_string_value(t));
        }
    }
    if (!rc) {
        if (is_asst || text.n || reasoning.n || calls) flush_text(out, role, &text, &reasoning, &calls);
    }
    json_decref(calls);
    sbuf_free(&text);
    sbuf_free(&reasoning);
    return rc;
}

static char *system_text(json_t *sys, parse_error *e) {
    if (!sys || json_is_null(sys)) return strdup("");
    if (json_is_string(sys)) return strdup(json_string_value(sys));
    if (!json_is_array(sys)) { perr(e, 400, "invalid_request_error", "system: must be a string or an array of text blocks"); return NULL; }
    sbuf b = {0};
    size_t i;
    json_t *p;
    json_array_foreach(sys, i, p) {
        const char *t = json_is_string(p) ? json_string_value(p) : json_string_value(json_object_get(p, "text"));
        if (!t) { sbuf_free(&b); perr(e, 400, "invalid_request_error", "system.%zu: must be a text block", i); return NULL; }
        if (!strncmp(t, "x-anthropic-", 12)) continue;
        if (b.n && b.p[b.n - 1] != '\n') sbuf_adds(&b, "\n");
        sbuf_adds(&b, t);
    }
    return sbuf_take(&b);
}

gen_request *anthropic_parse(json_t *body, parse_error *e) {
    gen_request *r = calloc(1, sizeof *r);
    r->api = API_ANTHROPIC;
    if (req_read_common(r, body, e) || req_read_stop(r, json_object_get(body, "stop_sequences"), e)) goto fail;
    /* thinking: {type: enabled|disabled|adaptive}; effort from output_config or reasoning_effort */
    int enabled = 1;
    json_t *th = json_object_get(body, "thinking");
    if (th && !json_is_null(th)) {
        const char *t = json_string_value(json_object_get(th, "type"));
        if (!json_is_object(th) || !t) { perr(e, 400, "invalid_request_error", "thinking: must be an object with a 'type'"); goto fail; }
        if (strcmp(t, "enabled") && strcmp(t, "disabled") && strcmp(t, "adaptive")) {
            perr(e, 400, "invalid_request_error", "thinking.type: must be enabled, disabled or adaptive");
            goto fail;
        }
        enabled = strcmp(t, "disabled") != 0;
    } else if (!strcmp(r->model, "deepseek-chat")) enabled = 0;
    r->think = enabled ? THINK_HIGH : THINK_NONE;
    json_t *oc = json_object_get(body, "output_config");
    json_t *eff = json_is_object(oc) ? json_object_get(oc, "effort") : NULL;
    if (!eff) eff = json_object_get(body, "reasoning_effort");
    if (enabled && req_effort(eff, &r->think, NULL, e)) goto fail;

    json_t *msgs = json_object_get(body, "messages");
    if (!msgs) { perr(e, 400, "invalid_request_error", "missing messages"); goto fail; }
    if (!json_is_array(msgs) || !json_array_size(msgs)) { perr(e, 400, "invalid_request_error", "messages: must be a non-empty array"); goto fail; }
    json_t *out = json_array();
    r->chat_input = json_pack("{s:o}", "messages", out);
    char *sys = system_text(json_object_get(body, "system"), e);
    if (!sys) goto fail;
    if (sys[0]) json_array_append_new(out, json_pack("{s:s, s:s}", "role", "system", "content", sys));
    free(sys);
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) if (convert_message(out, m, i, e)) goto fail;

    json_t *tools = json_object_get(body, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) { perr(e, 400, "invalid_request_error", "tools: must be an array"); goto fail; }
        json_t *conv = json_array();
        json_t *t;
        json_array_foreach(tools, i, t) {
            json_t *name = json_object_get(t, "name");
            if (!json_is_string(name)) { json_decref(conv); perr(e, 400, "invalid_request_error", "tools.%zu.name: must be a string", i); goto fail; }
            json_t *f = json_pack("{s:O}", "name", name);
            if (json_object_get(t, "description")) json_object_set(f, "description", json_object_get(t, "description"));
            json_t *schema = json_object_get(t, "input_schema");
            json_object_set_new(f, "parameters", schema ? json_incref(schema) : json_pack("{s:s, s:{}}", "type", "object", "properties"));
            json_array_append_new(conv, json_pack("{s:s, s:o}", "type", "function", "function", f));
        }
        json_t *tc = json_object_get(body, "tool_choice");
        const char *tct = json_string_value(json_object_get(tc, "type"));
        req_set_tools(r, conv, tct && !strcmp(tct, "none"));
    }
    return r;
fail:
    gen_request_free(r);
    return NULL;
}

/* ---- responses ---- */

enum { BLK_NONE = 0, BLK_THINKING, BLK_TEXT, BLK_TOOL };

typedef struct anth_state {
    int open;        /* kind of the open block */
    int index;       /* next block index */
    int n_text, n_thinking;
    int tools_streamed;
} anth_state;

static anth_state *ast(job *j) {
    if (!j->sink_state) j->sink_state = calloc(1, sizeof(anth_state));
    return j->sink_state;
}

static json_t *usage_json(const gen_result *res, int with_output) {
    int cache_write = res->prompt_tokens - res->cached_tokens;
    int input = res->prompt_tokens - res->cached_tokens - cache_write;
    if (input < 0) input = 0;
    return json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", input, "output_tokens", with_output ? res->completion_tokens : 0,
                     "cache_read_input_tokens", res->cached_tokens, "cache_creation_input_tokens", cache_write);
}

static const char *stop_reason(const gen_result *res) {
    if (res->n_calls) return "tool_use";
    if (res->finish == FINISH_LENGTH) return "max_tokens";
    if (res->stop_index >= 0) return "stop_sequence";
    return "end_turn";
}

static void close_block(job *j) {
    anth_state *s = ast(j);
    if (!s->open) return;
    if (s->open == BLK_THINKING)
        sse_event(&j->out, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index", s->index - 1,
                                                            "delta", "type", "signature_delta", "signature", j->id));
    sse_event(&j->out, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", s->index - 1));
    s->open = BLK_NONE;
}

static void open_block(job *j, int kind, json_t *block) {
    anth_state *s = ast(j);
    close_block(j);
    sse_event(&j->out, "content_block_start", json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", s->index, "content_block", block));
    s->index++;
    s->open = kind;
    if (kind == BLK_TEXT) s->n_text++;
    if (kind == BLK_THINKING) s->n_thinking++;
}

static void anth_begin(job *j) {
    ast(j);
    json_t *msg = json_pack("{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:o}", "id", j->id, "type", "message", "role", "assistant", "model", j->req->model,
                            "content", "stop_reason", "stop_sequence", "usage", usage_json(&j->res, 0));
    sse_event(&j->out, "message_start", json_pack("{s:s, s:o}", "type", "message_start", "message", msg));
}

static void anth_reasoning(job *j, const char *t, size_t n) {
    if (ast(j)->open != BLK_THINKING) open_block(j, BLK_THINKING, json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", ""));
    sse_event(&j->out, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:s%}}", "type", "content_block_delta", "index", ast(j)->index - 1,
                                                        "delta", "type", "thinking_delta", "thinking", t, n));
}

static void anth_content(job *j, const char *t, size_t n) {
    if (ast(j)->open != BLK_TEXT) open_block(j, BLK_TEXT, json_pack("{s:s, s:s}", "type", "text", "text", ""));
    sse_event(&j->out, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:s%}}", "type", "content_block_delta", "index", ast(j)->index - 1,
                                                        "delta", "type", "text_delta", "text", t, n));
}

static void anth_tool_start(job *j, int index, const char *id, const char *name) {
    (void)index;
    ast(j)->tools_streamed++;
    open_block(j, BLK_TOOL, json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", id, "name", name, "input"));
}

static void anth_tool_args(job *j, int index, const char *t, size_t n) {
    (void)index;
    sse_event(&j->out, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:s%}}", "type", "content_block_delta", "index", ast(j)->index - 1,
                                                        "delta", "type", "input_json_delta", "partial_json", t, n));
}

static void anth_tool_end(job *j, int index) {
    (void)index;
    close_block(j);
}

static json_t *input_object(const char *args) {
    json_t *v = json_loads(args, JSON_DECODE_ANY, NULL);
    if (!json_is_object(v)) { json_decref(v); v = json_object(); }
    return v;
}

static json_t *stop_sequence_json(job *j) {
    int k = j->res.stop_index;
    return k >= 0 && k < j->req->n_stop ? json_string(j->req->stop[k]) : json_null();
}

static void anth_end(job *j) {
    gen_result *res = &j->res;
    if (j->req->stream) {
        anth_state *s = ast(j);
        close_block(j);
        for (int i = s->tools_streamed; i < res->n_calls; i++) {
            open_block(j, BLK_TOOL, json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", res->calls[i].id, "name", res->calls[i].name, "input"));
            json_t *in = input_object(res->calls[i].arguments);
            char *compact = json_compact(in);
            json_decref(in);
            sse_event(&j->out, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index", s->index - 1,
                                                                "delta", "type", "input_json_delta", "partial_json", compact));
            free(compact);
            close_block(j);
        }
        if (!s->n_text && !res->n_calls) {
            open_block(j, BLK_TEXT, json_pack("{s:s, s:s}", "type", "text", "text", ""));
            close_block(j);
        }
        json_t *delta = json_pack("{s:s, s:o}", "stop_reason", stop_reason(res), "stop_sequence", stop_sequence_json(j));
        sse_event(&j->out, "message_delta", json_pack("{s:s, s:o, s:{s:i}}", "type", "message_delta", "delta", delta, "usage", "output_tokens",
                                                      res->completion_tokens));
        sse_event(&j->out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
        return;
    }
    json_t *content = json_array();
    if (res->reasoning.n)
        json_array_append_new(content, json_pack("{s:s, s:s%, s:s}", "type", "thinking", "thinking", res->reasoning.p, res->reasoning.n, "signature", j->id));
    if (res->content.n) json_array_append_new(content, json_pack("{s:s, s:s%}", "type", "text", "text", res->content.p, res->content.n));
    for (int i = 0; i < res->n_calls; i++)
        json_array_append_new(content, json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", res->calls[i].id, "name", res->calls[i].name,
                                                 "input", input_object(res->calls[i].arguments)));
    if (!res->content.n && !res->n_calls) json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text", "text", ""));
    json_t *body = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:o}", "id", j->id, "type", "message", "role", "assistant", "model", j->req->model,
                             "content", content, "stop_reason", stop_reason(res), "stop_sequence", stop_sequence_json(j), "usage", usage_json(res, 1));
    j->body = json_body_line(body);
}

static void anth_stream_error(job *j, const char *msg) {
    sse_event(&j->out, "error", json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", "api_error", "message", msg));
}

static json_t *anth_error_body(int status, const char *type, const char *msg) {
    (void)status;
    return anthropic_error_json(type, msg);
}

const api_sink anthropic_sink = {
    .begin = anth_begin,
    .reasoning = anth_reasoning,
    .content = anth_content,
    .tool_start = anth_tool_start,
    .tool_args = anth_tool_args,
    .tool_end = anth_tool_end,
    .end = anth_end,
    .stream_error = anth_stream_error,
    .error_body = anth_error_body,
};
