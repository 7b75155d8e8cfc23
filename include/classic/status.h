/* libclassic's status codes, error detail and version: the part of the
 * public API that the library's internals include too. */
#ifndef CLASSIC_STATUS_H
#define CLASSIC_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the functions libclassic.so exports; everything else in the library
 * is compiled with hidden visibility. */
#if defined(__GNUC__)
#define CL_API __attribute__((visibility("default")))
#else
#define CL_API
#endif

#define CL_VERSION_MAJOR 0
#define CL_VERSION_MINOR 1
#define CL_VERSION_PATCH 0
#define CL_VERSION_STRING "0.1.0"

/* Status codes: zero is success, failures are negative.  Generated from one
 * table so that the enum, the names and the default messages never drift. */
#define CL_STATUS_TABLE(X)                                                     \
    X(CL_OK, 0, "success")                                                     \
    X(CL_ERR_NOMEM, -1, "out of memory")                                       \
    X(CL_ERR_IO, -2, "input/output error")                                     \
    X(CL_ERR_FORMAT, -3, "malformed input")                                    \
    X(CL_ERR_ARG, -4, "invalid argument")                                      \
    X(CL_ERR_SHAPE, -5, "shape mismatch")                                      \
    X(CL_ERR_UNSUPPORTED, -6, "unsupported")                                   \
    X(CL_ERR_LIMIT, -7, "input exceeds a limit")                               \
    X(CL_ERR_NUMERIC, -8, "numerical failure")                                 \
    X(CL_ERR_BACKEND, -9, "backend failure")                                   \
    X(CL_ERR_CONFIG, -10, "invalid configuration")                             \
    X(CL_ERR_DIST, -11, "distributed failure")                                 \
    X(CL_ERR_INTERRUPTED, -12, "interrupted")

typedef enum cl_status {
#define CL__STATUS_ENUM(name, value, msg) name = value,
    CL_STATUS_TABLE(CL__STATUS_ENUM)
#undef CL__STATUS_ENUM
} cl_status;

/* "CL_ERR_IO" for CL_ERR_IO; "CL_UNKNOWN" for values outside the table.
 * Thread-safe. */
CL_API const char *cl_status_name(cl_status s);
/* The table's one-line description of s.  Thread-safe. */
CL_API const char *cl_status_message(cl_status s);

/* The detail of the last failure on the calling thread: one sentence that
 * names the file, field or value at fault.  Never NULL; "" when none.
 * Thread-safe: each thread has its own. */
CL_API const char *cl_last_error(void);
/* Empties the calling thread's detail; thread-safe. */
CL_API void cl_clear_error(void);

/* "0.1.0": the library's version; thread-safe. */
CL_API const char *cl_version(void);

#ifdef __cplusplus
}
#endif
#endif
