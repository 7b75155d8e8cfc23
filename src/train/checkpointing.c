/* A training run's checkpoints (model and training state, rotated), the
 * validation record beside them, resume from them, and the broadcasts that
 * start every rank from rank 0's state.  train/checkpointing.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/mem.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io/strbuf.h"
#include "train/checkpointing.h"
#include "train/train_state.h"

/* ---- writing ---------------------------------------------------------- */

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

cl_status cl_run_save_model(cl_run *r, const char *path, int64_t epoch,
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

cl_status cl_run_save_checkpoint(cl_run *r, const char *path, int64_t epoch,
                                 int64_t next_batch, int64_t step)
{
    char sp[1024], ep[32], nb[32], st[32], seed[32], spe[32];
    char gb[16], bs[16], np[16], ac[16], ema_n[32] = "", ema_u[32] = "";
    CL_TRY(cl_run_save_model(r, path, epoch, step));
    if (r->has_ema) {
        snprintf(ema_n, sizeof ema_n, "%lld", (long long)r->ema.n_averaged);
        snprintf(ema_u, sizeof ema_u, "%lld", (long long)r->ema.n_updates);
    }
    cl_train_state_path(path, sp, sizeof sp);
    snprintf(ep, sizeof ep, "%lld", (long long)epoch);
    snprintf(nb, sizeof nb, "%lld", (long long)next_batch);
    snprintf(st, sizeof st, "%lld", (long long)step);
    snprintf(seed, sizeof seed, "%d", r->cfg->seed);
    snprintf(gb, sizeof gb, "%d", cl_run_global_batch(r));
    snprintf(bs, sizeof bs, "%d", r->cfg->batch_size);
    snprintf(np, sizeof np, "%d", cl_run_ranks(r));
    snprintf(ac, sizeof ac, "%d", cl_run_accum(r));
    snprintf(spe, sizeof spe, "%lld", (long long)r->steps_per_epoch);
    const char *paths = cl_backend_conv_paths(r->be);
    cl_ckpt_kv meta[] = {{CL_STATE_EPOCH, ep},
                         {CL_STATE_NEXT_BATCH, nb},
                         {CL_STATE_STEP, st},
                         {CL_STATE_SEED, seed},
                         {CL_STATE_MODEL_FILE, path},
                         {CL_STATE_CONV_PATHS, paths ? paths : ""},
                         {CL_STATE_GLOBAL_BATCH, gb},
                         {CL_STATE_BATCH_SIZE, bs},
                         {CL_STATE_PROCESSES, np},
                         {CL_STATE_ACCUMULATION, ac},
                         {CL_STATE_STEPS_PER_EPOCH, spe},
                         {CL_STATE_EMA_AVERAGED, ema_n},
                         {CL_STATE_EMA_UPDATES, ema_u}};
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

cl_status cl_run_rotate(cl_run *r, const char *path)
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

cl_status cl_run_save_val_record(cl_run *r, const char *ckpt, int64_t epoch,
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

/* ---- resume ----------------------------------------------------------- */

/* The resumed position in this run's loader batches.  The step count, the
 * schedule and the position in the epoch are in steps of the global batch,
 * so that is what must stay; how it is split over ranks, batch_size and
 * accumulation_steps may change (a step takes the same samples of the
 * epoch's order either way: the loader deals sample k to rank k % ranks).
 * A state written before the global batch was recorded is taken as is. */
static cl_status resume_position(cl_run *r, const char *path,
                                 const cl_train_state_info *in, int64_t *batch)
{
    const int g0 = in->global_batch, b0 = in->batch_size, n0 = in->processes;
    const int a0 = in->accumulation_steps;
    if (g0 == 0)
        return CL_OK;
    const int g = cl_run_global_batch(r), n = cl_run_ranks(r);
    const int b = r->cfg->batch_size, a = cl_run_accum(r);
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
static cl_status resume_ema(cl_run *r, const char *path)
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

/* How the first part planned its conv backward passes, so that the rest
 * computes what an uninterrupted run computes: into r->conv_paths, NULL
 * when it let the backend choose. */
static cl_status resume_conv_paths(cl_run *r, const char *sp)
{
    /* Four chars per node (one in state files written before the conv
     * implementations were chosen), and room for one more: a longer value
     * shows as too long and the backend refuses it. */
    size_t cap = 4 * (size_t)r->g.n_nodes + 2;
    if (!(r->conv_paths = cl_alloc_zero(cap, "resume: conv paths")))
        return CL_ERR_NOMEM;
    CL_TRY(cl_ckpt_read_meta(sp, CL_STATE_CONV_PATHS, r->conv_paths, cap));
    if (!r->conv_paths[0]) {
        cl_free(r->conv_paths);
        r->conv_paths = NULL;
    }
    return CL_OK;
}

cl_status cl_run_resume(cl_run *r, int64_t *epoch, int64_t *batch,
                        int64_t *step)
{
    const char *path = r->cfg->resume;
    char sp[1024];
    cl_train_state_info in;
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
    CL_TRY(cl_error_wrap(cl_train_state_read_info(sp, &in), "resume: "));
    *epoch = in.epoch;
    *batch = in.next_batch;
    *step = in.step;
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
    CL_TRY(resume_position(r, path, &in, batch));
    if (r->has_ema && r->ema.n_updates < 0) {
        /* The average came from the file: its counters from the state. */
        r->ema.n_averaged = in.ema_averaged;
        r->ema.n_updates = in.ema_updates;
    }
    if (in.steps_per_epoch && in.steps_per_epoch != r->steps_per_epoch)
        cl_log(r->lg, CL_LOG_WARN,
               "resume: an epoch had %lld steps and has %lld here (each "
               "process drops its own remainder); the schedule follows "
               "this run's",
               (long long)in.steps_per_epoch, (long long)r->steps_per_epoch);
    if (*batch >= r->steps_per_epoch * cl_run_accum(r)) {
        (*epoch)++;
        *batch = 0;
    }
    CL_TRY(resume_conv_paths(r, sp));
    cl_log(r->lg, CL_LOG_INFO,
           "resumed from %s: epoch %lld, batch %lld, step %lld", path,
           (long long)*epoch + 1, (long long)*batch, (long long)*step);
    return CL_OK;
}

/* ---- the ranks' common start ------------------------------------------ */

/* After resume: rank 0's optimizer state (momentum / Adam moments and step
 * counts) on every rank. */
static cl_status broadcast_optim(cl_run *r)
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
static cl_status broadcast_ema(cl_run *r)
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

cl_status cl_run_share_start(cl_run *r)
{
    const int resumed = r->cfg->resume[0] != '\0';
    if (r->d)
        CL_TRY(cl_dist_broadcast_graph(r->d, &r->g, 0));
    if (r->d && resumed)
        CL_TRY(broadcast_optim(r));
    if (r->has_ema && !resumed)
        cl_model_ema_set(&r->ema, &r->g); /* rank 0's weights */
    if (r->has_ema && r->d && resumed)
        CL_TRY(broadcast_ema(r));
    return CL_OK;
}

/* The choice travels as floats (four per node; a char each): the one
 * broadcast the dist layer has. */
cl_status cl_run_share_conv_paths(cl_run *r, char **paths)
{
    const size_t n = 4 * (size_t)r->g.n_nodes;
    float *f = cl_alloc(sizeof(float) * (n + 1), "conv paths");
    if (!f)
        return CL_ERR_NOMEM;
    const char *mine = cl_backend_conv_paths(r->be);
    const size_t len = mine ? strlen(mine) : 0;
    for (size_t i = 0; i < n; i++)
        f[i] = i < len ? (float)mine[i] : 0.0f;
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
