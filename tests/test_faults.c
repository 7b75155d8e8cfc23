/* Faults during `classic train`: SIGINT (checkpoint, exit 130, resume gives
 * the uninterrupted run's losses), a second signal (immediate end, no
 * partial checkpoint), the disk filling up while a checkpoint is written
 * (a tmpfs shrunk under the run: clear error, the previous checkpoint
 * intact), and ImageFolder images that become unreadable mid-run (per
 * on_bad_image: stop naming the file, or skip).  kill -9 is in
 * test_faults_kill.c.
 * ctest-labels: faults slow */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jpeglib.h>

#include "data/data.h"
#include "faults_common.h"
#include "harness.h"
#include "io/checkpoint.h"
#include "models/resnet.h"

/* 64 images, 8 steps per epoch, 2 epochs. */
#define SIGINT_RUN FAULT_RUN "--limit_train 64 --epoch_size 2 "
enum { SIGINT_TOTAL = 16 };

static int run_ok(const char *args)
{
    return cl_test_classic(args) == 0;
}

/* Builds the model FAULT_RUN trains and loads path into it (strict). */
static void check_model_loads(const char *path)
{
    cl_resnet_config rc = cl_resnet_config_default();
    rc.depth = 18;
    rc.in_channels = 1;
    rc.num_classes = 10;
    cl_graph g;
    REQUIRE_OK(cl_graph_init(&g, 1));
    CHECK_OK(cl_resnet_build(&g, &rc, 32, 32, 0, 0));
    CHECK_OK(cl_ckpt_load_model(path, &g, CL_CKPT_STRICT, NULL));
    cl_graph_free(&g);
}

/* The file named after "--resume " in a log line, into buf. */
static int resume_path_in(const char *log, char *buf, size_t n)
{
    const char *p = strstr(log, "--resume ");
    if (!p)
        return 0;
    p += strlen("--resume ");
    size_t k = strcspn(p, " \n");
    if (k == 0 || k >= n)
        return 0;
    memcpy(buf, p, k);
    buf[k] = '\0';
    return 1;
}

CL_TEST(sigint_saves_a_checkpoint_and_resume_continues)
{
    char args[2048];
    const char *ref = cl_test_path("ref"), *dir = cl_test_path("int");
    snprintf(args, sizeof args, SIGINT_RUN "--ckpt_save_dir %s", ref);
    REQUIRE(run_ok(args));

    /* The same run, interrupted once it has logged 3 steps. */
    const char *log = cl_test_path("int.log");
    snprintf(args, sizeof args, SIGINT_RUN "--ckpt_save_dir %s", dir);
    int pid = cl_test_classic_start(args, log, NULL);
    REQUIRE(pid > 0);
    int started = fault_wait_steps(dir, 3, pid, 300);
    if (!started) {
        kill(pid, SIGKILL);
        cl_test_wait(pid, 30);
    }
    REQUIRE(started);
    REQUIRE(kill(pid, SIGINT) == 0);
    int st = cl_test_wait(pid, 300);
    cl_test_slurp(log);
    REQUIRE(st != -1);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 130)
        fprintf(stderr, "wait status %#x; log:\n%s\n", st, cl_test_out);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 130);
    /* One line says where the checkpoint is and how to go on. */
    CHECK(strstr(cl_test_out, "interrupted by SIGINT after step ") != NULL);
    char ck[1024];
    REQUIRE(resume_path_in(cl_test_out, ck, sizeof ck));
    CHECK(strstr(cl_test_out, "run the same command with --resume") != NULL);
    const char *at = strstr(cl_test_out, "after step ");
    REQUIRE(at != NULL);
    long step = strtol(at + strlen("after step "), NULL, 10);
    CHECK(step >= 3 && step < SIGINT_TOTAL);
    /* A normal step checkpoint: model + state, loadable, at that step. */
    char want[1200], meta[64];
    snprintf(want, sizeof want, "%s/resnet18-e%ld-s%ld.safetensors", dir,
             step > 8 ? 2L : 1L, step);
    CHECK(strcmp(ck, want) == 0);
    int tmp = 0;
    CHECK(fault_check_dir(dir, &tmp) == 2);
    CHECK(tmp == 0);
    check_model_loads(ck);
    CHECK_OK(cl_ckpt_read_meta(ck, "step", meta, sizeof meta));
    CHECK(strtol(meta, NULL, 10) == step);

    /* Resumed into the same directory: every logged loss (before and after
     * the interruption) is the uninterrupted run's, and so are the final
     * weights. */
    snprintf(args, sizeof args, SIGINT_RUN "--ckpt_save_dir %s --resume %s",
             dir, ck);
    REQUIRE(run_ok(args));
    CHECK(strstr(cl_test_out, "resumed from") != NULL);
    CHECK(fault_check_losses(dir, ref, SIGINT_TOTAL) >= SIGINT_TOTAL);
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/resnet18-last.safetensors", dir);
    snprintf(b, sizeof b, "%s/resnet18-last.safetensors", ref);
    fault_check_same_weights(a, b);
}

CL_TEST(second_signal_ends_the_run_at_once)
{
    char args[2048];
    const char *dir = cl_test_path("twice"), *log = cl_test_path("twice.log");
    snprintf(args, sizeof args,
             FAULT_RUN "--limit_train 256 --epoch_size 4 --ckpt_save_dir %s",
             dir);
    int pid = cl_test_classic_start(args, log, NULL);
    REQUIRE(pid > 0);
    int started = fault_wait_steps(dir, 1, pid, 300);
    if (!started) {
        kill(pid, SIGKILL);
        cl_test_wait(pid, 30);
    }
    REQUIRE(started);
    REQUIRE(kill(pid, SIGTERM) == 0);
    /* The handler announces the first signal on stderr. */
    for (int i = 0; i < 500; i++) {
        cl_test_slurp(log);
        if (strstr(cl_test_out, "classic: interrupted"))
            break;
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    CHECK(strstr(cl_test_out, "classic: interrupted: finishing this step") !=
          NULL);
    kill(pid, SIGTERM);
    int st = cl_test_wait(pid, 60);
    REQUIRE(st != -1);
    /* Death by the signal itself (the shell's 143), not a clean exit. */
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGTERM)
        fprintf(stderr, "wait status %#x; log:\n%s\n", st, cl_test_out);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
    int tmp = 0;
    fault_check_dir(dir, &tmp);
}

/* ---- disk full ------------------------------------------------------- */

static unsigned long long fs_used(const char *dir)
{
    struct statvfs v;
    if (statvfs(dir, &v) != 0)
        return 0;
    return (unsigned long long)(v.f_blocks - v.f_bfree) * v.f_frsize;
}

static long long file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (long long)st.st_size : -1;
}

/* A checksum of the whole file, to tell "intact" from "rewritten". */
static unsigned long long file_sum(const char *p)
{
    FILE *f = fopen(p, "rb");
    unsigned long long h = 1469598103934665603ull;
    int c;
    if (!f)
        return 0;
    while ((c = getc(f)) != EOF)
        h = (h ^ (unsigned)c) * 1099511628211ull;
    fclose(f);
    return h;
}

static rlim_t fsize_limit;

/* In the child: a file size limit; with SIGXFSZ ignored, a write past it
 * fails with EFBIG instead of killing the process. */
static void limit_file_size(void)
{
    struct rlimit rl = {fsize_limit, fsize_limit};
    signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
        _exit(126);
}

/* Run 1 fills dir up to a SIGINT checkpoint.  Then the disk is made full:
 * on a tmpfs (on_tmpfs) the file system is shrunk to what is used plus
 * half a checkpoint; otherwise the resumed run gets a file size limit
 * (RLIMIT_FSIZE) of a quarter of one.  The resumed run must fail at its
 * first checkpoint with a message naming the file and the cause, leaving
 * the previous checkpoint as it was and no temp file behind. */
static void disk_full_body(const char *dir, int on_tmpfs)
{
    char args[2048], ck[1024], state[1100], cmd[1400];
    const char *log = cl_test_path("full1.log");
    snprintf(args, sizeof args,
             SIGINT_RUN "--ckpt_save_interval 2 --keep_checkpoint_max 0 "
                        "--ckpt_save_dir %s",
             dir);
    int pid = cl_test_classic_start(args, log, NULL);
    REQUIRE(pid > 0);
    int started = fault_wait_steps(dir, 3, pid, 300);
    if (started)
        kill(pid, SIGINT);
    else
        kill(pid, SIGKILL);
    int st = cl_test_wait(pid, 300);
    REQUIRE(started && st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 130);
    int64_t step = fault_latest_checkpoint(dir, ck, sizeof ck);
    REQUIRE(step >= 3);
    snprintf(state, sizeof state, "%.*s.state.safetensors",
             (int)(strlen(ck) - strlen(".safetensors")), ck);
    long long pair = file_size(ck) + file_size(state);
    unsigned long long sum_model = file_sum(ck), sum_state = file_sum(state);
    REQUIRE(pair > 0);

    snprintf(args, sizeof args,
             SIGINT_RUN "--ckpt_save_interval 2 --keep_checkpoint_max 0 "
                        "--ckpt_save_dir %s --resume %s",
             dir, ck);
    int rc;
    if (on_tmpfs) {
        unsigned long long size = fs_used(dir) + (unsigned long long)pair / 2;
        snprintf(cmd, sizeof cmd, "mount -o remount,size=%llu %s", size, dir);
        REQUIRE(cl_test_run(cmd) == 0);
        fprintf(stderr, "tmpfs shrunk to %llu bytes (checkpoint pair %lld)\n",
                size, pair);
        rc = cl_test_classic(args);
        CHECK(strstr(cl_test_out, "disk full while writing") != NULL);
    } else {
        const char *log2 = cl_test_path("full2.log");
        fsize_limit = (rlim_t)(pair / 4);
        pid = cl_test_classic_start(args, log2, limit_file_size);
        REQUIRE(pid > 0);
        st = cl_test_wait(pid, 600);
        cl_test_slurp(log2);
        rc = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        CHECK(strstr(cl_test_out, "file size limit") != NULL);
    }
    CHECK(rc == 1);
    /* The message names the checkpoint file being written. */
    char next[1200];
    int64_t nstep = step + 2 - step % 2;
    snprintf(next, sizeof next, "%s/resnet18-e%d-s%lld", dir, nstep > 8 ? 2 : 1,
             (long long)nstep);
    CHECK(strstr(cl_test_out, next) != NULL);
    if (rc != 1 || !strstr(cl_test_out, next))
        fprintf(stderr, "expected exit 1 and a message naming %s*:\n%s\n", next,
                cl_test_out);
    /* The previous checkpoint: byte for byte what it was, and loadable. */
    CHECK(file_sum(ck) == sum_model);
    CHECK(file_sum(state) == sum_state);
    check_model_loads(ck);
    int tmp = 0;
    fault_check_dir(dir, &tmp);
    CHECK(tmp == 0);
    /* The newest complete pair is still the one we resumed from. */
    char latest[1024];
    CHECK(fault_latest_checkpoint(dir, latest, sizeof latest) == step);
}

CL_TEST(disk_full_while_saving_keeps_the_previous_checkpoint)
{
    /* A real full file system where we may mount one (root); otherwise
     * the same failure through a file size limit, said so in the log. */
    const char *dir = cl_test_path("full");
    char cmd[1200];
    REQUIRE(mkdir(dir, 0755) == 0);
    snprintf(cmd, sizeof cmd, "mount -t tmpfs -o size=1g tmpfs %s 2>&1", dir);
    if (geteuid() != 0 || cl_test_run(cmd) != 0) {
        fprintf(stderr,
                "NOTE: cannot mount a tmpfs here (uid %d, needs "
                "CAP_SYS_ADMIN): testing the failed checkpoint write "
                "through RLIMIT_FSIZE (EFBIG) instead of ENOSPC\n",
                (int)geteuid());
        disk_full_body(dir, 0);
        return;
    }
    disk_full_body(dir, 1);
    snprintf(cmd, sizeof cmd, "umount %s", dir);
    CHECK(cl_test_run(cmd) == 0);
}

/* The RLIMIT_FSIZE path, run on purpose even where tmpfs works, so both
 * messages stay tested. */
CL_TEST(file_size_limit_while_saving_keeps_the_previous_checkpoint)
{
    const char *dir = cl_test_path("fsize");
    REQUIRE(mkdir(dir, 0755) == 0);
    disk_full_body(dir, 0);
}

/* ---- unreadable images mid-run -------------------------------------- */

static int write_gray_jpeg(const char *path, const uint8_t *px, int w, int h)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 1;
    c.in_color_space = JCS_GRAYSCALE;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 95, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)c.next_scanline * w);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return fclose(f) == 0 ? 0 : -1;
}

/* data/train/<c0|c1|c2>/img<i>.jpg: 48 Fashion-MNIST test images as JPEG,
 * class i % 3. */
static const char *make_tree(const char *name)
{
    const char *root = cl_test_path(name);
    char p[1200];
    mkdir(root, 0755);
    snprintf(p, sizeof p, "%s/train", root);
    mkdir(p, 0755);
    for (int k = 0; k < 3; k++) {
        snprintf(p, sizeof p, "%s/train/c%d", root, k);
        mkdir(p, 0755);
    }
    cl_dataset_spec spec = cl_dataset_spec_default();
    cl_dataset *ds = NULL;
    spec.format = "fashion_mnist";
    spec.usage = CL_USAGE_TEST;
    if (cl_dataset_open(&ds, &spec) != CL_OK) {
        cl_test_fail(__FILE__, __LINE__, "fashion-mnist: %s", cl_last_error());
        return NULL;
    }
    cl_image img;
    memset(&img, 0, sizeof img);
    for (int i = 0; i < 48; i++) {
        int32_t label;
        if (cl_dataset_get(ds, i, 0, &img, &label) != CL_OK)
            break;
        snprintf(p, sizeof p, "%s/train/c%d/img%02d.jpg", root, i % 3, i);
        if (write_gray_jpeg(p, img.data, img.w, img.h) != 0)
            cl_test_fail(__FILE__, __LINE__, "cannot write %s", p);
    }
    cl_image_free(&img);
    cl_dataset_close(ds);
    return root;
}

#define FOLDER_RUN                                                             \
    "train --dataset imagefolder --model resnet18 --stem imagenet "            \
    "--image_size 32 --in_channels 1 --random_crop_padding 0 --hflip 0 "       \
    "--num_parallel_workers 1 --mean 0.286 --std 0.353 --seed 7 "              \
    "--batch_size 8 --epoch_size 3 --val_interval 0 --ckpt_save_epochs 0 "     \
    "--per_print_times 1 "

/* Starts a run on the tree, breaks two images once it has taken two
 * steps (one truncated to 100 bytes, one removed) and returns the exit
 * status; the log is in cl_test_out. */
static int run_and_break_images(const char *root, const char *policy,
                                const char *out, char trunc[1200],
                                char gone[1200])
{
    char args[2048];
    const char *log = cl_test_path(policy);
    snprintf(args, sizeof args,
             FOLDER_RUN "--data_dir %s --on_bad_image %s --ckpt_save_dir %s",
             root, policy, out);
    int pid = cl_test_classic_start(args, log, NULL);
    if (pid <= 0)
        return -1;
    int started = fault_wait_steps(out, 2, pid, 300);
    snprintf(trunc, 1200, "%s/train/c1/img04.jpg", root);
    snprintf(gone, 1200, "%s/train/c2/img05.jpg", root);
    if (started) {
        if (truncate(trunc, 100) != 0 || unlink(gone) != 0)
            cl_test_fail(__FILE__, __LINE__, "cannot break the images: %s",
                         strerror(errno));
    } else {
        kill(pid, SIGKILL);
        cl_test_fail(__FILE__, __LINE__, "the run did not start");
    }
    int st = cl_test_wait(pid, 600);
    cl_test_slurp(log);
    if (st == -1 || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

CL_TEST(unreadable_image_mid_run_stops_naming_the_file)
{
    /* on_bad_image: fail (the default): the run stops in a later epoch,
     * when the loader reaches a broken file, and the message names it. */
    const char *root = make_tree("tree_fail");
    REQUIRE(root != NULL);
    char trunc[1200], gone[1200];
    int rc = run_and_break_images(root, "fail", cl_test_path("run_fail"), trunc,
                                  gone);
    CHECK(rc == 1);
    CHECK(strstr(cl_test_out, "classic: train") != NULL);
    int named = strstr(cl_test_out, "c1/img04.jpg") != NULL ||
                strstr(cl_test_out, "c2/img05.jpg") != NULL;
    CHECK(named);
    if (rc != 1 || !named)
        fprintf(stderr, "log:\n%s\n", cl_test_out);
    /* It stopped before the end: fewer than the 18 steps were logged. */
    int n = fault_logged_steps(cl_test_path("run_fail"));
    CHECK(n >= 2 && n < 18);
}

CL_TEST(unreadable_image_mid_run_is_skipped_by_policy)
{
    /* on_bad_image: skip: the run completes every step, the broken images
     * are dropped from their batches and reported. */
    const char *root = make_tree("tree_skip");
    REQUIRE(root != NULL);
    char trunc[1200], gone[1200];
    int rc = run_and_break_images(root, "skip", cl_test_path("run_skip"), trunc,
                                  gone);
    CHECK(rc == 0);
    if (rc != 0)
        fprintf(stderr, "log:\n%s\n", cl_test_out);
    CHECK(fault_logged_steps(cl_test_path("run_skip")) == 18);
    CHECK(strstr(cl_test_out, "skipped") != NULL);
    int named = strstr(cl_test_out, "c1/img04.jpg") != NULL ||
                strstr(cl_test_out, "c2/img05.jpg") != NULL;
    CHECK(named);
}

/* A model file whose training state beside it is of another step (a crash
 * between the two atomic writes, then a later run rewriting one of them)
 * is refused on resume instead of mixing two steps. */
CL_TEST(resume_refuses_a_model_and_state_of_different_steps)
{
    char args[2048], a[1200], b[1200], cmd[2600];
    const char *dir = cl_test_path("mix");
    snprintf(args, sizeof args,
             FAULT_RUN "--limit_train 32 --epoch_size 1 --warmup_epochs 0 "
                       "--ckpt_save_interval "
                       "2 --keep_checkpoint_max 0 --ckpt_save_dir %s",
             dir);
    REQUIRE(run_ok(args));
    snprintf(a, sizeof a, "%s/resnet18-e1-s2.state.safetensors", dir);
    snprintf(b, sizeof b, "%s/resnet18-e1-s4.state.safetensors", dir);
    snprintf(cmd, sizeof cmd, "cp %s %s", a, b);
    REQUIRE(cl_test_run(cmd) == 0);
    snprintf(args, sizeof args,
             FAULT_RUN "--limit_train 32 --epoch_size 1 --warmup_epochs 0 "
                       "--ckpt_save_dir %s "
                       "--resume %s/resnet18-e1-s4.safetensors",
             dir, dir);
    CHECK(cl_test_classic(args) == 1);
    CHECK(strstr(cl_test_out, "resnet18-e1-s4.safetensors is from step 4 but "
                              "its training state") != NULL);
    CHECK(strstr(cl_test_out, "from step 2 (a write was interrupted)") != NULL);
}
