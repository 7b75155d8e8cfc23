/* Image retrieval over the features `classic embed` writes: the gallery
 * file, the K nearest gallery rows of each query by cosine similarity, and
 * recall@k.
 *
 *     cl_gallery g;
 *     cl_gallery_open(&g, "train.safetensors");   // rows L2-normalised
 *     cl_retrieval_topk(&g, q, nq, 5, idx, sim);  // q normalised as well
 *     cl_gallery_close(&g);
 */
#ifndef CL_TRAIN_RETRIEVAL_H
#define CL_TRAIN_RETRIEVAL_H

#include <stddef.h>
#include <stdint.h>

#include "classic/classic.h"

/* The entries of a features file (see `classic embed --help`). */
#define CL_GALLERY_FEATURES "features" /* (N, D) F32 */
#define CL_GALLERY_LABELS "labels"     /* (N) I64, -1: unknown */
#define CL_GALLERY_INDICES "indices"   /* (N) I64, dataset order */
/* (B) U8: N file names, each ended by a NUL, in row order.  Optional:
 * datasets held in one file (IDX, CIFAR) have none; their rows are named
 * by the dataset metadata and the index. */
#define CL_GALLERY_NAMES "names"
/* Metadata: the dataset ("fashion_mnist"), its split and folder, the
 * class names as a JSON array, the checkpoint that embedded it and the
 * precision it ran at ("f32", "bf16"; absent in older files: f32). */
#define CL_GALLERY_META_DATASET "dataset"
#define CL_GALLERY_META_SPLIT "split"
#define CL_GALLERY_META_DATA_DIR "data_dir"
#define CL_GALLERY_META_CLASS_NAMES "class_names"
#define CL_GALLERY_META_CHECKPOINT "checkpoint"
#define CL_GALLERY_META_PRECISION "precision"

typedef struct cl_gallery {
    int64_t n;
    int dim;
    float *feat;        /* feat: (n, dim), rows of norm 1 (or all zero) */
    int64_t *labels;    /* labels: (n) */
    int64_t *indices;   /* indices: (n) */
    char *name_buf;     /* the names entry (NULL without one) */
    const char **names; /* names: (n), into name_buf; NULL without one */
    char **class_names; /* num_classes names from the metadata, or NULL */
    int num_classes;
    char dataset[64], split[64], checkpoint[1024], precision[16];
} cl_gallery;

/* Reads a features file: every entry's dtype and shape, one label and
 * index per row, finite features, names that are n NUL-ended strings.
 * Each refusal is one sentence naming the file and the entry. */
cl_status cl_gallery_open(cl_gallery *g, const char *path);
void cl_gallery_close(cl_gallery *g);

/* "name" of row i: its file name, else "<dataset> <split> #<index>" (buf
 * holds the latter). */
const char *cl_gallery_row_name(const cl_gallery *g, int64_t i, char *buf,
                                size_t n);
/* The class name of a label ("" when unknown). */
const char *cl_gallery_class_name(const cl_gallery *g, int64_t label);

/* Scales each row of x: (n, dim) to norm 1 (an all-zero row stays zero);
 * CL_ERR_VALUE names the first row holding a NaN or infinity. */
cl_status cl_retrieval_normalize(float *x, int64_t n, int dim,
                                 const char *what);

/* For each of the nq rows of q: (nq, g->dim), normalised, the k gallery
 * rows of largest cosine similarity, best first, ties to the lower row:
 * idx: (nq, k) rows, sim: (nq, k) similarities.  k <= g->n.  Similarities
 * come from oneDNN's sgemm in blocks; cl_retrieval_topk_ref is the plain
 * loop it is tested against. */
cl_status cl_retrieval_topk(const cl_gallery *g, const float *q, int64_t nq,
                            int k, int64_t *idx, float *sim);
cl_status cl_retrieval_topk_ref(const cl_gallery *g, const float *q, int64_t nq,
                                int k, int64_t *idx, float *sim);

/* Fraction of the nq queries (labels ql: (nq)) that have a gallery row of
 * their label among their first k of idx: (nq, kmax), k <= kmax. */
double cl_retrieval_recall(const cl_gallery *g, const int64_t *ql,
                           const int64_t *idx, int64_t nq, int kmax, int k);

#endif
