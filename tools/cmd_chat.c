/* cmd_chat.c: `minke chat` (the default subcommand): an interactive,
 * multi-turn chat with line editing and history (libedit), streamed output
 * with the reasoning dimmed, slash commands, and Ctrl-C to stop a generation. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <editline/readline.h>

#include "cli.h"
#include "gen.h"

static void usage(FILE *f) {
    fprintf(f, "usage: minke [chat] [options]\n\n");
    cli_print_common_help(f);
    fprintf(f, "\nin the chat: /help /think /nothink /max /ctx N /read FILE /reset /quit; Ctrl-C stops an answer\n");
}

static void help_commands(void) {
    printf("  /think      thinking mode (reasoning shown dimmed)\n"
           "  /nothink    answer directly\n"
           "  /max        Think Max (falls back to /think below a 393216-token context)\n"
           "  /ctx N      new context window of N tokens (the conversation is kept)\n"
           "  /read FILE  send the file's text as the next message\n"
           "  /reset      forget the conversation\n"
           "  /quit       leave (also Ctrl-D)\n"
           "  Ctrl-C      stop the current answer\n");
}

static void on_sigint(int sig) {
    (void)sig;
    convo_interrupt = 1;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, k;
    char *b = malloc(cap);
    while (b && (k = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (cap - n < 2) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
        }
    }
    fclose(f);
    if (b) b[n] = 0;
    return b;
}

static char *next_line(int tty) {
    if (tty) return readline("minke> ");
    char buf[65536];
    if (!fgets(buf, sizeof buf, stdin)) return NULL;
    buf[strcspn(buf, "\n")] = 0;
    return strdup(buf);
}

static const char *mode_label(chat_mode m) {
    return m == CHAT_MODE_CHAT ? "no thinking" : m == CHAT_MODE_MAX ? "think max" : "thinking";
}

int cmd_chat(int argc, char **argv) {
    cli_opts o;
    cli_opts_default(&o);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        int r = cli_parse_common(&i, argc, argv, &o, "chat");
        if (r < 0) return 2;
        if (r == 0) {
            fprintf(stderr, "minke chat: unknown option '%s' (see minke chat --help)\n", argv[i]);
            return 2;
        }
    }
    convo *c = convo_open(&o);
    if (!c) return 1;
    int tty = isatty(0);
    char hist[4096] = "";
    const char *home = getenv("HOME");
    if (tty && home) {
        snprintf(hist, sizeof hist, "%s/.minke_history", home);
        read_history(hist);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL); /* no SA_RESTART: Ctrl-C at the prompt returns from readline */
    printf("minke chat: %s, context %d tokens, %s. /help for commands, /quit to leave.\n",
           o.demo ? "demo model (random weights)" : (o.model ? o.model : "model"), convo_ctx(c),
           mode_label(convo_mode(c)));
    fflush(stdout);
    for (;;) {
        convo_interrupt = 0;
        char *line = next_line(tty);
        if (!line) {
            if (convo_interrupt) { /* Ctrl-C at the prompt: a fresh prompt */
                printf("\n");
                continue;
            }
            printf("\n");
            break;
        }
        char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (!*s) {
            free(line);
            continue;
        }
        if (tty) add_history(s);
        char *msg = NULL;
        if (s[0] == '/') {
            char *arg = strchr(s, ' ');
            if (arg) {
                *arg++ = 0;
                while (*arg == ' ') arg++;
            }
            if (!strcmp(s, "/quit") || !strcmp(s, "/exit")) {
                free(line);
                break;
            } else if (!strcmp(s, "/help")) {
                help_commands();
            } else if (!strcmp(s, "/think")) {
                convo_set_mode(c, CHAT_MODE_THINKING);
                printf("mode: thinking\n");
            } else if (!strcmp(s, "/nothink")) {
                convo_set_mode(c, CHAT_MODE_CHAT);
                printf("mode: no thinking\n");
            } else if (!strcmp(s, "/max")) {
                convo_set_mode(c, CHAT_MODE_MAX);
                if (chat_mode_for_context(CHAT_MODE_MAX, convo_ctx(c)) != CHAT_MODE_MAX)
                    printf("mode: think max needs a context of at least %d tokens; using thinking until /ctx is raised\n",
                           CHAT_THINK_MAX_MIN_CONTEXT);
                else
                    printf("mode: think max\n");
            } else if (!strcmp(s, "/reset")) {
                convo_reset(c);
                printf("conversation cleared\n");
            } else if (!strcmp(s, "/ctx")) {
                char *e = NULL;
                long v = arg ? strtol(arg, &e, 10) : 0;
                if (!arg || *e || v < 16 || v > (1L << 30)) printf("usage: /ctx N (tokens, >= 16); now %d\n", convo_ctx(c));
                else if (convo_set_ctx(c, (int)v) == 0) printf("context: %ld tokens\n", v);
            } else if (!strcmp(s, "/read")) {
                if (!arg || !*arg) printf("usage: /read FILE\n");
                else if (!(msg = read_file(arg))) printf("cannot read %s: %s\n", arg, strerror(errno));
            } else {
                printf("unknown command %s (/help)\n", s);
            }
            fflush(stdout);
            if (!msg) {
                free(line);
                continue;
            }
        }
        turn_stats st;
        if (convo_turn(c, msg ? msg : s, stdout, &st) == 0) {
            fflush(stdout);
            convo_print_stats(&st, stderr);
        } else if (st.interrupted) {
            printf("\n[interrupted]\n");
        }
        fflush(stdout);
        free(msg);
        free(line);
    }
    if (tty && hist[0]) write_history(hist);
    convo_free(c);
    return 0;
}
