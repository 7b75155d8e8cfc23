/* What a new user hits training from the shell: a root of train/ and val/
 * read as `classic data info` reads it, max_pixels as a key, a folder of
 * one class refused, a diverged loss printed readably, top-k named by the
 * number of classes and every validation labelled with its precision, and
 * a report whose axes, short runs and titles stay legible.
 * ctest-labels: cli */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "data/data.h"
#include "test_data_fixtures.h"
#include "train/metrics.h"
#include "train/trainer.h"

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

/* root/<split>/{dark,light}/<i>.png: n 20x24 RGB pictures, alternating
 * classes, each its own (a shade per class plus a gradient that moves
 * with i), so that a model can tell them apart; 0 on success. */
static int pictures(const char *root, const char *split, int n)
{
    char p[1400];
    static const char *const cls[] = {"dark", "light"};
    mkdir(root, 0755);
    snprintf(p, sizeof p, "%s/%s", root, split);
    mkdir(p, 0755);
    for (int c = 0; c < 2; c++) {
        snprintf(p, sizeof p, "%s/%s/%s", root, split, cls[c]);
        mkdir(p, 0755);
    }
    cl_image img;
    memset(&img, 0, sizeof img);
    if (cl_image_reserve(&img, 20, 24, 3) != CL_OK)
        return -1;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        int shade = i % 2 ? 150 : 10;
        for (int y = 0; y < 20; y++)
            for (int x = 0; x < 24; x++)
                for (int k = 0; k < 3; k++)
                    img.data[(y * 24 + x) * 3 + k] =
                        (uint8_t)((shade + 3 * y + x + 7 * i + 40 * k) % 256);
        snprintf(p, sizeof p, "%s/%s/%s/%d.png", root, split, cls[i % 2], i);
        rc = cl_image_save_png(p, &img) == CL_OK ? 0 : -1;
    }
    cl_image_free(&img);
    return rc;
}

/* The width of the number after each "<key> " in text: the longest, and
 * how many there were. */
static int longest_number(const char *text, const char *key, int *count)
{
    int longest = 0;
    *count = 0;
    size_t kl = strlen(key);
    for (const char *p = strstr(text, key); p; p = strstr(p + 1, key)) {
        const char *v = p + kl;
        int n = 0;
        while (v[n] && !isspace((unsigned char)v[n]) && v[n] != ')' &&
               v[n] != ',')
            n++;
        if (n == 0 || !(isdigit((unsigned char)v[0]) || v[0] == '-'))
            continue;
        longest = n > longest ? n : longest;
        (*count)++;
    }
    return longest;
}

/* The <svg id="id"> element of an HTML page, malloc'd, or NULL. */
static char *svg_of(const char *html, const char *id)
{
    char pat[96];
    snprintf(pat, sizeof pat, "<svg id=\"%s\"", id);
    const char *a = strstr(html, pat);
    const char *e = a ? strstr(a, "</svg>") : NULL;
    if (!e)
        return NULL;
    size_t n = (size_t)(e - a) + 6;
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, a, n);
        s[n] = '\0';
    }
    return s;
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

CL_TEST(a_diverged_loss_stays_readable)
{
    /* lr 1000 without warm-up: the loss grows by orders of magnitude each
     * step but stays finite for a few. */
    REQUIRE(pictures(cl_test_path("folder"), "train", 12) == 0);
    REQUIRE(train("run", "--val_split '' --lr 1000 --warmup_epochs 0 "
                         "--per_print_times 1 --progress plain") == 0);
    double loss[8];
    int64_t step[8];
    int n =
        cl_test_read_losses(cl_test_path("run/metrics.jsonl"), loss, step, 8);
    REQUIRE(n == 3);
    double big = 0;
    for (int i = 0; i < n; i++)
        big = loss[i] > big ? loss[i] : big;
    if (big < 1e5) {
        cl_test_skip("the loss reached only %g on this machine", big);
        return;
    }
    /* Every loss a person reads fits 10 characters ("1.532e+11"); the
     * log keeps the full number. */
    int count = 0;
    int w = longest_number(cl_test_out, "loss ", &count);
    CHECK(count == 3);
    if (w > 10)
        cl_test_fail(__FILE__, __LINE__, "a loss of %d characters in:\n%s", w,
                     cl_test_out);
    w = longest_number(cl_test_out, "(avg ", &count);
    CHECK(count == 3 && w <= 10);
    w = longest_number(cl_test_out, "loss (avg) ", &count);
    CHECK(count == 1 && w <= 10);
    char four[32];
    snprintf(four, sizeof four, "%.4g", big);
    CHECK(strstr(cl_test_out, four) != NULL);
    CHECK(atof(four) != big); /* metrics.jsonl has more than 4 digits */
}

CL_TEST(top_k_and_precision_are_named_alike_everywhere)
{
    /* Two classes: top-k is top-2 in training's log, its summary, the
     * log's eval lines, the report and `classic eval`; every validation
     * says its precision (f32 at amp_level O0, the only one this CPU may
     * lack bf16 for). */
    REQUIRE(fx_image_split(cl_test_path("folder"), "train", 8) == 0);
    REQUIRE(fx_image_split(cl_test_path("folder"), "val", 4) == 0);
    REQUIRE(train("run", "--val_split val --log_level info") == 0);
    CHECK(strstr(cl_test_out, "top-5") == NULL);
    CHECK(strstr(cl_test_out, "top-2 ") != NULL);
    const char *ev = strstr(cl_test_out, "epoch 1 eval");
    CHECK(ev && strstr(ev, "precision f32)") != NULL);
    const char *fin = strstr(cl_test_out, "validation: top-1");
    CHECK(fin && strstr(fin, "top-2") && strstr(fin, "precision f32"));
    const char *log = cl_test_slurp(cl_test_path("run/metrics.jsonl"));
    REQUIRE(log != NULL);
    const char *line = strstr(log, "\"kind\":\"eval\"");
    CHECK(line && strstr(line, "\"val_topk\":2") &&
          strstr(line, "\"precision\":\"f32\""));
    char *html = cl_test_read_file(cl_test_path("run/report.html"), NULL);
    REQUIRE(html != NULL);
    CHECK(strstr(html, "top-5") == NULL);
    CHECK(strstr(html, "val top-2") != NULL);
    CHECK(strstr(html, "precision f32") != NULL);
    CHECK(strstr(html, "Validation accuracy (f32)") != NULL);
    free(html);
    char args[2000];
    snprintf(args, sizeof args, "eval --checkpoint %s",
             cl_test_path("run/resnet18-last.safetensors"));
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "top-2 ") != NULL);
    CHECK(strstr(cl_test_out, "top-5") == NULL);
    CHECK(strstr(cl_test_out, "precision f32") != NULL);
}

CL_TEST(a_two_step_report_draws_its_curves_and_titles)
{
    REQUIRE(fx_image_split(cl_test_path("folder"), "train", 8) == 0);
    REQUIRE(fx_image_split(cl_test_path("folder"), "val", 4) == 0);
    REQUIRE(train("run", "--val_split val --log_level error") == 0);
    char *html = cl_test_read_file(cl_test_path("run/report.html"), NULL);
    REQUIRE(html != NULL);
    /* One logged step: each per-step chart shows it as a dot, since a
     * path of one point draws nothing. */
    const char *ids[] = {"chart-loss", "chart-lr", "chart-ips"};
    for (int i = 0; i < 3; i++) {
        char *svg = svg_of(html, ids[i]);
        CHECK(svg && strstr(svg, "<circle") != NULL);
        if (svg && !strstr(svg, "<circle"))
            fprintf(stderr, "%s draws nothing:\n%s\n", ids[i], svg);
        free(svg);
    }
    /* The confusion matrix of 2 classes is as wide as its title (14 px
     * bold, ~0.6 em a character). */
    char *cm = svg_of(html, "confusion");
    REQUIRE(cm != NULL);
    const char *vb = strstr(cm, "viewBox=\"0 0 ");
    REQUIRE(vb != NULL);
    double w = atof(vb + 13);
    CHECK(w >= 0.58 * 14 * (double)strlen("Confusion matrix (row-normalised)"));
    free(cm);
    free(html);
}

CL_TEST(a_log_axis_keeps_its_labels_apart)
{
    /* A loss from 0.1 to 1e31 over 40 steps: 32 decades on a 204 px
     * axis. */
    mkdir(cl_test_path("div"), 0755);
    FILE *f = fopen(cl_test_path("div/metrics.jsonl"), "w");
    REQUIRE(f != NULL);
    for (int s = 1; s <= 40; s++) {
        double l = 0.1 * pow(10, s * 0.8);
        fprintf(f,
                "{\"kind\":\"train\",\"step\":%d,\"epoch\":1,\"loss\":%.17g,"
                "\"loss_avg\":%.17g,\"lr\":0.1,\"img_s\":10,\"step_ms\":10,"
                "\"data_wait\":0}\n",
                s, l, l);
    }
    fclose(f);
    char args[2000];
    snprintf(args, sizeof args, "report %s --out %s", cl_test_path("div"),
             cl_test_path("div.html"));
    REQUIRE(cl_test_classic(args) == 0);
    char *html = cl_test_read_file(cl_test_path("div.html"), NULL);
    REQUIRE(html != NULL);
    char *svg = svg_of(html, "chart-loss");
    REQUIRE(svg != NULL);
    const char *axis = strstr(svg, "<g class=\"y-axis\">");
    REQUIRE(axis != NULL);
    const char *end = strstr(axis, "</g>");
    double prev = NAN, gap = INFINITY;
    int n = 0;
    for (const char *p = strstr(axis, "class=\"tick-label\""); p && p < end;
         p = strstr(p + 1, "class=\"tick-label\"")) {
        const char *y = strstr(p, " y=\"");
        REQUIRE(y != NULL);
        double v = atof(y + 4);
        if (n++ > 0 && fabs(v - prev) < gap)
            gap = fabs(v - prev);
        prev = v;
    }
    CHECK(n >= 3);
    if (!(gap >= 14))
        cl_test_fail(__FILE__, __LINE__,
                     "%d labels on the log axis, %.1f px apart", n, gap);
    free(svg);
    free(html);
}

CL_TEST(labels_for_a_person)
{
    char b[32];
    CHECK(strcmp(cl_metrics_fmt_loss(0.69314718, b, sizeof b), "0.6931") == 0);
    CHECK(strcmp(cl_metrics_fmt_loss(12345.678, b, sizeof b), "12345.6780") ==
          0);
    CHECK(strcmp(cl_metrics_fmt_loss(8375958218624040116566804660224.0, b,
                                     sizeof b),
                 "8.376e+30") == 0);
    CHECK(strcmp(cl_metrics_fmt_loss(NAN, b, sizeof b), "nan") == 0);
    CHECK(cl_metrics_topk_k(2) == 2 && cl_metrics_topk_k(1000) == 5);
    /* The training's validation runs the training plan: bf16 at O2. */
    CHECK(strcmp(cl_train_eval_precision(0), "f32") == 0);
    CHECK(strcmp(cl_train_eval_precision(2), "bf16") == 0);
    CHECK(strcmp(cl_train_eval_precision(1), "bf16 (O1)") == 0);
}
