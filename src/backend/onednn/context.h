/* The oneDNN backend's activation arena (context.c): offsets for buffers
 * with known lifetimes inside one arena, so that buffers whose lifetimes do
 * not overlap share memory. */
#ifndef CL_BACKEND_ONEDNN_CONTEXT_H
#define CL_BACKEND_ONEDNN_CONTEXT_H

#include <stddef.h>

#include "classic/status.h"

/* One buffer: bytes, alive over the closed step interval [t0, t1] (t1 < t0
 * means never used: it gets offset 0 and takes no room). */
typedef struct cl_dnnl_block {
    size_t bytes;
    int t0, t1;
    size_t off; /* out: byte offset, a multiple of align */
} cl_dnnl_block;

/* Places every block so that any two whose intervals overlap occupy
 * disjoint byte ranges; *total receives the arena size.  Greedy: largest
 * first, lowest free offset.  align must be a power of two. */
cl_status cl_dnnl_arena_plan(cl_dnnl_block *b, int n, size_t align,
                             size_t *total);

#endif
