/* cmd_logits.c: placeholder until the subcommand lands (development only). */
#include <stdio.h>
#include "cli.h"
int cmd_logits(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "minke logits: not built yet\n");
    return 1;
}
