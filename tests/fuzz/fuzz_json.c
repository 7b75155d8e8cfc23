/* libFuzzer target: the JSON parser from memory, walking the whole tree and
 * checking the counts and lengths it reports. */
#include <string.h>

#include "fuzz_common.h"
#include "io/json.h"

static void walk(const cl_json *v, int depth)
{
    if (depth > CL_JSON_MAX_DEPTH + 1)
        abort(); /* deeper than the limit the parser enforces */
    if (v->type == CL_JSON_STR && v->str[v->len] != '\0')
        abort();
    if (v->key && v->key[v->key_len] != '\0')
        abort();
    size_t n = 0;
    for (const cl_json *c = v->child; c; c = c->next) {
        walk(c, depth + 1);
        n++;
        /* A key holding "\u0000" cannot be looked up by C string, by
         * design (json.h); every other key must be found. */
        if (v->type == CL_JSON_OBJ &&
            (!c->key ||
             (strlen(c->key) == c->key_len && !cl_json_get(v, c->key))))
            abort();
    }
    if ((v->type == CL_JSON_ARR || v->type == CL_JSON_OBJ) && n != v->count)
        abort();
    (void)cl_json_type_name(v->type);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cl_json_doc *d = NULL;
    cl_json_limits lim = {0, 1u << 16};
    cl_status s = cl_json_parse(&d, (const char *)data, size, &lim, "fuzz");
    fz_check_error(s);
    if (s != CL_OK)
        return 0;
    walk(cl_json_root(d), 1);
    cl_json_free(d);
    return 0;
}
