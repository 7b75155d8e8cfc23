/* JSON-lines metrics writer: records built in memory, written and flushed
 * whole. */
#include <errno.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "io/jsonl.h"

cl_status cl_jsonl_open(cl_jsonl *j, const char *path, int append)
{
    memset(j, 0, sizeof *j);
    cl_strbuf_init(&j->line);
    size_t n = strlen(path);
    j->path = cl_alloc(n + 1, "metrics path");
    if (!j->path)
        return CL_ERR_NOMEM;
    memcpy(j->path, path, n + 1);
    j->f = fopen(path, append ? "ab" : "wb");
    if (!j->f) {
        cl_status s = cl_error(CL_ERR_IO, "%s: cannot open for writing: %s",
                               path, strerror(errno));
        cl_free(j->path);
        j->path = NULL;
        return s;
    }
    return CL_OK;
}

void cl_jsonl_begin(cl_jsonl *j)
{
    j->line.len = 0;
    j->line.failed = 0;
    j->fields = 0;
    j->open_line = 1;
    cl_strbuf_addc(&j->line, '{');
}

static void add_key(cl_jsonl *j, const char *key)
{
    CL_ASSERT(j->open_line);
    if (j->fields++)
        cl_strbuf_addc(&j->line, ',');
    cl_strbuf_add_json_str(&j->line, key, strlen(key));
    cl_strbuf_addc(&j->line, ':');
}

void cl_jsonl_int(cl_jsonl *j, const char *key, int64_t v)
{
    add_key(j, key);
    cl_strbuf_addf(&j->line, "%lld", (long long)v);
}

void cl_jsonl_num(cl_jsonl *j, const char *key, double v)
{
    add_key(j, key);
    cl_strbuf_add_json_num(&j->line, v);
}

void cl_jsonl_str(cl_jsonl *j, const char *key, const char *v)
{
    add_key(j, key);
    cl_strbuf_add_json_str(&j->line, v, strlen(v));
}

void cl_jsonl_bool(cl_jsonl *j, const char *key, int v)
{
    add_key(j, key);
    cl_strbuf_adds(&j->line, v ? "true" : "false");
}

cl_status cl_jsonl_end(cl_jsonl *j)
{
    CL_ASSERT(j->open_line);
    j->open_line = 0;
    cl_strbuf_adds(&j->line, "}\n");
    if (j->line.failed)
        return cl_error(CL_ERR_NOMEM, "%s: metrics record too large", j->path);
    if (!j->f)
        return cl_error(CL_ERR_IO, "metrics log is not open");
    if (fwrite(j->line.data, 1, j->line.len, j->f) != j->line.len ||
        fflush(j->f) != 0) {
        int err = errno;
        clearerr(j->f);
        return cl_error(CL_ERR_IO, "%s: cannot append a metrics line: %s",
                        j->path, err == ENOSPC ? "disk full" : strerror(err));
    }
    return CL_OK;
}

cl_status cl_jsonl_close(cl_jsonl *j)
{
    cl_status s = CL_OK;
    if (j->f && fclose(j->f) != 0)
        s = cl_error(CL_ERR_IO, "%s: closing the metrics log failed: %s",
                     j->path, strerror(errno));
    j->f = NULL;
    cl_strbuf_free(&j->line);
    cl_free(j->path);
    j->path = NULL;
    return s;
}
