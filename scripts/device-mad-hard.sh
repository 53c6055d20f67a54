#!/usr/bin/env bash
# MAD beyond the quick protocol (docs/RESULTS.md, "MAD beyond the quick
# protocol") on one CUDA device, in calls of bounded length: the hard
# settings of each recall task under Muon, seed by seed, into one folder.
# A call given the previous call's archive back (MAD_TGZ=...) unpacks it
# first: finished runs are skipped and a run stopped by the deadline
# continues from its last saved epoch (--out/partial/), so the long
# settings (seq_len 1024) may span calls.
#
# First it certifies the lane-per-key SIMT attention kernels (D <= 16, the
# MAD model's heads) with the conformance suite, and runs MAD through them
# (PARALLAX_CUDA_SIMT_SMALL=1) only if that passes: their 16-byte-load
# forms if those pass, else the element-load forms (PARALLAX_CUDA_SIMT_V4=0).
#
# Settings (environment):
#   OUT=/tmp/mad-out DEADLINE=540 MAD_TGZ= PAR=4
#   JOBS="in-context-recall,noisy-in-context-recall:1 fuzzy-in-context-recall:1 ... :2"
#     (tasks:seed pairs, run in order until the deadline; several tasks in
#     one job share its --parallel runs, which keeps a GPU busy when each
#     task has only its long settings left)
#   MAX_SEQ_LEN=0 (0: every hard setting; 256 leaves out seq_len 1024)
#   CONCURRENT= (set: every job at once, PAR runs each, all into the one
#     folder: runs are saved per run and seed, so they do not collide;
#     each invocation's results.* then covers what its folder held when
#     it ended, and a --device cpu pass over the folder prints the whole)
#
# A CPU rehearsal (a minute; DEVICE=cpu skips the certification):
#
#   DEVICE=cpu DEADLINE=60 JOBS=in-context-recall:1 EXTRA="--max-train 64 --max-test 16 --max-steps 20" \
#     bash scripts/device-mad-hard.sh
set -uo pipefail
OUT=${OUT:-/tmp/mad-out}
BIN=${PARALLAX_BIN:-$PWD/bin/parallax}
DEVICE=${DEVICE:-cuda:0}
DEADLINE=${DEADLINE:-540}
PAR=${PAR:-4}
MAX_SEQ_LEN=${MAX_SEQ_LEN:-0}
JOBS=${JOBS:-in-context-recall,noisy-in-context-recall:1 fuzzy-in-context-recall:1 in-context-recall,noisy-in-context-recall:2 fuzzy-in-context-recall:2}
WORK=${WORK:-/tmp/mad-work}
mkdir -p "$OUT" "$WORK"
export PARALLAX_REQUIRE_CUDA=${PARALLAX_REQUIRE_CUDA:-1} PARALLAX_CUDA_CACHE=${PARALLAX_CUDA_CACHE:-/tmp/parallax-cuda-cache}
t0=$(date +%s)
left() { echo $((DEADLINE - ($(date +%s) - t0))); }

if [[ -n ${MAD_TGZ:-} ]]; then
	tar -xzf "$MAD_TGZ" -C "$WORK" || exit 1
fi
if [[ $DEVICE == cuda* ]]; then
	# The 16-byte-load forms first, then the element-load forms
	# (PARALLAX_CUDA_SIMT_V4=0), else the broadcast kernels.
	for v4 in 1 0; do
		PARALLAX_CUDA_SIMT_SMALL=1 PARALLAX_CUDA_SIMT_V4=$v4 timeout 300 "$BIN" conformance --device "$DEVICE" --dtype f32,bf16 \
			--run attention >"$OUT/conformance-v4-$v4.txt" 2>&1
		rc=$?
		echo "conformance (lane-per-key SIMT kernels, PARALLAX_CUDA_SIMT_V4=$v4): exit $rc, $(tail -1 "$OUT/conformance-v4-$v4.txt")"
		if [[ $rc == 0 ]]; then
			export PARALLAX_CUDA_SIMT_SMALL=1 PARALLAX_CUDA_SIMT_V4=$v4
			break
		fi
		grep -v " pass$" "$OUT/conformance-v4-$v4.txt" | tail -8
	done
	[[ -z ${PARALLAX_CUDA_SIMT_SMALL:-} ]] && echo "running MAD on the broadcast SIMT kernels"
fi
cd "$WORK" || exit 1
run_job() { # $1 task(s), $2 seed, $3 the seconds it may take
	echo "== $1 seed $2 (${3}s left)"
	# SIGTERM at the deadline: the run in flight saves nothing more, but
	# keeps the save of its last finished epoch.
	timeout "$3" "$BIN" mad --quick --settings hard --max-seq-len "$MAX_SEQ_LEN" --tasks "$1" \
		--mixers softmax,parallax --optimizer muon --lrs 1e-3 --max-steps 1000 --device "$DEVICE" --seed "$2" \
		--out mad-hard --parallel "$PAR" ${EXTRA:-} >"$OUT/mad-$1-$2.log" 2>&1
	echo "$1 seed $2: exit $?; $(grep -c ' done ' "$OUT/mad-$1-$2.log") runs finished"
	grep -E " done |resuming" "$OUT/mad-$1-$2.log" | tail -6
}
for job in $JOBS; do
	budget=$(($(left) - 20))
	((budget < 30)) && break
	if [[ -n ${CONCURRENT:-} ]]; then
		run_job "${job%%:*}" "${job##*:}" "$budget" &
	else
		run_job "${job%%:*}" "${job##*:}" "$budget"
	fi
done
wait
tar -czf "$OUT/mad-hard.tgz" mad-hard
echo "packed $OUT/mad-hard.tgz ($(ls mad-hard/runs | wc -l) finished runs, $(ls mad-hard/partial 2>/dev/null | wc -l) partial) after $(($(date +%s) - t0)) s"
