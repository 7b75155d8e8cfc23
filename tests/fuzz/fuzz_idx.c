/* libFuzzer target: the IDX reader (images + labels, plain or gzip).
 *
 * Input: byte 0 holds flags (bit 0: gzip the images file, bit 1: gzip the
 * labels file, bit 2: format "idx" instead of "mnist"), then a fz_split of
 * the rest: the images file, the labels file.  Inputs that are themselves
 * gzip streams also reach zlib's path. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *img = fz_path("train-images-idx3-ubyte");
    int flags = fz_write_pair(data, size, img, 1,
                              fz_path("train-labels-idx1-ubyte"), 2, 1);
    if (flags < 0)
        return 0;
    cl_dataset_spec spec = cl_dataset_spec_default();
    spec.format = (flags & 4) ? "idx" : "mnist";
    spec.path = img;
    fz_walk_dataset(&spec, 4);
    return 0;
}
