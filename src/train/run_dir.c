/* The run folder: claiming it (train/run_dir.h) and the files of its
 * record. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "io/strbuf.h"
#include "train/metrics.h"
#include "train/run_dir.h"

/* path and every folder above it ("mkdir -p"). */
static cl_status make_dirs(const char *path)
{
    char buf[1024];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return cl_error(CL_ERR_ARG, "path too long: %s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return cl_error(CL_ERR_IO, "%s: cannot create folder: %s", buf,
                            strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return cl_error(CL_ERR_IO, "%s: cannot create folder: %s", buf,
                        strerror(errno));
    return CL_OK;
}

/* Whether name is a checkpoint file the trainer writes: "<arch>-e<E>",
 * "<arch>-e<E>-s<S>", "<arch>-last" or "<arch>-best", then ".safetensors",
 * ".state.safetensors" or ".val.safetensors". */
static int is_checkpoint_file(const char *name)
{
    static const char ext[] = ".safetensors";
    size_t n = strlen(name), el = sizeof ext - 1;
    if (n <= el || strcmp(name + n - el, ext) != 0)
        return 0;
    n -= el;
    if (n > 6 && memcmp(name + n - 6, ".state", 6) == 0)
        n -= 6;
    else if (n > 4 && memcmp(name + n - 4, ".val", 4) == 0)
        n -= 4;
    const char *dash = memchr(name, '-', n);
    if (!dash || dash == name)
        return 0;
    for (const char *p = name; p < dash; p++)
        if (!islower((unsigned char)*p) && !isdigit((unsigned char)*p) &&
            *p != '_')
            return 0;
    const char *t = dash + 1, *end = name + n;
    size_t tl = (size_t)(end - t);
    if ((tl == 4 && memcmp(t, "last", 4) == 0) ||
        (tl == 4 && memcmp(t, "best", 4) == 0))
        return 1;
    if (t == end || *t++ != 'e' || t == end || !isdigit((unsigned char)*t))
        return 0;
    while (t < end && isdigit((unsigned char)*t))
        t++;
    if (t == end)
        return 1;
    if (end - t < 3 || t[0] != '-' || t[1] != 's' ||
        !isdigit((unsigned char)t[2]))
        return 0;
    for (t += 2; t < end && isdigit((unsigned char)*t); t++)
        ;
    return t == end;
}

/* What a folder holds of a run, and with remove set, removes it (all but
 * the file at keep, which this run reads). */
typedef struct run_files {
    int config, metrics, ckpts;
    char last[256]; /* a "-last" model file's name, or "" */
} run_files;

static void scan_run_files(const char *dir, int remove, const struct stat *keep,
                           run_files *f)
{
    memset(f, 0, sizeof *f);
    DIR *d = opendir(dir);
    if (!d)
        return;
    char path[CL_CFG_PATH_MAX + 300];
    const struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        int config = strcmp(n, "config.yaml") == 0;
        int metrics = strcmp(n, "metrics.jsonl") == 0;
        int ckpt = is_checkpoint_file(n);
        if (!config && !metrics && !ckpt && strcmp(n, "report.html") != 0)
            continue;
        f->config |= config;
        f->metrics |= metrics;
        f->ckpts += ckpt;
        size_t len = strlen(n);
        if (ckpt && len > 17 && strcmp(n + len - 17, "-last.safetensors") == 0)
            snprintf(f->last, sizeof f->last, "%s", n);
        if (!remove)
            continue;
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, n);
        if (keep && stat(path, &st) == 0 && st.st_dev == keep->st_dev &&
            st.st_ino == keep->st_ino)
            continue;
        unlink(path);
    }
    closedir(d);
}

cl_status cl_run_claim_dir(cl_run *r)
{
    const cl_config *c = r->cfg;
    const char *dir = c->ckpt_save_dir;
    cl_status s = CL_OK;
    run_files f;
    if (r->root && !c->resume[0]) {
        scan_run_files(dir, 0, NULL, &f);
        char what[96];
        snprintf(what, sizeof what, "%s%s%d checkpoint file(s)",
                 f.config ? "config.yaml, " : "",
                 f.metrics ? "metrics.jsonl, " : "", f.ckpts);
        if ((f.config || f.metrics) && !c->overwrite) {
            s = cl_error(CL_ERR_CONFIG,
                         "ckpt_save_dir %s already holds a run (%s), which "
                         "a new run there would replace: continue it with "
                         "--resume %s/%s, train into another folder with "
                         "--ckpt_save_dir, or replace it with --overwrite "
                         "true",
                         dir, what, dir, f.last[0] ? f.last : "CHECKPOINT");
        } else if (f.config || f.metrics) {
            struct stat keep;
            int k = c->pretrained[0] && stat(c->pretrained, &keep) == 0;
            scan_run_files(dir, 1, k ? &keep : NULL, &f);
            cl_log(r->lg, CL_LOG_INFO,
                   "overwrite: %s held a run; its files are removed (%s, "
                   "report.html)%s",
                   dir, what,
                   k ? "; the pretrained weights this run reads are kept" : "");
        }
    }
    if (r->d && !cl_dist_all_ok(r->d, s == CL_OK))
        return s != CL_OK ? s
                          : cl_error(CL_ERR_CONFIG,
                                     "rank 0 refused ckpt_save_dir %s", dir);
    return s;
}

cl_status cl_run_write_files(cl_run *r)
{
    const cl_config *c = r->cfg;
    char path[1024];
    cl_strbuf y;
    cl_strbuf_init(&y);
    CL_TRY(cl_config_format_yaml(c, &y));
    r->config_yaml = strdup(cl_strbuf_str(&y));
    cl_strbuf_free(&y);
    if (!r->config_yaml)
        return cl_error(CL_ERR_NOMEM, "config text");
    if (!r->root)
        return CL_OK;
    CL_TRY(make_dirs(c->ckpt_save_dir));
    snprintf(path, sizeof path, "%s/config.yaml", c->ckpt_save_dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return cl_error(CL_ERR_IO, "%s: cannot write: %s", path,
                        strerror(errno));
    fprintf(f, "# resolved by classic %s; seed %d; %d process(es)\n",
            cl_version(), c->seed, cl_run_ranks(r));
    fputs(r->config_yaml, f);
    if (fclose(f) != 0)
        return cl_error(CL_ERR_IO, "%s: write failed", path);
    snprintf(path, sizeof path, "%s/metrics.jsonl", c->ckpt_save_dir);
    /* Appending keeps the curves of a resumed run in one file. */
    r->jsonl = fopen(path, c->resume[0] ? "a" : "w");
    if (!r->jsonl)
        return cl_error(CL_ERR_IO, "%s: cannot write: %s", path,
                        strerror(errno));
    return CL_OK;
}

/* ---- metrics.jsonl ---------------------------------------------------- */

void cl_run_jsonl_step(cl_run *r, int64_t step, int64_t epoch, double loss,
                       double avg, double lr, double ips, double ms,
                       double wait, double comm, double hook)
{
    if (!r->jsonl)
        return;
    cl_strbuf *b = &r->line;
    b->len = 0;
    cl_strbuf_addf(b, "{\"kind\":\"train\",\"step\":%lld,\"epoch\":%lld,",
                   (long long)step, (long long)epoch);
    cl_strbuf_adds(b, "\"loss\":");
    cl_strbuf_add_json_num(b, loss);
    cl_strbuf_adds(b, ",\"loss_avg\":");
    cl_strbuf_add_json_num(b, avg);
    cl_strbuf_adds(b, ",\"lr\":");
    cl_strbuf_add_json_num(b, lr);
    cl_strbuf_adds(b, ",\"img_s\":");
    cl_strbuf_add_json_num(b, ips);
    cl_strbuf_adds(b, ",\"step_ms\":");
    cl_strbuf_add_json_num(b, ms);
    cl_strbuf_adds(b, ",\"data_wait\":");
    cl_strbuf_add_json_num(b, wait);
    if (r->sync) {
        cl_strbuf_adds(b, ",\"comm_wait\":");
        cl_strbuf_add_json_num(b, comm);
        cl_strbuf_adds(b, ",\"comm_hook\":");
        cl_strbuf_add_json_num(b, hook);
    }
    cl_strbuf_adds(b, "}\n");
    fputs(cl_strbuf_str(b), r->jsonl);
    fflush(r->jsonl);
}

void cl_run_jsonl_eval(cl_run *r, int64_t step, int64_t epoch, double epoch_s)
{
    if (!r->jsonl)
        return;
    cl_strbuf *b = &r->line;
    b->len = 0;
    cl_strbuf_addf(b, "{\"kind\":\"eval\",\"step\":%lld,\"epoch\":%lld,",
                   (long long)step, (long long)epoch);
    cl_strbuf_adds(b, "\"val_top1\":");
    cl_strbuf_add_json_num(b, cl_metrics_top1(&r->val));
    cl_strbuf_adds(b, ",\"val_top5\":");
    cl_strbuf_add_json_num(b, cl_metrics_topk(&r->val));
    cl_strbuf_adds(b, ",\"val_loss\":");
    cl_strbuf_add_json_num(b, cl_metrics_loss(&r->val));
    cl_strbuf_addf(b, ",\"val_samples\":%lld,\"epoch_s\":",
                   (long long)cl_metrics_count(&r->val));
    cl_strbuf_add_json_num(b, epoch_s);
    if (r->has_ema) { /* the average's pass, beside the weights' */
        cl_strbuf_adds(b, ",\"val_ema_top1\":");
        cl_strbuf_add_json_num(b, cl_metrics_top1(&r->val_ema));
        cl_strbuf_adds(b, ",\"val_ema_top5\":");
        cl_strbuf_add_json_num(b, cl_metrics_topk(&r->val_ema));
        cl_strbuf_adds(b, ",\"val_ema_loss\":");
        cl_strbuf_add_json_num(b, cl_metrics_loss(&r->val_ema));
    }
    if (r->cfg->eval_hflip) /* absent: plain eval, as in older files */
        cl_strbuf_adds(b, ",\"val_hflip\":true");
    /* What val_top5 counts (min(5, K)) and the precision the pass ran at,
     * so that the report labels them (absent in older files: top-5, f32). */
    cl_strbuf_addf(b, ",\"val_topk\":%d,\"precision\":\"%s\"", r->val.k,
                   cl_train_eval_precision(r->cfg->amp_level));
    cl_strbuf_adds(b, "}\n");
    fputs(cl_strbuf_str(b), r->jsonl);
    fflush(r->jsonl);
}
