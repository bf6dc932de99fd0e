/*
 * corral-serve: `corral serve`, in a program of its own. Only it links the
 * servers and the gateway (libcurl, SQLite): loading those would cost every
 * other corral command a few milliseconds. `corral serve`
 * executes it.
 */
#include <fcntl.h>
#include <unistd.h>

#include "cli/cli.h"

int main(int argc, char **argv)
{
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) != fd)
            _exit(CLI_SANDBOX_ERROR);
    return cli_serve(argc, argv);
}
