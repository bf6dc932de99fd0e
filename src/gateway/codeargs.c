/*
 * The code of a tool call, decoded while its JSON arguments stream in
 * ({"code": "import math\n..."} arrives in fragments), so that the client
 * sees response.code_interpreter_call_code.delta events as the model writes.
 * A small state machine over the top-level object: the "code" member's
 * string is unescaped as it comes; every other member is skipped.
 */
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway_internal.h"

enum {
    EXPECT_OBJECT,
    EXPECT_KEY,
    IN_KEY,
    EXPECT_COLON,
    EXPECT_VALUE,
    IN_CODE,
    SKIP_STRING,
    SKIP_NESTED,
    SKIP_SCALAR,
    AFTER_VALUE,
    DONE,
};

void gw_codeargs_init(struct gw_codeargs *c)
{
    memset(c, 0, sizeof(*c));
    c->key.max = 64;
}

void gw_codeargs_free(struct gw_codeargs *c)
{
    strbuf_free(&c->key);
}

static bool is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

static void put_utf8(struct strbuf *out, unsigned cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xC0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (char)(0xF0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    strbuf_append(out, b, n);
}

/* One \uXXXX code unit of the code string, pairing surrogates. */
static void code_unit(struct gw_codeargs *c, unsigned unit, struct strbuf *out)
{
    if (unit >= 0xD800 && unit < 0xDC00) {
        if (c->hi_surrogate)
            put_utf8(out, 0xFFFD);
        c->hi_surrogate = unit;
        return;
    }
    if (unit >= 0xDC00 && unit < 0xE000 && c->hi_surrogate) {
        put_utf8(out, 0x10000 + ((c->hi_surrogate - 0xD800) << 10) + (unit - 0xDC00));
        c->hi_surrogate = 0;
        return;
    }
    if (c->hi_surrogate) {
        put_utf8(out, 0xFFFD);
        c->hi_surrogate = 0;
    }
    put_utf8(out, unit >= 0xDC00 && unit < 0xE000 ? 0xFFFD : unit);
}

/* A character inside the code string; false at its closing quote. */
static bool code_char(struct gw_codeargs *c, char ch, struct strbuf *out)
{
    if (c->u_len) {
        c->u[c->u_len - 1] = ch;
        if (++c->u_len == 5) {
            c->u[4] = '\0';
            code_unit(c, (unsigned)strtoul(c->u, NULL, 16), out);
            c->u_len = 0;
        }
        return true;
    }
    if (c->escape) {
        c->escape = false;
        static const char from[] = "nrtbf/\\\"", to[] = "\n\r\t\b\f/\\\"";
        const char *p = ch ? strchr(from, ch) : NULL;
        if (ch == 'u')
            c->u_len = 1;
        else
            strbuf_append(out, p ? &to[p - from] : &ch, 1);
        return true;
    }
    if (ch == '\\') {
        c->escape = true;
        return true;
    }
    if (ch == '"') {
        if (c->hi_surrogate)
            put_utf8(out, 0xFFFD);
        c->hi_surrogate = 0;
        return false;
    }
    if (c->hi_surrogate) {
        put_utf8(out, 0xFFFD);
        c->hi_surrogate = 0;
    }
    strbuf_append(out, &ch, 1);
    return true;
}

/* Skipping an object or array value: strings may hold brackets. */
static void skip_nested(struct gw_codeargs *c, char ch)
{
    if (c->in_string) {
        if (c->escape)
            c->escape = false;
        else if (ch == '\\')
            c->escape = true;
        else if (ch == '"')
            c->in_string = false;
        return;
    }
    if (ch == '"')
        c->in_string = true;
    else if (ch == '{' || ch == '[')
        c->depth++;
    else if ((ch == '}' || ch == ']') && --c->depth == 0)
        c->state = AFTER_VALUE;
}

static void step(struct gw_codeargs *c, char ch, struct strbuf *code)
{
    switch (c->state) {
    case EXPECT_OBJECT:
        if (ch == '{')
            c->state = EXPECT_KEY;
        else if (!is_space(ch))
            c->state = DONE; /* not an object: nothing to stream */
        break;
    case EXPECT_KEY:
        if (ch == '"') {
            c->state = IN_KEY;
            c->key.len = 0;
            strbuf_append(&c->key, "", 0);
        } else if (ch == '}') {
            c->state = DONE;
        }
        break;
    case IN_KEY:
        if (c->escape) {
            c->escape = false;
            strbuf_append(&c->key, &ch, 1);
        } else if (ch == '\\') {
            c->escape = true;
        } else if (ch == '"') {
            c->is_code_key = !strcmp(strbuf_str(&c->key), "code");
            c->state = EXPECT_COLON;
        } else {
            strbuf_append(&c->key, &ch, 1);
        }
        break;
    case EXPECT_COLON:
        if (ch == ':')
            c->state = EXPECT_VALUE;
        break;
    case EXPECT_VALUE:
        if (is_space(ch))
            break;
        if (ch == '"')
            c->state = c->is_code_key && !c->done ? IN_CODE : SKIP_STRING;
        else if (ch == '{' || ch == '[') {
            c->state = SKIP_NESTED;
            c->depth = 1;
        } else
            c->state = SKIP_SCALAR;
        break;
    case IN_CODE:
        if (!code_char(c, ch, code)) {
            c->done = true; /* only the first "code" member streams */
            c->state = AFTER_VALUE;
        }
        break;
    case SKIP_STRING:
        if (c->escape)
            c->escape = false;
        else if (ch == '\\')
            c->escape = true;
        else if (ch == '"')
            c->state = AFTER_VALUE;
        break;
    case SKIP_NESTED:
        skip_nested(c, ch);
        break;
    case SKIP_SCALAR:
        if (ch == ',')
            c->state = EXPECT_KEY;
        else if (ch == '}')
            c->state = DONE;
        break;
    case AFTER_VALUE:
        if (ch == ',')
            c->state = EXPECT_KEY;
        else if (ch == '}')
            c->state = DONE;
        break;
    default:
        break;
    }
}

void gw_codeargs_feed(struct gw_codeargs *c, const char *text, size_t len, struct strbuf *code)
{
    for (size_t i = 0; i < len && c->state != DONE; i++)
        step(c, text[i], code);
}
