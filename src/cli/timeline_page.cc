// The dashboard's timeline view (dashboard.h, /timeline): plain HTML, JavaScript and SVG, nothing
// loaded from elsewhere. It fetches /timeline.json once (a Chrome trace, timeline_trace.h) and
// draws one row per track and thread: calls and dispatches as bars, instants (starts, deaths,
// restarts, host loss) as ticks, each with its details as a tooltip. The wheel zooms around the
// pointer; dragging pans. Names are put in the page as text, never as HTML.
#include "cli/dashboard.h"

namespace troupe::cli {

const char* const kTimelinePage = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>troupe timeline</title>
<style>
body { font: 13px system-ui, sans-serif; margin: 1em 1.5em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .3em; }
.note { color: #666; font-size: .9em; }
.error { color: #a00; }
svg { display: block; border: 1px solid #ccc; background: #fff; cursor: grab; }
text { font: 11px system-ui, sans-serif; }
text.label { font-weight: 600; }
</style>
</head>
<body>
<h1>troupe timeline</h1>
<div class="note"><a href="/">back to the dashboard</a> ·
<a href="/timeline.json" download="timeline.json">download the trace</a> (chrome://tracing,
ui.perfetto.dev) · wheel: zoom, drag: pan</div>
<div id="summary" class="note">collecting...</div>
<div id="error" class="error"></div>
<svg id="chart" width="1200" height="80"></svg>
<script>
"use strict";
const NS = "http://www.w3.org/2000/svg";
const LABEL_W = 330, ROW_H = 22, AXIS_H = 24, WIDTH = 1200;
const COLORS = {call: "#4a7fc1", dispatch: "#c17a2c", send: "#8a6cc1", phase: "#3f9a5a"};
let rows = [], t0 = 0, t1 = 1, view0 = 0, view1 = 1;

function el(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function ms(us) { return us >= 1000 ? (us / 1000).toFixed(2) + " ms" : us.toFixed(1) + " us"; }
function details(e) {
  let s = e.name + " [" + e.cat + "] at " + ms(e.ts - t0);
  if (e.ph === "X") s += ", " + ms(e.dur);
  for (const k in (e.args || {})) s += "\n" + k + ": " + e.args[k];
  return s;
}
// Rows: one per (pid, tid) that has events, in the trace's process order.
function buildRows(trace) {
  const procs = {}, threads = {}, byRow = new Map();
  for (const e of trace.traceEvents) {
    if (e.ph !== "M") continue;
    if (e.name === "process_name") procs[e.pid] = e.args.name;
    if (e.name === "thread_name") threads[e.pid + "/" + e.tid] = e.args.name;
  }
  t0 = Infinity; t1 = -Infinity;
  for (const e of trace.traceEvents) {
    if (e.ph !== "X" && e.ph !== "i") continue;
    const key = e.pid + "/" + e.tid;
    if (!byRow.has(key))
      byRow.set(key, {pid: e.pid, tid: e.tid, label: (procs[e.pid] || "pid " + e.pid),
                      thread: threads[key] || "", events: []});
    byRow.get(key).events.push(e);
    t0 = Math.min(t0, e.ts);
    t1 = Math.max(t1, e.ts + (e.dur || 0));
  }
  if (!(t1 > t0)) { t0 = 0; t1 = 1; }
  return [...byRow.values()].sort((a, b) => a.pid - b.pid || a.tid - b.tid);
}
function draw() {
  const svg = document.getElementById("chart");
  svg.replaceChildren();
  const height = AXIS_H + rows.length * ROW_H + 4;
  svg.setAttribute("height", height);
  const plotW = WIDTH - LABEL_W - 10;
  const x = t => LABEL_W + (t - view0) / (view1 - view0) * plotW;
  for (let i = 0; i < 8; ++i) {  // the axis: time since the first event
    const t = view0 + (view1 - view0) * i / 8, px = x(t);
    svg.appendChild(el("line", {x1: px, x2: px, y1: AXIS_H - 4, y2: height, stroke: "#eee"}));
    svg.appendChild(el("text", {x: px + 2, y: 14, fill: "#666"}, ms(t - t0)));
  }
  const clip = el("clipPath", {id: "plot"});
  clip.appendChild(el("rect", {x: LABEL_W, y: 0, width: plotW, height: height}));
  svg.appendChild(clip);
  rows.forEach((r, i) => {
    const y = AXIS_H + i * ROW_H;
    if (i % 2) svg.appendChild(el("rect", {x: 0, y: y, width: WIDTH, height: ROW_H, fill: "#f7f7f7"}));
    const label = el("text", {x: 4, y: y + 15, class: "label"}, r.label);
    label.appendChild(el("tspan", {fill: "#888", "font-weight": "normal"}, "  " + r.thread));
    svg.appendChild(label);
    const g = el("g", {"clip-path": "url(#plot)"});
    for (const e of r.events) {
      const x0 = x(e.ts);
      let shape;
      if (e.ph === "X") {
        const w = Math.max(1, x(e.ts + e.dur) - x0);
        if (x0 + w < LABEL_W || x0 > WIDTH) continue;
        shape = el("rect", {x: x0, y: y + 3, width: w, height: ROW_H - 6, rx: 2,
                            fill: COLORS[e.cat] || "#888", class: "span"});
        g.appendChild(shape);
        if (w > 40) g.appendChild(el("text", {x: x0 + 3, y: y + 15, fill: "#fff"}, e.name));
      } else {
        if (x0 < LABEL_W || x0 > WIDTH) continue;
        shape = el("path", {d: `M${x0} ${y + 2} l5 9 l-5 9 l-5 -9 z`, class: "instant",
                            fill: e.cat === "death" || e.cat === "host" ? "#c33" : "#2a2"});
        g.appendChild(shape);
      }
      shape.appendChild(el("title", {}, details(e)));
    }
    svg.appendChild(g);
  });
}
function interact() {
  const svg = document.getElementById("chart");
  const plotW = WIDTH - LABEL_W - 10;
  svg.addEventListener("wheel", ev => {
    ev.preventDefault();
    const at = view0 + (ev.offsetX - LABEL_W) / plotW * (view1 - view0);
    const k = ev.deltaY > 0 ? 1.25 : 0.8;
    view0 = at - (at - view0) * k; view1 = at + (view1 - at) * k;
    draw();
  });
  let from = null;
  svg.addEventListener("mousedown", ev => { from = ev.offsetX; });
  window.addEventListener("mouseup", () => { from = null; });
  svg.addEventListener("mousemove", ev => {
    if (from === null) return;
    const dt = (ev.offsetX - from) / plotW * (view1 - view0);
    view0 -= dt; view1 -= dt; from = ev.offsetX;
    draw();
  });
}
async function load() {
  try {
    const r = await fetch("/timeline.json", {credentials: "same-origin", cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status + ": " + (await r.text()));
    const trace = await r.json();
    rows = buildRows(trace);
    view0 = t0; view1 = t1 + (t1 - t0) * 0.02;
    const o = trace.otherData || {};
    let n = 0;
    for (const row of rows) n += row.events.length;
    document.getElementById("summary").textContent =
        rows.length + " rows, " + n + " events over " + ms(t1 - t0) +
        (o.clock_error_bound_us !== undefined ? "; clock error bound " + o.clock_error_bound_us + " us" : "");
    draw();
    interact();
  } catch (e) {
    document.getElementById("summary").textContent = "";
    document.getElementById("error").textContent = "no timeline: " + e.message;
  }
}
load();
</script>
</body>
</html>
)PAGE";

}  // namespace troupe::cli
