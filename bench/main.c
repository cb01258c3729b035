// The memopt program. The one place that turns a status into an exit code and a message:
//   0 success; 1 a run or comparison failed; 2 bad input, with one line "memopt: <reason>".
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/cli.h"

// Messages are printed on one line whatever they hold: stderr is parsed by scripts and tests.
static void print_line(const char *prefix, const char *msg) {
    fputs(prefix, stderr);
    for (const char *p = msg; *p; p++) fputc(*p == '\n' || *p == '\r' ? ' ' : *p, stderr);
    fputc('\n', stderr);
}

int main(int argc, char **argv) {
    mo_cli *cli = malloc(sizeof *cli); // a few tens of KB: keep it off the stack
    if (!cli) {
        fputs("memopt: out of host memory\n", stderr);
        return 1;
    }
    mo_status st = mo_cli_parse(argc, argv, cli);
    if (st != MO_OK) {
        print_line("memopt: ", mo_errmsg_plain());
        free(cli);
        return 2;
    }
    st = mo_cli_execute(cli);
    int code = 0;
    if (st == MO_ERR_INVALID) {
        print_line("memopt: ", mo_errmsg_plain());
        code = 2;
    } else if (st != MO_OK) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "memopt %s: ", mo_command_name(cli->cfg.command));
        const char *m = mo_errmsg_plain();
        print_line(prefix, *m ? m : mo_status_name(st));
        code = 1;
    }
    free(cli);
    fflush(stdout);
    return code;
}
