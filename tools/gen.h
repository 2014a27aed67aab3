/* gen.h: the conversation loop shared by `minke chat` and `minke run`.
 *
 * A conversation owns a model, one session, the tokenizer and the message
 * list. Each turn renders the whole conversation with the official encoder,
 * tokenizes it, reuses the KV state for the longest common token prefix
 * (rolling back to the last prompt snapshot when the rendering of earlier
 * turns changed, e.g. dropped reasoning), prefills the rest, then samples
 * until EOS, the token budget, the context end or an interrupt. Output is
 * streamed through chat_stream events: reasoning and content separately.
 */
#ifndef MINKE_TOOLS_GEN_H
#define MINKE_TOOLS_GEN_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "minke.h"
#include "engine/sample.h"
#include "text/chat.h"
#include "text/tokenizer.h"

typedef struct cli_opts {
    const char *model;       /* NULL: $MINKE_MODEL, else ./minke.gguf */
    minke_backend backend;
    int threads;
    int ctx;                 /* context window (tokens) */
    int max_tokens;          /* per answer */
    int chunk;               /* prefill chunk */
    int sims;
    int act;                 /* --act exact|q8: minke_model_params.act (MINKE_ACT_*) */
    int gpus;                /* --gpus N|all: minke_model_params.n_gpus */
    sampler_params sp;
    chat_mode mode;
    const char *system;      /* NULL or "" = no system message */
    int demo;                /* --demo: use (and build once) the cached demo model */
    int color;               /* dim reasoning with ANSI escapes */
    const char *mtp;         /* --mtp FILE: MTP GGUF for speculative greedy decoding (CPU) */
    int mtp_draft;           /* --mtp-draft N: drafts per step (default 3) */
    int mtp_pairing;         /* --mtp-pairing prev|same (MINKE_MTP_PAIR_*) */
} cli_opts;

void cli_opts_default(cli_opts *o);
/* Parses one shared option at argv[*i] (advancing *i past its value).
 * Returns 1 if consumed, 0 if not an option of ours, -1 on a bad value
 * (message printed). */
int cli_parse_common(int *i, int argc, char **argv, cli_opts *o, const char *cmd);
void cli_print_common_help(FILE *f);

typedef struct convo convo;

/* Opens the model (building the demo model first with --demo). NULL with a
 * message printed on stderr when there is no usable model. */
convo *convo_open(const cli_opts *o);
void convo_free(convo *c);

typedef struct turn_stats {
    int prompt_tokens, cached_tokens, gen_tokens;
    double prefill_s, gen_s;
    int interrupted, hit_limit;
    int spec;                /* speculative decoding was on: drafts tried / accepted */
    int drafted, accepted;
} turn_stats;

/* Set from a SIGINT handler: stops the current generation. */
extern volatile sig_atomic_t convo_interrupt;

/* Adds a user message and generates the answer, streaming to out.
 * Returns 0, or -1 with a message on stderr (the turn is rolled back). */
int convo_turn(convo *c, const char *user_text, FILE *out, turn_stats *st);
void convo_reset(convo *c);
int convo_set_ctx(convo *c, int n_ctx);
void convo_set_mode(convo *c, chat_mode mode);
chat_mode convo_mode(const convo *c);
int convo_ctx(const convo *c);
int convo_pos(const convo *c);
void convo_print_stats(const turn_stats *st, FILE *f);

#endif
