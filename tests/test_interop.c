/* Interop: torchvision weights both ways (golden logits, live torch round
 * trip), ONNX export run by ONNX Runtime, MindSpore .ckpt import, and the
 * refusals of bad and hostile files.
 * ctest-labels: interop */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/mem.h"
#include "graph/graph.h"
#include "harness.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "models/resnet.h"
#include "train/model.h"

#define PY "/usr/bin/python3"

/* ---- helpers ---------------------------------------------------------- */

static float *read_floats(const char *path, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    float *v = malloc(n * sizeof(float) + 1);
    size_t got = v ? fread(v, sizeof(float), n + 1, f) : 0;
    fclose(f);
    if (got != n) {
        free(v);
        return NULL;
    }
    return v;
}

static int write_floats(const char *path, const float *v, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t put = fwrite(v, sizeof(float), n, f);
    return fclose(f) == 0 && put == n ? 0 : -1;
}

/* The pseudo-random value in [-1, 1) of element j of tensor `name`, exactly
 * as tools/golden_torch.py computes it (integer hash, then one double). */
static double golden_s(const char *name, size_t j)
{
    uint64_t h = 0;
    for (size_t i = 0; name[i]; i++)
        h += (uint64_t)(i + 1) * (unsigned char)name[i];
    h %= 997;
    uint32_t x = (uint32_t)((j + h * 1000003u) & 0xFFFFFFFFu);
    for (int r = 0; r < 2; r++)
        x = ((x >> 16) ^ x) * 0x45D9F3Bu;
    x = (x >> 16) ^ x;
    return (double)x * (2.0 / 4294967296.0) - 1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Fills every parameter and buffer of g with golden_torch.py's formula. */
static void golden_fill(cl_graph *g)
{
    for (int t = 0; t < g->n_tensors; t++) {
        const cl_gtensor *gt = &g->tensors[t];
        if (gt->kind != CL_GT_PARAM && gt->kind != CL_GT_BUFFER)
            continue;
        float *v = gt->kind == CL_GT_PARAM ? cl_graph_param(g, t)
                                           : cl_graph_buffer(g, t);
        size_t n = (size_t)cl_graph_numel(g, t);
        const int64_t *d = gt->shape.d;
        for (size_t j = 0; j < n; j++) {
            double s = golden_s(gt->name, j), x;
            if (ends_with(gt->name, "num_batches_tracked"))
                x = 0;
            else if (ends_with(gt->name, "running_mean"))
                x = 0.1 * s;
            else if (ends_with(gt->name, "running_var"))
                x = 1 + 0.5 * s * s;
            else if (strcmp(gt->name, "fc.weight") == 0)
                x = s * sqrt(3.0 / d[1]);
            else if (strcmp(gt->name, "fc.bias") == 0)
                x = 0.1 * s;
            else if (ends_with(gt->name, ".weight") && gt->shape.ndim == 4)
                x = s * sqrt(6.0 / ((double)d[1] * d[2] * d[3]));
            else if (ends_with(gt->name, ".weight"))
                x = 1 + 0.2 * s;
            else
                x = 0.1 * s;
            v[j] = (float)x;
        }
    }
}

/* Largest |a - b| over n values, relative to the largest |b|. */
static double rel_err(const float *a, const float *b, size_t n)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        e = d > e ? d : e;
        m = fabs(b[i]) > m ? fabs(b[i]) : m;
    }
    return e / (m > 0 ? m : 1);
}

static int argmax(const float *v, int n)
{
    int b = 0;
    for (int k = 1; k < n; k++)
        if (v[k] > v[b])
            b = k;
    return b;
}

/* Logits of g's current weights on x (N,C,H,W) with backend `name`. */
static cl_status run_logits(cl_graph *g, const char *name, const float *x,
                            float *logits)
{
    cl_backend *be = NULL;
    cl_backend_opts bo = {0, 0};
    cl_status s = cl_backend_create(&be, name, g, CL_PLAN_INFER, &bo);
    if (s == CL_OK)
        s = cl_backend_set_input(be, x, NULL, NULL);
    if (s == CL_OK)
        s = cl_backend_forward(be, 0, NULL);
    if (s == CL_OK)
        s = cl_backend_read(be, g->logits, logits);
    cl_backend_destroy(be);
    return s;
}

static cl_status build_resnet(cl_graph *g, int depth, int k, int side,
                              int batch)
{
    cl_resnet_config c = cl_resnet_config_default();
    c.depth = depth;
    c.num_classes = k;
    cl_status s = cl_graph_init(g, batch);
    if (s != CL_OK)
        return s;
    s = cl_resnet_build(g, &c, side, side, 0, 0.0f);
    if (s != CL_OK)
        cl_graph_free(g);
    return s;
}

/* Deterministic images (N,3,side,side), roughly unit variance. */
static void make_images(float *x, int n, int side, int seed)
{
    size_t per = (size_t)3 * side * side;
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < per; j++)
            x[i * per + j] =
                (float)(1.3 * sin(0.11 * (double)j * (i + 1) + seed) +
                        0.4 * cos(0.031 * (double)j + i));
}

/* ---- 1. torchvision --------------------------------------------------- */

/* classic's resnet18 against PyTorch's logits (tests/golden/, made by
 * tools/golden_torch.py with the same weight formula), on both backends. */
CL_TEST(golden_resnet18)
{
    const int N = 2, K = 3, S = 32;
    float *x =
        read_floats(CL_SOURCE_DIR "/tests/golden/resnet18_k3_s32_input.bin",
                    (size_t)N * 3 * S * S);
    float *want =
        read_floats(CL_SOURCE_DIR "/tests/golden/resnet18_k3_s32_logits.bin",
                    (size_t)N * K);
    REQUIRE(x && want);
    cl_graph g;
    REQUIRE_OK(build_resnet(&g, 18, K, S, N));
    golden_fill(&g);
    const char *backends[] = {"ref", "onednn"};
    for (int b = 0; b < 2; b++) {
        float got[6];
        CHECK_OK(run_logits(&g, backends[b], x, got));
        double e = rel_err(got, want, (size_t)N * K);
        printf("golden resnet18 %s: max rel err %.3g\n", backends[b], e);
        CHECK(e < 1e-4);
        for (int i = 0; i < N; i++)
            CHECK(argmax(got + i * K, K) == argmax(want + i * K, K));
    }
    /* The two images must give different logits, or the check would not
     * see a wrong input layout. */
    CHECK(fabs(want[1] - want[K + 1]) > 1e-2);
    cl_graph_free(&g);
    free(x);
    free(want);
}

/* A seeded torchvision resnet18 through tools/torch2safetensors.py, opened
 * as `classic predict` opens a checkpoint, against torch's own logits; then
 * tools/safetensors2torch.py back to a .pth that torchvision loads with
 * strict=True and that gives the same logits. */
CL_TEST(torch_live_roundtrip)
{
    const int N = 2, K = 5, S = 64;
    char cmd[4096];
    const char *st = cl_test_path("a.safetensors");
    const char *pth = cl_test_path("a.pth");
    const char *back = cl_test_path("b.pth");
    const char *xin = cl_test_path("x.bin");
    const char *y1 = cl_test_path("y1.bin");
    const char *y2 = cl_test_path("y2.bin");
    snprintf(cmd, sizeof cmd,
             PY " " CL_SOURCE_DIR "/tools/torch2safetensors.py --arch "
                "resnet18 --random --seed 7 --perturb-bn --num-classes %d "
                "--image-size %d --class-names a,b,c,d,e %s --save-pth %s",
             K, S, st, pth);
    REQUIRE(cl_test_run(cmd) == 0);
    size_t nx = (size_t)N * 3 * S * S;
    float *x = malloc(nx * sizeof(float));
    REQUIRE(x);
    make_images(x, N, S, 3);
    REQUIRE(write_floats(xin, x, nx) == 0);
    snprintf(cmd, sizeof cmd,
             PY " " CL_SOURCE_DIR "/tools/torch_infer.py --arch resnet18 "
                "--num-classes %d --pth %s --input %s --shape %d,3,%d,%d "
                "--output %s",
             K, pth, xin, N, S, S, y1);
    REQUIRE(cl_test_run(cmd) == 0);
    float *want = read_floats(y1, (size_t)N * K);
    REQUIRE(want);

    cl_model m;
    REQUIRE_OK(cl_model_open(&m, st, N, "onednn", CL_PLAN_INFER, 0));
    CHECK(m.arch.depth == 18 && m.num_classes == K && m.side == S);
    CHECK(strcmp(m.class_names[4], "e") == 0);
    CHECK(m.cfg.n_mean == 3 && fabs(m.cfg.mean[0] - 0.485) < 1e-9);
    float got[10];
    CHECK_OK(cl_backend_set_input(m.be, x, NULL, NULL));
    CHECK_OK(cl_backend_forward(m.be, 0, NULL));
    CHECK_OK(cl_backend_read(m.be, m.g.logits, got));
    double e = rel_err(got, want, (size_t)N * K);
    printf("live resnet18 onednn vs torch: max rel err %.3g\n", e);
    CHECK(e < 1e-4);
    for (int i = 0; i < N; i++)
        CHECK(argmax(got + i * K, K) == argmax(want + i * K, K));
    cl_model_close(&m);

    snprintf(cmd, sizeof cmd,
             PY " " CL_SOURCE_DIR "/tools/safetensors2torch.py --check %s %s",
             st, back);
    CHECK(cl_test_run(cmd) == 0);
    snprintf(cmd, sizeof cmd,
             PY " " CL_SOURCE_DIR "/tools/torch_infer.py --arch resnet18 "
                "--num-classes %d --pth %s --input %s --shape %d,3,%d,%d "
                "--output %s",
             K, back, xin, N, S, S, y2);
    CHECK(cl_test_run(cmd) == 0);
    float *again = read_floats(y2, (size_t)N * K);
    CHECK(again && memcmp(again, want, (size_t)N * K * sizeof(float)) == 0);
    free(again);
    free(want);
    free(x);
}

/* torch2safetensors.py refuses weights that do not fit what it is told. */
CL_TEST(torch_convert_refusals)
{
    char cmd[2048];
    const char *pth = cl_test_path("k4.pth");
    const char *st = cl_test_path("k4.safetensors");
    snprintf(cmd, sizeof cmd,
             PY " -c \"import torch, torchvision; m = "
                "torchvision.models.resnet18(num_classes=4); sd = "
                "m.state_dict(); sd['layer9.weight'] = torch.zeros(1); "
                "torch.save(sd, '%s')\"",
             pth);
    REQUIRE(cl_test_run(cmd) == 0);
    /* An unexpected tensor. */
    snprintf(cmd, sizeof cmd,
             PY " " CL_SOURCE_DIR "/tools/torch2safetensors.py --arch "
                "resnet18 %s %s 2>/dev/null",
             pth, st);
    CHECK(cl_test_run(cmd) != 0);
    /* Another arch than the weights. */
    snprintf(cmd, sizeof cmd,
             PY " -c \"import torch, torchvision; torch.save("
                "torchvision.models.resnet18(num_classes=4).state_dict(), "
                "'%s')\"",
             pth);
    REQUIRE(cl_test_run(cmd) == 0);
    snprintf(cmd, sizeof cmd,
             PY " " CL_SOURCE_DIR "/tools/torch2safetensors.py --arch "
                "resnet34 %s %s 2>/dev/null",
             pth, st);
    CHECK(cl_test_run(cmd) != 0);
    snprintf(cmd, sizeof cmd,
             PY " " CL_SOURCE_DIR "/tools/torch2safetensors.py "
                "--num-classes 5 %s %s 2>/dev/null",
             pth, st);
    CHECK(cl_test_run(cmd) != 0);
    /* And the right one passes, arch inferred from the names. */
    snprintf(cmd, sizeof cmd,
             PY " " CL_SOURCE_DIR "/tools/torch2safetensors.py %s %s", pth, st);
    CHECK(cl_test_run(cmd) == 0);
    char arch[32];
    CHECK_OK(cl_ckpt_read_meta(st, "arch", arch, sizeof arch));
    CHECK(strcmp(arch, "resnet18") == 0);
}

/* ---- 2. ONNX ---------------------------------------------------------- */

/* A classic checkpoint of g (resnet, imagenet stem) with the metadata
 * cl_model_open reads. */
static cl_status save_ckpt(const char *path, const cl_graph *g, int depth,
                           int k, int side)
{
    char arch[16], kk[16], sz[16];
    snprintf(arch, sizeof arch, "resnet%d", depth);
    snprintf(kk, sizeof kk, "%d", k);
    snprintf(sz, sizeof sz, "%d", side);
    cl_ckpt_kv meta[] = {{"arch", arch},
                         {"stem", "imagenet"},
                         {"in_channels", "3"},
                         {"num_classes", kk},
                         {"image_size", sz},
                         {"mean", "0.485,0.456,0.406"},
                         {"std", "0.229,0.224,0.225"},
                         {"class_names", "[\"w\",\"x\",\"y\",\"z\"]"}};
    return cl_ckpt_save_model(path, g, meta, 8);
}

/* Exports a checkpoint, runs it with ONNX Runtime on n images and compares
 * with classic's onednn inference. */
static void onnx_case(int depth, int side, int n, const char *batch_opt)
{
    const int K = 4;
    char cmd[4096];
    const char *ck = cl_test_path("m.safetensors");
    const char *onnx = cl_test_path("m.onnx");
    const char *xin = cl_test_path("onnx_x.bin");
    const char *yout = cl_test_path("onnx_y.bin");
    const char *bin = getenv("CLASSIC_BIN");
    REQUIRE(bin);
    cl_graph g;
    REQUIRE_OK(build_resnet(&g, depth, K, side, 1));
    golden_fill(&g);
    REQUIRE_OK(save_ckpt(ck, &g, depth, K, side));
    cl_graph_free(&g);
    snprintf(cmd, sizeof cmd, "%s export --checkpoint %s --onnx %s %s", bin, ck,
             onnx, batch_opt);
    REQUIRE(cl_test_run(cmd) == 0);
    snprintf(cmd, sizeof cmd,
             CL_SOURCE_DIR "/tests/onnx/setup.sh " CL_BINARY_DIR "/onnx");
    REQUIRE(cl_test_run(cmd) == 0);

    size_t per = (size_t)3 * side * side;
    float *x = malloc(per * n * sizeof(float));
    float *want = malloc((size_t)n * K * sizeof(float));
    REQUIRE(x && want);
    make_images(x, n, side, 11);
    REQUIRE(write_floats(xin, x, per * n) == 0);
    snprintf(cmd, sizeof cmd,
             "node " CL_SOURCE_DIR "/tests/onnx/run.js " CL_BINARY_DIR
             "/onnx %s %s %d,3,%d,%d %s",
             onnx, xin, n, side, side, yout);
    REQUIRE(cl_test_run(cmd) == 0);
    float *ort = read_floats(yout, (size_t)n * K);
    REQUIRE(ort);

    cl_model m;
    REQUIRE_OK(cl_model_open(&m, ck, n, "onednn", CL_PLAN_INFER, 0));
    CHECK_OK(cl_backend_set_input(m.be, x, NULL, NULL));
    CHECK_OK(cl_backend_forward(m.be, 0, NULL));
    CHECK_OK(cl_backend_read(m.be, m.g.logits, want));
    cl_model_close(&m);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double e = rel_err(ort + i * K, want + i * K, K);
        worst = e > worst ? e : worst;
        CHECK(argmax(ort + i * K, K) == argmax(want + i * K, K));
    }
    printf("onnx resnet%d %dx%d %s: ORT vs classic onednn max rel err %.3g\n",
           depth, side, side, batch_opt[0] ? batch_opt : "dynamic", worst);
    CHECK(worst < 1e-4);
    free(ort);
    free(want);
    free(x);
}

CL_TEST(onnx_resnet18_dynamic_batch)
{
    onnx_case(18, 64, 5, "");
}

CL_TEST(onnx_resnet50_fixed_batch)
{
    onnx_case(50, 32, 3, "--batch 3");
}
