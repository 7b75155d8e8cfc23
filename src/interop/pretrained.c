/* --pretrained of any supported kind, told apart by the file's first
 * bytes: safetensors (classic, torchvision via tools/torch2safetensors.py)
 * or a MindSpore .ckpt. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "interop/interop.h"

cl_status cl_interop_load_pretrained(const char *path, cl_graph *g,
                                     cl_ckpt_mode mode, char *note,
                                     size_t note_n)
{
    unsigned char head[9];
    FILE *f = fopen(path, "rb");
    if (!f)
        return cl_error(CL_ERR_IO, "%s: cannot open (%s)", path,
                        strerror(errno));
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    cl_status s;
    /* safetensors: u64 header length, then the JSON's '{'. */
    if (got == sizeof head && head[8] == '{' && head[6] == 0 && head[7] == 0) {
        cl_ckpt_load_report rep;
        memset(&rep, 0, sizeof rep);
        s = cl_ckpt_load_model(path, g, mode, &rep);
        if (s == CL_OK && note)
            snprintf(note, note_n, "%s: %d tensors loaded (safetensors)%s%s",
                     path, rep.loaded, rep.head_skipped ? "; head kept: " : "",
                     rep.head_skipped ? rep.head_note : "");
        return s;
    }
    /* A MindSpore Checkpoint starts with field 1, length-delimited. */
    if (got >= 1 && head[0] == 0x0a) {
        cl_ms_report rep;
        s = cl_ms_load(path, g, mode, &rep);
        if (s == CL_OK && note)
            snprintf(note, note_n,
                     "%s: %d tensors loaded (MindSpore), %d optimizer or "
                     "bookkeeping entries ignored%s%s%s%s",
                     path, rep.loaded, rep.ignored, rep.ignored ? " (" : "",
                     rep.ignored_list, rep.ignored ? ")" : "",
                     rep.head_skipped ? "; head kept as initialised" : "");
        return s;
    }
    return cl_error(CL_ERR_FORMAT,
                    "%s: neither safetensors nor a MindSpore checkpoint "
                    "(first bytes %s); .pth files go through "
                    "tools/torch2safetensors.py first",
                    path, got ? "unrecognised" : "missing");
}
