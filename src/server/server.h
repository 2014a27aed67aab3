/* server.h: internal types of `minke serve` shared by the HTTP layer, the
 * per-API request parsers / response writers, the inference worker and the
 * disk KV cache. Nothing here is public API (include/minke.h is).
 *
 * Flow: http.c receives a request and calls the API parser (openai.c,
 * anthropic.c, responses.c), which fills a gen_request (chat input in the
 * fixtures/chat format + sampling/stop/stream options). request.c renders and
 * tokenizes it (on the connection thread), then worker.c runs the job alone
 * on the single inference thread and reports generation events to the API's
 * sink, which writes SSE frames into the job's stream buffer (sse.c) or builds
 * the final JSON body.
 */
#ifndef MINKE_SERVER_H
#define MINKE_SERVER_H

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stddef.h>

#include "minke.h"
#include "text/strbuf.h"

/* ---- growable byte buffer: the shared text/strbuf.h buffer, with the
 * server's policy on top (util.c): out of memory aborts instead of being
 * sticky, since a silently truncated response or live text is worse than a
 * crash; plus printf and clear. p is NUL-terminated after any append. ---- */
typedef strbuf sbuf;
void sbuf_add(sbuf *b, const void *data, size_t n);
void sbuf_adds(sbuf *b, const char *s);
void sbuf_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sbuf_free(sbuf *b);
void sbuf_clear(sbuf *b);
char *sbuf_take(sbuf *b); /* NUL-terminated, caller frees; buffer emptied */

/* ---- small helpers (util.c) ---- */
void random_hex(char *out, int n_hex);        /* n_hex lowercase hex chars + NUL */
size_t utf8_safe_len(const char *s, size_t n); /* bytes that end on a char boundary */
int utf8_valid(const char *s, size_t n);
double now_seconds(void);
char *json_compact(const json_t *v);          /* compact, key order kept; caller frees */
char *json_body_line(json_t *body);           /* steals body: compact JSON + "\n", caller frees */
int json_max_depth_ok(const char *body, size_t n, int limit);
void server_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- server configuration (cmd_serve.c fills it) ---- */
typedef struct server_config {
    const char *host;
    int port;
    const char *api_key;      /* NULL: no auth */
    int cors;
    int ctx;                  /* session context size */
    size_t max_body_bytes;
    int default_max_tokens;
    const char *model_path;
    minke_backend backend;
    int n_threads;
    int n_gpus;
    int act;                  /* minke_model_params.act: MINKE_ACT_EXACT (default) or _Q8 */
    const char *model_id;     /* id reported by /v1/models */
    int accept_any_model;
    int prefill_chunk;        /* tokens per prefill call (keepalive/cancel granularity) */
    int keepalive_ms;         /* SSE comment interval during prefill */
    /* disk KV cache (kvdisk.c) */
    const char *kv_disk_dir;
    uint64_t kv_disk_space_mb;
    int kv_min_tokens;
    int kv_cold_max_tokens;
    int kv_continued_interval;
    int kv_boundary_trim;
    int kv_boundary_align;
    int tool_replay;          /* exact DSML tool replay on */
    int tool_memory_max_ids;
    const char *trace_path;   /* --trace FILE (trace.c), NULL: off */
    int prompt_snapshot;      /* keep the last prompt's end in memory (worker.c) */
    int test_hooks;           /* honour "minke_script" in request bodies (tests only) */
} server_config;

/* ---- APIs ---- */
typedef enum { API_CHAT = 0, API_COMPLETIONS, API_RESPONSES, API_ANTHROPIC } api_kind;

typedef enum { FINISH_NONE = 0, FINISH_STOP, FINISH_LENGTH, FINISH_TOOL_CALLS, FINISH_ERROR } finish_reason;

typedef enum { THINK_NONE = 0, THINK_HIGH = 1, THINK_MAX = 2 } think_mode;

/* Responses tools may live in namespaces: the rendered name is NS+name, the
 * wire name is name with "namespace": NS. */
typedef struct tool_name_map {
    char *rendered, *name, *ns;
    int is_tool_search;
} tool_name_map;

typedef struct gen_request {
    api_kind api;
    char *model;              /* echoed back */
    json_t *chat_input;       /* {messages, tools, thinking_mode, reasoning_effort} */
    char *raw_prompt;         /* /v1/completions: the user prompt */
    /* rendered prompt and its tokens (request.c) */
    char *prompt_text;
    size_t prompt_len;
    int32_t *tokens;
    int n_tokens;
    /* options */
    int max_tokens;           /* -1: not given */
    float temperature, top_p, min_p;
    int top_k;
    uint64_t seed;
    think_mode think;
    int has_tools;
    char **stop;
    int n_stop;
    int stream;
    int include_usage;
    int reasoning_summary;    /* Responses: client opted into reasoning items */
    tool_name_map *tool_names;
    int n_tool_names;
    /* tool-call ids mentioned by the request (for tool replay lookups) */
    int n_replayed;           /* assistant tool-call turns replayed exactly */
    char *script;             /* --test-hooks: text to emit instead of sampling */
    char *raw_body;           /* request JSON as received, kept only for --trace */
} gen_request;

void gen_request_free(gen_request *r);

/* A parsed tool call of the generated turn. */
typedef struct gen_tool_call {
    char *id;
    char *name;
    char *arguments;          /* compact JSON object text */
} gen_tool_call;

/* What the generation produced (filled by worker.c as it goes). */
typedef struct gen_result {
    sbuf reasoning, content, raw_text;
    gen_tool_call *calls;
    int n_calls;
    char *raw_dsml;           /* exact DSML block of the tool calls, for replay */
    finish_reason finish;
    int stop_index;           /* which stop sequence ended generation, -1 none */
    int saw_think_close;
    int prompt_tokens, cached_tokens, completion_tokens;
    double prefill_s, decode_s;
    const char *cache_source; /* memory-token, memory-text, thinking-visible, snapshot, disk-text, disk-visible, cold */
    char error[256];
} gen_result;

/* ---- stream buffer between the worker and one connection (sse.c) ---- */
typedef struct stream_buf {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sbuf data;
    size_t off;               /* bytes already handed to the socket */
    int closed;               /* writer is done */
    int client_gone;          /* reader saw the client leave */
    int fd;                   /* client socket, for disconnect polling */
} stream_buf;

void stream_init(stream_buf *s, int fd);
void stream_destroy(stream_buf *s);
int stream_write(stream_buf *s, const void *p, size_t n); /* -1 when the client left */
void stream_close(stream_buf *s);
int stream_client_alive(stream_buf *s);
/* SSE helpers: "data: JSON\n\n" or "event: NAME\ndata: JSON\n\n"; steal the json. */
int sse_data(stream_buf *s, json_t *obj);
int sse_event(stream_buf *s, const char *event, json_t *obj);
int sse_raw(stream_buf *s, const char *text);
int socket_peer_closed(int fd);

/* ---- a queued job ---- */
struct api_sink;
typedef struct job {
    gen_request *req;
    const struct api_sink *sink;
    void *sink_state;         /* per-API streaming state */
    gen_result res;
    stream_buf out;           /* SSE bytes when req->stream */
    int cancelled;            /* client left or shutdown (atomic access) */
    /* completion */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started;              /* stream: SSE headers may go out */
    int done;
    int http_status;          /* for non-stream or errors before start */
    char *body;               /* final JSON body (non-stream / error) */
    int refs;
    long seq;                 /* server-wide request number */
    char id[64];              /* chatcmpl-N / resp_... */
    double t_queued;
    struct job *next;
} job;

job *job_new(gen_request *req, const struct api_sink *sink, int fd);
void job_unref(job *j);
void job_mark_started(job *j);
void job_finish(job *j, int status, char *body);

/* ---- per-API output sinks (openai.c, anthropic.c, responses.c) ---- */
typedef struct api_sink {
    void (*begin)(job *j);                                     /* stream start */
    void (*reasoning)(job *j, const char *s, size_t n);
    void (*content)(job *j, const char *s, size_t n);
    void (*tool_start)(job *j, int index, const char *id, const char *name);
    void (*tool_args)(job *j, int index, const char *s, size_t n);
    void (*tool_end)(job *j, int index);
    void (*end)(job *j);   /* stream: closing frames; non-stream: builds j->body */
    void (*stream_error)(job *j, const char *msg);
    json_t *(*error_body)(int status, const char *type, const char *msg); /* API error shape */
} api_sink;

extern const api_sink openai_chat_sink, openai_completions_sink, responses_sink, anthropic_sink;
/* the OpenAI error shapes, shared by Chat, Completions and Responses (openai.c) */
void openai_stream_error(job *j, const char *msg);
json_t *openai_error_body(int status, const char *type, const char *msg);

/* Error body in an API's shape (request.c). */
json_t *openai_error_json(const char *type, const char *msg, const char *param, const char *code);
json_t *anthropic_error_json(const char *type, const char *msg);

/* ---- request parsing (per API): NULL with the parse_error filled on failure ---- */
typedef struct parse_error {
    int status;
    char type[48];            /* invalid_request_error, not_found_error, ... */
    char msg[512];
    char param[32];
    char code[48];
    int n_prompt_tokens, n_ctx;
} parse_error;

gen_request *openai_parse_chat(json_t *body, parse_error *e);
gen_request *openai_parse_completions(json_t *body, parse_error *e);
gen_request *responses_parse(json_t *body, parse_error *e);
gen_request *anthropic_parse(json_t *body, parse_error *e);

/* Common field readers (request.c). Return 0 ok, -1 wrong type (e filled). */
int req_read_common(gen_request *r, json_t *body, parse_error *e);
int req_read_stop(gen_request *r, json_t *v, parse_error *e);
int req_effort(json_t *v, think_mode *mode, int *explicit_set, parse_error *e);
/* Offer the converted tools (stolen) to the model unless none or tool_choice none. */
void req_set_tools(gen_request *r, json_t *tools, int tools_off);
void perr(parse_error *e, int status, const char *type, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Render + tokenize + check context (request.c). */
int req_prepare(gen_request *r, parse_error *e);
int req_model_ok(const char *model);
char *content_text(json_t *content, parse_error *e, int allow_null); /* string or text blocks */

/* ---- engine glue (engine.c): model, tokenizer, renderer, sampler ---- */
int engine_open(const server_config *cfg);
void engine_close(void);
const server_config *server_cfg(void);
minke_model *engine_model(void);
const char *engine_model_name(void);
int engine_n_vocab(void);
int32_t engine_eos(void);
char *engine_render(json_t *chat_input, size_t *len, char *err, size_t errlen);
int32_t *engine_tokenize(const char *text, size_t len, int *n_out); /* special-aware */
const char *engine_token_bytes(int32_t id, size_t *len);
int32_t engine_special_user(void);
int32_t engine_special_assistant(void);

/* ---- worker (worker.c) ---- */
int worker_start(void);
int worker_submit(job *j);       /* -1 when shutting down */
void worker_shutdown(void);      /* stop accepting, drain, persist */
long worker_next_seq(void);

/* ---- tool memory (toolmem.c): call id -> exact DSML block ---- */
void toolmem_init(int max_ids);
void toolmem_put(const char *id, const char *dsml);
char *toolmem_get(const char *id);   /* caller frees; NULL when unknown */
int toolmem_count(void);
int toolmem_collect(const char *text, size_t len, char ***ids, char ***dsmls);
/* Rewrite assistant messages whose call ids all map to one remembered block so
 * the renderer emits it verbatim; returns a placeholder map for after-render. */
typedef struct dsml_patch {
    char *marker;
    char *dsml;
} dsml_patch;
int toolmem_patch_messages(json_t *messages, dsml_patch **patches, int *n_patches);
char *toolmem_apply_patches(const char *text, size_t len, const dsml_patch *p, int n, size_t *out_len);
void dsml_patches_free(dsml_patch *p, int n);

/* ---- disk KV cache (kvdisk.c) ---- */
typedef enum { KV_REASON_UNKNOWN = 0, KV_REASON_COLD = 1, KV_REASON_CONTINUED = 2, KV_REASON_EVICT = 3, KV_REASON_SHUTDOWN = 4 } kv_reason;

typedef struct kvdisk_header {
    uint8_t version, quant_bits, reason, flags;
    uint32_t n_tokens, hits, ctx;
    uint64_t created, last_used, payload_bytes;
    uint32_t key_len;
} kvdisk_header;

int kvdisk_init(const server_config *cfg);  /* mkdir, scan, evict to budget */
int kvdisk_enabled(void);
/* Save the session state keyed by key text (token bytes of the stored tokens,
 * or the client-visible transcript of a thinking turn: then `tail` holds the
 * tokens to evaluate after the state before the text that follows the key);
 * the token list travels in the file so a load restores the exact history. */
int kvdisk_save_tokens(minke_session *s, const char *key, size_t key_len, const int32_t *tok, int n_tok, const int32_t *tail, int n_tail,
                       kv_reason why);
/* Longest valid entry whose key is a byte prefix of text; loads it into s and
 * returns the key length (>0) with its tokens in *tok (caller frees), or 0. */
size_t kvdisk_load_prefix(minke_session *s, const char *text, size_t len, int32_t **tok, int *n_tok, int32_t **tail, int *n_tail);
/* Helpers exposed for tests. */
void sha1_hex(const void *data, size_t n, char out[41]);
int kvdisk_store_len(int n, int min, int trim, int align);
uint64_t kvdisk_total_bytes(void);
int kvdisk_evict_to_budget(const char *protect_name);

/* ---- session trace, --trace FILE (trace.c); entries written by the worker ---- */
typedef struct trace_cache_info {
    int live_tokens;          /* live session length before the decision */
    int common_prefix;        /* tokens shared by the live session and the prompt */
    const char *window;       /* tokens around the first mismatch, or NULL */
} trace_cache_info;
int trace_open(const char *path);  /* append; -1 when it cannot be opened */
void trace_close(void);
int trace_enabled(void);
char *trace_mismatch_window(const int32_t *live, int n_live, const int32_t *req, int n_req, int at);
void trace_begin(const job *j, const trace_cache_info *c);
void trace_generated(const char *s, size_t n);
void trace_end(const job *j);      /* no-op unless an entry is open */

/* ---- HTTP (http.c) ---- */
int http_serve(const server_config *cfg); /* blocks until SIGINT/SIGTERM */

#endif
