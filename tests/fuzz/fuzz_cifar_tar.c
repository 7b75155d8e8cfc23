/* libFuzzer target: the tar reader, through the CIFAR .tar.gz path.
 *
 * Input: byte 0 holds flags (bit 0: CIFAR-100, bit 1: gzip the archive),
 * the rest is the archive (a plain tar is read as is by zlib, so the fuzzer
 * mutates tar headers directly; gzip seeds cover the compressed path). */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *path = fz_path("cifar.tar.gz");
    fz_write(path, data + 1, size - 1, data[0] & 2);
    cl_dataset_spec spec = cl_dataset_spec_default();
    spec.format = (data[0] & 1) ? "cifar100" : "cifar10";
    spec.path = path;
    spec.usage = CL_USAGE_TEST;
    fz_walk_dataset(&spec, 2);
    return 0;
}
