/* HTTP/1.1 chunked framing, read one byte range at a time by a state machine that finds the
 * chunks' boundaries and nothing else (relay.c: what the frontend sends, relayed as it framed it).
 * Header-only: relay.c is the one file that includes it. */

#ifndef CHUNKED_H
#define CHUNKED_H

#include <stdint.h>
#include <string.h>

#define MAX_LINE 1024          /* a chunk-size line, extensions included */
#define MAX_TRAILERS (64 * 1024)

enum why { WHY_NONE = 0, WHY_LONG_LINE = 1, WHY_SIZE = 2, WHY_CRLF = 3, WHY_TRAILERS = 4, WHY_BIG = 5 };
enum state { S_SIZE, S_EXT, S_SIZE_LF, S_DATA, S_DATA_CR, S_DATA_LF, S_TRAILER, S_TRAILER_LINE,
             S_TRAILER_LF, S_END_LF, S_DONE };

/* Where a reply's framing is. Starts as {.st = S_SIZE, .reusable = 1}. */
struct chunked {
    enum state st;
    uint64_t size;            /* chunk size being read, then data left of it */
    int line;                 /* length of the size line so far */
    int trailers;             /* bytes of trailers so far */
    int reusable;             /* 0: bytes came after the reply (the connection is not reused) */
    uint8_t cur[2], tail[2];  /* last two data bytes of the chunk being read / of the last whole one */
    int cur_len, tail_len;
};

static inline int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Within a chunk-size line (extensions included), before its CRLF is whole. */
static inline int chunked_in_size_line(const struct chunked *c) {
    return c->st == S_SIZE || c->st == S_EXT || c->st == S_SIZE_LF;
}

/* Where the bytes to write end when the framing breaks at i: the last whole chunk, or the
 * data of the one being read (its end then sealed by the loop). */
static long chunked_broken(const struct chunked *s, long i, long line_start, long last) {
    if (chunked_in_size_line(s)) return line_start >= 0 ? line_start : 0;
    if (s->st >= S_TRAILER) return last >= 0 ? last : 0;
    return i;
}

#define FAIL(w) do { *why = (w); return chunked_broken(s, i, line_start, *last); } while (0)

/* Read the frontend's bytes in p[from, n) (p[0, from) is a held size line); returns where the
 * bytes to write end (when the framing breaks, *why says how: nothing after it is written),
 * and sets *last to where the last chunk's size line starts (-1 if not in these bytes). */
static long chunked_parse(struct chunked *s, const unsigned char *p, long from, long n, long *last, enum why *why) {
    long i = from, line_start = from ? 0 : -1;
    *last = -1;
    while (i < n) {
        unsigned char c = p[i];
        switch (s->st) {
        case S_SIZE: {
            if (s->line == 0) line_start = i;
            int h = hexval(c);
            if (h >= 0) {
                if (s->size >> 56) FAIL(WHY_BIG);
                s->size = (s->size << 4) | (uint64_t)h;
            } else if ((c == ';' || c == ' ' || c == '\t') && s->line > 0) {  /* an extension, or BWS before one */
                s->st = S_EXT;
            } else if (c == '\r' && s->line > 0) {
                s->st = S_SIZE_LF;
            } else FAIL(WHY_SIZE);
            if (++s->line > MAX_LINE) FAIL(WHY_LONG_LINE);
            i++;
            break;
        }
        case S_EXT:
            if (c == '\r') s->st = S_SIZE_LF;
            if (++s->line > MAX_LINE) FAIL(WHY_LONG_LINE);
            i++;
            break;
        case S_SIZE_LF:
            if (c != '\n') FAIL(WHY_SIZE);
            i++;
            s->line = 0;
            if (s->size == 0) {
                *last = line_start;
                s->st = S_TRAILER;
            } else {
                s->st = S_DATA;
                s->cur_len = 0;
            }
            line_start = -1;
            break;
        case S_DATA: {
            long take = n - i;
            if ((uint64_t)take > s->size) take = (long)s->size;
            if (take >= 2) {
                memcpy(s->cur, p + i + take - 2, 2);
                s->cur_len = 2;
            } else {  /* take == 1 */
                s->cur[0] = s->cur[1];
                s->cur[1] = p[i];
                if (s->cur_len < 2) s->cur_len++;
            }
            i += take;
            s->size -= (uint64_t)take;
            if (s->size == 0) s->st = S_DATA_CR;
            break;
        }
        case S_DATA_CR:
            if (c != '\r') FAIL(WHY_CRLF);
            s->st = S_DATA_LF;
            i++;
            break;
        case S_DATA_LF:
            if (c != '\n') FAIL(WHY_CRLF);
            s->st = S_SIZE;
            if (s->cur_len == 2) memcpy(s->tail, s->cur, 2);
            else if (s->cur_len == 1) { s->tail[0] = s->cur[1]; }
            s->tail_len = s->cur_len;
            i++;
            break;
        case S_TRAILER:  /* at the start of a trailer line */
            s->st = c == '\r' ? S_END_LF : S_TRAILER_LINE;
            goto trailer_byte;
        case S_TRAILER_LINE:
            if (c == '\r') s->st = S_TRAILER_LF;
            goto trailer_byte;
        case S_TRAILER_LF:
            s->st = c == '\n' ? S_TRAILER : S_TRAILER_LINE;
            goto trailer_byte;
        case S_END_LF:
            if (c != '\n') FAIL(WHY_TRAILERS);
            s->st = S_DONE;
            i++;
            if (i < n) s->reusable = 0;  /* bytes after the reply: the connection is not reused */
            return *last >= 0 ? *last : 0;
        trailer_byte:
            if (++s->trailers > MAX_TRAILERS) FAIL(WHY_TRAILERS);
            i++;
            break;
        case S_DONE:
            s->reusable = 0;
            return n;
        }
    }
    if (s->st >= S_TRAILER) return *last >= 0 ? *last : 0;  /* nothing after the last chunk is relayed */
    if (s->st == S_SIZE && s->line == 0) return n;
    if (chunked_in_size_line(s)) return line_start >= 0 ? line_start : 0;
    return n;
}

#undef FAIL

#endif
