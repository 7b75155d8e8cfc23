/* io config: defaults, YAML loading with line-numbered errors, overrides,
 * the resolved-config round trip, --help, and every recipe in configs/.
 * ctest-labels: unit */
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "io/config.h"
#include "io/strbuf.h"

static cl_status load_text(cl_config *c, const char *text)
{
    cl_config_defaults(c);
    return cl_config_load_yaml_text(c, text, strlen(text), "recipe.yaml");
}

/* Writes c, loads the text into fresh defaults, returns the first key that
 * differs ("" when the load failed). */
static const char *round_trip(const cl_config *c)
{
    cl_strbuf b;
    cl_strbuf_init(&b);
    if (cl_config_format_yaml(c, &b) != CL_OK)
        return "";
    cl_config back;
    cl_config_defaults(&back);
    cl_status s = cl_config_load_yaml_text(&back, b.data, b.len, "resolved");
    cl_strbuf_free(&b);
    if (s != CL_OK) {
        fprintf(stderr, "reload failed: %s\n", cl_last_error());
        return "";
    }
    return cl_config_diff(c, &back);
}

CL_TEST(defaults)
{
    cl_config c;
    cl_config_defaults(&c);
    CHECK_OK(cl_config_check(&c));
    CHECK(c.dataset == CL_CFG_DATASET_FASHION_MNIST);
    CHECK(c.model == CL_CFG_MODEL_RESNET50);
    CHECK(c.batch_size == 64 && c.epoch_size == 90);
    CHECK(c.lr == 0.1 && c.momentum == 0.9 && c.weight_decay == 1e-4);
    CHECK(c.n_scale == 2 && c.scale[0] == 0.08 && c.scale[1] == 1.0);
    CHECK(c.n_ratio == 2 && c.ratio[1] == 1.3333333333333333);
    CHECK(c.n_mean == 0 && c.n_milestones == 0);
    CHECK(c.filter_bias_and_bn == 1 && c.shuffle == 1 && c.nesterov == 0);
    CHECK(strcmp(c.ckpt_save_dir, "./ckpt") == 0);
    CHECK(strcmp(c.train_split, "train") == 0 && c.data_dir[0] == '\0');
    CHECK(c.eps == 1e-8 && c.min_lr == 1e-6 && c.mixup_prob == 1.0);
    CHECK(c.accumulation_steps == 1 && c.per_print_times == 100);
    CHECK(strcmp(cl_config_enum_name("model", c.model), "resnet50") == 0);
    CHECK(strcmp(cl_config_enum_name("amp_level", CL_CFG_AMP_O2), "O2") == 0);
    CHECK(cl_config_enum_name("model", 99) == NULL);
    CHECK(cl_config_enum_name("lr", 0) == NULL);
    int n = cl_config_key_count();
    CHECK(n > 70);
    char buf[128];
    for (int i = 0; i < n; i++)
        CHECK_OK(cl_config_get(&c, cl_config_key_name(i), buf, sizeof buf));
    CHECK(cl_config_key_name(n) == NULL);
    CHECK_OK(cl_config_get(&c, "scale", buf, sizeof buf));
    CHECK(strcmp(buf, "[0.08, 1]") == 0);
    CHECK_OK(cl_config_get(&c, "data_dir", buf, sizeof buf));
    CHECK(strcmp(buf, "\"\"") == 0);
}

CL_TEST(load_values_and_aliases)
{
    cl_config c;
    const char *y = "# a recipe\n"
                    "dataset: cifar10\n"
                    "data_dir: \"/data/cifar 10\"\n"
                    "model: resnet18\n"
                    "batch_size: 256\n"
                    "lr: 1e-3\n"
                    "use_nesterov: True\n"
                    "image_resize: 224\n"
                    "scheduler: multi_step_decay\n"
                    "multi_step_decay_milestones:\n  - 30\n  - 60\n"
                    "mean: [0.5, 0.25, 0.125]\n"
                    "std: 0.5\n"
                    "color_jitter: 0.4\n"
                    "class_indexing:\n"
                    "log_interval: 7\n"
                    "gradient_accumulation_steps: 4\n"
                    "drop_remainder: no\n"
                    "amp_level: O2\n";
    REQUIRE_OK(load_text(&c, y));
    CHECK(c.dataset == CL_CFG_DATASET_CIFAR10);
    CHECK(strcmp(c.data_dir, "/data/cifar 10") == 0);
    CHECK(c.model == CL_CFG_MODEL_RESNET18 && c.batch_size == 256);
    CHECK(c.lr == 1e-3 && c.nesterov == 1 && c.image_size == 224);
    CHECK(c.scheduler == CL_CFG_SCHED_MULTI_STEP);
    CHECK(c.n_milestones == 2 && c.milestones[0] == 30 &&
          c.milestones[1] == 60);
    CHECK(c.n_mean == 3 && c.mean[2] == 0.125 && c.n_std == 1 &&
          c.std[0] == 0.5);
    CHECK(c.n_color_jitter == 1 && c.color_jitter[0] == 0.4);
    CHECK(c.class_indexing[0] == '\0');
    CHECK(c.per_print_times == 7 && c.accumulation_steps == 4);
    CHECK(c.drop_remainder == 0 && c.amp_level == CL_CFG_AMP_O2);
    /* Untouched keys keep their defaults. */
    CHECK(c.momentum == 0.9 && c.epoch_size == 90);

    /* Empty and comment-only files change nothing. */
    cl_config d;
    CHECK_OK(load_text(&c, ""));
    cl_config_defaults(&d);
    CHECK(cl_config_diff(&c, &d) == NULL);
    CHECK_OK(load_text(&c, "# nothing\n\n"));
    CHECK(cl_config_diff(&c, &d) == NULL);
    CHECK_OK(load_text(&c, "---\n...\n"));
    CHECK(cl_config_diff(&c, &d) == NULL);
    /* A quoted "null" is a string; a bare one is empty. */
    CHECK_OK(load_text(&c, "ckpt_save_dir: 'null'\n"));
    CHECK(strcmp(c.ckpt_save_dir, "null") == 0);
    CHECK_OK(load_text(&c, "ckpt_save_dir: ~\n"));
    CHECK(c.ckpt_save_dir[0] == '\0');
}

CL_TEST(load_errors_name_line_and_key)
{
    static const struct {
        const char *yaml, *msg;
    } bad[] = {
        {"lr: 0.1\nmodel: resnet50\nlearning_rate: 0.1\n",
         "recipe.yaml:3: unknown key 'learning_rate' (did you mean 'lr'?)"},
        {"batch_sise: 3\n",
         "recipe.yaml:1: unknown key 'batch_sise' (did you mean "
         "'batch_size'?)"},
        {"momentun: 0.5\n", "(did you mean 'momentum'?)"},
        {"epochs: 3\n", "(did you mean 'epoch_size'?)"},
        {"amp: O2\n", "unknown key 'amp' (did you mean 'amp_level'?)"},
        {"zzzzqqq: 1\n",
         "unknown key 'zzzzqqq' (`classic train --help` lists the keys)"},
        {"seed: 1\nbatch_size: abc\n",
         "recipe.yaml:2: key 'batch_size' expects a positive integer, found "
         "'abc'"},
        {"batch_size: 0\n",
         "recipe.yaml:1: key 'batch_size' expects a positive integer, found "
         "'0'"},
        {"batch_size: 12.5\n", "expects a positive integer, found '12.5'"},
        {"batch_size: 99999999999999999999\n", "expects a positive integer"},
        {"batch_size:\n", "expects a positive integer, found ''"},
        {"lr: -0.1\n", "key 'lr' expects a number in [0, 1000], found '-0.1'"},
        {"lr: nan\n", "key 'lr' expects a number in [0, 1000], found 'nan'"},
        {"lr: .inf\n", "found '.inf'"},
        {"lr: 0x10\n", "found '0x10'"},
        {"momentum: 1.0\n",
         "key 'momentum' expects a number in [0, 1), found '1.0'"},
        {"opt: adam\n",
         "key 'opt' expects one of momentum, sgd, adamw, found 'adam'"},
        {"model: resnet51\n",
         "expects one of resnet18, resnet34, resnet50, resnet101, resnet152"},
        {"shuffle: maybe\n", "key 'shuffle' expects true or false"},
        {"mean: [123.675, 116.28, 103.53]\nstd: [1, 1, 1]\n",
         "key 'mean' expects a list of 0 to 3 numbers in [0, 1], found "
         "'123.675' (0..1 units as torchvision"},
        {"std: [0, 0.5, 0.5]\nmean: [0.5]\n", "in (0, 1], found '0'"},
        {"mean: [0.1, 0.2, 0.3, 0.4]\n", "found 4 items"},
        {"scale: [0.5]\n", "key 'scale' expects a list of 2 numbers"},
        {"milestones: [30, x]\n",
         "key 'milestones' expects a list of up to 32 positive integers"},
        {"milestones: [[1]]\n", "found a list inside the list"},
        {"model: [resnet50]\n",
         "recipe.yaml:1: key 'model' expects one of resnet18"},
        {"lr:\n  base: 0.1\n", "key 'lr' expects a number in [0, 1000], "
                               "found a mapping"},
        {"lr: 0.1\nseed: 3\nlr: 0.2\n",
         "recipe.yaml:3: key 'lr' is given twice (first at line 1)"},
        {"image_size: 64\nimage_resize: 32\n",
         "key 'image_size' is given twice"},
        {"- lr\n- 0.1\n", "recipe.yaml:1: the top level must be a mapping"},
        {"just text\n", "the top level must be a mapping of keys (key: value "
                        "lines), found a scalar"},
        {"lr: 0.1\n---\nlr: 0.2\n", "recipe.yaml:2: more than one YAML "
                                    "document"},
        {"base: &b 0.1\n", "unknown key 'base'"},
        {"lr: &x 0.1\nmin_lr: *x\n", "found an alias"},
        {"lr: 0.1\nmomentum: 0.9: 3\n",
         "recipe.yaml:2:14: YAML error: mapping values are not allowed"},
        {"milestones: [1, 2\n", "YAML error"},
        /* An unclosed list where a number belongs: the syntax error, not
         * "expects a number, found a list". */
        {"lr: [0.1\n",
         "recipe.yaml:2:1: YAML error: did not find expected ',' or ']'"},
        {"seed: 3\nlr: {a: [1, 2}\n", "recipe.yaml:2:14: YAML error"},
        {"data_dir: \"unterminated\n", "recipe.yaml:2:1: YAML error"},
        {"\tlr: 0.1\n", "YAML error"},
        /* Cross-key checks, named by file. */
        {"scheduler: multi_step\n",
         "recipe.yaml: scheduler multi_step needs milestones"},
        {"milestones: [60, 30]\n", "milestones must increase (30 after 60)"},
        {"mean: [0.5, 0.5]\nstd: [0.5, 0.5]\n",
         "mean has 2 values for in_channels 3 (give 1 or 3 values)"},
        {"in_channels: 1\nmean: [0.1, 0.2, 0.3]\nstd: [0.1, 0.2, 0.3]\n",
         "mean has 3 values for in_channels 1 (give 1 value)"},
        {"in_channels: 2\nmean: [0.1, 0.2]\nstd: [0.1, 0.2, 0.3]\n",
         "std has 3 values for in_channels 2 (give 1 or 2 values)"},
        {"mean: [0.5]\n", "mean and std must be given together"},
        {"dataset: cifar10\n", "recipe.yaml: dataset cifar10 needs data_dir"},
        {"min_lr: 0.5\nlr: 0.1\n", "min_lr 0.5 is above lr 0.1"},
        {"scale: [1.0, 0.5]\n", "scale [1, 0.5] is not increasing"},
        {"color_jitter: [0.1, 0.2]\n", "color_jitter takes 1 value"},
        {"nesterov: true\nmomentum: 0\n", "nesterov needs momentum > 0"},
        {"class_indexing: classes.txt\n", "applies to imagefolder only"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cl_config c;
        CHECK_ERR(load_text(&c, bad[i].yaml), CL_ERR_CONFIG, bad[i].msg);
    }
    cl_config c;
    cl_config_defaults(&c);
    CHECK_ERR(cl_config_load_yaml(&c, cl_test_path("missing.yaml")), CL_ERR_IO,
              "missing.yaml: cannot open");
}

CL_TEST(command_line_overrides)
{
    cl_config c;
    cl_config_defaults(&c);
    CHECK_OK(cl_config_set(&c, "batch-size", "32"));
    CHECK(c.batch_size == 32);
    CHECK_OK(cl_config_set(&c, "mean", "0.5,0.25,0.125"));
    CHECK(c.n_mean == 3 && c.mean[1] == 0.25);
    CHECK_OK(cl_config_set(&c, "std", "0.5"));
    CHECK_OK(cl_config_set(&c, "milestones", "[10, 20 ,30]"));
    CHECK(c.n_milestones == 3 && c.milestones[2] == 30);
    CHECK_OK(cl_config_set(&c, "milestones", "[ ]"));
    CHECK(c.n_milestones == 0 && c.milestones[0] == 0);
    CHECK_OK(cl_config_set(&c, "use_nesterov", "yes"));
    CHECK(c.nesterov == 1);
    CHECK_OK(cl_config_set(&c, "scheduler", "multi_step_decay"));
    CHECK(c.scheduler == CL_CFG_SCHED_MULTI_STEP);
    CHECK_OK(cl_config_set(&c, "data_dir", "/tmp/x"));
    CHECK(strcmp(c.data_dir, "/tmp/x") == 0);
    /* --amp is the command line's short spelling of amp_level. */
    CHECK_OK(cl_config_set(&c, "amp", "O2"));
    CHECK(c.amp_level == CL_CFG_AMP_O2);
    CHECK_ERR(cl_config_set(&c, "amp", "O3"), CL_ERR_CONFIG,
              "key 'amp_level' expects one of O0, O1, O2, found 'O3'");
    CHECK_OK(cl_config_set(&c, "amp_level", "O0"));
    CHECK_ERR(cl_config_set(&c, "learning-rate", "0.1"), CL_ERR_CONFIG,
              "command line: unknown key 'learning_rate' (did you mean "
              "'lr'?)");
    CHECK_ERR(cl_config_set(&c, "batch_size", "-4"), CL_ERR_CONFIG,
              "command line: key 'batch_size' expects a positive integer, "
              "found '-4'");
    CHECK_ERR(cl_config_set(&c, "milestones", "1,2,"), CL_ERR_CONFIG,
              "found ''");
    CHECK_ERR(cl_config_set(&c, "backend", "cuda"), CL_ERR_CONFIG,
              "expects one of onednn, ref, found 'cuda'");
    char longp[700];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    CHECK_ERR(cl_config_set(&c, "data_dir", longp), CL_ERR_CONFIG,
              "key 'data_dir' is 699 bytes long, at most 511 fit");
    CHECK(strcmp(c.data_dir, "/tmp/x") == 0); /* unchanged on failure */
    /* The cross-key check runs when the caller asks, after all overrides. */
    CHECK_ERR(cl_config_check(&c), CL_ERR_CONFIG,
              "config: scheduler multi_step needs milestones");
    CHECK_OK(cl_config_set(&c, "milestones", "5"));
    CHECK_OK(cl_config_check(&c));
    c.model = 42;
    CHECK_ERR(cl_config_check(&c), CL_ERR_CONFIG,
              "key 'model' holds 42, outside its 7 values");
}

CL_TEST(resolved_config_round_trip)
{
    cl_config c, d;
    cl_config_defaults(&c);
    CHECK(round_trip(&c) == NULL);
    /* Change every kind of key away from its default. */
    static const char *const sets[][2] = {
        {"dataset", "imagefolder"},
        {"data_dir", "/data/im \"net\"\n\\x\xc3\xa9 #not a comment"},
        {"train_split", "train: yes"},
        {"val_split", ""},
        {"class_indexing", "- classes.txt"},
        {"num_classes", "1000"},
        {"limit_train", "123"},
        {"on_bad_image", "skip"},
        {"prefetch", "9"},
        {"shuffle", "false"},
        {"image_size", "224"},
        {"crop_pct", "0.875"},
        {"random_crop_padding", "4"},
        {"hflip", "0.5"},
        {"random_resized_crop", "true"},
        {"scale", "0.25,1"},
        {"ratio", "[0.1, 10]"},
        {"color_jitter", "0.1,0.2,0.30000000000000004"},
        {"mean", "0.485,0.456,0.406"},
        {"std", "0.229,0.224,0.225"},
        {"re_prob", "0.25"},
        {"mixup", "0.2"},
        {"cutmix", "1"},
        {"mixup_prob", "0.5"},
        {"label_smoothing", "0.1"},
        {"model", "resnet152"},
        {"stem", "cifar"},
        {"pretrained", "w.safetensors"},
        {"freeze_backbone", "on"},
        {"backbone_lr_mult", "0.1"},
        {"opt", "adamw"},
        {"lr", "0.0012345678901234567"},
        {"momentum", "0"},
        {"weight_decay", "0.05"},
        {"beta2", "0.98"},
        {"eps", "1e-12"},
        {"lr_scale", "linear"},
        {"scheduler", "multi_step"},
        {"milestones", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,"
                       "21,22,23,24,25,26,27,28,29,30,31,32"},
        {"decay_rate", "0.5"},
        {"min_lr", "0"},
        {"epoch_size", "3"},
        {"grad_clip_norm", "5"},
        {"amp_level", "O1"},
        {"backend", "ref"},
        {"threads", "2"},
        {"seed", "2147483647"},
        {"dist", "mpi"},
        {"ckpt_save_dir", "runs/x y"},
        {"ckpt_save_interval", "500"},
        {"log_level", "debug"},
    };
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) {
        cl_config before = c;
        CHECK_OK(cl_config_set(&c, sets[i][0], sets[i][1]));
        const char *changed = cl_config_diff(&before, &c);
        CHECK(changed && strcmp(changed, sets[i][0]) == 0);
    }
    CHECK_OK(cl_config_check(&c));
    const char *diff = round_trip(&c);
    CHECK(diff == NULL);
    if (diff)
        fprintf(stderr, "first differing key: %s\n", diff);
    cl_config_defaults(&d);
    CHECK(cl_config_diff(&c, &d) != NULL);

    /* Every key appears once in the written file, and the FILE* path
     * writes the same text. */
    cl_strbuf b;
    cl_strbuf_init(&b);
    REQUIRE_OK(cl_config_format_yaml(&c, &b));
    for (int i = 0; i < cl_config_key_count(); i++) {
        char pat[80];
        snprintf(pat, sizeof pat, "\n%s: ", cl_config_key_name(i));
        const char *at = strstr(b.data, pat);
        CHECK(at != NULL && strstr(at + 1, pat) == NULL);
    }
    const char *path = cl_test_path("resolved.yaml");
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    CHECK_OK(cl_config_write_yaml(&c, f));
    fclose(f);
    cl_config_defaults(&d);
    CHECK_OK(cl_config_load_yaml(&d, path));
    CHECK(cl_config_diff(&c, &d) == NULL);
    cl_strbuf_free(&b);
}

CL_TEST(help_lists_every_key)
{
    const char *path = cl_test_path("help.txt");
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    cl_config_print_help(f);
    fclose(f);
    f = fopen(path, "r");
    REQUIRE(f);
    static char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    for (int i = 0; i < cl_config_key_count(); i++) {
        char pat[80];
        snprintf(pat, sizeof pat, "  %s ", cl_config_key_name(i));
        CHECK(strstr(text, pat) != NULL);
    }
    CHECK(strstr(text, "[mindcv: image_resize]") != NULL);
    CHECK(strstr(text, "(default 0.1)") != NULL);
}

CL_TEST(every_recipe_in_configs_loads)
{
    const char *dir = CL_SOURCE_DIR "/configs";
    DIR *d = opendir(dir);
    REQUIRE(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".yaml") != 0)
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        cl_config c;
        cl_config_defaults(&c);
        cl_status s = cl_config_load_yaml(&c, path);
        if (s != CL_OK)
            cl_test_fail(__FILE__, __LINE__, "%s: %s", e->d_name,
                         cl_last_error());
        const char *diff = round_trip(&c);
        if (diff)
            cl_test_fail(__FILE__, __LINE__,
                         "%s: key %s differs after the "
                         "round trip",
                         e->d_name, diff);
        n++;
    }
    closedir(d);
    CHECK(n >= 4);

    cl_config c;
    cl_config_defaults(&c);
    REQUIRE_OK(cl_config_load_yaml(&c, CL_SOURCE_DIR
                                   "/configs/resnet50_fashion_mnist.yaml"));
    CHECK(c.dataset == CL_CFG_DATASET_FASHION_MNIST && c.in_channels == 1);
    /* Used at native size, one maxpool after the 3x3/1 stem conv. */
    CHECK(c.stem == CL_CFG_STEM_CIFAR_POOL && c.image_size == 28);
    CHECK(c.zero_init_residual == 1);
    CHECK(c.batch_size >= 64 && c.batch_size <= 128);
    CHECK(c.opt == CL_CFG_OPT_MOMENTUM && c.lr == 0.1);
    CHECK(c.scheduler == CL_CFG_SCHED_COSINE_DECAY && c.warmup_epochs > 0);
    CHECK(c.weight_decay == 5e-4 && c.label_smoothing == 0.1);
    CHECK(c.random_crop_padding == 2 && c.hflip == 0.5);

    cl_config_defaults(&c);
    REQUIRE_OK(cl_config_load_yaml(&c, CL_SOURCE_DIR
                                   "/configs/resnet50_cifar10_seed.yaml"));
    CHECK(c.batch_size == 32 && c.lr == 0.001 && c.momentum == 0.9);
    CHECK(c.epoch_size == 40 && c.ckpt_save_interval == 500);
    CHECK(c.stem == CL_CFG_STEM_IMAGENET && c.image_size == 32);

    cl_config_defaults(&c);
    REQUIRE_OK(cl_config_load_yaml(&c, CL_SOURCE_DIR
                                   "/configs/resnet50_cifar10.yaml"));
    CHECK(c.stem == CL_CFG_STEM_CIFAR && c.batch_size == 128);
    CHECK(c.warmup_epochs == 5 && c.epoch_size == 200);

    cl_config_defaults(&c);
    REQUIRE_OK(cl_config_load_yaml(&c, CL_SOURCE_DIR
                                   "/configs/resnet50_imagenet.yaml"));
    CHECK(c.dataset == CL_CFG_DATASET_IMAGEFOLDER && c.batch_size == 32);
    CHECK(c.scheduler == CL_CFG_SCHED_MULTI_STEP && c.n_milestones == 3 &&
          c.milestones[0] == 30 && c.milestones[1] == 60 &&
          c.milestones[2] == 80 && c.decay_rate == 0.1);
    CHECK(c.epoch_size == 90 && c.weight_decay == 1e-4);
    CHECK(c.random_resized_crop && c.image_size == 224 && c.crop_pct == 0.875);
}

/* Random edits of a recipe: a clean load or one CL_ERR_CONFIG, never a
 * crash (libyaml's errors included). */
CL_TEST(mutated_recipes_fail_cleanly)
{
    const char *src = "dataset: cifar10\ndata_dir: \"d\"\nmean: [0.5, 0.5, "
                      "0.5]\nstd: [0.2, 0.2, 0.2]\nmilestones:\n  - 3\n  - "
                      "6\nscheduler: multi_step\nlr: 0.1 # peak\nopt: sgd\n";
    size_t n = strlen(src);
    char *b = malloc(n + 1);
    REQUIRE(b);
    static const char alphabet[] = ":-[]{},#&*!|>'\"\n\t 0123456789.e_abz";
    uint64_t x = 0x2545F4914F6CDD1Dull;
    int ok = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(b, src, n + 1);
        for (int e = 0; e < 1 + it % 3; e++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            b[(x >> 8) % n] = alphabet[(x >> 40) % (sizeof alphabet - 1)];
        }
        cl_config c;
        cl_config_defaults(&c);
        cl_status s = cl_config_load_yaml_text(&c, b, n, "m.yaml");
        CHECK(s == CL_OK || s == CL_ERR_CONFIG);
        if (s != CL_OK)
            CHECK(strncmp(cl_last_error(), "m.yaml", 6) == 0);
        else
            ok++;
    }
    CHECK(ok > 0 && ok < 3000);
    free(b);
}
