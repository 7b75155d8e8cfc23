/* Public API of libclassic: open a trained image classifier (ResNet-18..152,
 * Swin-T, swin_micro) and classify or embed images with it, evaluate it on
 * a dataset, or train one from a YAML recipe.
 *
 * Example: the five likeliest classes of one image.
 *
 *     cl_classifier *c = NULL;
 *     if (cl_classifier_load(&c, "resnet18-best.safetensors", NULL,
 *                            NULL) != CL_OK) {
 *         fprintf(stderr, "%s\n", cl_last_error());
 *         return 1;
 *     }
 *     float *probs = malloc(cl_classifier_num_classes(c) * sizeof *probs);
 *     cl_prediction top[5];
 *     if (cl_classifier_classify_file(c, "cat.jpg", probs) == CL_OK) {
 *         int n = cl_classifier_top_k(c, probs, 5, top);
 *         for (int i = 0; i < n; i++)
 *             printf("%s %.3f\n", top[i].name, top[i].prob);
 *     }
 *     free(probs);
 *     cl_classifier_free(c);
 *
 * Every function that can fail returns a cl_status (CL_OK is 0, failures
 * are negative) and leaves one sentence in cl_last_error() naming the file,
 * argument or value at fault.  The library never exits the process.
 *
 * Threads: a cl_classifier holds its own buffers, so calls on one handle
 * must not overlap; distinct handles may be used from distinct threads at
 * once.  Error details are per thread.  docs/api.md says more. */
#ifndef CLASSIC_CLASSIC_H
#define CLASSIC_CLASSIC_H

#include <stddef.h>
#include <stdio.h>

#include "classic/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------- inference */

/* A trained model opened for inference, with its class names and its
 * preprocessing (opaque; cl_classifier_load / cl_classifier_free). */
typedef struct cl_classifier cl_classifier;

/* The element type of an in-memory image's pixels. */
typedef enum cl_pixel_type {
    CL_PIXEL_U8 = 0, /* 0..255 */
    CL_PIXEL_F32 = 1 /* 0..1, clamped, rounded to 8 bits as a decoder would */
} cl_pixel_type;

/* One entry of a top-k list; name points into the classifier and lives as
 * long as it does. */
typedef struct cl_prediction {
    int index;        /* class index, 0 .. num_classes - 1 */
    float prob;       /* softmax probability */
    const char *name; /* class name, "" when the checkpoint has none */
} cl_prediction;

/* Opens a checkpoint for inference into *out: a classic checkpoint, a plain
 * safetensors file with torchvision's names, a PyTorch .pth or a MindSpore
 * .ckpt; arch ("resnet50", "swin_t", may be NULL) is checked against the
 * file, or inferred from the tensors of weights without metadata; backend is
 * "onednn" (NULL), "ref" (the plain reference kernels) or "none" (the network
 * is described, not run: the classify and embed calls refuse).  Thread-safe. */
CL_API cl_status cl_classifier_load(cl_classifier **out, const char *path,
                                    const char *arch, const char *backend);
/* How cl_classifier_open opens a model.  Zero it and set size to
 * sizeof(cl_classifier_opts) before the fields wanted: the library reads
 * the first `size` bytes only, so a program built against this header keeps
 * working when a later version adds fields at the end. */
typedef struct cl_classifier_opts {
    size_t size;
    const char *arch;      /* as cl_classifier_load; NULL: from the file */
    const char *backend;   /* as cl_classifier_load; NULL: "onednn" */
    const char *precision; /* "f32" (NULL) or "bf16": bf16 weights and
                              activations, about twice as fast on CPUs with
                              avx512_bf16 or AMX and refused elsewhere with
                              one sentence; docs/deploy.md */
    int raw_weights;       /* non-zero: a checkpoint's raw weights instead of
                              the EMA it may hold (load_ema false) */
} cl_classifier_opts;

/* cl_classifier_load with options (opts NULL: the defaults above).  The
 * precision is fixed for the handle's life: open a second handle to run
 * another.  Thread-safe. */
CL_API cl_status cl_classifier_open(cl_classifier **out, const char *path,
                                    const cl_classifier_opts *opts);
/* The precision the classifier runs at ("f32", "bf16"), NULL for NULL.
 * Thread-safe. */
CL_API const char *cl_classifier_precision(const cl_classifier *c);
/* Builds the network a recipe describes instead of opening a file: the YAML
 * text config_text (may be NULL) then n_overrides "key=value" strings over
 * classic's defaults (model, stem, in_channels, num_classes -- 1000 when
 * 0 --, image_size, seed; docs/config.md), with the weights a training run
 * starts from and the recipe's eval preprocessing.  backend as
 * cl_classifier_load.  Thread-safe. */
CL_API cl_status cl_classifier_create(cl_classifier **out,
                                      const char *config_text,
                                      const char *const *overrides,
                                      int n_overrides, const char *backend);
/* Frees a classifier and everything it owns; NULL is a no-op.  Not to be
 * called while another thread uses c. */
CL_API void cl_classifier_free(cl_classifier *c);

/* The number of classes (the length of a probability row), 0 for NULL.
 * Thread-safe. */
CL_API int cl_classifier_num_classes(const cl_classifier *c);
/* Class k's name ("" when unknown), NULL when c is NULL or k out of range.
 * Thread-safe. */
CL_API const char *cl_classifier_class_name(const cl_classifier *c, int k);
/* The length of an embedding (512 for resnet18, 2048 for resnet50), 0 for
 * NULL.  Thread-safe. */
CL_API int cl_classifier_embed_dim(const cl_classifier *c);
/* Learnable parameters (what PyTorch's numel() sum counts), 0 for NULL.
 * Thread-safe. */
CL_API long long cl_classifier_num_params(const cl_classifier *c);
/* Forward multiply-adds per image (convolutions and the classifier), 0
 * for NULL.  Thread-safe. */
CL_API long long cl_classifier_macs(const cl_classifier *c);
/* Writes the network as `classic info` shows it: arch, stem, input, the
 * layer table (name, op, output shape, parameters), the parameter count and
 * the forward FLOPs per image.  Thread-safe. */
CL_API cl_status cl_classifier_print(const cl_classifier *c, FILE *f);
/* The network's input: channels and side in pixels, after preprocessing.
 * Thread-safe. */
CL_API cl_status cl_classifier_input(const cl_classifier *c, int *channels,
                                     int *side);

/* Decodes a JPEG or PNG file, preprocesses it as the checkpoint's eval
 * pipeline and writes num_classes probabilities to probs.  Not thread-safe
 * on one handle. */
CL_API cl_status cl_classifier_classify_file(cl_classifier *c, const char *path,
                                             float *probs);
/* Classifies an in-memory image: pixels (h, w, channels) interleaved, 1
 * (gray) or 3 (RGB) channels, any size; probs as above.  Not thread-safe
 * on one handle. */
CL_API cl_status cl_classifier_classify(cl_classifier *c, const void *pixels,
                                        cl_pixel_type type, int h, int w,
                                        int channels, float *probs);
/* Classifies n images of one size stored one after another, pixels
 * (n, h, w, channels); probs receives (n, num_classes).  Not thread-safe on
 * one handle. */
CL_API cl_status cl_classifier_classify_batch(cl_classifier *c, int n,
                                              const void *pixels,
                                              cl_pixel_type type, int h, int w,
                                              int channels, float *probs);
/* Classifies n files into probs (n, num_classes); stops at the first file
 * that fails, naming it.  Not thread-safe on one handle. */
CL_API cl_status cl_classifier_classify_files(cl_classifier *c, int n,
                                              const char *const *paths,
                                              float *probs);

/* Decodes one JPEG or PNG held in memory (len bytes at data, the format
 * told by its first bytes) and preprocesses it as the checkpoint's eval
 * pipeline into x: (channels, side, side) floats, the network's input as
 * cl_classifier_input describes it.  The image's size is read from its
 * header and refused (CL_ERR_LIMIT) above max_pixels (0: 64 Mi pixels)
 * before anything is decoded, so a small file that claims a huge image
 * costs nothing; a file that is no image, or a truncated one, is
 * CL_ERR_FORMAT.  Thread-safe, also on one handle: it only reads the
 * classifier, so worker threads may prepare images while another thread
 * runs cl_classifier_forward. */
CL_API cl_status cl_classifier_prepare(const cl_classifier *c, const void *data,
                                       size_t len,
                                       unsigned long long max_pixels, float *x);
/* Runs n prepared images x (n, channels, side, side) through the network
 * into probs (n, num_classes).  A batch of n runs on the plan for the next
 * size of 1, 2, 4, 8, 16, 32 or 64 images, padded with zeros (more than 64
 * in several forwards); each size is planned on its first use, so a server
 * calls it once per size at start.  An image's probabilities do not depend
 * on the other images of its batch.  Not thread-safe on one handle. */
CL_API cl_status cl_classifier_forward(cl_classifier *c, int n, const float *x,
                                       float *probs);

/* Writes the k likeliest classes of one probability row (highest first,
 * ties to the lower index) to out and returns how many: min(k,
 * num_classes), or a negative cl_status on bad arguments.  Thread-safe. */
CL_API int cl_classifier_top_k(const cl_classifier *c, const float *probs,
                               int k, cl_prediction *out);

/* The pooled penultimate features of a file: embed_dim floats into feat.
 * Not thread-safe on one handle. */
CL_API cl_status cl_classifier_embed_file(cl_classifier *c, const char *path,
                                          float *feat);
/* The pooled penultimate features of an in-memory image (as
 * cl_classifier_classify takes it).  Not thread-safe on one handle. */
CL_API cl_status cl_classifier_embed(cl_classifier *c, const void *pixels,
                                     cl_pixel_type type, int h, int w,
                                     int channels, float *feat);
/* The features of n images of one size stored one after another (as
 * cl_classifier_classify_batch takes them) into feat (n, embed_dim), 16
 * per forward.  Not thread-safe on one handle. */
CL_API cl_status cl_classifier_embed_batch(cl_classifier *c, int n,
                                           const void *pixels,
                                           cl_pixel_type type, int h, int w,
                                           int channels, float *feat);
/* The features of n files into feat (n, embed_dim), 16 per forward; stops
 * at the first file that fails, naming it.  Not thread-safe on one
 * handle. */
CL_API cl_status cl_classifier_embed_files(cl_classifier *c, int n,
                                           const char *const *paths,
                                           float *feat);

/* ------------------------------------------------------------ evaluation */

/* A model run over a whole dataset split: its accuracy, loss, confusion
 * matrix and, when asked, every sample's features (opaque;
 * cl_evaluation_run / cl_evaluation_free). */
typedef struct cl_evaluation cl_evaluation;

/* How cl_evaluation_run runs.  Zero it and set size to
 * sizeof(cl_eval_opts) before the fields wanted: the library reads the
 * first `size` bytes only, so a program built against this header keeps
 * working when a later version adds fields at the end. */
typedef struct cl_eval_opts {
    size_t size;
    const char *arch;    /* checked against the file, or picks the ResNet of
                            weights without metadata; NULL: from the file */
    const char *backend; /* "onednn" (NULL) or "ref" */
    int batch;           /* images per forward; 0: 100 */
    const char *split;   /* NULL: the recipe's val_split ("test", "val") */
    const char *const *overrides; /* "key=value" onto the checkpoint's recipe
                                     (data_dir, dataset, limit_val, ...) */
    int n_overrides;
    int keep_features;     /* non-zero: keep every sample's pooled features */
    int distributed;       /* non-zero and under mpirun: each process reads its
                              shard and every process gets the sums */
    const char *precision; /* "f32" (NULL) or "bf16", as cl_classifier_opts;
                              the recipe's amp_level (how it trained) is
                              refused as an override */
    /* Called after each batch with the samples this process has done and
     * its share of the split (may be NULL): progress on long runs. */
    void (*progress)(void *ctx, long long done, long long total);
    void *progress_ctx;
} cl_eval_opts;

typedef struct cl_eval_summary {
    long long samples;       /* each sample of the split counted once */
    double top1, top5, loss; /* fractions in [0, 1]; mean cross-entropy */
    double mean_class_acc;   /* the mean of the per-class accuracies */
    int num_classes;
    int rank, world_size; /* this process among those that shared it */
} cl_eval_summary;

/* Opens the checkpoint at path (any kind cl_classifier_load reads), reads
 * the split its recipe names (as opts change it) with its eval pipeline,
 * every sample exactly once, and keeps the results in *out.  opts may be
 * NULL (the defaults above); an opts->size the library does not know is
 * refused with a sentence.  With opts->distributed under mpirun, MPI is
 * initialised here and finalised by cl_evaluation_free: one distributed
 * evaluation per process.  Thread-safe (one call per handle). */
CL_API cl_status cl_evaluation_run(cl_evaluation **out, const char *path,
                                   const cl_eval_opts *opts);
/* Frees an evaluation (and finalises MPI if it initialised it); NULL is a
 * no-op. */
CL_API void cl_evaluation_free(cl_evaluation *e);
/* The totals into *out.  Thread-safe. */
CL_API cl_status cl_evaluation_summary(const cl_evaluation *e,
                                       cl_eval_summary *out);
/* How many samples of class truth were predicted as pred (top-1); -1 when
 * e is NULL or an index is out of range.  Thread-safe. */
CL_API long long cl_evaluation_confusion(const cl_evaluation *e, int truth,
                                         int pred);
/* Class k's name ("" when unknown), NULL out of range.  Thread-safe. */
CL_API const char *cl_evaluation_class_name(const cl_evaluation *e, int k);
/* Writes what `classic eval` prints: the split, top-1, top-5, loss,
 * per-class accuracy and the confusion matrix.  Thread-safe. */
CL_API cl_status cl_evaluation_print(const cl_evaluation *e, FILE *f);
/* Writes the confusion matrix with class names as CSV to path.
 * Thread-safe. */
CL_API cl_status cl_evaluation_write_csv(const cl_evaluation *e,
                                         const char *path);
/* The kept features (n rows of dim floats, in the split's order) and their
 * labels (n); NULL unless opts->keep_features was set.  They live as long as
 * e.  Thread-safe. */
CL_API const float *cl_evaluation_features(const cl_evaluation *e, long long *n,
                                           int *dim);
CL_API const long long *cl_evaluation_labels(const cl_evaluation *e);
/* Saves the kept features as the gallery `classic retrieve` searches: a
 * safetensors file with 'features', 'labels', 'indices', for image folders
 * 'names', and the dataset, split, class names and checkpoint as metadata.
 * Thread-safe. */
CL_API cl_status cl_evaluation_save_features(const cl_evaluation *e,
                                             const char *path);

/* -------------------------------------------------------------- training */

/* What a training run tells its progress callback. */
typedef enum cl_progress_kind {
    CL_PROGRESS_STEP = 0, /* a logged step (every per_print_times steps) */
    CL_PROGRESS_EPOCH = 1 /* an epoch's end, after its evaluation if any */
} cl_progress_kind;

typedef struct cl_progress {
    cl_progress_kind kind;
    long long step, total_steps; /* optimizer steps so far / in the run */
    long long epoch;             /* 1-based */
    double loss, loss_avg;       /* the last batch's; smoothed */
    double lr, img_per_s;        /* STEP: the step's lr and throughput */
    int last_epoch;              /* EPOCH: non-zero for the run's last */
    int evaluated;               /* EPOCH: the val_* fields are filled */
    double val_top1, val_top5, val_loss; /* fractions in [0, 1]; loss */
    int rank, world_size; /* this process among the run's (1 alone) */
} cl_progress;

/* Called in the training thread between steps; returning non-zero stops
 * the run cleanly after the current step, with a checkpoint. */
typedef int (*cl_progress_fn)(void *ctx, const cl_progress *p);

/* What a run reports: a finished run, and one stopped by its callback or a
 * signal (last_checkpoint is then the checkpoint written at the stop), fill
 * every field; a run that failed fills steps, epochs and last_loss from the
 * progress events it sent. */
typedef struct cl_train_summary {
    long long steps; /* optimizer steps this call trained (0 when it resumed
                        a run that was complete) */
    int epochs;
    double last_loss;
    double val_top1, val_top5, val_loss; /* last evaluation; NaN if none */
    double best_top1;                    /* NaN if no evaluation */
    double seconds, img_per_s;
    int stopped;               /* non-zero when the callback stopped the run */
    char last_checkpoint[640]; /* "" when none was written */
    char best_checkpoint[640];
    int rank, world_size;   /* this process among the run's (1 alone) */
    int stop_signal;        /* SIGINT / SIGTERM that stopped it, else 0 */
    double data_wait_share; /* fraction of the loop spent waiting on data */
} cl_train_summary;

/* Trains a network (ResNet or Swin) as a recipe says: the YAML file config_path
 * and/or the YAML text config_text (either may be NULL; the text applies after
 * the file), then n_overrides "key=value" strings, over classic's defaults
 * (docs/config.md lists the keys).  on_progress may be NULL; summary may
 * be NULL.  A run stopped by its callback returns CL_ERR_INTERRUPTED with
 * summary->stopped set.  While it runs, SIGINT and SIGTERM stop it as the
 * callback does.  Launched by mpirun (and the recipe's dist is auto or
 * mpi), the processes train one model data-parallel: MPI is initialised
 * here and finalised on return, except after a failure of a run of several
 * processes, when MPI stays up so that the launcher ends the job as this
 * process exits (the others may be waiting for it).  One run per process
 * at a time; one distributed run per process.  cl_train_ex below leaves
 * signals and MPI to the caller. */
CL_API cl_status cl_train(const char *config_path, const char *config_text,
                          const char *const *overrides, int n_overrides,
                          cl_progress_fn on_progress, void *ctx,
                          cl_train_summary *summary);

/* How cl_train_ex runs inside a host program that keeps signals or MPI to
 * itself.  Zero it and set size to sizeof(cl_train_opts) before the fields
 * wanted: the library reads the first `size` bytes only, so a program
 * built against this header keeps working when a later version adds fields
 * at the end. */
typedef struct cl_train_opts {
    size_t size;
    int host_signals; /* non-zero: no SIGINT / SIGTERM handler is installed;
                         the host stops the run by returning non-zero from
                         on_progress (a checkpoint is written as for
                         SIGINT) */
    int host_mpi;     /* non-zero: the run never calls MPI_Init nor
                         MPI_Finalize; it trains data-parallel over
                         MPI_COMM_WORLD when the host initialised MPI
                         (MPI_THREAD_FUNNELED at least), alone otherwise,
                         and under an MPI launcher without MPI initialised
                         it refuses with CL_ERR_CONFIG */
} cl_train_opts;

/* cl_train with options; opts NULL is cl_train.  A size this library does
 * not know is refused with CL_ERR_ARG.  With host_mpi one process may run
 * several distributed trainings, one after another. */
CL_API cl_status cl_train_ex(const char *config_path, const char *config_text,
                             const char *const *overrides, int n_overrides,
                             cl_progress_fn on_progress, void *ctx,
                             const cl_train_opts *opts,
                             cl_train_summary *summary);

#ifdef __cplusplus
}
#endif
#endif
