/* The body of the JPEG and PNG targets: cl_image_decode in memory, at full
 * size and with a DCT-scaling hint, checking the dims it reports. */
#ifndef CL_FUZZ_IMAGE_H
#define CL_FUZZ_IMAGE_H

#include "data/data.h"
#include "fuzz_common.h"

/* Small enough that a hostile header cannot make a run allocate more than
 * a few MB, large enough for every seed. */
#define FZ_MAX_PIXELS (1u << 20)

static inline int fz_image_one(const uint8_t *data, size_t size)
{
    cl_image im = {0};
    int hints[2] = {0, 8};
    for (int k = 0; k < 2; k++) {
        cl_status s =
            cl_image_decode(data, size, "fuzz", hints[k], FZ_MAX_PIXELS, &im);
        fz_check_error(s);
        if (s != CL_OK)
            break;
        if (im.h <= 0 || im.w <= 0 || (im.c != 1 && im.c != 3) ||
            (uint64_t)im.h * (uint64_t)im.w > FZ_MAX_PIXELS)
            abort(); /* decoded dims the decoder should have refused */
        /* Touch every byte so ASan sees a short buffer. */
        size_t n = (size_t)im.h * (size_t)im.w * (size_t)im.c;
        unsigned acc = 0;
        for (size_t i = 0; i < n; i++)
            acc += im.data[i];
        if (acc == 0xFFFFFFFFu)
            fprintf(stderr, "fuzz: checksum\n");
    }
    cl_image_free(&im);
    return 0;
}

#endif
