/* dsml.h: incremental parsing of generated text (reasoning, content, DSML
 * tool calls) for streaming servers, and the DSML structure tracker that
 * tells the sampler when to force greedy decoding (serving.md §2.6, §3.3).
 *
 * Feed the detokenized text pieces as they are generated; the stream calls
 * back with events in order. Concatenating the deltas of a well-formed
 * completion gives exactly what chat_parse returns: the reasoning, the
 * content, and per tool call its name and the official argument string
 * ({"k": "v", "n": [1, 2]}), streamed while the model writes it.
 */
#ifndef MINKE_TEXT_DSML_H
#define MINKE_TEXT_DSML_H

#include <stddef.h>
#include <jansson.h>

typedef enum chat_event_kind {
    CHAT_EV_REASONING = 0, /* text: reasoning delta */
    CHAT_EV_CONTENT,       /* text: visible content delta */
    CHAT_EV_TOOL_START,    /* tool_index; text: the tool name (complete) */
    CHAT_EV_TOOL_ARGS,     /* tool_index; text: delta of the arguments JSON string */
    CHAT_EV_TOOL_END,      /* tool_index; the arguments string is complete */
} chat_event_kind;

typedef struct chat_event {
    chat_event_kind kind;
    int tool_index;   /* 0-based call number for TOOL_* events, else -1 */
    const char *text; /* valid during the callback only; not NUL-terminated */
    size_t len;
} chat_event;

typedef void (*chat_event_fn)(void *user, const chat_event *ev);

typedef struct chat_stream chat_stream;

/* thinking_mode: "chat" (the completion starts with content) or "thinking"/
 * "max" (it starts with reasoning, the prompt ended with <think>). fn may be
 * NULL (then only the final result and the tracker are of use). */
chat_stream *chat_stream_new(const char *thinking_mode, chat_event_fn fn, void *user);
void chat_stream_free(chat_stream *s);

/* Feed the next piece of generated text (any split, even inside a UTF-8
 * character or a marker). Text after the EOS string is ignored. Text that
 * could still turn out to be a marker is held back until it is decided. */
void chat_stream_feed(chat_stream *s, const char *piece, size_t len);

/* End of generation: flushes held-back text as events, then returns the final
 * message (as chat_parse_tolerant on everything fed; *strict_ok may be NULL).
 * The caller owns the result. Call once. */
json_t *chat_stream_finish(chat_stream *s, int *strict_ok);

/* Whether the model is now writing DSML structure (tags, attribute headers,
 * whitespace between tags, JSON syntax of a string="false" value, or a partial
 * closing tag "</..." inside a value): the next token should be sampled
 * greedily (serving.md §3.3). Payload text (string values, JSON strings) and
 * everything outside a tool block return 0. */
int dsml_in_structure(const chat_stream *s);
/* Whether a tool-call block has started (and not yet closed). */
int chat_stream_in_tool_block(const chat_stream *s);
/* Number of tool calls started so far. */
int chat_stream_tool_count(const chat_stream *s);

/* The DSML text of one assistant tool call as the official encoder writes it
 * (serving.md §2.6): name and OpenAI arguments string -> "<｜DSML｜invoke ...
 * </｜DSML｜invoke>". Returns malloc'd text, or NULL with err set when the
 * arguments are JSON but not an object (the official encoder fails there). */
char *dsml_encode_invoke(const char *name, const char *arguments, char *err, size_t errlen);

#endif
