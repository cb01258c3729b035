// The memopt command line: argv to an mo_config (no printing, no exit), --help text, and the
// dispatch to one hook per subcommand. bench/main.c prints errors and picks the exit code.
//
// Hooks. cli.c defines each one weak, printing nothing and failing with MO_ERR_UNSUPPORTED
// ("not implemented yet"); the engine overrides it with a normal (strong) definition elsewhere.
// A hook reports failure through its status with an MO_FAIL message (main prints it once, as
// "memopt <cmd>: <message>"): MO_ERR_INVALID means bad input (exit 2), anything else a failed
// run or comparison (exit 1). Everything a hook receives is already validated: single
// configurations by mo_run_config_validate, lists value by value (sweep and plan still call
// mo_run_config_validate on each combination; invalid ones become rows with status invalid).
#ifndef MEMOPT_BENCH_CLI_H
#define MEMOPT_BENCH_CLI_H

#include <stdio.h>
#include "bench/config.h"
#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

mo_status mo_cmd_run(const mo_run_config *cfg);    // one configuration
mo_status mo_cmd_sweep(const mo_config *cfg);      // mo_config_count / mo_config_combination; --csv, --resume
mo_status mo_cmd_claims(const mo_run_config *cfg); // the base configuration the claims vary
mo_status mo_cmd_plan(const mo_config *cfg);       // cfg->gpu or cfg->mem_bytes (neither: base.device_mem_bytes)
mo_status mo_cmd_mincap(const mo_run_config *cfg);
mo_status mo_cmd_compare(const mo_config *cfg);    // cfg->args[0] BASE.csv, cfg->args[1] NEW.csv, cfg->tolerance
mo_status mo_cmd_plot(const mo_config *cfg);       // cfg->args[0] RESULTS.csv, cfg->base.out_dir
mo_status mo_cmd_devices(void);                    // implemented in cli.c

typedef enum mo_cli_action { MO_CLI_EXECUTE = 0, MO_CLI_HELP, MO_CLI_VERSION } mo_cli_action;

typedef struct mo_cli {
    mo_cli_action action;
    mo_config cfg; // cfg.command is the subcommand (MO_CMD_NONE for top-level --help/--version)
} mo_cli;

// argv[1] is the subcommand (or --help / -h / help / --version). Flags: "--flag value" or
// "--flag=value"; switches take no value; "--" ends the flags. Any error is MO_ERR_INVALID with a
// one-line message (mo_errmsg_plain) naming the flag or argument.
mo_status mo_cli_parse(int argc, char **argv, mo_cli *out);
// Runs the subcommand's hook (parse first).
mo_status mo_cli_execute(const mo_cli *cli);

void mo_cli_usage(FILE *f, mo_command cmd); // MO_CMD_NONE: every subcommand and flag; else that command's
void mo_cli_version(FILE *f); // "memopt X.Y.Z" and what it was built with

#ifdef __cplusplus
}
#endif

#endif
