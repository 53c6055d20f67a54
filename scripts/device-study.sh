#!/usr/bin/env bash
# The quality study (docs/RESULTS.md, "Quality study") on one device, in
# calls of bounded length: for each preset in $PRESETS, scripts/study.sh
# with MODE=all (the learning-rate sweep, then the grid with the chosen
# rates, the probe-gate ablation and the parameter-matched controls) into
# $WORK/PRESET, all under one DEADLINE. Then every preset's folder, less
# the weights, optimizer states and tokenized data, is packed into
# $OUT/study.tgz (each finished Parallax run keeps its stable ranks in
# study-ranks.json, written by study.sh's report on the device). A later call
# given that archive back (STUDY_TGZ=...) unpacks it into $WORK first and
# skips every finished run, so a study longer than one call is finished
# by the next. Here, summarise with
#
#   mkdir study && tar -xzf study.tgz -C study && parallax report study --dir study/small
#
# Settings (environment; study.sh's own variables pass through):
#   PRESETS="small gpt2-124m-like" WORK=/tmp/study-work OUT=/tmp/study-out
#   DEADLINE=540 STUDY_TGZ= STEPS_small=600 STEPS_gpt2_124m_like=300
#   JOBS_small=4 JOBS_gpt2_124m_like=2 GATE=1 CONTROL="heads headdim"
#   PACK_RESERVE=45 (seconds kept after the runs for the reports and the packing)
#   SWEEP_LRS_MUON_P, SWEEP_LRS_ADAMW_P, SEEDS_P, GATE_P, CONTROL_P, LR_MUON_P,
#   LR_ADAMW_P, MODE_P: preset P's own (P with "-" and "." as "_"; set, even
#   empty, they override study.sh's variable of that name for P);
#   SWEEP_LRS_ADAMW_gpt2_124m_like="6e-4 1.5e-3 3e-3" (GPT-2 small's 6e-4 and above)
#
# A CPU rehearsal (about a minute):
#
#   PRESETS=tiny DEVICE=cpu STEPS_tiny=6 BATCH=2 SEQ=32 EVAL_EVERY=3 EVAL_BATCHES=2 LOG_EVERY=1 \
#     SAVE_EVERY=3 SEEDS="1 2" SWEEP_LRS_MUON="0.01 0.02" SWEEP_LRS_ADAMW="3e-3" DEADLINE=300 \
#     bash scripts/device-study.sh
set -uo pipefail

PRESETS=${PRESETS:-small gpt2-124m-like}
WORK=${WORK:-/tmp/study-work}
OUT=${OUT:-/tmp/study-out}
BIN=${PARALLAX_BIN:-./bin/parallax}
DEADLINE=${DEADLINE:-540}
PACK_RESERVE=${PACK_RESERVE:-45}
STUDY_TGZ=${STUDY_TGZ:-}
export REPORT_TIMEOUT=${REPORT_TIMEOUT:-40} GATE=${GATE:-1} CONTROL=${CONTROL:-heads headdim} EVAL_EVERY=${EVAL_EVERY:-50} LOG_EVERY=${LOG_EVERY:-25}
: "${STEPS_small:=600}" "${STEPS_gpt2_124m_like:=300}" "${JOBS_small:=4}" "${JOBS_gpt2_124m_like:=2}"
: "${SWEEP_LRS_ADAMW_gpt2_124m_like:=6e-4 1.5e-3 3e-3}"
export SAVE_EVERY=${SAVE_EVERY:-100000} PARALLAX_BIN=$BIN MODE=${MODE:-all}

T0=$(date +%s)
mkdir -p "$WORK" "$OUT"
log() { printf '[%5d s] %s\n' "$(($(date +%s) - T0))" "$*" | tee -a "$OUT/device-study.log"; }

if [ -n "$STUDY_TGZ" ]; then
	if ! tar -xzf "$STUDY_TGZ" -C "$WORK"; then
		log "cannot unpack $STUDY_TGZ"
		exit 1
	fi
	log "unpacked $STUDY_TGZ: $(find "$WORK" -name study-done | wc -l) finished runs"
fi

for p in $PRESETS; do
	v=${p//[-.]/_}
	steps_var=STEPS_$v jobs_var=JOBS_$v
	steps=${!steps_var:-${STEPS:-600}}
	jobs=${!jobs_var:-${JOBS:-2}}
	# Per-preset sweep rates and seeds (SWEEP_LRS_ADAMW_gpt2_124m_like=...) over the common ones.
	per=()
	for k in SWEEP_LRS_MUON SWEEP_LRS_ADAMW SEEDS GATE CONTROL LR_MUON LR_ADAMW MODE; do
		kv=${k}_$v
		[ -n "${!kv+set}" ] && per+=("$k=${!kv}")
	done
	left=$((DEADLINE - PACK_RESERVE - $(date +%s) + T0))
	if ((left < 60)); then
		log "$p: not started, $left s left"
		continue
	fi
	log "$p: $steps steps, $jobs at a time, $left s left"
	env "${per[@]}" OUT="$WORK/$p" PRESETS=$p STEPS=$steps JOBS=$jobs SWEEP_STEPS=${SWEEP_STEPS:-$((steps / 2))} DEADLINE=$left \
		bash scripts/study.sh >>"$OUT/device-study.log" 2>&1
	log "$p: study.sh exit $?"
done

# shared/ (each preset's tokenizer and tokenized corpus) is made again
# by a later call; a run without its checkpoint restarts there.
tar -czf "$OUT/study.tgz" -C "$WORK" --exclude='./*/shared' --exclude='*.safetensors' --exclude='data' \
	--exclude='tokenizer.json' --exclude='checkpoint.json' .
log "packed $(du -h "$OUT/study.tgz" | cut -f1) into $OUT/study.tgz; total $(($(date +%s) - T0)) s"
