/* Command-line parsing helpers shared by the subcommands. Every parse error
 * is a one-line message naming the flag and the value; the caller exits 2. */
#ifndef CLEAVE_CLI_ARGS_H
#define CLEAVE_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "cleave/core.h"
#include "cleave/model.h"

/* A flag spec: name without dashes ("steps"), alias ("" if none), whether it takes a value. */
typedef struct {
    const char *name;
    const char *alias;
    int takes_value;
    const char *help;
} cli_flag;

#define NFLAGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The most flags one command's table may have (train has about 55). */
#define CLI_MAX_FLAGS 128

typedef struct {
    const cli_flag *flags;
    int nflags;
    const char *values[CLI_MAX_FLAGS]; /* value per flag (or "1" for switches), NULL if absent */
} cli_args;

/* Parses argv[start..argc). Unknown flags and positional arguments are
 * errors; a table of more than CLI_MAX_FLAGS flags is a bug of the command
 * (CL_ERR_INTERNAL, and *a then knows no flag). */
cl_status cli_parse(cli_args *a, const cli_flag *flags, int nflags, int argc, char **argv, int start);
const char *cli_get(const cli_args *a, const char *name);
/* Gives flag `name` this value when the command line did not. */
void cli_default(cli_args *a, const char *name, const char *value);
/* Typed getters: absent flags leave *out unchanged. */
cl_status cli_int(const cli_args *a, const char *name, int *out, int min, int max);
cl_status cli_u64(const cli_args *a, const char *name, uint64_t *out);
cl_status cli_float(const cli_args *a, const char *name, float *out, double min, double max);
cl_status cli_bytes(const cli_args *a, const char *name, size_t *out);
/* --offload-optimizer none|host|disk as 0, 1, 2 */
cl_status cli_offload(const cli_args *a, int *out);
/* Prints a command's help: its usage (the synopsis lines, "usage: cleave
 * ...", then after a blank line the description) and the flag table. With
 * cli_man_summary set it prints the same text as a man page instead (troff;
 * NAME from the synopsis's command words and the summary, SYNOPSIS,
 * DESCRIPTION, OPTIONS), so --help and the installed man pages have one
 * source. */
void cli_print_help(const char *usage, const cli_flag *flags, int nflags);
/* Set by `cleave [COMMAND] --man` (cli/main.c) to the command's one-line
 * summary; NULL (the default) for plain help. */
extern const char *cli_man_summary;
/* Exit status for a failed status: 2 for the user's input, 1 for bugs and failures. */
int cli_exit_status(cl_status s);
/* Prints "cleave: error: MSG" and returns cli_exit_status(s). */
int cli_fail(cl_status s);

/* The model flags (--model, --layers, --channels, --heads, --vocab, --context,
 * --seq-len) into a checked config (cli/args.c; used by train and bench step). */
cl_status cli_parse_model(const cli_args *a, cl_model_config *mc, int *seq_len);
/* The same over base (a checkpoint's model) where --model is not given. */
cl_status cli_parse_model_from(const cli_args *a, const cl_model_config *base, cl_model_config *mc, int *seq_len);

/* `cleave plot`'s loss chart of one run from its log's text (JSON lines as
 * train --log-file writes them), written to path; label names the run
 * (cli/plot_cmd.c, for train --plot). */
cl_status cli_plot_text(const char *path, const char *label, const char *text, size_t len);

#endif
