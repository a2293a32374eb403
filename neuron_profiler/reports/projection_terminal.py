"""``neuron-prof project`` in the terminal (rich): source and projected step with its range, the
replay check, per-class times, the ops that decide the result, the fallbacks the target adds and
every assumption::

    render_projection(p, console=Console(width=report_width(Console())))

It formats an ``analysis.projection.Projection`` and computes nothing. Trace text goes in as
rich ``Text`` (never parsed as markup), shortened and escaped by ``reports.text.shorten``.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from neuron_profiler.analysis.projection import OpRow, Projection
from neuron_profiler.reports.text import NAME_LIMIT, TEXT_LIMIT, shorten, signed

SLOWER, FASTER = "red", "green"


def render_projection(p: Projection, *, console: Console) -> None:
    console.rule(characters="=")
    console.print(
        Text.assemble(
            ("source ", "bold"),
            f"{p.source.chip}: mean step {_ms(p.source.step_ms)} ms over {p.steps} step"
            f"{'s' * (p.steps != 1)} · replayed on its dependencies {_ms(p.replay_ms)} ms "
            f"({signed(p.replay_error_pct, '+.2f')}%)",
        )
    )
    console.print(
        Text.assemble(
            ("target ", "bold"),
            f"{p.target.chip}: projected step ",
            _delta(p.target.step_ms, p.source.step_ms),
            f" ms (range {_ms(p.target.low_ms)}-{_ms(p.target.high_ms)} ms) · "
            f"{p.priced} of {p.items} device items priced from recorded shapes",
        )
    )
    console.print(_classes(p))
    if p.ops:
        console.print(_ops("ops that decide the result (per step)", p.ops))
    if p.fallbacks:
        console.print(_ops("ops the target runs on the host (per step)", p.fallbacks))
    if p.what_if:
        console.print(_what_if(p))
    console.print(Text("assumptions", style="bold"))
    for a in p.assumptions:
        console.print(Text(f"- {shorten(a, TEXT_LIMIT)}"))


def _ms(ms: float) -> str:
    return f"{ms:,.3f}" if abs(ms) < 100 else f"{ms:,.1f}"


def _delta(target: float, source: float) -> Text:
    style = SLOWER if target > source else FASTER if target < source else ""
    return Text(_ms(target), style=style)


def _classes(p: Projection) -> Table:
    t = Table(title="per step, by class (memory_bound: the part of compute bound by memory)")
    for col in ("class", "source ms", "target ms"):
        t.add_column(col, justify="left" if col == "class" else "right")
    for c in p.classes:
        t.add_row(c.cls, _ms(c.source_ms), _delta(c.target_ms, c.source_ms))
    return t


def _what_if(p: Projection) -> Table:
    t = Table(title=f"what if (each edit alone, on {p.target.chip})")
    for col in ("edit", "step ms", "Δ ms"):
        t.add_column(col, justify="left" if col == "edit" else "right")
    for w in p.what_if:
        style = SLOWER if w.delta_ms > 0 else FASTER if w.delta_ms < 0 else ""
        t.add_row(
            Text(shorten(w.edit)),
            _ms(w.step_ms),
            Text(f"{signed(w.delta_ms, '+,.3f')}", style=style),
        )
    return t


def _ops(title: str, rows: tuple[OpRow, ...]) -> Table:
    t = Table(title=title)
    for col in ("op", "class", "count", "source ms", "target ms"):
        t.add_column(col, justify="left" if col in ("op", "class") else "right")
    for o in rows:
        t.add_row(
            Text(shorten(o.name, NAME_LIMIT)),  # (plain text: a name is never markup)
            o.cls,
            str(o.count),
            _ms(o.source_ms),
            _delta(o.target_ms, o.source_ms),
        )
    return t
