/*
 * The HTTP/1.1 syntax that the server (server.c) and the clients
 * (client.c, client_lean.c) share, read in place from the bytes received:
 * header lines, and the chunked transfer coding of a body.
 */
#ifndef CORRAL_HTTP_PARSE_H
#define CORRAL_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- header lines ---- */

/* A header line "Name: value" split at its first ':' (pointers into the
 * line): the name as it stands, the value without the blanks (spaces and
 * tabs) around it. */
struct http_field {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};

/* Splits line[0, len), a header line without its line end. 0 for a
 * well-formed field; 1 when its name is empty or has a blank at either end
 * (a server refuses such a request; a client may ignore the field); -1
 * when there is no ':'. */
int http_field_split(const char *line, size_t len, struct http_field *f);
/* Whether f is the header `name` (case-insensitive). */
bool http_field_is(const struct http_field *f, const char *name);

/* ---- the chunked transfer coding ---- */

#define HTTP_CHUNK_LINE_MAX 4096 /* a chunk-size line or a trailer line */

/* Where a chunked body is read up to; zeroed, it expects the first chunk's
 * size. */
struct http_chunks {
    int state;
    uint64_t left; /* bytes of the current chunk still to come */
};

enum http_chunk_step {
    HTTP_CHUNK_MORE, /* the bytes end inside a line: nothing was consumed */
    HTTP_CHUNK_SIZE, /* a chunk's size line: `left` is its size (0: the last) */
    HTTP_CHUNK_DATA, /* body bytes: the first *used of the bytes given */
    HTTP_CHUNK_SKIP, /* a chunk's line end, or a trailer line */
    HTTP_CHUNK_END,  /* the empty line after the trailers: the body is whole */
    HTTP_CHUNK_BAD,  /* malformed */
};

/* One step over the encoded bytes p[0, n): what was read, *used being how
 * many bytes it took. A size is hex digits (then an extension after ';',
 * or the line end); lines end in "\r\n" or "\n" and are at most
 * HTTP_CHUNK_LINE_MAX bytes. The caller bounds the body's size. */
enum http_chunk_step http_chunks_step(struct http_chunks *d, const char *p, size_t n, size_t *used);

#endif
