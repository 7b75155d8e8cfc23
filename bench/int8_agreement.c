/* classic's side of bench/int8_agreement.sh: a model's validation split
 * through its own eval pipeline, written as the network's input (float32,
 * what ONNX Runtime is then given), with the labels and classic's top-1
 * at the asked precision.
 *
 *   int8_agreement CKPT PRECISION OUT_DIR [key=value ...]
 *
 * OUT_DIR receives x.bin (n, C, H, W), labels.bin and classic.bin (int32
 * each) and shape.txt ("n C H W"); the overrides are the config's
 * (data_dir=..., limit_val=...), as classic eval takes them. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "classic/status.h"
#include "core/error.h"
#include "data/data.h"
#include "io/config.h"
#include "train/model.h"

enum { BATCH = 64 };

static int write_all(FILE *f, const void *p, size_t n)
{
    return fwrite(p, 1, n, f) == n ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: int8_agreement CKPT f32|bf16|int8 OUT_DIR "
                        "[key=value ...]\n");
        return 2;
    }
    cl_precision prec;
    cl_model m;
    cl_model_data md;
    cl_status s = cl_precision_parse(argv[2], &prec);
    int opened = 0, data = 0;
    FILE *fx = NULL, *fl = NULL, *fc = NULL;
    float *xpad = NULL, *logits = NULL;
    char path[4096];
    long long n = 0, right = 0;
    memset(&md, 0, sizeof md);
    if (s != CL_OK)
        goto fail;
    if ((s = cl_model_open_weights(&m, argv[1], NULL, BATCH, "onednn",
                                   CL_PLAN_INFER, 0, 0, prec)) != CL_OK)
        goto fail;
    opened = 1;
    for (int i = 4; i < argc; i++)
        if ((s = cl_config_set_pair(&m.cfg, argv[i], "int8_agreement")) !=
            CL_OK)
            goto fail;
    if ((s = cl_model_data_open(&m, BATCH, 1, 0, &md)) != CL_OK)
        goto fail;
    data = 1;
    const cl_shape *in = &m.g.tensors[m.g.input].shape;
    const size_t per = (size_t)(in->d[1] * in->d[2] * in->d[3]);
    const int K = m.g.num_classes;
    xpad = calloc((size_t)BATCH * per, sizeof(float));
    logits = malloc((size_t)BATCH * K * sizeof(float));
    snprintf(path, sizeof path, "%s/x.bin", argv[3]);
    fx = fopen(path, "wb");
    snprintf(path, sizeof path, "%s/labels.bin", argv[3]);
    fl = fopen(path, "wb");
    snprintf(path, sizeof path, "%s/classic.bin", argv[3]);
    fc = fopen(path, "wb");
    if (!xpad || !logits || !fx || !fl || !fc) {
        s = cl_error(CL_ERR_IO, "int8_agreement: cannot write in %s", argv[3]);
        goto fail;
    }
    if ((s = cl_loader_start_epoch(md.ld, 0)) != CL_OK)
        goto fail;
    for (;;) {
        cl_batch b;
        if ((s = cl_loader_next(md.ld, &b)) != CL_OK)
            goto fail;
        if (b.n == 0)
            break;
        memcpy(xpad, b.x, (size_t)b.n * per * sizeof(float));
        memset(xpad + (size_t)b.n * per, 0,
               (size_t)(BATCH - b.n) * per * sizeof(float));
        if ((s = cl_backend_set_input(m.be, xpad, NULL, NULL)) != CL_OK ||
            (s = cl_backend_forward(m.be, 0, NULL)) != CL_OK ||
            (s = cl_backend_read(m.be, m.g.logits, logits)) != CL_OK)
            goto fail;
        for (int i = 0; i < b.n; i++) {
            int32_t best = 0;
            const float *z = logits + (size_t)i * K;
            for (int k = 1; k < K; k++)
                best = z[k] > z[best] ? k : best;
            right += best == b.labels[i];
            if (write_all(fc, &best, sizeof best) ||
                write_all(fl, &b.labels[i], sizeof b.labels[i])) {
                s = cl_error(CL_ERR_IO, "int8_agreement: short write");
                goto fail;
            }
        }
        if (write_all(fx, b.x, (size_t)b.n * per * sizeof(float))) {
            s = cl_error(CL_ERR_IO, "int8_agreement: short write");
            goto fail;
        }
        n += b.n;
    }
    snprintf(path, sizeof path, "%s/shape.txt", argv[3]);
    FILE *fs = fopen(path, "w");
    if (!fs) {
        s = cl_error(CL_ERR_IO, "int8_agreement: cannot write %s", path);
        goto fail;
    }
    fprintf(fs, "%lld %lld %lld %lld\n", n, (long long)in->d[1],
            (long long)in->d[2], (long long)in->d[3]);
    fclose(fs);
    printf("classic %s: %lld images, top-1 %.2f%%\n",
           cl_precision_name(m.precision), n, n ? 100.0 * right / n : 0.0);
fail:
    if (fx)
        fclose(fx);
    if (fl)
        fclose(fl);
    if (fc)
        fclose(fc);
    free(xpad);
    free(logits);
    if (data)
        cl_model_data_close(&md);
    if (opened)
        cl_model_close(&m);
    if (s != CL_OK) {
        fprintf(stderr, "int8_agreement: %s\n",
                cl_last_error()[0] ? cl_last_error() : cl_status_message(s));
        return 1;
    }
    return 0;
}
