/* Internal error reporting: set the thread's detail message and return. */
#ifndef CL_CORE_ERROR_H
#define CL_CORE_ERROR_H

#include <stdio.h>
#include <stdlib.h>

#include "classic/status.h"

#if defined(__GNUC__)
#define CL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CL_PRINTF(a, b)
#endif

/* Records a one-sentence detail for the calling thread and returns s, so a
 * failure path reads `return cl_error(CL_ERR_IO, "%s: ...", path);`. */
cl_status cl_error(cl_status s, const char *fmt, ...) CL_PRINTF(2, 3);

/* Prefixes the current detail with more context ("loading x.safetensors: ")
 * and returns s unchanged. */
cl_status cl_error_wrap(cl_status s, const char *fmt, ...) CL_PRINTF(2, 3);

/* Propagates a failing status: `CL_TRY(cl_foo(...));` inside a function that
 * returns cl_status and owns nothing that needs freeing. */
#define CL_TRY(expr)                                                           \
    do {                                                                       \
        cl_status cl__s = (expr);                                              \
        if (cl__s != CL_OK)                                                    \
            return cl__s;                                                      \
    } while (0)

/* Broken internal invariant: a programmer error, never reachable by input. */
#define CL_ASSERT(cond)                                                        \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "classic: internal error at %s:%d: %s\n",          \
                    __FILE__, __LINE__, #cond);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

#endif
