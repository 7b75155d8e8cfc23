/* `classic serve`: the command line of the server in src/serve/, and its
 * signals: SIGHUP reloads the models, SIGTERM and SIGINT drain and exit. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "classic/classic.h"
#include "backend/backend.h"
#include "cli/cli.h"
#include "serve/serve.h"

static void usage(void)
{
    printf(
        "usage: classic serve --model NAME=CHECKPOINT [--model NAME2=...]\n"
        "                     [--precision f32|bf16|int8] [--host 127.0.0.1]\n"
        "                     [--port 8080] [--max_batch 16] "
        "[--batching measured|max]\n"
        "                     [--max_delay_ms 5] [--queue 256]\n"
        "                     [--token_file F | --no_auth] [--max_body_mb 20]\n"
        "                     [--max_pixels 40000000] "
        "[--max_connections 256]\n"
        "                     [--timeout_s 10]\n\n"
        "Serves the models over HTTP: the Open Inference Protocol "
        "(/v2/...),\nPOST /v1/models/NAME:classify with an image, a page at "
        "/ and Prometheus\nmetrics at /metrics.  Requests are batched per "
        "model: up to the largest batch\nof at most max_batch that costs "
        "less per image than smaller ones (timed\nwhen the model opens, "
        "logged at start; --batching max: up to max_batch always),\nor fewer "
        "once the oldest waited max_delay_ms.  Another host than 127.0.0.1\n"
        "needs --token_file (Bearer) or --no_auth.  SIGHUP reloads the "
        "checkpoints,\nSIGTERM and SIGINT finish the requests in flight and "
        "exit.  Port 0 picks a\nfree port.  docs/serve.md.\n");
}

/* A whole decimal integer in [lo, hi] from text, else 0 after a message. */
static int int_arg(const char *name, const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr,
                "classic: serve: %s %s: expected an integer from %ld "
                "to %ld\n",
                name, v ? v : "(missing)", lo, hi);
        return 0;
    }
    *out = x;
    return 1;
}

/* The token from a file: its first line, without the line end. */
static char *read_token(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "classic: serve: cannot read --token_file %s\n", path);
        return NULL;
    }
    char buf[4097];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    n = strlen(buf);
    if (n < 16 || n >= 4096 || strspn(buf, " \t") == n) {
        fprintf(stderr,
                "classic: serve: --token_file %s: the token (its first line) "
                "must be 16 to 4095 characters\n",
                path);
        return NULL;
    }
    return strdup(buf);
}

int cl_cmd_serve(int argc, char **argv)
{
    if (cl_cli_is_help(argc, argv)) {
        usage();
        return 0;
    }
    cl_serve_opts o;
    cl_serve_opts_defaults(&o);
    char **names = calloc((size_t)argc, sizeof *names);
    const char **paths = calloc((size_t)argc, sizeof *paths);
    const char *token_file = NULL;
    char *token = NULL;
    int rc = 2;
    if (!names || !paths) {
        fprintf(stderr, "classic: serve: out of memory\n");
        goto done;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
        if (strcmp(a, "--no_auth") == 0) {
            o.no_auth = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "classic: serve: %s needs a value\n", a);
            goto done;
        }
        i++;
        if (strcmp(a, "--model") == 0) {
            const char *eq = strchr(v, '=');
            if (!eq || eq == v || !eq[1]) {
                fprintf(stderr,
                        "classic: serve: --model %s: expected "
                        "NAME=CHECKPOINT\n",
                        v);
                goto done;
            }
            names[o.n_models] = strndup(v, (size_t)(eq - v));
            if (!names[o.n_models])
                goto done;
            paths[o.n_models++] = eq + 1;
        } else if (strcmp(a, "--precision") == 0) {
            o.precision = v;
        } else if (strcmp(a, "--host") == 0) {
            o.host = v;
        } else if (strcmp(a, "--token_file") == 0) {
            token_file = v;
        } else if (strcmp(a, "--port") == 0) {
            if (!int_arg(a, v, 0, 65535, &x))
                goto done;
            o.port = (int)x;
        } else if (strcmp(a, "--max_batch") == 0) {
            if (!int_arg(a, v, 1, 64, &x))
                goto done;
            o.max_batch = (int)x;
        } else if (strcmp(a, "--batching") == 0) {
            if (strcmp(v, "measured") && strcmp(v, "max")) {
                fprintf(stderr,
                        "classic: serve: --batching %s: expected "
                        "measured or max\n",
                        v);
                goto done;
            }
            o.batch_max = strcmp(v, "max") == 0;
        } else if (strcmp(a, "--max_delay_ms") == 0) {
            if (!int_arg(a, v, 0, 10000, &x))
                goto done;
            o.max_delay_ms = (int)x;
        } else if (strcmp(a, "--queue") == 0) {
            if (!int_arg(a, v, 1, 1000000, &x))
                goto done;
            o.queue = (int)x;
        } else if (strcmp(a, "--max_body_mb") == 0) {
            if (!int_arg(a, v, 1, 4096, &x))
                goto done;
            o.max_body = (size_t)x << 20;
        } else if (strcmp(a, "--max_pixels") == 0) {
            if (!int_arg(a, v, 1, LONG_MAX, &x))
                goto done;
            o.max_pixels = (unsigned long long)x;
        } else if (strcmp(a, "--max_connections") == 0) {
            if (!int_arg(a, v, 1, 100000, &x))
                goto done;
            o.max_connections = (int)x;
        } else if (strcmp(a, "--timeout_s") == 0) {
            if (!int_arg(a, v, 1, 3600, &x))
                goto done;
            o.timeout_s = (int)x;
        } else {
            fprintf(stderr,
                    "classic: serve: unknown option %s (classic serve "
                    "--help lists them)\n",
                    a);
            goto done;
        }
    }
    cl_precision prec;
    if (cl_precision_parse(o.precision, &prec) != CL_OK) {
        fprintf(stderr,
                "classic: serve: --precision %s: expected f32, bf16 "
                "or int8\n",
                o.precision);
        goto done;
    }
    if (token_file && o.no_auth) {
        fprintf(stderr, "classic: serve: --token_file and --no_auth "
                        "contradict each other: give one\n");
        goto done;
    }
    if (token_file && !(token = read_token(token_file)))
        goto done;
    o.token = token;
    o.names = (const char *const *)names;
    o.paths = paths;

    /* The signals are taken by this thread alone, with sigwait: every
     * thread the server starts inherits the mask blocking them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    cl_server *sv = NULL;
    cl_status s = cl_serve_start(&sv, &o);
    if (s != CL_OK) {
        rc = cl_cli_fail("serve", s);
        goto done;
    }
    if (o.no_auth && strncmp(o.host, "127.", 4) != 0 &&
        strcmp(o.host, "::1") != 0)
        fprintf(stderr,
                "classic serve: WARNING: --no_auth: anyone who "
                "reaches %s can use the models\n",
                o.host);
    for (int i = 0; i < o.n_models; i++) {
        char line[512];
        cl_serve_describe(sv, i, line, sizeof line);
        fprintf(stderr, "classic serve: %s\n", line);
    }
    fprintf(stderr, "classic serve: %d model(s) (", o.n_models);
    for (int i = 0; i < o.n_models; i++)
        fprintf(stderr, "%s%s", i ? ", " : "", names[i]);
    fprintf(stderr,
            "), %s, max_batch %d, max_delay_ms %d, queue %d, %s; listening on "
            "http://%s%s%s:%d/\n",
            o.precision ? o.precision : "each its own precision", o.max_batch,
            o.max_delay_ms, o.queue,
            token ? "Bearer token required" : "no token",
            strchr(o.host, ':') ? "[" : "", o.host,
            strchr(o.host, ':') ? "]" : "", cl_serve_port(sv));
    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            fprintf(stderr, "classic serve: SIGHUP: reloading the models\n");
            if (cl_serve_reload(sv) != CL_OK)
                fprintf(stderr,
                        "classic serve: reload failed, the models already "
                        "loaded stay: %s\n",
                        cl_last_error());
            else
                fprintf(stderr, "classic serve: reloaded\n");
            continue;
        }
        fprintf(stderr,
                "classic serve: %s: finishing the requests in "
                "flight\n",
                sig == SIGTERM ? "SIGTERM" : "SIGINT");
        break;
    }
    cl_serve_stop(sv);
    fprintf(stderr, "classic serve: stopped\n");
    rc = 0;
done:
    for (int i = 0; names && i < o.n_models; i++)
        free(names[i]);
    free(names);
    free(paths);
    free(token);
    return rc;
}
