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
    cl_matmul_attr at = {0, 1.0f}, tt = {1, 1.0f};
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
    cl_matmul_attr at = {0, 1.0f};
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
    cl_matmul_attr tt = {1, 1.0f};
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
            mm_case c = {{B, M, K, N, !shared},
                         {trans, trans ? 0.35f : -1.5f},
                         a,
                         b,
                         y,
                         r};
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

/* alpha scales the product and both gradients; 0 and non-finite are
 * refused (an attr left zeroed is a mistake, not a zero product). */
CL_TEST(matmul_alpha_values_and_errors)
{
    const float a[4] = {1, 2, 3, 4}, b[6] = {1, 0, -1, 2, 1, 0};
    float y[6];
    cl_matmul_attr at = {0, 0.5f};
    cl_shape as = cl_shape_make(2, (int64_t[]){2, 2});
    cl_shape bs = cl_shape_make(2, (int64_t[]){2, 3}), ys;
    REQUIRE_OK(cl_matmul_infer(&at, &as, &bs, &ys));
    cl_matmul_dims d = cl_matmul_dims_of(&at, &as, &bs);
    cl_matmul_forward(y, a, b, &d, &at);
    const float ey[6] = {2.5f, 1, -0.5f, 5.5f, 2, -1.5f};
    CHECK_VALUES(y, ey, 6, 1e-6);
    cl_matmul_attr zero = {0, 0.0f}, inf = {1, INFINITY};
    CHECK_ERR(cl_matmul_infer(&zero, &as, &bs, &ys), CL_ERR_SHAPE,
              "matmul: attr.alpha is 0, expected a finite nonzero scale");
    CHECK_ERR(cl_matmul_infer(&inf, &as, &bs, &ys), CL_ERR_SHAPE,
              "attr.alpha is inf");
}

/* ---- row_gather -------------------------------------------------------- */

typedef struct rg_case {
    float *x, *y, *r;
    const int64_t *index;
    int64_t M;
    int cols;
} rg_case;

static double rg_loss(void *ctx)
{
    rg_case *c = ctx;
    cl_row_gather_forward(c->y, c->x, c->index, c->M, c->cols);
    return cl_fd_dot(c->y, c->r, c->M * c->cols);
}

/* Rows copied whole; dx sums dy's rows where the index repeats and is
 * zero where no position reads; both against finite differences, for a
 * repeating index and for a permutation (a transpose, cols 1). */
CL_TEST(row_gather_values_grad_and_errors)
{
    enum { R = 6, C = 3, M = 8 };
    static const int64_t index[M] = {5, 0, 5, 2, 5, 0, 1, 3};
    float x[R * C], y[M * C], r[M * C], dx[R * C];
    cl_rng rng;
    cl_rng_init(&rng, 47, 0);
    cl_fd_uniform(x, R * C, -1, 1, &rng);
    cl_fd_uniform(r, M * C, -1, 1, &rng);
    cl_row_gather_forward(y, x, index, M, C);
    for (int i = 0; i < M; i++)
        CHECK(memcmp(y + C * i, x + C * index[i], C * sizeof(float)) == 0);
    rg_case c = {x, y, r, index, M, C};
    cl_row_gather_backward(dx, r, index, M, R, C);
    CL_FD_CHECK("row_gather dx", x, R * C, dx, rg_loss, &c, LIN_H, LIN_RTOL,
                LIN_ATOL, &rng, 256);
    for (int k = 0; k < C; k++)
        CHECK(dx[4 * C + k] == 0.0f); /* row 4 is never read */
    for (int k = 0; k < C; k++)       /* row 5: positions 0, 2, 4 in order */
        CHECK(dx[5 * C + k] == (r[k] + r[2 * C + k]) + r[4 * C + k]);

    /* (2,3,4) -> (2,4,3): a transpose of each sample's last two axes with
     * cols 1, the index a permutation. */
    enum { TN = 2, TA = 3, TB = 4, TT = TN * TA * TB };
    int64_t perm[TT];
    float tx[TT], ty[TT], tr[TT], tdx[TT];
    for (int n = 0; n < TN; n++)
        for (int b = 0; b < TB; b++)
            for (int a = 0; a < TA; a++)
                perm[(n * TB + b) * TA + a] = (n * TA + a) * TB + b;
    cl_fd_uniform(tx, TT, -1, 1, &rng);
    cl_fd_uniform(tr, TT, -1, 1, &rng);
    cl_row_gather_forward(ty, tx, perm, TT, 1);
    CHECK(ty[(1 * TB + 2) * TA + 1] == tx[(1 * TA + 1) * TB + 2]);
    rg_case t = {tx, ty, tr, perm, TT, 1};
    cl_row_gather_backward(tdx, tr, perm, TT, TT, 1);
    CL_FD_CHECK("row_gather transpose dx", tx, TT, tdx, rg_loss, &t, LIN_H,
                LIN_RTOL, LIN_ATOL, &rng, 256);

    REQUIRE_OK(cl_row_gather_check(index, M, R));
    CHECK_ERR(cl_row_gather_check(index, M, 5), CL_ERR_ARG,
              "row_gather: index[0] is 5, expected 0..4 (the input's rows)");
    const int64_t neg[2] = {0, -1};
    CHECK_ERR(cl_row_gather_check(neg, 2, R), CL_ERR_ARG, "index[1] is -1");

    cl_shape xs = cl_shape_make(3, (int64_t[]){2, 3, 4}), ys;
    cl_shape i6 = cl_shape_make(1, (int64_t[]){6});
    cl_row_gather_attr ga = {4, cl_shape_make(2, (int64_t[]){3, 8})};
    REQUIRE_OK(cl_row_gather_infer(&ga, &xs, &i6, &ys));
    CHECK(ys.ndim == 2 && ys.d[0] == 3 && ys.d[1] == 8);
    cl_row_gather_attr bad = ga;
    bad.cols = 0;
    CHECK_ERR(cl_row_gather_infer(&bad, &xs, &i6, &ys), CL_ERR_SHAPE,
              "row_gather: attr.cols is 0, expected 1 or more");
    bad.cols = 5;
    CHECK_ERR(cl_row_gather_infer(&bad, &xs, &i6, &ys), CL_ERR_SHAPE,
              "input has 24 elements, expected a positive multiple of "
              "attr.cols 5");
    bad = ga;
    bad.out = cl_shape_make(2, (int64_t[]){3, 7});
    CHECK_ERR(cl_row_gather_infer(&bad, &xs, &i6, &ys), CL_ERR_SHAPE,
              "attr.out has 21 elements, expected a multiple of attr.cols 4");
    bad.out = cl_shape_make(2, (int64_t[]){3, 0});
    CHECK_ERR(cl_row_gather_infer(&bad, &xs, &i6, &ys), CL_ERR_SHAPE,
              "attr.out dimension 1 is 0");
    bad.out.ndim = 0;
    CHECK_ERR(cl_row_gather_infer(&bad, &xs, &i6, &ys), CL_ERR_SHAPE,
              "attr.out has 0 dimensions, expected 1..5");
    cl_shape i5 = cl_shape_make(1, (int64_t[]){5});
    CHECK_ERR(cl_row_gather_infer(&ga, &xs, &i5, &ys), CL_ERR_SHAPE,
              "the index has 1 dimensions (first 5), expected 1 of 6");
    cl_shape i23 = cl_shape_make(2, (int64_t[]){2, 3});
    CHECK_ERR(cl_row_gather_infer(&ga, &xs, &i23, &ys), CL_ERR_SHAPE,
              "the index has 2 dimensions");
}

/* ---- droppath ---------------------------------------------------------- */

/* The fraction of samples kept over a large batch is near 1 - p (within
 * 5 standard deviations), kept samples are scaled by 1 / (1 - p); the
 * mask is the same for the same (seed, step, node), another for another
 * step; p 0 keeps all, p 1 none. */
CL_TEST(droppath_mask_fraction_and_determinism)
{
    enum { N = 20000, PER = 3 };
    static float x[N * PER], y[N * PER], y2[N * PER];
    const float p = 0.3f;
    cl_rng r, r2;
    for (int i = 0; i < N * PER; i++)
        x[i] = 1.0f + (float)(i % 7);
    cl_rng_init_node(&r, 5, 11, 3);
    cl_droppath_forward(y, x, N, PER, p, &r);
    int kept = 0;
    for (int n = 0; n < N; n++) {
        const float s = cl_droppath_scale(&r, n, p);
        if (s != 0.0f) {
            kept++;
            CHECK(s == 1.0f / (1.0f - p));
        }
        for (int k = 0; k < PER; k++)
            CHECK(y[n * PER + k] == x[n * PER + k] * s);
    }
    const double frac = (double)kept / N;
    const double sd = sqrt(p * (1.0 - p) / N);
    CHECK(fabs(frac - (1.0 - p)) < 5.0 * sd);
    /* The same key draws the same mask, on its own numbers: the factor of
     * a sample does not depend on the samples before it. */
    cl_droppath_forward(y2, x, N, PER, p, &r);
    CHECK(memcmp(y, y2, sizeof y) == 0);
    cl_rng_init_node(&r2, 5, 12, 3);
    cl_droppath_forward(y2, x, N, PER, p, &r2);
    CHECK(memcmp(y, y2, sizeof y) != 0);
    cl_rng_init_node(&r2, 5, 11, 4);
    cl_droppath_forward(y2, x, N, PER, p, &r2);
    CHECK(memcmp(y, y2, sizeof y) != 0);
    cl_droppath_forward(y2, x, N, PER, 0.0f, &r);
    CHECK(memcmp(x, y2, sizeof x) == 0);
    cl_droppath_forward(y2, x, 64, PER, 1.0f, &r);
    for (int i = 0; i < 64 * PER; i++)
        CHECK(y2[i] == 0.0f);
}

typedef struct dp_case {
    float *x, *y, *r;
    int N;
    int64_t per;
    float p;
    const cl_rng *rng;
} dp_case;

static double dp_loss(void *ctx)
{
    dp_case *c = ctx;
    cl_droppath_forward(c->y, c->x, c->N, c->per, c->p, c->rng);
    return cl_fd_dot(c->y, c->r, c->N * c->per);
}

/* With the mask fixed (one key), dx against finite differences; the
 * shape rule's messages. */
CL_TEST(droppath_grad_fd_and_errors)
{
    enum { N = 16, PER = 6 };
    float x[N * PER], y[N * PER], r[N * PER], dx[N * PER];
    cl_rng rng, key;
    cl_rng_init(&rng, 53, 0);
    cl_rng_init_node(&key, 9, 2, 1);
    cl_fd_uniform(x, N * PER, -1, 1, &rng);
    cl_fd_uniform(r, N * PER, -1, 1, &rng);
    dp_case c = {x, y, r, N, PER, 0.4f, &key};
    cl_droppath_backward(dx, r, N, PER, 0.4f, &key);
    int dropped = 0;
    for (int n = 0; n < N; n++)
        dropped += dx[n * PER] == 0.0f;
    CHECK(dropped > 0 && dropped < N); /* both kinds of sample are checked */
    CL_FD_CHECK("droppath dx", x, N * PER, dx, dp_loss, &c, LIN_H, LIN_RTOL,
                LIN_ATOL, &rng, 256);

    cl_droppath_attr a = {0.2f}, bad = {1.5f}, nan_p = {NAN};
    cl_shape xs = cl_shape_make(3, (int64_t[]){4, 5, 6}), ys;
    REQUIRE_OK(cl_droppath_infer(&a, &xs, &ys));
    CHECK(cl_shape_equal(&xs, &ys));
    CHECK_ERR(cl_droppath_infer(&bad, &xs, &ys), CL_ERR_SHAPE,
              "droppath: attr.p is 1.5, expected a probability in [0, 1]");
    CHECK_ERR(cl_droppath_infer(&nan_p, &xs, &ys), CL_ERR_SHAPE,
              "attr.p is nan");
    cl_shape z = cl_shape_make(2, (int64_t[]){4, 0});
    CHECK_ERR(cl_droppath_infer(&a, &z, &ys), CL_ERR_SHAPE,
              "droppath: input dimension 1 is 0");
}

/* ---- token_meanpool ---------------------------------------------------- */

typedef struct tm_case {
    float *x, *y, *r;
    int B, L, C;
} tm_case;

static double tm_loss(void *ctx)
{
    tm_case *c = ctx;
    cl_token_meanpool_forward(c->y, c->x, c->B, c->L, c->C);
    return cl_fd_dot(c->y, c->r, c->B * c->C);
}

CL_TEST(token_meanpool_values_grad_and_errors)
{
    enum { B = 2, L = 5, C = 3 };
    float x[B * L * C], y[B * C], r[B * C], dx[B * L * C];
    cl_rng rng;
    cl_rng_init(&rng, 59, 0);
    cl_fd_uniform(x, B * L * C, -1, 1, &rng);
    cl_fd_uniform(r, B * C, -1, 1, &rng);
    cl_token_meanpool_forward(y, x, B, L, C);
    double s = 0;
    for (int l = 0; l < L; l++)
        s += x[(1 * L + l) * C + 2];
    CHECK_NEAR(y[1 * C + 2], s / L, 1e-6);
    tm_case c = {x, y, r, B, L, C};
    cl_token_meanpool_backward(dx, r, B, L, C);
    CL_FD_CHECK("token_meanpool dx", x, B * L * C, dx, tm_loss, &c, LIN_H,
                LIN_RTOL, LIN_ATOL, &rng, 256);
    cl_shape xs = cl_shape_make(3, (int64_t[]){B, L, C}), ys;
    REQUIRE_OK(cl_token_meanpool_infer(&xs, &ys));
    CHECK(ys.ndim == 2 && ys.d[0] == B && ys.d[1] == C);
    cl_shape x4 = cl_shape_make(4, (int64_t[]){B, L, C, 1});
    CHECK_ERR(cl_token_meanpool_infer(&x4, &ys), CL_ERR_SHAPE,
              "token_meanpool: input has 4 dimensions, expected 3 (B,L,C)");
    cl_shape x0 = cl_shape_make(3, (int64_t[]){B, 0, C});
    CHECK_ERR(cl_token_meanpool_infer(&x0, &ys), CL_ERR_SHAPE,
              "token_meanpool: input tokens is 0");
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
