/* A run's folder as a user drives it through the `classic train` CLI on
 * Fashion-MNIST: a fresh run refuses a folder that holds another run
 * unless told to overwrite it; a warm-up longer than the run is refused
 * before any data is read.
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
