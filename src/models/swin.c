/* Swin-Transformer built as a static graph with torchvision's module names.
 * Data movement is row_gather over index buffers the builder derives from
 * the shapes; the tables below say which row each output row reads. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "core/rng.h"
#include "models/swin.h"

#define MAX_CLASSES 1000000
#define INIT_STREAM_TAG 0x73776e69u /* "swni" */

/* torchvision's swin_t (patch 4, window 7, embed 96, depths 2-2-6-2, heads
 * 3-6-12-24, MLP ratio 4, stochastic depth 0.2), for 224 x 224 inputs. */
static cl_swin_config swin_t_config(void)
{
    cl_swin_config c = {NULL,           4, 7,    96, 4,   {2, 2, 6, 2},
                        {3, 6, 12, 24}, 4, 0.2f, 3,  1000};
    return c;
}

/* classic's small variant for 28-32 px inputs: patch 2, window 4, embed
 * 64, depths 2-2-6, heads 2-4-8, MLP ratio 4, stochastic depth 0.1; at 32
 * px its stages see 16x16, 8x8 and 4x4 tokens. */
static cl_swin_config swin_micro_config(void)
{
    cl_swin_config c = {NULL,         2, 4,    64, 3,   {2, 2, 6, 0},
                        {2, 4, 8, 0}, 4, 0.1f, 3,  1000};
    return c;
}

/* The Swin lines of models/archs.def (FAMILY picks the case): names and
 * configs, and the names ", "-separated for errors (each line adds
 * ", name"; the list starts past the first separator). */
#define SWIN_OF_SWIN(name, make) {name, make},
#define SWIN_OF_RESNET(name, variant)
#define LIST_OF_SWIN(name) ", " name
#define LIST_OF_RESNET(name)
static const struct {
    const char *name;
    cl_swin_config (*make)(void);
} SWINS[] = {
#define CL_ARCH(E, name, family, variant) SWIN_OF_##family(name, variant)
#include "models/archs.def"
#undef CL_ARCH
};
static const char NAME_LIST[] = ""
#define CL_ARCH(E, name, family, variant) LIST_OF_##family(name)
#include "models/archs.def"
#undef CL_ARCH
    ;
#define N_SWINS ((int)(sizeof SWINS / sizeof SWINS[0]))

int cl_swin_is_arch(const char *name)
{
    for (int i = 0; name && i < N_SWINS; i++)
        if (strcmp(name, SWINS[i].name) == 0)
            return 1;
    return 0;
}

cl_status cl_swin_arch_parse(const char *name, cl_swin_config *cfg)
{
    for (int i = 0; name && i < N_SWINS; i++)
        if (strcmp(name, SWINS[i].name) == 0) {
            *cfg = SWINS[i].make();
            cfg->name = SWINS[i].name;
            return CL_OK;
        }
    return cl_error(CL_ERR_ARG, "arch '%s' is not one of %s",
                    name ? name : "(null)", NAME_LIST + 2);
}

cl_status cl_swin_check_config(const cl_swin_config *c)
{
    if (c->patch < 1 || c->patch > 64 || c->window < 1 || c->window > 64)
        return cl_error(CL_ERR_ARG,
                        "swin: patch %d and window %d must be in 1..64",
                        c->patch, c->window);
    if (c->n_stages < 1 || c->n_stages > CL_SWIN_MAX_STAGES)
        return cl_error(CL_ERR_ARG, "swin: %d stages, expected 1..%d",
                        c->n_stages, CL_SWIN_MAX_STAGES);
    for (int s = 0; s < c->n_stages; s++) {
        int ch = c->embed << s;
        if (c->depths[s] < 1 || c->depths[s] > 64 || c->heads[s] < 1 ||
            ch % c->heads[s] != 0)
            return cl_error(CL_ERR_ARG,
                            "swin: stage %d has %d blocks and %d heads for "
                            "%d channels (blocks 1..64, heads dividing the "
                            "channels)",
                            s + 1, c->depths[s], c->heads[s], ch);
    }
    if (c->embed < 1 || c->embed > 4096 || c->mlp_ratio < 1 ||
        c->mlp_ratio > 16)
        return cl_error(CL_ERR_ARG,
                        "swin: embed %d (1..4096) or mlp_ratio %d (1..16) "
                        "out of range",
                        c->embed, c->mlp_ratio);
    if (!(c->drop_path >= 0.0f && c->drop_path < 1.0f))
        return cl_error(CL_ERR_ARG, "swin: drop_path is %g, expected [0, 1)",
                        (double)c->drop_path);
    if (c->in_channels != 1 && c->in_channels != 3)
        return cl_error(CL_ERR_ARG, "swin: in_channels is %d, expected 1 or 3",
                        c->in_channels);
    if (c->num_classes < 1 || c->num_classes > MAX_CLASSES)
        return cl_error(CL_ERR_ARG, "swin: num_classes is %d, expected 1..%d",
                        c->num_classes, MAX_CLASSES);
    return CL_OK;
}

/* ---- the index buffers -------------------------------------------------- */

typedef enum ix_kind {
    IX_TO_TOKENS,  /* (B, C, L) -> (B, L, C), one element per row */
    IX_PARTITION,  /* tokens -> windows, after the cyclic shift */
    IX_REVERSE,    /* windows -> tokens, shifting back */
    IX_QKV,        /* one of q, k, v out of qkv, heads split */
    IX_HEADS,      /* (B, nW, heads, N, d) -> (B nW, N, heads d) */
    IX_BIAS_PERM,  /* (N N, heads) -> (heads, N, N), one element per row */
    IX_MASK,       /* the shifted-window mask (nW, 1, N, N), f32 */
    IX_REL_INDEX,  /* the relative position index (N N) */
    IX_MERGE_PATCH /* 2x2 neighbours -> one token of 4C */
} ix_kind;

typedef struct ix_job {
    int t; /* the buffer */
    ix_kind kind;
    int H, W, C, shift, heads, which;
} ix_job;

enum { MAX_JOBS = 160 };

typedef struct swin_b {
    cl_graph *g;
    const cl_swin_config *cfg;
    int B;
    ix_job jobs[MAX_JOBS];
    int n_jobs;
} swin_b;

/* A derived buffer of n elements filled after finalize by job j. */
static cl_status derived(swin_b *b, const char *name, cl_shape shape,
                         cl_dtype dt, ix_job j, int *t)
{
    if (b->n_jobs == MAX_JOBS)
        return cl_error(CL_ERR_LIMIT, "swin: more than %d index buffers",
                        MAX_JOBS);
    CL_TRY(cl_graph_derived_add(b->g, name, shape, dt, t));
    j.t = *t;
    b->jobs[b->n_jobs++] = j;
    return CL_OK;
}

static cl_shape shape1(int64_t n)
{
    return cl_shape_make(1, &n);
}

static cl_shape shape_n(int nd, int64_t a, int64_t b, int64_t c, int64_t d,
                        int64_t e)
{
    int64_t v[5] = {a, b, c, d, e};
    return cl_shape_make(nd, v);
}

/* Fills job j's buffer: row i of the output reads row ix[i] of the input. */
static void fill_job(const swin_b *b, const ix_job *j)
{
    const int ws = b->cfg->window, B = b->B, H = j->H, W = j->W, C = j->C;
    const int64_t L = (int64_t)H * W, N = (int64_t)ws * ws;
    const int nWw = W / ws, nW = (H / ws) * nWw, s = j->shift;
    if (j->kind == IX_MASK) {
        float *m = cl_graph_buffer(b->g, j->t);
        /* torchvision labels the rolled grid in three bands per axis
         * ([0, H - ws), [H - ws, H - s), [H - s, H)); pairs of tokens from
         * different regions may not attend to each other. */
        for (int wi = 0; wi < nW; wi++)
            for (int64_t n = 0; n < N; n++)
                for (int64_t q = 0; q < N; q++) {
                    int lab[2];
                    for (int k = 0; k < 2; k++) {
                        int64_t p = k ? q : n;
                        int h = (wi / nWw) * ws + (int)(p / ws);
                        int w = (wi % nWw) * ws + (int)(p % ws);
                        int rh = h < H - ws ? 0 : h < H - s ? 1 : 2;
                        int rw = w < W - ws ? 0 : w < W - s ? 1 : 2;
                        lab[k] = rh * 3 + rw;
                    }
                    m[((int64_t)wi * N + n) * N + q] =
                        lab[0] != lab[1] ? -100.0f : 0.0f;
                }
        return;
    }
    int64_t *ix = cl_graph_buffer_i64(b->g, j->t);
    switch (j->kind) {
    case IX_TO_TOKENS:
        for (int64_t bi = 0; bi < B; bi++)
            for (int64_t l = 0; l < L; l++)
                for (int64_t c = 0; c < C; c++)
                    ix[(bi * L + l) * C + c] = (bi * C + c) * L + l;
        break;
    case IX_PARTITION:
        for (int64_t bi = 0; bi < B; bi++)
            for (int wi = 0; wi < nW; wi++)
                for (int64_t n = 0; n < N; n++) {
                    int h = ((wi / nWw) * ws + (int)(n / ws) + s) % H;
                    int w = ((wi % nWw) * ws + (int)(n % ws) + s) % W;
                    ix[(bi * nW + wi) * N + n] = bi * L + (int64_t)h * W + w;
                }
        break;
    case IX_REVERSE:
        for (int64_t bi = 0; bi < B; bi++)
            for (int h = 0; h < H; h++)
                for (int w = 0; w < W; w++) {
                    int hr = (h - s + H) % H, wr = (w - s + W) % W;
                    int wi = (hr / ws) * nWw + wr / ws;
                    ix[bi * L + (int64_t)h * W + w] =
                        (bi * nW + wi) * N + (hr % ws) * ws + wr % ws;
                }
        break;
    case IX_QKV: /* qkv is (B nW, N, 3, heads, d) */
        for (int64_t bw = 0; bw < (int64_t)B * nW; bw++)
            for (int hd = 0; hd < j->heads; hd++)
                for (int64_t n = 0; n < N; n++)
                    ix[(bw * j->heads + hd) * N + n] =
                        ((bw * N + n) * 3 + j->which) * j->heads + hd;
        break;
    case IX_HEADS:
        for (int64_t bw = 0; bw < (int64_t)B * nW; bw++)
            for (int64_t n = 0; n < N; n++)
                for (int hd = 0; hd < j->heads; hd++)
                    ix[(bw * N + n) * j->heads + hd] =
                        (bw * j->heads + hd) * N + n;
        break;
    case IX_BIAS_PERM:
        for (int hd = 0; hd < j->heads; hd++)
            for (int64_t p = 0; p < N * N; p++)
                ix[hd * N * N + p] = p * j->heads + hd;
        break;
    case IX_REL_INDEX:
        cl_swin_relative_index(ws, ix);
        break;
    case IX_MERGE_PATCH: {
        /* torchvision concatenates x[0::2, 0::2], x[1::2, 0::2],
         * x[0::2, 1::2], x[1::2, 1::2]. */
        static const int dh[4] = {0, 1, 0, 1}, dw[4] = {0, 0, 1, 1};
        const int H2 = H / 2, W2 = W / 2;
        for (int64_t bi = 0; bi < B; bi++)
            for (int h2 = 0; h2 < H2; h2++)
                for (int w2 = 0; w2 < W2; w2++)
                    for (int k = 0; k < 4; k++)
                        ix[((bi * H2 + h2) * W2 + w2) * 4 + k] =
                            bi * L + (int64_t)(2 * h2 + dh[k]) * W + 2 * w2 +
                            dw[k];
        break;
    }
    default:
        break;
    }
}

void cl_swin_relative_index(int ws, int64_t *ix)
{
    const int64_t N = (int64_t)ws * ws;
    for (int64_t n = 0; n < N; n++)
        for (int64_t q = 0; q < N; q++) {
            int64_t dh = n / ws - q / ws + ws - 1;
            int64_t dw = n % ws - q % ws + ws - 1;
            ix[n * N + q] = dh * (2 * ws - 1) + dw;
        }
}

/* ---- the network -------------------------------------------------------- */

/* "<pre><leaf>" into buf. */
static const char *nm(char *buf, size_t cap, const char *pre, const char *leaf)
{
    snprintf(buf, cap, "%s%s", pre, leaf);
    return buf;
}

/* The buffers one stage's blocks share. */
typedef struct stage_ix {
    int part[2], rev[2]; /* without and with the shift */
    int qkv[3], heads, bias_perm, mask;
} stage_ix;

static cl_status stage_buffers(swin_b *b, int st, int H, int W, int C,
                               int heads, int shift, stage_ix *x)
{
    const int ws = b->cfg->window, B = b->B;
    const int64_t N = (int64_t)ws * ws, nW = (int64_t)(H / ws) * (W / ws);
    const int64_t rows = (int64_t)B * nW * N;
    char name[64];
    ix_job j = {0, IX_PARTITION, H, W, C, 0, heads, 0};
    for (int k = 0; k < (shift ? 2 : 1); k++) {
        j.shift = k ? shift : 0;
        j.kind = IX_PARTITION;
        snprintf(name, sizeof name, "swin.stage%d.partition%d", st, k);
        CL_TRY(derived(b, name, shape1(rows), CL_I64, j, &x->part[k]));
        j.kind = IX_REVERSE;
        snprintf(name, sizeof name, "swin.stage%d.reverse%d", st, k);
        CL_TRY(derived(b, name, shape1((int64_t)B * H * W), CL_I64, j,
                       &x->rev[k]));
    }
    j.shift = shift;
    j.kind = IX_QKV;
    for (int k = 0; k < 3; k++) {
        j.which = k;
        snprintf(name, sizeof name, "swin.stage%d.qkv%d", st, k);
        CL_TRY(derived(b, name, shape1(rows * heads), CL_I64, j, &x->qkv[k]));
    }
    j.kind = IX_HEADS;
    snprintf(name, sizeof name, "swin.stage%d.heads", st);
    CL_TRY(derived(b, name, shape1(rows * heads), CL_I64, j, &x->heads));
    j.kind = IX_BIAS_PERM;
    snprintf(name, sizeof name, "swin.stage%d.bias_perm", st);
    CL_TRY(derived(b, name, shape1(N * N * heads), CL_I64, j, &x->bias_perm));
    x->mask = -1;
    if (shift) {
        j.kind = IX_MASK;
        snprintf(name, sizeof name, "swin.stage%d.mask", st);
        CL_TRY(
            derived(b, name, shape_n(4, nW, 1, N, N, 0), CL_F32, j, &x->mask));
    }
    return CL_OK;
}

/* One block "<pre>" (e.g. "features.1.0.") on tokens x (B, H W, C). */
static cl_status block(swin_b *b, const char *pre, int x, int H, int W, int C,
                       int heads, int shifted, const stage_ix *ix, float dp,
                       int *out)
{
    cl_graph *g = b->g;
    const int ws = b->cfg->window, B = b->B, d = C / heads;
    const int64_t N = (int64_t)ws * ws, nW = (int64_t)(H / ws) * (W / ws);
    const int64_t L = (int64_t)H * W;
    char n1[96], n2[96];
    int h, t, bias, q, k, v, a;

    cl_layernorm_attr ln = cl_layernorm_attr_make(C);
    CL_TRY(cl_graph_layernorm(g, nm(n1, sizeof n1, pre, "norm1"), x, &ln, &h));

    /* The relative position bias, (heads, N, N). */
    int rel;
    ix_job rj = {0, IX_REL_INDEX, H, W, C, 0, heads, 0};
    CL_TRY(cl_graph_buffer_add(
        g, nm(n1, sizeof n1, pre, "attn.relative_position_index"),
        shape1(N * N), CL_I64, &rel));
    if (b->n_jobs == MAX_JOBS)
        return cl_error(CL_ERR_LIMIT, "swin: too many index buffers");
    rj.t = rel;
    b->jobs[b->n_jobs++] = rj;
    cl_table_gather_attr ta = {(2 * ws - 1) * (2 * ws - 1), heads};
    CL_TRY(cl_graph_table_gather(
        g, nm(n1, sizeof n1, pre, "attn.relative_position_bias"),
        nm(n2, sizeof n2, pre, "attn.relative_position_bias_table"), rel, &ta,
        &t));
    cl_shape bs = shape_n(3, heads, N, N, 0, 0);
    CL_TRY(cl_graph_row_gather(g, nm(n1, sizeof n1, pre, "attn.bias_heads"), t,
                               ix->bias_perm, 1, &bs, &bias));

    /* Windows (after the cyclic shift), qkv, heads. */
    cl_shape wsh = shape_n(3, B * nW, N, C, 0, 0);
    CL_TRY(cl_graph_row_gather(g, nm(n1, sizeof n1, pre, "attn.partition"), h,
                               ix->part[shifted], C, &wsh, &t));
    cl_linear_attr qa = {C, 3 * C, 1};
    CL_TRY(cl_graph_linear(g, nm(n1, sizeof n1, pre, "attn.qkv"), t, &qa, &t));
    cl_shape hs = shape_n(5, B, nW, heads, N, d);
    CL_TRY(cl_graph_row_gather(g, nm(n1, sizeof n1, pre, "attn.q"), t,
                               ix->qkv[0], d, &hs, &q));
    CL_TRY(cl_graph_row_gather(g, nm(n1, sizeof n1, pre, "attn.k"), t,
                               ix->qkv[1], d, &hs, &k));
    CL_TRY(cl_graph_row_gather(g, nm(n1, sizeof n1, pre, "attn.v"), t,
                               ix->qkv[2], d, &hs, &v));
    cl_matmul_attr sa = {1, 1.0f / sqrtf((float)d)};
    CL_TRY(cl_graph_matmul(g, nm(n1, sizeof n1, pre, "attn.scores"), q, k, &sa,
                           &t));
    CL_TRY(cl_graph_softmax(g, nm(n1, sizeof n1, pre, "attn.softmax"), t, bias,
                            shifted ? ix->mask : -1, &a));
    cl_matmul_attr ca = {0, 1.0f};
    CL_TRY(cl_graph_matmul(g, nm(n1, sizeof n1, pre, "attn.context"), a, v, &ca,
                           &t));
    CL_TRY(cl_graph_row_gather(g, nm(n1, sizeof n1, pre, "attn.merge_heads"), t,
                               ix->heads, d, &wsh, &t));
    cl_linear_attr pa = {C, C, 1};
    CL_TRY(cl_graph_linear(g, nm(n1, sizeof n1, pre, "attn.proj"), t, &pa, &t));
    cl_shape ts = shape_n(3, B, L, C, 0, 0);
    CL_TRY(cl_graph_row_gather(g, nm(n1, sizeof n1, pre, "attn.reverse"), t,
                               ix->rev[shifted], C, &ts, &t));
    cl_droppath_attr da = {dp};
    if (dp > 0.0f)
        CL_TRY(cl_graph_droppath(g, nm(n1, sizeof n1, pre, "stochastic_depth1"),
                                 t, &da, &t));
    CL_TRY(cl_graph_add(g, nm(n1, sizeof n1, pre, "add1"), x, t, &x));

    /* The MLP. */
    CL_TRY(cl_graph_layernorm(g, nm(n1, sizeof n1, pre, "norm2"), x, &ln, &h));
    cl_linear_attr m0 = {C, C * b->cfg->mlp_ratio, 1};
    CL_TRY(cl_graph_linear(g, nm(n1, sizeof n1, pre, "mlp.0"), h, &m0, &t));
    CL_TRY(cl_graph_gelu(g, nm(n1, sizeof n1, pre, "mlp.1"), t, &t));
    cl_linear_attr m3 = {C * b->cfg->mlp_ratio, C, 1};
    CL_TRY(cl_graph_linear(g, nm(n1, sizeof n1, pre, "mlp.3"), t, &m3, &t));
    if (dp > 0.0f)
        CL_TRY(cl_graph_droppath(g, nm(n1, sizeof n1, pre, "stochastic_depth2"),
                                 t, &da, &t));
    return cl_graph_add(g, nm(n1, sizeof n1, pre, "add2"), x, t, out);
}

/* Patch merging "features.<fi>": (B, H W, C) -> (B, H W / 4, 2C). */
static cl_status merge(swin_b *b, int fi, int x, int H, int W, int C, int *out)
{
    char pre[32], n1[96], name[64];
    int ix, t;
    snprintf(pre, sizeof pre, "features.%d.", fi);
    snprintf(name, sizeof name, "swin.merge%d", fi);
    ix_job j = {0, IX_MERGE_PATCH, H, W, C, 0, 0, 0};
    const int64_t L4 = (int64_t)(H / 2) * (W / 2);
    CL_TRY(derived(b, name, shape1((int64_t)b->B * L4 * 4), CL_I64, j, &ix));
    cl_shape ms = shape_n(3, b->B, L4, 4 * C, 0, 0);
    CL_TRY(cl_graph_row_gather(b->g, nm(n1, sizeof n1, pre, "gather"), x, ix, C,
                               &ms, &t));
    cl_layernorm_attr ln = cl_layernorm_attr_make(4 * C);
    CL_TRY(
        cl_graph_layernorm(b->g, nm(n1, sizeof n1, pre, "norm"), t, &ln, &t));
    cl_linear_attr ra = {4 * C, 2 * C, 0};
    return cl_graph_linear(b->g, nm(n1, sizeof n1, pre, "reduction"), t, &ra,
                           out);
}

static cl_status build_body(swin_b *b, int in_h, int in_w, int soft,
                            float label_smoothing)
{
    const cl_swin_config *c = b->cfg;
    cl_graph *g = b->g;
    int x, t;
    int H = in_h / c->patch, W = in_w / c->patch, C = c->embed;
    if (H < 1 || W < 1)
        return cl_error(CL_ERR_SHAPE,
                        "input %dx%d is smaller than a patch (%d)", in_h, in_w,
                        c->patch);
    /* Check every stage's grid first, so the message names the stage. */
    for (int s = 0, h = H, w = W; s < c->n_stages; s++) {
        if (h % c->window || w % c->window)
            return cl_error(CL_ERR_SHAPE,
                            "input %dx%d: stage %d's %dx%d tokens do not "
                            "divide into %dx%d windows (torchvision pads "
                            "them; classic does not build padding): use a "
                            "side divisible by %d",
                            in_h, in_w, s + 1, h, w, c->window, c->window,
                            c->patch * c->window << (c->n_stages - 1));
        if (s + 1 < c->n_stages && (h % 2 || w % 2))
            return cl_error(CL_ERR_SHAPE,
                            "input %dx%d: stage %d's %dx%d tokens are odd "
                            "for patch merging",
                            in_h, in_w, s + 1, h, w);
        h /= 2;
        w /= 2;
    }
    CL_TRY(cl_graph_input(g, c->in_channels, in_h, in_w, &x));
    cl_conv2d_attr pa =
        cl_conv2d_attr_make(c->in_channels, C, c->patch, c->patch, 0);
    pa.has_bias = 1;
    CL_TRY(cl_graph_conv2d(g, "features.0.0", x, &pa, &t));
    int tok;
    ix_job tj = {0, IX_TO_TOKENS, H, W, C, 0, 0, 0};
    CL_TRY(derived(b, "swin.to_tokens", shape1((int64_t)b->B * H * W * C),
                   CL_I64, tj, &tok));
    cl_shape ts = shape_n(3, b->B, (int64_t)H * W, C, 0, 0);
    CL_TRY(cl_graph_row_gather(g, "features.0.1", t, tok, 1, &ts, &t));
    cl_layernorm_attr ln = cl_layernorm_attr_make(C);
    CL_TRY(cl_graph_layernorm(g, "features.0.2", t, &ln, &x));

    int total = 0, id = 0;
    for (int s = 0; s < c->n_stages; s++)
        total += c->depths[s];
    for (int s = 0; s < c->n_stages; s++) {
        int shift = c->window < H || c->window < W ? c->window / 2 : 0;
        stage_ix ix;
        CL_TRY(stage_buffers(b, s + 1, H, W, C, c->heads[s], shift, &ix));
        for (int k = 0; k < c->depths[s]; k++, id++) {
            char pre[32];
            snprintf(pre, sizeof pre, "features.%d.%d.", 2 * s + 1, k);
            float dp = total > 1 ? c->drop_path * (float)id / (float)(total - 1)
                                 : 0.0f;
            CL_TRY(block(b, pre, x, H, W, C, c->heads[s], shift && (k % 2), &ix,
                         dp, &x));
        }
        if (s + 1 < c->n_stages) {
            CL_TRY(merge(b, 2 * s + 2, x, H, W, C, &x));
            H /= 2;
            W /= 2;
            C *= 2;
        }
    }
    cl_layernorm_attr fl = cl_layernorm_attr_make(C);
    CL_TRY(cl_graph_layernorm(g, "norm", x, &fl, &x));
    CL_TRY(cl_graph_token_meanpool(g, "avgpool", x, &x));
    g->features = x;
    cl_linear_attr ha = {C, c->num_classes, 1};
    CL_TRY(cl_graph_linear(g, "head", x, &ha, &x));
    cl_softmax_ce_attr sa = {c->num_classes, label_smoothing};
    CL_TRY(cl_graph_softmax_ce(g, x, &sa, soft));
    CL_TRY(cl_graph_finalize(g));
    for (int i = 0; i < b->n_jobs; i++)
        fill_job(b, &b->jobs[i]);
    return CL_OK;
}

cl_status cl_swin_build(cl_graph *g, const cl_swin_config *cfg, int in_h,
                        int in_w, int soft_targets, float label_smoothing)
{
    CL_TRY(cl_swin_check_config(cfg));
    if (g->n_nodes != 0 || g->finalized)
        return cl_error(CL_ERR_ARG, "%s: the graph is not empty", cfg->name);
    if (!(label_smoothing >= 0.0f && label_smoothing < 1.0f))
        return cl_error(CL_ERR_ARG,
                        "%s: label_smoothing is %g, expected 0 <= s < 1",
                        cfg->name, (double)label_smoothing);
    swin_b *b = cl_alloc(sizeof *b, "swin builder");
    if (!b)
        return CL_ERR_NOMEM;
    memset(b, 0, sizeof *b);
    b->g = g;
    b->cfg = cfg;
    b->B = g->batch;
    cl_status s = build_body(b, in_h, in_w, soft_targets, label_smoothing);
    cl_free(b);
    if (s != CL_OK)
        return cl_error_wrap(s, "%s: ", cfg->name);
    return CL_OK;
}

/* ---- initialisation ----------------------------------------------------- */

static void init_tensor(cl_graph *g, int t, uint64_t seed, int normal,
                        double scale)
{
    float *p = cl_graph_param(g, t);
    int64_t n = cl_graph_numel(g, t);
    cl_rng r;
    cl_rng_init(&r, seed, cl_rng_stream_id(INIT_STREAM_TAG, t, 0));
    for (int64_t k = 0; k < n; k++)
        p[k] = (float)(normal ? scale * cl_rng_normal(&r)
                              : (2.0 * cl_rng_uniform_f64(&r) - 1.0) * scale);
}

static void fill(float *p, int64_t n, float v)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = v;
}

cl_status cl_swin_init(cl_graph *g, const cl_swin_config *cfg, uint64_t seed)
{
    CL_TRY(cl_swin_check_config(cfg));
    if (!g->finalized)
        return cl_error(CL_ERR_ARG, "%s init: the graph is not finalized",
                        cfg->name);
    for (int i = 0; i < g->n_nodes; i++) {
        const cl_node *n = &g->nodes[i];
        switch (n->op) {
        case CL_OP_CONV2D: {
            /* PyTorch's Conv2d default: weight and bias both uniform
             * +-1/sqrt(fan_in). */
            const cl_conv2d_attr *a = &n->attr.conv2d;
            double bound =
                1.0 / sqrt((double)a->in_ch / a->groups * a->kh * a->kw);
            for (int j = 0; j < n->n_param; j++)
                init_tensor(g, n->param[j], seed, 0, bound);
            break;
        }
        case CL_OP_LINEAR:
            /* trunc_normal_(std=0.02) with torch's absolute bounds +-2:
             * 100 standard deviations, so a plain normal. */
            init_tensor(g, n->param[0], seed, 1, 0.02);
            if (n->n_param > 1)
                fill(cl_graph_param(g, n->param[1]),
                     cl_graph_numel(g, n->param[1]), 0.0f);
            break;
        case CL_OP_TABLE_GATHER:
            init_tensor(g, n->param[0], seed, 1, 0.02);
            break;
        case CL_OP_LAYERNORM:
            fill(cl_graph_param(g, n->param[0]), cl_graph_numel(g, n->param[0]),
                 1.0f);
            fill(cl_graph_param(g, n->param[1]), cl_graph_numel(g, n->param[1]),
                 0.0f);
            break;
        default:
            if (n->n_param > 0)
                return cl_error(CL_ERR_UNSUPPORTED,
                                "%s init: %s: op %s has parameters but no "
                                "initialisation",
                                cfg->name, n->name, cl_op_name(n->op));
            break;
        }
    }
    memset(g->grads, 0, g->n_param_floats * sizeof(float));
    return CL_OK;
}
