/* cmd_parse.c: placeholder until the subcommand lands (development only). */
#include <stdio.h>
#include "cli.h"
int cmd_parse(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "minke parse: not built yet\n");
    return 1;
}
