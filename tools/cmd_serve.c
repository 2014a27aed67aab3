/* cmd_serve.c: placeholder until the subcommand lands (development only). */
#include <stdio.h>
#include "cli.h"
int cmd_serve(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "minke serve: not built yet\n");
    return 1;
}
