/* Monotonic wall-clock time from CLOCK_MONOTONIC. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "core/timer.h"

double cl_time_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
