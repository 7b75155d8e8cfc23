/* A run configuration translated into the options of each component: the
 * dataset spec, the train and eval transforms, the model, the optimizer
 * and the lr schedule.  The one place where config keys meet components. */
#ifndef CL_TRAIN_RECIPE_H
#define CL_TRAIN_RECIPE_H

#include "data/data.h"
#include "io/config.h"
#include "models/arch.h"
#include "train/lr.h"
#include "train/model_ema.h"
#include "train/optim.h"

/* The dataset of split `usage` (train or test).  Strings point into cfg
 * or into dir_buf (imagefolder: data_dir/<split>). */
cl_status cl_recipe_dataset(const cl_config *cfg, cl_data_usage usage,
                            char *dir_buf, size_t n, cl_dataset_spec *spec);

/* The model's input geometry for a dataset: in_channels from the config
 * (0 means the dataset's), side = image_size (0 means the dataset's). */
cl_status cl_recipe_input(const cl_config *cfg, const cl_dataset *ds, int *c,
                          int *side);

/* Train (random ops as configured) or eval (deterministic) transforms for
 * c x side x side model inputs from src_h x src_w images (0 x 0: sizes vary,
 * as in image folders). */
cl_status cl_recipe_transforms(const cl_config *cfg, int src_h, int src_w,
                               int c, int side, int train,
                               cl_transform_opts *out);

cl_status cl_recipe_model(const cl_config *cfg, int in_channels,
                          int num_classes, cl_arch *out);

/* global_batch = batch_size x ranks x accumulation_steps; with
 * lr_scale: linear the lr (and min_lr) are scaled by global_batch / 256. */
cl_status cl_recipe_optim(const cl_config *cfg, cl_optim_config *out);
/* The weight average's decay, steps and warm-up (ema_* keys). */
cl_status cl_recipe_ema(const cl_config *cfg, cl_model_ema_config *out);
cl_status cl_recipe_lr(const cl_config *cfg, int64_t steps_per_epoch,
                       int global_batch, cl_lr_config *out);

#endif
