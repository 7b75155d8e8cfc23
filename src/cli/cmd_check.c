/* `classic check`: the environment check a user runs before training. */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "backend/onednn_info.h"
#include "classic/classic.h"
#include "cli/cli.h"
#ifdef CL_HAVE_MPI
#include <mpi.h>
#endif

int cl_cmd_check(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--help") == 0) {
        printf("usage: classic check\n\nPrints the classic version, the "
               "oneDNN version and the CPU instruction set\nit uses, the "
               "inference precisions it runs, the OpenMP thread count and\n"
               "whether MPI support is built in.\n");
        return 0;
    }
    char dnnl[128];
    cl_dnnl_version_string(dnnl, sizeof dnnl);
    printf("classic   %s\n", cl_version());
    printf("oneDNN    %s\n", dnnl);
    printf("cpu isa   %s\n", cl_dnnl_isa_name());
    /* What each inference precision runs as here (docs/deploy.md). */
    printf("precision f32 yes; bf16 %s; int8 %s\n",
           cl_dnnl_bf16_native() ? "yes" : "no (needs avx512_bf16 or AMX)",
           cl_dnnl_int8_vnni() ? "yes (VNNI: 8-bit weights)"
                               : "yes (no VNNI: 7-bit weights where oneDNN "
                                 "would saturate)");
    printf("threads   %d (OMP_NUM_THREADS or all cores)\n",
           omp_get_max_threads());
#ifdef CL_HAVE_MPI
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    char *nl = strchr(lib, ',');
    if (nl)
        *nl = '\0';
    printf("mpi       yes (%s)\n", lib);
#else
    printf("mpi       no (built without MPI)\n");
#endif
    return 0;
}
