/* Subcommands of the corral CLI; each returns the process exit code. */
#ifndef CORRAL_CLI_H
#define CORRAL_CLI_H

/* Exit codes shared by every subcommand. */
#define CLI_OK            0
#define CLI_CODE_FAILED   1 /* the user's code raised, exited non-zero or hit a limit */
#define CLI_USAGE         2
#define CLI_SANDBOX_ERROR 3 /* the sandbox itself could not be made or died */

#include <stdbool.h>

#include "corral/corral.h"

int cli_run(int argc, char **argv);
int cli_repl(int argc, char **argv);
int cli_serve(int argc, char **argv);
/* `corral mcp`: an MCP server on stdio (mcp.c). */
int cli_mcp(int argc, char **argv);
/* Loads the YAML configuration (path, $CORRAL_CONFIG or /etc/corral/corral.yaml)
 * and defines its templates; fills *state_dir unless set, and makes
 * sandboxes' disks in disk_dir (else the file's, else the default). 0 or
 * CLI_USAGE. */
struct corral_config;
int cli_load_config(const char *cmd, const char *path, const char **state_dir, const char *disk_dir,
                    const struct corral_config **loaded);

/* Whether bash text typed into `corral repl -l bash` needs more lines
 * before it can run, as bash's own prompt tells (repl_bash.c). */
bool cli_bash_incomplete(const char *text, size_t len);

/* Showing executions (output.c). */
struct cli_output {
    const char *out_dir; /* where rich results are saved, or NULL */
    unsigned saved;      /* files written so far */
    unsigned unsaved;    /* rich results not saved for want of --out */
    bool prompts;        /* Out[n]: before main results (an interactive repl) */
    bool quiet;
    long long count; /* the current execution count, for prompts */
};
void cli_output_init(struct cli_output *o, struct corral_exec_options *x);
int cli_prepare_out_dir(const char *dir);
int cli_doctor(int argc, char **argv);
int cli_template(int argc, char **argv);

#endif
