/* Atomic file replacement through a fsynced temp file and rename(2). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/mem.h"
#include "io/atomic.h"

static char *dup_str(const char *s, size_t extra, const char *what)
{
    size_t n = strlen(s);
    char *p = cl_alloc(n + extra + 1, what);
    if (p)
        memcpy(p, s, n + 1);
    return p;
}

static void release(cl_atomic_file *f, int remove_tmp)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    if (remove_tmp && f->tmp)
        unlink(f->tmp);
    cl_free(f->tmp);
    cl_free(f->path);
    f->tmp = NULL;
    f->path = NULL;
}

static cl_status io_error(cl_atomic_file *f, int err, const char *doing)
{
    if (err == ENOSPC || err == EDQUOT)
        return cl_error(CL_ERR_IO,
                        "%s: disk full while %s (%llu bytes written)", f->path,
                        doing, (unsigned long long)f->written);
    if (err == EFBIG)
        return cl_error(CL_ERR_IO,
                        "%s: file size limit reached while %s (%llu bytes "
                        "written; see `ulimit -f`)",
                        f->path, doing, (unsigned long long)f->written);
    return cl_error(CL_ERR_IO, "%s: %s failed after %llu bytes: %s", f->path,
                    doing, (unsigned long long)f->written, strerror(err));
}

cl_status cl_atomic_open(cl_atomic_file *f, const char *path)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = dup_str(path, 0, "atomic write path");
    f->tmp = dup_str(path, 12, "atomic write path");
    if (!f->path || !f->tmp) {
        release(f, 0);
        return CL_ERR_NOMEM;
    }
    strcat(f->tmp, ".tmp.XXXXXX");
    f->fd = mkstemp(f->tmp);
    if (f->fd < 0) {
        int err = errno;
        cl_status s = cl_error(CL_ERR_IO, "%s: cannot create temp file %s: %s",
                               path, f->tmp, strerror(err));
        cl_free(f->tmp);
        f->tmp = NULL;
        release(f, 0);
        return s;
    }
    /* mkstemp makes 0600; a checkpoint should be as readable as a file made
     * by fopen.  (Reading the umask would change it for every thread.) */
    fchmod(f->fd, 0644);
    return CL_OK;
}

cl_status cl_atomic_write(cl_atomic_file *f, const void *p, size_t n)
{
    if (f->fd < 0 || f->failed)
        return cl_error(CL_ERR_ARG, "%s: write on a closed atomic file",
                        f->path ? f->path : "(none)");
    const char *c = p;
    while (n > 0) {
        /* Bounded chunks: some kernels cap a single write near 2 GB. */
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t w = write(f->fd, c, chunk);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int err = w < 0 ? errno : ENOSPC;
            cl_status s = io_error(f, err, "writing");
            f->failed = 1;
            close(f->fd);
            f->fd = -1;
            unlink(f->tmp);
            return s;
        }
        c += w;
        n -= (size_t)w;
        f->written += (uint64_t)w;
    }
    return CL_OK;
}

/* fsync of the directory makes the rename itself durable. */
static int fsync_dir_of(const char *path)
{
    char *dir = dup_str(path, 2, "directory path");
    if (!dir)
        return ENOMEM;
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    cl_free(dir);
    if (fd < 0)
        return errno;
    int rc = fsync(fd) == 0 ? 0 : errno;
    close(fd);
    /* Some file systems cannot fsync a directory; the rename still stands. */
    return rc == EINVAL ? 0 : rc;
}

cl_status cl_atomic_commit(cl_atomic_file *f)
{
    cl_status s;
    if (f->fd < 0 || f->failed) {
        s = cl_error(CL_ERR_IO, "%s: not written (an earlier write failed)",
                     f->path ? f->path : "(none)");
        goto fail;
    }
    /* Delayed allocation can report a full disk only here. */
    if (fsync(f->fd) != 0) {
        s = io_error(f, errno, "syncing");
        goto fail;
    }
    int fd = f->fd;
    f->fd = -1;
    if (close(fd) != 0) {
        s = io_error(f, errno, "closing");
        goto fail;
    }
    if (rename(f->tmp, f->path) != 0) {
        s = cl_error(CL_ERR_IO, "%s: cannot rename %s over it: %s", f->path,
                     f->tmp, strerror(errno));
        goto fail;
    }
    int err = fsync_dir_of(f->path);
    s = CL_OK;
    if (err != 0)
        s = cl_error(CL_ERR_IO,
                     "%s: written, but syncing its directory "
                     "failed: %s",
                     f->path, strerror(err));
    release(f, 0);
    return s;
fail:
    release(f, 1);
    return s;
}

void cl_atomic_abort(cl_atomic_file *f)
{
    if (f->path || f->tmp)
        release(f, 1);
    f->fd = -1;
}

cl_status cl_atomic_write_file(const char *path, const void *data, size_t n)
{
    cl_atomic_file f;
    CL_TRY(cl_atomic_open(&f, path));
    cl_status s = cl_atomic_write(&f, data, n);
    if (s != CL_OK) {
        cl_atomic_abort(&f);
        return s;
    }
    return cl_atomic_commit(&f);
}
