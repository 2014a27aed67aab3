/* tokjson.h: writing tokenizer metadata into a GGUF.
 *
 * The engine reads its tokenizer only from GGUF metadata (serving.md §1.1).
 * These two writers put the `tokenizer.ggml.*` keys into a GGUF being built:
 * one from a Hugging Face tokenizer.json (the real DeepSeek V4 tokenizer),
 * one synthetic (a small byte-level vocabulary for synthetic test models).
 * Both only add metadata; call them before gguf_writer_begin_data.
 */
#ifndef MINKE_TEXT_TOKJSON_H
#define MINKE_TEXT_TOKJSON_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

/* Parse the HF tokenizer.json at path `tokenizer_json` (and, optionally, the
 * tokenizer_config.json at `tokenizer_config_or_null` for bos/eos/pad and
 * add_bos/add_eos) and write:
 *   tokenizer.ggml.model = "gpt2", tokenizer.ggml.pre = "joyai-llm",
 *   tokenizer.ggml.tokens (id order, length = highest id + 1, incl. added tokens),
 *   tokenizer.ggml.token_type (1 normal, 3 control, 4 user-defined, 5 unused gap),
 *   tokenizer.ggml.merges ("LEFT RIGHT", rank order),
 *   tokenizer.ggml.bos_token_id / eos_token_id / padding_token_id (u32),
 *   tokenizer.ggml.add_bos_token / add_eos_token (bool).
 * Returns 0 on success, -1 with err set on failure (nothing is written then). */
int tokjson_write_gguf(gguf_writer *w, const char *tokenizer_json, const char *tokenizer_config_or_null,
                       char *err, size_t errlen);

/* The vocabulary size tokjson_write_gguf would write (highest id + 1), or -1
 * with err set. Parses the file (about 0.2 s for DeepSeek V4's). */
int tokjson_vocab_size(const char *tokenizer_json, char *err, size_t errlen);

/* Write a synthetic byte-level BPE tokenizer of exactly n_vocab tokens:
 * BOS (id 0), EOS (1), pad (2), the 256 byte tokens, merges learnt from a
 * small built-in corpus, unused filler tokens, and at the end the special
 * tokens of the chat format (User, Assistant, <think>, </think>, ｜DSML｜,
 * then latest_reminder and the task tokens where room).
 * n_vocab must be >= TOKSYNTH_MIN_VOCAB. Returns 0, or -1 with err set. */
#define TOKSYNTH_MIN_VOCAB 264
int toksynth_write_gguf(gguf_writer *w, uint32_t n_vocab, char *err, size_t errlen);

#endif
