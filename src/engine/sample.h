/* sample.h: choosing the next token from logits (serving.md §3).
 *
 * Top-k, temperature, top-p and min-p as ds4 does them, with our own seeded
 * PRNG so that a request with a seed is reproducible. The sampler never sorts
 * the whole vocabulary: it keeps only the candidates that can survive min-p
 * (or the k best) and sorts those.
 */
#ifndef MINKE_ENGINE_SAMPLE_H
#define MINKE_ENGINE_SAMPLE_H

#include <stdint.h>

typedef struct sampler_params {
    float temperature; /* <= 0: greedy (argmax) */
    float top_p;       /* <= 0 or > 1: treated as 1 (disabled) */
    float min_p;       /* relative to the top token's probability; < 0: 0 */
    int top_k;         /* 0: disabled; clamped to SAMPLER_MAX_TOP_K */
    uint64_t seed;     /* 0: seeded from the clock and an address */
    int greedy;        /* nonzero: always argmax */
} sampler_params;

#define SAMPLER_MAX_TOP_K 1024
#define SAMPLER_DEFAULT_TEMPERATURE 1.0f
#define SAMPLER_DEFAULT_TOP_P 1.0f
#define SAMPLER_DEFAULT_MIN_P 0.05f
#define SAMPLER_DEFAULT_TOP_K 0

/* temperature 1, top_p 1, min_p 0.05, top_k 0, seed 0, greedy 0. */
sampler_params sampler_params_default(void);
/* In thinking modes (Think High/Max) the client knobs are ignored and the
 * defaults used (serving.md §3.1); the seed and greedy flag are kept.
 * thinking: nonzero for thinking/max. */
sampler_params sampler_params_for_mode(const sampler_params *client, int thinking);

typedef struct sampler sampler;

sampler *sampler_new(const sampler_params *p);
void sampler_free(sampler *s);
/* Replace the parameters (the RNG state is kept). */
void sampler_set_params(sampler *s, const sampler_params *p);
/* Reseed the RNG (0: from the clock). */
void sampler_seed(sampler *s, uint64_t seed);

/* Pick a token id from n_vocab logits (non-finite entries are never chosen
 * unless all are). force_greedy: argmax for this token only (DSML structure,
 * dsml_in_structure). Returns -1 only when n_vocab <= 0. */
int32_t sampler_sample(sampler *s, const float *logits, int n_vocab, int force_greedy);

/* The argmax (first on ties) over finite logits; -1 when none. */
int32_t sampler_argmax(const float *logits, int n_vocab);

/* Next raw 64-bit value of the sampler's PRNG (tests, other seeded choices). */
uint64_t sampler_rng_next(sampler *s);

#endif
