/* The CLI's commands: each `classic <name>` is one function in its own file. */
#ifndef CL_CLI_CLI_H
#define CL_CLI_CLI_H

#include "io/config.h"

typedef struct cl_cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
} cl_cli_command;

/* Prints "classic: <what>: <cl_last_error()>" to stderr; returns 1. */
int cl_cli_fail(const char *what, int status);

/* Non-zero if --help or -h is among the arguments. */
int cl_cli_is_help(int argc, char **argv);
/* Defaults, then the --config recipe, then every `--key value` (or
 * --key=value) override, then the cross-key check.  Options listed in own
 * (NULL-terminated, each taking one value) belong to the command and are
 * skipped. */
cl_status cl_cli_config(int argc, char **argv, const char *const *own,
                        cl_config *c);
/* Only the `--key value` overrides, onto *c as it is (no check). */
cl_status cl_cli_overrides(int argc, char **argv, const char *const *own,
                           cl_config *c);
/* The `--key value` (or --key=value) overrides as "key=value" strings, in
 * order, for the C API's override lists; own as for cl_cli_config. */
typedef struct cl_cli_pairs {
    char **kv;
    int n;
} cl_cli_pairs;
cl_status cl_cli_pairs_collect(int argc, char **argv, const char *const *own,
                               cl_cli_pairs *p);
void cl_cli_pairs_free(cl_cli_pairs *p);
/* The value after option `name`, or NULL. */
const char *cl_cli_option(int argc, char **argv, const char *name);
/* `--load_ema false` among the arguments: *raw = 1 (read a checkpoint's raw
 * weights, not its EMA); 0 otherwise.  Returns 2 after a message naming
 * the key when the value is no boolean, else 0. */
int cl_cli_raw_weights(int argc, char **argv, const char *what, int *raw);

/* One rule for options a command does not use: the first `--name` that is
 * neither one of own (each taking a value), nor of flags (taking none, may
 * be NULL), nor -- with recipe_keys -- a recipe key that applies to
 * evaluating a checkpoint (cl_eval_key_applies) is refused with "classic
 * <what>: --name does not apply to <what> (...)".  Returns 2 then, else
 * 0.  Arguments not starting with "--" are left to the command. */
int cl_cli_refuse_options(int argc, char **argv, const char *what,
                          const char *const *own, const char *const *flags,
                          int recipe_keys);

/* Progress of eval / embed on stderr (cli/progress.c): pass
 * cl_cli_progress_update as cl_eval_opts.progress with the struct as its
 * context; _end clears a terminal's bar before the results print. */
typedef struct cl_cli_progress {
    const char *what;
    double t0, last, every, first;
    int tty, off, shown;
} cl_cli_progress;
void cl_cli_progress_init(cl_cli_progress *p, const char *what);
void cl_cli_progress_update(void *ctx, long long done, long long total);
void cl_cli_progress_end(cl_cli_progress *p);

/* `--precision f32|bf16|int8` among the arguments into *out (NULL when
 * absent, the API's default: the model's own, int8 for a file `classic
 * quantize` wrote, f32 otherwise).  Returns 2 after a message naming the
 * choices when the value is none of them, else 0. */
int cl_cli_precision(int argc, char **argv, const char *what, const char **out);

int cl_cmd_check(int argc, char **argv);
int cl_cmd_data(int argc, char **argv);
int cl_cmd_bench(int argc, char **argv);
int cl_cmd_train(int argc, char **argv);
int cl_cmd_eval(int argc, char **argv);
int cl_cmd_predict(int argc, char **argv);
int cl_cmd_embed(int argc, char **argv);
int cl_cmd_retrieve(int argc, char **argv);
int cl_cmd_info(int argc, char **argv);
int cl_cmd_export(int argc, char **argv);
int cl_cmd_convert(int argc, char **argv);
int cl_cmd_quantize(int argc, char **argv);
int cl_cmd_report(int argc, char **argv);
int cl_cmd_serve(int argc, char **argv);

#endif
