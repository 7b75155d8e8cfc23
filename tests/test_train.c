/* The training engine end to end through the `classic` CLI on the real
 * Fashion-MNIST: overfit smoke test, subset accuracy, resume equivalence,
 * fine-tuning with a new head, predict, config and NaN errors; and the
 * checkpoint module directly.
 * ctest-labels: train slow */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data.h"
#include "harness.h"
#include "io/checkpoint.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "models/resnet.h"
#include "test_data_fixtures.h"
#include "train/evaluate.h"
#include "train/trainer.h"

/* A small, fast configuration: resnet18 with the ImageNet stem at 32x32
 * (the 28x28 images resized), gray input, no augmentation. */
#define QUICK                                                                  \
    "--model resnet18 --stem imagenet --image_size 32 --in_channels 1 "        \
    "--random_crop_padding 0 --hflip 0 --label_smoothing 0 "                   \
    "--num_parallel_workers 2 --mean 0.286 --std 0.353 --seed 7 "

CL_TEST(overfit_smoke)
{
    /* The seeds' smoke test: 128 images memorised in 120 steps.  Cosine
     * decay, not a constant lr: at a constant 0.02 the batch-32 loss swings
     * by 2x from step to step (BN over 32 values at layer4's 1x1), and the
     * last losses then depend on the order of float sums (seeds 7/8/9
     * ended at 0.03/0.14/0.23 with oneDNN's backward-weights, 0.29/0.29/
     * 0.35 with the weight-gradient matmul, whose gradients agree to 1e-5);
     * decayed, the matmul build ends at 0.007/0.003/0.027 and evaluates
     * the 128 images at 100%. */
    char args[2048];
    snprintf(args, sizeof args,
             "train " QUICK "--limit_train 128 --batch_size 32 --epoch_size "
             "30 --lr 0.02 --scheduler cosine_decay --warmup_epochs 0 "
             "--val_interval 0 --ckpt_save_epochs 0 --per_print_times 4 "
             "--ckpt_save_dir %s",
             cl_test_path("overfit"));
    REQUIRE(cl_test_classic(args) == 0);
    double loss[64];
    int64_t step[64];
    int n = cl_test_read_losses(cl_test_path("overfit/metrics.jsonl"), loss,
                                step, 64);
    REQUIRE(n == 30);
    CHECK(loss[0] > 1.0);
    /* Mean of the last five logged losses: the set is memorised. */
    double tail = 0;
    for (int i = n - 5; i < n; i++)
        tail += loss[i];
    CHECK(tail / 5 < 0.15);
    /* And eval with the running BN statistics agrees (same images). */
    snprintf(args, sizeof args,
             "eval --checkpoint %s --split train --limit_train 128 --batch 32",
             cl_test_path("overfit/resnet18-last.safetensors"));
    REQUIRE(cl_test_classic(args) == 0);
    const char *t = strstr(cl_test_out, "top-1 ");
    REQUIRE(t != NULL);
    CHECK(atof(t + 6) >= 95.0);
}

CL_TEST(fashion_mnist_subset_accuracy)
{
    /* Real data end to end: 4096 training images, 3 epochs; the held-out
     * 1000 test images must reach a stated accuracy (75%; chance is 10%). */
    char args[2048];
    snprintf(args, sizeof args,
             "train " QUICK "--limit_train 4096 --limit_val 1000 --batch_size "
             "64 --epoch_size 3 --lr 0.05 --warmup_epochs 0 --min_lr 0 "
             "--val_interval 3 --ckpt_save_epochs 0 --per_print_times 16 "
             "--ckpt_save_dir %s",
             cl_test_path("subset"));
    REQUIRE(cl_test_classic(args) == 0);
    const char *t = strstr(cl_test_out, "validation: top-1 ");
    REQUIRE(t != NULL);
    double top1 = atof(t + strlen("validation: top-1 "));
    fprintf(stderr, "fashion-mnist subset top-1: %.2f%%\n", top1);
    CHECK(top1 >= 75.0);
    /* classic eval on the written checkpoint gives the same number. */
    snprintf(args, sizeof args, "eval --checkpoint %s --limit_val 1000",
             cl_test_path("subset/resnet18-last.safetensors"));
    REQUIRE(cl_test_classic(args) == 0);
    t = strstr(cl_test_out, "top-1 ");
    REQUIRE(t != NULL);
    CHECK_NEAR(atof(t + 6), top1, 0.011);
}

/* 2 epochs x 4 steps, a checkpoint at step 3 (inside epoch 1); the run
 * resumed from it must log exactly the losses of the uninterrupted run
 * from step 4 on (data order, augmentation, optimizer state and BN
 * statistics all restored; with autotune, the measured conv paths too). */
static void resume_case(int autotune)
{
    char args[2048], common[1024];
    snprintf(common, sizeof common,
             "train " QUICK "--limit_train 64 --batch_size 16 --epoch_size 2 "
             "--lr 0.05 --warmup_epochs 1 --val_interval 0 "
             "--ckpt_save_epochs 0 --per_print_times 1 --hflip 0.5 "
             "--random_crop_padding 0 --ckpt_save_interval 3 "
             "--keep_checkpoint_max 0 --autotune %s",
             autotune ? "true" : "false");
    snprintf(args, sizeof args, "%s --ckpt_save_dir %s", common,
             cl_test_path("full"));
    REQUIRE(cl_test_classic(args) == 0);
    CHECK((strstr(cl_test_out, "autotune: measured two ways of") != NULL) ==
          autotune);
    snprintf(args, sizeof args, "%s --ckpt_save_dir %s --resume %s", common,
             cl_test_path("resumed"),
             cl_test_path("full/resnet18-e1-s3.safetensors"));
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "resumed from") != NULL);
    CHECK((strstr(cl_test_out, "conv backward paths of the resumed run") !=
           NULL) == autotune);
    double la[16], lb[16];
    int64_t sa[16], sb[16];
    int na =
        cl_test_read_losses(cl_test_path("full/metrics.jsonl"), la, sa, 16);
    int nb =
        cl_test_read_losses(cl_test_path("resumed/metrics.jsonl"), lb, sb, 16);
    REQUIRE(na == 8);
    REQUIRE(nb == 5);
    for (int i = 0; i < nb; i++) {
        CHECK(sb[i] == sa[i + 3]);
        CHECK(lb[i] == la[i + 3]);
        if (lb[i] != la[i + 3])
            fprintf(stderr, "step %lld: %.9g vs %.9g\n", (long long)sb[i],
                    lb[i], la[i + 3]);
    }
}

CL_TEST(resume_gives_the_same_losses)
{
    resume_case(0);
}

CL_TEST(resume_gives_the_same_losses_autotuned)
{
    resume_case(1);
}

/* Writes an MNIST-format dataset of n 28x28 images with labels in [0, k)
 * taken from the first Fashion-MNIST test images (labels folded mod k),
 * with mirror each image flipped left-right. */
static void write_idx(const char *dir, const char *split, int n, int k,
                      int mirror)
{
    cl_dataset_spec spec = cl_dataset_spec_default();
    cl_dataset *ds = NULL;
    spec.format = "fashion_mnist";
    spec.usage = CL_USAGE_TEST;
    REQUIRE_OK(cl_dataset_open(&ds, &spec));
    char path[600];
    REQUIRE(snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", dir, split) <
            (int)sizeof path);
    FILE *fi = fopen(path, "wb");
    REQUIRE(snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", dir, split) <
            (int)sizeof path);
    FILE *fl = fopen(path, "wb");
    REQUIRE(fi && fl);
    unsigned char hi[16] = {
        0, 0,  8, 3, 0, 0, (unsigned char)(n >> 8), (unsigned char)n, 0, 0,
        0, 28, 0, 0, 0, 28};
    unsigned char hl[8] = {
        0, 0, 8, 1, 0, 0, (unsigned char)(n >> 8), (unsigned char)n};
    fwrite(hi, 1, 16, fi);
    fwrite(hl, 1, 8, fl);
    cl_image img;
    memset(&img, 0, sizeof img);
    for (int i = 0; i < n; i++) {
        int32_t label;
        REQUIRE_OK(cl_dataset_get(ds, i, 0, &img, &label));
        for (int y = 0; mirror && y < 28; y++)
            for (int x = 0; x < 14; x++) {
                unsigned char *row = img.data + y * 28, t = row[x];
                row[x] = row[27 - x];
                row[27 - x] = t;
            }
        fwrite(img.data, 1, 28 * 28, fi);
        unsigned char l = (unsigned char)(label % k);
        fwrite(&l, 1, 1, fl);
    }
    cl_image_free(&img);
    fclose(fi);
    fclose(fl);
    cl_dataset_close(ds);
}

CL_TEST(finetune_with_a_new_head)
{
    char args[2048];
    snprintf(args, sizeof args,
             "train " QUICK "--limit_train 64 --batch_size 32 --epoch_size 1 "
             "--val_interval 0 --ckpt_save_epochs 0 --ckpt_save_dir %s",
             cl_test_path("base"));
    REQUIRE(cl_test_classic(args) == 0);
    const char *dir = cl_test_path("three");
    char mk[700];
    snprintf(mk, sizeof mk, "mkdir -p %s", dir);
    REQUIRE(cl_test_run(mk) == 0);
    write_idx(dir, "train", 96, 3, 0);
    write_idx(dir, "t10k", 48, 3, 0);
    snprintf(args, sizeof args,
             "train " QUICK "--dataset mnist --data_dir %s --num_classes 3 "
             "--batch_size 32 --epoch_size 2 --lr 0.01 --val_interval 2 "
             "--pretrained %s --backbone_lr_mult 0.1 --ckpt_save_dir %s",
             dir, cl_test_path("base/resnet18-last.safetensors"),
             cl_test_path("ft"));
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "head is re-initialised for 3 classes") != NULL);
    CHECK(strstr(cl_test_out, "fc.weight (10, 512) in the file, (3, 512) in "
                              "the model") != NULL);
    CHECK(strstr(cl_test_out, "training starts at step 0") != NULL);
    /* The fine-tuned model is a 3-class model whose backbone came from
     * the base: conv1 moved only a little (lr x 0.1), fc is new. */
    cl_st_file *a = NULL, *b = NULL;
    REQUIRE_OK(cl_st_open(&a, cl_test_path("base/resnet18-last.safetensors")));
    REQUIRE_OK(cl_st_open(&b, cl_test_path("ft/resnet18-last.safetensors")));
    cl_shape s;
    cl_st_info(b, (size_t)cl_st_find(b, "fc.weight"), NULL, &s);
    CHECK(s.d[0] == 3);
    float wa[64], wb[64];
    size_t nb;
    const float *pa = cl_st_data(a, (size_t)cl_st_find(a, "conv1.weight"), &nb);
    const float *pb = cl_st_data(b, (size_t)cl_st_find(b, "conv1.weight"), &nb);
    memcpy(wa, pa, sizeof wa);
    memcpy(wb, pb, sizeof wb);
    double diff = 0, norm = 0;
    for (int i = 0; i < 64; i++) {
        diff += (wa[i] - wb[i]) * (double)(wa[i] - wb[i]);
        norm += wa[i] * (double)wa[i];
    }
    CHECK(diff > 0);
    CHECK(diff < 0.01 * norm);
    cl_st_close(a);
    cl_st_close(b);
}

/* Largest |a - b| over tensor `name` of two safetensors files. */
static double max_diff(const char *fa, const char *fb, const char *name)
{
    cl_st_file *a = NULL, *b = NULL;
    double m = -1;
    if (cl_st_open(&a, fa) != CL_OK || cl_st_open(&b, fb) != CL_OK)
        goto done;
    size_t na, nb;
    const float *pa = cl_st_data(a, (size_t)cl_st_find(a, name), &na);
    const float *pb = cl_st_data(b, (size_t)cl_st_find(b, name), &nb);
    if (na != nb)
        goto done;
    m = 0;
    for (size_t i = 0; i < na / sizeof(float); i++) {
        float x, y;
        memcpy(&x, (const char *)pa + i * sizeof x, sizeof x);
        memcpy(&y, (const char *)pb + i * sizeof y, sizeof y);
        m = fabs((double)x - y) > m ? fabs((double)x - y) : m;
    }
done:
    cl_st_close(a);
    cl_st_close(b);
    return m;
}

CL_TEST(finetune_new_head_of_the_same_shape)
{
    /* new_head: a head of the pretrained shape is still not loaded.  With
     * an lr of 1e-12 the fine-tuned head is its initialisation, which a
     * run from scratch with the same seed reproduces, while the frozen
     * backbone is the base's. */
    char args[2048];
    const char *tail = "--limit_train 64 --batch_size 32 --epoch_size 1 "
                       "--val_interval 0 --ckpt_save_epochs 0";
    snprintf(args, sizeof args, "train " QUICK "%s --ckpt_save_dir %s", tail,
             cl_test_path("base"));
    REQUIRE(cl_test_classic(args) == 0);
    snprintf(args, sizeof args,
             "train " QUICK "%s --lr 1e-12 --min_lr 0 --freeze_backbone true "
             "--new_head true --pretrained %s --ckpt_save_dir %s",
             tail, cl_test_path("base/resnet18-last.safetensors"),
             cl_test_path("ft"));
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "new_head: the head keeps its fresh "
                              "initialisation for 10 classes") != NULL);
    snprintf(args, sizeof args,
             "train " QUICK "%s --lr 1e-12 --min_lr 0 --freeze_backbone true "
             "--ckpt_save_dir %s",
             tail, cl_test_path("scratch"));
    REQUIRE(cl_test_classic(args) == 0);
    char base[600], ft[600], scratch[600];
    snprintf(base, sizeof base, "%s",
             cl_test_path("base/resnet18-last.safetensors"));
    snprintf(ft, sizeof ft, "%s", cl_test_path("ft/resnet18-last.safetensors"));
    snprintf(scratch, sizeof scratch, "%s",
             cl_test_path("scratch/resnet18-last.safetensors"));
    CHECK(max_diff(ft, scratch, "fc.weight") >= 0);
    CHECK(max_diff(ft, scratch, "fc.weight") < 1e-6);
    CHECK(max_diff(ft, scratch, "fc.bias") < 1e-6);
    CHECK(max_diff(ft, base, "fc.weight") > 1e-4);
    CHECK(max_diff(ft, base, "conv1.weight") == 0);
    CHECK(max_diff(ft, scratch, "conv1.weight") > 1e-4);
}

/* The loss and top-1 that `classic eval` printed last. */
static void eval_result(double *loss, double *top1)
{
    const char *t = strstr(cl_test_out, "samples, loss ");
    REQUIRE(t != NULL);
    REQUIRE(sscanf(t, "samples, loss %lf, top-1 %lf%%", loss, top1) == 2);
}

CL_TEST(eval_hflip_averages_image_and_mirror)
{
    /* Flip test-time augmentation: the mean of the logits of an image and
     * of its mirror.  It gives the same numbers on a set and on its
     * mirrored copy (plain eval does not: a trained net is not symmetric),
     * and, cross-entropy being convex in the logits, a loss no larger than
     * the mean of the two plain losses. */
    char args[2048];
    /* At the images' own 28x28 (no resize), so the mirrored set is exactly
     * the mirror of what the net sees. */
    snprintf(args, sizeof args,
             "train --model resnet18 --stem cifar_pool --image_size 28 "
             "--in_channels 1 --random_crop_padding 0 --hflip 0 "
             "--label_smoothing 0 --mean 0.286 --std 0.353 --seed 7 "
             "--limit_train 256 --batch_size 32 --epoch_size 1 "
             "--eval_hflip true --limit_val 100 --ckpt_save_epochs 0 "
             "--ckpt_save_dir %s",
             cl_test_path("tta"));
    REQUIRE(cl_test_classic(args) == 0);
    /* The run's validation says it, in the log and in metrics.jsonl. */
    CHECK(strstr(cl_test_out,
                 "(100 samples, averaged with their mirrors, precision f32)") !=
          NULL);
    const char *m = cl_test_slurp(cl_test_path("tta/metrics.jsonl"));
    REQUIRE(m != NULL);
    CHECK(strstr(m, "\"val_samples\":100,") && strstr(m, "\"val_hflip\":true"));
    /* The report shows the run's own last evaluation (all 100 samples, not
     * the 64 it would evaluate itself), and says so. */
    snprintf(args, sizeof args, "report %s --limit 64", cl_test_path("tta"));
    REQUIRE(cl_test_classic(args) == 0);
    char *html = cl_test_read_file(cl_test_path("tta/report.html"), NULL);
    REQUIRE(html != NULL);
    CHECK(strstr(html, "on 100 samples of fashion_mnist split test, each "
                       "averaged with its mirror, precision f32, the "
                       "training's own evaluation") != NULL);
    free(html);
    const char *ck = cl_test_path("tta/resnet18-last.safetensors");
    char dir[2][600];
    double loss[2][2], top1[2][2];
    for (int mirror = 0; mirror < 2; mirror++) {
        snprintf(dir[mirror], sizeof dir[mirror], "%s",
                 cl_test_path(mirror ? "mirrored" : "plain"));
        char mk[700];
        REQUIRE(snprintf(mk, sizeof mk, "mkdir -p %s", dir[mirror]) <
                (int)sizeof mk);
        REQUIRE(cl_test_run(mk) == 0);
        write_idx(dir[mirror], "t10k", 100, 10, mirror);
        for (int tta = 0; tta < 2; tta++) {
            /* Batch 32: the last batch of 4 is padded. */
            snprintf(args, sizeof args,
                     "eval --checkpoint %s --batch 32 --dataset mnist "
                     "--data_dir %s --eval_hflip %s",
                     ck, dir[mirror], tta ? "true" : "false");
            REQUIRE(cl_test_classic(args) == 0);
            CHECK((strstr(cl_test_out, "averaged with their mirrors") !=
                   NULL) == tta);
            CHECK(strstr(cl_test_out, "(100 samples") != NULL);
            eval_result(&loss[mirror][tta], &top1[mirror][tta]);
        }
    }
    fprintf(stderr,
            "eval loss plain %.4f mirrored %.4f, with flips %.4f %.4f\n",
            loss[0][0], loss[1][0], loss[0][1], loss[1][1]);
    CHECK(loss[0][0] != loss[1][0]);
    CHECK(loss[0][1] == loss[1][1] && top1[0][1] == top1[1][1]);
    CHECK(loss[0][1] <= 0.5 * (loss[0][0] + loss[1][0]) + 1e-4);
    CHECK(loss[0][1] != loss[0][0]);
}

CL_TEST(eval_mirror_reverses_rows)
{
    float x[2 * 3], y[2 * 3];
    for (int i = 0; i < 6; i++)
        x[i] = (float)i;
    cl_eval_mirror(x, y, 2, 3);
    const float want[6] = {2, 1, 0, 5, 4, 3};
    for (int i = 0; i < 6; i++)
        CHECK(y[i] == want[i]);
}

CL_TEST(predict_and_info)
{
    char args[2048];
    snprintf(args, sizeof args,
             "train " QUICK "--limit_train 64 --batch_size 32 --epoch_size 1 "
             "--val_interval 0 --ckpt_save_epochs 0 --ckpt_save_dir %s",
             cl_test_path("p"));
    REQUIRE(cl_test_classic(args) == 0);
    /* A test image written as PNG, as a user would have it. */
    cl_dataset_spec spec = cl_dataset_spec_default();
    cl_dataset *ds = NULL;
    spec.format = "fashion_mnist";
    spec.usage = CL_USAGE_TEST;
    REQUIRE_OK(cl_dataset_open(&ds, &spec));
    cl_image img;
    int32_t label;
    memset(&img, 0, sizeof img);
    REQUIRE_OK(cl_dataset_get(ds, 0, 0, &img, &label));
    CHECK_OK(cl_image_save_png(cl_test_path("shoe.png"), &img));
    cl_image_free(&img);
    cl_dataset_close(ds);
    const char *ck = cl_test_path("p/resnet18-last.safetensors");
    snprintf(args, sizeof args, "predict --checkpoint %s --top 3 %s", ck,
             cl_test_path("shoe.png"));
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, " 1. ") && strstr(cl_test_out, " 3. ") &&
          !strstr(cl_test_out, " 4. "));
    CHECK(strstr(cl_test_out, "%") != NULL);
    snprintf(args, sizeof args, "predict --checkpoint %s --json %s", ck,
             cl_test_path("shoe.png"));
    REQUIRE(cl_test_classic(args) == 0);
    cl_json_doc *doc = NULL;
    REQUIRE_OK(
        cl_json_parse(&doc, cl_test_out, strlen(cl_test_out), NULL, "json"));
    const cl_json *r = cl_json_root(doc);
    REQUIRE(r->type == CL_JSON_ARR && r->count == 1);
    const cl_json *top = cl_json_get(r->child, "top");
    REQUIRE(top && top->count == 5);
    double psum = 0;
    for (const cl_json *e = top->child; e; e = e->next)
        psum += cl_json_get(e, "prob")->num;
    CHECK(psum > 0 && psum <= 1.0001);
    cl_json_free(doc);
    /* A corrupt image is one clear error, non-zero exit. */
    FILE *f = fopen(cl_test_path("bad.png"), "wb");
    REQUIRE(f != NULL);
    fputs("\x89PNG\r\n\x1a\nnot really", f);
    fclose(f);
    snprintf(args, sizeof args, "predict --checkpoint %s %s", ck,
             cl_test_path("bad.png"));
    CHECK(cl_test_classic(args) != 0);
    CHECK(strstr(cl_test_out, "bad.png") != NULL);
    snprintf(args, sizeof args, "info --checkpoint %s", ck);
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "arch             resnet18") != NULL);
    CHECK(strstr(cl_test_out, "layer4.1.conv2") != NULL);
    CHECK(cl_test_classic("info --arch resnet50 --num_classes 1000") == 0);
    CHECK(strstr(cl_test_out, "parameters: 25557032") != NULL);
}

CL_TEST(config_errors_name_the_key)
{
    CHECK(cl_test_classic("train --lrr 0.1") == 1);
    CHECK(strstr(cl_test_out, "unknown key 'lrr'") != NULL);
    CHECK(strstr(cl_test_out, "'lr'") != NULL);
    CHECK(cl_test_classic("train --batch_size abc") == 1);
    CHECK(strstr(cl_test_out, "batch_size") != NULL);
    CHECK(cl_test_classic("train --config /nonexistent/recipe.yaml") == 1);
    CHECK(strstr(cl_test_out, "/nonexistent/recipe.yaml") != NULL);
    CHECK(cl_test_classic("eval") == 2);
    CHECK(strstr(cl_test_out, "--checkpoint") != NULL);
    char args[1024];
    snprintf(args, sizeof args, "eval --checkpoint %s",
             cl_test_path("missing.safetensors"));
    CHECK(cl_test_classic(args) == 1);
    CHECK(strstr(cl_test_out, "missing.safetensors") != NULL);
}

CL_TEST(nan_loss_stops_with_advice)
{
    /* A model whose weights hold a NaN (a corrupt pretrained file) gives a
     * NaN loss at the first step: training stops with the step, the lr
     * and what to do, and a non-zero exit. */
    cl_resnet_config rc = cl_resnet_config_default();
    rc.depth = 18;
    rc.in_channels = 1;
    rc.num_classes = 10;
    cl_graph g;
    REQUIRE_OK(cl_graph_init(&g, 1));
    REQUIRE_OK(cl_resnet_build(&g, &rc, 32, 32, 0, 0));
    REQUIRE_OK(cl_resnet_init(&g, &rc, 3));
    cl_graph_param(&g, cl_graph_find(&g, "fc.bias"))[3] = NAN;
    REQUIRE_OK(
        cl_ckpt_save_model(cl_test_path("nan.safetensors"), &g, NULL, 0));
    cl_graph_free(&g);
    char args[2048];
    snprintf(args, sizeof args,
             "train " QUICK "--limit_train 256 --batch_size 32 --epoch_size 1 "
             "--val_interval 0 --pretrained %s --ckpt_save_dir %s",
             cl_test_path("nan.safetensors"), cl_test_path("nan"));
    CHECK(cl_test_classic(args) == 1);
    CHECK(strstr(cl_test_out, "step 1 (epoch 1): the loss is NaN") != NULL);
    CHECK(strstr(cl_test_out, "training stopped") != NULL);
    CHECK(strstr(cl_test_out, "Lower lr") != NULL);
}

CL_TEST(checkpoint_round_trip_and_mismatch)
{
    cl_resnet_config rc = cl_resnet_config_default();
    rc.depth = 18;
    rc.num_classes = 10;
    rc.stem = CL_STEM_CIFAR;
    cl_graph a, b, c;
    REQUIRE_OK(cl_graph_init(&a, 2));
    REQUIRE_OK(cl_resnet_build(&a, &rc, 16, 16, 0, 0));
    REQUIRE_OK(cl_resnet_init(&a, &rc, 1));
    cl_graph_buffer(&a, cl_graph_find(&a, "bn1.num_batches_tracked"))[0] = 7;
    cl_ckpt_kv meta[] = {{"arch", "resnet18"}};
    const char *p = cl_test_path("rt.safetensors");
    REQUIRE_OK(cl_ckpt_save_model(p, &a, meta, 1));
    REQUIRE_OK(cl_graph_init(&b, 4));
    REQUIRE_OK(cl_resnet_build(&b, &rc, 16, 16, 0, 0));
    REQUIRE_OK(cl_resnet_init(&b, &rc, 2));
    cl_ckpt_load_report rep;
    REQUIRE_OK(cl_ckpt_load_model(p, &b, CL_CKPT_STRICT, &rep));
    CHECK(rep.loaded == 122);
    CHECK(memcmp(a.params, b.params, a.n_param_floats * 4) == 0);
    CHECK(memcmp(a.buffers, b.buffers, a.n_buffer_floats * 4) == 0);
    char v[32];
    CHECK_OK(cl_ckpt_read_meta(p, "arch", v, sizeof v));
    CHECK(strcmp(v, "resnet18") == 0);
    /* Another head size: strict refuses naming the tensor, fine-tuning
     * keeps the fresh head; another depth lists the missing tensors. */
    rc.num_classes = 3;
    REQUIRE_OK(cl_graph_init(&c, 2));
    REQUIRE_OK(cl_resnet_build(&c, &rc, 16, 16, 0, 0));
    CHECK_ERR(cl_ckpt_load_model(p, &c, CL_CKPT_STRICT, NULL), CL_ERR_SHAPE,
              "fc.weight");
    CHECK_OK(cl_ckpt_load_model(p, &c, CL_CKPT_PRETRAINED, &rep));
    CHECK(rep.head_skipped == 2);
    cl_graph_free(&c);
    rc.depth = 34;
    rc.num_classes = 10;
    REQUIRE_OK(cl_graph_init(&c, 2));
    REQUIRE_OK(cl_resnet_build(&c, &rc, 16, 16, 0, 0));
    CHECK_ERR(cl_ckpt_load_model(p, &c, CL_CKPT_STRICT, NULL), CL_ERR_FORMAT,
              "missing from the file");
    cl_graph_free(&c);
    /* Truncated file: a clear error, the graph untouched. */
    FILE *f = fopen(p, "r+b");
    REQUIRE(f != NULL);
    REQUIRE(ftruncate(fileno(f), 1000) == 0);
    fclose(f);
    memcpy(b.params, a.params, 4);
    CHECK(cl_ckpt_load_model(p, &b, CL_CKPT_STRICT, NULL) != CL_OK);
    CHECK(strstr(cl_last_error(), "rt.safetensors") != NULL);
    cl_graph_free(&a);
    cl_graph_free(&b);
}

/* ---- rough edges found in use ---------------------------------------- */

static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, needle)); p++)
        n++;
    return n;
}

CL_TEST(val_split_empty_means_no_validation)
{
    /* Fashion-MNIST: no evaluation although val_interval is 1. */
    char args[2048], p[1200];
    snprintf(args, sizeof args,
             "train " QUICK "--limit_train 32 --batch_size 16 --epoch_size 1 "
             "--val_interval 1 --val_split \"\" --per_print_times 1 "
             "--ckpt_save_dir %s",
             cl_test_path("noval"));
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "no validation (val_split \"\")") != NULL);
    CHECK(strstr(cl_test_out, "eval: top-1") == NULL);
    snprintf(p, sizeof p, "%s/metrics.jsonl", cl_test_path("noval"));
    const char *m = cl_test_slurp(p);
    REQUIRE(m != NULL);
    CHECK(count_of(m, "\"kind\":\"train\"") == 2);
    CHECK(count_of(m, "\"kind\":\"eval\"") == 0);
    /* An ImageFolder root of splits: the root is not read as a split. */
    const char *root = cl_test_path("splits");
    REQUIRE(fx_image_split(root, "train", 8) == 0);
    REQUIRE(fx_image_split(root, "val", 4) == 0);
    snprintf(args, sizeof args,
             "train --dataset imagefolder --data_dir %s --model resnet18 "
             "--image_size 32 --batch_size 4 --epoch_size 1 --val_split \"\" "
             "--num_parallel_workers 0 --ckpt_save_dir %s",
             root, cl_test_path("noval_folder"));
    CHECK(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "no validation") != NULL);
    /* And `classic eval` on that run asks which split to read. */
    snprintf(args, sizeof args, "eval --checkpoint %s",
             cl_test_path("noval_folder/resnet18-last.safetensors"));
    CHECK(cl_test_classic(args) != 0);
    CHECK(strstr(cl_test_out, "val_split is \"\", which names no split") !=
          NULL);
    snprintf(args, sizeof args, "eval --checkpoint %s --split val",
             cl_test_path("noval_folder/resnet18-last.safetensors"));
    CHECK(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "4 samples") != NULL ||
          strstr(cl_test_out, "(4 ") != NULL);
}

/* The lr of every train record of a metrics file, in order. */
static int read_lrs(const char *path, double *lr, int max)
{
    int64_t step[64];
    return cl_test_read_metric(path, "train", "lr", lr, step, max);
}

CL_TEST(resume_with_another_batch_size)
{
    /* 2 epochs x 4 steps of 16, a checkpoint at step 3, as resume_case. */
    char args[4096], common[1024];
    snprintf(common, sizeof common,
             "train " QUICK "--limit_train 64 --epoch_size 2 --lr 0.05 "
             "--warmup_epochs 1 --val_interval 0 --ckpt_save_epochs 0 "
             "--per_print_times 1 --ckpt_save_interval 3 "
             "--keep_checkpoint_max 0");
    snprintf(args, sizeof args, "%s --batch_size 16 --ckpt_save_dir %s", common,
             cl_test_path("b16"));
    REQUIRE(cl_test_classic(args) == 0);
    const char *ck = cl_test_path("b16/resnet18-e1-s3.safetensors");
    char ckp[512];
    REQUIRE(snprintf(ckp, sizeof ckp, "%s", ck) < (int)sizeof ckp);
    /* Another global batch: refused, saying what keeps it. */
    snprintf(args, sizeof args,
             "%s --batch_size 32 --ckpt_save_dir %s --resume %s", common,
             cl_test_path("b32"), ckp);
    CHECK(cl_test_classic(args) != 0);
    CHECK(strstr(cl_test_out, "global batch of 16 (batch_size 16 x 1 "
                              "process(es) x 1 accumulation_steps) and this "
                              "run's is 32") != NULL);
    CHECK(strstr(cl_test_out, "pass --batch_size 16 --accumulation_steps 1") !=
          NULL);
    snprintf(args, sizeof args,
             "%s --batch_size 4 --ckpt_save_dir %s --resume %s", common,
             cl_test_path("b4"), ckp);
    CHECK(cl_test_classic(args) != 0);
    CHECK(strstr(cl_test_out, "--accumulation_steps 4") != NULL);
    /* The same global batch split otherwise (8 x 2 accumulation): the
     * run goes on at step 4 of 8 on the same schedule. */
    snprintf(args, sizeof args,
             "%s --batch_size 8 --accumulation_steps 2 --ckpt_save_dir %s "
             "--resume %s",
             common, cl_test_path("b8x2"), ckp);
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "carried over in steps") != NULL);
    CHECK(strstr(cl_test_out, "m-") == NULL); /* no negative ETA */
    double la[16], lb[16], ra[16], rb[16];
    int64_t sa[16], sb[16];
    int na = cl_test_read_losses(cl_test_path("b16/metrics.jsonl"), la, sa, 16);
    int nb =
        cl_test_read_losses(cl_test_path("b8x2/metrics.jsonl"), lb, sb, 16);
    REQUIRE(na == 8);
    REQUIRE(nb == 5);
    REQUIRE(read_lrs(cl_test_path("b16/metrics.jsonl"), ra, 16) == 8);
    REQUIRE(read_lrs(cl_test_path("b8x2/metrics.jsonl"), rb, 16) == 5);
    for (int i = 0; i < nb; i++) {
        CHECK(sb[i] == sa[i + 3]);
        CHECK(rb[i] == ra[i + 3]);
        CHECK(isfinite(lb[i]));
    }
}

/* The step line is redrawn in place only on a terminal: --progress bar
 * forces it, plain never; and auto under an MPI launcher writes lines
 * even to a terminal (tests/test_dist_train.c runs the real mpirun). */
CL_TEST(progress_bar_or_plain)
{
    char args[2048];
    const char *common =
        "train " QUICK "--limit_train 32 --batch_size 16 --epoch_size 1 "
        "--val_interval 0 --ckpt_save_epochs 0 --per_print_times 1 ";
    snprintf(args, sizeof args, "%s--progress bar --ckpt_save_dir %s", common,
             cl_test_path("bar"));
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "\r\033[K") != NULL);
    snprintf(args, sizeof args, "%s--progress plain --ckpt_save_dir %s", common,
             cl_test_path("plain"));
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "\033[K") == NULL);
    CHECK(strstr(cl_test_out, "step 2/2") != NULL);
    /* auto on a pseudo-terminal (script(1)): the bar, unless a launcher's
     * variables say the terminal is the launcher's. */
    char cmd[4096];
    const char *log = cl_test_path("pty.txt");
    snprintf(cmd, sizeof cmd,
             "script -qec '%s %s--dist none --ckpt_save_dir %s' %s "
             ">/dev/null 2>&1",
             cl_test_classic_bin(), common, cl_test_path("pty"), log);
    REQUIRE(cl_test_run(cmd) == 0);
    const char *t = cl_test_slurp(log);
    REQUIRE(t != NULL);
    CHECK(strstr(t, "\033[K") != NULL);
    snprintf(cmd, sizeof cmd,
             "OMPI_COMM_WORLD_SIZE=1 script -qec '%s %s--dist none "
             "--ckpt_save_dir %s' %s >/dev/null 2>&1",
             cl_test_classic_bin(), common, cl_test_path("pty_mpi"), log);
    REQUIRE(cl_test_run(cmd) == 0);
    t = cl_test_slurp(log);
    REQUIRE(t != NULL);
    CHECK(strstr(t, "step 2/2") != NULL);
    CHECK(strstr(t, "\033[K") == NULL);
    /* dist: mpi without a launcher is refused in one sentence. */
    snprintf(args, sizeof args, "%s--dist mpi --ckpt_save_dir %s", common,
             cl_test_path("nompi"));
    CHECK(cl_test_classic(args) != 0);
    CHECK(strstr(cl_test_out, "dist is mpi but no MPI launcher started") !=
          NULL);
}

/* A caller's hook hears every printed step and every epoch's end (with
 * the evaluation), and stopping from it ends the run after that step
 * with a checkpoint to resume from, as SIGINT does. */
typedef struct hook_log {
    int steps, epochs, evaluated, stop_at;
    int64_t last_step;
    double last_loss;
} hook_log;

static int count_events(void *ctx, const cl_train_event *e)
{
    hook_log *h = ctx;
    if (e->kind == CL_TRAIN_EVENT_STEP) {
        h->steps++;
        h->last_step = e->step;
        h->last_loss = e->loss;
        CHECK(e->total_steps == 8 && e->lr > 0 && isfinite(e->loss));
    } else {
        h->epochs++;
        h->evaluated += e->evaluated && e->val_top1 >= 0 && e->val_top1 <= 1;
    }
    return h->stop_at > 0 && e->kind == CL_TRAIN_EVENT_STEP &&
           e->step == h->stop_at;
}

static void hook_config(cl_config *c, const char *dir)
{
    static const char *const kv[][2] = {
        {"model", "resnet18"},         {"stem", "cifar"},
        {"image_size", "16"},          {"in_channels", "1"},
        {"random_crop_padding", "0"},  {"hflip", "0"},
        {"limit_train", "64"},         {"limit_val", "32"},
        {"batch_size", "16"},          {"epoch_size", "2"},
        {"per_print_times", "1"},      {"ckpt_save_epochs", "0"},
        {"num_parallel_workers", "0"}, {"log_level", "error"}};
    cl_config_defaults(c);
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        REQUIRE_OK(cl_config_set(c, kv[i][0], kv[i][1]));
    REQUIRE_OK(cl_config_set(c, "ckpt_save_dir", dir));
}

CL_TEST(hooks_hear_steps_and_epochs_and_can_stop)
{
    cl_config cfg;
    cl_logger lg = cl_logger_default();
    lg.quiet = 1;
    cl_train_result res;
    hook_log h = {0};
    cl_train_hooks hooks = {.ctx = &h, .on_event = count_events};
    hook_config(&cfg, cl_test_path("hooks"));
    REQUIRE_OK(cl_train_run(&cfg, NULL, &lg, &hooks, &res));
    CHECK(h.steps == 8 && h.epochs == 2 && h.evaluated == 2);
    CHECK(h.last_step == 8 && res.steps == 8);
    /* Stopped from the hook at step 3: a checkpoint there, resumable. */
    hook_log s = {.stop_at = 3};
    hooks.ctx = &s;
    hook_config(&cfg, cl_test_path("hooks_stop"));
    CHECK_ERR(cl_train_run(&cfg, NULL, &lg, &hooks, &res), CL_ERR_INTERRUPTED,
              "stopped by the caller after step 3");
    CHECK(res.stop_signal == 0 && s.steps == 3 && s.epochs == 0);
    char ck[1024];
    snprintf(ck, sizeof ck, "%s/resnet18-e1-s3.safetensors",
             cl_test_path("hooks_stop"));
    REQUIRE_OK(cl_config_set(&cfg, "resume", ck));
    hook_log t = {0};
    hooks.ctx = &t;
    REQUIRE_OK(cl_train_run(&cfg, NULL, &lg, &hooks, &res));
    CHECK(t.steps == 5 && t.last_step == 8 && t.epochs == 2);
    CHECK(t.last_loss == h.last_loss);
}

/* Tensor `name` of a safetensors file as f32 (I64 converted) into buf of
 * cap floats; its element count, or -1. */
static long read_tensor(const char *path, const char *name, float *buf,
                        size_t cap)
{
    cl_st_file *f = NULL;
    if (cl_st_open(&f, path) != CL_OK)
        return -1;
    long i = cl_st_find(f, name), n = -1;
    cl_st_dtype dt;
    cl_shape sh;
    if (i >= 0) {
        cl_st_info(f, (size_t)i, &dt, &sh);
        n = (long)cl_shape_numel(&sh);
        if ((size_t)n > cap)
            n = -1;
        else if (dt == CL_ST_I64) {
            int64_t v[8];
            if (n > 8 || cl_st_read_i64(f, (size_t)i, v, (size_t)n) != CL_OK)
                n = -1;
            for (long k = 0; k < n; k++)
                buf[k] = (float)v[k];
        } else if (cl_st_read_f32(f, (size_t)i, buf, (size_t)n) != CL_OK)
            n = -1;
    }
    cl_st_close(f);
    return n;
}

/* How many tensors of a differ from b's (bits), -1 when the names differ. */
static int tensors_differing(const char *a, const char *b)
{
    enum { CAP = 1 << 22 };
    float *x = malloc(CAP * sizeof(float)), *y = malloc(CAP * sizeof(float));
    cl_st_file *f = NULL;
    int diff = 0;
    if (!x || !y || cl_st_open(&f, a) != CL_OK) {
        free(x);
        free(y);
        return -1;
    }
    for (size_t i = 0; i < cl_st_count(f) && diff >= 0; i++) {
        const char *nm = cl_st_name(f, i);
        long n = read_tensor(a, nm, x, CAP), m = read_tensor(b, nm, y, CAP);
        if (n < 0 || m != n)
            diff = -1;
        else if (memcmp(x, y, (size_t)n * sizeof(float)) != 0)
            diff++;
    }
    cl_st_close(f);
    free(x);
    free(y);
    return diff;
}

/* The top-1 percentage `classic eval` printed. */
static double eval_top1(void)
{
    const char *t = strstr(cl_test_out, "top-1 ");
    return t ? atof(t + 6) : -1;
}

/* The EMA end to end: 2 epochs x 4 steps with the lr warm-up in the first
 * (the average copies the weights there), updates every 2nd step with
 * timm's warm-up.  The run resumed from step 3 continues bit-identically
 * (losses, weights and average); the average is evaluated beside the
 * weights, picks the best checkpoint, and is what eval, predict and
 * convert take unless --load_ema false. */
CL_TEST(ema_trains_resumes_and_ships)
{
    char args[2048], common[1024], p[700];
    snprintf(common, sizeof common,
             "train " QUICK "--limit_train 64 --limit_val 64 --batch_size 16 "
             "--epoch_size 2 --lr 0.05 --warmup_epochs 1 --val_interval 1 "
             "--ckpt_save_epochs 0 --per_print_times 1 --hflip 0.5 "
             "--ckpt_save_interval 3 --keep_checkpoint_max 0 --ema true "
             "--ema_decay 0.7 --ema_steps 2 --ema_warmup true");
    snprintf(args, sizeof args, "%s --ckpt_save_dir %s", common,
             cl_test_path("emafull"));
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "eval (EMA): top-1") != NULL);
    CHECK(strstr(cl_test_out, "(best EMA top-1") != NULL);
    snprintf(args, sizeof args, "%s --ckpt_save_dir %s --resume %s", common,
             cl_test_path("emares"),
             cl_test_path("emafull/resnet18-e1-s3.safetensors"));
    REQUIRE(cl_test_classic(args) == 0);
    double la[16], lb[16], top[4], ema[4], top_r[4], ema_r[4];
    int64_t sa[16], sb[16], se[4];
    snprintf(p, sizeof p, "%s/metrics.jsonl", cl_test_path("emafull"));
    REQUIRE(cl_test_read_losses(p, la, sa, 16) == 8);
    REQUIRE(cl_test_read_metric(p, "eval", "val_top1", top, se, 4) == 2);
    REQUIRE(cl_test_read_metric(p, "eval", "val_ema_top1", ema, se, 4) == 2);
    snprintf(p, sizeof p, "%s/metrics.jsonl", cl_test_path("emares"));
    REQUIRE(cl_test_read_losses(p, lb, sb, 16) == 5);
    REQUIRE(cl_test_read_metric(p, "eval", "val_top1", top_r, se, 4) == 2);
    REQUIRE(cl_test_read_metric(p, "eval", "val_ema_top1", ema_r, se, 4) == 2);
    for (int i = 0; i < 5; i++)
        CHECK(sb[i] == sa[i + 3] && lb[i] == la[i + 3]);
    /* Both evaluations of the resumed run (the end of epoch 1 falls in
     * it) as the uninterrupted run's. */
    CHECK(top_r[0] == top[0] && ema_r[0] == ema[0]);
    CHECK(top_r[1] == top[1] && ema_r[1] == ema[1]);
    /* Every tensor of the last checkpoints, weights and average, bit for
     * bit; and the average is not the weights. */
    char last[700], last_r[700];
    snprintf(last, sizeof last, "%s",
             cl_test_path("emafull/resnet18-last.safetensors"));
    snprintf(last_r, sizeof last_r, "%s",
             cl_test_path("emares/resnet18-last.safetensors"));
    CHECK(tensors_differing(last, last_r) == 0);
    static float w[512 * 10], a[512 * 10];
    REQUIRE(read_tensor(last, "fc.weight", w, 5120) == 5120);
    REQUIRE(read_tensor(last, "ema.fc.weight", a, 5120) == 5120);
    CHECK(memcmp(w, a, sizeof w) != 0);
    REQUIRE(read_tensor(last, "layer1.0.bn1.running_mean", w, 64) == 64);
    REQUIRE(read_tensor(last, "ema.layer1.0.bn1.running_mean", a, 64) == 64);
    CHECK(memcmp(w, a, 64 * sizeof(float)) != 0);
    REQUIRE(read_tensor(last, "bn1.num_batches_tracked", w, 1) == 1);
    REQUIRE(read_tensor(last, "ema.bn1.num_batches_tracked", a, 1) == 1);
    /* Copied, not averaged: 8 training forwards, the last update after
     * the 7th (the epoch's steps 0 and 2 update it). */
    CHECK(w[0] == 8 && a[0] == 7);
    /* The best checkpoint follows the average's top-1 (the first best). */
    char ep[32];
    REQUIRE_OK(
        cl_ckpt_read_meta(cl_test_path("emafull/resnet18-best.safetensors"),
                          "epoch", ep, sizeof ep));
    CHECK(atoi(ep) == (ema[1] > ema[0] ? 2 : 1));
    /* eval scores the average by default, the weights on request. */
    snprintf(args, sizeof args, "eval --checkpoint %s --limit_val 64", last);
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "(its EMA weights)") != NULL);
    CHECK_NEAR(eval_top1(), 100 * ema[1], 0.006);
    snprintf(args, sizeof args,
             "eval --checkpoint %s --limit_val 64 --load_ema false", last);
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "(its EMA weights)") == NULL);
    CHECK_NEAR(eval_top1(), 100 * top[1], 0.006);
    /* convert writes the average as a plain model: predict on it agrees
     * with predict on the checkpoint, and not with its raw weights. */
    const char *conv = cl_test_path("ema_as_model.safetensors");
    snprintf(args, sizeof args, "convert %s %s", last, conv);
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(read_tensor(conv, "ema.fc.weight", w, 5120) < 0);
    REQUIRE(read_tensor(conv, "fc.weight", w, 5120) == 5120);
    REQUIRE(read_tensor(last, "ema.fc.weight", a, 5120) == 5120);
    CHECK(memcmp(w, a, sizeof w) == 0);
    cl_dataset_spec spec = cl_dataset_spec_default();
    cl_dataset *ds = NULL;
    spec.format = "fashion_mnist";
    spec.usage = CL_USAGE_TEST;
    REQUIRE_OK(cl_dataset_open(&ds, &spec));
    cl_image img;
    int32_t label;
    memset(&img, 0, sizeof img);
    REQUIRE_OK(cl_dataset_get(ds, 3, 0, &img, &label));
    CHECK_OK(cl_image_save_png(cl_test_path("ema.png"), &img));
    cl_image_free(&img);
    cl_dataset_close(ds);
    static char out[3][4096];
    const char *which[3] = {last, conv, last};
    for (int k = 0; k < 3; k++) {
        snprintf(args, sizeof args, "predict --checkpoint %s --json %s%s",
                 which[k], cl_test_path("ema.png"),
                 k == 2 ? " --load_ema false" : "");
        REQUIRE(cl_test_classic(args) == 0);
        size_t n = strlen(cl_test_out);
        n = n < sizeof out[k] - 1 ? n : sizeof out[k] - 1;
        memcpy(out[k], cl_test_out, n);
        out[k][n] = '\0';
    }
    CHECK(strcmp(out[0], out[1]) == 0);
    CHECK(strcmp(out[0], out[2]) != 0);
    /* Fine-tuning from it takes the average (load_ema false: the weights)
     * and starts a new average there, counting its own updates: with the
     * backbone frozen its weights and their new average stay the file's
     * average. */
    REQUIRE(read_tensor(last, "layer4.1.bn2.weight", w, 512) == 512);
    REQUIRE(read_tensor(last, "ema.layer4.1.bn2.weight", a, 512) == 512);
    CHECK(memcmp(w, a, 512 * sizeof(float)) != 0);
    for (int raw = 0; raw < 2; raw++) {
        char dir[32];
        snprintf(dir, sizeof dir, "emaft%d", raw);
        snprintf(args, sizeof args,
                 "train " QUICK "--limit_train 64 --batch_size 16 "
                 "--epoch_size 1 --freeze_backbone true --val_interval 0 "
                 "--ema true --ema_decay 0.5 --pretrained %s --load_ema %s "
                 "--ckpt_save_dir %s",
                 last, raw ? "false" : "true", cl_test_path(dir));
        REQUIRE(cl_test_classic(args) == 0);
        CHECK((strstr(cl_test_out, "its EMA weights") != NULL) == !raw);
        snprintf(p, sizeof p, "%s/resnet18-last.safetensors",
                 cl_test_path(dir));
        static float v[512];
        const char *t = raw ? "layer4.1.bn2.weight" : "ema.layer4.1.bn2.weight";
        REQUIRE(read_tensor(last, t, w, 512) == 512);
        REQUIRE(read_tensor(p, "layer4.1.bn2.weight", a, 512) == 512);
        REQUIRE(read_tensor(p, "ema.layer4.1.bn2.weight", v, 512) == 512);
        CHECK(memcmp(w, a, sizeof v) == 0 && memcmp(w, v, sizeof v) == 0);
        snprintf(p, sizeof p, "%s/resnet18-last.state.safetensors",
                 cl_test_path(dir));
        char n[32];
        REQUIRE_OK(cl_ckpt_read_meta(p, "ema_updates", n, sizeof n));
        CHECK(strcmp(n, "4") == 0); /* this run's 4 steps, nothing before */
    }
}
