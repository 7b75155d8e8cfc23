/* Test runner: `test_x` runs every test of the file and prints
 * "N passed, N failed, N skipped"; `test_x NAME` runs one (as ctest does);
 * `test_x --list` lists them. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdarg.h>
#include <fcntl.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "io/json.h"

enum { MAX_TESTS = 512 };

static struct {
    const char *name;
    cl_test_fn fn;
} tests[MAX_TESTS];
static int n_tests;
static int failed_now;
static char skipped_now[512]; /* the reason, when the test skipped */
static char tmpdir[256];

void cl_test_register(const char *name, cl_test_fn fn)
{
    if (n_tests < MAX_TESTS) {
        tests[n_tests].name = name;
        tests[n_tests].fn = fn;
        n_tests++;
    }
}

void cl_test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%d: FAIL: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    failed_now = 1;
}

int cl_test_failed(void)
{
    return failed_now;
}

static void remove_tmpdir(void)
{
    char cmd[300];
    if (tmpdir[0] && !getenv("CL_TEST_KEEP")) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", tmpdir);
    }
}

const char *cl_test_tmpdir(void)
{
    if (!tmpdir[0]) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/classic-test-XXXXXX");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(2);
        }
        atexit(remove_tmpdir);
    }
    return tmpdir;
}

/* Every path handed out stays valid until exit (callers keep several). */
static char **paths;
static size_t n_paths;

static void free_paths(void)
{
    for (size_t i = 0; i < n_paths; i++)
        free(paths[i]);
    free(paths);
    paths = NULL;
    n_paths = 0;
}

const char *cl_test_path(const char *name)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s/%s", cl_test_tmpdir(), name);
    for (size_t i = 0; i < n_paths; i++)
        if (strcmp(paths[i], buf) == 0)
            return paths[i];
    char **np = realloc(paths, (n_paths + 1) * sizeof *np);
    char *p = strdup(buf);
    if (!np || !p) {
        perror("cl_test_path");
        exit(2);
    }
    if (n_paths == 0)
        atexit(free_paths);
    paths = np;
    paths[n_paths++] = p;
    return p;
}

int cl_test_run(const char *cmd)
{
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

const char *cl_test_classic_bin(void)
{
    const char *b = getenv("CLASSIC_BIN");
    return b && b[0] ? b : CL_BINARY_DIR "/classic";
}

char cl_test_out[CL_TEST_OUT_MAX];

const char *cl_test_slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    size_t k = f ? fread(cl_test_out, 1, sizeof cl_test_out - 1, f) : 0;
    cl_test_out[k] = '\0';
    if (!f)
        return NULL;
    fclose(f);
    return cl_test_out;
}

char *cl_test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *p = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
        fseek(f, 0, SEEK_SET) == 0 && (p = malloc((size_t)n + 1)) != NULL &&
        fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) {
        p[n] = '\0';
        if (len)
            *len = (size_t)n;
    }
    return p;
}

const char *cl_test_mpirun(void)
{
    static char cmd[1400];
    if (!cmd[0])
        snprintf(cmd, sizeof cmd,
                 "mpirun --mca orte_tmpdir_base '%s' --oversubscribe "
                 "--allow-run-as-root --mca btl self,vader "
                 "--mca btl_vader_single_copy_mechanism none "
                 "--mca plm_rsh_agent false ",
                 cl_test_tmpdir());
    return cmd;
}

int cl_test_classic(const char *args)
{
    char cmd[8192];
    const char *log = cl_test_path("classic.out");
    if (snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=2 %s %s >%s 2>&1",
                 cl_test_classic_bin(), args, log) >= (int)sizeof cmd) {
        cl_test_fail(__FILE__, __LINE__, "command too long: classic %.200s...",
                     args);
        return -1;
    }
    int rc = cl_test_run(cmd);
    FILE *f = fopen(log, "r");
    size_t n = f ? fread(cl_test_out, 1, sizeof cl_test_out - 1, f) : 0;
    cl_test_out[n] = '\0';
    if (f)
        fclose(f);
    if (rc != 0)
        fprintf(stderr, "classic %s -> %d:\n%s\n", args, rc, cl_test_out);
    return rc;
}

int cl_test_classic_start(const char *args, const char *log,
                          void (*pre_exec)(void))
{
    char cmd[8192];
    if (snprintf(cmd, sizeof cmd, "exec %s %s", cl_test_classic_bin(), args) >=
        (int)sizeof cmd)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return (int)pid;
    /* The child: output to log, then the shell execs classic in its own
     * place, so the pid the caller holds is classic's. */
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0)
        _exit(127);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    setenv("OMP_NUM_THREADS", "2", 1);
    if (pre_exec)
        pre_exec();
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
}

int cl_test_wait(int pid, double timeout_s)
{
    struct timespec nap = {0, 20 * 1000 * 1000};
    for (double t = 0; t < timeout_s; t += 0.02) {
        int st;
        pid_t r = waitpid((pid_t)pid, &st, WNOHANG);
        if (r == (pid_t)pid)
            return st;
        if (r < 0) {
            cl_test_fail(__FILE__, __LINE__, "waitpid(%d) failed", pid);
            return -1;
        }
        nanosleep(&nap, NULL);
    }
    kill((pid_t)pid, SIGKILL);
    waitpid((pid_t)pid, NULL, 0);
    cl_test_fail(__FILE__, __LINE__,
                 "classic (pid %d) still running after "
                 "%.0f s: killed",
                 pid, timeout_s);
    return -1;
}

int cl_test_read_metric(const char *path, const char *kind, const char *key,
                        double *value, int64_t *step, int max)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    int n = 0;
    if (!f)
        return -1;
    while (n < max && fgets(line, sizeof line, f)) {
        cl_json_doc *doc = NULL;
        if (cl_json_parse(&doc, line, strlen(line), NULL, path) != CL_OK)
            continue;
        const cl_json *r = cl_json_root(doc);
        const cl_json *k = cl_json_get(r, "kind");
        const cl_json *v = cl_json_get(r, key);
        const cl_json *s = cl_json_get(r, "step");
        if (k && strcmp(k->str, kind) == 0 && v && s) {
            value[n] = v->num;
            step[n] = s->i;
            n++;
        }
        cl_json_free(doc);
    }
    fclose(f);
    return n;
}

int cl_test_read_losses(const char *path, double *loss, int64_t *step, int max)
{
    return cl_test_read_metric(path, "train", "loss", loss, step, max);
}

void cl_test_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(skipped_now, sizeof skipped_now, fmt, ap);
    va_end(ap);
    if (!skipped_now[0])
        snprintf(skipped_now, sizeof skipped_now, "(no reason given)");
}

/* 1 passed, 0 failed, 2 skipped (a failed check before the skip counts). */
static int run_one(int i)
{
    failed_now = 0;
    skipped_now[0] = '\0';
    cl_clear_error();
    tests[i].fn();
    if (skipped_now[0] && !failed_now) {
        fprintf(stderr, "SKIP %s: %s\n", tests[i].name, skipped_now);
        return 2;
    }
    fprintf(stderr, "%s %s\n", failed_now ? "FAIL" : "ok  ", tests[i].name);
    return !failed_now;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        for (int i = 0; i < n_tests; i++)
            printf("%s\n", tests[i].name);
        return 0;
    }
    int passed = 0, failed = 0, skipped = 0, matched = 0;
    for (int i = 0; i < n_tests; i++) {
        if (argc > 1 && strcmp(argv[1], tests[i].name) != 0)
            continue;
        matched++;
        int r = run_one(i);
        passed += r == 1;
        failed += r == 0;
        skipped += r == 2;
    }
    if (argc > 1 && matched == 0) {
        fprintf(stderr, "no test named %s\n", argv[1]);
        return 2;
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    /* 77: ctest's SKIP_RETURN_CODE, when nothing ran but skipped. */
    return failed ? 1 : skipped && !passed ? 77 : 0;
}

double cl_test_rel_err(const float *a, const float *b, size_t n)
{
    double md = 0.0, mb = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= md)) /* NaN propagates */
            md = e;
        if (fabs((double)b[i]) > mb)
            mb = fabs((double)b[i]);
    }
    return mb == 0.0 ? md : md / mb;
}

float *cl_test_read_floats(const char *path, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    float *v = malloc(n * sizeof(float) + 1);
    size_t got = v ? fread(v, sizeof(float), n + 1, f) : 0;
    fclose(f);
    if (got != n) {
        free(v);
        return NULL;
    }
    return v;
}

int cl_test_write_floats(const char *path, const float *v, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t put = fwrite(v, sizeof(float), n, f);
    return fclose(f) == 0 && put == n ? 0 : -1;
}
