/* tokenizer.h: DeepSeek V4's byte-level BPE tokenizer, built from GGUF metadata.
 *
 * Encoding follows Hugging Face's tokenizer.json semantics exactly
 * (serving.md §1.3-1.5): added/special tokens are matched in the raw text
 * (leftmost, longest), the text between them is pre-tokenized with the three
 * "joyai-llm" regex passes (real Unicode categories), mapped through the GPT-2
 * byte alphabet and merged by BPE rank. Decoding gives raw bytes per token;
 * a streaming decoder holds back incomplete UTF-8 (serving.md §1.6).
 *
 * A tokenizer is immutable after construction: encode/decode may run from
 * several threads at once.
 */
#ifndef MINKE_TEXT_TOKENIZER_H
#define MINKE_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef struct tokenizer tokenizer;

/* Build from `tokenizer.ggml.tokens` + `tokenizer.ggml.merges` (+ token_type
 * when present; without it, tokens that are neither single bytes nor merge
 * results are treated as added tokens). A GGUF without the keys gives NULL and
 * err "this GGUF has no tokenizer (tokenizer.ggml.tokens missing)". */
tokenizer *tokenizer_from_gguf(const gguf_file *f, char *err, size_t errlen);

/* Build from arrays (what tokenizer_from_gguf does after reading the keys).
 * token_types may be NULL. Strings are copied. */
tokenizer *tokenizer_from_arrays(const gguf_str *tokens, const int32_t *token_types, size_t n_tokens,
                                 const gguf_str *merges, size_t n_merges, char *err, size_t errlen);

/* Development path: build directly from a Hugging Face tokenizer.json
 * (same result as writing it with tokjson_write_gguf and loading the GGUF). */
tokenizer *tokenizer_from_json_file(const char *path, char *err, size_t errlen);

void tokenizer_free(tokenizer *t);

size_t tokenizer_n_vocab(const tokenizer *t);

/* Encode flags. */
#define TOK_ADD_BOS 1u     /* prepend BOS (if the vocabulary has <｜begin▁of▁sentence｜>) */
#define TOK_NO_SPECIAL 2u  /* do not match added/special tokens in the text: all plain BPE */

/* text[0..len) -> *ids (malloc'd, caller frees; *ids may be NULL when *n == 0).
 * Special tokens in the text are matched exactly where the official tokenizer
 * matches them. Invalid UTF-8 is accepted (each bad byte is its own "other"
 * character) and still round-trips. Returns 0, or -1 on out-of-memory. */
int tokenizer_encode(const tokenizer *t, const char *text, size_t len, int add_bos, int32_t **ids, size_t *n);
int tokenizer_encode_flags(const tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                           size_t *n);

/* Only the pre-tokenizer (no added-token matching, no BPE): calls piece()
 * for each piece of text in order; the pieces concatenate to the text.
 * Returns 0, or -1 on out-of-memory. */
int tok_pretokenize(const char *text, size_t len, void (*piece)(void *ctx, const char *p, size_t n), void *ctx);

/* The raw bytes a token decodes to (not NUL-terminated; NULL for an id out of
 * range). Added tokens decode to their literal string. */
const char *tokenizer_token_bytes(const tokenizer *t, int32_t id, size_t *len);
/* The token's string as stored in the vocabulary (byte-level alphabet), NUL-terminated. */
const char *tokenizer_token_string(const tokenizer *t, int32_t id);
/* Longest tokenizer_token_bytes of any token. */
size_t tokenizer_max_token_bytes(const tokenizer *t);
/* Decode a whole id sequence into malloc'd bytes (NUL-terminated for
 * convenience; *len excludes the NUL). Ids out of range give -1. */
int tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len);

/* Id of the token whose vocabulary string is exactly token_string, or -1. */
int32_t tokenizer_find(const tokenizer *t, const char *token_string);
/* 1 if the id is an added token (matched in text as a whole; control or user-defined). */
int tokenizer_is_added(const tokenizer *t, int32_t id);

/* Special tokens, resolved by exact string at load (-1 if absent). */
enum tok_special {
    TOK_BOS,            /* <｜begin▁of▁sentence｜> */
    TOK_EOS,            /* <｜end▁of▁sentence｜> */
    TOK_PAD,            /* <｜▁pad▁｜> */
    TOK_USER,           /* <｜User｜> */
    TOK_ASSISTANT,      /* <｜Assistant｜> */
    TOK_THINK,          /* <think> */
    TOK_THINK_END,      /* </think> */
    TOK_DSML,           /* ｜DSML｜ */
    TOK_LATEST_REMINDER,/* <｜latest_reminder｜> */
    TOK_ACTION,         /* <｜action｜> */
    TOK_QUERY,          /* <｜query｜> */
    TOK_AUTHORITY,      /* <｜authority｜> */
    TOK_DOMAIN,         /* <｜domain｜> */
    TOK_TITLE,          /* <｜title｜> */
    TOK_READ_URL,       /* <｜read_url｜> */
    TOK_EXTRACTED_URL,  /* <｜extracted_url｜> */
    TOK_FIM_HOLE,       /* <｜fim▁hole｜> */
    TOK_FIM_BEGIN,      /* <｜fim▁begin｜> */
    TOK_FIM_END,        /* <｜fim▁end｜> */
    TOK_EOT,            /* <|EOT|> */
    TOK_SPECIAL_COUNT
};
int32_t tokenizer_special(const tokenizer *t, enum tok_special which);
/* The literal string of a special token (independent of any vocabulary). */
const char *tokenizer_special_string(enum tok_special which);
/* Shorthands. */
int32_t tokenizer_bos(const tokenizer *t);
int32_t tokenizer_eos(const tokenizer *t);
/* 0 if the seven tokens ds4 requires (BOS, EOS, User, Assistant, <think>,
 * </think>, ｜DSML｜) are all present, else -1 with err naming the first missing. */
int tokenizer_check_required(const tokenizer *t, char *err, size_t errlen);

/* ---- streaming decode: hold back an incomplete trailing UTF-8 sequence ---- */
typedef struct tok_stream {
    unsigned char held[4];
    unsigned n_held;
} tok_stream;

#define TOK_STREAM_SLACK 4 /* extra output room beyond the input length */

void tok_stream_init(tok_stream *s);
/* Append bytes; writes to out (room for len + TOK_STREAM_SLACK) everything
 * that is safe to emit now and returns its length. */
size_t tok_stream_feed(tok_stream *s, const char *bytes, size_t len, char *out);
/* Same with the bytes of one token; out needs tokenizer_max_token_bytes + TOK_STREAM_SLACK.
 * Ids out of range contribute nothing. */
size_t tok_stream_feed_token(tok_stream *s, const tokenizer *t, int32_t id, char *out);
/* End of stream: write the held bytes (at most 3) and reset. */
size_t tok_stream_flush(tok_stream *s, char *out);
/* Length of the prefix of s[0..n) that can be emitted without cutting a
 * UTF-8 sequence (ds4's utf8_stream_safe_len rule). */
size_t utf8_stream_safe_len(const char *s, size_t n);

#endif
