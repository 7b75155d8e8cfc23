/* Mixed precision step times side by side: ResNet training plans at
 * amp_level O0, O1 and O2 live in one process on equal weights and
 * synthetic data, and their full training steps (forward, backward,
 * momentum-SGD update, weight re-rounding) interleave, the order rotated
 * every round.  On a machine whose free CPU comes and goes, adjacent
 * steps see the same conditions, so the per-round ratios of step times
 * are what is reported (median and spread), not absolute speed.  Peak
 * memory is not measured here (all plans share the process): bench/amp.sh
 * takes it from one `classic bench --amp` process per level. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "classic/status.h"
#include "core/error.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/timer.h"
#include "graph/graph.h"
#include "models/resnet.h"

enum { MAX_ROUNDS = 1000 };

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One training step: forward, backward, v = 0.9 v + g, p -= 0.01 v. */
static cl_status step(cl_backend *be, cl_graph *g, float *mom, const float *x,
                      const int32_t *labels)
{
    float loss;
    CL_TRY(cl_backend_set_input(be, x, labels, NULL));
    CL_TRY(cl_backend_forward(be, 1, &loss));
    CL_TRY(cl_backend_backward(be));
    long long n = (long long)g->n_param_floats;
    float *p = g->params;
    const float *gr = g->grads;
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < n; i++) {
        mom[i] = 0.9f * mom[i] + gr[i];
        p[i] -= 0.01f * mom[i];
    }
    if (!isfinite(loss))
        return cl_error(CL_ERR_NUMERIC, "amp_bench: loss %g", (double)loss);
    return cl_backend_sync_params(be);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr,
                "usage: amp_bench DEPTH SIZE BATCH ROUNDS [LEVELS...]\n"
                "  e.g. amp_bench 50 224 16 6 0 2 (ResNet-50, ImageNet stem, "
                "10 classes)\n");
        return 2;
    }
    int depth = atoi(argv[1]), size = atoi(argv[2]), batch = atoi(argv[3]);
    int rounds = atoi(argv[4]);
    int levels[3] = {0, 2, 0}, nl = 2;
    if (argc > 5) {
        nl = 0;
        for (int i = 5; i < argc && nl < 3; i++)
            levels[nl++] = atoi(argv[i]);
    }
    if (rounds < 1 || rounds > MAX_ROUNDS || batch < 1 || size < 8) {
        fprintf(stderr, "amp_bench: bad arguments\n");
        return 2;
    }
    cl_resnet_config c = cl_resnet_config_default();
    c.depth = depth;
    c.num_classes = 10;
    cl_graph g[3];
    cl_backend *be[3] = {NULL, NULL, NULL};
    float *mom[3] = {NULL, NULL, NULL};
    float *x = NULL;
    int32_t *labels = NULL;
    static double t[3][MAX_ROUNDS], ratio[3][MAX_ROUNDS];
    cl_status s = CL_OK;
    memset(g, 0, sizeof g);
    for (int k = 0; k < nl; k++) {
        cl_backend_opts o = {.amp_level = levels[k]};
        if ((s = cl_graph_init(&g[k], batch)) != CL_OK ||
            (s = cl_resnet_build(&g[k], &c, size, size, 0, 0.0f)) != CL_OK ||
            (s = cl_resnet_init(&g[k], &c, 1)) != CL_OK ||
            (s = cl_backend_create(&be[k], "onednn", &g[k], CL_PLAN_TRAIN,
                                   &o)) != CL_OK)
            goto fail;
        mom[k] = cl_alloc_zero(g[k].n_param_floats * sizeof(float), "mom");
        if (!mom[k]) {
            s = CL_ERR_NOMEM;
            goto fail;
        }
    }
    size_t nx = (size_t)cl_graph_numel(&g[0], g[0].input);
    x = cl_alloc(nx * sizeof(float), "input");
    labels = cl_alloc((size_t)batch * sizeof(int32_t), "labels");
    if (!x || !labels) {
        s = CL_ERR_NOMEM;
        goto fail;
    }
    cl_rng r;
    cl_rng_init(&r, 1234, 0);
    for (size_t i = 0; i < nx; i++)
        x[i] = (float)cl_rng_normal(&r);
    for (int i = 0; i < batch; i++)
        labels[i] = (int32_t)cl_rng_below(&r, 10);
    /* Warm-up: primitive first runs, page faults of the arenas. */
    for (int k = 0; k < nl; k++)
        if ((s = step(be[k], &g[k], mom[k], x, labels)) != CL_OK)
            goto fail;
    for (int i = 0; i < rounds; i++)
        for (int j = 0; j < nl; j++) {
            int k = (i + j) % nl;
            double t0 = cl_time_now();
            if ((s = step(be[k], &g[k], mom[k], x, labels)) != CL_OK)
                goto fail;
            t[k][i] = cl_time_now() - t0;
        }
    printf("amp_bench: resnet%d, %dx%d, batch %d, %d rounds\n", depth, size,
           size, batch, rounds);
    for (int k = 0; k < nl; k++) {
        double tk[MAX_ROUNDS];
        for (int i = 0; i < rounds; i++) {
            ratio[k][i] = t[0][i] / t[k][i];
            tk[i] = t[k][i];
        }
        double lo = ratio[k][0], hi = ratio[k][0];
        for (int i = 1; i < rounds; i++) {
            lo = ratio[k][i] < lo ? ratio[k][i] : lo;
            hi = ratio[k][i] > hi ? ratio[k][i] : hi;
        }
        double mt = median(tk, rounds);
        double mr = median(ratio[k], rounds);
        printf("O%d  median step %.3f s (%.2f img/s), speed vs O%d: median "
               "%.2fx (range %.2f-%.2f)\n",
               levels[k], mt, batch / mt, levels[0], mr, lo, hi);
        printf("amp_bench: level=O%d step_s=%.4f img_s=%.3f ratio=%.3f "
               "ratio_lo=%.3f ratio_hi=%.3f\n",
               levels[k], mt, batch / mt, mr, lo, hi);
    }
fail:
    if (s != CL_OK)
        fprintf(stderr, "amp_bench: %s\n", cl_last_error());
    for (int k = 0; k < 3; k++) {
        cl_backend_destroy(be[k]);
        if (k < nl)
            cl_graph_free(&g[k]);
        cl_free(mom[k]);
    }
    cl_free(x);
    cl_free(labels);
    return s == CL_OK ? 0 : 1;
}
