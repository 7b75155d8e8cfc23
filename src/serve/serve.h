/* `classic serve`: trained models behind HTTP (the Open Inference Protocol,
 * a plain classify route, a page and Prometheus metrics) with dynamic
 * batching; docs/serve.md. */
#ifndef CL_SERVE_SERVE_H
#define CL_SERVE_SERVE_H

#include <stddef.h>

#include "classic/status.h"

typedef struct cl_serve_opts {
    int n_models;
    const char *const *names; /* [A-Za-z0-9._-], up to 63 characters */
    const char *const *paths; /* any checkpoint cl_classifier_open reads */
    const char *precision;    /* "f32", "bf16", "int8"; NULL: the model's */
    const char *host;         /* numeric IPv4 or IPv6; NULL: 127.0.0.1 */
    int port;                 /* 0: an ephemeral port (cl_serve_port) */
    int max_batch;            /* images per forward, 1..64 */
    int batch_max;     /* 1: batches up to max_batch even where they do not pay
                          (0: up to the largest that pays, timed at start) */
    int max_delay_ms;  /* how long the oldest image waits for more */
    int queue;         /* images waiting per model */
    const char *token; /* the Bearer token, NULL for none */
    int no_auth;       /* non-zero: another host without a token */
    size_t max_body;   /* bytes of a request body */
    unsigned long long max_pixels; /* of one image, read from its header */
    int max_connections;
    int timeout_s; /* an idle or slow connection is closed after this */
} cl_serve_opts;

/* The defaults of the command line (models, host and token unset). */
void cl_serve_opts_defaults(cl_serve_opts *o);

typedef struct cl_server cl_server;

/* Opens every model, plans its batch sizes and starts listening. */
cl_status cl_serve_start(cl_server **out, const cl_serve_opts *o);
/* The port listened on (what port 0 became). */
int cl_serve_port(const cl_server *s);
/* Model i's name, the precision it runs at and the batches its worker
 * forms, as one line into buf ("" past the last model). */
void cl_serve_describe(cl_server *s, int i, char *buf, size_t n);
/* Opens every model's path again and, once all opened, swaps them in;
 * requests in flight finish on the old openings.  On a failure the old
 * models stay and the failure is returned.  Not concurrent with itself. */
cl_status cl_serve_reload(cl_server *s);
/* Stops accepting, answers what is in flight and queued, and frees the
 * server; NULL is a no-op. */
void cl_serve_stop(cl_server *s);

/* The page at GET / (HTML with its script, no external resource). */
extern const char cl_serve_page[];

#endif
