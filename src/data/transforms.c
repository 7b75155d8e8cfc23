/* Per-sample transforms: one fused resampling pass (crop / resize / flip),
 * auto augment, colour jitter, normalisation, random erasing, float CHW
 * output. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "data/data_internal.h"

struct cl_transforms {
    cl_transform_opts o;
    int random;
    float unit[256]; /* v / 255, exactly as a division gives it */
};

static void set_norm(cl_transform_opts *o, const float *mean, const float *std)
{
    o->normalize = 1;
    for (int c = 0; c < 3; c++) {
        int k = c < o->out_c ? c : 0; /* only out_c entries are read */
        o->mean[c] = mean ? mean[k] : 0.5f;
        o->std[c] = std ? std[k] : 0.5f;
    }
}

cl_transform_opts cl_transform_opts_imagenet_train(int size)
{
    cl_transform_opts o;
    const float mean[3] = CL_IMAGENET_MEAN, std[3] = CL_IMAGENET_STD;
    memset(&o, 0, sizeof o);
    o.out_c = 3;
    o.out_h = o.out_w = size;
    o.random_resized_crop = 1;
    o.rrc_scale[0] = 0.08f;
    o.rrc_scale[1] = 1.0f;
    o.rrc_ratio[0] = 3.0f / 4.0f;
    o.rrc_ratio[1] = 4.0f / 3.0f;
    o.hflip_prob = 0.5f;
    set_norm(&o, mean, std);
    return o;
}

cl_transform_opts cl_transform_opts_imagenet_eval(int size)
{
    cl_transform_opts o;
    const float mean[3] = CL_IMAGENET_MEAN, std[3] = CL_IMAGENET_STD;
    memset(&o, 0, sizeof o);
    o.out_c = 3;
    o.out_h = o.out_w = size;
    o.resize = (int)((size * 256 + 112) / 224);
    o.center_crop = 1;
    set_norm(&o, mean, std);
    return o;
}

cl_transform_opts cl_transform_opts_small_train(int c, int h, int w, int pad,
                                                float flip_p, const float *mean,
                                                const float *std)
{
    cl_transform_opts o;
    memset(&o, 0, sizeof o);
    o.out_c = c;
    o.out_h = h;
    o.out_w = w;
    o.random_crop = pad > 0;
    o.random_crop_pad = pad;
    o.hflip_prob = flip_p;
    set_norm(&o, mean, std);
    return o;
}

cl_transform_opts cl_transform_opts_small_eval(int c, int h, int w,
                                               const float *mean,
                                               const float *std)
{
    cl_transform_opts o;
    memset(&o, 0, sizeof o);
    o.out_c = c;
    o.out_h = h;
    o.out_w = w;
    set_norm(&o, mean, std);
    return o;
}

static int bad_range(const float r[2], float lo)
{
    return !(r[0] > lo) || !(r[1] >= r[0]) || !isfinite(r[1]);
}

cl_status cl_transforms_create(cl_transforms **out,
                               const cl_transform_opts *opts)
{
    *out = NULL;
    cl_transform_opts o = *opts;
    if (o.out_c != 1 && o.out_c != 3)
        return cl_error(CL_ERR_CONFIG,
                        "transforms out_c = %d: expected 1 "
                        "or 3",
                        o.out_c);
    if (o.out_h < 1 || o.out_w < 1 || o.out_h > 8192 || o.out_w > 8192)
        return cl_error(CL_ERR_CONFIG,
                        "transforms output %dx%d: expected 1..8192 a side",
                        o.out_h, o.out_w);
    const int resize = o.resize > 0 || o.resize_h > 0 || o.resize_w > 0;
    if (o.random_resized_crop && (o.random_crop || resize))
        return cl_error(CL_ERR_CONFIG,
                        "transforms: random_resized_crop resizes and crops "
                        "by itself: drop %s",
                        o.random_crop && resize ? "random_crop and the resize"
                        : o.random_crop         ? "random_crop"
                                                : "the resize");
    if (o.resize > 0 && (o.resize_h > 0 || o.resize_w > 0))
        return cl_error(CL_ERR_CONFIG,
                        "transforms: resize %d and resize_h/resize_w %d/%d: "
                        "give the shorter side or both sides, not both",
                        o.resize, o.resize_h, o.resize_w);
    if (o.random_crop && o.center_crop)
        return cl_error(CL_ERR_CONFIG, "transforms: choose one of "
                                       "random_crop and center_crop");
    if (o.resize < 0 || o.resize_h < 0 || o.resize_w < 0 ||
        (o.resize_h > 0) != (o.resize_w > 0))
        return cl_error(CL_ERR_CONFIG,
                        "transforms resize_h/resize_w = %d/%d: give both "
                        "or neither, positive",
                        o.resize_h, o.resize_w);
    if (o.random_crop_pad < 0 || o.random_crop_pad > 1024)
        return cl_error(CL_ERR_CONFIG,
                        "transforms random_crop_pad = %d: expected 0..1024",
                        o.random_crop_pad);
    if (o.random_resized_crop) {
        if (o.rrc_scale[0] == 0 && o.rrc_scale[1] == 0) {
            o.rrc_scale[0] = 0.08f;
            o.rrc_scale[1] = 1.0f;
        }
        if (o.rrc_ratio[0] == 0 && o.rrc_ratio[1] == 0) {
            o.rrc_ratio[0] = 3.0f / 4.0f;
            o.rrc_ratio[1] = 4.0f / 3.0f;
        }
        if (bad_range(o.rrc_scale, 0) || o.rrc_scale[1] > 1 ||
            bad_range(o.rrc_ratio, 0))
            return cl_error(CL_ERR_CONFIG,
                            "transforms rrc scale (%g, %g) / ratio (%g, %g):"
                            " expected 0 < lo <= hi (scale <= 1)",
                            o.rrc_scale[0], o.rrc_scale[1], o.rrc_ratio[0],
                            o.rrc_ratio[1]);
    }
    if (!(o.hflip_prob >= 0 && o.hflip_prob <= 1) ||
        !(o.erase_prob >= 0 && o.erase_prob <= 1))
        return cl_error(CL_ERR_CONFIG,
                        "transforms hflip_prob %g / "
                        "erase_prob %g: expected 0..1",
                        o.hflip_prob, o.erase_prob);
    if (!(o.brightness >= 0) || !(o.contrast >= 0) || !(o.saturation >= 0))
        return cl_error(CL_ERR_CONFIG,
                        "transforms colour jitter (%g, %g, %g): expected "
                        ">= 0",
                        o.brightness, o.contrast, o.saturation);
    if (o.erase_prob > 0) {
        if (o.erase_scale[0] == 0 && o.erase_scale[1] == 0) {
            o.erase_scale[0] = 0.02f;
            o.erase_scale[1] = 0.33f;
        }
        if (o.erase_ratio[0] == 0 && o.erase_ratio[1] == 0) {
            o.erase_ratio[0] = 0.3f;
            o.erase_ratio[1] = 3.3f;
        }
        if (bad_range(o.erase_scale, 0) || o.erase_scale[1] > 1 ||
            bad_range(o.erase_ratio, 0))
            return cl_error(CL_ERR_CONFIG,
                            "transforms erase scale/ratio: expected 0 < lo "
                            "<= hi (scale <= 1)");
    }
    if (o.auto_augment < CL_AUTO_AUGMENT_NONE ||
        o.auto_augment > CL_AUTO_AUGMENT_RANDAUGMENT)
        return cl_error(CL_ERR_CONFIG,
                        "transforms auto_augment = %d: expected none (0), "
                        "ta_wide (1) or randaugment (2)",
                        o.auto_augment);
    if (o.auto_augment == CL_AUTO_AUGMENT_RANDAUGMENT && o.ra_num_ops == 0 &&
        o.ra_magnitude == 0) {
        o.ra_num_ops = 2;
        o.ra_magnitude = 9;
    }
    if (o.ra_num_ops < 0 || o.ra_num_ops > CL__AUG_MAX_OPS ||
        o.ra_magnitude < 0 || o.ra_magnitude >= CL__AUG_BINS)
        return cl_error(CL_ERR_CONFIG,
                        "transforms ra_num_ops %d / ra_magnitude %d: "
                        "expected 0..%d and 0..%d",
                        o.ra_num_ops, o.ra_magnitude, CL__AUG_MAX_OPS,
                        CL__AUG_BINS - 1);
    if (o.interpolation != CL_INTERP_BILINEAR &&
        o.interpolation != CL_INTERP_BICUBIC)
        return cl_error(CL_ERR_CONFIG,
                        "transforms interpolation = %d: expected bilinear "
                        "(0) or bicubic (1)",
                        o.interpolation);
    if (o.normalize) {
        for (int c = 0; c < o.out_c; c++)
            if (!(o.std[c] > 0) || !isfinite(o.mean[c]))
                return cl_error(CL_ERR_CONFIG,
                                "transforms std[%d] = %g: expected > 0", c,
                                o.std[c]);
    }
    cl_transforms *tf = cl_alloc_zero(sizeof *tf, "transforms");
    if (!tf)
        return CL_ERR_NOMEM;
    tf->o = o;
    for (int v = 0; v < 256; v++)
        tf->unit[v] = (float)v / 255.0f;
    tf->random = o.random_resized_crop || o.random_crop || o.hflip_prob > 0 ||
                 o.brightness > 0 || o.contrast > 0 || o.saturation > 0 ||
                 o.erase_prob > 0 || o.auto_augment != CL_AUTO_AUGMENT_NONE;
    *out = tf;
    return CL_OK;
}

void cl_transforms_destroy(cl_transforms *tf)
{
    cl_free(tf);
}

const cl_transform_opts *cl_transforms_opts(const cl_transforms *tf)
{
    return &tf->o;
}

int cl_transforms_is_random(const cl_transforms *tf)
{
    return tf->random;
}

int cl_transforms_decode_hint(const cl_transforms *tf)
{
    const cl_transform_opts *o = &tf->o;
    int side = o->out_h > o->out_w ? o->out_h : o->out_w;
    if (o->random_resized_crop) {
        /* The smallest crop side is sqrt(scale_lo * ratio_lo) of the
         * image's; decoding smaller than out/that would lose detail. */
        double f = sqrt((double)o->rrc_scale[0] *
                        (double)(o->rrc_ratio[0] < 1 ? o->rrc_ratio[0] : 1.0f));
        return (int)ceil(side / f);
    }
    if (o->resize > 0)
        return o->resize;
    if (o->resize_h > 0)
        return o->resize_h < o->resize_w ? o->resize_h : o->resize_w;
    return 0;
}

/* Appends one op's words to buf (len bytes used of n), with the arrow
 * between ops; output past n is cut, as snprintf cuts. */
static void describe_op(char *buf, size_t n, size_t *len, const char *fmt, ...)
    CL_PRINTF(4, 5);
static void describe_op(char *buf, size_t n, size_t *len, const char *fmt, ...)
{
    if (*len + 1 >= n)
        return;
    if (*len > 0) {
        int k = snprintf(buf + *len, n - *len, " -> ");
        *len += k > 0 ? (size_t)k : 0;
        if (*len + 1 >= n) {
            *len = n - 1;
            return;
        }
    }
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *len, n - *len, fmt, ap);
    va_end(ap);
    *len += k > 0 ? (size_t)k : 0;
    if (*len >= n)
        *len = n - 1;
}

void cl_transforms_describe(const cl_transforms *tf, char *buf, size_t n)
{
    const cl_transform_opts *o = &tf->o;
    const char *in =
        o->interpolation == CL_INTERP_BICUBIC ? "bicubic" : "bilinear";
    size_t len = 0;
    buf[0] = 0;
    if (o->random_resized_crop)
        describe_op(buf, n, &len,
                    "RandomResizedCrop(%dx%d, scale=(%g, %g), "
                    "ratio=(%g, %g), %s)",
                    o->out_h, o->out_w, (double)o->rrc_scale[0],
                    (double)o->rrc_scale[1], (double)o->rrc_ratio[0],
                    (double)o->rrc_ratio[1], in);
    if (o->resize > 0)
        describe_op(buf, n, &len, "Resize(%d, %s)", o->resize, in);
    else if (o->resize_h > 0)
        describe_op(buf, n, &len, "Resize((%d, %d), %s)", o->resize_h,
                    o->resize_w, in);
    if (o->random_crop)
        describe_op(buf, n, &len, "RandomCrop(%dx%d, padding=%d)", o->out_h,
                    o->out_w, o->random_crop_pad);
    else if (o->resize > 0 || (o->resize_h > 0 && (o->resize_h != o->out_h ||
                                                   o->resize_w != o->out_w)))
        describe_op(buf, n, &len, "CenterCrop(%dx%d)", o->out_h, o->out_w);
    if (o->hflip_prob > 0)
        describe_op(buf, n, &len, "RandomHorizontalFlip(%g)",
                    (double)o->hflip_prob);
    if (o->auto_augment == CL_AUTO_AUGMENT_TA_WIDE)
        describe_op(buf, n, &len, "TrivialAugmentWide()");
    else if (o->auto_augment == CL_AUTO_AUGMENT_RANDAUGMENT)
        describe_op(buf, n, &len, "RandAugment(num_ops=%d, magnitude=%d)",
                    o->ra_num_ops, o->ra_magnitude);
    if (o->brightness > 0 || o->contrast > 0 || o->saturation > 0)
        describe_op(buf, n, &len, "ColorJitter(%g, %g, %g)",
                    (double)o->brightness, (double)o->contrast,
                    (double)o->saturation);
    if (o->normalize && o->out_c == 1)
        describe_op(buf, n, &len, "Normalize(%g, %g)", (double)o->mean[0],
                    (double)o->std[0]);
    else if (o->normalize)
        describe_op(buf, n, &len, "Normalize((%g, %g, %g), (%g, %g, %g))",
                    (double)o->mean[0], (double)o->mean[1], (double)o->mean[2],
                    (double)o->std[0], (double)o->std[1], (double)o->std[2]);
    if (o->erase_prob > 0)
        describe_op(buf, n, &len, "RandomErasing(%g)", (double)o->erase_prob);
    if (len == 0)
        snprintf(buf, n, "no op");
}

void cl_transforms_scratch_free(cl_tf_scratch *s)
{
    cl_free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}

static cl_status scratch_need(cl_tf_scratch *s, size_t floats)
{
    if (s->cap >= floats)
        return CL_OK;
    size_t bytes;
    CL_TRY(cl_mul_size(floats, sizeof(float), &bytes, "transform scratch"));
    float *b = cl_alloc(bytes, "transform scratch");
    if (!b)
        return CL_ERR_NOMEM;
    cl_free(s->buf);
    s->buf = b;
    s->cap = floats;
    return CL_OK;
}

/* Python's round(): halves go to the even neighbour, as torchvision's
 * crop arithmetic does (nearbyint under the default rounding mode). */
static double py_round(double x)
{
    return nearbyint(x);
}

/* Uniform integer in [lo, hi] (inclusive). */
static int rand_int(cl_rng *r, int lo, int hi)
{
    return lo + (int)cl_rng_below(r, (uint32_t)(hi - lo + 1));
}

static double rand_range(cl_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * cl_rng_uniform_f64(r);
}

/* A source window mapped onto the output: rows y0..y0+ch, cols x0..x0+cw
 * (floats), sampled only inside [lo, hi) of the image.  Output rows
 * [oy0, oy1) and columns [ox0, ox1) (before the flip) lie on the resized
 * image; the others are a crop's zero padding. */
typedef struct window {
    double x0, y0, cw, ch;
    int xlo, xhi, ylo, yhi;
    int oy0, oy1, ox0, ox1;
    int exact; /* integer offsets at scale 1: a plain copy, zero outside */
} window;

/* torchvision's RandomResizedCrop.get_params. */
static void rrc_params(const cl_transform_opts *o, int H, int W, cl_rng *r,
                       window *w)
{
    double area = (double)H * W;
    double lr0 = log(o->rrc_ratio[0]), lr1 = log(o->rrc_ratio[1]);
    for (int t = 0; t < 10; t++) {
        double ta = area * rand_range(r, o->rrc_scale[0], o->rrc_scale[1]);
        double ar = exp(rand_range(r, lr0, lr1));
        int cw = (int)py_round(sqrt(ta * ar));
        int ch = (int)py_round(sqrt(ta / ar));
        if (cw > 0 && cw <= W && ch > 0 && ch <= H) {
            int i = rand_int(r, 0, H - ch);
            int j = rand_int(r, 0, W - cw);
            w->x0 = j;
            w->y0 = i;
            w->cw = cw;
            w->ch = ch;
            return;
        }
    }
    double in_ratio = (double)W / H;
    int cw, ch;
    if (in_ratio < o->rrc_ratio[0]) {
        cw = W;
        ch = (int)py_round(cw / (double)o->rrc_ratio[0]);
    } else if (in_ratio > o->rrc_ratio[1]) {
        ch = H;
        cw = (int)py_round(ch * (double)o->rrc_ratio[1]);
    } else {
        cw = W;
        ch = H;
    }
    if (ch < 1)
        ch = 1;
    if (cw < 1)
        cw = 1;
    w->x0 = (W - cw) / 2;
    w->y0 = (H - ch) / 2;
    w->cw = cw;
    w->ch = ch;
}

static cl_status choose_window(const cl_transform_opts *o, int H, int W,
                               cl_rng *r, window *w)
{
    int oh = o->out_h, ow = o->out_w;
    memset(w, 0, sizeof *w);
    w->xlo = 0;
    w->xhi = W;
    w->ylo = 0;
    w->yhi = H;
    w->oy1 = oh;
    w->ox1 = ow;
    if (o->random_resized_crop) {
        rrc_params(o, H, W, r, w);
        /* Crop first, then resize: the filter sees only the crop. */
        w->xlo = (int)w->x0;
        w->xhi = (int)(w->x0 + w->cw);
        w->ylo = (int)w->y0;
        w->yhi = (int)(w->y0 + w->ch);
        w->exact = (int)w->cw == ow && (int)w->ch == oh;
        return CL_OK;
    }
    const int resized = o->resize > 0 || o->resize_h > 0;
    if (resized || o->random_crop) {
        int rh = H, rw = W;
        if (o->resize_h > 0) {
            rh = o->resize_h;
            rw = o->resize_w;
        } else if (o->resize > 0 && H <= W) {
            rh = o->resize;
            rw = (int)((long long)o->resize * W / H);
        } else if (o->resize > 0) {
            rw = o->resize;
            rh = (int)((long long)o->resize * H / W);
        }
        if (rh < 1)
            rh = 1;
        if (rw < 1)
            rw = 1;
        /* Resize to rh x rw (or not at all), then crop oh x ow: at random
         * in the resized image padded by random_crop_pad, or at the centre
         * (torchvision's rounding); expressed as a window in source
         * pixels.  A crop reaching past the resized image is zero there,
         * as torchvision pads it. */
        int top, left;
        if (o->random_crop) {
            int p = o->random_crop_pad;
            if (rh + 2 * p < oh || rw + 2 * p < ow)
                return cl_error(CL_ERR_SHAPE,
                                "RandomCrop %dx%d is larger than the %s%dx%d "
                                "image padded by %d",
                                oh, ow, resized ? "resized " : "", rh, rw, p);
            top = rand_int(r, 0, rh + 2 * p - oh) - p;
            left = rand_int(r, 0, rw + 2 * p - ow) - p;
        } else {
            /* A crop larger than the image pads it by half the difference
             * (the smaller half) first, as torchvision's center_crop. */
            top = rh < oh ? -((oh - rh) / 2) : (int)py_round((rh - oh) / 2.0);
            left = rw < ow ? -((ow - rw) / 2) : (int)py_round((rw - ow) / 2.0);
        }
        double sy = (double)H / rh, sx = (double)W / rw;
        w->y0 = top * sy;
        w->x0 = left * sx;
        w->ch = oh * sy;
        w->cw = ow * sx;
        w->oy0 = top < 0 ? -top : 0;
        w->ox0 = left < 0 ? -left : 0;
        w->oy1 = rh - top < oh ? rh - top : oh;
        w->ox1 = rw - left < ow ? rw - left : ow;
        w->exact = rh == H && rw == W;
        return CL_OK;
    }
    if (H != oh || W != ow)
        return cl_error(CL_ERR_SHAPE,
                        "image is %dx%d, the transforms want %dx%d and "
                        "have no resize or crop",
                        H, W, oh, ow);
    w->ch = oh;
    w->cw = ow;
    w->exact = 1;
    return CL_OK;
}

/* Resampling weights for n outputs over [x0, x0+len) clamped to [lo, hi):
 * PIL's triangle (bilinear, radius 1) or cubic (bicubic, radius 2) filter,
 * stretched by the shrink factor so that a downscale is antialiased. */
static int filter_taps(double len, int n, int radius)
{
    double scale = len / n;
    double support = (scale > 1 ? scale : 1) * radius;
    return (int)ceil(support) * 2 + 2;
}

/* PIL's bicubic kernel: Keys' cubic convolution with a = -0.5. */
static double cubic(double d)
{
    const double a = -0.5;
    if (d < 1)
        return ((a + 2) * d - (a + 3)) * d * d + 1;
    if (d < 2)
        return (((d - 5) * d + 8) * d - 4) * a;
    return 0;
}

static void filter_weights(double x0, double len, int n, int lo, int hi,
                           int radius, int taps, int *first, int *count,
                           float *wt)
{
    double scale = len / n;
    double fs = scale > 1 ? scale : 1;
    double support = fs * radius;
    for (int i = 0; i < n; i++) {
        double center = x0 + (i + 0.5) * scale;
        int a = (int)floor(center - support + 0.5);
        int b = (int)floor(center + support + 0.5);
        if (a < lo)
            a = lo;
        if (b > hi)
            b = hi;
        if (b - a > taps)
            b = a + taps;
        double sum = 0;
        float *w = wt + (size_t)i * taps;
        for (int k = a; k < b; k++) {
            double d = fabs((k + 0.5 - center) / fs);
            double v = radius == 2 ? cubic(d) : (d < 1 ? 1 - d : 0);
            w[k - a] = (float)v;
            sum += v;
        }
        if (sum <= 0) {
            /* Window fully outside the image: take the nearest pixel. */
            int c = (int)floor(center);
            a = c < lo ? lo : (c >= hi ? hi - 1 : c);
            b = a + 1;
            w[0] = 1;
            sum = 1;
        }
        for (int k = 0; k < b - a; k++)
            w[k] = (float)(w[k] / sum);
        first[i] = a;
        count[i] = b - a;
    }
}

static float luma(const float *p)
{
    return 0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2];
}

static float clamp01(float v)
{
    return v < 0 ? 0 : (v > 1 ? 1 : v);
}

/* ColorJitter on HWC floats in [0,1]; the three ops in random order. */
static void color_jitter(const cl_transform_opts *o, float *px, int n, int c,
                         cl_rng *r)
{
    int order[3] = {0, 1, 2};
    for (int i = 2; i > 0; i--) {
        int j = (int)cl_rng_below(r, (uint32_t)(i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int s = 0; s < 3; s++) {
        float amt = order[s] == 0   ? o->brightness
                    : order[s] == 1 ? o->contrast
                                    : o->saturation;
        if (amt <= 0)
            continue;
        float lo = 1 - amt < 0 ? 0 : 1 - amt;
        float f = (float)rand_range(r, lo, 1 + amt);
        size_t len = (size_t)n * c;
        if (order[s] == 0) {
            for (size_t i = 0; i < len; i++)
                px[i] = clamp01(px[i] * f);
        } else if (order[s] == 1) {
            double m = 0;
            for (int i = 0; i < n; i++)
                m += c == 3 ? luma(px + (size_t)i * 3) : px[i];
            float mean = (float)(m / n);
            for (size_t i = 0; i < len; i++)
                px[i] = clamp01(f * px[i] + (1 - f) * mean);
        } else if (c == 3) {
            for (int i = 0; i < n; i++) {
                float *p = px + (size_t)i * 3;
                float g = luma(p);
                for (int k = 0; k < 3; k++)
                    p[k] = clamp01(f * p[k] + (1 - f) * g);
            }
        }
    }
}

/* torchvision's RandomErasing with value 0 on the CHW output. */
static void random_erase(const cl_transform_opts *o, float *out, cl_rng *r)
{
    int H = o->out_h, W = o->out_w;
    if (cl_rng_uniform(r) >= o->erase_prob)
        return;
    double area = (double)H * W;
    double lr0 = log(o->erase_ratio[0]), lr1 = log(o->erase_ratio[1]);
    for (int t = 0; t < 10; t++) {
        double ea = area * rand_range(r, o->erase_scale[0], o->erase_scale[1]);
        double ar = exp(rand_range(r, lr0, lr1));
        int h = (int)py_round(sqrt(ea * ar));
        int w = (int)py_round(sqrt(ea / ar));
        if (!(h < H && w < W) || h < 1 || w < 1)
            continue;
        int i = rand_int(r, 0, H - h);
        int j = rand_int(r, 0, W - w);
        for (int c = 0; c < o->out_c; c++)
            for (int y = i; y < i + h; y++)
                memset(out + ((size_t)c * H + y) * W + j, 0,
                       (size_t)w * sizeof(float));
        return;
    }
}

cl_status cl_transforms_apply(const cl_transforms *tf, const cl_image *img,
                              cl_rng *rng, cl_tf_scratch *scratch, float *out)
{
    const cl_transform_opts *o = &tf->o;
    cl_tf_scratch local = {NULL, 0};
    cl_status s = CL_OK;
    int H = img->h, W = img->w, C = img->c;
    int oh = o->out_h, ow = o->out_w;
    window win;
    if (!scratch)
        scratch = &local;
    if (tf->random && !rng)
        return cl_error(CL_ERR_ARG, "transforms: a random pipeline needs an "
                                    "RNG stream");
    if (C != 1 && C != 3)
        return cl_error(CL_ERR_SHAPE,
                        "image has %d channels: expected 1 or "
                        "3",
                        C);
    s = choose_window(o, H, W, rng, &win);
    if (s != CL_OK)
        return s;
    int flip = o->hflip_prob > 0 && cl_rng_uniform(rng) < o->hflip_prob;

    /* px: (oh, ow, C) floats in [0,1] after the geometric stage. */
    size_t npx = (size_t)oh * ow * C;
    int tx = 0, ty = 0;
    size_t need = npx;
    int radius = o->interpolation == CL_INTERP_BICUBIC ? 2 : 1;
    /* Auto augment: the image and a work copy as bytes, after the rest. */
    size_t aug_at = 0;
    if (!win.exact) {
        tx = filter_taps(win.cw, ow, radius);
        ty = filter_taps(win.ch, oh, radius);
        /* tmp rows x ow x C, weights and tap ranges for both axes. */
        need += (size_t)H * ow * C + (size_t)ow * tx + (size_t)oh * ty +
                2 * (size_t)(ow + oh);
    }
    if (o->auto_augment != CL_AUTO_AUGMENT_NONE) {
        aug_at = need;
        need += (2 * npx + sizeof(float) - 1) / sizeof(float);
    }
    s = scratch_need(scratch, need);
    if (s != CL_OK)
        goto done;
    float *px = scratch->buf;
    const float inv = 1.0f / 255.0f;
    if (win.exact) {
        int y0 = (int)win.y0, x0 = (int)win.x0;
        for (int y = 0; y < oh; y++) {
            int sy = y0 + y;
            for (int x = 0; x < ow; x++) {
                int sx = x0 + (flip ? ow - 1 - x : x);
                float *d = px + ((size_t)y * ow + x) * C;
                if (sy < 0 || sy >= H || sx < 0 || sx >= W) {
                    for (int c = 0; c < C; c++)
                        d[c] = 0;
                    continue;
                }
                const uint8_t *p = img->data + ((size_t)sy * W + sx) * C;
                for (int c = 0; c < C; c++)
                    d[c] = tf->unit[p[c]];
            }
        }
    } else {
        float *tmp = px + npx;
        float *wx = tmp + (size_t)H * ow * C;
        float *wy = wx + (size_t)ow * tx;
        int *fx = (int *)(wy + (size_t)oh * ty);
        int *nx = fx + ow, *fy = nx + ow, *ny = fy + oh;
        filter_weights(win.x0, win.cw, ow, win.xlo, win.xhi, radius, tx, fx, nx,
                       wx);
        filter_weights(win.y0, win.ch, oh, win.ylo, win.yhi, radius, ty, fy, ny,
                       wy);
        int r0 = fy[0], r1 = fy[0] + ny[0];
        for (int y = 0; y < oh; y++) {
            if (fy[y] < r0)
                r0 = fy[y];
            if (fy[y] + ny[y] > r1)
                r1 = fy[y] + ny[y];
        }
        /* Horizontal pass over the rows the vertical pass reads. */
        for (int y = r0; y < r1; y++) {
            const uint8_t *row = img->data + (size_t)y * W * C;
            float *t = tmp + (size_t)(y - r0) * ow * C;
            if (C == 3) {
                for (int x = 0; x < ow; x++) {
                    const float *w = wx + (size_t)x * tx;
                    const uint8_t *p = row + (size_t)fx[x] * 3;
                    float a0 = 0, a1 = 0, a2 = 0;
                    const int n = x >= win.ox0 && x < win.ox1 ? nx[x] : 0;
                    for (int k = 0; k < n; k++, p += 3) {
                        a0 += w[k] * p[0];
                        a1 += w[k] * p[1];
                        a2 += w[k] * p[2];
                    }
                    float *d = t + (size_t)(flip ? ow - 1 - x : x) * 3;
                    d[0] = a0;
                    d[1] = a1;
                    d[2] = a2;
                }
            } else {
                for (int x = 0; x < ow; x++) {
                    const float *w = wx + (size_t)x * tx;
                    const uint8_t *p = row + fx[x];
                    float a0 = 0;
                    const int n = x >= win.ox0 && x < win.ox1 ? nx[x] : 0;
                    for (int k = 0; k < n; k++)
                        a0 += w[k] * p[k];
                    t[flip ? ow - 1 - x : x] = a0;
                }
            }
            /* PIL stores the horizontal pass in 8 bits: clip the cubic's
             * overshoot before the vertical pass reads it. */
            if (radius == 2)
                for (size_t i = 0; i < (size_t)ow * C; i++)
                    t[i] = t[i] < 0 ? 0 : (t[i] > 255 ? 255 : t[i]);
        }
        for (int y = 0; y < oh; y++) {
            const float *w = wy + (size_t)y * ty;
            float *d = px + (size_t)y * ow * C;
            size_t rowlen = (size_t)ow * C;
            for (size_t i = 0; i < rowlen; i++)
                d[i] = 0;
            const int n = y >= win.oy0 && y < win.oy1 ? ny[y] : 0;
            for (int k = 0; k < n; k++) {
                const float *t = tmp + (size_t)(fy[y] + k - r0) * rowlen;
                float wk = w[k] * inv;
                for (size_t i = 0; i < rowlen; i++)
                    d[i] += wk * t[i];
            }
            /* Triangle weights are non-negative, so only rounding can
             * leave [0,1] (the cubic's negative lobes can overshoot); clamp
             * as an 8-bit resize would. */
            for (size_t i = 0; i < rowlen; i++)
                d[i] = clamp01(d[i]);
        }
    }
    if (o->auto_augment != CL_AUTO_AUGMENT_NONE) {
        /* torchvision augments the 8-bit image the resize produced: round
         * to bytes, augment, and come back through the same v / 255. */
        uint8_t *u8 = (uint8_t *)(scratch->buf + aug_at);
        for (size_t i = 0; i < npx; i++)
            u8[i] = (uint8_t)(px[i] * 255.0f + 0.5f);
        cl__aug_apply(o->auto_augment, o->ra_num_ops, o->ra_magnitude, u8,
                      u8 + npx, oh, ow, C, rng);
        for (size_t i = 0; i < npx; i++)
            px[i] = tf->unit[u8[i]];
    }
    if (o->brightness > 0 || o->contrast > 0 || o->saturation > 0)
        color_jitter(o, px, oh * ow, C, rng);

    /* Channel conversion, normalisation and HWC -> CHW in one pass. */
    size_t plane = (size_t)oh * ow;
    for (int c = 0; c < o->out_c; c++) {
        float m = o->normalize ? o->mean[c] : 0.0f;
        float is = o->normalize ? 1.0f / o->std[c] : 1.0f;
        float *dst = out + (size_t)c * plane;
        if (C == o->out_c) {
            for (size_t i = 0; i < plane; i++)
                dst[i] = (px[i * C + c] - m) * is;
        } else if (C == 1) {
            for (size_t i = 0; i < plane; i++)
                dst[i] = (px[i] - m) * is;
        } else {
            for (size_t i = 0; i < plane; i++)
                dst[i] = (luma(px + i * 3) - m) * is;
        }
    }
    if (o->erase_prob > 0)
        random_erase(o, out, rng);
done:
    cl_transforms_scratch_free(&local);
    return s;
}
