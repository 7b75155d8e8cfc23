/* Any model checkpoint classic reads (classic or plain safetensors, a
 * PyTorch .pth, a MindSpore .ckpt) as one list of named tensors, and the
 * torchvision ResNet that a list without classic's metadata fits. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "interop/interop.h"
#include "interop/quantized.h"
#include "io/safetensors.h"
#include "io/checkpoint.h"

static size_t pth_count(const void *ctx)
{
    return cl_pth_count(ctx);
}

static const char *pth_name(const void *ctx, size_t i)
{
    return cl_pth_name(ctx, i);
}

static long pth_find(const void *ctx, const char *name)
{
    return cl_pth_find(ctx, name);
}

static cl_shape pth_shape(const void *ctx, size_t i)
{
    return cl_pth_shape(ctx, i);
}

static cl_status pth_read_f32(const void *ctx, size_t i, float *dst, size_t n)
{
    return cl_pth_read_f32(ctx, i, dst, n);
}

static cl_status pth_read_i64(const void *ctx, size_t i, int64_t *dst, size_t n)
{
    return cl_pth_read_i64(ctx, i, dst, n);
}

cl_status cl_weights_sniff(const char *path, cl_weights_format *fmt)
{
    unsigned char head[9] = {0};
    *fmt = CL_WF_UNKNOWN;
    FILE *f = fopen(path, "rb");
    if (!f)
        return cl_error(CL_ERR_IO, "%s: cannot open (%s)", path,
                        strerror(errno));
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    /* A .pth is a zip (torch.save since 1.6) or a bare pickle (torch <
     * 1.6, which the reader refuses saying so). */
    if (got == sizeof head && head[8] == '{' && head[6] == 0 && head[7] == 0)
        *fmt = CL_WF_SAFETENSORS;
    else if ((got >= 4 && memcmp(head, "PK\3\4", 4) == 0) ||
             (got >= 2 && head[0] == 0x80 && head[1] <= 5))
        *fmt = CL_WF_PTH;
    else if (got >= 1 && head[0] == 0x0a)
        *fmt = CL_WF_MINDSPORE;
    return CL_OK;
}

/* A file whose first bytes are no known format's, named by its extension
 * as .pth or .ckpt, is refused in that format's words (an empty or cut
 * .pth is no "safetensors header"); other names go on to the safetensors
 * reader, whose sentences name what it found. */
static cl_status unknown_kind(const char *path, cl_weights_format fmt)
{
    static const char *const ext[][2] = {{".pth", "a PyTorch .pth"},
                                         {".pt", "a PyTorch .pth"},
                                         {".bin", "a PyTorch .pth"},
                                         {".ckpt", "a MindSpore .ckpt"}};
    if (fmt != CL_WF_UNKNOWN)
        return CL_OK;
    size_t n = strlen(path);
    for (size_t k = 0; k < sizeof ext / sizeof ext[0]; k++) {
        size_t e = strlen(ext[k][0]);
        if (n <= e || strcmp(path + n - e, ext[k][0]) != 0)
            continue;
        struct stat st;
        long long size = stat(path, &st) == 0 ? (long long)st.st_size : -1;
        if (size >= 0 && size < 9)
            return cl_error(CL_ERR_FORMAT,
                            "%s: %lld bytes, too short to be %s (an empty or "
                            "cut-off file?)",
                            path, size, ext[k][1]);
        return cl_error(CL_ERR_FORMAT,
                        "%s: not %s: its first bytes are none of the "
                        "formats classic reads (a zip or pickle for .pth, "
                        "protobuf for .ckpt, safetensors)",
                        path, ext[k][1]);
    }
    return CL_OK;
}

cl_status cl_weights_open(cl_weights *w, const char *path)
{
    cl_weights_format fmt;
    memset(w, 0, sizeof *w);
    CL_TRY(cl_weights_sniff(path, &fmt));
    if (fmt == CL_WF_PTH) {
        CL_TRY(cl_pth_open(&w->pth, path));
        w->src = (cl_ckpt_source){
            path,      w->pth,       pth_count,    pth_name, pth_find,
            pth_shape, pth_read_f32, pth_read_i64, 1,        CL_CKPT_PICK_EMA};
        w->kind = "PyTorch .pth";
        return CL_OK;
    }
    if (fmt == CL_WF_MINDSPORE) {
        CL_TRY(cl_ms_named_open(&w->ms, path));
        w->src = cl_ms_named_source(w->ms, path);
        w->kind = "MindSpore .ckpt";
        return CL_OK;
    }
    CL_TRY(unknown_kind(path, fmt));
    CL_TRY(cl_st_open(&w->st, path));
    w->src = cl_ckpt_source_st(w->st, path);
    w->classic = cl_st_metadata(w->st, CL_META_ARCH) != NULL;
    w->src.counters_optional = !w->classic;
    w->kind = "safetensors";
    /* An int8 file: its s8 weights read dequantized, its scales hidden
     * from the loader and put into the graph afterwards (model.c). */
    if (w->classic && cl_qfile_is(w->st)) {
        cl_status s = cl_qfile_open(&w->q, w->st, path);
        if (s != CL_OK) {
            cl_weights_close(w);
            return s;
        }
        w->src = cl_qfile_source(w->q);
        w->kind = "int8 safetensors";
    }
    return CL_OK;
}

cl_status cl_weights_for_training(const cl_weights *w, const char *path)
{
    if (!w->q)
        return CL_OK;
    /* Its BNs are folded away and its weights rounded to 8 bits: training
     * from it would start from neither. */
    const char *src = cl_st_metadata(w->st, CL_QUANT_META_SOURCE);
    return cl_error(CL_ERR_ARG,
                    "%s is an int8 model for inference (classic quantize); "
                    "start from the checkpoint it was quantized from%s%s",
                    path, src ? ": " : "", src ? src : "");
}

void cl_weights_close(cl_weights *w)
{
    cl_qfile_close(w->q);
    cl_st_close(w->st);
    cl_pth_close(w->pth);
    cl_ms_named_close(w->ms);
    memset(w, 0, sizeof *w);
}

/* Shape of the tensor called name; ndim -1 when absent. */
static cl_shape shape_of(const cl_weights *w, const char *name)
{
    long i = w->src.find(w->src.ctx, name);
    cl_shape s = {-1, {0}};
    if (i >= 0)
        s = w->src.shape(w->src.ctx, (size_t)i);
    return s;
}

/* The Swin arch (swin_t or swin_micro) whose shapes the tensors have. */
static cl_status infer_swin(const cl_weights *w, const char *arch, cl_arch *a)
{
    const char *path = w->src.path;
    cl_shape pe = shape_of(w, "features.0.0.weight"),
             hd = shape_of(w, "head.weight"),
             tb = shape_of(w, "features.1.0.attn.relative_position_bias_table");
    int depths[CL_SWIN_MAX_STAGES] = {0, 0, 0, 0}, n_stages = 0;
    size_t n = w->src.count(w->src.ctx);
    for (size_t i = 0; i < n; i++) {
        const char *s = w->src.name(w->src.ctx, i);
        int F = 0, M = 0, used = 0;
        if (sscanf(s, "features.%d.%d.norm1.%n", &F, &M, &used) == 2 &&
            used > 0 && F % 2 == 1 && F < 2 * CL_SWIN_MAX_STAGES && M >= 0 &&
            M < 1000) {
            if (M + 1 > depths[F / 2])
                depths[F / 2] = M + 1;
            if (F / 2 + 1 > n_stages)
                n_stages = F / 2 + 1;
        }
    }
    if (pe.ndim != 4 || hd.ndim != 2 || tb.ndim != 2)
        return cl_error(CL_ERR_FORMAT,
                        "%s: no 4-d features.0.0.weight, 2-d head.weight and "
                        "relative_position_bias_table: not a torchvision-style "
                        "Swin state_dict",
                        path);
    for (int k = 0; k < cl_arch_count(); k++) {
        cl_arch_family family;
        const char *name = cl_arch_name_at(k, &family);
        if (family != CL_ARCH_SWIN)
            continue;
        cl_swin_config c;
        CL_TRY(cl_swin_arch_parse(name, &c));
        int win = 0;
        for (int ws = 1; ws <= 64; ws++)
            if ((int64_t)(2 * ws - 1) * (2 * ws - 1) == tb.d[0])
                win = ws;
        int same = pe.d[0] == c.embed && pe.d[2] == c.patch &&
                   win == c.window && n_stages == c.n_stages &&
                   memcmp(depths, c.depths, sizeof depths) == 0 &&
                   tb.d[1] == c.heads[0];
        if (!same)
            continue;
        if (arch && strcmp(arch, name) != 0)
            return cl_error(CL_ERR_SHAPE,
                            "%s: --arch %s, but the weights are those of %s",
                            path, arch, name);
        if (pe.d[1] < 1 || pe.d[1] > 3 || hd.d[0] < 1 || hd.d[0] > 100000)
            return cl_error(CL_ERR_FORMAT,
                            "%s: features.0.0.weight takes %lld input "
                            "channels and head.weight has %lld classes "
                            "(expected 1..3 and 1..100000)",
                            path, (long long)pe.d[1], (long long)hd.d[0]);
        memset(a, 0, sizeof *a);
        a->family = CL_ARCH_SWIN;
        a->swin = c;
        cl_arch_set_io(a, (int)pe.d[1], (int)hd.d[0]);
        return CL_OK;
    }
    return cl_error(CL_ERR_FORMAT,
                    "%s: a Swin with embed %lld, patch %lld, %d stages of "
                    "%d-%d-%d-%d blocks is none classic builds (archs: %s)",
                    path, (long long)pe.d[0], (long long)pe.d[2], n_stages,
                    depths[0], depths[1], depths[2], depths[3],
                    cl_arch_names());
}

cl_status cl_weights_infer(const cl_weights *w, const char *arch, cl_arch *a)
{
    const char *path = w->src.path;
    if (shape_of(w, "head.weight").ndim >= 0 &&
        shape_of(w, "features.0.0.weight").ndim >= 0)
        return infer_swin(w, arch, a);
    if (arch && cl_swin_is_arch(arch))
        return cl_error(CL_ERR_SHAPE,
                        "%s: --arch %s, but the file has no Swin's "
                        "features.0.0.weight and head.weight",
                        path, arch);
    memset(a, 0, sizeof *a);
    a->family = CL_ARCH_RESNET;
    a->resnet = cl_resnet_config_default();
    cl_resnet_config *rc = &a->resnet;
    cl_shape c1 = shape_of(w, "conv1.weight"), fc = shape_of(w, "fc.weight");
    if (c1.ndim != 4 || fc.ndim != 2)
        return cl_error(CL_ERR_FORMAT,
                        "%s: no 4-d conv1.weight and 2-d fc.weight (ResNet) "
                        "nor features.0.0.weight and head.weight (Swin): not "
                        "a torchvision-style state_dict",
                        path);
    /* Blocks per stage: the highest index M of any layerN.M. name. */
    int blocks[4] = {0, 0, 0, 0};
    size_t n = w->src.count(w->src.ctx);
    for (size_t i = 0; i < n; i++) {
        const char *s = w->src.name(w->src.ctx, i);
        int L = 0, M = 0, used = 0;
        if (sscanf(s, "layer%d.%d.%n", &L, &M, &used) == 2 && used > 0 &&
            L >= 1 && L <= 4 && M >= 0 && M < 1000 && M + 1 > blocks[L - 1])
            blocks[L - 1] = M + 1;
    }
    int bottleneck = shape_of(w, "layer1.0.conv3.weight").ndim >= 0;
    static const struct {
        int depth, bottleneck, b[4];
    } known[] = {{18, 0, {2, 2, 2, 2}},
                 {34, 0, {3, 4, 6, 3}},
                 {50, 1, {3, 4, 6, 3}},
                 {101, 1, {3, 4, 23, 3}},
                 {152, 1, {3, 8, 36, 3}}};
    int depth = 0;
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        if (known[k].bottleneck == bottleneck &&
            memcmp(known[k].b, blocks, sizeof blocks) == 0)
            depth = known[k].depth;
    if (!depth)
        return cl_error(CL_ERR_FORMAT,
                        "%s: %s blocks %d-%d-%d-%d in layer1..4 are no "
                        "torchvision ResNet (18/34: basic 2-2-2-2/3-4-6-3; "
                        "50/101/152: bottleneck 3-4-6-3/3-4-23-3/3-8-36-3)",
                        path, bottleneck ? "bottleneck" : "basic", blocks[0],
                        blocks[1], blocks[2], blocks[3]);
    if (arch) {
        int want = 0;
        CL_TRY(cl_resnet_arch_parse(arch, &want));
        if (want != depth)
            return cl_error(CL_ERR_SHAPE,
                            "%s: --arch %s, but the weights' blocks are "
                            "those of resnet%d",
                            path, arch, depth);
    }
    /* A bottleneck's first 1x1 conv is 64 wide in layer1 (wide_resnet
     * doubles it; resnext groups the 3x3 that follows). */
    cl_shape b1 = shape_of(w, "layer1.0.conv1.weight");
    cl_shape b2 = shape_of(w, "layer1.0.conv2.weight");
    if (b1.ndim != 4 || b1.d[0] != 64 || b2.ndim != 4 || b2.d[1] != 64)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: layer1.0's convs are not 64 channels wide "
                        "(a wide_resnet or resnext?): only torchvision's "
                        "plain ResNets are built",
                        path);
    if (c1.d[1] < 1 || c1.d[1] > 3 || fc.d[0] < 1 || fc.d[0] > 100000)
        return cl_error(CL_ERR_FORMAT,
                        "%s: conv1.weight takes %lld input channels and "
                        "fc.weight has %lld classes (expected 1..3 and "
                        "1..100000)",
                        path, (long long)c1.d[1], (long long)fc.d[0]);
    rc->depth = depth;
    rc->in_channels = (int)c1.d[1];
    rc->num_classes = (int)fc.d[0];
    /* 3x3 conv1: the CIFAR stem (a pooled variant cannot be told from the
     * weights; classic's own checkpoints name it in their metadata). */
    rc->stem = c1.d[2] == 3 ? CL_STEM_CIFAR : CL_STEM_IMAGENET;
    return CL_OK;
}
