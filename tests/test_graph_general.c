/* The graph beyond ResNet, on the ref backend: tensors whose leading
 * dimensions are not the batch (linear over the last dimension of a 4-d
 * tensor), nodes with several differentiable inputs (batched matmul), every
 * gradient held against finite differences of the loss; a node that reads
 * only a parameter and a buffer; integer (I64) buffers through a
 * checkpoint; the random key a kernel receives.
 * ctest-labels: unit ref */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/ref_ops.h"
#include "core/error.h"
#include "core/mem.h"
#include "core/rng.h"
#include "fd.h"
#include "graph/graph.h"
#include "graph_cases.h"
#include "harness.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

/* Finite differences of the f32 loss of a small graph: h 1e-2 on smooth
 * paths (linear layers and the loss), noise ~1e-5; a wrong or missing
 * gradient term is off by O(0.1) of the gradient.  rtol 2e-3, atol 1e-4. */
#define G_H 1e-2f
#define G_RTOL 2e-3
#define G_ATOL 1e-4

/* A graph and a ref backend holding one batch. */
typedef struct gcase {
    cl_graph g;
    cl_backend *be;
    float *x;
    int32_t labels[GN];
} gcase;

static cl_status gcase_make(gcase *c, gbuild_fn build, const char *backend)
{
    memset(c, 0, sizeof *c);
    CL_TRY(cl_graph_init(&c->g, GN));
    CL_TRY(build(&c->g));
    fill_params(&c->g, 17);
    int64_t n = cl_graph_numel(&c->g, c->g.input);
    c->x = cl_alloc((size_t)n * sizeof(float), "test batch");
    if (!c->x)
        return CL_ERR_NOMEM;
    fill_uniform(c->x, n, 5, -1.0f, 1.0f);
    for (int i = 0; i < GN; i++)
        c->labels[i] = (int32_t)((3 * i + 1) % GK);
    CL_TRY(cl_backend_create(&c->be, backend, &c->g, CL_PLAN_TRAIN, NULL));
    return cl_backend_set_input(c->be, c->x, c->labels, NULL);
}

static void gcase_free(gcase *c)
{
    cl_backend_destroy(c->be);
    cl_free(c->x);
    cl_graph_free(&c->g);
}

static double loss_of(void *ctx)
{
    float l = NAN;
    if (cl_backend_forward(ctx, 1, &l) != CL_OK)
        return NAN;
    return l;
}

/* One training step, then every param's gradient against central
 * differences of the loss. */
static void fd_all_params(gcase *c)
{
    REQUIRE_OK(cl_backend_forward(c->be, 1, NULL));
    REQUIRE_OK(cl_backend_backward(c->be));
    cl_graph *g = &c->g;
    /* The grad arena is overwritten by no forward: keep it as it is. */
    cl_rng r;
    cl_rng_init(&r, 23, 1);
    for (int t = 0; t < g->n_tensors; t++) {
        if (g->tensors[t].kind != CL_GT_PARAM)
            continue;
        CL_FD_CHECK(g->tensors[t].name, cl_graph_param(g, t),
                    cl_graph_numel(g, t), cl_graph_grad(g, t), loss_of, c->be,
                    G_H, G_RTOL, G_ATOL, &r, 64);
    }
}

/* The projection's output has the input's leading dimensions and the
 * kernel's values row by row; its gradients match finite differences. */
CL_TEST(linear_over_last_dim_of_4d)
{
    gcase c;
    cl_status s = gcase_make(&c, build_linear4d, "ref");
    if (s != CL_OK) {
        cl_test_fail(__FILE__, __LINE__, "setup: %s", cl_last_error());
        gcase_free(&c);
        return;
    }
    cl_graph *g = &c.g;
    int proj = g->nodes[0].out;
    const cl_shape *ps = &g->tensors[proj].shape;
    CHECK(ps->ndim == 4 && ps->d[0] == GN && ps->d[1] == GC && ps->d[2] == GH &&
          ps->d[3] == 6);
    REQUIRE_OK(cl_backend_forward(c.be, 1, NULL));
    float y[GN * GC * GH * 6], want[GN * GC * GH * 6];
    REQUIRE_OK(cl_backend_read(c.be, proj, y));
    cl_linear_forward(want, c.x, cl_graph_param(g, g->nodes[0].param[0]),
                      cl_graph_param(g, g->nodes[0].param[1]), GN * GC * GH,
                      &g->nodes[0].attr.linear);
    CHECK(memcmp(y, want, sizeof y) == 0);
    fd_all_params(&c);
    gcase_free(&c);
}

/* linear's shape rule: ranks 2..5, the leading dimensions kept. */
CL_TEST(linear_infer_any_rank)
{
    cl_linear_attr a = {3, 7, 0};
    cl_shape x5 = cl_shape_make(5, (int64_t[]){2, 4, 1, 6, 3}), y;
    REQUIRE_OK(cl_linear_infer(&a, &x5, &y));
    CHECK(y.ndim == 5 && y.d[0] == 2 && y.d[1] == 4 && y.d[2] == 1 &&
          y.d[3] == 6 && y.d[4] == 7);
    cl_shape x1 = cl_shape_make(1, (int64_t[]){3});
    CHECK_ERR(cl_linear_infer(&a, &x1, &y), CL_ERR_SHAPE,
              "input has 1 dimensions, expected 2..5");
    cl_shape x3 = cl_shape_make(3, (int64_t[]){2, 3, 4});
    CHECK_ERR(cl_linear_infer(&a, &x3, &y), CL_ERR_SHAPE,
              "input has 4 features, attr.in_features is 3");
    cl_shape big = cl_shape_make(3, (int64_t[]){1 << 20, 1 << 12, 3});
    CHECK_ERR(cl_linear_infer(&a, &big, &y), CL_ERR_SHAPE, "rows in all");
}

/* Both inputs of both products take gradients: q, k and v's weights match
 * finite differences only when each matmul input's gradient is right. */
CL_TEST(matmul_gradients_for_both_inputs)
{
    gcase c;
    cl_status s = gcase_make(&c, build_attention, "ref");
    if (s != CL_OK) {
        cl_test_fail(__FILE__, __LINE__, "setup: %s", cl_last_error());
        gcase_free(&c);
        return;
    }
    const cl_shape *ss = &c.g.tensors[c.g.nodes[3].out].shape;
    CHECK(c.g.nodes[3].op == CL_OP_MATMUL && ss->ndim == 4 && ss->d[2] == GH &&
          ss->d[3] == GH);
    fd_all_params(&c);
    gcase_free(&c);
}

/* The per-op rule of ops.def: which inputs take a gradient. */
CL_TEST(grad_inputs_per_op)
{
    CHECK(cl_op_grad_inputs(CL_OP_ADD) == 0x3u);
    CHECK(cl_op_grad_inputs(CL_OP_MATMUL) == 0x3u);
    /* the logits, never the labels or targets */
    CHECK(cl_op_grad_inputs(CL_OP_SOFTMAX_CE) == 0x1u);
    CHECK(cl_op_grad_inputs(CL_OP_CONV2D) == 0x1u);
    /* x and the optional bias; a node without the bias has n_in 1 */
    CHECK(cl_op_grad_inputs(CL_OP_SOFTMAX) == 0x3u);
    CHECK(cl_op_grad_inputs(CL_OP_LAYERNORM) == 0x1u);
    CHECK(cl_op_grad_inputs(CL_OP_GELU) == 0x1u);
    CHECK(cl_op_grad_inputs(CL_OP_COUNT) == 0u);
}

/* Values an f32 count would not keep (2^40 + 3) and negatives. */
static const int64_t INDEX[6] = {0, 5, -7, (INT64_C(1) << 40) + 3, 2, 1};

/* An I64 buffer is written as int64 with its shape and read back
 * exactly, beside BN's buffers; num_batches_tracked stays what it was: a
 * 0-d int64 in the file, a float count in the graph. */
CL_TEST(checkpoint_i64_buffer_round_trip)
{
    cl_graph g, h;
    REQUIRE_OK(cl_graph_init(&g, GN));
    REQUIRE_OK(build_bn_index(&g));
    REQUIRE_OK(cl_graph_init(&h, GN));
    REQUIRE_OK(build_bn_index(&h));
    int ix = cl_graph_find(&g, "rel.index");
    int nbt = cl_graph_find(&g, "bn.num_batches_tracked");
    int rm = cl_graph_find(&g, "bn.running_mean");
    REQUIRE(ix >= 0 && nbt >= 0 && rm >= 0);
    CHECK(g.tensors[ix].dtype == CL_I64);
    memcpy(cl_graph_buffer_i64(&g, ix), INDEX, sizeof INDEX);
    cl_graph_buffer(&g, nbt)[0] = 5.0f;
    fill_uniform(cl_graph_buffer(&g, rm), GC, 3, -1.0f, 1.0f);
    fill_params(&g, 9);
    const char *path = cl_test_path("i64.safetensors");
    REQUIRE_OK(cl_ckpt_save_model(path, &g, NULL, 0));

    cl_st_file *f = NULL;
    REQUIRE_OK(cl_st_open(&f, path));
    long fi = cl_st_find(f, "rel.index"),
         fn = cl_st_find(f, "bn.num_batches_tracked");
    REQUIRE(fi >= 0 && fn >= 0);
    cl_st_dtype dt;
    cl_shape fs;
    cl_st_info(f, (size_t)fi, &dt, &fs);
    CHECK(dt == CL_ST_I64 && fs.ndim == 2 && fs.d[0] == 3 && fs.d[1] == 2);
    int64_t got[6] = {0};
    CHECK_OK(cl_st_read_i64(f, (size_t)fi, got, 6));
    CHECK(memcmp(got, INDEX, sizeof INDEX) == 0);
    cl_st_info(f, (size_t)fn, &dt, &fs);
    CHECK(dt == CL_ST_I64 && fs.ndim == 0);
    CHECK_OK(cl_st_read_i64(f, (size_t)fn, got, 1));
    CHECK(got[0] == 5);
    cl_st_close(f);

    cl_ckpt_load_report rep;
    REQUIRE_OK(cl_ckpt_load_model(path, &h, CL_CKPT_STRICT, &rep));
    CHECK(memcmp(cl_graph_buffer_i64(&h, ix), INDEX, sizeof INDEX) == 0);
    CHECK(cl_graph_buffer(&h, nbt)[0] == 5.0f);
    CHECK(memcmp(cl_graph_buffer(&h, rm), cl_graph_buffer(&g, rm),
                 GC * sizeof(float)) == 0);
    CHECK(memcmp(h.params, g.params, g.n_param_floats * sizeof(float)) == 0);
    cl_graph_free(&g);
    cl_graph_free(&h);
}

CL_TEST(buffer_add_errors)
{
    cl_graph g;
    int t;
    REQUIRE_OK(cl_graph_init(&g, GN));
    cl_shape s = cl_shape_make(1, (int64_t[]){4});
    REQUIRE_OK(cl_graph_buffer_add(&g, "a.index", s, CL_I64, &t));
    CHECK_ERR(cl_graph_buffer_add(&g, "a.index", s, CL_I64, &t), CL_ERR_ARG,
              "a.index: the graph already has a tensor of this name");
    CHECK_ERR(cl_graph_buffer_add(&g, "b", s, CL_I32, &t), CL_ERR_ARG,
              "b: buffer of dtype i32, expected f32 or i64");
    cl_shape z = cl_shape_make(1, (int64_t[]){0});
    CHECK_ERR(cl_graph_buffer_add(&g, "c", z, CL_F32, &t), CL_ERR_SHAPE,
              "c: buffer dimension 0 is 0");
    cl_graph_free(&g);
}

/* The gather node has no activation input; its table takes a gradient
 * (rows summed where the index repeats, zero where no position reads it)
 * that matches finite differences. */
CL_TEST(param_only_node_gets_its_gradient)
{
    gcase c;
    cl_status s = gcase_make(&c, build_bias, "ref");
    if (s != CL_OK) {
        cl_test_fail(__FILE__, __LINE__, "setup: %s", cl_last_error());
        gcase_free(&c);
        return;
    }
    cl_graph *g = &c.g;
    const cl_node *n = &g->nodes[1];
    REQUIRE(n->op == CL_OP_TABLE_GATHER && n->n_in == 0 && n->n_param == 1);
    const cl_shape *bs = &g->tensors[n->out].shape;
    CHECK(bs->ndim == 2 && bs->d[0] == 6 && bs->d[1] == 6);
    REQUIRE_OK(cl_backend_forward(c.be, 1, NULL));
    float b[36];
    REQUIRE_OK(cl_backend_read(c.be, n->out, b));
    const float *table = cl_graph_param(g, n->param[0]);
    for (int i = 0; i < 6; i++)
        CHECK(memcmp(b + 6 * i, table + 6 * BIAS_INDEX[i], 6 * sizeof(float)) ==
              0);
    fd_all_params(&c);
    const float *dt = cl_graph_grad(g, n->param[0]);
    for (int k = 0; k < 6; k++)
        CHECK(dt[2 * 6 + k] == 0.0f && dt[4 * 6 + k] == 0.0f &&
              dt[5 * 6 + k] == 0.0f);
    /* An index outside the table stops forward naming the node. */
    cl_graph_buffer_i64(g, n->buf[0])[2] = 7;
    CHECK_ERR(cl_backend_forward(c.be, 1, NULL), CL_ERR_ARG,
              "attn.bias: table_gather: index[2] is 7, expected 0..6");
    gcase_free(&c);
}

CL_TEST(table_gather_builder_errors)
{
    cl_graph g;
    int x, ix, fx, y;
    cl_table_gather_attr ta = {7, 6};
    REQUIRE_OK(cl_graph_init(&g, GN));
    REQUIRE_OK(cl_graph_input(&g, GC, GH, GW, &x));
    cl_shape s1 = cl_shape_make(1, (int64_t[]){6});
    REQUIRE_OK(cl_graph_buffer_add(&g, "ix", s1, CL_I64, &ix));
    REQUIRE_OK(cl_graph_buffer_add(&g, "fx", s1, CL_F32, &fx));
    CHECK_ERR(cl_graph_table_gather(&g, "t", "t.table", fx, &ta, &y),
              CL_ERR_ARG, "t: the index (tensor");
    CHECK_ERR(cl_graph_table_gather(&g, "t", "ix", ix, &ta, &y), CL_ERR_ARG,
              "t: the table's name 'ix' is empty or taken");
    cl_table_gather_attr bad = {0, 6};
    CHECK_ERR(cl_graph_table_gather(&g, "t", "t.table", ix, &bad, &y),
              CL_ERR_SHAPE, "t: table_gather: attr.rows 0");
    REQUIRE_OK(cl_graph_table_gather(&g, "t", "t.table", ix, &ta, &y));
    CHECK(g.tensors[y].shape.ndim == 2 && g.tensors[y].shape.d[1] == 6);
    cl_graph_free(&g);
}

/* The first numbers of a node's stream as a kernel's arguments key it. */
static void args_draws(const cl_backend *be, int node, uint32_t out[4])
{
    cl_ref_args a;
    memset(&a, 0, sizeof a);
    cl_ref_args_key(&a, be, node);
    cl_rng r;
    cl_ref_rng(&a, &r);
    for (int k = 0; k < 4; k++)
        out[k] = cl_rng_u32(&r);
}

/* A kernel's arguments carry the key the trainer set on the backend
 * (cl_backend_set_step): its numbers are (seed, step, node)'s stream, and
 * another step or node draws others. */
CL_TEST(kernel_args_carry_the_step_key)
{
    gcase c;
    cl_status s = gcase_make(&c, build_linear4d, "ref");
    if (s != CL_OK) {
        cl_test_fail(__FILE__, __LINE__, "setup: %s", cl_last_error());
        gcase_free(&c);
        return;
    }
    cl_backend_set_step(c.be, 42, 9);
    uint32_t got[4], want[4], other[4];
    args_draws(c.be, 1, got);
    cl_rng r;
    cl_rng_init_node(&r, 42, 9, 1);
    for (int k = 0; k < 4; k++)
        want[k] = cl_rng_u32(&r);
    CHECK(memcmp(got, want, sizeof got) == 0);
    args_draws(c.be, 2, other);
    CHECK(memcmp(got, other, sizeof got) != 0);
    cl_backend_set_step(c.be, 42, 10);
    args_draws(c.be, 1, other);
    CHECK(memcmp(got, other, sizeof got) != 0);
    /* Setting the key changes no result of a graph that draws nothing. */
    float l0, l1;
    REQUIRE_OK(cl_backend_forward(c.be, 1, &l0));
    cl_backend_set_step(c.be, 1, 1);
    REQUIRE_OK(cl_backend_forward(c.be, 1, &l1));
    CHECK(l0 == l1);
    gcase_free(&c);
}

/* Swin's attention ops on the ref backend: layernorm (its gamma and beta
 * tagged as the norm group), gelu, and softmax of a score plus a
 * broadcast bias (whose table takes its gradient through the softmax) and
 * a constant mask; every param against finite differences of the loss.
 * Then the same graph with neither bias nor mask (n_in 1 while the op
 * differentiates two inputs). */
CL_TEST(attention_softmax_layernorm_gelu_gradients)
{
    static const gbuild_fn builds[2] = {build_attn_softmax,
                                        build_plain_softmax};
    for (int k = 0; k < 2; k++) {
        gcase c;
        cl_status s = gcase_make(&c, builds[k], "ref");
        if (s != CL_OK) {
            cl_test_fail(__FILE__, __LINE__, "setup: %s", cl_last_error());
            gcase_free(&c);
            return;
        }
        cl_graph *g = &c.g;
        int sm = -1;
        for (int i = 0; i < g->n_nodes; i++)
            if (g->nodes[i].op == CL_OP_SOFTMAX)
                sm = i;
        REQUIRE(sm >= 0);
        CHECK(g->nodes[sm].n_in == (k == 0 ? 2 : 1));
        CHECK(g->nodes[sm].n_buf == (k == 0 ? 1 : 0));
        int gm = cl_graph_find(g, "ln.weight"),
            bt = cl_graph_find(g, "ln.bias");
        REQUIRE(gm >= 0 && bt >= 0);
        CHECK(g->tensors[gm].param_flags == CL_PARAM_BN &&
              g->tensors[bt].param_flags == CL_PARAM_BN);
        /* Larger v and fc weights: the gradients that pass through the
         * softmax (q, k, the bias table) are otherwise too small for the
         * finite differences to tell from zero. */
        const char *big[2] = {"v.weight", "fc.weight"};
        for (int j = 0; j < 2; j++) {
            int t = cl_graph_find(g, big[j]);
            REQUIRE(t >= 0);
            for (int64_t e = 0; e < cl_graph_numel(g, t); e++)
                cl_graph_param(g, t)[e] *= 6.0f;
        }
        /* The probabilities sum to one per row; masked entries are ~0. */
        REQUIRE_OK(cl_backend_forward(c.be, 1, NULL));
        float p[GN * GC * GH * GH];
        REQUIRE_OK(cl_backend_read(c.be, g->nodes[sm].out, p));
        for (int r = 0; r < GN * GC * GH; r++) {
            double sum = 0;
            for (int j = 0; j < GH; j++)
                sum += p[r * GH + j];
            CHECK_NEAR(sum, 1.0, 1e-5);
        }
        if (k == 0) {
            const float *mask = cl_graph_buffer(g, g->nodes[sm].buf[0]);
            const int n0 = 1, c0 = 2; /* any (n, c) row block */
            for (int e = 0; e < GH * GH; e++)
                if (mask[n0 * GH * GH + e] < 0)
                    CHECK(p[(n0 * GC + c0) * GH * GH + e] < 1e-30f);
        }
        fd_all_params(&c);
        gcase_free(&c);
    }
}

CL_TEST(softmax_layernorm_builder_errors)
{
    cl_graph g;
    int x, y, fb, ib;
    REQUIRE_OK(cl_graph_init(&g, GN));
    REQUIRE_OK(cl_graph_input(&g, GC, GH, GW, &x));
    REQUIRE_OK(cl_graph_buffer_add(
        &g, "m", cl_shape_make(2, (int64_t[]){GH, GW}), CL_F32, &fb));
    REQUIRE_OK(cl_graph_buffer_add(
        &g, "i", cl_shape_make(2, (int64_t[]){GH, GW}), CL_I64, &ib));
    CHECK_ERR(cl_graph_softmax(&g, "sm", x, -1, ib, &y), CL_ERR_ARG,
              "sm: the mask (tensor");
    CHECK_ERR(cl_graph_softmax(&g, "sm", x, fb, -1, &y), CL_ERR_ARG,
              "sm: bias tensor 'm' is not an activation");
    REQUIRE_OK(cl_graph_buffer_add(
        &g, "m2", cl_shape_make(2, (int64_t[]){2, GW}), CL_F32, &fb));
    CHECK_ERR(cl_graph_softmax(&g, "sm", x, -1, fb, &y), CL_ERR_SHAPE,
              "sm: softmax: mask dimension 0 is 2, expected 1 or 4");
    cl_layernorm_attr la = cl_layernorm_attr_make(GH);
    CHECK_ERR(cl_graph_layernorm(&g, "ln", x, &la, &y), CL_ERR_SHAPE,
              "ln: layernorm: input's last dimension is 5, attr.features "
              "is 4");
    REQUIRE_OK(cl_graph_softmax(&g, "sm", x, x, -1, &y));
    CHECK(g.nodes[g.n_nodes - 1].n_in == 2);
    cl_graph_free(&g);
}

/* Swin's data movements as row gathers (NCHW -> NHWC, cyclic shift and
 * window partition, window reverse and shift back), the scaled product
 * q k^T, droppath and the token mean, every param's gradient against
 * finite differences of the loss (droppath's mask is the same at every
 * forward of one step).  The window index and its reverse compose to the
 * identity; a bad index stops forward naming the node. */
CL_TEST(window_attention_gradients)
{
    enum { ROWS = GN * WG * WG };
    int64_t fwd[ROWS], inv[ROWS];
    window_index(fwd, inv, GN);
    for (int i = 0; i < ROWS; i++)
        CHECK(inv[fwd[i]] == i && fwd[inv[i]] == i);
    gcase c;
    cl_status s = gcase_make(&c, build_window, "ref");
    if (s != CL_OK) {
        cl_test_fail(__FILE__, __LINE__, "setup: %s", cl_last_error());
        gcase_free(&c);
        return;
    }
    cl_graph *g = &c.g;
    /* A step whose mask keeps one sample and drops the other, so the
     * check sees both. */
    int drop = -1;
    for (int k = 0; k < g->n_nodes; k++)
        if (g->nodes[k].op == CL_OP_DROPPATH)
            drop = k;
    REQUIRE(drop >= 0);
    cl_backend_set_step(c.be, 3, mixed_step(g, 3));
    fd_all_params(&c);
    /* The shifted windows' product, reversed: the tokens of the gathered
     * output are the ref kernels' rows. */
    int win = g->nodes[drop].in[0];
    float rv[ROWS * WE];
    REQUIRE_OK(cl_backend_read(c.be, win, rv));
    CHECK(isfinite(rv[0]));
    int ix = cl_graph_find(g, "window.index");
    REQUIRE(ix >= 0);
    cl_graph_buffer_i64(g, ix)[3] = ROWS;
    CHECK_ERR(cl_backend_forward(c.be, 1, NULL), CL_ERR_ARG,
              "window: row_gather: index[3] is 32, expected 0..31");
    gcase_free(&c);
}

/* The builders' refusals name the node and the field. */
CL_TEST(token_builders_errors)
{
    cl_graph g;
    int x, ix, fx, y;
    REQUIRE_OK(cl_graph_init(&g, GN));
    REQUIRE_OK(cl_graph_input(&g, GC, GH, GW, &x));
    cl_shape s1 = cl_shape_make(1, (int64_t[]){GN * GC * GH});
    REQUIRE_OK(cl_graph_buffer_add(&g, "ix", s1, CL_I64, &ix));
    REQUIRE_OK(cl_graph_buffer_add(&g, "fx", s1, CL_F32, &fx));
    cl_shape os = cl_shape_make(2, (int64_t[]){GN * GC * GH, GW});
    CHECK_ERR(cl_graph_row_gather(&g, "g", x, fx, GW, &os, &y), CL_ERR_ARG,
              "g: the index (tensor");
    CHECK_ERR(cl_graph_row_gather(&g, "g", x, ix, 0, &os, &y), CL_ERR_SHAPE,
              "g: row_gather: attr.cols is 0");
    REQUIRE_OK(cl_graph_row_gather(&g, "g", x, ix, GW, &os, &y));
    cl_droppath_attr bad = {-0.1f};
    CHECK_ERR(cl_graph_droppath(&g, "d", x, &bad, &y), CL_ERR_SHAPE,
              "d: droppath: attr.p is -0.1");
    CHECK_ERR(cl_graph_token_meanpool(&g, "m", x, &y), CL_ERR_SHAPE,
              "m: token_meanpool: input has 4 dimensions");
    CHECK_ERR(cl_graph_token_meanpool(&g, "m", ix, &y), CL_ERR_ARG,
              "m: input tensor 'ix' is not an activation");
    cl_graph_free(&g);
}

/* MACs per image: a linear counts every row of its input (Swin's token
 * projections: rows per image times in times out), a matmul B*M*K*N;
 * the token ops none. */
CL_TEST(macs_of_tokens_and_products)
{
    cl_graph g;
    REQUIRE_OK(cl_graph_init(&g, GN));
    REQUIRE_OK(build_window(&g));
    const int64_t nw = (WG / WS) * (WG / WS);
    const int64_t proj = (int64_t)GC * GH * GW * WG; /* rows C*H, 5 -> 4 */
    const int64_t embed = (int64_t)WG * WG * GC * WE;
    const int64_t qk = nw * WS * WS * WE * WS * WS; /* (4,6) x (6,4) */
    const int64_t sv = nw * WS * WS * WS * WS * WE; /* (4,4) x (4,6) */
    const int64_t fc = (int64_t)WE * GK;
    CHECK(cl_graph_macs(&g) == proj + embed + qk + sv + fc);
    cl_graph_free(&g);
}
