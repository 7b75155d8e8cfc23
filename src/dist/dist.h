/* Data-parallel training over MPI: the rank context, broadcasts, bucketed
 * gradient averaging overlapped with backward, and the reductions SyncBN,
 * metrics and failure agreement need.
 *
 * Without MPI (built without it, or run without a launcher) every function
 * works as the single process of a world of size 1, so the trainer calls the
 * same functions either way.  Library functions only return statuses; the
 * decision to end the job (cl_dist_abort) belongs to the CLI. */
#ifndef CL_DIST_DIST_H
#define CL_DIST_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "classic/status.h"
#include "graph/graph.h"

#ifdef CL_HAVE_MPI
#include <mpi.h>
#endif

/* The rank context: caller-owned, filled by cl_dist_init. */
typedef struct cl_dist {
    int rank, size;             /* in the job (0, 1 without MPI) */
    int local_rank, local_size; /* among the ranks sharing this host */
    int active;       /* non-zero: MPI is in use (size may still be 1) */
    int owns_mpi;     /* cl_dist_init called MPI_Init; finalize ends it */
    int thread_level; /* MPI_THREAD_* provided, -1 without MPI */
    char host[64];    /* MPI_Get_processor_name: named in errors */
    /* Watchdog: a collective that has not completed after this many seconds
     * fails with CL_ERR_DIST (a peer hung).  0 waits forever.  Default 300:
     * long enough for rank 0 writing a checkpoint while the others wait. */
    double timeout_s;
    /* Largest element count handed to one MPI call (counts are int in MPI);
     * larger buffers go in chunks.  Tests lower it to exercise chunking. */
    size_t max_count;
#ifdef CL_HAVE_MPI
    MPI_Comm comm; /* a duplicate of MPI_COMM_WORLD, errors returned */
#endif
} cl_dist;

/* Joins the job.  Launched by mpirun (OMPI_COMM_WORLD_SIZE, PMI_SIZE or
 * PMIX_RANK in the environment): MPI_Init_thread (SERIALIZED requested,
 * FUNNELED at least), rank, size, local rank, a private communicator
 * returning errors.  Not launched: no MPI at all, rank 0 of 1 (a singleton
 * MPI_Init costs ~0.5 s and starts a helper daemon for nothing).  If MPI
 * was already initialised by the caller it is used and not finalised here.
 * Launched but built without MPI: CL_ERR_UNSUPPORTED, since N independent
 * trainings writing one run directory would be silently wrong.  argc/argv
 * may be NULL. */
cl_status cl_dist_init(cl_dist *d, int *argc, char ***argv);
/* Clean shutdown, only once all ranks agree to stop (after cl_dist_all_ok
 * or the last step): MPI_Finalize waits for every rank, so a rank that
 * finalises while a peer is inside a collective hangs the job.  On a
 * failure the others do not know of, call cl_dist_abort instead. */
void cl_dist_finalize(cl_dist *d);
/* For the CLI only, never the library: ends every rank of the job with
 * exit code `code` (MPI_Abort).  Returns only without MPI, and then the
 * caller exits itself. */
void cl_dist_abort(const cl_dist *d, int code);
/* For the CLI only: as cl_dist_abort for a job whose MPI the library set
 * up and left running after a failure (cl_train, cl_evaluation_run);
 * returns when MPI is not running. */
void cl_dist_abort_job(int code);

/* d may be NULL: rank 0 of 1. */
int cl_dist_rank(const cl_dist *d);
int cl_dist_size(const cl_dist *d);
int cl_dist_is_root(const cl_dist *d);

/* ---- collectives (every rank calls them in the same order) ------------ */
/* p[0..n) from rank `root` to all ranks, in chunks of d->max_count. */
cl_status cl_dist_broadcast_f32(cl_dist *d, float *p, size_t n, int root);
/* The graph's params and buffers (BN running statistics) from root, so
 * that every rank starts from the same model. */
cl_status cl_dist_broadcast_graph(cl_dist *d, cl_graph *g, int root);
/* In-place elementwise sums over all ranks: metrics (confusion matrices
 * in i64, loss sums in f64) and SyncBN statistics. */
cl_status cl_dist_allreduce_sum_f64(cl_dist *d, double *v, size_t n);
cl_status cl_dist_allreduce_sum_i64(cl_dist *d, int64_t *v, size_t n);
/* Returns 1 if every rank passed ok != 0, else 0 on every rank: call it at
 * step boundaries with "my step succeeded" so a rank that met bad input
 * stops all ranks cleanly (all then finalise and exit non-zero).  On the
 * ranks that were fine the error detail names the lowest failing rank.  A
 * communication failure also returns 0, with the detail set. */
int cl_dist_all_ok(cl_dist *d, int ok);
cl_status cl_dist_barrier(cl_dist *d);

/* ---- gradient averaging ------------------------------------------------ */
/* One param tensor's gradient: arena floats [offset, offset + n). */
typedef struct cl_dist_segment {
    int tensor; /* graph tensor index, the id grad_ready reports */
    size_t offset;
    size_t n;
} cl_dist_segment;

typedef enum cl_dist_sync_mode {
    /* Buckets are allreduced as backward makes them ready. */
    CL_DIST_SYNC_OVERLAP = 0,
    /* One allreduce of the whole gradient range after backward (the
     * baseline the overlap is measured against). */
    CL_DIST_SYNC_BLOCKING = 1
} cl_dist_sync_mode;

typedef struct cl_dist_sync_opts {
    cl_dist_sync_mode mode;
    double bucket_mb; /* bucket capacity in MiB (PyTorch DDP's 25) */
} cl_dist_sync_opts;

/* {CL_DIST_SYNC_OVERLAP, 25}. */
cl_dist_sync_opts cl_dist_sync_opts_default(void);

/* A world of one without MPI, whatever the environment says (the
 * config's dist: none). */
void cl_dist_single(cl_dist *d);
/* 1 when an MPI launcher (mpirun, PMI/PMIx) started this process: its
 * output then goes through the launcher, even when that is a terminal. */
int cl_dist_launched(void);

typedef struct cl_dist_grad_sync cl_dist_grad_sync;

/* Plans buckets over the grad arena grads[0..n_floats).  segs lists every
 * param tensor in the order backward finishes them (the reverse of
 * forward).  Consecutive segments join a bucket while the bucket stays one
 * contiguous arena range (neighbours in the arena, separated by less than
 * one 64-byte alignment line of padding) and within bucket_mb; a single
 * larger tensor gets a bucket of its own.  Buckets are launched in order,
 * each once all its tensors and all earlier buckets are ready, so every
 * rank issues the same collectives in the same order whatever order its
 * backward reports tensors in.  Collective over d (duplicates the
 * communicator for the gradient traffic).  opts may be NULL (defaults).
 * CL_ERR_ARG naming the segment for overlaps, out-of-range or empty
 * segments, duplicate or negative tensor ids. */
cl_status cl_dist_grad_sync_create(cl_dist_grad_sync **out, cl_dist *d,
                                   float *grads, size_t n_floats,
                                   const cl_dist_segment *segs, int n_segs,
                                   const cl_dist_sync_opts *opts);
/* The same for every CL_GT_PARAM tensor of a finalized graph, in reverse
 * tensor order (which is reverse arena order, so buckets are contiguous). */
cl_status cl_dist_grad_sync_create_graph(cl_dist_grad_sync **out, cl_dist *d,
                                         cl_graph *g,
                                         const cl_dist_sync_opts *opts);
void cl_dist_grad_sync_free(cl_dist_grad_sync *s);

/* The grad_ready hook (ctx = the cl_dist_grad_sync): marks tensor's
 * gradient final for this step, launches MPI_Iallreduce on every bucket
 * that became ready, and polls the outstanding ones with MPI_Test so
 * Open MPI progresses them while backward goes on.  Calls must be
 * serialised (one thread at a time; from the thread that called
 * cl_dist_init when d->thread_level is FUNNELED).  Errors (unknown tensor,
 * reported twice, MPI failure) are kept and returned by cl_dist_grad_wait. */
void cl_dist_grad_ready(void *sync, int tensor);
/* After backward: launches what is left (tensors never reported are taken
 * as ready now, so a backend without the hook still works), waits for all
 * buckets (watchdog d->timeout_s), divides by the world size (the mean of
 * the ranks' gradients) and resets for the next step.  A failure leaves
 * the ranks out of step (some collectives posted here, not there): the
 * CLI then calls cl_dist_abort, never cl_dist_finalize. */
cl_status cl_dist_grad_wait(cl_dist_grad_sync *s);

/* The SyncBN hook (ctx = the cl_dist_grad_sync): cl_dist_allreduce_sum_f64
 * on the sync's context.  Runs on the main communicator, apart from the
 * gradient buckets, so the two streams of collectives cannot interleave
 * differently on different ranks. */
cl_status cl_dist_hook_allreduce_sum(void *sync, double *v, int n);
/* Hooks for cl_backend: grad_ready always, allreduce_sum when sync_bn. */
cl_backend_hooks cl_dist_grad_sync_hooks(cl_dist_grad_sync *s, int sync_bn);

/* Plan inspection (tests, logs). */
int cl_dist_grad_sync_n_buckets(const cl_dist_grad_sync *s);
/* Bucket i: arena range [*offset, *offset + *n) and its tensor count.
 * CL_ERR_ARG if i is out of range. */
cl_status cl_dist_grad_sync_bucket(const cl_dist_grad_sync *s, int i,
                                   size_t *offset, size_t *n, int *n_tensors);

typedef struct cl_dist_sync_stats {
    int64_t steps;       /* completed grad_wait calls */
    int n_collectives;   /* MPI calls per step: buckets x chunks */
    double bytes;        /* gradient bytes allreduced per step */
    double wait_s_last;  /* time inside the last grad_wait */
    double wait_s_total; /* ... summed over all steps */
    double hook_s_total; /* time inside grad_ready (launch + poll) */
} cl_dist_sync_stats;
void cl_dist_grad_sync_stats(const cl_dist_grad_sync *s,
                             cl_dist_sync_stats *out);

#endif
