/* cl_ms_load: a MindSpore checkpoint's weights copied into a graph by its
 * load plan, refusing unknown, missing and mismatched tensors by name. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "interop/interop.h"
#include "interop/mindspore_plan.h"

/* MindSpore has no num_batches_tracked; classic's stay as they are. */
static int ends_with_nbt(const char *s)
{
    size_t n = strlen(s), k = strlen("num_batches_tracked");
    return n >= k && strcmp(s + n - k, "num_batches_tracked") == 0;
}

static int is_rel_index(const char *name)
{
    const char *k = "attn.relative_position_index";
    size_t n = strlen(name), l = strlen(k);
    return n >= l && strcmp(name + n - l, k) == 0;
}

cl_status cl_ms_load(const char *path, cl_graph *g, cl_ckpt_mode mode,
                     cl_ms_report *rep)
{
    cl_ms_ckpt c;
    cl_ms_report local;
    cl_ms_plan p;
    if (!rep)
        rep = &local;
    memset(rep, 0, sizeof *rep);
    cl_status s = cl_ms_ckpt_open(&c, path);
    if (s != CL_OK)
        return s;
    if ((s = cl_ms_plan_build(&p, &c, path, rep, 0)) != CL_OK) {
        cl_ms_ckpt_close(&c);
        return s;
    }
    int *src = cl_alloc((size_t)g->n_tensors * sizeof *src, "ckpt map");
    if (!src) {
        s = CL_ERR_NOMEM;
        goto done;
    }
    int swin_graph = cl_graph_find(g, "features.0.0.weight") >= 0;
    if ((p.family == CL_MS_SWIN) != swin_graph) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: a MindSpore %s checkpoint (by its names) for a "
                     "%s model",
                     path, p.family == CL_MS_SWIN ? "Swin" : "ResNet",
                     swin_graph ? "Swin" : "ResNet");
        goto done;
    }
    for (int t = 0; t < g->n_tensors; t++)
        src[t] = -1;
    char unknown[400] = "", bad[600] = "", missing[400] = "";
    int n_unknown = 0, n_bad = 0, n_missing = 0;
    for (int i = 0; i < p.n; i++) {
        const cl_ms_entry *e = &p.e[i];
        int t = e->mapped ? cl_graph_find(g, e->name) : -1;
        if (t < 0 || ends_with_nbt(e->name) ||
            !cl_gtensor_saved(&g->tensors[t])) {
            cl_ms_list_add(unknown, sizeof unknown, &n_unknown, e->from);
            continue;
        }
        const cl_gtensor *gt = &g->tensors[t];
        int floats = 1;
        for (int k = 0; k < e->n_part; k++)
            if (!cl_ms_is_float(c.t[e->part[k]].dtype)) {
                char item[200];
                snprintf(item, sizeof item, "%s is %s", c.t[e->part[k]].name,
                         c.t[e->part[k]].dtype);
                cl_ms_list_add(bad, sizeof bad, &n_bad, item);
                floats = 0;
            }
        if (!floats)
            continue;
        if (!cl_ms_same_shape(&e->shape, &gt->shape)) {
            char a[64], b[64], item[300];
            cl_ms_shape_str(&e->shape, a, sizeof a);
            cl_ms_shape_str(&gt->shape, b, sizeof b);
            if (mode == CL_CKPT_PRETRAINED &&
                (gt->param_flags & CL_PARAM_HEAD)) {
                size_t l = strlen(rep->head_note);
                snprintf(rep->head_note + l, sizeof rep->head_note - l,
                         "%s%s %s in the file, %s in the model", l ? "; " : "",
                         e->name, a, b);
                rep->head_skipped++;
                src[t] = -2;
                continue;
            }
            snprintf(item, sizeof item, "%s %s in the file, %s in the model",
                     e->from, a, b);
            cl_ms_list_add(bad, sizeof bad, &n_bad, item);
            continue;
        }
        src[t] = i;
    }
    for (int t = 0; t < g->n_tensors; t++) {
        const cl_gtensor *gt = &g->tensors[t];
        /* mindcv saves no relative_position_index: the builder's stays. */
        if (cl_gtensor_saved(gt) && src[t] == -1 && !ends_with_nbt(gt->name) &&
            !(p.family == CL_MS_SWIN && is_rel_index(gt->name)))
            cl_ms_list_add(missing, sizeof missing, &n_missing, gt->name);
    }
    if (n_unknown || n_bad || n_missing) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: does not fit the model: %d unknown name(s)%s%s%s; "
                     "%d mismatch(es)%s%s%s; %d missing%s%s%s",
                     path, n_unknown, n_unknown ? " [" : "", unknown,
                     n_unknown ? "]" : "", n_bad, n_bad ? " [" : "", bad,
                     n_bad ? "]" : "", n_missing, n_missing ? " [" : "",
                     missing, n_missing ? "]" : "");
        goto done;
    }
    for (int t = 0; t < g->n_tensors; t++) {
        if (src[t] < 0)
            continue;
        const cl_gtensor *gt = &g->tensors[t];
        if (gt->dtype == CL_I64) {
            s = cl_error(CL_ERR_UNSUPPORTED,
                         "%s: %s is an integer buffer, which the MindSpore "
                         "reader does not convert",
                         path, gt->name);
            goto done;
        }
    }
    for (int t = 0; t < g->n_tensors; t++) {
        if (src[t] < 0)
            continue;
        const cl_gtensor *gt = &g->tensors[t];
        float *dst = gt->kind == CL_GT_PARAM ? cl_graph_param(g, t)
                                             : cl_graph_buffer(g, t);
        cl_ms_entry_to_f32(&c, &p.e[src[t]], dst, (size_t)cl_graph_numel(g, t));
        rep->loaded++;
    }
done:
    cl_free(src);
    cl_ms_plan_free(&p);
    cl_ms_ckpt_close(&c);
    return s;
}
