// Neuron Profiler tab: shows the analyzer's --json document (route "report") for the chosen
// run / worker / span. It computes nothing; every name from a trace is set with textContent.
"use strict";

const PERFETTO = "https://ui.perfetto.dev";
const VIEWS = ["Overview", "Operators", "Kernels", "Fallbacks", "Idle", "Distributed", "Trace"];
const state = { runs: [], doc: null, error: null, view: "Overview" };
const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function fmt(v, digits) {
  if (v === null || v === undefined) return "";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toFixed(digits ?? 3);
  if (Array.isArray(v)) return v.map((x) => (Array.isArray(x) ? "[" + x.join(", ") + "]" : String(x))).join("; ");
  return String(v);
}

// columns: [[key or function, label, digits]]
function table(columns, rows) {
  const t = el("table");
  const head = t.createTHead().insertRow();
  for (const [, label] of columns) head.appendChild(el("th", label));
  const body = t.createTBody();
  for (const row of rows) {
    const tr = body.insertRow();
    for (const [key, , digits] of columns) {
      const v = typeof key === "function" ? key(row) : row[key];
      tr.appendChild(el("td", fmt(v, digits), typeof v === "number" ? "num" : ""));
    }
  }
  return t;
}

function empty(why) { return el("p", why, "empty"); }

function chart(traces, layout) {
  const div = el("div", null, "chart");
  if (!window.Plotly) return empty("plotly.js did not load: charts are unavailable");
  requestAnimationFrame(() => window.Plotly.newPlot(div, traces,
    Object.assign({ barmode: "stack", margin: { t: 30 } }, layout), { displaylogo: false }));
  return div;
}

async function api(route, params) {
  const q = new URLSearchParams(params || {}).toString();
  const res = await fetch(route + (q ? "?" + q : ""));
  const body = await res.json().catch(() => ({ error: res.status + " " + res.statusText }));
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

function selected() {
  return { run: $("run").value, worker: $("worker").value, span: $("span").value };
}

function fill(select, items) {
  const keep = select.value;
  select.replaceChildren(...items.map((i) => { const o = el("option", i.name); o.value = i.id; return o; }));
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
  state.runs = (await api("runs")).runs;
  syncSelectors();
}

async function loadReport() {
  state.doc = null; state.error = null;
  if (!$("span").value) { render(); return; }
  $("status").textContent = "analysing…";
  try {
    state.doc = (await api("report", selected())).traces[0];
  } catch (err) {
    state.error = err.message;
  }
  $("status").textContent = "";
  render();
}

const views = {
  Overview(d) {
    const out = [];
    for (const n of d.notes) out.push(el("p", n, "empty"));
    const steps = d.step_breakdown;
    if (steps.length && d.has_device) {
      out.push(el("h3", "Step time breakdown (ms)"));
      const x = steps.map((s) => s.step);
      const traces = [{ type: "bar", name: "host", x, y: steps.map((s) => s.host_ms) }];
      steps[0].devices.forEach((dev, i) => {
        for (const part of ["compute", "dma", "collective", "idle"]) {
          traces.push({ type: "bar", name: dev.label + " " + part, x,
            y: steps.map((s) => s.devices[i][part + "_ms"]), offsetgroup: String(i + 1) });
        }
      });
      out.push(chart(traces, { barmode: "relative", xaxis: { title: "step", type: "category" } }));
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
    out.push(el("h3", "Device utilization"));
    out.push(d.idle.devices.length
      ? table([["label", "device"], ["window_ms", "window ms"], ["busy_ms", "busy ms"],
        [(r) => 100 - r.idle_pct, "utilization %", 1]], d.idle.devices)
      : empty("no device events: utilization is unknown"));
    out.push(el("h3", "Top findings"));
    out.push(d.findings.length
      ? table([["title", "finding"], ["recoverable_ms", "recoverable ms"],
        ["recoverable_pct", "recoverable %", 1], ["suggestion", "suggestion"]], d.findings)
      : empty("the analyzer found nothing to fix in this trace"));
    return out;
  },
  Operators(d) {
    return d.ops.length ? [table([["name", "operator"], ["calls", "calls"],
      ["host_self_ms", "host self ms"], ["host_total_ms", "host total ms"],
      ["device_self_ms", "device self ms"], ["device_total_ms", "device total ms"],
      ["input_shapes", "input shapes"]], d.ops)]
      : [empty("no operator events in this trace")];
  },
  Kernels(d) {
    return d.kernels.length ? [table([["name", "kernel"], ["calls", "calls"],
      ["total_ms", "total ms"], ["mean_us", "mean µs"], ["min_us", "min µs"], ["max_us", "max µs"],
      ["achieved_tflops", "TFLOPS"], ["achieved_gbps", "GB/s"], ["pct_of_peak", "% of peak", 1]],
    d.kernels)] : [empty("no kernels (device events) in this trace")];
  },
  Fallbacks(d) {
    if (!d.fallbacks.length) {
      return [empty(d.has_device ? "no CPU fallback: every op ran on the device"
        : "no device events: fallbacks to the CPU cannot be told apart (a CUDA or host-only trace has none)")];
    }
    return [table([["op", "op"], ["calls", "calls"], ["reason", "reason"], ["shapes", "shapes"],
      ["host_ms", "host ms"], [(r) => r.d2h.count, "D2H copies"], [(r) => r.h2d.count, "H2D copies"],
      ["idle_ms", "device idle ms"], ["native_ms", "native ms (what-if)"],
      ["recoverable_ms", "recoverable ms"]], d.fallbacks)];
  },
  Idle(d) {
    if (!d.idle.devices.length) return [empty("no device events: no device idle time")];
    const out = [el("h3", "Idle time by cause (ms)")];
    const causes = Object.keys(d.idle.by_cause_ms);
    out.push(chart([{ type: "bar", x: causes, y: causes.map((c) => d.idle.by_cause_ms[c]) }], {}));
    out.push(el("h3", "Longest gaps"));
    out.push(d.idle.longest_gaps.length ? table([["device", "device"], ["step", "step"],
      ["start_us", "start µs"], ["dur_ms", "duration ms"], ["cause", "cause"],
      ["host_activity", "host activity"]], d.idle.longest_gaps)
      : empty("no gap longer than " + d.idle.min_gap_us + " µs"));
    return out;
  },
  Distributed(d) {
    const worker = currentWorker(), run = currentRun();
    if (!run || run.workers.length < 2) {
      return [empty("one rank in this run (rank " + d.rank + "): nothing to compare across ranks")];
    }
    return [empty("per-rank summary, stragglers and collective skew are not computed by the analyzer yet (" +
      run.workers.length + " workers in this run; shown: " + (worker ? worker.name : "") + ")")];
  },
  Trace() {
    const out = [el("h3", "Download")];
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
    if (evt.data !== "PONG") return;
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
  if (state.error) { view.replaceChildren(el("p", state.error, "error")); return; }
  if (!state.runs.length) { view.replaceChildren(empty("no *.pt.trace.json[.gz] under the logdir")); return; }
  if (!state.doc) { view.replaceChildren(empty("loading…")); return; }
  view.replaceChildren(...views[state.view](state.doc));
}

async function main() {
  $("run").addEventListener("change", () => { syncSelectors(); loadReport(); });
  $("worker").addEventListener("change", () => { syncSelectors(); loadReport(); });
  $("span").addEventListener("change", loadReport);
  try {
    await loadRuns();
  } catch (err) {
    state.error = err.message;
  }
  render();
  if (!state.error) await loadReport();
}

main();
