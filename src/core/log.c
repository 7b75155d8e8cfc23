/* Leveled logging with a time stamp since process start. */
#include <stdarg.h>
#include <string.h>

#include "core/log.h"
#include "core/timer.h"

cl_logger cl_logger_default(void)
{
    cl_logger lg = {CL_LOG_INFO, NULL, 0};
    return lg;
}

cl_status cl_log_level_parse(const char *s, cl_log_level *out)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (cl_log_level)i;
            return CL_OK;
        }
    }
    return cl_error(CL_ERR_ARG,
                    "log level '%s' is not one of error, warn, info, debug", s);
}

void cl_log(const cl_logger *lg, cl_log_level lvl, const char *fmt, ...)
{
    static const char *tags[] = {"error", "warn", "info", "debug"};
    cl_logger def = cl_logger_default();
    if (!lg)
        lg = &def;
    if (lg->quiet || lvl > lg->level)
        return;
    FILE *f = lg->out ? lg->out : stderr;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* One fprintf per line keeps lines whole when threads log at once. */
    fprintf(f, "[%s] %s\n", tags[lvl], msg);
}
