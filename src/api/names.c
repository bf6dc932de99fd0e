/* Names of what is in a sandbox; see names.h. */
#include "api/names.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *api_base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s && s[1] ? s + 1 : path;
}

json_t *api_text_json(const char *s)
{
    json_t *v = json_string(s);
    char *copy = v ? NULL : strdup(s);
    if (copy) {
        for (char *p = copy; *p; p++)
            if ((unsigned char)*p >= 0x80)
                *p = '?';
        v = json_string(copy);
        free(copy);
    }
    return v;
}

const char *api_owner_name(uint32_t id, bool group, char *buf, size_t len)
{
    if (id == 0)
        return "root";
    if (id == 1000)
        return "user";
    if (id == 65534)
        return group ? "nogroup" : "nobody";
    snprintf(buf, len, "%" PRIu32, id);
    return buf;
}
