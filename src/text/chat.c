/* chat.c: the official DeepSeek V4 prompt renderer (serving.md §2.1-2.6, 2.9).
 *
 * Mirrors DeepSeek's reference encoder step by step, because byte-exactness
 * with it is the point: tool messages are merged into user turns, tool
 * results re-ordered by call order, old reasoning dropped, then every message
 * rendered with the transition that follows it. Where the reference relies on
 * Python behaviour (truthiness, str() of a non-string, which inputs raise),
 * this file imitates it; tests/fixtures/chat/ pins those corners.
 */
#include "text/chat.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/dsml.h"
#include "text/pyjson.h"

const char CHAT_REASONING_EFFORT_MAX[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the "
    "root cause, rigorously stress-testing your logic against all potential paths, edge cases, and "
    "adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

static const char TOOLS_HEAD[] =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "
    "\"<" CHAT_DSML "tool_calls>\" block like the following:\n\n"
    "<" CHAT_DSML "tool_calls>\n"
    "<" CHAT_DSML "invoke name=\"$TOOL_NAME\">\n"
    "<" CHAT_DSML "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" CHAT_DSML
    "parameter>\n"
    "...\n"
    "</" CHAT_DSML "invoke>\n"
    "<" CHAT_DSML "invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</" CHAT_DSML "invoke>\n"
    "</" CHAT_DSML "tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
    "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
    "<think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
static const char TOOLS_TAIL[] =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
static const char RESPONSE_FORMAT_HEAD[] =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

static const struct {
    const char *name, *token;
} TASKS[] = {
    {"action", "<\xef\xbd\x9c" "action\xef\xbd\x9c>"},
    {"query", "<\xef\xbd\x9cquery\xef\xbd\x9c>"},
    {"authority", "<\xef\xbd\x9c" "authority\xef\xbd\x9c>"},
    {"domain", "<\xef\xbd\x9c" "domain\xef\xbd\x9c>"},
    {"title", "<\xef\xbd\x9ctitle\xef\xbd\x9c>"},
    {"read_url", "<\xef\xbd\x9cread_url\xef\xbd\x9c>"},
};

/* ---- modes ---- */

int chat_mode_from_name(const char *name, chat_mode *out) {
    if (!name) return -1;
    if (!strcmp(name, "chat")) *out = CHAT_MODE_CHAT;
    else if (!strcmp(name, "thinking")) *out = CHAT_MODE_THINKING;
    else if (!strcmp(name, "max")) *out = CHAT_MODE_MAX;
    else return -1;
    return 0;
}

const char *chat_mode_name(chat_mode mode) {
    switch (mode) {
    case CHAT_MODE_CHAT: return "chat";
    case CHAT_MODE_THINKING: return "thinking";
    case CHAT_MODE_MAX: return "max";
    }
    return "chat";
}

chat_mode chat_mode_for_context(chat_mode requested, long long context_tokens) {
    if (requested == CHAT_MODE_MAX && context_tokens < CHAT_THINK_MAX_MIN_CONTEXT) return CHAT_MODE_THINKING;
    return requested;
}

int chat_mode_from_effort(const char *effort, chat_mode *mode) {
    if (!effort) return 0;
    if (!strcmp(effort, "max")) *mode = CHAT_MODE_MAX;
    else if (!strcmp(effort, "xhigh") || !strcmp(effort, "high") || !strcmp(effort, "medium") ||
             !strcmp(effort, "low") || !strcmp(effort, "minimal"))
        *mode = CHAT_MODE_THINKING;
    else if (!strcmp(effort, "none")) *mode = CHAT_MODE_CHAT;
    else return -1;
    return 0;
}

/* ---- small helpers ---- */

static void add_string_value(strbuf *b, const json_t *s) { strbuf_add(b, json_string_value(s), json_string_length(s)); }

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Python truthiness of a JSON value. */
static int truthy(const json_t *v) {
    if (!v) return 0;
    switch (json_typeof(v)) {
    case JSON_NULL:
    case JSON_FALSE: return 0;
    case JSON_TRUE: return 1;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_STRING: return json_string_length(v) != 0;
    case JSON_ARRAY: return json_array_size(v) != 0;
    case JSON_OBJECT: return json_object_size(v) != 0;
    }
    return 0;
}

static int is_str(const json_t *v, const char *s) { return json_is_string(v) && !strcmp(json_string_value(v), s); }
static void py_repr(strbuf *b, const json_t *v);

/* Python repr() of a str. */
static void py_repr_string(strbuf *b, const char *s, size_t n) {
    char q = (memchr(s, '\'', n) && !memchr(s, '"', n)) ? '"' : '\'';
    strbuf_add(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[8];
        if (c == '\\') strbuf_str(b, "\\\\");
        else if (c == (unsigned char)q) { e[0] = '\\'; e[1] = q; strbuf_add(b, e, 2); }
        else if (c == '\n') strbuf_str(b, "\\n");
        else if (c == '\r') strbuf_str(b, "\\r");
        else if (c == '\t') strbuf_str(b, "\\t");
        else if (c < 0x20 || c == 0x7f) { snprintf(e, sizeof e, "\\x%02x", c); strbuf_str(b, e); }
        else strbuf_add(b, (const char *)&c, 1);
    }
    strbuf_add(b, &q, 1);
}

/* Python str() of a JSON value as the reference encoder would produce it
 * when it formats a non-string into a template. */
static void py_str(strbuf *b, const json_t *v) {
    char num[64];
    const json_t *raw = pyjson_raw(v);
    if (raw) {
        const char *t = json_string_value(raw);
        if (!strcmp(t, "NaN")) strbuf_str(b, "nan");
        else if (!strcmp(t, "Infinity")) strbuf_str(b, "inf");
        else if (!strcmp(t, "-Infinity")) strbuf_str(b, "-inf");
        else add_string_value(b, raw);
        return;
    }
    switch (json_typeof(v)) {
    case JSON_STRING: add_string_value(b, v); return;
    case JSON_NULL: strbuf_str(b, "None"); return;
    case JSON_TRUE: strbuf_str(b, "True"); return;
    case JSON_FALSE: strbuf_str(b, "False"); return;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        strbuf_str(b, num);
        return;
    case JSON_REAL:
        pyjson_format_double(json_real_value(v), num, sizeof num);
        strbuf_str(b, num);
        return;
    case JSON_ARRAY:
        strbuf_str(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) strbuf_str(b, ", ");
            py_repr(b, json_array_get(v, i));
        }
        strbuf_str(b, "]");
        return;
    case JSON_OBJECT: {
        strbuf_str(b, "{");
        int first = 1;
        const char *k;
        size_t kl;
        json_t *x;
        json_object_keylen_foreach((json_t *)v, k, kl, x) {
            if (!first) strbuf_str(b, ", ");
            first = 0;
            py_repr_string(b, k, kl);
            strbuf_str(b, ": ");
            py_repr(b, x);
        }
        strbuf_str(b, "}");
        return;
    }
    }
}

static void py_repr(strbuf *b, const json_t *v) {
    if (json_is_string(v)) py_repr_string(b, json_string_value(v), json_string_length(v));
    else py_str(b, v);
}

static const char *role_of(const json_t *m) {
    const json_t *r = json_object_get(m, "role");
    return json_is_string(r) ? json_string_value(r) : NULL;
}
static int role_is(const json_t *m, const char *role) {
    const char *r = role_of(m);
    return r && !strcmp(r, role);
}
/* msg.get(key) is not None */
static int has_non_null(const json_t *m, const char *key) {
    const json_t *v = json_object_get(m, key);
    return v && !json_is_null(v);
}

/* ---- preprocessing (serving.md §2.3) ---- */

/* Tool messages become tool_result blocks of user turns; consecutive user
 * messages and tool results fuse into one turn. Returns a new array. */
static json_t *merge_tool_messages(const json_t *msgs, size_t from, size_t to, char *err, size_t errlen) {
    json_t *out = json_array();
    for (size_t i = from; i < to; i++) {
        const json_t *m = json_array_get(msgs, i);
        if (!json_is_object(m)) {
            fail(err, errlen, "message %zu is not an object", i);
            json_decref(out);
            return NULL;
        }
        size_t nout = json_array_size(out);
        json_t *last = nout ? json_array_get(out, nout - 1) : NULL;
        json_t *last_blocks = last && role_is(last, "user") ? json_object_get(last, "content_blocks") : NULL;
        if (role_is(m, "tool")) {
            json_t *blk = json_object();
            json_t *id = json_object_get(m, "tool_call_id");
            json_t *content = json_object_get(m, "content");
            json_object_set_new(blk, "type", json_string("tool_result"));
            json_object_set_new(blk, "tool_use_id", id ? json_deep_copy(id) : json_string(""));
            json_object_set_new(blk, "content", content ? json_deep_copy(content) : json_string(""));
            if (last_blocks) {
                json_array_append_new(last_blocks, blk);
            } else {
                json_t *u = json_object();
                json_object_set_new(u, "role", json_string("user"));
                json_t *blocks = json_array();
                json_array_append_new(blocks, blk);
                json_object_set_new(u, "content_blocks", blocks);
                json_array_append_new(out, u);
            }
        } else if (role_is(m, "user")) {
            json_t *content = json_object_get(m, "content");
            json_t *blk = json_object();
            json_object_set_new(blk, "type", json_string("text"));
            json_object_set_new(blk, "text", content ? json_deep_copy(content) : json_string(""));
            if (last_blocks && !has_non_null(last, "task")) {
                json_array_append_new(last_blocks, blk);
            } else {
                json_t *u = json_object();
                json_object_set_new(u, "role", json_string("user"));
                json_object_set_new(u, "content", content ? json_deep_copy(content) : json_string(""));
                json_t *blocks = json_array();
                json_array_append_new(blocks, blk);
                json_object_set_new(u, "content_blocks", blocks);
                static const char *keep[] = {"task", "wo_eos", "mask"};
                for (size_t k = 0; k < 3; k++) {
                    json_t *v = json_object_get(m, keep[k]);
                    if (v) json_object_set_new(u, keep[k], json_deep_copy(v));
                }
                json_array_append_new(out, u);
            }
        } else {
            json_array_append_new(out, json_deep_copy(m));
        }
    }
    return out;
}

/* A tool call's id: "id", else "function"."id"; NULL when it has none
 * (Python-falsy ids count as none). */
static const json_t *call_id(const json_t *tc) {
    if (!json_is_object(tc)) return NULL;
    const json_t *tid = json_object_get(tc, "id");
    if (!truthy(tid)) {
        const json_t *fn = json_object_get(tc, "function");
        tid = json_is_object(fn) ? json_object_get(fn, "id") : NULL;
    }
    return truthy(tid) ? tid : NULL;
}

/* Position of a tool_use_id among the latest assistant tool calls (the last
 * matching call, as a Python dict rebuilt in order would keep), 0 if unknown. */
static long call_position(const json_t *calls, const json_t *id) {
    long pos = 0;
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *tid = call_id(json_array_get(calls, i));
        if (tid && id && json_equal((json_t *)tid, (json_t *)id)) pos = (long)i;
    }
    return pos;
}

static int calls_have_ids(const json_t *calls) {
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *tid = call_id(json_array_get(calls, i));
        if (tid) return 1;
    }
    return 0;
}

/* Re-orders tool_result blocks by the call order of the latest assistant
 * message with tool calls (stable; text blocks stay where they are). */
static int sort_tool_results(json_t *msgs, char *err, size_t errlen) {
    const json_t *calls = NULL;
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        if (role_is(m, "assistant") && truthy(json_object_get(m, "tool_calls"))) {
            const json_t *tc = json_object_get(m, "tool_calls");
            if (!json_is_array(tc)) return fail(err, errlen, "tool_calls of message %zu is not a list", i);
            for (size_t k = 0; k < json_array_size(tc); k++)
                if (!json_is_object(json_array_get(tc, k)))
                    return fail(err, errlen, "tool call %zu of message %zu is not an object", k, i);
            calls = tc;
        } else if (role_is(m, "user") && truthy(json_object_get(m, "content_blocks"))) {
            json_t *blocks = json_object_get(m, "content_blocks");
            size_t nb = json_array_size(blocks), nt = 0;
            for (size_t k = 0; k < nb; k++)
                if (is_str(json_object_get(json_array_get(blocks, k), "type"), "tool_result")) nt++;
            if (nt < 2 || !calls || !calls_have_ids(calls)) continue;
            json_t **tool = calloc(nt, sizeof *tool);
            long *key = calloc(nt, sizeof *key);
            if (!tool || !key) { free(tool); free(key); return fail(err, errlen, "out of memory"); }
            size_t t = 0;
            for (size_t k = 0; k < nb; k++) {
                json_t *b = json_array_get(blocks, k);
                if (is_str(json_object_get(b, "type"), "tool_result")) {
                    tool[t] = json_incref(b);
                    key[t] = call_position(calls, json_object_get(b, "tool_use_id"));
                    t++;
                }
            }
            for (size_t a = 1; a < nt; a++) { /* stable insertion sort */
                json_t *tb = tool[a];
                long tk = key[a];
                size_t j = a;
                while (j > 0 && key[j - 1] > tk) { tool[j] = tool[j - 1]; key[j] = key[j - 1]; j--; }
                tool[j] = tb;
                key[j] = tk;
            }
            t = 0;
            for (size_t k = 0; k < nb; k++)
                if (is_str(json_object_get(json_array_get(blocks, k), "type"), "tool_result"))
                    json_array_set(blocks, k, tool[t++]);
            for (size_t k = 0; k < nt; k++) json_decref(tool[k]);
            free(tool);
            free(key);
        }
    }
    return 0;
}

static long last_user_index(const json_t *msgs) {
    for (size_t i = json_array_size(msgs); i-- > 0;) {
        const json_t *m = json_array_get(msgs, i);
        if (role_is(m, "user") || role_is(m, "developer")) return (long)i;
    }
    return -1;
}

/* Drops reasoning of assistant turns before the last user/developer message
 * and developer (and unknown-role) messages there. Returns a new array. */
static json_t *drop_thinking_messages(const json_t *msgs) {
    long L = last_user_index(msgs);
    json_t *out = json_array();
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        const char *r = role_of(m);
        int keep_role = r && (!strcmp(r, "user") || !strcmp(r, "system") || !strcmp(r, "tool") ||
                              !strcmp(r, "latest_reminder") || !strcmp(r, "direct_search_results"));
        if (keep_role || (long)i >= L) {
            json_array_append(out, m);
        } else if (r && !strcmp(r, "assistant")) {
            json_t *c = json_copy(m);
            json_object_del(c, "reasoning_content");
            json_array_append_new(out, c);
        }
    }
    return out;
}

/* ---- rendering (serving.md §2.4) ---- */

static int render_tools(strbuf *b, const json_t *tools, char *err, size_t errlen) {
    if (!json_is_array(tools)) return fail(err, errlen, "tools must be a list");
    strbuf_str(b, TOOLS_HEAD);
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i);
        const json_t *fn = json_is_object(t) ? json_object_get(t, "function") : NULL;
        if (!fn) return fail(err, errlen, "tool %zu has no \"function\"", i);
        if (i) strbuf_str(b, "\n");
        pyjson_dump_to(b, fn);
    }
    strbuf_str(b, TOOLS_TAIL);
    return 0;
}

static void render_response_format(strbuf *b, const json_t *rf) {
    strbuf_str(b, RESPONSE_FORMAT_HEAD);
    pyjson_dump_to(b, rf);
}

/* "<tool_result>" + content + "</tool_result>", content as the encoder sees it. */
static int render_tool_result(strbuf *b, const json_t *blk, char *err, size_t errlen) {
    const json_t *content = json_object_get(blk, "content");
    strbuf_str(b, "<tool_result>");
    if (!content) {
    } else if (json_is_array(content)) {
        for (size_t i = 0; i < json_array_size(content); i++) {
            const json_t *part = json_array_get(content, i);
            if (!json_is_object(part)) return fail(err, errlen, "tool content part %zu is not an object", i);
            if (i) strbuf_str(b, "\n\n");
            const json_t *type = json_object_get(part, "type");
            if (is_str(type, "text")) {
                const json_t *text = json_object_get(part, "text");
                if (!text) continue;
                if (!json_is_string(text)) return fail(err, errlen, "tool content text part is not a string");
                add_string_value(b, text);
            } else {
                strbuf_str(b, "[Unsupported ");
                if (type) py_str(b, type);
                else strbuf_str(b, "None");
                strbuf_str(b, "]");
            }
        }
    } else {
        py_str(b, content);
    }
    strbuf_str(b, "</tool_result>");
    return 0;
}

static int render_tool_calls(strbuf *b, const json_t *calls, char *err, size_t errlen) {
    if (!json_is_array(calls)) return fail(err, errlen, "tool_calls must be a list");
    strbuf_str(b, "\n\n<" CHAT_DSML "tool_calls>\n");
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *tc = json_array_get(calls, i);
        const json_t *fn = json_is_object(tc) ? json_object_get(tc, "function") : NULL;
        const json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
        const json_t *args = json_is_object(fn) ? json_object_get(fn, "arguments") : NULL;
        if (!name || !args) return fail(err, errlen, "tool call %zu needs function.name and function.arguments", i);
        strbuf nm = {0};
        py_str(&nm, name);
        char *inv;
        if (json_is_string(args)) {
            inv = dsml_encode_invoke(strbuf_text(&nm), json_string_value(args), err, errlen);
        } else {
            /* json.loads fails on a non-string: the whole value becomes one
             * non-string parameter named "arguments". */
            strbuf t = {0};
            strbuf_str(&t, "<" CHAT_DSML "invoke name=\"");
            strbuf_str(&t, strbuf_text(&nm));
            strbuf_str(&t, "\">\n<" CHAT_DSML "parameter name=\"arguments\" string=\"false\">");
            pyjson_dump_to(&t, args);
            strbuf_str(&t, "</" CHAT_DSML "parameter>\n</" CHAT_DSML "invoke>");
            inv = strbuf_take(&t);
            if (!inv) fail(err, errlen, "out of memory");
        }
        strbuf_free(&nm);
        if (!inv) return -1;
        if (i) strbuf_str(b, "\n");
        strbuf_str(b, inv);
        free(inv);
    }
    strbuf_str(b, "\n</" CHAT_DSML "tool_calls>");
    return 0;
}

/* The tools and response-format sections a system or developer message
 * carries after its content. */
static int render_system_extras(strbuf *b, const json_t *tools, const json_t *rf, char *err, size_t errlen) {
    if (truthy(tools)) {
        strbuf_str(b, "\n\n");
        if (render_tools(b, tools, err, errlen)) return -1;
    }
    if (truthy(rf)) {
        strbuf_str(b, "\n\n");
        render_response_format(b, rf);
    }
    return 0;
}

static int render_message(strbuf *b, size_t index, const json_t *msgs, int thinking, int drop, int effort_max,
                          char *err, size_t errlen) {
    size_t n = json_array_size(msgs);
    const json_t *msg = json_array_get(msgs, index);
    long L = last_user_index(msgs);
    const char *role = role_of(msg);
    const json_t *content = json_object_get(msg, "content");
    const json_t *tools = json_object_get(msg, "tools");
    const json_t *rf = json_object_get(msg, "response_format");

    if (index == 0 && thinking && effort_max) strbuf_str(b, CHAT_REASONING_EFFORT_MAX);

    if (role && !strcmp(role, "system")) {
        if (truthy(content)) py_str(b, content);
        if (render_system_extras(b, tools, rf, err, errlen)) return -1;
    } else if (role && !strcmp(role, "developer")) {
        if (!truthy(content)) return fail(err, errlen, "Invalid message for role `developer`: empty content");
        if (!json_is_string(content)) return fail(err, errlen, "developer content must be a string");
        strbuf_str(b, CHAT_USER);
        add_string_value(b, content);
        if (render_system_extras(b, tools, rf, err, errlen)) return -1;
    } else if (role && !strcmp(role, "user")) {
        strbuf_str(b, CHAT_USER);
        const json_t *blocks = json_object_get(msg, "content_blocks");
        if (truthy(blocks)) {
            if (!json_is_array(blocks)) return fail(err, errlen, "content_blocks must be a list");
            for (size_t i = 0; i < json_array_size(blocks); i++) {
                const json_t *blk = json_array_get(blocks, i);
                const json_t *type = json_object_get(blk, "type");
                if (i) strbuf_str(b, "\n\n");
                if (is_str(type, "text")) {
                    const json_t *text = json_object_get(blk, "text");
                    if (!text) continue;
                    if (!json_is_string(text))
                        return fail(err, errlen, "user content must be a string (message %zu)", index);
                    add_string_value(b, text);
                } else if (is_str(type, "tool_result")) {
                    if (render_tool_result(b, blk, err, errlen)) return -1;
                } else {
                    strbuf_str(b, "[Unsupported ");
                    if (type) py_str(b, type);
                    else strbuf_str(b, "None");
                    strbuf_str(b, "]");
                }
            }
        } else if (truthy(content)) {
            py_str(b, content);
        }
    } else if (role && !strcmp(role, "latest_reminder")) {
        strbuf_str(b, CHAT_LATEST_REMINDER);
        if (content) py_str(b, content);
        else strbuf_str(b, "None");
    } else if (role && !strcmp(role, "tool")) {
        return fail(err, errlen, "tool messages must be merged into user turns");
    } else if (role && !strcmp(role, "assistant")) {
        const json_t *rc = json_object_get(msg, "reasoning_content");
        const json_t *calls = json_object_get(msg, "tool_calls");
        int prev_has_task = index >= 1 && has_non_null(json_array_get(msgs, index - 1), "task");
        if (thinking && !prev_has_task && (!drop || (long)index > L)) {
            if (truthy(rc)) py_str(b, rc);
            strbuf_str(b, CHAT_THINK_CLOSE);
        }
        if (truthy(content)) py_str(b, content);
        if (truthy(calls) && render_tool_calls(b, calls, err, errlen)) return -1;
        if (!truthy(json_object_get(msg, "wo_eos"))) strbuf_str(b, CHAT_EOS);
    } else {
        strbuf r = {0};
        py_str(&r, json_object_get(msg, "role") ? json_object_get(msg, "role") : json_null());
        fail(err, errlen, "Unknown role: %s", strbuf_text(&r));
        strbuf_free(&r);
        return -1;
    }

    /* transition to what follows */
    if (index + 1 < n) {
        const json_t *next = json_array_get(msgs, index + 1);
        if (!role_is(next, "assistant") && !role_is(next, "latest_reminder")) return 0;
    }
    const json_t *task = json_object_get(msg, "task");
    if (task && !json_is_null(task)) {
        const char *tok = NULL, *tname = json_is_string(task) ? json_string_value(task) : NULL;
        for (size_t k = 0; tname && k < sizeof TASKS / sizeof TASKS[0]; k++)
            if (!strcmp(tname, TASKS[k].name)) tok = TASKS[k].token;
        if (!tok) {
            strbuf t = {0};
            py_str(&t, task);
            fail(err, errlen, "Invalid task: '%s'", strbuf_text(&t));
            strbuf_free(&t);
            return -1;
        }
        if (strcmp(tname, "action")) {
            strbuf_str(b, tok);
        } else {
            strbuf_str(b, CHAT_ASSISTANT);
            strbuf_str(b, thinking ? CHAT_THINK_OPEN : CHAT_THINK_CLOSE);
            strbuf_str(b, tok);
        }
    } else if (role_is(msg, "user") || role_is(msg, "developer")) {
        strbuf_str(b, CHAT_ASSISTANT);
        if (thinking && (!drop || (long)index >= L)) strbuf_str(b, CHAT_THINK_OPEN);
        else strbuf_str(b, CHAT_THINK_CLOSE);
    }
    return 0;
}

static json_t *concat(const json_t *a, const json_t *b) {
    json_t *out = json_array();
    json_array_extend(out, (json_t *)a);
    json_array_extend(out, (json_t *)b);
    return out;
}

char *chat_render(const json_t *input, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!json_is_object(input)) { fail(err, errlen, "input must be a JSON object"); return NULL; }
    const json_t *messages = json_object_get(input, "messages");
    if (!json_is_array(messages)) { fail(err, errlen, "\"messages\" must be a list"); return NULL; }
    const json_t *tm = json_object_get(input, "thinking_mode");
    chat_mode mode;
    if (!json_is_string(tm) || chat_mode_from_name(json_string_value(tm), &mode)) {
        fail(err, errlen, "Invalid thinking_mode (chat, thinking or max)");
        return NULL;
    }
    int effort_max = mode == CHAT_MODE_MAX;
    const json_t *eff = json_object_get(input, "reasoning_effort");
    int bad_effort = 0;
    if (eff && !json_is_null(eff)) {
        if (is_str(eff, "max")) effort_max = 1;
        else if (!is_str(eff, "high")) bad_effort = 1;
    }
    int thinking = mode != CHAT_MODE_CHAT;
    const json_t *dt = json_object_get(input, "drop_thinking");
    int drop = dt ? truthy(dt) : 1;
    const json_t *cx = json_object_get(input, "context");
    size_t nmsg = json_array_size(messages), nctx = 0;
    if (cx && !json_is_null(cx)) {
        if (!json_is_integer(cx) || json_integer_value(cx) < 0) {
            fail(err, errlen, "\"context\" must be a non-negative integer");
            return NULL;
        }
        nctx = (size_t)json_integer_value(cx);
        if (nctx > nmsg) nctx = nmsg;
    }

    json_t *msgs = json_deep_copy(messages);
    const json_t *tools = json_object_get(input, "tools");
    if (truthy(tools)) {
        json_t *m0 = json_array_get(msgs, 0);
        if (!m0 || !(role_is(m0, "system") || role_is(m0, "developer"))) {
            json_decref(msgs);
            fail(err, errlen, "top-level tools need messages[0] to be a system or developer message");
            return NULL;
        }
        json_object_set_new(m0, "tools", json_deep_copy(tools));
    }

    char *result = NULL;
    json_t *ctx = NULL, *rest = NULL, *full = NULL, *dropped = NULL, *ctx_dropped = NULL;
    strbuf b = {0};
    ctx = merge_tool_messages(msgs, 0, nctx, err, errlen);
    if (!ctx) goto done;
    rest = merge_tool_messages(msgs, nctx, nmsg, err, errlen);
    if (!rest) goto done;
    full = concat(ctx, rest);
    if (sort_tool_results(full, err, errlen)) goto done;

    int eff_drop = drop;
    for (size_t i = 0; i < json_array_size(full); i++)
        if (truthy(json_object_get(json_array_get(full, i), "tools"))) eff_drop = 0;

    size_t first, count;
    const json_t *render_list = full;
    if (thinking && eff_drop) {
        dropped = drop_thinking_messages(full);
        ctx_dropped = drop_thinking_messages(ctx);
        count = json_array_size(dropped) - json_array_size(ctx_dropped);
        first = json_array_size(dropped) - count;
        render_list = dropped;
    } else {
        count = json_array_size(rest);
        first = json_array_size(ctx);
    }

    if (json_array_size(ctx) == 0) strbuf_str(&b, CHAT_BOS);
    if (count > 0 && bad_effort) {
        fail(err, errlen, "Invalid reasoning effort (null, high or max)");
        goto done;
    }
    for (size_t i = 0; i < count; i++)
        if (render_message(&b, first + i, render_list, thinking, eff_drop, effort_max, err, errlen)) goto done;
    result = strbuf_take(&b);
    if (!result) fail(err, errlen, "out of memory");
done:
    strbuf_free(&b);
    json_decref(msgs);
    json_decref(ctx);
    json_decref(rest);
    json_decref(full);
    json_decref(dropped);
    json_decref(ctx_dropped);
    return result;
}
