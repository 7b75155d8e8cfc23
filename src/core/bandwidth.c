/* STREAM's copy and triad, for the memory bandwidth memory-bound steps
 * are held against. */
#include <omp.h>
#include <stddef.h>

#include "core/bandwidth.h"
#include "core/mem.h"
#include "core/timer.h"

/* Elements per array: 3 x 48 MiB, far above any L3 of the CPUs classic
 * runs on per thread pair, so each run streams from memory. */
enum { BW_N = 6 * 1024 * 1024, BW_RUNS = 6 };

cl_status cl_bandwidth_measure(int threads, cl_bandwidth *out)
{
    const long n = BW_N;
    const int nt = threads > 0 ? threads : omp_get_max_threads();
    double *a = cl_alloc(sizeof(double) * (size_t)n, "bandwidth");
    double *b = cl_alloc(sizeof(double) * (size_t)n, "bandwidth");
    double *c = cl_alloc(sizeof(double) * (size_t)n, "bandwidth");
    if (!a || !b || !c) {
        cl_free(a);
        cl_free(b);
        cl_free(c);
        return CL_ERR_NOMEM;
    }
    /* First touch by the thread that streams each part later. */
#pragma omp parallel for schedule(static) num_threads(nt)
    for (long i = 0; i < n; i++) {
        a[i] = 1.0;
        b[i] = 2.0;
        c[i] = 0.5;
    }
    double best_copy = 1e30, best_triad = 1e30;
    const double s = 3.0;
    for (int r = 0; r < BW_RUNS; r++) {
        double t0 = cl_time_now();
#pragma omp parallel for schedule(static) num_threads(nt)
        for (long i = 0; i < n; i++)
            c[i] = a[i];
        double t1 = cl_time_now();
#pragma omp parallel for schedule(static) num_threads(nt)
        for (long i = 0; i < n; i++)
            a[i] = b[i] + s * c[i];
        double t2 = cl_time_now();
        if (t1 - t0 < best_copy)
            best_copy = t1 - t0;
        if (t2 - t1 < best_triad)
            best_triad = t2 - t1;
    }
    /* a[0] is read so that the loops are not thrown away. */
    volatile double keep = a[0] + c[n - 1];
    (void)keep;
    out->threads = nt;
    out->mib = (double)n * sizeof(double) / (1024.0 * 1024.0);
    out->copy_gbs = 2.0 * sizeof(double) * (double)n / best_copy / 1e9;
    out->triad_gbs = 3.0 * sizeof(double) * (double)n / best_triad / 1e9;
    cl_free(a);
    cl_free(b);
    cl_free(c);
    return CL_OK;
}
