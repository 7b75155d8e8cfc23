/* libFuzzer target: the IDX reader (images + labels, plain or gzip).
 *
 * Input: byte 0 holds flags (bit 0: gzip the images file, bit 1: gzip the
 * labels file), then a fz_split of the rest: the images file, the labels
 * file.  Inputs that are themselves gzip streams also reach zlib's path. */
#include "data/data.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int flags = data[0];
    const uint8_t *a, *b;
    size_t na, nb;
    fz_split(data + 1, size - 1, &a, &na, &b, &nb);
    const char *img = fz_path("train-images-idx3-ubyte");
    fz_write(img, a, na, flags & 1);
    fz_write(fz_path("train-labels-idx1-ubyte"), b, nb, flags & 2);

    cl_dataset_spec spec = cl_dataset_spec_default();
    spec.format = (flags & 4) ? "idx" : "mnist";
    spec.path = img;
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
            abort(); /* a label outside the classes the dataset reports */
    }
    cl_image_free(&im);
    cl_dataset_close(ds);
    return 0;
}
