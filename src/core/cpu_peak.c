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

__attribute__((target("avx2,fma"))) static double fma_ymm(long n)
{
    __m256 a[ACC], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
    for (int k = 0; k < ACC; k++)
        a[k] = _mm256_set1_ps((float)k);
    for (long i = 0; i < n; i++)
        for (int k = 0; k < ACC; k++)
            a[k] = _mm256_fmadd_ps(a[k], m, c);
    __m256 s = a[0];
    for (int k = 1; k < ACC; k++)
        s = _mm256_add_ps(s, a[k]);
    sink = _mm256_cvtss_f32(s);
    return (double)n * ACC * 8 * 2;
}

__attribute__((target("avx512f"))) static double fma_zmm(long n)
{
    __m512 a[ACC], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
    for (int k = 0; k < ACC; k++)
        a[k] = _mm512_set1_ps((float)k);
    for (long i = 0; i < n; i++)
        for (int k = 0; k < ACC; k++)
            a[k] = _mm512_fmadd_ps(a[k], m, c);
    __m512 s = a[0];
    for (int k = 1; k < ACC; k++)
        s = _mm512_add_ps(s, a[k]);
    sink = _mm512_reduce_add_ps(s);
    return (double)n * ACC * 16 * 2;
}

/* vdpbf16ps: per f32 lane two bf16 products added to the accumulator,
 * 16 lanes x 2 pairs x 2 FLOP. */
__attribute__((target("avx512f,avx512bf16"))) static double dpbf16_zmm(long n)
{
    __m512 a[ACC];
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80); /* bf16 1.0 */
    __m512bh y = (__m512bh)_mm512_set1_epi16(0x3380); /* bf16 ~6e-8 */
    for (int k = 0; k < ACC; k++)
        a[k] = _mm512_set1_ps((float)k);
    for (long i = 0; i < n; i++)
        for (int k = 0; k < ACC; k++)
            a[k] = _mm512_dpbf16_ps(a[k], x, y);
    __m512 s = a[0];
    for (int k = 1; k < ACC; k++)
        s = _mm512_add_ps(s, a[k]);
    sink = _mm512_reduce_add_ps(s);
    return (double)n * ACC * 16 * 2 * 2;
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
