/* Dynamic batching: one bounded queue per model and one thread that runs
 * its images batch_cap at a time (the largest batch that pays on this
 * CPU, measured when the model is opened, at most max_batch), or fewer
 * once the oldest has waited max_delay; the openings of a checkpoint are
 * reference-counted so that a reload never fails a request. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "serve/batcher.h"

double cl_serve_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void gen_free(cl_serve_gen *g)
{
    if (!g)
        return;
    cl_classifier_free(g->c);
    free(g->bx);
    free(g->bp);
    free(g);
}

cl_status cl_serve_gen_open(const cl_serve_model *m, cl_serve_gen **out)
{
    *out = NULL;
    cl_serve_gen *g = calloc(1, sizeof *g);
    if (!g)
        return cl_error(CL_ERR_NOMEM, "serve: out of memory");
    cl_classifier_opts o = {.size = sizeof o, .precision = m->precision};
    cl_status s = cl_classifier_open(&g->c, m->path, &o);
    if (s == CL_OK)
        s = cl_classifier_input(g->c, &g->in_c, &g->side);
    if (s != CL_OK) {
        gen_free(g);
        return cl_error_wrap(s, "model %s: ", m->name);
    }
    g->num_classes = cl_classifier_num_classes(g->c);
    g->per = (size_t)g->in_c * g->side * g->side;
    g->bx = calloc((size_t)m->max_batch * g->per, sizeof *g->bx);
    g->bp = calloc((size_t)m->max_batch * g->num_classes, sizeof *g->bp);
    if (!g->bx || !g->bp) {
        gen_free(g);
        return cl_error(CL_ERR_NOMEM,
                        "model %s: out of memory for %d "
                        "images",
                        m->name, m->max_batch);
    }
    /* Plan every batch size the worker may run now, not on a request, and
     * time each: whether batching pays depends on the model and the CPU
     * (ResNet-50 at 224 px costs as much per image at 1 as at 16 on two
     * cores, at 28 px half as much at 16), so it is measured here. */
    for (int n = 1; s == CL_OK && g->n_sizes < 8; n *= 2) {
        if (n > m->max_batch)
            n = m->max_batch;
        g->sizes[g->n_sizes] = n;
        s = cl_classifier_forward(g->c, n, g->bx, g->bp);
        double best = 0.0;
        for (int r = 0; s == CL_OK && r < 3; r++) {
            double t0 = cl_serve_now();
            s = cl_classifier_forward(g->c, n, g->bx, g->bp);
            double dt = cl_serve_now() - t0;
            if (r == 0 || dt < best)
                best = dt;
        }
        g->ms_per_image[g->n_sizes++] = 1e3 * best / n;
        if (n == m->max_batch)
            break;
    }
    g->batch_cap = m->batch_max ? m->max_batch : 1;
    double cap_ms = g->n_sizes && !m->batch_max ? g->ms_per_image[0] : 0.0;
    for (int k = 1; k < g->n_sizes; k++)
        if (g->ms_per_image[k] < CL_SERVE_PAYS * cap_ms) {
            g->batch_cap = g->sizes[k];
            cap_ms = g->ms_per_image[k];
        }
    if (s != CL_OK) {
        gen_free(g);
        return cl_error_wrap(s, "model %s: ", m->name);
    }
    g->refs = 1;
    *out = g;
    return CL_OK;
}

cl_serve_gen *cl_serve_gen_get(cl_serve_model *m)
{
    pthread_mutex_lock(&m->mu);
    cl_serve_gen *g = m->gen;
    g->refs++;
    pthread_mutex_unlock(&m->mu);
    return g;
}

void cl_serve_gen_put(cl_serve_model *m, cl_serve_gen *g)
{
    pthread_mutex_lock(&m->mu);
    int last = --g->refs == 0;
    pthread_mutex_unlock(&m->mu);
    if (last)
        gen_free(g);
}

void cl_serve_model_swap(cl_serve_model *m, cl_serve_gen *g)
{
    pthread_mutex_lock(&m->mu);
    cl_serve_gen *old = m->gen;
    m->gen = g;
    pthread_mutex_unlock(&m->mu);
    cl_serve_gen_put(m, old);
}

void cl_serve_waiter_init(cl_serve_waiter *w, int pending)
{
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->pending = pending;
}

void cl_serve_waiter_wait(cl_serve_waiter *w)
{
    pthread_mutex_lock(&w->mu);
    while (w->pending > 0)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

static void answer(cl_serve_item *it, cl_status s)
{
    cl_serve_waiter *w = it->w;
    it->status = s;
    pthread_mutex_lock(&w->mu);
    /* The request may free the item as soon as pending reaches 0. */
    if (--w->pending == 0)
        pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Runs the items of one batch (all of one opening) and answers them. */
static void run_batch(cl_serve_model *m, cl_serve_item **items, int n)
{
    cl_serve_gen *g = items[0]->gen;
    for (int i = 0; i < n; i++)
        memcpy(g->bx + (size_t)i * g->per, items[i]->x, g->per * sizeof *g->bx);
    cl_status s = cl_classifier_forward(g->c, n, g->bx, g->bp);
    for (int i = 0; i < n; i++) {
        if (s == CL_OK)
            memcpy(items[i]->probs, g->bp + (size_t)i * g->num_classes,
                   (size_t)g->num_classes * sizeof *g->bp);
        answer(items[i], s);
    }
    cl_serve_metrics_batch(m->metrics, m->index, n, cl_serve_now());
}

/* Adds seconds to a CLOCK_MONOTONIC time. */
static struct timespec deadline_at(double t)
{
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static void *worker(void *arg)
{
    cl_serve_model *m = arg;
    cl_serve_item **batch = m->batch;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        while (!m->head && !m->stopping)
            pthread_cond_wait(&m->cv, &m->mu);
        if (!m->head)
            break;
        /* Wait for a full batch until the oldest image's delay is spent,
         * and only while some request is on its way to the queue: a lone
         * client (or the last of a burst) is not kept waiting for images
         * nobody is sending.  A stopping server runs what it has. */
        double due = m->head->t_enq + m->max_delay_s;
        int cap = m->head->gen->batch_cap;
        while (m->depth < cap && !m->stopping && !m->flush &&
               m->preparing > 0 && cl_serve_now() < due) {
            struct timespec ts = deadline_at(due);
            pthread_cond_timedwait(&m->cv, &m->mu, &ts);
        }
        int n = 0;
        cl_serve_gen *g = m->head->gen;
        cap = g->batch_cap;
        while (m->head && n < cap && m->head->gen == g) {
            cl_serve_item *it = m->head;
            m->head = it->next;
            batch[n++] = it;
        }
        if (!m->head)
            m->tail = NULL;
        m->depth -= n;
        pthread_mutex_unlock(&m->mu);
        run_batch(m, batch, n);
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

cl_status cl_serve_model_start(cl_serve_model *m)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&m->mu, NULL);
    CL_TRY(cl_serve_gen_open(m, &m->gen));
    m->batch = calloc((size_t)m->max_batch, sizeof *m->batch);
    if (!m->batch || pthread_create(&m->worker, NULL, worker, m) != 0) {
        free(m->batch);
        m->batch = NULL;
        gen_free(m->gen);
        m->gen = NULL;
        return cl_error(CL_ERR_NOMEM, "model %s: cannot start its thread",
                        m->name);
    }
    m->started = 1;
    return CL_OK;
}

void cl_serve_model_flush(cl_serve_model *m)
{
    pthread_mutex_lock(&m->mu);
    m->flush = 1;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

void cl_serve_model_stop(cl_serve_model *m)
{
    if (m->started) {
        pthread_mutex_lock(&m->mu);
        m->stopping = 1;
        pthread_cond_signal(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->worker, NULL);
        m->started = 0;
    }
    if (m->gen)
        cl_serve_gen_put(m, m->gen);
    m->gen = NULL;
    free(m->batch);
    m->batch = NULL;
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
}

void cl_serve_preparing(cl_serve_model *m, int delta)
{
    pthread_mutex_lock(&m->mu);
    m->preparing += delta;
    /* The batch may have been waiting for this request. */
    if (delta < 0)
        pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

cl_status cl_serve_enqueue(cl_serve_model *m, cl_serve_item *items, int n)
{
    double now = cl_serve_now();
    pthread_mutex_lock(&m->mu);
    m->preparing--;
    cl_status s = CL_OK;
    if (m->stopping)
        s = cl_error(CL_ERR_INTERRUPTED, "the server is shutting down");
    else if (m->depth + n > m->cap)
        s = cl_error(CL_ERR_LIMIT,
                     "model %s's queue is full (%d of %d images waiting); "
                     "retry shortly",
                     m->name, m->depth, m->cap);
    if (s == CL_OK) {
        for (int i = 0; i < n; i++) {
            items[i].t_enq = now;
            items[i].next = NULL;
            if (m->tail)
                m->tail->next = &items[i];
            else
                m->head = &items[i];
            m->tail = &items[i];
        }
        m->depth += n;
    }
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    return s;
}

int cl_serve_depth(cl_serve_model *m)
{
    pthread_mutex_lock(&m->mu);
    int d = m->depth;
    pthread_mutex_unlock(&m->mu);
    return d;
}
