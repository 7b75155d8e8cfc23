/* A training config as a user gives it through the `classic train` CLI:
 * a warm-up longer than the run is refused before any data is read.
 * ctest-labels: train */
#include <stdio.h>
#include <string.h>

#include "harness.h"

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
