/* kill -9 during `classic train`, again and again, then --resume: at
 * seeded random moments and once in the middle of a checkpoint write, with
 * a checkpoint every 2 steps.  After every kill each *.safetensors in the
 * run directory must load, the newest complete checkpoint must be at most
 * one interval behind the last logged step, and at the end every logged
 * loss and the final weights must be the uninterrupted run's.
 * ctest-labels: faults slow */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "faults_common.h"
#include "harness.h"

/* 96 images, 12 steps per epoch, 2 epochs; a checkpoint every 2 steps,
 * the 4 newest of each process kept. */
#define KILL_RUN                                                               \
    FAULT_RUN "--limit_train 96 --epoch_size 2 --ckpt_save_interval 2 "        \
              "--keep_checkpoint_max 4 "
enum { KILL_TOTAL = 24, KILL_INTERVAL = 2, KILL_ROUNDS = 5 };

static uint64_t rng_state;

/* splitmix64: the kill moments follow from the seed alone. */
static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The names of the temp files of atomic writes now in dir, one string
 * ("a/b/..."), to tell a new write from the leftovers of earlier kills. */
static void tmp_names(const char *dir, char *buf, size_t n)
{
    DIR *d = opendir(dir);
    buf[0] = '\0';
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".tmp.")) {
            size_t k = strlen(buf);
            snprintf(buf + k, n - k, "%s/", e->d_name);
        }
    closedir(d);
}

/* Waits until a checkpoint temp file not in `before` appears in dir (a
 * checkpoint is being written); 0 if pid ended or timeout_s passed first. */
static int wait_new_tmp(const char *dir, const char *before, int pid,
                        double timeout_s)
{
    struct timespec nap = {0, 2 * 1000 * 1000};
    for (double t = 0; t < timeout_s; t += 0.002) {
        DIR *d = opendir(dir);
        struct dirent *e;
        int found = 0;
        while (d && (e = readdir(d)) != NULL)
            if (strstr(e->d_name, ".safetensors.tmp.") &&
                !strstr(before, e->d_name))
                found = 1;
        if (d)
            closedir(d);
        if (found)
            return 1;
        if (kill(pid, 0) != 0)
            return 0;
        nanosleep(&nap, NULL);
    }
    return 0;
}

/* The highest step in dir/metrics.jsonl (0 if none). */
static int64_t last_logged(const char *dir)
{
    static double loss[FAULT_MAX_STEPS];
    static int64_t step[FAULT_MAX_STEPS];
    char p[1024];
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    int n = cl_test_read_losses(p, loss, step, FAULT_MAX_STEPS);
    int64_t m = 0;
    for (int i = 0; i < n; i++)
        m = step[i] > m ? step[i] : m;
    return m;
}

CL_TEST(kill9_at_random_moments_then_resume)
{
    char args[3072];
    const char *ref = cl_test_path("ref"), *dir = cl_test_path("k");
    const char *seed_env = getenv("CL_FAULT_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 10) : 20261202u;
    rng_state = seed;
    fprintf(stderr, "kill -9 moments from seed %llu (CL_FAULT_SEED)\n",
            (unsigned long long)seed);

    /* The uninterrupted run (no checkpoints: they change no number). */
    snprintf(args, sizeof args,
             FAULT_RUN "--limit_train 96 --epoch_size 2 --ckpt_save_dir %s",
             ref);
    REQUIRE(cl_test_classic(args) == 0);

    char ck[1024] = "";
    int64_t from = 0; /* the step the next run starts at */
    int kills = 0, mid_write = 0;
    for (int round = 0; round < KILL_ROUNDS; round++) {
        char log[64], before[8192];
        snprintf(log, sizeof log, "run%d.log", round);
        /* A round killed before its first checkpoint starts afresh, over
         * the record the killed run left (--overwrite true). */
        if (from > 0)
            snprintf(args, sizeof args,
                     KILL_RUN "--ckpt_save_dir %s --resume %s", dir, ck);
        else
            snprintf(args, sizeof args,
                     KILL_RUN "--ckpt_save_dir %s --overwrite true", dir);
        tmp_names(dir, before, sizeof before);
        int pid = cl_test_classic_start(args, cl_test_path(log), NULL);
        REQUIRE(pid > 0);
        /* Round 2 is killed while a checkpoint is being written; the
         * others once the run is a checkpoint past its start, then after
         * a random 0..1 s. */
        int alive;
        if (round == 2) {
            alive = wait_new_tmp(dir, before, pid, 300);
            mid_write += alive;
        } else {
            alive = 1;
            for (int t = 0; alive && t < 15000; t++) {
                if (last_logged(dir) > from + KILL_INTERVAL)
                    break;
                struct timespec nap = {0, 20 * 1000 * 1000};
                nanosleep(&nap, NULL);
                alive = kill(pid, 0) == 0;
            }
            struct timespec r = {0, 0};
            uint64_t ms = rng_next() % 1000;
            r.tv_sec = (time_t)(ms / 1000);
            r.tv_nsec = (long)(ms % 1000) * 1000000L;
            nanosleep(&r, NULL);
        }
        kill(pid, SIGKILL);
        int st = cl_test_wait(pid, 60);
        REQUIRE(st != -1);
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
            kills++;
        else
            fprintf(stderr,
                    "round %d: the run ended by itself (status "
                    "%#x)\n",
                    round, st);
        /* No partial checkpoint, whatever the moment. */
        int tmp = 0;
        fault_check_dir(dir, &tmp);
        int64_t logged = last_logged(dir);
        int64_t latest = fault_latest_checkpoint(dir, ck, sizeof ck);
        fprintf(stderr,
                "round %d: killed after step %lld was logged; newest "
                "complete checkpoint: step %lld; %d temp file(s)\n",
                round, (long long)logged, (long long)latest, tmp);
        /* At most one checkpoint interval of work lost. */
        CHECK(logged - (latest < 0 ? 0 : latest) <= KILL_INTERVAL);
        from = latest < 0 ? 0 : latest;
        if (latest < 0)
            ck[0] = '\0';
    }
    CHECK(kills >= KILL_ROUNDS - 1);
    CHECK(mid_write == 1);

    /* The last run goes to the end. */
    if (from > 0)
        snprintf(args, sizeof args, KILL_RUN "--ckpt_save_dir %s --resume %s",
                 dir, ck);
    else
        snprintf(args, sizeof args,
                 KILL_RUN "--ckpt_save_dir %s --overwrite true", dir);
    REQUIRE(cl_test_classic(args) == 0);
    fault_check_dir(dir, NULL);
    CHECK(fault_check_losses(dir, ref, KILL_TOTAL) >= KILL_TOTAL);
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/resnet18-last.safetensors", dir);
    snprintf(b, sizeof b, "%s/resnet18-last.safetensors", ref);
    fault_check_same_weights(a, b);
}
