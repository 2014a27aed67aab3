/* cmd_bench.c: placeholder until the subcommand lands (development only). */
#include <stdio.h>
#include "cli.h"
int cmd_bench(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "minke bench: not built yet\n");
    return 1;
}
