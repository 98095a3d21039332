#!/usr/bin/env bash
# cleave train --config FILE and --print-config: a run from a file equals the
# same run from flags bit for bit (printed losses and norms, the log's
# figures, the checkpoint's tensors), flags override the file, the printed
# configuration read back prints the same, every checkpoint carries it as
# run_config.json under the marker's hashes (and a checkpoint without it,
# as older ones are, still verifies and resumes), the log's first line holds
# it, and bad files are refused in one line naming the file and the key,
# exit 2, before a step.
source "$(dirname "$0")/lib.sh"
cd "$tmp" || exit 1
C=$OLDPWD/$CLEAVE
[ -x "$C" ] || C=$CLEAVE
steps() { grep '^step' "$1" | sed 's/ | [0-9.]* ms | .*//'; } # step, loss, lr, norm: no timings
logfig() { grep '"loss"' "$1" | sed 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2/'; }

F=(--model gpt2-tiny --seq-len 32 --micro-batch-size 2 --steps 3 --dp 2 --lr 3e-3 --sample-tokens 0 --eval-batches 1 --zero 1)
"$C" train "${F[@]}" --save flags --log-file flags.jsonl > flags.out 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "the run from flags failed: $_rc$(excerpt 3 "$(tail -3 flags.out)")"

# the same run from a file: sections and top-level keys, a number as 3e-3, a switch
cat > run.json << 'EOF'
{
  "model": {"model": "gpt2-tiny", "seq-len": 32},
  "batch": {"micro-batch-size": 2},
  "optimizer": {"steps": 3, "lr": 3e-3},
  "parallel": {"dp": 2, "zero": 1},
  "sample-tokens": 0,
  "eval-batches": 1,
  "check-replicas": false,
  "checkpoint": {"save": "file"},
  "log-file": "file.jsonl"
}
EOF
"$C" train --config run.json > file.out 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "the run from --config failed: $_rc$(excerpt 3 "$(tail -3 file.out)")"
check '[ -n "$(steps flags.out)" ] && [ "$(steps file.out)" = "$(steps flags.out)" ]' \
    "printed steps differ:$(excerpt 3 "$(steps flags.out)")$(excerpt 3 "$(steps file.out)")"
check '[ "$(logfig file.jsonl)" = "$(logfig flags.jsonl)" ] && [ "$(logfig flags.jsonl | wc -l)" -eq 3 ]' "the logs' losses and norms differ"
check 'st_same flags/model.safetensors file/model.safetensors && st_same flags/optimizer.safetensors file/optimizer.safetensors' \
    "the checkpoints' tensors differ"

# the checkpoint records the configuration, under the marker
check '[ -s file/run_config.json ] && grep -q "run_config.json" file/cleave-checkpoint.json' "no run_config.json in the checkpoint or its marker"
out=$("$C" checkpoint verify file 2>&1)
_rc=$?; check '[ $_rc -eq 0 ] && printf "%s" "$out" | grep -q "5 files"' "verify of the checkpoint with run_config.json: $_rc $out"
# the log's first line is the same configuration; cleave plot reads past it
python3 - file.jsonl file/run_config.json << 'PY'
import json, sys
first = json.loads(open(sys.argv[1]).readline())
sys.exit(0 if list(first) == ["config"] and first["config"] == json.load(open(sys.argv[2])) else 1)
PY
_rc=$?; check '[ $_rc -eq 0 ]' "the log's first line is not {\"config\": the checkpoint's run_config.json}"
"$C" plot file.jsonl --out plot.svg > /dev/null 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "cleave plot refuses a log with the config line: $_rc"

# the run repeated from its checkpoint alone (saved elsewhere): the same bits
"$C" train --config file/run_config.json --save again --log-file again.jsonl > again.out 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && [ "$(steps again.out)" = "$(steps flags.out)" ] && st_same flags/model.safetensors again/model.safetensors' \
    "the run from file/run_config.json differs or failed ($_rc)$(excerpt 3 "$(tail -3 again.out)")"

# --print-config: resolved (defaults too), read back to the same print; exits before a step
"$C" train "${F[@]}" --print-config > p1.json 2> p1.err
_rc=$?; check '[ $_rc -eq 0 ] && ! grep -q "^step" p1.json && python3 -c "import json,sys; json.load(open(\"p1.json\"))"' "--print-config: $_rc, not JSON or ran"
check 'grep -q "\"beta2\": 0.95" p1.json && grep -q "\"dp\": 2" p1.json && grep -q "\"zero\": 1" p1.json' "--print-config lacks a default or a flag"
"$C" train --config p1.json --print-config > p2.json 2>&1
check 'cmp -s p1.json p2.json' "print -> --config -> print differs$(excerpt 4 "$(diff p1.json p2.json)")"
"$C" train --config run.json --print-config > p3.json 2>&1
check 'cmp -s <(grep -v "\"save\"\|\"log-file\"" p3.json) <(grep -v "\"save\"\|\"log-file\"" p1.json)' \
    "the file's resolved configuration differs from the flags'$(excerpt 4 "$(diff p1.json p3.json)")"

# with --auto: the plan's choice recorded (auto off), its report on stderr, stdout the JSON alone
"$C" train --auto --ranks 2 --steps 2 --sample-tokens 0 --print-config > pa.json 2> pa.err
_rc=$?; check '[ $_rc -eq 0 ] && python3 -c "import json,sys; c=json.load(open(\"pa.json\")); sys.exit(not (c[\"parallel\"][\"auto\"] is False and c[\"parallel\"][\"ranks\"] == 2))" && grep -q "auto: chose" pa.err' \
    "--auto --print-config: $_rc, not the JSON alone or auto left on$(excerpt 3 "$(head -3 pa.json)")"

# flags override the file, before or after --config
for order in before after; do
    if [ $order = before ]; then o=$("$C" train --lr 1e-2 --check-replicas --config run.json --print-config 2>&1)
    else o=$("$C" train --config run.json --lr 1e-2 --check-replicas --print-config 2>&1); fi
    check 'printf "%s" "$o" | grep -q "\"lr\": 0.01," && printf "%s" "$o" | grep -q "\"check-replicas\": true"' "--lr/--check-replicas $order --config did not win"
done
o=$("$C" train --config run.json --data-parallel-size 1 --print-config 2>&1)
check 'printf "%s" "$o" | grep -q "\"dp\": 1,"' "--data-parallel-size on the command line did not override the file's dp: $(printf "%s" "$o" | grep '"dp"')"
# memory and convert take it too
o=$("$C" memory --config run.json 2>&1)
_rc=$?; check '[ $_rc -eq 0 ] && printf "%s" "$o" | grep -q "rank"' "cleave memory --config: $_rc$(excerpt 3 "$o")"
echo '{"parallel": {"dp": 1}}' > one.json
o=$("$C" convert --config one.json --from file --to conv 2>&1)
_rc=$?; check '[ $_rc -eq 0 ] && "$C" checkpoint verify conv > /dev/null 2>&1' "cleave convert --config: $_rc$(excerpt 3 "$o")"

# an older checkpoint (no run_config.json, its marker not listing one) verifies and resumes
cp -r file old && rm old/run_config.json
python3 - old/cleave-checkpoint.json << 'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["files"] = [f for f in m["files"] if f["name"] != "run_config.json"]
json.dump(m, open(sys.argv[1], "w"), indent=2)
PY
out=$("$C" checkpoint verify old 2>&1)
_rc=$?; check '[ $_rc -eq 0 ] && printf "%s" "$out" | grep -q "4 files"' "an old checkpoint without run_config.json: $_rc $out"
"$C" train "${F[@]}" --steps 4 --resume old > old.out 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && grep -q "resumed from old at step 3" old.out' "resume of an old checkpoint: $_rc$(excerpt 2 "$(tail -2 old.out)")"
# an edited run_config.json, or one the marker does not list, is refused
cp -r file edited && sed -i 's/"lr": 0.003/"lr": 0.004/' edited/run_config.json
out=$("$C" checkpoint verify edited 2>&1)
_rc=$?; check '[ $_rc -eq 2 ] && printf "%s" "$out" | grep -q "run_config.json"' "an edited run_config.json verified: $_rc $out"
cp file/run_config.json old/
out=$("$C" checkpoint verify old 2>&1)
_rc=$?; check '[ $_rc -eq 2 ] && printf "%s" "$out" | grep -q "run_config.json: not listed"' "an unlisted run_config.json verified: $_rc $out"

# refusals: one line naming the file and the key, exit 2, no step
bad() { # WHAT WANT JSON [FLAGS...]
    local what=$1 want=$2
    printf '%s\n' "$3" > bad.json
    shift 3
    "$C" train --config bad.json "$@" --steps 2 --sample-tokens 0 > bad.out 2> bad.err
    local rc=$?
    check '[ $rc -eq 2 ] && [ "$(wc -l < bad.err)" -eq 1 ] && grep -qF -- "$want" bad.err && ! grep -q "^step" bad.out' \
        "$what: exit $rc, wanted one line with '$want'$(excerpt 2 "$(cat bad.err)")"
}
bad "unknown key" 'bad.json: unknown key "save_every" (did you mean "save-every"?)' '{"save_every": 3}'
bad "key in another section" 'unknown key "optimizer.dp" (did you mean "parallel.dp"?)' '{"optimizer": {"dp": 2}}'
bad "string for a number" 'bad.json: "optimizer.lr": "0.01" is a string; a number is expected' '{"optimizer": {"lr": "0.01"}}'
bad "number for a switch" '"sequence-parallel" is a number; it is a switch' '{"sequence-parallel": 1}'
bad "boolean for a value" '"steps" is a boolean' '{"steps": true}'
bad "section not an object" '"parallel" is a number; it is a section' '{"parallel": 2}'
bad "contradiction" '"lr" and "optimizer.lr" are one setting, given 0.01 and 0.02' '{"lr": 0.01, "optimizer": {"lr": 0.02}}'
bad "alias contradiction" '"dp" and "data-parallel-size" are one setting' '{"dp": 2, "data-parallel-size": 1}'
bad "a check of the flags" 'bad.json: "zero" must be between 0 and 3 (got 7)' '{"zero": 7}'
bad "contradicting settings" '--offload-dir needs --offload-optimizer disk' '{"offload-dir": "."}'
bad "malformed JSON" 'bad.json: not a JSON file: json: offset 12' '{"steps": 2,}'
bad "not an object" 'the top level is an array' '[1]'
bad "config in the file" '"config" is not a setting' '{"config": "x.json"}'
finish cli_config
