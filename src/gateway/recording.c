/*
 * The audit trail of the gateway's executions (gateway_internal.h,
 * recording.c): each code_interpreter call and each command of a shell
 * call is recorded (store/audit.h) as the key's that made the request,
 * named by its virtual key's alias when it is one, in the container it
 * ran in.
 */
#include <stdio.h>
#include <string.h>

#include "gateway/gateway_internal.h"

void gw_record_begin(struct gw_call *c, const struct gw_container *ct, const char *kind,
                     const char *code, struct audit_exec *e)
{
    struct audit_who who = {0};
    snprintf(who.owner, sizeof(who.owner), "%s", c->owner);
    if (c->policy.found && c->policy.alias[0])
        snprintf(who.key, sizeof(who.key), "%s", c->policy.alias);
    else if (!strncmp(c->owner, "k:", 2)) /* the first hex digits of the key's SHA-256 */
        snprintf(who.key, sizeof(who.key), "sha256:%.12s", c->owner + 2);
    const char *tpl = ct && ct->tool && ct->tool->template_id ? ct->tool->template_id : NULL;
    audit_exec_begin(e, &who, "gateway", kind, !strcmp(kind, "code") ? "python" : NULL,
                     ct ? ct->id : NULL, tpl, code, c->request_id);
}

/* The outcome of a shell cell's command. */
static const char *command_outcome(struct audit_exec *e, json_t *result)
{
    json_t *outcome = json_object_get(result, "outcome");
    const char *type = json_string_value(json_object_get(outcome, "type"));
    if (type && !strcmp(type, "timeout"))
        return "timeout";
    json_t *code = json_object_get(outcome, "exit_code");
    const char *out = json_string_value(json_object_get(result, "stdout"));
    const char *err = json_string_value(json_object_get(result, "stderr"));
    if (out)
        audit_text_add(&e->out, out, strlen(out));
    if (err)
        audit_text_add(&e->err, err, strlen(err));
    if (!json_is_integer(code))
        return "error";
    e->has_exit_code = true;
    e->exit_code = (int)json_integer_value(code);
    return e->exit_code == 0 ? "ok" : e->exit_code > 128 ? "killed" : "error";
}

void gw_record_end(struct gw_call *c, struct audit_exec *e, int rc, const struct provider_output *o,
                   json_t *command_result, bool stopped, const struct corral_error *err)
{
    bool command = !strcmp(e->kind, "command");
    const char *outcome = "ok";
    if (stopped) {
        outcome = "killed";
    } else if (rc < 0) {
        audit_exec_error(e, "SandboxError", err->message);
        outcome = "error";
    } else if (command) {
        outcome = command_result ? command_outcome(e, command_result) : "error";
    } else {
        if (o->out)
            audit_text_add(&e->out, o->out, strlen(o->out));
        if (o->err)
            audit_text_add(&e->err, o->err, strlen(o->err));
        e->result_bytes = o->result ? strlen(o->result) : 0;
        size_t i;
        json_t *png;
        json_array_foreach(o->images, i, png)
            audit_exec_image(e, "image/png", json_string_value(png) ? json_string_value(png) : "");
        if (o->raised)
            audit_exec_error(e, o->error_name,
                             o->traceback && *o->traceback ? o->traceback : o->error_value);
        outcome = o->timed_out ? "timeout" : o->raised ? "error" : "ok";
    }
    audit_exec_finish(c->gw->audit, e, outcome);
}
