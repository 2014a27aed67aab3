/* cmd_run.c: `minke run`: one answer to a prompt (-p TEXT, --prompt-file FILE,
 * or standard input), streamed to stdout; statistics go to stderr. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gen.h"

static void usage(FILE *f) {
    fprintf(f, "usage: minke run [-p PROMPT | --prompt-file FILE] [options]   (prompt on stdin otherwise)\n\n");
    cli_print_common_help(f);
}

static char *read_all(FILE *in) {
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
    size_t k;
    while ((k = fread(b + n, 1, cap - n - 1, in)) > 0) {
        n += k;
        if (cap - n < 2) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                return NULL;
            }
            b = nb;
        }
    }
    b[n] = 0;
    return b;
}

static void on_sigint(int sig) {
    (void)sig;
    convo_interrupt = 1;
}

int cmd_run(int argc, char **argv) {
    cli_opts o;
    cli_opts_default(&o);
    const char *prompt = NULL, *prompt_file = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if ((!strcmp(a, "-p") || !strcmp(a, "--prompt") || !strcmp(a, "--prompt-file")) && i + 1 < argc) {
            if (!strcmp(a, "--prompt-file")) prompt_file = argv[++i];
            else prompt = argv[++i];
            continue;
        }
        int r = cli_parse_common(&i, argc, argv, &o, "run");
        if (r < 0) return 2;
        if (r == 0) {
            fprintf(stderr, "minke run: unknown option '%s' (see minke run --help)\n", a);
            return 2;
        }
    }
    char *owned = NULL;
    if (prompt && prompt_file) {
        fprintf(stderr, "minke run: -p and --prompt-file are mutually exclusive\n");
        return 2;
    }
    if (prompt_file) {
        FILE *f = fopen(prompt_file, "rb");
        if (!f) {
            perror(prompt_file);
            return 1;
        }
        owned = read_all(f);
        fclose(f);
        prompt = owned;
    } else if (!prompt) {
        owned = read_all(stdin);
        prompt = owned;
        /* `echo text | minke run` means the same as -p text */
        size_t L = owned ? strlen(owned) : 0;
        while (L > 0 && (owned[L - 1] == '\n' || owned[L - 1] == '\r')) owned[--L] = 0;
    }
    if (!prompt || !*prompt) {
        fprintf(stderr, "minke run: empty prompt\n");
        free(owned);
        return 2;
    }
    o.color = 0; /* stdout of a one-shot run is for pipes: no escapes */
    convo *c = convo_open(&o);
    if (!c) {
        free(owned);
        return 1;
    }
    signal(SIGINT, on_sigint);
    turn_stats st;
    int rc = convo_turn(c, prompt, stdout, &st);
    if (rc == 0) convo_print_stats(&st, stderr);
    convo_free(c);
    free(owned);
    return rc == 0 ? 0 : 1;
}
