/* The config a training run runs with: the recipe and overrides over the
 * defaults, or on resume over the resolved config the checkpoint holds,
 * with the changes named and those a running model cannot take refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "train/lr.h"
#include "train/recipe.h"
#include "train/train_config.h"
#include "train/train_state.h"

/* A config value as the YAML writer spells it; a string holds at most
 * CL_CFG_PATH_MAX bytes, quoted and escaped. */
enum { VAL_MAX = 2 * CL_CFG_PATH_MAX + 16 };

/* The recipe file, the recipe text and the overrides, in that order. */
static cl_status apply_inputs(cl_config *c, const char *path, const char *text,
                              const char *const *ov, int n, const char *who)
{
    if (path)
        CL_TRY(cl_config_merge_yaml(c, path));
    if (text)
        CL_TRY(cl_config_merge_yaml_text(c, text, strlen(text), "config text"));
    for (int i = 0; i < n; i++)
        CL_TRY(cl_config_set_pair(c, ov[i], who));
    return CL_OK;
}

/* What the checkpoint says of itself beside its config. */
typedef struct ckpt_facts {
    int has_config;
    int num_classes; /* of its head; 0 when not recorded */
    int has_stem;    /* a ResNet's (a Swin has none) */
} ckpt_facts;

/* The checkpoint's resolved config over the defaults into *base. */
static cl_status checkpoint_config(const char *ckpt, cl_config *base,
                                   ckpt_facts *facts)
{
    cl_st_file *f = NULL;
    memset(facts, 0, sizeof *facts);
    cl_config_defaults(base);
    CL_TRY(cl_error_wrap(cl_st_open(&f, ckpt), "resume: "));
    const char *yaml = cl_st_metadata(f, CL_META_CONFIG);
    const char *k = cl_st_metadata(f, CL_META_NUM_CLASSES);
    const char *stem = cl_st_metadata(f, CL_META_STEM);
    facts->num_classes = k ? atoi(k) : 0;
    facts->has_stem = stem && stem[0];
    cl_status s = CL_OK;
    if (yaml && yaml[0]) {
        char name[CL_CFG_PATH_MAX + 32];
        snprintf(name, sizeof name, "%s (its config)", ckpt);
        s = cl_config_merge_yaml_text(base, yaml, strlen(yaml), name);
        facts->has_config = s == CL_OK;
    }
    cl_st_close(f);
    /* The run it came from may have replaced a folder; resuming never
     * does. */
    base->overwrite = 0;
    return s == CL_OK ? CL_OK : cl_error_wrap(s, "resume: ");
}

static void value_of(const cl_config *c, const char *key, char *buf)
{
    if (cl_config_get(c, key, buf, VAL_MAX) != CL_OK)
        buf[0] = '\0';
}

/* Model, stem, input channels and classes shape the weights the
 * checkpoint holds: a change is refused before any tensor is read. */
static cl_status check_fixed(const char *ckpt, const cl_config *base,
                             const cl_config *c, const ckpt_facts *facts)
{
    static const char *const keys[] = {"model", "stem", "in_channels"};
    char was[VAL_MAX], now[VAL_MAX];
    const char *key = NULL;
    for (int i = 0; i < 3 && !key; i++) {
        if (i == 1 && !facts->has_stem)
            continue;
        value_of(base, keys[i], was);
        value_of(c, keys[i], now);
        if (strcmp(was, now) != 0)
            key = keys[i];
    }
    if (!key && c->num_classes > 0 && facts->num_classes > 0 &&
        c->num_classes != facts->num_classes) {
        key = "num_classes";
        snprintf(was, sizeof was, "%d", facts->num_classes);
        snprintf(now, sizeof now, "%d", c->num_classes);
    }
    if (!key)
        return CL_OK;
    return cl_error(CL_ERR_CONFIG,
                    "resume: %s was trained with %s %s and this run asks "
                    "for %s %s; the model cannot change mid-run: leave %s "
                    "at %s (the checkpoint's config gives it), or start a "
                    "new run from these weights with --pretrained",
                    ckpt, key, was, key, now, key, was);
}

/* A new epoch_size on resume: the cosine is laid over epoch_size, so
 * without decay_epochs the steps left would take other lrs than the run
 * was on (a jump up when it grows).  Refused then; otherwise one note
 * says that the schedule of the steps left stays.  A checkpoint whose
 * state lacks the counters it needs is left to the trainer's checks. */
static cl_status check_schedule(const char *ckpt, const cl_config *base,
                                const cl_config *c, cl_strbuf *notes)
{
    if (base->epoch_size == c->epoch_size)
        return CL_OK;
    char sp[CL_CFG_PATH_MAX + 32];
    cl_train_state_info in;
    cl_train_state_path(ckpt, sp, sizeof sp);
    if (access(sp, R_OK) != 0 || cl_train_state_read_info(sp, &in) != CL_OK) {
        cl_clear_error();
        memset(&in, 0, sizeof in);
    }
    const int64_t step = in.step, spe = in.steps_per_epoch;
    const int gb = spe > 0 ? in.global_batch : 0;
    cl_config old = *c;
    old.epoch_size = base->epoch_size;
    cl_lr_config now, was;
    if (gb <= 0 || cl_recipe_lr(c, spe, gb, &now) != CL_OK ||
        cl_recipe_lr(&old, spe, gb, &was) != CL_OK) {
        cl_clear_error();
        return CL_OK;
    }
    int64_t end =
        (int64_t)(c->epoch_size < base->epoch_size ? c->epoch_size
                                                   : base->epoch_size);
    end *= spe;
    for (int64_t s = step; s < end; s++) {
        float a = cl_lr_at(&was, s), b = cl_lr_at(&now, s);
        if (a == b)
            continue;
        return cl_error(CL_ERR_CONFIG,
                        "resume: epoch_size was %d and is %d here; "
                        "cosine_decay spans epoch_size - warmup_epochs, so "
                        "step %lld would take lr %.4g instead of %.4g: keep "
                        "epoch_size %d, keep the schedule with "
                        "--decay_epochs %d (the lr then stays at min_lr %g "
                        "past it), or start a new run from these weights "
                        "with --pretrained",
                        base->epoch_size, c->epoch_size, (long long)s + 1,
                        (double)b, (double)a, base->epoch_size,
                        base->epoch_size - c->warmup_epochs, c->min_lr);
    }
    if (notes)
        cl_strbuf_addf(notes,
                       "resume: epoch_size changes from %d to %d; the lr "
                       "schedule of the steps left stays as it was\n",
                       base->epoch_size, c->epoch_size);
    return CL_OK;
}

/* One line per key the recipe or the command line changed. */
static void note_changes(const char *ckpt, const cl_config *base,
                         const cl_config *c, cl_strbuf *notes)
{
    char was[VAL_MAX], now[VAL_MAX];
    cl_strbuf_addf(notes,
                   "resume: the config comes from %s (as its run "
                   "resolved it)\n",
                   ckpt);
    for (int i = 0; i < cl_config_key_count(); i++) {
        const char *k = cl_config_key_name(i);
        /* resume itself, and epoch_size (check_schedule's note). */
        if (strcmp(k, "resume") == 0 || strcmp(k, "epoch_size") == 0)
            continue;
        value_of(base, k, was);
        value_of(c, k, now);
        if (strcmp(was, now) != 0)
            cl_strbuf_addf(notes, "resume: %s changes from %s to %s\n", k, was,
                           now);
    }
}

cl_status cl_train_config_resolve(cl_config *cfg, const char *path,
                                  const char *text,
                                  const char *const *overrides, int n,
                                  const char *who, cl_strbuf *notes)
{
    cl_config_defaults(cfg);
    CL_TRY(apply_inputs(cfg, path, text, overrides, n, who));
    if (!cfg->resume[0])
        return cl_config_check(cfg);
    char ckpt[CL_CFG_PATH_MAX];
    snprintf(ckpt, sizeof ckpt, "%s", cfg->resume);
    cl_config base;
    ckpt_facts facts;
    CL_TRY(checkpoint_config(ckpt, &base, &facts));
    if (!facts.has_config) {
        /* A plain weights file, or one older than its config: the recipe
         * and the command line say everything, as before. */
        if (notes)
            cl_strbuf_addf(notes,
                           "resume: %s holds no config; the recipe and "
                           "the command line give it\n",
                           ckpt);
        return cl_config_check(cfg);
    }
    *cfg = base;
    CL_TRY(apply_inputs(cfg, path, text, overrides, n, who));
    CL_TRY(cl_config_check(cfg));
    CL_TRY(check_fixed(ckpt, &base, cfg, &facts));
    if (notes)
        note_changes(ckpt, &base, cfg, notes);
    return check_schedule(ckpt, &base, cfg, notes);
}
