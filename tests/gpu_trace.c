// The allocation trace on the GPU (memopt run --trace): the cuda backend's trace of a step equals the
// dry backend's, event for event (op, phase, tensor, category, bytes, allocated and reserved after),
// for GPT-2 124M in fp32 with ckpt none and full, and in bf16 with selective checkpointing, and for the
// MLP (mlp-small) in bf16 with ckpt full: the allocator and the model's requests are the same, so the
// dry timeline is the GPU's.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench/config.h"
#include "bench/run_engine.h"
#include "testlib.h"

static char *slurp_after_first_line(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (!b) { fclose(f); return NULL; }
    size_t k = fread(b, 1, (size_t)n, f);
    fclose(f);
    b[k] = '\0';
    char *nl = strchr(b, '\n');
    if (!nl) return b;
    memmove(b, nl + 1, strlen(nl + 1) + 1);
    return b;
}

static int reduced;

static void trace_of(const char *model, const char *preset, const char *precision, const char *ckpt, const char *backend,
                     const char *path) {
    mo_config *c = malloc(sizeof *c);
    mo_config_defaults(c, MO_CMD_RUN);
    const char *kv[][2] = {{"--model", model}, {"--preset", preset}, {"--precision", precision}, {"--ckpt", ckpt}, {"--backend", backend},
                           {"--steps", "1"}, {"--warmup", "1"}, {"--trace", path}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) CHECK_OK(mo_config_set(c, kv[i][0], kv[i][1]));
    // MEMOPT_TEST_REDUCED (compute-sanitizer): the same model, precisions and checkpointing at small dims
    // (GPT 2 layers, C 128, 4 heads, T 64, V 512, B 2); the trace comparison is the same, the step ~100x cheaper
    if (reduced && !strcmp(model, "gpt")) {
        const char *small[][2] = {{"--layers", "2"}, {"--hidden", "128"}, {"--heads", "4"}, {"--seq", "64"}, {"--vocab", "512"},
                                  {"--batch", "2"}};
        for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) CHECK_OK(mo_config_set(c, small[i][0], small[i][1]));
    }
    CHECK_OK(mo_config_finish(c));
    mo_run_config rc;
    CHECK_OK(mo_config_combination(c, 0, &rc));
    mo_run_env env;
    CHECK_OK(mo_run_env_init(&env, &rc));
    mo_csv_row row;
    CHECK_OK(mo_run_execute(&rc, &env, &row, NULL));
    CHECK_MSG(!strcmp(row.status, "ok"), "%s %s %s: %s %s", backend, precision, ckpt, row.status, row.detail);
    free(c);
}

int main(void) {
    test_require_gpu();
    reduced = test_reduced("the GPT-2 124M dims (small GPT dims instead)");
    // model, preset, precision, ckpt
    const char *cases[][4] = {{"gpt", "gpt2-124m", "fp32", "none"}, {"gpt", "gpt2-124m", "fp32", "full"},
                              {"gpt", "gpt2-124m", "bf16", "selective"}, {"mlp", "mlp-small", "bf16", "full"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char pc[128], pd[128];
        snprintf(pc, sizeof pc, "/tmp/memopt_gpu_trace_%d_cuda.csv", (int)getpid());
        snprintf(pd, sizeof pd, "/tmp/memopt_gpu_trace_%d_dry.csv", (int)getpid());
        const char *const *k = cases[i];
        trace_of(k[0], k[1], k[2], k[3], "cuda", pc);
        trace_of(k[0], k[1], k[2], k[3], "dry", pd);
        char *a = slurp_after_first_line(pc), *b = slurp_after_first_line(pd);
        size_t lines = 0;
        for (const char *p = a ? a : ""; *p; p++) lines += *p == '\n';
        CHECK_MSG(a && b && lines > 100, "%s %s %s: traces missing or short (%zu lines)", k[1], k[2], k[3], lines);
        int same = a && b && !strcmp(a, b);
        if (!same && a && b) { // the first differing line, to see what moved
            const char *x = a, *y = b;
            while (*x && *x == *y) x++, y++;
            while (x > a && x[-1] != '\n') x--, y--;
            printf("  first difference:\n    cuda: %.160s\n    dry:  %.160s\n", x, y);
        }
        CHECK_MSG(same, "%s %s ckpt %s: the cuda trace differs from the dry one", k[1], k[2], k[3]);
        if (same) printf("  %s %s ckpt %s: cuda and dry traces equal (%zu lines)\n", k[1], k[2], k[3], lines);
        free(a);
        free(b);
        unlink(pc);
        unlink(pd);
    }
    return test_finish();
}
