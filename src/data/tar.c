/* A small tar reader (ustar, GNU long names) over zlib's gzFile, so a
 * downloaded .tar.gz is read in one pass without extracting it. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "data/data_internal.h"

static uint64_t round512(uint64_t n)
{
    return (n + 511) / 512 * 512;
}

cl_status cl__tar_open(cl__tar *t, const char *path)
{
    memset(t, 0, sizeof *t);
    t->path = path;
    t->f = gzopen(path, "rb");
    if (!t->f)
        return cl_error(CL_ERR_IO, "%s: cannot open", path);
    gzbuffer(t->f, 1 << 17);
    return CL_OK;
}

void cl__tar_close(cl__tar *t)
{
    if (t->f)
        gzclose(t->f);
    t->f = NULL;
}

/* Reads exactly n bytes or reports where the archive ends. */
static cl_status read_exact(cl__tar *t, void *buf, size_t n, const char *what)
{
    size_t got = 0;
    while (got < n) {
        unsigned want = n - got > (1u << 30) ? (1u << 30) : (unsigned)(n - got);
        int r = gzread(t->f, (uint8_t *)buf + got, want);
        if (r <= 0) {
            int zerr = 0;
            const char *msg = gzerror(t->f, &zerr);
            return cl_error(CL_ERR_FORMAT,
                            "%s: truncated archive: %s ends after %zu of "
                            "%zu bytes (offset %llu)%s%s",
                            t->path, what, got, n, (unsigned long long)t->off,
                            zerr ? ": " : "", zerr ? msg : "");
        }
        got += (size_t)r;
    }
    t->off += n;
    return CL_OK;
}

static cl_status skip_bytes(cl__tar *t, uint64_t n, const char *what)
{
    uint8_t tmp[8192];
    while (n > 0) {
        size_t k = n < sizeof tmp ? (size_t)n : sizeof tmp;
        CL_TRY(read_exact(t, tmp, k, what));
        n -= k;
    }
    return CL_OK;
}

static int parse_size(const uint8_t *f, uint64_t *out)
{
    uint64_t v = 0;
    if (f[0] & 0x80) {
        /* GNU base-256 for members of 8 GiB and more. */
        for (int i = 1; i < 12; i++) {
            if (v >> 56)
                return -1;
            v = (v << 8) | f[i];
        }
        *out = v;
        return 0;
    }
    int i = 0;
    while (i < 12 && f[i] == ' ')
        i++;
    for (; i < 12 && f[i] >= '0' && f[i] <= '7'; i++)
        v = v * 8 + (uint64_t)(f[i] - '0');
    if (i < 12 && f[i] != '\0' && f[i] != ' ')
        return -1;
    *out = v;
    return 0;
}

cl_status cl__tar_next(cl__tar *t, int *more)
{
    uint8_t h[512];
    char longname[1024];
    int have_long = 0;
    *more = 0;
    if (t->pending) {
        CL_TRY(skip_bytes(t, round512(t->size), t->name));
        t->pending = 0;
    }
    for (;;) {
        uint64_t at = t->off;
        int r = gzread(t->f, h, sizeof h);
        if (r == 0)
            return CL_OK; /* end without the zero blocks: tolerated */
        if (r != (int)sizeof h)
            return cl_error(CL_ERR_FORMAT,
                            "%s: truncated archive: a header at offset %llu "
                            "is cut short",
                            t->path, (unsigned long long)at);
        t->off += 512;
        int zero = 1;
        for (int i = 0; i < 512 && zero; i++)
            zero = h[i] == 0;
        if (zero)
            return CL_OK;
        unsigned sum = 0, stored = 0;
        for (int i = 0; i < 512; i++)
            sum += (i >= 148 && i < 156) ? ' ' : h[i];
        int ci = 148;
        while (ci < 156 && h[ci] == ' ')
            ci++;
        for (; ci < 156 && h[ci] >= '0' && h[ci] <= '7'; ci++)
            stored = stored * 8 + (unsigned)(h[ci] - '0');
        if (sum != stored)
            return cl_error(CL_ERR_FORMAT,
                            "%s: not a tar archive (header checksum at "
                            "offset %llu is %u, computed %u)",
                            t->path, (unsigned long long)at, stored, sum);
        uint64_t size;
        if (parse_size(h + 124, &size) != 0)
            return cl_error(CL_ERR_FORMAT,
                            "%s: bad member size field at offset %llu", t->path,
                            (unsigned long long)at);
        char type = (char)h[156];
        if (type == 'L') {
            if (size >= sizeof longname)
                return cl_error(CL_ERR_LIMIT,
                                "%s: long member name of %llu bytes", t->path,
                                (unsigned long long)size);
            CL_TRY(read_exact(t, longname, (size_t)size, "a long name"));
            longname[size] = '\0';
            CL_TRY(skip_bytes(t, round512(size) - size, "a long name"));
            have_long = 1;
            continue;
        }
        if (type != '0' && type != '\0') {
            CL_TRY(skip_bytes(t, round512(size), "a non-file member"));
            have_long = 0;
            continue;
        }
        if (have_long) {
            snprintf(t->name, sizeof t->name, "%s", longname);
        } else {
            char name[101], prefix[156];
            memcpy(name, h, 100);
            name[100] = '\0';
            memcpy(prefix, h + 345, 155);
            prefix[155] = '\0';
            if (memcmp(h + 257, "ustar", 5) == 0 && prefix[0])
                snprintf(t->name, sizeof t->name, "%s/%s", prefix, name);
            else
                snprintf(t->name, sizeof t->name, "%s", name);
        }
        t->size = size;
        t->pending = 1;
        *more = 1;
        return CL_OK;
    }
}

cl_status cl__tar_read(cl__tar *t, size_t max_bytes, uint8_t **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    if (!t->pending)
        return cl_error(CL_ERR_ARG, "%s: no member to read", t->path);
    if (t->size > max_bytes)
        return cl_error(CL_ERR_LIMIT,
                        "%s: member %s is %llu bytes, above the %zu-byte "
                        "limit",
                        t->path, t->name, (unsigned long long)t->size,
                        max_bytes);
    size_t n = (size_t)t->size;
    uint8_t *b = NULL;
    size_t got = 0;
    /* Grows with the data, so a lying size field allocates little. */
    cl_status s = cl__gz_read_n(t->f, t->name, n, &b, &got);
    if (s == CL_ERR_FORMAT) {
        int zerr = 0;
        const char *msg = gzerror(t->f, &zerr);
        return cl_error(CL_ERR_FORMAT,
                        "%s: truncated archive: member %s (%zu bytes) is "
                        "cut short: %s",
                        t->path, t->name, n, zerr ? msg : "end of data");
    }
    if (s != CL_OK)
        return s;
    if (got < n) {
        cl_free(b);
        return cl_error(CL_ERR_FORMAT,
                        "%s: truncated archive: member %s declares %zu "
                        "bytes, the archive ends after %zu",
                        t->path, t->name, n, got);
    }
    t->off += n;
    t->pending = 0;
    s = skip_bytes(t, round512(n) - n, t->name);
    if (s != CL_OK) {
        cl_free(b);
        return s;
    }
    *buf = b;
    *len = n;
    return CL_OK;
}
