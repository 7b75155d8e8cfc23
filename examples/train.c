/* Trains a classifier from a host program that keeps SIGINT and MPI to
 * itself, through cl_train_ex:
 *
 *     cc train.c $(pkg-config --cflags --libs classic) -o train
 *     ./train recipe.yaml [key=value ...]
 *
 * The program's own SIGINT handler only sets a flag; the progress
 * callback sees it and asks the run to stop after the current step, which
 * writes a checkpoint to resume from (the message names it).  With
 * host_mpi the library never initialises MPI, so under mpirun without MPI
 * started by the program it refuses instead of joining the job. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <classic/classic.h>

static volatile sig_atomic_t stop_asked;

static void on_sigint(int sig)
{
    (void)sig;
    stop_asked = 1;
}

static int on_progress(void *ctx, const cl_progress *p)
{
    (void)ctx;
    if (p->kind == CL_PROGRESS_STEP)
        printf("step %lld/%lld loss %.4f\n", p->step, p->total_steps, p->loss);
    else if (p->evaluated)
        printf("epoch %lld top-1 %.2f%%\n", p->epoch, 100 * p->val_top1);
    fflush(stdout);
    return stop_asked; /* non-zero: stop after this step */
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s RECIPE.yaml [key=value ...]\n", argv[0]);
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);

    cl_train_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.size = sizeof opts;
    opts.host_signals = 1; /* SIGINT stays on_sigint above */
    opts.host_mpi = 1;     /* no MPI_Init / MPI_Finalize in the library */
    cl_train_summary sum;
    cl_status s = cl_train_ex(argv[1], NULL, (const char *const *)argv + 2,
                              argc - 2, on_progress, NULL, &opts, &sum);
    if (s == CL_ERR_INTERRUPTED) {
        printf("stopped at the host's request: %s\n", cl_last_error());
        return 3;
    }
    if (s != CL_OK) {
        fprintf(stderr, "train: %s\n", cl_last_error());
        return 1;
    }
    printf("trained %lld steps in %.1f s; last checkpoint %s\n", sum.steps,
           sum.seconds, sum.last_checkpoint);
    return 0;
}
