/* gen.c: the conversation loop shared by `minke chat` and `minke run`
 * (see gen.h), plus the demo model that makes `minke --demo` work on a fresh
 * machine without any download. */
#include "gen.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "gguf/gguf.h"
#include "model/config.h"
#include "model/synth.h"
#include "text/dsml.h"
#include "text/tokjson.h"

volatile sig_atomic_t convo_interrupt = 0;

struct convo {
    cli_opts o;
    minke_model *model;
    minke_session *sess;
    tokenizer *tok;
    int n_vocab;
    json_t *messages;        /* the transcript, official message format */
    int32_t *kv_toks;        /* tokens whose state is in the session */
    int n_kv, cap_kv;
    minke_snapshot *snap;    /* state at the end of the last prompt */
    chat_mode mode;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void cli_opts_default(cli_opts *o) {
    memset(o, 0, sizeof *o);
    o->backend = MINKE_BACKEND_CPU;
    o->ctx = 32768;
    o->max_tokens = 50000;
    o->sims = 1;
    o->act = MINKE_ACT_EXACT;
    o->sp = sampler_params_default();
    o->mode = CHAT_MODE_THINKING;
    o->system = NULL;
    o->color = isatty(1);
    o->mtp_draft = 3;
}

void cli_print_common_help(FILE *f) {
    fprintf(f,
            "  -m, --model FILE     GGUF model (default $MINKE_MODEL, else ./minke.gguf)\n"
            "  --demo               use a small synthetic model with the real DeepSeek vocabulary\n"
            "                       (built once into ~/.cache/minke; random weights, gibberish output)\n"
            "  --backend cpu|cuda   (default cpu)   --cpu / --cuda\n"
            "  -t, --threads N      CPU threads (default all cores)\n"
            "  -c, --ctx N          context window in tokens (default 32768)\n"
            "  -n, --max-tokens N   tokens per answer (default 50000; 256 with --demo)\n"
            "  --think | --nothink | --max   thinking mode (default think; max needs ctx >= 393216)\n"
            "  -sys, --system TEXT  system prompt (default none)\n"
            "  --temp F --top-p F --top-k N --min-p F --seed N --greedy   sampling (thinking modes\n"
            "                       use the model's defaults: temp 1, top-p 1, min-p 0.05)\n"
            "  --chunk N            prefill chunk size   --sims on|off   --no-color\n"
            "  --gpus N|all         cuda: GPUs in one process (routed experts split by id; default 1)\n"
            "  --act exact|q8       quantized-weight products: exact f32 activations (default)\n"
            "                       or ds4's int8 activation quantization (docs/numerics.md)\n"
            "  --mtp FILE           MTP GGUF: exact speculative decoding with --greedy (CPU backend)\n"
            "  --mtp-draft N        MTP drafts per step (default 3)   --mtp-pairing prev|same\n");
}

int cli_parse_gpus(const char *v, int *out) {
    if (!strcmp(v, "all")) { *out = -1; return 0; }
    char *e;
    long x = strtol(v, &e, 10);
    if (!*v || *e || x < 1 || x > 64) return -1;
    *out = (int)x;
    return 0;
}

static int parse_int_arg(const char *v, int *out) {
    char *e;
    errno = 0;
    long x = strtol(v, &e, 10);
    if (errno || *e || x < INT_MIN || x > INT_MAX) return -1;
    *out = (int)x;
    return 0;
}

int cli_parse_common(int *i, int argc, char **argv, cli_opts *o, const char *cmd) {
    const char *a = argv[*i];
    /* flags without a value */
    if (!strcmp(a, "--demo")) { o->demo = 1; return 1; }
    if (!strcmp(a, "--cpu")) { o->backend = MINKE_BACKEND_CPU; return 1; }
    if (!strcmp(a, "--cuda")) { o->backend = MINKE_BACKEND_CUDA; return 1; }
    if (!strcmp(a, "--think")) { o->mode = CHAT_MODE_THINKING; return 1; }
    if (!strcmp(a, "--nothink")) { o->mode = CHAT_MODE_CHAT; return 1; }
    if (!strcmp(a, "--max") || !strcmp(a, "--think-max")) { o->mode = CHAT_MODE_MAX; return 1; }
    if (!strcmp(a, "--greedy")) { o->sp.greedy = 1; return 1; }
    if (!strcmp(a, "--no-color")) { o->color = 0; return 1; }
    static const char *with_value[] = {"-m", "--model", "--backend", "-t", "--threads", "-c", "--ctx",
                                       "-n", "--max-tokens", "-sys", "--system", "--temp", "--top-p",
                                       "--top-k", "--min-p", "--seed", "--chunk", "--sims", "--mtp",
                                       "--mtp-draft", "--mtp-pairing", "--act", "--gpus", NULL};
    int takes = 0;
    for (int k = 0; with_value[k]; k++)
        if (!strcmp(a, with_value[k])) takes = 1;
    if (!takes) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "minke %s: %s needs a value\n", cmd, a);
        return -1;
    }
    const char *v = argv[++*i];
    int bad = 0;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
    else if (!strcmp(a, "--backend")) {
        if (!strcmp(v, "cpu")) o->backend = MINKE_BACKEND_CPU;
        else if (!strcmp(v, "cuda")) o->backend = MINKE_BACKEND_CUDA;
        else bad = 1;
    } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) bad = parse_int_arg(v, &o->threads) || o->threads < 0;
    else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) bad = parse_int_arg(v, &o->ctx) || o->ctx < 16;
    else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) bad = parse_int_arg(v, &o->max_tokens) || o->max_tokens < 1;
    else if (!strcmp(a, "--chunk")) bad = parse_int_arg(v, &o->chunk) || o->chunk < 0;
    else if (!strcmp(a, "--mtp")) o->mtp = v;
    else if (!strcmp(a, "--gpus")) bad = cli_parse_gpus(v, &o->gpus);
    else if (!strcmp(a, "--mtp-draft")) bad = parse_int_arg(v, &o->mtp_draft) || o->mtp_draft < 0 || o->mtp_draft > 16;
    else if (!strcmp(a, "--mtp-pairing")) {
        if (!strcmp(v, "prev")) o->mtp_pairing = MINKE_MTP_PAIR_PREV;
        else if (!strcmp(v, "same")) o->mtp_pairing = MINKE_MTP_PAIR_SAME;
        else bad = 1;
    }
    else if (!strcmp(a, "-sys") || !strcmp(a, "--system")) o->system = v;
    else if (!strcmp(a, "--act")) {
        if (!strcmp(v, "exact")) o->act = MINKE_ACT_EXACT;
        else if (!strcmp(v, "q8")) o->act = MINKE_ACT_Q8;
        else bad = 1;
    }
    else if (!strcmp(a, "--sims")) {
        if (!strcmp(v, "on")) o->sims = 1;
        else if (!strcmp(v, "off")) o->sims = 0;
        else bad = 1;
    } else if (!strcmp(a, "--top-k")) bad = parse_int_arg(v, &o->sp.top_k) || o->sp.top_k < 0;
    else if (!strcmp(a, "--seed")) {
        char *e;
        errno = 0;
        o->sp.seed = strtoull(v, &e, 10);
        bad = errno || *e;
    } else {
        char *e;
        float f = strtof(v, &e);
        bad = *e != 0 || e == v;
        if (!strcmp(a, "--temp")) o->sp.temperature = f;
        else if (!strcmp(a, "--top-p")) o->sp.top_p = f;
        else if (!strcmp(a, "--min-p")) o->sp.min_p = f;
    }
    if (bad) {
        fprintf(stderr, "minke %s: bad value '%s' for %s\n", cmd, v, a);
        return -1;
    }
    return 1;
}

/* ---- the demo model ---- */

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The real DeepSeek tokenizer.json ships in the source tree (test fixtures);
 * look beside the binary first, then in $MINKE_TOKENIZER_JSON. */
static int find_tokenizer_json(char *out, size_t n) {
    const char *env = getenv("MINKE_TOKENIZER_JSON");
    if (env && file_exists(env)) {
        snprintf(out, n, "%s", env);
        return 0;
    }
    char exe[PATH_MAX / 2];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) return -1;
    exe[k] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = 0;
    static const char *rel[] = {"tests/fixtures/tokenizer/deepseek_v4_tokenizer.json",
                                "../tests/fixtures/tokenizer/deepseek_v4_tokenizer.json",
                                "../../tests/fixtures/tokenizer/deepseek_v4_tokenizer.json",
                                "../share/minke/deepseek_v4_tokenizer.json", NULL};
    for (int i = 0; rel[i]; i++) {
        snprintf(out, n, "%s/%s", exe, rel[i]);
        if (file_exists(out)) return 0;
    }
    return -1;
}

static int demo_model_path(char *out, size_t n) {
    char dir[PATH_MAX / 2];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg) snprintf(dir, sizeof dir, "%s/minke", xdg);
    else if (home && *home) snprintf(dir, sizeof dir, "%s/.cache/minke", home);
    else snprintf(dir, sizeof dir, "/tmp/minke-cache");
    for (char *p = dir + 1; *p; p++) { /* mkdir -p */
        if (*p != '/') continue;
        *p = 0;
        mkdir(dir, 0755);
        *p = '/';
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
    snprintf(out, n, "%s/demo-tiny-v1.gguf", dir);
    return 0;
}

static int build_demo_model(const char *path) {
    char tj[PATH_MAX];
    if (find_tokenizer_json(tj, sizeof tj) != 0) {
        fprintf(stderr,
                "minke --demo: cannot find the DeepSeek tokenizer.json (looked beside the binary in\n"
                "tests/fixtures/tokenizer/); set MINKE_TOKENIZER_JSON=/path/to/tokenizer.json\n");
        return -1;
    }
    dsv4_config c;
    if (dsv4_config_preset(&c, "tiny") != 0) {
        fprintf(stderr, "minke --demo: no tiny preset\n");
        return -1;
    }
    char err[512];
    int nv = tokjson_vocab_size(tj, err, sizeof err);
    if (nv <= 0) {
        fprintf(stderr, "minke --demo: %s\n", err);
        return -1;
    }
    c.n_vocab = (uint32_t)nv;
    synth_file_opts so;
    memset(&so, 0, sizeof so);
    so.seed = 7;
    so.damp = 1.0f;
    so.tokenizer_json = tj;
    so.progress = -1;
    fprintf(stderr, "minke: building the demo model (once) at %s ...\n", path);
    if (synth_write_gguf(path, &c, &so, err, sizeof err) != 0) {
        fprintf(stderr, "minke --demo: %s\n", err);
        return -1;
    }
    return 0;
}

static void no_model_help(const char *path) {
    fprintf(stderr,
            "minke: no model file at '%s'.\n\n"
            "Get one of these:\n"
            "  * convert the official checkpoint (https://huggingface.co/deepseek-ai/DeepSeek-V4-Flash):\n"
            "      minke convert /path/to/DeepSeek-V4-Flash -o minke.gguf\n"
            "  * or download a ds4 GGUF (antirez/ds4: DeepSeek-V4-Flash-IQ2XXS-...gguf) and pass -m FILE\n"
            "    (or set MINKE_MODEL=/path/to/file.gguf)\n\n"
            "Or try `minke --demo`: a small synthetic model with the real DeepSeek vocabulary\n"
            "(random weights: it shows the machinery, not intelligence).\n",
            path);
}

/* ---- conversation ---- */

convo *convo_open(const cli_opts *o) {
    char path[PATH_MAX];
    if (o->demo) {
        if (demo_model_path(path, sizeof path) != 0) {
            fprintf(stderr, "minke --demo: cannot create a cache directory\n");
            return NULL;
        }
        if (!file_exists(path) && build_demo_model(path) != 0) return NULL;
    } else {
        const char *p = o->model ? o->model : getenv("MINKE_MODEL");
        snprintf(path, sizeof path, "%s", p && *p ? p : "minke.gguf");
        if (!file_exists(path)) {
            no_model_help(path);
            return NULL;
        }
    }
    convo *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->o = *o;
    if (o->demo && c->o.max_tokens == 50000) c->o.max_tokens = 256;
    minke_model_params mp;
    minke_model_params_default(&mp);
    mp.path = path;
    mp.backend = o->backend;
    mp.n_threads = o->threads;
    mp.sims = o->sims;
    mp.act = o->act;
    mp.n_gpus = o->gpus;
    mp.progress = 1;
    mp.mtp_path = o->mtp;
    mp.mtp_pairing = o->mtp_pairing;
    c->model = minke_model_open(&mp);
    if (!c->model) {
        fprintf(stderr, "minke: %s\n", minke_last_error());
        free(c);
        return NULL;
    }
    if (o->mtp && !(o->sp.greedy || o->sp.temperature <= 0.0f || o->sp.top_k == 1))
        fprintf(stderr, "minke: note: --mtp speeds up greedy decoding only (add --greedy); sampling runs without it\n");
    char err[256];
    c->tok = tokenizer_from_gguf(minke_model_gguf(c->model), err, sizeof err);
    if (!c->tok) {
        fprintf(stderr, "minke: %s: %s (chat needs a model with a tokenizer)\n", path, err);
        convo_free(c);
        return NULL;
    }
    if (tokenizer_check_required(c->tok, err, sizeof err) != 0) {
        fprintf(stderr, "minke: %s: %s\n", path, err);
        convo_free(c);
        return NULL;
    }
    c->n_vocab = minke_model_get_info(c->model)->n_vocab;
    c->messages = json_array();
    if (c->o.system && *c->o.system)
        json_array_append_new(c->messages, json_pack("{s:s,s:s}", "role", "system", "content", c->o.system));
    c->mode = o->mode;
    if (convo_set_ctx(c, o->ctx) != 0) {
        convo_free(c);
        return NULL;
    }
    return c;
}

void convo_free(convo *c) {
    if (!c) return;
    if (c->snap) minke_snapshot_free(c->snap);
    if (c->sess) minke_session_free(c->sess);
    if (c->tok) tokenizer_free(c->tok);
    if (c->model) minke_model_close(c->model);
    json_decref(c->messages);
    free(c->kv_toks);
    free(c);
}

int convo_set_ctx(convo *c, int n_ctx) {
    minke_session *s = minke_session_create(c->model, n_ctx);
    if (!s) {
        fprintf(stderr, "minke: %s\n", minke_last_error());
        return -1;
    }
    if (c->snap) minke_snapshot_free(c->snap);
    c->snap = NULL;
    if (c->sess) minke_session_free(c->sess);
    c->sess = s;
    c->n_kv = 0;
    c->o.ctx = n_ctx;
    if (c->o.chunk > 0) minke_session_set_chunk(s, c->o.chunk);
    return 0;
}

void convo_reset(convo *c) {
    json_array_clear(c->messages);
    if (c->o.system && *c->o.system)
        json_array_append_new(c->messages, json_pack("{s:s,s:s}", "role", "system", "content", c->o.system));
    minke_session_reset(c->sess);
    c->n_kv = 0;
    if (c->snap) minke_snapshot_free(c->snap);
    c->snap = NULL;
}

void convo_set_mode(convo *c, chat_mode mode) { c->mode = mode; }
chat_mode convo_mode(const convo *c) { return c->mode; }
int convo_ctx(const convo *c) { return c->o.ctx; }
int convo_pos(const convo *c) { return c->n_kv; }

static int kv_push(convo *c, int32_t t) {
    if (c->n_kv == c->cap_kv) {
        int nc = c->cap_kv ? c->cap_kv * 2 : 1024;
        int32_t *p = realloc(c->kv_toks, sizeof *p * nc);
        if (!p) return -1;
        c->kv_toks = p;
        c->cap_kv = nc;
    }
    c->kv_toks[c->n_kv++] = t;
    return 0;
}

/* Bring the session to exactly toks[0..n): reuse the common prefix, roll back
 * to the prompt snapshot or to zero when needed, prefill the rest. */
static int sync_prompt(convo *c, const int32_t *toks, int n, turn_stats *st) {
    int lcp = 0;
    while (lcp < n && lcp < c->n_kv && toks[lcp] == c->kv_toks[lcp]) lcp++;
    if (lcp == n && lcp == c->n_kv && lcp > 0) lcp--; /* need fresh logits of the last token */
    if (lcp < c->n_kv) {
        int sp = c->snap ? minke_snapshot_pos(c->snap) : -1;
        if (c->snap && sp <= lcp && sp <= c->n_kv && minke_snapshot_restore(c->sess, c->snap) == 0) {
            c->n_kv = sp;
        } else {
            minke_session_reset(c->sess);
            c->n_kv = 0;
        }
    }
    int start = c->n_kv;
    st->cached_tokens = start;
    int total = n - start;
    int step = c->o.chunk > 0 ? c->o.chunk : 256;
    int show = isatty(2) && total > step;
    double t0 = now_s();
    for (int done = 0; done < total;) {
        if (convo_interrupt) return -2;
        int k = total - done < step ? total - done : step;
        if (minke_prefill(c->sess, toks + start + done, k, NULL) != 0) {
            fprintf(stderr, "\nminke: %s\n", minke_last_error());
            return -1;
        }
        for (int j = 0; j < k; j++) kv_push(c, toks[start + done + j]);
        done += k;
        if (show) fprintf(stderr, "\rprefill %3d%% (%d/%d tokens)", (int)(100.0 * done / total), done, total);
    }
    if (show) fprintf(stderr, "\r\033[K");
    st->prefill_s = now_s() - t0;
    if (c->snap) minke_snapshot_free(c->snap);
    c->snap = minke_snapshot_take(c->sess);
    return 0;
}

typedef struct stream_out {
    FILE *out;
    int color;
    int in_reasoning;
    int any_content;
} stream_out;

static void on_event(void *user, const chat_event *ev) {
    stream_out *so = user;
    if (ev->kind == CHAT_EV_REASONING) {
        if (!so->in_reasoning && so->color) fputs("\033[2m", so->out);
        so->in_reasoning = 1;
        fwrite(ev->text, 1, ev->len, so->out);
    } else {
        if (so->in_reasoning) {
            if (so->color) fputs("\033[0m", so->out);
            fputs("\n\n", so->out);
            so->in_reasoning = 0;
        }
        if (ev->kind == CHAT_EV_CONTENT) fwrite(ev->text, 1, ev->len, so->out);
        else if (ev->kind == CHAT_EV_TOOL_START) fprintf(so->out, "[tool call %.*s(", (int)ev->len, ev->text);
        else if (ev->kind == CHAT_EV_TOOL_ARGS) fwrite(ev->text, 1, ev->len, so->out);
        else if (ev->kind == CHAT_EV_TOOL_END) fputs(")]\n", so->out);
        so->any_content = 1;
    }
    fflush(so->out);
}

int convo_turn(convo *c, const char *user_text, FILE *out, turn_stats *st) {
    memset(st, 0, sizeof *st);
    convo_interrupt = 0;
    chat_mode mode = chat_mode_for_context(c->mode, c->o.ctx);
    size_t n_before = json_array_size(c->messages);
    json_array_append_new(c->messages, json_pack("{s:s,s:s}", "role", "user", "content", user_text));
    json_t *in = json_pack("{s:O,s:s}", "messages", c->messages, "thinking_mode", chat_mode_name(mode));
    char err[512];
    char *prompt = chat_render(in, err, sizeof err);
    json_decref(in);
    int32_t *toks = NULL;
    size_t n = 0;
    int rc = -1;
    if (!prompt) {
        fprintf(stderr, "minke: cannot render the conversation: %s\n", err);
        goto rollback;
    }
    if (tokenizer_encode(c->tok, prompt, strlen(prompt), 0, &toks, &n) != 0) {
        fprintf(stderr, "minke: out of memory while tokenizing\n");
        goto rollback;
    }
    st->prompt_tokens = (int)n;
    if ((int)n >= c->o.ctx) {
        fprintf(stderr, "minke: the conversation (%zu tokens) does not fit the context window (%d); "
                "use /ctx N or /reset\n", n, c->o.ctx);
        goto rollback;
    }
    int sr = sync_prompt(c, toks, (int)n, st);
    if (sr != 0) {
        if (sr == -2) st->interrupted = 1;
        goto rollback;
    }
    sampler_params sp = sampler_params_for_mode(&c->o.sp, chat_mode_thinks(mode));
    sampler *smp = sampler_new(&sp);
    stream_out so = {out, c->o.color, 0, 0};
    chat_stream *cs = chat_stream_new(chat_mode_name(mode), on_event, &so);
    tok_stream ts;
    tok_stream_init(&ts);
    char *buf = malloc(tokenizer_max_token_bytes(c->tok) + TOK_STREAM_SLACK + 8);
    int32_t eos = tokenizer_eos(c->tok);
    double t0 = now_s();
    int gen = 0;
    /* exact speculative decoding: only greedy choices can be verified by argmax */
    st->spec = minke_has_mtp(c->model) && c->o.mtp_draft > 0 &&
               (sp.greedy || sp.temperature <= 0.0f || sp.top_k == 1);
    int32_t *fed = st->spec ? malloc(sizeof *fed * (size_t)(c->o.mtp_draft + 1)) : NULL;
    if (!fed) st->spec = 0;
    for (;;) {
        if (convo_interrupt) {
            st->interrupted = 1;
            break;
        }
        if (gen >= c->o.max_tokens || c->n_kv >= c->o.ctx) {
            st->hit_limit = 1;
            break;
        }
        int32_t t = minke_sample(c->sess, smp, dsml_in_structure(cs));
        if (t < 0) {
            fprintf(stderr, "\nminke: %s\n", minke_last_error());
            st->hit_limit = 1;
            break;
        }
        gen++;
        size_t k = tok_stream_feed_token(&ts, c->tok, t, buf);
        if (k) chat_stream_feed(cs, buf, k);
        if (t == eos) break;
        if (st->spec) {
            /* t and the drafts the model confirms; each counts as sampled in turn, so
             * the limits above cap how many may follow t */
            int room = c->o.max_tokens - gen, ctx_room = c->o.ctx - c->n_kv - 1;
            int drafted = 0;
            int k = minke_spec_greedy_step(c->sess, t, c->o.mtp_draft, room < ctx_room ? room : ctx_room, eos, fed,
                                           &drafted);
            if (k < 1) {
                fprintf(stderr, "\nminke: %s\n", minke_last_error());
                st->hit_limit = 1;
                break;
            }
            st->drafted += drafted;
            st->accepted += k - 1;
            kv_push(c, t);
            for (int i = 1; i < k; i++) {
                gen++;
                size_t kk = tok_stream_feed_token(&ts, c->tok, fed[i], buf);
                if (kk) chat_stream_feed(cs, buf, kk);
                kv_push(c, fed[i]);
            }
            continue;
        }
        if (minke_decode(c->sess, t) != 0) {
            fprintf(stderr, "\nminke: %s\n", minke_last_error());
            st->hit_limit = 1;
            break;
        }
        kv_push(c, t);
    }
    free(fed);
    size_t k = tok_stream_flush(&ts, buf);
    if (k) chat_stream_feed(cs, buf, k);
    json_t *msg = chat_stream_finish(cs, NULL);
    if (so.in_reasoning && c->o.color) fputs("\033[0m", out);
    fputs("\n", out);
    fflush(out);
    st->gen_tokens = gen;
    st->gen_s = now_s() - t0;
    chat_stream_free(cs);
    sampler_free(smp);
    free(buf);
    if (st->interrupted && gen == 0) {
        json_decref(msg);
        goto rollback;
    }
    /* keep what was said (the official format for the next rendering) */
    json_t *am = json_object();
    json_object_set_new(am, "role", json_string("assistant"));
    json_t *content = msg ? json_object_get(msg, "content") : NULL;
    if (content && json_is_string(content)) json_object_set(am, "content", content);
    else json_object_set_new(am, "content", json_string(""));
    json_t *rc_ = msg ? json_object_get(msg, "reasoning_content") : NULL;
    if (rc_ && json_is_string(rc_) && json_string_length(rc_) > 0) json_object_set(am, "reasoning_content", rc_);
    json_array_append_new(c->messages, am);
    json_decref(msg);
    rc = 0;
    goto done;
rollback:
    while (json_array_size(c->messages) > n_before) json_array_remove(c->messages, json_array_size(c->messages) - 1);
done:
    free(prompt);
    free(toks);
    return rc;
}

void convo_print_stats(const turn_stats *st, FILE *f) {
    double pf = st->prefill_s > 0 ? (st->prompt_tokens - st->cached_tokens) / st->prefill_s : 0;
    double gn = st->gen_s > 0 ? st->gen_tokens / st->gen_s : 0;
    char spec[96] = "";
    if (st->spec)
        snprintf(spec, sizeof spec, "; MTP drafts %d, accepted %d (%.1f%%)", st->drafted, st->accepted,
                 st->drafted ? 100.0 * st->accepted / st->drafted : 0.0);
    fprintf(f, "[prompt %d tokens (%d cached), prefill %.1f tok/s; generated %d tokens, %.1f tok/s%s%s]\n",
            st->prompt_tokens, st->cached_tokens, pf, st->gen_tokens, gn, spec,
            st->interrupted ? "; interrupted" : st->hit_limit ? "; stopped at the limit" : "");
}
