/* The run configuration: one plain struct with a default for every key of a
 * mindcv-style recipe, loaded from YAML and overridden by `--key value`. */
#ifndef CL_IO_CONFIG_H
#define CL_IO_CONFIG_H

#include <stdio.h>

#include "classic/status.h"
#include "io/strbuf.h"

#define CL_CFG_PATH_MAX 512 /* path buffers, NUL included */
#define CL_CFG_NAME_MAX 64  /* split names */
#define CL_CFG_MAX_MILESTONES 32
#define CL_CFG_MAX_CHANNELS 3 /* mean/std entries */

/* Enumerated keys: the value is the index into the key's list of names, so
 * cl_config_enum_name(key, value) gives the YAML spelling back. */
/* `dataset` and `model` take the names of lists their modules own: the
 * lines of data/formats.def that a recipe takes (its last column 1) and
 * those of models/archs.def.  Each line gives the enum CL_CFG_DATASET_<E>
 * or CL_CFG_MODEL_<E> (0, 1, ... in the list's order) here and its
 * spelling in io/config_keys.c's value tables. */
#define CL_CFG_RECIPE_FORMAT_1(x) x,
#define CL_CFG_RECIPE_FORMAT_0(x)
enum {
#define CL_DATA_FORMAT(E, name, alias, reader, variant, recipe)                \
    CL_CFG_RECIPE_FORMAT_##recipe(CL_CFG_DATASET_##E)
#include "data/formats.def"
#undef CL_DATA_FORMAT
};
enum {
#define CL_ARCH(E, name, family, variant) CL_CFG_MODEL_##E,
#include "models/archs.def"
#undef CL_ARCH
};
/* Every other enum key's values, X(P, NAME, "spelling") in order: the enum
 * P##NAME (0, 1, ...) and the spelling config files use come from the
 * same line (io/config_keys.c builds its value tables from them). */
#define CL_CFG_STEMS(X, P)                                                     \
    X(P, IMAGENET, "imagenet")                                                 \
    X(P, CIFAR, "cifar")                                                       \
    X(P, CIFAR_POOL, "cifar_pool")
#define CL_CFG_OPTS(X, P)                                                      \
    X(P, MOMENTUM, "momentum")                                                 \
    X(P, SGD, "sgd")                                                           \
    X(P, ADAMW, "adamw")
#define CL_CFG_SCHEDS(X, P)                                                    \
    X(P, COSINE_DECAY, "cosine_decay")                                         \
    X(P, MULTI_STEP, "multi_step")                                             \
    X(P, CONSTANT, "constant")
#define CL_CFG_AMPS(X, P)                                                      \
    X(P, O0, "O0")                                                             \
    X(P, O1, "O1")                                                             \
    X(P, O2, "O2")
#define CL_CFG_BACKENDS(X, P)                                                  \
    X(P, ONEDNN, "onednn")                                                     \
    X(P, REF, "ref")
#define CL_CFG_LR_SCALES(X, P)                                                 \
    X(P, NONE, "none")                                                         \
    X(P, LINEAR, "linear")
#define CL_CFG_BAD_IMAGES(X, P)                                                \
    X(P, FAIL, "fail")                                                         \
    X(P, SKIP, "skip")
#define CL_CFG_DISTS(X, P)                                                     \
    X(P, AUTO, "auto")                                                         \
    X(P, NONE, "none")                                                         \
    X(P, MPI, "mpi")
#define CL_CFG_GRAD_SYNCS(X, P)                                                \
    X(P, OVERLAP, "overlap")                                                   \
    X(P, BLOCKING, "blocking")
#define CL_CFG_PROGRESSES(X, P)                                                \
    X(P, AUTO, "auto")                                                         \
    X(P, BAR, "bar")                                                           \
    X(P, PLAIN, "plain")
#define CL_CFG_AUTO_AUGMENTS(X, P)                                             \
    X(P, NONE, "none")                                                         \
    X(P, TA_WIDE, "ta_wide")                                                   \
    X(P, RANDAUGMENT, "randaugment")
#define CL_CFG_INTERPOLATIONS(X, P)                                            \
    X(P, BILINEAR, "bilinear")                                                 \
    X(P, BICUBIC, "bicubic")
#define CL_CFG_ENUM_VALUE(P, name, spelling) P##name,
enum { CL_CFG_STEMS(CL_CFG_ENUM_VALUE, CL_CFG_STEM_) };
enum { CL_CFG_OPTS(CL_CFG_ENUM_VALUE, CL_CFG_OPT_) };
enum { CL_CFG_SCHEDS(CL_CFG_ENUM_VALUE, CL_CFG_SCHED_) };
enum { CL_CFG_AMPS(CL_CFG_ENUM_VALUE, CL_CFG_AMP_) };
enum { CL_CFG_BACKENDS(CL_CFG_ENUM_VALUE, CL_CFG_BACKEND_) };
enum { CL_CFG_LR_SCALES(CL_CFG_ENUM_VALUE, CL_CFG_LR_SCALE_) };
enum { CL_CFG_BAD_IMAGES(CL_CFG_ENUM_VALUE, CL_CFG_BAD_IMAGE_) };
enum { CL_CFG_DISTS(CL_CFG_ENUM_VALUE, CL_CFG_DIST_) };
enum { CL_CFG_GRAD_SYNCS(CL_CFG_ENUM_VALUE, CL_CFG_GRAD_SYNC_) };
enum { CL_CFG_PROGRESSES(CL_CFG_ENUM_VALUE, CL_CFG_PROGRESS_) };
enum { CL_CFG_AUTO_AUGMENTS(CL_CFG_ENUM_VALUE, CL_CFG_AUTO_AUGMENT_) };
enum { CL_CFG_INTERPOLATIONS(CL_CFG_ENUM_VALUE, CL_CFG_INTERP_) };
/* log_level holds a cl_log_level (core/log.h): error, warn, info, debug. */

/* Booleans are ints (0/1); enums are ints as above; lists carry a count.
 * docs/config.md explains every key; `classic train --help` lists them. */
typedef struct cl_config {
    /* ---- data ---- */
    int dataset;
    char data_dir[CL_CFG_PATH_MAX]; /* "" : the dataset's default place */
    char train_split[CL_CFG_NAME_MAX];
    char val_split[CL_CFG_NAME_MAX];
    char class_indexing[CL_CFG_PATH_MAX]; /* file of "name index" lines */
    int num_classes;                      /* 0: from the dataset */
    int limit_train, limit_val;           /* 0: all samples */
    int max_pixels; /* decoded width x height above this is refused */
    int on_bad_image;
    int num_parallel_workers;
    int prefetch; /* batches */
    int shuffle;
    int drop_remainder;
    int batch_size;    /* per process */
    int image_size;    /* the model's input side */
    double crop_pct;   /* eval: resize to image_size / crop_pct, center crop */
    int eval_hflip;    /* eval: average the logits of image and mirror */
    int interpolation; /* CL_CFG_INTERP_*: resize filter, train and eval */
    /* ---- augmentation (training only) ---- */
    int random_crop_padding; /* RandomCrop(image_size, padding); 0 off */
    double hflip;            /* probability */
    int random_resized_crop;
    double scale[2];
    int n_scale;
    double ratio[2];
    int n_ratio;
    double color_jitter[3]; /* brightness, contrast, saturation */
    int n_color_jitter;
    double mean[CL_CFG_MAX_CHANNELS]; /* [0,1] units; empty: no Normalize */
    int n_mean;
    double std[CL_CFG_MAX_CHANNELS];
    int n_std;
    int auto_augment; /* CL_CFG_AUTO_AUGMENT_* */
    int ra_num_ops;   /* RandAugment ops per image */
    int ra_magnitude; /* RandAugment magnitude bin of 31 */
    double re_prob;   /* RandomErasing probability */
    double mixup;     /* alpha; 0 off */
    double cutmix;    /* alpha; 0 off */
    double mixup_prob;
    double label_smoothing;
    /* ---- model ---- */
    int model;
    double drop_path; /* stochastic depth of a Swin's last block; < 0: the
                         arch's own */
    int stem;
    int in_channels;
    char pretrained[CL_CFG_PATH_MAX]; /* safetensors to start from */
    char resume[CL_CFG_PATH_MAX];     /* checkpoint to continue */
    int freeze_backbone;
    int new_head; /* fine-tuning: the head never comes from pretrained */
    double backbone_lr_mult;
    int zero_init_residual;
    int sync_bn;
    /* ---- optimizer ---- */
    int opt;
    double lr;
    double momentum;
    int nesterov;
    double weight_decay;
    int filter_bias_and_bn;
    /* Transformer embedding tables (CL_PARAM_EMBED): < 0 follows
     * filter_bias_and_bn (no decay when on, else weight_decay); >= 0 is
     * their decay (torchvision's --transformer-embedding-decay). */
    double embedding_weight_decay;
    double beta1, beta2, eps;
    int lr_scale;
    /* ---- lr schedule ---- */
    int scheduler;
    int warmup_epochs;
    double warmup_factor;
    double min_lr;
    int decay_epochs; /* cosine: 0 = epoch_size - warmup_epochs */
    int milestones[CL_CFG_MAX_MILESTONES];
    int n_milestones;
    double decay_rate;
    int lr_epoch_stair;
    /* ---- weight averaging (EMA) ---- */
    int ema;          /* keep, evaluate and ship an EMA of the weights */
    double ema_decay; /* per update, in (0, 1) */
    int ema_steps;    /* optimizer steps between updates */
    int ema_warmup;   /* timm's decay warm-up */
    int load_ema;     /* read a checkpoint's EMA weights when it has them */
    /* ---- training loop ---- */
    int epoch_size; /* epochs */
    int accumulation_steps;
    double grad_clip_norm; /* 0 off */
    int amp_level;
    int autotune;
    int backend;
    int threads; /* 0: OpenMP's default */
    int seed;
    int dist;
    double bucket_mb; /* gradient allreduce bucket, MiB */
    int grad_sync;    /* CL_CFG_GRAD_SYNC_* */
    int dist_timeout; /* seconds; 0 forever */
    /* ---- checkpoints and logs ---- */
    char ckpt_save_dir[CL_CFG_PATH_MAX];
    int overwrite; /* a fresh run may replace the run ckpt_save_dir holds */
    int ckpt_save_interval; /* steps; 0 off */
    int ckpt_save_epochs;   /* epochs; 0 off */
    int keep_checkpoint_max;
    int val_interval;    /* epochs; 0 never */
    int per_print_times; /* steps */
    int progress;        /* CL_CFG_PROGRESS_* */
    int log_level;
} cl_config;

/* Every key at its default. */
void cl_config_defaults(cl_config *c);

/* Applies a YAML recipe (a flat mapping of keys) over *c.  Errors are
 * CL_ERR_CONFIG with "file:line: ..." (unknown key with a suggestion, wrong
 * type, out of range, repeated key) or "file:line:col: YAML error: ..."
 * (syntax); CL_ERR_IO if the file cannot be read.  Ends with
 * cl_config_check.  On failure *c may be partly updated. */
cl_status cl_config_load_yaml(cl_config *c, const char *path);
/* The same from text in memory; `name` stands for the file in messages. */
cl_status cl_config_load_yaml_text(cl_config *c, const char *text, size_t len,
                                   const char *name);
/* The two above without the closing cl_config_check, for a caller that
 * applies more (another recipe, overrides) and checks once at the end. */
cl_status cl_config_merge_yaml(cl_config *c, const char *path);
cl_status cl_config_merge_yaml_text(cl_config *c, const char *text, size_t len,
                                    const char *name);

/* One override, as `--key value` gives it: key may use '-' for '_' and
 * mindcv's aliases; lists are "a,b,c" or "[a, b, c]"; booleans
 * true/false/yes/no/on/off/1/0.  Same checks as the YAML path ("command
 * line: key 'batch_size' expects ..."), without the cross-key check. */
cl_status cl_config_set(cl_config *c, const char *key, const char *value);
/* One "key=value" override (the form the C API and Python take); who names
 * the caller in the error when the '=' or the key is missing. */
cl_status cl_config_set_pair(cl_config *c, const char *kv, const char *who);

/* Cross-key consistency (mean/std length vs in_channels, milestones for
 * multi_step, scale/ratio order, min_lr <= lr, a warm-up shorter than the
 * run, data_dir for imagefolder...).
 * Call it after the last cl_config_set. */
cl_status cl_config_check(const cl_config *c);

/* The fully resolved config, every key, as YAML that loads back equal. */
cl_status cl_config_format_yaml(const cl_config *c, cl_strbuf *out);
cl_status cl_config_write_yaml(const cl_config *c, FILE *f);
/* `--help` text: every key with its type, range, default and meaning. */
void cl_config_print_help(FILE *f);

/* The first key whose values differ, or NULL when a and b are equal. */
const char *cl_config_diff(const cl_config *a, const cl_config *b);
/* One key's value as text (what the YAML writer writes), into buf. */
cl_status cl_config_get(const cl_config *c, const char *key, char *buf,
                        size_t n);
/* The name of value v of enum key `key` ("model", CL_CFG_MODEL_RESNET50 ->
 * "resnet50"); NULL if key is no enum or v out of range. */
const char *cl_config_enum_name(const char *key, int v);
/* Number of keys, and key i's name (for tools listing them). */
int cl_config_key_count(void);
const char *cl_config_key_name(int i);
/* The heading of the group key i is listed under in config.yaml and
 * --help ("data", "optimizer", ...); one pointer per group, so a change of
 * pointer is a new group.  NULL out of range or before any heading. */
const char *cl_config_key_group(int i);

#endif
