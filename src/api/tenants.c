/* API keys as tenants; see tenants.h. */
#include "api/tenants.h"

#include <errno.h>

#include "base/log.h"
#include "base/clock.h"
#include "base/util.h"

int tenants_init(struct tenants *t, const char *const *keys, const char *const *admin_keys,
                 unsigned max_per_key, struct corral_error *err)
{
    t->keys = corral_strv_dup(keys);
    t->admin_keys = corral_strv_dup(admin_keys);
    t->max_per_key = max_per_key;
    if (!t->keys || !t->admin_keys) {
        tenants_free(t);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    return 0;
}

void tenants_free(struct tenants *t)
{
    corral_strv_free(t->keys);
    corral_strv_free(t->admin_keys);
    t->keys = t->admin_keys = NULL;
}

bool tenants_keyed(const struct tenants *t)
{
    return (t->keys && t->keys[0]) || (t->admin_keys && t->admin_keys[0]);
}

int tenant_of(const struct tenants *t, const char *given)
{
    if (!tenants_keyed(t))
        return TENANT_OPEN;
    if (!given || !*given)
        return TENANT_REFUSED;
    char label[CORRAL_KEY_LABEL_MAX];
    corral_log_key_label(given, label, sizeof(label));
    corral_log_context_key(label); /* the request's log lines name the key, not its text */
    /* Every key is compared, so that the time taken says nothing of which. */
    int found = TENANT_REFUSED;
    for (int i = 0; t->admin_keys[i]; i++)
        if (corral_secret_equal(given, t->admin_keys[i]))
            found = TENANT_ADMIN;
    for (int i = 0; t->keys[i]; i++)
        if (corral_secret_equal(given, t->keys[i]) && found == TENANT_REFUSED)
            found = i;
    return found;
}

bool tenant_sees(int caller, int owner)
{
    return caller == TENANT_ADMIN || caller == TENANT_OPEN || caller == owner;
}

/* The owner a tenant's sandboxes are charged to: admins, and a server
 * without keys, none (no ceiling). Every API of the server has the same
 * keys, so a key is the same owner on each. */
static unsigned owner_of(int caller)
{
    return caller >= 0 ? (unsigned)caller + 1 : 0;
}

void tenant_charge(const struct tenants *t, int caller, const struct http_request *req,
                   struct corral_sandbox_options *so)
{
    so->owner = owner_of(caller);
    so->owner_max = caller >= 0 ? t->max_per_key : 0;
    const char *elsewhere = http_header(req, TENANT_ELSEWHERE_HEADER);
    uint64_t n;
    struct corral_error ignored;
    so->owner_elsewhere = 0;
    if (so->owner_max && elsewhere) /* a number too large, or not one: the ceiling */
        so->owner_elsewhere = corral_parse_uint(elsewhere, 0, so->owner_max - 1, &n, &ignored) == 0
                                  ? (unsigned)n
                                  : so->owner_max;
}

struct http_response *tenant_mark(struct http_response *resp, const struct corral_error *err)
{
    if (resp && err->code == EUSERS)
        http_add_header(resp, TENANT_CEILING_HEADER, "key");
    return resp;
}

struct http_response *tenant_held(const struct tenants *t, int caller)
{
    unsigned owner = owner_of(caller);
    return http_json(200, json_pack("{s:I, s:I}", "held",
                                    (json_int_t)(owner ? corral_owner_holds(owner) : 0), "max",
                                    (json_int_t)(owner ? t->max_per_key : 0)));
}

int tenant_full(const struct tenants *t, struct corral_error *err)
{
    return corral_fail(err, EUSERS,
                       "this API key holds its most sandboxes at once (%u; corral serve "
                       "--max-sandboxes-per-key): kill one first",
                       t->max_per_key);
}
