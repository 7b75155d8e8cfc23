/* `classic report`: the HTML report of a run directory, or two runs
 * compared. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "report/report.h"

static void usage(void)
{
    printf(
        "usage: classic report RUN_DIR [--out report.html] [--limit N]\n"
        "                      [--no-eval] [--batch N] [--backend "
        "onednn|ref]\n"
        "                      [--threads N] [--data_dir DIR]\n"
        "       classic report --compare RUN_A RUN_B [--out compare.html]\n\n"
        "Writes one self-contained HTML page (inline SVG and CSS, no network)"
        "\nfrom a run directory (the ckpt_save_dir of `classic train`): "
        "loss,\nlr, accuracy, throughput and data-wait curves from "
        "metrics.jsonl, the\nconfig and environment, and an evaluation of "
        "the best (else last)\ncheckpoint on up to --limit validation "
        "samples (default 2000):\nconfusion matrix, per-class accuracy and "
        "the 16 most confidently\nmisclassified images.  Works on a run in "
        "progress.  --no-eval skips\nthe evaluation; --data_dir points it at "
        "the data when the run's path\nis not valid here.  The default "
        "output is RUN_DIR/report.html\n(compare.html for --compare).\n");
}

static int parse_int(const char *what, const char *v, long lo, long hi,
                     long *out)
{
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi) {
        fprintf(stderr,
                "classic: report: %s must be an integer in "
                "[%ld, %ld], got '%s'\n",
                what, lo, hi, v);
        return 0;
    }
    *out = x;
    return 1;
}

int cl_cmd_report(int argc, char **argv)
{
    if (cl_cli_is_help(argc, argv)) {
        usage();
        return 0;
    }
    cl_report_opts o = cl_report_opts_default();
    const char *out = NULL, *runs[2] = {NULL, NULL};
    int compare = 0, n_runs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long x;
        int has_val = i + 1 < argc;
        if (strcmp(a, "--compare") == 0) {
            compare = 1;
        } else if (strcmp(a, "--no-eval") == 0) {
            o.eval = 0;
        } else if (strcmp(a, "--out") == 0 && has_val) {
            out = argv[++i];
        } else if (strcmp(a, "--limit") == 0 && has_val) {
            if (!parse_int("--limit", argv[++i], 1, 100000000, &x))
                return 2;
            o.limit = x;
        } else if (strcmp(a, "--batch") == 0 && has_val) {
            if (!parse_int("--batch", argv[++i], 1, 4096, &x))
                return 2;
            o.batch = (int)x;
        } else if (strcmp(a, "--threads") == 0 && has_val) {
            if (!parse_int("--threads", argv[++i], 0, 4096, &x))
                return 2;
            o.threads = (int)x;
        } else if (strcmp(a, "--backend") == 0 && has_val) {
            o.backend = argv[++i];
        } else if ((strcmp(a, "--data_dir") == 0 ||
                    strcmp(a, "--data-dir") == 0) &&
                   has_val) {
            o.data_dir = argv[++i];
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr,
                    "classic: report: unknown option '%s' (or it lacks its "
                    "value); see `classic report --help`\n",
                    a);
            return 2;
        } else if (n_runs < 2) {
            runs[n_runs++] = a;
        } else {
            fprintf(stderr, "classic: report: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (n_runs != (compare ? 2 : 1)) {
        fprintf(stderr, compare ? "classic: report: --compare needs two run "
                                  "directories\n"
                                : "classic: report: expected one run "
                                  "directory (see --help)\n");
        return 2;
    }
    const char *dest = out;
    char buf[1100];
    if (compare) {
        dest = out ? out : "compare.html";
        if (cl_report_compare(runs[0], runs[1], dest) != CL_OK)
            return cl_cli_fail("report", 1);
    } else {
        if (!dest) {
            snprintf(buf, sizeof buf, "%s/report.html", runs[0]);
            dest = buf;
        }
        if (cl_report_write(runs[0], dest, &o) != CL_OK)
            return cl_cli_fail("report", 1);
    }
    printf("report written to %s\n", dest);
    return 0;
}
