/* Backend creation by name and destruction; the steps themselves are
 * inline calls through the vtable (backend.h). */
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/onednn_info.h"
#include "core/error.h"
#include "core/mem.h"

cl_status cl_backend_create(cl_backend **out, const char *name, cl_graph *g,
                            cl_plan_mode mode, const cl_backend_opts *opts)
{
    *out = NULL;
    const cl_backend_vtbl *vt = NULL;
    if (name && strcmp(name, "ref") == 0)
        vt = &cl_backend_ref_vtbl;
    else if (name && strcmp(name, "onednn") == 0)
        vt = &cl_backend_onednn_vtbl;
    else
        return cl_error(CL_ERR_ARG, "backend '%s' is not one of ref, onednn",
                        name ? name : "(null)");
    if (!g || !g->finalized)
        return cl_error(CL_ERR_ARG,
                        "backend %s: the graph must be finalized first",
                        vt->name);
    if (mode != CL_PLAN_TRAIN && mode != CL_PLAN_INFER)
        return cl_error(CL_ERR_ARG, "backend %s: plan mode %d is unknown",
                        vt->name, (int)mode);
    if (opts &&
        (opts->threads < 0 || opts->amp_level < 0 || opts->amp_level > 2))
        return cl_error(CL_ERR_ARG,
                        "backend %s: threads %d (expected >= 0) or amp level "
                        "%d (expected 0..2) out of range",
                        vt->name, opts->threads, opts->amp_level);
    if (vt == &cl_backend_ref_vtbl && opts && opts->amp_level > 0)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "backend ref: amp_level O%d (bf16) runs on the "
                        "onednn backend only; ref, the f32 oracle, needs "
                        "amp_level O0",
                        opts->amp_level);
    cl_backend *be = cl_alloc_zero(sizeof *be, "backend");
    if (!be)
        return CL_ERR_NOMEM;
    be->vt = vt;
    be->g = g;
    be->mode = mode;
    if (opts)
        be->opts = *opts;
    cl_status s = vt->plan(be, g, mode);
    if (s != CL_OK) {
        /* destroy must cope with a half-made plan. */
        if (vt->destroy)
            vt->destroy(be);
        cl_free(be);
        return cl_error_wrap(s, "backend %s: ", vt->name);
    }
    *out = be;
    return CL_OK;
}

void cl_backend_destroy(cl_backend *be)
{
    if (!be)
        return;
    if (be->vt && be->vt->destroy)
        be->vt->destroy(be);
    cl_free(be);
}

/* The plan's statistics through the vtable; all zero without a backend or
 * a stats entry. */
static cl_backend_stats plan_stats(const cl_backend *be)
{
    cl_backend_stats s = {0};
    if (be && be->vt && be->vt->stats)
        be->vt->stats(be, &s);
    return s;
}

const char *cl_backend_conv_paths(const cl_backend *be)
{
    return plan_stats(be).conv_paths;
}

void cl_backend_tune_counts(const cl_backend *be, int *measured, int *rewritten)
{
    const cl_backend_stats s = plan_stats(be);
    *measured = s.tune_measured;
    *rewritten = s.tune_rewritten;
}

int cl_backend_tune_impls(const cl_backend *be)
{
    return plan_stats(be).tune_impls;
}

unsigned cl_backend_fallback_ops(const cl_backend *be)
{
    return plan_stats(be).fallback_ops;
}

void cl_backend_fallback_names(const cl_backend *be, char *buf, size_t n)
{
    unsigned ops = cl_backend_fallback_ops(be);
    size_t len = 0;
    if (n == 0)
        return;
    buf[0] = '\0';
    for (int k = 0; k < CL_OP_COUNT; k++) {
        if (!(ops >> k & 1u))
            continue;
        int w = snprintf(buf + len, n - len, "%s%s", len ? ", " : "",
                         cl_op_name((cl_op_kind)k));
        if (w < 0 || (size_t)w >= n - len)
            return; /* truncated */
        len += (size_t)w;
    }
}

static const char *const precision_names[CL_PRECISION_COUNT] = {"f32", "bf16",
                                                                "int8"};

cl_status cl_precision_parse(const char *s, cl_precision *out)
{
    *out = CL_PRECISION_AUTO;
    if (!s)
        return CL_OK;
    for (int p = 0; p < CL_PRECISION_COUNT; p++)
        if (strcmp(s, precision_names[p]) == 0) {
            *out = (cl_precision)p;
            return CL_OK;
        }
    return cl_error(CL_ERR_ARG, "precision '%s' is not one of f32, bf16, int8",
                    s);
}

const char *cl_precision_name(cl_precision p)
{
    if (p == CL_PRECISION_AUTO)
        return "the model's own";
    return p >= 0 && p < CL_PRECISION_COUNT ? precision_names[p] : "?";
}

int cl_precision_amp_level(cl_precision p)
{
    return p == CL_PRECISION_BF16 ? 2 : 0;
}

cl_status cl_precision_check(const char *name, cl_precision p)
{
    if (p == CL_PRECISION_F32 || p == CL_PRECISION_AUTO)
        return CL_OK;
    if (name && strcmp(name, "ref") == 0)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "precision %s runs on the onednn backend only; ref, "
                        "the f32 oracle, runs precision f32",
                        cl_precision_name(p));
    /* oneDNN runs int8 on every ISA it runs at (below VNNI with 7-bit
     * weights, onednn/conv.c); the model must carry scales (model.c). */
    if (p == CL_PRECISION_INT8)
        return CL_OK;
    /* Offered only where bf16 runs fast: a user choosing it for speed
     * must hear about an emulated path rather than get it. */
    if (!cl_dnnl_bf16_native())
        return cl_error(CL_ERR_UNSUPPORTED,
                        "precision bf16 needs a CPU with avx512_bf16 or AMX "
                        "(oneDNN runs at %s here, where bf16 would be "
                        "emulated and slower than f32); use precision f32",
                        cl_dnnl_isa_name());
    return CL_OK;
}
