/* `classic info`: a model's layer table, parameters and FLOPs, and a
 * checkpoint's metadata. */
#include <stdio.h>
#include <string.h>

#include "classic/classic.h"

#include "cli/cli.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "interop/interop.h"
#include "interop/quantized.h"
#include "io/safetensors.h"
#include "models/arch.h"
#include "train/model.h"

static void usage(void)
{
    printf("usage: classic info --checkpoint FILE [--arch NAME] "
           "[--config]\n"
           "       classic info --arch NAME [--num_classes 1000] "
           "[--image_size SIDE]\n"
           "                    [--stem imagenet|cifar|cifar_pool] "
           "[--in_channels 3]\n\n"
           "Prints the layer table (name, op, output shape, parameters), "
           "the parameter\ncount and forward FLOPs per image; for a "
           "checkpoint also its metadata\n(--config: the recipe it "
           "holds).  FILE is any checkpoint classic reads:\na classic or "
           "plain safetensors file, a PyTorch .pth or a MindSpore .ckpt\n"
           "(arch inferred); for an int8 file (classic quantize) also which\n"
           "layers run int8 and which stay f32.  NAME is one of\n  %s;\nSIDE "
           "defaults to "
           "the network's own input (224; 32 for swin_micro and the\n"
           "CIFAR stems).\n",
           cl_arch_names());
}

/* An int8 file (`classic quantize`): how many conv and linear layers run
 * int8, and which stay f32. */
static int print_int8(const char *path)
{
    cl_model m;
    cl_status s = cl_model_open_weights(&m, path, NULL, 1, NULL, CL_PLAN_INFER,
                                        0, 0, CL_PRECISION_AUTO);
    if (s != CL_OK)
        return cl_cli_fail("info", s);
    int n8 = 0, nf = 0;
    cl_qfile_count(&m.g, &n8, &nf);
    printf("int8: %d conv/linear layers; f32:", n8);
    for (int i = 0, k = 0; i < m.g.n_nodes; i++) {
        cl_op_kind op = m.g.nodes[i].op;
        if ((op == CL_OP_CONV2D || op == CL_OP_LINEAR) &&
            !cl_graph_quant_node(&m.g, i))
            printf("%s %s", k++ ? "," : "", m.g.nodes[i].name);
    }
    printf("%s\n", nf ? "" : " none");
    cl_model_close(&m);
    return 0;
}

static int print_meta(const char *path)
{
    cl_st_file *f = NULL;
    cl_status s = cl_st_open(&f, path);
    if (s != CL_OK)
        return cl_cli_fail("info", s);
    printf("%s: %zu tensors\n", path, cl_st_count(f));
    for (size_t i = 0; i < cl_st_metadata_count(f); i++) {
        const char *k = cl_st_metadata_key(f, i);
        const char *v = cl_st_metadata_value(f, i);
        if (strcmp(k, CL_META_CONFIG) == 0)
            printf("  %-16s (%zu bytes of YAML: add --config to print "
                   "it)\n",
                   k, strlen(v));
        else
            printf("  %-16s %s\n", k, v);
    }
    cl_st_close(f);
    return 0;
}

/* A checkpoint of any kind classic reads: a safetensors file's metadata,
 * then the network the API opens from it (for weights without classic's
 * metadata, the arch inferred from the tensors). */
static int info_checkpoint(int argc, char **argv, const char *ckpt,
                           const char *arch)
{
    cl_weights_format fmt = CL_WF_UNKNOWN;
    cl_status s = cl_weights_sniff(ckpt, &fmt);
    if (s != CL_OK)
        return cl_cli_fail("info", s);
    char v[64] = "";
    if (fmt == CL_WF_SAFETENSORS &&
        cl_ckpt_read_meta(ckpt, CL_META_ARCH, v, sizeof v) != CL_OK)
        v[0] = '\0';
    int classic = v[0] != '\0';
    if (fmt == CL_WF_SAFETENSORS) {
        if (print_meta(ckpt) != 0)
            return 1;
        for (int i = 1; i < argc; i++)
            if (strcmp(argv[i], "--config") == 0) {
                char buf[1 << 16];
                if (cl_ckpt_read_meta(ckpt, CL_META_CONFIG, buf, sizeof buf) ==
                    CL_OK)
                    printf("%s", buf);
            }
    }
    char prec[16] = "";
    if (classic &&
        cl_ckpt_read_meta(ckpt, CL_QUANT_META_PRECISION, prec, sizeof prec) ==
            CL_OK &&
        strcmp(prec, "int8") == 0 && print_int8(ckpt) != 0)
        return 1;
    cl_classifier *c = NULL;
    s = cl_classifier_load(&c, ckpt, arch, "none");
    if (s != CL_OK) {
        /* A safetensors file that holds no model (embed's features, an
         * optimizer state) still had its metadata to show. */
        if (fmt == CL_WF_SAFETENSORS && s == CL_ERR_FORMAT) {
            printf("(no layer table: %s)\n", cl_last_error());
            return 0;
        }
        return cl_cli_fail("info", s);
    }
    if (!classic)
        printf("%s: no classic metadata; the arch is inferred from the "
               "tensor names and shapes\n",
               ckpt);
    s = cl_classifier_print(c, stdout);
    cl_classifier_free(c);
    return s == CL_OK ? 0 : cl_cli_fail("info", s);
}

int cl_cmd_info(int argc, char **argv)
{
    if (cl_cli_is_help(argc, argv)) {
        usage();
        return 0;
    }
    const char *ckpt = cl_cli_option(argc, argv, "--checkpoint");
    const char *arch = cl_cli_option(argc, argv, "--arch");
    if (ckpt)
        return info_checkpoint(argc, argv, ckpt, arch);
    if (!arch) {
        usage();
        return 2;
    }
    /* The network by name, with the defaults the usage shows; the side
     * is the network's own (swin_micro is made for 32 px). */
    cl_arch a;
    char side[16] = "224";
    if (cl_arch_parse(arch, cl_cli_option(argc, argv, "--stem"), &a) == CL_OK)
        snprintf(side, sizeof side, "%d", cl_arch_default_side(&a));
    const struct {
        const char *opt, *key, *def;
    } keys[] = {{"--num_classes", "num_classes", "1000"},
                {"--image_size", "image_size", side},
                {"--stem", "stem", "imagenet"},
                {"--in_channels", "in_channels", "3"}};
    enum { N_KEYS = sizeof keys / sizeof keys[0] };
    char kv[N_KEYS + 1][160];
    const char *ov[N_KEYS + 1];
    snprintf(kv[0], sizeof kv[0], "model=%s", arch);
    for (int i = 0; i < N_KEYS; i++) {
        const char *val = cl_cli_option(argc, argv, keys[i].opt);
        snprintf(kv[i + 1], sizeof kv[i + 1], "%s=%s", keys[i].key,
                 val ? val : keys[i].def);
    }
    for (int i = 0; i <= N_KEYS; i++)
        ov[i] = kv[i];
    cl_classifier *c = NULL;
    cl_status s = cl_classifier_create(&c, NULL, ov, N_KEYS + 1, "none");
    if (s == CL_OK)
        s = cl_classifier_print(c, stdout);
    cl_classifier_free(c);
    return s == CL_OK ? 0 : cl_cli_fail("info", s);
}
