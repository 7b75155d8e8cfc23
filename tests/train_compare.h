/* Comparing two training runs, for the data-parallel tests: per-step
 * losses from metrics.jsonl and the final weights in allclose units.
 * Static functions: each test program that includes it uses both. */
#ifndef CL_TESTS_TRAIN_COMPARE_H
#define CL_TESTS_TRAIN_COMPARE_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "harness.h"
#include "io/safetensors.h"

/* How far two checkpoints are from numpy's allclose(a, b, rtol, atol)
 * over every f32 tensor (params and BN running statistics): the largest
 * |a - b| / (atol + rtol |a|), so <= 1 passes.  An absolute part is
 * needed because biases start at 0: after a few steps they are ~1e-3 and
 * one rounding step of their update is most of their relative error.  -1
 * if the files do not hold the same tensors. */
#define RTOL 1e-5
#define ATOL 1e-6
static double weights_diff(const char *a, const char *b, char *worst, size_t wn)
{
    cl_st_file *fa = NULL, *fb = NULL;
    double out = -1;
    float *va = NULL, *vb = NULL;
    if (cl_st_open(&fa, a) != CL_OK || cl_st_open(&fb, b) != CL_OK ||
        cl_st_count(fa) != cl_st_count(fb) || cl_st_count(fa) == 0)
        goto done;
    out = 0;
    int n_f32 = 0;
    for (size_t i = 0; i < cl_st_count(fa); i++) {
        cl_st_dtype ta, tb;
        cl_shape sa, sb;
        cl_st_info(fa, i, &ta, &sa);
        cl_st_info(fb, i, &tb, &sb);
        if (strcmp(cl_st_name(fa, i), cl_st_name(fb, i)) != 0 || ta != tb ||
            cl_shape_numel(&sa) != cl_shape_numel(&sb)) {
            out = -1;
            goto done;
        }
        if (ta != CL_ST_F32)
            continue;
        size_t n = (size_t)cl_shape_numel(&sa);
        va = cl_alloc(n * sizeof(float), "a");
        vb = cl_alloc(n * sizeof(float), "b");
        if (!va || !vb || cl_st_read_f32(fa, i, va, n) != CL_OK ||
            cl_st_read_f32(fb, i, vb, n) != CL_OK) {
            out = -1;
            goto done;
        }
        double e = 0;
        for (size_t j = 0; j < n; j++) {
            double q = fabs(va[j] - vb[j]) / (ATOL + RTOL * fabs(va[j]));
            e = q > e ? q : e;
        }
        if (e > out) {
            out = e;
            snprintf(worst, wn, "%s", cl_st_name(fa, i));
        }
        n_f32++;
        cl_free(va);
        cl_free(vb);
        va = vb = NULL;
    }
    if (n_f32 < 40) /* resnet18 and swin_micro have 100+ f32 tensors */
        out = -1;
done:
    cl_free(va);
    cl_free(vb);
    cl_st_close(fa);
    cl_st_close(fb);
    return out;
}

/* Per-step losses and final weights (<arch>-last.safetensors) of two
 * runs; returns the largest relative loss difference (-1 when the step
 * counts differ) and the weight difference in *wdiff. */
static double compare_runs_of(const char *arch, const char *dir_a,
                              const char *dir_b, int steps, double *wdiff)
{
    char pa[1024], pb[1024], worst[256] = "";
    double la[64], lb[64];
    int64_t sa[64], sb[64];
    snprintf(pa, sizeof pa, "%s/metrics.jsonl", dir_a);
    snprintf(pb, sizeof pb, "%s/metrics.jsonl", dir_b);
    int na = cl_test_read_losses(pa, la, sa, 64);
    int nb = cl_test_read_losses(pb, lb, sb, 64);
    double lmax = na == steps && nb == steps ? 0 : -1;
    for (int i = 0; lmax >= 0 && i < steps; i++) {
        double e = fabs(la[i] - lb[i]) / fabs(la[i]);
        lmax = e > lmax ? e : lmax;
        fprintf(stderr, "  step %d: loss %.7f vs %.7f\n", i + 1, la[i], lb[i]);
    }
    snprintf(pa, sizeof pa, "%s/%s-last.safetensors", dir_a, arch);
    snprintf(pb, sizeof pb, "%s/%s-last.safetensors", dir_b, arch);
    *wdiff = weights_diff(pa, pb, worst, sizeof worst);
    fprintf(stderr,
            "  %d/%d steps, max loss rel diff %.3g; weights at %.3g of the "
            "allclose tolerance (worst: %s)\n",
            na, nb, lmax, *wdiff, worst);
    return lmax;
}

/* compare_runs_of resnet18 runs. */
static double compare_runs(const char *dir_a, const char *dir_b, int steps,
                           double *wdiff)
{
    return compare_runs_of("resnet18", dir_a, dir_b, steps, wdiff);
}

#endif
