/* The AutoAugment family (TrivialAugmentWide, RandAugment) and bicubic
 * resizing: each op on hand-computed images, torchvision's magnitude bins,
 * determinism, the config keys, and parity with torchvision / PIL run live
 * through python3 (skipped where torch or PIL is missing). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/data_internal.h"
#include "harness.h"
#include "io/config.h"
#include "train/recipe.h"

#define PY "/usr/bin/python3"

/* A deterministic, structured test pattern (edges, ramps and noise). */
static void pattern(uint8_t *p, int h, int w, int c, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (int y = 0; y < h; y++)
        for (int i = 0; i < w; i++)
            for (int k = 0; k < c; k++) {
                x = x * 1664525u + 1013904223u;
                int v = (y * 9 + i * 5 + k * 70) % 256;
                if ((y / 4 + i / 3) % 2)
                    v = 255 - v;
                v += (int)(x >> 28) - 8;
                p[((size_t)y * w + i) * c + k] =
                    (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
            }
}

static void op1(uint8_t *img, int h, int w, int c, int op, double mag)
{
    uint8_t tmp[4096];
    REQUIRE((size_t)h * w * c <= sizeof tmp);
    cl__aug_apply_op(img, tmp, h, w, c, op, mag);
}

CL_TEST(posterize_solarize_brightness)
{
    uint8_t v[6] = {0, 63, 64, 127, 200, 255};
    uint8_t a[6];
    memcpy(a, v, 6);
    op1(a, 1, 6, 1, CL__AUG_POSTERIZE, 2); /* keep the top 2 bits */
    const uint8_t post[6] = {0, 0, 64, 64, 192, 192};
    CHECK(memcmp(a, post, 6) == 0);
    memcpy(a, v, 6);
    op1(a, 1, 6, 1, CL__AUG_POSTERIZE, 8);
    CHECK(memcmp(a, v, 6) == 0);
    memcpy(a, v, 6);
    op1(a, 2, 1, 3, CL__AUG_SOLARIZE, 127.5); /* v >= 127.5 inverts */
    const uint8_t sol[6] = {0, 63, 64, 127, 55, 0};
    CHECK(memcmp(a, sol, 6) == 0);
    memcpy(a, v, 6);
    op1(a, 2, 1, 3, CL__AUG_SOLARIZE, 64); /* >=: 64 itself inverts */
    const uint8_t sol64[6] = {0, 63, 191, 128, 55, 0};
    CHECK(memcmp(a, sol64, 6) == 0);
    memcpy(a, v, 6);
    op1(a, 1, 6, 1, CL__AUG_BRIGHTNESS, 0.5); /* x1.5, clamped */
    const uint8_t br[6] = {0, 94, 96, 190, 255, 255};
    CHECK(memcmp(a, br, 6) == 0);
    memcpy(a, v, 6);
    op1(a, 1, 6, 1, CL__AUG_BRIGHTNESS, -0.5); /* x0.5, truncated */
    const uint8_t dk[6] = {0, 31, 32, 63, 100, 127};
    CHECK(memcmp(a, dk, 6) == 0);
}

CL_TEST(equalize_and_autocontrast)
{
    /* 32x32: 512 pixels of 50, 256 of 100, 256 of 200.  step = (1024 -
     * 256) / 255 = 3 and v maps to (pixels below v + 1) / 3: 0, 171, 255
     * (769 / 3 clamped). */
    uint8_t img[1024];
    for (int i = 0; i < 1024; i++)
        img[i] = i < 512 ? 50 : (i < 768 ? 100 : 200);
    op1(img, 32, 32, 1, CL__AUG_EQUALIZE, 0);
    CHECK(img[0] == 0 && img[600] == 171 && img[900] == 255);
    /* A flat channel (step 0) is left alone. */
    memset(img, 77, 1024);
    op1(img, 32, 32, 1, CL__AUG_EQUALIZE, 0);
    CHECK(img[0] == 77 && img[1023] == 77);
    /* AutoContrast per channel: R in [50, 150] stretches by 2.55
     * (truncated), G constant stays, B already full range stays. */
    uint8_t rgb[9] = {50, 9, 0, 100, 9, 128, 150, 9, 255};
    op1(rgb, 1, 3, 3, CL__AUG_AUTOCONTRAST, 0);
    const uint8_t want[9] = {0, 9, 0, 127, 9, 128, 255, 9, 255};
    CHECK(memcmp(rgb, want, 9) == 0);
}

CL_TEST(geometric_ops_by_nearest)
{
    /* Rotate +90 (counter-clockwise) of a 4x4: out[y][x] = in[x][3 - y]. */
    uint8_t a[16], b[16];
    for (int i = 0; i < 16; i++)
        a[i] = b[i] = (uint8_t)(i + 1);
    op1(b, 4, 4, 1, CL__AUG_ROTATE, 90);
    int bad = 0;
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++)
            bad += b[y * 4 + x] != a[x * 4 + (3 - y)];
    CHECK(bad == 0);
    /* TranslateX by 2 (and by 2.9: whole pixels, truncated) on a 3x5
     * RGB: columns move right, zero fill enters on the left. */
    uint8_t c[45], d[45];
    for (int i = 0; i < 45; i++)
        c[i] = (uint8_t)(10 + i);
    for (int t = 0; t < 2; t++) {
        memcpy(d, c, 45);
        op1(d, 3, 5, 3, CL__AUG_TRANSLATE_X, t ? 2.9 : 2.0);
        bad = 0;
        for (int y = 0; y < 3; y++)
            for (int x = 0; x < 5; x++)
                for (int k = 0; k < 3; k++) {
                    int want = x < 2 ? 0 : c[(y * 5 + x - 2) * 3 + k];
                    bad += d[(y * 5 + x) * 3 + k] != want;
                }
        CHECK(bad == 0);
    }
    /* TranslateY by -1: rows move up, the last row is zero. */
    memcpy(d, c, 45);
    op1(d, 3, 5, 3, CL__AUG_TRANSLATE_Y, -1);
    CHECK(memcmp(d, c + 15, 30) == 0);
    for (int i = 30; i < 45; i++)
        bad += d[i] != 0;
    CHECK(bad == 0);
    /* ShearX 0.5 about the top-left corner: row y reads x + 0.5 (y + 0.5)
     * rounded half to even, i.e. shifts 0, 1, 1, 2. */
    for (int i = 0; i < 16; i++)
        b[i] = a[i];
    op1(b, 4, 4, 1, CL__AUG_SHEAR_X, 0.5);
    const int shift[4] = {0, 1, 1, 2};
    bad = 0;
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++) {
            int sx = x + shift[y];
            bad += b[y * 4 + x] != (sx < 4 ? a[y * 4 + sx] : 0);
        }
    CHECK(bad == 0);
    /* Color on one channel is the identity, as in torchvision. */
    for (int i = 0; i < 16; i++)
        b[i] = a[i];
    op1(b, 4, 4, 1, CL__AUG_COLOR, -0.9);
    CHECK(memcmp(a, b, 16) == 0);
}

CL_TEST(magnitude_bins_match_torchvision)
{
    /* Values printed by torch.linspace / the posterize formula (float32). */
    int ta = CL_AUTO_AUGMENT_TA_WIDE, ra = CL_AUTO_AUGMENT_RANDAUGMENT;
    CHECK(cl__aug_magnitude(ta, CL__AUG_SHEAR_X, 3, 0, 0) ==
          0.0989999994635582);
    CHECK(cl__aug_magnitude(ta, CL__AUG_SHEAR_Y, 30, 0, 0) ==
          0.9900000095367432);
    CHECK(cl__aug_magnitude(ta, CL__AUG_TRANSLATE_X, 1, 0, 0) ==
          1.0666667222976685);
    CHECK(cl__aug_magnitude(ta, CL__AUG_TRANSLATE_Y, 9, 0, 0) ==
          9.600000381469727);
    CHECK(cl__aug_magnitude(ta, CL__AUG_TRANSLATE_X, 15, 0, 0) == 16.0);
    /* Bins where torch's fused scalar tail differs from a plain a + i * step
     * in the last bit. */
    CHECK(cl__aug_magnitude(ta, CL__AUG_SHEAR_X, 19, 0, 0) ==
          0.6270000338554382);
    CHECK(cl__aug_magnitude(ta, CL__AUG_BRIGHTNESS, 25, 0, 0) ==
          0.824999988079071);
    CHECK(cl__aug_magnitude(ta, CL__AUG_TRANSLATE_X, 17, 0, 0) ==
          18.133333206176758);
    CHECK(cl__aug_magnitude(ta, CL__AUG_TRANSLATE_Y, 24, 0, 0) ==
          25.600000381469727);
    CHECK(cl__aug_magnitude(ta, CL__AUG_ROTATE, 30, 0, 0) == 135.0);
    CHECK(cl__aug_magnitude(ta, CL__AUG_SOLARIZE, 1, 0, 0) == 246.5);
    CHECK(cl__aug_magnitude(ta, CL__AUG_SOLARIZE, 30, 0, 0) == 0.0);
    CHECK(cl__aug_magnitude(ra, CL__AUG_SHEAR_X, 9, 0, 0) ==
          0.09000000357627869);
    CHECK(cl__aug_magnitude(ra, CL__AUG_BRIGHTNESS, 9, 0, 0) ==
          0.26999998092651367);
    CHECK(cl__aug_magnitude(ra, CL__AUG_ROTATE, 9, 0, 0) == 9.0);
    CHECK(cl__aug_magnitude(ra, CL__AUG_TRANSLATE_X, 9, 224, 224) ==
          30.45317268371582);
    CHECK(cl__aug_magnitude(ra, CL__AUG_TRANSLATE_Y, 30, 224, 100) ==
          101.51057434082031);
    const int ta_post[31] = {8, 8, 8, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 5, 5, 5,
                             5, 5, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 2, 2, 2};
    const int ra_post[31] = {8, 8, 8, 8, 7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6,
                             6, 6, 6, 5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4};
    int bad = 0;
    for (int b = 0; b < 31; b++) {
        bad += cl__aug_magnitude(ta, CL__AUG_POSTERIZE, b, 0, 0) != ta_post[b];
        bad += cl__aug_magnitude(ra, CL__AUG_POSTERIZE, b, 0, 0) != ra_post[b];
    }
    CHECK(bad == 0);
}

CL_TEST(draws_stay_in_range)
{
    /* Largest |magnitude| per op: TrivialAugmentWide's wide ranges, and
     * RandAugment's bin 9 on a 224x160 image. */
    const double ta_max[CL__AUG_OP_COUNT] = {
        0, 0.99, 0.99, 32, 32, 135, 0.99, 0.99, 0.99, 0.99, 8, 255, 0, 0};
    int seen[CL__AUG_OP_COUNT] = {0}, neg = 0, bad = 0;
    cl_rng r;
    cl_rng_init(&r, 5, 6);
    for (int t = 0; t < 5000; t++) {
        int ops[CL__AUG_MAX_OPS];
        double m[CL__AUG_MAX_OPS];
        REQUIRE(cl__aug_draw(CL_AUTO_AUGMENT_TA_WIDE, 7, 3, 64, 64, &r, ops,
                             m) == 1);
        seen[ops[0]]++;
        neg += m[0] < 0;
        bad += fabs(m[0]) > ta_max[ops[0]] + 1e-6;
        bad += ops[0] == CL__AUG_POSTERIZE && (m[0] < 2 || m[0] > 8);
        bad += ops[0] >= CL__AUG_POSTERIZE && m[0] < 0; /* unsigned */
    }
    CHECK(bad == 0);
    for (int op = 0; op < CL__AUG_OP_COUNT; op++)
        CHECK(seen[op] > 250 && seen[op] < 470); /* ~357 each */
    CHECK(neg > 1200 && neg < 2000); /* half of the 9/14 signed draws */
    for (int t = 0; t < 2000; t++) {
        int ops[CL__AUG_MAX_OPS];
        double m[CL__AUG_MAX_OPS];
        REQUIRE(cl__aug_draw(CL_AUTO_AUGMENT_RANDAUGMENT, 2, 9, 224, 160, &r,
                             ops, m) == 2);
        for (int i = 0; i < 2; i++) {
            double want = cl__aug_magnitude(CL_AUTO_AUGMENT_RANDAUGMENT, ops[i],
                                            9, 224, 160);
            bad += fabs(m[i]) != want;
        }
    }
    CHECK(bad == 0);
    CHECK(cl__aug_magnitude(CL_AUTO_AUGMENT_RANDAUGMENT, CL__AUG_TRANSLATE_X, 9,
                            224, 160) < 22);
}

static cl_transform_opts aug_opts(int c, int side, int policy)
{
    cl_transform_opts o =
        cl_transform_opts_small_eval(c, side, side, NULL, NULL);
    o.normalize = 0;
    o.auto_augment = policy;
    return o;
}

CL_TEST(pipeline_deterministic_and_exact)
{
    enum { S = 20 };
    cl_image img = {0};
    REQUIRE_OK(cl_image_reserve(&img, S, S, 3));
    pattern(img.data, S, S, 3, 1);
    for (int policy = 1; policy <= 2; policy++) {
        cl_transform_opts o = aug_opts(3, S, policy);
        cl_transforms *tf = NULL;
        REQUIRE_OK(cl_transforms_create(&tf, &o));
        CHECK(cl_transforms_is_random(tf));
        CHECK(cl_transforms_opts(tf)->ra_num_ops ==
              (policy == 2 ? 2 : 0)); /* RandAugment's defaults filled in */
        static float a[3 * S * S], b[3 * S * S];
        int differ = 0;
        for (int t = 0; t < 16; t++) {
            cl_rng r1, r2;
            cl_rng_init(&r1, 42, (uint64_t)t);
            r2 = r1;
            CHECK_OK(cl_transforms_apply(tf, &img, &r1, NULL, a));
            /* The same stream gives the same image... */
            cl_rng r3;
            cl_rng_init(&r3, 42, (uint64_t)t);
            CHECK_OK(cl_transforms_apply(tf, &img, &r3, NULL, b));
            CHECK(memcmp(a, b, sizeof a) == 0);
            /* ...which is the ops on the bytes, exactly (no crop and no
             * flip draw before them on an image of the output's size). */
            uint8_t u[3 * S * S], tmp[3 * S * S];
            memcpy(u, img.data, sizeof u);
            cl__aug_apply(policy, o.ra_num_ops ? o.ra_num_ops : 2,
                          o.ra_magnitude ? o.ra_magnitude : 9, u, tmp, S, S, 3,
                          &r2);
            int bad = 0;
            for (int k = 0; k < 3; k++)
                for (int i = 0; i < S * S; i++)
                    bad += a[k * S * S + i] != u[i * 3 + k] / 255.0f;
            CHECK(bad == 0);
            differ += memcmp(u, img.data, sizeof u) != 0;
        }
        CHECK(differ >= 8);
        cl_transforms_destroy(tf);
    }
    /* After a RandomResizedCrop (bicubic) and flip, on RGB and on gray
     * repeated to 3 channels: the scratch holds the bytes, and the values
     * stay in [0, 1] on 8-bit steps. */
    for (int c = 1; c <= 3; c += 2) {
        cl_image big = {0};
        REQUIRE_OK(cl_image_reserve(&big, 70, 90, c));
        pattern(big.data, 70, 90, c, 9);
        cl_transform_opts o = cl_transform_opts_imagenet_train(48);
        o.normalize = 0;
        o.interpolation = CL_INTERP_BICUBIC;
        o.auto_augment = CL_AUTO_AUGMENT_RANDAUGMENT;
        o.ra_num_ops = 4;
        o.ra_magnitude = 30;
        cl_transforms *tf = NULL;
        REQUIRE_OK(cl_transforms_create(&tf, &o));
        cl_tf_scratch scr = {NULL, 0};
        static float x[3 * 48 * 48];
        int bad = 0;
        for (int t = 0; t < 20; t++) {
            cl_rng r;
            cl_rng_init(&r, 8, (uint64_t)t);
            REQUIRE_OK(cl_transforms_apply(tf, &big, &r, &scr, x));
            for (int i = 0; i < 3 * 48 * 48; i++) {
                float v = x[i] * 255.0f;
                bad += !(v >= 0 && v <= 255) || fabsf(v - roundf(v)) > 1e-3f;
            }
        }
        CHECK(bad == 0);
        cl_transforms_scratch_free(&scr);
        cl_transforms_destroy(tf);
        cl_image_free(&big);
    }
    /* Out-of-range options are refused naming the field. */
    cl_transform_opts o = aug_opts(3, S, 3);
    cl_transforms *tf = NULL;
    CHECK_ERR(cl_transforms_create(&tf, &o), CL_ERR_CONFIG, "auto_augment");
    o = aug_opts(3, S, 2);
    o.ra_magnitude = 31;
    CHECK_ERR(cl_transforms_create(&tf, &o), CL_ERR_CONFIG, "ra_magnitude");
    o = aug_opts(3, S, 0);
    o.interpolation = 2;
    CHECK_ERR(cl_transforms_create(&tf, &o), CL_ERR_CONFIG, "interpolation");
    cl_image_free(&img);
}

CL_TEST(config_keys)
{
    cl_config c;
    cl_config_defaults(&c);
    CHECK(c.auto_augment == CL_CFG_AUTO_AUGMENT_NONE);
    CHECK(c.interpolation == CL_CFG_INTERP_BILINEAR);
    CHECK(c.ra_num_ops == 2 && c.ra_magnitude == 9);
    CHECK_ERR(cl_config_set(&c, "auto_augment", "trivialaugment"),
              CL_ERR_CONFIG,
              "key 'auto_augment' expects one of none, ta_wide, randaugment");
    CHECK_ERR(cl_config_set(&c, "interpolation", "nearest"), CL_ERR_CONFIG,
              "key 'interpolation' expects one of bilinear, bicubic");
    CHECK_ERR(cl_config_set(&c, "ra_magnitude", "31"), CL_ERR_CONFIG,
              "key 'ra_magnitude'");
    CHECK_ERR(cl_config_set(&c, "ra_num_ops", "0"), CL_ERR_CONFIG,
              "key 'ra_num_ops'");
    const char *y = "auto_augment: randaugment\nra_num_ops: 3\n"
                    "ra_magnitude: 12\ninterpolation: bicubic\n";
    REQUIRE_OK(cl_config_load_yaml_text(&c, y, strlen(y), "t.yaml"));
    cl_transform_opts tr, ev;
    REQUIRE_OK(cl_recipe_transforms(&c, 0, 0, 3, 64, 1, &tr));
    REQUIRE_OK(cl_recipe_transforms(&c, 0, 0, 3, 64, 0, &ev));
    CHECK(tr.auto_augment == CL_AUTO_AUGMENT_RANDAUGMENT);
    CHECK(tr.ra_num_ops == 3 && tr.ra_magnitude == 12);
    CHECK(tr.interpolation == CL_INTERP_BICUBIC);
    CHECK(ev.auto_augment == CL_AUTO_AUGMENT_NONE); /* training only */
    CHECK(ev.interpolation == CL_INTERP_BICUBIC);
    cl_config_defaults(&c);
    REQUIRE_OK(cl_config_set(&c, "auto_augment", "ta_wide"));
    REQUIRE_OK(cl_recipe_transforms(&c, 0, 0, 3, 64, 1, &tr));
    CHECK(tr.auto_augment == CL_AUTO_AUGMENT_TA_WIDE);
    CHECK(tr.interpolation == CL_INTERP_BILINEAR);
}

/* random_crop_padding is kept when the images are resized: Resize(side)
 * then RandomCrop(side, padding), as torchvision composes them, for a
 * dataset of one size (28 -> 36) and for folders (shorter side to 36);
 * at the native size no resize, and evaluation resizes without a crop. */
CL_TEST(recipe_random_crop_after_resize)
{
    cl_config c;
    cl_config_defaults(&c);
    REQUIRE_OK(cl_config_set(&c, "random_crop_padding", "4"));
    cl_transform_opts o;
    REQUIRE_OK(cl_recipe_transforms(&c, 28, 28, 1, 36, 1, &o));
    CHECK(o.random_crop && o.random_crop_pad == 4);
    CHECK(o.resize_h == 36 && o.resize_w == 36 && o.resize == 0);
    CHECK(!o.center_crop);
    REQUIRE_OK(cl_recipe_transforms(&c, 0, 0, 3, 36, 1, &o));
    CHECK(o.random_crop && o.resize == 36 && !o.center_crop);
    REQUIRE_OK(cl_recipe_transforms(&c, 36, 36, 1, 36, 1, &o));
    CHECK(o.random_crop && o.resize == 0 && o.resize_h == 0);
    REQUIRE_OK(cl_recipe_transforms(&c, 28, 28, 1, 36, 0, &o));
    CHECK(!o.random_crop && o.resize_h == 36 && o.resize_w == 36);
    /* A 28x28 image comes out 36x36, its padding zero before the
     * normalisation: somewhere -mean/std over a few crops. */
    cl_transforms *tf = NULL;
    REQUIRE_OK(cl_recipe_transforms(&c, 28, 28, 1, 36, 1, &o));
    o.hflip_prob = 0;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    cl_image img = {0};
    REQUIRE_OK(cl_image_reserve(&img, 28, 28, 1));
    memset(img.data, 200, 28 * 28);
    float out[36 * 36];
    const float zero = o.normalize ? -o.mean[0] / o.std[0] : 0.0f;
    int padded = 0;
    for (int t = 0; t < 8; t++) {
        cl_rng r;
        cl_rng_init(&r, 3, (uint64_t)t);
        REQUIRE_OK(cl_transforms_apply(tf, &img, &r, NULL, out));
        for (int i = 0; i < 36 * 36; i++)
            padded += fabsf(out[i] - zero) < 1e-5f;
    }
    CHECK(padded > 0);
    cl_image_free(&img);
    cl_transforms_destroy(tf);
}

/* ------------------------------------------------- live parity (python) */

static int have_python(const char *modules)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, PY " -c 'import %s' >/dev/null 2>&1", modules);
    return cl_test_run(cmd) == 0;
}

static int write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t put = fwrite(p, 1, n, f);
    return fclose(f) == 0 && put == n ? 0 : -1;
}

static uint8_t *read_bytes(const char *path, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *v = malloc(n + 1);
    size_t got = v ? fread(v, 1, n + 1, f) : 0;
    fclose(f);
    if (got != n) {
        free(v);
        return NULL;
    }
    return v;
}

/* Each op at several signed magnitudes of both policies on an image of
 * (h, w, c), against torchvision's _apply_op on the uint8 tensor.  The
 * photometric ops must agree exactly; the geometric ones agree exactly on
 * x86-64 without FMA contraction, and are allowed 0.5% of values off where
 * a sample point sits on a rounding tie and torch sums in another order. */
static void parity(int h, int w, int c, uint32_t seed)
{
    enum { NM = 8 };
    const int bins[NM / 2] = {0, 7, 19, 30};
    size_t len = (size_t)h * w * c;
    uint8_t *img = malloc(len), *tmp = malloc(len);
    REQUIRE(img && tmp);
    pattern(img, h, w, c, seed);
    char spec[8192];
    size_t at = 0;
    int n = 0;
    for (int op = 0; op < CL__AUG_OP_COUNT; op++)
        for (int k = 0; k < NM; k++) {
            int policy =
                k % 2 ? CL_AUTO_AUGMENT_RANDAUGMENT : CL_AUTO_AUGMENT_TA_WIDE;
            double m = cl__aug_magnitude(policy, op, bins[k / 2], h, w);
            if (op >= CL__AUG_SHEAR_X && op <= CL__AUG_SHARPNESS && k >= 4)
                m = -m;
            at += (size_t)snprintf(spec + at, sizeof spec - at, "%s %.17g\n",
                                   cl__aug_op_name(op), m);
            n++;
        }
    const char *in = cl_test_path("aug_in.u8"), *sp = cl_test_path("aug.txt");
    const char *out = cl_test_path("aug_out.u8");
    REQUIRE(write_bytes(in, img, len) == 0);
    REQUIRE(write_bytes(sp, spec, at) == 0);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             PY " -c \"import numpy as np, torch\n"
                "from torchvision.transforms import autoaugment as A, "
                "InterpolationMode as I\n"
                "x = torch.from_numpy(np.fromfile('%s', np.uint8).reshape(%d, "
                "%d, %d)).permute(2, 0, 1).contiguous()\n"
                "o = open('%s', 'wb')\n"
                "for line in open('%s'):\n"
                "    name, m = line.split()\n"
                "    y = A._apply_op(x, name, float(m), I.NEAREST, None)\n"
                "    o.write(y.permute(1, 2, 0).contiguous().numpy()"
                ".tobytes())\n\"",
             in, h, w, c, out, sp);
    REQUIRE(cl_test_run(cmd) == 0);
    uint8_t *ref = read_bytes(out, len * (size_t)n);
    REQUIRE(ref);
    const char *p = spec;
    for (int i = 0; i < n; i++) {
        char name[32];
        double m;
        int used = 0;
        REQUIRE(sscanf(p, "%31s %lf%n", name, &m, &used) == 2);
        p += used;
        int op = 0;
        while (op < CL__AUG_OP_COUNT && strcmp(cl__aug_op_name(op), name))
            op++;
        uint8_t *mine = malloc(len);
        REQUIRE(mine);
        memcpy(mine, img, len);
        cl__aug_apply_op(mine, tmp, h, w, c, op, m);
        size_t diff = 0;
        int maxd = 0;
        for (size_t j = 0; j < len; j++) {
            int d = abs((int)mine[j] - (int)ref[(size_t)i * len + j]);
            diff += d != 0;
            maxd = d > maxd ? d : maxd;
        }
        int geo = op >= CL__AUG_SHEAR_X && op <= CL__AUG_ROTATE;
        int ok = geo ? diff * 200 <= len : diff == 0;
        if (!ok)
            cl_test_fail(__FILE__, __LINE__,
                         "%s(%g) on %dx%dx%d: %zu of %zu values differ from "
                         "torchvision (max %d)",
                         name, m, h, w, c, diff, len, maxd);
        free(mine);
    }
    free(ref);
    free(img);
    free(tmp);
}

CL_TEST(ops_match_torchvision)
{
    if (!have_python("numpy, torch, torchvision")) {
        cl_test_skip("python3 with numpy, torch and torchvision is missing");
        return;
    }
    parity(37, 29, 3, 1);
    parity(24, 32, 3, 2);
    parity(23, 31, 1, 3);
}

/* classic's resize against PIL's Image.resize for one filter: u8 output of
 * PIL (rounded after each pass) vs classic's float, within 1.5 levels. */
static void resize_vs_pil(int h, int w, int c, int oh, int ow, int interp)
{
    size_t len = (size_t)h * w * c, olen = (size_t)oh * ow * c;
    cl_image img = {0};
    REQUIRE_OK(cl_image_reserve(&img, h, w, c));
    pattern(img.data, h, w, c, (uint32_t)(h * 31 + ow));
    const char *in = cl_test_path("rs_in.u8"), *out = cl_test_path("rs_out.u8");
    REQUIRE(write_bytes(in, img.data, len) == 0);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             PY " -c \"import numpy as np; from PIL import Image\n"
                "a = np.fromfile('%s', np.uint8).reshape(%d, %d, %d)\n"
                "a = a[:, :, 0] if a.shape[2] == 1 else a\n"
                "Image.fromarray(a).resize((%d, %d), %s).save('%s.png')\n"
                "np.asarray(Image.open('%s.png')).tofile('%s')\"",
             in, h, w, c, ow, oh,
             interp == CL_INTERP_BICUBIC ? "Image.BICUBIC" : "Image.BILINEAR",
             out, out, out);
    REQUIRE(cl_test_run(cmd) == 0);
    uint8_t *ref = read_bytes(out, olen);
    REQUIRE(ref);
    cl_transform_opts o = cl_transform_opts_small_eval(c, oh, ow, NULL, NULL);
    o.normalize = 0;
    o.resize_h = oh;
    o.resize_w = ow;
    o.interpolation = interp;
    cl_transforms *tf = NULL;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    float *mine = malloc(olen * sizeof(float));
    REQUIRE(mine);
    REQUIRE_OK(cl_transforms_apply(tf, &img, NULL, NULL, mine));
    double maxd = 0;
    for (int k = 0; k < c; k++)
        for (size_t i = 0; i < (size_t)oh * ow; i++) {
            double d =
                fabs(mine[(size_t)k * oh * ow + i] * 255.0 - ref[i * c + k]);
            maxd = d > maxd ? d : maxd;
        }
    if (!(maxd <= 1.5))
        cl_test_fail(__FILE__, __LINE__,
                     "%s %dx%d -> %dx%d (c %d): max difference %.3f levels "
                     "from PIL",
                     interp ? "bicubic" : "bilinear", h, w, oh, ow, c, maxd);
    free(mine);
    free(ref);
    cl_transforms_destroy(tf);
    cl_image_free(&img);
}

/* A stored golden, so that bicubic is checked where PIL is missing: a 6x5
 * gray image through PIL 9.4's Image.resize(..., BICUBIC) to 3x4 (down)
 * and 7x9 (up). */
CL_TEST(bicubic_golden)
{
    static const uint8_t src[30] = {
        12, 200, 30,  255, 0,   90,  91,  92, 93,  94,  255, 0,  255, 0,   255,
        10, 60,  110, 160, 210, 128, 128, 40, 128, 128, 0,   20, 240, 250, 5};
    static const uint8_t down[12] = {87, 115, 100, 120, 116, 135,
                                     74, 96,  171, 49,  160, 116};
    static const uint8_t up[63] = {
        0,   130, 171, 26,  222, 162, 0,  33,  110, 133, 50, 160, 128,
        35,  118, 89,  82,  117, 80,  89, 119, 251, 97,  54, 244, 49,
        89,  239, 134, 59,  58,  197, 99, 143, 249, 9,   45, 79,  91,
        145, 184, 202, 118, 129, 102, 35, 101, 141, 145, 67, 69,  90,
        142, 181, 136, 55,  0,   0,   72, 253, 255, 144, 0};
    cl_image img = {0};
    REQUIRE_OK(cl_image_reserve(&img, 6, 5, 1));
    memcpy(img.data, src, sizeof src);
    for (int t = 0; t < 2; t++) {
        int oh = t ? 9 : 4, ow = t ? 7 : 3;
        const uint8_t *want = t ? up : down;
        cl_transform_opts o =
            cl_transform_opts_small_eval(1, oh, ow, NULL, NULL);
        o.normalize = 0;
        o.resize_h = oh;
        o.resize_w = ow;
        o.interpolation = CL_INTERP_BICUBIC;
        cl_transforms *tf = NULL;
        REQUIRE_OK(cl_transforms_create(&tf, &o));
        float out[63];
        REQUIRE_OK(cl_transforms_apply(tf, &img, NULL, NULL, out));
        double maxd = 0;
        for (int i = 0; i < oh * ow; i++)
            maxd = fmax(maxd, fabs(out[i] * 255.0 - want[i]));
        CHECK(maxd <= 1.5);
        cl_transforms_destroy(tf);
    }
    cl_image_free(&img);
}

CL_TEST(bicubic_matches_pil)
{
    if (!have_python("numpy, PIL")) {
        cl_test_skip("python3 with numpy and PIL is missing");
        return;
    }
    /* Down (antialiased), up, and mixed; RGB and gray; bilinear too, to
     * show that both filters follow the same (PIL's) convention. */
    for (int f = CL_INTERP_BICUBIC; f >= CL_INTERP_BILINEAR; f--) {
        resize_vs_pil(48, 40, 3, 17, 23, f);
        resize_vs_pil(12, 10, 3, 31, 27, f);
        resize_vs_pil(30, 30, 1, 11, 45, f);
    }
    /* Bicubic is not bilinear: a hard edge rings (a = -0.5). */
    cl_image img = {0};
    REQUIRE_OK(cl_image_reserve(&img, 8, 8, 1));
    for (int i = 0; i < 64; i++)
        img.data[i] = (i % 8) < 4 ? 40 : 200;
    cl_transform_opts o = cl_transform_opts_small_eval(1, 16, 16, NULL, NULL);
    o.normalize = 0;
    o.resize_h = o.resize_w = 16;
    float a[256], b[256];
    cl_transforms *tf = NULL;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    REQUIRE_OK(cl_transforms_apply(tf, &img, NULL, NULL, a));
    cl_transforms_destroy(tf);
    o.interpolation = CL_INTERP_BICUBIC;
    REQUIRE_OK(cl_transforms_create(&tf, &o));
    REQUIRE_OK(cl_transforms_apply(tf, &img, NULL, NULL, b));
    cl_transforms_destroy(tf);
    CHECK(a[5] * 255 > 39.5f && a[5] * 255 < 40.5f);
    CHECK(b[5] * 255 < 39.5f); /* the undershoot before the edge */
    cl_image_free(&img);
}
