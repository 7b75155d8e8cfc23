/* The training loop, top to bottom: set up data, model, backend, optimizer
 * and schedule from the config; then for every step load a batch, run
 * forward and backward, average gradients over ranks, step the optimizer;
 * around it the monitors, the metrics log and evaluation.  What the run
 * writes and reads back (checkpoints, resume) and the broadcasts that start
 * every rank alike are train/checkpointing.c's; its folder (config.yaml,
 * metrics.jsonl) train/run_dir.c's; what they share, train/run.h.
 *
 * Reading order: cl_train_run at the bottom calls set_up, then train_loop;
 * each calls the named steps above it. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/mem.h"
#include "core/timer.h"
#include "data/data.h"
#include "graph/graph.h"
#include "interop/interop.h"
#include "io/checkpoint.h"
#include "io/strbuf.h"
#include "models/arch.h"
#include "train/checkpointing.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/model_ema.h"
#include "train/recipe.h"
#include "train/run.h"
#include "train/run_dir.h"
#include "train/trainer.h"
#include "train/val_record.h"

/* Releases what the run owns, in reverse order of set-up. */
static void run_free(cl_run *r)
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

/* ---- set-up ---------------------------------------------------------- */

/* What each image goes through, so that an augmentation the recipe
 * turned on, or one it did not, is seen before the first step. */
static void log_transforms(const cl_run *r, const char *split, int h, int w,
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
static void note_split(cl_run *r, const char *key, const char *split,
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
static cl_status check_classes(const cl_run *r, const char *dir, int k)
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

static cl_status open_data(cl_run *r)
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
    lo.num_shards = cl_run_ranks(r);
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
static cl_status load_pretrained(cl_run *r, int k)
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
    if (s == CL_OK)
        s = cl_weights_for_training(&w, c->pretrained);
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

static cl_status build_model(cl_run *r)
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

static cl_status make_optimizer(cl_run *r)
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

static cl_status plan_training(cl_run *r)
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
        CL_TRY(cl_run_share_conv_paths(r, &shared));
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
    else if (cfg->autotune)
        cl_log(r->lg, CL_LOG_INFO,
               "autotune: measured two ways of %d conv backward passes and "
               "oneDNN's implementations of each conv primitive in %.1f s; "
               "%d run the other way than oneDNN's primitive, %d (per shape) "
               "another implementation than oneDNN's first",
               measured, cl_time_now() - t0, rewritten,
               cl_backend_tune_impls(r->be));
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
static int stop_requested(cl_run *r)
{
    const int sig = r->watch_signals ? (int)stop_signal : 0;
    int64_t v = sig || r->hook_stop;
    if (r->d && cl_dist_allreduce_sum_i64(r->d, &v, 1) != CL_OK)
        return 0;
    if (v == 0)
        return 0;
    return sig ? sig : r->hook_stop ? -1 : SIGTERM;
}

/* After step: the step checkpoint (unless the interval just wrote it) and
 * the CL_ERR_INTERRUPTED message saying how to go on. */
static cl_status stop_now(cl_run *r, int sig, int64_t epoch, int64_t next_batch,
                          int64_t step, const char *last_good, char *path,
                          size_t n)
{
    snprintf(path, n, "%s/%s-e%lld-s%lld.safetensors", r->cfg->ckpt_save_dir,
             r->arch_name, (long long)epoch + 1, (long long)step);
    if (r->root && strcmp(path, last_good) != 0) {
        CL_TRY(cl_run_save_checkpoint(r, path, epoch, next_batch, step));
        CL_TRY(cl_run_rotate(r, path));
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

/* ---- evaluation ------------------------------------------------------ */

/* One validation pass into m, through the weights the graph holds now;
 * misses (may be NULL) keeps its most confident mistakes. */
static cl_status eval_pass(cl_run *r, cl_metrics *m, cl_val_misses *misses)
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

static void log_eval(cl_run *r, int64_t epoch, const char *what,
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
static cl_status eval_ema(cl_run *r)
{
    cl_model_ema_swap(&r->ema, &r->g);
    cl_status s = cl_backend_sync_params(r->be);
    if (s == CL_OK)
        s = eval_pass(r, &r->val_ema, &r->misses);
    cl_model_ema_swap(&r->ema, &r->g);
    cl_status back = cl_backend_sync_params(r->be);
    return s != CL_OK ? s : back;
}

static cl_status run_eval(cl_run *r, int64_t epoch, int64_t step,
                          double epoch_s, cl_train_result *res)
{
    /* The misses are kept of the pass the best checkpoint follows. */
    CL_TRY(eval_pass(r, &r->val, r->has_ema ? NULL : &r->misses));
    log_eval(r, epoch, "", &r->val);
    if (r->has_ema) {
        CL_TRY(eval_ema(r));
        log_eval(r, epoch, " (EMA)", &r->val_ema);
    }
    cl_run_jsonl_eval(r, step, epoch + 1, epoch_s);
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
            CL_TRY(cl_run_save_model(r, res->best_ckpt, epoch + 1, step));
            CL_TRY(cl_run_save_val_record(r, res->best_ckpt, epoch + 1, step));
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

static void loop_init(loop *lp, cl_run *r, int64_t step)
{
    memset(lp, 0, sizeof *lp);
    lp->step = lp->step0 = step;
    cl_ema_init(&lp->ema, 0.98);
    lp->t_start = cl_time_now();
    lp->wait0 = cl_loader_wait_seconds(r->train_ld);
    lp->tty = r->root && progress_bar(r->cfg);
}

/* The caller's hook, if any; a non-zero answer stops after this step. */
static void emit(cl_run *r, const cl_train_event *e)
{
    if (r->hooks && r->hooks->on_event &&
        r->hooks->on_event(r->hooks->ctx, e) != 0)
        r->hook_stop = 1;
}

static cl_status epoch_begin(cl_run *r, loop *lp, int64_t epoch, int64_t first)
{
    lp->t_epoch = cl_time_now();
    CL_TRY(cl_loader_seek(r->train_ld, epoch, first));
    lp->t_mark = cl_time_now();
    lp->w_mark = cl_loader_wait_seconds(r->train_ld);
    lp->imgs_mark = lp->imgs;
    return CL_OK;
}

static cl_status next_batch(cl_run *r, cl_batch *b)
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
static cl_status train_step(cl_run *r, loop *lp, const cl_batch *b,
                            int64_t epoch, int64_t bi, float *loss,
                            int *stepped)
{
    const cl_config *cfg = r->cfg;
    const int accum = cl_run_accum(r);
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
static cl_status log_step(cl_run *r, loop *lp, int64_t epoch, int64_t in_epoch,
                          float loss)
{
    const cl_config *cfg = r->cfg;
    if (cfg->per_print_times <= 0 || (lp->step % cfg->per_print_times != 0 &&
                                      in_epoch != r->steps_per_epoch))
        return CL_OK;
    const int ranks = cl_run_ranks(r);
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
        (lp->imgs - lp->imgs_mark) / (cfg->batch_size * cl_run_accum(r));
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
    cl_run_jsonl_step(r, lp->step, epoch + 1, lv[0], lv[1], lr, ips * ranks, ms,
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
static cl_status step_checkpoint(cl_run *r, loop *lp, int64_t epoch,
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
    CL_TRY(cl_run_save_checkpoint(r, path, epoch, next_batch, lp->step));
    CL_TRY(cl_run_rotate(r, path));
    snprintf(lp->last_good, sizeof lp->last_good, "%s", path);
    return CL_OK;
}

/* The epoch's summary, its checkpoint, its evaluation, the EPOCH event. */
static cl_status epoch_end(cl_run *r, loop *lp, int64_t epoch,
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
        CL_TRY(cl_run_save_checkpoint(r, path, epoch,
                                      cl_loader_batches_per_epoch(r->train_ld),
                                      lp->step));
        CL_TRY(cl_run_rotate(r, path));
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
static void loop_result(cl_run *r, const loop *lp, cl_train_result *res)
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

/* ---- set-up and the loop ---------------------------------------------- */

/* What the run trains, on what, how long and how, in one log line; the
 * average's settings in another. */
static void log_plan(const cl_run *r)
{
    const cl_config *cfg = r->cfg;
    char archname[32];
    cl_log(
        r->lg, CL_LOG_INFO,
        "training %s (%s%s%lld parameters) on %s: %lld "
        "samples per epoch, %dx%dx%d input, %d classes; %lld steps/epoch x %d "
        "epochs; global batch %d (%d x %d process(es) x %d accumulation), "
        "peak lr %.4g; backend %s, amp_level O%d (%s)",
        cl_arch_name(&r->model, archname, sizeof archname),
        cl_arch_stem(&r->model) ? cl_arch_stem(&r->model) : "",
        cl_arch_stem(&r->model) ? " stem, " : "", (long long)r->g.n_param_elems,
        cl_dataset_format(r->train_ds),
        (long long)cl_loader_samples_per_epoch(r->train_ld) * cl_run_ranks(r),
        r->in_c, r->side, r->side, r->g.num_classes,
        (long long)r->steps_per_epoch, cfg->epoch_size, cl_run_global_batch(r),
        cfg->batch_size, cl_run_ranks(r), cl_run_accum(r), r->lr.lr,
        r->be->vt->name, cfg->amp_level,
        cfg->amp_level == 0   ? "f32"
        : cfg->amp_level == 1 ? "bf16 convolutions and matmuls"
                              : "bf16 activations, f32 master weights");
    if (r->has_ema)
        cl_log(r->lg, CL_LOG_INFO,
               "ema: an average of the weights, decay %.6g per update, "
               "updated every %d step(s) of an epoch%s%s; evaluated beside "
               "them, it picks the best checkpoint and is the model the "
               "checkpoints give by default",
               cfg->ema_decay, cfg->ema_steps,
               cfg->ema_warmup ? ", decay warm-up" : "",
               cfg->warmup_epochs > 0 ? ", a copy of them during the lr "
                                        "warm-up"
                                      : "");
}

/* The gradient averaging over ranks, hooked into backward. */
static cl_status make_grad_sync(cl_run *r)
{
    const cl_config *cfg = r->cfg;
    if (!r->d) {
        if (cfg->sync_bn)
            cl_log(r->lg, CL_LOG_INFO, "sync_bn with one process is plain BN");
        return CL_OK;
    }
    cl_dist_sync_opts so = cl_dist_sync_opts_default();
    so.bucket_mb = cfg->bucket_mb;
    so.mode = cfg->grad_sync == CL_CFG_GRAD_SYNC_BLOCKING
                  ? CL_DIST_SYNC_BLOCKING
                  : CL_DIST_SYNC_OVERLAP;
    CL_TRY(cl_dist_grad_sync_create_graph(&r->sync, r->d, &r->g, &so));
    r->be->hooks = cl_dist_grad_sync_hooks(r->sync, cfg->sync_bn);
    /* With accumulation only the local sum of the micro-batches is
     * averaged, once per step: no bucket may start during backward
     * (grad_wait takes every tensor as ready after the sum). */
    if (cfg->accumulation_steps > 1)
        r->be->hooks.grad_ready = NULL;
    return CL_OK;
}

/* Everything before the first step: the folder claimed, data, model,
 * optimizer and schedule, the run's files, the resumed state (*epoch0,
 * *batch0, *step: where to go on), every rank alike, the backend's plan
 * and the gradient averaging.  A resume at the run's end sets
 * res->complete and stops there. */
static cl_status set_up(cl_run *r, int64_t *epoch0, int64_t *batch0,
                        int64_t *step, cl_train_result *res)
{
    const cl_config *cfg = r->cfg;
    CL_TRY(cl_run_claim_dir(r));
    CL_TRY(open_data(r));
    CL_TRY(build_model(r));
    CL_TRY(make_optimizer(r));
    CL_TRY(cl_metrics_init(&r->val, r->g.num_classes));
    CL_TRY(cl_metrics_init(&r->val_ema, r->g.num_classes));
    CL_TRY(cl_val_misses_init(&r->misses, r->val_ds, CL_VAL_MISS_MAX));
    CL_TRY(cl_run_write_files(r));
    if (cfg->resume[0])
        CL_TRY(cl_run_resume(r, epoch0, batch0, step));
    if (*epoch0 >= cfg->epoch_size) {
        /* Resumed at its end: every rank read the same state, so all
         * stop here; nothing is written. */
        cl_log(r->lg, CL_LOG_INFO,
               "resume: %s is the end of the run (step %lld, epoch_size "
               "%d): nothing is left to train",
               cfg->resume, (long long)*step, cfg->epoch_size);
        res->steps = *step;
        res->epochs = cfg->epoch_size;
        res->complete = 1;
        snprintf(res->last_ckpt, sizeof res->last_ckpt, "%s", cfg->resume);
        return CL_OK;
    }
    CL_TRY(cl_run_share_start(r));
    CL_TRY(plan_training(r));
    CL_TRY(make_grad_sync(r));
    log_plan(r);
    return CL_OK;
}

/* The loop: next batch, step, log, checkpoint, stop; at each epoch's end
 * its checkpoint and evaluation; at the run's end the last checkpoint. */
static cl_status train_loop(cl_run *r, int64_t epoch0, int64_t batch0,
                            int64_t step, cl_train_result *res)
{
    const cl_config *cfg = r->cfg;
    const int accum = cl_run_accum(r);
    loop lp;
    loop_init(&lp, r, step);
    for (int64_t epoch = epoch0; epoch < cfg->epoch_size; epoch++) {
        int64_t first = epoch == epoch0 ? batch0 : 0;
        CL_TRY(epoch_begin(r, &lp, epoch, first));
        for (int64_t bi = first; bi < r->steps_per_epoch * accum; bi++) {
            cl_batch b;
            float loss = 0;
            int stepped = 0;
            CL_TRY(next_batch(r, &b));
            if (b.n == 0)
                break;
            CL_TRY(train_step(r, &lp, &b, epoch, bi, &loss, &stepped));
            if (!stepped)
                continue;
            CL_TRY(log_step(r, &lp, epoch, (bi + 1) / accum, loss));
            CL_TRY(step_checkpoint(r, &lp, epoch, bi + 1));
            int sig = stop_requested(r);
            if (sig) {
                /* A stopped run reports what it trained and the
                 * checkpoint it wrote, as a finished one does. */
                res->stop_signal = sig > 0 ? sig : 0;
                loop_result(r, &lp, res);
                cl_status s =
                    stop_now(r, sig, epoch, bi + 1, lp.step, lp.last_good,
                             res->last_ckpt, sizeof res->last_ckpt);
                if (!r->root)
                    res->last_ckpt[0] = '\0';
                return s;
            }
        }
        CL_TRY(epoch_end(r, &lp, epoch, res));
    }
    loop_result(r, &lp, res);
    if (!r->root)
        return CL_OK;
    snprintf(res->last_ckpt, sizeof res->last_ckpt, "%s/%s-last.safetensors",
             cfg->ckpt_save_dir, r->arch_name);
    CL_TRY(cl_run_save_checkpoint(
        r, res->last_ckpt, cfg->epoch_size > 0 ? cfg->epoch_size - 1 : 0,
        cl_loader_batches_per_epoch(r->train_ld), lp.step));
    /* The last epoch is always evaluated when there is a split. */
    if (r->val_ld)
        CL_TRY(cl_run_save_val_record(r, res->last_ckpt, cfg->epoch_size,
                                      lp.step));
    return CL_OK;
}

cl_status cl_train_run(const cl_config *cfg, cl_dist *d, const cl_logger *lg,
                       const cl_train_hooks *hooks, cl_train_result *res)
{
    cl_run r;
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
    r.watch_signals = !(hooks && hooks->host_signals);
    cl_strbuf_init(&r.line);
    if (r.watch_signals)
        stop_handlers_install(&sh);
    int64_t epoch0 = 0, batch0 = 0, step = 0;
    cl_status s = set_up(&r, &epoch0, &batch0, &step, res);
    if (s == CL_OK && !res->complete)
        s = train_loop(&r, epoch0, batch0, step, res);
    run_free(&r);
    if (r.watch_signals)
        stop_handlers_restore(&sh);
    return s;
}
