/*
 * libFuzzer target for the egress proxy's look at a connection's first
 * bytes (egress_sniff): TLS ClientHellos over one or more records and HTTP/1
 * request heads, any prefix of them. Built with clang by `make fuzz`.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "egress/sniff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char name[254];
    const char *why = NULL;
    enum sniff_result r = egress_sniff(data, size, name, &why);
    if (r == SNIFF_NAME && (strlen(name) == 0 || strlen(name) > 253))
        __builtin_trap(); /* a name is 1 to 253 bytes */
    if (r == SNIFF_NONE && (!why || !*why))
        __builtin_trap(); /* every refusal says why */
    if (r == SNIFF_MORE && size >= SNIFF_MAX)
        __builtin_trap();                       /* SNIFF_MAX bytes are always decided */
    for (size_t n = 0; n < size && n < 64; n++) /* every short prefix */
        (void)egress_sniff(data, n, name, &why);
    return 0;
}
