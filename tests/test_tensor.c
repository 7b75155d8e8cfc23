/* Tensors: shapes, views, limits and bf16 rounding.
 * ctest-labels: unit */
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "tensor/tensor.h"

static float f_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

CL_TEST(bf16_round_to_nearest_even)
{
    /* Exactly representable values survive. */
    CHECK(cl_f32_from_bf16(cl_bf16_from_f32(1.0f)) == 1.0f);
    CHECK(cl_f32_from_bf16(cl_bf16_from_f32(-2.5f)) == -2.5f);
    /* 1 + 2^-8 is the midpoint between 1 and 1 + 2^-7: ties to even (1). */
    CHECK(cl_bf16_from_f32(f_of_bits(0x3f808000u)) == 0x3f80);
    /* 1 + 3*2^-8 is the midpoint above an odd mantissa: rounds up. */
    CHECK(cl_bf16_from_f32(f_of_bits(0x3f818000u)) == 0x3f82);
    /* Just above the midpoint rounds up, just below rounds down. */
    CHECK(cl_bf16_from_f32(f_of_bits(0x3f808001u)) == 0x3f81);
    CHECK(cl_bf16_from_f32(f_of_bits(0x3f807fffu)) == 0x3f80);
    /* Overflow to infinity, NaN stays NaN, signs kept. */
    CHECK(cl_bf16_from_f32(f_of_bits(0x7f7fffffu)) == 0x7f80);
    uint16_t nan = cl_bf16_from_f32(f_of_bits(0xffc00001u));
    CHECK((nan & 0x7f80) == 0x7f80 && (nan & 0x007f) != 0 && (nan & 0x8000));
    CHECK(cl_bf16_from_f32(-0.0f) == 0x8000);
}

CL_TEST(bf16_relative_error_bound)
{
    float worst = 0;
    for (int i = 1; i < 100000; i++) {
        float x = (float)i * 0.0137f - 600.0f;
        float y = cl_f32_from_bf16(cl_bf16_from_f32(x));
        float rel = fabsf(y - x) / fabsf(x);
        if (rel > worst)
            worst = rel;
    }
    /* Half an ulp of an 8-bit significand. */
    CHECK(worst <= 1.0f / 256.0f);
    CHECK(worst > 1.0f / 1024.0f);
}

CL_TEST(tensor_convert_roundtrip)
{
    cl_tensor a, b, c;
    cl_shape s = cl_shape_4d(2, 3, 4, 5);
    REQUIRE_OK(cl_tensor_init(&a, s, CL_F32));
    REQUIRE_OK(cl_tensor_init(&b, s, CL_BF16));
    REQUIRE_OK(cl_tensor_init(&c, s, CL_F32));
    float *pa = a.data;
    for (int i = 0; i < 120; i++)
        pa[i] = (float)i / 8.0f; /* multiples of 1/8 below 16: exact */
    CHECK_OK(cl_tensor_convert(&b, &a));
    CHECK_OK(cl_tensor_convert(&c, &b));
    CHECK(memcmp(a.data, c.data, 120 * 4) == 0);
    CHECK(cl_tensor_bytes(&b) == 240);
    cl_tensor d;
    REQUIRE_OK(cl_tensor_init(&d, cl_shape_4d(2, 3, 4, 4), CL_F32));
    CHECK_ERR(cl_tensor_convert(&d, &a), CL_ERR_SHAPE, "(2, 3, 4, 5)");
    cl_tensor_free(&a);
    cl_tensor_free(&b);
    cl_tensor_free(&c);
    cl_tensor_free(&d);
}

CL_TEST(shape_views)
{
    cl_tensor t, v, r;
    REQUIRE_OK(cl_tensor_init(&t, cl_shape_4d(4, 2, 3, 3), CL_F32));
    float *p = t.data;
    for (int i = 0; i < 72; i++)
        p[i] = (float)i;
    CHECK(cl_tensor_numel(&t) == 72);
    REQUIRE_OK(cl_tensor_slice0(&t, 1, 3, &v));
    CHECK(v.shape.d[0] == 2 && ((float *)v.data)[0] == 18.0f);
    CHECK(!v.owns);
    CHECK_ERR(cl_tensor_slice0(&t, 3, 5, &v), CL_ERR_ARG, "dimension 0");
    int64_t d2[2] = {8, 9};
    REQUIRE_OK(cl_tensor_reshape(&t, cl_shape_make(2, d2), &r));
    CHECK(r.data == t.data && r.shape.ndim == 2);
    int64_t bad[2] = {8, 8};
    CHECK_ERR(cl_tensor_reshape(&t, cl_shape_make(2, bad), &r), CL_ERR_SHAPE,
              "(8, 8)");
    char buf[64];
    CHECK(strcmp(cl_shape_str(&t.shape, buf, sizeof buf), "(4, 2, 3, 3)") == 0);
    cl_tensor_free(&t);
}

CL_TEST(tensor_size_overflow_refused)
{
    cl_tensor t;
    int64_t d[4] = {INT64_C(1) << 40, INT64_C(1) << 40, 1 << 20, 1};
    CHECK_ERR(cl_tensor_init(&t, cl_shape_make(4, d), CL_F32), CL_ERR_LIMIT,
              "overflows");
    int64_t neg[2] = {3, -1};
    CHECK_ERR(cl_tensor_init(&t, cl_shape_make(2, neg), CL_F32), CL_ERR_SHAPE,
              "negative");
}
