#!/usr/bin/env bash
# conformance-loop.sh: run `parallax conformance` N times in a row, each
# with a fresh random seed, and log the seed and the failing rows of every
# run that fails, so that a rare failure can be repeated exactly
# (`parallax conformance --seed SEED ...` with the same other flags).
#
#   scripts/conformance-loop.sh [-n N] [-b BINARY] [-l LOG] [--] [CONFORMANCE FLAGS...]
#
#   -n N       runs (default 200)
#   -b BINARY  the parallax binary (default: bin/parallax, built if missing)
#   -l LOG     failure log (default: conformance-loop-<time>.log in $TMPDIR)
#   -t SECS    start no run after SECS seconds (default: no limit); the
#              totals then count the runs made
#
# Every other argument goes to `parallax conformance` (not --seed or --json,
# which the script sets), e.g.
#
#   scripts/conformance-loop.sh -n 200 --device cpu --dtype f32,bf16
#   scripts/conformance-loop.sh -n 200 --device vulkan:0 --dtype f32,bf16 --run attention
#
# Prints one line per run, then the totals; exits 1 if any run failed and 2
# for a usage mistake.
set -euo pipefail
cd "$(dirname "$0")/.."

n=200
bin=bin/parallax
log=""
limit=""
while [ $# -gt 0 ]; do
	case "$1" in
	-n) n="${2:?-n needs a count}"; shift 2 ;;
	-b) bin="${2:?-b needs a path}"; shift 2 ;;
	-l) log="${2:?-l needs a path}"; shift 2 ;;
	-t) limit="${2:?-t needs seconds}"; shift 2 ;;
	--) shift; break ;;
	--seed|--seed=*|--json) echo "conformance-loop: $1 is set by the script" >&2; exit 2 ;;
	-h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
	*) break ;;
	esac
done
for a in "$@"; do
	case "$a" in --seed|--seed=*|--json) echo "conformance-loop: $a is set by the script" >&2; exit 2 ;; esac
done
case "$n" in '' | *[!0-9]* | 0) echo "conformance-loop: -n $n: want a positive integer" >&2; exit 2 ;; esac
case "$limit" in *[!0-9]*) echo "conformance-loop: -t $limit: want whole seconds" >&2; exit 2 ;; esac
if [ ! -x "$bin" ]; then
	if [ "$bin" = bin/parallax ]; then
		go build -o bin/parallax ./cmd/parallax
	else
		echo "conformance-loop: $bin is not an executable" >&2
		exit 2
	fi
fi
[ -n "$log" ] || log="${TMPDIR:-/tmp}/conformance-loop-$(date +%Y%m%d-%H%M%S).log"
: >"$log"
out=$(mktemp)
trap 'rm -f "$out"' EXIT

failed=0 cases=0 bad=0 runs=0
start=$(date +%s)
echo "conformance-loop: $n runs of: $bin conformance $*; failures logged in $log"
for i in $(seq 1 "$n"); do
	if [ -n "$limit" ] && [ $(($(date +%s) - start)) -ge "$limit" ]; then
		echo "conformance-loop: time limit of ${limit}s reached after $runs runs"
		break
	fi
	runs=$i
	seed=0
	while [ "$seed" = 0 ]; do
		seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
	done
	set +e
	"$bin" conformance "$@" --seed "$seed" >"$out" 2>&1
	rc=$?
	set -e
	total=$(sed -n 's/^\([0-9]*\) of \([0-9]*\) cases passed$/\2/p' "$out")
	passed=$(sed -n 's/^\([0-9]*\) of \([0-9]*\) cases passed$/\1/p' "$out")
	cases=$((cases + ${total:-0}))
	if [ "$rc" -eq 0 ]; then
		echo "run $i/$n seed $seed: pass (${total:-?} cases)"
		continue
	fi
	failed=$((failed + 1))
	if [ -n "$total" ]; then
		bad=$((bad + total - passed))
	fi
	echo "run $i/$n seed $seed: FAIL (exit $rc, ${passed:-?} of ${total:-?} passed)"
	{
		echo "== run $i seed $seed exit $rc: $bin conformance $* --seed $seed"
		grep -E ' FAIL|panic|^parallax conformance:|^Error|^error' "$out" || tail -n 20 "$out"
	} >>"$log"
done
echo "conformance-loop: $failed of $runs runs failed ($bad of $cases cases) in $(( $(date +%s) - start ))s; failures in $log"
[ "$failed" -eq 0 ]
