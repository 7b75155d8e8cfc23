/* Arena planning by lifetimes: largest block first, each at the lowest
 * offset free of every already placed block alive at the same time. */
#include <stdint.h>
#include <stdlib.h>

#include "backend/onednn_arena.h"
#include "core/error.h"
#include "core/mem.h"

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
