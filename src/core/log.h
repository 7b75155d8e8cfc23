/* Leveled logging to a caller-owned logger (no global logger state). */
#ifndef CL_CORE_LOG_H
#define CL_CORE_LOG_H

#include <stdio.h>

#include "core/error.h"

typedef enum cl_log_level {
    CL_LOG_ERROR = 0,
    CL_LOG_WARN = 1,
    CL_LOG_INFO = 2,
    CL_LOG_DEBUG = 3
} cl_log_level;

typedef struct cl_logger {
    cl_log_level level; /* messages above this level are dropped */
    FILE *out;          /* NULL means stderr */
    int quiet;          /* non-zero: drop everything (e.g. MPI rank > 0) */
} cl_logger;

/* A logger at INFO on stderr. */
cl_logger cl_logger_default(void);

/* Parses "error|warn|info|debug"; CL_ERR_ARG naming the value otherwise. */
cl_status cl_log_level_parse(const char *s, cl_log_level *out);

/* lg may be NULL: then the default logger is used. */
void cl_log(const cl_logger *lg, cl_log_level lvl, const char *fmt, ...)
    CL_PRINTF(3, 4);

#endif
