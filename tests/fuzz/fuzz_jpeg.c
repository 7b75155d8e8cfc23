/* libFuzzer target: JPEG decoding from memory (cl_image_decode); the seed
 * corpus holds JPEG files, the decoder picks the format by magic. */
#include "fuzz_image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fz_image_one(data, size);
}
