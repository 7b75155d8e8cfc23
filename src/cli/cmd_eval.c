/* `classic eval`: accuracy of a checkpoint on a dataset split. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "core/error.h"
#include "dist/dist.h"
#include "train/evaluate.h"
#include "train/model.h"

static void usage(void)
{
    printf("usage: classic eval --checkpoint FILE [--batch N] [--split "
           "test|train]\n"
           "                    [--csv confusion.csv] [--backend onednn|ref] "
           "[--key value ...]\n"
           "                    [--arch resnetNN]\n\n"
           "Evaluates a checkpoint: top-1, top-5, loss, per-class accuracy and "
           "the\nconfusion matrix.  Data and eval transforms come from the "
           "checkpoint's\nrecipe; --key value overrides it (e.g. --data_dir, "
           "--limit_val,\n--eval_hflip true for flip test-time "
           "augmentation).\nUnder mpirun the split is sharded and the counts "
           "summed: every sample\nis counted exactly once.  FILE may be a "
           "PyTorch .pth or a plain safetensors\nfile (arch inferred or "
           "checked against --arch; give the data with --dataset\nand "
           "--data_dir).\n");
}

static const char *const own[] = {"--checkpoint", "--batch", "--split", "--csv",
                                  "--backend",    "--arch",  NULL};

int cl_cmd_eval(int argc, char **argv)
{
    if (cl_cli_is_help(argc, argv)) {
        usage();
        return 0;
    }
    const char *ckpt = cl_cli_option(argc, argv, "--checkpoint");
    const char *bs = cl_cli_option(argc, argv, "--batch");
    const char *split = cl_cli_option(argc, argv, "--split");
    const char *csv = cl_cli_option(argc, argv, "--csv");
    const char *backend = cl_cli_option(argc, argv, "--backend");
    if (!ckpt) {
        fprintf(stderr, "classic: eval: --checkpoint FILE is required\n");
        return 2;
    }
    int batch = bs ? atoi(bs) : 100;
    if (batch < 1 || batch > 65536) {
        fprintf(stderr, "classic: eval: --batch must be 1..65536\n");
        return 2;
    }
    /* --split names the split as the recipe's val_split would ("test",
     * "train", or an image folder's subdirectory). */
    cl_dist d;
    cl_model m;
    cl_model_data md;
    memset(&md, 0, sizeof md);
    cl_metrics met;
    memset(&met, 0, sizeof met);
    cl_status s = cl_dist_init(&d, NULL, NULL);
    if (s != CL_OK)
        return cl_cli_fail("eval", s);
    s = cl_model_open_as(&m, ckpt, cl_cli_option(argc, argv, "--arch"), batch,
                         backend ? backend : "onednn", CL_PLAN_INFER, 0);
    if (s != CL_OK) {
        cl_dist_finalize(&d);
        return cl_cli_fail("eval", s);
    }
    if ((s = cl_cli_overrides(argc, argv, own, &m.cfg)) != CL_OK)
        goto fail;
    if (split)
        snprintf(m.cfg.val_split, sizeof m.cfg.val_split, "%s", split);
    if ((s = cl_model_data_open(&m, batch, d.size, d.rank, &md)) != CL_OK ||
        (s = cl_metrics_init(&met, m.num_classes)) != CL_OK ||
        (s = cl_evaluate(m.be, md.ld, &met, &d, m.cfg.eval_hflip, NULL,
                         NULL)) != CL_OK)
        goto fail;
    if (d.rank == 0) {
        printf("%s on %s split '%s' (%lld samples%s)\n", ckpt,
               cl_dataset_format(md.ds), m.cfg.val_split,
               (long long)cl_metrics_count(&met),
               m.cfg.eval_hflip ? ", averaged with their mirrors" : "");
        if ((s = cl_metrics_print(&met, stdout,
                                  (const char *const *)m.class_names)) != CL_OK)
            goto fail;
        if (csv &&
            (s = cl_metrics_write_csv(
                 &met, csv, (const char *const *)m.class_names)) != CL_OK)
            goto fail;
        if (csv)
            printf("confusion matrix written to %s\n", csv);
    }
fail:
    cl_metrics_free(&met);
    cl_model_data_close(&md);
    cl_model_close(&m);
    if (s != CL_OK) {
        int rc = cl_cli_fail("eval", s);
        if (d.size > 1)
            cl_dist_abort(&d, 1);
        cl_dist_finalize(&d);
        return rc;
    }
    cl_dist_finalize(&d);
    return 0;
}
