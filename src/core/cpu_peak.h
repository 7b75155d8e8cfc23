/* The CPU's peak arithmetic rate for an instruction set: the denominator
 * of the MFU `classic bench` prints. */
#ifndef CL_CORE_CPU_PEAK_H
#define CL_CORE_CPU_PEAK_H

#include "core/error.h"

typedef enum cl_peak_kind {
    CL_PEAK_AVX2_F32,    /* f32 FMA on ymm */
    CL_PEAK_AVX512_F32,  /* f32 FMA on zmm */
    CL_PEAK_AVX512_BF16, /* vdpbf16ps on zmm */
    CL_PEAK_AMX_BF16,    /* AMX bf16 tiles: 1024 FLOP per cycle per core */
    /* int8 (2 ops per u8 x s8 multiply-add, summed in s32): */
    CL_PEAK_AVX2_INT8,   /* vpmaddubsw + vpmaddwd + vpaddd on ymm */
    CL_PEAK_AVX512_INT8, /* the same on zmm (AVX-512 without VNNI) */
    CL_PEAK_VNNI_INT8,   /* vpdpbusd on zmm (avx512_vnni) */
    CL_PEAK_AMX_INT8     /* AMX int8 tiles: 2048 ops per cycle per core */
} cl_peak_kind;

typedef struct cl_peak {
    cl_peak_kind kind;
    int threads;
    double gflops;         /* over all threads */
    double clock_ghz;      /* from a dependent-multiply loop, per thread */
    double flop_per_cycle; /* per thread: gflops / threads / clock */
    int measured;          /* 1: a loop of the instruction timed; 0: computed */
} cl_peak;

/* The peak that bounds kernels run at oneDNN's instruction set isa (as
 * cl_dnnl_isa_name names it), in bf16 when bf16 is non-zero. */
cl_peak_kind cl_peak_kind_for(const char *isa, int bf16);
/* The same for int8 kernels (precision int8). */
cl_peak_kind cl_peak_kind_for_int8(const char *isa);
/* "f32 FMA on 512-bit vectors (AVX-512)" and so on. */
const char *cl_peak_kind_name(cl_peak_kind k);
/* Times a loop of the kind's instruction on threads threads at once (0:
 * OpenMP's count), or for AMX computes 1024 FLOP per cycle at the measured
 * clock.  CL_ERR_UNSUPPORTED when this CPU lacks the instruction. */
cl_status cl_peak_measure(cl_peak_kind kind, int threads, cl_peak *out);

#endif
