/* The backend's own loops over 16 f32 lanes: GCC's vector extension,
 * which compiles to one AVX-512 register or two AVX2 ones (the same
 * results either way), with loads and stores of f32 or bf16 rows and an
 * exp for the softmax.  Only the backend's .c files include this. */
#ifndef CL_BACKEND_ONEDNN_VEC_H
#define CL_BACKEND_ONEDNN_VEC_H

#include <stdint.h>
#include <string.h>

enum { LANES = 16 };

/* Every function here is inlined into its caller: one that returns a
 * vector and stayed a call would cross the ABI boundary GCC warns about
 * (-Wpsabi) on targets without AVX-512. */
#define VEC_INLINE static inline __attribute__((always_inline))

/* 16 floats, and their bits. */
typedef float v16 __attribute__((vector_size(64)));
/* Passing them by value between these static functions, which the
 * compiler inlines, never crosses an ABI boundary. */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef uint32_t v16u __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32)));

/* x[c..c+15] of a row of either type, as f32. */
VEC_INLINE v16 load16(const void *x, int64_t c, int bf)
{
    v16 v;
    if (bf) {
        v16h h;
        memcpy(&h, (const uint16_t *)x + c, sizeof h);
        const v16u u = __builtin_convertvector(h, v16u) << 16;
        memcpy(&v, &u, sizeof v);
    } else {
        memcpy(&v, (const float *)x + c, sizeof v);
    }
    return v;
}

/* y[c..c+15] = v, rounded to bf16 as cl_bf16_from_f32 does (to nearest
 * even, NaN kept quiet). */
VEC_INLINE void store16(void *y, int64_t c, const v16 *v, int bf)
{
    if (!bf) {
        memcpy((float *)y + c, v, sizeof *v);
        return;
    }
    v16u u;
    memcpy(&u, v, sizeof u);
    const v16u nan =
        (v16u)(((u & 0x7f800000u) == 0x7f800000u) & ((u & 0x007fffffu) != 0));
    const v16u rn = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const v16u r = (nan & ((u >> 16) | 0x0040u)) | (~nan & rn);
    const v16h h = __builtin_convertvector(r, v16h);
    memcpy((uint16_t *)y + c, &h, sizeof h);
}

typedef int32_t v16i __attribute__((vector_size(64)));

/* a where m (all ones), else b.  (A macro, and vexp takes a pointer:
 * 64-byte vectors passed by value draw a note on the ABI from GCC when
 * the target has no AVX-512.) */
#define VSEL(m, a, b) ((v16)(((v16i)(a) & (m)) | ((v16i)(b) & ~(m))))

/* Lane k of a vector for every k, and the sum and the maximum of a's
 * lanes in every lane: four swaps of halves, quarters, pairs and
 * neighbours, a chain of 4 operations where a loop over the lanes makes
 * one of 16. */
VEC_INLINE v16i lane_ids(void)
{
    const v16i k = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    return k;
}
/* a with its halves, quarters, pairs or neighbours exchanged. */
#define LANE_SWAP8(a)                                                          \
    __builtin_shufflevector((a), (a), 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2,   \
                            3, 4, 5, 6, 7)
#define LANE_SWAP4(a)                                                          \
    __builtin_shufflevector((a), (a), 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15,  \
                            8, 9, 10, 11)
#define LANE_SWAP2(a)                                                          \
    __builtin_shufflevector((a), (a), 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9,    \
                            14, 15, 12, 13)
#define LANE_SWAP1(a)                                                          \
    __builtin_shufflevector((a), (a), 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10,    \
                            13, 12, 15, 14)
VEC_INLINE v16 lanes_sum_all(const v16 *a)
{
    v16 v = *a;
    v += LANE_SWAP8(v);
    v += LANE_SWAP4(v);
    v += LANE_SWAP2(v);
    v += LANE_SWAP1(v);
    return v;
}
VEC_INLINE v16 lanes_max_all(const v16 *a)
{
    v16 v = *a, w;
    w = LANE_SWAP8(v);
    v = VSEL(v > w, v, w);
    w = LANE_SWAP4(v);
    v = VSEL(v > w, v, w);
    w = LANE_SWAP2(v);
    v = VSEL(v > w, v, w);
    w = LANE_SWAP1(v);
    v = VSEL(v > w, v, w);
    return v;
}
VEC_INLINE float lanes_sum(const v16 *a)
{
    return lanes_sum_all(a)[0];
}

/* e^x in every lane, within 1 ulp of glibc's expf for x in [-87.3, 88]
 * (every float of it, measured) and clamped to it, so e^-inf is 2^-126
 * or just under (0 where denormals are flushed), not exactly 0: the
 * softmax leaves lanes past a row's end out of its sum instead.
 * x = n ln 2 + r, |r| <= ln2/2, e^r by Cephes' degree-6 polynomial,
 * times 2^n built in the exponent bits. */
VEC_INLINE v16 vexp(const v16 *px)
{
    v16 x = *px;
    const v16 zero = {0};
    const v16 hi = zero + 88.0f, lo = zero - 87.3365478515625f;
    x = VSEL(x > hi, hi, x);
    x = VSEL(x < lo, lo, x);
    const v16 t = x * 1.44269504088896341f + 0.5f;
    v16i n = __builtin_convertvector(t, v16i);
    n += (v16i)(__builtin_convertvector(n, v16) > t); /* floor, not trunc */
    const v16 fn = __builtin_convertvector(n, v16);
    const v16 r = x - fn * 0.693359375f + fn * 2.12194440e-4f;
    v16 p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const v16i e = (n + 127) << 23;
    return p * (v16)e;
}

#endif
