/* Ops beyond ResNet's: hand-computed values, finite differences of every
 * reference backward and the shape rules' messages.  Tolerances as the
 * linear ops of test_ops.c (exact up to rounding, being bilinear): h 1e-2,
 * rtol 1e-3, atol 2e-4.
 * ctest-labels: unit ref */
#include <math.h>
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
