/* One model served: its opened checkpoint (swapped whole on reload), its
 * bounded queue of prepared images and the thread that runs them in
 * batches. */
#ifndef CL_SERVE_BATCHER_H
#define CL_SERVE_BATCHER_H

#include <pthread.h>

#include "classic/classic.h"
#include "serve/metrics.h"

/* One opening of a checkpoint.  Reference-counted: the model holds one
 * while it is current, each request one while it uses it, so a reload
 * frees the old opening only after its last request answered. */
typedef struct cl_serve_gen {
    cl_classifier *c;
    int refs; /* under the model's mutex */
    int in_c, side, num_classes;
    size_t per;     /* in_c * side * side */
    float *bx, *bp; /* the batch's inputs (max_batch, per) and probs */
    /* The largest batch the worker forms: the largest planned size (1, 2,
     * 4, ..., max_batch) whose time per image, measured when opened, is
     * at least CL_SERVE_PAYS below that of the best smaller size. */
    int batch_cap;
    int n_sizes;
    int sizes[8];
    double ms_per_image[8]; /* at sizes[k], the best of three runs */
} cl_serve_gen;

/* How much cheaper per image a larger batch must be to be formed: a batch
 * that costs as much per image only adds the time its requests wait. */
#define CL_SERVE_PAYS 0.9

/* A request's wait for its images. */
typedef struct cl_serve_waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;
} cl_serve_waiter;

/* One image in a queue. */
typedef struct cl_serve_item {
    cl_serve_gen *gen; /* the opening it was prepared for (a reference) */
    const float *x;    /* (in_c, side, side), the request's */
    float *probs;      /* (num_classes), the request's, filled by the batch */
    cl_status status;
    double t_enq;
    cl_serve_waiter *w;
    struct cl_serve_item *next;
} cl_serve_item;

typedef struct cl_serve_model {
    char name[64];
    const char *path;
    const char *precision;
    int index; /* in the metrics */
    int max_batch, cap;
    int batch_max; /* batch_cap is max_batch, not measured */
    double max_delay_s;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* wakes the worker */
    cl_serve_gen *gen;
    cl_serve_item *head, *tail;
    int depth;
    int preparing; /* requests between their body and their queueing */
    int stopping;
    int flush; /* draining: run what is queued without waiting to fill */
    int started;
    pthread_t worker;
    cl_serve_item **batch; /* the worker's, max_batch long */
    cl_serve_metrics *metrics;
} cl_serve_model;

/* Opens m->path into a new opening with its batch plans made and timed
 * (every size up to max_batch, batch_cap), ready to swap in.
 * Thread-safe. */
cl_status cl_serve_gen_open(const cl_serve_model *m, cl_serve_gen **out);
/* The current opening with a reference taken; cl_serve_gen_put drops it. */
cl_serve_gen *cl_serve_gen_get(cl_serve_model *m);
void cl_serve_gen_put(cl_serve_model *m, cl_serve_gen *g);

/* Opens the model and starts its worker. */
cl_status cl_serve_model_start(cl_serve_model *m);
/* Makes g the current opening; requests already holding the old one finish
 * on it. */
void cl_serve_model_swap(cl_serve_model *m, cl_serve_gen *g);
/* From now on batches run without waiting to fill (the server drains). */
void cl_serve_model_flush(cl_serve_model *m);
/* Runs what is queued, stops the worker and frees the opening. */
void cl_serve_model_stop(cl_serve_model *m);

/* A request starts (+1) or stops (-1) preparing images for m: while none
 * is, a batch does not wait for more images that nobody is sending. */
void cl_serve_preparing(cl_serve_model *m, int delta);
/* Queues n items at once (all or none) and ends the caller's preparing:
 * CL_ERR_LIMIT when the queue has no room for them, CL_ERR_INTERRUPTED
 * when the model is stopping. */
cl_status cl_serve_enqueue(cl_serve_model *m, cl_serve_item *items, int n);
/* Images waiting in m's queue. */
int cl_serve_depth(cl_serve_model *m);

void cl_serve_waiter_init(cl_serve_waiter *w, int pending);
/* Blocks until every item of the waiter is answered, then destroys it. */
void cl_serve_waiter_wait(cl_serve_waiter *w);

/* Monotonic seconds. */
double cl_serve_now(void);

#endif
