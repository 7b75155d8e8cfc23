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
/* Non-zero where the CPU computes bf16 dot products itself (avx512_bf16's
 * vdpbf16ps, or AMX); on plain AVX-512 oneDNN runs bf16 by converting every
 * operand, slower than f32. */
int cl_dnnl_bf16_native(void);
/* Non-zero where oneDNN's int8 kernels sum u8 x s8 products in 32 bits
 * (VNNI: avx512_vnni, avx_vnni, AMX); below, pairs are summed in 16 bits
 * first and can saturate. */
int cl_dnnl_int8_vnni(void);

struct cl_backend;
/* Steps of an onednn backend's plan (every list) named `what`, e.g.
 * "weight gradient matmul": which path the plan took, for tests and
 * benchmarks to check; -1 for another backend or one without a plan. */
int cl_dnnl_plan_steps(const struct cl_backend *be, const char *what);
/* How the plan computes each node's convolutions: four characters per
 * graph node, the first '0' + 1 if the weight gradient runs as a matmul
 * + 2 if the backward data runs on the stride grid, then which of
 * oneDNN's implementations its forward, weight-gradient and data-gradient
 * primitives run ('0' oneDNN's first choice, 'k' the k-th of its list
 * without the reference loops); NULL for another backend.  Owned by be;
 * cl_backend_opts.conv_paths takes it back. */
const char *cl_dnnl_conv_paths(const struct cl_backend *be);
/* 1 where inference plans run attention (softmax between two matmuls) as
 * one fused step: builds with AVX-512, whose registers hold its 16-lane
 * vectors; 0 elsewhere, where the three steps are faster. */
int cl_dnnl_attention_fused(void);
/* The implementations oneDNN runs the plan's conv primitives with, as
 * "forward jit:avx2 x20, jit_1x1:avx2 x33; weight gradient ..." (the
 * count of conv nodes each); empty for another backend. */
void cl_dnnl_conv_impls(const struct cl_backend *be, char *buf, size_t cap);
/* Plan-time measurement of an autotuned plan: conv backward passes with a
 * second way measured, and of those the ones planned the other way; both
 * 0 when the plan measured nothing. */
void cl_dnnl_tune_counts(const struct cl_backend *be, int *measured,
                         int *rewritten);
/* One kind of plan step as timed since cl_dnnl_profile_start: its name
 * ("inner product forward"), its node's op (-1 for none), the seconds
 * summed and how many ran. */
typedef struct cl_dnnl_prof_row {
    const char *what;
    int op;
    double seconds;
    long runs;
    /* The bytes of the steps' arguments (each read or written once: the
     * least their work moves), summed. */
    double bytes;
} cl_dnnl_prof_row;
/* Starts (or restarts from zero) timing every step of be's plan.  Each
 * step then waits for its primitive, so the plan runs a little slower
 * while timed.  0, or -1 for another backend or without memory. */
int cl_dnnl_profile_start(struct cl_backend *be);
/* Up to cap of the kinds timed since, most time first; their count. */
int cl_dnnl_profile_rows(const struct cl_backend *be, cl_dnnl_prof_row *rows,
                         int cap);

#endif
