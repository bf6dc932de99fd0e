/* corral's command line: dispatches to one file per subcommand. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <unistd.h>
#include <string.h>

#include "base/util.h"
#include "cli/cli.h"
#include "kernel/agent.h"

static void usage(FILE *out)
{
    fputs("usage: corral COMMAND [OPTIONS]\n"
          "\n"
          "corral runs untrusted Python in sandboxes made of Linux namespaces, seccomp\n"
          "and cgroups.\n"
          "\n"
          "commands:\n"
          "  run      run Python code in a fresh sandbox and stream its output\n"
          "  repl     an interactive Python session in one sandbox\n"
          "  serve    the server: E2B's sandbox API for the official SDKs\n"
          "  mcp      an MCP server on stdin and stdout: sandboxes as tools for agents\n"
          "  doctor   check that this host can run sandboxes, and say how to fix it\n"
          "  template build templates from Debian packages; list, inspect, delete them\n"
          "  " AGENT_COMMAND "  (internal) what runs inside each sandbox; not for direct use\n"
          "\n"
          "options:\n"
          "  -h, --help     show this help (corral COMMAND --help for a command's options)\n"
          "  -V, --version  print the version\n",
          out);
}

/* Descriptors 0-2 must be open: otherwise the first pipe or file corral opens
 * would take their place and be mistaken for a standard stream. */
static void ensure_std_fds(void)
{
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) != fd)
            _exit(CLI_SANDBOX_ERROR);
}

/* `corral serve` is the program corral-serve beside this one ($CORRAL_SERVE). */
static int exec_serve(int argc, char **argv)
{
    char path[4200];
    const char *env = getenv("CORRAL_SERVE");
    if (env && *env)
        snprintf(path, sizeof(path), "%s", env);
    else
        corral_path_beside(NULL, "corral-serve", path, sizeof(path));
    argv[0] = "corral-serve";
    execv(path, argv);
    fprintf(stderr,
            "corral: cannot run %s: %s (install corral-serve beside corral, or set "
            "CORRAL_SERVE)\n",
            path, strerror(errno));
    return CLI_SANDBOX_ERROR;
}

int main(int argc, char **argv)
{
    ensure_std_fds();
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) {
        printf("corral %s\n", CORRAL_VERSION);
        return CLI_OK;
    }
    if (!strcmp(cmd, AGENT_COMMAND))
        return agent_main();
    if (!strcmp(cmd, "run"))
        return cli_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "repl"))
        return cli_repl(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve"))
        return exec_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "mcp"))
        return cli_mcp(argc - 1, argv + 1);
    if (!strcmp(cmd, "doctor"))
        return cli_doctor(argc - 1, argv + 1);
    if (!strcmp(cmd, "template"))
        return cli_template(argc - 1, argv + 1);
    fprintf(stderr, "corral: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return CLI_USAGE;
}
