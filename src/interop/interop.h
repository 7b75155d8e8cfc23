/* Weights in and out of other frameworks: ONNX export of the inference
 * graph, MindSpore .ckpt import, and the one entry point that loads
 * pretrained weights of any supported kind into a graph. */
#ifndef CL_INTEROP_INTEROP_H
#define CL_INTEROP_INTEROP_H

#include "graph/graph.h"
#include "io/checkpoint.h"
#include "models/arch.h"

/* ---- ONNX ------------------------------------------------------------- */

typedef struct cl_onnx_kv {
    const char *key;
    const char *value;
} cl_onnx_kv;

typedef struct cl_onnx_opts {
    int batch;              /* fixed batch dimension; 0: symbolic "N" */
    const cl_onnx_kv *meta; /* metadata_props (preprocessing, classes) */
    int n_meta;
    /* A quantized graph (g->quant): 0 writes its int8 nodes as QDQ, 1 as
     * the f32 model of its dequantized weights. */
    int dequantized;
} cl_onnx_opts;

/* Writes g (a finalized graph with its weights) as an ONNX model, opset
 * 17, IR version 8: float input "input" (N,C,H,W), output "logits" (N,K);
 * Conv with each BatchNorm folded into its weights and bias (in double),
 * Relu, MaxPool, Add, GlobalAveragePool, Flatten, Gemm (MatMul and Add for
 * a linear over rank 3 and up), LayerNormalization (axis -1), GELU as
 * Div, Erf, Add, Mul, Mul, Softmax (axis -1) after the Adds of its bias
 * and mask; MatMul (Transpose, Mul by alpha), Reshape + Gather + Reshape
 * (row_gather: over the images by one image's index when the index moves
 * rows within each image alike, as Swin's do, so any batch; else by the
 * whole index, for the graph's batch only), Identity (droppath),
 * ReduceMean (token_meanpool).  A node that runs int8
 * (cl_graph_quant_node) reads its input through QuantizeLinear ->
 * DequantizeLinear (zero point 0, u8 or s8) and its weight as INT8 through
 * a per-channel DequantizeLinear, unless o->dequantized.  The file is
 * written atomically.  CL_ERR_UNSUPPORTED names a node the format mapping
 * lacks (a BN not after a conv, a row_gather mixing images at another
 * batch than g->batch); CL_ERR_FORMAT an int8 node whose weights are not
 * q * scale with q an integer in [-127, 127]. */
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

/* The network a checkpoint's names are those of: mindcv's Swin
 * (patch_embed.*, layers.*) or a ResNet. */
typedef enum cl_ms_family { CL_MS_RESNET = 0, CL_MS_SWIN } cl_ms_family;
cl_ms_family cl_ms_ckpt_family(const cl_ms_ckpt *c);

/* The torchvision name for a mindcv Swin name, as cl_ms_map_name (1, 0
 * for optimizer entries and for the derived attn.relative_bias.index and
 * attn_mask, -1 for a name the rules do not know).  part is -1, or 0, 1,
 * 2 for attn.q, .k, .v: those rows of attn.qkv (q first). */
int cl_ms_map_swin_name(const char *ms, char *out, size_t n, int *part);
/* cl_ms_map_name or cl_ms_map_swin_name by family. */
int cl_ms_map_name_as(const char *ms, cl_ms_family fam, char *out, size_t n,
                      int *part);

/* A MindSpore checkpoint as named tensors under their torchvision names,
 * optimizer and bookkeeping entries left out (names that map to nothing
 * are kept as they are, for a strict load to refuse by name): what opens a
 * .ckpt as a model (cl_weights_open).  A Swin's attn.q, .k, .v are one
 * attn.qkv (CL_ERR_FORMAT at open, naming them, when one is missing or
 * the three differ in shape), and each relative_position_index, which
 * mindcv does not save, is computed beside its bias table. */
typedef struct cl_ms_named cl_ms_named;
cl_status cl_ms_named_open(cl_ms_named **out, const char *path);
void cl_ms_named_close(cl_ms_named *m);
cl_ckpt_source cl_ms_named_source(const cl_ms_named *m, const char *path);

typedef struct cl_ms_report {
    int loaded;  /* tensors copied into the graph */
    int ignored; /* optimizer and bookkeeping entries */
    char ignored_list[512];
    int head_skipped; /* pretrained mode: fc of another num_classes */
    char head_note[256];
} cl_ms_report;

/* Copies a MindSpore checkpoint's weights into g by the mapped names
 * (a Swin's q, k, v stacked into qkv; its relative_position_index left as
 * the builder filled it).  Refuses (naming up to 8 tensors) names that map
 * to nothing in g, g's tensors the file lacks, shape mismatches (conv
 * weights must match exactly; 1-D tensors too), non-float dtypes, a Swin
 * file for a ResNet graph or the reverse.  g is unchanged on failure.
 * mode as cl_ckpt_load_model. */
cl_status cl_ms_load(const char *path, cl_graph *g, cl_ckpt_mode mode,
                     cl_ms_report *rep);

/* ---- PyTorch .pth ---------------------------------------------------- */

typedef struct cl_pth cl_pth;

/* Reads a PyTorch checkpoint in the zip format of torch.save (PyTorch 1.6
 * and later): stored zip entries, each bounded by the file and CRC-checked;
 * data.pkl run by a pickle machine that knows the opcodes of protocols 2-5
 * that state_dicts use and the globals collections.OrderedDict,
 * torch._utils._rebuild_tensor_v2 / _rebuild_parameter and torch.<T>Storage
 * for Float, Half, BFloat16, Double, Long and Int.  The state_dict is the
 * root dict or its 'state_dict' / 'model' / 'model_state_dict' / 'net'
 * entry; 'module.' and '_orig_mod.' prefixes are removed.  Every view is
 * checked to lie inside its storage.  Anything else is refused in one
 * sentence naming the opcode, global or type (CL_ERR_FORMAT, or
 * CL_ERR_UNSUPPORTED for well-formed files outside the subset). */
cl_status cl_pth_open(cl_pth **out, const char *path);
void cl_pth_close(cl_pth *p);

/* The state_dict's tensors, in the file's order. */
size_t cl_pth_count(const cl_pth *p);
const char *cl_pth_name(const cl_pth *p, size_t i);
long cl_pth_find(const cl_pth *p, const char *name);
cl_shape cl_pth_shape(const cl_pth *p, size_t i);
/* "float32", "float16", "bfloat16", "float64", "int64", "int32". */
const char *cl_pth_dtype(const cl_pth *p, size_t i);
/* "the state_dict under 'state_dict'", for notes. */
const char *cl_pth_where(const cl_pth *p);
/* Tensor i, made contiguous (row-major over its shape) and converted:
 * n must be its element count (CL_ERR_SHAPE otherwise); read_f32 refuses
 * integer tensors and read_i64 floating ones (CL_ERR_FORMAT). */
cl_status cl_pth_read_f32(const cl_pth *p, size_t i, float *dst, size_t n);
cl_status cl_pth_read_i64(const cl_pth *p, size_t i, int64_t *dst, size_t n);

/* ---- any checkpoint ---------------------------------------------------- */

/* A model checkpoint of any kind classic reads, as named tensors: a
 * classic safetensors file (with its metadata), a plain safetensors file
 * (torchvision names, no metadata: timm, safetensors.torch.save_file), a
 * PyTorch .pth or a MindSpore .ckpt (mindcv's names mapped), told apart by
 * the first bytes. */
/* What a weights file is, from its first bytes. */
typedef enum cl_weights_format {
    CL_WF_UNKNOWN = 0,
    CL_WF_SAFETENSORS, /* u64 header length, then the JSON's '{' */
    CL_WF_PTH,         /* a zip (torch.save >= 1.6) or a bare pickle */
    CL_WF_MINDSPORE    /* a protobuf Checkpoint: field 1, length-delimited */
} cl_weights_format;

/* The format of the file at path; CL_ERR_IO when it cannot be read. */
cl_status cl_weights_sniff(const char *path, cl_weights_format *fmt);

typedef struct cl_weights {
    cl_ckpt_source src;
    struct cl_st_file *st; /* safetensors */
    cl_pth *pth;           /* .pth */
    cl_ms_named *ms;       /* MindSpore .ckpt */
    struct cl_qfile *q;    /* an int8 file (interop/quantized.h), or NULL */
    int classic;           /* safetensors with classic's 'arch' metadata */
    const char *kind; /* "safetensors", "PyTorch .pth" or "MindSpore .ckpt" */
} cl_weights;

cl_status cl_weights_open(cl_weights *w, const char *path);
/* CL_ERR_ARG in one sentence when w (opened from path) cannot start a
 * training run (an int8 file: its BNs folded, its weights rounded),
 * naming the checkpoint it was quantized from. */
cl_status cl_weights_for_training(const cl_weights *w, const char *path);
void cl_weights_close(cl_weights *w);

/* The torchvision network the tensors fit.  A ResNet: depth from the
 * block counts of layer1..4 and whether blocks have conv3 (18/34: basic
 * 2-2-2-2 / 3-4-6-3; 50/101/152: bottleneck 3-4-6-3 / 3-4-23-3 / 3-8-36-3),
 * in_channels from conv1.weight, num_classes from fc.weight, the stem from
 * conv1's kernel; wider variants (wide_resnet, resnext) are refused by
 * their layer1.0.conv1 width.  A Swin (features.0.0.weight and head.weight):
 * the arch whose patch, embed, window and blocks per stage the tensors
 * have.  arch (may be NULL) names the network instead and is checked. */
cl_status cl_weights_infer(const cl_weights *w, const char *arch, cl_arch *a);

/* ImageNet-1k's class names in torchvision's index order. */
extern const char *const cl_imagenet_classes[1000];

/* --pretrained of any kind: a classic / torchvision safetensors file (by
 * its header) goes to cl_ckpt_load_model, a MindSpore .ckpt to cl_ms_load.
 * note (may be NULL) receives one line saying what was loaded and what
 * was skipped. */
cl_status cl_interop_load_pretrained(const char *path, cl_graph *g,
                                     cl_ckpt_mode mode, char *note,
                                     size_t note_n);

#endif
