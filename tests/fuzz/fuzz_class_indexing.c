/* libFuzzer target: the ImageFolder class_indexing file (`name index`
 * lines) against a fixed tree of three class folders. */
#include <sys/stat.h>

#include "data/data.h"
#include "fuzz_common.h"

static const char *root(void)
{
    static char r[512];
    if (r[0])
        return r;
    snprintf(r, sizeof r, "%s", fz_path("root"));
    static const char *const cls[3] = {"bird", "cat", "dog"};
    mkdir(r, 0700);
    for (int i = 0; i < 3; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", r, cls[i]);
        mkdir(p, 0700);
        snprintf(p, sizeof p, "%s/%s/a.png", r, cls[i]);
        fz_write(p, (const uint8_t *)"", 0, 0);
    }
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *rt = root();
    const char *map = fz_path("classes.txt");
    fz_write(map, data, size, 0);
    cl_dataset_spec spec = cl_dataset_spec_default();
    spec.format = "imagefolder";
    spec.path = rt;
    spec.class_indexing = map;
    cl_dataset *ds = NULL;
    cl_status s = cl_dataset_open(&ds, &spec);
    fz_check_error(s);
    if (s != CL_OK)
        return 0;
    int k = cl_dataset_num_classes(ds);
    for (int c = 0; c < k; c++)
        if (!cl_dataset_class_name(ds, c))
            abort();
    for (int64_t i = 0; i < cl_dataset_count(ds); i++) {
        int32_t lab = cl_dataset_label(ds, i);
        if (lab < 0 || lab >= k || !cl_dataset_path(ds, i))
            abort();
    }
    cl_dataset_close(ds);
    return 0;
}
