/*
 * The sandbox agent: the process through which the daemon acts inside a
 * sandbox. It runs the corral binary itself (`corral sandbox-agent`), started
 * by the sandbox's init as its workload, as the sandbox user, with the control
 * socket on fd 0 (ctl.h). It spawns kernels and commands, signals them, reports
 * their exits and performs file operations, with exactly the sandbox user's
 * rights inside the sandbox's root. It holds no privilege the sandbox's code
 * lacks; the daemon trusts nothing it says.
 */
#ifndef CORRAL_KERNEL_AGENT_H
#define CORRAL_KERNEL_AGENT_H

#define AGENT_COMMAND "sandbox-agent"

/* Serves the control socket on fd 0 until it closes; returns the exit code. */
int agent_main(void);

#endif
