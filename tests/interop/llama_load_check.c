/* llama_load_check.c: load a GGUF that minke wrote with llama.cpp's model
 * loader (libllama, architecture "deepseek4") and, optionally, tokenize the
 * tokenizer fixture cases with llama.cpp's tokenizer.
 *
 * Built outside the minke tree against a llama.cpp release (docs/interop.md):
 *   cc -O1 -I$LLAMA/include -I$LLAMA/ggml/include tests/interop/llama_load_check.c \
 *      -L$LIBDIR -l:libllama.so -l:libggml-base.so -ljansson -Wl,-rpath,$LIBDIR
 *
 * Default mode: llama_model_load_from_file with no_alloc (metadata, every
 * hyperparameter the deepseek4 loader reads, vocabulary, and the creation of
 * every tensor with the shape the loader expects, without reading weights).
 * --vocab-only stops after the vocabulary; --cases FILE.jsonl then tokenizes
 * each {"text", "ids", ["add_bos"]} case (special tokens parsed, nothing
 * added; BOS prepended for add_bos cases) and compares with the fixture ids.
 * --backends DIR loads ggml's CPU backend from DIR first (needed when ggml
 * was built with dynamically loaded backends).
 * Exit 0 when the model loaded and every case matched.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "llama.h"

static int check_cases(const struct llama_vocab *vocab, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    int n = 0, bad = 0;
    int32_t *toks = malloc(sizeof(int32_t) * 65536);
    llama_token bos = llama_vocab_bos(vocab);
    while (getline(&line, &cap, f) > 0) {
        json_error_t je;
        json_t *c = json_loads(line, 0, &je);
        if (!c) continue;
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t len = json_string_length(json_object_get(c, "text"));
        json_t *ids = json_object_get(c, "ids");
        int add_bos = json_is_true(json_object_get(c, "add_bos"));
        if (!text || !json_is_array(ids)) {
            json_decref(c);
            continue;
        }
        int k = 0;
        if (add_bos) toks[k++] = bos;
        int r = len ? llama_tokenize(vocab, text, (int32_t)len, toks + k, 65536 - k, false, true) : 0;
        int ok = r >= 0 && (size_t)(r + k) == json_array_size(ids);
        for (int i = 0; ok && i < r + k; i++)
            if (toks[i] != (int32_t)json_integer_value(json_array_get(ids, (size_t)i))) ok = 0;
        n++;
        if (!ok && ++bad <= 20) {
            printf("MISMATCH %.60s: llama.cpp", text);
            for (int i = 0; i < r + k && i < 24; i++) printf(" %d", toks[i]);
            printf(" (n=%d) vs fixture", r + k);
            for (size_t i = 0; i < json_array_size(ids) && i < 24; i++)
                printf(" %lld", (long long)json_integer_value(json_array_get(ids, i)));
            printf("\n");
        }
        json_decref(c);
    }
    free(line);
    free(toks);
    fclose(f);
    printf("llama.cpp tokenization: %d/%d cases match\n", n - bad, n);
    return bad ? -1 : 0;
}

int main(int argc, char **argv) {
    const char *path = NULL, *cases = NULL, *backends = NULL;
    int vocab_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--vocab-only")) vocab_only = 1;
        else if (!strcmp(argv[i], "--cases") && i + 1 < argc) cases = argv[++i];
        else if (!strcmp(argv[i], "--backends") && i + 1 < argc) backends = argv[++i];
        else path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "usage: llama_load_check [--vocab-only] [--cases FILE.jsonl] [--backends DIR] FILE.gguf\n");
        return 2;
    }
    if (backends) ggml_backend_load_all_from_path(backends);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.load_mode = LLAMA_LOAD_MODE_NONE; /* no_alloc refuses mmap'd buffers */
    mp.vocab_only = vocab_only;
    mp.no_alloc = !vocab_only;
    struct llama_model *m = llama_model_load_from_file(path, mp);
    if (!m) {
        printf("FAIL: llama.cpp could not load %s\n", path);
        return 1;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(m);
    char desc[256] = "";
    llama_model_desc(m, desc, sizeof desc);
    printf("loaded %s: %s, %d metadata keys, vocab %d, %llu parameters, %llu bytes\n", path, desc,
           llama_model_meta_count(m), llama_vocab_n_tokens(vocab), (unsigned long long)llama_model_n_params(m),
           (unsigned long long)llama_model_size(m));
    int rc = cases ? check_cases(vocab, cases) : 0;
    llama_model_free(m);
    llama_backend_free();
    printf("%s\n", rc ? "FAIL" : "ok");
    return rc ? 1 : 0;
}
