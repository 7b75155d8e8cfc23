/* What oneDNN reports about itself and this CPU. */
#ifndef CL_BACKEND_ONEDNN_INFO_H
#define CL_BACKEND_ONEDNN_INFO_H

#include <stddef.h>

/* "2.6.3 (commit ...)" into buf. */
void cl_dnnl_version_string(char *buf, size_t n);
/* The instruction set oneDNN dispatches to, e.g. "avx512_core_bf16". */
const char *cl_dnnl_isa_name(void);

#endif
