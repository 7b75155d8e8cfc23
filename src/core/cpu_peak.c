/* The CPU's peak arithmetic rate for a given instruction set, the
 * denominator of MFU: measured where this CPU can run a loop of the
 * instruction at full rate, computed from the measured clock where it
 * cannot (AMX tiles). */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/cpu_peak.h"
#include "core/timer.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CL_PEAK_X86 1
#endif

/* Independent accumulators per loop: enough to cover an FMA latency of 4
 * to 5 cycles on two pipes. */
enum { ACC = 12 };
/* Loop trips per timing, about 40 ms each at 3 GHz: each FMA trip runs
 * ACC instructions (two per cycle), each multiply trip 12 cycles. */
static const long TRIPS = 20000000;

#ifdef CL_PEAK_X86
static volatile float sink;

/* The accumulators are ACC named variables, not an array: an array may
 * live in memory (sanitizer and unoptimised builds keep it there), and
 * the loop would time loads and stores instead of the instruction. */
#define ACC_DECL(T, init)                                                      \
    T a0 = init(0.0f), a1 = init(1.0f), a2 = init(2.0f), a3 = init(3.0f),      \
      a4 = init(4.0f), a5 = init(5.0f), a6 = init(6.0f), a7 = init(7.0f),      \
      a8 = init(8.0f), a9 = init(9.0f), a10 = init(10.0f), a11 = init(11.0f)
#define ACC_EACH(OP)                                                           \
    OP(a0);                                                                    \
    OP(a1);                                                                    \
    OP(a2);                                                                    \
    OP(a3);                                                                    \
    OP(a4);                                                                    \
    OP(a5);                                                                    \
    OP(a6);                                                                    \
    OP(a7);                                                                    \
    OP(a8);                                                                    \
    OP(a9);                                                                    \
    OP(a10);                                                                   \
    OP(a11)
#define ACC_SUM(add)                                                           \
    add(add(add(add(a0, a1), add(a2, a3)), add(add(a4, a5), add(a6, a7))),     \
        add(add(a8, a9), add(a10, a11)))

__attribute__((target("avx2,fma"), no_sanitize_address)) static double
fma_ymm(long n)
{
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
    ACC_DECL(__m256, _mm256_set1_ps);
#define FMA_Y(x) x = _mm256_fmadd_ps(x, m, c)
    for (long i = 0; i < n; i++) {
        ACC_EACH(FMA_Y);
    }
#undef FMA_Y
    sink = _mm256_cvtss_f32(ACC_SUM(_mm256_add_ps));
    return (double)n * ACC * 8 * 2;
}

__attribute__((target("avx512f"), no_sanitize_address)) static double
fma_zmm(long n)
{
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
    ACC_DECL(__m512, _mm512_set1_ps);
#define FMA_Z(x) x = _mm512_fmadd_ps(x, m, c)
    for (long i = 0; i < n; i++) {
        ACC_EACH(FMA_Z);
    }
#undef FMA_Z
    sink = _mm512_reduce_add_ps(ACC_SUM(_mm512_add_ps));
    return (double)n * ACC * 16 * 2;
}

/* vdpbf16ps: per f32 lane two bf16 products added to the accumulator,
 * 16 lanes x 2 pairs x 2 FLOP. */
__attribute__((target("avx512f,avx512bf16"), no_sanitize_address)) static double
dpbf16_zmm(long n)
{
    const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80); /* bf16 1.0 */
    const __m512bh y = (__m512bh)_mm512_set1_epi16(0x3380); /* bf16 ~6e-8 */
    ACC_DECL(__m512, _mm512_set1_ps);
#define DP_Z(v) v = _mm512_dpbf16_ps(v, x, y)
    for (long i = 0; i < n; i++) {
        ACC_EACH(DP_Z);
    }
#undef DP_Z
    sink = _mm512_reduce_add_ps(ACC_SUM(_mm512_add_ps));
    return (double)n * ACC * 16 * 2 * 2;
}

/* oneDNN's int8 step below VNNI: vpmaddubsw (u8 x s8 pairs summed into
 * s16), vpmaddwd by ones (into s32), vpaddd; 32 multiply-adds per ymm
 * step, 2 ops each. */
__attribute__((target("avx2"), no_sanitize_address)) static double
dp8_ymm(long n)
{
    const __m256i u = _mm256_set1_epi8(1), w = _mm256_set1_epi8(1);
    const __m256i one = _mm256_set1_epi16(1);
    ACC_DECL(__m256i, _mm256_set1_epi32);
#define DP8_Y(v)                                                               \
    v = _mm256_add_epi32(v, _mm256_madd_epi16(_mm256_maddubs_epi16(u, w), one))
    for (long i = 0; i < n; i++) {
        ACC_EACH(DP8_Y);
    }
#undef DP8_Y
    sink = (float)_mm256_extract_epi32(ACC_SUM(_mm256_add_epi32), 0);
    return (double)n * ACC * 32 * 2;
}

__attribute__((target("avx512f,avx512bw"), no_sanitize_address)) static double
dp8_zmm(long n)
{
    const __m512i u = _mm512_set1_epi8(1), w = _mm512_set1_epi8(1);
    const __m512i one = _mm512_set1_epi16(1);
    ACC_DECL(__m512i, _mm512_set1_epi32);
#define DP8_Z(v)                                                               \
    v = _mm512_add_epi32(v, _mm512_madd_epi16(_mm512_maddubs_epi16(u, w), one))
    for (long i = 0; i < n; i++) {
        ACC_EACH(DP8_Z);
    }
#undef DP8_Z
    sink = (float)_mm512_reduce_add_epi32(ACC_SUM(_mm512_add_epi32));
    return (double)n * ACC * 64 * 2;
}

/* vpdpbusd: per s32 lane four u8 x s8 products added, 64 per zmm. */
__attribute__((target("avx512f,avx512vnni"), no_sanitize_address)) static double
dpbusd_zmm(long n)
{
    const __m512i u = _mm512_set1_epi8(1), w = _mm512_set1_epi8(1);
    ACC_DECL(__m512i, _mm512_set1_epi32);
#define DPB_Z(v) v = _mm512_dpbusd_epi32(v, u, w)
    for (long i = 0; i < n; i++) {
        ACC_EACH(DPB_Z);
    }
#undef DPB_Z
    sink = (float)_mm512_reduce_add_epi32(ACC_SUM(_mm512_add_epi32));
    return (double)n * ACC * 64 * 2;
}

/* A chain of dependent 64-bit multiplies: 3 cycles each on every x86-64
 * core of the last decade (Intel since Nehalem, AMD since Zen), and no
 * renamer folds them away as it can small additions. */
static double imul_chain(long n)
{
    uint64_t x = 3, m = 0x9E3779B97F4A7C15ull;
    for (long i = 0; i < n; i++)
        __asm__ volatile("imul %1, %0\n\timul %1, %0\n\timul %1, %0\n\t"
                         "imul %1, %0"
                         : "+r"(x)
                         : "r"(m));
    sink = (float)(x & 1);
    return (double)n * 4 * 3; /* cycles */
}
#endif

typedef double (*loop_fn)(long);

/* Runs f on every thread at once, best of five after a short warm-up (a
 * shared machine slows some runs); the total count per second over all
 * threads. */
static double rate_all_threads(loop_fn f, int threads, long n)
{
    double best = 0, warm = 0;
#pragma omp parallel num_threads(threads) reduction(+ : warm)
    warm += f(n / 16);
    (void)warm;
    for (int rep = 0; rep < 5; rep++) {
        double count = 0;
        double t0 = cl_time_now();
#pragma omp parallel num_threads(threads) reduction(+ : count)
        count += f(n);
        double dt = cl_time_now() - t0;
        if (dt > 0 && count / dt > best)
            best = count / dt;
    }
    return best;
}

cl_peak_kind cl_peak_kind_for(const char *isa, int bf16)
{
    int avx512 = isa && strstr(isa, "avx512") != NULL;
    if (bf16 && isa && strstr(isa, "amx"))
        return CL_PEAK_AMX_BF16;
    if (bf16 && isa && strstr(isa, "bf16"))
        return CL_PEAK_AVX512_BF16;
    return avx512 ? CL_PEAK_AVX512_F32 : CL_PEAK_AVX2_F32;
}

cl_peak_kind cl_peak_kind_for_int8(const char *isa)
{
    if (isa && strstr(isa, "amx"))
        return CL_PEAK_AMX_INT8;
    if (isa && (strstr(isa, "vnni") || strstr(isa, "bf16")) &&
        strstr(isa, "avx512"))
        return CL_PEAK_VNNI_INT8;
    if (isa && strstr(isa, "avx512"))
        return CL_PEAK_AVX512_INT8;
    return CL_PEAK_AVX2_INT8;
}

const char *cl_peak_kind_name(cl_peak_kind k)
{
    switch (k) {
    case CL_PEAK_AVX2_F32:
        return "f32 FMA on 256-bit vectors (AVX2)";
    case CL_PEAK_AVX512_F32:
        return "f32 FMA on 512-bit vectors (AVX-512)";
    case CL_PEAK_AVX512_BF16:
        return "bf16 dot products (avx512_bf16 vdpbf16ps)";
    case CL_PEAK_AMX_BF16:
        return "bf16 AMX tiles (1024 FLOP per cycle per core)";
    case CL_PEAK_AVX2_INT8:
        return "int8 vpmaddubsw + vpmaddwd on 256-bit vectors (AVX2)";
    case CL_PEAK_AVX512_INT8:
        return "int8 vpmaddubsw + vpmaddwd on 512-bit vectors (AVX-512)";
    case CL_PEAK_VNNI_INT8:
        return "int8 dot products (avx512_vnni vpdpbusd)";
    case CL_PEAK_AMX_INT8:
        return "int8 AMX tiles (2048 ops per cycle per core)";
    }
    return "unknown";
}

cl_status cl_peak_measure(cl_peak_kind kind, int threads, cl_peak *out)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->threads = threads > 0 ? threads : omp_get_max_threads();
#ifdef CL_PEAK_X86
    __builtin_cpu_init();
    out->clock_ghz = rate_all_threads(imul_chain, out->threads, TRIPS / 2) /
                     out->threads / 1e9;
    loop_fn f = NULL;
    switch (kind) {
    case CL_PEAK_AVX2_F32:
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            f = fma_ymm;
        break;
    case CL_PEAK_AVX512_F32:
        if (__builtin_cpu_supports("avx512f"))
            f = fma_zmm;
        break;
    case CL_PEAK_AVX512_BF16:
        if (__builtin_cpu_supports("avx512bf16"))
            f = dpbf16_zmm;
        break;
    case CL_PEAK_AMX_BF16:
        /* Tiles need the kernel's permission (arch_prctl) and a tile
         * configuration: the rate is the documented one at the measured
         * clock, which is the scalar clock and so at least the AMX one. */
        out->flop_per_cycle = 1024;
        out->gflops = 1024.0 * out->clock_ghz * out->threads;
        out->measured = 0;
        return CL_OK;
    case CL_PEAK_AVX2_INT8:
        if (__builtin_cpu_supports("avx2"))
            f = dp8_ymm;
        break;
    case CL_PEAK_AVX512_INT8:
        if (__builtin_cpu_supports("avx512bw"))
            f = dp8_zmm;
        break;
    case CL_PEAK_VNNI_INT8:
        if (__builtin_cpu_supports("avx512vnni"))
            f = dpbusd_zmm;
        break;
    case CL_PEAK_AMX_INT8:
        out->flop_per_cycle = 2048;
        out->gflops = 2048.0 * out->clock_ghz * out->threads;
        out->measured = 0;
        return CL_OK;
    }
    if (!f)
        return cl_error(CL_ERR_UNSUPPORTED, "peak: this CPU cannot run %s",
                        cl_peak_kind_name(kind));
    out->gflops = rate_all_threads(f, out->threads, TRIPS) / 1e9;
    out->measured = 1;
    if (out->clock_ghz > 0)
        out->flop_per_cycle = out->gflops / out->threads / out->clock_ghz;
    return CL_OK;
#else
    return cl_error(CL_ERR_UNSUPPORTED, "peak: measured on x86-64 only (%s)",
                    cl_peak_kind_name(kind));
#endif
}
