/* Command-line options shared by the commands: a YAML recipe and
 * `--key value` overrides of any config key. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "core/error.h"

int cl_cli_is_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    return 0;
}

cl_status cl_cli_config(int argc, char **argv, const char *const *own,
                        cl_config *c)
{
    cl_config_defaults(c);
    /* The recipe first, so overrides apply on top whatever their order. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "-c") == 0) {
            if (i + 1 >= argc)
                return cl_error(CL_ERR_ARG, "--config needs a file name");
            CL_TRY(cl_config_load_yaml(c, argv[i + 1]));
        }
    }
    CL_TRY(cl_cli_overrides(argc, argv, own, c));
    return cl_config_check(c);
}

cl_status cl_cli_overrides(int argc, char **argv, const char *const *own,
                           cl_config *c)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--config") == 0 || strcmp(a, "-c") == 0) {
            i++;
            continue;
        }
        int skip = 0;
        for (int k = 0; own && own[k]; k++)
            if (strcmp(a, own[k]) == 0)
                skip = 1;
        if (skip) {
            i++; /* the command's own option and its value */
            continue;
        }
        if (strncmp(a, "--", 2) != 0)
            return cl_error(CL_ERR_ARG,
                            "unexpected argument '%s' (options are --key "
                            "value)",
                            a);
        const char *key = a + 2;
        const char *eq = strchr(key, '=');
        char kbuf[128];
        const char *val;
        if (eq) {
            snprintf(kbuf, sizeof kbuf, "%.*s", (int)(eq - key), key);
            key = kbuf;
            val = eq + 1;
        } else {
            if (i + 1 >= argc)
                return cl_error(CL_ERR_ARG, "--%s needs a value", key);
            val = argv[++i];
        }
        CL_TRY(cl_config_set(c, key, val));
    }
    return CL_OK;
}

const char *cl_cli_option(int argc, char **argv, const char *name)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    return NULL;
}
