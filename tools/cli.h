/* cli.h: the subcommands of the minke program (one file each in tools/). */
#ifndef MINKE_CLI_H
#define MINKE_CLI_H

int cmd_chat(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_render(int argc, char **argv);
int cmd_parse(int argc, char **argv);
int cmd_logits(int argc, char **argv);

/* --gpus N|all -> minke_model_params.n_gpus (all: -1); -1 when v is neither (gen.c) */
int cli_parse_gpus(const char *v, int *out);

#endif
