#!/usr/bin/env bash
# Renders the chat page of `parallax serve` in headless Chromium: trains a
# small model on a short text, serves it, opens the page with a first
# message (/?q=...), waits over Chromium's DevTools protocol until the page
# shows the whole streamed answer (scripts/cdp-screenshot.mjs) and saves a
# screenshot (default docs/serve-chat.png).
#
#   scripts/serve-screenshot.sh [OUT.png]
#
# Needs Go (or PARALLAX_BIN), Node 20 and Debian's chromium (apt-get install
# chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/serve-chat.png}
bin=${PARALLAX_BIN:-}
chrome=$(command -v chromium || command -v chromium-browser || true)
[[ -n $chrome ]] || { echo "serve-screenshot: chromium is not installed (apt-get install chromium)" >&2; exit 1; }
work=$(mktemp -d)
server=
cleanup() {
	[[ -n $server ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
if [[ -z $bin ]]; then
	bin=$work/parallax
	go build -o "$bin" ./cmd/parallax
fi

for _ in $(seq 80); do
	printf 'user: Who is in want of a wife?\nassistant: A single man in possession of a good fortune.\n'
	printf 'user: What is universally acknowledged?\nassistant: That a single man in possession of a good fortune must be in want of a wife.\n'
done >"$work/text.txt"
"$bin" train --config tiny --data "$work/text.txt" --vocab 300 --device cpu --batch 4 --seq 48 \
	--steps ${STEPS:-60} --out "$work/chat" >"$work/train.log" 2>&1 || { cat "$work/train.log" >&2; exit 1; }

"$bin" serve --model "$work/chat" --device cpu --port 0 --name tiny-chat >"$work/serve.out" 2>"$work/serve.err" &
server=$!
url=
for _ in $(seq 100); do
	url=$(grep -o 'http://[0-9.:]*' "$work/serve.out" || true)
	[[ -n $url ]] && break
	sleep 0.1
done
[[ -n $url ]] || { cat "$work/serve.err" >&2; exit 1; }

page="$url/?q=Who%20is%20in%20want%20of%20a%20wife%3F"
port=${CDP_PORT:-9333}
"$chrome" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$work/profile" \
	--remote-debugging-port="$port" about:blank >"$work/chrome.log" 2>&1 &
chrome_pid=$!
mkdir -p "$(dirname "$out")"
# The DevTools protocol waits for the answer bubble to finish streaming
# (data-state="done", with text) before the screenshot.
if ! node --experimental-websocket scripts/cdp-screenshot.mjs "$port" "$page" ".msg.assistant" "$work/shot.png" 180; then
	kill "$chrome_pid" 2>/dev/null
	echo "serve-screenshot: the page showed no finished answer" >&2
	exit 1
fi
kill "$chrome_pid" 2>/dev/null
wait "$chrome_pid" 2>/dev/null || true
cp "$work/shot.png" "$out"
echo "serve-screenshot: the page streamed its answer; screenshot in $out"
