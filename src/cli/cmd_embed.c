/* `classic embed`: penultimate features of a dataset split, for retrieval. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/error.h"
#include "core/mem.h"
#include "io/safetensors.h"
#include "io/strbuf.h"
#include "train/evaluate.h"
#include "train/model.h"
#include "train/recipe.h"
#include "train/retrieval.h"

static void usage(void)
{
    printf("usage: classic embed --checkpoint FILE --out features.safetensors "
           "[--split test|train]\n"
           "                     [--batch N] [--arch resnetNN] [--key value "
           "...]\n\n"
           "Writes the pooled penultimate features (2048-d for resnet50) of "
           "every sample\nof a split as a safetensors file: 'features' (N, "
           "D) F32, 'labels' (N) I64,\n'indices' (N) I64 (dataset order), "
           "for image folders 'names' (the files,\neach ended by a NUL, U8) "
           "and as metadata the dataset, split, data_dir,\nclass_names and "
           "checkpoint: the gallery `classic retrieve` searches.\n"
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

/* The file names of the rows (image folders only), each ended by a NUL,
 * as the U8 entry 'names': the split's folder joined to the dataset's
 * relative paths, so that a name opens.  buf must outlive the writer's
 * save. */
static cl_status add_names(cl_st_writer *w, const cl_model *m, const sink *s,
                           cl_strbuf *buf)
{
    if (s->n == 0 || !cl_dataset_path(s->ds, s->indices[0]))
        return CL_OK;
    char dir[CL_CFG_PATH_MAX + CL_CFG_NAME_MAX + 2];
    cl_dataset_spec spec;
    CL_TRY(cl_recipe_dataset(&m->cfg, CL_USAGE_TEST, dir, sizeof dir, &spec));
    for (int64_t i = 0; i < s->n; i++) {
        const char *p = cl_dataset_path(s->ds, s->indices[i]);
        if (p[0] != '/' && spec.path && spec.path[0])
            CL_TRY(cl_strbuf_addf(buf, "%s/", spec.path));
        CL_TRY(cl_strbuf_add(buf, p, strlen(p) + 1));
    }
    int64_t len = (int64_t)buf->len;
    return cl_st_writer_add(w, CL_GALLERY_NAMES, CL_ST_U8,
                            cl_shape_make(1, &len), cl_strbuf_str(buf));
}

/* What names a row without a file (dataset, split, folder), the class
 * names and the checkpoint; classes must outlive the writer's save. */
static cl_status add_meta(cl_st_writer *w, const cl_model *m,
                          const cl_dataset *ds, const char *ckpt,
                          cl_strbuf *classes)
{
    CL_TRY(cl_strbuf_addc(classes, '['));
    for (int k = 0; k < cl_dataset_num_classes(ds); k++) {
        const char *n = cl_dataset_class_name(ds, k);
        if (k)
            CL_TRY(cl_strbuf_addc(classes, ','));
        CL_TRY(cl_strbuf_add_json_str(classes, n, strlen(n)));
    }
    CL_TRY(cl_strbuf_addc(classes, ']'));
    char dataset[64];
    CL_TRY(cl_config_get(&m->cfg, "dataset", dataset, sizeof dataset));
    CL_TRY(cl_st_writer_meta(w, CL_GALLERY_META_DATASET, dataset));
    CL_TRY(cl_st_writer_meta(w, CL_GALLERY_META_SPLIT, m->cfg.val_split));
    CL_TRY(cl_st_writer_meta(w, CL_GALLERY_META_DATA_DIR, m->cfg.data_dir));
    CL_TRY(cl_st_writer_meta(w, CL_GALLERY_META_CLASS_NAMES,
                             cl_strbuf_str(classes)));
    return cl_st_writer_meta(w, CL_GALLERY_META_CHECKPOINT, ckpt);
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
    cl_strbuf names, classes;
    cl_strbuf_init(&names);
    cl_strbuf_init(&classes);
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
    sk.dim = cl_model_feature_dim(&m);
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
        (s = add_names(w, &m, &sk, &names)) != CL_OK ||
        (s = add_meta(w, &m, md.ds, ckpt, &classes)) != CL_OK ||
        (s = cl_st_writer_save(w, out)) != CL_OK)
        goto fail;
    printf("%lld features of dimension %d written to %s (top-1 on the way: "
           "%.2f%%)\n",
           (long long)sk.n, sk.dim, out, 100 * cl_metrics_top1(&met));
fail:
    cl_st_writer_free(w);
    cl_strbuf_free(&names);
    cl_strbuf_free(&classes);
    cl_free(sk.feat);
    cl_free(sk.labels);
    cl_free(sk.indices);
    cl_metrics_free(&met);
    cl_model_data_close(&md);
    cl_model_close(&m);
    return s == CL_OK ? 0 : cl_cli_fail("embed", s);
}
