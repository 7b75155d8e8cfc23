/* The public evaluation API: a checkpoint over a dataset split (what
 * `classic eval` and `classic embed` run), its metrics, and its features as
 * the gallery `classic retrieve` searches. */
/* realpath (the gallery's absolute checkpoint path) is XSI. */
#define _XOPEN_SOURCE 700
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/opts.h"
#include "classic/classic.h"
#include "core/error.h"
#include "core/mem.h"
#include "dist/dist.h"
#include "io/safetensors.h"
#include "io/strbuf.h"
#include "train/evaluate.h"
#include "train/model.h"
#include "train/recipe.h"
#include "train/retrieval.h"

struct cl_evaluation {
    char path[640]; /* the checkpoint */
    cl_model m;
    cl_model_data md;
    cl_metrics met;
    cl_dist d;
    int hflip;
    /* keep_features: n rows of dim floats, their labels and dataset
     * indices, in the order the loader gave them (the split's). */
    float *feat;
    long long *labels, *indices;
    long long n, cap;
    int dim;
};

static void on_features(void *ctx, int64_t index, const float *row, int dim,
                        const float *logits, int k)
{
    cl_evaluation *e = ctx;
    (void)logits;
    (void)k;
    if (e->n >= e->cap)
        return;
    memcpy(e->feat + (size_t)e->n * dim, row, (size_t)dim * sizeof(float));
    e->labels[e->n] = cl_dataset_label(e->md.ds, index);
    e->indices[e->n] = index;
    e->n++;
}

static cl_status keep_room(cl_evaluation *e)
{
    e->dim = cl_model_feature_dim(&e->m);
    if (e->dim <= 0)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: this model has no feature layer to embed with",
                        e->path);
    e->cap = cl_loader_samples_per_epoch(e->md.ld);
    e->feat = cl_alloc((size_t)e->cap * e->dim * sizeof(float), "features");
    e->labels = cl_alloc((size_t)e->cap * sizeof(long long), "labels");
    e->indices = cl_alloc((size_t)e->cap * sizeof(long long), "indices");
    return e->feat && e->labels && e->indices ? CL_OK : CL_ERR_NOMEM;
}

/* The key of override kv ("key=value") into key, spelled as the config's
 * keys are ('-' as '_'); "" when it does not fit. */
static void override_key(const char *kv, char *key, size_t cap)
{
    size_t n = strcspn(kv, "=");
    if (n >= cap)
        n = 0;
    for (size_t i = 0; i < n; i++)
        key[i] = kv[i] == '-' ? '_' : kv[i];
    key[n] = '\0';
}

static cl_status run(cl_evaluation *e, const char *path, const cl_eval_opts *o)
{
    const char *fn = "cl_evaluation_run";
    int batch = o->batch > 0 ? o->batch : 100;
    if (o->batch < 0 || batch > 65536)
        return cl_error(CL_ERR_ARG, "%s: batch %d: expected 1..65536", fn,
                        o->batch);
    if (o->n_overrides < 0 || (o->n_overrides > 0 && !o->overrides))
        return cl_error(CL_ERR_ARG, "%s: %d overrides given but the list is %s",
                        fn, o->n_overrides, o->overrides ? "there" : "NULL");
    if (o->keep_features && o->distributed && cl_dist_launched())
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: keep_features reads the whole split in one "
                        "process: run it without distributed (or outside "
                        "mpirun)",
                        fn);
    /* load_ema picks the weights before the checkpoint's recipe is read:
     * the overrides' value of it, not the stored run's. */
    cl_config pick;
    cl_precision prec;
    cl_config_defaults(&pick);
    CL_TRY(cl_precision_parse(o->precision, &prec));
    int data_given = 0;
    for (int i = 0; i < o->n_overrides; i++) {
        char key[64];
        CL_TRY(cl_config_set_pair(&pick, o->overrides[i], fn));
        override_key(o->overrides[i], key, sizeof key);
        /* amp_level says how a run trains; an evaluation that took it
         * would score in f32 while the caller believes bf16. */
        if (strcmp(key, "amp") == 0 || strcmp(key, "amp_level") == 0)
            return cl_error(CL_ERR_ARG,
                            "%s: '%s': amp_level is how a run trains; an "
                            "evaluation runs at a precision (--precision "
                            "bf16, or f32 by default)",
                            fn, o->overrides[i]);
        if (!cl_eval_key_applies(key))
            return cl_error(CL_ERR_ARG,
                            "%s: '%s' does not apply to an evaluation: the "
                            "checkpoint fixes the network and its training; "
                            "the data keys (dataset, data_dir, splits, "
                            "limits, workers), crop_pct, interpolation, "
                            "eval_hflip and load_ema do",
                            fn, key);
        data_given |=
            strcmp(key, "dataset") == 0 || strcmp(key, "data_dir") == 0;
    }
    if (o->distributed)
        CL_TRY(cl_dist_init(&e->d, NULL, NULL));
    CL_TRY(cl_model_open_weights(&e->m, path, o->arch, batch,
                                 o->backend ? o->backend : "onednn",
                                 CL_PLAN_INFER, 0, !pick.load_ema, prec));
    for (int i = 0; i < o->n_overrides; i++)
        CL_TRY(cl_config_set_pair(&e->m.cfg, o->overrides[i], fn));
    /* Weights without classic's metadata (.pth, plain safetensors) carry
     * no dataset: the placeholder folder would fail with a path the user
     * never gave. */
    if (e->m.foreign && !data_given)
        return cl_error(CL_ERR_ARG,
                        "%s holds weights only and names no dataset: give "
                        "the data to evaluate with --dataset and --data_dir "
                        "(overrides dataset=, data_dir=)",
                        path);
    /* The sample limit follows the split: limit_train for the training
     * split, limit_val otherwise, as training reads them. */
    if (o->split) {
        if (strcmp(o->split, e->m.cfg.train_split) == 0 &&
            strcmp(o->split, e->m.cfg.val_split) != 0)
            e->m.cfg.limit_val = e->m.cfg.limit_train;
        snprintf(e->m.cfg.val_split, sizeof e->m.cfg.val_split, "%s", o->split);
    }
    e->hflip = e->m.cfg.eval_hflip;
    CL_TRY(cl_model_data_open(&e->m, batch, e->d.size, e->d.rank, &e->md));
    CL_TRY(cl_metrics_init(&e->met, e->m.num_classes));
    if (o->keep_features)
        CL_TRY(keep_room(e));
    return cl_evaluate_progress(e->m.be, e->md.ld, &e->met, &e->d, e->hflip,
                                o->keep_features ? on_features : NULL, e,
                                o->progress, o->progress_ctx);
}

cl_status cl_evaluation_run(cl_evaluation **out, const char *path,
                            const cl_eval_opts *opts)
{
    if (!out)
        return cl_error(CL_ERR_ARG, "cl_evaluation_run: out is NULL");
    *out = NULL;
    if (!path)
        return cl_error(CL_ERR_ARG, "cl_evaluation_run: path is NULL");
    /* The first opts->size bytes, the rest zero (as cl_classifier_open
     * reads its options): a caller built against an older header passes a
     * smaller struct. */
    cl_eval_opts o;
    CL_TRY(cl_api_read_opts(&o, sizeof o, opts, "cl_evaluation_run",
                            "cl_eval_opts"));
    cl_evaluation *e = calloc(1, sizeof *e);
    if (!e)
        return cl_error(CL_ERR_NOMEM, "cl_evaluation_run: out of memory");
    cl_dist_single(&e->d);
    snprintf(e->path, sizeof e->path, "%s", path);
    cl_status s = run(e, path, &o);
    if (s != CL_OK) {
        /* Under mpirun the others may be waiting for this process in a
         * collective, and finalising would wait for them: MPI stays up,
         * and the launcher ends the job when this process exits. */
        if (e->d.size > 1)
            cl_dist_single(&e->d);
        cl_evaluation_free(e);
        return s;
    }
    *out = e;
    return CL_OK;
}

void cl_evaluation_free(cl_evaluation *e)
{
    if (!e)
        return;
    cl_free(e->feat);
    cl_free(e->labels);
    cl_free(e->indices);
    cl_metrics_free(&e->met);
    cl_model_data_close(&e->md);
    cl_model_close(&e->m);
    cl_dist_finalize(&e->d);
    free(e);
}

cl_status cl_evaluation_summary(const cl_evaluation *e, cl_eval_summary *out)
{
    if (!e || !out)
        return cl_error(CL_ERR_ARG,
                        "cl_evaluation_summary: evaluation or out is NULL");
    memset(out, 0, sizeof *out);
    out->samples = (long long)cl_metrics_count(&e->met);
    out->top1 = cl_metrics_top1(&e->met);
    out->top5 = cl_metrics_topk(&e->met);
    out->loss = cl_metrics_loss(&e->met);
    out->mean_class_acc = cl_metrics_mean_class_acc(&e->met);
    out->num_classes = e->m.num_classes;
    out->rank = e->d.rank;
    out->world_size = e->d.size;
    return CL_OK;
}

long long cl_evaluation_confusion(const cl_evaluation *e, int truth, int pred)
{
    int k = e ? e->m.num_classes : 0;
    if (!e || truth < 0 || truth >= k || pred < 0 || pred >= k)
        return -1;
    return (long long)e->met.confusion[(size_t)truth * k + pred];
}

const char *cl_evaluation_class_name(const cl_evaluation *e, int k)
{
    if (!e || k < 0 || k >= e->m.num_classes)
        return NULL;
    return e->m.class_names && e->m.class_names[k] ? e->m.class_names[k] : "";
}

cl_status cl_evaluation_print(const cl_evaluation *e, FILE *f)
{
    if (!e || !f)
        return cl_error(CL_ERR_ARG, "cl_evaluation_print: evaluation or file "
                                    "is NULL");
    fprintf(f, "%s%s on %s split '%s' (%lld samples%s), precision %s\n",
            e->path, e->m.ema ? " (its EMA weights)" : "",
            cl_dataset_format(e->md.ds), e->m.cfg.val_split,
            (long long)cl_metrics_count(&e->met),
            e->hflip ? ", averaged with their mirrors" : "",
            cl_precision_name(e->m.precision));
    return cl_metrics_print(&e->met, f, (const char *const *)e->m.class_names);
}

cl_status cl_evaluation_write_csv(const cl_evaluation *e, const char *path)
{
    if (!e || !path)
        return cl_error(CL_ERR_ARG, "cl_evaluation_write_csv: evaluation or "
                                    "path is NULL");
    return cl_metrics_write_csv(&e->met, path,
                                (const char *const *)e->m.class_names);
}

const float *cl_evaluation_features(const cl_evaluation *e, long long *n,
                                    int *dim)
{
    if (n)
        *n = e && e->feat ? e->n : 0;
    if (dim)
        *dim = e && e->feat ? e->dim : 0;
    return e ? e->feat : NULL;
}

const long long *cl_evaluation_labels(const cl_evaluation *e)
{
    return e ? e->labels : NULL;
}

/* The file names of the rows (image folders only), each ended by a NUL,
 * as the U8 entry 'names': the split's folder joined to the dataset's
 * relative paths, so that a name opens.  buf must outlive the writer's
 * save. */
static cl_status add_names(cl_st_writer *w, const cl_evaluation *e,
                           cl_strbuf *buf)
{
    if (e->n == 0 || !cl_dataset_path(e->md.ds, e->indices[0]))
        return CL_OK;
    char dir[CL_CFG_PATH_MAX + CL_CFG_NAME_MAX + 2];
    cl_dataset_spec spec;
    CL_TRY(cl_recipe_dataset(&e->m.cfg, CL_USAGE_TEST, dir, sizeof dir, &spec));
    for (long long i = 0; i < e->n; i++) {
        const char *p = cl_dataset_path(e->md.ds, e->indices[i]);
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
static cl_status add_meta(cl_st_writer *w, const cl_evaluation *e,
                          cl_strbuf *classes)
{
    const cl_dataset *ds = e->md.ds;
    CL_TRY(cl_strbuf_addc(classes, '['));
    for (int k = 0; k < cl_dataset_num_classes(ds); k++) {
        const char *n = cl_dataset_class_name(ds, k);
        if (k)
            CL_TRY(cl_strbuf_addc(classes, ','));
        CL_TRY(cl_strbuf_add_json_str(classes, n, strlen(n)));
    }
    CL_TRY(cl_strbuf_addc(classes, ']'));
    char dataset[64];
    CL_TRY(cl_config_get(&e->m.cfg, "dataset", dataset, sizeof dataset));
    CL_TRY(cl_st_writer_meta(w, CL_GALLERY_META_DATASET, dataset));
    CL_TRY(cl_st_writer_meta(w, CL_GALLERY_META_SPLIT, e->m.cfg.val_split));
    CL_TRY(cl_st_writer_meta(w, CL_GALLERY_META_DATA_DIR, e->m.cfg.data_dir));
    CL_TRY(cl_st_writer_meta(w, CL_GALLERY_META_CLASS_NAMES,
                             cl_strbuf_str(classes)));
    CL_TRY(cl_st_writer_meta(w, CL_GALLERY_META_PRECISION,
                             cl_precision_name(e->m.precision)));
    /* Absolute, so that `classic retrieve` finds the checkpoint from any
     * folder; the path as given when it cannot be resolved. */
    char *abs = realpath(e->path, NULL);
    cl_status s =
        cl_st_writer_meta(w, CL_GALLERY_META_CHECKPOINT, abs ? abs : e->path);
    free(abs);
    return s;
}

cl_status cl_evaluation_save_features(const cl_evaluation *e, const char *path)
{
    const char *fn = "cl_evaluation_save_features";
    if (!e || !path)
        return cl_error(CL_ERR_ARG, "%s: evaluation or path is NULL", fn);
    if (!e->feat)
        return cl_error(CL_ERR_ARG,
                        "%s: the evaluation kept no features (set "
                        "keep_features)",
                        fn);
    cl_st_writer *w = NULL;
    cl_strbuf names, classes;
    cl_strbuf_init(&names);
    cl_strbuf_init(&classes);
    int64_t fd[2] = {e->n, e->dim};
    cl_status s;
    if ((s = cl_st_writer_new(&w)) != CL_OK ||
        (s = cl_st_writer_add(w, CL_GALLERY_FEATURES, CL_ST_F32,
                              cl_shape_make(2, fd), e->feat)) != CL_OK ||
        (s = cl_st_writer_add(w, CL_GALLERY_LABELS, CL_ST_I64,
                              cl_shape_make(1, fd), e->labels)) != CL_OK ||
        (s = cl_st_writer_add(w, CL_GALLERY_INDICES, CL_ST_I64,
                              cl_shape_make(1, fd), e->indices)) != CL_OK ||
        (s = add_names(w, e, &names)) != CL_OK ||
        (s = add_meta(w, e, &classes)) != CL_OK)
        goto done;
    s = cl_st_writer_save(w, path);
done:
    cl_st_writer_free(w);
    cl_strbuf_free(&names);
    cl_strbuf_free(&classes);
    return s;
}
