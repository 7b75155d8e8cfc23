/* `classic serve` held to its contract: a real server on an ephemeral
 * 127.0.0.1 port and the curl client, every route and its JSON, every
 * error status, answers equal to `classic predict`, 64 clients at once,
 * SIGHUP under load, SIGTERM draining, the token and every bound; and the
 * two C API calls the server is built on, and its parsers.
 * ctest-labels: serve */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

/* After stdio.h, which it needs. */
#include <jpeglib.h>

#include "classic/classic.h"
#include "data/data.h"
#include "harness.h"
#include "io/json.h"
#include "serve/protocol.h"

/* ------------------------------------------------------------- fixtures */

/* Copies src into dst of n bytes, cut to fit. */
static void put(char *dst, size_t n, const char *src)
{
    size_t k = strlen(src);
    k = k < n - 1 ? k : n - 1;
    memcpy(dst, src, k);
    dst[k] = '\0';
}

static void nap(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* A varied h x w RGB image, seeded: smooth enough to compress, different
 * for every seed. */
static void fill(uint8_t *px, int h, int w, int seed)
{
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < 3; k++)
                px[(y * w + x) * 3 + k] =
                    (uint8_t)(128 + 100 * sin(0.07 * (seed + 1) * (x + 2 * k) +
                                              0.11 * y * (seed % 5 + 1)));
}

static int write_jpeg(const char *path, int h, int w, int seed)
{
    uint8_t *px = malloc((size_t)h * w * 3);
    FILE *f = fopen(path, "wb");
    if (!px || !f) {
        free(px);
        if (f)
            fclose(f);
        return -1;
    }
    fill(px, h, w, seed);
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = 3;
    ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 90, TRUE);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW rp = px + (size_t)ci.next_scanline * w * 3;
        jpeg_write_scanlines(&ci, &rp, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    free(px);
    return fclose(f);
}

static int write_png(const char *path, int h, int w, int seed)
{
    cl_image img;
    memset(&img, 0, sizeof img);
    if (cl_image_reserve(&img, h, w, 3) != CL_OK)
        return -1;
    fill(img.data, h, w, seed);
    cl_status s = cl_image_save_png(path, &img);
    cl_image_free(&img);
    return s == CL_OK ? 0 : -1;
}

enum { N_CLASSES = 6, N_IMAGES = 8 };

/* The shared fixture in the build tree (made once, under a lock, by
 * whichever serve test comes first): a resnet18 at 32 px trained one epoch
 * on an ImageFolder of 6 classes, and test images img0..7 (.jpg for even,
 * .png for odd, of several sizes). */
static const char *fixture(void)
{
    static char dir[1024];
    char p[1400], args[4000];
    snprintf(dir, sizeof dir, "%s/serve-fixture", CL_BINARY_DIR);
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/lock", dir);
    int fd = open(p, O_CREAT | O_RDWR, 0644);
    if (fd < 0 || flock(fd, LOCK_EX) != 0)
        return NULL;
    snprintf(p, sizeof p, "%s/run/resnet18-last.safetensors", dir);
    struct stat st;
    int ok = stat(p, &st) == 0;
    for (int split = 0; !ok && split < 2; split++) {
        const char *sp = split ? "val" : "train";
        snprintf(p, sizeof p, "%s/data", dir);
        mkdir(p, 0755);
        snprintf(p, sizeof p, "%s/data/%s", dir, sp);
        mkdir(p, 0755);
        for (int c = 0; c < N_CLASSES; c++) {
            snprintf(p, sizeof p, "%s/data/%s/class%d", dir, sp, c);
            mkdir(p, 0755);
            for (int i = 0; i < (split ? 1 : 3); i++) {
                snprintf(p, sizeof p, "%s/data/%s/class%d/%d.jpg", dir, sp, c,
                         i);
                if (write_jpeg(p, 36, 40, c * 7 + i) != 0)
                    return NULL;
            }
        }
    }
    for (int i = 0; !ok && i < N_IMAGES; i++) {
        snprintf(p, sizeof p, "%s/img%d.%s", dir, i, i % 2 ? "png" : "jpg");
        int h = 30 + 5 * i, w = 50 - 3 * i;
        if ((i % 2 ? write_png(p, h, w, 100 + i)
                   : write_jpeg(p, h, w, 100 + i)))
            return NULL;
    }
    if (!ok) {
        snprintf(args, sizeof args,
                 "train --dataset imagefolder --data_dir %s/data --model "
                 "resnet18 --image_size 32 --batch_size 6 --epoch_size 1 "
                 "--val_split val --num_parallel_workers 0 --seed 5 "
                 "--ckpt_save_dir %s/run --log_level error",
                 dir, dir);
        if (cl_test_classic(args) != 0)
            return NULL;
    }
    flock(fd, LOCK_UN);
    close(fd);
    return dir;
}

static char ckpt[1400];

static const char *checkpoint(void)
{
    const char *d = fixture();
    if (!d)
        return NULL;
    snprintf(ckpt, sizeof ckpt, "%s/run/resnet18-last.safetensors", d);
    return ckpt;
}

static const char *image(int i)
{
    static char p[N_IMAGES][1200];
    snprintf(p[i], sizeof p[i], "%s/serve-fixture/img%d.%s", CL_BINARY_DIR, i,
             i % 2 ? "png" : "jpg");
    return p[i];
}

/* ------------------------------------------------------ server and client */

typedef struct server {
    int pid, port;
    char log[1200];
} server;

/* Starts `classic serve --model tiny=CKPT --port 0 <extra>` and waits (30 s
 * at most) for its "listening on" line; port 0 when it did not come. */
static int start_env(server *s, const char *extra, void (*pre_exec)(void));

static int start(server *s, const char *extra)
{
    return start_env(s, extra, NULL);
}

/* start, with pre_exec run in the child before the exec. */
static int start_env(server *s, const char *extra, void (*pre_exec)(void))
{
    static int count;
    char args[16384];
    const char *ck = checkpoint();
    memset(s, 0, sizeof *s);
    if (!ck)
        return 0;
    snprintf(s->log, sizeof s->log, "%s/serve%d.log", cl_test_tmpdir(),
             count++);
    snprintf(args, sizeof args, "serve --model tiny=%s --port 0 %s", ck,
             extra ? extra : "");
    s->pid = cl_test_classic_start(args, s->log, pre_exec);
    for (int t = 0; t < 600 && s->pid > 0; t++) {
        char *txt = cl_test_read_file(s->log, NULL);
        const char *at =
            txt ? strstr(txt, "listening on http://127.0.0.1:") : NULL;
        if (at)
            s->port = atoi(at + strlen("listening on http://127.0.0.1:"));
        free(txt);
        if (s->port)
            return s->port;
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
            s->pid = 0;
            break;
        }
        nap(50);
    }
    printf("server did not start: %s\n", cl_test_slurp(s->log));
    return 0;
}

/* SIGTERM, then its exit status (-1 past 30 s). */
static int stop(server *s)
{
    if (s->pid <= 0)
        return -1;
    kill(s->pid, SIGTERM);
    int st = cl_test_wait(s->pid, 30);
    s->pid = 0;
    return st;
}

/* The last answer's body and headers. */
static char body[1 << 21], headers[8192];

/* Runs curl with args against http://127.0.0.1:port<path>; the status code
 * (0 when curl failed), body and headers in the buffers above. */
static int http(const server *s, const char *path, const char *args)
{
    static int n;
    char cmd[16384], bf[1300], hf[1300];
    snprintf(bf, sizeof bf, "%s/body%d", cl_test_tmpdir(), n);
    snprintf(hf, sizeof hf, "%s/head%d", cl_test_tmpdir(), n++);
    snprintf(cmd, sizeof cmd,
             "curl -s --max-time 30 -o %s -D %s -w '%%{http_code}' %s "
             "'http://127.0.0.1:%d%s'",
             bf, hf, args ? args : "", s->port, path);
    FILE *p = popen(cmd, "r");
    int code = 0;
    if (!p || fscanf(p, "%d", &code) != 1)
        code = 0;
    if (p)
        pclose(p);
    char *b = cl_test_read_file(bf, NULL), *h = cl_test_read_file(hf, NULL);
    put(body, sizeof body, b ? b : "");
    put(headers, sizeof headers, h ? h : "");
    free(b);
    free(h);
    return code;
}

/* The body as JSON (NULL when it is not), freed by the caller. */
static cl_json_doc *json(void)
{
    cl_json_doc *d = NULL;
    if (cl_json_parse(&d, body, strlen(body), NULL, "answer") != CL_OK) {
        printf("not JSON: %s\n", body);
        return NULL;
    }
    return d;
}

/* An error answer: JSON with one "error" sentence containing want. */
static int error_says(const char *want)
{
    cl_json_doc *d = json();
    const cl_json *e = d ? cl_json_get(cl_json_root(d), "error") : NULL;
    int ok = e && e->type == CL_JSON_STR && strstr(e->str, want) != NULL;
    if (!ok)
        printf("expected an error saying '%s', got: %s\n", want, body);
    cl_json_free(d);
    return ok;
}

/* Runs a shell script of background curls, all 200 expected: returns the
 * number of answers that were not 200 (codes written to a file). */
static int load(const server *s, int clients, int each, const char *file,
                int *total)
{
    char cmd[16384], out[1300];
    snprintf(out, sizeof out, "%s/codes-%d-%d", cl_test_tmpdir(), clients,
             each);
    snprintf(cmd, sizeof cmd,
             "for c in $(seq %d); do ( for i in $(seq %d); do curl -s "
             "--max-time 60 -o /dev/null -w '%%{http_code}\\n' -H "
             "'Content-Type: application/octet-stream' --data-binary @%s "
             "http://127.0.0.1:%d/v1/models/tiny:classify; done ) & done "
             ">%s; wait",
             clients, each, file, s->port, out);
    cl_test_run(cmd);
    FILE *f = fopen(out, "r");
    int bad = 0, n = 0, code;
    while (f && fscanf(f, "%d", &code) == 1) {
        n++;
        bad += code != 200;
    }
    if (f)
        fclose(f);
    *total = n;
    return bad + (clients * each - n);
}

/* ------------------------------------------------------------ the C API */

CL_TEST(api_prepare_forward_match_classify)
{
    const char *ck = checkpoint();
    REQUIRE(ck != NULL);
    cl_classifier *c = NULL;
    REQUIRE_OK(cl_classifier_open(&c, ck, NULL));
    int ch, side, K = cl_classifier_num_classes(c);
    REQUIRE_OK(cl_classifier_input(c, &ch, &side));
    REQUIRE(K == N_CLASSES);
    size_t per = (size_t)ch * side * side;
    float *x = calloc(N_IMAGES * per, sizeof *x);
    float *p = calloc(N_IMAGES * K, sizeof *p), *q = calloc(K, sizeof *q);
    float *pb = calloc(N_IMAGES * K, sizeof *pb);
    REQUIRE(x && p && q && pb);
    for (int i = 0; i < N_IMAGES; i++) {
        size_t len = 0;
        char *data = cl_test_read_file(image(i), &len);
        REQUIRE(data != NULL);
        CHECK_OK(cl_classifier_prepare(c, data, len, 0, x + i * per));
        free(data);
        /* One image through the batch-of-one plan, as classify_file. */
        CHECK_OK(cl_classifier_forward(c, 1, x + i * per, p + i * K));
        CHECK_OK(cl_classifier_classify_file(c, image(i), q));
        for (int k = 0; k < K; k++)
            CHECK(fabsf(p[i * K + k] - q[k]) <= 1e-6f);
    }
    /* Every size of the ladder (3 pads to 4, 8 is a plan, 5 pads to 8): an
     * image's row does not depend on its neighbours. */
    int sizes[] = {2, 3, 5, 8};
    for (int t = 0; t < 4; t++) {
        CHECK_OK(cl_classifier_forward(c, sizes[t], x, pb));
        for (int i = 0; i < sizes[t] * K; i++)
            CHECK(fabsf(pb[i] - p[i]) <= 1e-6f);
    }
    CHECK_OK(cl_classifier_forward(c, 0, x, pb));
    /* Refusals: no image, a bomb's header, bad arguments. */
    CHECK(cl_classifier_prepare(c, "hello", 5, 0, x) == CL_ERR_FORMAT);
    size_t len = 0;
    char *data = cl_test_read_file(image(0), &len);
    REQUIRE(data != NULL);
    CHECK(cl_classifier_prepare(c, data, len, 100, x) == CL_ERR_LIMIT);
    CHECK(strstr(cl_last_error(), "limit") != NULL);
    CHECK(cl_classifier_prepare(c, data, len / 2, 0, x) == CL_ERR_FORMAT);
    CHECK(cl_classifier_prepare(NULL, data, len, 0, x) == CL_ERR_ARG);
    CHECK(cl_classifier_forward(c, -1, x, pb) == CL_ERR_ARG);
    CHECK(cl_classifier_forward(c, 2, NULL, pb) == CL_ERR_ARG);
    free(data);
    cl_classifier_free(c);
    free(x);
    free(p);
    free(q);
    free(pb);
}

typedef struct prep_job {
    cl_classifier *c;
    const char *data;
    size_t len;
    float *x;
    cl_status s;
} prep_job;

static void *prep_thread(void *arg)
{
    prep_job *j = arg;
    for (int r = 0; r < 20 && j->s == CL_OK; r++)
        j->s = cl_classifier_prepare(j->c, j->data, j->len, 0, j->x);
    return NULL;
}

CL_TEST(api_prepare_is_thread_safe_beside_forward)
{
    const char *ck = checkpoint();
    REQUIRE(ck != NULL);
    cl_classifier *c = NULL;
    REQUIRE_OK(cl_classifier_open(&c, ck, NULL));
    int ch, side, K = cl_classifier_num_classes(c);
    REQUIRE_OK(cl_classifier_input(c, &ch, &side));
    size_t per = (size_t)ch * side * side;
    float *ref = calloc(4 * per, sizeof *ref), *x = calloc(4 * per, sizeof *x);
    float *p = calloc(4 * K, sizeof *p);
    char *data[4];
    size_t len[4];
    prep_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        data[i] = cl_test_read_file(image(i), &len[i]);
        REQUIRE(data[i] != NULL);
        REQUIRE_OK(cl_classifier_prepare(c, data[i], len[i], 0, ref + i * per));
        jobs[i] = (prep_job){c, data[i], len[i], x + i * per, CL_OK};
    }
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, prep_thread, &jobs[i]);
    /* The forward runs on this thread meanwhile, as the server's batcher. */
    for (int r = 0; r < 10; r++)
        CHECK_OK(cl_classifier_forward(c, 4, ref, p));
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_OK(jobs[i].s);
        free(data[i]);
    }
    CHECK(memcmp(ref, x, 4 * per * sizeof *x) == 0);
    cl_classifier_free(c);
    free(ref);
    free(x);
    free(p);
}

/* ---------------------------------------------------------- the parsers */

CL_TEST(parsers_multipart_base64_sniff)
{
    const uint8_t *part;
    size_t n;
    const char *form = "--XyZ\r\nContent-Disposition: form-data; name=\"note\""
                       "\r\n\r\nhi\r\n--XyZ\r\nContent-Disposition: form-data;"
                       " name=\"upload\"; filename=\"a.png\"\r\nContent-Type: "
                       "image/png\r\n\r\nPIXELS\r\n--XyZ--\r\n";
    CHECK_OK(cl_serve_multipart_file("multipart/form-data; boundary=XyZ",
                                     (const uint8_t *)form, strlen(form), &part,
                                     &n));
    CHECK(n == 6 && memcmp(part, "PIXELS", 6) == 0);
    /* Quoted boundary, a part named image without a filename. */
    const char *f2 = "--b b\r\nContent-Disposition: form-data; name=\"image\""
                     "\r\n\r\nAB\r\n--b b--";
    CHECK_OK(cl_serve_multipart_file("multipart/form-data; boundary=\"b b\"",
                                     (const uint8_t *)f2, strlen(f2), &part,
                                     &n));
    CHECK(n == 2 && memcmp(part, "AB", 2) == 0);
    /* No boundary, no file, truncated. */
    CHECK(cl_serve_multipart_file("multipart/form-data", (const uint8_t *)form,
                                  strlen(form), &part, &n) == CL_ERR_FORMAT);
    const char *f3 = "--Q\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n"
                     "1\r\n--Q--";
    CHECK(cl_serve_multipart_file("multipart/form-data; boundary=Q",
                                  (const uint8_t *)f3, strlen(f3), &part,
                                  &n) == CL_ERR_FORMAT);
    CHECK(strstr(cl_last_error(), "no file") != NULL);
    CHECK(cl_serve_multipart_file("multipart/form-data; boundary=XyZ",
                                  (const uint8_t *)form, 60, &part,
                                  &n) == CL_ERR_FORMAT);
    uint8_t out[16];
    CHECK_OK(cl_serve_base64_decode("aGVsbG8=", 8, out, &n));
    CHECK(n == 5 && memcmp(out, "hello", 5) == 0);
    CHECK(cl_serve_base64_decode("aGV*", 4, out, &n) == CL_ERR_FORMAT);
    CHECK(cl_serve_base64_decode("a", 1, out, &n) == CL_ERR_FORMAT);
    CHECK(cl_serve_sniff((const uint8_t *)"\xff\xd8\xff", 3) != NULL);
    CHECK(cl_serve_sniff((const uint8_t *)"\x89PNG\r\n\x1a\n", 8) != NULL);
    CHECK(cl_serve_sniff((const uint8_t *)"GIF89a", 6) == NULL);
    /* Infer bodies: a good FP32 one, then refusals naming the field. */
    cl_serve_infer q;
    const char *ok2 = "{\"id\":\"r\",\"inputs\":[{\"name\":\"input\",\"shape\":"
                      "[2,1,2,2],\"datatype\":\"FP32\",\"data\":[1,2,3,4,5,6,"
                      "7,8]}],\"outputs\":[{\"name\":\"top_k_classes\"}],"
                      "\"parameters\":{\"top_k\":3}}";
    REQUIRE_OK(cl_serve_infer_parse(ok2, strlen(ok2), 1, 2, 4, &q));
    CHECK(q.n == 2 && !q.is_bytes && q.x[7] == 8 && q.top_k == 3);
    CHECK(q.outputs == CL_SERVE_OUT_CLASSES && strcmp(q.id, "r") == 0);
    cl_serve_infer_free(&q);
    static const struct {
        const char *body, *says;
    } bad[] = {
        {"[1]", "must be a JSON object"},
        {"{\"inputs\":[]}", "exactly one input"},
        {"{\"inputs\":[{\"datatype\":\"INT8\",\"shape\":[1],\"data\":[1]}]}",
         "datatype"},
        {"{\"inputs\":[{\"datatype\":\"FP32\",\"shape\":[1,1,2,2],\"data\":"
         "[1,2,3]}]}",
         "holds 3 numbers"},
        {"{\"inputs\":[{\"datatype\":\"FP32\",\"shape\":[1,3,2,2],\"data\":"
         "[1]}]}",
         "[N, 1, 2, 2]"},
        {"{\"inputs\":[{\"datatype\":\"FP32\",\"shape\":[9,1,2,2],\"data\":"
         "[1]}]}",
         "from 1 to 4"},
        {"{\"inputs\":[{\"datatype\":\"BYTES\",\"shape\":[1],\"data\":[\"a*"
         "bc\"]"
         "}]}",
         "alphabet"},
        {"{\"inputs\":[{\"datatype\":\"BYTES\",\"shape\":[2],\"data\":[\"\"]"
         "}]}",
         "shape must be [N]"},
        {"{\"inputs\":[{\"datatype\":\"FP32\",\"shape\":[1,1,2,2],\"data\":"
         "[1,2,3,\"x\"]}]}",
         "string where FP32"},
        {"{\"inputs\":[{\"datatype\":\"FP32\",\"shape\":[1,1,2,2],\"data\":"
         "[1,2,3,4]}],\"outputs\":[{\"name\":\"logits\"}]}",
         "unknown output"},
        {"{\"inputs\":[{\"datatype\":\"FP32\",\"shape\":[1,1,2,2],\"data\":"
         "[1,2,3,4]}],\"parameters\":{\"top_k\":0}}",
         "top_k"},
        {"{\"inputs\":[{", "infer request"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cl_status s =
            cl_serve_infer_parse(bad[i].body, strlen(bad[i].body), 1, 2, 4, &q);
        CHECK(s != CL_OK);
        if (s == CL_OK || !strstr(cl_last_error(), bad[i].says)) {
            printf("body %zu: expected '%s', got: %s\n", i, bad[i].says,
                   cl_last_error());
            CHECK(0);
        }
    }
}

/* --------------------------------------------------------------- routes */

CL_TEST(routes_and_their_json)
{
    server s;
    REQUIRE(start(&s, NULL));
    CHECK(http(&s, "/v2/health/live", NULL) == 200);
    CHECK(strstr(body, "\"live\":true") != NULL);
    CHECK(http(&s, "/v2/health/ready", NULL) == 200);
    CHECK(strstr(body, "\"ready\":true") != NULL);
    CHECK(http(&s, "/v2", NULL) == 200);
    CHECK(strstr(body, "\"name\":\"classic\"") != NULL);
    CHECK(http(&s, "/v2/models/tiny/ready", NULL) == 200);
    CHECK(http(&s, "/v2/models/tiny/versions/1/ready", NULL) == 200);
    CHECK(http(&s, "/v2/models/tiny", NULL) == 200);
    cl_json_doc *d = json();
    REQUIRE(d != NULL);
    const cl_json *r = cl_json_root(d);
    const cl_json *nm = cl_json_get(r, "name");
    CHECK(nm && strcmp(nm->str, "tiny") == 0);
    const cl_json *in = cl_json_get(r, "inputs");
    CHECK(in && in->count == 2);
    const cl_json *sh = in ? cl_json_get(in->child, "shape") : NULL;
    CHECK(sh && sh->count == 4 && sh->child->next->i == 3);
    const cl_json *cls = cl_json_get(cl_json_get(r, "parameters"), "classes");
    CHECK(cls && cls->count == N_CLASSES &&
          strcmp(cls->child->str, "class0") == 0);
    /* The batch the worker forms: measured at start, 1 to max_batch, and
     * the timings behind it in the log. */
    const cl_json *cap = cl_json_get(cl_json_get(r, "parameters"), "batch_cap");
    CHECK(cap && cap->i >= 1 && cap->i <= 16);
    char *log = cl_test_read_file(s.log, NULL);
    CHECK(log && strstr(log, "model tiny: precision f32, batches of up to") &&
          strstr(log, "ms per image at 1: ") && strstr(log, ", 16: "));
    free(log);
    cl_json_free(d);
    CHECK(http(&s, "/v1/models", NULL) == 200);
    CHECK(strstr(body, "\"models\":[{\"name\":\"tiny\"") != NULL);
    /* The page: HTML with its script inline, nothing from elsewhere. */
    CHECK(http(&s, "/", NULL) == 200);
    CHECK(strstr(headers, "text/html") != NULL);
    CHECK(strstr(body, "<script>") && strstr(body, ":classify"));
    CHECK(!strstr(body, "http://") && !strstr(body, "https://"));

    /* :classify, raw and as a form. */
    char args[16384];
    snprintf(args, sizeof args,
             "-H 'Content-Type: image/jpeg' --data-binary @%s", image(0));
    CHECK(http(&s, "/v1/models/tiny:classify?top=3", args) == 200);
    d = json();
    REQUIRE(d != NULL);
    const cl_json *top = cl_json_get(cl_json_root(d), "top");
    CHECK(top && top->count == 3);
    CHECK(cl_json_get(top->child, "class") && cl_json_get(top->child, "prob"));
    CHECK(cl_json_get(cl_json_root(d), "latency_ms") != NULL);
    cl_json_free(d);
    char raw[sizeof body];
    put(raw, sizeof raw, strstr(body, "\"top\""));
    *strstr(raw, "\"latency_ms\"") = '\0';
    snprintf(args, sizeof args, "-F 'image=@%s'", image(0));
    CHECK(http(&s, "/v1/models/tiny:classify?top=3", args) == 200);
    CHECK(strstr(body, raw) != NULL);

    /* v2 infer with BYTES: two files, every output. */
    size_t len0, len1;
    char *f0 = cl_test_read_file(image(0), &len0);
    char *f1 = cl_test_read_file(image(1), &len1);
    REQUIRE(f0 && f1);
    /* base64 by the shell's coreutils, a real client's encoder. */
    char cmd[16384], path[1300];
    snprintf(path, sizeof path, "%s/req.json", cl_test_tmpdir());
    snprintf(cmd, sizeof cmd,
             "printf '{\"id\":\"q7\",\"inputs\":[{\"name\":\"image\","
             "\"shape\":[2],\"datatype\":\"BYTES\",\"data\":[\"%%s\","
             "\"%%s\"]}],\"parameters\":{\"top_k\":2}}' $(base64 -w0 %s) "
             "$(base64 -w0 %s) > %s",
             image(0), image(1), path);
    REQUIRE(cl_test_run(cmd) == 0);
    snprintf(args, sizeof args,
             "-H 'Content-Type: application/json' --data-binary @%s", path);
    CHECK(http(&s, "/v2/models/tiny/infer", args) == 200);
    d = json();
    REQUIRE(d != NULL);
    r = cl_json_root(d);
    CHECK(strcmp(cl_json_get(r, "model_name")->str, "tiny") == 0);
    CHECK(strcmp(cl_json_get(r, "id")->str, "q7") == 0);
    const cl_json *outs = cl_json_get(r, "outputs");
    REQUIRE(outs && outs->count == 4);
    const cl_json *probs = outs->child;
    CHECK(strcmp(cl_json_get(probs, "name")->str, "probabilities") == 0);
    CHECK(cl_json_get(probs, "data")->count == 2 * N_CLASSES);
    const cl_json *idx = outs->child->next;
    CHECK(strcmp(cl_json_get(idx, "datatype")->str, "INT64") == 0);
    CHECK(cl_json_get(idx, "data")->count == 4);
    /* Probabilities sum to one per image. */
    double sum = 0;
    int k = 0;
    for (const cl_json *e = cl_json_get(probs, "data")->child;
         e && k < N_CLASSES; e = e->next, k++)
        sum += e->num;
    CHECK(fabs(sum - 1) < 1e-5);
    /* The FP32 tensor of image 0, prepared here, gives the same numbers. */
    cl_classifier *c = NULL;
    REQUIRE_OK(cl_classifier_open(&c, checkpoint(), NULL));
    float *x = calloc(3 * 32 * 32, sizeof *x);
    REQUIRE(x != NULL);
    REQUIRE_OK(cl_classifier_prepare(c, f0, len0, 0, x));
    cl_classifier_free(c);
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    fprintf(f, "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,3,32,32],"
               "\"datatype\":\"FP32\",\"data\":[");
    for (int i = 0; i < 3 * 32 * 32; i++)
        fprintf(f, "%s%.9g", i ? "," : "", (double)x[i]);
    fprintf(f, "]}],\"outputs\":[{\"name\":\"probabilities\"}]}");
    fclose(f);
    free(x);
    float want[N_CLASSES];
    k = 0;
    for (const cl_json *e = cl_json_get(probs, "data")->child;
         e && k < N_CLASSES; e = e->next)
        want[k++] = (float)e->num;
    cl_json_free(d);
    CHECK(http(&s, "/v2/models/tiny/infer", args) == 200);
    d = json();
    REQUIRE(d != NULL);
    outs = cl_json_get(cl_json_root(d), "outputs");
    REQUIRE(outs && outs->count == 1);
    k = 0;
    for (const cl_json *e = cl_json_get(outs->child, "data")->child; e;
         e = e->next, k++)
        CHECK(k < N_CLASSES && fabs(e->num - want[k]) <= 1e-6);
    CHECK(k == N_CLASSES);
    cl_json_free(d);
    free(f0);
    free(f1);

    /* Metrics: Prometheus text with what was served. */
    CHECK(http(&s, "/metrics", NULL) == 200);
    CHECK(strstr(headers, "text/plain; version=0.0.4") != NULL);
    CHECK(
        strstr(body, "classic_requests_total{model=\"tiny\",code=\"200\"} 7"));
    CHECK(strstr(body, "# TYPE classic_request_seconds histogram"));
    CHECK(strstr(body, "classic_request_seconds_count{model=\"tiny\"} 4"));
    CHECK(
        strstr(body, "classic_batch_size_bucket{model=\"tiny\",le=\"+Inf\"}"));
    CHECK(strstr(body, "classic_queue_depth{model=\"tiny\"} 0"));
    CHECK(strstr(body, "classic_images_total{model=\"tiny\"} 5"));
    CHECK(strstr(body, "classic_images_per_second{model=\"tiny\"}"));
    CHECK(stop(&s) == 0);
}

/* -------------------------------------------------------------- parity */

/* The top-5 of `classic predict --json` on every test image equal to the
 * server's, probabilities within 1e-6 (predict prints 6 decimals: its
 * rounding adds 5e-7); then the same images sent at once, batched with
 * each other, give the answers they got alone. */
CL_TEST(answers_equal_predict_and_do_not_depend_on_the_batch)
{
    server s;
    REQUIRE(start(&s, "--max_delay_ms 200 --max_batch 8 --batching max"));
    char args[16384];
    int n = snprintf(args, sizeof args, "predict --checkpoint %s --json",
                     checkpoint());
    for (int i = 0; i < N_IMAGES; i++)
        n += snprintf(args + n, sizeof args - (size_t)n, " %s", image(i));
    REQUIRE(cl_test_classic(args) == 0);
    cl_json_doc *pd = NULL;
    REQUIRE_OK(
        cl_json_parse(&pd, cl_test_out, strlen(cl_test_out), NULL, "predict"));
    const cl_json *e = cl_json_root(pd)->child;
    static char alone[N_IMAGES][1 << 16];
    for (int i = 0; i < N_IMAGES; i++, e = e ? e->next : NULL) {
        REQUIRE(e != NULL);
        snprintf(args, sizeof args,
                 "-H 'Content-Type: application/octet-stream' --data-binary "
                 "@%s",
                 image(i));
        REQUIRE(http(&s, "/v1/models/tiny:classify?top=5", args) == 200);
        put(alone[i], sizeof alone[i], body);
        cl_json_doc *d = json();
        REQUIRE(d != NULL);
        const cl_json *a = cl_json_get(cl_json_root(d), "top")->child;
        const cl_json *b = cl_json_get(e, "top")->child;
        int k = 0;
        for (; a && b; a = a->next, b = b->next, k++) {
            CHECK(strcmp(cl_json_get(a, "class")->str,
                         cl_json_get(b, "class")->str) == 0);
            double da = cl_json_get(a, "prob")->num,
                   db = cl_json_get(b, "prob")->num;
            if (fabs(da - db) > 1e-6 + 5e-7) {
                printf("image %d rank %d: serve %.9g, predict %.9g\n", i, k, da,
                       db);
                CHECK(0);
            }
        }
        CHECK(k == 5 && !a && !b);
        cl_json_free(d);
    }
    cl_json_free(pd);
    /* All eight at once: with max_delay 200 ms they share batches. */
    char cmd[16384], out[1300];
    n = 0;
    for (int i = 0; i < N_IMAGES; i++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n,
                      "curl -s --max-time 30 -o %s/b%d -H 'Content-Type: "
                      "application/octet-stream' --data-binary @%s "
                      "'http://127.0.0.1:%d/v1/models/tiny:classify?top=5' "
                      "& ",
                      cl_test_tmpdir(), i, image(i), s.port);
    snprintf(cmd + n, sizeof cmd - (size_t)n, "wait");
    REQUIRE(cl_test_run(cmd) == 0);
    for (int i = 0; i < N_IMAGES; i++) {
        snprintf(out, sizeof out, "%s/b%d", cl_test_tmpdir(), i);
        char *t = cl_test_read_file(out, NULL);
        REQUIRE(t != NULL && strstr(t, "\"latency_ms\""));
        cl_json_doc *da = NULL, *db = NULL;
        REQUIRE_OK(cl_json_parse(&da, t, strlen(t), NULL, "batched"));
        REQUIRE_OK(
            cl_json_parse(&db, alone[i], strlen(alone[i]), NULL, "alone"));
        const cl_json *a = cl_json_get(cl_json_root(da), "top")->child;
        const cl_json *b = cl_json_get(cl_json_root(db), "top")->child;
        for (; a && b; a = a->next, b = b->next) {
            CHECK(cl_json_get(a, "index")->i == cl_json_get(b, "index")->i);
            CHECK(fabs(cl_json_get(a, "prob")->num -
                       cl_json_get(b, "prob")->num) <= 1e-6);
        }
        cl_json_free(da);
        cl_json_free(db);
        free(t);
    }
    /* They did share: some batch held more than one image. */
    CHECK(http(&s, "/metrics", NULL) == 200);
    const char *one = strstr(body, "classic_batch_size_bucket{model=\"tiny\","
                                   "le=\"1\"} ");
    const char *cnt = strstr(body, "classic_batch_size_count{model=\"tiny\"} ");
    REQUIRE(one && cnt);
    long ones = atol(one + strlen("classic_batch_size_bucket{model=\"tiny\","
                                  "le=\"1\"} "));
    long batches =
        atol(cnt + strlen("classic_batch_size_count{model=\"tiny\"} "));
    printf("%ld batches, %ld of one image\n", batches, ones);
    CHECK(batches < 2 * N_IMAGES);
    CHECK(stop(&s) == 0);
}

/* --------------------------------------------------------------- errors */

/* A PNG that claims w x h in a valid header and holds nothing else. */
static void bomb_png(const char *path, uint32_t w, uint32_t h)
{
    uint8_t b[33] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a,
                     0,    0,   0,   13,  'I',  'H',  'D',  'R'};
    for (int i = 0; i < 4; i++) {
        b[16 + i] = (uint8_t)(w >> (24 - 8 * i));
        b[20 + i] = (uint8_t)(h >> (24 - 8 * i));
    }
    b[24] = 8; /* bit depth */
    b[25] = 2; /* RGB */
    uLong crc = crc32(0, b + 12, 17);
    for (int i = 0; i < 4; i++)
        b[29 + i] = (uint8_t)(crc >> (24 - 8 * i));
    /* An empty IDAT, where libpng stops reading the header. */
    uint8_t idat[12] = {0, 0, 0, 0, 'I', 'D', 'A', 'T'};
    crc = crc32(0, idat + 4, 4);
    for (int i = 0; i < 4; i++)
        idat[8 + i] = (uint8_t)(crc >> (24 - 8 * i));
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(b, 1, sizeof b, f);
        fwrite(idat, 1, sizeof idat, f);
        fclose(f);
    }
}

CL_TEST(every_error_status_with_one_sentence)
{
    server s;
    REQUIRE(start(&s, "--max_body_mb 1 --max_pixels 1000000"));
    char args[16384], p[1300];
    /* 400: text sent as a PNG, a truncated JPEG, a bad form, bad JSON. */
    snprintf(p, sizeof p, "%s/text.png", cl_test_tmpdir());
    FILE *f = fopen(p, "w");
    REQUIRE(f != NULL);
    fputs("this is not an image\n", f);
    fclose(f);
    snprintf(args, sizeof args,
             "-H 'Content-Type: image/png' --data-binary @%s", p);
    CHECK(http(&s, "/v1/models/tiny:classify", args) == 400);
    CHECK(error_says("not a JPEG or PNG"));
    size_t len;
    char *jpg = cl_test_read_file(image(0), &len);
    REQUIRE(jpg != NULL);
    snprintf(p, sizeof p, "%s/half.jpg", cl_test_tmpdir());
    f = fopen(p, "wb");
    REQUIRE(f != NULL);
    fwrite(jpg, 1, len / 2, f);
    fclose(f);
    free(jpg);
    snprintf(args, sizeof args,
             "-H 'Content-Type: image/jpeg' --data-binary @%s", p);
    CHECK(http(&s, "/v1/models/tiny:classify", args) == 400);
    CHECK(error_says("JPEG"));
    CHECK(http(&s, "/v1/models/tiny:classify",
               "-H 'Content-Type: multipart/form-data; boundary=zz' -d "
               "'--zz\r\nnothing'") == 400);
    CHECK(error_says("multipart"));
    CHECK(http(&s, "/v2/models/tiny/infer",
               "-H 'Content-Type: application/json' -d '{\"inputs\":'") == 400);
    CHECK(error_says("infer request"));
    CHECK(http(&s, "/v2/models/tiny/infer",
               "-H 'Content-Type: application/json' -d '{\"inputs\":[{"
               "\"datatype\":\"FP32\",\"shape\":[1,3,8,8],\"data\":[1]}]}'") ==
          400);
    CHECK(error_says("[N, 3, 32, 32]"));
    /* 404: an unknown model lists the known ones; an unknown route. */
    CHECK(http(&s, "/v1/models/nope:classify",
               "-H 'Content-Type: image/png' -d x") == 404);
    CHECK(error_says("the models served are tiny"));
    CHECK(http(&s, "/v2/models/nope", NULL) == 404);
    CHECK(error_says("no model named nope"));
    CHECK(http(&s, "/etc/passwd", NULL) == 404);
    CHECK(error_says("no route"));
    /* 405 with Allow. */
    CHECK(http(&s, "/v1/models/tiny:classify", NULL) == 405);
    CHECK(strstr(headers, "Allow: POST") != NULL);
    CHECK(error_says("GET is not allowed"));
    CHECK(http(&s, "/metrics", "-X DELETE") == 405);
    /* 413: the body (declared, and chunked without a length), the pixels
     * read from a bomb's header. */
    snprintf(p, sizeof p, "%s/big.bin", cl_test_tmpdir());
    f = fopen(p, "wb");
    REQUIRE(f != NULL);
    for (int i = 0; i < (2 << 20) / 4096; i++) {
        static char zero[4096];
        fwrite(zero, 1, sizeof zero, f);
    }
    fclose(f);
    snprintf(args, sizeof args,
             "-H 'Content-Type: image/png' --data-binary @%s", p);
    CHECK(http(&s, "/v1/models/tiny:classify", args) == 413);
    CHECK(error_says("above the limit"));
    snprintf(args, sizeof args,
             "-H 'Content-Type: image/png' -H 'Transfer-Encoding: chunked' "
             "--data-binary @%s",
             p);
    CHECK(http(&s, "/v1/models/tiny:classify", args) == 413);
    CHECK(error_says("above the limit"));
    snprintf(p, sizeof p, "%s/bomb.png", cl_test_tmpdir());
    bomb_png(p, 100000, 100000);
    snprintf(args, sizeof args,
             "-H 'Content-Type: image/png' --data-binary @%s", p);
    CHECK(http(&s, "/v1/models/tiny:classify", args) == 413);
    CHECK(error_says("100000x100000"));
    /* 415. */
    CHECK(http(&s, "/v1/models/tiny:classify",
               "-H 'Content-Type: text/plain' -d hello") == 415);
    CHECK(error_says("text/plain"));
    CHECK(http(&s, "/v2/models/tiny/infer",
               "-H 'Content-Type: image/png' -d x") == 415);
    /* The server still answers, and counted every status. */
    CHECK(http(&s, "/v2/health/live", NULL) == 200);
    CHECK(http(&s, "/metrics", NULL) == 200);
    CHECK(strstr(body, "code=\"400\"} 5") != NULL);
    CHECK(strstr(body, "code=\"413\"} 3") != NULL);
    CHECK(strstr(body, "code=\"500\"} 0") != NULL);
    CHECK(stop(&s) == 0);
}

/* A client that sent a POST's headers and part of its body, and holds
 * it: a request on its way to the queue, which a batch waits for (up to
 * max_delay_ms).  Its socket, -1 on failure. */
static int hold(const server *s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)s->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const char *h = "POST /v1/models/tiny:classify HTTP/1.1\r\nHost: x\r\n"
                    "Content-Type: image/png\r\nContent-Length: 1000\r\n\r\n"
                    "\x89PNG";
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        write(fd, h, strlen(h)) != (ssize_t)strlen(h)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    nap(200); /* its headers reach the server before what follows */
    return fd;
}

/* A connection opened and left silent: a client that sends its request
 * later.  Its socket, -1 on failure. */
static int idle_connection(const server *s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)s->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Sends a whole POST with a body on fd and reads the status code of its
 * answer, 0 for none. */
static int late_post(int fd)
{
    /* The headers and the body in one write, as most clients send them:
     * the body is then read with the headers. */
    char req[600], got[512];
    int n = snprintf(req, sizeof req,
                     "POST /v1/models/tiny:classify HTTP/1.1\r\nHost: x\r\n"
                     "Content-Type: image/png\r\nContent-Length: 200\r\n\r\n"
                     "\x89PNG\r\n\x1a\n");
    memset(req + n, 'x', 192);
    n += 192;
    if (write(fd, req, (size_t)n) != n)
        return 0;
    ssize_t k = read(fd, got, sizeof got - 1);
    if (k < 12)
        return 0;
    got[k] = '\0';
    return atoi(got + 9);
}

CL_TEST(full_queue_answers_503_at_once)
{
    /* One place in the queue and a batch of two that waits up to 3 s to
     * fill while another request is on its way: the first image holds the
     * place, the second is refused at once. */
    server s;
    REQUIRE(start(
        &s, "--queue 1 --max_batch 2 --max_delay_ms 3000 --batching max"));
    int held = hold(&s);
    REQUIRE(held >= 0);
    char cmd[16384], out[1300];
    snprintf(out, sizeof out, "%s/first", cl_test_tmpdir());
    snprintf(cmd, sizeof cmd,
             "curl -s --max-time 30 -o /dev/null -w '%%{http_code}' -H "
             "'Content-Type: image/jpeg' --data-binary @%s "
             "http://127.0.0.1:%d/v1/models/tiny:classify > %s &",
             image(0), s.port, out);
    REQUIRE(cl_test_run(cmd) == 0);
    nap(500);
    char args[16384];
    snprintf(args, sizeof args,
             "-H 'Content-Type: image/jpeg' --data-binary @%s", image(2));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(http(&s, "/v1/models/tiny:classify", args) == 503);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt =
        (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    printf("503 after %.3f s\n", dt);
    CHECK(dt < 1.5);
    CHECK(strstr(headers, "Retry-After: 1") != NULL);
    CHECK(error_says("queue is full"));
    /* The waiting request is answered when its delay is spent. */
    for (int t = 0; t < 100; t++) {
        const char *c = cl_test_slurp(out);
        if (c && strcmp(c, "200") == 0)
            break;
        nap(100);
    }
    CHECK(strcmp(cl_test_slurp(out), "200") == 0);
    close(held);
    CHECK(stop(&s) == 0);
}

CL_TEST(a_lone_request_does_not_wait_for_a_batch)
{
    /* max_delay_ms 3000, but nobody else is sending: the batch of one runs
     * at once. */
    server s;
    REQUIRE(start(&s, "--max_delay_ms 3000"));
    char args[2000];
    snprintf(args, sizeof args,
             "-H 'Content-Type: image/jpeg' --data-binary @%s", image(0));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(http(&s, "/v1/models/tiny:classify", args) == 200);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt =
        (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    printf("answered in %.3f s\n", dt);
    CHECK(dt < 2);
    CHECK(stop(&s) == 0);
}

/* ------------------------------------------------------------- security */

CL_TEST(token_and_binding)
{
    char tf[1300], args[2000];
    snprintf(tf, sizeof tf, "%s/token", cl_test_tmpdir());
    FILE *f = fopen(tf, "w");
    REQUIRE(f != NULL);
    fputs("s3cret-token-0123456789\n", f);
    fclose(f);
    server s;
    snprintf(args, sizeof args, "--token_file %s", tf);
    REQUIRE(start(&s, args));
    CHECK(http(&s, "/v2/health/ready", NULL) == 401);
    CHECK(strstr(headers, "WWW-Authenticate: Bearer") != NULL);
    CHECK(error_says("Bearer"));
    CHECK(http(&s, "/v2/models/tiny", "-H 'Authorization: Bearer wrong'") ==
          401);
    CHECK(http(&s, "/v2/models/tiny",
               "-H 'Authorization: Bearer s3cret-token-012345678'") == 401);
    CHECK(http(&s, "/v2/models/tiny",
               "-H 'Authorization: Bearer s3cret-token-0123456789'") == 200);
    snprintf(args, sizeof args,
             "-H 'Authorization: Bearer s3cret-token-0123456789' -H "
             "'Content-Type: image/png' --data-binary @%s",
             image(1));
    CHECK(http(&s, "/v1/models/tiny:classify", args) == 200);
    snprintf(args, sizeof args,
             "-H 'Content-Type: image/png' --data-binary @%s", image(1));
    CHECK(http(&s, "/v1/models/tiny:classify", args) == 401);
    CHECK(http(&s, "/metrics", NULL) == 401);
    /* The page holds no data and asks for the token itself. */
    CHECK(http(&s, "/", NULL) == 200);
    CHECK(stop(&s) == 0);

    /* Another address without a token is refused with one sentence; with
     * --no_auth it starts and says so. */
    snprintf(args, sizeof args, "serve --model tiny=%s --host 0.0.0.0 --port 0",
             checkpoint());
    CHECK(cl_test_classic(args) != 0);
    CHECK(strstr(cl_test_out, "--token_file") != NULL);
    char log[1300];
    snprintf(log, sizeof log, "%s/noauth.log", cl_test_tmpdir());
    snprintf(args, sizeof args,
             "serve --model tiny=%s --host 0.0.0.0 --port 0 --no_auth",
             checkpoint());
    int pid = cl_test_classic_start(args, log, NULL);
    REQUIRE(pid > 0);
    int seen = 0;
    for (int t = 0; t < 300 && !seen; t++) {
        nap(100);
        seen = strstr(cl_test_slurp(log), "listening on") != NULL;
    }
    CHECK(seen);
    CHECK(strstr(cl_test_slurp(log), "WARNING: --no_auth") != NULL);
    kill(pid, SIGINT);
    int st = cl_test_wait(pid, 30);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

CL_TEST(slow_client_is_cut_off)
{
    server s;
    REQUIRE(start(&s, "--timeout_s 1"));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)s.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const char *part = "POST /v1/models/tiny:classify HTTP/1.1\r\nHost: x\r\n";
    CHECK(write(fd, part, strlen(part)) == (ssize_t)strlen(part));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char buf[256];
    ssize_t n = read(fd, buf, sizeof buf);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt =
        (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    printf("closed after %.2f s (read %zd)\n", dt, n);
    CHECK(n <= 0 || dt < 5); /* closed, maybe after a 408 */
    CHECK(dt < 5);
    close(fd);
    /* A body trickled a byte every 0.3 s (never idle for the timeout) is
     * cut off 3 timeouts after its headers. */
    fd = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    REQUIRE(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    const char *hdr = "POST /v1/models/tiny:classify HTTP/1.1\r\nHost: x\r\n"
                      "Content-Type: image/png\r\nContent-Length: 100000\r\n"
                      "\r\n";
    CHECK(write(fd, hdr, strlen(hdr)) == (ssize_t)strlen(hdr));
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int cut = 0;
    for (int i = 0; i < 40 && !cut; i++) {
        nap(300);
        cut = send(fd, "x", 1, MSG_NOSIGNAL) != 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    printf("trickled body cut after %.2f s\n", dt);
    CHECK(cut && dt < 8);
    close(fd);
    CHECK(http(&s, "/v2/health/live", NULL) == 200);
    CHECK(stop(&s) == 0);
}

/* ----------------------------------------------------------------- load */

CL_TEST(sixty_four_clients_at_once)
{
    server s;
    REQUIRE(start(&s, NULL));
    int total = 0;
    int bad = load(&s, 64, 2, image(2), &total);
    printf("%d answers, %d not 200\n", total, bad);
    CHECK(bad == 0 && total == 128);
    CHECK(http(&s, "/metrics", NULL) == 200);
    CHECK(strstr(body, "classic_images_total{model=\"tiny\"} 128") != NULL);
    CHECK(stop(&s) == 0);
}

/* How many times needle occurs in text. */
static int count(const char *text, const char *needle)
{
    int k = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
        k++;
    return k;
}

CL_TEST(sighup_under_load_fails_nothing)
{
    server s;
    REQUIRE(start(&s, NULL));
    char cmd[16384], out[1300];
    snprintf(out, sizeof out, "%s/codes", cl_test_tmpdir());
    /* 8 clients, 15 requests each, in the background. */
    snprintf(cmd, sizeof cmd,
             "for c in $(seq 8); do ( for i in $(seq 15); do curl -s "
             "--max-time 60 -o /dev/null -w '%%{http_code}\\n' -H "
             "'Content-Type: image/png' --data-binary @%s "
             "http://127.0.0.1:%d/v1/models/tiny:classify; done ) & done "
             ">%s; wait",
             image(3), s.port, out);
    FILE *bg = popen(cmd, "r");
    REQUIRE(bg != NULL);
    for (int r = 0; r < 3; r++) {
        nap(400);
        kill(s.pid, SIGHUP);
    }
    pclose(bg);
    FILE *f = fopen(out, "r");
    int n = 0, bad = 0, code;
    while (f && fscanf(f, "%d", &code) == 1) {
        n++;
        bad += code != 200;
    }
    if (f)
        fclose(f);
    printf("%d answers, %d not 200\n", n, bad);
    CHECK(n == 120 && bad == 0);
    /* Every reload begun has completed (signals that came during one
     * merge into the next, so there may be fewer than three). */
    int begun = 0, done = 0;
    for (int t = 0; t < 100; t++) {
        begun = count(cl_test_slurp(s.log), "SIGHUP: reloading");
        done = count(cl_test_slurp(s.log), "classic serve: reloaded");
        if (begun > 0 && begun == done)
            break;
        nap(100);
    }
    printf("%d reloads\n", done);
    CHECK(done >= 1 && done == begun);
    CHECK(strstr(cl_test_slurp(s.log), "classic serve: reloaded") != NULL);
    CHECK(strstr(cl_test_slurp(s.log), "reload failed") == NULL);
    CHECK(http(&s, "/v2/models/tiny/ready", NULL) == 200);
    CHECK(stop(&s) == 0);
}

CL_TEST(sigterm_drains_then_exits_0)
{
    /* A request that waits up to 5 s for its batch to fill (another is on
     * its way) is in flight when SIGTERM comes: it is answered at once,
     * the held request is cut off after its time, and the server exits
     * 0.  A request with a body that arrives while the server drains, on
     * a keep-alive connection opened before, is answered 503. */
    server s;
    REQUIRE(start(&s, "--max_batch 4 --max_delay_ms 5000 --timeout_s 2"));
    int held = hold(&s);
    REQUIRE(held >= 0);
    /* A keep-alive connection that has had its answer, as a load
     * generator's between two requests. */
    int late = idle_connection(&s);
    REQUIRE(late >= 0);
    REQUIRE(late_post(late) == 400);
    char cmd[16384], out[1300];
    snprintf(out, sizeof out, "%s/inflight", cl_test_tmpdir());
    snprintf(cmd, sizeof cmd,
             "curl -s --max-time 30 -o /dev/null -w '%%{http_code}' -H "
             "'Content-Type: image/jpeg' --data-binary @%s "
             "http://127.0.0.1:%d/v1/models/tiny:classify > %s",
             image(4), s.port, out);
    FILE *bg = popen(cmd, "r");
    REQUIRE(bg != NULL);
    nap(400);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kill(s.pid, SIGTERM);
    for (int t = 0; t < 100 && !strstr(cl_test_slurp(s.log), "SIGTERM: "); t++)
        nap(10);
    int late_code = late_post(late);
    close(late);
    int st = cl_test_wait(s.pid, 30);
    s.pid = 0;
    pclose(bg);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt =
        (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    printf("exited %.2f s after SIGTERM\n", dt);
    CHECK(dt < 4.5);
    close(held);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(strcmp(cl_test_slurp(out), "200") == 0);
    printf("a request arriving while draining: %d\n", late_code);
    CHECK(late_code == 503);
    CHECK(strstr(cl_test_slurp(s.log), "SIGTERM: finishing") != NULL);
    CHECK(strstr(cl_test_slurp(s.log), "stopped") != NULL);
    /* Nothing listens any more. */
    CHECK(http(&s, "/v2/health/live", NULL) == 0);
}

/* A client as a load generator runs one: one connection, a request
 * written whole as soon as the last was answered, until it is refused or
 * the connection closes. */
typedef struct {
    const server *s;
    int requests, answered_503;
} hammer;

static void *hammer_thread(void *arg)
{
    hammer *h = arg;
    int fd = idle_connection(h->s);
    while (fd >= 0) {
        int code = late_post(fd);
        if (code == 0)
            break;
        h->requests++;
        if (code == 503) {
            h->answered_503++;
            break;
        }
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

CL_TEST(sigterm_under_load_exits_0)
{
    /* Requests written whole on keep-alive connections while SIGTERM
     * comes: the ones that arrive while the server drains are answered
     * 503, and the server exits 0, round after round.  The body of such
     * a request once routed it to model -1 and crashed the server in two
     * rounds of six. */
    for (int round = 0; round < 6; round++) {
        server s;
        REQUIRE(start(&s, "--max_delay_ms 1"));
        enum { N = 8 };
        hammer h[N];
        pthread_t t[N];
        for (int i = 0; i < N; i++) {
            h[i] = (hammer){.s = &s};
            REQUIRE(pthread_create(&t[i], NULL, hammer_thread, &h[i]) == 0);
        }
        nap(150 + 60 * round);
        kill(s.pid, SIGTERM);
        int st = cl_test_wait(s.pid, 30);
        s.pid = 0;
        int requests = 0, refused = 0;
        for (int i = 0; i < N; i++) {
            pthread_join(t[i], NULL);
            requests += h[i].requests;
            refused += h[i].answered_503;
        }
        printf("round %d: %d requests, %d answered 503, exit %d\n", round,
               requests, refused, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        CHECK(requests > N);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
}

/* ------------------------------------------------------- the command line */

CL_TEST(command_line_refusals)
{
    const char *ck = checkpoint();
    REQUIRE(ck != NULL);
    char args[16384];
    static const struct {
        const char *extra, *says;
    } bad[] = {
        {"--max_batch 0", "--max_batch 0: expected an integer from 1 to 64"},
        {"--queue x", "--queue x"},
        {"--precision fp16", "expected f32, bf16 or int8"},
        {"--batching some", "--batching some: expected measured or max"},
        {"--bogus 1", "unknown option --bogus"},
        {"--host not-an-ip", "not a numeric IPv4 or IPv6"},
        {"--token_file /nonexistent/t", "cannot read --token_file"},
        {"--model bad/name=x", "must be 1 to 63 letters"},
        {"--model tiny=/nonexistent.safetensors", "nonexistent"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "serve --model tiny=%s --port 0 %s", ck,
                 bad[i].extra);
        if (strncmp(bad[i].extra, "--model", 7) == 0)
            snprintf(args, sizeof args, "serve --port 0 %s", bad[i].extra);
        CHECK(cl_test_classic(args) != 0);
        if (!strstr(cl_test_out, bad[i].says)) {
            printf("%s: expected '%s'\n", bad[i].extra, bad[i].says);
            CHECK(0);
        }
    }
    CHECK(cl_test_classic("serve --port 0") != 0);
    CHECK(strstr(cl_test_out, "--model NAME=CHECKPOINT") != NULL);
}

CL_TEST(bf16_where_the_cpu_has_it_else_refused)
{
    server s;
    const char *ck = checkpoint();
    REQUIRE(ck != NULL);
    char args[16384];
    snprintf(args, sizeof args,
             "serve --model tiny=%s --port 0 --precision bf16 --timeout_s 1",
             ck);
    cl_classifier *c = NULL;
    cl_classifier_opts o = {.size = sizeof o, .precision = "bf16"};
    cl_status st = cl_classifier_open(&c, ck, &o);
    cl_classifier_free(c);
    if (st != CL_OK) {
        /* This CPU has no bf16 dot products: serve refuses as open does. */
        CHECK(cl_test_classic(args) != 0);
        CHECK(strstr(cl_test_out, "bf16") != NULL);
        return;
    }
    REQUIRE(start(&s, "--precision bf16"));
    CHECK(http(&s, "/v2/models/tiny", NULL) == 200);
    CHECK(strstr(body, "\"precision\":\"bf16\"") != NULL);
    CHECK(stop(&s) == 0);
}

/* -------------------------------------------------------------- browser */

/* A free TCP port on 127.0.0.1 (bound, read, released). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    int port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &n) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* The value of "key" in the last WebDriver answer's "value" object, copied
 * into out; "" when absent. */
static const char *wd_value(const char *key, char *out, size_t n)
{
    out[0] = '\0';
    cl_json_doc *d = json();
    const cl_json *v = d ? cl_json_get(cl_json_root(d), "value") : NULL;
    if (v && key)
        v = cl_json_get(v, key);
    if (v && v->type == CL_JSON_STR)
        put(out, n, v->str);
    cl_json_free(d);
    return out;
}

/* Headless Chromium, driven by chromedriver over WebDriver (curl), opens
 * the page, gives the file input an image and reads the top-1 name the
 * page shows: the server's own top-1 for that image.  The screenshot goes
 * to $CLASSIC_SERVE_SCREENSHOT when set (docs/serve-page.png). */
CL_TEST(browser_page_shows_the_top_1)
{
    if (system("command -v chromedriver >/dev/null 2>&1 && command -v "
               "chromium >/dev/null 2>&1") != 0) {
        cl_test_skip("chromedriver or chromium is not installed "
                     "(scripts/install-deps.sh installs both)");
        return;
    }
    server s;
    REQUIRE(start(&s, NULL));
    char args[16384];
    snprintf(args, sizeof args,
             "-H 'Content-Type: image/png' --data-binary @%s", image(5));
    REQUIRE(http(&s, "/v1/models/tiny:classify", args) == 200);
    char want[256];
    {
        cl_json_doc *d = json();
        REQUIRE(d != NULL);
        const cl_json *t = cl_json_get(cl_json_root(d), "top")->child;
        put(want, sizeof want, cl_json_get(t, "class")->str);
        cl_json_free(d);
    }
    server wd = {0};
    wd.port = free_port();
    REQUIRE(wd.port > 0);
    char log[1300], cmd[2000];
    snprintf(log, sizeof log, "%s/chromedriver.log", cl_test_tmpdir());
    fflush(NULL);
    int pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        snprintf(cmd, sizeof cmd, "--port=%d", wd.port);
        execlp("chromedriver", "chromedriver", cmd, (char *)NULL);
        _exit(127);
    }
    REQUIRE(pid > 0);
    int up = 0;
    for (int t = 0; t < 100 && !up; t++) {
        nap(100);
        up = http(&wd, "/status", "--max-time 2") == 200;
    }
    char sid[128] = "", eid[128] = "", text[256] = "";
    if (up) {
        snprintf(args, sizeof args,
                 "-H 'Content-Type: application/json' -d '{\"capabilities\":"
                 "{\"alwaysMatch\":{\"browserName\":\"chrome\","
                 "\"goog:chromeOptions\":{\"binary\":\"/usr/bin/chromium\","
                 "\"args\":[\"--headless\",\"--no-sandbox\",\"--disable-gpu\","
                 "\"--no-first-run\",\"--disable-background-networking\","
                 "\"--disable-component-update\",\"--disable-sync\","
                 "\"--window-size=800,640\",\"--user-data-dir=%s/chrome\"]}}}}"
                 "'",
                 cl_test_tmpdir());
        if (http(&wd, "/session", args) == 200)
            wd_value("sessionId", sid, sizeof sid);
        else
            printf("no session: %s\n", body);
    }
    CHECK(sid[0]);
    if (sid[0]) {
        char path[512];
        snprintf(path, sizeof path, "/session/%s/url", sid);
        snprintf(args, sizeof args,
                 "-H 'Content-Type: application/json' -d "
                 "'{\"url\":\"http://127.0.0.1:%d/\"}'",
                 s.port);
        CHECK(http(&wd, path, args) == 200);
        snprintf(path, sizeof path, "/session/%s/element", sid);
        CHECK(http(&wd, path,
                   "-H 'Content-Type: application/json' -d "
                   "'{\"using\":\"css selector\",\"value\":\"#file\"}'") ==
              200);
        wd_value("element-6066-11e4-a52e-4f735466cecf", eid, sizeof eid);
        CHECK(eid[0]);
        /* The models list must have loaded before the upload. */
        nap(500);
        snprintf(path, sizeof path, "/session/%s/element/%s/value", sid, eid);
        snprintf(args, sizeof args,
                 "-H 'Content-Type: application/json' -d '{\"text\":\"%s\"}'",
                 image(5));
        CHECK(http(&wd, path, args) == 200);
        for (int t = 0; t < 100 && !text[0]; t++) {
            nap(100);
            snprintf(path, sizeof path, "/session/%s/element", sid);
            if (http(&wd, path,
                     "-H 'Content-Type: application/json' -d "
                     "'{\"using\":\"css selector\",\"value\":\"#top1\"}'") !=
                200)
                continue;
            wd_value("element-6066-11e4-a52e-4f735466cecf", eid, sizeof eid);
            snprintf(path, sizeof path, "/session/%s/element/%s/text", sid,
                     eid);
            if (http(&wd, path, NULL) == 200)
                wd_value(NULL, text, sizeof text);
        }
        printf("page top-1 '%s', server top-1 '%s'\n", text, want);
        CHECK(strcmp(text, want) == 0);
        const char *shot = getenv("CLASSIC_SERVE_SCREENSHOT");
        snprintf(path, sizeof path, "/session/%s/screenshot", sid);
        if (shot && http(&wd, path, NULL) == 200) {
            char *b64 = malloc(sizeof body);
            uint8_t *png = malloc(sizeof body);
            size_t n = 0;
            if (b64 && png && wd_value(NULL, b64, sizeof body)[0] &&
                cl_serve_base64_decode(b64, strlen(b64), png, &n) == CL_OK) {
                FILE *f = fopen(shot, "wb");
                if (f) {
                    fwrite(png, 1, n, f);
                    fclose(f);
                }
            }
            free(b64);
            free(png);
        }
        snprintf(path, sizeof path, "/session/%s", sid);
        http(&wd, path, "-X DELETE");
    }
    kill(pid, SIGTERM);
    cl_test_wait(pid, 10);
    if (!sid[0])
        printf("%s\n", cl_test_slurp(log));
    CHECK(stop(&s) == 0);
}

/* Open MPI's session directory goes under $TMPDIR from MPI_Init to
 * MPI_Finalize: the server's TMPDIR must stay empty while it serves. */
static char mpi_tmp[1300];

static void private_tmpdir(void)
{
    setenv("TMPDIR", mpi_tmp, 1);
}

CL_TEST(mpi_is_never_initialised)
{
    snprintf(mpi_tmp, sizeof mpi_tmp, "%s/tmp", cl_test_tmpdir());
    mkdir(mpi_tmp, 0755);
    server s;
    REQUIRE(start_env(&s, NULL, private_tmpdir));
    char args[2000];
    snprintf(args, sizeof args,
             "-H 'Content-Type: image/jpeg' --data-binary @%s", image(0));
    CHECK(http(&s, "/v1/models/tiny:classify", args) == 200);
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "ls -A %s | grep -q ompi", mpi_tmp);
    CHECK(cl_test_run(cmd) != 0);
    CHECK(stop(&s) == 0);
}

CL_TEST(connections_are_bounded)
{
    /* Two connections allowed, both held idle: a third client is turned
     * away at once instead of queueing a thread; once they go, it is
     * served. */
    server s;
    REQUIRE(start(&s, "--max_connections 2 --timeout_s 5"));
    int fd[2];
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)s.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < 2; i++) {
        fd[i] = socket(AF_INET, SOCK_STREAM, 0);
        REQUIRE(fd[i] >= 0);
        REQUIRE(connect(fd[i], (struct sockaddr *)&a, sizeof a) == 0);
    }
    nap(300);
    CHECK(http(&s, "/v2/health/live", "--max-time 3") == 0);
    close(fd[0]);
    close(fd[1]);
    nap(300);
    CHECK(http(&s, "/v2/health/live", NULL) == 200);
    CHECK(stop(&s) == 0);
}
