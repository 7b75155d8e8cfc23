/* libFuzzer target: the PyTorch .pth reader (zip directory, local headers,
 * CRCs, the pickle machine, storages and views), then every tensor read
 * both ways and the ResNet inference on what it accepts.
 *
 * Input: a flags byte; bit 0 set: the rest is the file.  Clear: le16
 * length L, L bytes of data.pkl, then up to 16 storages "0", "1", ... as
 * le32 length + bytes, wrapped by the harness into a zip with correct
 * CRCs, so that mutations of the pickle reach the pickle machine. */
#include "fuzz_common.h"
#include "core/mem.h"
#include "interop/interop.h"

static void put(uint8_t *b, size_t *n, uint64_t v, int bytes)
{
    for (int k = 0; k < bytes; k++)
        b[(*n)++] = (uint8_t)(v >> (8 * k));
}

/* Writes a zip of stored entries as torch.save lays them out. */
static void write_zip(const char *path, const char *const *names,
                      const uint8_t *const *data, const size_t *len, int n)
{
    size_t total = 22;
    for (int k = 0; k < n; k++)
        total += 30 + 46 + 2 * strlen(names[k]) + len[k];
    uint8_t *b = malloc(total), *cd = malloc(total);
    size_t m = 0, c = 0;
    if (!b || !cd)
        abort();
    for (int k = 0; k < n; k++) {
        size_t nl = strlen(names[k]), off = m;
        uint32_t crc = (uint32_t)crc32(0L, data[k], (uInt)len[k]);
        put(b, &m, 0x04034b50, 4);
        put(b, &m, 20, 2); /* version */
        put(b, &m, 0, 4);  /* flags, method: stored */
        put(b, &m, 0, 4);  /* time, date */
        put(b, &m, crc, 4);
        put(b, &m, len[k], 4);
        put(b, &m, len[k], 4);
        put(b, &m, nl, 2);
        put(b, &m, 0, 2);
        memcpy(b + m, names[k], nl);
        m += nl;
        if (len[k])
            memcpy(b + m, data[k], len[k]);
        m += len[k];
        put(cd, &c, 0x02014b50, 4);
        put(cd, &c, 20, 2);
        put(cd, &c, 20, 2);
        put(cd, &c, 0, 4);
        put(cd, &c, 0, 4);
        put(cd, &c, crc, 4);
        put(cd, &c, len[k], 4);
        put(cd, &c, len[k], 4);
        put(cd, &c, nl, 2);
        put(cd, &c, 0, 6);
        put(cd, &c, 0, 2);
        put(cd, &c, 0, 4);
        put(cd, &c, off, 4);
        memcpy(cd + c, names[k], nl);
        c += nl;
    }
    size_t cd_off = m;
    memcpy(b + m, cd, c);
    m += c;
    put(b, &m, 0x06054b50, 4);
    put(b, &m, 0, 4);
    put(b, &m, (uint64_t)n, 2);
    put(b, &m, (uint64_t)n, 2);
    put(b, &m, c, 4);
    put(b, &m, cd_off, 4);
    put(b, &m, 0, 2);
    fz_write(path, b, m, 0);
    free(b);
    free(cd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fz_path("x.pth");
    if (size < 1)
        return 0;
    if (data[0] & 1) {
        fz_write(path, data + 1, size - 1, 0);
    } else {
        if (size < 3)
            return 0;
        size_t L = (size_t)data[1] | (size_t)data[2] << 8;
        if (L > size - 3)
            L = size - 3;
        static char names[18][32];
        const char *np[18];
        const uint8_t *parts[18];
        size_t lens[18];
        int n = 0;
        np[n] = "archive/data.pkl";
        parts[n] = data + 3;
        lens[n++] = L;
        np[n] = "archive/version";
        parts[n] = (const uint8_t *)"3\n";
        lens[n++] = 2;
        size_t at = 3 + L;
        for (int k = 0; k < 16 && size - at >= 4; k++) {
            size_t len = (size_t)data[at] | (size_t)data[at + 1] << 8 |
                         (size_t)data[at + 2] << 16 |
                         (size_t)data[at + 3] << 24;
            at += 4;
            if (len > size - at)
                len = size - at;
            snprintf(names[n], sizeof names[n], "archive/data/%d", k);
            np[n] = names[n];
            parts[n] = data + at;
            lens[n++] = len;
            at += len;
        }
        write_zip(path, np, parts, lens, n);
    }
    cl_weights w;
    cl_status s = cl_weights_open(&w, path);
    fz_check_error(s);
    if (s != CL_OK)
        return 0;
    if (!w.pth) {
        cl_weights_close(&w);
        return 0;
    }
    cl_pth *p = w.pth;
    for (size_t i = 0; i < cl_pth_count(p); i++) {
        const char *name = cl_pth_name(p, i);
        if (!name || !name[0] || cl_pth_find(p, name) < 0 ||
            !cl_pth_dtype(p, i))
            abort();
        cl_shape sh = cl_pth_shape(p, i);
        int64_t numel = cl_shape_numel(&sh);
        if (numel < 0)
            abort();
        if (numel > (1 << 20))
            continue;
        size_t n = (size_t)numel;
        float *x = cl_alloc((n + 1) * sizeof(float), "fuzz");
        int64_t *y = cl_alloc((n + 1) * sizeof(int64_t), "fuzz");
        if (x && y) {
            /* Exactly one of the two reads fits the dtype. */
            cl_status a = cl_pth_read_f32(p, i, x, n);
            cl_status b = cl_pth_read_i64(p, i, y, n);
            fz_check_error(a);
            fz_check_error(b);
            if ((a == CL_OK) == (b == CL_OK))
                abort();
            /* A wrong count must be refused, not read past. */
            if (cl_pth_read_f32(p, i, x, n + 1) == CL_OK)
                abort();
        }
        cl_free(x);
        cl_free(y);
    }
    cl_arch rc;
    fz_check_error(cl_weights_infer(&w, NULL, &rc));
    cl_weights_close(&w);
    return 0;
}
