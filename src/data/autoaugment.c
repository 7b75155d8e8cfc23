/* TrivialAugmentWide and RandAugment on 8-bit HWC images, with the op list,
 * magnitude bins and arithmetic of torchvision 0.14's tensor path
 * (transforms.autoaugment over functional_tensor on uint8). */
#include <math.h>
#include <string.h>

#include "data/data_internal.h"

#define PI 3.14159265358979323846

static const char *const op_names[CL__AUG_OP_COUNT] = {
    "Identity",  "ShearX",     "ShearY",       "TranslateX", "TranslateY",
    "Rotate",    "Brightness", "Color",        "Contrast",   "Sharpness",
    "Posterize", "Solarize",   "AutoContrast", "Equalize"};

const char *cl__aug_op_name(int op)
{
    return op >= 0 && op < CL__AUG_OP_COUNT ? op_names[op] : "?";
}

/* torch.linspace(a, b, n)[i] in float32, to the last bit as torch 1.13's
 * AVX2 CPU kernel gives it: the first half counts up from a, the second
 * down from b; the leading multiple of 16 values comes from 8-lane vectors
 * (base + lane * step, unfused), the rest from the scalar loop, which the
 * compiler fused into one fma.  (An AVX-512 torch differs in the last bit
 * of a few bins; magnitudes are that close either way.) */
static float linspace_f(float a, float b, int n, int i)
{
    if (n < 2)
        return a;
    float step = (b - a) / (float)(n - 1);
    int half = n / 2;
    if (i < n / 16 * 16) {
        int blk = i / 8 * 8;
        float base = blk < half ? a + step * (float)blk
                                : b - step * (float)(n - blk - 1);
        return base + (float)(i - blk) * step;
    }
    return i < half ? fmaf(step, (float)i, a)
                    : fmaf(-step, (float)(n - 1 - i), b);
}

/* Signed ops draw a sign; the ops without a magnitude have none. */
static int op_signed(int op)
{
    return op >= CL__AUG_SHEAR_X && op <= CL__AUG_SHARPNESS;
}

static int op_has_magnitude(int op)
{
    return op >= CL__AUG_SHEAR_X && op <= CL__AUG_SOLARIZE;
}

double cl__aug_magnitude(int policy, int op, int bin, int h, int w)
{
    const int n = CL__AUG_BINS;
    int wide = policy == CL_AUTO_AUGMENT_TA_WIDE;
    switch (op) {
    case CL__AUG_SHEAR_X:
    case CL__AUG_SHEAR_Y:
        return linspace_f(0.0f, wide ? 0.99f : 0.3f, n, bin);
    case CL__AUG_TRANSLATE_X:
        return linspace_f(0.0f, wide ? 32.0f : (float)(150.0 / 331.0 * w), n,
                          bin);
    case CL__AUG_TRANSLATE_Y:
        return linspace_f(0.0f, wide ? 32.0f : (float)(150.0 / 331.0 * h), n,
                          bin);
    case CL__AUG_ROTATE:
        return linspace_f(0.0f, wide ? 135.0f : 30.0f, n, bin);
    case CL__AUG_BRIGHTNESS:
    case CL__AUG_COLOR:
    case CL__AUG_CONTRAST:
    case CL__AUG_SHARPNESS:
        return linspace_f(0.0f, wide ? 0.99f : 0.9f, n, bin);
    case CL__AUG_POSTERIZE: {
        /* 8 - round(bin / ((n - 1) / k)), k = 6 (wide) or 4, in float32
         * with halves to even. */
        float q = (float)(n - 1) / (wide ? 6.0f : 4.0f);
        return 8 - (int)nearbyintf((float)bin / q);
    }
    case CL__AUG_SOLARIZE:
        return linspace_f(255.0f, 0.0f, n, bin);
    default:
        return 0.0;
    }
}

int cl__aug_draw(int policy, int num_ops, int magnitude, int h, int w,
                 cl_rng *r, int *ops, double *mags)
{
    int k = policy == CL_AUTO_AUGMENT_TA_WIDE ? 1 : num_ops;
    for (int i = 0; i < k; i++) {
        int op = (int)cl_rng_below(r, CL__AUG_OP_COUNT);
        double m = 0;
        if (op_has_magnitude(op)) {
            /* TrivialAugmentWide draws the bin; RandAugment fixes it. */
            int bin = policy == CL_AUTO_AUGMENT_TA_WIDE
                          ? (int)cl_rng_below(r, CL__AUG_BINS)
                          : magnitude;
            m = cl__aug_magnitude(policy, op, bin, h, w);
        }
        if (op_signed(op) && cl_rng_below(r, 2))
            m = -m;
        ops[i] = op;
        mags[i] = m;
    }
    return k;
}

/* nearbyintf (halves to even) without the libm call: adding and removing
 * 1.5 * 2^23 leaves an integer in the float's last place for |x| < 2^22,
 * rounded by the default mode; larger values are integral already. */
static float round_even(float x)
{
    if (!(fabsf(x) < 4194304.0f))
        return x;
    return (x + 12582912.0f) - 12582912.0f;
}

/* ------------------------------------------------------- geometric ops */

/* torchvision's _get_inverse_affine_matrix: the output -> input map of
 * T * C * RotateScaleShear * C^-1 (scale 1), angles in degrees. */
static void inverse_affine(double cx, double cy, double angle, double tx,
                           double ty, double shx, double shy, double m[6])
{
    const double rad = PI / 180.0;
    double rot = angle * rad, sx = shx * rad, sy = shy * rad;
    double a = cos(rot - sy) / cos(sy);
    double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
    double c = sin(rot - sy) / cos(sy);
    double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
    /* det [[a, b], [c, d]] is 1, so the inverse is [[d, -b], [-c, a]]. */
    m[0] = d;
    m[1] = -b;
    m[2] = 0;
    m[3] = -c;
    m[4] = a;
    m[5] = 0;
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx;
    m[5] += cy;
}

/* A translation by whole pixels (dx right, dy down), zero fill: what the
 * warp below computes for one, since its sample points sit within float
 * rounding of integers, far from the rounding ties. */
static void shift(const uint8_t *src, uint8_t *dst, int h, int w, int c, int dx,
                  int dy)
{
    size_t row = (size_t)w * c;
    memset(dst, 0, (size_t)h * row);
    if (dx <= -w || dx >= w || dy <= -h || dy >= h)
        return;
    int x0 = dx > 0 ? dx : 0, n = w - (dx > 0 ? dx : -dx);
    for (int y = dy > 0 ? dy : 0; y < h && y - dy < h; y++)
        memcpy(dst + y * row + (size_t)x0 * c,
               src + (size_t)(y - dy) * row + (size_t)(x0 - dx) * c,
               (size_t)n * c);
}

/* Nearest-neighbour warp with zero fill, as torchvision's affine grid and
 * grid_sample(align_corners=False) compute it in float32: the matrix works
 * in pixel units about the image centre. */
static void warp_nearest(const uint8_t *src, uint8_t *dst, int h, int w, int c,
                         const double md[6])
{
    float hw = 0.5f * (float)w, hh = 0.5f * (float)h;
    float m0 = (float)md[0] / hw, m1 = (float)md[1] / hw,
          m2 = (float)md[2] / hw;
    float m3 = (float)md[3] / hh, m4 = (float)md[4] / hh,
          m5 = (float)md[5] / hh;
    for (int y = 0; y < h; y++) {
        float yb = -hh + 0.5f + (float)y;
        for (int x = 0; x < w; x++) {
            float xb = -hw + 0.5f + (float)x;
            float gx = xb * m0 + yb * m1 + m2;
            float gy = xb * m3 + yb * m4 + m5;
            /* grid_sample's unnormalisation, ((g + 1) * size - 1) / 2,
             * in this order: the rounding ties fall as in torch. */
            float fx = round_even(((gx + 1.0f) * (float)w - 1.0f) / 2.0f);
            float fy = round_even(((gy + 1.0f) * (float)h - 1.0f) / 2.0f);
            uint8_t *d = dst + ((size_t)y * w + x) * c;
            if (fx >= 0 && fx < (float)w && fy >= 0 && fy < (float)h) {
                const uint8_t *p = src + ((size_t)fy * w + (size_t)fx) * c;
                d[0] = p[0];
                if (c == 3) {
                    d[1] = p[1];
                    d[2] = p[2];
                }
            } else {
                d[0] = 0;
                if (c == 3)
                    d[1] = d[2] = 0;
            }
        }
    }
}

/* ------------------------------------------------------ photometric ops */

/* torchvision's rgb_to_grayscale on uint8: float32 weights, truncated. */
static uint8_t gray_u8(const uint8_t *p)
{
    return (uint8_t)(0.2989f * p[0] + 0.587f * p[1] + 0.114f * p[2]);
}

/* _blend on uint8: ratio * a + (1 - ratio) * b in float32, clamped to
 * [0, 255] and truncated as a cast to uint8 does. */
static uint8_t blend(float ra, float rb, float a, float b)
{
    float t = ra * a + rb * b;
    return (uint8_t)(t < 0 ? 0 : (t > 255 ? 255 : t));
}

static void adjust_brightness(uint8_t *img, size_t len, double f)
{
    float ra = (float)f, rb = (float)(1.0 - f);
    for (size_t i = 0; i < len; i++)
        img[i] = blend(ra, rb, img[i], 0);
}

static void adjust_saturation(uint8_t *img, size_t n, int c, double f)
{
    if (c == 1)
        return; /* torchvision leaves one channel alone, as PIL does */
    float ra = (float)f, rb = (float)(1.0 - f);
    for (size_t i = 0; i < n; i++) {
        uint8_t *p = img + i * 3;
        float g = gray_u8(p);
        for (int k = 0; k < 3; k++)
            p[k] = blend(ra, rb, p[k], g);
    }
}

static void adjust_contrast(uint8_t *img, size_t n, int c, double f)
{
    /* The mean of the (truncated) gray image; the sum of integers is exact
     * in double, as torch's float32 sum is for these sizes. */
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += c == 3 ? gray_u8(img + i * 3) : img[i];
    float mean = (float)s / (float)n;
    float ra = (float)f, rb = (float)(1.0 - f);
    for (size_t i = 0; i < n * (size_t)c; i++)
        img[i] = blend(ra, rb, img[i], mean);
}

/* Blend with the 3x3 [1 1 1; 1 5 1; 1 1 1] / 13 smoothing, rounded to
 * uint8; the border keeps its pixels, as in torchvision. */
static void adjust_sharpness(uint8_t *img, uint8_t *tmp, int h, int w, int c,
                             double f)
{
    if (w <= 2 || h <= 2)
        return;
    const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
    size_t len = (size_t)h * w * c, row = (size_t)w * c;
    memcpy(tmp, img, len);
    for (int y = 1; y < h - 1; y++) {
        const uint8_t *u = img + (size_t)(y - 1) * row, *m = u + row,
                      *d = m + row;
        uint8_t *o = tmp + (size_t)y * row;
        for (size_t i = (size_t)c; i < row - (size_t)c; i++) {
            /* Row-major over the 3x3 window, one product at a time: the
             * sum torchvision's float32 convolution gives here. */
            size_t l = i - (size_t)c, r = i + (size_t)c;
            float s = k1 * u[l];
            s += k1 * u[i];
            s += k1 * u[r];
            s += k1 * m[l];
            s += k5 * m[i];
            s += k1 * m[r];
            s += k1 * d[l];
            s += k1 * d[i];
            s += k1 * d[r];
            o[i] = (uint8_t)round_even(s);
        }
    }
    float ra = (float)f, rb = (float)(1.0 - f);
    for (size_t i = 0; i < len; i++)
        img[i] = blend(ra, rb, img[i], tmp[i]);
}

static void posterize(uint8_t *img, size_t len, int bits)
{
    if (bits < 0)
        bits = 0;
    if (bits > 8)
        bits = 8;
    uint8_t mask = (uint8_t)(0xFFu << (8 - bits));
    for (size_t i = 0; i < len; i++)
        img[i] &= mask;
}

static void solarize(uint8_t *img, size_t len, double threshold)
{
    for (size_t i = 0; i < len; i++)
        if (img[i] >= threshold)
            img[i] = (uint8_t)(255 - img[i]);
}

/* Per channel: stretch [min, max] to [0, 255] (float32, truncated). */
static void autocontrast(uint8_t *img, size_t n, int c)
{
    /* One pass for the extremes of every channel, one through a table. */
    uint8_t lo[3] = {255, 255, 255}, hi[3] = {0, 0, 0};
    size_t len = n * (size_t)c;
    for (size_t i = 0; i < len; i += (size_t)c)
        for (int ch = 0; ch < c; ch++) {
            uint8_t v = img[i + ch];
            lo[ch] = v < lo[ch] ? v : lo[ch];
            hi[ch] = v > hi[ch] ? v : hi[ch];
        }
    uint8_t lut[3][256];
    for (int ch = 0; ch < c; ch++) {
        /* torchvision's flat channel: scale 1, offset 0, unchanged. */
        float mn = hi[ch] == lo[ch] ? 0.0f : (float)lo[ch];
        float scale =
            hi[ch] == lo[ch] ? 1.0f : 255.0f / (float)(hi[ch] - lo[ch]);
        for (int v = 0; v < 256; v++) {
            float t = ((float)v - mn) * scale;
            lut[ch][v] = (uint8_t)(t < 0 ? 0 : (t > 255 ? 255 : t));
        }
    }
    for (size_t i = 0; i < len; i += (size_t)c)
        for (int ch = 0; ch < c; ch++)
            img[i + ch] = lut[ch][img[i + ch]];
}

/* Per channel histogram equalisation, torchvision's (and PIL's) lookup:
 * step = (pixels outside the last occupied bin) / 255, and value v maps to
 * (pixels below v + step / 2) / step. */
static void equalize(uint8_t *img, size_t n, int c)
{
    for (int ch = 0; ch < c; ch++) {
        int64_t hist[256] = {0};
        for (size_t i = 0; i < n; i++)
            hist[img[i * c + ch]]++;
        int last = 255;
        while (last > 0 && hist[last] == 0)
            last--;
        int64_t step = ((int64_t)n - hist[last]) / 255;
        if (step == 0)
            continue;
        uint8_t lut[256];
        int64_t below = 0;
        for (int v = 0; v < 256; v++) {
            int64_t q = (below + step / 2) / step;
            lut[v] = (uint8_t)(q > 255 ? 255 : q);
            below += hist[v];
        }
        for (size_t i = 0; i < n; i++)
            img[i * c + ch] = lut[img[i * c + ch]];
    }
}

void cl__aug_apply_op(uint8_t *img, uint8_t *tmp, int h, int w, int c, int op,
                      double mag)
{
    size_t n = (size_t)h * w, len = n * (size_t)c;
    double m[6];
    int geo = 1;
    switch (op) {
    case CL__AUG_SHEAR_X:
        /* torchvision shears by atan(mag) degrees about the top-left
         * corner, which in centred units is (-w/2, -h/2). */
        inverse_affine(-0.5 * w, -0.5 * h, 0, 0, 0, atan(mag) * (180 / PI), 0,
                       m);
        break;
    case CL__AUG_SHEAR_Y:
        inverse_affine(-0.5 * w, -0.5 * h, 0, 0, 0, 0, atan(mag) * (180 / PI),
                       m);
        break;
    case CL__AUG_TRANSLATE_X:
    case CL__AUG_TRANSLATE_Y: {
        /* Whole pixels: int() truncates toward zero. */
        int t = (int)mag;
        if (op == CL__AUG_TRANSLATE_X)
            shift(img, tmp, h, w, c, t, 0);
        else
            shift(img, tmp, h, w, c, 0, t);
        memcpy(img, tmp, len);
        return;
    }
    case CL__AUG_ROTATE:
        /* F.rotate turns counter-clockwise: the affine angle is -mag. */
        inverse_affine(0, 0, -mag, 0, 0, 0, 0, m);
        break;
    default:
        geo = 0;
    }
    if (geo) {
        warp_nearest(img, tmp, h, w, c, m);
        memcpy(img, tmp, len);
        return;
    }
    switch (op) {
    case CL__AUG_BRIGHTNESS:
        adjust_brightness(img, len, 1.0 + mag);
        break;
    case CL__AUG_COLOR:
        adjust_saturation(img, n, c, 1.0 + mag);
        break;
    case CL__AUG_CONTRAST:
        adjust_contrast(img, n, c, 1.0 + mag);
        break;
    case CL__AUG_SHARPNESS:
        adjust_sharpness(img, tmp, h, w, c, 1.0 + mag);
        break;
    case CL__AUG_POSTERIZE:
        posterize(img, len, (int)mag);
        break;
    case CL__AUG_SOLARIZE:
        solarize(img, len, mag);
        break;
    case CL__AUG_AUTOCONTRAST:
        autocontrast(img, n, c);
        break;
    case CL__AUG_EQUALIZE:
        equalize(img, n, c);
        break;
    default:
        break; /* Identity */
    }
}

void cl__aug_apply(int policy, int num_ops, int magnitude, uint8_t *img,
                   uint8_t *tmp, int h, int w, int c, cl_rng *r)
{
    int ops[CL__AUG_MAX_OPS];
    double mags[CL__AUG_MAX_OPS];
    int k = cl__aug_draw(policy, num_ops, magnitude, h, w, r, ops, mags);
    for (int i = 0; i < k; i++)
        cl__aug_apply_op(img, tmp, h, w, c, ops[i], mags[i]);
}
