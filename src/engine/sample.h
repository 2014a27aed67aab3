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

/* Sampling from candidates instead of the whole vocabulary (a backend that
 * keeps the logits on the device sends back only these; engine.c
 * minke_sample). sampler_cands_plan: 1 when the choice is the argmax (greedy
 * settings or force_greedy), 2 when the finite logits >= lmax + *floor_off
 * (with their ids in increasing order, and the argmax) decide it, 0 when the
 * whole vocabulary is needed (top_k, top_p < 1, min_p 0). With plan 2,
 * sampler_sample_cands over those candidates returns what sampler_sample over
 * all the logits returns, with the same draw from the generator; amax is the
 * argmax (first on ties) over the finite logits (-1 when none), lmax its
 * value. */
int sampler_cands_plan(const sampler *s, int force_greedy, float *floor_off);
int32_t sampler_sample_cands(sampler *s, const int32_t *ids, const float *vals, int n, int32_t amax, float lmax,
                             int force_greedy);

/* The argmax (first on ties) over finite logits; -1 when none. */
int32_t sampler_argmax(const float *logits, int n_vocab);

/* Next raw 64-bit value of the sampler's PRNG (tests, other seeded choices). */
uint64_t sampler_rng_next(sampler *s);

#endif
