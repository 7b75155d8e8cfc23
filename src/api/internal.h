/* What the CLI takes from api/ beyond the public header: calls that do not
 * leave libclassic.so (hidden, as every non-CL_API function). */
#ifndef CL_API_INTERNAL_H
#define CL_API_INTERNAL_H

#include "classic/classic.h"

/* cl_classifier_load, reading a checkpoint's raw weights when raw is
 * non-zero instead of the EMA it may hold (`--load_ema false`). */
cl_status cl__classifier_load_weights(cl_classifier **out, const char *path,
                                      const char *arch, const char *backend,
                                      int raw);

#endif
