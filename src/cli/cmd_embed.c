/* `classic embed`: penultimate features of a dataset split, for retrieval. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "classic/classic.h"

#include "cli/cli.h"
#include "core/error.h"

static void usage(void)
{
    printf(
        "usage: classic embed --checkpoint FILE --out features.safetensors\n"
        "                     [--split test|train] [--batch N] [--arch ARCH]\n"
        "                     [--precision f32|bf16|int8] [--key value ...]\n\n"
        "Writes the pooled penultimate features (2048-d for resnet50) of "
        "every sample\nof a split as a safetensors file: 'features' (N, "
        "D) F32, 'labels' (N) I64,\n'indices' (N) I64 (dataset order), "
        "for image folders 'names' (the files,\neach ended by a NUL, U8) "
        "and as metadata the dataset, split, data_dir,\nclass_names and "
        "checkpoint: the gallery `classic retrieve` searches.\n"
        "FILE may be a PyTorch .pth or a plain safetensors file (arch "
        "inferred\nor checked against --arch; give the data with "
        "--dataset and --data_dir).\n--key value takes the keys `classic eval` "
        "takes (data and evaluation);\nthe split's own limit applies "
        "(limit_train for the training split).\n--precision bf16 computes the "
        "features in "
        "bf16 (docs/deploy.md); the file\nrecords it, and `classic "
        "retrieve` embeds its queries the same way.\n");
}

static const char *const own[] = {
    "--checkpoint", "--out",       "--split", "--batch",
    "--arch",       "--precision", NULL};

int cl_cmd_embed(int argc, char **argv)
{
    if (cl_cli_is_help(argc, argv)) {
        usage();
        return 0;
    }
    const char *ckpt = cl_cli_option(argc, argv, "--checkpoint");
    const char *out = cl_cli_option(argc, argv, "--out");
    const char *bs = cl_cli_option(argc, argv, "--batch");
    if (!ckpt || !out) {
        fprintf(stderr, "classic: embed: --checkpoint and --out are "
                        "required\n");
        return 2;
    }
    int batch = bs ? atoi(bs) : 100;
    if (batch < 1)
        batch = 100;
    const char *precision = NULL;
    if (cl_cli_refuse_options(argc, argv, "embed", own, NULL, 1) ||
        cl_cli_precision(argc, argv, "embed", &precision))
        return 2;
    cl_cli_pairs p;
    cl_status s = cl_cli_pairs_collect(argc, argv, own, &p);
    if (s != CL_OK)
        return cl_cli_fail("embed", s);
    cl_eval_opts o = {.size = sizeof o,
                      .arch = cl_cli_option(argc, argv, "--arch"),
                      .batch = batch,
                      .split = cl_cli_option(argc, argv, "--split"),
                      .overrides = (const char *const *)p.kv,
                      .n_overrides = p.n,
                      .keep_features = 1,
                      .precision = precision};
    cl_cli_progress prog;
    cl_cli_progress_init(&prog, "embed");
    o.progress = cl_cli_progress_update;
    o.progress_ctx = &prog;
    cl_evaluation *e = NULL;
    cl_eval_summary sum;
    long long n = 0;
    int dim = 0;
    s = cl_evaluation_run(&e, ckpt, &o);
    cl_cli_progress_end(&prog);
    if (s == CL_OK && (s = cl_evaluation_summary(e, &sum)) == CL_OK &&
        (s = cl_evaluation_save_features(e, out)) == CL_OK) {
        cl_evaluation_features(e, &n, &dim);
        printf("%lld features of dimension %d written to %s (top-1 on the "
               "way: %.2f%%)\n",
               n, dim, out, 100 * sum.top1);
    }
    cl_cli_pairs_free(&p);
    cl_evaluation_free(e);
    return s == CL_OK ? 0 : cl_cli_fail("embed", s);
}
