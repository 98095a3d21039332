# Sourced by the benchmarks that run Debian's PyTorch beside cleave
# (bench/torch_step.sh, bench/bf16_step.sh): torch_deps NAME installs
# python3-torch and an optimized BLAS for it (libopenblas0: without it
# PyTorch calls the reference BLAS, many times slower) when run as root with
# apt, else says what is missing and exits 2. Needs PY.
torch_deps() {
    local need=()
    $PY -c "import torch" 2>/dev/null || need+=(python3-torch)
    [ -e /usr/lib/x86_64-linux-gnu/libopenblas.so.0 ] || need+=(libopenblas0)
    [ ${#need[@]} -gt 0 ] || return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        source scripts/apt_lock.sh # apt_get: waits, bounded, for another apt process's lock
        DEBIAN_FRONTEND=noninteractive apt_get install -y -q "${need[@]}" >/dev/null
    else
        echo "$1: needs ${need[*]} (apt-get install ${need[*]})" >&2
        exit 2
    fi
}
