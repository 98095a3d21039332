#!/usr/bin/env bash
# No circle of calls between the library's files (issue 28): scripts/
# call_cycles.py over this build's objects finds none; and the script itself
# on small objects made here: a circle of two files is found and named (a
# file that only calls into it is not part of it), a chain is not a circle,
# cli/ objects are left out, and no objects at all is an error.
set -u
source "$(dirname "$0")/lib.sh"
cc=${CC:-cc}
py=/usr/bin/python3
script=scripts/call_cycles.py

out=$("$py" "$script" "$BUILD/obj" 2>&1)
_rc=$?
check '[ $_rc -eq 0 ]' "call_cycles on $BUILD/obj: exit $_rc, want 0 (no circle):$(excerpt 30 "$out")"

# obj NAME DEFINES CALLS...: $tmp/NAME.o defining function DEFINES that calls each of CALLS
obj() {
    local name=$1 def=$2
    shift 2
    mkdir -p "$(dirname "$tmp/$name")"
    { for c in "$@"; do echo "void $c(void);"; done
      echo "void $def(void) {"
      for c in "$@"; do echo "    $c();"; done
      echo "}"; } > "$tmp/$name.c"
    "$cc" -c -o "$tmp/$name.o" "$tmp/$name.c"
}
obj circle/m/a fa fb
obj circle/m/b fb fa
obj circle/n/c fc fa
obj circle/cli/x fx fc   # cli/ calls into the library and back would not count
obj circle/cli/y fy fx
obj circle/n/d fd fy
out=$("$py" "$script" "$tmp/circle" 2>&1)
_rc=$?
check '[ $_rc -eq 1 ]' "a circle of two files: exit $_rc, want 1:$(excerpt 10 "$out")"
check 'printf "%s\n" "$out" | grep -qx "circle: m/a.c m/b.c"' "the circle named as its two files:$(excerpt 10 "$out")"
check 'printf "%s\n" "$out" | grep -q "m/a.c -> m/b.c: fb" && printf "%s\n" "$out" | grep -q "m/b.c -> m/a.c: fa"' \
    "each call inside the circle listed with its symbol:$(excerpt 10 "$out")"
check '! printf "%s\n" "$out" | grep -q "n/c.c\|n/d.c\|cli/"' "a caller outside the circle and cli/ are not in it:$(excerpt 10 "$out")"

obj chain/m/a fa fb
obj chain/m/b fb fc
obj chain/n/c fc
out=$("$py" "$script" "$tmp/chain" 2>&1)
_rc=$?
check '[ $_rc -eq 0 ]' "a chain a -> b -> c: exit $_rc, want 0:$(excerpt 10 "$out")"

mkdir -p "$tmp/empty"
out=$("$py" "$script" "$tmp/empty" 2>&1)
_rc=$?
check '[ $_rc -eq 2 ] && printf "%s" "$out" | grep -q "no objects"' "no objects: exit $_rc, want 2 and a message:$(excerpt 5 "$out")"
finish cli_call_cycles
