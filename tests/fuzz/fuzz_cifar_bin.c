/* libFuzzer target: the CIFAR binary batch reader (extracted folder).
 *
 * Input: byte 0 holds flags (bit 0: CIFAR-100, bit 1: gzip the batch file),
 * then a fz_split of the rest: the batch file (test_batch.bin or test.bin)
 * and the class-names file (batches.meta.txt / fine_label_names.txt, left
 * out when empty). */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int hundred = data[0] & 1;
    fz_write_pair(
        data, size, fz_path(hundred ? "test.bin" : "test_batch.bin"), 2,
        fz_path(hundred ? "fine_label_names.txt" : "batches.meta.txt"), 0, 0);
    cl_dataset_spec spec = cl_dataset_spec_default();
    spec.format = hundred ? "cifar100" : "cifar10";
    spec.path = fz_tmpdir();
    spec.usage = CL_USAGE_TEST;
    fz_walk_dataset(&spec, 4);
    return 0;
}
