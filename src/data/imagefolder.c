/* ImageFolder reader: root/<class>/<image>, decoded lazily. */
#include "core/error.h"
#include "data/data_internal.h"

cl_status cl__imagefolder_open(cl_dataset *ds, const cl_dataset_spec *spec)
{
    return cl_error(CL_ERR_UNSUPPORTED, "%s: imagefolder not built yet",
                    spec->path);
}
