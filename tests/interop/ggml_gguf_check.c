/* ggml_gguf_check.c: read a GGUF with ggml's GGUF reader (the one llama.cpp
 * links, ggml/src/gguf.cpp) and print its directory in a fixed text form.
 *
 * Built outside the minke tree against a ggml checkout (docs/interop.md):
 *   cc -O1 -I$GGML/include tests/interop/ggml_gguf_check.c \
 *      $GGML/build/src/libggml-base.a -lstdc++ -lm -pthread -o ggml_gguf_check
 * It cannot link libminke as well (both libraries define gguf_find_tensor).
 *
 * ggml's reader checks the magic, version, every key/value and tensor info
 * (types, dims, duplicate names, overflow), the alignment key and that each
 * tensor offset equals the running, aligned sum of the sizes before it. With
 * --data it also reads every tensor's bytes (so a truncated file fails);
 * without it only the header is read. On top of that this program checks
 * that every tensor ends inside the file and that sizes match ggml_nbytes.
 *
 * Output: "file: ...", "kv KEY TYPE[ARRTYPE xN]" for each key, then
 * "NAME TYPE [ne0, ne1, ...] BYTES" for each tensor, then "ok". Exit 0 when
 * ggml accepted the file and every extra check passed.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ggml.h"
#include "gguf.h"

int main(int argc, char **argv) {
    int read_data = 0;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data")) read_data = 1;
        else path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "usage: ggml_gguf_check [--data] FILE.gguf\n");
        return 2;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return 1;
    }
    struct ggml_context *ctx = NULL;
    struct gguf_init_params params = {.no_alloc = !read_data, .ctx = &ctx};
    struct gguf_context *g = gguf_init_from_file(path, params);
    if (!g) {
        printf("FAIL: ggml gguf_init_from_file rejected %s\n", path);
        return 1;
    }
    int bad = 0;
    size_t data_off = gguf_get_data_offset(g), align = gguf_get_alignment(g);
    printf("file: %s: GGUF v%u, alignment %zu, %" PRId64 " keys, %" PRId64 " tensors, data at %zu\n", path,
           gguf_get_version(g), align, gguf_get_n_kv(g), gguf_get_n_tensors(g), data_off);
    for (int64_t k = 0; k < gguf_get_n_kv(g); k++) {
        enum gguf_type t = gguf_get_kv_type(g, k);
        if (t == GGUF_TYPE_ARRAY)
            printf("kv %s %s[%s x%zu]\n", gguf_get_key(g, k), gguf_type_name(t), gguf_type_name(gguf_get_arr_type(g, k)),
                   gguf_get_arr_n(g, k));
        else
            printf("kv %s %s\n", gguf_get_key(g, k), gguf_type_name(t));
    }
    for (int64_t i = 0; i < gguf_get_n_tensors(g); i++) {
        const char *name = gguf_get_tensor_name(g, i);
        enum ggml_type type = gguf_get_tensor_type(g, i);
        size_t off = gguf_get_tensor_offset(g, i), size = gguf_get_tensor_size(g, i);
        struct ggml_tensor *t = ggml_get_tensor(ctx, name);
        int nd = t ? ggml_n_dims(t) : 0;
        printf("%s %s [", name, ggml_type_name(type));
        for (int d = 0; d < nd; d++) printf("%s%" PRId64, d ? ", " : "", t->ne[d]);
        printf("] %zu\n", size);
        if (!t || ggml_nbytes(t) != size) {
            printf("FAIL: %s: ggml tensor missing or ggml_nbytes differs from the directory size\n", name);
            bad = 1;
        }
        if (off % align) {
            printf("FAIL: %s: offset %zu not aligned to %zu\n", name, off, align);
            bad = 1;
        }
        if ((uint64_t)data_off + off + size > (uint64_t)st.st_size) {
            printf("FAIL: %s: ends at %" PRIu64 ", past the end of the file (%" PRIu64 ")\n", name,
                   (uint64_t)data_off + off + size, (uint64_t)st.st_size);
            bad = 1;
        }
    }
    gguf_free(g);
    if (ctx) ggml_free(ctx);
    printf("%s\n", bad ? "FAIL" : "ok");
    return bad;
}
