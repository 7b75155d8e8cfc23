/* `classic info`: a model's layer table, parameters and FLOPs, and a
 * checkpoint's metadata. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "interop/interop.h"
#include "io/safetensors.h"
#include "models/resnet.h"
#include "train/model.h"
#include "train/trainer.h"

static void usage(void)
{
    printf("usage: classic info --checkpoint FILE [--arch resnetN] "
           "[--config]\n"
           "       classic info --arch resnet50 [--num_classes 1000] "
           "[--image_size 224]\n"
           "                    [--stem imagenet|cifar|cifar_pool] "
           "[--in_channels 3]\n\n"
           "Prints the layer table (name, op, output shape, parameters), "
           "the parameter\ncount and forward FLOPs per image; for a "
           "checkpoint also its metadata.  FILE is any checkpoint classic "
           "reads: a\n"
           "classic or plain safetensors file, or a PyTorch .pth (arch "
           "inferred).\n");
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
            printf("  %-16s (%zu bytes of YAML; `classic info --config` "
                   "to print)\n",
                   k, strlen(v));
        else
            printf("  %-16s %s\n", k, v);
    }
    cl_st_close(f);
    return 0;
}

/* The layer table, parameter count and FLOPs of the graph g. */
static void print_graph(const cl_graph *g, const cl_resnet_config *rc, int side)
{
    printf("resnet%d, %s stem, %d input channel(s), %d classes, %dx%d "
           "input\n",
           rc->depth, cl_resnet_stem_name(rc->stem), rc->in_channels,
           rc->num_classes, side, side);
    cl_graph_print_layers(g, stdout);
    printf("parameters: %lld\n", (long long)g->n_param_elems);
    printf("forward: %.3f GFLOPs per image (%.3f G multiply-adds)\n",
           2e-9 * (double)cl_graph_macs(g), 1e-9 * (double)cl_graph_macs(g));
}

/* A checkpoint of any kind classic reads: a safetensors file's metadata,
 * then the model the common opener builds from it (for weights without
 * classic's metadata, the arch inferred from the tensors). */
static int info_checkpoint(int argc, char **argv, const char *ckpt,
                           const char *arch)
{
    cl_weights_format fmt = CL_WF_UNKNOWN;
    cl_status s = cl_weights_sniff(ckpt, &fmt);
    if (s != CL_OK)
        return cl_cli_fail("info", s);
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
    cl_model m;
    s = cl_model_open_as(&m, ckpt, arch, 1, NULL, CL_PLAN_INFER, 1);
    if (s != CL_OK) {
        /* A safetensors file that holds no model (embed's features, an
         * optimizer state) still had its metadata to show. */
        if (fmt == CL_WF_SAFETENSORS && s == CL_ERR_FORMAT) {
            printf("(no layer table: %s)\n", cl_last_error());
            return 0;
        }
        return cl_cli_fail("info", s);
    }
    if (m.foreign)
        printf("%s: weights without classic's metadata; arch inferred from "
               "the tensor names and shapes\n",
               ckpt);
    print_graph(&m.g, &m.arch, m.side);
    cl_model_close(&m);
    return 0;
}

int cl_cmd_info(int argc, char **argv)
{
    if (cl_cli_is_help(argc, argv)) {
        usage();
        return 0;
    }
    const char *ckpt = cl_cli_option(argc, argv, "--checkpoint");
    const char *arch = cl_cli_option(argc, argv, "--arch");
    const char *nc = cl_cli_option(argc, argv, "--num_classes");
    const char *is = cl_cli_option(argc, argv, "--image_size");
    const char *st = cl_cli_option(argc, argv, "--stem");
    const char *ic = cl_cli_option(argc, argv, "--in_channels");
    cl_resnet_config rc = cl_resnet_config_default();
    int side = 224;
    cl_status s;
    if (ckpt)
        return info_checkpoint(argc, argv, ckpt, arch);
    if (!arch) {
        usage();
        return 2;
    }
    if ((s = cl_resnet_arch_parse(arch, &rc.depth)) != CL_OK ||
        (st && (s = cl_resnet_stem_parse(st, &rc.stem)) != CL_OK))
        return cl_cli_fail("info", s);
    if (nc)
        rc.num_classes = atoi(nc);
    if (ic)
        rc.in_channels = atoi(ic);
    if (is)
        side = atoi(is);
    cl_graph g;
    if ((s = cl_resnet_check_config(&rc)) != CL_OK ||
        (s = cl_graph_init(&g, 1)) != CL_OK)
        return cl_cli_fail("info", s);
    if ((s = cl_resnet_build(&g, &rc, side, side, 0, 0)) != CL_OK) {
        cl_graph_free(&g);
        return cl_cli_fail("info", s);
    }
    print_graph(&g, &rc, side);
    cl_graph_free(&g);
    return 0;
}
