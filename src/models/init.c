/* torchvision's ResNet initialisation on a finalized graph, one RNG stream
 * per tensor so the values depend on the seed alone. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "models/resnet.h"

/* Purpose tag mixed into the stream ids of parameter init. */
#define INIT_STREAM_TAG 0x696e6974u /* "init" */

static void fill(float *p, int64_t n, float v)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = v;
}

/* Non-zero when the BN node called name is the last of a residual block
 * ("layerS.B.bn2" for BasicBlock, "layerS.B.bn3" for Bottleneck). */
static int is_last_block_bn(const char *name, int bottleneck)
{
    if (strncmp(name, "layer", 5) != 0)
        return 0;
    const char *dot = strrchr(name, '.');
    return dot && strcmp(dot + 1, bottleneck ? "bn3" : "bn2") == 0;
}

/* What every op's init reads: the seed, and for BN which gammas start at
 * zero. */
typedef struct init_ctx {
    uint64_t seed;
    int zero_init_residual;
    int bottleneck;
} init_ctx;

typedef void (*init_fn)(cl_graph *g, const cl_node *n, const init_ctx *c);

/* kaiming_normal_(mode="fan_out", nonlinearity="relu"): PyTorch's fan_out
 * is size(0) * kh * kw, whatever the groups. */
static void init_conv2d(cl_graph *g, const cl_node *n, const init_ctx *c)
{
    const cl_conv2d_attr *a = &n->attr.conv2d;
    double std = sqrt(2.0 / ((double)a->out_ch * a->kh * a->kw));
    for (int j = 0; j < n->n_param; j++) {
        int t = n->param[j];
        float *p = cl_graph_param(g, t);
        int64_t ne = cl_graph_numel(g, t);
        if (j == 0) {
            cl_rng r;
            cl_rng_init(&r, c->seed, cl_rng_stream_id(INIT_STREAM_TAG, t, 0));
            for (int64_t k = 0; k < ne; k++)
                p[k] = (float)(std * cl_rng_normal(&r));
        } else {
            fill(p, ne, 0.0f); /* a conv bias, if any */
        }
    }
}

static void init_batchnorm2d(cl_graph *g, const cl_node *n, const init_ctx *c)
{
    int ch = n->attr.batchnorm2d.channels;
    float gamma =
        c->zero_init_residual && is_last_block_bn(n->name, c->bottleneck)
            ? 0.0f
            : 1.0f;
    fill(cl_graph_param(g, n->param[0]), ch, gamma);
    fill(cl_graph_param(g, n->param[1]), ch, 0.0f);
    fill(cl_graph_buffer(g, n->buf[0]), ch, 0.0f);
    fill(cl_graph_buffer(g, n->buf[1]), ch, 1.0f);
    if (n->num_batches >= 0)
        cl_graph_buffer(g, n->num_batches)[0] = 0.0f;
}

/* nn.Linear's reset_parameters: kaiming_uniform_(a=sqrt(5)) on the weight
 * and uniform(+-1/sqrt(fan_in)) on the bias, both amounting to the same
 * bound. */
static void init_linear(cl_graph *g, const cl_node *n, const init_ctx *c)
{
    double bound = 1.0 / sqrt((double)n->attr.linear.in_features);
    for (int j = 0; j < n->n_param; j++) {
        int t = n->param[j];
        float *p = cl_graph_param(g, t);
        int64_t ne = cl_graph_numel(g, t);
        cl_rng r;
        cl_rng_init(&r, c->seed, cl_rng_stream_id(INIT_STREAM_TAG, t, 0));
        for (int64_t k = 0; k < ne; k++)
            p[k] = (float)((2.0 * cl_rng_uniform_f64(&r) - 1.0) * bound);
    }
}

/* Swin's relative position bias table: trunc_normal_(std=0.02), whose
 * bounds (+-2, absolute) are 100 standard deviations away, so a plain
 * normal.  The index buffer is the model's to fill. */
static void init_table_gather(cl_graph *g, const cl_node *n, const init_ctx *c)
{
    int t = n->param[0];
    float *p = cl_graph_param(g, t);
    int64_t ne = cl_graph_numel(g, t);
    cl_rng r;
    cl_rng_init(&r, c->seed, cl_rng_stream_id(INIT_STREAM_TAG, t, 0));
    for (int64_t k = 0; k < ne; k++)
        p[k] = (float)(0.02 * cl_rng_normal(&r));
}

/* torch.nn.LayerNorm's reset_parameters: gamma 1, beta 0. */
static void init_layernorm(cl_graph *g, const cl_node *n, const init_ctx *c)
{
    (void)c;
    int ch = n->attr.layernorm.features;
    fill(cl_graph_param(g, n->param[0]), ch, 1.0f);
    fill(cl_graph_param(g, n->param[1]), ch, 0.0f);
}

/* softmax's mask buffer (Swin's shifted-window mask) is the model's to
 * fill, as the gather's index is. */
static void init_softmax(cl_graph *g, const cl_node *n, const init_ctx *c)
{
    (void)g;
    (void)n;
    (void)c;
}

/* A row gather's one buffer is its index, the model's to fill after
 * finalize: nothing to draw, but not an op without initialisation. */
static void init_row_gather(cl_graph *g, const cl_node *n, const init_ctx *c)
{
    (void)g;
    (void)n;
    (void)c;
}

/* Per op; NULL for ops with neither parameters nor buffers. */
static const init_fn op_init[CL_OP_COUNT] = {
    [CL_OP_CONV2D] = init_conv2d,
    [CL_OP_BATCHNORM2D] = init_batchnorm2d,
    [CL_OP_LINEAR] = init_linear,
    [CL_OP_TABLE_GATHER] = init_table_gather,
    [CL_OP_ROW_GATHER] = init_row_gather,
    [CL_OP_LAYERNORM] = init_layernorm,
    [CL_OP_SOFTMAX] = init_softmax,
};
CL_OP_TABLE_CHECK(op_init, 16);

cl_status cl_resnet_init(cl_graph *g, const cl_resnet_config *cfg,
                         uint64_t seed)
{
    CL_TRY(cl_resnet_check_config(cfg));
    if (!g->finalized)
        return cl_error(CL_ERR_ARG, "resnet init: the graph is not finalized");
    const init_ctx c = {seed, cfg->zero_init_residual,
                        cl_resnet_expansion(cfg->depth) == 4};
    for (int i = 0; i < g->n_nodes; i++) {
        const cl_node *n = &g->nodes[i];
        if (op_init[n->op])
            op_init[n->op](g, n, &c);
        else if (n->n_param > 0 || n->n_buf > 0)
            return cl_error(CL_ERR_UNSUPPORTED,
                            "resnet init: %s: op %s has parameters but no "
                            "initialisation",
                            n->name, cl_op_name(n->op));
    }
    memset(g->grads, 0, g->n_param_floats * sizeof(float));
    return CL_OK;
}
