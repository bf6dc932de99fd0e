/*
 * The container_file_citation annotations of an answer (see cite.h).
 *
 * The text is scanned once for "sandbox:" followed by "/mnt/data/" or
 * "mnt/data/". Each occurrence is delimited by its context:
 *  - a markdown link target, `](sandbox:...)` or `](<sandbox:...>)`: up to
 *    the parenthesis closing the link (parentheses inside the target
 *    balanced), or up to the `>`; when that whole target names no file, up
 *    to its first whitespace (a link title, `(sandbox:/mnt/data/x "T")`);
 *  - otherwise a bare URL: up to whitespace or a closing character, without
 *    the punctuation ending a sentence; a bare URL that is a link's label
 *    (`[sandbox:/mnt/data/x](...)`) is not cited, its target is.
 * The candidate target is then decoded (backslash escapes in link targets,
 * %XX), its path normalized (leading '/', no empty or "." segments) and
 * looked up among the container's files, normalized the same way.
 */
#include "gateway/cite.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define SCHEME     "sandbox:"
#define SCHEME_LEN (sizeof(SCHEME) - 1)

struct cite_file {
    const char *id;
    const char *path; /* as the Containers API shows it */
    char *norm;       /* normalized; NULL when the entry has no id or path */
};

struct cite_ctx {
    const char *text;
    json_t *container_id;
    struct cite_file *files;
    size_t nfiles;
    size_t at_byte; /* the code point cursor: at_cp code points precede at_byte */
    size_t at_cp;
    json_t *out;
};

static bool is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* "/" + the non-empty segments of path other than ".", joined by '/'; a
 * trailing '/' is kept (a directory names no file). NULL when out of memory. */
static char *normalize(const char *path, size_t n)
{
    char *out = malloc(n + 2);
    if (!out)
        return NULL;
    size_t o = 0;
    size_t i = 0;
    while (i < n) {
        while (i < n && path[i] == '/')
            i++;
        size_t seg = i;
        while (i < n && path[i] != '/')
            i++;
        size_t len = i - seg;
        if (len == 0 || (len == 1 && path[seg] == '.'))
            continue;
        out[o++] = '/';
        memcpy(out + o, path + seg, len);
        o += len;
    }
    if (o == 0 || (n > 0 && path[n - 1] == '/'))
        out[o++] = '/';
    out[o] = '\0';
    return out;
}

/* The path named by the target text [s, s + n) (which starts with SCHEME),
 * decoded and normalized; *ok is false when it decodes to something no file
 * can have (a NUL byte). NULL when out of memory. */
static char *target_path(const char *s, size_t n, bool unescape, bool *ok)
{
    *ok = true;
    s += SCHEME_LEN;
    n -= SCHEME_LEN;
    char *dec = malloc(n + 1);
    if (!dec)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (unescape && c == '\\' && i + 1 < n &&
            strchr("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", s[i + 1]) != NULL) {
            dec[o++] = s[++i];
        } else if (c == '%' && i + 2 < n && hex_value((unsigned char)s[i + 1]) >= 0 &&
                   hex_value((unsigned char)s[i + 2]) >= 0) {
            int v = hex_value((unsigned char)s[i + 1]) * 16 + hex_value((unsigned char)s[i + 2]);
            if (v == 0)
                *ok = false;
            dec[o++] = (char)v;
            i += 2;
        } else {
            dec[o++] = (char)c;
        }
    }
    char *norm = normalize(dec, o);
    free(dec);
    return norm;
}

/* The file the target [start, end) of the text names: its index, -1 for none,
 * -2 when out of memory. */
static long find_file(const struct cite_ctx *c, size_t start, size_t end, bool unescape)
{
    bool ok;
    char *path = target_path(c->text + start, end - start, unescape, &ok);
    if (!path)
        return -2;
    long found = -1;
    for (size_t i = 0; ok && i < c->nfiles; i++) {
        if (c->files[i].norm && strcmp(c->files[i].norm, path) == 0) {
            found = (long)i;
            break;
        }
    }
    free(path);
    return found;
}

/* Code points before byte offset `byte`, which is not before the cursor. */
static size_t code_points_to(struct cite_ctx *c, size_t byte)
{
    for (; c->at_byte < byte; c->at_byte++)
        if (((unsigned char)c->text[c->at_byte] & 0xC0) != 0x80)
            c->at_cp++;
    return c->at_cp;
}

static int cite(struct cite_ctx *c, const struct cite_file *f, size_t start, size_t end)
{
    const char *slash = strrchr(f->path, '/');
    const char *filename = slash ? slash + 1 : f->path;
    json_int_t s = (json_int_t)code_points_to(c, start);
    json_int_t e = (json_int_t)code_points_to(c, end);
    json_t *a = json_pack("{s:s, s:O, s:s, s:s, s:I, s:I}", "type", "container_file_citation",
                          "container_id", c->container_id, "file_id", f->id, "filename", filename,
                          "start_index", s, "end_index", e);
    return a ? json_array_append_new(c->out, a) : -1;
}

/* The byte length of the UTF-8 sequence at s when it is one of `marks`
 * (a NULL-terminated list), else 0. */
static size_t mark_at(const char *s, const char *const *marks)
{
    for (size_t i = 0; marks[i]; i++)
        if (starts_with(s, marks[i]))
            return strlen(marks[i]);
    return 0;
}

/* Closing quotes and brackets that end a bare URL, besides the ASCII ones. */
static const char *const closing_marks[] = {"\u201D", "\u2019", "\u00BB", "\u300D",
                                            "\u300F", "\u300B", "\uFF09", NULL};
/* Punctuation that ends a sentence, removed from the end of a bare URL. */
static const char *const ending_marks[] = {"\u3002", "\uFF0C", "\uFF1B", "\uFF1A",
                                           "\uFF01", "\uFF1F", "\u3001", NULL};

/* Where the bare URL starting at `at` ends: *end before the sentence's
 * punctuation, *full with it. */
static void bare_end(const char *text, size_t at, size_t *end, size_t *full)
{
    size_t i = at + SCHEME_LEN;
    while (text[i] && !is_space((unsigned char)text[i]) && !strchr(")]>\"'`<", text[i]) &&
           mark_at(text + i, closing_marks) == 0)
        i++;
    *full = i;
    for (;;) {
        if (i > at + SCHEME_LEN && strchr(".,;:!?", text[i - 1]) != NULL) {
            i--;
            continue;
        }
        bool stripped = false;
        for (size_t m = 0; ending_marks[m]; m++) {
            size_t len = strlen(ending_marks[m]);
            if (i >= at + SCHEME_LEN + len && memcmp(text + i - len, ending_marks[m], len) == 0) {
                i -= len;
                stripped = true;
                break;
            }
        }
        if (!stripped)
            break;
    }
    *end = i;
}

/* Whether [at, end) sits in a link's label: a '[' before it and "](" after
 * it, on the same line, with no other bracket in between. */
static bool in_label(const char *text, size_t at, size_t end)
{
    size_t i = at;
    while (i > 0 && text[i - 1] != '\n' && text[i - 1] != '[' && text[i - 1] != ']')
        i--;
    if (i == 0 || text[i - 1] != '[')
        return false;
    for (i = end; text[i] && text[i] != '\n' && text[i] != '['; i++)
        if (text[i] == ']')
            return text[i + 1] == '(';
    return false;
}

/* Whether the text before `before` (spaces aside) ends with "](". */
static bool after_link_open(const char *text, size_t before)
{
    while (before > 0 && (text[before - 1] == ' ' || text[before - 1] == '\t'))
        before--;
    return before >= 2 && text[before - 1] == '(' && text[before - 2] == ']';
}

/* Cites the occurrence of SCHEME at `at`; returns where scanning resumes,
 * or 0 when out of memory. */
static size_t occurrence(struct cite_ctx *c, size_t at)
{
    const char *text = c->text;
    size_t cand[2];
    size_t ncand = 0;
    bool link = false;

    if (at >= 1 && text[at - 1] == '<' && after_link_open(text, at - 1)) {
        const char *gt = strpbrk(text + at, ">\n");
        if (gt && *gt == '>') {
            cand[ncand++] = (size_t)(gt - text);
            link = true;
        }
    } else if (after_link_open(text, at)) {
        int depth = 0;
        size_t i = at;
        for (; text[i] && text[i] != '\n' && text[i] != '\r'; i++) {
            if (text[i] == '\\' && text[i + 1] && text[i + 1] != '\n')
                i++;
            else if (text[i] == '(')
                depth++;
            else if (text[i] == ')' && depth-- == 0)
                break;
        }
        if (text[i] == ')') {
            size_t end = i;
            while (end > at && is_space((unsigned char)text[end - 1]))
                end--;
            cand[ncand++] = end;
            size_t word = at;
            while (word < end && !is_space((unsigned char)text[word]))
                word++;
            if (word < end)
                cand[ncand++] = word;
            link = true;
        }
    }
    if (!link) {
        size_t end, full;
        bare_end(text, at, &end, &full);
        if (in_label(text, at, full))
            return at + SCHEME_LEN;
        cand[ncand++] = end;
        if (full != end)
            cand[ncand++] = full;
    }

    for (size_t k = 0; k < ncand; k++) {
        long f = find_file(c, at, cand[k], link);
        if (f == -2)
            return 0;
        if (f >= 0) {
            if (cite(c, &c->files[f], at, cand[k]) < 0)
                return 0;
            return cand[k];
        }
    }
    return at + SCHEME_LEN;
}

/* Cites the displayed images no link cited, once each, in their order. */
static int cite_images(struct cite_ctx *c, json_t *images, size_t linked)
{
    size_t i;
    json_t *v;
    json_array_foreach(images, i, v)
    {
        const char *id = json_string_value(v);
        if (!id || !*id)
            continue;
        bool seen = false;
        for (size_t k = 0; k < linked && !seen; k++) {
            const char *fid =
                json_string_value(json_object_get(json_array_get(c->out, k), "file_id"));
            seen = fid && strcmp(fid, id) == 0;
        }
        for (size_t k = 0; k < i && !seen; k++)
            seen = json_equal(json_array_get(images, k), v);
        if (seen)
            continue;
        json_t *a = json_pack("{s:s, s:O, s:s, s:o, s:i, s:i}", "type", "container_file_citation",
                              "container_id", c->container_id, "file_id", id, "filename",
                              json_sprintf("%s.png", id), "start_index", 0, "end_index", 0);
        if (!a || json_array_append_new(c->out, a) < 0)
            return -1;
    }
    return 0;
}

/* Releases what c holds (c->out too, unless it was taken). */
static void cite_ctx_free(struct cite_ctx *c)
{
    for (size_t i = 0; i < c->nfiles; i++)
        free(c->files[i].norm);
    free(c->files);
    json_decref(c->container_id);
    json_decref(c->out);
}

json_t *gw_cite_files(const char *text, const char *container_id, json_t *files, json_t *images)
{
    __attribute__((cleanup(cite_ctx_free))) struct cite_ctx c = {.text = text ? text : ""};
    c.out = json_array();
    c.container_id = container_id ? json_string(container_id) : json_null();
    size_t n = json_is_array(files) ? json_array_size(files) : 0;
    c.files = calloc(n ? n : 1, sizeof(*c.files));
    if (!c.out || !c.container_id || !c.files)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *f = json_array_get(files, i);
        const char *id = json_string_value(json_object_get(f, "id"));
        const char *path = json_string_value(json_object_get(f, "path"));
        c.nfiles++;
        if (!id || !path)
            continue;
        c.files[i].id = id;
        c.files[i].path = path;
        c.files[i].norm = normalize(path, strlen(path));
        if (!c.files[i].norm)
            return NULL;
    }

    const char *hit;
    size_t from = 0;
    while ((hit = strstr(c.text + from, SCHEME)) != NULL) {
        size_t at = (size_t)(hit - c.text);
        if (!starts_with(hit + SCHEME_LEN, "/mnt/data/") &&
            !starts_with(hit + SCHEME_LEN, "mnt/data/")) {
            from = at + SCHEME_LEN;
            continue;
        }
        if ((from = occurrence(&c, at)) == 0)
            return NULL;
    }
    if (json_is_array(images) && cite_images(&c, images, json_array_size(c.out)) < 0)
        return NULL;
    json_t *out = c.out;
    c.out = NULL;
    return out;
}
