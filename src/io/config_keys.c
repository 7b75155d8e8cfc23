/* The configuration keys, one row each: its field, type, range, default,
 * mindcv's name for it and its help line, in the order the resolved config
 * and --help list them; and the names other frameworks use for them. */
#include <limits.h>
#include <stddef.h>

#include "io/config.h"
#include "io/config_keys.h"

#define OFF(f) offsetof(cl_config, f)
#define SPELLING(P, name, spelling) spelling,
#define BIG CL__CFG_NO_MAX

/* The formats of data/formats.def a recipe takes, and every arch of
 * models/archs.def (the enums of io/config.h come from the same lines). */
static const char *const v_dataset[] = {
#define CL_DATA_FORMAT(E, name, alias, reader, variant, recipe)                \
    CL_CFG_RECIPE_FORMAT_##recipe(name)
#include "data/formats.def"
#undef CL_DATA_FORMAT
    NULL};
static const char *const v_model[] = {
#define CL_ARCH(E, name, family, variant) name,
#include "models/archs.def"
#undef CL_ARCH
    NULL};
static const char *const v_stem[] = {CL_CFG_STEMS(SPELLING, _) NULL};
static const char *const v_opt[] = {CL_CFG_OPTS(SPELLING, _) NULL};
static const char *const v_sched[] = {CL_CFG_SCHEDS(SPELLING, _) NULL};
static const char *const v_amp[] = {CL_CFG_AMPS(SPELLING, _) NULL};
static const char *const v_backend[] = {CL_CFG_BACKENDS(SPELLING, _) NULL};
static const char *const v_lr_scale[] = {CL_CFG_LR_SCALES(SPELLING, _) NULL};
static const char *const v_bad[] = {CL_CFG_BAD_IMAGES(SPELLING, _) NULL};
static const char *const v_dist[] = {CL_CFG_DISTS(SPELLING, _) NULL};
static const char *const v_grad_sync[] = {CL_CFG_GRAD_SYNCS(SPELLING, _) NULL};
static const char *const v_log[] = {"error", "warn", "info", "debug", NULL};
static const char *const v_progress[] = {CL_CFG_PROGRESSES(SPELLING, _) NULL};
static const char *const v_auto_augment[] = {CL_CFG_AUTO_AUGMENTS(SPELLING, _)
                                                 NULL};
static const char *const v_interp[] = {CL_CFG_INTERPOLATIONS(SPELLING, _) NULL};

/* Other spellings of enum values (mindcv's), as {key, spelling, value}. */
const char *const cl__config_value_aliases[][3] = {
    {"scheduler", "multi_step_decay", "multi_step"},
    {"scheduler", "cosine", "cosine_decay"},
    {"log_level", "warning", "warn"},
};
const int cl__config_nvalue_aliases =
    (int)(sizeof cl__config_value_aliases / sizeof cl__config_value_aliases[0]);

#define K_INT(n, lo, hi, d, h)                                                 \
    {                                                                          \
        .name = #n, .type = T_INT, .off = OFF(n), .min = lo, .max = hi,        \
        .def = d, .help = h                                                    \
    }
#define K_FLT(n, lo, lo_open, hi, hi_open, d, h)                               \
    {                                                                          \
        .name = #n, .type = T_FLOAT, .off = OFF(n), .min = lo, .max = hi,      \
        .min_open = lo_open, .max_open = hi_open, .def = d, .help = h          \
    }
#define K_BOOL(n, d, h)                                                        \
    {                                                                          \
        .name = #n, .type = T_BOOL, .off = OFF(n), .def = d, .help = h         \
    }
#define K_STR(n, d, h)                                                         \
    {                                                                          \
        .name = #n, .type = T_STR, .off = OFF(n),                              \
        .cap = (int)sizeof(((cl_config *)0)->n), .def = d, .help = h           \
    }
#define K_ENUM(n, v, d, h)                                                     \
    {                                                                          \
        .name = #n, .type = T_ENUM, .off = OFF(n), .values = v, .def = d,      \
        .help = h                                                              \
    }
#define K_FLTS(n, lo_n, lo, lo_open, hi, hi_open, d, h)                        \
    {                                                                          \
        .name = #n, .type = T_FLOATS, .off = OFF(n), .n_off = OFF(n_##n),      \
        .cap = (int)(sizeof(((cl_config *)0)->n) / sizeof(double)),            \
        .min_n = lo_n, .min = lo, .max = hi, .min_open = lo_open,              \
        .max_open = hi_open, .def = d, .help = h                               \
    }
#define K_INTS(n, lo, hi, d, h)                                                \
    {                                                                          \
        .name = #n, .type = T_INTS, .off = OFF(n), .n_off = OFF(n_##n),        \
        .cap = (int)(sizeof(((cl_config *)0)->n) / sizeof(int)), .min = lo,    \
        .max = hi, .def = d, .help = h                                         \
    }

/* A group heading is a row with no type (name NULL, help the title). */
#define GROUP(t)                                                               \
    {                                                                          \
        .name = NULL, .help = t                                                \
    }

const key cl__config_keys[] = {
    GROUP("data"),
    K_ENUM(dataset, v_dataset, "fashion_mnist",
           "dataset format; imagefolder reads data_dir/<split>/<class>/*"),
    K_STR(data_dir, "",
          "dataset location; \"\" is the format's default (fashion_mnist: "
          "/usr/share/datasets/fashion-mnist)"),
    K_STR(train_split, "train",
          "training split: train|test|all for the built-in formats, the "
          "subdirectory for imagefolder"),
    K_STR(val_split, "test",
          "validation split, as train_split; \"\" for no validation"),
    K_STR(class_indexing, "",
          "imagefolder: a file of `name index` lines fixing the class order "
          "(\"\": sorted folder names)"),
    K_INT(num_classes, 0, 1000000, "0",
          "classes of the head; 0 takes the dataset's"),
    K_INT(limit_train, 0, INT_MAX, "0",
          "use only the first N training samples (0: all)"),
    K_INT(limit_val, 0, INT_MAX, "0",
          "use only the first N validation samples (0: all)"),
    K_INT(max_pixels, 1, INT_MAX, "67108864",
          "images of more pixels (width x height) are refused from their "
          "header, before any memory is taken for them"),
    K_ENUM(on_bad_image, v_bad, "fail",
           "an undecodable image stops the run (fail) or is dropped (skip)"),
    K_INT(num_parallel_workers, 0, 256, "2",
          "decode/augment threads (0: in the training thread)"),
    K_INT(prefetch, 1, 1024, "2", "batches prepared ahead"),
    K_BOOL(shuffle, "true", "reshuffle the training set every epoch"),
    K_BOOL(drop_remainder, "true", "drop the last incomplete training batch"),
    K_INT(batch_size, 1, INT_MAX, "64", "samples per step and process"),
    {.name = "image_size",
     .type = T_INT,
     .off = OFF(image_size),
     .min = 8,
     .max = 4096,
     .def = "32",
     .alias = "image_resize",
     .help = "input side (square) the model sees"},
    K_FLT(crop_pct, 0, 1, 1, 0, "1",
          "eval: resize to image_size / crop_pct, then center-crop "
          "image_size (ImageNet: 0.875)"),
    K_BOOL(eval_hflip, "false",
           "eval: average the logits of each image and its left-right mirror "
           "(flip test-time augmentation; twice the eval work)"),
    K_ENUM(interpolation, v_interp, "bilinear",
           "resampling filter of the resize and RandomResizedCrop, train and "
           "eval (PIL's, antialiased when shrinking)"),

    GROUP("augmentation (training only)"),
    K_INT(random_crop_padding, 0, 256, "0",
          "RandomCrop(image_size, padding=N), after a resize to image_size "
          "when the images differ; 0: off"),
    K_FLT(hflip, 0, 0, 1, 0, "0", "RandomHorizontalFlip probability"),
    K_BOOL(random_resized_crop, "false",
           "RandomResizedCrop(image_size, scale, ratio) instead of the "
           "resize/crop"),
    K_FLTS(scale, 2, 0, 1, 1, 0, "[0.08, 1]",
           "RandomResizedCrop area range (fraction of the image)"),
    K_FLTS(ratio, 2, 0, 1, 100, 0, "[0.75, 1.3333333333333333]",
           "RandomResizedCrop aspect-ratio range"),
    K_FLTS(color_jitter, 0, 0, 0, 1, 0, "[]",
           "ColorJitter brightness, contrast, saturation (one value: all "
           "three; []: off)"),
    {.name = "mean",
     .type = T_FLOATS,
     .off = OFF(mean),
     .n_off = OFF(n_mean),
     .cap = CL_CFG_MAX_CHANNELS,
     .min = 0,
     .max = 1,
     .def = "[]",
     .hint = " (0..1 units as torchvision; divide mindcv's 0..255 values by "
             "255)",
     .help = "Normalize mean per channel ([]: no Normalize)"},
    {.name = "std",
     .type = T_FLOATS,
     .off = OFF(std),
     .n_off = OFF(n_std),
     .cap = CL_CFG_MAX_CHANNELS,
     .min = 0,
     .min_open = 1,
     .max = 1,
     .def = "[]",
     .hint = " (0..1 units as torchvision; divide mindcv's 0..255 values by "
             "255)",
     .help = "Normalize std per channel"},
    K_ENUM(auto_augment, v_auto_augment, "none",
           "torchvision's TrivialAugmentWide (ta_wide) or RandAugment after "
           "the crop and flip"),
    K_INT(ra_num_ops, 1, 16, "2", "RandAugment: ops applied per image"),
    K_INT(ra_magnitude, 0, 30, "9",
          "RandAugment: magnitude bin (of 31) every op uses"),
    K_FLT(re_prob, 0, 0, 1, 0, "0", "RandomErasing probability"),
    K_FLT(mixup, 0, 0, BIG, 0, "0", "MixUp alpha (0: off)"),
    K_FLT(cutmix, 0, 0, BIG, 0, "0",
          "CutMix alpha (0: off; with mixup, one of the two per batch)"),
    K_FLT(mixup_prob, 0, 0, 1, 0, "1",
          "probability that a batch gets MixUp/CutMix"),
    K_FLT(label_smoothing, 0, 0, 1, 1, "0", "label smoothing epsilon"),

    GROUP("model"),
    {.name = "model",
     .type = T_ENUM,
     .off = OFF(model),
     .values = v_model,
     .def = "resnet50",
     .help = "architecture: torchvision's ResNet v1.5 or Swin-Transformer "
             "(swin_t), or swin_micro (Swin for 28-32 px inputs)"},
    K_FLT(drop_path, -1, 0, 1, 1, "-1",
          "Swin stochastic depth of the last block, rising linearly from 0 "
          "(-1: the arch's own, 0.2 for swin_t, 0.1 for swin_micro)"),
    K_ENUM(stem, v_stem, "imagenet",
           "imagenet: 7x7/2 conv + maxpool; cifar: 3x3/1 conv, no maxpool; "
           "cifar_pool: 3x3/1 conv + maxpool"),
    K_INT(in_channels, 1, 3, "3",
          "input channels (1: gray; gray images are repeated to 3 when 3)"),
    K_STR(pretrained, "",
          "weights to initialise from: safetensors, PyTorch .pth or "
          "MindSpore .ckpt (\"\": random init)"),
    K_STR(resume, "",
          "checkpoint to continue training from (its config, optimizer "
          "state, epoch; keys given override its config)"),
    K_BOOL(new_head, "false",
           "fine-tuning: the head keeps its fresh initialisation even when "
           "the pretrained one has its shape"),
    K_BOOL(freeze_backbone, "false",
           "train only the classifier head (fine-tuning)"),
    K_FLT(backbone_lr_mult, 0, 0, 1000, 0, "1",
          "lr multiplier of everything but the head"),
    K_BOOL(zero_init_residual, "false",
           "start the last BN gamma of each block at 0"),
    K_BOOL(sync_bn, "false", "BatchNorm statistics over all processes (MPI)"),

    GROUP("optimizer"),
    K_ENUM(opt, v_opt, "momentum",
           "momentum (MindSpore Momentum = torch SGD with momentum), sgd "
           "(torch SGD: momentum applies when > 0), adamw"),
    K_FLT(lr, 0, 0, 1000, 0, "0.1",
          "peak learning rate (after warm-up), applied to the gradient "
          "averaged over all processes"),
    K_FLT(momentum, 0, 0, 1, 1, "0.9", "momentum / heavy-ball factor"),
    {.name = "nesterov",
     .type = T_BOOL,
     .off = OFF(nesterov),
     .def = "false",
     .alias = "use_nesterov",
     .help = "Nesterov momentum"},
    K_FLT(weight_decay, 0, 0, 1, 1, "0.0001",
          "L2 (SGD) / decoupled (AdamW) weight decay"),
    K_BOOL(filter_bias_and_bn, "true",
           "no weight decay on biases, BatchNorm/LayerNorm parameters and "
           "transformer embedding tables"),
    K_FLT(embedding_weight_decay, -1, 0, 1, 1, "-1",
          "weight decay of transformer embedding tables (Swin's "
          "relative_position_bias_table); -1: as filter_bias_and_bn says "
          "[torchvision: --transformer-embedding-decay]"),
    K_FLT(beta1, 0, 0, 1, 1, "0.9", "AdamW beta1"),
    K_FLT(beta2, 0, 0, 1, 1, "0.999", "AdamW beta2"),
    K_FLT(eps, 0, 1, 1, 1, "1e-08", "AdamW epsilon"),
    K_ENUM(lr_scale, v_lr_scale, "none",
           "linear: lr is for 256 images; use lr x global_batch / 256 "
           "(Goyal et al.)"),

    GROUP("learning-rate schedule"),
    K_ENUM(scheduler, v_sched, "cosine_decay",
           "cosine_decay to min_lr, multi_step (x decay_rate at each "
           "milestone), or constant; mindcv's multi_step_decay accepted"),
    K_INT(warmup_epochs, 0, 100000, "0",
          "linear warm-up epochs from lr * warmup_factor"),
    K_FLT(warmup_factor, 0, 0, 1, 0, "0", "warm-up start, as a fraction of lr"),
    K_FLT(min_lr, 0, 0, 1000, 0, "1e-06", "cosine_decay floor"),
    K_INT(decay_epochs, 0, 100000, "0",
          "cosine_decay length (0: epoch_size - warmup_epochs)"),
    {.name = "milestones",
     .type = T_INTS,
     .off = OFF(milestones),
     .n_off = OFF(n_milestones),
     .cap = CL_CFG_MAX_MILESTONES,
     .min = 1,
     .max = 100000,
     .def = "[]",
     .alias = "multi_step_decay_milestones",
     .help = "multi_step: epochs (increasing) where lr is multiplied by "
             "decay_rate"},
    K_FLT(decay_rate, 0, 1, 1, 0, "0.1", "multi_step factor per milestone"),
    K_BOOL(lr_epoch_stair, "false",
           "change lr only at epoch boundaries (else every step)"),

    GROUP("weight averaging (EMA)"),
    K_BOOL(ema, "false",
           "keep an exponential moving average of the weights: evaluated "
           "beside them, followed by the best checkpoint, shipped as the "
           "model [timm/torchvision: --model-ema]"),
    K_FLT(ema_decay, 0, 1, 1, 1, "0.9998",
          "weight of the old average at each update [timm: "
          "--model-ema-decay; torchvision's needs converting, "
          "docs/training.md]"),
    K_INT(ema_steps, 1, 1000000, "1",
          "update the average every N optimizer steps of an epoch "
          "[torchvision: --model-ema-steps]"),
    K_BOOL(ema_warmup, "false",
           "decay warm-up: min(ema_decay, 1 - (1 + n)^(-2/3)) at the n-th "
           "update [timm: --model-ema-warmup]"),
    K_BOOL(load_ema, "true",
           "eval, predict, export, convert and pretrained read a "
           "checkpoint's EMA weights when it has them (false: its raw "
           "weights)"),

    GROUP("training loop"),
    K_INT(epoch_size, 1, 100000, "90", "epochs to train"),
    {.name = "accumulation_steps",
     .type = T_INT,
     .off = OFF(accumulation_steps),
     .min = 1,
     .max = 1024,
     .def = "1",
     .alias = "gradient_accumulation_steps",
     .help = "micro-batches summed per optimizer step"},
    K_FLT(grad_clip_norm, 0, 0, BIG, 0, "0",
          "clip the global gradient norm to this (0: off)"),
    K_ENUM(amp_level, v_amp, "O0",
           "O0: f32; O1: bf16 convolutions/matmuls; O2: bf16 except BN and "
           "loss"),
    K_BOOL(autotune, "false",
           "measure both ways of each conv backward at start-up and keep the "
           "faster per shape (onednn; resume reuses the choice)"),
    K_ENUM(backend, v_backend, "onednn",
           "onednn (fast) or ref (plain C kernels, the oracle)"),
    K_INT(threads, 0, 4096, "0", "OpenMP threads per process (0: default)"),
    K_INT(seed, 0, INT_MAX, "42",
          "seed of initialisation, shuffling and augmentation"),
    K_ENUM(dist, v_dist, "auto",
           "auto: MPI when launched by mpirun; none: single process; mpi: "
           "require MPI"),
    K_FLT(bucket_mb, 0, 1, 4096, 0, "25",
          "MPI: gradient allreduce bucket size in MiB (PyTorch DDP's 25)"),
    K_ENUM(grad_sync, v_grad_sync, "overlap",
           "MPI: overlap (allreduce buckets during backward) or blocking "
           "(one allreduce after backward)"),
    K_INT(dist_timeout, 0, 86400, "300",
          "MPI: seconds a collective may wait for the other ranks before "
          "the job ends naming the rank and host (0: forever)"),

    GROUP("checkpoints and logs"),
    K_STR(ckpt_save_dir, "./ckpt",
          "run directory: checkpoints, metrics.jsonl, resolved config"),
    K_BOOL(overwrite, "false",
           "a new run into a ckpt_save_dir that holds a run replaces that "
           "run (its config, metrics and checkpoints); false: refused"),
    K_INT(ckpt_save_interval, 0, INT_MAX, "0",
          "save a checkpoint every N optimizer steps (0: off)"),
    K_INT(ckpt_save_epochs, 0, 100000, "1",
          "save a checkpoint every N epochs (0: off)"),
    K_INT(keep_checkpoint_max, 0, 100000, "10",
          "checkpoints kept, oldest removed first (0: keep all)"),
    K_INT(val_interval, 0, 100000, "1", "validate every N epochs (0: never)"),
    {.name = "per_print_times",
     .type = T_INT,
     .off = OFF(per_print_times),
     .min = 1,
     .max = INT_MAX,
     .def = "100",
     .alias = "log_interval",
     .help = "log loss and speed every N steps"},
    K_ENUM(progress, v_progress, "auto",
           "the step line: bar (redrawn in place), plain (one line per "
           "print) or auto (bar on a terminal, plain in files, pipes and "
           "under mpirun)"),
    K_ENUM(log_level, v_log, "info", "error, warn, info or debug"),
};

const int cl__config_nkeys =
    (int)(sizeof cl__config_keys / sizeof cl__config_keys[0]);
_Static_assert(sizeof cl__config_keys / sizeof cl__config_keys[0] <=
                   CL__CFG_MAX_ROWS,
               "more rows than CL__CFG_MAX_ROWS: raise it");

/* Names from other frameworks (torchvision's train.py, timm, Keras) that a
 * user may type, mapped to ours: only suggested, never accepted, because
 * their meaning is close but not always the same. */
const char *const cl__config_synonyms[][2] = {
    {"learning_rate", "lr"},
    {"base_lr", "lr"},
    {"epochs", "epoch_size"},
    {"num_epochs", "epoch_size"},
    {"max_epochs", "epoch_size"},
    {"optimizer", "opt"},
    {"arch", "model"},
    {"network", "model"},
    {"lr_scheduler", "scheduler"},
    {"sched", "scheduler"},
    {"wd", "weight_decay"},
    {"batch", "batch_size"},
    {"workers", "num_parallel_workers"},
    {"num_workers", "num_parallel_workers"},
    {"smoothing", "label_smoothing"},
    {"warmup", "warmup_epochs"},
    {"lr_steps", "milestones"},
    {"lr_milestones", "milestones"},
    {"lr_gamma", "decay_rate"},
    {"gamma", "decay_rate"},
    {"clip_grad_norm", "grad_clip_norm"},
    {"max_grad_norm", "grad_clip_norm"},
    {"clip_value", "grad_clip_norm"},
    {"clip_grad", "grad_clip_norm"},
    {"output_dir", "ckpt_save_dir"},
    {"save_dir", "ckpt_save_dir"},
    {"input_size", "image_size"},
    {"img_size", "image_size"},
    {"resolution", "image_size"},
    {"data_path", "data_dir"},
    {"root", "data_dir"},
    {"print_freq", "per_print_times"},
    {"random_erase", "re_prob"},
    {"reprob", "re_prob"},
    {"mixup_alpha", "mixup"},
    {"cutmix_alpha", "cutmix"},
    {"amp", "amp_level"},
    {"val_while_train", "val_interval"},
    {"ckpt_path", "pretrained"},
    {"distribute", "dist"},
    {"momentum_rate", "momentum"},
    {"eval_interval", "val_interval"},
};
const int cl__config_nsynonyms =
    (int)(sizeof cl__config_synonyms / sizeof cl__config_synonyms[0]);
