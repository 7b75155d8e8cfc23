/* The machine's memory bandwidth, measured as STREAM does: the
 * denominator of the share of it that memory-bound steps reach (`classic
 * bench --profile`), as cpu_peak.h's peak is that of MFU. */
#ifndef CL_CORE_BANDWIDTH_H
#define CL_CORE_BANDWIDTH_H

#include "core/error.h"

typedef struct cl_bandwidth {
    int threads;
    double copy_gbs;  /* a[i] = b[i]: 2 x 8 bytes per element */
    double triad_gbs; /* a[i] = b[i] + s c[i]: 3 x 8 bytes per element */
    double mib;       /* each of the three arrays */
} cl_bandwidth;

/* Times STREAM's copy and triad on three arrays of doubles much larger
 * than the caches, on threads threads (0: OpenMP's count), each thread
 * touching its own part first; the best of several runs, bytes counted
 * as STREAM counts them (no write-allocate traffic). */
cl_status cl_bandwidth_measure(int threads, cl_bandwidth *out);

#endif
