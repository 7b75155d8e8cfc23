/* Aligned allocation with overflow-checked sizes. */
#ifndef CL_CORE_MEM_H
#define CL_CORE_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "classic/status.h"

/* Every buffer is aligned for AVX-512 loads and oneDNN's preferences. */
#define CL_ALIGN 64

/* Returns NULL (and sets the error detail, naming `what`) on failure.
 * Memory from cl_alloc is released with cl_free, nothing else. */
void *cl_alloc(size_t bytes, const char *what);
void *cl_alloc_zero(size_t bytes, const char *what);
void cl_free(void *p);

/* a*b into *out; CL_ERR_LIMIT (detail naming `what`) if it overflows. */
cl_status cl_mul_size(size_t a, size_t b, size_t *out, const char *what);

#endif
