/*
 * Whether bash typed into `corral repl -l bash` is a whole input yet, as
 * bash's own prompt tells it: an open quote, a compound command not closed
 * (if/fi, for/while/until/select and do/done, case/esac, { }, ( ), (( ))),
 * a function's header without its body, a trailing `|`, `&&`, `||` or `\`,
 * or a here-document without its delimiter line ask for more lines.
 *
 * A scanner, not a parser: it follows quoting, comments and the words in a
 * command's first position, where keywords count. What it cannot tell is
 * taken as complete, and bash reports a syntax error, if any.
 */
#include <stdbool.h>
#include <string.h>

#include "cli/cli.h"

#define NEST_MAX     64 /* compound commands open at once that are followed */
#define HEREDOCS_MAX 8  /* here-documents started on one line */

struct scan {
    const char *p, *end;
    char nest[NEST_MAX]; /* what closes each open construct: 'f' fi, 'd' done,
                            'e' esac, '}', ')', 'a' the )) of (( */
    int depth;
    bool cmd_pos;       /* the next word is a command's first (keywords count) */
    bool want_more;     /* the last token needs another: |, &&, a function's header */
    bool function_name; /* the next word is a function's name (after `function`) */
    bool open;          /* a quote or here-document is open at the end */
    /* here-documents whose bodies follow the line: their delimiters' words
     * as typed (quotes and backslashes in them), at [0] to [1] */
    const char *delim[HEREDOCS_MAX][2];
    bool strip_tabs[HEREDOCS_MAX]; /* <<- */
    int n_heredocs;
};

static void push(struct scan *s, char closer)
{
    if (s->depth < NEST_MAX)
        s->nest[s->depth] = closer;
    s->depth++; /* counted beyond NEST_MAX: never closed early */
}

static char top(const struct scan *s)
{
    return s->depth > 0 && s->depth <= NEST_MAX ? s->nest[s->depth - 1] : 0;
}

static void pop_if(struct scan *s, char closer)
{
    if (s->depth > 0 && (s->depth > NEST_MAX || top(s) == closer))
        s->depth--;
}

/* Whether c ends a word (a NUL byte does not: strchr would find the
 * string's end, and the word would never advance). */
static bool is_meta(char c)
{
    return c && strchr(" \t\n;&|()<>", c) != NULL;
}

/* Past a quote that starts at s->p ('...', "...", `...` or $'...'), or
 * open at the end. */
static void skip_quote(struct scan *s)
{
    char q = *s->p;
    bool escapes = q != '\'';
    if (q == '$') { /* $'...': backslash escapes, ends at ' */
        q = '\'';
        s->p++;
    }
    for (s->p++; s->p < s->end; s->p++) {
        if (escapes && *s->p == '\\') {
            if (++s->p == s->end)
                break;
        } else if (*s->p == q) {
            s->p++;
            return;
        }
    }
    s->open = true;
}

/* Past one word (quotes and backslashes in it); *plain when it has neither. */
static void skip_word(struct scan *s, bool *plain)
{
    *plain = true;
    while (s->p < s->end && !s->open && !is_meta(*s->p)) {
        char c = *s->p;
        if (c == '\\') {
            *plain = false;
            /* a backslash last, or before the last newline: the line goes on */
            bool last = s->end - s->p < 2 || (s->p[1] == '\n' && s->end - s->p == 2);
            s->p = last ? s->end : s->p + 2;
            s->open = last;
        } else if (c == '\'' || c == '"' || c == '`' ||
                   (c == '$' && s->p + 1 < s->end && s->p[1] == '\'')) {
            *plain = false;
            skip_quote(s);
        } else {
            s->p++;
        }
    }
}

static bool word_is(const char *w, size_t n, const char *kw)
{
    return strlen(kw) == n && !memcmp(w, kw, n);
}

/* A word in a command's first position: a keyword opens or closes a
 * compound command, or keeps the next word in that position. */
static void keyword(struct scan *s, const char *w, size_t n)
{
    static const char *const lead[] = {"then", "else", "elif", "do", "!", "time"};
    s->cmd_pos = false;
    for (size_t i = 0; i < sizeof(lead) / sizeof(lead[0]); i++)
        if (word_is(w, n, lead[i]))
            s->cmd_pos = true;
    if (word_is(w, n, "if")) {
        push(s, 'f');
        s->cmd_pos = true;
    } else if (word_is(w, n, "while") || word_is(w, n, "until")) {
        push(s, 'd');
        s->cmd_pos = true;
    } else if (word_is(w, n, "for") || word_is(w, n, "select")) {
        push(s, 'd');
    } else if (word_is(w, n, "case")) {
        push(s, 'e');
    } else if (word_is(w, n, "{")) {
        push(s, '}');
        s->cmd_pos = true;
    } else if (word_is(w, n, "fi")) {
        pop_if(s, 'f');
    } else if (word_is(w, n, "done")) {
        pop_if(s, 'd');
    } else if (word_is(w, n, "esac")) {
        pop_if(s, 'e');
    } else if (word_is(w, n, "}")) {
        pop_if(s, '}');
    } else if (word_is(w, n, "function")) {
        s->function_name = true;
    }
}

static void word(struct scan *s)
{
    const char *w = s->p;
    bool plain;
    skip_word(s, &plain);
    s->want_more = false;
    if (s->function_name) { /* `function NAME`: its body comes next */
        s->function_name = false;
        s->want_more = s->cmd_pos = true;
    } else if (s->cmd_pos && plain) {
        keyword(s, w, (size_t)(s->p - w));
    } else {
        s->cmd_pos = false;
    }
}

/* The delimiter a here-document's word (word to end, as typed) stands
 * for, its quotes taken off, one byte at a time: the next at *p, or -1. */
static int delim_next(const char **p, const char *end)
{
    while (*p < end) {
        char c = *(*p)++;
        if (c == '\\' && *p < end)
            return (unsigned char)*(*p)++;
        if (c != '\'' && c != '"')
            return (unsigned char)c;
    }
    return -1;
}

/* Whether the len bytes at line are the delimiter word to end stands for. */
static bool delim_is(const char *word, const char *end, const char *line, size_t len)
{
    size_t i = 0;
    for (int c; (c = delim_next(&word, end)) >= 0; i++)
        if (i >= len || (unsigned char)line[i] != c)
            return false;
    return i == len;
}

/* After `<<` or `<<-`: the delimiter's word (kept as typed, in the text). */
static void heredoc_start(struct scan *s, bool strip_tabs)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t'))
        s->p++;
    const char *word = s->p;
    while (s->p < s->end && !is_meta(*s->p))
        s->p += *s->p == '\\' && s->p + 1 < s->end ? 2 : 1;
    const char *q = word;
    if (delim_next(&q, s->p) >= 0 && s->n_heredocs < HEREDOCS_MAX) {
        s->delim[s->n_heredocs][0] = word;
        s->delim[s->n_heredocs][1] = s->p;
        s->strip_tabs[s->n_heredocs++] = strip_tabs;
    }
}

/* At the start of a line after one that started here-documents: past
 * their bodies, or open when one has no delimiter line yet. */
static void heredoc_bodies(struct scan *s)
{
    for (int i = 0; i < s->n_heredocs; i++) {
        bool found = false;
        while (!found && s->p < s->end) {
            const char *line = s->p, *eol = memchr(s->p, '\n', (size_t)(s->end - s->p));
            if (!eol)
                eol = s->end;
            s->p = eol < s->end ? eol + 1 : eol;
            while (s->strip_tabs[i] && line < eol && *line == '\t')
                line++;
            found = delim_is(s->delim[i][0], s->delim[i][1], line, (size_t)(eol - line));
        }
        if (!found) {
            s->open = true;
            return;
        }
    }
    s->n_heredocs = 0;
}

/* A redirection at s->p ('<' or '>'): here-documents noted. */
static void redirection(struct scan *s)
{
    if (s->end - s->p >= 3 && !memcmp(s->p, "<<<", 3)) {
        s->p += 3;
    } else if (s->end - s->p >= 2 && s->p[0] == '<' && s->p[1] == '<' && top(s) != 'a') {
        s->p += 2;
        bool tabs = s->p < s->end && *s->p == '-';
        s->p += tabs;
        heredoc_start(s, tabs);
    } else {
        s->p++;
        if (s->p < s->end && strchr("&>|", *s->p))
            s->p++; /* >&, >>, >|, <&, <> */
    }
    s->want_more = false;
}

/* '(' at s->p: a subshell, arithmetic, or a function's header `NAME ()`. */
static void open_paren(struct scan *s)
{
    const char *q = s->p + 1;
    while (q < s->end && (*q == ' ' || *q == '\t'))
        q++;
    s->want_more = false;
    s->cmd_pos = true;
    if (s->p + 1 < s->end && s->p[1] == '(') {
        push(s, 'a');
        s->p += 2;
    } else if (q < s->end && *q == ')') {
        s->want_more = true; /* its body comes next */
        s->p = q + 1;
    } else {
        push(s, ')');
        s->p++;
    }
}

static void close_paren(struct scan *s)
{
    if (top(s) == 'a' && s->p + 1 < s->end && s->p[1] == ')') {
        s->depth--;
        s->p++;
    } else {
        pop_if(s, ')'); /* else a case pattern's end */
    }
    s->p++;
    s->want_more = false;
    s->cmd_pos = true;
}

/* An operator at s->p: ;, ;;, &, &&, |, ||, |&, &>. */
static void operator(struct scan *s)
{
    char c = *s->p++;
    char next = s->p < s->end ? *s->p : 0;
    if (c == '&' && next == '>') { /* &>FILE */
        s->p++;
        s->want_more = false;
        return;
    }
    bool doubled = next == c || (c == '|' && next == '&') || (c == ';' && next == '&');
    s->p += doubled;
    s->want_more = c == '|' || (c == '&' && doubled);
    s->cmd_pos = true;
}

static void step(struct scan *s)
{
    char c = *s->p;
    if (c == ' ' || c == '\t') {
        s->p++;
    } else if (c == '\n') {
        s->p++;
        s->cmd_pos = !s->function_name;
        heredoc_bodies(s);
    } else if (c == '#') {
        const char *eol = memchr(s->p, '\n', (size_t)(s->end - s->p));
        s->p = eol ? eol : s->end;
    } else if (c == '<' || c == '>') {
        redirection(s);
    } else if (c == '(') {
        open_paren(s);
    } else if (c == ')') {
        close_paren(s);
    } else if (c == ';' || c == '&' || c == '|') {
        operator(s);
    } else {
        word(s);
    }
}

bool cli_bash_incomplete(const char *text, size_t len)
{
    struct scan s = {.p = text, .end = text + len, .cmd_pos = true};
    while (s.p < s.end && !s.open)
        step(&s);
    return s.open || s.depth > 0 || s.want_more || s.function_name || s.n_heredocs > 0;
}
