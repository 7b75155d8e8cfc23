/* The server's counters in Prometheus' text format: requests by model and
 * status, latency and batch-size histograms, queue depth and images/s. */
#ifndef CL_SERVE_METRICS_H
#define CL_SERVE_METRICS_H

#include <pthread.h>

#include "io/strbuf.h"

/* The statuses counted, in this order; anything else counts as the last. */
#define CL_SERVE_STATUSES 200, 400, 401, 404, 405, 413, 415, 503, 500
enum { CL_SERVE_N_STATUS = 9, CL_SERVE_N_LAT = 14, CL_SERVE_N_BATCH = 7 };

/* One model's numbers; the server's own routes count under model "". */
typedef struct cl_serve_counts {
    unsigned long long requests[CL_SERVE_N_STATUS];
    unsigned long long lat[CL_SERVE_N_LAT + 1]; /* per bucket, last +Inf */
    double lat_sum;
    unsigned long long lat_n;
    unsigned long long batch[CL_SERVE_N_BATCH + 1];
    double batch_sum;
    unsigned long long batch_n;
    unsigned long long images;
    /* images/s over the last window of at least 5 s */
    double win_start, rate;
    unsigned long long win_images;
} cl_serve_counts;

typedef struct cl_serve_metrics {
    pthread_mutex_t mu;
    int n; /* models; counts[n] is the server's own */
    cl_serve_counts *counts;
} cl_serve_metrics;

cl_status cl_serve_metrics_init(cl_serve_metrics *m, int n_models);
void cl_serve_metrics_free(cl_serve_metrics *m);
/* A request answered with HTTP status code; model -1 for no model;
 * seconds < 0 keeps it out of the latency histogram. */
void cl_serve_metrics_request(cl_serve_metrics *m, int model, int code,
                              double seconds);
/* A batch of n images run at time now (seconds, monotonic). */
void cl_serve_metrics_batch(cl_serve_metrics *m, int model, int n, double now);
/* The Prometheus exposition into b; names[i] and depth[i] per model. */
cl_status cl_serve_metrics_render(cl_serve_metrics *m, const char *const *names,
                                  const int *depth, double now, cl_strbuf *b);

#endif
