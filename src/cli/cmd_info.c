/* `classic info`: a model's layer table, parameters and FLOPs, and a
 * checkpoint's metadata. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "models/resnet.h"
#include "train/trainer.h"

static void usage(void)
{
    printf("usage: classic info --checkpoint FILE [--layers]\n"
           "       classic info --arch resnet50 [--num_classes 1000] "
           "[--image_size 224]\n"
           "                    [--stem imagenet|cifar|cifar_pool] "
           "[--in_channels 3]\n\n"
           "Prints the layer table (name, op, output shape, parameters), "
           "the parameter\ncount and forward FLOPs per image; for a "
           "checkpoint also its metadata.\n");
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

int cl_cmd_info(int argc, char **argv)
{
    if (cl_cli_is_help(argc, argv)) {
        usage();
        return 0;
    }
    const char *ckpt = cl_cli_option(argc, argv, "--checkpoint");
    cl_resnet_config rc = cl_resnet_config_default();
    int side = 224, batch = 1;
    cl_status s;
    if (ckpt) {
        if (print_meta(ckpt) != 0)
            return 1;
        for (int i = 1; i < argc; i++)
            if (strcmp(argv[i], "--config") == 0) {
                char buf[1 << 16];
                if (cl_ckpt_read_meta(ckpt, CL_META_CONFIG, buf, sizeof buf) ==
                    CL_OK)
                    printf("%s", buf);
            }
        char v[64];
        cl_st_file *f = NULL;
        if ((s = cl_st_open(&f, ckpt)) != CL_OK)
            return cl_cli_fail("info", s);
        const char *a = cl_st_metadata(f, CL_META_ARCH);
        const char *st = cl_st_metadata(f, CL_META_STEM);
        const char *ic = cl_st_metadata(f, CL_META_IN_CHANNELS);
        const char *nc = cl_st_metadata(f, CL_META_NUM_CLASSES);
        const char *is = cl_st_metadata(f, CL_META_IMAGE_SIZE);
        if (!a || !st || !ic || !nc || !is) {
            cl_st_close(f);
            printf("(not a classic model checkpoint: no layer table)\n");
            return 0;
        }
        s = cl_resnet_arch_parse(a, &rc.depth);
        if (s == CL_OK)
            s = cl_resnet_stem_parse(st, &rc.stem);
        rc.in_channels = atoi(ic);
        rc.num_classes = atoi(nc);
        side = atoi(is);
        snprintf(v, sizeof v, "%s", a);
        cl_st_close(f);
        if (s != CL_OK)
            return cl_cli_fail("info", s);
    } else {
        const char *a = cl_cli_option(argc, argv, "--arch");
        const char *nc = cl_cli_option(argc, argv, "--num_classes");
        const char *is = cl_cli_option(argc, argv, "--image_size");
        const char *st = cl_cli_option(argc, argv, "--stem");
        const char *ic = cl_cli_option(argc, argv, "--in_channels");
        if (!a) {
            usage();
            return 2;
        }
        if ((s = cl_resnet_arch_parse(a, &rc.depth)) != CL_OK ||
            (st && (s = cl_resnet_stem_parse(st, &rc.stem)) != CL_OK))
            return cl_cli_fail("info", s);
        if (nc)
            rc.num_classes = atoi(nc);
        if (ic)
            rc.in_channels = atoi(ic);
        if (is)
            side = atoi(is);
    }
    cl_graph g;
    if ((s = cl_resnet_check_config(&rc)) != CL_OK ||
        (s = cl_graph_init(&g, batch)) != CL_OK)
        return cl_cli_fail("info", s);
    if ((s = cl_resnet_build(&g, &rc, side, side, 0, 0)) != CL_OK) {
        cl_graph_free(&g);
        return cl_cli_fail("info", s);
    }
    printf("resnet%d, %s stem, %d input channel(s), %d classes, %dx%d "
           "input\n",
           rc.depth, cl_resnet_stem_name(rc.stem), rc.in_channels,
           rc.num_classes, side, side);
    cl_graph_print_layers(&g, stdout);
    printf("parameters: %lld\n", (long long)g.n_param_elems);
    printf("forward: %.3f GFLOPs per image (%.3f G multiply-adds)\n",
           2e-9 * (double)cl_graph_macs(&g), 1e-9 * (double)cl_graph_macs(&g));
    cl_graph_free(&g);
    return 0;
}
