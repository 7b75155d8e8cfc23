/* `classic report`: run logs read as a run in progress or a resumed run
 * writes them, the page's charts, escaping and embedded images checked in
 * a real browser (headless Chromium: DOM dump, console errors,
 * screenshot), the evaluation against the trainer's own, --compare and
 * the errors.
 * ctest-labels: report */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data.h"
#include "harness.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "io/strbuf.h"
#include "models/resnet.h"
#include "report/report.h"
#include "report/report_internal.h"
#include "core/mem.h"
#include "io/safetensors.h"
#include "train/train_state.h"
#include "train/trainer.h"
#include "train/val_record.h"

#define CHROMIUM "/usr/bin/chromium"

/* The whole file as a NUL-terminated string (free it), or NULL. */
static void spit(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL;
         p += strlen(needle))
        n++;
    return n;
}

/* Points (M and L commands) of the d attribute of the element with this
 * id; -1 when it is missing. */
static int path_points(const char *html, const char *id)
{
    char key[96];
    snprintf(key, sizeof key, "id=\"%s\"", id);
    const char *p = strstr(html, key);
    if (!p)
        return -1;
    const char *end = strchr(p, '>');
    const char *d = strstr(p, " d=\"");
    if (!d || (end && d > end))
        return -1;
    int n = 0;
    for (d += 4; *d && *d != '"'; d++)
        n += *d == 'M' || *d == 'L';
    return n;
}

static int have_chromium(void)
{
    if (access(CHROMIUM, X_OK) == 0)
        return 1;
    cl_test_fail(__FILE__, __LINE__,
                 "%s is missing: the report tests need a real browser; "
                 "install it with scripts/install-deps.sh (Debian package "
                 "'chromium')",
                 CHROMIUM);
    return 0;
}

/* Runs headless Chromium on file://html with `extra` flags, stdout to
 * out_path and stderr to err_path; a fresh profile each time. */
static int chromium(const char *html, const char *extra, const char *out_path,
                    const char *err_path)
{
    static int serial;
    char prof[600], cmd[4096];
    snprintf(prof, sizeof prof, "%s/chrome-profile-%d", cl_test_tmpdir(),
             serial++);
    snprintf(cmd, sizeof cmd,
             "timeout 120 " CHROMIUM " --headless --no-sandbox --disable-gpu "
             "--no-first-run --disable-background-networking "
             "--disable-component-update --disable-sync "
             "--user-data-dir=%s %s file://%s >%s 2>%s",
             prof, extra, html, out_path, err_path);
    return cl_test_run(cmd);
}

/* The DOM Chromium builds from the page (NULL on failure). */
static char *browser_dom(const char *html)
{
    const char *out = cl_test_path("dom.html"), *err = cl_test_path("dom.err");
    int rc = chromium(html, "--dump-dom", out, err);
    if (rc != 0) {
        cl_test_fail(__FILE__, __LINE__, "chromium --dump-dom exited %d", rc);
        return NULL;
    }
    return cl_test_read_file(out, NULL);
}

/* Loads the page with console logging and takes a screenshot: no script
 * error may appear and the PNG must hold a real rendering. */
static void browser_render_check(const char *html, const char *png)
{
    const char *out = cl_test_path("shot.out"), *err = cl_test_path("shot.err");
    char extra[700];
    snprintf(extra, sizeof extra,
             "--enable-logging=stderr --v=0 --screenshot=%s "
             "--window-size=1280,2000",
             png);
    unlink(png);
    CHECK(chromium(html, extra, out, err) == 0);
    char *log = cl_test_read_file(err, NULL);
    REQUIRE(log != NULL);
    CHECK(strstr(log, "Uncaught") == NULL);
    CHECK(strstr(log, "ERROR:CONSOLE") == NULL);
    if (strstr(log, "Uncaught") || strstr(log, "ERROR:CONSOLE"))
        fprintf(stderr, "browser console:\n%s\n", log);
    free(log);
    struct stat st;
    REQUIRE(stat(png, &st) == 0);
    /* A blank 1280x2000 page compresses to a few kB; charts, a heatmap
     * and photos take far more. */
    CHECK(st.st_size > 40000);
    size_t n = 0;
    char *p = cl_test_read_file(png, &n);
    REQUIRE(p && n > 24);
    CHECK(memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0);
    /* IHDR width and height, big-endian. */
    const unsigned char *u = (const unsigned char *)p;
    unsigned w = (unsigned)u[16] << 24 | u[17] << 16 | u[18] << 8 | u[19];
    unsigned h = (unsigned)u[20] << 24 | u[21] << 16 | u[22] << 8 | u[23];
    CHECK(w == 1280 && h == 2000);
    free(p);
}

/* ---- run directories made by hand ------------------------------------ */

static void train_line(cl_strbuf *b, int step, int epoch, double loss,
                       double lr)
{
    cl_strbuf_addf(b,
                   "{\"kind\":\"train\",\"step\":%d,\"epoch\":%d,\"loss\":%.6g,"
                   "\"loss_avg\":%.6g,\"lr\":%.6g,\"img_s\":%.4g,"
                   "\"step_ms\":%.4g,\"data_wait\":%.4g}\n",
                   step, epoch, loss, loss * 1.1, lr, 100.0 + step % 7,
                   320.0 - step % 5, 0.01 * (step % 3));
}

static void eval_line(cl_strbuf *b, int step, int epoch, double top1)
{
    cl_strbuf_addf(b,
                   "{\"kind\":\"eval\",\"step\":%d,\"epoch\":%d,"
                   "\"val_top1\":%.6g,\"val_top5\":%.6g,\"val_loss\":%.6g,"
                   "\"val_samples\":200,\"epoch_s\":12.5}\n",
                   step, epoch, top1, top1 + (1 - top1) / 2, 2 - top1);
}

/* A config.yaml as the trainer writes it, lr and a hostile string set. */
static void write_config(const char *dir, const char *lr)
{
    cl_config c;
    cl_config_defaults(&c);
    cl_config_set(&c, "lr", lr);
    cl_config_set(&c, "epoch_size", "3");
    cl_config_set(&c, "data_dir", "<img src=x onerror=alert(1)>");
    cl_strbuf y;
    cl_strbuf_init(&y);
    cl_strbuf_adds(&y, "# resolved by classic 0.1.0; seed 42; 4 process(es)\n");
    cl_config_format_yaml(&c, &y);
    char path[700];
    snprintf(path, sizeof path, "%s/config.yaml", dir);
    spit(path, cl_strbuf_str(&y));
    cl_strbuf_free(&y);
}

/* 3 epochs of 8 steps logged every 2 steps, an eval per epoch. */
static void write_run(const char *dir, double scale, const char *lr)
{
    mkdir(dir, 0777);
    cl_strbuf b;
    cl_strbuf_init(&b);
    for (int s = 2; s <= 24; s += 2) {
        int e = (s - 1) / 8 + 1;
        train_line(&b, s, e, scale * 3.0 / (1 + 0.2 * s), 0.1 * (1 - s / 25.));
        if (s % 8 == 0)
            eval_line(&b, s, e, 0.3 + 0.15 * e * scale);
    }
    char path[700];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    spit(path, cl_strbuf_str(&b));
    cl_strbuf_free(&b);
    write_config(dir, lr);
}

/* A training state holding only the global batch as metadata (name in
 * dir), as a step checkpoint's beside it: global_batch "G", or with
 * packed set the form of older files, "G B N A". */
static void write_state(const char *dir, const char *name, int b, int n, int a,
                        int packed)
{
    char path[700], g[64], bs[16], np[16], ac[16];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (packed)
        snprintf(g, sizeof g, "%d %d %d %d", b * n * a, b, n, a);
    else
        snprintf(g, sizeof g, "%d", b * n * a);
    snprintf(bs, sizeof bs, "%d", b);
    snprintf(np, sizeof np, "%d", n);
    snprintf(ac, sizeof ac, "%d", a);
    cl_st_writer *w = NULL;
    REQUIRE_OK(cl_st_writer_new(&w));
    REQUIRE_OK(cl_st_writer_meta(w, CL_STATE_GLOBAL_BATCH, g));
    if (!packed) {
        REQUIRE_OK(cl_st_writer_meta(w, CL_STATE_BATCH_SIZE, bs));
        REQUIRE_OK(cl_st_writer_meta(w, CL_STATE_PROCESSES, np));
        REQUIRE_OK(cl_st_writer_meta(w, CL_STATE_ACCUMULATION, ac));
    }
    REQUIRE_OK(cl_st_writer_save(w, path));
    cl_st_writer_free(w);
}

/* A random-weights resnet18 for 32x32 gray Fashion-MNIST saved as the
 * run's best checkpoint; class 0 gets a name made to break HTML. */
static void write_checkpoint(const char *dir)
{
    cl_graph g;
    cl_resnet_config rc = cl_resnet_config_default();
    rc.depth = 18;
    rc.in_channels = 1;
    rc.num_classes = 10;
    REQUIRE_OK(cl_graph_init(&g, 4));
    REQUIRE_OK(cl_resnet_build(&g, &rc, 32, 32, 0, 0));
    REQUIRE_OK(cl_resnet_init(&g, &rc, 5));
    cl_config c;
    cl_config_defaults(&c);
    REQUIRE_OK(cl_config_set(&c, "model", "resnet18"));
    REQUIRE_OK(cl_config_set(&c, "image_size", "32"));
    REQUIRE_OK(cl_config_set(&c, "in_channels", "1"));
    REQUIRE_OK(cl_config_set(&c, "mean", "0.286"));
    REQUIRE_OK(cl_config_set(&c, "std", "0.353"));
    REQUIRE_OK(cl_config_set(&c, "num_parallel_workers", "2"));
    cl_strbuf y;
    cl_strbuf_init(&y);
    REQUIRE_OK(cl_config_format_yaml(&c, &y));
    const char *names = "[\"<script>alert(1)</script>\",\"Trouser\","
                        "\"Pullover\",\"Dress\",\"Coat\",\"Sandal\",\"Shirt\","
                        "\"Sneaker\",\"Bag & \\\"Co\\\"\",\"Ankle boot\"]";
    cl_ckpt_kv meta[] = {
        {CL_META_ARCH, "resnet18"},
        {CL_META_STEM, "imagenet"},
        {CL_META_IN_CHANNELS, "1"},
        {CL_META_NUM_CLASSES, "10"},
        {CL_META_IMAGE_SIZE, "32"},
        {CL_META_CLASS_NAMES, names},
        {CL_META_MEAN, "0.286,0.286,0.286"},
        {CL_META_STD, "0.353,0.353,0.353"},
        {CL_META_EPOCH, "3"},
        {CL_META_STEP, "24"},
        {CL_META_VERSION, cl_version()},
        {CL_META_CONFIG, cl_strbuf_str(&y)},
    };
    char path[700];
    snprintf(path, sizeof path, "%s/resnet18-best.safetensors", dir);
    CHECK_OK(cl_ckpt_save_model(path, &g, meta,
                                (int)(sizeof meta / sizeof meta[0])));
    cl_strbuf_free(&y);
    cl_graph_free(&g);
}

/* ---- unit pieces ------------------------------------------------------ */

CL_TEST(escape_base64_png)
{
    cl_strbuf b;
    cl_strbuf_init(&b);
    CHECK_OK(cl__html_esc(&b, "<a href=\"x\">&'\x01</a>"));
    CHECK(strcmp(cl_strbuf_str(&b),
                 "&lt;a href=&quot;x&quot;&gt;&amp;&#39;\xef\xbf\xbd&lt;/a"
                 "&gt;") == 0);
    static const char *const in[] = {"",     "f",     "fo",    "foo",
                                     "foob", "fooba", "foobar"};
    static const char *const want[] = {
        "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (int i = 0; i < 7; i++) {
        b.len = 0;
        CHECK_OK(cl__base64(&b, (const uint8_t *)in[i], strlen(in[i])));
        CHECK(b.len == strlen(want[i]));
        CHECK(b.len == 0 || memcmp(b.data, want[i], b.len) == 0);
    }
    /* A PNG made in memory decodes back to the same pixels. */
    uint8_t px[5 * 7 * 3]; /* px: (5, 7, 3) */
    for (size_t i = 0; i < sizeof px; i++)
        px[i] = (uint8_t)(i * 37 + 11);
    b.len = 0;
    CHECK_OK(cl__png_encode(&b, px, 5, 7, 3));
    cl_image img;
    memset(&img, 0, sizeof img);
    CHECK_OK(
        cl_image_decode((const uint8_t *)b.data, b.len, "mem.png", 0, 0, &img));
    CHECK(img.h == 5 && img.w == 7 && img.c == 3);
    CHECK(img.data && memcmp(img.data, px, sizeof px) == 0);
    cl_image_free(&img);
    CHECK_ERR(cl__png_encode(&b, px, 5, 7, 2), CL_ERR_ARG, "PNG");
    cl_strbuf_free(&b);
}

CL_TEST(chart_axes_and_empty_chart)
{
    double x[11], y[11];
    for (int i = 0; i <= 10; i++) {
        x[i] = 10 * i;
        y[i] = i / 10.0;
    }
    cl__svg_series s = {"acc", "s1", x, y, 11, "#000", 2, 0, 0, 0};
    cl__svg_chart c = {
        "c1", "Title & <more>", "step", "accuracy", 500, 300, 0, 1, 0, 0, 0};
    cl_strbuf b;
    cl_strbuf_init(&b);
    CHECK_OK(cl__svg_line_chart(&b, &c, &s, 1));
    const char *t = cl_strbuf_str(&b);
    CHECK(strstr(t, "Title &amp; &lt;more&gt;") != NULL);
    CHECK(strstr(t, ">0%</text>") != NULL);
    CHECK(strstr(t, ">100%</text>") != NULL);
    CHECK(strstr(t, ">20%</text>") != NULL);
    CHECK(strstr(t, ">40</text>") != NULL); /* an x tick */
    CHECK(path_points(t, "s1") == 11);
    /* A NaN breaks the line into two pieces, nothing drawn for it. */
    y[5] = NAN;
    b.len = 0;
    CHECK_OK(cl__svg_line_chart(&b, &c, &s, 1));
    CHECK(path_points(cl_strbuf_str(&b), "s1") == 10);
    s.n = 0;
    b.len = 0;
    CHECK_OK(cl__svg_line_chart(&b, &c, &s, 1));
    CHECK(strstr(cl_strbuf_str(&b), "no data yet") != NULL);
    /* Losses spanning 1000x get a log axis. */
    for (int i = 0; i <= 10; i++)
        y[i] = pow(10, 3 - 0.3 * i);
    s.n = 11;
    cl__svg_chart cl = {"c2", "loss", "step", "loss", 500, 300, -1, 0, 0, 0, 0};
    b.len = 0;
    CHECK_OK(cl__svg_line_chart(&b, &cl, &s, 1));
    CHECK(strstr(cl_strbuf_str(&b), "loss (log)") != NULL);
    CHECK(strstr(cl_strbuf_str(&b), ">100</text>") != NULL);
    cl_strbuf_free(&b);
}

/* ---- run logs ----------------------------------------------------------- */

CL_TEST(partial_last_line_is_ignored)
{
    const char *dir = cl_test_path("partial");
    mkdir(dir, 0777);
    cl_strbuf b;
    cl_strbuf_init(&b);
    train_line(&b, 4, 1, 2.5, 0.1);
    train_line(&b, 8, 1, 2.0, 0.09);
    eval_line(&b, 8, 1, 0.4);
    train_line(&b, 12, 2, 1.5, 0.08);
    cl_strbuf_adds(&b, "{\"kind\":\"train\",\"step\":16,\"epoch\":2,\"lo");
    char path[700];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    spit(path, cl_strbuf_str(&b));

    cl__runlog rl;
    memset(&rl, 0, sizeof rl);
    CHECK_OK(cl__runlog_parse(&rl, b.data, b.len));
    CHECK(rl.n_train == 3 && rl.n_eval == 1);
    CHECK(rl.partial_tail == 1 && rl.bad_lines == 0);
    CHECK(rl.n_train == 3 && rl.train[2].step == 12);
    cl__runlog_free(&rl);
    /* A complete last record without its newline still counts. */
    memset(&rl, 0, sizeof rl);
    b.len = 0;
    train_line(&b, 4, 1, 2.5, 0.1);
    b.len--;
    CHECK_OK(cl__runlog_parse(&rl, b.data, b.len));
    CHECK(rl.n_train == 1 && rl.partial_tail == 0);
    cl__runlog_free(&rl);
    /* A garbage line in the middle is skipped and counted. */
    memset(&rl, 0, sizeof rl);
    b.len = 0;
    train_line(&b, 4, 1, 2.5, 0.1);
    cl_strbuf_adds(&b, "not json\n[1,2]\n{\"kind\":\"train\"}\n"
                       "{\"kind\":\"train\",\"step\":6.5}\n"
                       "{\"a\":[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]}\n");
    train_line(&b, 8, 1, 2.0, 0.1);
    CHECK_OK(cl__runlog_parse(&rl, b.data, b.len));
    CHECK(rl.n_train == 2 && rl.bad_lines == 5);
    cl__runlog_free(&rl);
    cl_strbuf_free(&b);

    /* The page: three points on the loss curve, the note, and the
     * evaluation skipped because there is no checkpoint yet. */
    char args[1600];
    snprintf(args, sizeof args, "report %s --out %s", dir,
             cl_test_path("partial.html"));
    REQUIRE(cl_test_classic(args) == 0);
    char *html = cl_test_read_file(cl_test_path("partial.html"), NULL);
    REQUIRE(html != NULL);
    CHECK(path_points(html, "loss-raw") == 3);
    CHECK(path_points(html, "loss-smooth") == 3);
    CHECK(path_points(html, "lr-curve") == 3);
    CHECK(strstr(html, "is incomplete (being written)") != NULL);
    CHECK(strstr(html, "id=\"eval-note\"") != NULL);
    CHECK(strstr(html, "no checkpoint in the run directory yet") != NULL);
    CHECK(strstr(html, "No config.yaml") != NULL);
    CHECK(strstr(html, "in progress") != NULL);
    CHECK(path_points(html, "comm-curve") == -1); /* not an MPI run */
    free(html);
}

CL_TEST(resumed_run_keeps_last_occurrence)
{
    cl_strbuf b;
    cl_strbuf_init(&b);
    /* First run: steps 4..16, eval at 8 and 16; resumed from the step-8
     * checkpoint: 12, 16 (new values), eval at 16, then 20. */
    train_line(&b, 4, 1, 4.0, 0.1);
    train_line(&b, 8, 1, 3.0, 0.1);
    eval_line(&b, 8, 1, 0.2);
    train_line(&b, 12, 2, 2.9, 0.1);
    train_line(&b, 16, 2, 2.8, 0.1);
    eval_line(&b, 16, 2, 0.25);
    train_line(&b, 12, 2, 1.2, 0.05);
    train_line(&b, 16, 2, 1.1, 0.05);
    eval_line(&b, 16, 2, 0.6);
    train_line(&b, 20, 3, 1.0, 0.04);
    cl__runlog rl;
    memset(&rl, 0, sizeof rl);
    CHECK_OK(cl__runlog_parse(&rl, b.data, b.len));
    REQUIRE(rl.n_train == 5);
    static const int steps[] = {4, 8, 12, 16, 20};
    static const double loss[] = {4.0, 3.0, 1.2, 1.1, 1.0};
    for (int i = 0; i < 5; i++) {
        CHECK(rl.train[i].step == steps[i]);
        CHECK_NEAR(rl.train[i].loss, loss[i], 1e-9);
    }
    REQUIRE(rl.n_eval == 2);
    CHECK(rl.eval[0].step == 8 && rl.eval[1].step == 16);
    CHECK_NEAR(rl.eval[1].top1, 0.6, 1e-9);
    CHECK(rl.resumes == 1);
    cl__runlog_free(&rl);

    const char *dir = cl_test_path("resumed");
    mkdir(dir, 0777);
    char path[700], args[1600];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    spit(path, cl_strbuf_str(&b));
    cl_strbuf_free(&b);
    snprintf(args, sizeof args, "report %s", dir);
    REQUIRE(cl_test_classic(args) == 0);
    snprintf(path, sizeof path, "%s/report.html", dir);
    char *html = cl_test_read_file(path, NULL);
    REQUIRE(html != NULL);
    CHECK(path_points(html, "loss-raw") == 5);
    CHECK(path_points(html, "acc-top1") == 2);
    CHECK(strstr(html, "The run was resumed (1 time(s))") != NULL);
    free(html);
}

CL_TEST(mpi_run_shows_comm_wait)
{
    const char *dir = cl_test_path("mpi");
    mkdir(dir, 0777);
    char path[700], args[1600];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    spit(path, "{\"kind\":\"train\",\"step\":2,\"epoch\":1,\"loss\":2,"
               "\"loss_avg\":2,\"lr\":0.1,\"img_s\":50,\"step_ms\":100,"
               "\"data_wait\":0.01,\"comm_wait\":0.2}\n"
               "{\"kind\":\"train\",\"step\":4,\"epoch\":1,\"loss\":1.8,"
               "\"loss_avg\":1.9,\"lr\":0.1,\"img_s\":55,\"step_ms\":90,"
               "\"data_wait\":null,\"comm_wait\":0.15}\n");
    snprintf(args, sizeof args, "report %s --no-eval", dir);
    REQUIRE(cl_test_classic(args) == 0);
    snprintf(path, sizeof path, "%s/report.html", dir);
    char *html = cl_test_read_file(path, NULL);
    REQUIRE(html != NULL);
    CHECK(path_points(html, "comm-curve") == 2);
    CHECK(path_points(html, "wait-curve") == 1); /* null is no point */
    CHECK(strstr(html, "gradient sync wait") != NULL);
    CHECK(strstr(html, "not requested") != NULL);
    free(html);
}

/* The config section lists the config the run resolved, loaded through
 * cl_config, in the recipe's groups; the process count is the newest
 * training state's (either form of its global batch); --compare lists
 * the keys whose values differ. */
CL_TEST(config_and_processes_come_from_the_parsed_run)
{
    const char *dir = cl_test_path("parsed");
    write_run(dir, 1, "0.1");
    char args[1600], path[700];
    snprintf(args, sizeof args, "report %s --no-eval", dir);
    REQUIRE(cl_test_classic(args) == 0);
    snprintf(path, sizeof path, "%s/report.html", dir);
    char *html = cl_test_read_file(path, NULL);
    REQUIRE(html != NULL);
    /* Every key once, in its group, the changed ones bold. */
    CHECK(count(html, "<div class=\"cfg-group\"><h3>") >= 8);
    CHECK(strstr(html, "<div class=\"cfg-group\"><h3>data</h3><table "
                       "class=\"kv\"><tr><td>dataset</td>") != NULL);
    CHECK(strstr(html, "<tr class=\"nondefault\"><td>epoch_size</td><td "
                       "class=\"v\">3</td>") != NULL);
    CHECK(strstr(html, "<tr><td>momentum</td>") != NULL);
    CHECK(count(html, "<td>batch_size</td>") == 1);
    /* No training state yet: no process count. */
    CHECK(strstr(html, "processes (MPI ranks)") == NULL);
    free(html);
    /* Packed, as older files hold it; then a newer state of 2 processes. */
    write_state(dir, "resnet18-e1-s8.state.safetensors", 4, 3, 1, 1);
    REQUIRE(cl_test_classic(args) == 0);
    html = cl_test_read_file(path, NULL);
    REQUIRE(html != NULL);
    CHECK(strstr(html, "processes (MPI ranks)</td><td class=\"v\">3<") != NULL);
    free(html);
    sleep(1); /* a newer mtime however coarse the file system's clock */
    write_state(dir, "resnet18-e2-s16.state.safetensors", 4, 2, 2, 0);
    REQUIRE(cl_test_classic(args) == 0);
    html = cl_test_read_file(path, NULL);
    REQUIRE(html != NULL);
    CHECK(strstr(html, "processes (MPI ranks)</td><td class=\"v\">2<") != NULL);
    free(html);
    /* Two runs: only the keys that differ, ckpt_save_dir aside. */
    const char *b = cl_test_path("parsed-b");
    write_run(b, 1, "0.05");
    const char *cmp = cl_test_path("parsed-cmp.html");
    snprintf(args, sizeof args, "report --compare %s %s --out %s", dir, b, cmp);
    REQUIRE(cl_test_classic(args) == 0);
    html = cl_test_read_file(cmp, NULL);
    REQUIRE(html != NULL);
    CHECK(strstr(html, "<tr><td>lr</td><td class=\"v\">0.1</td><td "
                       "class=\"v\">0.05</td></tr>") != NULL);
    const char *t = strstr(html, "id=\"cmp-config\"");
    REQUIRE(t != NULL);
    const char *end = strstr(t, "</table>");
    REQUIRE(end != NULL);
    int rows = 0;
    for (const char *p = t; (p = strstr(p, "<tr><td>")) && p < end; p++)
        rows++;
    CHECK(rows == 1);
    free(html);
    /* A config.yaml that does not load is shown as written, with a note. */
    snprintf(path, sizeof path, "%s/config.yaml", dir);
    spit(path, "# an old run\nlr: 0.1\nno_such_key: 1\n");
    snprintf(args, sizeof args, "report %s --no-eval", dir);
    REQUIRE(cl_test_classic(args) == 0);
    snprintf(path, sizeof path, "%s/report.html", dir);
    html = cl_test_read_file(path, NULL);
    REQUIRE(html != NULL);
    CHECK(strstr(html, "does not load as a recipe") != NULL);
    CHECK(strstr(html, "no_such_key: 1") != NULL);
    CHECK(strstr(html, "<div class=\"cfg-group\">") == NULL);
    free(html);
}

CL_TEST(errors_name_the_run_directory)
{
    char args[1600];
    snprintf(args, sizeof args, "report %s", cl_test_path("nowhere"));
    CHECK(cl_test_classic(args) == 1);
    CHECK(strstr(cl_test_out, "nowhere: no such run directory") != NULL);
    const char *empty = cl_test_path("empty");
    mkdir(empty, 0777);
    snprintf(args, sizeof args, "report %s", empty);
    CHECK(cl_test_classic(args) == 1);
    CHECK(strstr(cl_test_out, "no metrics.jsonl in this directory") != NULL);
    spit(cl_test_path("file"), "x");
    snprintf(args, sizeof args, "report %s", cl_test_path("file"));
    CHECK(cl_test_classic(args) == 1);
    CHECK(strstr(cl_test_out, "not a directory") != NULL);
    snprintf(args, sizeof args, "report --compare %s", empty);
    CHECK(cl_test_classic(args) == 2);
    CHECK(strstr(cl_test_out, "--compare needs two run directories") != NULL);
    CHECK(cl_test_classic("report") == 2);
    CHECK(cl_test_classic("report a --limit 0") == 2);
    CHECK(strstr(cl_test_out, "--limit must be an integer") != NULL);
    CHECK(cl_test_classic("report a --frob") == 2);
    CHECK(strstr(cl_test_out, "unknown option '--frob'") != NULL);
    /* The library call gives the same sentence. */
    CHECK_ERR(cl_report_write(cl_test_path("nowhere"), NULL, NULL), CL_ERR_IO,
              "no such run directory");
    /* A checkpoint that cannot be read is a note in the page, not a
     * failed report. */
    const char *junk = cl_test_path("junk");
    write_run(junk, 1, "0.1");
    char ck[700];
    snprintf(ck, sizeof ck, "%s/resnet18-best.safetensors", junk);
    spit(ck, "\x10\0\0\0\0\0\0\0{\"a\":");
    snprintf(args, sizeof args, "report %s", junk);
    CHECK(cl_test_classic(args) == 0);
    snprintf(ck, sizeof ck, "%s/report.html", junk);
    char *html = cl_test_read_file(ck, NULL);
    REQUIRE(html != NULL);
    CHECK(strstr(html, "id=\"eval-note\"") != NULL);
    CHECK(strstr(html, "the checkpoint could not be opened") != NULL);
    free(html);
    /* An unwritable output is an error, not a silent success. */
    write_run(cl_test_path("okrun"), 1, "0.1");
    snprintf(args, sizeof args, "report %s --no-eval --out %s/no/such/x.html",
             cl_test_path("okrun"), cl_test_tmpdir());
    CHECK(cl_test_classic(args) == 1);
}

/* ---- the full page in a browser ------------------------------------------ */

/* The console check itself catches a script error (so a clean result of
 * the report pages means something). */
CL_TEST(browser_console_check_detects_errors)
{
    if (!have_chromium())
        return;
    const char *html = cl_test_path("bad.html");
    spit(html, "<!DOCTYPE html><html><body><p>x</p><script>nosuch.call();"
               "</script></body></html>");
    const char *out = cl_test_path("bad.out"), *err = cl_test_path("bad.err");
    CHECK(chromium(html, "--enable-logging=stderr --v=0 --dump-dom", out,
                   err) == 0);
    char *log = cl_test_read_file(err, NULL);
    REQUIRE(log != NULL);
    CHECK(strstr(log, "Uncaught ReferenceError") != NULL);
    free(log);
}

CL_TEST(browser_full_report)
{
    if (!have_chromium())
        return;
    const char *dir = cl_test_path("full");
    write_run(dir, 1, "0.1");
    write_checkpoint(dir);
    write_state(dir, "resnet18-e3-s24.state.safetensors", 8, 4, 1, 0);
    if (cl_test_failed())
        return;
    const char *html = cl_test_path("full/report.html");
    char args[1600];
    snprintf(args, sizeof args, "report %s --limit 200 --batch 50", dir);
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "report written to") != NULL);

    char *dom = browser_dom(html);
    REQUIRE(dom != NULL);
    /* Every chart and its series. */
    static const char *const charts[] = {
        "chart-loss", "chart-lr",   "chart-epoch-loss", "chart-acc",
        "chart-ips",  "chart-wait", "confusion",        "class-acc"};
    for (int i = 0; i < 8; i++) {
        char key[64];
        snprintf(key, sizeof key, "<svg id=\"%s\"", charts[i]);
        if (!strstr(dom, key))
            cl_test_fail(__FILE__, __LINE__, "no %s in the DOM", key);
    }
    CHECK(path_points(dom, "loss-raw") == 12);
    CHECK(path_points(dom, "loss-smooth") == 12);
    CHECK(path_points(dom, "lr-curve") == 12);
    CHECK(path_points(dom, "ips-curve") == 12);
    CHECK(path_points(dom, "wait-curve") == 12);
    CHECK(path_points(dom, "acc-top1") == 3);
    CHECK(path_points(dom, "acc-top5") == 3);
    CHECK(path_points(dom, "epoch-train-loss") == 3);
    CHECK(path_points(dom, "epoch-val-loss") == 3);
    /* Axes carry tick labels and titles. */
    CHECK(count(dom, "class=\"tick-label\"") > 40);
    CHECK(count(dom, "class=\"axis-label\"") >= 12);
    /* The evaluation: K*K heatmap cells, K bars, 16 images. */
    CHECK(count(dom, "class=\"cm-cell") == 100);
    CHECK(count(dom, "class=\"cm-cell diag\"") == 10);
    CHECK(count(dom, "class=\"class-bar\"") == 10);
    CHECK(count(dom, "class=\"miss-img") == 16);
    CHECK(count(dom, "src=\"data:image/png;base64,iVBORw0KGgo") == 16);
    CHECK(strstr(dom, "on 200 samples of fashion_mnist split test") != NULL);
    /* Hostile names and config values are text, never markup. */
    CHECK(strstr(dom, "<script") == NULL);
    CHECK(strstr(dom, "&lt;script&gt;alert(1)&lt;/script&gt;") != NULL);
    CHECK(strstr(dom, "<img src=\"x\"") == NULL);
    CHECK(strstr(dom, "Bag &amp; \"Co\"") != NULL ||
          strstr(dom, "Bag &amp; &quot;Co&quot;") != NULL);
    /* Config, environment, summary. */
    CHECK(strstr(dom, "id=\"env\"") != NULL);
    CHECK(strstr(dom, "oneDNN") != NULL);
    CHECK(strstr(dom, "processes (MPI ranks)</td><td class=\"v\">4<") != NULL);
    CHECK(strstr(dom, "<tr class=\"nondefault\"><td>epoch_size</td>") != NULL);
    CHECK(strstr(dom, "id=\"final-top1\"") != NULL);
    CHECK(strstr(dom, "75.00%") != NULL); /* the last eval's top-1 */
    free(dom);
    browser_render_check(html, cl_test_path("full.png"));
    if (getenv("CL_REPORT_KEEP_SHOT")) {
        char cp[1600];
        snprintf(cp, sizeof cp, "cp %s %s", cl_test_path("full.png"),
                 getenv("CL_REPORT_KEEP_SHOT"));
        CHECK(cl_test_run(cp) == 0);
    }
}

CL_TEST(browser_compare)
{
    if (!have_chromium())
        return;
    const char *a = cl_test_path("run-a"), *b = cl_test_path("run-b");
    write_run(a, 1, "0.1");
    write_run(b, 0.7, "0.05");
    const char *html = cl_test_path("cmp.html");
    char args[1600];
    snprintf(args, sizeof args, "report --compare %s %s --out %s", a, b, html);
    REQUIRE(cl_test_classic(args) == 0);
    char *dom = browser_dom(html);
    REQUIRE(dom != NULL);
    static const char *const ids[] = {"cmp-loss-a", "cmp-loss-b", "cmp-lr-a",
                                      "cmp-lr-b",   "cmp-top1-a", "cmp-top1-b"};
    for (int i = 0; i < 6; i++)
        if (path_points(dom, ids[i]) < 3)
            cl_test_fail(__FILE__, __LINE__, "%s: %d points", ids[i],
                         path_points(dom, ids[i]));
    CHECK(path_points(dom, "cmp-loss-a") == 12);
    CHECK(path_points(dom, "cmp-top1-b") == 3);
    /* Legends name both runs; the config table shows the lr that
     * differs and not the keys that agree. */
    CHECK(strstr(dom, "class=\"legend-text\"") != NULL);
    CHECK(count(dom, ">run-a</text>") >= 3);
    CHECK(count(dom, ">run-b</text>") >= 3);
    CHECK(strstr(dom, "<td>lr</td><td class=\"v\">0.1</td><td "
                      "class=\"v\">0.05</td>") != NULL);
    CHECK(strstr(dom, "<td>momentum</td>") == NULL);
    free(dom);
    const char *out = cl_test_path("cmp.out"), *err = cl_test_path("cmp.err");
    CHECK(chromium(html, "--enable-logging=stderr --v=0 --dump-dom", out,
                   err) == 0);
    char *log = cl_test_read_file(err, NULL);
    CHECK(log && !strstr(log, "Uncaught") && !strstr(log, "ERROR:CONSOLE"));
    free(log);
}

/* The report's own evaluation of the best checkpoint reproduces the
 * trainer's validation numbers on the same samples. */
CL_TEST(end_to_end_report_matches_trainer_eval)
{
    if (!have_chromium())
        return;
    const char *dir = cl_test_path("e2e");
    char args[2048];
    snprintf(args, sizeof args,
             "train --model resnet18 --stem imagenet --image_size 32 "
             "--in_channels 1 --mean 0.286 --std 0.353 --limit_train 64 "
             "--limit_val 96 --batch_size 32 --epoch_size 1 "
             "--per_print_times 1 --num_parallel_workers 2 --ckpt_save_dir "
             "%s",
             dir);
    REQUIRE(cl_test_classic(args) == 0);
    snprintf(args, sizeof args, "report %s", dir);
    REQUIRE(cl_test_classic(args) == 0);
    char path[700];
    snprintf(path, sizeof path, "%s/report.html", dir);
    char *html = cl_test_read_file(path, NULL);
    REQUIRE(html != NULL);
    cl__runlog rl;
    REQUIRE_OK(cl__runlog_read(&rl, dir));
    REQUIRE(rl.n_eval == 1 && rl.n_train == 2);
    CHECK(strcmp(rl.ckpt_kind, "best") == 0);
    /* "114 / 256"-style card: correct / samples of the report's eval. */
    const char *card = strstr(html, "id=\"eval-top1\"");
    REQUIRE(card != NULL);
    const char *d = strstr(card, "<div class=\"d\">");
    REQUIRE(d != NULL);
    long ok = -1, n = -1;
    CHECK(sscanf(d + strlen("<div class=\"d\">"), "%ld / %ld", &ok, &n) == 2);
    CHECK(n == 96);
    CHECK_NEAR((double)ok / (double)n, rl.eval[0].top1, 1e-9);
    CHECK(count(html, "class=\"cm-cell") == 100);
    CHECK(count(html, "class=\"miss-img") == (96 - ok < 16 ? 96 - ok : 16));
    CHECK(strstr(html, "badge ok") != NULL); /* complete */
    cl__runlog_free(&rl);
    free(html);
}

/* The report shows the training's own last evaluation, from the record
 * beside the checkpoint: with a backend that cannot be created (no second
 * evaluation could run) it still has the whole split's counts and
 * confusion matrix, equal to the trainer's; a record whose counts do not
 * add up is not shown, and the report evaluates again. */
CL_TEST(report_takes_the_training_evaluation)
{
    const char *dir = cl_test_path("live");
    char args[2048];
    snprintf(args, sizeof args,
             "train --model resnet18 --stem cifar --image_size 28 "
             "--in_channels 1 --mean 0.286 --std 0.353 --limit_train 64 "
             "--limit_val 120 --batch_size 32 --epoch_size 1 "
             "--num_parallel_workers 1 --ckpt_save_dir %s",
             dir);
    REQUIRE(cl_test_classic(args) == 0);
    char rec[800], ck[800];
    snprintf(ck, sizeof ck, "%s/resnet18-best.safetensors", dir);
    snprintf(rec, sizeof rec, "%s/resnet18-best.val.safetensors", dir);
    cl_metrics met;
    cl_val_miss *miss = NULL;
    char **names = NULL;
    cl_val_record_info info;
    int n_miss = 0;
    REQUIRE_OK(cl_val_record_load(rec, &met, &miss, &n_miss, &names, &info));
    CHECK(cl_metrics_count(&met) == 120 && info.epoch == 1 && info.step == 2);
    CHECK(strcmp(info.split, "test") == 0);
    CHECK(n_miss == (120 - met.counts[1] < 64 ? 120 - met.counts[1] : 64));
    for (int i = 1; i < n_miss; i++)
        CHECK(miss[i - 1].conf >= miss[i].conf);
    for (int i = 0; i < n_miss; i++)
        CHECK(miss[i].pred != miss[i].truth && miss[i].conf > 0.1);
    CHECK(names[0][0] != '\0');
    char path2[800];
    snprintf(path2, sizeof path2, "%s/resnet18-last.val.safetensors", dir);
    CHECK(access(path2, R_OK) == 0);

    cl_report_opts o = cl_report_opts_default();
    o.backend = "no-such-backend";
    snprintf(path2, sizeof path2, "%s/r.html", dir);
    REQUIRE_OK(cl_report_write(dir, path2, &o));
    char *html = cl_test_read_file(path2, NULL);
    REQUIRE(html != NULL);
    CHECK(strstr(html, "the training's own evaluation (not run again)") !=
          NULL);
    char want[64];
    snprintf(want, sizeof want, "%lld / 120", (long long)met.counts[1]);
    CHECK(strstr(html, want) != NULL);
    CHECK(count(html, "class=\"cm-cell") == 100);
    free(html);

    /* Inconsistent counts: the record is set aside, the report evaluates
     * (and with no backend says why it could not). */
    met.counts[0] += 1;
    cl_val_misses none;
    REQUIRE_OK(cl_val_misses_init(&none, NULL, 0));
    REQUIRE_OK(cl_val_record_save(rec, &met, &none, &info, NULL));
    cl_val_misses_free(&none);
    cl_metrics bad;
    cl_val_miss *m2 = NULL;
    char **n2 = NULL;
    int nm2 = 0;
    CHECK_ERR(cl_val_record_load(rec, &bad, &m2, &nm2, &n2, &info),
              CL_ERR_FORMAT, "counts are inconsistent");
    CHECK(m2 == NULL && n2 == NULL);
    REQUIRE_OK(cl_report_write(dir, path2, &o));
    html = cl_test_read_file(path2, NULL);
    REQUIRE(html != NULL);
    CHECK(strstr(html, "not run again") == NULL);
    CHECK(strstr(html, "could not be opened") != NULL);
    free(html);
    /* A truncated record is refused the same way. */
    FILE *f = fopen(rec, "r+b");
    REQUIRE(f != NULL);
    CHECK(ftruncate(fileno(f), 40) == 0);
    fclose(f);
    CHECK(cl_val_record_load(rec, &bad, &m2, &nm2, &n2, &info) != CL_OK);
    cl_metrics_free(&met);
    cl_free(miss);
    cl_val_record_names_free(names, 10);
}
