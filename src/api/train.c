/* The public training API: a recipe from YAML and "key=value" overrides
 * (over a resumed checkpoint's own config) run by cl_train_run, alone or
 * data-parallel under mpirun, whose step and epoch events become the
 * caller's progress callback; cl_train_ex's options leave signals and MPI
 * to a host program. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/opts.h"
#include "classic/classic.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/dist.h"
#include "io/config.h"
#include "io/strbuf.h"
#include "train/train_config.h"
#include "train/trainer.h"

typedef struct relay {
    cl_progress_fn fn;
    void *ctx;
    int stopped;
    long long last_step;  /* the last event's: a stopped run reports it */
    long long first_step; /* where this call started (resumed), or 0 */
    int last_epoch;       /* epochs completed per the events */
    double last_loss;
    int rank, world_size;
} relay;

static int on_event(void *ctx, const cl_train_event *e)
{
    relay *r = ctx;
    cl_progress p;
    memset(&p, 0, sizeof p);
    p.kind =
        e->kind == CL_TRAIN_EVENT_EPOCH ? CL_PROGRESS_EPOCH : CL_PROGRESS_STEP;
    p.step = e->step;
    p.total_steps = e->total_steps;
    p.epoch = e->epoch;
    p.loss = e->loss;
    p.loss_avg = e->loss_avg;
    p.lr = e->lr;
    p.img_per_s = e->img_s;
    p.last_epoch = e->last_epoch;
    p.evaluated = e->evaluated;
    p.val_top1 = e->evaluated ? e->val_top1 : NAN;
    p.val_top5 = e->evaluated ? e->val_top5 : NAN;
    p.val_loss = e->evaluated ? e->val_loss : NAN;
    p.rank = r->rank;
    p.world_size = r->world_size;
    r->last_step = e->step;
    r->first_step = e->first_step;
    r->last_loss = e->loss_avg;
    if (e->kind == CL_TRAIN_EVENT_EPOCH)
        r->last_epoch = (int)e->epoch;
    if (r->fn(r->ctx, &p) != 0) {
        r->stopped = 1;
        return 1;
    }
    return 0;
}

/* Whether MPI is up now (initialised, not finalised), by whoever. */
static int mpi_running(void)
{
#ifdef CL_HAVE_MPI
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    return inited && !finalized;
#else
    return 0;
#endif
}

/* The processes of the run as the recipe's dist and the host allow: with
 * host_mpi the MPI the host started, or none; else MPI started here when
 * a launcher started this process. */
static cl_status join(const cl_config *cfg, int host_mpi, cl_dist *d)
{
    cl_dist_single(d);
    if (cfg->dist == CL_CFG_DIST_NONE)
        return CL_OK;
    if (host_mpi && !mpi_running()) {
        if (cl_dist_launched())
            return cl_error(CL_ERR_CONFIG,
                            "cl_train_ex: opts->host_mpi is set and an MPI "
                            "launcher started this process, but MPI is not "
                            "initialised: call MPI_Init_thread "
                            "(MPI_THREAD_FUNNELED at least) before "
                            "cl_train_ex, or set dist to none to train this "
                            "process alone");
        if (cfg->dist == CL_CFG_DIST_MPI)
            return cl_error(CL_ERR_CONFIG,
                            "dist is mpi but MPI is not initialised and "
                            "opts->host_mpi leaves it to the host: "
                            "initialise it before cl_train_ex, or set dist "
                            "to auto or none");
        return CL_OK;
    }
    if (cfg->dist == CL_CFG_DIST_MPI && !cl_dist_launched() &&
        !(host_mpi && mpi_running()))
        return cl_error(CL_ERR_CONFIG,
                        "dist is mpi but no MPI launcher started this "
                        "process: run it under mpirun -np N, or set dist to "
                        "auto or none");
    /* MPI the host initialised is used and left running. */
    return cl_dist_init(d, NULL, NULL);
}

cl_status cl_train(const char *config_path, const char *config_text,
                   const char *const *overrides, int n_overrides,
                   cl_progress_fn on_progress, void *ctx,
                   cl_train_summary *summary)
{
    return cl_train_ex(config_path, config_text, overrides, n_overrides,
                       on_progress, ctx, NULL, summary);
}

cl_status cl_train_ex(const char *config_path, const char *config_text,
                      const char *const *overrides, int n_overrides,
                      cl_progress_fn on_progress, void *ctx,
                      const cl_train_opts *opts, cl_train_summary *summary)
{
    if (summary) {
        memset(summary, 0, sizeof *summary);
        summary->val_top1 = summary->val_top5 = summary->val_loss = NAN;
        summary->best_top1 = NAN;
    }
    if (n_overrides < 0 || (n_overrides > 0 && !overrides))
        return cl_error(CL_ERR_ARG,
                        "cl_train: %d overrides given but the list is %s",
                        n_overrides, overrides ? "there" : "NULL");
    cl_train_opts o;
    CL_TRY(
        cl_api_read_opts(&o, sizeof o, opts, "cl_train_ex", "cl_train_opts"));
    cl_config cfg;
    cl_strbuf notes;
    cl_strbuf_init(&notes);
    cl_status s =
        cl_train_config_resolve(&cfg, config_path, config_text, overrides,
                                n_overrides, "cl_train", &notes);
    if (s != CL_OK) {
        cl_strbuf_free(&notes);
        return s;
    }
    cl_dist d;
    if ((s = join(&cfg, o.host_mpi, &d)) != CL_OK) {
        cl_strbuf_free(&notes);
        return s;
    }
    d.timeout_s = cfg.dist_timeout;
    cl_logger lg = cl_logger_default();
    lg.level = (cl_log_level)cfg.log_level;
    lg.quiet = d.rank != 0;
    /* What the resumed checkpoint's config gave and what changed it. */
    for (char *line = notes.data, *nl; line && *line; line = nl + 1) {
        if (!(nl = strchr(line, '\n')))
            break;
        *nl = '\0';
        cl_log(&lg, CL_LOG_INFO, "%s", line);
    }
    cl_strbuf_free(&notes);
    relay r = {on_progress, ctx, 0, 0, 0, 0, NAN, d.rank, d.size};
    cl_train_hooks hooks = {.ctx = &r,
                            .on_event = on_progress ? on_event : NULL,
                            .host_signals = o.host_signals};
    cl_train_result res;
    memset(&res, 0, sizeof res);
    s = cl_train_run(&cfg, &d, &lg, &hooks, &res);
    if (summary) {
        /* The steps this call trained: after a resume, not the ones
         * before it (0 when the run was already complete). */
        summary->steps = res.steps_run;
        summary->epochs = res.epochs;
        summary->last_loss = res.last_loss;
        summary->val_top1 = res.val_top1;
        summary->val_top5 = res.val_top5;
        summary->val_loss = res.val_loss;
        summary->best_top1 = res.best_top1;
        summary->seconds = res.seconds;
        summary->img_per_s = res.img_per_s;
        summary->stopped = r.stopped;
        if (s != CL_OK && s != CL_ERR_INTERRUPTED) {
            /* The loop fills its result when it finishes or stops; a
             * failed run reports what its events said. */
            summary->steps = r.last_step - r.first_step;
            summary->epochs = r.last_epoch;
            summary->last_loss = r.last_loss;
        }
        snprintf(summary->last_checkpoint, sizeof summary->last_checkpoint,
                 "%s", res.last_ckpt);
        snprintf(summary->best_checkpoint, sizeof summary->best_checkpoint,
                 "%s", res.best_ckpt);
        summary->rank = d.rank;
        summary->world_size = d.size;
        summary->stop_signal = res.stop_signal;
        summary->data_wait_share = res.data_wait_share;
    }
    /* Every rank stops after the same step, so a stopped run finalises;
     * after a failure the others may wait in a collective for this one,
     * and finalising would wait for them.  MPI the host started is only
     * let go of (the run's communicator freed), never finalised. */
    if (s == CL_OK || s == CL_ERR_INTERRUPTED || d.size == 1)
        cl_dist_finalize(&d);
    return s;
}
