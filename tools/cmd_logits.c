/* cmd_logits.c: `minke logits`, the test interface of the engine: run a file
 * of int32 token ids through a model and write the float32 logits of every
 * position, row-major [T, vocab]. Optional debug taps write each named
 * intermediate tensor to DIR/<name>.f32 (one row per position, in order).
 * Debug options record the CPU forward pass's discrete choices (router
 * experts, indexer rows) or pin a run to a recording (src/cpu/selections.h),
 * to compare two models with the same choices.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "cpu/selections.h"
#include "minke.h"

static void usage(void) {
    fprintf(stderr,
            "usage: minke logits -m MODEL.gguf --tokens IN.i32 --out OUT.f32 [options]\n"
            "  --backend cpu|cuda   compute backend (default cpu)\n"
            "  --chunk N            prefill in chunks of N tokens (default: all at once)\n"
            "  --decode             run the tokens one at a time\n"
            "  --sims on|off        FP8 KV / Hadamard+FP4 indexer simulations (default on)\n"
            "  --gpus N|all         cuda: GPUs in one process (routed experts split by id)\n"
            "  --threads N          CPU threads (default: all cores)\n"
            "  --ctx N              context size (default: number of tokens)\n"
            "  --dump-taps DIR      write intermediate tensors to DIR/<name>.f32\n"
            "  --act exact|q8       quantized-weight products: exact f32 activations (default) or\n"
            "                       ds4's int8 activation quantization (docs/numerics.md)\n"
            "  --time               print tokens/s on stderr\n"
            "  --restore-at K       after the first K tokens, serialise the session, free it and\n"
            "                       continue in a new session loaded from those bytes (checks the\n"
            "                       state payload: the logits must not change)\n"
            "  --record-selections FILE  (cpu, debug) write the router's expert ids and the\n"
            "                       indexer's row ids of every layer and position to FILE\n"
            "  --pin-selections FILE     (cpu, debug) force the ids recorded in FILE (the\n"
            "                       routing weights still come from this run's scores)\n");
}

typedef struct tap_file { char name[64]; FILE *f; } tap_file;
typedef struct tap_state { const char *dir; tap_file files[512]; int n; int failed; } tap_state;

static void tap_write(void *user, const char *name, int pos, const float *data, int64_t n) {
    (void)pos;
    tap_state *ts = user;
    tap_file *tf = NULL;
    for (int i = 0; i < ts->n; i++) if (!strcmp(ts->files[i].name, name)) { tf = &ts->files[i]; break; }
    if (!tf) {
        if (ts->n >= 512) return;
        tf = &ts->files[ts->n];
        snprintf(tf->name, sizeof tf->name, "%s", name);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.f32", ts->dir, name);
        tf->f = fopen(path, "wb");
        if (!tf->f) { ts->failed = 1; return; }
        ts->n++;
    }
    if (fwrite(data, sizeof(float), (size_t)n, tf->f) != (size_t)n) ts->failed = 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* --restore-at: the session's state through its serialised bytes into a new
 * session (the old one freed first, so the new one cannot share its memory);
 * NULL with the error printed (the old session freed all the same) */
static minke_session *restore_session(minke_model *m, minke_session *s, int n_ctx) {
    uint64_t len = minke_session_serial_bytes(s);
    void *buf = len ? malloc(len) : NULL;
    if (!buf || minke_session_serialize(s, buf, len) != 0) {
        fprintf(stderr, "minke logits: cannot serialise the session: %s\n", buf ? minke_last_error() : "out of memory");
        free(buf);
        minke_session_free(s);
        return NULL;
    }
    minke_session_free(s);
    minke_session *n = minke_session_create(m, n_ctx);
    if (!n || minke_session_deserialize(n, buf, len) != 0) {
        fprintf(stderr, "minke logits: cannot load the serialised session: %s\n", minke_last_error());
        if (n) minke_session_free(n);
        n = NULL;
    }
    free(buf);
    return n;
}

int cmd_logits(int argc, char **argv) {
    minke_model_params mp;
    minke_model_params_default(&mp);
    const char *tok_path = NULL, *out_path = NULL, *tap_dir = NULL, *record_path = NULL, *pin_path = NULL;
    int chunk = 0, decode = 0, n_ctx = 0, timing = 0, restore_at = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED() do { if (!v) { fprintf(stderr, "minke logits: %s needs a value\n", a); return 2; } i++; } while (0)
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED(); mp.path = v; }
        else if (!strcmp(a, "--tokens")) { NEED(); tok_path = v; }
        else if (!strcmp(a, "--out") || !strcmp(a, "-o")) { NEED(); out_path = v; }
        else if (!strcmp(a, "--backend")) {
            NEED();
            if (!strcmp(v, "cpu")) mp.backend = MINKE_BACKEND_CPU;
            else if (!strcmp(v, "cuda")) mp.backend = MINKE_BACKEND_CUDA;
            else { fprintf(stderr, "minke logits: unknown backend '%s' (cpu or cuda)\n", v); return 2; }
        }
        else if (!strcmp(a, "--chunk")) { NEED(); chunk = atoi(v); if (chunk < 1) { fprintf(stderr, "minke logits: --chunk must be >= 1\n"); return 2; } }
        else if (!strcmp(a, "--decode")) decode = 1;
        else if (!strcmp(a, "--sims")) {
            NEED();
            if (!strcmp(v, "on")) mp.sims = 1;
            else if (!strcmp(v, "off")) mp.sims = 0;
            else { fprintf(stderr, "minke logits: --sims takes on or off\n"); return 2; }
        }
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) { NEED(); mp.n_threads = atoi(v); }
        else if (!strcmp(a, "--gpus")) {
            NEED();
            if (cli_parse_gpus(v, &mp.n_gpus)) { fprintf(stderr, "minke logits: --gpus takes a number 1..64 or all, not '%s'\n", v); return 2; }
        }
        else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) { NEED(); n_ctx = atoi(v); }
        else if (!strcmp(a, "--dump-taps")) { NEED(); tap_dir = v; }
        else if (!strcmp(a, "--time")) timing = 1;
        else if (!strcmp(a, "--restore-at")) { NEED(); restore_at = atoi(v); if (restore_at < 1) { fprintf(stderr, "minke logits: --restore-at must be >= 1\n"); return 2; } }
        else if (!strcmp(a, "--record-selections")) { NEED(); record_path = v; }
        else if (!strcmp(a, "--pin-selections")) { NEED(); pin_path = v; }
        else if (!strcmp(a, "--act")) {
            NEED();
            if (!strcmp(v, "exact")) mp.act = MINKE_ACT_EXACT;
            else if (!strcmp(v, "q8")) mp.act = MINKE_ACT_Q8;
            else { fprintf(stderr, "minke logits: --act takes exact or q8, not '%s'\n", v); return 2; }
        }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else { fprintf(stderr, "minke logits: unknown option '%s'\n", a); usage(); return 2; }
#undef NEED
    }
    if (!mp.path || !tok_path || !out_path) { usage(); return 2; }
    if ((record_path || pin_path) && mp.backend != MINKE_BACKEND_CPU) {
        fprintf(stderr, "minke logits: --record-selections/--pin-selections need the cpu backend\n");
        return 2;
    }

    FILE *tf = fopen(tok_path, "rb");
    if (!tf) { fprintf(stderr, "minke logits: cannot open %s\n", tok_path); return 1; }
    fseek(tf, 0, SEEK_END);
    long sz = ftell(tf);
    fseek(tf, 0, SEEK_SET);
    if (sz <= 0 || sz % 4) { fprintf(stderr, "minke logits: %s is not a non-empty int32 file\n", tok_path); fclose(tf); return 1; }
    int T = (int)(sz / 4);
    int32_t *tokens = malloc((size_t)sz);
    if (!tokens || fread(tokens, 4, (size_t)T, tf) != (size_t)T) { fprintf(stderr, "minke logits: cannot read %s\n", tok_path); fclose(tf); free(tokens); return 1; }
    fclose(tf);
    if (restore_at >= T) {
        fprintf(stderr, "minke logits: --restore-at %d needs more than %d tokens in %s\n", restore_at, restore_at, tok_path);
        free(tokens);
        return 2;
    }

    minke_model *m = minke_model_open(&mp);
    if (!m) { fprintf(stderr, "minke logits: %s\n", minke_last_error()); free(tokens); return 1; }
    if ((record_path && cpu_sel_record(m) != 0) || (pin_path && cpu_sel_pin(m, pin_path) != 0)) {
        fprintf(stderr, "minke logits: %s\n", minke_last_error());
        minke_model_close(m);
        free(tokens);
        return 1;
    }
    tap_state *taps = NULL;
    if (tap_dir) {
        mkdir(tap_dir, 0755);
        taps = calloc(1, sizeof *taps);
        taps->dir = tap_dir;
        minke_set_tap(m, tap_write, taps);
    }
    const minke_model_info *info = minke_model_get_info(m);
    int V = info->n_vocab;
    minke_session *s = minke_session_create(m, n_ctx > 0 ? n_ctx : T);
    int rc = 1;
    float *logits = s ? malloc(sizeof(float) * (size_t)T * V) : NULL;
    if (!s) fprintf(stderr, "minke logits: %s\n", minke_last_error());
    else if (!logits) fprintf(stderr, "minke logits: out of memory\n");
    else {
        double t0 = now_s();
        int ok = 1;
        /* the tokens in one or two parts: [0, K) and, after the session went
         * through its serialised bytes into a new one, [K, T) */
        int parts[3] = {0, restore_at ? restore_at : T, T};
        for (int part = 0; part < (restore_at ? 2 : 1) && ok; part++) {
            int i0 = parts[part], i1 = parts[part + 1];
            if (part == 1 && !(s = restore_session(m, s, n_ctx > 0 ? n_ctx : T))) { ok = 0; break; }
            if (decode) {
                for (int i = i0; i < i1 && ok; i++) {
                    const float *l = minke_decode(s, tokens[i]) == 0 ? minke_logits(s) : NULL;
                    if (!l) ok = 0;
                    else memcpy(logits + (size_t)i * V, l, sizeof(float) * V);
                }
            } else {
                minke_session_set_chunk(s, chunk);
                if (minke_prefill(s, tokens + i0, i1 - i0, logits + (size_t)i0 * V) != 0) ok = 0;
            }
        }
        double dt = now_s() - t0;
        if (!ok) fprintf(stderr, "minke logits: %s\n", minke_last_error());
        else {
            if (timing)
                fprintf(stderr, "minke logits: %d tokens in %.3f s (%.2f tokens/s, %s, %s; KV state %.2f MiB for %d tokens)\n",
                        T, dt, T / dt, info->backend, decode ? "decode" : "prefill",
                        minke_session_state_bytes(s) / 1048576.0, minke_session_n_ctx(s));
            FILE *of = fopen(out_path, "wb");
            if (!of) fprintf(stderr, "minke logits: cannot write %s\n", out_path);
            else {
                if (fwrite(logits, sizeof(float), (size_t)T * V, of) != (size_t)T * V) fprintf(stderr, "minke logits: short write to %s\n", out_path);
                else rc = 0;
                if (fclose(of) != 0) rc = 1;
            }
            if (rc == 0 && record_path && cpu_sel_save(record_path) != 0) {
                fprintf(stderr, "minke logits: %s\n", minke_last_error());
                rc = 1;
            }
            if (rc == 0 && pin_path) {
                long pinned, differed, missing;
                cpu_sel_pin_stats(&pinned, &differed, &missing);
                fprintf(stderr, "minke logits: pinned %ld selections, %ld differed from this run's own choice\n",
                        pinned, differed);
                if (missing) {
                    fprintf(stderr, "minke logits: %ld selections had no matching entry in %s\n", missing, pin_path);
                    rc = 1;
                }
            }
        }
    }
    if (taps) {
        for (int i = 0; i < taps->n; i++) fclose(taps->files[i].f);
        if (taps->failed) { fprintf(stderr, "minke logits: could not write every tap file in %s\n", tap_dir); rc = 1; }
        free(taps);
    }
    cpu_sel_reset();
    free(logits);
    if (s) minke_session_free(s);
    minke_model_close(m);
    free(tokens);
    return rc;
}
