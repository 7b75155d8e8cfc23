/* The request bodies `classic serve` reads (a multipart form, an Open
 * Inference Protocol infer request, base64, an image's magic bytes) and the
 * JSON it answers with: pure functions over bytes, fuzzed on their own. */
#ifndef CL_SERVE_PROTOCOL_H
#define CL_SERVE_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#include "classic/classic.h"
#include "io/strbuf.h"

/* "image/jpeg" or "image/png" from the first bytes, NULL for anything
 * else. */
const char *cl_serve_sniff(const uint8_t *p, size_t n);

/* The first file of a multipart/form-data body: the part with a filename,
 * else the part named "image" or "file".  content_type is the request's
 * header (it carries the boundary).  *part points into body.  A body that
 * is not such a form is CL_ERR_FORMAT with a sentence saying why. */
cl_status cl_serve_multipart_file(const char *content_type, const uint8_t *body,
                                  size_t n, const uint8_t **part,
                                  size_t *part_len);

/* Decodes standard base64 (padding optional, no whitespace) of n chars into
 * out, which holds at least n / 4 * 3 + 3 bytes; *out_len the bytes
 * written.  CL_ERR_FORMAT on a character outside the alphabet. */
cl_status cl_serve_base64_decode(const char *s, size_t n, uint8_t *out,
                                 size_t *out_len);

/* Which outputs an infer request asked for (all when it names none). */
enum {
    CL_SERVE_OUT_PROBS = 1,
    CL_SERVE_OUT_INDICES = 2,
    CL_SERVE_OUT_CLASSES = 4,
    CL_SERVE_OUT_TOPPROBS = 8,
    CL_SERVE_OUT_ALL = 15
};

/* A parsed POST /v2/models/{name}/infer body: either n prepared tensors
 * (FP32, x (n, c, side, side)) or n encoded image files (BYTES, base64 in
 * the JSON, decoded into one buffer). */
typedef struct cl_serve_infer {
    int n;
    int is_bytes;
    float *x;          /* FP32: (n, c, side, side), owned */
    uint8_t *bytes;    /* BYTES: the decoded files one after another */
    size_t *off, *len; /* BYTES: file i is bytes[off[i], off[i] + len[i]) */
    int top_k;         /* parameters.top_k, 5 when absent */
    int outputs;       /* CL_SERVE_OUT_* */
    char id[128];      /* the request's "id", echoed ("" when none) */
    char input_name[64];
} cl_serve_infer;

/* Parses an infer body for a model of c channels at side x side with
 * num_classes classes; at most max_n inputs.  Every refusal is CL_ERR_FORMAT
 * (or CL_ERR_SHAPE, CL_ERR_LIMIT) with one sentence naming the field. */
cl_status cl_serve_infer_parse(const char *body, size_t n, int c, int side,
                               int max_n, cl_serve_infer *out);
void cl_serve_infer_free(cl_serve_infer *r);

/* {"error":"<sentence>"} into b. */
cl_status cl_serve_json_error(cl_strbuf *b, const char *sentence);

#endif
