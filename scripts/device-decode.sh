#!/usr/bin/env bash
# Single-sequence and small-batch decode against cuDNN, on the GPU machine
# (from the repository root, no network): `parallax bench decode` (Parallax,
# bf16, Hq 32, Hkv 8, D 128) over B 1,8,64 x L 4096,16384,32768 with the
# automatic decode plan and with the old split choice
# (PARALLAX_CUDA_DECODE_SPLITS=old), cuDNN's softmax decode from
# `scripts/bench-peers.py --only decode` (PyTorch SDPA, enable_gqa, same
# GPU), and one table. Needs bin/parallax; with bin/cuda.test (go test -c
# ./engine/cuda -o bin/cuda.test) it also times both plans with the L2
# flushed before every run (TestDecodeSweep), as bench-peers.py times
# cuDNN: `bench decode` does not flush, so a 17 MB cache (L 4096, B 1) is
# read from the 50 MB L2 there, and its time includes the launch.
#
#   scripts/device-decode.sh            # logs in $OUT (default /tmp/decode-out)
#   BS="1 8" LS="16384" HQ=8 scripts/device-decode.sh
#
# PX and CUDA_TEST name other binaries; PEERS=FILE takes the cuDNN rows from
# an earlier bench-peers.py log instead of running it.
set -uo pipefail
OUT=${OUT:-/tmp/decode-out}
mkdir -p "$OUT"
export PARALLAX_REQUIRE_CUDA=1 PARALLAX_CUDA_CACHE=${PARALLAX_CUDA_CACHE:-/tmp/parallax-cuda-cache}
BS=${BS:-1 8 64}
LS=${LS:-4096 16384 32768}
HQ=${HQ:-32}
HKV=8
D=128
ITERS=${ITERS:-50}
PX=${PX:-./bin/parallax}
CUDA_TEST=${CUDA_TEST:-bin/cuda.test}
CUDA_TEST=$(realpath -m "$CUDA_TEST")
t0=$(date +%s)
: >"$OUT/ours.tsv"
"$PX" devices 2>&1 | head -3
for plan in auto old; do
	for b in $BS; do
		for l in $LS; do
			env=()
			[[ $plan == old ]] && env=(PARALLAX_CUDA_DECODE_SPLITS=old)
			line=$(env "${env[@]}" PARALLAX_CUDA_DECODE_REPORT=1 timeout 120 "$PX" bench decode --device cuda:0 --dtype bf16 \
				--shape "$b,$HQ,$HKV,$l,$D" --iters "$ITERS" --json 2>"$OUT/err.txt")
			splits=$(sed -n 's/^cuda decode: .*splits \([0-9]*\) (.*), stages \([0-9]*\).*/\1\/\2/p' "$OUT/err.txt" | head -1)
			ms=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["ms"])' "$line" 2>/dev/null || echo nan)
			[[ $ms == nan ]] && cat "$OUT/err.txt" >&2
			printf '%s\t%s\t%s\t%s\t%s\n' "$plan" "$b" "$l" "${splits:-?}" "$ms" >>"$OUT/ours.tsv"
		done
	done
done
: >"$OUT/cold.txt"
if [[ -x $CUDA_TEST ]]; then
	shapes=""
	for b in $BS; do for l in $LS; do shapes+="$((HQ / HKV)),$b,$l "; done; done
	(cd engine/cuda && PARALLAX_CUDA_DECODE_SWEEP=1 DEC_SWEEP_SHAPES="$shapes" DEC_SWEEP_PLANS="auto old" \
		timeout 300 "$CUDA_TEST" -test.run TestDecodeSweep -test.v 2>&1) | tee "$OUT/sweep.txt" |
		sed -n 's/^ *attention_decode_bench_test.go:[0-9]*: //p' >"$OUT/cold.txt"
fi
if [[ -n ${PEERS:-} ]]; then
	cp "$PEERS" "$OUT/peers.txt"
else
	PEER_TRITON=0 timeout 900 python3 scripts/bench-peers.py --only decode >"$OUT/peers.txt" 2>&1 || echo "bench-peers.py failed: see $OUT/peers.txt"
fi
python3 - "$OUT" "$HQ" "$HKV" "$BS" "$LS" <<'PY'
import sys
out, hq, hkv = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
bs, ls = [int(x) for x in sys.argv[4].split()], [int(x) for x in sys.argv[5].split()]
G = hq // hkv
ours = {}
for ln in open(f"{out}/ours.tsv"):
    plan, b, l, splits, ms = ln.rstrip("\n").split("\t")
    ours[(plan, int(b), int(l))] = (splits, float(ms) * 1e3)
cold = {}
for ln in open(f"{out}/cold.txt"):
    f = ln.split()
    if len(f) >= 8 and f[0].count(",") == 2 and f[1] in ("auto", "old"):
        g, b, l = (int(x) for x in f[0].split(","))
        cold[(f[1], b, l)] = float(f[5])
cudnn = {}
for ln in open(f"{out}/peers.txt"):
    f = ln.split()
    if len(f) >= 5 and f[0] == "cudnn" and f[4] != "unsupported":
        cudnn[(int(f[1]), int(f[2]), int(f[3]))] = float(f[4])
print(f"\ndecode, Parallax bf16, Hq {hq} Hkv {hkv} (G {G}) D 128, one query: us (medians); splits/stages of the plan")
print("ours: `parallax bench decode` (L2 warm, launch included); cold: L2 flushed (TestDecodeSweep); cuDNN: bench-peers.py (L2 flushed)")
hdr = f"{'B':>3} {'L':>6} | {'new s/st':>8} {'new us':>8} {'cold':>8} | {'old s/st':>8} {'old us':>8} {'cold':>8} | {'cuDNN':>8} | {'new/cuDNN':>9} {'cold/cuDNN':>10} {'old/cuDNN':>9} {'new/old':>7}"
print(hdr)
print("-" * len(hdr))
worst = 0.0
for b in bs:
    for l in ls:
        ns, nu = ours.get(("auto", b, l), ("?", float("nan")))
        os_, ou = ours.get(("old", b, l), ("?", float("nan")))
        nc, oc = cold.get(("auto", b, l), float("nan")), cold.get(("old", b, l), float("nan"))
        c = cudnn.get((G, b, l), float("nan"))
        r = lambda x: f"{x / c:.2f}x" if c == c and x == x else "-"
        worst = max(worst, nu / c if c == c and nu == nu else 0)
        print(f"{b:3} {l:6} | {ns:>8} {nu:8.2f} {nc:8.2f} | {os_:>8} {ou:8.2f} {oc:8.2f} | {c:8.2f} | {r(nu):>9} {r(nc):>10} {r(ou):>9} {nu / ou:6.2f}x")
print(f"worst new/cuDNN: {worst:.2f}x (goal: 1.10x)")
PY
echo "$(($(date +%s) - t0)) s total; logs in $OUT"
