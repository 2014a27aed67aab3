/* main.c: the minke program; dispatches to one subcommand (chat by default). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} subcommand;

static const subcommand commands[] = {
    {"chat", cmd_chat, "interactive chat (the default)"},
    {"run", cmd_run, "one answer to -p PROMPT (or stdin)"},
    {"serve", cmd_serve, "OpenAI/Anthropic-compatible HTTP server"},
    {"bench", cmd_bench, "prefill/decode speed at growing context"},
    {"convert", cmd_convert, "official checkpoint or GGUF -> GGUF (type policy)"},
    {"mkmodel", cmd_mkmodel, "write a synthetic DeepSeek V4 GGUF"},
    {"info", cmd_info, "print a GGUF's metadata, tensors and loadability"},
    {"tokenize", cmd_tokenize, "JSONL text <-> ids with the GGUF tokenizer"},
    {"render", cmd_render, "JSONL chat messages -> prompt text (official encoding)"},
    {"parse", cmd_parse, "JSONL completion text -> reasoning, content, tool calls"},
    {"logits", cmd_logits, "run token ids, write float32 logits"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: minke [SUBCOMMAND] [OPTIONS]\n\nsubcommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(out, "\n`minke SUBCOMMAND --help` for its options; `minke --demo` chats with a small synthetic model.\n");
}

int main(int argc, char **argv) {
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help"))) {
        usage(stdout);
        return 0;
    }
    if (argc >= 2 && argv[1][0] != '-') {
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
            if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
        fprintf(stderr, "minke: unknown subcommand '%s'\n\n", argv[1]);
        usage(stderr);
        return 2;
    }
    /* no subcommand: chat, with all options passed through (argv[0] plays the subcommand) */
    return cmd_chat(argc, argv);
}
