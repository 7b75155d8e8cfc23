/* Progress of a long evaluation (`classic eval`, `embed`) on stderr: a bar
 * redrawn in place on a terminal, a plain line every few seconds
 * otherwise, as `classic train` reports its steps; only the first process
 * under mpirun. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/timer.h"

void cl_cli_progress_init(cl_cli_progress *p, const char *what)
{
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    memset(p, 0, sizeof *p);
    p->what = what;
    p->tty = isatty(STDERR_FILENO);
    p->off = rank && strcmp(rank, "0") != 0;
    p->t0 = p->last = cl_time_now();
    /* CLASSIC_PROGRESS_SECONDS: the plain lines' interval (5 s), for logs
     * that want them denser or sparser. */
    const char *every = getenv("CLASSIC_PROGRESS_SECONDS");
    p->every = every && *every ? atof(every) : 5.0;
    p->first = p->every < 2.0 ? p->every : 2.0;
}

void cl_cli_progress_update(void *ctx, long long done, long long total)
{
    cl_cli_progress *p = ctx;
    const double now = cl_time_now(), t = now - p->t0;
    /* A bar at most 10 times a second; lines every 5 s, the first after
     * 2 s, so that a short evaluation prints none. */
    if (p->off || total <= 0 ||
        (p->tty ? now - p->last < 0.1 && done < total
                : now - p->last < (p->shown ? p->every : p->first) ||
                      (done >= total && !p->shown)))
        return;
    p->last = now;
    const double rate = t > 0 ? done / t : 0;
    const double eta = rate > 0 ? (total - done) / rate : 0;
    const int pct = (int)(100 * done / total);
    if (p->tty) {
        char bar[21];
        int fill = (int)(20 * done / total);
        for (int i = 0; i < 20; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[20] = '\0';
        fprintf(stderr,
                "\r%s [%s] %lld/%lld images %3d%%  %.0f img/s  ETA %.0fs\033[K",
                p->what, bar, done, total, pct, rate, eta);
    } else {
        fprintf(stderr, "%s: %lld/%lld images (%d%%), %.0f img/s, ETA %.0fs\n",
                p->what, done, total, pct, rate, eta);
    }
    fflush(stderr);
    p->shown = 1;
}

void cl_cli_progress_end(cl_cli_progress *p)
{
    if (p->tty && p->shown) /* the bar gives way to the results */
        fprintf(stderr, "\r\033[K");
}
