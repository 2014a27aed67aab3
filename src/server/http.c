/* http.c: the HTTP front of `minke serve` on libmicrohttpd (one thread per
 * connection). It collects the body (bounded), checks the API key, routes,
 * turns parse/validation failures into 4xx bodies in the API's own error
 * shape, hands valid requests to the single inference worker, and then either
 * waits for the finished JSON body or streams the SSE bytes the worker writes.
 * While waiting it watches the client socket: a client that leaves cancels
 * its job so the worker is freed. SIGINT/SIGTERM shut the server down. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "server/server.h"

#if MHD_VERSION < 0x00097002
typedef int MHD_Result_t;
#else
typedef enum MHD_Result MHD_Result_t;
#endif

static const server_config *g_cfg;
static int g_inflight; /* requests between their first callback and on_completed */

typedef struct conn_ctx {
    sbuf body;
    int too_big;
    job *j;
    int status;
    char method[8];
    char path[128];
    double t0;
} conn_ctx;

static void add_common_headers(struct MHD_Response *r, const char *content_type) {
    if (content_type) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (g_cfg->cors) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "*");
    }
}

static MHD_Result_t send_body(struct MHD_Connection *c, conn_ctx *ctx, int status, const char *ctype, char *body_owned) {
    size_t n = body_owned ? strlen(body_owned) : 0;
    struct MHD_Response *r = MHD_create_response_from_buffer(n, body_owned ? body_owned : (char *)"", body_owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    add_common_headers(r, ctype);
    ctx->status = status;
    MHD_Result_t rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

static MHD_Result_t send_json(struct MHD_Connection *c, conn_ctx *ctx, int status, json_t *obj) {
    return send_body(c, ctx, status, "application/json", json_body_line(obj));
}

static int is_anthropic_path(const char *path) { return !strncmp(path, "/v1/messages", 12); }

static MHD_Result_t send_error(struct MHD_Connection *c, conn_ctx *ctx, const char *path, const parse_error *e) {
    json_t *obj;
    if (is_anthropic_path(path)) {
        obj = anthropic_error_json(e->type[0] ? e->type : "invalid_request_error", e->msg);
        if (e->n_ctx) {
            json_t *err = json_object_get(obj, "error");
            json_object_set_new(err, "n_prompt_tokens", json_integer(e->n_prompt_tokens));
            json_object_set_new(err, "n_ctx", json_integer(e->n_ctx));
        }
    } else {
        obj = openai_error_json(e->type[0] ? e->type : "invalid_request_error", e->msg, e->param[0] ? e->param : NULL, e->code[0] ? e->code : NULL);
        if (e->n_ctx) {
            json_t *err = json_object_get(obj, "error");
            json_object_set_new(err, "n_prompt_tokens", json_integer(e->n_prompt_tokens));
            json_object_set_new(err, "n_ctx", json_integer(e->n_ctx));
        }
    }
    return send_json(c, ctx, e->status ? e->status : 400, obj);
}

static json_t *model_object(const char *id) {
    int ctx = g_cfg->ctx;
    int maxc = g_cfg->default_max_tokens < ctx ? g_cfg->default_max_tokens : ctx;
    json_t *m = json_pack("{s:s, s:s, s:i, s:s, s:s, s:i}", "id", id, "object", "model", "created", 1767225600,
                          "owned_by", "minke", "name", engine_model_name(), "context_length", ctx);
    json_object_set_new(m, "top_provider", json_pack("{s:i, s:i, s:b}", "context_length", ctx, "max_completion_tokens", maxc, "is_moderated", 0));
    json_object_set_new(m, "supported_parameters", json_pack("[s,s,s,s,s,s,s,s,s,s,s]", "tools", "tool_choice", "max_tokens", "temperature",
                                                             "top_p", "top_k", "min_p", "stop", "seed", "stream", "reasoning_effort"));
    return m;
}

static int check_auth(struct MHD_Connection *c) {
    if (!g_cfg->api_key || !g_cfg->api_key[0]) return 1;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (auth && !strncasecmp(auth, "Bearer ", 7)) {
        const char *k = auth + 7;
        while (*k == ' ') k++;
        if (!strcmp(k, g_cfg->api_key)) return 1;
    }
    const char *xk = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    return xk && !strcmp(xk, g_cfg->api_key);
}

static int client_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* Blocks until the job reaches `want` (started or done); returns 0 when the
 * client left first (the job is then cancelled). */
static int wait_job(job *j, int want_started) {
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int ok = j->done || (want_started && j->started);
        if (!ok) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 200 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
            pthread_cond_timedwait(&j->cv, &j->mu, &ts);
            ok = j->done || (want_started && j->started);
        }
        pthread_mutex_unlock(&j->mu);
        if (ok) return 1;
        if (socket_peer_closed(j->out.fd)) {
            pthread_mutex_lock(&j->out.mu);
            j->out.client_gone = 1;
            pthread_mutex_unlock(&j->out.mu);
            __atomic_store_n(&j->cancelled, 1, __ATOMIC_SEQ_CST);
            return 0;
        }
    }
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    job *j = cls;
    stream_buf *s = &j->out;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->client_gone) { pthread_mutex_unlock(&s->mu); return MHD_CONTENT_READER_END_WITH_ERROR; }
        if (s->off < s->data.n) {
            size_t n = s->data.n - s->off;
            if (n > max) n = max;
            memcpy(buf, s->data.p + s->off, n);
            s->off += n;
            pthread_mutex_unlock(&s->mu);
            return (ssize_t)n;
        }
        if (s->closed) { pthread_mutex_unlock(&s->mu); return MHD_CONTENT_READER_END_OF_STREAM; }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        int rc = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        if (rc == ETIMEDOUT && s->off >= s->data.n && !s->closed) {
            pthread_mutex_unlock(&s->mu);
            int gone = socket_peer_closed(s->fd);
            pthread_mutex_lock(&s->mu);
            if (gone) {
                s->client_gone = 1;
                __atomic_store_n(&j->cancelled, 1, __ATOMIC_SEQ_CST);
            }
        }
    }
}

static void stream_reader_free(void *cls) { job_unref(cls); }

static MHD_Result_t handle_generate(struct MHD_Connection *c, conn_ctx *ctx, const char *path) {
    parse_error e;
    memset(&e, 0, sizeof e);
    e.status = 400;
    if (ctx->too_big) {
        perr(&e, 413, "invalid_request_error", "request body exceeds the limit of %zu bytes (--max-body-mb)", g_cfg->max_body_bytes);
        return send_error(c, ctx, path, &e);
    }
    if (!json_max_depth_ok(ctx->body.p ? ctx->body.p : "", ctx->body.n, 256)) {
        perr(&e, 400, "invalid_request_error", "invalid JSON request: nesting deeper than 256 levels");
        return send_error(c, ctx, path, &e);
    }
    json_error_t jerr;
    json_t *body = ctx->body.n ? json_loadb(ctx->body.p, ctx->body.n, 0, &jerr) : NULL;
    if (!body) {
        if (!ctx->body.n) perr(&e, 400, "invalid_request_error", "invalid JSON request: empty body");
        else perr(&e, 400, "invalid_request_error", "invalid JSON request: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
        return send_error(c, ctx, path, &e);
    }
    if (!json_is_object(body)) {
        json_decref(body);
        perr(&e, 400, "invalid_request_error", "invalid JSON request: the body must be a JSON object");
        return send_error(c, ctx, path, &e);
    }
    gen_request *req = NULL;
    const api_sink *sink = NULL;
    if (!strcmp(path, "/v1/messages/count_tokens")) {
        /* Claude Code asks for prompt sizes: render and tokenize, no generation */
        req = anthropic_parse(body, &e);
        json_decref(body);
        if (!req) return send_error(c, ctx, path, &e);
        int rc = req_prepare(req, &e);
        int n = rc ? e.n_prompt_tokens : req->n_tokens;
        gen_request_free(req);
        if (rc && !e.n_ctx) return send_error(c, ctx, path, &e);
        return send_json(c, ctx, 200, json_pack("{s:i}", "input_tokens", n));
    }
    if (!strcmp(path, "/v1/chat/completions")) { req = openai_parse_chat(body, &e); sink = &openai_chat_sink; }
    else if (!strcmp(path, "/v1/completions")) { req = openai_parse_completions(body, &e); sink = &openai_completions_sink; }
    else if (!strcmp(path, "/v1/responses")) { req = responses_parse(body, &e); sink = &responses_sink; }
    else { req = anthropic_parse(body, &e); sink = &anthropic_sink; }
    json_decref(body);
    if (!req) return send_error(c, ctx, path, &e);
    if (req_prepare(req, &e)) {
        gen_request_free(req);
        return send_error(c, ctx, path, &e);
    }
    if (trace_enabled()) req->raw_body = strndup(ctx->body.p, ctx->body.n);
    job *j = job_new(req, sink, client_fd(c));
    j->refs = 2; /* this connection + the worker */
    ctx->j = j;
    if (worker_submit(j)) {
        j->refs = 1;
        job_finish(j, 503, NULL);
        perr(&e, 503, "server_error", "server shutting down");
        return send_error(c, ctx, path, &e);
    }
    if (!req->stream) {
        if (!wait_job(j, 0)) return MHD_NO; /* client left: drop the connection */
        pthread_mutex_lock(&j->mu);
        int status = j->http_status ? j->http_status : 200;
        char *b = j->body;
        j->body = NULL;
        pthread_mutex_unlock(&j->mu);
        return send_body(c, ctx, status, "application/json", b ? b : strdup("{}\n"));
    }
    if (!wait_job(j, 1)) return MHD_NO;
    pthread_mutex_lock(&j->mu);
    int started = j->started;
    int status = j->http_status;
    char *b = NULL;
    if (!started) { b = j->body; j->body = NULL; }
    pthread_mutex_unlock(&j->mu);
    if (!started) return send_body(c, ctx, status ? status : 500, "application/json", b ? b : strdup("{}\n"));
    pthread_mutex_lock(&j->mu);
    j->refs++; /* the response's reader holds one */
    pthread_mutex_unlock(&j->mu);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, j, stream_reader_free);
    add_common_headers(r, "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    ctx->status = 200;
    MHD_Result_t rc = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

static MHD_Result_t on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *version,
                               const char *upload_data, size_t *upload_size, void **con_cls) {
    (void)cls; (void)version;
    conn_ctx *ctx = *con_cls;
    if (!ctx) {
        ctx = calloc(1, sizeof *ctx);
        snprintf(ctx->method, sizeof ctx->method, "%s", method);
        snprintf(ctx->path, sizeof ctx->path, "%s", url);
        ctx->t0 = now_seconds();
        __atomic_add_fetch(&g_inflight, 1, __ATOMIC_SEQ_CST);
        *con_cls = ctx;
        /* An oversized body is normally read and discarded so the client sees
         * the 413 (answering mid-upload resets its connection); one far over
         * the limit is refused at once and the connection dropped. */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) / 8 > g_cfg->max_body_bytes) {
            parse_error e;
            memset(&e, 0, sizeof e);
            ctx->too_big = 1;
            perr(&e, 413, "invalid_request_error", "request body exceeds the limit of %zu bytes (--max-body-mb)", g_cfg->max_body_bytes);
            return send_error(c, ctx, url, &e);
        }
        return MHD_YES;
    }
    if (ctx->status) { *upload_size = 0; return MHD_YES; } /* already answered (413) */
    if (*upload_size) {
        if (!ctx->too_big) {
            if (ctx->body.n + *upload_size > g_cfg->max_body_bytes) { ctx->too_big = 1; sbuf_free(&ctx->body); }
            else sbuf_add(&ctx->body, upload_data, *upload_size);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    parse_error e;
    memset(&e, 0, sizeof e);
    if (!strcmp(method, "OPTIONS")) return send_body(c, ctx, 204, NULL, NULL);
    if (!check_auth(c)) {
        perr(&e, 401, "authentication_error", "invalid or missing API key (send Authorization: Bearer KEY or x-api-key: KEY)");
        return send_error(c, ctx, url, &e);
    }
    if (!strcmp(method, "GET")) {
        if (!strcmp(url, "/health")) return send_json(c, ctx, 200, json_pack("{s:s, s:s}", "status", "ok", "model", g_cfg->model_id));
        if (!strcmp(url, "/v1/models")) return send_json(c, ctx, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", model_object(g_cfg->model_id)));
        if (!strncmp(url, "/v1/models/", 11)) {
            const char *id = url + 11;
            if (req_model_ok(id)) return send_json(c, ctx, 200, model_object(id));
            perr(&e, 404, "not_found_error", "model '%s' not found", id);
            snprintf(e.code, sizeof e.code, "model_not_found");
            return send_error(c, ctx, url, &e);
        }
    }
    if (!strcmp(method, "POST") && (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/v1/completions") ||
                                    !strcmp(url, "/v1/responses") || !strcmp(url, "/v1/messages") || !strcmp(url, "/v1/messages/count_tokens")))
        return handle_generate(c, ctx, url);
    int known = !strcmp(url, "/health") || !strncmp(url, "/v1/models", 10) || !strcmp(url, "/v1/chat/completions") ||
                !strcmp(url, "/v1/completions") || !strcmp(url, "/v1/responses") || !strcmp(url, "/v1/messages");
    if (known) perr(&e, 405, "invalid_request_error", "method %s not allowed on %s", method, url);
    else perr(&e, 404, "not_found_error", "unknown endpoint");
    return send_error(c, ctx, url, &e);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls; (void)c;
    conn_ctx *ctx = *con_cls;
    if (!ctx) return;
    if (ctx->j) {
        job *j = ctx->j;
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
            __atomic_store_n(&j->cancelled, 1, __ATOMIC_SEQ_CST);
            pthread_mutex_lock(&j->out.mu);
            j->out.client_gone = 1;
            pthread_cond_broadcast(&j->out.cv);
            pthread_mutex_unlock(&j->out.mu);
        }
        /* the log line needs the job's counters: wait until the worker is done with it */
        wait_job(j, 0);
        gen_result *r = &j->res;
        int gen = r->completion_tokens;
        double pf = r->prefill_s > 0 ? (r->prompt_tokens - r->cached_tokens) / r->prefill_s : 0;
        double dc = r->decode_s > 0 ? gen / r->decode_s : 0;
        server_log("%s %s %d %s prompt=%d cached=%d (%s) gen=%d prefill=%.1f tok/s decode=%.1f tok/s%s%s%s", ctx->method, ctx->path,
                   ctx->status ? ctx->status : 499, j->id, r->prompt_tokens, r->cached_tokens, r->cache_source ? r->cache_source : "-", gen, pf, dc,
                   toe != MHD_REQUEST_TERMINATED_COMPLETED_OK ? " (client disconnected)" : "",
                   r->finish == FINISH_ERROR && r->error[0] ? " error: " : "", r->finish == FINISH_ERROR ? r->error : "");
        job_unref(j);
    } else {
        server_log("%s %s %d", ctx->method, ctx->path, ctx->status ? ctx->status : 499);
    }
    sbuf_free(&ctx->body);
    free(ctx);
    *con_cls = NULL;
    __atomic_sub_fetch(&g_inflight, 1, __ATOMIC_SEQ_CST);
}

static int resolve_host(const char *host, struct sockaddr_in *sa) {
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    if (!strcmp(host, "localhost")) host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &sa->sin_addr) == 1) return 0;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) || !res) return -1;
    sa->sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return 0;
}

static void *second_signal_main(void *arg) {
    sigset_t *set = arg;
    int sig;
    sigwait(set, &sig);
    server_log("second signal: exiting now");
    _exit(130);
    return NULL;
}

int http_serve(const server_config *cfg) {
    g_cfg = cfg;
    struct sockaddr_in sa;
    if (resolve_host(cfg->host, &sa)) {
        fprintf(stderr, "minke serve: cannot resolve host '%s' (IPv4 only)\n", cfg->host);
        return 1;
    }
    sa.sin_port = htons((uint16_t)cfg->port);
    static sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_ITC,
                                            (uint16_t)cfg->port, NULL, NULL, on_request, NULL,
                                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
                                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)256,
                                            MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "minke serve: cannot listen on %s:%d (%s)\n", cfg->host, cfg->port, strerror(errno));
        return 1;
    }
    server_log("listening on http://%s:%d (model %s, ctx %d%s%s)", cfg->host, cfg->port, cfg->model_id, cfg->ctx,
               cfg->api_key ? ", api key required" : "", cfg->cors ? ", CORS on" : "");
    int sig = 0;
    sigwait(&set, &sig);
    server_log("%s received: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    pthread_t t2;
    pthread_create(&t2, NULL, second_signal_main, &set);
    pthread_detach(t2);
    MHD_socket ls = MHD_quiesce_daemon(d);
    worker_shutdown();  /* cancels the running job, fails queued ones, persists the KV */
    /* let the connections deliver their last frames before they are closed */
    for (int i = 0; i < 100 && __atomic_load_n(&g_inflight, __ATOMIC_SEQ_CST) > 0; i++) usleep(50 * 1000);
    MHD_stop_daemon(d);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    return 0;
}
