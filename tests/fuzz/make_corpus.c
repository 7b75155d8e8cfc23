/* Writes the seed corpora of the fuzz targets: small valid (and a few
 * nearly valid) files of every format, into tests/fuzz/corpus/<target>/.
 * Built and run by tests/fuzz/make_corpus.sh; needs only zlib, libpng and
 * libjpeg, so the seeds do not depend on the code they exercise. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            exit(1);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void putc8(buf *b, int c)
{
    uint8_t x = (uint8_t)c;
    put(b, &x, 1);
}
static void put_be32(buf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8),
                    (uint8_t)v};
    put(b, x, 4);
}
static void put_le32(buf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
                    (uint8_t)(v >> 24)};
    put(b, x, 4);
}
static void puts_(buf *b, const char *s)
{
    put(b, s, strlen(s));
}

static const char *outdir;

static void save(const char *target, const char *name, const buf *b)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s/%s", outdir, target, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(b->p, 1, b->n, f) != b->n || fclose(f) != 0) {
        fprintf(stderr, "make_corpus: cannot write %s\n", p);
        exit(1);
    }
}

/* gzip of b (as gzwrite makes it) into a new buffer. */
static buf gz(const buf *b)
{
    buf o = {0};
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 9, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        exit(1);
    o.cap = deflateBound(&z, b->n) + 64;
    o.p = malloc(o.cap);
    z.next_in = b->p;
    z.avail_in = (uInt)b->n;
    z.next_out = o.p;
    z.avail_out = (uInt)o.cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END)
        exit(1);
    o.n = z.total_out;
    deflateEnd(&z);
    return o;
}

/* A fz_split input: flags byte, le32 length of part a, a, b. */
static buf split_input(int flags, const buf *a, const buf *b)
{
    buf o = {0};
    putc8(&o, flags);
    put_le32(&o, (uint32_t)a->n);
    put(&o, a->p, a->n);
    if (b)
        put(&o, b->p, b->n);
    return o;
}

static void idx_seeds(void)
{
    for (int v = 0; v < 3; v++) {
        int n = 1 + v, r = v == 2 ? 3 : 4, c = 4;
        buf im = {0}, lb = {0};
        put_be32(&im, 0x803);
        put_be32(&im, (uint32_t)n);
        put_be32(&im, (uint32_t)r);
        put_be32(&im, (uint32_t)c);
        for (int i = 0; i < n * r * c; i++)
            putc8(&im, i * 17);
        put_be32(&lb, 0x801);
        put_be32(&lb, (uint32_t)n);
        for (int i = 0; i < n; i++)
            putc8(&lb, (i * 3) % 10);
        char nm[32];
        buf o = split_input(v == 1 ? 4 : 0, &im, &lb);
        snprintf(nm, sizeof nm, "raw-%d", v);
        save("idx", nm, &o);
        free(o.p);
        /* The harness gzips (flags 1|2), and pre-gzipped files. */
        o = split_input(3, &im, &lb);
        snprintf(nm, sizeof nm, "harness-gz-%d", v);
        save("idx", nm, &o);
        free(o.p);
        buf gi = gz(&im), gl = gz(&lb);
        o = split_input(0, &gi, &gl);
        snprintf(nm, sizeof nm, "gz-%d", v);
        save("idx", nm, &o);
        free(o.p);
        free(gi.p);
        free(gl.p);
        free(im.p);
        free(lb.p);
    }
}

static buf cifar_records(int n, int hundred)
{
    buf b = {0};
    for (int i = 0; i < n; i++) {
        if (hundred)
            putc8(&b, i % 20);
        putc8(&b, hundred ? (i * 7) % 100 : i % 10);
        for (int q = 0; q < 3072; q++)
            putc8(&b, (q * 5 + i) & 0xff);
    }
    return b;
}

static buf cifar_meta(int hundred)
{
    buf b = {0};
    static const char *const names[10] = {
        "airplane", "automobile", "bird",  "cat",  "deer",
        "dog",      "frog",       "horse", "ship", "truck"};
    for (int k = 0; k < (hundred ? 100 : 10); k++) {
        char nm[32];
        if (hundred)
            snprintf(nm, sizeof nm, "class_%d\n", k);
        else
            snprintf(nm, sizeof nm, "%s\n", names[k]);
        puts_(&b, nm);
    }
    puts_(&b, "\n");
    return b;
}

static void cifar_bin_seeds(void)
{
    for (int h = 0; h < 2; h++) {
        buf r = cifar_records(h ? 1 : 2, h), m = cifar_meta(h), e = {0};
        buf o = split_input(h, &r, &m);
        save("cifar_bin", h ? "c100-meta" : "c10-meta", &o);
        free(o.p);
        o = split_input(h | 2, &r, &e);
        save("cifar_bin", h ? "c100-gz-nometa" : "c10-gz-nometa", &o);
        free(o.p);
        free(r.p);
        free(m.p);
    }
}

/* One ustar header (+ data, padded) for a regular file or a GNU long name. */
static void tar_member(buf *t, const char *name, char type, const buf *d,
                       int ustar_prefix)
{
    uint8_t h[512];
    memset(h, 0, sizeof h);
    const char *base = name;
    if (ustar_prefix && strchr(name, '/')) {
        const char *sl = strrchr(name, '/');
        memcpy(h + 345, name, (size_t)(sl - name));
        base = sl + 1;
    }
    snprintf((char *)h, 100, "%s", base);
    snprintf((char *)h + 100, 8, "%07o", 0644);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011o", (unsigned)d->n);
    snprintf((char *)h + 136, 12, "%011o", 0);
    h[156] = (uint8_t)type;
    memcpy(h + 257,
           "ustar\0"
           "00",
           8);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
    put(t, h, 512);
    put(t, d->p, d->n);
    static const uint8_t zero[512];
    if (d->n % 512)
        put(t, zero, 512 - d->n % 512);
}

static void tar_end(buf *t)
{
    static const uint8_t zero[1024];
    put(t, zero, 1024);
}

static void cifar_tar_seeds(void)
{
    for (int h = 0; h < 2; h++) {
        const char *dir = h ? "cifar-100-binary" : "cifar-10-batches-bin";
        buf r = cifar_records(1, h), m = cifar_meta(h), t = {0};
        buf dirent = {0};
        char p[256];
        tar_member(&t, dir, '5', &dirent, 0);
        snprintf(p, sizeof p, "%s/%s", dir,
                 h ? "fine_label_names.txt" : "batches.meta.txt");
        tar_member(&t, p, '0', &m, 0);
        snprintf(p, sizeof p, "%s/%s", dir, h ? "test.bin" : "test_batch.bin");
        tar_member(&t, p, '0', &r, 1);
        tar_end(&t);
        buf o = {0};
        putc8(&o, h);
        put(&o, t.p, t.n);
        save("cifar_tar", h ? "c100-plain" : "c10-plain", &o);
        free(o.p);
        o.p = NULL;
        o.n = o.cap = 0;
        buf g = gz(&t);
        putc8(&o, h);
        put(&o, g.p, g.n);
        save("cifar_tar", h ? "c100-gz" : "c10-gz", &o);
        free(o.p);
        free(g.p);
        free(t.p);
        free(r.p);
        free(m.p);
    }
    /* A GNU long name (type 'L') before the member. */
    buf r = cifar_records(1, 0), t = {0}, ln = {0};
    const char *longp = "cifar-10-batches-bin/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                        "aaaaaaaaaaaaaaaaaaaa/test_batch.bin";
    put(&ln, longp, strlen(longp) + 1);
    tar_member(&t, "././@LongLink", 'L', &ln, 0);
    tar_member(&t, "truncated-name", '0', &r, 0);
    tar_end(&t);
    buf o = {0};
    putc8(&o, 0);
    put(&o, t.p, t.n);
    save("cifar_tar", "c10-longname", &o);
    free(o.p);
    free(t.p);
    free(r.p);
    free(ln.p);
}

static void png_one(const char *name, int w, int h, int color, int depth,
                    int interlace)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/png/%s", outdir, name);
    FILE *f = fopen(p, "wb");
    png_structp png =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (!f || !png || !info || setjmp(png_jmpbuf(png)))
        exit(1);
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, color,
                 interlace, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (color == PNG_COLOR_TYPE_PALETTE) {
        png_color pal[4] = {{0, 0, 0}, {255, 0, 0}, {0, 255, 0}, {0, 0, 255}};
        png_set_PLTE(png, info, pal, 4);
        png_byte trans[1] = {0};
        png_set_tRNS(png, info, trans, 1, NULL);
    }
    png_write_info(png, info);
    int ch = color == PNG_COLOR_TYPE_RGB          ? 3
             : color == PNG_COLOR_TYPE_RGBA       ? 4
             : color == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                                                  : 1;
    size_t row = ((size_t)w * (size_t)ch * (size_t)depth + 7) / 8;
    uint8_t *r = calloc(row, 1);
    int passes = png_set_interlace_handling(png);
    for (int pass = 0; pass < passes; pass++)
        for (int y = 0; y < h; y++) {
            for (size_t x = 0; x < row; x++)
                r[x] = (uint8_t)(x * 31 + (size_t)y * 7);
            if (color == PNG_COLOR_TYPE_PALETTE)
                for (size_t x = 0; x < row; x++)
                    r[x] &= depth == 8 ? 3 : 0x55;
            png_write_row(png, r);
        }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    fclose(f);
    free(r);
}

static void jpeg_one(const char *name, int w, int h, int comps, int progressive,
                     int quality)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/jpeg/%s", outdir, name);
    FILE *f = fopen(p, "wb");
    if (!f)
        exit(1);
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = comps;
    ci.in_color_space = comps == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, quality, TRUE);
    if (progressive)
        jpeg_simple_progression(&ci);
    jpeg_start_compress(&ci, TRUE);
    uint8_t *r = malloc((size_t)w * (size_t)comps);
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w * comps; x++)
            r[x] = (uint8_t)(x * 9 + y * 13);
        JSAMPROW rp = r;
        jpeg_write_scanlines(&ci, &rp, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    fclose(f);
    free(r);
}

static void st_file(const char *name, const char *json, const buf *data)
{
    buf o = {0};
    uint64_t n = strlen(json);
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(n >> (8 * i));
    put(&o, le, 8);
    puts_(&o, json);
    if (data)
        put(&o, data->p, data->n);
    save("safetensors", name, &o);
    free(o.p);
}

static void st_seeds(void)
{
    buf d = {0};
    for (int i = 0; i < 64; i++)
        putc8(&d, i);
    st_file("empty", "{}", NULL);
    st_file("meta-only", "{\"__metadata__\":{\"format\":\"pt\",\"k\":\"v\"}}",
            NULL);
    st_file("f32",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],"
            "\"data_offsets\":[0,16]}}",
            &(buf){d.p, 16, 16});
    st_file("mixed",
            "{\"__metadata__\":{\"step\":\"3\"},"
            "\"a\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[8,16]},"
            "\"c\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[16,32]},"
            "\"d\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[32,33]},"
            "\"e\":{\"dtype\":\"F64\",\"shape\":[1,1],"
            "\"data_offsets\":[40,48]},"
            "\"f\":{\"dtype\":\"BOOL\",\"shape\":[7],\"data_offsets\":[33,40]},"
            "\"g\":{\"dtype\":\"I32\",\"shape\":[0],\"data_offsets\":[48,48]},"
            "\"h\":{\"dtype\":\"U64\",\"shape\":[2],\"data_offsets\":[48,64]}}",
            &d);
    st_file("padded",
            "{\"x\":{\"dtype\":\"I8\",\"shape\":[3,1],"
            "\"data_offsets\":[0,3]}}     ",
            &(buf){d.p, 3, 3});
    free(d.p);
}

/* ---- MindSpore .ckpt: protobuf Checkpoint { repeated Value value = 1 },
 * Value { tag = 1; TensorProto tensor = 2 }, TensorProto { repeated int64
 * dims = 1; tensor_type = 2; tensor_content = 3 }. */

static void pb_varint(buf *b, uint64_t v)
{
    while (v >= 0x80) {
        putc8(b, (int)(v & 0x7f) | 0x80);
        v >>= 7;
    }
    putc8(b, (int)v);
}

static void pb_len(buf *b, int field, const void *d, size_t n)
{
    pb_varint(b, (uint64_t)field << 3 | 2);
    pb_varint(b, n);
    put(b, d, n);
}

/* One Value: dims (packed or one varint each), type, content of numel
 * elements of esize bytes (a smooth pattern). */
static void ms_value(buf *ck, const char *tag, const char *type, int esize,
                     const int64_t *dims, int ndim, int packed)
{
    buf t = {0}, v = {0}, pk = {0};
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= dims[i];
    if (packed) {
        for (int i = 0; i < ndim; i++)
            pb_varint(&pk, (uint64_t)dims[i]);
        pb_len(&t, 1, pk.p, pk.n);
    } else {
        for (int i = 0; i < ndim; i++) {
            pb_varint(&t, 1 << 3 | 0);
            pb_varint(&t, (uint64_t)dims[i]);
        }
    }
    pb_len(&t, 2, type, strlen(type));
    buf c = {0};
    for (int64_t i = 0; i < numel * esize; i++)
        putc8(&c, (int)((i * 37 + 11) & 0x3f)); /* finite halves */
    if (strcmp(type, "Float32") == 0)
        for (int64_t i = 0; i < numel; i++) {
            float f = 0.01f * (float)(i % 97) - 0.3f;
            memcpy(c.p + 4 * i, &f, 4);
        }
    pb_len(&t, 3, c.p ? c.p : (uint8_t *)"", c.n);
    pb_len(&v, 1, tag, strlen(tag));
    pb_len(&v, 2, t.p, t.n);
    pb_len(ck, 1, v.p, v.n);
    free(t.p);
    free(v.p);
    free(pk.p);
    free(c.p);
}

static void ckpt_seeds(void)
{
    /* mindcv names of a cifar-stem resnet18 (conv1 3x3, 64 channels), the
     * optimizer's entries and the scalars a training run saves. */
    buf a = {0};
    ms_value(&a, "conv1.weight", "Float32", 4, (int64_t[]){64, 3, 3, 3}, 4, 0);
    ms_value(&a, "bn1.gamma", "Float32", 4, (int64_t[]){64}, 1, 0);
    ms_value(&a, "bn1.beta", "Float32", 4, (int64_t[]){64}, 1, 0);
    ms_value(&a, "bn1.moving_mean", "Float32", 4, (int64_t[]){64}, 1, 0);
    ms_value(&a, "bn1.moving_variance", "Float32", 4, (int64_t[]){64}, 1, 0);
    ms_value(&a, "moments.bn1.gamma", "Float32", 4, (int64_t[]){64}, 1, 0);
    ms_value(&a, "learning_rate", "Float32", 4, NULL, 0, 0);
    ms_value(&a, "global_step", "Int32", 4, (int64_t[]){1}, 1, 0);
    save("ckpt", "mindcv-stem.ckpt", &a);
    free(a.p);
    /* Model-zoo wrappers and head names, half precision, packed dims. */
    buf b = {0};
    ms_value(&b, "network.backbone.end_point.weight", "Float16", 2,
             (int64_t[]){10, 512}, 2, 1);
    ms_value(&b, "network.backbone.end_point.bias", "Float16", 2,
             (int64_t[]){10}, 1, 1);
    ms_value(&b, "layer1.0.down_sample_layer.0.weight", "BFloat16", 2,
             (int64_t[]){64, 64, 1, 1}, 4, 1);
    ms_value(&b, "layer1.0.bn1d.gamma", "Float64", 8, (int64_t[]){64}, 1, 0);
    save("ckpt", "zoo-head.ckpt", &b);
    free(b.p);
    /* Odd but legal: a string tensor, an empty tensor, an unknown type. */
    buf c = {0};
    ms_value(&c, "scale_sense", "Float32", 4, (int64_t[]){1}, 1, 0);
    ms_value(&c, "note", "String", 1, (int64_t[]){5}, 1, 0);
    ms_value(&c, "empty", "Float32", 4, (int64_t[]){0, 3}, 2, 0);
    ms_value(&c, "fc.weight", "Int8", 1, (int64_t[]){10, 512}, 2, 0);
    save("ckpt", "odd.ckpt", &c);
    free(c.p);
    /* The same name twice (a sliced tensor). */
    buf d = {0};
    ms_value(&d, "fc.bias", "Float32", 4, (int64_t[]){10}, 1, 0);
    ms_value(&d, "fc.bias", "Float32", 4, (int64_t[]){10}, 1, 0);
    save("ckpt", "twice.ckpt", &d);
    free(d.p);
}

static void text(const char *target, const char *name, const char *s)
{
    buf b = {(uint8_t *)(uintptr_t)s, strlen(s), 0};
    save(target, name, &b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_corpus OUTDIR\n");
        return 2;
    }
    outdir = argv[1];
    idx_seeds();
    cifar_bin_seeds();
    cifar_tar_seeds();
    png_one("gray8.png", 5, 3, PNG_COLOR_TYPE_GRAY, 8, PNG_INTERLACE_NONE);
    png_one("gray1.png", 9, 2, PNG_COLOR_TYPE_GRAY, 1, PNG_INTERLACE_NONE);
    png_one("rgb8-adam7.png", 7, 7, PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_ADAM7);
    png_one("rgba16.png", 3, 4, PNG_COLOR_TYPE_RGBA, 16, PNG_INTERLACE_NONE);
    png_one("ga8.png", 4, 4, PNG_COLOR_TYPE_GRAY_ALPHA, 8, PNG_INTERLACE_NONE);
    png_one("pal2.png", 6, 3, PNG_COLOR_TYPE_PALETTE, 2, PNG_INTERLACE_NONE);
    jpeg_one("gray.jpg", 8, 8, 1, 0, 75);
    jpeg_one("rgb.jpg", 17, 9, 3, 0, 90);
    jpeg_one("rgb-prog.jpg", 33, 20, 3, 1, 50);
    jpeg_one("rgb-big.jpg", 64, 48, 3, 0, 30);
    st_seeds();
    ckpt_seeds();
    text("json", "obj",
         "{\"a\": [1, -2.5e3, true, false, null], \"b\": "
         "{\"c\": \"x\\u00e9\\ud83d\\ude00\\n\"}}");
    text("json", "nums",
         "[0, -0, 1e308, 9223372036854775807, "
         "-9223372036854775808, 1.5E-7, 12345678901234567890]");
    text("json", "str", "\"caf\xc3\xa9 \\\"q\\\" \\/ \\t\\u0000\"");
    text("json", "nested", "[[[[{\"k\":[{}]}]]]]");
    text("json", "metrics",
         "{\"epoch\": 1, \"step\": 20, \"loss\": 2.3025, "
         "\"lr\": 0.1, \"acc1\": 0.125}");
    text("yaml", "recipe",
         "# ResNet-50 on ImageNet\n"
         "dataset: imagefolder\ndata_dir: /data/imagenet\n"
         "model: resnet50\nbatch_size: 32\nimage_size: 224\n"
         "epoch_size: 90\nlr: 0.1\nmomentum: 0.9\nweight_decay: 1e-4\n"
         "scheduler: multi_step\nmilestones: [30, 60, 80]\n"
         "mean: [0.485, 0.456, 0.406]\nstd: [0.229, 0.224, 0.225]\n"
         "hflip: 0.5\nscale: [0.08, 1.0]\nratio: [0.75, 1.333]\n"
         "amp_level: O0\nnesterov: true\n");
    text("yaml", "small",
         "dataset: fashion_mnist\nmodel: resnet18\nstem: cifar\n"
         "in_channels: 1\nimage_size: 28\nopt: adamw\nlr: 0.001\n"
         "label_smoothing: 0.1\nmixup: 0.2\ncutmix: 1.0\n"
         "color_jitter: [0.4, 0.4, 0.4]\nmean: [0.5]\nstd: [0.5]\n");
    text("yaml", "flow",
         "{model: resnet34, lr: 0.05, batch_size: 64, "
         "scheduler: cosine_decay, warmup_epochs: 5}\n");
    text("yaml", "doc", "---\nseed: 7\nlog_level: debug\nbackend: ref\n...\n");
    text("class_indexing", "plain", "bird 0\ncat 1\ndog 2\n");
    text("class_indexing", "reordered",
         "# comment\n\ndog\t0\n  cat 2  \nbird 1\n");
    text("class_indexing", "subset", "cat 0\ndog 1\n");
    return 0;
}
