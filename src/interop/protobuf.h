/* Protocol Buffers wire format: a growing writer (for ONNX export) and a
 * bounds-checked reader (for MindSpore checkpoints), only what those two
 * formats use: varints, length-delimited fields, fixed32 and fixed64. */
#ifndef CL_INTEROP_PROTOBUF_H
#define CL_INTEROP_PROTOBUF_H

#include <stddef.h>
#include <stdint.h>

#include "classic/status.h"

enum { CL_PB_VARINT = 0, CL_PB_FIXED64 = 1, CL_PB_LEN = 2, CL_PB_FIXED32 = 5 };

/* ---- writing ---------------------------------------------------------- */

/* The first failure (out of memory) sticks in err and later calls do
 * nothing, so a message is built without a check per field. */
typedef struct cl_pb_writer {
    uint8_t *p;
    size_t n, cap;
    cl_status err;
} cl_pb_writer;

void cl_pb_writer_init(cl_pb_writer *w);
void cl_pb_writer_free(cl_pb_writer *w);
void cl_pb_put_varint(cl_pb_writer *w, int field, uint64_t v);
/* An int64 field (negative values as ten-byte two's complement). */
void cl_pb_put_int64(cl_pb_writer *w, int field, int64_t v);
void cl_pb_put_bytes(cl_pb_writer *w, int field, const void *p, size_t n);
void cl_pb_put_string(cl_pb_writer *w, int field, const char *s);
void cl_pb_put_float(cl_pb_writer *w, int field, float v);
/* A nested message: sub's bytes as a length-delimited field (sub's error,
 * if any, becomes w's). */
void cl_pb_put_message(cl_pb_writer *w, int field, const cl_pb_writer *sub);
/* Only the key and the length of a length-delimited field whose n bytes
 * the caller writes after w's (for a large nested message). */
void cl_pb_put_len_prefix(cl_pb_writer *w, int field, size_t n);

/* ---- reading ---------------------------------------------------------- */

/* A view of one message: [p, p + n) at byte offset base of the file
 * `file` (for messages that say where they fail). */
typedef struct cl_pb_reader {
    const uint8_t *p;
    size_t n, pos;
    size_t base;
    const char *file;
} cl_pb_reader;

typedef struct cl_pb_field {
    int number;
    int wire;
    uint64_t v;         /* VARINT, FIXED32, FIXED64 */
    const uint8_t *ptr; /* LEN: the bytes, inside the reader's buffer */
    size_t len;
    size_t offset; /* file offset of the field's key */
} cl_pb_field;

void cl_pb_reader_init(cl_pb_reader *r, const void *p, size_t n, size_t base,
                       const char *file);
/* The next field: 1 and *f; 0 at the end of the message; or an error
 * (CL_ERR_FORMAT "file: offset N: ...") for a varint running past the end
 * or longer than ten bytes, a length beyond the message, field number 0,
 * or a group / unknown wire type. */
cl_status cl_pb_next(cl_pb_reader *r, cl_pb_field *f, int *more);
/* One varint at r's position: the items of a packed repeated field (a
 * LEN field's bytes, read by a sub-reader).  Errors as cl_pb_next's. */
cl_status cl_pb_read_varint(cl_pb_reader *r, uint64_t *out);
/* A reader over the bytes of LEN field f (inside r). */
void cl_pb_reader_sub(const cl_pb_reader *r, const cl_pb_field *f,
                      cl_pb_reader *sub);

#endif
