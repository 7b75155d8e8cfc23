/* The Python module python/classic (ctypes over libclassic.so) through its
 * pytest suite, python/tests/test_classic.py, run by Debian's python3;
 * without pytest the same file runs as a plain script, without numpy the
 * test is skipped.
 * ctest-labels: api python */
#include <stdio.h>

#include "harness.h"

CL_TEST(module)
{
#ifdef CL_TEST_SANITIZED
    /* python3 is not built with ASan, whose runtime must load first. */
    cl_test_skip("a sanitizer build's libclassic.so cannot load into "
                 "python3; the plain build runs this test");
    return;
#endif
    if (cl_test_run("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) {
        cl_test_skip("Debian's python3-numpy is not installed "
                     "(scripts/install-deps.sh installs it)");
        return;
    }
    int pytest =
        cl_test_run("/usr/bin/python3 -c 'import pytest' 2>/dev/null") == 0;
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "CLASSIC_LIB=%s/libclassic.so CLASSIC_BIN=%s /usr/bin/python3 "
             "%s %s/python/tests%s",
             CL_BINARY_DIR, cl_test_classic_bin(),
             pytest ? "-m pytest -p no:cacheprovider" : "", CL_SOURCE_DIR,
             pytest ? "" : "/test_classic.py");
    CHECK(cl_test_run(cmd) == 0);
}
