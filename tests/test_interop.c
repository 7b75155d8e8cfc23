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
#include "core/rng.h"
#include "graph/graph.h"
#include "harness.h"
#include "io/checkpoint.h"
#include "interop/interop.h"
#include "interop/protobuf.h"
#include "io/safetensors.h"
#include "models/arch.h"
#include "models/resnet.h"
#include "train/model.h"

#define PY "/usr/bin/python3"

/* ---- helpers ---------------------------------------------------------- */

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
    cl_backend_opts bo = {0};
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
    float *x = cl_test_read_floats(CL_SOURCE_DIR
                                   "/tests/golden/resnet18_k3_s32_input.bin",
                                   (size_t)N * 3 * S * S);
    float *want = cl_test_read_floats(
        CL_SOURCE_DIR "/tests/golden/resnet18_k3_s32_logits.bin",
        (size_t)N * K);
    REQUIRE(x && want);
    cl_graph g;
    REQUIRE_OK(build_resnet(&g, 18, K, S, N));
    golden_fill(&g);
    const char *backends[] = {"ref", "onednn"};
    for (int b = 0; b < 2; b++) {
        float got[6];
        CHECK_OK(run_logits(&g, backends[b], x, got));
        double e = cl_test_rel_err(got, want, (size_t)N * K);
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
    REQUIRE(cl_test_write_floats(xin, x, nx) == 0);
    snprintf(cmd, sizeof cmd,
             PY " " CL_SOURCE_DIR "/tools/torch_infer.py --arch resnet18 "
                "--num-classes %d --pth %s --input %s --shape %d,3,%d,%d "
                "--output %s",
             K, pth, xin, N, S, S, y1);
    REQUIRE(cl_test_run(cmd) == 0);
    float *want = cl_test_read_floats(y1, (size_t)N * K);
    REQUIRE(want);

    cl_model m;
    REQUIRE_OK(cl_model_open(&m, st, N, "onednn", CL_PLAN_INFER, 0));
    CHECK(m.arch.resnet.depth == 18 && m.num_classes == K && m.side == S);
    CHECK(strcmp(m.class_names[4], "e") == 0);
    CHECK(m.cfg.n_mean == 3 && fabs(m.cfg.mean[0] - 0.485) < 1e-9);
    float got[10];
    CHECK_OK(cl_backend_set_input(m.be, x, NULL, NULL));
    CHECK_OK(cl_backend_forward(m.be, 0, NULL));
    CHECK_OK(cl_backend_read(m.be, m.g.logits, got));
    double e = cl_test_rel_err(got, want, (size_t)N * K);
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
    float *again = cl_test_read_floats(y2, (size_t)N * K);
    CHECK(again && memcmp(again, want, (size_t)N * K * sizeof(float)) == 0);
    free(again);
    free(want);
    free(x);
}

/* A model with the cifar_pool stem and gray input, trained by classic,
 * through tools/safetensors2torch.py --check: torchvision's resnet18 after
 * the CIFAR-stem surgery (conv1 3x3/1 of one channel) loads it strictly
 * and gives the logits of the checkpoint it came from. */
CL_TEST(torch_cifar_stem_roundtrip)
{
    const int K = 10, S = 28;
    char cmd[4096], args[2048];
    const char *dir = cl_test_tmpdir();
    snprintf(args, sizeof args,
             "train --model resnet18 --stem cifar_pool --in_channels 1 "
             "--image_size %d --limit_train 64 --batch_size 32 --epoch_size 1 "
             "--val_interval 0 --ckpt_save_epochs 0 --num_parallel_workers 1 "
             "--seed 3 --ckpt_save_dir %s/c",
             S, dir);
    REQUIRE(cl_test_classic(args) == 0);
    const char *st = cl_test_path("c/resnet18-last.safetensors");
    const char *pth = cl_test_path("c.pth");
    const char *xin = cl_test_path("cx.bin");
    const char *yout = cl_test_path("cy.bin");
    snprintf(cmd, sizeof cmd,
             PY " " CL_SOURCE_DIR "/tools/safetensors2torch.py --check %s %s",
             st, pth);
    REQUIRE(cl_test_run(cmd) == 0);
    float x[3 * 28 * 28]; /* the first plane is the gray image */
    make_images(x, 1, S, 1);
    REQUIRE(cl_test_write_floats(xin, x, (size_t)S * S) == 0);
    snprintf(cmd, sizeof cmd,
             PY " -c \"import numpy as np, torch, torchvision\n"
                "m = torchvision.models.resnet18(num_classes=%d)\n"
                "m.conv1 = torch.nn.Conv2d(1, 64, 3, 1, 1, bias=False)\n"
                "m.load_state_dict(torch.load('%s'), strict=True)\n"
                "x = np.fromfile('%s', dtype='<f4').reshape(1, 1, %d, %d)\n"
                "with torch.no_grad():\n"
                " y = m.eval()(torch.from_numpy(x.copy()))\n"
                "y.numpy().astype('<f4').tofile('%s')\"",
             K, pth, xin, S, S, yout);
    REQUIRE(cl_test_run(cmd) == 0);
    float *want = cl_test_read_floats(yout, (size_t)K);
    REQUIRE(want);
    cl_model m;
    REQUIRE_OK(cl_model_open(&m, st, 1, "onednn", CL_PLAN_INFER, 0));
    CHECK(m.side == S && m.in_c == 1);
    float got[10];
    CHECK_OK(cl_backend_set_input(m.be, x, NULL, NULL));
    CHECK_OK(cl_backend_forward(m.be, 0, NULL));
    CHECK_OK(cl_backend_read(m.be, m.g.logits, got));
    double e = cl_test_rel_err(got, want, (size_t)K);
    printf("cifar_pool resnet18 from its .pth, classic vs torch: max rel "
           "err %.3g\n",
           e);
    CHECK(e < 1e-4);
    cl_model_close(&m);
    free(want);
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
    REQUIRE(cl_test_write_floats(xin, x, per * n) == 0);
    snprintf(cmd, sizeof cmd,
             "node " CL_SOURCE_DIR "/tests/onnx/run.js " CL_BINARY_DIR
             "/onnx %s %s %d,3,%d,%d %s",
             onnx, xin, n, side, side, yout);
    REQUIRE(cl_test_run(cmd) == 0);
    float *ort = cl_test_read_floats(yout, (size_t)n * K);
    REQUIRE(ort);

    cl_model m;
    REQUIRE_OK(cl_model_open(&m, ck, n, "onednn", CL_PLAN_INFER, 0));
    CHECK_OK(cl_backend_set_input(m.be, x, NULL, NULL));
    CHECK_OK(cl_backend_forward(m.be, 0, NULL));
    CHECK_OK(cl_backend_read(m.be, m.g.logits, want));
    cl_model_close(&m);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double e = cl_test_rel_err(ort + i * K, want + i * K, K);
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

/* Swin's ops in a small graph: x (N,3,4,4) -> conv 1x1 (3 -> 8) ->
 * row_gather NCHW -> NHWC (N,16,8) -> linear over the tokens (8 -> 8,
 * MatMul + Add) -> s = 0.3 t t^T (Transpose, MatMul, Mul) -> o = s t ->
 * row_gather repeating tokens (N,20,8) of o, plus the same of the linear's
 * output (a second gather by the same index buffer) -> droppath
 * (Identity) -> token mean (ReduceMean) -> fc (Gemm) -> logits. */
enum { SW_N = 2, SW_C = 3, SW_G = 4, SW_L = SW_G * SW_G, SW_E = 8, SW_K = 4 };

static cl_status build_swin_ops(cl_graph *g)
{
    int x, c, t, e, s, o, r, r2, dp, m, y, it, ir;
    cl_conv2d_attr ca = cl_conv2d_attr_make(SW_C, SW_E, 1, 1, 0);
    cl_linear_attr ea = {SW_E, SW_E, 1}, fa = {SW_E, SW_K, 1};
    cl_matmul_attr qk = {1, 0.3f}, sv = {0, 1.0f};
    cl_droppath_attr da = {0.2f};
    cl_softmax_ce_attr la = {SW_K, 0.0f};
    const int64_t nt = (int64_t)SW_N * SW_L, nr = (int64_t)SW_N * (SW_L + 4);
    CL_TRY(cl_graph_init(g, SW_N));
    CL_TRY(cl_graph_input(g, SW_C, SW_G, SW_G, &x));
    CL_TRY(cl_graph_conv2d(g, "conv", x, &ca, &c));
    CL_TRY(cl_graph_buffer_add(g, "tokens.index",
                               cl_shape_make(1, (int64_t[]){nt * SW_E}), CL_I64,
                               &it));
    cl_shape ts = cl_shape_make(3, (int64_t[]){SW_N, SW_L, SW_E});
    CL_TRY(cl_graph_row_gather(g, "tokens", c, it, 1, &ts, &t));
    CL_TRY(cl_graph_linear(g, "embed", t, &ea, &e));
    CL_TRY(cl_graph_matmul(g, "qk", e, e, &qk, &s));
    CL_TRY(cl_graph_matmul(g, "sv", s, e, &sv, &o));
    CL_TRY(cl_graph_buffer_add(g, "repeat.index", cl_shape_make(1, &nr), CL_I64,
                               &ir));
    cl_shape rs = cl_shape_make(3, (int64_t[]){SW_N, SW_L + 4, SW_E});
    CL_TRY(cl_graph_row_gather(g, "dup", o, ir, SW_E, &rs, &r));
    CL_TRY(cl_graph_row_gather(g, "dup2", e, ir, SW_E, &rs, &r2));
    CL_TRY(cl_graph_add(g, "sum", r, r2, &r));
    CL_TRY(cl_graph_droppath(g, "drop", r, &da, &dp));
    CL_TRY(cl_graph_token_meanpool(g, "mean", dp, &m));
    CL_TRY(cl_graph_linear(g, "fc", m, &fa, &y));
    CL_TRY(cl_graph_softmax_ce(g, y, &la, 0));
    CL_TRY(cl_graph_finalize(g));
    int64_t *p = cl_graph_buffer_i64(g, it);
    for (int n = 0; n < SW_N; n++)
        for (int l = 0; l < SW_L; l++)
            for (int ch = 0; ch < SW_E; ch++)
                p[((int64_t)n * SW_L + l) * SW_E + ch] =
                    ((int64_t)n * SW_E + ch) * SW_L + l;
    p = cl_graph_buffer_i64(g, ir);
    for (int n = 0; n < SW_N; n++)
        for (int j = 0; j < SW_L + 4; j++)
            p[(int64_t)n * (SW_L + 4) + j] =
                (int64_t)n * SW_L + (j < SW_L ? SW_L - 1 - j : 3 * j % SW_L);
    cl_rng r0;
    cl_rng_init(&r0, 29, 0);
    for (int k = 0; k < g->n_tensors; k++)
        if (g->tensors[k].kind == CL_GT_PARAM) {
            float *w = cl_graph_param(g, k);
            for (int64_t i = 0; i < cl_graph_numel(g, k); i++)
                w[i] = cl_rng_uniform(&r0) - 0.5f;
        }
    return CL_OK;
}

/* The initializers named `name` in the ONNX file at path. */
static int onnx_initializers_named(const char *path, const char *name)
{
    size_t n = 0;
    char *buf = cl_test_read_file(path, &n);
    if (!buf)
        return -1;
    cl_pb_reader r, gr, tr;
    cl_pb_field f, f2, f3;
    int more, m2, m3, count = 0;
    cl_pb_reader_init(&r, buf, n, 0, path);
    while (cl_pb_next(&r, &f, &more) == CL_OK && more) {
        if (f.number != 7)
            continue;
        cl_pb_reader_sub(&r, &f, &gr);
        while (cl_pb_next(&gr, &f2, &m2) == CL_OK && m2) {
            if (f2.number != 5)
                continue;
            cl_pb_reader_sub(&gr, &f2, &tr);
            while (cl_pb_next(&tr, &f3, &m3) == CL_OK && m3)
                count += f3.number == 8 && f3.len == strlen(name) &&
                         !memcmp(f3.ptr, name, f3.len);
        }
    }
    free(buf);
    return count;
}

/* The graph exported at its batch and at a symbolic one, each run by ONNX
 * Runtime, gives the ref and onednn backends' evaluation logits (droppath
 * the identity); both gathers move rows within each image, so both files
 * hold one image's index, the one the two gathers share written once. */
CL_TEST(onnx_swin_ops)
{
    char cmd[4096];
    const char *onnx = cl_test_path("swin_ops.onnx");
    const char *xin = cl_test_path("swin_x.bin");
    const char *yout = cl_test_path("swin_y.bin");
    cl_graph g;
    memset(&g, 0, sizeof g);
    REQUIRE_OK(build_swin_ops(&g));
    snprintf(cmd, sizeof cmd,
             CL_SOURCE_DIR "/tests/onnx/setup.sh " CL_BINARY_DIR "/onnx");
    REQUIRE(cl_test_run(cmd) == 0);
    enum { NX = SW_N * SW_C * SW_L, NY = SW_N * SW_K };
    float x[NX], want[2][NY];
    cl_rng r;
    cl_rng_init(&r, 31, 0);
    for (int i = 0; i < NX; i++)
        x[i] = 2.0f * cl_rng_uniform(&r) - 1.0f;
    REQUIRE(cl_test_write_floats(xin, x, NX) == 0);
    static const char *const names[2] = {"ref", "onednn"};
    for (int k = 0; k < 2; k++) {
        cl_backend *be = NULL;
        REQUIRE_OK(cl_backend_create(&be, names[k], &g, CL_PLAN_INFER, NULL));
        CHECK_OK(cl_backend_set_input(be, x, NULL, NULL));
        CHECK_OK(cl_backend_forward(be, 0, NULL));
        CHECK_OK(cl_backend_read(be, g.logits, want[k]));
        cl_backend_destroy(be);
    }
    for (int fixed = 0; fixed <= 1; fixed++) {
        cl_onnx_opts o = {.batch = fixed ? SW_N : 0};
        REQUIRE_OK(cl_interop_export_onnx(&g, onnx, &o));
        CHECK(onnx_initializers_named(onnx, "repeat.index.image") == 1);
        CHECK(onnx_initializers_named(onnx, "tokens.index.image") == 1);
        CHECK(onnx_initializers_named(onnx, "tokens.index") == 0);
        CHECK(onnx_initializers_named(onnx, "dup2.index.image") == 0);
        snprintf(cmd, sizeof cmd,
                 "node " CL_SOURCE_DIR "/tests/onnx/run.js " CL_BINARY_DIR
                 "/onnx %s %s %d,%d,%d,%d %s",
                 onnx, xin, SW_N, SW_C, SW_G, SW_G, yout);
        REQUIRE(cl_test_run(cmd) == 0);
        float *ort = cl_test_read_floats(yout, NY);
        REQUIRE(ort);
        for (int k = 0; k < 2; k++) {
            const double e = cl_test_rel_err(ort, want[k], NY);
            printf("onnx swin ops (%s batch): ORT vs classic %s max rel err "
                   "%.3g\n",
                   fixed ? "fixed" : "symbolic", names[k], e);
            CHECK(e < 1e-4);
        }
        free(ort);
    }
    cl_graph_free(&g);
}

/* Reads the exported file back with the protobuf reader: IR version,
 * opset, producer, the metadata_props keys, the node kinds. */
static void onnx_check_structure(const char *path)
{
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    REQUIRE(fseek(f, 0, SEEK_END) == 0);
    long n = ftell(f);
    REQUIRE(n > 0 && fseek(f, 0, SEEK_SET) == 0);
    unsigned char *buf = malloc((size_t)n);
    REQUIRE(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    cl_pb_reader r, sub, sub2;
    cl_pb_field fl, f2;
    int more, ir = 0, opset = 0, convs = 0, bns = 0, gemm = 0;
    char keys[512] = "";
    cl_pb_reader_init(&r, buf, (size_t)n, 0, path);
    while (cl_pb_next(&r, &fl, &more) == CL_OK && more) {
        if (fl.number == 1)
            ir = (int)fl.v;
        if (fl.number == 8) {
            cl_pb_reader_sub(&r, &fl, &sub);
            while (cl_pb_next(&sub, &f2, &more) == CL_OK && more)
                if (f2.number == 2)
                    opset = (int)f2.v;
        }
        if (fl.number == 14) {
            cl_pb_reader_sub(&r, &fl, &sub);
            while (cl_pb_next(&sub, &f2, &more) == CL_OK && more)
                if (f2.number == 1 && strlen(keys) + f2.len + 2 < sizeof keys) {
                    strncat(keys, (const char *)f2.ptr, f2.len);
                    strcat(keys, " ");
                }
        }
        if (fl.number == 7) {
            cl_pb_reader_sub(&r, &fl, &sub);
            while (cl_pb_next(&sub, &f2, &more) == CL_OK && more) {
                if (f2.number != 1)
                    continue;
                cl_pb_field f3;
                int m3;
                cl_pb_reader_sub(&sub, &f2, &sub2);
                while (cl_pb_next(&sub2, &f3, &m3) == CL_OK && m3)
                    if (f3.number == 4) {
                        convs += f3.len == 4 && !memcmp(f3.ptr, "Conv", 4);
                        bns += f3.len == 18 &&
                               !memcmp(f3.ptr, "BatchNormalization", 18);
                        gemm += f3.len == 4 && !memcmp(f3.ptr, "Gemm", 4);
                    }
            }
        }
    }
    CHECK(ir == 8 && opset == 17);
    CHECK(convs == 20 && bns == 0 && gemm == 1); /* resnet18 */
    CHECK(strstr(keys, "mean ") && strstr(keys, "std ") &&
          strstr(keys, "image_size ") && strstr(keys, "class_names ") &&
          strstr(keys, "preprocessing "));
    free(buf);
}

CL_TEST(onnx_resnet18_dynamic_batch)
{
    onnx_case(18, 64, 5, "");
    onnx_check_structure(cl_test_path("m.onnx"));
}

/* export refuses what is not a classic checkpoint and bad options, and
 * leaves no file behind. */
CL_TEST(onnx_export_refusals)
{
    const char *bin = getenv("CLASSIC_BIN");
    const char *out = cl_test_path("never.onnx");
    char cmd[2048];
    REQUIRE(bin);
    snprintf(cmd, sizeof cmd,
             "%s export --checkpoint " CL_SOURCE_DIR
             "/CMakeLists.txt --onnx %s 2>/dev/null",
             bin, out);
    CHECK(cl_test_run(cmd) == 1);
    snprintf(cmd, sizeof cmd, "%s export --checkpoint %s --onnx %s 2>/dev/null",
             bin, cl_test_path("missing.safetensors"), out);
    CHECK(cl_test_run(cmd) == 1);
    snprintf(cmd, sizeof cmd, "%s export --onnx %s 2>/dev/null", bin, out);
    CHECK(cl_test_run(cmd) == 2);
    snprintf(cmd, sizeof cmd,
             "%s export --checkpoint x --onnx %s --batch 0 2>/dev/null", bin,
             out);
    CHECK(cl_test_run(cmd) == 2);
    FILE *f = fopen(out, "rb");
    CHECK(f == NULL);
    if (f)
        fclose(f);
}

CL_TEST(onnx_resnet50_fixed_batch)
{
    onnx_case(50, 32, 3, "--batch 3");
}

/* Swin's ops in ONNX: x (N,3,4,6) -> ln: layernorm over the last axis ->
 * a: gelu -> p: softmax(a + ln + mask), the mask an f32 buffer (3,1,6) of
 * 0 and -100 broadcast over N and H -> gelu (the mean of p alone is a
 * constant) -> gap -> fc -> logits.  Exported with a fixed and a symbolic
 * batch and run by ONNX Runtime against classic's ref backend. */
static cl_status build_attn_ops(cl_graph *g, int n)
{
    int x, l, a, m, p, q, r, y;
    cl_layernorm_attr la = cl_layernorm_attr_make(6);
    cl_linear_attr fa = {3, 4, 1};
    cl_softmax_ce_attr sa = {4, 0.0f};
    CL_TRY(cl_graph_init(g, n));
    CL_TRY(cl_graph_input(g, 3, 4, 6, &x));
    CL_TRY(cl_graph_layernorm(g, "ln", x, &la, &l));
    CL_TRY(cl_graph_gelu(g, "act", l, &a));
    CL_TRY(cl_graph_buffer_add(
        g, "attn_mask", cl_shape_make(3, (int64_t[]){3, 1, 6}), CL_F32, &m));
    CL_TRY(cl_graph_softmax(g, "attn", a, l, m, &p));
    CL_TRY(cl_graph_gelu(g, "act2", p, &q));
    CL_TRY(cl_graph_global_avgpool(g, "gap", q, &r));
    CL_TRY(cl_graph_linear(g, "fc", r, &fa, &y));
    CL_TRY(cl_graph_softmax_ce(g, y, &sa, 0));
    CL_TRY(cl_graph_finalize(g));
    cl_rng rng;
    cl_rng_init(&rng, 77, 0);
    for (int t = 0; t < g->n_tensors; t++)
        if (g->tensors[t].kind == CL_GT_PARAM)
            for (int64_t k = 0; k < cl_graph_numel(g, t); k++)
                cl_graph_param(g, t)[k] = 2.0f * cl_rng_uniform(&rng) - 1.0f;
    for (int k = 0; k < 18; k++)
        cl_graph_buffer(g, m)[k] = k % 4 == 1 ? -100.0f : 0.0f;
    return CL_OK;
}

CL_TEST(onnx_layernorm_gelu_softmax)
{
    enum { N = 3, K = 4 };
    const char *onnx = cl_test_path("swin_ops.onnx");
    const char *xin = cl_test_path("swin_x.bin");
    const char *yout = cl_test_path("swin_y.bin");
    char cmd[4096];
    cl_graph g;
    REQUIRE_OK(build_attn_ops(&g, N));
    float x[N * 3 * 4 * 6], want[N * K];
    cl_rng rng;
    cl_rng_init(&rng, 78, 0);
    for (size_t k = 0; k < sizeof x / sizeof x[0]; k++)
        x[k] = 4.0f * cl_rng_uniform(&rng) - 2.0f;
    cl_backend *be = NULL;
    REQUIRE_OK(cl_backend_create(&be, "ref", &g, CL_PLAN_INFER, NULL));
    CHECK_OK(cl_backend_set_input(be, x, NULL, NULL));
    CHECK_OK(cl_backend_forward(be, 0, NULL));
    CHECK_OK(cl_backend_read(be, g.logits, want));
    cl_backend_destroy(be);
    REQUIRE(cl_test_write_floats(xin, x, sizeof x / sizeof x[0]) == 0);
    snprintf(cmd, sizeof cmd,
             CL_SOURCE_DIR "/tests/onnx/setup.sh " CL_BINARY_DIR "/onnx");
    REQUIRE(cl_test_run(cmd) == 0);
    for (int fixed = 0; fixed <= 1; fixed++) {
        cl_onnx_opts o = {.batch = fixed ? N : 0};
        REQUIRE_OK(cl_interop_export_onnx(&g, onnx, &o));
        snprintf(cmd, sizeof cmd,
                 "node " CL_SOURCE_DIR "/tests/onnx/run.js " CL_BINARY_DIR
                 "/onnx %s %s %d,3,4,6 %s",
                 onnx, xin, N, yout);
        REQUIRE(cl_test_run(cmd) == 0);
        float *ort = cl_test_read_floats(yout, (size_t)N * K);
        REQUIRE(ort);
        double e = cl_test_rel_err(ort, want, (size_t)N * K);
        printf("onnx layernorm/gelu/softmax (%s batch): ORT vs classic ref "
               "max rel err %.3g\n",
               fixed ? "fixed" : "symbolic", e);
        CHECK(e < 1e-5);
        free(ort);
    }
    cl_graph_free(&g);
}

/* ---- 3. MindSpore ----------------------------------------------------- */

enum { MS_MINDCV = 0, MS_ZOO = 1 };

/* The MindSpore name of graph tensor t in one of the two naming styles
 * (the inverse of the import's rules, written out independently). */
static void ms_name(const cl_graph *g, int t, int style, char *out, size_t n)
{
    const char *leaf = NULL;
    for (int i = 0; i < g->n_nodes && !leaf; i++) {
        const cl_node *nd = &g->nodes[i];
        if (nd->op != CL_OP_BATCHNORM2D)
            continue;
        if (nd->param[0] == t)
            leaf = "gamma";
        else if (nd->param[1] == t)
            leaf = "beta";
        else if (nd->buf[0] == t)
            leaf = "moving_mean";
        else if (nd->buf[1] == t)
            leaf = "moving_variance";
    }
    char base[128];
    snprintf(base, sizeof base, "%s", g->tensors[t].name);
    if (leaf)
        *strrchr(base, '.') = '\0';
    char tmp[160] = "";
    const char *p = base;
    while (*p) {
        if (strncmp(p, "downsample", 10) == 0) {
            strcat(tmp, style == MS_ZOO ? "down_sample_layer" : "down_sample");
            p += 10;
        } else if (p == base && strncmp(p, "fc.", 3) == 0) {
            strcat(tmp, style == MS_ZOO ? "end_point." : "classifier.");
            p += 3;
        } else {
            size_t l = strlen(tmp);
            tmp[l] = *p++;
            tmp[l + 1] = '\0';
        }
    }
    snprintf(out, n, "%s%s%s", tmp, leaf ? "." : "", leaf ? leaf : "");
}

/* Appends one Checkpoint.Value (tag, TensorProto) to w. */
static void ms_value(cl_pb_writer *w, const char *tag, const int64_t *dims,
                     int ndim, const char *dtype, const void *data,
                     size_t nbytes)
{
    cl_pb_writer v, t;
    cl_pb_writer_init(&v);
    cl_pb_writer_init(&t);
    for (int i = 0; i < ndim; i++)
        cl_pb_put_int64(&t, 1, dims[i]);
    cl_pb_put_string(&t, 2, dtype);
    cl_pb_put_bytes(&t, 3, data, nbytes);
    cl_pb_put_string(&v, 1, tag);
    cl_pb_put_message(&v, 2, &t);
    cl_pb_put_message(w, 1, &v);
    cl_pb_writer_free(&t);
    cl_pb_writer_free(&v);
}

typedef struct ms_opts {
    int style;
    int optimizer;      /* add moments.*, learning_rate, global_step */
    int fc_f64;         /* the classifier as Float64 */
    const char *drop;   /* skip this torchvision name */
    const char *extra;  /* add this unknown name */
    const char *as_int; /* write this torchvision name as Int32 */
} ms_opts;

/* A MindSpore checkpoint of g's weights at path. */
static int write_ms_ckpt(const char *path, const cl_graph *g, const ms_opts *o)
{
    cl_pb_writer w;
    cl_pb_writer_init(&w);
    double *f64 = NULL;
    for (int t = 0; t < g->n_tensors; t++) {
        const cl_gtensor *gt = &g->tensors[t];
        if ((gt->kind != CL_GT_PARAM && gt->kind != CL_GT_BUFFER) ||
            ends_with(gt->name, "num_batches_tracked"))
            continue;
        if (o->drop && strcmp(gt->name, o->drop) == 0)
            continue;
        char name[160];
        ms_name(g, t, o->style, name, sizeof name);
        const float *v = gt->kind == CL_GT_PARAM ? cl_graph_param(g, t)
                                                 : cl_graph_buffer(g, t);
        size_t n = (size_t)cl_graph_numel(g, t);
        const char *dtype = "Float32";
        const void *data = v;
        size_t nb = n * 4;
        if (o->fc_f64 && strncmp(gt->name, "fc.", 3) == 0) {
            f64 = realloc(f64, n * sizeof(double));
            for (size_t i = 0; i < n; i++)
                f64[i] = v[i];
            dtype = "Float64";
            data = f64;
            nb = n * 8;
        }
        if (o->as_int && strcmp(gt->name, o->as_int) == 0)
            dtype = "Int32";
        ms_value(&w, name, gt->shape.d, gt->shape.ndim, dtype, data, nb);
        if (o->optimizer && gt->kind == CL_GT_PARAM) {
            char mom[200];
            snprintf(mom, sizeof mom, "moments.%s", name);
            ms_value(&w, mom, gt->shape.d, gt->shape.ndim, "Float32", v, n * 4);
        }
    }
    if (o->optimizer) {
        float lr = 0.1f;
        int32_t step = 1234;
        int64_t one = 1;
        ms_value(&w, "learning_rate", &one, 1, "Float32", &lr, 4);
        ms_value(&w, "global_step", &one, 1, "Int32", &step, 4);
    }
    if (o->extra) {
        float z[4] = {0};
        int64_t four = 4;
        ms_value(&w, o->extra, &four, 1, "Float32", z, sizeof z);
    }
    free(f64);
    int rc = w.err == CL_OK ? 0 : -1;
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(w.p, 1, w.n, f) != w.n)
        rc = -1;
    if (f && fclose(f) != 0)
        rc = -1;
    cl_pb_writer_free(&w);
    return rc;
}

static int count_weights(const cl_graph *g)
{
    int n = 0;
    for (int t = 0; t < g->n_tensors; t++)
        if ((g->tensors[t].kind == CL_GT_PARAM ||
             g->tensors[t].kind == CL_GT_BUFFER) &&
            !ends_with(g->tensors[t].name, "num_batches_tracked"))
            n++;
    return n;
}

/* mindcv names with optimizer entries: every weight arrives bit-exact, the
 * optimizer entries are ignored and counted; `classic convert` gives a
 * checkpoint whose logits are the original model's. */
CL_TEST(mindspore_mindcv_resnet18)
{
    const char *ck = cl_test_path("r18.ckpt");
    const char *st = cl_test_path("r18.safetensors");
    cl_graph g1, g2;
    REQUIRE_OK(build_resnet(&g1, 18, 3, 32, 2));
    golden_fill(&g1);
    ms_opts o = {MS_MINDCV, 1, 0, NULL, NULL, NULL};
    REQUIRE(write_ms_ckpt(ck, &g1, &o) == 0);
    REQUIRE_OK(build_resnet(&g2, 18, 3, 32, 2));
    cl_ms_report rep;
    CHECK_OK(cl_ms_load(ck, &g2, CL_CKPT_STRICT, &rep));
    CHECK(rep.loaded == count_weights(&g1));
    /* 62 moments (one per parameter) + learning_rate + global_step. */
    int n_params = 0;
    for (int t = 0; t < g1.n_tensors; t++)
        n_params += g1.tensors[t].kind == CL_GT_PARAM;
    CHECK(rep.ignored == n_params + 2);
    CHECK(strstr(rep.ignored_list, "moments.conv1.weight") != NULL);
    CHECK(memcmp(g1.params, g2.params, g1.n_param_floats * 4) == 0);
    CHECK(memcmp(g1.buffers, g2.buffers, g1.n_buffer_floats * 4) == 0);

    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s convert %s %s --arch resnet18 --image_size 32 "
             "--class_names cat,dog,owl",
             getenv("CLASSIC_BIN"), ck, st);
    REQUIRE(cl_test_run(cmd) == 0);
    float x[2 * 3 * 32 * 32], want[6], got[6];
    make_images(x, 2, 32, 5);
    CHECK_OK(run_logits(&g1, "ref", x, want));
    cl_model m;
    REQUIRE_OK(cl_model_open(&m, st, 2, "ref", CL_PLAN_INFER, 0));
    CHECK(strcmp(m.class_names[2], "owl") == 0 && m.num_classes == 3);
    CHECK_OK(cl_backend_set_input(m.be, x, NULL, NULL));
    CHECK_OK(cl_backend_forward(m.be, 0, NULL));
    CHECK_OK(cl_backend_read(m.be, m.g.logits, got));
    CHECK(memcmp(got, want, sizeof got) == 0);
    cl_model_close(&m);

    /* The .ckpt opens as a model by itself: the arch inferred from the
     * mapped names, every weight as written; `classic info` shows it. */
    REQUIRE_OK(cl_model_open_as(&m, ck, NULL, 1, NULL, CL_PLAN_INFER, 0));
    CHECK(m.arch.resnet.depth == 18 && m.num_classes == 3 && m.foreign);
    CHECK(m.g.n_param_floats == g1.n_param_floats &&
          memcmp(m.g.params, g1.params, g1.n_param_floats * 4) == 0);
    cl_model_close(&m);
    CHECK_ERR(cl_model_open_as(&m, ck, "resnet34", 1, NULL, CL_PLAN_INFER, 0),
              CL_ERR_SHAPE, "blocks are those of resnet18");
    snprintf(cmd, sizeof cmd, "%s info --checkpoint %s > %s 2>&1",
             getenv("CLASSIC_BIN"), ck, cl_test_path("info.txt"));
    CHECK(cl_test_run(cmd) == 0);
    size_t n_info = 0;
    char *info = cl_test_read_file(cl_test_path("info.txt"), &n_info);
    CHECK(info && strstr(info, "resnet18, imagenet stem, 3 input channel(s), "
                               "3 classes") != NULL);
    free(info);

    /* --pretrained dispatch: both kinds into a fresh graph. */
    char note[1024];
    cl_graph g3;
    REQUIRE_OK(build_resnet(&g3, 18, 3, 32, 2));
    CHECK_OK(cl_interop_load_pretrained(ck, &g3, CL_CKPT_PRETRAINED, note,
                                        sizeof note));
    CHECK(strstr(note, "MindSpore") != NULL);
    CHECK(memcmp(g1.params, g3.params, g1.n_param_floats * 4) == 0);
    memset(g3.params, 0, g3.n_param_floats * 4);
    CHECK_OK(cl_interop_load_pretrained(st, &g3, CL_CKPT_PRETRAINED, note,
                                        sizeof note));
    CHECK(strstr(note, "safetensors") != NULL);
    CHECK(memcmp(g1.params, g3.params, g1.n_param_floats * 4) == 0);
    CHECK_ERR(cl_interop_load_pretrained(CL_SOURCE_DIR "/CMakeLists.txt", &g3,
                                         CL_CKPT_PRETRAINED, NULL, 0),
              CL_ERR_FORMAT, "neither safetensors nor");
    cl_graph_free(&g3);
    cl_graph_free(&g2);
    cl_graph_free(&g1);
}

/* Model-zoo names (down_sample_layer, end_point), the classifier in
 * Float64; fine-tuning onto another num_classes keeps the fresh head. */
CL_TEST(mindspore_modelzoo_resnet50)
{
    const char *ck = cl_test_path("r50.ckpt");
    cl_graph g1, g2, g3;
    REQUIRE_OK(build_resnet(&g1, 50, 10, 32, 1));
    golden_fill(&g1);
    ms_opts o = {MS_ZOO, 0, 1, NULL, NULL, NULL};
    REQUIRE(write_ms_ckpt(ck, &g1, &o) == 0);
    REQUIRE_OK(build_resnet(&g2, 50, 10, 32, 1));
    cl_ms_report rep;
    CHECK_OK(cl_ms_load(ck, &g2, CL_CKPT_STRICT, &rep));
    CHECK(rep.loaded == count_weights(&g1) && rep.ignored == 0);
    CHECK(memcmp(g1.params, g2.params, g1.n_param_floats * 4) == 0);
    CHECK(memcmp(g1.buffers, g2.buffers, g1.n_buffer_floats * 4) == 0);

    REQUIRE_OK(build_resnet(&g3, 50, 4, 32, 1));
    CHECK_ERR(cl_ms_load(ck, &g3, CL_CKPT_STRICT, &rep), CL_ERR_FORMAT,
              "end_point.weight (10, 2048) in the file, (4, 2048)");
    CHECK_OK(cl_ms_load(ck, &g3, CL_CKPT_PRETRAINED, &rep));
    CHECK(rep.head_skipped == 2);
    CHECK(strstr(rep.head_note, "fc.weight") != NULL);
    int c1 = cl_graph_find(&g3, "layer4.2.conv3.weight");
    REQUIRE(c1 >= 0);
    CHECK(memcmp(cl_graph_param(&g3, c1), cl_graph_param(&g1, c1),
                 (size_t)cl_graph_numel(&g1, c1) * 4) == 0);
    cl_graph_free(&g3);
    cl_graph_free(&g2);
    cl_graph_free(&g1);
}

/* Names and shapes that do not fit are refused, listed, and the graph is
 * left as it was. */
CL_TEST(mindspore_refusals)
{
    const char *ck = cl_test_path("bad.ckpt");
    cl_graph g1, g2, g50;
    REQUIRE_OK(build_resnet(&g1, 18, 3, 32, 1));
    golden_fill(&g1);
    REQUIRE_OK(build_resnet(&g2, 18, 3, 32, 1));
    ms_opts o = {MS_MINDCV, 0, 0, NULL, "layer9.0.conv1.weight", NULL};
    REQUIRE(write_ms_ckpt(ck, &g1, &o) == 0);
    CHECK_ERR(cl_ms_load(ck, &g2, CL_CKPT_STRICT, NULL), CL_ERR_FORMAT,
              "1 unknown name(s) [layer9.0.conv1.weight]");
    CHECK(strstr(cl_last_error(), ck) != NULL);

    ms_opts o2 = {MS_MINDCV, 0, 0, "layer1.0.bn1.running_mean", NULL, NULL};
    REQUIRE(write_ms_ckpt(ck, &g1, &o2) == 0);
    CHECK_ERR(cl_ms_load(ck, &g2, CL_CKPT_STRICT, NULL), CL_ERR_FORMAT,
              "1 missing [layer1.0.bn1.running_mean]");

    ms_opts o3 = {MS_MINDCV, 0, 0, NULL, NULL, "layer2.0.conv1.weight"};
    REQUIRE(write_ms_ckpt(ck, &g1, &o3) == 0);
    CHECK_ERR(cl_ms_load(ck, &g2, CL_CKPT_STRICT, NULL), CL_ERR_FORMAT,
              "layer2.0.conv1.weight is Int32");

    /* A resnet50 file for a resnet18 model: shapes and names differ. */
    REQUIRE_OK(build_resnet(&g50, 50, 3, 32, 1));
    ms_opts o4 = {MS_MINDCV, 0, 0, NULL, NULL, NULL};
    REQUIRE(write_ms_ckpt(ck, &g50, &o4) == 0);
    CHECK_ERR(cl_ms_load(ck, &g2, CL_CKPT_STRICT, NULL), CL_ERR_FORMAT,
              "layer1.0.conv1.weight (64, 64, 1, 1) in the file, (64, 64, "
              "3, 3) in the model");
    CHECK(strstr(cl_last_error(), "unknown name(s) [layer1.0.conv3.weight"));
    /* Nothing was copied by any refused load. */
    for (size_t i = 0; i < g2.n_param_floats; i++)
        if (g2.params[i] != 0) {
            CHECK(!"a refused load changed the graph");
            break;
        }
    /* classic convert reports the same and writes nothing. */
    char cmd[2048];
    const char *st = cl_test_path("bad.safetensors");
    snprintf(cmd, sizeof cmd, "%s convert %s %s --arch resnet18 2>/dev/null",
             getenv("CLASSIC_BIN"), ck, st);
    CHECK(cl_test_run(cmd) == 1);
    FILE *f = fopen(st, "rb");
    CHECK(f == NULL);
    if (f)
        fclose(f);
    cl_graph_free(&g50);
    cl_graph_free(&g2);
    cl_graph_free(&g1);
}

/* Every truncation of a checkpoint fails naming the file and an offset,
 * except cuts exactly between two values (a shorter, valid file). */
CL_TEST(mindspore_truncated)
{
    cl_pb_writer w;
    cl_pb_writer_init(&w);
    float a[6] = {1, 2, 3, 4, 5, 6};
    int64_t d23[2] = {2, 3}, d6 = 6;
    size_t bounds[4];
    int nb = 0;
    bounds[nb++] = 0;
    ms_value(&w, "conv1.weight", d23, 2, "Float32", a, sizeof a);
    bounds[nb++] = w.n;
    ms_value(&w, "bn1.gamma", &d6, 1, "Float32", a, sizeof a);
    bounds[nb++] = w.n;
    ms_value(&w, "learning_rate", &d6, 1, "Float32", a, sizeof a);
    bounds[nb++] = w.n;
    REQUIRE(w.err == CL_OK);
    const char *path = cl_test_path("cut.ckpt");
    int bad_msgs = 0;
    for (size_t len = 0; len < w.n; len++) {
        FILE *f = fopen(path, "wb");
        REQUIRE(f && fwrite(w.p, 1, len, f) == len && fclose(f) == 0);
        cl_ms_ckpt c;
        cl_status s = cl_ms_ckpt_open(&c, path);
        int boundary = 0;
        for (int i = 1; i < nb; i++)
            boundary |= len == bounds[i];
        if (boundary) {
            CHECK(s == CL_OK);
            if (s == CL_OK)
                cl_ms_ckpt_close(&c);
        } else if (s != CL_ERR_FORMAT || !strstr(cl_last_error(), path) ||
                   (len > 0 && !strstr(cl_last_error(), "offset"))) {
            if (bad_msgs++ < 3)
                printf("cut at %zu: %s: %s\n", len, cl_status_name(s),
                       cl_last_error());
            CHECK(!"truncation not refused with file and offset");
            if (s == CL_OK)
                cl_ms_ckpt_close(&c);
        }
    }
    cl_ms_ckpt c;
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(w.p, 1, w.n, f) == w.n && fclose(f) == 0);
    REQUIRE_OK(cl_ms_ckpt_open(&c, path));
    CHECK(c.n == 3 && c.t[1].shape.d[0] == 6 &&
          strcmp(c.t[1].name, "bn1.gamma") == 0);
    cl_ms_ckpt_close(&c);
    cl_pb_writer_free(&w);

    /* A real model's checkpoint cut short, through the loader. */
    cl_graph g;
    REQUIRE_OK(build_resnet(&g, 18, 3, 32, 1));
    golden_fill(&g);
    const char *ck = cl_test_path("r18cut.ckpt");
    ms_opts o = {MS_MINDCV, 0, 0, NULL, NULL, NULL};
    REQUIRE(write_ms_ckpt(ck, &g, &o) == 0);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "truncate -s -1000 %s", ck);
    REQUIRE(cl_test_run(cmd) == 0);
    CHECK_ERR(cl_ms_load(ck, &g, CL_CKPT_STRICT, NULL), CL_ERR_FORMAT, "only");
    CHECK(strstr(cl_last_error(), "offset") && strstr(cl_last_error(), ck));
    cl_graph_free(&g);
}

static cl_status open_bytes(const void *p, size_t n)
{
    const char *path = cl_test_path("hostile.ckpt");
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0)
        return CL_ERR_IO;
    cl_ms_ckpt c;
    cl_status s = cl_ms_ckpt_open(&c, path);
    if (s == CL_OK)
        cl_ms_ckpt_close(&c);
    else if (!strstr(cl_last_error(), path))
        cl_test_fail(__FILE__, __LINE__, "message '%s' lacks the path",
                     cl_last_error());
    return s;
}

/* Hostile protobuf: lengths beyond the buffer, over-long varints, wrong
 * wire types, dims that overflow or disagree with the content. */
CL_TEST(mindspore_hostile)
{
    const unsigned char huge[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0xff,
                                  0xff, 0xff, 0xff, 0xff, 0x01};
    CHECK_ERR(open_bytes(huge, sizeof huge), CL_ERR_FORMAT, "claims");
    const unsigned char long_varint[] = {0x0a, 0x80, 0x80, 0x80, 0x80, 0x80,
                                         0x80, 0x80, 0x80, 0x80, 0x80, 0x01};
    CHECK_ERR(open_bytes(long_varint, sizeof long_varint), CL_ERR_FORMAT,
              "longer than 64 bits");
    const unsigned char group[] = {0x0b, 0x0c};
    CHECK_ERR(open_bytes(group, sizeof group), CL_ERR_FORMAT, "wire type 3");
    const unsigned char other[] = {0x12, 0x00};
    CHECK_ERR(open_bytes(other, sizeof other), CL_ERR_FORMAT,
              "not a MindSpore checkpoint");
    CHECK_ERR(open_bytes("", 0), CL_ERR_FORMAT, "empty file");
    /* A value of 5 bytes whose tag claims 100. */
    const unsigned char nested[] = {0x0a, 0x05, 0x0a, 0x64, 'a', 'b', 'c'};
    CHECK_ERR(open_bytes(nested, sizeof nested), CL_ERR_FORMAT,
              "offset 2: field 1 claims 100 bytes");

    cl_pb_writer w;
    float one = 1;
    int64_t big = 1000000, neg = -1;
    int64_t over[3] = {(int64_t)1 << 40, (int64_t)1 << 40, (int64_t)1 << 40};
    cl_pb_writer_init(&w);
    ms_value(&w, "fc.bias", &big, 1, "Float32", &one, 4);
    CHECK_ERR(open_bytes(w.p, w.n), CL_ERR_FORMAT,
              "'fc.bias' (Float32) has 4 bytes of content, its dims need "
              "4000000");
    cl_pb_writer_free(&w);
    cl_pb_writer_init(&w);
    ms_value(&w, "fc.bias", &neg, 1, "Float32", &one, 4);
    CHECK_ERR(open_bytes(w.p, w.n), CL_ERR_FORMAT, "has dim -1");
    cl_pb_writer_free(&w);
    cl_pb_writer_init(&w);
    ms_value(&w, "fc.bias", over, 3, "Float32", &one, 4);
    CHECK_ERR(open_bytes(w.p, w.n), CL_ERR_FORMAT, "dims overflow");
    cl_pb_writer_free(&w);
    cl_pb_writer_init(&w);
    ms_value(&w, "fc.bias", NULL, 0, "Float32", &one, 4);
    ms_value(&w, "fc.bias", NULL, 0, "Float32", &one, 4);
    CHECK_ERR(open_bytes(w.p, w.n), CL_ERR_UNSUPPORTED, "appears twice");
    cl_pb_writer_free(&w);
    char longtag[300];
    memset(longtag, 'x', sizeof longtag - 1);
    longtag[sizeof longtag - 1] = '\0';
    cl_pb_writer_init(&w);
    ms_value(&w, longtag, NULL, 0, "Float32", &one, 4);
    CHECK_ERR(open_bytes(w.p, w.n), CL_ERR_FORMAT, "tag of 299 bytes");
    cl_pb_writer_free(&w);
    /* A value without its tensor. */
    cl_pb_writer v;
    cl_pb_writer_init(&w);
    cl_pb_writer_init(&v);
    cl_pb_put_string(&v, 1, "conv1.weight");
    cl_pb_put_message(&w, 1, &v);
    CHECK_ERR(open_bytes(w.p, w.n), CL_ERR_FORMAT, "value lacks its tensor");
    cl_pb_writer_free(&v);
    cl_pb_writer_free(&w);
    /* More values than any model has: refused before the index grows
     * without bound (and duplicates are found in n log n, not n^2). */
    cl_pb_writer_init(&w);
    for (int i = 0; i <= 100000 && w.err == CL_OK; i++) {
        char tag[16];
        snprintf(tag, sizeof tag, "t%d", i);
        ms_value(&w, tag, NULL, 0, "str", "", 0);
    }
    CHECK_ERR(open_bytes(w.p, w.n), CL_ERR_LIMIT, "more than 100000 tensors");
    cl_pb_writer_free(&w);
    /* Random bytes after a valid prefix never crash the reader. */
    uint32_t st = 12345;
    unsigned char junk[512];
    int refused = 0;
    for (int trial = 0; trial < 200; trial++) {
        for (size_t i = 0; i < sizeof junk; i++) {
            st = st * 1103515245u + 12345u;
            junk[i] = (unsigned char)(st >> 16);
        }
        junk[0] = 0x0a;
        refused += open_bytes(junk, sizeof junk) != CL_OK;
    }
    CHECK(refused == 200);
}

/* The name rules, one by one (docs/interop.md has the table). */
CL_TEST(mindspore_name_rules)
{
    static const char *const cases[][2] = {
        {"conv1.weight", "conv1.weight"},
        {"bn1.gamma", "bn1.weight"},
        {"bn1.beta", "bn1.bias"},
        {"bn1.moving_mean", "bn1.running_mean"},
        {"bn1.moving_variance", "bn1.running_var"},
        {"layer1.0.down_sample_layer.0.weight", "layer1.0.downsample.0.weight"},
        {"layer2.0.down_sample.1.gamma", "layer2.0.downsample.1.weight"},
        {"end_point.weight", "fc.weight"},
        {"classifier.bias", "fc.bias"},
        {"layer1.1.bn1d.beta", "layer1.1.bn1.bias"},
        {"network.backbone.conv1.weight", "conv1.weight"},
    };
    char out[160];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(cl_ms_map_name(cases[i][0], out, sizeof out) == 1);
        if (strcmp(out, cases[i][1]) != 0)
            printf("%s -> %s (want %s)\n", cases[i][0], out, cases[i][1]);
        CHECK(strcmp(out, cases[i][1]) == 0);
    }
    static const char *const ignored[] = {"moments.conv1.weight",
                                          "learning_rate",
                                          "global_step",
                                          "adam_m.fc.weight",
                                          "network.moments.bn1.gamma",
                                          "scale_sense"};
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
        CHECK(cl_ms_map_name(ignored[i], out, sizeof out) == 0);
}

/* ---- MindSpore: mindcv's Swin ----------------------------------------- */

static cl_status build_swin_micro(cl_graph *g, int k, int batch)
{
    cl_arch a;
    CL_TRY(cl_arch_parse("swin_micro", NULL, &a));
    cl_arch_set_io(&a, 3, k);
    CL_TRY(cl_graph_init(g, batch));
    cl_status s = cl_arch_build(g, &a, 32, 32, 0, 0.0f);
    if (s != CL_OK)
        cl_graph_free(g);
    return s;
}

/* Distinct values in every parameter (norm scales near 1). */
static void swin_fill(cl_graph *g)
{
    for (int t = 0; t < g->n_tensors; t++) {
        const cl_gtensor *gt = &g->tensors[t];
        if (gt->kind != CL_GT_PARAM)
            continue;
        float *v = cl_graph_param(g, t);
        int norm = strstr(gt->name, "norm") && ends_with(gt->name, ".weight");
        for (size_t j = 0; j < (size_t)cl_graph_numel(g, t); j++)
            v[j] = (float)((norm ? 1 : 0) + 0.1 * golden_s(gt->name, j));
    }
}

/* mindcv's name of torchvision name tv (the inverse of the import's
 * rules, written out independently); "" for qkv, written in parts. */
static void swin_ms_name(const char *tv, char *out, size_t n)
{
    static const char *const leaf[][2] = {
        {"norm1.weight", "norm1.gamma"},
        {"norm1.bias", "norm1.beta"},
        {"norm2.weight", "norm2.gamma"},
        {"norm2.bias", "norm2.beta"},
        {"attn.relative_position_bias_table",
         "attn.relative_bias.relative_position_bias_table"},
        {"attn.proj.weight", "attn.proj.weight"},
        {"attn.proj.bias", "attn.proj.bias"},
        {"mlp.0.weight", "mlp.fc1.weight"},
        {"mlp.0.bias", "mlp.fc1.bias"},
        {"mlp.3.weight", "mlp.fc2.weight"},
        {"mlp.3.bias", "mlp.fc2.bias"},
        {"reduction.weight", "downsample.reduction.weight"},
        {"norm.weight", "downsample.norm.gamma"},
        {"norm.bias", "downsample.norm.beta"}};
    int f = 0, b = 0, used = 0;
    out[0] = '\0';
    if (strncmp(tv, "features.0.0.", 13) == 0)
        snprintf(out, n, "patch_embed.proj.%s", tv + 13);
    else if (strcmp(tv, "features.0.2.weight") == 0)
        snprintf(out, n, "patch_embed.norm.gamma");
    else if (strcmp(tv, "features.0.2.bias") == 0)
        snprintf(out, n, "patch_embed.norm.beta");
    else if (strcmp(tv, "norm.weight") == 0)
        snprintf(out, n, "norm.gamma");
    else if (strcmp(tv, "norm.bias") == 0)
        snprintf(out, n, "norm.beta");
    else if (strncmp(tv, "head.", 5) == 0)
        snprintf(out, n, "classifier.%s", tv + 5);
    else if (sscanf(tv, "features.%d.%d.%n", &f, &b, &used) == 2 && used) {
        for (size_t i = 0; i < sizeof leaf / sizeof leaf[0]; i++)
            if (strcmp(tv + used, leaf[i][0]) == 0)
                snprintf(out, n, "layers.%d.blocks.%d.%s", (f - 1) / 2, b,
                         leaf[i][1]);
    } else if (sscanf(tv, "features.%d.%n", &f, &used) == 1 && used) {
        for (size_t i = 0; i < sizeof leaf / sizeof leaf[0]; i++)
            if (strcmp(tv + used, leaf[i][0]) == 0)
                snprintf(out, n, "layers.%d.%s", f / 2 - 1, leaf[i][1]);
    }
}

typedef struct swin_opts {
    const char *drop;   /* skip this mindcv name */
    const char *short_; /* write this mindcv name with half its rows */
} swin_opts;

/* A mindcv Swin checkpoint of g's weights: qkv split into q, k, v; the
 * one-hot bias index and the shifted blocks' attn_mask as mindcv saves
 * them; Momentum's moments; no relative_position_index. */
static int write_swin_ckpt(const char *path, const cl_graph *g,
                           const swin_opts *o)
{
    cl_pb_writer w;
    cl_pb_writer_init(&w);
    for (int t = 0; t < g->n_tensors; t++) {
        const cl_gtensor *gt = &g->tensors[t];
        if (!cl_gtensor_saved(gt) ||
            ends_with(gt->name, "relative_position_index"))
            continue;
        const float *v = cl_graph_param(g, t);
        int64_t d[CL_MAX_DIMS];
        for (int i = 0; i < gt->shape.ndim; i++)
            d[i] = gt->shape.d[i];
        size_t n = (size_t)cl_graph_numel(g, t);
        char name[200];
        const char *qkv = strstr(gt->name, "attn.qkv.");
        int parts = qkv ? 3 : 1;
        for (int k = 0; k < parts; k++) {
            if (qkv) {
                int f = 0, b = 0;
                sscanf(gt->name, "features.%d.%d.", &f, &b);
                snprintf(name, sizeof name, "layers.%d.blocks.%d.attn.%c.%s",
                         (f - 1) / 2, b, "qkv"[k], qkv + 9);
                d[0] = gt->shape.d[0] / 3;
            } else {
                swin_ms_name(gt->name, name, sizeof name);
            }
            if (!name[0])
                return -1;
            if (o && o->drop && strcmp(name, o->drop) == 0)
                continue;
            int64_t rows = d[0];
            if (o && o->short_ && strcmp(name, o->short_) == 0)
                d[0] /= 2;
            size_t each = n / (size_t)parts;
            size_t nb = each / (size_t)rows * (size_t)d[0] * 4;
            ms_value(&w, name, d, gt->shape.ndim, "Float32",
                     v + (size_t)k * each, nb);
            d[0] = rows;
            char mom[220];
            snprintf(mom, sizeof mom, "moments.%s", name);
            ms_value(&w, mom, d, gt->shape.ndim, "Float32",
                     v + (size_t)k * each, each * 4);
        }
        if (ends_with(gt->name, "attn.relative_position_bias_table")) {
            /* The one-hot of the index: (N*N, table rows), derived. */
            int f = 0, b = 0;
            sscanf(gt->name, "features.%d.%d.", &f, &b);
            int64_t rows = gt->shape.d[0], ws = 1;
            while ((2 * ws - 1) * (2 * ws - 1) < rows)
                ws++;
            int64_t nn = ws * ws * ws * ws, dd[5] = {nn, rows};
            float *oh = calloc((size_t)(nn * rows), sizeof *oh);
            if (!oh)
                return -1;
            snprintf(name, sizeof name,
                     "layers.%d.blocks.%d.attn.relative_bias.index",
                     (f - 1) / 2, b);
            ms_value(&w, name, dd, 2, "Float32", oh, (size_t)(nn * rows) * 4);
            if (b % 2 == 1) {
                int64_t md[5] = {1, 4, 1, ws * ws, ws * ws};
                snprintf(name, sizeof name, "layers.%d.blocks.%d.attn_mask",
                         (f - 1) / 2, b);
                ms_value(&w, name, md, 5, "Float32", oh, (size_t)(4 * nn) * 4);
            }
            free(oh);
        }
    }
    float lr = 0.1f;
    int64_t one = 1;
    ms_value(&w, "learning_rate", &one, 1, "Float32", &lr, 4);
    int rc = w.err == CL_OK ? 0 : -1;
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(w.p, 1, w.n, f) != w.n)
        rc = -1;
    if (f && fclose(f) != 0)
        rc = -1;
    cl_pb_writer_free(&w);
    return rc;
}

static int count_saved(const cl_graph *g, int *n_params)
{
    int n = 0;
    *n_params = 0;
    for (int t = 0; t < g->n_tensors; t++)
        if (cl_gtensor_saved(&g->tensors[t]) &&
            !ends_with(g->tensors[t].name, "relative_position_index")) {
            n++;
            *n_params += g->tensors[t].kind == CL_GT_PARAM;
        }
    return n;
}

/* A mindcv swin_micro checkpoint written from a classic graph: every
 * tensor arrives equal to its source (qkv from q, k, v), the logits are the
 * graph's; derived and optimizer entries are ignored; convert, opening the
 * .ckpt as a model, --pretrained and `classic info` all read it. */
CL_TEST(mindspore_mindcv_swin_micro)
{
    const char *ck = cl_test_path("swin.ckpt");
    const char *st = cl_test_path("swin.safetensors");
    cl_graph g1, g2;
    REQUIRE_OK(build_swin_micro(&g1, 3, 2));
    swin_fill(&g1);
    REQUIRE(write_swin_ckpt(ck, &g1, NULL) == 0);
    REQUIRE_OK(build_swin_micro(&g2, 3, 2));
    cl_ms_report rep;
    CHECK_OK(cl_ms_load(ck, &g2, CL_CKPT_STRICT, &rep));
    int n_params = 0, n_saved = count_saved(&g1, &n_params);
    CHECK(rep.loaded == n_saved);
    /* A moment per mindcv tensor (q, k, v: three per qkv), an index per
     * block, a mask per shifted block, learning_rate. */
    int n_qkv = 0, n_blocks = 0, n_shifted = 0;
    for (int t = 0; t < g1.n_tensors; t++) {
        int f = 0, b = 0;
        const char *nm = g1.tensors[t].name;
        n_qkv += strstr(nm, "attn.qkv.") != NULL;
        if (ends_with(nm, "relative_position_bias_table") &&
            sscanf(nm, "features.%d.%d.", &f, &b) == 2) {
            n_blocks++;
            n_shifted += b % 2;
        }
    }
    CHECK(rep.ignored == n_params + 2 * n_qkv + n_blocks + n_shifted + 1);
    CHECK(memcmp(g1.params, g2.params, g1.n_param_floats * 4) == 0);
    CHECK(memcmp(g1.buffers, g2.buffers, g1.n_buffer_floats * 4) == 0);
    int qkv = cl_graph_find(&g2, "features.3.1.attn.qkv.weight");
    REQUIRE(qkv >= 0);
    CHECK(memcmp(cl_graph_param(&g1, qkv), cl_graph_param(&g2, qkv),
                 (size_t)cl_graph_numel(&g1, qkv) * 4) == 0);
    float x[2 * 3 * 32 * 32], want[6], got[6];
    make_images(x, 2, 32, 7);
    CHECK_OK(run_logits(&g1, "ref", x, want));
    CHECK_OK(run_logits(&g2, "ref", x, got));
    CHECK(memcmp(got, want, sizeof got) == 0);
    CHECK(isfinite(want[0]) && want[0] != want[1]);

    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s convert %s %s --arch swin_micro --image_size 32",
             getenv("CLASSIC_BIN"), ck, st);
    REQUIRE(cl_test_run(cmd) == 0);
    cl_model m;
    REQUIRE_OK(cl_model_open(&m, st, 2, "ref", CL_PLAN_INFER, 0));
    CHECK(m.num_classes == 3);
    CHECK_OK(cl_backend_set_input(m.be, x, NULL, NULL));
    CHECK_OK(cl_backend_forward(m.be, 0, NULL));
    CHECK_OK(cl_backend_read(m.be, m.g.logits, got));
    CHECK(memcmp(got, want, sizeof got) == 0);
    cl_model_close(&m);

    /* Opened as a model: swin_micro inferred, each relative_position_index
     * computed as the builder fills it. */
    REQUIRE_OK(cl_model_open_as(&m, ck, NULL, 1, NULL, CL_PLAN_INFER, 0));
    CHECK(m.arch.family == CL_ARCH_SWIN && m.num_classes == 3 && m.foreign);
    CHECK(m.g.n_param_floats == g1.n_param_floats &&
          memcmp(m.g.params, g1.params, g1.n_param_floats * 4) == 0);
    int ri = cl_graph_find(&m.g, "features.5.3.attn.relative_position_index");
    REQUIRE(ri >= 0);
    CHECK(memcmp(cl_graph_buffer_i64(&m.g, ri), cl_graph_buffer_i64(&g1, ri),
                 (size_t)cl_graph_numel(&g1, ri) * 8) == 0);
    cl_model_close(&m);
    CHECK_ERR(cl_model_open_as(&m, ck, "swin_t", 1, NULL, CL_PLAN_INFER, 0),
              CL_ERR_SHAPE, "are those of swin_micro");
    snprintf(cmd, sizeof cmd, "%s info --checkpoint %s > %s 2>&1",
             getenv("CLASSIC_BIN"), ck, cl_test_path("info.txt"));
    CHECK(cl_test_run(cmd) == 0);
    size_t n_info = 0;
    char *info = cl_test_read_file(cl_test_path("info.txt"), &n_info);
    CHECK(info && strstr(info, "swin_micro") != NULL);
    free(info);

    char note[1024];
    cl_graph g3;
    REQUIRE_OK(build_swin_micro(&g3, 3, 2));
    CHECK_OK(cl_interop_load_pretrained(ck, &g3, CL_CKPT_PRETRAINED, note,
                                        sizeof note));
    CHECK(strstr(note, "MindSpore") != NULL);
    CHECK(memcmp(g1.params, g3.params, g1.n_param_floats * 4) == 0);
    cl_graph_free(&g3);
    /* Another num_classes: the head stays as initialised. */
    REQUIRE_OK(build_swin_micro(&g3, 5, 2));
    CHECK_ERR(cl_ms_load(ck, &g3, CL_CKPT_STRICT, &rep), CL_ERR_FORMAT,
              "classifier.weight (3, 256) in the file, (5, 256)");
    CHECK_OK(cl_ms_load(ck, &g3, CL_CKPT_PRETRAINED, &rep));
    CHECK(rep.head_skipped == 2);
    cl_graph_free(&g3);
    /* A Swin file for a ResNet and the reverse. */
    REQUIRE_OK(build_resnet(&g3, 18, 3, 32, 1));
    CHECK_ERR(cl_ms_load(ck, &g3, CL_CKPT_STRICT, NULL), CL_ERR_FORMAT,
              "a MindSpore Swin checkpoint (by its names) for a ResNet");
    cl_graph_free(&g3);
    cl_graph_free(&g2);
    cl_graph_free(&g1);
}

/* q missing, k of another shape: refused in one sentence naming them, by
 * the loader and by the named source alike. */
CL_TEST(mindspore_swin_refusals)
{
    const char *ck = cl_test_path("swin_bad.ckpt");
    cl_graph g1, g2;
    cl_model m;
    REQUIRE_OK(build_swin_micro(&g1, 3, 1));
    swin_fill(&g1);
    REQUIRE_OK(build_swin_micro(&g2, 3, 1));
    swin_opts o = {"layers.0.blocks.1.attn.q.weight", NULL};
    REQUIRE(write_swin_ckpt(ck, &g1, &o) == 0);
    CHECK_ERR(cl_ms_load(ck, &g2, CL_CKPT_STRICT, NULL), CL_ERR_FORMAT,
              "layers.0.blocks.1.attn.q.weight missing "
              "(features.1.1.attn.qkv.weight stacks q, k and v)");
    CHECK_ERR(cl_model_open_as(&m, ck, NULL, 1, NULL, CL_PLAN_INFER, 0),
              CL_ERR_FORMAT, "layers.0.blocks.1.attn.q.weight missing");
    swin_opts o2 = {NULL, "layers.2.blocks.0.attn.k.bias"};
    REQUIRE(write_swin_ckpt(ck, &g1, &o2) == 0);
    CHECK_ERR(cl_ms_load(ck, &g2, CL_CKPT_STRICT, NULL), CL_ERR_FORMAT,
              "layers.2.blocks.0.attn.k.bias is (128) where q is (256) (q, "
              "k and v must have one shape to stack into "
              "features.5.0.attn.qkv.bias)");
    CHECK_ERR(cl_model_open_as(&m, ck, NULL, 1, NULL, CL_PLAN_INFER, 0),
              CL_ERR_FORMAT, "layers.2.blocks.0.attn.k.bias is (128)");
    /* Another tensor missing is named as before. */
    swin_opts o3 = {"layers.1.downsample.norm.gamma", NULL};
    REQUIRE(write_swin_ckpt(ck, &g1, &o3) == 0);
    CHECK_ERR(cl_ms_load(ck, &g2, CL_CKPT_STRICT, NULL), CL_ERR_FORMAT,
              "1 missing [features.4.norm.weight]");
    cl_graph_free(&g2);
    cl_graph_free(&g1);
}

/* The Swin rules name by name: whole names, stage and block written
 * plainly, derived tensors ignored. */
CL_TEST(mindspore_swin_name_rules)
{
    static const struct {
        const char *ms, *tv;
        int part;
    } cases[] = {
        {"network.layers.1.blocks.0.attn.k.bias", "features.3.0.attn.qkv.bias",
         1},
        {"layers.0.blocks.1.attn.v.weight", "features.1.1.attn.qkv.weight", 2},
        {"layers.2.blocks.5.mlp.fc2.bias", "features.5.5.mlp.3.bias", -1},
        {"layers.2.downsample.norm.beta", "features.6.norm.bias", -1},
        {"layers.0.downsample.reduction.weight", "features.2.reduction.weight",
         -1},
        {"patch_embed.norm.gamma", "features.0.2.weight", -1},
        {"classifier.bias", "head.bias", -1}};
    char out[160];
    int part;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(cl_ms_map_swin_name(cases[i].ms, out, sizeof out, &part) == 1);
        CHECK(strcmp(out, cases[i].tv) == 0 && part == cases[i].part);
    }
    static const char *const ignored[] = {
        "layers.0.blocks.1.attn_mask",
        "layers.3.blocks.0.attn.relative_bias.index",
        "adam_m.layers.0.blocks.0.attn.q.weight", "global_step"};
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
        CHECK(cl_ms_map_swin_name(ignored[i], out, sizeof out, &part) == 0);
    static const char *const unknown[] = {
        "layers.01.blocks.0.norm1.gamma", "layers.0.blocks.0.attn.qkv.weight",
        "absolute_pos_embed", "layers.0.blocks.0.norm1.weight", "fc.weight"};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        CHECK(cl_ms_map_swin_name(unknown[i], out, sizeof out, &part) == -1);
}
