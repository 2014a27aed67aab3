/* test_gguf.c: the GGUF reader and writer.
 *
 * A file with every metadata type (nested arrays included) and several
 * tensors is written and read back exactly; alignment variants; every
 * truncation of a small file and hand-corrupted counts, lengths, dims and
 * offsets must give an error (never a crash: run it under ASan too); the
 * writer's misuse errors and atomic replace.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "testutil.h"


/* ---- a byte builder for hand-made (and hand-broken) files ---- */
typedef struct buf { uint8_t *p; size_t n, cap; } buf;
static void put(buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void put32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put64(buf *b, uint64_t v) { put(b, &v, 8); }
static void putstr(buf *b, const char *s) { put64(b, strlen(s)); put(b, s, strlen(s)); }
static void pad_to(buf *b, size_t a) { while (b->n % a) { uint8_t z = 0; put(b, &z, 1); } }

/* open a copy of exactly n bytes so ASan sees any over-read */
static gguf_file *open_exact(const void *p, size_t n, char *err, size_t errlen) {
    void *copy = malloc(n ? n : 1);
    memcpy(copy, p, n);
    gguf_file *f = gguf_open_buffer(copy, n, err, errlen);
    if (f) {
        /* walk everything while the copy is alive */
        for (uint64_t i = 0; i < f->n_kv; i++) {
            const gguf_kv *kv = &f->kv[i];
            if (kv->type == GGUF_ARRAY && kv->arr_type == GGUF_STRING && kv->arr_n < 100000) {
                gguf_str *s = malloc((kv->arr_n + 1) * sizeof *s);
                gguf_arr_strings(kv, s);
                free(s);
            }
        }
        for (uint64_t i = 0; i < f->n_tensors; i++)
            if (f->tensors[i].data && f->tensors[i].nbytes) {
                volatile uint8_t x = ((const uint8_t *)f->tensors[i].data)[f->tensors[i].nbytes - 1];
                (void)x;
            }
        gguf_close(f);
        free(copy);
        return (gguf_file *)1; /* opened */
    }
    free(copy);
    return NULL;
}

/* ---- 1. every metadata type, several tensors, exact read back ---- */

static float tdata_f32[15];
static uint16_t tdata_f16[7];
static uint8_t tdata_q8[2 * 2 * 34];
static int32_t tdata_i32[24];
static float tdata_3d[24];

static void fill_tensor_data(void) {
    for (int i = 0; i < 15; i++) tdata_f32[i] = (float)i * 0.25f - 1.0f;
    for (int i = 0; i < 7; i++) tdata_f16[i] = f32_to_f16((float)i - 3.0f);
    for (size_t i = 0; i < sizeof tdata_q8; i++) tdata_q8[i] = (uint8_t)(i * 37 + 11);
    for (int i = 0; i < 24; i++) tdata_i32[i] = i * 1000 - 7;
    for (int i = 0; i < 24; i++) tdata_3d[i] = sinf((float)i);
}

static int write_all_types(const char *path, uint32_t alignment) {
    char err[256];
    gguf_writer *w = gguf_writer_open(path, alignment, err, sizeof err);
    CHECK(w, "writer open: %s", err);
    if (!w) return -1;
    uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 60000; int16_t i16 = -30000;
    int64_t i64 = -5000000000LL; double f64 = 3.141592653589793;
    gguf_w_scalar(w, "t.u8", GGUF_U8, &u8);
    gguf_w_scalar(w, "t.i8", GGUF_I8, &i8);
    gguf_w_scalar(w, "t.u16", GGUF_U16, &u16);
    gguf_w_scalar(w, "t.i16", GGUF_I16, &i16);
    gguf_w_u32(w, "t.u32", 4000000000u);
    gguf_w_i32(w, "t.i32", -2000000000);
    gguf_w_f32(w, "t.f32", 1.5f);
    gguf_w_bool(w, "t.bool", 1);
    gguf_w_bool(w, "t.bool0", 0);
    gguf_w_str(w, "t.str", "h\xc3\xa9llo");
    gguf_w_str(w, "t.empty", "");
    gguf_w_u64(w, "t.u64", 0xFEDCBA9876543210ull);
    gguf_w_scalar(w, "t.i64", GGUF_I64, &i64);
    gguf_w_scalar(w, "t.f64", GGUF_F64, &f64);
    uint32_t au32[3] = {1, 2, 3};
    int32_t ai32[4] = {-1, 0, 1, 2147483647};
    float af32[2] = {0.5f, -0.25f};
    int16_t ai16[2] = {-5, 5};
    double af64[2] = {1e300, -2.5};
    uint8_t abool[3] = {1, 0, 1};
    gguf_w_arr_u32(w, "a.u32", au32, 3);
    gguf_w_arr_i32(w, "a.i32", ai32, 4);
    gguf_w_arr_f32(w, "a.f32", af32, 2);
    gguf_w_arr(w, "a.i16", GGUF_I16, ai16, 2);
    gguf_w_arr(w, "a.f64", GGUF_F64, af64, 2);
    gguf_w_arr(w, "a.bool", GGUF_BOOL, abool, 3);
    gguf_w_arr_u32(w, "a.empty", NULL, 0);
    const char *strs[3] = {"a", "", "xyz"};
    gguf_w_arr_str(w, "a.str", strs, 3);
    gguf_str nul[2] = {{3, "a\0b"}, {1, "\0"}};
    gguf_w_arr_strn(w, "a.strn", nul, 2);
    /* nested: [[1,2],[3]] of u16, and [[["x"]]] of strings, both in file encoding */
    buf nb = {0};
    put32(&nb, GGUF_ARRAY); put64(&nb, 2);
    put32(&nb, GGUF_U16); put64(&nb, 2); { uint16_t v[2] = {1, 2}; put(&nb, v, 4); }
    put32(&nb, GGUF_U16); put64(&nb, 1); { uint16_t v = 3; put(&nb, &v, 2); }
    gguf_w_raw(w, "a.nested", GGUF_ARRAY, nb.p, nb.n);
    buf nb3 = {0};
    put32(&nb3, GGUF_ARRAY); put64(&nb3, 1);
    put32(&nb3, GGUF_ARRAY); put64(&nb3, 1);
    put32(&nb3, GGUF_STRING); put64(&nb3, 1); putstr(&nb3, "x");
    gguf_w_raw(w, "a.nested3", GGUF_ARRAY, nb3.p, nb3.n);
    free(nb.p); free(nb3.p);

    uint64_t ne_a[2] = {5, 3}, ne_b[1] = {7}, ne_c[2] = {64, 2}, ne_d[2] = {6, 4}, ne_e[3] = {2, 3, 4};
    CHECK(gguf_w_tensor(w, "t.f32", 2, ne_a, GGML_TYPE_F32) == 0, "tensor 0");
    CHECK(gguf_w_tensor(w, "t.f16", 1, ne_b, GGML_TYPE_F16) == 1, "tensor 1");
    CHECK(gguf_w_tensor(w, "t.q8", 2, ne_c, GGML_TYPE_Q8_0) == 2, "tensor 2");
    CHECK(gguf_w_tensor(w, "t.i32", 2, ne_d, GGML_TYPE_I32) == 3, "tensor 3");
    CHECK(gguf_w_tensor(w, "t.3d", 3, ne_e, GGML_TYPE_F32) == 4, "tensor 4");
    CHECK(gguf_writer_tensor_nbytes(w, 2) == sizeof tdata_q8, "q8 nbytes %llu",
          (unsigned long long)gguf_writer_tensor_nbytes(w, 2));
    CHECK(gguf_writer_begin_data(w) == 0, "begin_data: %s", gguf_writer_error(w));
    /* pieces of odd sizes, one call spanning a tensor boundary */
    gguf_w_data(w, tdata_f32, 10);
    gguf_w_data(w, (uint8_t *)tdata_f32 + 10, sizeof tdata_f32 - 10);
    buf span = {0};
    put(&span, tdata_f16, sizeof tdata_f16);
    put(&span, tdata_q8, 5);
    gguf_w_data(w, span.p, span.n);
    free(span.p);
    gguf_w_data(w, tdata_q8 + 5, sizeof tdata_q8 - 5);
    gguf_w_data(w, tdata_i32, sizeof tdata_i32);
    gguf_w_data(w, tdata_3d, sizeof tdata_3d);
    int rc = gguf_writer_close(w);
    CHECK(rc == 0, "close: %s", gguf_writer_error(NULL));
    return rc;
}

static void check_all_types(const char *path, uint32_t alignment) {
    char err[256] = "";
    gguf_file *f = gguf_open(path, err, sizeof err);
    CHECK(f, "open %s: %s", path, err);
    if (!f) return;
    CHECK(f->version == 3, "version");
    CHECK(f->alignment == alignment, "alignment %u want %u", f->alignment, alignment);
    CHECK(f->data_offset % alignment == 0, "data offset %llu aligned", (unsigned long long)f->data_offset);
    CHECK(f->n_tensors == 5, "n_tensors %llu", (unsigned long long)f->n_tensors);
    /* the writer adds general.alignment itself only when it is not the default */
    CHECK(f->n_kv == 25 + (alignment != 32), "n_kv %llu", (unsigned long long)f->n_kv);
    const gguf_kv *kv;
    kv = gguf_find_kv(f, "t.u8"); CHECK(kv && kv->type == GGUF_U8 && kv->data[0] == 200, "u8");
    kv = gguf_find_kv(f, "t.i8"); CHECK(kv && kv->type == GGUF_I8 && (int8_t)kv->data[0] == -100, "i8");
    kv = gguf_find_kv(f, "t.u16"); { uint16_t v = 0; if (kv) memcpy(&v, kv->data, 2); CHECK(kv && kv->type == GGUF_U16 && v == 60000, "u16"); }
    kv = gguf_find_kv(f, "t.i16"); { int16_t v = 0; if (kv) memcpy(&v, kv->data, 2); CHECK(kv && kv->type == GGUF_I16 && v == -30000, "i16"); }
    uint32_t u32; int32_t i32; float f32; int b; uint64_t u64; gguf_str s;
    CHECK(gguf_get_u32(f, "t.u32", &u32) == 0 && u32 == 4000000000u, "u32");
    CHECK(gguf_get_i32(f, "t.i32", &i32) == 0 && i32 == -2000000000, "i32");
    CHECK(gguf_get_f32(f, "t.f32", &f32) == 0 && f32 == 1.5f, "f32");
    CHECK(gguf_get_bool(f, "t.bool", &b) == 0 && b == 1, "bool");
    CHECK(gguf_get_bool(f, "t.bool0", &b) == 0 && b == 0, "bool0");
    CHECK(gguf_get_str(f, "t.str", &s) == 0 && s.len == 6 && !memcmp(s.ptr, "h\xc3\xa9llo", 6), "str");
    CHECK(gguf_get_str(f, "t.empty", &s) == 0 && s.len == 0, "empty str");
    CHECK(gguf_get_u64(f, "t.u64", &u64) == 0 && u64 == 0xFEDCBA9876543210ull, "u64");
    CHECK(gguf_get_u64(f, "t.u32", &u64) == 0 && u64 == 4000000000u, "u64 accepts u32");
    kv = gguf_find_kv(f, "t.i64"); { int64_t v = 0; if (kv) memcpy(&v, kv->data, 8); CHECK(kv && kv->type == GGUF_I64 && v == -5000000000LL, "i64"); }
    CHECK(gguf_get_f32(f, "t.f64", &f32) == 0 && f32 == (float)3.141592653589793, "f32 from f64");
    CHECK(gguf_get_f32(f, "t.i32", &f32) == 0 && f32 == -2000000000.0f, "f32 from i32");
    /* strict getters */
    CHECK(gguf_get_u32(f, "t.u64", &u32) == -1, "u32 refuses u64");
    CHECK(gguf_get_u32(f, "t.i32", &u32) == -1, "u32 refuses i32");
    CHECK(gguf_get_bool(f, "t.u8", &b) == -1, "bool refuses u8");
    CHECK(gguf_get_str(f, "t.u8", &s) == -1, "str refuses u8");
    CHECK(gguf_get_f32(f, "t.str", &f32) == -1, "f32 refuses string");
    CHECK(gguf_get_u32(f, "nope", &u32) == -1, "missing key");
    CHECK(gguf_find_kv(f, "t.u3") == NULL && gguf_find_kv(f, "t.u320") == NULL, "no prefix matches");

    double d;
    kv = gguf_find_kv(f, "a.u32");
    CHECK(kv && kv->type == GGUF_ARRAY && kv->arr_type == GGUF_U32 && kv->arr_n == 3, "a.u32");
    CHECK(gguf_arr_get_num(kv, 2, &d) == 0 && d == 3, "a.u32[2]");
    CHECK(gguf_arr_get_num(kv, 3, &d) == -1, "a.u32[3] out of range");
    kv = gguf_find_kv(f, "a.i32");
    CHECK(kv && gguf_arr_get_num(kv, 0, &d) == 0 && d == -1 && gguf_arr_get_num(kv, 3, &d) == 0 && d == 2147483647, "a.i32");
    kv = gguf_find_kv(f, "a.f32");
    CHECK(kv && gguf_arr_get_num(kv, 1, &d) == 0 && d == -0.25, "a.f32");
    kv = gguf_find_kv(f, "a.i16");
    CHECK(kv && kv->arr_type == GGUF_I16 && gguf_arr_get_num(kv, 0, &d) == 0 && d == -5, "a.i16");
    kv = gguf_find_kv(f, "a.f64");
    CHECK(kv && gguf_arr_get_num(kv, 0, &d) == 0 && d == 1e300, "a.f64");
    kv = gguf_find_kv(f, "a.bool");
    CHECK(kv && kv->arr_n == 3 && gguf_arr_get_num(kv, 1, &d) == 0 && d == 0 && gguf_arr_get_num(kv, 2, &d) == 0 && d == 1, "a.bool");
    kv = gguf_find_kv(f, "a.empty");
    CHECK(kv && kv->arr_n == 0 && kv->data_len == 0, "a.empty");
    kv = gguf_find_kv(f, "a.str");
    CHECK(kv && kv->arr_type == GGUF_STRING && kv->arr_n == 3, "a.str");
    CHECK(gguf_arr_get_num(kv, 0, &d) == -1, "num of string array refused");
    gguf_str ss[3];
    CHECK(kv && gguf_arr_strings(kv, ss) == 0 && ss[0].len == 1 && ss[1].len == 0 && ss[2].len == 3 &&
          !memcmp(ss[2].ptr, "xyz", 3), "a.str values");
    kv = gguf_find_kv(f, "a.strn");
    CHECK(kv && gguf_arr_strings(kv, ss) == 0 && ss[0].len == 3 && !memcmp(ss[0].ptr, "a\0b", 3) && ss[1].len == 1 &&
          ss[1].ptr[0] == 0, "strings with NUL");
    kv = gguf_find_kv(f, "a.nested");
    CHECK(kv && kv->type == GGUF_ARRAY && kv->arr_type == GGUF_ARRAY && kv->arr_n == 2 &&
          kv->data_len == 2 * 12 + 4 + 2, "a.nested (data_len %llu)", kv ? (unsigned long long)kv->data_len : 0ull);
    if (kv && kv->data_len == 30) {
        uint32_t et; uint64_t n; uint16_t v;
        memcpy(&et, kv->data + 12 + 4, 4);
        memcpy(&n, kv->data + 12 + 4 + 4, 8);
        memcpy(&v, kv->data + 12 + 4 + 12, 2);
        CHECK(et == GGUF_U16 && n == 1 && v == 3, "a.nested second element");
    }
    kv = gguf_find_kv(f, "a.nested3");
    CHECK(kv && kv->arr_type == GGUF_ARRAY && kv->arr_n == 1 && kv->data_len == 12 + 12 + 9, "a.nested3");

    const gguf_tensor *t;
    t = gguf_find_tensor(f, "t.f32");
    CHECK(t && t->n_dims == 2 && t->ne[0] == 5 && t->ne[1] == 3 && t->ne[2] == 1 && t->type == GGML_TYPE_F32 &&
          t->nbytes == 60 && t->data && !memcmp(t->data, tdata_f32, 60) && !strcmp(t->cname, "t.f32"), "t.f32");
    t = gguf_find_tensor(f, "t.f16");
    CHECK(t && t->n_dims == 1 && t->ne[0] == 7 && t->nbytes == 14 && !memcmp(t->data, tdata_f16, 14), "t.f16");
    t = gguf_find_tensor(f, "t.q8");
    CHECK(t && t->type == GGML_TYPE_Q8_0 && t->nbytes == sizeof tdata_q8 && !memcmp(t->data, tdata_q8, sizeof tdata_q8), "t.q8");
    t = gguf_find_tensor(f, "t.i32");
    CHECK(t && t->type == GGML_TYPE_I32 && gguf_tensor_nel(t) == 24 && !memcmp(t->data, tdata_i32, sizeof tdata_i32), "t.i32");
    t = gguf_find_tensor(f, "t.3d");
    CHECK(t && t->n_dims == 3 && t->ne[2] == 4 && !memcmp(t->data, tdata_3d, sizeof tdata_3d), "t.3d");
    CHECK(gguf_find_tensor(f, "t.f3") == NULL, "missing tensor");
    uint64_t prev_end = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        t = &f->tensors[i];
        CHECK(t->offset % alignment == 0, "tensor %s offset %llu aligned to %u", t->cname, (unsigned long long)t->offset, alignment);
        CHECK(t->offset >= prev_end, "tensors in declaration order without overlap");
        prev_end = t->offset + t->nbytes;
    }
    /* the file ends at the padded end of the last tensor */
    uint64_t padded_end = (prev_end + alignment - 1) / alignment * alignment;
    CHECK(f->size == f->data_offset + padded_end, "file size %llu = data %llu + %llu", (unsigned long long)f->size,
          (unsigned long long)f->data_offset, (unsigned long long)padded_end);
    gguf_close(f);
}

static void test_roundtrip(void) {
    char path[600];
    static const uint32_t aligns[] = {32, 64, 4096, 1, 48};
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
        snprintf(path, sizeof path, "%s/all_%u.gguf", test_tmpdir(), aligns[i]);
        if (write_all_types(path, aligns[i]) == 0) check_all_types(path, aligns[i]);
        char tmp[700];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        CHECK(!test_file_exists(tmp), "no .tmp left after close");
    }
}

/* ---- 2. truncation at every byte ---- */

static void test_truncation(void) {
    char path[600];
    test_path(path, sizeof path, "all_32.gguf");
    size_t size;
    uint8_t *b = test_read_file(path, &size);
    CHECK(b, "read %s", path);
    if (!b) return;
    char err[256];
    gguf_file *f = gguf_open_buffer(b, size, err, sizeof err);
    CHECK(f, "full buffer opens: %s", err);
    if (!f) { free(b); return; }
    /* a prefix that still holds every tensor's bytes may legitimately open (only padding is lost) */
    uint64_t data_end = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        uint64_t e = f->data_offset + f->tensors[i].offset + f->tensors[i].nbytes;
        if (e > data_end) data_end = e;
    }
    gguf_close(f);
    int bad = 0, empty_msg = 0;
    for (uint64_t n = 0; n < size; n++) {
        err[0] = 0;
        gguf_file *g = open_exact(b, n, err, sizeof err);
        if (n < data_end && g) bad++;
        if (!g && !err[0]) empty_msg++;
    }
    CHECK(bad == 0, "%d truncated prefixes opened", bad);
    CHECK(empty_msg == 0, "%d failures without a message", empty_msg);
    /* one sample message */
    gguf_open_buffer(b, 100, err, sizeof err);
    CHECK(strstr(err, "truncated") || strstr(err, "exceeds") || strstr(err, "impossible"), "truncation message: %s", err);
    free(b);
}

/* ---- 3. hand-corrupted headers ---- */

typedef struct corrupt_case {
    const char *what;
    const char *want; /* substring of the error */
} corrupt_case;

/* A minimal valid file: one kv (u32), one array kv, one F32 tensor [4]. The fields can be
 * overridden to corrupt it. */
typedef struct mini {
    uint32_t magic, version;
    uint64_t n_tensors, n_kv;
    uint64_t key_len;          /* 0 = real */
    uint32_t kv_type;
    uint32_t arr_type;
    uint64_t arr_n;
    uint32_t n_dims;
    uint64_t ne0, ne1;
    uint32_t ttype;
    uint64_t toff;
    int nest;                  /* add a kv with this many nested array levels */
    int dup_key, dup_tensor;
    uint32_t align_kv;         /* 0 = none */
} mini;

static mini mini_default(void) {
    mini m = {0};
    m.magic = 0x46554747u; m.version = 3; m.n_tensors = 1; m.n_kv = 2;
    m.kv_type = GGUF_U32; m.arr_type = GGUF_U32; m.arr_n = 3;
    m.n_dims = 1; m.ne0 = 4; m.ne1 = 1; m.ttype = GGML_TYPE_F32; m.toff = 0;
    return m;
}

static buf mini_build(const mini *m) {
    buf b = {0};
    put32(&b, m->magic); put32(&b, m->version);
    uint64_t nt = m->n_tensors + (m->dup_tensor ? 1 : 0);
    uint64_t nkv = m->n_kv + (m->nest ? 1 : 0) + (m->dup_key ? 1 : 0) + (m->align_kv ? 1 : 0);
    put64(&b, nt); put64(&b, nkv);
    if (m->key_len) { put64(&b, m->key_len); put(&b, "abc", 3); } else putstr(&b, "k.u32");
    put32(&b, m->kv_type);
    put32(&b, 7);
    putstr(&b, "k.arr"); put32(&b, GGUF_ARRAY); put32(&b, m->arr_type); put64(&b, m->arr_n);
    { uint32_t v[3] = {1, 2, 3}; put(&b, v, sizeof v); }
    if (m->nest) {
        putstr(&b, "k.nest"); put32(&b, GGUF_ARRAY);
        for (int i = 1; i < m->nest; i++) { put32(&b, GGUF_ARRAY); put64(&b, 1); }
        put32(&b, GGUF_U8); put64(&b, 1); { uint8_t z = 9; put(&b, &z, 1); }
    }
    if (m->dup_key) { putstr(&b, "k.u32"); put32(&b, GGUF_U32); put32(&b, 8); }
    if (m->align_kv) { putstr(&b, "general.alignment"); put32(&b, GGUF_U32); put32(&b, m->align_kv); }
    for (uint64_t t = 0; t < (m->dup_tensor ? 2u : 1u); t++) {
        putstr(&b, "blk.3.attn_kv.weight");
        put32(&b, m->n_dims);
        for (uint32_t d = 0; d < m->n_dims && d < 12; d++) put64(&b, d == 0 ? m->ne0 : d == 1 ? m->ne1 : 1);
        put32(&b, m->ttype);
        put64(&b, m->toff);
    }
    pad_to(&b, m->align_kv && m->align_kv <= 4096 ? m->align_kv : 32);
    float data[4] = {1, 2, 3, 4};
    put(&b, data, sizeof data);
    pad_to(&b, 32);
    return b;
}

static void expect_error(const mini *m, const char *want, const char *what) {
    buf b = mini_build(m);
    char err[300] = "";
    gguf_file *f = open_exact(b.p, b.n, err, sizeof err);
    CHECK(!f, "%s: corrupt file opened", what);
    CHECK(!f && strstr(err, want), "%s: error '%s' lacks '%s'", what, err, want);
    free(b.p);
}

/* A file whose only key is general.alignment of the given type and value
 * must open with the default alignment, 32. */
static void check_default_alignment(uint32_t type, uint64_t value, const char *what) {
    buf b = {0};
    put32(&b, 0x46554747u); put32(&b, 3); put64(&b, 0); put64(&b, 1);
    putstr(&b, "general.alignment"); put32(&b, type);
    if (type == GGUF_U64) put64(&b, value);
    else put32(&b, (uint32_t)value);
    char err[256];
    gguf_file *f = gguf_open_buffer(b.p, b.n, err, sizeof err);
    CHECK(f && f->alignment == 32, "%s: %s", what, f ? "other alignment" : err);
    if (f) gguf_close(f);
    free(b.p);
}

static void test_corrupt(void) {
    mini m = mini_default();
    {   /* the base case is valid */
        buf b = mini_build(&m);
        char err[256] = "";
        gguf_file *f = gguf_open_buffer(b.p, b.n, err, sizeof err);
        CHECK(f, "base mini file opens: %s", err);
        if (f) {
            const gguf_tensor *t = gguf_find_tensor(f, "blk.3.attn_kv.weight");
            CHECK(t && t->nbytes == 16 && ((const float *)t->data)[3] == 4.0f, "mini tensor");
            gguf_close(f);
        }
        free(b.p);
    }
    m = mini_default(); m.magic = 0x46554746; expect_error(&m, "not a GGUF", "magic");
    m = mini_default(); m.version = 2; expect_error(&m, "version 2", "version 2");
    m = mini_default(); m.n_tensors = 1ull << 62; expect_error(&m, "tensor count", "huge tensor count");
    m = mini_default(); m.n_kv = UINT64_MAX; expect_error(&m, "metadata count", "huge kv count");
    m = mini_default(); m.n_kv = 3; expect_error(&m, "", "kv count one too many");
    m = mini_default(); m.key_len = UINT64_MAX; expect_error(&m, "string length", "huge key length");
    m = mini_default(); m.key_len = 1000; expect_error(&m, "string length", "key past the end");
    m = mini_default(); m.kv_type = 13; expect_error(&m, "unknown value type 13", "bad value type");
    m = mini_default(); m.kv_type = 0xFFFFFFFF; expect_error(&m, "unknown value type", "bad value type 2");
    m = mini_default(); m.arr_n = 1ull << 62; expect_error(&m, "array of", "array count overflow (u32)");
    m = mini_default(); m.arr_type = GGUF_U64; m.arr_n = (1ull << 61) + 1; expect_error(&m, "array of", "array bytes overflow");
    m = mini_default(); m.arr_type = GGUF_STRING; m.arr_n = 1ull << 60; expect_error(&m, "array of", "string array count");
    m = mini_default(); m.arr_type = GGUF_ARRAY; m.arr_n = 1ull << 60; expect_error(&m, "array of", "nested array count");
    m = mini_default(); m.arr_type = 99; expect_error(&m, "unknown array element type 99", "bad element type");
    m = mini_default(); m.nest = 8; { buf b = mini_build(&m); char e[256]; gguf_file *f = gguf_open_buffer(b.p, b.n, e, sizeof e);
        CHECK(f, "8 nested levels are fine: %s", e); if (f) gguf_close(f); free(b.p); }
    m = mini_default(); m.nest = 9; expect_error(&m, "nested deeper", "9 nested levels");
    m = mini_default(); m.n_dims = 0; expect_error(&m, "0 dimensions", "zero dims");
    m = mini_default(); m.n_dims = 9; expect_error(&m, "9 dimensions", "nine dims");
    m = mini_default(); m.n_dims = 0x80000000u; expect_error(&m, "dimensions", "huge dims");
    m = mini_default(); m.n_dims = 2; m.ne0 = 1ull << 32; m.ne1 = 1ull << 32; expect_error(&m, "element count overflows", "dims product");
    m = mini_default(); m.ne0 = UINT64_MAX; expect_error(&m, "element count overflows", "dim > INT64_MAX");
    m = mini_default(); m.ne0 = 1ull << 62; expect_error(&m, "byte size overflows", "bytes overflow");
    m = mini_default(); m.ne0 = 1ull << 40; expect_error(&m, "tensor 'blk.3.attn_kv.weight' data [", "data past the end");
    m = mini_default(); m.ne0 = 1ull << 40; expect_error(&m, "exceeds file size", "data past the end (size)");
    m = mini_default(); m.toff = UINT64_MAX - 4; expect_error(&m, "exceeds file size", "offset overflow");
    m = mini_default(); m.toff = 32; expect_error(&m, "exceeds file size", "offset past the end");
    m = mini_default(); m.dup_key = 1; expect_error(&m, "duplicate metadata key 'k.u32'", "duplicate key");
    m = mini_default(); m.dup_tensor = 1; expect_error(&m, "duplicate tensor name", "duplicate tensor");
    m = mini_default(); m.align_kv = 0xFFFFFFFFu; expect_error(&m, "exceeds file size", "huge alignment");
    for (int k = 0; k < 2; k++) {   /* unknown tensor type (or an internal id): opens, size 0, no data (ds4 only warns) */
        m = mini_default(); m.ttype = k ? 77 : 64;
        buf b = mini_build(&m);
        char err[256] = "";
        gguf_file *f = gguf_open_buffer(b.p, b.n, err, sizeof err);
        CHECK(f, "unknown tensor type still opens: %s", err);
        if (f) {
            CHECK(f->tensors[0].nbytes == 0 && f->tensors[0].data == NULL, "unknown type: nbytes 0, data NULL");
            gguf_close(f);
        }
        free(b.p);
    }
    check_default_alignment(GGUF_U64, 64, "u64 alignment ignored (ds4 then assumes 32)");
    check_default_alignment(GGUF_U32, 0, "a u32 alignment of 0 means the default 32");
    {   /* every single-byte corruption of the mini file: error or success, never a crash */
        m = mini_default(); m.nest = 3;
        buf b = mini_build(&m);
        for (size_t i = 0; i < b.n; i++)
            for (int v = 0; v < 3; v++) {
                uint8_t save = b.p[i];
                b.p[i] = v == 0 ? 0xFF : v == 1 ? 0x00 : (uint8_t)(save ^ 0x80);
                char err[256];
                open_exact(b.p, b.n, err, sizeof err);
                b.p[i] = save;
            }
        free(b.p);
    }
}

/* ---- 4. files on disk and writer misuse ---- */

static void test_files_and_writer(void) {
    char err[256], path[600], tmp[700];
    CHECK(!gguf_open("/nonexistent/x.gguf", err, sizeof err) && strstr(err, "No such file"), "missing file: %s", err);
    CHECK(!gguf_open(test_tmpdir(), err, sizeof err) && strstr(err, "not a regular file"), "directory: %s", err);
    test_path(path, sizeof path, "small.gguf");
    FILE *fp = fopen(path, "wb");
    fputs("GGUF", fp);
    fclose(fp);
    CHECK(!gguf_open(path, err, sizeof err) && strstr(err, "too small"), "4-byte file: %s", err);

    uint64_t ne[2] = {32, 2};
    float zeros[64] = {0};
    /* incomplete data: close fails, nothing left behind */
    test_path(path, sizeof path, "w1.gguf");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    gguf_writer *w = gguf_writer_open(path, 32, err, sizeof err);
    gguf_w_tensor(w, "a", 2, ne, GGML_TYPE_F32);
    gguf_writer_begin_data(w);
    gguf_w_data(w, zeros, 100);
    CHECK(gguf_writer_close(w) == -1 && strstr(gguf_writer_error(NULL), "incomplete"), "incomplete: %s", gguf_writer_error(NULL));
    CHECK(!test_file_exists(path) && !test_file_exists(tmp), "failed close leaves no file");
    /* too much data */
    w = gguf_writer_open(path, 32, err, sizeof err);
    gguf_w_tensor(w, "a", 2, ne, GGML_TYPE_F32);
    gguf_writer_begin_data(w);
    CHECK(gguf_w_data(w, zeros, sizeof zeros) == -1 || gguf_w_data(w, zeros, 4) == -1, "extra data refused");
    CHECK(strstr(gguf_writer_error(w), "beyond the last tensor"), "extra data: %s", gguf_writer_error(w));
    CHECK(gguf_writer_close(w) == -1, "close after error fails");
    CHECK(!test_file_exists(path), "no file after error");
    /* declaration errors */
    w = gguf_writer_open(path, 32, err, sizeof err);
    gguf_w_tensor(w, "a", 2, ne, GGML_TYPE_F32);
    CHECK(gguf_w_tensor(w, "a", 2, ne, GGML_TYPE_F32) == -1 && strstr(gguf_writer_error(w), "duplicate tensor"), "dup tensor");
    gguf_writer_abort(w);
    CHECK(!test_file_exists(tmp), "abort removes the temp file");
    w = gguf_writer_open(path, 32, err, sizeof err);
    uint64_t ne_bad[1] = {33};
    CHECK(gguf_w_tensor(w, "q", 1, ne_bad, GGML_TYPE_Q8_0) == -1 && strstr(gguf_writer_error(w), "block"), "row not a block multiple");
    gguf_writer_abort(w);
    w = gguf_writer_open(path, 32, err, sizeof err);
    CHECK(gguf_w_tensor(w, "q", 1, ne, 77) == -1 && strstr(gguf_writer_error(w), "unknown type"), "unknown type");
    gguf_writer_abort(w);
    w = gguf_writer_open(path, 32, err, sizeof err);
    gguf_w_u32(w, "k", 1);
    gguf_w_str(w, "k", "x");
    CHECK(strstr(gguf_writer_error(w), "duplicate metadata key 'k'"), "dup key: %s", gguf_writer_error(w));
    gguf_writer_abort(w);
    w = gguf_writer_open(path, 32, err, sizeof err);
    gguf_w_u32(w, "general.alignment", 64);
    CHECK(strstr(gguf_writer_error(w), "differs"), "alignment key mismatch: %s", gguf_writer_error(w));
    gguf_writer_abort(w);
    w = gguf_writer_open(path, 32, err, sizeof err);
    gguf_w_raw(w, "bad", GGUF_ARRAY, "\x04\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00", 12);
    CHECK(strstr(gguf_writer_error(w), "malformed"), "raw value validated: %s", gguf_writer_error(w));
    gguf_writer_abort(w);
    w = gguf_writer_open(path, 32, err, sizeof err);
    gguf_writer_begin_data(w);
    gguf_w_u32(w, "late", 1);
    CHECK(strstr(gguf_writer_error(w), "after the header"), "late metadata: %s", gguf_writer_error(w));
    gguf_writer_abort(w);
    CHECK(!gguf_writer_open("/nonexistent/dir/x.gguf", 32, err, sizeof err) && strstr(err, "No such file"), "writer open error: %s", err);

    /* atomic replace: an existing file is replaced only on a successful close */
    test_path(path, sizeof path, "replace.gguf");
    fp = fopen(path, "wb"); fputs("old", fp); fclose(fp);
    w = gguf_writer_open(path, 32, err, sizeof err);
    gguf_w_tensor(w, "a", 2, ne, GGML_TYPE_F32);
    gguf_writer_begin_data(w);
    gguf_writer_abort(w);
    size_t sz = 0;
    uint8_t *b = test_read_file(path, &sz);
    CHECK(b && sz == 3 && !memcmp(b, "old", 3), "abort keeps the old file");
    free(b);
    w = gguf_writer_open(path, 32, err, sizeof err);
    gguf_w_u32(w, "x", 5);
    gguf_w_tensor(w, "a", 2, ne, GGML_TYPE_F32);
    gguf_w_tensor(w, "b", 1, ne, GGML_TYPE_F32);
    gguf_writer_begin_data(w);
    gguf_w_zeros(w, 64 * 4);   /* a sparse hole */
    gguf_w_data(w, zeros, 32 * 4);
    CHECK(gguf_writer_close(w) == 0, "close: %s", gguf_writer_error(NULL));
    gguf_file *f = gguf_open(path, err, sizeof err);
    CHECK(f && f->n_tensors == 2 && f->n_kv == 1, "replaced file opens: %s", err);
    if (f) {
        const gguf_tensor *t = gguf_find_tensor(f, "a");
        int allzero = 1;
        for (uint64_t i = 0; t && i < t->nbytes; i++) allzero &= ((const uint8_t *)t->data)[i] == 0;
        CHECK(t && allzero, "hole reads as zeros");
        gguf_close(f);
    }
    /* a trailing hole still gives the full file size */
    test_path(path, sizeof path, "hole.gguf");
    w = gguf_writer_open(path, 32, err, sizeof err);
    uint64_t big[2] = {1024, 1024};
    gguf_w_tensor(w, "big", 2, big, GGML_TYPE_F32);
    gguf_writer_begin_data(w);
    gguf_w_zeros(w, 4ull << 20);
    CHECK(gguf_writer_close(w) == 0, "hole close: %s", gguf_writer_error(NULL));
    f = gguf_open(path, err, sizeof err);
    CHECK(f && f->tensors[0].nbytes == 4ull << 20, "trailing hole file opens: %s", err);
    if (f) gguf_close(f);
}

int main(void) {
    fill_tensor_data();
    test_roundtrip();
    test_truncation();
    test_corrupt();
    test_files_and_writer();
    return test_finish("test_gguf");
}
