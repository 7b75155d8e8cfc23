/* io: strict JSON, atomic writes (disk full on a tiny tmpfs), safetensors
 * round trips, byte-exact fixtures and hostile headers, JSONL metrics.
 * ctest-labels: unit */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/mem.h"
#include "harness.h"
#include "io/atomic.h"
#include "io/json.h"
#include "io/jsonl.h"
#include "io/safetensors.h"
#include "io/strbuf.h"

/* ---- helpers ---- */

static int write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    int ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* Rewrites a file of the same size in place: truncating and rewriting
 * makes ext4 flush the old data each time (auto_da_alloc), which is slow. */
static int overwrite_bytes(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    if (fd < 0)
        return 0;
    int ok = pwrite(fd, p, n, 0) == (ssize_t)n;
    return close(fd) == 0 && ok;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

/* A safetensors file by hand: explicit header length, header text, then
 * `buf_len` bytes of data (0, 1, 2, ... mod 256). */
static int make_st(const char *path, uint64_t hlen, const char *hdr,
                   size_t buf_len)
{
    size_t n = strlen(hdr);
    unsigned char *b = malloc(8 + n + buf_len + 1);
    if (!b)
        return 0;
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)(hlen >> (8 * k));
    memcpy(b + 8, hdr, n);
    for (size_t i = 0; i < buf_len; i++)
        b[8 + n + i] = (unsigned char)i;
    int ok = write_bytes(path, b, 8 + n + buf_len);
    free(b);
    return ok;
}

static int make_st_auto(const char *path, const char *hdr, size_t buf_len)
{
    return make_st(path, strlen(hdr), hdr, buf_len);
}

/* ---- JSON ---- */

CL_TEST(json_values)
{
    const char *t =
        " {\"a\": [1, -2.5e3, 0, true, false, null], "
        "\"s\": \"x\\\"\\\\\\/\\b\\f\\n\\r\\tq\\u00e9\\ud83d\\ude00\","
        "\"big\": 123456789012345678901, \"neg\": -9007199254740993,"
        " \"o\": {}, \"e\": []} ";
    cl_json_doc *d;
    REQUIRE_OK(cl_json_parse(&d, t, strlen(t), NULL, "t"));
    const cl_json *r = cl_json_root(d);
    CHECK(r->type == CL_JSON_OBJ && r->count == 6);
    const cl_json *a = cl_json_get(r, "a");
    REQUIRE(a && a->type == CL_JSON_ARR && a->count == 6);
    const cl_json *x = a->child;
    CHECK(x->type == CL_JSON_NUM && x->is_int && x->i == 1);
    x = x->next;
    CHECK(x->type == CL_JSON_NUM && !x->is_int && x->num == -2500.0);
    x = x->next;
    CHECK(x->is_int && x->i == 0);
    x = x->next;
    CHECK(x->type == CL_JSON_BOOL && x->boolean == 1);
    x = x->next;
    CHECK(x->type == CL_JSON_BOOL && x->boolean == 0);
    x = x->next;
    CHECK(x->type == CL_JSON_NULL && x->next == NULL);
    const cl_json *s = cl_json_get(r, "s");
    REQUIRE(s && s->type == CL_JSON_STR);
    const char want[] = "x\"\\/\b\f\n\r\tq\xc3\xa9\xf0\x9f\x98\x80";
    CHECK(s->len == sizeof want - 1 && memcmp(s->str, want, s->len) == 0);
    const cl_json *big = cl_json_get(r, "big");
    CHECK(big && !big->is_int && big->num > 1.2e20);
    const cl_json *neg = cl_json_get(r, "neg");
    CHECK(neg && neg->is_int && neg->i == -9007199254740993LL);
    CHECK(cl_json_get(r, "o")->count == 0);
    CHECK(cl_json_get(r, "e")->type == CL_JSON_ARR);
    CHECK(cl_json_get(r, "missing") == NULL);
    cl_json_free(d);

    /* "\u0000" keeps its length although strlen stops early. */
    REQUIRE_OK(cl_json_parse(&d, "\"a\\u0000b\"", 10, NULL, "t"));
    CHECK(cl_json_root(d)->len == 3 && strlen(cl_json_root(d)->str) == 1);
    cl_json_free(d);
}

CL_TEST(json_rejects_malformed)
{
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"", "unexpected end of input"},
        {"[1,]", "trailing comma"},
        {"{\"a\":1,}", "trailing comma"},
        {"[01]", "leading zero"},
        {"[1.]", "digit expected after '.'"},
        {"[1e]", "digit expected in exponent"},
        {"[-]", "invalid number"},
        {"[+1]", "unexpected character"},
        {"\"abc", "unterminated string"},
        {"\"a\tb\"", "control character"},
        {"\"\\x\"", "invalid escape"},
        {"\"\\u12\"", "4 hex digits"},
        {"\"\\udc00\"", "lone low surrogate"},
        {"\"\\ud800x\"", "without its low half"},
        {"\"\\ud800\\u0041\"", "without its low half"},
        {"\"\xc3\"", "invalid UTF-8"},
        {"\"\xc0\xaf\"", "invalid UTF-8"},
        {"\"\xed\xa0\x80\"", "invalid UTF-8"},
        {"{\"a\" 1}", "expected ':'"},
        {"{1:2}", "expected a string key"},
        {"[1 2]", "expected ',' or ']'"},
        {"{\"a\":1 \"b\":2}", "expected ',' or '}'"},
        {"[1", "unterminated array"},
        {"tru", "invalid literal"},
        {"nul", "invalid literal"},
        {"1 2", "unexpected text after the value"},
        {"{} x", "unexpected text after the value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cl_json_doc *d = (cl_json_doc *)1;
        CHECK_ERR(cl_json_parse(&d, bad[i].text, strlen(bad[i].text), NULL,
                                "bad.json"),
                  CL_ERR_FORMAT, bad[i].msg);
        CHECK(d == NULL);
        CHECK(strstr(cl_last_error(), "bad.json: JSON at byte ") != NULL);
    }
    /* The byte offset points at the fault. */
    cl_json_doc *d;
    CHECK_ERR(cl_json_parse(&d, "[1,2,x]", 7, NULL, "o"), CL_ERR_FORMAT,
              "at byte 5:");
}

CL_TEST(json_limits)
{
    /* 10000 levels of nesting stop at the depth limit, not the stack. */
    size_t n = 20000;
    char *t = malloc(n + 1);
    REQUIRE(t);
    memset(t, '[', n / 2);
    memset(t + n / 2, ']', n / 2);
    t[n] = '\0';
    cl_json_doc *d;
    CHECK_ERR(cl_json_parse(&d, t, n, NULL, "deep"), CL_ERR_FORMAT,
              "nesting deeper than 64 levels");
    cl_json_limits lim = {4, 0};
    CHECK_ERR(cl_json_parse(&d, "[[[[[1]]]]]", 11, &lim, "deep"), CL_ERR_FORMAT,
              "nesting deeper than 4 levels");
    CHECK_OK(cl_json_parse(&d, "[[[[1]]]]", 9, &lim, "deep"));
    cl_json_free(d);
    free(t);
    cl_json_limits few = {0, 3};
    CHECK_ERR(cl_json_parse(&d, "[1,2,3,4]", 9, &few, "wide"), CL_ERR_FORMAT,
              "more than 3 values");
    CHECK_OK(cl_json_parse(&d, "[1,2]", 5, &few, "wide"));
    cl_json_free(d);
    /* A length shorter than the text is the end of input. */
    CHECK_ERR(cl_json_parse(&d, "[1,2]", 4, NULL, "cut"), CL_ERR_FORMAT,
              "unterminated array");
}

CL_TEST(json_writer_round_trip)
{
    cl_strbuf b;
    cl_strbuf_init(&b);
    const char raw[] = "tab\t nl\n quote\" bs\\ ctl\x01 \xc3\xa9";
    cl_strbuf_adds(&b, "[");
    cl_strbuf_add_json_str(&b, raw, sizeof raw - 1);
    const double nums[] = {0.1, -1e-300, 3.0, 1.0 / 3.0, 1e300, -0.0};
    for (size_t i = 0; i < 6; i++) {
        cl_strbuf_addc(&b, ',');
        cl_strbuf_add_json_num(&b, nums[i]);
    }
    cl_strbuf_adds(&b, ",");
    cl_strbuf_add_json_num(&b, NAN);
    cl_strbuf_adds(&b, ",");
    cl_strbuf_add_json_num(&b, -INFINITY);
    cl_strbuf_adds(&b, "]");
    REQUIRE(!b.failed);
    cl_json_doc *d;
    REQUIRE_OK(cl_json_parse(&d, b.data, b.len, NULL, "w"));
    const cl_json *x = cl_json_root(d)->child;
    CHECK(x->len == sizeof raw - 1 && memcmp(x->str, raw, x->len) == 0);
    for (size_t i = 0; i < 6; i++) {
        x = x->next;
        CHECK(x->type == CL_JSON_NUM && x->num == nums[i]);
    }
    CHECK(x->next->type == CL_JSON_NULL && x->next->next->type == CL_JSON_NULL);
    cl_json_free(d);
    cl_strbuf_free(&b);
}

/* ---- atomic writes ---- */

CL_TEST(atomic_replaces_and_leaves_no_temp)
{
    const char *dir = cl_test_path("adir");
    REQUIRE(mkdir(dir, 0755) == 0);
    char path[600];
    snprintf(path, sizeof path, "%s/out.bin", dir);
    REQUIRE_OK(cl_atomic_write_file(path, "old contents", 12));
    REQUIRE_OK(cl_atomic_write_file(path, "new", 3));
    size_t n;
    char *b = cl_test_read_file(path, &n);
    REQUIRE(b);
    CHECK(n == 3 && memcmp(b, "new", 3) == 0);
    free(b);
    CHECK(count_entries(dir) == 1);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644);

    /* An aborted write leaves the old file and no temp file. */
    cl_atomic_file f;
    REQUIRE_OK(cl_atomic_open(&f, path));
    CHECK_OK(cl_atomic_write(&f, "partial", 7));
    CHECK(count_entries(dir) == 2);
    cl_atomic_abort(&f);
    CHECK(count_entries(dir) == 1);
    b = cl_test_read_file(path, &n);
    REQUIRE(b);
    CHECK(n == 3 && memcmp(b, "new", 3) == 0);
    free(b);
    cl_atomic_abort(&f); /* twice is harmless */

    CHECK_ERR(cl_atomic_write_file(cl_test_path("no/such/dir/x"), "a", 1),
              CL_ERR_IO, "cannot create temp file");
}

/* A 64 KiB tmpfs: the write runs out of space part way.  Needs root (this
 * suite runs as root in CI); without the mount the test fails, it does not
 * pass silently. */
CL_TEST(atomic_disk_full_keeps_old_file)
{
    const char *dir = cl_test_path("small");
    REQUIRE(mkdir(dir, 0755) == 0);
    if (mount("tmpfs", dir, "tmpfs", 0, "size=64k") != 0) {
        cl_test_fail(__FILE__, __LINE__,
                     "cannot mount a 64k tmpfs on %s (%s): the disk-full "
                     "path is untested; run as root",
                     dir, strerror(errno));
        return;
    }
    char path[600];
    snprintf(path, sizeof path, "%s/x.safetensors", dir);
    float small[16];
    for (int i = 0; i < 16; i++)
        small[i] = (float)i;
    cl_st_writer *w;
    REQUIRE_OK(cl_st_writer_new(&w));
    int64_t d16[1] = {16};
    CHECK_OK(cl_st_writer_add(w, "w", CL_ST_F32, cl_shape_make(1, d16), small));
    CHECK_OK(cl_st_writer_save(w, path));
    cl_st_writer_free(w);
    size_t n_old;
    char *old = cl_test_read_file(path, &n_old);

    /* 200 KB cannot fit in 64 KiB (minus the old file). */
    size_t big_n = 50000;
    float *big = calloc(big_n, sizeof *big);
    REQUIRE(big && old);
    REQUIRE_OK(cl_st_writer_new(&w));
    int64_t dbig[1] = {(int64_t)big_n};
    CHECK_OK(cl_st_writer_add(w, "w", CL_ST_F32, cl_shape_make(1, dbig), big));
    CHECK_ERR(cl_st_writer_save(w, path), CL_ERR_IO,
              "x.safetensors: disk full while writing (");
    CHECK(strstr(cl_last_error(), " bytes written)") != NULL);
    cl_st_writer_free(w);

    size_t n_now;
    char *now = cl_test_read_file(path, &n_now);
    CHECK(now && n_now == n_old && memcmp(now, old, n_old) == 0);
    CHECK(count_entries(dir) == 1); /* the temp file is gone */
    cl_st_file *f;
    CHECK_OK(cl_st_open(&f, path));
    if (f) {
        float back[16];
        CHECK_OK(cl_st_read_f32(f, 0, back, 16));
        CHECK(back[15] == 15.0f);
        cl_st_close(f);
    }
    free(now);
    free(old);
    free(big);
    if (umount(dir) != 0)
        cl_test_fail(__FILE__, __LINE__, "umount %s: %s", dir, strerror(errno));
}

/* ---- safetensors ---- */

CL_TEST(st_round_trip)
{
    const char *path = cl_test_path("rt.safetensors");
    float a[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
    uint16_t h[4] = {0x3F80, 0xC000, 0x7F80, 0x0001}; /* 1, -2, inf, tiny */
    int64_t step = 123456789012345LL;
    int64_t d23[2] = {2, 3}, d4[1] = {4}, d03[2] = {0, 3};
    cl_st_writer *w;
    REQUIRE_OK(cl_st_writer_new(&w));
    CHECK_OK(
        cl_st_writer_add(w, "fc.weight", CL_ST_F32, cl_shape_make(2, d23), a));
    CHECK_OK(
        cl_st_writer_add(w, "h\"alf", CL_ST_BF16, cl_shape_make(1, d4), h));
    CHECK_OK(cl_st_writer_add(w, "bn1.num_batches_tracked", CL_ST_I64,
                              cl_shape_make(0, NULL), &step));
    CHECK_OK(
        cl_st_writer_add(w, "empty", CL_ST_F32, cl_shape_make(2, d03), NULL));
    CHECK_ERR(
        cl_st_writer_add(w, "fc.weight", CL_ST_F32, cl_shape_make(2, d23), a),
        CL_ERR_ARG, "'fc.weight' added twice");
    CHECK_ERR(cl_st_writer_add(w, "__metadata__", CL_ST_F32,
                               cl_shape_make(2, d23), a),
              CL_ERR_ARG, "cannot name a tensor");
    CHECK_OK(cl_st_writer_meta(w, "arch", "resnet50"));
    CHECK_OK(cl_st_writer_meta(w, "classes", "a\nb\t\"c\"\\"));
    CHECK_OK(cl_st_writer_meta(w, "arch", "resnet18")); /* replaces */
    REQUIRE_OK(cl_st_writer_save(w, path));
    cl_st_writer_free(w);

    size_t n;
    unsigned char *raw = (unsigned char *)cl_test_read_file(path, &n);
    REQUIRE(raw && n > 8);
    uint64_t hl = 0;
    for (int k = 7; k >= 0; k--)
        hl = hl << 8 | raw[k];
    CHECK(hl % 8 == 0);
    CHECK(raw[8] == '{');
    CHECK(n == 8 + hl + 24 + 8 + 8);
    free(raw);

    cl_st_file *f;
    REQUIRE_OK(cl_st_open(&f, path));
    REQUIRE(cl_st_count(f) == 4);
    CHECK(strcmp(cl_st_name(f, 0), "fc.weight") == 0);
    CHECK(strcmp(cl_st_name(f, 1), "h\"alf") == 0);
    CHECK(strcmp(cl_st_name(f, 3), "empty") == 0);
    CHECK(cl_st_find(f, "bn1.num_batches_tracked") == 2);
    CHECK(cl_st_find(f, "nope") == -1);
    cl_st_dtype dt;
    cl_shape sh;
    cl_st_info(f, 0, &dt, &sh);
    CHECK(dt == CL_ST_F32 && sh.ndim == 2 && sh.d[0] == 2 && sh.d[1] == 3);
    float back[6];
    CHECK_OK(cl_st_read_f32(f, 0, back, 6));
    CHECK(memcmp(back, a, sizeof a) == 0);
    CHECK_ERR(cl_st_read_f32(f, 0, back, 5), CL_ERR_SHAPE,
              "tensor 'fc.weight' has 6 elements, the caller expects 5");
    float hb[4];
    CHECK_OK(cl_st_read_f32(f, 1, hb, 4));
    CHECK(hb[0] == 1.0f && hb[1] == -2.0f && isinf(hb[2]) && hb[3] > 0.0f);
    cl_st_info(f, 2, &dt, &sh);
    CHECK(dt == CL_ST_I64 && sh.ndim == 0);
    int64_t s2 = 0;
    CHECK_OK(cl_st_read_i64(f, 2, &s2, 1));
    CHECK(s2 == step);
    CHECK_ERR(cl_st_read_f32(f, 2, back, 1), CL_ERR_FORMAT,
              "is I64, expected a floating-point dtype");
    CHECK_ERR(cl_st_read_i64(f, 0, &s2, 6), CL_ERR_FORMAT,
              "expected an integer dtype");
    size_t nb = 99;
    cl_st_data(f, 3, &nb);
    CHECK(nb == 0);
    CHECK_OK(cl_st_read_f32(f, 3, back, 0));
    CHECK(strcmp(cl_st_metadata(f, "arch"), "resnet18") == 0);
    CHECK(strcmp(cl_st_metadata(f, "classes"), "a\nb\t\"c\"\\") == 0);
    CHECK(cl_st_metadata(f, "epoch") == NULL);
    CHECK(cl_st_metadata_count(f) == 2);
    CHECK(strcmp(cl_st_metadata_key(f, 1), "classes") == 0);
    cl_st_close(f);
}

/* The writer's exact bytes for a known input, and the reader on a file laid
 * out by hand as other writers do it (fields in another order, whitespace,
 * F16 and F64 data, __metadata__ last). */
CL_TEST(st_byte_exact_fixtures)
{
    const char *path = cl_test_path("exact.safetensors");
    float v[2] = {1.0f, 2.0f};
    int64_t d2[1] = {2};
    cl_st_writer *w;
    REQUIRE_OK(cl_st_writer_new(&w));
    CHECK_OK(cl_st_writer_add(w, "a", CL_ST_F32, cl_shape_make(1, d2), v));
    REQUIRE_OK(cl_st_writer_save(w, path));
    cl_st_writer_free(w);
    const char hdr[] =
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  ";
    unsigned char want[8 + 56 + 8] = {56, 0, 0, 0, 0, 0, 0, 0};
    REQUIRE(sizeof hdr - 1 == 56);
    memcpy(want + 8, hdr, 56);
    memcpy(want + 64, "\x00\x00\x80\x3f\x00\x00\x00\x40", 8);
    size_t n;
    char *got = cl_test_read_file(path, &n);
    REQUIRE(got);
    CHECK(n == sizeof want && memcmp(got, want, n) == 0);
    free(got);

    /* f16: 1.0 = 0x3c00, -0.5 = 0xb800, 65504 = 0x7bff, 2^-24 = 0x0001;
     * f64: 0.1 and -3. */
    const char *p2 = cl_test_path("hand.safetensors");
    const char h2[] = "{ \"x\" : { \"data_offsets\" : [ 8 , 24 ], "
                      "\"shape\" : [ 2 ], \"dtype\" : \"F64\" } ,\n"
                      "\"y\":{\"shape\":[2,2],\"dtype\":\"F16\","
                      "\"data_offsets\":[0,8]},"
                      "\"__metadata__\":{\"format\":\"pt\"}}     ";
    unsigned char buf[24] = {0x00, 0x3c, 0x00, 0xb8, 0xff, 0x7b, 0x01, 0x00};
    double f64[2] = {0.1, -3.0};
    memcpy(buf + 8, f64, 16);
    FILE *fp = fopen(p2, "wb");
    REQUIRE(fp);
    uint64_t hl = sizeof h2 - 1;
    unsigned char l8[8];
    for (int k = 0; k < 8; k++)
        l8[k] = (unsigned char)(hl >> (8 * k));
    fwrite(l8, 1, 8, fp);
    fwrite(h2, 1, hl, fp);
    fwrite(buf, 1, 24, fp);
    fclose(fp);
    cl_st_file *f;
    REQUIRE_OK(cl_st_open(&f, p2));
    REQUIRE(cl_st_count(f) == 2);
    CHECK(strcmp(cl_st_name(f, 0), "x") == 0);
    float y[4], x[2];
    CHECK_OK(cl_st_read_f32(f, 1, y, 4));
    CHECK(y[0] == 1.0f && y[1] == -0.5f && y[2] == 65504.0f &&
          y[3] == 5.9604644775390625e-08f);
    CHECK_OK(cl_st_read_f32(f, 0, x, 2));
    CHECK(x[0] == 0.1f && x[1] == -3.0f);
    CHECK(strcmp(cl_st_metadata(f, "format"), "pt") == 0);
    cl_st_close(f);
}

CL_TEST(st_rejects_hostile_headers)
{
    static const struct {
        const char *hdr;
        size_t buf;
        cl_status st;
        const char *msg;
    } bad[] = {
        {"{\"a\":{\"dtype\":\"F32\"", 0, CL_ERR_FORMAT, "unterminated object"},
        {"[1,2]", 0, CL_ERR_FORMAT, "header does not start with '{'"},
        {"", 0, CL_ERR_FORMAT, "header does not start with '{'"},
        {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[10,2048],"
         "\"data_offsets\":[0,400]}}",
         400, CL_ERR_FORMAT,
         "tensor 'fc.weight': data_offsets [0, 400] hold 400 bytes, shape "
         "(10, 2048) F32 needs 81920"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[100],"
         "\"data_offsets\":[0,400]}}",
         8, CL_ERR_FORMAT,
         "tensor 'a': data_offsets [0, 400] exceed the 8-byte data buffer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
         "\"data_offsets\":[8,4]}}",
         8, CL_ERR_FORMAT, "end before they begin"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         12, CL_ERR_FORMAT,
         "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
         12, CL_ERR_FORMAT, "tensor 'b': data_offsets [8, 12] leave a hole"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 12,
         CL_ERR_FORMAT, "(8 trailing bytes)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
         CL_ERR_FORMAT, "tensor 'a': shape[0] is negative (-1)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,4]}}",
         4, CL_ERR_FORMAT, "shape[0] is not an integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
         "\"data_offsets\":[0,4]}}",
         4, CL_ERR_FORMAT, "overflows a byte count"},
        {"{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         CL_ERR_FORMAT, "tensor 'a': unknown dtype 'F33'"},
        {"{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         CL_ERR_FORMAT, "'dtype' must be a string, found a number"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, CL_ERR_FORMAT, "tensor 'a': the name appears twice"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, CL_ERR_FORMAT,
         "tensor 'a': missing 'data_offsets'"},
        {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, CL_ERR_FORMAT,
         "missing 'dtype'"},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, CL_ERR_FORMAT,
         "missing 'shape'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
         CL_ERR_FORMAT, "'data_offsets' must be an array [begin, end]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
         "\"data_offsets\":[0,18446744073709551616]}}",
         4, CL_ERR_FORMAT, "two non-negative integers"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
         "\"extra\":1}}",
         4, CL_ERR_FORMAT, "unknown or repeated field 'extra'"},
        {"{\"a\":[0,4]}", 4, CL_ERR_FORMAT,
         "tensor 'a': entry must be an object, found a array"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1],"
         "\"data_offsets\":[0,4]}}",
         4, CL_ERR_FORMAT, "6 dimensions, at most 5"},
        {"{\"__metadata__\":[1]}", 0, CL_ERR_FORMAT,
         "'__metadata__' must be an object of strings, found a array"},
        {"{\"__metadata__\":{\"epoch\":3}}", 0, CL_ERR_FORMAT,
         "__metadata__ 'epoch' must be a string, found a number"},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, CL_ERR_FORMAT,
         "'__metadata__' appears twice"},
        {"{\"__metadata__\":{\"k\":\"1\",\"j\":\"2\",\"k\":\"3\"}}", 0,
         CL_ERR_FORMAT, "__metadata__ key 'k' appears twice"},
        {"{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", 0, CL_ERR_FORMAT,
         "__metadata__ 'k' contains a NUL character"},
        {"{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[],"
         "\"data_offsets\":[0,1]}}",
         1, CL_ERR_FORMAT, "contains a NUL character"},
    };
    const char *path = cl_test_path("bad.safetensors");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        REQUIRE(make_st_auto(path, bad[i].hdr, bad[i].buf));
        cl_st_file *f = (cl_st_file *)1;
        CHECK_ERR(cl_st_open(&f, path), bad[i].st, bad[i].msg);
        CHECK(f == NULL);
        CHECK(strstr(cl_last_error(), "bad.safetensors: ") != NULL);
    }

    cl_st_file *f;
    /* Header length larger than the file. */
    REQUIRE(make_st(path, 1000, "{\"a\":1}", 0));
    CHECK_ERR(cl_st_open(&f, path), CL_ERR_FORMAT,
              "header length 1000 exceeds the 7 bytes that follow it");
    REQUIRE(make_st(path, (uint64_t)1 << 63, "{}", 0));
    CHECK_ERR(cl_st_open(&f, path), CL_ERR_FORMAT,
              "header length 9223372036854775808 exceeds the 2 bytes");
    REQUIRE(make_st(path, UINT64_MAX, "{}", 0));
    CHECK_ERR(cl_st_open(&f, path), CL_ERR_FORMAT,
              "header length 18446744073709551615 exceeds");
    /* Shorter than the length field. */
    REQUIRE(write_bytes(path, "\x02\x00\x00", 3));
    CHECK_ERR(cl_st_open(&f, path), CL_ERR_FORMAT,
              "file is 3 bytes, too short");
    CHECK_ERR(cl_st_open(&f, cl_test_path("absent.safetensors")), CL_ERR_IO,
              "absent.safetensors: cannot open");
    /* JSON nested 10000 deep inside the header. */
    size_t depth = 10000;
    char *deep = malloc(2 * depth + 16);
    REQUIRE(deep);
    strcpy(deep, "{\"a\":");
    memset(deep + 5, '[', depth);
    memset(deep + 5 + depth, ']', depth);
    strcpy(deep + 5 + 2 * depth, "}");
    REQUIRE(make_st_auto(path, deep, 0));
    free(deep);
    CHECK_ERR(cl_st_open(&f, path), CL_ERR_FORMAT, "nesting deeper than");
    /* A header over the format's 100 MB limit, in a sparse file. */
    REQUIRE(make_st(path, CL_ST_MAX_HEADER + 1, "{", 0));
    REQUIRE(truncate(path, (off_t)(CL_ST_MAX_HEADER + 100)) == 0);
    CHECK_ERR(cl_st_open(&f, path), CL_ERR_LIMIT,
              "header length 100000001 exceeds the format's limit");
    REQUIRE(unlink(path) == 0);
    /* Truncated data: a valid file cut short. */
    REQUIRE(make_st_auto(path,
                         "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],"
                         "\"data_offsets\":[0,16]}}",
                         10));
    CHECK_ERR(cl_st_open(&f, path), CL_ERR_FORMAT,
              "exceed the 10-byte data buffer");
    /* Each byte of a good file cut off in turn never crashes and always
     * fails cleanly. */
    const char *good = cl_test_path("good.safetensors");
    int64_t d3[1] = {3};
    float v3[3] = {1, 2, 3};
    cl_st_writer *w;
    REQUIRE_OK(cl_st_writer_new(&w));
    CHECK_OK(cl_st_writer_add(w, "v", CL_ST_F32, cl_shape_make(1, d3), v3));
    CHECK_OK(cl_st_writer_meta(w, "k", "v"));
    REQUIRE_OK(cl_st_writer_save(w, good));
    cl_st_writer_free(w);
    size_t n;
    char *all = cl_test_read_file(good, &n);
    REQUIRE(all);
    for (size_t cut = 0; cut < n; cut++) {
        REQUIRE(write_bytes(path, all, cut));
        cl_status s = cl_st_open(&f, path);
        CHECK(s == CL_ERR_FORMAT);
        if (s == CL_OK)
            cl_st_close(f);
    }
    free(all);
}

/* ---- JSONL metrics ---- */

static void write_record(cl_jsonl *j, int64_t step, double loss)
{
    cl_jsonl_begin(j);
    cl_jsonl_str(j, "event", "train");
    cl_jsonl_int(j, "step", step);
    cl_jsonl_num(j, "loss", loss);
    cl_jsonl_bool(j, "final", step == 3);
}

CL_TEST(jsonl_lines_parse_back)
{
    const char *path = cl_test_path("metrics.jsonl");
    cl_jsonl j;
    REQUIRE_OK(cl_jsonl_open(&j, path, 0));
    write_record(&j, 1, 2.302585092994046);
    CHECK_OK(cl_jsonl_end(&j));
    write_record(&j, 2, NAN);
    cl_jsonl_num(&j, "lr", INFINITY);
    cl_jsonl_str(&j, "note \"q\"", "tab\tnl\n\xc3\xa9");
    CHECK_OK(cl_jsonl_end(&j));
    CHECK_OK(cl_jsonl_close(&j));
    /* Resume appends; a fresh run truncates. */
    REQUIRE_OK(cl_jsonl_open(&j, path, 1));
    write_record(&j, 3, -0.5);
    cl_jsonl_int(&j, "min", INT64_MIN);
    CHECK_OK(cl_jsonl_end(&j));
    CHECK_OK(cl_jsonl_close(&j));
    CHECK_OK(cl_jsonl_close(&j)); /* twice is harmless */

    size_t n;
    char *text = cl_test_read_file(path, &n);
    REQUIRE(text);
    int lines = 0;
    char *p = text;
    while (*p) {
        char *nl = strchr(p, '\n');
        REQUIRE(nl);
        cl_json_doc *d;
        REQUIRE_OK(cl_json_parse(&d, p, (size_t)(nl - p), NULL, "line"));
        const cl_json *r = cl_json_root(d);
        CHECK(r->type == CL_JSON_OBJ);
        CHECK(strcmp(cl_json_get(r, "event")->str, "train") == 0);
        const cl_json *step = cl_json_get(r, "step");
        CHECK(step && step->is_int && step->i == lines + 1);
        const cl_json *loss = cl_json_get(r, "loss");
        const cl_json *fin = cl_json_get(r, "final");
        CHECK(fin && fin->type == CL_JSON_BOOL && fin->boolean == (lines == 2));
        if (lines == 0)
            CHECK(loss->type == CL_JSON_NUM && loss->num == 2.302585092994046);
        if (lines == 1) {
            CHECK(loss->type == CL_JSON_NULL);
            CHECK(cl_json_get(r, "lr")->type == CL_JSON_NULL);
            const cl_json *note = cl_json_get(r, "note \"q\"");
            CHECK(note && strcmp(note->str, "tab\tnl\n\xc3\xa9") == 0);
        }
        if (lines == 2) {
            CHECK(loss->num == -0.5);
            CHECK(cl_json_get(r, "min")->i == INT64_MIN);
        }
        cl_json_free(d);
        lines++;
        p = nl + 1;
    }
    CHECK(lines == 3);
    free(text);

    REQUIRE_OK(cl_jsonl_open(&j, path, 0));
    CHECK_OK(cl_jsonl_close(&j));
    text = cl_test_read_file(path, &n);
    CHECK(text && n == 0);
    free(text);
}

CL_TEST(jsonl_write_errors)
{
    cl_jsonl j;
    CHECK_ERR(cl_jsonl_open(&j, cl_test_path("no/dir/m.jsonl"), 1), CL_ERR_IO,
              "m.jsonl: cannot open for writing");
    /* /dev/full accepts the open and fails every write with ENOSPC. */
    REQUIRE_OK(cl_jsonl_open(&j, "/dev/full", 1));
    write_record(&j, 1, 1.0);
    CHECK_ERR(cl_jsonl_end(&j), CL_ERR_IO,
              "/dev/full: cannot append a metrics line: disk full");
    cl_jsonl_close(&j);
    cl_jsonl zero;
    memset(&zero, 0, sizeof zero);
    CHECK_OK(cl_jsonl_close(&zero));
}

/* Random byte edits of a valid file's header, with a fixed seed: every
 * result is a clean accept or a clean refusal (run under the sanitizer
 * build this is a small fuzzer). */
CL_TEST(st_mutated_headers_fail_cleanly)
{
    const char *good = cl_test_path("m.safetensors");
    int64_t d23[2] = {2, 3}, d4[1] = {4};
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t h[4] = {1, 2, 3, 4};
    cl_st_writer *w;
    REQUIRE_OK(cl_st_writer_new(&w));
    CHECK_OK(cl_st_writer_add(w, "a", CL_ST_F32, cl_shape_make(2, d23), a));
    CHECK_OK(cl_st_writer_add(w, "b", CL_ST_BF16, cl_shape_make(1, d4), h));
    CHECK_OK(cl_st_writer_meta(w, "arch", "resnet50"));
    REQUIRE_OK(cl_st_writer_save(w, good));
    cl_st_writer_free(w);
    size_t n;
    char *orig = cl_test_read_file(good, &n);
    REQUIRE(orig);
    const char *path = cl_test_path("mut.safetensors");
    static const char alphabet[] = "{}[],:\"\\0123456789-eE. abFUI_";
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int accepted = 0;
    for (int it = 0; it < 3000; it++) {
        char *b = malloc(n);
        REQUIRE(b);
        memcpy(b, orig, n);
        int edits = 1 + it % 3;
        for (int e = 0; e < edits; e++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            /* Mostly the JSON, sometimes the length field. */
            size_t at = (x >> 8) % 50 == 0 ? (x >> 16) % 8
                                           : 8 + (x >> 16) % (n - 8 - 32);
            b[at] = (x >> 40) % 4 == 0
                        ? (char)(x >> 48)
                        : alphabet[(x >> 48) % (sizeof alphabet - 1)];
        }
        REQUIRE(overwrite_bytes(path, b, n));
        free(b);
        cl_st_file *f = NULL;
        cl_status s = cl_st_open(&f, path);
        CHECK(s == CL_OK || s == CL_ERR_FORMAT || s == CL_ERR_LIMIT);
        CHECK((s == CL_OK) == (f != NULL));
        if (s != CL_OK)
            CHECK(strstr(cl_last_error(), "mut.safetensors: ") != NULL);
        if (f) {
            accepted++;
            /* Whatever was accepted is readable within bounds. */
            for (size_t i = 0; i < cl_st_count(f); i++) {
                size_t nb;
                const unsigned char *p = cl_st_data(f, i, &nb);
                unsigned sum = 0;
                for (size_t k = 0; k < nb; k++)
                    sum += p[k];
                (void)sum;
            }
            cl_st_close(f);
        }
    }
    free(orig);
    CHECK(accepted < 3000);
}

CL_TEST(json_mutations_fail_cleanly)
{
    const char *src =
        "{\"a\": [1, -2.5e3, true, null, {\"b\": \"\\u00e9\\n\"}],"
        " \"c\": {\"d\": [[], {}], \"e\": \"x\"}}";
    size_t n = strlen(src);
    char *b = malloc(n);
    REQUIRE(b);
    uint64_t x = 88172645463325252ull;
    for (int it = 0; it < 5000; it++) {
        memcpy(b, src, n);
        for (int e = 0; e < 1 + it % 4; e++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            b[(x >> 8) % n] = (char)(x >> 32);
        }
        size_t len = it % 7 == 0 ? (size_t)(x >> 20) % n : n;
        cl_json_doc *d = NULL;
        cl_status s = cl_json_parse(&d, b, len, NULL, "m");
        CHECK(s == CL_OK || s == CL_ERR_FORMAT);
        CHECK((s == CL_OK) == (d != NULL));
        cl_json_free(d);
    }
    free(b);
}

/* Many tensors and metadata keys open in (n log n) time: duplicates and
 * overlaps are found by sorting, not by comparing every pair. */
CL_TEST(st_large_header)
{
    const int n = 100000;
    cl_strbuf h;
    cl_strbuf_init(&h);
    cl_strbuf_adds(&h, "{\"__metadata__\":{");
    for (int i = 0; i < n; i++)
        cl_strbuf_addf(&h, "%s\"k%d\":\"v\"", i ? "," : "", i);
    cl_strbuf_adds(&h, "}");
    for (int i = 0; i < n; i++)
        cl_strbuf_addf(&h,
                       ",\"t%d\":{\"dtype\":\"U8\",\"shape\":[1],"
                       "\"data_offsets\":[%d,%d]}",
                       i, n - 1 - i, n - i);
    cl_strbuf_adds(&h, "}");
    REQUIRE(!h.failed);
    const char *path = cl_test_path("large.safetensors");
    REQUIRE(make_st_auto(path, h.data, (size_t)n));
    cl_st_file *f;
    REQUIRE_OK(cl_st_open(&f, path));
    CHECK(cl_st_count(f) == (size_t)n && cl_st_metadata_count(f) == (size_t)n);
    long i = cl_st_find(f, "t777");
    REQUIRE(i == 777);
    size_t nb;
    const unsigned char *p = cl_st_data(f, (size_t)i, &nb);
    CHECK(nb == 1 && p[0] == (unsigned char)(n - 1 - 777));
    CHECK(strcmp(cl_st_metadata(f, "k99999"), "v") == 0);
    cl_st_close(f);
    /* The same with one duplicate at the end. */
    h.len -= 1;
    cl_strbuf_adds(&h, ",\"t5\":{\"dtype\":\"U8\",\"shape\":[0],"
                       "\"data_offsets\":[0,0]}}");
    const char *dup = cl_test_path("large-dup.safetensors");
    REQUIRE(make_st_auto(dup, h.data, (size_t)n));
    CHECK_ERR(cl_st_open(&f, dup), CL_ERR_FORMAT,
              "tensor 't5': the name appears twice");
    cl_strbuf_free(&h);
}
