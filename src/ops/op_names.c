/* Names of the ops and their differentiable inputs, generated from
 * ops.def. */
#include "ops/ops.h"

const char *cl_op_name(cl_op_kind k)
{
    static const char *const names[CL_OP_COUNT] = {
#define CL_OP(NAME, stem, grads) #stem,
#include "ops/ops.def"
#undef CL_OP
    };
    if ((int)k < 0 || k >= CL_OP_COUNT)
        return "unknown";
    return names[k];
}

unsigned cl_op_grad_inputs(cl_op_kind k)
{
    static const unsigned grads[CL_OP_COUNT] = {
#define CL_OP(NAME, stem, grads) grads,
#include "ops/ops.def"
#undef CL_OP
    };
    if ((int)k < 0 || k >= CL_OP_COUNT)
        return 0;
    return grads[k];
}
