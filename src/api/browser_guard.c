/*
 * A listener without keys serves this machine's own clients only: the
 * Origin and Host checks against cross-origin pages and DNS rebinding
 * (browser_guard.h).
 */
#include "api/browser_guard.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "api/routes.h"

/* Whether the bracketed IPv6 address at name (len bytes) is ::1, or an
 * IPv4-mapped address of 127.0.0.0/8. */
static bool loopback_ipv6(const char *name, size_t len)
{
    char text[INET6_ADDRSTRLEN];
    struct in6_addr a;
    if (len < 3 || name[0] != '[' || name[len - 1] != ']' || len - 2 >= sizeof(text))
        return false;
    memcpy(text, name + 1, len - 2);
    text[len - 2] = '\0';
    if (inet_pton(AF_INET6, text, &a) != 1)
        return false;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
}

bool browser_guard_loopback_name(const char *name, size_t len)
{
    static const char LOCALHOST[] = "localhost";
    const size_t n = sizeof(LOCALHOST) - 1;
    char host[256];
    if (len && name[len - 1] == '.') /* a fully qualified name: localhost. */
        len--;
    if (!len || len >= sizeof(host))
        return false;
    if (name[0] == '[')
        return loopback_ipv6(name, len);
    memcpy(host, name, len);
    host[len] = '\0';
    struct in_addr a;
    if (inet_pton(AF_INET, host, &a) == 1)
        return (ntohl(a.s_addr) >> 24) == 127;
    /* localhost, and names under it (RFC 6761: always loopback; browsers
     * resolve them so themselves) */
    return (len == n && !strcasecmp(host, LOCALHOST)) ||
           (len > n + 1 && host[len - n - 1] == '.' && !strcasecmp(host + len - n, LOCALHOST));
}

/* The length of the host in text (host[:port], the host perhaps an IPv6
 * address in brackets), once a port, if any, is only digits; else 0. */
static size_t host_part(const char *text)
{
    size_t len = strlen(text);
    const char *colon = text[0] == '[' ? strchr(text, ']') : strchr(text, ':');
    if (text[0] == '[') {
        if (!colon)
            return 0;
        colon = colon[1] == ':' ? colon + 1 : colon[1] ? NULL : text + len;
        if (!colon)
            return 0;
    } else if (!colon) {
        colon = text + len;
    }
    if (*colon && (!colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1)))
        return 0;
    return (size_t)(colon - text);
}

bool browser_guard_loopback_host(const char *host)
{
    size_t n = host_part(host);
    return n && browser_guard_loopback_name(host, n);
}

bool browser_guard_loopback_origin(const char *origin)
{
    const char *rest = !strncasecmp(origin, "http://", 7)    ? origin + 7
                       : !strncasecmp(origin, "https://", 8) ? origin + 8
                                                             : NULL;
    return rest && !strchr(rest, '/') && browser_guard_loopback_host(rest);
}

bool browser_guard_origin_allowed(const char *origin, const char *host)
{
    if (!browser_guard_loopback_origin(origin))
        return false;
    const char *authority = strstr(origin, "://") + 3;
    if (!api_e2b_sandbox_host(authority, NULL, NULL))
        return true;
    /* a sandbox's page: to its own origin, or another port of its sandbox
     * (<id>.<domain> alike) */
    return host && (!strcasecmp(authority, host) ||
                    (api_e2b_sandbox_host(host, NULL, NULL) &&
                     !strcasecmp(strchr(authority, '-'), strchr(host, '-'))));
}

/* How a listener that refuses a request says so: the names it answers. */
#define LOOPBACK_NAMES "localhost, 127.0.0.1 or [::1]"

const char *browser_guard_check(const struct browser_guard *g, const struct http_request *req,
                                char *buf, size_t len)
{
    const char *origin = http_header(req, "Origin");
    const char *host = http_header(req, "Host");
    /* the Host first: a rebound page's Origin is its Host, which says more */
    if (host && !browser_guard_loopback_host(host) &&
        !(g->sandbox_hosts && api_e2b_sandbox_host(host, NULL, NULL))) {
        snprintf(buf, len,
                 "this server has no keys, so it answers only requests addressed to this "
                 "machine (" LOOPBACK_NAMES "), not to %.100s (its Host), lest a site's name "
                 "re-pointed at this machine (DNS rebinding) use it; address it as 127.0.0.1, "
                 "or give the server keys (%s) and send one",
                 host, g->keys);
        return buf;
    }
    if (origin && !browser_guard_origin_allowed(origin, host)) {
        snprintf(buf, len,
                 "this server has no keys, so only this machine's own clients may use it: a web "
                 "page of %.100s (its Origin) may not, lest any site the machine's browser opens "
                 "use it; serve pages from " LOOPBACK_NAMES ", or give the server keys (%s) and "
                 "send one",
                 origin, g->keys);
        return buf;
    }
    return NULL;
}
