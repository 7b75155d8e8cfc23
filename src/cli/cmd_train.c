/* `classic train`: run a recipe, single process or under mpirun. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "classic/classic.h"

#include "cli/cli.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/dist.h"
#include "io/checkpoint.h"
#include "io/strbuf.h"
#include "report/report.h"
#include "train/metrics.h"
#include "train/train_config.h"
#include "train/trainer.h"

static void usage(void)
{
    printf("usage: classic train [--config recipe.yaml] [--key value ...]\n"
           "\n"
           "Trains a ResNet or a Swin as the recipe says; any key of the "
           "recipe can be\n"
           "overridden on the command line (--lr 0.05, --epoch_size 2,\n"
           "--pretrained w.safetensors).\n"
           "--resume run/resnet50-e3-s500.safetensors continues a run with\n"
           "the config its checkpoint holds (a recipe and keys given apply\n"
           "over it, and the log names each change).\n"
           "Under `mpirun -np N classic train ...` it trains data-parallel.\n"
           "Writes config.yaml, metrics.jsonl and checkpoints into\n"
           "ckpt_save_dir; a new run refuses a folder that holds another\n"
           "run unless given --overwrite true.\n\nkeys:\n");
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
} report_ctx;

/* The curves so far after each epoch but the last, for a person watching
 * a long run (the last gets the full report below). */
static int on_progress(void *vctx, const cl_progress *p)
{
    const report_ctx *c = vctx;
    if (p->kind == CL_PROGRESS_EPOCH && !p->last_epoch && p->rank == 0)
        write_report(c->cfg, c->lg, 0);
    return 0;
}

int cl_cmd_train(int argc, char **argv)
{
    if (cl_cli_is_help(argc, argv)) {
        usage();
        return 0;
    }
    const char *last = argv[argc - 1];
    if (argc > 1 && (strcmp(last, "--config") == 0 || strcmp(last, "-c") == 0))
        return cl_cli_fail("train",
                           cl_error(CL_ERR_ARG, "--config needs a file name"));
    cl_cli_pairs p;
    cl_status s = cl_cli_pairs_collect(argc, argv, NULL, &p);
    if (s != CL_OK)
        return cl_cli_fail("train", s);
    const char *recipe = cl_cli_option(argc, argv, "--config");
    if (!recipe)
        recipe = cl_cli_option(argc, argv, "-c");
    /* The config resolved here too (a resumed checkpoint's own under the
     * keys given), for the report's run directory, and so that a bad key
     * fails before MPI starts. */
    cl_config cfg;
    s = cl_train_config_resolve(&cfg, recipe, NULL, (const char *const *)p.kv,
                                p.n, "command line", NULL);
    if (s != CL_OK) {
        cl_cli_pairs_free(&p);
        return cl_cli_fail("train", s);
    }
    cl_logger lg = cl_logger_default();
    lg.level = (cl_log_level)cfg.log_level;
    report_ctx rc = {&cfg, &lg};
    cl_train_summary res;
    s = cl_train(recipe, NULL, (const char *const *)p.kv, p.n, on_progress, &rc,
                 &res);
    cl_cli_pairs_free(&p);
    if (s != CL_OK) {
        fprintf(stderr, "classic: train (rank %d): %s\n", res.rank,
                cl_last_error());
        /* Every rank stopped after the same step: the status is the
         * shell's for death by that signal (130 SIGINT). */
        if (s == CL_ERR_INTERRUPTED)
            return 128 + res.stop_signal;
        /* A failing rank must not leave the others waiting in a
         * collective: end the whole job. */
        cl_dist_abort_job(1);
        return 1;
    }
    if (res.rank == 0 && res.steps == 0) {
        /* Resumed at its end (every run trains a step otherwise). */
        printf("the run is complete: %s ends it (epoch %d); nothing was "
               "left to train\n",
               res.last_checkpoint, res.epochs);
        return 0;
    }
    if (res.rank == 0) {
        /* With a validation split the report also evaluates the final
         * checkpoint (confusion matrix, misclassified images).  steps:
         * those this process trained, not the resumed ones before. */
        write_report(&cfg, &lg, !isnan(res.val_top1));
        printf("trained %lld steps in %.1f s (%.1f img/s per process, "
               "data wait %.1f%%)\n",
               res.steps, res.seconds, res.img_per_s,
               100 * res.data_wait_share);
        if (!isnan(res.val_top1)) {
            /* top-k as training and eval name it: min(5, K), K from the
             * checkpoint (the config's num_classes may be 0). */
            char kbuf[32] = "", ls[32];
            cl_ckpt_read_meta(res.last_checkpoint, CL_META_NUM_CLASSES, kbuf,
                              sizeof kbuf);
            cl_clear_error();
            int k = atoi(kbuf);
            printf("validation: top-1 %.2f%%  top-%d %.2f%%  loss %s "
                   "(best %stop-1 %.2f%%), precision %s\n",
                   100 * res.val_top1, k > 0 ? cl_metrics_topk_k(k) : 5,
                   100 * res.val_top5,
                   cl_metrics_fmt_loss(res.val_loss, ls, sizeof ls),
                   cfg.ema ? "EMA " : "", 100 * res.best_top1,
                   cl_train_eval_precision(cfg.amp_level));
        }
        printf("checkpoint: %s\n", res.last_checkpoint);
        if (res.best_checkpoint[0])
            printf("best:       %s\n", res.best_checkpoint);
    }
    return 0;
}
