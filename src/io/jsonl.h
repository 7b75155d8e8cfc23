/* Metrics log: one JSON object per line, appended and flushed line by line
 * so a crash loses at most the line being written. */
#ifndef CL_IO_JSONL_H
#define CL_IO_JSONL_H

#include <stdint.h>
#include <stdio.h>

#include "classic/status.h"
#include "io/strbuf.h"

/* Caller-owned.  A line is built in `line` and written whole by
 * cl_jsonl_end, so concurrent readers (tail -f, a plotting script) never
 * see half a record. */
typedef struct cl_jsonl {
    FILE *f;
    char *path;
    cl_strbuf line;
    int open_line; /* between begin and end */
    int fields;    /* fields in the open line */
} cl_jsonl;

/* append non-zero: keep existing lines (resume); zero: truncate. */
cl_status cl_jsonl_open(cl_jsonl *j, const char *path, int append);
/* Starts a record ("{"). */
void cl_jsonl_begin(cl_jsonl *j);
/* Fields: key and string values escaped as JSON.  Doubles are written so
 * they read back bit-exact; NaN and +-Inf, which JSON cannot hold, are
 * written as null (a reader treats null in a numeric field as "not a
 * finite number"; the loss monitor reports the non-finite step itself). */
void cl_jsonl_int(cl_jsonl *j, const char *key, int64_t v);
void cl_jsonl_num(cl_jsonl *j, const char *key, double v);
void cl_jsonl_str(cl_jsonl *j, const char *key, const char *v);
void cl_jsonl_bool(cl_jsonl *j, const char *key, int v);
/* Ends the record: "}\n", one write, fflush.  CL_ERR_IO naming the file if
 * the write or flush fails (disk full), CL_ERR_NOMEM if a field could not be
 * appended. */
cl_status cl_jsonl_end(cl_jsonl *j);
/* Closes the file (CL_ERR_IO if the final close fails); safe on a zeroed
 * struct. */
cl_status cl_jsonl_close(cl_jsonl *j);

#endif
