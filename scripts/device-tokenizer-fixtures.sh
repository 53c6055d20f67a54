#!/usr/bin/env bash
# On the GPU machine (python3 with tokenizers and transformers, no network),
# from the repository root: makes the tokenizer and chat-template fixtures
# with those libraries (scripts/tokenizer-fixtures.py), in well under two
# minutes.
#
# Result: $OUT/tokenizer-fixtures.tar.gz, whose paths are the repository's
# (model/tokenizer/testdata/hf/*/ and model/chat/testdata/rendered.json):
# unpack it at the repository root with
#
#   tar -xzf tokenizer-fixtures.tar.gz
#
# and $OUT/tokenizer-fixtures.log.
set -euo pipefail
OUT=${OUT:-/tmp/tokenizer-fixtures-out}
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{
	python3 -c 'import tokenizers, transformers; print("tokenizers", tokenizers.__version__, "transformers", transformers.__version__)'
	timeout 110 python3 scripts/tokenizer-fixtures.py "$work"
} >"$OUT/tokenizer-fixtures.log" 2>&1 || { cat "$OUT/tokenizer-fixtures.log"; exit 1; }
tar -czf "$OUT/tokenizer-fixtures.tar.gz" -C "$work" model
cat "$OUT/tokenizer-fixtures.log"
tar -tzf "$OUT/tokenizer-fixtures.tar.gz"
ls -l "$OUT"
