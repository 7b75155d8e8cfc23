/* oneDNN backend: placeholder until the primitives land; planning fails
 * with a clear message rather than running anything. */
#include "backend/backend.h"
#include "core/error.h"

static int dnnl_supports(const cl_node *n)
{
    (void)n;
    return 0;
}

static cl_status dnnl_plan(cl_backend *be, cl_graph *g, cl_plan_mode mode)
{
    (void)be;
    (void)g;
    (void)mode;
    return cl_error(CL_ERR_UNSUPPORTED,
                    "the onednn backend is not available in this build; "
                    "use --backend ref");
}

const cl_backend_vtbl cl_backend_onednn_vtbl = {
    .name = "onednn",
    .supports = dnnl_supports,
    .plan = dnnl_plan,
};
