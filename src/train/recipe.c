/* Translation of a run configuration into component options. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "train/recipe.h"

/* Whether split is one of the names cl_imagefolder_split looks for under
 * usage (train: train; test: val, validation, test). */
static int is_usage_name(const char *split, cl_data_usage usage)
{
    if (usage == CL_USAGE_TRAIN)
        return strcmp(split, "train") == 0;
    return strcmp(split, "val") == 0 || strcmp(split, "validation") == 0 ||
           strcmp(split, "test") == 0;
}

cl_status cl_recipe_dataset(const cl_config *cfg, cl_data_usage usage,
                            char *dir_buf, size_t n, cl_dataset_spec *spec)
{
    *spec = cl_dataset_spec_default();
    /* The recipe's dataset values are data/formats.def's names. */
    spec->format = cl_config_enum_name("dataset", cfg->dataset);
    spec->path = cfg->data_dir[0] ? cfg->data_dir : NULL;
    spec->usage = usage;
    spec->on_bad_image = cfg->on_bad_image == CL_CFG_BAD_IMAGE_SKIP
                             ? CL_BAD_IMAGE_SKIP
                             : CL_BAD_IMAGE_FAIL;
    spec->num_classes = cfg->num_classes;
    spec->max_pixels = cfg->max_pixels > 0 ? (uint64_t)cfg->max_pixels : 0;
    const char *split =
        usage == CL_USAGE_TRAIN ? cfg->train_split : cfg->val_split;
    const char *key = usage == CL_USAGE_TRAIN ? "train_split" : "val_split";
    if (!split[0])
        return cl_error(CL_ERR_CONFIG, "%s is \"\", which names no split%s",
                        key,
                        usage == CL_USAGE_TRAIN
                            ? ""
                            : " (the run had no validation): name the one "
                              "to read (--split, or val_split in the config)");
    if (cfg->dataset != CL_CFG_DATASET_IMAGEFOLDER) {
        /* Built-in formats name their splits train / test / all. */
        if (strcmp(split, "train") == 0)
            spec->usage = CL_USAGE_TRAIN;
        else if (strcmp(split, "test") == 0 || strcmp(split, "val") == 0)
            spec->usage = CL_USAGE_TEST;
        else if (strcmp(split, "all") == 0)
            spec->usage = CL_USAGE_ALL;
        else
            return cl_error(CL_ERR_CONFIG,
                            "%s '%s': dataset %s has the splits train, "
                            "test and all",
                            key, split, spec->format);
    }
    if (cfg->dataset == CL_CFG_DATASET_IMAGEFOLDER) {
        if (!cfg->data_dir[0])
            return cl_error(CL_ERR_CONFIG,
                            "dataset imagefolder needs data_dir (a folder "
                            "with %s/<class>/<image> inside)",
                            split);
        if ((size_t)snprintf(dir_buf, n, "%s/%s", cfg->data_dir, split) >= n)
            return cl_error(CL_ERR_CONFIG, "data_dir '%s' is too long",
                            cfg->data_dir);
        /* A split named as `classic data info --usage` names them (train;
         * val, validation or test) that is not a folder is found as data
         * info finds it, so that a root of train/ and val/ trains as it
         * shows: one resolver for both. */
        struct stat st;
        const char *found = NULL;
        if (stat(dir_buf, &st) != 0 && is_usage_name(split, usage) &&
            cl_imagefolder_split(cfg->data_dir, usage, dir_buf, n, &found) !=
                CL_OK) {
            /* No such split either: the folder named is what is missing. */
            cl_clear_error();
            found = NULL;
        }
        if (!found &&
            (size_t)snprintf(dir_buf, n, "%s/%s", cfg->data_dir, split) >= n)
            return cl_error(CL_ERR_CONFIG, "data_dir '%s' is too long",
                            cfg->data_dir);
        spec->path = dir_buf;
        spec->usage = CL_USAGE_ALL;
        spec->class_indexing =
            cfg->class_indexing[0] ? cfg->class_indexing : NULL;
    }
    return CL_OK;
}

cl_status cl_recipe_input(const cl_config *cfg, const cl_dataset *ds, int *c,
                          int *side)
{
    int h = 0, w = 0, dc = 0;
    cl_dataset_image_dims(ds, &h, &w, &dc);
    *c = cfg->in_channels > 0 ? cfg->in_channels : (dc > 0 ? dc : 3);
    *side = cfg->image_size > 0 ? cfg->image_size : h;
    if (*side <= 0)
        return cl_error(CL_ERR_CONFIG,
                        "image_size must be set for dataset %s (its images "
                        "have no common size)",
                        cl_dataset_format(ds));
    return CL_OK;
}

static void norm_of(const cl_config *cfg, int c, cl_transform_opts *o)
{
    if (cfg->n_mean == 0)
        return;
    o->normalize = 1;
    /* One value serves every channel (gray datasets repeated to RGB). */
    for (int i = 0; i < 3; i++) {
        int k = i < cfg->n_mean ? i : 0;
        o->mean[i] = (float)cfg->mean[k];
        o->std[i] = (float)cfg->std[k < cfg->n_std ? k : 0];
    }
    (void)c;
}

cl_status cl_recipe_transforms(const cl_config *cfg, int h, int w, int c,
                               int side, int train, cl_transform_opts *out)
{
    cl_transform_opts o;
    memset(&o, 0, sizeof o);
    o.out_c = c;
    o.out_h = side;
    o.out_w = side;
    int native = h == side && w == side;
    if (train && cfg->random_resized_crop) {
        o.random_resized_crop = 1;
        o.rrc_scale[0] = (float)(cfg->n_scale ? cfg->scale[0] : 0.08);
        o.rrc_scale[1] = (float)(cfg->n_scale ? cfg->scale[1] : 1.0);
        o.rrc_ratio[0] = (float)(cfg->n_ratio ? cfg->ratio[0] : 0.75);
        o.rrc_ratio[1] = (float)(cfg->n_ratio ? cfg->ratio[1] : 4.0 / 3.0);
    } else if (train && cfg->random_crop_padding > 0) {
        /* torchvision's Resize(side) + RandomCrop(side, padding) when the
         * images are not side x side: shorter side to side for folders,
         * side x side for datasets of one size. */
        o.random_crop = 1;
        o.random_crop_pad = cfg->random_crop_padding;
        if (!native && h == 0)
            o.resize = side;
        else if (!native)
            o.resize_h = o.resize_w = side;
    } else if (!native) {
        if (h == 0 || cfg->random_resized_crop) {
            /* Folders of images: resize the shorter side, crop the centre
             * (torchvision's eval: Resize(side / crop_pct) +
             * CenterCrop(side)). */
            double pct = cfg->crop_pct > 0 ? cfg->crop_pct : 0.875;
            o.resize = (int)(side / pct + 0.5);
            o.center_crop = 1;
        } else {
            o.resize_h = side;
            o.resize_w = side;
        }
    }
    if (train) {
        o.hflip_prob = (float)cfg->hflip;
        if (cfg->n_color_jitter > 0) {
            o.brightness = (float)cfg->color_jitter[0];
            o.contrast = (float)cfg->color_jitter[cfg->n_color_jitter > 1];
            o.saturation =
                (float)cfg->color_jitter[cfg->n_color_jitter > 2 ? 2 : 0];
        }
        o.auto_augment = cfg->auto_augment == CL_CFG_AUTO_AUGMENT_TA_WIDE
                             ? CL_AUTO_AUGMENT_TA_WIDE
                         : cfg->auto_augment == CL_CFG_AUTO_AUGMENT_RANDAUGMENT
                             ? CL_AUTO_AUGMENT_RANDAUGMENT
                             : CL_AUTO_AUGMENT_NONE;
        o.ra_num_ops = cfg->ra_num_ops;
        o.ra_magnitude = cfg->ra_magnitude;
        o.erase_prob = (float)cfg->re_prob;
        if (o.erase_prob > 0) {
            o.erase_scale[0] = 0.02f;
            o.erase_scale[1] = 0.33f;
            o.erase_ratio[0] = 0.3f;
            o.erase_ratio[1] = 3.3f;
        }
    }
    if (o.random_resized_crop == 0 && o.rrc_scale[0] == 0) {
        o.rrc_scale[0] = 0.08f;
        o.rrc_scale[1] = 1.0f;
        o.rrc_ratio[0] = 0.75f;
        o.rrc_ratio[1] = 4.0f / 3.0f;
    }
    o.interpolation = cfg->interpolation == CL_CFG_INTERP_BICUBIC
                          ? CL_INTERP_BICUBIC
                          : CL_INTERP_BILINEAR;
    norm_of(cfg, c, &o);
    *out = o;
    return CL_OK;
}

cl_status cl_recipe_model(const cl_config *cfg, int in_channels,
                          int num_classes, cl_arch *out)
{
    const char *name = cl_config_enum_name("model", cfg->model);
    if (!name)
        return cl_error(CL_ERR_CONFIG, "model index %d is unknown", cfg->model);
    cl_arch a;
    CL_TRY(cl_arch_parse(name, cl_config_enum_name("stem", cfg->stem), &a));
    cl_arch_set_io(&a, in_channels, num_classes);
    a.resnet.zero_init_residual = cfg->zero_init_residual;
    if (cfg->drop_path >= 0)
        a.swin.drop_path = (float)cfg->drop_path;
    CL_TRY(cl_arch_check(&a));
    *out = a;
    return CL_OK;
}

cl_status cl_recipe_optim(const cl_config *cfg, cl_optim_config *out)
{
    cl_optim_config o = cl_optim_config_default();
    o.kind = cfg->opt == CL_CFG_OPT_ADAMW ? CL_OPT_ADAMW : CL_OPT_SGD;
    o.momentum =
        cfg->opt == CL_CFG_OPT_SGD && cfg->momentum == 0 ? 0.0 : cfg->momentum;
    o.nesterov = cfg->nesterov;
    o.weight_decay = cfg->weight_decay;
    o.filter_bias_and_bn = cfg->filter_bias_and_bn;
    o.embed_weight_decay = cfg->embedding_weight_decay;
    o.beta1 = cfg->beta1;
    o.beta2 = cfg->beta2;
    o.eps = cfg->eps;
    o.backbone_lr_mult = cfg->backbone_lr_mult;
    o.freeze_backbone = cfg->freeze_backbone;
    *out = o;
    return CL_OK;
}

cl_status cl_recipe_ema(const cl_config *cfg, cl_model_ema_config *out)
{
    out->decay = cfg->ema_decay;
    out->steps = cfg->ema_steps;
    out->warmup = cfg->ema_warmup;
    return CL_OK;
}

cl_status cl_recipe_lr(const cl_config *cfg, int64_t steps_per_epoch,
                       int global_batch, cl_lr_config *out)
{
    cl_lr_config l = cl_lr_config_default();
    double scale = 1.0;
    if (cfg->lr_scale == CL_CFG_LR_SCALE_LINEAR)
        scale = global_batch / 256.0;
    l.kind = cfg->scheduler == CL_CFG_SCHED_MULTI_STEP ? CL_LR_MULTI_STEP
             : cfg->scheduler == CL_CFG_SCHED_CONSTANT ? CL_LR_CONSTANT
                                                       : CL_LR_COSINE;
    l.lr = cfg->lr * scale;
    l.min_lr = cfg->min_lr; /* a floor, not scaled (docs/training.md) */
    l.warmup_epochs = cfg->warmup_epochs;
    l.warmup_factor = cfg->warmup_factor;
    l.decay_epochs = cfg->decay_epochs;
    l.n_milestones = cfg->n_milestones;
    for (int i = 0; i < cfg->n_milestones && i < CL_LR_MAX_MILESTONES; i++)
        l.milestones[i] = cfg->milestones[i];
    l.decay_rate = cfg->decay_rate;
    l.epochs = cfg->epoch_size;
    l.steps_per_epoch = steps_per_epoch;
    l.lr_epoch_stair = cfg->lr_epoch_stair;
    CL_TRY(cl_lr_validate(&l));
    *out = l;
    return CL_OK;
}
