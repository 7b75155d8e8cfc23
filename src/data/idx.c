/* IDX reader (MNIST, Fashion-MNIST): plain or gzip files, fully checked. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "data/data_internal.h"

static const char *const fashion_names[10] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

/* The largest side an IDX image may have (MNIST is 28). */
#define IDX_MAX_SIDE 4096

static uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
           ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* One images file and one labels file, appended to (pix, lab). */
typedef struct idx_part {
    uint8_t *pix;
    uint8_t *lab;
    int64_t n;
    int rows, cols;
} idx_part;

static cl_status read_header(gzFile f, const char *path, uint32_t magic,
                             const char *what, uint32_t *dims, int ndim)
{
    uint8_t hdr[16];
    int want = 4 + 4 * ndim;
    int r = gzread(f, hdr, (unsigned)want);
    if (r < 4)
        return cl_error(CL_ERR_FORMAT,
                        "%s: truncated: %d bytes, shorter than an IDX header",
                        base_name(path), r < 0 ? 0 : r);
    uint32_t m = be32(hdr);
    if (m != magic)
        return cl_error(CL_ERR_FORMAT,
                        "%s: IDX magic is 0x%08x, expected "
                        "0x%08x (%s)",
                        base_name(path), m, magic, what);
    if (r < want)
        return cl_error(CL_ERR_FORMAT, "%s: truncated inside the IDX header",
                        base_name(path));
    for (int d = 0; d < ndim; d++)
        dims[d] = be32(hdr + 4 + 4 * d);
    return CL_OK;
}

static cl_status read_images(const char *path, idx_part *p)
{
    cl_status s;
    uint32_t dims[3] = {0, 0, 0};
    size_t got = 0, need = 0;
    const char *bn = base_name(path);
    gzFile f = gzopen(path, "rb");
    if (!f)
        return cl_error(CL_ERR_IO, "%s: cannot open", path);
    s = read_header(f, path, 0x00000803u, "images", dims, 3);
    if (s != CL_OK)
        goto fail;
    if (dims[0] == 0 || dims[0] > INT32_MAX || dims[1] == 0 || dims[2] == 0 ||
        dims[1] > IDX_MAX_SIDE || dims[2] > IDX_MAX_SIDE) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: IDX dims %u x %u x %u are out of range (expected "
                     "1..2^31 images of 1..%d pixels a side)",
                     bn, dims[0], dims[1], dims[2], IDX_MAX_SIDE);
        goto fail;
    }
    p->n = dims[0];
    p->rows = (int)dims[1];
    p->cols = (int)dims[2];
    s = cl_mul_size((size_t)dims[0], (size_t)dims[1] * dims[2], &need, bn);
    if (s != CL_OK)
        goto fail;
    s = cl__gz_read_n(f, bn, need, &p->pix, &got);
    if (s != CL_OK)
        goto fail;
    if (got < need) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: truncated: header says %u images of %ux%u (%zu "
                     "bytes of pixels), file holds %zu",
                     bn, dims[0], dims[1], dims[2], need, got);
        goto fail;
    }
    size_t extra = cl__gz_count_rest(f, (size_t)1 << 30);
    if (extra) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: oversized: %zu bytes after the %u images the "
                     "header declares",
                     bn, extra, dims[0]);
        goto fail;
    }
    gzclose(f);
    return CL_OK;
fail:
    gzclose(f);
    return s;
}

static cl_status read_labels(const char *path, idx_part *p, int classes)
{
    cl_status s;
    uint32_t dims[1] = {0};
    size_t got = 0;
    const char *bn = base_name(path);
    gzFile f = gzopen(path, "rb");
    if (!f)
        return cl_error(CL_ERR_IO, "%s: cannot open", path);
    s = read_header(f, path, 0x00000801u, "labels", dims, 1);
    if (s != CL_OK)
        goto fail;
    if ((int64_t)dims[0] != p->n) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: IDX dims say %u labels, the images file has %lld", bn,
                     dims[0], (long long)p->n);
        goto fail;
    }
    s = cl__gz_read_n(f, bn, (size_t)p->n, &p->lab, &got);
    if (s != CL_OK)
        goto fail;
    if (got < (size_t)p->n) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: truncated: header says %u labels, file holds %zu", bn,
                     dims[0], got);
        goto fail;
    }
    size_t extra = cl__gz_count_rest(f, (size_t)1 << 30);
    if (extra) {
        s = cl_error(CL_ERR_FORMAT,
                     "%s: oversized: %zu bytes after the %u labels the "
                     "header declares",
                     bn, extra, dims[0]);
        goto fail;
    }
    for (int64_t i = 0; i < p->n; i++) {
        if (classes > 0 && p->lab[i] >= classes) {
            s = cl_error(CL_ERR_FORMAT,
                         "%s: label %d of sample %lld is >= %d classes", bn,
                         p->lab[i], (long long)i, classes);
            goto fail;
        }
    }
    gzclose(f);
    return CL_OK;
fail:
    gzclose(f);
    return s;
}

/* Finds "<dir>/<stem>" or "<dir>/<stem>.gz". */
static cl_status find_file(char *out, size_t cap, const char *dir,
                           const char *stem)
{
    char gz[512];
    snprintf(gz, sizeof gz, "%s.gz", stem);
    CL_TRY(cl__path_join(out, cap, dir, stem));
    if (cl__path_kind(out) == 0)
        return CL_OK;
    CL_TRY(cl__path_join(out, cap, dir, gz));
    if (cl__path_kind(out) == 0)
        return CL_OK;
    return cl_error(CL_ERR_IO, "%s: neither %s nor %s.gz exists", dir, stem,
                    stem);
}

/* Resolves the images/labels pair for one split (or the path given). */
static cl_status resolve_pair(const char *path, const char *split, char *img,
                              char *lab, size_t cap)
{
    char stem[256];
    if (cl__path_kind(path) == 1) {
        snprintf(stem, sizeof stem, "%s-images-idx3-ubyte", split);
        CL_TRY(find_file(img, cap, path, stem));
        snprintf(stem, sizeof stem, "%s-labels-idx1-ubyte", split);
        return find_file(lab, cap, path, stem);
    }
    const char *hit = strstr(path, "images-idx3-ubyte");
    if (hit && cl__path_kind(path) == 0) {
        size_t pre = (size_t)(hit - path);
        if (strlen(path) + 1 > cap)
            return cl_error(CL_ERR_LIMIT, "%s: path too long", path);
        snprintf(img, cap, "%s", path);
        snprintf(lab, cap, "%.*slabels-idx1-ubyte%s", (int)pre, path,
                 hit + strlen("images-idx3-ubyte"));
        if (cl__path_kind(lab) != 0)
            return cl_error(CL_ERR_IO, "%s: labels file %s not found", path,
                            lab);
        return CL_OK;
    }
    /* A prefix such as ".../train-". */
    snprintf(img, cap, "%simages-idx3-ubyte", path);
    if (cl__path_kind(img) != 0)
        snprintf(img, cap, "%simages-idx3-ubyte.gz", path);
    snprintf(lab, cap, "%slabels-idx1-ubyte", path);
    if (cl__path_kind(lab) != 0)
        snprintf(lab, cap, "%slabels-idx1-ubyte.gz", path);
    if (cl__path_kind(img) != 0 || cl__path_kind(lab) != 0)
        return cl_error(CL_ERR_IO,
                        "%s: no IDX files there (expected a directory with "
                        "train-images-idx3-ubyte[.gz] etc., an images file "
                        "or a prefix)",
                        path);
    return CL_OK;
}

cl_status cl__idx_open(cl_dataset *ds, const cl_dataset_spec *spec, int fashion)
{
    cl_status s = CL_OK;
    idx_part parts[2];
    int nparts = 0;
    char img[4096], lab[4096];
    memset(parts, 0, sizeof parts);
    const char *path = spec->path && spec->path[0]
                           ? spec->path
                           : (fashion ? CL_DATASET_FASHION_MNIST_DIR : NULL);
    if (!path)
        return cl_error(CL_ERR_ARG, "idx dataset: no path given");
    if (fashion && cl__path_kind(path) < 0)
        return cl_error(CL_ERR_IO,
                        "%s: Fashion-MNIST not found (Debian package "
                        "dataset-fashion-mnist installs it)",
                        path);
    int classes =
        spec->num_classes > 0
            ? spec->num_classes
            : (spec->format && strcmp(spec->format, "idx") == 0 ? 256 : 10);
    const char *splits[2];
    int nsplits = 0;
    int single = cl__path_kind(path) != 1;
    if (single || spec->usage == CL_USAGE_TRAIN)
        splits[nsplits++] = "train";
    else if (spec->usage == CL_USAGE_TEST)
        splits[nsplits++] = "t10k";
    if (!single && spec->usage == CL_USAGE_ALL) {
        splits[nsplits++] = "train";
        splits[nsplits++] = "t10k";
    }
    int64_t total = 0;
    for (int k = 0; k < nsplits; k++) {
        s = resolve_pair(path, splits[k], img, lab, sizeof img);
        if (s != CL_OK)
            goto done;
        s = read_images(img, &parts[k]);
        if (s != CL_OK)
            goto done;
        nparts++;
        s = read_labels(lab, &parts[k], classes);
        if (s != CL_OK)
            goto done;
        if (k > 0 && (parts[k].rows != parts[0].rows ||
                      parts[k].cols != parts[0].cols)) {
            s = cl_error(CL_ERR_FORMAT,
                         "%s: images are %dx%d, the train split's are %dx%d",
                         img, parts[k].rows, parts[k].cols, parts[0].rows,
                         parts[0].cols);
            goto done;
        }
        total += parts[k].n;
    }
    ds->format = fashion ? "fashion_mnist"
                 : (spec->format && strcmp(spec->format, "mnist") == 0)
                     ? "mnist"
                     : "idx";
    ds->h = parts[0].rows;
    ds->w = parts[0].cols;
    ds->c = 1;
    ds->count = total;
    size_t isz = (size_t)ds->h * (size_t)ds->w;
    if (nparts == 1) {
        ds->pixels = parts[0].pix;
        parts[0].pix = NULL;
    } else {
        ds->pixels = cl_alloc((size_t)total * isz, "IDX pixels");
        if (!ds->pixels) {
            s = CL_ERR_NOMEM;
            goto done;
        }
        size_t off = 0;
        for (int k = 0; k < nparts; k++) {
            memcpy(ds->pixels + off, parts[k].pix, (size_t)parts[k].n * isz);
            off += (size_t)parts[k].n * isz;
        }
    }
    ds->labels = cl_alloc((size_t)total * sizeof(int32_t), "IDX labels");
    if (!ds->labels) {
        s = CL_ERR_NOMEM;
        goto done;
    }
    int maxlab = 0;
    int64_t o = 0;
    for (int k = 0; k < nparts; k++)
        for (int64_t i = 0; i < parts[k].n; i++) {
            ds->labels[o++] = parts[k].lab[i];
            if (parts[k].lab[i] > maxlab)
                maxlab = parts[k].lab[i];
        }
    int ncls = spec->num_classes > 0 ? spec->num_classes
                                     : (classes == 10 ? 10 : maxlab + 1);
    s = cl__dataset_alloc_names(ds, ncls);
    if (s != CL_OK)
        goto done;
    for (int k = 0; k < ncls; k++) {
        char nm[32];
        snprintf(nm, sizeof nm, "%d", k);
        ds->class_names[k] = cl__strdup(
            fashion && ncls == 10 ? fashion_names[k] : nm, "class name");
        if (!ds->class_names[k]) {
            s = CL_ERR_NOMEM;
            goto done;
        }
    }
done:
    for (int k = 0; k < 2; k++) {
        cl_free(parts[k].pix);
        cl_free(parts[k].lab);
    }
    return s;
}
