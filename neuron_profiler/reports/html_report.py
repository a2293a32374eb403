"""The HTML report: one self-contained page (plotly.js inlined, nothing fetched) holding, per
trace, the findings, a step breakdown chart, an idle timeline per device, a CPU-fallback
Pareto chart and, when the trace recorded memory, the device memory peaks and timeline; and, over several traces or ranks, the cross-rank analysis (``cross``: the
straggler, the per-rank table, waits per rank, collective skew)::

    write_html([report], Path("report.html"), errors=[("bad.json", "not JSON")])
    page = render_html([report], cross=distributed(summaries_of([report])))

It formats ``analysis.Report`` objects and computes nothing: every figure comes from the report
(``breakdown``, ``idle``, ``timeline``, ``fallback_pareto``, ``findings``); converting ns
to ms or to the trace's µs is its only arithmetic. Each chart is a plotly figure embedded as
JSON in a ``<script type="application/json" class="figure">`` block, drawn by a few lines of
script at the end of the page. Every text from a trace is shortened (``reports.text.shorten``)
and escaped: HTML-escaped in the page and in the figures (plotly reads entities back), and
``<``, ``>``, ``&`` written as ``\\u`` escapes in the JSON, so no trace text can close a script
block. The idle causes' colours are ``reports.palette.CAUSE_COLOURS``, the ones the
TensorBoard page draws with. A time in the trace is shown as the step it lies in and how far
into it (``Report.position``: ``step 7 +12.3 ms``); the idle timeline's axis is the trace's
own µs, as Perfetto shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from neuron_profiler.analysis.causes import ALL_CAUSES
from neuron_profiler.analysis.distributed import (
    STRAGGLER_RULE,
    Distributed,
    SpanAnalysis,
)
from neuron_profiler.analysis.report import Report, rank_text
from neuron_profiler.reports.html_page import BOOT, STYLE, plotly_js
from neuron_profiler.reports.html_page import empty as _empty
from neuron_profiler.reports.html_page import escape as _e
from neuron_profiler.reports.html_page import figure as _figure
from neuron_profiler.reports.html_page import name_text as _n
from neuron_profiler.reports.html_page import table as _table
from neuron_profiler.reports.palette import CAUSE_COLOURS, EMULATOR_OVERHEAD_COLOUR
from neuron_profiler.reports.text import TEXT_LIMIT, mib, shorten

__all__ = ["CAUSE_COLOURS", "plotly_js", "render_html", "write_html"]
BUSY_SERIES = (
    ("compute_ns", "compute", "#1f77b4"),
    ("collective_only_ns", "collective (no compute)", "#17becf"),
    ("dma_only_ns", "DMA (no compute or collective)", "#2ca02c"),
)


def write_html(
    reports: Sequence[Report],
    path: Path,
    errors: Sequence[tuple[str, str]] = (),
    cross: Distributed | None = None,
) -> None:
    """Write the page atomically (a failed write leaves an existing file as it was)."""
    from neuron_profiler.output import atomic_output

    page = render_html(reports, errors, cross).encode("utf-8")
    with atomic_output(path) as out:
        out.write(page)


def render_html(
    reports: Sequence[Report],
    errors: Sequence[tuple[str, str]] = (),
    cross: Distributed | None = None,
) -> str:
    """``cross``: the cross-rank analysis of these reports; its section follows the traces'
    when there are several traces or it is available (as in the terminal report)."""
    from neuron_profiler import __version__

    nav = "".join(
        f'<li><a href="#trace-{i}">{_n(r.source)} ({rank_text(r.rank)})</a></li>'
        for i, r in enumerate(reports)
    )
    body = "".join(_section(i, r) for i, r in enumerate(reports))
    if cross is not None and cross.shown_with(len(reports)):
        nav += '<li><a href="#multi-rank">Multi-rank</a></li>'
        body += _cross_rank(cross)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>neuron-prof analyze: {len(reports)} trace{'s' * (len(reports) != 1)}</title>"
        f"<style>{STYLE}</style>\n<script>{plotly_js()}</script></head><body>"
        f"<h1>neuron-prof analyze</h1><p>neuron-profiler {_e(__version__)}: "
        f"{len(reports)} trace{'s' * (len(reports) != 1)}, one section each; times in ms, "
        "positions as the step they lie in and how far into it (step 7 +12.3 ms); the idle "
        "timeline in each trace's own µs (as Perfetto shows them). Definitions: "
        "docs/analysis.md.</p>"
        f"<ul>{nav}</ul>{_errors(errors)}{body}<script>{BOOT}</script></body></html>\n"
    )


def _ms(ns: float) -> float:
    return float(ns) / 1e6


def _errors(errors: Sequence[tuple[str, str]]) -> str:
    if not errors:
        return ""
    rows = [(shorten(path), shorten(problem, TEXT_LIMIT)) for path, problem in errors]
    return "<h2>Inputs not analysed</h2>" + _table(("input", "problem"), rows)


def _section(i: int, r: Report) -> str:
    steps = len(r.steps)
    head = (
        f'<section class="trace" id="trace-{i}"><h2>{_n(r.source)}</h2>'
        f"<p>{rank_text(r.rank)} · {steps} step{'s' * (steps != 1)} · mean step "
        f"{_ms(float(r.steps.wall_ns.mean())):,.3f} ms · min gap "
        f"{r.options.min_gap_ns / 1e3:g} µs</p>"
    )
    notes = "".join(f'<li class="note">note: {_n(n, TEXT_LIMIT)}</li>' for n in r.notes) + "".join(
        f'<li class="note">loading: {_n(w, TEXT_LIMIT)}</li>' for w in r.load_warnings
    )
    return (
        head
        + (f"<ul>{notes}</ul>" if notes else "")
        + "<h3>What to fix first</h3>"
        + _findings(r)
        + "<h3>Step breakdown</h3>"
        + _breakdown(i, r)
        + "<h3>Idle timeline per device</h3>"
        + _timeline(i, r)
        + "<h3>Communication: hidden behind compute or exposed</h3>"
        + _communication(r)
        + "<h3>CPU fallbacks (Pareto)</h3>"
        + _pareto(i, r)
        + _memory(i, r)
        + "</section>"
    )


def _findings(r: Report) -> str:
    if not r.findings.findings:
        return _empty("No findings: no recoverable time was found in this trace.")
    rows = [
        (
            n,
            shorten(f.title) + (f" ({shorten(f.host_op_news)})" if f.host_op_news else ""),
            f"{_ms(f.recoverable_ns_per_step):,.3f}",
            f"{f.recoverable_pct:.1f}",
            r.position(f.ranges_ns[0][0]).text() if f.ranges_ns else "-",
            shorten(f.suggestion, TEXT_LIMIT),
        )
        for n, f in enumerate(r.findings.findings, start=1)
    ]
    return _table(
        ("#", "finding", "ms/step", "% step", "longest at", "what to do"),
        rows,
        numeric=(0, 2, 3),
    )


def _communication(r: Report) -> str:
    comm = r.communication
    if comm.device is None:
        return _empty("No collectives in this trace: nothing to hide.")
    rows = [(f"step {s.name}", s) for s in comm.steps] + [("total", comm.total)]
    rows += [(u.name + " *" * (u.name in comm.flagged), u) for u in comm.units]
    return f"<p>{_n(comm.device_label)}; * flagged: the exposed_communication finding</p>" + _table(
        (
            "step / unit",
            "collectives",
            "collective ms",
            "hidden ms",
            "exposed ms",
            "% exposed",
            "peer wait ms",
            "exposed: what (ms)",
        ),
        [
            (
                shorten(name),
                row.collectives,
                f"{_ms(row.collective_ns):,.3f}",
                f"{_ms(row.hidden_ns):,.3f}",
                f"{_ms(row.exposed_ns):,.3f}",
                f"{100 * row.exposed_share:.1f}",
                f"{_ms(row.peer_wait_ns):,.3f}",
                "; ".join(f"{k} {_ms(ns):,.3f}" for k, ns in row.exposed_by_kind),
            )
            for name, row in rows
        ],
        numeric=(1, 2, 3, 4, 5, 6),
    )


def _memory(i: int, r: Report) -> str:
    """Device memory (``Report.memory``): the peaks per device, the memory findings and each
    device's timeline as a step plot (MiB over the trace's µs); no section without memory
    events."""
    mem = r.memory
    if mem is None:
        return ""
    peaks = _table(
        ("device", "peak MiB", "at", "reserved MiB", "capacity MiB", "headroom MiB", "% capacity"),
        [
            (
                shorten(d.label),
                mib(d.peak_bytes) + ("" if d.absolute else " *"),
                r.position(d.peak_ns).text(),
                mib(d.peak_reserved_bytes),
                mib(d.capacity_bytes),
                mib(d.headroom_bytes),
                "" if d.capacity_pct is None else f"{d.capacity_pct:.1f}",
            )
            for d in mem.devices
        ],
        numeric=(1, 3, 4, 5, 6),
    )
    found = (
        _table(
            ("finding", "what to do", "docs"),
            [(shorten(f.title), shorten(f.suggestion, TEXT_LIMIT), f.docs) for f in mem.findings],
        )
        if mem.findings
        else _empty(
            f"No memory findings: no device within {mem.near_capacity_pct:g}% of its capacity, "
            "none growing."
        )
    )
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "line": {"shape": "hv"},
            "name": _n(f"{d.label} {name}"),
            "x": r.to_trace_us(d.timeline.ts_ns).tolist(),
            "y": (values / 2**20).tolist(),
            "hovertemplate": "%{y:,.3f} MiB at %{x:,.3f} µs<extra></extra>",
        }
        for d in mem.devices
        for name, values in zip(d.timeline.names, d.timeline.values, strict=True)
    ]
    layout = {
        "height": 360,
        "margin": {"t": 30},
        "xaxis": {"title": {"text": "trace time (µs, as Perfetto shows it)"}, "tickformat": ",.0f"},
        "yaxis": {"title": {"text": "MiB"}},
        "legend": {"orientation": "h", "y": -0.3},
    }
    return (
        "<h3>Device memory</h3><p>* only what the trace allocated (its memory events have no "
        "Total Allocated); headroom: capacity less the reserve (or the peak). Definitions: "
        "docs/analysis.md#memory.</p>"
        + peaks
        + found
        + _figure(f"chart-{i}-memory", {"data": data, "layout": layout})
    )


def _breakdown(i: int, r: Report) -> str:
    b = r.breakdown
    if not b.devices:
        return _empty("No device events in this trace: no step breakdown (host-only report).")
    idle = {d.device: d for d in r.idle.devices}
    x: Any = (
        [
            [_n(n) for d in b.devices for n in b.names],
            [_n(d.label) for d in b.devices for _ in b.names],
        ]
        if len(b.devices) > 1
        else [_n(n) for n in b.names]
    )
    data = [
        _bar(x, name, colour, [_ms(v) for d in b.devices for v in getattr(d, key).tolist()], key)
        for key, name, colour in BUSY_SERIES
    ]
    for cause in ALL_CAUSES:
        values = [_ms(s[cause]) for d in b.devices for s in idle[d.device].per_step_by_cause_ns]
        if any(values):
            data.append(_bar(x, f"idle: {cause}", CAUSE_COLOURS[cause], values, f"idle:{cause}"))
    if b.has_emulator_overhead:  # not idle time, in no cause: the rest of wall - busy
        data.append(
            _bar(
                x,
                "emulator overhead (not idle)",
                EMULATOR_OVERHEAD_COLOUR,
                [_ms(v) for d in b.devices for v in d.emulator_overhead_ns.tolist()],
                "emulator_overhead",
            )
        )
    data.append(
        {
            "type": "scatter",
            "mode": "markers",
            "name": "host busy",
            "x": x,
            "y": [_ms(v) for _ in b.devices for v in b.host_ns.tolist()],
            "meta": "host_ns",
            "marker": {"color": "#000", "symbol": "line-ew-open", "size": 14, "line": {"width": 2}},
            "hovertemplate": "host busy %{y:,.3f} ms<extra></extra>",
        }
    )
    layout = {
        "barmode": "stack",
        "height": 440,
        "margin": {"t": 30},
        "xaxis": {
            "title": {"text": "step" + (" / device" if len(b.devices) > 1 else "")},
            "type": "multicategory" if len(b.devices) > 1 else "category",
        },
        "yaxis": {"title": {"text": "ms"}},
        "legend": {"orientation": "h", "y": -0.25, "traceorder": "normal"},
    }
    caption = (
        "Per step and device the bars add up to the step's wall time: device busy "
        "(compute, then collectives and copies not under compute) and idle by cause"
        + (
            ", then the emulator overhead (the emulator's own host work, absent on real "
            "hardware: not idle time, in no cause)"
            if b.has_emulator_overhead
            else ""
        )
        + "; the markers give the host's busy time."
    )
    return f"<p>{caption}</p>" + _figure(f"chart-{i}-breakdown", {"data": data, "layout": layout})


def _bar(x: Any, name: str, colour: str, values: list[float], meta: str) -> dict[str, Any]:
    return {
        "type": "bar",
        "name": name,
        "x": x,
        "y": values,
        "meta": meta,
        "marker": {"color": colour},
        "hovertemplate": f"{name} %{{y:,.3f}} ms<extra></extra>",
    }


def _timeline(i: int, r: Report) -> str:
    tl = r.timeline
    if tl is None:
        return _empty("No timeline: the report was made without one (Options.timeline_segments).")
    if not tl.idle:
        return _empty(
            "No device idle gaps inside the steps."
            if r.has_device
            else "No device events in this trace: no idle timeline."
        )
    data, in_legend = [], set()
    for s in tl.idle:  # one trace per device and cause (its counts in "meta"), legend by cause
        seg = s.segments
        start_us = r.to_trace_us(seg.start_ns).tolist()
        hover = (
            f"{s.cause}<br>from %{{customdata[0]:,.3f}} µs, %{{x:,.3f}} µs"
            if seg.exact
            else f"{s.cause}: %{{x:,.3f}} µs idle in the bin<br>from "
            "%{customdata[0]:,.3f} µs, %{customdata[1]:,.3f} µs long"
        )
        data.append(
            {  # a bar as long as the idle time it holds: the whole gap, or a bin's
                "type": "bar",
                "orientation": "h",
                "name": s.cause,
                "legendgroup": s.cause,
                "showlegend": s.cause not in in_legend,
                "meta": {
                    "cause": s.cause,
                    "device": s.device,
                    "gaps": s.gaps,
                    "intervals": seg.intervals,
                    "exact": seg.exact,
                    "idle_ns": s.idle_ns,
                },
                "y": [_n(s.label)] * len(start_us),
                "base": start_us,
                "x": (seg.busy_ns / 1e3).tolist(),
                "customdata": list(
                    zip(start_us, ((seg.end_ns - seg.start_ns) / 1e3).tolist(), strict=True)
                ),
                "marker": {"color": CAUSE_COLOURS[s.cause]},
                "hovertemplate": hover + "<extra></extra>",
            }
        )
        in_legend.add(s.cause)
    layout = {
        "barmode": "overlay",
        "height": 160 + 40 * len({s.device for s in tl.idle}),
        "margin": {"t": 30},
        "xaxis": {"title": {"text": "trace time (µs, as Perfetto shows it)"}, "tickformat": ",.0f"},
        "yaxis": {"type": "category", "autorange": "reversed", "automargin": True},
        "legend": {"orientation": "h", "y": -0.3},
    }
    binned = [s for s in tl.idle if not s.segments.exact]
    caption = (
        "Every gap is drawn."
        if not binned
        else f"{len(binned)} of {len(tl.idle)} series (device and cause) have more than "
        f"{tl.max_segments:,} gaps: those are drawn by bins of {tl.bin_ns / 1e3:,.3f} µs, "
        "a bar at the start of each bin as long as that cause's idle time inside it "
        "(the totals are exact); the table counts every gap."
    )
    rows = [
        (
            shorten(s.label),
            s.cause,
            s.gaps,
            f"{_ms(s.idle_ns):,.3f}",
            "each gap" if s.segments.exact else f"{len(s.segments.start_ns):,} bins",
        )
        for s in tl.idle
    ]
    return (
        f"<p>{_e(caption)}</p>"
        + _figure(f"chart-{i}-timeline", {"data": data, "layout": layout})
        + _table(("device", "cause", "gaps", "idle ms", "drawn as"), rows, numeric=(2, 3))
    )


def _pareto(i: int, r: Report) -> str:
    p = r.fallback_pareto
    if not p.groups:
        return _empty("No CPU fallbacks in this trace: nothing to chart.")
    x = [_n(f"{shorten(g.op)} {shorten(g.shapes)} {shorten(g.dtypes)}".strip()) for g in p.groups]
    data = [
        {
            "type": "bar",
            "name": "recoverable (ms)",
            "x": x,
            "meta": "recoverable_ns",
            "y": [_ms(v) for v in p.recoverable_ns.tolist()],
            "marker": {"color": "#ff7f0e"},
            "hovertemplate": "%{x}<br>%{y:,.3f} ms<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "cumulative %",
            "x": x,
            "y": p.cumulative_pct.tolist(),
            "yaxis": "y2",
            "meta": "cumulative_pct",
            "marker": {"color": "#333"},
            "hovertemplate": "%{y:.1f}%<extra></extra>",
        },
    ]
    layout = {
        "height": 420,
        "margin": {"t": 30},
        "xaxis": {"type": "category"},
        "yaxis": {"title": {"text": "recoverable ms (over the trace)"}},
        "yaxis2": {
            "title": {"text": "cumulative %"},
            "overlaying": "y",
            "side": "right",
            "range": [0, 105],
            "tickvals": [0, 20, 40, 60, 80, 100],
            "ticksuffix": "%",
        },
        "legend": {"orientation": "h", "y": -0.3},
    }
    rows = [
        (
            shorten(g.op),
            shorten(g.shapes),
            shorten(g.dtypes),
            shorten(g.reason),
            g.calls,
            f"{_ms(g.host_ns):,.3f}",
            f"{g.d2h_count}/{g.d2h_bytes / 1e6:.1f}/{_ms(g.d2h_ns):,.3f}",
            f"{g.h2d_count}/{g.h2d_bytes / 1e6:.1f}/{_ms(g.h2d_ns):,.3f}",
            f"{_ms(g.idle_ns):,.3f}",
            "?" if g.native_ns is None else f"{_ms(g.native_ns):,.3f}",
            f"{_ms(g.recoverable_ns):,.3f}",
        )
        for g in p.groups
    ]
    return _figure(f"chart-{i}-pareto", {"data": data, "layout": layout}) + _table(
        (
            "op",
            "shapes",
            "dtypes",
            "reason",
            "calls",
            "host ms",
            "D2H n/MB/ms",
            "H2D n/MB/ms",
            "idle ms",
            "native ms",
            "recoverable ms",
        ),
        rows,
        numeric=tuple(range(4, 11)),
    )


# -- the cross-rank section -------------------------------------------------------------------
def _cross_rank(d: Distributed) -> str:
    """The cross-rank analysis (``analysis.distributed``), a part per span analysed."""
    out = [
        '<section class="trace" id="multi-rank"><h2>Multi-rank</h2>',
        f"<p>{_e(_STRAGGLER_RULE)}</p>",
    ]
    if d.without_rank:
        out.append(
            f'<p class="note">note: {len(d.without_rank)} file(s) without a rank in '
            "distributedInfo take no part</p>"
        )
    if d.reason:
        out.append(_empty(f"no cross-rank analysis: {d.reason}"))
    for s in d.spans:
        if s.reason is None:
            out.append(_cross_span(s))
        elif d.reason is None:
            out.append(f'<p class="note">span {s.index} ({_e(", ".join(s.sources))}): ')
            out.append(f"{_e(s.reason)}</p>")
    return "".join(out) + "</section>"


_STRAGGLER_RULE = f"The straggler is {STRAGGLER_RULE} (docs/analysis.md, Multi-rank)."


def _cross_ms(ns: float) -> str:
    return f"{_ms(ns):,.3f}"


def _cross_span(s: SpanAnalysis) -> str:
    late = {x.rank for x in s.stragglers}
    world = f" of {s.world_size}" if s.world_size else ""
    out = [
        f'<h3 id="multi-rank-span-{s.index}">span {s.index}: ranks '
        f"{_e(', '.join(map(str, s.ranks)))}{world}</h3>",
        f"<p>clocks aligned on collective ends (reference rank {s.reference_rank})</p>",
    ]
    for x in s.stragglers:
        out.append(
            f'<p class="straggler"><b>straggler: rank {x.rank}</b>, last at {x.late_arrivals} '
            f"of {x.instances} collectives ({_cross_ms(x.lateness_ns)} ms after the next rank, on "
            f"average); costs the ranks waiting for it {_cross_ms(x.cost_ns_per_step)} ms per step; "
            f"before arriving it was doing: <b>{_e(x.doing or '-')}</b></p>"
        )
        out.append(
            _table(
                ("rank waiting", "its wait for this rank, ms/step"),
                [(r, _cross_ms(ns)) for r, ns in x.cost_per_rank],
                numeric=(0, 1),
            )
        )
        out.append(
            _table(
                (
                    "before its late arrivals",
                    f"rank {x.rank} ms (per late arrival)",
                    "the others ms (before the same collectives)",
                    "extra ms",
                ),
                [
                    (a.name, _cross_ms(a.ns), _cross_ms(a.others_ns), _cross_ms(a.excess_ns))
                    for a in x.before
                ],
                numeric=(1, 2, 3),
            )
        )
    if not s.stragglers:
        out.append(_empty(f"no straggler: {s.straggler_note}"))
    out.append("<h4>Per rank (every time per step of that rank)</h4>")
    rows = [
        (
            f"{r.rank}{' (straggler)' * (r.rank in late)}",
            r.source,
            r.steps,
            _cross_ms(r.step_mean_ns),
            _cross_ms(r.compute_ns_per_step),
            _cross_ms(r.collective_ns_per_step),
            _cross_ms(r.compute_before_ns_per_step),
            f"{r.late_arrivals}/{r.instances}",
            "-" if r.wait_recorded_ns_per_step is None else _cross_ms(r.wait_recorded_ns_per_step),
            _cross_ms(r.wait_skew_ns_per_step),
            f"{r.clock_offset_ns / 1e3:,.1f}" if r.clock_aligned else "not aligned",
        )
        for r in s.rows
    ]
    out.append(
        _table(
            (
                "rank",
                "trace",
                "steps",
                "step ms",
                "compute ms/step",
                "collective ms/step",
                "compute before collectives ms/step",
                "late arrivals / collectives",
                "recorded wait ms/step",
                "skew wait ms/step",
                "clock offset µs",
            ),
            rows,
            numeric=tuple(range(2, 11)),
        )
    )
    out.append("<h4>Waits per rank (ms per step)</h4>" + _cross_waits(s))
    if s.collectives:
        out.append("<h4>Collective skew (ms; matched by order in each process group)</h4>")
        out.append(
            _table(
                ("group", "collective", "calls", "mean skew ms", "max skew ms", "late rank"),
                [
                    (
                        c.group,
                        c.name,
                        c.calls,
                        _cross_ms(c.mean_skew_ns),
                        _cross_ms(c.max_skew_ns),
                        "-"
                        if c.late_rank is None
                        else f"{c.late_rank} ({c.late_counts[c.ranks.index(c.late_rank)]}/"
                        f"{c.calls})",
                    )
                    for c in s.collectives
                ],
                numeric=(2, 3, 4),
            )
        )
    notes = [
        f"rank {u.rank}: {u.calls} call(s) of {u.group} have no match on every rank of the "
        "group (not compared)"
        for u in s.unmatched
    ] + [
        f"rank {r.rank}: {r.orphan_waits} collective-wait slice(s) ({_cross_ms(r.orphan_wait_ns)} ms) "
        "with no collective after them (the profile ended mid-wait): in no wait figure"
        for r in s.rows
        if r.orphan_waits
    ]
    if s.mismatched_names:
        notes.append(
            f"{s.mismatched_names} matched instance(s) name different collectives on "
            "different ranks"
        )
    out += [f'<p class="note">note: {_e(n)}</p>' for n in notes]
    return "".join(out)


def _cross_waits(s: SpanAnalysis) -> str:
    """Waits per rank and step: the skew wait (latest arrival - own) and, when the traces
    record them, the collective-wait slices."""
    x = [f"rank {r.rank}" for r in s.rows]
    data = [
        {
            "type": "bar",
            "name": "skew wait (last arrival - own arrival)",
            "x": x,
            "y": [_ms(r.wait_skew_ns_per_step) for r in s.rows],
            "meta": "wait_skew_ns_per_step",
            "marker": {"color": "#1f77b4"},
            "hovertemplate": "%{x}: %{y:,.3f} ms per step<extra></extra>",
        }
    ]
    if any(r.wait_recorded_ns_per_step is not None for r in s.rows):
        data.append(
            {
                "type": "bar",
                "name": "recorded collective wait",
                "x": x,
                "y": [_ms(r.wait_recorded_ns_per_step or 0) for r in s.rows],
                "meta": "wait_recorded_ns_per_step",
                "marker": {"color": "#ff7f0e"},
                "hovertemplate": "%{x}: %{y:,.3f} ms per step<extra></extra>",
            }
        )
    layout = {
        "barmode": "group",
        "height": 320,
        "margin": {"t": 30},
        "xaxis": {"type": "category"},
        "yaxis": {"title": {"text": "ms per step"}},
        "legend": {"orientation": "h", "y": -0.25},
    }
    return _figure(f"chart-multi-rank-{s.index}-waits", {"data": data, "layout": layout})
