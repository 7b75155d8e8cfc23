/* The rules that map MindSpore parameter names onto torchvision's:
 * ResNet (mindcv, model zoo) segment by segment, mindcv's Swin by scope
 * (its attn.q, .k, .v as the rows of one attn.qkv). */
#include <stdio.h>
#include <string.h>

#include "interop/interop.h"

static int starts_with(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* Wrapper cells (TrainOneStepCell, WithLossCell) prefix the names. */
static const char *strip_wrappers(const char *ms)
{
    static const char *const wrapper[] = {"network.", "_backbone.", "backbone.",
                                          "model.", NULL};
    for (int again = 1; again;) {
        again = 0;
        for (int i = 0; wrapper[i]; i++)
            if (starts_with(ms, wrapper[i])) {
                ms += strlen(wrapper[i]);
                again = 1;
            }
    }
    return ms;
}

/* Optimizer state and step counters, in any network's checkpoint. */
static int is_bookkeeping(const char *ms)
{
    static const char *const ignore_prefix[] = {
        "moments.", "accu_grads.", "adam_m.",  "adam_v.",      "moment1.",
        "moment2.", "stat.",       "success.", "global_step_", NULL};
    static const char *const ignore_exact[] = {"learning_rate",
                                               "global_step",
                                               "momentum",
                                               "beta1_power",
                                               "beta2_power",
                                               "epoch_num",
                                               "step_num",
                                               "current_iterator_step",
                                               "last_overflow_iterator_step",
                                               "scale_sense",
                                               "loss_scale",
                                               NULL};
    for (int i = 0; ignore_prefix[i]; i++)
        if (starts_with(ms, ignore_prefix[i]))
            return 1;
    for (int i = 0; ignore_exact[i]; i++)
        if (strcmp(ms, ignore_exact[i]) == 0)
            return 1;
    return 0;
}

int cl_ms_map_name(const char *ms, char *out, size_t n)
{
    ms = strip_wrappers(ms);
    if (is_bookkeeping(ms))
        return 0;
    /* Segment by segment. */
    static const char *const seg_from[] = {"down_sample_layer",
                                           "down_sample",
                                           "end_point",
                                           "classifier",
                                           "bn1d",
                                           "bn2d",
                                           NULL};
    static const char *const seg_to[] = {"downsample", "downsample", "fc",
                                         "fc",         "bn1",        "bn2"};
    static const char *const leaf_from[] = {"gamma", "beta", "moving_mean",
                                            "moving_variance", NULL};
    static const char *const leaf_to[] = {"weight", "bias", "running_mean",
                                          "running_var"};
    size_t o = 0;
    const char *p = ms;
    out[0] = '\0';
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        char seg[128];
        if (len >= sizeof seg)
            return -1;
        memcpy(seg, p, len);
        seg[len] = '\0';
        const char *rep = seg;
        const char *const *from = dot ? seg_from : leaf_from;
        const char *const *to = dot ? seg_to : leaf_to;
        for (int i = 0; from[i]; i++)
            if (strcmp(seg, from[i]) == 0)
                rep = to[i];
        int w = snprintf(out + o, n - o, "%s%s", o ? "." : "", rep);
        if (w < 0 || (size_t)w >= n - o)
            return -1;
        o += (size_t)w;
        p = dot ? dot + 1 : p + len;
    }
    return 1;
}

/* One rule: a mindcv name (the rest of it, within its scope) and its
 * torchvision name; part 0, 1, 2 for attn.q, .k, .v: rows of qkv. */
typedef struct swin_rule {
    const char *from, *to;
    int part;
} swin_rule;

static const swin_rule swin_top[] = {
    {"patch_embed.proj.weight", "features.0.0.weight", -1},
    {"patch_embed.proj.bias", "features.0.0.bias", -1},
    {"patch_embed.norm.gamma", "features.0.2.weight", -1},
    {"patch_embed.norm.beta", "features.0.2.bias", -1},
    {"norm.gamma", "norm.weight", -1},
    {"norm.beta", "norm.bias", -1},
    {"classifier.weight", "head.weight", -1},
    {"classifier.bias", "head.bias", -1},
    {NULL, NULL, 0}};

/* Within layers.S.blocks.B. (features.{2S+1}.B.). */
static const swin_rule swin_block[] = {
    {"norm1.gamma", "norm1.weight", -1},
    {"norm1.beta", "norm1.bias", -1},
    {"attn.relative_bias.relative_position_bias_table",
     "attn.relative_position_bias_table", -1},
    {"attn.q.weight", "attn.qkv.weight", 0},
    {"attn.k.weight", "attn.qkv.weight", 1},
    {"attn.v.weight", "attn.qkv.weight", 2},
    {"attn.q.bias", "attn.qkv.bias", 0},
    {"attn.k.bias", "attn.qkv.bias", 1},
    {"attn.v.bias", "attn.qkv.bias", 2},
    {"attn.proj.weight", "attn.proj.weight", -1},
    {"attn.proj.bias", "attn.proj.bias", -1},
    {"norm2.gamma", "norm2.weight", -1},
    {"norm2.beta", "norm2.bias", -1},
    {"mlp.fc1.weight", "mlp.0.weight", -1},
    {"mlp.fc1.bias", "mlp.0.bias", -1},
    {"mlp.fc2.weight", "mlp.3.weight", -1},
    {"mlp.fc2.bias", "mlp.3.bias", -1},
    {NULL, NULL, 0}};

/* Within layers.S.downsample. (the patch merging after stage S:
 * features.{2S+2}.). */
static const swin_rule swin_merge[] = {
    {"reduction.weight", "reduction.weight", -1},
    {"norm.gamma", "norm.weight", -1},
    {"norm.beta", "norm.bias", -1},
    {NULL, NULL, 0}};

static int swin_apply(const swin_rule *r, const char *rest, const char *pre,
                      char *out, size_t n, int *part)
{
    for (int i = 0; r[i].from; i++)
        if (strcmp(rest, r[i].from) == 0) {
            int w = snprintf(out, n, "%s%s", pre, r[i].to);
            if (w < 0 || (size_t)w >= n)
                return -1;
            *part = r[i].part;
            return 1;
        }
    return -1;
}

/* "layers.S.<what>." with S written plainly; the rest after it in *rest. */
static int swin_scope(const char *ms, const char *what, int *s, int *b,
                      const char **rest)
{
    char want[64];
    int used = 0;
    *b = -1;
    if (strcmp(what, "blocks") == 0) {
        if (sscanf(ms, "layers.%d.blocks.%d.%n", s, b, &used) != 2 ||
            used == 0 || *s < 0 || *s > 99 || *b < 0 || *b > 999)
            return 0;
        snprintf(want, sizeof want, "layers.%d.blocks.%d.", *s, *b);
    } else {
        if (sscanf(ms, "layers.%d.downsample.%n", s, &used) != 1 || used == 0 ||
            *s < 0 || *s > 99)
            return 0;
        snprintf(want, sizeof want, "layers.%d.downsample.", *s);
    }
    if ((size_t)used != strlen(want) || strncmp(ms, want, strlen(want)) != 0)
        return 0;
    *rest = ms + used;
    return 1;
}

int cl_ms_map_swin_name(const char *ms, char *out, size_t n, int *part)
{
    int s, b;
    const char *rest;
    char pre[48];
    *part = -1;
    ms = strip_wrappers(ms);
    if (is_bookkeeping(ms))
        return 0;
    if (swin_scope(ms, "blocks", &s, &b, &rest)) {
        /* Derived from the window: the one-hot of the bias table's index
         * and the shifted windows' mask. */
        if (strcmp(rest, "attn.relative_bias.index") == 0 ||
            strcmp(rest, "attn_mask") == 0)
            return 0;
        snprintf(pre, sizeof pre, "features.%d.%d.", 2 * s + 1, b);
        return swin_apply(swin_block, rest, pre, out, n, part);
    }
    if (swin_scope(ms, "downsample", &s, &b, &rest)) {
        snprintf(pre, sizeof pre, "features.%d.", 2 * s + 2);
        return swin_apply(swin_merge, rest, pre, out, n, part);
    }
    return swin_apply(swin_top, ms, "", out, n, part);
}

cl_ms_family cl_ms_ckpt_family(const cl_ms_ckpt *c)
{
    for (int i = 0; i < c->n; i++) {
        const char *ms = strip_wrappers(c->t[i].name);
        if (starts_with(ms, "patch_embed.") || starts_with(ms, "layers."))
            return CL_MS_SWIN;
    }
    return CL_MS_RESNET;
}

int cl_ms_map_name_as(const char *ms, cl_ms_family fam, char *out, size_t n,
                      int *part)
{
    *part = -1;
    return fam == CL_MS_SWIN ? cl_ms_map_swin_name(ms, out, n, part)
                             : cl_ms_map_name(ms, out, n);
}
