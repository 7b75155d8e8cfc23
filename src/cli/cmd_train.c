/* `classic train`: run a recipe, single process or under mpirun. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/dist.h"
#include "report/report.h"
#include "train/trainer.h"

static void usage(void)
{
    printf("usage: classic train [--config recipe.yaml] [--key value ...]\n"
           "\n"
           "Trains a ResNet as the recipe says; any key of the recipe can be\n"
           "overridden on the command line (--lr 0.05, --epoch_size 2,\n"
           "--resume run/resnet50-e3-s500.safetensors, --pretrained "
           "w.safetensors).\n"
           "Under `mpirun -np N classic train ...` it trains data-parallel.\n"
           "Writes config.yaml, metrics.jsonl and checkpoints into\n"
           "ckpt_save_dir.\n\nkeys:\n");
    cl_config_print_help(stdout);
}

/* report.html in the run directory; a failure to write it is a warning,
 * never a failed run.  eval: also evaluate the last checkpoint. */
static void write_report(const cl_config *cfg, const cl_logger *lg, int eval)
{
    cl_report_opts ro = cl_report_opts_default();
    ro.eval = eval;
    if (cl_report_write(cfg->ckpt_save_dir, NULL, &ro) != CL_OK)
        cl_log(lg, CL_LOG_WARN, "report: %s", cl_last_error());
}

typedef struct report_ctx {
    const cl_config *cfg;
    const cl_logger *lg;
    int root;
} report_ctx;

/* The curves so far after each epoch but the last, for a person watching
 * a long run (the last gets the full report below). */
static int on_event(void *vctx, const cl_train_event *e)
{
    const report_ctx *c = vctx;
    if (e->kind == CL_TRAIN_EVENT_EPOCH && !e->last_epoch && c->root)
        write_report(c->cfg, c->lg, 0);
    return 0;
}

int cl_cmd_train(int argc, char **argv)
{
    if (cl_cli_is_help(argc, argv)) {
        usage();
        return 0;
    }
    cl_config cfg;
    cl_status s = cl_cli_config(argc, argv, NULL, &cfg);
    if (s != CL_OK)
        return cl_cli_fail("train", s);
    cl_dist d;
    if (cfg.dist == CL_CFG_DIST_NONE)
        cl_dist_single(&d);
    else if (cfg.dist == CL_CFG_DIST_MPI && !cl_dist_launched())
        return cl_cli_fail("train",
                           cl_error(CL_ERR_CONFIG,
                                    "dist is mpi but no MPI launcher started "
                                    "this process: run it under mpirun -np "
                                    "N, or set dist to auto or none"));
    else if ((s = cl_dist_init(&d, NULL, NULL)) != CL_OK)
        return cl_cli_fail("train", s);
    d.timeout_s = cfg.dist_timeout;
    cl_logger lg = cl_logger_default();
    lg.level = (cl_log_level)cfg.log_level;
    lg.quiet = d.rank != 0;
    cl_train_result res;
    report_ctx rc = {&cfg, &lg, d.rank == 0};
    cl_train_hooks hooks = {.ctx = &rc, .on_event = on_event};
    s = cl_train_run(&cfg, &d, &lg, &hooks, &res);
    if (s != CL_OK) {
        fprintf(stderr, "classic: train (rank %d): %s\n", d.rank,
                cl_last_error());
        /* Every rank stopped after the same step: no abort needed; the
         * status is the shell's for death by that signal (130 SIGINT). */
        if (s == CL_ERR_INTERRUPTED) {
            cl_dist_finalize(&d);
            return 128 + res.stop_signal;
        }
        /* A failing rank must not leave the others waiting in a
         * collective: end the whole job. */
        if (d.size > 1)
            cl_dist_abort(&d, 1);
        cl_dist_finalize(&d);
        return 1;
    }
    if (d.rank == 0) {
        /* With a validation split the report also evaluates the final
         * checkpoint (confusion matrix, misclassified images). */
        write_report(&cfg, &lg, !isnan(res.val_top1));
        printf("trained %lld steps in %.1f s (%.1f img/s per process, "
               "data wait %.1f%%)\n",
               (long long)res.steps, res.seconds, res.img_per_s,
               100 * res.data_wait_share);
        if (!isnan(res.val_top1))
            printf("validation: top-1 %.2f%%  top-5 %.2f%%  loss %.4f "
                   "(best top-1 %.2f%%)\n",
                   100 * res.val_top1, 100 * res.val_top5, res.val_loss,
                   100 * res.best_top1);
        printf("checkpoint: %s\n", res.last_ckpt);
        if (res.best_ckpt[0])
            printf("best:       %s\n", res.best_ckpt);
    }
    cl_dist_finalize(&d);
    return 0;
}
