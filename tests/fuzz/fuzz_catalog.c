// libFuzzer harness: the GPU catalog (bench/gpus.txt, bench/planner_catalog.c). The input is the
// catalog text. A bad entry is MO_ERR_INVALID with "fuzz:LINE: ..."; a good catalog's entries must
// answer every lookup the planner and the run engine make.
#include "bench/planner.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (n > 65536) return 0;
    char *text = fuzz_text(data, n);
    mo_gpu_catalog cat;
    memset(&cat, 0, sizeof cat);
    mo_status st = mo_gpu_catalog_parse(text, "fuzz", &cat);
    if (st == MO_OK) {
        FUZZ_ASSERT(cat.n > 0, "an empty catalog parsed");
        char names[4096];
        mo_gpu_catalog_names(&cat, names, sizeof names);
        for (size_t i = 0; i < cat.n; i++) {
            const mo_gpu_spec *g = &cat.gpus[i];
            FUZZ_ASSERT(mo_gpu_catalog_find(&cat, g->key) != NULL, "key %s not found", g->key);
            for (int p = MO_PREC_FP32; p <= MO_PREC_BF16; p++) {
                const char *note = NULL;
                double r = mo_gpu_gemm_tflops(g, (mo_precision)p, &note);
                (void)r;
            }
            (void)mo_gpu_total_bytes(g);
        }
        (void)mo_gpu_catalog_match_device(&cat, "NVIDIA H200");
        (void)mo_gpu_catalog_match_device(&cat, text);
        (void)mo_gpu_catalog_find(&cat, "h200");
        mo_gpu_catalog_free(&cat);
    } else {
        FUZZ_ASSERT(!strncmp(mo_errmsg_plain(), "fuzz", 4), "message without its source: %s", mo_errmsg_plain());
    }
    free(text);
    return 0;
}
