/* dist/: rank context, broadcasts, bucketed gradient averaging, SyncBN and
 * metric sums, failure agreement, and how the job ends when a rank dies.
 *
 * ctest runs each test in one process.  A test that needs two ranks
 * re-launches this program under mpirun with its own name (the harness
 * takes the test name as argv[1]); the copies find OMPI_COMM_WORLD_SIZE in
 * their environment, do the rank-side work, and the parent checks the exit
 * status, the time taken and the output.
 * ctest-labels: mpi */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/mem.h"
#include "core/timer.h"
#include "dist/dist.h"
#include "harness.h"

static int under_mpirun(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL;
}

/* Runs test `name` of this program on np ranks, output into `log`.
 * Returns the exit status (124: killed by timeout; -1: died) and the wall
 * time in *secs. */
static int spawn(const char *name, int np, const char *log, double *secs)
{
    char self[2048];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k <= 0)
        return -2;
    self[k] = '\0';
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "timeout 60 %s-np %d '%s' %s > '%s' 2>&1",
             cl_test_mpirun(), np, self, name, log);
    double t0 = cl_time_now();
    int rc = cl_test_run(cmd);
    *secs = cl_time_now() - t0;
    return rc;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/* The parent side of a two-rank test that must succeed on every rank. */
static void expect_ranks_pass(const char *name)
{
    const char *log = cl_test_path("mpirun.log");
    double secs = 0;
    int rc = spawn(name, 2, log, &secs);
    char *out = cl_test_read_file(log, NULL);
    CHECK(rc == 0);
    /* Each rank's harness prints its own summary: both must have run. */
    CHECK(out && count(out, "1 passed, 0 failed") == 2);
    if (cl_test_failed() && out)
        fprintf(stderr, "---- mpirun output (%.1f s, rc %d) ----\n%s", secs, rc,
                out);
    free(out);
}

#define TWO_RANKS(name)                                                        \
    do {                                                                       \
        if (!under_mpirun()) {                                                 \
            expect_ranks_pass(#name);                                          \
            return;                                                            \
        }                                                                      \
    } while (0)

/* ---- a fake grad arena: 5 tensors of odd sizes, 64-byte aligned ---------- */
enum { NT = 5 };
static const size_t sizes[NT] = {1, 17, 300, 4099, 33};
static const int ids[NT] = {3, 7, 8, 12, 20}; /* graph tensor indices */

/* Lays the tensors out in forward order; segs in backward order. */
static size_t fake_arena(cl_dist_segment segs[NT])
{
    size_t off = 0;
    for (int i = 0; i < NT; i++) {
        segs[NT - 1 - i].tensor = ids[i];
        segs[NT - 1 - i].offset = off;
        segs[NT - 1 - i].n = sizes[i];
        off += (sizes[i] + 15) / 16 * 16;
    }
    return off;
}

/* Rank r's gradient value at arena index i, step t: integers, so the sum
 * and its half are exact in f32. */
static float grad_value(int r, size_t i, int t)
{
    return (float)((double)(i % 251) * (r + 1) + r * 3 + t * 7);
}

static void fill(float *g, const cl_dist_segment *segs, int r, int t)
{
    for (int s = 0; s < NT; s++)
        for (size_t i = segs[s].offset; i < segs[s].offset + segs[s].n; i++)
            g[i] = grad_value(r, i, t);
}

/* Every segment float must be the mean of the ranks' values; padding 0. */
static int check_mean(const float *g, size_t n, const cl_dist_segment *segs,
                      int size, int t)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        int in = 0;
        for (int s = 0; s < NT; s++)
            in |= i >= segs[s].offset && i < segs[s].offset + segs[s].n;
        double want = 0;
        if (in) {
            for (int r = 0; r < size; r++)
                want += grad_value(r, i, t);
            want /= size;
        }
        if (g[i] != (float)want)
            bad++;
    }
    return bad;
}

/* ---- single process (no mpirun) -------------------------------------------
 */

CL_TEST(single_process)
{
    if (under_mpirun()) {
        CHECK(!"single_process runs without mpirun");
        return;
    }
    cl_dist d;
    double t0 = cl_time_now();
    REQUIRE_OK(cl_dist_init(&d, NULL, NULL));
    /* No launcher: no MPI at all, so no singleton start-up cost. */
    CHECK(cl_time_now() - t0 < 0.1);
    CHECK(d.active == 0);
    CHECK(cl_dist_rank(&d) == 0 && cl_dist_size(&d) == 1);
    CHECK(cl_dist_is_root(&d) && cl_dist_is_root(NULL));
    float p[3] = {1, 2, 3};
    CHECK_OK(cl_dist_broadcast_f32(&d, p, 3, 0));
    CHECK(p[0] == 1 && p[2] == 3);
    CHECK_ERR(cl_dist_broadcast_f32(&d, p, 3, 1), CL_ERR_ARG, "root 1");
    double v[2] = {0.5, -2};
    CHECK_OK(cl_dist_allreduce_sum_f64(&d, v, 2));
    CHECK(v[0] == 0.5 && v[1] == -2);
    int64_t c[2] = {INT64_MAX, 5};
    CHECK_OK(cl_dist_allreduce_sum_i64(&d, c, 2));
    CHECK(c[0] == INT64_MAX && c[1] == 5);
    CHECK(cl_dist_all_ok(&d, 1) == 1);
    CHECK(cl_dist_all_ok(&d, 0) == 0);
    CHECK_OK(cl_dist_barrier(&d));
    cl_dist_finalize(&d);
}

CL_TEST(single_grad_sync)
{
    cl_dist d;
    REQUIRE_OK(cl_dist_init(&d, NULL, NULL));
    cl_dist_segment segs[NT];
    size_t n = fake_arena(segs);
    float *g = cl_alloc_zero(n * sizeof(float), "test arena");
    REQUIRE(g);
    for (int mode = 0; mode < 2; mode++) {
        cl_dist_sync_opts o = {(cl_dist_sync_mode)mode, 0.002};
        cl_dist_grad_sync *s = NULL;
        CHECK_OK(cl_dist_grad_sync_create(&s, &d, g, n, segs, NT, &o));
        if (!s)
            break;
        for (int t = 0; t < 2; t++) {
            fill(g, segs, 0, t);
            for (int k = 0; k < NT; k++)
                cl_dist_grad_ready(s, segs[k].tensor);
            CHECK_OK(cl_dist_grad_wait(s));
            CHECK(check_mean(g, n, segs, 1, t) == 0);
        }
        cl_dist_sync_stats st;
        cl_dist_grad_sync_stats(s, &st);
        CHECK(st.steps == 2);
        cl_dist_grad_sync_free(s);
    }
    cl_free(g);
    cl_dist_finalize(&d);
}

CL_TEST(bucket_plan)
{
    cl_dist d;
    REQUIRE_OK(cl_dist_init(&d, NULL, NULL));
    cl_dist_segment segs[NT];
    size_t n = fake_arena(segs);
    float *g = cl_alloc_zero(n * sizeof(float), "test arena");
    REQUIRE(g);
    /* 0.002 MiB = 524 floats: {33}, {4099} alone (over the cap), then
     * {300, 17, 1} together. */
    double caps[3] = {0.002, 25.0, 1e-9};
    int want_buckets[3] = {3, 1, NT};
    for (int c = 0; c < 3; c++) {
        cl_dist_sync_opts o = {CL_DIST_SYNC_OVERLAP, caps[c]};
        cl_dist_grad_sync *s = NULL;
        REQUIRE_OK(cl_dist_grad_sync_create(&s, &d, g, n, segs, NT, &o));
        int nb = cl_dist_grad_sync_n_buckets(s);
        CHECK(nb == want_buckets[c]);
        size_t cap = (size_t)(caps[c] * 1048576.0 / 4);
        int covered[NT] = {0};
        size_t prev_lo = n + 1;
        for (int b = 0; b < nb; b++) {
            size_t off = 0, len = 0;
            int nt = 0;
            CHECK_OK(cl_dist_grad_sync_bucket(s, b, &off, &len, &nt));
            /* Launch order follows backward: decreasing offsets. */
            CHECK(off < prev_lo);
            prev_lo = off;
            CHECK(nt == 1 || len <= cap);
            /* Contiguous: the bucket is exactly the span of its tensors. */
            size_t lo = SIZE_MAX, hi = 0;
            int inside = 0;
            for (int k = 0; k < NT; k++) {
                size_t a = segs[k].offset, e = a + segs[k].n;
                if (a >= off && e <= off + len) {
                    covered[k]++;
                    inside++;
                    lo = a < lo ? a : lo;
                    hi = e > hi ? e : hi;
                } else {
                    /* Partly inside would be a split tensor. */
                    CHECK(e <= off || a >= off + len);
                }
            }
            CHECK(inside == nt);
            CHECK(lo == off && hi == off + len);
        }
        for (int k = 0; k < NT; k++)
            CHECK(covered[k] == 1);
        CHECK_ERR(cl_dist_grad_sync_bucket(s, nb, &(size_t){0}, &(size_t){0},
                                           &(int){0}),
                  CL_ERR_ARG, "bucket");
        cl_dist_grad_sync_free(s);
    }
    /* Backward order that jumps around the arena: buckets never bridge
     * tensors that are not neighbours in it. */
    cl_dist_segment mixed[NT] = {segs[2], segs[0], segs[4], segs[1], segs[3]};
    cl_dist_sync_opts big = {CL_DIST_SYNC_OVERLAP, 25.0};
    cl_dist_grad_sync *s = NULL;
    REQUIRE_OK(cl_dist_grad_sync_create(&s, &d, g, n, mixed, NT, &big));
    int total = 0;
    for (int b = 0; b < cl_dist_grad_sync_n_buckets(s); b++) {
        size_t off, len;
        int nt;
        CHECK_OK(cl_dist_grad_sync_bucket(s, b, &off, &len, &nt));
        total += nt;
        size_t inside = 0;
        for (int k = 0; k < NT; k++)
            if (segs[k].offset >= off && segs[k].offset < off + len)
                inside++;
        CHECK((int)inside == nt);
    }
    CHECK(total == NT);
    CHECK(cl_dist_grad_sync_n_buckets(s) > 1);
    cl_dist_grad_sync_free(s);
    cl_free(g);
    cl_dist_finalize(&d);
}

CL_TEST(bad_segments)
{
    cl_dist d;
    REQUIRE_OK(cl_dist_init(&d, NULL, NULL));
    float g[64] = {0};
    cl_dist_grad_sync *s = NULL;
    cl_dist_segment overlap[2] = {{1, 0, 10}, {2, 8, 4}};
    CHECK_ERR(cl_dist_grad_sync_create(&s, &d, g, 64, overlap, 2, NULL),
              CL_ERR_ARG, "overlap");
    cl_dist_segment outside[1] = {{1, 60, 5}};
    CHECK_ERR(cl_dist_grad_sync_create(&s, &d, g, 64, outside, 1, NULL),
              CL_ERR_ARG, "outside the arena");
    cl_dist_segment huge[1] = {{1, 1, SIZE_MAX}};
    CHECK_ERR(cl_dist_grad_sync_create(&s, &d, g, 64, huge, 1, NULL),
              CL_ERR_ARG, "outside the arena");
    cl_dist_segment twice[2] = {{4, 0, 4}, {4, 16, 4}};
    CHECK_ERR(cl_dist_grad_sync_create(&s, &d, g, 64, twice, 2, NULL),
              CL_ERR_ARG, "listed twice");
    cl_dist_segment empty[1] = {{1, 0, 0}};
    CHECK_ERR(cl_dist_grad_sync_create(&s, &d, g, 64, empty, 1, NULL),
              CL_ERR_ARG, "empty");
    cl_dist_segment neg[1] = {{-1, 0, 4}};
    CHECK_ERR(cl_dist_grad_sync_create(&s, &d, g, 64, neg, 1, NULL), CL_ERR_ARG,
              "tensor id -1");
    CHECK_ERR(cl_dist_grad_sync_create(&s, &d, g, 64, neg, 0, NULL), CL_ERR_ARG,
              "no parameter");
    cl_dist_segment ok[1] = {{1, 0, 4}};
    cl_dist_sync_opts o = {CL_DIST_SYNC_OVERLAP, 0};
    CHECK_ERR(cl_dist_grad_sync_create(&s, &d, g, 64, ok, 1, &o), CL_ERR_ARG,
              "bucket_mb");
    o.bucket_mb = 0.0 / 0.0;
    CHECK_ERR(cl_dist_grad_sync_create(&s, &d, g, 64, ok, 1, &o), CL_ERR_ARG,
              "bucket_mb");
    o.bucket_mb = 1;
    o.mode = (cl_dist_sync_mode)7;
    CHECK_ERR(cl_dist_grad_sync_create(&s, &d, g, 64, ok, 1, &o), CL_ERR_ARG,
              "mode 7");
    CHECK(s == NULL);
    cl_dist_finalize(&d);
}

CL_TEST(ready_errors)
{
    cl_dist d;
    REQUIRE_OK(cl_dist_init(&d, NULL, NULL));
    float g[64] = {0};
    cl_dist_segment segs[2] = {{5, 16, 4}, {2, 0, 4}};
    cl_dist_grad_sync *s = NULL;
    REQUIRE_OK(cl_dist_grad_sync_create(&s, &d, g, 64, segs, 2, NULL));
    cl_dist_grad_ready(s, 9);
    CHECK_ERR(cl_dist_grad_wait(s), CL_ERR_ARG, "tensor 9");
    cl_dist_grad_ready(s, 5);
    cl_dist_grad_ready(s, 5);
    CHECK_ERR(cl_dist_grad_wait(s), CL_ERR_ARG, "twice");
    /* The error does not stick: the next step is clean. */
    cl_dist_grad_ready(s, 5);
    cl_dist_grad_ready(s, 2);
    CHECK_OK(cl_dist_grad_wait(s));
    /* A backend that never calls the hook still gets its step done. */
    CHECK_OK(cl_dist_grad_wait(s));
    cl_backend_hooks h = cl_dist_grad_sync_hooks(s, 0);
    CHECK(h.ctx == s && h.grad_ready == cl_dist_grad_ready);
    CHECK(h.allreduce_sum == NULL);
    h = cl_dist_grad_sync_hooks(s, 1);
    double v[1] = {2};
    REQUIRE(h.allreduce_sum);
    CHECK_OK(h.allreduce_sum(h.ctx, v, 1));
    CHECK(v[0] == 2);
    CHECK_ERR(h.allreduce_sum(h.ctx, v, -1), CL_ERR_ARG, "negative");
    cl_dist_grad_sync_free(s);
    cl_dist_finalize(&d);
}

/* A small real graph: conv(bias) -> bn -> relu -> gap -> fc. */
static cl_status tiny_graph(cl_graph *g)
{
    int x, y;
    CL_TRY(cl_graph_init(g, 2));
    CL_TRY(cl_graph_input(g, 3, 8, 8, &x));
    cl_conv2d_attr c = {3, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
    CL_TRY(cl_graph_conv2d(g, "conv1", x, &c, &y));
    cl_batchnorm2d_attr b = cl_batchnorm2d_attr_make(4);
    CL_TRY(cl_graph_batchnorm2d(g, "bn1", y, &b, &y));
    CL_TRY(cl_graph_relu(g, "relu", y, &y));
    CL_TRY(cl_graph_global_avgpool(g, "avgpool", y, &y));
    cl_linear_attr l = {4, 10, 1};
    CL_TRY(cl_graph_linear(g, "fc", y, &l, &y));
    cl_softmax_ce_attr s = {10, 0};
    CL_TRY(cl_graph_softmax_ce(g, y, &s, 0));
    return cl_graph_finalize(g);
}

CL_TEST(graph_plan)
{
    cl_dist d;
    REQUIRE_OK(cl_dist_init(&d, NULL, NULL));
    cl_graph g;
    memset(&g, 0, sizeof g);
    cl_dist_grad_sync *s = NULL;
    CHECK_ERR(cl_dist_grad_sync_create_graph(&s, &d, &g, NULL), CL_ERR_ARG,
              "not finalized");
    CHECK_ERR(cl_dist_broadcast_graph(&d, &g, 0), CL_ERR_ARG, "not finalized");
    cl_status st = tiny_graph(&g);
    CHECK_OK(st);
    if (st != CL_OK) {
        cl_graph_free(&g);
        return;
    }
    int n_params = 0;
    size_t lo = SIZE_MAX, hi = 0;
    for (int i = 0; i < g.n_tensors; i++) {
        const cl_gtensor *t = &g.tensors[i];
        if (t->kind != CL_GT_PARAM)
            continue;
        n_params++;
        size_t e = t->offset + (size_t)cl_shape_numel(&t->shape);
        lo = t->offset < lo ? t->offset : lo;
        hi = e > hi ? e : hi;
    }
    CHECK(n_params == 6); /* conv w, b; bn gamma, beta; fc w, b */
    /* Default 25 MiB: one bucket spanning the whole arena. */
    CHECK_OK(cl_dist_grad_sync_create_graph(&s, &d, &g, NULL));
    if (s) {
        size_t off = 0, len = 0;
        int nt = 0;
        CHECK(cl_dist_grad_sync_n_buckets(s) == 1);
        CHECK_OK(cl_dist_grad_sync_bucket(s, 0, &off, &len, &nt));
        CHECK(nt == n_params && off == lo && off + len == hi);
        cl_dist_grad_sync_free(s);
        s = NULL;
    }
    /* Tiny buckets: one per tensor, first the last tensor of forward. */
    cl_dist_sync_opts o = {CL_DIST_SYNC_OVERLAP, 1e-9};
    CHECK_OK(cl_dist_grad_sync_create_graph(&s, &d, &g, &o));
    if (s) {
        size_t off = 0, len = 0;
        int nt = 0;
        CHECK(cl_dist_grad_sync_n_buckets(s) == n_params);
        CHECK_OK(cl_dist_grad_sync_bucket(s, 0, &off, &len, &nt));
        CHECK(off + len == hi);
        cl_dist_grad_sync_free(s);
    }
    CHECK_OK(cl_dist_broadcast_graph(&d, &g, 0));
    cl_graph_free(&g);
    cl_dist_finalize(&d);
}

/* ---- two ranks ------------------------------------------------------------
 */

static int join(cl_dist *d)
{
    cl_status st = cl_dist_init(d, NULL, NULL);
    if (st != CL_OK) {
        cl_test_fail(__FILE__, __LINE__, "cl_dist_init: %s", cl_last_error());
        return 0;
    }
    if (!d->active || d->size != 2) {
        cl_test_fail(__FILE__, __LINE__, "expected 2 active ranks, got %d",
                     d->size);
        cl_dist_finalize(d);
        return 0;
    }
    return 1;
}

CL_TEST(init_ranks)
{
    TWO_RANKS(init_ranks);
    cl_dist d;
    if (!join(&d))
        return;
    CHECK(d.rank == 0 || d.rank == 1);
    CHECK(cl_dist_is_root(&d) == (d.rank == 0));
    /* One host: both ranks are local. */
    CHECK(d.local_size == 2 && d.local_rank == d.rank);
    CHECK(d.thread_level >= 1); /* MPI_THREAD_FUNNELED or better */
    int64_t r[2] = {d.rank, 1};
    CHECK_OK(cl_dist_allreduce_sum_i64(&d, r, 2));
    CHECK(r[0] == 1 && r[1] == 2);
    cl_dist_finalize(&d);
}

CL_TEST(broadcast)
{
    TWO_RANKS(broadcast);
    cl_dist d;
    if (!join(&d))
        return;
    /* Small chunks exercise the chunked path (143 chunks, 16 in flight). */
    d.max_count = 7;
    float small[1000];
    for (int i = 0; i < 1000; i++)
        small[i] = (float)(d.rank * 10000 + i);
    CHECK_OK(cl_dist_broadcast_f32(&d, small, 1000, 1));
    int bad = 0;
    for (int i = 0; i < 1000; i++)
        bad += small[i] != (float)(10000 + i);
    CHECK(bad == 0);
    d.max_count = (size_t)1 << 30;
    /* A graph's params and buffers, large enough for the rendezvous path
     * of the shared-memory transport (12 MB). */
    size_t np = 3000000, nb = 1001;
    cl_graph g;
    memset(&g, 0, sizeof g);
    g.params = cl_alloc(np * sizeof(float), "test params");
    g.buffers = cl_alloc(nb * sizeof(float), "test buffers");
    g.n_param_floats = np;
    g.n_buffer_floats = nb;
    g.finalized = 1;
    REQUIRE(g.params && g.buffers);
    for (size_t i = 0; i < np; i++)
        g.params[i] = (float)(i % 1000) + (float)d.rank * 0.5f;
    for (size_t i = 0; i < nb; i++)
        g.buffers[i] = (float)d.rank - (float)i;
    CHECK_OK(cl_dist_broadcast_graph(&d, &g, 0));
    bad = 0;
    for (size_t i = 0; i < np; i++)
        bad += g.params[i] != (float)(i % 1000);
    for (size_t i = 0; i < nb; i++)
        bad += g.buffers[i] != -(float)i;
    CHECK(bad == 0);
    CHECK_ERR(cl_dist_broadcast_f32(&d, small, 10, 2), CL_ERR_ARG, "root 2");
    cl_free(g.params);
    cl_free(g.buffers);
    cl_dist_finalize(&d);
}

/* Three steps of gradient averaging in `mode`; the ranks report readiness
 * in different orders, neither of them the plan's. */
static void grad_sync_ranks(cl_dist_sync_mode mode, size_t max_count)
{
    cl_dist d;
    if (!join(&d))
        return;
    d.max_count = max_count;
    cl_dist_segment segs[NT];
    size_t n = fake_arena(segs);
    float *g = cl_alloc_zero(n * sizeof(float), "test arena");
    REQUIRE(g);
    cl_dist_sync_opts o = {mode, 0.002};
    cl_dist_grad_sync *s = NULL;
    CHECK_OK(cl_dist_grad_sync_create(&s, &d, g, n, segs, NT, &o));
    if (!s) {
        cl_free(g);
        cl_dist_finalize(&d);
        return;
    }
    static const int order[2][NT] = {{4, 3, 2, 1, 0}, {1, 3, 0, 4, 2}};
    for (int t = 0; t < 3; t++) {
        fill(g, segs, d.rank, t);
        /* Step 2: no hook calls at all (all launched in grad_wait). */
        for (int k = 0; k < NT && t != 2; k++)
            cl_dist_grad_ready(s, segs[order[d.rank][k]].tensor);
        CHECK_OK(cl_dist_grad_wait(s));
        int bad = check_mean(g, n, segs, d.size, t);
        if (bad)
            cl_test_fail(__FILE__, __LINE__, "rank %d step %d: %d wrong",
                         d.rank, t, bad);
    }
    cl_dist_sync_stats st;
    cl_dist_grad_sync_stats(s, &st);
    CHECK(st.steps == 3);
    CHECK(st.wait_s_total >= st.wait_s_last && st.wait_s_last >= 0);
    if (mode == CL_DIST_SYNC_BLOCKING)
        CHECK(st.n_collectives == 1);
    else if (max_count == 100)
        /* 1 + 41 + 4 chunks of at most 100 floats over the 3 buckets. */
        CHECK(st.n_collectives == 46);
    cl_dist_grad_sync_free(s);
    cl_free(g);
    cl_dist_finalize(&d);
}

CL_TEST(grad_sync_overlap)
{
    TWO_RANKS(grad_sync_overlap);
    grad_sync_ranks(CL_DIST_SYNC_OVERLAP, 100);
}

CL_TEST(grad_sync_overlap_big_chunks)
{
    TWO_RANKS(grad_sync_overlap_big_chunks);
    grad_sync_ranks(CL_DIST_SYNC_OVERLAP, 0);
}

CL_TEST(grad_sync_blocking)
{
    TWO_RANKS(grad_sync_blocking);
    grad_sync_ranks(CL_DIST_SYNC_BLOCKING, 0);
}

CL_TEST(sync_bn_and_metrics)
{
    TWO_RANKS(sync_bn_and_metrics);
    cl_dist d;
    if (!join(&d))
        return;
    float g[16] = {0};
    cl_dist_segment seg = {0, 0, 16};
    cl_dist_grad_sync *s = NULL;
    REQUIRE_OK(cl_dist_grad_sync_create(&s, &d, g, 16, &seg, 1, NULL));
    cl_backend_hooks h = cl_dist_grad_sync_hooks(s, 1);
    /* BN statistics: per-channel sums, sums of squares and a count. */
    double v[9];
    for (int i = 0; i < 9; i++)
        v[i] = d.rank * 1000.0 + i + 0.25;
    CHECK_OK(h.allreduce_sum(h.ctx, v, 9));
    for (int i = 0; i < 9; i++)
        CHECK(v[i] == 1000.0 + 2.0 * i + 0.5);
    /* Confusion-matrix counts beyond 2^53: i64 stays exact. */
    d.max_count = 3;
    int64_t c[10];
    for (int i = 0; i < 10; i++)
        c[i] = ((int64_t)1 << 60) + d.rank * 3 + i;
    CHECK_OK(cl_dist_allreduce_sum_i64(&d, c, 10));
    for (int i = 0; i < 10; i++)
        CHECK(c[i] == ((int64_t)1 << 61) + 3 + 2 * i);
    double loss[2] = {d.rank ? 1.5 : 2.25, 1};
    CHECK_OK(cl_dist_allreduce_sum_f64(&d, loss, 2));
    CHECK(loss[0] == 3.75 && loss[1] == 2);
    CHECK_OK(cl_dist_barrier(&d));
    cl_dist_grad_sync_free(s);
    cl_dist_finalize(&d);
}

CL_TEST(all_ok_propagates)
{
    TWO_RANKS(all_ok_propagates);
    cl_dist d;
    if (!join(&d))
        return;
    /* Step 1 fine everywhere; step 2 rank 1 meets bad input. */
    CHECK(cl_dist_all_ok(&d, 1) == 1);
    cl_clear_error();
    int ok = cl_dist_all_ok(&d, d.rank != 1);
    CHECK(ok == 0);
    if (d.rank == 0)
        CHECK(strstr(cl_last_error(), "rank 1 failed") != NULL);
    /* Every rank learnt of it and stops cleanly: finalize does not hang. */
    cl_dist_finalize(&d);
}

/* ---- failures end the job --------------------------------------------------
 */

/* Rank 1 dies (how) while rank 0 waits in a collective with no watchdog;
 * the parent expects mpirun to end the job, non-zero, within 30 s. */
static void expect_job_dies(const char *name, const char *needle)
{
    const char *log = cl_test_path("mpirun.log");
    double secs = 0;
    int rc = spawn(name, 2, log, &secs);
    char *out = cl_test_read_file(log, NULL);
    fprintf(stderr, "%s: mpirun exited %d after %.2f s\n", name, rc, secs);
    CHECK(rc != 0);
    CHECK(rc != 124); /* not the 60 s timeout of the test */
    CHECK(secs < 30);
    if (needle)
        CHECK(out && strstr(out, needle));
    if (cl_test_failed() && out)
        fprintf(stderr, "---- mpirun output ----\n%s", out);
    free(out);
}

static void wait_forever_in_collective(cl_dist *d)
{
    d->timeout_s = 0;
    for (int i = 0; i < 1000; i++) {
        double v = 1;
        if (cl_dist_allreduce_sum_f64(d, &v, 1) != CL_OK)
            break;
        sleep(1);
    }
}

CL_TEST(killed_rank_ends_job)
{
    if (!under_mpirun()) {
        expect_job_dies("killed_rank_ends_job", NULL);
        return;
    }
    cl_dist d;
    if (!join(&d))
        return;
    if (d.rank == 1)
        raise(SIGKILL);
    wait_forever_in_collective(&d);
    cl_dist_finalize(&d);
}

CL_TEST(exited_rank_ends_job)
{
    if (!under_mpirun()) {
        expect_job_dies("exited_rank_ends_job", NULL);
        return;
    }
    cl_dist d;
    if (!join(&d))
        return;
    if (d.rank == 1)
        _exit(3); /* a crash-like exit without MPI_Finalize */
    wait_forever_in_collective(&d);
    cl_dist_finalize(&d);
}

CL_TEST(watchdog_hung_rank)
{
    if (!under_mpirun()) {
        expect_job_dies("watchdog_hung_rank", "did not complete in 2 s");
        return;
    }
    cl_dist d;
    if (!join(&d))
        return;
    if (d.rank == 1) {
        sleep(40); /* hung: never reaches the collective in time */
        cl_dist_finalize(&d);
        return;
    }
    d.timeout_s = 2;
    double v = 1;
    cl_status st = cl_dist_allreduce_sum_f64(&d, &v, 1);
    CHECK(st == CL_ERR_DIST);
    /* What the CLI does with such a status: say why, end every rank. */
    fprintf(stderr, "classic: %s\n", cl_last_error());
    cl_dist_abort(&d, 3);
}
