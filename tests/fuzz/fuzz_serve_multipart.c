/* libFuzzer target: the multipart/form-data reader of `classic serve`'s
 * classify route.  The input's first line is the Content-Type header, the
 * rest the body; a file it finds must lie inside the body. */
#include "fuzz_common.h"
#include "serve/protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t hn = nl ? (size_t)(nl - data) : size;
    char *ct = malloc(hn + 1);
    if (!ct)
        return 0;
    memcpy(ct, data, hn);
    ct[hn] = '\0';
    const uint8_t *body = nl ? nl + 1 : data + size;
    size_t n = (size_t)(data + size - body);
    const uint8_t *part = NULL;
    size_t len = 0;
    cl_status s = cl_serve_multipart_file(ct, body, n, &part, &len);
    fz_check_error(s);
    if (s == CL_OK && (part < body || part + len > body + n))
        abort();
    free(ct);
    return 0;
}
