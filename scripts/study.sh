#!/usr/bin/env bash
# The quality study (docs/RESULTS.md, "Study harness"): models trained from
# scratch for equal tokens, attention {softmax, parallax} x optimizer
# {muon, adamw} x $SEEDS x $PRESETS, on the embedded Austen corpus (or
# $DATA), with optional extras:
#
#   GATE=1       the probe-gate ablation (parallax --probe-gate) under both
#                optimizers
#   CONTROL=heads|headdim|"heads headdim"
#                the parameter-matched control: "heads" is softmax with more
#                heads (small: 12 query / 4 key heads of 64 instead of 8 / 4;
#                gpt2-124m-like: 20 / 10 instead of 12 / 12), "headdim" is
#                Parallax with a smaller head dimension (small: 48 instead of
#                64; gpt2-124m-like: 52, 0.4% more parameters, D = 51.2 would
#                match). train has no flag for the head shape: the script
#                writes the config.json with `parallax report study-control
#                PRESET KIND` and trains it with --config FILE. Note that a
#                head dimension that is not a power of two leaves the CUDA
#                bf16 fast attention backward (docs/CUDA.md): headdim is
#                parameter-matched, not time-matched.
#
# Every run goes into its own folder $OUT/runs/PRESET-VARIANT-OPT-sSEED with
# a study-run.json (what it is meant to be); $OUT/plan.txt lists the planned
# runs. The script is resumable: a run whose folder holds "study-done" is
# skipped, one with a checkpoint is continued with train --resume (train
# saves every $SAVE_EVERY steps, overwriting its one checkpoint), one with
# neither starts afresh (--force). A finished run keeps config.json,
# model.safetensors (the final weights: the report's stable ranks),
# metrics.jsonl, curves.png, tokenizer.json and its log; its
# optimizer.safetensors and data/ are removed unless KEEP_OPTIMIZER=1.
# All runs of a preset share one tokenizer and tokenized corpus, made once
# in $OUT/shared/PRESET.
#
# Summarise with:  parallax report study --dir $OUT   (writes $OUT/report)
#
# Settings (environment variables; defaults for one GPU):
#   OUT=/tmp/study DEVICE=cuda:0 PRESETS=small SEEDS="1 2 3" OPTS="muon adamw"
#   STEPS=2000 BATCH=16 SEQ=512 EVAL_EVERY=100 EVAL_BATCHES=0 LOG_EVERY=50
#   SAVE_EVERY=500 JOBS=1 LR_MUON= LR_ADAMW= (empty: train's defaults,
#   Muon 0.02 and AdamW 3e-3) ADAMW_LR_UNDER_MUON= GATE=0 CONTROL= DATA=
#   TOKENIZER= EXTRA_ARGS= PARALLAX_BIN=./bin/parallax USE_SWEEP=1
#   DEADLINE= RESERVE=20
#
# DEADLINE (seconds from the start; empty: none) bounds the script: a run
# is not started with less than RESERVE seconds left, and a run still
# going RESERVE seconds before the deadline is stopped with SIGINT (train
# saves its checkpoint and keeps its metrics; a later call resumes it).
#
# LR sweep (MODE=sweep): softmax and parallax x OPTS x the rates in
# SWEEP_LRS_MUON (default "0.01 0.02 0.04") and SWEEP_LRS_ADAMW ("1e-3 3e-3
# 6e-3"), seed $SWEEP_SEED (1), $SWEEP_STEPS steps (default STEPS/4), into
# $OUT/sweep; then `parallax report study --dir $OUT/sweep` picks per
# optimizer the rate with the lowest final held-out loss (mean over the two
# attentions) and writes $OUT/sweep/report/best-lr.env. A later MODE=grid
# run (the default) reads that file when LR_MUON / LR_ADAMW are unset and
# USE_SWEEP=1. MODE=all does the sweep, then the grid.
#
# A CPU rehearsal of the whole pipeline (about a minute):
#
#   OUT=/tmp/study-cpu DEVICE=cpu PRESETS=tiny SEEDS="1 2" STEPS=6 BATCH=2 SEQ=32 \
#     EVAL_EVERY=3 EVAL_BATCHES=2 LOG_EVERY=1 SAVE_EVERY=3 GATE=1 MODE=all \
#     SWEEP_LRS_MUON="0.01 0.02" SWEEP_LRS_ADAMW="3e-3" bash scripts/study.sh
set -uo pipefail

OUT=${OUT:-/tmp/study}
BIN=${PARALLAX_BIN:-./bin/parallax}
MODE=${MODE:-grid}
DEVICE=${DEVICE:-cuda:0}
PRESETS=${PRESETS:-small}
SEEDS=${SEEDS:-1 2 3}
OPTS=${OPTS:-muon adamw}
STEPS=${STEPS:-2000}
BATCH=${BATCH:-16}
SEQ=${SEQ:-512}
EVAL_EVERY=${EVAL_EVERY:-100}
EVAL_BATCHES=${EVAL_BATCHES:-0}
LOG_EVERY=${LOG_EVERY:-50}
SAVE_EVERY=${SAVE_EVERY:-500}
JOBS=${JOBS:-1}
LR_MUON=${LR_MUON:-}
LR_ADAMW=${LR_ADAMW:-}
ADAMW_LR_UNDER_MUON=${ADAMW_LR_UNDER_MUON:-}
GATE=${GATE:-0}
CONTROL=${CONTROL:-}
DATA=${DATA:-}
TOKENIZER=${TOKENIZER:-}
EXTRA_ARGS=${EXTRA_ARGS:-}
KEEP_OPTIMIZER=${KEEP_OPTIMIZER:-0}
USE_SWEEP=${USE_SWEEP:-1}
DEADLINE=${DEADLINE:-}
RESERVE=${RESERVE:-20}
SWEEP_LRS_MUON=${SWEEP_LRS_MUON:-0.01 0.02 0.04}
SWEEP_LRS_ADAMW=${SWEEP_LRS_ADAMW:-1e-3 3e-3 6e-3}
SWEEP_SEED=${SWEEP_SEED:-1}
SWEEP_STEPS=${SWEEP_STEPS:-$(((STEPS + 3) / 4))}
export PARALLAX_CUDA_CACHE=${PARALLAX_CUDA_CACHE:-/tmp/parallax-cuda-cache}

T0=$(date +%s)
mkdir -p "$OUT/logs"
log() { printf '[%5d s] %s\n' "$(($(date +%s) - T0))" "$*" | tee -a "$OUT/study.log"; }

if [ ! -x "$BIN" ]; then
	log "$BIN is missing: build it first (make build)"
	exit 1
fi

# prepare PRESET makes $OUT/shared/PRESET: one tokenizer and tokenized
# corpus for every run of the preset (a one-step softmax run; its
# checkpoint is removed). Prints the train arguments that use them.
prepare() {
	local p=$1 dir="$OUT/shared/$1"
	if [ -n "$DATA" ]; then
		echo "--data $DATA${TOKENIZER:+ --tokenizer $TOKENIZER}"
		return 0
	fi
	if [ ! -f "$dir/ready" ]; then
		rm -rf "$dir"
		if ! "$BIN" train --config "$p" --attention softmax --device "$DEVICE" --steps 1 --batch 1 --seq 16 \
			--eval-every -1 --save-every -1 --log-every 1 ${TOKENIZER:+--tokenizer "$TOKENIZER"} --out "$dir" \
			>"$OUT/logs/shared-$p.log" 2>&1; then
			log "preparing the data of $p failed (logs/shared-$p.log)"
			return 1
		fi
		rm -f "$dir/model.safetensors" "$dir/optimizer.safetensors"
		touch "$dir/ready"
	fi
	echo "--data $dir/data --tokenizer $dir/tokenizer.json"
}

# run_one DIR NAME PRESET VARIANT OPT SEED LR STEPS: trains one run
# (fresh, resumed or skipped) into DIR/NAME.
run_one() {
	local root=$1 name=$2 preset=$3 variant=$4 opt=$5 seed=$6 lr=$7 steps=$8
	local rd="$root/$name" logf="$OUT/logs/$name.log"
	if [ -f "$rd/study-done" ]; then
		log "$name: finished before; skipped"
		return 0
	fi
	local left=
	if [ -n "$DEADLINE" ]; then
		left=$((DEADLINE - RESERVE - $(date +%s) + T0))
		if ((left < RESERVE)); then
			log "$name: not started, ${left} s before the deadline's reserve"
			return 0
		fi
	fi
	mkdir -p "$rd"
	printf '{"preset":"%s","variant":"%s","optimizer":"%s","seed":%s,"lr":%s,"steps":%s}\n' \
		"$preset" "$variant" "$opt" "$seed" "${lr:-0}" "$steps" >"$rd/study-run.json"
	local args
	if [ -f "$rd/optimizer.safetensors" ] || [ -f "$rd/checkpoint.json" ]; then
		log "$name: resuming"
		args=(--out "$rd" --resume --steps "$steps" --device "$DEVICE")
	else
		log "$name: start"
		local data config=(--config "$preset")
		data=$(prepare "$preset") || return 1
		case $variant in
		softmax) config+=(--attention softmax) ;;
		parallax) config+=(--attention parallax) ;;
		parallax-gate) config+=(--attention parallax --probe-gate) ;;
		softmax-heads | parallax-headdim)
			local cf="$OUT/configs/$preset-$variant.json"
			mkdir -p "$OUT/configs"
			"$BIN" report study-control "$preset" "${variant#*-}" >"$cf" || return 1
			config=(--config "$cf")
			;;
		esac
		# shellcheck disable=SC2206 # $data and EXTRA_ARGS are split into words on purpose
		args=(--out "$rd" --force "${config[@]}" $data --optimizer "$opt" --seed "$seed" --device "$DEVICE"
			--steps "$steps" --batch "$BATCH" --seq "$SEQ" --eval-every "$EVAL_EVERY" --eval-batches "$EVAL_BATCHES"
			--log-every "$LOG_EVERY" --save-every "$SAVE_EVERY" $EXTRA_ARGS)
		[ -n "$lr" ] && args+=(--lr "$lr")
		[ "$opt" = muon ] && [ -n "$ADAMW_LR_UNDER_MUON" ] && args+=(--adamw-lr "$ADAMW_LR_UNDER_MUON")
	fi
	local t=$(($(date +%s) - T0))
	if [ -n "$left" ]; then
		timeout -s INT -k 30 "$left" "$BIN" train "${args[@]}" >>"$logf" 2>&1
	else
		"$BIN" train "${args[@]}" >>"$logf" 2>&1
	fi
	local rc=$?
	local last
	last=$(grep -h -E '^(done:|stopped at)' "$logf" | tail -1 | cut -c1-140)
	if [ $rc -eq 0 ] && [[ $last == done:* ]]; then
		echo "$last" >"$rd/study-done"
		if [ "$KEEP_OPTIMIZER" != 1 ]; then
			rm -rf "$rd/optimizer.safetensors" "$rd/data"
		fi
	fi
	log "$name: exit $rc after $(($(date +%s) - T0 - t)) s: ${last:-$(tail -1 "$logf" | cut -c1-140)}"
	return $rc
}

# queue ROOT NAME ...: runs run_one in the background, $JOBS at a time.
queue() {
	while (($(jobs -rp | wc -l) >= JOBS)); do
		wait -n
	done
	run_one "$@" &
	sleep 1
}

lr_for() { # lr_for OPT: the grid's rate of an optimizer ("" for train's default)
	if [ "$1" = muon ]; then echo "$LR_MUON"; else echo "$LR_ADAMW"; fi
}

# prepare_all makes each preset's shared data before any run is queued
# (runs started together would otherwise race to make it).
prepare_all() {
	for preset in $PRESETS; do
		prepare "$preset" >/dev/null || return 1
	done
}

sweep() {
	local root="$OUT/sweep"
	prepare_all || return 1
	mkdir -p "$root"
	: >"$root/plan.txt"
	for preset in $PRESETS; do
		for opt in $OPTS; do
			local lrs=$SWEEP_LRS_ADAMW
			[ "$opt" = muon ] && lrs=$SWEEP_LRS_MUON
			for lr in $lrs; do
				for variant in softmax parallax; do
					local name="$preset-$variant-$opt-lr$lr-s$SWEEP_SEED"
					echo "$name" >>"$root/plan.txt"
					queue "$root" "$name" "$preset" "$variant" "$opt" "$SWEEP_SEED" "$lr" "$SWEEP_STEPS"
				done
			done
		done
	done
	wait
	timeout "${REPORT_TIMEOUT:-120}" "$BIN" report study --dir "$root" >"$OUT/logs/sweep-report.log" 2>&1 || log "the sweep's report failed (logs/sweep-report.log)"
	if [ -f "$root/report/best-lr.env" ]; then
		log "sweep chose: $(tr '\n' ' ' <"$root/report/best-lr.env")"
	fi
}

grid() {
	local root="$OUT/runs" env="$OUT/sweep/report/best-lr.env"
	if [ "$USE_SWEEP" = 1 ] && [ -f "$env" ]; then
		# Only the rates not given in the environment.
		[ -z "$LR_MUON" ] && LR_MUON=$(sed -n 's/^LR_MUON=//p' "$env" | head -1)
		[ -z "$LR_ADAMW" ] && LR_ADAMW=$(sed -n 's/^LR_ADAMW=//p' "$env" | head -1)
	fi
	log "grid: LR_MUON=${LR_MUON:-default} LR_ADAMW=${LR_ADAMW:-default}"
	prepare_all || return 1
	mkdir -p "$root"
	local variants="softmax parallax"
	[ "$GATE" = 1 ] && variants+=" parallax-gate"
	for c in $CONTROL; do
		case $c in
		heads) variants+=" softmax-heads" ;;
		headdim) variants+=" parallax-headdim" ;;
		*)
			log "CONTROL=$c: want heads or headdim"
			exit 1
			;;
		esac
	done
	: >"$OUT/plan.txt"
	for preset in $PRESETS; do
		for seed in $SEEDS; do
			for opt in $OPTS; do
				for variant in $variants; do
					echo "$preset-$variant-$opt-s$seed" >>"$OUT/plan.txt"
				done
			done
		done
	done
	# Seed by seed, so that a cut-short study leaves whole seeds.
	for preset in $PRESETS; do
		for seed in $SEEDS; do
			for opt in $OPTS; do
				for variant in $variants; do
					queue "$root" "$preset-$variant-$opt-s$seed" "$preset" "$variant" "$opt" "$seed" "$(lr_for "$opt")" "$STEPS"
				done
			done
		done
	done
	wait
	timeout "${REPORT_TIMEOUT:-120}" "$BIN" report study --dir "$OUT" >"$OUT/logs/report.log" 2>&1 || log "the report failed (logs/report.log)"
	log "report: $OUT/report/study.md"
}

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "binary: $("$BIN" version 2>&1 | head -1)"
	for v in MODE DEVICE PRESETS SEEDS OPTS STEPS BATCH SEQ EVAL_EVERY EVAL_BATCHES LOG_EVERY SAVE_EVERY JOBS LR_MUON \
		LR_ADAMW ADAMW_LR_UNDER_MUON GATE CONTROL DATA TOKENIZER EXTRA_ARGS SWEEP_LRS_MUON SWEEP_LRS_ADAMW SWEEP_SEED SWEEP_STEPS \
		DEADLINE RESERVE; do
		echo "$v=${!v}"
	done
} >>"$OUT/settings.txt"
log "study ($MODE) on $DEVICE: presets $PRESETS, $STEPS steps of $BATCH x $SEQ tokens ($((STEPS * BATCH * SEQ)) tokens a run), seeds $SEEDS, optimizers $OPTS"
case $MODE in
sweep) sweep ;;
grid) grid ;;
all) sweep && grid ;;
*)
	log "MODE=$MODE: want grid, sweep or all"
	exit 1
	;;
esac
log "total $(($(date +%s) - T0)) s"
