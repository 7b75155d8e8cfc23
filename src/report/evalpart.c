/* The report's evaluation: the training's own pass over the checkpoint
 * (its .val record), else the checkpoint over (part of) its validation
 * split; the confusion matrix and the most confidently misclassified
 * samples, whose images are embedded as PNG data. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/mem.h"
#include "core/timer.h"
#include "data/data.h"
#include "io/checkpoint.h"
#include "report/report_internal.h"
#include "train/evaluate.h"
#include "train/model.h"
#include "train/recipe.h"
#include "train/trainer.h"

/* Stored images are shrunk to this longest side: 16 full-size photos
 * would make a page of megabytes, and the grid shows them at ~120 px. */
#define MISS_MAX_SIDE 160

/* Box-filter shrink of img (h, w, c) so its longer side is <= max. */
static cl_status shrink(const cl_image *img, int max, uint8_t **out, int *oh,
                        int *ow)
{
    int f = 1;
    while ((img->h + f - 1) / f > max || (img->w + f - 1) / f > max)
        f++;
    int h = img->h / f > 0 ? img->h / f : 1;
    int w = img->w / f > 0 ? img->w / f : 1;
    const int c = img->c;
    size_t bytes;
    CL_TRY(cl_mul_size((size_t)h * (size_t)w, (size_t)c, &bytes, "thumb"));
    uint8_t *p = cl_alloc(bytes, "thumbnail"); /* p: (h, w, c) */
    if (!p)
        return CL_ERR_NOMEM;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int ch = 0; ch < c; ch++) {
                unsigned sum = 0, n = 0;
                for (int dy = 0; dy < f && y * f + dy < img->h; dy++)
                    for (int dx = 0; dx < f && x * f + dx < img->w; dx++) {
                        size_t i = ((size_t)(y * f + dy) * img->w +
                                    (size_t)(x * f + dx)) *
                                       c +
                                   ch;
                        sum += img->data[i];
                        n++;
                    }
                p[((size_t)y * w + x) * c + ch] = (uint8_t)(sum / n);
            }
    *out = p;
    *oh = h;
    *ow = w;
    return CL_OK;
}

static cl_status embed_images(cl__report_eval *ev, const cl_dataset *ds)
{
    cl_image img;
    memset(&img, 0, sizeof img);
    cl_strbuf png, b64;
    cl_strbuf_init(&png);
    cl_strbuf_init(&b64);
    cl_status s = CL_OK;
    ev->miss_png = cl_alloc_zero((size_t)(ev->n_miss ? ev->n_miss : 1) *
                                     sizeof *ev->miss_png,
                                 "miss images");
    if (!ev->miss_png)
        return CL_ERR_NOMEM;
    for (int i = 0; i < ev->n_miss; i++) {
        int32_t label;
        uint8_t *thumb = NULL;
        int h = 0, w = 0;
        png.len = b64.len = 0;
        s = ds ? cl_dataset_get(ds, ev->miss[i].index, 0, &img, &label)
               : CL_ERR_IO;
        if (s == CL_OK)
            s = shrink(&img, MISS_MAX_SIDE, &thumb, &h, &w);
        if (s == CL_OK)
            s = cl__png_encode(&png, thumb, h, w, img.c);
        if (s == CL_OK)
            s = cl__base64(&b64, (const uint8_t *)png.data, png.len);
        cl_free(thumb);
        if (s == CL_ERR_NOMEM)
            break;
        if (s != CL_OK) {
            /* One unreadable image leaves an empty tile, not a failed
             * report. */
            cl_clear_error();
            s = CL_OK;
            continue;
        }
        ev->miss_png[i] = cl_alloc(b64.len + 1, "miss image");
        if (!ev->miss_png[i]) {
            s = CL_ERR_NOMEM;
            break;
        }
        memcpy(ev->miss_png[i], cl_strbuf_str(&b64), b64.len + 1);
        ev->img_h = h;
        ev->img_w = w;
    }
    cl_image_free(&img);
    cl_strbuf_free(&png);
    cl_strbuf_free(&b64);
    return s;
}

/* ev's copy of k class names. */
static cl_status copy_names(cl__report_eval *ev, const char *const *names,
                            int k)
{
    ev->names = cl_alloc_zero((size_t)k * sizeof *ev->names, "class names");
    if (!ev->names)
        return CL_ERR_NOMEM;
    for (int i = 0; i < k; i++) {
        size_t l = strlen(names[i]);
        ev->names[i] = cl_alloc(l + 1, "class name");
        if (!ev->names[i])
            return CL_ERR_NOMEM;
        memcpy(ev->names[i], names[i], l + 1);
    }
    return CL_OK;
}

/* ev from met (the confusion matrix and the counts). */
static cl_status take_metrics(cl__report_eval *ev, const cl_metrics *met)
{
    const int k = met->num_classes;
    ev->k = k;
    ev->cm = cl_alloc((size_t)k * (size_t)k * sizeof *ev->cm, "confusion");
    if (!ev->cm)
        return CL_ERR_NOMEM;
    memcpy(ev->cm, met->confusion, (size_t)k * (size_t)k * sizeof *ev->cm);
    ev->samples = cl_metrics_count(met);
    ev->correct = met->counts[1];
    ev->correct5 = met->counts[2];
    ev->loss_sum = met->loss_sum;
    return CL_OK;
}

static void checkpoint_meta(const cl__runlog *rl, cl__report_eval *ev)
{
    cl_ckpt_read_meta(rl->ckpt, CL_META_EPOCH, ev->ckpt_epoch,
                      sizeof ev->ckpt_epoch);
    cl_ckpt_read_meta(rl->ckpt, CL_META_STEP, ev->ckpt_step,
                      sizeof ev->ckpt_step);
    cl_ckpt_read_meta(rl->ckpt, CL_META_VERSION, ev->ckpt_version,
                      sizeof ev->ckpt_version);
    cl_clear_error();
}

/* The training's own pass over the checkpoint's weights, from the record
 * saved beside it: CL_OK with ev->done when there is one for this
 * checkpoint's step; the images of the misses come from the run's
 * dataset (an empty tile each when it cannot be read). */
static cl_status from_record(const cl__runlog *rl, const cl_report_opts *o,
                             cl__report_eval *ev)
{
    char path[1100], step[32] = "";
    cl_val_record_path(rl->ckpt, path, sizeof path);
    if (access(path, R_OK) != 0)
        return CL_OK;
    cl_metrics met;
    cl_val_miss *miss = NULL;
    char **names = NULL;
    cl_val_record_info info;
    int n_miss = 0;
    if (cl_val_record_load(path, &met, &miss, &n_miss, &names, &info) !=
        CL_OK) {
        cl_clear_error(); /* a bad record: evaluate as without one */
        return CL_OK;
    }
    cl_status s = CL_OK;
    int k = met.num_classes;
    cl_ckpt_read_meta(rl->ckpt, CL_META_STEP, step, sizeof step);
    if (strtoll(step, NULL, 10) != info.step)
        goto done; /* another checkpoint's: evaluate this one */
    int keep = o->top_wrong < 0 ? 0 : o->top_wrong;
    if ((s = take_metrics(ev, &met)) != CL_OK ||
        (s = copy_names(ev, (const char *const *)names, k)) != CL_OK)
        goto done;
    ev->n_miss = n_miss < keep ? n_miss : keep;
    ev->miss = miss;
    miss = NULL;
    ev->hflip = info.hflip;
    snprintf(ev->split, sizeof ev->split, "%s", info.split);
    snprintf(ev->dataset, sizeof ev->dataset, "%s", info.dataset);
    checkpoint_meta(rl, ev);
    ev->from_training = 1;
    snprintf(ev->precision, sizeof ev->precision, "%s", info.precision);
    ev->done = 1;
    /* The misclassified images, read by index from the run's data. */
    cl_config cfg = rl->cfg;
    if (o->data_dir)
        snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", o->data_dir);
    char dir[CL_CFG_PATH_MAX + CL_CFG_NAME_MAX + 2];
    cl_dataset_spec spec;
    cl_dataset *ds = NULL;
    if (rl->have_config &&
        cl_recipe_dataset(&cfg, CL_USAGE_TEST, dir, sizeof dir, &spec) ==
            CL_OK &&
        (spec.num_classes = k, cl_dataset_open(&ds, &spec)) == CL_OK)
        s = embed_images(ev, ds);
    else
        s = embed_images(ev, NULL);
    cl_dataset_close(ds);
    cl_clear_error();
done:
    cl_metrics_free(&met);
    cl_free(miss);
    cl_val_record_names_free(names, k);
    return s;
}

static void note(cl__report_eval *ev, const char *what)
{
    snprintf(ev->note, sizeof ev->note, "%s: %s", what,
             cl_last_error()[0] ? cl_last_error() : "unknown error");
    cl_clear_error();
}

cl_status cl__report_eval_run(const cl__runlog *rl, const cl_report_opts *o,
                              cl__report_eval *ev)
{
    memset(ev, 0, sizeof *ev);
    if (!o->eval) {
        snprintf(ev->note, sizeof ev->note,
                 "the checkpoint evaluation was not requested");
        return CL_OK;
    }
    if (!rl->ckpt[0]) {
        snprintf(ev->note, sizeof ev->note,
                 "no checkpoint in the run directory yet: the confusion "
                 "matrix, per-class accuracy and misclassified images "
                 "appear once the run has written one");
        return CL_OK;
    }
    double t0 = cl_time_now();
    cl_status s = from_record(rl, o, ev);
    if (s != CL_OK || ev->done) {
        ev->seconds = cl_time_now() - t0;
        return s;
    }
    cl_model m;
    cl_model_data md;
    memset(&md, 0, sizeof md);
    cl_metrics met;
    cl_val_misses mc;
    memset(&mc, 0, sizeof mc);
    memset(&met, 0, sizeof met);
    int model_open = 0;

    int64_t limit = o->limit > 0 ? o->limit : 2000;
    int batch = o->batch > 0 ? o->batch : 100;
    if (batch > limit)
        batch = (int)limit;
    if (cl_model_open(&m, rl->ckpt, batch, o->backend ? o->backend : "onednn",
                      CL_PLAN_INFER, o->threads) != CL_OK) {
        note(ev, "the checkpoint could not be opened");
        return CL_OK;
    }
    model_open = 1;
    if (rl->cfg.limit_val > 0 && rl->cfg.limit_val < limit)
        limit = rl->cfg.limit_val;
    if (m.cfg.limit_val > 0 && m.cfg.limit_val < limit)
        limit = m.cfg.limit_val;
    if (o->data_dir)
        snprintf(m.cfg.data_dir, sizeof m.cfg.data_dir, "%s", o->data_dir);

    m.cfg.limit_val = (int)limit;
    if (cl_model_data_open(&m, batch, 1, 0, &md) != CL_OK) {
        note(ev, "the validation split could not be opened");
        goto done;
    }
    if ((s = cl_metrics_init(&met, m.num_classes)) != CL_OK)
        goto done;
    if ((s = cl_val_misses_init(&mc, md.ds, o->top_wrong)) != CL_OK)
        goto done;
    if (cl_evaluate(m.be, md.ld, &met, NULL, m.cfg.eval_hflip,
                    cl_val_misses_add, &mc) != CL_OK) {
        note(ev, "the evaluation failed");
        goto done;
    }

    if ((s = take_metrics(ev, &met)) != CL_OK ||
        (s = copy_names(ev, (const char *const *)m.class_names,
                        m.num_classes)) != CL_OK)
        goto done;
    ev->hflip = m.cfg.eval_hflip;
    ev->miss = mc.top;
    ev->n_miss = mc.n;
    mc.top = NULL;
    snprintf(ev->split, sizeof ev->split, "%s", m.cfg.val_split);
    snprintf(ev->dataset, sizeof ev->dataset, "%s", cl_dataset_format(md.ds));
    if ((s = embed_images(ev, md.ds)) != CL_OK)
        goto done;
    checkpoint_meta(rl, ev);
    snprintf(ev->precision, sizeof ev->precision, "%s",
             cl_precision_name(m.precision));
    ev->done = 1;
done:
    ev->seconds = cl_time_now() - t0;
    cl_val_misses_free(&mc);
    cl_metrics_free(&met);
    cl_model_data_close(&md);
    if (model_open)
        cl_model_close(&m);
    return s;
}

void cl__report_eval_free(cl__report_eval *ev)
{
    if (ev->names)
        for (int i = 0; i < ev->k; i++)
            cl_free(ev->names[i]);
    cl_free(ev->names);
    cl_free(ev->cm);
    if (ev->miss_png)
        for (int i = 0; i < ev->n_miss; i++)
            cl_free(ev->miss_png[i]);
    cl_free(ev->miss_png);
    cl_free(ev->miss);
    memset(ev, 0, sizeof *ev);
}
