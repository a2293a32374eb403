"""``neuron-prof diff`` in the terminal (rich): the rows ranked by |Δ|, a text waterfall from A's
mean step to B's, the analyzer's idle causes compared and the name mappings used::

    render_diff([d], console=Console(width=report_width(Console())), top=25)

It formats ``analysis.diff.TraceDiff`` objects and computes nothing but bar lengths.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from neuron_profiler.analysis.diff import (
    BY_OP,
    COMPONENTS,
    DISPLAY_ROWS,
    GROUPING_TEXT,
    Row,
    TraceDiff,
)
from neuron_profiler.analysis.rank_pairs import BY_FILES, RankPairs
from neuron_profiler.reports.text import TEXT_LIMIT, mib, shorten, signed

WATERFALL_MIN = 20  # columns of the waterfall's bars at the least
SLOWER, FASTER = "red", "green"


def render_diff(
    diffs: list[TraceDiff],
    *,
    console: Console,
    top: int = DISPLAY_ROWS,
    pairing: RankPairs | None = None,
) -> None:
    """``pairing``: how the traces of rank directories were paired (said first)."""
    if pairing is not None and pairing.by != BY_FILES:
        how = f"paired by {pairing.by}" + (f" ({pairing.note})" if pairing.note else "")
        console.print(
            Text.assemble((f"{len(diffs)} rank pairs ", "bold"), shorten(how, TEXT_LIMIT))
        )
    for d in diffs:
        _header(d, console)
        rows = d.folded(top=top)
        console.print(_rows_table(d, rows))
        _waterfall(d, rows, console)
        if d.idle:
            console.print(_idle_table(d))
        if d.mappings:
            console.print(_mappings_table(d, top))
        if d.memory:
            console.print(_memory_table(d))


def _ms(ms: float) -> str:
    return f"{ms:,.3f}" if abs(ms) < 100 else f"{ms:,.1f}"


def _signed(ms: float) -> Text:
    text = signed(ms, "+,.3f" if abs(ms) < 100 else "+,.1f")
    style = SLOWER if ms > 0 else FASTER if ms < 0 else ""
    return Text(text, style=style)


def _header(d: TraceDiff, console: Console) -> None:
    console.rule(characters="=")
    console.print(Text.assemble(("A ", "bold"), shorten(d.a.source, TEXT_LIMIT)), overflow="fold")
    console.print(Text.assemble(("B ", "bold"), shorten(d.b.source, TEXT_LIMIT)), overflow="fold")
    n = len(d.a.steps)
    console.print(
        Text.assemble(
            f"{n} step{'s' * (n != 1)} compared by {d.steps_by} · mean step "
            f"{_ms(d.a.step_ms)} ms → {_ms(d.b.step_ms)} ms · Δ ",
            _signed(d.delta_ms),
            f" ms ({signed(d.delta_pct, '+.1f') + '%' if d.a.step_ms else 'A has no step time'}) · "
            f"residual {signed(d.residual_ms, '+.6f')} ms",
        )
    )
    if d.group_by != BY_OP:
        console.print(f"rows by {d.group_by}: {GROUPING_TEXT[d.group_by]}")
    for note in d.notes:
        console.print(Text.assemble(("note:", "yellow"), " ", shorten(note, TEXT_LIMIT)))


def _rows_table(d: TraceDiff, rows: tuple[Row, ...]) -> Table:
    table = Table(
        title="Where the time went (ms per step, largest |Δ| first; docs/diff.md)",
        title_justify="left",
        header_style="bold",
        pad_edge=False,
    )
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("row", overflow="fold", min_width=20)
    table.add_column("kind", no_wrap=True)
    for c in ("A", "B", "Δ", "% of A"):
        table.add_column(c, justify="right", no_wrap=True)
    table.add_column("Δ by part", overflow="fold", min_width=12)
    for i, r in enumerate(rows, 1):
        parts = ", ".join(
            f"{c} {signed(x, '+.3f')}"
            for c, x in zip(COMPONENTS, r.delta_parts_ms, strict=True)
            if abs(x) >= 5e-4
        )
        note = f" ({'; '.join(r.notes)})" if r.notes else ""
        table.add_row(
            str(i),
            Text(shorten(r.key, TEXT_LIMIT) + shorten(note, TEXT_LIMIT)),  # (never markup)
            r.kind,
            _ms(r.a_ms),
            _ms(r.b_ms),
            _signed(r.delta_ms),
            f"{signed(d.pct_of_a(r.delta_ms), '+.1f')}" if d.a.step_ms else "-",
            parts,
        )
    return table


def _waterfall(d: TraceDiff, rows: tuple[Row, ...], console: Console) -> None:
    """A's mean step, each row's Δ as a bar from the running total, B's mean step."""
    totals = [d.a.step_ms]
    for r in rows:
        totals.append(totals[-1] + r.delta_ms)
    lo, hi = min(0.0, *totals), max(totals)
    label = min(max((len(r.key) for r in rows), default=10), 40)
    width = max(WATERFALL_MIN, console.width - label - 24)
    scale = width / (hi - lo) if hi > lo else 0.0

    def bar(start: float, end: float, style: str) -> Text:
        a, b = sorted((start, end))
        left, right = (
            round((a - lo) * scale),
            max(round((b - lo) * scale), round((a - lo) * scale) + 1),
        )
        return Text.assemble(" " * left, ("█" * (right - left), style))

    console.print(Text("Waterfall (ms per step)", style="italic"))
    console.print(
        Text.assemble(f"{'A':<{label}} {_ms(d.a.step_ms):>10} ", bar(0, d.a.step_ms, "bold"))
    )
    for r, before, after in zip(rows, totals, totals[1:], strict=False):
        style = SLOWER if r.delta_ms > 0 else FASTER
        console.print(
            Text.assemble(
                f"{shorten(r.key, label):<{label}} ",
                _pad(_signed(r.delta_ms)),
                " ",
                bar(before, after, style),
            )
        )
    if abs(d.residual_ms) >= 5e-4:
        console.print(Text.assemble(f"{'residual':<{label}} {signed(d.residual_ms, '>+10.3f')}"))
    console.print(
        Text.assemble(f"{'B':<{label}} {_ms(d.b.step_ms):>10} ", bar(0, d.b.step_ms, "bold"))
    )


def _pad(text: Text) -> Text:
    return Text(" " * max(10 - len(text), 0)) + text


def _idle_table(d: TraceDiff) -> Table:
    table = Table(
        title="Device idle by cause (the analyzer's, ms per step; every gap, gated or not)",
        title_justify="left",
        header_style="bold",
        pad_edge=False,
    )
    table.add_column("cause")
    for c in ("A", "B", "Δ"):
        table.add_column(c, justify="right", no_wrap=True)
    for c in d.idle:
        table.add_row(c.cause, _ms(c.a_ms), _ms(c.b_ms), _signed(c.delta_ms))
    return table


def _memory_table(d: TraceDiff) -> Table:
    table = Table(
        title="Device memory peaks (MiB; docs/analysis.md#memory)",
        title_justify="left",
        header_style="bold",
        pad_edge=False,
    )
    table.add_column("device")
    for c in ("A", "B", "Δ", "A held", "B held"):
        table.add_column(c, justify="right", no_wrap=True)
    for m in d.memory:
        table.add_row(
            Text(shorten(m.device)),
            mib(m.a_bytes, missing="-"),
            mib(m.b_bytes, missing="-"),
            mib(m.delta_bytes, signed=True, missing="-"),
            mib(m.a_held_bytes, missing="-"),
            mib(m.b_held_bytes, missing="-"),
        )
    return table


def _mappings_table(d: TraceDiff, top: int) -> Table:
    table = Table(
        title="Name mappings used (name map: docs/diff.md#the-name-map)",
        title_justify="left",
        header_style="bold",
        pad_edge=False,
    )
    for c in ("rule", "from", "to", "A ops", "B ops"):
        table.add_column(c, justify="right" if c.endswith("ops") else "left", overflow="fold")
    ranked = sorted(d.mappings, key=lambda m: -m.ops)
    for m in ranked[:top]:
        table.add_row(
            m.rule,
            Text(shorten(m.raw, TEXT_LIMIT)),
            Text(shorten(m.mapped, TEXT_LIMIT)),
            str(m.a_ops),
            str(m.b_ops),
        )
    if len(ranked) > top:
        table.add_row(f"(+{len(ranked) - top} more: --json)", "", "", "", "")
    return table
