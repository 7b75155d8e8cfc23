/* A bounded reader of zip archives of stored entries: the central
 * directory (zip64 included), each entry's bounds and its CRC-32. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/error.h"
#include "interop/le.h"
#include "interop/zip.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_END 0x06054b50u
#define SIG_END64 0x06064b50u
#define SIG_LOCATOR64 0x07064b50u

/* Value of a zip64 extended-information field for a central-directory
 * field that is 0xFFFFFFFF; fields come in the order usize, csize, offset
 * and only those saturated are present. */
static int zip64_extra(const uint8_t *ex, size_t n, int want, int have_usize,
                       int have_csize, uint64_t *out)
{
    size_t p = 0;
    while (p + 4 <= n) {
        uint16_t id = cl_le16(ex + p), len = cl_le16(ex + p + 2);
        if (p + 4 + len > n)
            return -1;
        if (id == 1) {
            size_t at = (size_t)(want > 0 ? have_usize : 0) +
                        (size_t)(want > 1 ? have_csize : 0);
            if (8 * (at + 1) > len)
                return -1;
            *out = cl_le64(ex + p + 4 + 8 * at);
            return 0;
        }
        p += 4 + (size_t)len;
    }
    return -1;
}

static cl_status zip_fail(const char *file, const char *what, uint64_t off)
{
    return cl_error(CL_ERR_FORMAT, "%s: zip: %s (at byte %llu)", file, what,
                    (unsigned long long)off);
}

/* The central directory's place, size and entry count, from the end
 * record (or the zip64 end record it points to when saturated). */
static cl_status find_directory(const uint8_t *b, size_t n, const char *file,
                                uint64_t *count, uint64_t *cd_off,
                                uint64_t *cd_size)
{
    size_t eocd = 0;
    int found = 0;
    size_t lo = n > 22 + 65535 ? n - 22 - 65535 : 0;
    for (size_t q = n - 22 + 1; q-- > lo;)
        if (cl_le32(b + q) == SIG_END && q + 22 + cl_le16(b + q + 20) == n) {
            eocd = q;
            found = 1;
            break;
        }
    if (!found)
        return zip_fail(file,
                        "no end of central directory record (truncated "
                        "file?)",
                        n);
    *count = cl_le16(b + eocd + 10);
    *cd_size = cl_le32(b + eocd + 12);
    *cd_off = cl_le32(b + eocd + 16);
    if (cl_le16(b + eocd + 4) != 0 || cl_le16(b + eocd + 6) != 0)
        return zip_fail(file, "a multi-disk archive", eocd);
    if (*count == 0xFFFF || *cd_size == 0xFFFFFFFFu || *cd_off == 0xFFFFFFFFu) {
        if (eocd < 20 || cl_le32(b + eocd - 20) != SIG_LOCATOR64)
            return zip_fail(
                file, "saturated end record without a zip64 locator", eocd);
        uint64_t z = cl_le64(b + eocd - 20 + 8);
        if (n < 56 || z > n - 56 || cl_le32(b + z) != SIG_END64)
            return zip_fail(file, "zip64 end record outside the file",
                            eocd - 20);
        *count = cl_le64(b + z + 32);
        *cd_size = cl_le64(b + z + 40);
        *cd_off = cl_le64(b + z + 48);
    }
    if (*cd_off > n || *cd_size > n - *cd_off)
        return zip_fail(file, "central directory outside the file", eocd);
    if (*count > CL_ZIP_MAX_ENTRIES || *count > *cd_size / 46 + 1)
        return zip_fail(file, "entry count does not fit the central directory",
                        eocd);
    return CL_OK;
}

/* The central-directory entry at b + at (inside [at, end)) into *e; *next
 * is where the following entry starts. */
static cl_status read_entry(const uint8_t *b, size_t n, size_t at, size_t end,
                            const char *file, cl_zip_entry *e, size_t *next)
{
    if (end - at < 46 || cl_le32(b + at) != SIG_CENTRAL)
        return zip_fail(file,
                        "central directory entry cut short or without "
                        "its signature",
                        at);
    uint16_t flags = cl_le16(b + at + 8), method = cl_le16(b + at + 10);
    uint32_t crc = cl_le32(b + at + 16);
    uint64_t csize = cl_le32(b + at + 20), usize = cl_le32(b + at + 24);
    size_t nl = cl_le16(b + at + 28), el = cl_le16(b + at + 30),
           cl = cl_le16(b + at + 32);
    uint64_t loc = cl_le32(b + at + 42);
    if (46 + nl + el + cl > end - at)
        return zip_fail(file,
                        "central directory entry runs past the "
                        "directory",
                        at);
    const uint8_t *ex = b + at + 46 + nl;
    int su = usize == 0xFFFFFFFFu, sc = csize == 0xFFFFFFFFu;
    if ((su && zip64_extra(ex, el, 0, su, sc, &usize)) ||
        (sc && zip64_extra(ex, el, 1, su, sc, &csize)) ||
        (loc == 0xFFFFFFFFu && zip64_extra(ex, el, 2, su, sc, &loc)))
        return zip_fail(file,
                        "saturated size or offset without its zip64 "
                        "field",
                        at);
    if (flags & 1)
        return zip_fail(file, "an encrypted entry", at);
    if (method != 0)
        return cl_error(CL_ERR_UNSUPPORTED,
                        "%s: zip: entry '%.*s' is compressed (method %u); "
                        "torch.save stores entries uncompressed",
                        file, (int)(nl > 100 ? 100 : nl),
                        (const char *)b + at + 46, method);
    if (csize != usize)
        return zip_fail(file, "a stored entry whose sizes differ", at);
    if (loc > n || n - loc < 30 || cl_le32(b + loc) != SIG_LOCAL)
        return zip_fail(file,
                        "local header outside the file or without its "
                        "signature",
                        at);
    uint64_t data = loc + 30 + cl_le16(b + loc + 26) + cl_le16(b + loc + 28);
    if (data > n || usize > n - data)
        return zip_fail(file, "entry data runs past the end of the file", loc);
    e->name = (const char *)b + at + 46;
    e->name_len = nl;
    e->data = b + data;
    e->size = usize;
    uLong c = crc32(0L, Z_NULL, 0);
    for (uint64_t done = 0; done < usize;) {
        uInt step =
            usize - done > (1u << 30) ? (1u << 30) : (uInt)(usize - done);
        c = crc32(c, e->data + done, step);
        done += step;
    }
    if ((uint32_t)c != crc)
        return cl_error(CL_ERR_FORMAT,
                        "%s: zip: entry '%.*s' fails its CRC-32 check "
                        "(corrupt file)",
                        file, (int)(nl > 100 ? 100 : nl), e->name);
    *next = at + 46 + nl + el + cl;
    return CL_OK;
}

cl_status cl_zip_read(cl_zip *z, const uint8_t *buf, size_t size,
                      const char *file)
{
    memset(z, 0, sizeof *z);
    if (size < 22 || cl_le32(buf) != SIG_LOCAL)
        return cl_error(CL_ERR_FORMAT,
                        "%s: not a zip archive (a PyTorch checkpoint starts "
                        "with 'PK\\3\\4')",
                        file);
    uint64_t count = 0, cd_off = 0, cd_size = 0;
    CL_TRY(find_directory(buf, size, file, &count, &cd_off, &cd_size));
    z->e = calloc(count ? (size_t)count : 1, sizeof *z->e);
    if (!z->e)
        return cl_error(CL_ERR_NOMEM, "%s: zip directory", file);
    size_t at = (size_t)cd_off, end = (size_t)(cd_off + cd_size);
    for (uint64_t k = 0; k < count; k++) {
        cl_status s = read_entry(buf, size, at, end, file, &z->e[z->n], &at);
        if (s != CL_OK) {
            cl_zip_free(z);
            return s;
        }
        z->n++;
    }
    return CL_OK;
}

void cl_zip_free(cl_zip *z)
{
    free(z->e);
    memset(z, 0, sizeof *z);
}

const cl_zip_entry *cl_zip_find(const cl_zip *z, const char *prefix,
                                size_t prefix_len, const char *name,
                                size_t name_len)
{
    for (size_t k = 0; k < z->n; k++) {
        const cl_zip_entry *e = &z->e[k];
        if (e->name_len == prefix_len + name_len &&
            memcmp(e->name, prefix, prefix_len) == 0 &&
            memcmp(e->name + prefix_len, name, name_len) == 0)
            return e;
    }
    return NULL;
}
