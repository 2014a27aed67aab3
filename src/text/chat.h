/* chat.h: DeepSeek V4's official chat prompt encoding (serving.md §2) and the
 * parsing of generated text back into an assistant message.
 *
 * The renderer reproduces DeepSeek's reference encoder (encoding_dsv4.py)
 * byte for byte, including its surprising corners (tests/fixtures/chat/
 * README.md), because that is the text the model was trained on. The parser
 * comes in two strengths: the official strict one (rejects anything off
 * grammar) and a tolerant one for servers that must always return something.
 * The incremental (streaming) parser and the DSML helpers live in dsml.h.
 */
#ifndef MINKE_TEXT_CHAT_H
#define MINKE_TEXT_CHAT_H

#include <stddef.h>
#include <jansson.h>

/* Special strings, byte-exact (U+FF5C '｜' and U+2581 '▁', never ASCII). */
#define CHAT_BOS             "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define CHAT_EOS             "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define CHAT_USER            "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define CHAT_ASSISTANT       "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define CHAT_LATEST_REMINDER "<\xef\xbd\x9clatest_reminder\xef\xbd\x9c>"
#define CHAT_THINK_OPEN      "<think>"
#define CHAT_THINK_CLOSE     "</think>"
#define CHAT_DSML            "\xef\xbd\x9c" "DSML\xef\xbd\x9c"
/* "\n\n<｜DSML｜tool_calls>": what starts a tool-call block in generated text. */
#define CHAT_TOOL_CALLS_START "\n\n<" CHAT_DSML "tool_calls>"
#define CHAT_TOOL_CALLS_END   "</" CHAT_DSML "tool_calls>"

/* The Think-Max prefix put right after BOS (thinking mode, effort "max"). */
extern const char CHAT_REASONING_EFFORT_MAX[];

/* Think Max is only used with a context window of at least this many tokens
 * (384 Ki, model card; ds4 enforces it); below, "max" falls back to "thinking". */
#define CHAT_THINK_MAX_MIN_CONTEXT 393216

typedef enum chat_mode {
    CHAT_MODE_CHAT = 0,     /* non-thinking: prompt ends <｜Assistant｜></think> */
    CHAT_MODE_THINKING = 1, /* Think High: prompt ends <｜Assistant｜><think> */
    CHAT_MODE_MAX = 2,      /* Think Max: thinking plus the effort prefix */
} chat_mode;

/* "chat" | "thinking" | "max" -> mode; returns 0, or -1 for another name. */
int chat_mode_from_name(const char *name, chat_mode *out);
const char *chat_mode_name(chat_mode mode);
/* Applies the context-window rule: MAX with context_tokens < 393216 -> THINKING. */
chat_mode chat_mode_for_context(chat_mode requested, long long context_tokens);
/* API reasoning_effort names (ds4 mapping, serving.md §2.5): "max" -> MAX;
 * "xhigh"/"high"/"medium"/"low"/"minimal" -> THINKING; "none" -> CHAT.
 * NULL leaves *mode unchanged. Returns 0, or -1 for an unknown name. */
int chat_mode_from_effort(const char *effort, chat_mode *mode);
/* Whether the mode generates reasoning first (THINKING or MAX). */
static inline int chat_mode_thinks(chat_mode m) { return m != CHAT_MODE_CHAT; }

/* Render one conversation to prompt text. `input` is an object in the format
 * of tests/fixtures/chat/cases.jsonl:
 *   {"messages": [...], "tools": [...]|null, "thinking_mode": "chat"|"thinking"|"max",
 *    "reasoning_effort": null|"high"|"max", "drop_thinking": bool, "context": N}
 * (only "messages" and "thinking_mode" are required). Top-level "tools" are
 * attached to messages[0], which must then be a system/developer message.
 * Returns malloc'd UTF-8 text, or NULL with err set when the official encoder
 * would reject the input (or the input is not of that shape).
 *
 * Numbers in tool schemas and tool-call arguments are re-serialized like
 * Python's json.dumps; to be byte-exact for numbers jansson cannot hold (huge
 * integers, NaN/Infinity) parse request JSON with chat_json_loads (pyjson.h). */
char *chat_render(const json_t *input, char *err, size_t errlen);

/* Parse a completion (the generated text after the prompt, including the final
 * EOS text when generation stopped on EOS) into
 *   {"role": "assistant", "content": str, "reasoning_content": str,
 *    "tool_calls": [{"type": "function", "function": {"name": str, "arguments": str}}]}
 * exactly like the official parser (strict): NULL with err set when the
 * official code rejects it. thinking_mode: "chat", or "thinking"/"max". */
json_t *chat_parse(const char *completion, size_t len, const char *thinking_mode, char *err, size_t errlen);

/* Tolerant parse for servers (ds4-like, serving.md §2.7): never fails. A
 * trailing EOS is optional. Tries the strict parse first; otherwise accepts
 * drifted DSML (missing blank line, "<DSML｜" with a missing bar, whitespace
 * between tags, missing string attribute, entity-encoded values), and if the
 * tool block is still unusable returns all text as content with no tool calls.
 * In thinking mode a completion without "</think>" is all reasoning (it was
 * cut off while thinking). *strict_ok (may be NULL) says whether the strict
 * parse accepted it. Argument strings are in the official format. */
json_t *chat_parse_tolerant(const char *completion, size_t len, const char *thinking_mode, int *strict_ok);

#endif
