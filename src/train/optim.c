/* Momentum SGD and AdamW with PyTorch's update rules, one OpenMP loop per
 * segment, plus the global-norm gradient clipping of clip_grad_norm_. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "train/optim.h"

/* Below this many floats a parallel region costs more than it saves. */
#define CL_OPTIM_PAR_MIN 32768

cl_optim_config cl_optim_config_default(void)
{
    cl_optim_config c;
    memset(&c, 0, sizeof c);
    c.kind = CL_OPT_SGD;
    c.momentum = 0.9;
    c.nesterov = 0;
    c.weight_decay = 1e-4;
    c.filter_bias_and_bn = 1;
    c.embed_weight_decay = -1; /* as filter_bias_and_bn says */
    c.beta1 = 0.9;
    c.beta2 = 0.999;
    c.eps = 1e-8;
    c.backbone_lr_mult = 1.0;
    c.freeze_backbone = 0;
    return c;
}

static int finite_in(double x, double lo, double hi)
{
    return isfinite(x) && x >= lo && x <= hi;
}

static cl_status check_config(const cl_optim_config *c)
{
    if (c->kind != CL_OPT_SGD && c->kind != CL_OPT_ADAMW)
        return cl_error(CL_ERR_CONFIG,
                        "optimizer.kind: %d is neither SGD (0) nor AdamW (1)",
                        (int)c->kind);
    if (!finite_in(c->weight_decay, 0.0, 1e3))
        return cl_error(CL_ERR_CONFIG,
                        "optimizer.weight_decay: expected a finite value >= "
                        "0, found %g",
                        c->weight_decay);
    if (!finite_in(c->backbone_lr_mult, 0.0, 1e6))
        return cl_error(CL_ERR_CONFIG,
                        "optimizer.backbone_lr_mult: expected a finite value "
                        ">= 0, found %g",
                        c->backbone_lr_mult);
    if (c->kind == CL_OPT_SGD) {
        if (!finite_in(c->momentum, 0.0, 1.0) || c->momentum >= 1.0)
            return cl_error(CL_ERR_CONFIG,
                            "optimizer.momentum: expected 0 <= momentum < 1, "
                            "found %g",
                            c->momentum);
        if (c->nesterov && c->momentum == 0.0)
            return cl_error(CL_ERR_CONFIG,
                            "optimizer.nesterov: Nesterov momentum needs "
                            "momentum > 0, found 0");
    } else {
        if (!finite_in(c->beta1, 0.0, 1.0) || c->beta1 >= 1.0)
            return cl_error(CL_ERR_CONFIG,
                            "optimizer.beta1: expected 0 <= beta1 < 1, found "
                            "%g",
                            c->beta1);
        if (!finite_in(c->beta2, 0.0, 1.0) || c->beta2 >= 1.0)
            return cl_error(CL_ERR_CONFIG,
                            "optimizer.beta2: expected 0 <= beta2 < 1, found "
                            "%g",
                            c->beta2);
        if (!finite_in(c->eps, 0.0, 1.0) || c->eps <= 0.0)
            return cl_error(CL_ERR_CONFIG,
                            "optimizer.eps: expected 0 < eps <= 1, found %g",
                            c->eps);
    }
    return CL_OK;
}

static cl_status check_segments(const cl_optim_segment *s, int n,
                                size_t n_floats)
{
    if (n < 1 || !s)
        return cl_error(CL_ERR_ARG,
                        "optimizer: expected at least one segment, found %d",
                        n);
    if (n_floats == 0)
        return cl_error(CL_ERR_ARG, "optimizer: the arena has 0 floats");
    size_t end = 0;
    for (int k = 0; k < n; k++) {
        if (s[k].offset < end)
            return cl_error(CL_ERR_ARG,
                            "optimizer: segment %d starts at %zu, before the "
                            "end %zu of the previous one (segments must be "
                            "sorted and disjoint)",
                            k, s[k].offset, end);
        if (s[k].n > n_floats || s[k].offset > n_floats - s[k].n)
            return cl_error(CL_ERR_ARG,
                            "optimizer: segment %d [%zu, +%zu) runs past the "
                            "arena of %zu floats",
                            k, s[k].offset, s[k].n, n_floats);
        end = s[k].offset + s[k].n;
    }
    return CL_OK;
}

void cl_optim_destroy(cl_optim *opt)
{
    if (!opt)
        return;
    cl_free(opt->segments);
    cl_free(opt->seg_lr_mult);
    cl_free(opt->seg_decay);
    cl_free(opt->seg_frozen);
    cl_free(opt->seg_steps);
    for (int k = 0; k < CL_OPTIM_MAX_STATES; k++)
        cl_free(opt->state[k]);
    memset(opt, 0, sizeof *opt);
}

cl_status cl_optim_create(cl_optim *opt, const cl_optim_config *cfg,
                          const cl_optim_segment *segments, int n_segments,
                          size_t n_floats)
{
    cl_status st;
    size_t bytes;
    memset(opt, 0, sizeof *opt);
    if ((st = check_config(cfg)) != CL_OK)
        return st;
    if ((st = check_segments(segments, n_segments, n_floats)) != CL_OK)
        return st;
    opt->cfg = *cfg;
    opt->n_segments = n_segments;
    opt->n_floats = n_floats;
    size_t ns = (size_t)n_segments;
    opt->segments = cl_alloc(ns * sizeof *segments, "optimizer segments");
    opt->seg_lr_mult = cl_alloc(ns * sizeof(float), "optimizer lr mults");
    opt->seg_decay = cl_alloc(ns * sizeof(float), "optimizer decays");
    opt->seg_frozen = cl_alloc_zero(ns, "optimizer frozen flags");
    opt->seg_steps = cl_alloc_zero(ns * sizeof(int64_t), "optimizer steps");
    if (!opt->segments || !opt->seg_lr_mult || !opt->seg_decay ||
        !opt->seg_frozen || !opt->seg_steps) {
        st = CL_ERR_NOMEM;
        goto fail;
    }
    memcpy(opt->segments, segments, ns * sizeof *segments);
    for (int k = 0; k < n_segments; k++) {
        int f = segments[k].flags;
        int head = (f & CL_PARAM_HEAD) != 0;
        int exempt = cfg->filter_bias_and_bn &&
                     (f & (CL_PARAM_BIAS | CL_PARAM_BN | CL_PARAM_EMBED)) != 0;
        opt->seg_frozen[k] = (unsigned char)(cfg->freeze_backbone && !head);
        opt->seg_lr_mult[k] =
            opt->seg_frozen[k] ? 0.0f
                               : (head ? 1.0f : (float)cfg->backbone_lr_mult);
        opt->seg_decay[k] = exempt ? 0.0f : (float)cfg->weight_decay;
        if ((f & CL_PARAM_EMBED) && cfg->embed_weight_decay >= 0)
            opt->seg_decay[k] = (float)cfg->embed_weight_decay;
    }
    if (cfg->kind == CL_OPT_ADAMW)
        opt->n_states = 2;
    else
        opt->n_states = cfg->momentum > 0.0 ? 1 : 0;
    if ((st = cl_mul_size(n_floats, sizeof(float), &bytes,
                          "optimizer state")) != CL_OK)
        goto fail;
    for (int k = 0; k < opt->n_states; k++) {
        opt->state[k] = cl_alloc_zero(bytes, "optimizer state");
        if (!opt->state[k]) {
            st = CL_ERR_NOMEM;
            goto fail;
        }
    }
    return CL_OK;
fail:
    cl_optim_destroy(opt);
    return st;
}

/* p -= lr * (nesterov ? d + m*buf : buf), buf = m*buf + d, d = g + wd*p:
 * torch.optim.SGD with dampening 0 (its first step's buf = d is the same
 * as m*0 + d). */
static void sgd_segment(float *restrict p, const float *restrict g,
                        float *restrict buf, size_t n, float lr, float wd,
                        float mom, int nesterov)
{
    if (!buf) {
#pragma omp for schedule(static) nowait
        for (size_t i = 0; i < n; i++) {
            float d = g[i] + wd * p[i];
            p[i] = p[i] - lr * d;
        }
    } else if (nesterov) {
#pragma omp for schedule(static) nowait
        for (size_t i = 0; i < n; i++) {
            float d = g[i] + wd * p[i];
            float b = mom * buf[i] + d;
            buf[i] = b;
            p[i] = p[i] - lr * (d + mom * b);
        }
    } else {
#pragma omp for schedule(static) nowait
        for (size_t i = 0; i < n; i++) {
            float d = g[i] + wd * p[i];
            float b = mom * buf[i] + d;
            buf[i] = b;
            p[i] = p[i] - lr * b;
        }
    }
}

/* torch.optim.AdamW: p *= decay; m, v moving averages; p -= step_size * m /
 * (sqrt(v) / sqrt(bc2) + eps) with step_size = lr / bc1. */
static void adamw_segment(float *restrict p, const float *restrict g,
                          float *restrict m, float *restrict v, size_t n,
                          float decay, float b1, float b2, float step_size,
                          float bc2_sqrt, float eps)
{
    const float c1 = 1.0f - b1, c2 = 1.0f - b2;
#pragma omp for schedule(static) nowait
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float pi = p[i] * decay;
        float mi = m[i] * b1 + c1 * gi;
        float vi = v[i] * b2 + c2 * (gi * gi);
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = pi - step_size * (mi / denom);
    }
}

cl_status cl_optim_step(cl_optim *opt, float *params, const float *grads,
                        float lr)
{
    if (!isfinite(lr) || lr < 0.0f)
        return cl_error(CL_ERR_ARG,
                        "optimizer step: learning rate must be finite and >= "
                        "0, found %g",
                        (double)lr);
    const cl_optim_config *c = &opt->cfg;
    for (int k = 0; k < opt->n_segments; k++)
        if (!opt->seg_frozen[k])
            opt->seg_steps[k]++;
    opt->n_steps++;
    const int n_seg = opt->n_segments;
    const int adamw = c->kind == CL_OPT_ADAMW;
    const float mom = (float)c->momentum;
    const float b1 = (float)c->beta1, b2 = (float)c->beta2;
    const float eps = (float)c->eps;
#pragma omp parallel if (opt->n_floats >= CL_OPTIM_PAR_MIN)
    for (int k = 0; k < n_seg; k++) {
        if (opt->seg_frozen[k])
            continue;
        const cl_optim_segment *s = &opt->segments[k];
        /* Scalars in double as PyTorch's Python floats, then f32. */
        double lr_s = (double)lr * (double)opt->seg_lr_mult[k];
        double wd = (double)opt->seg_decay[k];
        float *p = params + s->offset;
        const float *g = grads + s->offset;
        if (!adamw) {
            float *buf = opt->n_states ? opt->state[0] + s->offset : NULL;
            sgd_segment(p, g, buf, s->n, (float)lr_s, (float)wd, mom,
                        c->nesterov);
        } else {
            double t = (double)opt->seg_steps[k];
            double bc1 = 1.0 - pow(c->beta1, t);
            double bc2 = 1.0 - pow(c->beta2, t);
            adamw_segment(p, g, opt->state[0] + s->offset,
                          opt->state[1] + s->offset, s->n,
                          (float)(1.0 - lr_s * wd), b1, b2, (float)(lr_s / bc1),
                          (float)sqrt(bc2), eps);
        }
    }
    return CL_OK;
}

cl_status cl_optim_state(cl_optim *opt, int k, float **ptr, size_t *n)
{
    if (k < 0 || k >= opt->n_states)
        return cl_error(CL_ERR_ARG, "optimizer state %d: expected 0 <= k < %d",
                        k, opt->n_states);
    *ptr = opt->state[k];
    *n = opt->n_floats;
    return CL_OK;
}

const char *cl_optim_state_name(const cl_optim *opt, int k)
{
    if (k < 0 || k >= opt->n_states)
        return "";
    if (opt->cfg.kind == CL_OPT_SGD)
        return "momentum_buffer";
    return k == 0 ? "exp_avg" : "exp_avg_sq";
}

cl_status cl_optim_get_steps(const cl_optim *opt, int64_t *seg_steps, int n,
                             int64_t *n_steps)
{
    if (n != opt->n_segments)
        return cl_error(CL_ERR_ARG,
                        "optimizer steps: expected %d segments, found %d",
                        opt->n_segments, n);
    memcpy(seg_steps, opt->seg_steps, (size_t)n * sizeof *seg_steps);
    if (n_steps)
        *n_steps = opt->n_steps;
    return CL_OK;
}

cl_status cl_optim_set_steps(cl_optim *opt, const int64_t *seg_steps, int n,
                             int64_t n_steps)
{
    if (n != opt->n_segments)
        return cl_error(CL_ERR_ARG,
                        "optimizer steps: expected %d segments, found %d",
                        opt->n_segments, n);
    if (n_steps < 0)
        return cl_error(CL_ERR_ARG, "optimizer steps: negative step count %lld",
                        (long long)n_steps);
    for (int k = 0; k < n; k++)
        if (seg_steps[k] < 0 || seg_steps[k] > n_steps)
            return cl_error(CL_ERR_ARG,
                            "optimizer steps: segment %d has %lld steps, "
                            "expected 0..%lld",
                            k, (long long)seg_steps[k], (long long)n_steps);
    memcpy(opt->seg_steps, seg_steps, (size_t)n * sizeof *seg_steps);
    opt->n_steps = n_steps;
    return CL_OK;
}

cl_status cl_optim_reset_segment(cl_optim *opt, int seg)
{
    if (seg < 0 || seg >= opt->n_segments)
        return cl_error(CL_ERR_ARG, "optimizer: segment %d out of range 0..%d",
                        seg, opt->n_segments - 1);
    const cl_optim_segment *s = &opt->segments[seg];
    for (int k = 0; k < opt->n_states; k++)
        memset(opt->state[k] + s->offset, 0, s->n * sizeof(float));
    opt->seg_steps[seg] = 0;
    return CL_OK;
}

/* Sum of squares over segments whose skip flag (if any) is clear. */
static double sum_squares(const float *grads, const cl_optim_segment *segs,
                          int n_segs, const unsigned char *skip)
{
    size_t total = 0;
    for (int k = 0; k < n_segs; k++)
        total += segs[k].n;
    double sum = 0.0;
#pragma omp parallel reduction(+ : sum) if (total >= CL_OPTIM_PAR_MIN)
    for (int k = 0; k < n_segs; k++) {
        if (skip && skip[k])
            continue;
        const float *g = grads + segs[k].offset;
        const size_t n = segs[k].n, nb = n / 8;
        /* Eight independent accumulators: vectorizable without
         * reassociating, and the same order for the same partition. */
        double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma omp for schedule(static) nowait
        for (size_t b = 0; b < nb; b++)
            for (int l = 0; l < 8; l++) {
                double x = g[8 * b + (size_t)l];
                acc[l] += x * x;
            }
#pragma omp for schedule(static) nowait
        for (size_t i = 8 * nb; i < n; i++)
            acc[0] += (double)g[i] * (double)g[i];
        sum += ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
               ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
    return sum;
}

static void scale_segments(float *grads, const cl_optim_segment *segs,
                           int n_segs, const unsigned char *skip, float c)
{
    size_t total = 0;
    for (int k = 0; k < n_segs; k++)
        total += segs[k].n;
#pragma omp parallel if (total >= CL_OPTIM_PAR_MIN)
    for (int k = 0; k < n_segs; k++) {
        if (skip && skip[k])
            continue;
        float *g = grads + segs[k].offset;
        const size_t n = segs[k].n;
#pragma omp for schedule(static) nowait
        for (size_t i = 0; i < n; i++)
            g[i] *= c;
    }
}

/* clip_grad_norm_'s rule: coefficient max_norm / (norm + 1e-6), applied
 * only when below 1 (torch clamps it at 1). */
static double clip(float *grads, const cl_optim_segment *segs, int n_segs,
                   const unsigned char *skip, double max_norm)
{
    double norm = sqrt(sum_squares(grads, segs, n_segs, skip));
    if (!isfinite(norm) || !(max_norm > 0.0))
        return norm;
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0)
        scale_segments(grads, segs, n_segs, skip, (float)coef);
    return norm;
}

double cl_grad_global_norm(const float *grads, const cl_optim_segment *segs,
                           int n_segs)
{
    return sqrt(sum_squares(grads, segs, n_segs, NULL));
}

double cl_grad_clip(float *grads, const cl_optim_segment *segs, int n_segs,
                    double max_norm)
{
    return clip(grads, segs, n_segs, NULL, max_norm);
}

double cl_optim_grad_norm(const cl_optim *opt, const float *grads)
{
    return sqrt(
        sum_squares(grads, opt->segments, opt->n_segments, opt->seg_frozen));
}

double cl_optim_clip_grad(const cl_optim *opt, float *grads, double max_norm)
{
    return clip(grads, opt->segments, opt->n_segments, opt->seg_frozen,
                max_norm);
}

void cl_grad_scale(float *grads, size_t n, float s)
{
#pragma omp parallel for schedule(static) if (n >= CL_OPTIM_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        grads[i] *= s;
}

int cl_grad_all_finite(const float *grads, size_t n)
{
    int bad = 0;
#pragma omp parallel for schedule(static)                                      \
    reduction(|                                                                \
              : bad) if (n >= CL_OPTIM_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        bad |= !isfinite(grads[i]);
    return !bad;
}
