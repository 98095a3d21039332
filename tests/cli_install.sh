#!/usr/bin/env bash
# make install / uninstall into a DESTDIR: the header's worked example built
# against the installed files with pkg-config alone (shared and static) and
# run; the installed cleave trains from another directory with CLEAVE_DATA
# unset and set, and says where it looked when no data is found; its
# --tokenizer hf reads the installed llama3/tokenizer.json; every
# installed man page renders without warnings; uninstall leaves nothing.
source tests/lib.sh
san=0
[ "$BUILD" = build-san ] && san=1
root="$tmp/root"
prefix=/usr/local
top="$root$prefix"
inst=$(make -s install BUILD="$BUILD" SAN=$san DESTDIR="$root" PREFIX=$prefix 2>&1)
_rc=$?; check '[ $_rc -eq 0 ] && [ -x "$top/bin/cleave" ]' "make install failed$(excerpt 10 "$inst")"
for f in lib/libcleave.a lib/libcleave.so lib/libcleave.so.0 lib/pkgconfig/cleave.pc include/cleave/cleave.h \
         share/man/man1/cleave.1 share/man/man1/cleave-train.1 share/cleave/kjv.txt share/cleave/digits.csv.gz \
         share/cleave/gpt2/encoder.json share/cleave/gpt2/vocab.bpe share/cleave/llama3/tokenizer.json; do
    check '[ -e "$top/$f" ]' "make install wrote no $prefix/$f"
done
check 'readelf -d "$top/lib/libcleave.so" | grep -q "Library soname: \[libcleave.so.0\]"' \
    "libcleave.so's soname: $(readelf -d "$top/lib/libcleave.so" | grep SONAME)"
check '! ls "$top/include/cleave" | grep -q "kernels.h\|prof.h"' "internal headers installed: $(ls "$top/include/cleave")"

# the worked example of the installed cleave.h, built with pkg-config only
sed -n '/^ \* ---- example begin ----$/,/^ \* ---- example end ----$/p' "$top/include/cleave/cleave.h" | sed '1d;$d' > "$tmp/quickstart.c"
check 'grep -q "cl_model_describe" "$tmp/quickstart.c" && cmp -s "$tmp/quickstart.c" "$BUILD/examples/quickstart.c"' \
    "the installed cleave.h's example is not the one make builds"
export PKG_CONFIG_PATH="$top/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$root"
out=$(cc -std=c11 -Wall -Wextra -Werror "$tmp/quickstart.c" $(pkg-config --cflags --libs cleave) -o "$tmp/qs_shared" 2>&1)
_rc=$?; check '[ $_rc -eq 0 ]' "building the example against the shared library failed$(excerpt 10 "$out")"
out=$(cc -std=c11 -Wall -Wextra -Werror "$tmp/quickstart.c" $(pkg-config --static --cflags --libs cleave | sed 's/-lcleave\b/-l:libcleave.a/') \
      -o "$tmp/qs_static" 2>&1)
_rc=$?; check '[ $_rc -eq 0 ]' "building the example against libcleave.a failed$(excerpt 10 "$out")"
check 'LD_LIBRARY_PATH="$top/lib" ldd "$tmp/qs_shared" | grep -q "libcleave.so.0 => $top/lib/libcleave.so.0"' \
    "the shared example does not load the installed libcleave.so.0: $(LD_LIBRARY_PATH="$top/lib" ldd "$tmp/qs_shared" 2>&1 | grep cleave)"
check '! ldd "$tmp/qs_static" | grep -q libcleave' "the static example needs libcleave.so"
for kind in shared static; do
    out=$(cd "$tmp" && LD_LIBRARY_PATH="$top/lib" "./qs_$kind" 2>&1)
    rc=$?
    first=$(printf '%s\n' "$out" | sed -n 's/^step 1: loss \([0-9.]*\),.*/\1/p')
    last=$(printf '%s\n' "$out" | sed -n 's/^step 10: loss \([0-9.]*\),.*/\1/p')
    check '[ $rc -eq 0 ] && [ -n "$first" ] && [ -n "$last" ] && awk -v a="$first" -v b="$last" "BEGIN{exit !(b < a - 0.5)}"' \
        "the $kind example did not train (loss $first -> $last)$(excerpt 14 "$out")"
done

# the installed command from another directory: its own share/cleave, then $CLEAVE_DATA
mkdir -p "$tmp/elsewhere" "$tmp/mydata"
head -c 200000 data/kjv.txt > "$tmp/mydata/kjv.txt"
run=(train --steps 2 --micro-batch-size 2 --seq-len 64 --sample-tokens 0 --eval-batches 2)
out=$(cd "$tmp/elsewhere" && env -u CLEAVE_DATA "$top/bin/cleave" "${run[@]}" 2>&1)
_rc=$?; check '[ $_rc -eq 0 ] && printf "%s\n" "$out" | grep -q "^data $top/share/cleave/kjv.txt: " && printf "%s\n" "$out" | grep -q "^step *2/2"' \
    "installed cleave train with CLEAVE_DATA unset$(excerpt 8 "$out")"
out=$(cd "$tmp/elsewhere" && CLEAVE_DATA="$tmp/mydata" "$top/bin/cleave" "${run[@]}" 2>&1)
_rc=$?; check '[ $_rc -eq 0 ] && printf "%s\n" "$out" | grep -q "^data $tmp/mydata/kjv.txt: " && printf "%s\n" "$out" | grep -q "^step *2/2"' \
    "installed cleave train with CLEAVE_DATA set$(excerpt 8 "$out")"
# the installed Llama 3 tokenizer.json is --tokenizer hf's default directory
printf 'In the beginning God created the heaven and the earth.\n' > "$tmp/elsewhere/gen.txt"
out=$(cd "$tmp/elsewhere" && env -u CLEAVE_DATA "$top/bin/cleave" tokenize --tokenizer hf --out gen gen.txt 2>&1)
_rc=$?
if printf '%s' "$out" | grep -q 'needs PCRE2'; then
    skip "installed --tokenizer hf: this build has no PCRE2"
else
    check '[ $_rc -eq 0 ] && [ -s "$tmp/elsewhere/gen.bin" ]' "installed cleave tokenize --tokenizer hf (share/cleave/llama3)$(excerpt 6 "$out")"
fi
# a cleave with no data anywhere: exit 2, one line naming where it looked and how to prepare the data
mkdir -p "$tmp/lone/bin"
cp "$BUILD/cleave" "$tmp/lone/bin/cleave"
err=$(cd "$tmp/elsewhere" && CLEAVE_DATA="$tmp/nothing" "$tmp/lone/bin/cleave" "${run[@]}" 2>&1 >/dev/null)
rc=$?
check '[ $rc -eq 2 ] && [ $(printf "%s\n" "$err" | wc -l) -eq 1 ] && printf "%s" "$err" | grep -q "looked in $tmp/nothing, $tmp/lone/data, .*$tmp/lone/share/cleave" && printf "%s" "$err" | grep -q "scripts/setup.sh"' \
    "no data: status $rc$(excerpt 3 "$err")"

# man pages render without warnings
pages=("$top"/share/man/man1/*.1)
check '[ ${#pages[@]} -ge 10 ]' "only ${#pages[@]} man pages installed"
for p in "${pages[@]}"; do
    warn=$(MANWIDTH=80 man --warnings -l "$p" 2>&1 >/dev/null)
    text=$(MANWIDTH=80 man -l "$p" 2>/dev/null)
    check '[ -z "$warn" ] && printf "%s\n" "$text" | grep -q "^OPTIONS\|^DESCRIPTION"' "man -l $(basename "$p"): $warn"
done
check 'MANWIDTH=80 man -l "$top/share/man/man1/cleave-train.1" | grep -q -- "--device-memory X"' "cleave-train(1) lacks --device-memory"

# uninstall removes everything install wrote (and the token caches cleave made there)
out=$(make -s uninstall BUILD="$BUILD" SAN=$san DESTDIR="$root" PREFIX=$prefix 2>&1)
left=$(find "$root" -type f -o -type l)
check '[ -z "$left" ]' "make uninstall left files behind$(excerpt 10 "$left")"
finish cli_install
