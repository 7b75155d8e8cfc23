/* Ops: attributes, shape rules and reference kernels (plain C, forward and
 * backward side by side).  The reference kernels are the oracle every other
 * backend is held against; nothing here knows of oneDNN, graphs or models.
 *
 * Conventions (as llm.c): arguments are outputs, saved-for-backward, inputs,
 * weights, then sizes.  Activations are NCHW f32, conv weights OIHW,
 * linear weights (out, in) as PyTorch.  Backward kernels OVERWRITE their
 * gradient outputs (the graph sums when a tensor has several consumers); any
 * gradient output pointer may be NULL when that gradient is not wanted. */
#ifndef CL_OPS_OPS_H
#define CL_OPS_OPS_H

#include <stdint.h>

#include "classic/status.h"
#include "core/rng.h"
#include "tensor/tensor.h"

typedef enum cl_op_kind {
#define CL_OP(NAME, stem, grads) CL_OP_##NAME,
#include "ops/ops.def"
#undef CL_OP
    CL_OP_COUNT
} cl_op_kind;

/* "conv2d" for CL_OP_CONV2D. */
const char *cl_op_name(cl_op_kind k);
/* The inputs of an op that take a gradient in backward: bit k for input k
 * (ops.def's third column; 0 for an unknown op). */
unsigned cl_op_grad_inputs(cl_op_kind k);

/* Every table indexed by op (the reference kernels, oneDNN planning, ONNX
 * export, init, MACs) is declared [CL_OP_COUNT] and checked with this
 * macro, which also names the op count the table was written for (as
 * ggml's tables check GGML_OP_COUNT): a line added to ops.def stops the
 * build at every table until each has been given its entry (or a NULL
 * that the consumer reports) and its count raised. */
#define CL_OP_TABLE_CHECK(table, count)                                        \
    _Static_assert(sizeof(table) / sizeof((table)[0]) == CL_OP_COUNT &&        \
                       CL_OP_COUNT == (count),                                 \
                   #table ": ops.def changed; give the new op its entry here " \
                          "and raise the count")

/* ---- conv2d ------------------------------------------------------------ */
typedef struct cl_conv2d_attr {
    int in_ch, out_ch; /* in_ch and out_ch divisible by groups */
    int kh, kw;        /* kernel */
    int sh, sw;        /* stride */
    int ph, pw;        /* zero padding, each side */
    int dh, dw;        /* dilation (1 = dense) */
    int groups;
    int has_bias;
} cl_conv2d_attr;

/* A dense square conv (groups 1, dilation 1, no bias). */
cl_conv2d_attr cl_conv2d_attr_make(int in_ch, int out_ch, int k, int stride,
                                   int pad);
/* Checks attr and x's shape (N, in_ch, H, W); writes y's (N, out_ch, OH, OW).
 * CL_ERR_SHAPE naming the bad field otherwise. */
cl_status cl_conv2d_infer(const cl_conv2d_attr *a, const cl_shape *x,
                          cl_shape *y);
/* y: (N,out_ch,OH,OW)  x: (N,in_ch,H,W)  w: (out_ch,in_ch/groups,kh,kw)
 * b: (out_ch) or NULL */
void cl_conv2d_forward(float *y, const float *x, const float *w, const float *b,
                       int N, int H, int W, const cl_conv2d_attr *a);
void cl_conv2d_backward(float *dx, float *dw, float *db, const float *dy,
                        const float *x, const float *w, int N, int H, int W,
                        const cl_conv2d_attr *a);

/* ---- batchnorm2d ------------------------------------------------------- */
/* momentum follows PyTorch: running = (1 - momentum) * running +
 * momentum * batch_stat, default 0.1.  MindSpore's BatchNorm2d momentum is
 * the weight of the OLD value (default 0.9): MindSpore m corresponds to
 * PyTorch 1 - m.  Running variance uses the unbiased batch variance (n-1),
 * normalisation the biased one, as both frameworks do. */
typedef struct cl_batchnorm2d_attr {
    int channels;
    float momentum;
    float eps;
} cl_batchnorm2d_attr;

cl_batchnorm2d_attr cl_batchnorm2d_attr_make(int channels);
cl_status cl_batchnorm2d_infer(const cl_batchnorm2d_attr *a, const cl_shape *x,
                               cl_shape *y);
/* Training: normalises with batch statistics, saves mean and invstd (C) for
 * backward, updates running_mean/running_var (C) in place.
 * y, x: (N,C,HW)  gamma, beta: (C) */
void cl_batchnorm2d_forward_train(float *y, float *mean, float *invstd,
                                  float *running_mean, float *running_var,
                                  const float *x, const float *gamma,
                                  const float *beta, int N, int C, int HW,
                                  const cl_batchnorm2d_attr *a);
/* Inference: normalises with the running statistics. */
void cl_batchnorm2d_forward_infer(float *y, const float *x, const float *gamma,
                                  const float *beta, const float *running_mean,
                                  const float *running_var, int N, int C,
                                  int HW, const cl_batchnorm2d_attr *a);
/* Backward of the training forward. */
void cl_batchnorm2d_backward(float *dx, float *dgamma, float *dbeta,
                             const float *dy, const float *x, const float *mean,
                             const float *invstd, const float *gamma, int N,
                             int C, int HW);

/* ---- relu -------------------------------------------------------------- */
/* y may alias x (in place).  Backward reads y (> 0 where x > 0), so it also
 * works in place: dx may alias dy. */
void cl_relu_forward(float *y, const float *x, int64_t n);
void cl_relu_backward(float *dx, const float *dy, const float *y, int64_t n);

/* ---- maxpool2d --------------------------------------------------------- */
typedef struct cl_maxpool2d_attr {
    int kh, kw, sh, sw, ph, pw; /* padding counts as -infinity */
} cl_maxpool2d_attr;

cl_status cl_maxpool2d_infer(const cl_maxpool2d_attr *a, const cl_shape *x,
                             cl_shape *y);
/* idx (N,C,OH,OW) receives the flat h*W+w argmax inside each input plane; it
 * may be NULL, and backward then recomputes the argmax from x.  Ties go to
 * the first maximum in row-major window order. */
void cl_maxpool2d_forward(float *y, int32_t *idx, const float *x, int N, int C,
                          int H, int W, const cl_maxpool2d_attr *a);
void cl_maxpool2d_backward(float *dx, const float *dy, const int32_t *idx,
                           const float *x, int N, int C, int H, int W,
                           const cl_maxpool2d_attr *a);

/* ---- global average pool ------------------------------------------------ */
/* y: (N,C)  x: (N,C,HW) */
void cl_global_avgpool_forward(float *y, const float *x, int N, int C, int HW);
void cl_global_avgpool_backward(float *dx, const float *dy, int N, int C,
                                int HW);

/* ---- linear ------------------------------------------------------------ */
typedef struct cl_linear_attr {
    int in_features, out_features;
    int has_bias;
} cl_linear_attr;

/* Applies over the last dimension: N is the product of the leading ones.
 * y: (N,out)  x: (N,in)  w: (out,in)  b: (out) or NULL */
void cl_linear_forward(float *y, const float *x, const float *w, const float *b,
                       int N, const cl_linear_attr *a);
void cl_linear_backward(float *dx, float *dw, float *db, const float *dy,
                        const float *x, const float *w, int N,
                        const cl_linear_attr *a);

/* ---- add (residual) ------------------------------------------------------ */
/* y may alias a or b. */
void cl_add_forward(float *y, const float *a, const float *b, int64_t n);
/* da and db receive dy (either may be NULL or alias dy). */
void cl_add_backward(float *da, float *db, const float *dy, int64_t n);

/* ---- matmul (batched) ---------------------------------------------------- */
/* y = a b, or a b^T with trans_b, over the last two dimensions, for every
 * index of the leading ones (attention's q k^T and attn v).  a is
 * (..., M, K) of rank 2..5; b is (..., K, N) ((..., N, K) with trans_b)
 * with a's leading dimensions, or 2-d: one matrix for every index.
 * y is (..., M, N). */
typedef struct cl_matmul_attr {
    int trans_b;
    /* y = alpha (a b): attention's head_dim^-0.5 on q k^T.  Always given
     * (1 for a plain product): the shape rule refuses 0, so an attr left
     * zeroed is an error rather than a silent all-zero output. */
    float alpha;
} cl_matmul_attr;

cl_status cl_matmul_infer(const cl_matmul_attr *at, const cl_shape *a,
                          const cl_shape *b, cl_shape *y);
/* The sizes of one call: B matrices of (M,K) x (K,N); b_batched 0 when b
 * is one matrix for all B (its gradient then sums over them). */
typedef struct cl_matmul_dims {
    int B, M, K, N;
    int b_batched;
} cl_matmul_dims;

/* The kernel sizes of a valid (cl_matmul_infer) pair of shapes. */
cl_matmul_dims cl_matmul_dims_of(const cl_matmul_attr *at, const cl_shape *a,
                                 const cl_shape *b);
/* y: (B,M,N)  a: (B,M,K)  b: (B or 1,K,N), (B or 1,N,K) with trans_b.
 * Sums in double, in order of k, then scales by alpha. */
void cl_matmul_forward(float *y, const float *a, const float *b,
                       const cl_matmul_dims *d, const cl_matmul_attr *at);
/* da = alpha dy b^T (alpha dy b with trans_b); db = alpha a^T dy
 * (alpha dy^T a with trans_b), summed over B when b is one matrix.  Either
 * gradient may be NULL. */
void cl_matmul_backward(float *da, float *db, const float *dy, const float *a,
                        const float *b, const cl_matmul_dims *d,
                        const cl_matmul_attr *at);

/* ---- table_gather --------------------------------------------------------
 */
/* Rows of a learnable table picked by a fixed integer index: Swin's
 * relative position bias, table (T, heads) and index (L*L) giving
 * (L*L, heads).  A node that reads a parameter and a buffer and no
 * activation. */
typedef struct cl_table_gather_attr {
    int rows, cols; /* the table's shape */
} cl_table_gather_attr;

/* index of rank 1..4 (any positive sizes) -> y: index's shape + (cols). */
cl_status cl_table_gather_infer(const cl_table_gather_attr *a,
                                const cl_shape *index, cl_shape *y);
/* CL_ERR_ARG naming the position when an index is outside [0, rows). */
cl_status cl_table_gather_check(const int64_t *index, int64_t M, int rows);
/* y: (M,cols)  table: (rows,cols)  index: (M), checked. */
void cl_table_gather_forward(float *y, const float *table, const int64_t *index,
                             int64_t M, int cols);
/* dtable (rows,cols), overwritten: the rows of dy summed at their index
 * (in order of position, so repeated indices sum the same on any thread
 * count). */
void cl_table_gather_backward(float *dtable, const float *dy,
                              const int64_t *index, int64_t M, int rows,
                              int cols);

/* ---- layernorm ------------------------------------------------------------
 */
/* torch.nn.LayerNorm(features): normalises each row over the LAST
 * dimension, y = (x - mean) * rstd * gamma + beta with the biased
 * variance, rstd = 1 / sqrt(var + eps). */
typedef struct cl_layernorm_attr {
    int features; /* the last dimension C */
    float eps;    /* 1e-5 by default, as PyTorch */
} cl_layernorm_attr;

cl_layernorm_attr cl_layernorm_attr_make(int features);
/* x of rank 2..5 with last dimension attr.features -> y of x's shape. */
cl_status cl_layernorm_infer(const cl_layernorm_attr *a, const cl_shape *x,
                             cl_shape *y);
/* Statistics in double, per row.  y, x: (rows,C)  mean, rstd: (rows),
 * saved for backward (either may be NULL)  gamma, beta: (C) */
void cl_layernorm_forward(float *y, float *mean, float *rstd, const float *x,
                          const float *gamma, const float *beta, int64_t rows,
                          int C, float eps);
/* dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy gamma;
 * dgamma = sum over rows of dy xhat, dbeta = sum of dy (rows in order). */
void cl_layernorm_backward(float *dx, float *dgamma, float *dbeta,
                           const float *dy, const float *x, const float *mean,
                           const float *rstd, const float *gamma, int64_t rows,
                           int C);

/* ---- gelu ---------------------------------------------------------------- */
/* Exact GELU, 0.5 x (1 + erf(x / sqrt 2)) (torch.nn.GELU()'s default, not
 * the tanh approximation).  y may alias x; backward reads x. */
void cl_gelu_forward(float *y, const float *x, int64_t n);
void cl_gelu_backward(float *dx, const float *dy, const float *x, int64_t n);

/* ---- softmax ------------------------------------------------------------- */
/* y = softmax over the LAST axis of x + b + m: x an activation of rank
 * 2..5; b (an activation, takes a gradient) and m (a constant buffer, the
 * shifted-window mask) optional, each broadcast to x's shape as numpy does
 * (right-aligned; a missing or size-1 dimension repeats); their last
 * dimension must equal x's.  Swin: x (B,nW,heads,N,N), b (heads,N,N),
 * m (nW,1,N,N). */
cl_status cl_softmax_infer(const cl_shape *x, const cl_shape *b,
                           const cl_shape *m, cl_shape *y);
/* Where the rows of b and m lie for each row of x: x's rows (all but its
 * last dimension) as a multi-index over d, and the row strides of b and
 * m along each (0 where they broadcast). */
typedef struct cl_softmax_dims {
    int nd;       /* row dimensions: x's rank - 1 */
    int64_t rows; /* their product */
    int C;        /* the last dimension */
    int64_t d[CL_MAX_DIMS];
    int64_t sb[CL_MAX_DIMS], sm[CL_MAX_DIMS];
    int64_t b_rows; /* rows of b (its elements / C), 0 without b */
} cl_softmax_dims;

/* The sizes of a valid (cl_softmax_infer) call; b and m may be NULL. */
cl_softmax_dims cl_softmax_dims_of(const cl_shape *x, const cl_shape *b,
                                   const cl_shape *m);
/* The row of b (or m, with sm) that row r of x reads. */
static inline int64_t cl_softmax_row_of(const cl_softmax_dims *d,
                                        const int64_t *s, int64_t r)
{
    int64_t o = 0;
    for (int k = d->nd - 1; k >= 0; k--) {
        o += (r % d->d[k]) * s[k];
        r /= d->d[k];
    }
    return o;
}
/* y: x's shape  x: (rows,C)  b, m: their shapes or NULL.  Shifted by the
 * row maximum, summed in double. */
void cl_softmax_forward(float *y, const float *x, const float *b,
                        const float *m, const cl_softmax_dims *d);
/* dx = y (dy - sum(dy y)) per row; db = dx summed over b's broadcast
 * dimensions, each element by one thread in a fixed order (independent of
 * the thread count).  dx may be NULL; db NULL when b takes no gradient. */
void cl_softmax_backward(float *dx, float *db, const float *dy, const float *y,
                         const cl_softmax_dims *d);
/* db (b_rows,C), overwritten: dz (x's shape) summed over the rows of x
 * that read each row of b, in increasing order, in double. */
void cl_softmax_bias_grad(float *db, const float *dz, const cl_softmax_dims *d);

/* ---- row_gather ----------------------------------------------------------
 */
/* Rows of an activation picked by a fixed integer index: x viewed as R
 * rows of cols contiguous floats, y as M rows, y[i, :] = x[index[i], :].
 * Every data movement of Swin is one (cyclic shift and window partition,
 * their inverse, patch merging, heads out of qkv, NCHW <-> NHWC): cols is
 * the contiguous run that moves whole (C for token moves, 1 for a
 * transpose).  index need not be a permutation. */
typedef struct cl_row_gather_attr {
    int cols;     /* floats per row */
    cl_shape out; /* y's logical shape: rank 1..5, numel M * cols */
} cl_row_gather_attr;

/* x of rank 1..5 whose elements are whole rows; index 1-d of M = numel(out)
 * / cols positions -> y: attr->out. */
cl_status cl_row_gather_infer(const cl_row_gather_attr *a, const cl_shape *x,
                              const cl_shape *index, cl_shape *y);
/* CL_ERR_ARG naming the position when an index is outside [0, R). */
cl_status cl_row_gather_check(const int64_t *index, int64_t M, int64_t R);
/* y: (M,cols)  x: (R,cols)  index: (M), checked. */
void cl_row_gather_forward(float *y, const float *x, const int64_t *index,
                           int64_t M, int cols);
/* dx (R,cols), overwritten: zero, then the rows of dy summed at their
 * index in order of position (repeats sum the same on any thread count). */
void cl_row_gather_backward(float *dx, const float *dy, const int64_t *index,
                            int64_t M, int64_t R, int cols);

/* ---- droppath (stochastic depth) -------------------------------------------
 */
/* torchvision's stochastic_depth(mode="row"): in training each sample n
 * of x (N, ...) is kept with probability 1 - p and then scaled by
 * 1 / (1 - p), or zeroed; the identity in evaluation and when p is 0. */
typedef struct cl_droppath_attr {
    float p; /* in [0, 1] */
} cl_droppath_attr;

/* x of rank 1..5 (N first) -> y: x's shape. */
cl_status cl_droppath_infer(const cl_droppath_attr *a, const cl_shape *x,
                            cl_shape *y);
/* Sample n's factor, keep / (1 - p) with keep = (u_n < 1 - p), u_n the
 * n-th uniform of the node's stream r (r as initialised, not advanced):
 * one 32-bit word per sample, so any backend and thread count draws the
 * same mask. */
float cl_droppath_scale(const cl_rng *r, int64_t n, float p);
/* y, x: (N,per); the mask of stream r.  y may alias x. */
void cl_droppath_forward(float *y, const float *x, int N, int64_t per, float p,
                         const cl_rng *r);
/* dx = dy times the same factors (the stream again); dx may alias dy. */
void cl_droppath_backward(float *dx, const float *dy, int N, int64_t per,
                          float p, const cl_rng *r);

/* ---- token_meanpool --------------------------------------------------------
 */
/* Swin's last pooling: the mean over the tokens.  x (B,L,C) -> y (B,C). */
cl_status cl_token_meanpool_infer(const cl_shape *x, cl_shape *y);
/* Sums in double in order of l. */
void cl_token_meanpool_forward(float *y, const float *x, int B, int L, int C);
void cl_token_meanpool_backward(float *dx, const float *dy, int B, int L,
                                int C);

/* ---- softmax cross-entropy ------------------------------------------------
 */
/* Mean over the batch of -sum_k t_k log softmax(logits)_k, where the target
 * t is one-hot of labels[i] (labels != NULL) or the row targets[i] (soft
 * probabilities, e.g. from MixUp/CutMix), then smoothed as PyTorch's
 * label_smoothing: t' = (1 - s) t + s / K. */
typedef struct cl_softmax_ce_attr {
    int num_classes;
    float label_smoothing;
} cl_softmax_ce_attr;

/* Returns CL_ERR_ARG naming the sample when a label is outside [0, K). */
cl_status cl_softmax_ce_check_labels(const int32_t *labels, int N, int K);
/* probs: (N,K) saved for backward  logits: (N,K)  labels: (N) or NULL
 * targets: (N,K) or NULL (exactly one of labels, targets).  Returns the
 * mean loss. */
float cl_softmax_ce_forward(float *probs, const float *logits,
                            const int32_t *labels, const float *targets, int N,
                            const cl_softmax_ce_attr *a);
/* dlogits = (probs - t') * scale / N; scale is the loss's upstream gradient
 * (1 for a plain mean). */
void cl_softmax_ce_backward(float *dlogits, const float *probs,
                            const int32_t *labels, const float *targets, int N,
                            float scale, const cl_softmax_ce_attr *a);

/* ---- shape rules of the ops above that have no attr-specific rule ------- */
/* x (N,C,H,W) -> y (N,C). */
cl_status cl_global_avgpool_infer(const cl_shape *x, cl_shape *y);
/* x (..., in_features) -> y (..., out_features): rank 2..CL_MAX_DIMS, the
 * leading dimensions any (not necessarily the batch). */
cl_status cl_linear_infer(const cl_linear_attr *a, const cl_shape *x,
                          cl_shape *y);
/* logits must be (N, num_classes); label_smoothing in [0, 1]. */
cl_status cl_softmax_ce_infer(const cl_softmax_ce_attr *a,
                              const cl_shape *logits);

#endif
