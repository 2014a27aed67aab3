/* fuzz_gguf.c: libFuzzer harness for the GGUF reader and the DeepSeek V4
 * config/tensor checks. Every input is opened from memory; when it parses,
 * every kv, getter, array element and tensor byte range is touched, then the
 * model checks run. Any out-of-bounds read, overflow or leak is a bug.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/config.h"

static volatile uint64_t sink;

static void walk_kv(const gguf_file *f, const gguf_kv *kv) {
    char key[256];
    size_t n = kv->key.len < sizeof key - 1 ? (size_t)kv->key.len : sizeof key - 1;
    memcpy(key, kv->key.ptr, n);
    key[n] = 0;
    uint32_t u32; uint64_t u64; int32_t i32; float f32; int b; gguf_str s;
    if (!gguf_get_u32(f, key, &u32)) sink += u32;
    if (!gguf_get_u64(f, key, &u64)) sink += u64;
    if (!gguf_get_i32(f, key, &i32)) sink += (uint64_t)i32;
    if (!gguf_get_f32(f, key, &f32)) sink += (uint64_t)(f32 == f32);
    if (!gguf_get_bool(f, key, &b)) sink += (uint64_t)b;
    if (!gguf_get_str(f, key, &s) && s.len) sink += (uint8_t)s.ptr[s.len - 1];
    if (kv->type != GGUF_ARRAY) return;
    double d;
    if (kv->arr_n) {
        if (!gguf_arr_get_num(kv, 0, &d)) sink += (uint64_t)(d == d);
        if (!gguf_arr_get_num(kv, kv->arr_n - 1, &d)) sink += (uint64_t)(d == d);
    }
    gguf_arr_get_num(kv, kv->arr_n, &d); /* out of range: must refuse */
    /* a string array of arr_n elements needs >= 8 bytes each, so this allocation is bounded */
    if (kv->arr_type == GGUF_STRING && kv->arr_n <= kv->data_len / 8 + 1) {
        gguf_str *v = malloc((size_t)(kv->arr_n + 1) * sizeof *v);
        if (v && !gguf_arr_strings(kv, v))
            for (uint64_t i = 0; i < kv->arr_n; i++) if (v[i].len) sink += (uint8_t)v[i].ptr[v[i].len - 1];
        free(v);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    gguf_file *f = gguf_open_buffer(data, size, err, sizeof err);
    if (!f) return 0;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        walk_kv(f, &f->kv[i]);
        if (!gguf_find_kv(f, "general.alignment")) sink++;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        const gguf_tensor *g = gguf_find_tensor(f, t->cname);
        sink += g != NULL;
        sink += gguf_tensor_nel(t);
        if (t->data && t->nbytes) {
            const uint8_t *p = t->data;
            sink += p[0] + p[t->nbytes - 1];
        }
    }
    dsv4_config c;
    if (dsv4_config_from_gguf(f, &c, err, sizeof err) == 0) {
        dsv4_tensor_spec *specs;
        int n = dsv4_tensor_specs(&c, &specs);
        if (n > 0) free(specs);
        sink += (uint64_t)dsv4_check_tensors(f, &c, err, sizeof err);
        sink += (uint64_t)dsv4_check_tokenizer(f, &c, err, sizeof err);
        sink += (uint64_t)dsv4_check_ds4_compat(f, &c, err, sizeof err);
        char sum[512];
        dsv4_config_summary(&c, sum, sizeof sum);
    }
    sink += (uint64_t)dsv4_check_tokenizer(f, NULL, err, sizeof err);
    gguf_close(f);
    return 0;
}
