/* The oneDNN backend's context: errors, arena stores and their lifetimes,
 * memory descriptors, primitives and the steps that record their
 * executions, and the arena layout. */
#include <dnnl.h>
#include <dnnl_debug.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/onednn/internal.h"
#include "backend/onednn_info.h"
#include "core/error.h"
#include "core/mem.h"

cl_status cl_dnnl_fail(const dn_ctx *d, dnnl_status_t s, int node,
                       const char *what)
{
    if (d->amp && s == dnnl_unimplemented)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: dnnl %s: %s for bf16 (amp_level O%d) on this "
                        "CPU (oneDNN isa %s); amp_level O0 runs in f32",
                        node >= 0 ? d->g->nodes[node].name : "graph", what,
                        dnnl_status2str(s), d->amp, cl_dnnl_isa_name());
    return cl_error(CL_ERR_BACKEND, "%s: dnnl %s: %s",
                    node >= 0 ? d->g->nodes[node].name : "graph", what,
                    dnnl_status2str(s));
}

cl_status cl_dnnl_grow(void **p, int *cap, int need, size_t elem,
                       const char *what)
{
    if (need <= *cap)
        return CL_OK;
    int nc = *cap ? *cap * 2 : 64;
    while (nc < need)
        nc *= 2;
    size_t bytes;
    CL_TRY(cl_mul_size((size_t)nc, elem, &bytes, what));
    void *q = cl_alloc(bytes, what);
    if (!q)
        return CL_ERR_NOMEM;
    if (*p)
        memcpy(q, *p, (size_t)*cap * elem);
    cl_free(*p);
    *p = q;
    *cap = nc;
    return CL_OK;
}

cl_status cl_dnnl_store_new(dn_ctx *d, size_t bytes, int *out)
{
    CL_TRY(cl_dnnl_grow((void **)&d->st, &d->cap_st, d->n_st + 1, sizeof *d->st,
                        "onednn: stores"));
    cl_dnnl_block *b = &d->st[d->n_st];
    b->bytes = bytes;
    b->t0 = INT_MAX;
    b->t1 = -1;
    b->off = 0;
    *out = d->n_st++;
    return CL_OK;
}

void cl_dnnl_touch(dn_ctx *d, int s, int time)
{
    if (time < d->st[s].t0)
        d->st[s].t0 = time;
    if (time > d->st[s].t1)
        d->st[s].t1 = time;
}

cl_status cl_dnnl_md_store(dn_ctx *d, const dnnl_memory_desc_t *md, int *out)
{
    return cl_dnnl_store_new(d, dnnl_memory_desc_get_size(md), out);
}

/* Plain row-major md of the given dims. */
void cl_dnnl_md_plain(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims)
{
    static const dnnl_format_tag_t tags[] = {dnnl_format_tag_undef,
                                             dnnl_a,
                                             dnnl_ab,
                                             dnnl_abc,
                                             dnnl_abcd,
                                             dnnl_abcde};
    CL_ASSERT(nd >= 1 && nd <= 5);
    dnnl_status_t s =
        dnnl_memory_desc_init_by_tag(md, nd, dims, DN_DT, tags[nd]);
    CL_ASSERT(s == dnnl_success);
}

void cl_dnnl_md_any(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims,
                    dnnl_data_type_t dt)
{
    dnnl_status_t s =
        dnnl_memory_desc_init_by_tag(md, nd, dims, dt, dnnl_format_tag_any);
    CL_ASSERT(s == dnnl_success);
}

dnnl_memory_desc_t cl_dnnl_qmd(const_dnnl_primitive_desc_t pd, dnnl_query_t q,
                               int idx)
{
    dnnl_memory_desc_t md;
    const dnnl_memory_desc_t *p = dnnl_primitive_desc_query_md(pd, q, idx);
    if (p)
        md = *p;
    else
        memset(&md, 0, sizeof md);
    return md;
}

/* ---- primitives and steps ------------------------------------------------ */

cl_status cl_dnnl_attr_new(dn_ctx *d, dnnl_primitive_attr_t *attr)
{
    cl_status st = CL_OK;
    *attr = NULL;
    DN(dnnl_primitive_attr_create(attr), -1, "attribute");
    DN(dnnl_primitive_attr_set_scratchpad_mode(*attr,
                                               dnnl_scratchpad_mode_user),
       -1, "attribute scratchpad");
    return CL_OK;
fail:
    if (*attr)
        dnnl_primitive_attr_destroy(*attr);
    *attr = NULL;
    return st;
}

/* Post-ops for a fused epilogue: a sum (accumulate into dst) and/or an
 * activation (ReLU, GELU; dnnl_alg_kind_undef for none). */
cl_status cl_dnnl_attr_post(dn_ctx *d, int sum, dnnl_alg_kind_t act,
                            dnnl_primitive_attr_t *attr)
{
    cl_status st = CL_OK;
    dnnl_post_ops_t po = NULL;
    TRY_GOTO(cl_dnnl_attr_new(d, attr));
    if (!sum && act == dnnl_alg_kind_undef)
        return CL_OK;
    DN(dnnl_post_ops_create(&po), -1, "post-ops");
    if (sum)
        DN(dnnl_post_ops_append_sum(po, 1.0f), -1, "post-op sum");
    if (act != dnnl_alg_kind_undef)
        DN(dnnl_post_ops_append_eltwise(po, 1.0f, act, 0.0f, 0.0f), -1,
           "post-op activation");
    DN(dnnl_primitive_attr_set_post_ops(*attr, po), -1, "post-ops");
    dnnl_post_ops_destroy(po);
    return CL_OK;
fail:
    if (po)
        dnnl_post_ops_destroy(po);
    if (*attr)
        dnnl_primitive_attr_destroy(*attr);
    *attr = NULL;
    return st;
}

/* Registers pd and creates its primitive; both are freed with the plan. */
static cl_status prim_from_pd(dn_ctx *d, int node, const char *what,
                              dnnl_primitive_desc_t pd, dnnl_primitive_t *prim)
{
    cl_status st = CL_OK;
    st = cl_dnnl_grow((void **)&d->pds, &d->cap_pds, d->n_pds + 1,
                      sizeof *d->pds, "onednn: primitive descriptors");
    if (st != CL_OK) {
        dnnl_primitive_desc_destroy(pd);
        return st;
    }
    d->pds[d->n_pds++] = pd;
    TRY_GOTO(cl_dnnl_grow((void **)&d->prims, &d->cap_prims, d->n_prims + 1,
                          sizeof *d->prims, "onednn: primitives"));
    DN(dnnl_primitive_create(prim, pd), node, what);
    d->prims[d->n_prims++] = *prim;
    dnnl_memory_desc_t smd = cl_dnnl_qmd(pd, dnnl_query_scratchpad_md, 0);
    size_t sp = smd.ndims ? md_size(&smd) : 0;
    if (sp > d->scratch_bytes)
        d->scratch_bytes = sp;
    return CL_OK;
fail:
    return st;
}

/* Makes the primitive of an op descriptor; attr NULL means the default
 * (user scratchpad). */
cl_status cl_dnnl_prim_make(dn_ctx *d, int node, const char *what,
                            const_dnnl_op_desc_t desc,
                            const_dnnl_primitive_attr_t attr,
                            const_dnnl_primitive_desc_t hint,
                            dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim)
{
    cl_status st = CL_OK;
    dnnl_primitive_attr_t own = NULL;
    if (!attr) {
        TRY_GOTO(cl_dnnl_attr_new(d, &own));
        attr = own;
    }
    *pd = NULL;
    DN(dnnl_primitive_desc_create(pd, desc, attr, d->eng, hint), node, what);
    if (own)
        dnnl_primitive_attr_destroy(own);
    own = NULL;
    return prim_from_pd(d, node, what, *pd, prim);
fail:
    if (own)
        dnnl_primitive_attr_destroy(own);
    return st;
}

/* Implementation k of oneDNN's list for desc, counting only those that
 * are not its reference loops ("ref:") and each name once (oneDNN 2.6
 * lists some twice), in its order of preference; NULL past the end.
 * *count (if given) is the length of that list. */
static dnnl_primitive_desc_t nth_impl(dn_ctx *d, const_dnnl_op_desc_t desc,
                                      const_dnnl_primitive_attr_t attr,
                                      const_dnnl_primitive_desc_t hint, int k,
                                      int *count)
{
    enum { MAX_NAMES = 16 };
    dnnl_primitive_desc_iterator_t it = NULL;
    dnnl_primitive_desc_t got = NULL;
    char names[MAX_NAMES][32];
    int seen = 0;
    if (dnnl_primitive_desc_iterator_create(&it, desc, attr, d->eng, hint) !=
        dnnl_success)
        return NULL;
    do {
        dnnl_primitive_desc_t pd = dnnl_primitive_desc_iterator_fetch(it);
        const char *name = "";
        int again = 0;
        if (!pd)
            break;
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name);
        for (int j = 0; j < seen; j++)
            again |= strncmp(names[j], name, sizeof names[j] - 1) == 0;
        if (strncmp(name, "ref", 3) != 0 && !again && seen < MAX_NAMES) {
            snprintf(names[seen], sizeof names[seen], "%s", name);
            if (seen++ == k && !got) {
                got = pd;
                pd = NULL;
            }
        }
        if (pd)
            dnnl_primitive_desc_destroy(pd);
        if (got && !count)
            break;
    } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    dnnl_primitive_desc_iterator_destroy(it);
    if (count)
        *count = seen;
    return got;
}

cl_status cl_dnnl_conv_prim_make(dn_ctx *d, int node, const char *what,
                                 const_dnnl_op_desc_t desc,
                                 const_dnnl_primitive_attr_t attr,
                                 const_dnnl_primitive_desc_t hint,
                                 dnnl_primitive_desc_t *pd,
                                 dnnl_primitive_t *prim)
{
    cl_status st = CL_OK;
    const size_t at = 3 * (size_t)node + (size_t)d->part;
    const int k = d->impls ? d->impls[at] - '0' : 0;
    dnnl_primitive_attr_t own = NULL;
    if (!attr) {
        TRY_GOTO(cl_dnnl_attr_new(d, &own));
        attr = own;
    }
    *pd = NULL;
    if (k > 0 || d->impl_count)
        *pd = nth_impl(d, desc, attr, hint, k,
                       d->impl_count ? &d->impl_count[at] : NULL);
    if (!*pd) /* the first, or one this CPU lacks (a state file's) */
        DN(dnnl_primitive_desc_create(pd, desc, attr, d->eng, hint), node,
           what);
    if (own)
        dnnl_primitive_attr_destroy(own);
    own = NULL;
    if (d->impl_name) {
        const char *name = "";
        dnnl_primitive_desc_query(*pd, dnnl_query_impl_info_str, 0, &name);
        snprintf(d->impl_name[at], sizeof d->impl_name[at], "%s", name);
    }
    return prim_from_pd(d, node, what, *pd, prim);
fail:
    if (own)
        dnnl_primitive_attr_destroy(own);
    return st;
}

cl_status cl_dnnl_reorder_make_scaled(dn_ctx *d, int node, const char *what,
                                      const dnnl_memory_desc_t *src,
                                      const dnnl_memory_desc_t *dst, int64_t n,
                                      int mask, const float *scales,
                                      dnnl_primitive_desc_t *pd,
                                      dnnl_primitive_t *prim)
{
    cl_status st = CL_OK;
    dnnl_primitive_attr_t attr = NULL;
    TRY_GOTO(cl_dnnl_attr_new(d, &attr));
    if (scales)
        DN(dnnl_primitive_attr_set_output_scales(attr, n, mask, scales), node,
           what);
    *pd = NULL;
    DN(dnnl_reorder_primitive_desc_create(pd, src, d->eng, dst, d->eng, attr),
       node, what);
    dnnl_primitive_attr_destroy(attr);
    attr = NULL;
    return prim_from_pd(d, node, what, *pd, prim);
fail:
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return st;
}

cl_status cl_dnnl_reorder_make(dn_ctx *d, int node, const char *what,
                               const dnnl_memory_desc_t *src,
                               const dnnl_memory_desc_t *dst,
                               dnnl_primitive_desc_t *pd,
                               dnnl_primitive_t *prim)
{
    return cl_dnnl_reorder_make_scaled(d, node, what, src, dst, 0, 0, NULL, pd,
                                       prim);
}

cl_status cl_dnnl_step_new(dn_ctx *d, dn_list *l, dn_step_kind k, int node,
                           const char *what, int time, dn_step **out)
{
    CL_TRY(cl_dnnl_grow((void **)&l->s, &l->cap, l->n + 1, sizeof *l->s,
                        "onednn: steps"));
    dn_step *s = &l->s[l->n++];
    memset(s, 0, sizeof *s);
    s->kind = k;
    s->node = node;
    s->what = what;
    s->time = time;
    s->part = d->part;
    if (time >= d->n_time)
        d->n_time = time + 1;
    *out = s;
    return CL_OK;
}

cl_status cl_dnnl_step_run(dn_ctx *d, dn_list *l, dn_run_fn fn, int node,
                           const char *what, int time, dn_step **out)
{
    CL_TRY(cl_dnnl_step_new(d, l, STEP_RUN, node, what, time, out));
    (*out)->run = fn;
    return CL_OK;
}

void cl_dnnl_arg_store_at(dn_ctx *d, dn_step *s, int arg, int store, size_t off,
                          const dnnl_memory_desc_t *md)
{
    CL_ASSERT(s->nargs < DN_MAX_ARGS && store >= 0);
    dn_arg *a = &s->args[s->nargs++];
    a->arg = arg;
    a->kind = REF_STORE;
    a->store = store;
    a->off = off;
    a->ptr = NULL;
    a->md = *md;
    cl_dnnl_touch(d, store, s->time);
}

void cl_dnnl_arg_store(dn_ctx *d, dn_step *s, int arg, int store,
                       const dnnl_memory_desc_t *md)
{
    cl_dnnl_arg_store_at(d, s, arg, store, 0, md);
}

void cl_dnnl_arg_ext(dn_step *s, int arg, void *ptr,
                     const dnnl_memory_desc_t *md)
{
    CL_ASSERT(s->nargs < DN_MAX_ARGS && ptr);
    dn_arg *a = &s->args[s->nargs++];
    a->arg = arg;
    a->kind = REF_EXT;
    a->store = -1;
    a->ptr = ptr;
    a->md = *md;
}

/* A primitive step; adds the scratchpad argument when pd wants one. */
cl_status cl_dnnl_step_prim(dn_ctx *d, dn_list *l, int node, const char *what,
                            int time, const_dnnl_primitive_desc_t pd,
                            dnnl_primitive_t prim, dn_step **out)
{
    CL_TRY(cl_dnnl_step_new(d, l, STEP_PRIM, node, what, time, out));
    (*out)->prim = prim;
    dnnl_memory_desc_t smd = cl_dnnl_qmd(pd, dnnl_query_scratchpad_md, 0);
    if (smd.ndims && md_size(&smd) > 0) {
        dn_arg *a = &(*out)->args[(*out)->nargs++];
        a->arg = DNNL_ARG_SCRATCHPAD;
        a->kind = REF_SCRATCH;
        a->store = -1;
        a->md = smd;
    }
    return CL_OK;
}

/* A reorder of store from (md) into store to (want): a primitive of its
 * own, one step in list l at time. */
cl_status cl_dnnl_reorder_step(dn_ctx *d, dn_list *l, int i, int time,
                               const char *what, int from,
                               const dnnl_memory_desc_t *md, int to,
                               const dnnl_memory_desc_t *want)
{
    cl_status st = CL_OK;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dn_step *s;
    TRY_GOTO(cl_dnnl_reorder_make(d, i, what, md, want, &pd, &prim));
    TRY_GOTO(cl_dnnl_step_prim(d, l, i, what, time, pd, prim, &s));
    cl_dnnl_arg_store(d, s, DNNL_ARG_FROM, from, md);
    cl_dnnl_arg_store(d, s, DNNL_ARG_TO, to, want);
fail:
    return st;
}

void *cl_dnnl_arg_ptr(const dn_ctx *d, const dn_arg *a)
{
    switch (a->kind) {
    case REF_STORE:
        return d->arena + d->st[a->store].off + a->off;
    case REF_EXT:
        return a->ptr;
    case REF_SCRATCH:
        return d->scratch;
    default:
        return NULL;
    }
}

cl_status cl_dnnl_set_md(dn_ctx *d, int t, const dnnl_memory_desc_t *md,
                         int store)
{
    int r = rep(d, t);
    d->t[r].md = *md;
    d->t[r].has_md = 1;
    if (store >= 0) {
        d->t[r].store = store;
        return CL_OK;
    }
    return cl_dnnl_md_store(d, md, &d->t[r].store);
}

/* Lays the graph input out plainly unless a conv chose a layout. */
cl_status cl_dnnl_ensure_input_md(dn_ctx *d, int x)
{
    if (in_md(d, x))
        return CL_OK;
    dnnl_memory_desc_t md;
    dnnl_dims_t dims;
    dims_of(&gt(d, x)->shape, dims);
    cl_dnnl_md_plain(&md, gt(d, x)->shape.ndim, dims);
    return cl_dnnl_set_md(d, x, &md, -1);
}

/* ---- the arena ------------------------------------------------------------
 *
 * Planning by lifetimes: largest block first, each at the lowest offset
 * free of every already placed block alive at the same time. */

typedef struct range {
    size_t lo, hi;
} range;

static int by_size_desc(const void *a, const void *b, void *blocks)
{
    const cl_dnnl_block *bl = blocks;
    size_t x = bl[*(const int *)a].bytes, y = bl[*(const int *)b].bytes;
    if (x != y)
        return x < y ? 1 : -1;
    return *(const int *)a - *(const int *)b;
}

static int by_lo(const void *a, const void *b)
{
    const range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Insertion sort with a context (qsort_r is not C11); n is a few
 * thousand at most and the list is built once per plan. */
static void sort_idx(int *idx, int n, cl_dnnl_block *b)
{
    for (int i = 1; i < n; i++) {
        int v = idx[i], j = i - 1;
        while (j >= 0 && by_size_desc(&idx[j], &v, b) > 0) {
            idx[j + 1] = idx[j];
            j--;
        }
        idx[j + 1] = v;
    }
}

cl_status cl_dnnl_arena_plan(cl_dnnl_block *b, int n, size_t align,
                             size_t *total)
{
    cl_status st = CL_OK;
    int *idx = NULL, *placed = NULL;
    range *busy = NULL;
    *total = 0;
    if (n <= 0)
        return CL_OK;
    idx = cl_alloc(sizeof *idx * (size_t)n, "arena plan: order");
    placed = cl_alloc(sizeof *placed * (size_t)n, "arena plan: placed");
    busy = cl_alloc(sizeof *busy * (size_t)n, "arena plan: ranges");
    if (!idx || !placed || !busy) {
        st = CL_ERR_NOMEM;
        goto fail;
    }
    for (int i = 0; i < n; i++)
        idx[i] = i;
    sort_idx(idx, n, b);
    int n_placed = 0;
    size_t top = 0;
    for (int k = 0; k < n; k++) {
        cl_dnnl_block *x = &b[idx[k]];
        x->off = 0;
        if (x->t1 < x->t0 || x->bytes == 0)
            continue;
        if (x->bytes > SIZE_MAX - align) {
            st = cl_error(CL_ERR_LIMIT, "arena plan: block of %zu bytes",
                          x->bytes);
            goto fail;
        }
        size_t need = (x->bytes + align - 1) & ~(align - 1);
        int nb = 0;
        for (int j = 0; j < n_placed; j++) {
            const cl_dnnl_block *y = &b[placed[j]];
            if (y->t0 <= x->t1 && x->t0 <= y->t1) {
                busy[nb].lo = y->off;
                busy[nb].hi = y->off + ((y->bytes + align - 1) & ~(align - 1));
                nb++;
            }
        }
        qsort(busy, (size_t)nb, sizeof *busy, by_lo);
        size_t off = 0;
        for (int j = 0; j < nb; j++) {
            if (busy[j].lo >= off + need)
                break;
            if (busy[j].hi > off)
                off = busy[j].hi;
        }
        x->off = off;
        if (off + need > top)
            top = off + need;
        placed[n_placed++] = idx[k];
    }
    *total = top;
fail:
    cl_free(idx);
    cl_free(placed);
    cl_free(busy);
    return st;
}
