/* The public API's options structs grow at their end: each starts with a
 * size_t size the caller sets to the sizeof it was built with, and the
 * library reads that much of it. */
#ifndef CL_API_OPTS_H
#define CL_API_OPTS_H

#include <stddef.h>

#include "classic/status.h"

/* dst (dst_size bytes, the library's struct) <- the first src->size bytes
 * of the caller's struct src, the rest zero; src NULL: all zero.  A size
 * smaller than the size field or larger than dst_size (a program built
 * against a newer header) is CL_ERR_ARG naming fn and the struct type. */
cl_status cl_api_read_opts(void *dst, size_t dst_size, const void *src,
                           const char *fn, const char *type);

#endif
