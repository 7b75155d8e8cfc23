/* Quantized ResNet and Swin graphs exported as QDQ ONNX: one symbolic-batch
 * file run by ONNX Runtime at batch 1 and 7, held to classic's reference
 * kernels running the same graph in f32 with each int8 node's input
 * quantized and dequantized by the scheme; the file's QuantizeLinear/
 * DequantizeLinear nodes and INT8 weights read back; weights that are not
 * q * scale refused; export's --precision on f32 and quantized files; a
 * tiny trained model through classic quantize, export and ORT against
 * classic's int8 plan.
 * ctest-labels: interop onednn cli */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/ref_ops.h"
#include "core/error.h"
#include "graph/graph.h"
#include "harness.h"
#include "interop/interop.h"
#include "interop/protobuf.h"
#include "io/checkpoint.h"
#include "models/arch.h"
#include "tiny_run.h"
#include "train/model.h"

enum { S = 32, K = 10, CALIB = 8 };

/* n images of side S, different for every `salt` (about N(0, 1), as
 * normalised pixels are). */
static float *make_images(int n, int salt)
{
    const size_t nx = (size_t)n * 3 * S * S;
    float *x = malloc(nx * sizeof(float));
    if (!x)
        return NULL;
    for (size_t j = 0; j < nx; j++)
        x[j] = (float)(1.3 * sin(0.11 * (double)j + salt) +
                       0.4 * cos(0.031 * (double)j * (salt + 1)));
    return x;
}

/* The scheme's fake quantization of v by scale s into u8 or s8: what
 * QuantizeLinear then DequantizeLinear compute (x / s in float, rounded
 * half to even, saturated, times s). */
static float fake_quant(float v, float s, int is_signed)
{
    const float lo = is_signed ? -128.0f : 0.0f;
    const float hi = is_signed ? 127.0f : 255.0f;
    float q = nearbyintf(v / s);
    q = q < lo ? lo : q > hi ? hi : q;
    return q * s;
}

/* How far another implementation's float rounding may move a value before
 * it is quantized, in steps of its tensor's scale: ORT's f32 logits agree
 * with classic's to about 1e-6 of their size (docs/interop.md), and a
 * value of up to 127 or 255 steps then moves by about 1e-4 step. */
#define JITTER_STEPS 1e-4

/* A number in [-1, 1) from (seed, j) (splitmix64). */
static double jitter_unit(uint64_t seed, uint64_t j)
{
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + j + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / (double)(1ull << 52) - 1.0;
}

/* g's forward on the reference kernels with every activation kept
 * (act[t], numel of tensor t, for the input and each node's output).  fq
 * 1 quantizes and dequantizes each int8 node's input first (the numbers
 * the QDQ file and classic's int8 plan stand for); fq k > 1 does so after
 * moving each value by up to JITTER_STEPS of its step, drawn from seed k:
 * what ties alone can do to the logits when another implementation rounds
 * its sums differently; 0 runs f32 throughout. */
static cl_status forward_all(cl_graph *g, const float *x, int fq, float **act)
{
    cl_status s = CL_OK;
    const size_t nin = (size_t)cl_graph_numel(g, g->input);
    act[g->input] = malloc(nin * sizeof(float));
    if (!act[g->input])
        return CL_ERR_NOMEM;
    memcpy(act[g->input], x, nin * sizeof(float));
    for (int i = 0; i < g->n_nodes && s == CL_OK; i++) {
        const cl_node *n = &g->nodes[i];
        if (n->op == CL_OP_SOFTMAX_CE)
            continue;
        act[n->out] = calloc((size_t)cl_graph_numel(g, n->out), sizeof(float));
        float *tmp = NULL;
        cl_ref_saved sv;
        size_t nsums = 0;
        memset(&sv, 0, sizeof sv);
        s = cl_ref_saved_alloc(&sv, g, n, 0, &nsums);
        double *sums = calloc(nsums + 1, sizeof(double));
        cl_ref_args a = {.g = g, .n = n, .sv = &sv, .sums = sums};
        for (int k = 0; k < n->n_in; k++)
            a.x[k] = act[n->in[k]];
        a.y = act[n->out];
        if (fq && cl_graph_quant_node(g, i)) {
            const int t = n->in[0];
            const size_t nt = (size_t)cl_graph_numel(g, t);
            tmp = malloc(nt * sizeof(float));
            const float sc = g->quant->act_scale[t];
            for (size_t j = 0; tmp && j < nt; j++) {
                float v = act[t][j];
                if (fq > 1)
                    v += (float)(JITTER_STEPS * sc *
                                 jitter_unit((uint64_t)fq * 1000003u + i, j));
                tmp[j] = fake_quant(v, sc, g->quant->act_signed[t]);
            }
            a.x[0] = tmp;
        }
        const int quant = fq && cl_graph_quant_node(g, i);
        if (s == CL_OK && (!a.y || !sums || (quant && !tmp)))
            s = CL_ERR_NOMEM;
        if (s == CL_OK)
            s = cl_ref_kernels[n->op].forward(&a);
        cl_ref_saved_free(&sv);
        free(sums);
        free(tmp);
    }
    return s;
}

static void free_all(const cl_graph *g, float **act)
{
    for (int t = 0; t < g->n_tensors; t++) {
        free(act[t]);
        act[t] = NULL;
    }
}

/* g's logits (batch x K) by forward_all. */
static cl_status logits_of(cl_graph *g, const float *x, int fq, float *out)
{
    float **act = calloc((size_t)g->n_tensors, sizeof(float *));
    if (!act)
        return CL_ERR_NOMEM;
    cl_status s = forward_all(g, x, fq, act);
    if (s == CL_OK)
        memcpy(out, act[g->logits],
               (size_t)cl_graph_numel(g, g->logits) * sizeof(float));
    free_all(g, act);
    free(act);
    return s;
}

static float max_abs(const float *v, size_t n)
{
    float m = 0;
    for (size_t j = 0; j < n; j++)
        m = fabsf(v[j]) > m ? fabsf(v[j]) : m;
    return m;
}

/* The BN node reading node i's output alone, or -1. */
static int bn_of(const cl_graph *g, int i)
{
    const int t = g->nodes[i].out;
    for (int j = i + 1; j < g->n_nodes; j++)
        if (g->nodes[j].op == CL_OP_BATCHNORM2D && g->nodes[j].in[0] == t)
            return j;
    return -1;
}

/* Gives BN node b random statistics, folds them into the conv weights w
 * (out rows of per) and leaves b as the identity plus the folded bias. */
static void fold_random_bn(cl_graph *g, const cl_node *b, float *w, int out,
                           size_t per)
{
    float *gamma = cl_graph_param(g, b->param[0]);
    float *beta = cl_graph_param(g, b->param[1]);
    float *mean = cl_graph_buffer(g, b->buf[0]);
    float *var = cl_graph_buffer(g, b->buf[1]);
    const float eps = b->attr.batchnorm2d.eps;
    for (int o = 0; o < out; o++) {
        const double gm = 0.5 + 0.1 * (o % 7), mu = 0.05 * (o % 5);
        const double vr = 0.5 + 0.2 * (o % 3);
        const double sc = gm / sqrt(vr + eps);
        for (size_t k = 0; k < per; k++)
            w[o * per + k] = (float)(w[o * per + k] * sc);
        beta[o] = (float)(0.02 * (o % 11) - 0.1 - mu * sc);
        gamma[o] = 1.0f;
        mean[o] = 0.0f;
        var[o] = 1.0f - eps;
    }
}

/* arch at side S, K classes, as `classic quantize` leaves it: random BN
 * statistics folded into the convs and each BN left as the identity plus
 * a bias (gamma 1, mean 0, var + eps == 1, beta the folded bias); the
 * weights of every conv (but the first, the stem or Swin's patch
 * embedding, unless stem_int8) and of every linear quantized per output
 * channel to s8 by max |w| / 127 and stored as q * s; activation scales
 * by min-max over CALIB images of the f32 forward (s8 where the tensor
 * goes negative, u8 otherwise). */
static cl_status build_quantized(cl_graph *g, const char *arch, int batch,
                                 int stem_int8)
{
    cl_arch a;
    CL_TRY(cl_arch_parse(arch, NULL, &a));
    cl_arch_set_io(&a, 3, K);
    CL_TRY(cl_graph_init(g, batch));
    cl_status s = cl_arch_build(g, &a, S, S, 0, 0.0f);
    if (s == CL_OK)
        s = cl_arch_init(g, &a, 17);
    if (s == CL_OK)
        s = cl_graph_quant_init(g);
    if (s != CL_OK)
        return s;
    int first_conv = 1;
    for (int i = 0; i < g->n_nodes; i++) {
        const cl_node *n = &g->nodes[i];
        int out = 0;
        size_t per = 0;
        float *w = NULL;
        if (n->op == CL_OP_CONV2D) {
            const int bn = bn_of(g, i);
            out = n->attr.conv2d.out_ch;
            w = cl_graph_param(g, n->param[0]);
            per = (size_t)cl_graph_numel(g, n->param[0]) / (size_t)out;
            if (bn >= 0)
                fold_random_bn(g, &g->nodes[bn], w, out, per);
            if (first_conv && !stem_int8) {
                first_conv = 0;
                continue;
            }
            first_conv = 0;
        } else if (n->op == CL_OP_LINEAR) {
            out = n->attr.linear.out_features;
            w = cl_graph_param(g, n->param[0]);
            per = (size_t)n->attr.linear.in_features;
        } else {
            continue;
        }
        float *ws = cl_graph_quant_wscale(g, i);
        for (int o = 0; o < out; o++) {
            ws[o] = max_abs(w + o * per, per) / 127.0f;
            for (size_t k = 0; k < per; k++)
                w[o * per + k] = nearbyintf(w[o * per + k] / ws[o]) * ws[o];
        }
    }
    /* Calibration: a graph of CALIB images with these weights. */
    cl_graph c;
    float *x = make_images(CALIB, 99);
    float **act = NULL;
    if (!x)
        return CL_ERR_NOMEM;
    CL_TRY(cl_graph_init(&c, CALIB));
    if ((s = cl_arch_build(&c, &a, S, S, 0, 0.0f)) == CL_OK &&
        (s = cl_graph_copy_state(&c, g)) == CL_OK) {
        act = calloc((size_t)c.n_tensors, sizeof(float *));
        s = act ? forward_all(&c, x, 0, act) : CL_ERR_NOMEM;
    }
    for (int i = 0; i < g->n_nodes && s == CL_OK; i++) {
        const float *ws = cl_graph_quant_wscale(g, i);
        if (!ws || ws[0] == 0.0f)
            continue;
        const int t = g->nodes[i].in[0];
        const size_t nt = (size_t)cl_graph_numel(&c, t);
        float lo = 0, hi = 0;
        for (size_t j = 0; j < nt; j++) {
            lo = act[t][j] < lo ? act[t][j] : lo;
            hi = act[t][j] > hi ? act[t][j] : hi;
        }
        g->quant->act_signed[t] = lo < 0;
        g->quant->act_scale[t] = lo < 0 ? fmaxf(hi, -lo) / 127.0f : hi / 255.0f;
    }
    if (act)
        free_all(&c, act);
    free(act);
    free(x);
    cl_graph_free(&c);
    return s;
}

/* Node and initializer counts of an ONNX file, read back with the
 * protobuf reader; q8 receives each INT8 initializer's bytes by name. */
typedef struct onnx_counts {
    int quantize, dequantize, conv, gemm, int8_inits, uint8_inits;
    int dq_axis0, dq_axis1; /* DequantizeLinear nodes with axis 0, 1 */
} onnx_counts;

static int str_is(const cl_pb_field *f, const char *s)
{
    return f->len == strlen(s) && memcmp(f->ptr, s, f->len) == 0;
}

static void count_node(const cl_pb_reader *gr, const cl_pb_field *f,
                       onnx_counts *c)
{
    cl_pb_reader nr;
    cl_pb_field h;
    int more = 1, dq = 0, axis0 = 0, axis1 = 0;
    cl_pb_reader_sub(gr, f, &nr);
    while (cl_pb_next(&nr, &h, &more) == CL_OK && more) {
        if (h.number == 4 && h.wire == CL_PB_LEN) {
            c->quantize += str_is(&h, "QuantizeLinear");
            dq = str_is(&h, "DequantizeLinear");
            c->dequantize += dq;
            c->conv += str_is(&h, "Conv");
            c->gemm += str_is(&h, "Gemm");
        } else if (h.number == 5 && h.wire == CL_PB_LEN) {
            cl_pb_reader ar;
            cl_pb_field k;
            int m2 = 1, is_axis = 0;
            int64_t v = -1;
            cl_pb_reader_sub(&nr, &h, &ar);
            while (cl_pb_next(&ar, &k, &m2) == CL_OK && m2) {
                if (k.number == 1 && k.wire == CL_PB_LEN)
                    is_axis = str_is(&k, "axis");
                else if (k.number == 3 && k.wire == CL_PB_VARINT)
                    v = (int64_t)k.v;
            }
            axis0 |= is_axis && v == 0;
            axis1 |= is_axis && v == 1;
        }
    }
    c->dq_axis0 += dq && axis0;
    c->dq_axis1 += dq && axis1;
}

/* Reads path's graph; *want_q (may be NULL) names an INT8 initializer
 * whose bytes are copied to q (n of them), *found set when it was. */
static int read_onnx(const char *path, onnx_counts *c, const char *want,
                     int8_t *q, size_t n, int *found)
{
    size_t len = 0;
    char *buf = cl_test_read_file(path, &len);
    if (!buf)
        return -1;
    memset(c, 0, sizeof *c);
    cl_pb_reader mr, gr;
    cl_pb_field f;
    int more = 1;
    cl_pb_reader_init(&mr, buf, len, 0, path);
    while (cl_pb_next(&mr, &f, &more) == CL_OK && more) {
        if (f.number != 7 || f.wire != CL_PB_LEN)
            continue;
        cl_pb_reader_sub(&mr, &f, &gr);
        cl_pb_field h;
        int m2 = 1;
        while (cl_pb_next(&gr, &h, &m2) == CL_OK && m2) {
            if (h.number == 1 && h.wire == CL_PB_LEN)
                count_node(&gr, &h, c);
            if (h.number != 5 || h.wire != CL_PB_LEN)
                continue;
            cl_pb_reader tr;
            cl_pb_field k;
            int m3 = 1, type = 0, named = 0;
            const uint8_t *raw = NULL;
            size_t nraw = 0;
            cl_pb_reader_sub(&gr, &h, &tr);
            while (cl_pb_next(&tr, &k, &m3) == CL_OK && m3) {
                if (k.number == 2 && k.wire == CL_PB_VARINT)
                    type = (int)k.v;
                else if (k.number == 8 && k.wire == CL_PB_LEN)
                    named = want && str_is(&k, want);
                else if (k.number == 9 && k.wire == CL_PB_LEN) {
                    raw = k.ptr;
                    nraw = k.len;
                }
            }
            c->int8_inits += type == 3;
            c->uint8_inits += type == 2;
            if (named && type == 3 && nraw == n) {
                memcpy(q, raw, n);
                *found = 1;
            }
        }
    }
    free(buf);
    return 0;
}

/* Runs model with ONNX Runtime on x (n images) into logits (n x K). */
static float *ort_logits(const char *model, const float *x, int n)
{
    char cmd[4096];
    const char *xin = cl_test_path("x.bin");
    const char *yout = cl_test_path("y.bin");
    if (cl_test_write_floats(xin, x, (size_t)n * 3 * S * S) != 0)
        return NULL;
    snprintf(cmd, sizeof cmd,
             CL_SOURCE_DIR "/tests/onnx/setup.sh " CL_BINARY_DIR "/onnx");
    if (cl_test_run(cmd) != 0)
        return NULL;
    snprintf(cmd, sizeof cmd,
             "node " CL_SOURCE_DIR "/tests/onnx/run.js " CL_BINARY_DIR
             "/onnx %s %s %d,3,%d,%d %s",
             model, xin, n, S, S, yout);
    if (cl_test_run(cmd) != 0)
        return NULL;
    return cl_test_read_floats(yout, (size_t)n * K);
}

static int argmax(const float *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The margin of the top-1 of v over the runner-up. */
static float margin(const float *v, int n)
{
    const int b = argmax(v, n);
    float second = -INFINITY;
    for (int i = 0; i < n; i++)
        if (i != b && v[i] > second)
            second = v[i];
    return v[b] - second;
}

/* The int8 nodes of g and the distinct tensors they read. */
static void int8_census(const cl_graph *g, int *nodes, int *tensors)
{
    char *seen = calloc((size_t)g->n_tensors, 1);
    *nodes = *tensors = 0;
    for (int i = 0; i < g->n_nodes && seen; i++) {
        if (!cl_graph_quant_node(g, i))
            continue;
        ++*nodes;
        *tensors += !seen[g->nodes[i].in[0]];
        seen[g->nodes[i].in[0]] = 1;
    }
    free(seen);
}

/* How ORT's logits of a batch compare with the reference's. */
typedef struct agreement {
    int images, exact, decided, decided_agree, top1_agree;
    double worst; /* max abs error over the images, over the largest logit */
    /* the largest ratio, over the batches, of ORT's max abs error to that
     * of the jittered reference (forward_all's fq > 1), two draws */
    double noise_ratio;
} agreement;

/* ORT runs the same numbers as the fake-quantized reference forward (with
 * graph optimisations off, Q and DQ in float as written), so on an image
 * they differ by the float rounding of the sums, about 1e-7 of the logits
 * (TOL_EXACT), unless that rounding moves a value across a rounding
 * boundary of its quantization (a tie): then that value moves by a whole
 * step, and the logits by what one step there is worth.  Which images
 * meet a tie depends on the CPU's summation order, so the tolerance for
 * them is measured: the reference run again with every value moved by up
 * to JITTER_STEPS before it is quantized shows what ties alone do, and
 * ORT must stay within three times that (report()).  A file that
 * quantizes a tensor wrongly or not at all misses TOL_EXACT on every
 * image (checked: the activations' quantization moves the logits by far
 * more). */
#define TOL_EXACT 1e-5

static void compare_batch(cl_graph *g, const char *arch, const char *model,
                          int n, int salt, agreement *r)
{
    cl_arch a;
    cl_graph gb;
    REQUIRE_OK(cl_arch_parse(arch, NULL, &a));
    cl_arch_set_io(&a, 3, K);
    REQUIRE_OK(cl_graph_init(&gb, n));
    REQUIRE_OK(cl_arch_build(&gb, &a, S, S, 0, 0.0f));
    REQUIRE_OK(cl_graph_copy_state(&gb, g));
    float *x = make_images(n, salt);
    float *fq = malloc((size_t)n * K * sizeof(float));
    float *f32 = malloc((size_t)n * K * sizeof(float));
    REQUIRE(x && fq && f32);
    float *jit = malloc((size_t)n * K * sizeof(float));
    REQUIRE(jit);
    REQUIRE_OK(logits_of(&gb, x, 1, fq));
    REQUIRE_OK(logits_of(&gb, x, 0, f32));
    double noise = 0, err = 0;
    for (int d = 2; d <= 3; d++) {
        REQUIRE_OK(logits_of(&gb, x, d, jit));
        for (size_t j = 0; j < (size_t)n * K; j++)
            noise = fmax(noise, fabs((double)jit[j] - fq[j]));
    }
    free(jit);
    float *ort = ort_logits(model, x, n);
    REQUIRE(ort);
    for (size_t j = 0; j < (size_t)n * K; j++)
        err = fmax(err, fabs((double)ort[j] - fq[j]));
    if (err > TOL_EXACT * max_abs(fq, (size_t)n * K))
        r->noise_ratio = fmax(r->noise_ratio, err / fmax(noise, 1e-30));
    const double scale = max_abs(fq, (size_t)n * K);
    double qerr = 0;
    for (size_t j = 0; j < (size_t)n * K; j++)
        qerr = fmax(qerr, fabs((double)f32[j] - fq[j]));
    /* Without this the test could not tell a QDQ file from a float one. */
    CHECK(qerr > 10 * TOL_EXACT * scale);
    for (int i = 0; i < n; i++) {
        const float *o = ort + (size_t)i * K, *f = fq + (size_t)i * K;
        double e = 0;
        for (int j = 0; j < K; j++)
            e = fmax(e, fabs((double)o[j] - f[j]));
        const int same = argmax(o, K) == argmax(f, K);
        r->images++;
        r->exact += e <= TOL_EXACT * scale;
        r->top1_agree += same;
        if (margin(f, K) > 2 * e) {
            r->decided++;
            r->decided_agree += same;
        }
        r->worst = fmax(r->worst, e / scale);
    }
    printf("  batch %d: largest logit %.3g, the activations' quantization "
           "moves them by up to %.3g, ties alone (the jittered reference) by "
           "%.3g; ORT differs by %.3g\n",
           n, scale, qerr, noise, err);
    free(ort);
    free(x);
    free(fq);
    free(f32);
    cl_graph_free(&gb);
}

/* Prints r and checks it: every image picks the reference's top-1 where
 * the reference's margin exceeds twice its error; ORT is no further from
 * the reference than three times what ties alone do (the jittered
 * reference); with `exact`, at least half the images are within TOL_EXACT
 * (a ResNet, where ties are rare; Swin's many s8 tensors after layernorm,
 * GELU and attention meet several on most images). */
static void report(const char *what, const agreement *r, int exact)
{
    printf("%s: ORT QDQ vs classic fake-quantized f32: %d/%d images within "
           "%.0e of the largest logit (the rest met a quantization tie), "
           "worst %.3g, %.2f times what ties alone do; top-1 agrees on "
           "%d/%d (%d/%d of those decided beyond twice the error)\n",
           what, r->exact, r->images, TOL_EXACT, r->worst, r->noise_ratio,
           r->top1_agree, r->images, r->decided_agree, r->decided);
    if (exact)
        CHECK(2 * r->exact >= r->images);
    CHECK(r->noise_ratio <= 3.0);
    CHECK(r->decided_agree == r->decided);
}

/* The QDQ file of a quantized resnet18 (stem in f32 unless stem_int8):
 * its nodes and INT8 weights as the graph says; ORT at batch 1 (three
 * runs, three images) and batch 7 against the fake-quantized reference
 * forward (compare_batch). */
static void qdq_case(int stem_int8)
{
    const char *model = cl_test_path("q.onnx");
    cl_graph g;
    REQUIRE_OK(build_quantized(&g, "resnet18", 1, stem_int8));
    int nq = 0, nt = 0;
    int8_census(&g, &nq, &nt);
    CHECK(nq == (stem_int8 ? 21 : 20)); /* 20 convs and fc */
    cl_onnx_opts o = {.batch = 0};
    REQUIRE_OK(cl_interop_export_onnx(&g, model, &o));

    /* The file: a Q/DQ pair per tensor an int8 node reads, one DQ
     * (axis 0) and one INT8 initializer per int8 node's weight. */
    onnx_counts c;
    int found = 0;
    const int fc = g.n_nodes - 2; /* fc, then the loss */
    REQUIRE(g.nodes[fc].op == CL_OP_LINEAR);
    const size_t nw = (size_t)cl_graph_numel(&g, g.nodes[fc].param[0]);
    int8_t *q = malloc(nw);
    REQUIRE(q);
    REQUIRE(read_onnx(model, &c, "fc.weight.quantized", q, nw, &found) == 0);
    printf("resnet18 int8 (stem %s): %d int8 nodes reading %d tensors; "
           "file: %d QuantizeLinear, %d DequantizeLinear (%d per channel), "
           "%d INT8 and %d UINT8 initializers, %d Conv, %d Gemm\n",
           stem_int8 ? "int8" : "f32", nq, nt, c.quantize, c.dequantize,
           c.dq_axis0, c.int8_inits, c.uint8_inits, c.conv, c.gemm);
    CHECK(c.quantize == nt);
    CHECK(c.dequantize == nt + nq);
    CHECK(c.dq_axis0 == nq);
    CHECK(c.int8_inits == nq + nq + (stem_int8 ? 1 : 0)); /* q, zero pt */
    CHECK(c.uint8_inits == nt - (stem_int8 ? 1 : 0));
    CHECK(c.conv == 20 && c.gemm == 1);
    /* fc's INT8 weights are round(w / s) of the graph's. */
    CHECK(found);
    const float *w = cl_graph_param(&g, g.nodes[fc].param[0]);
    const float *ws = cl_graph_quant_wscale(&g, fc);
    const size_t per = (size_t)g.nodes[fc].attr.linear.in_features;
    size_t bad = 0;
    for (size_t j = 0; j < nw; j++)
        bad += q[j] != (int8_t)nearbyintf(w[j] / ws[j / per]);
    CHECK(bad == 0);
    free(q);

    agreement one = {0}, seven = {0};
    for (int k = 0; k < 3; k++)
        compare_batch(&g, "resnet18", model, 1, 10 + k, &one);
    report("batch 1 (3 runs)", &one, 1);
    compare_batch(&g, "resnet18", model, 7, 1, &seven);
    report("batch 7", &seven, 1);
    cl_graph_free(&g);
}

CL_TEST(resnet18_qdq_runs_in_ort_at_batch_1_and_7)
{
    qdq_case(0);
}

/* The stem in int8 too: the image (negative values) through an s8 Q/DQ
 * pair. */
CL_TEST(resnet18_qdq_stem_int8_s8_input)
{
    qdq_case(1);
}

/* Swin's linear layers in int8 (qkv, proj, the MLP's, patch merging's
 * reduction, the head; the patch embedding stays f32): the token linears
 * are MatMul over (in, out) weights, dequantized along axis 1; their
 * inputs (layernorm, GELU, attention outputs) are s8.  One symbolic-batch
 * file run at batch 1 and 7 as the ResNet's. */
CL_TEST(swin_micro_qdq_linears)
{
    const char *model = cl_test_path("sq.onnx");
    cl_graph g;
    REQUIRE_OK(build_quantized(&g, "swin_micro", 1, 0));
    int nq = 0, nt = 0, nl = 0;
    int8_census(&g, &nq, &nt);
    for (int i = 0; i < g.n_nodes; i++)
        nl += g.nodes[i].op == CL_OP_LINEAR;
    CHECK(nq == nl);
    cl_onnx_opts o = {.batch = 0};
    REQUIRE_OK(cl_interop_export_onnx(&g, model, &o));
    onnx_counts c;
    REQUIRE(read_onnx(model, &c, NULL, NULL, 0, NULL) == 0);
    printf("swin_micro int8: %d int8 linears reading %d tensors; file: %d "
           "QuantizeLinear, %d DequantizeLinear (%d along axis 0, %d along "
           "1), %d INT8 and %d UINT8 initializers, %d Gemm\n",
           nq, nt, c.quantize, c.dequantize, c.dq_axis0, c.dq_axis1,
           c.int8_inits, c.uint8_inits, c.gemm);
    CHECK(c.quantize == nt && c.dequantize == nt + nq);
    CHECK(c.dq_axis0 == c.gemm && c.dq_axis0 + c.dq_axis1 == nq);
    CHECK(c.int8_inits + c.uint8_inits == 2 * nq + nt);
    agreement one = {0}, seven = {0};
    for (int k = 0; k < 3; k++)
        compare_batch(&g, "swin_micro", model, 1, 10 + k, &one);
    report("swin_micro batch 1 (3 runs)", &one, 0);
    compare_batch(&g, "swin_micro", model, 7, 1, &seven);
    report("swin_micro batch 7", &seven, 0);
    cl_graph_free(&g);
}

/* The f32 export of the same graph (o.dequantized) has no Q/DQ and runs
 * its dequantized weights, held to the float forward as the f32 export
 * tests hold theirs (1e-4 of the largest logit). */
CL_TEST(resnet18_quantized_as_f32)
{
    const char *model = cl_test_path("f.onnx");
    cl_graph g;
    REQUIRE_OK(build_quantized(&g, "resnet18", 1, 0));
    cl_onnx_opts o = {.batch = 0, .dequantized = 1};
    REQUIRE_OK(cl_interop_export_onnx(&g, model, &o));
    onnx_counts c;
    REQUIRE(read_onnx(model, &c, NULL, NULL, 0, NULL) == 0);
    CHECK(c.quantize == 0 && c.dequantize == 0 && c.int8_inits == 0);
    float *x = make_images(1, 3);
    float f32[K];
    REQUIRE(x);
    REQUIRE_OK(logits_of(&g, x, 0, f32));
    float *ort = ort_logits(model, x, 1);
    REQUIRE(ort);
    const double e = cl_test_rel_err(ort, f32, K);
    printf("quantized resnet18 exported as f32: ORT vs classic f32 max rel "
           "err %.3g\n",
           e);
    CHECK(e < 1e-4);
    free(ort);
    free(x);
    cl_graph_free(&g);
}

/* An int8 node whose weights are not q * scale (one moved by 0.3 of its
 * channel's scale, one beyond 127 steps) is refused naming the node, and
 * no file is left. */
CL_TEST(weights_off_the_grid_refused)
{
    const char *model = cl_test_path("bad.onnx");
    cl_graph g;
    REQUIRE_OK(build_quantized(&g, "resnet18", 1, 0));
    const int fc = g.n_nodes - 2;
    float *w = cl_graph_param(&g, g.nodes[fc].param[0]);
    const float s0 = cl_graph_quant_wscale(&g, fc)[0];
    cl_onnx_opts o = {.batch = 0};
    const float keep = w[3];
    w[3] += 0.3f * s0;
    CHECK_ERR(cl_interop_export_onnx(&g, model, &o), CL_ERR_FORMAT,
              "node fc: weight 3 of output channel 0");
    w[3] = 128.0f * s0;
    CHECK_ERR(cl_interop_export_onnx(&g, model, &o), CL_ERR_FORMAT,
              "not an integer in [-127, 127]");
    FILE *f = fopen(model, "rb");
    CHECK(f == NULL);
    if (f)
        fclose(f);
    /* The same weights export as f32, where no grid applies. */
    cl_onnx_opts f32 = {.batch = 0, .dequantized = 1};
    CHECK_OK(cl_interop_export_onnx(&g, model, &f32));
    w[3] = keep;
    CHECK_OK(cl_interop_export_onnx(&g, model, &o));
    cl_graph_free(&g);
}

/* classic export's --precision on an f32 checkpoint: int8 refused naming
 * classic quantize, bf16 refused, f32 and none write the f32 file. */
CL_TEST(cli_precision_on_f32_weights)
{
    const char *ck = cl_test_path("f.safetensors");
    const char *out = cl_test_path("f.onnx");
    char cmd[4096];
    cl_graph g;
    cl_arch a;
    REQUIRE_OK(cl_arch_parse("resnet18", NULL, &a));
    cl_arch_set_io(&a, 3, K);
    REQUIRE_OK(cl_graph_init(&g, 1));
    REQUIRE_OK(cl_arch_build(&g, &a, S, S, 0, 0.0f));
    REQUIRE_OK(cl_arch_init(&g, &a, 5));
    cl_ckpt_kv meta[] = {{"arch", "resnet18"},
                         {"stem", cl_arch_stem(&a)},
                         {"in_channels", "3"},
                         {"num_classes", "10"},
                         {"image_size", "32"}};
    REQUIRE_OK(cl_ckpt_save_model(ck, &g, meta, 5));
    cl_graph_free(&g);
    snprintf(cmd, sizeof cmd,
             "export --checkpoint %s --onnx %s --precision int8", ck, out);
    CHECK(cl_test_classic(cmd) == 1);
    CHECK(strstr(cl_test_out, "classic quantize") != NULL);
    FILE *f = fopen(out, "rb");
    CHECK(f == NULL);
    if (f)
        fclose(f);
    snprintf(cmd, sizeof cmd,
             "export --checkpoint %s --onnx %s --precision bf16", ck, out);
    CHECK(cl_test_classic(cmd) == 2);
    snprintf(cmd, sizeof cmd,
             "export --checkpoint %s --onnx %s --precision f32", ck, out);
    CHECK(cl_test_classic(cmd) == 0);
    onnx_counts c;
    REQUIRE(read_onnx(out, &c, NULL, NULL, 0, NULL) == 0);
    CHECK(c.conv == 20 && c.quantize == 0 && c.dequantize == 0);
}

/* The tiny trained model of tiny_run.h through `classic quantize` (its
 * defaults: conv1 and fc stay f32) and `classic export`: the file is QDQ
 * by default and with --precision int8 (the same bytes), f32 with
 * --precision f32 (said on stderr); ORT runs it on 256 images against
 * classic's int8 plan (oneDNN's int8 primitives) on the same inputs.  The
 * two round differently only where a value lies within the float rounding
 * of a quantization boundary, as in compare_batch, so top-1 is required
 * to agree wherever classic's margin exceeds twice the error on that
 * image, and at least 99% overall; the agreement and the logits' errors
 * are printed. */
CL_TEST(quantized_file_export_and_ort_vs_classic_int8)
{
    enum { N = 256, B = 64 };
    const char *rel = tiny_run();
    REQUIRE(rel != NULL);
    char args[4096];
    const char *ck = cl_test_path(rel);
    const char *q = cl_test_path("q.safetensors");
    const char *qo = cl_test_path("q.onnx");
    const char *qi = cl_test_path("qi.onnx");
    const char *fo = cl_test_path("qf.onnx");
    snprintf(args, sizeof args,
             "quantize --checkpoint %s --calib %s --samples 16 --batch_size "
             "4 --out %s",
             ck, cl_test_path("folder"), q);
    REQUIRE(cl_test_classic(args) == 0);
    snprintf(args, sizeof args, "export --checkpoint %s --onnx %s", q, qo);
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "int8 as QDQ") != NULL);
    snprintf(args, sizeof args,
             "export --checkpoint %s --onnx %s --precision int8", q, qi);
    REQUIRE(cl_test_classic(args) == 0);
    snprintf(args, sizeof args,
             "export --checkpoint %s --onnx %s --precision f32", q, fo);
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "dequantized weights") != NULL);
    size_t n1 = 0, n2 = 0;
    char *b1 = cl_test_read_file(qo, &n1), *b2 = cl_test_read_file(qi, &n2);
    REQUIRE(b1 && b2);
    CHECK(n1 == n2 && memcmp(b1, b2, n1) == 0);
    free(b1);
    free(b2);
    onnx_counts c, f;
    REQUIRE(read_onnx(qo, &c, NULL, NULL, 0, NULL) == 0);
    REQUIRE(read_onnx(fo, &f, NULL, NULL, 0, NULL) == 0);
    printf("quantized tiny resnet18: QDQ file %d QuantizeLinear, %d "
           "DequantizeLinear, %d INT8 initializers; f32 file %d / %d / %d\n",
           c.quantize, c.dequantize, c.int8_inits, f.quantize, f.dequantize,
           f.int8_inits);
    CHECK(c.quantize > 0 && c.dq_axis0 == 19 && c.int8_inits == 2 * 19);
    CHECK(f.quantize == 0 && f.dequantize == 0 && f.int8_inits == 0);

    /* classic at int8 on N images, batches of B; ORT on all at once. */
    cl_model m;
    REQUIRE_OK(cl_model_open_weights(&m, q, NULL, B, "onednn", CL_PLAN_INFER, 0,
                                     0, CL_PRECISION_INT8));
    const cl_shape *in = &m.g.tensors[m.g.input].shape;
    const int C = (int)in->d[1], H = (int)in->d[2], W = (int)in->d[3];
    const int k = m.g.num_classes;
    const size_t per = (size_t)C * H * W;
    float *x = malloc((size_t)N * per * sizeof(float));
    float *want = malloc((size_t)N * k * sizeof(float));
    REQUIRE(x && want);
    for (size_t j = 0; j < (size_t)N * per; j++)
        x[j] = (float)(1.3 * sin(0.0137 * (double)j) +
                       0.6 * cos(0.00071 * (double)j * (double)(j % 7)));
    for (int b = 0; b < N; b += B) {
        CHECK_OK(cl_backend_set_input(m.be, x + (size_t)b * per, NULL, NULL));
        CHECK_OK(cl_backend_forward(m.be, 0, NULL));
        CHECK_OK(cl_backend_read(m.be, m.g.logits, want + (size_t)b * k));
    }
    cl_model_close(&m);
    /* The scheme's numbers: the file's graph (dequantized weights, its
     * scales) on the reference kernels with fake-quantized inputs; and
     * the same without quantizing the activations. */
    float *ref = malloc((size_t)N * k * sizeof(float));
    float *f32 = malloc((size_t)N * k * sizeof(float));
    REQUIRE(ref && f32);
    REQUIRE_OK(cl_model_open_weights(&m, q, NULL, B, NULL, CL_PLAN_INFER, 0, 0,
                                     CL_PRECISION_F32));
    REQUIRE(m.g.quant != NULL);
    for (int b = 0; b < N; b += B) {
        REQUIRE_OK(
            logits_of(&m.g, x + (size_t)b * per, 1, ref + (size_t)b * k));
        REQUIRE_OK(
            logits_of(&m.g, x + (size_t)b * per, 0, f32 + (size_t)b * k));
    }
    cl_model_close(&m);
    char cmd[4096];
    const char *xin = cl_test_path("xe.bin"), *yout = cl_test_path("ye.bin");
    REQUIRE(cl_test_write_floats(xin, x, (size_t)N * per) == 0);
    snprintf(cmd, sizeof cmd,
             CL_SOURCE_DIR "/tests/onnx/setup.sh " CL_BINARY_DIR "/onnx");
    REQUIRE(cl_test_run(cmd) == 0);
    snprintf(cmd, sizeof cmd,
             "node " CL_SOURCE_DIR "/tests/onnx/run.js " CL_BINARY_DIR
             "/onnx %s %s %d,%d,%d,%d %s",
             qo, xin, N, C, H, W, yout);
    REQUIRE(cl_test_run(cmd) == 0);
    float *ort = cl_test_read_floats(yout, (size_t)N * k);
    REQUIRE(ort);
    const double scale = max_abs(want, (size_t)N * k);
    int agree = 0, decided = 0, decided_agree = 0;
    double worst = 0;
    for (int i = 0; i < N; i++) {
        const float *o = ort + (size_t)i * k, *w = want + (size_t)i * k;
        double e = 0;
        for (int j = 0; j < k; j++)
            e = fmax(e, fabs((double)o[j] - w[j]));
        worst = fmax(worst, e);
        const int same = argmax(o, k) == argmax(w, k);
        agree += same;
        if (margin(w, k) > 2 * e) {
            decided++;
            decided_agree += same;
        }
    }
    /* Per image, ORT's error against the scheme and what quantizing the
     * activations moves the logits by: a tie moves one value by one step,
     * a wrong scale or a missing pair moves all of them, so every image's
     * error must stay under a tenth of the median image's quantization
     * effect. */
    double ort_ref = 0, int8_ref = 0, qeff[N];
    const double rscale = max_abs(ref, (size_t)N * k);
    int exact = 0;
    for (int i = 0; i < N; i++) {
        double e = 0;
        qeff[i] = 0;
        for (int j = 0; j < k; j++) {
            const size_t ij = (size_t)i * k + j;
            e = fmax(e, fabs((double)ort[ij] - ref[ij]));
            qeff[i] = fmax(qeff[i], fabs((double)f32[ij] - ref[ij]));
            int8_ref = fmax(int8_ref, fabs((double)want[ij] - ref[ij]));
        }
        ort_ref = fmax(ort_ref, e);
        exact += e <= TOL_EXACT * rscale;
    }
    qsort(qeff, N, sizeof qeff[0], cmp_double);
    printf("ORT on the QDQ file vs classic int8 (onednn), %d images: top-1 "
           "agrees on %d (%.2f%%; %d/%d decided beyond twice the error); "
           "max abs logit error %.3g of the largest logit %.3g; against the "
           "scheme's numbers (reference kernels, fake-quantized inputs): "
           "ORT %.3g (%d/%d images within %.0e of the largest logit, the "
           "rest met a quantization tie), classic int8 %.3g; quantizing "
           "the activations moves an image's logits by %.3g (median)\n",
           N, agree, 100.0 * agree / N, decided_agree, decided, worst, scale,
           ort_ref, exact, N, TOL_EXACT, int8_ref, qeff[N / 2]);
    CHECK(ort_ref <= 0.1 * qeff[N / 2]);
    CHECK(decided_agree == decided);
    CHECK(100 * agree >= 99 * N);
    free(ref);
    free(f32);
    free(ort);
    free(x);
    free(want);
}
