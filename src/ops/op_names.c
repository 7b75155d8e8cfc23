/* Names of the ops, generated from ops.def. */
#include "ops/ops.h"

const char *cl_op_name(cl_op_kind k)
{
    static const char *const names[CL_OP_COUNT] = {
#define CL_OP(NAME, stem) #stem,
#include "ops/ops.def"
#undef CL_OP
    };
    if ((int)k < 0 || k >= CL_OP_COUNT)
        return "unknown";
    return names[k];
}
