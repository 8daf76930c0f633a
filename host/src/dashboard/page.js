// The dashboard's script: reads status.json every POLL_MS and draws it.
// Throughput comes from successive readings of each shard's `records`;
// a checkpoint's age from when this page last saw it move.
"use strict";

const POLL_MS = 2000;
const HISTORY_MS = 5 * 60 * 1000;
const VERSION_COLOURS = ["#1f8a4c", "#4a5cc4", "#b86e00", "#7d5ba6", "#2d7d9a", "#c0392b"];

/** Per shard: readings of its records ({t, records}) on its current owner. */
const history = new Map();
/** Per shard: its checkpoint and when this page first saw it. */
const checkpoints = new Map();
const pageOpened = Date.now();
let renders = 0;

const $ = (id) => document.getElementById(id);
const esc = (text) => String(text ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const hashOf = (processor) => (processor || "").split(" ")[0];
const shardId = (key) => key.split(":").pop();

function seconds(ms) {
  if (ms == null) return "–";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 7200000) return `${Math.round(ms / 60000)} min`;
  return `${(ms / 3600000).toFixed(1)} h`;
}

function count(n) {
  if (n < 1000) return String(Math.round(n));
  if (n < 1e6) return `${(n / 1000).toFixed(n < 1e4 ? 1 : 0)}k`;
  return `${(n / 1e6).toFixed(1)}M`;
}

/** Notes this reading of every shard; returns records/s per shard over the last 30 s. */
function observe(report, now) {
  const rates = new Map();
  const seen = new Set();
  for (const row of report.shards) {
    seen.add(row.shard);
    const mark = checkpoints.get(row.shard);
    if (!mark || mark.checkpoint !== row.checkpoint || mark.sub !== row.sub_sequence_number) {
      checkpoints.set(row.shard, { checkpoint: row.checkpoint, sub: row.sub_sequence_number, since: mark ? now : pageOpened, moved: !!mark });
    }
    if (!row.progress) { history.delete(row.shard); continue; }
    let readings = history.get(row.shard);
    const last = readings && readings[readings.length - 1];
    // A new owner counts from zero: its readings start again.
    if (!readings || last.owner !== row.owner || row.progress.records < last.records) readings = [];
    readings.push({ t: now, records: row.progress.records, owner: row.owner });
    while (readings.length > 2 && now - readings[0].t > HISTORY_MS) readings.shift();
    history.set(row.shard, readings);
    const from = readings.find((r) => now - r.t <= 30000) || readings[0];
    const newest = readings[readings.length - 1];
    rates.set(row.shard, newest.t > from.t ? (newest.records - from.records) * 1000 / (newest.t - from.t) : null);
  }
  for (const key of [...history.keys()]) if (!seen.has(key)) history.delete(key);
  for (const key of [...checkpoints.keys()]) if (!seen.has(key)) checkpoints.delete(key);
  return rates;
}

/** A small chart of records/s between readings over the last minutes. */
function sparkline(key) {
  const readings = history.get(key) || [];
  if (readings.length < 3) return "";
  const rates = [];
  for (let i = 1; i < readings.length; i++) {
    const dt = readings[i].t - readings[i - 1].t;
    rates.push(dt > 0 ? (readings[i].records - readings[i - 1].records) * 1000 / dt : 0);
  }
  const top = Math.max(...rates, 1);
  const w = 90, h = 18;
  const points = rates.map((r, i) => `${(i * w / Math.max(rates.length - 1, 1)).toFixed(1)},${(h - 1 - r * (h - 2) / top).toFixed(1)}`).join(" ");
  return `<svg class="spark" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}"><polyline points="${points}"/></svg>`;
}

function summary(report, rates) {
  const by = (state) => report.shards.filter((r) => r.state === state).length;
  const total = [...rates.values()].reduce((a, b) => a + (b || 0), 0);
  const behind = Math.max(0, ...report.shards.map((r) => (r.progress && r.progress.millis_behind) || 0));
  const ended = by("shard-end"), waiting = by("waiting-for-parents");
  return `<b>${report.shards.length - ended - waiting}</b> shards open · <b>${ended}</b> at SHARD_END · <b>${waiting}</b> waiting for parents · ` +
    `<b>${report.workers.length}</b> workers · <b>${count(total)}</b> records/s · most behind <b>${seconds(behind)}</b> · ` +
    `updated <span id="updated">${new Date().toLocaleTimeString()}</span>`;
}

function versions(report) {
  const counts = new Map();
  for (const row of report.shards) {
    const hash = row.progress && row.progress.processor;
    if (hash && row.state !== "shard-end") counts.set(hash, (counts.get(hash) || 0) + 1);
  }
  return counts;
}

function rollout(report) {
  const counts = versions(report);
  const wanted = report.deployed ? hashOf(report.deployed.processor) : null;
  // The deployed version first (green), every other in the next colours.
  const order = [...counts.keys()].sort((a, b) => (b === wanted) - (a === wanted));
  const colour = new Map(order.map((h, i) => [h, VERSION_COLOURS[(i + (wanted && !counts.has(wanted) ? 1 : 0)) % VERSION_COLOURS.length]]));
  const running = [...counts.values()].reduce((a, b) => a + b, 0);
  const onWanted = wanted ? counts.get(wanted) || 0 : 0;
  let text;
  if (!report.deployed) {
    text = counts.size > 1 ? `${counts.size} versions run (a swap is rolling out)` : "No deploy row: every worker runs the processor it was started with.";
  } else if (onWanted === running && running > 0) {
    text = `Every shard runs the deployed version <code>${esc(report.deployed.processor)}</code>.`;
  } else {
    const canary = report.shards.filter((r) => r.progress && r.progress.processor === wanted && r.state !== "shard-end").map((r) => shardId(r.shard));
    text = `Rolling out <code>${esc(report.deployed.processor)}</code>: ${onWanted} of ${running} shards` +
      (canary.length ? `; on it now: <span id="canary">${canary.map(esc).join(", ")}</span>` : "; the canary has not started yet");
  }
  // SVG, not styled spans: the page's content security policy allows no inline style.
  let x = 0;
  const bar = [...counts].map(([hash, n]) => {
    const width = (640 * n) / Math.max(running, 1);
    const rect = `<rect x="${x.toFixed(1)}" width="${width.toFixed(1)}" height="14" fill="${colour.get(hash)}"><title>${esc(hash)}: ${n}</title></rect>`;
    x += width;
    return rect;
  }).join("");
  const swatch = (hash) => `<svg class="swatch" width="10" height="10"><rect width="10" height="10" rx="2" fill="${colour.get(hash)}"/></svg>`;
  const legend = [...counts].map(([hash, n]) => `<span>${swatch(hash)}<code>${esc(hash)}</code> ${n}${hash === wanted ? " (deployed)" : ""}</span>`).join("");
  const deployed = report.deployed
    ? `<div class="muted">deploy row: <code>${esc(report.deployed.processor)}</code> from <code>${esc(report.deployed.source)}</code>${report.deployed.previous ? `, rollback to <code>${esc(report.deployed.previous)}</code>` : ""}</div>`
    : "";
  return `<div id="rollout-state" data-wanted="${esc(wanted || "")}" data-on-wanted="${onWanted}" data-running="${running}">${text}</div>` +
    (running ? `<svg class="bar" width="640" height="14" viewBox="0 0 640 14">${bar}</svg><div class="legend">${legend}</div>` : "") + deployed;
}

function failures(report) {
  const retrying = report.shards.filter((r) => r.retrying);
  let dead = 0, skipped = 0;
  for (const row of report.shards) if (row.progress) { dead += row.progress.dead_lettered || 0; skipped += row.progress.skipped || 0; }
  const now = Date.now();
  const rows = retrying.map((r) => {
    const limit = r.retrying.limit == null ? "no limit: blocked" : `gives up after ${r.retrying.limit + 1}`;
    const error = (r.retrying.last_error || "").split("\n")[0].slice(0, 400);
    return `<tr data-shard="${esc(r.shard)}"><td class="mono">${esc(shardId(r.shard))}</td><td class="num">${seconds(now - r.retrying.since_ms)}</td>` +
      `<td class="num">${r.retrying.attempts}</td><td>${limit}</td><td class="error-text">${esc(error)}</td></tr>`;
  }).join("");
  const head = `<div id="given-up" data-dead-lettered="${dead}" data-skipped="${skipped}">${retrying.length} shards retrying · ${dead} records sent to the dead letters · ${skipped} dropped (no failure target), by the current owners</div>`;
  return head + (rows ? `<table><tr><th>Shard</th><th class="num">Since</th><th class="num">Failures</th><th>Policy</th><th>Last error</th></tr>${rows}</table>` : "");
}

function shards(report, rates, now) {
  const withState = report.shards.some((r) => r.state_size);
  const withWindows = report.shards.some((r) => r.progress && r.progress.window_start_ms != null);
  const groups = new Map();
  for (const row of report.shards) {
    const stream = row.stream || "";
    if (!groups.has(stream)) groups.set(stream, []);
    groups.get(stream).push(row);
  }
  let html = "";
  for (const [stream, rows] of groups) {
    // The source as the workers report it: kinesis or dynamodb-streams.
    const sources = [...new Set(rows.map((r) => r.progress && r.progress.source).filter(Boolean))];
    const source = sources.length ? ` <span class="muted" data-source="${esc(sources.join(","))}">(${esc(sources.join(", "))})</span>` : "";
    if (stream || source) html += `<div class="stream">${stream ? `stream ${esc(stream)}` : "source"}${source}</div>`;
    html += `<table><tr><th>Shard</th><th>State</th><th>Owner</th><th>Version</th><th class="num">Records/s</th><th>last 5 min</th>` +
      `<th class="num">Behind</th><th class="num">Checkpoint moved</th><th>Checkpoint</th><th class="num">Parallel</th>${withWindows ? '<th class="num">Open window</th>' : ""}${withState ? '<th class="num">State</th>' : ""}</tr>`;
    for (const row of rows) {
      const p = row.progress || {};
      const rate = rates.get(row.shard);
      const mark = checkpoints.get(row.shard);
      const moved = row.state === "shard-end" ? "–" : mark.moved ? `${seconds(now - mark.since)} ago` : `≥ ${seconds(now - mark.since)} ago`;
      const parallel = row.in_flight ? `${row.in_flight.calls}/${row.in_flight.instances}` : "";
      const state = row.state_size ? `${count(row.state_size.keys)} keys, ${(row.state_size.bytes / 1048576).toFixed(1)} MiB` : "";
      const window = p.window_start_ms == null ? "" : `from ${new Date(p.window_start_ms).toLocaleTimeString()}`;
      html += `<tr data-shard="${esc(row.shard)}" data-state="${row.state}" data-owner="${esc(row.owner || "")}" data-processor="${esc(p.processor || "")}">` +
        `<td class="mono">${esc(shardId(row.shard))}</td><td><span class="badge state-${row.state}">${row.state === "shard-end" ? "SHARD_END" : row.state}</span></td>` +
        `<td>${esc(row.owner || "–")}</td><td class="mono">${esc(p.processor || "")}</td>` +
        `<td class="num">${rate == null ? "" : count(rate)}</td><td>${sparkline(row.shard)}</td>` +
        `<td class="num">${seconds(p.millis_behind ?? row.lag_ms)}</td><td class="num">${moved}</td>` +
        `<td class="mono muted" title="${esc(row.checkpoint)}">${esc(row.checkpoint.length > 18 ? `…${row.checkpoint.slice(-14)}` : row.checkpoint)}</td>` +
        `<td class="num">${parallel}</td>${withWindows ? `<td class="num" data-window-start="${p.window_start_ms ?? ""}">${window}</td>` : ""}` +
        `${withState ? `<td class="num">${state}</td>` : ""}</tr>`;
    }
    html += "</table>";
  }
  return html || '<div class="muted">No leases yet.</div>';
}

/** Shards that took part in a reshard, in columns by generation, parents joined to children. */
function lineage(report) {
  const byKey = new Map(report.shards.map((r) => [r.shard, r]));
  const siblingKey = (row, parent) => (row.shard.includes(":") && !parent.includes(":") ? row.shard.replace(/[^:]*$/, parent) : parent);
  const parentsOf = (row) => row.parents.map((p) => siblingKey(row, p)).filter((p) => byKey.has(p));
  const family = new Set();
  for (const row of report.shards) for (const p of parentsOf(row)) { family.add(row.shard); family.add(p); }
  if (!family.size) return '<div class="muted">No reshards: every shard is a root.</div>';
  const depth = new Map();
  const depthOf = (key, seen = new Set()) => {
    if (depth.has(key)) return depth.get(key);
    if (seen.has(key)) return 0;
    seen.add(key);
    const parents = parentsOf(byKey.get(key));
    const d = parents.length ? 1 + Math.max(...parents.map((p) => depthOf(p, seen))) : 0;
    depth.set(key, d);
    return d;
  };
  const columns = [];
  for (const key of [...family].sort()) (columns[depthOf(key)] ||= []).push(key);
  const W = 250, H = 24, GAP_X = 60, GAP_Y = 8;
  const place = new Map();
  columns.forEach((keys, c) => keys.forEach((key, r) => place.set(key, { x: c * (W + GAP_X), y: r * (H + GAP_Y) })));
  let svg = "";
  for (const key of family) {
    const to = place.get(key);
    for (const p of parentsOf(byKey.get(key))) {
      const from = place.get(p);
      const mid = (from.x + W + to.x) / 2;
      svg += `<path d="M${from.x + W},${from.y + H / 2} C${mid},${from.y + H / 2} ${mid},${to.y + H / 2} ${to.x},${to.y + H / 2}"/>`;
    }
  }
  for (const [key, { x, y }] of place) {
    const row = byKey.get(key);
    const label = `${shardId(key)} ${row.state === "shard-end" ? "END" : row.state === "waiting-for-parents" ? "wait" : row.owner || ""}`;
    svg += `<g data-lineage="${esc(key)}" data-state="${row.state}"><rect class="fill-${row.state}" x="${x}" y="${y}" width="${W}" height="${H}"/>` +
      `<text x="${x + 6}" y="${y + 16}">${esc(label.slice(0, 36))}</text></g>`;
  }
  const width = columns.length * (W + GAP_X) - GAP_X;
  const height = Math.max(...columns.map((c) => c.length)) * (H + GAP_Y);
  const rest = report.shards.length - family.size;
  return `<svg class="lineage" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">${svg}</svg>` +
    (rest ? `<div class="muted">${rest} more shards without a reshard.</div>` : "");
}

function workers(report) {
  const open = report.shards.filter((r) => r.state !== "shard-end" && r.state !== "waiting-for-parents").length;
  const share = report.workers.length ? Math.ceil(open / report.workers.length) : 0;
  const active = new Map();
  for (const row of report.shards) if (row.owner && row.state !== "shard-end") active.set(row.owner, (active.get(row.owner) || 0) + 1);
  const rows = report.workers.map((w) => {
    const kind = w.heartbeat_age_ms != null ? "kcl-host" : w.kcl3_report_age_ms != null ? "Java KCL 3.x" : "other (Java KCL?)";
    const beat = w.heartbeat_age_ms != null ? `${seconds(w.heartbeat_age_ms)} ago` : w.kcl3_report_age_ms != null ? `3.x report ${seconds(w.kcl3_report_age_ms)} ago` : "–";
    const open = active.get(w.worker) || 0;
    const r = w.rollout || {};
    const trial = r.canary ? `<code>${esc(r.trial)}</code> on its canary ${esc(shardId(r.canary))}`
      : r.probation_until_ms ? `<code>${esc(r.trial)}</code> on probation for ${seconds(Math.max(0, r.probation_until_ms - Date.now()))}` : "";
    const rolledBack = (r.rolled_back || []).length ? ` <span class="bad">rolled back: ${r.rolled_back.map(esc).join(", ")}</span>` : "";
    const ended = w.leases - open > 0 ? ` <span class="muted">+${w.leases - open} ended</span>` : "";
    return `<tr data-worker="${esc(w.worker)}" data-leases="${w.leases}" data-active="${open}" data-trial="${esc(r.trial || "")}"><td>${esc(w.worker)}</td><td>${kind}</td>` +
      `<td class="num">${open} / ${share}${ended}</td><td class="num">${beat}</td><td class="mono">${esc(w.processor || "–")}</td><td>${trial}${rolledBack}</td></tr>`;
  }).join("");
  const unreadable = report.unreadable.map((k) => `<div class="muted">unreadable row: <code>${esc(k)}</code> (left as it is)</div>`).join("");
  return `<table><tr><th>Worker</th><th>Kind</th><th class="num">Open leases / share</th><th class="num">Heartbeat</th><th>Processor</th><th>Rollout</th></tr>${rows}</table>${unreadable}`;
}

function draw(report) {
  const now = Date.now();
  const rates = observe(report, now);
  $("application").textContent = report.application;
  document.title = `${report.application} · kcl-host`;
  $("summary").innerHTML = summary(report, rates);
  $("rollout").innerHTML = rollout(report);
  $("failures").innerHTML = failures(report);
  $("shards").innerHTML = shards(report, rates, now);
  $("lineage").innerHTML = lineage(report);
  $("workers").innerHTML = workers(report);
  renders += 1;
  document.body.dataset.renders = String(renders);
  if (renders === 1) document.body.dataset.firstRenderMs = String(Math.round(performance.now()));
}

async function poll() {
  try {
    const response = await fetch("status.json", { cache: "no-store" });
    if (!response.ok) throw new Error(await response.text());
    draw(await response.json());
    $("error").hidden = true;
  } catch (e) {
    $("error").textContent = `Could not read the tables: ${e.message}`;
    $("error").hidden = false;
  }
  setTimeout(poll, POLL_MS);
}

poll();
