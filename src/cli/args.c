/* Command-line options shared by the commands: a YAML recipe and
 * `--key value` overrides of any config key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "cli/cli.h"
#include "core/error.h"
#include "train/evaluate.h"

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

void cl_cli_pairs_free(cl_cli_pairs *p)
{
    for (int i = 0; i < p->n; i++)
        free(p->kv[i]);
    free(p->kv);
    p->kv = NULL;
    p->n = 0;
}

static cl_status add_pair(cl_cli_pairs *p, const char *key, int key_len,
                          const char *val)
{
    char **kv = realloc(p->kv, (size_t)(p->n + 1) * sizeof *kv);
    if (!kv)
        return cl_error(CL_ERR_NOMEM, "command line: out of memory");
    p->kv = kv;
    size_t len = (size_t)key_len + strlen(val) + 2;
    if (!(kv[p->n] = malloc(len)))
        return cl_error(CL_ERR_NOMEM, "command line: out of memory");
    snprintf(kv[p->n++], len, "%.*s=%s", key_len, key, val);
    return CL_OK;
}

cl_status cl_cli_pairs_collect(int argc, char **argv, const char *const *own,
                               cl_cli_pairs *p)
{
    p->kv = NULL;
    p->n = 0;
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
        cl_status s = CL_OK;
        const char *key = a + 2;
        const char *eq = strchr(key, '=');
        if (strncmp(a, "--", 2) != 0)
            s = cl_error(CL_ERR_ARG,
                         "unexpected argument '%s' (options are --key value)",
                         a);
        else if (eq)
            s = add_pair(p, key, (int)(eq - key), eq + 1);
        else if (i + 1 >= argc)
            s = cl_error(CL_ERR_ARG, "--%s needs a value", key);
        else
            s = add_pair(p, key, (int)strlen(key), argv[++i]);
        if (s != CL_OK) {
            cl_cli_pairs_free(p);
            return s;
        }
    }
    return CL_OK;
}

cl_status cl_cli_overrides(int argc, char **argv, const char *const *own,
                           cl_config *c)
{
    cl_cli_pairs p;
    cl_status s = cl_cli_pairs_collect(argc, argv, own, &p);
    for (int i = 0; s == CL_OK && i < p.n; i++)
        s = cl_config_set_pair(c, p.kv[i], "command line");
    cl_cli_pairs_free(&p);
    return s;
}

const char *cl_cli_option(int argc, char **argv, const char *name)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    return NULL;
}

int cl_cli_raw_weights(int argc, char **argv, const char *what, int *raw)
{
    const char *v = cl_cli_option(argc, argv, "--load_ema");
    cl_config c;
    cl_config_defaults(&c);
    *raw = 0;
    if (!v)
        return 0;
    /* The recipe key's parser, so that the spellings and the message are
     * the config's. */
    cl_status s = cl_config_set(&c, "load_ema", v);
    if (s != CL_OK) {
        cl_cli_fail(what, s);
        return 2;
    }
    *raw = !c.load_ema;
    return 0;
}

int cl_cli_precision(int argc, char **argv, const char *what, const char **out)
{
    cl_precision p;
    *out = cl_cli_option(argc, argv, "--precision");
    if (!*out)
        return 0;
    cl_status s = cl_precision_parse(*out, &p);
    if (s != CL_OK) {
        cl_cli_fail(what, s);
        return 2;
    }
    return 0;
}

static int listed(const char *const *list, const char *a, size_t n)
{
    for (int k = 0; list && list[k]; k++)
        if (strlen(list[k]) == n && strncmp(list[k], a, n) == 0)
            return 1;
    return 0;
}

int cl_cli_refuse_options(int argc, char **argv, const char *what,
                          const char *const *own, const char *const *flags,
                          int recipe_keys)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0)
            continue;
        size_t n = strcspn(a, "="); /* --key=value */
        int inline_value = a[n] == '=';
        /* The command's own options are spelled `--name value` only. */
        if (!inline_value && listed(flags, a, n))
            continue;
        if (!inline_value && listed(own, a, n)) {
            i++;
            continue;
        }
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(n - 2), a + 2);
        if (recipe_keys && n - 2 < sizeof key && cl_eval_key_applies(key)) {
            i += !inline_value;
            continue;
        }
        /* amp is the one such key whose inference meaning users look
         * for: say where it went. */
        int amp = strcmp(key, "amp") == 0 || strcmp(key, "amp_level") == 0;
        fprintf(stderr,
                "classic %s: --%s does not apply to %s (%s`classic %s --help` "
                "lists what does)\n",
                what, key, what,
                amp ? "it is how a run trains, and a trained model runs at "
                      "--precision; "
                    : "",
                what);
        return 2;
    }
    return 0;
}
