/* Helpers shared by the files of dist/: MPI errors as statuses and the
 * watchdog wait on non-blocking requests. */
#ifndef CL_DIST_DIST_INTERNAL_H
#define CL_DIST_DIST_INTERNAL_H

#include "dist/dist.h"

#ifdef CL_HAVE_MPI
/* CL_ERR_DIST with "<what> on rank R: <MPI's message>". */
cl_status cl__dist_mpi_error(const cl_dist *d, int rc, const char *what);
/* Waits for r[0..n) to complete, polling with MPI_Testall so that a peer
 * that never arrives is noticed after d->timeout_s (Open MPI has no
 * timeout on collectives).  Spins, then spins yielding the core. */
cl_status cl__dist_wait(const cl_dist *d, MPI_Request *r, int n,
                        const char *what);
#endif

#endif
