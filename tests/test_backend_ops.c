/* The op-parity table, as ggml's test-backend-ops: one table of rows (an
 * op, its input shapes and attributes, where its inputs come from), each
 * run forward and backward on every backend -- ref, onednn, onednn with
 * channels-last convolutions, onednn with the op sent through the
 * reference fallback (cl_backend_opts.fallback_ops) -- and held against
 * the reference kernels of src/ops/ops.h called directly on the same
 * values, at f32 and at bf16 (the onednn backend's amp_level O1 and O2
 * plans).  The reference kernels are themselves held to finite
 * differences in tests/test_ops.c and tests/test_ops_tensor.c.
 *
 * A row's graph.  Each activation input of the op is a learnable table
 * read by a table_gather with the identity index, so that the table's
 * gradient is exactly the op's input gradient; the row's `src` may pass
 * it on through an identity 1x1 convolution (rank 4: the backend's own
 * activation layout, blocked or channels-last, and bf16 at O2) or an
 * identity linear over its last dimension (rank 3 to 5: bf16 at O2), or
 * make the first input the graph's image (rank 4, no input gradient).
 * The op's output is the graph's `features` (every plan keeps it
 * readable), flattened to (N, M) by a row_gather and closed by a linear
 * head (M -> 8) and the loss.  softmax_ce is the loss itself.  The oracle
 * computes the op, the head, the loss and all their gradients with the
 * kernels of ops.h.
 *
 * Checked per row and backend: the loss; the op's output after a
 * training forward; the gradient of every input that takes one (ops.def's
 * column), of the op's parameters and of the head's; the buffers a
 * training forward updates (BN's running statistics); the output of an
 * evaluation forward of the training plan and of an inference plan.
 *
 * Tolerances, per tensor, max|a - b| / max|b| (cl_test_rel_err) at most
 * C0 u + C1 u_f32 sqrt(K), C0 16 and C1 4.  u is the unit roundoff of the
 * type values are stored in between ops (2^-24 for f32; 2^-8 for bf16,
 * whose significand has 8 bits), and C0 u covers the roundings of an
 * element's own chain (its output, dy, dx rounded once each; an erf or
 * exp approximated to a few ulp).  u_f32 = 2^-24 is that of the sums,
 * which every kernel accumulates in f32 or wider, bf16 ones included, and
 * C1 sqrt(K) covers a sum of K terms taken in another order: K the
 * longest reduction behind the tensor (the op's forward sums for its
 * output; for the gradients its backward's, its forward's and the head's
 * M, which dy inherits; each op's `red` says).  f32: from 1.2e-6 for an
 * elementwise op to 2.9e-5 behind the widest head, measured at most 0.17
 * of it (oneDNN at AVX2, AVX, SSE4.1; each run prints its worst).  bf16:
 * 6.3e-2 (16 u), where the reference with O2's roundings applied to it
 * (outputs, dy and dx rounded, and softmax's z) moves by at most 2.3 u:
 * a wrong layout, type or cast gives errors of order 1.
 *
 * Each test prints its size (ops x rows x dtypes x directions, the runs
 * and plans made) and its run time.  bf16 rows run only where oneDNN has
 * bf16 convolutions (AVX-512): elsewhere the bf16 tests are reported
 * skipped, with the count of rows not run and the backend's reason.
 * CL_BACKEND_OPS=conv2d,softmax runs only those ops' rows.
 *
 * Adding an op: its entry in OPS (the build fails without one, as every
 * table indexed by op) and its rows in ROWS (every_op_has_rows fails
 * without any); docs/ops.md.
 * ctest-labels: onednn */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/mem.h"
#include "core/rng.h"
#include "graph/graph.h"
#include "graph_cases.h"
#include "harness.h"
#include "ops/ops.h"
#include "tensor/tensor.h"
/* fd.h for its fills; its finite-difference check is test_ops*.c's, which
 * hold the reference kernels to it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "fd.h"
#pragma GCC diagnostic pop

/* ---- tolerances -------------------------------------------------------------
 */

#define TOL_C0 16.0
#define TOL_C1 4.0

/* K_HEAD: the head's classes (the gradient reaching the op is a mix of
 * this many random rows of the head's weights per sample); MAX_BATCH: the
 * largest batch of a row. */
enum { K_HEAD = 8, MAX_BATCH = 8 };

typedef enum dtype { DT_F32 = 0, DT_BF16_O1, DT_BF16_O2, DT_COUNT } dtype;

static const char *const DT_NAME[DT_COUNT] = {"f32", "bf16 (amp O1)",
                                              "bf16 (amp O2)"};

/* C0 u + C1 u_f32 sqrt(K): u the unit roundoff of the type values are
 * stored in between ops (2^-24 for f32, 2^-8 for bf16), u_f32 that of the
 * sums, which every kernel accumulates in f32 or wider, bf16 ones too. */
static double tol_of(dtype dt, int64_t K)
{
    const double u = dt == DT_F32 ? 0x1p-24 : 0x1p-8, u_f32 = 0x1p-24;
    return TOL_C0 * u + TOL_C1 * u_f32 * sqrt((double)(K > 1 ? K : 1));
}

/* ---- the rows ---------------------------------------------------------------
 */

/* Where a row's activation inputs come from.  A source that does not fit
 * an input's rank (the conv needs rank 4, the linear 3 to 5) leaves that
 * input plain. */
enum {
    SRC_TABLE = 0, /* plain f32 (a table_gather, on onednn the fallback) */
    SRC_CONV,      /* + identity 1x1 conv: the backend's conv layout */
    SRC_LINEAR,    /* + identity linear over the last dimension */
    SRC_IMAGE      /* the first input is the graph's image: no gradient */
};

static const char *const SRC_NAME[] = {"plain", "conv layout", "linear",
                                       "the image"};

/* Index patterns (prow.how). */
enum {
    /* table_gather */
    TG_MOD = 0, /* (5k + 2) mod rows: repeats, every row read */
    TG_BIAS,    /* graph_cases.h's BIAS_INDEX: repeats, rows never read */
    TG_REL,     /* an (L, L) index of relative positions i - j + L - 1 */
    /* row_gather */
    RG_NHWC = 0, /* NCHW (N, C, 4, 4) -> NHWC tokens, cols 1 */
    RG_WINDOW,   /* cyclic shift + window partition (graph_cases.h) */
    RG_REVERSE,  /* window reverse + shift back */
    RG_DUP,      /* (N, L, E) -> (N, L + 5, E): 5 tokens read twice */
    RG_HEADS,    /* (N, L, 3 H D) -> (N, H, L, D): the heads of k */
    RG_FLIP,     /* tokens in reverse order (a negative stride) */
    /* softmax: the mask's pattern */
    SM_SPOTS = 0, /* -100 at every 5th element */
    SM_STRETCH,   /* whole masked stretches of each row and its last key */
    /* softmax_ce */
    CE_LABELS = 0,
    CE_SOFT
};

typedef struct prow {
    cl_op_kind op;
    const char *what;
    int src;
    int n_in;
    cl_shape in[CL_NODE_MAX_IN];
    /* table_gather: its index's shape; softmax: the mask's (ndim 0: none) */
    cl_shape aux;
    cl_op_attr attr;
    int how;
    int batch; /* the graph's (0: 2); the image's and the logits' first
                  dimension */
} prow;

/* A row's op, what it is, its source and its number of inputs. */
#define R(op_, what_, src_, n_in_)                                             \
    .op = (op_), .what = (what_), .src = (src_), .n_in = (n_in_)
/* Shapes and attributes in a row (clang-format would spread each over
 * seven lines). */
/* clang-format off */
#define S1(a) {1, {a}}
#define S2(a, b) {2, {a, b}}
#define S3(a, b, c) {3, {a, b, c}}
#define S4(a, b, c, d) {4, {a, b, c, d}}
#define S5(a, b, c, d, e) {5, {a, b, c, d, e}}
/* cl_conv2d_attr: in, out, k, stride, pad, dilation, groups, bias */
#define CONV(i, o, k, s, p, d, g, b) {i, o, k, k, s, s, p, p, d, d, g, b}
#define BN(c) {.batchnorm2d = {c, 0.1f, 1e-5f}}
#define LN(c) {.layernorm = {c, 1e-5f}}
/* clang-format on */

static const prow ROWS[] = {
    /* ---- conv2d ---- */
    {R(CL_OP_CONV2D, "3->8 3x3 s2 p1 bias, 11x9", SRC_IMAGE, 1),
     {S4(2, 3, 11, 9)},
     .attr.conv2d = CONV(3, 8, 3, 2, 1, 1, 1, 1)},
    {R(CL_OP_CONV2D, "8->16 1x1, 6x5", SRC_CONV, 1),
     {S4(2, 8, 6, 5)},
     .attr.conv2d = CONV(8, 16, 1, 1, 0, 1, 1, 0)},
    {R(CL_OP_CONV2D, "24->40 3x3 p1, 4x4 (weight gradient as im2col + matmul)",
       SRC_CONV, 1),
     {S4(2, 24, 4, 4)},
     .attr.conv2d = CONV(24, 40, 3, 1, 1, 1, 1, 0)},
    {R(CL_OP_CONV2D, "40->36 3x3 s2 p1, 4x4 -> 2x2", SRC_CONV, 1),
     {S4(2, 40, 4, 4)},
     .attr.conv2d = CONV(40, 36, 3, 2, 1, 1, 1, 0)},
    {R(CL_OP_CONV2D, "24->48 1x1 s2, 7x7 (backward data on the stride grid)",
       SRC_CONV, 1),
     {S4(2, 24, 7, 7)},
     .attr.conv2d = CONV(24, 48, 1, 2, 0, 1, 1, 0)},
    {R(CL_OP_CONV2D, "48->48 3x3 p1 bias, 2x2", SRC_CONV, 1),
     {S4(2, 48, 2, 2)},
     .attr.conv2d = CONV(48, 48, 3, 1, 1, 1, 1, 1)},
    {R(CL_OP_CONV2D, "3->16 7x7 s2 p3 (ImageNet stem), 16x16", SRC_IMAGE, 1),
     {S4(2, 3, 16, 16)},
     .attr.conv2d = CONV(3, 16, 7, 2, 3, 1, 1, 0)},
    {R(CL_OP_CONV2D, "8->12 3x3 p2 dilation 2, 4 groups, bias, 7x7", SRC_TABLE,
       1),
     {S4(2, 8, 7, 7)},
     .attr.conv2d = CONV(8, 12, 3, 1, 2, 2, 4, 1)},
    {R(CL_OP_CONV2D, "16->16 3x3 p1 depthwise, 5x5", SRC_CONV, 1),
     {S4(2, 16, 5, 5)},
     .attr.conv2d = CONV(16, 16, 3, 1, 1, 1, 16, 0)},
    /* ---- batchnorm2d ---- */
    {R(CL_OP_BATCHNORM2D, "16 channels, 8x8", SRC_CONV, 1),
     {S4(2, 16, 8, 8)},
     .attr = BN(16)},
    {R(CL_OP_BATCHNORM2D, "3 channels of the image (planar), 5x6", SRC_IMAGE,
       1),
     {S4(3, 3, 5, 6)},
     .attr = BN(3),
     .batch = 3},
    {R(CL_OP_BATCHNORM2D, "64 channels, 1x1 (two values per channel)", SRC_CONV,
       1),
     {S4(2, 64, 1, 1)},
     .attr = BN(64)},
    {R(CL_OP_BATCHNORM2D, "40 channels, 4x4", SRC_TABLE, 1),
     {S4(2, 40, 4, 4)},
     .attr = BN(40)},
    /* ---- relu ---- */
    {R(CL_OP_RELU, "(2,16,4,5)", SRC_CONV, 1), {S4(2, 16, 4, 5)}},
    {R(CL_OP_RELU, "(2,37)", SRC_TABLE, 1), {S2(2, 37)}},
    {R(CL_OP_RELU, "(2,3,4,6)", SRC_LINEAR, 1), {S4(2, 3, 4, 6)}},
    /* ---- maxpool2d ---- */
    {R(CL_OP_MAXPOOL2D, "3x3 s2 p1, 16 channels, 10x9", SRC_CONV, 1),
     {S4(2, 16, 10, 9)},
     .attr.maxpool2d = {3, 3, 2, 2, 1, 1}},
    {R(CL_OP_MAXPOOL2D, "2x2 s2, 8 channels, 6x6", SRC_TABLE, 1),
     {S4(2, 8, 6, 6)},
     .attr.maxpool2d = {2, 2, 2, 2, 0, 0}},
    {R(CL_OP_MAXPOOL2D, "3x3 s1 p1, 24 channels, 5x7", SRC_CONV, 1),
     {S4(2, 24, 5, 7)},
     .attr.maxpool2d = {3, 3, 1, 1, 1, 1}},
    /* ---- global_avgpool ---- */
    {R(CL_OP_GLOBAL_AVGPOOL, "32 channels, 3x3", SRC_CONV, 1),
     {S4(2, 32, 3, 3)}},
    {R(CL_OP_GLOBAL_AVGPOOL, "20 channels, 7x5", SRC_TABLE, 1),
     {S4(2, 20, 7, 5)}},
    {R(CL_OP_GLOBAL_AVGPOOL, "24 channels, 1x1", SRC_CONV, 1),
     {S4(2, 24, 1, 1)}},
    /* ---- linear ---- */
    {R(CL_OP_LINEAR, "(2,32) 32->5 bias (a head)", SRC_TABLE, 1),
     {S2(2, 32)},
     .attr.linear = {32, 5, 1}},
    {R(CL_OP_LINEAR, "(2,24) 24->40", SRC_TABLE, 1),
     {S2(2, 24)},
     .attr.linear = {24, 40, 0}},
    {R(CL_OP_LINEAR, "(2,3,4,5) 5->6 bias, over the last dimension", SRC_LINEAR,
       1),
     {S4(2, 3, 4, 5)},
     .attr.linear = {5, 6, 1}},
    {R(CL_OP_LINEAR, "(2,16,12) 12->5 bias (tokens)", SRC_LINEAR, 1),
     {S3(2, 16, 12)},
     .attr.linear = {12, 5, 1}},
    {R(CL_OP_LINEAR, "(2,2,3,4,5) 5->3 bias", SRC_TABLE, 1),
     {S5(2, 2, 3, 4, 5)},
     .attr.linear = {5, 3, 1}},
    /* ---- add ---- */
    {R(CL_OP_ADD, "(2,16,6,6) + (2,16,6,6)", SRC_CONV, 2),
     {S4(2, 16, 6, 6), S4(2, 16, 6, 6)}},
    {R(CL_OP_ADD, "(2,21,8) + (2,21,8)", SRC_LINEAR, 2),
     {S3(2, 21, 8), S3(2, 21, 8)}},
    {R(CL_OP_ADD, "(2,37) + (2,37)", SRC_TABLE, 2), {S2(2, 37), S2(2, 37)}},
    /* ---- softmax_ce ---- */
    {R(CL_OP_SOFTMAX_CE, "(2,5) labels", SRC_TABLE, 1),
     {S2(2, 5)},
     .attr.softmax_ce = {5, 0.0f},
     .how = CE_LABELS},
    {R(CL_OP_SOFTMAX_CE, "(3,10) labels, smoothing 0.1", SRC_TABLE, 1),
     {S2(3, 10)},
     .attr.softmax_ce = {10, 0.1f},
     .how = CE_LABELS,
     .batch = 3},
    {R(CL_OP_SOFTMAX_CE, "(4,7) soft targets", SRC_TABLE, 1),
     {S2(4, 7)},
     .attr.softmax_ce = {7, 0.0f},
     .how = CE_SOFT,
     .batch = 4},
    /* ---- matmul ---- */
    {R(CL_OP_MATMUL, "(2,3,4,6) (2,3,5,6)^T alpha 0.5", SRC_LINEAR, 2),
     {S4(2, 3, 4, 6), S4(2, 3, 5, 6)},
     .attr.matmul = {1, 0.5f}},
    {R(CL_OP_MATMUL, "(2,4,6) (6,5): one matrix for all", SRC_LINEAR, 2),
     {S3(2, 4, 6), S2(6, 5)},
     .attr.matmul = {0, 1.0f}},
    {R(CL_OP_MATMUL, "(2,2,21,16) (2,2,21,16)^T alpha 0.25 (q k^T)", SRC_LINEAR,
       2),
     {S4(2, 2, 21, 16), S4(2, 2, 21, 16)},
     .attr.matmul = {1, 0.25f}},
    {R(CL_OP_MATMUL, "(2,2,21,21) (2,2,21,16) (p v)", SRC_LINEAR, 2),
     {S4(2, 2, 21, 21), S4(2, 2, 21, 16)},
     .attr.matmul = {0, 1.0f}},
    {R(CL_OP_MATMUL, "(2,4,5) (2,5,3)", SRC_TABLE, 2),
     {S3(2, 4, 5), S3(2, 5, 3)},
     .attr.matmul = {0, 1.0f}},
    /* ---- table_gather ---- */
    {R(CL_OP_TABLE_GATHER,
       "table (7,6), index (6) with repeats and unread rows", SRC_TABLE, 0),
     .aux = S1(6), .attr.table_gather = {7, 6}, .how = TG_BIAS},
    {R(CL_OP_TABLE_GATHER, "table (7,4), index (3,4)", SRC_TABLE, 0),
     .aux = S2(3, 4), .attr.table_gather = {7, 4}, .how = TG_MOD},
    {R(CL_OP_TABLE_GATHER, "table (41,2), relative positions (21,21)",
       SRC_TABLE, 0),
     .aux = S2(21, 21), .attr.table_gather = {41, 2}, .how = TG_REL},
    /* ---- row_gather (attr: cols, the output's shape) ---- */
    {R(CL_OP_ROW_GATHER, "NCHW (2,8,4,4) -> NHWC tokens (2,16,8)", SRC_CONV, 1),
     {S4(2, 8, 4, 4)},
     .attr.row_gather = {1, S3(2, 16, 8)},
     .how = RG_NHWC},
    {R(CL_OP_ROW_GATHER, "shift + window partition (2,16,6) -> (8,4,6)",
       SRC_LINEAR, 1),
     {S3(2, 16, 6)},
     .attr.row_gather = {6, S3(8, 4, 6)},
     .how = RG_WINDOW},
    {R(CL_OP_ROW_GATHER, "window reverse + shift back (8,4,6) -> (2,16,6)",
       SRC_LINEAR, 1),
     {S3(8, 4, 6)},
     .attr.row_gather = {6, S3(2, 16, 6)},
     .how = RG_REVERSE},
    {R(CL_OP_ROW_GATHER, "(2,16,8) -> (2,21,8), 5 tokens twice", SRC_LINEAR, 1),
     {S3(2, 16, 8)},
     .attr.row_gather = {8, S3(2, 21, 8)},
     .how = RG_DUP},
    {R(CL_OP_ROW_GATHER, "the heads of k, (2,16,24) -> (2,2,16,4)", SRC_LINEAR,
       1),
     {S3(2, 16, 24)},
     .attr.row_gather = {4, S4(2, 2, 16, 4)},
     .how = RG_HEADS},
    {R(CL_OP_ROW_GATHER, "tokens reversed (2,16,8)", SRC_TABLE, 1),
     {S3(2, 16, 8)},
     .attr.row_gather = {8, S3(2, 16, 8)},
     .how = RG_FLIP},
    /* ---- droppath ---- */
    {R(CL_OP_DROPPATH, "(2,16,6) p 0.5", SRC_LINEAR, 1),
     {S3(2, 16, 6)},
     .attr.droppath = {0.5f}},
    {R(CL_OP_DROPPATH, "(2,21,8) p 0.25 (a tail past whole vectors)",
       SRC_LINEAR, 1),
     {S3(2, 21, 8)},
     .attr.droppath = {0.25f}},
    {R(CL_OP_DROPPATH, "(2,16,4,5) p 0.5", SRC_CONV, 1),
     {S4(2, 16, 4, 5)},
     .attr.droppath = {0.5f}},
    /* ---- token_meanpool ---- */
    {R(CL_OP_TOKEN_MEANPOOL, "(2,16,8)", SRC_LINEAR, 1), {S3(2, 16, 8)}},
    {R(CL_OP_TOKEN_MEANPOOL, "(2,21,37)", SRC_TABLE, 1), {S3(2, 21, 37)}},
    /* ---- layernorm ---- */
    {R(CL_OP_LAYERNORM, "over 7 of (2,16,6,7)", SRC_CONV, 1),
     {S4(2, 16, 6, 7)},
     .attr = LN(7)},
    {R(CL_OP_LAYERNORM, "over 37 of the image (3,4,24,37): 288 rows", SRC_IMAGE,
       1),
     {S4(3, 4, 24, 37)},
     .attr = LN(37),
     .batch = 3},
    {R(CL_OP_LAYERNORM, "over 37 of (3,16,24,37): 1152 rows", SRC_CONV, 1),
     {S4(3, 16, 24, 37)},
     .attr = LN(37),
     .batch = 3},
    {R(CL_OP_LAYERNORM, "over 12 of (2,16,12)", SRC_LINEAR, 1),
     {S3(2, 16, 12)},
     .attr = LN(12)},
    {R(CL_OP_LAYERNORM, "over 5 of (2,5)", SRC_TABLE, 1),
     {S2(2, 5)},
     .attr = LN(5)},
    /* ---- gelu ---- */
    {R(CL_OP_GELU, "(2,16,6,7)", SRC_CONV, 1), {S4(2, 16, 6, 7)}},
    {R(CL_OP_GELU, "(2,16,12)", SRC_LINEAR, 1), {S3(2, 16, 12)}},
    {R(CL_OP_GELU, "(2,37)", SRC_TABLE, 1), {S2(2, 37)}},
    /* ---- softmax (x, bias; the mask in aux) ---- */
    {R(CL_OP_SOFTMAX, "(2,16,6,6) + bias (2,16,6,6) + mask (1,6,6)", SRC_CONV,
       2),
     {S4(2, 16, 6, 6), S4(2, 16, 6, 6)},
     .aux = S3(1, 6, 6),
     .how = SM_SPOTS},
    {R(CL_OP_SOFTMAX, "(2,16,6,6) + bias (16,6,6)", SRC_CONV, 2),
     {S4(2, 16, 6, 6), S3(16, 6, 6)}},
    {R(CL_OP_SOFTMAX, "(2,16,6,6) alone", SRC_CONV, 1), {S4(2, 16, 6, 6)}},
    {R(CL_OP_SOFTMAX, "rows of 37 (2,4,2,37) + bias + mask (1,2,37)", SRC_CONV,
       2),
     {S4(2, 4, 2, 37), S4(2, 4, 2, 37)},
     .aux = S3(1, 2, 37),
     .how = SM_STRETCH},
    {R(CL_OP_SOFTMAX, "rows of 70 (2,4,2,70) + bias + mask (1,2,70)", SRC_CONV,
       2),
     {S4(2, 4, 2, 70), S4(2, 4, 2, 70)},
     .aux = S3(1, 2, 70),
     .how = SM_STRETCH},
    {R(CL_OP_SOFTMAX, "(2,3,4,4) + bias (3,4,4) + mask (2,1,4,4)", SRC_LINEAR,
       2),
     {S4(2, 3, 4, 4), S3(3, 4, 4)},
     .aux = S4(2, 1, 4, 4),
     .how = SM_SPOTS},
    {R(CL_OP_SOFTMAX,
       "Swin's (2,2,2,21,21) + bias (2,21,21) + mask (2,1,21,21)", SRC_LINEAR,
       2),
     {S5(2, 2, 2, 21, 21), S3(2, 21, 21)},
     .aux = S4(2, 1, 21, 21),
     .how = SM_STRETCH},
};

enum { N_ROWS = (int)(sizeof ROWS / sizeof ROWS[0]) };

static int row_batch(const prow *r)
{
    return r->batch ? r->batch : 2;
}

/* ---- the reference side -----------------------------------------------------
 */

/* One call of an op's reference kernels on the prototype graph's values:
 * the inputs, params and buffers as the backends see them. */
typedef struct oracle {
    cl_graph *g; /* its params; its buffers, which a training forward
                    updates */
    const cl_node *n;
    int node;
    const float *x[CL_NODE_MAX_IN];
    float *y;
    float *s0, *s1; /* saved: BN mean, invstd; LN mean, rstd; CE probs */
    int32_t *idx;   /* maxpool's argmax */
    const float *dy;
    float *dx[CL_NODE_MAX_IN]; /* NULL where no gradient is wanted */
    float *dp[CL_NODE_MAX_PARAM];
    uint64_t seed, step;
    const int32_t *labels;
    const float *targets;
    float loss; /* softmax_ce */
} oracle;

static const cl_shape *ish(const oracle *o, int k)
{
    return &o->g->tensors[o->n->in[k]].shape;
}

static int64_t numel_in(const oracle *o, int k)
{
    return cl_graph_numel(o->g, o->n->in[k]);
}

static float *par(const oracle *o, int j)
{
    return j < o->n->n_param ? cl_graph_param(o->g, o->n->param[j]) : NULL;
}

static const cl_shape *tshape(const cl_graph *g, int t)
{
    return &g->tensors[t].shape;
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* One op's entry: how its node is built and filled, its reference
 * forward and backward, the reductions behind its tolerances. */
typedef struct op_case {
    /* Adds the node reading activations in[0..r->n_in); *out its output
     * (softmax_ce: the loss). */
    cl_status (*build)(cl_graph *g, const prow *r, const int *in, int *out);
    /* After finalize: its index or mask buffers (NULL: none). */
    void (*fill)(cl_graph *g, const prow *r, const cl_node *n);
    void (*fwd)(oracle *o, int training);
    void (*bwd)(oracle *o);
    /* k[0]: the longest sum behind an output element; k[1]: behind a
     * gradient element. */
    void (*red)(const cl_graph *g, const cl_node *n, int64_t k[2]);
    float range;  /* inputs from U(-range, range) */
    int distinct; /* inputs distinct within each plane (no ties) */
} op_case;

/* ---- conv2d ---- */
static cl_status conv_build(cl_graph *g, const prow *r, const int *in, int *out)
{
    return cl_graph_conv2d(g, "op", in[0], &r->attr.conv2d, out);
}
static void conv_fwd(oracle *o, int training)
{
    const cl_shape *s = ish(o, 0);
    (void)training;
    cl_conv2d_forward(o->y, o->x[0], par(o, 0), par(o, 1), (int)s->d[0],
                      (int)s->d[2], (int)s->d[3], &o->n->attr.conv2d);
}
static void conv_bwd(oracle *o)
{
    const cl_shape *s = ish(o, 0);
    cl_conv2d_backward(o->dx[0], o->dp[0], o->dp[1], o->dy, o->x[0], par(o, 0),
                       (int)s->d[0], (int)s->d[2], (int)s->d[3],
                       &o->n->attr.conv2d);
}
static void conv_red(const cl_graph *g, const cl_node *n, int64_t k[2])
{
    const cl_conv2d_attr *a = &n->attr.conv2d;
    const cl_shape *y = tshape(g, n->out);
    k[0] = (int64_t)a->in_ch / a->groups * a->kh * a->kw;
    k[1] = max64((int64_t)a->out_ch / a->groups * a->kh * a->kw,
                 y->d[0] * y->d[2] * y->d[3]);
}

/* ---- batchnorm2d ---- */
static cl_status bn_build(cl_graph *g, const prow *r, const int *in, int *out)
{
    return cl_graph_batchnorm2d(g, "op", in[0], &r->attr.batchnorm2d, out);
}
static void bn_sizes(const oracle *o, int *N, int *C, int *HW)
{
    const cl_shape *s = ish(o, 0);
    *N = (int)s->d[0];
    *C = (int)s->d[1];
    *HW = (int)(s->d[2] * s->d[3]);
}
static void bn_fwd(oracle *o, int training)
{
    int N, C, HW;
    bn_sizes(o, &N, &C, &HW);
    float *rm = cl_graph_buffer(o->g, o->n->buf[0]);
    float *rv = cl_graph_buffer(o->g, o->n->buf[1]);
    if (training)
        cl_batchnorm2d_forward_train(o->y, o->s0, o->s1, rm, rv, o->x[0],
                                     par(o, 0), par(o, 1), N, C, HW,
                                     &o->n->attr.batchnorm2d);
    else
        cl_batchnorm2d_forward_infer(o->y, o->x[0], par(o, 0), par(o, 1), rm,
                                     rv, N, C, HW, &o->n->attr.batchnorm2d);
}
static void bn_bwd(oracle *o)
{
    int N, C, HW;
    bn_sizes(o, &N, &C, &HW);
    cl_batchnorm2d_backward(o->dx[0], o->dp[0], o->dp[1], o->dy, o->x[0], o->s0,
                            o->s1, par(o, 0), N, C, HW);
}
static void bn_red(const cl_graph *g, const cl_node *n, int64_t k[2])
{
    const cl_shape *x = tshape(g, n->in[0]);
    k[0] = k[1] = x->d[0] * x->d[2] * x->d[3];
}

/* ---- relu ---- */
static cl_status relu_build(cl_graph *g, const prow *r, const int *in, int *out)
{
    (void)r;
    return cl_graph_relu(g, "op", in[0], out);
}
static void relu_fwd(oracle *o, int training)
{
    (void)training;
    cl_relu_forward(o->y, o->x[0], numel_in(o, 0));
}
static void relu_bwd(oracle *o)
{
    cl_relu_backward(o->dx[0], o->dy, o->y, numel_in(o, 0));
}
static void one_red(const cl_graph *g, const cl_node *n, int64_t k[2])
{
    (void)g;
    (void)n;
    k[0] = k[1] = 1;
}

/* ---- maxpool2d ---- */
static cl_status maxpool_build(cl_graph *g, const prow *r, const int *in,
                               int *out)
{
    return cl_graph_maxpool2d(g, "op", in[0], &r->attr.maxpool2d, out);
}
static void maxpool_fwd(oracle *o, int training)
{
    const cl_shape *s = ish(o, 0);
    cl_maxpool2d_forward(o->y, training ? o->idx : NULL, o->x[0], (int)s->d[0],
                         (int)s->d[1], (int)s->d[2], (int)s->d[3],
                         &o->n->attr.maxpool2d);
}
static void maxpool_bwd(oracle *o)
{
    const cl_shape *s = ish(o, 0);
    cl_maxpool2d_backward(o->dx[0], o->dy, o->idx, o->x[0], (int)s->d[0],
                          (int)s->d[1], (int)s->d[2], (int)s->d[3],
                          &o->n->attr.maxpool2d);
}
static void maxpool_red(const cl_graph *g, const cl_node *n, int64_t k[2])
{
    (void)g;
    k[0] = 1;
    k[1] = (int64_t)n->attr.maxpool2d.kh * n->attr.maxpool2d.kw;
}

/* ---- global_avgpool ---- */
static cl_status gap_build(cl_graph *g, const prow *r, const int *in, int *out)
{
    (void)r;
    return cl_graph_global_avgpool(g, "op", in[0], out);
}
static void gap_fwd(oracle *o, int training)
{
    const cl_shape *s = ish(o, 0);
    (void)training;
    cl_global_avgpool_forward(o->y, o->x[0], (int)s->d[0], (int)s->d[1],
                              (int)(s->d[2] * s->d[3]));
}
static void gap_bwd(oracle *o)
{
    const cl_shape *s = ish(o, 0);
    cl_global_avgpool_backward(o->dx[0], o->dy, (int)s->d[0], (int)s->d[1],
                               (int)(s->d[2] * s->d[3]));
}
static void gap_red(const cl_graph *g, const cl_node *n, int64_t k[2])
{
    const cl_shape *x = tshape(g, n->in[0]);
    k[0] = x->d[2] * x->d[3];
    k[1] = 1;
}

/* ---- linear ---- */
static cl_status linear_build(cl_graph *g, const prow *r, const int *in,
                              int *out)
{
    return cl_graph_linear(g, "op", in[0], &r->attr.linear, out);
}
static int linear_rows(const oracle *o)
{
    return (int)(numel_in(o, 0) / o->n->attr.linear.in_features);
}
static void linear_fwd(oracle *o, int training)
{
    (void)training;
    cl_linear_forward(o->y, o->x[0], par(o, 0), par(o, 1), linear_rows(o),
                      &o->n->attr.linear);
}
static void linear_bwd(oracle *o)
{
    cl_linear_backward(o->dx[0], o->dp[0], o->dp[1], o->dy, o->x[0], par(o, 0),
                       linear_rows(o), &o->n->attr.linear);
}
static void linear_red(const cl_graph *g, const cl_node *n, int64_t k[2])
{
    const cl_linear_attr *a = &n->attr.linear;
    k[0] = a->in_features;
    k[1] = max64(a->out_features, cl_graph_numel(g, n->in[0]) / a->in_features);
}

/* ---- add ---- */
static cl_status add_build(cl_graph *g, const prow *r, const int *in, int *out)
{
    (void)r;
    return cl_graph_add(g, "op", in[0], in[1], out);
}
static void add_fwd(oracle *o, int training)
{
    (void)training;
    cl_add_forward(o->y, o->x[0], o->x[1], numel_in(o, 0));
}
static void add_bwd(oracle *o)
{
    cl_add_backward(o->dx[0], o->dx[1], o->dy, numel_in(o, 0));
}

/* ---- softmax_ce: the loss itself ---- */
static cl_status ce_build(cl_graph *g, const prow *r, const int *in, int *out)
{
    CL_TRY(
        cl_graph_softmax_ce(g, in[0], &r->attr.softmax_ce, r->how == CE_SOFT));
    *out = g->loss;
    return CL_OK;
}
static void ce_fwd(oracle *o, int training)
{
    (void)training;
    o->loss =
        cl_softmax_ce_forward(o->s0, o->x[0], o->labels, o->targets,
                              (int)ish(o, 0)->d[0], &o->n->attr.softmax_ce);
}
static void ce_bwd(oracle *o)
{
    cl_softmax_ce_backward(o->dx[0], o->s0, o->labels, o->targets,
                           (int)ish(o, 0)->d[0], 1.0f, &o->n->attr.softmax_ce);
}
static void ce_red(const cl_graph *g, const cl_node *n, int64_t k[2])
{
    (void)g;
    k[0] = k[1] = n->attr.softmax_ce.num_classes;
}

/* ---- matmul ---- */
static cl_status matmul_build(cl_graph *g, const prow *r, const int *in,
                              int *out)
{
    return cl_graph_matmul(g, "op", in[0], in[1], &r->attr.matmul, out);
}
static cl_matmul_dims matmul_dims(const cl_graph *g, const cl_node *n)
{
    return cl_matmul_dims_of(&n->attr.matmul, tshape(g, n->in[0]),
                             tshape(g, n->in[1]));
}
static void matmul_fwd(oracle *o, int training)
{
    const cl_matmul_dims d = matmul_dims(o->g, o->n);
    (void)training;
    cl_matmul_forward(o->y, o->x[0], o->x[1], &d, &o->n->attr.matmul);
}
static void matmul_bwd(oracle *o)
{
    const cl_matmul_dims d = matmul_dims(o->g, o->n);
    cl_matmul_backward(o->dx[0], o->dx[1], o->dy, o->x[0], o->x[1], &d,
                       &o->n->attr.matmul);
}
static void matmul_red(const cl_graph *g, const cl_node *n, int64_t k[2])
{
    const cl_matmul_dims d = matmul_dims(g, n);
    k[0] = d.K;
    k[1] = max64(d.N, (int64_t)d.M * (d.b_batched ? 1 : d.B));
}

/* ---- table_gather: reads no activation ---- */
static cl_status tg_build(cl_graph *g, const prow *r, const int *in, int *out)
{
    int ix;
    (void)in;
    CL_TRY(cl_graph_buffer_add(g, "op.index", r->aux, CL_I64, &ix));
    return cl_graph_table_gather(g, "op", "op.table", ix, &r->attr.table_gather,
                                 out);
}
static void tg_fill(cl_graph *g, const prow *r, const cl_node *n)
{
    int64_t *ix = cl_graph_buffer_i64(g, n->buf[0]);
    const int64_t M = cl_graph_numel(g, n->buf[0]);
    const int rows = r->attr.table_gather.rows;
    const int64_t L = r->aux.d[r->aux.ndim - 1];
    for (int64_t k = 0; k < M; k++) {
        if (r->how == TG_BIAS)
            ix[k] = BIAS_INDEX[k % 6];
        else if (r->how == TG_REL)
            ix[k] = k / L - k % L + L - 1;
        else
            ix[k] = (5 * k + 2) % rows;
    }
}
static void tg_fwd(oracle *o, int training)
{
    const cl_node *n = o->n;
    (void)training;
    cl_table_gather_forward(
        o->y, par(o, 0), cl_graph_buffer_i64(o->g, n->buf[0]),
        cl_graph_numel(o->g, n->buf[0]), n->attr.table_gather.cols);
}
static void tg_bwd(oracle *o)
{
    const cl_node *n = o->n;
    cl_table_gather_backward(
        o->dp[0], o->dy, cl_graph_buffer_i64(o->g, n->buf[0]),
        cl_graph_numel(o->g, n->buf[0]), n->attr.table_gather.rows,
        n->attr.table_gather.cols);
}
/* The most positions that read one row. */
static int64_t most_repeats(const int64_t *ix, int64_t M, int64_t R)
{
    int64_t most = 1;
    int64_t *c = calloc((size_t)R, sizeof *c);
    if (!c)
        return M;
    for (int64_t k = 0; k < M; k++)
        if (ix[k] >= 0 && ix[k] < R && ++c[ix[k]] > most)
            most = c[ix[k]];
    free(c);
    return most;
}
static void tg_red(const cl_graph *g, const cl_node *n, int64_t k[2])
{
    k[0] = 1;
    k[1] =
        most_repeats(cl_graph_buffer_i64(g, n->buf[0]),
                     cl_graph_numel(g, n->buf[0]), n->attr.table_gather.rows);
}

/* ---- row_gather ---- */
static cl_status rg_build(cl_graph *g, const prow *r, const int *in, int *out)
{
    int ix;
    const cl_row_gather_attr *a = &r->attr.row_gather;
    const int64_t M = cl_shape_numel(&a->out) / a->cols;
    CL_TRY(
        cl_graph_buffer_add(g, "op.index", cl_shape_make(1, &M), CL_I64, &ix));
    return cl_graph_row_gather(g, "op", in[0], ix, a->cols, &a->out, out);
}
static void rg_fill(cl_graph *g, const prow *r, const cl_node *n)
{
    int64_t *ix = cl_graph_buffer_i64(g, n->buf[0]);
    const int64_t M = cl_graph_numel(g, n->buf[0]);
    const cl_shape *x = tshape(g, n->in[0]);
    const int N = (int)r->in[0].d[0];
    switch (r->how) {
    case RG_NHWC:
        nhwc_index(ix, N, (int)x->d[1]);
        return;
    case RG_WINDOW:
    case RG_REVERSE: {
        const int Nw = r->how == RG_WINDOW ? N : (int)(x->d[0] / 4);
        int64_t *other = calloc((size_t)M, sizeof *other);
        if (!other)
            return;
        if (r->how == RG_WINDOW)
            window_index(ix, other, Nw);
        else
            window_index(other, ix, Nw);
        free(other);
        return;
    }
    case RG_DUP: {
        const int64_t L = x->d[1], Lo = r->attr.row_gather.out.d[1];
        for (int64_t k = 0; k < M; k++) {
            const int64_t nn = k / Lo, j = k % Lo;
            ix[k] = nn * L + (j < L ? j : (j - L) * 5 % L);
        }
        return;
    }
    case RG_HEADS: {
        /* rows (n, h, l) of (n, l, part * H + h), part 1 (k) of q, k, v */
        const cl_shape *o = &r->attr.row_gather.out;
        const int64_t H = o->d[1], L = o->d[2];
        for (int64_t k = 0; k < M; k++) {
            const int64_t nn = k / (H * L), h = k / L % H, l = k % L;
            ix[k] = (nn * L + l) * 3 * H + 1 * H + h;
        }
        return;
    }
    case RG_FLIP: {
        const int64_t L = x->d[1];
        for (int64_t k = 0; k < M; k++)
            ix[k] = k / L * L + (L - 1 - k % L);
        return;
    }
    }
}
static void rg_fwd(oracle *o, int training)
{
    const cl_node *n = o->n;
    (void)training;
    cl_row_gather_forward(o->y, o->x[0], cl_graph_buffer_i64(o->g, n->buf[0]),
                          cl_graph_numel(o->g, n->buf[0]),
                          n->attr.row_gather.cols);
}
static void rg_bwd(oracle *o)
{
    const cl_node *n = o->n;
    const int cols = n->attr.row_gather.cols;
    cl_row_gather_backward(
        o->dx[0], o->dy, cl_graph_buffer_i64(o->g, n->buf[0]),
        cl_graph_numel(o->g, n->buf[0]), numel_in(o, 0) / cols, cols);
}
static void rg_red(const cl_graph *g, const cl_node *n, int64_t k[2])
{
    k[0] = 1;
    k[1] = most_repeats(cl_graph_buffer_i64(g, n->buf[0]),
                        cl_graph_numel(g, n->buf[0]),
                        cl_graph_numel(g, n->in[0]) / n->attr.row_gather.cols);
}

/* ---- droppath: the mask of the node's stream (seed, step, node) ---- */
static cl_status dp_build(cl_graph *g, const prow *r, const int *in, int *out)
{
    return cl_graph_droppath(g, "op", in[0], &r->attr.droppath, out);
}
static void dp_fwd(oracle *o, int training)
{
    const int N = (int)ish(o, 0)->d[0];
    const int64_t per = numel_in(o, 0) / N;
    const float p = o->n->attr.droppath.p;
    cl_rng r;
    if (!training || p == 0.0f) {
        memcpy(o->y, o->x[0], (size_t)numel_in(o, 0) * sizeof(float));
        return;
    }
    cl_rng_init_node(&r, o->seed, o->step, (uint64_t)o->node);
    cl_droppath_forward(o->y, o->x[0], N, per, p, &r);
}
static void dp_bwd(oracle *o)
{
    const int N = (int)ish(o, 0)->d[0];
    cl_rng r;
    cl_rng_init_node(&r, o->seed, o->step, (uint64_t)o->node);
    cl_droppath_backward(o->dx[0], o->dy, N, numel_in(o, 0) / N,
                         o->n->attr.droppath.p, &r);
}

/* ---- token_meanpool ---- */
static cl_status tm_build(cl_graph *g, const prow *r, const int *in, int *out)
{
    (void)r;
    return cl_graph_token_meanpool(g, "op", in[0], out);
}
static void tm_fwd(oracle *o, int training)
{
    const cl_shape *s = ish(o, 0);
    (void)training;
    cl_token_meanpool_forward(o->y, o->x[0], (int)s->d[0], (int)s->d[1],
                              (int)s->d[2]);
}
static void tm_bwd(oracle *o)
{
    const cl_shape *s = ish(o, 0);
    cl_token_meanpool_backward(o->dx[0], o->dy, (int)s->d[0], (int)s->d[1],
                               (int)s->d[2]);
}
static void tm_red(const cl_graph *g, const cl_node *n, int64_t k[2])
{
    k[0] = tshape(g, n->in[0])->d[1];
    k[1] = 1;
}

/* ---- layernorm ---- */
static cl_status ln_build(cl_graph *g, const prow *r, const int *in, int *out)
{
    return cl_graph_layernorm(g, "op", in[0], &r->attr.layernorm, out);
}
static void ln_fwd(oracle *o, int training)
{
    const cl_layernorm_attr *a = &o->n->attr.layernorm;
    (void)training;
    cl_layernorm_forward(o->y, o->s0, o->s1, o->x[0], par(o, 0), par(o, 1),
                         numel_in(o, 0) / a->features, a->features, a->eps);
}
static void ln_bwd(oracle *o)
{
    const cl_layernorm_attr *a = &o->n->attr.layernorm;
    cl_layernorm_backward(o->dx[0], o->dp[0], o->dp[1], o->dy, o->x[0], o->s0,
                          o->s1, par(o, 0), numel_in(o, 0) / a->features,
                          a->features);
}
static void ln_red(const cl_graph *g, const cl_node *n, int64_t k[2])
{
    const int C = n->attr.layernorm.features;
    k[0] = C;
    k[1] = max64(C, cl_graph_numel(g, n->in[0]) / C);
}

/* ---- gelu ---- */
static cl_status gelu_build(cl_graph *g, const prow *r, const int *in, int *out)
{
    (void)r;
    return cl_graph_gelu(g, "op", in[0], out);
}
static void gelu_fwd(oracle *o, int training)
{
    (void)training;
    cl_gelu_forward(o->y, o->x[0], numel_in(o, 0));
}
static void gelu_bwd(oracle *o)
{
    cl_gelu_backward(o->dx[0], o->dy, o->x[0], numel_in(o, 0));
}

/* ---- softmax: x, the bias (in[1], optional), the mask (buf[0]) ---- */
static cl_status sm_build(cl_graph *g, const prow *r, const int *in, int *out)
{
    int m = -1;
    if (r->aux.ndim > 0)
        CL_TRY(cl_graph_buffer_add(g, "op.mask", r->aux, CL_F32, &m));
    return cl_graph_softmax(g, "op", in[0], r->n_in > 1 ? in[1] : -1, m, out);
}
static void sm_fill(cl_graph *g, const prow *r, const cl_node *n)
{
    if (n->n_buf == 0)
        return;
    float *m = cl_graph_buffer(g, n->buf[0]);
    const int64_t M = cl_graph_numel(g, n->buf[0]);
    const int64_t C = r->aux.d[r->aux.ndim - 1];
    for (int64_t k = 0; k < M; k++) {
        const int64_t j = k % C;
        const int masked = r->how == SM_STRETCH
                               ? (j > C / 4 && j < C / 2) || j == C - 1
                               : k % 5 == 2;
        m[k] = masked ? -100.0f : 0.0f;
    }
}
static cl_softmax_dims sm_dims(const cl_graph *g, const cl_node *n)
{
    return cl_softmax_dims_of(tshape(g, n->in[0]),
                              n->n_in > 1 ? tshape(g, n->in[1]) : NULL,
                              n->n_buf > 0 ? tshape(g, n->buf[0]) : NULL);
}
static void sm_fwd(oracle *o, int training)
{
    const cl_softmax_dims d = sm_dims(o->g, o->n);
    (void)training;
    cl_softmax_forward(
        o->y, o->x[0], o->n->n_in > 1 ? o->x[1] : NULL,
        o->n->n_buf > 0 ? cl_graph_buffer(o->g, o->n->buf[0]) : NULL, &d);
}
static void sm_bwd(oracle *o)
{
    const cl_softmax_dims d = sm_dims(o->g, o->n);
    cl_softmax_backward(o->dx[0], o->n->n_in > 1 ? o->dx[1] : NULL, o->dy, o->y,
                        &d);
}
static void sm_red(const cl_graph *g, const cl_node *n, int64_t k[2])
{
    const cl_softmax_dims d = sm_dims(g, n);
    k[0] = d.C;
    k[1] = max64(d.C, d.b_rows ? d.rows / d.b_rows : 1);
}

static const op_case OPS[CL_OP_COUNT] = {
    [CL_OP_CONV2D] = {conv_build, NULL, conv_fwd, conv_bwd, conv_red, 1, 0},
    [CL_OP_BATCHNORM2D] = {bn_build, NULL, bn_fwd, bn_bwd, bn_red, 1, 0},
    [CL_OP_RELU] = {relu_build, NULL, relu_fwd, relu_bwd, one_red, 1, 0},
    [CL_OP_MAXPOOL2D] = {maxpool_build, NULL, maxpool_fwd, maxpool_bwd,
                         maxpool_red, 1, 1},
    [CL_OP_GLOBAL_AVGPOOL] = {gap_build, NULL, gap_fwd, gap_bwd, gap_red, 1, 0},
    [CL_OP_LINEAR] = {linear_build, NULL, linear_fwd, linear_bwd, linear_red, 1,
                      0},
    [CL_OP_ADD] = {add_build, NULL, add_fwd, add_bwd, one_red, 1, 0},
    [CL_OP_SOFTMAX_CE] = {ce_build, NULL, ce_fwd, ce_bwd, ce_red, 2, 0},
    [CL_OP_MATMUL] = {matmul_build, NULL, matmul_fwd, matmul_bwd, matmul_red, 1,
                      0},
    [CL_OP_TABLE_GATHER] = {tg_build, tg_fill, tg_fwd, tg_bwd, tg_red, 1, 0},
    [CL_OP_ROW_GATHER] = {rg_build, rg_fill, rg_fwd, rg_bwd, rg_red, 1, 0},
    [CL_OP_DROPPATH] = {dp_build, NULL, dp_fwd, dp_bwd, one_red, 1, 0},
    [CL_OP_TOKEN_MEANPOOL] = {tm_build, NULL, tm_fwd, tm_bwd, tm_red, 1, 0},
    [CL_OP_LAYERNORM] = {ln_build, NULL, ln_fwd, ln_bwd, ln_red, 1, 0},
    [CL_OP_GELU] = {gelu_build, NULL, gelu_fwd, gelu_bwd, one_red, 2, 0},
    [CL_OP_SOFTMAX] = {sm_build, sm_fill, sm_fwd, sm_bwd, sm_red, 3, 0},
};
/* A line added to ops.def stops the build here until the op has its
 * entry (and the count is raised), as every table indexed by op. */
CL_OP_TABLE_CHECK(OPS, 16);

/* ---- a row's graph ----------------------------------------------------------
 */

typedef struct pgraph {
    cl_graph g;
    int node;                  /* the op's node */
    int y;                     /* its output (softmax_ce: the loss) */
    int table[CL_NODE_MAX_IN]; /* the param behind input k; -1: image */
    int index[CL_NODE_MAX_IN]; /* its identity index */
    int ident[CL_NODE_MAX_IN]; /* the identity conv's or linear's weight */
    int flat;                  /* the head's flattening index, or -1 */
    int head;                  /* the head's node, -1 for softmax_ce */
    int64_t M;                 /* the head's in_features */
} pgraph;

static void fill_identity(float *w, int64_t C)
{
    for (int64_t i = 0; i < C * C; i++)
        w[i] = i / C == i % C ? 1.0f : 0.0f;
}

static void fill_iota(int64_t *ix, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        ix[i] = i;
}

static cl_status assemble_graph(pgraph *p, const prow *r)
{
    cl_graph *g = &p->g;
    const int N = row_batch(r);
    const int image = r->src == SRC_IMAGE;
    int ins[CL_NODE_MAX_IN] = {-1, -1, -1}, x, lg;
    char name[32], tname[32];
    p->flat = p->head = -1;
    p->M = 0;
    for (int k = 0; k < CL_NODE_MAX_IN; k++)
        p->table[k] = p->index[k] = p->ident[k] = -1;
    if (N > MAX_BATCH)
        return cl_error(CL_ERR_ARG, "batch %d: at most %d", N, MAX_BATCH);
    CL_TRY(cl_graph_init(g, N));
    if (image) {
        const cl_shape *s = &r->in[0];
        if (s->ndim != 4 || s->d[0] != N)
            return cl_error(CL_ERR_SHAPE,
                            "the image must be (batch %d, C, H, W)", N);
        CL_TRY(cl_graph_input(g, (int)s->d[1], (int)s->d[2], (int)s->d[3], &x));
    } else {
        CL_TRY(cl_graph_input(g, 1, 1, 1, &x));
    }
    for (int k = 0; k < r->n_in; k++) {
        const cl_shape *s = &r->in[k];
        const int C = (int)s->d[s->ndim - 1];
        if (image && k == 0) {
            ins[0] = x;
            continue;
        }
        cl_shape is = *s;
        is.ndim--; /* the index: every dimension but the last */
        snprintf(name, sizeof name, "in%d.index", k);
        CL_TRY(cl_graph_buffer_add(g, name, is, CL_I64, &p->index[k]));
        cl_table_gather_attr ta = {(int)cl_shape_numel(&is), C};
        snprintf(name, sizeof name, "in%d", k);
        snprintf(tname, sizeof tname, "in%d.table", k);
        CL_TRY(
            cl_graph_table_gather(g, name, tname, p->index[k], &ta, &ins[k]));
        p->table[k] = g->nodes[g->n_nodes - 1].param[0];
        snprintf(name, sizeof name, "in%d.id", k);
        if (r->src == SRC_CONV && s->ndim == 4) {
            const int ch = (int)s->d[1];
            cl_conv2d_attr ca = cl_conv2d_attr_make(ch, ch, 1, 1, 0);
            CL_TRY(cl_graph_conv2d(g, name, ins[k], &ca, &ins[k]));
            p->ident[k] = g->nodes[g->n_nodes - 1].param[0];
        } else if (r->src == SRC_LINEAR && s->ndim >= 3) {
            cl_linear_attr la = {C, C, 0};
            CL_TRY(cl_graph_linear(g, name, ins[k], &la, &ins[k]));
            p->ident[k] = g->nodes[g->n_nodes - 1].param[0];
        }
    }
    p->node = g->n_nodes;
    CL_TRY(OPS[r->op].build(g, r, ins, &p->y));
    if (r->op != CL_OP_SOFTMAX_CE) {
        const cl_shape *ys = tshape(g, p->y);
        int64_t n = cl_shape_numel(ys);
        int h = p->y;
        if (n % N)
            return cl_error(CL_ERR_SHAPE,
                            "the output's %lld elements are not a multiple of "
                            "the batch %d",
                            (long long)n, N);
        g->features = p->y;
        p->M = n / N;
        if (!(ys->ndim == 2 && ys->d[0] == N)) {
            CL_TRY(cl_graph_buffer_add(g, "flat.index", cl_shape_make(1, &n),
                                       CL_I64, &p->flat));
            cl_shape fs = cl_shape_make(2, (int64_t[]){N, p->M});
            CL_TRY(cl_graph_row_gather(g, "flat", p->y, p->flat, 1, &fs, &h));
        }
        cl_linear_attr la = {(int)p->M, K_HEAD, 1};
        cl_softmax_ce_attr ca = {K_HEAD, 0.0f};
        p->head = g->n_nodes;
        CL_TRY(cl_graph_linear(g, "head", h, &la, &lg));
        CL_TRY(cl_graph_softmax_ce(g, lg, &ca, 0));
    }
    CL_TRY(cl_graph_finalize(g));
    for (int k = 0; k < r->n_in; k++) {
        if (p->index[k] >= 0)
            fill_iota(cl_graph_buffer_i64(g, p->index[k]),
                      cl_graph_numel(g, p->index[k]));
        if (p->ident[k] >= 0)
            fill_identity(cl_graph_param(g, p->ident[k]),
                          tshape(g, p->ident[k])->d[0]);
    }
    if (p->flat >= 0)
        fill_iota(cl_graph_buffer_i64(g, p->flat), cl_graph_numel(g, p->flat));
    if (OPS[r->op].fill)
        OPS[r->op].fill(g, r, &g->nodes[p->node]);
    return CL_OK;
}

/* ---- values -----------------------------------------------------------------
 */

static float round_to(dtype dt, float v)
{
    return dt == DT_F32 ? v : cl_f32_from_bf16(cl_bf16_from_f32(v));
}

static void round_all(dtype dt, float *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = round_to(dt, p[i]);
}

/* Values distinct within each plane of P (the last two dimensions): a
 * shuffled ramp of odd multiples of 2^-e, exact in bf16 for P up to 256
 * (the rows' planes are smaller). */
static void fill_distinct(float *p, int64_t n, int64_t P, cl_rng *rng)
{
    int e = 0;
    while ((1 << e) < P)
        e++;
    for (int64_t o = 0; o < n; o += P) {
        for (int64_t i = 0; i < P; i++)
            p[o + i] = ldexpf((float)(2 * i - P + 1), -e);
        for (int64_t i = P - 1; i > 0; i--) {
            int64_t j = cl_rng_below(rng, (uint32_t)(i + 1));
            float t = p[o + i];
            p[o + i] = p[o + j];
            p[o + j] = t;
        }
    }
}

static void fill_input(const prow *r, const cl_shape *s, float *p, int64_t n,
                       cl_rng *rng)
{
    const op_case *c = &OPS[r->op];
    if (c->distinct && s->ndim >= 2) {
        fill_distinct(p, n, s->d[s->ndim - 1] * s->d[s->ndim - 2], rng);
        return;
    }
    cl_fd_uniform(p, n, -c->range, c->range, rng);
}

/* The row's values: inputs, the op's params (BN and LN gamma around 1,
 * beta small, weights U(-1, 1) 1.7 / sqrt(fan)), the head's (logits of
 * order 1), BN's running statistics; the image; labels or targets; every
 * value exact in bf16 at dt bf16, so that an amp plan reads what the
 * reference reads. */
typedef struct values {
    float *image;
    int32_t labels[MAX_BATCH];
    float *targets; /* softmax_ce CE_SOFT rows */
} values;

static cl_status fill_values(pgraph *p, const prow *r, dtype dt, values *v,
                             uint64_t seed)
{
    cl_graph *g = &p->g;
    const cl_node *n = &g->nodes[p->node];
    cl_rng rng;
    cl_rng_init(&rng, seed, 0);
    for (int t = 0; t < g->n_tensors; t++) {
        const cl_gtensor *x = &g->tensors[t];
        const int64_t ne = cl_graph_numel(g, t);
        int is_ident = 0, k_in = -1;
        for (int k = 0; k < r->n_in; k++) {
            is_ident |= p->ident[k] == t;
            if (p->table[k] == t)
                k_in = k;
        }
        if (x->kind == CL_GT_PARAM && !is_ident) {
            float *w = cl_graph_param(g, t);
            if (k_in >= 0) {
                fill_input(r, &r->in[k_in], w, ne, &rng);
            } else if (p->head >= 0 && t == g->nodes[p->head].param[0]) {
                const float a = 1.0f / sqrtf((float)p->M);
                cl_fd_uniform(w, ne, -a, a, &rng);
            } else if (x->param_flags & CL_PARAM_BN) {
                if (t == n->param[0])
                    cl_fd_uniform(w, ne, 0.7f, 1.3f, &rng);
                else
                    cl_fd_uniform(w, ne, -0.2f, 0.2f, &rng);
            } else if (x->param_flags & CL_PARAM_BIAS) {
                cl_fd_uniform(w, ne, -0.5f, 0.5f, &rng);
            } else {
                const double fan = ne / x->shape.d[0];
                const float a = (float)(1.7 / sqrt(fan > 1 ? fan : 1));
                cl_fd_uniform(w, ne, -a, a, &rng);
            }
            round_all(dt, w, ne);
        } else if (x->kind == CL_GT_BUFFER && x->dtype == CL_F32 &&
                   strstr(x->name, "running_")) {
            float *b = cl_graph_buffer(g, t);
            if (strstr(x->name, "running_var"))
                cl_fd_uniform(b, ne, 0.5f, 1.5f, &rng);
            else
                cl_fd_uniform(b, ne, -0.1f, 0.1f, &rng);
            round_all(dt, b, ne);
        }
    }
    const int N = row_batch(r);
    const int64_t nx = cl_graph_numel(g, g->input);
    v->image = cl_alloc_zero((size_t)nx * sizeof(float), "image");
    if (!v->image)
        return CL_ERR_NOMEM;
    if (r->src == SRC_IMAGE) {
        fill_input(r, &r->in[0], v->image, nx, &rng);
        round_all(dt, v->image, nx);
    }
    const int K =
        r->op == CL_OP_SOFTMAX_CE ? r->attr.softmax_ce.num_classes : K_HEAD;
    for (int i = 0; i < N; i++)
        v->labels[i] = (int32_t)cl_rng_below(&rng, (uint32_t)K);
    if (r->op == CL_OP_SOFTMAX_CE && r->how == CE_SOFT) {
        v->targets = cl_alloc((size_t)N * K * sizeof(float), "targets");
        if (!v->targets)
            return CL_ERR_NOMEM;
        for (int i = 0; i < N; i++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += v->targets[i * K + k] = 0.1f + cl_rng_uniform(&rng);
            for (int k = 0; k < K; k++)
                v->targets[i * K + k] = (float)(v->targets[i * K + k] / s);
        }
    }
    return CL_OK;
}

/* ---- the oracle's results for one row at one dtype --------------------------
 */

typedef struct expect {
    float *y, *y_eval; /* the op's output, training and evaluation */
    float loss, loss_eval;
    float *dx[CL_NODE_MAX_IN];
    float *dp[CL_NODE_MAX_PARAM];
    float *dhead[2]; /* the head's weight and bias gradients */
    int64_t k[2];    /* the reductions behind output and gradients */
} expect;

static void expect_free(expect *e)
{
    cl_free(e->y);
    cl_free(e->y_eval);
    for (int k = 0; k < CL_NODE_MAX_IN; k++)
        cl_free(e->dx[k]);
    for (int k = 0; k < CL_NODE_MAX_PARAM; k++)
        cl_free(e->dp[k]);
    cl_free(e->dhead[0]);
    cl_free(e->dhead[1]);
    memset(e, 0, sizeof *e);
}

static float *zalloc(int64_t n)
{
    return cl_alloc_zero((size_t)(n > 0 ? n : 1) * sizeof(float), "oracle");
}

/* The head on y (N, M): logits, the loss; with dy, its gradient and the
 * head's own. */
static float head_run(const pgraph *p, const float *y, const int32_t *labels,
                      float *dy, float *dw, float *db)
{
    const cl_graph *g = &p->g;
    const cl_node *h = &g->nodes[p->head];
    const int N = g->batch;
    const cl_softmax_ce_attr ca = {K_HEAD, 0.0f};
    float logits[MAX_BATCH * K_HEAD], probs[MAX_BATCH * K_HEAD],
        dl[MAX_BATCH * K_HEAD];
    const float *w = cl_graph_param(g, h->param[0]);
    cl_linear_forward(logits, y, w, cl_graph_param(g, h->param[1]), N,
                      &h->attr.linear);
    const float loss =
        cl_softmax_ce_forward(probs, logits, labels, NULL, N, &ca);
    if (dy) {
        cl_softmax_ce_backward(dl, probs, labels, NULL, N, 1.0f, &ca);
        cl_linear_backward(dy, dw, db, dl, y, w, N, &h->attr.linear);
    }
    return loss;
}

static cl_status oracle_run(pgraph *p, const prow *r, const values *v,
                            uint64_t seed, uint64_t step, expect *e)
{
    cl_status st = CL_ERR_NOMEM;
    cl_graph *g = &p->g;
    const cl_node *n = &g->nodes[p->node];
    const op_case *c = &OPS[r->op];
    const unsigned gi = cl_op_grad_inputs(r->op);
    oracle o = {.g = g,
                .n = n,
                .node = p->node,
                .seed = seed,
                .step = step,
                .labels = v->targets ? NULL : v->labels,
                .targets = v->targets};
    int64_t big = cl_graph_numel(g, n->out) + 64;
    float *dy = NULL;
    memset(e, 0, sizeof *e);
    for (int k = 0; k < r->n_in; k++) {
        o.x[k] = p->table[k] >= 0 ? cl_graph_param(g, p->table[k]) : v->image;
        big = max64(big, cl_graph_numel(g, n->in[k]) + 64);
        if ((gi >> k & 1) && p->table[k] >= 0 &&
            !(o.dx[k] = e->dx[k] = zalloc(cl_graph_numel(g, n->in[k]))))
            goto done;
    }
    for (int j = 0; j < n->n_param; j++)
        if (!(o.dp[j] = e->dp[j] = zalloc(cl_graph_numel(g, n->param[j]))))
            goto done;
    o.s0 = zalloc(big);
    o.s1 = zalloc(big);
    o.idx = cl_alloc_zero((size_t)big * sizeof(int32_t), "oracle");
    e->y = zalloc(big);
    e->y_eval = zalloc(big);
    if (!o.s0 || !o.s1 || !o.idx || !e->y || !e->y_eval)
        goto done;
    c->red(g, n, e->k);
    if (p->head >= 0) {
        const cl_node *h = &g->nodes[p->head];
        dy = zalloc(big);
        e->dhead[0] = zalloc(cl_graph_numel(g, h->param[0]));
        e->dhead[1] = zalloc(cl_graph_numel(g, h->param[1]));
        if (!dy || !e->dhead[0] || !e->dhead[1])
            goto done;
    }
    /* A training forward (BN's running statistics updated), the head and
     * the loss, backward; then an evaluation forward. */
    o.y = e->y;
    c->fwd(&o, 1);
    if (p->head >= 0) {
        e->loss = head_run(p, e->y, v->labels, dy, e->dhead[0], e->dhead[1]);
        o.dy = dy;
    } else {
        e->loss = o.loss;
    }
    c->bwd(&o);
    o.y = e->y_eval;
    c->fwd(&o, 0);
    e->loss_eval = p->head >= 0
                       ? head_run(p, e->y_eval, v->labels, NULL, NULL, NULL)
                       : o.loss;
    st = CL_OK;
done:
    cl_free(dy);
    cl_free(o.s0);
    cl_free(o.s1);
    cl_free(o.idx);
    return st;
}

/* ---- the backend side -------------------------------------------------------
 */

typedef enum variant {
    V_REF = 0,
    V_ONEDNN,
    V_NHWC,     /* channels-last convs: rows whose inputs a conv makes */
    V_FALLBACK, /* the op through the reference fallback */
    V_COUNT
} variant;

static const char *const V_NAME[V_COUNT] = {"ref", "onednn", "onednn nhwc",
                                            "onednn fallback"};

/* What a run saw, for the summary. */
typedef struct tally {
    int rows, runs, plans, failed_rows;
    int per_variant[V_COUNT];
    unsigned fell_back; /* ops the plain onednn plan ran on the fallback */
    double worst;       /* error / tolerance */
    char worst_at[160];
} tally;

/* Compares n values of a backend with the oracle's. */
static void cmp(tally *t, const char *ctx, const char *what, const float *got,
                const float *want, int64_t n, double tol)
{
    const double e = cl_test_rel_err(got, want, (size_t)n);
    const double ratio = e / tol;
    if (!(ratio <= t->worst) && isfinite(ratio)) {
        t->worst = ratio;
        snprintf(t->worst_at, sizeof t->worst_at, "%s: %s", ctx, what);
    }
    if (getenv("CL_BACKEND_OPS_VERBOSE"))
        fprintf(stderr, "  %-60.60s %-22s err %.3g tol %.3g (%.3f)\n", ctx,
                what, e, tol, ratio);
    if (!(e <= tol))
        cl_test_fail(__FILE__, __LINE__, "%s: %s: relative error %.3g > %.3g",
                     ctx, what, e, tol);
    /* A reference of zeros could not tell a wrong result from none. */
    int64_t nz = 0;
    for (int64_t i = 0; i < n; i++)
        nz += want[i] != 0.0f;
    if (nz == 0)
        cl_test_fail(__FILE__, __LINE__,
                     "%s: %s: the reference is all zero, so the check cannot "
                     "tell a wrong result",
                     ctx, what);
}

/* A loss: |a - b| / |b|, as cmp on one value. */
static void cmp_loss(tally *t, const char *ctx, const char *what, float got,
                     float want, double tol)
{
    cmp(t, ctx, what, &got, &want, 1, tol);
}

/* The row's graph on one backend from the prototype's params and buffers
 * (as they were before the oracle's training forward): a training step,
 * then an evaluation forward, then an inference plan's forward. */
static void run_backend(tally *t, const prow *r, dtype dt, variant v,
                        const pgraph *proto, const float *params0,
                        const float *buffers0, const values *val,
                        const expect *e, uint64_t seed, uint64_t step)
{
    pgraph pb;
    cl_backend *be = NULL, *inf = NULL;
    float *y = NULL, loss = NAN;
    char ctx[200];
    const int amp = dt == DT_F32 ? 0 : dt == DT_BF16_O1 ? 1 : 2;
    cl_backend_opts o = {.amp_level = amp};
    const char *name = v == V_REF ? "ref" : "onednn";
    const int is_loss = proto->head < 0;
    memset(&pb, 0, sizeof pb);
    snprintf(ctx, sizeof ctx, "%s [%s, %s] %s %s", cl_op_name(r->op), r->what,
             SRC_NAME[r->src], V_NAME[v], DT_NAME[dt]);
    if (v == V_NHWC)
        o.channels_last = 1;
    if (v == V_FALLBACK)
        o.fallback_ops = 1u << r->op;
    if (assemble_graph(&pb, r) != CL_OK) {
        cl_test_fail(__FILE__, __LINE__, "%s: graph: %s", ctx, cl_last_error());
        goto done;
    }
    cl_graph *g = &pb.g;
    memcpy(g->params, params0, g->n_param_floats * sizeof(float));
    memcpy(g->buffers, buffers0, g->n_buffer_floats * sizeof(float));
    if (cl_backend_create(&be, name, g, CL_PLAN_TRAIN, &o) != CL_OK) {
        cl_test_fail(__FILE__, __LINE__, "%s: plan: %s", ctx, cl_last_error());
        goto done;
    }
    t->runs++;
    t->plans++;
    t->per_variant[v]++;
    if (v == V_ONEDNN && (cl_backend_fallback_ops(be) >> r->op & 1u))
        t->fell_back |= 1u << r->op;
    const cl_node *n = &g->nodes[pb.node];
    const int64_t ny = is_loss ? 1 : cl_graph_numel(g, pb.y);
    const double tf = tol_of(dt, e->k[0]);
    const double tl = tol_of(dt, max64(e->k[0], max64(pb.M, K_HEAD)));
    const double tb = tol_of(dt, max64(max64(e->k[1], e->k[0]), pb.M));
    y = zalloc(ny);
    if (!y)
        goto done;
    const int32_t *labels = val->targets ? NULL : val->labels;
    cl_backend_set_step(be, seed, step);
    CHECK_OK(cl_backend_set_input(be, val->image, labels, val->targets));
    CHECK_OK(cl_backend_forward(be, 1, &loss));
    cmp_loss(t, ctx, "loss", loss, e->loss, tl);
    if (!is_loss) {
        CHECK_OK(cl_backend_read(be, pb.y, y));
        cmp(t, ctx, "forward output", y, e->y, ny, tf);
    }
    CHECK_OK(cl_backend_backward(be));
    char what[96];
    for (int k = 0; k < r->n_in; k++)
        if (e->dx[k]) {
            snprintf(what, sizeof what, "gradient of input %d", k);
            cmp(t, ctx, what, cl_graph_grad(g, pb.table[k]), e->dx[k],
                cl_graph_numel(g, n->in[k]), tb);
        }
    for (int j = 0; j < n->n_param; j++) {
        snprintf(what, sizeof what, "gradient of %s",
                 g->tensors[n->param[j]].name);
        cmp(t, ctx, what, cl_graph_grad(g, n->param[j]), e->dp[j],
            cl_graph_numel(g, n->param[j]), tb);
    }
    if (pb.head >= 0)
        for (int j = 0; j < 2; j++) {
            const int hp = g->nodes[pb.head].param[j];
            snprintf(what, sizeof what, "gradient of %s", g->tensors[hp].name);
            cmp(t, ctx, what, cl_graph_grad(g, hp), e->dhead[j],
                cl_graph_numel(g, hp), tb);
        }
    for (int j = 0; j < n->n_buf; j++) {
        const int b = n->buf[j];
        if (g->tensors[b].dtype != CL_F32)
            continue;
        snprintf(what, sizeof what, "buffer %s", g->tensors[b].name);
        cmp(t, ctx, what, cl_graph_buffer(g, b), cl_graph_buffer(&proto->g, b),
            cl_graph_numel(g, b), tf);
    }
    /* Evaluation forward of the training plan, then an inference plan on
     * the same graph (the running statistics as the step left them). */
    CHECK_OK(cl_backend_forward(be, 0, &loss));
    cmp_loss(t, ctx, "evaluation loss", loss, e->loss_eval, tl);
    if (!is_loss) {
        CHECK_OK(cl_backend_read(be, pb.y, y));
        cmp(t, ctx, "evaluation output", y, e->y_eval, ny, tf);
    }
    if (cl_backend_create(&inf, name, g, CL_PLAN_INFER, &o) != CL_OK) {
        cl_test_fail(__FILE__, __LINE__, "%s: inference plan: %s", ctx,
                     cl_last_error());
        goto done;
    }
    t->plans++;
    cl_backend_set_step(inf, seed, step);
    CHECK_OK(cl_backend_set_input(inf, val->image, labels, val->targets));
    CHECK_OK(cl_backend_forward(inf, 0, &loss));
    cmp_loss(t, ctx, "inference plan loss", loss, e->loss_eval, tl);
    if (!is_loss) {
        CHECK_OK(cl_backend_read(inf, pb.y, y));
        cmp(t, ctx, "inference plan output", y, e->y_eval, ny, tf);
    }
done:
    cl_backend_destroy(inf);
    cl_backend_destroy(be);
    cl_graph_free(&pb.g);
    cl_free(y);
}

/* ---- the table --------------------------------------------------------------
 */

/* Whether CL_BACKEND_OPS (a comma-separated list of op names) names op;
 * every op when it is unset. */
static int op_selected(cl_op_kind op)
{
    const char *s = getenv("CL_BACKEND_OPS");
    if (!s || !*s)
        return 1;
    const char *name = cl_op_name(op);
    const size_t len = strlen(name);
    for (const char *p = s; *p;) {
        const char *q = strchr(p, ',');
        const size_t l = q ? (size_t)(q - p) : strlen(p);
        if (l == len && strncmp(p, name, len) == 0)
            return 1;
        p += l + (q ? 1 : 0);
    }
    return 0;
}

/* The ops that have no row, comma-separated, into buf; their count. */
static int ops_without_rows(char *buf, size_t cap)
{
    int missing = 0;
    buf[0] = '\0';
    for (int op = 0; op < CL_OP_COUNT; op++) {
        int rows = 0;
        for (int i = 0; i < N_ROWS; i++)
            rows += ROWS[i].op == (cl_op_kind)op;
        if (rows == 0) {
            size_t l = strlen(buf);
            snprintf(buf + l, cap - l, "%s%s", missing ? ", " : "",
                     cl_op_name((cl_op_kind)op));
            missing++;
        }
    }
    return missing;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One row at one dtype on the variants that apply. */
static void run_row(tally *t, const prow *r, dtype dt)
{
    const uint64_t seed = 1000 + (uint64_t)(r - ROWS);
    pgraph proto;
    values val;
    expect e;
    float *params0 = NULL, *buffers0 = NULL;
    const int fails_before = cl_test_failed();
    memset(&proto, 0, sizeof proto);
    memset(&val, 0, sizeof val);
    memset(&e, 0, sizeof e);
    if (assemble_graph(&proto, r) != CL_OK ||
        fill_values(&proto, r, dt, &val, seed) != CL_OK) {
        cl_test_fail(__FILE__, __LINE__, "%s [%s]: graph: %s",
                     cl_op_name(r->op), r->what, cl_last_error());
        goto done;
    }
    cl_graph *g = &proto.g;
    params0 = cl_alloc(g->n_param_floats * sizeof(float) + 64, "params");
    buffers0 = cl_alloc(g->n_buffer_floats * sizeof(float) + 64, "buffers");
    if (!params0 || !buffers0)
        goto done;
    memcpy(params0, g->params, g->n_param_floats * sizeof(float));
    memcpy(buffers0, g->buffers, g->n_buffer_floats * sizeof(float));
    /* (a step at which a droppath keeps some samples and drops others) */
    const uint64_t step = mixed_step(g, seed);
    if (oracle_run(&proto, r, &val, seed, step, &e) != CL_OK) {
        cl_test_fail(__FILE__, __LINE__, "%s [%s]: oracle out of memory",
                     cl_op_name(r->op), r->what);
        goto done;
    }
    t->rows++;
    int has_conv = 0;
    for (int k = 0; k < r->n_in; k++)
        has_conv |= proto.ident[k] >= 0 && r->src == SRC_CONV;
    for (int v = 0; v < V_COUNT; v++) {
        if (v == V_REF && dt != DT_F32)
            continue; /* the ref backend is f32 only */
        if (v == V_NHWC && !has_conv)
            continue;
        /* The fallback: not for the loss (it has none), nor for an op the
         * plain plan already ran there, nor at O1 (the fallback sees the
         * f32 values it sees at O0). */
        if (v == V_FALLBACK &&
            (proto.head < 0 || (t->fell_back >> r->op & 1u) ||
             dt == DT_BF16_O1))
            continue;
        run_backend(t, r, dt, (variant)v, &proto, params0, buffers0, &val, &e,
                    seed, step);
    }
done:
    t->failed_rows += cl_test_failed() > fails_before;
    expect_free(&e);
    cl_free(val.image);
    cl_free(val.targets);
    cl_free(params0);
    cl_free(buffers0);
    cl_graph_free(&proto.g);
}

static int rows_selected(void)
{
    int n = 0;
    for (int i = 0; i < N_ROWS; i++)
        n += op_selected(ROWS[i].op);
    return n;
}

static int ops_selected(void)
{
    int n = 0;
    for (int op = 0; op < CL_OP_COUNT; op++)
        n += op_selected((cl_op_kind)op);
    return n;
}

static void print_size(const tally *t, dtype dt, double seconds)
{
    fprintf(stderr,
            "backend_ops: %d ops x %d shape rows x %d dtypes x 2 directions "
            "(forward, backward) = %d checks; at %s: %d checks, %d runs (",
            ops_selected(), rows_selected(), (int)DT_COUNT,
            2 * (int)DT_COUNT * rows_selected(), DT_NAME[dt], 2 * t->rows,
            t->runs);
    for (int v = 0, first = 1; v < V_COUNT; v++)
        if (t->per_variant[v]) {
            fprintf(stderr, "%s%s %d", first ? "" : ", ", V_NAME[v],
                    t->per_variant[v]);
            first = 0;
        }
    fprintf(stderr, "), %d plans, %.2f s\n", t->plans, seconds);
    if (t->fell_back) {
        fprintf(stderr, "  ops onednn's own plan ran on the reference "
                        "fallback (its supports() turned them down; their "
                        "fallback runs are these):");
        for (int op = 0; op < CL_OP_COUNT; op++)
            if (t->fell_back >> op & 1u)
                fprintf(stderr, " %s", cl_op_name((cl_op_kind)op));
        fprintf(stderr, "\n");
    }
    fprintf(stderr, "  worst error / tolerance %.3g (%s)\n", t->worst,
            t->worst_at);
}

static void run_table(dtype dt)
{
    char missing[512];
    tally t;
    memset(&t, 0, sizeof t);
    if (ops_without_rows(missing, sizeof missing)) {
        cl_test_fail(__FILE__, __LINE__, "ops without rows in ROWS: %s",
                     missing);
        return;
    }
    if (dt != DT_F32) {
        /* oneDNN refuses amp plans where it has no bf16 convolutions
         * (below AVX-512, ONEDNN_MAX_CPU_ISA included): the rows are not
         * run, and the test says so as a skip, never as a pass. */
        pgraph p;
        cl_backend *be = NULL;
        cl_backend_opts o = {.amp_level = dt == DT_BF16_O1 ? 1 : 2};
        memset(&p, 0, sizeof p);
        REQUIRE_OK(assemble_graph(&p, &ROWS[0]));
        cl_status s = cl_backend_create(&be, "onednn", &p.g, CL_PLAN_TRAIN, &o);
        cl_backend_destroy(be);
        cl_graph_free(&p.g);
        if (s == CL_ERR_UNSUPPORTED) {
            cl_test_skip("%d checks (%d rows x 2 directions) at %s not run: "
                         "%s",
                         2 * rows_selected(), rows_selected(), DT_NAME[dt],
                         cl_last_error());
            return;
        }
        REQUIRE_OK(s);
    }
    const double t0 = now_s();
    for (int i = 0; i < N_ROWS; i++)
        if (op_selected(ROWS[i].op))
            run_row(&t, &ROWS[i], dt);
    print_size(&t, dt, now_s() - t0);
    if (t.failed_rows)
        fprintf(stderr, "  %d of %d rows failed\n", t.failed_rows, t.rows);
}

/* Every op of ops.def has rows: adding an op means adding its rows. */
CL_TEST(every_op_has_rows)
{
    char missing[512];
    int n = ops_without_rows(missing, sizeof missing);
    if (n)
        cl_test_fail(__FILE__, __LINE__, "%d ops have no row in ROWS: %s", n,
                     missing);
}

CL_TEST(f32)
{
    run_table(DT_F32);
}

CL_TEST(bf16_o1)
{
    run_table(DT_BF16_O1);
}

CL_TEST(bf16_o2)
{
    run_table(DT_BF16_O2);
}
