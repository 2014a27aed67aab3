/* worker.c: the single inference thread of `minke serve`. Jobs queue in
 * arrival order and run one at a time on the one live session. For each job:
 * pick the longest reusable state (live tokens as a token prefix, then the
 * live text as a byte prefix of the rendered prompt, then the in-memory
 * snapshot of the last prompt, then the disk cache),
 * prefill the rest in chunks (keepalives, cancellation, disk snapshots at
 * aligned frontiers), then sample/decode token by token, feeding the text to
 * the streaming chat parser whose events become the API's deltas; stop on
 * EOS, stop sequences, a closed tool-call block, max tokens or context end.
 * The live session only ever extends; a miss restores the snapshot of the
 * last prompt's end when the new prompt starts with it, else starts over. */
#define _GNU_SOURCE 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"
#include "engine/sample.h"
#include "text/chat.h"
#include "text/dsml.h"

static pthread_mutex_t q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cv = PTHREAD_COND_INITIALIZER;
static job *q_head, *q_tail;
static job *q_running;
static int q_stop;
static pthread_t worker_thread;
static int worker_running;
static long seq_counter;

/* the live checkpoint: exactly the tokens evaluated in g_sess, and their bytes */
static minke_session *g_sess;
static int32_t *live_tok;
static int n_live, cap_live;
static sbuf live_text;
static int last_continued;   /* last continued-save frontier */

/* Visible-transcript binding (serving.md §4.13): the live KV holds reasoning
 * that clients do not send back, so the next request's rendering differs from
 * the live text. After a thinking turn we remember how the client will render
 * it (bind_text) and the live length; a request whose prompt starts with that
 * text continues the live KV, appending the token sampled but not evaluated
 * (if any) and the EOS that closes the turn. */
static sbuf bind_text;
static int bind_live = -1;
static int32_t bind_tail[2];
static int n_bind_tail;
static int bind_key_visible; /* disk saves of this state use bind_text as key */

/* Prompt snapshot: the session state at the end of the last prompt's
 * prefill (before its trailing <think>/</think> mode tag, so a next turn
 * that renders the earlier answer after "<｜Assistant｜></think>" still
 * shares it). The live session can only grow, so without it a resent prompt
 * (regenerate buttons, agents retrying) or a prompt that shares the last
 * prompt but not its generated answer would be prefilled from scratch. */
static minke_snapshot *psnap;
static int32_t *psnap_tok;
static int n_psnap;
static sbuf psnap_text;

long worker_next_seq(void) { return __atomic_add_fetch(&seq_counter, 1, __ATOMIC_RELAXED); }

static void live_reset(void) {
    minke_session_reset(g_sess);
    n_live = 0;
    sbuf_clear(&live_text);
    last_continued = 0;
}

static void live_push(const int32_t *t, int n) {
    if (n_live + n > cap_live) {
        int cap = cap_live ? cap_live : 1024;
        while (cap < n_live + n) cap *= 2;
        live_tok = realloc(live_tok, (size_t)cap * sizeof *live_tok);
        cap_live = cap;
    }
    for (int i = 0; i < n; i++) {
        live_tok[n_live++] = t[i];
        size_t len;
        const char *b = engine_token_bytes(t[i], &len);
        sbuf_add(&live_text, b, len);
    }
}

/* Restore live bookkeeping after a disk load: the token list comes with the file. */
static void live_set(const int32_t *t, int n) {
    n_live = 0;
    sbuf_clear(&live_text);
    live_push(t, n);
}

static int is_cancelled(job *j) {
    if (__atomic_load_n(&j->cancelled, __ATOMIC_SEQ_CST)) return 1;
    if (j->req->stream && !stream_client_alive(&j->out)) {
        __atomic_store_n(&j->cancelled, 1, __ATOMIC_SEQ_CST);
        return 1;
    }
    return 0;
}

/* ---- disk snapshots ---- */

static void save_live(kv_reason why) {
    const server_config *cfg = server_cfg();
    if (!kvdisk_enabled() || n_live < cfg->kv_min_tokens) return;
    /* a live state that ends a thinking turn is found again by what the
     * client will send back (the visible transcript), not by its hidden text */
    if (bind_live == n_live && bind_text.n && bind_key_visible)
        kvdisk_save_tokens(g_sess, bind_text.p, bind_text.n, live_tok, n_live, bind_tail, n_bind_tail, why);
    else
        kvdisk_save_tokens(g_sess, live_text.p, live_text.n, live_tok, n_live, NULL, 0, why);
}

/* Where a cold snapshot should be cut: the chat anchor (last <｜User｜> before
 * the first <｜Assistant｜>: BOS + system + tools, without the task-specific
 * turn) when long enough, else the aligned store length. */
static int cold_store_len(const int32_t *t, int n) {
    const server_config *cfg = server_cfg();
    int32_t user = engine_special_user(), asst = engine_special_assistant();
    int last_user = -1;
    for (int i = 0; i < n; i++) {
        if (t[i] == asst) break;
        if (t[i] == user) last_user = i;
    }
    if (last_user >= cfg->kv_min_tokens) return last_user;
    return kvdisk_store_len(n, cfg->kv_min_tokens, cfg->kv_boundary_trim, cfg->kv_boundary_align);
}

static int continued_step(void) {
    const server_config *cfg = server_cfg();
    if (cfg->kv_continued_interval <= 0) return 0;
    int a = cfg->kv_boundary_align > 0 ? cfg->kv_boundary_align : 1;
    return (cfg->kv_continued_interval + a - 1) / a * a;
}

static void maybe_continued_save(void) {
    int step = continued_step();
    if (!step || !kvdisk_enabled() || n_live < server_cfg()->kv_min_tokens) return;
    if (n_live % step == 0 && n_live > last_continued) {
        save_live(KV_REASON_CONTINUED);
        last_continued = n_live;
    }
}

/* ---- the cache ladder ---- */

/* Decides what to keep and returns the tokens still to prefill (effective
 * prompt = reused tokens + fresh tokenization of the rest of the text). */
static int32_t *plan_prompt(gen_request *r, int *n_eff, int *n_cached, const char **source) {
    /* 1. live tokens are a prefix of the request tokens */
    if (n_live > 0 && n_live <= r->n_tokens && !memcmp(live_tok, r->tokens, (size_t)n_live * sizeof *live_tok) &&
        (n_live < r->n_tokens || minke_session_has_logits(g_sess))) {
        *n_cached = n_live;
        *n_eff = r->n_tokens;
        *source = "memory-token";
        int32_t *all = malloc((size_t)r->n_tokens * sizeof *all + 1);
        memcpy(all, r->tokens, (size_t)r->n_tokens * sizeof *all);
        return all;
    }
    /* 2. live text is a byte prefix of the rendered prompt */
    if (n_live > 0 && live_text.n <= r->prompt_len && !memcmp(live_text.p, r->prompt_text, live_text.n) &&
        (live_text.n < r->prompt_len || minke_session_has_logits(g_sess))) {
        int n_suf = 0;
        int32_t *suf = engine_tokenize(r->prompt_text + live_text.n, r->prompt_len - live_text.n, &n_suf);
        if (suf && n_suf >= 0 && n_live + n_suf < server_cfg()->ctx) {
            int32_t *all = malloc((size_t)(n_live + n_suf) * sizeof *all + 1);
            memcpy(all, live_tok, (size_t)n_live * sizeof *all);
            memcpy(all + n_live, suf, (size_t)n_suf * sizeof *all);
            free(suf);
            *n_cached = n_live;
            *n_eff = n_live + n_suf;
            *source = "memory-text";
            return all;
        }
        free(suf);
    }
    /* 3. the client-visible transcript of the last thinking turn */
    if (bind_live >= 0 && bind_live == n_live && bind_text.n < r->prompt_len && !memcmp(bind_text.p, r->prompt_text, bind_text.n)) {
        int n_suf = 0;
        int32_t *suf = engine_tokenize(r->prompt_text + bind_text.n, r->prompt_len - bind_text.n, &n_suf);
        int n_all = n_live + n_bind_tail + n_suf;
        if (suf && n_suf >= 0 && n_all < server_cfg()->ctx) {
            int32_t *all = malloc((size_t)n_all * sizeof *all + 1);
            memcpy(all, live_tok, (size_t)n_live * sizeof *all);
            memcpy(all + n_live, bind_tail, (size_t)n_bind_tail * sizeof *all);
            memcpy(all + n_live + n_bind_tail, suf, (size_t)n_suf * sizeof *all);
            free(suf);
            *n_cached = n_live;
            *n_eff = n_all;
            *source = "thinking-visible";
            return all;
        }
        free(suf);
    }
    /* 4. the snapshot of the last prompt: token prefix, else byte prefix */
    if (psnap) {
        int32_t *all = NULL;
        int n_all = 0;
        if (n_psnap <= r->n_tokens && !memcmp(psnap_tok, r->tokens, (size_t)n_psnap * sizeof *psnap_tok)) {
            n_all = r->n_tokens;
            all = malloc((size_t)n_all * sizeof *all + 1);
            memcpy(all, r->tokens, (size_t)n_all * sizeof *all);
        } else if (psnap_text.n <= r->prompt_len && !memcmp(psnap_text.p, r->prompt_text, psnap_text.n)) {
            int n_suf = 0;
            int32_t *suf = engine_tokenize(r->prompt_text + psnap_text.n, r->prompt_len - psnap_text.n, &n_suf);
            if (suf && n_suf >= 0) {
                n_all = n_psnap + n_suf;
                all = malloc((size_t)n_all * sizeof *all + 1);
                memcpy(all, psnap_tok, (size_t)n_psnap * sizeof *all);
                memcpy(all + n_psnap, suf, (size_t)n_suf * sizeof *all);
            }
            free(suf);
        }
        if (all && n_all < server_cfg()->ctx) {
            /* the generated tail is lost by the restore: keep it on disk when
             * it is long enough to be worth a file of its own */
            if (n_live - n_psnap >= server_cfg()->kv_min_tokens) save_live(KV_REASON_EVICT);
            if (minke_snapshot_restore(g_sess, psnap) == 0) {
                live_set(psnap_tok, n_psnap);
                last_continued = n_psnap;
                *n_cached = n_psnap;
                *n_eff = n_all;
                *source = "snapshot";
                return all;
            }
            server_log("prompt snapshot not restored: %s", minke_last_error());
            live_reset();
        }
        free(all);
    }
    /* 5. miss: keep the displaced conversation on disk, then try the disk */
    if (n_live > 0) {
        save_live(KV_REASON_EVICT);
    }
    live_reset();
    if (kvdisk_enabled()) {
        int32_t *ftok = NULL, *tail = NULL;
        int n_ftok = 0, n_tail = 0;
        size_t klen = kvdisk_load_prefix(g_sess, r->prompt_text, r->prompt_len, &ftok, &n_ftok, &tail, &n_tail);
        if (klen > 0 && n_ftok > 0) {
            live_set(ftok, n_ftok);
            last_continued = n_ftok;
            free(ftok);
            int n_suf = 0;
            int32_t *suf = engine_tokenize(r->prompt_text + klen, r->prompt_len - klen, &n_suf);
            int n_all = n_live + n_tail + n_suf;
            if (suf && n_suf >= 0 && n_all < server_cfg()->ctx && (n_all > n_live || minke_session_has_logits(g_sess))) {
                int32_t *all = malloc((size_t)n_all * sizeof *all + 1);
                memcpy(all, live_tok, (size_t)n_live * sizeof *all);
                memcpy(all + n_live, tail, (size_t)n_tail * sizeof *all);
                memcpy(all + n_live + n_tail, suf, (size_t)n_suf * sizeof *all);
                free(suf);
                free(tail);
                *n_cached = n_live;
                *n_eff = n_all;
                *source = n_tail ? "disk-visible" : "disk-text";
                return all;
            }
            free(suf);
            live_reset();
        } else {
            free(ftok);
        }
        free(tail);
    }
    *n_cached = 0;
    *n_eff = r->n_tokens;
    *source = "cold";
    int32_t *all = malloc((size_t)r->n_tokens * sizeof *all + 1);
    memcpy(all, r->tokens, (size_t)r->n_tokens * sizeof *all);
    return all;
}

/* Where the prompt snapshot is cut: before a trailing mode tag. */
static int prompt_snapshot_at(const int32_t *t, int n) {
    if (n < 2) return n;
    size_t len;
    const char *b = engine_token_bytes(t[n - 1], &len);
    if (b && ((len == strlen(CHAT_THINK_OPEN) && !memcmp(b, CHAT_THINK_OPEN, len)) || (len == strlen(CHAT_THINK_CLOSE) && !memcmp(b, CHAT_THINK_CLOSE, len))))
        return n - 1;
    return n;
}

/* Replace the prompt snapshot by the live state (which is at its cut). */
static void take_prompt_snapshot(void) {
    minke_snapshot *s = minke_snapshot_take(g_sess);
    if (!s) {
        server_log("prompt snapshot not taken: %s", minke_last_error());
        return;
    }
    minke_snapshot_free(psnap);
    psnap = s;
    psnap_tok = realloc(psnap_tok, (size_t)n_live * sizeof *psnap_tok + 1);
    memcpy(psnap_tok, live_tok, (size_t)n_live * sizeof *psnap_tok);
    n_psnap = n_live;
    sbuf_clear(&psnap_text);
    sbuf_add(&psnap_text, live_text.p, live_text.n);
}

static void drop_prompt_snapshot(void) {
    minke_snapshot_free(psnap);
    psnap = NULL;
    free(psnap_tok);
    psnap_tok = NULL;
    n_psnap = 0;
    sbuf_free(&psnap_text);
}

/* ---- streaming projection: chat events -> API sink ---- */

typedef struct gen_ctx {
    job *j;
    chat_stream *cs;
    int stream;                 /* write deltas to the client */
    char **ids;                 /* tool-call ids assigned as calls start */
    int n_ids;
} gen_ctx;

static void new_call_id(const gen_request *r, char *out, size_t n) {
    char hex[33];
    random_hex(hex, 32);
    snprintf(out, n, "%s%s", r->api == API_ANTHROPIC ? "toolu_" : "call_", hex);
}

static void on_chat_event(void *user, const chat_event *ev) {
    gen_ctx *g = user;
    job *j = g->j;
    const api_sink *k = j->sink;
    switch (ev->kind) {
    case CHAT_EV_REASONING:
        sbuf_add(&j->res.reasoning, ev->text, ev->len);
        if (g->stream && k->reasoning && ev->len) k->reasoning(j, ev->text, ev->len);
        break;
    case CHAT_EV_CONTENT:
        sbuf_add(&j->res.content, ev->text, ev->len);
        if (g->stream && k->content && ev->len) k->content(j, ev->text, ev->len);
        break;
    case CHAT_EV_TOOL_START: {
        char id[64];
        new_call_id(j->req, id, sizeof id);
        g->ids = realloc(g->ids, (size_t)(g->n_ids + 1) * sizeof *g->ids);
        g->ids[g->n_ids++] = strdup(id);
        char *name = strndup(ev->text, ev->len);
        if (g->stream && k->tool_start) k->tool_start(j, ev->tool_index, id, name);
        free(name);
        break;
    }
    case CHAT_EV_TOOL_ARGS:
        if (g->stream && k->tool_args && ev->len) k->tool_args(j, ev->tool_index, ev->text, ev->len);
        break;
    case CHAT_EV_TOOL_END:
        if (g->stream && k->tool_end) k->tool_end(j, ev->tool_index);
        break;
    }
}

/* The exact DSML block (from "\n\n<｜DSML｜tool_calls>" through its end tag)
 * in the generated text after the last </think>, for exact replay. */
static char *extract_raw_dsml(const char *text, size_t n) {
    const char *from = text;
    for (const char *p = text; (p = memmem(p, (size_t)(text + n - p), CHAT_THINK_CLOSE, 8)); p += 8) from = p + 8;
    const char *start = memmem(from, (size_t)(text + n - from), CHAT_TOOL_CALLS_START, strlen(CHAT_TOOL_CALLS_START));
    if (!start) {
        const char *tag = "<" CHAT_DSML "tool_calls>";
        start = memmem(from, (size_t)(text + n - from), tag, strlen(tag));
    }
    if (!start) return NULL;
    const char *end = memmem(start, (size_t)(text + n - start), CHAT_TOOL_CALLS_END, strlen(CHAT_TOOL_CALLS_END));
    if (!end) return NULL;
    end += strlen(CHAT_TOOL_CALLS_END);
    return strndup(start, (size_t)(end - start));
}

/* First occurrence at or after `from` of any stop string; -1 if none. */
static long find_stop(const gen_request *r, const char *text, size_t n, size_t from, int *which) {
    long best = -1;
    for (int i = 0; i < r->n_stop; i++) {
        size_t sl = strlen(r->stop[i]);
        size_t start = from >= sl ? from - sl + 1 : 0;
        if (start > n) continue;
        const char *p = memmem(text + start, n - start, r->stop[i], sl);
        if (p && (best < 0 || p - text < best)) { best = p - text; *which = i; }
    }
    return best;
}

static size_t max_stop_len(const gen_request *r) {
    size_t m = 0;
    for (int i = 0; i < r->n_stop; i++) if (strlen(r->stop[i]) > m) m = strlen(r->stop[i]);
    return m;
}

/* Send raw text [*fed, upto) to the projection (chat parser or plain text). */
static void feed_text(gen_ctx *g, const char *text, size_t *fed, size_t upto, int final) {
    job *j = g->j;
    if (upto <= *fed) return;
    size_t n = upto - *fed;
    if (!final) n = utf8_safe_len(text + *fed, n);
    if (!n) return;
    if (g->cs) {
        chat_stream_feed(g->cs, text + *fed, n);
        *fed += n;
        return;
    }
    if (g->stream && j->sink->content) j->sink->content(j, text + *fed, n);
    *fed += n;
}

/* How the client will replay this turn without its reasoning: with tools
 * (reasoning kept by the renderer) "</think>" follows the prompt directly;
 * without tools, earlier turns are rendered "<｜Assistant｜></think>answer". */
static void remember_visible(const gen_request *r, const gen_result *res, int32_t unevaluated) {
    sbuf_clear(&bind_text);
    size_t plen = r->prompt_len;
    size_t tl = strlen(CHAT_THINK_OPEN);
    if (!r->has_tools) {
        if (plen < tl || memcmp(r->prompt_text + plen - tl, CHAT_THINK_OPEN, tl)) return;
        plen -= tl;
    }
    sbuf_add(&bind_text, r->prompt_text, plen);
    sbuf_adds(&bind_text, CHAT_THINK_CLOSE);
    sbuf_add(&bind_text, res->content.p ? res->content.p : "", res->content.n);
    if (res->n_calls) {
        if (!res->raw_dsml) return;
        sbuf_adds(&bind_text, res->raw_dsml);
    }
    sbuf_adds(&bind_text, CHAT_EOS);
    /* Disk snapshots can carry one key. Without tools the renderer drops
     * earlier reasoning anyway, so the visible transcript is what comes back.
     * With tools it keeps whatever reasoning the client replays: judge by this
     * request's history, else by API habit (DeepSeek-style chat clients and
     * Anthropic clients send reasoning back; Responses only with summaries). */
    int replays = -1;
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(r->chat_input, "messages"), i, m) {
        if (strcmp(json_string_value(json_object_get(m, "role")) ?: "", "assistant")) continue;
        const char *rc = json_string_value(json_object_get(m, "reasoning_content"));
        if (rc && rc[0]) { replays = 1; break; }
        replays = 0;
    }
    if (replays < 0) replays = r->api != API_RESPONSES || r->reasoning_summary;
    bind_key_visible = !r->has_tools || !replays;
    n_bind_tail = 0;
    if (unevaluated >= 0) bind_tail[n_bind_tail++] = unevaluated;
    bind_tail[n_bind_tail++] = engine_eos();
    bind_live = n_live;
}

static void fail_before_start(job *j, int status, const char *type, const char *msg) {
    char *s = json_body_line(j->sink->error_body(status, type, msg));
    snprintf(j->res.error, sizeof j->res.error, "%s", msg);
    j->res.finish = FINISH_ERROR;
    trace_end(j);
    job_finish(j, status, s);
}

static void run_job(job *j) {
    gen_request *r = j->req;
    gen_result *res = &j->res;
    const server_config *cfg = server_cfg();
    res->stop_index = -1;
    long seq = worker_next_seq();
    j->seq = seq;
    char hex[25];
    random_hex(hex, 24);
    switch (r->api) {
    case API_CHAT: snprintf(j->id, sizeof j->id, "chatcmpl-%ld", seq); break;
    case API_COMPLETIONS: snprintf(j->id, sizeof j->id, "cmpl-%ld", seq); break;
    case API_RESPONSES: snprintf(j->id, sizeof j->id, "resp_%s", hex); break;
    case API_ANTHROPIC: snprintf(j->id, sizeof j->id, "msg_%s", hex); break;
    }
    if (is_cancelled(j)) { fail_before_start(j, 499, "invalid_request_error", "client disconnected"); return; }

    trace_cache_info tci = {.live_tokens = n_live};
    char *window = NULL;
    if (trace_enabled()) {
        while (tci.common_prefix < n_live && tci.common_prefix < r->n_tokens && live_tok[tci.common_prefix] == r->tokens[tci.common_prefix])
            tci.common_prefix++;
        if (tci.common_prefix < n_live) window = trace_mismatch_window(live_tok, n_live, r->tokens, r->n_tokens, tci.common_prefix);
    }
    int n_eff = 0, n_cached = 0;
    const char *source = "cold";
    int32_t *eff = plan_prompt(r, &n_eff, &n_cached, &source);
    bind_live = -1; /* a binding only ever describes the turn just generated */
    res->prompt_tokens = n_eff;
    res->cache_source = source;
    res->cached_tokens = n_cached;
    /* only misses show the mismatch window */
    tci.window = strcmp(source, "cold") && strncmp(source, "disk", 4) ? NULL : window;
    trace_begin(j, &tci);
    free(window);
    if (n_eff >= cfg->ctx) {
        free(eff);
        fail_before_start(j, 400, "invalid_request_error", "prompt does not fit the context");
        return;
    }

    /* prefill what is not cached, in chunks, with boundary snapshots */
    int cold_cut = 0;
    if (kvdisk_enabled() && n_cached == 0 && cfg->kv_cold_max_tokens > 0 && n_eff >= cfg->kv_min_tokens && n_eff <= cfg->kv_cold_max_tokens)
        cold_cut = cold_store_len(eff, n_eff);
    double t0 = now_seconds(), last_keepalive = t0;
    int started = 0;
    int chunk = cfg->prefill_chunk > 0 ? cfg->prefill_chunk : 2048;
    int step = continued_step();
    /* the snapshot restored for this request already is the one we would take */
    int snap_at = cfg->prompt_snapshot && strcmp(source, "snapshot") ? prompt_snapshot_at(eff, n_eff) : -1;
    if (snap_at > 0 && n_live == snap_at) take_prompt_snapshot();
    while (n_live < n_eff) {
        int n = n_eff - n_live;
        if (n > chunk) n = chunk;
        if (cold_cut > n_live && n_live + n > cold_cut) n = cold_cut - n_live;
        if (snap_at > n_live && n_live + n > snap_at) n = snap_at - n_live;
        if (step && kvdisk_enabled()) {
            int next = (n_live / step + 1) * step;
            if (n_live + n > next) n = next - n_live;
        }
        if (minke_prefill(g_sess, eff + n_live, n, NULL)) {
            char msg[256];
            snprintf(msg, sizeof msg, "prefill failed: %s", minke_last_error());
            server_log("%s", msg);
            live_reset();
            free(eff);
            if (!started) { fail_before_start(j, 500, "server_error", msg); return; }
            snprintf(res->error, sizeof res->error, "%s", msg);
            j->sink->stream_error(j, msg);
            res->finish = FINISH_ERROR;
            trace_end(j);
            job_finish(j, 200, NULL);
            return;
        }
        live_push(eff + n_live, n);
        if (cold_cut && n_live == cold_cut) save_live(KV_REASON_COLD);
        if (n_live == snap_at) take_prompt_snapshot();
        maybe_continued_save();
        if (r->stream && !started) {
            j->sink->begin(j);
            job_mark_started(j);
            started = 1;
        }
        if (is_cancelled(j)) break;
        double now = now_seconds();
        if (r->stream && now - last_keepalive >= cfg->keepalive_ms / 1000.0) {
            sse_raw(&j->out, ": prefill\n\n");
            last_keepalive = now;
        }
    }
    free(eff);
    res->prefill_s = now_seconds() - t0;
    if (r->stream && !started) {
        j->sink->begin(j);
        job_mark_started(j);
    }

    /* generation */
    int thinking = r->think != THINK_NONE;
    sampler_params sp = sampler_params_default();
    sp.temperature = r->temperature;
    sp.top_p = r->top_p;
    sp.min_p = r->min_p;
    sp.top_k = r->top_k;
    sp.seed = r->seed;
    sp = sampler_params_for_mode(&sp, thinking);
    sampler *smp = sampler_new(&sp);
    gen_ctx g = {.j = j, .stream = r->stream};
    if (r->api != API_COMPLETIONS) g.cs = chat_stream_new(r->think == THINK_NONE ? "chat" : r->think == THINK_MAX ? "max" : "thinking", on_chat_event, &g);
    int32_t eos = engine_eos();
    int max_new = r->max_tokens;
    if (max_new > cfg->ctx - n_live) max_new = cfg->ctx - n_live;
    size_t fed = 0;
    size_t hold = max_stop_len(r);
    hold = hold ? hold - 1 : 0;
    int was_in_block = 0;
    finish_reason fin = FINISH_LENGTH;
    double td = now_seconds();
    int pending = -1; /* sampled, not yet evaluated */
    int32_t unevaluated = -1; /* last sampled token when the loop ended before evaluating it */
    int32_t *script = NULL;
    int n_script = 0;
    if (r->script) script = engine_tokenize(r->script, strlen(r->script), &n_script);
    while (!is_cancelled(j)) {
        if (pending >= 0) {
            if (minke_decode(g_sess, pending)) {
                snprintf(res->error, sizeof res->error, "decode failed: %s", minke_last_error());
                fin = FINISH_ERROR;
                break;
            }
            live_push(&pending, 1);
            pending = -1;
            if (!(g.cs && chat_stream_in_tool_block(g.cs))) maybe_continued_save();
        }
        int greedy = r->has_tools && g.cs && dsml_in_structure(g.cs);
        int32_t tok = minke_sample(g_sess, smp, greedy);
        if (tok < 0) { snprintf(res->error, sizeof res->error, "sampling failed: %s", minke_last_error()); fin = FINISH_ERROR; break; }
        if (script) tok = res->completion_tokens < n_script ? script[res->completion_tokens] : eos;
        if (tok == eos) { fin = FINISH_STOP; break; }
        res->completion_tokens++;
        size_t blen;
        const char *b = engine_token_bytes(tok, &blen);
        size_t before = res->raw_text.n;
        sbuf_add(&res->raw_text, b, blen);
        trace_generated(b, blen);
        int which = -1;
        long at = r->n_stop ? find_stop(r, res->raw_text.p, res->raw_text.n, before, &which) : -1;
        if (at >= 0) {
            res->raw_text.n = (size_t)at;
            res->raw_text.p[at] = 0;
            feed_text(&g, res->raw_text.p, &fed, (size_t)at, 1);
            res->stop_index = which;
            fin = FINISH_STOP;
            break;
        }
        size_t upto = res->raw_text.n > hold ? res->raw_text.n - hold : 0;
        feed_text(&g, res->raw_text.p, &fed, upto, 0);
        if (g.cs && r->has_tools) {
            int in_block = chat_stream_in_tool_block(g.cs);
            if (was_in_block && !in_block && chat_stream_tool_count(g.cs) > 0) {
                fin = FINISH_TOOL_CALLS;
                unevaluated = tok;
                break;
            }
            was_in_block = in_block;
        }
        if (res->completion_tokens >= max_new || n_live + 1 >= cfg->ctx) { fin = FINISH_LENGTH; unevaluated = tok; break; }
        pending = tok;
    }
    free(script);
    if (is_cancelled(j)) {
        fin = FINISH_ERROR;
        snprintf(res->error, sizeof res->error, "%s", q_stop ? "shutdown requested" : "client disconnected");
    }
    res->decode_s = now_seconds() - td;
    /* A generation cut by the token budget can end inside a UTF-8 sequence
     * that will never be completed: drop those bytes so the streamed text and
     * the final message agree and neither carries broken UTF-8. */
    if (res->raw_text.p) {
        size_t whole = utf8_safe_len(res->raw_text.p, res->raw_text.n);
        if (whole >= fed && whole < res->raw_text.n) {
            res->raw_text.n = whole;
            res->raw_text.p[whole] = 0;
        }
    }
    feed_text(&g, res->raw_text.p ? res->raw_text.p : "", &fed, res->raw_text.n, 1);
    sampler_free(smp);

    /* final message */
    if (g.cs) {
        int in_block = chat_stream_in_tool_block(g.cs);
        json_t *msg = chat_stream_finish(g.cs, NULL);
        chat_stream_free(g.cs);
        const char *rc = json_string_value(json_object_get(msg, "reasoning_content"));
        const char *ct = json_string_value(json_object_get(msg, "content"));
        sbuf_clear(&res->reasoning);
        sbuf_clear(&res->content);
        if (rc) sbuf_adds(&res->reasoning, rc);
        if (ct) sbuf_adds(&res->content, ct);
        res->saw_think_close = !thinking || memmem(res->raw_text.p ? res->raw_text.p : "", res->raw_text.n, CHAT_THINK_CLOSE, 8) != NULL;
        json_t *calls = json_object_get(msg, "tool_calls");
        size_t nc = json_array_size(calls);
        if (nc && r->has_tools) {
            res->calls = calloc(nc, sizeof *res->calls);
            for (size_t i = 0; i < nc; i++) {
                json_t *fn = json_object_get(json_array_get(calls, i), "function");
                gen_tool_call *c = &res->calls[res->n_calls++];
                char id[64];
                if ((int)i < g.n_ids) snprintf(id, sizeof id, "%s", g.ids[i]);
                else new_call_id(r, id, sizeof id);
                c->id = strdup(id);
                c->name = strdup(json_string_value(json_object_get(fn, "name")) ? json_string_value(json_object_get(fn, "name")) : "");
                const char *a = json_string_value(json_object_get(fn, "arguments"));
                c->arguments = strdup(a ? a : "{}");
            }
            res->raw_dsml = extract_raw_dsml(res->raw_text.p, res->raw_text.n);
            if (res->raw_dsml && cfg->tool_replay)
                for (int i = 0; i < res->n_calls; i++) toolmem_put(res->calls[i].id, res->raw_dsml);
            if (fin != FINISH_ERROR) fin = FINISH_TOOL_CALLS;
        }
        if (in_block && fin != FINISH_TOOL_CALLS && r->has_tools) {
            fin = FINISH_ERROR;
            snprintf(res->error, sizeof res->error, "unterminated tool call");
        }
        json_decref(msg);
    }
    for (int i = 0; i < g.n_ids; i++) free(g.ids[i]);
    free(g.ids);
    res->finish = fin;
    if (thinking && g.cs && res->saw_think_close && ((fin == FINISH_STOP && res->stop_index < 0) || fin == FINISH_TOOL_CALLS))
        remember_visible(r, res, fin == FINISH_TOOL_CALLS ? unevaluated : -1);
    trace_end(j);
    j->sink->end(j);
    job_finish(j, 200, NULL);
}

static void *worker_main(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&q_mu);
        while (!q_head && !q_stop) pthread_cond_wait(&q_cv, &q_mu);
        job *j = q_head;
        if (!j) { pthread_mutex_unlock(&q_mu); break; }
        q_head = j->next;
        if (!q_head) q_tail = NULL;
        q_running = j;
        pthread_mutex_unlock(&q_mu);
        if (q_stop) {
            fail_before_start(j, 503, "server_error", "server shutting down");
        } else {
            run_job(j);
        }
        pthread_mutex_lock(&q_mu);
        q_running = NULL;
        pthread_mutex_unlock(&q_mu);
        job_unref(j);
    }
    return NULL;
}

int worker_start(void) {
    const server_config *cfg = server_cfg();
    g_sess = minke_session_create(engine_model(), cfg->ctx);
    if (!g_sess) {
        fprintf(stderr, "minke serve: cannot create a session of %d tokens: %s\n", cfg->ctx, minke_last_error());
        return -1;
    }
    toolmem_init(cfg->tool_memory_max_ids);
    if (pthread_create(&worker_thread, NULL, worker_main, NULL)) return -1;
    worker_running = 1;
    return 0;
}

int worker_submit(job *j) {
    pthread_mutex_lock(&q_mu);
    if (q_stop) { pthread_mutex_unlock(&q_mu); return -1; }
    j->next = NULL;
    if (q_tail) q_tail->next = j;
    else q_head = j;
    q_tail = j;
    pthread_cond_signal(&q_cv);
    pthread_mutex_unlock(&q_mu);
    return 0;
}

void worker_shutdown(void) {
    pthread_mutex_lock(&q_mu);
    q_stop = 1;
    if (q_running) __atomic_store_n(&q_running->cancelled, 1, __ATOMIC_SEQ_CST);
    pthread_cond_broadcast(&q_cv);
    pthread_mutex_unlock(&q_mu);
    if (worker_running) pthread_join(worker_thread, NULL);
    worker_running = 0;
    if (g_sess) {
        save_live(KV_REASON_SHUTDOWN);
        minke_session_free(g_sess);
        g_sess = NULL;
    }
    free(live_tok);
    live_tok = NULL;
    sbuf_free(&live_text);
    drop_prompt_snapshot();
    trace_close();
}
