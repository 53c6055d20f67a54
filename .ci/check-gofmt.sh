#!/usr/bin/env bash
# Lists the Go files gofmt would change and fails if there are any; with
# --write, formats them instead. The files are those git tracks or would
# track (ignored paths are skipped); outside a git checkout, every .go file
# below the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."

files=()
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	while IFS= read -r f; do
		[[ -f "$f" ]] && files+=("$f")
	done < <(git ls-files --cached --others --exclude-standard -- '*.go')
else
	while IFS= read -r f; do
		files+=("$f")
	done < <(find . -name '*.go' -not -path './.*' -not -path './bin/*')
fi
[[ ${#files[@]} -eq 0 ]] && exit 0

if [[ "${1:-}" == "--write" ]]; then
	gofmt -w "${files[@]}"
	exit 0
fi
bad=$(gofmt -l "${files[@]}")
if [[ -n "$bad" ]]; then
	echo "gofmt: these files are not formatted (run 'make fmt'):" >&2
	echo "$bad" | sed 's/^/  /' >&2
	exit 1
fi
