/* responses.c: the OpenAI Responses API (/v1/responses, used by Codex CLI):
 * input items (messages, reasoning, function calls and their outputs) into
 * the chat-input format, namespaced tools flattened for rendering and mapped
 * back on output, and the response writers: one response object, or the
 * response.* event stream with reasoning, message and function_call items
 * (serving.md §4.7). Tool arguments stream as they are generated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"

json_t *openai_convert_tools(json_t *tools, parse_error *e);

/* ---- request parsing ---- */

static void add_tool_name(gen_request *r, const char *rendered, const char *name, const char *ns, int is_search) {
    r->tool_names = realloc(r->tool_names, (size_t)(r->n_tool_names + 1) * sizeof *r->tool_names);
    tool_name_map *m = &r->tool_names[r->n_tool_names++];
    m->rendered = strdup(rendered);
    m->name = strdup(name);
    m->ns = ns ? strdup(ns) : NULL;
    m->is_tool_search = is_search;
}

static json_t *function_tool(json_t *t, const char *rendered_name) {
    json_t *f = json_pack("{s:s}", "name", rendered_name);
    if (json_object_get(t, "description")) json_object_set(f, "description", json_object_get(t, "description"));
    json_t *p = json_object_get(t, "parameters");
    json_object_set_new(f, "parameters", p ? json_incref(p) : json_pack("{s:s, s:{}}", "type", "object", "properties"));
    return json_pack("{s:s, s:o}", "type", "function", "function", f);
}

static json_t *convert_tools(gen_request *r, json_t *tools, parse_error *e) {
    json_t *out = json_array();
    if (!tools || json_is_null(tools)) return out;
    if (!json_is_array(tools)) { json_decref(out); perr(e, 400, "invalid_request_error", "'tools' must be an array"); return NULL; }
    size_t i, k;
    json_t *t, *sub;
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(json_object_get(t, "type"));
        const char *name = json_string_value(json_object_get(t, "name"));
        if (!json_is_object(t) || !type) { json_decref(out); perr(e, 400, "invalid_request_error", "tools[%zu] needs a 'type'", i); return NULL; }
        if (!strcmp(type, "function")) {
            if (!name) { json_decref(out); perr(e, 400, "invalid_request_error", "tools[%zu].name must be a string", i); return NULL; }
            json_array_append_new(out, function_tool(t, name));
            add_tool_name(r, name, name, NULL, 0);
        } else if (!strcmp(type, "namespace")) {
            json_t *list = json_object_get(t, "tools");
            if (!name || !json_is_array(list)) { json_decref(out); perr(e, 400, "invalid_request_error", "tools[%zu]: a namespace needs 'name' and 'tools'", i); return NULL; }
            json_array_foreach(list, k, sub) {
                const char *sn = json_string_value(json_object_get(sub, "name"));
                if (!sn) continue;
                size_t len = strlen(name) + strlen(sn) + 1;
                char *full = malloc(len);
                snprintf(full, len, "%s%s", name, sn);
                json_array_append_new(out, function_tool(sub, full));
                add_tool_name(r, full, sn, name, 0);
                free(full);
            }
        } else if (!strcmp(type, "tool_search")) {
            json_t *f = json_pack("{s:s, s:s}", "name", "tool_search", "description", "Search available tools.");
            if (json_is_string(json_object_get(t, "description"))) json_object_set(f, "description", json_object_get(t, "description"));
            json_t *p = json_object_get(t, "parameters");
            json_object_set_new(f, "parameters", p ? json_incref(p) : json_pack("{s:s, s:{}}", "type", "object", "properties"));
            json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", f));
            add_tool_name(r, "tool_search", "tool_search", NULL, 1);
        }
        /* hosted tools (web_search, file_search, ...) have no client-side
         * function to call: they are not offered to the model */
    }
    return out;
}

static char *item_text(json_t *content, parse_error *e) {
    if (json_is_string(content)) return strdup(json_string_value(content));
    if (!json_is_array(content)) { perr(e, 400, "invalid_request_error", "message content must be a string or an array of text parts"); return NULL; }
    sbuf b = {0};
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        json_t *t = json_object_get(p, "text");
        if (type && (!strcmp(type, "input_image") || !strcmp(type, "input_file"))) continue;
        if (!type || !json_is_string(t) ||
            (strcmp(type, "input_text") && strcmp(type, "output_text") && strcmp(type, "text") && strcmp(type, "summary_text") &&
             strcmp(type, "reasoning_text") && strcmp(type, "refusal"))) {
            sbuf_free(&b);
            perr(e, 400, "invalid_request_error", "unsupported content part%s%s", type ? " type " : "", type ? type : "");
            return NULL;
        }
        sbuf_adds(&b, json_string_value(t));
    }
    return sbuf_take(&b);
}

/* Output text of function_call_output: a string, text parts, or raw JSON. */
static char *output_text(json_t *o) {
    if (!o || json_is_null(o)) return strdup("");
    if (json_is_string(o)) return strdup(json_string_value(o));
    if (json_is_array(o)) {
        sbuf b = {0};
        size_t i;
        json_t *p;
        int all_text = 1;
        json_array_foreach(o, i, p) {
            json_t *t = json_object_get(p, "text");
            if (json_is_string(t)) sbuf_adds(&b, json_string_value(t));
            else all_text = 0;
        }
        if (all_text) return sbuf_take(&b);
        sbuf_free(&b);
    }
    return json_compact(o);
}

/* Consecutive call items form one assistant turn (the current *last_asst,
 * opened here when none is); reasoning items just before it (pending, when
 * given) become its reasoning_content. */
static void add_tool_call(json_t *out, json_t **last_asst, json_t *call, sbuf *pending) {
    if (!*last_asst) {
        *last_asst = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
        json_array_append_new(out, *last_asst);
    }
    if (pending && pending->n) {
        json_object_set_new(*last_asst, "reasoning_content", json_stringn(pending->p, pending->n));
        sbuf_clear(pending);
    }
    json_t *calls = json_object_get(*last_asst, "tool_calls");
    if (!calls) {
        calls = json_array();
        json_object_set_new(*last_asst, "tool_calls", calls);
    }
    json_array_append_new(calls, call);
}

static int parse_input(gen_request *r, json_t *input, json_t *out, parse_error *e) {
    if (json_is_string(input)) {
        json_array_append_new(out, json_pack("{s:s, s:s}", "role", "user", "content", json_string_value(input)));
        return 0;
    }
    if (!json_is_array(input)) { perr(e, 400, "invalid_request_error", "'input' must be a string or an array of items"); return -1; }
    sbuf pending = {0};      /* reasoning waiting for its assistant turn */
    json_t *last_asst = NULL; /* assistant message the previous item produced */
    size_t i;
    json_t *it;
    int rc = 0;
    json_array_foreach(input, i, it) {
        if (!json_is_object(it)) { perr(e, 400, "invalid_request_error", "input[%zu] must be an object", i); rc = -1; break; }
        const char *type = json_string_value(json_object_get(it, "type"));
        json_t *status = json_object_get(it, "status");
        if (json_is_string(status) && strcmp(json_string_value(status), "completed")) {
            perr(e, 400, "invalid_request_error", "input[%zu] has status '%s'; only completed items can be replayed", i, json_string_value(status));
            rc = -1;
            break;
        }
        if (!type || !strcmp(type, "message")) {
            const char *role = json_string_value(json_object_get(it, "role"));
            if (!role) role = "user";
            if (!strcmp(role, "developer")) role = "system";
            if (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system")) {
                perr(e, 400, "invalid_request_error", "input[%zu].role '%s' is not user, assistant, system or developer", i, role);
                rc = -1;
                break;
            }
            char *text = item_text(json_object_get(it, "content"), e);
            if (!text) { rc = -1; break; }
            if (strcmp(role, "assistant") && pending.n) {
                json_array_append_new(out, json_pack("{s:s, s:s, s:s%}", "role", "assistant", "content", "", "reasoning_content", pending.p, pending.n));
                sbuf_clear(&pending);
            }
            json_t *m = json_pack("{s:s, s:s}", "role", role, "content", text);
            free(text);
            if (!strcmp(role, "assistant") && pending.n) {
                json_object_set_new(m, "reasoning_content", json_stringn(pending.p, pending.n));
                sbuf_clear(&pending);
            }
            json_array_append_new(out, m);
            last_asst = !strcmp(role, "assistant") ? m : NULL;
        } else if (!strcmp(type, "reasoning")) {
            json_t *arrs[2] = {json_object_get(it, "summary"), json_object_get(it, "content")};
            for (int k = 0; k < 2; k++) {
                size_t q;
                json_t *p;
                if (!json_is_array(arrs[k])) continue;
                json_array_foreach(arrs[k], q, p) {
                    const char *t = json_string_value(json_object_get(p, "text"));
                    if (!t) continue;
                    if (pending.n) sbuf_adds(&pending, "\n");
                    sbuf_adds(&pending, t);
                }
            }
            last_asst = NULL;
        } else if (!strcmp(type, "function_call") || !strcmp(type, "custom_tool_call")) {
            json_t *cid = json_object_get(it, "call_id");
            if (!cid) cid = json_object_get(it, "id");
            const char *name = json_string_value(json_object_get(it, "name"));
            if (!json_is_string(cid) || !name) { perr(e, 400, "invalid_request_error", "input[%zu]: %s needs 'call_id' and 'name'", i, type); rc = -1; break; }
            const char *ns = json_string_value(json_object_get(it, "namespace"));
            char full[512];
            snprintf(full, sizeof full, "%s%s", ns && !strcmp(type, "function_call") ? ns : "", name);
            json_t *a = json_object_get(it, !strcmp(type, "function_call") ? "arguments" : "input");
            char *args = json_is_string(a) ? strdup(json_string_value(a)) : a ? json_compact(a) : strdup("{}");
            json_t *call = json_pack("{s:O, s:s, s:{s:s, s:s}}", "id", cid, "type", "function", "function", "name", full, "arguments", args);
            free(args);
            add_tool_call(out, &last_asst, call, &pending);
        } else if (!strcmp(type, "function_call_output") || !strcmp(type, "custom_tool_call_output")) {
            json_t *cid = json_object_get(it, "call_id");
            if (!json_is_string(cid)) { perr(e, 400, "invalid_request_error", "input[%zu]: %s needs a 'call_id'", i, type); rc = -1; break; }
            if (pending.n) {
                json_array_append_new(out, json_pack("{s:s, s:s, s:s%}", "role", "assistant", "content", "", "reasoning_content", pending.p, pending.n));
                sbuf_clear(&pending);
            }
            char *text = output_text(json_object_get(it, "output"));
            json_array_append_new(out, json_pack("{s:s, s:s, s:O}", "role", "tool", "content", text, "tool_call_id", cid));
            free(text);
            last_asst = NULL;
        } else if (!strcmp(type, "local_shell_call") || !strcmp(type, "web_search_call") || !strcmp(type, "tool_search_call") ||
                   !strcmp(type, "image_generation_call")) {
            /* hosted-tool calls replayed by the client: an assistant tool call
             * named after the tool, arguments from action/arguments/input */
            json_t *cid = json_object_get(it, "call_id");
            if (!cid) cid = json_object_get(it, "id");
            if (!json_is_string(cid)) { perr(e, 400, "invalid_request_error", "input[%zu]: %s needs a 'call_id'", i, type); rc = -1; break; }
            const char *name = !strcmp(type, "local_shell_call") ? "local_shell" : !strcmp(type, "tool_search_call") ? "tool_search" : type;
            json_t *a = json_object_get(it, "action");
            if (!a) a = json_object_get(it, "arguments");
            if (!a) a = json_object_get(it, "input");
            char *args = json_is_string(a) ? strdup(json_string_value(a)) : a ? json_compact(a) : strdup("{}");
            json_t *call = json_pack("{s:O, s:s, s:{s:s, s:s}}", "id", cid, "type", "function", "function", "name", name, "arguments", args);
            free(args);
            add_tool_call(out, &last_asst, call, NULL);
        } else if (!strcmp(type, "local_shell_call_output") || !strcmp(type, "web_search_call_output") || !strcmp(type, "tool_search_output") ||
                   !strcmp(type, "tool_search_call_output") || !strcmp(type, "image_generation_call_output")) {
            json_t *cid = json_object_get(it, "call_id");
            if (!json_is_string(cid)) { perr(e, 400, "invalid_request_error", "input[%zu]: %s needs a 'call_id'", i, type); rc = -1; break; }
            json_t *o = json_object_get(it, "output");
            if (!o) o = json_object_get(it, "result");
            if (!o) o = json_object_get(it, "tools");
            char *text = output_text(o);
            json_array_append_new(out, json_pack("{s:s, s:s, s:O}", "role", "tool", "content", text, "tool_call_id", cid));
            free(text);
            last_asst = NULL;
        } else if (!strcmp(type, "compaction") || !strcmp(type, "context_compaction")) {
            continue;
        } else {
            perr(e, 400, "invalid_request_error", "invalid JSON request: input[%zu] has unsupported type '%s'", i, type);
            rc = -1;
            break;
        }
    }
    if (!rc && pending.n)
        json_array_append_new(out, json_pack("{s:s, s:s, s:s%}", "role", "assistant", "content", "", "reasoning_content", pending.p, pending.n));
    sbuf_free(&pending);
    return rc;
}

gen_request *responses_parse(json_t *body, parse_error *e) {
    gen_request *r = calloc(1, sizeof *r);
    r->api = API_RESPONSES;
    if (req_read_common(r, body, e)) goto fail;
    static const char *unsupported[] = {"previous_response_id", "conversation"};
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get(body, unsupported[k]);
        if (v && !json_is_null(v)) { perr(e, 400, "invalid_request_error", "%s is not supported; replay full input instead", unsupported[k]); goto fail; }
    }
    json_t *reasoning = json_object_get(body, "reasoning");
    if (reasoning && !json_is_null(reasoning)) {
        if (!json_is_object(reasoning)) { perr(e, 400, "invalid_request_error", "'reasoning' must be an object"); goto fail; }
        if (req_effort(json_object_get(reasoning, "effort"), &r->think, NULL, e)) goto fail;
        const char *sum = json_string_value(json_object_get(reasoning, "summary"));
        r->reasoning_summary = sum && (!strcmp(sum, "auto") || !strcmp(sum, "concise") || !strcmp(sum, "detailed"));
    }
    json_t *tc = json_object_get(body, "tool_choice");
    int tools_off = 0;
    if (tc && !json_is_null(tc)) {
        if (json_is_string(tc)) {
            const char *v = json_string_value(tc);
            if (!strcmp(v, "none")) tools_off = 1;
            else if (strcmp(v, "auto")) { perr(e, 400, "invalid_request_error", "tool_choice=%s not supported", v); goto fail; }
        } else { perr(e, 400, "invalid_request_error", "forced tool_choice not supported"); goto fail; }
    }
    json_t *input = json_object_get(body, "input");
    if (!input || json_is_null(input)) { perr(e, 400, "invalid_request_error", "missing input"); snprintf(e->param, sizeof e->param, "input"); goto fail; }
    json_t *out = json_array();
    r->chat_input = json_pack("{s:o}", "messages", out);
    json_t *ins = json_object_get(body, "instructions");
    if (ins && !json_is_null(ins)) {
        if (!json_is_string(ins)) { perr(e, 400, "invalid_request_error", "'instructions' must be a string"); goto fail; }
        json_array_append_new(out, json_pack("{s:s, s:O}", "role", "system", "content", ins));
    }
    if (parse_input(r, input, out, e)) goto fail;
    if (!json_array_size(out)) { perr(e, 400, "invalid_request_error", "missing input"); goto fail; }
    json_t *tools = convert_tools(r, json_object_get(body, "tools"), e);
    if (!tools) goto fail;
    req_set_tools(r, tools, tools_off);
    return r;
fail:
    gen_request_free(r);
    return NULL;
}

/* ---- responses ---- */

typedef struct resp_state {
    int seq;
    int next_output;
    int rs_index, msg_index;  /* output index, -1 when not open */
    char rs_id[32], msg_id[32];
    sbuf rs_text, msg_text;
    int tool_out[64];
    char tool_item[64][32];
    sbuf tool_args;
    int tools_streamed;
    json_t *output;           /* finished items in output order */
} resp_state;

static resp_state *rst(job *j) {
    if (!j->sink_state) {
        resp_state *s = calloc(1, sizeof *s);
        s->rs_index = s->msg_index = -1;
        s->output = json_array();
        j->sink_state = s;
    }
    return j->sink_state;
}

static void emit(job *j, const char *type, json_t *obj) {
    resp_state *s = rst(j);
    json_t *ev = json_pack("{s:s, s:i}", "type", type, "sequence_number", s->seq++);
    json_object_update(ev, obj);
    json_decref(obj);
    sse_data(&j->out, ev);
}

static const tool_name_map *wire_name(const gen_request *r, const char *rendered) {
    for (int i = 0; i < r->n_tool_names; i++)
        if (!strcmp(r->tool_names[i].rendered, rendered)) return &r->tool_names[i];
    return NULL;
}

static json_t *function_item(job *j, const char *item_id, const char *status, const char *name, const char *call_id, const char *args) {
    const tool_name_map *m = wire_name(j->req, name);
    if (m && m->is_tool_search) {
        json_t *a = json_loads(args, JSON_DECODE_ANY, NULL);
        if (!json_is_object(a)) { json_decref(a); a = json_object(); }
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "id", item_id, "type", "tool_search_call", "status", status, "call_id", call_id,
                         "execution", "client", "arguments", a);
    }
    json_t *it = json_pack("{s:s, s:s, s:s, s:s}", "id", item_id, "type", "function_call", "status", status, "name", m ? m->name : name);
    if (m && m->ns) json_object_set_new(it, "namespace", json_string(m->ns));
    json_object_set_new(it, "call_id", json_string(call_id));
    json_object_set_new(it, "arguments", json_string(args));
    return it;
}

static json_t *usage_json(const gen_result *res) {
    return json_pack("{s:i, s:{s:i, s:i}, s:i, s:{s:i}, s:i}", "input_tokens", res->prompt_tokens, "input_tokens_details", "cached_tokens",
                     res->cached_tokens, "cache_write_tokens", res->prompt_tokens - res->cached_tokens, "output_tokens", res->completion_tokens,
                     "output_tokens_details", "reasoning_tokens", 0, "total_tokens", res->prompt_tokens + res->completion_tokens);
}

static const char *resp_status(const gen_result *res) {
    return res->finish == FINISH_LENGTH ? "incomplete" : res->finish == FINISH_ERROR ? "failed" : "completed";
}

static json_t *response_object(job *j, const char *status, json_t *output, int with_usage) {
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o}", "id", j->id, "object", "response", "created_at", (json_int_t)time(NULL), "status",
                          status, "model", j->req->model, "output", output);
    if (!strcmp(status, "incomplete")) json_object_set_new(r, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    else json_object_set_new(r, "incomplete_details", json_null());
    if (!strcmp(status, "failed"))
        json_object_set_new(r, "error", json_pack("{s:s, s:s}", "code", "server_error", "message", j->res.error[0] ? j->res.error : "generation failed"));
    else json_object_set_new(r, "error", json_null());
    if (with_usage) json_object_set_new(r, "usage", usage_json(&j->res));
    return r;
}

static void resp_begin(job *j) {
    rst(j);
    emit(j, "response.created", json_pack("{s:o}", "response", response_object(j, "in_progress", json_array(), 0)));
    emit(j, "response.in_progress", json_pack("{s:o}", "response", response_object(j, "in_progress", json_array(), 0)));
}

static void close_reasoning(job *j, const char *status) {
    resp_state *s = rst(j);
    if (s->rs_index < 0) return;
    const char *t = s->rs_text.p ? s->rs_text.p : "";
    emit(j, "response.reasoning_summary_text.done", json_pack("{s:s, s:i, s:i, s:s}", "item_id", s->rs_id, "output_index", s->rs_index, "summary_index", 0, "text", t));
    emit(j, "response.reasoning_summary_part.done", json_pack("{s:s, s:i, s:i, s:{s:s, s:s}}", "item_id", s->rs_id, "output_index", s->rs_index,
                                                              "summary_index", 0, "part", "type", "summary_text", "text", t));
    json_t *item = json_pack("{s:s, s:s, s:s, s:[{s:s, s:s}]}", "id", s->rs_id, "type", "reasoning", "status", status, "summary", "type", "summary_text", "text", t);
    json_array_append(s->output, item);
    emit(j, "response.output_item.done", json_pack("{s:i, s:o}", "output_index", s->rs_index, "item", item));
    s->rs_index = -1;
}

static void close_message(job *j, const char *status) {
    resp_state *s = rst(j);
    if (s->msg_index < 0) return;
    const char *t = s->msg_text.p ? s->msg_text.p : "";
    emit(j, "response.output_text.done", json_pack("{s:s, s:i, s:i, s:s}", "item_id", s->msg_id, "output_index", s->msg_index, "content_index", 0, "text", t));
    emit(j, "response.content_part.done", json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[]}}", "item_id", s->msg_id, "output_index", s->msg_index,
                                                    "content_index", 0, "part", "type", "output_text", "text", t, "annotations"));
    json_t *item = json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:s, s:[]}]}", "id", s->msg_id, "type", "message", "status", status, "role", "assistant",
                             "content", "type", "output_text", "text", t, "annotations");
    json_array_append(s->output, item);
    emit(j, "response.output_item.done", json_pack("{s:i, s:o}", "output_index", s->msg_index, "item", item));
    s->msg_index = -1;
}

static void resp_reasoning(job *j, const char *t, size_t n) {
    resp_state *s = rst(j);
    if (!j->req->reasoning_summary) return;
    if (s->rs_index < 0 && !s->rs_text.n) {
        char hex[25];
        random_hex(hex, 24);
        snprintf(s->rs_id, sizeof s->rs_id, "rs_%s", hex);
        s->rs_index = s->next_output++;
        emit(j, "response.output_item.added", json_pack("{s:i, s:{s:s, s:s, s:s, s:[]}}", "output_index", s->rs_index, "item", "id", s->rs_id, "type",
                                                        "reasoning", "status", "in_progress", "summary"));
        emit(j, "response.reasoning_summary_part.added", json_pack("{s:s, s:i, s:i, s:{s:s, s:s}}", "item_id", s->rs_id, "output_index", s->rs_index,
                                                                   "summary_index", 0, "part", "type", "summary_text", "text", ""));
    }
    if (s->rs_index < 0) return;
    sbuf_add(&s->rs_text, t, n);
    emit(j, "response.reasoning_summary_text.delta", json_pack("{s:s, s:i, s:i, s:s%}", "item_id", s->rs_id, "output_index", s->rs_index, "summary_index", 0, "delta", t, n));
}

static void resp_content(job *j, const char *t, size_t n) {
    resp_state *s = rst(j);
    close_reasoning(j, "completed");
    if (s->msg_index < 0) {
        char hex[25];
        random_hex(hex, 24);
        snprintf(s->msg_id, sizeof s->msg_id, "msg_%s", hex);
        s->msg_index = s->next_output++;
        emit(j, "response.output_item.added", json_pack("{s:i, s:{s:s, s:s, s:s, s:s, s:[]}}", "output_index", s->msg_index, "item", "id", s->msg_id, "type",
                                                        "message", "status", "in_progress", "role", "assistant", "content"));
        emit(j, "response.content_part.added", json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[]}}", "item_id", s->msg_id, "output_index", s->msg_index,
                                                         "content_index", 0, "part", "type", "output_text", "text", "", "annotations"));
    }
    sbuf_add(&s->msg_text, t, n);
    emit(j, "response.output_text.delta", json_pack("{s:s, s:i, s:i, s:s%}", "item_id", s->msg_id, "output_index", s->msg_index, "content_index", 0, "delta", t, n));
}

static void resp_tool_start(job *j, int index, const char *id, const char *name) {
    resp_state *s = rst(j);
    if (index < 0 || index >= 64) return;
    close_reasoning(j, "completed");
    close_message(j, "completed");
    char hex[25];
    random_hex(hex, 24);
    snprintf(s->tool_item[index], sizeof s->tool_item[index], "fc_%s", hex);
    s->tool_out[index] = s->next_output++;
    s->tools_streamed = index + 1;
    sbuf_clear(&s->tool_args);
    emit(j, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", s->tool_out[index], "item",
                                                    function_item(j, s->tool_item[index], "in_progress", name, id, "")));
}

static void resp_tool_args(job *j, int index, const char *t, size_t n) {
    resp_state *s = rst(j);
    if (index < 0 || index >= 64) return;
    sbuf_add(&s->tool_args, t, n);
    emit(j, "response.function_call_arguments.delta", json_pack("{s:s, s:i, s:s%}", "item_id", s->tool_item[index], "output_index", s->tool_out[index], "delta", t, n));
}

static void resp_end(job *j) {
    gen_result *res = &j->res;
    const char *status = resp_status(res);
    const char *item_status = res->finish == FINISH_LENGTH || res->finish == FINISH_ERROR ? "incomplete" : "completed";
    if (!j->req->stream) {
        json_t *out = json_array();
        char hex[25];
        if (j->req->reasoning_summary && res->reasoning.n) {
            random_hex(hex, 24);
            json_array_append_new(out, json_pack("{s:s+, s:s, s:s, s:[{s:s, s:s%}]}", "id", "rs_", hex, "type", "reasoning", "status",
                                                 res->saw_think_close ? "completed" : "incomplete", "summary", "type", "summary_text", "text",
                                                 res->reasoning.p, res->reasoning.n));
        }
        if (res->content.n) {
            random_hex(hex, 24);
            json_array_append_new(out, json_pack("{s:s+, s:s, s:s, s:s, s:[{s:s, s:s%, s:[]}]}", "id", "msg_", hex, "type", "message", "status",
                                                 item_status, "role", "assistant", "content", "type", "output_text", "text", res->content.p,
                                                 res->content.n, "annotations"));
        }
        for (int i = 0; i < res->n_calls; i++) {
            char id[32];
            random_hex(hex, 24);
            snprintf(id, sizeof id, "fc_%s", hex);
            json_array_append_new(out, function_item(j, id, item_status, res->calls[i].name, res->calls[i].id, res->calls[i].arguments));
        }
        json_t *body = response_object(j, status, out, 1);
        j->body = json_body_line(body);
        return;
    }
    resp_state *s = rst(j);
    close_reasoning(j, res->saw_think_close ? "completed" : "incomplete");
    close_message(j, item_status);
    /* the last streamed call is closed here; earlier ones were closed at their end */
    for (int i = 0; i < res->n_calls && i < 64; i++) {
        if (i >= s->tools_streamed) {
            resp_tool_start(j, i, res->calls[i].id, res->calls[i].name);
            resp_tool_args(j, i, res->calls[i].arguments, strlen(res->calls[i].arguments));
        }
        emit(j, "response.function_call_arguments.done", json_pack("{s:s, s:i, s:s, s:s}", "item_id", s->tool_item[i], "output_index", s->tool_out[i],
                                                                   "name", res->calls[i].name, "arguments", res->calls[i].arguments));
        json_t *item = function_item(j, s->tool_item[i], item_status, res->calls[i].name, res->calls[i].id, res->calls[i].arguments);
        json_array_append(s->output, item);
        emit(j, "response.output_item.done", json_pack("{s:i, s:o}", "output_index", s->tool_out[i], "item", item));
    }
    const char *ev = res->finish == FINISH_LENGTH ? "response.incomplete" : res->finish == FINISH_ERROR ? "response.failed" : "response.completed";
    emit(j, ev, json_pack("{s:o}", "response", response_object(j, status, json_incref(s->output), 1)));
    json_decref(s->output);
    s->output = NULL;
    sbuf_free(&s->rs_text);
    sbuf_free(&s->msg_text);
    sbuf_free(&s->tool_args);
}

const api_sink responses_sink = {
    .begin = resp_begin,
    .reasoning = resp_reasoning,
    .content = resp_content,
    .tool_start = resp_tool_start,
    .tool_args = resp_tool_args,
    .end = resp_end,
    .stream_error = openai_stream_error,
    .error_body = openai_error_body,
};
