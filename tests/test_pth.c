/* PyTorch .pth checkpoints read in C: files torch.save writes (Debian's
 * torch 1.13 as the reference, run at test time), checked value by value
 * against what tools/torch2safetensors.py produces; hostile files built
 * here byte by byte; and plain safetensors without classic's metadata.
 * ctest-labels: interop */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/error.h"
#include "core/mem.h"
#include "harness.h"
#include "interop/interop.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "models/resnet.h"
#include "train/model.h"

#define PY "/usr/bin/python3"

/* ---- a zip writer of stored entries, as torch.save writes them -------- */

typedef struct zw {
    uint8_t b[1 << 18];
    size_t n;
    uint8_t cd[1 << 12];
    size_t ncd;
    int count;
} zw;

static void put(uint8_t *b, size_t *n, uint64_t v, int bytes)
{
    for (int k = 0; k < bytes; k++)
        b[(*n)++] = (uint8_t)(v >> (8 * k));
}

static void zw_add(zw *z, const char *name, const void *data, size_t len)
{
    size_t nl = strlen(name), off = z->n;
    uint32_t crc = (uint32_t)crc32(0L, data, (uInt)len);
    put(z->b, &z->n, 0x04034b50, 4);
    put(z->b, &z->n, 20, 2); /* version */
    put(z->b, &z->n, 0, 2);  /* flags */
    put(z->b, &z->n, 0, 2);  /* stored */
    put(z->b, &z->n, 0, 4);  /* time, date */
    put(z->b, &z->n, crc, 4);
    put(z->b, &z->n, len, 4);
    put(z->b, &z->n, len, 4);
    put(z->b, &z->n, nl, 2);
    put(z->b, &z->n, 0, 2);
    memcpy(z->b + z->n, name, nl);
    z->n += nl;
    memcpy(z->b + z->n, data, len);
    z->n += len;
    put(z->cd, &z->ncd, 0x02014b50, 4);
    put(z->cd, &z->ncd, 20, 2);
    put(z->cd, &z->ncd, 20, 2);
    put(z->cd, &z->ncd, 0, 2);
    put(z->cd, &z->ncd, 0, 2);
    put(z->cd, &z->ncd, 0, 4);
    put(z->cd, &z->ncd, crc, 4);
    put(z->cd, &z->ncd, len, 4);
    put(z->cd, &z->ncd, len, 4);
    put(z->cd, &z->ncd, nl, 2);
    put(z->cd, &z->ncd, 0, 2);
    put(z->cd, &z->ncd, 0, 2);
    put(z->cd, &z->ncd, 0, 2);
    put(z->cd, &z->ncd, 0, 2);
    put(z->cd, &z->ncd, 0, 4);
    put(z->cd, &z->ncd, off, 4);
    memcpy(z->cd + z->ncd, name, nl);
    z->ncd += nl;
    z->count++;
}

/* Appends the central directory and the end record; returns the size. */
static size_t zw_finish(zw *z)
{
    size_t cd_off = z->n;
    memcpy(z->b + z->n, z->cd, z->ncd);
    z->n += z->ncd;
    put(z->b, &z->n, 0x06054b50, 4);
    put(z->b, &z->n, 0, 4);
    put(z->b, &z->n, (uint64_t)z->count, 2);
    put(z->b, &z->n, (uint64_t)z->count, 2);
    put(z->b, &z->n, z->ncd, 4);
    put(z->b, &z->n, cd_off, 4);
    put(z->b, &z->n, 0, 2);
    return z->n;
}

static void write_file(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    REQUIRE(fwrite(b, 1, n, f) == n);
    REQUIRE(fclose(f) == 0);
}

/* ---- a pickle writer ---------------------------------------------------- */

typedef struct pk {
    uint8_t b[4096];
    size_t n;
} pk;

static void pk_raw(pk *p, const void *s, size_t n)
{
    memcpy(p->b + p->n, s, n);
    p->n += n;
}

static void pk_op(pk *p, uint8_t op)
{
    p->b[p->n++] = op;
}

static void pk_str(pk *p, const char *s)
{
    pk_op(p, 'X');
    put(p->b, &p->n, strlen(s), 4);
    pk_raw(p, s, strlen(s));
}

static void pk_int(pk *p, int64_t v)
{
    pk_op(p, 'J');
    put(p->b, &p->n, (uint64_t)v, 4);
}

static void pk_global(pk *p, const char *mod, const char *name)
{
    pk_op(p, 'c');
    pk_raw(p, mod, strlen(mod));
    pk_op(p, '\n');
    pk_raw(p, name, strlen(name));
    pk_op(p, '\n');
}

typedef struct tspec {
    const char *storage_cls; /* "FloatStorage" */
    int64_t numel;           /* the persistent id's element count */
    int64_t offset;
    int nd;
    int64_t size[3], stride[3];
} tspec;

/* One `name: tensor` entry (key, value) as torch.save pickles it. */
static void pk_tensor(pk *p, const char *name, const char *key, const tspec *t)
{
    pk_str(p, name);
    pk_global(p, "torch._utils", "_rebuild_tensor_v2");
    pk_op(p, '(');
    pk_op(p, '(');
    pk_str(p, "storage");
    pk_global(p, "torch", t->storage_cls);
    pk_str(p, key);
    pk_str(p, "cpu");
    pk_int(p, t->numel);
    pk_op(p, 't');
    pk_op(p, 'Q');
    pk_int(p, t->offset);
    pk_op(p, '(');
    for (int k = 0; k < t->nd; k++)
        pk_int(p, t->size[k]);
    pk_op(p, 't');
    pk_op(p, '(');
    for (int k = 0; k < t->nd; k++)
        pk_int(p, t->stride[k]);
    pk_op(p, 't');
    pk_op(p, 0x89);
    pk_global(p, "collections", "OrderedDict");
    pk_op(p, ')');
    pk_op(p, 'R');
    pk_op(p, 't');
    pk_op(p, 'R');
}

/* A .pth of the pickle pkl and storage "0" holding data. */
static const char *write_pth_raw(const char *file, const void *pkl,
                                 size_t n_pkl, const void *data, size_t len)
{
    static zw z;
    memset(&z, 0, sizeof z);
    zw_add(&z, "archive/data.pkl", pkl, n_pkl);
    zw_add(&z, "archive/data/0", data, len);
    zw_add(&z, "archive/version", "3\n", 2);
    size_t n = zw_finish(&z);
    const char *path = cl_test_path(file);
    write_file(path, z.b, n);
    return path;
}

static const char *write_pth(const char *file, const pk *p, const void *data,
                             size_t len)
{
    return write_pth_raw(file, p->b, p->n, data, len);
}

/* {'w': a float tensor of the spec} over 6 floats 0..5. */
static const char *one_tensor(const char *file, const tspec *t)
{
    pk p = {{0}, 0};
    static const float v[6] = {0, 1, 2, 3, 4, 5};
    pk_op(&p, 0x80);
    pk_op(&p, 2);
    pk_op(&p, '}');
    pk_op(&p, '(');
    pk_tensor(&p, "w", "0", t);
    pk_op(&p, 'u');
    pk_op(&p, '.');
    return write_pth(file, &p, v, sizeof v);
}

/* ---- files built here ---------------------------------------------------- */

/* Views: a transposed 2x3 over 6 floats, and a slice with an offset. */
CL_TEST(views_and_offsets)
{
    tspec t = {"FloatStorage", 6, 0, 2, {3, 2}, {1, 3}};
    cl_pth *p = NULL;
    REQUIRE_OK(cl_pth_open(&p, one_tensor("t.pth", &t)));
    REQUIRE(cl_pth_count(p) == 1);
    CHECK(strcmp(cl_pth_name(p, 0), "w") == 0);
    cl_shape s = cl_pth_shape(p, 0);
    CHECK(s.ndim == 2 && s.d[0] == 3 && s.d[1] == 2);
    float x[6];
    CHECK_OK(cl_pth_read_f32(p, 0, x, 6));
    static const float want[6] = {0, 3, 1, 4, 2, 5};
    CHECK(memcmp(x, want, sizeof x) == 0);
    CHECK_ERR(cl_pth_read_f32(p, 0, x, 5), CL_ERR_SHAPE, "6 elements");
    int64_t i64[6];
    CHECK_ERR(cl_pth_read_i64(p, 0, i64, 6), CL_ERR_FORMAT, "float32");
    cl_pth_close(p);

    tspec u = {"FloatStorage", 6, 2, 1, {3}, {1}};
    REQUIRE_OK(cl_pth_open(&p, one_tensor("u.pth", &u)));
    CHECK_OK(cl_pth_read_f32(p, 0, x, 3));
    CHECK(x[0] == 2 && x[1] == 3 && x[2] == 4);
    cl_pth_close(p);
    /* A broadcast (stride 0) view is copied out whole. */
    tspec e = {"FloatStorage", 6, 5, 2, {2, 2}, {0, 0}};
    REQUIRE_OK(cl_pth_open(&p, one_tensor("e.pth", &e)));
    CHECK_OK(cl_pth_read_f32(p, 0, x, 4));
    CHECK(x[0] == 5 && x[3] == 5);
    cl_pth_close(p);
}

/* Every hostile file is refused with one sentence naming what is wrong. */
CL_TEST(hostile_files)
{
    cl_pth *p = NULL;
    tspec ok = {"FloatStorage", 6, 0, 1, {6}, {1}};
    const char *good = one_tensor("good.pth", &ok);
    REQUIRE_OK(cl_pth_open(&p, good));
    cl_pth_close(p);
    size_t n = 0;
    char *b = cl_test_read_file(good, &n);
    REQUIRE(b && n > 100);
    const char *h = cl_test_path("h.pth");

    /* Truncated anywhere: no end record, or an entry past the end. */
    for (size_t cut = 0; cut < n; cut += 7) {
        write_file(h, b, cut);
        CHECK(cl_pth_open(&p, h) != CL_OK);
    }
    write_file(h, b, n - 1);
    CHECK_ERR(cl_pth_open(&p, h), CL_ERR_FORMAT, "end of central directory");
    /* Every byte flipped in turn: refused or read, never a crash. */
    for (size_t k = 0; k < n; k++) {
        b[k] ^= 0x5a;
        write_file(h, b, n);
        if (cl_pth_open(&p, h) == CL_OK)
            cl_pth_close(p);
        b[k] ^= 0x5a;
    }
    /* The first local header's offset in the central directory, then the
     * first entry's sizes, made huge. */
    size_t eocd = n - 22, cd = (size_t)(uint8_t)b[eocd + 16] |
                               (size_t)(uint8_t)b[eocd + 17] << 8;
    memcpy(b + cd + 42, "\xff\xff\xff\x7f", 4);
    write_file(h, b, n);
    CHECK_ERR(cl_pth_open(&p, h), CL_ERR_FORMAT, "local header outside");
    memcpy(b + cd + 42, "\0\0\0\0", 4);
    memcpy(b + cd + 20, "\xff\xff\xff\x7f\xff\xff\xff\x7f", 8);
    write_file(h, b, n);
    CHECK_ERR(cl_pth_open(&p, h), CL_ERR_FORMAT, "past the end of the file");
    memcpy(b + cd + 20, b + 18, 8); /* restore from the local header */
    /* A compressed entry, and a CRC that does not match. */
    b[cd + 10] = 8;
    write_file(h, b, n);
    CHECK_ERR(cl_pth_open(&p, h), CL_ERR_UNSUPPORTED, "compressed");
    b[cd + 10] = 0;
    b[cd + 16] ^= 1;
    write_file(h, b, n);
    CHECK_ERR(cl_pth_open(&p, h), CL_ERR_FORMAT, "CRC-32");
    b[cd + 16] ^= 1;
    write_file(h, b, n);
    CHECK_OK(cl_pth_open(&p, h));
    cl_pth_close(p);
    free(b);

    /* The legacy format, and something else altogether. */
    write_file(h, "\x80\x02\x8a\x0a", 4);
    CHECK_ERR(cl_pth_open(&p, h), CL_ERR_UNSUPPORTED, "legacy format");
    write_file(h, "hello, world, not a zip at all", 30);
    CHECK_ERR(cl_pth_open(&p, h), CL_ERR_FORMAT, "not a zip");

    /* Storage size mismatch: 7 floats declared, 6 stored. */
    tspec big = {"FloatStorage", 7, 0, 1, {7}, {1}};
    CHECK_ERR(cl_pth_open(&p, one_tensor("m.pth", &big)), CL_ERR_FORMAT,
              "declares 7 float32 elements, its entry holds 24 bytes");
    /* Views past the storage: offset, size, stride, huge sizes. */
    tspec v1 = {"FloatStorage", 6, 4, 1, {3}, {1}};
    CHECK_ERR(cl_pth_open(&p, one_tensor("v1.pth", &v1)), CL_ERR_FORMAT,
              "reaches past the end of its storage");
    tspec v2 = {"FloatStorage", 6, 0, 2, {2, 3}, {3, 2}};
    CHECK_ERR(cl_pth_open(&p, one_tensor("v2.pth", &v2)), CL_ERR_FORMAT,
              "reaches past the end");
    tspec v3 = {"FloatStorage", 6, 0, 3, {2000000000, 2000000000, 2},
                {0, 0, 1}};
    CHECK_ERR(cl_pth_open(&p, one_tensor("v3.pth", &v3)), CL_ERR_FORMAT,
              "more than 2^40 elements");
    tspec v4 = {"FloatStorage", 6, 7, 1, {0}, {1}};
    CHECK_ERR(cl_pth_open(&p, one_tensor("v4.pth", &v4)), CL_ERR_FORMAT,
              "storage offset");
    tspec v5 = {"FloatStorage", 6, 0, 1, {2}, {-1}};
    CHECK_ERR(cl_pth_open(&p, one_tensor("v5.pth", &v5)), CL_ERR_FORMAT,
              "stride holds a value");
    /* An unknown storage type. */
    tspec q = {"QUInt8Storage", 6, 0, 1, {6}, {1}};
    CHECK_ERR(cl_pth_open(&p, one_tensor("q.pth", &q)), CL_ERR_FORMAT,
              "storage type torch.QUInt8Storage");
}

/* Pickles outside the subset, or abusing it. */
CL_TEST(hostile_pickles)
{
    cl_pth *p = NULL;
    static const float v[6] = {0};
    pk k;
    /* An unknown opcode (INST, protocol 0). */
    memset(&k, 0, sizeof k);
    pk_raw(&k, "\x80\x02}i", 4);
    CHECK_ERR(cl_pth_open(&p, write_pth("o.pth", &k, v, sizeof v)),
              CL_ERR_FORMAT, "opcode 0x69 ('i') is outside the pickle subset");
    /* A callable outside the subset as the root: named, never run. */
    memset(&k, 0, sizeof k);
    pk_raw(&k, "\x80\x02", 2);
    pk_global(&k, "os", "system");
    pk_str(&k, "echo pwned");
    pk_raw(&k, "\x85R.", 3);
    CHECK_ERR(cl_pth_open(&p, write_pth("g.pth", &k, v, sizeof v)),
              CL_ERR_UNSUPPORTED, "a os.system object, not a state_dict");
    /* A whole pickled module. */
    memset(&k, 0, sizeof k);
    pk_raw(&k, "\x80\x02", 2);
    pk_global(&k, "torchvision.models.resnet", "ResNet");
    pk_raw(&k, ")\x81}b.", 5);
    CHECK_ERR(cl_pth_open(&p, write_pth("mod.pth", &k, v, sizeof v)),
              CL_ERR_UNSUPPORTED, "torchvision.models.resnet.ResNet object");
    /* A state_dict value that is not a tensor. */
    memset(&k, 0, sizeof k);
    pk_raw(&k, "\x80\x02}(", 4);
    tspec t = {"FloatStorage", 6, 0, 1, {6}, {1}};
    pk_tensor(&k, "w", "0", &t);
    pk_str(&k, "b");
    pk_int(&k, 3);
    pk_raw(&k, "u.", 2);
    CHECK_ERR(cl_pth_open(&p, write_pth("nt.pth", &k, v, sizeof v)),
              CL_ERR_UNSUPPORTED, "entry 'b' is a int, not a tensor");
    /* Memo abuse: a get of a key never put, a put far past the next. */
    memset(&k, 0, sizeof k);
    pk_raw(&k, "\x80\x02}h\x05.", 6);
    CHECK_ERR(cl_pth_open(&p, write_pth("mg.pth", &k, v, sizeof v)),
              CL_ERR_FORMAT, "BINGET of a memo key never stored");
    memset(&k, 0, sizeof k);
    pk_raw(&k, "\x80\x02}r\xff\xff\xff\x7f.", 9);
    CHECK_ERR(cl_pth_open(&p, write_pth("mp.pth", &k, v, sizeof v)),
              CL_ERR_FORMAT, "memo key past the next free one");
    /* A list appended to itself and a dict that holds itself: no
     * recursion follows them. */
    memset(&k, 0, sizeof k);
    pk_raw(&k,
           "\x80\x02}q\x00X\x01\x00\x00\x00"
           "ah\x00"
           "s.",
           15);
    CHECK_ERR(cl_pth_open(&p, write_pth("cy.pth", &k, v, sizeof v)),
              CL_ERR_FORMAT, "a dict without tensors");
    /* A tuple nested 100000 deep: built without recursion, and a tuple,
     * not a state_dict. */
    static uint8_t deep[100010];
    size_t m = 0;
    deep[m++] = 0x80;
    deep[m++] = 2;
    deep[m++] = ')';
    for (int i = 0; i < 100000; i++)
        deep[m++] = 0x85;
    deep[m++] = '.';
    CHECK_ERR(cl_pth_open(&p, write_pth_raw("deep.pth", deep, m, v, sizeof v)),
              CL_ERR_UNSUPPORTED, "holds a tuple, not a state_dict");
    /* Marks left open at STOP. */
    memset(&k, 0, sizeof k);
    pk_raw(&k, "\x80\x02}(((((.", 9);
    CHECK_ERR(cl_pth_open(&p, write_pth("mk.pth", &k, v, sizeof v)),
              CL_ERR_FORMAT, "STOP with other than one object");
    /* Truncated inside an opcode, and without STOP. */
    memset(&k, 0, sizeof k);
    pk_raw(&k,
           "\x80\x02X\xff\xff\x00\x00"
           "ab",
           9);
    CHECK_ERR(cl_pth_open(&p, write_pth("tr.pth", &k, v, sizeof v)),
              CL_ERR_FORMAT, "ends inside an opcode");
    memset(&k, 0, sizeof k);
    pk_raw(&k, "\x80\x02}", 3);
    CHECK_ERR(cl_pth_open(&p, write_pth("ns.pth", &k, v, sizeof v)),
              CL_ERR_FORMAT, "without STOP");
    /* A storage key that names no entry. */
    memset(&k, 0, sizeof k);
    pk_raw(&k, "\x80\x02}(", 4);
    pk_tensor(&k, "w", "9", &t);
    pk_raw(&k, "u.", 2);
    CHECK_ERR(cl_pth_open(&p, write_pth("nk.pth", &k, v, sizeof v)),
              CL_ERR_FORMAT, "no entry data/9");
}

/* ---- files torch.save writes ------------------------------------------- */

/* Every dtype and view torch.save produces, against torch's own
 * contiguous float32 copy written beside it. */
CL_TEST(torch_dtypes_and_views)
{
    char cmd[4096];
    const char *pth = cl_test_path("v.pth");
    const char *ref = cl_test_path("v.bin");
    snprintf(cmd, sizeof cmd,
             PY " -c \"import torch, collections; g = torch.Generator()."
                "manual_seed(3); a = torch.randn(4, 6, generator=g); d = "
                "collections.OrderedDict(); d['f32'] = a; d['t'] = a.t(); "
                "d['slice'] = a[1:3, 2:5]; d['half'] = a.half(); d['bf16'] = "
                "a[:, 1].bfloat16(); d['f64'] = a.double().t(); d['exp'] = "
                "a[0:1, 0:2].expand(3, 2); d['scalar'] = a[2, 2]; "
                "torch.save({'epoch': 1, 'model': d, 'lr': 0.5}, '%s'); "
                "open('%s', 'wb').write(b''.join(v.float().contiguous()."
                "numpy().tobytes() for v in d.values())); n = "
                "torch.tensor(123456789012, dtype=torch.int64); "
                "torch.save({'module.x.num_batches_tracked': n}, '%s.i')\"",
             pth, ref, pth);
    REQUIRE(cl_test_run(cmd) == 0);
    size_t nref = 0;
    char *want = cl_test_read_file(ref, &nref);
    REQUIRE(want);
    cl_pth *p = NULL;
    REQUIRE_OK(cl_pth_open(&p, pth));
    CHECK(strcmp(cl_pth_where(p), "the state_dict under 'model'") == 0);
    REQUIRE(cl_pth_count(p) == 8);
    static const char *const dt[] = {"float32", "float32",  "float32",
                                     "float16", "bfloat16", "float64",
                                     "float32", "float32"};
    size_t at = 0;
    for (size_t i = 0; i < cl_pth_count(p); i++) {
        cl_shape s = cl_pth_shape(p, i);
        size_t n = (size_t)cl_shape_numel(&s);
        float x[64];
        REQUIRE(n <= 64 && at + 4 * n <= nref);
        CHECK_OK(cl_pth_read_f32(p, i, x, n));
        CHECK(memcmp(x, want + at, 4 * n) == 0);
        CHECK(strcmp(cl_pth_dtype(p, i), dt[i]) == 0);
        at += 4 * n;
    }
    CHECK(at == nref);
    CHECK(cl_pth_shape(p, 7).ndim == 0);
    cl_pth_close(p);
    free(want);
    char ip[600];
    snprintf(ip, sizeof ip, "%s.i", pth);
    REQUIRE_OK(cl_pth_open(&p, ip));
    int64_t c = 0;
    CHECK(strcmp(cl_pth_name(p, 0), "x.num_batches_tracked") == 0);
    CHECK_OK(cl_pth_read_i64(p, 0, &c, 1));
    CHECK(c == 123456789012LL);
    cl_pth_close(p);
}

/* A torchvision resnet18 state_dict read in C equals, tensor by tensor and
 * bit for bit, what tools/torch2safetensors.py writes from it; a training
 * checkpoint of DataParallel names ('module.'), an optimizer state and an
 * argparse.Namespace beside it reads the same. */
CL_TEST(resnet18_matches_torch2safetensors)
{
    char cmd[4096];
    const char *st = cl_test_path("r.safetensors");
    const char *pth = cl_test_path("r.pth");
    const char *tr = cl_test_path("train.pth");
    snprintf(cmd, sizeof cmd,
             PY " " CL_SOURCE_DIR "/tools/torch2safetensors.py --arch "
                "resnet18 --random --seed 11 --perturb-bn --num-classes 7 "
                "%s --save-pth %s >/dev/null",
             st, pth);
    REQUIRE(cl_test_run(cmd) == 0);
    snprintf(cmd, sizeof cmd,
             PY " -c \"import torch, argparse, collections; sd = "
                "torch.load('%s'); m = torch.nn.Linear(2, 2); o = "
                "torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9); "
                "m(torch.ones(1, 2)).sum().backward(); o.step(); "
                "torch.save({'epoch': 9, 'arch': 'resnet18', 'state_dict': "
                "collections.OrderedDict(('module.' + k, v) for k, v in "
                "sd.items()), 'optimizer': o.state_dict(), 'args': "
                "argparse.Namespace(lr=0.1, name='x')}, '%s')\"",
             pth, tr);
    REQUIRE(cl_test_run(cmd) == 0);
    cl_st_file *f = NULL;
    REQUIRE_OK(cl_st_open(&f, st));
    for (int which = 0; which < 2; which++) {
        cl_pth *p = NULL;
        REQUIRE_OK(cl_pth_open(&p, which ? tr : pth));
        CHECK(cl_pth_count(p) == cl_st_count(f));
        for (size_t i = 0; i < cl_st_count(f); i++) {
            const char *name = cl_st_name(f, i);
            long j = cl_pth_find(p, name);
            CHECK(j >= 0);
            if (j < 0)
                continue;
            cl_shape a, b = cl_pth_shape(p, (size_t)j);
            cl_st_dtype dt;
            cl_st_info(f, i, &dt, &a);
            CHECK(cl_shape_equal(&a, &b));
            size_t n = (size_t)cl_shape_numel(&a);
            if (dt == CL_ST_I64) {
                int64_t x = -1, y = -2;
                CHECK_OK(cl_st_read_i64(f, i, &x, 1));
                CHECK_OK(cl_pth_read_i64(p, (size_t)j, &y, 1));
                CHECK(x == y);
                continue;
            }
            float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
            REQUIRE(x && y);
            CHECK_OK(cl_st_read_f32(f, i, x, n));
            CHECK_OK(cl_pth_read_f32(p, (size_t)j, y, n));
            CHECK(memcmp(x, y, n * sizeof *x) == 0);
            free(x);
            free(y);
        }
        cl_pth_close(p);
    }
    cl_st_close(f);
    /* Opened as predict opens a checkpoint: the arch and head inferred. */
    cl_model m;
    REQUIRE_OK(cl_model_open(&m, tr, 1, "ref", CL_PLAN_INFER, 1));
    CHECK(m.foreign && m.arch.resnet.depth == 18 && m.num_classes == 7);
    CHECK(m.side == 224 && m.arch.resnet.stem == CL_STEM_IMAGENET);
    CHECK(m.cfg.n_mean == 3 && m.cfg.crop_pct > 0.87 && m.cfg.crop_pct < 0.88);
    CHECK(strcmp(m.class_names[6], "class 6") == 0);
    cl_model_close(&m);
    /* cl_interop_load_pretrained: a 3-class model keeps its own head. */
    cl_graph g;
    cl_resnet_config rc = cl_resnet_config_default();
    rc.depth = 18;
    rc.num_classes = 3;
    char note[1024];
    REQUIRE_OK(cl_graph_init(&g, 1));
    REQUIRE_OK(cl_resnet_build(&g, &rc, 32, 32, 0, 0));
    CHECK_OK(cl_interop_load_pretrained(tr, &g, CL_CKPT_PRETRAINED, note,
                                        sizeof note));
    CHECK(strstr(note,
                 "120 tensors loaded (PyTorch .pth, the state_dict "
                 "under 'state_dict'); head kept: fc.weight (7, 512)") != NULL);
    CHECK_ERR(cl_interop_load_pretrained(tr, &g, CL_CKPT_STRICT, NULL, 0),
              CL_ERR_SHAPE, "fc.weight");
    cl_graph_free(&g);
    CHECK_ERR(cl_model_open_as(&m, pth, "resnet50", 1, "ref", CL_PLAN_INFER, 1),
              CL_ERR_SHAPE, "blocks are those of resnet18");
}

/* ---- everywhere a checkpoint goes -------------------------------------- */

/* A copy of a classic checkpoint without its metadata and without the BN
 * counters, as timm's hub files and safetensors.torch.save_file give. */
static void write_plain(const char *from, const char *to)
{
    cl_st_file *f = NULL;
    cl_st_writer *w = NULL;
    REQUIRE_OK(cl_st_open(&f, from));
    REQUIRE_OK(cl_st_writer_new(&w));
    for (size_t i = 0; i < cl_st_count(f); i++) {
        const char *name = cl_st_name(f, i);
        if (strstr(name, "num_batches_tracked"))
            continue;
        cl_st_dtype dt;
        cl_shape s;
        size_t nb;
        cl_st_info(f, i, &dt, &s);
        CHECK_OK(cl_st_writer_add(w, name, dt, s, cl_st_data(f, i, &nb)));
    }
    CHECK_OK(cl_st_writer_save(w, to));
    cl_st_writer_free(w);
    cl_st_close(f);
}

/* The "index":..,"prob":.. parts of predict --json output. */
static const char *numbers(const char *json)
{
    static char buf[4][512];
    static int k;
    char *b = buf[k++ & 3];
    size_t n = 0;
    for (const char *p = json; (p = strstr(p, "\"index\":")) != NULL; p++) {
        const char *e = strchr(p, '}');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (n + len + 1 >= sizeof buf[0])
            break;
        memcpy(b + n, p, len);
        n += len;
        b[n++] = ';';
    }
    b[n] = 0;
    return b;
}

/* predict, convert, export, eval, embed and train --pretrained take a .pth
 * and a plain safetensors file; a 1000-class head gets ImageNet's names. */
CL_TEST(cli_everywhere)
{
    char cmd[4096], args[2048];
    const char *dir = cl_test_tmpdir();
    snprintf(cmd, sizeof cmd,
             PY " " CL_SOURCE_DIR "/tools/torch2safetensors.py --arch "
                "resnet18 --random --seed 5 --perturb-bn --num-classes 1000 "
                "%s/k1000.safetensors --save-pth %s/k1000.pth >/dev/null && " PY
                " " CL_SOURCE_DIR "/tools/torch2safetensors.py --arch "
                "resnet18 --random --seed 6 --num-classes 3 "
                "%s/k3.safetensors --save-pth %s/k3.pth >/dev/null && " PY
                " -c \"from PIL import Image; import numpy as np, os; r = "
                "np.random.RandomState(0)\nfor s in ('train', 'val'):\n for c "
                "in ('a', 'b', 'c'):\n  os.makedirs('%s/img/%%s/%%s' %% (s, "
                "c), exist_ok=True)\n  for i in range(2):\n   "
                "Image.fromarray((r.rand(40, 48, 3) * 255).astype('uint8'))."
                "save('%s/img/%%s/%%s/%%d.png' %% (s, c, i))\"",
             dir, dir, dir, dir, dir, dir);
    REQUIRE(cl_test_run(cmd) == 0);
    char plain[600], img[600];
    snprintf(plain, sizeof plain, "%s/plain.safetensors", dir);
    write_plain(cl_test_path("k1000.safetensors"), plain);
    snprintf(img, sizeof img, "%s/img/val/a/0.png", dir);

    /* predict: the same top-3 from all three files, ImageNet names. */
    static char out[3][1 << 16];
    const char *files[3] = {"k1000.safetensors", "k1000.pth",
                            "plain.safetensors"};
    for (int k = 0; k < 3; k++) {
        snprintf(args, sizeof args,
                 "predict --checkpoint %s/%s --top 3 --json --backend ref %s",
                 dir, files[k], img);
        REQUIRE(cl_test_classic(args) == 0);
        size_t len = strlen(cl_test_out);
        REQUIRE(len < sizeof out[k]);
        memcpy(out[k], cl_test_out, len + 1);
    }
    /* torch2safetensors.py wrote no names: only the numbers agree. */
    CHECK(strcmp(out[1], out[2]) == 0);
    CHECK(strcmp(numbers(out[0]), numbers(out[1])) == 0);
    CHECK(strlen(numbers(out[0])) > 40);
    CHECK(strstr(out[1], "class ") == NULL);
    snprintf(args, sizeof args,
             "predict --checkpoint %s/k1000.pth --arch resnet34 %s", dir, img);
    CHECK(cl_test_classic(args) != 0);
    CHECK(strstr(cl_test_out, "blocks are those of resnet18") != NULL);

    /* convert: the same tensors, bit for bit, ImageNet's names. */
    snprintf(args, sizeof args, "convert %s/k1000.pth %s/conv.safetensors", dir,
             dir);
    REQUIRE(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "resnet18 (imagenet stem), 1000 classes") !=
          NULL);
    char names[64];
    CHECK_OK(cl_ckpt_read_meta(cl_test_path("conv.safetensors"), "class_names",
                               names, sizeof names));
    CHECK(strncmp(names, "[\"tench\",\"goldfish\"", 19) == 0);
    cl_st_file *a = NULL, *b = NULL;
    REQUIRE_OK(cl_st_open(&a, cl_test_path("k1000.safetensors")));
    REQUIRE_OK(cl_st_open(&b, cl_test_path("conv.safetensors")));
    CHECK(cl_st_count(a) == cl_st_count(b));
    for (size_t i = 0; i < cl_st_count(a); i++) {
        long j = cl_st_find(b, cl_st_name(a, i));
        size_t na = 0, nb = 0;
        CHECK(j >= 0);
        if (j < 0)
            continue;
        const void *pa = cl_st_data(a, i, &na);
        const void *pb = cl_st_data(b, (size_t)j, &nb);
        CHECK(na == nb && memcmp(pa, pb, na) == 0);
    }
    cl_st_close(a);
    cl_st_close(b);
    snprintf(args, sizeof args,
             "convert %s/plain.safetensors %s/conv2.safetensors --arch "
             "resnet18 --class_names x,y",
             dir, dir);
    CHECK(cl_test_classic(args) == 2);
    CHECK(strstr(cl_test_out, "gives 2 names for 1000 classes") != NULL);

    /* export: the inferred arch and ImageNet defaults as metadata. */
    snprintf(args, sizeof args,
             "export --checkpoint %s/k3.pth --onnx %s/k3.onnx --batch 1", dir,
             dir);
    CHECK(cl_test_classic(args) == 0);
    size_t n_onnx = 0;
    char *onnx = cl_test_read_file(cl_test_path("k3.onnx"), &n_onnx);
    CHECK(onnx && n_onnx > 1000000);
    free(onnx);

    /* eval and embed on an image folder. */
    snprintf(args, sizeof args,
             "eval --checkpoint %s/k3.pth --dataset imagefolder --data_dir "
             "%s/img --val_split val --batch 2 --backend ref",
             dir, dir);
    CHECK(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "(6 samples") != NULL);
    snprintf(args, sizeof args,
             "embed --checkpoint %s/k3.pth --out %s/f.safetensors --dataset "
             "imagefolder --data_dir %s/img --split val --batch 2",
             dir, dir, dir);
    CHECK(cl_test_classic(args) == 0);
    cl_st_file *f = NULL;
    if (cl_st_open(&f, cl_test_path("f.safetensors")) == CL_OK) {
        cl_shape s;
        cl_st_info(f, (size_t)cl_st_find(f, "features"), NULL, &s);
        CHECK(s.ndim == 2 && s.d[0] == 6 && s.d[1] == 512);
        cl_st_close(f);
    } else
        CHECK(!"embed wrote no features");

    /* info: the layer table of the inferred model; a features file shows
     * its metadata and says it holds no model. */
    snprintf(args, sizeof args, "info --checkpoint %s/k3.pth", dir);
    CHECK(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "resnet18, imagenet stem, 3 input channel(s), "
                              "3 classes, 224x224") != NULL);
    CHECK(strstr(cl_test_out, "parameters: 11178051") != NULL);
    snprintf(args, sizeof args, "info --checkpoint %s/plain.safetensors", dir);
    CHECK(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "the arch is inferred") != NULL);
    CHECK(strstr(cl_test_out, "1000 classes") != NULL);
    snprintf(args, sizeof args, "info --checkpoint %s/f.safetensors", dir);
    CHECK(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "(no layer table: ") != NULL);
    snprintf(args, sizeof args, "info --checkpoint %s/k3.pth --arch resnet50",
             dir);
    CHECK(cl_test_classic(args) != 0);
    CHECK(strstr(cl_test_out, "blocks are those of resnet18") != NULL);

    /* Fine-tuning from the .pth: 1000-class head replaced by 3 classes. */
    snprintf(args, sizeof args,
             "train --dataset imagefolder --data_dir %s/img --train_split "
             "train --val_split val --num_classes 3 --model resnet18 --stem "
             "imagenet --image_size 32 --batch_size 3 --epoch_size 1 "
             "--val_interval 0 --ckpt_save_epochs 0 --num_parallel_workers 1 "
             "--seed 1 --pretrained %s/k1000.pth --ckpt_save_dir %s/ft",
             dir, dir, dir);
    CHECK(cl_test_classic(args) == 0);
    CHECK(strstr(cl_test_out, "(PyTorch .pth); training starts at step 0") !=
          NULL);
    CHECK(strstr(cl_test_out, "fc.weight (1000, 512) in the file, (3, 512) in "
                              "the model") != NULL);
}

/* ---- the ResNet of weights without metadata ---------------------------- */

/* A plain safetensors file with the names of a ResNet of these blocks
 * (tiny stand-ins except the tensors inference looks at). */
static void write_skeleton(const char *path, const int blocks[4],
                           int bottleneck, int width, int classes)
{
    /* Big enough for the largest tensor written. */
    float *zeros =
        calloc((size_t)classes * 2048 + 64 * 3 * 7 * 7 + 64 * 128 * 9, 4);
    REQUIRE(zeros);
    cl_st_writer *w = NULL;
    char names[200][64];
    int n = 0;
    REQUIRE_OK(cl_st_writer_new(&w));
    int64_t c1[4] = {64, 3, 7, 7}, fc[2] = {classes, bottleneck ? 2048 : 512};
    int64_t one = 1;
    REQUIRE_OK(cl_st_writer_add(w, "conv1.weight", CL_ST_F32,
                                cl_shape_make(4, c1), zeros));
    for (int L = 1; L <= 4; L++)
        for (int M = 0; M < blocks[L - 1]; M++)
            for (int c = 1; c <= (bottleneck ? 3 : 2); c++) {
                snprintf(names[n], sizeof names[n], "layer%d.%d.conv%d.weight",
                         L, M, c);
                cl_shape s = cl_shape_make(1, &one);
                int64_t d1[4] = {width, 64, 1, 1}, d2[4] = {64, width, 3, 3};
                if (L == 1 && M == 0 && c == 1)
                    s = cl_shape_make(4, d1);
                if (L == 1 && M == 0 && c == 2)
                    s = cl_shape_make(4, d2);
                REQUIRE(n < 200);
                REQUIRE_OK(
                    cl_st_writer_add(w, names[n++], CL_ST_F32, s, zeros));
            }
    REQUIRE_OK(cl_st_writer_add(w, "fc.weight", CL_ST_F32, cl_shape_make(2, fc),
                                zeros));
    REQUIRE_OK(cl_st_writer_save(w, path));
    cl_st_writer_free(w);
    free(zeros);
}

CL_TEST(infer_every_depth)
{
    static const struct {
        int depth, bottleneck, b[4];
    } t[] = {{18, 0, {2, 2, 2, 2}},
             {34, 0, {3, 4, 6, 3}},
             {50, 1, {3, 4, 6, 3}},
             {101, 1, {3, 4, 23, 3}},
             {152, 1, {3, 8, 36, 3}}};
    const char *path = cl_test_path("s.safetensors");
    cl_weights w;
    cl_arch a;
    const cl_resnet_config *rc = &a.resnet;
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        write_skeleton(path, t[k].b, t[k].bottleneck, 64, 1000);
        REQUIRE_OK(cl_weights_open(&w, path));
        CHECK(!w.classic && w.src.counters_optional);
        CHECK_OK(cl_weights_infer(&w, NULL, &a));
        CHECK(a.family == CL_ARCH_RESNET && rc->depth == t[k].depth &&
              rc->num_classes == 1000 && rc->in_channels == 3 &&
              rc->stem == CL_STEM_IMAGENET);
        cl_weights_close(&w);
    }
    /* 3-4-6-3 basic blocks are resnet34, not a resnet50 told by --arch. */
    write_skeleton(path, t[1].b, 0, 64, 10);
    REQUIRE_OK(cl_weights_open(&w, path));
    CHECK_ERR(cl_weights_infer(&w, "resnet50", &a), CL_ERR_SHAPE,
              "--arch resnet50, but the weights' blocks are those of "
              "resnet34");
    CHECK_OK(cl_weights_infer(&w, "resnet34", &a));
    cl_weights_close(&w);
    /* wide_resnet50_2: layer1.0 twice as wide. */
    write_skeleton(path, t[2].b, 1, 128, 1000);
    REQUIRE_OK(cl_weights_open(&w, path));
    CHECK_ERR(cl_weights_infer(&w, NULL, &a), CL_ERR_UNSUPPORTED,
              "wide_resnet or resnext");
    cl_weights_close(&w);
    /* Blocks of no torchvision ResNet. */
    static const int odd[4] = {2, 2, 2, 3};
    write_skeleton(path, odd, 0, 64, 10);
    REQUIRE_OK(cl_weights_open(&w, path));
    CHECK_ERR(cl_weights_infer(&w, NULL, &a), CL_ERR_FORMAT,
              "basic blocks 2-2-2-3 in layer1..4 are no torchvision ResNet");
    cl_weights_close(&w);
}
