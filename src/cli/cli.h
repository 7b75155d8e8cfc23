/* The CLI's commands: each `classic <name>` is one function in its own file. */
#ifndef CL_CLI_CLI_H
#define CL_CLI_CLI_H

typedef struct cl_cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
} cl_cli_command;

/* Prints "classic: <what>: <cl_last_error()>" to stderr; returns 1. */
int cl_cli_fail(const char *what, int status);

int cl_cmd_check(int argc, char **argv);
int cl_cmd_data(int argc, char **argv);

#endif
