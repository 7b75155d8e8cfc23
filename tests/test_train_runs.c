/* A run's folder and its resume, as a user drives them through the
 * `classic train` CLI on Fashion-MNIST: a fresh run refuses a folder that
 * holds another run unless told to overwrite it; resume restores the
 * checkpoint's config, names what the command line changes and refuses
 * what cannot change mid-run; its summary counts the steps it trained and
 * says when nothing was left; a schedule stretched by epoch_size and a
 * warm-up longer than the run are refused before any data is read.
 * ctest-labels: train */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* resnet18 with the ImageNet stem at 32x32, gray input, no augmentation:
 * 64 images in batches of 16 are 4 steps an epoch. */
#define QUICK                                                                  \
    "--model resnet18 --stem imagenet --image_size 32 --in_channels 1 "        \
    "--random_crop_padding 0 --hflip 0 --label_smoothing 0 "                   \
    "--num_parallel_workers 2 --mean 0.286 --std 0.353 --seed 7 "              \
    "--limit_train 64 --batch_size 16 --val_interval 0 --per_print_times 1 "

/* 2 epochs x 4 steps, cosine from 0.05 without warm-up, a checkpoint every
 * 3 steps (step 3 is inside epoch 1) and one at each epoch's end. */
#define BASE                                                                   \
    "train " QUICK "--epoch_size 2 --lr 0.05 --warmup_epochs 0 "               \
    "--ckpt_save_interval 3 --keep_checkpoint_max 0 "

/* Trains BASE into dir; 0 when it ran. */
static int base_run(const char *dir)
{
    char args[2048];
    snprintf(args, sizeof args, BASE "--ckpt_save_dir %s", dir);
    return cl_test_classic(args);
}

CL_TEST(fresh_run_refuses_a_folder_holding_a_run)
{
    char args[2048], p[1024];
    const char *dir = cl_test_path("run");
    REQUIRE(base_run(dir) == 0);
    snprintf(p, sizeof p, "%s/config.yaml", dir);
    char *cfg = cl_test_read_file(p, NULL);
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    char *met = cl_test_read_file(p, NULL);
    REQUIRE(cfg && met);

    /* Another model into the same folder: refused before it trains,
     * naming the folder and the three ways out, the record untouched. */
    snprintf(args, sizeof args,
             "train " QUICK "--model resnet34 --epoch_size 1 "
             "--ckpt_save_dir %s",
             dir);
    CHECK(cl_test_classic(args) == 1);
    CHECK(strstr(cl_test_out, dir) != NULL);
    CHECK(strstr(cl_test_out, "already holds a run") != NULL);
    CHECK(strstr(cl_test_out, "--resume ") != NULL);
    CHECK(strstr(cl_test_out, "resnet18-last.safetensors") != NULL);
    CHECK(strstr(cl_test_out, "--ckpt_save_dir") != NULL);
    CHECK(strstr(cl_test_out, "--overwrite true") != NULL);
    CHECK(strstr(cl_test_out, "epoch 1/1") == NULL); /* nothing trained */
    snprintf(p, sizeof p, "%s/config.yaml", dir);
    char *cfg2 = cl_test_read_file(p, NULL);
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    char *met2 = cl_test_read_file(p, NULL);
    CHECK(cfg2 && strcmp(cfg, cfg2) == 0);
    CHECK(met2 && strcmp(met, met2) == 0);
    snprintf(p, sizeof p, "%s/resnet34-last.safetensors", dir);
    CHECK(access(p, F_OK) != 0);

    /* --overwrite true replaces the run: its record and checkpoints go,
     * so the folder holds the new run's files only. */
    snprintf(args, sizeof args,
             "train " QUICK "--epoch_size 1 --ckpt_save_epochs 0 "
             "--overwrite true --ckpt_save_dir %s",
             dir);
    CHECK(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "overwrite: ") != NULL);
    snprintf(p, sizeof p, "%s/resnet18-e1-s3.safetensors", dir);
    CHECK(access(p, F_OK) != 0);
    snprintf(p, sizeof p, "%s/resnet18-e2.state.safetensors", dir);
    CHECK(access(p, F_OK) != 0);
    snprintf(p, sizeof p, "%s/resnet18-last.safetensors", dir);
    CHECK(access(p, F_OK) == 0);
    double loss[16];
    int64_t step[16];
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    CHECK(cl_test_read_losses(p, loss, step, 16) == 4);
    free(cfg);
    free(met);
    free(cfg2);
    free(met2);
}

CL_TEST(resume_restores_the_checkpoint_config)
{
    char args[2048], ck[1024], p[1024];
    const char *dir = cl_test_path("run");
    REQUIRE(base_run(dir) == 0);
    snprintf(ck, sizeof ck, "%s/resnet18-e1-s3.safetensors", dir);

    /* --resume alone: the checkpoint's own config, so the run goes on in
     * its folder with the losses of the uninterrupted run. */
    snprintf(args, sizeof args, "train --resume %s", ck);
    CHECK(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "has shape") == NULL);
    CHECK(strstr(cl_test_out, "resumed from") != NULL);
    double la[32];
    int64_t sa[32];
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    int n = cl_test_read_losses(p, la, sa, 32);
    CHECK(n == 13);
    for (int i = 8; i < n; i++)
        CHECK(sa[i] == sa[i - 5] && la[i] == la[i - 5]);

    /* A key given on the command line overrides it and is named. */
    snprintf(args, sizeof args,
             "train --resume %s --min_lr 0.001 --ckpt_save_dir %s", ck,
             cl_test_path("other"));
    CHECK(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "min_lr changes from 1e-06 to 0.001") != NULL);

    /* What cannot change mid-run: one sentence, before any shape error. */
    static const char *const fixed[][3] = {
        {"--model resnet34", "model", "resnet34"},
        {"--stem cifar", "stem", "cifar"},
        {"--num_classes 5", "num_classes", "5"},
        {"--in_channels 3", "in_channels", "3"}};
    for (int k = 0; k < 4; k++) {
        snprintf(args, sizeof args, "train --resume %s %s --ckpt_save_dir %s",
                 ck, fixed[k][0], cl_test_path("other"));
        CHECK(cl_test_classic(args) == 1);
        CHECK(strstr(cl_test_out, "has shape") == NULL);
        CHECK(strstr(cl_test_out, fixed[k][1]) != NULL);
        CHECK(strstr(cl_test_out, fixed[k][2]) != NULL);
        CHECK(strstr(cl_test_out, "cannot change") != NULL);
        CHECK(strstr(cl_test_out, "--pretrained") != NULL);
    }
}

CL_TEST(resume_counts_its_own_steps_and_knows_a_finished_run)
{
    char args[2048];
    const char *dir = cl_test_path("run");
    REQUIRE(base_run(dir) == 0);
    CHECK(strstr(cl_test_out, "trained 8 steps") != NULL);

    /* From step 3 of 8: this process trains 5. */
    snprintf(args, sizeof args,
             BASE "--ckpt_save_dir %s --resume %s/resnet18-e1-s3.safetensors",
             cl_test_path("rest"), dir);
    CHECK(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "trained 5 steps") != NULL);

    /* From the end: nothing to train, and it says so. */
    snprintf(args, sizeof args,
             BASE "--ckpt_save_dir %s --resume %s/resnet18-last.safetensors",
             dir, dir);
    CHECK(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "trained ") == NULL);
    CHECK(strstr(cl_test_out, "the run is complete") != NULL);
    CHECK(strstr(cl_test_out, "resnet18-last.safetensors") != NULL);
}

CL_TEST(resume_refuses_a_cosine_stretched_by_epoch_size)
{
    char args[2048];
    const char *dir = cl_test_path("run");
    REQUIRE(base_run(dir) == 0);
    /* Raising epoch_size would lay the cosine over 3 epochs: refused in
     * one sentence naming the lr jump and what keeps the schedule. */
    snprintf(args, sizeof args,
             BASE "--resume %s/resnet18-e1-s3.safetensors --epoch_size 3 "
                  "--ckpt_save_dir %s",
             dir, cl_test_path("longer"));
    CHECK(cl_test_classic(args) == 1);
    CHECK(strstr(cl_test_out, "epoch_size was 2 and is 3") != NULL);
    CHECK(strstr(cl_test_out, "--decay_epochs 2") != NULL);
    CHECK(strstr(cl_test_out, "epoch 1/3") == NULL);
    /* With the cosine's length kept, the run goes on to epoch 3 on the
     * first run's lrs, then at min_lr. */
    snprintf(args, sizeof args,
             BASE "--resume %s/resnet18-e1-s3.safetensors --epoch_size 3 "
                  "--decay_epochs 2 --ckpt_save_dir %s",
             dir, cl_test_path("longer"));
    CHECK(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "trained 9 steps") != NULL);
    double ra[16], rb[16];
    int64_t sa[16], sb[16];
    char p[1024];
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    REQUIRE(cl_test_read_metric(p, "train", "lr", ra, sa, 16) == 8);
    snprintf(p, sizeof p, "%s/metrics.jsonl", cl_test_path("longer"));
    REQUIRE(cl_test_read_metric(p, "train", "lr", rb, sb, 16) == 9);
    for (int i = 0; i < 5; i++)
        CHECK(sb[i] == sa[i + 3] && rb[i] == ra[i + 3]);
    for (int i = 5; i < 9; i++)
        CHECK(rb[i] == rb[4] || rb[i] < 1e-5);
}

CL_TEST(warmup_longer_than_the_run_is_refused_when_read)
{
    /* The Swin recipe warms up for 2 epochs: with --epoch_size 1 the
     * config is refused in the user's key names before the data is read
     * (the data folder does not even exist). */
    char args[2048];
    snprintf(args, sizeof args,
             "train -c %s/configs/swin_micro_fashion_mnist.yaml --epoch_size "
             "1 --data_dir %s --ckpt_save_dir %s",
             CL_SOURCE_DIR, cl_test_path("nodata"), cl_test_path("run"));
    CHECK(cl_test_classic(args) == 1);
    CHECK(strstr(cl_test_out, "warmup_epochs 2") != NULL);
    CHECK(strstr(cl_test_out, "epoch_size 1") != NULL);
    CHECK(strstr(cl_test_out, "lr.warmup_epochs") == NULL);
    CHECK(strstr(cl_test_out, "nodata") == NULL);
    /* A warm-up as long as the run leaves the cosine nothing. */
    snprintf(args, sizeof args,
             "train -c %s/configs/swin_micro_fashion_mnist.yaml --epoch_size "
             "2 --data_dir %s --ckpt_save_dir %s",
             CL_SOURCE_DIR, cl_test_path("nodata"), cl_test_path("run"));
    CHECK(cl_test_classic(args) == 1);
    CHECK(strstr(cl_test_out, "warmup_epochs 2") != NULL);
    CHECK(strstr(cl_test_out, "epoch_size 2") != NULL);
    CHECK(strstr(cl_test_out, "nodata") == NULL);
}
