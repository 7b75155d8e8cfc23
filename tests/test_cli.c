/* The command-line tool: version, environment check, unknown commands.
 * ctest-labels: unit cli */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static const char *bin(void)
{
    const char *b = getenv("CLASSIC_BIN");
    return b ? b : CL_BINARY_DIR "/classic";
}

/* Runs `classic args`, capturing stdout+stderr into out; returns exit code. */
static int run(const char *args, char *out, size_t n)
{
    char cmd[1024];
    const char *log = cl_test_path("cli.out");
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>&1", bin(), args, log);
    int rc = cl_test_run(cmd);
    FILE *f = fopen(log, "r");
    size_t k = f ? fread(out, 1, n - 1, f) : 0;
    out[k] = '\0';
    if (f)
        fclose(f);
    return rc;
}

CL_TEST(version)
{
    char out[4096];
    CHECK(run("--version", out, sizeof out) == 0);
    CHECK(strstr(out, "classic " CL_VERSION_STRING) != NULL);
}

CL_TEST(check_reports_environment)
{
    char out[4096];
    CHECK(run("check", out, sizeof out) == 0);
    CHECK(strstr(out, "oneDNN    2.") != NULL);
    CHECK(strstr(out, "cpu isa") != NULL);
    CHECK(strstr(out, "unknown") == NULL);
    CHECK(strstr(out, "threads") != NULL);
    CHECK(strstr(out, "mpi") != NULL);
}

CL_TEST(unknown_command_fails)
{
    char out[4096];
    CHECK(run("frobnicate", out, sizeof out) == 2);
    CHECK(strstr(out, "unknown command 'frobnicate'") != NULL);
    CHECK(run("", out, sizeof out) == 2);
}
