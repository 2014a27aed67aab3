/* cmd_convert.c: placeholder until the subcommand lands (development only). */
#include <stdio.h>
#include "cli.h"
int cmd_convert(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "minke convert: not built yet\n");
    return 1;
}
