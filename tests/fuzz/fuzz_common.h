/* Helpers shared by the libFuzzer targets: a private scratch directory, files
 * written from (parts of) the input, optionally gzip-compressed. */
#ifndef CL_FUZZ_COMMON_H
#define CL_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "classic/status.h"
#include "data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One scratch directory per process (libFuzzer -jobs/-fork run several),
 * on tmpfs when there is one, so each execution's files cost no disk I/O. */
static char fz_dir[256];

static inline void fz_cleanup(void)
{
    char cmd[300];
    if (fz_dir[0]) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", fz_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "fuzz: could not remove %s\n", fz_dir);
    }
}

static inline const char *fz_tmpdir(void)
{
    if (fz_dir[0])
        return fz_dir;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    const char *env = getenv("CL_FUZZ_TMP");
    if (env && env[0])
        base = env;
    snprintf(fz_dir, sizeof fz_dir, "%s/clfuzz.XXXXXX", base);
    if (!mkdtemp(fz_dir)) {
        perror("fuzz: mkdtemp");
        abort(); /* the harness, not the library: nothing to fuzz without */
    }
    atexit(fz_cleanup);
    return fz_dir;
}

/* "<scratch>/<name>" in a rotating static buffer. */
static inline const char *fz_path(const char *name)
{
    static char buf[4][512];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, sizeof buf[0], "%s/%s", fz_tmpdir(), name);
    return p;
}

/* Writes bytes to path, through gzip when gz is set; aborts on I/O errors
 * (a full tmpfs would otherwise look like a parser bug). */
static inline void fz_write(const char *path, const uint8_t *d, size_t n,
                            int gz)
{
    if (gz) {
        gzFile g = gzopen(path, "wb1");
        if (!g || (n && gzwrite(g, d, (unsigned)n) != (int)n) ||
            gzclose(g) != Z_OK) {
            fprintf(stderr, "fuzz: cannot write %s\n", path);
            abort();
        }
        return;
    }
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(d, 1, n, f) != n) || fclose(f) != 0) {
        fprintf(stderr, "fuzz: cannot write %s\n", path);
        abort();
    }
}

/* Splits data after a 4-byte little-endian length L: part a is the next
 * min(L, rest) bytes, part b what follows.  Inputs shorter than 4 bytes give
 * two empty parts. */
static inline void fz_split(const uint8_t *d, size_t n, const uint8_t **a,
                            size_t *na, const uint8_t **b, size_t *nb)
{
    if (n < 4) {
        *a = *b = d;
        *na = *nb = 0;
        return;
    }
    size_t L = (size_t)d[0] | ((size_t)d[1] << 8) | ((size_t)d[2] << 16) |
               ((size_t)d[3] << 24);
    size_t rest = n - 4;
    if (L > rest)
        L = rest;
    *a = d + 4;
    *na = L;
    *b = d + 4 + L;
    *nb = rest - L;
}

/* Every failure must carry a detail message: an empty one is a bug too. */
static inline void fz_check_error(cl_status s)
{
    if (getenv("CL_FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz: %s: %s\n", cl_status_name(s),
                s == CL_OK ? "" : cl_last_error());
    if (s == CL_OK)
        return;
    const char *m = cl_last_error();
    if (!m || !m[0]) {
        fprintf(stderr, "fuzz: %s without a detail message\n",
                cl_status_name(s));
        abort();
    }
}

/* The set-up of the two-file dataset targets: input byte 0 holds flags,
 * the rest is fz_split into file a, written to path_a, and file b, written
 * to path_b (removed instead when b is empty, unless keep_empty_b).  A file
 * is gzipped when the flags byte has a bit of its gz mask.  Returns the
 * flags byte, or -1 for an empty input (nothing written). */
static inline int fz_write_pair(const uint8_t *data, size_t size,
                                const char *path_a, int gz_a,
                                const char *path_b, int gz_b, int keep_empty_b)
{
    if (size < 1)
        return -1;
    int flags = data[0];
    const uint8_t *a, *b;
    size_t na, nb;
    fz_split(data + 1, size - 1, &a, &na, &b, &nb);
    fz_write(path_a, a, na, flags & gz_a);
    if (nb || keep_empty_b)
        fz_write(path_b, b, nb, flags & gz_b);
    else
        unlink(path_b);
    return flags;
}

/* Opens spec's dataset and walks what it accepted: every class name and
 * the first max_samples samples, whose labels must lie inside the classes
 * the dataset reports (one outside them aborts, as a crash would). */
static inline void fz_walk_dataset(const cl_dataset_spec *spec,
                                   int64_t max_samples)
{
    cl_dataset *ds = NULL;
    cl_status s = cl_dataset_open(&ds, spec);
    fz_check_error(s);
    if (s != CL_OK)
        return;
    int64_t n = cl_dataset_count(ds);
    int k = cl_dataset_num_classes(ds);
    for (int c = 0; c < k; c++)
        (void)cl_dataset_class_name(ds, c);
    cl_image im = {0};
    for (int64_t i = 0; i < n && i < max_samples; i++) {
        int32_t lab = -1;
        s = cl_dataset_get(ds, i, 0, &im, &lab);
        fz_check_error(s);
        if (s == CL_OK && (lab < 0 || lab >= k))
            abort();
    }
    cl_image_free(&im);
    cl_dataset_close(ds);
}

#endif
