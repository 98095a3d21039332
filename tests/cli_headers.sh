#!/usr/bin/env bash
# The public headers (include/cleave/*.h): each compiles alone as C11 and as
# C++ with only include/ on the path (so none needs an internal header from
# src/), cleave.h includes every one of them, a C++ program links libcleave
# through them (extern "C"), and cleave.h opens with its worked example,
# which make builds and which runs; cl_model is opaque outside src/nn.
source tests/lib.sh
CXX=${CXX:-g++}
hdrs=(include/cleave/*.h)
check '[ ${#hdrs[@]} -ge 10 ]' "only ${#hdrs[@]} public headers"
for h in "${hdrs[@]}"; do
    name=${h#include/}
    out=$(printf '#include <%s>\n#include <%s>\nint main(void) { return 0; }\n' "$name" "$name" |
          cc -std=c11 -Wall -Wextra -Werror -pedantic -Iinclude -x c - -o "$tmp/c.out" 2>&1)
    _rc=$?; check '[ $_rc -eq 0 ]' "$name does not compile alone as C11$(excerpt 5 "$out")"
    out=$(printf '#include <%s>\nint main() { return 0; }\n' "$name" |
          $CXX -std=c++11 -Wall -Wextra -Werror -Iinclude -x c++ - -o "$tmp/cxx.out" 2>&1)
    _rc=$?; check '[ $_rc -eq 0 ]' "$name does not compile alone as C++$(excerpt 5 "$out")"
    [ "$name" = cleave/cleave.h ] || check 'grep -q "^#include \"$name\"" include/cleave/cleave.h' "cleave.h does not include $name"
done
for internal in kernels prof; do
    check '[ ! -e include/cleave/$internal.h ] && [ -e src/cleave/$internal.h ]' "$internal.h should be internal (src/cleave/)"
done
# cl_model is opaque outside src/nn: a field does not compile through the public
# headers, and no file outside src/nn includes the struct (nn/model_impl.h)
out=$(printf '#include <cleave/model.h>\nint f(cl_model *m) { return m->B; }\n' | cc -std=c11 -Iinclude -x c -c - -o "$tmp/o.o" 2>&1)
_rc=$?; check '[ $_rc -ne 0 ] && printf "%s\n" "$out" | grep -q incomplete' "a field of cl_model compiles outside src/nn"
users=$(grep -rl 'nn/model_impl\.h' src cli tests bench examples | grep -v '^src/nn/' | grep -v '^tests/cli_headers\.sh$')
check '[ -z "$users" ]' "files outside src/nn include nn/model_impl.h: $users"
cat > "$tmp/use.cpp" <<'CPP'
#include <cleave/cleave.h>
#include <cstdio>
int main() {
    cl_model_config cfg;
    if (cl_model_preset("gpt2-tiny", &cfg) != CL_OK) return 1;
    std::printf("%s %d %s\n", cfg.name, cfg.layers, cl_status_name(CL_ERR_IO));
    return 0;
}
CPP
san=""
[ "$BUILD" = build-san ] && san="-fsanitize=address,undefined"
out=$($CXX -std=c++11 -Wall -Wextra -Werror -Iinclude $san "$tmp/use.cpp" "$BUILD/libcleave.a" $(sed -n 's/^Libs.private: //p' "$BUILD/cleave.pc") -o "$tmp/use" 2>&1)
_rc=$?; check '[ $_rc -eq 0 ]' "a C++ program does not link libcleave$(excerpt 8 "$out")"
out=$("$tmp/use" 2>&1)
check '[ "$out" = "gpt2-tiny 2 i/o error" ]' "the C++ program printed: $out"
out=$("$BUILD/examples/quickstart" 2>&1)
_rc=$?; check '[ $_rc -eq 0 ] && printf "%s\n" "$out" | grep -q "^step 10: loss"' "cleave.h's worked example (build/examples/quickstart) failed$(excerpt 5 "$out")"
check 'head -n 12 include/cleave/cleave.h | grep -q "example begin"' "cleave.h does not open with its worked example"
finish cli_headers
