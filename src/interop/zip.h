/* A bounded reader of zip archives of stored (uncompressed) entries, as
 * torch.save writes them, over a file already in memory. */
#ifndef CL_INTEROP_ZIP_H
#define CL_INTEROP_ZIP_H

#include <stddef.h>
#include <stdint.h>

#include "classic/status.h"

/* Entries read from one central directory; a file past this is refused. */
#define CL_ZIP_MAX_ENTRIES 1000000

/* One entry: its name and data point into the archive's buffer. */
typedef struct cl_zip_entry {
    const char *name; /* not NUL-terminated */
    size_t name_len;
    const uint8_t *data;
    uint64_t size;
} cl_zip_entry;

typedef struct cl_zip {
    cl_zip_entry *e; /* in central-directory order */
    size_t n;
} cl_zip;

/* Reads the directory of the archive buf[0, size): the end record (zip64
 * when saturated), then every central-directory entry, each checked to be
 * stored, unencrypted, with its local header and data inside the buffer
 * and its CRC-32 right.  Messages name file and the byte offset
 * (CL_ERR_FORMAT; CL_ERR_UNSUPPORTED for a compressed entry, CL_ERR_NOMEM).
 * On failure *z holds nothing to free.  buf must outlive *z. */
cl_status cl_zip_read(cl_zip *z, const uint8_t *buf, size_t size,
                      const char *file);
void cl_zip_free(cl_zip *z);

/* The entry named prefix followed by name (neither NUL-terminated), or
 * NULL; the first of several. */
const cl_zip_entry *cl_zip_find(const cl_zip *z, const char *prefix,
                                size_t prefix_len, const char *name,
                                size_t name_len);

#endif
