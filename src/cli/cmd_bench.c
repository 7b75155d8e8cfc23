/* `classic bench`: training and inference throughput of a ResNet on
 * synthetic data, with achieved GFLOPS, MFU against the peak of the
 * instructions oneDNN computes with here, and peak RSS. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "backend/backend.h"
#include "backend/onednn_info.h"
#include "classic/classic.h"
#include "cli/cli.h"
#include "core/bandwidth.h"
#include "core/cpu_peak.h"
#include "train/quantize.h"
#include "core/error.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/timer.h"
#include "graph/graph.h"
#include "models/arch.h"

typedef struct bench_opts {
    const char *arch, *stem, *mode, *backend;
    int batch, size, classes, threads, steps, warmup;
    int amp; /* amp_level: 0 f32, 1 bf16 conv/matmul, 2 bf16 activations */
    int direct_convs;      /* --convs direct: cl_backend_opts.direct_convs */
    int measured_convs;    /* --convs measured: cl_backend_opts.autotune */
    double bw_gbs;         /* --profile: STREAM triad, GB/s */
    int profile;           /* --profile on: time each kind of plan step */
    const char *precision; /* --precision (infer): sets amp, checked */
    int int8;              /* --precision int8: calibrated on x, int8 plan */
    int amp_given;
} bench_opts;

static void bench_usage(FILE *f)
{
    fprintf(
        f,
        "usage: classic bench [--arch resnet50] [--batch 32] [--size 32]\n"
        "                     [--stem imagenet|cifar|cifar_pool] "
        "[--classes 10]\n"
        "                     (or train's names: --model, --batch_size,\n"
        "                     --image_size, --num_classes)\n"
        "                     [--threads 2] [--steps 10] [--warmup 3]\n"
        "                     [--mode train|infer|both]\n"
        "                     [--backend onednn|ref] [--amp O0|O1|O2]\n"
        "                     [--precision f32|bf16|int8]\n"
        "                     [--convs rewrite|direct|measured] "
        "[--profile on|off]\n\n"
        "Times full training steps (forward, backward, momentum-SGD "
        "update)\nand inference on synthetic data after warm-up; prints "
        "img/s, achieved\nGFLOPS (training counts 3x the forward), MFU "
        "against the peak of the\ninstructions oneDNN runs at its "
        "instruction set (f32 FMA, bf16 dot\nproducts or AMX tiles; "
        "measured with the same threads, AMX computed\nat the measured "
        "clock), and peak RSS.  The last\nlines are `bench: key=value "
        "...` for scripts.  --convs direct runs every conv as\noneDNN's "
        "convolution primitives; the default (rewrite) computes\nsome "
        "shapes another way (weight gradients of small outputs as\n"
        "im2col + matmul, backward data of strided 1x1 convs on the "
        "stride\ngrid); measured (training) times both ways, and each of "
        "oneDNN's\nimplementations of every conv primitive, when it plans, "
        "as\n`autotune: true` does in training, and keeps the fastest per "
        "shape.\n--profile on (onednn) also prints where a timed "
        "step's time\ngoes: each kind of plan step (\"inner product "
        "forward\", ...) with its op,\nin ms per timed step; each step "
        "then waits for its primitive, so the\nprofiled run is a little "
        "slower than an unprofiled one.\n--precision (with --mode infer) runs "
        "inference as predict, eval and the API\ndo at that precision "
        "(bf16: the O2 inference plan; int8: the network quantized\nwith "
        "min-max scales of the timed batch, its MFU against the CPU's int8 "
        "peak),\nrefused where they would refuse it; --amp is the training "
        "side's switch.\n");
}

static int parse_int(const char *name, const char *v, int lo, int hi, int *out)
{
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) {
        fprintf(stderr, "classic bench: %s '%s' is not an integer in %d..%d\n",
                name, v, lo, hi);
        return 1;
    }
    *out = (int)x;
    return 0;
}

/* "O0" | "O1" | "O2" -> 0..2 (the amp_level config values). */
static int parse_amp(const char *v, int *out)
{
    if (strlen(v) != 2 || v[0] != 'O' || v[1] < '0' || v[1] > '2') {
        fprintf(stderr, "classic bench: --amp '%s' is not O0, O1 or O2\n", v);
        return 1;
    }
    *out = v[1] - '0';
    return 0;
}

static int parse_args(int argc, char **argv, bench_opts *o)
{
    o->arch = "resnet50";
    o->stem = "imagenet";
    o->mode = "both";
    o->backend = "onednn";
    o->batch = 32;
    o->size = 32;
    o->classes = 10;
    o->threads = 0;
    o->steps = 10;
    o->warmup = 3;
    o->amp = 0;
    o->direct_convs = 0;
    o->measured_convs = 0;
    o->profile = 0;
    o->bw_gbs = 0.0;
    o->precision = NULL;
    o->int8 = 0;
    o->amp_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "classic bench: %s needs a value\n", k);
            return 1;
        }
        const char *v = argv[++i];
        int bad = 0;
        /* train's key names for the same things (batch_size, image_size,
         * num_classes, model) are taken as well as bench's short ones. */
        static const char *const alias[][2] = {{"--batch_size", "--batch"},
                                               {"--image_size", "--size"},
                                               {"--num_classes", "--classes"},
                                               {"--model", "--arch"}};
        for (size_t a = 0; a < sizeof alias / sizeof alias[0]; a++)
            if (strcmp(k, alias[a][0]) == 0)
                k = alias[a][1];
        if (strcmp(k, "--arch") == 0)
            o->arch = v;
        else if (strcmp(k, "--stem") == 0)
            o->stem = v;
        else if (strcmp(k, "--mode") == 0)
            o->mode = v;
        else if (strcmp(k, "--backend") == 0)
            o->backend = v;
        else if (strcmp(k, "--amp") == 0) {
            bad = parse_amp(v, &o->amp);
            o->amp_given = 1;
        } else if (strcmp(k, "--precision") == 0)
            o->precision = v;
        else if (strcmp(k, "--convs") == 0) {
            o->direct_convs = strcmp(v, "direct") == 0;
            o->measured_convs = strcmp(v, "measured") == 0;
            if (!o->direct_convs && !o->measured_convs &&
                strcmp(v, "rewrite") != 0) {
                fprintf(stderr,
                        "classic bench: --convs '%s' is not rewrite, direct or "
                        "measured\n",
                        v);
                return 1;
            }
        } else if (strcmp(k, "--profile") == 0) {
            o->profile = strcmp(v, "on") == 0;
            if (!o->profile && strcmp(v, "off") != 0) {
                fprintf(stderr,
                        "classic bench: --profile '%s' is not on or off\n", v);
                return 1;
            }
        } else if (strcmp(k, "--batch") == 0)
            bad = parse_int(k, v, 1, 4096, &o->batch);
        else if (strcmp(k, "--size") == 0)
            bad = parse_int(k, v, 8, 1024, &o->size);
        else if (strcmp(k, "--classes") == 0)
            bad = parse_int(k, v, 2, 100000, &o->classes);
        else if (strcmp(k, "--threads") == 0)
            bad = parse_int(k, v, 0, 1024, &o->threads);
        else if (strcmp(k, "--steps") == 0)
            bad = parse_int(k, v, 1, 1000000, &o->steps);
        else if (strcmp(k, "--warmup") == 0)
            bad = parse_int(k, v, 0, 1000000, &o->warmup);
        else {
            fprintf(stderr, "classic bench: unknown option '%s'\n\n", k);
            bench_usage(stderr);
            return 1;
        }
        if (bad)
            return 1;
    }
    if (strcmp(o->mode, "train") && strcmp(o->mode, "infer") &&
        strcmp(o->mode, "both")) {
        fprintf(stderr,
                "classic bench: --mode '%s' is not train, infer or both\n",
                o->mode);
        return 1;
    }
    if (o->precision) {
        cl_precision p;
        cl_status st = cl_precision_parse(o->precision, &p);
        if (st == CL_OK && strcmp(o->mode, "infer") != 0)
            st = cl_error(CL_ERR_ARG, "--precision is inference's switch: "
                                      "give --mode infer (training takes "
                                      "--amp)");
        if (st == CL_OK && o->amp_given)
            st = cl_error(CL_ERR_ARG, "--precision and --amp both set the "
                                      "inference precision: give one");
        if (st == CL_OK)
            st = cl_precision_check(o->backend, p);
        if (st != CL_OK) {
            cl_cli_fail("bench", st);
            return 1;
        }
        o->amp = cl_precision_amp_level(p);
        o->int8 = p == CL_PRECISION_INT8;
    }
    return 0;
}

static double peak_rss_mb(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return (double)ru.ru_maxrss / 1024.0; /* Linux: kilobytes */
}

/* Momentum SGD over the whole param arena in one parallel loop (as
 * torch.optim.SGD, dampening 0, no weight decay): v = m v + g, p -= lr v.
 * One loop rather than one per tensor keeps the update to a single
 * OpenMP fork/join per step. */
static void sgd_step(float *p, float *v, const float *g, size_t n, float lr,
                     float m)
{
    long long nn = (long long)n;
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < nn; i++) {
        v[i] = m * v[i] + g[i];
        p[i] -= lr * v[i];
    }
}

typedef struct bench_result {
    double img_s, step_s, gflops;
    double t_fwd, t_bwd, t_upd; /* seconds per step in each phase */
} bench_result;

/* Whether a step kind is arithmetic-bound (its GB/s says little). */
static int computes(const char *what)
{
    return strstr(what, "convolution") || strstr(what, "matmul") ||
           strstr(what, "inner product");
}

/* The step kinds timed in be since the warm-up, per timed step; the
 * memory-bound ones with the GB/s their arguments' bytes make and its
 * share of STREAM's triad (bw_gbs, 0 if unmeasured). */
static void print_profile(const cl_backend *be, int train, int steps,
                          double bw_gbs)
{
    enum { ROWS = 40 };
    cl_dnnl_prof_row rows[ROWS];
    const int n = cl_dnnl_profile_rows(be, rows, ROWS);
    double total = 0.0;
    for (int k = 0; k < n; k++)
        total += rows[k].seconds;
    printf("profile   %s, ms per timed step by kind of plan step (the %d "
           "largest):\n",
           train ? "train" : "infer", n);
    for (int k = 0; k < n; k++) {
        char bw[64] = "";
        double gbs =
            rows[k].seconds > 0.0 ? rows[k].bytes / rows[k].seconds / 1e9 : 0.0;
        if (!computes(rows[k].what) && rows[k].bytes > 0.0)
            snprintf(bw, sizeof bw, "  [%.1f GB/s, %.0f%% of triad]", gbs,
                     bw_gbs > 0.0 ? 100.0 * gbs / bw_gbs : 0.0);
        printf(
            "  %9.2f ms %5.1f%%  %s (%s)%s\n", 1e3 * rows[k].seconds / steps,
            total > 0.0 ? 100.0 * rows[k].seconds / total : 0.0, rows[k].what,
            rows[k].op >= 0 ? cl_op_name((cl_op_kind)rows[k].op) : "plan", bw);
    }
}

static cl_status run_mode(const bench_opts *o, const cl_arch *cfg, int train,
                          const float *x, const int32_t *labels,
                          bench_result *res, int64_t *macs)
{
    cl_status st = CL_OK;
    cl_graph g;
    cl_backend *be = NULL;
    float *mom = NULL;
    int have_graph = 0;
    st = cl_graph_init(&g, o->batch);
    if (st != CL_OK)
        goto fail;
    have_graph = 1;
    st = cl_arch_build(&g, cfg, o->size, o->size, 0, 0.0f);
    if (st != CL_OK)
        goto fail;
    st = cl_arch_init(&g, cfg, 1);
    if (st != CL_OK)
        goto fail;
    *macs = cl_graph_macs(&g);
    if (!train && o->int8) {
        /* Min-max scales from the timed batch itself: only the speed of
         * the int8 plan means anything here, not its numbers. */
        const float *xs[1] = {x};
        st = cl_quant_calibrate(&g, xs, 1, NULL, o->threads);
        if (st != CL_OK)
            goto fail;
    }
    cl_backend_opts bo = {.threads = o->threads,
                          .amp_level = o->amp,
                          .direct_convs = o->direct_convs,
                          .autotune = o->measured_convs,
                          .int8 = !train && o->int8};
    double tp = cl_time_now();
    st = cl_backend_create(&be, o->backend, &g,
                           train ? CL_PLAN_TRAIN : CL_PLAN_INFER, &bo);
    if (st != CL_OK)
        goto fail;
    if (train && o->measured_convs) {
        int measured = 0, rewritten = 0;
        cl_backend_tune_counts(be, &measured, &rewritten);
        printf("autotune  %.1f s: %d of %d conv backward passes the other "
               "way; %d conv primitives (per shape) another implementation "
               "than oneDNN's first\n",
               cl_time_now() - tp, rewritten, measured,
               cl_backend_tune_impls(be));
    }
    if (strcmp(o->backend, "onednn") == 0) {
        char impls[1024];
        cl_dnnl_conv_impls(be, impls, sizeof impls);
        if (impls[0])
            printf("convs     %s: %s\n", train ? "train" : "infer", impls);
    }
    if (train) {
        mom = cl_alloc_zero(sizeof(float) * g.n_param_floats, "momentum");
        if (!mom) {
            st = CL_ERR_NOMEM;
            goto fail;
        }
    }
    double t0 = 0.0, tf = 0.0, tb = 0.0, tu = 0.0;
    if (o->profile && cl_dnnl_profile_start(be) != 0) {
        st = cl_error(CL_ERR_UNSUPPORTED,
                      "--profile times the onednn backend's plan "
                      "steps; the %s backend has none",
                      o->backend);
        goto fail;
    }
    for (int s = 0; s < o->warmup + o->steps; s++) {
        if (s == o->warmup) {
            if (o->profile)
                cl_dnnl_profile_start(be);
            t0 = cl_time_now();
        }
        float loss;
        double a = cl_time_now();
        st = cl_backend_set_input(be, x, labels, NULL);
        if (st == CL_OK)
            st = cl_backend_forward(be, train, &loss);
        double b = cl_time_now();
        if (st == CL_OK && train)
            st = cl_backend_backward(be);
        double c = cl_time_now();
        if (st == CL_OK && train) {
            sgd_step(g.params, mom, g.grads, g.n_param_floats, 0.01f, 0.9f);
            st = cl_backend_sync_params(be);
        }
        double e = cl_time_now();
        if (st != CL_OK)
            goto fail;
        if (s >= o->warmup) {
            tf += b - a;
            tb += c - b;
            tu += e - c;
        }
        if (train && !isfinite(loss)) {
            st = cl_error(CL_ERR_NUMERIC, "bench: loss is %g at step %d",
                          (double)loss, s);
            goto fail;
        }
    }
    double dt = cl_time_now() - t0;
    res->step_s = dt / o->steps;
    res->img_s = (double)o->batch * o->steps / dt;
    res->gflops = (train ? 3.0 : 1.0) * 2.0 * (double)*macs * res->img_s / 1e9;
    res->t_fwd = tf / o->steps;
    res->t_bwd = tb / o->steps;
    res->t_upd = tu / o->steps;
    if (o->profile)
        print_profile(be, train, o->steps, o->bw_gbs);
fail:
    cl_free(mom);
    cl_backend_destroy(be);
    if (have_graph)
        cl_graph_free(&g);
    return st;
}

int cl_cmd_bench(int argc, char **argv)
{
    bench_opts o;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            bench_usage(stdout);
            return 0;
        }
    if (parse_args(argc, argv, &o))
        return 2;
    cl_arch cfg;
    cl_status st = cl_arch_parse(o.arch, o.stem, &cfg);
    if (st != CL_OK)
        return cl_cli_fail("bench", st);
    cl_arch_set_io(&cfg, 3, o.classes);
    if (o.threads > 0)
        omp_set_num_threads(o.threads);
    int threads = omp_get_max_threads();

    size_t nx = (size_t)o.batch * 3 * (size_t)o.size * (size_t)o.size;
    float *x = cl_alloc(nx * sizeof(float), "bench input");
    int32_t *labels = cl_alloc(sizeof(int32_t) * (size_t)o.batch, "labels");
    if (!x || !labels) {
        cl_free(x);
        cl_free(labels);
        return cl_cli_fail("bench", CL_ERR_NOMEM);
    }
    cl_rng r;
    cl_rng_init(&r, 1234, 0);
    for (size_t i = 0; i < nx; i++)
        x[i] = (float)cl_rng_normal(&r);
    for (int i = 0; i < o.batch; i++)
        labels[i] = (int32_t)cl_rng_below(&r, (uint32_t)o.classes);

    /* Measured before the timed runs and again after them, the faster
     * kept: a busy machine slows the loop, and a low peak would put the
     * MFU above 100%. */
    cl_peak pk, pk2;
    double peak = 0;
    const cl_peak_kind kind =
        o.int8 ? cl_peak_kind_for_int8(cl_dnnl_isa_name())
               : cl_peak_kind_for(cl_dnnl_isa_name(), o.amp > 0);
    if (cl_peak_measure(kind, threads, &pk) == CL_OK)
        peak = pk.gflops;
    cl_bandwidth bw = {0};
    if (o.profile && cl_bandwidth_measure(threads, &bw) == CL_OK)
        o.bw_gbs = bw.triad_gbs;
    printf("classic bench: %s, %s%s%d classes, %dx%d, batch %d, "
           "%d threads, backend %s, %s%d, convs %s (cpu isa %s)\n",
           o.arch, cl_arch_stem(&cfg) ? o.stem : "",
           cl_arch_stem(&cfg) ? " stem, " : "", o.classes, o.size, o.size,
           o.batch, threads, o.backend,
           o.int8 ? "precision int8 (min-max on the timed batch), amp O"
                  : "amp O",
           o.amp,
           strcmp(o.backend, "onednn") != 0 ? "n/a"
           : o.direct_convs                 ? "direct"
           : o.measured_convs               ? "measured"
                                            : "rewrite",
           cl_dnnl_isa_name());
    int modes[2] = {strcmp(o.mode, "infer") != 0, strcmp(o.mode, "train") != 0};
    bench_result res[2];
    int64_t macs = 0;
    int rc = 0;
    for (int m = 0; m < 2 && rc == 0; m++) {
        if (!modes[m])
            continue;
        st = run_mode(&o, &cfg, m == 0, x, labels, &res[m], &macs);
        if (st != CL_OK)
            rc = cl_cli_fail(m == 0 ? "bench train" : "bench infer", st);
    }
    if (rc == 0) {
        if (cl_peak_measure(kind, threads, &pk2) == CL_OK &&
            pk2.gflops > peak) {
            pk = pk2;
            peak = pk2.gflops;
        }
        if (peak > 0)
            printf("peak      %.1f GFLOPS: %s, %s on %d thread(s); %.0f "
                   "FLOP per cycle per thread at %.2f GHz\n",
                   peak, cl_peak_kind_name(pk.kind),
                   pk.measured ? "measured" : "computed", pk.threads,
                   pk.flop_per_cycle, pk.clock_ghz);
        else
            printf("peak      unknown (%s); no MFU\n", cl_last_error());
    }
    if (o.bw_gbs > 0.0)
        printf("memory    %.1f GB/s STREAM triad, %.1f GB/s copy (3 arrays "
               "of %.0f MiB, %d thread(s)); the profile's GB/s count each "
               "argument once\n",
               bw.triad_gbs, bw.copy_gbs, bw.mib, bw.threads);
    for (int m = 0; m < 2 && rc == 0; m++) {
        if (!modes[m])
            continue;
        double mfu = peak > 0 ? 100.0 * res[m].gflops / peak : 0.0;
        printf("%-9s %.2f img/s  %.4f s/step  %.1f GFLOPS  %.1f%% MFU  "
               "(%d warm-up + %d timed steps, %.3f GMACs/img)\n",
               m == 0 ? "train" : "infer", res[m].img_s, res[m].step_s,
               res[m].gflops, mfu, o.warmup, o.steps, (double)macs / 1e9);
        if (m == 0)
            printf("          per step: forward %.4f s, backward %.4f s, "
                   "update %.4f s\n",
                   res[m].t_fwd, res[m].t_bwd, res[m].t_upd);
        if (mfu > 100)
            printf("          above the peak: the peak loop was slowed by "
                   "other work on this machine (see `uptime`); rerun when "
                   "it is idle\n");
    }
    double rss = peak_rss_mb();
    if (rc == 0) {
        printf("peak RSS  %.1f MB\n", rss);
        for (int m = 0; m < 2; m++)
            if (modes[m])
                printf("bench: mode=%s img_s=%.3f gflops=%.2f mfu=%.2f "
                       "peak_gflops=%.1f rss_mb=%.1f\n",
                       m == 0 ? "train" : "infer", res[m].img_s, res[m].gflops,
                       peak > 0 ? 100.0 * res[m].gflops / peak : 0.0, peak,
                       rss);
    }
    cl_free(x);
    cl_free(labels);
    return rc;
}
