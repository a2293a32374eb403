"""The terminal report (rich), as wide as the terminal (``report_width``: the terminal's own
width, ``COLUMNS`` when set; ``PIPED_WIDTH`` columns for a pipe or a file)::

    render_terminal([report], console=Console(width=report_width(Console())), top=10)

It formats ``analysis.Report`` objects and computes nothing: every figure comes from the
report or from ``analysis.metrics``. Times in the trace are shown where a reader finds them,
``step 7 +12.3 ms`` (``Report.position``; the trace's own µs are in ``--json``). Text from a
trace is shortened by ``reports.text.shorten`` and breaks across lines at the places
``reports.text.line_breaks`` gives (after "::", ", ", ...), not in the middle of a word.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from neuron_profiler.analysis.causes import ALL_CAUSES
from neuron_profiler.analysis.distributed import (
    STRAGGLER_RULE,
    Distributed,
    SpanAnalysis,
)
from neuron_profiler.analysis.memory import SOURCE_ALLOCATOR
from neuron_profiler.analysis.report import Report, rank_text
from neuron_profiler.reports.text import (
    NAME_LIMIT,
    TEXT_LIMIT,
    line_breaks,
    mib,
    min_piece_width,
    shorten,
)

PIPED_WIDTH = 120  # columns when the output is no terminal (a pipe, a file)
NARROWEST_PIECE = 20  # a name's column may be narrower than its longest unbreakable piece
LAYOUT_ROWS = 20  # the findings table's split is chosen for its first rows (a long --top)


def report_width(console: Console) -> int:
    """The report's width: the terminal's own when ``console`` writes to a terminal (rich's
    width: ``COLUMNS`` when set, else the terminal's size), else ``PIPED_WIDTH`` whatever
    ``COLUMNS`` says: a parent process that loaded GNU readline (pytest, an interactive
    Python) exports ``COLUMNS=80`` to its children, which says nothing about a pipe."""
    return console.width if console.is_terminal else PIPED_WIDTH


class Breaking:
    """A table cell whose lines break where ``reports.text.line_breaks`` says (after "::",
    ", ", ...; a word longer than the column after "_", and only then anywhere), styles
    kept."""

    def __init__(self, text: Text) -> None:
        self.text = text

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        plain = self.text.plain
        widest = max(cell_len(line) for line in plain.split("\n"))
        least = min(min_piece_width(plain, NARROWEST_PIECE), widest)
        return Measurement(least, widest).with_maximum(options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines: list[Text] = []
        for line in self.text.split("\n", allow_blank=True):
            for part in line.divide(line_breaks(line.plain, options.max_width)):
                part.rstrip()
                lines.append(part)
        yield Text("\n").join(lines)


def _name(text: str, style: str = "", limit: int = NAME_LIMIT) -> Text:
    """A text from the trace, shortened (``reports.text.shorten``), as rich text."""
    return Text(shorten(text, limit), style=style)


def _cell(*parts: Text | str) -> Breaking:
    """One table cell made of ``parts`` (plain strings are taken as they are, no markup)."""
    return Breaking(Text.assemble(*parts))


def _names(names: Iterable[str], sep: str = "; ") -> str:
    return sep.join(shorten(n) for n in names)


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
            console.print(_findings_table(report, top, console.width))
        if report.findings.fallbacks:
            console.print(_fallback_table(report, top))
        if report.findings.syncs:
            console.print(_sync_table(report, top))
        if report.has_device:
            console.print(_breakdown_table(report, top))
            console.print(_idle_table(report))
            if report.idle.longest:
                console.print(_gaps_table(report, top))
        if report.communication.device is not None:
            console.print(_communication_table(report, top))
        if report.memory is not None:
            for table in _memory_tables(report, top):
                console.print(table)
        if report.summary.ops:
            console.print(_ops_table(report, top))
        if report.summary.kernels:
            console.print(_kernels_table(report, top))
        if report.hta_temporal is not None:
            console.print(_hta_table(report))
        if report.tb_breakdown is not None and report.tb_breakdown.steps:
            console.print(_tb_table(report, top))
    if cross is not None and cross.shown_with(len(reports)):
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
                f"span {span.index} ({_names(span.sources, ', ')}): {span.reason}",
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
    rule = f"rule: {STRAGGLER_RULE}"
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
            f"  before arriving it was doing: [bold]{escape(shorten(x.doing or '-'))}[/] (ms per "
            f"late arrival, rank {x.rank} vs the others: "
            + ", ".join(
                f"{escape(shorten(a.name))} {_ms(a.ns)} vs {_ms(a.others_ns)}"
                for a in x.before[:top]
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
    rows = s.rows
    for r in s.rows_within(top):
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
        for x in s.collectives[:top]:
            c.add_row(
                _name(x.group),
                _name(x.name),
                str(x.calls),
                _ms(x.mean_skew_ns),
                _ms(x.max_skew_ns),
                "-"
                if x.late_rank is None
                else f"{x.late_rank} ({x.late_counts[x.ranks.index(x.late_rank)]}/{x.calls})",
                ", ".join(f"{r}: {_ms(w)}" for r, w in x.longest_waits[:3]),
            )
        console.print(c)
    for u in s.unmatched[:top]:
        console.print(
            f"[yellow]note:[/] rank {u.rank}: {u.calls} call(s) of {escape(shorten(u.group))} have no "
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
    console.print(_name(r.source, "bold"), overflow="fold")
    steps = len(r.steps)
    console.print(
        f"{rank_text(r.rank)} · {steps} step{'s' * (steps != 1)} · mean step "
        f"{_ms(float(r.steps.wall_ns.mean()))} ms · min gap "
        f"{r.options.min_gap_ns / 1e3:g} µs"
    )
    for note in r.notes:
        console.print(Text.assemble(("note:", "yellow"), " ", _name(note, limit=TEXT_LIMIT)))


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


def _findings_table(r: Report, top: int, width: int) -> Table:
    """The numbers never wrap; the finding and what to do share the rest of ``width``, split
    where the table takes the fewest lines (among equals, where the advice wraps least)."""
    rows = []
    for i, f in enumerate(r.findings.findings[:top], start=1):
        finding = Text.assemble(
            _name(f.title),
            _name(f" ({f.host_op_news})", "dim") if f.host_op_news else "",
            _at(f.call_site),
        )
        where = r.position(f.ranges_ns[0][0]).text() if f.ranges_ns else "-"
        fixed = (str(i), _ms(f.recoverable_ns_per_step), f"{f.recoverable_pct:.1f}", where)
        rows.append((fixed, finding, _name(f.suggestion, limit=TEXT_LIMIT)))
    headers = ("#", "ms/step", "% step", "longest at")
    fixed_widths = [
        max(cell_len(h), *(cell_len(row[0][k]) for row in rows)) for k, h in enumerate(headers)
    ]
    # 6 columns: 7 borders, and a space either side of each cell but the outer two
    rest = width - sum(fixed_widths) - 7 - (2 * 6 - 2)
    finding_width, advice_width = _split(
        rest,
        [row[1].plain for row in rows[:LAYOUT_ROWS]],
        [row[2].plain for row in rows[:LAYOUT_ROWS]],
    )
    t = Table(
        title="What to fix first (recoverable time per step; docs/analysis.md)",
        title_justify="left",
        header_style="bold",
        pad_edge=False,
    )
    t.add_column("#", no_wrap=True)
    t.add_column("finding", width=finding_width)
    t.add_column("ms/step", justify="right", no_wrap=True)
    t.add_column("% step", justify="right", no_wrap=True)
    t.add_column("longest at", no_wrap=True)
    t.add_column("what to do", width=advice_width)
    for (number, ms, pct, where), finding, advice in rows:
        t.add_row(number, Breaking(finding), ms, pct, where, Breaking(advice))
    return t


def _lines(text: str, width: int) -> int:
    """How many lines ``Breaking`` gives ``text`` in ``width`` cells."""
    return sum(1 + len(line_breaks(line, width)) for line in text.split("\n"))


def _split(rest: int, findings: list[str], advice: list[str]) -> tuple[int, int]:
    """The finding column's width and the advice's, adding up to ``rest``: the split with the
    fewest lines in all (a row is as tall as its taller cell), then the fewest advice lines."""
    narrowest = 12
    if rest < 2 * narrowest:
        return max(rest // 2, 1), max(rest - rest // 2, 1)

    def cost(w: int) -> tuple[int, int]:
        a = [_lines(x, rest - w) for x in advice]
        return sum(max(_lines(f, w), n) for f, n in zip(findings, a, strict=True)), sum(a)

    best = min(range(narrowest, rest - narrowest + 1), key=cost)
    return best, rest - best


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
        t.add_row(
            _cell(
                _name(g.op),
                " ",
                _name(g.shapes),
                " ",
                _name(g.dtypes),
                (" (inferred)", "yellow") if g.inferred else "",
                _at(g.call_site),
            ),
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
            _cell(_name(g.name), _at(g.call_site)),
            str(g.calls),
            _ms(g.host_ns),
            f"{g.d2h_count}/{g.d2h_bytes / 1e6:.1f}/{_ms(g.d2h_ns)}",
            _ms(g.idle_ns),
        )
    return t


def _at(call_site: str) -> Text | str:
    """The Python call site under a row's text, when the trace has stacks."""
    return Text.assemble("\n", _name(f"at {call_site}", "dim")) if call_site else ""


def _breakdown_table(r: Report, top: int) -> Table:
    """Per step and device. ``not busy`` = wall - busy: idle time and, on an emulated device,
    the emulator's own host work, given apart ("emu.") when the breakdown says it holds some:
    the idle-by-cause table counts idle without it."""
    b = r.breakdown
    emulated = b.has_emulator_overhead
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
        "not busy",
        "not busy %",
        *(("emu.",) if emulated else ()),
        wrap=("device",),
    )
    for i, name in enumerate(b.names[:top]):
        for d in b.devices:
            t.add_row(
                _cell(_name(name)),
                _cell(_name(d.label)),
                _ms(b.wall_ns[i]),
                _ms(b.host_ns[i]),
                _ms(d.busy_ns[i]),
                _ms(d.compute_ns[i]),
                _ms(d.dma_ns[i]),
                _ms(d.collective_ns[i]),
                _ms(d.overlap_ns[i]),
                _ms(d.not_busy_ns[i]),
                _pct(d.not_busy_ns[i], b.wall_ns[i]),
                *((_ms(d.emulator_overhead_ns[i]),) if emulated else ()),
            )
    notes = [
        "not busy = wall − busy: idle time plus the emulator's own host work (emu., absent "
        "on real hardware); the idle-by-cause table counts idle without it"
        if emulated
        else "not busy = wall − busy: the idle time of the idle-by-cause table"
    ]
    if len(b.names) > top:
        notes.append(f"first {top} of {len(b.names)} steps (--top)")
    t.caption, t.caption_justify = "; ".join(notes), "left"
    return t


def _idle_table(r: Report) -> Table:
    steps = max(len(r.steps), 1)
    labels = [shorten(d.label) for d in r.idle.devices]
    t = _table(
        "Device idle time by cause (ms)",
        "cause",
        *labels,
        "per step",
        "% of idle",
        wrap=tuple(labels),
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
    t.caption_justify = "left"
    t.caption = "(%): of the device's time in the steps"
    discounted = [d.emulator_overhead_ns for d in r.idle.devices]
    if any(discounted):
        t.add_row(
            "[dim]emulator overhead[/]",
            *[
                f"{_ms(d.emulator_overhead_ns)} ({_pct(d.emulator_overhead_ns, d.window_ns)}%)"
                for d in r.idle.devices
            ],
            _ms(sum(discounted) / steps),
            "-",
        )
        t.caption = (
            "idle: without the emulator overhead (the emulator's own host work, absent on "
            "real hardware: not idle time, in no cause); (%): of the device's time in the "
            "steps (busy + idle + emulator overhead)"
        )
    return t


def _communication_table(r: Report, top: int) -> Table:
    comm = r.communication
    t = _table(
        f"Communication on {comm.device_label} (ms): hidden behind compute or exposed",
        "step / unit",
        "collectives",
        "collective",
        "hidden",
        "exposed",
        "% exposed",
        "peer wait",
        "exposed: what",
        wrap=("exposed: what",),
    )
    rows = [(f"step {s.name}", s) for s in comm.steps[:top]] + [("[bold]total[/]", comm.total)]
    rows += [(u.name + " [bold red]*[/]" * (u.name in comm.flagged), u) for u in comm.units[:top]]
    for name, row in rows:
        t.add_row(
            name,
            str(row.collectives),
            _ms(row.collective_ns),
            _ms(row.hidden_ns),
            _ms(row.exposed_ns),
            f"{100 * row.exposed_share:.1f}",
            _ms(row.peer_wait_ns),
            _names(f"{kind} {_ms(ns)}" for kind, ns in row.exposed_by_kind),
        )
    t.caption_justify = "left"
    t.caption = (
        "steps (the first --top), the total, then FSDP units by exposed time (* flagged: the "
        "exposed_communication finding); peer wait: idle at a collective for a peer"
    )
    return t


def _memory_tables(r: Report, top: int) -> list[Table]:
    """Peaks per device, the memory findings, and per device what was live at the peak (the
    ops' shares, the largest allocations with their call sites)."""
    mem = r.memory
    assert mem is not None
    t = _table(
        "Device memory (MiB)",
        "device",
        "peak",
        "at",
        "reserved",
        "capacity",
        "headroom",
        "% capacity",
        "growth / step",
    )
    for d in mem.devices:
        t.add_row(
            _name(d.label),
            mib(d.peak_bytes) + ("" if d.absolute else " *"),
            r.position(d.peak_ns).text(),
            mib(d.peak_reserved_bytes),
            mib(d.capacity_bytes),
            mib(d.headroom_bytes),
            "" if d.capacity_pct is None else f"{d.capacity_pct:.1f}",
            mib(d.growth_per_step_bytes),
        )
    t.caption_justify = "left"
    t.caption = (
        "peak: the allocator's total at its highest (* only what the trace allocated: the "
        "trace has no Total Allocated); headroom: capacity less the reserve (or peak); growth: "
        "of the least held in each step, the median step to step"
    ) + (
        f"; {mem.without_bytes} memory events without a number of Bytes (counted as 0)"
        if mem.without_bytes
        else ""
    )
    out = [t]
    if mem.findings:
        f = _table("Memory findings", "finding", "suggestion", "docs", wrap=("suggestion",))
        for x in mem.findings:
            f.add_row(_cell(Text(x.title, style="bold")), x.suggestion, x.docs)
        out.append(f)
    for d in mem.devices:
        if not d.by_op:
            continue
        paired = d.source != SOURCE_ALLOCATOR or mem.without_address < d.events
        head = ("live at peak", "tensors") if paired else ()
        ops = _table(
            f"Memory on {d.label} by allocating op (MiB)", "op", *head, "allocated", "allocations"
        )
        for o in d.by_op[:top]:
            live = (mib(o.live_bytes), str(o.live_tensors)) if paired else ()
            ops.add_row(_name(o.op), *live, mib(o.allocated_bytes), str(o.allocations))
        if not paired:
            ops.caption = (
                "the trace's memory events have no Addr: what was live at the peak is unknown"
            )
            ops.caption_justify = "left"
        out.append(ops)
        if d.live_at_peak:
            live = _table(
                f"Largest allocations live at the peak of {d.label}",
                "MiB",
                "allocated at",
                "op",
                "call site",
                wrap=("call site",),
            )
            for x in d.live_at_peak[:top]:
                live.add_row(mib(x.bytes), r.position(x.alloc_ns).text(), _name(x.op), x.call_site)
            out.append(live)
    return out


def _gaps_table(r: Report, top: int) -> Table:
    t = _table(
        "Longest idle gaps (at: the step the gap starts in and how far into it; ms: idle time)",
        "device",
        "at",
        "ms",
        "cause",
        "host was running",
        wrap=("device", "host was running"),
    )
    labels = {d.device: d.label for d in r.idle.devices}
    for g in r.idle.longest[:top]:
        t.add_row(
            _cell(_name(labels.get(g.device, str(g.device)))),
            r.position(g.start_ns).text(),
            _ms(g.idle_ns),
            g.cause,
            _cell(_names(g.host_activity)),
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
            _cell(_name(o.name)),
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
            _cell(_name(k.name)),
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
