/* Strict recursive-descent JSON parser building a tree in an arena. */
#include <errno.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "io/json.h"

/* Nodes and strings come from a chain of blocks freed all at once. */
typedef struct block {
    struct block *prev;
    size_t used, cap;
    /* payload follows */
} block;

struct cl_json_doc {
    block *blocks;
    cl_json *root;
};

typedef struct parser {
    const char *s;
    size_t n, pos;
    int max_depth;
    size_t max_nodes, nodes;
    const char *name;
    cl_json_doc *doc;
} parser;

static void *arena_alloc(cl_json_doc *d, size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t)15;
    block *b = d->blocks;
    if (!b || b->cap - b->used < bytes) {
        size_t cap = 64 * 1024;
        if (bytes > cap)
            cap = bytes;
        b = cl_alloc(sizeof(block) + 16 + cap, "JSON tree");
        if (!b)
            return NULL;
        b->prev = d->blocks;
        b->used = 0;
        b->cap = cap;
        d->blocks = b;
    }
    /* The payload starts 16-aligned after the header. */
    char *base = (char *)b + ((sizeof(block) + 15) & ~(size_t)15);
    void *p = base + b->used;
    b->used += bytes;
    return p;
}

static cl_status fail(parser *p, const char *what)
{
    return cl_error(CL_ERR_FORMAT, "%s: JSON at byte %zu: %s", p->name, p->pos,
                    what);
}

static void skip_ws(parser *p)
{
    while (p->pos < p->n) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int read_hex4(parser *p, size_t at, unsigned *out)
{
    if (at + 4 > p->n)
        return 0;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(p->s[at + k]);
        if (h < 0)
            return 0;
        v = v * 16 + (unsigned)h;
    }
    *out = v;
    return 1;
}

/* Length of the valid UTF-8 sequence at s[0..avail), 0 if invalid
 * (overlong forms, surrogates and code points above U+10FFFF refused). */
static size_t utf8_len(const unsigned char *s, size_t avail)
{
    unsigned c = s[0];
    size_t n;
    unsigned cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (avail < n)
        return 0;
    for (size_t k = 1; k < n; k++) {
        if ((s[k] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* At the opening quote; decodes into the arena (never longer than the
 * source, so the source length bounds the allocation). */
static cl_status parse_string(parser *p, const char **out, size_t *out_len)
{
    size_t start = ++p->pos;
    size_t end = start;
    /* First pass: find the closing quote to size the output. */
    while (end < p->n && p->s[end] != '"') {
        if (p->s[end] == '\\')
            end++;
        end++;
    }
    if (end >= p->n) {
        p->pos = start - 1;
        return fail(p, "unterminated string");
    }
    char *o = arena_alloc(p->doc, end - start + 1);
    if (!o)
        return CL_ERR_NOMEM;
    size_t k = 0;
    while (p->pos < end) {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c < 0x20)
            return fail(p, "control character inside a string (must be "
                           "escaped)");
        if (c != '\\') {
            size_t m =
                utf8_len((const unsigned char *)p->s + p->pos, end - p->pos);
            if (m == 0)
                return fail(p, "invalid UTF-8 inside a string");
            memcpy(o + k, p->s + p->pos, m);
            k += m;
            p->pos += m;
            continue;
        }
        char e = p->s[p->pos + 1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e != '\0' && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            o[k++] = map[simple - "\"\\/bfnrt"];
            p->pos += 2;
            continue;
        }
        if (e != 'u')
            return fail(p, "invalid escape in string");
        unsigned cp;
        if (!read_hex4(p, p->pos + 2, &cp))
            return fail(p, "\\u must be followed by 4 hex digits");
        size_t used = 6;
        if (cp >= 0xDC00 && cp <= 0xDFFF)
            return fail(p, "lone low surrogate in \\u escape");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            unsigned lo;
            if (p->pos + 12 > end)
                return fail(p, "high surrogate without its low half");
            if (p->s[p->pos + 6] != '\\' || p->s[p->pos + 7] != 'u' ||
                !read_hex4(p, p->pos + 8, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                return fail(p, "high surrogate without its low half");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            used = 12;
        }
        /* Six source bytes give at most 3 (or 12 give 4) output bytes. */
        k += put_utf8(o + k, cp);
        p->pos += used;
    }
    o[k] = '\0';
    p->pos = end + 1;
    *out = o;
    *out_len = k;
    return CL_OK;
}

static cl_status parse_number(parser *p, cl_json *v)
{
    size_t start = p->pos;
    const char *s = p->s;
    size_t i = p->pos;
    int integral = 1;
    if (i < p->n && s[i] == '-')
        i++;
    if (i >= p->n || !(s[i] >= '0' && s[i] <= '9'))
        return fail(p, "invalid number");
    if (s[i] == '0') {
        i++;
        if (i < p->n && s[i] >= '0' && s[i] <= '9')
            return fail(p, "number with a leading zero");
    } else {
        while (i < p->n && s[i] >= '0' && s[i] <= '9')
            i++;
    }
    if (i < p->n && s[i] == '.') {
        integral = 0;
        i++;
        if (i >= p->n || !(s[i] >= '0' && s[i] <= '9'))
            return p->pos = i, fail(p, "digit expected after '.'");
        while (i < p->n && s[i] >= '0' && s[i] <= '9')
            i++;
    }
    if (i < p->n && (s[i] == 'e' || s[i] == 'E')) {
        integral = 0;
        i++;
        if (i < p->n && (s[i] == '+' || s[i] == '-'))
            i++;
        if (i >= p->n || !(s[i] >= '0' && s[i] <= '9'))
            return p->pos = i, fail(p, "digit expected in exponent");
        while (i < p->n && s[i] >= '0' && s[i] <= '9')
            i++;
    }
    /* strtod needs a terminated copy; numbers are short unless hostile. */
    size_t len = i - start;
    if (len > 400)
        return fail(p, "number longer than 400 characters");
    char tmp[404];
    memcpy(tmp, s + start, len);
    tmp[len] = '\0';
    v->type = CL_JSON_NUM;
    v->num = strtod(tmp, NULL);
    v->is_int = 0;
    if (integral) {
        errno = 0;
        long long ll = strtoll(tmp, NULL, 10);
        if (errno == 0) {
            v->is_int = 1;
            v->i = (int64_t)ll;
        }
    }
    p->pos = i;
    return CL_OK;
}

static int match_word(parser *p, const char *w)
{
    size_t n = strlen(w);
    if (p->n - p->pos >= n && memcmp(p->s + p->pos, w, n) == 0) {
        p->pos += n;
        return 1;
    }
    return 0;
}

static cl_status parse_value(parser *p, cl_json *v, int depth);

static cl_status parse_container(parser *p, cl_json *v, int depth, int obj)
{
    char close = obj ? '}' : ']';
    if (depth >= p->max_depth) {
        char msg[96];
        snprintf(msg, sizeof msg, "nesting deeper than %d levels",
                 p->max_depth);
        return fail(p, msg);
    }
    v->type = obj ? CL_JSON_OBJ : CL_JSON_ARR;
    p->pos++;
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == close) {
        p->pos++;
        return CL_OK;
    }
    cl_json **tail = &v->child;
    for (;;) {
        if (++p->nodes > p->max_nodes) {
            char msg[96];
            snprintf(msg, sizeof msg, "more than %zu values", p->max_nodes);
            return fail(p, msg);
        }
        cl_json *m = arena_alloc(p->doc, sizeof *m);
        if (!m)
            return CL_ERR_NOMEM;
        memset(m, 0, sizeof *m);
        skip_ws(p);
        if (obj) {
            if (p->pos >= p->n || p->s[p->pos] != '"')
                return fail(p, "expected a string key in object");
            CL_TRY(parse_string(p, &m->key, &m->key_len));
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != ':')
                return fail(p, "expected ':' after object key");
            p->pos++;
        }
        CL_TRY(parse_value(p, m, depth + 1));
        *tail = m;
        tail = &m->next;
        v->count++;
        skip_ws(p);
        if (p->pos >= p->n)
            return fail(p, obj ? "unterminated object" : "unterminated array");
        char c = p->s[p->pos];
        if (c == close) {
            p->pos++;
            return CL_OK;
        }
        if (c != ',')
            return fail(p, obj ? "expected ',' or '}' in object"
                               : "expected ',' or ']' in array");
        p->pos++;
        skip_ws(p);
        if (p->pos < p->n && p->s[p->pos] == close)
            return fail(p, "trailing comma");
    }
}

static cl_status parse_value(parser *p, cl_json *v, int depth)
{
    skip_ws(p);
    if (p->pos >= p->n)
        return fail(p, "unexpected end of input, value expected");
    v->offset = p->pos;
    char c = p->s[p->pos];
    switch (c) {
    case '{':
        return parse_container(p, v, depth, 1);
    case '[':
        return parse_container(p, v, depth, 0);
    case '"':
        v->type = CL_JSON_STR;
        return parse_string(p, &v->str, &v->len);
    case 't':
    case 'f':
    case 'n':
        if (match_word(p, "true")) {
            v->type = CL_JSON_BOOL;
            v->boolean = 1;
        } else if (match_word(p, "false")) {
            v->type = CL_JSON_BOOL;
        } else if (match_word(p, "null")) {
            v->type = CL_JSON_NULL;
        } else {
            return fail(p, "invalid literal");
        }
        return CL_OK;
    default:
        if (c == '-' || (c >= '0' && c <= '9'))
            return parse_number(p, v);
        return fail(p, "unexpected character, value expected");
    }
}

cl_status cl_json_parse(cl_json_doc **out, const char *text, size_t len,
                        const cl_json_limits *lim, const char *name)
{
    cl_status s;
    *out = NULL;
    cl_json_doc *d = cl_alloc_zero(sizeof *d, "JSON document");
    if (!d)
        return CL_ERR_NOMEM;
    parser p = {text,
                len,
                0,
                CL_JSON_MAX_DEPTH,
                CL_JSON_MAX_NODES,
                1,
                name ? name : "JSON",
                d};
    if (lim && lim->max_depth > 0)
        p.max_depth = lim->max_depth;
    if (lim && lim->max_nodes > 0)
        p.max_nodes = lim->max_nodes;
    d->root = arena_alloc(d, sizeof *d->root);
    if (!d->root) {
        s = CL_ERR_NOMEM;
        goto fail;
    }
    memset(d->root, 0, sizeof *d->root);
    s = parse_value(&p, d->root, 0);
    if (s != CL_OK)
        goto fail;
    skip_ws(&p);
    if (p.pos != len) {
        s = fail(&p, "unexpected text after the value");
        goto fail;
    }
    *out = d;
    return CL_OK;
fail:
    cl_json_free(d);
    return s;
}

const cl_json *cl_json_root(const cl_json_doc *d)
{
    return d->root;
}

void cl_json_free(cl_json_doc *d)
{
    if (!d)
        return;
    block *b = d->blocks;
    while (b) {
        block *prev = b->prev;
        cl_free(b);
        b = prev;
    }
    cl_free(d);
}

const cl_json *cl_json_get(const cl_json *o, const char *key)
{
    if (!o || o->type != CL_JSON_OBJ)
        return NULL;
    size_t n = strlen(key);
    for (const cl_json *m = o->child; m; m = m->next)
        if (m->key_len == n && memcmp(m->key, key, n) == 0)
            return m;
    return NULL;
}

const char *cl_json_type_name(cl_json_type t)
{
    switch (t) {
    case CL_JSON_NULL:
        return "null";
    case CL_JSON_BOOL:
        return "boolean";
    case CL_JSON_NUM:
        return "number";
    case CL_JSON_STR:
        return "string";
    case CL_JSON_ARR:
        return "array";
    case CL_JSON_OBJ:
        return "object";
    }
    return "?";
}
