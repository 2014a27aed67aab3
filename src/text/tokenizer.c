/* tokenizer.c: DeepSeek V4 byte-level BPE (see tokenizer.h, serving.md §1).
 *
 * Pipeline per encode call: added-token extraction with a byte trie
 * (leftmost, longest), pre-tokenization of each remaining segment with the
 * three "joyai-llm" regex passes re-expressed as a hand-written scanner over
 * code-point classes (exactly the regex semantics; see pass3_match), then
 * BPE of every piece on token ids: merges are keyed by the id pair, so no
 * string is built while merging.
 */
#include "text/tokenizer.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "text/unicode.h"

/* ---------------------------------------------------------------- helpers */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a, then a final mix */
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ull; }
    h ^= h >> 29; h *= 0xbf58476d1ce4e5b9ull; h ^= h >> 32;
    return h;
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return x;
}

static size_t pow2_at_least(size_t n) {
    size_t p = 16;
    while (p < n) p <<= 1;
    return p;
}

/* GPT-2 byte alphabet (serving.md §1.4). */
static uint32_t byte_to_cp_table[256];
static int16_t cp_to_byte_table[0x144];
static void byte_tables_fill(void) {
    uint32_t next = 0x100;
    for (int b = 0; b < 256; b++) {
        int direct = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        byte_to_cp_table[b] = direct ? (uint32_t)b : next++;
    }
    for (int i = 0; i < 0x144; i++) cp_to_byte_table[i] = -1;
    for (int b = 0; b < 256; b++) cp_to_byte_table[byte_to_cp_table[b]] = (int16_t)b;
}
static void byte_tables_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, byte_tables_fill);
}

/* ---------------------------------------------------------------- structures */

typedef struct {
    uint64_t key;    /* (left << 32) | right; UINT64_MAX = empty */
    int32_t rank;
    int32_t merged;
} pair_slot;

typedef struct {
    int32_t first_child, next_sibling;
    int32_t token;   /* token ending here, or -1 */
    unsigned char byte;
} trie_node;

struct tokenizer {
    size_t n_vocab;
    /* vocabulary strings (byte-level alphabet), NUL-separated */
    char *str_arena;
    uint32_t *str_off, *str_len;
    /* decoded bytes per token */
    char *bytes_arena;
    uint32_t *bytes_off, *bytes_len;
    size_t max_token_bytes;
    uint8_t *is_added;
    /* string -> id */
    int32_t *str_hash;
    size_t str_hash_mask;
    /* (left id, right id) -> rank, merged id */
    pair_slot *pairs;
    size_t pairs_mask;
    size_t n_merges;
    int32_t byte_token[256];
    /* added tokens */
    trie_node *trie;
    size_t trie_n, trie_cap;
    uint8_t trie_first[256];
    int32_t special[TOK_SPECIAL_COUNT];
};

static const char *const special_strings[TOK_SPECIAL_COUNT] = {
    [TOK_BOS] = "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    [TOK_EOS] = "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    [TOK_PAD] = "<\xef\xbd\x9c\xe2\x96\x81pad\xe2\x96\x81\xef\xbd\x9c>",
    [TOK_USER] = "<\xef\xbd\x9cUser\xef\xbd\x9c>",
    [TOK_ASSISTANT] = "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>",
    [TOK_THINK] = "<think>",
    [TOK_THINK_END] = "</think>",
    [TOK_DSML] = "\xef\xbd\x9c" "DSML\xef\xbd\x9c",
    [TOK_LATEST_REMINDER] = "<\xef\xbd\x9clatest_reminder\xef\xbd\x9c>",
    [TOK_ACTION] = "<\xef\xbd\x9c" "action\xef\xbd\x9c>",
    [TOK_QUERY] = "<\xef\xbd\x9cquery\xef\xbd\x9c>",
    [TOK_AUTHORITY] = "<\xef\xbd\x9c" "authority\xef\xbd\x9c>",
    [TOK_DOMAIN] = "<\xef\xbd\x9c" "domain\xef\xbd\x9c>",
    [TOK_TITLE] = "<\xef\xbd\x9ctitle\xef\xbd\x9c>",
    [TOK_READ_URL] = "<\xef\xbd\x9cread_url\xef\xbd\x9c>",
    [TOK_EXTRACTED_URL] = "<\xef\xbd\x9c" "extracted_url\xef\xbd\x9c>",
    [TOK_FIM_HOLE] = "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>",
    [TOK_FIM_BEGIN] = "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
    [TOK_FIM_END] = "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
    [TOK_EOT] = "<|EOT|>",
};

const char *tokenizer_special_string(enum tok_special which) {
    if ((int)which < 0 || which >= TOK_SPECIAL_COUNT) return NULL;
    return special_strings[which];
}

/* ---------------------------------------------------------------- lookups */

static int32_t find_n(const tokenizer *t, const char *s, size_t n) {
    size_t i = (size_t)hash_bytes(s, n) & t->str_hash_mask;
    for (;;) {
        int32_t id = t->str_hash[i];
        if (id < 0) return -1;
        if (t->str_len[id] == n && !memcmp(t->str_arena + t->str_off[id], s, n)) return id;
        i = (i + 1) & t->str_hash_mask;
    }
}

int32_t tokenizer_find(const tokenizer *t, const char *token_string) {
    if (!t || !token_string) return -1;
    return find_n(t, token_string, strlen(token_string));
}

static inline const pair_slot *pair_lookup(const tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i = (size_t)hash_u64(key) & t->pairs_mask;
    for (;;) {
        const pair_slot *s = &t->pairs[i];
        if (s->key == key) return s;
        if (s->key == UINT64_MAX) return NULL;
        i = (i + 1) & t->pairs_mask;
    }
}

size_t tokenizer_n_vocab(const tokenizer *t) { return t ? t->n_vocab : 0; }
size_t tokenizer_max_token_bytes(const tokenizer *t) { return t ? t->max_token_bytes : 0; }

const char *tokenizer_token_bytes(const tokenizer *t, int32_t id, size_t *len) {
    if (!t || id < 0 || (size_t)id >= t->n_vocab) { if (len) *len = 0; return NULL; }
    if (len) *len = t->bytes_len[id];
    return t->bytes_arena + t->bytes_off[id];
}

const char *tokenizer_token_string(const tokenizer *t, int32_t id) {
    if (!t || id < 0 || (size_t)id >= t->n_vocab) return NULL;
    return t->str_arena + t->str_off[id];
}

int tokenizer_is_added(const tokenizer *t, int32_t id) {
    if (!t || id < 0 || (size_t)id >= t->n_vocab) return 0;
    return t->is_added[id];
}

int32_t tokenizer_special(const tokenizer *t, enum tok_special which) {
    if (!t || (int)which < 0 || which >= TOK_SPECIAL_COUNT) return -1;
    return t->special[which];
}
int32_t tokenizer_bos(const tokenizer *t) { return tokenizer_special(t, TOK_BOS); }
int32_t tokenizer_eos(const tokenizer *t) { return tokenizer_special(t, TOK_EOS); }

int tokenizer_check_required(const tokenizer *t, char *err, size_t errlen) {
    static const enum tok_special req[] = {TOK_BOS, TOK_EOS, TOK_USER, TOK_ASSISTANT,
                                           TOK_THINK, TOK_THINK_END, TOK_DSML};
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (tokenizer_special(t, req[i]) < 0) {
            gguf_set_err(err, errlen, "tokenizer lacks the required special token %s", special_strings[req[i]]);
            return -1;
        }
    return 0;
}

/* ---------------------------------------------------------------- construction */

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    free(t->str_arena); free(t->str_off); free(t->str_len);
    free(t->bytes_arena); free(t->bytes_off); free(t->bytes_len);
    free(t->is_added); free(t->str_hash); free(t->pairs); free(t->trie);
    free(t);
}

static int trie_add(tokenizer *t, const char *s, size_t n, int32_t id) {
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int32_t ch = t->trie[node].first_child;
        while (ch >= 0 && t->trie[ch].byte != c) ch = t->trie[ch].next_sibling;
        if (ch < 0) {
            if (t->trie_n == t->trie_cap) {
                size_t cap = t->trie_cap * 2;
                trie_node *nt = realloc(t->trie, cap * sizeof *nt);
                if (!nt) return -1;
                t->trie = nt;
                t->trie_cap = cap;
            }
            ch = (int32_t)t->trie_n++;
            t->trie[ch] = (trie_node){.first_child = -1, .next_sibling = t->trie[node].first_child,
                                      .token = -1, .byte = c};
            t->trie[node].first_child = ch;
        }
        node = ch;
    }
    /* the first id wins for duplicate strings, as in a vocabulary map */
    if (t->trie[node].token < 0) t->trie[node].token = id;
    t->trie_first[(unsigned char)s[0]] = 1;
    return 0;
}

tokenizer *tokenizer_from_arrays(const gguf_str *tokens, const int32_t *token_types, size_t n_tokens,
                                 const gguf_str *merges, size_t n_merges, char *err, size_t errlen) {
    byte_tables_init();
    if (!tokens || n_tokens == 0) { gguf_set_err(err, errlen, "tokenizer has an empty token table"); return NULL; }
    if (n_tokens > (size_t)INT32_MAX / 2) { gguf_set_err(err, errlen, "tokenizer token table too large"); return NULL; }
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) { gguf_set_err(err, errlen, "out of memory"); return NULL; }
    t->n_vocab = n_tokens;
    size_t total = 0;
    for (size_t i = 0; i < n_tokens; i++) total += tokens[i].len + 1;
    if (total > UINT32_MAX) { gguf_set_err(err, errlen, "tokenizer strings too large"); goto fail; }
    t->str_arena = malloc(total);
    t->str_off = malloc(n_tokens * sizeof *t->str_off);
    t->str_len = malloc(n_tokens * sizeof *t->str_len);
    t->is_added = calloc(n_tokens, 1);
    size_t hcap = pow2_at_least(n_tokens * 2);
    t->str_hash = malloc(hcap * sizeof *t->str_hash);
    t->str_hash_mask = hcap - 1;
    if (!t->str_arena || !t->str_off || !t->str_len || !t->is_added || !t->str_hash) {
        gguf_set_err(err, errlen, "out of memory");
        goto fail;
    }
    memset(t->str_hash, 0xff, hcap * sizeof *t->str_hash);
    size_t pos = 0;
    for (size_t i = 0; i < n_tokens; i++) {
        if (tokens[i].len && !tokens[i].ptr) { gguf_set_err(err, errlen, "token %zu has no data", i); goto fail; }
        if (tokens[i].len) memcpy(t->str_arena + pos, tokens[i].ptr, tokens[i].len);
        t->str_arena[pos + tokens[i].len] = 0;
        t->str_off[i] = (uint32_t)pos;
        t->str_len[i] = (uint32_t)tokens[i].len;
        pos += tokens[i].len + 1;
        /* insert unless the same string is already there (first id wins) */
        if (find_n(t, tokens[i].ptr ? tokens[i].ptr : "", tokens[i].len) >= 0) continue;
        size_t h = (size_t)hash_bytes(tokens[i].ptr ? tokens[i].ptr : "", tokens[i].len) & t->str_hash_mask;
        while (t->str_hash[h] >= 0) h = (h + 1) & t->str_hash_mask;
        t->str_hash[h] = (int32_t)i;
    }

    /* byte tokens */
    for (int b = 0; b < 256; b++) {
        char buf[4];
        size_t n = uc_encode(byte_to_cp_table[b], buf);
        t->byte_token[b] = find_n(t, buf, n);
        if (t->byte_token[b] < 0) {
            gguf_set_err(err, errlen, "tokenizer lacks the byte token for 0x%02x", b);
            goto fail;
        }
    }

    /* merges */
    size_t pcap = pow2_at_least(n_merges * 2 + 2);
    t->pairs = malloc(pcap * sizeof *t->pairs);
    uint8_t *is_merge_result = token_types ? NULL : calloc(n_tokens, 1);
    char *cat = NULL;
    size_t cat_cap = 0;
    if (!t->pairs || (!token_types && !is_merge_result)) { free(is_merge_result); gguf_set_err(err, errlen, "out of memory"); goto fail; }
    t->pairs_mask = pcap - 1;
    for (size_t i = 0; i < pcap; i++) t->pairs[i].key = UINT64_MAX;
    for (size_t r = 0; r < n_merges; r++) {
        const char *m = merges[r].ptr;
        size_t n = merges[r].len;
        const char *sp = m && n ? memchr(m, ' ', n) : NULL;
        if (!sp || sp == m || sp == m + n - 1) {
            gguf_set_err(err, errlen, "tokenizer merge %zu is not \"LEFT RIGHT\"", r);
            free(is_merge_result); free(cat);
            goto fail;
        }
        size_t ln = (size_t)(sp - m), rn = n - ln - 1;
        int32_t a = find_n(t, m, ln), b = find_n(t, sp + 1, rn);
        if (ln + rn > cat_cap) {
            cat_cap = (ln + rn) * 2;
            char *nc = realloc(cat, cat_cap);
            if (!nc) { free(is_merge_result); free(cat); gguf_set_err(err, errlen, "out of memory"); goto fail; }
            cat = nc;
        }
        memcpy(cat, m, ln);
        memcpy(cat + ln, sp + 1, rn);
        int32_t c = find_n(t, cat, ln + rn);
        if (a < 0 || b < 0 || c < 0) {
            gguf_set_err(err, errlen, "tokenizer merge %zu (\"%.*s\") uses a token missing from the vocabulary", r,
                   (int)(n > 60 ? 60 : n), m);
            free(is_merge_result); free(cat);
            goto fail;
        }
        if (is_merge_result) is_merge_result[c] = 1;
        uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
        size_t h = (size_t)hash_u64(key) & t->pairs_mask;
        while (t->pairs[h].key != UINT64_MAX && t->pairs[h].key != key) h = (h + 1) & t->pairs_mask;
        if (t->pairs[h].key == key) continue; /* a repeated merge keeps its first (best) rank */
        t->pairs[h] = (pair_slot){.key = key, .rank = (int32_t)r, .merged = c};
    }
    free(cat);
    t->n_merges = n_merges;

    /* which tokens are added (matched in text, decoded verbatim) */
    for (size_t i = 0; i < n_tokens; i++) {
        if (token_types) t->is_added[i] = token_types[i] == 3 || token_types[i] == 4;
        else t->is_added[i] = !is_merge_result[i];
    }
    if (!token_types)
        for (int b = 0; b < 256; b++) t->is_added[t->byte_token[b]] = 0;
    free(is_merge_result);
    /* the chat format's special strings are always matched whole, whatever a
     * converter wrote as their type (ds4 likewise finds them by string) */
    for (int k = 0; k < TOK_SPECIAL_COUNT; k++) {
        int32_t id = tokenizer_find(t, special_strings[k]);
        if (id >= 0) t->is_added[id] = 1;
    }

    /* decoded bytes */
    t->bytes_arena = malloc(total);
    t->bytes_off = malloc(n_tokens * sizeof *t->bytes_off);
    t->bytes_len = malloc(n_tokens * sizeof *t->bytes_len);
    if (!t->bytes_arena || !t->bytes_off || !t->bytes_len) { gguf_set_err(err, errlen, "out of memory"); goto fail; }
    pos = 0;
    for (size_t i = 0; i < n_tokens; i++) {
        const unsigned char *s = (const unsigned char *)t->str_arena + t->str_off[i];
        size_t n = t->str_len[i], start = pos;
        if (t->is_added[i]) {
            memcpy(t->bytes_arena + pos, s, n);
            pos += n;
        } else {
            /* each alphabet code point is one raw byte; anything else is kept as it is */
            size_t k = 0;
            while (k < n) {
                uint32_t cp;
                size_t l = uc_decode(s + k, n - k, &cp);
                if (cp < 0x144 && cp_to_byte_table[cp] >= 0) t->bytes_arena[pos++] = (char)cp_to_byte_table[cp];
                else { memcpy(t->bytes_arena + pos, s + k, l); pos += l; }
                k += l;
            }
        }
        t->bytes_off[i] = (uint32_t)start;
        t->bytes_len[i] = (uint32_t)(pos - start);
        if (pos - start > t->max_token_bytes) t->max_token_bytes = pos - start;
    }

    /* added-token trie */
    t->trie_cap = 1024;
    t->trie = malloc(t->trie_cap * sizeof *t->trie);
    if (!t->trie) { gguf_set_err(err, errlen, "out of memory"); goto fail; }
    t->trie[0] = (trie_node){.first_child = -1, .next_sibling = -1, .token = -1, .byte = 0};
    t->trie_n = 1;
    for (size_t i = 0; i < n_tokens; i++)
        if (t->is_added[i] && t->str_len[i] &&
            trie_add(t, t->str_arena + t->str_off[i], t->str_len[i], (int32_t)i)) {
            gguf_set_err(err, errlen, "out of memory");
            goto fail;
        }

    for (int k = 0; k < TOK_SPECIAL_COUNT; k++) t->special[k] = tokenizer_find(t, special_strings[k]);
    return t;
fail:
    tokenizer_free(t);
    return NULL;
}

static int gguf_kv_to_strings(const gguf_kv *kv, gguf_str **out) {
    if (kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING) return -1;
    *out = malloc((kv->arr_n ? kv->arr_n : 1) * sizeof **out);
    if (!*out) return -1;
    if (gguf_arr_strings(kv, *out)) { free(*out); *out = NULL; return -1; }
    return 0;
}

tokenizer *tokenizer_from_gguf(const gguf_file *f, char *err, size_t errlen) {
    if (!f) { gguf_set_err(err, errlen, "no GGUF file"); return NULL; }
    const gguf_kv *ktok = gguf_find_kv(f, "tokenizer.ggml.tokens");
    if (!ktok) {
        gguf_set_err(err, errlen, "this GGUF has no tokenizer (tokenizer.ggml.tokens missing)");
        return NULL;
    }
    gguf_str model;
    if (!gguf_get_str(f, "tokenizer.ggml.model", &model) &&
        !(model.len == 4 && !memcmp(model.ptr, "gpt2", 4))) {
        gguf_set_err(err, errlen, "unsupported tokenizer model \"%.*s\" (expected gpt2 byte-level BPE)",
               (int)(model.len > 40 ? 40 : model.len), model.ptr);
        return NULL;
    }
    const gguf_kv *kmer = gguf_find_kv(f, "tokenizer.ggml.merges");
    if (!kmer) { gguf_set_err(err, errlen, "this GGUF's tokenizer has no merges (tokenizer.ggml.merges missing)"); return NULL; }
    gguf_str *toks = NULL, *mers = NULL;
    int32_t *types = NULL;
    tokenizer *t = NULL;
    if (gguf_kv_to_strings(ktok, &toks)) { gguf_set_err(err, errlen, "tokenizer.ggml.tokens is not an array of strings"); goto done; }
    if (gguf_kv_to_strings(kmer, &mers)) { gguf_set_err(err, errlen, "tokenizer.ggml.merges is not an array of strings"); goto done; }
    const gguf_kv *ktype = gguf_find_kv(f, "tokenizer.ggml.token_type");
    if (ktype) {
        if (ktype->type != GGUF_ARRAY || ktype->arr_n != ktok->arr_n ||
            !(ktype->arr_type == GGUF_I32 || ktype->arr_type == GGUF_U32 || ktype->arr_type == GGUF_I8 ||
              ktype->arr_type == GGUF_U8 || ktype->arr_type == GGUF_I16 || ktype->arr_type == GGUF_U16)) {
            gguf_set_err(err, errlen, "tokenizer.ggml.token_type is not an integer array as long as the token table");
            goto done;
        }
        types = malloc((ktype->arr_n ? ktype->arr_n : 1) * sizeof *types);
        if (!types) { gguf_set_err(err, errlen, "out of memory"); goto done; }
        for (uint64_t i = 0; i < ktype->arr_n; i++) {
            double v = 0;
            if (gguf_arr_get_num(ktype, i, &v)) { gguf_set_err(err, errlen, "bad tokenizer.ggml.token_type"); goto done; }
            types[i] = (v >= -1e6 && v <= 1e6) ? (int32_t)v : 0; /* nonsense values: "undefined" */
        }
    }
    t = tokenizer_from_arrays(toks, types, (size_t)ktok->arr_n, mers, (size_t)kmer->arr_n, err, errlen);
done:
    free(toks); free(mers); free(types);
    return t;
}

/* ---------------------------------------------------------------- id vector */

typedef struct {
    int32_t *v;
    size_t n, cap;
    int oom;
} idvec;

static inline void idvec_push(idvec *o, int32_t id) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *nv = realloc(o->v, cap * sizeof *nv);
        if (!nv) { o->oom = 1; return; }
        o->v = nv;
        o->cap = cap;
    }
    o->v[o->n++] = id;
}

/* ---------------------------------------------------------------- BPE */

/* Scratch for one encode call (pieces are merged one after another). */
typedef struct {
    int32_t *sym;      /* current symbols (ids) */
    int32_t *rank;     /* rank of pair (k, k+1), INT32_MAX if none */
    int32_t *merged;   /* id of that pair's merge */
    int32_t *prev, *next;
    /* heap size stays below 2n: n-1 initial pairs, then each merge pops one and pushes at most two */
    struct heap_ent { int32_t rank, pos, left, right; } *heap;
    size_t cap, heap_n;
    /* pre-tokenizer arrays */
    uint32_t *cp;
    uint8_t *cls;
    uint32_t *off;
    size_t ccap;
    struct piece_cache *cache; /* NULL for short inputs */
    int oom;
} scratch;

/* Per-call cache of short pieces -> ids: in long texts the same words come
 * back again and again, and a hit skips every pair lookup. Direct-mapped,
 * owned by one encode call, so no locking. */
#define CACHE_BYTES 26
#define CACHE_IDS 8
#define CACHE_SLOTS 4096
#define CACHE_MIN_TEXT 2048
struct piece_cache {
    struct {
        uint8_t len, nids;
        char bytes[CACHE_BYTES];
        int32_t ids[CACHE_IDS];
    } e[CACHE_SLOTS];
};

static int scratch_reserve(scratch *s, size_t n) {
    if (n <= s->cap) return 0;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < n) cap *= 2;
    int32_t *a = realloc(s->sym, cap * sizeof *a);
    if (a) s->sym = a;
    int32_t *b = realloc(s->rank, cap * sizeof *b);
    if (b) s->rank = b;
    int32_t *c = realloc(s->merged, cap * sizeof *c);
    if (c) s->merged = c;
    int32_t *d = realloc(s->prev, cap * sizeof *d);
    if (d) s->prev = d;
    int32_t *e = realloc(s->next, cap * sizeof *e);
    if (e) s->next = e;
    struct heap_ent *h = realloc(s->heap, cap * 2 * sizeof *h);
    if (h) s->heap = h;
    if (!a || !b || !c || !d || !e || !h) { s->oom = 1; return -1; }
    s->cap = cap;
    return 0;
}

static inline void rank_of(const tokenizer *t, int32_t a, int32_t b, int32_t *rank, int32_t *merged) {
    const pair_slot *p = pair_lookup(t, a, b);
    if (p) { *rank = p->rank; *merged = p->merged; }
    else { *rank = INT32_MAX; *merged = -1; }
}

/* Small pieces: an array of symbols with the rank of each adjacent pair;
 * each merge rescans the ranks (plain ints) and re-looks-up only the two
 * pairs that changed. */
static void bpe_small(const tokenizer *t, scratch *s, size_t n, idvec *out) {
    int32_t *sym = s->sym, *rank = s->rank, *merged = s->merged;
    for (size_t k = 0; k + 1 < n; k++) rank_of(t, sym[k], sym[k + 1], &rank[k], &merged[k]);
    while (n > 1) {
        size_t best = 0;
        int32_t br = rank[0];
        for (size_t k = 1; k + 1 < n; k++)
            if (rank[k] < br) { br = rank[k]; best = k; }
        if (br == INT32_MAX) break;
        sym[best] = merged[best];
        /* symbols best+2.. and pairs best+2.. shift down by one */
        size_t tail_pairs = n >= best + 3 ? n - best - 3 : 0;
        memmove(sym + best + 1, sym + best + 2, (n - best - 2) * sizeof *sym);
        memmove(rank + best + 1, rank + best + 2, tail_pairs * sizeof *rank);
        memmove(merged + best + 1, merged + best + 2, tail_pairs * sizeof *merged);
        n--;
        if (best > 0) rank_of(t, sym[best - 1], sym[best], &rank[best - 1], &merged[best - 1]);
        if (best + 1 < n) rank_of(t, sym[best], sym[best + 1], &rank[best], &merged[best]);
    }
    for (size_t k = 0; k < n; k++) idvec_push(out, sym[k]);
}

static inline int heap_less(const struct heap_ent *a, const struct heap_ent *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(scratch *s, struct heap_ent e) {
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&e, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = e;
}

static struct heap_ent heap_pop(scratch *s) {
    struct heap_ent top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!heap_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static void heap_try_push(const tokenizer *t, scratch *s, int32_t left, int32_t right) {
    int32_t r, m;
    rank_of(t, s->sym[left], s->sym[right], &r, &m);
    if (r != INT32_MAX) heap_push(s, (struct heap_ent){r, left, s->sym[left], s->sym[right]});
}

/* Long pieces: a linked list of symbols and a min-heap of candidate pairs
 * ordered by (rank, position), entries checked for staleness when popped.
 * Same result as the small path: lowest rank first, leftmost on ties. */
static void bpe_large(const tokenizer *t, scratch *s, size_t n, idvec *out) {
    int32_t *sym = s->sym, *prev = s->prev, *next = s->next;
    for (size_t k = 0; k < n; k++) { prev[k] = (int32_t)k - 1; next[k] = k + 1 < n ? (int32_t)k + 1 : -1; }
    s->heap_n = 0;
    for (size_t k = 0; k + 1 < n; k++) heap_try_push(t, s, (int32_t)k, (int32_t)k + 1);
    while (s->heap_n) {
        struct heap_ent e = heap_pop(s);
        int32_t l = e.pos, r = next[l];
        if (sym[l] != e.left || r < 0 || sym[r] != e.right) continue; /* stale */
        int32_t rk, m;
        rank_of(t, sym[l], sym[r], &rk, &m);
        sym[l] = m;
        sym[r] = -1;
        next[l] = next[r];
        if (next[r] >= 0) prev[next[r]] = l;
        if (prev[l] >= 0) heap_try_push(t, s, prev[l], l);
        if (next[l] >= 0) heap_try_push(t, s, l, next[l]);
    }
    for (int32_t k = 0; k >= 0; k = next[k]) idvec_push(out, sym[k]);
}

#define BPE_SMALL_MAX 48

static void bpe_piece(const tokenizer *t, scratch *s, const unsigned char *p, size_t n, idvec *out) {
    if (n == 0) return;
    if (n == 1) { idvec_push(out, t->byte_token[p[0]]); return; }
    size_t slot = 0;
    if (s->cache && n <= CACHE_BYTES) {
        slot = (size_t)hash_bytes((const char *)p, n) & (CACHE_SLOTS - 1);
        if (s->cache->e[slot].len == n && !memcmp(s->cache->e[slot].bytes, p, n)) {
            for (unsigned k = 0; k < s->cache->e[slot].nids; k++) idvec_push(out, s->cache->e[slot].ids[k]);
            return;
        }
    }
    if (scratch_reserve(s, n)) return;
    for (size_t k = 0; k < n; k++) s->sym[k] = t->byte_token[p[k]];
    size_t first = out->n;
    if (n <= BPE_SMALL_MAX) bpe_small(t, s, n, out);
    else bpe_large(t, s, n, out);
    if (s->cache && n <= CACHE_BYTES && !out->oom && out->n - first <= CACHE_IDS) {
        s->cache->e[slot].len = (uint8_t)n;
        s->cache->e[slot].nids = (uint8_t)(out->n - first);
        memcpy(s->cache->e[slot].bytes, p, n);
        memcpy(s->cache->e[slot].ids, out->v + first, (out->n - first) * sizeof(int32_t));
    }
}

/* ---------------------------------------------------------------- pre-tokenizer */

#define C_CRLF 64u  /* extra class bit: CR or LF */

static inline int is_ascii_alpha(uint32_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }
static inline int is_ascii_punct(uint32_t c) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
}

/* End of the pass-3 match at char i of [i, end), or i if nothing matches there.
 * Alternatives, tried in order (leftmost-first, greedy):
 *  (a) [ASCII punct][A-Za-z]+
 *  (b) [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
 *  (c) ' '?[\p{P}\p{S}]+[\r\n]*
 *  (d) \s*[\r\n]+    (e) \s+(?!\S)    (f) \s+ */
static size_t pass3_match(const uint32_t *cp, const uint8_t *cls, size_t i, size_t end) {
    uint32_t c = cp[i];
    unsigned k = cls[i];
    if (is_ascii_punct(c) && i + 1 < end && is_ascii_alpha(cp[i + 1])) {
        size_t j = i + 2;
        while (j < end && is_ascii_alpha(cp[j])) j++;
        return j;
    }
    if (!(k & (UC_L | UC_P | UC_S | C_CRLF))) {
        size_t j = i + 1;
        while (j < end && (cls[j] & (UC_L | UC_M))) j++;
        if (j > i + 1) return j;
    }
    if (k & (UC_L | UC_M)) {
        size_t j = i + 1;
        while (j < end && (cls[j] & (UC_L | UC_M))) j++;
        return j;
    }
    {
        size_t st = (c == ' ' && i + 1 < end && (cls[i + 1] & (UC_P | UC_S))) ? i + 1 : i;
        if (cls[st] & (UC_P | UC_S)) {
            size_t j = st + 1;
            while (j < end && (cls[j] & (UC_P | UC_S))) j++;
            while (j < end && (cls[j] & C_CRLF)) j++;
            return j;
        }
    }
    if (k & UC_WS) {
        size_t j = i, last = SIZE_MAX;
        while (j < end && (cls[j] & UC_WS)) {
            if (cls[j] & C_CRLF) last = j;
            j++;
        }
        if (last != SIZE_MAX) return last + 1;
        if (j == end) return j;
        if (j - 1 > i) return j - 1;
        return j;
    }
    return i;
}

typedef struct {
    const tokenizer *t;  /* NULL: pieces go to piece_cb instead of BPE */
    scratch *s;
    const unsigned char *text;
    idvec *out;
    void (*piece_cb)(void *ctx, const char *piece, size_t len);
    void *cb_ctx;
} enc_ctx;

static inline void emit_piece(enc_ctx *e, size_t a, size_t b) {
    const uint32_t *off = e->s->off;
    if (e->t) bpe_piece(e->t, e->s, e->text + off[a], off[b] - off[a], e->out);
    else e->piece_cb(e->cb_ctx, (const char *)e->text + off[a], off[b] - off[a]);
}

static void pass3_run(enc_ctx *e, size_t a, size_t b) {
    const uint32_t *cp = e->s->cp;
    const uint8_t *cls = e->s->cls;
    size_t i = a, unmatched = SIZE_MAX;
    while (i < b) {
        size_t j = pass3_match(cp, cls, i, b);
        if (j == i) {
            if (unmatched == SIZE_MAX) unmatched = i;
            i++;
            continue;
        }
        if (unmatched != SIZE_MAX) { emit_piece(e, unmatched, i); unmatched = SIZE_MAX; }
        emit_piece(e, i, j);
        i = j;
    }
    if (unmatched != SIZE_MAX) emit_piece(e, unmatched, b);
}

enum { RUN_OTHER, RUN_NUM, RUN_CJK };

/* Pre-tokenize one segment (text between added tokens) and BPE each piece
 * (or hand it to e->piece_cb). */
static void pretok_segment(enc_ctx *e, const unsigned char *text, size_t len) {
    scratch *s = e->s;
    e->text = text;
    if (len == 0) return;
    if (len >= UINT32_MAX) { s->oom = 1; return; } /* offsets are 32-bit */
    if (len + 1 > s->ccap) {
        size_t cap = s->ccap ? s->ccap : 256;
        while (cap < len + 1) cap *= 2;
        uint32_t *a = realloc(s->cp, cap * sizeof *a);
        if (a) s->cp = a;
        uint8_t *b = realloc(s->cls, cap);
        if (b) s->cls = b;
        uint32_t *c = realloc(s->off, cap * sizeof *c);
        if (c) s->off = c;
        if (!a || !b || !c) { s->oom = 1; return; }
        s->ccap = cap;
    }
    uint32_t *cp = s->cp, *off = s->off;
    uint8_t *cls = s->cls;
    size_t nch = 0, i = 0;
    while (i < len) {
        uint32_t c;
        size_t l;
        if (text[i] < 0x80) { c = text[i]; l = 1; }
        else l = uc_decode(text + i, len - i, &c);
        unsigned k = c == UC_INVALID ? 0 : uc_class(c);
        if (c == '\r' || c == '\n') k |= C_CRLF;
        cp[nch] = c;
        cls[nch] = (uint8_t)k;
        off[nch] = (uint32_t)i;
        nch++;
        i += l;
    }
    off[nch] = (uint32_t)len;

    size_t a = 0;
    while (a < nch) {
        int kind = (cls[a] & UC_N) ? RUN_NUM : uc_is_cjk_pass2(cp[a]) ? RUN_CJK : RUN_OTHER;
        size_t b = a + 1;
        while (b < nch) {
            int kb = (cls[b] & UC_N) ? RUN_NUM : uc_is_cjk_pass2(cp[b]) ? RUN_CJK : RUN_OTHER;
            if (kb != kind) break;
            b++;
        }
        if (kind == RUN_NUM) {
            for (size_t q = a; q < b; q += 3) emit_piece(e, q, q + 3 < b ? q + 3 : b);
        } else {
            /* CJK runs go through pass 3 too: kana marks, ゛゜, ゠ and ・ are not letters */
            pass3_run(e, a, b);
        }
        a = b;
    }
}

/* Longest added token starting at text[0..len), or -1; *mlen gets its length. */
static int32_t match_added(const tokenizer *t, const unsigned char *text, size_t len, size_t *mlen) {
    int32_t node = 0, best = -1;
    for (size_t i = 0; i < len; i++) {
        int32_t ch = t->trie[node].first_child;
        while (ch >= 0 && t->trie[ch].byte != text[i]) ch = t->trie[ch].next_sibling;
        if (ch < 0) break;
        node = ch;
        if (t->trie[node].token >= 0) { best = t->trie[node].token; *mlen = i + 1; }
    }
    return best;
}

int tokenizer_encode_flags(const tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                           size_t *n) {
    *ids = NULL;
    *n = 0;
    if (!t) return -1;
    idvec out = {0};
    scratch s = {0};
    enc_ctx e = {.t = t, .s = &s, .out = &out};
    if (len >= CACHE_MIN_TEXT) s.cache = calloc(1, sizeof *s.cache); /* len 0 = empty slot */
    if ((flags & TOK_ADD_BOS) && t->special[TOK_BOS] >= 0) idvec_push(&out, t->special[TOK_BOS]);
    const unsigned char *u = (const unsigned char *)text;
    size_t seg = 0;
    if (!(flags & TOK_NO_SPECIAL) && t->trie[0].first_child >= 0) {
        for (size_t i = 0; i < len;) {
            if (!t->trie_first[u[i]]) { i++; continue; }
            size_t ml = 0;
            int32_t id = match_added(t, u + i, len - i, &ml);
            if (id < 0) { i++; continue; }
            pretok_segment(&e, u + seg, i - seg);
            idvec_push(&out, id);
            i += ml;
            seg = i;
        }
    }
    pretok_segment(&e, u + seg, len - seg);
    free(s.sym); free(s.rank); free(s.merged); free(s.prev); free(s.next); free(s.heap);
    free(s.cp); free(s.cls); free(s.off); free(s.cache);
    if (out.oom || s.oom) { free(out.v); return -1; }
    *ids = out.v;
    *n = out.n;
    return 0;
}

int tok_pretokenize(const char *text, size_t len, void (*piece)(void *ctx, const char *p, size_t n), void *ctx) {
    scratch s = {0};
    enc_ctx e = {.t = NULL, .s = &s, .piece_cb = piece, .cb_ctx = ctx};
    pretok_segment(&e, (const unsigned char *)text, len);
    free(s.cp); free(s.cls); free(s.off);
    return s.oom ? -1 : 0;
}

int tokenizer_encode(const tokenizer *t, const char *text, size_t len, int add_bos, int32_t **ids, size_t *n) {
    return tokenizer_encode_flags(t, text, len, add_bos ? TOK_ADD_BOS : 0, ids, n);
}

/* ---------------------------------------------------------------- decoding */

int tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    if (!t) return -1;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (size_t)ids[i] >= t->n_vocab) return -1;
        total += t->bytes_len[ids[i]];
    }
    char *buf = malloc(total + 1);
    if (!buf) return -1;
    size_t p = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(buf + p, t->bytes_arena + t->bytes_off[ids[i]], t->bytes_len[ids[i]]);
        p += t->bytes_len[ids[i]];
    }
    buf[p] = 0;
    *out = buf;
    *len = p;
    return 0;
}

size_t utf8_stream_safe_len(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = n, cont = 0;
    while (i > 0 && cont < 4 && (s[i - 1] & 0xC0) == 0x80) { i--; cont++; }
    if (i == 0) return n; /* only continuation bytes: nothing to wait for */
    unsigned lead = s[i - 1];
    size_t want = (lead >= 0xC2 && lead <= 0xDF) ? 2 : (lead >= 0xE0 && lead <= 0xEF) ? 3
                : (lead >= 0xF0 && lead <= 0xF4) ? 4 : 1;
    size_t have = n - (i - 1);
    return want > have ? i - 1 : n;
}

void tok_stream_init(tok_stream *s) { s->n_held = 0; }

size_t tok_stream_feed(tok_stream *s, const char *bytes, size_t len, char *out) {
    size_t n = s->n_held;
    memcpy(out, s->held, n);
    if (len) memcpy(out + n, bytes, len);
    n += len;
    size_t safe = utf8_stream_safe_len(out, n);
    s->n_held = (unsigned)(n - safe);
    memcpy(s->held, out + safe, s->n_held);
    return safe;
}

size_t tok_stream_feed_token(tok_stream *s, const tokenizer *t, int32_t id, char *out) {
    size_t len = 0;
    const char *b = tokenizer_token_bytes(t, id, &len);
    return tok_stream_feed(s, b, b ? len : 0, out);
}

size_t tok_stream_flush(tok_stream *s, char *out) {
    size_t n = s->n_held;
    memcpy(out, s->held, n);
    s->n_held = 0;
    return n;
}
