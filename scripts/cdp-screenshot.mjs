// Drives headless Chromium over the DevTools protocol (Node's WebSocket,
// --experimental-websocket on Node 20): opens a page, waits until the
// element matching a selector has the attribute state "done" and text,
// then saves a PNG screenshot.
//
//   node --experimental-websocket scripts/cdp-screenshot.mjs DEVTOOLS_PORT URL SELECTOR OUT.png [TIMEOUT_S]
import { writeFileSync } from "node:fs";

const [port, url, selector, out, timeoutS = "120"] = process.argv.slice(2);
const deadline = Date.now() + Number(timeoutS) * 1000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let targets;
for (;;) {
  try {
    targets = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
    if (targets.some((t) => t.type === "page")) break;
  } catch {}
  if (Date.now() > deadline) throw new Error("no Chromium page target");
  await sleep(200);
}
const ws = new WebSocket(targets.find((t) => t.type === "page").webSocketDebuggerUrl);
await new Promise((ok, bad) => { ws.onopen = ok; ws.onerror = bad; });
let next = 0;
const pending = new Map();
ws.onmessage = (e) => {
  const m = JSON.parse(e.data);
  if (m.id && pending.has(m.id)) { pending.get(m.id)(m); pending.delete(m.id); }
};
const call = (method, params = {}) => new Promise((ok) => {
  const id = ++next;
  pending.set(id, ok);
  ws.send(JSON.stringify({ id, method, params }));
});

await call("Emulation.setDeviceMetricsOverride", { width: 900, height: 560, deviceScaleFactor: 1, mobile: false });
await call("Page.navigate", { url });
const probe = `(() => { const e = document.querySelector(${JSON.stringify(selector)});
  return e && e.dataset.state === "done" && e.textContent.trim().length > 0 ? e.textContent.trim() : ""; })()`;
for (;;) {
  const r = await call("Runtime.evaluate", { expression: probe, returnByValue: true });
  const text = r.result?.result?.value;
  if (text) { console.log(`answer: ${text.slice(0, 120)}`); break; }
  if (Date.now() > deadline) throw new Error(`no finished answer in ${timeoutS} s`);
  await sleep(250);
}
const shot = await call("Page.captureScreenshot", { format: "png" });
writeFileSync(out, Buffer.from(shot.result.data, "base64"));
ws.close();
