/* selections.c: record and replay the discrete choices of the CPU forward
 * pass (debug tool; see selections.h for the why and the file format).
 * Entries are kept in the order they were made; a replay looks them up by
 * (kind, layer, position) starting after the last hit, so an in-order replay
 * costs O(1) per selection and a repeated key is matched in sequence. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/selections.h"
#include "engine/backend.h"

typedef struct sel_entry { int kind, layer, pos, n; size_t off; } sel_entry;

enum { SEL_OFF, SEL_RECORD, SEL_PIN };

static struct {
    int mode;
    const minke_model *m;
    sel_entry *e;
    size_t n, cap;
    int *ids;
    size_t n_ids, cap_ids;
    size_t cursor;
    long pinned, differed, missing;
} S;

void cpu_sel_reset(void) {
    free(S.e);
    free(S.ids);
    memset(&S, 0, sizeof S);
}

int cpu_sel_active(const minke_model *m) {
    return S.mode != SEL_OFF && S.m == m;
}

static int push(int kind, int layer, int pos, const int *ids, int n) {
    if (S.n == S.cap) {
        size_t cap = S.cap ? 2 * S.cap : 1024;
        sel_entry *e = realloc(S.e, cap * sizeof *e);
        if (!e) return -1;
        S.e = e; S.cap = cap;
    }
    if (S.n_ids + (size_t)n > S.cap_ids) {
        size_t cap = S.cap_ids ? 2 * S.cap_ids : 8192;
        while (cap < S.n_ids + (size_t)n) cap *= 2;
        int *p = realloc(S.ids, cap * sizeof *p);
        if (!p) return -1;
        S.ids = p; S.cap_ids = cap;
    }
    S.e[S.n++] = (sel_entry){kind, layer, pos, n, S.n_ids};
    memcpy(S.ids + S.n_ids, ids, sizeof(int) * (size_t)n);
    S.n_ids += (size_t)n;
    return 0;
}

int cpu_sel_record(minke_model *m) {
    cpu_sel_reset();
    S.mode = SEL_RECORD;
    S.m = m;
    return 0;
}

int cpu_sel_pin(minke_model *m, const char *path) {
    cpu_sel_reset();
    FILE *f = fopen(path, "r");
    if (!f) { minke_set_error("cannot open selections file %s", path); return -1; }
    int version = 0, rc = 0;
    if (fscanf(f, " minke-selections %d", &version) != 1 || version != 1) {
        minke_set_error("%s is not a minke selections file (version 1)", path);
        fclose(f);
        return -1;
    }
    int *ids = NULL, ids_cap = 0;
    for (long line = 2;; line++) {
        char kind;
        int layer, pos, n;
        int got = fscanf(f, " %c %d %d %d", &kind, &layer, &pos, &n);
        if (got == EOF) break;
        if (got != 4 || (kind != CPU_SEL_ROUTER && kind != CPU_SEL_INDEXER) || n < 0 || n > 1 << 20) {
            minke_set_error("%s: bad selection entry at line %ld", path, line);
            rc = -1;
            break;
        }
        if (n > ids_cap) {
            int *p = realloc(ids, sizeof(int) * (size_t)n);
            if (!p) { minke_set_error("out of memory reading %s", path); rc = -1; break; }
            ids = p; ids_cap = n;
        }
        for (int i = 0; i < n && rc == 0; i++)
            if (fscanf(f, "%d", &ids[i]) != 1) { minke_set_error("%s: short entry at line %ld", path, line); rc = -1; }
        if (rc == 0 && push(kind, layer, pos, ids, n) != 0) { minke_set_error("out of memory reading %s", path); rc = -1; }
        if (rc) break;
    }
    free(ids);
    fclose(f);
    if (rc) { cpu_sel_reset(); return -1; }
    S.mode = SEL_PIN;
    S.m = m;
    return 0;
}

int cpu_sel_save(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) { minke_set_error("cannot write selections file %s", path); return -1; }
    fprintf(f, "minke-selections 1\n");
    for (size_t i = 0; i < S.n; i++) {
        const sel_entry *e = &S.e[i];
        fprintf(f, "%c %d %d %d", e->kind, e->layer, e->pos, e->n);
        for (int k = 0; k < e->n; k++) fprintf(f, " %d", S.ids[e->off + (size_t)k]);
        fputc('\n', f);
    }
    if (fclose(f) != 0) { minke_set_error("short write to %s", path); return -1; }
    return 0;
}

void cpu_sel_pin_stats(long *pinned, long *differed, long *missing) {
    if (pinned) *pinned = S.pinned;
    if (differed) *differed = S.differed;
    if (missing) *missing = S.missing;
}

static const sel_entry *find(int kind, int layer, int pos) {
    for (size_t k = 0; k < S.n; k++) {
        size_t i = (S.cursor + k) % S.n;
        const sel_entry *e = &S.e[i];
        if (e->kind == kind && e->layer == layer && e->pos == pos) {
            S.cursor = i + 1;
            return e;
        }
    }
    return NULL;
}

int cpu_sel_hook(const minke_model *m, int kind, int layer, int pos, int *sel, int n, int limit) {
    if (!cpu_sel_active(m)) return 0;
    if (S.mode == SEL_RECORD) {
        if (push(kind, layer, pos, sel, n) != 0) S.missing++;   /* out of memory: the recording is incomplete */
        return 0;
    }
    const sel_entry *e = find(kind, layer, pos);
    int ok = e && e->n == n;
    for (int k = 0; ok && k < n; k++) {
        int id = S.ids[e->off + (size_t)k];
        if (id < 0 || id >= limit) ok = 0;
    }
    if (!ok) { S.missing++; return 0; }
    const int *ids = S.ids + e->off;
    /* a choice differs when the sets differ (order only changes the summation) */
    int same = 1;
    for (int k = 0; k < n && same; k++) {
        int found = 0;
        for (int j = 0; j < n && !found; j++) found = sel[j] == ids[k];
        same = found;
    }
    if (!same) S.differed++;
    S.pinned++;
    memcpy(sel, ids, sizeof(int) * (size_t)n);
    return 1;
}
