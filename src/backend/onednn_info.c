/* oneDNN version and the CPU instruction set it dispatches to. */
#include <stdio.h>

#include <dnnl.h>

#include "backend/onednn_info.h"

void cl_dnnl_version_string(char *buf, size_t n)
{
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, n, "%d.%d.%d (commit %.8s, cpu runtime %s)", v->major,
             v->minor, v->patch, v->hash,
             v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other");
}

const char *cl_dnnl_isa_name(void)
{
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41:
        return "sse41";
    case dnnl_cpu_isa_avx:
        return "avx";
    case dnnl_cpu_isa_avx2:
        return "avx2";
    case dnnl_cpu_isa_avx512_mic:
        return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops:
        return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core:
        return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
        return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
        return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
        return "avx512_core_amx";
    case dnnl_cpu_isa_avx2_vnni:
        return "avx2_vnni";
    default:
        return "unknown";
    }
}

int cl_dnnl_bf16_supported(void)
{
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_avx512_core:
    case dnnl_cpu_isa_avx512_core_vnni:
    case dnnl_cpu_isa_avx512_core_bf16:
    case dnnl_cpu_isa_avx512_core_amx:
        return 1;
    default:
        return 0;
    }
}

int cl_dnnl_int8_vnni(void)
{
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_avx512_core_vnni:
    case dnnl_cpu_isa_avx512_core_bf16:
    case dnnl_cpu_isa_avx512_core_amx:
    case dnnl_cpu_isa_avx2_vnni:
        return 1;
    default:
        return 0;
    }
}

int cl_dnnl_bf16_native(void)
{
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_avx512_core_bf16:
    case dnnl_cpu_isa_avx512_core_amx:
        return 1;
    default:
        return 0;
    }
}
