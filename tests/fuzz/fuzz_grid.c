// libFuzzer harness: a --grid FILE of memopt sweep (bench/config.c). The input is the file. Parsing
// it must give MO_OK or a message naming --grid, and never crash; on MO_OK the sweep's combinations
// (at most MO_COMBINATIONS_MAX) decode, each either valid or refused with a message.
#include "bench/config.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (n > 65536) return 0;
    const char *path = fuzz_file(data, n, ".grid");
    mo_config *c = malloc(sizeof *c);
    if (!c) abort();
    mo_config_defaults(c, MO_CMD_SWEEP);
    mo_status st = mo_config_set(c, "--grid", path);
    if (st != MO_OK)
        FUZZ_ASSERT(!strncmp(mo_errmsg_plain(), "--grid", 6), "a grid error that does not name --grid: %s", mo_errmsg_plain());
    if (st == MO_OK && (st = mo_config_finish(c)) != MO_OK) FUZZ_ASSERT(*mo_errmsg_plain(), "no message");
    if (st == MO_OK) {
        size_t count = mo_config_count(c);
        FUZZ_ASSERT(count >= 1 && count <= MO_COMBINATIONS_MAX, "%zu combinations", count);
        for (size_t i = 0; i < count && i < 256; i++) {
            mo_run_config rc;
            FUZZ_ASSERT(mo_config_combination(c, i, &rc) == MO_OK, "%s", mo_errmsg());
            if (mo_run_config_validate(&rc) != MO_OK) FUZZ_ASSERT(*mo_errmsg_plain(), "no message");
        }
    }
    free(c);
    return 0;
}
