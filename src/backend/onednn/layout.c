/* The activation layouts the backend's own loops index (layout.h): the
 * strides of each, and which of them a oneDNN memory descriptor is.  BN
 * (bn.c) and the stride grid of the conv backward (conv.c) use them; this
 * file calls nothing of the backend's but oneDNN. */
#include <dnnl.h>
#include <string.h>

#include "backend/onednn/internal.h"
#include "backend/onednn/layout.h"

int cl_bn_layout_make(cl_bn_layout *l, const char *tag, int N, int C,
                      int64_t HW)
{
    int B;
    if (strcmp(tag, "nChw16c") == 0)
        B = 16;
    else if (strcmp(tag, "nChw8c") == 0)
        B = 8;
    else if (strcmp(tag, "nChw4c") == 0)
        B = 4;
    else if (strcmp(tag, "nhwc") == 0 || strcmp(tag, "nchw") == 0)
        B = 0;
    else
        return 0;
    l->N = N;
    l->C = C;
    l->HW = HW;
    if (B) { /* blocked: channels padded to whole blocks */
        int64_t cpad = ((int64_t)C + B - 1) / B * B;
        l->B = B;
        l->sb = (int64_t)B * HW;
        l->sp = B;
        l->sn = cpad * HW;
    } else if (tag[1] == 'h') { /* nhwc */
        l->B = C;
        l->sb = 0;
        l->sp = C;
        l->sn = (int64_t)C * HW;
    } else { /* nchw */
        l->B = 1;
        l->sb = HW;
        l->sp = 1;
        l->sn = (int64_t)C * HW;
    }
    return 1;
}

/* The layouts the backend's own loops work on (bn.c, the stride grid of
 * conv.c): those
 * oneDNN picks for 4-D f32 and bf16 activations on any x86 ISA (blocked
 * by 16 on AVX-512, by 8 on AVX2, channels-last for bf16 on AMX, plain
 * for a graph's input). */
static const struct {
    dnnl_format_tag_t tag;
    const char *name;
} act_layouts[] = {{dnnl_nChw16c, "nChw16c"},
                   {dnnl_nChw8c, "nChw8c"},
                   {dnnl_nChw4c, "nChw4c"},
                   {dnnl_nhwc, "nhwc"},
                   {dnnl_nchw, "nchw"}};

/* The index in act_layouts of md's layout, or -1. */
int cl_dnnl_md_act_tag(const dnnl_memory_desc_t *md)
{
    if (md->ndims != 4 ||
        (md->data_type != dnnl_f32 && md->data_type != dnnl_bf16))
        return -1;
    for (int k = 0; k < (int)(sizeof act_layouts / sizeof act_layouts[0]);
         k++) {
        dnnl_memory_desc_t t;
        if (dnnl_memory_desc_init_by_tag(&t, 4, md->dims, md->data_type,
                                         act_layouts[k].tag) == dnnl_success &&
            md_eq(&t, md))
            return k;
    }
    return -1;
}

dnnl_format_tag_t cl_dnnl_act_layout_tag(int k)
{
    return act_layouts[k].tag;
}

/* Fills *l and returns 1 if md is one of act_layouts, else returns 0. */
int cl_dnnl_md_act_layout(const dnnl_memory_desc_t *md, cl_bn_layout *l)
{
    int k = cl_dnnl_md_act_tag(md);
    return k >= 0 &&
           cl_bn_layout_make(l, act_layouts[k].name, (int)md->dims[0],
                             (int)md->dims[1], md->dims[2] * md->dims[3]);
}
