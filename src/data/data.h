/* The data pipeline: dataset readers, per-sample transforms and the threaded,
 * sharded, deterministic batch loader the trainer consumes.
 *
 * Flow: cl_dataset (IDX, CIFAR, ImageFolder) -> cl_dataset_get (decoded uint8
 * HWC image) -> cl_transforms_apply (float CHW, normalised) -> cl_loader
 * (batches of float NCHW with labels and optional soft targets). */
#ifndef CL_DATA_DATA_H
#define CL_DATA_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "classic/status.h"
#include "core/rng.h"

/* ------------------------------------------------------------------ images */

/* A decoded image, uint8, interleaved HWC, c = 1 (gray) or 3 (RGB).  The
 * buffer is owned by the struct and grows as needed, so one cl_image can be
 * reused for many decodes without allocating in the steady state. */
typedef struct cl_image {
    uint8_t *data; /* data: (h, w, c) */
    int h, w, c;
    size_t cap;   /* bytes allocated at data */
    uint8_t *raw; /* the encoded file last read (reused buffer) */
    size_t raw_cap;
} cl_image;

/* Makes room for h*w*c bytes and sets the dims; contents undefined. */
cl_status cl_image_reserve(cl_image *img, int h, int w, int c);
void cl_image_free(cl_image *img);

/* Refuse images above this many pixels before allocating (hostile headers). */
#define CL_DATA_DEFAULT_MAX_PIXELS (64u * 1024u * 1024u)

/* Decodes a JPEG or PNG held in memory (format chosen by its magic bytes).
 * min_side > 0 lets a JPEG decode at a DCT scale 1/2, 1/4 or 1/8 as long as
 * the shorter side stays >= min_side.  `name` is used in error messages. */
cl_status cl_image_decode(const uint8_t *buf, size_t len, const char *name,
                          int min_side, uint64_t max_pixels, cl_image *img);
/* Reads a file and decodes it (see cl_image_decode). */
cl_status cl_image_load(const char *path, int min_side, uint64_t max_pixels,
                        cl_image *img);
/* Reads only the header: width, height, channels after decoding. */
cl_status cl_image_probe(const char *path, int *w, int *h, int *c);
/* Writes an 8-bit gray or RGB PNG. */
cl_status cl_image_save_png(const char *path, const cl_image *img);

/* ---------------------------------------------------------------- datasets */

typedef enum cl_data_usage {
    CL_USAGE_TRAIN = 0,
    CL_USAGE_TEST = 1,
    CL_USAGE_ALL = 2
} cl_data_usage;

typedef enum cl_bad_image_policy {
    CL_BAD_IMAGE_FAIL = 0, /* the first undecodable image stops the loader */
    CL_BAD_IMAGE_SKIP = 1  /* dropped from its batch, counted, reported */
} cl_bad_image_policy;

typedef struct cl_dataset_spec {
    /* A name of data/formats.def ("fashion_mnist", "cifar10",
     * "imagefolder", ...); NULL or "" guesses from the path. */
    const char *format;
    /* Directory or file.  idx: a directory with the four files
     * ({train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]), an images file,
     * or a prefix P (P"images-idx3-ubyte[.gz]").  cifar: the extracted
     * folder, its parent, or the downloaded .tar.gz.  fashion_mnist: NULL
     * means /usr/share/datasets/fashion-mnist. */
    const char *path;
    cl_data_usage usage;
    /* imagefolder: a file of `name index` lines fixing the class order. */
    const char *class_indexing;
    /* imagefolder: the same given programmatically (used if non-NULL). */
    const char *const *class_names;
    const int *class_indices;
    int num_class_names;
    cl_bad_image_policy on_bad_image;
    /* Labels must be < num_classes when > 0 (default: the format's). */
    int num_classes;
    /* 0 means CL_DATA_DEFAULT_MAX_PIXELS. */
    uint64_t max_pixels;
} cl_dataset_spec;

/* The spec defaults: usage train, on_bad_image fail, everything else 0. */
cl_dataset_spec cl_dataset_spec_default(void);

typedef struct cl_dataset cl_dataset;

#define CL_DATASET_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

cl_status cl_dataset_open(cl_dataset **ds, const cl_dataset_spec *spec);
void cl_dataset_close(cl_dataset *ds);

/* An ImageFolder root of splits (root/train/<class>/..., root/val/... or
 * root/test/...): *split is the split folder for usage (train; val,
 * validation or test) and buf its path; *split is NULL when root is not
 * such a root.  Usage all on a root of splits is an error naming them. */
cl_status cl_imagefolder_split(const char *root, cl_data_usage usage, char *buf,
                               size_t n, const char **split);

int64_t cl_dataset_count(const cl_dataset *ds);
int cl_dataset_num_classes(const cl_dataset *ds);
/* Class name k (0 <= k < num_classes); never NULL. */
const char *cl_dataset_class_name(const cl_dataset *ds, int k);
int32_t cl_dataset_label(const cl_dataset *ds, int64_t i);
/* The format's name in data/formats.def ("mnist", "imagefolder", ...). */
const char *cl_dataset_format(const cl_dataset *ds);
/* In-memory formats: the common image size (0 for imagefolder). */
void cl_dataset_image_dims(const cl_dataset *ds, int *h, int *w, int *c);
/* imagefolder: the path of sample i (NULL for in-memory formats). */
const char *cl_dataset_path(const cl_dataset *ds, int64_t i);
/* imagefolder: files skipped at scan time for a non-image extension. */
int64_t cl_dataset_ignored_files(const cl_dataset *ds);
cl_bad_image_policy cl_dataset_bad_image_policy(const cl_dataset *ds);

/* Sample i decoded into img (reused buffer) and its label.  min_side is a
 * decode hint (see cl_image_decode); 0 for full size.  Thread-safe: many
 * threads may call it at once with different img buffers. */
cl_status cl_dataset_get(const cl_dataset *ds, int64_t i, int min_side,
                         cl_image *img, int32_t *label);

/* -------------------------------------------------------------- transforms */

/* The AutoAugment-family policies (torchvision.transforms.autoaugment). */
typedef enum cl_auto_augment {
    CL_AUTO_AUGMENT_NONE = 0,
    CL_AUTO_AUGMENT_TA_WIDE = 1,    /* TrivialAugmentWide(31 bins) */
    CL_AUTO_AUGMENT_RANDAUGMENT = 2 /* RandAugment(num_ops, magnitude, 31) */
} cl_auto_augment;

/* The resampling filter of Resize / RandomResizedCrop; both are PIL's,
 * antialiased when shrinking (support scaled by the shrink factor). */
typedef enum cl_interpolation {
    CL_INTERP_BILINEAR = 0, /* triangle, radius 1 */
    CL_INTERP_BICUBIC = 1   /* Keys cubic a = -0.5 (PIL's), radius 2 */
} cl_interpolation;

/* What happens to one sample, in this order: Decode -> geometric stage (one
 * of RandomResizedCrop | Resize[+CenterCrop] | [Resize+]RandomCrop with
 * padding, fused into one resampling pass) -> horizontal flip -> auto augment
 * (on the image rounded to 8 bits, as torchvision's PIL/uint8 input) ->
 * ColorJitter
 * -> to float [0,1] -> Normalize -> RandomErasing -> channel conversion (1->3
 * repetition, 3->1 luma) -> CHW into the caller's buffer. Fields left 0 are
 * off.  An eval pipeline has no random op. */
typedef struct cl_transform_opts {
    int out_c, out_h, out_w; /* what the model wants */
    /* Resize: shorter side to `resize` (aspect kept), or exactly
     * resize_h x resize_w when both > 0.  The `interpolation` filter
     * (bilinear by default), antialiased on a large downscale as PIL's. */
    int resize;
    int resize_h, resize_w;
    /* CenterCrop to out_h x out_w after Resize. */
    int center_crop;
    /* RandomCrop(out_h x out_w, padding=random_crop_pad), zero padding;
     * after the Resize when one is set (instead of its CenterCrop). */
    int random_crop;
    int random_crop_pad;
    /* RandomResizedCrop to out_h x out_w (torchvision's algorithm). */
    int random_resized_crop;
    float rrc_scale[2];                     /* default 0.08, 1 */
    float rrc_ratio[2];                     /* default 3/4, 4/3 */
    float hflip_prob;                       /* RandomHorizontalFlip(p) */
    float brightness, contrast, saturation; /* ColorJitter */
    int normalize;
    float mean[3], std[3]; /* in [0,1] units, per input channel */
    float erase_prob;      /* RandomErasing(p, scale, ratio, value 0) */
    float erase_scale[2];  /* default 0.02, 0.33 */
    float erase_ratio[2];  /* default 0.3, 3.3 */
    int auto_augment;      /* cl_auto_augment; none by default */
    /* RandAugment: ops per image (0..16) and the magnitude bin (0..30);
     * both 0 means torchvision's 2 and 9. */
    int ra_num_ops, ra_magnitude;
    int interpolation; /* cl_interpolation; bilinear by default */
} cl_transform_opts;

#define CL_IMAGENET_MEAN                                                       \
    {                                                                          \
        0.485f, 0.456f, 0.406f                                                 \
    }
#define CL_IMAGENET_STD                                                        \
    {                                                                          \
        0.229f, 0.224f, 0.225f                                                 \
    }

/* ImageNet recipes: RandomResizedCrop(size)+flip(0.5)+Normalize, and
 * Resize(size*256/224)+CenterCrop(size)+Normalize; 3 channels out. */
cl_transform_opts cl_transform_opts_imagenet_train(int size);
cl_transform_opts cl_transform_opts_imagenet_eval(int size);
/* Small images (MNIST, CIFAR): RandomCrop(h x w, pad)+flip(flip_p)+Normalize
 * and Normalize only.  mean/std: c entries each (per output channel, so a
 * 1->3 repetition repeats the gray value), or NULL for 0.5 / 0.5. */
cl_transform_opts cl_transform_opts_small_train(int c, int h, int w, int pad,
                                                float flip_p, const float *mean,
                                                const float *std);
cl_transform_opts cl_transform_opts_small_eval(int c, int h, int w,
                                               const float *mean,
                                               const float *std);

typedef struct cl_transforms cl_transforms;

/* Validates the options (CL_ERR_CONFIG naming the field). */
cl_status cl_transforms_create(cl_transforms **tf,
                               const cl_transform_opts *opts);
void cl_transforms_destroy(cl_transforms *tf);
const cl_transform_opts *cl_transforms_opts(const cl_transforms *tf);
/* Non-zero if any op draws random numbers. */
int cl_transforms_is_random(const cl_transforms *tf);
/* The JPEG decode hint (min_side) that loses no resolution for this
 * pipeline; 0 when the full image is needed. */
int cl_transforms_decode_hint(const cl_transforms *tf);
/* The pipeline in torchvision's words, its ops in the order they run
 * ("Resize((36, 36), bilinear) -> RandomCrop(36x36, padding=4) -> ...";
 * "no op" when it has none), cut to fit n bytes (n > 0). */
void cl_transforms_describe(const cl_transforms *tf, char *buf, size_t n);
/* Per-thread scratch memory of cl_transforms_apply, grown on demand (zero
 * it before first use; release with cl_transforms_scratch_free). */
typedef struct cl_tf_scratch {
    float *buf;
    size_t cap; /* floats */
} cl_tf_scratch;
void cl_transforms_scratch_free(cl_tf_scratch *s);

/* Transforms img into out: (out_c, out_h, out_w) floats.  rng may be NULL
 * only for a pipeline without random ops.  scratch may be NULL (then it is
 * allocated and freed here). */
cl_status cl_transforms_apply(const cl_transforms *tf, const cl_image *img,
                              cl_rng *rng, cl_tf_scratch *scratch, float *out);

/* ------------------------------------------------------------------ loader */

typedef struct cl_loader_opts {
    cl_dataset *dataset; /* borrowed; outlives the loader */
    cl_transforms *tf;   /* borrowed */
    int batch_size;
    int shuffle; /* reshuffled every epoch from (seed, epoch) */
    uint64_t seed;
    int num_shards; /* 0 or 1: no sharding */
    int shard_id;
    int drop_remainder; /* see docs/data.md for how shards split */
    int workers;        /* num_parallel_workers: 0 = consumer thread */
    int prefetch;       /* batches prepared ahead (default 2) */
    /* Batch-level MixUp / CutMix (timm's semantics): applied with
     * probability mix_prob; when both alphas > 0 one of them is picked
     * with probability 1/2.  Either alpha > 0 turns on soft targets. */
    float mixup_alpha, cutmix_alpha, mix_prob;
    int num_classes; /* K of the soft targets (default: dataset's) */
    /* > 0: use only dataset samples [0, limit) (quick runs, smoke tests). */
    int64_t limit;
} cl_loader_opts;

typedef struct cl_batch {
    float *x;             /* x: (n, C, H, W), owned by the loader */
    int32_t *labels;      /* labels: (n) */
    float *targets;       /* targets: (n, K) soft targets, or NULL */
    int64_t *indices;     /* indices: (n) dataset indices of the samples */
    int n;                /* samples in this batch (<= batch_size) */
    int k;                /* K when targets != NULL */
    int64_t epoch, index; /* which batch of which epoch this is */
} cl_batch;

typedef struct cl_loader_stats {
    double wait_seconds; /* consumer time blocked in cl_loader_next */
    int64_t batches, samples;
    int64_t skipped;        /* bad images dropped (on_bad_image=skip) */
    char last_skipped[512]; /* why the last of them was, "" if none */
} cl_loader_stats;

typedef struct cl_loader cl_loader;

cl_status cl_loader_create(cl_loader **ld, const cl_loader_opts *opts);
void cl_loader_destroy(cl_loader *ld);

/* Starts (or restarts) an epoch at batch 0; the order depends only on
 * (seed, epoch, shard). */
cl_status cl_loader_start_epoch(cl_loader *ld, int64_t epoch);
/* Starts an epoch at a given batch (resume from a saved position). */
cl_status cl_loader_seek(cl_loader *ld, int64_t epoch, int64_t batch);
/* The next batch of this shard, in order.  *batch stays valid until the
 * next call.  Returns CL_OK with batch->n == 0 at the end of the epoch. */
cl_status cl_loader_next(cl_loader *ld, cl_batch *batch);
/* Batches this shard yields per epoch. */
int64_t cl_loader_batches_per_epoch(const cl_loader *ld);
/* Samples this shard yields per epoch (before skipped bad images). */
int64_t cl_loader_samples_per_epoch(const cl_loader *ld);
/* The position to save for resume: the epoch and the next batch index. */
void cl_loader_position(const cl_loader *ld, int64_t *epoch, int64_t *batch);
void cl_loader_get_stats(const cl_loader *ld, cl_loader_stats *st);
double cl_loader_wait_seconds(const cl_loader *ld);

/* The dataset indices of shard_id's samples in epoch order: count written
 * to *n (out may be NULL to query).  Exposed for tests and the docs. */
cl_status cl_loader_epoch_order(const cl_loader *ld, int64_t epoch,
                                int64_t *out, int64_t *n);

/* -------------------------------------------------------------- inspection */

/* Per-channel mean and std of the pixels (in [0,1]) of the first `limit`
 * evenly spaced samples (all when limit <= 0).  *channels is the first
 * image's channel count; other images are converted to it. */
cl_status cl_data_stats(const cl_dataset *ds, int64_t limit, int *channels,
                        double mean[3], double std[3]);

/* Writes a PNG grid of n samples (shuffled with seed, epoch 0) after the
 * transforms `opts` (normalisation is skipped so pixels show), each
 * scaled to cell x cell and labelled "<label> <class name>". */
cl_status cl_data_preview(cl_dataset *ds, const cl_transform_opts *opts, int n,
                          int cell, uint64_t seed, const char *out);

#endif
