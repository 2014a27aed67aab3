/* cmd_render.c: placeholder until the subcommand lands (development only). */
#include <stdio.h>
#include "cli.h"
int cmd_render(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "minke render: not built yet\n");
    return 1;
}
