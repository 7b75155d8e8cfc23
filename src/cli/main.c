/* `classic`: dispatch to the command named by the first argument. */
#include <stdio.h>
#include <string.h>

#include "classic/classic.h"
#include "cli/cli.h"

static const cl_cli_command commands[] = {
    {"check", "print version, oneDNN version, CPU ISA, threads, MPI",
     cl_cmd_check},
    {"data", "dataset info, stats (mean/std), preview grid", cl_cmd_data},
    {"bench", "train/infer img/s, GFLOPS, MFU, peak RSS", cl_cmd_bench},
    {"train", "train a ResNet or Swin from a YAML recipe (+ --key value)",
     cl_cmd_train},
    {"eval", "accuracy, per-class accuracy and confusion of a checkpoint",
     cl_cmd_eval},
    {"predict", "top-k classes of image files", cl_cmd_predict},
    {"embed", "penultimate features of a dataset split", cl_cmd_embed},
    {"retrieve", "nearest gallery images by features; recall@k",
     cl_cmd_retrieve},
    {"info", "layer table, parameters, FLOPs, checkpoint metadata",
     cl_cmd_info},
    {"report", "HTML report of a run, or two runs compared", cl_cmd_report},
    {"export", "a checkpoint as an ONNX model (BN folded, opset 17)",
     cl_cmd_export},
    {"convert", "a MindSpore .ckpt or .pth into a classic checkpoint",
     cl_cmd_convert},
    {"quantize", "a checkpoint into an int8 model by calibration",
     cl_cmd_quantize},
    {"serve", "models over HTTP: KServe v2, a page, metrics", cl_cmd_serve},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: classic <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`classic <command> --help` describes a command; "
               "`classic --version` prints\nthe version.\n");
}

int cl_cli_fail(const char *what, int status)
{
    fprintf(stderr, "classic: %s: %s\n", what,
            cl_last_error()[0] ? cl_last_error()
                               : cl_status_message((cl_status)status));
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("classic %s\n", cl_version());
        return 0;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "classic: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
