/* `classic predict`: top-k classes of image files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/error.h"
#include "core/mem.h"
#include "io/strbuf.h"
#include "train/model.h"

static void usage(void)
{
    printf("usage: classic predict --checkpoint FILE [--top K] [--json] "
           "[--backend onednn|ref]\n"
           "                       [--arch resnetNN] IMAGE...\n\n"
           "Prints the top-K classes (default 5) with their probabilities "
           "for each\nJPEG or PNG image, preprocessed as the checkpoint's "
           "eval pipeline.\nFILE is a classic checkpoint, a PyTorch .pth or a "
           "safetensors file with\ntorchvision's names: their arch is "
           "inferred (or checked against --arch),\na 1000-class head gets "
           "ImageNet's names and eval pipeline (resize 256,\ncentre crop "
           "224, ImageNet mean/std).\n");
}

static const char *const own[] = {"--checkpoint", "--top", "--backend",
                                  "--arch", NULL};

static int is_own(const char *a)
{
    for (int k = 0; own[k]; k++)
        if (strcmp(a, own[k]) == 0)
            return 1;
    return 0;
}

static cl_status predict_one(cl_model *m, const char *path, int top, int json,
                             float *x, float *logits, int first)
{
    cl_status s = cl_model_infer_image(m, path, x, logits, NULL);
    if (s != CL_OK)
        return s;
    int K = m->num_classes;
    double mx = logits[0], se = 0;
    for (int k = 1; k < K; k++)
        mx = logits[k] > mx ? logits[k] : mx;
    for (int k = 0; k < K; k++)
        se += exp(logits[k] - mx);
    if (top > K)
        top = K;
    if (json)
        printf("%s{\"file\":\"%s\",\"top\":[", first ? "" : ",\n", path);
    else
        printf("%s\n", path);
    unsigned char *used = calloc((size_t)K, 1);
    if (!used) {
        return cl_error(CL_ERR_NOMEM, "predict");
    }
    for (int t = 0; t < top; t++) {
        int best = -1;
        for (int k = 0; k < K; k++)
            if (!used[k] && (best < 0 || logits[k] > logits[best]))
                best = k;
        used[best] = 1;
        double p = exp(logits[best] - mx) / se;
        if (json) {
            cl_strbuf b;
            cl_strbuf_init(&b);
            cl_strbuf_add_json_str(&b, m->class_names[best],
                                   strlen(m->class_names[best]));
            printf("%s{\"class\":%s,\"index\":%d,\"prob\":%.6f}", t ? "," : "",
                   cl_strbuf_str(&b), best, p);
            cl_strbuf_free(&b);
        } else {
            printf("  %2d. %-24s %6.2f%%\n", t + 1, m->class_names[best],
                   100 * p);
        }
    }
    free(used);
    if (json)
        printf("]}");
    return CL_OK;
}

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
        else if (strncmp(argv[i], "--", 2) == 0) {
            fprintf(stderr, "classic: predict: unknown option %s\n", argv[i]);
            return 2;
        } else
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
    cl_model m;
    cl_status s = cl_model_open_as(
        &m, ckpt, arch, 1, backend ? backend : "onednn", CL_PLAN_INFER, 0);
    if (s != CL_OK)
        return cl_cli_fail("predict", s);
    size_t per = (size_t)m.in_c * m.side * m.side;
    float *x = cl_alloc(per * sizeof(float), "predict input");
    float *logits =
        cl_alloc((size_t)m.num_classes * sizeof(float), "predict logits");
    int failed = 0, first = 1;
    if (!x || !logits) {
        cl_model_close(&m);
        return cl_cli_fail("predict", CL_ERR_NOMEM);
    }
    if (json)
        printf("[");
    for (int i = 1; i < argc; i++) {
        if (is_own(argv[i])) {
            i++;
            continue;
        }
        if (strncmp(argv[i], "--", 2) == 0)
            continue;
        s = predict_one(&m, argv[i], top, json, x, logits, first);
        first = 0;
        if (s != CL_OK) {
            fprintf(stderr, "classic: predict: %s\n", cl_last_error());
            failed = 1;
        }
    }
    if (json)
        printf("]\n");
    cl_free(x);
    cl_free(logits);
    cl_model_close(&m);
    return failed;
}
