#!/usr/bin/env bash
# One device run of the Vulkan backend on an NVIDIA GPU machine (from the
# repository root): the device report, the conformance suite on both
# matrix paths (cooperative matrix and scalar), the package tests with
# PARALLAX_REQUIRE_VULKAN=1, and the decode / prefill benchmarks.
# Binaries are built beforehand on a machine with Go:
#
#   go build -o bin/parallax ./cmd/parallax
#   CGO_ENABLED=1 go test -c -o bin/vulkan.test ./engine/vulkan
#
# The GPU image may lack the Vulkan loader: a .gl/ folder of Debian packages
# (libvulkan1 and the GL vendor-neutral libraries) is unpacked first when
# present. Usage: scripts/device-vulkan.sh [test] [bench] [prefill] [kernels]
# (default: test bench prefill; kernels compares the decode kernels and
# their variants on a few shapes, with the driver's statistics). Logs go to $OUT (default /tmp/vulkan-out).
set -uo pipefail
OUT=${OUT:-/tmp/vulkan-out}
mkdir -p "$OUT"
if [[ -d .gl ]] && ! ldconfig -p | grep -q libvulkan.so.1; then
	for f in .gl/*.deb; do dpkg -x "$f" /; done
	ldconfig
fi
[[ -e /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]] && export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
export PARALLAX_REQUIRE_VULKAN=1
steps=${*:-test bench prefill}
t0=$(date +%s)
dev=${DEV:-vulkan:0}
if [[ $steps == *test* ]]; then
	echo "== parallax devices"
	./bin/parallax devices 2>&1 | tee "$OUT/devices.txt" | head -${DEV_LINES:-40}
	for path in coopmat scalar; do
		env=""
		[[ $path == scalar ]] && env="PARALLAX_VULKAN_COOPMAT=0"
		echo "== conformance $dev ($path)"
		env $env timeout 300 ./bin/parallax conformance --device "$dev" --dtype f32,bf16,f16 --json >"$OUT/conformance-$path.json" 2>"$OUT/conformance-$path.err"
		echo "exit $?"
		python3 - "$OUT/conformance-$path.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
bad = [r for r in rows if not r.get("pass")]
print(f"cases {len(rows)} failed {len(bad)}")
for r in bad[:20]:
    print("FAIL", r)
worst = {}
for r in rows:
    fam = r.get("op", "?") + "/" + r.get("dtype", "?")
    e = r.get("max_rel_error") or 0
    if isinstance(e, str):  # "+Inf", "NaN"
        e = float("inf")
    if fam not in worst or e > worst[fam][0]:
        worst[fam] = (e, r.get("tolerance"))
for k in sorted(worst):
    print(f"  {k:40} {worst[k][0]:.2e} / {worst[k][1]:.2e}")
PY
		tail -3 "$OUT/conformance-$path.err"
	done
	echo "== go test ./engine/vulkan"
	timeout 300 ./bin/vulkan.test -test.v -test.timeout 290s >"$OUT/vulkan-test.log" 2>&1
	echo "exit $? pass $(grep -c -- '--- PASS' "$OUT/vulkan-test.log") fail $(grep -c -- '--- FAIL' "$OUT/vulkan-test.log") skip $(grep -c -- '--- SKIP' "$OUT/vulkan-test.log")"
	grep -E -- '--- (FAIL|SKIP)' "$OUT/vulkan-test.log" | head -20
	echo "$(($(date +%s) - t0)) s so far"
fi
if [[ $steps == *bench* ]]; then
	echo "== decode (bf16 K/V, D 128, Hkv 8)"
	for G in 2 4; do
		for B in 1 8 32 64; do
			for L in 1024 4096 16384; do
				./bin/parallax bench decode --device "$dev" --dtype ${DECODE_DTYPE:-bf16} --shape $B,$((8 * G)),8,$L,128 --iters ${ITERS:-10} 2>&1 | tail -1 | sed "s/^/G$G B$B L$L  /"
			done
		done
	done 2>&1 | tee "$OUT/decode.txt"
fi
if [[ $steps == *kernels* ]]; then
	echo "== decode kernels: tests and a few shapes per kernel"
	./bin/parallax devices 2>&1 | grep -i -E "coopmat|subgroup" | head -8
	for k in ${KERNELS:-default bc16 wide sh16 scalar}; do
		env="PARALLAX_VULKAN_DECODE_VARIANT=default"
		case $k in
		bc16) env="PARALLAX_VULKAN_DECODE_BC=16" ;;
		wide) env="PARALLAX_VULKAN_DECODE=wide" ;;
		sh16) env="PARALLAX_VULKAN_DECODE_VARIANT=sh16" ;;
		scalar) env="PARALLAX_VULKAN_DECODE=scalar" ;;
		esac
		env $env timeout 120 ./bin/vulkan.test -test.v -test.run 'TestDecode' >"$OUT/decode-test-$k.log" 2>&1
		echo "$k: tests exit $? pass $(grep -c -- '--- PASS' "$OUT/decode-test-$k.log") fail $(grep -c -- '--- FAIL' "$OUT/decode-test-$k.log")"
		grep -E -- '--- FAIL' -A4 "$OUT/decode-test-$k.log" | head -20
		for s in ${SHAPES:-64,32,8,16384,128 64,16,8,16384,128 32,32,8,16384,128 32,16,8,16384,128 64,32,8,4096,128 64,16,8,4096,128 8,32,8,16384,128 1,32,8,16384,128}; do
			env $env PARALLAX_VULKAN_PIPELINE_STATS=1 ./bin/parallax bench decode --device "$dev" --dtype ${DECODE_DTYPE:-bf16} --shape $s --iters ${ITERS:-10} >"$OUT/decode-$k.txt" 2>&1
			echo "$k $s  $(tail -1 "$OUT/decode-$k.txt" | sed 's/.*(NVIDIA H200)://')"
		done
		grep -E 'pipeline attn_decode' "$OUT/decode-$k.txt" | sed 's/,: /: /' | cut -c1-220 | head -3
	done 2>&1 | tee "$OUT/kernels.txt"
fi
if [[ $steps == *attn* ]]; then
	echo "== attention forward and backward kernels (prefill)"
	for k in coop scalar; do
		env="PARALLAX_VULKAN_ATTN=$k"
		env $env timeout 200 ./bin/vulkan.test -test.v -test.run 'TestAttention(Forward|Backward)Kernel' >"$OUT/attn-test-$k.log" 2>&1
		echo "$k: tests exit $? pass $(grep -c -- '--- PASS' "$OUT/attn-test-$k.log") fail $(grep -c -- '--- FAIL' "$OUT/attn-test-$k.log")"
		grep -E -- '--- FAIL|error [0-9.e-]+ \(tol|vulkan - cpu' "$OUT/attn-test-$k.log" | head -20
	done
	for s in ${ASHAPES:-8,16,4096,128 1,16,16384,128 8,16,4096,64}; do
		for bw in "" --backward; do
			for sm in "" --softmax; do
				PARALLAX_VULKAN_PIPELINE_STATS=1 ./bin/parallax bench attention --device "$dev" --dtype bf16 --shape $s $bw $sm --iters ${PITERS:-3} >"$OUT/attn.txt" 2>&1
				echo "$s $bw $sm $(tail -1 "$OUT/attn.txt" | sed 's/.*(NVIDIA H200)://')"
			done
		done
	done
	grep -E 'pipeline attn_(fwd|bwd)' "$OUT/attn.txt" | cut -c1-200 | head -4
fi
if [[ $steps == *splits* ]]; then
	echo "== decode split counts (PARALLAX_VULKAN_DECODE_SPLITS)"
	for s in 1,32,8,16384,128 8,32,8,16384,128 64,32,8,4096,128 32,32,8,16384,128; do
		for S in 0 ${SPLITS:-2 4 8 16 32 64 128}; do
			PARALLAX_VULKAN_DECODE_SPLITS=$S ./bin/parallax bench decode --device "$dev" --dtype bf16 --shape $s --iters ${ITERS:-10} 2>&1 | tail -1 | sed "s/.*(NVIDIA H200):/$s S=$S /" | cut -c1-90
		done
	done 2>&1 | tee "$OUT/splits.txt"
fi
if [[ $steps == *prefill* ]]; then
	echo "== prefill (bf16, causal)"
	for s in 8,16,4096,128 1,16,16384,128 8,16,4096,64; do
		for bw in "" --backward; do
			for sm in "" --softmax; do
				./bin/parallax bench attention --device "$dev" --dtype bf16 --shape $s $bw $sm --iters ${PITERS:-3} 2>&1 | tail -1 | sed "s/^/$s $bw $sm  /"
			done
		done
	done 2>&1 | tee "$OUT/prefill.txt"
fi
echo "total $(($(date +%s) - t0)) s"
