/* The run configuration: the table of keys (io/config_keys.c) drives
 * defaults, YAML loading, command-line overrides, writing, comparison and
 * the --help listing. */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "core/error.h"
#include "core/log.h"
#include "core/mem.h"
#include "io/config.h"
#include "io/config_keys.h"

/* The rows of io/config_keys.c. */
static const key *const keys = cl__config_keys;

/* ---- small helpers ---- */

static int *int_at(cl_config *c, const key *k)
{
    return (int *)((char *)c + k->off);
}
static double *dbl_at(cl_config *c, const key *k)
{
    return (double *)((char *)c + k->off);
}
static char *str_at(cl_config *c, const key *k)
{
    return (char *)c + k->off;
}
static int *count_at(cl_config *c, const key *k)
{
    return (int *)((char *)c + k->n_off);
}
#define CINT(c, k) (*int_at((cl_config *)(c), k))
#define CDBL(c, k) (dbl_at((cl_config *)(c), k))
#define CSTR(c, k) (str_at((cl_config *)(c), k))
#define CCNT(c, k) (*count_at((cl_config *)(c), k))

static const key *find_key(const char *name)
{
    for (int i = 0; i < cl__config_nkeys; i++)
        if (keys[i].name &&
            (strcmp(keys[i].name, name) == 0 ||
             (keys[i].alias && strcmp(keys[i].alias, name) == 0)))
            return &keys[i];
    return NULL;
}

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 64;
    size_t row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t sub = diag + (tolower((unsigned char)a[i - 1]) !=
                                 tolower((unsigned char)b[j - 1]));
            size_t best = sub;
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The key a user most likely meant, or NULL when nothing is close. */
static const char *suggest(const char *name)
{
    for (int i = 0; i < cl__config_nsynonyms; i++)
        if (strcmp(cl__config_synonyms[i][0], name) == 0)
            return cl__config_synonyms[i][1];
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (int i = 0; i < cl__config_nkeys; i++) {
        if (!keys[i].name)
            continue;
        const char *cand[2] = {keys[i].name, keys[i].alias};
        for (int j = 0; j < 2; j++) {
            if (!cand[j])
                continue;
            size_t d = edit_distance(name, cand[j]);
            if (d < best_d) {
                best_d = d;
                best = keys[i].name;
            }
        }
    }
    size_t n = strlen(name);
    size_t limit = n <= 4 ? 1 : n <= 8 ? 2 : 3;
    return best_d <= limit ? best : NULL;
}

static cl_status unknown_key(const char *loc, const char *name)
{
    const char *s = suggest(name);
    if (s)
        return cl_error(CL_ERR_CONFIG,
                        "%s: unknown key '%.80s' (did you mean '%s'?)", loc,
                        name, s);
    return cl_error(CL_ERR_CONFIG,
                    "%s: unknown key '%.80s' (`classic train --help` lists "
                    "the keys)",
                    loc, name);
}

static void fmt_num(char *buf, size_t n, double v)
{
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, n, "%.0f", v);
        return;
    }
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

static void fmt_range(char *buf, size_t n, const key *k)
{
    char lo[40], hi[40];
    fmt_num(lo, sizeof lo, k->min);
    fmt_num(hi, sizeof hi, k->max);
    if (k->max >= CL__CFG_NO_MAX)
        snprintf(buf, n, "%s %s", k->min_open ? ">" : ">=", lo);
    else
        snprintf(buf, n, "in %c%s, %s%c", k->min_open ? '(' : '[', lo, hi,
                 k->max_open ? ')' : ']');
}

/* What a key accepts, as the phrase after "expects". */
static void describe(char *buf, size_t n, const key *k)
{
    char r[96];
    switch (k->type) {
    case T_INT:
    case T_INTS: {
        int list = k->type == T_INTS;
        char what[64];
        if (k->min == 1 || k->min == 0)
            snprintf(what, sizeof what, "%s integer%s",
                     k->min == 1 ? "positive" : "non-negative",
                     list ? "s" : "");
        else
            snprintf(what, sizeof what, "integer%s >= %.0f", list ? "s" : "",
                     k->min);
        char most[48] = "";
        if (k->max < INT_MAX)
            snprintf(most, sizeof most, " (at most %.0f)", k->max);
        if (!list)
            snprintf(buf, n, "a%s %s%s", what[0] == 'i' ? "n" : "", what, most);
        else
            snprintf(buf, n, "a list of up to %d %s%s", k->cap, what, most);
        return;
    }
    case T_FLOAT:
        fmt_range(r, sizeof r, k);
        snprintf(buf, n, "a number %s", r);
        return;
    case T_FLOATS:
        fmt_range(r, sizeof r, k);
        if (k->min_n == k->cap)
            snprintf(buf, n, "a list of %d numbers %s", k->cap, r);
        else
            snprintf(buf, n, "a list of %d to %d numbers %s", k->min_n, k->cap,
                     r);
        return;
    case T_BOOL:
        snprintf(buf, n, "true or false");
        return;
    case T_STR:
        snprintf(buf, n, "a string of at most %d bytes", k->cap - 1);
        return;
    case T_ENUM: {
        size_t at = (size_t)snprintf(buf, n, "one of ");
        for (int i = 0; k->values[i] && at < n; i++)
            at += (size_t)snprintf(buf + at, n - at, "%s%s", i ? ", " : "",
                                   k->values[i]);
        return;
    }
    }
}

static cl_status bad_value(const char *loc, const key *k, const char *text,
                           int range)
{
    char d[200];
    describe(d, sizeof d, k);
    return cl_error(CL_ERR_CONFIG, "%s: key '%s' expects %s, found '%.60s'%s",
                    loc, k->name, d, text, range && k->hint ? k->hint : "");
}

static int parse_int(const char *s, long long *out)
{
    char *end;
    if (!*s || isspace((unsigned char)*s))
        return 0;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return 0;
    *out = v;
    return 1;
}

static int parse_double(const char *s, double *out)
{
    char *end;
    if (!*s || isspace((unsigned char)*s))
        return 0;
    /* Decimal only: strtod would also take hex, "inf" and "nan". */
    for (const char *p = s; *p; p++)
        if (!strchr("0123456789+-.eE", *p))
            return 0;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || !isfinite(v))
        return 0;
    *out = v;
    return 1;
}

static int parse_bool(const char *s, int *out)
{
    static const char *const t[] = {"true", "yes", "on", "1"};
    static const char *const f[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, t[i]) == 0)
            return *out = 1, 1;
        if (strcasecmp(s, f[i]) == 0)
            return *out = 0, 1;
    }
    return 0;
}

static int in_range(const key *k, double v)
{
    if (v < k->min || (k->min_open && v == k->min))
        return 0;
    if (v > k->max || (k->max_open && v == k->max))
        return 0;
    return 1;
}

/* YAML's null spellings, which a string key reads as "". */
static int is_null(const char *s)
{
    return !*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

/* One scalar into a non-list key. `quoted`: the YAML scalar was quoted
 * (then a string key keeps "null" literally). */
static cl_status set_scalar(cl_config *c, const key *k, const char *text,
                            int quoted, const char *loc)
{
    long long iv;
    double dv;
    int bv;
    switch (k->type) {
    case T_INT:
        if (!parse_int(text, &iv))
            return bad_value(loc, k, text, 0);
        if (!in_range(k, (double)iv))
            return bad_value(loc, k, text, 1);
        CINT(c, k) = (int)iv;
        return CL_OK;
    case T_FLOAT:
        if (!parse_double(text, &dv))
            return bad_value(loc, k, text, 0);
        if (!in_range(k, dv))
            return bad_value(loc, k, text, 1);
        *CDBL(c, k) = dv;
        return CL_OK;
    case T_BOOL:
        if (!parse_bool(text, &bv))
            return bad_value(loc, k, text, 0);
        CINT(c, k) = bv;
        return CL_OK;
    case T_STR: {
        if (!quoted && is_null(text))
            text = "";
        size_t n = strlen(text);
        if (n >= (size_t)k->cap)
            return cl_error(CL_ERR_CONFIG,
                            "%s: key '%s' is %zu bytes long, at most %d fit",
                            loc, k->name, n, k->cap - 1);
        char *dst = CSTR(c, k);
        memset(dst, 0, (size_t)k->cap);
        memcpy(dst, text, n);
        return CL_OK;
    }
    case T_ENUM:
        for (int a = 0; a < cl__config_nvalue_aliases; a++)
            if (strcmp(cl__config_value_aliases[a][0], k->name) == 0 &&
                strcmp(cl__config_value_aliases[a][1], text) == 0)
                text = cl__config_value_aliases[a][2];
        for (int i = 0; k->values[i]; i++)
            if (strcmp(k->values[i], text) == 0) {
                CINT(c, k) = i;
                return CL_OK;
            }
        return bad_value(loc, k, text, 0);
    case T_FLOATS:
    case T_INTS:
        break;
    }
    CL_ASSERT(!"set_scalar on a list key");
    return CL_ERR_ARG;
}

/* A list key from its items (a single scalar is a one-item list). */
static cl_status set_list(cl_config *c, const key *k, const char *const *items,
                          int n, const char *loc)
{
    char d[200];
    if (n > k->cap || n < k->min_n) {
        describe(d, sizeof d, k);
        return cl_error(CL_ERR_CONFIG,
                        "%s: key '%s' expects %s, found %d item%s", loc,
                        k->name, d, n, n == 1 ? "" : "s");
    }
    double dv[CL_CFG_MAX_MILESTONES];
    int iv[CL_CFG_MAX_MILESTONES];
    for (int i = 0; i < n; i++) {
        long long ll;
        if (k->type == T_INTS) {
            if (!parse_int(items[i], &ll))
                return bad_value(loc, k, items[i], 0);
            if (!in_range(k, (double)ll))
                return bad_value(loc, k, items[i], 1);
            iv[i] = (int)ll;
        } else {
            if (!parse_double(items[i], &dv[i]))
                return bad_value(loc, k, items[i], 0);
            if (!in_range(k, dv[i]))
                return bad_value(loc, k, items[i], 1);
        }
    }
    if (k->type == T_INTS) {
        int *dst = int_at(c, k);
        memset(dst, 0, (size_t)k->cap * sizeof *dst);
        memcpy(dst, iv, (size_t)n * sizeof *dst);
    } else {
        double *dst = dbl_at(c, k);
        memset(dst, 0, (size_t)k->cap * sizeof *dst);
        memcpy(dst, dv, (size_t)n * sizeof *dst);
    }
    CCNT(c, k) = n;
    return CL_OK;
}

enum { MAX_ITEMS = CL_CFG_MAX_MILESTONES + 1, ITEM_LEN = 80 };

/* "a,b,c" or "[a, b, c]" (or "[]") into items; returns the count, or
 * MAX_ITEMS + 1 when there are too many. */
static int split_list(const char *s, char items[][ITEM_LEN])
{
    while (isspace((unsigned char)*s))
        s++;
    size_t len = strlen(s);
    while (len && isspace((unsigned char)s[len - 1]))
        len--;
    if (len >= 2 && s[0] == '[' && s[len - 1] == ']') {
        s++;
        len -= 2;
        while (len && isspace((unsigned char)*s))
            s++, len--;
    }
    int n = 0;
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && s[j] != ',')
            j++;
        size_t a = i, b = j;
        while (a < b && isspace((unsigned char)s[a]))
            a++;
        while (b > a && isspace((unsigned char)s[b - 1]))
            b--;
        if (n >= MAX_ITEMS)
            return MAX_ITEMS + 1;
        size_t m = b - a < ITEM_LEN - 1 ? b - a : ITEM_LEN - 1;
        memcpy(items[n], s + a, m);
        items[n][m] = '\0';
        n++;
        if (j == len)
            break;
        i = j + 1;
        if (i == len) { /* trailing comma: an empty last item */
            items[n][0] = '\0';
            n++;
        }
    }
    return n;
}

static cl_status set_text(cl_config *c, const key *k, const char *value,
                          const char *loc)
{
    if (k->type != T_FLOATS && k->type != T_INTS)
        return set_scalar(c, k, value, 0, loc);
    char items[MAX_ITEMS + 1][ITEM_LEN];
    const char *ptrs[MAX_ITEMS + 1];
    int n = split_list(value, items);
    for (int i = 0; i < n && i <= MAX_ITEMS; i++)
        ptrs[i] = items[i];
    return set_list(c, k, ptrs, n, loc);
}

/* ---- defaults, overrides, checks ---- */

void cl_config_defaults(cl_config *c)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < cl__config_nkeys; i++) {
        if (!keys[i].name)
            continue;
        cl_status s = set_text(c, &keys[i], keys[i].def, "defaults");
        CL_ASSERT(s == CL_OK);
    }
}

cl_status cl_config_set_pair(cl_config *c, const char *kv, const char *who)
{
    if (!kv)
        return cl_error(CL_ERR_ARG, "%s: an override is NULL", who);
    const char *eq = strchr(kv, '=');
    char name[128];
    if (!eq || eq == kv || (size_t)(eq - kv) >= sizeof name)
        return cl_error(CL_ERR_ARG, "%s: override '%s': expected key=value",
                        who, kv);
    memcpy(name, kv, (size_t)(eq - kv));
    name[eq - kv] = '\0';
    return cl_config_set(c, name, eq + 1);
}

cl_status cl_config_set(cl_config *c, const char *name, const char *value)
{
    char norm[96];
    size_t n = strlen(name);
    if (n >= sizeof norm)
        return unknown_key("command line", name);
    for (size_t i = 0; i <= n; i++)
        norm[i] = name[i] == '-' ? '_' : name[i];
    /* --amp O2: the command-line spelling of torchvision's reference
     * scripts; a recipe file says amp_level. */
    const key *k = find_key(strcmp(norm, "amp") == 0 ? "amp_level" : norm);
    if (!k)
        return unknown_key("command line", norm);
    return set_text(c, k, value, "command line");
}

cl_status cl_config_check(const cl_config *c)
{
    const char *p = "config";
    /* Fields set by code rather than parsed: enums and booleans in range. */
    for (int i = 0; i < cl__config_nkeys; i++) {
        const key *k = &keys[i];
        int n = 0;
        if (!k->name || (k->type != T_ENUM && k->type != T_BOOL))
            continue;
        if (k->type == T_ENUM)
            while (k->values[n])
                n++;
        else
            n = 2;
        if (CINT(c, k) < 0 || CINT(c, k) >= n)
            return cl_error(CL_ERR_CONFIG,
                            "%s: key '%s' holds %d, outside "
                            "its %d values",
                            p, k->name, CINT(c, k), n);
    }
    if ((c->n_mean == 0) != (c->n_std == 0))
        return cl_error(CL_ERR_CONFIG,
                        "%s: mean and std must be given together (mean has "
                        "%d values, std %d)",
                        p, c->n_mean, c->n_std);
    /* One value serves every channel, else one per channel. */
    char want[32];
    if (c->in_channels == 1)
        snprintf(want, sizeof want, "1 value");
    else
        snprintf(want, sizeof want, "1 or %d values", c->in_channels);
    if (c->n_mean > 1 && c->n_mean != c->in_channels)
        return cl_error(CL_ERR_CONFIG,
                        "%s: mean has %d values for in_channels %d (give %s)",
                        p, c->n_mean, c->in_channels, want);
    if (c->n_std > 1 && c->n_std != c->in_channels)
        return cl_error(CL_ERR_CONFIG,
                        "%s: std has %d values for in_channels %d (give %s)", p,
                        c->n_std, c->in_channels, want);
    if (c->n_color_jitter == 2)
        return cl_error(CL_ERR_CONFIG,
                        "%s: color_jitter takes 1 value (all three) or 3 "
                        "(brightness, contrast, saturation), not 2",
                        p);
    if (c->scale[0] > c->scale[1])
        return cl_error(CL_ERR_CONFIG, "%s: scale [%g, %g] is not increasing",
                        p, c->scale[0], c->scale[1]);
    if (c->ratio[0] > c->ratio[1])
        return cl_error(CL_ERR_CONFIG, "%s: ratio [%g, %g] is not increasing",
                        p, c->ratio[0], c->ratio[1]);
    if (c->scheduler == CL_CFG_SCHED_MULTI_STEP && c->n_milestones == 0)
        return cl_error(CL_ERR_CONFIG,
                        "%s: scheduler multi_step needs milestones (e.g. "
                        "[30, 60, 80])",
                        p);
    for (int i = 1; i < c->n_milestones; i++)
        if (c->milestones[i] <= c->milestones[i - 1])
            return cl_error(CL_ERR_CONFIG,
                            "%s: milestones must increase (%d after %d)", p,
                            c->milestones[i], c->milestones[i - 1]);
    if (c->embedding_weight_decay < 0 && c->embedding_weight_decay != -1)
        return cl_error(CL_ERR_CONFIG,
                        "%s: embedding_weight_decay %g is neither -1 (as "
                        "filter_bias_and_bn says) nor a decay in [0, 1)",
                        p, c->embedding_weight_decay);
    if (c->min_lr > c->lr)
        return cl_error(CL_ERR_CONFIG, "%s: min_lr %g is above lr %g", p,
                        c->min_lr, c->lr);
    /* The schedule's own check (train/lr.c) would say this only once the
     * data has loaded, and in its field names. */
    if (c->warmup_epochs > c->epoch_size)
        return cl_error(CL_ERR_CONFIG,
                        "%s: warmup_epochs %d is longer than the run "
                        "(epoch_size %d): lower warmup_epochs or raise "
                        "epoch_size",
                        p, c->warmup_epochs, c->epoch_size);
    if (c->scheduler == CL_CFG_SCHED_COSINE_DECAY && c->decay_epochs == 0 &&
        c->warmup_epochs == c->epoch_size)
        return cl_error(CL_ERR_CONFIG,
                        "%s: warmup_epochs %d takes the whole run (epoch_size "
                        "%d) and leaves cosine_decay no epoch: lower "
                        "warmup_epochs or raise epoch_size",
                        p, c->warmup_epochs, c->epoch_size);
    if (c->nesterov && c->opt != CL_CFG_OPT_ADAMW && c->momentum == 0)
        return cl_error(CL_ERR_CONFIG, "%s: nesterov needs momentum > 0", p);
    if (c->nesterov && c->opt == CL_CFG_OPT_ADAMW)
        return cl_error(CL_ERR_CONFIG,
                        "%s: nesterov applies to momentum/sgd, "
                        "not adamw",
                        p);
    if (c->data_dir[0] == '\0' && c->dataset != CL_CFG_DATASET_FASHION_MNIST)
        return cl_error(CL_ERR_CONFIG, "%s: dataset %s needs data_dir", p,
                        cl_config_enum_name("dataset", c->dataset));
    if (c->train_split[0] == '\0')
        return cl_error(CL_ERR_CONFIG, "%s: train_split is empty", p);
    if (c->class_indexing[0] && c->dataset != CL_CFG_DATASET_IMAGEFOLDER)
        return cl_error(CL_ERR_CONFIG,
                        "%s: class_indexing applies to imagefolder only", p);
    return CL_OK;
}

/* ---- YAML ---- */

typedef struct yload {
    yaml_parser_t parser;
    yaml_event_t ev;
    int have_ev;
    const char *name;
} yload;

static cl_status ynext(yload *y)
{
    if (y->have_ev)
        yaml_event_delete(&y->ev);
    y->have_ev = 0;
    if (!yaml_parser_parse(&y->parser, &y->ev)) {
        const yaml_parser_t *p = &y->parser;
        return cl_error(CL_ERR_CONFIG, "%s:%zu:%zu: YAML error: %s%s%s",
                        y->name, p->problem_mark.line + 1,
                        p->problem_mark.column + 1,
                        p->problem ? p->problem : "malformed input",
                        p->context ? " " : "", p->context ? p->context : "");
    }
    y->have_ev = 1;
    return CL_OK;
}

static size_t yline(const yload *y)
{
    return y->ev.start_mark.line + 1;
}

static const char *ev_what(yaml_event_type_t t)
{
    switch (t) {
    case YAML_SEQUENCE_START_EVENT:
        return "a list";
    case YAML_MAPPING_START_EVENT:
        return "a mapping";
    case YAML_ALIAS_EVENT:
        return "an alias (*anchor), not supported";
    default:
        return "something else";
    }
}

/* The value event is current; applies it to k. */
static cl_status yvalue(yload *y, cl_config *c, const key *k, const char *loc)
{
    char d[200];
    int is_list = k->type == T_FLOATS || k->type == T_INTS;
    if (y->ev.type == YAML_SCALAR_EVENT) {
        const char *v = (const char *)y->ev.data.scalar.value;
        int quoted = y->ev.data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
        if (!is_list)
            return set_scalar(c, k, v, quoted, loc);
        const char *one[1] = {v};
        return set_list(c, k, one, 1, loc);
    }
    if (y->ev.type == YAML_SEQUENCE_START_EVENT && is_list) {
        char items[MAX_ITEMS][ITEM_LEN];
        const char *ptrs[MAX_ITEMS];
        int n = 0;
        for (;;) {
            CL_TRY(ynext(y));
            if (y->ev.type == YAML_SEQUENCE_END_EVENT)
                break;
            if (y->ev.type != YAML_SCALAR_EVENT) {
                describe(d, sizeof d, k);
                return cl_error(CL_ERR_CONFIG,
                                "%s:%zu: key '%s' expects %s, found %s inside "
                                "the list",
                                y->name, yline(y), k->name, d,
                                ev_what(y->ev.type));
            }
            if (n < MAX_ITEMS) {
                const char *v = (const char *)y->ev.data.scalar.value;
                snprintf(items[n], ITEM_LEN, "%s", v);
                ptrs[n] = items[n];
            }
            n++;
        }
        return set_list(c, k, ptrs, n, loc);
    }
    /* A list or mapping where a scalar belongs: read to its end first, so
     * a syntax error inside it (`lr: [0.1` unclosed) is reported as such
     * rather than as the type mismatch. */
    yaml_event_type_t what = y->ev.type;
    int depth =
        what == YAML_SEQUENCE_START_EVENT || what == YAML_MAPPING_START_EVENT;
    while (depth > 0) {
        CL_TRY(ynext(y));
        if (y->ev.type == YAML_SEQUENCE_START_EVENT ||
            y->ev.type == YAML_MAPPING_START_EVENT)
            depth++;
        else if (y->ev.type == YAML_SEQUENCE_END_EVENT ||
                 y->ev.type == YAML_MAPPING_END_EVENT)
            depth--;
    }
    describe(d, sizeof d, k);
    return cl_error(CL_ERR_CONFIG, "%s: key '%s' expects %s, found %s", loc,
                    k->name, d, ev_what(what));
}

static cl_status yload_doc(yload *y, cl_config *c)
{
    int first_line[CL__CFG_MAX_ROWS] = {0};
    char loc[600];
    CL_TRY(ynext(y)); /* stream start */
    CL_TRY(ynext(y));
    if (y->ev.type == YAML_STREAM_END_EVENT)
        return CL_OK; /* an empty file changes nothing */
    CL_TRY(ynext(y)); /* after the document start */
    if (y->ev.type == YAML_SCALAR_EVENT &&
        y->ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
        y->ev.data.scalar.length == 0) {
        /* A document with nothing in it. */
    } else if (y->ev.type != YAML_MAPPING_START_EVENT) {
        return cl_error(CL_ERR_CONFIG,
                        "%s:%zu: the top level must be a mapping of keys "
                        "(key: value lines), found %s",
                        y->name, yline(y),
                        y->ev.type == YAML_SCALAR_EVENT ? "a scalar"
                                                        : ev_what(y->ev.type));
    } else {
        for (;;) {
            CL_TRY(ynext(y));
            if (y->ev.type == YAML_MAPPING_END_EVENT)
                break;
            size_t line = yline(y);
            snprintf(loc, sizeof loc, "%s:%zu", y->name, line);
            if (y->ev.type != YAML_SCALAR_EVENT)
                return cl_error(CL_ERR_CONFIG,
                                "%s: a key must be a plain name, found %s", loc,
                                ev_what(y->ev.type));
            char name[96];
            snprintf(name, sizeof name, "%s",
                     (const char *)y->ev.data.scalar.value);
            const key *k = find_key(name);
            if (!k)
                return unknown_key(loc, name);
            int idx = (int)(k - keys);
            if (first_line[idx])
                return cl_error(CL_ERR_CONFIG,
                                "%s: key '%s' is given twice (first at line "
                                "%d)",
                                loc, k->name, first_line[idx]);
            first_line[idx] = (int)line;
            CL_TRY(ynext(y));
            snprintf(loc, sizeof loc, "%s:%zu", y->name, yline(y));
            CL_TRY(yvalue(y, c, k, loc));
        }
    }
    CL_TRY(ynext(y)); /* document end */
    CL_TRY(ynext(y));
    if (y->ev.type != YAML_STREAM_END_EVENT)
        return cl_error(CL_ERR_CONFIG,
                        "%s:%zu: more than one YAML document (one recipe per "
                        "file)",
                        y->name, yline(y));
    return CL_OK;
}

static cl_status load_text(cl_config *c, const char *text, size_t len,
                           const char *name, int check)
{
    yload y;
    memset(&y, 0, sizeof y);
    y.name = name;
    if (!yaml_parser_initialize(&y.parser))
        return cl_error(CL_ERR_NOMEM, "%s: cannot start the YAML parser", name);
    yaml_parser_set_input_string(&y.parser, (const unsigned char *)text, len);
    cl_status s = yload_doc(&y, c);
    if (y.have_ev)
        yaml_event_delete(&y.ev);
    yaml_parser_delete(&y.parser);
    if (s == CL_OK && check) {
        s = cl_config_check(c);
        if (s != CL_OK) {
            /* "config: x" reads "recipe.yaml: x". */
            const char *msg = cl_last_error();
            char tail[1024];
            snprintf(tail, sizeof tail, "%s",
                     strncmp(msg, "config: ", 8) == 0 ? msg + 8 : msg);
            cl_error(s, "%s: %s", name, tail);
        }
    }
    return s;
}

cl_status cl_config_load_yaml_text(cl_config *c, const char *text, size_t len,
                                   const char *name)
{
    return load_text(c, text, len, name, 1);
}

cl_status cl_config_merge_yaml_text(cl_config *c, const char *text, size_t len,
                                    const char *name)
{
    return load_text(c, text, len, name, 0);
}

static cl_status load_file(cl_config *c, const char *path, int check)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cl_error(CL_ERR_IO, "%s: cannot open: %s", path,
                        strerror(errno));
    cl_strbuf b;
    cl_strbuf_init(&b);
    char chunk[4096];
    size_t n;
    cl_status s = CL_OK;
    while (s == CL_OK && (n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (b.len + n > (1u << 20))
            s = cl_error(CL_ERR_LIMIT, "%s: larger than 1 MB, not a recipe",
                         path);
        else
            s = cl_strbuf_add(&b, chunk, n);
    }
    if (s == CL_OK && ferror(f))
        s = cl_error(CL_ERR_IO, "%s: read error", path);
    fclose(f);
    if (s == CL_OK)
        s = load_text(c, cl_strbuf_str(&b), b.len, path, check);
    cl_strbuf_free(&b);
    return s;
}

cl_status cl_config_load_yaml(cl_config *c, const char *path)
{
    return load_file(c, path, 1);
}

cl_status cl_config_merge_yaml(cl_config *c, const char *path)
{
    return load_file(c, path, 0);
}

/* ---- writing ---- */

static void add_value(cl_strbuf *b, const cl_config *c, const key *k)
{
    char num[48];
    switch (k->type) {
    case T_INT:
        cl_strbuf_addf(b, "%d", CINT(c, k));
        return;
    case T_FLOAT:
        fmt_num(num, sizeof num, *CDBL(c, k));
        cl_strbuf_adds(b, num);
        return;
    case T_BOOL:
        cl_strbuf_adds(b, CINT(c, k) ? "true" : "false");
        return;
    case T_STR: {
        /* A JSON string literal is a YAML double-quoted scalar. */
        const char *s = CSTR(c, k);
        cl_strbuf_add_json_str(b, s, strlen(s));
        return;
    }
    case T_ENUM:
        cl_strbuf_adds(b, k->values[CINT(c, k)]);
        return;
    case T_FLOATS:
    case T_INTS:
        cl_strbuf_addc(b, '[');
        for (int i = 0; i < CCNT(c, k); i++) {
            if (i)
                cl_strbuf_adds(b, ", ");
            if (k->type == T_INTS) {
                cl_strbuf_addf(b, "%d", int_at((cl_config *)c, k)[i]);
            } else {
                fmt_num(num, sizeof num, CDBL(c, k)[i]);
                cl_strbuf_adds(b, num);
            }
        }
        cl_strbuf_addc(b, ']');
        return;
    }
}

cl_status cl_config_format_yaml(const cl_config *c, cl_strbuf *out)
{
    cl_strbuf_addf(out,
                   "# classic %s: the fully resolved configuration "
                   "(every key).\n",
                   cl_version());
    for (int i = 0; i < cl__config_nkeys; i++) {
        const key *k = &keys[i];
        if (!k->name) {
            cl_strbuf_addf(out, "%s# %s\n", i ? "\n" : "", k->help);
            continue;
        }
        cl_strbuf_addf(out, "%s: ", k->name);
        add_value(out, c, k);
        cl_strbuf_addc(out, '\n');
    }
    return out->failed ? CL_ERR_NOMEM : CL_OK;
}

cl_status cl_config_write_yaml(const cl_config *c, FILE *f)
{
    cl_strbuf b;
    cl_strbuf_init(&b);
    cl_status s = cl_config_format_yaml(c, &b);
    if (s == CL_OK && (fwrite(b.data, 1, b.len, f) != b.len || fflush(f)))
        s = cl_error(CL_ERR_IO, "writing the resolved config failed: %s",
                     strerror(errno));
    cl_strbuf_free(&b);
    return s;
}

/* text as lines of at most 80 columns, the first after `first` (the key's
 * name column, 25 wide), every other indented as far, broken at spaces (a
 * word longer than a line stays whole; \x01 is a space that holds its two
 * sides together). */
static void print_wrapped(FILE *f, const char *first, const char *text)
{
    enum { WIDTH = 80, INDENT = 25 };
    int col = fprintf(f, "%s", first), fresh = 1;
    const char *p = text;
    while (*p) {
        size_t w = strcspn(p, " ");
        if (!fresh && col + 1 + (int)w > WIDTH) {
            col = fprintf(f, "\n%*s", INDENT, "") - 1;
            fresh = 1;
        }
        if (!fresh)
            col += fprintf(f, " ");
        for (size_t j = 0; j < w; j++) /* \x01: a space not to break at */
            fputc(p[j] == '\x01' ? ' ' : p[j], f);
        col += (int)w;
        fresh = 0;
        p += w;
        while (*p == ' ')
            p++;
    }
    fputc('\n', f);
}

void cl_config_print_help(FILE *f)
{
    char d[200], line[600], name[40];
    fprintf(f, "Configuration keys (YAML recipe `key: value`, or `--key "
               "value` on the\ncommand line):\n");
    for (int i = 0; i < cl__config_nkeys; i++) {
        const key *k = &keys[i];
        if (!k->name) {
            fprintf(f, "\n%s:\n", k->help);
            continue;
        }
        describe(d, sizeof d, k);
        snprintf(name, sizeof name, "  %-22s ", k->name);
        snprintf(line, sizeof line, "%s (default\x01%s%s%s)", d,
                 k->type == T_STR ? "\"" : "", k->def,
                 k->type == T_STR ? "\"" : "");
        print_wrapped(f, name, line);
        snprintf(line, sizeof line, "%s%s%s%s", k->help,
                 k->alias ? " [mindcv:\x01" : "", k->alias ? k->alias : "",
                 k->alias ? "]" : "");
        print_wrapped(f, "                         ", line);
    }
}

/* ---- inspection ---- */

static int same_value(const cl_config *a, const cl_config *b, const key *k)
{
    switch (k->type) {
    case T_INT:
    case T_BOOL:
    case T_ENUM:
        return CINT(a, k) == CINT(b, k);
    case T_FLOAT:
        return *CDBL(a, k) == *CDBL(b, k);
    case T_STR:
        return strcmp(CSTR(a, k), CSTR(b, k)) == 0;
    case T_FLOATS:
    case T_INTS:
        if (CCNT(a, k) != CCNT(b, k))
            return 0;
        for (int i = 0; i < CCNT(a, k); i++) {
            if (k->type == T_INTS ? int_at((cl_config *)a, k)[i] !=
                                        int_at((cl_config *)b, k)[i]
                                  : CDBL(a, k)[i] != CDBL(b, k)[i])
                return 0;
        }
        return 1;
    }
    return 0;
}

const char *cl_config_diff(const cl_config *a, const cl_config *b)
{
    for (int i = 0; i < cl__config_nkeys; i++)
        if (keys[i].name && !same_value(a, b, &keys[i]))
            return keys[i].name;
    return NULL;
}

cl_status cl_config_get(const cl_config *c, const char *name, char *buf,
                        size_t n)
{
    const key *k = find_key(name);
    if (!k)
        return unknown_key("config", name);
    cl_strbuf b;
    cl_strbuf_init(&b);
    add_value(&b, c, k);
    if (b.failed) {
        cl_strbuf_free(&b);
        return CL_ERR_NOMEM;
    }
    snprintf(buf, n, "%s", cl_strbuf_str(&b));
    cl_strbuf_free(&b);
    return CL_OK;
}

const char *cl_config_enum_name(const char *name, int v)
{
    const key *k = find_key(name);
    if (!k || k->type != T_ENUM || v < 0)
        return NULL;
    for (int i = 0; k->values[i]; i++)
        if (i == v)
            return k->values[i];
    return NULL;
}

int cl_config_key_count(void)
{
    int n = 0;
    for (int i = 0; i < cl__config_nkeys; i++)
        n += keys[i].name != NULL;
    return n;
}

const char *cl_config_key_name(int i)
{
    for (int r = 0; r < cl__config_nkeys; r++)
        if (keys[r].name && i-- == 0)
            return keys[r].name;
    return NULL;
}

const char *cl_config_key_group(int i)
{
    const char *group = NULL;
    for (int r = 0; r < cl__config_nkeys; r++) {
        if (!keys[r].name)
            group = keys[r].help;
        else if (i-- == 0)
            return group;
    }
    return NULL;
}
