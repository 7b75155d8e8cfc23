/* Post-training int8 quantization (docs/deploy.md): activation scales
 * from calibration, BN folded, s8 weights per output channel, and the
 * int8 model file `classic quantize` writes. */
#ifndef CL_TRAIN_QUANTIZE_H
#define CL_TRAIN_QUANTIZE_H

#include "backend/backend.h"
#include "graph/graph.h"

/* How an activation's threshold T is chosen from its calibration
 * statistics (|x| over the calibration samples). */
typedef enum cl_quant_method {
    CL_QUANT_MINMAX = 0,     /* T = max |x| */
    CL_QUANT_PERCENTILE = 1, /* T = the p-th percentile of |x| (default) */
    CL_QUANT_ENTROPY = 2     /* T minimising KL(P || Q), TensorRT's way */
} cl_quant_method;

/* "minmax" | "percentile" | "entropy" into *out; CL_ERR_ARG naming the
 * choices otherwise. */
cl_status cl_quant_method_parse(const char *s, cl_quant_method *out);
const char *cl_quant_method_name(cl_quant_method m);

typedef struct cl_quant_opts {
    cl_quant_method method;
    double percentile; /* (0, 100], percentile's p; 0: 99.99 */
    /* 8 (0 too): s8 weights in [-127, 127]; 7: in [-63, 63] (s = max |w|
     * / 63), the range CPUs without VNNI sum without saturating, so that
     * classic there and ONNX Runtime on the QDQ export compute the same
     * (ONNX Runtime's reduce_range); docs/deploy.md. */
    int weight_bits;
} cl_quant_opts;

/* The histogram of |x| each calibrated tensor gets (over [0, max |x|]). */
#define CL_QUANT_BINS 2048

/* The one rule for which layers run int8: every conv but the ones reading
 * the image (ResNet's stem, Swin's patch embedding) and every linear but
 * the classifier (the node producing g->logits).  Node i of g. */
int cl_quant_node_rule(const cl_graph *g, int i);

/* The statistics of the activations the int8 layers of a graph read
 * (each node's in[0]; layers reading one tensor share it). */
typedef struct cl_quant_calib cl_quant_calib;

/* For g (its f32 weights, finalized), before any observation. */
cl_status cl_quant_calib_create(cl_quant_calib **out, const cl_graph *g,
                                const cl_quant_opts *o);
void cl_quant_calib_free(cl_quant_calib *c);
/* How many passes over the same samples the method needs: 1 (min-max),
 * 2 (the first finds each tensor's range, the second its histogram). */
int cl_quant_calib_passes(const cl_quant_calib *c);
/* Reads the calibrated tensors of the forward be just ran (a plan where
 * they are intact: a CL_PLAN_TRAIN plan after cl_backend_forward(be, 0,
 * NULL), or the ref backend), of which the first n_valid images count
 * (a tensor whose first dimension is a multiple of the batch counts
 * those rows).  pass 0 or 1.  CL_ERR_NUMERIC naming the tensor for a
 * value that is not finite. */
cl_status cl_quant_calib_observe(cl_quant_calib *c, cl_backend *be, int pass,
                                 int n_valid);
/* Chooses each threshold, then makes g quantized: BN folded into the int8
 * convs it follows (the BN left as the identity plus the bias), the
 * weights of every int8 layer replaced by q * s (s8 per output channel),
 * g->quant filled (cl_graph_quant_init).  g is the graph the statistics
 * were taken for (or a copy of it). */
cl_status cl_quant_calib_apply(const cl_quant_calib *c, cl_graph *g);

/* Quantizes g in memory from n_batches input batches x[b] (g->batch
 * images each, NCHW f32 after the eval transforms): a CL_PLAN_TRAIN
 * onednn plan of g (threads as cl_backend_opts) runs each, min-max
 * thresholds when o is NULL, then cl_quant_calib_apply.  What `classic
 * bench --mode infer --precision int8` calls on its synthetic batches
 * before planning g at int8; the thresholds of random data say nothing of
 * accuracy, only the speed is meaningful. */
cl_status cl_quant_calibrate(cl_graph *g, const float *const *x, int n_batches,
                             const cl_quant_opts *o, int threads);

/* As cl_quant_calibrate on the backend named ("ref" or "onednn"): the
 * tests hold the onednn training plan's tensors to the reference's. */
cl_status cl__quant_calibrate_on(cl_graph *g, const char *backend,
                                 const float *const *x, int n_batches,
                                 const cl_quant_opts *o, int threads);

/* Writes quantized g (cl_quant_calib_apply) as the int8 model file
 * (interop/quantized.h), atomically: every saved tensor of g under its
 * name, each int8 layer's weight as I8 q values with its scales beside
 * it, and meta (the source's metadata, then the quant.* keys). */
cl_status cl_quant_save(const char *path, const cl_graph *g,
                        const char *const *keys, const char *const *values,
                        int n_meta);

/* `classic quantize`. */
typedef struct cl_quantize_opts {
    const char *checkpoint; /* a classic model checkpoint */
    const char *calib;      /* a dataset `train` reads, or a folder of images */
    const char *out;        /* the int8 file; never the checkpoint */
    int samples;            /* > 0: the first of the calibration data */
    int batch;              /* > 0 */
    int threads;            /* 0: OpenMP's default */
    cl_quant_opts q;
} cl_quantize_opts;

typedef struct cl_quantize_report {
    int samples;          /* images calibrated on */
    int n_int8, n_float;  /* conv and linear layers at int8, in f32 */
    char stay_float[256]; /* "conv1, fc" */
    char data[512];       /* what was read: "ImageFolder X (train split)" */
} cl_quantize_report;

/* Opens the checkpoint and the data, calibrates, quantizes and writes
 * o->out; on any failure no file is left at o->out (an old one there is
 * left as it was).  One sentence naming the file, folder or option at
 * fault. */
cl_status cl_quantize_run(const cl_quantize_opts *o, cl_quantize_report *rep);

#endif
