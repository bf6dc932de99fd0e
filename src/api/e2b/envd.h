/*
 * envd, the daemon E2B runs in each sandbox (E2b-Sandbox-Port: 49983), over
 * libcorral, as an E2B sandbox that reports envdVersion 0.6.4 offers it:
 *
 *   GET /health                      204
 *   GET /files?path=&username=       the file's bytes (400 for a directory, 404 missing)
 *   POST /files?path=&username=      multipart/form-data uploads ('file' parts; a part's
 *                                    filename is its destination when path is absent), or
 *                                    application/octet-stream (the body is the file at
 *                                    path; Content-Encoding: gzip is inflated); its
 *                                    X-Metadata-KEY headers become the file's metadata
 *   /process.Process/...             Connect RPC: Start and Connect (server streams, also
 *                                    on a terminal), List, SendInput, SendSignal,
 *                                    CloseStdin, Update; StreamInput answers `unimplemented`
 *   /filesystem.Filesystem/...       Stat, ListDir, MakeDir, Move, Remove, WatchDir (a
 *                                    server stream), CreateWatcher, GetWatcherEvents,
 *                                    RemoveWatcher
 *
 * The Connect protocol is spoken with the JSON codec only: unary calls take
 * and return one JSON message (errors: {"code","message"} with Connect's HTTP
 * status), server streams are enveloped messages ending with an end-of-stream
 * envelope (errors there, with status 200). Relative paths start at
 * /home/user; everything runs as the sandbox's one user, 'user'.
 *
 * A process keeps running when the client of its Start stream goes away
 * (envd's semantics): its output is still drained, and Connect attaches to
 * it again, from then on. Connect-Timeout-Ms on Start is the process's
 * lifetime (it is killed and the stream ends with deadline_exceeded);
 * Keepalive-Ping-Interval (seconds, default 50) spaces keepalive events.
 * The contract: envd's spec (spec/envd/envd.yaml, process/process.proto and
 * filesystem/filesystem.proto of https://github.com/e2b-dev/E2B) and
 * docs/e2b.md.
 */
#ifndef CORRAL_API_ENVD_H
#define CORRAL_API_ENVD_H

#include "corral/corral.h"
#include "http/http.h"

struct audit_scope;
/* Answers one envd request for sb (which the caller keeps a reference to);
 * the processes it starts are recorded as scope says. */
struct http_response *envd_handle(corral_sandbox *sb, const struct http_request *req,
                                  const struct audit_scope *scope);
/* Drops what envd keeps for sb (CreateWatcher's watchers): called once it is killed. */
void envd_forget(corral_sandbox *sb);

#endif
