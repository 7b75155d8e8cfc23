/* Swin exported to ONNX with a symbolic batch: one file from `classic
 * export` (no --batch) run by ONNX Runtime at batch 1 and at batch 7,
 * each held to classic's logits at that batch; the file is the same
 * whether the graph was built at batch 1 or 3, so nothing in it is sized
 * by the batch; an index that mixes images is still refused.
 * ctest-labels: interop */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "graph/graph.h"
#include "harness.h"
#include "interop/interop.h"
#include "io/checkpoint.h"
#include "models/arch.h"
#include "train/model.h"

/* Logits are held to classic's as the other ONNX parity tests hold them
 * (tests/test_interop.c: max relative error 1e-4). */
#define TOL 1e-4

/* arch at batch `batch` and side `side`, K classes, seeded weights. */
static cl_status build_seeded(cl_graph *g, const char *arch, int batch,
                              int side, int K)
{
    cl_arch a;
    CL_TRY(cl_arch_parse(arch, NULL, &a));
    cl_arch_set_io(&a, 3, K);
    CL_TRY(cl_graph_init(g, batch));
    cl_status s = cl_arch_build(g, &a, side, side, 0, 0.0f);
    if (s == CL_OK)
        s = cl_arch_init(g, &a, 17);
    if (s != CL_OK)
        cl_graph_free(g);
    return s;
}

/* A classic checkpoint of g with the metadata cl_model_open reads. */
static cl_status save_ckpt(const char *path, const cl_graph *g,
                           const char *arch, int K, int side)
{
    char kk[16], sz[16];
    snprintf(kk, sizeof kk, "%d", K);
    snprintf(sz, sizeof sz, "%d", side);
    cl_ckpt_kv meta[] = {{"arch", arch},
                         {"in_channels", "3"},
                         {"num_classes", kk},
                         {"image_size", sz},
                         {"mean", "0.485,0.456,0.406"},
                         {"std", "0.229,0.224,0.225"}};
    return cl_ckpt_save_model(path, g, meta, 6);
}

static int argmax(const float *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

/* n images of side S, different for every `salt`. */
static float *make_images(int n, int S, int salt)
{
    const size_t nx = (size_t)n * 3 * S * S;
    float *x = malloc(nx * sizeof(float));
    if (!x)
        return NULL;
    for (size_t j = 0; j < nx; j++)
        x[j] = (float)(1.3 * sin(0.11 * (double)j + salt) +
                       0.4 * cos(0.031 * (double)j * (salt + 1)));
    return x;
}

/* Runs model (ONNX) with ONNX Runtime on n images and the checkpoint ck
 * with classic's onednn backend at batch n; *worst is the max relative
 * error; checks the top-1 of every image. */
static void ort_vs_classic(const char *ck, const char *model, int n, int S,
                           int K, int salt, double *worst)
{
    char cmd[4096];
    const char *xin = cl_test_path("x.bin");
    const char *yout = cl_test_path("y.bin");
    float *x = make_images(n, S, salt);
    float *want = malloc((size_t)n * K * sizeof(float));
    REQUIRE(x && want);
    REQUIRE(cl_test_write_floats(xin, x, (size_t)n * 3 * S * S) == 0);
    snprintf(cmd, sizeof cmd,
             "node " CL_SOURCE_DIR "/tests/onnx/run.js " CL_BINARY_DIR
             "/onnx %s %s %d,3,%d,%d %s",
             model, xin, n, S, S, yout);
    REQUIRE(cl_test_run(cmd) == 0);
    float *ort = cl_test_read_floats(yout, (size_t)n * K);
    REQUIRE(ort);
    cl_model m;
    REQUIRE_OK(cl_model_open(&m, ck, n, "onednn", CL_PLAN_INFER, 0));
    CHECK_OK(cl_backend_set_input(m.be, x, NULL, NULL));
    CHECK_OK(cl_backend_forward(m.be, 0, NULL));
    CHECK_OK(cl_backend_read(m.be, m.g.logits, want));
    cl_model_close(&m);
    *worst = 0;
    for (int i = 0; i < n; i++) {
        double e = cl_test_rel_err(ort + (size_t)i * K, want + (size_t)i * K,
                                   (size_t)K);
        *worst = e > *worst ? e : *worst;
        CHECK(argmax(ort + (size_t)i * K, K) ==
              argmax(want + (size_t)i * K, K));
    }
    free(ort);
    free(want);
    free(x);
}

/* One symbolic-batch file of arch at side S run at batch 1 and batch 7. */
static void any_batch(const char *arch, int S, int K)
{
    char cmd[4096];
    const char *ck = cl_test_path("s.safetensors");
    const char *model = cl_test_path("s.onnx");
    cl_graph g;
    REQUIRE_OK(build_seeded(&g, arch, 1, S, K));
    REQUIRE_OK(save_ckpt(ck, &g, arch, K, S));
    cl_graph_free(&g);
    snprintf(cmd, sizeof cmd, "export --checkpoint %s --onnx %s", ck, model);
    REQUIRE(cl_test_classic(cmd) == 0);
    snprintf(cmd, sizeof cmd,
             CL_SOURCE_DIR "/tests/onnx/setup.sh " CL_BINARY_DIR "/onnx");
    REQUIRE(cl_test_run(cmd) == 0);
    static const int batches[2] = {1, 7};
    for (int k = 0; k < 2; k++) {
        double e = 1;
        ort_vs_classic(ck, model, batches[k], S, K, k, &e);
        printf("onnx %s %dx%d symbolic batch, run at %d: ORT vs classic "
               "onednn max rel err %.3g\n",
               arch, S, S, batches[k], e);
        CHECK(e < TOL);
    }
}

CL_TEST(onnx_swin_micro_symbolic_batch)
{
    any_batch("swin_micro", 32, 10);
}

CL_TEST(onnx_swin_t_symbolic_batch)
{
    any_batch("swin_t", 224, 10);
}

/* The symbolic-batch export of a graph built at batch 3, where every
 * gather's index is checked to repeat per image, is byte for byte the
 * export of the same weights built at batch 1. */
CL_TEST(onnx_swin_export_independent_of_batch)
{
    const char *p1 = cl_test_path("b1.onnx");
    const char *p3 = cl_test_path("b3.onnx");
    cl_graph g1, g3;
    REQUIRE_OK(build_seeded(&g1, "swin_micro", 1, 32, 10));
    REQUIRE_OK(build_seeded(&g3, "swin_micro", 3, 32, 10));
    cl_onnx_opts o = {.batch = 0};
    CHECK_OK(cl_interop_export_onnx(&g1, p1, &o));
    CHECK_OK(cl_interop_export_onnx(&g3, p3, &o));
    size_t n1 = 0, n3 = 0;
    char *b1 = cl_test_read_file(p1, &n1);
    char *b3 = cl_test_read_file(p3, &n3);
    REQUIRE(b1 && b3);
    CHECK(n1 == n3 && memcmp(b1, b3, n1) == 0);
    printf("swin_micro symbolic export: %zu bytes from batch 1, %zu from "
           "batch 3\n",
           n1, n3);
    free(b1);
    free(b3);
    cl_graph_free(&g1);
    cl_graph_free(&g3);
}

/* x (2,3,2,2) -> conv 1x1 -> row_gather (2,4,3) reading image 1's tokens
 * for image 0 and the other way round -> token mean -> fc.  The swap is
 * no gather within each image: refused at a symbolic batch, naming the
 * node; written whole at the graph's batch. */
CL_TEST(onnx_gather_across_images_refused)
{
    enum { N = 2, C = 3, G = 2, L = G * G };
    cl_graph g;
    int x, c, it, t, m, y;
    cl_conv2d_attr ca = cl_conv2d_attr_make(C, C, 1, 1, 0);
    cl_linear_attr fa = {C, 4, 1};
    cl_softmax_ce_attr la = {4, 0.0f};
    const int64_t nrows = (int64_t)N * L * C;
    REQUIRE_OK(cl_graph_init(&g, N));
    REQUIRE_OK(cl_graph_input(&g, C, G, G, &x));
    REQUIRE_OK(cl_graph_conv2d(&g, "conv", x, &ca, &c));
    REQUIRE_OK(cl_graph_buffer_add(&g, "swap.index", cl_shape_make(1, &nrows),
                                   CL_I64, &it));
    cl_shape ts = cl_shape_make(3, (int64_t[]){N, L, C});
    REQUIRE_OK(cl_graph_row_gather(&g, "swap", c, it, 1, &ts, &t));
    REQUIRE_OK(cl_graph_token_meanpool(&g, "mean", t, &m));
    REQUIRE_OK(cl_graph_linear(&g, "fc", m, &fa, &y));
    REQUIRE_OK(cl_graph_softmax_ce(&g, y, &la, 0));
    REQUIRE_OK(cl_graph_finalize(&g));
    /* ts is (N, L, C) read one float per row from (N, C, L). */
    int64_t *p = cl_graph_buffer_i64(&g, it);
    for (int n = 0; n < N; n++)
        for (int l = 0; l < L; l++)
            for (int ch = 0; ch < C; ch++)
                p[((int64_t)n * L + l) * C + ch] =
                    ((int64_t)(N - 1 - n) * C + ch) * L + l;
    const char *out = cl_test_path("swap.onnx");
    cl_onnx_opts dyn = {.batch = 0}, fixed = {.batch = N};
    CHECK_ERR(cl_interop_export_onnx(&g, out, &dyn), CL_ERR_UNSUPPORTED,
              "node swap (row_gather) has an index that moves rows between "
              "the images of the graph's batch of 2");
    CHECK_OK(cl_interop_export_onnx(&g, out, &fixed));
    cl_graph_free(&g);
}
