/* A growable byte buffer for building headers, JSON lines and YAML text. */
#ifndef CL_IO_STRBUF_H
#define CL_IO_STRBUF_H

#include <stdarg.h>
#include <stddef.h>

#include "core/error.h"

/* Always NUL-terminated once anything was appended (data may be NULL while
 * empty).  A failed append leaves the buffer as it was and sets `failed`,
 * so a run of appends can be checked once at the end. */
typedef struct cl_strbuf {
    char *data;
    size_t len;
    size_t cap;
    int failed;
} cl_strbuf;

void cl_strbuf_init(cl_strbuf *b);
void cl_strbuf_free(cl_strbuf *b);
cl_status cl_strbuf_reserve(cl_strbuf *b, size_t extra);
cl_status cl_strbuf_add(cl_strbuf *b, const void *p, size_t n);
cl_status cl_strbuf_adds(cl_strbuf *b, const char *s);
cl_status cl_strbuf_addc(cl_strbuf *b, char c);
cl_status cl_strbuf_addf(cl_strbuf *b, const char *fmt, ...) CL_PRINTF(2, 3);
/* `s` as a JSON string literal with quotes; bytes < 0x20, '"' and '\\' are
 * escaped, everything else (UTF-8 included) is copied as is. */
cl_status cl_strbuf_add_json_str(cl_strbuf *b, const char *s, size_t n);
/* A double as JSON: shortest "%.17g"-round-trip text; NaN and +-Inf, which
 * JSON cannot hold, become null. */
cl_status cl_strbuf_add_json_num(cl_strbuf *b, double v);
/* The buffer's text ("" when empty). */
const char *cl_strbuf_str(const cl_strbuf *b);

#endif
