/* Reading a caller's sized options struct (opts.h). */
#include <string.h>

#include "api/opts.h"
#include "core/error.h"

cl_status cl_api_read_opts(void *dst, size_t dst_size, const void *src,
                           const char *fn, const char *type)
{
    size_t size = 0;
    memset(dst, 0, dst_size);
    if (!src)
        return CL_OK;
    memcpy(&size, src, sizeof size); /* every such struct starts with it */
    if (size < sizeof size || size > dst_size)
        return cl_error(CL_ERR_ARG,
                        "%s: opts->size is %zu, expected sizeof(%s) (%zu in "
                        "this library; a larger size means a program built "
                        "against a newer classic.h)",
                        fn, size, type, dst_size);
    memcpy(dst, src, size);
    return CL_OK;
}
