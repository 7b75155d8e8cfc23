/* Shared by the fault tests (test_faults.c, test_faults_kill.c): the small
 * training configuration they interrupt, and checks of what a run
 * directory holds afterwards (every checkpoint whole, temp files apart,
 * losses and weights against an uninterrupted run). */
#ifndef CL_TESTS_FAULTS_COMMON_H
#define CL_TESTS_FAULTS_COMMON_H

#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

/* resnet18 with the ImageNet stem at 32x32 on gray Fashion-MNIST, batch 8,
 * a JSONL line every step, augmentation on (so resume must restore the
 * per-sample RNG streams), no evaluation, no epoch checkpoints. */
#define FAULT_RUN                                                              \
    "train --model resnet18 --stem imagenet --image_size 32 --in_channels 1 "  \
    "--random_crop_padding 2 --hflip 0.5 --label_smoothing 0 "                 \
    "--num_parallel_workers 2 --mean 0.286 --std 0.353 --seed 7 "              \
    "--batch_size 8 --lr 0.05 --warmup_epochs 1 --val_interval 0 "             \
    "--ckpt_save_epochs 0 --per_print_times 1 "

enum { FAULT_MAX_STEPS = 256 };

static inline int fault_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The number of train lines in dir/metrics.jsonl (0 if there is none). */
static inline int fault_logged_steps(const char *dir)
{
    static double loss[FAULT_MAX_STEPS];
    static int64_t step[FAULT_MAX_STEPS];
    char p[1024];
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    int n = cl_test_read_losses(p, loss, step, FAULT_MAX_STEPS);
    return n < 0 ? 0 : n;
}

/* Waits until dir/metrics.jsonl has at least n train lines; 0 if the
 * process pid ended or timeout_s passed first. */
static inline int fault_wait_steps(const char *dir, int n, int pid,
                                   double timeout_s)
{
    struct timespec nap = {0, 20 * 1000 * 1000};
    for (double t = 0; t < timeout_s; t += 0.02) {
        if (fault_logged_steps(dir) >= n)
            return 1;
        if (kill(pid, 0) != 0)
            return 0;
        nanosleep(&nap, NULL);
    }
    return 0;
}

/* Every *.safetensors in dir must open (the reader checks the header,
 * every offset and the file size): a partial checkpoint fails here.
 * Returns the number checked; *tmp counts the temp files of interrupted
 * writes (*.tmp.XXXXXX), which never end in .safetensors. */
static inline int fault_check_dir(const char *dir, int *tmp)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (tmp)
        *tmp = 0;
    if (!d) {
        cl_test_fail(__FILE__, __LINE__, "cannot open %s", dir);
        return 0;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (strstr(e->d_name, ".tmp.") && tmp)
            (*tmp)++;
        if (!fault_ends_with(e->d_name, ".safetensors"))
            continue;
        cl_st_file *f = NULL;
        cl_status s = cl_st_open(&f, p);
        if (s != CL_OK)
            cl_test_fail(__FILE__, __LINE__,
                         "%s does not load after the fault: %s", p,
                         cl_last_error());
        cl_st_close(f);
        n++;
    }
    closedir(d);
    return n;
}

/* The step checkpoint with the highest step whose training state is
 * beside it (path into buf), or -1 when there is none. */
static inline int64_t fault_latest_checkpoint(const char *dir, char *buf,
                                              size_t n)
{
    DIR *d = opendir(dir);
    int64_t best = -1;
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *s = strstr(e->d_name, "-s");
        if (strncmp(e->d_name, "resnet18-e", 10) != 0 || !s ||
            !fault_ends_with(e->d_name, ".safetensors") ||
            strstr(e->d_name, ".state."))
            continue;
        int64_t step = strtoll(s + 2, NULL, 10);
        char model[1024], state[1100];
        snprintf(model, sizeof model, "%s/%s", dir, e->d_name);
        snprintf(state, sizeof state, "%.*s.state.safetensors",
                 (int)(strlen(model) - strlen(".safetensors")), model);
        if (access(state, R_OK) != 0 || step <= best)
            continue;
        best = step;
        snprintf(buf, n, "%s", model);
    }
    closedir(d);
    return best;
}

/* Every train line of run's metrics.jsonl must carry the loss the
 * uninterrupted run logged at that step (resume is bit-exact), and every
 * step 1..total must appear.  Returns the number of lines compared. */
static inline int fault_check_losses(const char *run, const char *ref,
                                     int total)
{
    static double la[FAULT_MAX_STEPS], lb[FAULT_MAX_STEPS];
    static int64_t sa[FAULT_MAX_STEPS], sb[FAULT_MAX_STEPS];
    char p[1024];
    snprintf(p, sizeof p, "%s/metrics.jsonl", ref);
    int na = cl_test_read_losses(p, la, sa, FAULT_MAX_STEPS);
    snprintf(p, sizeof p, "%s/metrics.jsonl", run);
    int nb = cl_test_read_losses(p, lb, sb, FAULT_MAX_STEPS);
    if (na != total) {
        cl_test_fail(__FILE__, __LINE__,
                     "the uninterrupted run logged %d steps, expected %d", na,
                     total);
        return 0;
    }
    int seen[FAULT_MAX_STEPS] = {0}, bad = 0;
    for (int i = 0; i < nb; i++) {
        int64_t s = sb[i];
        if (s < 1 || s > total) {
            cl_test_fail(__FILE__, __LINE__,
                         "logged step %lld is outside "
                         "1..%d",
                         (long long)s, total);
            return i;
        }
        seen[s - 1] = 1;
        if (lb[i] != la[s - 1] && bad++ < 5)
            cl_test_fail(__FILE__, __LINE__,
                         "step %lld: loss %.9g, the uninterrupted run's "
                         "%.9g",
                         (long long)s, lb[i], la[s - 1]);
    }
    for (int s = 0; s < total; s++)
        if (!seen[s]) {
            cl_test_fail(__FILE__, __LINE__, "step %d was never logged", s + 1);
            break;
        }
    return nb;
}

/* Every tensor of model a bit-identical to b's (metadata may differ: the
 * resolved config names the --resume file). */
static inline void fault_check_same_weights(const char *a, const char *b)
{
    cl_st_file *fa = NULL, *fb = NULL;
    if (cl_st_open(&fa, a) != CL_OK || cl_st_open(&fb, b) != CL_OK) {
        cl_test_fail(__FILE__, __LINE__, "cannot open %s or %s: %s", a, b,
                     cl_last_error());
        cl_st_close(fa);
        return;
    }
    if (cl_st_count(fa) != cl_st_count(fb))
        cl_test_fail(__FILE__, __LINE__, "%s has %zu tensors, %s %zu", a,
                     cl_st_count(fa), b, cl_st_count(fb));
    for (size_t i = 0; i < cl_st_count(fa); i++) {
        long j = cl_st_find(fb, cl_st_name(fa, i));
        size_t na = 0, nb = 0;
        const void *pa = cl_st_data(fa, i, &na);
        const void *pb = j >= 0 ? cl_st_data(fb, (size_t)j, &nb) : NULL;
        if (!pb || na != nb || memcmp(pa, pb, na) != 0) {
            cl_test_fail(__FILE__, __LINE__,
                         "tensor %s differs between %s "
                         "and %s",
                         cl_st_name(fa, i), a, b);
            break;
        }
    }
    cl_st_close(fa);
    cl_st_close(fb);
}

#endif
