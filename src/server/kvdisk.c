/* kvdisk.c: the disk KV cache (serving.md §5). Each file holds one snapshot
 * of the live session, named <sha1 of its key text>.kv, where the key text is
 * the bytes of the stored tokens (the rendered prompt prefix). Layout is the
 * ds4 header of §5.2 (52 bytes + key text + engine payload), the payload being
 * minke_session_serialize's bytes, followed by our trailers:
 *   flags bit3: token trailer "KTK" v1, u32 count, u32 ids (the exact history;
 *               our payload is opaque, unlike ds4's); v2 adds u32 n_tail after
 *               the count and n_tail ids after the history: for a key that is
 *               a thinking turn's visible transcript (flags bit2), the tokens
 *               to evaluate before what follows the key (last token, EOS);
 *   flags bit4: bytes 20..23 hold the CRC-32 of everything after the header,
 *               so a flipped bit anywhere is caught before the state is used.
 * Writes go to a temp file renamed into place; a file that fails any check
 * (magic, version, size, hash of the key, checksum, payload restore) is
 * logged, removed, and treated as a miss. Eviction keeps the total under the
 * budget, dropping the least useful snapshots first (§5.7). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server/server.h"

uint32_t crc32_update(uint32_t crc, const void *data, size_t n);

#define KV_HEADER 52
#define KV_FLAG_TOOLMAP 0x01
#define KV_FLAG_VISIBLE 0x04
#define KV_FLAG_TOKENS 0x08
#define KV_FLAG_CRC 0x10
#define KV_QUANT_BITS 4

static const server_config *g_cfg;
static int g_enabled;
static char g_dir[4096];

int kvdisk_enabled(void) { return g_enabled; }

static void put32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static void put64(unsigned char *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static uint32_t get32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t get64(const unsigned char *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

static void decode_header(const unsigned char *h, kvdisk_header *o) {
    o->version = h[3];
    o->quant_bits = h[4];
    o->reason = h[5];
    o->flags = h[6];
    o->n_tokens = get32(h + 8);
    o->hits = get32(h + 12);
    o->ctx = get32(h + 16);
    o->created = get64(h + 24);
    o->last_used = get64(h + 32);
    o->payload_bytes = get64(h + 40);
    o->key_len = get32(h + 48);
}

static int header_valid(const unsigned char *h, const kvdisk_header *o, uint64_t file_size) {
    if (memcmp(h, "KVC", 3) || o->version != 1 || o->n_tokens == 0 || (o->quant_bits != 2 && o->quant_bits != 4)) return 0;
    if ((uint64_t)KV_HEADER + o->key_len + o->payload_bytes > file_size) return 0;
    return 1;
}

static int name_is_entry(const char *n) {
    size_t len = strlen(n);
    if (len != 43 || strcmp(n + 40, ".kv")) return 0;
    for (int i = 0; i < 40; i++)
        if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f'))) return 0;
    return 1;
}

static void entry_path(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", g_dir, name); }

static void reject(const char *name, const char *why) {
    char path[4200];
    entry_path(path, sizeof path, name);
    server_log("kv cache: rejected %s (%s); removed", name, why);
    unlink(path);
}

int kvdisk_store_len(int n, int min, int trim, int align) {
    if (n > min + trim) {
        int s = n - trim;
        if (align > 0) s -= s % align;
        if (s >= min) return s;
    }
    return n;
}

typedef struct entry {
    char name[44];
    kvdisk_header h;
    uint64_t size;
    double score;
} entry;

/* Reads every entry's header; malformed files are removed. */
static int scan(entry **out) {
    DIR *d = opendir(g_dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    entry *v = NULL;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!name_is_entry(de->d_name)) continue;
        char path[4200];
        entry_path(path, sizeof path, de->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        unsigned char h[KV_HEADER];
        struct stat st;
        int ok = fstat(fileno(f), &st) == 0 && fread(h, 1, KV_HEADER, f) == KV_HEADER;
        fclose(f);
        kvdisk_header kh;
        if (ok) decode_header(h, &kh);
        if (!ok || !header_valid(h, &kh, (uint64_t)st.st_size)) {
            reject(de->d_name, ok ? "bad header or truncated" : "shorter than its header");
            continue;
        }
        if (n == cap) { cap = cap ? cap * 2 : 16; v = realloc(v, (size_t)cap * sizeof *v); }
        size_t nl = strnlen(de->d_name, sizeof v[n].name - 1); /* name_is_entry: always 43 */
        memcpy(v[n].name, de->d_name, nl);
        v[n].name[nl] = 0;
        v[n].h = kh;
        v[n].size = (uint64_t)st.st_size;
        n++;
    }
    closedir(d);
    *out = v;
    return n;
}

uint64_t kvdisk_total_bytes(void) {
    entry *v = NULL;
    int n = scan(&v);
    uint64_t t = 0;
    for (int i = 0; i < n; i++) t += v[i].size;
    free(v);
    return t;
}

static int cmp_score(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    uint64_t lx = x->h.last_used ? x->h.last_used : x->h.created, ly = y->h.last_used ? y->h.last_used : y->h.created;
    return lx < ly ? -1 : lx > ly;
}

int kvdisk_evict_to_budget(const char *protect_name) {
    if (!g_enabled) return 0;
    uint64_t budget = g_cfg->kv_disk_space_mb * 1024ull * 1024ull;
    entry *v = NULL;
    int n = scan(&v);
    uint64_t total = 0;
    double now = (double)time(NULL);
    for (int i = 0; i < n; i++) {
        total += v[i].size;
        double age = now - (double)(v[i].h.last_used ? v[i].h.last_used : v[i].h.created);
        if (age < 0) age = 0;
        double eff = v[i].h.hits * pow(2.0, -age / (6 * 3600.0));
        if (eff < 0.01) eff = 0;
        v[i].score = (eff + 1) * v[i].h.n_tokens / (double)(v[i].size ? v[i].size : 1);
    }
    if (n > 1) qsort(v, (size_t)n, sizeof *v, cmp_score); /* v is NULL when the directory is empty */
    int removed = 0;
    for (int pass = 0; pass < 2 && total > budget; pass++) {
        for (int i = 0; i < n && total > budget; i++) {
            if (!v[i].size) continue;
            /* the fresh file is protected unless it alone exceeds the budget */
            if (pass == 0 && protect_name && !strcmp(v[i].name, protect_name)) continue;
            char path[4200];
            entry_path(path, sizeof path, v[i].name);
            if (unlink(path) == 0) {
                server_log("kv cache: evicted %s (%u tokens, %.1f MiB) to stay under %llu MiB", v[i].name, v[i].h.n_tokens,
                           v[i].size / 1048576.0, (unsigned long long)g_cfg->kv_disk_space_mb);
                total -= v[i].size;
                v[i].size = 0;
                removed++;
            }
        }
    }
    free(v);
    return removed;
}

/* Reads the tool-id map trailer of one file into tool memory (ids and blocks
 * are bounded; a malformed trailer is ignored here and caught at load). */
static int load_tool_map(const entry *e) {
    char path[4200];
    entry_path(path, sizeof path, e->name);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    int added = 0;
    unsigned char h[8];
    if (fseek(f, (long)(KV_HEADER + e->h.key_len + e->h.payload_bytes), SEEK_SET) == 0 && fread(h, 1, 8, f) == 8 && !memcmp(h, "KTM", 3)) {
        uint32_t cnt = get32(h + 4);
        for (uint32_t i = 0; i < cnt && i < 4u * (uint32_t)g_cfg->tool_memory_max_ids; i++) {
            if (fread(h, 1, 8, f) != 8) break;
            uint32_t il = get32(h), dl = get32(h + 4);
            if (!il || il > 256 || !dl || dl > (512u << 20) || (uint64_t)il + dl > e->size) break;
            char *id = malloc(il + 1), *dsml = malloc((size_t)dl + 1);
            if (!id || !dsml || fread(id, 1, il, f) != il || fread(dsml, 1, dl, f) != dl) { free(id); free(dsml); break; }
            id[il] = 0;
            dsml[dl] = 0;
            if (!memchr(id, 0, il) && !memchr(dsml, 0, dl)) { toolmem_put(id, dsml); added++; }
            free(id);
            free(dsml);
        }
    }
    fclose(f);
    return added;
}

static int mkdir_p(const char *dir) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0700) && errno != EEXIST) return -1;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0700) && errno != EEXIST) return -1;
    return 0;
}

int kvdisk_init(const server_config *cfg) {
    g_cfg = cfg;
    if (!cfg->kv_disk_dir) return 0;
    snprintf(g_dir, sizeof g_dir, "%s", cfg->kv_disk_dir);
    if (mkdir_p(g_dir)) {
        fprintf(stderr, "minke serve: cannot create --kv-disk-dir %s: %s\n", g_dir, strerror(errno));
        return -1;
    }
    g_enabled = 1;
    toolmem_init(cfg->tool_memory_max_ids);
    entry *v = NULL;
    int n = scan(&v);
    int n_maps = 0;
    for (int i = 0; i < n && cfg->tool_replay; i++)
        if (v[i].h.flags & KV_FLAG_TOOLMAP) n_maps += load_tool_map(&v[i]);
    free(v);
    if (n_maps) server_log("kv cache: %d tool-call ids restored for exact DSML replay", n_maps);
    kvdisk_evict_to_budget(NULL);
    server_log("kv cache: %s, %d entries, %.1f MiB of %llu MiB", g_dir, n, kvdisk_total_bytes() / 1048576.0,
               (unsigned long long)cfg->kv_disk_space_mb);
    return 0;
}

int kvdisk_save_tokens(minke_session *s, const char *key, size_t key_len, const int32_t *tok, int n_tok, const int32_t *tail, int n_tail,
                       kv_reason why) {
    if (!g_enabled || n_tok <= 0 || !key_len) return -1;
    uint64_t pbytes = minke_session_serial_bytes(s);
    char **tm_ids = NULL, **tm_dsml = NULL;
    int n_tm = g_cfg->tool_replay ? toolmem_collect(key, key_len, &tm_ids, &tm_dsml) : 0;
    uint64_t tm_bytes = n_tm ? 8 : 0;
    for (int i = 0; i < n_tm; i++) tm_bytes += 8 + strlen(tm_ids[i]) + strlen(tm_dsml[i]);
    if (n_tail < 0 || n_tail > 4) n_tail = 0;
    uint64_t total = KV_HEADER + key_len + pbytes + tm_bytes + 8 + (n_tail ? 4 : 0) + 4ull * (uint64_t)(n_tok + n_tail);
    uint64_t budget = g_cfg->kv_disk_space_mb * 1024ull * 1024ull;
    unsigned char *buf = total + total / 100 > budget ? NULL : malloc(total);
    if (!buf) {
        if (total + total / 100 > budget)
            server_log("kv cache: snapshot of %d tokens (%.1f MiB) does not fit the budget; not stored", n_tok, total / 1048576.0);
        for (int i = 0; i < n_tm; i++) { free(tm_ids[i]); free(tm_dsml[i]); }
        free(tm_ids);
        free(tm_dsml);
        return -1;
    }
    memset(buf, 0, KV_HEADER);
    memcpy(buf, "KVC", 3);
    buf[3] = 1;
    buf[4] = KV_QUANT_BITS;
    buf[5] = (unsigned char)why;
    buf[6] = KV_FLAG_TOKENS | KV_FLAG_CRC | (n_tm ? KV_FLAG_TOOLMAP : 0) | (n_tail ? KV_FLAG_VISIBLE : 0);
    put32(buf + 8, (uint32_t)n_tok);
    put32(buf + 12, 0);
    put32(buf + 16, (uint32_t)minke_session_n_ctx(s));
    uint64_t now = (uint64_t)time(NULL);
    put64(buf + 24, now);
    put64(buf + 32, now);
    put64(buf + 40, pbytes);
    put32(buf + 48, (uint32_t)key_len);
    memcpy(buf + KV_HEADER, key, key_len);
    if (minke_session_serialize(s, buf + KV_HEADER + key_len, pbytes)) {
        server_log("kv cache: cannot serialize the session: %s", minke_last_error());
        free(buf);
        return -1;
    }
    unsigned char *t = buf + KV_HEADER + key_len + pbytes;
    if (n_tm) {
        memcpy(t, "KTM", 3);
        t[3] = 1;
        put32(t + 4, (uint32_t)n_tm);
        t += 8;
        for (int i = 0; i < n_tm; i++) {
            size_t il = strlen(tm_ids[i]), dl = strlen(tm_dsml[i]);
            put32(t, (uint32_t)il);
            put32(t + 4, (uint32_t)dl);
            memcpy(t + 8, tm_ids[i], il);
            memcpy(t + 8 + il, tm_dsml[i], dl);
            t += 8 + il + dl;
            free(tm_ids[i]);
            free(tm_dsml[i]);
        }
    }
    free(tm_ids);
    free(tm_dsml);
    memcpy(t, "KTK", 3);
    t[3] = n_tail ? 2 : 1;
    put32(t + 4, (uint32_t)n_tok);
    t += 8;
    if (n_tail) { put32(t, (uint32_t)n_tail); t += 4; }
    for (int i = 0; i < n_tok; i++) put32(t + 4 * i, (uint32_t)tok[i]);
    for (int i = 0; i < n_tail; i++) put32(t + 4 * (n_tok + i), (uint32_t)tail[i]);
    put32(buf + 20, crc32_update(0, buf + KV_HEADER, total - KV_HEADER));

    char hex[41], name[48], path[4200], tmp[4300];
    sha1_hex(key, key_len, hex);
    snprintf(name, sizeof name, "%s.kv", hex);
    entry_path(path, sizeof path, name);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(buf, 1, total, f) == total;
    if (f && fclose(f)) ok = 0;
    free(buf);
    if (!ok || rename(tmp, path)) {
        server_log("kv cache: cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    static const char *reasons[] = {"unknown", "cold", "continued", "evict", "shutdown"};
    server_log("kv cache: stored %s (%s, %d tokens, %.1f MiB)", name, reasons[why <= 4 ? why : 0], n_tok, total / 1048576.0);
    kvdisk_evict_to_budget(name);
    return 0;
}

static int cmp_keylen(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->h.key_len != y->h.key_len) return x->h.key_len > y->h.key_len ? -1 : 1;
    return x->h.n_tokens > y->h.n_tokens ? -1 : x->h.n_tokens < y->h.n_tokens;
}

/* Reads and checks one file fully; loads it into s. Returns 0 on success;
 * -1 after rejecting (and removing) it. */
static int load_entry(minke_session *s, const entry *e, const char *text, int32_t **tok, int *n_tok, int32_t **tail, int *n_tail) {
    char path[4200];
    entry_path(path, sizeof path, e->name);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    unsigned char *buf = malloc(e->size ? e->size : 1);
    size_t got = buf ? fread(buf, 1, e->size, f) : 0;
    fclose(f);
    const char *why = NULL;
    const kvdisk_header *h = &e->h;
    uint64_t body_end = KV_HEADER + (uint64_t)h->key_len + h->payload_bytes;
    if (!buf || got != e->size) why = "short read";
    else if ((h->flags & KV_FLAG_CRC) && crc32_update(0, buf + KV_HEADER, e->size - KV_HEADER) != get32(buf + 20)) why = "checksum mismatch";
    else if (memcmp(buf + KV_HEADER, text, h->key_len)) why = "key text differs from its name";
    else if (!(h->flags & KV_FLAG_TOKENS)) why = "no token list (foreign writer)";
    else {
        uint64_t off = body_end;
        if (h->flags & KV_FLAG_TOOLMAP) {
            /* skip a ds4 tool map: u32 count, then (u32 id len, u32 dsml len, bytes) */
            if (off + 8 > e->size || memcmp(buf + off, "KTM", 3)) why = "bad tool map trailer";
            else {
                uint32_t cnt = get32(buf + off + 4);
                off += 8;
                for (uint32_t i = 0; i < cnt && !why; i++) {
                    if (off + 8 > e->size) { why = "bad tool map trailer"; break; }
                    uint64_t a = get32(buf + off), b = get32(buf + off + 4);
                    off += 8 + a + b;
                    if (off > e->size) why = "bad tool map trailer";
                }
            }
        }
        uint32_t tail_n = 0;
        uint64_t ids = off + 8;
        if (!why && (off + 8 > e->size || memcmp(buf + off, "KTK", 3) || (buf[off + 3] != 1 && buf[off + 3] != 2) || get32(buf + off + 4) != h->n_tokens))
            why = "bad token trailer";
        if (!why && buf[off + 3] == 2) {
            if (off + 12 > e->size || (tail_n = get32(buf + off + 8)) > 4) why = "bad token trailer";
            ids += 4;
        }
        if (!why && ids + 4ull * (h->n_tokens + tail_n) > e->size) why = "bad token trailer";
        if (!why) {
            if (minke_session_deserialize(s, buf + KV_HEADER + h->key_len, h->payload_bytes)) why = minke_last_error();
            else if (minke_session_pos(s) != (int)h->n_tokens) why = "payload position differs from the token count";
        }
        if (!why) {
            *n_tok = (int)h->n_tokens;
            *tok = malloc(4ull * h->n_tokens);
            for (uint32_t i = 0; i < h->n_tokens; i++) (*tok)[i] = (int32_t)get32(buf + ids + 4 * i);
            *n_tail = (int)tail_n;
            *tail = malloc(4ull * tail_n + 4);
            for (uint32_t i = 0; i < tail_n; i++) (*tail)[i] = (int32_t)get32(buf + ids + 4ull * (h->n_tokens + i));
        }
    }
    free(buf);
    if (why) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s", why);
        minke_session_reset(s);
        reject(e->name, msg);
        return -1;
    }
    /* touch: hits+1, last_used = now (header only; the checksum covers the body) */
    f = fopen(path, "r+b");
    if (f) {
        unsigned char hb[8];
        put32(hb, h->hits + 1);
        fseek(f, 12, SEEK_SET);
        fwrite(hb, 1, 4, f);
        put64(hb, (uint64_t)time(NULL));
        fseek(f, 32, SEEK_SET);
        fwrite(hb, 1, 8, f);
        fclose(f);
    }
    if (g_cfg->kv_cold_max_tokens > 0 && (int)h->n_tokens > g_cfg->kv_cold_max_tokens) unlink(path); /* consumed: the live session re-saves it */
    server_log("kv cache: loaded %s (%u tokens, %u key bytes)", e->name, h->n_tokens, h->key_len);
    return 0;
}

size_t kvdisk_load_prefix(minke_session *s, const char *text, size_t len, int32_t **tok, int *n_tok, int32_t **tail, int *n_tail) {
    *tok = NULL;
    *n_tok = 0;
    *tail = NULL;
    *n_tail = 0;
    if (!g_enabled) return 0;
    entry *v = NULL;
    int n = scan(&v);
    if (n > 1) qsort(v, (size_t)n, sizeof *v, cmp_keylen);
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        const kvdisk_header *h = &v[i].h;
        if ((int)h->n_tokens < g_cfg->kv_min_tokens || h->ctx > (uint32_t)g_cfg->ctx || h->key_len > len || (int)h->n_tokens >= g_cfg->ctx) continue;
        char hex[41];
        sha1_hex(text, h->key_len, hex);
        if (memcmp(hex, v[i].name, 40)) continue;
        if (load_entry(s, &v[i], text, tok, n_tok, tail, n_tail) == 0) { used = h->key_len; break; }
    }
    free(v);
    return used;
}
