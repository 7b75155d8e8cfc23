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

/* `classic bench --amp` times the bf16 plan it names, and refuses a level
 * it does not know and the reference backend's bf16. */
CL_TEST(bench_amp_levels)
{
    CHECK(cl_test_classic("bench --arch resnet18 --stem cifar --size 8 "
                          "--batch 2 --steps 1 --warmup 1 --mode train "
                          "--threads 1 --amp O2") == 0);
    CHECK(strstr(cl_test_out, "amp O2") != NULL);
    CHECK(strstr(cl_test_out, "bench: mode=train img_s=") != NULL);
    CHECK(cl_test_classic("bench --amp O3") != 0);
    CHECK(strstr(cl_test_out, "--amp 'O3' is not O0, O1 or O2") != NULL);
    CHECK(cl_test_classic("bench --arch resnet18 --stem cifar --size 8 "
                          "--batch 2 --steps 1 --warmup 1 --mode train "
                          "--backend ref --amp O1") != 0);
    CHECK(strstr(cl_test_out, "backend ref: amp_level O1") != NULL);
}

/* `classic bench --convs` names the conv paths it timed. */
CL_TEST(bench_conv_paths)
{
    CHECK(cl_test_classic("bench --arch resnet18 --stem cifar --size 8 "
                          "--batch 2 --steps 1 --warmup 1 --mode train "
                          "--threads 1 --convs direct") == 0);
    CHECK(strstr(cl_test_out, "convs direct") != NULL);
    CHECK(strstr(cl_test_out, "bench: mode=train img_s=") != NULL);
    CHECK(cl_test_classic("bench --convs gemm") != 0);
    CHECK(strstr(cl_test_out, "--convs 'gemm' is not rewrite or direct") !=
          NULL);
}
