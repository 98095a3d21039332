# Sourced by the tests and scripts that link a tests/tools/ driver against a
# build's libcleave.a (tests/cli_bpe_node.sh, tests/cli_hf_tokenizer.sh,
# scripts/unicode_classes.sh):
#   driver_make BUILD [TARGET...]  makes BUILD's libcleave.a and cleave.pc (and
#       the targets), with SAN=1 when BUILD's name says san, and sets
#       driver_libs to what libcleave.a needs, as the build linked it
#       (cleave.pc's Libs.private: xxhash, OpenMP, oneDNN, zlib, PCRE2, MPI);
#   driver_link BUILD SRC OUT      compiles the driver SRC into OUT with them
#       (and the sanitizers for a san build);
#   node_unicode                   node's Unicode version (process.versions.unicode),
#       or CLEAVE_TEST_NODE_UNICODE when set: to check the tests' path for a
#       node whose Unicode is not pretok's (e.g. Debian 12's node 18, 15.0)
#       on a machine whose node is 17.0's;
#   pretok_unicode                 the Unicode version of src/data/pretok.c's
#       added letters and numbers (CL_PRETOK_UNICODE in src/data/pretok.h).
driver_make() {
    local b=$1 sanmake=()
    shift
    case "$b" in *san*) sanmake=(SAN=1) ;; esac
    make -s "${sanmake[@]}" BUILD="$b" "$b/libcleave.a" "$b/cleave.pc" "$@" >/dev/null || return 1
    driver_libs=$(sed -n 's/^Libs.private: //p' "$b/cleave.pc")
}
driver_link() {
    local san=""
    case "$1" in *san*) san="-fsanitize=address,undefined -fno-omit-frame-pointer" ;; esac
    # shellcheck disable=SC2086
    cc -std=c11 -O1 -g -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude -Isrc $san "$2" "$1/libcleave.a" $driver_libs -o "$3"
}
node_unicode() {
    if [ -n "${CLEAVE_TEST_NODE_UNICODE:-}" ]; then echo "$CLEAVE_TEST_NODE_UNICODE"; else node -p process.versions.unicode; fi
}
pretok_unicode() { sed -n 's/^#define CL_PRETOK_UNICODE "\(.*\)"$/\1/p' src/data/pretok.h; }
