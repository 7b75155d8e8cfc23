/* The activation layouts the backend's own loops index (layout.c): where
 * element (n, c, pixel) of a 4-D activation lies in each of the layouts
 * oneDNN gives activations (nChw16c, nChw8c, nChw4c, nhwc, nchw).  BN's
 * loops (bn.c) and the stride grid of the conv backward (conv.c) read
 * their arguments through it.  The type keeps the name it had when BN was
 * its only user. */
#ifndef CL_BACKEND_ONEDNN_LAYOUT_H
#define CL_BACKEND_ONEDNN_LAYOUT_H

#include <stdint.h>

/* Where element (n, c, pixel i) of an activation lies: at
 * n sn + (c / B) sb + (c % B) + i sp.  nChw16c: B 16, sb 16 HW, sp 16;
 * nChw8c likewise with 8; nhwc: B C, sp C; nchw: B 1, sb HW, sp 1.  sn
 * counts padded channels (nChw16c with C = 24 holds 32). */
typedef struct cl_bn_layout {
    int N, C;   /* samples, channels */
    int64_t HW; /* pixels per sample and channel */
    int B;      /* channels per block */
    int64_t sb, sp, sn;
} cl_bn_layout;

/* The layout of an (N, C, HW) activation stored as `tag`: "nChw16c",
 * "nChw8c", "nChw4c", "nhwc" or "nchw"; 0 if the tag is none of them. */
int cl_bn_layout_make(cl_bn_layout *l, const char *tag, int N, int C,
                      int64_t HW);

#endif
