/*
 * execd, OpenSandbox's in-sandbox API (port 44772), over libcorral. corral
 * serve answers it for every sandbox of its OpenSandbox surface at the
 * endpoint the lifecycle API hands out (see opensandbox.h): the request's
 * path below that endpoint is what these handlers see ("/ping", "/code",
 * "/files/info", ...). Contract: OpenSandbox's execd spec
 * (specs/execd-api.yaml of https://github.com/alibaba/OpenSandbox) and
 * docs/opensandbox.md.
 *
 *   execd.c          /ping, /code/context(s), /code (streamed), /metrics(/watch)
 *   execd_files.c    /files/..., /directories/...
 *   execd_command.c  /command..., /session...
 *
 * Errors are execd's {"code": "...", "message": "..."} with codes such as
 * INVALID_REQUEST_BODY, MISSING_QUERY, FILE_NOT_FOUND, CONTEXT_NOT_FOUND,
 * NOT_SUPPORTED, RUNTIME_ERROR. Streams are text/event-stream with one
 * compact JSON event per line, each followed by an empty line.
 */
#ifndef CORRAL_API_EXECD_H
#define CORRAL_API_EXECD_H

#include <jansson.h>
#include <stdint.h>

#include "base/clock.h"
#include "corral/corral.h"
#include "http/http.h"

/* Answers one execd request for sb (the caller holds a reference); path is
 * the part below the sandbox's endpoint, without the query string. */
struct audit_scope;
/* Its executions (code and commands) are recorded as scope says. */
struct http_response *execd_handle(corral_sandbox *sb, const struct http_request *req,
                                   const char *path, const struct audit_scope *scope);
/* The parts in their own files: NULL when path is not theirs. */
struct http_response *execd_files_handle(corral_sandbox *sb, const struct http_request *req,
                                         const char *path);
struct http_response *execd_command_handle(corral_sandbox *sb, const struct http_request *req,
                                           const char *path, const struct audit_scope *scope);
/* POST /code without a language runs the code as a shell command: the same
 * stream as POST /command with {"command": command} (execd_command.c). */
struct http_response *execd_command_stream(corral_sandbox *sb, const char *command,
                                           const struct audit_scope *scope);
/* Starts argv (NULL-terminated) as the sandbox's entrypoint: a background
 * command of id EXECD_ENTRYPOINT_ID, whose status and output execd reports
 * as any other's (GET /command/entrypoint/status, .../logs). */
#define EXECD_ENTRYPOINT_ID "entrypoint"
int execd_start_entrypoint(corral_sandbox *sb, const char *const *argv, struct corral_error *err);
/* Drops what execd keeps for sb (commands and their output): called once it
 * is killed. */
void execd_forget(corral_sandbox *sb);
void execd_command_forget(corral_sandbox *sb);

/* {"code": code, "message": ...} with the HTTP status. */
struct http_response *execd_error(int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Maps a libcorral errno to execd's status and code (ENOENT: 404
 * FILE_NOT_FOUND, EINVAL...: 400 INVALID_REQUEST_BODY, ESRCH: 409
 * SANDBOX_NOT_RUNNING, EAGAIN (paused): 409, else 500 RUNTIME_ERROR). */
struct http_response *execd_fail(const struct corral_error *err);

/* Writes one event (taken): "timestamp" is added when absent; then the
 * compact JSON and an empty line. -EPIPE once the client is gone. */
int execd_send(struct http_stream *s, json_t *event);
/* The ping event streams carry every 3 s of silence; set on each stream. */
void execd_keepalive(struct http_stream *s);

#endif
