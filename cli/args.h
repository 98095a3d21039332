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
    /* Values a --config file gave (cli_config_load): the key as written
     * ("lr", "optimizer.lr") and the file, else NULL (the command line's);
     * and the JSON type it had + 1 (0: the command line's). */
    const char *key[CLI_MAX_FLAGS];
    unsigned char json[CLI_MAX_FLAGS];
    const char *config;
} cli_args;

/* Parses argv[start..argc). Unknown flags and positional arguments are
 * errors; a table of more than CLI_MAX_FLAGS flags is a bug of the command
 * (CL_ERR_INTERNAL, and *a then knows no flag). */
cl_status cli_parse(cli_args *a, const cli_flag *flags, int nflags, int argc, char **argv, int start);
const char *cli_get(const cli_args *a, const char *name);
/* Gives flag `name` this value when the command line did not. */
void cli_default(cli_args *a, const char *name, const char *value);
/* Typed getters: absent flags leave *out unchanged. A value from a --config
 * file is named by its key and file in their messages, and the numeric ones
 * refuse a JSON string there (a number is expected). */
cl_status cli_int(const cli_args *a, const char *name, int *out, int min, int max);
cl_status cli_u64(const cli_args *a, const char *name, uint64_t *out);
cl_status cli_float(const cli_args *a, const char *name, float *out, double min, double max);
cl_status cli_bytes(const cli_args *a, const char *name, size_t *out);
/* --offload-optimizer none|host|disk as 0, 1, 2 */
cl_status cli_offload(const cli_args *a, int *out);
/* a number-format flag (--dtype, --grad-reduce-dtype): fp32 or bf16 as CL_F32, CL_BF16; *out kept when absent */
cl_status cli_format(const cli_args *a, const char *name, cl_dtype *out);
/* Sections of a --config file (cli/config.c): name (e.g. "optimizer") and its
 * keys, long flag names separated by spaces; a list ends with {NULL, NULL}.
 * A flag in no section is a top-level key only. */
typedef struct {
    const char *name;
    const char *keys;
} cli_section;
/* cleave train --config FILE: the settings of a JSON object whose keys are
 * the long flag names of a's table (at top level, or in the section that
 * lists them); a switch takes true or false, null is "not given", any other
 * flag a number or a string. A flag the command line gave keeps its value.
 * Refused (CL_ERR_INVALID or CL_ERR_FORMAT, one line naming the file and
 * the key): a file that is not a JSON object, an unknown key (with the
 * nearest known one when close), a value of the wrong type, and one setting
 * given twice with different values (top level and section, or a flag and
 * its "same as" alias). The file's text is kept for the process's life. */
cl_status cli_config_load(cli_args *a, const char *path, const cli_section *sections);
/* The section that lists flag name, or NULL. */
const char *cli_config_section(const cli_section *sections, const char *name);
/* The flag a "same as --X" flag stands for (its index), else f itself. */
int cli_flag_canon(const cli_args *a, int f);

/* Prints a command's help: its usage (the synopsis lines, "usage: cleave
 * ...", then after a blank line the description) and the flag table. With
 * cli_man_summary set it prints the same text as a man page instead (troff;
 * NAME from the synopsis's command words and the summary, SYNOPSIS,
 * DESCRIPTION, OPTIONS), so --help and the installed man pages have one
 * source. */
void cli_print_help(const char *usage, const cli_flag *flags, int nflags);
/* The same with the flags grouped under their --config sections' headings
 * (those in none first; cli/config.c). */
void cli_print_help_sections(const char *usage, const cli_flag *flags, int nflags, const cli_section *sections);
/* One flag's line of the help. */
void cli_print_flag(const cli_flag *f);
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
