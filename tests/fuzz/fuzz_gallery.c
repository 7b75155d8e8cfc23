/* libFuzzer target: a features file as `classic retrieve` opens it (the
 * entries' dtypes and shapes, names, class names, finite rows), then a
 * top-k of its first rows against the whole gallery and their names. */
#include "fuzz_common.h"
#include "train/retrieval.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fz_path("g.safetensors");
    fz_write(path, data, size, 0);
    cl_gallery g;
    cl_status s = cl_gallery_open(&g, path);
    fz_check_error(s);
    if (s != CL_OK)
        return 0;
    int64_t nq = g.n < 4 ? g.n : 4;
    int k = g.n < 3 ? (int)g.n : 3;
    int64_t idx[12];
    float sim[12];
    if ((size_t)g.n * (size_t)g.dim <= ((size_t)1 << 22)) {
        fz_check_error(cl_retrieval_topk(&g, g.feat, nq, k, idx, sim));
        for (int64_t i = 0; i < nq * k; i++) {
            char buf[160];
            if (idx[i] < 0 || idx[i] >= g.n)
                abort();
            const char *name = cl_gallery_row_name(&g, idx[i], buf, sizeof buf);
            const char *cls = cl_gallery_class_name(&g, g.labels[idx[i]]);
            if (!name || !cls || strlen(name) + strlen(cls) == (size_t)-1)
                abort();
        }
    }
    cl_gallery_close(&g);
    return 0;
}
