/* Graph and the ref backend: builder errors, consumers and arenas, forward
 * against the kernels called by hand, backward against finite differences
 * (a small graph with fan-out and a small ResNet-18), grad_ready, the
 * SyncBatchNorm path, and plain SGD lowering the loss.
 * ctest-labels: unit */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/mem.h"
#include "core/rng.h"
#include "graph/graph.h"
#include "harness.h"
#include "models/resnet.h"

/* ---- fixtures --------------------------------------------------------- */

/* The tiny graph: x (N,3,6,6) -> c1 (3x3, bias) -> bn -> r (relu) ->
 * c2 (3x3) -> sum = r + c2 -> out (relu) -> pool (2x2/2) -> gap -> fc (4->5)
 * -> loss.  r feeds both c2 and sum: a fan-out in backward. */
typedef struct tiny {
    cl_graph g;
    int x, c1, bn, r, c2, sum, out, pool, gap, fc;
} tiny;

enum { TN = 3, TC = 3, TH = 6, TK = 5 };

static cl_status tiny_build(tiny *t, int soft)
{
    cl_graph *g = &t->g;
    CL_TRY(cl_graph_init(g, TN));
    CL_TRY(cl_graph_input(g, TC, TH, TH, &t->x));
    cl_conv2d_attr a1 = cl_conv2d_attr_make(TC, 4, 3, 1, 1);
    a1.has_bias = 1;
    CL_TRY(cl_graph_conv2d(g, "c1", t->x, &a1, &t->c1));
    cl_batchnorm2d_attr ba = cl_batchnorm2d_attr_make(4);
    CL_TRY(cl_graph_batchnorm2d(g, "bn", t->c1, &ba, &t->bn));
    CL_TRY(cl_graph_relu(g, "r", t->bn, &t->r));
    cl_conv2d_attr a2 = cl_conv2d_attr_make(4, 4, 3, 1, 1);
    CL_TRY(cl_graph_conv2d(g, "c2", t->r, &a2, &t->c2));
    CL_TRY(cl_graph_add(g, "sum", t->r, t->c2, &t->sum));
    CL_TRY(cl_graph_relu(g, "out", t->sum, &t->out));
    cl_maxpool2d_attr mp = {2, 2, 2, 2, 0, 0};
    CL_TRY(cl_graph_maxpool2d(g, "pool", t->out, &mp, &t->pool));
    CL_TRY(cl_graph_global_avgpool(g, "gap", t->pool, &t->gap));
    cl_linear_attr la = {4, TK, 1};
    CL_TRY(cl_graph_linear(g, "fc", t->gap, &la, &t->fc));
    cl_softmax_ce_attr sa = {TK, 0.0f};
    CL_TRY(cl_graph_softmax_ce(g, t->fc, &sa, soft));
    CL_TRY(cl_graph_finalize(g));
    /* Random params (BN gamma around 1) so that no gradient is trivial. */
    cl_rng r;
    cl_rng_init(&r, 99, 1);
    for (int i = 0; i < g->n_tensors; i++) {
        if (g->tensors[i].kind != CL_GT_PARAM)
            continue;
        float *p = cl_graph_param(g, i);
        int is_gamma = strcmp(g->tensors[i].name, "bn.weight") == 0;
        for (int64_t k = 0; k < cl_graph_numel(g, i); k++)
            p[k] = (is_gamma ? 1.0f : 0.0f) + 0.4f * (float)cl_rng_normal(&r);
    }
    return CL_OK;
}

static void fill_normal(float *p, int64_t n, uint64_t seed)
{
    cl_rng r;
    cl_rng_init(&r, seed, 7);
    for (int64_t i = 0; i < n; i++)
        p[i] = (float)cl_rng_normal(&r);
}

/* A small ResNet-18 with the CIFAR stem, initialised, on the ref backend,
 * with a fixed random batch and labels. */
typedef struct small_net {
    cl_graph g;
    cl_resnet_config cfg;
    cl_backend *be;
    float *x;
    int32_t labels[16];
} small_net;

static cl_status small_net_make(small_net *s, int batch, int hw, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    CL_ASSERT(batch <= 16);
    s->cfg = cl_resnet_config_default();
    s->cfg.depth = 18;
    s->cfg.stem = CL_STEM_CIFAR;
    s->cfg.num_classes = 10;
    CL_TRY(cl_graph_init(&s->g, batch));
    CL_TRY(cl_resnet_build(&s->g, &s->cfg, hw, hw, 0, 0.0f));
    CL_TRY(cl_resnet_init(&s->g, &s->cfg, seed));
    int64_t n = cl_graph_numel(&s->g, s->g.input);
    s->x = cl_alloc((size_t)n * sizeof(float), "test batch");
    if (!s->x)
        return CL_ERR_NOMEM;
    fill_normal(s->x, n, seed + 1);
    for (int i = 0; i < batch; i++)
        s->labels[i] = (int32_t)((i * 7 + 3) % 10);
    CL_TRY(cl_backend_create(&s->be, "ref", &s->g, CL_PLAN_TRAIN, NULL));
    return cl_backend_set_input(s->be, s->x, s->labels, NULL);
}

static void small_net_free(small_net *s)
{
    cl_backend_destroy(s->be);
    cl_free(s->x);
    cl_graph_free(&s->g);
}

/* Training-mode loss at the current params. */
static double train_loss(cl_backend *be)
{
    float l = NAN;
    if (cl_backend_forward(be, 1, &l) != CL_OK)
        return NAN;
    return l;
}

/* (L(p + h) - L(p - h)) / (the step float could represent), at p[i]. */
static double central_diff(cl_backend *be, float *p, int64_t i, double h)
{
    float orig = p[i], up = (float)(orig + h), dn = (float)(orig - h);
    p[i] = up;
    double lp = train_loss(be);
    p[i] = dn;
    double lm = train_loss(be);
    p[i] = orig;
    return (lp - lm) / ((double)up - dn);
}

/* Checks the analytic gradient of param tensor `name` (in the grad arena)
 * against central differences on its k largest entries: |an - fd| <= atol
 * + rtol * |fd|. */
static void fd_check(cl_backend *be, cl_graph *g, const char *name, int k,
                     double h, double atol, double rtol)
{
    int t = cl_graph_find(g, name);
    if (t < 0) {
        cl_test_fail(__FILE__, __LINE__, "no param %s", name);
        return;
    }
    int64_t n = cl_graph_numel(g, t);
    float *p = cl_graph_param(g, t);
    const float *gr = cl_graph_grad(g, t);
    int64_t picked[8];
    float an[8];
    CL_ASSERT(k <= 8);
    /* The k entries of largest |grad|: where a wrong gradient shows. */
    for (int j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t i = 0; i < n; i++) {
            int taken = 0;
            for (int q = 0; q < j; q++)
                taken |= picked[q] == i;
            if (!taken && (best < 0 || fabsf(gr[i]) > fabsf(gr[best])))
                best = i;
        }
        picked[j] = best;
        an[j] = gr[best];
    }
    for (int j = 0; j < k; j++) {
        double fd = central_diff(be, p, picked[j], h);
        if (!(fabs(fd - an[j]) <= atol + rtol * fabs(fd)))
            cl_test_fail(__FILE__, __LINE__,
                         "%s[%lld]: backward %.6g, finite difference %.6g",
                         name, (long long)picked[j], an[j], fd);
    }
    if (!(fabs(an[0]) > 10 * atol))
        cl_test_fail(__FILE__, __LINE__,
                     "%s: largest gradient %g is too small to check", name,
                     an[0]);
}

/* ---- graph ------------------------------------------------------------ */

CL_TEST(builder_errors_name_the_node)
{
    cl_graph g;
    REQUIRE_OK(cl_graph_init(&g, 2));
    int x, y, z;
    CHECK_ERR(cl_graph_input(&g, 0, 8, 8, &x), CL_ERR_SHAPE, "input: shape");
    REQUIRE_OK(cl_graph_input(&g, 3, 8, 8, &x));
    CHECK_ERR(cl_graph_input(&g, 3, 8, 8, &x), CL_ERR_ARG, "already");
    cl_conv2d_attr a = cl_conv2d_attr_make(4, 8, 3, 1, 1);
    CHECK_ERR(cl_graph_conv2d(&g, "layer2.0.conv1", x, &a, &y), CL_ERR_SHAPE,
              "layer2.0.conv1: conv2d: input has 3 channels");
    a = cl_conv2d_attr_make(3, 8, 9, 1, 0);
    CHECK_ERR(cl_graph_conv2d(&g, "big", x, &a, &y), CL_ERR_SHAPE, "big: ");
    a = cl_conv2d_attr_make(3, 8, 3, 2, 1);
    REQUIRE_OK(cl_graph_conv2d(&g, "c", x, &a, &y));
    CHECK_ERR(cl_graph_add(&g, "sum", x, y, &z), CL_ERR_SHAPE,
              "sum: add of (2, 3, 8, 8) ('input') and (2, 8, 4, 4) ('c')");
    cl_batchnorm2d_attr b = cl_batchnorm2d_attr_make(3);
    CHECK_ERR(cl_graph_batchnorm2d(&g, "bn", y, &b, &z), CL_ERR_SHAPE,
              "bn: batchnorm2d: input has 8 channels");
    cl_linear_attr la = {8, 10, 1};
    /* Over the last dimension (4 here) of any rank. */
    CHECK_ERR(cl_graph_linear(&g, "fc", y, &la, &z), CL_ERR_SHAPE,
              "fc: linear: input has 4 features, attr.in_features is 8");
    CHECK_ERR(cl_graph_relu(&g, "r", 999, &z), CL_ERR_ARG,
              "r: input tensor 999 does not exist");
    int w = cl_graph_find(&g, "c.weight");
    CHECK(w >= 0);
    CHECK_ERR(cl_graph_relu(&g, "r", w, &z), CL_ERR_ARG,
              "'c.weight' is not an activation");
    CHECK_ERR(cl_graph_relu(&g, "", y, &z), CL_ERR_ARG, "has no name");
    char longname[100];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    CHECK_ERR(cl_graph_relu(&g, longname, y, &z), CL_ERR_ARG, "longer than 63");
    /* A node name leaving no room for ".num_batches_tracked". */
    memset(longname, 'b', 50);
    longname[50] = '\0';
    b = cl_batchnorm2d_attr_make(8);
    CHECK_ERR(cl_graph_batchnorm2d(&g, longname, y, &b, &z), CL_ERR_ARG,
              "longer than 63");
    cl_graph_free(&g);

    /* Finalize rules. */
    REQUIRE_OK(cl_graph_init(&g, 1));
    CHECK_ERR(cl_graph_finalize(&g), CL_ERR_ARG, "no input");
    REQUIRE_OK(cl_graph_input(&g, 1, 4, 4, &x));
    REQUIRE_OK(cl_graph_relu(&g, "r", x, &y));
    REQUIRE_OK(cl_graph_finalize(&g));
    CHECK_ERR(cl_graph_finalize(&g), CL_ERR_ARG, "already finalized");
    CHECK_ERR(cl_graph_relu(&g, "r2", y, &z), CL_ERR_ARG,
              "r2: the graph is finalized");
    cl_graph_free(&g);
    cl_graph_free(&g); /* twice is harmless */
}

CL_TEST(consumers_last_use_and_arenas)
{
    tiny t;
    REQUIRE_OK(tiny_build(&t, 0));
    cl_graph *g = &t.g;
    CHECK(g->tensors[t.r].n_consumers == 2);
    CHECK(g->tensors[t.r].last_use == g->tensors[t.sum].producer);
    CHECK(g->tensors[t.c1].n_consumers == 1);
    CHECK(g->tensors[t.x].n_consumers == 1);
    CHECK(g->tensors[t.fc].n_consumers == 1);
    CHECK(g->logits == t.fc && g->loss >= 0 && g->labels >= 0);
    CHECK(g->tensors[g->loss].kind == CL_GT_LOSS);
    /* 3*4*9 + 4 + 4 + 4 + 4*4*9 + 4*5 + 5 */
    CHECK(g->n_param_elems == 108 + 4 + 8 + 144 + 25);
    int w = cl_graph_find(g, "c1.weight"), b = cl_graph_find(g, "c1.bias");
    CHECK(g->tensors[w].param_flags == CL_PARAM_WEIGHT);
    CHECK(g->tensors[b].param_flags == CL_PARAM_BIAS);
    CHECK(g->tensors[cl_graph_find(g, "fc.weight")].param_flags ==
          (CL_PARAM_WEIGHT | CL_PARAM_HEAD));
    CHECK(g->tensors[cl_graph_find(g, "bn.bias")].param_flags == CL_PARAM_BN);
    CHECK(cl_graph_param(g, b) - cl_graph_param(g, w) == 112);
    CHECK(cl_graph_grad(g, b) - g->grads == cl_graph_param(g, b) - g->params);
    CHECK(cl_graph_buffer(g, cl_graph_find(g, "bn.running_var"))[3] == 1.0f);
    int nbt = cl_graph_find(g, "bn.num_batches_tracked");
    REQUIRE(nbt >= 0);
    CHECK(cl_graph_buffer(g, nbt)[0] == 0.0f);
    cl_graph_count_batch(g);
    CHECK(cl_graph_buffer(g, nbt)[0] == 1.0f);
    /* 3*4*36*9 (c1) + 4*4*36*9 (c2) + 20 (fc) per image. */
    CHECK(cl_graph_macs(g) == 3888 + 5184 + 20);
    cl_graph_free(g);
}

/* ---- ref backend ------------------------------------------------------ */

CL_TEST(backend_create_errors)
{
    tiny t;
    REQUIRE_OK(tiny_build(&t, 0));
    cl_backend *be = (cl_backend *)&t; /* must be reset to NULL */
    CHECK_ERR(cl_backend_create(&be, "cuda", &t.g, CL_PLAN_TRAIN, NULL),
              CL_ERR_ARG, "backend 'cuda' is not one of ref, onednn");
    CHECK(be == NULL);
    cl_backend_opts o = {.amp_level = 3};
    CHECK_ERR(cl_backend_create(&be, "ref", &t.g, CL_PLAN_TRAIN, &o),
              CL_ERR_ARG, "amp level 3");
    cl_graph open;
    int x;
    REQUIRE_OK(cl_graph_init(&open, 1));
    REQUIRE_OK(cl_graph_input(&open, 1, 2, 2, &x));
    CHECK_ERR(cl_backend_create(&be, "ref", &open, CL_PLAN_TRAIN, NULL),
              CL_ERR_ARG, "must be finalized");
    cl_graph_free(&open);
    cl_backend_destroy(NULL);
    cl_graph_free(&t.g);
}

CL_TEST(ref_forward_matches_kernels)
{
    tiny t;
    REQUIRE_OK(tiny_build(&t, 0));
    cl_graph *g = &t.g;
    cl_backend *be;
    REQUIRE_OK(cl_backend_create(&be, "ref", g, CL_PLAN_TRAIN, NULL));
    float x[TN * TC * TH * TH];
    fill_normal(x, TN * TC * TH * TH, 5);
    int32_t lab[TN] = {1, 4, 0};
    REQUIRE_OK(cl_backend_set_input(be, x, lab, NULL));
    float loss;
    REQUIRE_OK(cl_backend_forward(be, 0, &loss));

    /* The same network by hand, inference BN (running stats 0 / 1). */
    enum { P = TN * 4 * TH * TH };
    float c1[P], bn[P], c2[P], sum[P], pool[TN * 4 * 9], gap[TN * 4],
        fc[TN * TK], probs[TN * TK];
    cl_conv2d_attr a1 = g->nodes[0].attr.conv2d, a2 = g->nodes[3].attr.conv2d;
    cl_conv2d_forward(c1, x, cl_graph_param(g, cl_graph_find(g, "c1.weight")),
                      cl_graph_param(g, cl_graph_find(g, "c1.bias")), TN, TH,
                      TH, &a1);
    cl_batchnorm2d_attr ba = cl_batchnorm2d_attr_make(4);
    float rm[4] = {0}, rv[4] = {1, 1, 1, 1};
    cl_batchnorm2d_forward_infer(
        bn, c1, cl_graph_param(g, cl_graph_find(g, "bn.weight")),
        cl_graph_param(g, cl_graph_find(g, "bn.bias")), rm, rv, TN, 4, TH * TH,
        &ba);
    cl_relu_forward(bn, bn, P);
    cl_conv2d_forward(c2, bn, cl_graph_param(g, cl_graph_find(g, "c2.weight")),
                      NULL, TN, TH, TH, &a2);
    cl_add_forward(sum, bn, c2, P);
    cl_relu_forward(sum, sum, P);
    cl_maxpool2d_forward(pool, NULL, sum, TN, 4, TH, TH,
                         &g->nodes[6].attr.maxpool2d);
    cl_global_avgpool_forward(gap, pool, TN, 4, 9);
    cl_linear_attr la = {4, TK, 1};
    cl_linear_forward(fc, gap, cl_graph_param(g, cl_graph_find(g, "fc.weight")),
                      cl_graph_param(g, cl_graph_find(g, "fc.bias")), TN, &la);
    cl_softmax_ce_attr sa = {TK, 0.0f};
    float want = cl_softmax_ce_forward(probs, fc, lab, NULL, TN, &sa);

    float got[TN * TK];
    REQUIRE_OK(cl_backend_read(be, g->logits, got));
    for (int i = 0; i < TN * TK; i++)
        CHECK_NEAR(got[i], fc[i], 1e-5);
    CHECK_NEAR(loss, want, 1e-6);
    CHECK(isfinite(loss) && loss > 0);
    float feat[TN * 4], l1;
    REQUIRE_OK(cl_backend_read(be, t.gap, feat));
    CHECK_NEAR(feat[5], gap[5], 1e-6);
    REQUIRE_OK(cl_backend_read(be, g->loss, &l1));
    CHECK(l1 == loss);
    /* The in-place ReLU overwrote the BN output: read says so. */
    CHECK_ERR(cl_backend_read(be, t.bn, feat), CL_ERR_UNSUPPORTED,
              "'bn' is overwritten in place by 'r'");
    CHECK_ERR(cl_backend_read(be, cl_graph_find(g, "fc.bias"), feat),
              CL_ERR_ARG, "not an activation");
    /* Eval forward leaves the running stats and counter alone. */
    CHECK(cl_graph_buffer(g, cl_graph_find(g, "bn.num_batches_tracked"))[0] ==
          0.0f);
    CHECK(cl_graph_buffer(g, cl_graph_find(g, "bn.running_mean"))[0] == 0.0f);
    REQUIRE_OK(cl_backend_forward(be, 1, &loss));
    CHECK(cl_graph_buffer(g, cl_graph_find(g, "bn.num_batches_tracked"))[0] ==
          1.0f);
    CHECK(cl_graph_buffer(g, cl_graph_find(g, "bn.running_mean"))[0] != 0.0f);
    CHECK_OK(cl_backend_sync_params(be));
    cl_backend_destroy(be);
    cl_graph_free(g);
}

CL_TEST(ref_step_errors)
{
    tiny t;
    REQUIRE_OK(tiny_build(&t, 0));
    cl_backend *be;
    REQUIRE_OK(cl_backend_create(&be, "ref", &t.g, CL_PLAN_TRAIN, NULL));
    float x[TN * TC * TH * TH] = {0}, soft[TN * TK] = {0};
    int32_t bad[TN] = {0, 5, 1}, lab[TN] = {0, 1, 2};
    CHECK_ERR(cl_backend_set_input(be, x, bad, NULL), CL_ERR_ARG,
              "label of sample 1 is 5");
    CHECK_ERR(cl_backend_set_input(be, x, lab, soft), CL_ERR_ARG,
              "both labels and soft targets");
    CHECK_ERR(cl_backend_set_input(be, NULL, lab, NULL), CL_ERR_ARG,
              "without an image batch");
    CHECK_ERR(cl_backend_backward(be), CL_ERR_ARG, "training forward first");
    REQUIRE_OK(cl_backend_set_input(be, x, NULL, NULL));
    float loss = 0;
    REQUIRE_OK(cl_backend_forward(be, 1, &loss));
    CHECK(isnan(loss));
    CHECK_ERR(cl_backend_backward(be), CL_ERR_ARG, "labels or targets");
    REQUIRE_OK(cl_backend_set_input(be, x, lab, NULL));
    REQUIRE_OK(cl_backend_forward(be, 0, &loss));
    CHECK_ERR(cl_backend_backward(be), CL_ERR_ARG, "training forward first");
    REQUIRE_OK(cl_backend_forward(be, 1, NULL));
    CHECK_OK(cl_backend_backward(be));
    cl_backend_destroy(be);

    /* An inference plan runs forward only. */
    REQUIRE_OK(cl_backend_create(&be, "ref", &t.g, CL_PLAN_INFER, NULL));
    REQUIRE_OK(cl_backend_set_input(be, x, lab, NULL));
    REQUIRE_OK(cl_backend_forward(be, 0, &loss));
    CHECK(isfinite(loss));
    CHECK_ERR(cl_backend_backward(be), CL_ERR_ARG, "planned for inference");
    cl_backend_destroy(be);
    cl_graph_free(&t.g);
}

CL_TEST(ref_infer_plan_equals_train_plan)
{
    small_net s;
    REQUIRE_OK(small_net_make(&s, 2, 16, 3));
    cl_backend *inf;
    REQUIRE_OK(cl_backend_create(&inf, "ref", &s.g, CL_PLAN_INFER, NULL));
    REQUIRE_OK(cl_backend_set_input(inf, s.x, s.labels, NULL));
    float la, lb, ya[20], yb[20];
    REQUIRE_OK(cl_backend_forward(s.be, 0, &la));
    REQUIRE_OK(cl_backend_forward(inf, 0, &lb));
    REQUIRE_OK(cl_backend_read(s.be, s.g.logits, ya));
    REQUIRE_OK(cl_backend_read(inf, s.g.logits, yb));
    CHECK(la == lb);
    CHECK(memcmp(ya, yb, sizeof ya) == 0);
    cl_backend_destroy(inf);
    small_net_free(&s);
}

/* Finite differences on every param tensor of the tiny graph: c1 sits
 * before the fan-out, so its gradient is right only if the two consumers'
 * gradients of r are summed. */
CL_TEST(ref_backward_finite_differences_fanout)
{
    for (int soft = 0; soft <= 1; soft++) {
        tiny t;
        REQUIRE_OK(tiny_build(&t, soft));
        cl_backend *be;
        REQUIRE_OK(cl_backend_create(&be, "ref", &t.g, CL_PLAN_TRAIN, NULL));
        float x[TN * TC * TH * TH], tg[TN * TK];
        fill_normal(x, TN * TC * TH * TH, 11);
        int32_t lab[TN] = {2, 0, 4};
        for (int i = 0; i < TN * TK; i++)
            tg[i] = (i % TK == lab[i / TK]) ? 0.7f : 0.075f;
        REQUIRE_OK(
            cl_backend_set_input(be, x, soft ? NULL : lab, soft ? tg : NULL));
        REQUIRE_OK(cl_backend_forward(be, 1, NULL));
        REQUIRE_OK(cl_backend_backward(be));
        /* h = 1e-3: small enough not to cross a ReLU or max-pool kink,
         * large enough for the float loss (noise ~1e-4). */
        static const char *names[] = {"c1.weight", "bn.weight", "bn.bias",
                                      "c2.weight", "fc.weight", "fc.bias"};
        for (int i = 0; i < 6; i++)
            fd_check(be, &t.g, names[i], 4, 1e-3, 5e-4, 1e-2);
        /* BN normalises a per-channel shift away: c1's bias gets none. */
        const float *gb = cl_graph_grad(&t.g, cl_graph_find(&t.g, "c1.bias"));
        for (int k = 0; k < 4; k++)
            CHECK(fabsf(gb[k]) < 1e-5f);
        cl_backend_destroy(be);
        cl_graph_free(&t.g);
    }
}

/* The fan-out sum checked exactly: x > 0 -> c1 (1x1, weight w1) -> relu r
 * -> sum = r + c2(r) (c2 a 1x1 with weight w2) -> gap -> fc -> loss.  With
 * everything positive the net is linear in w1 * (1 + w2), so the gradient
 * of w1 at (w1, w2) is (1 + w2) times the gradient at (w1 (1 + w2), 0),
 * where the logits are the same.  Keeping one path only would give a
 * ratio of 1 or w2. */
static cl_status fan_build(cl_graph *g)
{
    int x, y, r, c, s, p, l;
    CL_TRY(cl_graph_init(g, 2));
    CL_TRY(cl_graph_input(g, 1, 4, 4, &x));
    cl_conv2d_attr a = cl_conv2d_attr_make(1, 1, 1, 1, 0);
    CL_TRY(cl_graph_conv2d(g, "c1", x, &a, &y));
    CL_TRY(cl_graph_relu(g, "r", y, &r));
    CL_TRY(cl_graph_conv2d(g, "c2", r, &a, &c));
    CL_TRY(cl_graph_add(g, "sum", r, c, &s));
    CL_TRY(cl_graph_global_avgpool(g, "gap", s, &p));
    cl_linear_attr la = {1, 3, 1};
    CL_TRY(cl_graph_linear(g, "fc", p, &la, &l));
    cl_softmax_ce_attr sa = {3, 0.0f};
    CL_TRY(cl_graph_softmax_ce(g, l, &sa, 0));
    return cl_graph_finalize(g);
}

CL_TEST(ref_fanout_sums_both_paths)
{
    cl_graph g;
    REQUIRE_OK(fan_build(&g));
    cl_backend *be;
    REQUIRE_OK(cl_backend_create(&be, "ref", &g, CL_PLAN_TRAIN, NULL));
    float x[32];
    for (int i = 0; i < 32; i++)
        x[i] = 0.1f + 0.05f * (float)(i % 7);
    int32_t lab[2] = {0, 2};
    REQUIRE_OK(cl_backend_set_input(be, x, lab, NULL));
    float *w1 = cl_graph_param(&g, cl_graph_find(&g, "c1.weight"));
    float *w2 = cl_graph_param(&g, cl_graph_find(&g, "c2.weight"));
    float *fw = cl_graph_param(&g, cl_graph_find(&g, "fc.weight"));
    fw[0] = 1.0f;
    fw[1] = -2.0f;
    fw[2] = 0.5f;
    const float *g1 = cl_graph_grad(&g, cl_graph_find(&g, "c1.weight"));
    w1[0] = 0.8f;
    w2[0] = 0.6f;
    float la, lb;
    REQUIRE_OK(cl_backend_forward(be, 1, &la));
    REQUIRE_OK(cl_backend_backward(be));
    float both = g1[0];
    w1[0] = 0.8f * 1.6f;
    w2[0] = 0.0f;
    REQUIRE_OK(cl_backend_forward(be, 1, &lb));
    REQUIRE_OK(cl_backend_backward(be));
    float single = g1[0];
    CHECK_NEAR(la, lb, 1e-6);
    CHECK(fabsf(single) > 1e-3f);
    CHECK_NEAR(both, 1.6f * single, 1e-5 + 1e-4 * fabsf(both));
    cl_backend_destroy(be);
    cl_graph_free(&g);
}

CL_TEST(ref_resnet18_forward)
{
    small_net s;
    REQUIRE_OK(small_net_make(&s, 3, 16, 21));
    float loss = NAN, logits[30], feat[3 * 512];
    REQUIRE_OK(cl_backend_forward(s.be, 1, &loss));
    CHECK(isfinite(loss) && loss > 0.5f && loss < 20.0f);
    REQUIRE_OK(cl_backend_read(s.be, s.g.logits, logits));
    REQUIRE_OK(cl_backend_read(s.be, s.g.features, feat));
    int finite = 1, nonneg = 1;
    for (int i = 0; i < 30; i++)
        finite &= isfinite(logits[i]);
    for (int i = 0; i < 3 * 512; i++)
        nonneg &= feat[i] >= 0.0f; /* pooled after a ReLU */
    CHECK(finite && nonneg);
    CHECK(cl_graph_buffer(
              &s.g, cl_graph_find(
                        &s.g, "layer3.1.bn2.num_batches_tracked"))[0] == 1.0f);
    REQUIRE_OK(cl_backend_forward(s.be, 0, &loss));
    CHECK(isfinite(loss));
    REQUIRE_OK(cl_backend_forward(s.be, 1, &loss));
    REQUIRE_OK(cl_backend_backward(s.be));
    double gn = 0;
    for (size_t i = 0; i < s.g.n_param_floats; i++)
        gn += (double)s.g.grads[i] * s.g.grads[i];
    CHECK(isfinite(gn) && gn > 0);
    small_net_free(&s);
}

/* Central differences of the training-mode loss (batch statistics make it
 * a smooth function of the params away from ReLU kinks) on the largest
 * gradient entries of layers across the network. */
CL_TEST(ref_resnet18_finite_differences)
{
    small_net s;
    /* 8 images of 8x8: layer4 is 1x1, so its BNs see 8 values per
     * channel; with 2 they would see a near-degenerate variance whose
     * float rounding swamps any gradient check. */
    REQUIRE_OK(small_net_make(&s, 8, 8, 5));
    REQUIRE_OK(cl_backend_forward(s.be, 1, NULL));
    REQUIRE_OK(cl_backend_backward(s.be));
    static const char *names[] = {"conv1.weight",
                                  "bn1.bias",
                                  "layer1.0.conv1.weight",
                                  "layer2.0.downsample.0.weight",
                                  "layer3.1.bn2.weight",
                                  "layer4.1.conv2.weight",
                                  "fc.bias"};
    for (int i = 0; i < 7; i++)
        fd_check(s.be, &s.g, names[i], 1, 1e-3, 1e-3, 2e-2);
    small_net_free(&s);
}

/* The Bottleneck path (1x1 / strided 3x3 / 1x1, downsample) of
 * ResNet-50 against finite differences on a few tensors. */
CL_TEST(ref_resnet50_finite_differences)
{
    small_net s;
    memset(&s, 0, sizeof s);
    s.cfg = cl_resnet_config_default();
    s.cfg.stem = CL_STEM_CIFAR;
    s.cfg.num_classes = 10;
    REQUIRE_OK(cl_graph_init(&s.g, 2));
    REQUIRE_OK(cl_resnet_build(&s.g, &s.cfg, 16, 16, 0, 0.0f));
    REQUIRE_OK(cl_resnet_init(&s.g, &s.cfg, 8));
    int64_t n = cl_graph_numel(&s.g, s.g.input);
    s.x = cl_alloc((size_t)n * sizeof(float), "test batch");
    REQUIRE(s.x != NULL);
    fill_normal(s.x, n, 9);
    s.labels[0] = 3;
    s.labels[1] = 8;
    REQUIRE_OK(cl_backend_create(&s.be, "ref", &s.g, CL_PLAN_TRAIN, NULL));
    REQUIRE_OK(cl_backend_set_input(s.be, s.x, s.labels, NULL));
    REQUIRE_OK(cl_backend_forward(s.be, 1, NULL));
    REQUIRE_OK(cl_backend_backward(s.be));
    static const char *names[] = {"layer1.0.conv3.weight",
                                  "layer2.0.conv2.weight",
                                  "layer3.0.downsample.1.weight"};
    /* A freshly initialised ResNet-50 is far from smooth at this scale:
     * a step of 1e-3 on one of the largest entries crosses enough ReLU
     * kinks to move the difference quotient by 10%; at 2e-4 the kinks
     * cost ~2% and float noise ~0.015, hence the looser tolerance.  A
     * missing or doubled path is off by far more. */
    for (int i = 0; i < 3; i++)
        fd_check(s.be, &s.g, names[i], 1, 2e-4, 0.02, 0.04);
    small_net_free(&s);
}

typedef struct ready_log {
    const cl_graph *g;
    int calls[4096];
    double sum_at_call[4096];
    int first, last;
} ready_log;

static void on_ready(void *ctx, int t)
{
    ready_log *r = ctx;
    if (t < 0 || t >= 4096)
        return;
    r->calls[t]++;
    const float *p = cl_graph_grad(r->g, t);
    double s = 0;
    for (int64_t i = 0; i < cl_graph_numel(r->g, t); i++)
        s += p[i];
    r->sum_at_call[t] = s;
    if (r->first < 0)
        r->first = t;
    r->last = t;
}

CL_TEST(ref_grad_ready_once_per_param)
{
    small_net s;
    REQUIRE_OK(small_net_make(&s, 2, 8, 9));
    static ready_log log;
    memset(&log, 0, sizeof log);
    log.g = &s.g;
    log.first = log.last = -1;
    REQUIRE(s.g.n_tensors <= 4096);
    s.be->hooks.ctx = &log;
    s.be->hooks.grad_ready = on_ready;
    REQUIRE_OK(cl_backend_forward(s.be, 1, NULL));
    REQUIRE_OK(cl_backend_backward(s.be));
    int bad = 0, n = 0;
    for (int t = 0; t < s.g.n_tensors; t++) {
        int is_param = s.g.tensors[t].kind == CL_GT_PARAM;
        n += is_param;
        if (log.calls[t] != is_param) {
            bad++;
            continue;
        }
        if (!is_param)
            continue;
        /* Final when announced. */
        const float *p = cl_graph_grad(&s.g, t);
        double sum = 0;
        for (int64_t i = 0; i < cl_graph_numel(&s.g, t); i++)
            sum += p[i];
        bad += sum != log.sum_at_call[t];
    }
    CHECK(bad == 0);
    CHECK(n == 62); /* resnet18: 62 param tensors */
    /* Backward order: the head first, the stem last. */
    CHECK(log.first == cl_graph_find(&s.g, "fc.weight"));
    CHECK(log.last == cl_graph_find(&s.g, "conv1.weight"));
    small_net_free(&s);
}

/* SyncBN hooks: one rank (identity) and two ranks holding the same batch
 * (sums doubled) must both give what plain BN gives. */
typedef struct sync_ctx {
    double factor;
    int calls;
} sync_ctx;

static cl_status allreduce_scale(void *ctx, double *v, int n)
{
    sync_ctx *c = ctx;
    for (int i = 0; i < n; i++)
        v[i] *= c->factor;
    c->calls++;
    return CL_OK;
}

static cl_status allreduce_fail(void *ctx, double *v, int n)
{
    (void)ctx;
    (void)v;
    (void)n;
    return cl_error(CL_ERR_DIST, "peer 1 went away");
}

CL_TEST(ref_syncbn_equals_plain_bn)
{
    small_net a;
    REQUIRE_OK(small_net_make(&a, 2, 8, 4));
    float la, lb, lc;
    REQUIRE_OK(cl_backend_forward(a.be, 1, &la));
    REQUIRE_OK(cl_backend_backward(a.be));
    for (int rep = 0; rep < 2; rep++) {
        small_net b;
        REQUIRE_OK(small_net_make(&b, 2, 8, 4));
        sync_ctx ctx = {rep == 0 ? 1.0 : 2.0, 0};
        b.be->hooks.ctx = &ctx;
        b.be->hooks.allreduce_sum = allreduce_scale;
        REQUIRE_OK(cl_backend_forward(b.be, 1, &lb));
        CHECK(ctx.calls == 20); /* resnet18: 20 BN layers */
        REQUIRE_OK(cl_backend_backward(b.be));
        CHECK(ctx.calls == 40);
        CHECK_NEAR(lb, la, 1e-5 * fabs(la));
        /* Param grads: dgamma / dbeta stay this rank's own sums. */
        double md = 0, mg = 0;
        for (size_t i = 0; i < a.g.n_param_floats; i++) {
            md = fmax(md, fabs((double)a.g.grads[i] - b.g.grads[i]));
            mg = fmax(mg, fabs((double)a.g.grads[i]));
        }
        if (!(md <= 1e-4 * mg))
            cl_test_fail(__FILE__, __LINE__,
                         "factor %g: grads differ by %g (largest %g)",
                         ctx.factor, md, mg);
        /* Running stats; with two ranks the unbiased variance divides by
         * 2M - 1 instead of M - 1, so only the means must agree. */
        double mb = 0;
        for (int t = 0; t < a.g.n_tensors; t++) {
            if (a.g.tensors[t].kind != CL_GT_BUFFER ||
                (rep == 1 && strstr(a.g.tensors[t].name, "running_var")))
                continue;
            const float *pa = cl_graph_buffer(&a.g, t);
            const float *pb = cl_graph_buffer(&b.g, t);
            for (int64_t i = 0; i < cl_graph_numel(&a.g, t); i++)
                mb = fmax(mb, fabs((double)pa[i] - pb[i]) /
                                  (1.0 + fabs((double)pa[i])));
        }
        if (!(mb < 1e-5))
            cl_test_fail(__FILE__, __LINE__,
                         "factor %g: running stats differ by %g", ctx.factor,
                         mb);
        /* Eval forward does not synchronise. */
        REQUIRE_OK(cl_backend_forward(b.be, 0, &lc));
        CHECK(ctx.calls == 40);
        small_net_free(&b);
    }
    small_net_free(&a);
    /* A failing collective surfaces with the layer's name. */
    small_net c;
    REQUIRE_OK(small_net_make(&c, 2, 8, 4));
    c.be->hooks.allreduce_sum = allreduce_fail;
    CHECK_ERR(cl_backend_forward(c.be, 1, &lc), CL_ERR_DIST,
              "bn1: SyncBatchNorm: peer 1 went away");
    small_net_free(&c);
}

/* Five steps of plain SGD on one fixed batch lower the loss. */
CL_TEST(ref_sgd_lowers_loss)
{
    small_net s;
    REQUIRE_OK(small_net_make(&s, 4, 8, 17));
    float first = NAN, loss = NAN;
    for (int step = 0; step < 6; step++) {
        REQUIRE_OK(cl_backend_forward(s.be, 1, &loss));
        if (step == 0)
            first = loss;
        REQUIRE_OK(cl_backend_backward(s.be));
        for (size_t i = 0; i < s.g.n_param_floats; i++)
            s.g.params[i] -= 0.05f * s.g.grads[i];
        REQUIRE_OK(cl_backend_sync_params(s.be));
    }
    CHECK(isfinite(first) && isfinite(loss));
    if (!(loss < 0.7f * first))
        cl_test_fail(__FILE__, __LINE__, "loss %g after 5 steps from %g", loss,
                     first);
    small_net_free(&s);
}
