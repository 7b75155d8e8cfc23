/* The shipped recipes start and run as written: the seeds' CIFAR-10
 * recipe on a tiny dataset in the CIFAR-10 binary format, the ImageNet
 * recipe on a tiny ImageFolder of JPEGs named as ImageNet's synsets.  Only
 * data_dir, the epoch count and the output folder are overridden; the
 * resolved config the run writes is checked to be the recipe's.
 * ctest-labels: slow train */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "test_data_fixtures.h"

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, needle)); p++)
        n++;
    return n;
}

/* Runs `classic train -c configs/<recipe> --data_dir data ...` into run;
 * a failure prints the command and its output. */
static int train_recipe(const char *recipe, const char *data, const char *run,
                        const char *extra)
{
    char args[4096];
    snprintf(args, sizeof args,
             "train -c %s/configs/%s --data_dir %s --epoch_size 1 "
             "--ckpt_save_dir %s --per_print_times 1 %s",
             CL_SOURCE_DIR, recipe, data, run, extra);
    return cl_test_classic(args);
}

CL_TEST(cifar10_seed_recipe_on_cifar_format_data)
{
    char data[1024], run[1024], p[1200];
    snprintf(data, sizeof data, "%s/c10", cl_test_tmpdir());
    snprintf(run, sizeof run, "%s/run_c10", cl_test_tmpdir());
    /* 5 x 16 training records (2 steps of the recipe's batch 32 with the
     * remainder dropped) and 16 test records. */
    fx_cifar10(data, 16, 16);
    snprintf(p, sizeof p, "%s/cifar-10-batches-bin", data);
    REQUIRE(train_recipe("resnet50_cifar10_seed.yaml", p, run,
                         "--ckpt_save_interval 1") == 0);

    snprintf(p, sizeof p, "%s/config.yaml", run);
    const char *cfg = cl_test_slurp(p);
    REQUIRE(cfg != NULL);
    CHECK(strstr(cfg, "batch_size: 32") != NULL);
    CHECK(strstr(cfg, "stem: imagenet") != NULL);
    CHECK(strstr(cfg, "lr: 0.001") != NULL);
    CHECK(strstr(cfg, "scheduler: constant") != NULL);

    snprintf(p, sizeof p, "%s/metrics.jsonl", run);
    const char *m = cl_test_slurp(p);
    REQUIRE(m != NULL);
    CHECK(count(m, "\"kind\":\"train\"") == 2);
    CHECK(count(m, "\"kind\":\"eval\"") == 1);
    CHECK(strstr(m, "\"val_samples\":16") != NULL);
    CHECK(strstr(m, "\"lr\":0.001") != NULL);
    /* ckpt_save_interval 1: a step checkpoint after each step. */
    struct stat st;
    snprintf(p, sizeof p, "%s/resnet50-e1-s1.safetensors", run);
    CHECK(stat(p, &st) == 0);
    snprintf(p, sizeof p, "%s/resnet50-last.safetensors", run);
    CHECK(stat(p, &st) == 0);
}

/* Writes n JPEGs of varied sizes into root/<split>/<synset>/. */
static void write_folder(const char *root, const char *split, int n)
{
    static const char *const syn[] = {"n01440764", "n01443537", "n01484850"};
    char p[1400];
    snprintf(p, sizeof p, "%s/%s", root, split);
    mkdir(root, 0755);
    mkdir(p, 0755);
    for (int c = 0; c < 3; c++) {
        snprintf(p, sizeof p, "%s/%s/%s", root, split, syn[c]);
        mkdir(p, 0755);
    }
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s/%s/%s_%d.JPEG", root, split, syn[i % 3],
                 syn[i % 3], i);
        fx_jpeg(p, 48 + 8 * (i % 4), 64 - 4 * (i % 5), 3, 90);
    }
}

CL_TEST(imagenet_recipe_on_imagefolder_data)
{
    char data[1024], run[1024], p[1200];
    snprintf(data, sizeof data, "%s/inet", cl_test_tmpdir());
    snprintf(run, sizeof run, "%s/run_inet", cl_test_tmpdir());
    write_folder(data, "train", 32); /* one step of batch 32 */
    write_folder(data, "val", 7);
    REQUIRE(train_recipe("resnet50_imagenet.yaml", data, run, "") == 0);

    snprintf(p, sizeof p, "%s/config.yaml", run);
    const char *cfg = cl_test_slurp(p);
    REQUIRE(cfg != NULL);
    CHECK(strstr(cfg, "image_size: 224") != NULL);
    CHECK(strstr(cfg, "random_resized_crop: true") != NULL);
    CHECK(strstr(cfg, "num_classes: 1000") != NULL);

    snprintf(p, sizeof p, "%s/metrics.jsonl", run);
    const char *m = cl_test_slurp(p);
    REQUIRE(m != NULL);
    CHECK(count(m, "\"kind\":\"train\"") == 1);
    CHECK(strstr(m, "\"val_samples\":7") != NULL);
    snprintf(p, sizeof p, "%s/resnet50-e1.safetensors", run);
    struct stat st;
    CHECK(stat(p, &st) == 0);
}
