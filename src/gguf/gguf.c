/* gguf.c: GGUF v3 reader (mmap, every bound checked) and streaming writer.
 *
 * The reader treats the file as hostile: every count, length, dimension
 * product, offset and size is checked with overflow-safe arithmetic against
 * the bytes that remain, so a truncated or corrupt file produces one error
 * sentence naming the offending item and never an out-of-bounds read. Names
 * are indexed in hash tables so lookups stay cheap for 1328-tensor files and
 * duplicates (which would make lookups ambiguous) are refused.
 *
 * The writer keeps metadata and the tensor table in memory, computes every
 * tensor's offset from its declared shape and type, then streams the data
 * into PATH.tmp and renames it into place on success (atomic replace).
 */
#define _GNU_SOURCE
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant/quant.h"

#define GGUF_MAGIC 0x46554747u
#define GGUF_MAX_NEST 8 /* ds4 gives up beyond 8 levels of nested arrays */

/* ------------------------------------------------------------------ */
/* small helpers                                                       */

void gguf_set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static int add_overflows(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out);
}
static int mul_overflows(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}

/* round x up to a multiple of a (a > 0); -1 on overflow */
static int align_up(uint64_t x, uint64_t a, uint64_t *out) {
    uint64_t r = x % a;
    if (r == 0) { *out = x; return 0; }
    return add_overflows(x, a - r, out) ? -1 : 0;
}

static uint64_t hash_bytes(const char *p, uint64_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (uint64_t i = 0; i < n; i++) { h ^= (uint8_t)p[i]; h *= 1099511628211ull; }
    return h;
}

size_t gguf_vtype_size(uint32_t type) {
    switch (type) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

const char *gguf_vtype_name(uint32_t type) {
    static const char *names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                  "bool", "string", "array", "u64", "i64", "f64"};
    return type < sizeof names / sizeof names[0] ? names[type] : "?";
}

static int vtype_known(uint32_t type) { return type <= GGUF_F64; }

/* Printable, truncated copy of a (possibly binary) name for error messages. */
static const char *show_name(const char *p, uint64_t n, char *buf, size_t cap) {
    size_t j = 0;
    for (uint64_t i = 0; i < n && j + 4 < cap; i++) {
        unsigned char ch = (unsigned char)p[i];
        buf[j++] = (ch >= 32 && ch < 127) ? (char)ch : '?';
    }
    if (n > 0 && j + 4 >= cap) { buf[j++] = '.'; buf[j++] = '.'; buf[j++] = '.'; }
    buf[j] = 0;
    return buf;
}

/* ------------------------------------------------------------------ */
/* name index: open addressing over entry indices                      */

typedef struct name_index {
    uint64_t cap;         /* power of two, 0 when empty */
    uint64_t *slots;      /* entry index + 1, 0 = empty */
    const char *entries;  /* the indexed array: f->kv or f->tensors */
    size_t stride;        /* sizeof one entry */
    size_t name_off;      /* offsetof the entry's gguf_str name */
} name_index;

/* The slot holding the entry named p[0..n), or the empty slot where it would go. */
static uint64_t *index_probe(const name_index *ix, const char *p, uint64_t n) {
    uint64_t m = ix->cap - 1, h = hash_bytes(p, n) & m;
    while (ix->slots[h]) {
        const gguf_str *o = (const gguf_str *)(ix->entries + (ix->slots[h] - 1) * ix->stride + ix->name_off);
        if (o->len == n && !memcmp(o->ptr, p, n)) break;
        h = (h + 1) & m;
    }
    return &ix->slots[h];
}

/* Indexes entries[0..count). 0, -1 out of memory, or 1 with *dup the first
 * entry whose name repeats an earlier one. */
static int index_build(name_index *ix, const void *entries, uint64_t count, size_t stride, size_t name_off,
                       uint64_t *dup) {
    *ix = (name_index){0, NULL, entries, stride, name_off};
    if (count == 0) return 0;
    uint64_t cap = 16;
    while (cap < count * 2) cap <<= 1;
    ix->slots = calloc(cap, sizeof *ix->slots);
    if (!ix->slots) return -1;
    ix->cap = cap;
    for (uint64_t i = 0; i < count; i++) {
        const gguf_str *k = (const gguf_str *)(ix->entries + i * stride + name_off);
        uint64_t *slot = index_probe(ix, k->ptr, k->len);
        if (*slot) { *dup = i; return 1; }
        *slot = i + 1;
    }
    return 0;
}

/* The index of the entry named key, or -1. */
static int64_t index_find(const name_index *ix, const char *key) {
    if (!ix->cap || !key) return -1;
    uint64_t slot = *index_probe(ix, key, strlen(key));
    return slot ? (int64_t)slot - 1 : -1;
}

/* ------------------------------------------------------------------ */
/* reader                                                              */

typedef struct gguf_file_impl {
    gguf_file pub;       /* must stay first: gguf_file* and impl* are interchangeable */
    int owns_map;
    char *names;         /* arena of NUL-terminated tensor names */
    name_index kv_ix, t_ix;
} gguf_file_impl;

typedef struct cursor {
    const uint8_t *p;
    uint64_t size, pos;
    char *err;
    size_t errlen;
} cursor;

static int need(cursor *c, uint64_t n, const char *what) {
    if (n > c->size - c->pos) {
        gguf_set_err(c->err, c->errlen, "truncated file: %s at offset %llu needs %llu bytes, only %llu left",
                what, (unsigned long long)c->pos, (unsigned long long)n,
                (unsigned long long)(c->size - c->pos));
        return -1;
    }
    return 0;
}
static int rd_u32(cursor *c, uint32_t *v, const char *what) {
    if (need(c, 4, what)) return -1;
    memcpy(v, c->p + c->pos, 4);
    c->pos += 4;
    return 0;
}
static int rd_u64(cursor *c, uint64_t *v, const char *what) {
    if (need(c, 8, what)) return -1;
    memcpy(v, c->p + c->pos, 8);
    c->pos += 8;
    return 0;
}
static int rd_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t len;
    if (rd_u64(c, &len, what)) return -1;
    if (len > c->size - c->pos) {
        gguf_set_err(c->err, c->errlen, "%s at offset %llu: string length %llu exceeds the %llu bytes left in the file",
                what, (unsigned long long)(c->pos - 8), (unsigned long long)len,
                (unsigned long long)(c->size - c->pos));
        return -1;
    }
    s->len = len;
    s->ptr = (const char *)(c->p + c->pos);
    c->pos += len;
    return 0;
}

/* Skip one value of type `type` (for arrays: the element type and count follow). */
static int skip_value(cursor *c, uint32_t type, int depth, const char *what);

static int skip_array_body(cursor *c, uint32_t et, uint64_t n, int depth, const char *what) {
    if (!vtype_known(et)) {
        gguf_set_err(c->err, c->errlen, "%s: unknown array element type %u", what, et);
        return -1;
    }
    size_t es = gguf_vtype_size(et);
    if (es) {
        uint64_t bytes;
        if (mul_overflows(n, es, &bytes) || bytes > c->size - c->pos) {
            gguf_set_err(c->err, c->errlen, "%s: array of %llu %s elements exceeds the %llu bytes left in the file",
                    what, (unsigned long long)n, gguf_vtype_name(et), (unsigned long long)(c->size - c->pos));
            return -1;
        }
        c->pos += bytes;
        return 0;
    }
    /* strings and arrays consume >= 8 bytes each, so this loop ends at the file end */
    if (n > (c->size - c->pos) / 8) {
        gguf_set_err(c->err, c->errlen, "%s: array of %llu %s elements exceeds the %llu bytes left in the file",
                what, (unsigned long long)n, gguf_vtype_name(et), (unsigned long long)(c->size - c->pos));
        return -1;
    }
    for (uint64_t i = 0; i < n; i++)
        if (skip_value(c, et, depth, what)) return -1;
    return 0;
}

static int skip_value(cursor *c, uint32_t type, int depth, const char *what) {
    if (type == GGUF_STRING) {
        gguf_str s;
        return rd_str(c, &s, what);
    }
    if (type == GGUF_ARRAY) {
        if (depth >= GGUF_MAX_NEST) {
            gguf_set_err(c->err, c->errlen, "%s: arrays nested deeper than %d levels", what, GGUF_MAX_NEST);
            return -1;
        }
        uint32_t et;
        uint64_t n;
        if (rd_u32(c, &et, what) || rd_u64(c, &n, what)) return -1;
        return skip_array_body(c, et, n, depth + 1, what);
    }
    size_t sz = gguf_vtype_size(type);
    if (!sz) {
        gguf_set_err(c->err, c->errlen, "%s: unknown value type %u", what, type);
        return -1;
    }
    return need(c, sz, what) ? -1 : (c->pos += sz, 0);
}

static void file_free(gguf_file_impl *fi) {
    if (!fi) return;
    free(fi->pub.kv);
    free(fi->pub.tensors);
    free(fi->names);
    free(fi->kv_ix.slots);
    free(fi->t_ix.slots);
    free(fi->pub.path);
    if (fi->owns_map && fi->pub.map) munmap(fi->pub.map, fi->pub.size);
    free(fi);
}

static int index_kv(gguf_file_impl *fi, char *err, size_t errlen) {
    gguf_file *f = &fi->pub;
    uint64_t dup;
    int rc = index_build(&fi->kv_ix, f->kv, f->n_kv, sizeof *f->kv, offsetof(gguf_kv, key), &dup);
    if (rc < 0) gguf_set_err(err, errlen, "out of memory indexing metadata");
    if (rc > 0) {
        char nb[80];
        const gguf_str *k = &f->kv[dup].key;
        gguf_set_err(err, errlen, "duplicate metadata key '%s'", show_name(k->ptr, k->len, nb, sizeof nb));
    }
    return rc ? -1 : 0;
}

static int index_tensors(gguf_file_impl *fi, char *err, size_t errlen) {
    gguf_file *f = &fi->pub;
    uint64_t dup;
    int rc = index_build(&fi->t_ix, f->tensors, f->n_tensors, sizeof *f->tensors, offsetof(gguf_tensor, name), &dup);
    if (rc < 0) gguf_set_err(err, errlen, "out of memory indexing tensors");
    if (rc > 0) gguf_set_err(err, errlen, "duplicate tensor name '%s'", f->tensors[dup].cname);
    return rc ? -1 : 0;
}

/* Traits of a ggml type a GGUF may carry; NULL for unknown ids and for minke's internal
 * activation formats (ids >= GGML_TYPE_COUNT), which never appear in files. */
static const quant_traits *file_type(uint32_t type) {
    if (type >= GGML_TYPE_COUNT) return NULL;
    const quant_traits *qt = quant_get((int)type);
    return qt && qt->blck > 0 && qt->bytes > 0 ? qt : NULL;
}

/* Bytes of a tensor of `nel` elements of a known type; -1 on overflow. */
static int tensor_bytes(const quant_traits *qt, uint64_t nel, uint64_t *out) {
    uint64_t blocks = nel / (uint64_t)qt->blck + (nel % (uint64_t)qt->blck != 0);
    return mul_overflows(blocks, (uint64_t)qt->bytes, out) ? -1 : 0;
}

static int parse(gguf_file_impl *fi, char *err, size_t errlen) {
    gguf_file *f = &fi->pub;
    cursor c = {f->map, f->size, 0, err, errlen};
    uint32_t magic;
    if (rd_u32(&c, &magic, "magic")) return -1;
    if (magic != GGUF_MAGIC) {
        gguf_set_err(err, errlen, "not a GGUF file (magic 0x%08x, expected 0x%08x \"GGUF\")", magic, GGUF_MAGIC);
        return -1;
    }
    if (rd_u32(&c, &f->version, "version")) return -1;
    if (f->version != 3) {
        gguf_set_err(err, errlen, "unsupported GGUF version %u (only version 3 is supported)", f->version);
        return -1;
    }
    if (rd_u64(&c, &f->n_tensors, "tensor count") || rd_u64(&c, &f->n_kv, "metadata count")) return -1;
    /* every kv takes >= 13 bytes (key length, type, 1-byte value) and every tensor info >= 32 */
    if (f->n_kv > (c.size - c.pos) / 13) {
        gguf_set_err(err, errlen, "metadata count %llu is impossible for a file of %llu bytes",
                (unsigned long long)f->n_kv, (unsigned long long)f->size);
        return -1;
    }
    if (f->n_tensors > (c.size - c.pos) / 32) {
        gguf_set_err(err, errlen, "tensor count %llu is impossible for a file of %llu bytes",
                (unsigned long long)f->n_tensors, (unsigned long long)f->size);
        return -1;
    }
    f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    if (!f->kv || !f->tensors) { gguf_set_err(err, errlen, "out of memory"); return -1; }

    f->alignment = 32;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        char what[160], nb[80];
        snprintf(what, sizeof what, "metadata entry %llu key", (unsigned long long)i);
        if (rd_str(&c, &kv->key, what)) return -1;
        snprintf(what, sizeof what, "metadata '%s'", show_name(kv->key.ptr, kv->key.len, nb, sizeof nb));
        if (rd_u32(&c, &kv->type, what)) return -1;
        if (!vtype_known(kv->type)) {
            gguf_set_err(err, errlen, "%s: unknown value type %u", what, kv->type);
            return -1;
        }
        if (kv->type == GGUF_ARRAY) {
            if (rd_u32(&c, &kv->arr_type, what) || rd_u64(&c, &kv->arr_n, what)) return -1;
            uint64_t start = c.pos;
            if (skip_array_body(&c, kv->arr_type, kv->arr_n, 1, what)) return -1;
            kv->data = f->map + start;
            kv->data_len = c.pos - start;
        } else {
            uint64_t start = c.pos;
            if (skip_value(&c, kv->type, 0, what)) return -1;
            kv->data = f->map + start;
            kv->data_len = c.pos - start;
        }
        if (kv->key.len == 17 && !memcmp(kv->key.ptr, "general.alignment", 17) && kv->type == GGUF_U32) {
            uint32_t a;
            memcpy(&a, kv->data, 4);
            if (a) f->alignment = a; /* ds4: zero or another encoding means the default 32 */
        }
    }
    if (index_kv(fi, err, errlen)) return -1;

    /* tensor infos; names are copied into one arena (total <= file size) */
    uint64_t name_total = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        char what[160], nb[80];
        snprintf(what, sizeof what, "tensor info %llu name", (unsigned long long)i);
        if (rd_str(&c, &t->name, what)) return -1;
        name_total += t->name.len + 1;
        const char *nm = show_name(t->name.ptr, t->name.len, nb, sizeof nb);
        snprintf(what, sizeof what, "tensor '%s' info", nm);
        if (rd_u32(&c, &t->n_dims, what)) return -1;
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) {
            gguf_set_err(err, errlen, "tensor '%s': %u dimensions (must be 1..%d)", nm, t->n_dims, GGUF_MAX_DIMS);
            return -1;
        }
        uint64_t nel = 1;
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            if (rd_u64(&c, &t->ne[d], what)) return -1;
            if (t->ne[d] > (uint64_t)INT64_MAX || mul_overflows(nel, t->ne[d], &nel) || nel > (uint64_t)INT64_MAX) {
                gguf_set_err(err, errlen, "tensor '%s': element count overflows (dimension %u is %llu)",
                        nm, d, (unsigned long long)t->ne[d]);
                return -1;
            }
        }
        if (rd_u32(&c, &t->type, what) || rd_u64(&c, &t->offset, what)) return -1;
        const quant_traits *qt = file_type(t->type);
        if (qt) {
            if (tensor_bytes(qt, nel, &t->nbytes)) {
                gguf_set_err(err, errlen, "tensor '%s': byte size overflows", nm);
                return -1;
            }
        } else {
            t->nbytes = 0; /* unknown type: ds4 only warns; nobody may read it */
        }
    }
    fi->names = malloc(name_total ? name_total : 1);
    if (!fi->names) { gguf_set_err(err, errlen, "out of memory"); return -1; }
    {
        char *p = fi->names;
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            gguf_tensor *t = &f->tensors[i];
            memcpy(p, t->name.ptr, t->name.len);
            p[t->name.len] = 0;
            t->cname = p;
            p += t->name.len + 1;
        }
    }
    if (index_tensors(fi, err, errlen)) return -1;

    if (align_up(c.pos, f->alignment, &f->data_offset)) {
        gguf_set_err(err, errlen, "data offset overflows");
        return -1;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (!file_type(t->type)) continue;
        uint64_t start, end;
        if (add_overflows(f->data_offset, t->offset, &start) || add_overflows(start, t->nbytes, &end) ||
            end > f->size) {
            gguf_set_err(err, errlen, "tensor '%s' data [%llu..%llu) exceeds file size %llu", t->cname,
                    (unsigned long long)(f->data_offset + t->offset),
                    (unsigned long long)(f->data_offset + t->offset + t->nbytes), (unsigned long long)f->size);
            return -1;
        }
        t->data = f->map + start;
    }
    return 0;
}

gguf_file *gguf_open_buffer(const void *buf, uint64_t size, char *err, size_t errlen) {
    gguf_file_impl *fi = calloc(1, sizeof *fi);
    if (!fi) { gguf_set_err(err, errlen, "out of memory"); return NULL; }
    fi->pub.map = (uint8_t *)buf;
    fi->pub.size = size;
    if (!buf && size) { gguf_set_err(err, errlen, "no buffer"); free(fi); return NULL; }
    if (parse(fi, err, errlen)) { file_free(fi); return NULL; }
    return &fi->pub;
}

gguf_file *gguf_open(const char *path, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { gguf_set_err(err, errlen, "%s: %s", path, strerror(errno)); return NULL; }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        gguf_set_err(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        gguf_set_err(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_size < 24) {
        gguf_set_err(err, errlen, "%s: file of %lld bytes is too small to be a GGUF", path, (long long)st.st_size);
        close(fd);
        return NULL;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) { gguf_set_err(err, errlen, "%s: mmap: %s", path, strerror(errno)); return NULL; }
    gguf_file_impl *fi = calloc(1, sizeof *fi);
    if (!fi) { munmap(map, (size_t)st.st_size); gguf_set_err(err, errlen, "out of memory"); return NULL; }
    fi->owns_map = 1;
    fi->pub.map = map;
    fi->pub.size = (uint64_t)st.st_size;
    fi->pub.path = strdup(path);
    char e[400];
    if (!fi->pub.path || parse(fi, e, sizeof e)) {
        if (!fi->pub.path) snprintf(e, sizeof e, "out of memory");
        gguf_set_err(err, errlen, "%s: %s", path, e);
        file_free(fi);
        return NULL;
    }
    return &fi->pub;
}

void gguf_close(gguf_file *f) { file_free((gguf_file_impl *)f); }

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    if (!f) return NULL;
    int64_t i = index_find(&((const gguf_file_impl *)f)->kv_ix, key);
    return i < 0 ? NULL : &f->kv[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    if (!f) return NULL;
    int64_t i = index_find(&((const gguf_file_impl *)f)->t_ix, name);
    return i < 0 ? NULL : &f->tensors[i];
}

uint64_t gguf_tensor_nel(const gguf_tensor *t) {
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims && d < GGUF_MAX_DIMS; d++) n *= t->ne[d];
    return n;
}

/* ---- typed getters ---- */

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->type != GGUF_U32) return -1;
    memcpy(out, kv->data, 4);
    return 0;
}

int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return -1;
    if (kv->type == GGUF_U64) { memcpy(out, kv->data, 8); return 0; }
    if (kv->type == GGUF_U32) { uint32_t v; memcpy(&v, kv->data, 4); *out = v; return 0; }
    return -1;
}

int gguf_get_i32(const gguf_file *f, const char *key, int32_t *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->type != GGUF_I32) return -1;
    memcpy(out, kv->data, 4);
    return 0;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return -1;
    switch (kv->type) {
    case GGUF_F32: memcpy(out, kv->data, 4); return 0;
    case GGUF_F64: { double d; memcpy(&d, kv->data, 8); *out = (float)d; return 0; }
    case GGUF_U32: { uint32_t v; memcpy(&v, kv->data, 4); *out = (float)v; return 0; }
    case GGUF_I32: { int32_t v; memcpy(&v, kv->data, 4); *out = (float)v; return 0; }
    default: return -1;
    }
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->type != GGUF_BOOL) return -1;
    *out = kv->data[0] != 0;
    return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->type != GGUF_STRING) return -1;
    /* value bytes: u64 length then the characters (validated at open) */
    memcpy(&out->len, kv->data, 8);
    out->ptr = (const char *)kv->data + 8;
    return 0;
}

int gguf_arr_strings(const gguf_kv *kv, gguf_str *out) {
    if (!kv || kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING) return -1;
    const uint8_t *p = kv->data, *end = kv->data + kv->data_len;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        uint64_t len;
        if ((uint64_t)(end - p) < 8) return -1;
        memcpy(&len, p, 8);
        p += 8;
        if (len > (uint64_t)(end - p)) return -1;
        out[i].len = len;
        out[i].ptr = (const char *)p;
        p += len;
    }
    return 0;
}

int gguf_arr_get_num(const gguf_kv *kv, uint64_t i, double *out) {
    if (!kv || kv->type != GGUF_ARRAY || i >= kv->arr_n) return -1;
    size_t es = gguf_vtype_size(kv->arr_type);
    if (!es) return -1;
    const uint8_t *p = kv->data + i * es;
    switch (kv->arr_type) {
    case GGUF_U8: *out = *p; return 0;
    case GGUF_I8: *out = (int8_t)*p; return 0;
    case GGUF_BOOL: *out = *p != 0; return 0;
    case GGUF_U16: { uint16_t v; memcpy(&v, p, 2); *out = v; return 0; }
    case GGUF_I16: { int16_t v; memcpy(&v, p, 2); *out = v; return 0; }
    case GGUF_U32: { uint32_t v; memcpy(&v, p, 4); *out = v; return 0; }
    case GGUF_I32: { int32_t v; memcpy(&v, p, 4); *out = v; return 0; }
    case GGUF_F32: { float v; memcpy(&v, p, 4); *out = v; return 0; }
    case GGUF_U64: { uint64_t v; memcpy(&v, p, 8); *out = (double)v; return 0; }
    case GGUF_I64: { int64_t v; memcpy(&v, p, 8); *out = (double)v; return 0; }
    case GGUF_F64: memcpy(out, p, 8); return 0;
    default: return -1;
    }
}

/* ------------------------------------------------------------------ */
/* writer                                                              */

typedef struct wtensor {
    char *name;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint32_t type;
    uint64_t offset, nbytes;
} wtensor;

struct gguf_writer {
    char *path, *tmp_path;
    FILE *fp;
    uint32_t alignment;
    char err[256];
    int failed;
    int header_done;
    int alignment_key_written;
    /* metadata blob (encoded kvs) and key list for duplicate detection */
    uint8_t *meta;
    uint64_t meta_len, meta_cap, n_kv;
    char **keys;
    uint64_t keys_cap;
    wtensor *tensors;
    uint64_t n_tensors, tensors_cap;
    uint64_t data_size;  /* bytes of the data region incl. padding */
    uint64_t data_start; /* file offset of the data region */
    /* streaming position */
    uint64_t cur;        /* index of the tensor being filled */
    uint64_t cur_done;   /* bytes of it written */
};

static void w_fail(gguf_writer *w, const char *fmt, ...) {
    if (w->failed) return;
    w->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
}

/* The error of the last failed gguf_writer_close (the writer itself is gone by then). */
static __thread char last_close_err[256];

const char *gguf_writer_error(const gguf_writer *w) { return w ? w->err : last_close_err; }

gguf_writer *gguf_writer_open(const char *path, uint32_t alignment, char *err, size_t errlen) {
    if (alignment == 0) alignment = 32;
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) { gguf_set_err(err, errlen, "out of memory"); return NULL; }
    w->alignment = alignment;
    w->path = strdup(path);
    size_t n = strlen(path) + 5;
    w->tmp_path = malloc(n);
    if (!w->path || !w->tmp_path) {
        gguf_set_err(err, errlen, "out of memory");
        free(w->path); free(w->tmp_path); free(w);
        return NULL;
    }
    snprintf(w->tmp_path, n, "%s.tmp", path);
    w->fp = fopen(w->tmp_path, "wb");
    if (!w->fp) {
        gguf_set_err(err, errlen, "%s: %s", w->tmp_path, strerror(errno));
        free(w->path); free(w->tmp_path); free(w);
        return NULL;
    }
    setvbuf(w->fp, NULL, _IOFBF, 1 << 20);
    return w;
}

static int meta_put(gguf_writer *w, const void *p, uint64_t n) {
    if (w->failed) return -1;
    if (w->meta_len + n > w->meta_cap || !w->meta) {
        uint64_t cap = w->meta_cap ? w->meta_cap : 4096;
        while (cap < w->meta_len + n) cap *= 2;
        uint8_t *m = realloc(w->meta, cap);
        if (!m) { w_fail(w, "out of memory"); return -1; }
        w->meta = m;
        w->meta_cap = cap;
    }
    if (n) memcpy(w->meta + w->meta_len, p, n);
    w->meta_len += n;
    return 0;
}
static void meta_u32(gguf_writer *w, uint32_t v) { meta_put(w, &v, 4); }
static void meta_u64(gguf_writer *w, uint64_t v) { meta_put(w, &v, 8); }
static void meta_strn(gguf_writer *w, const char *s, uint64_t n) { meta_u64(w, n); meta_put(w, s, n); }

/* Starts a kv: checks state and duplicates, writes the key and type. */
static int kv_begin(gguf_writer *w, const char *key, uint32_t type) {
    if (w->failed) return -1;
    if (w->header_done) { w_fail(w, "metadata '%s' added after the header was written", key); return -1; }
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key)) { w_fail(w, "duplicate metadata key '%s'", key); return -1; }
    if (w->n_kv == w->keys_cap) {
        uint64_t cap = w->keys_cap ? w->keys_cap * 2 : 64;
        char **k = realloc(w->keys, cap * sizeof *k);
        if (!k) { w_fail(w, "out of memory"); return -1; }
        w->keys = k;
        w->keys_cap = cap;
    }
    if (!(w->keys[w->n_kv] = strdup(key))) { w_fail(w, "out of memory"); return -1; }
    w->n_kv++;
    meta_strn(w, key, strlen(key));
    meta_u32(w, type);
    return w->failed ? -1 : 0;
}

void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v) {
    if (!strcmp(key, "general.alignment")) {
        if (v != w->alignment) {
            w_fail(w, "general.alignment %u differs from the writer's alignment %u", v, w->alignment);
            return;
        }
        w->alignment_key_written = 1;
    }
    if (kv_begin(w, key, GGUF_U32)) return;
    meta_u32(w, v);
}
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v) {
    if (kv_begin(w, key, GGUF_I32)) return;
    meta_put(w, &v, 4);
}
void gguf_w_u64(gguf_writer *w, const char *key, uint64_t v) {
    if (kv_begin(w, key, GGUF_U64)) return;
    meta_u64(w, v);
}
void gguf_w_f32(gguf_writer *w, const char *key, float v) {
    if (kv_begin(w, key, GGUF_F32)) return;
    meta_put(w, &v, 4);
}
void gguf_w_bool(gguf_writer *w, const char *key, int v) {
    if (kv_begin(w, key, GGUF_BOOL)) return;
    uint8_t b = v != 0;
    meta_put(w, &b, 1);
}
void gguf_w_str(gguf_writer *w, const char *key, const char *v) {
    if (kv_begin(w, key, GGUF_STRING)) return;
    meta_strn(w, v, strlen(v));
}

void gguf_w_scalar(gguf_writer *w, const char *key, uint32_t type, const void *v) {
    size_t sz = gguf_vtype_size(type);
    if (!sz) { w_fail(w, "metadata '%s': %s is not a scalar type", key, gguf_vtype_name(type)); return; }
    if (type == GGUF_U32 && !strcmp(key, "general.alignment")) { uint32_t a; memcpy(&a, v, 4); gguf_w_u32(w, key, a); return; }
    if (kv_begin(w, key, type)) return;
    meta_put(w, v, sz);
}

void gguf_w_arr(gguf_writer *w, const char *key, uint32_t elem_type, const void *v, uint64_t n) {
    size_t sz = gguf_vtype_size(elem_type);
    uint64_t bytes;
    if (!sz) { w_fail(w, "metadata '%s': %s arrays need gguf_w_arr_str or gguf_w_raw", key, gguf_vtype_name(elem_type)); return; }
    if (mul_overflows(n, sz, &bytes)) { w_fail(w, "metadata '%s': array too large", key); return; }
    if (kv_begin(w, key, GGUF_ARRAY)) return;
    meta_u32(w, elem_type);
    meta_u64(w, n);
    meta_put(w, v, bytes);
}
void gguf_w_arr_u32(gguf_writer *w, const char *key, const uint32_t *v, uint64_t n) { gguf_w_arr(w, key, GGUF_U32, v, n); }
void gguf_w_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n) { gguf_w_arr(w, key, GGUF_I32, v, n); }
void gguf_w_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n) { gguf_w_arr(w, key, GGUF_F32, v, n); }

void gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n) {
    if (kv_begin(w, key, GGUF_ARRAY)) return;
    meta_u32(w, GGUF_STRING);
    meta_u64(w, n);
    for (uint64_t i = 0; i < n; i++) meta_strn(w, v[i], strlen(v[i]));
}
void gguf_w_arr_strn(gguf_writer *w, const char *key, const gguf_str *v, uint64_t n) {
    if (kv_begin(w, key, GGUF_ARRAY)) return;
    meta_u32(w, GGUF_STRING);
    meta_u64(w, n);
    for (uint64_t i = 0; i < n; i++) meta_strn(w, v[i].ptr, v[i].len);
}

void gguf_w_raw(gguf_writer *w, const char *key, uint32_t type, const void *value, uint64_t len) {
    /* validate the encoding with the reader's own walker so a bad value cannot corrupt the file */
    char e[200];
    cursor c = {value, len, 0, e, sizeof e};
    if (skip_value(&c, type, 0, key) || c.pos != len) {
        w_fail(w, "metadata '%s': malformed %s value%s%s", key, gguf_vtype_name(type),
               c.pos != len && !e[0] ? "" : ": ", c.pos != len && !e[0] ? "" : e);
        return;
    }
    if (type == GGUF_U32 && !strcmp(key, "general.alignment")) { uint32_t a; memcpy(&a, value, 4); gguf_w_u32(w, key, a); return; }
    if (kv_begin(w, key, type)) return;
    meta_put(w, value, len);
}

void gguf_w_kv_copy(gguf_writer *w, const gguf_kv *kv) {
    char key[512];
    if (kv->key.len >= sizeof key || memchr(kv->key.ptr, 0, kv->key.len)) {
        w_fail(w, "metadata key of %llu bytes cannot be copied", (unsigned long long)kv->key.len);
        return;
    }
    memcpy(key, kv->key.ptr, kv->key.len);
    key[kv->key.len] = 0;
    if (kv->type == GGUF_ARRAY) {
        if (kv_begin(w, key, GGUF_ARRAY)) return;
        meta_u32(w, kv->arr_type);
        meta_u64(w, kv->arr_n);
        meta_put(w, kv->data, kv->data_len);
    } else {
        gguf_w_raw(w, key, kv->type, kv->data, kv->data_len);
    }
}

int gguf_w_tensor(gguf_writer *w, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type) {
    if (w->failed) return -1;
    if (w->header_done) { w_fail(w, "tensor '%s' declared after the header was written", name); return -1; }
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) { w_fail(w, "tensor '%s': %u dimensions (must be 1..%d)", name, n_dims, GGUF_MAX_DIMS); return -1; }
    const quant_traits *qt = file_type(type);
    if (!qt) { w_fail(w, "tensor '%s': unknown type %u", name, type); return -1; }
    uint64_t nel = 1;
    for (uint32_t d = 0; d < n_dims; d++)
        if (ne[d] > (uint64_t)INT64_MAX || mul_overflows(nel, ne[d], &nel) || nel > (uint64_t)INT64_MAX) {
            w_fail(w, "tensor '%s': element count overflows", name);
            return -1;
        }
    if (ne[0] % (uint64_t)qt->blck) {
        w_fail(w, "tensor '%s': row of %llu elements is not a multiple of %s's block of %d", name,
               (unsigned long long)ne[0], qt->name, qt->blck);
        return -1;
    }
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (!strcmp(w->tensors[i].name, name)) { w_fail(w, "duplicate tensor name '%s'", name); return -1; }
    if (w->n_tensors == w->tensors_cap) {
        uint64_t cap = w->tensors_cap ? w->tensors_cap * 2 : 256;
        wtensor *t = realloc(w->tensors, cap * sizeof *t);
        if (!t) { w_fail(w, "out of memory"); return -1; }
        w->tensors = t;
        w->tensors_cap = cap;
    }
    wtensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) { w_fail(w, "out of memory"); return -1; }
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->type = type;
    uint64_t padded;
    if (tensor_bytes(qt, nel, &t->nbytes) || align_up(t->nbytes, w->alignment, &padded) ||
        add_overflows(w->data_size, padded, &padded)) {
        w_fail(w, "tensor '%s': size overflows", name);
        return -1;
    }
    t->offset = w->data_size;
    w->data_size = padded;
    return (int)w->n_tensors++;
}

uint32_t gguf_writer_alignment(const gguf_writer *w) { return w->alignment; }

uint64_t gguf_writer_tensor_nbytes(const gguf_writer *w, int idx) {
    return idx >= 0 && (uint64_t)idx < w->n_tensors ? w->tensors[idx].nbytes : 0;
}

static int w_write(gguf_writer *w, const void *p, uint64_t n) {
    if (w->failed) return -1;
    if (n && fwrite(p, 1, n, w->fp) != n) { w_fail(w, "%s: write failed: %s", w->tmp_path, strerror(errno)); return -1; }
    return 0;
}
static int w_pad(gguf_writer *w, uint64_t n) {
    static const uint8_t zeros[4096];
    while (n) {
        uint64_t k = n < sizeof zeros ? n : sizeof zeros;
        if (w_write(w, zeros, k)) return -1;
        n -= k;
    }
    return 0;
}

/* Skip over finished (or empty) tensors, padding each to the alignment. */
static int w_advance(gguf_writer *w) {
    while (w->cur < w->n_tensors && w->cur_done == w->tensors[w->cur].nbytes) {
        uint64_t padded;
        align_up(w->tensors[w->cur].nbytes, w->alignment, &padded);
        if (w_pad(w, padded - w->tensors[w->cur].nbytes)) return -1;
        w->cur++;
        w->cur_done = 0;
    }
    return 0;
}

int gguf_writer_begin_data(gguf_writer *w) {
    if (w->failed) return -1;
    if (w->header_done) { w_fail(w, "header written twice"); return -1; }
    if (!w->alignment_key_written && w->alignment != 32) gguf_w_u32(w, "general.alignment", w->alignment);
    if (w->failed) return -1;
    uint32_t magic = GGUF_MAGIC, version = 3;
    uint64_t nt = w->n_tensors, nkv = w->n_kv;
    w_write(w, &magic, 4);
    w_write(w, &version, 4);
    w_write(w, &nt, 8);
    w_write(w, &nkv, 8);
    w_write(w, w->meta, w->meta_len);
    uint64_t pos = 24 + w->meta_len;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        uint64_t len = strlen(t->name);
        w_write(w, &len, 8);
        w_write(w, t->name, len);
        w_write(w, &t->n_dims, 4);
        w_write(w, t->ne, 8ull * t->n_dims);
        w_write(w, &t->type, 4);
        w_write(w, &t->offset, 8);
        pos += 8 + len + 4 + 8ull * t->n_dims + 4 + 8;
    }
    uint64_t data_start;
    align_up(pos, w->alignment, &data_start);
    w_pad(w, data_start - pos);
    w->data_start = data_start;
    w->header_done = 1;
    w->cur = 0;
    w->cur_done = 0;
    free(w->meta);
    w->meta = NULL;
    w->meta_len = w->meta_cap = 0;
    if (w->failed) return -1;
    return w_advance(w);
}

/* Shared by gguf_w_data and gguf_w_zeros: data NULL means "leave a hole". */
static int w_stream(gguf_writer *w, const void *data, uint64_t n) {
    if (w->failed) return -1;
    if (!w->header_done) { w_fail(w, "tensor data written before gguf_writer_begin_data"); return -1; }
    const uint8_t *p = data;
    while (n) {
        if (w->cur >= w->n_tensors) { w_fail(w, "%llu bytes of data beyond the last tensor", (unsigned long long)n); return -1; }
        wtensor *t = &w->tensors[w->cur];
        uint64_t k = t->nbytes - w->cur_done;
        if (k > n) k = n;
        if (p) {
            if (w_write(w, p, k)) return -1;
            p += k;
        } else if (k > (off_t)INT64_MAX || fseeko(w->fp, (off_t)k, SEEK_CUR) != 0) {
            w_fail(w, "%s: seek failed: %s", w->tmp_path, strerror(errno));
            return -1;
        }
        n -= k;
        w->cur_done += k;
        if (w_advance(w)) return -1;
    }
    return 0;
}

int gguf_w_data(gguf_writer *w, const void *data, uint64_t n) {
    static const uint8_t none;
    return w_stream(w, data ? data : &none, data ? n : 0);
}

int gguf_w_zeros(gguf_writer *w, uint64_t n) { return w_stream(w, NULL, n); }

static void w_free(gguf_writer *w) {
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    for (uint64_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->tensors);
    free(w->meta);
    free(w->path);
    free(w->tmp_path);
    free(w);
}

int gguf_writer_close(gguf_writer *w) {
    if (!w) return -1;
    if (!w->failed && !w->header_done) gguf_writer_begin_data(w);
    if (!w->failed && w->cur < w->n_tensors)
        w_fail(w, "tensor '%s' incomplete: %llu of %llu bytes written", w->tensors[w->cur].name,
               (unsigned long long)w->cur_done, (unsigned long long)w->tensors[w->cur].nbytes);
    /* a trailing hole left by gguf_w_zeros does not extend the file by itself */
    if (!w->failed && (fflush(w->fp) != 0 || ftruncate(fileno(w->fp), (off_t)(w->data_start + w->data_size)) != 0))
        w_fail(w, "%s: %s", w->tmp_path, strerror(errno));
    if (fclose(w->fp) != 0) w_fail(w, "%s: close failed: %s", w->tmp_path, strerror(errno));
    w->fp = NULL;
    if (!w->failed && rename(w->tmp_path, w->path) != 0)
        w_fail(w, "rename %s -> %s: %s", w->tmp_path, w->path, strerror(errno));
    int rc = w->failed ? -1 : 0;
    if (rc) {
        unlink(w->tmp_path);
        snprintf(last_close_err, sizeof last_close_err, "%s", w->err);
    }
    w_free(w);
    return rc;
}

void gguf_writer_abort(gguf_writer *w) {
    if (!w) return;
    if (w->fp) fclose(w->fp);
    unlink(w->tmp_path);
    w_free(w);
}
