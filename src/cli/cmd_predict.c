/* `classic predict`: top-k classes of image files, through the public API
 * (include/classic/classic.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "classic/classic.h"
#include "cli/cli.h"
#include "io/strbuf.h"

static void usage(void)
{
    printf("usage: classic predict --checkpoint FILE [--top K] [--json]\n"
           "                       [--backend onednn|ref] [--arch ARCH] "
           "[--load_ema false]\n"
           "                       [--precision f32|bf16|int8] IMAGE...\n\n"
           "Prints the top-K classes (default 5) with their probabilities "
           "for each\nJPEG or PNG image, preprocessed as the checkpoint's "
           "eval pipeline.\nFILE is a classic checkpoint, a PyTorch .pth or a "
           "safetensors file with\ntorchvision's names: their arch is "
           "inferred (or checked against --arch),\na 1000-class head gets "
           "ImageNet's names and eval pipeline (resize 256,\ncentre crop "
           "224, ImageNet mean/std).\nA checkpoint holding an EMA of its "
           "weights (ema: true) predicts with\nthe EMA; --load_ema false "
           "takes its raw weights.\n--precision bf16 runs bf16 weights and "
           "activations: about twice "
           "as fast on\nCPUs with avx512_bf16 or AMX, refused elsewhere; int8 "
           "runs a file\n`classic quantize` wrote, its default; f32 is the "
           "default otherwise\n(docs/deploy.md).\n--json prints one JSON array "
           "with "
           "an object per image, in the order given:\n"
           "{\"file\": ..., \"top\": [{\"class\", \"index\", \"prob\"}, "
           "...]}, or\n{\"file\": ..., \"error\": ...} for an image that "
           "failed (the exit status is\nthen 1).\n");
}

static const char *const own[] = {
    "--checkpoint", "--top",       "--backend", "--arch",
    "--load_ema",   "--precision", NULL};

static const char *const flags[] = {"--json", NULL};

static int is_own(const char *a)
{
    for (int k = 0; own[k]; k++)
        if (strcmp(a, own[k]) == 0)
            return 1;
    return 0;
}

/* Prints `"file":"<path>"` as the start of a JSON object. */
static void json_file(const char *path)
{
    cl_strbuf b;
    cl_strbuf_init(&b);
    cl_strbuf_add_json_str(&b, path, strlen(path));
    printf("{\"file\":%s", b.failed ? "\"\"" : cl_strbuf_str(&b));
    cl_strbuf_free(&b);
}

/* A file that failed (why: its sentence, already on stderr): with --json
 * an object in its place, so that the array keeps one entry per file in
 * the order given. */
static void print_error(const char *path, const char *why, int json, int first)
{
    if (!json)
        return;
    if (!first)
        printf(",\n");
    cl_strbuf b;
    cl_strbuf_init(&b);
    cl_strbuf_add_json_str(&b, why, strlen(why));
    json_file(path);
    printf(",\"error\":%s}", b.failed ? "\"\"" : cl_strbuf_str(&b));
    cl_strbuf_free(&b);
}

/* Prints the top classes of one file (its probabilities in probs) as text
 * or one JSON object of the array. */
static cl_status print_one(cl_classifier *c, const char *path, int top,
                           int json, const float *probs, cl_prediction *best,
                           int first)
{
    int n = cl_classifier_top_k(c, probs, top, best);
    if (n < 0)
        return (cl_status)n;
    if (json) {
        if (!first)
            printf(",\n");
        json_file(path);
        printf(",\"top\":[");
    } else {
        printf("%s\n", path);
    }
    for (int t = 0; t < n; t++) {
        if (json) {
            cl_strbuf b;
            cl_strbuf_init(&b);
            cl_strbuf_add_json_str(&b, best[t].name, strlen(best[t].name));
            printf("%s{\"class\":%s,\"index\":%d,\"prob\":%.6f}", t ? "," : "",
                   cl_strbuf_str(&b), best[t].index, best[t].prob);
            cl_strbuf_free(&b);
        } else {
            printf("  %2d. %-24s %6.2f%%\n", t + 1, best[t].name,
                   100 * best[t].prob);
        }
    }
    if (json)
        printf("]}");
    return CL_OK;
}

/* Files per batch call: a batch is several times faster than one image at
 * a time; a batch with a file that fails is retried file by file, so that
 * each bad file is named and the others still print. */
enum { PREDICT_CHUNK = 16 };

int cl_cmd_predict(int argc, char **argv)
{
    if (cl_cli_is_help(argc, argv)) {
        usage();
        return 0;
    }
    const char *ckpt = cl_cli_option(argc, argv, "--checkpoint");
    const char *topk = cl_cli_option(argc, argv, "--top");
    const char *backend = cl_cli_option(argc, argv, "--backend");
    const char *arch = cl_cli_option(argc, argv, "--arch");
    int json = 0, n_images = 0;
    for (int i = 1; i < argc; i++) {
        if (is_own(argv[i]))
            i++;
        else if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (strncmp(argv[i], "--", 2) == 0)
            return cl_cli_refuse_options(argc, argv, "predict", own, flags, 0);
        else
            n_images++;
    }
    if (!ckpt || n_images == 0) {
        fprintf(stderr, "classic: predict: --checkpoint FILE and at least one "
                        "image are required\n");
        return 2;
    }
    int top = topk ? atoi(topk) : 5;
    if (top < 1) {
        fprintf(stderr, "classic: predict: --top must be >= 1\n");
        return 2;
    }
    int raw = 0;
    if (cl_cli_raw_weights(argc, argv, "predict", &raw))
        return 2;
    cl_classifier_opts o = {
        .size = sizeof o, .arch = arch, .backend = backend, .raw_weights = raw};
    if (cl_cli_precision(argc, argv, "predict", &o.precision))
        return 2;
    cl_classifier *c = NULL;
    cl_status s = cl_classifier_open(&c, ckpt, &o);
    if (s != CL_OK)
        return cl_cli_fail("predict", s);
    int K = cl_classifier_num_classes(c);
    float *probs = malloc((size_t)K * PREDICT_CHUNK * sizeof(float));
    cl_prediction *best = malloc((size_t)K * sizeof(cl_prediction));
    const char **paths = malloc((size_t)n_images * sizeof *paths);
    char ok[PREDICT_CHUNK], why[PREDICT_CHUNK][512];
    int failed = 0, first = 1, n = 0;
    if (!probs || !best || !paths) {
        free(probs);
        free(best);
        free(paths);
        cl_classifier_free(c);
        return cl_cli_fail("predict", CL_ERR_NOMEM);
    }
    for (int i = 1; i < argc; i++) {
        if (is_own(argv[i]))
            i++;
        else if (strncmp(argv[i], "--", 2) != 0)
            paths[n++] = argv[i];
    }
    if (json)
        printf("[");
    for (int i0 = 0; i0 < n; i0 += PREDICT_CHUNK) {
        int nb = n - i0 < PREDICT_CHUNK ? n - i0 : PREDICT_CHUNK;
        memset(ok, 1, sizeof ok);
        if (cl_classifier_classify_files(c, nb, paths + i0, probs) != CL_OK)
            for (int j = 0; j < nb; j++) {
                s = cl_classifier_classify_file(c, paths[i0 + j],
                                                probs + (size_t)j * K);
                if (s != CL_OK) {
                    fprintf(stderr, "classic: predict: %s\n", cl_last_error());
                    snprintf(why[j], sizeof why[j], "%s", cl_last_error());
                    ok[j] = 0;
                    failed = 1;
                }
            }
        for (int j = 0; j < nb; j++) {
            if (!ok[j]) {
                print_error(paths[i0 + j], why[j], json, first);
                first = 0;
                continue;
            }
            s = print_one(c, paths[i0 + j], top, json, probs + (size_t)j * K,
                          best, first);
            first = 0;
            if (s != CL_OK) {
                fprintf(stderr, "classic: predict: %s\n", cl_last_error());
                failed = 1;
            }
        }
        fflush(stdout);
    }
    if (json)
        printf("]\n");
    free(probs);
    free(best);
    free(paths);
    cl_classifier_free(c);
    return failed;
}
