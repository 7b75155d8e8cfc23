/* libFuzzer target: a YAML recipe through cl_config_load_yaml_text, then the
 * writer: whatever loads must write back as YAML that loads equal. */
#include "fuzz_common.h"
#include "io/config.h"
#include "io/strbuf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cl_config c, d;
    cl_config_defaults(&c);
    cl_status s =
        cl_config_load_yaml_text(&c, (const char *)data, size, "fuzz.yaml");
    fz_check_error(s);
    if (s != CL_OK)
        return 0;
    cl_strbuf sb;
    cl_strbuf_init(&sb);
    if (cl_config_format_yaml(&c, &sb) != CL_OK)
        abort();
    cl_config_defaults(&d);
    s = cl_config_load_yaml_text(&d, cl_strbuf_str(&sb), sb.len, "round-trip");
    if (s != CL_OK) {
        fprintf(stderr, "fuzz: written YAML does not load: %s\n",
                cl_last_error());
        abort();
    }
    const char *k = cl_config_diff(&c, &d);
    if (k) {
        fprintf(stderr, "fuzz: key %s differs after a round trip\n", k);
        abort();
    }
    cl_strbuf_free(&sb);
    return 0;
}
