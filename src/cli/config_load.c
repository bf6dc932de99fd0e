/* The YAML configuration for the CLI's commands (see cli.h). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <corral/corral.h>

#include "cli/cli.h"
#include "base/util.h"
#include "config/config.h"

/* Loads the configuration (path, else $CORRAL_CONFIG, else
 * /etc/corral/corral.yaml when it exists) and defines its templates; sets
 * *state_dir from it unless already set, and the disk directory. The
 * calling thread, and the threads it starts after, take the control plane's
 * nice (control_nice): this process runs sandboxes. Prints why it cannot. */
int cli_load_config(const char *cmd, const char *path, const char **state_dir, const char *disk_dir,
                    const struct corral_config **loaded)
{
    corral_set_disk_dir(disk_dir);
    corral_set_template_dir(getenv("CORRAL_TEMPLATE_DIR"));
    if (!path || !*path)
        path = getenv("CORRAL_CONFIG");
    if ((!path || !*path) && access("/etc/corral/corral.yaml", F_OK) == 0)
        path = "/etc/corral/corral.yaml";
    if (!path || !*path) {
        corral_nice_thread(corral_control_nice());
        return 0;
    }
    static struct corral_config *cfg; /* lives as long as the process: templates point into it */
    struct corral_error err;
    if (corral_config_load(path, &cfg, &err) < 0 || corral_config_apply(cfg, &err) < 0) {
        fprintf(stderr, "corral %s: %s\n", cmd, err.message);
        return CLI_USAGE;
    }
    if (!*state_dir && cfg->state_dir)
        *state_dir = cfg->state_dir;
    if (!disk_dir && cfg->disk_dir)
        corral_set_disk_dir(cfg->disk_dir);
    const char *env_dir = getenv("CORRAL_TEMPLATE_DIR");
    if ((!env_dir || !*env_dir) && cfg->template_dir)
        corral_set_template_dir(cfg->template_dir);
    if (loaded)
        *loaded = cfg;
    corral_nice_thread(corral_control_nice());
    return 0;
}
