/* `classic quantize`: a checkpoint into an int8 model file by post-training
 * quantization (calibration on a few hundred images). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/error.h"
#include "train/quantize.h"

static void usage(void)
{
    printf(
        "usage: classic quantize --checkpoint FILE --calib DATA --out "
        "Q.safetensors\n"
        "                        [--samples 512] [--method "
        "minmax|percentile|entropy]\n"
        "                        [--percentile 99.99] [--weight_bits 8|7]\n"
        "                        [--batch_size 16] [--threads N]\n\n"
        "Quantizes a classic checkpoint to int8: BN folded into the convs, "
        "weights\ns8 with a scale per output channel, each int8 layer's "
        "input scale from\nthe first --samples images of DATA read through "
        "the checkpoint's eval\npipeline.  DATA is a dataset `classic "
        "train` reads (its train split is\nused: a Fashion-MNIST or CIFAR "
        "folder, an ImageFolder) or a folder of\nimages.  --method chooses "
        "each activation's range: minmax (the largest\n|x|), percentile "
        "(the --percentile of |x|, the default) or entropy\n(TensorRT's KL "
        "divergence).  --weight_bits 7 keeps the weights in\n[-63, 63], "
        "which CPUs without VNNI sum without saturating (classic\nthere "
        "then computes as ONNX Runtime does on the exported file; 8 bits\n"
        "run at 7 there anyway).  The first conv and the classifier stay "
        "f32.\nThe "
        "file opens wherever a checkpoint does, at int8 by default "
        "(--precision\nf32 runs its dequantized weights); docs/deploy.md.\n");
}

static const char *const own[] = {
    "--checkpoint", "--calib",      "--out",     "--samples",     "--method",
    "--percentile", "--batch_size", "--threads", "--weight_bits", NULL};

/* Option opt's integer value in [lo, hi] (def when absent); -1 after a
 * message when it is not one. */
static int int_option(int argc, char **argv, const char *opt, int def, int lo,
                      int hi, int *out)
{
    const char *v = cl_cli_option(argc, argv, opt);
    char *end = NULL;
    *out = def;
    if (!v)
        return 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi) {
        fprintf(stderr,
                "classic: quantize: %s '%s': expected an integer in "
                "[%d, %d]\n",
                opt, v, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

int cl_cmd_quantize(int argc, char **argv)
{
    if (cl_cli_is_help(argc, argv)) {
        usage();
        return 0;
    }
    if (cl_cli_refuse_options(argc, argv, "quantize", own, NULL, 0))
        return 2;
    cl_quantize_opts o;
    memset(&o, 0, sizeof o);
    o.checkpoint = cl_cli_option(argc, argv, "--checkpoint");
    o.calib = cl_cli_option(argc, argv, "--calib");
    o.out = cl_cli_option(argc, argv, "--out");
    if (!o.checkpoint || !o.calib || !o.out) {
        fprintf(stderr,
                "classic: quantize: --%s is required (classic "
                "quantize --help)\n",
                !o.checkpoint ? "checkpoint FILE"
                : !o.calib    ? "calib DATA"
                              : "out Q.safetensors");
        return 2;
    }
    if (int_option(argc, argv, "--samples", 512, 1, 1 << 24, &o.samples) ||
        int_option(argc, argv, "--batch_size", 16, 1, 4096, &o.batch) ||
        int_option(argc, argv, "--threads", 0, 0, 1024, &o.threads) ||
        int_option(argc, argv, "--weight_bits", 8, 7, 8, &o.q.weight_bits))
        return 2;
    const char *method = cl_cli_option(argc, argv, "--method");
    o.q.method = CL_QUANT_PERCENTILE;
    cl_status s;
    if (method && (s = cl_quant_method_parse(method, &o.q.method)) != CL_OK)
        return cl_cli_fail("quantize", s);
    const char *pct = cl_cli_option(argc, argv, "--percentile");
    if (pct) {
        char *end = NULL;
        o.q.percentile = strtod(pct, &end);
        if (end == pct || *end || !(o.q.percentile > 0.0) ||
            o.q.percentile > 100.0) {
            fprintf(stderr,
                    "classic: quantize: --percentile '%s': expected "
                    "a number in (0, 100]\n",
                    pct);
            return 2;
        }
        if (o.q.method != CL_QUANT_PERCENTILE) {
            fprintf(stderr, "classic: quantize: --percentile applies to "
                            "--method percentile only\n");
            return 2;
        }
    }
    cl_quantize_report r;
    s = cl_quantize_run(&o, &r);
    if (s != CL_OK)
        return cl_cli_fail("quantize", s);
    printf("calibrated on %d images of %s (%s)\n"
           "%d conv/linear layers int8, %d stay f32 (%s)\n"
           "wrote %s\n",
           r.samples, r.data, cl_quant_method_name(o.q.method), r.n_int8,
           r.n_float, r.stay_float, o.out);
    return 0;
}
