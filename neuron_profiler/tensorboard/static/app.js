// Neuron Profiler tab: shows the analyzer's --json document (route "report") and its drawable
// device timeline (route "timeline") for the chosen run / worker / span, the cross-rank
// analysis of the run's traces that belong with it (route "distributed", fetched when the
// Distributed view opens), `neuron-prof project --json` of the trace onto the chosen chip
// (route "projection", fetched when the Projection view opens or a chip changes), and the diff
// of another trace (A, the baseline picked in the Diff view) against the shown one (B) (route
// "diff": `neuron-prof diff --json A B`); the Memory view shows the report's `memory` section. It
// computes nothing (every figure comes from those documents);
// every name from a trace is set with textContent, shortened (shorten below). Colours of the
// idle causes and the text limits come from route "style" (reports/palette.py: the HTML
// report's), fetched first.
"use strict";

const PERFETTO = "https://ui.perfetto.dev";
const VIEWS = ["Overview", "Operators", "Kernels", "Fallbacks", "Idle", "Memory", "Distributed", "Diff", "Projection", "Trace"];
const POLL_MS = 500; // while the first analysis of a trace runs (the route answers 202)
// route "style": {cause_colours, emulator_overhead_colour, name_limit, text_limit, ellipsis}
let STYLE = { cause_colours: {}, name_limit: 200, text_limit: 1000, ellipsis: "\u2026" };
// base: the Diff view's baseline (A) as "run|worker|span" ids ("" until chosen); diffBy: its
// rows by "op" or "module" (the route's `by`); diff: its answer for the shown trace (null: not
// asked, {loading: true}, {error}, or the document)
const state = { runs: [], doc: null, timeline: null, cross: null, projection: null, chips: [], chip: "trn2",
  sources: [], source: "",
  diff: null, base: "", diffBy: "op", error: null, view: "Overview", load: 0 };
const $ = (id) => document.getElementById(id);

// reports/text.py's shorten, in the browser (the documents keep every text whole): a text of
// more than `limit` characters (code points; default the name limit) is its first
// ceil((limit - 1) / 2) and last floor((limit - 1) / 2) around the ellipsis; control
// characters are shown as escapes ("\x1b"), cut again if that made it longer. Only the kept
// characters are visited, so a 50 MB name costs no more than a short one.
function shorten(text, limit) {
  const max = limit ?? STYLE.name_limit;
  return cut(shown(cut(String(text), max)), max);
}

function shown(s) {
  return s.replace(/[\x00-\x1f\x7f-\x9f]/g,
    (c) => "\\x" + c.charCodeAt(0).toString(16).padStart(2, "0"));
}

function cut(s, max) {
  if (s.length <= max) return s; // UTF-16 units: never fewer than code points
  const step = (i) => (s.codePointAt(i) > 0xffff ? 2 : 1);
  let n = 0;
  for (let i = 0; i < s.length && n <= max; n++) i += step(i);
  if (n <= max) return s;
  const keep = max - 1, tail = Math.floor(keep / 2), head = keep - tail;
  let a = 0;
  for (let k = 0; k < head; k++) a += step(a);
  let b = s.length;
  for (let k = 0; k < tail; k++) {
    const low = s.charCodeAt(b - 1), high = s.charCodeAt(b - 2);
    b -= b >= 2 && low >= 0xdc00 && low <= 0xdfff && high >= 0xd800 && high <= 0xdbff ? 2 : 1;
  }
  return s.slice(0, a) + STYLE.ellipsis + s.slice(b);
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

// A cell's text: numbers at `digits`, texts shortened to `limit` (default the name limit).
function fmt(v, digits, limit) {
  if (v === null || v === undefined) return "";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toFixed(digits ?? 3);
  if (Array.isArray(v)) {
    return shorten(v.map((x) => (Array.isArray(x) ? "[" + x.join(", ") + "]" : shorten(x, limit))).join("; "),
      STYLE.text_limit);
  }
  return shorten(v, limit);
}

// A change with its sign, never a negative zero (reports/text.py's signed: "+0.00", not "-0.00").
function signed(v, digits) {
  const text = v.toFixed(digits ?? 3);
  const zero = !/[1-9]/.test(text);
  return (v > 0 || zero ? "+" : "") + (zero ? text.replace("-", "") : text);
}

// columns: [[key or function, label, digits, limit]] (limit: of a text cell, default the name
// limit); name: the document section the rows come from (data-table; each th of a plain key
// carries it as data-key, and its digits and limit), so a test can read it back;
// rowClass(row): a class for the row (e.g. a straggler's).
function table(columns, rows, name, rowClass) {
  const t = el("table");
  if (name) t.dataset.table = name;
  const head = t.createTHead().insertRow();
  for (const [key, label, digits, limit] of columns) {
    const th = el("th", label);
    if (typeof key === "string") th.dataset.key = key;
    if (digits !== undefined) th.dataset.digits = String(digits);
    if (limit !== undefined) th.dataset.limit = String(limit);
    head.appendChild(th);
  }
  const body = t.createTBody();
  for (const row of rows) {
    const tr = body.insertRow();
    if (rowClass && rowClass(row)) tr.className = rowClass(row);
    for (const [key, , digits, limit] of columns) {
      const v = typeof key === "function" ? key(row) : row[key];
      tr.appendChild(el("td", fmt(v, digits, limit), typeof v === "number" ? "num" : ""));
    }
  }
  return t;
}

function empty(why) { return el("p", why, "empty"); }

// plotly.js reads a subset of HTML in its strings (<a href>, <br>, <b>, ...): every text given
// to it is entity-escaped (plotly shows the entities as the characters), as the HTML report's
// figures are (reports/html_report.py), so a name from a trace is never markup.
const PLOTLY_TEXT_KEYS = ["name", "x", "y", "text", "labels", "hovertext"];

function plotlyText(v) {
  return typeof v === "string"
    ? v.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;") : v;
}

function asPlotlyText(trace) {
  const out = Object.assign({}, trace);
  for (const k of PLOTLY_TEXT_KEYS) {
    if (Array.isArray(out[k])) out[k] = out[k].map(plotlyText);
    else out[k] = plotlyText(out[k]);
  }
  return out;
}

function chart(traces, layout) {
  const div = el("div", null, "chart");
  if (!window.Plotly) return empty("plotly.js did not load: charts are unavailable");
  if (layout.height) div.style.height = layout.height + "px";
  requestAnimationFrame(() => window.Plotly.newPlot(div, traces.map(asPlotlyText),
    Object.assign({ barmode: "stack", margin: { t: 30 } }, layout), { displaylogo: false }));
  return div;
}

async function api(route, params) {
  const q = new URLSearchParams(params || {}).toString();
  const res = await fetch(route + (q ? "?" + q : ""));
  const body = await res.json().catch(() => ({ error: res.status + " " + res.statusText }));
  if (!res.ok) throw new Error(body.error || res.statusText);
  return { status: res.status, body };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// An analysis route; while the server analyses the trace (202) it shows the phase and asks
// again. Returns null when the user chose another trace meanwhile.
async function analysis(route, params, load) {
  for (;;) {
    const { status, body } = await api(route, params);
    if (load !== state.load) return null;
    if (status !== 202) return body;
    $("status").textContent = "analysing… (" + body.phase + ", " + body.elapsed_s + " s)";
    render();
    await sleep(POLL_MS);
    if (load !== state.load) return null;
  }
}

function selected() {
  return { run: $("run").value, worker: $("worker").value, span: $("span").value };
}

// items: {id, name} (a span also has a label: its place and when it was written, not raw ns)
function fill(select, items) {
  const keep = select.value;
  select.replaceChildren(...items.map((i) => { const o = el("option", i.label || i.name); o.value = i.id; return o; }));
  if (items.some((i) => i.id === keep)) select.value = keep;
}

function currentRun() { return state.runs.find((r) => r.id === $("run").value); }
function currentWorker() {
  const run = currentRun();
  return run && run.workers.find((w) => w.id === $("worker").value);
}

function syncSelectors() {
  fill($("run"), state.runs);
  const run = currentRun();
  fill($("worker"), run ? run.workers : []);
  const worker = currentWorker();
  fill($("span"), worker ? worker.spans : []);
}

async function loadRuns() {
  state.runs = (await api("runs")).body.runs;
  syncSelectors();
}

async function loadReport() {
  const load = ++state.load;
  state.doc = null; state.timeline = null; state.cross = null; state.projection = null; state.diff = null;
  state.source = "";  // "Recorded on" belongs to the trace it was chosen for
  state.error = null;
  if (!$("span").value) { render(); return; }
  $("status").textContent = "analysing…";
  render();
  try {
    const report = await analysis("report", selected(), load);
    const timeline = report && await analysis("timeline", selected(), load);
    if (!timeline) return;
    state.doc = report.traces[0];
    state.timeline = timeline;
  } catch (err) {
    if (load !== state.load) return;
    state.error = err.message;
  }
  $("status").textContent = "";
  render();
}

// The cross-rank answer for the shown trace (route "distributed"), fetched once per trace when
// the Distributed view opens; state.cross is {loading: true} meanwhile.
async function loadDistributed(load) {
  state.cross = { loading: true };
  const { run, span } = selected();
  try {
    const body = await analysis("distributed", { run, span }, load);
    if (!body) return;
    state.cross = body;
  } catch (err) {
    if (load !== state.load) return;
    state.cross = { error: err.message };
  }
  $("status").textContent = "";
  render();
}

// The projection of the shown trace onto state.chip (route "projection"), from state.source
// ("": the chip its deviceProperties name), fetched when the Projection view opens or either
// selector changes; state.projection is {loading: true} meanwhile.
async function loadProjection(load) {
  state.projection = { loading: true };
  const chip = state.chip, source = state.source;
  const current = () => chip === state.chip && source === state.source;
  try {
    const body = await analysis("projection", Object.assign(selected(), { chip, source }), load);
    if (!body || !current()) return;
    state.projection = body;
  } catch (err) {
    if (load !== state.load || !current()) return;
    state.projection = { error: err.message };
  }
  $("status").textContent = "";
  render();
}

// The diff of the baseline (A) against the shown trace (B), fetched when the Diff view opens
// with a baseline chosen; state.diff is {loading: true} meanwhile. An answer for a baseline or
// grouping changed since it was asked for is dropped (a slower, older one would replace the new).
async function loadDiff(load) {
  state.diff = { loading: true };
  const base = state.base, by = state.diffBy;
  const current = () => base === state.base && by === state.diffBy;
  const [run, worker, span] = base.split("|");
  try {
    const body = await analysis("diff", Object.assign({ a_run: run, a_worker: worker, a_span: span, by },
      selected()), load);
    if (!body || !current()) return;
    state.diff = body;
  } catch (err) {
    if (load !== state.load || !current()) return;
    state.diff = { error: err.message };
  }
  $("status").textContent = "";
  render();
}

// The Projection view's selectors: the target chip and "Recorded on" (--source-chip), shown
// while a projection runs too, so that a wrong choice can be changed at once.
function projectionPickers() {
  const pick = el("select");
  pick.id = "chip";
  for (const c of state.chips) { const o = el("option", c); o.value = c; pick.appendChild(o); }
  pick.value = state.chip;
  pick.addEventListener("change", () => { state.chip = pick.value; state.projection = null; render(); });
  const label = el("label", "Project onto ");
  label.appendChild(pick);
  // "Recorded on": --source-chip, for a trace whose deviceProperties name no known chip
  const from = el("select");
  from.id = "source";
  const own = el("option", "the trace's own chip");
  own.value = "";
  from.appendChild(own);
  for (const c of state.sources) { const o = el("option", c); o.value = c; from.appendChild(o); }
  from.value = state.source;
  from.addEventListener("change", () => { state.source = from.value; state.projection = null; render(); });
  const recorded = el("label", " Recorded on ");
  recorded.appendChild(from);
  return [label, recorded];
}

function renderProjection(p) {
  const out = projectionPickers();
  if (p.error) { out.push(el("p", shorten(p.error, STYLE.text_limit), "empty")); return out; }
  out.push(el("h3", "Step (ms, mean over " + p.steps + " steps)"));
  out.push(table([["what", ""], ["chip", "chip"], ["step_ms", "step ms", 3], ["note", "note", undefined, STYLE.text_limit]], [
    { what: "source", chip: p.source.chip, step_ms: p.source.step_ms, note: "recorded" },
    { what: "replay", chip: p.source.chip, step_ms: p.replay.step_ms,
      note: "recorded durations on the rebuilt dependencies (" + signed(p.replay.error_pct, 2) + "%)" },
    { what: "target", chip: p.target.chip, step_ms: p.target.step_ms,
      note: "range " + p.target.low_ms.toFixed(3) + "-" + p.target.high_ms.toFixed(3) + " ms; " +
        p.items.priced + " of " + p.items.device + " device items priced from recorded shapes" },
  ], "projection-step"));
  out.push(el("h3", "By class (ms per step; memory_bound: the part of compute bound by memory)"));
  const x = p.classes.map((c) => c.class);
  out.push(chart([
    { type: "bar", name: "source (" + shorten(p.source.chip) + ")", x, y: p.classes.map((c) => c.source_ms) },
    { type: "bar", name: "target (" + shorten(p.target.chip) + ")", x, y: p.classes.map((c) => c.target_ms) },
  ], { barmode: "group", height: 320 }));
  out.push(table([["class", "class"], ["source_ms", "source ms", 3], ["target_ms", "target ms", 3]], p.classes, "classes"));
  const opColumns = [["name", "op"], ["class", "class"], ["count", "count"], ["source_ms", "source ms", 3], ["target_ms", "target ms", 3]];
  out.push(el("h3", "Ops that decide the result"));
  out.push(p.ops.length ? table(opColumns, p.ops, "projection-ops") : empty("no device op"));
  out.push(el("h3", "Ops the target runs on the host"));
  out.push(p.fallbacks.length ? table(opColumns, p.fallbacks, "projection-fallbacks") : empty("none"));
  out.push(el("h3", "Assumptions"));
  const ul = el("ul");
  for (const a of p.assumptions) ul.appendChild(el("li", shorten(a, STYLE.text_limit)));
  out.push(ul);
  return out;
}

// Every trace of the logdir as a baseline choice: "run / worker / span".
function baselinePicker() {
  const pick = el("select");
  pick.id = "diff-base";
  const none = el("option", "choose the trace to compare with (A, the baseline)");
  none.value = "";
  pick.appendChild(none);
  for (const r of state.runs) {
    for (const w of r.workers) {
      for (const s of w.spans) {
        const o = el("option", shorten(r.name + " / " + w.name + " / " + (s.label || s.name)));
        o.value = [r.id, w.id, s.id].join("|");
        pick.appendChild(o);
      }
    }
  }
  pick.value = state.base;
  pick.addEventListener("change", () => { state.base = pick.value; state.diff = null; render(); });
  const label = el("label", "A (baseline): ");
  label.appendChild(pick);
  const by = el("select");
  by.id = "diff-by";
  for (const [value, text] of [["op", "op"], ["module", "module (nn.Module frames)"]]) {
    const o = el("option", text);
    o.value = value;
    by.appendChild(o);
  }
  by.value = state.diffBy;
  by.addEventListener("change", () => { state.diffBy = by.value; state.diff = null; render(); });
  const byLabel = el("label", " rows by: ");
  byLabel.appendChild(by);
  const line = el("p");
  line.appendChild(label);
  line.appendChild(byLabel);
  return line;
}

// The Diff view: `neuron-prof diff --json A B`'s document, A the chosen baseline, B the shown
// trace: a waterfall from A's mean step through the rows' Δ and the residual to B's, the rows,
// the analyzer's idle causes on both sides, the name mappings used (tables named by their
// place in the document, data-table).
function renderDiff(doc) {
  const out = [];
  for (const n of doc.notes) out.push(el("p", "note: " + shorten(n, STYLE.text_limit), "note"));
  out.push(el("p", "A " + shorten(doc.a.source) + " · B " + shorten(doc.b.source) + " · " +
    doc.a.steps.length + " step(s) compared by " + doc.steps_by + " · mean step " + fmt(doc.a.step_ms) +
    " ms → " + fmt(doc.b.step_ms) + " ms · Δ " + signed(doc.delta_ms) + " ms (" + signed(doc.delta_pct, 1) +
    "%) · residual " + signed(doc.residual_ms, 6) + " ms" + (doc.group_by && doc.group_by !== "op" ?
    " · rows by " + doc.group_by : ""), "note"));
  out.push(el("h3", "Waterfall: from A's mean step to B's (ms per step)"));
  const labels = ["A: mean step", ...doc.rows.map((r, i) => (i + 1) + ". " + shorten(r.key)), "residual", "B: mean step"];
  out.push(chart([{ type: "waterfall", orientation: "h", y: labels,
    x: [doc.a.step_ms, ...doc.rows.map((r) => r.delta_ms), doc.residual_ms, doc.b.step_ms],
    measure: ["absolute", ...doc.rows.map(() => "relative"), "relative", "total"],
    increasing: { marker: { color: "#d62728" } }, decreasing: { marker: { color: "#2ca02c" } },
    totals: { marker: { color: "#7f7f7f" } }, hovertemplate: "%{y}: %{x:+,.3f} ms<extra></extra>" }],
  { height: 120 + 26 * labels.length, showlegend: false,
    yaxis: { autorange: "reversed", type: "category", automargin: true }, xaxis: { title: "ms per step" } }));
  out.push(el("h3", "Where the time went (largest |Δ| first)"));
  out.push(table([["key", "row", undefined, STYLE.text_limit], ["kind", "kind"], ["a_ms", "A ms"],
    ["b_ms", "B ms"], ["delta_ms", "Δ ms"], ["a_ops_per_step", "A ops/step"], ["b_ops_per_step", "B ops/step"],
    [(r) => r.notes.join("; "), "notes"]], doc.rows, "rows"));
  out.push(el("h3", "Device idle by cause (the analyzer's; every gap, gated or not)"));
  out.push(doc.idle_by_cause.length ? table([["cause", "cause"], ["a_ms", "A ms"], ["b_ms", "B ms"],
    ["delta_ms", "Δ ms"]], doc.idle_by_cause, "idle_by_cause")
    : empty("no device idle time on either side"));
  out.push(el("h3", "Name mappings used"));
  out.push(doc.mappings.length ? table([["rule", "rule"], ["from", "from"], ["to", "to"],
    ["a_ops", "A ops"], ["b_ops", "B ops"]], doc.mappings, "mappings")
    : empty("no name-map rule changed an op name of the compared steps"));
  return out;
}

// Timeline rows as horizontal bars: one Plotly trace per group, bars from start_us. Queues
// (what "busy"): as long as the segment, a downsampled bin shaded by busy_pct. Idle causes
// (what "idle"): as long as the idle time inside the segment (busy_us: the series' own ns in
// it), so a bin holding 20 µs of short gaps is a 20 µs bar, not a bin-wide one. Plotly draws a
// bar thinner than a pixel 1 px wide, so a binned idle bar is also faded by the share of its
// bin that is idle: unzoomed, a run of bins with a few µs of gaps each stays faint.
// Rows are plotly categories: two series with the same shown name (two queues a trace names
// alike) get apart by zero-width spaces after the name, so each keeps a row of its own.
function timelineChart(series, rowName, color, what) {
  const idle = what === "idle";
  const seen = new Map();
  const traces = series.map((s) => {
    const seg = s.segments;
    const shown = shorten(rowName(s));
    const repeat = seen.get(shown) || 0;
    seen.set(shown, repeat + 1);
    const row = shown + "\u200b".repeat(repeat);
    return {
      type: "bar", orientation: "h", name: row, base: seg.start_us, x: idle ? seg.busy_us : seg.dur_us,
      y: seg.start_us.map(() => row), showlegend: false,
      marker: Object.assign(color(s), idle && !s.exact
        ? { opacity: seg.busy_pct.map((p) => Math.max(0.15, p / 100)) } : {}),
      customdata: idle ? seg.dur_us : seg.busy_pct,
      hovertemplate: idle
        ? (s.exact ? "%{y}<br>gap from %{base:,.1f} µs, %{x:,.1f} µs<extra></extra>"
          : "%{y}<br>%{x:,.1f} µs idle in the bin from %{base:,.1f} µs (%{customdata:,.1f} µs long)<extra></extra>")
        : "%{y}<br>%{base:,.1f} µs + %{x:,.1f} µs<br>" + what + " %{customdata}%<extra></extra>",
    };
  });
  const rows = new Set(traces.map((t) => t.name)).size;
  return chart(traces, { barmode: "overlay", bargap: 0.2, height: 120 + 28 * rows,
    xaxis: { title: "trace time (µs, as Perfetto shows it)", tickformat: ",.0f" }, yaxis: { automargin: true, type: "category" } });
}

// how: what a downsampled bin's bar shows
function downsampledNote(tl, series, how) {
  const binned = series.filter((s) => !s.exact);
  if (!binned.length) return el("p", "every interval drawn (" + series.length + " rows, at most " +
    tl.max_segments + " intervals each)", "note");
  return el("p", binned.length + " of " + series.length + " rows downsampled: more than " +
    tl.max_segments + " intervals, drawn as bins of " + tl.bin_us + " µs, " + how +
    " (totals kept exactly)", "note");
}

// The Distributed view: the "distributed" route's answer for the shown trace. Its section is
// what `neuron-prof analyze --json <answer.sources>` gives under "distributed" (one span: the
// traces of this run that the analyzer groups with the shown one). Tables are named by their
// place in that document (data-table) so that a test can compare them.
function renderDistributed(answer) {
  if (answer.error) return [el("p", answer.error, "error")];
  const d = answer.distributed;
  const out = [];
  const failed = answer.errors.map((e) => el("p", "not analysed: worker " + e.worker + " (span " +
    e.span + "): " + e.error, "error"));
  if (!d.available) {
    out.push(empty("no cross-rank analysis: " + d.reason), ...failed);
    if (d.files_without_rank.length) {
      out.push(el("p", "traces without a rank: " + d.files_without_rank.join(", "), "note"));
    }
    return out;
  }
  const span = d.spans[0];
  const at = "distributed.spans.0.";
  out.push(el("p", span.ranks.length + " ranks (world size " + fmt(span.world_size) + ") in this span; " +
    answer.run_spans + " span(s) over the run's " + answer.run_traces + " trace(s); clocks aligned on rank " +
    span.reference_rank, "note"), ...failed);
  out.push(el("h3", "Per rank (every time per step of that rank)"));
  out.push(table([["rank", "rank"], ["source", "trace"], ["steps", "steps"],
    ["step_mean_ms", "step mean ms"], ["compute_ms_per_step", "compute ms/step"],
    ["collective_ms_per_step", "collective ms/step"],
    ["compute_before_collective_ms_per_step", "compute before collectives ms/step"],
    ["late_arrivals", "late arrivals"], ["instances", "of collectives"],
    ["wait_skew_ms_per_step", "skew wait ms/step"], ["wait_recorded_ms_per_step", "recorded wait ms/step"],
    ["clock_offset_us", "clock offset µs"],
    [(r) => (r.clock_aligned ? "aligned" : "not aligned"), "clock"],
    [(r) => (r.straggler ? "yes" : "no"), "straggler"],
    // wait rows after the last collective (profile ended mid-wait): in no wait figure above
    ...(span.ranks_summary.some((r) => r.orphan_waits) ? [["orphan_waits", "waits without a collective"],
      ["orphan_wait_ms", "their ms"]] : [])],
  span.ranks_summary, at + "ranks_summary", (r) => (r.straggler ? "straggler" : "")));
  out.push(el("h3", "Straggler"));
  const rule = d.straggler_rule;
  out.push(el("p", "The straggler is " + rule.text + ".", "note"));
  if (span.stragglers.length) {
    out.push(table([["rank", "rank"], ["late_arrivals", "late arrivals"], ["instances", "of collectives"],
      ["wait_cost_ms_per_step", "costs the others ms/step"], ["lateness_ms", "after the next rank ms"],
      ["doing", "before arriving it was doing"]], span.stragglers, at + "stragglers", () => "straggler"));
    const st = span.stragglers[0];
    out.push(el("h4", "What rank " + st.rank + " costs each rank waiting for it"));
    out.push(table([["rank", "rank"], ["wait_ms_per_step", "wait ms/step"]], st.per_rank,
      at + "stragglers.0.per_rank"));
    out.push(el("h4", "Before its late arrivals (ms per late arrival; the others before the same collectives)"));
    out.push(table([["activity", "activity"], ["ms", "rank " + st.rank + " ms"], ["others_ms", "others ms"],
      ["excess_ms", "extra ms"]], st.before_arrival, at + "stragglers.0.before_arrival"));
  } else {
    out.push(empty("no straggler: " + span.straggler_note));
  }
  out.push(el("h3", "Waits per rank (ms per step)"));
  const x = span.ranks_summary.map((r) => "rank " + r.rank);
  const bars = [{ type: "bar", name: "skew wait (last arrival − own arrival)", x,
    y: span.ranks_summary.map((r) => r.wait_skew_ms_per_step) }];
  if (span.ranks_summary.some((r) => r.wait_recorded_ms_per_step !== null)) {
    bars.push({ type: "bar", name: "recorded collective wait", x,
      y: span.ranks_summary.map((r) => r.wait_recorded_ms_per_step) });
  }
  out.push(chart(bars, { barmode: "group", height: 300, xaxis: { type: "category" }, yaxis: { title: "ms per step" } }));
  out.push(el("h3", "Collective skew"));
  out.push(span.collectives.length ? table([["group", "group"], ["name", "collective"], ["calls", "calls"],
    ["mean_skew_ms", "mean skew ms"], ["max_skew_ms", "max skew ms"], ["late_rank", "late rank (most often; none: never alone)"],
    [(c) => c.per_rank.map((p) => "rank " + p.rank + ": " + p.late).join(", "), "late arrivals"]],
  span.collectives, at + "collectives") : empty("no collective matched across the ranks"));
  if (span.unmatched.length) {
    out.push(el("h3", "Unmatched collective calls"));
    out.push(table([["rank", "rank"], ["group", "group"], ["calls", "calls"]], span.unmatched, at + "unmatched"));
  }
  if (span.mismatched_names) {
    out.push(el("p", span.mismatched_names + " matched instance(s) name different collectives on different ranks", "note"));
  }
  return out;
}

const MIB = 1048576; // bytes: the Memory view's charts are in MiB, its tables in bytes

// The Memory view: the document's `memory` section (analysis/memory.py, docs/analysis.md#memory):
// the peak table per device, the memory findings, then per device its timeline by category
// (allocated / reserved, or the HBM usage categories) as a step plot, the ops' shares of the
// peak and the largest allocations live at it.
function renderMemory(m) {
  if (!m) {
    return [empty("no memory events in this trace: profile with profile_memory=True " +
      "(or capture the HBM usage counters)")];
  }
  const out = [el("h3", "Peak memory per device (bytes)")];
  out.push(table([["device", "device"], ["source", "source"], ["peak_bytes", "peak"], ["peak_at", "at"],
    ["peak_reserved_bytes", "reserved"], ["capacity_bytes", "capacity"], ["headroom_bytes", "headroom"],
    ["capacity_pct", "% capacity", 1], ["growth_per_step_bytes", "growth / step"],
    [(d) => (d.absolute ? "allocator total" : "allocated in the trace"), "level"]], m.devices, "memory.devices"));
  out.push(el("h3", "Memory findings"));
  out.push(m.findings.length ? table([["title", "finding"], ["at", "at"],
    ["suggestion", "suggestion", undefined, STYLE.text_limit], ["docs", "docs"]], m.findings, "memory.findings")
    : empty("no device within " + m.near_capacity_pct + "% of its capacity, none growing from step to step"));
  m.devices.forEach((d, i) => {
    out.push(el("h3", "Memory over time: " + shorten(d.device) + " (MiB)"));
    const line = d.timeline;
    out.push(chart(Object.entries(line.series).map(([name, values]) => ({ type: "scatter", mode: "lines",
      line: { shape: "hv" }, name: shorten(name), x: line.ts_us, y: values.map((v) => v / MIB),
      hovertemplate: "%{y:,.3f} MiB at %{x:,.3f} µs<extra></extra>" })),
    { height: 300, xaxis: { title: "trace time (µs)" }, yaxis: { title: "MiB" } }));
    const at = "memory.devices." + i + ".";
    if (d.by_op.length) {
      out.push(el("h4", "By allocating op (bytes)"));
      out.push(table([["op", "op"], ["live_bytes", "live at peak"], ["live_tensors", "tensors"],
        ["allocated_bytes", "allocated"], ["allocations", "allocations"]], d.by_op, at + "by_op"));
    }
    if (d.live_at_peak.length) {
      out.push(el("h4", "Largest allocations live at the peak"));
      out.push(table([["bytes", "bytes"], ["alloc_us", "allocated at µs"], ["op", "op"],
        ["call_site", "call site"]], d.live_at_peak, at + "live_at_peak"));
    }
  });
  return out;
}

const views = {
  Overview(d) {
    const out = [];
    for (const n of d.notes) out.push(el("p", shorten(n, STYLE.text_limit), "empty"));
    // step_breakdown: steps once, then a row per device with each figure as a series over them
    const steps = d.step_breakdown.steps;
    const devices = d.step_breakdown.devices;
    if (steps.length && d.has_device) {
      out.push(el("h3", "Step time breakdown (ms)"));
      const x = steps.map((s) => shorten(s.step));
      const traces = [{ type: "bar", name: "host", x, y: steps.map((s) => s.host_ms) }];
      // disjoint parts, stacked to the step's wall time: compute + collective_only + dma_only
      // = busy (compute overlaps copies and collectives: stacking those would pass the wall)
      const parts = [["compute", "compute"], ["collective_only", "collective (no compute)"],
        ["dma_only", "DMA (no compute or collective)"], ["not_busy", "not busy"]];
      devices.forEach((dev, i) => {
        for (const [part, label] of parts) {
          traces.push({ type: "bar", name: shorten(dev.label) + " " + label, x,
            y: dev[part + "_ms"], offsetgroup: String(i + 1) });
        }
      });
      out.push(chart(traces, { barmode: "relative", xaxis: { title: "step", type: "category" } }));
      // not busy = wall - busy; the analysis says whether the emulator's own work is in it
      out.push(el("p", d.step_breakdown.has_emulator_overhead
        ? "not busy = wall − busy: idle time plus the emulator's own host work (emulator "
          + "overhead, absent on real hardware), which the Idle view's causes leave out"
        : "not busy = wall − busy: the idle time of the Idle view", "note"));
    } else {
      out.push(empty("no device events in this trace: no step breakdown by device"));
    }
    const tb = d.tb_profiler_breakdown;
    if (tb && tb.length) {
      out.push(el("h3", "Step time breakdown, tb-profiler categories (µs)"));
      const cats = Object.keys(tb[0]).filter((k) => k !== "step" && k !== "Total");
      out.push(chart(cats.map((c) => ({ type: "bar", name: c, x: tb.map((r) => r.step),
        y: tb.map((r) => r[c]) })), { xaxis: { type: "category" } }));
    }
    out.push(el("h3", "Device utilization (busy % of the profiled steps)"));
    if (d.idle.devices.length) {
      out.push(chart([{ type: "bar", x: d.idle.devices.map((r) => shorten(r.label)),
        y: d.idle.devices.map((r) => r.busy_pct), name: "busy %" }],
      { height: 260, yaxis: { title: "busy %", range: [0, 100] }, xaxis: { type: "category" } }));
      if (steps.length > 1) {
        out.push(chart(devices.map((dev) => ({ type: "scatter", mode: "lines+markers",
          name: shorten(dev.label), x: steps.map((s) => shorten(s.step)),
          y: dev.busy_pct })),
        { height: 260, yaxis: { title: "busy % per step", range: [0, 100] }, xaxis: { type: "category" } }));
      }
      out.push(table([["label", "device"], ["window_ms", "window ms"], ["busy_ms", "busy ms"],
        ["busy_pct", "utilization %", 1], ["idle_ms", "idle ms"], ["gaps", "gaps"]], d.idle.devices, "idle.devices"));
    } else {
      out.push(empty("no device events: utilization is unknown"));
    }
    out.push(el("h3", "Top findings"));
    out.push(d.findings.length
      ? table([["title", "finding"], ["recoverable_ms", "recoverable ms"],
        ["recoverable_pct", "recoverable %", 1], ["suggestion", "suggestion", undefined, STYLE.text_limit]],
      d.findings, "findings")
      : empty("the analyzer found nothing to fix in this trace"));
    return out;
  },
  Operators(d) {
    return d.ops.length ? [table([["name", "operator"], ["calls", "calls"],
      ["host_self_ms", "host self ms"], ["host_total_ms", "host total ms"],
      ["device_self_ms", "device self ms"], ["device_total_ms", "device total ms"],
      ["input_shapes", "input shapes"]], d.ops, "ops")]
      : [empty("no operator events in this trace")];
  },
  Kernels(d) {
    return d.kernels.length ? [table([["name", "kernel"], ["calls", "calls"],
      ["total_ms", "total ms"], ["mean_us", "mean µs"], ["min_us", "min µs"], ["max_us", "max µs"],
      ["achieved_tflops", "TFLOPS"], ["achieved_gbps", "GB/s"], ["pct_of_peak", "% of peak", 1]],
    d.kernels, "kernels")] : [empty("no kernels (device events) in this trace")];
  },
  Fallbacks(d) {
    if (!d.fallbacks.length) {
      return [empty(d.has_device ? "no CPU fallback: every op ran on the device"
        : "no device events: fallbacks to the CPU cannot be told apart (a CUDA or host-only trace has none)")];
    }
    return [table([["op", "op"], ["calls", "calls"], ["reason", "reason", undefined, STYLE.text_limit], ["shapes", "shapes"],
      ["host_ms", "host ms"], [(r) => r.d2h.count, "D2H copies"], [(r) => r.h2d.count, "H2D copies"],
      ["idle_ms", "device idle ms"], ["native_ms", "native ms (what-if)"],
      ["recoverable_ms", "recoverable ms"]], d.fallbacks, "fallbacks")];
  },
  Idle(d, tl) {
    if (!d.idle.devices.length) return [empty("no device events: no device idle time")];
    const out = [el("h3", "Idle time by cause (ms)")];
    const causes = Object.keys(d.idle.by_cause_ms);
    out.push(chart([{ type: "bar", x: causes, y: causes.map((c) => d.idle.by_cause_ms[c]),
      marker: { color: causes.map((c) => STYLE.cause_colours[c]) } }], { height: 300 }));
    out.push(el("h3", "Idle gaps over time, by cause"));
    if (tl.idle.length) {
      const legend = el("p", null, "legend");
      for (const c of Object.keys(STYLE.cause_colours)) {
        const key = el("span", c, "swatch");
        key.style.borderColor = STYLE.cause_colours[c];
        legend.appendChild(key);
      }
      out.push(legend, downsampledNote(tl, tl.idle,
        "a bar at the start of each bin as long as the idle time inside it, faded by the idle share of the bin" +
        " (a bar under a pixel is drawn 1 px wide: zoom in for exact lengths)"));
      out.push(timelineChart(tl.idle, (s) => s.label + " · " + s.cause,
        (s) => ({ color: STYLE.cause_colours[s.cause] }), "idle"));
    } else {
      out.push(empty("no idle gap inside the profiled steps"));
    }
    out.push(el("h3", "Longest gaps"));
    out.push(d.idle.longest_gaps.length ? table([["device", "device"], ["at", "at"],
      ["dur_ms", "duration ms"], ["cause", "cause"],
      ["host_activity", "host activity"]], d.idle.longest_gaps, "idle.longest_gaps")
      : empty("no gap longer than " + d.idle.min_gap_us + " µs"));
    return out;
  },
  Memory(d) { return renderMemory(d.memory); },
  Distributed() {
    return renderDistributed(state.cross);
  },
  Projection() { return renderProjection(state.projection); },
  Diff() {
    const out = [baselinePicker()];
    if (!state.base) return [...out, empty("choose a baseline (A) to compare the shown trace (B) with")];
    if (state.diff.error) return [...out, el("p", state.diff.error, "error")];
    return [...out, ...renderDiff(state.diff)];
  },
  Trace(d, tl) {
    const out = [el("h3", "Device queues (busy)")];
    if (tl.queues.length) {
      out.push(downsampledNote(tl, tl.queues, "each shaded by the share of the bin covered"));
      out.push(timelineChart(tl.queues, (q) => q.label + " · " + (q.name || "queue " + q.queue),
        (q) => (q.exact ? { color: "#f57c00" } : { color: q.segments.busy_pct, cmin: 0, cmax: 100,
          colorscale: [[0, "#fff3e0"], [1, "#e65100"]] }), "busy"));
    } else {
      out.push(empty("no device events: no device queue to draw"));
    }
    out.push(el("h3", "Download"));
    for (const [fmt_, label] of [["json.gz", "Chrome trace (.json.gz)"], ["pftrace", "Perfetto (.pftrace)"]]) {
      const a = el("a", label);
      a.href = "trace?" + new URLSearchParams(Object.assign(selected(), { format: fmt_ }));
      a.setAttribute("download", "");
      out.push(a, el("br"));
    }
    const b = el("button", "Open in Perfetto UI");
    b.id = "open-perfetto";
    b.addEventListener("click", openInPerfetto);
    out.push(el("p"), b, el("p", "Sends the trace to " + PERFETTO + " (online only).", "empty"));
    return out;
  },
};

// As documented by Perfetto ("Deep linking to Perfetto UI" / postMessage): open the UI, PING
// until it answers PONG, then post the trace buffer.
async function openInPerfetto() {
  const win = window.open(PERFETTO);
  if (!win) { $("status").textContent = "pop-up blocked: allow pop-ups for TensorBoard"; return; }
  const res = await fetch("trace?" + new URLSearchParams(Object.assign(selected(), { format: "pftrace" })));
  if (!res.ok) { $("status").textContent = "download failed: " + res.status; return; }
  const buffer = await res.arrayBuffer();
  const title = $("worker").selectedOptions[0]?.textContent || "trace";
  const timer = setInterval(() => win.postMessage("PING", PERFETTO), 50);
  const onMessage = (evt) => {
    if (evt.origin !== PERFETTO || evt.data !== "PONG") return;
    clearInterval(timer);
    window.removeEventListener("message", onMessage);
    win.postMessage({ perfetto: { buffer, title, fileName: title + ".pftrace" } }, PERFETTO);
  };
  window.addEventListener("message", onMessage);
}

function render() {
  const tabs = $("tabs");
  tabs.replaceChildren(...VIEWS.map((v) => {
    const b = el("button", v, v === state.view ? "active" : "");
    b.dataset.view = v;
    b.addEventListener("click", () => { state.view = v; render(); });
    return b;
  }));
  const view = $("view");
  // data-state: "error", "empty", "loading" or "ready" (what a browser test waits for)
  if (state.error) { view.dataset.state = "error"; view.replaceChildren(el("p", state.error, "error")); return; }
  if (!state.runs.length) { view.dataset.state = "empty"; view.replaceChildren(empty("no *.pt.trace.json[.gz] under the logdir")); return; }
  if (!state.doc) { view.dataset.state = "loading"; view.replaceChildren(empty($("status").textContent || "loading…")); return; }
  if (state.view === "Distributed" && !state.cross) loadDistributed(state.load);
  if (state.view === "Distributed" && state.cross.loading) {
    view.dataset.state = "loading";
    view.replaceChildren(empty($("status").textContent || "analysing the run's traces…"));
    return;
  }
  if (state.view === "Projection" && !state.projection) loadProjection(state.load);
  if (state.view === "Projection" && state.projection.loading) {
    view.dataset.state = "loading";
    view.replaceChildren(...projectionPickers(), empty($("status").textContent || "projecting…"));
    return;
  }
  if (state.view === "Diff" && state.base && !state.diff) loadDiff(state.load);
  if (state.view === "Diff" && state.diff && state.diff.loading) {
    view.dataset.state = "loading";
    view.replaceChildren(baselinePicker(), empty($("status").textContent || "comparing the traces…"));
    return;
  }
  view.dataset.state = "ready";
  view.dataset.view = state.view;
  const warnings = state.doc.load_warnings.length ? [el("div", null, "warnings")] : [];
  for (const w of state.doc.load_warnings) {
    warnings[0].appendChild(el("p", "load warning: " + shorten(w, STYLE.text_limit)));
  }
  view.replaceChildren(...warnings, ...views[state.view](state.doc, state.timeline));
}

async function main() {
  $("run").addEventListener("change", () => { syncSelectors(); loadReport(); });
  $("worker").addEventListener("change", () => { syncSelectors(); loadReport(); });
  $("span").addEventListener("change", loadReport);
  try {
    STYLE = (await api("style")).body;
    const chips = (await api("chips")).body;
    state.chips = chips.chips;
    state.sources = chips.sources;
    await loadRuns();
  } catch (err) {
    state.error = err.message;
  }
  render();
  if (!state.error) await loadReport();
}

main();
