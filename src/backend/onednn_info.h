/* What oneDNN reports about itself and this CPU, and what a plan made of
 * it. */
#ifndef CL_BACKEND_ONEDNN_INFO_H
#define CL_BACKEND_ONEDNN_INFO_H

#include <stddef.h>

/* "2.6.3 (commit ...)" into buf. */
void cl_dnnl_version_string(char *buf, size_t n);
/* The instruction set oneDNN dispatches to, e.g. "avx512_core_bf16". */
const char *cl_dnnl_isa_name(void);
/* Non-zero if oneDNN runs bf16 convolutions here (amp_level O1 / O2):
 * avx512_core or newer, natively with avx512_bf16 or AMX, emulated
 * without.  oneDNN 2.6 has no bf16 convolution below AVX-512. */
int cl_dnnl_bf16_supported(void);

struct cl_backend;
/* Steps of an onednn backend's plan (every list) named `what`, e.g.
 * "weight gradient matmul": which path the plan took, for tests and
 * benchmarks to check; -1 for another backend or one without a plan. */
int cl_dnnl_plan_steps(const struct cl_backend *be, const char *what);

#endif
