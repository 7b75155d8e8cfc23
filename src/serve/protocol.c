/* Parsers of the request bodies `classic serve` accepts: image magic bytes,
 * multipart forms, base64 and Open Inference Protocol infer requests. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/json.h"
#include "serve/protocol.h"

const char *cl_serve_sniff(const uint8_t *p, size_t n)
{
    static const uint8_t png[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
    if (n >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff)
        return "image/jpeg";
    if (n >= 8 && memcmp(p, png, 8) == 0)
        return "image/png";
    return NULL;
}

/* The first place of needle (m bytes) in hay (n bytes), or NULL; memmem is
 * not POSIX. */
static const uint8_t *find(const uint8_t *hay, size_t n, const void *needle,
                           size_t m)
{
    if (m == 0 || m > n)
        return NULL;
    const uint8_t *nd = needle;
    for (size_t i = 0; i + m <= n; i++) {
        const uint8_t *p = memchr(hay + i, nd[0], n - m + 1 - i);
        if (!p)
            return NULL;
        if (memcmp(p, nd, m) == 0)
            return p;
        i = (size_t)(p - hay);
    }
    return NULL;
}

/* Case-insensitive search of a short ASCII needle in a header value. */
static const char *find_ci(const char *s, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++) {
        size_t j = 0;
        while (j < m && tolower((unsigned char)s[i + j]) == needle[j])
            j++;
        if (j == m)
            return s + i;
    }
    return NULL;
}

/* The value of parameter `name=` (quoted or not) in a header text, copied
 * into out; 0 when absent or too long. */
static int header_param(const char *h, size_t n, const char *name, char *out,
                        size_t out_n)
{
    const char *p = h, *end = h + n;
    size_t m = strlen(name);
    while ((p = find_ci(p, (size_t)(end - p), name)) != NULL) {
        /* A whole parameter name: preceded by ';' or space, followed by =. */
        int starts = p == h || p[-1] == ';' || p[-1] == ' ' || p[-1] == '\t';
        const char *v = p + m;
        p = v;
        if (!starts || v >= end || *v != '=')
            continue;
        v++;
        size_t k = 0;
        if (v < end && *v == '"') {
            v++;
            while (v < end && *v != '"' && k + 1 < out_n)
                out[k++] = *v++;
            if (v >= end || *v != '"')
                return 0;
        } else {
            while (v < end && *v != ';' && *v != ' ' && *v != '\t' &&
                   *v != '\r' && *v != '\n' && k + 1 < out_n)
                out[k++] = *v++;
        }
        out[k] = '\0';
        return k > 0;
    }
    return 0;
}

cl_status cl_serve_multipart_file(const char *content_type, const uint8_t *body,
                                  size_t n, const uint8_t **part,
                                  size_t *part_len)
{
    char b[80];
    char delim[84];
    *part = NULL;
    *part_len = 0;
    if (!content_type ||
        !header_param(content_type, strlen(content_type), "boundary", b,
                      sizeof b) ||
        strlen(b) > 70)
        return cl_error(CL_ERR_FORMAT,
                        "the multipart/form-data request names no boundary "
                        "(or one longer than 70 characters)");
    size_t bl = (size_t)snprintf(delim, sizeof delim, "\r\n--%s", b);
    /* The first delimiter may open the body without the CRLF before it. */
    const uint8_t *p;
    if (n >= bl - 2 && memcmp(body, delim + 2, bl - 2) == 0)
        p = body + bl - 2;
    else if ((p = find(body, n, delim, bl)) != NULL)
        p += bl;
    else
        return cl_error(CL_ERR_FORMAT, "the multipart body holds no part "
                                       "delimited by its boundary");
    const uint8_t *end = body + n, *named = NULL;
    size_t named_len = 0;
    for (;;) {
        /* After a delimiter: "--" closes the form, CRLF opens a part. */
        if (end - p >= 2 && p[0] == '-' && p[1] == '-')
            break;
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
            return cl_error(CL_ERR_FORMAT, "the multipart body has a boundary "
                                           "not followed by a line end");
        p += 2;
        const uint8_t *hend = find(p, (size_t)(end - p), "\r\n\r\n", 4);
        if (!hend && end - p >= 2 && p[0] == '\r' && p[1] == '\n')
            hend = p - 2; /* a part without headers */
        if (!hend)
            return cl_error(CL_ERR_FORMAT, "a multipart part's headers never "
                                           "end (no blank line)");
        const char *h = (const char *)p;
        size_t hn = hend >= p ? (size_t)(hend - p) : 0;
        const uint8_t *c = hend + 4;
        const uint8_t *next = find(c, (size_t)(end - c), delim, bl);
        if (!next)
            return cl_error(CL_ERR_FORMAT, "a multipart part is not closed "
                                           "by the boundary (truncated body?)");
        char val[256];
        const char *cd = find_ci(h, hn, "content-disposition:");
        if (cd) {
            size_t cdn = hn - (size_t)(cd - h);
            const char *eol = memchr(cd, '\r', cdn);
            if (eol)
                cdn = (size_t)(eol - cd);
            if (header_param(cd, cdn, "filename", val, sizeof val)) {
                *part = c;
                *part_len = (size_t)(next - c);
                return CL_OK;
            }
            if (!named && header_param(cd, cdn, "name", val, sizeof val) &&
                (strcmp(val, "image") == 0 || strcmp(val, "file") == 0)) {
                named = c;
                named_len = (size_t)(next - c);
            }
        }
        p = next + bl;
    }
    if (!named)
        return cl_error(CL_ERR_FORMAT,
                        "the multipart form holds no file (a part with a "
                        "filename, or named \"image\" or \"file\")");
    *part = named;
    *part_len = named_len;
    return CL_OK;
}

static int b64_value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+' || ch == '-')
        return 62;
    if (ch == '/' || ch == '_')
        return 63;
    return -1;
}

cl_status cl_serve_base64_decode(const char *s, size_t n, uint8_t *out,
                                 size_t *out_len)
{
    while (n > 0 && s[n - 1] == '=')
        n--;
    if (n % 4 == 1)
        return cl_error(CL_ERR_FORMAT,
                        "base64 text of %zu characters cannot "
                        "be whole bytes",
                        n);
    uint32_t acc = 0;
    int bits = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0)
            return cl_error(CL_ERR_FORMAT,
                            "base64 text has a byte 0x%02x at %zu outside "
                            "its alphabet",
                            (unsigned char)s[i], i);
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[k++] = (uint8_t)(acc >> bits);
        }
    }
    *out_len = k;
    return CL_OK;
}

void cl_serve_infer_free(cl_serve_infer *r)
{
    free(r->x);
    free(r->bytes);
    free(r->off);
    free(r->len);
    memset(r, 0, sizeof *r);
}

/* Copies up to want numbers of a (possibly nested) array into x, counting
 * them all in *count; non-numbers are refused. */
static cl_status flatten(const cl_json *a, float *x, size_t want, size_t *count,
                         int depth)
{
    if (depth > 5)
        return cl_error(CL_ERR_FORMAT, "inputs[0].data is nested deeper than "
                                       "the tensor's 4 dimensions");
    for (const cl_json *e = a->child; e; e = e->next) {
        if (e->type == CL_JSON_ARR) {
            CL_TRY(flatten(e, x, want, count, depth + 1));
            continue;
        }
        if (e->type != CL_JSON_NUM)
            return cl_error(CL_ERR_FORMAT,
                            "inputs[0].data holds a %s where FP32 numbers "
                            "are expected",
                            cl_json_type_name(e->type));
        if (*count < want)
            x[*count] = (float)e->num;
        (*count)++;
    }
    return CL_OK;
}

/* shape: an array of 1..4 non-negative integers into d (n entries). */
static cl_status read_shape(const cl_json *s, int64_t *d, int *nd)
{
    if (!s || s->type != CL_JSON_ARR || s->count < 1 || s->count > 4)
        return cl_error(CL_ERR_FORMAT, "inputs[0].shape must be an array of "
                                       "1 to 4 integers");
    int k = 0;
    for (const cl_json *e = s->child; e; e = e->next) {
        if (e->type != CL_JSON_NUM || !e->is_int || e->i < 0 ||
            e->i > (1 << 24))
            return cl_error(CL_ERR_FORMAT,
                            "inputs[0].shape[%d] is not a "
                            "size (an integer 0..2^24)",
                            k);
        d[k++] = e->i;
    }
    *nd = k;
    return CL_OK;
}

/* The "outputs" the request names, as CL_SERVE_OUT_* bits. */
static cl_status read_outputs(const cl_json *o, int *mask)
{
    static const char *names[] = {"probabilities", "top_k_indices",
                                  "top_k_classes", "top_k_probabilities"};
    *mask = CL_SERVE_OUT_ALL;
    if (!o)
        return CL_OK;
    if (o->type != CL_JSON_ARR)
        return cl_error(CL_ERR_FORMAT, "\"outputs\" must be an array");
    if (o->count == 0)
        return CL_OK;
    *mask = 0;
    for (const cl_json *e = o->child; e; e = e->next) {
        const cl_json *nm = cl_json_get(e, "name");
        if (!nm || nm->type != CL_JSON_STR)
            return cl_error(CL_ERR_FORMAT,
                            "each of \"outputs\" needs a \"name\" string");
        int bit = 0;
        for (int i = 0; i < 4; i++)
            if (strcmp(nm->str, names[i]) == 0)
                bit = 1 << i;
        if (!bit)
            return cl_error(CL_ERR_FORMAT,
                            "unknown output \"%.64s\": the outputs are "
                            "probabilities, top_k_indices, top_k_classes and "
                            "top_k_probabilities",
                            nm->str);
        *mask |= bit;
    }
    return CL_OK;
}

static cl_status parse_bytes(const cl_json *data, int n, cl_serve_infer *r)
{
    size_t total = 0;
    for (const cl_json *e = data->child; e; e = e->next) {
        if (e->type != CL_JSON_STR)
            return cl_error(CL_ERR_FORMAT,
                            "inputs[0].data holds a %s where BYTES strings "
                            "(base64 image files) are expected",
                            cl_json_type_name(e->type));
        total += e->len / 4 * 3 + 3;
    }
    r->bytes = malloc(total ? total : 1);
    r->off = calloc((size_t)n, sizeof *r->off);
    r->len = calloc((size_t)n, sizeof *r->len);
    if (!r->bytes || !r->off || !r->len)
        return cl_error(CL_ERR_NOMEM, "infer request: out of memory");
    size_t at = 0;
    int i = 0;
    for (const cl_json *e = data->child; e; e = e->next, i++) {
        size_t k = 0;
        cl_status s = cl_serve_base64_decode(e->str, e->len, r->bytes + at, &k);
        if (s != CL_OK)
            return cl_error_wrap(s, "inputs[0].data[%d]: ", i);
        r->off[i] = at;
        r->len[i] = k;
        at += k;
    }
    return CL_OK;
}

cl_status cl_serve_infer_parse(const char *body, size_t n, int c, int side,
                               int max_n, cl_serve_infer *r)
{
    memset(r, 0, sizeof *r);
    r->top_k = 5;
    size_t per = (size_t)c * side * side;
    /* A JSON node costs about 112 bytes: allow the values of max_n inputs
     * and some structure, no more, whatever the body's size. */
    cl_json_limits lim = {.max_depth = 16,
                          .max_nodes = per * (size_t)max_n + 4096};
    if (lim.max_nodes > CL_JSON_MAX_NODES)
        lim.max_nodes = CL_JSON_MAX_NODES;
    cl_json_doc *doc = NULL;
    cl_status s = cl_json_parse(&doc, body, n, &lim, "the infer request");
    if (s != CL_OK)
        return s;
    const cl_json *root = cl_json_root(doc);
    const cl_json *inputs = cl_json_get(root, "inputs");
    const cl_json *in = inputs ? inputs->child : NULL;
    const cl_json *id = cl_json_get(root, "id");
    const cl_json *params = cl_json_get(root, "parameters");
    const cl_json *tk = params ? cl_json_get(params, "top_k") : NULL;
    const cl_json *name = in ? cl_json_get(in, "name") : NULL;
    const cl_json *dt = in ? cl_json_get(in, "datatype") : NULL;
    const cl_json *data = in ? cl_json_get(in, "data") : NULL;
    int64_t d[4];
    int nd = 0;
    if (root->type != CL_JSON_OBJ)
        s = cl_error(CL_ERR_FORMAT, "the infer request must be a JSON object");
    else if (!inputs || inputs->type != CL_JSON_ARR || inputs->count != 1)
        s = cl_error(CL_ERR_FORMAT, "the infer request needs \"inputs\": an "
                                    "array of exactly one input");
    else if (id && id->type != CL_JSON_STR)
        s = cl_error(CL_ERR_FORMAT, "\"id\" must be a string");
    else if (tk && (tk->type != CL_JSON_NUM || !tk->is_int || tk->i < 1 ||
                    tk->i > 1000))
        s = cl_error(CL_ERR_FORMAT, "parameters.top_k must be an integer "
                                    "from 1 to 1000");
    else if (!dt || dt->type != CL_JSON_STR ||
             (strcmp(dt->str, "FP32") != 0 && strcmp(dt->str, "BYTES") != 0))
        s = cl_error(CL_ERR_FORMAT, "inputs[0].datatype must be \"FP32\" (a "
                                    "preprocessed tensor) or \"BYTES\" "
                                    "(base64 JPEG or PNG files)");
    else if (!data || data->type != CL_JSON_ARR)
        s = cl_error(CL_ERR_FORMAT, "inputs[0].data must be an array (the "
                                    "binary data extension is not served)");
    else if ((s = read_shape(cl_json_get(in, "shape"), d, &nd)) == CL_OK)
        s = read_outputs(cl_json_get(root, "outputs"), &r->outputs);
    if (s != CL_OK)
        goto done;
    if (id)
        snprintf(r->id, sizeof r->id, "%s", id->str);
    if (name && name->type == CL_JSON_STR)
        snprintf(r->input_name, sizeof r->input_name, "%s", name->str);
    if (tk)
        r->top_k = (int)tk->i;
    r->is_bytes = strcmp(dt->str, "BYTES") == 0;
    if (r->is_bytes) {
        if (nd != 1 || d[0] != (int64_t)data->count)
            s = cl_error(CL_ERR_SHAPE,
                         "inputs[0].shape must be [N] for BYTES, N the "
                         "number of strings in data (%zu)",
                         data->count);
        else
            r->n = (int)d[0];
    } else {
        /* (C, H, W) is one image; (N, C, H, W) several. */
        int64_t nn = nd == 4 ? d[0] : 1;
        const int64_t *chw = nd == 4 ? d + 1 : d;
        if ((nd != 3 && nd != 4) || chw[0] != c || chw[1] != side ||
            chw[2] != side)
            s = cl_error(CL_ERR_SHAPE,
                         "inputs[0].shape must be [N, %d, %d, %d] for FP32: "
                         "the model's preprocessed input",
                         c, side, side);
        else
            r->n = (int)nn;
    }
    if (s == CL_OK && (r->n < 1 || r->n > max_n))
        s = cl_error(CL_ERR_LIMIT,
                     "the request holds %d inputs: from 1 to %d are served "
                     "in one request",
                     r->n, max_n);
    if (s != CL_OK)
        goto done;
    if (r->is_bytes) {
        s = parse_bytes(data, r->n, r);
    } else {
        size_t want = per * (size_t)r->n, got = 0;
        if (!(r->x = malloc(want * sizeof *r->x))) {
            s = cl_error(CL_ERR_NOMEM, "infer request: out of memory");
            goto done;
        }
        if ((s = flatten(data, r->x, want, &got, 0)) == CL_OK && got != want)
            s = cl_error(CL_ERR_SHAPE,
                         "inputs[0].data holds %zu numbers where the shape "
                         "says %zu",
                         got, want);
        for (size_t i = 0; s == CL_OK && i < want; i++)
            if (!isfinite(r->x[i]))
                s = cl_error(CL_ERR_FORMAT,
                             "inputs[0].data[%zu] is not a finite FP32 value",
                             i);
    }
done:
    cl_json_free(doc);
    if (s != CL_OK)
        cl_serve_infer_free(r);
    return s;
}

cl_status cl_serve_json_error(cl_strbuf *b, const char *sentence)
{
    cl_strbuf_adds(b, "{\"error\":");
    cl_strbuf_add_json_str(b, sentence, strlen(sentence));
    return cl_strbuf_adds(b, "}\n");
}
