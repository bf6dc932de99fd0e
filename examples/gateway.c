/*
 * libcorral's gateway in process: one Responses request with OpenAI's code
 * interpreter, answered by the model configured in a gateway YAML file
 * while the model's code runs in a local corral sandbox.
 *
 *   gateway_example CONFIG.yaml MODEL "What is the product of the first 6 primes?"
 *   gateway_example --stream CONFIG.yaml MODEL "..."
 *
 * Without --stream it prints the Response object (JSON); with --stream the
 * server-sent events as they come.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "corral/gateway.h"

static int print_bytes(void *userdata, const char *data, size_t len)
{
    fwrite(data, 1, len, stdout);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    int arg = 1;
    int stream = argc > 1 && !strcmp(argv[1], "--stream");
    arg += stream;
    if (argc - arg != 3) {
        fprintf(stderr, "usage: %s [--stream] CONFIG.yaml MODEL PROMPT\n", argv[0]);
        return 2;
    }
    struct corral_error err;
    corral_gateway *gw;
    struct corral_gateway_options opts = {.config_path = argv[arg]};
    if (corral_gateway_new(&opts, &gw, &err) < 0) {
        fprintf(stderr, "gateway: %s\n", err.message);
        return 1;
    }
    json_t *req =
        json_pack("{s:s, s:s, s:[{s:s, s:{s:s}}], s:[s], s:b}", "model", argv[arg + 1], "input",
                  argv[arg + 2], "tools", "type", "code_interpreter", "container", "type", "auto",
                  "include", "code_interpreter_call.outputs", "stream", stream);
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    struct corral_gateway_events ev = {.on_bytes = print_bytes};
    struct corral_gateway_reply reply;
    corral_gateway_call(gw, CORRAL_GATEWAY_RESPONSES, body, strlen(body), NULL, &ev, &reply);
    if (!reply.streamed)
        printf("%d %s\n", reply.status, reply.body ? reply.body : "");
    int ok = reply.status == 200;
    corral_gateway_reply_free(&reply);
    free(body);
    corral_gateway_free(gw);
    return ok ? 0 : 1;
}
