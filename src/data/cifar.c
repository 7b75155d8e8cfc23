/* CIFAR-10 / CIFAR-100 binary reader: the extracted folder or the
 * downloaded .tar.gz read directly, records checked, planes to HWC. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "data/data_internal.h"

#define CIFAR_PIXELS 3072
/* More records than the largest real file (CIFAR-100 train, 50000). */
#define CIFAR_MAX_RECORDS 60000
#define CIFAR_MAX_BYTES ((size_t)CIFAR_MAX_RECORDS * (CIFAR_PIXELS + 2))

/* The member files one usage needs, in the order their records go. */
typedef struct cifar_files {
    const char *names[6];
    int n;
    const char *meta; /* class names, one a line */
    const char *dir;  /* folder inside the archive */
    int label_bytes;  /* 1 (CIFAR-10) or 2 (coarse, fine) */
    int classes;
} cifar_files;

static void pick_files(cifar_files *cf, int hundred, cl_data_usage usage)
{
    memset(cf, 0, sizeof *cf);
    if (hundred) {
        if (usage != CL_USAGE_TEST)
            cf->names[cf->n++] = "train.bin";
        if (usage != CL_USAGE_TRAIN)
            cf->names[cf->n++] = "test.bin";
        cf->meta = "fine_label_names.txt";
        cf->dir = "cifar-100-binary";
        cf->label_bytes = 2;
        cf->classes = 100;
        return;
    }
    static const char *const train[5] = {"data_batch_1.bin", "data_batch_2.bin",
                                         "data_batch_3.bin", "data_batch_4.bin",
                                         "data_batch_5.bin"};
    if (usage != CL_USAGE_TEST)
        for (int i = 0; i < 5; i++)
            cf->names[cf->n++] = train[i];
    if (usage != CL_USAGE_TRAIN)
        cf->names[cf->n++] = "test_batch.bin";
    cf->meta = "batches.meta.txt";
    cf->dir = "cifar-10-batches-bin";
    cf->label_bytes = 1;
    cf->classes = 10;
}

/* Checks one file's records; returns their count in *n. */
static cl_status check_records(const char *name, const cifar_files *cf,
                               const uint8_t *buf, size_t len, int64_t *n)
{
    size_t rec = (size_t)cf->label_bytes + CIFAR_PIXELS;
    if (len == 0)
        return cl_error(CL_ERR_FORMAT,
                        "%s: empty file, expected %zu-byte "
                        "records",
                        name, rec);
    if (len % rec != 0)
        return cl_error(CL_ERR_FORMAT,
                        "%s: %zu bytes is not a whole number of %zu-byte "
                        "records (truncated or oversized: %zu bytes left "
                        "over)",
                        name, len, rec, len % rec);
    if (len / rec > CIFAR_MAX_RECORDS)
        return cl_error(CL_ERR_FORMAT,
                        "%s: oversized: %zu records, more than the %d a "
                        "CIFAR file holds",
                        name, len / rec, CIFAR_MAX_RECORDS);
    for (size_t i = 0; i < len / rec; i++) {
        const uint8_t *r = buf + i * rec;
        int lab = r[cf->label_bytes - 1];
        if (cf->label_bytes == 2 && r[0] >= 20)
            return cl_error(CL_ERR_FORMAT,
                            "%s: coarse label %d of record %zu is >= 20 "
                            "classes",
                            name, r[0], i);
        if (lab >= cf->classes)
            return cl_error(CL_ERR_FORMAT,
                            "%s: label %d of record %zu is >= %d classes", name,
                            lab, i, cf->classes);
    }
    *n = (int64_t)(len / rec);
    return CL_OK;
}

/* Reads a plain file of at most max bytes. */
static cl_status read_plain(const char *path, size_t max, uint8_t **buf,
                            size_t *len)
{
    gzFile f = gzopen(path, "rb");
    if (!f)
        return cl_error(CL_ERR_IO, "%s: cannot open", path);
    cl_status s = cl__gz_read_n(f, path, max + 1, buf, len);
    gzclose(f);
    if (s == CL_OK && *len > max) {
        cl_free(*buf);
        *buf = NULL;
        return cl_error(CL_ERR_FORMAT, "%s: oversized: more than %zu bytes",
                        path, max);
    }
    return s;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Class names from the meta text (blank lines ignored). */
static cl_status parse_meta(cl_dataset *ds, const char *name,
                            const uint8_t *buf, size_t len, int classes)
{
    int k = 0;
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && buf[j] != '\n')
            j++;
        size_t a = i, b = j;
        while (a < b && isspace(buf[a]))
            a++;
        while (b > a && isspace(buf[b - 1]))
            b--;
        if (b > a) {
            if (k >= classes)
                return cl_error(CL_ERR_FORMAT, "%s: more than %d class names",
                                name, classes);
            char *s = cl_alloc(b - a + 1, "class name");
            if (!s)
                return CL_ERR_NOMEM;
            memcpy(s, buf + a, b - a);
            s[b - a] = '\0';
            ds->class_names[k++] = s;
        }
        i = j + 1;
    }
    if (k != classes)
        return cl_error(CL_ERR_FORMAT, "%s: %d class names, expected %d", name,
                        k, classes);
    return CL_OK;
}

cl_status cl__cifar_open(cl_dataset *ds, const cl_dataset_spec *spec,
                         int hundred)
{
    cifar_files cf;
    uint8_t *data[6] = {NULL};
    size_t len[6] = {0};
    int64_t nrec[6] = {0};
    uint8_t *meta = NULL;
    size_t meta_len = 0;
    char dir[4096], p[4096];
    cl_status s = CL_OK;
    pick_files(&cf, hundred, spec->usage);
    const char *path = spec->path;
    if (!path || !path[0])
        return cl_error(CL_ERR_ARG, "cifar dataset: no path given");
    int kind = cl__path_kind(path);
    if (kind < 0)
        return cl_error(CL_ERR_IO, "%s: no such file or directory", path);
    if (kind == 0) {
        /* The archive: members matched by their base name. */
        cl__tar t;
        s = cl__tar_open(&t, path);
        if (s != CL_OK)
            return s;
        for (;;) {
            int more = 0;
            s = cl__tar_next(&t, &more);
            if (s != CL_OK || !more)
                break;
            const char *bn = base_name(t.name);
            int slot = -1;
            for (int i = 0; i < cf.n; i++)
                if (strcmp(bn, cf.names[i]) == 0)
                    slot = i;
            if (slot >= 0 && !data[slot]) {
                s = cl__tar_read(&t, CIFAR_MAX_BYTES + 1, &data[slot],
                                 &len[slot]);
                if (s != CL_OK)
                    break;
            } else if (strcmp(bn, cf.meta) == 0 && !meta) {
                s = cl__tar_read(&t, 1 << 20, &meta, &meta_len);
                if (s != CL_OK)
                    break;
            }
        }
        cl__tar_close(&t);
        if (s != CL_OK)
            goto done;
        for (int i = 0; i < cf.n; i++)
            if (!data[i]) {
                s = cl_error(CL_ERR_FORMAT, "%s: archive has no %s", path,
                             cf.names[i]);
                goto done;
            }
    } else {
        /* The extracted folder or the folder holding it. */
        s = cl__path_join(dir, sizeof dir, path, cf.dir);
        if (s != CL_OK)
            goto done;
        if (cl__path_kind(dir) != 1)
            snprintf(dir, sizeof dir, "%s", path);
        for (int i = 0; i < cf.n; i++) {
            s = cl__path_join(p, sizeof p, dir, cf.names[i]);
            if (s != CL_OK)
                goto done;
            if (cl__path_kind(p) != 0) {
                s = cl_error(CL_ERR_IO, "%s: no %s there", dir, cf.names[i]);
                goto done;
            }
            s = read_plain(p, CIFAR_MAX_BYTES, &data[i], &len[i]);
            if (s != CL_OK)
                goto done;
        }
        s = cl__path_join(p, sizeof p, dir, cf.meta);
        if (s != CL_OK)
            goto done;
        if (cl__path_kind(p) == 0) {
            s = read_plain(p, 1 << 20, &meta, &meta_len);
            if (s != CL_OK)
                goto done;
        }
    }
    int64_t total = 0;
    for (int i = 0; i < cf.n; i++) {
        s = check_records(cf.names[i], &cf, data[i], len[i], &nrec[i]);
        if (s != CL_OK)
            goto done;
        total += nrec[i];
    }
    ds->format = hundred ? "cifar100" : "cifar10";
    ds->h = ds->w = 32;
    ds->c = 3;
    ds->count = total;
    ds->pixels = cl_alloc((size_t)total * CIFAR_PIXELS, "CIFAR pixels");
    ds->labels = cl_alloc((size_t)total * sizeof(int32_t), "CIFAR labels");
    if (!ds->pixels || !ds->labels) {
        s = CL_ERR_NOMEM;
        goto done;
    }
    size_t rec = (size_t)cf.label_bytes + CIFAR_PIXELS;
    int64_t o = 0;
    for (int i = 0; i < cf.n; i++)
        for (int64_t r = 0; r < nrec[i]; r++, o++) {
            const uint8_t *src = data[i] + (size_t)r * rec;
            ds->labels[o] = src[cf.label_bytes - 1];
            /* Records hold R, G and B planes; we keep HWC. */
            const uint8_t *pl = src + cf.label_bytes;
            uint8_t *dst = ds->pixels + (size_t)o * CIFAR_PIXELS;
            for (int q = 0; q < 1024; q++) {
                dst[3 * q] = pl[q];
                dst[3 * q + 1] = pl[1024 + q];
                dst[3 * q + 2] = pl[2048 + q];
            }
        }
    s = cl__dataset_alloc_names(ds, cf.classes);
    if (s != CL_OK)
        goto done;
    if (meta) {
        s = parse_meta(ds, cf.meta, meta, meta_len, cf.classes);
        if (s != CL_OK)
            goto done;
    } else {
        /* No meta file: numbered classes rather than a refusal. */
        for (int k = 0; k < cf.classes; k++) {
            char nm[16];
            snprintf(nm, sizeof nm, "%d", k);
            ds->class_names[k] = cl__strdup(nm, "class name");
            if (!ds->class_names[k]) {
                s = CL_ERR_NOMEM;
                goto done;
            }
        }
    }
done:
    for (int i = 0; i < 6; i++)
        cl_free(data[i]);
    cl_free(meta);
    return s;
}
