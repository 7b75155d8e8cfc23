/* `classic embed`: penultimate features of a dataset split, for retrieval. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/error.h"
#include "core/mem.h"
#include "io/safetensors.h"
#include "train/evaluate.h"
#include "train/model.h"

static void usage(void)
{
    printf("usage: classic embed --checkpoint FILE --out features.safetensors "
           "[--split test|train]\n"
           "                     [--batch N] [--arch resnetNN] [--key value "
           "...]\n\n"
           "Writes the pooled penultimate features (2048-d for resnet50) of "
           "every sample\nof a split as a safetensors file: 'features' (N, "
           "D) F32, 'labels' (N) I64,\n'indices' (N) I64 (dataset order).\n"
           "FILE may be a PyTorch .pth or a plain safetensors file (arch "
           "inferred\nor checked against --arch; give the data with "
           "--dataset and --data_dir).\n");
}

typedef struct sink {
    float *feat;
    int64_t *labels, *indices;
    const cl_dataset *ds;
    int64_t n, cap;
    int dim;
} sink;

static void on_features(void *ctx, int64_t index, const float *row, int dim,
                        const float *logits, int k)
{
    sink *s = ctx;
    (void)logits;
    (void)k;
    if (s->n >= s->cap)
        return;
    memcpy(s->feat + (size_t)s->n * dim, row, (size_t)dim * sizeof(float));
    s->labels[s->n] = cl_dataset_label(s->ds, index);
    s->indices[s->n] = index;
    s->n++;
}

static const char *const own[] = {"--checkpoint", "--out",  "--split",
                                  "--batch",      "--arch", NULL};

int cl_cmd_embed(int argc, char **argv)
{
    if (cl_cli_is_help(argc, argv)) {
        usage();
        return 0;
    }
    const char *ckpt = cl_cli_option(argc, argv, "--checkpoint");
    const char *out = cl_cli_option(argc, argv, "--out");
    const char *split = cl_cli_option(argc, argv, "--split");
    const char *bs = cl_cli_option(argc, argv, "--batch");
    if (!ckpt || !out) {
        fprintf(stderr, "classic: embed: --checkpoint and --out are "
                        "required\n");
        return 2;
    }
    int batch = bs ? atoi(bs) : 100;
    if (batch < 1)
        batch = 100;
    cl_model m;
    cl_model_data md;
    cl_metrics met;
    cl_st_writer *w = NULL;
    sink sk;
    memset(&sk, 0, sizeof sk);
    memset(&met, 0, sizeof met);
    memset(&md, 0, sizeof md);
    cl_status s =
        cl_model_open_as(&m, ckpt, cl_cli_option(argc, argv, "--arch"), batch,
                         "onednn", CL_PLAN_INFER, 0);
    if (s != CL_OK)
        return cl_cli_fail("embed", s);
    if ((s = cl_cli_overrides(argc, argv, own, &m.cfg)) != CL_OK)
        goto fail;
    if (split)
        snprintf(m.cfg.val_split, sizeof m.cfg.val_split, "%s", split);
    if ((s = cl_model_data_open(&m, batch, 1, 0, &md)) != CL_OK)
        goto fail;
    sk.ds = md.ds;
    sk.dim = (int)m.g.tensors[m.g.features].shape.d[1];
    sk.cap = cl_loader_samples_per_epoch(md.ld);
    sk.feat = cl_alloc((size_t)sk.cap * sk.dim * sizeof(float), "features");
    sk.labels = cl_alloc((size_t)sk.cap * sizeof(int64_t), "labels");
    sk.indices = cl_alloc((size_t)sk.cap * sizeof(int64_t), "indices");
    if (!sk.feat || !sk.labels || !sk.indices) {
        s = CL_ERR_NOMEM;
        goto fail;
    }
    if ((s = cl_metrics_init(&met, m.num_classes)) != CL_OK ||
        (s = cl_evaluate(m.be, md.ld, &met, NULL, 0, on_features, &sk)) !=
            CL_OK)
        goto fail;
    int64_t fd[2] = {sk.n, sk.dim};
    if ((s = cl_st_writer_new(&w)) != CL_OK ||
        (s = cl_st_writer_add(w, "features", CL_ST_F32, cl_shape_make(2, fd),
                              sk.feat)) != CL_OK ||
        (s = cl_st_writer_add(w, "labels", CL_ST_I64, cl_shape_make(1, fd),
                              sk.labels)) != CL_OK ||
        (s = cl_st_writer_add(w, "indices", CL_ST_I64, cl_shape_make(1, fd),
                              sk.indices)) != CL_OK ||
        (s = cl_st_writer_meta(w, "checkpoint", ckpt)) != CL_OK ||
        (s = cl_st_writer_save(w, out)) != CL_OK)
        goto fail;
    printf("%lld features of dimension %d written to %s (top-1 on the way: "
           "%.2f%%)\n",
           (long long)sk.n, sk.dim, out, 100 * cl_metrics_top1(&met));
fail:
    cl_st_writer_free(w);
    cl_free(sk.feat);
    cl_free(sk.labels);
    cl_free(sk.indices);
    cl_metrics_free(&met);
    cl_model_data_close(&md);
    cl_model_close(&m);
    return s == CL_OK ? 0 : cl_cli_fail("embed", s);
}
