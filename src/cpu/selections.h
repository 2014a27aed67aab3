/* selections.h: a debug tool of the CPU backend that records the discrete
 * choices of a forward pass (the learned router's expert ids and the
 * lightning indexer's top-k compressed-row ids, per main-stack layer and
 * position) and replays them in another run, so two runs that differ only in
 * numerics (e.g. a quantized file and its F32 twin) can be compared with the
 * same choices. Pinning fixes only the ids: the routing weights and attention
 * still come from the pinned run's own scores.
 *
 * The state is process-wide and tied to one model (the model passed to
 * cpu_sel_record/cpu_sel_pin); forward passes of other models are untouched,
 * and with no recording or pinning the forward pass is unchanged.
 *
 * File format (text, one selection a line, in the order they were made):
 *   minke-selections 1
 *   r LAYER POS N id...    router: the ids in the order top-k returned them
 *   i LAYER POS N id...    indexer: the visible compressed rows, ascending
 * Hash-routed layers are fixed by the token id and are not recorded; the
 * indexer is recorded only where it chose (more rows than its top-k). */
#ifndef MINKE_CPU_SELECTIONS_H
#define MINKE_CPU_SELECTIONS_H

#include "minke.h"

enum { CPU_SEL_ROUTER = 'r', CPU_SEL_INDEXER = 'i' };

/* Start recording the selections of m's forward passes (clears any earlier
 * state). 0, or -1 with the error set. */
int cpu_sel_record(minke_model *m);
/* Load a recording from path and pin m's forward passes to it. */
int cpu_sel_pin(minke_model *m, const char *path);
/* Write what was recorded to path. 0, or -1 with the error set. */
int cpu_sel_save(const char *path);
/* Counts since cpu_sel_pin: selections replaced (pinned), those where the
 * run's own choice differed, and those that had no recorded entry (or an
 * entry that does not fit: wrong count, id out of range), which kept the
 * run's own choice. */
void cpu_sel_pin_stats(long *pinned, long *differed, long *missing);
/* Stop recording/pinning and free the state. */
void cpu_sel_reset(void);

/* Called by the forward pass at each selection: sel[0..n) holds the run's
 * own choice; when pinning, it is replaced by the recorded ids (each < limit)
 * and 1 is returned, so the caller recomputes what depends on the ids. */
int cpu_sel_hook(const minke_model *m, int kind, int layer, int pos, int *sel, int n, int limit);
/* Whether m is being recorded or pinned at all (cheap; for the hot path). */
int cpu_sel_active(const minke_model *m);

#endif
