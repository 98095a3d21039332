#!/usr/bin/env bash
# The Llama family's MoE block (issue 33, items 1-3), mixtral-tiny:
# - against an independent PyTorch Mixtral (tests/mixtral_torch.py, HF's
#   MixtralSparseMoeBlock equations): the LM loss, the aux loss and every
#   gradient of loss + coeff aux within 1e-5 (build/tests/moe_torch_driver),
#   dropless, with a router tie (layer 0's router zero: every top-k by the tie
#   rule) and with a capacity factor (the dropped count equal too);
# - layouts, 20 steps on the King James Bible, --threads 1: pp 2 under gpipe,
#   1f1b and zb-h1 and recompute selective / full bitwise equal to one rank
#   (loss, grad norm, aux loss); dp 2 under ZeRO 1, 2, 3 within 1e-6; bad
#   settings (a tp not dividing the heads among them; tp itself: cli_moe_tp.sh) refused in one line, naming the flag;
# - 200 steps on the King James Bible: the loss falls, every expert's share of
#   the token-slots within 2x of the mean at the end (printed).
set -u
source "$(dirname "$0")/lib.sh"
if have_torch "the comparison with PyTorch"; then
    for kase in plain tie cap; do
        "$BUILD/tests/moe_torch_driver" $kase --write-input "$tmp/in-$kase.safetensors" > /dev/null
        _rc=$?; check '[ $_rc -eq 0 ]' "moe_torch_driver $kase --write-input failed (status $_rc)"
        out=$(timeout 300 $PY "$(dirname "$0")/mixtral_torch.py" "$tmp/in-$kase.safetensors" "$tmp/ref-$kase.safetensors" 2>&1)
        _rc=$?; check '[ $_rc -eq 0 ]' "mixtral_torch.py $kase failed (status $_rc): $(tail -3 <<<"$out")"
        out=$("$BUILD/tests/moe_torch_driver" $kase --torch "$tmp/in-$kase.safetensors" "$tmp/ref-$kase.safetensors" 2>&1)
        _rc=$?
        echo "$out"
        check '[ $_rc -eq 0 ] && grep -q "gradients, max rel err" <<<"$out"' "$kase against torch: $(tail -4 <<<"$out")"
    done
fi

source "$(dirname "$0")/moe_lib.sh"
run one
check '[ "$(figures "$tmp/one.jsonl" | wc -l)" -eq 20 ] && grep -q "| aux [0-9.]* | dropped 0 | experts" "$tmp/one.out"' \
    "one rank: no aux loss in the log or the step line: $(tail -2 "$tmp/one.out")"
for lay in "pp-gpipe --pp 2 --schedule gpipe" "pp-1f1b --pp 2 --schedule 1f1b" "pp-zbh1 --pp 2 --schedule zb-h1" \
           "rc-selective --recompute selective" "rc-full --recompute full"; do
    set -- $lay
    n=$1; shift
    run "$n" "$@"
    check '[ "$(figures "$tmp/$n.jsonl")" = "$(figures "$tmp/one.jsonl")" ]' \
        "$n: not bitwise equal to one rank: $(paste <(figures "$tmp/$n.jsonl") <(figures "$tmp/one.jsonl") | head -2)"
done
for z in 1 2 3; do
    run "z$z" --dp 2 --zero $z
    res=$(paste <(figures "$tmp/z$z.jsonl") <(figures "$tmp/one.jsonl") | awk '
        { n++; for (i = 1; i <= 3; i++) { d = $i - $(i + 3); if (d < 0) d = -d; r = d / ($(i + 3) < 0 ? -$(i + 3) : $(i + 3)); if (r > w) w = r } }
        END { printf "%d steps, max rel diff %.3g\n", n, w; exit !(n == 20 && w <= 1e-6) }')
    _rc=$?; echo "dp 2 ZeRO $z: $res"
    check '[ $_rc -eq 0 ]' "dp 2 ZeRO $z against one rank: $res"
done
# a capacity factor: slots dropped and counted
run cap --moe-capacity-factor 0.5
check 'grep -q "\"moe_dropped\": [1-9]" "$tmp/cap.jsonl"' "capacity 0.5: nothing dropped: $(tail -1 "$tmp/cap.jsonl" | cut -c 1-300)"
# refusals, one line each, exit 2
for bad in "--tp 3|--tp 3 must divide the 4 attention heads" "--experts-per-token 9|num_experts_per_tok" "--experts 0 --moe-every 2|need --experts" \
           "--moe-aux-loss-coeff -1|moe-aux-loss-coeff"; do
    args=${bad%%|*} want=${bad#*|}
    out=$("$CLEAVE" train "${common[@]}" $args --steps 1 2>&1); _rc=$?
    check '[ $_rc -eq 2 ] && [ "$(grep -c . <<<"$out")" -eq 1 ] && grep -q -- "$want" <<<"$out"' "$args: status $_rc, $(head -3 <<<"$out")"
done
# the checkpoint's config.json carries MixtralConfig's keys
"$CLEAVE" train "${common[@]}" --steps 2 --save "$tmp/ck" > "$tmp/ck.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && grep -q "\"num_local_experts\": 8" "$tmp/ck/config.json" && grep -q "\"num_experts_per_tok\": 2" "$tmp/ck/config.json" && grep -q "\"router_aux_loss_coef\": 0.01" "$tmp/ck/config.json"' \
    "config.json: $(grep -i expert "$tmp/ck/config.json" 2>/dev/null)"
# (the Hugging Face export, MixtralForCausalLM's layout: tests/cli_hf_mixtral.sh)
"$CLEAVE" train "${common[@]}" --steps 4 --resume "$tmp/ck" > "$tmp/res.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ] && grep -q "step *4/4" "$tmp/res.out"' "resume: $(tail -2 "$tmp/res.out")"

# 200 steps on the King James Bible: the loss falls, the experts share the slots within 2x of the mean
"$CLEAVE" train --model mixtral-tiny --data data/kjv.txt --steps 200 --seq-len 64 --micro-batch-size 8 --sample-tokens 0 --eval-batches 4 \
    --log-file "$tmp/long.jsonl" > "$tmp/long.out" 2>&1
_rc=$?; check '[ $_rc -eq 0 ]' "200 steps failed: $(tail -3 "$tmp/long.out")"
res=$(python3 - "$tmp/long.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
first = sum(r["loss"] for r in rows[:10]) / 10
last = sum(r["loss"] for r in rows[-10:]) / 10
share = [sum(r["expert_share"][e] for r in rows[-10:]) / 10 for e in range(len(rows[-1]["expert_share"]))]
mean = 1 / len(share)
ok = len(rows) == 200 and last < first - 1 and all(mean / 2 <= s <= 2 * mean for s in share)
print("loss %.4f -> %.4f (means of the first and last 10 steps), aux %.4f, shares %s" % (first, last, rows[-1]["moe_aux"],
      " ".join("%.3f" % s for s in share)))
sys.exit(0 if ok else 1)
PY
)
_rc=$?; echo "200 steps: $res"
check '[ $_rc -eq 0 ]' "200 steps: $res"
finish cli_moe_train
