/* cmd_run.c: placeholder until the subcommand lands (development only). */
#include <stdio.h>
#include "cli.h"
int cmd_run(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "minke run: not built yet\n");
    return 1;
}
