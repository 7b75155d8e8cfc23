/* --pretrained of any supported kind, told apart by the file's first
 * bytes: safetensors (classic's, or plain with torchvision's names), a
 * PyTorch .pth or a MindSpore .ckpt. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "interop/interop.h"

cl_status cl_interop_load_pretrained(const char *path, cl_graph *g,
                                     cl_ckpt_mode mode, char *note,
                                     size_t note_n)
{
    cl_weights_format fmt;
    cl_status s;
    CL_TRY(cl_weights_sniff(path, &fmt));
    if (fmt == CL_WF_SAFETENSORS || fmt == CL_WF_PTH) {
        cl_weights w;
        cl_ckpt_load_report rep;
        memset(&rep, 0, sizeof rep);
        if ((s = cl_weights_open(&w, path)) != CL_OK)
            return s;
        if ((s = cl_weights_for_training(&w, path)) != CL_OK) {
            cl_weights_close(&w);
            return s;
        }
        s = cl_ckpt_load_source(&w.src, g, mode, &rep);
        if (s == CL_OK && note)
            snprintf(note, note_n, "%s: %d tensors loaded (%s%s%s)%s%s", path,
                     rep.loaded, w.kind, w.pth ? ", " : "",
                     w.pth ? cl_pth_where(w.pth) : "",
                     rep.head_skipped ? "; head kept: " : "",
                     rep.head_skipped ? rep.head_note : "");
        cl_weights_close(&w);
        return s;
    }
    if (fmt == CL_WF_MINDSPORE) {
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
                    "nor a PyTorch .pth (its first bytes are none of "
                    "theirs)",
                    path);
}
