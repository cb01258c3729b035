// libFuzzer harness: the command line. The input is argv[1..], one argument per line (so the
// corpus files are readable: "run\n--batch\n8\n"). mo_cli_parse must return MO_OK or a status with
// a one-line message, and never crash; a parsed configuration's combinations must all decode.
// --grid files are the grid harness's: a --grid value is replaced by a path that does not exist.
#include "bench/cli.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (n > 8192) return 0;
    char *t = fuzz_text(data, n);
    char *argv[66];
    int argc = 0;
    argv[argc++] = "memopt";
    for (char *p = t; argc < 65;) {
        argv[argc++] = p;
        char *nl = strchr(p, '\n');
        if (!nl) break;
        *nl = '\0';
        p = nl + 1;
    }
    static char nogrid[] = "/nonexistent/memopt-fuzz.grid";
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--grid=", 7)) argv[i] = "--grid=/nonexistent/memopt-fuzz.grid";
        else if (!strcmp(argv[i], "--grid") && i + 1 < argc) argv[++i] = nogrid;
    }
    argv[argc] = NULL;
    mo_cli *cli = malloc(sizeof *cli);
    if (!cli) abort();
    mo_status st = mo_cli_parse(argc, argv, cli);
    if (st == MO_OK) {
        const mo_config *c = &cli->cfg;
        size_t count = mo_config_count(c);
        if (cli->action == MO_CLI_EXECUTE && c->command != MO_CMD_COMPARE && c->command != MO_CMD_PLOT &&
            c->command != MO_CMD_DEVICES) {
            FUZZ_ASSERT(count >= 1 && count <= MO_COMBINATIONS_MAX, "%zu combinations", count);
            for (size_t i = 0; i < count && i < 64; i++) {
                mo_run_config rc;
                FUZZ_ASSERT(mo_config_combination(c, i, &rc) == MO_OK, "%s", mo_errmsg());
                (void)mo_run_config_validate(&rc);
            }
        }
    } else {
        const char *m = mo_errmsg_plain();
        FUZZ_ASSERT(*m, "status %s without a message", mo_status_name(st));
    }
    free(cli);
    free(t);
    return 0;
}
