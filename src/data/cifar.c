/* CIFAR-10 / CIFAR-100 binary reader (folder or .tar.gz). */
#include "core/error.h"
#include "data/data_internal.h"

cl_status cl__cifar_open(cl_dataset *ds, const cl_dataset_spec *spec,
                         int hundred)
{
    return cl_error(CL_ERR_UNSUPPORTED, "%s: CIFAR reader not built yet",
                    spec->path);
}
