/* Reader and writer of the safetensors format (Hugging Face's tensor file):
 * u64 little-endian header length N, N bytes of JSON, then the tensor data. */
#ifndef CL_IO_SAFETENSORS_H
#define CL_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "classic/status.h"
#include "tensor/tensor.h"

/* Every dtype of the format; names as written in files ("F32"). */
#define CL_ST_DTYPE_TABLE(X)                                                   \
    X(CL_ST_BOOL, "BOOL", 1)                                                   \
    X(CL_ST_U8, "U8", 1)                                                       \
    X(CL_ST_I8, "I8", 1)                                                       \
    X(CL_ST_F8_E5M2, "F8_E5M2", 1)                                             \
    X(CL_ST_F8_E4M3, "F8_E4M3", 1)                                             \
    X(CL_ST_I16, "I16", 2)                                                     \
    X(CL_ST_U16, "U16", 2)                                                     \
    X(CL_ST_F16, "F16", 2)                                                     \
    X(CL_ST_BF16, "BF16", 2)                                                   \
    X(CL_ST_I32, "I32", 4)                                                     \
    X(CL_ST_U32, "U32", 4)                                                     \
    X(CL_ST_F32, "F32", 4)                                                     \
    X(CL_ST_F64, "F64", 8)                                                     \
    X(CL_ST_I64, "I64", 8)                                                     \
    X(CL_ST_U64, "U64", 8)

typedef enum cl_st_dtype {
#define CL__ST_ENUM(e, name, size) e,
    CL_ST_DTYPE_TABLE(CL__ST_ENUM)
#undef CL__ST_ENUM
        CL_ST_DTYPE_COUNT
} cl_st_dtype;

const char *cl_st_dtype_name(cl_st_dtype t);
size_t cl_st_dtype_size(cl_st_dtype t);
/* CL_ERR_FORMAT if s is not one of the table's names. */
cl_status cl_st_dtype_parse(const char *s, cl_st_dtype *out);

/* The format's own limit on the JSON header (as the reference reader). */
#define CL_ST_MAX_HEADER ((uint64_t)100000000)

/* ---- reading ---- */

typedef struct cl_st_file cl_st_file;

/* Maps the file and validates all of it before returning: header length,
 * JSON, every tensor's dtype, shape, byte size and offsets, no duplicate
 * names, no overlaps, no holes, no trailing bytes; __metadata__ a map of
 * strings.  Tensors of more than CL_MAX_DIMS dimensions are refused.  Every
 * refusal is CL_ERR_FORMAT (CL_ERR_LIMIT for the 100 MB header limit,
 * CL_ERR_IO when the file cannot be read) with one sentence naming the file
 * and the tensor or field. */
cl_status cl_st_open(cl_st_file **out, const char *path);
void cl_st_close(cl_st_file *f);

/* Tensors in the order of the file's header. */
size_t cl_st_count(const cl_st_file *f);
const char *cl_st_name(const cl_st_file *f, size_t i);
/* Index of the tensor called name, or -1. */
long cl_st_find(const cl_st_file *f, const char *name);
/* dtype and shape of tensor i (either pointer may be NULL). */
void cl_st_info(const cl_st_file *f, size_t i, cl_st_dtype *dtype,
                cl_shape *shape);
/* The stored bytes of tensor i, little-endian, maybe unaligned. */
const void *cl_st_data(const cl_st_file *f, size_t i, size_t *nbytes);
/* Copies tensor i into dst[0, n) as f32, converting from F32, BF16, F16 or
 * F64.  n must equal the element count (CL_ERR_SHAPE otherwise); other
 * dtypes give CL_ERR_FORMAT. */
cl_status cl_st_read_f32(const cl_st_file *f, size_t i, float *dst, size_t n);
/* Same for integers: I64, I32, I16, I8, U8, U32, BOOL (U64 above 2^63-1
 * refused). */
cl_status cl_st_read_i64(const cl_st_file *f, size_t i, int64_t *dst, size_t n);

/* The __metadata__ value for key, or NULL. */
const char *cl_st_metadata(const cl_st_file *f, const char *key);
size_t cl_st_metadata_count(const cl_st_file *f);
/* Key and value of entry i of __metadata__, in file order. */
const char *cl_st_metadata_key(const cl_st_file *f, size_t i);
const char *cl_st_metadata_value(const cl_st_file *f, size_t i);

/* ---- writing ---- */

typedef struct cl_st_writer cl_st_writer;

cl_status cl_st_writer_new(cl_st_writer **out);
void cl_st_writer_free(cl_st_writer *w);
/* Queues a tensor; name and shape are copied, data is NOT: it must stay
 * valid until cl_st_writer_save returns (so a parameter arena is written
 * without a copy).  data holds numel * dtype size bytes, little-endian,
 * row-major.  Duplicate or empty names and "__metadata__" are refused. */
cl_status cl_st_writer_add(cl_st_writer *w, const char *name, cl_st_dtype dtype,
                           cl_shape shape, const void *data);
/* Sets a __metadata__ string (a later value for the same key replaces it). */
cl_status cl_st_writer_meta(cl_st_writer *w, const char *key,
                            const char *value);
/* Writes header and data, tensors in the order added, through the atomic
 * writer: on failure the old file at path is left intact.  The header is
 * padded with spaces to a multiple of 8 so the data is 8-byte aligned. */
cl_status cl_st_writer_save(cl_st_writer *w, const char *path);

#endif
