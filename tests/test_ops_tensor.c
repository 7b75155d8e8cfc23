/* Ops beyond ResNet's: hand-computed values, finite differences of every
 * reference backward and the shape rules' messages.  Tolerances as the
 * linear ops of test_ops.c (exact up to rounding, being bilinear): h 1e-2,
 * rtol 1e-3, atol 2e-4; the smooth nonlinear ops (layernorm, gelu,
 * softmax) as batchnorm there: h 1e-2 (truncation ~h^2 times the third
 * derivative), rtol 2e-3, atol 5e-4 (CL_FD_VERBOSE=1 prints the margins).
 * ctest-labels: unit ref */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "fd.h"
#include "harness.h"
#include "ops/ops.h"

#define LIN_H 1e-2f
#define LIN_RTOL 1e-3
#define LIN_ATOL 2e-4
#define NL_H 1e-2f
#define NL_RTOL 2e-3
#define NL_ATOL 5e-4

#define CHECK_VALUES(got, want, n, tol)                                        \
    do {                                                                       \
        for (int cl__i = 0; cl__i < (n); cl__i++)                              \
            CHECK_NEAR((got)[cl__i], (want)[cl__i], (tol));                    \
    } while (0)

/* ---- matmul ------------------------------------------------------------ */

CL_TEST(matmul_forward_hand)
{
    /* a (2,2) = [1 2; 3 4], b (2,3) = [1 0 -1; 2 1 0]:
     *   a b = [5 2 -1; 11 4 -3]; with b^T given as (3,2) the same. */
    const float a[4] = {1, 2, 3, 4}, b[6] = {1, 0, -1, 2, 1, 0};
    const float bt[6] = {1, 2, 0, 1, -1, 0};
    float y[6];
    cl_matmul_attr at = {0}, tt = {1};
    cl_shape as = cl_shape_make(2, (int64_t[]){2, 2});
    cl_shape bs = cl_shape_make(2, (int64_t[]){2, 3}), bts, ys;
    bts = cl_shape_make(2, (int64_t[]){3, 2});
    REQUIRE_OK(cl_matmul_infer(&at, &as, &bs, &ys));
    CHECK(ys.ndim == 2 && ys.d[0] == 2 && ys.d[1] == 3);
    cl_matmul_dims d = cl_matmul_dims_of(&at, &as, &bs);
    cl_matmul_forward(y, a, b, &d, &at);
    const float ey[6] = {5, 2, -1, 11, 4, -3};
    CHECK_VALUES(y, ey, 6, 1e-6);
    REQUIRE_OK(cl_matmul_infer(&tt, &as, &bts, &ys));
    CHECK(ys.d[1] == 3);
    d = cl_matmul_dims_of(&tt, &as, &bts);
    memset(y, 0, sizeof y);
    cl_matmul_forward(y, a, bt, &d, &tt);
    CHECK_VALUES(y, ey, 6, 1e-6);
}

CL_TEST(matmul_infer_errors)
{
    cl_matmul_attr at = {0};
    cl_shape y;
    cl_shape a4 = cl_shape_make(4, (int64_t[]){2, 3, 4, 5});
    cl_shape b4 = cl_shape_make(4, (int64_t[]){2, 3, 5, 6});
    REQUIRE_OK(cl_matmul_infer(&at, &a4, &b4, &y));
    CHECK(y.ndim == 4 && y.d[0] == 2 && y.d[1] == 3 && y.d[2] == 4 &&
          y.d[3] == 6);
    cl_shape b2 = cl_shape_make(2, (int64_t[]){5, 7});
    REQUIRE_OK(cl_matmul_infer(&at, &a4, &b2, &y));
    CHECK(y.d[3] == 7);
    cl_shape b3 = cl_shape_make(3, (int64_t[]){3, 5, 6});
    CHECK_ERR(cl_matmul_infer(&at, &a4, &b3, &y), CL_ERR_SHAPE,
              "second input has 3 dimensions, expected 2 or 4");
    cl_shape bx = cl_shape_make(4, (int64_t[]){2, 4, 5, 6});
    CHECK_ERR(cl_matmul_infer(&at, &a4, &bx, &y), CL_ERR_SHAPE,
              "leading dimension 1 is 3 in the first input and 4");
    cl_shape bk = cl_shape_make(4, (int64_t[]){2, 3, 6, 5});
    CHECK_ERR(cl_matmul_infer(&at, &a4, &bk, &y), CL_ERR_SHAPE,
              "inner dimensions differ: 5 in the first input, 6 in the "
              "second");
    cl_matmul_attr tt = {1};
    REQUIRE_OK(cl_matmul_infer(&tt, &a4, &bk, &y));
    CHECK(y.d[3] == 6);
    cl_shape a1 = cl_shape_make(1, (int64_t[]){5});
    CHECK_ERR(cl_matmul_infer(&at, &a1, &b2, &y), CL_ERR_SHAPE,
              "first input has 1 dimensions");
}

/* Probe loss <matmul(a, b), r> of a case. */
typedef struct mm_case {
    cl_matmul_dims d;
    cl_matmul_attr at;
    float *a, *b, *y, *r;
} mm_case;

static double mm_loss(void *ctx)
{
    mm_case *c = ctx;
    cl_matmul_forward(c->y, c->a, c->b, &c->d, &c->at);
    return cl_fd_dot(c->y, c->r, (int64_t)c->d.B * c->d.M * c->d.N);
}

/* Both gradients against finite differences: batched b, one shared b
 * (its gradient sums over the batch), each with and without trans_b. */
CL_TEST(matmul_grad_fd)
{
    enum { B = 3, M = 4, K = 5, N = 6 };
    static float a[B * M * K], b[B * K * N], y[B * M * N], r[B * M * N];
    static float da[B * M * K], db[B * K * N];
    cl_rng rng;
    cl_rng_init(&rng, 41, 0);
    for (int shared = 0; shared <= 1; shared++)
        for (int trans = 0; trans <= 1; trans++) {
            mm_case c = {{B, M, K, N, !shared}, {trans}, a, b, y, r};
            const int64_t nb = (int64_t)(shared ? 1 : B) * K * N;
            cl_fd_uniform(a, B * M * K, -1, 1, &rng);
            cl_fd_uniform(b, nb, -1, 1, &rng);
            cl_fd_uniform(r, B * M * N, -1, 1, &rng);
            cl_matmul_backward(da, db, r, a, b, &c.d, &c.at);
            CL_FD_CHECK("matmul da", a, B * M * K, da, mm_loss, &c, LIN_H,
                        LIN_RTOL, LIN_ATOL, &rng, 256);
            CL_FD_CHECK("matmul db", b, nb, db, mm_loss, &c, LIN_H, LIN_RTOL,
                        LIN_ATOL, &rng, 256);
            /* Either gradient alone: the other pointer NULL. */
            float keep = db[0];
            cl_matmul_backward(NULL, db, r, a, b, &c.d, &c.at);
            CHECK(db[0] == keep);
        }
}

/* ---- table_gather ------------------------------------------------------ */

typedef struct tg_case {
    float *table, *y, *r;
    const int64_t *index;
    int64_t M;
    int cols;
} tg_case;

static double tg_loss(void *ctx)
{
    tg_case *c = ctx;
    cl_table_gather_forward(c->y, c->table, c->index, c->M, c->cols);
    return cl_fd_dot(c->y, c->r, c->M * c->cols);
}

CL_TEST(table_gather_values_grad_and_errors)
{
    enum { R = 5, C = 3, M = 7 };
    static const int64_t index[M] = {4, 0, 4, 2, 4, 0, 1};
    float table[R * C], y[M * C], r[M * C], dt[R * C];
    cl_rng rng;
    cl_rng_init(&rng, 43, 0);
    cl_fd_uniform(table, R * C, -1, 1, &rng);
    cl_fd_uniform(r, M * C, -1, 1, &rng);
    cl_table_gather_forward(y, table, index, M, C);
    for (int i = 0; i < M; i++)
        CHECK(memcmp(y + C * i, table + C * index[i], C * sizeof(float)) == 0);
    tg_case c = {table, y, r, index, M, C};
    cl_table_gather_backward(dt, r, index, M, R, C);
    CL_FD_CHECK("table_gather dtable", table, R * C, dt, tg_loss, &c, LIN_H,
                LIN_RTOL, LIN_ATOL, &rng, 256);
    for (int k = 0; k < C; k++)
        CHECK(dt[3 * C + k] == 0.0f); /* row 3 is never read */

    REQUIRE_OK(cl_table_gather_check(index, M, R));
    CHECK_ERR(cl_table_gather_check(index, M, 4), CL_ERR_ARG,
              "index[0] is 4, expected 0..3");
    const int64_t neg[2] = {0, -1};
    CHECK_ERR(cl_table_gather_check(neg, 2, R), CL_ERR_ARG, "index[1] is -1");
    cl_table_gather_attr a = {R, C};
    cl_shape is = cl_shape_make(2, (int64_t[]){2, 3}), ys;
    REQUIRE_OK(cl_table_gather_infer(&a, &is, &ys));
    CHECK(ys.ndim == 3 && ys.d[0] == 2 && ys.d[1] == 3 && ys.d[2] == C);
    cl_shape i5 = cl_shape_make(5, (int64_t[]){1, 1, 1, 1, 1});
    CHECK_ERR(cl_table_gather_infer(&a, &i5, &ys), CL_ERR_SHAPE,
              "index has 5 dimensions, expected 1..4");
}

/* ---- layernorm --------------------------------------------------------- */

CL_TEST(layernorm_forward_hand_and_errors)
{
    /* x = [1 2 3 4]: mean 2.5, biased variance 1.25. */
    const float x[4] = {1, 2, 3, 4}, gamma[4] = {1, 2, 1, 1};
    const float beta[4] = {0, 0, 0.5f, 0};
    float y[4], mean, rstd;
    cl_layernorm_forward(y, &mean, &rstd, x, gamma, beta, 1, 4, 1e-5f);
    const double rs = 1.0 / sqrt(1.25 + 1e-5);
    CHECK_NEAR(mean, 2.5, 1e-6);
    CHECK_NEAR(rstd, rs, 1e-6);
    CHECK_NEAR(y[0], -1.5 * rs, 1e-6);
    CHECK_NEAR(y[1], 2 * -0.5 * rs, 1e-6);
    CHECK_NEAR(y[2], 0.5 * rs + 0.5, 1e-6);
    CHECK_NEAR(y[3], 1.5 * rs, 1e-6);

    cl_layernorm_attr a = cl_layernorm_attr_make(4);
    CHECK(a.features == 4 && a.eps == 1e-5f);
    cl_shape ys;
    cl_shape x5 = cl_shape_make(5, (int64_t[]){2, 1, 3, 2, 4});
    REQUIRE_OK(cl_layernorm_infer(&a, &x5, &ys));
    CHECK(cl_shape_equal(&ys, &x5));
    cl_shape x1 = cl_shape_make(1, (int64_t[]){4});
    CHECK_ERR(cl_layernorm_infer(&a, &x1, &ys), CL_ERR_SHAPE,
              "input has 1 dimensions, expected 2..5");
    cl_shape x3 = cl_shape_make(2, (int64_t[]){3, 5});
    CHECK_ERR(cl_layernorm_infer(&a, &x3, &ys), CL_ERR_SHAPE,
              "last dimension is 5, attr.features is 4");
    cl_layernorm_attr bad = {0, 1e-5f};
    CHECK_ERR(cl_layernorm_infer(&bad, &x3, &ys), CL_ERR_SHAPE,
              "attr.features is 0");
    bad = (cl_layernorm_attr){5, 0.0f};
    CHECK_ERR(cl_layernorm_infer(&bad, &x3, &ys), CL_ERR_SHAPE,
              "attr.eps is 0");
}

typedef struct ln_case {
    float *y, *x, *gamma, *beta, *r;
    int64_t rows;
    int C;
} ln_case;

static double ln_loss(void *ctx)
{
    ln_case *c = ctx;
    cl_layernorm_forward(c->y, NULL, NULL, c->x, c->gamma, c->beta, c->rows,
                         c->C, 1e-5f);
    return cl_fd_dot(c->y, c->r, c->rows * c->C);
}

CL_TEST(layernorm_grad_fd)
{
    enum { R = 6, C = 7 };
    float x[R * C], y[R * C], r[R * C], dx[R * C], gm[C], bt[C], dg[C], dbt[C];
    float mean[R], rstd[R];
    cl_rng rng;
    cl_rng_init(&rng, 51, 0);
    cl_fd_uniform(x, R * C, -2, 2, &rng);
    cl_fd_uniform(r, R * C, -1, 1, &rng);
    cl_fd_uniform(gm, C, 0.5f, 1.5f, &rng);
    cl_fd_uniform(bt, C, -0.5f, 0.5f, &rng);
    cl_layernorm_forward(y, mean, rstd, x, gm, bt, R, C, 1e-5f);
    cl_layernorm_backward(dx, dg, dbt, r, x, mean, rstd, gm, R, C);
    ln_case c = {y, x, gm, bt, r, R, C};
    CL_FD_CHECK("layernorm dx", x, R * C, dx, ln_loss, &c, NL_H, NL_RTOL,
                NL_ATOL, &rng, 256);
    CL_FD_CHECK("layernorm dgamma", gm, C, dg, ln_loss, &c, NL_H, NL_RTOL,
                NL_ATOL, &rng, 256);
    CL_FD_CHECK("layernorm dbeta", bt, C, dbt, ln_loss, &c, NL_H, NL_RTOL,
                NL_ATOL, &rng, 256);
    /* The parameter gradients alone, dx NULL: the same values. */
    float dg2[C];
    cl_layernorm_backward(NULL, dg2, NULL, r, x, mean, rstd, gm, R, C);
    CHECK(memcmp(dg, dg2, sizeof dg) == 0);
}

/* ---- gelu -------------------------------------------------------------- */

typedef struct gelu_case {
    float *y, *x, *r;
    int64_t n;
} gelu_case;

static double gelu_loss(void *ctx)
{
    gelu_case *c = ctx;
    cl_gelu_forward(c->y, c->x, c->n);
    return cl_fd_dot(c->y, c->r, c->n);
}

CL_TEST(gelu_values_and_grad_fd)
{
    /* torch.nn.GELU()(torch.tensor([-3., -1., 0., 0.5, 2.])). */
    const float x[5] = {-3, -1, 0, 0.5f, 2};
    const float want[5] = {-0.0040496f, -0.1586553f, 0.0f, 0.3457312f,
                           1.9544997f};
    float y[5];
    cl_gelu_forward(y, x, 5);
    CHECK_VALUES(y, want, 5, 1e-6);
    enum { N = 64 };
    float a[N], b[N], r[N], da[N];
    cl_rng rng;
    cl_rng_init(&rng, 53, 0);
    cl_fd_uniform(a, N, -4, 4, &rng);
    cl_fd_uniform(r, N, -1, 1, &rng);
    cl_gelu_backward(da, r, a, N);
    gelu_case c = {b, a, r, N};
    CL_FD_CHECK("gelu dx", a, N, da, gelu_loss, &c, NL_H, NL_RTOL, NL_ATOL,
                &rng, 256);
}

/* ---- softmax ----------------------------------------------------------- */

CL_TEST(softmax_values_and_infer_errors)
{
    /* One row [1 2 3] + bias [0 0 -1] + mask [0 -100 0]: softmax of
     * [1, -98, 2]. */
    const float x[3] = {1, 2, 3}, b[3] = {0, 0, -1}, m[3] = {0, -100, 0};
    cl_shape xs = cl_shape_make(2, (int64_t[]){1, 3});
    cl_shape bs = cl_shape_make(1, (int64_t[]){3}), ys;
    REQUIRE_OK(cl_softmax_infer(&xs, &bs, &bs, &ys));
    cl_softmax_dims d = cl_softmax_dims_of(&xs, &bs, &bs);
    float y[3];
    cl_softmax_forward(y, x, b, m, &d);
    const double e0 = 1.0 / (1.0 + exp(-99.0) + exp(1.0));
    CHECK_NEAR(y[0], e0, 1e-6);
    CHECK_NEAR(y[1], exp(-99.0) * e0, 1e-12);
    CHECK_NEAR(y[2], exp(1.0) * e0, 1e-6);

    /* Swin's window attention: x (B,nW,heads,N,N) with the bias (heads,N,N)
     * and the mask (nW,1,N,N). */
    cl_shape x5 = cl_shape_make(5, (int64_t[]){2, 4, 3, 5, 5});
    cl_shape b3 = cl_shape_make(3, (int64_t[]){3, 5, 5});
    cl_shape m4 = cl_shape_make(4, (int64_t[]){4, 1, 5, 5});
    REQUIRE_OK(cl_softmax_infer(&x5, &b3, &m4, &ys));
    CHECK(cl_shape_equal(&ys, &x5));
    REQUIRE_OK(cl_softmax_infer(&x5, NULL, NULL, &ys));
    cl_shape x1 = cl_shape_make(1, (int64_t[]){5});
    CHECK_ERR(cl_softmax_infer(&x1, NULL, NULL, &ys), CL_ERR_SHAPE,
              "input has 1 dimensions, expected 2..5");
    cl_shape bad = cl_shape_make(3, (int64_t[]){2, 5, 5});
    CHECK_ERR(cl_softmax_infer(&x5, &bad, NULL, &ys), CL_ERR_SHAPE,
              "bias dimension 0 is 2, expected 1 or 3 (the input's "
              "dimension 2)");
    cl_shape last = cl_shape_make(4, (int64_t[]){4, 1, 5, 1});
    CHECK_ERR(cl_softmax_infer(&x5, NULL, &last, &ys), CL_ERR_SHAPE,
              "mask dimension 3 is 1, expected 5 (the input's dimension 4)");
    cl_shape deep = cl_shape_make(3, (int64_t[]){1, 5, 5});
    cl_shape x2 = cl_shape_make(2, (int64_t[]){5, 5});
    CHECK_ERR(cl_softmax_infer(&x2, &deep, NULL, &ys), CL_ERR_SHAPE,
              "bias has 3 dimensions, expected 1..2");
}

typedef struct sm_case {
    cl_softmax_dims d;
    float *y, *x, *b, *m, *r;
} sm_case;

static double sm_loss(void *ctx)
{
    sm_case *c = ctx;
    cl_softmax_forward(c->y, c->x, c->b, c->m, &c->d);
    return cl_fd_dot(c->y, c->r, c->d.rows * c->d.C);
}

/* dx and db against finite differences for Swin's broadcast pattern, a
 * bias broadcast along middle dimensions and a full-shape bias; db equals
 * the sum of dx over the rows that read each bias row, with and without
 * dx. */
CL_TEST(softmax_grad_fd)
{
    enum { B = 2, W = 3, H = 2, N = 4, NX = B * W * H * N * N };
    static float x[NX], y[NX], r[NX], dx[NX], b[NX], db[NX], db2[NX], m[NX];
    static const struct {
        int nb, nm;
        int64_t bd[5], md[5];
    } cases[] = {
        {3, 4, {H, N, N}, {W, 1, N, N}},
        {5, 1, {B, 1, H, 1, N}, {N}},
        {5, 5, {B, W, H, N, N}, {1, W, 1, 1, N}},
    };
    cl_shape xs = cl_shape_make(5, (int64_t[]){B, W, H, N, N});
    cl_rng rng;
    cl_rng_init(&rng, 57, 0);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cl_shape bs = cl_shape_make(cases[k].nb, cases[k].bd);
        cl_shape ms = cl_shape_make(cases[k].nm, cases[k].md), ys;
        REQUIRE_OK(cl_softmax_infer(&xs, &bs, &ms, &ys));
        sm_case c = {cl_softmax_dims_of(&xs, &bs, &ms), y, x, b, m, r};
        const int64_t nb = cl_shape_numel(&bs);
        cl_fd_uniform(x, NX, -2, 2, &rng);
        cl_fd_uniform(b, nb, -1, 1, &rng);
        cl_fd_uniform(m, cl_shape_numel(&ms), -3, 0, &rng);
        cl_fd_uniform(r, NX, -1, 1, &rng);
        cl_softmax_forward(y, x, b, m, &c.d);
        cl_softmax_backward(dx, db, r, y, &c.d);
        CL_FD_CHECK("softmax dx", x, NX, dx, sm_loss, &c, NL_H, NL_RTOL,
                    NL_ATOL, &rng, 256);
        CL_FD_CHECK("softmax db", b, nb, db, sm_loss, &c, NL_H, NL_RTOL,
                    NL_ATOL, &rng, 256);
        cl_softmax_forward(y, x, b, m, &c.d);
        cl_softmax_backward(NULL, db2, r, y, &c.d);
        CHECK(memcmp(db, db2, (size_t)nb * sizeof(float)) == 0);
        cl_softmax_bias_grad(db2, dx, &c.d);
        CHECK(memcmp(db, db2, (size_t)nb * sizeof(float)) == 0);
    }
    /* Neither bias nor mask: a plain softmax, rows summing to one. */
    cl_softmax_dims d = cl_softmax_dims_of(&xs, NULL, NULL);
    cl_softmax_forward(y, x, NULL, NULL, &d);
    for (int64_t i = 0; i < d.rows; i++) {
        double s = 0;
        for (int c = 0; c < N; c++)
            s += y[i * N + c];
        CHECK_NEAR(s, 1.0, 1e-6);
    }
}

/* The bias gradient on 1 and 3 threads, large enough for the kernels'
 * parallel loops: the same bits (one thread per bias row, rows in
 * order). */
CL_TEST(softmax_bias_grad_thread_count_independent)
{
    enum { B = 8, W = 4, H = 3, N = 32, NX = B * W * H * N * N };
    static float x[NX], y[NX], r[NX], b[H * N * N], m[W * N * N];
    static float db[2][H * N * N], dx[2][NX];
    cl_shape xs = cl_shape_make(5, (int64_t[]){B, W, H, N, N});
    cl_shape bs = cl_shape_make(3, (int64_t[]){H, N, N});
    cl_shape ms = cl_shape_make(4, (int64_t[]){W, 1, N, N});
    cl_softmax_dims d = cl_softmax_dims_of(&xs, &bs, &ms);
    cl_rng rng;
    cl_rng_init(&rng, 59, 0);
    cl_fd_uniform(x, NX, -2, 2, &rng);
    cl_fd_uniform(b, H * N * N, -1, 1, &rng);
    cl_fd_uniform(m, W * N * N, -3, 0, &rng);
    cl_fd_uniform(r, NX, -1, 1, &rng);
    const int keep = omp_get_max_threads();
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(k ? 3 : 1);
        cl_softmax_forward(y, x, b, m, &d);
        cl_softmax_backward(dx[k], db[k], r, y, &d);
    }
    omp_set_num_threads(keep);
    CHECK(memcmp(db[0], db[1], sizeof db[0]) == 0);
    CHECK(memcmp(dx[0], dx[1], sizeof dx[0]) == 0);
}
