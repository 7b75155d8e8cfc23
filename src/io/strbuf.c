/* Growable byte buffer with printf-style and JSON-literal appends. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "io/strbuf.h"

void cl_strbuf_init(cl_strbuf *b)
{
    memset(b, 0, sizeof *b);
}

void cl_strbuf_free(cl_strbuf *b)
{
    cl_free(b->data);
    memset(b, 0, sizeof *b);
}

cl_status cl_strbuf_reserve(cl_strbuf *b, size_t extra)
{
    if (extra > SIZE_MAX / 2 - b->len - 1) {
        b->failed = 1;
        return cl_error(CL_ERR_LIMIT, "text buffer: %zu + %zu bytes overflows",
                        b->len, extra);
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return CL_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = cl_alloc(cap, "text buffer");
    if (!p) {
        b->failed = 1;
        return CL_ERR_NOMEM;
    }
    if (b->len)
        memcpy(p, b->data, b->len);
    p[b->len] = '\0';
    cl_free(b->data);
    b->data = p;
    b->cap = cap;
    return CL_OK;
}

cl_status cl_strbuf_add(cl_strbuf *b, const void *p, size_t n)
{
    CL_TRY(cl_strbuf_reserve(b, n));
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return CL_OK;
}

cl_status cl_strbuf_adds(cl_strbuf *b, const char *s)
{
    return cl_strbuf_add(b, s, strlen(s));
}

cl_status cl_strbuf_addc(cl_strbuf *b, char c)
{
    return cl_strbuf_add(b, &c, 1);
}

cl_status cl_strbuf_addf(cl_strbuf *b, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        va_end(ap2);
        b->failed = 1;
        return cl_error(CL_ERR_ARG, "text buffer: bad format '%s'", fmt);
    }
    cl_status s = cl_strbuf_reserve(b, (size_t)n);
    if (s == CL_OK) {
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
    return s;
}

cl_status cl_strbuf_add_json_str(cl_strbuf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    CL_TRY(cl_strbuf_addc(b, '"'));
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[7];
        const char *put = NULL;
        switch (c) {
        case '"':
            put = "\\\"";
            break;
        case '\\':
            put = "\\\\";
            break;
        case '\n':
            put = "\\n";
            break;
        case '\r':
            put = "\\r";
            break;
        case '\t':
            put = "\\t";
            break;
        case '\b':
            put = "\\b";
            break;
        case '\f':
            put = "\\f";
            break;
        default:
            if (c < 0x20) {
                memcpy(esc, "\\u00", 4);
                esc[4] = hex[c >> 4];
                esc[5] = hex[c & 15];
                esc[6] = '\0';
                put = esc;
            }
        }
        if (put)
            CL_TRY(cl_strbuf_adds(b, put));
        else
            CL_TRY(cl_strbuf_addc(b, (char)c));
    }
    return cl_strbuf_addc(b, '"');
}

cl_status cl_strbuf_add_json_num(cl_strbuf *b, double v)
{
    if (!isfinite(v))
        return cl_strbuf_adds(b, "null");
    /* Integers that a double holds exactly print without an exponent. */
    if (v == floor(v) && fabs(v) < 9007199254740992.0)
        return cl_strbuf_addf(b, "%.0f", v);
    /* The shortest of %.15g/%.16g/%.17g that reads back bit-exact. */
    char tmp[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v)
            break;
    }
    return cl_strbuf_adds(b, tmp);
}

const char *cl_strbuf_str(const cl_strbuf *b)
{
    return b->data ? b->data : "";
}
