/* libFuzzer target: the body of POST /v2/models/NAME/infer (`classic
 * serve`), for a model of 1 channel at 2 x 2 and at most 4 inputs; what it
 * accepts must hold what it says it holds. */
#include "fuzz_common.h"
#include "serve/protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cl_serve_infer q;
    cl_status s = cl_serve_infer_parse((const char *)data, size, 1, 2, 4, &q);
    fz_check_error(s);
    if (s != CL_OK)
        return 0;
    if (q.n < 1 || q.n > 4 || q.top_k < 1 || q.outputs < 1 ||
        q.outputs > CL_SERVE_OUT_ALL)
        abort();
    if (q.is_bytes) {
        /* Every file lies inside the decoded buffer, one after another. */
        size_t end = 0;
        for (int i = 0; i < q.n; i++) {
            if (q.off[i] != end)
                abort();
            end += q.len[i];
        }
        volatile uint8_t last = end ? q.bytes[end - 1] : 0;
        (void)last; /* read for ASan */
    } else {
        volatile float sum = 0;
        for (int i = 0; i < q.n * 4; i++)
            sum += q.x[i];
        (void)sum;
    }
    cl_serve_infer_free(&q);
    return 0;
}
