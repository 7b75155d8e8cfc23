/* libFuzzer target: the tar reader, through the CIFAR .tar.gz path.
 *
 * Input: byte 0 holds flags (bit 0: CIFAR-100, bit 1: gzip the archive),
 * the rest is the archive (a plain tar is read as is by zlib, so the fuzzer
 * mutates tar headers directly; gzip seeds cover the compressed path). */
#include "data/data.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int hundred = data[0] & 1;
    const char *path = fz_path("cifar.tar.gz");
    fz_write(path, data + 1, size - 1, data[0] & 2);

    cl_dataset_spec spec = cl_dataset_spec_default();
    spec.format = hundred ? "cifar100" : "cifar10";
    spec.path = path;
    spec.usage = CL_USAGE_TEST;
    cl_dataset *ds = NULL;
    cl_status s = cl_dataset_open(&ds, &spec);
    fz_check_error(s);
    if (s != CL_OK)
        return 0;
    int64_t n = cl_dataset_count(ds);
    int k = cl_dataset_num_classes(ds);
    for (int c = 0; c < k; c++)
        (void)cl_dataset_class_name(ds, c);
    cl_image im = {0};
    for (int64_t i = 0; i < n && i < 2; i++) {
        int32_t lab = -1;
        s = cl_dataset_get(ds, i, 0, &im, &lab);
        fz_check_error(s);
        if (s == CL_OK && (lab < 0 || lab >= k))
            abort();
    }
    cl_image_free(&im);
    cl_dataset_close(ds);
    return 0;
}
