/* What a new user hits running a trained model from the shell: one rule
 * for options a command does not use, --json output that keeps a failed
 * file in its place, a gallery that works from any folder, the sample
 * limit that follows the split, and weights that name no dataset.
 * ctest-labels: cli */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "test_data_fixtures.h"
#include "tiny_run.h"

/* Runs `cd <test folder> && classic <args>` with stdout alone into
 * out.txt (stderr into err.txt); the exit status. */
static int run_here(const char *args)
{
    char cmd[6000];
    snprintf(cmd, sizeof cmd,
             "cd %s && OMP_NUM_THREADS=2 %s %s >out.txt "
             "2>err.txt",
             cl_test_tmpdir(), cl_test_classic_bin(), args);
    return cl_test_run(cmd);
}

CL_TEST(options_that_do_not_apply_are_refused_alike)
{
    const char *ck = tiny_run();
    REQUIRE(ck != NULL);
    /* --num_classes against a checkpoint that fixes it, and a typo: the
     * same sentence and exit status 2 on every command. */
    const char *cmds[][2] = {
        {"predict", "predict --checkpoint %s folder/val/a/0.jpg"},
        {"eval", "eval --checkpoint %s"},
        {"embed", "embed --checkpoint %s --out g.safetensors"},
        {"export", "export --checkpoint %s --onnx m.onnx"},
        {"retrieve", "retrieve --gallery %s folder/val/a/0.jpg"}};
    const char *opts[] = {"--num_classes 1000", "--limit_vall 3", "--lr=0.1"};
    for (int c = 0; c < 5; c++)
        for (int o = 0; o < 3; o++) {
            char base[2000], args[2100], want[200];
            snprintf(base, sizeof base, cmds[c][1], ck);
            snprintf(args, sizeof args, "%s %s", base, opts[o]);
            int rc = run_here(args);
            const char *err = cl_test_slurp(cl_test_path("err.txt"));
            char key[32];
            snprintf(key, sizeof key, "%.*s", (int)strcspn(opts[o] + 2, " ="),
                     opts[o] + 2);
            snprintf(want, sizeof want, "classic %s: --%s does not apply to %s",
                     cmds[c][0], key, cmds[c][0]);
            if (rc != 2 || !err || !strstr(err, want))
                cl_test_fail(__FILE__, __LINE__,
                             "classic %s: exit %d, stderr:\n%s\n(expected 2 "
                             "and \"%s\")",
                             args, rc, err ? err : "", want);
        }
    /* What applies still does: data keys on eval, in both spellings. */
    char args[2000];
    snprintf(args, sizeof args,
             "eval --checkpoint %s --limit_val 4 --eval-hflip true "
             "--num_parallel_workers=1",
             ck);
    CHECK(run_here(args) == 0);
    CHECK(strstr(cl_test_slurp(cl_test_path("out.txt")),
                 "(4 samples, averaged with their mirrors)") != NULL);
}

CL_TEST(predict_json_keeps_a_failed_file_in_its_place)
{
    const char *ck = tiny_run();
    REQUIRE(ck != NULL);
    FILE *f = fopen(cl_test_path("text.png"), "w");
    REQUIRE(f != NULL);
    fputs("not a picture\n", f);
    fclose(f);
    char args[2000];
    snprintf(args, sizeof args,
             "predict --checkpoint %s --json --top 2 folder/val/a/0.jpg "
             "text.png folder/val/b/1.jpg missing.png",
             ck);
    CHECK(run_here(args) == 1);
    const char *out = cl_test_slurp(cl_test_path("out.txt"));
    REQUIRE(out != NULL);
    cl_json_doc *doc = NULL;
    REQUIRE_OK(cl_json_parse(&doc, out, strlen(out), NULL, "out.txt"));
    const cl_json *r = cl_json_root(doc);
    REQUIRE(r->type == CL_JSON_ARR && r->count == 4);
    const char *files[] = {"folder/val/a/0.jpg", "text.png",
                           "folder/val/b/1.jpg", "missing.png"};
    int i = 0;
    for (const cl_json *e = r->child; e; e = e->next, i++) {
        CHECK(strcmp(cl_json_get(e, "file")->str, files[i]) == 0);
        const cl_json *top = cl_json_get(e, "top");
        const cl_json *err = cl_json_get(e, "error");
        CHECK((i % 2 == 0) == (top && top->count == 2 && !err));
        CHECK((i % 2 == 1) == (err && !top));
        if (err)
            CHECK(strstr(err->str, files[i]) != NULL);
    }
    cl_json_free(doc);
    /* The sentences go to stderr as well. */
    const char *err = cl_test_slurp(cl_test_path("err.txt"));
    CHECK(err && strstr(err, "text.png") && strstr(err, "missing.png"));
}

CL_TEST(a_gallery_works_from_any_folder)
{
    const char *ck = tiny_run();
    REQUIRE(ck != NULL);
    /* Embedded with a relative checkpoint path, searched from elsewhere. */
    char args[3000];
    snprintf(args, sizeof args,
             "embed --checkpoint %s --out g.safetensors --split train", ck);
    REQUIRE(run_here(args) == 0);
    char cmd[4000];
    snprintf(cmd, sizeof cmd,
             "cd / && OMP_NUM_THREADS=2 %s retrieve --gallery %s --top 1 "
             "%s >%s 2>&1",
             cl_test_classic_bin(), cl_test_path("g.safetensors"),
             cl_test_path("folder/train/a/0.jpg"), cl_test_path("out.txt"));
    int rc = cl_test_run(cmd);
    const char *out = cl_test_slurp(cl_test_path("out.txt"));
    CHECK(rc == 0);
    if (rc != 0)
        fprintf(stderr, "%s\n", out ? out : "");
    CHECK(out && strstr(out, "   1. ") != NULL);
    /* The file names its checkpoint by an absolute path. */
    cl_st_file *f = NULL;
    REQUIRE_OK(cl_st_open(&f, cl_test_path("g.safetensors")));
    const char *m = cl_st_metadata(f, "checkpoint");
    CHECK(m && m[0] == '/' && strstr(m, ck) != NULL);
    cl_st_close(f);
}

CL_TEST(the_sample_limit_follows_the_split)
{
    const char *ck = tiny_run();
    REQUIRE(ck != NULL);
    char args[2000];
    snprintf(args, sizeof args,
             "embed --checkpoint %s --out t.safetensors --split train "
             "--limit_train 5 --limit_val 2",
             ck);
    CHECK(run_here(args) == 0);
    const char *out = cl_test_slurp(cl_test_path("out.txt"));
    CHECK(out && strstr(out, "5 features of dimension 512") != NULL);
    snprintf(args, sizeof args,
             "embed --checkpoint %s --out v.safetensors --split val "
             "--limit_train 5 --limit_val 2",
             ck);
    CHECK(run_here(args) == 0);
    out = cl_test_slurp(cl_test_path("out.txt"));
    CHECK(out && strstr(out, "2 features of dimension 512") != NULL);
}

CL_TEST(weights_without_a_dataset_say_so)
{
    const char *ck = tiny_run();
    REQUIRE(ck != NULL);
    /* The same tensors without classic's metadata: a plain safetensors
     * file, as torchvision's weights come. */
    cl_st_file *f = NULL;
    cl_st_writer *w = NULL;
    REQUIRE_OK(cl_st_open(&f, cl_test_path(ck)));
    REQUIRE_OK(cl_st_writer_new(&w));
    for (size_t i = 0; i < cl_st_count(f); i++) {
        cl_st_dtype dt;
        cl_shape s;
        size_t nb = 0;
        cl_st_info(f, i, &dt, &s);
        const char *name = cl_st_name(f, i);
        if (strncmp(name, "ema.", 4) != 0)
            CHECK_OK(cl_st_writer_add(w, name, dt, s, cl_st_data(f, i, &nb)));
    }
    CHECK_OK(cl_st_writer_save(w, cl_test_path("plain.safetensors")));
    cl_st_writer_free(w);
    cl_st_close(f);
    CHECK(run_here("eval --checkpoint plain.safetensors") == 1);
    const char *err = cl_test_slurp(cl_test_path("err.txt"));
    CHECK(err && strstr(err, "plain.safetensors holds weights only and names "
                             "no dataset") != NULL);
    CHECK(err && strstr(err, "--dataset and --data_dir") != NULL);
    /* Given the data, it evaluates. */
    char args[2000];
    snprintf(args, sizeof args,
             "eval --checkpoint plain.safetensors --dataset imagefolder "
             "--data_dir %s --val_split val",
             cl_test_path("folder"));
    CHECK(run_here(args) == 0);
}

CL_TEST(eval_and_embed_show_progress)
{
    const char *ck = tiny_run();
    REQUIRE(ck != NULL);
    /* Not a terminal: plain lines on stderr, here one per batch, the
     * results on stdout as before. */
    char args[2000];
    snprintf(args, sizeof args, "eval --checkpoint %s --split train --batch 4",
             ck);
    setenv("CLASSIC_PROGRESS_SECONDS", "0", 1);
    int rc = run_here(args);
    unsetenv("CLASSIC_PROGRESS_SECONDS");
    CHECK(rc == 0);
    const char *err = cl_test_slurp(cl_test_path("err.txt"));
    CHECK(err && strstr(err, "eval: 4/16 images (25%)") != NULL);
    CHECK(err && strstr(err, "eval: 16/16 images (100%)") != NULL);
    const char *out = cl_test_slurp(cl_test_path("out.txt"));
    CHECK(out && strstr(out, "(16 samples)") != NULL);
    snprintf(args, sizeof args,
             "embed --checkpoint %s --split train --batch 8 --out e.st", ck);
    setenv("CLASSIC_PROGRESS_SECONDS", "0", 1);
    rc = run_here(args);
    unsetenv("CLASSIC_PROGRESS_SECONDS");
    CHECK(rc == 0);
    err = cl_test_slurp(cl_test_path("err.txt"));
    CHECK(err && strstr(err, "embed: 8/16 images (50%)") != NULL);
    /* By default a short evaluation prints no progress at all. */
    CHECK(run_here(args) == 0);
    err = cl_test_slurp(cl_test_path("err.txt"));
    CHECK(err && !strstr(err, "images ("));
}

CL_TEST(bench_takes_train_key_names)
{
    CHECK(cl_test_classic("bench --model resnet18 --stem cifar --batch_size 2 "
                          "--image_size 8 --num_classes 3 --steps 1 "
                          "--warmup 0 --mode infer --threads 1") == 0);
    CHECK(strstr(cl_test_out,
                 "resnet18, cifar stem, 3 classes, 8x8, batch 2") != NULL);
}

CL_TEST(hints_where_the_cause_is_known)
{
    const char *ck = tiny_run();
    REQUIRE(ck != NULL);
    /* ImageNet-stem RGB weights into a gray CIFAR-stem network. */
    char args[3000];
    snprintf(args, sizeof args,
             "train --dataset imagefolder --data_dir %s --model resnet18 "
             "--image_size 32 --batch_size 4 --epoch_size 1 --val_split val "
             "--num_parallel_workers 0 --stem cifar_pool --in_channels 1 "
             "--pretrained %s --ckpt_save_dir ft --log_level error",
             cl_test_path("folder"), ck);
    CHECK(run_here(args) == 1);
    const char *err = cl_test_slurp(cl_test_path("err.txt"));
    CHECK(err && strstr(err, "the stems differ") != NULL);
    CHECK(err && strstr(err, "give --stem imagenet --in_channels 3") != NULL);
    /* An empty .pth is named as a .pth, not as a broken safetensors. */
    FILE *f = fopen(cl_test_path("empty.pth"), "w");
    REQUIRE(f != NULL);
    fclose(f);
    CHECK(run_here("predict --checkpoint empty.pth folder/val/a/0.jpg") == 1);
    err = cl_test_slurp(cl_test_path("err.txt"));
    CHECK(err && strstr(err, "empty.pth: 0 bytes, too short to be a PyTorch "
                             ".pth") != NULL);
    CHECK(err && !strstr(err, "safetensors"));
}

/* Every line of `classic <args>` within 80 columns, and none holding bad. */
static void help_reads_well(const char *args, const char *bad)
{
    CHECK(cl_test_classic(args) == 0);
    const char *p = cl_test_out;
    while (*p) {
        size_t n = strcspn(p, "\n");
        if (n > 80)
            cl_test_fail(__FILE__, __LINE__,
                         "classic %s: a line of %zu "
                         "columns: %.*s",
                         args, n, (int)n, p);
        p += n + (p[n] == '\n');
    }
    if (bad && strstr(cl_test_out, bad))
        cl_test_fail(__FILE__, __LINE__, "classic %s still says \"%s\"", args,
                     bad);
}

CL_TEST(help_names_every_model_family)
{
    help_reads_well("--help", "a ResNet from");
    CHECK(strstr(cl_test_out, "ResNet or Swin") != NULL);
    help_reads_well("train --help", "Trains a ResNet as");
    CHECK(strstr(cl_test_out, "Trains a ResNet or a Swin") != NULL);
    help_reads_well("bench --help", NULL);
    help_reads_well("convert --help", NULL);
    const char *cmds[] = {"predict",  "eval",   "embed",
                          "retrieve", "export", "info"};
    for (int i = 0; i < 6; i++) {
        char args[64];
        snprintf(args, sizeof args, "%s --help", cmds[i]);
        help_reads_well(args, "resnetNN");
    }
    /* swin_micro is described at its own 32 px, a ResNet at 224. */
    CHECK(cl_test_classic("info --arch swin_micro") == 0);
    CHECK(strstr(cl_test_out, "swin_micro, 3 input channel(s), 1000 classes, "
                              "32x32 input") != NULL);
    CHECK(cl_test_classic("info --arch resnet50") == 0);
    CHECK(strstr(cl_test_out, "224x224 input") != NULL);
    /* A checkpoint's recipe: how to print it, in words that work. */
    const char *ck = tiny_run();
    REQUIRE(ck != NULL);
    char args[2000];
    snprintf(args, sizeof args, "info --checkpoint %s", cl_test_path(ck));
    CHECK(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "add --config to print it") != NULL);
}

CL_TEST(pretrained_weights_of_another_network_are_named)
{
    const char *ck = tiny_run();
    REQUIRE(ck != NULL);
    /* torchvision's resnet50 weights (random, as saved by torch.save) for a
     * resnet18 run. */
    char cmd[2000];
    snprintf(cmd, sizeof cmd,
             "cd %s && /usr/bin/python3 -c \"import torch, torchvision; "
             "torch.save(torchvision.models.resnet50().state_dict(), "
             "'r50.pth')\"",
             cl_test_tmpdir());
    REQUIRE(cl_test_run(cmd) == 0);
    char args[3000];
    snprintf(args, sizeof args,
             "train --dataset imagefolder --data_dir %s --model resnet18 "
             "--image_size 32 --batch_size 4 --epoch_size 1 --val_split val "
             "--num_parallel_workers 0 --pretrained r50.pth --ckpt_save_dir "
             "ft --log_level error",
             cl_test_path("folder"));
    CHECK(run_here(args) == 1);
    const char *err = cl_test_slurp(cl_test_path("err.txt"));
    CHECK(err && strstr(err, "the weights' blocks are those of resnet50, and "
                             "the model is a resnet18: give --model "
                             "resnet50") != NULL);
}
