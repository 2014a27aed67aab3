/* cmd_serve.c: `minke serve`, the OpenAI- and Anthropic-compatible HTTP
 * server: option parsing, then model + worker + disk cache start-up and the
 * HTTP loop (src/server/). Exits 0 after a clean SIGINT/SIGTERM shutdown. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

#include "cli.h"
#include "server/server.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: minke serve -m MODEL.gguf [options]\n"
            "\n"
            "OpenAI (/v1/chat/completions, /v1/completions, /v1/responses) and Anthropic\n"
            "(/v1/messages) compatible server; GET /health, /v1/models, /v1/models/ID.\n"
            "\n"
            "  -m, --model FILE            model GGUF (required)\n"
            "  --host HOST                 bind address, IPv4 (default 127.0.0.1)\n"
            "  --port N                    port (default 8000)\n"
            "  --api-key KEY               require Authorization: Bearer KEY or x-api-key: KEY\n"
            "  --cors                      add CORS headers to every response\n"
            "  -c, --ctx N                 context size of the live session (default 32768)\n"
            "  -n, --tokens N              default max output tokens (default 393216)\n"
            "  --max-body-mb N             largest request body (default 64)\n"
            "  --backend cpu|cuda          compute backend (default cpu)\n"
            "  -t, --threads N             CPU threads (default: all cores)\n"
            "  --gpus N|all                cuda: GPUs in one process (routed experts split by id; default 1)\n"
            "  --act exact|q8              quantized-weight products: exact f32 activations\n"
            "                              (default) or ds4's int8 activations (docs/numerics.md)\n"
            "  --model-id ID               id reported by /v1/models (default deepseek-v4-flash)\n"
            "  --accept-any-model          accept any model name in requests (else 404)\n"
            "  --prefill-chunk N           tokens per prefill step (default 2048)\n"
            "  --keepalive-ms N            SSE keepalive interval during prefill (default 1000)\n"
            "  --kv-disk-dir DIR           enable the disk KV cache in DIR\n"
            "  --kv-disk-space-mb N        disk cache budget (default 4096)\n"
            "  --kv-cache-min-tokens N     smallest snapshot stored or loaded (default 512)\n"
            "  --kv-cache-cold-max-tokens N  longest prompt stored cold (default 30000, 0 off)\n"
            "  --kv-cache-continued-interval-tokens N  (default 10000, 0 off)\n"
            "  --kv-cache-boundary-trim-tokens N       (default 32)\n"
            "  --kv-cache-boundary-align-tokens N      (default 2048)\n"
            "  --disable-exact-dsml-tool-replay\n"
            "  --tool-memory-max-ids N     (default 100000)\n"
            "  --trace FILE                append a human-readable entry per request to FILE\n"
            "                              (prompt, cache decision, generated text; spec 4.14)\n"
            "  --no-prompt-snapshot        keep no in-memory copy of the last prompt's state\n"
            "                              (it costs one session state of that length)\n"
            "  --test-hooks                tests only: a request's \"minke_script\" text is\n"
            "                              emitted token by token instead of sampling\n");
}

static int need_int(int argc, char **argv, int *i, long lo, long hi, long *out) {
    if (*i + 1 >= argc) { fprintf(stderr, "minke serve: %s needs a value\n", argv[*i]); return -1; }
    char *end;
    long v = strtol(argv[*i + 1], &end, 10);
    if (*end || v < lo || v > hi) { fprintf(stderr, "minke serve: bad value for %s: '%s'\n", argv[*i], argv[*i + 1]); return -1; }
    *out = v;
    (*i)++;
    return 0;
}

int cmd_serve(int argc, char **argv) {
    static server_config cfg;
    cfg.host = "127.0.0.1";
    cfg.port = 8000;
    cfg.ctx = 32768;
    cfg.max_body_bytes = 64ull << 20;
    cfg.default_max_tokens = 393216;
    cfg.backend = MINKE_BACKEND_CPU;
    cfg.act = MINKE_ACT_EXACT;
    cfg.model_id = "deepseek-v4-flash";
    cfg.prefill_chunk = 2048;
    cfg.keepalive_ms = 1000;
    cfg.kv_disk_space_mb = 4096;
    cfg.kv_min_tokens = 512;
    cfg.kv_cold_max_tokens = 30000;
    cfg.kv_continued_interval = 10000;
    cfg.kv_boundary_trim = 32;
    cfg.kv_boundary_align = 2048;
    cfg.tool_replay = 1;
    cfg.tool_memory_max_ids = 100000;
    cfg.prompt_snapshot = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v = 0;
        int has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_val) cfg.model_path = argv[++i];
        else if (!strcmp(a, "--host") && has_val) cfg.host = argv[++i];
        else if (!strcmp(a, "--port")) { if (need_int(argc, argv, &i, 1, 65535, &v)) return 2; cfg.port = (int)v; }
        else if (!strcmp(a, "--api-key") && has_val) cfg.api_key = argv[++i];
        else if (!strcmp(a, "--cors")) cfg.cors = 1;
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) { if (need_int(argc, argv, &i, 16, 1 << 24, &v)) return 2; cfg.ctx = (int)v; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--tokens")) { if (need_int(argc, argv, &i, 1, 1 << 30, &v)) return 2; cfg.default_max_tokens = (int)v; }
        else if (!strcmp(a, "--max-body-mb")) { if (need_int(argc, argv, &i, 1, 4096, &v)) return 2; cfg.max_body_bytes = (size_t)v << 20; }
        else if (!strcmp(a, "--backend") && has_val) {
            const char *b = argv[++i];
            if (!strcmp(b, "cpu")) cfg.backend = MINKE_BACKEND_CPU;
            else if (!strcmp(b, "cuda")) cfg.backend = MINKE_BACKEND_CUDA;
            else { fprintf(stderr, "minke serve: unknown backend '%s' (cpu or cuda)\n", b); return 2; }
        }
        else if (!strcmp(a, "--act") && has_val) {
            const char *b = argv[++i];
            if (!strcmp(b, "exact")) cfg.act = MINKE_ACT_EXACT;
            else if (!strcmp(b, "q8")) cfg.act = MINKE_ACT_Q8;
            else { fprintf(stderr, "minke serve: --act takes exact or q8, not '%s'\n", b); return 2; }
        }
        else if (!strcmp(a, "--cpu")) cfg.backend = MINKE_BACKEND_CPU;
        else if (!strcmp(a, "--cuda")) cfg.backend = MINKE_BACKEND_CUDA;
        else if (!strcmp(a, "--gpus") && has_val) {
            if (cli_parse_gpus(argv[++i], &cfg.n_gpus)) { fprintf(stderr, "minke serve: --gpus takes a number 1..64 or all, not '%s'\n", argv[i]); return 2; }
        }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (need_int(argc, argv, &i, 0, 4096, &v)) return 2; cfg.n_threads = (int)v; }
        else if (!strcmp(a, "--model-id") && has_val) cfg.model_id = argv[++i];
        else if (!strcmp(a, "--accept-any-model")) cfg.accept_any_model = 1;
        else if (!strcmp(a, "--keepalive-ms")) { if (need_int(argc, argv, &i, 1, 600000, &v)) return 2; cfg.keepalive_ms = (int)v; }
        else if (!strcmp(a, "--prefill-chunk")) { if (need_int(argc, argv, &i, 1, 1 << 20, &v)) return 2; cfg.prefill_chunk = (int)v; }
        else if (!strcmp(a, "--kv-disk-dir") && has_val) cfg.kv_disk_dir = argv[++i];
        else if (!strcmp(a, "--kv-disk-space-mb")) { if (need_int(argc, argv, &i, 1, 1L << 30, &v)) return 2; cfg.kv_disk_space_mb = (uint64_t)v; }
        else if (!strcmp(a, "--kv-cache-min-tokens")) { if (need_int(argc, argv, &i, 1, 1 << 30, &v)) return 2; cfg.kv_min_tokens = (int)v; }
        else if (!strcmp(a, "--kv-cache-cold-max-tokens")) { if (need_int(argc, argv, &i, 0, 1 << 30, &v)) return 2; cfg.kv_cold_max_tokens = (int)v; }
        else if (!strcmp(a, "--kv-cache-continued-interval-tokens")) { if (need_int(argc, argv, &i, 0, 1 << 30, &v)) return 2; cfg.kv_continued_interval = (int)v; }
        else if (!strcmp(a, "--kv-cache-boundary-trim-tokens")) { if (need_int(argc, argv, &i, 0, 1 << 20, &v)) return 2; cfg.kv_boundary_trim = (int)v; }
        else if (!strcmp(a, "--kv-cache-boundary-align-tokens")) { if (need_int(argc, argv, &i, 0, 1 << 20, &v)) return 2; cfg.kv_boundary_align = (int)v; }
        else if (!strcmp(a, "--disable-exact-dsml-tool-replay")) cfg.tool_replay = 0;
        else if (!strcmp(a, "--test-hooks")) cfg.test_hooks = 1;
        else if (!strcmp(a, "--no-prompt-snapshot")) cfg.prompt_snapshot = 0;
        else if (!strcmp(a, "--trace") && has_val) cfg.trace_path = argv[++i];
        else if (!strcmp(a, "--tool-memory-max-ids")) { if (need_int(argc, argv, &i, 1, 1 << 30, &v)) return 2; cfg.tool_memory_max_ids = (int)v; }
        else {
            fprintf(stderr, "minke serve: unknown option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!cfg.model_path) {
        fprintf(stderr, "minke serve: -m MODEL.gguf is required\n\n");
        usage(stderr);
        return 2;
    }
    if (cfg.kv_cold_max_tokens && cfg.kv_cold_max_tokens < cfg.kv_min_tokens) {
        fprintf(stderr, "minke serve: --kv-cache-cold-max-tokens must be 0 or >= --kv-cache-min-tokens\n");
        return 2;
    }
    if (cfg.trace_path && trace_open(cfg.trace_path)) {
        fprintf(stderr, "minke serve: cannot open the trace file '%s': %s\n", cfg.trace_path, strerror(errno));
        return 1;
    }
    if (engine_open(&cfg)) { trace_close(); return 1; }
    if (kvdisk_init(&cfg) || worker_start()) {
        engine_close();
        trace_close();
        return 1;
    }
    int rc = http_serve(&cfg);
    if (rc) worker_shutdown();
    engine_close();
    trace_close();
    server_log("bye");
    return rc;
}
