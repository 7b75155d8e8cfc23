/* What a new user hits training from the shell: a root of train/ and val/
 * read as `classic data info` reads it, max_pixels as a key, and a folder
 * of one class refused.
 * ctest-labels: cli */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "test_data_fixtures.h"

/* The tiny run's options: resnet18 at 32 px, batch 4, one epoch, images
 * decoded in the training thread, into <test dir>/<run>. */
static int train(const char *run, const char *extra)
{
    char args[4000];
    snprintf(args, sizeof args,
             "train --dataset imagefolder --data_dir %s --model resnet18 "
             "--image_size 32 --batch_size 4 --epoch_size 1 "
             "--num_parallel_workers 0 --seed 3 --ckpt_save_dir %s %s",
             cl_test_path("folder"), cl_test_path(run), extra);
    return cl_test_classic(args);
}

CL_TEST(a_root_of_train_and_val_trains_as_data_info_reads_it)
{
    /* val/ beside train/ and no --val_split: the default "test" is not a
     * folder, and the root is read as `data info --usage test` reads it. */
    REQUIRE(fx_image_split(cl_test_path("folder"), "train", 8) == 0);
    REQUIRE(fx_image_split(cl_test_path("folder"), "val", 4) == 0);
    char args[2000];
    snprintf(args, sizeof args, "data info %s --usage test",
             cl_test_path("folder"));
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "split     val of") != NULL);
    REQUIRE(train("run", "--log_level info") == 0);
    CHECK(strstr(cl_test_out, "not a folder") == NULL);
    CHECK(strstr(cl_test_out, "reading its val/") != NULL);
    CHECK(strstr(cl_test_out, "(4 samples") != NULL);
    /* The report names the split read. */
    const char *html = cl_test_slurp(cl_test_path("run/report.html"));
    CHECK(html && strstr(html, " split val") != NULL);
    /* A split named that is no folder and no split either still says so. */
    CHECK(train("run2", "--val_split holdout --log_level error") != 0);
    CHECK(strstr(cl_test_out, "holdout: not a folder") != NULL);
}

CL_TEST(max_pixels_is_a_key_of_the_recipe)
{
    REQUIRE(cl_test_classic("train --help") == 0);
    CHECK(strstr(cl_test_out, "  max_pixels ") != NULL);
    CHECK(strstr(cl_test_out, "67108864") != NULL);
    /* The fixtures are 24x20 = 480 pixels: a limit below refuses them in
     * the sentence that names the key, one at their size trains. */
    REQUIRE(fx_image_split(cl_test_path("folder"), "train", 4) == 0);
    CHECK(train("small", "--val_split '' --max_pixels 100 --log_level error") !=
          0);
    CHECK(strstr(cl_test_out, "above the limit of 100 (max_pixels)") != NULL);
    CHECK(train("fits", "--val_split '' --max_pixels 480 --log_level error") ==
          0);
}

CL_TEST(a_folder_of_one_class_is_refused)
{
    char p[1400];
    snprintf(p, sizeof p, "%s", cl_test_path("folder"));
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/train", cl_test_path("folder"));
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/train/cats", cl_test_path("folder"));
    mkdir(p, 0755);
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/train/cats/%d.jpg", cl_test_path("folder"),
                 i);
        REQUIRE(fx_jpeg(p, 20, 24, 3, 90) == 0);
    }
    CHECK(train("run", "--val_split '' --log_level error") == 1);
    CHECK(strstr(cl_test_out, "holds 1 class ('cats')") != NULL);
    CHECK(strstr(cl_test_out, "at least 2") != NULL);
    struct stat st;
    CHECK(stat(cl_test_path("run/resnet18-last.safetensors"), &st) != 0);
    /* num_classes 1 says the same of the key. */
    REQUIRE(fx_image_split(cl_test_path("folder"), "two", 4) == 0);
    CHECK(train("run1", "--train_split two --val_split '' --num_classes 1 "
                        "--log_level error") == 1);
    CHECK(strstr(cl_test_out, "num_classes 1: a classifier needs at least 2") !=
          NULL);
}
