/* Data loader: determinism across worker counts, shuffling, sharding,
 * drop_remainder, exact-once evaluation, resume, MixUp/CutMix.
 * ctest-labels: unit data */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/mem.h"
#include "data/data.h"
#include "harness.h"
#include "test_data_fixtures.h"

/* An IDX dataset of n 10x9 images in its own directory. */
static cl_dataset *make_ds(const char *name, int n)
{
    char p[1200];
    const char *dir = cl_test_path(name);
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);
    if (fx_idx_images(p, n, 10, 9, 1, 0, 0, 0) != 0)
        return NULL;
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", dir);
    if (fx_idx_labels(p, n, 10, 1, -1) != 0)
        return NULL;
    cl_dataset_spec sp = cl_dataset_spec_default();
    sp.format = "fashion_mnist";
    sp.path = dir;
    cl_dataset *ds = NULL;
    if (cl_dataset_open(&ds, &sp) != CL_OK) {
        fprintf(stderr, "open: %s\n", cl_last_error());
        return NULL;
    }
    return ds;
}

static cl_transforms *train_tf(int out_c)
{
    cl_transform_opts o =
        cl_transform_opts_small_train(out_c, 10, 9, 2, 0.5f, NULL, NULL);
    o.brightness = 0.3f;
    o.contrast = 0.3f;
    o.erase_prob = 0.5f;
    cl_transforms *tf = NULL;
    if (cl_transforms_create(&tf, &o) != CL_OK)
        return NULL;
    return tf;
}

static cl_loader_opts base_opts(cl_dataset *ds, cl_transforms *tf)
{
    cl_loader_opts o;
    memset(&o, 0, sizeof o);
    o.dataset = ds;
    o.tf = tf;
    o.batch_size = 8;
    o.shuffle = 1;
    o.seed = 1234;
    return o;
}

/* A 64-bit FNV-1a hash of all batches of an epoch (x, labels, targets,
 * indices). */
static uint64_t epoch_hash(cl_loader *ld, int64_t epoch, int64_t *nsamp)
{
    uint64_t h = 1469598103934665603ull;
    *nsamp = 0;
    if (cl_loader_start_epoch(ld, epoch) != CL_OK)
        return 0;
    for (;;) {
        cl_batch b;
        if (cl_loader_next(ld, &b) != CL_OK)
            return 0;
        if (b.n == 0)
            break;
        *nsamp += b.n;
        const uint8_t *parts[4] = {
            (const uint8_t *)b.x, (const uint8_t *)b.labels,
            (const uint8_t *)b.indices, (const uint8_t *)b.targets};
        size_t lens[4] = {(size_t)b.n * 3 * 90 * 4, (size_t)b.n * 4,
                          (size_t)b.n * 8,
                          b.targets ? (size_t)b.n * b.k * 4 : 0};
        for (int k = 0; k < 4; k++)
            for (size_t i = 0; i < lens[k]; i++) {
                h ^= parts[k][i];
                h *= 1099511628211ull;
            }
    }
    return h;
}

CL_TEST(deterministic_across_workers)
{
    cl_dataset *ds = make_ds("det", 203);
    REQUIRE(ds);
    cl_transforms *tf = train_tf(3);
    REQUIRE(tf);
    const int nw[4] = {0, 1, 2, 8};
    uint64_t h[4][2];
    for (int k = 0; k < 4; k++) {
        cl_loader_opts o = base_opts(ds, tf);
        o.workers = nw[k];
        o.prefetch = 3;
        o.mixup_alpha = 0.4f;
        o.cutmix_alpha = 1.0f;
        o.mix_prob = 0.8f;
        cl_loader *ld = NULL;
        REQUIRE_OK(cl_loader_create(&ld, &o));
        for (int e = 0; e < 2; e++) {
            int64_t n = 0;
            h[k][e] = epoch_hash(ld, e, &n);
            CHECK(n == 203);
        }
        cl_loader_destroy(ld);
    }
    for (int k = 1; k < 4; k++) {
        CHECK(h[k][0] == h[0][0]);
        CHECK(h[k][1] == h[0][1]);
    }
    CHECK(h[0][0] != 0 && h[0][0] != h[0][1]);
    cl_transforms_destroy(tf);
    cl_dataset_close(ds);
}

/* The auto-augment policies draw from each sample's own stream too: the
 * batches do not depend on the worker count, and differ by policy. */
CL_TEST(auto_augment_deterministic_across_workers)
{
    cl_dataset *ds = make_ds("det_aug", 61);
    REQUIRE(ds);
    uint64_t h[3][3];
    for (int p = 0; p < 3; p++) {
        cl_transform_opts to =
            cl_transform_opts_small_train(3, 10, 9, 2, 0.5f, NULL, NULL);
        to.auto_augment = p;
        to.erase_prob = 0.25f;
        cl_transforms *tf = NULL;
        REQUIRE_OK(cl_transforms_create(&tf, &to));
        const int nw[3] = {0, 1, 3};
        for (int k = 0; k < 3; k++) {
            cl_loader_opts o = base_opts(ds, tf);
            o.workers = nw[k];
            cl_loader *ld = NULL;
            REQUIRE_OK(cl_loader_create(&ld, &o));
            int64_t n = 0;
            h[p][k] = epoch_hash(ld, 0, &n);
            CHECK(n == 61);
            cl_loader_destroy(ld);
        }
        CHECK(h[p][0] != 0 && h[p][1] == h[p][0] && h[p][2] == h[p][0]);
        cl_transforms_destroy(tf);
    }
    CHECK(h[0][0] != h[1][0] && h[1][0] != h[2][0] && h[0][0] != h[2][0]);
    cl_dataset_close(ds);
}

CL_TEST(shuffle_per_epoch_and_seed)
{
    cl_dataset *ds = make_ds("shuf", 100);
    REQUIRE(ds);
    cl_transforms *tf = train_tf(1);
    REQUIRE(tf);
    cl_loader_opts o = base_opts(ds, tf);
    cl_loader *a = NULL, *b = NULL;
    REQUIRE_OK(cl_loader_create(&a, &o));
    REQUIRE_OK(cl_loader_create(&b, &o));
    int64_t e0[100], e1[100], f0[100], n = 0;
    REQUIRE_OK(cl_loader_epoch_order(a, 0, e0, &n));
    CHECK(n == 100);
    REQUIRE_OK(cl_loader_epoch_order(a, 1, e1, &n));
    REQUIRE_OK(cl_loader_epoch_order(b, 0, f0, &n));
    CHECK(memcmp(e0, f0, sizeof e0) == 0);
    CHECK(memcmp(e0, e1, sizeof e0) != 0);
    /* A permutation, not the identity. */
    int seen[100] = {0}, moved = 0;
    for (int i = 0; i < 100; i++) {
        if (e0[i] >= 0 && e0[i] < 100)
            seen[e0[i]]++;
        moved += e0[i] != i;
    }
    int dup = 0;
    for (int i = 0; i < 100; i++)
        dup += seen[i] != 1;
    CHECK(dup == 0);
    CHECK(moved > 80);
    /* The batches follow that order. */
    REQUIRE_OK(cl_loader_start_epoch(a, 1));
    cl_batch bt;
    REQUIRE_OK(cl_loader_next(a, &bt));
    REQUIRE(bt.n == 8);
    CHECK(memcmp(bt.indices, e1, 8 * sizeof(int64_t)) == 0);
    CHECK(bt.labels[3] == cl_dataset_label(ds, e1[3]));
    cl_loader_destroy(b);
    /* Another seed, another order; no shuffle, the identity. */
    o.seed = 99;
    REQUIRE_OK(cl_loader_create(&b, &o));
    REQUIRE_OK(cl_loader_epoch_order(b, 0, f0, &n));
    CHECK(memcmp(e0, f0, sizeof e0) != 0);
    cl_loader_destroy(b);
    o.shuffle = 0;
    REQUIRE_OK(cl_loader_create(&b, &o));
    REQUIRE_OK(cl_loader_epoch_order(b, 3, f0, &n));
    int ident = 1;
    for (int i = 0; i < 100; i++)
        ident &= f0[i] == i;
    CHECK(ident);
    cl_loader_destroy(b);
    cl_loader_destroy(a);
    cl_transforms_destroy(tf);
    cl_dataset_close(ds);
}

CL_TEST(shards_disjoint_and_covering)
{
    const int N = 103;
    cl_dataset *ds = make_ds("shard", N);
    REQUIRE(ds);
    cl_transforms *tf = train_tf(1);
    REQUIRE(tf);
    for (int drop = 0; drop < 2; drop++) {
        int count[103] = {0};
        int64_t total = 0;
        for (int k = 0; k < 4; k++) {
            cl_loader_opts o = base_opts(ds, tf);
            o.num_shards = 4;
            o.shard_id = k;
            o.drop_remainder = drop;
            o.workers = 2;
            cl_loader *ld = NULL;
            REQUIRE_OK(cl_loader_create(&ld, &o));
            int64_t nb = cl_loader_batches_per_epoch(ld);
            if (drop) {
                /* floor(103/4) = 25 per shard -> 3 full batches of 8. */
                CHECK(nb == 3);
            } else {
                /* 26,26,26,25 samples -> 4 batches, the last smaller. */
                CHECK(nb == 4);
            }
            REQUIRE_OK(cl_loader_start_epoch(ld, 2));
            int64_t got_b = 0;
            for (;;) {
                cl_batch b;
                REQUIRE_OK(cl_loader_next(ld, &b));
                if (b.n == 0)
                    break;
                got_b++;
                if (drop)
                    CHECK(b.n == 8);
                for (int i = 0; i < b.n; i++)
                    if (b.indices[i] >= 0 && b.indices[i] < N)
                        count[b.indices[i]]++;
                total += b.n;
            }
            CHECK(got_b == nb);
            cl_loader_destroy(ld);
        }
        int twice = 0, missing = 0;
        for (int i = 0; i < N; i++) {
            twice += count[i] > 1;
            missing += count[i] == 0;
        }
        CHECK(twice == 0);
        if (drop)
            CHECK(total == 4 * 24);
        else {
            CHECK(missing == 0);
            CHECK(total == N);
        }
    }
    cl_transforms_destroy(tf);
    cl_dataset_close(ds);
}

CL_TEST(eval_covers_each_sample_once)
{
    /* An eval pipeline (no random op, no shuffle, no drop) over 3 shards
     * of 50 samples with batch 7: every sample once, labels matching. */
    const int N = 50;
    cl_dataset *ds = make_ds("eval", N);
    REQUIRE(ds);
    cl_transform_opts to = cl_transform_opts_small_eval(1, 10, 9, NULL, NULL);
    cl_transforms *tf = NULL;
    REQUIRE_OK(cl_transforms_create(&tf, &to));
    int count[50] = {0}, wrong = 0;
    for (int k = 0; k < 3; k++) {
        cl_loader_opts o = base_opts(ds, tf);
        o.shuffle = 0;
        o.batch_size = 7;
        o.num_shards = 3;
        o.shard_id = k;
        o.workers = 2;
        cl_loader *ld = NULL;
        REQUIRE_OK(cl_loader_create(&ld, &o));
        CHECK(cl_loader_samples_per_epoch(ld) == (k < 2 ? 17 : 16));
        REQUIRE_OK(cl_loader_start_epoch(ld, 0));
        for (;;) {
            cl_batch b;
            REQUIRE_OK(cl_loader_next(ld, &b));
            if (b.n == 0)
                break;
            for (int i = 0; i < b.n; i++) {
                int64_t idx = b.indices[i];
                if (idx < 0 || idx >= N) {
                    wrong++;
                    continue;
                }
                count[idx]++;
                wrong += b.labels[i] != fx_label((int)idx, 10);
                /* Pixel (0,0) of the sample is that image's. */
                float e = (fx_pix((int)idx, 0, 0) / 255.0f - 0.5f) / 0.5f;
                wrong += fabsf(b.x[(size_t)i * 90] - e) > 1e-6f;
            }
        }
        cl_loader_destroy(ld);
    }
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += count[i] != 1;
    CHECK(bad == 0);
    CHECK(wrong == 0);
    cl_transforms_destroy(tf);
    cl_dataset_close(ds);
}

CL_TEST(resume_from_position)
{
    cl_dataset *ds = make_ds("resume", 90);
    REQUIRE(ds);
    cl_transforms *tf = train_tf(1);
    REQUIRE(tf);
    cl_loader_opts o = base_opts(ds, tf);
    o.workers = 2;
    cl_loader *a = NULL, *b = NULL;
    REQUIRE_OK(cl_loader_create(&a, &o));
    REQUIRE_OK(cl_loader_create(&b, &o));
    REQUIRE_OK(cl_loader_start_epoch(a, 4));
    cl_batch ba, bb;
    for (int i = 0; i < 5; i++)
        REQUIRE_OK(cl_loader_next(a, &ba));
    int64_t e, bi;
    cl_loader_position(a, &e, &bi);
    CHECK(e == 4 && bi == 5);
    REQUIRE_OK(cl_loader_seek(b, e, bi));
    int same = 1, n = 0;
    for (;;) {
        REQUIRE_OK(cl_loader_next(a, &ba));
        REQUIRE_OK(cl_loader_next(b, &bb));
        if (ba.n != bb.n || ba.index != bb.index) {
            same = 0;
            break;
        }
        if (ba.n == 0)
            break;
        n++;
        same &= memcmp(ba.x, bb.x, (size_t)ba.n * 90 * 4) == 0;
        same &= memcmp(ba.indices, bb.indices, (size_t)ba.n * 8) == 0;
    }
    CHECK(same);
    CHECK(n == 12 - 5);
    cl_loader_stats st;
    cl_loader_get_stats(a, &st);
    CHECK(st.batches == 12);
    CHECK(st.samples == 90);
    CHECK(st.wait_seconds >= 0 && st.wait_seconds == cl_loader_wait_seconds(a));
    CHECK_ERR(cl_loader_seek(b, 0, 13), CL_ERR_ARG, "batch 0..12");
    cl_loader_destroy(a);
    cl_loader_destroy(b);
    cl_transforms_destroy(tf);
    cl_dataset_close(ds);
}

CL_TEST(mixup_cutmix_targets)
{
    cl_dataset *ds = make_ds("mix", 64);
    REQUIRE(ds);
    cl_transform_opts to = cl_transform_opts_small_eval(1, 10, 9, NULL, NULL);
    to.normalize = 0;
    cl_transforms *tf = NULL;
    REQUIRE_OK(cl_transforms_create(&tf, &to));
    for (int mode = 0; mode < 2; mode++) {
        cl_loader_opts o = base_opts(ds, tf);
        o.batch_size = 16;
        o.shuffle = 0;
        if (mode == 0)
            o.mixup_alpha = 1.0f;
        else
            o.cutmix_alpha = 1.0f;
        o.mix_prob = 1.0f;
        cl_loader *ld = NULL;
        REQUIRE_OK(cl_loader_create(&ld, &o));
        REQUIRE_OK(cl_loader_start_epoch(ld, 0));
        cl_batch b;
        REQUIRE_OK(cl_loader_next(ld, &b));
        REQUIRE(b.targets != NULL && b.k == 10 && b.n == 16);
        int bad = 0, mixed = 0;
        for (int i = 0; i < b.n; i++) {
            double sum = 0;
            for (int k = 0; k < 10; k++) {
                sum += b.targets[i * 10 + k];
                bad += b.targets[i * 10 + k] < 0;
            }
            bad += fabs(sum - 1) > 1e-5;
            float own = b.targets[i * 10 + b.labels[i]];
            mixed += own < 0.999f;
            /* The pair partner is sample n-1-i. */
            int j = b.n - 1 - i;
            if (b.labels[j] != b.labels[i])
                bad += b.targets[i * 10 + b.labels[j]] <= 0 && own < 0.999f;
        }
        CHECK(bad == 0);
        CHECK(mixed > 0);
        if (mode == 0) {
            /* MixUp: pixel (0,0) is lam*a + (1-lam)*b with lam = the own
             * label's weight (labels of the pair differ here). */
            int i = 0, j = 15;
            int64_t ia = b.indices[i], ib = b.indices[j];
            float lam = b.targets[i * 10 + b.labels[i]];
            if (b.labels[i] != b.labels[j]) {
                float e = lam * fx_pix((int)ia, 0, 0) / 255.0f +
                          (1 - lam) * fx_pix((int)ib, 0, 0) / 255.0f;
                CHECK_NEAR(b.x[0], e, 1e-5);
            }
        } else {
            /* CutMix: every pixel of sample 0 comes from itself or its
             * partner, and the share of partner pixels is 1 - lam. */
            int64_t ia = b.indices[0], ib = b.indices[15];
            int from_b = 0, neither = 0;
            for (int y = 0; y < 10; y++)
                for (int x = 0; x < 9; x++) {
                    float v = b.x[y * 9 + x] * 255.0f;
                    int va = fx_pix((int)ia, y, x), vb = fx_pix((int)ib, y, x);
                    if (fabsf(v - va) < 1e-3f)
                        continue;
                    if (fabsf(v - vb) < 1e-3f)
                        from_b++;
                    else
                        neither++;
                }
            CHECK(neither == 0);
            if (b.labels[0] != b.labels[15])
                CHECK_NEAR(b.targets[b.labels[15]], from_b / 90.0, 1e-5);
        }
        cl_loader_destroy(ld);
    }
    cl_transforms_destroy(tf);
    cl_dataset_close(ds);
}

CL_TEST(loader_bad_options)
{
    cl_dataset *ds = make_ds("badopt", 10);
    REQUIRE(ds);
    cl_transforms *tf = train_tf(1);
    REQUIRE(tf);
    cl_loader *ld = NULL;
    cl_loader_opts o = base_opts(ds, tf);
    o.num_shards = 2;
    o.shard_id = 2;
    CHECK_ERR(cl_loader_create(&ld, &o), CL_ERR_CONFIG, "shard_id 2");
    o = base_opts(ds, tf);
    o.batch_size = 0;
    CHECK_ERR(cl_loader_create(&ld, &o), CL_ERR_CONFIG, "batch_size 0");
    o = base_opts(ds, tf);
    o.mix_prob = 2;
    CHECK_ERR(cl_loader_create(&ld, &o), CL_ERR_CONFIG, "mix_prob");
    o = base_opts(ds, tf);
    REQUIRE_OK(cl_loader_create(&ld, &o));
    cl_batch b;
    CHECK_ERR(cl_loader_next(ld, &b), CL_ERR_ARG, "start_epoch");
    cl_loader_destroy(ld);
    cl_transforms_destroy(tf);
    cl_dataset_close(ds);
}

CL_TEST(wait_time_and_stats)
{
    cl_dataset *ds = make_ds("wait", 40);
    REQUIRE(ds);
    cl_transforms *tf = train_tf(3);
    REQUIRE(tf);
    for (int nw = 0; nw <= 2; nw += 2) {
        cl_loader_opts o = base_opts(ds, tf);
        o.workers = nw;
        o.batch_size = 16;
        cl_loader *ld = NULL;
        REQUIRE_OK(cl_loader_create(&ld, &o));
        CHECK(cl_loader_wait_seconds(ld) == 0);
        CHECK(cl_loader_batches_per_epoch(ld) == 3);
        REQUIRE_OK(cl_loader_start_epoch(ld, 0));
        cl_batch b;
        int sizes[4] = {-1, -1, -1, -1};
        for (int i = 0; i < 4; i++) {
            REQUIRE_OK(cl_loader_next(ld, &b));
            sizes[i] = b.n;
        }
        CHECK(sizes[0] == 16 && sizes[1] == 16 && sizes[2] == 8);
        CHECK(sizes[3] == 0 && b.index == 3);
        cl_loader_stats st;
        cl_loader_get_stats(ld, &st);
        /* The consumer waited for at least the first batch. */
        CHECK(st.wait_seconds > 0);
        CHECK(st.batches == 3 && st.samples == 40 && st.skipped == 0);
        /* The end is sticky until the next epoch. */
        REQUIRE_OK(cl_loader_next(ld, &b));
        CHECK(b.n == 0);
        cl_loader_destroy(ld);
    }
    cl_transforms_destroy(tf);
    cl_dataset_close(ds);
}

/* The trainer's resume keeps the global batch G and may change how it is
 * split (docs/training.md): that is sound only if optimizer step j takes
 * the same samples for every split of G into processes x batch_size x
 * accumulation_steps.  60 samples (the remainder dropped), G = 8: every
 * split gives the same set for each step, no sample twice in the epoch,
 * and the same number of steps. */
CL_TEST(global_step_samples_do_not_depend_on_the_split)
{
    enum { N = 60, G = 8, STEPS_MAX = 16 };
    static const int split[][3] = {/* processes, batch, accumulation */
                                   {1, 8, 1}, {2, 4, 1}, {4, 2, 1},
                                   {2, 2, 2}, {1, 4, 2}, {1, 1, 8}};
    enum { NS = sizeof split / sizeof split[0] };
    cl_dataset *ds = make_ds("split", N);
    REQUIRE(ds);
    cl_transforms *tf = train_tf(1);
    REQUIRE(tf);
    static int64_t steps[NS][STEPS_MAX][G];
    int n_steps[NS];
    for (int c = 0; c < NS; c++) {
        int S = split[c][0], B = split[c][1], A = split[c][2];
        n_steps[c] = 0;
        for (int r = 0; r < S; r++) {
            cl_loader_opts o = base_opts(ds, tf);
            o.batch_size = B;
            o.shuffle = 1;
            o.seed = 3;
            o.num_shards = S;
            o.shard_id = r;
            o.drop_remainder = 1;
            cl_loader *ld = NULL;
            REQUIRE_OK(cl_loader_create(&ld, &o));
            REQUIRE_OK(cl_loader_start_epoch(ld, 1));
            int64_t nb = cl_loader_batches_per_epoch(ld), ns = nb / A;
            REQUIRE(ns <= STEPS_MAX);
            n_steps[c] = (int)ns;
            for (int64_t b = 0; b < ns * A; b++) {
                cl_batch bt;
                REQUIRE_OK(cl_loader_next(ld, &bt));
                REQUIRE(bt.n == B);
                /* Rank r's part of step j: its micro-batches j*A..j*A+A-1. */
                int64_t j = b / A, slot = (b % A) * B + (int64_t)r * A * B;
                for (int i = 0; i < B; i++)
                    steps[c][j][slot + i] = bt.indices[i];
            }
            cl_loader_destroy(ld);
        }
        for (int j = 0; j < n_steps[c]; j++) /* a step's set, sorted */
            for (int a = 1; a < G; a++)
                for (int b = a; b > 0 && steps[c][j][b - 1] > steps[c][j][b];
                     b--) {
                    int64_t t = steps[c][j][b];
                    steps[c][j][b] = steps[c][j][b - 1];
                    steps[c][j][b - 1] = t;
                }
    }
    int seen[N] = {0};
    for (int j = 0; j < n_steps[0]; j++)
        for (int i = 0; i < G; i++)
            seen[steps[0][j][i]]++;
    for (int k = 0; k < N; k++)
        CHECK(seen[k] <= 1);
    CHECK(n_steps[0] == N / G);
    for (int c = 1; c < NS; c++) {
        CHECK(n_steps[c] == n_steps[0]);
        for (int j = 0; j < n_steps[0] && j < n_steps[c]; j++)
            CHECK(memcmp(steps[c][j], steps[0][j], sizeof steps[0][j]) == 0);
    }
    cl_transforms_destroy(tf);
    cl_dataset_close(ds);
}
