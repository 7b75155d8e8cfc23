/* The static graph: built once per (model, batch, input size, precision),
 * then planned on a backend, then run step after step without allocating.
 *
 * The graph holds what every backend shares: the nodes in topological order,
 * the logical shape of every tensor (rank 1..5; the image batch is NCHW,
 * other tensors' leading dimensions need not be the batch), and the flat
 * arenas of parameters, gradients and buffers (BN running statistics, f32;
 * index buffers, i64) in the canonical layouts of a torchvision state_dict
 * (OIHW conv weights, (out, in) linear weights).  Activations and their
 * gradients belong to the backend, which lays them out as it likes. */
#ifndef CL_GRAPH_GRAPH_H
#define CL_GRAPH_GRAPH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "classic/status.h"
#include "ops/ops.h"
#include "tensor/tensor.h"

typedef enum cl_gtensor_kind {
    CL_GT_INPUT = 0, /* the image batch (N, C, H, W) */
    CL_GT_LABELS,    /* integer labels (N), i32 */
    CL_GT_TARGETS,   /* soft targets (N, K), e.g. MixUp / CutMix */
    CL_GT_ACT,       /* an activation made by a node */
    CL_GT_PARAM,     /* learnable: view into the param and grad arenas */
    CL_GT_BUFFER,    /* state that is not learned: BN running stats, indices */
    CL_GT_LOSS       /* the scalar mean loss */
} cl_gtensor_kind;

/* Parameters are tagged so the optimizer can treat groups differently
 * (weight-decay exemption of BN and bias, a backbone lr multiplier). */
enum {
    CL_PARAM_WEIGHT = 1, /* conv / linear weights */
    CL_PARAM_BIAS = 2,
    CL_PARAM_BN = 4,    /* BN and LayerNorm gamma and beta */
    CL_PARAM_HEAD = 8,  /* the classifier head (fc) */
    CL_PARAM_EMBED = 16 /* a transformer embedding table (table_gather's) */
};

typedef struct cl_gtensor {
    /* params and buffers: state_dict name ("layer1.0.bn1.weight") */
    char name[64];
    cl_gtensor_kind kind;
    cl_shape shape;  /* logical NCHW / OIHW shape */
    cl_dtype dtype;  /* F32; a BUFFER may be I64 (cl_graph_buffer_i64) */
    int producer;    /* node index, or -1 */
    int n_consumers; /* nodes that read it */
    int last_use;    /* index of the last node reading it in forward, or -1 */
    /* PARAM and BUFFER only: offsets (in floats) into the arenas; an I64
     * buffer takes two floats' room per element. */
    size_t offset;
    int param_flags; /* CL_PARAM_* */
    /* BUFFER only: derived from the graph's shapes by the model that built
     * it (gather indices, attention masks; they depend on the batch), so
     * neither saved nor loaded.  cl_gtensor_saved says what is. */
    int derived;
} cl_gtensor;

/* Non-zero for the tensors a checkpoint holds: parameters and buffers that
 * are not derived. */
static inline int cl_gtensor_saved(const cl_gtensor *t)
{
    return t->kind == CL_GT_PARAM || (t->kind == CL_GT_BUFFER && !t->derived);
}

typedef union cl_op_attr {
    cl_conv2d_attr conv2d;
    cl_batchnorm2d_attr batchnorm2d;
    cl_maxpool2d_attr maxpool2d;
    cl_linear_attr linear;
    cl_softmax_ce_attr softmax_ce;
    cl_matmul_attr matmul;
    cl_table_gather_attr table_gather;
    cl_row_gather_attr row_gather;
    cl_droppath_attr droppath;
    cl_layernorm_attr layernorm;
} cl_op_attr;

enum { CL_NODE_MAX_IN = 3, CL_NODE_MAX_PARAM = 2, CL_NODE_MAX_BUF = 2 };

typedef struct cl_node {
    cl_op_kind op;
    char name[64]; /* module path: "layer1.0.conv1" */
    cl_op_attr attr;
    /* Tensor indices.  conv2d/linear: in[0]=x, param = {weight, bias?};
     * batchnorm2d: in[0]=x, param = {gamma, beta}, buf = {running_mean,
     * running_var}; add: in = {a, b}; matmul: in = {a, b}; softmax_ce:
     * in = {logits, labels or targets}; table_gather: no input (n_in 0),
     * param = {table}, buf = {index}; layernorm: in[0]=x, param =
     * {gamma, beta}; softmax: in[0]=x, in[1]=bias when it has one (n_in 1
     * or 2), buf[0]=mask when it has one (n_buf 0 or 1); row_gather:
     * in[0]=x, buf = {index}; others: in[0]=x.  Which inputs take a
     * gradient is the op's (cl_op_grad_inputs). */
    int in[CL_NODE_MAX_IN];
    int n_in;
    int param[CL_NODE_MAX_PARAM];
    int n_param;
    int buf[CL_NODE_MAX_BUF];
    int n_buf;
    int out;
    /* batchnorm2d: the "<name>.num_batches_tracked" buffer (shape (1), a
     * float count of training forwards, as torchvision's state_dict has
     * one); -1 for other ops.  Kept out of buf[] so n_buf stays 2. */
    int num_batches;
} cl_node;

typedef struct cl_backend cl_backend;

/* The scales of an int8 model (a file `classic quantize` wrote; docs/
 * deploy.md): a value v of an activation or weight stands for the integer
 * q = round(v / scale), clamped to its type.  The graph's weights are
 * then the dequantized ones (q * scale, BN folded in first and left as
 * the identity plus a bias), so f32 runs the same numbers the int8 plan
 * quantizes back exactly. */
typedef struct cl_graph_quant {
    /* Per tensor: the scale of its int8 copy, 0 where no int8 node reads
     * it; act_signed 1 for s8 (it takes negative values), 0 for u8. */
    float *act_scale;
    unsigned char *act_signed;
    /* Per conv and linear node: w_off[node] indexes w_scale, the scale of
     * each output channel of its s8 weights (out_ch or out_features of
     * them), all 0 where the node stays in floating point; -1 for other
     * ops. */
    int *w_off;
    float *w_scale;
    size_t n_w_scale;
} cl_graph_quant;

typedef struct cl_graph {
    cl_node *nodes;
    int n_nodes, cap_nodes;
    cl_gtensor *tensors;
    int n_tensors, cap_tensors;

    /* Well-known tensors (indices, -1 when absent). */
    int input, labels, targets, logits, loss, features;

    int batch;       /* N */
    int num_classes; /* K */

    /* Arenas, allocated by cl_graph_finalize.  params and grads have the
     * same layout: one tensor after another, each 64-byte aligned. */
    float *params;
    float *grads;
    size_t n_param_floats; /* arena length, with alignment padding */
    int64_t n_param_elems; /* learnable elements (what "parameters" counts) */
    float *buffers;
    size_t n_buffer_floats;
    int finalized;
    /* The int8 scales (cl_graph_quant_init), NULL for f32 weights. */
    cl_graph_quant *quant;
} cl_graph;

/* ---- building ----------------------------------------------------------- */
cl_status cl_graph_init(cl_graph *g, int batch);
void cl_graph_free(cl_graph *g);

/* Each returns CL_OK and the new tensor's index in *out, or an error naming
 * the node and the shape at fault.  `name` is the module path. */
cl_status cl_graph_input(cl_graph *g, int c, int h, int w, int *out);
cl_status cl_graph_conv2d(cl_graph *g, const char *name, int x,
                          const cl_conv2d_attr *a, int *out);
cl_status cl_graph_batchnorm2d(cl_graph *g, const char *name, int x,
                               const cl_batchnorm2d_attr *a, int *out);
cl_status cl_graph_relu(cl_graph *g, const char *name, int x, int *out);
cl_status cl_graph_maxpool2d(cl_graph *g, const char *name, int x,
                             const cl_maxpool2d_attr *a, int *out);
cl_status cl_graph_global_avgpool(cl_graph *g, const char *name, int x,
                                  int *out);
cl_status cl_graph_linear(cl_graph *g, const char *name, int x,
                          const cl_linear_attr *a, int *out);
cl_status cl_graph_add(cl_graph *g, const char *name, int a, int b, int *out);
/* alpha a b (alpha a b^T with attr->trans_b) over the last two dimensions
 * of two activations (cl_matmul_infer; attr->alpha 1 for a plain
 * product); both take gradients. */
cl_status cl_graph_matmul(cl_graph *g, const char *name, int a, int b,
                          const cl_matmul_attr *attr, int *out);
/* A node that reads no activation: the rows of a new learnable table
 * (attr->rows, attr->cols), state_dict name `table`, picked by `index`,
 * an I64 buffer (cl_graph_buffer_add) the model fills after finalize;
 * out is (index's shape, cols).  The table takes its gradient. */
cl_status cl_graph_table_gather(cl_graph *g, const char *name,
                                const char *table, int index,
                                const cl_table_gather_attr *attr, int *out);
/* Rows of activation x picked by `index`, an I64 buffer of shape (M)
 * (cl_graph_buffer_add) that the model fills after finalize and every
 * forward checks: x viewed as rows of `cols` floats, out (*out_shape,
 * numel M * cols) as M such rows, row i = x's row index[i]
 * (cl_row_gather_infer).  x takes the gradient (rows summed back). */
cl_status cl_graph_row_gather(cl_graph *g, const char *name, int x,
                              int index_buf, int cols,
                              const cl_shape *out_shape, int *out);
/* Stochastic depth per sample of x (N, ...) with drop probability
 * attr->p in training, from the node's random stream; the identity in
 * evaluation. */
cl_status cl_graph_droppath(cl_graph *g, const char *name, int x,
                            const cl_droppath_attr *attr, int *out);
/* The mean over L of x (B, L, C) -> (B, C). */
cl_status cl_graph_token_meanpool(cl_graph *g, const char *name, int x,
                                  int *out);
/* LayerNorm over the last dimension of x (cl_layernorm_infer), with new
 * params "<name>.weight" (gamma) and "<name>.bias" (beta), (features),
 * tagged CL_PARAM_BN. */
cl_status cl_graph_layernorm(cl_graph *g, const char *name, int x,
                             const cl_layernorm_attr *a, int *out);
/* Exact GELU of x, any rank. */
cl_status cl_graph_gelu(cl_graph *g, const char *name, int x, int *out);
/* softmax over the last axis of x + bias + mask (cl_softmax_infer): bias
 * an activation that takes a gradient, mask_buf an F32 buffer
 * (cl_graph_buffer_add) that takes none; -1 for either means none. */
cl_status cl_graph_softmax(cl_graph *g, const char *name, int x, int bias,
                           int mask_buf, int *out);
/* Adds the loss over logits; soft != 0 takes (N, K) targets instead of
 * integer labels.  Sets g->logits, g->labels or g->targets, g->loss. */
cl_status cl_graph_softmax_ce(cl_graph *g, int logits,
                              const cl_softmax_ce_attr *a, int soft);

/* A buffer of the model that no node's builder makes: state that is not
 * learned, saved and loaded by name ("layers.0.blocks.0.attn.
 * relative_position_index"), dtype CL_F32 or CL_I64 (written as int64 in
 * checkpoints).  Zero after finalize until the model fills it; a node
 * reads it through its buf[] (the builder that takes it). */
cl_status cl_graph_buffer_add(cl_graph *g, const char *name, cl_shape shape,
                              cl_dtype dtype, int *out);
/* As cl_graph_buffer_add, for a buffer the model derives from the graph's
 * shapes and fills after finalize (a gather index, a mask): not saved in
 * checkpoints, not loaded, never compared with a file. */
cl_status cl_graph_derived_add(cl_graph *g, const char *name, cl_shape shape,
                               cl_dtype dtype, int *out);
/* Copies the saved tensors (cl_gtensor_saved) of src into dst, a graph the
 * same builder made for another batch size: their parameter arenas match,
 * their buffer arenas need not.  CL_ERR_ARG naming the first tensor that
 * differs in name or shape. */
cl_status cl_graph_copy_state(cl_graph *dst, const cl_graph *src);

/* ---- int8 scales ----------------------------------------------------------
 */
/* Gives finalized g an int8 record with every scale 0 (no node int8). */
cl_status cl_graph_quant_init(cl_graph *g);
/* Whether node i runs in int8: a conv or linear whose weights have scales
 * and whose input has one. */
int cl_graph_quant_node(const cl_graph *g, int i);
/* Node i's weight scales (one per output channel), NULL for other ops or
 * without a record. */
float *cl_graph_quant_wscale(const cl_graph *g, int i);

/* Allocates the arenas (zeroed) and fixes consumers / last uses.  After
 * this, no node may be added. */
cl_status cl_graph_finalize(cl_graph *g);

/* ---- arenas ------------------------------------------------------------ */
float *cl_graph_param(const cl_graph *g, int tensor);
float *cl_graph_grad(const cl_graph *g, int tensor);
/* An F32 buffer. */
float *cl_graph_buffer(const cl_graph *g, int tensor);
/* An I64 buffer. */
int64_t *cl_graph_buffer_i64(const cl_graph *g, int tensor);
/* Index of the param or buffer tensor with this state_dict name, or -1. */
int cl_graph_find(const cl_graph *g, const char *name);

/* ---- helpers ----------------------------------------------------------- */
/* Elements of tensor t. */
int64_t cl_graph_numel(const cl_graph *g, int t);
/* Adds one to every BN's num_batches_tracked.  A backend calls it once per
 * training forward (as PyTorch counts), whatever it runs BN with. */
void cl_graph_count_batch(cl_graph *g);
/* Forward multiply-adds of conv2d, linear and matmul nodes, per image. */
int64_t cl_graph_macs(const cl_graph *g);
/* A table of the nodes: name, op, output shape, parameters; then totals. */
void cl_graph_print_layers(const cl_graph *g, FILE *f);

#endif
