/* The graph beyond ResNet on the oneDNN backend: the graphs of
 * graph_cases.h, whose nodes oneDNN turns down run through the reference
 * fallback, held against the ref backend (loss, logits, every param
 * gradient) at f32.  Tolerances as the per-op graphs of test_onednn.c:
 * 1e-4 forward, 2e-4 gradients, relative to the reference's largest
 * magnitude.
 * ctest-labels: onednn */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/mem.h"
#include "graph/graph.h"
#include "graph_cases.h"
#include "harness.h"

static void check_rel(const float *a, const float *b, size_t n, double tol,
                      const char *what)
{
    double e = cl_test_rel_err(a, b, n);
    if (!(e <= tol))
        cl_test_fail(__FILE__, __LINE__, "%s: relative error %.3g > %g", what,
                     e, tol);
}

/* One training step of build's graph on ref (side 0) and onednn (side 1)
 * from the same params and batch; *fallback receives the ops the onednn
 * plan ran through the reference fallback. */
static void parity(gbuild_fn build, unsigned *fallback)
{
    cl_graph g[2];
    cl_backend *be[2] = {NULL, NULL};
    const char *names[2] = {"ref", "onednn"};
    float loss[2] = {NAN, NAN};
    float *x = NULL, *lg[2] = {NULL, NULL};
    int32_t labels[GN];
    memset(g, 0, sizeof g);
    *fallback = 0;
    for (int i = 0; i < GN; i++)
        labels[i] = (int32_t)((3 * i + 1) % GK);
    for (int k = 0; k < 2; k++) {
        if (cl_graph_init(&g[k], GN) != CL_OK || build(&g[k]) != CL_OK) {
            cl_test_fail(__FILE__, __LINE__, "build: %s", cl_last_error());
            goto done;
        }
        fill_params(&g[k], 17);
    }
    int64_t n = cl_graph_numel(&g[0], g[0].input);
    size_t nl = (size_t)cl_graph_numel(&g[0], g[0].logits);
    x = cl_alloc((size_t)n * sizeof(float), "batch");
    lg[0] = cl_alloc(nl * sizeof(float), "logits");
    lg[1] = cl_alloc(nl * sizeof(float), "logits");
    REQUIRE(x && lg[0] && lg[1]);
    fill_uniform(x, n, 5, -1.0f, 1.0f);
    for (int k = 0; k < 2; k++) {
        if (cl_backend_create(&be[k], names[k], &g[k], CL_PLAN_TRAIN, NULL) !=
            CL_OK) {
            cl_test_fail(__FILE__, __LINE__, "%s plan: %s", names[k],
                         cl_last_error());
            goto done;
        }
        /* (a key at which droppath keeps and drops samples) */
        cl_backend_set_step(be[k], 3, mixed_step(&g[k], 3));
        CHECK_OK(cl_backend_set_input(be[k], x, labels, NULL));
        CHECK_OK(cl_backend_forward(be[k], 1, &loss[k]));
        CHECK_OK(cl_backend_read(be[k], g[k].logits, lg[k]));
        CHECK_OK(cl_backend_backward(be[k]));
    }
    *fallback = cl_backend_fallback_ops(be[1]);
    CHECK(isfinite(loss[0]));
    CHECK_NEAR(loss[1], loss[0], 1e-4 * fabs(loss[0]) + 1e-6);
    check_rel(lg[1], lg[0], nl, 1e-4, "logits");
    for (int t = 0; t < g[0].n_tensors; t++) {
        if (g[0].tensors[t].kind != CL_GT_PARAM)
            continue;
        char what[96];
        snprintf(what, sizeof what, "grad %s", g[0].tensors[t].name);
        check_rel(cl_graph_grad(&g[1], t), cl_graph_grad(&g[0], t),
                  (size_t)cl_graph_numel(&g[0], t), 2e-4, what);
    }
done:
    for (int k = 0; k < 2; k++) {
        cl_backend_destroy(be[k]);
        cl_graph_free(&g[k]);
        cl_free(lg[k]);
    }
    cl_free(x);
}

/* A linear over the last dimension of a 4-d tensor runs as an inner
 * product over its rows (read plain), the head's 2-d linear too: nothing
 * through the fallback. */
CL_TEST(linear_4d_on_onednn_like_ref)
{
    unsigned fb;
    parity(build_linear4d, &fb);
    CHECK(fb == 0);
}

/* The matmuls run as matmul primitives, each handing back the gradients
 * of both its inputs; the linear layers before them (4-d) as inner
 * products. */
CL_TEST(matmul_on_onednn_like_ref)
{
    unsigned fb;
    parity(build_attention, &fb);
    CHECK(fb == 0);
}

/* An I64 buffer in the buffer arena leaves the plan and BN's buffers
 * alone: every op on oneDNN's own kernels. */
CL_TEST(i64_buffer_beside_bn_like_ref)
{
    unsigned fb;
    parity(build_bn_index, &fb);
    CHECK(fb == 0);
}

/* A node with no activation input runs through the fallback: its output
 * made from the table alone, the table's gradient from the matmul's
 * second input gradient (b broadcast over the batch, its gradient summed
 * over it) handed back to it. */
CL_TEST(param_only_node_through_fallback_like_ref)
{
    unsigned fb;
    parity(build_bias, &fb);
    CHECK(fb == 1u << CL_OP_TABLE_GATHER);
}

/* Swin's data movements, droppath (the same mask as the reference: the
 * key is the node's) and the token mean on the backend's own loops, the
 * products on matmul primitives. */
CL_TEST(window_attention_on_onednn_like_ref)
{
    unsigned fb;
    parity(build_window, &fb);
    CHECK(fb == 0);
}

/* Swin's attention ops (layernorm, gelu, softmax of a score plus a
 * broadcast bias and a constant mask) on oneDNN's kernels, between nodes
 * that run through the fallback; and the same graph with a plain softmax
 * (n_in 1). */
CL_TEST(attention_softmax_like_ref)
{
    const unsigned mine =
        1u << CL_OP_LAYERNORM | 1u << CL_OP_GELU | 1u << CL_OP_SOFTMAX;
    unsigned fb;
    parity(build_attn_softmax, &fb);
    CHECK((fb & mine) == 0);
    parity(build_plain_softmax, &fb);
    CHECK((fb & mine) == 0);
}

/* Swin's data movements (row_gather for the shifted window partition and
 * its inverse, droppath, token_meanpool). */
CL_TEST(window_ops_like_ref)
{
    unsigned fb;
    parity(build_window, &fb);
}
