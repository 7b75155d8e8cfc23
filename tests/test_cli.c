/* The command-line tool: version, environment check, unknown commands.
 * ctest-labels: unit cli */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

CL_TEST(version)
{
    CHECK(cl_test_classic("--version") == 0);
    CHECK(strstr(cl_test_out, "classic " CL_VERSION_STRING) != NULL);
}

CL_TEST(check_reports_environment)
{
    CHECK(cl_test_classic("check") == 0);
    CHECK(strstr(cl_test_out, "oneDNN    2.") != NULL);
    CHECK(strstr(cl_test_out, "cpu isa") != NULL);
    CHECK(strstr(cl_test_out, "unknown") == NULL);
    CHECK(strstr(cl_test_out, "threads") != NULL);
    CHECK(strstr(cl_test_out, "mpi") != NULL);
}

CL_TEST(unknown_command_fails)
{
    CHECK(cl_test_classic("frobnicate") == 2);
    CHECK(strstr(cl_test_out, "unknown command 'frobnicate'") != NULL);
    CHECK(cl_test_classic("") == 2);
}
