/* convert.h: official DeepSeek V4 checkpoint or GGUF -> ds4-layout GGUF under a type policy.
 *
 * Streams tensor by tensor: each output tensor is produced in bounded chunks
 * (rows decoded to f32 and requantized on all cores, written while the next
 * chunk is computed), so memory stays at a few hundred MB whatever the model
 * size. The output appears atomically (the GGUF writer writes a temporary
 * file and renames it at the end).
 */
#ifndef MINKE_CONVERT_H
#define MINKE_CONVERT_H

#include <stddef.h>

#include "convert/policy.h"

typedef struct convert_opts {
    const char *input;            /* checkpoint directory, a .safetensors file, or a .gguf */
    const char *output;           /* GGUF to write */
    const char *mtp_output;       /* NULL, or where to write the MTP block (official mtp.0.*) as its own GGUF */
    convert_policy policy;
    int n_threads;                /* <= 0: all cores */
    int progress;                 /* -1 auto (stderr is a TTY), 0 off, 1 on */
    const char *tokenizer_json;   /* NULL: <input dir>/tokenizer.json when present */
    const char *tokenizer_config; /* NULL: <input dir>/tokenizer_config.json when present */
    int no_tokenizer;             /* 1: write no tokenizer.* keys */
    int verbose;                  /* 1: one line per tensor on stderr */
    int max_layers;               /* > 0: keep only the first N layers (a smaller valid model for quick tests) */
    int check_only;               /* 1: check the input and print what would be written; write nothing
                                     (output may be NULL) */
} convert_opts;

void convert_opts_default(convert_opts *o);
/* 0 on success; -1 with err (one sentence) and no output file left behind. */
int convert_model(const convert_opts *o, char *err, size_t errlen);

#endif
