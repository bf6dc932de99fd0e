/*
 * libFuzzer target for what the daemon decodes from a sandbox: kernel frames
 * (kframe_parse) and control messages from the agent (ctl_decode and the
 * payload readers of every reply and event). Built with clang by
 * `make fuzz`; `make test` runs it for a short time.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/ctl.h"
#include "kernel/frame.h"

static struct ctl_msg msg;

static void read_payloads(const struct ctl_msg *m)
{
    struct ctl_reader r;
    char buf[4096];
    static struct ctl_entry e;
    /* Every shape the daemon reads: spawn reply, error, exit event, entries,
     * list counts, sizes. */
    ctl_reader_init(&r, m);
    (void)ctl_get_i32(&r);
    (void)ctl_reader_done(&r);
    ctl_reader_init(&r, m);
    (void)ctl_get_i32(&r);
    ctl_get_str(&r, buf, sizeof(buf));
    ctl_reader_init(&r, m);
    (void)ctl_get_i32(&r);
    (void)ctl_get_i32(&r);
    ctl_reader_init(&r, m);
    ctl_get_entry(&r, &e);
    ctl_reader_init(&r, m);
    (void)ctl_get_u64(&r);
    while (!r.bad && r.left)
        ctl_get_entry(&r, &e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kframe f;
    struct corral_error err;
    if (kframe_parse((const char *)data, size, &f, &err) == 0) {
        if (f.type == KFRAME_RESULT) {
            const char *key;
            json_t *value;
            json_object_foreach(f.data, key, value)
            {
                char *s = json_dumps(value, JSON_ENCODE_ANY);
                free(s);
            }
        }
        kframe_clear(&f);
    }
    if (ctl_decode(data, size, &msg) == 0)
        read_payloads(&msg);
    return 0;
}
