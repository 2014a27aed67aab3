/* sse.c: the byte stream between the inference worker and one client
 * connection (the worker appends SSE frames, libmicrohttpd's reader callback
 * drains them), SSE frame helpers, client-disconnect detection, and the job
 * object's lifetime (shared by the connection thread and the worker). */
#define _GNU_SOURCE 1
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "server/server.h"

void stream_init(stream_buf *s, int fd) {
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->fd = fd;
}

void stream_destroy(stream_buf *s) {
    sbuf_free(&s->data);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
}

int stream_write(stream_buf *s, const void *p, size_t n) {
    pthread_mutex_lock(&s->mu);
    int gone = s->client_gone;
    if (!gone) {
        /* compact what the reader already consumed so memory stays flat */
        if (s->off > 0 && s->off == s->data.n) { sbuf_clear(&s->data); s->off = 0; }
        else if (s->off > 65536) {
            memmove(s->data.p, s->data.p + s->off, s->data.n - s->off);
            s->data.n -= s->off;
            s->off = 0;
        }
        sbuf_add(&s->data, p, n);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return gone ? -1 : 0;
}

void stream_close(stream_buf *s) {
    pthread_mutex_lock(&s->mu);
    s->closed = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* A peer that closed its end shows as readable with recv() == 0. HTTP clients
 * send nothing more after the request, so any readable state without data
 * means the client left. */
int socket_peer_closed(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return 1;
    if (p.revents & POLLIN) {
        char c;
        ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0) return 1;
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 1;
    }
    return 0;
}

int stream_client_alive(stream_buf *s) {
    pthread_mutex_lock(&s->mu);
    int gone = s->client_gone;
    pthread_mutex_unlock(&s->mu);
    return !gone;
}

static int sse_write_json(stream_buf *s, const char *event, json_t *obj) {
    char *js = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(obj);
    if (!js) return -1;
    sbuf b = {0};
    if (event) { sbuf_adds(&b, "event: "); sbuf_adds(&b, event); sbuf_adds(&b, "\n"); }
    sbuf_adds(&b, "data: ");
    sbuf_adds(&b, js);
    sbuf_adds(&b, "\n\n");
    free(js);
    int rc = stream_write(s, b.p, b.n);
    sbuf_free(&b);
    return rc;
}

int sse_data(stream_buf *s, json_t *obj) { return sse_write_json(s, NULL, obj); }
int sse_event(stream_buf *s, const char *event, json_t *obj) { return sse_write_json(s, event, obj); }
int sse_raw(stream_buf *s, const char *text) { return stream_write(s, text, strlen(text)); }

/* ---- jobs ---- */

job *job_new(gen_request *req, const api_sink *sink, int fd) {
    job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->req = req;
    j->sink = sink;
    stream_init(&j->out, fd);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->t_queued = now_seconds();
    return j;
}

static void result_free(gen_result *r) {
    sbuf_free(&r->reasoning);
    sbuf_free(&r->content);
    sbuf_free(&r->raw_text);
    for (int i = 0; i < r->n_calls; i++) {
        free(r->calls[i].id);
        free(r->calls[i].name);
        free(r->calls[i].arguments);
    }
    free(r->calls);
    free(r->raw_dsml);
}

void job_unref(job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0) return;
    gen_request_free(j->req);
    result_free(&j->res);
    free(j->sink_state);
    free(j->body);
    stream_destroy(&j->out);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void job_mark_started(job *j) {
    pthread_mutex_lock(&j->mu);
    j->started = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void job_finish(job *j, int status, char *body) {
    pthread_mutex_lock(&j->mu);
    if (status) j->http_status = status;
    if (body) { free(j->body); j->body = body; }
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    stream_close(&j->out);
}
