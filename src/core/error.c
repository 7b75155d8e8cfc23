/* Thread-local error detail and the status table's names and messages. */
#include <stdarg.h>
#include <string.h>

#include "core/error.h"

enum { CL_ERROR_MAX = 1024 };

static _Thread_local char cl__detail[CL_ERROR_MAX];

const char *cl_status_name(cl_status s)
{
    switch (s) {
#define CL__STATUS_NAME(name, value, msg)                                      \
    case name:                                                                 \
        return #name;
        CL_STATUS_TABLE(CL__STATUS_NAME)
#undef CL__STATUS_NAME
    }
    return "CL_UNKNOWN";
}

const char *cl_status_message(cl_status s)
{
    switch (s) {
#define CL__STATUS_MSG(name, value, msg)                                       \
    case name:                                                                 \
        return msg;
        CL_STATUS_TABLE(CL__STATUS_MSG)
#undef CL__STATUS_MSG
    }
    return "unknown status";
}

const char *cl_last_error(void)
{
    return cl__detail;
}

void cl_clear_error(void)
{
    cl__detail[0] = '\0';
}

const char *cl_version(void)
{
    return CL_VERSION_STRING;
}

cl_status cl_error(cl_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cl__detail, sizeof cl__detail, fmt, ap);
    va_end(ap);
    return s;
}

cl_status cl_error_wrap(cl_status s, const char *fmt, ...)
{
    char prefix[CL_ERROR_MAX];
    char old[CL_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, cl__detail, sizeof old);
    /* Truncation is wanted: the detail is bounded, the prefix comes first. */
    size_t np = strlen(prefix), no = strlen(old);
    if (np > CL_ERROR_MAX - 1)
        np = CL_ERROR_MAX - 1;
    if (no > CL_ERROR_MAX - 1 - np)
        no = CL_ERROR_MAX - 1 - np;
    memcpy(cl__detail, prefix, np);
    memcpy(cl__detail + np, old, no);
    cl__detail[np + no] = '\0';
    return s;
}
