/* Internals shared by the data readers: the dataset struct and helpers. */
#ifndef CL_DATA_INTERNAL_H
#define CL_DATA_INTERNAL_H

#include <stdint.h>
#include <zlib.h>

#include "data/data.h"

struct cl_dataset {
    const char *format; /* static string */
    int64_t count;
    int num_classes;
    char **class_names; /* (num_classes) */
    int32_t *labels;    /* labels: (count) */
    /* In-memory formats (IDX, CIFAR). */
    uint8_t *pixels; /* pixels: (count, h, w, c) */
    int h, w, c;
    /* ImageFolder: only paths are kept; images decode lazily. */
    char *root;
    char *pool;        /* "class/file\0" strings */
    int64_t *path_off; /* path_off: (count) offsets into pool */
    int64_t ignored;
    cl_bad_image_policy policy;
    uint64_t max_pixels;
};

/* Allocates num_classes name slots (NULL-filled). */
cl_status cl__dataset_alloc_names(cl_dataset *ds, int n);
/* strdup through cl_alloc. */
char *cl__strdup(const char *s, const char *what);

/* Reads exactly n bytes from a gzip (or plain: zlib reads it as is)
 * stream, growing the buffer as data arrives so a lying header cannot make
 * us allocate more than about twice what the file holds.  *got receives
 * the bytes read; short reads are not an error here. */
cl_status cl__gz_read_n(gzFile f, const char *name, size_t n, uint8_t **out,
                        size_t *got);
/* Bytes left in the stream after the current position (up to limit). */
size_t cl__gz_count_rest(gzFile f, size_t limit);

/* A minimal ustar/GNU tar reader over a (gzip-compressed or plain) stream:
 * regular-file members in archive order, everything else skipped. */
typedef struct cl__tar {
    gzFile f;
    const char *path;
    uint64_t off;    /* stream offset of the next header */
    char name[1024]; /* current member's path */
    uint64_t size;   /* current member's size */
    int pending;     /* member data not yet consumed */
} cl__tar;

cl_status cl__tar_open(cl__tar *t, const char *path);
/* Advances to the next regular file; *more = 0 at the end. */
cl_status cl__tar_next(cl__tar *t, int *more);
/* Reads the current member (size <= max_bytes) into a new buffer. */
cl_status cl__tar_read(cl__tar *t, size_t max_bytes, uint8_t **buf,
                       size_t *len);
void cl__tar_close(cl__tar *t);

/* Readers, each filling a zeroed cl_dataset. */
cl_status cl__idx_open(cl_dataset *ds, const cl_dataset_spec *spec,
                       int fashion);
cl_status cl__cifar_open(cl_dataset *ds, const cl_dataset_spec *spec,
                         int hundred);
cl_status cl__imagefolder_open(cl_dataset *ds, const cl_dataset_spec *spec);

/* 1 if path is a directory, 0 if something else exists, -1 if nothing. */
int cl__path_kind(const char *path);
/* Concatenates a/b into out (size cap); CL_ERR_LIMIT if too long. */
cl_status cl__path_join(char *out, size_t cap, const char *a, const char *b);

/* The AutoAugment family (autoaugment.c): torchvision's op list, in its
 * order, applied to 8-bit HWC images. */
enum {
    CL__AUG_IDENTITY,
    CL__AUG_SHEAR_X,
    CL__AUG_SHEAR_Y,
    CL__AUG_TRANSLATE_X,
    CL__AUG_TRANSLATE_Y,
    CL__AUG_ROTATE,
    CL__AUG_BRIGHTNESS,
    CL__AUG_COLOR,
    CL__AUG_CONTRAST,
    CL__AUG_SHARPNESS,
    CL__AUG_POSTERIZE,
    CL__AUG_SOLARIZE,
    CL__AUG_AUTOCONTRAST,
    CL__AUG_EQUALIZE,
    CL__AUG_OP_COUNT
};
enum {
    CL__AUG_BINS = 31,   /* num_magnitude_bins of both policies */
    CL__AUG_MAX_OPS = 16 /* the most RandAugment ops per image */
};

const char *cl__aug_op_name(int op);
/* Bin `bin` (0..30) of op's magnitudes under policy (CL_AUTO_AUGMENT_*),
 * unsigned; h, w size RandAugment's translations.  0 for the ops without a
 * magnitude. */
double cl__aug_magnitude(int policy, int op, int bin, int h, int w);
/* Draws the policy's ops and signed magnitudes from r, in the order they
 * apply; returns how many (1 for TrivialAugmentWide, num_ops else). */
int cl__aug_draw(int policy, int num_ops, int magnitude, int h, int w,
                 cl_rng *r, int *ops, double *mags);
/* One op on img: (h, w, c) uint8, in place; tmp: h * w * c bytes. */
void cl__aug_apply_op(uint8_t *img, uint8_t *tmp, int h, int w, int c, int op,
                      double mag);
/* cl__aug_draw, then each op in turn. */
void cl__aug_apply(int policy, int num_ops, int magnitude, uint8_t *img,
                   uint8_t *tmp, int h, int w, int c, cl_rng *r);

#endif
