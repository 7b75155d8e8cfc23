/* The int8 model file `classic quantize` writes (docs/deploy.md), read as
 * a checkpoint: its s8 weights served dequantized to the strict loader,
 * its scales put into the graph's int8 record afterwards. */
#ifndef CL_INTEROP_QUANTIZED_H
#define CL_INTEROP_QUANTIZED_H

#include "graph/graph.h"
#include "io/checkpoint.h"

/* Metadata beside the source checkpoint's own (copied unchanged). */
#define CL_QUANT_META_PRECISION "precision" /* "int8" */
#define CL_QUANT_META_METHOD                                                   \
    "quant.method"                            /* minmax|percentile[:p]|entropy \
                                               */
#define CL_QUANT_META_SAMPLES "quant.samples" /* calibration images */
#define CL_QUANT_META_SOURCE "quant.source"   /* the checkpoint, absolute */
#define CL_QUANT_META_CALIB "quant.calib"     /* the calibration data path */
#define CL_QUANT_META_WEIGHTS "quant.weights" /* how the weights were made */

/* Beside an int8 layer's "P.weight" (I8, the q values, the f32 weight's
 * shape): its scales, named "P" + suffix. */
#define CL_QUANT_WEIGHT_SCALE ".weight_scale" /* F32 (out): one per channel */
#define CL_QUANT_INPUT_SCALE ".input_scale"   /* F32 (1): its input's scale */
#define CL_QUANT_INPUT_SIGNED ".input_signed" /* U8 (1): 1 s8, 0 u8 input */

struct cl_st_file;
typedef struct cl_qfile cl_qfile;

/* Whether f's metadata says precision int8. */
int cl_qfile_is(const struct cl_st_file *f);

/* Checks every scale tensor of f (path for messages) before any weight is
 * read: each "P.weight_scale" beside an I8 "P.weight" with one finite
 * positive F32 per output channel, "P.input_scale" one finite positive
 * F32, "P.input_signed" 0 or 1; no I8 tensor without its scales.
 * CL_ERR_FORMAT naming the tensor otherwise.  f must outlive *out. */
cl_status cl_qfile_open(cl_qfile **out, const struct cl_st_file *f,
                        const char *path);
void cl_qfile_close(cl_qfile *q);

/* The file as named tensors for cl_ckpt_load_source: each I8 weight read
 * as q * scale (f32, per output channel), the scale tensors hidden. */
cl_ckpt_source cl_qfile_source(const cl_qfile *q);

/* After the weights are loaded into g (the same network): g's int8
 * record from the file's scales (cl_graph_quant_init).  CL_ERR_FORMAT in
 * one sentence naming the tensor when a scale belongs to no conv or
 * linear layer of g, its count differs from the layer's channels, or two
 * layers reading one tensor disagree on its scale or sign. */
cl_status cl_qfile_scales(const cl_qfile *q, cl_graph *g);

/* Conv and linear nodes of g that run int8 (cl_graph_quant_node) and
 * those that stay in floating point. */
void cl_qfile_count(const cl_graph *g, int *n_int8, int *n_float);

#endif
