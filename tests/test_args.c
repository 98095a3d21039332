/* Tests of the command line's flag parser (cli/args.c). The cli/ code is not
 * in libcleave.a, so this test compiles cli/args.c into itself (the include
 * below; the Makefile rebuilds it when cli/args.c or cli/args.h change).
 *
 * A table of more flags than the old fixed 64 slots: every one is found,
 * by name, alias and --name=value, the last included; cli_default reaches
 * past 64; a table larger than CLI_MAX_FLAGS is refused as a bug, with no
 * flag known afterwards. cli_parse_model (train's and bench step's model
 * flags) lives here too: a preset, a custom shape, and its errors. */
#include <stdio.h>
#include <string.h>

#include "../cli/args.c"
#include "common/check.h"

#define N 100

static cli_flag table[CLI_MAX_FLAGS + 1];
static char names[CLI_MAX_FLAGS + 1][16], aliases[CLI_MAX_FLAGS + 1][16];

static void make_table(int n) {
    for (int i = 0; i < n; i++) {
        snprintf(names[i], sizeof names[i], "flag%d", i);
        snprintf(aliases[i], sizeof aliases[i], i % 10 == 0 ? "a%d" : "", i);
        table[i] = (cli_flag){names[i], aliases[i], i % 2 == 0, "a test flag"};
    }
}

static void test_many_flags(void) {
    make_table(N);
    char *argv[] = {"cleave", "cmd", "--flag98", "ninety-eight", "--flag70=seventy", "-a90", "ninety", "--flag99", "--flag65",
                    "--flag0", "zero", "--flag1"};
    int argc = (int)(sizeof argv / sizeof argv[0]);
    cli_args a;
    CHECK_OK(cli_parse(&a, table, N, argc, argv, 2));
    const char *want[][2] = {{"flag98", "ninety-eight"}, {"flag70", "seventy"}, {"flag90", "ninety"}, {"flag99", "1"},
                             {"flag65", "1"},         {"flag0", "zero"},     {"flag1", "1"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *v = cli_get(&a, want[i][0]);
        CHECK(v && !strcmp(v, want[i][1]), "--%s is '%s', want '%s'", want[i][0], v ? v : "(absent)", want[i][1]);
    }
    CHECK(cli_get(&a, "flag97") == NULL && cli_get(&a, "flag64") == NULL, "flags not given are absent");
    cli_default(&a, "flag96", "dflt");
    cli_default(&a, "flag98", "dflt");
    CHECK(cli_get(&a, "flag96") && !strcmp(cli_get(&a, "flag96"), "dflt"), "cli_default past 64 flags");
    CHECK(!strcmp(cli_get(&a, "flag98"), "ninety-eight"), "cli_default replaced a given value");
    int x = 0;
    char *argv2[] = {"cleave", "cmd", "--flag96", "96"};
    CHECK_OK(cli_parse(&a, table, N, 4, argv2, 2));
    CHECK_OK(cli_int(&a, "flag96", &x, 0, 100));
    CHECK(x == 96, "--flag96 parsed as %d", x);
    char *argv3[] = {"cleave", "cmd", "--flag101"};
    CHECK(cli_parse(&a, table, N, 3, argv3, 2) == CL_ERR_INVALID && strstr(cl_last_error(), "unknown flag '--flag101'"),
          "a flag past the table: %s", cl_last_error());
}

static void test_table_limit(void) {
    make_table(CLI_MAX_FLAGS + 1);
    char *argv[] = {"cleave", "cmd", "--flag1"};
    cli_args a;
    CHECK_OK(cli_parse(&a, table, CLI_MAX_FLAGS, 3, argv, 2));
    CHECK(cli_get(&a, "flag1") != NULL, "--flag1 in a full table");
    cl_status s = cli_parse(&a, table, CLI_MAX_FLAGS + 1, 3, argv, 2);
    CHECK(s == CL_ERR_INTERNAL && strstr(cl_last_error(), "CLI_MAX_FLAGS"), "an oversized table: %s: %s", cl_status_name(s),
          cl_last_error());
    CHECK(a.nflags == 0 && cli_get(&a, "flag1") == NULL, "an oversized table left flags known");
}

static const cli_flag model_flags[] = {{"model", "", 1, ""},   {"layers", "", 1, ""}, {"channels", "", 1, ""}, {"heads", "", 1, ""},
                                       {"vocab", "", 1, ""},   {"context", "", 1, ""}, {"seq-len", "", 1, ""}};

static cl_status parse_model(int argc, char **argv, cl_model_config *mc, int *T) {
    cli_args a;
    CL_TRY(cli_parse(&a, model_flags, NFLAGS(model_flags), argc, argv, 0));
    return cli_parse_model(&a, mc, T);
}

static void test_model_flags(void) {
    cl_model_config mc;
    int T = -1;
    char *none[] = {NULL};
    CHECK_OK(parse_model(0, none, &mc, &T));
    CHECK(!strcmp(mc.name, "gpt2-tiny") && T == 0, "no flags: %s, seq-len %d", mc.name, T);
    char *custom[] = {"--layers", "3", "--seq-len", "48"};
    CHECK_OK(parse_model(4, custom, &mc, &T));
    CHECK(!strcmp(mc.name, "custom") && mc.layers == 3 && T == 48, "custom: %s, %d layers, seq-len %d", mc.name, mc.layers, T);
    char *mlp[] = {"--model", "mlp", "--heads", "2"};
    CHECK(parse_model(4, mlp, &mc, &T) == CL_ERR_INVALID && strstr(cl_last_error(), "--heads applies to GPT models"), "mlp --heads: %s",
          cl_last_error());
    char *longer[] = {"--context", "16", "--seq-len", "32"};
    CHECK(parse_model(4, longer, &mc, &T) == CL_ERR_INVALID && strstr(cl_last_error(), "longer than the model's context"),
          "seq-len past the context: %s", cl_last_error());
}

int main(void) {
    test_many_flags();
    test_table_limit();
    test_model_flags();
    return cl_test_report("test_args");
}
