/* The streamed body of a frontend's reply, relayed to the client outside Python: what
 * playground/native.py loads (ctypes) and playground/wire.py hands a stream to once its head
 * and first bytes have gone out.
 *
 * One thread per process (started by native.py, which calls relay_run through ctypes, so it
 * never holds the GIL) waits on one epoll set for every stream handed to it. A stream is a pair
 * of sockets, dup()ed here from the event loop's (the loop no longer reads the frontend's
 * meanwhile, and writes nothing to the client): what the frontend sends is written to the
 * client as it arrives, as the frontend framed it (HTTP/1.1 chunks), read by a state machine
 * that finds the chunks' boundaries and nothing else (chunked.h). A chunk-size line not yet
 * whole is held back, so that the client's framing is whole whenever the stream stops. The
 * frontend's last chunk (size 0) and its trailers are not relayed: the client's last chunk is
 * written in their place, with the bytes before it.
 *
 * A slow client: what it does not take is kept, and reading from the frontend stops until it
 * has taken it (the frontend's socket buffers then fill: TCP's own back-pressure). A frontend
 * silent for the stream's idle timeout ends it (never while the client is the one behind).
 *
 * When a stream ends (its last chunk, an error, the client gone, or cancelled by the loop), its
 * sockets leave the epoll set, their duplicates are closed and one fixed-size record goes to
 * the notification pipe, which the event loop reads (native.py). The loop's own file
 * descriptors stay open throughout: nothing here closes a connection, a cancel shuts the
 * frontend's socket down (the frontend then cancels the request). */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "chunked.h"

#define MAX_STREAMS 4096
#define READ_SIZE (64 * 1024)

enum status { DONE = 0, UPSTREAM_CLOSED = 1, FRAMING = 2, IDLE = 3, CLIENT_GONE = 4, CANCELLED = 5 };

/* What the loop reads from the pipe: 32 bytes, little-endian on the machines this runs on. */
struct record {
    int32_t id;
    int32_t status;
    int64_t bytes;     /* bytes written to the client */
    int32_t skip;      /* bytes left of the chunk being relayed (its data and CRLF) when it stopped */
    uint8_t why;       /* FRAMING: what was wrong */
    uint8_t flags;     /* 1: the client's last chunk was written, 2: the connection may be reused,
                          4: stopped in the last chunk's trailers */
    uint8_t tail_len;  /* of tail: the last bytes (at most 2) of the last whole chunk's data */
    uint8_t pad;
    uint8_t tail[2];
    uint8_t pad2[6];
};

struct stream {
    int used, up, cl, idle_ms, end, cancelled, waiting_client, up_registered, pos;
    uint32_t gen;
    struct chunked c;      /* where the frontend's framing is */
    int ended;
    char held[MAX_LINE + 8];  /* a size line not yet whole: written with what follows it */
    int held_len;
    char *out;             /* what the client has not taken yet */
    size_t out_len, out_at;
    int64_t bytes;
    int64_t last_ms;
};

struct relay {
    int ep, wake, notify_r, notify_w;
    pthread_mutex_t lock;
    struct stream s[MAX_STREAMS];
    int free_list[MAX_STREAMS], nfree;  /* indices not in use */
    int act[MAX_STREAMS], active;       /* indices in use (s->pos: where) */
    int rescan;                         /* a stream came, was cancelled or resumed: look again */
    struct record done[MAX_STREAMS];    /* records of the streams ended in this wake-up, written */
    int ndone;                          /* to the pipe once the lock is let go (the thread's own) */
    char buf[MAX_LINE + 8 + READ_SIZE + 8];
};

static int64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

struct relay *relay_new(void) {
    struct relay *r = calloc(1, sizeof *r);
    int p[2];
    if (!r) return NULL;
    r->ep = epoll_create1(EPOLL_CLOEXEC);
    r->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->ep < 0 || r->wake < 0 || pipe2(p, O_CLOEXEC) < 0) {
        free(r);
        return NULL;
    }
    r->notify_r = p[0];
    r->notify_w = p[1];  /* blocking: a full pipe waits for the loop rather than lose a record */
    fcntl(r->notify_r, F_SETFL, O_NONBLOCK);
    /* Room for many records (1 MiB: 32768), so that the thread seldom waits for the loop to read
     * them; it writes them without the lock, so a wait never stops the loop. */
    fcntl(r->notify_w, F_SETPIPE_SZ, 1 << 20);
    pthread_mutex_init(&r->lock, NULL);
    for (int i = 0; i < MAX_STREAMS; i++) r->free_list[i] = MAX_STREAMS - 1 - i;
    r->nfree = MAX_STREAMS;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
    epoll_ctl(r->ep, EPOLL_CTL_ADD, r->wake, &ev);
    return r;
}

int relay_notify_fd(struct relay *r) { return r->notify_r; }

static void wake(struct relay *r) {
    uint64_t one = 1;
    ssize_t w = write(r->wake, &one, sizeof one);
    (void)w;
}

static uint64_t key(int index, int client) { return ((uint64_t)index << 1) | (uint64_t)client; }

static int stream_id(struct relay *r, int index) { return (int)((r->s[index].gen & 0x7fff) << 16 | index); }

/* Hand a stream to the relay: up, the frontend's socket, at a chunk boundary of its reply; cl,
 * the client's, with nothing of ours left unwritten; idle_ms: its idle timeout (0: none); end:
 * write the client's last chunk (else the reply is left for the caller to end). Returns the
 * stream's id, or -errno. */
int relay_add(struct relay *r, int up, int cl, int idle_ms, int end) {
    pthread_mutex_lock(&r->lock);
    if (r->nfree == 0) { pthread_mutex_unlock(&r->lock); return -EBUSY; }
    int index = r->free_list[r->nfree - 1];
    struct stream *s = &r->s[index];
    int u = fcntl(up, F_DUPFD_CLOEXEC, 0), c = fcntl(cl, F_DUPFD_CLOEXEC, 0);
    if (u < 0 || c < 0) {
        int e = errno;
        if (u >= 0) close(u);
        if (c >= 0) close(c);
        pthread_mutex_unlock(&r->lock);
        return -e;
    }
    uint32_t gen = s->gen + 1;
    memset(s, 0, sizeof *s);
    s->gen = gen;
    s->used = 1;
    s->up = u;
    s->cl = c;
    s->idle_ms = idle_ms;
    s->end = end;
    s->c.st = S_SIZE;
    s->c.reusable = 1;
    s->last_ms = now_ms();
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = key(index, 0)};
    if (epoll_ctl(r->ep, EPOLL_CTL_ADD, u, &ev) < 0) {
        int e = errno;
        close(u);
        close(c);
        s->used = 0;
        pthread_mutex_unlock(&r->lock);
        return -e;
    }
    s->up_registered = 1;
    r->nfree--;
    s->pos = r->active;
    r->act[r->active++] = index;
    r->rescan = 1;
    int id = stream_id(r, index);
    pthread_mutex_unlock(&r->lock);
    wake(r);  /* the thread takes the new idle deadline into account */
    return id;
}

/* Stop a stream (its id from relay_add): the frontend's socket is shut down, and the stream
 * ends with CANCELLED unless it had ended already. */
void relay_cancel(struct relay *r, int id) {
    int index = id & 0xffff;
    if (index < 0 || index >= MAX_STREAMS) return;
    pthread_mutex_lock(&r->lock);
    struct stream *s = &r->s[index];
    if (s->used && stream_id(r, index) == id && !s->cancelled) {
        __atomic_store_n(&s->cancelled, 1, __ATOMIC_RELEASE);
        shutdown(s->up, SHUT_RDWR);  /* the frontend sees the connection end, and cancels */
        r->rescan = 1;  /* the thread ends it, even one waiting on its client */
        pthread_mutex_unlock(&r->lock);
        wake(r);
        return;
    }
    pthread_mutex_unlock(&r->lock);
}

static void finish(struct relay *r, int index, enum status status, enum why why) {
    struct stream *s = &r->s[index];
    struct record rec;  /* one per stream ended in this wake-up: ndone < MAX_STREAMS */
    memset(&rec, 0, sizeof rec);
    if (s->cancelled) status = CANCELLED;
    rec.id = stream_id(r, index);
    rec.status = status;
    rec.bytes = s->bytes;
    rec.why = (uint8_t)why;
    switch (s->c.st) {
    case S_DATA: rec.skip = s->c.size + 2 > INT32_MAX ? INT32_MAX : (int32_t)(s->c.size + 2); break;
    case S_DATA_CR: rec.skip = 2; break;
    case S_DATA_LF: rec.skip = 1; break;
    default: rec.skip = 0;
    }
    rec.flags = (uint8_t)((s->ended ? 1 : 0) | (status == DONE && s->c.reusable ? 2 : 0) |
                          (s->c.st >= S_TRAILER && s->c.st <= S_END_LF ? 4 : 0));
    rec.tail_len = (uint8_t)s->c.tail_len;
    memcpy(rec.tail, s->c.tail, 2);
    if (s->up_registered) epoll_ctl(r->ep, EPOLL_CTL_DEL, s->up, NULL);
    if (s->waiting_client) epoll_ctl(r->ep, EPOLL_CTL_DEL, s->cl, NULL);
    close(s->up);
    close(s->cl);
    free(s->out);
    s->out = NULL;
    s->used = 0;
    int moved = r->act[--r->active];
    r->act[s->pos] = moved;
    r->s[moved].pos = s->pos;
    r->free_list[r->nfree++] = index;
    r->done[r->ndone++] = rec;
}

/* Tell the loop how the streams ended in this wake-up: called without the lock, so that a
 * full pipe waits for the loop while the loop can still add and cancel streams. A slot freed
 * meanwhile may be taken by a new stream: its id differs (the generation). */
static void tell(struct relay *r) {
    const char *p = (const char *)r->done;
    size_t left = sizeof r->done[0] * (size_t)r->ndone;
    r->ndone = 0;
    while (left) {
        ssize_t w = write(r->notify_w, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            return;  /* the loop has gone (the process is ending) */
        }
        p += w;
        left -= (size_t)w;
    }
}

/* Write what the client has not taken; 1 when all of it went, 0 when it must wait, -1 if gone. */
static int flush_client(struct stream *s) {
    while (s->out_at < s->out_len) {
        if (__atomic_load_n(&s->cancelled, __ATOMIC_ACQUIRE)) return -1;
        ssize_t w = send(s->cl, s->out + s->out_at, s->out_len - s->out_at, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            return -1;
        }
        s->out_at += (size_t)w;
        s->bytes += w;
    }
    s->out_len = s->out_at = 0;
    return 1;
}

/* Write data to the client, keeping what it does not take (and then stop reading the frontend
 * until it has). 0 on success (written or kept), -1 if the client is gone. */
static int to_client(struct relay *r, int index, const char *data, size_t len) {
    struct stream *s = &r->s[index];
    size_t at = 0;
    while (at < len) {
        if (__atomic_load_n(&s->cancelled, __ATOMIC_ACQUIRE)) return -1;
        ssize_t w = send(s->cl, data + at, len - at, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            return -1;
        }
        at += (size_t)w;
        s->bytes += w;
    }
    if (at == len) return 0;
    s->out = malloc(len - at);
    if (!s->out) return -1;
    memcpy(s->out, data + at, len - at);
    s->out_len = len - at;
    s->out_at = 0;
    epoll_ctl(r->ep, EPOLL_CTL_DEL, s->up, NULL);  /* stop reading the frontend (not even its hang-up) */
    s->up_registered = 0;
    struct epoll_event ev = {.events = EPOLLOUT, .data.u64 = key(index, 1)};
    if (epoll_ctl(r->ep, EPOLL_CTL_ADD, s->cl, &ev) < 0) return -1;
    s->waiting_client = 1;
    return 0;
}

static void on_frontend(struct relay *r, int index) {
    struct stream *s = &r->s[index];
    char *buf = r->buf;
    long held = s->held_len;
    memcpy(buf, s->held, (size_t)held);
    ssize_t got;
    do {
        got = recv(s->up, buf + held, READ_SIZE, 0);
    } while (got < 0 && errno == EINTR);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (got <= 0) {
        finish(r, index, UPSTREAM_CLOSED, WHY_NONE);
        return;
    }
    s->last_ms = now_ms();
    long n = held + got, last;
    enum why why = WHY_NONE;
    long cut = chunked_parse(&s->c, (unsigned char *)buf, held, n, &last, &why);
    long write_len = cut;
    if (last >= 0 && s->end) {  /* the client's last chunk in place of the frontend's */
        memcpy(buf + last, "0\r\n\r\n", 5);
        write_len = last + 5;
        s->ended = 1;
    }
    /* A size line not yet whole is held back. */
    s->held_len = 0;
    if (why == WHY_NONE && chunked_in_size_line(&s->c)) {
        if (s->c.line > 0 && cut < n) {
            s->held_len = (int)(n - cut);
            memmove(s->held, buf + cut, (size_t)s->held_len);
        }
    }
    if (write_len > 0 && to_client(r, index, buf, (size_t)write_len) < 0) {
        finish(r, index, CLIENT_GONE, WHY_NONE);
        return;
    }
    if (why != WHY_NONE) finish(r, index, FRAMING, why);  /* once what came before went out (or was kept) */
    else if (s->c.st == S_DONE && !s->waiting_client) finish(r, index, DONE, WHY_NONE);
}

static void on_client_writable(struct relay *r, int index) {
    struct stream *s = &r->s[index];
    int ok = flush_client(s);
    if (ok < 0) {
        finish(r, index, CLIENT_GONE, WHY_NONE);
        return;
    }
    if (ok == 0) return;
    epoll_ctl(r->ep, EPOLL_CTL_DEL, s->cl, NULL);
    s->waiting_client = 0;
    free(s->out);
    s->out = NULL;
    if (s->c.st == S_DONE) {
        finish(r, index, DONE, WHY_NONE);
        return;
    }
    s->last_ms = now_ms();  /* the wait was the client's, not the frontend's */
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = key(index, 0)};
    if (epoll_ctl(r->ep, EPOLL_CTL_ADD, s->up, &ev) < 0) {
        finish(r, index, UPSTREAM_CLOSED, WHY_NONE);
        return;
    }
    s->up_registered = 1;
    r->rescan = 1;
}

/* End the streams cancelled or silent for their idle timeout; returns the earliest idle
 * deadline of the others (a lower bound: bytes only move deadlines later). */
static int64_t scan(struct relay *r, int64_t now) {
    int64_t deadline = INT64_MAX;
    for (int k = r->active - 1; k >= 0; k--) {  /* finish() moves the last one into k */
        int i = r->act[k];
        struct stream *s = &r->s[i];
        if (s->cancelled) {
            finish(r, i, CANCELLED, WHY_NONE);
            continue;
        }
        if (s->waiting_client || s->idle_ms <= 0) continue;
        int64_t at = s->last_ms + s->idle_ms;
        if (at <= now) {
            finish(r, i, IDLE, WHY_NONE);
            continue;
        }
        if (at < deadline) deadline = at;
    }
    return deadline;
}

/* The relay's thread: never returns. */
void relay_run(struct relay *r) {
    struct epoll_event events[64];
    int64_t deadline = INT64_MAX;
    for (;;) {
        int timeout = -1;
        if (deadline != INT64_MAX) {
            int64_t left = deadline - now_ms();
            timeout = left <= 0 ? 0 : (int)left;
        }
        int n = epoll_wait(r->ep, events, 64, timeout);
        if (n < 0 && errno != EINTR) return;
        pthread_mutex_lock(&r->lock);
        for (int k = 0; k < n; k++) {
            uint64_t u = events[k].data.u64;
            if (u == UINT64_MAX) {
                uint64_t v;
                ssize_t got = read(r->wake, &v, sizeof v);
                (void)got;
                continue;
            }
            int index = (int)(u >> 1);
            if (index >= MAX_STREAMS || !r->s[index].used) continue;
            if (u & 1) {
                if (r->s[index].waiting_client) on_client_writable(r, index);
            } else if (!r->s[index].waiting_client) {
                on_frontend(r, index);
            }
        }
        if (r->rescan || deadline != INT64_MAX) {
            int64_t now = now_ms();
            if (r->rescan || now >= deadline) {
                r->rescan = 0;
                deadline = scan(r, now);
            }
        }
        pthread_mutex_unlock(&r->lock);
        if (r->ndone) tell(r);
    }
}

/* How many streams wait for their client to take what it was sent (reading from their
 * frontend stopped meanwhile). */
int relay_waiting(struct relay *r) {
    int n = 0;
    pthread_mutex_lock(&r->lock);
    for (int k = 0; k < r->active; k++) n += r->s[r->act[k]].waiting_client;
    pthread_mutex_unlock(&r->lock);
    return n;
}

/* In a child after fork(): the thread did not come along; close what the parent's streams
 * held here, so that their sockets close when the parent closes them. */
void relay_forget(struct relay *r) {
    for (int k = 0; k < r->active; k++) {
        close(r->s[r->act[k]].up);
        close(r->s[r->act[k]].cl);
    }
    close(r->ep);
    close(r->wake);
    close(r->notify_r);
    close(r->notify_w);
}
