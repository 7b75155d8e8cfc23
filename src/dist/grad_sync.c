/* Gradient averaging across ranks: contiguous buckets of the grad arena,
 * each allreduced (MPI_Iallreduce, in place) as soon as backward has
 * finished all its tensors, or one blocking pass after backward. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "core/timer.h"
#include "dist/dist.h"
#include "dist/dist_internal.h"

/* Neighbouring tensors closer than one alignment line are separated only by
 * padding, which may be reduced with them (it holds zeros). */
#define GAP_FLOATS (CL_ALIGN / sizeof(float))

/* A contiguous arena range reduced by one group of MPI calls. */
typedef struct range {
    size_t lo, hi; /* floats [lo, hi) of the arena */
    int n_tensors;
    int pending;   /* tensors not yet ready this step */
    int first_req; /* its requests: req[first_req .. first_req + n_req) */
    int n_req;
} range;

typedef struct tensor_key {
    int tensor, seg;
} tensor_key;

struct cl_dist_grad_sync {
    cl_dist *d;
    float *grads;
    size_t n_floats;
    cl_dist_sync_opts opts;
    size_t chunk; /* elements per MPI call */
    int n_segs;
    cl_dist_segment *segs;
    tensor_key *keys;     /* sorted by tensor, for grad_ready's look-up */
    int *bucket_of_seg;   /* (n_segs) */
    unsigned char *ready; /* (n_segs) this step */
    range *buckets;       /* overlap mode plan, in launch order */
    int n_buckets;
    range *runs; /* blocking mode: maximal contiguous runs */
    int n_runs;
    int next_launch; /* first bucket not launched this step */
    int next_done;   /* first bucket not completed this step */
    cl_status err;   /* kept from grad_ready for grad_wait */
    char err_msg[256];
    cl_dist_sync_stats st;
#ifdef CL_HAVE_MPI
    MPI_Comm comm; /* gradient traffic only */
    MPI_Request *req;
#endif
};

cl_dist_sync_opts cl_dist_sync_opts_default(void)
{
    cl_dist_sync_opts o = {CL_DIST_SYNC_OVERLAP, 25.0};
    return o;
}

static int cmp_key(const void *a, const void *b)
{
    const tensor_key *x = a, *y = b;
    return (x->tensor > y->tensor) - (x->tensor < y->tensor);
}

/* Sorts segment indices by offset (insertion sort keeps it free of a
 * context-less comparator over the segments; n is a few hundred). */
static void sort_by_offset(const cl_dist_segment *s, int *idx, int n)
{
    for (int i = 0; i < n; i++)
        idx[i] = i;
    for (int i = 1; i < n; i++) {
        int v = idx[i], j = i - 1;
        while (j >= 0 && s[idx[j]].offset > s[v].offset) {
            idx[j + 1] = idx[j];
            j--;
        }
        idx[j + 1] = v;
    }
}

static int chunks_of(size_t n, size_t chunk)
{
    return (int)((n + chunk - 1) / chunk);
}

/* Checks the segments and plans buckets and runs.  pos: (n_segs) scratch
 * for the sorted position of every segment. */
static cl_status plan(cl_dist_grad_sync *s, int *sorted, int *pos)
{
    const cl_dist_segment *g = s->segs;
    int n = s->n_segs;
    for (int i = 0; i < n; i++) {
        if (g[i].tensor < 0)
            return cl_error(CL_ERR_ARG,
                            "grad sync: segment %d has tensor id %d "
                            "(expected >= 0)",
                            i, g[i].tensor);
        if (g[i].n == 0)
            return cl_error(CL_ERR_ARG,
                            "grad sync: segment %d (tensor %d) is empty", i,
                            g[i].tensor);
        if (g[i].offset > s->n_floats || g[i].n > s->n_floats - g[i].offset)
            return cl_error(CL_ERR_ARG,
                            "grad sync: segment %d (tensor %d) [%zu, +%zu) "
                            "lies outside the arena of %zu floats",
                            i, g[i].tensor, g[i].offset, g[i].n, s->n_floats);
        s->keys[i].tensor = g[i].tensor;
        s->keys[i].seg = i;
    }
    qsort(s->keys, (size_t)n, sizeof *s->keys, cmp_key);
    for (int i = 1; i < n; i++)
        if (s->keys[i].tensor == s->keys[i - 1].tensor)
            return cl_error(CL_ERR_ARG,
                            "grad sync: tensor %d is listed twice "
                            "(segments %d and %d)",
                            s->keys[i].tensor, s->keys[i - 1].seg,
                            s->keys[i].seg);
    sort_by_offset(g, sorted, n);
    for (int i = 0; i < n; i++)
        pos[sorted[i]] = i;
    for (int i = 1; i < n; i++) {
        const cl_dist_segment *a = &g[sorted[i - 1]], *b = &g[sorted[i]];
        if (a->offset + a->n > b->offset)
            return cl_error(CL_ERR_ARG,
                            "grad sync: tensors %d and %d overlap in the "
                            "arena ([%zu, +%zu) and [%zu, +%zu))",
                            a->tensor, b->tensor, a->offset, a->n, b->offset,
                            b->n);
    }

    /* Buckets, in the order backward finishes tensors. */
    double capd = s->opts.bucket_mb * 1048576.0 / sizeof(float);
    size_t cap = capd < 1.0 ? 1 : capd > 1e18 ? (size_t)1e18 : (size_t)capd;
    int lo_pos = 0, hi_pos = -1;
    range *cur = NULL;
    for (int i = 0; i < n; i++) {
        size_t a = g[i].offset, b = g[i].offset + g[i].n;
        int join = 0;
        if (cur) {
            if (pos[i] == lo_pos - 1 && cur->lo - b < GAP_FLOATS &&
                cur->hi - a <= cap)
                join = 1;
            else if (pos[i] == hi_pos + 1 && a - cur->hi < GAP_FLOATS &&
                     b - cur->lo <= cap)
                join = 1;
        }
        if (join) {
            if (pos[i] < lo_pos) {
                lo_pos = pos[i];
                cur->lo = a;
            } else {
                hi_pos = pos[i];
                cur->hi = b;
            }
            cur->n_tensors++;
        } else {
            cur = &s->buckets[s->n_buckets++];
            cur->lo = a;
            cur->hi = b;
            cur->n_tensors = 1;
            lo_pos = hi_pos = pos[i];
        }
        s->bucket_of_seg[i] = (int)(cur - s->buckets);
    }

    /* Runs: maximal stretches of arena neighbours, in arena order. */
    cur = NULL;
    for (int k = 0; k < n; k++) {
        const cl_dist_segment *x = &g[sorted[k]];
        if (cur && x->offset - cur->hi < GAP_FLOATS) {
            cur->hi = x->offset + x->n;
            cur->n_tensors++;
        } else {
            cur = &s->runs[s->n_runs++];
            cur->lo = x->offset;
            cur->hi = x->offset + x->n;
            cur->n_tensors = 1;
        }
    }

    int nr = 0, nb = 0;
    for (int i = 0; i < s->n_buckets; i++) {
        range *r = &s->buckets[i];
        r->pending = r->n_tensors;
        r->first_req = nb;
        r->n_req = chunks_of(r->hi - r->lo, s->chunk);
        nb += r->n_req;
    }
    for (int i = 0; i < s->n_runs; i++) {
        range *r = &s->runs[i];
        r->pending = r->n_tensors;
        r->first_req = nr;
        r->n_req = chunks_of(r->hi - r->lo, s->chunk);
        nr += r->n_req;
    }
    int blocking = s->opts.mode == CL_DIST_SYNC_BLOCKING;
    s->st.n_collectives = blocking ? nr : nb;
    double bytes = 0;
    const range *used = blocking ? s->runs : s->buckets;
    for (int i = 0; i < (blocking ? s->n_runs : s->n_buckets); i++)
        bytes += (double)(used[i].hi - used[i].lo) * sizeof(float);
    s->st.bytes = bytes;
    return CL_OK;
}

cl_status cl_dist_grad_sync_create(cl_dist_grad_sync **out, cl_dist *d,
                                   float *grads, size_t n_floats,
                                   const cl_dist_segment *segs, int n_segs,
                                   const cl_dist_sync_opts *opts)
{
    *out = NULL;
    cl_dist_sync_opts o = opts ? *opts : cl_dist_sync_opts_default();
    if (o.mode != CL_DIST_SYNC_OVERLAP && o.mode != CL_DIST_SYNC_BLOCKING)
        return cl_error(CL_ERR_ARG,
                        "grad sync: mode %d is not overlap (0) "
                        "or blocking (1)",
                        (int)o.mode);
    if (!(o.bucket_mb > 0 && o.bucket_mb <= 1e6))
        return cl_error(CL_ERR_ARG,
                        "grad sync: bucket_mb %g (expected 0 < mb <= 1e6)",
                        o.bucket_mb);
    if (n_segs <= 0 || !segs || !grads)
        return cl_error(CL_ERR_ARG,
                        "grad sync: no parameter segments to average");
    cl_status st = CL_OK;
    int *sorted = NULL, *pos = NULL;
    size_t ns = (size_t)n_segs, b1, b2, b3, b4, b5;
    cl_dist_grad_sync *s = cl_alloc_zero(sizeof *s, "grad sync");
    if (!s)
        return CL_ERR_NOMEM;
#ifdef CL_HAVE_MPI
    s->comm = MPI_COMM_NULL;
#endif
    s->d = d;
    s->grads = grads;
    s->n_floats = n_floats;
    s->opts = o;
    s->n_segs = n_segs;
    s->chunk = d->max_count == 0 || d->max_count > (size_t)1 << 30
                   ? (size_t)1 << 30
                   : d->max_count;
    if ((st = cl_mul_size(ns, sizeof *s->segs, &b1, "grad sync")) ||
        (st = cl_mul_size(ns, sizeof *s->keys, &b2, "grad sync")) ||
        (st = cl_mul_size(ns, sizeof(int), &b3, "grad sync")) ||
        (st = cl_mul_size(ns, sizeof(range), &b4, "grad sync")))
        goto fail;
    b5 = ns;
    s->segs = cl_alloc(b1, "grad sync segments");
    s->keys = cl_alloc(b2, "grad sync keys");
    s->bucket_of_seg = cl_alloc(b3, "grad sync buckets");
    s->ready = cl_alloc_zero(b5, "grad sync flags");
    s->buckets = cl_alloc_zero(b4, "grad sync buckets");
    s->runs = cl_alloc_zero(b4, "grad sync runs");
    sorted = cl_alloc(b3, "grad sync scratch");
    pos = cl_alloc(b3, "grad sync scratch");
    if (!s->segs || !s->keys || !s->bucket_of_seg || !s->ready || !s->buckets ||
        !s->runs || !sorted || !pos) {
        st = CL_ERR_NOMEM;
        goto fail;
    }
    memcpy(s->segs, segs, b1);
    if ((st = plan(s, sorted, pos)) != CL_OK)
        goto fail;
#ifdef CL_HAVE_MPI
    if (d->active) {
        size_t nreq;
        if ((st = cl_mul_size((size_t)s->st.n_collectives, sizeof(MPI_Request),
                              &nreq, "grad sync")))
            goto fail;
        s->req = cl_alloc(nreq, "grad sync requests");
        if (!s->req) {
            st = CL_ERR_NOMEM;
            goto fail;
        }
        int rc = MPI_Comm_dup(d->comm, &s->comm);
        if (rc != MPI_SUCCESS) {
            s->comm = MPI_COMM_NULL;
            st = cl__dist_mpi_error(d, rc, "grad sync: MPI_Comm_dup");
            goto fail;
        }
        MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    }
#endif
    cl_free(sorted);
    cl_free(pos);
    *out = s;
    return CL_OK;
fail:
    cl_free(sorted);
    cl_free(pos);
    cl_dist_grad_sync_free(s);
    return st;
}

cl_status cl_dist_grad_sync_create_graph(cl_dist_grad_sync **out, cl_dist *d,
                                         cl_graph *g,
                                         const cl_dist_sync_opts *opts)
{
    *out = NULL;
    if (!g->finalized)
        return cl_error(CL_ERR_ARG, "grad sync: graph is not finalized");
    int n = 0;
    for (int i = 0; i < g->n_tensors; i++)
        n += g->tensors[i].kind == CL_GT_PARAM;
    if (n == 0)
        return cl_error(CL_ERR_ARG, "grad sync: graph has no parameters");
    size_t bytes;
    CL_TRY(
        cl_mul_size((size_t)n, sizeof(cl_dist_segment), &bytes, "grad sync"));
    cl_dist_segment *segs = cl_alloc(bytes, "grad sync segments");
    if (!segs)
        return CL_ERR_NOMEM;
    int k = 0;
    for (int i = g->n_tensors - 1; i >= 0; i--) {
        const cl_gtensor *t = &g->tensors[i];
        if (t->kind != CL_GT_PARAM)
            continue;
        segs[k].tensor = i;
        segs[k].offset = t->offset;
        segs[k].n = (size_t)cl_shape_numel(&t->shape);
        k++;
    }
    cl_status st = cl_dist_grad_sync_create(out, d, g->grads, g->n_param_floats,
                                            segs, n, opts);
    cl_free(segs);
    return st;
}

void cl_dist_grad_sync_free(cl_dist_grad_sync *s)
{
    if (!s)
        return;
#ifdef CL_HAVE_MPI
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (s->comm != MPI_COMM_NULL && !finalized)
        MPI_Comm_free(&s->comm);
    cl_free(s->req);
#endif
    cl_free(s->segs);
    cl_free(s->keys);
    cl_free(s->bucket_of_seg);
    cl_free(s->ready);
    cl_free(s->buckets);
    cl_free(s->runs);
    cl_free(s);
}

static void keep_error(cl_dist_grad_sync *s, cl_status st)
{
    if (s->err != CL_OK)
        return;
    s->err = st;
    snprintf(s->err_msg, sizeof s->err_msg, "%s", cl_last_error());
}

#ifdef CL_HAVE_MPI
static int active(const cl_dist_grad_sync *s)
{
    return s->d->active && s->d->size > 1;
}

static void scale(cl_dist_grad_sync *s, const range *r)
{
    float k = (float)(1.0 / s->d->size);
    float *p = s->grads + r->lo;
    size_t n = r->hi - r->lo;
    for (size_t i = 0; i < n; i++)
        p[i] *= k;
}

static cl_status launch(cl_dist_grad_sync *s, const range *r)
{
    for (int j = 0; j < r->n_req; j++) {
        size_t a = r->lo + (size_t)j * s->chunk;
        size_t c = r->hi - a < s->chunk ? r->hi - a : s->chunk;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, s->grads + a, (int)c, MPI_FLOAT,
                                MPI_SUM, s->comm, &s->req[r->first_req + j]);
        if (rc != MPI_SUCCESS)
            return cl__dist_mpi_error(s->d, rc, "grad allreduce");
    }
    return CL_OK;
}
#endif

/* Launches, in plan order, every bucket whose tensors are all ready. */
static cl_status launch_ready(cl_dist_grad_sync *s)
{
    while (s->next_launch < s->n_buckets &&
           s->buckets[s->next_launch].pending == 0) {
#ifdef CL_HAVE_MPI
        if (active(s))
            CL_TRY(launch(s, &s->buckets[s->next_launch]));
#endif
        s->next_launch++;
    }
    return CL_OK;
}

/* Completes the launched buckets that have finished, oldest first; testing
 * any request runs Open MPI's progress engine for all of them. */
static cl_status poll(cl_dist_grad_sync *s)
{
    while (s->next_done < s->next_launch) {
        range *r = &s->buckets[s->next_done];
#ifdef CL_HAVE_MPI
        if (active(s)) {
            int done = 0;
            int rc = MPI_Testall(r->n_req, s->req + r->first_req, &done,
                                 MPI_STATUSES_IGNORE);
            if (rc != MPI_SUCCESS)
                return cl__dist_mpi_error(s->d, rc, "grad allreduce");
            if (!done)
                return CL_OK;
            scale(s, r);
        }
#endif
        (void)r;
        s->next_done++;
    }
    return CL_OK;
}

void cl_dist_grad_ready(void *sync, int tensor)
{
    cl_dist_grad_sync *s = sync;
    double t0 = cl_time_now();
    if (s->err != CL_OK)
        return;
    tensor_key key = {tensor, 0};
    const tensor_key *k =
        bsearch(&key, s->keys, (size_t)s->n_segs, sizeof key, cmp_key);
    if (!k) {
        keep_error(s, cl_error(CL_ERR_ARG,
                               "grad sync: tensor %d reported ready is not a "
                               "parameter of the plan",
                               tensor));
        return;
    }
    if (s->ready[k->seg]) {
        keep_error(s, cl_error(CL_ERR_ARG,
                               "grad sync: tensor %d reported ready twice in "
                               "one step",
                               tensor));
        return;
    }
    s->ready[k->seg] = 1;
    if (s->opts.mode == CL_DIST_SYNC_OVERLAP) {
        s->buckets[s->bucket_of_seg[k->seg]].pending--;
        cl_status st = launch_ready(s);
        if (st == CL_OK)
            st = poll(s);
        if (st != CL_OK)
            keep_error(s, st);
    }
    s->st.hook_s_total += cl_time_now() - t0;
}

static void reset_step(cl_dist_grad_sync *s)
{
    memset(s->ready, 0, (size_t)s->n_segs);
    for (int i = 0; i < s->n_buckets; i++)
        s->buckets[i].pending = s->buckets[i].n_tensors;
    s->next_launch = s->next_done = 0;
}

static cl_status wait_overlap(cl_dist_grad_sync *s)
{
    for (int i = s->next_launch; i < s->n_buckets; i++)
        s->buckets[i].pending = 0;
    CL_TRY(launch_ready(s));
#ifdef CL_HAVE_MPI
    if (active(s)) {
        for (; s->next_done < s->next_launch; s->next_done++) {
            range *r = &s->buckets[s->next_done];
            CL_TRY(cl__dist_wait(s->d, s->req + r->first_req, r->n_req,
                                 "grad allreduce"));
            scale(s, r);
        }
    }
#endif
    return CL_OK;
}

static cl_status wait_blocking(cl_dist_grad_sync *s)
{
#ifdef CL_HAVE_MPI
    if (!active(s))
        return CL_OK;
    for (int i = 0; i < s->n_runs; i++)
        CL_TRY(launch(s, &s->runs[i]));
    CL_TRY(cl__dist_wait(s->d, s->req, s->st.n_collectives, "grad allreduce"));
    for (int i = 0; i < s->n_runs; i++)
        scale(s, &s->runs[i]);
#else
    (void)s;
#endif
    return CL_OK;
}

cl_status cl_dist_grad_wait(cl_dist_grad_sync *s)
{
    double t0 = cl_time_now();
    cl_status st = s->err;
    if (st != CL_OK) {
        cl_error(st, "%s", s->err_msg);
        s->err = CL_OK;
    } else if (s->opts.mode == CL_DIST_SYNC_OVERLAP) {
        st = wait_overlap(s);
    } else {
        st = wait_blocking(s);
    }
    reset_step(s);
    double dt = cl_time_now() - t0;
    s->st.wait_s_last = dt;
    s->st.wait_s_total += dt;
    if (st == CL_OK)
        s->st.steps++;
    return st;
}

cl_status cl_dist_hook_allreduce_sum(void *sync, double *v, int n)
{
    cl_dist_grad_sync *s = sync;
    if (n < 0)
        return cl_error(CL_ERR_ARG, "allreduce: count %d is negative", n);
    return cl_dist_allreduce_sum_f64(s->d, v, (size_t)n);
}

cl_backend_hooks cl_dist_grad_sync_hooks(cl_dist_grad_sync *s, int sync_bn)
{
    cl_backend_hooks h;
    memset(&h, 0, sizeof h);
    h.ctx = s;
    h.grad_ready = cl_dist_grad_ready;
    h.allreduce_sum = sync_bn ? cl_dist_hook_allreduce_sum : NULL;
    return h;
}

int cl_dist_grad_sync_n_buckets(const cl_dist_grad_sync *s)
{
    return s->n_buckets;
}

cl_status cl_dist_grad_sync_bucket(const cl_dist_grad_sync *s, int i,
                                   size_t *offset, size_t *n, int *n_tensors)
{
    if (i < 0 || i >= s->n_buckets)
        return cl_error(CL_ERR_ARG, "grad sync: bucket %d of %d", i,
                        s->n_buckets);
    *offset = s->buckets[i].lo;
    *n = s->buckets[i].hi - s->buckets[i].lo;
    *n_tensors = s->buckets[i].n_tensors;
    return CL_OK;
}

void cl_dist_grad_sync_stats(const cl_dist_grad_sync *s,
                             cl_dist_sync_stats *out)
{
    *out = s->st;
}
