/* Monotonic wall-clock time. */
#ifndef CL_CORE_TIMER_H
#define CL_CORE_TIMER_H

/* Seconds from an arbitrary fixed origin; never goes backwards. */
double cl_time_now(void);

#endif
