/* The YAML configuration: src/config/config.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"

static struct corral_config *parse_ok(const char *yaml)
{
    struct corral_config *cfg = NULL;
    struct corral_error err = {0};
    int r = corral_config_parse(yaml, strlen(yaml), "corral.yaml", &cfg, &err);
    if (r < 0)
        fail_msg("parsing failed: %s", err.message);
    assert_non_null(cfg);
    return cfg;
}

/* Parses yaml, expects a failure, and checks that the message contains want. */
static void expect_error(const char *yaml, int code, const char *want)
{
    struct corral_config *cfg = NULL;
    struct corral_error err = {0};
    int r = corral_config_parse(yaml, strlen(yaml), "corral.yaml", &cfg, &err);
    if (r == 0) {
        corral_config_free(cfg);
        fail_msg("parsing succeeded, expected an error containing \"%s\"", want);
    }
    assert_int_equal(r, -code);
    assert_int_equal(err.code, code);
    assert_null(cfg);
    if (!strstr(err.message, want))
        fail_msg("message \"%s\" does not contain \"%s\"", err.message, want);
}

static const struct corral_template *find(const struct corral_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n_templates; i++)
        if (!strcmp(cfg->templates[i].name, name))
            return &cfg->templates[i];
    fail_msg("no template '%s'", name);
    return NULL;
}

static void parses_a_full_file(void **state)
{
    struct corral_config *cfg = parse_ok("# corral\n"
                                         "state_dir: /run/corral-test\n"
                                         "disk_dir: /srv/corral-disks\n"
                                         "template_dir: /srv/corral-templates\n"
                                         "templates:\n"
                                         "  default:\n"
                                         "    preload: [numpy, pandas, matplotlib.pyplot]\n"
                                         "    pool_size: 2\n"
                                         "    limits:\n"
                                         "      memory: 1GiB\n"
                                         "      cpus: 1.5\n"
                                         "      pids: 256\n"
                                         "      disk: 512m\n"
                                         "      open_files: 1024\n"
                                         "  minimal:\n"
                                         "    preload: []\n"
                                         "    image: data-science:v2\n"
                                         "  data-2.x_y:\n"
                                         "    preload:\n"
                                         "      - _private.mod\n"
                                         "      - sklearn\n");
    assert_string_equal(cfg->path, "corral.yaml");
    assert_string_equal(cfg->state_dir, "/run/corral-test");
    assert_string_equal(cfg->disk_dir, "/srv/corral-disks");
    assert_string_equal(cfg->template_dir, "/srv/corral-templates");
    assert_int_equal(cfg->n_templates, 3);
    assert_string_equal(cfg->templates[0].name, "default");
    assert_string_equal(cfg->templates[1].name, "minimal");
    assert_string_equal(cfg->templates[2].name, "data-2.x_y");

    const struct corral_template *d = find(cfg, "default");
    assert_non_null(d->preload);
    assert_string_equal(d->preload[0], "numpy");
    assert_string_equal(d->preload[1], "pandas");
    assert_string_equal(d->preload[2], "matplotlib.pyplot");
    assert_null(d->preload[3]);
    assert_int_equal(d->pool_size, 2);
    assert_int_equal(d->limits.memory_bytes, 1ull << 30);
    assert_int_equal(d->limits.millicpus, 1500);
    assert_int_equal(d->limits.pids, 256);
    assert_int_equal(d->limits.disk_bytes, 512ull << 20);
    assert_int_equal(d->limits.open_files, 1024);

    const struct corral_template *m = find(cfg, "minimal");
    assert_non_null(m->preload);
    assert_null(m->preload[0]);
    assert_int_equal(m->pool_size, 0);
    assert_string_equal(m->image, "data-science:v2");
    assert_null(d->image);

    const struct corral_template *x = find(cfg, "data-2.x_y");
    assert_string_equal(x->preload[0], "_private.mod");
    assert_string_equal(x->preload[1], "sklearn");
    assert_null(x->preload[2]);
    corral_config_free(cfg);
}

static void missing_keys_take_defaults(void **state)
{
    static const char *const empty[] = {
        "", "# nothing but a comment\n", "---\n", "{}\n", "templates:\n", "templates: {}\n"};
    for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++) {
        struct corral_config *cfg = parse_ok(empty[i]);
        assert_null(cfg->state_dir);
        assert_int_equal(cfg->n_templates, 0);
        assert_null(cfg->templates);
        corral_config_free(cfg);
    }

    struct corral_config *cfg = parse_ok("templates:\n"
                                         "  bare:\n"
                                         "  some:\n"
                                         "    limits:\n"
                                         "      pids: 64\n"
                                         "  nolimits:\n"
                                         "    limits:\n");
    assert_null(cfg->state_dir);
    assert_int_equal(cfg->n_templates, 3);
    const struct corral_template *b = find(cfg, "bare");
    assert_null(b->preload);
    assert_int_equal(b->pool_size, 0);
    assert_int_equal(b->limits.memory_bytes, 0);
    assert_int_equal(b->limits.millicpus, 0);
    assert_int_equal(b->limits.pids, 0);
    assert_int_equal(b->limits.disk_bytes, 0);
    assert_int_equal(b->limits.open_files, 0);
    const struct corral_template *s = find(cfg, "some");
    assert_null(s->preload);
    assert_int_equal(s->limits.pids, 64);
    assert_int_equal(s->limits.memory_bytes, 0);
    assert_int_equal(s->limits.open_files, 0);
    const struct corral_template *n = find(cfg, "nolimits");
    assert_int_equal(n->limits.pids, 0);
    corral_config_free(cfg);
}

static void preload_missing_vs_empty(void **state)
{
    struct corral_config *cfg = parse_ok("templates:\n"
                                         "  missing:\n"
                                         "    pool_size: 0\n"
                                         "  empty:\n"
                                         "    preload: []\n"
                                         "  block_empty:\n"
                                         "    preload: !!seq []\n");
    assert_null(find(cfg, "missing")->preload);
    const struct corral_template *e = find(cfg, "empty");
    assert_non_null(e->preload);
    assert_null(e->preload[0]);
    assert_non_null(find(cfg, "block_empty")->preload);
    corral_config_free(cfg);
    expect_error("templates:\n  t:\n    preload:\n", EINVAL,
                 "corral.yaml:3:13: preload of template 't' must be a list of module names "
                 "([] for none), not null");
}

static void parses_template_languages(void **state)
{
    (void)state;
    struct corral_config *cfg = parse_ok("templates:\n"
                                         "  polyglot:\n"
                                         "    languages: [javascript, ts, R, sh]\n"
                                         "  plain:\n"
                                         "    pool_size: 0\n");
    const char *const *langs = find(cfg, "polyglot")->languages;
    assert_non_null(langs);
    assert_string_equal(langs[0], "javascript");
    assert_string_equal(langs[1], "ts");
    assert_string_equal(langs[2], "R");
    assert_string_equal(langs[3], "sh");
    assert_null(langs[4]);
    assert_null(find(cfg, "plain")->languages);
    corral_config_free(cfg);
    expect_error("templates:\n  t:\n    languages: javascript\n", EINVAL,
                 "corral.yaml:3:16: languages of template 't' must be a list of languages "
                 "(python, javascript, typescript, bash, r), not 'javascript'");
    expect_error("templates:\n  t:\n    languages: [js, cobol]\n", EINVAL,
                 "corral.yaml:3:21: no kernel runs the language 'cobol' of template 't' "
                 "(supported: python, javascript, typescript, bash, r)");
    expect_error("templates:\n  t:\n    languages: [js, [r]]\n", EINVAL,
                 "an entry of the languages of template 't'");
}

static void scalars_may_be_numbers_or_strings(void **state)
{
    struct corral_config *cfg = parse_ok("state_dir: \"/srv/corral\"\n"
                                         "templates:\n"
                                         "  t:\n"
                                         "    preload: ['numpy', \"pandas\"]\n"
                                         "    pool_size: '3'\n"
                                         "    limits:\n"
                                         "      memory: \"1GiB\"\n"
                                         "      cpus: '2'\n"
                                         "      pids: \"100\"\n"
                                         "      disk: 1073741824\n"
                                         "      open_files: '64'\n");
    assert_string_equal(cfg->state_dir, "/srv/corral");
    const struct corral_template *t = find(cfg, "t");
    assert_string_equal(t->preload[0], "numpy");
    assert_string_equal(t->preload[1], "pandas");
    assert_int_equal(t->pool_size, 3);
    assert_int_equal(t->limits.memory_bytes, 1ull << 30);
    assert_int_equal(t->limits.millicpus, 2000);
    assert_int_equal(t->limits.pids, 100);
    assert_int_equal(t->limits.disk_bytes, 1ull << 30);
    assert_int_equal(t->limits.open_files, 64);
    corral_config_free(cfg);

    /* Anchors and aliases are plain YAML: a shared limits block. */
    cfg = parse_ok("templates:\n"
                   "  a:\n"
                   "    limits: &small {memory: 64m, pids: 32}\n"
                   "  b:\n"
                   "    limits: *small\n");
    assert_int_equal(find(cfg, "b")->limits.memory_bytes, 64ull << 20);
    assert_int_equal(find(cfg, "b")->limits.pids, 32);
    corral_config_free(cfg);
}

static void refuses_invalid_yaml(void **state)
{
    expect_error("templates:\n  default:\n    pool_size: 2\n   limits: {}\n", EINVAL,
                 "corral.yaml:4:4: invalid YAML: ");
    expect_error("templates: [a, b\n", EINVAL,
                 "corral.yaml:2:1: invalid YAML: did not find expected ',' or ']' (while parsing a "
                 "flow sequence at line 1, column 12)");
    expect_error("state_dir: \"/run\n", EINVAL,
                 "corral.yaml:2:1: invalid YAML: found unexpected end of stream");
    expect_error("templates: *nowhere\n", EINVAL,
                 "corral.yaml:1:12: invalid YAML: found undefined alias");
    /* A byte that is not UTF-8: the reader's error, placed by its offset. */
    expect_error("state_dir: /run\nx: \xff\n", EINVAL, "corral.yaml:2:4: invalid YAML: ");
    expect_error("state_dir: /a\n---\nstate_dir: /b\n", EINVAL,
                 "corral.yaml:2:1: a second YAML document (a file holds one)");
    expect_error("state_dir: /a\n---\n- [\n", EINVAL, "corral.yaml:4:1: invalid YAML: ");

    /* The text need not end with a NUL: only len bytes are read. */
    const char text[] = "state_dir: /run/x\nstate_dir: garbage";
    struct corral_config *cfg = NULL;
    struct corral_error err;
    assert_int_equal(corral_config_parse(text, 17, "cut.yaml", &cfg, &err), 0);
    assert_string_equal(cfg->state_dir, "/run/x");
    assert_string_equal(cfg->path, "cut.yaml");
    corral_config_free(cfg);
}

static void refuses_a_top_level_that_is_not_a_mapping(void **state)
{
    expect_error("- templates\n- state_dir\n", EINVAL,
                 "corral.yaml:1:1: the configuration must be a mapping (keys: state_dir, "
                 "disk_dir, templates), not a list");
    expect_error("just words\n", EINVAL,
                 "corral.yaml:1:1: the configuration must be a mapping (keys: state_dir, "
                 "disk_dir, templates), not 'just words'");
    expect_error("\"\"\n", EINVAL, "corral.yaml:1:1: the configuration must be a mapping");
}

static void refuses_unknown_keys(void **state)
{
    struct corral_config *cfg = NULL;
    struct corral_error err;
    const char *yaml = "templates:\n"
                       "  default:\n"
                       "    preload: []\n"
                       "    pol_size: 2\n";
    assert_int_equal(corral_config_parse(yaml, strlen(yaml), "corral.yaml", &cfg, &err), -EINVAL);
    assert_string_equal(err.message,
                        "corral.yaml:4:5: unknown key 'pol_size' in template "
                        "'default' (known: preload, pool_size, limits, network, image, languages)");
    expect_error("state_dir: /run/corral\ntemplate: {}\n", EINVAL,
                 "corral.yaml:2:1: unknown key 'template' at the top level (known: state_dir, "
                 "disk_dir, template_dir, template_builds, templates, network, fleet, audit, log, "
                 "control_nice)");
    expect_error("disk_dir: var/lib/corral\n", EINVAL,
                 "corral.yaml:1:11: disk_dir must be an absolute path or memory, not "
                 "'var/lib/corral'");
    expect_error("templates:\n  t:\n    limits:\n      memory: 1g\n      cpu: 2\n", EINVAL,
                 "corral.yaml:5:7: unknown key 'cpu' in the limits of template 't' (known: "
                 "memory, cpus, pids, disk, open_files)");
    expect_error("templates: {t: {limits: {Memory: 1g}}}\n", EINVAL,
                 "corral.yaml:1:26: unknown key 'Memory' in the limits of template 't'");
    expect_error("log: {level: loud}\n", EINVAL,
                 "corral.yaml:1:14: log.level must be debug, info, warn or error, not 'loud'");
    expect_error("log: {format: xml}\n", EINVAL,
                 "corral.yaml:1:15: log.format must be text or json, not 'xml'");
    expect_error("log: {colour: red}\n", EINVAL, "corral.yaml:1:7: unknown key 'colour' in log");
    expect_error("? [a, b]\n: 1\n", EINVAL,
                 "corral.yaml:1:3: keys at the top level must be names, not a list");
}

static void refuses_duplicate_keys(void **state)
{
    expect_error("state_dir: /a\nstate_dir: /b\n", EINVAL,
                 "corral.yaml:2:1: duplicate key 'state_dir' at the top level (first at line 1)");
    expect_error("templates:\n  t:\n    pool_size: 1\n    pool_size: 2\n", EINVAL,
                 "corral.yaml:4:5: duplicate key 'pool_size' in template 't' (first at line 3)");
    expect_error("templates:\n  t:\n    limits: {pids: 10, pids: 20}\n", EINVAL,
                 "corral.yaml:3:24: duplicate key 'pids' in the limits of template 't' (first at "
                 "line 3)");
    expect_error("templates:\n  default:\n    pool_size: 1\n  minimal: {}\n  default: {}\n", EINVAL,
                 "corral.yaml:5:3: duplicate template 'default' (first defined at line 2)");
}

static void refuses_wrong_types(void **state)
{
    expect_error("templates:\n  - default\n", EINVAL,
                 "corral.yaml:2:3: templates must be a mapping from template names to "
                 "templates, not a list");
    expect_error("templates: default\n", EINVAL,
                 "corral.yaml:1:12: templates must be a mapping from template names to "
                 "templates, not 'default'");
    expect_error("templates:\n  t: [preload]\n", EINVAL,
                 "corral.yaml:2:6: template 't' must be a mapping (keys: preload, pool_size, "
                 "limits, network, image, languages), not a list");
    expect_error("templates:\n  t:\n    limits: [memory, 1g]\n", EINVAL,
                 "corral.yaml:3:13: limits of template 't' must be a mapping (keys: memory, cpus, "
                 "pids, disk, open_files), not a list");
    expect_error("templates:\n  t:\n    preload: numpy\n", EINVAL,
                 "corral.yaml:3:14: preload of template 't' must be a list of module names ([] "
                 "for none), not 'numpy'");
    expect_error("templates:\n  t:\n    preload: {numpy: 1}\n", EINVAL,
                 "corral.yaml:3:14: preload of template 't' must be a list of module names ([] "
                 "for none), not a mapping");
    expect_error("templates:\n  t:\n    preload:\n      - [numpy]\n", EINVAL,
                 "corral.yaml:4:9: an entry of the preload of template 't' must be a single "
                 "value, not a list");
    expect_error("templates:\n  t:\n    pool_size: [1]\n", EINVAL,
                 "corral.yaml:3:16: pool_size of template 't' must be a single value, not a list");
    expect_error("templates:\n  t:\n    limits:\n      memory: {gib: 1}\n", EINVAL,
                 "corral.yaml:4:15: limit 'memory' of template 't' must be a single value, not "
                 "a mapping");
    expect_error("state_dir: [/run]\n", EINVAL,
                 "corral.yaml:1:12: state_dir must be a single value, not a list");
    expect_error("state_dir:\n", EINVAL, "corral.yaml:1:11: state_dir has no value");
    expect_error("templates:\n  t:\n    pool_size: ~\n", EINVAL,
                 "corral.yaml:3:16: pool_size of template 't' has no value");
    expect_error("templates:\n  t:\n    limits:\n      cpus:\n", EINVAL,
                 "corral.yaml:4:12: limit 'cpus' of template 't' has no value");
    expect_error("templates:\n  [a]: {}\n", EINVAL,
                 "corral.yaml:2:3: keys of templates must be names, not a list");
}

static void parses_network_settings(void **state)
{
    struct corral_config *cfg = parse_ok("network:\n"
                                         "  modes: [off, policy]\n"
                                         "  dns: [10.0.0.53, \"[fd00::53]:5353\"]\n"
                                         "  allow_private: [10.20.0.0/16]\n"
                                         "  host_addresses: [203.0.113.7, 2001:db8::/64]\n"
                                         "templates:\n"
                                         "  web:\n"
                                         "    network:\n"
                                         "      mode: policy\n"
                                         "      default: allow\n"
                                         "      rules:\n"
                                         "        - deny: 10.0.0.0/8\n"
                                         "        - allow: \"*.example.com\"\n");
    assert_true(cfg->has_network && cfg->net_modes_given);
    assert_int_equal(cfg->net_modes, (1u << CORRAL_NETWORK_OFF) | (1u << CORRAL_NETWORK_POLICY));
    assert_string_equal(cfg->net_dns[1], "[fd00::53]:5353");
    assert_null(cfg->net_dns[2]);
    assert_string_equal(cfg->net_private[0], "10.20.0.0/16");
    assert_string_equal(cfg->net_hosts[0], "203.0.113.7");
    assert_string_equal(cfg->net_hosts[1], "2001:db8::/64");
    assert_null(cfg->net_hosts[2]);
    const struct corral_network *n = find(cfg, "web")->network;
    assert_non_null(n);
    assert_int_equal(n->mode, CORRAL_NETWORK_POLICY);
    assert_true(n->default_allow);
    assert_int_equal(n->n_rules, 2);
    assert_false(n->rules[0].allow);
    assert_string_equal(n->rules[0].target, "10.0.0.0/8");
    assert_true(n->rules[1].allow);
    assert_string_equal(n->rules[1].target, "*.example.com");
    corral_config_free(cfg);
    /* an empty value is an empty list: only `off`, which is always allowed */
    cfg = parse_ok("network:\n  modes:\n  dns:\n");
    assert_true(cfg->net_modes_given);
    assert_int_equal(cfg->net_modes, 0);
    assert_null(cfg->net_dns[0]);
    corral_config_free(cfg);
}

static void refuses_bad_network_settings(void **state)
{
    expect_error("network:\n  modes: [off, everything]\n", EINVAL,
                 "corral.yaml:2:16: 'everything' in network.modes is not a network mode");
    expect_error("network:\n  dns: [resolver.example]\n", EINVAL,
                 "'resolver.example' is not a resolver");
    expect_error("network:\n  dns: [1.1.1.1, 1.0.0.1, 8.8.8.8, 8.8.4.4, 9.9.9.9]\n", EINVAL,
                 "network.dns has 5 entries (at most 4)");
    expect_error("network:\n  allow_private: [example.com]\n", EINVAL,
                 "'example.com' is not an address range");
    expect_error("network:\n  allow_private: [10.0.0.0/40]\n", EINVAL,
                 "'10.0.0.0/40' is not an egress target");
    expect_error("network:\n  dns: 10.0.0.53\n", EINVAL,
                 "corral.yaml:2:8: network.dns must be a list, not");
    expect_error("network:\n  allow_private: [[10.0.0.0/8]]\n", EINVAL,
                 "corral.yaml:2:19: an entry of network.allow_private must be");
    expect_error("network:\n  mode: internet\n", EINVAL,
                 "unknown key 'mode' in network (known: modes, dns, allow_private, "
                 "host_addresses)");
    expect_error("network:\n  host_addresses: [host.example]\n", EINVAL,
                 "'host.example' is not an address or range of this host");
    expect_error("network:\n  host_addresses: 203.0.113.7\n", EINVAL,
                 "corral.yaml:2:19: network.host_addresses must be a list, not");
    expect_error("templates:\n  t:\n    network: {default: allow}\n", EINVAL,
                 "the network of template 't' needs a mode");
    expect_error("templates:\n  t:\n    network: {mode: open}\n", EINVAL,
                 "'open' is not a network mode (off, internet, policy) in template 't'");
    expect_error("templates:\n  t:\n    network:\n      mode: policy\n      rules: [{allow: "
                 "\"http://x\"}]\n",
                 EINVAL, "template 't': 'http://x' is not an egress target");
    expect_error("templates:\n  t:\n    network:\n      mode: internet\n      rules: [{allow: "
                 "x.com}]\n",
                 EINVAL, "network rules need the mode policy");
    expect_error("templates:\n  t:\n    network:\n      mode: policy\n      rules: [{permit: "
                 "x.com}]\n",
                 EINVAL, "unknown key 'permit'");
}

static void parses_fleet_settings(void **state)
{
    (void)state;
    struct corral_config *cfg =
        parse_ok("fleet:\n"
                 "  role: front\n"
                 "  nodes: [10.0.0.5:3000, \"[fd00::7]:3001\", node-c:3002]\n"
                 "  probe_interval: 0.5s\n"
                 "  key: sekrit\n"
                 "  drain_grace: 45\n");
    assert_non_null(cfg->fleet);
    assert_int_equal(cfg->fleet->role, FLEET_FRONT);
    assert_true(cfg->fleet->role_given);
    assert_string_equal(cfg->fleet->nodes[0], "10.0.0.5:3000");
    assert_string_equal(cfg->fleet->nodes[1], "[fd00::7]:3001");
    assert_string_equal(cfg->fleet->nodes[2], "node-c:3002");
    assert_null(cfg->fleet->nodes[3]);
    assert_null(cfg->fleet->discovery);
    assert_int_equal(cfg->fleet->probe_interval_ms, 500);
    assert_int_equal(cfg->fleet->resolve_interval_ms, FLEET_RESOLVE_INTERVAL_MS);
    assert_string_equal(cfg->fleet->key, "sekrit");
    assert_int_equal(cfg->fleet->drain_grace_ms, 45000);
    assert_true(cfg->fleet->drain_grace_given);
    corral_config_free(cfg);

    cfg = parse_ok("fleet:\n  discovery: corral-node.corral.svc:3000\n  resolve_interval: 2s\n");
    assert_int_equal(cfg->fleet->role, FLEET_BOTH);
    assert_false(cfg->fleet->role_given);
    assert_string_equal(cfg->fleet->discovery, "corral-node.corral.svc:3000");
    assert_int_equal(cfg->fleet->resolve_interval_ms, 2000);
    assert_int_equal(cfg->fleet->drain_grace_ms, FLEET_DRAIN_GRACE_MS);
    assert_false(cfg->fleet->drain_grace_given);
    corral_config_free(cfg);

    cfg = parse_ok("fleet:\n");
    assert_null(cfg->fleet);
    corral_config_free(cfg);
}

static void parses_the_audit_retention(void **state)
{
    (void)state;
    struct corral_config *cfg = parse_ok("audit:\n  retention: 7d\n");
    assert_true(cfg->audit_retention_given);
    assert_int_equal(cfg->audit_retention_s, 7 * 86400);
    corral_config_free(cfg);
    cfg = parse_ok("audit:\n  retention: 90m\n");
    assert_int_equal(cfg->audit_retention_s, 5400);
    corral_config_free(cfg);
    cfg = parse_ok("audit:\n  retention: off\n");
    assert_true(cfg->audit_retention_given);
    assert_int_equal(cfg->audit_retention_s, 0);
    corral_config_free(cfg);
    cfg = parse_ok("audit: {}\n");
    assert_false(cfg->audit_retention_given);
    corral_config_free(cfg);
    expect_error("audit:\n  retention: soon\n", EINVAL,
                 "audit.retention: invalid retention 'soon'");
    expect_error("audit:\n  retention: 10ms\n", EINVAL, "at least 1s");
    expect_error("audit:\n  keep: 1d\n", EINVAL, "keep");
}

static void parses_the_control_nice(void **state)
{
    (void)state;
    struct corral_config *cfg = parse_ok("control_nice: -5\n");
    assert_true(cfg->control_nice_given);
    assert_int_equal(cfg->control_nice, -5);
    corral_config_free(cfg);
    cfg = parse_ok("control_nice: 0\n");
    assert_true(cfg->control_nice_given);
    assert_int_equal(cfg->control_nice, 0);
    corral_config_free(cfg);
    cfg = parse_ok("state_dir: /run/x\n");
    assert_false(cfg->control_nice_given);
    corral_config_free(cfg);
    expect_error("control_nice: -21\n", EINVAL,
                 "corral.yaml:1:15: control_nice must be a nice value, an integer from -20 to 19, "
                 "not '-21'");
    expect_error("control_nice: high\n", EINVAL, "not 'high'");
    expect_error("control_nice: 20\n", EINVAL, "not '20'");
}

static void parses_template_builds(void **state)
{
    (void)state;
    struct corral_config *cfg = parse_ok("template_builds: all\n");
    assert_string_equal(cfg->template_builds, "all");
    corral_config_free(cfg);
    cfg = parse_ok("state_dir: /run/x\n");
    assert_null(cfg->template_builds);
    corral_config_free(cfg);
    expect_error("template_builds: everyone\n", EINVAL,
                 "corral.yaml:1:18: template_builds must be admin, all or off (who may build "
                 "templates through E2B's API), not 'everyone'");
}

static void refuses_bad_fleet_settings(void **state)
{
    (void)state;
    expect_error("fleet:\n  role: leader\n", EINVAL,
                 "corral.yaml:2:9: fleet.role: 'leader' is not node, front or both");
    expect_error("fleet:\n  nodes: [10.0.0.5]\n", EINVAL,
                 "fleet.nodes[0]: '10.0.0.5': expected HOST:PORT");
    expect_error("fleet:\n  nodes: [\"10.0.0.5:99999\"]\n", EINVAL, "'10.0.0.5:99999': the port");
    expect_error("fleet:\n  nodes: [\"fd00::7:3000\"]\n", EINVAL,
                 "write an IPv6 address as [ADDRESS]:PORT");
    expect_error("fleet:\n  nodes: [\"http://x:1\"]\n", EINVAL, "not a host name or address");
    expect_error("fleet:\n  nodes: 10.0.0.5:3000\n", EINVAL, "fleet.nodes must be a list");
    expect_error("fleet:\n  nodes: [a:1]\n  discovery: b:2\n", EINVAL,
                 "fleet: give nodes or discovery, not both");
    expect_error("fleet:\n  probe_interval: 0\n", EINVAL,
                 "fleet.probe_interval: '0' is out of range (expected 0.05 s to 60 s)");
    expect_error("fleet:\n  key: os.environ/CORRAL_TEST_UNSET_FLEET_KEY\n", EINVAL,
                 "fleet.key: environment variable CORRAL_TEST_UNSET_FLEET_KEY is not set");
    expect_error("fleet:\n  rol: node\n", EINVAL,
                 "unknown key 'rol' in fleet (known: role, nodes, discovery");
    expect_error("fleet: [node]\n", EINVAL, "fleet must be a mapping");
    /* as many nodes as a front knows, and one more */
    char many[16 + (FLEET_NODES_MAX + 1) * 16];
    size_t len = (size_t)snprintf(many, sizeof(many), "fleet:\n  nodes: [");
    for (int i = 0; i <= FLEET_NODES_MAX; i++)
        len += (size_t)snprintf(many + len, sizeof(many) - len, "%sn%d:1", i ? ", " : "", i);
    snprintf(many + len, sizeof(many) - len, "]\n");
    expect_error(many, EINVAL, "fleet.nodes: at most 256 nodes");
    *strrchr(many, ',') = '\0';
    strcat(many, "]\n");
    struct corral_config *cfg = parse_ok(many);
    assert_non_null(cfg->fleet->nodes[FLEET_NODES_MAX - 1]);
    corral_config_free(cfg);
}

static void refuses_invalid_values(void **state)
{
    expect_error("templates:\n  t:\n    limits:\n      memory: lots\n", EINVAL,
                 "corral.yaml:4:15: limit 'memory' of template 't': invalid size 'lots'");
    expect_error("templates:\n  t:\n    limits:\n      memory: 1m\n", EINVAL,
                 "corral.yaml:4:15: limit 'memory' of template 't': '1m' is below the minimum "
                 "of 16m");
    expect_error("templates:\n  t:\n    limits:\n      disk: -1g\n", EINVAL,
                 "corral.yaml:4:13: limit 'disk' of template 't': invalid size '-1g'");
    expect_error("templates:\n  t:\n    limits:\n      disk: 512k\n", EINVAL,
                 "corral.yaml:4:13: limit 'disk' of template 't': '512k' is below the minimum "
                 "of 1m");
    expect_error("templates:\n  t:\n    limits:\n      cpus: 0\n", EINVAL,
                 "corral.yaml:4:13: limit 'cpus' of template 't': invalid CPU count '0'");
    expect_error("templates:\n  t:\n    limits:\n      pids: -5\n", EINVAL,
                 "corral.yaml:4:13: limit 'pids' of template 't': invalid number '-5' (expected "
                 "an integer from 8 to 4194304)");
    expect_error("templates:\n  t:\n    limits:\n      open_files: 1.5\n", EINVAL,
                 "corral.yaml:4:19: limit 'open_files' of template 't': invalid number '1.5'");
    expect_error("templates:\n  t:\n    pool_size: -1\n", EINVAL,
                 "corral.yaml:3:16: pool_size of template 't': invalid number '-1' (expected an "
                 "integer from 0 to 10000)");
    expect_error("templates:\n  t:\n    pool_size: 10001\n", EINVAL,
                 "corral.yaml:3:16: pool_size of template 't': invalid number '10001' (expected "
                 "an integer from 0 to 10000)");
    expect_error("templates:\n  t:\n    pool_size: two\n", EINVAL,
                 "corral.yaml:3:16: pool_size of template 't': invalid number 'two'");
    expect_error("templates:\n  my template:\n    pool_size: 1\n", EINVAL,
                 "corral.yaml:2:3: template name 'my template' may only hold letters, digits, "
                 "'.', '_' and '-'");
    expect_error("templates:\n  \"caf\xc3\xa9\": {}\n", EINVAL,
                 "corral.yaml:2:3: template name 'caf\xc3\xa9' may only hold letters");
    expect_error("templates:\n  '': {}\n", EINVAL,
                 "corral.yaml:2:3: template name '' must not be empty");
    expect_error("templates:\n  "
                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: {}\n",
                 EINVAL, "is longer than 63 characters");
    expect_error("templates:\n  t:\n    preload: [numpy, 'os; import shutil']\n", EINVAL,
                 "corral.yaml:3:22: 'os; import shutil' in the preload of template 't' is not a "
                 "module name (expected a dotted identifier such as matplotlib.pyplot)");
    static const char *const bad_modules[] = {"1abc", "a..b", ".a", "a.", "a-b", "a,b", "a.1b"};
    for (size_t i = 0; i < sizeof(bad_modules) / sizeof(bad_modules[0]); i++) {
        char yaml[128], want[128];
        snprintf(yaml, sizeof(yaml), "templates:\n  t:\n    preload: ['%s']\n", bad_modules[i]);
        snprintf(want, sizeof(want), "corral.yaml:3:15: '%s' in the preload of template 't'",
                 bad_modules[i]);
        expect_error(yaml, EINVAL, want);
    }
    expect_error("templates:\n  t:\n    preload: [\"\"]\n", EINVAL,
                 "'' in the preload of template 't' is not a module name");
    expect_error("templates:\n  t:\n    preload: [\"num\\0py\"]\n", EINVAL,
                 "corral.yaml:3:15: an entry of the preload of template 't' must not contain a "
                 "NUL character");
    expect_error("state_dir: run/corral\n", EINVAL,
                 "corral.yaml:1:12: state_dir must be an absolute path, not 'run/corral'");
}

static void loads_a_file(void **state)
{
    char path[] = "/tmp/corral-test-config-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *yaml = "templates:\n  small:\n    pool_size: 0\n    limits: {memory: 256m}\n";
    assert_int_equal(write(fd, yaml, strlen(yaml)), (ssize_t)strlen(yaml));
    close(fd);

    struct corral_config *cfg = NULL;
    struct corral_error err;
    int r = corral_config_load(path, &cfg, &err);
    if (r < 0)
        fail_msg("%s", err.message);
    assert_string_equal(cfg->path, path);
    assert_int_equal(cfg->n_templates, 1);
    assert_string_equal(cfg->templates[0].name, "small");
    assert_int_equal(cfg->templates[0].limits.memory_bytes, 256ull << 20);
    corral_config_free(cfg);

    /* Errors name the file as it was given. */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("templates:\n  small:\n    pool: 1\n", f);
    fclose(f);
    cfg = NULL;
    assert_int_equal(corral_config_load(path, &cfg, &err), -EINVAL);
    assert_null(cfg);
    char want[128];
    snprintf(want, sizeof(want), "%s:3:5: unknown key 'pool' in template 'small'", path);
    assert_non_null(strstr(err.message, want));
    unlink(path);
}

static void load_reports_unreadable_files(void **state)
{
    struct corral_config *cfg = NULL;
    struct corral_error err;
    assert_int_equal(corral_config_load("/nonexistent/corral.yaml", &cfg, &err), -ENOENT);
    assert_int_equal(err.code, ENOENT);
    assert_null(cfg);
    assert_string_equal(err.message, "cannot load the configuration: cannot open "
                                     "/nonexistent/corral.yaml: No such file or directory");
    assert_int_equal(corral_config_load("/tmp", &cfg, &err), -EISDIR);
    assert_non_null(strstr(err.message, "cannot read /tmp: Is a directory"));
    assert_null(cfg);
}

static void applies_a_config(void **state)
{
    struct corral_config *cfg = parse_ok("templates:\n"
                                         "  config-test:\n"
                                         "    preload: [json]\n"
                                         "    limits: {memory: 128m, pids: 64}\n"
                                         "  config-test-2: {}\n");
    struct corral_error err;
    for (int round = 0; round < 2; round++) {
        int r = corral_config_apply(cfg, &err);
        if (r < 0)
            fail_msg("apply (round %d): %s", round, err.message);
    }
    struct corral_template_stats st;
    assert_int_equal(corral_template_stats("config-test", &st, &err), 0);
    assert_int_equal(st.pool_size, 0);
    assert_int_equal(st.zygote_pid, 0);
    assert_int_equal(corral_template_stats("config-test-2", &st, &err), 0);
    corral_config_free(cfg);

    /* A config built by hand is checked too: nothing is defined when a name is bad. */
    const char *const preload[] = {NULL};
    struct corral_template bad[] = {
        {.name = "config-ok", .preload = preload},
        {.name = "bad/name", .preload = preload},
    };
    struct corral_config hand = {.path = "hand.yaml", .templates = bad, .n_templates = 2};
    assert_int_equal(corral_config_apply(&hand, &err), -EINVAL);
    assert_string_equal(err.message, "hand.yaml: template name 'bad/name' may only hold letters, "
                                     "digits, '.', '_' and '-'");
    assert_true(corral_template_stats("config-ok", &st, &err) < 0);
    assert_non_null(strstr(err.message, "unknown template 'config-ok'"));

    const char *const bad_preload[] = {"os;rm", NULL};
    struct corral_template bad_module = {.name = "config-m", .preload = bad_preload};
    hand.templates = &bad_module;
    hand.n_templates = 1;
    assert_int_equal(corral_config_apply(&hand, &err), -EINVAL);
    assert_non_null(strstr(err.message, "'os;rm' in the preload of template 'config-m'"));

    corral_shutdown();
}

/* log: corral serve's log level and format. */
static void reads_the_log_settings(void **state)
{
    struct corral_config *cfg = parse_ok("log:\n  level: debug\n  format: json\n");
    assert_string_equal(cfg->log_level, "debug");
    assert_string_equal(cfg->log_format, "json");
    corral_config_free(cfg);
    cfg = parse_ok("log:\n");
    assert_null(cfg->log_level);
    assert_null(cfg->log_format);
    corral_config_free(cfg);
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_the_log_settings),
        cmocka_unit_test(parses_a_full_file),
        cmocka_unit_test(missing_keys_take_defaults),
        cmocka_unit_test(preload_missing_vs_empty),
        cmocka_unit_test(parses_template_languages),
        cmocka_unit_test(scalars_may_be_numbers_or_strings),
        cmocka_unit_test(refuses_invalid_yaml),
        cmocka_unit_test(refuses_a_top_level_that_is_not_a_mapping),
        cmocka_unit_test(refuses_unknown_keys),
        cmocka_unit_test(refuses_duplicate_keys),
        cmocka_unit_test(refuses_wrong_types),
        cmocka_unit_test(refuses_invalid_values),
        cmocka_unit_test(parses_network_settings),
        cmocka_unit_test(refuses_bad_network_settings),
        cmocka_unit_test(parses_fleet_settings),
        cmocka_unit_test(refuses_bad_fleet_settings),
        cmocka_unit_test(parses_the_audit_retention),
        cmocka_unit_test(parses_the_control_nice),
        cmocka_unit_test(parses_template_builds),
        cmocka_unit_test(loads_a_file),
        cmocka_unit_test(load_reports_unreadable_files),
        cmocka_unit_test(applies_a_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
