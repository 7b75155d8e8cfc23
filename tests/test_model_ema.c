/* The weights' moving average (train/model_ema.h) against hand
 * computations, its place in checkpoints (ema.-prefixed tensors and which
 * copy a load reads), the recipe keys' errors, and the weight-decay group
 * of transformer embedding tables (CL_PARAM_EMBED).
 * ctest-labels: unit train */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "graph_cases.h"
#include "harness.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "train/model_ema.h"
#include "train/optim.h"
#include "train/recipe.h"

/* build_bn_index: bn (weight, bias, running_mean, running_var,
 * num_batches_tracked), rel.index (i64), fc (weight, bias). */
static void graph_bn(cl_graph *g)
{
    (void)build_attention; /* graph_cases.h's other graphs */
    (void)build_linear4d;
    (void)fill_params;
    REQUIRE_OK(cl_graph_init(g, GN));
    REQUIRE_OK(build_bn_index(g));
}

/* Every parameter and the BN running statistics set to v. */
static void set_all(cl_graph *g, float v)
{
    for (int t = 0; t < g->n_tensors; t++) {
        const cl_gtensor *gt = &g->tensors[t];
        float *p = NULL;
        if (gt->kind == CL_GT_PARAM)
            p = cl_graph_param(g, t);
        else if (gt->kind == CL_GT_BUFFER && gt->dtype == CL_F32 &&
                 !strstr(gt->name, "num_batches"))
            p = cl_graph_buffer(g, t);
        for (int64_t i = 0; p && i < cl_graph_numel(g, t); i++)
            p[i] = v;
    }
}

static float ema_of(const cl_model_ema *e, const cl_graph *g, const char *name)
{
    int t = cl_graph_find(g, name);
    CHECK(t >= 0);
    if (t < 0)
        return NAN;
    const cl_gtensor *gt = &g->tensors[t];
    return gt->kind == CL_GT_PARAM ? e->params[gt->offset]
                                   : e->buffers[gt->offset];
}

CL_TEST(first_update_copies_then_averages)
{
    cl_graph g;
    graph_bn(&g);
    set_all(&g, 0.25f);
    cl_model_ema e;
    cl_model_ema_config c = {0.9, 1, 0};
    REQUIRE_OK(cl_model_ema_create(&e, &c, &g));
    CHECK(ema_of(&e, &g, "fc.weight") == 0.25f); /* starts as the weights */
    /* Update 1 copies whatever the decay (AveragedModel's n_averaged 0,
     * timm's decay 0 at its first step). */
    set_all(&g, 1.0f);
    CHECK(cl_model_ema_next_decay(&e) == 0.0);
    cl_model_ema_update(&e, &g);
    CHECK(ema_of(&e, &g, "fc.weight") == 1.0f);
    /* Update 2: 0.9 * 1 + 0.1 * 2 = 1.1 for parameters and running
     * statistics alike (both references average float buffers). */
    set_all(&g, 2.0f);
    int nb = cl_graph_find(&g, "bn.num_batches_tracked");
    int ix = cl_graph_find(&g, "rel.index");
    REQUIRE(nb >= 0 && ix >= 0);
    cl_graph_buffer(&g, nb)[0] = 7;
    const int64_t big = ((int64_t)1 << 40) + 3; /* not a float's bits */
    cl_graph_buffer_i64(&g, ix)[5] = big;
    CHECK_NEAR(cl_model_ema_next_decay(&e), 0.9, 0);
    cl_model_ema_update(&e, &g);
    const float want = 0.9f * 1.0f + (float)(1.0 - 0.9) * 2.0f;
    CHECK(ema_of(&e, &g, "fc.weight") == want);
    CHECK_NEAR(ema_of(&e, &g, "fc.weight"), 1.1, 1e-6);
    CHECK(ema_of(&e, &g, "bn.bias") == want);
    CHECK(ema_of(&e, &g, "bn.running_mean") == want);
    CHECK(ema_of(&e, &g, "bn.running_var") == want);
    /* The counter and the index are copied, not averaged. */
    CHECK(ema_of(&e, &g, "bn.num_batches_tracked") == 7.0f);
    int64_t got;
    memcpy(&got, e.buffers + g.tensors[ix].offset + 2 * 5, sizeof got);
    CHECK(got == big);
    CHECK(e.n_averaged == 2 && e.n_updates == 2);
    /* A reset (the lr warm-up) makes the next update a copy again. */
    cl_model_ema_reset(&e);
    set_all(&g, 3.0f);
    cl_model_ema_update(&e, &g);
    CHECK(ema_of(&e, &g, "fc.weight") == 3.0f);
    CHECK(e.n_averaged == 1 && e.n_updates == 3);
    cl_model_ema_destroy(&e);
    cl_graph_free(&g);
}

/* Six optimizer steps of an epoch whose weights are 1..6 (all elements),
 * the average updated as the trainer does: at steps whose 0-based index
 * in the epoch is a multiple of ema_steps. */
static double run6(int steps, int warmup, double decay)
{
    cl_graph g;
    graph_bn(&g);
    set_all(&g, 0.0f);
    cl_model_ema e;
    cl_model_ema_config c = {decay, steps, warmup};
    CHECK_OK(cl_model_ema_create(&e, &c, &g));
    if (!e.params)
        return NAN;
    for (int j = 0; j < 6; j++) {
        set_all(&g, (float)(j + 1));
        if (cl_model_ema_due(&e, j))
            cl_model_ema_update(&e, &g);
    }
    double v = ema_of(&e, &g, "fc.weight");
    cl_model_ema_destroy(&e);
    cl_graph_free(&g);
    return v;
}

CL_TEST(steps_and_warmup_by_hand)
{
    /* ema_steps 1, decay 0.5: 1, then .5*1+.5*2 = 1.5, 2.25, 3.125, 4.0625,
     * 5.03125. */
    CHECK_NEAR(run6(1, 0, 0.5), 5.03125, 1e-6);
    /* ema_steps 2: updates at steps 0, 2, 4 with weights 1, 3, 5 and decay
     * 0.9: 1, 0.9*1 + 0.1*3 = 1.2, 0.9*1.2 + 0.1*5 = 1.58. */
    CHECK_NEAR(run6(2, 0, 0.9), 1.58, 1e-6);
    /* With timm's warm-up the n-th update (n counted from 0) uses
     * min(0.9, 1 - (1 + n)^(-2/3)): n=1: 1 - 2^(-2/3) = 0.3700395,
     * 0.3700395*1 + 0.6299605*3 = 2.259921; n=2: 1 - 3^(-2/3) = 0.5192501,
     * 0.5192501*2.259921 + 0.4807499*5 = 3.577214. */
    CHECK_NEAR(run6(2, 1, 0.9), 3.577214, 2e-6);
    /* ema_steps 4: updates at steps 0 and 4 only (weights 1, 5): 0.9*1 +
     * 0.1*5 = 1.4. */
    CHECK_NEAR(run6(4, 0, 0.9), 1.4, 1e-6);
}

CL_TEST(warmup_decay_values)
{
    cl_graph g;
    graph_bn(&g);
    cl_model_ema e;
    cl_model_ema_config c = {0.5, 1, 1};
    REQUIRE_OK(cl_model_ema_create(&e, &c, &g));
    CHECK(cl_model_ema_next_decay(&e) == 0.0);
    e.n_averaged = 1;
    CHECK_NEAR(cl_model_ema_next_decay(&e), 0.370039475, 1e-9);
    e.n_averaged = 2; /* 1 - 3^(-2/3) = 0.519 > 0.5: the decay caps it */
    CHECK_NEAR(cl_model_ema_next_decay(&e), 0.5, 0);
    e.cfg.decay = 0.9998;
    e.n_averaged = 999; /* 1 - 1000^(-2/3) = 0.99 */
    CHECK_NEAR(cl_model_ema_next_decay(&e), 0.99, 1e-12);
    cl_model_ema_destroy(&e);
    cl_graph_free(&g);
}

CL_TEST(swap_exchanges_and_restores)
{
    cl_graph g;
    graph_bn(&g);
    set_all(&g, 1.0f);
    cl_model_ema e;
    cl_model_ema_config c = {0.5, 1, 0};
    REQUIRE_OK(cl_model_ema_create(&e, &c, &g));
    set_all(&g, 4.0f);
    cl_model_ema_swap(&e, &g);
    CHECK(cl_graph_param(&g, cl_graph_find(&g, "fc.weight"))[0] == 1.0f);
    CHECK(ema_of(&e, &g, "fc.weight") == 4.0f);
    cl_model_ema_swap(&e, &g);
    CHECK(cl_graph_param(&g, cl_graph_find(&g, "fc.weight"))[0] == 4.0f);
    CHECK(ema_of(&e, &g, "bn.running_var") == 1.0f);
    cl_model_ema_destroy(&e);
    cl_graph_free(&g);
}

CL_TEST(bad_config_names_the_key)
{
    cl_graph g;
    graph_bn(&g);
    cl_model_ema e;
    cl_model_ema_config c = {1.0, 1, 0};
    CHECK_ERR(cl_model_ema_create(&e, &c, &g), CL_ERR_CONFIG, "ema_decay");
    c.decay = 0.9;
    c.steps = 0;
    CHECK_ERR(cl_model_ema_create(&e, &c, &g), CL_ERR_CONFIG, "ema_steps");
    cl_model_ema_destroy(&e);
    cl_graph_free(&g);
    /* The recipe keys say it in one sentence naming the key. */
    cl_config cfg;
    cl_config_defaults(&cfg);
    CHECK(cfg.ema == 0 && cfg.ema_decay == 0.9998 && cfg.ema_steps == 1 &&
          cfg.ema_warmup == 0 && cfg.load_ema == 1 &&
          cfg.embedding_weight_decay == -1);
    CHECK_ERR(cl_config_set(&cfg, "ema_decay", "1"), CL_ERR_CONFIG,
              "key 'ema_decay' expects a number in (0, 1), found '1'");
    CHECK_ERR(cl_config_set(&cfg, "ema_decay", "0"), CL_ERR_CONFIG,
              "ema_decay");
    CHECK_ERR(cl_config_set(&cfg, "ema_steps", "0"), CL_ERR_CONFIG,
              "key 'ema_steps'");
    CHECK_OK(cl_config_set(&cfg, "embedding_weight_decay", "-0.5"));
    CHECK_ERR(cl_config_check(&cfg), CL_ERR_CONFIG, "embedding_weight_decay");
    CHECK_OK(cl_config_set(&cfg, "embedding_weight_decay", "0"));
    CHECK_OK(cl_config_set(&cfg, "ema-decay", "0.999"));
    CHECK_OK(cl_config_check(&cfg));
    cl_model_ema_config ec;
    CHECK_OK(cl_recipe_ema(&cfg, &ec));
    CHECK(ec.decay == 0.999 && ec.steps == 1 && ec.warmup == 0);
}

/* ---- checkpoints ------------------------------------------------------ */

CL_TEST(checkpoint_holds_the_average_and_loads_pick_it)
{
    cl_graph g;
    graph_bn(&g);
    set_all(&g, 1.0f);
    cl_model_ema e;
    cl_model_ema_config c = {0.5, 1, 0};
    REQUIRE_OK(cl_model_ema_create(&e, &c, &g));
    set_all(&g, 2.0f); /* raw 2, average 1 */
    const char *both = cl_test_path("ema.safetensors");
    const char *plain = cl_test_path("plain.safetensors");
    cl_ckpt_kv meta[] = {{"arch", "test"}};
    REQUIRE_OK(cl_ckpt_save_model_ema(both, &g, e.params, e.buffers, meta, 1));
    REQUIRE_OK(cl_ckpt_save_model(plain, &g, meta, 1));
    /* The average's names follow the weights'. */
    cl_st_file *f = NULL;
    REQUIRE_OK(cl_st_open(&f, both));
    CHECK(cl_st_find(f, "fc.weight") >= 0);
    CHECK(cl_st_find(f, "ema.fc.weight") >= 0);
    CHECK(cl_st_find(f, "ema.bn.num_batches_tracked") >= 0);
    CHECK(cl_st_find(f, "ema.rel.index") >= 0);
    CHECK(cl_st_count(f) == 2 * (size_t)cl_st_find(f, "ema.bn.weight"));
    cl_st_close(f);

    cl_graph h;
    graph_bn(&h);
    int fw = cl_graph_find(&h, "fc.weight");
    int rm = cl_graph_find(&h, "bn.running_mean");
    cl_ckpt_load_report rep;
    /* By default: the average (what eval, predict and export take). */
    REQUIRE_OK(cl_ckpt_load_model(both, &h, CL_CKPT_STRICT, &rep));
    CHECK(rep.ema == 1);
    CHECK(cl_graph_param(&h, fw)[0] == 1.0f);
    CHECK(cl_graph_buffer(&h, rm)[0] == 1.0f);
    /* Raw: the weights (resume, load_ema false). */
    REQUIRE_OK(cl_ckpt_load_model_pick(both, &h, CL_CKPT_STRICT,
                                       CL_CKPT_PICK_RAW, &rep));
    CHECK(rep.ema == 0);
    CHECK(cl_graph_param(&h, fw)[0] == 2.0f);
    CHECK(cl_graph_buffer(&h, rm)[0] == 2.0f);
    /* A file without an average gives its weights, or refuses EMA only. */
    set_all(&h, 0.0f);
    REQUIRE_OK(cl_ckpt_load_model(plain, &h, CL_CKPT_STRICT, &rep));
    CHECK(rep.ema == 0 && cl_graph_param(&h, fw)[0] == 2.0f);
    CHECK_ERR(cl_ckpt_load_model_pick(plain, &h, CL_CKPT_STRICT,
                                      CL_CKPT_PICK_EMA_ONLY, NULL),
              CL_ERR_FORMAT, "holds no EMA");
    cl_graph_free(&h);
    cl_model_ema_destroy(&e);
    cl_graph_free(&g);
}

/* ---- the embedding table's weight decay ------------------------------- */

/* The decay optim gives each segment of build_bias's graph. */
static void decays(int filter, double embed, float *table, float *weight,
                   float *bias)
{
    cl_graph g;
    REQUIRE_OK(cl_graph_init(&g, GN));
    REQUIRE_OK(build_bias(&g));
    cl_optim_segment segs[8];
    int n = 0, kt = -1, kw = -1, kb = -1;
    for (int t = 0; t < g.n_tensors; t++) {
        const cl_gtensor *gt = &g.tensors[t];
        if (gt->kind != CL_GT_PARAM)
            continue;
        REQUIRE(n < 8);
        if (strcmp(gt->name, "attn.relative_position_bias_table") == 0)
            kt = n;
        if (strcmp(gt->name, "q.weight") == 0)
            kw = n;
        if (strcmp(gt->name, "q.bias") == 0)
            kb = n;
        segs[n++] = (cl_optim_segment){
            gt->offset, (size_t)cl_shape_numel(&gt->shape), gt->param_flags};
    }
    REQUIRE(kt >= 0 && kw >= 0 && kb >= 0);
    CHECK(segs[kt].flags == CL_PARAM_EMBED);
    cl_optim_config c = cl_optim_config_default();
    c.weight_decay = 0.1;
    c.filter_bias_and_bn = filter;
    c.embed_weight_decay = embed;
    cl_optim opt;
    REQUIRE_OK(cl_optim_create(&opt, &c, segs, n, g.n_param_floats));
    *table = opt.seg_decay[kt];
    *weight = opt.seg_decay[kw];
    *bias = opt.seg_decay[kb];
    /* And a step moves the table only when it is decayed: zero gradients,
     * lr 1, no momentum history: p -= 1 * wd * p. */
    float *p = g.params + segs[kt].offset;
    p[0] = 2.0f;
    memset(g.grads, 0, g.n_param_floats * sizeof(float));
    REQUIRE_OK(cl_optim_step(&opt, g.params, g.grads, 1.0f));
    CHECK_NEAR(p[0], 2.0f - *table * 2.0f, 1e-7);
    cl_optim_destroy(&opt);
    cl_graph_free(&g);
}

CL_TEST(embedding_table_decay_group)
{
    float t, w, b;
    /* -1 (the default): filter_bias_and_bn exempts the table as timm's
     * no_weight_decay list does, or decays it like a weight. */
    decays(1, -1, &t, &w, &b);
    CHECK(t == 0.0f && w == 0.1f && b == 0.0f);
    decays(0, -1, &t, &w, &b);
    CHECK(t == 0.1f && w == 0.1f && b == 0.1f);
    /* A value is the table's own decay either way (torchvision's
     * --transformer-embedding-decay). */
    decays(1, 0.05, &t, &w, &b);
    CHECK(t == 0.05f && w == 0.1f && b == 0.0f);
    decays(0, 0.0, &t, &w, &b);
    CHECK(t == 0.0f && w == 0.1f && b == 0.1f);
    /* The key reaches the optimizer. */
    cl_config cfg;
    cl_config_defaults(&cfg);
    CHECK_OK(cl_config_set(&cfg, "embedding_weight_decay", "0"));
    cl_optim_config oc;
    CHECK_OK(cl_recipe_optim(&cfg, &oc));
    CHECK(oc.embed_weight_decay == 0.0);
}
