/* The oneDNN backend's loss: softmax cross-entropy over the plain f32
 * logits, its gradient written in the same pass (the loss has no backward
 * step of its own). */
#include <math.h>

#include "backend/onednn/internal.h"

/* Mean softmax cross-entropy over the batch; writes dlogits when a
 * gradient store was planned. */
static cl_status softmax_ce(dn_ctx *d, const dn_step *s)
{
    const cl_graph *g = d->g;
    const cl_softmax_ce_attr *a = &g->nodes[s->node].attr.softmax_ce;
    const int N = g->batch, K = a->num_classes;
    const float *z = cl_dnnl_arg_ptr(d, &s->args[0]);
    float *dz = s->nargs > 1 ? cl_dnnl_arg_ptr(d, &s->args[1]) : NULL;
    const float ls = a->label_smoothing;
    double total = 0.0;
    if (!d->has_labels && !d->has_targets) {
        d->loss = NAN;
        return CL_OK;
    }
    for (int i = 0; i < N; i++) {
        const float *zi = z + (size_t)i * K;
        float m = zi[0];
        for (int k = 1; k < K; k++)
            m = zi[k] > m ? zi[k] : m;
        double se = 0.0;
        for (int k = 0; k < K; k++)
            se += exp((double)(zi[k] - m));
        double lse = (double)m + log(se);
        double li = 0.0;
        for (int k = 0; k < K; k++) {
            double t;
            if (d->has_labels)
                t = d->labels[i] == k ? 1.0 : 0.0;
            else
                t = d->targets[(size_t)i * K + k];
            t = (1.0 - ls) * t + ls / K;
            li -= t * ((double)zi[k] - lse);
            if (dz)
                dz[(size_t)i * K + k] =
                    (float)((exp((double)zi[k] - lse) - t) / N);
        }
        total += li;
    }
    d->loss = (float)(total / N);
    return CL_OK;
}

cl_status cl_dnnl_loss_fwd(dn_ctx *d, int i)
{
    cl_status st = CL_OK;
    const cl_node *n = &d->g->nodes[i];
    int lg = rep(d, n->in[0]);
    dn_step *s;
    if (!d->t[lg].has_md) {
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: softmax cross-entropy needs logits made by a "
                        "node of this graph",
                        n->name);
    }
    dnnl_memory_desc_t plain;
    md_plain_like(&plain, &d->t[lg].md);
    if (!md_eq(&plain, &d->t[lg].md) || plain.ndims != 2)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: softmax cross-entropy needs plain (N, K) logits",
                        n->name);
    if (d->mode == CL_PLAN_TRAIN)
        TRY_GOTO(cl_dnnl_md_store(d, &plain, &d->t[lg].dstore));
    for (int k = 0; k < n_fwd_lists(d); k++) {
        TRY_GOTO(cl_dnnl_step_run(d, fwd_list(d, k), softmax_ce, i,
                                  "softmax cross-entropy", i, &s));
        cl_dnnl_arg_store(d, s, 0, d->t[lg].store, &plain);
        if (d->t[lg].dstore >= 0)
            cl_dnnl_arg_store(d, s, 1, d->t[lg].dstore, &plain);
    }
fail:
    return st;
}
