/* Placeholder until the command API lands: answers nothing. */
#include "api/execd.h"

struct http_response *execd_command_handle(corral_sandbox *sb, const struct http_request *req,
                                           const char *path)
{
    (void)sb;
    (void)req;
    (void)path;
    return NULL;
}

struct http_response *execd_command_stream(corral_sandbox *sb, const char *command)
{
    (void)sb;
    (void)command;
    return execd_error(501, "NOT_SUPPORTED", "shell commands are not served yet");
}

void execd_command_forget(corral_sandbox *sb)
{
    (void)sb;
}
