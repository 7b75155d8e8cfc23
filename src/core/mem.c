/* Aligned allocation: posix_memalign under a checked size. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"

void *cl_alloc(size_t bytes, const char *what)
{
    void *p = NULL;
    if (bytes == 0)
        bytes = CL_ALIGN;
    /* Round up so that vector loops may touch the whole last line. */
    if (bytes > SIZE_MAX - CL_ALIGN) {
        cl_error(CL_ERR_LIMIT, "%s: %zu bytes is more than can be allocated",
                 what, bytes);
        return NULL;
    }
    bytes = (bytes + CL_ALIGN - 1) / CL_ALIGN * CL_ALIGN;
    if (posix_memalign(&p, CL_ALIGN, bytes) != 0) {
        cl_error(CL_ERR_NOMEM, "%s: cannot allocate %zu bytes", what, bytes);
        return NULL;
    }
    return p;
}

void *cl_alloc_zero(size_t bytes, const char *what)
{
    void *p = cl_alloc(bytes, what);
    if (p)
        memset(p, 0, bytes);
    return p;
}

void cl_free(void *p)
{
    free(p);
}

cl_status cl_mul_size(size_t a, size_t b, size_t *out, const char *what)
{
    if (a != 0 && b > SIZE_MAX / a)
        return cl_error(CL_ERR_LIMIT, "%s: size %zu x %zu overflows", what, a,
                        b);
    *out = a * b;
    return CL_OK;
}
