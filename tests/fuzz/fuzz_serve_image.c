/* libFuzzer target: what `classic serve` does with the bytes of an image
 * before its model sees them: the magic-byte sniffing that picks the
 * decoder (or refuses with 400), then the decode with the pixel bound
 * applied from the header (1 Mi pixels here), which a decompression bomb
 * must never pass. */
#include "fuzz_common.h"
#include "serve/protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *type = cl_serve_sniff(data, size);
    if (!type)
        return 0;
    cl_image img;
    memset(&img, 0, sizeof img);
    cl_status s = cl_image_decode(data, size, "fuzz", 0, 1u << 20, &img);
    fz_check_error(s);
    if (s == CL_OK && ((uint64_t)img.h * (uint64_t)img.w > (1u << 20) ||
                       (img.c != 1 && img.c != 3)))
        abort();
    cl_image_free(&img);
    return 0;
}
