/* Placeholder until the files API lands: answers nothing. */
#include "api/execd.h"

struct http_response *execd_files_handle(corral_sandbox *sb, const struct http_request *req,
                                         const char *path)
{
    (void)sb;
    (void)req;
    (void)path;
    return NULL;
}
