/* A strict JSON (RFC 8259) parser into a read-only tree, with depth and size
 * limits, for safetensors headers, metrics lines and reports. */
#ifndef CL_IO_JSON_H
#define CL_IO_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "classic/status.h"

typedef enum cl_json_type {
    CL_JSON_NULL = 0,
    CL_JSON_BOOL,
    CL_JSON_NUM,
    CL_JSON_STR,
    CL_JSON_ARR,
    CL_JSON_OBJ
} cl_json_type;

/* One value.  Arrays and objects hold their members as a linked list
 * (child, then next); an object member carries its key. Strings are
 * NUL-terminated UTF-8 and may contain '\0' from "\u0000": compare `len`
 * with strlen() when that matters. */
typedef struct cl_json cl_json;
struct cl_json {
    cl_json_type type;
    int boolean; /* CL_JSON_BOOL */
    double num;  /* CL_JSON_NUM */
    int is_int;  /* CL_JSON_NUM written without fraction/exponent and
                    within int64: then `i` holds it exactly */
    int64_t i;
    const char *str; /* CL_JSON_STR */
    size_t len;
    size_t count;    /* members of an array or object */
    cl_json *child;  /* first member */
    cl_json *next;   /* next sibling inside the parent */
    const char *key; /* member key inside an object, else NULL */
    size_t key_len;
    size_t offset; /* byte offset of the value in the text */
};

typedef struct cl_json_doc cl_json_doc;

/* Limits against hostile input: nesting depth (recursion) and the number
 * of values (memory: about 112 bytes each).  Zero fields take defaults. */
typedef struct cl_json_limits {
    int max_depth;    /* default 64: far deeper than anything we write */
    size_t max_nodes; /* default 2^21 values (about 230 MB at worst) */
} cl_json_limits;

#define CL_JSON_MAX_DEPTH 64
#define CL_JSON_MAX_NODES ((size_t)1 << 21)

/* Parses exactly one JSON value (surrounding whitespace allowed) from
 * text[0, len).  `name` prefixes error messages ("x.safetensors: header
 * JSON at byte 17: expected ':' after object key").  Strings must be valid
 * UTF-8 (escapes included: no lone surrogates).  lim may be NULL. */
cl_status cl_json_parse(cl_json_doc **out, const char *text, size_t len,
                        const cl_json_limits *lim, const char *name);
const cl_json *cl_json_root(const cl_json_doc *d);
void cl_json_free(cl_json_doc *d);

/* The first member of object `o` named key, or NULL (also if o is not an
 * object). */
const cl_json *cl_json_get(const cl_json *o, const char *key);
/* "null", "boolean", "number", "string", "array", "object". */
const char *cl_json_type_name(cl_json_type t);

#endif
