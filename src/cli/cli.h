/* Subcommands of the corral CLI; each returns the process exit code. */
#ifndef CORRAL_CLI_H
#define CORRAL_CLI_H

/* Exit codes shared by every subcommand. */
#define CLI_OK            0
#define CLI_CODE_FAILED   1 /* the user's code raised, exited non-zero or hit a limit */
#define CLI_USAGE         2
#define CLI_SANDBOX_ERROR 3 /* the sandbox itself could not be made or died */

int cli_run(int argc, char **argv);
int cli_doctor(int argc, char **argv);

#endif
