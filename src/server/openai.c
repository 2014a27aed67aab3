/* openai.c: OpenAI Chat Completions (/v1/chat/completions) and legacy
 * Completions (/v1/completions): request parsing into the chat-input format
 * the renderer takes, and the response writers (one final JSON object, or
 * chat.completion.chunk / text_completion SSE events; serving.md §4.5-4.6). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"

static const char *finish_name(finish_reason f) {
    switch (f) {
    case FINISH_LENGTH: return "length";
    case FINISH_TOOL_CALLS: return "tool_calls";
    case FINISH_ERROR: return "error";
    default: return "stop";
    }
}

/* ---- request parsing ---- */

/* function.arguments may be a JSON string or a raw JSON value. */
static char *arguments_string(json_t *args) {
    if (!args || json_is_null(args)) return strdup("{}");
    if (json_is_string(args)) return strdup(json_string_value(args));
    char *s = json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    return s ? s : strdup("{}");
}

static json_t *convert_tool_calls(json_t *calls, parse_error *e) {
    if (!json_is_array(calls)) {
        perr(e, 400, "invalid_request_error", "'tool_calls' must be an array");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *fn = json_object_get(c, "function");
        json_t *name = json_object_get(fn, "name");
        json_t *id = json_object_get(c, "id");
        if (!json_is_object(c) || !json_is_object(fn) || !json_is_string(name) || (id && !json_is_string(id))) {
            json_decref(out);
            perr(e, 400, "invalid_request_error", "each tool call needs an 'id' string and function.name");
            return NULL;
        }
        char *args = arguments_string(json_object_get(fn, "arguments"));
        char idbuf[48];
        if (!id) snprintf(idbuf, sizeof idbuf, "call_missing_%zu", i);
        json_array_append_new(out, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id ? json_string_value(id) : idbuf, "type", "function",
                                             "function", "name", json_string_value(name), "arguments", args));
        free(args);
    }
    return out;
}

/* OpenAI tools [{type:function, function:{name,...}}]; Responses-style
 * {type:function, name, description, parameters} are accepted too. */
json_t *openai_convert_tools(json_t *tools, parse_error *e);
json_t *openai_convert_tools(json_t *tools, parse_error *e) {
    if (!tools || json_is_null(tools)) return json_array();
    if (!json_is_array(tools)) {
        perr(e, 400, "invalid_request_error", "'tools' must be an array");
        snprintf(e->param, sizeof e->param, "tools");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        if (json_is_object(fn) && json_is_string(json_object_get(fn, "name"))) {
            json_array_append_new(out, json_pack("{s:s, s:O}", "type", "function", "function", fn));
            continue;
        }
        if (json_is_object(t) && json_is_string(json_object_get(t, "name"))) {
            json_t *f = json_object();
            json_object_set(f, "name", json_object_get(t, "name"));
            if (json_object_get(t, "description")) json_object_set(f, "description", json_object_get(t, "description"));
            json_object_set(f, "parameters", json_object_get(t, "parameters") ? json_object_get(t, "parameters") : json_pack("{s:s, s:{}}", "type", "object", "properties"));
            json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", f));
            continue;
        }
        json_decref(out);
        perr(e, 400, "invalid_request_error", "tools[%zu] must be {\"type\":\"function\",\"function\":{\"name\":...}}", i);
        snprintf(e->param, sizeof e->param, "tools");
        return NULL;
    }
    return out;
}

/* thinking (bool or {type}), think (bool), reasoning_effort, model aliases. */
static int read_thinking(gen_request *r, json_t *body, parse_error *e) {
    int explicit_set = 0, enabled = 1;
    json_t *th = json_object_get(body, "thinking");
    if (th && !json_is_null(th)) {
        if (json_is_boolean(th)) enabled = json_is_true(th);
        else if (json_is_object(th)) {
            const char *t = json_string_value(json_object_get(th, "type"));
            if (!t) { perr(e, 400, "invalid_request_error", "'thinking.type' must be a string"); return -1; }
            enabled = strcmp(t, "disabled") != 0;
        } else { perr(e, 400, "invalid_request_error", "'thinking' must be a boolean or an object"); return -1; }
        explicit_set = 1;
    }
    json_t *think = json_object_get(body, "think");
    if (think && !json_is_null(think)) {
        if (!json_is_boolean(think)) { perr(e, 400, "invalid_request_error", "'think' must be a boolean"); return -1; }
        enabled = json_is_true(think);
        explicit_set = 1;
    }
    if (!explicit_set && r->model) {
        if (!strcmp(r->model, "deepseek-chat")) enabled = 0;
        if (!strcmp(r->model, "deepseek-reasoner")) enabled = 1;
    }
    r->think = enabled ? THINK_HIGH : THINK_NONE;
    json_t *eff = json_object_get(body, "reasoning_effort");
    if (eff && !json_is_null(eff) && enabled) return req_effort(eff, &r->think, NULL, e);
    if (eff && !json_is_null(eff) && !json_is_string(eff)) { perr(e, 400, "invalid_request_error", "'reasoning_effort' must be a string"); return -1; }
    return 0;
}

gen_request *openai_parse_chat(json_t *body, parse_error *e) {
    gen_request *r = calloc(1, sizeof *r);
    r->api = API_CHAT;
    if (req_read_common(r, body, e) || read_thinking(r, body, e) || req_read_stop(r, json_object_get(body, "stop"), e)) goto fail;
    json_t *nv = json_object_get(body, "n");
    if (nv && !json_is_null(nv) && !(json_is_integer(nv) && json_integer_value(nv) == 1)) {
        perr(e, 400, "invalid_request_error", "only n=1 is supported");
        snprintf(e->param, sizeof e->param, "n");
        goto fail;
    }
    json_t *msgs = json_object_get(body, "messages");
    if (!msgs) { perr(e, 400, "invalid_request_error", "missing messages"); snprintf(e->param, sizeof e->param, "messages"); goto fail; }
    if (!json_is_array(msgs) || !json_array_size(msgs)) {
        perr(e, 400, "invalid_request_error", "'messages' must be a non-empty array");
        snprintf(e->param, sizeof e->param, "messages");
        goto fail;
    }
    json_t *out = json_array();
    r->chat_input = json_pack("{s:o}", "messages", out);
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        if (!json_is_object(m)) { perr(e, 400, "invalid_request_error", "messages[%zu] must be an object", i); goto fail; }
        json_t *rv = json_object_get(m, "role");
        if (rv && !json_is_string(rv)) { perr(e, 400, "invalid_request_error", "messages[%zu].role must be a string", i); goto fail; }
        const char *role = rv ? json_string_value(rv) : "user";
        if (!strcmp(role, "function")) role = "tool";
        if (strcmp(role, "system") && strcmp(role, "developer") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "tool")) {
            perr(e, 400, "invalid_request_error", "messages[%zu].role '%s' is not one of system, developer, user, assistant, tool", i, role);
            goto fail;
        }
        /* developer is the system prompt in the OpenAI API; the official
         * encoder's developer role is an internal search-agent turn */
        if (!strcmp(role, "developer")) role = "system";
        char *text = content_text(json_object_get(m, "content"), e, 1);
        if (!text) goto fail;
        json_t *nm = json_pack("{s:s, s:s}", "role", role, "content", text);
        free(text);
        json_array_append_new(out, nm);
        if (!strcmp(role, "assistant")) {
            json_t *rc = json_object_get(m, "reasoning_content");
            if (rc && !json_is_null(rc)) {
                if (!json_is_string(rc)) { perr(e, 400, "invalid_request_error", "messages[%zu].reasoning_content must be a string", i); goto fail; }
                json_object_set(nm, "reasoning_content", rc);
            }
            json_t *tc = json_object_get(m, "tool_calls");
            if (tc && !json_is_null(tc)) {
                json_t *calls = convert_tool_calls(tc, e);
                if (!calls) goto fail;
                if (json_array_size(calls)) json_object_set_new(nm, "tool_calls", calls);
                else json_decref(calls);
            }
        }
        if (!strcmp(role, "tool")) {
            json_t *id = json_object_get(m, "tool_call_id");
            if (id && !json_is_string(id)) { perr(e, 400, "invalid_request_error", "messages[%zu].tool_call_id must be a string", i); goto fail; }
            json_object_set_new(nm, "tool_call_id", json_string(id ? json_string_value(id) : ""));
        }
    }
    /* response_format: rendered by the official encoder after the system
     * prompt ("## Response Format: ..."); json_schema contributes its schema */
    json_t *rf = json_object_get(body, "response_format");
    if (rf && !json_is_null(rf)) {
        const char *type = json_string_value(json_object_get(rf, "type"));
        if (!json_is_object(rf) || !type) { perr(e, 400, "invalid_request_error", "'response_format' must be an object with a 'type'"); goto fail; }
        json_t *fmt = NULL;
        if (!strcmp(type, "json_object")) fmt = json_pack("{s:s}", "type", "json_object");
        else if (!strcmp(type, "json_schema")) {
            json_t *schema = json_object_get(json_object_get(rf, "json_schema"), "schema");
            if (!json_is_object(schema)) { perr(e, 400, "invalid_request_error", "'response_format.json_schema.schema' must be an object"); goto fail; }
            fmt = json_incref(schema);
        } else if (strcmp(type, "text")) { perr(e, 400, "invalid_request_error", "unsupported response_format type '%s'", type); goto fail; }
        if (fmt) {
            json_t *m0 = json_array_get(out, 0);
            if (strcmp(json_string_value(json_object_get(m0, "role")) ?: "", "system")) {
                m0 = json_pack("{s:s, s:s}", "role", "system", "content", "");
                json_array_insert_new(out, 0, m0);
            }
            json_object_set_new(m0, "response_format", fmt);
        }
    }
    json_t *tools = openai_convert_tools(json_object_get(body, "tools"), e);
    if (!tools) goto fail;
    json_t *tc = json_object_get(body, "tool_choice");
    int none = json_is_string(tc) && !strcmp(json_string_value(tc), "none");
    req_set_tools(r, tools, none);
    return r;
fail:
    gen_request_free(r);
    return NULL;
}

gen_request *openai_parse_completions(json_t *body, parse_error *e) {
    gen_request *r = calloc(1, sizeof *r);
    r->api = API_COMPLETIONS;
    if (req_read_common(r, body, e) || read_thinking(r, body, e) || req_read_stop(r, json_object_get(body, "stop"), e)) goto fail;
    json_t *p = json_object_get(body, "prompt");
    if (json_is_array(p) && json_array_size(p) > 0) p = json_array_get(p, 0);
    if (!p || json_is_null(p)) { perr(e, 400, "invalid_request_error", "missing prompt"); snprintf(e->param, sizeof e->param, "prompt"); goto fail; }
    if (!json_is_string(p)) { perr(e, 400, "invalid_request_error", "'prompt' must be a string"); snprintf(e->param, sizeof e->param, "prompt"); goto fail; }
    r->raw_prompt = strdup(json_string_value(p));
    return r;
fail:
    gen_request_free(r);
    return NULL;
}

/* ---- responses ---- */

static json_t *usage_json(const gen_result *res) {
    return json_pack("{s:i, s:i, s:i, s:{s:i, s:i}}", "prompt_tokens", res->prompt_tokens, "completion_tokens", res->completion_tokens,
                     "total_tokens", res->prompt_tokens + res->completion_tokens, "prompt_tokens_details", "cached_tokens",
                     res->cached_tokens, "cache_write_tokens", res->prompt_tokens - res->cached_tokens);
}

static json_t *chunk(job *j, json_t *delta, const char *finish) {
    json_t *choice = json_pack("{s:i, s:o}", "index", 0, "delta", delta);
    json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
    return json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", j->id, "object", "chat.completion.chunk", "created", (json_int_t)time(NULL),
                     "model", j->req->model, "choices", choice);
}

typedef struct chat_state {
    int tools_streamed;
} chat_state;

static chat_state *cst(job *j) {
    if (!j->sink_state) j->sink_state = calloc(1, sizeof(chat_state));
    return j->sink_state;
}

static void chat_begin(job *j) {
    cst(j);
    sse_data(&j->out, chunk(j, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL));
}

static void chat_reasoning(job *j, const char *s, size_t n) {
    sse_data(&j->out, chunk(j, json_pack("{s:s%}", "reasoning_content", s, n), NULL));
}

static void chat_content(job *j, const char *s, size_t n) {
    sse_data(&j->out, chunk(j, json_pack("{s:s%}", "content", s, n), NULL));
}

static void chat_tool_start(job *j, int index, const char *id, const char *name) {
    cst(j)->tools_streamed++;
    sse_data(&j->out, chunk(j, json_pack("{s:[{s:i, s:s, s:s, s:{s:s, s:s}}]}", "tool_calls", "index", index, "id", id, "type", "function",
                                         "function", "name", name, "arguments", ""), NULL));
}

static void chat_tool_args(job *j, int index, const char *s, size_t n) {
    sse_data(&j->out, chunk(j, json_pack("{s:[{s:i, s:{s:s%}}]}", "tool_calls", "index", index, "function", "arguments", s, n), NULL));
}

static json_t *tool_calls_json(const gen_result *res, int with_index) {
    json_t *a = json_array();
    for (int i = 0; i < res->n_calls; i++) {
        json_t *c = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", res->calls[i].id, "type", "function", "function", "name", res->calls[i].name,
                              "arguments", res->calls[i].arguments);
        if (with_index) json_object_set_new(c, "index", json_integer(i));
        json_array_append_new(a, c);
    }
    return a;
}

/* End of an OpenAI stream: the usage chunk (no choices) when asked for, [DONE]. */
static void stream_done(job *j, const char *object) {
    if (j->req->include_usage) {
        json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:[]}", "id", j->id, "object", object, "created", (json_int_t)time(NULL), "model",
                              j->req->model, "choices");
        json_object_set_new(u, "usage", usage_json(&j->res));
        sse_data(&j->out, u);
    }
    sse_raw(&j->out, "data: [DONE]\n\n");
}

static void chat_end(job *j) {
    gen_result *res = &j->res;
    if (j->req->stream) {
        if (res->n_calls && !cst(j)->tools_streamed)
            sse_data(&j->out, chunk(j, json_pack("{s:o}", "tool_calls", tool_calls_json(res, 1)), NULL));
        sse_data(&j->out, chunk(j, json_object(), finish_name(res->finish)));
        stream_done(j, "chat.completion.chunk");
        return;
    }
    json_t *msg = json_pack("{s:s, s:s%}", "role", "assistant", "content", res->content.p ? res->content.p : "", res->content.n);
    if (res->reasoning.n) json_object_set_new(msg, "reasoning_content", json_stringn(res->reasoning.p, res->reasoning.n));
    if (res->n_calls) json_object_set_new(msg, "tool_calls", tool_calls_json(res, 0));
    json_t *body = json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:s, s:n}], s:o}", "id", j->id, "object", "chat.completion", "created",
                             (json_int_t)time(NULL), "model", j->req->model, "choices", "index", 0, "message", msg, "finish_reason",
                             finish_name(res->finish), "logprobs", "usage", usage_json(res));
    j->body = json_body_line(body);
}

void openai_stream_error(job *j, const char *msg) {
    sse_event(&j->out, "error", json_pack("{s:{s:s, s:s}}", "error", "message", msg, "type", "server_error"));
}

json_t *openai_error_body(int status, const char *type, const char *msg) {
    (void)status;
    return openai_error_json(type, msg, NULL, NULL);
}

const api_sink openai_chat_sink = {
    .begin = chat_begin,
    .reasoning = chat_reasoning,
    .content = chat_content,
    .tool_start = chat_tool_start,
    .tool_args = chat_tool_args,
    .end = chat_end,
    .stream_error = openai_stream_error,
    .error_body = openai_error_body,
};

/* ---- /v1/completions ---- */

static json_t *cmpl_chunk(job *j, const char *s, size_t n, const char *finish) {
    json_t *choice = json_pack("{s:s%, s:i, s:n}", "text", s, n, "index", 0, "logprobs");
    json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
    return json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", j->id, "object", "text_completion", "created", (json_int_t)time(NULL), "model",
                     j->req->model, "choices", choice);
}

static void cmpl_begin(job *j) { (void)j; }

static void cmpl_text(job *j, const char *s, size_t n) { sse_data(&j->out, cmpl_chunk(j, s, n, NULL)); }

static void cmpl_end(job *j) {
    gen_result *res = &j->res;
    if (j->req->stream) {
        sse_data(&j->out, cmpl_chunk(j, "", 0, finish_name(res->finish)));
        stream_done(j, "text_completion");
        return;
    }
    json_t *body = json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", j->id, "object", "text_completion", "created", (json_int_t)time(NULL),
                             "model", j->req->model, "choices",
                             json_pack("{s:s%, s:i, s:n, s:s}", "text", res->raw_text.p ? res->raw_text.p : "", res->raw_text.n, "index", 0,
                                       "logprobs", "finish_reason", finish_name(res->finish)),
                             "usage", usage_json(res));
    j->body = json_body_line(body);
}

const api_sink openai_completions_sink = {
    .begin = cmpl_begin,
    .content = cmpl_text,
    .end = cmpl_end,
    .stream_error = openai_stream_error,
    .error_body = openai_error_body,
};
