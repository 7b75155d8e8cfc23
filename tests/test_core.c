/* Core: status table, error detail, allocation limits, RNG streams, timer.
 * ctest-labels: unit */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/bandwidth.h"
#include "core/cpu_peak.h"
#include "core/error.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/timer.h"
#include "harness.h"

CL_TEST(status_table)
{
    CHECK(strcmp(cl_status_name(CL_OK), "CL_OK") == 0);
    CHECK(strcmp(cl_status_name(CL_ERR_IO), "CL_ERR_IO") == 0);
    CHECK(strcmp(cl_status_name((cl_status)-999), "CL_UNKNOWN") == 0);
    CHECK(strcmp(cl_status_message(CL_ERR_NOMEM), "out of memory") == 0);
    CHECK(CL_ERR_IO < 0);
}

CL_TEST(error_detail_and_wrap)
{
    cl_status s = cl_error(CL_ERR_FORMAT, "%s: bad magic 0x%x", "a.idx", 7);
    CHECK(s == CL_ERR_FORMAT);
    CHECK(strcmp(cl_last_error(), "a.idx: bad magic 0x7") == 0);
    cl_error_wrap(s, "loading %s: ", "train");
    CHECK(strcmp(cl_last_error(), "loading train: a.idx: bad magic 0x7") == 0);
    cl_clear_error();
    CHECK(cl_last_error()[0] == '\0');
}

CL_TEST(error_detail_is_per_thread)
{
    cl_error(CL_ERR_IO, "main thread");
    int other_saw_empty = 0;
#pragma omp parallel num_threads(2)
    {
        if (omp_get_thread_num() == 1) {
            other_saw_empty = cl_last_error()[0] == '\0';
            cl_error(CL_ERR_ARG, "worker");
        }
    }
    /* With one hardware thread OpenMP may still give two threads; if it gave
     * one, the worker block did not run and there is nothing to compare. */
    if (omp_get_max_threads() > 1)
        CHECK(other_saw_empty);
    CHECK(strcmp(cl_last_error(), "main thread") == 0);
}

CL_TEST(alloc_aligned_and_limits)
{
    float *p = cl_alloc(1000 * sizeof(float), "test buffer");
    REQUIRE(p != NULL);
    CHECK(((uintptr_t)p % CL_ALIGN) == 0);
    cl_free(p);
    char *z = cl_alloc_zero(333, "zeroed");
    REQUIRE(z != NULL);
    int all_zero = 1;
    for (int i = 0; i < 333; i++)
        all_zero &= z[i] == 0;
    CHECK(all_zero);
    cl_free(z);
    size_t out = 0;
    CHECK_ERR(cl_mul_size(SIZE_MAX / 2, 3, &out, "image"), CL_ERR_LIMIT,
              "image");
    CHECK_OK(cl_mul_size(1 << 20, 1 << 10, &out, "x"));
    CHECK(out == (size_t)1 << 30);
    CHECK(cl_alloc(SIZE_MAX - 3, "huge") == NULL);
    CHECK(strstr(cl_last_error(), "huge") != NULL);
}

CL_TEST(philox_known_answer)
{
    /* Known-answer vectors of Random123's kat_vectors for philox4x32_10. */
    uint32_t out[4];
    const uint32_t c0[4] = {0, 0, 0, 0}, k0[2] = {0, 0};
    cl_philox4x32_10(c0, k0, out);
    CHECK(out[0] == 0x6627e8d5u && out[1] == 0xe169c58du &&
          out[2] == 0xbc57ac4cu && out[3] == 0x9b00dbd8u);
    const uint32_t c1[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
    const uint32_t k1[2] = {0xffffffffu, 0xffffffffu};
    cl_philox4x32_10(c1, k1, out);
    CHECK(out[0] == 0x408f276du && out[1] == 0x41c83b0eu &&
          out[2] == 0xa20bc7c6u && out[3] == 0x6d5451fdu);
    const uint32_t c2[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u};
    const uint32_t k2[2] = {0xa4093822u, 0x299f31d0u};
    cl_philox4x32_10(c2, k2, out);
    CHECK(out[0] == 0xd16cfe09u && out[1] == 0x94fdccebu &&
          out[2] == 0x5001e420u && out[3] == 0x24126ea1u);
}

/* Sum of the first draws of many streams, computed with t threads. */
static uint64_t stream_digest(int threads)
{
    enum { STREAMS = 4096, DRAWS = 37 };
    static uint32_t vals[STREAMS];
#pragma omp parallel for num_threads(threads) schedule(dynamic, 7)
    for (int s = 0; s < STREAMS; s++) {
        cl_rng r;
        cl_rng_init(&r, 1234, cl_rng_stream_id(3, (uint64_t)s, 0));
        uint32_t h = 0;
        for (int k = 0; k < DRAWS; k++)
            h = h * 31u + cl_rng_u32(&r);
        vals[s] = h;
    }
    uint64_t d = 0;
    for (int s = 0; s < STREAMS; s++)
        d = d * 1000003u + vals[s];
    return d;
}

CL_TEST(rng_same_on_any_thread_count)
{
    uint64_t d1 = stream_digest(1);
    CHECK(d1 == stream_digest(2));
    CHECK(d1 == stream_digest(8));
    /* A different seed or stream gives different numbers. */
    cl_rng a, b, c;
    cl_rng_init(&a, 1, 0);
    cl_rng_init(&b, 2, 0);
    cl_rng_init(&c, 1, 1);
    uint32_t xa = cl_rng_u32(&a), xb = cl_rng_u32(&b), xc = cl_rng_u32(&c);
    CHECK(xa != xb && xa != xc);
    CHECK(cl_rng_stream_id(1, 2, 3) != cl_rng_stream_id(2, 1, 3));
}

/* One node's stream filled by a parallel loop whose chunks seek to their
 * first element: a digest of the numbers, for `threads` threads. */
static uint64_t node_fill_digest(int threads, uint64_t step, uint64_t node)
{
    enum { N = 10007 };
    static uint32_t vals[N];
#pragma omp parallel num_threads(threads)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t lo = (int64_t)N * t / nt, hi = (int64_t)N * (t + 1) / nt;
        cl_rng r;
        cl_rng_init_node(&r, 77, step, node);
        cl_rng_seek(&r, (uint64_t)lo);
        for (int64_t i = lo; i < hi; i++)
            vals[i] = cl_rng_u32(&r);
    }
    uint64_t d = 0;
    for (int i = 0; i < N; i++)
        d = d * 1000003u + vals[i];
    return d;
}

/* The ops' stream keyed by (seed, step, node): the same numbers on 1, 2,
 * 3 or 8 threads (a seek lands where the draws would have), the same on
 * every call, and another for another node, step or seed. */
CL_TEST(rng_node_stream_keyed_and_thread_independent)
{
    uint64_t d1 = node_fill_digest(1, 5, 2);
    CHECK(d1 == node_fill_digest(2, 5, 2));
    CHECK(d1 == node_fill_digest(3, 5, 2));
    CHECK(d1 == node_fill_digest(8, 5, 2));
    CHECK(d1 != node_fill_digest(1, 5, 3));
    CHECK(d1 != node_fill_digest(1, 6, 2));
    /* Seeking to word w gives the w-th draw, for every offset in a
     * block. */
    cl_rng a, b;
    cl_rng_init_node(&a, 77, 5, 2);
    uint32_t seq[9];
    for (int k = 0; k < 9; k++)
        seq[k] = cl_rng_u32(&a);
    for (int w = 0; w < 9; w++) {
        cl_rng_init_node(&b, 77, 5, 2);
        cl_rng_seek(&b, (uint64_t)w);
        CHECK(cl_rng_u32(&b) == seq[w]);
    }
    cl_rng c, e;
    cl_rng_init_node(&c, 77, 5, 2);
    cl_rng_init_node(&e, 78, 5, 2);
    CHECK(cl_rng_u32(&c) == seq[0] && cl_rng_u32(&e) != seq[0]);
}

CL_TEST(rng_distributions)
{
    cl_rng r;
    cl_rng_init(&r, 42, 7);
    enum { N = 200000 };
    double s = 0, s2 = 0, u = 0;
    int counts[10] = {0};
    for (int i = 0; i < N; i++) {
        double z = cl_rng_normal(&r);
        s += z;
        s2 += z * z;
        float f = cl_rng_uniform(&r);
        CHECK(f >= 0.0f && f < 1.0f);
        u += f;
        counts[cl_rng_below(&r, 10)]++;
    }
    /* Bounds are ~6 standard errors: a correct generator never trips them. */
    CHECK_NEAR(s / N, 0.0, 0.014);
    CHECK_NEAR(s2 / N, 1.0, 0.02);
    CHECK_NEAR(u / N, 0.5, 0.004);
    for (int k = 0; k < 10; k++)
        CHECK_NEAR(counts[k], N / 10, 800);
}

CL_TEST(timer_monotonic)
{
    double t0 = cl_time_now();
    volatile double x = 0;
    for (int i = 0; i < 1000000; i++)
        x += i;
    double t1 = cl_time_now();
    CHECK(t1 >= t0);
    CHECK(t1 - t0 < 10.0);
}

CL_TEST(log_levels)
{
    cl_log_level lv;
    CHECK_OK(cl_log_level_parse("debug", &lv));
    CHECK(lv == CL_LOG_DEBUG);
    CHECK_ERR(cl_log_level_parse("loud", &lv), CL_ERR_ARG, "loud");
    FILE *f = tmpfile();
    REQUIRE(f != NULL);
    cl_logger lg = {CL_LOG_WARN, f, 0};
    cl_log(&lg, CL_LOG_INFO, "hidden");
    cl_log(&lg, CL_LOG_WARN, "shown %d", 5);
    rewind(f);
    char line[128] = {0};
    CHECK(fgets(line, sizeof line, f) != NULL);
    CHECK(strstr(line, "shown 5") != NULL);
    CHECK(fgets(line, sizeof line, f) == NULL);
    fclose(f);
}

/* STREAM's copy and triad measure a plausible bandwidth (0.5 GB/s to
 * 10 TB/s on any machine classic runs on) over arrays larger than the
 * caches, on the threads asked for. */
CL_TEST(memory_bandwidth_is_measured)
{
    cl_bandwidth b;
    REQUIRE_OK(cl_bandwidth_measure(1, &b));
    printf("triad %.1f GB/s, copy %.1f GB/s on %d thread(s)\n", b.triad_gbs,
           b.copy_gbs, b.threads);
    CHECK(b.threads == 1);
    CHECK(b.mib >= 32);
    CHECK(b.triad_gbs > 0.5 && b.triad_gbs < 10000);
    CHECK(b.copy_gbs > 0.5 && b.copy_gbs < 10000);
}

/* The MFU peak follows oneDNN's instruction set and the precision; the
 * loop measured on this CPU runs a plausible number of FLOP per cycle
 * (8 to 256 for vector FMA and dot products on any x86-64 core). */
CL_TEST(cpu_peak_kinds_and_rates)
{
    CHECK(cl_peak_kind_for("avx2", 0) == CL_PEAK_AVX2_F32);
    CHECK(cl_peak_kind_for("avx2", 1) == CL_PEAK_AVX2_F32);
    CHECK(cl_peak_kind_for("avx512_core", 0) == CL_PEAK_AVX512_F32);
    CHECK(cl_peak_kind_for("avx512_core", 1) == CL_PEAK_AVX512_F32);
    CHECK(cl_peak_kind_for("avx512_core_bf16", 0) == CL_PEAK_AVX512_F32);
    CHECK(cl_peak_kind_for("avx512_core_bf16", 1) == CL_PEAK_AVX512_BF16);
    CHECK(cl_peak_kind_for("avx512_core_amx", 0) == CL_PEAK_AVX512_F32);
    CHECK(cl_peak_kind_for("avx512_core_amx", 1) == CL_PEAK_AMX_BF16);
    cl_peak p;
    REQUIRE_OK(cl_peak_measure(CL_PEAK_AVX2_F32, 1, &p));
    CHECK(p.measured == 1 && p.threads == 1);
    CHECK(p.clock_ghz > 0.3 && p.clock_ghz < 8);
    CHECK(p.flop_per_cycle >= 8 && p.flop_per_cycle <= 256);
    /* AMX is computed: 1024 FLOP per cycle at the measured clock. */
    REQUIRE_OK(cl_peak_measure(CL_PEAK_AMX_BF16, 1, &p));
    CHECK(p.measured == 0 && p.flop_per_cycle == 1024);
    CHECK(fabs(p.gflops - 1024 * p.clock_ghz) < 1e-6 * p.gflops);
}
