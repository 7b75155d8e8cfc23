/* ONNX export of an inference graph (ResNet's ops; Swin's layernorm, gelu,
 * softmax and gathers, at a fixed or a symbolic batch; the int8 nodes of a
 * quantized graph as QuantizeLinear/DequantizeLinear around float ops),
 * written as protobuf by hand (field numbers of onnx/onnx.proto3), opset
 * 17 for LayerNormalization (13 would do for per-channel DQ). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "interop/interop.h"
#include "interop/protobuf.h"
#include "io/atomic.h"

/* onnx.proto3 field numbers. */
enum {
    MODEL_IR_VERSION = 1,
    MODEL_PRODUCER_NAME = 2,
    MODEL_PRODUCER_VERSION = 3,
    MODEL_GRAPH = 7,
    MODEL_OPSET_IMPORT = 8,
    MODEL_METADATA_PROPS = 14,
    OPSET_DOMAIN = 1,
    OPSET_VERSION = 2,
    KV_KEY = 1,
    KV_VALUE = 2,
    GRAPH_NODE = 1,
    GRAPH_NAME = 2,
    GRAPH_INITIALIZER = 5,
    GRAPH_INPUT = 11,
    GRAPH_OUTPUT = 12,
    NODE_INPUT = 1,
    NODE_OUTPUT = 2,
    NODE_NAME = 3,
    NODE_OP_TYPE = 4,
    NODE_ATTRIBUTE = 5,
    ATTR_NAME = 1,
    ATTR_F = 2,
    ATTR_I = 3,
    ATTR_INTS = 8,
    ATTR_TYPE = 20,
    ATTR_TYPE_FLOAT = 1,
    ATTR_TYPE_INT = 2,
    ATTR_TYPE_INTS = 7,
    TENSOR_DIMS = 1,
    TENSOR_DATA_TYPE = 2,
    TENSOR_NAME = 8,
    TENSOR_RAW_DATA = 9,
    TENSOR_FLOAT = 1,
    TENSOR_UINT8 = 2,
    TENSOR_INT8 = 3,
    TENSOR_INT64 = 7,
    VI_NAME = 1,
    VI_TYPE = 2,
    TYPE_TENSOR = 1,
    TT_ELEM_TYPE = 1,
    TT_SHAPE = 2,
    SHAPE_DIM = 1,
    DIM_VALUE = 1,
    DIM_PARAM = 2
};

static void tensor_name(const cl_graph *g, int t, char *buf, size_t n)
{
    if (t == g->input)
        snprintf(buf, n, "input");
    else if (t == g->logits)
        snprintf(buf, n, "logits");
    else
        snprintf(buf, n, "t%d", t);
}

static void attr_int(cl_pb_writer *node, const char *name, int64_t v)
{
    cl_pb_writer a;
    cl_pb_writer_init(&a);
    cl_pb_put_string(&a, ATTR_NAME, name);
    cl_pb_put_int64(&a, ATTR_I, v);
    cl_pb_put_varint(&a, ATTR_TYPE, ATTR_TYPE_INT);
    cl_pb_put_message(node, NODE_ATTRIBUTE, &a);
    cl_pb_writer_free(&a);
}

static void attr_float(cl_pb_writer *node, const char *name, float v)
{
    cl_pb_writer a;
    cl_pb_writer_init(&a);
    cl_pb_put_string(&a, ATTR_NAME, name);
    cl_pb_put_float(&a, ATTR_F, v);
    cl_pb_put_varint(&a, ATTR_TYPE, ATTR_TYPE_FLOAT);
    cl_pb_put_message(node, NODE_ATTRIBUTE, &a);
    cl_pb_writer_free(&a);
}

static void attr_ints(cl_pb_writer *node, const char *name, const int *v, int n)
{
    cl_pb_writer a;
    cl_pb_writer_init(&a);
    cl_pb_put_string(&a, ATTR_NAME, name);
    for (int i = 0; i < n; i++)
        cl_pb_put_int64(&a, ATTR_INTS, v[i]);
    cl_pb_put_varint(&a, ATTR_TYPE, ATTR_TYPE_INTS);
    cl_pb_put_message(node, NODE_ATTRIBUTE, &a);
    cl_pb_writer_free(&a);
}

/* A node of op_type with up to 3 inputs (NULL ends the list); the caller
 * adds attributes to *node and then calls node_end. */
static void node_begin(cl_pb_writer *node, const char *op, const char *name,
                       const char *const *in, int n_in, const char *out)
{
    cl_pb_writer_init(node);
    for (int i = 0; i < n_in; i++)
        cl_pb_put_string(node, NODE_INPUT, in[i]);
    cl_pb_put_string(node, NODE_OUTPUT, out);
    cl_pb_put_string(node, NODE_NAME, name);
    cl_pb_put_string(node, NODE_OP_TYPE, op);
}

static void node_end(cl_pb_writer *graph, cl_pb_writer *node)
{
    cl_pb_put_message(graph, GRAPH_NODE, node);
    cl_pb_writer_free(node);
}

/* An initializer of ONNX data type `type` from its raw bytes. */
static void initializer_raw(cl_pb_writer *graph, const char *name,
                            const int64_t *dims, int ndim, int type,
                            const void *v, size_t bytes)
{
    cl_pb_writer t;
    cl_pb_writer_init(&t);
    for (int i = 0; i < ndim; i++)
        cl_pb_put_int64(&t, TENSOR_DIMS, dims[i]);
    cl_pb_put_varint(&t, TENSOR_DATA_TYPE, (uint64_t)type);
    cl_pb_put_string(&t, TENSOR_NAME, name);
    /* raw_data is little-endian, as the hosts classic runs on. */
    cl_pb_put_bytes(&t, TENSOR_RAW_DATA, v, bytes);
    cl_pb_put_message(graph, GRAPH_INITIALIZER, &t);
    cl_pb_writer_free(&t);
}

static void initializer(cl_pb_writer *graph, const char *name,
                        const int64_t *dims, int ndim, const float *v, size_t n)
{
    initializer_raw(graph, name, dims, ndim, TENSOR_FLOAT, v,
                    n * sizeof(float));
}

/* An int64 initializer (indices, shapes). */
static void initializer_i64(cl_pb_writer *graph, const char *name,
                            const int64_t *dims, int ndim, const int64_t *v,
                            size_t n)
{
    initializer_raw(graph, name, dims, ndim, TENSOR_INT64, v,
                    n * sizeof(int64_t));
}

/* ValueInfoProto of a float tensor; dims[0] < 0 writes dim_param "N". */
static void value_info(cl_pb_writer *graph, int field, const char *name,
                       const int64_t *dims, int ndim)
{
    cl_pb_writer vi, ty, tt, sh;
    cl_pb_writer_init(&vi);
    cl_pb_writer_init(&ty);
    cl_pb_writer_init(&tt);
    cl_pb_writer_init(&sh);
    for (int i = 0; i < ndim; i++) {
        cl_pb_writer d;
        cl_pb_writer_init(&d);
        if (dims[i] < 0)
            cl_pb_put_string(&d, DIM_PARAM, "N");
        else
            cl_pb_put_int64(&d, DIM_VALUE, dims[i]);
        cl_pb_put_message(&sh, SHAPE_DIM, &d);
        cl_pb_writer_free(&d);
    }
    cl_pb_put_varint(&tt, TT_ELEM_TYPE, TENSOR_FLOAT);
    cl_pb_put_message(&tt, TT_SHAPE, &sh);
    cl_pb_put_message(&ty, TYPE_TENSOR, &tt);
    cl_pb_put_string(&vi, VI_NAME, name);
    cl_pb_put_message(&vi, VI_TYPE, &ty);
    cl_pb_put_message(graph, field, &vi);
    cl_pb_writer_free(&sh);
    cl_pb_writer_free(&tt);
    cl_pb_writer_free(&ty);
    cl_pb_writer_free(&vi);
}

/* The BN node reading conv output t alone, or -1. */
static int bn_after(const cl_graph *g, int conv)
{
    int t = g->nodes[conv].out;
    if (g->tensors[t].n_consumers != 1)
        return -1;
    for (int j = conv + 1; j < g->n_nodes; j++)
        if (g->nodes[j].op == CL_OP_BATCHNORM2D && g->nodes[j].in[0] == t)
            return j;
    return -1;
}

/* What of a buffer is written already: the whole of it under its own
 * name, or one image's part of a gather index under "<name>.image". */
enum { INIT_WHOLE = 1, INIT_IMAGE = 2 };

/* One node's emitter reads the node and its ONNX tensor names. */
typedef struct emit_ctx {
    const cl_graph *g;
    const cl_onnx_opts *o;
    int i;
    const cl_node *n;
    cl_pb_writer *graph;
    char *folded;        /* per node: written already as part of another */
    char *inited;        /* per tensor: INIT_* written already */
    const char *batched; /* per tensor: its size follows the batch */
    char *qdq;           /* per tensor: its Q/DQ pair written already */
    int int8;            /* the node runs int8: QDQ in, int8 weights */
    char in0[48], in1[32], out[32];
} emit_ctx;

typedef cl_status (*emit_fn)(emit_ctx *e);

/* ---- int8 nodes as QDQ ----------------------------------------------------
 * A node that runs int8 (cl_graph_quant_node) reads its activation through
 * QuantizeLinear -> DequantizeLinear (u8 or s8 by act_signed, zero point 0,
 * one pair per tensor for all its int8 readers) and its weight as an INT8
 * initializer through a per-channel DequantizeLinear (opset 13 and up).
 * The op, its bias and every other node stay float: a runtime without
 * int8 kernels runs the numbers classic's int8 plan stands for, and one
 * with them (ONNX Runtime's QDQ fusion) may run the op in int8. */

/* Node i's s8 weights q (out rows of `per`) from its dequantized f32
 * weights w and its scales s: q = round(w / s), which must be an integer
 * in [-127, 127] within 1e-3, as the weights of a quantized file are q * s
 * up to the float rounding of the product; a channel of scale 0 must be
 * zero.  mul (NULL: 1) is a factor per output channel folded into the
 * DequantizeLinear scale dq (a BN's gamma / sqrt(var + eps)): its sign
 * goes into q, so dq stays positive; dq is 1 for a row of zeros. */
static cl_status quantize_weights(const cl_graph *g, int i, const float *w,
                                  int out, size_t per, const double *mul,
                                  int8_t *q, float *dq)
{
    const char *name = g->nodes[i].name;
    const float *s = cl_graph_quant_wscale(g, i);
    for (int o = 0; o < out; o++) {
        const double m = mul ? mul[o] : 1.0;
        if (!isfinite(s[o]) || s[o] < 0.0f || !isfinite(m))
            return cl_error(CL_ERR_FORMAT,
                            "onnx export: node %s: output channel %d has "
                            "weight scale %g and BN factor %g; both must be "
                            "finite and the scale >= 0",
                            name, o, (double)s[o], m);
        for (size_t k = 0; k < per; k++) {
            const float v = w[(size_t)o * per + k];
            const double r = s[o] > 0.0f ? (double)v / s[o] : (double)v;
            const double qr = nearbyint(r);
            if (fabs(r - qr) > 1e-3 || fabs(qr) > 127.0 ||
                (s[o] == 0.0f && v != 0.0f))
                return cl_error(CL_ERR_FORMAT,
                                "onnx export: node %s: weight %zu of output "
                                "channel %d is %g, %.6g times its scale %g, "
                                "not an integer in [-127, 127]: an int8 "
                                "node's weights must be the dequantized q * "
                                "scale of a quantized file",
                                name, k, o, (double)v, r, (double)s[o]);
            q[(size_t)o * per + k] = (int8_t)(m < 0 ? -qr : m > 0 ? qr : 0);
        }
        const double d = (double)s[o] * fabs(m);
        dq[o] = d > 0 ? (float)d : 1.0f;
    }
    return CL_OK;
}

/* The float weight `w` as DequantizeLinear(axis) of the INT8 initializer
 * "<w>.quantized" (dims) with the per-channel scale "<w>.scale" and the
 * zero point "<w>.zero_point" (nch each). */
static cl_status weight_dq(cl_pb_writer *graph, const char *w,
                           const int64_t *dims, int ndim, const int8_t *q,
                           size_t nq, const float *scale, int nch, int axis)
{
    char qn[112], sn[112], zn[112], nn[112];
    int8_t *zero = cl_alloc_zero((size_t)nch, "onnx weight zero point");
    if (!zero)
        return CL_ERR_NOMEM;
    const int64_t c = nch;
    snprintf(qn, sizeof qn, "%s.quantized", w);
    snprintf(sn, sizeof sn, "%s.scale", w);
    snprintf(zn, sizeof zn, "%s.zero_point", w);
    snprintf(nn, sizeof nn, "%s.dequantize", w);
    initializer_raw(graph, qn, dims, ndim, TENSOR_INT8, q, nq);
    initializer(graph, sn, &c, 1, scale, (size_t)nch);
    initializer_raw(graph, zn, &c, 1, TENSOR_INT8, zero, (size_t)nch);
    cl_free(zero);
    const char *ins[3] = {qn, sn, zn};
    cl_pb_writer node;
    node_begin(&node, "DequantizeLinear", nn, ins, 3, w);
    attr_int(&node, "axis", axis);
    node_end(graph, &node);
    return CL_OK;
}

/* The int8 node's activation input through its tensor's Q/DQ pair,
 * written at its first int8 reader: "<x>.scale" (float), "<x>.zero_point"
 * (uint8 or int8 0), QuantizeLinear to "<x>_q", DequantizeLinear to
 * "<x>_dq", which the node then reads. */
static cl_status act_qdq(emit_ctx *e)
{
    const cl_graph *g = e->g;
    const int t = e->n->in[0];
    char x[32], sn[48], zn[48], qn[48], dq[48], nn[64];
    tensor_name(g, t, x, sizeof x);
    snprintf(sn, sizeof sn, "%s.scale", x);
    snprintf(zn, sizeof zn, "%s.zero_point", x);
    snprintf(qn, sizeof qn, "%s_q", x);
    snprintf(dq, sizeof dq, "%s_dq", x);
    if (!e->qdq[t]) {
        const float sc = g->quant->act_scale[t];
        if (!isfinite(sc))
            return cl_error(CL_ERR_FORMAT,
                            "onnx export: node %s: its input's int8 scale "
                            "is %g",
                            e->n->name, (double)sc);
        e->qdq[t] = 1;
        const uint8_t zero = 0;
        initializer(e->graph, sn, NULL, 0, &sc, 1);
        initializer_raw(e->graph, zn, NULL, 0,
                        g->quant->act_signed[t] ? TENSOR_INT8 : TENSOR_UINT8,
                        &zero, 1);
        const char *qin[3] = {x, sn, zn};
        const char *dqin[3] = {qn, sn, zn};
        cl_pb_writer node;
        snprintf(nn, sizeof nn, "%s.quantize", x);
        node_begin(&node, "QuantizeLinear", nn, qin, 3, qn);
        node_end(e->graph, &node);
        snprintf(nn, sizeof nn, "%s.dequantize", x);
        node_begin(&node, "DequantizeLinear", nn, dqin, 3, dq);
        node_end(e->graph, &node);
    }
    memcpy(e->in0, dq, sizeof e->in0);
    return CL_OK;
}

/* Conv (+ folded BN): W' = W * gamma / sqrt(var + eps), b' = beta +
 * (b - mean) * gamma / sqrt(var + eps), all in double.  An int8 conv
 * keeps its s8 weights and takes the BN's factor into their per-channel
 * DequantizeLinear scale instead. */
static cl_status conv_folded(const cl_graph *g, int i, int bn, int int8,
                             cl_pb_writer *graph, const char *in,
                             const char *out)
{
    const cl_node *n = &g->nodes[i];
    const cl_conv2d_attr *a = &n->attr.conv2d;
    int wt = n->param[0];
    const float *w = cl_graph_param(g, wt);
    const float *cb = a->has_bias ? cl_graph_param(g, n->param[1]) : NULL;
    size_t nw = (size_t)cl_graph_numel(g, wt);
    size_t per = nw / (size_t)a->out_ch;
    cl_status s = CL_OK;
    float *fw = cl_alloc(nw * sizeof(float), "onnx conv weight");
    float *fb = cl_alloc((size_t)a->out_ch * sizeof(float), "onnx conv bias");
    double *mul =
        cl_alloc((size_t)a->out_ch * sizeof(double), "onnx conv weight");
    if (!fw || !fb || !mul) {
        s = CL_ERR_NOMEM;
        goto done;
    }
    const cl_node *b = bn >= 0 ? &g->nodes[bn] : NULL;
    for (int o = 0; o < a->out_ch; o++) {
        double scale = 1, shift = cb ? cb[o] : 0;
        if (b) {
            const float *gamma = cl_graph_param(g, b->param[0]);
            const float *beta = cl_graph_param(g, b->param[1]);
            const float *mean = cl_graph_buffer(g, b->buf[0]);
            const float *var = cl_graph_buffer(g, b->buf[1]);
            scale = gamma[o] / sqrt((double)var[o] + b->attr.batchnorm2d.eps);
            shift = beta[o] + (shift - mean[o]) * scale;
        }
        mul[o] = scale;
        for (size_t k = 0; k < per && !int8; k++)
            fw[o * per + k] = (float)(w[o * per + k] * scale);
        fb[o] = (float)shift;
    }
    char wn[96], bname[96];
    snprintf(wn, sizeof wn, "%s.weight", n->name);
    snprintf(bname, sizeof bname, "%s.bias", n->name);
    if (int8) {
        int8_t *q = (int8_t *)fw; /* the s8 weights in fw's bytes */
        float *dq = cl_alloc((size_t)a->out_ch * sizeof(float), "onnx conv "
                                                                "scale");
        if (!dq) {
            s = CL_ERR_NOMEM;
            goto done;
        }
        s = quantize_weights(g, i, w, a->out_ch, per, mul, q, dq);
        if (s == CL_OK)
            s = weight_dq(graph, wn, g->tensors[wt].shape.d, 4, q, nw, dq,
                          a->out_ch, 0);
        cl_free(dq);
        if (s != CL_OK)
            goto done;
    } else {
        initializer(graph, wn, g->tensors[wt].shape.d, 4, fw, nw);
    }
    int64_t od = a->out_ch;
    initializer(graph, bname, &od, 1, fb, (size_t)a->out_ch);
    const char *ins[3] = {in, wn, bname};
    cl_pb_writer node;
    node_begin(&node, "Conv", n->name, ins, 3, out);
    int ks[2] = {a->kh, a->kw}, st[2] = {a->sh, a->sw};
    int pads[4] = {a->ph, a->pw, a->ph, a->pw}, dil[2] = {a->dh, a->dw};
    attr_ints(&node, "kernel_shape", ks, 2);
    attr_ints(&node, "strides", st, 2);
    attr_ints(&node, "pads", pads, 4);
    attr_ints(&node, "dilations", dil, 2);
    attr_int(&node, "group", a->groups);
    node_end(graph, &node);
done:
    cl_free(fw);
    cl_free(fb);
    cl_free(mul);
    return s;
}

static cl_status emit_conv2d(emit_ctx *e)
{
    int bn = bn_after(e->g, e->i);
    if (bn >= 0) {
        e->folded[bn] = 1;
        tensor_name(e->g, e->g->nodes[bn].out, e->out, sizeof e->out);
    }
    return conv_folded(e->g, e->i, bn, e->int8, e->graph, e->in0, e->out);
}

/* A node of op_type over the node's first n_in inputs, no attributes. */
static cl_status emit_plain(emit_ctx *e, const char *op_type, int n_in)
{
    const char *ins[2] = {e->in0, e->in1};
    cl_pb_writer node;
    node_begin(&node, op_type, e->n->name, ins, n_in, e->out);
    node_end(e->graph, &node);
    return CL_OK;
}

static cl_status emit_relu(emit_ctx *e)
{
    return emit_plain(e, "Relu", 1);
}

static cl_status emit_add(emit_ctx *e)
{
    tensor_name(e->g, e->n->in[1], e->in1, sizeof e->in1);
    return emit_plain(e, "Add", 2);
}

static cl_status emit_maxpool2d(emit_ctx *e)
{
    const cl_maxpool2d_attr *a = &e->n->attr.maxpool2d;
    const char *ins[1] = {e->in0};
    int ks[2] = {a->kh, a->kw}, st[2] = {a->sh, a->sw};
    int pads[4] = {a->ph, a->pw, a->ph, a->pw};
    cl_pb_writer node;
    node_begin(&node, "MaxPool", e->n->name, ins, 1, e->out);
    attr_ints(&node, "kernel_shape", ks, 2);
    attr_ints(&node, "strides", st, 2);
    attr_ints(&node, "pads", pads, 4);
    node_end(e->graph, &node);
    return CL_OK;
}

/* ONNX keeps (N,C,1,1); classic's pooled tensor is (N,C). */
static cl_status emit_global_avgpool(emit_ctx *e)
{
    char mid[48], nm[96];
    const char *ins[1] = {e->in0};
    cl_pb_writer node;
    snprintf(mid, sizeof mid, "%s_nchw", e->out);
    node_begin(&node, "GlobalAveragePool", e->n->name, ins, 1, mid);
    node_end(e->graph, &node);
    const char *fin[1] = {mid};
    snprintf(nm, sizeof nm, "%s.flatten", e->n->name);
    node_begin(&node, "Flatten", nm, fin, 1, e->out);
    attr_int(&node, "axis", 1);
    node_end(e->graph, &node);
    return CL_OK;
}

/* An initializer of the graph tensor t, a param or a buffer (f32 or
 * int64), named by its state_dict name and written once however many
 * nodes read it (Swin's blocks share masks and gather indices). */
static void state_initializer(const emit_ctx *e, int t)
{
    const cl_graph *g = e->g;
    const cl_gtensor *x = &g->tensors[t];
    if (e->inited[t] & INIT_WHOLE)
        return;
    e->inited[t] |= INIT_WHOLE;
    const size_t n = (size_t)cl_shape_numel(&x->shape);
    if (x->kind == CL_GT_BUFFER && x->dtype == CL_I64)
        initializer_i64(e->graph, x->name, x->shape.d, x->shape.ndim,
                        cl_graph_buffer_i64(g, t), n);
    else
        initializer(e->graph, x->name, x->shape.d, x->shape.ndim,
                    x->kind == CL_GT_PARAM ? cl_graph_param(g, t)
                                           : cl_graph_buffer(g, t),
                    n);
}

/* A Reshape of `in` to the int64 shape dims (an initializer named after
 * the node and `tag`) into `out`. */
static void reshape(emit_ctx *e, const char *tag, const char *in,
                    const int64_t *dims, int nd, const char *out)
{
    char sn[112], nn[112];
    int64_t len = nd;
    snprintf(sn, sizeof sn, "%s.%s_shape", e->n->name, tag);
    snprintf(nn, sizeof nn, "%s.%s", e->n->name, tag);
    initializer_i64(e->graph, sn, &len, 1, dims, (size_t)nd);
    const char *ins[2] = {in, sn};
    cl_pb_writer node;
    node_begin(&node, "Reshape", nn, ins, 2, out);
    node_end(e->graph, &node);
}

/* A linear over rank 3 and up: Gemm takes 2-d inputs only, so MatMul with
 * the transposed weights (an initializer of its own, (in, out)) and an Add
 * of the bias, both broadcasting over the leading dimensions. */
static cl_status emit_linear_tokens(emit_ctx *e)
{
    const cl_graph *g = e->g;
    const cl_linear_attr *a = &e->n->attr.linear;
    const int wt = e->n->param[0];
    const float *w = cl_graph_param(g, wt);
    const size_t nw = (size_t)a->in_features * (size_t)a->out_features;
    char wn[96], mid[48], bname[96];
    snprintf(wn, sizeof wn, "%s.T", g->tensors[wt].name);
    int64_t wd[2] = {a->in_features, a->out_features};
    if (e->int8) {
        /* The s8 weights transposed, their channels along axis 1. */
        int8_t *q = cl_alloc(2 * nw, "onnx linear weight");
        float *dq = cl_alloc((size_t)a->out_features * sizeof(float),
                             "onnx linear scale");
        cl_status s = q && dq ? CL_OK : CL_ERR_NOMEM;
        if (s == CL_OK)
            s = quantize_weights(g, e->i, w, a->out_features,
                                 (size_t)a->in_features, NULL, q + nw, dq);
        for (int o = 0; s == CL_OK && o < a->out_features; o++)
            for (int k = 0; k < a->in_features; k++)
                q[(size_t)k * a->out_features + o] =
                    q[nw + (size_t)o * a->in_features + k];
        if (s == CL_OK)
            s = weight_dq(e->graph, wn, wd, 2, q, nw, dq, a->out_features, 1);
        cl_free(q);
        cl_free(dq);
        CL_TRY(s);
    } else {
        float *wtr = cl_alloc(nw * sizeof(float), "onnx linear weight");
        if (!wtr)
            return CL_ERR_NOMEM;
        for (int o = 0; o < a->out_features; o++)
            for (int k = 0; k < a->in_features; k++)
                wtr[(size_t)k * a->out_features + o] =
                    w[(size_t)o * a->in_features + k];
        initializer(e->graph, wn, wd, 2, wtr, nw);
        cl_free(wtr);
    }
    snprintf(mid, sizeof mid, "%s_mm", e->out);
    const char *ins[2] = {e->in0, wn};
    cl_pb_writer node;
    node_begin(&node, "MatMul", e->n->name, ins, 2, a->has_bias ? mid : e->out);
    node_end(e->graph, &node);
    if (!a->has_bias)
        return CL_OK;
    const int bt = e->n->param[1];
    char nn[96];
    snprintf(bname, sizeof bname, "%s", g->tensors[bt].name);
    initializer(e->graph, bname, g->tensors[bt].shape.d, 1,
                cl_graph_param(g, bt), (size_t)cl_graph_numel(g, bt));
    snprintf(nn, sizeof nn, "%s.bias", e->n->name);
    const char *bin[2] = {mid, bname};
    node_begin(&node, "Add", nn, bin, 2, e->out);
    node_end(e->graph, &node);
    return CL_OK;
}

/* alpha a b: MatMul (after a Transpose of b's last two axes for trans_b),
 * then a Mul by alpha unless it is 1; MatMul broadcasts a 2-d b. */
static cl_status emit_matmul(emit_ctx *e)
{
    const cl_matmul_attr *at = &e->n->attr.matmul;
    char bt[48], mid[48], nn[96], an[96];
    cl_pb_writer node;
    tensor_name(e->g, e->n->in[1], e->in1, sizeof e->in1);
    const char *b = e->in1;
    if (at->trans_b) {
        const int r = e->g->tensors[e->n->in[1]].shape.ndim;
        int perm[CL_MAX_DIMS];
        for (int k = 0; k < r; k++)
            perm[k] = k;
        perm[r - 2] = r - 1;
        perm[r - 1] = r - 2;
        snprintf(bt, sizeof bt, "%s_bT", e->out);
        snprintf(nn, sizeof nn, "%s.transpose_b", e->n->name);
        const char *tin[1] = {e->in1};
        node_begin(&node, "Transpose", nn, tin, 1, bt);
        attr_ints(&node, "perm", perm, r);
        node_end(e->graph, &node);
        b = bt;
    }
    snprintf(mid, sizeof mid, "%s_ab", e->out);
    const char *ins[2] = {e->in0, b};
    const int scaled = at->alpha != 1.0f;
    node_begin(&node, "MatMul", e->n->name, ins, 2, scaled ? mid : e->out);
    node_end(e->graph, &node);
    if (!scaled)
        return CL_OK;
    snprintf(an, sizeof an, "%s.alpha", e->n->name);
    initializer(e->graph, an, NULL, 0, &at->alpha, 1);
    snprintf(nn, sizeof nn, "%s.scale", e->n->name);
    const char *min[2] = {mid, an};
    node_begin(&node, "Mul", nn, min, 2, e->out);
    node_end(e->graph, &node);
    return CL_OK;
}

/* Whether row_gather n moves rows within each image alone, the same way
 * in every image: x holds B images of *m rows each (batch-major), y B of
 * *r, y's first dimension is a multiple of B, and row b r + i of y is row
 * b m + index[i] of x with index[i] < m.  Swin's window partitions, head
 * splits and patch merging are of this kind (their buffers are derived
 * per image and repeated over the batch).  At batch 1 the graph holds one
 * image and cannot show otherwise, so its index is taken as one image's. */
static int gather_per_image(const cl_graph *g, const cl_node *n, int64_t *m,
                            int64_t *r)
{
    const cl_row_gather_attr *a = &n->attr.row_gather;
    const int64_t B = g->batch;
    const int64_t M = cl_shape_numel(&g->tensors[n->in[0]].shape) / a->cols;
    const int64_t R = cl_shape_numel(&a->out) / a->cols;
    if (B < 1 || M % B || R % B || a->out.d[0] % B)
        return 0;
    *m = M / B;
    *r = R / B;
    const int64_t *ix = cl_graph_buffer_i64(g, n->buf[0]);
    for (int64_t i = 0; i < *r; i++)
        if (ix[i] < 0 || ix[i] >= *m)
            return 0;
    for (int64_t b = 1; b < B; b++)
        for (int64_t i = 0; i < *r; i++)
            if (ix[b * *r + i] != b * *m + ix[i])
                return 0;
    return 1;
}

/* A gather within each image, for any batch: Reshape(-1, m, cols) ->
 * Gather(axis 1, one image's index: the first r entries of the buffer, an
 * int64 initializer "<buffer>.image" written once for all the gathers
 * sharing it) -> Reshape to y's shape with its first dimension -1.  The
 * model then holds no size of the batch. */
static cl_status row_gather_images(emit_ctx *e, int64_t m, int64_t r)
{
    const cl_graph *g = e->g;
    const cl_node *n = e->n;
    const cl_row_gather_attr *a = &n->attr.row_gather;
    const int it = n->buf[0];
    char imgs[48], picked[48], iname[96];
    const int64_t split[3] = {-1, m, a->cols};
    snprintf(imgs, sizeof imgs, "%s_images", e->out);
    snprintf(picked, sizeof picked, "%s_picked", e->out);
    snprintf(iname, sizeof iname, "%s.image", g->tensors[it].name);
    reshape(e, "images", e->in0, split, 3, imgs);
    if (!(e->inited[it] & INIT_IMAGE)) {
        e->inited[it] |= INIT_IMAGE;
        initializer_i64(e->graph, iname, &r, 1, cl_graph_buffer_i64(g, it),
                        (size_t)r);
    }
    const char *ins[2] = {imgs, iname};
    cl_pb_writer node;
    node_begin(&node, "Gather", n->name, ins, 2, picked);
    attr_int(&node, "axis", 1);
    node_end(e->graph, &node);
    int64_t od[CL_MAX_DIMS];
    memcpy(od, a->out.d, sizeof(int64_t) * (size_t)a->out.ndim);
    od[0] = -1;
    reshape(e, "out", picked, od, a->out.ndim, e->out);
    return CL_OK;
}

/* A gather by the whole index buffer: Reshape(-1, cols) -> Gather(axis 0,
 * the buffer as an int64 initializer by its name, once for all the gathers
 * sharing it) -> Reshape(y's shape).  Right for the graph's batch only
 * when x depends on the batch. */
static cl_status row_gather_whole(emit_ctx *e)
{
    const cl_graph *g = e->g;
    const cl_node *n = e->n;
    const cl_row_gather_attr *a = &n->attr.row_gather;
    char rows[48], picked[48];
    const int64_t flat[2] = {-1, a->cols};
    snprintf(rows, sizeof rows, "%s_rows", e->out);
    snprintf(picked, sizeof picked, "%s_picked", e->out);
    reshape(e, "rows", e->in0, flat, 2, rows);
    state_initializer(e, n->buf[0]);
    const char *ins[2] = {rows, g->tensors[n->buf[0]].name};
    cl_pb_writer node;
    node_begin(&node, "Gather", n->name, ins, 2, picked);
    attr_int(&node, "axis", 0);
    node_end(e->graph, &node);
    reshape(e, "out", picked, a->out.d, a->out.ndim, e->out);
    return CL_OK;
}

/* A gather over a tensor that does not depend on the batch (Swin's
 * relative position bias) is written whole; one over the images, per
 * image when its index allows (any batch, symbolic included), else whole
 * at the graph's batch only. */
static cl_status emit_row_gather(emit_ctx *e)
{
    const cl_graph *g = e->g;
    const cl_node *n = e->n;
    int64_t m = 0, r = 0;
    if (!e->batched[n->in[0]])
        return row_gather_whole(e);
    if (gather_per_image(g, n, &m, &r))
        return row_gather_images(e, m, r);
    if (e->o->batch == g->batch)
        return row_gather_whole(e);
    return cl_error(CL_ERR_UNSUPPORTED,
                    "onnx export: node %s (row_gather) has an index that "
                    "moves rows between the images of the graph's batch of "
                    "%d; export with a fixed batch of %d",
                    n->name, g->batch, g->batch);
}

/* Rows of a learnable table by an index buffer (Swin's relative position
 * bias): Gather over axis 0 of the table, both initializers, each written
 * once by its state_dict name. */
static cl_status emit_table_gather(emit_ctx *e)
{
    const cl_graph *g = e->g;
    const cl_node *n = e->n;
    const int tt = n->param[0], it = n->buf[0];
    state_initializer(e, tt);
    state_initializer(e, it);
    const char *ins[2] = {g->tensors[tt].name, g->tensors[it].name};
    cl_pb_writer node;
    node_begin(&node, "Gather", n->name, ins, 2, e->out);
    attr_int(&node, "axis", 0);
    node_end(e->graph, &node);
    return CL_OK;
}

/* Evaluation: stochastic depth is the identity. */
static cl_status emit_droppath(emit_ctx *e)
{
    return emit_plain(e, "Identity", 1);
}

/* (B,L,C) -> (B,C); the axes attribute is valid through opset 17. */
static cl_status emit_token_meanpool(emit_ctx *e)
{
    const char *ins[1] = {e->in0};
    const int axes[1] = {1};
    cl_pb_writer node;
    node_begin(&node, "ReduceMean", e->n->name, ins, 1, e->out);
    attr_ints(&node, "axes", axes, 1);
    attr_int(&node, "keepdims", 0);
    node_end(e->graph, &node);
    return CL_OK;
}

static cl_status emit_linear(emit_ctx *e)
{
    if (e->g->tensors[e->n->in[0]].shape.ndim > 2)
        return emit_linear_tokens(e);
    const cl_graph *g = e->g;
    const cl_linear_attr *a = &e->n->attr.linear;
    int wt = e->n->param[0];
    char wn[96], bname[96];
    snprintf(wn, sizeof wn, "%s", g->tensors[wt].name);
    const size_t nw = (size_t)cl_graph_numel(g, wt);
    if (e->int8) {
        int8_t *q = cl_alloc(nw, "onnx linear weight");
        float *dq = cl_alloc((size_t)a->out_features * sizeof(float),
                             "onnx linear scale");
        cl_status s = q && dq ? CL_OK : CL_ERR_NOMEM;
        if (s == CL_OK)
            s = quantize_weights(g, e->i, cl_graph_param(g, wt),
                                 a->out_features, (size_t)a->in_features, NULL,
                                 q, dq);
        if (s == CL_OK)
            s = weight_dq(e->graph, wn, g->tensors[wt].shape.d, 2, q, nw, dq,
                          a->out_features, 0);
        cl_free(q);
        cl_free(dq);
        CL_TRY(s);
    } else {
        initializer(e->graph, wn, g->tensors[wt].shape.d, 2,
                    cl_graph_param(g, wt), nw);
    }
    const char *gin[3] = {e->in0, wn, bname};
    int n_in = 2;
    if (a->has_bias) {
        int bt = e->n->param[1];
        snprintf(bname, sizeof bname, "%s", g->tensors[bt].name);
        initializer(e->graph, bname, g->tensors[bt].shape.d, 1,
                    cl_graph_param(g, bt), (size_t)cl_graph_numel(g, bt));
        n_in = 3;
    }
    cl_pb_writer node;
    node_begin(&node, "Gemm", e->n->name, gin, n_in, e->out);
    attr_int(&node, "transB", 1);
    node_end(e->graph, &node);
    return CL_OK;
}

/* LayerNormalization (opset 17) over the last axis. */
static cl_status emit_layernorm(emit_ctx *e)
{
    const cl_graph *g = e->g;
    const cl_node *n = e->n;
    state_initializer(e, n->param[0]);
    state_initializer(e, n->param[1]);
    const char *ins[3] = {e->in0, g->tensors[n->param[0]].name,
                          g->tensors[n->param[1]].name};
    cl_pb_writer node;
    node_begin(&node, "LayerNormalization", n->name, ins, 3, e->out);
    attr_int(&node, "axis", -1);
    attr_float(&node, "epsilon", n->attr.layernorm.eps);
    node_end(e->graph, &node);
    return CL_OK;
}

/* A two-input node "<node>.<step>" writing value out. */
static void binary(emit_ctx *e, const char *op, const char *step, const char *a,
                   const char *b, const char *out)
{
    char nm[96];
    const char *ins[2] = {a, b};
    cl_pb_writer node;
    snprintf(nm, sizeof nm, "%s.%s", e->n->name, step);
    node_begin(&node, op, nm, ins, b ? 2 : 1, out);
    node_end(e->graph, &node);
}

/* Exact GELU decomposed, as Gelu is an operator only from opset 20:
 * y = x * (erf(x / sqrt 2) + 1) * 0.5. */
static cl_status emit_gelu(emit_ctx *e)
{
    const char *nm = e->n->name;
    char c_sqrt2[96], c_one[96], c_half[96];
    char v_div[48], v_erf[48], v_add[48], v_mul[48];
    const float sqrt2 = 1.41421356237309504880f, one = 1.0f, half = 0.5f;
    snprintf(c_sqrt2, sizeof c_sqrt2, "%s.sqrt2", nm);
    snprintf(c_one, sizeof c_one, "%s.one", nm);
    snprintf(c_half, sizeof c_half, "%s.half", nm);
    initializer(e->graph, c_sqrt2, NULL, 0, &sqrt2, 1);
    initializer(e->graph, c_one, NULL, 0, &one, 1);
    initializer(e->graph, c_half, NULL, 0, &half, 1);
    snprintf(v_div, sizeof v_div, "%s_div", e->out);
    snprintf(v_erf, sizeof v_erf, "%s_erf", e->out);
    snprintf(v_add, sizeof v_add, "%s_add", e->out);
    snprintf(v_mul, sizeof v_mul, "%s_mul", e->out);
    binary(e, "Div", "div", e->in0, c_sqrt2, v_div);
    binary(e, "Erf", "erf", v_div, NULL, v_erf);
    binary(e, "Add", "add", v_erf, c_one, v_add);
    binary(e, "Mul", "mul", e->in0, v_add, v_mul);
    binary(e, "Mul", "half", v_mul, c_half, e->out);
    return CL_OK;
}

/* Softmax(axis -1) of x + bias + mask: the bias a value of the graph, the
 * mask an initializer (the buffer's name and shape); Add broadcasts as
 * classic does (numpy rules). */
static cl_status emit_softmax(emit_ctx *e)
{
    const cl_graph *g = e->g;
    const cl_node *n = e->n;
    char v_b[48], v_m[48];
    const char *z = e->in0;
    if (n->n_in > 1) {
        tensor_name(g, n->in[1], e->in1, sizeof e->in1);
        snprintf(v_b, sizeof v_b, "%s_bias", e->out);
        binary(e, "Add", "add_bias", z, e->in1, v_b);
        z = v_b;
    }
    if (n->n_buf > 0) {
        state_initializer(e, n->buf[0]);
        snprintf(v_m, sizeof v_m, "%s_mask", e->out);
        binary(e, "Add", "add_mask", z, g->tensors[n->buf[0]].name, v_m);
        z = v_m;
    }
    const char *ins[1] = {z};
    cl_pb_writer node;
    node_begin(&node, "Softmax", n->name, ins, 1, e->out);
    attr_int(&node, "axis", -1);
    node_end(e->graph, &node);
    return CL_OK;
}

/* The loss is no part of an inference model. */
static cl_status emit_nothing(emit_ctx *e)
{
    (void)e;
    return CL_OK;
}

/* Per op; NULL where the op has no mapping of its own (a batch norm is
 * written folded into the conv before it). */
static const emit_fn op_emit[CL_OP_COUNT] = {
    [CL_OP_CONV2D] = emit_conv2d,
    [CL_OP_RELU] = emit_relu,
    [CL_OP_MAXPOOL2D] = emit_maxpool2d,
    [CL_OP_GLOBAL_AVGPOOL] = emit_global_avgpool,
    [CL_OP_LINEAR] = emit_linear,
    [CL_OP_ADD] = emit_add,
    [CL_OP_SOFTMAX_CE] = emit_nothing,
    [CL_OP_LAYERNORM] = emit_layernorm,
    [CL_OP_GELU] = emit_gelu,
    [CL_OP_SOFTMAX] = emit_softmax,
    [CL_OP_MATMUL] = emit_matmul,
    [CL_OP_ROW_GATHER] = emit_row_gather,
    [CL_OP_TABLE_GATHER] = emit_table_gather,
    [CL_OP_DROPPATH] = emit_droppath,
    [CL_OP_TOKEN_MEANPOOL] = emit_token_meanpool,
};
CL_OP_TABLE_CHECK(op_emit, 16);

static cl_status build_graph(const cl_graph *g, const cl_onnx_opts *o,
                             cl_pb_writer *graph)
{
    char *folded = cl_alloc_zero((size_t)g->n_nodes, "onnx export");
    char *inited = cl_alloc_zero((size_t)g->n_tensors, "onnx export");
    char *batched = cl_alloc_zero((size_t)g->n_tensors, "onnx export");
    char *qdq = cl_alloc_zero((size_t)g->n_tensors, "onnx export");
    if (!folded || !inited || !batched || !qdq) {
        cl_free(folded);
        cl_free(inited);
        cl_free(batched);
        cl_free(qdq);
        return CL_ERR_NOMEM;
    }
    /* A tensor depends on the batch when the input reaches it (the nodes
     * are in topological order); the rest (a table's gathered rows, the
     * masks) is the same for any batch. */
    batched[g->input] = 1;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            batched[g->nodes[i].out] |= batched[g->nodes[i].in[k]];
    cl_status s = CL_OK;
    cl_pb_put_string(graph, GRAPH_NAME, "classic_resnet");
    for (int i = 0; i < g->n_nodes && s == CL_OK; i++) {
        const cl_node *n = &g->nodes[i];
        if (folded[i])
            continue;
        if (!op_emit[n->op]) {
            s = cl_error(CL_ERR_UNSUPPORTED,
                         "onnx export: node %s (%s) has no ONNX mapping "
                         "here (a batchnorm must follow a conv)",
                         n->name, cl_op_name(n->op));
            break;
        }
        emit_ctx e = {.g = g,
                      .o = o,
                      .i = i,
                      .n = n,
                      .graph = graph,
                      .folded = folded,
                      .inited = inited,
                      .batched = batched,
                      .qdq = qdq,
                      .int8 = !o->dequantized && cl_graph_quant_node(g, i)};
        tensor_name(g, n->in[0], e.in0, sizeof e.in0);
        tensor_name(g, n->out, e.out, sizeof e.out);
        if (e.int8)
            s = act_qdq(&e);
        if (s == CL_OK)
            s = op_emit[n->op](&e);
    }
    cl_free(folded);
    cl_free(inited);
    cl_free(batched);
    cl_free(qdq);
    if (s != CL_OK)
        return s;
    const cl_shape *xs = &g->tensors[g->input].shape;
    int64_t in_dims[4] = {o->batch > 0 ? o->batch : -1, xs->d[1], xs->d[2],
                          xs->d[3]};
    int64_t out_dims[2] = {in_dims[0], g->num_classes};
    value_info(graph, GRAPH_INPUT, "input", in_dims, 4);
    value_info(graph, GRAPH_OUTPUT, "logits", out_dims, 2);
    return graph->err;
}

cl_status cl_interop_export_onnx(const cl_graph *g, const char *path,
                                 const cl_onnx_opts *o)
{
    if (!g->finalized || g->input < 0 || g->logits < 0)
        return cl_error(CL_ERR_ARG, "onnx export: graph not finalized or "
                                    "without input/logits");
    cl_pb_writer graph, head, tail;
    cl_atomic_file af;
    memset(&af, 0, sizeof af);
    cl_pb_writer_init(&graph);
    cl_pb_writer_init(&head);
    cl_pb_writer_init(&tail);
    cl_status s = build_graph(g, o, &graph);
    if (s != CL_OK)
        goto fail;
    /* IR version 8 goes with opset 17 (ONNX 1.12). */
    cl_pb_put_int64(&head, MODEL_IR_VERSION, 8);
    {
        cl_pb_writer op;
        cl_pb_writer_init(&op);
        cl_pb_put_string(&op, OPSET_DOMAIN, "");
        cl_pb_put_int64(&op, OPSET_VERSION, 17);
        cl_pb_put_message(&head, MODEL_OPSET_IMPORT, &op);
        cl_pb_writer_free(&op);
    }
    cl_pb_put_string(&head, MODEL_PRODUCER_NAME, "classic");
    cl_pb_put_string(&head, MODEL_PRODUCER_VERSION, cl_version());
    /* The graph (all the weights) is written from its own buffer after
     * this prefix rather than copied once more. */
    cl_pb_put_len_prefix(&head, MODEL_GRAPH, graph.n);
    for (int i = 0; i < o->n_meta; i++) {
        cl_pb_writer kv;
        cl_pb_writer_init(&kv);
        cl_pb_put_string(&kv, KV_KEY, o->meta[i].key);
        cl_pb_put_string(&kv, KV_VALUE, o->meta[i].value);
        cl_pb_put_message(&tail, MODEL_METADATA_PROPS, &kv);
        cl_pb_writer_free(&kv);
    }
    if ((s = head.err) != CL_OK || (s = tail.err) != CL_OK)
        goto fail;
    if ((s = cl_atomic_open(&af, path)) != CL_OK ||
        (s = cl_atomic_write(&af, head.p, head.n)) != CL_OK ||
        (s = cl_atomic_write(&af, graph.p, graph.n)) != CL_OK ||
        (s = cl_atomic_write(&af, tail.p, tail.n)) != CL_OK)
        goto fail;
    s = cl_atomic_commit(&af);
    cl_pb_writer_free(&graph);
    cl_pb_writer_free(&head);
    cl_pb_writer_free(&tail);
    return s;
fail:
    cl_atomic_abort(&af);
    cl_pb_writer_free(&graph);
    cl_pb_writer_free(&head);
    cl_pb_writer_free(&tail);
    return s;
}
