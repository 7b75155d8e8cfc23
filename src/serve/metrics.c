/* Prometheus text exposition of the server's counters, kept under one
 * mutex: a handful of additions per request is far from contention. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "serve/metrics.h"

static const int statuses[CL_SERVE_N_STATUS] = {CL_SERVE_STATUSES};
/* Latency buckets in seconds, from a small model's 1 ms to a queue's 10 s. */
static const double lat_le[CL_SERVE_N_LAT] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const int batch_le[CL_SERVE_N_BATCH] = {1, 2, 4, 8, 16, 32, 64};

cl_status cl_serve_metrics_init(cl_serve_metrics *m, int n_models)
{
    memset(m, 0, sizeof *m);
    m->n = n_models;
    m->counts = calloc((size_t)n_models + 1, sizeof *m->counts);
    if (!m->counts)
        return cl_error(CL_ERR_NOMEM, "serve: out of memory for metrics");
    pthread_mutex_init(&m->mu, NULL);
    return CL_OK;
}

void cl_serve_metrics_free(cl_serve_metrics *m)
{
    if (!m->counts)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m->counts);
    m->counts = NULL;
}

void cl_serve_metrics_request(cl_serve_metrics *m, int model, int code,
                              double seconds)
{
    int k = CL_SERVE_N_STATUS - 1, b = 0;
    for (int i = 0; i < CL_SERVE_N_STATUS; i++)
        if (statuses[i] == code)
            k = i;
    while (b < CL_SERVE_N_LAT && seconds > lat_le[b])
        b++;
    pthread_mutex_lock(&m->mu);
    cl_serve_counts *c = &m->counts[model < 0 ? m->n : model];
    c->requests[k]++;
    if (code == 200 && seconds >= 0) {
        c->lat[b]++;
        c->lat_sum += seconds;
        c->lat_n++;
    }
    pthread_mutex_unlock(&m->mu);
}

void cl_serve_metrics_batch(cl_serve_metrics *m, int model, int n, double now)
{
    int b = 0;
    while (b < CL_SERVE_N_BATCH && n > batch_le[b])
        b++;
    pthread_mutex_lock(&m->mu);
    cl_serve_counts *c = &m->counts[model];
    c->batch[b]++;
    c->batch_sum += n;
    c->batch_n++;
    c->images += (unsigned long long)n;
    if (c->win_start == 0)
        c->win_start = now;
    c->win_images += (unsigned long long)n;
    if (now - c->win_start >= 5) {
        c->rate = (double)c->win_images / (now - c->win_start);
        c->win_start = now;
        c->win_images = 0;
    }
    pthread_mutex_unlock(&m->mu);
}

cl_status cl_serve_metrics_render(cl_serve_metrics *m, const char *const *names,
                                  const int *depth, double now, cl_strbuf *b)
{
    pthread_mutex_lock(&m->mu);
    cl_strbuf_adds(b, "# HELP classic_requests_total HTTP requests answered, "
                      "by model and status.\n"
                      "# TYPE classic_requests_total counter\n");
    for (int i = 0; i <= m->n; i++)
        for (int k = 0; k < CL_SERVE_N_STATUS; k++)
            if (m->counts[i].requests[k] || i < m->n)
                cl_strbuf_addf(
                    b,
                    "classic_requests_total{model=\"%s\",code=\"%d\"}"
                    " %llu\n",
                    i < m->n ? names[i] : "", statuses[k],
                    m->counts[i].requests[k]);
    cl_strbuf_adds(b, "# HELP classic_request_seconds Latency of the "
                      "successful inference requests, arrival to answer.\n"
                      "# TYPE classic_request_seconds histogram\n");
    for (int i = 0; i < m->n; i++) {
        const cl_serve_counts *c = &m->counts[i];
        unsigned long long cum = 0;
        for (int k = 0; k <= CL_SERVE_N_LAT; k++) {
            cum += c->lat[k];
            if (k < CL_SERVE_N_LAT)
                cl_strbuf_addf(b,
                               "classic_request_seconds_bucket{model=\"%s\","
                               "le=\"%g\"} %llu\n",
                               names[i], lat_le[k], cum);
            else
                cl_strbuf_addf(b,
                               "classic_request_seconds_bucket{model=\"%s\","
                               "le=\"+Inf\"} %llu\n",
                               names[i], cum);
        }
        cl_strbuf_addf(b, "classic_request_seconds_sum{model=\"%s\"} %.6f\n",
                       names[i], c->lat_sum);
        cl_strbuf_addf(b, "classic_request_seconds_count{model=\"%s\"} %llu\n",
                       names[i], c->lat_n);
    }
    cl_strbuf_adds(b, "# HELP classic_batch_size Images per forward.\n"
                      "# TYPE classic_batch_size histogram\n");
    for (int i = 0; i < m->n; i++) {
        const cl_serve_counts *c = &m->counts[i];
        unsigned long long cum = 0;
        for (int k = 0; k <= CL_SERVE_N_BATCH; k++) {
            cum += c->batch[k];
            if (k < CL_SERVE_N_BATCH)
                cl_strbuf_addf(b,
                               "classic_batch_size_bucket{model=\"%s\","
                               "le=\"%d\"} %llu\n",
                               names[i], batch_le[k], cum);
            else
                cl_strbuf_addf(b,
                               "classic_batch_size_bucket{model=\"%s\","
                               "le=\"+Inf\"} %llu\n",
                               names[i], cum);
        }
        cl_strbuf_addf(b, "classic_batch_size_sum{model=\"%s\"} %.0f\n",
                       names[i], c->batch_sum);
        cl_strbuf_addf(b, "classic_batch_size_count{model=\"%s\"} %llu\n",
                       names[i], c->batch_n);
    }
    cl_strbuf_adds(b, "# HELP classic_queue_depth Images waiting for a "
                      "batch.\n# TYPE classic_queue_depth gauge\n");
    for (int i = 0; i < m->n; i++)
        cl_strbuf_addf(b, "classic_queue_depth{model=\"%s\"} %d\n", names[i],
                       depth[i]);
    cl_strbuf_adds(b, "# HELP classic_images_total Images classified.\n"
                      "# TYPE classic_images_total counter\n");
    for (int i = 0; i < m->n; i++)
        cl_strbuf_addf(b, "classic_images_total{model=\"%s\"} %llu\n", names[i],
                       m->counts[i].images);
    cl_strbuf_adds(b, "# HELP classic_images_per_second Images classified "
                      "per second over the last window of 5 s or more.\n"
                      "# TYPE classic_images_per_second gauge\n");
    for (int i = 0; i < m->n; i++) {
        const cl_serve_counts *c = &m->counts[i];
        /* A window that closed long ago says nothing of now. */
        double r = now - c->win_start > 10 ? 0 : c->rate;
        cl_strbuf_addf(b, "classic_images_per_second{model=\"%s\"} %.3f\n",
                       names[i], r);
    }
    pthread_mutex_unlock(&m->mu);
    return b->failed ? cl_error(CL_ERR_NOMEM, "metrics: out of memory") : CL_OK;
}
