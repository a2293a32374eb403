"""The terminal report (rich), at most 100 columns wide::

    render_terminal([report], console=Console(width=100), top=10)

It formats ``analysis.Report`` objects and computes nothing: every figure comes from the
report or from ``analysis.metrics``.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from neuron_profiler.analysis.causes import ALL_CAUSES
from neuron_profiler.analysis.distributed import (
    STRAGGLER_ABS_NS,
    STRAGGLER_REL,
    Distributed,
    SpanAnalysis,
)
from neuron_profiler.analysis.report import Report

MAX_WIDTH = 100


def _ms(ns: float) -> str:
    ms = ns / 1e6
    return f"{ms:,.3f}" if abs(ms) < 100 else f"{ms:,.1f}"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}" if whole else "-"


def render_terminal(
    reports: list[Report], *, console: Console, top: int = 10, cross: Distributed | None = None
) -> None:
    """Each report, then the cross-rank analysis when given (``cross``)."""
    for report in reports:
        _header(report, console)
        if report.findings.findings:
            console.print(_findings_table(report, top))
        if report.findings.fallbacks:
            console.print(_fallback_table(report, top))
        if report.findings.syncs:
            console.print(_sync_table(report, top))
        if report.has_device:
            console.print(_breakdown_table(report, top))
            console.print(_idle_table(report))
            if report.idle.longest:
                console.print(_gaps_table(report, top))
        if report.summary.ops:
            console.print(_ops_table(report, top))
        if report.summary.kernels:
            console.print(_kernels_table(report, top))
        if report.hta_temporal is not None:
            console.print(_hta_table(report))
        if report.tb_breakdown is not None and report.tb_breakdown.steps:
            console.print(_tb_table(report, top))
    if cross is not None and (len(reports) > 1 or cross.available):
        render_distributed(cross, console=console, top=top)


def render_distributed(d: Distributed, *, console: Console, top: int = 10) -> None:
    console.rule("[bold]Multi-rank[/] (docs/analysis.md)", characters="=")
    if d.without_rank:
        console.print(
            f"[yellow]note:[/] {len(d.without_rank)} file(s) without a rank in "
            "distributedInfo take no part"
        )
    if d.reason:
        console.print(f"no cross-rank analysis: {d.reason}")
    for span in d.spans:
        if span.reason is None:
            _span(span, console, top)
        elif d.reason is None:
            console.print(
                f"span {span.index} ({', '.join(span.sources)}): {span.reason}",
                overflow="fold",
                highlight=False,
            )


def _span(s: SpanAnalysis, console: Console, top: int) -> None:
    world = f" of {s.world_size}" if s.world_size else ""
    console.print(
        f"[bold]span {s.index}[/]: ranks {_ranks(s.ranks)}{world} · clocks aligned on "
        f"collective ends (reference rank {s.reference_rank})",
        highlight=False,
    )
    rule = (
        f"rule: the rank last most often, costing the ranks waiting for it >= "
        f"{100 * STRAGGLER_REL:g}% of their step and >= {STRAGGLER_ABS_NS / 1e3:g} µs per step"
    )
    for x in s.stragglers:
        console.print(
            f"[red]straggler:[/] rank {x.rank}, last at {x.late_arrivals} of {x.instances} "
            f"collectives ({_ms(x.lateness_ns)} ms after the next rank, on average)",
            highlight=False,
        )
        console.print(
            f"  costs the ranks waiting for it {_ms(x.cost_ns_per_step)} ms per step: "
            + ", ".join(f"rank {r}: {_ms(ns)}" for r, ns in x.cost_per_rank[:top])
            + (", ..." if len(x.cost_per_rank) > top else ""),
            highlight=False,
        )
        console.print(
            f"  before arriving it was doing: [bold]{escape(x.doing or '-')}[/] (ms per late "
            f"arrival, rank {x.rank} vs the others: "
            + ", ".join(
                f"{escape(a.name)} {_ms(a.ns)} vs {_ms(a.others_ns)}" for a in x.before[:top]
            )
            + ")",
            highlight=False,
        )
    if not s.stragglers:
        console.print(f"no straggler: {s.straggler_note} ({rule})", highlight=False)
    late = {x.rank for x in s.stragglers}
    t = _table(
        "Per rank (every time per step; late = collectives it arrived last at, of its own)",
        "rank",
        "step\nms",
        "compute\nms/step",
        "coll.\nms/step",
        "before\nms/step",
        "late",
        "wait rec.\nms/step",
        "wait skew\nms/step",
        "clock\nµs",
    )
    rows = sorted(s.rows, key=lambda r: (r.rank not in late, r.rank))
    for r in rows[:top]:
        t.add_row(
            f"{r.rank}{' *' * (r.rank in late)}",
            _ms(r.step_mean_ns),
            _ms(r.compute_ns_per_step),
            _ms(r.collective_ns_per_step),
            _ms(r.compute_before_ns_per_step),
            f"{r.late_arrivals}/{r.instances}",
            "-" if r.wait_recorded_ns_per_step is None else _ms(r.wait_recorded_ns_per_step),
            _ms(r.wait_skew_ns_per_step),
            f"{r.clock_offset_ns / 1e3:,.1f}" if r.clock_aligned else "n/a",
        )
    t.caption = (
        "* straggler; before = device compute before collectives; wait rec. = "
        "collective-wait slices; wait skew = last arrival - own arrival; clock = offset to "
        "the reference rank"
        + (f"; first {top} of {len(rows)} ranks (--top)" if len(rows) > top else "")
    )
    console.print(t)
    if s.collectives:
        c = _table(
            "Collective wait skew (ms; matched by order in each process group)",
            "group",
            "collective",
            "calls",
            "mean skew",
            "max skew",
            "late rank",
            "longest waits (rank: ms)",
            wrap=("group", "collective", "longest waits (rank: ms)"),
        )
        for x in sorted(s.collectives, key=lambda x: -x.mean_skew_ns * x.calls)[:top]:
            waits = sorted(zip(x.ranks, x.wait_skew_ns, strict=True), key=lambda p: -p[1])
            c.add_row(
                x.group,
                x.name,
                str(x.calls),
                _ms(x.mean_skew_ns),
                _ms(x.max_skew_ns),
                "-"
                if x.late_rank is None
                else f"{x.late_rank} ({x.late_counts[x.ranks.index(x.late_rank)]}/{x.calls})",
                ", ".join(f"{r}: {_ms(w)}" for r, w in waits[:3]),
            )
        console.print(c)
    for u in s.unmatched[:top]:
        console.print(
            f"[yellow]note:[/] rank {u.rank}: {u.calls} call(s) of {u.group} have no "
            "match on every rank of the group (not compared)",
            highlight=False,
        )
    for r in s.rows:
        if r.orphan_waits:
            console.print(
                f"[yellow]note:[/] rank {r.rank}: {r.orphan_waits} collective-wait "
                f"slice(s) ({_ms(r.orphan_wait_ns)} ms) with no collective after them "
                "(the profile ended mid-wait): in no wait figure",
                highlight=False,
            )
    if s.mismatched_names:
        console.print(
            f"[yellow]note:[/] {s.mismatched_names} matched instance(s) name "
            "different collectives on different ranks",
            highlight=False,
        )


def _ranks(ranks: tuple[int, ...]) -> str:
    return (
        ", ".join(map(str, ranks))
        if len(ranks) <= 8
        else (f"{', '.join(map(str, ranks[:4]))}, ... ({len(ranks)} ranks)")
    )


def _header(r: Report, console: Console) -> None:
    console.rule(characters="=")
    console.print(f"[bold]{r.source}[/]", overflow="fold", highlight=False)
    steps = len(r.steps)
    console.print(
        f"rank {r.rank} · {steps} step{'s' * (steps != 1)} · mean step "
        f"{_ms(float(r.steps.wall_ns.mean()))} ms · min gap "
        f"{r.options.min_gap_ns / 1e3:g} µs"
    )
    for note in r.notes:
        console.print(f"[yellow]note:[/] {note}")


def _table(title: str, *columns: str, wrap: tuple[str, ...] = ()) -> Table:
    """Numbers never wrap; the columns named in ``wrap`` (free text) fold."""
    table = Table(title=title, title_justify="left", header_style="bold", pad_edge=False)
    for i, c in enumerate(columns):
        table.add_column(
            c,
            justify="left" if i == 0 or c in wrap else "right",
            overflow="fold",
            no_wrap=c not in wrap,
            min_width=8 if c in wrap else None,
        )
    return table


def _findings_table(r: Report, top: int) -> Table:
    t = _table(
        "What to fix first (recoverable time per step; docs/analysis.md)",
        "#",
        "finding",
        "ms/step",
        "% step",
        "longest at (µs)",
        "what to do",
        wrap=("finding", "what to do"),
    )
    for i, f in enumerate(r.findings.findings[:top], start=1):
        where = f"{r.to_trace_us(f.ranges_ns[0][0]):,.0f}" if f.ranges_ns else "-"
        t.add_row(
            str(i),
            escape(f.title)
            + (f" [dim]({escape(f.host_op)})[/]" if f.host_op else "")
            + _at(f.call_site),
            _ms(f.recoverable_ns_per_step),
            f"{f.recoverable_pct:.1f}",
            where,
            f.suggestion,
        )
    return t


def _fallback_table(r: Report, top: int) -> Table:
    t = _table(
        "CPU fallbacks (by op and input signature)",
        "op",
        "calls",
        "host ms",
        "D2H n/MB/ms",
        "H2D n/MB/ms",
        "idle ms",
        "native ms",
        "recov. ms",
        wrap=("op",),
    )
    for g in r.findings.fallbacks[:top]:
        inferred = " [yellow](inferred)[/]" if g.inferred else ""
        t.add_row(
            escape(f"{g.op} {g.shapes} {g.dtypes}") + inferred + _at(g.call_site),
            str(g.calls),
            _ms(g.host_ns),
            f"{g.d2h_count}/{g.d2h_bytes / 1e6:.1f}/{_ms(g.d2h_ns)}",
            f"{g.h2d_count}/{g.h2d_bytes / 1e6:.1f}/{_ms(g.h2d_ns)}",
            _ms(g.idle_ns),
            "?" if g.native_ns is None else _ms(g.native_ns),
            _ms(g.recoverable_ns),
        )
    return t


def _sync_table(r: Report, top: int) -> Table:
    t = _table(
        "Host syncs (outermost call on its thread)",
        "sync",
        "calls",
        "host ms",
        "D2H n/MB/ms",
        "idle ms",
        wrap=("sync",),
    )
    for g in r.findings.syncs[:top]:
        t.add_row(
            escape(g.name) + _at(g.call_site),
            str(g.calls),
            _ms(g.host_ns),
            f"{g.d2h_count}/{g.d2h_bytes / 1e6:.1f}/{_ms(g.d2h_ns)}",
            _ms(g.idle_ns),
        )
    return t


def _at(call_site: str) -> str:
    """The Python call site under a row's text, when the trace has stacks."""
    return f"\n[dim]at {escape(call_site)}[/]" if call_site else ""


def _breakdown_table(r: Report, top: int) -> Table:
    b = r.breakdown
    t = _table(
        "Step breakdown (ms; per device, busy = any queue; coll. = collectives, "
        "ovl. = compute and collectives at once)",
        "step",
        "device",
        "wall",
        "host",
        "busy",
        "compute",
        "DMA",
        "coll.",
        "ovl.",
        "idle",
        "idle %",
        wrap=("device",),
    )
    for i, name in enumerate(b.names[:top]):
        for d in b.devices:
            t.add_row(
                name,
                d.label,
                _ms(b.wall_ns[i]),
                _ms(b.host_ns[i]),
                _ms(d.busy_ns[i]),
                _ms(d.compute_ns[i]),
                _ms(d.dma_ns[i]),
                _ms(d.collective_ns[i]),
                _ms(d.overlap_ns[i]),
                _ms(d.idle_ns[i]),
                _pct(d.idle_ns[i], b.wall_ns[i]),
            )
    if len(b.names) > top:
        t.caption = f"first {top} of {len(b.names)} steps (--top)"
    return t


def _idle_table(r: Report) -> Table:
    steps = max(len(r.steps), 1)
    t = _table(
        "Device idle time by cause (ms)",
        "cause",
        *[d.label for d in r.idle.devices],
        "per step",
        "% of idle",
        wrap=tuple(d.label for d in r.idle.devices),
    )
    total_idle = sum(d.idle_ns for d in r.idle.devices)
    for cause in ALL_CAUSES:
        values = [d.by_cause_ns[cause] for d in r.idle.devices]
        if not any(values):
            continue
        t.add_row(
            cause,
            *[_ms(v) for v in values],
            _ms(sum(values) / steps),
            _pct(sum(values), total_idle),
        )
    t.add_row(
        "[bold]idle[/]",
        *[f"{_ms(d.idle_ns)} ({_pct(d.idle_ns, d.window_ns)}%)" for d in r.idle.devices],
        _ms(total_idle / steps),
        "100.0",
    )
    discounted = [d.emulator_overhead_ns for d in r.idle.devices]
    if any(discounted):
        t.add_row(
            "[dim]emulator overhead[/]",
            *[_ms(v) for v in discounted],
            _ms(sum(discounted) / steps),
            "-",
        )
        t.caption = (
            "emulator overhead: the emulator's own host work, absent on real hardware; "
            "not idle time, in no cause"
        )
    return t


def _gaps_table(r: Report, top: int) -> Table:
    t = _table(
        "Longest idle gaps (start in the trace's µs; ms: idle time)",
        "device",
        "start µs",
        "ms",
        "cause",
        "step",
        "host was running",
        wrap=("device", "host was running"),
    )
    labels = {d.device: d.label for d in r.idle.devices}
    for g in r.idle.longest[:top]:
        t.add_row(
            labels.get(g.device, str(g.device)),
            f"{r.to_trace_us(g.start_ns):,.3f}",
            _ms(g.idle_ns),
            g.cause,
            r.steps.names[g.step],
            "; ".join(g.host_activity),
        )
    return t


def _ops_table(r: Report, top: int) -> Table:
    t = _table(
        "Operators (ms; device time of the work each launched)",
        "op",
        "calls",
        "host total",
        "host self",
        "device self",
        "device total",
        wrap=("op",),
    )
    for o in r.summary.ops[:top]:
        t.add_row(
            o.name,
            str(o.calls),
            _ms(o.host_total_ns),
            _ms(o.host_self_ns),
            _ms(o.device_self_ns),
            _ms(o.device_total_ns),
        )
    return t


def _kernels_table(r: Report, top: int) -> Table:
    t = _table(
        "Kernels (device time)",
        "kernel",
        "calls",
        "total ms",
        "mean µs",
        "TFLOPS",
        "GB/s",
        "% peak",
        wrap=("kernel",),
    )

    def opt(x: float | None) -> str:
        return "-" if x is None else f"{x:,.2f}"

    for k in r.summary.kernels[:top]:
        t.add_row(
            k.name,
            str(k.calls),
            _ms(k.total_ns),
            f"{k.mean_ns / 1e3:,.1f}",
            opt(k.achieved_tflops),
            opt(k.achieved_gbps),
            opt(k.pct_of_peak),
        )
    return t


def _hta_table(r: Report) -> Table:
    tp = r.hta_temporal
    assert tp is not None
    t = _table(
        "HTA-compatible idle time per stream (HTA 0.5.0 conventions)",
        "stream",
        "host_wait µs",
        "kernel_wait µs",
        "other µs",
    )
    t.caption = (
        f"temporal: kernel time {tp.kernel_ns / 1e3:,.0f} µs, idle {tp.pct(tp.idle_ns)}%,"
        f" compute {tp.pct(tp.compute_ns)}%, non-compute {tp.pct(tp.non_compute_ns)}%"
    )
    for s in r.hta_idle.streams if r.hta_idle else ():
        t.add_row(
            str(s.stream),
            f"{s.host_wait_ns / 1e3:,.0f}",
            f"{s.kernel_wait_ns / 1e3:,.0f}",
            f"{s.other_ns / 1e3:,.0f}",
        )
    return t


def _tb_table(r: Report, top: int) -> Table:
    tb = r.tb_breakdown
    assert tb is not None
    short = {"Communication": "Comm.", "DataLoader": "Data", "CPU Exec": "CPU"}
    t = _table(
        "tb-profiler step breakdown (µs, torch-tb-profiler 0.4.3 rules; Comm. = "
        "Communication, Data = DataLoader, CPU = CPU Exec)",
        "step",
        *[short.get(c, c) for c in tb.columns],
        "Total",
    )
    for row in tb.rows()[:top]:
        t.add_row(str(row["step"]), *[f"{row[c]:,.0f}" for c in (*tb.columns, "Total")])
    return t
