/* The dataset readers' shared helpers: strings, class-name tables, paths
 * and gzip reads.  Below every reader and the front end (dataset.c), so
 * that the readers never call back into the file that dispatches to them. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/mem.h"
#include "data/data_internal.h"

char *cl__strdup(const char *s, const char *what)
{
    size_t n = strlen(s) + 1;
    char *p = cl_alloc(n, what);
    if (p)
        memcpy(p, s, n);
    return p;
}

cl_status cl__dataset_alloc_names(cl_dataset *ds, int n)
{
    ds->class_names = cl_alloc_zero((size_t)n * sizeof(char *), "class names");
    if (!ds->class_names)
        return CL_ERR_NOMEM;
    ds->num_classes = n;
    return CL_OK;
}

int cl__path_kind(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    return S_ISDIR(st.st_mode) ? 1 : 0;
}

cl_status cl__path_join(char *out, size_t cap, const char *a, const char *b)
{
    int n = snprintf(out, cap, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= cap)
        return cl_error(CL_ERR_LIMIT, "%s/%s: path too long", a, b);
    return CL_OK;
}

cl_status cl__gz_read_n(gzFile f, const char *name, size_t n, uint8_t **out,
                        size_t *got)
{
    size_t cap = n < ((size_t)1 << 20) ? n : ((size_t)1 << 20);
    size_t have = 0;
    uint8_t *buf = cl_alloc(cap, name);
    if (!buf)
        return CL_ERR_NOMEM;
    while (have < n) {
        if (have == cap) {
            size_t ncap = cap * 2 < n ? cap * 2 : n;
            uint8_t *nb = cl_alloc(ncap, name);
            if (!nb) {
                cl_free(buf);
                return CL_ERR_NOMEM;
            }
            memcpy(nb, buf, have);
            cl_free(buf);
            buf = nb;
            cap = ncap;
        }
        size_t want = cap - have;
        if (want > (1u << 30))
            want = 1u << 30;
        int r = gzread(f, buf + have, (unsigned)want);
        if (r < 0) {
            int zerr = 0;
            const char *msg = gzerror(f, &zerr);
            cl_free(buf);
            return cl_error(CL_ERR_FORMAT, "%s: cannot decompress: %s", name,
                            msg);
        }
        if (r == 0) {
            /* zlib reports a gzip stream cut short as an error at EOF. */
            int zerr = 0;
            const char *msg = gzerror(f, &zerr);
            if (zerr != Z_OK && zerr != Z_STREAM_END) {
                cl_free(buf);
                return cl_error(CL_ERR_FORMAT,
                                "%s: truncated or corrupt gzip data after "
                                "%zu bytes: %s",
                                name, have, msg);
            }
            break;
        }
        have += (size_t)r;
    }
    *out = buf;
    *got = have;
    return CL_OK;
}

size_t cl__gz_count_rest(gzFile f, size_t limit)
{
    uint8_t tmp[4096];
    size_t total = 0;
    while (total < limit) {
        int r = gzread(f, tmp, sizeof tmp);
        if (r <= 0)
            break;
        total += (size_t)r;
    }
    return total;
}
