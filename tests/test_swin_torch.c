/* Swin against torchvision on the same weights: a seeded swin_micro and
 * swin_t converted by tools/torch2safetensors.py, opened as `classic
 * predict` opens a checkpoint, their logits held to torch's on both
 * backends and in ONNX Runtime (the model `classic export` writes); then
 * back to a .pth that torchvision loads with strict=True.
 * ctest-labels: interop */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "harness.h"
#include "train/model.h"

#define PY "/usr/bin/python3"

/* Logits of the checkpoint st on x (N images of side S) with `backend`. */
static cl_status classic_logits(const char *st, const char *backend,
                                const float *x, int N, float *out)
{
    cl_model m;
    CL_TRY(cl_model_open(&m, st, N, backend, CL_PLAN_INFER, 0));
    cl_status s = cl_backend_set_input(m.be, x, NULL, NULL);
    if (s == CL_OK)
        s = cl_backend_forward(m.be, 0, NULL);
    if (s == CL_OK)
        s = cl_backend_read(m.be, m.g.logits, out);
    cl_model_close(&m);
    return s;
}

/* One arch at side S: torch's logits against classic's on ref (tol_ref)
 * and onednn (tol_dnnl), then the round trip back to torchvision; with
 * onnx, the model `classic export` writes at batch N run by ONNX Runtime
 * against torch's logits too. */
static void check_arch(const char *arch, int N, int K, int S, double tol_ref,
                       double tol_dnnl, int onnx)
{
    char cmd[4096];
    const char *st = cl_test_path("s.safetensors");
    const char *pth = cl_test_path("s.pth");
    const char *back = cl_test_path("back.pth");
    const char *xin = cl_test_path("x.bin");
    const char *y = cl_test_path("y.bin");
    snprintf(cmd, sizeof cmd,
             PY " " CL_SOURCE_DIR "/tools/torch2safetensors.py --arch %s "
                "--random --seed 3 --perturb-bn --num-classes %d "
                "--image-size %d %s --save-pth %s",
             arch, K, S, st, pth);
    REQUIRE(cl_test_run(cmd) == 0);
    size_t nx = (size_t)N * 3 * S * S;
    float *x = malloc(nx * sizeof(float));
    REQUIRE(x);
    for (size_t j = 0; j < nx; j++)
        x[j] = (float)(1.3 * sin(0.11 * (double)j) + 0.4 * cos(0.031 * j));
    REQUIRE(cl_test_write_floats(xin, x, nx) == 0);
    snprintf(cmd, sizeof cmd,
             PY " " CL_SOURCE_DIR "/tools/torch_infer.py --arch %s "
                "--num-classes %d --pth %s --input %s --shape %d,3,%d,%d "
                "--output %s",
             arch, K, pth, xin, N, S, S, y);
    REQUIRE(cl_test_run(cmd) == 0);
    float *want = cl_test_read_floats(y, (size_t)N * K);
    float *got = malloc((size_t)N * K * sizeof(float));
    REQUIRE(want && got);
    if (tol_ref > 0) {
        CHECK_OK(classic_logits(st, "ref", x, N, got));
        double e = cl_test_rel_err(got, want, (size_t)N * K);
        printf("%s ref vs torch: max rel err %.3g\n", arch, e);
        CHECK(e < tol_ref);
    }
    CHECK_OK(classic_logits(st, "onednn", x, N, got));
    double e = cl_test_rel_err(got, want, (size_t)N * K);
    printf("%s onednn vs torch: max rel err %.3g\n", arch, e);
    CHECK(e < tol_dnnl);
    snprintf(cmd, sizeof cmd,
             PY " " CL_SOURCE_DIR "/tools/safetensors2torch.py --check %s %s",
             st, back);
    CHECK(cl_test_run(cmd) == 0);
    if (onnx) {
        const char *model = cl_test_path("s.onnx");
        const char *yo = cl_test_path("yo.bin");
        snprintf(cmd, sizeof cmd,
                 CL_SOURCE_DIR "/tests/onnx/setup.sh " CL_BINARY_DIR "/onnx");
        REQUIRE(cl_test_run(cmd) == 0);
        snprintf(cmd, sizeof cmd, "export --checkpoint %s --onnx %s --batch %d",
                 st, model, N);
        REQUIRE(cl_test_classic(cmd) == 0);
        snprintf(cmd, sizeof cmd,
                 "node " CL_SOURCE_DIR "/tests/onnx/run.js " CL_BINARY_DIR
                 "/onnx %s %s %d,3,%d,%d %s",
                 model, xin, N, S, S, yo);
        REQUIRE(cl_test_run(cmd) == 0);
        float *ort = cl_test_read_floats(yo, (size_t)N * K);
        REQUIRE(ort);
        e = cl_test_rel_err(ort, want, (size_t)N * K);
        printf("%s ONNX Runtime vs torch: max rel err %.3g\n", arch, e);
        CHECK(e < tol_dnnl);
        free(ort);
    }
    free(got);
    free(want);
    free(x);
}

CL_TEST(swin_micro_logits_match_torch)
{
    check_arch("swin_micro", 3, 5, 32, 1e-5, 1e-5, 1);
}

CL_TEST(swin_t_logits_match_torch)
{
    check_arch("swin_t", 1, 10, 224, 0, 1e-5, 0);
}
