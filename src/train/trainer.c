/* The training loop, top to bottom: set up data, model, backend, optimizer
 * and schedule from the config; then for every step load a batch, run
 * forward and backward, average gradients over ranks, step the optimizer;
 * around it the monitors, metrics log, checkpoints and evaluation. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/mem.h"
#include "core/timer.h"
#include "data/data.h"
#include "graph/graph.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io/strbuf.h"
#include "models/arch.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/model_ema.h"
#include "train/recipe.h"
#include "train/train_state.h"
#include "train/trainer.h"
#include "train/val_record.h"
#include "interop/interop.h"

/* Everything one run owns; released by run_free in reverse order. */
typedef struct run {
    const cl_config *cfg;
    cl_dist *d;
    const cl_logger *lg;
    int root;
    cl_dataset *train_ds, *val_ds;
    cl_transforms *train_tf, *val_tf;
    cl_loader *train_ld, *val_ld;
    cl_graph g;
    int graph_ready;
    cl_arch model;
    char arch_name[32]; /* "resnet50": checkpoint file names */
    cl_backend *be;
    cl_dist_grad_sync *sync;
    cl_optim opt;
    cl_optim_segment *segs;
    int n_segs;
    cl_lr_config lr;
    cl_metrics val;
    cl_model_ema ema; /* the weights' moving average (cfg->ema) */
    int has_ema;
    cl_metrics val_ema;   /* its evaluation */
    cl_val_misses misses; /* the last validation pass's, for the report */
    float *acc;           /* gradient accumulation arena, or NULL */
    FILE *jsonl;
    cl_strbuf line;
    char *config_yaml;
    char **ckpts; /* rotation ring of written step checkpoints */
    int n_ckpts;
    int in_c, side;
    int64_t steps_per_epoch;
    char *conv_paths; /* the resumed run's choice (autotune), or NULL */
    const cl_train_hooks *hooks;     /* the caller's, or NULL */
    int hook_stop;                   /* a hook asked to stop after this step */
    char val_split[CL_CFG_NAME_MAX]; /* the split folder read (imagefolder) */
} run;

static void run_free(run *r)
{
    if (r->jsonl)
        fclose(r->jsonl);
    cl_strbuf_free(&r->line);
    for (int i = 0; i < r->n_ckpts; i++)
        free(r->ckpts[i]);
    free(r->ckpts);
    free(r->config_yaml);
    cl_free(r->conv_paths);
    cl_free(r->acc);
    cl_metrics_free(&r->val);
    cl_metrics_free(&r->val_ema);
    cl_model_ema_destroy(&r->ema);
    cl_val_misses_free(&r->misses);
    cl_optim_destroy(&r->opt);
    cl_free(r->segs);
    cl_dist_grad_sync_free(r->sync);
    cl_backend_destroy(r->be);
    if (r->graph_ready)
        cl_graph_free(&r->g);
    cl_loader_destroy(r->train_ld);
    cl_loader_destroy(r->val_ld);
    cl_transforms_destroy(r->train_tf);
    cl_transforms_destroy(r->val_tf);
    cl_dataset_close(r->train_ds);
    cl_dataset_close(r->val_ds);
}

static cl_status make_dirs(const char *path)
{
    char buf[1024];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return cl_error(CL_ERR_ARG, "path too long: %s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return cl_error(CL_ERR_IO, "%s: cannot create folder: %s", buf,
                            strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return cl_error(CL_ERR_IO, "%s: cannot create folder: %s", buf,
                        strerror(errno));
    return CL_OK;
}

/* ---- set-up ---------------------------------------------------------- */

/* What each image goes through, so that an augmentation the recipe
 * turned on, or one it did not, is seen before the first step. */
static void log_transforms(const run *r, const char *split, int h, int w,
                           const cl_transforms *tf)
{
    char d[512], size[32] = "images of any size";
    if (h > 0)
        snprintf(size, sizeof size, "%dx%d images", h, w);
    cl_transforms_describe(tf, d, sizeof d);
    cl_log(r->lg, CL_LOG_INFO, "%s transforms (%s): %s", split, size, d);
}

/* The split folder the recipe resolved dir to; when it is not the one the
 * key names (a root of train/ and val/ read as `classic data info` reads
 * it), the log says which was taken. */
static void note_split(run *r, const char *key, const char *split,
                       const char *dir, char *name, size_t n)
{
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    size_t len = strlen(base);
    if (len >= n)
        len = n - 1; /* a split folder's name fits its key's size */
    memcpy(name, base, len);
    name[len] = '\0';
    if (r->cfg->dataset == CL_CFG_DATASET_IMAGEFOLDER &&
        strcmp(base, split) != 0)
        cl_log(r->lg, CL_LOG_INFO,
               "%s \"%s\": %s has no %s/ folder; reading its %s/ (the "
               "split `classic data info` finds)",
               key, split, r->cfg->data_dir, split, base);
}

/* A head of one class learns nothing: softmax over one logit is 1 for
 * every image, so the loss is 0 from the first step.  Refused before any
 * compute is spent, naming where the one class came from. */
static cl_status check_classes(const run *r, const char *dir, int k)
{
    const cl_config *c = r->cfg;
    if (k >= 2)
        return CL_OK;
    return cl_error(CL_ERR_CONFIG,
                    "the training split %s holds %d class%s%s%s%s: a "
                    "classifier needs at least 2 (with one, softmax gives it "
                    "probability 1 and the loss is 0 whatever the weights); "
                    "add a folder per class, or point data_dir at the root "
                    "holding them",
                    c->dataset == CL_CFG_DATASET_IMAGEFOLDER
                        ? dir
                        : cl_dataset_format(r->train_ds),
                    k, k == 1 ? "" : "es", k == 1 ? " ('" : "",
                    k == 1 ? cl_dataset_class_name(r->train_ds, 0) : "",
                    k == 1 ? "')" : "");
}

static cl_status open_data(run *r)
{
    const cl_config *c = r->cfg;
    char dir[2][CL_CFG_PATH_MAX + CL_CFG_NAME_MAX + 2];
    char name[CL_CFG_NAME_MAX];
    cl_dataset_spec spec;
    if (c->num_classes == 1) /* before the labels are checked against it */
        return cl_error(CL_ERR_CONFIG,
                        "num_classes 1: a classifier needs at least 2 "
                        "classes (with one, softmax gives it probability 1 "
                        "and the loss is 0 whatever the weights)");
    CL_TRY(cl_recipe_dataset(c, CL_USAGE_TRAIN, dir[0], sizeof dir[0], &spec));
    note_split(r, "train_split", c->train_split, dir[0], name, sizeof name);
    CL_TRY(cl_dataset_open(&r->train_ds, &spec));
    CL_TRY(cl_recipe_input(c, r->train_ds, &r->in_c, &r->side));
    cl_transform_opts to;
    int h = 0, w = 0, dc = 0;
    cl_dataset_image_dims(r->train_ds, &h, &w, &dc);
    CL_TRY(cl_recipe_transforms(c, h, w, r->in_c, r->side, 1, &to));
    CL_TRY(cl_transforms_create(&r->train_tf, &to));
    log_transforms(r, "training", h, w, r->train_tf);
    int k = c->num_classes > 0 ? c->num_classes
                               : cl_dataset_num_classes(r->train_ds);
    CL_TRY(check_classes(r, dir[0], k));
    cl_loader_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.dataset = r->train_ds;
    lo.tf = r->train_tf;
    lo.batch_size = c->batch_size;
    lo.shuffle = c->shuffle;
    lo.seed = (uint64_t)c->seed;
    lo.num_shards = r->d ? r->d->size : 1;
    lo.shard_id = r->d ? r->d->rank : 0;
    /* The graph is static in the batch size: training always drops the
     * last partial batch (a different one each epoch when shuffling). */
    lo.drop_remainder = 1;
    lo.workers = c->num_parallel_workers;
    lo.prefetch = c->prefetch;
    lo.mixup_alpha = (float)c->mixup;
    lo.cutmix_alpha = (float)c->cutmix;
    lo.mix_prob = (float)c->mixup_prob;
    lo.num_classes = k;
    lo.limit = c->limit_train;
    CL_TRY(cl_loader_create(&r->train_ld, &lo));
    if (c->val_interval <= 0)
        return CL_OK;
    if (!c->val_split[0]) {
        cl_log(r->lg, CL_LOG_INFO, "no validation (val_split \"\")");
        return CL_OK;
    }
    CL_TRY(cl_recipe_dataset(c, CL_USAGE_TEST, dir[1], sizeof dir[1], &spec));
    note_split(r, "val_split", c->val_split, dir[1], r->val_split,
               sizeof r->val_split);
    CL_TRY(cl_dataset_open(&r->val_ds, &spec));
    if (cl_dataset_num_classes(r->val_ds) !=
        cl_dataset_num_classes(r->train_ds))
        return cl_error(CL_ERR_CONFIG,
                        "the validation split has %d classes, the training "
                        "split %d",
                        cl_dataset_num_classes(r->val_ds),
                        cl_dataset_num_classes(r->train_ds));
    cl_dataset_image_dims(r->val_ds, &h, &w, &dc);
    CL_TRY(cl_recipe_transforms(c, h, w, r->in_c, r->side, 0, &to));
    CL_TRY(cl_transforms_create(&r->val_tf, &to));
    log_transforms(r, "validation", h, w, r->val_tf);
    lo.dataset = r->val_ds;
    lo.tf = r->val_tf;
    lo.shuffle = 0;
    lo.drop_remainder = 0; /* every sample counted once, see evaluate.h */
    lo.mixup_alpha = lo.cutmix_alpha = 0;
    lo.limit = c->limit_val;
    CL_TRY(cl_loader_create(&r->val_ld, &lo));
    return CL_OK;
}

/* Copies the head's parameters into buf (back 0) or from it (back 1). */
static void copy_head(cl_graph *g, float *buf, int back)
{
    size_t o = 0;
    for (int t = 0; t < g->n_tensors; t++) {
        const cl_gtensor *gt = &g->tensors[t];
        if (gt->kind != CL_GT_PARAM || !(gt->param_flags & CL_PARAM_HEAD))
            continue;
        size_t n = (size_t)cl_graph_numel(g, t);
        float *p = g->params + gt->offset;
        memcpy(back ? p : buf + o, back ? buf + o : p, n * sizeof(float));
        o += n;
    }
}

/* A load that failed (status s) because the weights are another network's
 * (resnet50 weights for a resnet18: "198 tensors unknown to the model")
 * says which network they are, as predict does; any other failure keeps
 * its sentence. */
static cl_status other_network(const cl_weights *w, const char *model,
                               cl_status s)
{
    char why[1024], name[32];
    cl_arch a;
    snprintf(why, sizeof why, "%s", cl_last_error());
    if (cl_weights_infer(w, NULL, &a) != CL_OK ||
        strcmp(cl_arch_name(&a, name, sizeof name), model) == 0)
        return cl_error(s, "%s", why);
    return cl_error(s,
                    "%s: the weights' blocks are those of %s, and the model "
                    "is a %s: give --model %s to fine-tune them, or "
                    "--pretrained weights of a %s",
                    w->src.path, name, model, name, model);
}

/* The weights of c->pretrained copied into r->g (k: the head's classes). */
static cl_status load_pretrained(run *r, int k)
{
    const cl_config *c = r->cfg;
    size_t n = strlen(c->pretrained);
    if (n > 5 && strcmp(c->pretrained + n - 5, ".ckpt") == 0) {
        /* A MindSpore checkpoint: names mapped onto torchvision's. */
        char note[1024];
        CL_TRY(cl_error_wrap(cl_interop_load_pretrained(c->pretrained, &r->g,
                                                        CL_CKPT_PRETRAINED,
                                                        note, sizeof note),
                             "pretrained weights: "));
        cl_log(r->lg, CL_LOG_INFO,
               "pretrained: %s; training starts at step 0 with a fresh "
               "optimizer",
               note);
        return CL_OK;
    }
    /* safetensors (classic's or plain) or a PyTorch .pth. */
    cl_ckpt_load_report rep;
    cl_weights w;
    cl_status s = cl_weights_open(&w, c->pretrained);
    /* A checkpoint with an EMA gives it (the model it ships) unless
     * load_ema is off; its averaging counters stay behind. */
    w.src.pick = c->load_ema ? CL_CKPT_PICK_EMA : CL_CKPT_PICK_RAW;
    if (s == CL_OK && (s = cl_ckpt_load_source(
                           &w.src, &r->g, CL_CKPT_PRETRAINED, &rep)) != CL_OK)
        s = other_network(&w, r->arch_name, s);
    const char *kind = w.kind;
    cl_weights_close(&w);
    CL_TRY(cl_error_wrap(s, "pretrained weights: "));
    cl_log(r->lg, CL_LOG_INFO,
           "pretrained: %d tensors loaded from %s (%s%s); training starts "
           "at step 0 with a fresh optimizer",
           rep.loaded, c->pretrained, kind, rep.ema ? ", its EMA weights" : "");
    if (rep.head_skipped)
        cl_log(r->lg, CL_LOG_WARN,
               "pretrained: the head is re-initialised for %d classes "
               "(%s)",
               k, rep.head_note);
    return CL_OK;
}

static cl_status build_model(run *r)
{
    const cl_config *c = r->cfg;
    int k = c->num_classes > 0 ? c->num_classes
                               : cl_dataset_num_classes(r->train_ds);
    CL_TRY(cl_recipe_model(c, r->in_c, k, &r->model));
    cl_arch_name(&r->model, r->arch_name, sizeof r->arch_name);
    CL_TRY(cl_graph_init(&r->g, c->batch_size));
    r->graph_ready = 1;
    int soft = c->mixup > 0 || c->cutmix > 0;
    CL_TRY(cl_arch_build(&r->g, &r->model, r->side, r->side, soft,
                         (float)c->label_smoothing));
    CL_TRY(cl_arch_init(&r->g, &r->model, (uint64_t)c->seed));
    if (!c->pretrained[0] || c->resume[0])
        return CL_OK;
    /* new_head: the head keeps this initialisation whatever the file
     * holds, so save it across the load. */
    float *head = NULL;
    size_t head_n = 0;
    if (c->new_head) {
        for (int t = 0; t < r->g.n_tensors; t++)
            if (r->g.tensors[t].kind == CL_GT_PARAM &&
                (r->g.tensors[t].param_flags & CL_PARAM_HEAD))
                head_n += (size_t)cl_graph_numel(&r->g, t);
        head = cl_alloc(head_n * sizeof(float), "head");
        if (!head)
            return CL_ERR_NOMEM;
        copy_head(&r->g, head, 0);
    }
    cl_status s = load_pretrained(r, k);
    if (head) {
        if (s == CL_OK) {
            copy_head(&r->g, head, 1);
            cl_log(r->lg, CL_LOG_INFO,
                   "pretrained: new_head: the head keeps its fresh "
                   "initialisation for %d classes",
                   k);
        }
        cl_free(head);
    }
    return s;
}

static cl_status make_optimizer(run *r)
{
    const cl_config *c = r->cfg;
    cl_graph *g = &r->g;
    int n = 0;
    for (int t = 0; t < g->n_tensors; t++)
        n += g->tensors[t].kind == CL_GT_PARAM;
    r->segs = cl_alloc((size_t)n * sizeof *r->segs, "optimizer segments");
    if (!r->segs)
        return CL_ERR_NOMEM;
    for (int t = 0; t < g->n_tensors; t++) {
        const cl_gtensor *gt = &g->tensors[t];
        if (gt->kind != CL_GT_PARAM)
            continue;
        r->segs[r->n_segs].offset = gt->offset;
        r->segs[r->n_segs].n = (size_t)cl_shape_numel(&gt->shape);
        r->segs[r->n_segs].flags = gt->param_flags;
        r->n_segs++;
    }
    cl_optim_config oc;
    CL_TRY(cl_recipe_optim(c, &oc));
    CL_TRY(
        cl_optim_create(&r->opt, &oc, r->segs, r->n_segs, g->n_param_floats));
    int ranks = r->d ? r->d->size : 1;
    int accum = c->accumulation_steps > 0 ? c->accumulation_steps : 1;
    r->steps_per_epoch = cl_loader_batches_per_epoch(r->train_ld) / accum;
    if (r->steps_per_epoch < 1)
        return cl_error(CL_ERR_CONFIG,
                        "an epoch has %lld batches of %d, fewer than "
                        "accumulation_steps %d: use a smaller batch_size",
                        (long long)cl_loader_batches_per_epoch(r->train_ld),
                        c->batch_size, accum);
    CL_TRY(cl_recipe_lr(c, r->steps_per_epoch, c->batch_size * ranks * accum,
                        &r->lr));
    if (accum > 1) {
        r->acc = cl_alloc_zero(g->n_param_floats * sizeof(float),
                               "gradient accumulation");
        if (!r->acc)
            return CL_ERR_NOMEM;
    }
    if (c->ema) {
        /* The average starts from the weights training starts from (the
         * pretrained ones when fine-tuning); resume replaces it. */
        cl_model_ema_config ec;
        CL_TRY(cl_recipe_ema(c, &ec));
        CL_TRY(cl_model_ema_create(&r->ema, &ec, g));
        r->has_ema = 1;
    }
    return CL_OK;
}

/* ---- checkpoints ----------------------------------------------------- */

static cl_status class_names_json(const cl_dataset *ds, int k, cl_strbuf *b)
{
    CL_TRY(cl_strbuf_addc(b, '['));
    for (int i = 0; i < k; i++) {
        const char *n =
            i < cl_dataset_num_classes(ds) ? cl_dataset_class_name(ds, i) : "";
        if (i)
            CL_TRY(cl_strbuf_addc(b, ','));
        CL_TRY(cl_strbuf_add_json_str(b, n, strlen(n)));
    }
    return cl_strbuf_addc(b, ']');
}

static cl_status save_model(run *r, const char *path, int64_t epoch,
                            int64_t step)
{
    char depth[32], inc[16], ncls[16], side[16], ep[32], st[32];
    char mean[96] = "", stdv[96] = "";
    cl_strbuf names;
    cl_strbuf_init(&names);
    cl_status s = class_names_json(r->train_ds, r->g.num_classes, &names);
    if (s != CL_OK)
        goto fail;
    cl_arch_name(&r->model, depth, sizeof depth);
    snprintf(inc, sizeof inc, "%d", r->in_c);
    snprintf(ncls, sizeof ncls, "%d", r->g.num_classes);
    snprintf(side, sizeof side, "%d", r->side);
    snprintf(ep, sizeof ep, "%lld", (long long)epoch);
    snprintf(st, sizeof st, "%lld", (long long)step);
    const cl_transform_opts *to = cl_transforms_opts(r->train_tf);
    if (to->normalize) {
        snprintf(mean, sizeof mean, "%.6g,%.6g,%.6g", to->mean[0], to->mean[1],
                 to->mean[2]);
        snprintf(stdv, sizeof stdv, "%.6g,%.6g,%.6g", to->std[0], to->std[1],
                 to->std[2]);
    }
    cl_ckpt_kv meta[] = {
        {CL_META_ARCH, depth},
        {CL_META_STEM, cl_arch_stem(&r->model) ? cl_arch_stem(&r->model) : ""},
        {CL_META_IN_CHANNELS, inc},
        {CL_META_NUM_CLASSES, ncls},
        {CL_META_IMAGE_SIZE, side},
        {CL_META_CLASS_NAMES, cl_strbuf_str(&names)},
        {CL_META_MEAN, mean},
        {CL_META_STD, stdv},
        {CL_META_EPOCH, ep},
        {CL_META_STEP, st},
        {CL_META_DATASET, cl_dataset_format(r->train_ds)},
        {CL_META_VERSION, cl_version()},
        {CL_META_CONFIG, r->config_yaml},
    };
    s = cl_ckpt_save_model_ema(path, &r->g, r->has_ema ? r->ema.params : NULL,
                               r->has_ema ? r->ema.buffers : NULL, meta,
                               (int)(sizeof meta / sizeof meta[0]));
fail:
    cl_strbuf_free(&names);
    return s;
}

static int accum_of(const cl_config *c)
{
    return c->accumulation_steps > 0 ? c->accumulation_steps : 1;
}

/* Samples per optimizer step over all ranks. */
static int global_batch(const run *r)
{
    return r->cfg->batch_size * (r->d ? r->d->size : 1) * accum_of(r->cfg);
}

/* Rank 0's choice of conv backward paths to every rank (chars as floats:
 * the one broadcast the dist layer has), so that all ranks compute alike
 * and a resume reproduces every rank's part. */
static cl_status share_conv_paths(run *r, char **paths)
{
    const size_t n = (size_t)r->g.n_nodes;
    float *f = cl_alloc(sizeof(float) * (n + 1), "conv paths");
    if (!f)
        return CL_ERR_NOMEM;
    const char *mine = cl_backend_conv_paths(r->be);
    for (size_t i = 0; i < n; i++)
        f[i] = mine ? (float)mine[i] : 0.0f;
    cl_status s = cl_dist_broadcast_f32(r->d, f, n, 0);
    if (s == CL_OK && f[0] != 0.0f) {
        if (!(*paths = cl_alloc_zero(n + 1, "conv paths")))
            s = CL_ERR_NOMEM;
        for (size_t i = 0; s == CL_OK && i < n; i++)
            (*paths)[i] = (char)f[i];
    }
    cl_free(f);
    return s;
}

/* The training plan: conv paths from the resumed state, else measured
 * (autotune) on rank 0 and shared, else the backend's own thresholds. */
static cl_status plan_training(run *r)
{
    const cl_config *cfg = r->cfg;
    cl_backend_opts bo = {.threads = cfg->threads,
                          .amp_level = cfg->amp_level,
                          .autotune = cfg->autotune,
                          .conv_paths = r->conv_paths};
    const char *backend = cfg->backend == CL_CFG_BACKEND_REF ? "ref" : "onednn";
    char *shared = NULL;
    cl_status s = CL_OK;
    double t0 = cl_time_now();
    int plan_here = !r->d || r->root || !cfg->autotune || r->conv_paths;
    if (plan_here)
        s = cl_backend_create(&r->be, backend, &r->g, CL_PLAN_TRAIN, &bo);
    if (r->d && cfg->autotune && !r->conv_paths) {
        /* Every rank reaches the broadcast, rank 0 even after a failure. */
        if (!cl_dist_all_ok(r->d, s == CL_OK))
            return s != CL_OK ? s
                              : cl_error(CL_ERR_DIST, "rank 0 could not "
                                                      "plan the model");
        CL_TRY(share_conv_paths(r, &shared));
        if (!r->root) {
            bo.conv_paths = shared;
            s = cl_backend_create(&r->be, backend, &r->g, CL_PLAN_TRAIN, &bo);
        }
        cl_free(shared);
    }
    if (s != CL_OK)
        return s;
    int measured = 0, rewritten = 0;
    cl_backend_tune_counts(r->be, &measured, &rewritten);
    if (cfg->autotune && r->conv_paths)
        cl_log(r->lg, CL_LOG_INFO,
               "autotune: the conv backward paths of the resumed run");
    else if (measured)
        cl_log(r->lg, CL_LOG_INFO,
               "autotune: measured two ways of %d conv backward passes in "
               "%.1f s; %d run the other way than oneDNN's primitive",
               measured, cl_time_now() - t0, rewritten);
    if (cl_backend_fallback_ops(r->be)) {
        char names[256];
        cl_backend_fallback_names(r->be, names, sizeof names);
        cl_log(r->lg, CL_LOG_INFO,
               "backend %s: no kernel of its own for %s; these run the "
               "reference kernels on plain copies (slower)",
               r->be->vt->name, names);
    }
    return CL_OK;
}

/* Writes model + training state for resume at (epoch, next batch). */
static cl_status save_checkpoint(run *r, const char *path, int64_t epoch,
                                 int64_t next_batch, int64_t step)
{
    char sp[1024], ep[32], nb[32], st[32], seed[32], gb[64], spe[32];
    char ema_n[32] = "", ema_u[32] = "";
    CL_TRY(save_model(r, path, epoch, step));
    if (r->has_ema) {
        snprintf(ema_n, sizeof ema_n, "%lld", (long long)r->ema.n_averaged);
        snprintf(ema_u, sizeof ema_u, "%lld", (long long)r->ema.n_updates);
    }
    cl_train_state_path(path, sp, sizeof sp);
    snprintf(ep, sizeof ep, "%lld", (long long)epoch);
    snprintf(nb, sizeof nb, "%lld", (long long)next_batch);
    snprintf(st, sizeof st, "%lld", (long long)step);
    snprintf(seed, sizeof seed, "%d", r->cfg->seed);
    /* The global batch as "total batch_size ranks accumulation_steps":
     * positions and the schedule count its steps. */
    snprintf(gb, sizeof gb, "%d %d %d %d", global_batch(r), r->cfg->batch_size,
             r->d ? r->d->size : 1, accum_of(r->cfg));
    snprintf(spe, sizeof spe, "%lld", (long long)r->steps_per_epoch);
    const char *paths = cl_backend_conv_paths(r->be);
    cl_ckpt_kv meta[] = {{"epoch", ep},
                         {"next_batch", nb},
                         {"step", st},
                         {"seed", seed},
                         {"model_file", path},
                         {"conv_paths", paths ? paths : ""},
                         {"global_batch", gb},
                         {"steps_per_epoch", spe},
                         {"ema_averaged", ema_n},
                         {"ema_updates", ema_u}};
    return cl_train_state_save(sp, &r->g, &r->opt, meta,
                               (int)(sizeof meta / sizeof meta[0]));
}

static void remove_checkpoint(const char *path)
{
    char sp[1024];
    cl_train_state_path(path, sp, sizeof sp);
    unlink(path);
    unlink(sp);
}

/* Keeps at most keep_checkpoint_max step checkpoints (0: all). */
static cl_status rotate(run *r, const char *path)
{
    char **ring = realloc(r->ckpts, (size_t)(r->n_ckpts + 1) * sizeof *ring);
    if (!ring)
        return cl_error(CL_ERR_NOMEM, "checkpoint list");
    r->ckpts = ring;
    r->ckpts[r->n_ckpts] = strdup(path);
    if (!r->ckpts[r->n_ckpts])
        return cl_error(CL_ERR_NOMEM, "checkpoint list");
    r->n_ckpts++;
    int keep = r->cfg->keep_checkpoint_max;
    while (keep > 0 && r->n_ckpts > keep) {
        remove_checkpoint(r->ckpts[0]);
        free(r->ckpts[0]);
        memmove(r->ckpts, r->ckpts + 1,
                (size_t)(r->n_ckpts - 1) * sizeof *r->ckpts);
        r->n_ckpts--;
    }
    return CL_OK;
}

/* The resumed position in this run's loader batches.  The step count, the
 * schedule and the position in the epoch are in steps of the global batch,
 * so that is what must stay; how it is split over ranks, batch_size and
 * accumulation_steps may change (a step takes the same samples of the
 * epoch's order either way: the loader deals sample k to rank k % ranks).
 * gb is the state's "global batch_size ranks accumulation", "" in files
 * written before it was recorded. */
static cl_status resume_position(run *r, const char *path, const char *gb,
                                 int64_t *batch)
{
    int g0 = 0, b0 = 0, n0 = 0, a0 = 0;
    if (!gb[0])
        return CL_OK;
    if (sscanf(gb, "%d %d %d %d", &g0, &b0, &n0, &a0) != 4 || g0 <= 0 ||
        a0 <= 0)
        return cl_error(CL_ERR_FORMAT,
                        "resume: %s: global_batch '%s' in its training "
                        "state is not 'total batch_size processes "
                        "accumulation_steps'",
                        path, gb);
    const int g = global_batch(r), n = r->d ? r->d->size : 1;
    const int b = r->cfg->batch_size, a = accum_of(r->cfg);
    if (g0 != g) {
        char advice[256];
        if (g0 % n != 0)
            snprintf(advice, sizeof advice,
                     "it cannot be split over %d process(es): run on a "
                     "number of processes that divides %d",
                     n, g0);
        else if ((g0 / n) % b == 0)
            snprintf(advice, sizeof advice,
                     "to keep it with batch_size %d, pass "
                     "--accumulation_steps %d",
                     b, g0 / n / b);
        else
            snprintf(advice, sizeof advice,
                     "pass --batch_size %d --accumulation_steps 1", g0 / n);
        return cl_error(CL_ERR_CONFIG,
                        "resume: %s was trained with a global batch of %d "
                        "(batch_size %d x %d process(es) x %d "
                        "accumulation_steps) and this run's is %d (%d x %d "
                        "x %d); steps, the schedule and the position in the "
                        "epoch count global batches, so it must stay %d: "
                        "%s; or start a new run from these weights with "
                        "--pretrained",
                        path, g0, b0, n0, a0, g, b, n, a, g0, advice);
    }
    if (a0 != a || b0 != b || n0 != n)
        cl_log(r->lg, CL_LOG_INFO,
               "resume: the global batch of %d was %d x %d process(es) x %d "
               "accumulation and is %d x %d x %d now; the position is "
               "carried over in steps",
               g, b0, n0, a0, b, n, a);
    *batch = *batch / a0 * a;
    return CL_OK;
}

/* The average of the resumed checkpoint into r->ema (read through the
 * graph, whose weights resume then reads); n_updates -1 marks it as read,
 * for resume to take the counters from the state file.  A checkpoint
 * without one starts the average from its weights. */
static cl_status resume_ema(run *r, const char *path)
{
    cl_st_file *f = NULL;
    CL_TRY(cl_error_wrap(cl_st_open(&f, path), "resume: "));
    cl_ckpt_source src = cl_ckpt_source_st(f, path);
    src.pick = CL_CKPT_PICK_EMA_ONLY;
    int has = cl_ckpt_source_has_ema(&src);
    cl_status s = CL_OK;
    if (has && r->has_ema)
        s = cl_error_wrap(
            cl_ckpt_load_source(&src, &r->g, CL_CKPT_STRICT, NULL), "resume: ");
    cl_st_close(f);
    CL_TRY(s);
    if (has && r->has_ema) {
        cl_model_ema_set(&r->ema, &r->g);
        r->ema.n_updates = -1;
    } else if (has) {
        cl_log(r->lg, CL_LOG_INFO,
               "resume: %s holds an EMA of its weights; ema is off, so it "
               "is not kept",
               path);
    } else if (r->has_ema) {
        cl_log(r->lg, CL_LOG_INFO,
               "resume: %s holds no EMA; the average starts from its "
               "weights",
               path);
    }
    return CL_OK;
}

static cl_status resume(run *r, int64_t *epoch, int64_t *batch, int64_t *step)
{
    const char *path = r->cfg->resume;
    char sp[1024], buf[64];
    CL_TRY(resume_ema(r, path));
    CL_TRY(cl_error_wrap(cl_ckpt_load_model_pick(path, &r->g, CL_CKPT_STRICT,
                                                 CL_CKPT_PICK_RAW, NULL),
                         "resume: "));
    if (r->has_ema && r->ema.n_updates >= 0)
        cl_model_ema_set(&r->ema, &r->g); /* the file had no average */
    cl_train_state_path(path, sp, sizeof sp);
    if (access(sp, R_OK) != 0)
        return cl_error(CL_ERR_IO,
                        "resume: %s has no training state beside it (%s); "
                        "to start a new run from these weights use "
                        "--pretrained",
                        path, sp);
    CL_TRY(cl_error_wrap(cl_train_state_load(sp, &r->g, &r->opt), "resume: "));
    CL_TRY(cl_ckpt_read_meta(sp, "epoch", buf, sizeof buf));
    *epoch = strtoll(buf, NULL, 10);
    CL_TRY(cl_ckpt_read_meta(sp, "next_batch", buf, sizeof buf));
    *batch = strtoll(buf, NULL, 10);
    CL_TRY(cl_ckpt_read_meta(sp, "step", buf, sizeof buf));
    *step = strtoll(buf, NULL, 10);
    /* Model and state are two atomic writes: a crash between them can
     * leave a state file of another step beside a rewritten model. */
    char mstep[64];
    if (cl_ckpt_read_meta(path, CL_META_STEP, mstep, sizeof mstep) == CL_OK &&
        strtoll(mstep, NULL, 10) != *step)
        return cl_error(CL_ERR_FORMAT,
                        "resume: %s is from step %s but its training state "
                        "%s from step %lld (a write was interrupted); resume "
                        "from an earlier checkpoint",
                        path, mstep, sp, (long long)*step);
    CL_TRY(cl_ckpt_read_meta(sp, "global_batch", buf, sizeof buf));
    CL_TRY(resume_position(r, path, buf, batch));
    if (r->has_ema && r->ema.n_updates < 0) {
        /* The average came from the file: its counters from the state. */
        CL_TRY(cl_ckpt_read_meta(sp, "ema_averaged", buf, sizeof buf));
        r->ema.n_averaged = strtoll(buf, NULL, 10);
        CL_TRY(cl_ckpt_read_meta(sp, "ema_updates", buf, sizeof buf));
        r->ema.n_updates = strtoll(buf, NULL, 10);
    }
    CL_TRY(cl_ckpt_read_meta(sp, "steps_per_epoch", buf, sizeof buf));
    if (buf[0] && strtoll(buf, NULL, 10) != r->steps_per_epoch)
        cl_log(r->lg, CL_LOG_WARN,
               "resume: an epoch had %s steps and has %lld here (each "
               "process drops its own remainder); the schedule follows "
               "this run's",
               buf, (long long)r->steps_per_epoch);
    if (*batch >= r->steps_per_epoch * accum_of(r->cfg)) {
        (*epoch)++;
        *batch = 0;
    }
    /* How the first part planned its conv backward passes, so that the
     * rest computes what an uninterrupted run computes. */
    /* One char per node, and room for one more: a longer value shows as
     * too long and the backend refuses it. */
    size_t cap = (size_t)r->g.n_nodes + 2;
    if (!(r->conv_paths = cl_alloc_zero(cap, "resume: conv paths")))
        return CL_ERR_NOMEM;
    CL_TRY(cl_ckpt_read_meta(sp, "conv_paths", r->conv_paths, cap));
    if (!r->conv_paths[0]) {
        cl_free(r->conv_paths);
        r->conv_paths = NULL;
    }
    cl_log(r->lg, CL_LOG_INFO,
           "resumed from %s: epoch %lld, batch %lld, step %lld", path,
           (long long)*epoch + 1, (long long)*batch, (long long)*step);
    return CL_OK;
}

/* After resume: rank 0's optimizer state (momentum / Adam moments and step
 * counts) on every rank, so the replicas stay bitwise identical. */
static cl_status broadcast_optim(run *r)
{
    cl_optim *o = &r->opt;
    for (int k = 0; k < o->n_states; k++)
        CL_TRY(cl_dist_broadcast_f32(r->d, o->state[k], o->n_floats, 0));
    /* Counters: a sum where only rank 0 contributes is its broadcast. */
    if (!r->root) {
        memset(o->seg_steps, 0, (size_t)o->n_segments * sizeof *o->seg_steps);
        o->n_steps = 0;
    }
    CL_TRY(
        cl_dist_allreduce_sum_i64(r->d, o->seg_steps, (size_t)o->n_segments));
    return cl_dist_allreduce_sum_i64(r->d, &o->n_steps, 1);
}

/* After resume: rank 0's average and its counters on every rank (the
 * weights are the same everywhere, so the averages stay alike). */
static cl_status broadcast_ema(run *r)
{
    cl_model_ema *e = &r->ema;
    CL_TRY(cl_dist_broadcast_f32(r->d, e->params, e->n_params, 0));
    CL_TRY(cl_dist_broadcast_f32(r->d, e->buffers, e->n_buffers, 0));
    int64_t n[2] = {e->n_averaged, e->n_updates};
    if (!r->root)
        n[0] = n[1] = 0;
    CL_TRY(cl_dist_allreduce_sum_i64(r->d, n, 2));
    e->n_averaged = n[0];
    e->n_updates = n[1];
    return CL_OK;
}

/* ---- SIGINT / SIGTERM ------------------------------------------------- */

/* The first SIGINT or SIGTERM asks the loop to stop after the current step
 * with a checkpoint; a second one ends the process at once.  A handler can
 * only reach the loop through a static flag, and may write nothing but a
 * volatile sig_atomic_t. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    static const char msg[] =
        "\nclassic: interrupted: finishing this step and saving a "
        "checkpoint (send the signal again to stop at once)\n";
    if (stop_signal) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_signal = sig;
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
}

typedef struct stop_handlers {
    struct sigaction old_int, old_term;
} stop_handlers;

static void stop_handlers_install(stop_handlers *h)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* the loader's reads must not see EINTR */
    stop_signal = 0;
    sigaction(SIGINT, &sa, &h->old_int);
    sigaction(SIGTERM, &sa, &h->old_term);
}

static void stop_handlers_restore(const stop_handlers *h)
{
    sigaction(SIGINT, &h->old_int, NULL);
    sigaction(SIGTERM, &h->old_term, NULL);
}

/* What asked to stop: the signal, -1 for the caller's hook, 0 if
 * nothing; every rank agrees (a signal may reach only some of them), so
 * all stop after the same step. */
static int stop_requested(run *r)
{
    int64_t v = stop_signal || r->hook_stop;
    if (r->d && cl_dist_allreduce_sum_i64(r->d, &v, 1) != CL_OK)
        return 0;
    if (v == 0)
        return 0;
    return stop_signal ? (int)stop_signal : r->hook_stop ? -1 : SIGTERM;
}

/* After step: the step checkpoint (unless the interval just wrote it) and
 * the CL_ERR_INTERRUPTED message saying how to go on. */
static cl_status stop_now(run *r, int sig, int64_t epoch, int64_t next_batch,
                          int64_t step, const char *last_good, char *path,
                          size_t n)
{
    snprintf(path, n, "%s/%s-e%lld-s%lld.safetensors", r->cfg->ckpt_save_dir,
             r->arch_name, (long long)epoch + 1, (long long)step);
    if (r->root && strcmp(path, last_good) != 0) {
        CL_TRY(save_checkpoint(r, path, epoch, next_batch, step));
        CL_TRY(rotate(r, path));
    }
    return cl_error(CL_ERR_INTERRUPTED,
                    "%s %s after step %lld: checkpoint %s written; to "
                    "continue, run the same command with --resume %s",
                    sig < 0 ? "stopped" : "interrupted",
                    sig < 0         ? "by the caller"
                    : sig == SIGINT ? "by SIGINT"
                                    : "by SIGTERM",
                    (long long)step, path, path);
}

/* ---- monitors -------------------------------------------------------- */

static void jsonl_step(run *r, int64_t step, int64_t epoch, double loss,
                       double avg, double lr, double ips, double ms,
                       double wait, double comm, double hook)
{
    if (!r->jsonl)
        return;
    cl_strbuf *b = &r->line;
    b->len = 0;
    cl_strbuf_addf(b, "{\"kind\":\"train\",\"step\":%lld,\"epoch\":%lld,",
                   (long long)step, (long long)epoch);
    cl_strbuf_adds(b, "\"loss\":");
    cl_strbuf_add_json_num(b, loss);
    cl_strbuf_adds(b, ",\"loss_avg\":");
    cl_strbuf_add_json_num(b, avg);
    cl_strbuf_adds(b, ",\"lr\":");
    cl_strbuf_add_json_num(b, lr);
    cl_strbuf_adds(b, ",\"img_s\":");
    cl_strbuf_add_json_num(b, ips);
    cl_strbuf_adds(b, ",\"step_ms\":");
    cl_strbuf_add_json_num(b, ms);
    cl_strbuf_adds(b, ",\"data_wait\":");
    cl_strbuf_add_json_num(b, wait);
    if (r->sync) {
        cl_strbuf_adds(b, ",\"comm_wait\":");
        cl_strbuf_add_json_num(b, comm);
        cl_strbuf_adds(b, ",\"comm_hook\":");
        cl_strbuf_add_json_num(b, hook);
    }
    cl_strbuf_adds(b, "}\n");
    fputs(cl_strbuf_str(b), r->jsonl);
    fflush(r->jsonl);
}

static void jsonl_eval(run *r, int64_t step, int64_t epoch, double epoch_s)
{
    if (!r->jsonl)
        return;
    cl_strbuf *b = &r->line;
    b->len = 0;
    cl_strbuf_addf(b, "{\"kind\":\"eval\",\"step\":%lld,\"epoch\":%lld,",
                   (long long)step, (long long)epoch);
    cl_strbuf_adds(b, "\"val_top1\":");
    cl_strbuf_add_json_num(b, cl_metrics_top1(&r->val));
    cl_strbuf_adds(b, ",\"val_top5\":");
    cl_strbuf_add_json_num(b, cl_metrics_topk(&r->val));
    cl_strbuf_adds(b, ",\"val_loss\":");
    cl_strbuf_add_json_num(b, cl_metrics_loss(&r->val));
    cl_strbuf_addf(b, ",\"val_samples\":%lld,\"epoch_s\":",
                   (long long)cl_metrics_count(&r->val));
    cl_strbuf_add_json_num(b, epoch_s);
    if (r->has_ema) { /* the average's pass, beside the weights' */
        cl_strbuf_adds(b, ",\"val_ema_top1\":");
        cl_strbuf_add_json_num(b, cl_metrics_top1(&r->val_ema));
        cl_strbuf_adds(b, ",\"val_ema_top5\":");
        cl_strbuf_add_json_num(b, cl_metrics_topk(&r->val_ema));
        cl_strbuf_adds(b, ",\"val_ema_loss\":");
        cl_strbuf_add_json_num(b, cl_metrics_loss(&r->val_ema));
    }
    if (r->cfg->eval_hflip) /* absent: plain eval, as in older files */
        cl_strbuf_adds(b, ",\"val_hflip\":true");
    /* What val_top5 counts (min(5, K)) and the precision the pass ran at,
     * so that the report labels them (absent in older files: top-5, f32). */
    cl_strbuf_addf(b, ",\"val_topk\":%d,\"precision\":\"%s\"", r->val.k,
                   cl_train_eval_precision(r->cfg->amp_level));
    cl_strbuf_adds(b, "}\n");
    fputs(cl_strbuf_str(b), r->jsonl);
    fflush(r->jsonl);
}

static void fmt_duration(double s, char *buf, size_t n)
{
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else
        snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
}

/* ---- the loop -------------------------------------------------------- */

/* Whether the step line is redrawn in place: only on a terminal a person
 * watches.  Under mpirun the launcher forwards output through a pseudo-
 * terminal into whatever captures it, so auto prints plain lines there. */
static int progress_bar(const cl_config *c)
{
    if (c->progress != CL_CFG_PROGRESS_AUTO)
        return c->progress == CL_CFG_PROGRESS_BAR;
    const char *term = getenv("TERM");
    return isatty(STDOUT_FILENO) && !cl_dist_launched() &&
           !(term && strcmp(term, "dumb") == 0);
}

/* A batch short of bad images (on_bad_image: skip) is topped up by
 * repeating its own samples: the graph is static in the batch size, and
 * every rank must take the same number of steps. */
static void fill_batch(cl_batch *b, int batch, size_t per)
{
    for (int i = b->n; i < batch; i++) {
        int j = i % b->n;
        memcpy(b->x + (size_t)i * per, b->x + (size_t)j * per,
               per * sizeof(float));
        b->labels[i] = b->labels[j];
        if (b->targets)
            memcpy(b->targets + (size_t)i * b->k, b->targets + (size_t)j * b->k,
                   (size_t)b->k * sizeof(float));
    }
    b->n = batch;
}

/* ---- the run folder --------------------------------------------------- */

/* Whether name is a checkpoint file the trainer writes: "<arch>-e<E>",
 * "<arch>-e<E>-s<S>", "<arch>-last" or "<arch>-best", then ".safetensors",
 * ".state.safetensors" or ".val.safetensors". */
static int is_checkpoint_file(const char *name)
{
    static const char ext[] = ".safetensors";
    size_t n = strlen(name), el = sizeof ext - 1;
    if (n <= el || strcmp(name + n - el, ext) != 0)
        return 0;
    n -= el;
    if (n > 6 && memcmp(name + n - 6, ".state", 6) == 0)
        n -= 6;
    else if (n > 4 && memcmp(name + n - 4, ".val", 4) == 0)
        n -= 4;
    const char *dash = memchr(name, '-', n);
    if (!dash || dash == name)
        return 0;
    for (const char *p = name; p < dash; p++)
        if (!islower((unsigned char)*p) && !isdigit((unsigned char)*p) &&
            *p != '_')
            return 0;
    const char *t = dash + 1, *end = name + n;
    size_t tl = (size_t)(end - t);
    if ((tl == 4 && memcmp(t, "last", 4) == 0) ||
        (tl == 4 && memcmp(t, "best", 4) == 0))
        return 1;
    if (t == end || *t++ != 'e' || t == end || !isdigit((unsigned char)*t))
        return 0;
    while (t < end && isdigit((unsigned char)*t))
        t++;
    if (t == end)
        return 1;
    if (end - t < 3 || t[0] != '-' || t[1] != 's' ||
        !isdigit((unsigned char)t[2]))
        return 0;
    for (t += 2; t < end && isdigit((unsigned char)*t); t++)
        ;
    return t == end;
}

/* What a folder holds of a run, and with remove set, removes it (all but
 * the file at keep, which this run reads). */
typedef struct run_files {
    int config, metrics, ckpts;
    char last[256]; /* a "-last" model file's name, or "" */
} run_files;

static void scan_run_files(const char *dir, int remove, const struct stat *keep,
                           run_files *f)
{
    memset(f, 0, sizeof *f);
    DIR *d = opendir(dir);
    if (!d)
        return;
    char path[CL_CFG_PATH_MAX + 300];
    const struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        int config = strcmp(n, "config.yaml") == 0;
        int metrics = strcmp(n, "metrics.jsonl") == 0;
        int ckpt = is_checkpoint_file(n);
        if (!config && !metrics && !ckpt && strcmp(n, "report.html") != 0)
            continue;
        f->config |= config;
        f->metrics |= metrics;
        f->ckpts += ckpt;
        size_t len = strlen(n);
        if (ckpt && len > 17 && strcmp(n + len - 17, "-last.safetensors") == 0)
            snprintf(f->last, sizeof f->last, "%s", n);
        if (!remove)
            continue;
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, n);
        if (keep && stat(path, &st) == 0 && st.st_dev == keep->st_dev &&
            st.st_ino == keep->st_ino)
            continue;
        unlink(path);
    }
    closedir(d);
}

/* A new run (no resume) into a folder that holds a run's config.yaml or
 * metrics.jsonl would replace that run's record and mix its checkpoints
 * with the old ones: refused, unless overwrite says to remove the old
 * run's files first.  Checked on rank 0 before anything loads; every rank
 * agrees on the outcome. */
static cl_status claim_run_dir(run *r)
{
    const cl_config *c = r->cfg;
    const char *dir = c->ckpt_save_dir;
    cl_status s = CL_OK;
    run_files f;
    if (r->root && !c->resume[0]) {
        scan_run_files(dir, 0, NULL, &f);
        char what[96];
        snprintf(what, sizeof what, "%s%s%d checkpoint file(s)",
                 f.config ? "config.yaml, " : "",
                 f.metrics ? "metrics.jsonl, " : "", f.ckpts);
        if ((f.config || f.metrics) && !c->overwrite) {
            s = cl_error(CL_ERR_CONFIG,
                         "ckpt_save_dir %s already holds a run (%s), which "
                         "a new run there would replace: continue it with "
                         "--resume %s/%s, train into another folder with "
                         "--ckpt_save_dir, or replace it with --overwrite "
                         "true",
                         dir, what, dir, f.last[0] ? f.last : "CHECKPOINT");
        } else if (f.config || f.metrics) {
            struct stat keep;
            int k = c->pretrained[0] && stat(c->pretrained, &keep) == 0;
            scan_run_files(dir, 1, k ? &keep : NULL, &f);
            cl_log(r->lg, CL_LOG_INFO,
                   "overwrite: %s held a run; its files are removed (%s, "
                   "report.html)%s",
                   dir, what,
                   k ? "; the pretrained weights this run reads are kept" : "");
        }
    }
    if (r->d && !cl_dist_all_ok(r->d, s == CL_OK))
        return s != CL_OK ? s
                          : cl_error(CL_ERR_CONFIG,
                                     "rank 0 refused ckpt_save_dir %s", dir);
    return s;
}

static cl_status write_run_files(run *r)
{
    const cl_config *c = r->cfg;
    char path[1024];
    cl_strbuf y;
    cl_strbuf_init(&y);
    CL_TRY(cl_config_format_yaml(c, &y));
    r->config_yaml = strdup(cl_strbuf_str(&y));
    cl_strbuf_free(&y);
    if (!r->config_yaml)
        return cl_error(CL_ERR_NOMEM, "config text");
    if (!r->root)
        return CL_OK;
    CL_TRY(make_dirs(c->ckpt_save_dir));
    snprintf(path, sizeof path, "%s/config.yaml", c->ckpt_save_dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return cl_error(CL_ERR_IO, "%s: cannot write: %s", path,
                        strerror(errno));
    fprintf(f, "# resolved by classic %s; seed %d; %d process(es)\n",
            cl_version(), c->seed, r->d ? r->d->size : 1);
    fputs(r->config_yaml, f);
    if (fclose(f) != 0)
        return cl_error(CL_ERR_IO, "%s: write failed", path);
    snprintf(path, sizeof path, "%s/metrics.jsonl", c->ckpt_save_dir);
    /* Appending keeps the curves of a resumed run in one file. */
    r->jsonl = fopen(path, c->resume[0] ? "a" : "w");
    if (!r->jsonl)
        return cl_error(CL_ERR_IO, "%s: cannot write: %s", path,
                        strerror(errno));
    return CL_OK;
}

/* The last validation pass beside the checkpoint of its weights, so that
 * the report shows it without evaluating again (train/val_record.h). */
static cl_status save_val_record(run *r, const char *ckpt, int64_t epoch,
                                 int64_t step)
{
    if (!r->root)
        return CL_OK;
    int k = r->g.num_classes;
    const char **names = cl_alloc((size_t)k * sizeof *names, "class names");
    if (!names)
        return CL_ERR_NOMEM;
    for (int i = 0; i < k; i++)
        names[i] = i < cl_dataset_num_classes(r->train_ds)
                       ? cl_dataset_class_name(r->train_ds, i)
                       : "";
    cl_val_record_info info = {
        .step = step, .epoch = epoch, .hflip = r->cfg->eval_hflip};
    snprintf(info.split, sizeof info.split, "%s",
             r->cfg->dataset == CL_CFG_DATASET_IMAGEFOLDER ? r->val_split
                                                           : r->cfg->val_split);
    snprintf(info.dataset, sizeof info.dataset, "%s",
             cl_dataset_format(r->val_ds));
    snprintf(info.precision, sizeof info.precision, "%s",
             cl_train_eval_precision(r->cfg->amp_level));
    char path[700];
    cl_val_record_path(ckpt, path, sizeof path);
    /* The pass of the weights the checkpoint gives by default. */
    cl_status s = cl_val_record_save(path, r->has_ema ? &r->val_ema : &r->val,
                                     &r->misses, &info, names);
    cl_free(names);
    return s;
}

/* One validation pass into m, through the weights the graph holds now;
 * misses (may be NULL) keeps its most confident mistakes. */
static cl_status eval_pass(run *r, cl_metrics *m, cl_val_misses *misses)
{
    cl_metrics_reset(m);
    if (misses)
        cl_val_misses_reset(misses);
    CL_TRY(cl_evaluate(r->be, r->val_ld, m, r->d, r->cfg->eval_hflip,
                       misses ? cl_val_misses_add : NULL, misses));
    if (misses)
        CL_TRY(cl_val_misses_gather(misses, r->d));
    return CL_OK;
}

const char *cl_train_eval_precision(int amp_level)
{
    return amp_level == 0 ? "f32" : amp_level == 1 ? "bf16 (O1)" : "bf16";
}

static void log_eval(run *r, int64_t epoch, const char *what,
                     const cl_metrics *m)
{
    char ls[32];
    cl_log(r->lg, CL_LOG_INFO,
           "epoch %lld eval%s: top-1 %.2f%%  top-%d %.2f%%  loss %s  "
           "(%lld samples%s, precision %s)",
           (long long)epoch + 1, what, 100 * cl_metrics_top1(m), m->k,
           100 * cl_metrics_topk(m),
           cl_metrics_fmt_loss(cl_metrics_loss(m), ls, sizeof ls),
           (long long)cl_metrics_count(m),
           r->cfg->eval_hflip ? ", averaged with their mirrors" : "",
           cl_train_eval_precision(r->cfg->amp_level));
}

/* The average's pass: its weights swapped into the graph for the pass and
 * back, the backend's copies refreshed each time. */
static cl_status eval_ema(run *r)
{
    cl_model_ema_swap(&r->ema, &r->g);
    cl_status s = cl_backend_sync_params(r->be);
    if (s == CL_OK)
        s = eval_pass(r, &r->val_ema, &r->misses);
    cl_model_ema_swap(&r->ema, &r->g);
    cl_status back = cl_backend_sync_params(r->be);
    return s != CL_OK ? s : back;
}

static cl_status run_eval(run *r, int64_t epoch, int64_t step, double epoch_s,
                          cl_train_result *res)
{
    /* The misses are kept of the pass the best checkpoint follows. */
    CL_TRY(eval_pass(r, &r->val, r->has_ema ? NULL : &r->misses));
    log_eval(r, epoch, "", &r->val);
    if (r->has_ema) {
        CL_TRY(eval_ema(r));
        log_eval(r, epoch, " (EMA)", &r->val_ema);
    }
    jsonl_eval(r, step, epoch + 1, epoch_s);
    res->val_top1 = cl_metrics_top1(&r->val);
    res->val_top5 = cl_metrics_topk(&r->val);
    res->val_loss = cl_metrics_loss(&r->val);
    res->val_ema_top1 = res->val_ema_top5 = res->val_ema_loss = NAN;
    if (r->has_ema) {
        res->val_ema_top1 = cl_metrics_top1(&r->val_ema);
        res->val_ema_top5 = cl_metrics_topk(&r->val_ema);
        res->val_ema_loss = cl_metrics_loss(&r->val_ema);
    }
    /* With an average the best checkpoint follows its top-1 (timm's
     * eval_metrics = ema_eval_metrics): the checkpoint ships it. */
    double top1 = r->has_ema ? res->val_ema_top1 : res->val_top1;
    if (isnan(res->best_top1) || top1 > res->best_top1) {
        res->best_top1 = top1;
        if (r->root) {
            snprintf(res->best_ckpt, sizeof res->best_ckpt,
                     "%s/%s-best.safetensors", r->cfg->ckpt_save_dir,
                     r->arch_name);
            CL_TRY(save_model(r, res->best_ckpt, epoch + 1, step));
            CL_TRY(save_val_record(r, res->best_ckpt, epoch + 1, step));
        }
    }
    return CL_OK;
}

/* ---- the loop's named steps ------------------------------------------ */

/* What the loop carries from step to step. */
typedef struct loop {
    int64_t step;  /* optimizer steps taken, resumed ones included */
    int64_t step0; /* the step this call started at */
    cl_ema ema;    /* smoothed loss */
    double t_start, wait0;
    double t_epoch, t_mark, w_mark; /* epoch start; the last print's time */
    double comm_mark, hook_mark;    /* grad_wait, grad_ready s at last print */
    int64_t imgs, imgs_mark, skipped_mark;
    int tty;
    char last_good[640]; /* the newest checkpoint written */
} loop;

static void loop_init(loop *lp, run *r, int64_t step)
{
    memset(lp, 0, sizeof *lp);
    lp->step = lp->step0 = step;
    cl_ema_init(&lp->ema, 0.98);
    lp->t_start = cl_time_now();
    lp->wait0 = cl_loader_wait_seconds(r->train_ld);
    lp->tty = r->root && progress_bar(r->cfg);
}

/* The caller's hook, if any; a non-zero answer stops after this step. */
static void emit(run *r, const cl_train_event *e)
{
    if (r->hooks && r->hooks->on_event &&
        r->hooks->on_event(r->hooks->ctx, e) != 0)
        r->hook_stop = 1;
}

static cl_status epoch_begin(run *r, loop *lp, int64_t epoch, int64_t first)
{
    lp->t_epoch = cl_time_now();
    CL_TRY(cl_loader_seek(r->train_ld, epoch, first));
    lp->t_mark = cl_time_now();
    lp->w_mark = cl_loader_wait_seconds(r->train_ld);
    lp->imgs_mark = lp->imgs;
    return CL_OK;
}

static cl_status next_batch(run *r, cl_batch *b)
{
    CL_TRY(cl_loader_next(r->train_ld, b));
    if (b->n > 0 && b->n < r->cfg->batch_size)
        fill_batch(b, r->cfg->batch_size,
                   (size_t)r->in_c * (size_t)r->side * (size_t)r->side);
    return CL_OK;
}

/* Forward and backward of micro-batch bi; at the last micro-batch of a
 * step the gradient average (accumulation, ranks), clipping and the
 * optimizer step (*stepped = 1). */
static cl_status train_step(run *r, loop *lp, const cl_batch *b, int64_t epoch,
                            int64_t bi, float *loss, int *stepped)
{
    const cl_config *cfg = r->cfg;
    const int accum = accum_of(cfg);
    *stepped = 0;
    CL_TRY(cl_backend_set_input(r->be, b->x, b->targets ? NULL : b->labels,
                                b->targets));
    /* The ops' random numbers: one stream per (micro-batch, node), the
     * same after a resume; each rank its own, rank 0 a single process's. */
    cl_backend_set_step(r->be,
                        (uint64_t)cfg->seed + (uint64_t)(r->d ? r->d->rank : 0),
                        (uint64_t)(lp->step * accum + bi % accum));
    CL_TRY(cl_backend_forward(r->be, 1, loss));
    if (!isfinite(*loss))
        return cl_error(CL_ERR_NUMERIC,
                        "step %lld (epoch %lld): the loss is %s at lr %.4g; "
                        "training stopped. Lower lr (e.g. --lr %.4g) or set "
                        "grad_clip_norm; the last good checkpoint is %s",
                        (long long)lp->step + 1, (long long)epoch + 1,
                        isnan(*loss) ? "NaN" : "infinite",
                        cl_lr_at(&r->lr, lp->step), r->lr.lr / 10,
                        lp->last_good[0] ? lp->last_good
                                         : "(none written yet)");
    CL_TRY(cl_backend_backward(r->be));
    lp->imgs += b->n;
    cl_ema_add(&lp->ema, *loss);
    cl_graph *g = &r->g;
    if (accum > 1) {
        for (size_t i = 0; i < g->n_param_floats; i++)
            r->acc[i] += g->grads[i];
        if ((bi + 1) % accum != 0)
            return CL_OK;
        for (size_t i = 0; i < g->n_param_floats; i++) {
            g->grads[i] = r->acc[i] / (float)accum;
            r->acc[i] = 0;
        }
    }
    if (r->sync)
        CL_TRY(cl_dist_grad_wait(r->sync));
    if (cfg->grad_clip_norm > 0) {
        double norm =
            cl_optim_clip_grad(&r->opt, g->grads, cfg->grad_clip_norm);
        if (!isfinite(norm))
            return cl_error(CL_ERR_NUMERIC,
                            "step %lld: the gradient norm is not finite; "
                            "lower lr; the last good checkpoint is %s",
                            (long long)lp->step + 1,
                            lp->last_good[0] ? lp->last_good : "(none)");
    }
    CL_TRY(cl_optim_step(&r->opt, g->params, g->grads,
                         cl_lr_at(&r->lr, lp->step)));
    CL_TRY(cl_backend_sync_params(r->be));
    /* The average after the step, every ema_steps-th step of the epoch
     * (bi / accum is the step's index in it); during the lr warm-up it
     * keeps copying the weights, as torchvision's reference does. */
    if (r->has_ema && cl_model_ema_due(&r->ema, bi / accum)) {
        cl_model_ema_update(&r->ema, g);
        if (epoch < cfg->warmup_epochs)
            cl_model_ema_reset(&r->ema);
    }
    lp->step++;
    *stepped = 1;
    return CL_OK;
}

/* Every per_print_times steps and at the epoch's last: the step line, its
 * JSONL record and the STEP event, with the global batch's loss. */
static cl_status log_step(run *r, loop *lp, int64_t epoch, int64_t in_epoch,
                          float loss)
{
    const cl_config *cfg = r->cfg;
    if (cfg->per_print_times <= 0 || (lp->step % cfg->per_print_times != 0 &&
                                      in_epoch != r->steps_per_epoch))
        return CL_OK;
    const int ranks = r->d ? r->d->size : 1;
    const int64_t total = r->steps_per_epoch * cfg->epoch_size;
    double now = cl_time_now(), dt = now - lp->t_mark;
    double w = cl_loader_wait_seconds(r->train_ld) - lp->w_mark;
    double ips = dt > 0 ? (double)(lp->imgs - lp->imgs_mark) / dt : 0;
    double comm = 0, hook = 0, lv[2] = {loss, cl_ema_get(&lp->ema)};
    if (r->sync) {
        cl_dist_sync_stats ss;
        cl_dist_grad_sync_stats(r->sync, &ss);
        comm = ss.wait_s_total - lp->comm_mark;
        lp->comm_mark = ss.wait_s_total;
        hook = ss.hook_s_total - lp->hook_mark;
        lp->hook_mark = ss.hook_s_total;
        /* The logged loss is the global batch's: the mean of the ranks'
         * means (equal batch sizes). */
        CL_TRY(cl_dist_allreduce_sum_f64(r->d, lv, 2));
        lv[0] /= r->d->size;
        lv[1] /= r->d->size;
    }
    int64_t nsteps =
        (lp->imgs - lp->imgs_mark) / (cfg->batch_size * accum_of(cfg));
    double ms = nsteps ? 1000 * dt / (double)nsteps : 0;
    double left = lp->step < total ? ms * (double)(total - lp->step) / 1000 : 0;
    /* The step's lr as the optimizer took it (a float). */
    float lr = (float)cl_lr_at(&r->lr, lp->step - 1);
    if (r->root) {
        char msg[320], cs[32] = "", eta[32], l0[32], l1[32];
        fmt_duration(left, eta, sizeof eta);
        if (r->sync)
            snprintf(cs, sizeof cs, " comm %.1f%%",
                     dt > 0 ? 100 * comm / dt : 0);
        snprintf(msg, sizeof msg,
                 "epoch %lld/%d step %lld/%lld loss %s (avg %s) lr %.5g | "
                 "%.1f img/s %.0f ms/step data %.1f%%%s | ETA %s",
                 (long long)epoch + 1, cfg->epoch_size, (long long)in_epoch,
                 (long long)r->steps_per_epoch,
                 cl_metrics_fmt_loss(lv[0], l0, sizeof l0),
                 cl_metrics_fmt_loss(lv[1], l1, sizeof l1), lr, ips * ranks, ms,
                 dt > 0 ? 100 * w / dt : 0, cs, eta);
        if (lp->tty)
            printf("\r\033[K%s", msg);
        else
            printf("%s\n", msg);
        fflush(stdout);
    }
    jsonl_step(r, lp->step, epoch + 1, lv[0], lv[1], lr, ips * ranks, ms,
               dt > 0 ? w / dt : 0, dt > 0 ? comm / dt : 0,
               dt > 0 ? hook / dt : 0);
    cl_train_event e = {.kind = CL_TRAIN_EVENT_STEP,
                        .step = lp->step,
                        .first_step = lp->step0,
                        .total_steps = total,
                        .epoch = epoch + 1,
                        .loss = lv[0],
                        .loss_avg = lv[1],
                        .lr = lr,
                        .img_s = ips * ranks};
    emit(r, &e);
    lp->t_mark = now;
    lp->w_mark = cl_loader_wait_seconds(r->train_ld);
    lp->imgs_mark = lp->imgs;
    return CL_OK;
}

/* Every ckpt_save_interval steps: model and state, rotated. */
static cl_status step_checkpoint(run *r, loop *lp, int64_t epoch,
                                 int64_t next_batch)
{
    const cl_config *cfg = r->cfg;
    if (cfg->ckpt_save_interval <= 0 ||
        lp->step % cfg->ckpt_save_interval != 0 || !r->root)
        return CL_OK;
    char path[640];
    snprintf(path, sizeof path, "%s/%s-e%lld-s%lld.safetensors",
             cfg->ckpt_save_dir, r->arch_name, (long long)epoch + 1,
             (long long)lp->step);
    CL_TRY(save_checkpoint(r, path, epoch, next_batch, lp->step));
    CL_TRY(rotate(r, path));
    snprintf(lp->last_good, sizeof lp->last_good, "%s", path);
    return CL_OK;
}

/* The epoch's summary, its checkpoint, its evaluation, the EPOCH event. */
static cl_status epoch_end(run *r, loop *lp, int64_t epoch,
                           cl_train_result *res)
{
    const cl_config *cfg = r->cfg;
    if (lp->tty)
        printf("\n");
    double epoch_s = cl_time_now() - lp->t_epoch;
    char es[32], lstr[32];
    fmt_duration(epoch_s, es, sizeof es);
    cl_log(r->lg, CL_LOG_INFO, "epoch %lld/%d done in %s, loss (avg) %s",
           (long long)epoch + 1, cfg->epoch_size, es,
           cl_metrics_fmt_loss(cl_ema_get(&lp->ema), lstr, sizeof lstr));
    /* on_bad_image: skip must not hide what it dropped. */
    cl_loader_stats ls;
    cl_loader_get_stats(r->train_ld, &ls);
    if (ls.skipped > lp->skipped_mark) {
        cl_log(r->lg, CL_LOG_WARN,
               "epoch %lld: %lld unreadable image(s) skipped "
               "(on_bad_image: skip); the last: %s",
               (long long)epoch + 1, (long long)(ls.skipped - lp->skipped_mark),
               ls.last_skipped);
        lp->skipped_mark = ls.skipped;
    }
    res->epochs = (int)epoch + 1;
    int last = epoch + 1 == cfg->epoch_size;
    if (cfg->ckpt_save_epochs > 0 &&
        ((epoch + 1) % cfg->ckpt_save_epochs == 0 || last) && r->root) {
        char path[640];
        snprintf(path, sizeof path, "%s/%s-e%lld.safetensors",
                 cfg->ckpt_save_dir, r->arch_name, (long long)epoch + 1);
        CL_TRY(save_checkpoint(r, path, epoch,
                               cl_loader_batches_per_epoch(r->train_ld),
                               lp->step));
        CL_TRY(rotate(r, path));
        snprintf(lp->last_good, sizeof lp->last_good, "%s", path);
    }
    cl_train_event e = {.kind = CL_TRAIN_EVENT_EPOCH,
                        .step = lp->step,
                        .first_step = lp->step0,
                        .total_steps = r->steps_per_epoch * cfg->epoch_size,
                        .epoch = epoch + 1,
                        .loss_avg = cl_ema_get(&lp->ema),
                        .last_epoch = last,
                        .val_top1 = NAN,
                        .val_top5 = NAN,
                        .val_loss = NAN,
                        .val_ema_top1 = NAN,
                        .val_ema_top5 = NAN,
                        .val_ema_loss = NAN};
    if (r->val_ld && ((epoch + 1) % cfg->val_interval == 0 || last)) {
        CL_TRY(run_eval(r, epoch, lp->step, epoch_s, res));
        e.evaluated = 1;
        e.val_top1 = res->val_top1;
        e.val_top5 = res->val_top5;
        e.val_loss = res->val_loss;
        e.val_ema_top1 = res->val_ema_top1;
        e.val_ema_top5 = res->val_ema_top5;
        e.val_ema_loss = res->val_ema_loss;
    }
    emit(r, &e);
    return CL_OK;
}

/* The loop's counters into res: time, steps, smoothed loss, throughput. */
static void loop_result(run *r, const loop *lp, cl_train_result *res)
{
    res->seconds = cl_time_now() - lp->t_start;
    res->steps = lp->step;
    res->steps_run = lp->step - lp->step0;
    res->last_loss = cl_ema_get(&lp->ema);
    res->img_per_s = res->seconds > 0 ? (double)lp->imgs / res->seconds : 0;
    res->data_wait_share =
        res->seconds > 0
            ? (cl_loader_wait_seconds(r->train_ld) - lp->wait0) / res->seconds
            : 0;
}

cl_status cl_train_run(const cl_config *cfg, cl_dist *d, const cl_logger *lg,
                       const cl_train_hooks *hooks, cl_train_result *res)
{
    run r;
    cl_status s;
    stop_handlers sh;
    memset(&r, 0, sizeof r);
    memset(res, 0, sizeof *res);
    res->val_top1 = res->val_top5 = res->val_loss = res->best_top1 = NAN;
    res->val_ema_top1 = res->val_ema_top5 = res->val_ema_loss = NAN;
    r.cfg = cfg;
    r.d = d && d->size > 1 ? d : NULL;
    r.lg = lg;
    r.hooks = hooks;
    r.root = !d || d->rank == 0;
    cl_strbuf_init(&r.line);
    stop_handlers_install(&sh);

    if ((s = claim_run_dir(&r)) != CL_OK || (s = open_data(&r)) != CL_OK ||
        (s = build_model(&r)) != CL_OK || (s = make_optimizer(&r)) != CL_OK ||
        (s = cl_metrics_init(&r.val, r.g.num_classes)) != CL_OK ||
        (s = cl_metrics_init(&r.val_ema, r.g.num_classes)) != CL_OK ||
        (s = cl_val_misses_init(&r.misses, r.val_ds, CL_VAL_MISS_MAX)) !=
            CL_OK ||
        (s = write_run_files(&r)) != CL_OK)
        goto fail;

    int64_t epoch0 = 0, batch0 = 0, step = 0;
    if (cfg->resume[0] && (s = resume(&r, &epoch0, &batch0, &step)) != CL_OK)
        goto fail;
    if (epoch0 >= cfg->epoch_size) {
        /* Resumed at its end: every rank read the same state, so all
         * stop here; nothing is written. */
        cl_log(lg, CL_LOG_INFO,
               "resume: %s is the end of the run (step %lld, epoch_size "
               "%d): nothing is left to train",
               cfg->resume, (long long)step, cfg->epoch_size);
        res->steps = step;
        res->epochs = cfg->epoch_size;
        res->complete = 1;
        snprintf(res->last_ckpt, sizeof res->last_ckpt, "%s", cfg->resume);
        s = CL_OK;
        goto fail;
    }
    /* Every rank starts from rank 0's weights. */
    if (r.d && (s = cl_dist_broadcast_graph(r.d, &r.g, 0)) != CL_OK)
        goto fail;
    if (r.d && cfg->resume[0] && (s = broadcast_optim(&r)) != CL_OK)
        goto fail;
    if (r.has_ema && !cfg->resume[0])
        cl_model_ema_set(&r.ema, &r.g); /* rank 0's weights */
    if (r.has_ema && r.d && cfg->resume[0] && (s = broadcast_ema(&r)) != CL_OK)
        goto fail;

    if ((s = plan_training(&r)) != CL_OK)
        goto fail;
    if (r.d) {
        cl_dist_sync_opts so = cl_dist_sync_opts_default();
        so.bucket_mb = cfg->bucket_mb;
        so.mode = cfg->grad_sync == CL_CFG_GRAD_SYNC_BLOCKING
                      ? CL_DIST_SYNC_BLOCKING
                      : CL_DIST_SYNC_OVERLAP;
        if ((s = cl_dist_grad_sync_create_graph(&r.sync, r.d, &r.g, &so)) !=
            CL_OK)
            goto fail;
        r.be->hooks = cl_dist_grad_sync_hooks(r.sync, cfg->sync_bn);
        /* With accumulation only the local sum of the micro-batches is
         * averaged, once per step: no bucket may start during backward
         * (grad_wait takes every tensor as ready after the sum). */
        if (cfg->accumulation_steps > 1)
            r.be->hooks.grad_ready = NULL;
    } else if (cfg->sync_bn) {
        cl_log(lg, CL_LOG_INFO, "sync_bn with one process is plain BN");
    }

    const int accum = accum_of(cfg);
    char archname[32];
    cl_log(
        lg, CL_LOG_INFO,
        "training %s (%s%s%lld parameters) on %s: %lld "
        "samples per epoch, %dx%dx%d input, %d classes; %lld steps/epoch x %d "
        "epochs; global batch %d (%d x %d process(es) x %d accumulation), "
        "peak lr %.4g; backend %s, amp_level O%d (%s)",
        cl_arch_name(&r.model, archname, sizeof archname),
        cl_arch_stem(&r.model) ? cl_arch_stem(&r.model) : "",
        cl_arch_stem(&r.model) ? " stem, " : "", (long long)r.g.n_param_elems,
        cl_dataset_format(r.train_ds),
        (long long)cl_loader_samples_per_epoch(r.train_ld) * (d ? d->size : 1),
        r.in_c, r.side, r.side, r.g.num_classes, (long long)r.steps_per_epoch,
        cfg->epoch_size, global_batch(&r), cfg->batch_size, d ? d->size : 1,
        accum, r.lr.lr, r.be->vt->name, cfg->amp_level,
        cfg->amp_level == 0   ? "f32"
        : cfg->amp_level == 1 ? "bf16 convolutions and matmuls"
                              : "bf16 activations, f32 master weights");

    if (r.has_ema)
        cl_log(lg, CL_LOG_INFO,
               "ema: an average of the weights, decay %.6g per update, "
               "updated every %d step(s) of an epoch%s%s; evaluated beside "
               "them, it picks the best checkpoint and is the model the "
               "checkpoints give by default",
               cfg->ema_decay, cfg->ema_steps,
               cfg->ema_warmup ? ", decay warm-up" : "",
               cfg->warmup_epochs > 0 ? ", a copy of them during the lr "
                                        "warm-up"
                                      : "");
    /* The loop: next batch, step, log, checkpoint, stop; at each epoch's
     * end its checkpoint and evaluation. */
    loop lp;
    loop_init(&lp, &r, step);
    for (int64_t epoch = epoch0; epoch < cfg->epoch_size; epoch++) {
        int64_t first = epoch == epoch0 ? batch0 : 0;
        if ((s = epoch_begin(&r, &lp, epoch, first)) != CL_OK)
            goto fail;
        for (int64_t bi = first; bi < r.steps_per_epoch * accum; bi++) {
            cl_batch b;
            float loss = 0;
            int stepped = 0;
            if ((s = next_batch(&r, &b)) != CL_OK)
                goto fail;
            if (b.n == 0)
                break;
            if ((s = train_step(&r, &lp, &b, epoch, bi, &loss, &stepped)) !=
                CL_OK)
                goto fail;
            if (!stepped)
                continue;
            if ((s = log_step(&r, &lp, epoch, (bi + 1) / accum, loss)) !=
                    CL_OK ||
                (s = step_checkpoint(&r, &lp, epoch, bi + 1)) != CL_OK)
                goto fail;
            int sig = stop_requested(&r);
            if (sig) {
                /* A stopped run reports what it trained and the
                 * checkpoint it wrote, as a finished one does. */
                res->stop_signal = sig > 0 ? sig : 0;
                loop_result(&r, &lp, res);
                s = stop_now(&r, sig, epoch, bi + 1, lp.step, lp.last_good,
                             res->last_ckpt, sizeof res->last_ckpt);
                if (!r.root)
                    res->last_ckpt[0] = '\0';
                goto fail;
            }
        }
        if ((s = epoch_end(&r, &lp, epoch, res)) != CL_OK)
            goto fail;
    }
    loop_result(&r, &lp, res);
    if (r.root) {
        snprintf(res->last_ckpt, sizeof res->last_ckpt,
                 "%s/%s-last.safetensors", cfg->ckpt_save_dir, r.arch_name);
        if ((s = save_checkpoint(&r, res->last_ckpt,
                                 cfg->epoch_size > 0 ? cfg->epoch_size - 1 : 0,
                                 cl_loader_batches_per_epoch(r.train_ld),
                                 lp.step)) != CL_OK)
            goto fail;
        /* The last epoch is always evaluated when there is a split. */
        if (r.val_ld &&
            (s = save_val_record(&r, res->last_ckpt, cfg->epoch_size,
                                 lp.step)) != CL_OK)
            goto fail;
    }
    s = CL_OK;
fail:
    run_free(&r);
    stop_handlers_restore(&sh);
    return s;
}
