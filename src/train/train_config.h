/* The config a training run runs with: the recipe and overrides over
 * classic's defaults, and on resume over the config its checkpoint holds. */
#ifndef CL_TRAIN_TRAIN_CONFIG_H
#define CL_TRAIN_TRAIN_CONFIG_H

#include "io/config.h"
#include "io/strbuf.h"

/* Into *cfg: the defaults, then the YAML file path and the YAML text
 * (either may be NULL), then the n "key=value" overrides (who names their
 * source in errors), then cl_config_check.
 *
 * When the result resumes a checkpoint that holds its resolved config,
 * that config replaces the defaults (so `--resume X` alone continues the
 * run X belongs to) and the recipe and overrides apply over it.  Refused
 * then, in one sentence: a change of model, stem, in_channels or
 * num_classes, and an epoch_size that would change the lr of the steps
 * left (a cosine laid over epoch_size).  notes (may be NULL) gets one
 * line per key whose value differs from the checkpoint's, for the log. */
cl_status cl_train_config_resolve(cl_config *cfg, const char *path,
                                  const char *text,
                                  const char *const *overrides, int n,
                                  const char *who, cl_strbuf *notes);

#endif
