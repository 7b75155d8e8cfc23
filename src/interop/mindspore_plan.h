/* The load plan of a MindSpore checkpoint: the torchvision tensors its
 * tensors make (shared by cl_ms_load and the named-tensor adapter). */
#ifndef CL_INTEROP_MINDSPORE_PLAN_H
#define CL_INTEROP_MINDSPORE_PLAN_H

#include <stddef.h>

#include "interop/interop.h"

/* One torchvision tensor made from the checkpoint: one of its tensors, or
 * (Swin's attn.qkv) the rows of q, k and v stacked in that order, or (a
 * Swin's relative_position_index, which mindcv does not save) computed. */
typedef struct cl_ms_entry {
    char name[160]; /* torchvision's; the checkpoint's when unmapped */
    char from[136]; /* the checkpoint's, for messages */
    int mapped;     /* 0: a name the rules do not know */
    int n_part;     /* 1, 3 (q, k, v), or 0 (computed) */
    int part[3];    /* checkpoint tensor of each part; -1: missing */
    int which;      /* before merging: the part (q 0, k 1, v 2) it holds */
    int index_ws;   /* n_part 0: the window of the computed index */
    cl_shape shape; /* the tensor's: the parts' rows added up */
    int dead;       /* merged into another entry */
} cl_ms_entry;

typedef struct cl_ms_plan {
    cl_ms_entry *e;
    int n;
    cl_ms_family family;
} cl_ms_plan;

/* The torchvision tensors of checkpoint c, by the name rules of its family:
 * ignored entries go to rep (may be NULL); a Swin's q, k and v are merged
 * into one qkv entry (CL_ERR_FORMAT, listing up to 8, when one is missing,
 * the three differ in shape, or two names map onto one); with_index adds,
 * beside each Swin bias table, the relative_position_index it is read by.
 * Free with cl_ms_plan_free (nothing to free on failure). */
cl_status cl_ms_plan_build(cl_ms_plan *p, const cl_ms_ckpt *c, const char *path,
                           cl_ms_report *rep, int with_index);
void cl_ms_plan_free(cl_ms_plan *p);

/* Entry e's parts as f32 into dst (its element count n), row blocks in
 * the order q, k, v; every part must be of a float dtype. */
void cl_ms_entry_to_f32(const cl_ms_ckpt *c, const cl_ms_entry *e, float *dst,
                        size_t n);
/* Float32, Float16, BFloat16 or Float64: the dtypes read as f32. */
int cl_ms_is_float(const char *dtype);

/* Message helpers: item appended to the ", "-separated list (the first 8;
 * *count counts them all), "(2, 3)", equal shapes. */
void cl_ms_list_add(char *list, size_t n, int *count, const char *item);
void cl_ms_shape_str(const cl_shape *s, char *buf, size_t n);
int cl_ms_same_shape(const cl_shape *a, const cl_shape *b);

#endif
