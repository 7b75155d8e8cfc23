/* `classic convert`: a MindSpore ResNet or Swin checkpoint (.ckpt), a
 * PyTorch .pth or a plain safetensors file into a classic model checkpoint
 * (safetensors, torchvision names, metadata). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/error.h"
#include "interop/interop.h"
#include "io/strbuf.h"
#include "models/arch.h"
#include "train/model.h"
#include "train/trainer.h"

static void usage(void)
{
    printf("usage: classic convert IN OUT.safetensors [--arch ARCH] "
           "[--num_classes K]\n"
           "                      [--image_size 224] [--class_names "
           "a,b,c]\n\n"
           "IN is a MindSpore ResNet or Swin checkpoint (.ckpt: mindcv or "
           "model zoo\nnames, mapped onto torchvision's, --arch required: "
           "resnetNN, swin_t,\nswin_micro), a PyTorch .pth (torch.save since "
           "1.6: a "
           "state_dict or a\ntraining checkpoint holding one) or "
           "a\nsafetensors file with "
           "torchvision's names (arch inferred from the blocks,\nor checked "
           "against --arch).  Every tensor is checked against the arch and\n"
           "the result is a checkpoint that `classic predict`, `eval` and "
           "--pretrained\nread.  MindSpore optimizer entries (moments.*, "
           "learning_rate, ...) are\nignored and listed.  num_classes "
           "defaults to the classifier's rows; a\n1000-class head gets "
           "ImageNet's class names.  A classic checkpoint holding an\nEMA "
           "of its weights is written as its EMA (--load_ema false: its raw "
           "weights).\n");
}

static const char *const own[] = {"--arch",       "--num_classes",
                                  "--image_size", "--class_names",
                                  "--load_ema",   NULL};

/* Rows of the classifier and input channels of the stem conv (conv1, or
 * a Swin's patch embedding), from the file. */
static cl_status peek(const char *path, int *k, int *in_c)
{
    cl_ms_ckpt c;
    cl_status s = cl_ms_ckpt_open(&c, path);
    if (s != CL_OK)
        return s;
    cl_ms_family fam = cl_ms_ckpt_family(&c);
    const char *head = fam == CL_MS_SWIN ? "head.weight" : "fc.weight";
    const char *stem =
        fam == CL_MS_SWIN ? "features.0.0.weight" : "conv1.weight";
    for (int i = 0; i < c.n; i++) {
        char name[160];
        int part;
        if (cl_ms_map_name_as(c.t[i].name, fam, name, sizeof name, &part) != 1)
            continue;
        if (strcmp(name, head) == 0 && c.t[i].shape.ndim == 2)
            *k = (int)c.t[i].shape.d[0];
        if (strcmp(name, stem) == 0 && c.t[i].shape.ndim == 4)
            *in_c = (int)c.t[i].shape.d[1];
    }
    cl_ms_ckpt_close(&c);
    return CL_OK;
}

static int parse_int(const char *v, const char *opt, int lo, int hi, int *out)
{
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "classic: convert: %s must be in [%d, %d]\n", opt, lo,
                hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* A MindSpore Checkpoint message starts with field 1, length-delimited;
 * safetensors starts with a u64 length and a .pth with "PK". */
static int is_mindspore(const char *path)
{
    unsigned char b = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t got = fread(&b, 1, 1, f);
    fclose(f);
    return got == 1 && b == 0x0a;
}

/* "a,b,c" as a JSON array of k strings into cn; -1 (reported) when the
 * count is not k. */
static int names_json(const char *names, int k, cl_strbuf *cn)
{
    int count = 1;
    for (const char *p = names; *p; p++)
        count += *p == ',';
    if (count != k) {
        fprintf(stderr,
                "classic: convert: --class_names gives %d names for %d "
                "classes\n",
                count, k);
        return -1;
    }
    cl_strbuf_add(cn, "[", 1);
    for (const char *p = names;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (p != names)
            cl_strbuf_add(cn, ",", 1);
        cl_strbuf_add_json_str(cn, p, len);
        if (!e)
            break;
        p = e + 1;
    }
    cl_strbuf_add(cn, "]", 1);
    return 0;
}

/* A .pth or a safetensors file opened as predict opens it (arch inferred
 * or checked), written back with classic's metadata. */
static int convert_weights(const char *in, const char *out, const char *arch,
                           const char *ks, const char *ss, const char *names,
                           int raw)
{
    cl_model m;
    int side = 224, ret = 1;
    if (ss && parse_int(ss, "--image_size", 32, 4096, &side))
        return 2;
    cl_status s = cl_model_open_weights(&m, in, arch, 1, NULL, CL_PLAN_INFER, 1,
                                        raw, CL_PRECISION_F32);
    if (s != CL_OK)
        return cl_cli_fail("convert", s);
    int k = m.num_classes;
    if (ks &&
        (parse_int(ks, "--num_classes", 1, 100000, &k) || k != m.num_classes)) {
        fprintf(stderr,
                "classic: convert: %s has a %d-class head, not "
                "--num_classes %s\n",
                in, m.num_classes, ks);
        cl_model_close(&m);
        return 2;
    }
    if (!ss && m.side != 224)
        side = m.side;
    cl_strbuf cn, mean, std, yaml;
    cl_strbuf_init(&cn);
    cl_strbuf_init(&mean);
    cl_strbuf_init(&std);
    cl_strbuf_init(&yaml);
    if (names) {
        if (names_json(names, k, &cn)) {
            ret = 2;
            goto done;
        }
    } else {
        cl_strbuf_addc(&cn, '[');
        for (int c = 0; c < k; c++) {
            if (c)
                cl_strbuf_addc(&cn, ',');
            cl_strbuf_add_json_str(&cn, m.class_names[c],
                                   strlen(m.class_names[c]));
        }
        cl_strbuf_addc(&cn, ']');
    }
    for (int c = 0; c < m.cfg.n_mean; c++)
        cl_strbuf_addf(&mean, "%s%g", c ? "," : "", m.cfg.mean[c]);
    for (int c = 0; c < m.cfg.n_std; c++)
        cl_strbuf_addf(&std, "%s%g", c ? "," : "", m.cfg.std[c]);
    char depth[32], kk[16], sz[16], ic[16];
    cl_arch_name(&m.arch, depth, sizeof depth);
    snprintf(kk, sizeof kk, "%d", k);
    snprintf(sz, sizeof sz, "%d", side);
    snprintf(ic, sizeof ic, "%d", m.in_c);
    const char *stem =
        cl_arch_stem(&m.arch) ? cl_arch_stem(&m.arch) : "imagenet";
    cl_strbuf_addf(&yaml,
                   "dataset: imagefolder\ndata_dir: ./images\nnum_classes: "
                   "%d\nimage_size: %d\ncrop_pct: 0.875\nrandom_resized_crop: "
                   "true\nmodel: %s\nstem: "
                   "%s\nin_channels: %d\n",
                   k, side, depth, stem, m.in_c);
    if (m.cfg.n_mean && m.cfg.n_std)
        cl_strbuf_addf(&yaml, "mean: [%s]\nstd: [%s]\n", cl_strbuf_str(&mean),
                       cl_strbuf_str(&std));
    cl_ckpt_kv meta[10] = {{CL_META_ARCH, depth},
                           {CL_META_STEM, stem},
                           {CL_META_IN_CHANNELS, ic},
                           {CL_META_NUM_CLASSES, kk},
                           {CL_META_IMAGE_SIZE, sz},
                           {CL_META_CONFIG, cl_strbuf_str(&yaml)},
                           {CL_META_DATASET, "converted"},
                           {CL_META_CLASS_NAMES, cl_strbuf_str(&cn)}};
    int n_meta = 8;
    if (m.cfg.n_mean && m.cfg.n_std) {
        meta[n_meta++] = (cl_ckpt_kv){CL_META_MEAN, cl_strbuf_str(&mean)};
        meta[n_meta++] = (cl_ckpt_kv){CL_META_STD, cl_strbuf_str(&std)};
    }
    if ((s = cl_ckpt_save_model(out, &m.g, meta, n_meta)) != CL_OK) {
        ret = cl_cli_fail("convert", s);
        goto done;
    }
    int saved = 0;
    for (int t = 0; t < m.g.n_tensors; t++)
        saved += cl_gtensor_saved(&m.g.tensors[t]);
    printf("wrote %s: %s (%s stem), %d classes, %d tensors%s\n", out, depth,
           stem, k, saved, k == 1000 && !names ? "; ImageNet class names" : "");
    ret = 0;
done:
    cl_strbuf_free(&cn);
    cl_strbuf_free(&mean);
    cl_strbuf_free(&std);
    cl_strbuf_free(&yaml);
    cl_model_close(&m);
    return ret;
}

int cl_cmd_convert(int argc, char **argv)
{
    if (cl_cli_is_help(argc, argv)) {
        usage();
        return 0;
    }
    const char *pos[2] = {NULL, NULL};
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        int o = 0;
        for (int k = 0; own[k]; k++)
            o |= strcmp(argv[i], own[k]) == 0;
        if (o)
            i++;
        else if (strncmp(argv[i], "--", 2) == 0 || n_pos == 2) {
            fprintf(stderr, "classic: convert: unexpected argument %s\n",
                    argv[i]);
            return 2;
        } else
            pos[n_pos++] = argv[i];
    }
    const char *arch = cl_cli_option(argc, argv, "--arch");
    const char *ks = cl_cli_option(argc, argv, "--num_classes");
    const char *ss = cl_cli_option(argc, argv, "--image_size");
    const char *names = cl_cli_option(argc, argv, "--class_names");
    if (n_pos != 2) {
        fprintf(stderr, "classic: convert: IN and OUT.safetensors are "
                        "required\n");
        return 2;
    }
    int raw = 0;
    if (cl_cli_raw_weights(argc, argv, "convert", &raw))
        return 2;
    if (!is_mindspore(pos[0]))
        return convert_weights(pos[0], pos[1], arch, ks, ss, names, raw);
    if (!arch) {
        fprintf(stderr, "classic: convert: a MindSpore checkpoint needs "
                        "--arch\n");
        return 2;
    }
    int k = 0, in_c = 3, side = 224;
    cl_arch rc;
    cl_status s = cl_arch_parse(arch, NULL, &rc);
    if (s != CL_OK)
        return cl_cli_fail("convert", s);
    if (ss && parse_int(ss, "--image_size", 32, 4096, &side))
        return 2;
    if ((s = peek(pos[0], &k, &in_c)) != CL_OK)
        return cl_cli_fail("convert", s);
    if (ks && parse_int(ks, "--num_classes", 1, 100000, &k))
        return 2;
    if (k < 1) {
        fprintf(stderr,
                "classic: convert: %s has no classifier weight; "
                "give --num_classes\n",
                pos[0]);
        return 2;
    }
    cl_arch_set_io(&rc, in_c, k);
    cl_graph g;
    cl_ms_report rep;
    cl_strbuf cn;
    cl_strbuf_init(&cn);
    int ret = 1;
    if ((s = cl_graph_init(&g, 1)) != CL_OK)
        return cl_cli_fail("convert", s);
    if ((s = cl_arch_build(&g, &rc, side, side, 0, 0.0f)) != CL_OK ||
        (s = cl_ms_load(pos[0], &g, CL_CKPT_STRICT, &rep)) != CL_OK) {
        ret = cl_cli_fail("convert", s);
        goto done;
    }
    if (names && names_json(names, k, &cn)) {
        ret = 2;
        goto done;
    }
    char kk[16], sz[16], ic[16], yaml[1024];
    snprintf(kk, sizeof kk, "%d", k);
    snprintf(sz, sizeof sz, "%d", side);
    snprintf(ic, sizeof ic, "%d", in_c);
    snprintf(yaml, sizeof yaml,
             "dataset: imagefolder\ndata_dir: ./images\nnum_classes: %d\n"
             "image_size: %d\ncrop_pct: 0.875\nrandom_resized_crop: true\n"
             "mean: [0.485, 0.456, 0.406]\nstd: [0.229, 0.224, 0.225]\n"
             "model: %s\nstem: imagenet\nin_channels: %d\n",
             k, side, arch, in_c);
    cl_ckpt_kv meta[10] = {{CL_META_ARCH, arch},
                           {CL_META_STEM, "imagenet"},
                           {CL_META_IN_CHANNELS, ic},
                           {CL_META_NUM_CLASSES, kk},
                           {CL_META_IMAGE_SIZE, sz},
                           {CL_META_MEAN, "0.485,0.456,0.406"},
                           {CL_META_STD, "0.229,0.224,0.225"},
                           {CL_META_CONFIG, yaml},
                           {CL_META_DATASET, "mindspore"}};
    int n_meta = 9;
    if (names)
        meta[n_meta++] = (cl_ckpt_kv){CL_META_CLASS_NAMES, cl_strbuf_str(&cn)};
    if ((s = cl_ckpt_save_model(pos[1], &g, meta, n_meta)) != CL_OK) {
        ret = cl_cli_fail("convert", s);
        goto done;
    }
    printf("wrote %s: %s, %d classes, %d tensors; %d optimizer or "
           "bookkeeping entries ignored%s%s%s\n",
           pos[1], arch, k, rep.loaded, rep.ignored, rep.ignored ? " (" : "",
           rep.ignored_list, rep.ignored ? ")" : "");
    ret = 0;
done:
    cl_strbuf_free(&cn);
    cl_graph_free(&g);
    return ret;
}
