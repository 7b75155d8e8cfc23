/* libFuzzer target: the safetensors reader (header length, JSON header,
 * offsets, data), then every accessor on each tensor it accepts. */
#include "fuzz_common.h"
#include "io/safetensors.h"
#include "core/mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fz_path("x.safetensors");
    fz_write(path, data, size, 0);
    cl_st_file *f = NULL;
    cl_status s = cl_st_open(&f, path);
    fz_check_error(s);
    if (s != CL_OK)
        return 0;
    size_t n = cl_st_count(f);
    for (size_t i = 0; i < n; i++) {
        const char *name = cl_st_name(f, i);
        if (!name || cl_st_find(f, name) < 0)
            abort();
        cl_st_dtype dt;
        cl_shape sh;
        cl_st_info(f, i, &dt, &sh);
        size_t nbytes = 0;
        const uint8_t *p = cl_st_data(f, i, &nbytes);
        if (nbytes % cl_st_dtype_size(dt) != 0)
            abort();
        unsigned acc = 0;
        for (size_t k = 0; k < nbytes; k++)
            acc += p[k];
        size_t numel = nbytes / cl_st_dtype_size(dt);
        if (numel > (1u << 20))
            continue;
        float *x = cl_alloc((numel + 1) * sizeof(float), "fuzz");
        int64_t *y = cl_alloc((numel + 1) * sizeof(int64_t), "fuzz");
        if (x && y) {
            fz_check_error(cl_st_read_f32(f, i, x, numel));
            fz_check_error(cl_st_read_i64(f, i, y, numel));
            /* A wrong count must be refused, not read past. */
            if (cl_st_read_f32(f, i, x, numel + 1) == CL_OK)
                abort();
        }
        cl_free(x);
        cl_free(y);
        if (acc == 0xFFFFFFFFu)
            fprintf(stderr, "fuzz: checksum\n");
    }
    size_t m = cl_st_metadata_count(f);
    for (size_t i = 0; i < m; i++) {
        const char *k = cl_st_metadata_key(f, i);
        if (!k || !cl_st_metadata_value(f, i) || !cl_st_metadata(f, k))
            abort();
    }
    cl_st_close(f);
    return 0;
}
