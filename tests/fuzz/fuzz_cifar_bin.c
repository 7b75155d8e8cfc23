/* libFuzzer target: the CIFAR binary batch reader (extracted folder).
 *
 * Input: byte 0 holds flags (bit 0: CIFAR-100, bit 1: gzip the batch file),
 * then a fz_split of the rest: the batch file (test_batch.bin or test.bin)
 * and the class-names file (batches.meta.txt / fine_label_names.txt, left
 * out when empty). */
#include "data/data.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int hundred = data[0] & 1;
    const uint8_t *a, *b;
    size_t na, nb;
    fz_split(data + 1, size - 1, &a, &na, &b, &nb);
    const char *batch = fz_path(hundred ? "test.bin" : "test_batch.bin");
    const char *meta =
        fz_path(hundred ? "fine_label_names.txt" : "batches.meta.txt");
    fz_write(batch, a, na, data[0] & 2);
    unlink(meta);
    if (nb)
        fz_write(meta, b, nb, 0);

    cl_dataset_spec spec = cl_dataset_spec_default();
    spec.format = hundred ? "cifar100" : "cifar10";
    spec.path = fz_tmpdir();
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
    for (int64_t i = 0; i < n && i < 4; i++) {
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
