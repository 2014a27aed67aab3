/* synth.h: synthetic DeepSeek V4 weights, in memory or as a GGUF file.
 *
 * Every tensor is random but shaped so activations stay realistic through
 * any number of layers: projections ~ 1/sqrt(fan_in), norm weights ~ 1,
 * small hyper-connection projections, modest sinks and position biases, a
 * router with varied experts, distinct hash-routing experts per token.
 * `damp` scales the matrices that write into the residual streams (attention
 * output B, shared and routed expert down projections) to damp every layer's
 * update.
 *
 * Quantized types are generated as random *valid blocks* directly (random
 * codes and scales chosen so the dequantized values have the target standard
 * deviation) rather than by quantizing random floats: the same statistics at
 * memory speed, which makes an 81 GB Flash q2 file disk-bound. Such weights
 * are exactly representable, so a dequantized F32 twin is exact.
 *
 * Determinism: the values of a row depend only on (seed, tensor name, row
 * index, type, damp), never on threads or on which rows are generated together.
 */
#ifndef MINKE_MODEL_SYNTH_H
#define MINKE_MODEL_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"

/* Fill rows [r0, r0 + n_rows) of tensor s (rows of ne0 elements; 3-D experts
 * are ne1*ne2 rows) stored as ggml `type` into dst (row r0 first). Single
 * thread. 0 on success, -1 for a type or row length that cannot be made. */
int synth_fill_rows(const dsv4_config *c, const dsv4_tensor_spec *s, int type, uint64_t seed, float damp,
                    int64_t r0, int64_t n_rows, void *dst);

/* The whole tensor on n_threads threads (<= 0: all cores). dst holds
 * quant_nbytes(type, nel) bytes. */
int synth_fill_tensor_mt(const dsv4_config *c, const dsv4_tensor_spec *s, int type, uint64_t seed, float damp,
                         void *dst, int n_threads);
/* Same with all cores (for the CUDA bench's --synthetic models). */
int synth_fill_tensor(const dsv4_config *c, const dsv4_tensor_spec *s, int type, uint64_t seed, float damp, void *dst);

typedef struct synth_file_opts {
    const int *types;            /* ggml type per spec (NULL: each spec's ds4_type) */
    uint64_t seed;
    float damp;                  /* 1 = undamped */
    const char *tokenizer_json;  /* NULL: a synthetic byte-level vocabulary of n_vocab tokens */
    int n_threads;               /* <= 0: all cores */
    int progress;                /* -1 auto (TTY), 0 off, 1 on */
    int mtp;                     /* 1: write the MTP GGUF (dsv4_mtp_tensor_specs, no tokenizer) */
    uint64_t holes_above;        /* > 0: tensors of more bytes are written as zeros (sparse holes):
                                    full-size headers for loader tests at a few MB on disk */
} synth_file_opts;

/* Write a complete GGUF (metadata, tokenizer, every tensor of dsv4_tensor_specs(c)), or with
 * o->mtp the MTP file (every tensor of dsv4_mtp_tensor_specs(c); types index that list). */
int synth_write_gguf(const char *path, const dsv4_config *c, const synth_file_opts *o, char *err, size_t errlen);

/* The same GGUF built in anonymous memory instead of a file (byte-identical to what
 * synth_write_gguf writes; o->holes_above and o->progress are ignored): for models larger than
 * the disk, opened with minke_model_params.gguf_image. Only the header passes through a small
 * sparse file under $TMPDIR (else /tmp). Free with synth_free_image. */
int synth_build_image(const dsv4_config *c, const synth_file_opts *o, void **image, uint64_t *size, char *err,
                      size_t errlen);
void synth_free_image(void *image, uint64_t size);

#endif
