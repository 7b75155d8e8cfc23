/* Training mathematics: optimizers against PyTorch's rules, gradient
 * clipping, learning-rate schedules against mindcv / MindSpore, metrics.
 * ctest-labels: unit */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "harness.h"
#include "io/safetensors.h"
#include "train/lr.h"
#include "train/metrics.h"
#include "train/optim.h"
#include "train/train_state.h"

/* ---- fixtures --------------------------------------------------------- */

/* Three steps on two scalars p = (1, -2) with these gradients; the golden
 * values below come from this schedule. */
static const float k_grads3[3][2] = {
    {0.5f, 0.25f}, {-1.0f, 0.5f}, {0.25f, -0.75f}};

/* Runs cfg for three steps of k_grads3 at lr, writing p after each step. */
static void run3(const cl_optim_config *cfg, float lr, float out[3][2])
{
    float p[2] = {1.0f, -2.0f};
    cl_optim_segment seg = {0, 2, CL_PARAM_WEIGHT};
    cl_optim opt;
    cl_status st = cl_optim_create(&opt, cfg, &seg, 1, 2);
    if (st != CL_OK) {
        cl_test_fail(__FILE__, __LINE__, "create: %s", cl_last_error());
        return;
    }
    for (int s = 0; s < 3; s++) {
        CHECK_OK(cl_optim_step(&opt, p, k_grads3[s], lr));
        out[s][0] = p[0];
        out[s][1] = p[1];
    }
    cl_optim_destroy(&opt);
}

/* A deterministic pseudo-random float in [-1, 1) (xorshift). */
static float frand(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return (float)((*s >> 8) * (1.0 / 8388608.0)) - 1.0f;
}

static float *arena(size_t n, uint32_t seed)
{
    float *a = cl_alloc(n * sizeof(float), "test arena");
    for (size_t i = 0; a && i < n; i++)
        a[i] = frand(&seed);
    return a;
}

/* ---- SGD -------------------------------------------------------------- */

CL_TEST(sgd_momentum_matches_torch)
{
    /* torch.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.1), p.grad
     * set to k_grads3[s] before each step (torch 1.13, float32).
     * By hand, element 0: d = g + wd p = 0.5 + 0.1 = 0.6, buf = 0.6,
     * p = 1 - 0.1 * 0.6 = 0.94; step 2: d = -1 + 0.094 = -0.906,
     * buf = 0.9 * 0.6 - 0.906 = -0.366, p = 0.94 + 0.0366 = 0.9766.
     * Element 1: d = 0.25 - 0.2 = 0.05, p = -2 - 0.005 = -2.005. */
    static const double want[3][2] = {{0.939999998, -2.00500011},
                                      {0.976599991, -2.03945017},
                                      {0.974774003, -1.9750607}};
    cl_optim_config c = cl_optim_config_default();
    c.momentum = 0.9;
    c.weight_decay = 0.1;
    float got[3][2];
    run3(&c, 0.1f, got);
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 2; i++)
            CHECK_NEAR(got[s][i], want[s][i], 2e-7);
}

CL_TEST(sgd_nesterov_matches_torch)
{
    /* torch.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.1,
     * nesterov=True).  By hand, element 0 step 1: d = 0.6, buf = 0.6,
     * p = 1 - 0.1 * (0.6 + 0.9 * 0.6) = 1 - 0.114 = 0.886. */
    static const double want[3][2] = {{0.885999978, -2.00950003},
                                      {1.010566, -2.07036948},
                                      {0.973948658, -1.91640055}};
    cl_optim_config c = cl_optim_config_default();
    c.momentum = 0.9;
    c.nesterov = 1;
    c.weight_decay = 0.1;
    float got[3][2];
    run3(&c, 0.1f, got);
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 2; i++)
            CHECK_NEAR(got[s][i], want[s][i], 2e-7);
}

CL_TEST(sgd_plain_without_momentum)
{
    /* momentum 0 keeps no state: p -= lr (g + wd p).  By hand with lr 0.5,
     * wd 0.2, element 0: 1 - 0.5 (0.5 + 0.2) = 0.65; then 0.65 - 0.5 (-1 +
     * 0.13) = 1.085; then 1.085 - 0.5 (0.25 + 0.217) = 0.8515. */
    cl_optim_config c = cl_optim_config_default();
    c.momentum = 0.0;
    c.weight_decay = 0.2;
    float got[3][2];
    run3(&c, 0.5f, got);
    CHECK_NEAR(got[0][0], 0.65, 1e-6);
    CHECK_NEAR(got[1][0], 1.085, 1e-6);
    CHECK_NEAR(got[2][0], 0.8515, 1e-6);
    cl_optim opt;
    cl_optim_segment seg = {0, 2, CL_PARAM_WEIGHT};
    REQUIRE_OK(cl_optim_create(&opt, &c, &seg, 1, 2));
    CHECK(opt.n_states == 0);
    float *ptr;
    size_t n;
    CHECK_ERR(cl_optim_state(&opt, 0, &ptr, &n), CL_ERR_ARG, "state 0");
    cl_optim_destroy(&opt);
}

/* ---- AdamW ------------------------------------------------------------ */

CL_TEST(adamw_matches_torch)
{
    /* torch.optim.AdamW([p], lr=0.01, betas=(0.9, 0.999), eps=1e-8,
     * weight_decay=0.01).  By hand, element 0 step 1: p *= 1 - 0.01 * 0.01
     * -> 0.9999; m = 0.1 * 0.5 = 0.05, v = 0.001 * 0.25 = 0.00025;
     * bc1 = 0.1, bc2 = 0.001, so m/bc1 = 0.5 and sqrt(v/bc2) = 0.5:
     * p = 0.9999 - 0.01 * 0.5 / (0.5 + 1e-8) = 0.9899. */
    static const double want[3][2] = {{0.989899993, -2.00979996},
                                      {0.993462026, -2.01925087},
                                      {0.994729578, -2.01838303}};
    cl_optim_config c = cl_optim_config_default();
    c.kind = CL_OPT_ADAMW;
    c.beta1 = 0.9;
    c.beta2 = 0.999;
    c.eps = 1e-8;
    c.weight_decay = 0.01;
    float got[3][2];
    run3(&c, 0.01f, got);
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 2; i++)
            CHECK_NEAR(got[s][i], want[s][i], 3e-7);
}

CL_TEST(adamw_large_steps_match_torch)
{
    /* torch.optim.AdamW([p], lr=0.5, betas=(0.8, 0.99), eps=1e-3,
     * weight_decay=0.2): large lr, eps and decay so that every term of the
     * update is visible in the result. */
    static const double want[3][2] = {{0.400997967, -2.29800797},
                                      {0.571134031, -2.55813932},
                                      {0.585220456, -2.23057151}};
    cl_optim_config c = cl_optim_config_default();
    c.kind = CL_OPT_ADAMW;
    c.beta1 = 0.8;
    c.beta2 = 0.99;
    c.eps = 1e-3;
    c.weight_decay = 0.2;
    float got[3][2];
    run3(&c, 0.5f, got);
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 2; i++)
            CHECK_NEAR(got[s][i], want[s][i], 1e-6);
}

/* ---- groups: decay filter, lr multiplier, freezing, reset -------------- */

/* Five one-float segments: conv weight, conv bias, BN gamma, fc weight,
 * fc bias, at offsets 0, 16, 32, 48, 64 of an 80-float arena. */
static const cl_optim_segment k_segs5[5] = {
    {0, 1, CL_PARAM_WEIGHT},
    {16, 1, CL_PARAM_BIAS},
    {32, 1, CL_PARAM_BN},
    {48, 1, CL_PARAM_WEIGHT | CL_PARAM_HEAD},
    {64, 1, CL_PARAM_BIAS | CL_PARAM_HEAD}};

CL_TEST(filter_bias_and_bn_exempts_only_bias_and_bn)
{
    for (int kind = 0; kind < 2; kind++)
        for (int filter = 0; filter < 2; filter++) {
            cl_optim_config c = cl_optim_config_default();
            c.kind = kind ? CL_OPT_ADAMW : CL_OPT_SGD;
            c.weight_decay = 0.5;
            c.filter_bias_and_bn = filter;
            float p[80] = {0}, g[80] = {0};
            for (int k = 0; k < 5; k++)
                p[k_segs5[k].offset] = 2.0f;
            cl_optim opt;
            REQUIRE_OK(cl_optim_create(&opt, &c, k_segs5, 5, 80));
            /* Zero gradients: only weight decay moves p.  SGD: p -= lr wd p
             * = 2 - 0.1 * 0.5 * 2 = 1.9 (momentum buffer starts at wd p).
             * AdamW: p *= 1 - 0.1 * 0.5 = 0.95 -> 1.9, m = v = 0. */
            CHECK_OK(cl_optim_step(&opt, p, g, 0.1f));
            for (int k = 0; k < 5; k++) {
                int exempt = filter &&
                             (k_segs5[k].flags & (CL_PARAM_BIAS | CL_PARAM_BN));
                CHECK_NEAR(p[k_segs5[k].offset], exempt ? 2.0 : 1.9, 1e-6);
            }
            cl_optim_destroy(&opt);
        }
}

CL_TEST(backbone_lr_mult_scales_only_backbone)
{
    cl_optim_config c = cl_optim_config_default();
    c.momentum = 0.0;
    c.weight_decay = 0.0;
    c.backbone_lr_mult = 0.1;
    float p[80] = {0}, g[80] = {0};
    for (int k = 0; k < 5; k++)
        g[k_segs5[k].offset] = 1.0f;
    cl_optim opt;
    REQUIRE_OK(cl_optim_create(&opt, &c, k_segs5, 5, 80));
    CHECK_OK(cl_optim_step(&opt, p, g, 0.5f));
    for (int k = 0; k < 5; k++) {
        int head = (k_segs5[k].flags & CL_PARAM_HEAD) != 0;
        CHECK_NEAR(p[k_segs5[k].offset], head ? -0.5 : -0.05, 1e-7);
    }
    cl_optim_destroy(&opt);
}

CL_TEST(freeze_backbone_leaves_params_and_state_untouched)
{
    for (int kind = 0; kind < 2; kind++) {
        cl_optim_config c = cl_optim_config_default();
        c.kind = kind ? CL_OPT_ADAMW : CL_OPT_SGD;
        c.weight_decay = 0.3;
        c.filter_bias_and_bn = 0;
        c.freeze_backbone = 1;
        float p[80], g[80], p0[80];
        for (int i = 0; i < 80; i++) {
            p[i] = p0[i] = 1.0f + 0.01f * (float)i;
            g[i] = 0.5f - 0.02f * (float)i;
        }
        cl_optim opt;
        REQUIRE_OK(cl_optim_create(&opt, &c, k_segs5, 5, 80));
        for (int s = 0; s < 3; s++)
            CHECK_OK(cl_optim_step(&opt, p, g, 0.1f));
        int64_t steps[5], n_steps = -1;
        REQUIRE_OK(cl_optim_get_steps(&opt, steps, 5, &n_steps));
        CHECK(n_steps == 3);
        for (int k = 0; k < 5; k++) {
            size_t o = k_segs5[k].offset;
            int head = (k_segs5[k].flags & CL_PARAM_HEAD) != 0;
            CHECK(steps[k] == (head ? 3 : 0));
            if (head) {
                CHECK(p[o] != p0[o]);
                CHECK(opt.state[0][o] != 0.0f);
            } else {
                CHECK(memcmp(&p[o], &p0[o], sizeof(float)) == 0);
                for (int st = 0; st < opt.n_states; st++)
                    CHECK(opt.state[st][o] == 0.0f);
            }
        }
        /* Floats outside every segment (padding) are never written. */
        CHECK(memcmp(&p[1], &p0[1], 15 * sizeof(float)) == 0);
        /* The trainable-gradient norm ignores the frozen segments:
         * g[48] = 0.5 - 0.96 = -0.46, g[64] = 0.5 - 1.28 = -0.78. */
        CHECK_NEAR(cl_optim_grad_norm(&opt, g), sqrt(0.46 * 0.46 + 0.78 * 0.78),
                   1e-6);
        cl_optim_destroy(&opt);
    }
}

CL_TEST(reset_segment_restarts_state)
{
    /* AdamW: after reset, the segment's next step is a first step again,
     * exactly as a fresh optimizer on the same params would make it. */
    cl_optim_config c = cl_optim_config_default();
    c.kind = CL_OPT_ADAMW;
    c.weight_decay = 0.05;
    float p[80], g[80];
    uint32_t seed = 7;
    for (int i = 0; i < 80; i++) {
        p[i] = frand(&seed);
        g[i] = frand(&seed);
    }
    cl_optim opt, fresh;
    REQUIRE_OK(cl_optim_create(&opt, &c, k_segs5, 5, 80));
    /* Varying gradients, so that history changes Adam's next step (with a
     * constant gradient m / bc1 and v / bc2 would not depend on it). */
    for (int s = 0; s < 4; s++) {
        float gs[80];
        for (int i = 0; i < 80; i++)
            gs[i] = frand(&seed);
        CHECK_OK(cl_optim_step(&opt, p, gs, 0.01f));
    }
    float m_other = opt.state[0][0], v_other = opt.state[1][0];
    CHECK_ERR(cl_optim_reset_segment(&opt, 5), CL_ERR_ARG, "segment 5");
    CHECK_ERR(cl_optim_reset_segment(&opt, -1), CL_ERR_ARG, "segment -1");
    REQUIRE_OK(cl_optim_reset_segment(&opt, 3));
    CHECK(opt.state[0][48] == 0.0f && opt.state[1][48] == 0.0f);
    CHECK(opt.seg_steps[3] == 0 && opt.seg_steps[0] == 4);
    CHECK(opt.state[0][0] == m_other && opt.state[1][0] == v_other);
    /* Compare one more step of segment 3 with a fresh optimizer. */
    float q[80];
    memcpy(q, p, sizeof q);
    REQUIRE_OK(cl_optim_create(&fresh, &c, k_segs5, 5, 80));
    CHECK_OK(cl_optim_step(&opt, p, g, 0.01f));
    CHECK_OK(cl_optim_step(&fresh, q, g, 0.01f));
    CHECK(p[48] == q[48]);
    CHECK(opt.state[0][48] == fresh.state[0][48]);
    CHECK(opt.state[1][48] == fresh.state[1][48]);
    /* The other segments kept their history, so they differ from fresh. */
    CHECK(p[0] != q[0]);
    cl_optim_destroy(&opt);
    cl_optim_destroy(&fresh);
}

/* ---- checkpoint state and determinism ---------------------------------- */

/* Segments of a larger arena (above the parallel threshold), gaps of
 * padding between them, the last one a head. */
#define BIG_N 200000
static const cl_optim_segment k_big[4] = {
    {0, 120000, CL_PARAM_WEIGHT},
    {120016, 64, CL_PARAM_BN},
    {120096, 70000, CL_PARAM_WEIGHT},
    {190112, 9000, CL_PARAM_WEIGHT | CL_PARAM_HEAD}};

static void big_grads(float *g, int step)
{
    uint32_t seed = 1000u + (uint32_t)step;
    for (size_t i = 0; i < BIG_N; i++)
        g[i] = frand(&seed);
}

CL_TEST(state_save_restore_continues_identically)
{
    for (int kind = 0; kind < 2; kind++) {
        cl_optim_config c = cl_optim_config_default();
        c.kind = kind ? CL_OPT_ADAMW : CL_OPT_SGD;
        c.nesterov = 1;
        float *pa = arena(BIG_N, 1), *pb = arena(BIG_N, 1);
        float *g = cl_alloc(BIG_N * sizeof(float), "grads");
        float *saved[2] = {cl_alloc(BIG_N * sizeof(float), "s0"),
                           cl_alloc(BIG_N * sizeof(float), "s1")};
        REQUIRE(pa && pb && g && saved[0] && saved[1]);
        cl_optim a, b;
        REQUIRE_OK(cl_optim_create(&a, &c, k_big, 4, BIG_N));
        REQUIRE_OK(cl_optim_create(&b, &c, k_big, 4, BIG_N));
        /* Run a: 5 steps straight. */
        for (int s = 0; s < 5; s++) {
            big_grads(g, s);
            CHECK_OK(cl_optim_step(&a, pa, g, 0.01f * (float)(s + 1)));
        }
        /* Run b: 2 steps, save, destroy, recreate, restore, 3 steps. */
        for (int s = 0; s < 2; s++) {
            big_grads(g, s);
            CHECK_OK(cl_optim_step(&b, pb, g, 0.01f * (float)(s + 1)));
        }
        int64_t steps[4], n_steps;
        REQUIRE_OK(cl_optim_get_steps(&b, steps, 4, &n_steps));
        int ns = b.n_states;
        for (int k = 0; k < ns; k++) {
            float *ptr;
            size_t n;
            REQUIRE_OK(cl_optim_state(&b, k, &ptr, &n));
            REQUIRE(n == BIG_N);
            memcpy(saved[k], ptr, n * sizeof(float));
        }
        CHECK(strcmp(cl_optim_state_name(&b, 0),
                     kind ? "exp_avg" : "momentum_buffer") == 0);
        cl_optim_destroy(&b);
        REQUIRE_OK(cl_optim_create(&b, &c, k_big, 4, BIG_N));
        for (int k = 0; k < ns; k++) {
            float *ptr;
            size_t n;
            REQUIRE_OK(cl_optim_state(&b, k, &ptr, &n));
            memcpy(ptr, saved[k], n * sizeof(float));
        }
        CHECK_ERR(cl_optim_set_steps(&b, steps, 3, n_steps), CL_ERR_ARG,
                  "expected 4");
        int64_t bad[4] = {1, -1, 1, 1};
        CHECK_ERR(cl_optim_set_steps(&b, bad, 4, 2), CL_ERR_ARG, "segment 1");
        REQUIRE_OK(cl_optim_set_steps(&b, steps, 4, n_steps));
        for (int s = 2; s < 5; s++) {
            big_grads(g, s);
            CHECK_OK(cl_optim_step(&b, pb, g, 0.01f * (float)(s + 1)));
        }
        CHECK(memcmp(pa, pb, BIG_N * sizeof(float)) == 0);
        for (int k = 0; k < ns; k++)
            CHECK(memcmp(a.state[k], b.state[k], BIG_N * sizeof(float)) == 0);
        CHECK(a.n_steps == b.n_steps && a.n_steps == 5);
        cl_optim_destroy(&a);
        cl_optim_destroy(&b);
        cl_free(pa);
        cl_free(pb);
        cl_free(g);
        cl_free(saved[0]);
        cl_free(saved[1]);
    }
}

CL_TEST(step_bits_do_not_depend_on_thread_count)
{
    cl_optim_config c = cl_optim_config_default();
    c.kind = CL_OPT_ADAMW;
    float *p1 = arena(BIG_N, 3), *p2 = arena(BIG_N, 3);
    float *g = arena(BIG_N, 4);
    REQUIRE(p1 && p2 && g);
    cl_optim a, b;
    REQUIRE_OK(cl_optim_create(&a, &c, k_big, 4, BIG_N));
    REQUIRE_OK(cl_optim_create(&b, &c, k_big, 4, BIG_N));
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    for (int s = 0; s < 3; s++)
        CHECK_OK(cl_optim_step(&a, p1, g, 0.001f));
    omp_set_num_threads(saved > 1 ? saved : 2);
    for (int s = 0; s < 3; s++)
        CHECK_OK(cl_optim_step(&b, p2, g, 0.001f));
    omp_set_num_threads(saved);
    CHECK(memcmp(p1, p2, BIG_N * sizeof(float)) == 0);
    cl_optim_destroy(&a);
    cl_optim_destroy(&b);
    cl_free(p1);
    cl_free(p2);
    cl_free(g);
}

CL_TEST(optim_rejects_bad_config_and_segments)
{
    cl_optim opt;
    cl_optim_config c = cl_optim_config_default();
    cl_optim_segment seg = {0, 4, CL_PARAM_WEIGHT};
    c.momentum = 1.0;
    CHECK_ERR(cl_optim_create(&opt, &c, &seg, 1, 4), CL_ERR_CONFIG,
              "optimizer.momentum");
    c = cl_optim_config_default();
    c.momentum = 0.0;
    c.nesterov = 1;
    CHECK_ERR(cl_optim_create(&opt, &c, &seg, 1, 4), CL_ERR_CONFIG,
              "optimizer.nesterov");
    c = cl_optim_config_default();
    c.weight_decay = NAN;
    CHECK_ERR(cl_optim_create(&opt, &c, &seg, 1, 4), CL_ERR_CONFIG,
              "optimizer.weight_decay");
    c = cl_optim_config_default();
    c.kind = CL_OPT_ADAMW;
    c.eps = 0.0;
    CHECK_ERR(cl_optim_create(&opt, &c, &seg, 1, 4), CL_ERR_CONFIG,
              "optimizer.eps");
    c.eps = 1e-8;
    c.beta2 = 1.0;
    CHECK_ERR(cl_optim_create(&opt, &c, &seg, 1, 4), CL_ERR_CONFIG,
              "optimizer.beta2");
    c = cl_optim_config_default();
    c.backbone_lr_mult = -1.0;
    CHECK_ERR(cl_optim_create(&opt, &c, &seg, 1, 4), CL_ERR_CONFIG,
              "backbone_lr_mult");
    c = cl_optim_config_default();
    c.kind = (cl_optim_kind)7;
    CHECK_ERR(cl_optim_create(&opt, &c, &seg, 1, 4), CL_ERR_CONFIG,
              "optimizer.kind");
    c = cl_optim_config_default();
    /* Segments past the arena, overlapping, out of order, or none. */
    CHECK_ERR(cl_optim_create(&opt, &c, &seg, 1, 3), CL_ERR_ARG, "runs past");
    cl_optim_segment huge = {2, SIZE_MAX, 0};
    CHECK_ERR(cl_optim_create(&opt, &c, &huge, 1, 4), CL_ERR_ARG, "runs past");
    cl_optim_segment overlap[2] = {{0, 4, 0}, {3, 2, 0}};
    CHECK_ERR(cl_optim_create(&opt, &c, overlap, 2, 8), CL_ERR_ARG,
              "sorted and disjoint");
    cl_optim_segment order[2] = {{4, 2, 0}, {0, 2, 0}};
    CHECK_ERR(cl_optim_create(&opt, &c, order, 2, 8), CL_ERR_ARG,
              "sorted and disjoint");
    CHECK_ERR(cl_optim_create(&opt, &c, &seg, 0, 4), CL_ERR_ARG,
              "at least one segment");
    cl_optim_destroy(&opt); /* a failed create leaves it destroyable */
    /* A bad lr changes nothing. */
    REQUIRE_OK(cl_optim_create(&opt, &c, &seg, 1, 4));
    float p[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1};
    CHECK_ERR(cl_optim_step(&opt, p, g, -0.1f), CL_ERR_ARG, "learning rate");
    CHECK_ERR(cl_optim_step(&opt, p, g, NAN), CL_ERR_ARG, "learning rate");
    CHECK(p[0] == 1.0f && opt.n_steps == 0 && opt.seg_steps[0] == 0);
    cl_optim_destroy(&opt);
    cl_optim_destroy(&opt);
}

/* ---- gradient helpers -------------------------------------------------- */

CL_TEST(clip_grad_norm_matches_torch)
{
    /* torch.nn.utils.clip_grad_norm_([a, b], 6.5) with a.grad = (3, 4),
     * b.grad = (12): returns 13 and scales by 6.5 / (13 + 1e-6), giving
     * (1.49999988, 1.99999988, 5.99999952) in float32. */
    float g[20] = {0};
    g[0] = 3.0f;
    g[1] = 4.0f;
    g[16] = 12.0f;
    g[5] = 100.0f; /* padding: outside every segment */
    cl_optim_segment segs[2] = {{0, 2, CL_PARAM_WEIGHT},
                                {16, 1, CL_PARAM_BIAS}};
    CHECK_NEAR(cl_grad_global_norm(g, segs, 2), 13.0, 1e-12);
    double n = cl_grad_clip(g, segs, 2, 6.5);
    CHECK_NEAR(n, 13.0, 1e-12);
    CHECK_NEAR(g[0], 1.49999988, 1e-7);
    CHECK_NEAR(g[1], 1.99999988, 1e-7);
    CHECK_NEAR(g[16], 5.99999952, 1e-7);
    CHECK(g[5] == 100.0f);
    /* Below the threshold nothing moves; max_norm 0 only measures. */
    float before[20];
    memcpy(before, g, sizeof g);
    CHECK_NEAR(cl_grad_clip(g, segs, 2, 10.0), 6.5, 1e-5);
    CHECK(memcmp(before, g, sizeof g) == 0);
    CHECK_NEAR(cl_grad_clip(g, segs, 2, 0.0), 6.5, 1e-5);
    CHECK(memcmp(before, g, sizeof g) == 0);
    /* A non-finite norm is reported and nothing is scaled. */
    g[1] = INFINITY;
    memcpy(before, g, sizeof g);
    CHECK(isinf(cl_grad_clip(g, segs, 2, 1.0)));
    CHECK(memcmp(before, g, sizeof g) == 0);
}

CL_TEST(clip_large_arena_in_double)
{
    /* Many values of 1e-3 and one of 1 (BN segment) over the segments of
     * k_big, padding ignored.  The reference is a long double sum; a float
     * accumulator is off by ~1e-4 here (measured), the double one by ~1e-12. */
    float *g = cl_alloc(BIG_N * sizeof(float), "g");
    REQUIRE(g);
    for (size_t i = 0; i < BIG_N; i++)
        g[i] = 1e-3f;
    g[120016] = 1.0f;
    long double acc = 0.0L;
    for (int k = 0; k < 4; k++)
        for (size_t i = 0; i < k_big[k].n; i++) {
            long double x = g[k_big[k].offset + i];
            acc += x * x;
        }
    double want = (double)sqrtl(acc);
    CHECK_NEAR(cl_grad_global_norm(g, k_big, 4), want, 1e-10);
    double n = cl_grad_clip(g, k_big, 4, 0.5);
    CHECK_NEAR(n, want, 1e-10);
    CHECK_NEAR(cl_grad_global_norm(g, k_big, 4), 0.5, 1e-6);
    cl_free(g);
}

CL_TEST(grad_scale_and_finite_check)
{
    float *g = arena(BIG_N, 9);
    REQUIRE(g);
    float g7 = g[7];
    cl_grad_scale(g, BIG_N, 0.25f);
    CHECK(g[7] == g7 * 0.25f);
    CHECK(cl_grad_all_finite(g, BIG_N) == 1);
    g[BIG_N - 1] = NAN;
    CHECK(cl_grad_all_finite(g, BIG_N) == 0);
    CHECK(cl_grad_all_finite(g, BIG_N - 1) == 1);
    g[3] = -INFINITY;
    CHECK(cl_grad_all_finite(g, 10) == 0);
    CHECK(cl_grad_all_finite(g, 0) == 1);
    cl_free(g);
}

/* ---- learning-rate schedules ------------------------------------------- */

/* lr 0.5 -> 0.1, 2 warm-up epochs from factor 0.1, 10 epochs of 4 steps:
 * warm-up steps 0..7, cosine over the remaining 8 epochs (32 steps). */
static cl_lr_config cos_cfg(void)
{
    cl_lr_config c = cl_lr_config_default();
    c.kind = CL_LR_COSINE;
    c.lr = 0.5;
    c.min_lr = 0.1;
    c.warmup_epochs = 2;
    c.warmup_factor = 0.1;
    c.epochs = 10;
    c.steps_per_epoch = 4;
    return c;
}

CL_TEST(lr_cosine_with_warmup_values)
{
    cl_lr_config c = cos_cfg();
    REQUIRE_OK(cl_lr_validate(&c));
    /* Warm-up (linear_refined_lr): start 0.05, + (i / 4) / 2 * 0.45. */
    CHECK_NEAR(cl_lr_at(&c, 0), 0.05, 5e-8);
    CHECK_NEAR(cl_lr_at(&c, -3), 0.05, 5e-8);
    CHECK_NEAR(cl_lr_at(&c, 1), 0.05 + 0.125 * 0.45, 5e-8);
    CHECK_NEAR(cl_lr_at(&c, 7), 0.05 + 0.875 * 0.45, 5e-8); /* 0.44375 */
    /* First step after warm-up: cos(0) -> the peak 0.5. */
    CHECK_NEAR(cl_lr_at(&c, 8), 0.5, 5e-8);
    /* Midpoint, 4 of 8 decay epochs: 0.1 + 0.2 (1 + cos(pi / 2)) = 0.3. */
    CHECK_NEAR(cl_lr_at(&c, 8 + 16), 0.3, 1e-7);
    /* Last step, t = 31 / 4 = 7.75 epochs: 0.1 + 0.2 (1 + cos(pi 7.75/8))
     * = 0.1 + 0.2 (1 - 0.995184727) = 0.100963055. */
    CHECK_NEAR(cl_lr_at(&c, 39), 0.100963055, 5e-8);
    /* Past the end: min_lr. */
    CHECK_NEAR(cl_lr_at(&c, 40), 0.1, 5e-8);
    CHECK_NEAR(cl_lr_at(&c, 100000), 0.1, 5e-8);
}

CL_TEST(lr_cosine_monotonic_and_floored)
{
    cl_lr_config c = cos_cfg();
    c.min_lr = 1e-4;
    c.steps_per_epoch = 37;
    c.epochs = 50;
    c.warmup_epochs = 5;
    int64_t warm = 5 * 37, total = 50 * 37;
    for (int64_t s = 1; s < warm; s++)
        CHECK(cl_lr_at(&c, s) > cl_lr_at(&c, s - 1));
    for (int64_t s = warm; s + 1 < total + 10; s++) {
        float a = cl_lr_at(&c, s), b = cl_lr_at(&c, s + 1);
        if (!(b <= a))
            cl_test_fail(__FILE__, __LINE__, "lr rises at step %lld",
                         (long long)s);
        if (!(b >= (float)c.min_lr))
            cl_test_fail(__FILE__, __LINE__, "lr below min at %lld",
                         (long long)s);
        if (cl_test_failed())
            break;
    }
    CHECK(cl_lr_at(&c, warm) == (float)c.lr);
}

CL_TEST(lr_cosine_matches_mindcv_refined_formula)
{
    /* mindcv dynamic_lr.py's own demo: cosine_decay_refined_lr(5, 1.0,
     * eta_max=2.0, steps_per_epoch=2, epochs=10), i.e. for i < 10:
     * lr = 1 + 0.5 (2 - 1) (1 + cos(pi (i / 2) / 5)), then 1.0.  By hand:
     * i = 1: 1 + 0.5 (1 + cos(pi / 10)) = 1 + 0.5 * 1.951056516 = 1.975528258;
     * i = 5: cos(pi / 2) = 0 -> 1.5; i = 9: cos(0.9 pi) = -0.951056516 ->
     * 1.024471742. */
    cl_lr_config c = cl_lr_config_default();
    c.kind = CL_LR_COSINE;
    c.lr = 2.0;
    c.min_lr = 1.0;
    c.decay_epochs = 5;
    c.epochs = 10;
    c.steps_per_epoch = 2;
    REQUIRE_OK(cl_lr_validate(&c));
    CHECK_NEAR(cl_lr_at(&c, 0), 2.0, 1e-7);
    CHECK_NEAR(cl_lr_at(&c, 1), 1.975528258, 1e-7);
    CHECK_NEAR(cl_lr_at(&c, 5), 1.5, 1e-7);
    CHECK_NEAR(cl_lr_at(&c, 9), 1.024471742, 1e-7);
    for (int s = 10; s < 20; s++)
        CHECK_NEAR(cl_lr_at(&c, s), 1.0, 1e-7);
    /* The same with lr_epoch_stair (cosine_decay_lr): floor(i / 2), so
     * i = 3 uses epoch 1: 1 + 0.5 (1 + cos(pi / 5)) = 1.904508497. */
    c.lr_epoch_stair = 1;
    CHECK_NEAR(cl_lr_at(&c, 2), 1.904508497, 1e-7);
    CHECK_NEAR(cl_lr_at(&c, 3), 1.904508497, 1e-7);
    CHECK_NEAR(cl_lr_at(&c, 1), 2.0, 1e-7);
}

CL_TEST(lr_stair_matches_mindspore_cosine_decay_lr)
{
    /* MindSpore's documented example: nn.cosine_decay_lr(min_lr=0.01,
     * max_lr=0.1, total_step=6, step_per_epoch=2, decay_epoch=2) prints
     * [0.1, 0.1, 0.055, 0.055, 0.01, 0.01]. */
    static const double want[6] = {0.1, 0.1, 0.055, 0.055, 0.01, 0.01};
    cl_lr_config c = cl_lr_config_default();
    c.kind = CL_LR_COSINE;
    c.lr = 0.1;
    c.min_lr = 0.01;
    c.decay_epochs = 2;
    c.epochs = 3;
    c.steps_per_epoch = 2;
    c.lr_epoch_stair = 1;
    for (int s = 0; s < 6; s++)
        CHECK_NEAR(cl_lr_at(&c, s), want[s], 5e-8);
    /* Stair warm-up (linear_lr): epoch 0 at the factor, epoch 1 halfway. */
    c = cos_cfg();
    c.lr_epoch_stair = 1;
    CHECK_NEAR(cl_lr_at(&c, 3), 0.05, 5e-8);
    CHECK_NEAR(cl_lr_at(&c, 5), 0.275, 5e-8);
    /* Decay epoch 1 of 8: 0.1 + 0.2 (1 + cos(pi / 8)) = 0.484775907. */
    CHECK_NEAR(cl_lr_at(&c, 8 + 5), 0.484775907, 5e-8);
}

CL_TEST(lr_cosine_cycles)
{
    /* Two cycles of 2 epochs, the second peaking at lr * 0.5 = 0.5, then
     * min_lr: epochs 0-1 cycle 0, 2-3 cycle 1, 4 the floor. */
    cl_lr_config c = cl_lr_config_default();
    c.lr = 1.0;
    c.min_lr = 0.0;
    c.decay_epochs = 2;
    c.num_cycles = 2;
    c.cycle_decay = 0.5;
    c.epochs = 5;
    c.steps_per_epoch = 1;
    CHECK_NEAR(cl_lr_at(&c, 0), 1.0, 5e-8);
    CHECK_NEAR(cl_lr_at(&c, 1), 0.5, 1e-7); /* cos(pi / 2) = 0 */
    CHECK_NEAR(cl_lr_at(&c, 2), 0.5, 5e-8);
    CHECK_NEAR(cl_lr_at(&c, 3), 0.25, 1e-7);
    CHECK_NEAR(cl_lr_at(&c, 4), 0.0, 5e-8);
}

CL_TEST(lr_multi_step_and_constant)
{
    /* multi_step_lr: lr * gamma^bisect_right(sorted(milestones), epoch);
     * milestones given unsorted.  2 steps per epoch. */
    cl_lr_config c = cl_lr_config_default();
    c.kind = CL_LR_MULTI_STEP;
    c.lr = 0.1;
    c.decay_rate = 0.1;
    c.milestones[0] = 3;
    c.milestones[1] = 1;
    c.n_milestones = 2;
    c.epochs = 5;
    c.steps_per_epoch = 2;
    REQUIRE_OK(cl_lr_validate(&c));
    static const double want[10] = {0.1,  0.1,   0.01,  0.01,  0.01,
                                    0.01, 0.001, 0.001, 0.001, 0.001};
    for (int s = 0; s < 10; s++)
        CHECK_NEAR(cl_lr_at(&c, s), want[s], 1e-8);
    /* With one warm-up epoch, the milestones count from its end (mindcv):
     * steps 0-1 warm up from 0, then epochs restart at 0. */
    c.warmup_epochs = 1;
    CHECK_NEAR(cl_lr_at(&c, 0), 0.0, 1e-8);
    CHECK_NEAR(cl_lr_at(&c, 1), 0.05, 1e-8);
    CHECK_NEAR(cl_lr_at(&c, 2), 0.1, 1e-8);
    CHECK_NEAR(cl_lr_at(&c, 4), 0.01, 1e-8);
    CHECK_NEAR(cl_lr_at(&c, 8), 0.001, 1e-8);
    /* Constant with warm-up. */
    c.kind = CL_LR_CONSTANT;
    c.warmup_epochs = 2;
    c.warmup_factor = 0.5;
    CHECK_NEAR(cl_lr_at(&c, 1), 0.05 + 0.25 * 0.05, 1e-8);
    CHECK_NEAR(cl_lr_at(&c, 4), 0.1, 1e-8);
    CHECK_NEAR(cl_lr_at(&c, 1000), 0.1, 1e-8);
}

CL_TEST(lr_rejects_bad_config)
{
    cl_lr_config c = cos_cfg();
    c.steps_per_epoch = 0;
    CHECK_ERR(cl_lr_validate(&c), CL_ERR_CONFIG, "lr.steps_per_epoch");
    /* Unvalidated use does not divide by zero: it returns lr. */
    CHECK_NEAR(cl_lr_at(&c, 5), 0.5, 5e-8);
    c = cos_cfg();
    c.min_lr = 1.0;
    CHECK_ERR(cl_lr_validate(&c), CL_ERR_CONFIG, "lr.min_lr");
    c = cos_cfg();
    c.warmup_epochs = 11;
    CHECK_ERR(cl_lr_validate(&c), CL_ERR_CONFIG, "lr.warmup_epochs");
    c = cos_cfg();
    c.warmup_epochs = 10;
    CHECK_ERR(cl_lr_validate(&c), CL_ERR_CONFIG, "lr.decay_epochs");
    CHECK_NEAR(cl_lr_at(&c, 50), 0.5, 5e-8);
    c = cos_cfg();
    c.lr = -1.0;
    CHECK_ERR(cl_lr_validate(&c), CL_ERR_CONFIG, "lr.lr");
    c = cos_cfg();
    c.warmup_factor = 2.0;
    CHECK_ERR(cl_lr_validate(&c), CL_ERR_CONFIG, "lr.warmup_factor");
    c = cos_cfg();
    c.epochs = 0;
    CHECK_ERR(cl_lr_validate(&c), CL_ERR_CONFIG, "lr.epochs");
    c = cos_cfg();
    c.kind = CL_LR_MULTI_STEP;
    c.decay_rate = 0.0;
    CHECK_ERR(cl_lr_validate(&c), CL_ERR_CONFIG, "lr.decay_rate");
    c.decay_rate = 0.1;
    c.n_milestones = 1;
    c.milestones[0] = -2;
    CHECK_ERR(cl_lr_validate(&c), CL_ERR_CONFIG, "lr.milestones[0]");
    c.n_milestones = CL_LR_MAX_MILESTONES + 1;
    CHECK_ERR(cl_lr_validate(&c), CL_ERR_CONFIG, "lr.milestones");
    c = cos_cfg();
    c.kind = (cl_lr_kind)9;
    CHECK_ERR(cl_lr_validate(&c), CL_ERR_CONFIG, "lr.scheduler");
}

/* ---- metrics ------------------------------------------------------------ */

/* Four samples over 3 classes (top-k is top-3 here):
 *   s0 (2, 1, 0)      label 0: predicted 0, right;
 *   s1 (.5, .5, .1)   label 1: tie of 0 and 1 goes to 0, wrong;
 *   s2 (0, 3, 1)      label 2: predicted 1, wrong;
 *   s3 (1, 1, 1)      label 0: all tied, predicted 0, right.
 * Confusion rows (true) x columns (pred): {2,0,0}, {1,0,0}, {0,1,0}. */
static const float k_logits4[4 * 3] = {2, 1, 0, 0.5f, 0.5f, 0.1f,
                                       0, 3, 1, 1,    1,    1};
static const int32_t k_labels4[4] = {0, 1, 2, 0};

CL_TEST(metrics_top1_loss_confusion)
{
    cl_metrics m;
    REQUIRE_OK(cl_metrics_init(&m, 3));
    CHECK(m.k == 3 && m.n_counts == 3 + 9);
    CHECK(isnan(cl_metrics_top1(&m)) && isnan(cl_metrics_loss(&m)));
    REQUIRE_OK(cl_metrics_add(&m, k_logits4, k_labels4, 4, 2.0));
    CHECK(cl_metrics_count(&m) == 4);
    CHECK_NEAR(cl_metrics_top1(&m), 0.5, 1e-12);
    CHECK_NEAR(cl_metrics_topk(&m), 1.0, 1e-12);
    CHECK_NEAR(cl_metrics_loss(&m), 0.5, 1e-12);
    static const int64_t want[9] = {2, 0, 0, 1, 0, 0, 0, 1, 0};
    CHECK(memcmp(m.confusion, want, sizeof want) == 0);
    CHECK_NEAR(cl_metrics_class_acc(&m, 0), 1.0, 1e-12);
    CHECK_NEAR(cl_metrics_class_acc(&m, 1), 0.0, 1e-12);
    CHECK(isnan(cl_metrics_class_acc(&m, 3)));
    CHECK_NEAR(cl_metrics_mean_class_acc(&m), 1.0 / 3.0, 1e-12);
    cl_metrics_reset(&m);
    CHECK(cl_metrics_count(&m) == 0 && m.confusion[0] == 0);
    cl_metrics_free(&m);
    cl_metrics_free(&m);
}

CL_TEST(metrics_top5_ties_and_nan)
{
    cl_metrics m;
    REQUIRE_OK(cl_metrics_init(&m, 7));
    CHECK(m.k == 5);
    const float up[7] = {0, 1, 2, 3, 4, 5, 6};
    const float flat[7] = {1, 1, 1, 1, 1, 1, 1};
    const float nan_true[7] = {0, 0, 0, NAN, 0, 0, 0};
    const float nan_other[7] = {NAN, 0, 0, 0, 0, 0, 0};
    int32_t lab;
    /* Ascending logits: label 1 has 5 classes above it (out of top-5),
     * label 2 has 4 (in). */
    lab = 1;
    REQUIRE_OK(cl_metrics_add(&m, up, &lab, 1, 0.0));
    CHECK(m.counts[2] == 0);
    lab = 2;
    REQUIRE_OK(cl_metrics_add(&m, up, &lab, 1, 0.0));
    CHECK(m.counts[2] == 1 && m.counts[1] == 0);
    /* All tied: lower indices rank first, so label 4 is 5th (in) and label
     * 5 is 6th (out); both predicted as class 0. */
    lab = 4;
    REQUIRE_OK(cl_metrics_add(&m, flat, &lab, 1, 0.0));
    CHECK(m.counts[2] == 2);
    lab = 5;
    REQUIRE_OK(cl_metrics_add(&m, flat, &lab, 1, 0.0));
    CHECK(m.counts[2] == 2);
    CHECK(m.confusion[4 * 7 + 0] == 1 && m.confusion[5 * 7 + 0] == 1);
    /* A NaN true logit ranks last: wrong everywhere. */
    lab = 3;
    REQUIRE_OK(cl_metrics_add(&m, nan_true, &lab, 1, 0.0));
    CHECK(m.counts[2] == 2 && m.counts[1] == 0);
    CHECK(m.confusion[3 * 7 + 0] == 1);
    /* A NaN elsewhere loses to every number: class 1 is predicted. */
    lab = 1;
    REQUIRE_OK(cl_metrics_add(&m, nan_other, &lab, 1, 0.0));
    CHECK(m.counts[1] == 1 && m.counts[2] == 3);
    CHECK(m.confusion[1 * 7 + 1] == 1);
    CHECK(cl_metrics_count(&m) == 6);
    cl_metrics_free(&m);
}

CL_TEST(metrics_bad_labels_and_sizes)
{
    cl_metrics m;
    CHECK_ERR(cl_metrics_init(&m, 0), CL_ERR_ARG, "at least 1 class");
    CHECK_ERR(cl_metrics_init(&m, CL_METRICS_MAX_CLASSES + 1), CL_ERR_LIMIT,
              "limit");
    cl_metrics_free(&m);
    REQUIRE_OK(cl_metrics_init(&m, 3));
    const int32_t bad[4] = {0, 1, 3, 0};
    CHECK_ERR(cl_metrics_add(&m, k_logits4, bad, 4, 1.0), CL_ERR_ARG,
              "label 3 of sample 2");
    const int32_t neg[1] = {-1};
    CHECK_ERR(cl_metrics_add(&m, k_logits4, neg, 1, 1.0), CL_ERR_ARG,
              "label -1 of sample 0");
    CHECK(cl_metrics_count(&m) == 0 && m.loss_sum == 0.0);
    CHECK_ERR(cl_metrics_add(&m, k_logits4, k_labels4, -2, 0.0), CL_ERR_ARG,
              "negative");
    cl_metrics_free(&m);
}

CL_TEST(metrics_merge_equals_single_pass)
{
    cl_metrics all, a, b, other;
    REQUIRE_OK(cl_metrics_init(&all, 3));
    REQUIRE_OK(cl_metrics_init(&a, 3));
    REQUIRE_OK(cl_metrics_init(&b, 3));
    REQUIRE_OK(cl_metrics_init(&other, 4));
    REQUIRE_OK(cl_metrics_add(&all, k_logits4, k_labels4, 4, 2.0));
    REQUIRE_OK(cl_metrics_add(&a, k_logits4, k_labels4, 1, 0.5));
    REQUIRE_OK(cl_metrics_add(&b, k_logits4 + 3, k_labels4 + 1, 3, 1.5));
    REQUIRE_OK(cl_metrics_merge(&a, &b));
    CHECK(memcmp(a.counts, all.counts, all.n_counts * sizeof(int64_t)) == 0);
    CHECK(a.loss_sum == all.loss_sum);
    CHECK_ERR(cl_metrics_merge(&a, &other), CL_ERR_SHAPE, "3 classes vs 4");
    cl_metrics_free(&all);
    cl_metrics_free(&a);
    cl_metrics_free(&b);
    cl_metrics_free(&other);
}

/* Reads a whole small file into buf (NUL-terminated); returns its length
 * or -1. */
static long slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return (long)n;
}

CL_TEST(metrics_csv_and_print)
{
    cl_metrics m;
    REQUIRE_OK(cl_metrics_init(&m, 3));
    REQUIRE_OK(cl_metrics_add(&m, k_logits4, k_labels4, 4, 2.0));
    const char *names[3] = {"cat", "dog, big", "say \"hi\""};
    const char *path = cl_test_path("confusion.csv");
    REQUIRE_OK(cl_metrics_write_csv(&m, path, names));
    char buf[4096];
    REQUIRE(slurp(path, buf, sizeof buf) > 0);
    const char *want = "true\\pred,cat,\"dog, big\",\"say \"\"hi\"\"\"\n"
                       "cat,2,0,0\n"
                       "\"dog, big\",1,0,0\n"
                       "\"say \"\"hi\"\"\",0,1,0\n";
    CHECK(strcmp(buf, want) == 0);
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *left = fopen(tmp, "rb");
    CHECK(left == NULL);
    if (left)
        fclose(left);
    /* Without names the indices are used. */
    REQUIRE_OK(cl_metrics_write_csv(&m, path, NULL));
    REQUIRE(slurp(path, buf, sizeof buf) > 0);
    CHECK(strncmp(buf, "true\\pred,0,1,2\n0,2,0,0\n", 24) == 0);
    CHECK_ERR(cl_metrics_write_csv(&m, "/nonexistent-dir/x.csv", names),
              CL_ERR_IO, "/nonexistent-dir/x.csv");
    /* The text report. */
    const char *rp = cl_test_path("report.txt");
    FILE *f = fopen(rp, "w");
    REQUIRE(f != NULL);
    CHECK_OK(cl_metrics_print(&m, f, names));
    fclose(f);
    REQUIRE(slurp(rp, buf, sizeof buf) > 0);
    CHECK(strstr(buf, "4 samples, loss 0.5000, top-1 50.00% (2), top-3 "
                      "100.00% (4)") != NULL);
    CHECK(strstr(buf, "dog, big") != NULL);
    CHECK(strstr(buf, "100.00%\n") != NULL);
    cl_metrics_free(&m);
}

CL_TEST(metrics_print_many_classes_lists_worst)
{
    /* 150 classes, one sample each, right for every class except 20..29
     * (predicted as class 0 by a zero row... with logit 1 at class 0). */
    enum { K = 150 };
    cl_metrics m;
    REQUIRE_OK(cl_metrics_init(&m, K));
    static float l[K];
    for (int c = 0; c < K; c++) {
        memset(l, 0, sizeof l);
        l[(c >= 20 && c < 30) ? 0 : c] = 1.0f;
        int32_t lab = c;
        REQUIRE_OK(cl_metrics_add(&m, l, &lab, 1, 0.1));
    }
    CHECK_NEAR(cl_metrics_top1(&m), 140.0 / 150.0, 1e-12);
    const char *rp = cl_test_path("report150.txt");
    FILE *f = fopen(rp, "w");
    REQUIRE(f != NULL);
    CHECK_OK(cl_metrics_print(&m, f, NULL));
    fclose(f);
    char buf[8192];
    REQUIRE(slurp(rp, buf, sizeof buf) > 0);
    CHECK(strstr(buf, "(10 lowest of 150 classes)") != NULL);
    int lines = 0;
    for (char *p = buf; *p; p++)
        lines += *p == '\n';
    CHECK(lines == 12);
    /* Exactly the ten wrong classes, at 0%. */
    for (int c = 20; c < 30; c++) {
        char row[64];
        snprintf(row, sizeof row, "\n  %-24d %10d %10d    0.00%%", c, 1, 0);
        CHECK(strstr(buf, row) != NULL);
    }
    cl_metrics_free(&m);
}

CL_TEST(ema_bias_corrected)
{
    /* beta 0.5: after 4 the average is 4; after 2 it is
     * (0.5 * 2 + 0.25 * 4) / (1 - 0.25) = 2 / 0.75. */
    cl_ema e;
    cl_ema_init(&e, 0.5);
    CHECK(isnan(cl_ema_get(&e)));
    CHECK_NEAR(cl_ema_add(&e, 4.0), 4.0, 1e-12);
    CHECK_NEAR(cl_ema_add(&e, 2.0), 2.0 / 0.75, 1e-12);
    CHECK_NEAR(cl_ema_add(&e, NAN), 2.0 / 0.75, 1e-12);
    CHECK(e.n == 2 && e.n_skipped == 1);
    cl_ema_init(&e, 0.0);
    cl_ema_add(&e, 3.0);
    CHECK_NEAR(cl_ema_add(&e, 7.0), 7.0, 1e-12);
}

/* ---- the training state's metadata ------------------------------------ */

/* A state file holding only metadata, n {key, value} pairs. */
static void write_state_meta(const char *path, const char *const (*kv)[2],
                             int n)
{
    cl_st_writer *w = NULL;
    REQUIRE_OK(cl_st_writer_new(&w));
    for (int i = 0; i < n; i++)
        REQUIRE_OK(cl_st_writer_meta(w, kv[i][0], kv[i][1]));
    REQUIRE_OK(cl_st_writer_save(w, path));
    cl_st_writer_free(w);
}

#define N_KV(a) ((int)(sizeof(a) / sizeof((a)[0])))

CL_TEST(state_info_reads_the_global_batch_in_both_forms)
{
    const char *path = cl_test_path("s.state.safetensors");
    cl_train_state_info in;
    /* As the trainer writes it now: the total and its parts. */
    const char *const now[][2] = {
        {CL_STATE_EPOCH, "1"},        {CL_STATE_NEXT_BATCH, "12"},
        {CL_STATE_STEP, "28"},        {CL_STATE_GLOBAL_BATCH, "64"},
        {CL_STATE_BATCH_SIZE, "8"},   {CL_STATE_PROCESSES, "4"},
        {CL_STATE_ACCUMULATION, "2"}, {CL_STATE_STEPS_PER_EPOCH, "16"},
        {CL_STATE_EMA_AVERAGED, ""},  {CL_STATE_EMA_UPDATES, ""}};
    write_state_meta(path, now, N_KV(now));
    REQUIRE_OK(cl_train_state_read_info(path, &in));
    CHECK(in.epoch == 1 && in.next_batch == 12 && in.step == 28);
    CHECK(in.global_batch == 64 && in.batch_size == 8 && in.processes == 4 &&
          in.accumulation_steps == 2);
    CHECK(in.steps_per_epoch == 16);
    CHECK(in.ema_averaged == 0 && in.ema_updates == 0);
    /* Files written before the parts had keys: all four packed. */
    const char *const packed[][2] = {{CL_STATE_STEP, "5"},
                                     {CL_STATE_GLOBAL_BATCH, "64 8 4 2"},
                                     {CL_STATE_EMA_UPDATES, "7"}};
    write_state_meta(path, packed, N_KV(packed));
    REQUIRE_OK(cl_train_state_read_info(path, &in));
    CHECK(in.step == 5 && in.epoch == 0);
    CHECK(in.global_batch == 64 && in.batch_size == 8 && in.processes == 4 &&
          in.accumulation_steps == 2);
    CHECK(in.ema_updates == 7);
    /* Older still: no global batch at all. */
    const char *const none[][2] = {{CL_STATE_STEP, "3"}};
    write_state_meta(path, none, N_KV(none));
    REQUIRE_OK(cl_train_state_read_info(path, &in));
    CHECK(in.global_batch == 0 && in.processes == 0 && in.step == 3);
    /* Refused, naming the key or the batch. */
    const char *const bad_num[][2] = {{CL_STATE_STEP, "12x"}};
    write_state_meta(path, bad_num, N_KV(bad_num));
    CHECK_ERR(cl_train_state_read_info(path, &in), CL_ERR_FORMAT, "'step'");
    const char *const bad_prod[][2] = {{CL_STATE_GLOBAL_BATCH, "64 8 4 3"}};
    write_state_meta(path, bad_prod, N_KV(bad_prod));
    CHECK_ERR(cl_train_state_read_info(path, &in), CL_ERR_FORMAT,
              "global batch");
    const char *const bad_parts[][2] = {{CL_STATE_GLOBAL_BATCH, "64"},
                                        {CL_STATE_BATCH_SIZE, "8"}};
    write_state_meta(path, bad_parts, N_KV(bad_parts));
    CHECK_ERR(cl_train_state_read_info(path, &in), CL_ERR_FORMAT,
              "global batch");
    const char *missing = cl_test_path("missing.safetensors");
    CHECK(cl_train_state_read_info(missing, &in) != CL_OK);
}
