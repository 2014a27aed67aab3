/* cmd_chat.c: placeholder until the subcommand lands (development only). */
#include <stdio.h>
#include "cli.h"
int cmd_chat(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "minke chat: not built yet\n");
    return 1;
}
