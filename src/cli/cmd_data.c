/* `classic data info|stats|preview|export`: look at a dataset before
 * training. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "classic/classic.h"
#include "cli/cli.h"
#include "core/error.h"
#include "core/mem.h"
#include "data/data.h"

int cl_cmd_data(int argc, char **argv);

static void usage(FILE *f)
{
    fprintf(f,
            "usage: classic data info    [PATH] [options]\n"
            "       classic data stats   [PATH] [options] [--limit N]\n"
            "       classic data preview [PATH] --out grid.png [options]\n"
            "       classic data export  [PATH] --index I --out img.png "
            "[options]\n"
            "\n"
            "PATH is a dataset: a folder of IDX files, a CIFAR folder or\n"
            ".tar.gz, an ImageFolder (PATH/<class>/<image>) or a root of\n"
            "its splits (PATH/train/<class>/...) (default: Debian's\n"
            "Fashion-MNIST in " CL_DATASET_FASHION_MNIST_DIR ").\n"
            "\n"
            "options:\n"
            "  --format F          fashion_mnist|mnist|idx|cifar10|cifar100|"
            "imagefolder\n"
            "  --usage U           train|val|test|all (default train); an\n"
            "                      ImageFolder root of splits gives its\n"
            "                      train/ or val/ (test/) folder\n"
            "  --class-indexing F  imagefolder: file of `name index` lines\n"
            "  --on-bad-image P    fail|skip (default fail)\n"
            "  --limit N           stats: only N evenly spaced samples\n"
            "  --show N            info: labels of the first N samples (10)\n"
            "  --out FILE          preview, export: the PNG to write\n"
            "  --index I           export: the sample to write as PNG\n"
            "  --n N               preview: samples in the grid (16)\n"
            "  --cell PX           preview: size of each cell (64)\n"
            "  --size S            preview: transform output size (default "
            "the\n"
            "                      image size, 224 for imagefolder)\n"
            "  --seed S            preview: shuffle/augmentation seed (0)\n"
            "  --eval              preview: the eval pipeline (no random "
            "op)\n");
}

typedef struct data_args {
    const char *cmd, *path, *format, *usage, *class_indexing, *bad, *out;
    long limit, show, n, cell, size, index;
    unsigned long long seed;
    int eval;
    const char *root; /* PATH as given, when it is a root of splits */
    const char *split_name;
    char split[4096]; /* then the split's folder, which path points to */
} data_args;

static int parse_long(const char *opt, const char *v, long lo, long hi,
                      long *out)
{
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (!end || *end || end == v || x < lo || x > hi) {
        cl_error(CL_ERR_ARG, "%s %s: expected an integer in %ld..%ld", opt, v,
                 lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_args(int argc, char **argv, data_args *a)
{
    memset(a, 0, sizeof *a);
    a->show = 10;
    a->n = 16;
    a->cell = 64;
    a->cmd = argc > 1 ? argv[1] : NULL;
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long tmp;
        if (strcmp(o, "--eval") == 0) {
            a->eval = 1;
            continue;
        }
        if (strncmp(o, "--", 2) != 0) {
            if (a->path) {
                cl_error(CL_ERR_ARG, "unexpected argument '%s'", o);
                return -1;
            }
            a->path = o;
            continue;
        }
        if (!v) {
            cl_error(CL_ERR_ARG, "%s needs a value", o);
            return -1;
        }
        i++;
        if (strcmp(o, "--format") == 0)
            a->format = v;
        else if (strcmp(o, "--usage") == 0)
            a->usage = v;
        else if (strcmp(o, "--class-indexing") == 0)
            a->class_indexing = v;
        else if (strcmp(o, "--on-bad-image") == 0)
            a->bad = v;
        else if (strcmp(o, "--out") == 0)
            a->out = v;
        else if (strcmp(o, "--limit") == 0) {
            if (parse_long(o, v, 0, 2000000000L, &a->limit))
                return -1;
        } else if (strcmp(o, "--index") == 0) {
            if (parse_long(o, v, 0, 2000000000L, &a->index))
                return -1;
        } else if (strcmp(o, "--show") == 0) {
            if (parse_long(o, v, 0, 100000, &a->show))
                return -1;
        } else if (strcmp(o, "--n") == 0) {
            if (parse_long(o, v, 1, 1024, &a->n))
                return -1;
        } else if (strcmp(o, "--cell") == 0) {
            if (parse_long(o, v, 8, 1024, &a->cell))
                return -1;
        } else if (strcmp(o, "--size") == 0) {
            if (parse_long(o, v, 1, 4096, &a->size))
                return -1;
        } else if (strcmp(o, "--seed") == 0) {
            if (parse_long(o, v, 0, 2000000000L, &tmp))
                return -1;
            a->seed = (unsigned long long)tmp;
        } else {
            cl_error(CL_ERR_ARG, "unknown option %s", o);
            return -1;
        }
    }
    return 0;
}

/* Opens PATH as training reads a data_dir: an ImageFolder root of
 * splits (root/train, root/val) gives the split --usage names. */
static cl_status open_dataset(data_args *a, cl_dataset **ds)
{
    cl_dataset_spec sp = cl_dataset_spec_default();
    sp.format = a->format;
    sp.class_indexing = a->class_indexing;
    if (a->usage) {
        if (strcmp(a->usage, "train") == 0)
            sp.usage = CL_USAGE_TRAIN;
        else if (strcmp(a->usage, "test") == 0 || strcmp(a->usage, "val") == 0)
            sp.usage = CL_USAGE_TEST;
        else if (strcmp(a->usage, "all") == 0)
            sp.usage = CL_USAGE_ALL;
        else
            return cl_error(CL_ERR_ARG,
                            "--usage %s: expected train, val, test or all",
                            a->usage);
    }
    if (!a->format || strcmp(a->format, "imagefolder") == 0) {
        const char *split = NULL;
        CL_TRY(cl_imagefolder_split(a->path, sp.usage, a->split,
                                    sizeof a->split, &split));
        if (split) {
            a->root = a->path;
            a->split_name = split;
            a->path = a->split;
            sp.usage = CL_USAGE_ALL; /* the whole split folder */
        }
    }
    sp.path = a->path;
    if (a->bad) {
        if (strcmp(a->bad, "skip") == 0)
            sp.on_bad_image = CL_BAD_IMAGE_SKIP;
        else if (strcmp(a->bad, "fail") != 0)
            return cl_error(CL_ERR_ARG,
                            "--on-bad-image %s: expected fail or "
                            "skip",
                            a->bad);
    }
    return cl_dataset_open(ds, &sp);
}

static int run_info(const data_args *a, cl_dataset *ds)
{
    int64_t n = cl_dataset_count(ds);
    int K = cl_dataset_num_classes(ds);
    int h, w, c;
    cl_dataset_image_dims(ds, &h, &w, &c);
    printf("path      %s\n", a->path ? a->path : CL_DATASET_FASHION_MNIST_DIR);
    if (a->root)
        printf("split     %s of %s (--usage %s)\n", a->split_name, a->root,
               a->usage ? a->usage : "train");
    printf("format    %s (usage %s)\n", cl_dataset_format(ds),
           a->usage ? a->usage : "train");
    printf("samples   %lld\n", (long long)n);
    printf("classes   %d\n", K);
    if (h > 0) {
        printf("images    %dx%d, %d channel%s (all)\n", w, h, c,
               c == 1 ? "" : "s");
    } else {
        /* Probe the headers of up to 200 evenly spaced files. */
        int64_t take = n < 200 ? n : 200;
        int wmin = 1 << 30, wmax = 0, hmin = 1 << 30, hmax = 0;
        int64_t gray = 0, rgb = 0, bad = 0;
        double wsum = 0, hsum = 0;
        char path[4096];
        for (int64_t t = 0; t < take; t++) {
            int64_t i = t * n / take;
            int iw = 0, ih = 0, ic = 0;
            snprintf(path, sizeof path, "%s/%s", a->path,
                     cl_dataset_path(ds, i));
            if (cl_image_probe(path, &iw, &ih, &ic) != CL_OK) {
                if (bad == 0)
                    printf("bad image %s\n", cl_last_error());
                bad++;
                continue;
            }
            wmin = iw < wmin ? iw : wmin;
            wmax = iw > wmax ? iw : wmax;
            hmin = ih < hmin ? ih : hmin;
            hmax = ih > hmax ? ih : hmax;
            wsum += iw;
            hsum += ih;
            if (ic == 1)
                gray++;
            else
                rgb++;
        }
        int64_t ok = take - bad;
        if (ok > 0)
            printf("images    %lld probed: width %d..%d (mean %.0f), height "
                   "%d..%d (mean %.0f); %lld RGB, %lld gray; %lld "
                   "unreadable\n",
                   (long long)take, wmin, wmax, wsum / ok, hmin, hmax,
                   hsum / ok, (long long)rgb, (long long)gray, (long long)bad);
        printf("ignored   %lld non-image files\n",
               (long long)cl_dataset_ignored_files(ds));
    }
    int64_t *per = cl_alloc_zero((size_t)K * sizeof(int64_t), "counts");
    if (!per)
        return cl_cli_fail("data info", CL_ERR_NOMEM);
    for (int64_t i = 0; i < n; i++)
        per[cl_dataset_label(ds, i)]++;
    printf("per class\n");
    for (int k = 0; k < K; k++)
        printf("  %3d %-24s %lld\n", k, cl_dataset_class_name(ds, k),
               (long long)per[k]);
    cl_free(per);
    int64_t show = a->show < n ? a->show : n;
    if (show > 0) {
        printf("first %lld labels:", (long long)show);
        for (int64_t i = 0; i < show; i++)
            printf(" %d (%s)%s", cl_dataset_label(ds, i),
                   cl_dataset_class_name(ds, cl_dataset_label(ds, i)),
                   i + 1 < show ? "," : "\n");
    }
    return 0;
}

static int run_stats(const data_args *a, cl_dataset *ds)
{
    int C = 0;
    double mean[3], std[3];
    cl_status s = cl_data_stats(ds, a->limit, &C, mean, std);
    if (s != CL_OK)
        return cl_cli_fail("data stats", s);
    printf("samples   %lld\n",
           (long long)(a->limit > 0 && a->limit < cl_dataset_count(ds)
                           ? a->limit
                           : cl_dataset_count(ds)));
    printf("mean:");
    for (int c = 0; c < C; c++)
        printf("%s%.4f", c ? ", " : " [", mean[c]);
    printf("]\nstd:");
    for (int c = 0; c < C; c++)
        printf("%s%.4f", c ? ", " : "  [", std[c]);
    printf("]\n");
    return 0;
}

static int run_preview(const data_args *a, cl_dataset *ds)
{
    if (!a->out) {
        cl_error(CL_ERR_ARG, "preview needs --out FILE.png");
        return cl_cli_fail("data preview", CL_ERR_ARG);
    }
    int h, w, c;
    cl_dataset_image_dims(ds, &h, &w, &c);
    cl_transform_opts o;
    if (h > 0) {
        int sh = a->size ? (int)a->size : h, sw = a->size ? (int)a->size : w;
        if (a->eval) {
            o = cl_transform_opts_small_eval(3, sh, sw, NULL, NULL);
        } else {
            o = cl_transform_opts_small_train(3, sh, sw, sh / 8, 0.5f, NULL,
                                              NULL);
        }
        if (sh != h || sw != w) {
            o.resize_h = sh;
            o.resize_w = sw;
        }
    } else {
        int size = a->size ? (int)a->size : 224;
        o = a->eval ? cl_transform_opts_imagenet_eval(size)
                    : cl_transform_opts_imagenet_train(size);
    }
    cl_status s = cl_data_preview(ds, &o, (int)a->n, (int)a->cell,
                                  (uint64_t)a->seed, a->out);
    if (s != CL_OK)
        return cl_cli_fail("data preview", s);
    printf("wrote %s (%ld samples, %s pipeline)\n", a->out, a->n,
           a->eval ? "eval" : "train");
    return 0;
}

/* One sample as the PNG a user would feed to `classic predict`. */
static int run_export(const data_args *a, cl_dataset *ds)
{
    if (!a->out) {
        cl_error(CL_ERR_ARG, "export needs --out FILE.png");
        return cl_cli_fail("data export", CL_ERR_ARG);
    }
    if (a->index >= cl_dataset_count(ds)) {
        cl_error(CL_ERR_ARG, "--index %ld: the dataset has %lld samples",
                 a->index, (long long)cl_dataset_count(ds));
        return cl_cli_fail("data export", CL_ERR_ARG);
    }
    cl_image img;
    int32_t label = 0;
    memset(&img, 0, sizeof img);
    cl_status s = cl_dataset_get(ds, a->index, 0, &img, &label);
    if (s == CL_OK)
        s = cl_image_save_png(a->out, &img);
    cl_image_free(&img);
    if (s != CL_OK)
        return cl_cli_fail("data export", s);
    printf("wrote %s: sample %ld, label %d (%s)\n", a->out, a->index,
           (int)label, cl_dataset_class_name(ds, label));
    return 0;
}

int cl_cmd_data(int argc, char **argv)
{
    data_args a;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (parse_args(argc, argv, &a) != 0)
        return cl_cli_fail("data", CL_ERR_ARG);
    if (strcmp(a.cmd, "info") != 0 && strcmp(a.cmd, "stats") != 0 &&
        strcmp(a.cmd, "preview") != 0 && strcmp(a.cmd, "export") != 0) {
        fprintf(stderr, "classic data: unknown subcommand '%s'\n\n", a.cmd);
        usage(stderr);
        return 2;
    }
    cl_dataset *ds = NULL;
    cl_status s = open_dataset(&a, &ds);
    if (s != CL_OK)
        return cl_cli_fail("data", s);
    int rc;
    if (strcmp(a.cmd, "info") == 0)
        rc = run_info(&a, ds);
    else if (strcmp(a.cmd, "stats") == 0)
        rc = run_stats(&a, ds);
    else if (strcmp(a.cmd, "export") == 0)
        rc = run_export(&a, ds);
    else
        rc = run_preview(&a, ds);
    cl_dataset_close(ds);
    return rc;
}
