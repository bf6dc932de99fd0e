/*
 * The sandbox agent: the process through which the daemon acts inside a
 * sandbox. It runs the corral binary itself (`corral sandbox-agent`), started
 * by the sandbox's init as its workload, or, in a sandbox forked from a zygote,
 * the zygote's copy of this code, as the sandbox user, with the control
 * socket on fd 0 (ctl.h). It spawns kernels and commands, signals them, reports
 * their exits and performs file operations, with exactly the sandbox user's
 * rights inside the sandbox's root. It holds no privilege the sandbox's code
 * lacks; the daemon trusts nothing it says.
 */
#ifndef CORRAL_KERNEL_AGENT_H
#define CORRAL_KERNEL_AGENT_H

#define AGENT_COMMAND "sandbox-agent"

#include <stdbool.h>

/* Serves the control socket on fd 0 until it closes; returns the exit code. */
int agent_main(void);

/* Set by a zygote whose memory holds a ready interpreter: CTL_SPAWN_PRISTINE
 * requests fork the agent and call this in the child, with the descriptors,
 * signals and working directory of the new process already in place. argv
 * is the request's; `kernel` says whether to serve as a kernel or run argv[1]
 * as a script. Must not return. */
extern void (*agent_pristine)(char *const *envp, char *const *argv, bool kernel);

#endif
