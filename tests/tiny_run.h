/* A tiny trained model for the tests that run one through the commands: a
 * one-epoch resnet18 at 32 px on an ImageFolder of 16 training and 6
 * validation JPEGs (classes a and b), trained by `classic train` into the
 * test's folder. */
#ifndef CL_TESTS_TINY_RUN_H
#define CL_TESTS_TINY_RUN_H

#include <stdio.h>

#include "harness.h"
#include "test_data_fixtures.h"

/* Trains it (folder/ and run/ in the test's folder) and returns its model
 * file's path relative to that folder ("run/resnet18-last.safetensors";
 * cl_test_path() makes it absolute), or NULL. */
static inline const char *tiny_run(void)
{
    char root[1024], args[4000];
    snprintf(root, sizeof root, "%s", cl_test_path("folder"));
    if (fx_image_split(root, "train", 16) != 0 ||
        fx_image_split(root, "val", 6) != 0)
        return NULL;
    snprintf(args, sizeof args,
             "train --dataset imagefolder --data_dir %s --model resnet18 "
             "--image_size 32 --batch_size 4 --epoch_size 1 --val_split val "
             "--num_parallel_workers 0 --seed 3 --ckpt_save_dir %s "
             "--log_level error",
             root, cl_test_path("run"));
    if (cl_test_classic(args) != 0)
        return NULL;
    return "run/resnet18-last.safetensors";
}

#endif
