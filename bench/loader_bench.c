/* Loader throughput: images/s of cl_loader over a dataset with a train
 * pipeline, the consumer doing nothing but taking batches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "classic/status.h"
#include "core/timer.h"
#include "data/data.h"

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr,
                "usage: loader_bench FORMAT PATH small|imagenet WORKERS "
                "BATCH EPOCHS\n");
        return 2;
    }
    cl_dataset_spec sp = cl_dataset_spec_default();
    sp.format = argv[1];
    sp.path = argv[2];
    int imagenet = strcmp(argv[3], "imagenet") == 0;
    int workers = atoi(argv[4]), batch = atoi(argv[5]);
    int epochs = atoi(argv[6]);
    cl_dataset *ds = NULL;
    cl_transforms *tf = NULL;
    cl_loader *ld = NULL;
    cl_status s = cl_dataset_open(&ds, &sp);
    if (s != CL_OK)
        goto fail;
    cl_transform_opts o;
    if (imagenet) {
        o = cl_transform_opts_imagenet_train(224);
    } else {
        const float mean[1] = {0.2860f}, std[1] = {0.3530f};
        int h, w, c;
        cl_dataset_image_dims(ds, &h, &w, &c);
        o = cl_transform_opts_small_train(c, h, w, 4, 0.5f, mean, std);
    }
    s = cl_transforms_create(&tf, &o);
    if (s != CL_OK)
        goto fail;
    cl_loader_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.dataset = ds;
    lo.tf = tf;
    lo.batch_size = batch;
    lo.shuffle = 1;
    lo.seed = 1;
    lo.workers = workers;
    lo.prefetch = 4;
    s = cl_loader_create(&ld, &lo);
    if (s != CL_OK)
        goto fail;
    int64_t images = 0;
    double t0 = cl_time_now();
    for (int e = 0; e < epochs; e++) {
        s = cl_loader_start_epoch(ld, e);
        if (s != CL_OK)
            goto fail;
        for (;;) {
            cl_batch b;
            s = cl_loader_next(ld, &b);
            if (s != CL_OK)
                goto fail;
            if (b.n == 0)
                break;
            images += b.n;
        }
    }
    double dt = cl_time_now() - t0;
    printf("classic images/s %.1f (%lld images in %.2f s, %d workers, "
           "batch %d)\n",
           images / dt, (long long)images, dt, workers, batch);
    cl_loader_destroy(ld);
    cl_transforms_destroy(tf);
    cl_dataset_close(ds);
    return 0;
fail:
    fprintf(stderr, "loader_bench: %s\n", cl_last_error());
    cl_loader_destroy(ld);
    cl_transforms_destroy(tf);
    cl_dataset_close(ds);
    return 1;
}
