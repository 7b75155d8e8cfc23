/* A pickle machine for the subset of protocols 2-5 that torch.save's
 * data.pkl uses for a state_dict: it builds objects and tensor views and
 * never executes anything (globals are names; a fixed few mean something). */
#ifndef CL_INTEROP_PICKLE_H
#define CL_INTEROP_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "classic/status.h"
#include "tensor/tensor.h"

/* Bounds on what a state_dict's pickle needs; past them it is refused. */
#define CL_PK_MAX_STACK (1 << 20)          /* stack depth, open MARKs */
#define CL_PK_MAX_NUMEL ((int64_t)1 << 40) /* elements of one storage/view */

typedef enum cl_pk_kind {
    CL_PK_NONE,
    CL_PK_BOOL,
    CL_PK_INT,
    CL_PK_FLOAT,
    CL_PK_STR,
    CL_PK_TUPLE,
    CL_PK_LIST,
    CL_PK_DICT,
    CL_PK_GLOBAL,
    CL_PK_STORAGE,
    CL_PK_TENSOR,
    CL_PK_OPAQUE /* an object built by a callable outside the subset */
} cl_pk_kind;

/* The storage types torch.save names by their legacy classes
 * (torch.FloatStorage, ...), in cl_pk_dtypes' order. */
typedef enum cl_pk_dtype {
    CL_PK_F32,
    CL_PK_F16,
    CL_PK_BF16,
    CL_PK_F64,
    CL_PK_I64,
    CL_PK_I32,
    CL_PK_N_DTYPES
} cl_pk_dtype;

typedef struct cl_pk_dtype_info {
    const char *cls;  /* "FloatStorage" */
    const char *name; /* "float32" */
    int size;         /* bytes per element */
} cl_pk_dtype_info;

extern const cl_pk_dtype_info cl_pk_dtypes[CL_PK_N_DTYPES];

/* One object; items, strings and storage data point into the pickle, the
 * zip entries or the object table, never copied. */
typedef struct cl_pk_obj {
    uint8_t kind;
    uint8_t dtype; /* STORAGE */
    int64_t i;     /* INT, BOOL; STORAGE: elements */
    double f;      /* FLOAT */
    const char *s; /* STR; GLOBAL, OPAQUE: module */
    uint32_t len;
    const char *s2; /* GLOBAL, OPAQUE: name */
    uint32_t len2;
    const uint8_t *data; /* STORAGE */
    int32_t *items;      /* TUPLE, LIST; DICT: key, value pairs */
    int32_t n, cap;
    int32_t tensor; /* TENSOR: index into the tensor table */
} cl_pk_obj;

/* A view of a storage (torch._utils._rebuild_tensor_v2), checked to lie
 * inside it: element (i0, i1, ...) is data[offset + sum(ik * stride[k])]. */
typedef struct cl_pk_tensor {
    uint8_t dtype;
    const uint8_t *data; /* the storage */
    int64_t storage_numel;
    int64_t offset;
    cl_shape shape;
    int64_t stride[CL_MAX_DIMS];
} cl_pk_tensor;

/* A storage's bytes by its persistent-id key ("0", "1", ...: the zip entry
 * data/<key>): the data and *size, or NULL when there is none. */
typedef const uint8_t *(*cl_pk_storage_fn)(void *ctx, const char *key,
                                           size_t key_len, uint64_t *size);

typedef struct cl_pickle {
    cl_pk_obj *o; /* every object the pickle built */
    int32_t no, co;
    cl_pk_tensor *t; /* every tensor it built */
    int32_t nt, ct;
    int32_t root; /* the object STOP returned */
} cl_pickle;

/* Runs code[0, n) to its STOP, building pk's objects (PROTO, FRAME, MARK,
 * the EMPTY_* containers, NONE, bools, ints, BINFLOAT, strings and bytes,
 * GLOBAL, BINPERSID, TUPLE*, LIST, REDUCE, NEWOBJ, BUILD, SETITEM(S),
 * APPEND(S), POP, POP_MARK, the memo).  REDUCE knows
 * collections.OrderedDict, torch._utils._rebuild_tensor_v2 and
 * _rebuild_parameter; any other callable gives an OPAQUE object.
 * BINPERSID ('storage', torch.<T>Storage, key, location, numel) asks
 * storage(ctx, key) for the bytes, which must be numel elements.  Anything
 * else is refused in one sentence naming file, the byte of data.pkl and
 * the opcode or global (CL_ERR_FORMAT; CL_ERR_NOMEM).  On failure as on
 * success pk is to be freed with cl_pickle_free. */
cl_status cl_pickle_run(cl_pickle *pk, const uint8_t *code, size_t n,
                        const char *file, cl_pk_storage_fn storage, void *ctx);
/* Frees the objects only (the tensor table stays). */
void cl_pickle_free_objects(cl_pickle *pk);
void cl_pickle_free(cl_pickle *pk);

/* "a tuple", "a torch.Size object", "the global builtins.set": what o is,
 * for messages. */
const char *cl_pickle_describe(const cl_pk_obj *o, char *buf, size_t n);

#endif
