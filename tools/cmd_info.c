/* cmd_info.c: placeholder until the subcommand lands (development only). */
#include <stdio.h>
#include "cli.h"
int cmd_info(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "minke info: not built yet\n");
    return 1;
}
