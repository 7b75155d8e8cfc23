/* Reading a run directory: metrics.jsonl (partial last line ignored,
 * repeated steps of a resumed run replaced), config.yaml and the
 * checkpoint to evaluate. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/mem.h"
#include "io/json.h"
#include "report/report_internal.h"

/* Far above any real log (a record is ~200 bytes). */
#define MAX_LOG_BYTES ((size_t)1 << 30)

static cl_status read_all(const char *path, cl_strbuf *out, size_t max)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cl_error(CL_ERR_IO, "%s: cannot read: %s", path,
                        strerror(errno));
    char chunk[1 << 16];
    size_t n;
    cl_status s = CL_OK;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (out->len + n > max) {
            s = cl_error(CL_ERR_LIMIT, "%s: larger than %zu bytes", path, max);
            break;
        }
        if ((s = cl_strbuf_add(out, chunk, n)) != CL_OK)
            break;
    }
    if (s == CL_OK && ferror(f))
        s = cl_error(CL_ERR_IO, "%s: read failed", path);
    fclose(f);
    return s;
}

static double num(const cl_json *o, const char *key)
{
    const cl_json *v = cl_json_get(o, key);
    return v && v->type == CL_JSON_NUM ? v->num : NAN;
}

static int int_field(const cl_json *o, const char *key, int64_t *out)
{
    const cl_json *v = cl_json_get(o, key);
    if (!v || v->type != CL_JSON_NUM || !v->is_int)
        return 0;
    *out = v->i;
    return 1;
}

static cl_status grow(void **p, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return CL_OK;
    size_t nc = *cap ? *cap * 2 : 256, bytes;
    CL_TRY(cl_mul_size(nc, elem, &bytes, "run log records"));
    void *q = cl_alloc(bytes, "run log records");
    if (!q)
        return CL_ERR_NOMEM;
    if (*p)
        memcpy(q, *p, n * elem);
    cl_free(*p);
    *p = q;
    *cap = nc;
    return CL_OK;
}

/* One record.  A step at or before the last kept one means the run was
 * resumed from an earlier checkpoint: the records from that step on
 * belong to the abandoned trajectory and are dropped, so each step keeps
 * its last occurrence and the curves continue without duplicates. */
static cl_status add_record(cl__runlog *rl, const cl_json *o)
{
    const cl_json *kind = cl_json_get(o, "kind");
    int64_t step = 0, epoch = 0;
    if (!kind || kind->type != CL_JSON_STR || !int_field(o, "step", &step)) {
        rl->bad_lines++;
        return CL_OK;
    }
    int_field(o, "epoch", &epoch);
    if (strcmp(kind->str, "train") == 0) {
        size_t before = rl->n_train;
        while (rl->n_train > 0 && rl->train[rl->n_train - 1].step >= step)
            rl->n_train--;
        if (rl->n_train < before) {
            rl->resumes++;
            while (rl->n_eval > 0 && rl->eval[rl->n_eval - 1].step >= step)
                rl->n_eval--;
        }
        CL_TRY(grow((void **)&rl->train, &rl->cap_train, rl->n_train,
                    sizeof *rl->train));
        cl__rl_train *t = &rl->train[rl->n_train++];
        t->step = step;
        t->epoch = epoch;
        t->loss = num(o, "loss");
        t->loss_avg = num(o, "loss_avg");
        t->lr = num(o, "lr");
        t->img_s = num(o, "img_s");
        t->step_ms = num(o, "step_ms");
        t->data_wait = num(o, "data_wait");
        t->comm_wait = num(o, "comm_wait");
    } else if (strcmp(kind->str, "eval") == 0) {
        while (rl->n_eval > 0 && rl->eval[rl->n_eval - 1].step >= step)
            rl->n_eval--;
        CL_TRY(grow((void **)&rl->eval, &rl->cap_eval, rl->n_eval,
                    sizeof *rl->eval));
        cl__rl_eval *e = &rl->eval[rl->n_eval++];
        e->step = step;
        e->epoch = epoch;
        e->top1 = num(o, "val_top1");
        e->top5 = num(o, "val_top5");
        e->loss = num(o, "val_loss");
        e->samples = num(o, "val_samples");
        e->epoch_s = num(o, "epoch_s");
        double k = num(o, "val_topk");
        e->topk = isfinite(k) && k >= 1 && k <= 5 ? (int)k : 0;
        const cl_json *p = cl_json_get(o, "precision");
        e->precision[0] = '\0';
        if (p && p->type == CL_JSON_STR)
            snprintf(e->precision, sizeof e->precision, "%s", p->str);
    }
    /* Other kinds are records of later versions: skipped quietly. */
    return CL_OK;
}

cl_status cl__runlog_parse(cl__runlog *rl, const char *text, size_t len)
{
    size_t pos = 0;
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        size_t n = end - pos;
        const char *line = text + pos;
        pos = nl ? end + 1 : len;
        while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == ' '))
            n--;
        if (n == 0)
            continue;
        cl_json_doc *doc = NULL;
        cl_json_limits lim = {8, 4096}; /* a record is flat and small */
        if (cl_json_parse(&doc, line, n, &lim, "metrics.jsonl") != CL_OK) {
            cl_clear_error();
            /* The writer appends whole lines: text after the last newline
             * is a record being written right now. */
            if (nl)
                rl->bad_lines++;
            else
                rl->partial_tail = 1;
            continue;
        }
        const cl_json *root = cl_json_root(doc);
        cl_status s = CL_OK;
        if (root->type == CL_JSON_OBJ)
            s = add_record(rl, root);
        else
            rl->bad_lines++;
        cl_json_free(doc);
        CL_TRY(s);
    }
    return CL_OK;
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* The best checkpoint, else the last, else the newest model file; and the
 * newest training state. */
static void find_ckpt(cl__runlog *rl)
{
    DIR *d = opendir(rl->dir);
    if (!d)
        return;
    char best[512] = "", last[512] = "", newest[512] = "", state[512] = "";
    double t_best = -1, t_last = -1, t_new = -1, t_state = -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (!ends_with(n, ".safetensors") || strstr(n, ".val.") ||
            strlen(n) >= sizeof best)
            continue;
        char path[1536];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", rl->dir, n);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        double t = (double)st.st_mtime;
        if (strstr(n, ".state.")) {
            /* Several are written within a second: to the nanosecond. */
            double ts = t + 1e-9 * (double)st.st_mtim.tv_nsec;
            if (ends_with(n, ".state.safetensors") && ts > t_state) {
                snprintf(state, sizeof state, "%s", n);
                t_state = ts;
            }
        } else if (ends_with(n, "-best.safetensors") && t > t_best) {
            snprintf(best, sizeof best, "%s", n);
            t_best = t;
        } else if (ends_with(n, "-last.safetensors") && t > t_last) {
            snprintf(last, sizeof last, "%s", n);
            t_last = t;
        } else if (t > t_new) {
            snprintf(newest, sizeof newest, "%s", n);
            t_new = t;
        }
    }
    closedir(d);
    const char *pick = best[0] ? best : last[0] ? last : newest;
    snprintf(rl->ckpt_kind, sizeof rl->ckpt_kind, "%s",
             best[0]   ? "best"
             : last[0] ? "last"
                       : "latest");
    rl->has_last = last[0] != '\0';
    if (pick[0])
        snprintf(rl->ckpt, sizeof rl->ckpt, "%s/%s", rl->dir, pick);
    if (state[0])
        snprintf(rl->state, sizeof rl->state, "%s/%s", rl->dir, state);
}

static void read_config(cl__runlog *rl)
{
    char path[1100];
    cl_strbuf b;
    cl_strbuf_init(&b);
    snprintf(path, sizeof path, "%s/config.yaml", rl->dir);
    if (read_all(path, &b, (size_t)1 << 24) != CL_OK || b.len == 0) {
        cl_strbuf_free(&b);
        cl_clear_error();
        return;
    }
    size_t n = b.len;
    rl->config_text = cl_alloc(n + 1, "config text");
    if (!rl->config_text) {
        cl_strbuf_free(&b);
        cl_clear_error();
        return;
    }
    memcpy(rl->config_text, b.data, n);
    rl->config_text[n] = '\0';
    cl_strbuf_free(&b);
    if (rl->config_text[0] == '#') {
        const char *p = rl->config_text + 1;
        while (*p == ' ')
            p++;
        size_t l = strcspn(p, "\n");
        if (l >= sizeof rl->header)
            l = sizeof rl->header - 1;
        memcpy(rl->header, p, l);
        rl->header[l] = '\0';
    }
    cl_config_defaults(&rl->cfg);
    rl->have_config =
        cl_config_load_yaml_text(&rl->cfg, rl->config_text, n, path) == CL_OK;
    cl_clear_error();
}

cl_status cl__runlog_read(cl__runlog *rl, const char *run_dir)
{
    memset(rl, 0, sizeof *rl);
    struct stat st;
    if (!run_dir || !run_dir[0])
        return cl_error(CL_ERR_ARG, "report: no run directory given");
    if (stat(run_dir, &st) != 0)
        return cl_error(CL_ERR_IO, "%s: no such run directory (%s)", run_dir,
                        strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return cl_error(CL_ERR_IO,
                        "%s: not a directory (expected a run directory "
                        "holding metrics.jsonl)",
                        run_dir);
    size_t dl = strlen(run_dir);
    while (dl > 1 && run_dir[dl - 1] == '/')
        dl--;
    if (dl >= 1000)
        return cl_error(CL_ERR_ARG, "%s: path too long", run_dir);
    rl->dir = cl_alloc(dl + 1, "run directory");
    if (!rl->dir)
        return CL_ERR_NOMEM;
    memcpy(rl->dir, run_dir, dl);
    rl->dir[dl] = '\0';
    const char *base = strrchr(rl->dir, '/');
    base = base && base[1] ? base + 1 : rl->dir;
    snprintf(rl->name, sizeof rl->name, "%s", base);

    char path[1100];
    snprintf(path, sizeof path, "%s/metrics.jsonl", rl->dir);
    cl_strbuf b;
    cl_strbuf_init(&b);
    cl_status s;
    if (stat(path, &st) != 0 && errno == ENOENT) {
        s = cl_error(CL_ERR_IO,
                     "%s: no metrics.jsonl in this directory (expected the "
                     "ckpt_save_dir of a training run)",
                     rl->dir);
        goto fail;
    }
    if ((s = read_all(path, &b, MAX_LOG_BYTES)) != CL_OK)
        goto fail;
    if ((s = cl__runlog_parse(rl, cl_strbuf_str(&b), b.len)) != CL_OK)
        goto fail;
    read_config(rl);
    find_ckpt(rl);
fail:
    cl_strbuf_free(&b);
    return s;
}

void cl__runlog_free(cl__runlog *rl)
{
    cl_free(rl->dir);
    cl_free(rl->train);
    cl_free(rl->eval);
    cl_free(rl->config_text);
    memset(rl, 0, sizeof *rl);
}
