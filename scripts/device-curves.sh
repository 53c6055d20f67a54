#!/usr/bin/env bash
# The bf16 training curve against the f32 one on the same device: 300 steps
# of the `small` preset on the embedded Austen corpus, once with bf16
# compute (the precision policy: bf16 weight copies, padded head) and once
# in f32, then the largest relative gap of the logged training losses and
# of the final validation loss. Usage: scripts/device-curves.sh [DEVICE]
# (default cuda:0); logs and metrics go to $OUT (default /tmp/curves-out).
set -uo pipefail
OUT=${OUT:-/tmp/curves-out}
dev=${1:-cuda:0}
steps=${STEPS:-300}
cfg=${CURVE_CONFIG:-small}
mkdir -p "$OUT"
for dt in bf16 f32; do
	rm -rf /tmp/curve-$dt
	timeout ${CURVE_TIMEOUT:-240} ./bin/parallax train --config $cfg --device $dev --dtype $dt --steps $steps \
		--log-every 10 --eval-every $steps --save-every -1 --out /tmp/curve-$dt >"$OUT/curve-$dt.log" 2>&1
	echo "$dt exit $?: $(tail -1 "$OUT/curve-$dt.log" | cut -c1-160)"
	cp /tmp/curve-$dt/metrics.jsonl "$OUT/metrics-$dt.jsonl" 2>/dev/null
done
python3 - "$OUT/metrics-bf16.jsonl" "$OUT/metrics-f32.jsonl" <<'PY'
import json, sys
def load(p):
    tr, va = {}, {}
    for l in open(p):
        r = json.loads(l)
        if r.get("loss") is not None and not r.get("eval"): tr[r["step"]] = r["loss"]
        if r.get("val_loss") is not None: va[r["step"]] = r["val_loss"]
    return tr, va
(bt, bv), (ft, fv) = load(sys.argv[1]), load(sys.argv[2])
common = sorted(set(bt) & set(ft))
gaps = [(abs(bt[s] - ft[s]) / ft[s], s) for s in common]
late = [g for g in gaps if g[1] >= 50]
print(f"{len(common)} logged steps; largest relative train-loss gap {max(gaps)[0]*100:.2f}% at step {max(gaps)[1]}, "
      f"from step 50 on {max(late)[0]*100:.2f}% at step {max(late)[1]}")
print("final train loss bf16 %.4f f32 %.4f" % (bt[common[-1]], ft[common[-1]]))
for s in sorted(set(bv) & set(fv)):
    print(f"val loss at {s}: bf16 {bv[s]:.4f} f32 {fv[s]:.4f} ({abs(bv[s]-fv[s])/fv[s]*100:.2f}%)")
PY
