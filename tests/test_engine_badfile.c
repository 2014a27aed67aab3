/* test_engine_badfile.c: minke_model_open on damaged DeepSeek V4 GGUFs.
 *
 * Starting from a good F32 conversion of tiny-a, single bytes of the file are
 * changed (a tensor renamed so it is missing, a tensor's shape changed, a
 * hash-routing id out of range, a truncated file, a non-GGUF file) and each
 * open must fail with an error that names the problem, never crash.
 */
#include "engine_test_util.h"
#include "gguf/gguf.h"

static char g_good[1200];

/* Write a patched copy of the good file; patch(buf, gguf) edits buf. */
static const char *patched(const char *name, void (*patch)(uint8_t *buf, const gguf_file *f), size_t cut) {
    static char out[1300];
    size_t n = 0;
    uint8_t *buf = test_read_file(g_good, &n);
    char err[256];
    gguf_file *f = gguf_open(g_good, err, sizeof err);
    if (!buf || !f) { fprintf(stderr, "cannot read %s\n", g_good); exit(1); }
    if (patch) patch(buf, f);
    gguf_close(f);
    snprintf(out, sizeof out, "%s.%s", g_good, name);
    FILE *o = fopen(out, "wb");
    if (!o) exit(1);
    fwrite(buf, 1, cut ? cut : n, o);
    fclose(o);
    free(buf);
    return out;
}

static void expect_fail(const char *path, const char *needle) {
    minke_model *m = tu_open(path, 0);
    CHECK(m == NULL, "%s: open should fail", path);
    if (m) { minke_model_close(m); return; }
    printf("%-40s -> %s\n", strrchr(path, '.') + 1, minke_last_error());
    CHECK(strstr(minke_last_error(), needle) != NULL, "error '%s' should mention '%s'", minke_last_error(), needle);
}

static void rename_kv(uint8_t *buf, const gguf_file *f) {
    const gguf_tensor *t = gguf_find_tensor(f, "blk.0.attn_kv.weight");
    if (!t) exit(1);
    buf[(const uint8_t *)t->name.ptr - f->map + 12] = 'X';   /* blk.0.attn_kX.weight */
}

static void reshape_sinks(uint8_t *buf, const gguf_file *f) {
    const gguf_tensor *t = gguf_find_tensor(f, "blk.1.attn_sinks.weight");
    if (!t) exit(1);
    /* name, then u32 n_dims, then u64 ne0 */
    uint8_t *ne0 = buf + ((const uint8_t *)t->name.ptr - f->map) + t->name.len + 4;
    uint64_t v;
    memcpy(&v, ne0, 8);
    v -= 1;
    memcpy(ne0, &v, 8);
}

static void bad_tid2eid(uint8_t *buf, const gguf_file *f) {
    const gguf_tensor *t = gguf_find_tensor(f, "blk.2.ffn_gate_tid2eid.weight");
    if (!t) exit(1);
    int32_t v = 99;
    memcpy(buf + ((const uint8_t *)t->data - f->map) + 4 * 7, &v, 4);
}

int main(void) {
    const char *dir = test_tmpdir();
    snprintf(g_good, sizeof g_good, "%s/tiny-a-f32.gguf", dir);
    if (tu_convert(TINY_A_DIR, g_good, "--experts f32 --dense f32") != 0) return 1;
    minke_model *m = tu_open(g_good, 0);
    CHECK(m != NULL, "the unpatched file opens");
    minke_model_close(m);

    expect_fail(patched("missing", rename_kv, 0), "blk.0.attn_kv.weight");
    expect_fail(patched("shape", reshape_sinks, 0), "blk.1.attn_sinks.weight");
    expect_fail(patched("tid2eid", bad_tid2eid, 0), "99");
    size_t n = 0;
    free(test_read_file(g_good, &n));
    expect_fail(patched("truncated", NULL, n / 2), "");
    char junk[1300];
    snprintf(junk, sizeof junk, "%s/not-a-model.txt", dir);
    FILE *o = fopen(junk, "w");
    fputs("hello, this is not a gguf file\n", o);
    fclose(o);
    expect_fail(junk, "");
    expect_fail("/nonexistent/model.gguf", "");
    return test_finish("test_engine_badfile");
}
