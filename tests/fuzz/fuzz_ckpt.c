/* libFuzzer target: the MindSpore .ckpt reader (cl_ms_ckpt_open: protobuf
 * fields, tags, dims, dtypes, content sizes), the name mapping of every
 * tensor it accepts, and the loader (cl_ms_load) into a resnet18 graph
 * built once. */
#include "fuzz_common.h"
#include "graph/graph.h"
#include "interop/interop.h"
#include "models/resnet.h"

/* The bytes per element of the dtypes whose size the reader checks. */
static size_t esize(const char *t)
{
    static const char *const n[] = {"Float32", "Float16", "BFloat16",
                                    "Float64", "Int8",    "Int32",
                                    "Int64",   "UInt8",   NULL};
    static const size_t z[] = {4, 2, 2, 8, 1, 4, 8, 1};
    for (int i = 0; n[i]; i++)
        if (strcmp(t, n[i]) == 0)
            return z[i];
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);

static cl_graph g;

/* The graph is built once, before the first input: zeroing its arenas
 * under ASan takes seconds, which must not count against an input. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    cl_resnet_config rc = cl_resnet_config_default();
    rc.depth = 18;
    rc.num_classes = 10;
    rc.stem = CL_STEM_CIFAR;
    if (cl_graph_init(&g, 1) != CL_OK ||
        cl_resnet_build(&g, &rc, 32, 32, 0, 0) != CL_OK) {
        fprintf(stderr, "fuzz: cannot build the graph: %s\n", cl_last_error());
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fz_path("x.ckpt");
    fz_write(path, data, size, 0);
    cl_ms_ckpt c;
    cl_status s = cl_ms_ckpt_open(&c, path);
    fz_check_error(s);
    if (s != CL_OK)
        return 0;
    unsigned acc = 0;
    for (int i = 0; i < c.n; i++) {
        const cl_ms_tensor *t = &c.t[i];
        size_t nl = strnlen(t->name, sizeof t->name);
        if (nl == 0 || nl == sizeof t->name ||
            strnlen(t->dtype, sizeof t->dtype) == sizeof t->dtype)
            abort();
        /* The content lies inside the file. */
        if (t->nbytes &&
            (t->data < c.buf || t->data + t->nbytes > c.buf + c.size))
            abort();
        for (size_t k = 0; k < t->nbytes; k++)
            acc += t->data[k];
        /* A checked dtype's content is exactly dims x size. */
        size_t es = esize(t->dtype);
        if (es) {
            uint64_t numel = 1;
            for (int d = 0; d < t->shape.ndim; d++)
                numel *= (uint64_t)t->shape.d[d];
            if (numel * es != t->nbytes)
                abort();
        }
        char out[256];
        int m = cl_ms_map_name(t->name, out, sizeof out);
        if (m == 1 && strnlen(out, sizeof out) == sizeof out)
            abort();
    }
    cl_ms_ckpt_close(&c);
    cl_ms_report rep;
    fz_check_error(cl_ms_load(path, &g, CL_CKPT_PRETRAINED, &rep));
    if (acc == 0xFFFFFFFFu)
        fprintf(stderr, "fuzz: checksum\n");
    return 0;
}
