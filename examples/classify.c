/* Classifies images with a classic checkpoint through the public header:
 *
 *     cc classify.c $(pkg-config --cflags --libs classic) -o classify
 *     ./classify resnet18-best.safetensors cat.jpg [dog.png ...]
 *
 * prints the three likeliest classes of each image. */
#include <stdio.h>
#include <stdlib.h>

#include <classic/classic.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s CHECKPOINT IMAGE...\n", argv[0]);
        return 2;
    }
    cl_classifier *c = NULL;
    if (cl_classifier_load(&c, argv[1], NULL, NULL) != CL_OK) {
        fprintf(stderr, "classify: %s\n", cl_last_error());
        return 1;
    }
    float *probs = malloc(sizeof(float) * cl_classifier_num_classes(c));
    int failed = probs == NULL;
    for (int i = 2; i < argc && probs; i++) {
        cl_prediction top[3];
        if (cl_classifier_classify_file(c, argv[i], probs) != CL_OK) {
            fprintf(stderr, "classify: %s\n", cl_last_error());
            failed = 1;
            continue;
        }
        int n = cl_classifier_top_k(c, probs, 3, top);
        printf("%s\n", argv[i]);
        for (int t = 0; t < n; t++)
            printf("  %d. %-20s %.4f\n", t + 1, top[t].name, top[t].prob);
    }
    free(probs);
    cl_classifier_free(c);
    return failed;
}
