/* Gradient allreduce time against message size, through the path training
 * uses (cl_dist_grad_sync: one bucket of n floats, MPI_Iallreduce, the
 * watchdog wait, the division by the world size).  Run under mpirun:
 *
 *   mpirun -np 2 build/allreduce_bench [MAX_MB]
 *
 * Rank 0 prints one line per size: bytes, the median and the best of the
 * repetitions in milliseconds, and the bus bandwidth 2(N-1)/N * bytes / t
 * (what a ring allreduce moves through each rank's link), in GB/s.  The
 * data for docs/distributed.md's scaling model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/timer.h"
#include "dist/dist.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    cl_dist d;
    if (cl_dist_init(&d, &argc, &argv) != CL_OK) {
        fprintf(stderr, "allreduce_bench: %s\n", cl_last_error());
        return 1;
    }
    double max_mb = argc > 1 ? atof(argv[1]) : 128;
    size_t max_n = (size_t)(max_mb * 1048576.0 / sizeof(float));
    float *g = cl_alloc_zero(max_n * sizeof(float), "gradients");
    if (!g) {
        cl_dist_abort(&d, 1);
        return 1;
    }
    if (d.rank == 0)
        printf("# %d ranks; bytes, median ms, best ms, bus GB/s (median)\n",
               d.size);
    for (size_t n = 1024; n <= max_n; n *= 4) {
        cl_dist_segment seg = {.tensor = 0, .offset = 0, .n = n};
        cl_dist_sync_opts o = cl_dist_sync_opts_default();
        o.mode = CL_DIST_SYNC_BLOCKING;
        cl_dist_grad_sync *s = NULL;
        if (cl_dist_grad_sync_create(&s, &d, g, n, &seg, 1, &o) != CL_OK) {
            fprintf(stderr, "allreduce_bench: %s\n", cl_last_error());
            cl_dist_abort(&d, 1);
            return 1;
        }
        /* Fewer repetitions of the large sizes: about 1 GB moved each. */
        int reps = n * sizeof(float) > (64u << 20) ? 5 : 11;
        double t[11];
        for (int r = -1; r < reps; r++) {
            if (cl_dist_barrier(&d) != CL_OK) {
                cl_dist_abort(&d, 1);
                return 1;
            }
            double t0 = cl_time_now();
            if (cl_dist_grad_wait(s) != CL_OK) {
                fprintf(stderr, "allreduce_bench: %s\n", cl_last_error());
                cl_dist_abort(&d, 1);
                return 1;
            }
            if (r >= 0) /* the first is a warm-up */
                t[r] = cl_time_now() - t0;
        }
        /* Rank 0's clock: every rank leaves the barrier together and the
         * allreduce ends on all of them within one message's latency. */
        double v[11];
        memcpy(v, t, (size_t)reps * sizeof v[0]);
        cl_dist_grad_sync_free(s);
        qsort(v, (size_t)reps, sizeof v[0], cmp_double);
        double med = v[reps / 2], best = v[0];
        double bytes = (double)n * sizeof(float);
        if (d.rank == 0)
            printf("%12.0f %10.3f %10.3f %8.3f\n", bytes, 1e3 * med, 1e3 * best,
                   med > 0 ? 2.0 * (d.size - 1) / d.size * bytes / med / 1e9
                           : 0.0);
        fflush(stdout);
    }
    cl_free(g);
    cl_dist_finalize(&d);
    return 0;
}
