/* Data inspection: dataset statistics, the preview grid, and the
 * `classic data info|stats|preview` commands end to end.
 * ctest-labels: unit data */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "data/data.h"
#include "harness.h"
#include "test_data_fixtures.h"

static const char *make_idx(const char *name, int n)
{
    static char dir[1024];
    char p[1200];
    snprintf(dir, sizeof dir, "%s", cl_test_path(name));
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
    fx_idx_images(p, n, 8, 8, 0, 0, 0, 0);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte", dir);
    fx_idx_labels(p, n, 10, 0, -1);
    return dir;
}

static cl_dataset *open_dir(const char *dir)
{
    cl_dataset_spec sp = cl_dataset_spec_default();
    sp.format = "fashion_mnist";
    sp.path = dir;
    cl_dataset *ds = NULL;
    if (cl_dataset_open(&ds, &sp) != CL_OK)
        return NULL;
    return ds;
}

CL_TEST(stats_mean_std)
{
    cl_dataset *ds = open_dir(make_idx("st", 12));
    REQUIRE(ds);
    double sum = 0, sq = 0;
    for (int i = 0; i < 12; i++)
        for (int y = 0; y < 8; y++)
            for (int x = 0; x < 8; x++) {
                double v = fx_pix(i, y, x) / 255.0;
                sum += v;
                sq += v * v;
            }
    double m = sum / (12 * 64), sd = sqrt(sq / (12 * 64) - m * m);
    int C = 0;
    double mean[3], std[3];
    REQUIRE_OK(cl_data_stats(ds, 0, &C, mean, std));
    CHECK(C == 1);
    CHECK_NEAR(mean[0], m, 1e-9);
    CHECK_NEAR(std[0], sd, 1e-9);
    /* Limited: samples 0, 3, 6, 9 only. */
    sum = sq = 0;
    for (int i = 0; i < 12; i += 3)
        for (int y = 0; y < 8; y++)
            for (int x = 0; x < 8; x++) {
                double v = fx_pix(i, y, x) / 255.0;
                sum += v;
                sq += v * v;
            }
    REQUIRE_OK(cl_data_stats(ds, 4, &C, mean, std));
    CHECK_NEAR(mean[0], sum / 256, 1e-9);
    cl_dataset_close(ds);
}

CL_TEST(preview_writes_png)
{
    cl_dataset *ds = open_dir(make_idx("pv", 20));
    REQUIRE(ds);
    cl_transform_opts o =
        cl_transform_opts_small_train(1, 8, 8, 1, 0.5f, NULL, NULL);
    const char *out = cl_test_path("grid.png");
    REQUIRE_OK(cl_data_preview(ds, &o, 9, 32, 1, out));
    cl_image img = {0};
    REQUIRE_OK(cl_image_load(out, 0, 0, &img));
    /* 3x3 cells of (32+2) x (32+8+2) plus a 2 px border. */
    CHECK(img.w == 3 * 34 + 2 && img.h == 3 * 42 + 2 && img.c == 3);
    /* Some label pixels (near-white) are drawn under the first cell. */
    int white = 0;
    for (int y = 36; y < 42; y++)
        for (int x = 2; x < 34; x++)
            white += img.data[(y * img.w + x) * 3] == 240;
    CHECK(white > 5);
    cl_image_free(&img);
    CHECK_ERR(cl_data_preview(ds, &o, 0, 32, 1, out), CL_ERR_ARG,
              "expected 1..1024");
    CHECK_ERR(cl_data_preview(ds, &o, 4, 32, 1, "/nonexistent/dir/g.png"),
              CL_ERR_IO, "cannot create");
    cl_dataset_close(ds);
}

/* Runs the CLI with output to a file; returns its exit status and the
 * output in buf. */
static int run_cli(const char *args, char *buf, size_t cap)
{
    const char *bin = getenv("CLASSIC_BIN");
    char cmd[4096];
    const char *out = cl_test_path("cli.txt");
    snprintf(cmd, sizeof cmd, "%s %s > %s 2>&1", bin ? bin : "classic", args,
             out);
    int rc = cl_test_run(cmd);
    buf[0] = '\0';
    FILE *f = fopen(out, "r");
    if (f) {
        size_t n = fread(buf, 1, cap - 1, f);
        buf[n] = '\0';
        fclose(f);
    }
    return rc;
}

CL_TEST(cli_data_commands)
{
    static char buf[1 << 16];
    char args[2048];
    const char *dir = make_idx("cli", 30);
    snprintf(args, sizeof args, "data info %s --format fashion_mnist", dir);
    CHECK(run_cli(args, buf, sizeof buf) == 0);
    CHECK(strstr(buf, "samples   30"));
    CHECK(strstr(buf, "images    8x8, 1 channel"));
    CHECK(strstr(buf, "  1 Trouser"));
    CHECK(strstr(buf, "first 10 labels: 1 (Trouser), 4 (Coat)"));
    snprintf(args, sizeof args, "data stats %s", dir);
    CHECK(run_cli(args, buf, sizeof buf) == 0);
    CHECK(strstr(buf, "mean: [0."));
    snprintf(args, sizeof args, "data preview %s --out %s --n 4 --cell 16", dir,
             cl_test_path("g.png"));
    CHECK(run_cli(args, buf, sizeof buf) == 0);
    int w = 0, h = 0, c = 0;
    CHECK_OK(cl_image_probe(cl_test_path("g.png"), &w, &h, &c));
    CHECK(w == 2 * 18 + 2);
    /* Bad input: one clear sentence and a non-zero exit. */
    snprintf(args, sizeof args, "data info %s/nothing --format mnist", dir);
    CHECK(run_cli(args, buf, sizeof buf) != 0);
    CHECK(strstr(buf, "classic: data: ") && strstr(buf, "no IDX files"));
    CHECK(run_cli("data frobnicate", buf, sizeof buf) != 0);
    CHECK(strstr(buf, "unknown subcommand"));
    snprintf(args, sizeof args, "data preview %s", dir);
    CHECK(run_cli(args, buf, sizeof buf) != 0);
    CHECK(strstr(buf, "needs --out"));
}

/* The data commands read a data_dir as training does: a root of splits
 * gives its train/ (--usage val: its val/), and a root given where a
 * split is wanted is named as such. */
CL_TEST(cli_data_on_a_root_of_splits)
{
    static char buf[1 << 16];
    char args[2048], root[1024];
    snprintf(root, sizeof root, "%s", cl_test_path("splits"));
    REQUIRE(fx_image_split(root, "train", 6) == 0);
    REQUIRE(fx_image_split(root, "val", 4) == 0);
    snprintf(args, sizeof args, "data info %s", root);
    CHECK(run_cli(args, buf, sizeof buf) == 0);
    CHECK(strstr(buf, "split     train of ") != NULL);
    CHECK(strstr(buf, "samples   6") != NULL);
    snprintf(args, sizeof args, "data info %s --usage val", root);
    CHECK(run_cli(args, buf, sizeof buf) == 0);
    CHECK(strstr(buf, "split     val of ") != NULL);
    CHECK(strstr(buf, "samples   4") != NULL);
    snprintf(args, sizeof args, "data stats %s --format imagefolder", root);
    CHECK(run_cli(args, buf, sizeof buf) == 0);
    CHECK(strstr(buf, "mean: [") != NULL);
    snprintf(args, sizeof args, "data preview %s --out %s --n 4 --cell 16",
             root, cl_test_path("splits.png"));
    CHECK(run_cli(args, buf, sizeof buf) == 0);
    snprintf(args, sizeof args, "data info %s --usage all", root);
    CHECK(run_cli(args, buf, sizeof buf) != 0);
    CHECK(strstr(buf, "holds splits") != NULL);
    /* A split folder itself is read as before. */
    snprintf(args, sizeof args, "data info %s/val", root);
    CHECK(run_cli(args, buf, sizeof buf) == 0);
    CHECK(strstr(buf, "samples   4") != NULL);
    CHECK(strstr(buf, "split ") == NULL);
    /* No val/ or test/: one sentence saying what to give. */
    char lone[1024];
    snprintf(lone, sizeof lone, "%s", cl_test_path("trainonly"));
    REQUIRE(fx_image_split(lone, "train", 2) == 0);
    snprintf(args, sizeof args, "data info %s --usage test", lone);
    CHECK(run_cli(args, buf, sizeof buf) != 0);
    CHECK(strstr(buf, "holds splits but no val/ or test/ folder") != NULL);
    /* Opened as one ImageFolder, the root's error says what it is. */
    cl_dataset_spec sp = cl_dataset_spec_default();
    sp.format = "imagefolder";
    sp.path = root;
    cl_dataset *ds = NULL;
    CHECK_ERR(cl_dataset_open(&ds, &sp), CL_ERR_FORMAT,
              "looks like a root of splits");
}
