/* toolmem.c: exact DSML tool replay (serving.md §4.12). Clients send earlier
 * tool calls back as JSON, often re-serialized; rendering them canonically
 * would differ from the bytes the model sampled and break the KV prefix
 * match. So every generated call id (random, unguessable) maps to the exact
 * DSML block of its turn, and when a request replays an assistant turn whose
 * ids all map to one block, that block is rendered verbatim. The renderer is
 * the official one; we substitute through a unique marker placed in the
 * message content (tool calls removed) and swap it for the block after
 * rendering. Oldest ids are dropped past --tool-memory-max-ids. */
#define _GNU_SOURCE 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

typedef struct tm_entry {
    char *id;
    char *dsml;
    struct tm_entry *next;      /* hash chain */
    struct tm_entry *older, *newer; /* insertion order */
} tm_entry;

#define TM_BUCKETS 4096
static tm_entry *buckets[TM_BUCKETS];
static tm_entry *oldest, *newest;
static int count, max_ids = 100000;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static unsigned hash(const char *s) {
    unsigned h = 2166136261u;
    while (*s) h = (h ^ (unsigned char)*s++) * 16777619u;
    return h % TM_BUCKETS;
}

void toolmem_init(int max) { if (max > 0) max_ids = max; }

static void unlink_entry(tm_entry *e) {
    tm_entry **pp = &buckets[hash(e->id)];
    while (*pp && *pp != e) pp = &(*pp)->next;
    if (*pp) *pp = e->next;
    if (e->older) e->older->newer = e->newer; else oldest = e->newer;
    if (e->newer) e->newer->older = e->older; else newest = e->older;
    free(e->id);
    free(e->dsml);
    free(e);
    count--;
}

void toolmem_put(const char *id, const char *dsml) {
    pthread_mutex_lock(&mu);
    for (tm_entry *e = buckets[hash(id)]; e; e = e->next)
        if (!strcmp(e->id, id)) { unlink_entry(e); break; }
    tm_entry *e = calloc(1, sizeof *e);
    e->id = strdup(id);
    e->dsml = strdup(dsml);
    unsigned h = hash(id);
    e->next = buckets[h];
    buckets[h] = e;
    e->older = newest;
    if (newest) newest->newer = e; else oldest = e;
    newest = e;
    count++;
    while (count > max_ids && oldest) unlink_entry(oldest);
    pthread_mutex_unlock(&mu);
}

char *toolmem_get(const char *id) {
    pthread_mutex_lock(&mu);
    char *r = NULL;
    for (tm_entry *e = buckets[hash(id)]; e; e = e->next)
        if (!strcmp(e->id, id)) { r = strdup(e->dsml); break; }
    pthread_mutex_unlock(&mu);
    return r;
}

int toolmem_count(void) {
    pthread_mutex_lock(&mu);
    int n = count;
    pthread_mutex_unlock(&mu);
    return n;
}

/* The official encoder sorts the tool results of one user turn by the call
 * order of the preceding assistant message; once the tool calls are replaced
 * by a marker it cannot, so the tool messages right after the turn are put in
 * call order here first. */
static void sort_tool_results(json_t *messages, size_t asst, json_t *calls) {
    size_t n = json_array_size(messages), end = asst + 1;
    while (end < n && !strcmp(json_string_value(json_object_get(json_array_get(messages, end), "role")) ?: "", "tool")) end++;
    size_t k = end - asst - 1;
    if (k < 2) return;
    json_t **v = malloc(k * sizeof *v);
    int *pos = malloc(k * sizeof *pos);
    for (size_t i = 0; i < k; i++) {
        v[i] = json_incref(json_array_get(messages, asst + 1 + i));
        const char *id = json_string_value(json_object_get(v[i], "tool_call_id"));
        pos[i] = 0;
        for (size_t c = 0; id && c < json_array_size(calls); c++)
            if (!strcmp(json_string_value(json_object_get(json_array_get(calls, c), "id")) ?: "", id)) { pos[i] = (int)c; break; }
    }
    for (size_t i = 1; i < k; i++) { /* stable insertion sort */
        json_t *x = v[i];
        int p = pos[i];
        size_t q = i;
        while (q > 0 && pos[q - 1] > p) { v[q] = v[q - 1]; pos[q] = pos[q - 1]; q--; }
        v[q] = x;
        pos[q] = p;
    }
    for (size_t i = 0; i < k; i++) json_array_set_new(messages, asst + 1 + i, v[i]);
    free(v);
    free(pos);
}

int toolmem_patch_messages(json_t *messages, dsml_patch **patches, int *n_patches) {
    *patches = NULL;
    *n_patches = 0;
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        if (strcmp(json_string_value(json_object_get(m, "role")) ?: "", "assistant")) continue;
        json_t *calls = json_object_get(m, "tool_calls");
        if (!json_array_size(calls)) continue;
        char *block = NULL;
        int same = 1;
        for (size_t c = 0; c < json_array_size(calls) && same; c++) {
            const char *id = json_string_value(json_object_get(json_array_get(calls, c), "id"));
            char *b = id ? toolmem_get(id) : NULL;
            if (!b || (block && strcmp(block, b))) same = 0;
            if (!block) block = b; else free(b);
        }
        if (!same || !block) { free(block); continue; }
        sort_tool_results(messages, i, calls);
        char marker[64], hex[17];
        random_hex(hex, 16);
        snprintf(marker, sizeof marker, "\x1e" "minke-dsml-%s\x1e", hex);
        const char *content = json_string_value(json_object_get(m, "content")) ?: "";
        size_t cl = strlen(content) + strlen(marker) + 1;
        char *nc = malloc(cl);
        snprintf(nc, cl, "%s%s", content, marker);
        json_object_set_new(m, "content", json_string(nc));
        free(nc);
        json_object_del(m, "tool_calls");
        *patches = realloc(*patches, (size_t)(*n_patches + 1) * sizeof **patches);
        (*patches)[*n_patches].marker = strdup(marker);
        (*patches)[*n_patches].dsml = block;
        (*n_patches)++;
    }
    return *n_patches;
}

char *toolmem_apply_patches(const char *text, size_t len, const dsml_patch *p, int n, size_t *out_len) {
    sbuf b = {0};
    sbuf_add(&b, text, len);
    for (int i = 0; i < n; i++) {
        size_t ml = strlen(p[i].marker);
        char *at = memmem(b.p, b.n, p[i].marker, ml);
        if (!at) continue;
        size_t off = (size_t)(at - b.p);
        sbuf nb = {0};
        sbuf_add(&nb, b.p, off);
        sbuf_adds(&nb, p[i].dsml);
        sbuf_add(&nb, b.p + off + ml, b.n - off - ml);
        sbuf_free(&b);
        b = nb;
    }
    *out_len = b.n;
    return sbuf_take(&b);
}

void dsml_patches_free(dsml_patch *p, int n) {
    for (int i = 0; i < n; i++) { free(p[i].marker); free(p[i].dsml); }
    free(p);
}

/* Mappings whose DSML block occurs in text (what a disk snapshot keyed by that
 * text must carry so replay survives a restart). The live state usually ends
 * just before the block's last token (generation stops on the closing tag
 * without evaluating it), so the block's final bytes are not required. */
int toolmem_collect(const char *text, size_t len, char ***ids, char ***dsmls) {
    pthread_mutex_lock(&mu);
    int n = 0, cap = 0;
    *ids = NULL;
    *dsmls = NULL;
    for (tm_entry *e = oldest; e; e = e->newer) {
        size_t dl = strlen(e->dsml);
        if (dl > 24) dl -= 24;
        if (!memmem(text, len, e->dsml, dl)) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            *ids = realloc(*ids, (size_t)cap * sizeof **ids);
            *dsmls = realloc(*dsmls, (size_t)cap * sizeof **dsmls);
        }
        (*ids)[n] = strdup(e->id);
        (*dsmls)[n] = strdup(e->dsml);
        n++;
    }
    pthread_mutex_unlock(&mu);
    return n;
}
