/* The network of a provider's sandbox: the tool's narrowed by the
 * container's OpenAI network_policy (src/providers/provider_network.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/provider.h"

/* "+a -b default:deny" for a network, "off", "internet". */
static void describe(const struct corral_network *n, char *buf, size_t len)
{
    if (n->mode != CORRAL_NETWORK_POLICY) {
        snprintf(buf, len, "%s", n->mode == CORRAL_NETWORK_OFF ? "off" : "internet");
        return;
    }
    size_t used = 0;
    for (size_t i = 0; i < n->n_rules; i++)
        used += (size_t)snprintf(buf + used, len - used, "%c%s ", n->rules[i].allow ? '+' : '-',
                                 n->rules[i].target);
    snprintf(buf + used, len - used, "default:%s", n->default_allow ? "allow" : "deny");
}

static void expect(const struct gateway_sandbox_tool *tool, const char *policy_json,
                   const char *want)
{
    json_error_t je;
    json_t *policy = policy_json ? json_loads(policy_json, 0, &je) : NULL;
    struct provider_network net;
    struct corral_error err = {0};
    int rc = provider_network_effective(tool, policy, &net, &err);
    json_decref(policy);
    if (rc < 0)
        fail_msg("provider_network_effective: %s", err.message);
    char got[1024];
    describe(&net.net, got, sizeof(got));
    provider_network_free(&net);
    if (strcmp(got, want))
        fail_msg("with %s: got \"%s\", want \"%s\"", policy_json ? policy_json : "no policy", got,
                 want);
}

#define ALLOWLIST(...) "{\"type\":\"allowlist\",\"allowed_domains\":[" __VA_ARGS__ "]}"

static void local_tools(void **state)
{
    struct gateway_sandbox_tool off = {.name = "off", .provider = "local"};
    struct gateway_sandbox_tool net = {.name = "net", .provider = "local"};
    net.network.mode = CORRAL_NETWORK_INTERNET;
    static const struct corral_network_rule rules[] = {
        {false, "10.0.0.0/8"},         {true, "pypi.org"},  {false, "bad.example.com"},
        {true, "*.example.com"},       {true, "192.0.2.7"}, {true, "api.other.org"},
        {false, "*.secret.other.org"},
    };
    struct gateway_sandbox_tool pol = {.name = "pol", .provider = "local"};
    pol.network = (struct corral_network){CORRAL_NETWORK_POLICY, rules, 7, false};
    struct gateway_sandbox_tool open = {.name = "open", .provider = "local"};
    static const struct corral_network_rule deny_one[] = {{false, "evil.org"}};
    open.network = (struct corral_network){CORRAL_NETWORK_POLICY, deny_one, 1, true};

    /* No container policy: the tool's. */
    expect(&off, NULL, "off");
    expect(&net, NULL, "internet");
    expect(&pol, NULL,
           "-10.0.0.0/8 +pypi.org -bad.example.com +*.example.com +192.0.2.7 +api.other.org "
           "-*.secret.other.org default:deny");
    expect(NULL, NULL, "off");
    /* disabled: off, whatever the tool. */
    expect(&net, "{\"type\":\"disabled\"}", "off");
    expect(&pol, "{\"type\":\"disabled\"}", "off");
    /* The tool off: off, whatever the container. */
    expect(&off, ALLOWLIST("\"pypi.org\""), "off");
    /* Internet and an allowlist: the allowlist. */
    expect(&net, ALLOWLIST("\"pypi.org\", \"*.pythonhosted.org\""),
           "+pypi.org +*.pythonhosted.org default:deny");
    /* Both policies: the tool's denials first, then what both allow. */
    expect(&pol, ALLOWLIST("\"pypi.org\", \"a.example.com\", \"unknown.org\""),
           "-10.0.0.0/8 -bad.example.com -*.secret.other.org +pypi.org +a.example.com "
           "default:deny");
    /* A domain the tool allows only in part: the tool's allow rules within it. */
    expect(&pol, ALLOWLIST("\"*.other.org\""),
           "-10.0.0.0/8 -bad.example.com -*.secret.other.org +api.other.org default:deny");
    /* "*.example.com" is allowed whole by the tool's "*.example.com". */
    expect(&pol, ALLOWLIST("\"*.example.com\""),
           "-10.0.0.0/8 -bad.example.com -*.secret.other.org +*.example.com default:deny");
    /* Nothing in common: off. */
    expect(&pol, ALLOWLIST("\"unknown.org\""), "off");
    /* A tool that allows by default. */
    expect(&open, ALLOWLIST("\"pypi.org\", \"evil.org\""), "-evil.org +pypi.org default:deny");
    /* Case and a final dot do not matter. */
    expect(&pol, ALLOWLIST("\"PyPI.org.\""),
           "-10.0.0.0/8 -bad.example.com -*.secret.other.org +PyPI.org. default:deny");
}

static void remote_tools(void **state)
{
    struct gateway_sandbox_tool e2b = {.name = "e", .provider = "e2b"};
    expect(&e2b, NULL, "off");
    expect(&e2b, ALLOWLIST("\"pypi.org\""), "off");
    e2b.allow_internet_access = true;
    expect(&e2b, NULL, "internet");
    expect(&e2b, ALLOWLIST("\"pypi.org\""), "+pypi.org default:deny");

    struct gateway_sandbox_tool osb = {.name = "o", .provider = "opensandbox"};
    osb.network_policy = "{\"defaultAction\":\"deny\",\"egress\":[{\"action\":\"allow\","
                         "\"target\":\"*.org\"}]}";
    expect(&osb, NULL, "+*.org default:deny");
    expect(&osb, ALLOWLIST("\"pypi.org\", \"example.com\""), "+pypi.org default:deny");
    osb.network_policy = "{}"; /* OpenSandbox: allow-all */
    expect(&osb, NULL, "internet");
    osb.network_policy = "{\"defaultAction\":\"deny\",\"egress\":[{\"target\":\"a.org\"}]}";
    json_t *policy = json_loads(ALLOWLIST("\"a.org\""), 0, NULL);
    struct provider_network net;
    struct corral_error err = {0};
    assert_int_equal(provider_network_effective(&osb, policy, &net, &err), -EINVAL);
    assert_non_null(strstr(err.message, "network_policy"));
    json_decref(policy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(local_tools),
        cmocka_unit_test(remote_tools),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
