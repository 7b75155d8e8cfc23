/* Per-step learning rate: mindcv's linear_(refined_)lr warm-up followed by
 * cosine_decay_(refined_)lr, multi_step_lr or a constant. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "train/lr.h"

#define CL_PI 3.14159265358979323846

/* Bounds that keep epochs * steps_per_epoch far inside int64_t. */
#define CL_LR_MAX_EPOCHS 1000000
#define CL_LR_MAX_STEPS_PER_EPOCH ((int64_t)1 << 40)

cl_lr_config cl_lr_config_default(void)
{
    cl_lr_config c;
    memset(&c, 0, sizeof c);
    c.kind = CL_LR_COSINE;
    c.lr = 0.1;
    c.min_lr = 1e-6;
    c.warmup_epochs = 0;
    c.warmup_factor = 0.0;
    c.decay_epochs = 0;
    c.num_cycles = 1;
    c.cycle_decay = 1.0;
    c.decay_rate = 0.1;
    c.epochs = 90;
    c.steps_per_epoch = 0;
    c.lr_epoch_stair = 0;
    return c;
}

/* Cosine decay length in epochs: decay_epochs, or the rest after warm-up. */
static int decay_len(const cl_lr_config *c)
{
    return c->decay_epochs > 0 ? c->decay_epochs : c->epochs - c->warmup_epochs;
}

cl_status cl_lr_validate(const cl_lr_config *c)
{
    if (c->kind != CL_LR_CONSTANT && c->kind != CL_LR_COSINE &&
        c->kind != CL_LR_MULTI_STEP)
        return cl_error(CL_ERR_CONFIG,
                        "lr.scheduler: unknown kind %d (expected constant, "
                        "cosine_decay or multi_step_decay)",
                        (int)c->kind);
    if (!isfinite(c->lr) || c->lr <= 0.0)
        return cl_error(CL_ERR_CONFIG,
                        "lr.lr: expected a finite value > 0, found %g", c->lr);
    if (c->epochs < 1 || c->epochs > CL_LR_MAX_EPOCHS)
        return cl_error(CL_ERR_CONFIG, "lr.epochs: expected 1..%d, found %d",
                        CL_LR_MAX_EPOCHS, c->epochs);
    if (c->steps_per_epoch < 1 ||
        c->steps_per_epoch > CL_LR_MAX_STEPS_PER_EPOCH)
        return cl_error(CL_ERR_CONFIG,
                        "lr.steps_per_epoch: expected 1..2^40, found %lld",
                        (long long)c->steps_per_epoch);
    if (c->warmup_epochs < 0 || c->warmup_epochs > c->epochs)
        return cl_error(CL_ERR_CONFIG,
                        "lr.warmup_epochs: expected 0..epochs (%d), found %d",
                        c->epochs, c->warmup_epochs);
    if (!isfinite(c->warmup_factor) || c->warmup_factor < 0.0 ||
        c->warmup_factor > 1.0)
        return cl_error(CL_ERR_CONFIG,
                        "lr.warmup_factor: expected 0..1, found %g",
                        c->warmup_factor);
    if (c->kind == CL_LR_COSINE) {
        if (!isfinite(c->min_lr) || c->min_lr < 0.0 || c->min_lr > c->lr)
            return cl_error(CL_ERR_CONFIG,
                            "lr.min_lr: expected 0 <= min_lr <= lr (%g), "
                            "found %g",
                            c->lr, c->min_lr);
        if (c->decay_epochs < 0 || c->decay_epochs > CL_LR_MAX_EPOCHS)
            return cl_error(CL_ERR_CONFIG,
                            "lr.decay_epochs: expected 0..%d, found %d",
                            CL_LR_MAX_EPOCHS, c->decay_epochs);
        if (decay_len(c) < 1)
            return cl_error(CL_ERR_CONFIG,
                            "lr.decay_epochs: cosine decay needs at least one "
                            "epoch after %d warm-up epochs of %d",
                            c->warmup_epochs, c->epochs);
        if (c->num_cycles < 0 || c->num_cycles > CL_LR_MAX_EPOCHS)
            return cl_error(CL_ERR_CONFIG,
                            "lr.num_cycles: expected 0..%d, found %d",
                            CL_LR_MAX_EPOCHS, c->num_cycles);
        if (c->num_cycles > 1 &&
            (!isfinite(c->cycle_decay) || c->cycle_decay <= 0.0 ||
             c->cycle_decay > 1.0))
            return cl_error(CL_ERR_CONFIG,
                            "lr.cycle_decay: expected 0 < cycle_decay <= 1, "
                            "found %g",
                            c->cycle_decay);
    }
    if (c->kind == CL_LR_MULTI_STEP) {
        if (!isfinite(c->decay_rate) || c->decay_rate <= 0.0)
            return cl_error(CL_ERR_CONFIG,
                            "lr.decay_rate: expected a finite value > 0, "
                            "found %g",
                            c->decay_rate);
        if (c->n_milestones < 0 || c->n_milestones > CL_LR_MAX_MILESTONES)
            return cl_error(CL_ERR_CONFIG,
                            "lr.milestones: expected at most %d, found %d",
                            CL_LR_MAX_MILESTONES, c->n_milestones);
        for (int k = 0; k < c->n_milestones; k++)
            if (c->milestones[k] < 0)
                return cl_error(CL_ERR_CONFIG,
                                "lr.milestones[%d]: expected an epoch >= 0, "
                                "found %d",
                                k, c->milestones[k]);
    }
    return CL_OK;
}

static double lr_main(const cl_lr_config *c, int64_t j)
{
    const int64_t spe = c->steps_per_epoch;
    switch (c->kind) {
    case CL_LR_MULTI_STEP: {
        /* bisect_right(sorted(milestones), epoch) = milestones <= epoch. */
        int64_t e = j / spe;
        int k = 0;
        for (int m = 0; m < c->n_milestones; m++)
            k += c->milestones[m] <= e;
        return c->lr * pow(c->decay_rate, (double)k);
    }
    case CL_LR_COSINE: {
        const int de = decay_len(c);
        const int64_t cycles = c->num_cycles > 1 ? c->num_cycles : 1;
        const int64_t cycle_steps = (int64_t)de * spe;
        const int64_t cyc = j / cycle_steps;
        if (cyc >= cycles)
            return c->min_lr;
        const int64_t i = j % cycle_steps;
        double t =
            c->lr_epoch_stair ? (double)(i / spe) : (double)i / (double)spe;
        if (t > de)
            t = de;
        double lr_max = c->lr * pow(c->cycle_decay, (double)cyc);
        double delta = 0.5 * (lr_max - c->min_lr);
        return c->min_lr + delta * (1.0 + cos(CL_PI * t / de));
    }
    case CL_LR_CONSTANT:
    default:
        return c->lr;
    }
}

float cl_lr_at(const cl_lr_config *c, int64_t step)
{
    /* Only the guards against division by zero and overflow; the full check
     * (with its error detail) is cl_lr_validate's job. */
    if (c->steps_per_epoch < 1 ||
        c->steps_per_epoch > CL_LR_MAX_STEPS_PER_EPOCH ||
        c->warmup_epochs < 0 || c->warmup_epochs > CL_LR_MAX_EPOCHS ||
        (c->kind == CL_LR_COSINE &&
         (decay_len(c) < 1 || decay_len(c) > CL_LR_MAX_EPOCHS)))
        return (float)c->lr;
    if (step < 0)
        step = 0;
    const int64_t spe = c->steps_per_epoch;
    const int64_t warm = (int64_t)c->warmup_epochs * spe;
    if (step < warm) {
        /* linear_refined_lr (or linear_lr when stair) with end factor 1. */
        double start = c->lr * c->warmup_factor, end = c->lr;
        double e = c->lr_epoch_stair ? (double)(step / spe)
                                     : (double)step / (double)spe;
        double we = c->warmup_epochs;
        double mult = (e < we ? e : we) / we;
        return (float)(start + mult * (end - start));
    }
    return (float)lr_main(c, step - warm);
}
