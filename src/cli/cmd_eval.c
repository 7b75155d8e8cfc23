/* `classic eval`: accuracy of a checkpoint on a dataset split. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "classic/classic.h"

#include "cli/cli.h"
#include "core/error.h"

static void usage(void)
{
    printf(
        "usage: classic eval --checkpoint FILE [--batch N] [--split "
        "test|train]\n"
        "                    [--csv confusion.csv] [--backend onednn|ref]\n"
        "                    [--arch ARCH] [--precision f32|bf16|int8] "
        "[--key value ...]\n\n"
        "Evaluates a checkpoint: top-1, top-5, loss, per-class accuracy and "
        "the\nconfusion matrix.  Data and eval transforms come from the "
        "checkpoint's\nrecipe; --key value overrides its data and evaluation "
        "keys: dataset,\ndata_dir, train_split, val_split, limit_val, "
        "limit_train, class_indexing,\non_bad_image, num_parallel_workers, "
        "prefetch, crop_pct, interpolation,\neval_hflip (true: flip "
        "test-time augmentation), load_ema, log_level,\nmax_pixels; any "
        "other option is refused.\nUnder mpirun the split is sharded and "
        "the counts summed: every sample\nis counted exactly once.  FILE may "
        "be a "
        "PyTorch .pth or a plain safetensors\nfile (arch inferred or "
        "checked against --arch; give the data with --dataset\nand "
        "--data_dir).\nA checkpoint of a run with ema: true is scored with "
        "its EMA weights;\n--load_ema false scores its raw "
        "weights.\n--precision "
        "bf16 scores in bf16, int8 a file `classic quantize` wrote (its\n"
        "default; f32 scores its dequantized weights); docs/deploy.md.\n");
}

static const char *const own[] = {"--checkpoint", "--batch",   "--split",
                                  "--csv",        "--backend", "--arch",
                                  "--precision",  NULL};

int cl_cmd_eval(int argc, char **argv)
{
    if (cl_cli_is_help(argc, argv)) {
        usage();
        return 0;
    }
    const char *ckpt = cl_cli_option(argc, argv, "--checkpoint");
    const char *bs = cl_cli_option(argc, argv, "--batch");
    const char *csv = cl_cli_option(argc, argv, "--csv");
    if (!ckpt) {
        fprintf(stderr, "classic: eval: --checkpoint FILE is required\n");
        return 2;
    }
    int batch = bs ? atoi(bs) : 100;
    if (batch < 1 || batch > 65536) {
        fprintf(stderr, "classic: eval: --batch must be 1..65536\n");
        return 2;
    }
    const char *precision = NULL;
    if (cl_cli_refuse_options(argc, argv, "eval", own, NULL, 1) ||
        cl_cli_precision(argc, argv, "eval", &precision))
        return 2;
    cl_cli_pairs p;
    cl_status s = cl_cli_pairs_collect(argc, argv, own, &p);
    if (s != CL_OK)
        return cl_cli_fail("eval", s);
    /* --split names the split as the recipe's val_split would ("test",
     * "train", or an image folder's subdirectory). */
    cl_eval_opts o = {.size = sizeof o,
                      .arch = cl_cli_option(argc, argv, "--arch"),
                      .backend = cl_cli_option(argc, argv, "--backend"),
                      .batch = batch,
                      .split = cl_cli_option(argc, argv, "--split"),
                      .overrides = (const char *const *)p.kv,
                      .n_overrides = p.n,
                      .distributed = 1,
                      .precision = precision};
    cl_cli_progress prog;
    cl_cli_progress_init(&prog, "eval");
    o.progress = cl_cli_progress_update;
    o.progress_ctx = &prog;
    cl_evaluation *e = NULL;
    cl_eval_summary sum;
    s = cl_evaluation_run(&e, ckpt, &o);
    cl_cli_progress_end(&prog);
    if (s == CL_OK && (s = cl_evaluation_summary(e, &sum)) == CL_OK &&
        sum.rank == 0) {
        if ((s = cl_evaluation_print(e, stdout)) == CL_OK && csv &&
            (s = cl_evaluation_write_csv(e, csv)) == CL_OK)
            printf("confusion matrix written to %s\n", csv);
    }
    cl_cli_pairs_free(&p);
    cl_evaluation_free(e);
    /* A failed process under mpirun ends without MPI_Finalize, and the
     * launcher ends the job: no rank waits on it in a collective. */
    return s == CL_OK ? 0 : cl_cli_fail("eval", s);
}
