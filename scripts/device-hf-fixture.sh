#!/usr/bin/env bash
# On the GPU machine (python3 with torch and transformers, no network), from
# the repository root: writes the Hugging Face Qwen3 fixture with
# transformers (scripts/hf-fixture.py), then, when the test binary is there,
# checks with PARALLAX_REQUIRE_CUDA=1 that step 0 of
# train --init DIR --convert-parallax equals eval of the folder, on cpu and
# CUDA, against the new fixture. The test binary is built beforehand on a
# machine with Go:
#
#   CGO_ENABLED=1 go test -c -o bin/parallax-cmd.test ./cmd/parallax
#
# Result: $OUT/hf-fixture.tar.gz (hf-qwen3-tiny/ and hf-qwen3-tiny-sharded/,
# to unpack into cmd/parallax/testdata/) and the test log.
set -euo pipefail
OUT=${OUT:-/tmp/hf-fixture-out}
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -c 'import torch, transformers, tokenizers; print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__)' | tee "$OUT/versions.txt"
python3 scripts/hf-fixture.py --out "$work/testdata" 2>&1 | tee "$OUT/fixture.log"
tar -czf "$OUT/hf-fixture.tar.gz" -C "$work/testdata" hf-qwen3-tiny hf-qwen3-tiny-sharded
if [[ -x bin/parallax-cmd.test ]]; then
	# The test reads testdata/ relative to its working directory.
	( cd "$work" && PARALLAX_REQUIRE_CUDA=1 timeout 300 "$OLDPWD/bin/parallax-cmd.test" \
		-test.run 'TestInitConvertExact|TestShardedFixture' -test.v -test.timeout 290s ) >"$OUT/exact.log" 2>&1 || true
	grep -E -- '--- (PASS|FAIL|SKIP)|loss' "$OUT/exact.log" | head -20
fi
ls -l "$OUT"
