/* The test harness: named tests registered at start-up, checks that record
 * file:line and keep going, and helpers for fixtures made at run time. */
#ifndef CL_TESTS_HARNESS_H
#define CL_TESTS_HARNESS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "classic/status.h"

typedef void (*cl_test_fn)(void);
void cl_test_register(const char *name, cl_test_fn fn);
void cl_test_fail(const char *file, int line, const char *fmt, ...);
/* Marks the running test skipped, with the reason (one sentence saying
 * what this machine lacks); the caller returns.  ctest reports it as
 * skipped, never as passed. */
void cl_test_skip(const char *fmt, ...);
/* Non-zero once the running test has failed a check. */
int cl_test_failed(void);

/* A fresh empty directory for this test's fixtures, removed at exit. */
const char *cl_test_tmpdir(void);
/* "<tmpdir>/<name>", valid until exit (the same pointer for the same
 * name). */
const char *cl_test_path(const char *name);
/* Runs a shell command, returning its exit status (-1 if it died). */
int cl_test_run(const char *cmd);

/* max|a - b| / max|b| over n values (max|a - b| when b is all zero); NaN
 * when any difference is NaN. */
double cl_test_rel_err(const float *a, const float *b, size_t n);
/* Exactly n little-endian floats from path (malloc'ed), or NULL when the
 * file is missing or holds another count. */
float *cl_test_read_floats(const char *path, size_t n);
/* Writes n floats to path; 0 on success. */
int cl_test_write_floats(const char *path, const float *v, size_t n);

/* The classic binary under test: $CLASSIC_BIN (set by ctest) or the one in
 * the build tree. */
const char *cl_test_classic_bin(void);
/* Runs `classic <args>` (OMP_NUM_THREADS=2, stdout and stderr together in
 * cl_test_out) and returns its exit status, -1 if it died; a non-zero
 * status prints the command and its output to stderr. */
int cl_test_classic(const char *args);
/* The output of the last cl_test_classic, NUL-terminated (truncated to the
 * buffer). */
enum { CL_TEST_OUT_MAX = 1 << 16 };
extern char cl_test_out[CL_TEST_OUT_MAX];

/* Reads the file at path into cl_test_out (truncated to the buffer) and
 * returns cl_test_out, or NULL (cl_test_out empty) if it cannot be opened. */
const char *cl_test_slurp(const char *path);
/* The whole file at path in a malloc'd NUL-terminated buffer the caller
 * frees, its length in *len (len may be NULL); NULL if it cannot be read. */
char *cl_test_read_file(const char *path, size_t *len);

/* Starts `classic <args>` in the background (OMP_NUM_THREADS=2, stdout and
 * stderr to log); pre_exec (may be NULL) runs in the child just before the
 * exec (resource limits).  Returns the pid of the classic process itself,
 * -1 on failure. */
int cl_test_classic_start(const char *args, const char *log,
                          void (*pre_exec)(void));
/* Waits up to timeout_s for pid and returns its raw wait status; past the
 * deadline the process is killed (SIGKILL), the test fails and -1 is
 * returned. */
int cl_test_wait(int pid, double timeout_s);

/* "mpirun <flags> ": the flags this sandbox needs (root, no ssh, no
 * ptrace: docs/distributed.md) and Open MPI's session directory inside this
 * test's tmpdir, since concurrent mpiruns sharing /tmp/ompi.<host>.<uid>
 * race to create it. */
const char *cl_test_mpirun(void);

/* The step and the number `key` of every line of a metrics.jsonl whose kind
 * is `kind`, in order, at most max; -1 if the file cannot be opened. */
int cl_test_read_metric(const char *path, const char *kind, const char *key,
                        double *value, int64_t *step, int max);

/* cl_test_read_metric of the "train" lines' loss. */
int cl_test_read_losses(const char *path, double *loss, int64_t *step, int max);

#define CL_TEST(name)                                                          \
    static void cl_test_##name(void);                                          \
    __attribute__((constructor)) static void cl_test_reg_##name(void)          \
    {                                                                          \
        cl_test_register(#name, cl_test_##name);                               \
    }                                                                          \
    static void cl_test_##name(void)

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            cl_test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);              \
    } while (0)

/* Stops the test when the check fails (for preconditions of what follows). */
#define REQUIRE(cond)                                                          \
    do {                                                                       \
        if (!(cond)) {                                                         \
            cl_test_fail(__FILE__, __LINE__, "REQUIRE(%s)", #cond);            \
            return;                                                            \
        }                                                                      \
    } while (0)

#define CHECK_OK(expr)                                                         \
    do {                                                                       \
        cl_status cl__s = (expr);                                              \
        if (cl__s != CL_OK)                                                    \
            cl_test_fail(__FILE__, __LINE__, "%s returned %s: %s", #expr,      \
                         cl_status_name(cl__s), cl_last_error());              \
    } while (0)

#define REQUIRE_OK(expr)                                                       \
    do {                                                                       \
        cl_status cl__s = (expr);                                              \
        if (cl__s != CL_OK) {                                                  \
            cl_test_fail(__FILE__, __LINE__, "%s returned %s: %s", #expr,      \
                         cl_status_name(cl__s), cl_last_error());              \
            return;                                                            \
        }                                                                      \
    } while (0)

/* expr must fail with status st and a detail containing substr. */
#define CHECK_ERR(expr, st, substr)                                            \
    do {                                                                       \
        cl_status cl__s = (expr);                                              \
        if (cl__s != (st))                                                     \
            cl_test_fail(__FILE__, __LINE__, "%s returned %s, expected %s",    \
                         #expr, cl_status_name(cl__s), cl_status_name(st));    \
        else if (!strstr(cl_last_error(), (substr)))                           \
            cl_test_fail(__FILE__, __LINE__, "%s: message '%s' lacks '%s'",    \
                         #expr, cl_last_error(), (substr));                    \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                  \
    do {                                                                       \
        double cl__a = (double)(a), cl__b = (double)(b);                       \
        if (!(fabs(cl__a - cl__b) <= (tol)))                                   \
            cl_test_fail(__FILE__, __LINE__,                                   \
                         "%s = %.9g vs %s = %.9g (tol %g)", #a, cl__a, #b,     \
                         cl__b, (double)(tol));                                \
    } while (0)

#endif
