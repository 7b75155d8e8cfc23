/* Decoded images: buffers, JPEG (libjpeg) and PNG (libpng) decoding. */
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "data/data.h"

cl_status cl_image_reserve(cl_image *img, int h, int w, int c)
{
    size_t n;
    CL_TRY(cl_mul_size((size_t)h * (size_t)w, (size_t)c, &n, "image"));
    if (n > img->cap) {
        uint8_t *p = cl_alloc(n, "image");
        if (!p)
            return CL_ERR_NOMEM;
        cl_free(img->data);
        img->data = p;
        img->cap = n;
    }
    img->h = h;
    img->w = w;
    img->c = c;
    return CL_OK;
}

void cl_image_free(cl_image *img)
{
    cl_free(img->data);
    memset(img, 0, sizeof *img);
}

cl_status cl_image_load(const char *path, int min_side, uint64_t max_pixels,
                        cl_image *img)
{
    return cl_error(CL_ERR_UNSUPPORTED, "%s: decoders not built yet", path);
}
