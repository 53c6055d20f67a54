#!/usr/bin/env bash
# Recorded decode steps on the GPU machine (from the repository root): the
# graph tests (bin/cuda.test, bin/model.test built with `go test -c`), the
# conformance rows of the ops a recorded step uses, then `bench generate`
# with and without recording (PARALLAX_GRAPHS=0) on a 0.6B-shaped Qwen3
# folder (made by gen_peer.py in the ignored peers/ folder when missing).
# Logs go to $OUT (default /tmp/graphs-out).
set -uo pipefail
OUT=${OUT:-/tmp/graphs-out}
mkdir -p "$OUT"
export PARALLAX_REQUIRE_CUDA=1 PARALLAX_CUDA_CACHE=${PARALLAX_CUDA_CACHE:-/tmp/parallax-cuda-cache}
DIR=${DIR:-/tmp/qwen3-0.6b-shaped}
t0=$(date +%s)
[[ -f $DIR/config.json ]] || python3 peers/shared/bench/gen_peer.py make "$DIR" 2>&1 | tail -1
echo "== graph tests"
timeout 120 ./bin/cuda.test -test.run 'TestGraphReplay' -test.v 2>&1 | tail -3
(cd model && timeout 120 ../bin/model.test -test.run 'TestDecodeOnGPUs' -test.v 2>&1 | grep -E "^(---|    ---|        ---|ok|FAIL|PASS)|graph_test" | head -12)
./bin/parallax conformance --device cuda:0 --dtype f32,bf16 --run 'kv append' 2>&1 | tail -2
echo "$(($(date +%s) - t0)) s so far"
gen() { # label, then flags
	local label=$1
	shift
	timeout 120 ./bin/parallax bench generate --model "$DIR" --prompt-len 16 --new ${NEW:-256} --json "$@" >/tmp/g.json 2>>"$OUT/gen.log"
	cat /tmp/g.json >>"$OUT/gen.jsonl"
	python3 - "$label $*" <<'PY'
import json, sys
try:
    r = json.load(open("/tmp/g.json"))
    print(f"{sys.argv[1]:44s} decode {r['decode_ms']:7.3f} ms/step {r['decode_tokens_per_s']:9.1f} tok/s ({100*r.get('roofline_fraction',0):4.1f}% roofline, sample {r['sample_ms']:.3f} ms)")
except Exception as e:
    print(f"{sys.argv[1]:44s} FAILED: {e}")
PY
}
for b in 1 8 32 64; do
	gen "graphs" --device cuda:0 --batch $b
done
PARALLAX_GRAPHS=0 gen "eager" --device cuda:0 --batch 1
PARALLAX_GRAPHS=0 gen "eager" --device cuda:0 --batch 32
if [[ -n ${VULKAN:-} ]]; then
	if [[ -d .gl ]] && ! ldconfig -p | grep -q libvulkan.so.1; then
		for f in .gl/*.deb; do dpkg -x "$f" /; done
		ldconfig
	fi
	[[ -e /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]] && export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
	gen "vulkan" --device vulkan:0 --batch 1
fi
echo "$(($(date +%s) - t0)) s total"
