/* The load plan of a MindSpore checkpoint: its tensors as torchvision's,
 * Swin's q, k and v merged into one qkv, relative_position_index computed,
 * read as f32. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "interop/mindspore_plan.h"
#include "tensor/tensor.h"

/* ---- messages ------------------------------------------------------------ */

void cl_ms_list_add(char *list, size_t n, int *count, const char *item)
{
    if (*count < 8) {
        size_t l = strlen(list);
        snprintf(list + l, n - l, "%s%s", l ? ", " : "", item);
    }
    (*count)++;
}

void cl_ms_shape_str(const cl_shape *s, char *buf, size_t n)
{
    size_t o = 0;
    o += (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < s->ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "",
                              (long long)s->d[i]);
    if (o < n)
        snprintf(buf + o, n - o, ")");
}

int cl_ms_same_shape(const cl_shape *a, const cl_shape *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->d[i] != b->d[i])
            return 0;
    return 1;
}

/* ---- the plan: torchvision tensors from checkpoint tensors ------------- */

void cl_ms_plan_free(cl_ms_plan *p)
{
    cl_free(p->e);
    memset(p, 0, sizeof *p);
}

/* A name to sort by and the entry it belongs to. */
typedef struct name_ix {
    const char *name;
    int i;
} name_ix;

/* By torchvision name, then file order. */
static int by_entry(const void *a, const void *b)
{
    const name_ix *x = a, *y = b;
    int d = strcmp(x->name, y->name);
    return d ? d : (x->i > y->i) - (x->i < y->i);
}

/* The checkpoint name of part k (q, k or v) beside present, an attn.q /
 * attn.k / attn.v name. */
static void part_name(const char *present, int k, char *out, size_t n)
{
    snprintf(out, n, "%s", present);
    char *a = strstr(out, ".attn.");
    if (a && a[6] && a[7] == '.')
        a[6] = "qkv"[k];
}

/* Merges the q, k and v entries of each qkv (sorted next to each other),
 * checks that the three are there with one shape, and refuses two
 * checkpoint names mapping onto one torchvision name. */
static cl_status ms_plan_merge(cl_ms_plan *p, const cl_ms_ckpt *c,
                               const char *path)
{
    if (p->n < 1)
        return CL_OK;
    name_ix *ix = cl_alloc((size_t)p->n * sizeof *ix, "checkpoint plan");
    if (!ix)
        return CL_ERR_NOMEM;
    for (int i = 0; i < p->n; i++)
        ix[i] = (name_ix){p->e[i].name, i};
    qsort(ix, (size_t)p->n, sizeof *ix, by_entry);
    char list[900] = "";
    int count = 0;
    for (int i = 0; i < p->n;) {
        int j = i + 1;
        while (j < p->n && strcmp(p->e[ix[i].i].name, p->e[ix[j].i].name) == 0)
            j++;
        cl_ms_entry *lead = &p->e[ix[i].i];
        int stacked = 1, plain = 0;
        for (int k = i; k < j; k++) {
            stacked &= p->e[ix[k].i].n_part == 3;
            plain += p->e[ix[k].i].n_part != 3;
        }
        char item[640];
        if (plain && j - i > 1) {
            snprintf(item, sizeof item, "%s and %s both map to %s", lead->from,
                     p->e[ix[i + 1].i].from, lead->name);
            cl_ms_list_add(list, sizeof list, &count, item);
        }
        if (stacked) {
            /* Gather the run's parts into its first entry, the lead. */
            int got[3] = {-1, -1, -1}, twice = 0;
            for (int k = i; k < j; k++) {
                cl_ms_entry *e = &p->e[ix[k].i];
                if (got[e->which] >= 0)
                    twice = 1;
                got[e->which] = e->part[0];
                if (e != lead)
                    e->dead = 1;
            }
            const char *any = c->t[got[0] >= 0   ? got[0]
                                   : got[1] >= 0 ? got[1]
                                                 : got[2]]
                                  .name;
            char nm[136], a[64], b[64];
            for (int k = 0; k < 3; k++)
                lead->part[k] = got[k];
            if (twice) {
                snprintf(item, sizeof item,
                         "two checkpoint names for one of q, k, v of %s",
                         lead->name);
                cl_ms_list_add(list, sizeof list, &count, item);
            }
            for (int k = 0; k < 3; k++)
                if (got[k] < 0) {
                    part_name(any, k, nm, sizeof nm);
                    snprintf(item, sizeof item,
                             "%s missing (%s stacks q, k and v)", nm,
                             lead->name);
                    cl_ms_list_add(list, sizeof list, &count, item);
                }
            int first = got[0] >= 0 ? 0 : got[1] >= 0 ? 1 : 2;
            const char first_c = "qkv"[first];
            const cl_shape *s0 = &c->t[got[first]].shape;
            for (int k = 0; k < 3; k++)
                if (got[k] >= 0 && !cl_ms_same_shape(&c->t[got[k]].shape, s0)) {
                    cl_ms_shape_str(&c->t[got[k]].shape, a, sizeof a);
                    cl_ms_shape_str(s0, b, sizeof b);
                    snprintf(item, sizeof item,
                             "%s is %s where %c is %s (q, k and v must "
                             "have one shape to stack into %s)",
                             c->t[got[k]].name, a, first_c, b, lead->name);
                    cl_ms_list_add(list, sizeof list, &count, item);
                }
            if (s0->ndim < 1 || s0->d[0] > ((int64_t)1 << 40)) {
                cl_ms_shape_str(s0, a, sizeof a);
                snprintf(item, sizeof item, "%s is %s: no rows to stack",
                         c->t[got[first]].name, a);
                cl_ms_list_add(list, sizeof list, &count, item);
            } else {
                lead->shape = *s0;
                lead->shape.d[0] = 3 * s0->d[0];
            }
            part_name(any, 0, nm, sizeof nm);
            char *a6 = strstr(nm, ".attn.");
            if (a6 && a6[6] && a6[7] == '.') {
                a6[6] = '\0';
                /* A longer name is cut, in a message only. */
                snprintf(lead->from, sizeof lead->from, "%.100s{q,k,v}%.28s",
                         nm, a6 + 7);
            }
        }
        i = j;
    }
    cl_free(ix);
    if (count)
        return cl_error(CL_ERR_FORMAT,
                        "%s: %d tensor(s) do not map one to one "
                        "[%s%s]",
                        path, count, list, count > 8 ? ", ..." : "");
    int o = 0;
    for (int i = 0; i < p->n; i++)
        if (!p->e[i].dead)
            p->e[o++] = p->e[i];
    p->n = o;
    return CL_OK;
}

/* The window whose bias table has rows rows ((2 ws - 1)^2); 0 if none. */
static int window_of(int64_t rows)
{
    for (int ws = 1; ws <= 64; ws++)
        if ((int64_t)(2 * ws - 1) * (2 * ws - 1) == rows)
            return ws;
    return 0;
}

/* The torchvision tensors of checkpoint c.  Ignored entries go to rep (may
 * be NULL); with_index adds, beside each Swin bias table, the
 * relative_position_index it is read by (computed: mindcv saves a one-hot
 * of it instead). */
cl_status cl_ms_plan_build(cl_ms_plan *p, const cl_ms_ckpt *c, const char *path,
                           cl_ms_report *rep, int with_index)
{
    memset(p, 0, sizeof *p);
    p->family = cl_ms_ckpt_family(c);
    size_t cap = (size_t)c->n * (with_index ? 2 : 1) + 1;
    p->e = cl_alloc(cap * sizeof *p->e, "checkpoint plan");
    if (!p->e)
        return CL_ERR_NOMEM;
    memset(p->e, 0, cap * sizeof *p->e);
    for (int i = 0; i < c->n; i++) {
        cl_ms_entry *e = &p->e[p->n];
        int part = -1;
        int m = cl_ms_map_name_as(c->t[i].name, p->family, e->name,
                                  sizeof e->name, &part);
        if (m == 0) {
            if (rep)
                cl_ms_list_add(rep->ignored_list, sizeof rep->ignored_list,
                               &rep->ignored, c->t[i].name);
            continue;
        }
        if (m < 0)
            snprintf(e->name, sizeof e->name, "%s", c->t[i].name);
        snprintf(e->from, sizeof e->from, "%s", c->t[i].name);
        e->mapped = m > 0;
        e->n_part = part >= 0 ? 3 : 1;
        e->part[0] = i;
        e->which = part >= 0 ? part : 0;
        e->shape = c->t[i].shape;
        p->n++;
    }
    cl_status s = ms_plan_merge(p, c, path);
    if (s != CL_OK) {
        cl_ms_plan_free(p);
        return s;
    }
    if (!with_index || p->family != CL_MS_SWIN)
        return CL_OK;
    const char *tb = "attn.relative_position_bias_table";
    for (int i = 0, n = p->n; i < n; i++) {
        const cl_ms_entry *e = &p->e[i];
        size_t l = strlen(e->name), k = strlen(tb);
        int ws = e->shape.ndim == 2 ? window_of(e->shape.d[0]) : 0;
        if (!e->mapped || l < k || strcmp(e->name + l - k, tb) != 0 || !ws)
            continue;
        char pre[160];
        snprintf(pre, sizeof pre, "%.*s", (int)(l - k), e->name);
        cl_ms_entry *x = &p->e[p->n];
        if (snprintf(x->name, sizeof x->name, "%sattn.relative_position_index",
                     pre) >= (int)sizeof x->name)
            continue; /* too long for a graph name: reported missing */
        p->n++;
        snprintf(x->from, sizeof x->from, "(computed for window %d)", ws);
        x->mapped = 1;
        x->n_part = 0;
        x->index_ws = ws;
        x->shape.ndim = 1;
        x->shape.d[0] = (int64_t)ws * ws * ws * ws;
    }
    return CL_OK;
}

/* ---- reading as f32 ---------------------------------------------------- */

/* Tensor t (of a float dtype) as n f32 values. */
static void to_f32(const cl_ms_tensor *t, float *dst, size_t n)
{
    const uint8_t *p = t->data;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(t->dtype, "Float32") == 0) {
            memcpy(&dst[i], p + 4 * i, 4);
        } else if (strcmp(t->dtype, "Float64") == 0) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            dst[i] = (float)d;
        } else {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = strcmp(t->dtype, "Float16") == 0 ? cl_f32_from_f16(h)
                                                      : cl_f32_from_bf16(h);
        }
    }
}

int cl_ms_is_float(const char *dtype)
{
    return strcmp(dtype, "Float32") == 0 || strcmp(dtype, "Float16") == 0 ||
           strcmp(dtype, "BFloat16") == 0 || strcmp(dtype, "Float64") == 0;
}

/* Entry e's parts as f32 into dst (its element count n), row blocks in
 * the order q, k, v. */
void cl_ms_entry_to_f32(const cl_ms_ckpt *c, const cl_ms_entry *e, float *dst,
                        size_t n)
{
    size_t each = n / (size_t)e->n_part;
    for (int k = 0; k < e->n_part; k++)
        to_f32(&c->t[e->part[k]], dst + (size_t)k * each, each);
}
