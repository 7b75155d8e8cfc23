/* `classic export`: a checkpoint's inference graph as an ONNX model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/error.h"
#include "interop/interop.h"
#include "io/safetensors.h"
#include "io/strbuf.h"
#include "train/model.h"

static void usage(void)
{
    printf(
        "usage: classic export --checkpoint FILE --onnx OUT.onnx "
        "[--batch N]\n"
        "                      [--arch ARCH] [--load_ema false] "
        "[--precision f32|int8]\n\n"
        "Writes the checkpoint's inference graph as ONNX (opset 17): "
        "input \"input\"\n(N,C,H,W) float, output \"logits\" (N,K); "
        "BatchNorm folded into the convs.\nWithout --batch the batch "
        "dimension is symbolic (\"N\").  metadata_props\ncarry the "
        "preprocessing: image_size, resize, mean, std, class_names.\nFILE may "
        "also be a PyTorch .pth or a plain safetensors file with\n"
        "torchvision's names (arch inferred, or checked against "
        "--arch).\nA checkpoint holding an EMA of its weights exports the "
        "EMA; --load_ema false\nexports its raw weights.\nThe file is f32, "
        "the precision ONNX runtimes take and lower themselves:\n"
        "--precision bf16 is refused (ONNX Runtime's CPU provider has no "
        "bf16\nconvolution).  A quantized file (classic quantize) exports "
        "as QDQ: each int8\nconv and linear reads its input through "
        "QuantizeLinear/DequantizeLinear and\nits INT8 weights through a "
        "per-channel DequantizeLinear (--precision int8,\nthe default "
        "there); --precision f32 exports its dequantized weights as a\n"
        "float model.\n");
}

int cl_cmd_export(int argc, char **argv)
{
    if (cl_cli_is_help(argc, argv)) {
        usage();
        return 0;
    }
    const char *ckpt = cl_cli_option(argc, argv, "--checkpoint");
    const char *out = cl_cli_option(argc, argv, "--onnx");
    const char *batch_s = cl_cli_option(argc, argv, "--batch");
    const char *arch = cl_cli_option(argc, argv, "--arch");
    static const char *const own[] = {
        "--checkpoint", "--onnx",      "--batch", "--arch",
        "--load_ema",   "--precision", NULL};
    if (cl_cli_refuse_options(argc, argv, "export", own, NULL, 0))
        return 2;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) == 0)
            i++; /* an option of own and its value */
        else {
            fprintf(stderr, "classic: export: unexpected argument %s\n",
                    argv[i]);
            return 2;
        }
    }
    if (!ckpt || !out) {
        fprintf(stderr, "classic: export: --checkpoint FILE and --onnx OUT are "
                        "required\n");
        return 2;
    }
    int batch = 0;
    if (batch_s) {
        char *end = NULL;
        long b = strtol(batch_s, &end, 10);
        if (end == batch_s || *end || b < 1 || b > 65536) {
            fprintf(stderr, "classic: export: --batch must be in [1, 65536]\n");
            return 2;
        }
        batch = (int)b;
    }
    int raw = 0;
    if (cl_cli_raw_weights(argc, argv, "export", &raw))
        return 2;
    const char *precision = NULL;
    if (cl_cli_precision(argc, argv, "export", &precision))
        return 2;
    cl_precision prec = CL_PRECISION_AUTO;
    if (cl_precision_parse(precision, &prec) != CL_OK)
        return cl_cli_fail("export", CL_ERR_ARG);
    if (prec == CL_PRECISION_BF16) {
        fprintf(stderr,
                "classic: export: --precision bf16: the ONNX file is f32, as "
                "ONNX runtimes take it (ONNX Runtime's CPU provider has no "
                "bf16 convolution); run bf16 with classic itself or drop "
                "--precision\n");
        return 2;
    }
    /* A symbolic batch is exported from a graph of two images: the
     * exporter can then check that each gather moves rows within an image
     * (docs/interop.md), which a graph of one cannot show; the file is the
     * same as from any other batch.  No backend: the exporter reads the
     * graph's weights and scales only; the model resolves the precision
     * (int8 for a quantized file unless f32 is asked, int8 refused on f32
     * weights naming classic quantize). */
    cl_model m;
    cl_status s = cl_model_open_weights(&m, ckpt, arch, batch > 0 ? batch : 2,
                                        NULL, CL_PLAN_INFER, 1, raw, prec);
    if (s != CL_OK)
        return cl_cli_fail("export", s);
    const int qdq = m.precision == CL_PRECISION_INT8;
    if (m.g.quant && !qdq)
        fprintf(stderr,
                "classic: export: %s is quantized; --precision f32 "
                "writes its dequantized weights (q * scale) as a "
                "float model, without QuantizeLinear/"
                "DequantizeLinear\n",
                ckpt);
    /* A classic checkpoint's metadata strings are read in place from the
     * open file (class names of 1000 classes run to tens of kilobytes);
     * weights without metadata (.pth, plain safetensors) export what
     * cl_model_open inferred: the arch and ImageNet's defaults. */
    cl_st_file *f = NULL;
    static const char *const keys[] = {"arch",       "stem", "num_classes",
                                       "image_size", "mean", "std",
                                       "class_names"};
    enum { NK = sizeof keys / sizeof keys[0] };
    cl_onnx_kv kv[NK + 3];
    int n = 0;
    cl_strbuf names, mean, std;
    cl_strbuf_init(&names);
    cl_strbuf_init(&mean);
    cl_strbuf_init(&std);
    char depth[32], k_s[16], side[16];
    if (!m.foreign) {
        if ((s = cl_st_open(&f, ckpt)) != CL_OK)
            goto done;
        for (int k = 0; k < NK; k++) {
            const char *v = cl_st_metadata(f, keys[k]);
            if (v && v[0])
                kv[n++] = (cl_onnx_kv){keys[k], v};
        }
    } else {
        cl_strbuf_addc(&names, '[');
        for (int k = 0; k < m.num_classes; k++) {
            if (k)
                cl_strbuf_addc(&names, ',');
            cl_strbuf_add_json_str(&names, m.class_names[k],
                                   strlen(m.class_names[k]));
        }
        cl_strbuf_addc(&names, ']');
        for (int c = 0; c < m.cfg.n_mean; c++)
            cl_strbuf_addf(&mean, "%s%g", c ? "," : "", m.cfg.mean[c]);
        for (int c = 0; c < m.cfg.n_std; c++)
            cl_strbuf_addf(&std, "%s%g", c ? "," : "", m.cfg.std[c]);
        cl_arch_name(&m.arch, depth, sizeof depth);
        snprintf(k_s, sizeof k_s, "%d", m.num_classes);
        snprintf(side, sizeof side, "%d", m.side);
        kv[n++] = (cl_onnx_kv){"arch", depth};
        if (cl_arch_stem(&m.arch))
            kv[n++] = (cl_onnx_kv){"stem", cl_arch_stem(&m.arch)};
        kv[n++] = (cl_onnx_kv){"num_classes", k_s};
        kv[n++] = (cl_onnx_kv){"image_size", side};
        if (m.cfg.n_mean)
            kv[n++] = (cl_onnx_kv){"mean", cl_strbuf_str(&mean)};
        if (m.cfg.n_std)
            kv[n++] = (cl_onnx_kv){"std", cl_strbuf_str(&std)};
        kv[n++] = (cl_onnx_kv){"class_names", cl_strbuf_str(&names)};
    }
    char crop[32], pre[256];
    double pct = m.cfg.crop_pct > 0 ? m.cfg.crop_pct : 0.875;
    snprintf(crop, sizeof crop, "%g", pct);
    snprintf(pre, sizeof pre,
             "RGB in [0,1]; resize the shorter side to %d (image_size / "
             "crop_pct), center-crop %dx%d; (x - mean) / std per channel; "
             "NCHW float32",
             (int)(m.side / pct + 0.5), m.side, m.side);
    kv[n++] = (cl_onnx_kv){"crop_pct", crop};
    kv[n++] = (cl_onnx_kv){"preprocessing", pre};
    kv[n++] = (cl_onnx_kv){"precision", qdq ? "int8 (QDQ)" : "f32"};
    cl_onnx_opts o = {
        .batch = batch, .meta = kv, .n_meta = n, .dequantized = !qdq};
    s = cl_interop_export_onnx(&m.g, out, &o);
done:
    cl_st_close(f);
    cl_strbuf_free(&names);
    cl_strbuf_free(&mean);
    cl_strbuf_free(&std);
    cl_model_close(&m);
    if (s != CL_OK)
        return cl_cli_fail("export", s);
    printf("wrote %s (%s batch, %s)\n", out, batch ? batch_s : "dynamic",
           qdq ? "int8 as QDQ" : "f32");
    return 0;
}
