/* make_seeds.c: writes the seed corpus for fuzz_gguf into DIR: a micro
 * DeepSeek V4 model (every tensor kind, F16/F32/I32, with a tokenizer), a
 * file with every metadata type and nested arrays, and tiny edge cases.
 * Small on purpose so the fuzzer runs fast.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/config.h"
#include "quant/quant.h"

static int micro_model(const char *path, int with_tokenizer, int q8) {
    dsv4_config c;
    dsv4_config_preset(&c, "tiny");
    /* the smallest dims validation allows */
    uint32_t w8 = q8 ? 32 : 8; /* Q8_0 rows need 32 elements */
    c.n_layer = 3; c.n_embd = w8; c.n_vocab = 8; c.n_head = 1; c.head_dim = 66; c.value_dim = 66; c.rope_dim = 2;
    c.q_lora_rank = w8; c.o_lora_rank = w8; c.o_groups = 1; c.n_expert = 2; c.n_expert_used = 1; c.expert_ff = w8;
    c.n_hash_layer = 1; c.sliding_window = 2; c.indexer_n_head = 1; c.indexer_head_dim = 32; c.indexer_top_k = 1;
    c.n_hc = 1; c.compress_ratio[0] = 0; c.compress_ratio[1] = 4; c.compress_ratio[2] = 5;
    dsv4_config_derive(&c);
    char err[256];
    if (dsv4_config_validate(&c, err, sizeof err)) { fprintf(stderr, "micro config: %s\n", err); return -1; }
    gguf_writer *w = gguf_writer_open(path, 32, err, sizeof err);
    if (!w) { fprintf(stderr, "%s\n", err); return -1; }
    dsv4_config_write_gguf(w, &c);
    if (with_tokenizer) {
        const char *toks[8];
        for (int i = 0; i < 7; i++) toks[i] = dsv4_special_tokens[i];
        toks[7] = "a";
        gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 8);
        const char *merges[1] = {"a a"};
        gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    }
    dsv4_tensor_spec *s;
    int n = dsv4_tensor_specs(&c, &s);
    for (int i = 0; i < n; i++) {
        int t = s[i].role == DSV4_ROLE_NORM ? GGML_TYPE_F32 : s[i].role == DSV4_ROLE_TID2EID ? GGML_TYPE_I32 : GGML_TYPE_F16;
        if (q8 && s[i].role == DSV4_ROLE_DENSE && s[i].ne[0] % 32 == 0) t = GGML_TYPE_Q8_0;
        gguf_w_tensor(w, s[i].name, s[i].n_dims, s[i].ne, (uint32_t)t);
    }
    gguf_writer_begin_data(w);
    for (int i = 0; i < n; i++) {
        uint64_t nb = gguf_writer_tensor_nbytes(w, i);
        uint8_t *b = calloc(1, nb);
        gguf_w_data(w, b, nb);
        free(b);
    }
    free(s);
    if (gguf_writer_close(w)) { fprintf(stderr, "%s\n", gguf_writer_error(NULL)); return -1; }
    return 0;
}

static int all_types(const char *path) {
    char err[256];
    gguf_writer *w = gguf_writer_open(path, 64, err, sizeof err);
    if (!w) return -1;
    uint8_t u8 = 1; int16_t i16 = -2; int64_t i64 = -3; double f64 = 0.5;
    gguf_w_scalar(w, "u8", GGUF_U8, &u8);
    gguf_w_scalar(w, "i16", GGUF_I16, &i16);
    gguf_w_scalar(w, "i64", GGUF_I64, &i64);
    gguf_w_scalar(w, "f64", GGUF_F64, &f64);
    gguf_w_u32(w, "u32", 7);
    gguf_w_i32(w, "i32", -7);
    gguf_w_u64(w, "u64", 9);
    gguf_w_f32(w, "f32", 1.5f);
    gguf_w_bool(w, "b", 1);
    gguf_w_str(w, "s", "str");
    uint32_t a[3] = {1, 2, 3};
    gguf_w_arr_u32(w, "au32", a, 3);
    const char *ss[2] = {"x", "yz"};
    gguf_w_arr_str(w, "astr", ss, 2);
    /* [[1,2],[3]] of u16 */
    uint8_t nested[12 + 12 + 4 + 12 + 2];
    uint8_t *p = nested;
    uint32_t t; uint64_t cnt; uint16_t v;
    t = GGUF_ARRAY; memcpy(p, &t, 4); p += 4; cnt = 2; memcpy(p, &cnt, 8); p += 8;
    t = GGUF_U16; memcpy(p, &t, 4); p += 4; cnt = 2; memcpy(p, &cnt, 8); p += 8;
    v = 1; memcpy(p, &v, 2); p += 2; v = 2; memcpy(p, &v, 2); p += 2;
    t = GGUF_U16; memcpy(p, &t, 4); p += 4; cnt = 1; memcpy(p, &cnt, 8); p += 8;
    v = 3; memcpy(p, &v, 2); p += 2;
    gguf_w_raw(w, "nested", GGUF_ARRAY, nested, (uint64_t)(p - nested));
    uint64_t ne2[2] = {32, 2}, ne1[1] = {3};
    gguf_w_tensor(w, "q8", 2, ne2, GGML_TYPE_Q8_0);
    gguf_w_tensor(w, "f32", 1, ne1, GGML_TYPE_F32);
    gguf_writer_begin_data(w);
    gguf_w_zeros(w, 2 * 34 + 12);
    return gguf_writer_close(w);
}

static int empty(const char *path) {
    char err[256];
    gguf_writer *w = gguf_writer_open(path, 32, err, sizeof err);
    return w ? gguf_writer_close(w) : -1;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: make_seeds DIR\n"); return 2; }
    char p[1024];
    int rc = 0;
    snprintf(p, sizeof p, "%s/micro_tok.gguf", argv[1]); rc |= micro_model(p, 1, 0);
    snprintf(p, sizeof p, "%s/micro_q8.gguf", argv[1]); rc |= micro_model(p, 0, 1);
    snprintf(p, sizeof p, "%s/all_types.gguf", argv[1]); rc |= all_types(p);
    snprintf(p, sizeof p, "%s/empty.gguf", argv[1]); rc |= empty(p);
    return rc ? 1 : 0;
}
