/* Swin-Transformer's graph: torchvision's parameter count and names, the
 * size rules, the index buffers (window partition and reverse undo each
 * other, patch merging reads each token once), the mask, what a
 * checkpoint holds, and a seeded init.
 * ctest-labels: unit */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "graph/graph.h"
#include "harness.h"
#include "models/arch.h"

static cl_status build(cl_graph *g, const char *arch, int classes, int batch,
                       int side)
{
    cl_arch a;
    CL_TRY(cl_arch_parse(arch, NULL, &a));
    cl_arch_set_io(&a, 3, classes);
    CL_TRY(cl_graph_init(g, batch));
    cl_status s = cl_arch_build(g, &a, side, side, 0, 0.0f);
    if (s != CL_OK)
        cl_graph_free(g);
    return s;
}

/* torchvision: swin_t has 28,288,354 parameters with 1000 classes and 4.49
 * G multiply-adds at 224 (its docs' GFLOPS figure counts multiply-adds). */
CL_TEST(swin_t_counts)
{
    cl_graph g;
    REQUIRE_OK(build(&g, "swin_t", 1000, 1, 224));
    CHECK(g.n_param_elems == 28288354);
    int64_t macs = cl_graph_macs(&g);
    printf("swin_t: %lld parameters, %.4f G multiply-adds\n",
           (long long)g.n_param_elems, (double)macs / 1e9);
    CHECK(macs > 4.40e9 && macs < 4.55e9);
    /* torchvision's state_dict names, the tables and indices included. */
    static const char *const names[] = {
        "features.0.0.weight",
        "features.0.2.bias",
        "features.1.0.attn.relative_position_bias_table",
        "features.1.0.attn.relative_position_index",
        "features.1.1.attn.qkv.weight",
        "features.1.1.mlp.3.bias",
        "features.2.reduction.weight",
        "features.2.norm.weight",
        "features.5.5.norm2.weight",
        "features.7.1.mlp.0.weight",
        "norm.weight",
        "head.bias"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        CHECK(cl_graph_find(&g, names[i]) >= 0);
    /* 185 tensors in torchvision's state_dict; the derived index buffers
     * are not among what a checkpoint holds. */
    int saved = 0, derived = 0;
    for (int t = 0; t < g.n_tensors; t++) {
        saved += cl_gtensor_saved(&g.tensors[t]);
        derived += g.tensors[t].derived;
    }
    CHECK(saved == 185);
    CHECK(derived > 0);
    int t = cl_graph_find(&g, "features.1.0.attn.relative_position_bias_table");
    CHECK(t >= 0 && g.tensors[t].shape.d[0] == 169 &&
          g.tensors[t].shape.d[1] == 3);
    cl_graph_free(&g);
}

CL_TEST(swin_size_rules)
{
    cl_graph g;
    CHECK_ERR(build(&g, "swin_micro", 10, 2, 28), CL_ERR_SHAPE,
              "stage 1's 14x14 tokens do not divide into 4x4 windows");
    CHECK_ERR(build(&g, "swin_t", 10, 1, 200), CL_ERR_SHAPE,
              "stage 1's 50x50 tokens do not divide into 7x7 windows");
    CHECK_ERR(build(&g, "swin_tiny", 10, 1, 224), CL_ERR_ARG,
              "is not one of resnet18");
    REQUIRE_OK(build(&g, "swin_micro", 10, 2, 32));
    cl_graph_free(&g);
    /* and at 64 (its stages see 32, 16, 8 tokens a side). */
    REQUIRE_OK(build(&g, "swin_micro", 10, 1, 64));
    cl_graph_free(&g);
}

static const int64_t *ix_of(const cl_graph *g, const char *name, int64_t *n)
{
    int t = -1;
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].derived && strcmp(g->tensors[i].name, name) == 0)
            t = i;
    if (t < 0)
        return NULL;
    *n = cl_graph_numel(g, t);
    return cl_graph_buffer_i64(g, t);
}

/* Row k of the windows is token part[k]; token j comes back from window
 * row rev[j]: rev o part is the identity, with and without the shift, and
 * every token appears in exactly one window row. */
CL_TEST(swin_partition_and_reverse_undo_each_other)
{
    cl_graph g;
    REQUIRE_OK(build(&g, "swin_micro", 10, 3, 32));
    for (int st = 1; st <= 2; st++)
        for (int k = 0; k < 2; k++) {
            char a[64], b[64];
            snprintf(a, sizeof a, "swin.stage%d.partition%d", st, k);
            snprintf(b, sizeof b, "swin.stage%d.reverse%d", st, k);
            int64_t np = 0, nr = 0;
            const int64_t *part = ix_of(&g, a, &np);
            const int64_t *rev = ix_of(&g, b, &nr);
            REQUIRE(part && rev && np == nr);
            int bad = 0;
            char *seen = cl_alloc_zero((size_t)np, "seen");
            REQUIRE(seen);
            for (int64_t j = 0; j < nr; j++) {
                bad += rev[j] < 0 || rev[j] >= np || part[rev[j]] != j;
                if (part[j] >= 0 && part[j] < np)
                    seen[part[j]]++;
            }
            for (int64_t j = 0; j < np; j++)
                bad += seen[j] != 1;
            cl_free(seen);
            CHECK(bad == 0);
        }
    /* The shifted partition moves the grid: its first window row is token
     * (2, 2) of the 16x16 grid (the shift is half the window). */
    int64_t n = 0;
    const int64_t *p1 = ix_of(&g, "swin.stage1.partition1", &n);
    REQUIRE(p1);
    CHECK(p1[0] == 2 * 16 + 2);
    cl_graph_free(&g);
}

/* The mask of the last window row of stage 1 (16x16 tokens, window 4,
 * shift 2) splits it into four regions of 2x2 tokens, as torchvision's
 * h/w slices do; the first window is one region. */
CL_TEST(swin_mask_regions)
{
    cl_graph g;
    REQUIRE_OK(build(&g, "swin_micro", 10, 1, 32));
    int t = -1;
    for (int i = 0; i < g.n_tensors; i++)
        if (strcmp(g.tensors[i].name, "swin.stage1.mask") == 0)
            t = i;
    REQUIRE(t >= 0);
    const cl_shape *s = &g.tensors[t].shape;
    REQUIRE(s->ndim == 4 && s->d[0] == 16 && s->d[1] == 1 && s->d[2] == 16);
    const float *m = cl_graph_buffer(&g, t);
    int zero_first = 1;
    for (int i = 0; i < 256; i++)
        zero_first &= m[i] == 0.0f;
    CHECK(zero_first);
    const float *last = m + 15 * 256;
    int masked = 0;
    for (int i = 0; i < 256; i++)
        masked += last[i] == -100.0f;
    /* 16 tokens in 4 regions of 4: each token sees 12 masked. */
    CHECK(masked == 16 * 12);
    cl_graph_free(&g);
}

/* Patch merging reads every token once, in torchvision's order: the first
 * merged token holds tokens (0,0), (1,0), (0,1), (1,1). */
CL_TEST(swin_patch_merging_order)
{
    cl_graph g;
    REQUIRE_OK(build(&g, "swin_micro", 10, 2, 32));
    int64_t n = 0;
    const int64_t *ix = ix_of(&g, "swin.merge2", &n);
    REQUIRE(ix && n == 2 * 256);
    CHECK(ix[0] == 0 && ix[1] == 16 && ix[2] == 1 && ix[3] == 17);
    char *seen = cl_alloc_zero((size_t)n, "seen");
    REQUIRE(seen);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ix[i] < 0 || ix[i] >= n)
            bad++;
        else
            seen[ix[i]]++;
    }
    for (int64_t i = 0; i < n; i++)
        bad += seen[i] != 1;
    CHECK(bad == 0);
    cl_free(seen);
    cl_graph_free(&g);
}

/* torchvision's init: linear weights and tables N(0, 0.02), biases 0, LN
 * 1 / 0; the same seed gives the same weights, another seed others. */
CL_TEST(swin_init)
{
    cl_graph g, h;
    cl_arch a;
    REQUIRE_OK(cl_arch_parse("swin_micro", NULL, &a));
    cl_arch_set_io(&a, 3, 10);
    REQUIRE_OK(build(&g, "swin_micro", 10, 1, 32));
    REQUIRE_OK(build(&h, "swin_micro", 10, 1, 32));
    REQUIRE_OK(cl_arch_init(&g, &a, 5));
    REQUIRE_OK(cl_arch_init(&h, &a, 5));
    CHECK(memcmp(g.params, h.params, g.n_param_floats * sizeof(float)) == 0);
    REQUIRE_OK(cl_arch_init(&h, &a, 6));
    CHECK(memcmp(g.params, h.params, g.n_param_floats * sizeof(float)) != 0);
    int t = cl_graph_find(&g, "features.3.1.attn.qkv.weight");
    REQUIRE(t >= 0);
    const float *w = cl_graph_param(&g, t);
    int64_t n = cl_graph_numel(&g, t);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        s += w[i];
        s2 += (double)w[i] * w[i];
    }
    double sd = sqrt(s2 / n - (s / n) * (s / n));
    CHECK(fabs(sd - 0.02) < 0.001 && fabs(s / n) < 0.001);
    t = cl_graph_find(&g, "features.3.1.attn.qkv.bias");
    REQUIRE(t >= 0);
    CHECK(cl_graph_param(&g, t)[0] == 0.0f);
    t = cl_graph_find(&g, "features.3.1.norm1.weight");
    REQUIRE(t >= 0);
    CHECK(cl_graph_param(&g, t)[5] == 1.0f);
    cl_graph_free(&g);
    cl_graph_free(&h);
}
