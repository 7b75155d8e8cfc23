/* Dataset front end: opening by format and the accessors (the readers' shared
 * file helpers are files.c). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/mem.h"
#include "data/data_internal.h"

cl_dataset_spec cl_dataset_spec_default(void)
{
    cl_dataset_spec s;
    memset(&s, 0, sizeof s);
    s.usage = CL_USAGE_TRAIN;
    s.on_bad_image = CL_BAD_IMAGE_FAIL;
    return s;
}

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* The readers as the format list calls them: variant picks a reader's
 * format (Fashion-MNIST or MNIST, CIFAR-100 or CIFAR-10). */
typedef cl_status (*open_fn)(cl_dataset *ds, const cl_dataset_spec *spec,
                             int variant);

static cl_status open_idx(cl_dataset *ds, const cl_dataset_spec *spec,
                          int fashion)
{
    return cl__idx_open(ds, spec, fashion);
}

static cl_status open_cifar(cl_dataset *ds, const cl_dataset_spec *spec,
                            int hundred)
{
    return cl__cifar_open(ds, spec, hundred);
}

static cl_status open_imagefolder(cl_dataset *ds, const cl_dataset_spec *spec,
                                  int variant)
{
    (void)variant;
    return cl__imagefolder_open(ds, spec);
}

/* Every line of data/formats.def, in its order (FORMAT_IDX indexes it). */
enum {
#define CL_DATA_FORMAT(E, name, alias, reader, variant, recipe) FORMAT_##E,
#include "data/formats.def"
#undef CL_DATA_FORMAT
    N_FORMATS
};
static const struct {
    const char *name, *alias;
    open_fn open;
    int variant;
} FORMATS[N_FORMATS] = {
#define CL_DATA_FORMAT(E, name, alias, reader, variant, recipe)                \
    {name, alias, open_##reader, variant},
#include "data/formats.def"
#undef CL_DATA_FORMAT
};
/* Their names, ", "-separated (each line adds ", name"; the list starts
 * past the first separator). */
static const char FORMAT_LIST[] = ""
#define CL_DATA_FORMAT(E, name, alias, reader, variant, recipe) ", " name
#include "data/formats.def"
#undef CL_DATA_FORMAT
    ;

/* Picks a format from what the path looks like: its index, or -1. */
static int guess_format(const char *path)
{
    char buf[4096];
    if (!path || !path[0])
        return FORMAT_FASHION_MNIST;
    if (has_suffix(path, ".tar.gz") || has_suffix(path, ".tgz")) {
        if (strstr(path, "100"))
            return FORMAT_CIFAR100;
        return FORMAT_CIFAR10;
    }
    if (strstr(path, "idx3-ubyte"))
        return FORMAT_IDX;
    static const struct {
        const char *file;
        int format;
    } probes[] = {
        {"data_batch_1.bin", FORMAT_CIFAR10},
        {"cifar-10-batches-bin/data_batch_1.bin", FORMAT_CIFAR10},
        {"train.bin", FORMAT_CIFAR100},
        {"cifar-100-binary/train.bin", FORMAT_CIFAR100},
        {"train-images-idx3-ubyte.gz", FORMAT_IDX},
        {"train-images-idx3-ubyte", FORMAT_IDX},
        {"t10k-images-idx3-ubyte.gz", FORMAT_IDX},
        {"t10k-images-idx3-ubyte", FORMAT_IDX},
    };
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        if (cl__path_join(buf, sizeof buf, path, probes[i].file) == CL_OK &&
            cl__path_kind(buf) == 0)
            return probes[i].format;
    }
    if (cl__path_kind(path) == 1)
        return FORMAT_IMAGEFOLDER;
    return -1;
}

/* The format called name (either spelling), or -1. */
static int find_format(const char *name)
{
    for (int i = 0; i < N_FORMATS; i++)
        if (strcmp(name, FORMATS[i].name) == 0 ||
            (FORMATS[i].alias[0] && strcmp(name, FORMATS[i].alias) == 0))
            return i;
    return -1;
}

cl_status cl_dataset_open(cl_dataset **out, const cl_dataset_spec *spec)
{
    cl_status s;
    *out = NULL;
    cl_dataset *ds = cl_alloc_zero(sizeof *ds, "dataset");
    if (!ds)
        return CL_ERR_NOMEM;
    ds->policy = spec->on_bad_image;
    ds->max_pixels =
        spec->max_pixels ? spec->max_pixels : CL_DATA_DEFAULT_MAX_PIXELS;
    int given = spec->format && spec->format[0];
    int f = given ? find_format(spec->format) : guess_format(spec->path);
    if (f < 0 && !given) {
        s = cl_error(CL_ERR_ARG,
                     "%s: cannot tell the dataset format (not a directory, "
                     "IDX file or CIFAR archive); give format",
                     spec->path);
        goto fail;
    }
    if (spec->usage < CL_USAGE_TRAIN || spec->usage > CL_USAGE_ALL) {
        s = cl_error(CL_ERR_ARG,
                     "dataset usage %d: expected train, test or "
                     "all",
                     (int)spec->usage);
        goto fail;
    }
    if (f < 0) {
        s = cl_error(CL_ERR_ARG, "dataset format '%s': expected one of %s",
                     spec->format, FORMAT_LIST + 2);
        goto fail;
    }
    s = FORMATS[f].open(ds, spec, FORMATS[f].variant);
    if (s != CL_OK)
        goto fail;
    ds->format = FORMATS[f].name;
    *out = ds;
    return CL_OK;
fail:
    cl_dataset_close(ds);
    return s;
}

void cl_dataset_close(cl_dataset *ds)
{
    if (!ds)
        return;
    if (ds->class_names)
        for (int k = 0; k < ds->num_classes; k++)
            cl_free(ds->class_names[k]);
    cl_free(ds->class_names);
    cl_free(ds->labels);
    cl_free(ds->pixels);
    cl_free(ds->root);
    cl_free(ds->pool);
    cl_free(ds->path_off);
    cl_free(ds);
}

int64_t cl_dataset_count(const cl_dataset *ds)
{
    return ds->count;
}

int cl_dataset_num_classes(const cl_dataset *ds)
{
    return ds->num_classes;
}

const char *cl_dataset_class_name(const cl_dataset *ds, int k)
{
    if (k < 0 || k >= ds->num_classes || !ds->class_names[k])
        return "?";
    return ds->class_names[k];
}

int32_t cl_dataset_label(const cl_dataset *ds, int64_t i)
{
    CL_ASSERT(i >= 0 && i < ds->count);
    return ds->labels[i];
}

const char *cl_dataset_format(const cl_dataset *ds)
{
    return ds->format;
}

void cl_dataset_image_dims(const cl_dataset *ds, int *h, int *w, int *c)
{
    *h = ds->h;
    *w = ds->w;
    *c = ds->c;
}

const char *cl_dataset_path(const cl_dataset *ds, int64_t i)
{
    if (!ds->pool || i < 0 || i >= ds->count)
        return NULL;
    return ds->pool + ds->path_off[i];
}

int64_t cl_dataset_ignored_files(const cl_dataset *ds)
{
    return ds->ignored;
}

cl_bad_image_policy cl_dataset_bad_image_policy(const cl_dataset *ds)
{
    return ds->policy;
}

cl_status cl_dataset_get(const cl_dataset *ds, int64_t i, int min_side,
                         cl_image *img, int32_t *label)
{
    if (i < 0 || i >= ds->count)
        return cl_error(CL_ERR_ARG, "sample %lld: outside the dataset's %lld",
                        (long long)i, (long long)ds->count);
    if (label)
        *label = ds->labels[i];
    if (ds->pixels) {
        CL_TRY(cl_image_reserve(img, ds->h, ds->w, ds->c));
        size_t sz = (size_t)ds->h * (size_t)ds->w * (size_t)ds->c;
        memcpy(img->data, ds->pixels + (size_t)i * sz, sz);
        return CL_OK;
    }
    char path[4096];
    CL_TRY(
        cl__path_join(path, sizeof path, ds->root, ds->pool + ds->path_off[i]));
    return cl_image_load(path, min_side, ds->max_pixels, img);
}
