/* `cleave checkpoint verify DIR`: checks a checkpoint without loading a
 * model (cl_checkpoint_verify: every file read, every size, content hash,
 * run id and step against what the checkpoint records). Prints a one-line
 * summary and exits 0, or names the first problem and exits 2; it never
 * changes a file. */
#include "args.h"
#include "cleave/train.h"

#include <stdio.h>
#include <string.h>

static const cli_flag verify_flags[] = {
    {"help", "h", 0, "show this help"},
};

static const char verify_usage[] =
    "usage: cleave checkpoint verify DIR\n\n"
    "Reads every file of the checkpoint in DIR (or the one DIR/latest names, as eval does) and checks\n"
    "each file's size and content hash, each tensor's (single file) or box's (sharded) content hash,\n"
    "and the run id and step every file records, against the marker (cleave-checkpoint.json) and the\n"
    "index. Prints one line and exits 0 when everything matches; else names the first file, tensor or\n"
    "box that differs and how, and exits 2. A checkpoint written before cleave recorded hashes, or a\n"
    "Hugging Face one, has nothing to check against: exit 2 too. No file is changed.";

int cleave_cmd_checkpoint(int argc, char **argv) {
    const char *sub = argc > 2 ? argv[2] : "";
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || (!strcmp(sub, "verify") && argc > 3 && argv[3][0] == '-')) {
        cli_args a;
        cl_status s = cli_parse(&a, verify_flags, NFLAGS(verify_flags), argc, argv, 3);
        if (s && strcmp(sub, "verify")) s = CL_OK; /* `cleave checkpoint --help` */
        if (s) return cli_fail(s);
        cli_print_help(verify_usage, verify_flags, NFLAGS(verify_flags));
        return 0;
    }
    if (strcmp(sub, "verify"))
        return cli_fail(cl_error(CL_ERR_INVALID, "checkpoint: unknown subcommand '%s' (verify)", sub));
    if (argc < 4) return cli_fail(cl_error(CL_ERR_INVALID, "checkpoint verify: a checkpoint directory DIR is required"));
    cli_args a;
    cl_status s = cli_parse(&a, verify_flags, NFLAGS(verify_flags), argc, argv, 4);
    if (s) return cli_fail(s);
    char summary[4600];
    if ((s = cl_checkpoint_verify(argv[3], summary, sizeof summary))) return cli_fail(s);
    printf("%s\n", summary);
    return 0;
}
