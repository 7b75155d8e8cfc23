/* libFuzzer target: the zip reader on its own (cl_zip_read: the end record,
 * the zip64 locator, end record and extra fields, every central-directory
 * entry, local headers, bounds and CRC-32s), in memory; then every entry
 * it accepts is found again by name and read to its last byte.
 *
 * Input: the archive itself (seeds: make_corpus_zip.py). */
#include "fuzz_common.h"
#include "interop/zip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly size bytes, so that a read past the end is one
     * ASan reports (libFuzzer's own buffer is exact too; this keeps the
     * target right if it is driven some other way). */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        abort();
    if (size)
        memcpy(buf, data, size);
    cl_zip z;
    cl_status s = cl_zip_read(&z, buf, size, "fuzz");
    fz_check_error(s);
    if (s != CL_OK) {
        /* A refused archive leaves nothing to free. */
        if (z.e || z.n)
            abort();
        free(buf);
        return 0;
    }
    unsigned acc = 0;
    for (size_t k = 0; k < z.n; k++) {
        const cl_zip_entry *e = &z.e[k];
        const uint8_t *name = (const uint8_t *)e->name;
        /* Names and data lie inside the archive. */
        if (name < buf || e->name_len > size ||
            (size_t)(name - buf) > size - e->name_len || e->data < buf ||
            e->size > size || (size_t)(e->data - buf) > size - e->size)
            abort();
        for (uint64_t i = 0; i < e->size; i++)
            acc += e->data[i];
        /* Found again by its name, whole or split at its first '/', as an
         * entry of that very name (the first of duplicates). */
        const char *slash = memchr(e->name, '/', e->name_len);
        size_t pl = slash ? (size_t)(slash - e->name) + 1 : 0;
        const cl_zip_entry *f =
            cl_zip_find(&z, e->name, pl, e->name + pl, e->name_len - pl);
        const cl_zip_entry *g = cl_zip_find(&z, "", 0, e->name, e->name_len);
        if (!f || f != g || f > e || f->name_len != e->name_len ||
            memcmp(f->name, e->name, e->name_len) != 0)
            abort();
    }
    cl_zip_free(&z);
    if (z.e || z.n)
        abort();
    free(buf);
    if (acc == 0xFFFFFFFFu)
        fprintf(stderr, "fuzz: checksum\n");
    return 0;
}
