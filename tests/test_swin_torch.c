/* Swin against torchvision on the same weights: a seeded swin_micro and
 * swin_t converted by tools/torch2safetensors.py, opened as `classic
 * predict` opens a checkpoint, their logits held to torch's on both
 * backends; then back to a .pth that torchvision loads with strict=True.
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
 * and onednn (tol_dnnl), then the round trip back to torchvision. */
static void check_arch(const char *arch, int N, int K, int S, double tol_ref,
                       double tol_dnnl)
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
    REQUIRE(write_floats(xin, x, nx) == 0);
    snprintf(cmd, sizeof cmd,
             PY " " CL_SOURCE_DIR "/tools/torch_infer.py --arch %s "
                "--num-classes %d --pth %s --input %s --shape %d,3,%d,%d "
                "--output %s",
             arch, K, pth, xin, N, S, S, y);
    REQUIRE(cl_test_run(cmd) == 0);
    float *want = read_floats(y, (size_t)N * K);
    float *got = malloc((size_t)N * K * sizeof(float));
    REQUIRE(want && got);
    if (tol_ref > 0) {
        CHECK_OK(classic_logits(st, "ref", x, N, got));
        double e = rel_err(got, want, (size_t)N * K);
        printf("%s ref vs torch: max rel err %.3g\n", arch, e);
        CHECK(e < tol_ref);
    }
    CHECK_OK(classic_logits(st, "onednn", x, N, got));
    double e = rel_err(got, want, (size_t)N * K);
    printf("%s onednn vs torch: max rel err %.3g\n", arch, e);
    CHECK(e < tol_dnnl);
    snprintf(cmd, sizeof cmd,
             PY " " CL_SOURCE_DIR "/tools/safetensors2torch.py --check %s %s",
             st, back);
    CHECK(cl_test_run(cmd) == 0);
    free(got);
    free(want);
    free(x);
}

CL_TEST(swin_micro_logits_match_torch)
{
    check_arch("swin_micro", 3, 5, 32, 1e-5, 1e-5);
}

CL_TEST(swin_t_logits_match_torch)
{
    check_arch("swin_t", 1, 10, 224, 0, 1e-5);
}
