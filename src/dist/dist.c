/* The rank context and the collectives on it: init and shutdown, chunked
 * broadcasts and sums with a watchdog, and the all-ranks-ok agreement. */
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timer.h"
#include "dist/dist.h"
#include "dist/dist_internal.h"

/* 2^30 elements per MPI call: below INT_MAX, and 4-8 GiB per message is
 * already far past where chunking costs anything. */
#define CL_DIST_MAX_COUNT ((size_t)1 << 30)
#define CL_DIST_TIMEOUT_S 300.0
/* Requests posted at once by a chunked collective. */
enum { CL_DIST_BATCH = 16 };

int cl_dist_launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") ||
           getenv("PMIX_RANK");
}

void cl_dist_single(cl_dist *d)
{
    memset(d, 0, sizeof *d);
    d->rank = 0;
    d->size = 1;
    d->local_rank = 0;
    d->local_size = 1;
    d->thread_level = -1;
    d->timeout_s = CL_DIST_TIMEOUT_S;
    d->max_count = CL_DIST_MAX_COUNT;
#ifdef CL_HAVE_MPI
    d->comm = MPI_COMM_NULL;
#endif
}

int cl_dist_rank(const cl_dist *d)
{
    return d ? d->rank : 0;
}

int cl_dist_size(const cl_dist *d)
{
    return d ? d->size : 1;
}

int cl_dist_is_root(const cl_dist *d)
{
    return cl_dist_rank(d) == 0;
}

#ifdef CL_HAVE_MPI

cl_status cl__dist_mpi_error(const cl_dist *d, int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error %d", rc);
    if (d && d->host[0])
        return cl_error(CL_ERR_DIST, "%s on rank %d (host %s): %s", what,
                        d->rank, d->host, msg);
    return cl_error(CL_ERR_DIST, "%s on rank %d: %s", what, d ? d->rank : -1,
                    msg);
}

cl_status cl__dist_wait(const cl_dist *d, MPI_Request *r, int n,
                        const char *what)
{
    double t0 = cl_time_now();
    for (long spin = 0;; spin++) {
        int done = 0;
        int rc = MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS)
            return cl__dist_mpi_error(d, rc, what);
        if (done)
            return CL_OK;
        if (spin < 200)
            continue;
        /* Yield, never sleep: a non-blocking collective only advances
         * inside MPI calls, so napping between tests slows every large
         * allreduce (as Open MPI's own MPI_Wait, this keeps a core busy). */
        sched_yield();
        if ((spin & 63) == 0 && d->timeout_s > 0 &&
            cl_time_now() - t0 > d->timeout_s)
            return cl_error(CL_ERR_DIST,
                            "%s on rank %d (host %s): did not complete in "
                            "%.0f s (another rank hung or died, or the "
                            "network between them is down)",
                            what, d->rank, d->host[0] ? d->host : "?",
                            d->timeout_s);
    }
}

cl_status cl_dist_init(cl_dist *d, int *argc, char ***argv)
{
    cl_dist_single(d);
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && !cl_dist_launched())
        return CL_OK;
    int rc, provided = -1;
    if (!inited) {
        rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS)
            return cl__dist_mpi_error(NULL, rc, "MPI_Init_thread");
        d->owns_mpi = 1;
    } else {
        MPI_Query_thread(&provided);
    }
    d->active = 1;
    d->thread_level = provided;
    if (provided < MPI_THREAD_FUNNELED) {
        cl_dist_finalize(d);
        return cl_error(CL_ERR_DIST,
                        "MPI: thread support %d is below MPI_THREAD_FUNNELED "
                        "(the backend runs OpenMP threads)",
                        provided);
    }
    rc = MPI_Comm_dup(MPI_COMM_WORLD, &d->comm);
    if (rc != MPI_SUCCESS) {
        d->comm = MPI_COMM_NULL;
        cl_status st = cl__dist_mpi_error(d, rc, "MPI_Comm_dup");
        cl_dist_finalize(d);
        return st;
    }
    MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(d->comm, &d->rank);
    MPI_Comm_size(d->comm, &d->size);
    char name[MPI_MAX_PROCESSOR_NAME];
    int name_len = 0;
    if (MPI_Get_processor_name(name, &name_len) == MPI_SUCCESS)
        snprintf(d->host, sizeof d->host, "%.*s", name_len, name);
    MPI_Comm local = MPI_COMM_NULL;
    rc = MPI_Comm_split_type(d->comm, MPI_COMM_TYPE_SHARED, d->rank,
                             MPI_INFO_NULL, &local);
    if (rc != MPI_SUCCESS) {
        cl_status st = cl__dist_mpi_error(d, rc, "MPI_Comm_split_type");
        cl_dist_finalize(d);
        return st;
    }
    MPI_Comm_rank(local, &d->local_rank);
    MPI_Comm_size(local, &d->local_size);
    MPI_Comm_free(&local);
    return CL_OK;
}

void cl_dist_finalize(cl_dist *d)
{
    if (!d || !d->active)
        return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
        if (d->comm != MPI_COMM_NULL)
            MPI_Comm_free(&d->comm);
        if (d->owns_mpi)
            MPI_Finalize();
    }
    d->comm = MPI_COMM_NULL;
    d->active = 0;
    d->owns_mpi = 0;
}

void cl_dist_abort(const cl_dist *d, int code)
{
    if (d && d->active)
        MPI_Abort(d->comm != MPI_COMM_NULL ? d->comm : MPI_COMM_WORLD, code);
}

void cl_dist_abort_job(int code)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized)
        MPI_Abort(MPI_COMM_WORLD, code);
}

/* A broadcast (op == MPI_OP_NULL) or in-place sum of n elements of type t,
 * in chunks of at most d->max_count elements, CL_DIST_BATCH in flight. */
static cl_status chunked(cl_dist *d, void *buf, size_t n, MPI_Datatype t,
                         size_t esize, MPI_Op op, int root, const char *what)
{
    if (!d->active || d->size == 1 || n == 0)
        return CL_OK;
    size_t chunk = d->max_count;
    if (chunk == 0 || chunk > (size_t)INT_MAX)
        chunk = CL_DIST_MAX_COUNT;
    char *p = buf;
    size_t done = 0;
    while (done < n) {
        MPI_Request req[CL_DIST_BATCH];
        int k = 0;
        for (; k < CL_DIST_BATCH && done < n; k++) {
            size_t c = n - done < chunk ? n - done : chunk;
            int rc = op == MPI_OP_NULL
                         ? MPI_Ibcast(p + done * esize, (int)c, t, root,
                                      d->comm, &req[k])
                         : MPI_Iallreduce(MPI_IN_PLACE, p + done * esize,
                                          (int)c, t, op, d->comm, &req[k]);
            if (rc != MPI_SUCCESS) {
                /* Let what was posted finish before reporting. */
                cl__dist_wait(d, req, k, what);
                return cl__dist_mpi_error(d, rc, what);
            }
            done += c;
        }
        CL_TRY(cl__dist_wait(d, req, k, what));
    }
    return CL_OK;
}

cl_status cl_dist_broadcast_f32(cl_dist *d, float *p, size_t n, int root)
{
    if (root < 0 || root >= d->size)
        return cl_error(CL_ERR_ARG,
                        "broadcast: root %d is not a rank (size %d)", root,
                        d->size);
    return chunked(d, p, n, MPI_FLOAT, sizeof(float), MPI_OP_NULL, root,
                   "broadcast");
}

cl_status cl_dist_allreduce_sum_f64(cl_dist *d, double *v, size_t n)
{
    return chunked(d, v, n, MPI_DOUBLE, sizeof(double), MPI_SUM, 0,
                   "allreduce (f64 sum)");
}

cl_status cl_dist_allreduce_sum_i64(cl_dist *d, int64_t *v, size_t n)
{
    return chunked(d, v, n, MPI_INT64_T, sizeof(int64_t), MPI_SUM, 0,
                   "allreduce (i64 sum)");
}

int cl_dist_all_ok(cl_dist *d, int ok)
{
    if (!d->active || d->size == 1)
        return ok != 0;
    /* MINLOC: the flag agreed by all, and the lowest rank holding it. */
    struct {
        int flag, rank;
    } v = {ok != 0, d->rank};
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, &v, 1, MPI_2INT, MPI_MINLOC, d->comm,
                            &req);
    if (rc != MPI_SUCCESS) {
        cl__dist_mpi_error(d, rc, "all_ok");
        return 0;
    }
    if (cl__dist_wait(d, &req, 1, "all_ok") != CL_OK)
        return 0;
    if (!v.flag && ok)
        cl_error(CL_ERR_DIST, "rank %d failed; stopping all %d ranks", v.rank,
                 d->size);
    return v.flag;
}

cl_status cl_dist_barrier(cl_dist *d)
{
    if (!d->active || d->size == 1)
        return CL_OK;
    MPI_Request req;
    int rc = MPI_Ibarrier(d->comm, &req);
    if (rc != MPI_SUCCESS)
        return cl__dist_mpi_error(d, rc, "barrier");
    return cl__dist_wait(d, &req, 1, "barrier");
}

#else /* !CL_HAVE_MPI: the single process of a world of size 1. */

cl_status cl_dist_init(cl_dist *d, int *argc, char ***argv)
{
    cl_dist_single(d);
    if (cl_dist_launched())
        return cl_error(CL_ERR_UNSUPPORTED,
                        "MPI: launched by mpirun but classic was built "
                        "without MPI (install an MPI and rebuild)");
    return CL_OK;
}

void cl_dist_finalize(cl_dist *d)
{
    (void)d;
}

void cl_dist_abort(const cl_dist *d, int code)
{
    (void)d;
    (void)code;
}

void cl_dist_abort_job(int code)
{
    (void)code;
}

cl_status cl_dist_broadcast_f32(cl_dist *d, float *p, size_t n, int root)
{
    (void)p;
    (void)n;
    if (root != 0)
        return cl_error(CL_ERR_ARG,
                        "broadcast: root %d is not a rank (size %d)", root,
                        d->size);
    return CL_OK;
}

cl_status cl_dist_allreduce_sum_f64(cl_dist *d, double *v, size_t n)
{
    (void)d;
    (void)v;
    (void)n;
    return CL_OK;
}

cl_status cl_dist_allreduce_sum_i64(cl_dist *d, int64_t *v, size_t n)
{
    (void)d;
    (void)v;
    (void)n;
    return CL_OK;
}

int cl_dist_all_ok(cl_dist *d, int ok)
{
    (void)d;
    return ok != 0;
}

cl_status cl_dist_barrier(cl_dist *d)
{
    (void)d;
    return CL_OK;
}

#endif

cl_status cl_dist_broadcast_graph(cl_dist *d, cl_graph *g, int root)
{
    if (!g->finalized)
        return cl_error(CL_ERR_ARG, "broadcast: graph is not finalized");
    CL_TRY(cl_dist_broadcast_f32(d, g->params, g->n_param_floats, root));
    return cl_dist_broadcast_f32(d, g->buffers, g->n_buffer_floats, root);
}
