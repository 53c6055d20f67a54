#!/usr/bin/env bash
# The adaptation study of docs/RESULTS.md ("Adaptation: softmax to
# Parallax"), in one device call: pretrain one softmax model of $CONFIG on
# the embedded Austen corpus, then continue it for equal tokens, $SEEDS
# seeds each, as (a) softmax (train --init BASE) and (b) Parallax
# (train --init BASE --convert-parallax, W_R = 0 at step 0), each with Muon
# and with AdamW: 4 arms x 3 seeds = 12 runs, $JOBS at a time on the one
# device. Every run logs the held-out loss (all of Northanger Abbey by
# default), the COR per layer and the stable rank of W_R. The metrics and
# configs of all runs, their logs and a status line per run are packed into
# $OUT/adapt.tgz (the progress log is $OUT/adapt.log); summarise them with
#
#   tar -xzf adapt.tgz -C adapt && parallax report adapt --base adapt/base --out adapt/report adapt/runs
#
# Run from the repository root with bin/parallax built. Every setting is an
# environment variable (defaults for one NVIDIA H200, about 400 s):
#
#   DEVICE=cuda:0 CONFIG=small BATCH=16 SEQ=512 PRETRAIN_STEPS=600
#   PRETRAIN_OPT=adamw PRETRAIN_EVAL_EVERY=50 STEPS=2800 SEEDS="1 2 3"
#   OPTS="muon adamw" JOBS=4 EVAL_EVERY=100 EVAL_BATCHES=0 LOG_EVERY=50
#   DEADLINE=500
#
# DEADLINE (seconds from the start) bounds the whole script: a run still
# going RESERVE (20) seconds before it is stopped with SIGINT (train then
# saves and keeps its metrics so far), a run not yet started is skipped,
# and the results are packed in any case. EXTRA_ARGS is added to every
# continued run's command line (e.g. "--lr 0.01"). A CPU rehearsal of the
# whole pipeline:
#
#   DEVICE=cpu CONFIG=tiny PRETRAIN_STEPS=20 STEPS=10 BATCH=4 SEQ=64 EVAL_EVERY=5 \
#     LOG_EVERY=5 EVAL_BATCHES=2 JOBS=2 bash scripts/device-adapt.sh
set -uo pipefail

OUT=${OUT:-/tmp/adapt-out}
WORK=${WORK:-/tmp/adapt-work}
BIN=${PARALLAX_BIN:-./bin/parallax}
DEVICE=${DEVICE:-cuda:0}
CONFIG=${CONFIG:-small}
BATCH=${BATCH:-16}
SEQ=${SEQ:-512}
PRETRAIN_STEPS=${PRETRAIN_STEPS:-600}
PRETRAIN_OPT=${PRETRAIN_OPT:-adamw}
PRETRAIN_SEED=${PRETRAIN_SEED:-7}
PRETRAIN_EVAL_EVERY=${PRETRAIN_EVAL_EVERY:-50}
STEPS=${STEPS:-2800}
SEEDS=${SEEDS:-1 2 3}
OPTS=${OPTS:-muon adamw}
JOBS=${JOBS:-4}
EVAL_EVERY=${EVAL_EVERY:-100}
EVAL_BATCHES=${EVAL_BATCHES:-0}
LOG_EVERY=${LOG_EVERY:-50}
DEADLINE=${DEADLINE:-500}
RESERVE=${RESERVE:-20}
STAGGER=${STAGGER:-1}
EXTRA_ARGS=${EXTRA_ARGS:-}
export PARALLAX_CUDA_CACHE=${PARALLAX_CUDA_CACHE:-/tmp/parallax-cuda-cache}

T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
mkdir -p "$OUT"
: >"$OUT/adapt.log"
log() { printf '[%4d s] %s\n' "$(el)" "$*" | tee -a "$OUT/adapt.log"; }

# pack writes $OUT/adapt.tgz from whatever the runs have left.
pack() {
	local files
	files=$(cd "$WORK" && ls -d base/metrics.jsonl base/config.json runs/*/metrics.jsonl runs/*/config.json \
		logs status settings.txt 2>/dev/null)
	if [ -z "$files" ]; then
		log "nothing to pack"
		return 1
	fi
	(cd "$WORK" && tar -czf "$OUT/adapt.tgz" $files)
	log "packed $(echo "$files" | wc -l) entries into $OUT/adapt.tgz ($(du -h "$OUT/adapt.tgz" | cut -f1))"
}

# train_run NAME ARGS... runs parallax train into $WORK/NAME within the
# deadline, logs to $WORK/logs/BASENAME.log and appends a status line.
train_run() {
	local name=$1 short
	shift
	short=$(basename "$name")
	local left=$((DEADLINE - RESERVE - $(el)))
	if ((left < 10)); then
		log "$short: skipped ($(el) s of the $DEADLINE s budget used)"
		echo "$short skipped - -" >>"$WORK/status"
		return 0
	fi
	log "start $short"
	local t=$(el)
	timeout -s INT -k 30 "$left" "$BIN" train "$@" --out "$WORK/$name" >"$WORK/logs/$short.log" 2>&1
	local rc=$?
	local done_line
	done_line=$(grep -h -E '^(done:|stopped at)' "$WORK/logs/$short.log" | tail -1 | cut -c1-140)
	[ -n "$done_line" ] || done_line=$(tail -1 "$WORK/logs/$short.log" | cut -c1-140)
	log "$short: exit $rc after $(($(el) - t)) s: $done_line"
	echo "$short $rc $(($(el) - t)) $(grep -o '[0-9.]*[kM]\? tokens/s' "$WORK/logs/$short.log" | tail -1 | cut -d' ' -f1)" >>"$WORK/status"
	# The checkpoint is not part of the results; the base's is kept for --init.
	if [ "$name" != base ]; then
		rm -f "$WORK/$name/model.safetensors" "$WORK/$name/optimizer.safetensors"
	fi
	return $rc
}

if [ ! -x "$BIN" ]; then
	log "$BIN is missing: build it first (make build)"
	exit 1
fi
rm -rf "$WORK"
mkdir -p "$WORK/logs" "$WORK/runs"
: >"$WORK/status"
tps=$((BATCH * SEQ))
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "binary: $("$BIN" version 2>&1 | head -1)"
	for v in DEVICE CONFIG BATCH SEQ PRETRAIN_STEPS PRETRAIN_OPT PRETRAIN_SEED PRETRAIN_EVAL_EVERY STEPS SEEDS OPTS JOBS \
		EVAL_EVERY EVAL_BATCHES LOG_EVERY DEADLINE RESERVE EXTRA_ARGS; do
		echo "$v=${!v}"
	done
} >"$WORK/settings.txt"
log "adaptation study on $DEVICE: $CONFIG, $BATCH x $SEQ tokens a step; pretrain $PRETRAIN_STEPS steps ($((PRETRAIN_STEPS * tps)) tokens, softmax, $PRETRAIN_OPT), then $STEPS steps ($((STEPS * tps)) tokens) per run, seeds $SEEDS, optimizers $OPTS, $JOBS runs at a time, deadline $DEADLINE s"
log "$(grep '^binary' "$WORK/settings.txt")"
if ! "$BIN" devices 2>&1 | grep -qE "^  $DEVICE(:0)? "; then # "cpu" is cpu:0
	log "device $DEVICE not found:"
	"$BIN" devices 2>&1 | tee -a "$OUT/adapt.log"
	exit 1
fi

if command -v nvidia-smi >/dev/null 2>&1 && [[ $DEVICE == cuda:* ]]; then
	(while sleep 5; do
		echo "$(el),$(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits -i "${DEVICE#cuda:}" 2>/dev/null)"
	done) >"$WORK/logs/gpu.csv" 2>/dev/null &
	smi=$!
	disown "$smi" # not one of the jobs that JOBS counts and wait waits for
	trap 'kill "$smi" 2>/dev/null' EXIT
fi

# (1) The pretrained softmax base.
if ! train_run base --config "$CONFIG" --attention softmax --optimizer "$PRETRAIN_OPT" --device "$DEVICE" \
	--steps "$PRETRAIN_STEPS" --batch "$BATCH" --seq "$SEQ" --eval-every "$PRETRAIN_EVAL_EVERY" \
	--eval-batches "$EVAL_BATCHES" --log-every "$LOG_EVERY" --save-every -1 --seed "$PRETRAIN_SEED" ||
	[ ! -f "$WORK/base/model.safetensors" ]; then
	log "the pretraining failed (see logs/base.log):"
	tail -5 "$WORK/logs/base.log" | tee -a "$OUT/adapt.log"
	pack
	exit 1
fi

# (2) The continued runs, seed by seed (so that a deadline leaves whole
# seeds), $JOBS at a time. Both arms of a seed draw the same batches.
for seed in $SEEDS; do
	for opt in $OPTS; do
		for att in softmax parallax; do
			while (($(jobs -rp | wc -l) >= JOBS)); do
				wait -n
			done
			args=(--init "$WORK/base" --data "$WORK/base/data" --optimizer "$opt" --device "$DEVICE"
				--steps "$STEPS" --batch "$BATCH" --seq "$SEQ" --eval-every "$EVAL_EVERY"
				--eval-batches "$EVAL_BATCHES" --log-every "$LOG_EVERY" --save-every -1 --seed "$seed")
			[ "$att" = parallax ] && args+=(--convert-parallax)
			# shellcheck disable=SC2206 # EXTRA_ARGS is split into words on purpose
			args+=($EXTRA_ARGS)
			train_run "runs/$att-$opt-s$seed" "${args[@]}" &
			sleep "$STAGGER"
		done
	done
done
wait

# (3) Pack the results; the summary is made from them off the device.
failed=$(awk '$2 != 0' "$WORK/status" | wc -l)
log "all runs done: $(wc -l <"$WORK/status") runs, $failed not finished cleanly"
column -t "$WORK/status" 2>/dev/null | tee -a "$OUT/adapt.log" || cat "$WORK/status"
pack
log "total $(el) s"
