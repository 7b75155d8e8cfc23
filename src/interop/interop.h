/* Weights in and out of other frameworks: ONNX export of the inference
 * graph, MindSpore .ckpt import, and the one entry point that loads
 * pretrained weights of any supported kind into a graph. */
#ifndef CL_INTEROP_INTEROP_H
#define CL_INTEROP_INTEROP_H

#include "graph/graph.h"
#include "io/checkpoint.h"

/* ---- ONNX ------------------------------------------------------------- */

typedef struct cl_onnx_kv {
    const char *key;
    const char *value;
} cl_onnx_kv;

typedef struct cl_onnx_opts {
    int batch;              /* fixed batch dimension; 0: symbolic "N" */
    const cl_onnx_kv *meta; /* metadata_props (preprocessing, classes) */
    int n_meta;
} cl_onnx_opts;

/* Writes g (a finalized ResNet graph with its weights) as an ONNX model,
 * opset 13, IR version 7: float input "input" (N,C,H,W), output "logits"
 * (N,K); Conv with each BatchNorm folded into its weights and bias (in
 * double), Relu, MaxPool, Add, GlobalAveragePool, Flatten, Gemm.  The file
 * is written atomically.  CL_ERR_UNSUPPORTED names a node the format
 * mapping lacks (a BN not after a conv). */
cl_status cl_interop_export_onnx(const cl_graph *g, const char *path,
                                 const cl_onnx_opts *o);

/* ---- MindSpore -------------------------------------------------------- */

/* One tensor of a MindSpore checkpoint, pointing into the loaded file. */
typedef struct cl_ms_tensor {
    char name[128];
    char dtype[16]; /* MindSpore's tensor_type: "Float32", "Float16", ... */
    cl_shape shape;
    const uint8_t *data; /* tensor_content, little-endian */
    size_t nbytes;
    size_t offset; /* of its Value in the file */
} cl_ms_tensor;

typedef struct cl_ms_ckpt {
    uint8_t *buf; /* the whole file */
    size_t size;
    cl_ms_tensor *t;
    int n;
} cl_ms_ckpt;

/* Reads and validates a MindSpore checkpoint (message Checkpoint {
 * repeated Value value = 1; } with Value { string tag = 1; TensorProto
 * tensor = 2; }, TensorProto { repeated int64 dims = 1; string tensor_type
 * = 2; bytes tensor_content = 3; }).  Every length is checked against the
 * file; a tensor whose content size disagrees with dims x dtype is refused;
 * messages name the file and the byte offset. */
cl_status cl_ms_ckpt_open(cl_ms_ckpt *c, const char *path);
void cl_ms_ckpt_close(cl_ms_ckpt *c);

/* The torchvision name for a MindSpore ResNet parameter name (mindcv or
 * model zoo): 1 and out set, 0 for an optimizer / bookkeeping entry to
 * ignore (moments.*, learning_rate, global_step, ...). */
int cl_ms_map_name(const char *ms, char *out, size_t n);

typedef struct cl_ms_report {
    int loaded;  /* tensors copied into the graph */
    int ignored; /* optimizer and bookkeeping entries */
    char ignored_list[512];
    int head_skipped; /* pretrained mode: fc of another num_classes */
    char head_note[256];
} cl_ms_report;

/* Copies a MindSpore checkpoint's weights into g by the mapped names.
 * Refuses (naming up to 8 tensors) names that map to nothing in g, g's
 * tensors the file lacks, shape mismatches (conv weights must match
 * exactly; 1-D tensors too), non-float dtypes.  g is unchanged on failure.
 * mode as cl_ckpt_load_model. */
cl_status cl_ms_load(const char *path, cl_graph *g, cl_ckpt_mode mode,
                     cl_ms_report *rep);

/* --pretrained of any kind: a classic / torchvision safetensors file (by
 * its header) goes to cl_ckpt_load_model, a MindSpore .ckpt to cl_ms_load.
 * note (may be NULL) receives one line saying what was loaded and what
 * was skipped. */
cl_status cl_interop_load_pretrained(const char *path, cl_graph *g,
                                     cl_ckpt_mode mode, char *note,
                                     size_t note_n);

#endif
