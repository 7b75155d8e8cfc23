/* libFuzzer target: the int8 model file (interop/quantized.c) as every
 * command opens it: cl_weights_open (the safetensors reader, then the
 * int8 file's scale checks), the strict load of its dequantized weights
 * into a small network built once (conv1, bn1, relu, conv2, bn2, global
 * pool, fc, as tests/fuzz/make_corpus_quantized.py writes its seeds), and
 * the scales put into the graph's int8 record.  Whatever the bytes, a
 * file is refused with a message or loads scales that are finite and
 * positive. */
#include <math.h>

#include "core/error.h"
#include "fuzz_common.h"
#include "graph/graph.h"
#include "interop/interop.h"
#include "interop/quantized.h"
#include "io/checkpoint.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);

static cl_graph g;

static cl_status build(void)
{
    int x, a, b, r, c, d, p, y;
    cl_conv2d_attr c1 = cl_conv2d_attr_make(3, 4, 3, 1, 1);
    cl_conv2d_attr c2 = cl_conv2d_attr_make(4, 4, 3, 1, 1);
    cl_batchnorm2d_attr bn = cl_batchnorm2d_attr_make(4);
    cl_linear_attr la = {4, 2, 1};
    CL_TRY(cl_graph_input(&g, 3, 6, 6, &x));
    CL_TRY(cl_graph_conv2d(&g, "conv1", x, &c1, &a));
    CL_TRY(cl_graph_batchnorm2d(&g, "bn1", a, &bn, &b));
    CL_TRY(cl_graph_relu(&g, "relu", b, &r));
    CL_TRY(cl_graph_conv2d(&g, "conv2", r, &c2, &c));
    CL_TRY(cl_graph_batchnorm2d(&g, "bn2", c, &bn, &d));
    CL_TRY(cl_graph_global_avgpool(&g, "pool", d, &p));
    CL_TRY(cl_graph_linear(&g, "fc", p, &la, &y));
    return cl_graph_finalize(&g);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (cl_graph_init(&g, 1) != CL_OK || build() != CL_OK) {
        fprintf(stderr, "fuzz: cannot build the graph: %s\n", cl_last_error());
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fz_path("q.safetensors");
    fz_write(path, data, size, 0);
    cl_weights w;
    cl_status s = cl_weights_open(&w, path);
    fz_check_error(s);
    if (s != CL_OK)
        return 0;
    if (w.q) {
        cl_ckpt_load_report rep;
        s = cl_ckpt_load_source(&w.src, &g, CL_CKPT_STRICT, &rep);
        fz_check_error(s);
        if (s == CL_OK) {
            s = cl_qfile_scales(w.q, &g);
            fz_check_error(s);
        }
        if (s == CL_OK && g.quant) {
            for (int t = 0; t < g.n_tensors; t++)
                if (!isfinite(g.quant->act_scale[t]) ||
                    g.quant->act_scale[t] < 0.0f)
                    abort();
            for (size_t k = 0; k < g.quant->n_w_scale; k++)
                if (!isfinite(g.quant->w_scale[k]) ||
                    g.quant->w_scale[k] < 0.0f)
                    abort();
        }
        /* The next input starts from no scales. */
        if (g.quant) {
            memset(g.quant->act_scale, 0,
                   sizeof *g.quant->act_scale * (size_t)g.n_tensors);
            memset(g.quant->w_scale, 0,
                   sizeof *g.quant->w_scale * g.quant->n_w_scale);
        }
    }
    cl_weights_close(&w);
    return 0;
}
