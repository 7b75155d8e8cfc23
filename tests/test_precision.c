/* The inference precision switch: bf16 through the C API, evaluation and
 * every command that runs a trained model, held against f32 on the same
 * checkpoint; and each refusal (unknown names, the ref backend, a CPU
 * without bf16 dot products, amp_level given to an evaluation, an options
 * struct of a size the library does not know).  Under ONEDNN_MAX_CPU_ISA
 * caps the bf16 checks become checks of the refusal's sentence.
 * ctest-labels: api onednn */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/onednn_info.h"
#include "classic/classic.h"
#include "harness.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "test_data_fixtures.h"
#include "tiny_run.h"

/* Whether this CPU (as oneDNN is capped) computes bf16 dot products: the
 * condition under which bf16 must run, and elsewhere be refused. */
static int bf16_native(void)
{
    const char *isa = cl_dnnl_isa_name();
    return strstr(isa, "bf16") != NULL || strstr(isa, "amx") != NULL;
}

/* The tiny model's file, absolute (tiny_run.h), or NULL. */
static const char *tiny_checkpoint(void)
{
    const char *rel = tiny_run();
    return rel ? cl_test_path(rel) : NULL;
}

/* ||a - b|| / ||b|| over n floats. */
static double rel_err(const float *a, const float *b, int n)
{
    double d = 0, r = 0;
    for (int i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

CL_TEST(api_bf16_against_f32_and_refusals)
{
    const char *ck = tiny_checkpoint();
    REQUIRE(ck != NULL);
    const char *img = cl_test_path("folder/val/a/0.jpg");
    cl_classifier *f32 = NULL, *bf = NULL;
    /* NULL options and a zeroed size-only struct both mean f32. */
    REQUIRE_OK(cl_classifier_open(&f32, ck, NULL));
    CHECK(strcmp(cl_classifier_precision(f32), "f32") == 0);
    CHECK(cl_classifier_precision(NULL) == NULL);
    cl_classifier_opts o = {.size = sizeof o, .precision = "bf16"};
    cl_status st = cl_classifier_open(&bf, ck, &o);
    float pf[2], pb[2], ef[512], eb[512], eb16[3 * 512];
    REQUIRE_OK(cl_classifier_classify_file(f32, img, pf));
    REQUIRE_OK(cl_classifier_embed_file(f32, img, ef));
    if (bf16_native()) {
        REQUIRE_OK(st);
        CHECK(strcmp(cl_classifier_precision(bf), "bf16") == 0);
        REQUIRE_OK(cl_classifier_classify_file(bf, img, pb));
        REQUIRE_OK(cl_classifier_embed_file(bf, img, eb));
        /* bf16 keeps 8 bits of mantissa: the features move by about 2^-8
         * per layer's rounding, summed over the network, and must move
         * (else bf16 did not run). */
        double e = rel_err(eb, ef, 512);
        printf("bf16 against f32: features %.2e normwise, p %.6f/%.6f\n", e,
               pb[0], pf[0]);
        CHECK(e > 1e-5 && e < 0.08);
        CHECK(fabs(pb[0] - pf[0]) < 0.05 && fabs(pb[1] - pf[1]) < 0.05);
        /* The batch network runs at the handle's precision too. */
        const char *three[] = {img, img, img};
        REQUIRE_OK(cl_classifier_embed_files(bf, 3, three, eb16));
        CHECK(rel_err(eb16 + 2 * 512, eb, 512) < 0.08);
        CHECK(rel_err(eb16 + 2 * 512, ef, 512) > 1e-5);
    } else {
        CHECK(st == CL_ERR_UNSUPPORTED && bf == NULL);
        CHECK(strstr(cl_last_error(), "avx512_bf16") != NULL);
        CHECK(strstr(cl_last_error(), cl_dnnl_isa_name()) != NULL);
    }
    cl_classifier_free(bf);
    bf = NULL;
    /* Refusals, each one sentence and no handle. */
    o.precision = "fp16";
    CHECK_ERR(cl_classifier_open(&bf, ck, &o), CL_ERR_ARG,
              "'fp16' is not one of f32, bf16");
    o.precision = "bf16";
    o.backend = "ref";
    CHECK_ERR(cl_classifier_open(&bf, ck, &o), CL_ERR_UNSUPPORTED,
              "onednn backend only");
    o.backend = NULL;
    o.size = sizeof o + 8;
    CHECK_ERR(cl_classifier_open(&bf, ck, &o), CL_ERR_ARG, "newer classic.h");
    o.size = 0;
    CHECK_ERR(cl_classifier_open(&bf, ck, &o), CL_ERR_ARG, "opts->size is 0");
    CHECK(bf == NULL);
    /* A caller built against a header that ended before `precision` gets
     * f32 whatever lies beyond the size it passed. */
    o.size = offsetof(cl_classifier_opts, precision);
    o.precision = "no such precision";
    REQUIRE_OK(cl_classifier_open(&bf, ck, &o));
    CHECK(strcmp(cl_classifier_precision(bf), "f32") == 0);
    cl_classifier_free(bf);
    cl_classifier_free(f32);
}

CL_TEST(evaluation_at_bf16_and_amp_refused)
{
    const char *ck = tiny_checkpoint();
    REQUIRE(ck != NULL);
    cl_eval_opts o = {.size = sizeof o, .batch = 4};
    cl_evaluation *e = NULL;
    cl_eval_summary f, b;
    REQUIRE_OK(cl_evaluation_run(&e, ck, &o));
    REQUIRE_OK(cl_evaluation_summary(e, &f));
    cl_evaluation_free(e);
    e = NULL;
    o.precision = "bf16";
    cl_status st = cl_evaluation_run(&e, ck, &o);
    if (bf16_native()) {
        REQUIRE_OK(st);
        REQUIRE_OK(cl_evaluation_summary(e, &b));
        CHECK(b.samples == f.samples);
        CHECK(fabs(b.loss - f.loss) < 0.05 * fabs(f.loss) + 1e-3);
    } else {
        CHECK(st == CL_ERR_UNSUPPORTED);
        CHECK(strstr(cl_last_error(), "avx512_bf16") != NULL);
    }
    cl_evaluation_free(e);
    e = NULL;
    /* amp_level is a training key: taking it would score in f32 while the
     * caller believes bf16, so every spelling is refused. */
    const char *amp[] = {"amp=O2", "amp_level=O2", "amp-level=O0"};
    o.precision = NULL;
    o.n_overrides = 1;
    for (int i = 0; i < 3; i++) {
        o.overrides = amp + i;
        CHECK_ERR(cl_evaluation_run(&e, ck, &o), CL_ERR_ARG,
                  "amp_level is how a run trains");
        CHECK(e == NULL);
    }
    /* The options are read as far as their size says, as
     * cl_classifier_open's: NULL is the defaults, a size the library does
     * not know is refused, and a caller built against a header that ended
     * before `precision` gets f32 whatever lies beyond the size it
     * passed. */
    o.n_overrides = 0;
    o.overrides = NULL;
    REQUIRE_OK(cl_evaluation_run(&e, ck, NULL));
    REQUIRE_OK(cl_evaluation_summary(e, &b));
    /* Batches of 100 instead of 4: equal up to rounding. */
    CHECK(b.samples == f.samples);
    CHECK_NEAR(b.loss, f.loss, 1e-4 * fabs(f.loss) + 1e-6);
    cl_evaluation_free(e);
    e = NULL;
    o.size = sizeof o + 8;
    CHECK_ERR(cl_evaluation_run(&e, ck, &o), CL_ERR_ARG, "newer classic.h");
    o.size = 0;
    CHECK_ERR(cl_evaluation_run(&e, ck, &o), CL_ERR_ARG, "opts->size is 0");
    CHECK(e == NULL);
    o.size = offsetof(cl_eval_opts, precision);
    o.precision = "no such precision";
    REQUIRE_OK(cl_evaluation_run(&e, ck, &o));
    REQUIRE_OK(cl_evaluation_summary(e, &b));
    CHECK(b.samples == f.samples && b.loss == f.loss);
    cl_evaluation_free(e);
}

/* Runs `classic <args>` and checks its exit status and, when want is not
 * NULL, that its output holds want. */
static void expect(const char *args, int rc, const char *want)
{
    int got = cl_test_classic(args);
    if (got != rc || (want && !strstr(cl_test_out, want)))
        cl_test_fail(__FILE__, __LINE__,
                     "classic %s: exit %d (expected %d), output:\n%s\n"
                     "(expected it to hold \"%s\")",
                     args, got, rc, cl_test_out, want ? want : "");
}

CL_TEST(every_command_takes_precision)
{
    const char *ck = tiny_checkpoint();
    REQUIRE(ck != NULL);
    const char *img = cl_test_path("folder/val/b/1.jpg");
    const char *gal = cl_test_path("g.safetensors");
    const int bf = bf16_native();
    const char *refusal = "needs a CPU with avx512_bf16 or AMX";
    char a[4000];
    /* Unknown names: one sentence, usage's exit code, on every command. */
    const char *cmds[] = {"predict --checkpoint %s %s", "eval --checkpoint %s",
                          "embed --checkpoint %s --out %s",
                          "export --checkpoint %s --onnx %s"};
    for (int i = 0; i < 4; i++) {
        char base[3000];
        snprintf(base, sizeof base, cmds[i], ck,
                 i == 0 ? img : cl_test_path("unused"));
        snprintf(a, sizeof a, "%s --precision fp8", base);
        expect(a, 2, "precision 'fp8' is not one of f32, bf16");
    }
    expect("bench --mode infer --precision half --steps 1 --warmup 0", 2,
           "precision 'half' is not one of f32, bf16");
    /* predict: bf16 probabilities near f32's. */
    snprintf(a, sizeof a, "predict --checkpoint %s --json --top 1 %s", ck, img);
    REQUIRE(cl_test_classic(a) == 0);
    cl_json_doc *doc = NULL;
    REQUIRE_OK(
        cl_json_parse(&doc, cl_test_out, strlen(cl_test_out), NULL, "json"));
    const cl_json *t = cl_json_get(cl_json_root(doc)->child, "top");
    REQUIRE(t && t->count == 1);
    double p32 = cl_json_get(t->child, "prob")->num;
    int i32 = (int)cl_json_get(t->child, "index")->num;
    cl_json_free(doc);
    snprintf(a, sizeof a,
             "predict --checkpoint %s --json --top 2 --precision bf16 %s", ck,
             img);
    if (bf) {
        REQUIRE(cl_test_classic(a) == 0);
        REQUIRE_OK(cl_json_parse(&doc, cl_test_out, strlen(cl_test_out), NULL,
                                 "json"));
        t = cl_json_get(cl_json_root(doc)->child, "top");
        REQUIRE(t && t->count == 2);
        const cl_json *r = t->child;
        if ((int)cl_json_get(r, "index")->num != i32)
            r = r->next;
        CHECK(fabs(cl_json_get(r, "prob")->num - p32) < 0.05);
        cl_json_free(doc);
    } else {
        expect(a, 1, refusal);
    }
    /* eval names its precision; --amp, a training key, is refused. */
    snprintf(a, sizeof a, "eval --checkpoint %s", ck);
    expect(a, 0, "precision f32");
    snprintf(a, sizeof a, "eval --checkpoint %s --precision bf16", ck);
    expect(a, bf ? 0 : 1, bf ? "precision bf16" : refusal);
    snprintf(a, sizeof a, "eval --checkpoint %s --amp O2", ck);
    expect(a, 2, "--amp does not apply to eval (it is how a run trains");
    /* embed records its precision in the gallery, and retrieve embeds
     * image queries at it unless told; --precision with --queries (rows
     * embedded already) is refused. */
    snprintf(a, sizeof a, "embed --checkpoint %s --out %s --precision %s", ck,
             gal, bf ? "bf16" : "f32");
    expect(a, 0, "features of dimension 512");
    cl_st_file *sf = NULL;
    REQUIRE_OK(cl_st_open(&sf, gal));
    const char *pm = cl_st_metadata(sf, "precision");
    CHECK(pm && strcmp(pm, bf ? "bf16" : "f32") == 0);
    cl_st_close(sf);
    snprintf(a, sizeof a, "retrieve --gallery %s --top 1 --json %s", gal, img);
    expect(a, 0, "\"similarity\":");
    snprintf(a, sizeof a, "retrieve --gallery %s --queries %s --precision f32",
             gal, gal);
    expect(a, 2, "--queries holds features embedded already");
    /* export writes f32 only and says why bf16 is not offered. */
    snprintf(a, sizeof a, "export --checkpoint %s --onnx %s --precision bf16",
             ck, cl_test_path("m.onnx"));
    expect(a, 2, "the ONNX file is f32");
    snprintf(a, sizeof a, "export --checkpoint %s --onnx %s --precision f32",
             ck, cl_test_path("m.onnx"));
    expect(a, 0, NULL);
    /* bench: --precision is inference's and not --amp's twin. */
    expect("bench --mode train --precision bf16 --steps 1 --warmup 0", 2,
           "give --mode infer");
    expect("bench --mode infer --precision f32 --amp O2 --steps 1 --warmup 0",
           2, "give one");
    expect("bench --mode infer --precision bf16 --backend ref --steps 1 "
           "--warmup 0",
           2, "onednn backend only");
    expect("bench --arch resnet18 --mode infer --precision bf16 --batch 2 "
           "--steps 1 --warmup 0",
           bf ? 0 : 2, bf ? "amp O2" : refusal);
}
