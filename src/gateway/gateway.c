/* The gateway object: configuration, model routing, stored responses. */
#include "corral/gateway.h"

#include <stdlib.h>

void corral_gateway_reply_free(struct corral_gateway_reply *r)
{
    if (!r)
        return;
    free(r->body);
    free(r->content_type);
    free(r->request_id);
    free(r->retry_after);
    r->body = r->content_type = r->request_id = r->retry_after = NULL;
}
