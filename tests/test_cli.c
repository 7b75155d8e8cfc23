/* The command-line tool: version, environment check, unknown commands.
 * ctest-labels: unit cli */
#include <stdlib.h>
#include <string.h>

#include "backend/onednn_info.h"
#include "harness.h"

CL_TEST(version)
{
    CHECK(cl_test_classic("--version") == 0);
    CHECK(strstr(cl_test_out, "classic " CL_VERSION_STRING) != NULL);
}

CL_TEST(check_reports_environment)
{
    CHECK(cl_test_classic("check") == 0);
    CHECK(strstr(cl_test_out, "oneDNN    2.") != NULL);
    CHECK(strstr(cl_test_out, "cpu isa") != NULL);
    CHECK(strstr(cl_test_out, "unknown") == NULL);
    /* The precisions, as the commands would refuse or run them. */
    CHECK(strstr(cl_test_out, "precision f32 yes; bf16 ") != NULL);
    CHECK(strstr(cl_test_out, cl_dnnl_int8_vnni()
                                  ? "int8 yes (VNNI"
                                  : "int8 yes (no VNNI") != NULL);
    CHECK(strstr(cl_test_out,
                 cl_dnnl_bf16_native() ? "bf16 yes" : "bf16 no (needs") !=
          NULL);
    CHECK(strstr(cl_test_out, "threads") != NULL);
    CHECK(strstr(cl_test_out, "mpi") != NULL);
}

CL_TEST(unknown_command_fails)
{
    CHECK(cl_test_classic("frobnicate") == 2);
    CHECK(strstr(cl_test_out, "unknown command 'frobnicate'") != NULL);
    CHECK(cl_test_classic("") == 2);
}

/* `classic bench --amp` times the bf16 plan it names, and refuses a level
 * it does not know and the reference backend's bf16. */
CL_TEST(bench_amp_levels)
{
    int rc = cl_test_classic("bench --arch resnet18 --stem cifar --size 8 "
                             "--batch 2 --steps 1 --warmup 1 --mode train "
                             "--threads 1 --amp O2");
    CHECK(strstr(cl_test_out, "amp O2") != NULL);
    /* Below AVX-512 oneDNN has no bf16 convolutions: the sentence instead
     * of the timing. */
    if (cl_dnnl_bf16_supported()) {
        CHECK(rc == 0);
        CHECK(strstr(cl_test_out, "bench: mode=train img_s=") != NULL);
    } else {
        CHECK(rc == 1);
        CHECK(strstr(cl_test_out, "runs on AVX-512 CPUs only") != NULL);
    }
    CHECK(cl_test_classic("bench --amp O3") != 0);
    CHECK(strstr(cl_test_out, "--amp 'O3' is not O0, O1 or O2") != NULL);
    CHECK(cl_test_classic("bench --arch resnet18 --stem cifar --size 8 "
                          "--batch 2 --steps 1 --warmup 1 --mode train "
                          "--backend ref --amp O1") != 0);
    CHECK(strstr(cl_test_out, "backend ref: amp_level O1") != NULL);
}

/* `classic bench --profile on` prints the kinds of plan step of the timed
 * steps with their ops, in both modes; the ref backend, which has no plan
 * steps, is refused with a sentence, as is a value other than on / off. */
CL_TEST(bench_profile)
{
    CHECK(cl_test_classic("bench --arch resnet18 --stem cifar --size 8 "
                          "--batch 2 --steps 2 --warmup 1 --mode both "
                          "--threads 1 --profile on") == 0);
    CHECK(strstr(cl_test_out, "profile   train, ms per timed step") != NULL);
    CHECK(strstr(cl_test_out, "profile   infer, ms per timed step") != NULL);
    CHECK(strstr(cl_test_out, "convolution forward (conv2d)") != NULL);
    CHECK(strstr(cl_test_out, "inner product forward (linear)") != NULL);
    CHECK(strstr(cl_test_out, "bench: mode=infer img_s=") != NULL);
    /* The bandwidth memory-bound steps are held against, and their share
     * of it. */
    CHECK(strstr(cl_test_out, "GB/s STREAM triad") != NULL);
    CHECK(strstr(cl_test_out, "batch normalization forward (batchnorm2d)  [") !=
          NULL);
    CHECK(strstr(cl_test_out, "% of triad]") != NULL);
    CHECK(cl_test_classic("bench --arch resnet18 --stem cifar --size 8 "
                          "--batch 2 --steps 1 --warmup 0 --mode train "
                          "--backend ref --profile on") != 0);
    CHECK(strstr(cl_test_out, "the ref backend has none") != NULL);
    CHECK(cl_test_classic("bench --profile maybe") != 0);
    CHECK(strstr(cl_test_out, "--profile 'maybe' is not on or off") != NULL);
}

/* `classic bench --convs` names the conv paths it timed, and the
 * implementations oneDNN runs them with. */
CL_TEST(bench_conv_paths)
{
    CHECK(cl_test_classic("bench --arch resnet18 --stem cifar --size 8 "
                          "--batch 2 --steps 1 --warmup 1 --mode train "
                          "--threads 1 --convs direct") == 0);
    CHECK(strstr(cl_test_out, "convs direct") != NULL);
    CHECK(strstr(cl_test_out, "bench: mode=train img_s=") != NULL);
    CHECK(strstr(cl_test_out, "convs     train: forward ") != NULL);
    /* measured: the paths and oneDNN's implementations timed at plan
     * time, and what it chose said. */
    CHECK(cl_test_classic("bench --arch resnet18 --stem cifar --size 8 "
                          "--batch 2 --steps 1 --warmup 1 --mode train "
                          "--threads 1 --convs measured") == 0);
    CHECK(strstr(cl_test_out, "convs measured") != NULL);
    CHECK(strstr(cl_test_out, "conv primitives (per shape) another "
                              "implementation") != NULL);
    CHECK(strstr(cl_test_out, "convs     train: forward ") != NULL);
    CHECK(cl_test_classic("bench --convs gemm") != 0);
    CHECK(strstr(cl_test_out,
                 "--convs 'gemm' is not rewrite, direct or measured") != NULL);
}

/* The MFU's peak is that of the instructions oneDNN computes with (f32
 * FMA at O0, bf16 at O2), says so, and no figure exceeds it. */
static void mfu_within_peak(const char *amp, const char *peak_kind)
{
    char args[512];
    snprintf(args, sizeof args,
             "bench --arch resnet18 --stem cifar --size 16 --batch 8 "
             "--steps 2 --warmup 1 --mode both --threads 1 --amp %s",
             amp);
    REQUIRE(cl_test_classic(args) == 0);
    const char *p = strstr(cl_test_out, "\npeak      ");
    REQUIRE(p != NULL);
    const char *eol = strchr(p + 1, '\n');
    REQUIRE(eol != NULL);
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(eol - p - 1), p + 1);
    CHECK(strstr(line, peak_kind) != NULL);
    CHECK(strstr(line, "measured on 1 thread(s)") != NULL ||
          strstr(line, "computed on 1 thread(s)") != NULL);
    int modes = 0;
    for (const char *m = cl_test_out; (m = strstr(m, " mfu=")) != NULL; m++) {
        double v = atof(m + 5);
        CHECK(v > 0 && v <= 100);
        modes++;
    }
    CHECK(modes == 2);
}

CL_TEST(bench_mfu_against_the_isa_peak)
{
    mfu_within_peak("O0", "f32 FMA");
    /* O2 is refused below AVX-512 (bench_amp_levels checks how). */
    if (cl_dnnl_bf16_supported())
        mfu_within_peak("O2", "bf16");
}

/* --precision int8 times the int8 plan (the network quantized by min-max
 * on its timed batch) and measures its MFU against the int8 peak. */
CL_TEST(bench_int8_against_the_int8_peak)
{
    REQUIRE(cl_test_classic("bench --arch resnet18 --stem cifar --size 16 "
                            "--batch 8 --steps 2 --warmup 1 --mode infer "
                            "--threads 1 --precision int8") == 0);
    CHECK(strstr(cl_test_out, "precision int8") != NULL);
    const char *p = strstr(cl_test_out, "\npeak      ");
    REQUIRE(p != NULL);
    CHECK(strncmp(strstr(p, ": ") ? strstr(p, ": ") + 2 : "", "int8", 4) == 0);
    const char *m = strstr(cl_test_out, "bench: mode=infer img_s=");
    REQUIRE(m != NULL);
    CHECK(atof(m + strlen("bench: mode=infer img_s=")) > 0);
    const char *f = strstr(m, " mfu=");
    REQUIRE(f != NULL);
    /* A share of the peak measured in the same run; a peak loop slowed by
     * other work (ctest runs tests side by side) can put it above 100%,
     * which bench then says instead of hiding. */
    CHECK(atof(f + 5) > 0);
    if (atof(f + 5) > 100)
        CHECK(strstr(cl_test_out, "above the peak") != NULL);
    /* Inference's switch only. */
    CHECK(cl_test_classic("bench --mode train --precision int8") != 0);
    CHECK(strstr(cl_test_out, "--precision is inference's switch") != NULL);
}
