/* Mixed precision end to end through `classic train`: a short
 * Fashion-MNIST training at amp_level O2 (bf16) learns as well as the same
 * run at O0 (f32), and its checkpoint is plain f32 that an f32 model
 * (`classic eval`) reads and scores the same.  The per-step numerics of O1
 * and O2 are in tests/test_onednn.c; this file holds the slow runs.
 * ctest-labels: onednn slow */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/onednn_info.h"
#include "core/error.h"
#include "harness.h"
#include "io/json.h"
#include "io/safetensors.h"

/* resnet18 with the cifar_pool stem at Fashion-MNIST's 28x28 (gray, no
 * augmentation), 8192 training images for 3 epochs of 128 steps of 64,
 * cosine decay from lr 0.02 to 0 (so the last weights and BN statistics
 * settle), evaluation on the whole 10,000-image test set after the last
 * epoch only (a 0.5-point margin is 50 images), one checkpoint at the end.
 * Each level trains from two seeds and the means are compared: a single
 * pair of runs measures the path more than the precision.  Measured while
 * choosing this: at lr 0.05, O0 ended at 88.33/88.45/88.66% over three
 * seeds and O2 at 87.30/88.34/88.41% (one seed's pair 1.0 point apart);
 * at lr 0.02 the pairs were 0.05 and 0.13 points apart. */
#define RUN                                                                    \
    "train --model resnet18 --stem cifar_pool --image_size 28 "                \
    "--in_channels 1 --random_crop_padding 0 --hflip 0 --label_smoothing 0 "   \
    "--num_parallel_workers 1 --mean 0.286 --std 0.353 "                       \
    "--scheduler cosine_decay --warmup_epochs 0 --lr 0.02 --momentum 0.9 "     \
    "--batch_size 64 --limit_train 8192 --epoch_size 3 --val_interval 3 "      \
    "--ckpt_save_epochs 0 --per_print_times 64 "

/* The val_top1 of the last "eval" line of run_dir/metrics.jsonl, or NAN. */
static double last_top1(const char *run_dir)
{
    char path[1024];
    double top1[64];
    int64_t step[64];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    int n = cl_test_read_metric(path, "eval", "val_top1", top1, step, 64);
    return n > 0 ? top1[n - 1] : NAN;
}

/* Number of floating-point tensors in a checkpoint that are not f32 (the
 * integer num_batches_tracked buffers do not count), or -1 if it cannot be
 * read; *count gets the number of f32 tensors. */
static int non_f32_tensors(const char *path, int *count)
{
    cl_st_file *f = NULL;
    *count = 0;
    if (cl_st_open(&f, path) != CL_OK)
        return -1;
    int bad = 0;
    for (size_t i = 0; i < cl_st_count(f); i++) {
        cl_st_dtype t;
        cl_shape s;
        cl_st_info(f, i, &t, &s);
        bad += t == CL_ST_BF16 || t == CL_ST_F16 || t == CL_ST_F64 ||
               t == CL_ST_F8_E5M2 || t == CL_ST_F8_E4M3;
        *count += t == CL_ST_F32;
    }
    cl_st_close(f);
    return bad;
}

/* "top-1 P%" of `classic eval`'s summary line, or NAN. */
static double eval_top1(void)
{
    const char *p = strstr(cl_test_out, " samples, loss ");
    double loss, top1;
    if (!p || sscanf(p, " samples, loss %lf, top-1 %lf%%", &loss, &top1) != 2)
        return NAN;
    return top1 / 100.0;
}

/* The margin: O2's mean final top-1 within 0.5 points of O0's (the
 * issue's bound) over the same 384 steps from the same two seeds.
 * Measured: see docs/amp.md. */
CL_TEST(o2_learns_like_o0)
{
    static const int seeds[2] = {7, 8};
    char args[2048];
    const char *dir[2][2] = {{cl_test_path("o0s7"), cl_test_path("o0s8")},
                             {cl_test_path("o2s7"), cl_test_path("o2s8")}};
    double top1[2][2], mean[2];
    /* Below AVX-512 oneDNN has no bf16 convolutions: O2 must stop before
     * the first step with the sentence saying so, and there is nothing to
     * compare. */
    if (!cl_dnnl_bf16_supported()) {
        snprintf(args, sizeof args, RUN "--amp O2 --seed 7 --ckpt_save_dir %s",
                 dir[1][0]);
        CHECK(cl_test_classic(args) != 0);
        CHECK(strstr(cl_test_out, "needs bf16 convolutions") != NULL);
        CHECK(strstr(cl_test_out, "use amp_level O0") != NULL);
        fprintf(stderr, "oneDNN runs at %s here: checked the refusal\n",
                cl_dnnl_isa_name());
        return;
    }
    for (int k = 0; k < 2; k++) {
        for (int s = 0; s < 2; s++) {
            snprintf(args, sizeof args,
                     RUN "--amp O%d --seed %d --ckpt_save_dir %s", 2 * k,
                     seeds[s], dir[k][s]);
            REQUIRE(cl_test_classic(args) == 0);
            /* The banner says which precision trains. */
            CHECK(strstr(cl_test_out, k ? "amp_level O2 (bf16 activations"
                                        : "amp_level O0 (f32)") != NULL);
            top1[k][s] = last_top1(dir[k][s]);
            REQUIRE(isfinite(top1[k][s]));
        }
        mean[k] = (top1[k][0] + top1[k][1]) / 2;
    }
    fprintf(stderr,
            "top-1 after 384 steps: O0 %.2f%% %.2f%% (mean %.2f%%), "
            "O2 %.2f%% %.2f%% (mean %.2f%%)\n",
            100 * top1[0][0], 100 * top1[0][1], 100 * mean[0], 100 * top1[1][0],
            100 * top1[1][1], 100 * mean[1]);
    /* It learned at all (10 classes: chance is 10%). */
    CHECK(mean[0] > 0.6);
    CHECK(fabs(mean[1] - mean[0]) <= 0.005);

    /* The O2 checkpoint is f32, and an f32 model scores it as the bf16
     * evaluation during training did. */
    char ck[1024];
    snprintf(ck, sizeof ck, "%s/resnet18-last.safetensors", dir[1][0]);
    int n = 0;
    CHECK(non_f32_tensors(ck, &n) == 0);
    CHECK(n > 100);
    snprintf(args, sizeof args, "eval --checkpoint %s", ck);
    REQUIRE(cl_test_classic(args) == 0);
    double f32 = eval_top1();
    fprintf(stderr, "O2 checkpoint evaluated in f32: top-1 %.2f%%\n",
            100 * f32);
    CHECK(fabs(f32 - top1[1][0]) <= 0.005);
}
