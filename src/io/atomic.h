/* Atomic file replacement: write a temp file beside the target, fsync it,
 * rename it over the target and fsync the directory. */
#ifndef CL_IO_ATOMIC_H
#define CL_IO_ATOMIC_H

#include <stddef.h>
#include <stdint.h>

#include "classic/status.h"

/* Caller-owned.  Between open and commit/abort the target is untouched;
 * readers see either the old file or the complete new one, never a part. */
typedef struct cl_atomic_file {
    char *path;       /* the target */
    char *tmp;        /* "<path>.tmp.XXXXXX" in the same directory */
    int fd;           /* -1 once closed */
    uint64_t written; /* bytes written so far */
    int failed;       /* a write failed: commit refuses */
} cl_atomic_file;

/* Creates the temp file (mode 0644).  CL_ERR_IO naming the
 * directory if it cannot. */
cl_status cl_atomic_open(cl_atomic_file *f, const char *path);
/* Writes all n bytes (retrying short writes and EINTR).  On failure the temp
 * file is removed at once and f is left for cl_atomic_abort (a no-op then);
 * ENOSPC gives "x: disk full while writing (N bytes written)". */
cl_status cl_atomic_write(cl_atomic_file *f, const void *p, size_t n);
/* fsync, close, rename over the target, fsync the directory.  On any failure
 * the temp file is removed and the old target left as it was.  Always
 * releases f. */
cl_status cl_atomic_commit(cl_atomic_file *f);
/* Drops the temp file and releases f (safe after a failed write or commit,
 * and on a zeroed struct). */
void cl_atomic_abort(cl_atomic_file *f);

/* The whole cycle for one buffer. */
cl_status cl_atomic_write_file(const char *path, const void *data, size_t n);

#endif
