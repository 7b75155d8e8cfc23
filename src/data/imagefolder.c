/* ImageFolder reader: root/<class>/<image>; only relative paths are kept
 * in memory (ImageNet-1K's 1.28M files fit in ~60 MB), images decode
 * lazily in the loader's workers. */
/* d_type and DT_* of readdir are a glibc/BSD extension to POSIX. */
#define _DEFAULT_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/mem.h"
#include "data/data_internal.h"

/* A growable array of strings in one pool. */
typedef struct strlist {
    char *pool;
    size_t len, cap;
    size_t *off;
    size_t n, ncap;
} strlist;

static cl_status sl_push(strlist *l, const char *a, const char *b)
{
    size_t la = strlen(a), lb = b ? strlen(b) + 1 : 0;
    size_t need = la + lb + 1;
    if (l->len + need > l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4096;
        while (nc < l->len + need)
            nc *= 2;
        char *p = cl_alloc(nc, "path pool");
        if (!p)
            return CL_ERR_NOMEM;
        if (l->len)
            memcpy(p, l->pool, l->len);
        cl_free(l->pool);
        l->pool = p;
        l->cap = nc;
    }
    if (l->n == l->ncap) {
        size_t nc = l->ncap ? l->ncap * 2 : 256;
        size_t *o = cl_alloc(nc * sizeof(size_t), "path offsets");
        if (!o)
            return CL_ERR_NOMEM;
        if (l->n)
            memcpy(o, l->off, l->n * sizeof(size_t));
        cl_free(l->off);
        l->off = o;
        l->ncap = nc;
    }
    l->off[l->n++] = l->len;
    memcpy(l->pool + l->len, a, la);
    if (b) {
        l->pool[l->len + la] = '/';
        memcpy(l->pool + l->len + la + 1, b, lb - 1);
    }
    l->pool[l->len + need - 1] = '\0';
    l->len += need;
    return CL_OK;
}

static void sl_free(strlist *l)
{
    cl_free(l->pool);
    cl_free(l->off);
    memset(l, 0, sizeof *l);
}

static const char *sl_get(const strlist *l, size_t i)
{
    return l->pool + l->off[i];
}

/* qsort over offsets needs the pool: sort an index array instead. */
typedef struct sort_item {
    const char *s;
    size_t i;
} sort_item;

static int cmp_item(const void *a, const void *b)
{
    return strcmp(((const sort_item *)a)->s, ((const sort_item *)b)->s);
}

static cl_status sl_sort_from(strlist *l, size_t from)
{
    size_t n = l->n - from;
    if (n < 2)
        return CL_OK;
    sort_item *it = cl_alloc(n * sizeof *it, "sort");
    if (!it)
        return CL_ERR_NOMEM;
    for (size_t k = 0; k < n; k++) {
        it[k].s = sl_get(l, from + k);
        it[k].i = l->off[from + k];
    }
    qsort(it, n, sizeof *it, cmp_item);
    for (size_t k = 0; k < n; k++)
        l->off[from + k] = it[k].i;
    cl_free(it);
    return CL_OK;
}

static int is_image_name(const char *n)
{
    const char *dot = strrchr(n, '.');
    if (!dot)
        return 0;
    char ext[8];
    size_t k = 0;
    for (const char *p = dot + 1; *p && k < sizeof ext - 1; p++)
        ext[k++] = (char)tolower((unsigned char)*p);
    ext[k] = '\0';
    if (dot[1 + k] != '\0')
        return 0;
    return strcmp(ext, "jpg") == 0 || strcmp(ext, "jpeg") == 0 ||
           strcmp(ext, "png") == 0;
}

/* 1 for a directory, 0 for anything else (dangling links included). */
static int entry_is_dir(const char *dir, const struct dirent *e)
{
    if (e->d_type == DT_DIR)
        return 1;
    if (e->d_type != DT_UNKNOWN && e->d_type != DT_LNK)
        return 0;
    char p[4096];
    if (cl__path_join(p, sizeof p, dir, e->d_name) != CL_OK)
        return 0;
    return cl__path_kind(p) == 1;
}

/* The sorted sub-folders of root. */
static cl_status list_classes(const char *root, strlist *out)
{
    DIR *d = opendir(root);
    if (!d)
        return cl_error(CL_ERR_IO, "%s: cannot open folder: %s", root,
                        strerror(errno));
    struct dirent *e;
    cl_status s = CL_OK;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (!entry_is_dir(root, e))
            continue;
        s = sl_push(out, e->d_name, NULL);
        if (s != CL_OK)
            break;
    }
    closedir(d);
    if (s == CL_OK)
        s = sl_sort_from(out, 0);
    return s;
}

/* A class_indexing line holds one folder name and an index: anything
 * longer is not such a line (NAME_MAX is 255 on common file systems). */
enum { MAPPING_LINE_MAX = 4096 };

/* The `name index` lines of a class_indexing file; a file without any is
 * an error (an empty mapping would silently mean "sorted folder order"). */
static cl_status read_mapping(const char *path, strlist *names, int **idx,
                              int *n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return cl_error(CL_ERR_IO, "%s: cannot open: %s", path,
                        strerror(errno));
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t got;
    int cap = 0, cnt = 0, lineno = 0;
    int *ix = NULL;
    cl_status s = CL_OK;
    errno = 0;
    while ((got = getline(&line, &line_cap, f)) >= 0) {
        lineno++;
        size_t L = (size_t)got;
        if (L > MAPPING_LINE_MAX) {
            s = cl_error(CL_ERR_FORMAT,
                         "%s:%d: line of %zu bytes, longer than the %d a "
                         "`name index` line may have (is this a "
                         "class_indexing file?)",
                         path, lineno, L, MAPPING_LINE_MAX);
            break;
        }
        if (memchr(line, '\0', L)) {
            s = cl_error(CL_ERR_FORMAT,
                         "%s:%d: a NUL byte in the line (not a text file)",
                         path, lineno);
            break;
        }
        while (L > 0 && isspace((unsigned char)line[L - 1]))
            line[--L] = '\0';
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0' || *p == '#')
            continue;
        char *sp = strrchr(p, ' ');
        char *tab = strrchr(p, '\t');
        if (!sp || (tab && tab > sp))
            sp = tab;
        char *end = NULL;
        long v = sp ? strtol(sp + 1, &end, 10) : 0;
        if (!sp || !end || *end != '\0' || end == sp + 1 || v < 0 ||
            v > 1000000) {
            s = cl_error(CL_ERR_FORMAT,
                         "%s:%d: expected `name index` with 0 <= index <= "
                         "1000000, found '%.200s'",
                         path, lineno, p);
            break;
        }
        *sp = '\0';
        size_t nl = strlen(p);
        while (nl > 0 && isspace((unsigned char)p[nl - 1]))
            p[--nl] = '\0';
        if (cnt == cap) {
            int nc = cap ? cap * 2 : 64;
            int *ni = cl_alloc((size_t)nc * sizeof(int), "class indexing");
            if (!ni) {
                s = CL_ERR_NOMEM;
                break;
            }
            if (cnt)
                memcpy(ni, ix, (size_t)cnt * sizeof(int));
            cl_free(ix);
            ix = ni;
            cap = nc;
        }
        ix[cnt++] = (int)v;
        s = sl_push(names, p, NULL);
        if (s != CL_OK)
            break;
    }
    if (s == CL_OK && ferror(f))
        s = cl_error(CL_ERR_IO, "%s: read error: %s", path, strerror(errno));
    if (s == CL_OK && cnt == 0)
        s = cl_error(CL_ERR_FORMAT,
                     "%s: no `name index` lines in it (empty or only "
                     "comments); give one line per class folder, or no "
                     "class_indexing for the sorted folder order",
                     path);
    free(line);
    fclose(f);
    if (s != CL_OK) {
        cl_free(ix);
        return s;
    }
    *idx = ix;
    *n = cnt;
    return CL_OK;
}

/* Appends the sorted image files of root/cls; counts the others. */
static cl_status list_images(const char *root, const char *cls, strlist *files,
                             int64_t *ignored, size_t *added)
{
    char dir[4096];
    CL_TRY(cl__path_join(dir, sizeof dir, root, cls));
    DIR *d = opendir(dir);
    if (!d)
        return cl_error(CL_ERR_IO, "%s: cannot open class folder: %s", dir,
                        strerror(errno));
    size_t from = files->n;
    struct dirent *e;
    cl_status s = CL_OK;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (!is_image_name(e->d_name) || entry_is_dir(dir, e)) {
            (*ignored)++;
            continue;
        }
        s = sl_push(files, cls, e->d_name);
        if (s != CL_OK)
            break;
    }
    closedir(d);
    if (s == CL_OK)
        s = sl_sort_from(files, from);
    *added = files->n - from;
    return s;
}

/* 1 if root/name is a folder holding sub-folders and no image: the
 * root of splits (root/train/<class>/...) rather than a class folder. */
static int is_split_folder(const char *root, const char *name)
{
    char dir[4096];
    if (cl__path_join(dir, sizeof dir, root, name) != CL_OK ||
        cl__path_kind(dir) != 1)
        return 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int folders = 0, images = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (entry_is_dir(dir, e))
            folders++;
        else if (is_image_name(e->d_name))
            images++;
    }
    closedir(d);
    return folders > 0 && images == 0;
}

cl_status cl_imagefolder_split(const char *root, cl_data_usage usage, char *buf,
                               size_t n, const char **split)
{
    static const char *const train[] = {"train", NULL};
    static const char *const val[] = {"val", "validation", "test", NULL};
    *split = NULL;
    if (!root || cl__path_kind(root) != 1 ||
        (!is_split_folder(root, "train") && !is_split_folder(root, "val") &&
         !is_split_folder(root, "test")))
        return CL_OK;
    if (usage == CL_USAGE_ALL)
        return cl_error(CL_ERR_ARG,
                        "%s holds splits (train/, val/ or test/ with class "
                        "folders inside): choose one (usage train or val), "
                        "or give the split's folder",
                        root);
    const char *const *names = usage == CL_USAGE_TRAIN ? train : val;
    for (int i = 0; names[i]; i++) {
        if (!is_split_folder(root, names[i]))
            continue;
        CL_TRY(cl__path_join(buf, n, root, names[i]));
        *split = names[i];
        return CL_OK;
    }
    return cl_error(CL_ERR_FORMAT,
                    "%s holds splits but no %s folder with class folders "
                    "inside: give the split's folder itself",
                    root, usage == CL_USAGE_TRAIN ? "train/" : "val/ or test/");
}

cl_status cl__imagefolder_open(cl_dataset *ds, const cl_dataset_spec *spec)
{
    strlist folders = {0}, mapnames = {0}, files = {0};
    int *mapidx = NULL;
    int nmap = 0;
    int32_t *labs = NULL;
    size_t labcap = 0;
    cl_status s = CL_OK;
    const char *root = spec->path;
    if (!root || cl__path_kind(root) != 1)
        return cl_error(CL_ERR_IO,
                        "%s: not a folder (imagefolder wants "
                        "root/<class>/<image>)",
                        root ? root : "(null)");
    s = list_classes(root, &folders);
    if (s != CL_OK)
        goto done;
    if (folders.n == 0) {
        s = cl_error(CL_ERR_FORMAT, "%s: no class folders in it", root);
        goto done;
    }
    /* The class order: sorted folder names, or the given mapping. */
    int K = (int)folders.n;
    if (spec->class_names && spec->num_class_names > 0) {
        for (int i = 0; i < spec->num_class_names && s == CL_OK; i++)
            s = sl_push(&mapnames, spec->class_names[i], NULL);
        if (s != CL_OK)
            goto done;
        nmap = spec->num_class_names;
        mapidx = cl_alloc((size_t)nmap * sizeof(int), "class indexing");
        if (!mapidx) {
            s = CL_ERR_NOMEM;
            goto done;
        }
        for (int i = 0; i < nmap; i++)
            mapidx[i] = spec->class_indices ? spec->class_indices[i] : i;
    } else if (spec->class_indexing && spec->class_indexing[0]) {
        s = read_mapping(spec->class_indexing, &mapnames, &mapidx, &nmap);
        if (s != CL_OK)
            goto done;
    }
    const char *mapsrc = spec->class_indexing && !spec->class_names
                             ? spec->class_indexing
                             : "class_indexing";
    if (mapidx) {
        if (nmap == 0) {
            s = cl_error(CL_ERR_FORMAT, "%s: no classes in it", mapsrc);
            goto done;
        }
        K = nmap;
    }
    s = cl__dataset_alloc_names(ds, K);
    if (s != CL_OK)
        goto done;
    if (mapidx) {
        for (int i = 0; i < nmap; i++) {
            int v = mapidx[i];
            const char *nm = sl_get(&mapnames, (size_t)i);
            if (v < 0 || v >= K) {
                s = cl_error(CL_ERR_FORMAT,
                             "%s: class '%.200s' has index %d, expected 0..%d "
                             "(one index per class)",
                             mapsrc, nm, v, K - 1);
                goto done;
            }
            if (ds->class_names[v]) {
                s = cl_error(CL_ERR_FORMAT,
                             "%s: index %d given to both '%.200s' and '%.200s'",
                             mapsrc, v, ds->class_names[v], nm);
                goto done;
            }
            int found = 0;
            for (size_t f = 0; f < folders.n && !found; f++)
                found = strcmp(sl_get(&folders, f), nm) == 0;
            if (!found) {
                s = cl_error(CL_ERR_FORMAT,
                             "%s: class '%.200s' has no folder %s/%.200s",
                             mapsrc, nm, root, nm);
                goto done;
            }
            ds->class_names[v] = cl__strdup(nm, "class name");
            if (!ds->class_names[v]) {
                s = CL_ERR_NOMEM;
                goto done;
            }
        }
        for (size_t f = 0; f < folders.n; f++) {
            int found = 0;
            for (int k = 0; k < K && !found; k++)
                found = strcmp(ds->class_names[k], sl_get(&folders, f)) == 0;
            if (!found) {
                s = cl_error(CL_ERR_FORMAT,
                             "%s/%s: a class folder missing from %s", root,
                             sl_get(&folders, f), mapsrc);
                goto done;
            }
        }
    } else {
        for (int k = 0; k < K; k++) {
            ds->class_names[k] =
                cl__strdup(sl_get(&folders, (size_t)k), "class name");
            if (!ds->class_names[k]) {
                s = CL_ERR_NOMEM;
                goto done;
            }
        }
    }
    for (int k = 0; k < K; k++) {
        size_t added = 0;
        s = list_images(root, ds->class_names[k], &files, &ds->ignored, &added);
        if (s != CL_OK)
            goto done;
        if (added == 0) {
            if (is_split_folder(root, ds->class_names[k]))
                s = cl_error(CL_ERR_FORMAT,
                             "%s/%s: class folder has no images, only "
                             "folders: %s looks like a root of splits; give "
                             "the split's folder (%s/%s) or, in training, "
                             "data_dir %s with train_split/val_split",
                             root, ds->class_names[k], root, root,
                             ds->class_names[k], root);
            else
                s = cl_error(CL_ERR_FORMAT,
                             "%s/%s: class folder has no images (.jpg, "
                             ".jpeg, .png)",
                             root, ds->class_names[k]);
            goto done;
        }
        if (files.n > labcap) {
            size_t nc = labcap ? labcap * 2 : 1024;
            while (nc < files.n)
                nc *= 2;
            int32_t *nl = cl_alloc(nc * sizeof(int32_t), "labels");
            if (!nl) {
                s = CL_ERR_NOMEM;
                goto done;
            }
            if (labcap)
                memcpy(nl, labs, (files.n - added) * sizeof(int32_t));
            cl_free(labs);
            labs = nl;
            labcap = nc;
        }
        for (size_t i = files.n - added; i < files.n; i++)
            labs[i] = k;
    }
    ds->format = "imagefolder";
    ds->count = (int64_t)files.n;
    ds->root = cl__strdup(root, "root");
    ds->path_off = cl_alloc(files.n * sizeof(int64_t), "path offsets");
    if (!ds->root || !ds->path_off) {
        s = CL_ERR_NOMEM;
        goto done;
    }
    for (size_t i = 0; i < files.n; i++)
        ds->path_off[i] = (int64_t)files.off[i];
    ds->pool = files.pool;
    files.pool = NULL;
    ds->labels = labs;
    labs = NULL;
done:
    sl_free(&folders);
    sl_free(&mapnames);
    sl_free(&files);
    cl_free(mapidx);
    cl_free(labs);
    return s;
}
