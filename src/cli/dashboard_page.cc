// The dashboard's page (dashboard.h): plain HTML and JavaScript, nothing loaded from elsewhere.
// Everything shown comes from /api/state and is put in the page as text (textContent), never
// as HTML: worker names and log lines are the workers' bytes.
#include "cli/dashboard.h"

namespace troupe::cli {

const char* const kDashboardPage = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>troupe dashboard</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 1.2em 2em; color: #222; }
h1 { font-size: 1.4em; margin: 0 0 .2em; }
h2 { font-size: 1.1em; margin: 1.4em 0 .4em; }
h3 { font-size: 1em; margin: 1em 0 .3em; }
table { border-collapse: collapse; margin-bottom: .5em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td:first-child { white-space: nowrap; }
.up, .alive { color: #176b17; font-weight: 600; }
.lost, .exited { color: #a00; font-weight: 600; }
.notanswering { color: #b35c00; font-weight: 600; }
.error { color: #a00; }
.note { color: #666; font-size: .9em; }
pre { margin: 0; font-size: 12px; max-width: 60em; white-space: pre-wrap; }
</style>
</head>
<body>
<h1>troupe</h1>
<div id="head" class="note"></div>
<div>last refresh: <span id="refreshed">never</span> <span id="error" class="error"></span></div>
<p><a href="/timeline">view the timeline</a> &middot;
<a href="/timeline.json" download="timeline.json">download it</a>
(Chrome trace JSON; open it in chrome://tracing or ui.perfetto.dev) &middot;
<a href="/api/state">this state as JSON</a></p>
<h2>Hosts</h2>
<table id="hosts"></table>
<h2>Placement groups</h2>
<table id="pgs"></table>
<table id="waiting"></table>
<h2>Named workers</h2>
<table id="named"></table>
<h2>Worker groups</h2>
<div id="groups"></div>
<p class="note">call: the method the worker runs now and for how long (as of the refresh).
restarts: how many times the worker was recreated (WorkerGroup names the K-th recreation of
NAME NAME-rK; the exited incarnations are listed too). Workers of a host that is not answering
are not shown.</p>
<script>
"use strict";
function cell(tag, text, cls) {
  const e = document.createElement(tag);
  e.textContent = text === null || text === undefined ? "" : String(text);
  if (cls) e.className = cls;
  return e;
}
function fill(table, headers, rows) {
  table.replaceChildren();
  const head = document.createElement("tr");
  for (const h of headers) head.appendChild(cell("th", h));
  table.appendChild(head);
  for (const r of rows) {
    const tr = document.createElement("tr");
    for (const c of r) tr.appendChild(c instanceof Node ? wrap(c) : cell("td", c));
    table.appendChild(tr);
  }
}
function wrap(node) {
  if (node.tagName === "TD") return node;
  const td = document.createElement("td");
  td.appendChild(node);
  return td;
}
function bytes(n) {
  if (n === null || n === undefined) return "?";
  return (n / 1073741824).toFixed(1) + " GiB";
}
function age(ms) {
  return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s";
}
function hostRows(hosts) {
  return hosts.map(h => [
    h.name, h.address, h.cpus, h.gpus,
    bytes(h.memory_available) + " free of " + bytes(h.memory_total),
    cell("td", h.state + (h.why ? " (" + h.why + ")" : ""), h.state.replace(" ", "")),
    h.reserved]);
}
function workerRows(workers) {
  return workers.map(w => [
    w.name, w.host, w.pid, w.rank, cell("td", w.state, w.state), w.launch,
    w.call ? w.call + " for " + age(w.call_ms) : (w.state === "alive" ? "idle" : ""),
    w.restarts,
    cell("pre", w.log_error ? "(" + w.log_error + ")" : w.log.join("\n"))]);
}
function render(s) {
  document.getElementById("head").textContent = s.head;
  fill(document.getElementById("hosts"),
       ["host", "address", "CPUs", "GPUs", "memory", "state", "reserved"], hostRows(s.hosts));
  fill(document.getElementById("pgs"), ["placement group", "bundles"],
       s.placement_groups.map(g => [g.id, g.bundles]));
  fill(document.getElementById("waiting"), ["waiting for resources", "driver", "for", "reason"],
       s.waiting.map(w => [w.what, w.driver, age(Math.round(w.waiting_s * 1000)), w.reason]));
  fill(document.getElementById("named"),
       ["namespace", "name", "detached", "host", "worker", "pid", "held by"],
       s.named_workers.map(n => [n.namespace, n.name, n.detached ? "yes" : "no", n.host,
                                 n.worker, n.pid, n.owner || "(its driver left)"]));
  const groups = document.getElementById("groups");
  groups.replaceChildren();
  if (s.groups.length === 0) groups.appendChild(cell("p", "(no workers)", "note"));
  for (const g of s.groups) {
    groups.appendChild(cell("h3", g.name ? "group " + g.name : "workers outside a group"));
    const t = document.createElement("table");
    fill(t, ["worker", "host", "pid", "rank", "state", "launch", "call", "restarts",
             "last " + s.log_lines + " log lines"], workerRows(g.workers));
    groups.appendChild(t);
  }
}
async function refresh() {
  try {
    const r = await fetch("/api/state", {credentials: "same-origin", cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status + ": " + (await r.text()));
    render(await r.json());
    document.getElementById("refreshed").textContent = new Date().toLocaleTimeString();
    document.getElementById("error").textContent = "";
  } catch (e) {
    document.getElementById("error").textContent = "refresh failed: " + e.message;
  } finally {
    setTimeout(refresh, 2000);
  }
}
refresh();
</script>
</body>
</html>
)PAGE";

}  // namespace troupe::cli
