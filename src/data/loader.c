/* The batch loader: per-epoch shuffle, sharding, worker threads filling a
 * ring of batch slots ahead of the consumer, MixUp/CutMix, wait timing.
 *
 * Every sample's augmentation draws from its own RNG stream keyed by
 * (seed, epoch, dataset index) and every batch's mixing from one keyed by
 * (seed, epoch, shard batch), so a batch's bytes do not depend on which
 * worker made it or how many there are. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "core/timer.h"
#include "data/data.h"

enum { PURPOSE_SHUFFLE = 1, PURPOSE_AUG = 2, PURPOSE_MIX = 3 };
enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY };

typedef struct slot {
    float *x;         /* x: (B, C, H, W) */
    int32_t *labels;  /* labels: (B) */
    float *targets;   /* targets: (B, K) or NULL */
    int64_t *indices; /* indices: (B) */
    int n;
    int64_t batch;
    int state;
    cl_status err;
    int64_t skipped;
    char msg[512];
} slot;

/* What one producer thread owns. */
typedef struct worker {
    struct cl_loader *ld;
    cl_image img;
    cl_tf_scratch scratch;
    pthread_t thread;
    int started;
} worker;

struct cl_loader {
    cl_loader_opts o;
    int C, H, W, K;
    size_t sample_floats;
    int64_t n_total;   /* dataset size */
    int64_t per_shard; /* samples this shard yields per epoch */
    int64_t nbatches;
    int64_t *perm; /* perm: (n_total) global order of the current epoch */
    int hint;
    int64_t epoch;
    int64_t next_claim, next_deliver;
    int active, stop, inflight;
    int held; /* slot the consumer holds, -1 if none */
    slot *slots;
    int nslots;
    worker *workers;
    int nworkers; /* threads (0: the consumer fills batches itself) */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    int sync_ok;
    cl_loader_stats st;
};

/* The k-th sample (0-based) of this shard in the current epoch. */
static int64_t shard_sample(const cl_loader *ld, int64_t k)
{
    int64_t S = ld->o.num_shards;
    return ld->perm[ld->o.shard_id + k * S];
}

static void compute_sizes(cl_loader *ld)
{
    int64_t N = ld->n_total, S = ld->o.num_shards, k = ld->o.shard_id;
    int64_t B = ld->o.batch_size;
    if (ld->o.drop_remainder) {
        /* Equal counts on every shard so data-parallel ranks step in
         * lockstep; at most S-1 + S(B-1) samples of an epoch go unused. */
        ld->per_shard = N / S / B * B;
        ld->nbatches = ld->per_shard / B;
    } else {
        ld->per_shard = N > k ? (N - k + S - 1) / S : 0;
        ld->nbatches = (ld->per_shard + B - 1) / B;
    }
}

static void make_perm(const cl_loader *ld, int64_t epoch, int64_t *perm)
{
    int64_t N = ld->n_total;
    for (int64_t i = 0; i < N; i++)
        perm[i] = i;
    if (!ld->o.shuffle)
        return;
    cl_rng r;
    cl_rng_init(&r, ld->o.seed,
                cl_rng_stream_id((uint64_t)epoch, 0, PURPOSE_SHUFFLE));
    for (int64_t i = N - 1; i > 0; i--) {
        int64_t j =
            (int64_t)(i < UINT32_MAX ? cl_rng_below(&r, (uint32_t)(i + 1))
                                     : cl_rng_u64(&r) % (uint64_t)(i + 1));
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* Marsaglia-Tsang gamma variate, for Beta(a, a). */
static double gamma_draw(cl_rng *r, double a)
{
    if (a < 1) {
        double u = cl_rng_uniform_f64(r);
        return gamma_draw(r, a + 1) * pow(u > 0 ? u : 1e-300, 1.0 / a);
    }
    double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = cl_rng_normal(r), v = 1 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = cl_rng_uniform_f64(r);
        if (u < 1 - 0.0331 * x * x * x * x ||
            log(u > 0 ? u : 1e-300) < 0.5 * x * x + d * (1 - v + log(v)))
            return d * v;
    }
}

static double beta_draw(cl_rng *r, double a)
{
    double x = gamma_draw(r, a), y = gamma_draw(r, a);
    return x + y > 0 ? x / (x + y) : 0.5;
}

/* MixUp or CutMix between sample i and sample n-1-i (timm's "flip"
 * pairing), soft targets lam*y_i + (1-lam)*y_pair. */
static void mix_batch(const cl_loader *ld, slot *s)
{
    const cl_loader_opts *o = &ld->o;
    int n = s->n, K = ld->K;
    memset(s->targets, 0, (size_t)n * K * sizeof(float));
    cl_rng r;
    cl_rng_init(&r, o->seed,
                cl_rng_stream_id((uint64_t)ld->epoch,
                                 (uint64_t)s->batch * (uint64_t)o->num_shards +
                                     (uint64_t)o->shard_id,
                                 PURPOSE_MIX));
    double lam = 1;
    int cutmix = 0;
    if (n > 1 && cl_rng_uniform(&r) < o->mix_prob) {
        if (o->mixup_alpha > 0 && o->cutmix_alpha > 0)
            cutmix = cl_rng_uniform(&r) < 0.5f;
        else
            cutmix = o->cutmix_alpha > 0;
        lam = beta_draw(&r, cutmix ? o->cutmix_alpha : o->mixup_alpha);
    }
    size_t sf = ld->sample_floats;
    if (lam < 1 && !cutmix) {
        float l = (float)lam, m = (float)(1 - lam);
        for (int i = 0; i < n / 2; i++) {
            float *a = s->x + (size_t)i * sf;
            float *b = s->x + (size_t)(n - 1 - i) * sf;
            for (size_t k = 0; k < sf; k++) {
                float va = a[k], vb = b[k];
                a[k] = l * va + m * vb;
                b[k] = l * vb + m * va;
            }
        }
    } else if (lam < 1) {
        int H = ld->H, W = ld->W;
        double cut = sqrt(1 - lam);
        int ch = (int)(H * cut), cw = (int)(W * cut);
        int cy = (int)cl_rng_below(&r, (uint32_t)H);
        int cx = (int)cl_rng_below(&r, (uint32_t)W);
        int y1 = cy - ch / 2 < 0 ? 0 : cy - ch / 2;
        int y2 = cy + ch / 2 > H ? H : cy + ch / 2;
        int x1 = cx - cw / 2 < 0 ? 0 : cx - cw / 2;
        int x2 = cx + cw / 2 > W ? W : cx + cw / 2;
        for (int i = 0; i < n / 2; i++) {
            float *a = s->x + (size_t)i * sf;
            float *b = s->x + (size_t)(n - 1 - i) * sf;
            for (int c = 0; c < ld->C; c++)
                for (int y = y1; y < y2; y++)
                    for (int x = x1; x < x2; x++) {
                        size_t k = ((size_t)c * H + y) * W + x;
                        float t = a[k];
                        a[k] = b[k];
                        b[k] = t;
                    }
        }
        /* The box was clipped: lam is the area actually kept. */
        lam = 1 - (double)(y2 - y1) * (x2 - x1) / ((double)H * W);
    }
    for (int i = 0; i < n; i++) {
        float *t = s->targets + (size_t)i * K;
        int32_t ya = s->labels[i], yb = s->labels[n - 1 - i];
        if (ya >= 0 && ya < K)
            t[ya] += (float)lam;
        if (yb >= 0 && yb < K)
            t[yb] += (float)(1 - lam);
    }
}

/* Makes batch s->batch of the current epoch (runs unlocked). */
static void fill_slot(cl_loader *ld, worker *w, slot *s)
{
    const cl_loader_opts *o = &ld->o;
    int64_t B = o->batch_size;
    int64_t p0 = s->batch * B;
    int64_t p1 = p0 + B < ld->per_shard ? p0 + B : ld->per_shard;
    int skip = cl_dataset_bad_image_policy(o->dataset) == CL_BAD_IMAGE_SKIP;
    s->n = 0;
    s->skipped = 0;
    s->err = CL_OK;
    s->msg[0] = '\0';
    for (int64_t p = p0; p < p1; p++) {
        int64_t idx = shard_sample(ld, p);
        int32_t label = 0;
        cl_rng r;
        cl_rng_init(
            &r, o->seed,
            cl_rng_stream_id((uint64_t)ld->epoch, (uint64_t)idx, PURPOSE_AUG));
        cl_status st =
            cl_dataset_get(o->dataset, idx, ld->hint, &w->img, &label);
        if (st == CL_OK)
            st = cl_transforms_apply(o->tf, &w->img, &r, &w->scratch,
                                     s->x + (size_t)s->n * ld->sample_floats);
        if (st != CL_OK) {
            /* The message names the file; cl_last_error is this thread's. */
            snprintf(s->msg, sizeof s->msg, "%s", cl_last_error());
            if (skip && st != CL_ERR_NOMEM) {
                s->skipped++;
                continue;
            }
            s->err = st;
            if (st != CL_ERR_NOMEM) {
                size_t k = strlen(s->msg);
                snprintf(s->msg + k, sizeof s->msg - k,
                         " (on_bad_image: fail; `on_bad_image: skip` drops "
                         "unreadable images instead)");
            }
            return;
        }
        s->labels[s->n] = label;
        s->indices[s->n] = idx;
        s->n++;
    }
    if (s->n == 0 && p1 > p0) {
        /* An empty batch would read as the end of the epoch. */
        char last[sizeof s->msg];
        snprintf(last, sizeof last, "%s", s->msg);
        s->err = CL_ERR_FORMAT;
        snprintf(s->msg, sizeof s->msg,
                 "batch %lld of epoch %lld: all its %lld images are "
                 "unreadable (on_bad_image: skip); the last: %.300s",
                 (long long)s->batch, (long long)ld->epoch + 1,
                 (long long)(p1 - p0), last);
        return;
    }
    if (s->targets)
        mix_batch(ld, s);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    cl_loader *ld = w->ld;
    pthread_mutex_lock(&ld->mu);
    while (!ld->stop) {
        slot *s = NULL;
        if (ld->active && ld->next_claim < ld->nbatches) {
            slot *c = &ld->slots[ld->next_claim % ld->nslots];
            if (c->state == SLOT_FREE)
                s = c;
        }
        if (!s) {
            pthread_cond_wait(&ld->cv_work, &ld->mu);
            continue;
        }
        s->batch = ld->next_claim++;
        s->state = SLOT_FILLING;
        ld->inflight++;
        pthread_mutex_unlock(&ld->mu);
        fill_slot(ld, w, s);
        pthread_mutex_lock(&ld->mu);
        s->state = SLOT_READY;
        ld->inflight--;
        pthread_cond_broadcast(&ld->cv_done);
    }
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

cl_status cl_loader_create(cl_loader **out, const cl_loader_opts *opts)
{
    cl_status s = CL_OK;
    *out = NULL;
    cl_loader_opts o = *opts;
    if (!o.dataset || !o.tf)
        return cl_error(CL_ERR_ARG, "loader: dataset and transforms are "
                                    "required");
    if (o.num_shards <= 0)
        o.num_shards = 1;
    if (o.shard_id < 0 || o.shard_id >= o.num_shards)
        return cl_error(CL_ERR_CONFIG,
                        "loader shard_id %d: expected 0..%d (num_shards %d)",
                        o.shard_id, o.num_shards - 1, o.num_shards);
    if (o.batch_size < 1 || o.batch_size > (1 << 20))
        return cl_error(CL_ERR_CONFIG,
                        "loader batch_size %d: expected "
                        "1..2^20",
                        o.batch_size);
    if (o.workers < 0 || o.workers > 256)
        return cl_error(CL_ERR_CONFIG, "loader workers %d: expected 0..256",
                        o.workers);
    if (o.prefetch <= 0)
        o.prefetch = 2;
    if (o.prefetch > 64)
        return cl_error(CL_ERR_CONFIG, "loader prefetch %d: expected 1..64",
                        o.prefetch);
    int mix = o.mixup_alpha > 0 || o.cutmix_alpha > 0;
    if (!(o.mixup_alpha >= 0) || !(o.cutmix_alpha >= 0) ||
        !(o.mix_prob >= 0 && o.mix_prob <= 1))
        return cl_error(CL_ERR_CONFIG,
                        "loader mixup_alpha %g / cutmix_alpha %g / mix_prob "
                        "%g: expected alphas >= 0 and 0 <= prob <= 1",
                        o.mixup_alpha, o.cutmix_alpha, o.mix_prob);
    if (o.num_classes <= 0)
        o.num_classes = cl_dataset_num_classes(o.dataset);
    if (mix && o.num_classes <= 0)
        return cl_error(CL_ERR_CONFIG, "loader: soft targets need "
                                       "num_classes");
    if (cl_dataset_count(o.dataset) < 1)
        return cl_error(CL_ERR_ARG, "loader: the dataset is empty");

    cl_loader *ld = cl_alloc_zero(sizeof *ld, "loader");
    if (!ld)
        return CL_ERR_NOMEM;
    ld->o = o;
    ld->held = -1;
    ld->epoch = -1;
    const cl_transform_opts *to = cl_transforms_opts(o.tf);
    ld->C = to->out_c;
    ld->H = to->out_h;
    ld->W = to->out_w;
    ld->K = mix ? o.num_classes : 0;
    ld->hint = cl_transforms_decode_hint(o.tf);
    ld->sample_floats = (size_t)ld->C * ld->H * ld->W;
    ld->n_total = cl_dataset_count(o.dataset);
    if (o.limit > 0 && o.limit < ld->n_total)
        ld->n_total = o.limit;
    compute_sizes(ld);
    ld->perm = cl_alloc((size_t)ld->n_total * sizeof(int64_t), "loader "
                                                               "order");
    ld->nslots = (o.prefetch > o.workers ? o.prefetch : o.workers) + 1;
    if (o.workers == 0)
        ld->nslots = 1;
    ld->slots = cl_alloc_zero((size_t)ld->nslots * sizeof(slot), "slots");
    if (!ld->perm || !ld->slots) {
        s = CL_ERR_NOMEM;
        goto fail;
    }
    size_t xbytes;
    s = cl_mul_size(ld->sample_floats * sizeof(float), (size_t)o.batch_size,
                    &xbytes, "loader batch");
    if (s != CL_OK)
        goto fail;
    for (int i = 0; i < ld->nslots; i++) {
        slot *sl = &ld->slots[i];
        sl->x = cl_alloc(xbytes, "loader batch");
        sl->labels = cl_alloc((size_t)o.batch_size * 4, "loader labels");
        sl->indices = cl_alloc((size_t)o.batch_size * 8, "loader indices");
        if (mix)
            sl->targets =
                cl_alloc((size_t)o.batch_size * ld->K * 4, "loader targets");
        if (!sl->x || !sl->labels || !sl->indices || (mix && !sl->targets)) {
            s = CL_ERR_NOMEM;
            goto fail;
        }
    }
    int nw = o.workers > 0 ? o.workers : 1;
    ld->workers = cl_alloc_zero((size_t)nw * sizeof(worker), "workers");
    if (!ld->workers) {
        s = CL_ERR_NOMEM;
        goto fail;
    }
    for (int i = 0; i < nw; i++)
        ld->workers[i].ld = ld;
    if (pthread_mutex_init(&ld->mu, NULL) != 0) {
        s = cl_error(CL_ERR_NOMEM, "loader: cannot create a mutex");
        goto fail;
    }
    pthread_cond_init(&ld->cv_work, NULL);
    pthread_cond_init(&ld->cv_done, NULL);
    ld->sync_ok = 1;
    for (int i = 0; i < o.workers; i++) {
        if (pthread_create(&ld->workers[i].thread, NULL, worker_main,
                           &ld->workers[i]) != 0) {
            s = cl_error(CL_ERR_NOMEM, "loader: cannot start worker %d", i);
            goto fail;
        }
        ld->workers[i].started = 1;
        ld->nworkers = i + 1;
    }
    *out = ld;
    return CL_OK;
fail:
    cl_loader_destroy(ld);
    return s;
}

/* Waits until no worker is filling a slot; called locked. */
static void quiesce(cl_loader *ld)
{
    ld->active = 0;
    while (ld->inflight > 0)
        pthread_cond_wait(&ld->cv_done, &ld->mu);
}

void cl_loader_destroy(cl_loader *ld)
{
    if (!ld)
        return;
    if (ld->sync_ok) {
        pthread_mutex_lock(&ld->mu);
        ld->stop = 1;
        ld->active = 0;
        pthread_cond_broadcast(&ld->cv_work);
        pthread_mutex_unlock(&ld->mu);
    }
    int nw = ld->o.workers > 0 ? ld->o.workers : 1;
    if (ld->workers) {
        for (int i = 0; i < nw; i++) {
            if (ld->workers[i].started)
                pthread_join(ld->workers[i].thread, NULL);
            cl_image_free(&ld->workers[i].img);
            cl_transforms_scratch_free(&ld->workers[i].scratch);
        }
    }
    if (ld->sync_ok) {
        pthread_mutex_destroy(&ld->mu);
        pthread_cond_destroy(&ld->cv_work);
        pthread_cond_destroy(&ld->cv_done);
    }
    if (ld->slots)
        for (int i = 0; i < ld->nslots; i++) {
            cl_free(ld->slots[i].x);
            cl_free(ld->slots[i].labels);
            cl_free(ld->slots[i].indices);
            cl_free(ld->slots[i].targets);
        }
    cl_free(ld->slots);
    cl_free(ld->workers);
    cl_free(ld->perm);
    cl_free(ld);
}

cl_status cl_loader_seek(cl_loader *ld, int64_t epoch, int64_t batch)
{
    if (epoch < 0 || batch < 0 || batch > ld->nbatches)
        return cl_error(CL_ERR_ARG,
                        "loader position (epoch %lld, batch %lld): expected "
                        "epoch >= 0 and batch 0..%lld",
                        (long long)epoch, (long long)batch,
                        (long long)ld->nbatches);
    pthread_mutex_lock(&ld->mu);
    quiesce(ld);
    if (ld->epoch != epoch)
        make_perm(ld, epoch, ld->perm);
    ld->epoch = epoch;
    for (int i = 0; i < ld->nslots; i++)
        ld->slots[i].state = SLOT_FREE;
    ld->held = -1;
    ld->next_claim = batch;
    ld->next_deliver = batch;
    ld->active = 1;
    pthread_cond_broadcast(&ld->cv_work);
    pthread_mutex_unlock(&ld->mu);
    return CL_OK;
}

cl_status cl_loader_start_epoch(cl_loader *ld, int64_t epoch)
{
    return cl_loader_seek(ld, epoch, 0);
}

cl_status cl_loader_next(cl_loader *ld, cl_batch *b)
{
    memset(b, 0, sizeof *b);
    if (ld->epoch < 0)
        return cl_error(CL_ERR_ARG, "loader: call cl_loader_start_epoch "
                                    "before cl_loader_next");
    double t0 = cl_time_now();
    pthread_mutex_lock(&ld->mu);
    if (ld->held >= 0) {
        ld->slots[ld->held].state = SLOT_FREE;
        ld->held = -1;
        pthread_cond_broadcast(&ld->cv_work);
    }
    b->epoch = ld->epoch;
    if (ld->next_deliver >= ld->nbatches) {
        pthread_mutex_unlock(&ld->mu);
        b->index = ld->nbatches;
        return CL_OK;
    }
    int64_t want = ld->next_deliver;
    slot *s = &ld->slots[want % ld->nslots];
    if (ld->nworkers == 0) {
        s->batch = want;
        s->state = SLOT_FILLING;
        pthread_mutex_unlock(&ld->mu);
        fill_slot(ld, &ld->workers[0], s);
        pthread_mutex_lock(&ld->mu);
        s->state = SLOT_READY;
    } else {
        while (!(s->state == SLOT_READY && s->batch == want))
            pthread_cond_wait(&ld->cv_done, &ld->mu);
    }
    if (s->err != CL_OK) {
        /* Stay at this batch (slot kept ready): a retry meets the same
         * error instead of hanging. */
        pthread_mutex_unlock(&ld->mu);
        ld->st.wait_seconds += cl_time_now() - t0;
        return cl_error(s->err, "%s", s->msg);
    }
    ld->held = (int)(want % ld->nslots);
    ld->next_deliver++;
    pthread_mutex_unlock(&ld->mu);
    ld->st.wait_seconds += cl_time_now() - t0;
    ld->st.batches++;
    ld->st.samples += s->n;
    ld->st.skipped += s->skipped;
    if (s->skipped)
        snprintf(ld->st.last_skipped, sizeof ld->st.last_skipped, "%s", s->msg);
    b->x = s->x;
    b->labels = s->labels;
    b->targets = s->targets;
    b->indices = s->indices;
    b->n = s->n;
    b->k = s->targets ? ld->K : 0;
    b->index = want;
    return CL_OK;
}

int64_t cl_loader_batches_per_epoch(const cl_loader *ld)
{
    return ld->nbatches;
}

int64_t cl_loader_samples_per_epoch(const cl_loader *ld)
{
    return ld->per_shard;
}

void cl_loader_position(const cl_loader *ld, int64_t *epoch, int64_t *batch)
{
    *epoch = ld->epoch < 0 ? 0 : ld->epoch;
    *batch = ld->epoch < 0 ? 0 : ld->next_deliver;
}

void cl_loader_get_stats(const cl_loader *ld, cl_loader_stats *st)
{
    *st = ld->st;
}

double cl_loader_wait_seconds(const cl_loader *ld)
{
    return ld->st.wait_seconds;
}

cl_status cl_loader_epoch_order(const cl_loader *ld, int64_t epoch,
                                int64_t *out, int64_t *n)
{
    *n = ld->per_shard;
    if (!out)
        return CL_OK;
    int64_t *perm = cl_alloc((size_t)ld->n_total * sizeof(int64_t), "order");
    if (!perm)
        return CL_ERR_NOMEM;
    make_perm(ld, epoch, perm);
    for (int64_t k = 0; k < ld->per_shard; k++)
        out[k] = perm[ld->o.shard_id + k * ld->o.num_shards];
    cl_free(perm);
    return CL_OK;
}
