"""``neuron-prof diff --html FILE``: one self-contained page (plotly.js inlined, nothing fetched)
holding, per pair of traces compared, a waterfall from A's mean step through each row's Δ and
the residual to B's mean step, the ranked rows, the analyzer's idle causes compared and the
name mappings used::

    write_diff_html([d], Path("diff.html"), top=25)
    page = render_diff_html([d])

It formats ``analysis.diff.TraceDiff`` objects and computes nothing: every figure is a field of
the diff (the rows ``TraceDiff.folded`` shows, ``Row.delta_parts_ms``, ``TraceDiff.pct_of_a``).
The page's parts (escaping, embedded figures, tables, the offline plotly.js) are the
analyzer's page's (``reports.html_page``), so no trace text can become markup. With rank
directories each pair is a section, after a table of the pairs and how they were paired.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from neuron_profiler.analysis.diff import (
    BY_OP,
    COMPONENTS,
    DISPLAY_ROWS,
    GROUPING_TEXT,
    Row,
    TraceDiff,
)
from neuron_profiler.analysis.rank_pairs import BY_FILES, RankPairs
from neuron_profiler.reports.html_page import (
    BOOT,
    STYLE,
    empty,
    escape,
    figure,
    name_text,
    plotly_js,
    table,
)
from neuron_profiler.reports.text import NAME_LIMIT, TEXT_LIMIT, mib, shorten, signed

SLOWER, FASTER, TOTAL = "#d62728", "#2ca02c", "#7f7f7f"  # the terminal's red / green
PART_SHOWN_MS = 5e-4  # a part's Δ under this is left out of "Δ by part" (as in the terminal)
BAR_HEIGHT_PX = 26  # the waterfall's height per bar
RESIDUAL = "residual (what no row explains)"
PAGE_STYLE = STYLE + ".source { overflow-wrap: anywhere; font-family: monospace; }\n"


def write_diff_html(
    diffs: Sequence[TraceDiff],
    path: Path,
    top: int = DISPLAY_ROWS,
    pairing: RankPairs | None = None,
) -> None:
    """Write the page atomically (a failed write leaves an existing file as it was)."""
    from neuron_profiler.output import atomic_output

    page = render_diff_html(diffs, top, pairing).encode("utf-8")
    with atomic_output(path) as out:
        out.write(page)


def render_diff_html(
    diffs: Sequence[TraceDiff], top: int = DISPLAY_ROWS, pairing: RankPairs | None = None
) -> str:
    """``pairing``: how the traces of rank directories were paired (its table comes first)."""
    from neuron_profiler import __version__

    n = len(diffs)
    pairing = pairing or RankPairs((), BY_FILES, (None,) * n)
    body = (_pairs(diffs, pairing) if pairing.by != BY_FILES else "") + "".join(
        _section(i, d, top) for i, d in enumerate(diffs)
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>neuron-prof diff: {n} pair{'s' * (n != 1)}</title>"
        f"<style>{PAGE_STYLE}</style>\n<script>{plotly_js()}</script></head><body>"
        f"<h1>neuron-prof diff</h1><p>neuron-profiler {escape(__version__)}: where the mean "
        "step time changed between trace A and trace B, in ms per step (means over the steps "
        "compared). The rows add up to the change: Σ rows' Δ + residual = Δ mean step. "
        "Alignment, attribution and the name map: docs/diff.md.</p>"
        f"{body}<script>{BOOT}</script></body></html>\n"
    )


def _pairs(diffs: Sequence[TraceDiff], pairing: RankPairs) -> str:
    rows = [
        (
            i,
            "-" if rank is None else rank,
            d.a.source,
            d.b.source,
            _ms(d.a.step_ms),
            _ms(d.b.step_ms),
            _signed(d.delta_ms),
        )
        for i, (d, rank) in enumerate(zip(diffs, pairing.ranks, strict=True))
    ]
    how = f"Paired by {pairing.by}" + (f": {pairing.note}" if pairing.note else "") + "."
    return f"<h2>Pairs compared</h2><p>{name_text(how, TEXT_LIMIT)}</p>" + table(
        ("#", "rank", "A", "B", "A ms", "B ms", "Δ ms"), rows, numeric=(0, 1, 4, 5, 6)
    )


def _section(i: int, d: TraceDiff, top: int) -> str:
    rows = d.folded(top=top)
    n = len(d.a.steps)
    notes = "".join(f'<li class="note">note: {name_text(x, TEXT_LIMIT)}</li>' for x in d.notes)
    return (
        f'<section class="trace" id="pair-{i}">'
        f'<h2>Pair {i}</h2><p class="source">A {name_text(d.a.source)}<br>'
        f"B {name_text(d.b.source)}</p>"
        f"<p>{n} step{'s' * (n != 1)} compared by {escape(d.steps_by)} · mean step "
        f"{_ms(d.a.step_ms)} ms → {_ms(d.b.step_ms)} ms · Δ {_signed(d.delta_ms)} ms "
        f"({signed(d.delta_pct, '+.1f') + '%' if d.a.step_ms else 'A has no step time'}) · "
        f"residual {signed(d.residual_ms, '+.6f')} ms"
        + "</p>"
        + (
            f"<p>Rows by {escape(d.group_by)}: {escape(GROUPING_TEXT[d.group_by])}.</p>"
            if d.group_by != BY_OP
            else ""
        )
        + (f"<ul>{notes}</ul>" if notes else "")
        + "<h3>Waterfall: from A's mean step to B's</h3>"
        + _waterfall(i, d, rows)
        + "<h3>Where the time went (largest |Δ| first)</h3>"
        + _rows(d, rows)
        + "<h3>Device idle by cause (the analyzer's; every gap, gated or not)</h3>"
        + _idle(d)
        + "<h3>Name mappings used</h3>"
        + _mappings(d)
        + _memory(d)
        + "</section>"
    )


def _labels(rows: Sequence[Row]) -> list[str]:
    """One category per bar, numbered as the table's rows (two shortened keys stay two bars)."""
    return [f"{k}. {shorten(r.key, NAME_LIMIT)}" for k, r in enumerate(rows, 1)]


def _waterfall(i: int, d: TraceDiff, rows: Sequence[Row]) -> str:
    labels = ["A: mean step", *_labels(rows), RESIDUAL, "B: mean step"]
    values = [d.a.step_ms, *(r.delta_ms for r in rows), d.residual_ms, d.b.step_ms]
    data = {
        "type": "waterfall",
        "orientation": "h",
        "name": "ms per step",
        "y": [escape(label) for label in labels],
        "x": values,
        "measure": ["absolute", *["relative"] * (len(rows) + 1), "total"],
        "meta": "waterfall",
        "increasing": {"marker": {"color": SLOWER}},
        "decreasing": {"marker": {"color": FASTER}},
        "totals": {"marker": {"color": TOTAL}},
        "connector": {"line": {"color": "#999", "width": 1}},
        "hovertemplate": "%{y}: %{x:+,.3f} ms<extra></extra>",
    }
    layout = {
        "height": 120 + BAR_HEIGHT_PX * len(labels),
        "margin": {"t": 20, "l": 20},
        "yaxis": {"autorange": "reversed", "automargin": True, "type": "category"},
        "xaxis": {"title": {"text": "ms per step"}},
        "showlegend": False,
    }
    caption = (
        "A's mean step, each row's Δ (red: B slower, green: B faster), the residual, and B's "
        "mean step, which the bars reach. Rows past the table's last are one 'other' row."
    )
    return f"<p>{caption}</p>" + figure(f"chart-{i}-waterfall", {"data": [data], "layout": layout})


def _rows(d: TraceDiff, rows: Sequence[Row]) -> str:
    if not rows:
        return empty("No rows: neither trace has time in the compared steps.")
    body = [
        (
            k,
            shorten(r.key, TEXT_LIMIT),
            r.kind,
            _ms(r.a_ms),
            _ms(r.b_ms),
            _signed(r.delta_ms),
            f"{signed(d.pct_of_a(r.delta_ms), '+.1f')}" if d.a.step_ms else "-",
            ", ".join(
                f"{c} {signed(x, '+.3f')}"
                for c, x in zip(COMPONENTS, r.delta_parts_ms, strict=True)
                if abs(x) >= PART_SHOWN_MS
            ),
            f"{r.a_ops:g} → {r.b_ops:g}" if r.a_ops or r.b_ops else "",
            "; ".join(shorten(n, TEXT_LIMIT) for n in r.notes),
        )
        for k, r in enumerate(rows, 1)
    ]
    return table(
        (
            "#",
            "row",
            "kind",
            "A ms",
            "B ms",
            "Δ ms",
            "Δ % of A",
            "Δ by part",
            "ops per step",
            "notes",
        ),
        body,
        numeric=(0, 3, 4, 5, 6),
    )


def _idle(d: TraceDiff) -> str:
    if not d.idle:
        return empty("No device idle time on either side (or no device: host-only traces).")
    rows = [(c.cause, _ms(c.a_ms), _ms(c.b_ms), _signed(c.delta_ms)) for c in d.idle]
    return table(("cause", "A ms", "B ms", "Δ ms"), rows, numeric=(1, 2, 3))


def _memory(d: TraceDiff) -> str:
    """The device memory peaks of both runs; no section when neither recorded memory."""
    if not d.memory:
        return ""

    rows = [
        (
            shorten(m.device),
            mib(m.a_bytes, missing="-"),
            mib(m.b_bytes, missing="-"),
            mib(m.delta_bytes, signed=True, missing="-"),
            mib(m.a_held_bytes, missing="-"),
            mib(m.b_held_bytes, missing="-"),
        )
        for m in d.memory
    ]
    return "<h3>Device memory peaks (docs/analysis.md#memory)</h3>" + table(
        ("device", "A MiB", "B MiB", "Δ MiB", "A held MiB", "B held MiB"),
        rows,
        numeric=(1, 2, 3, 4, 5),
    )


def _mappings(d: TraceDiff) -> str:
    if not d.mappings:
        return empty("No name-map rule changed an op name of the compared steps.")
    rows = [
        (m.rule, shorten(m.raw, TEXT_LIMIT), shorten(m.mapped, TEXT_LIMIT), m.a_ops, m.b_ops)
        for m in sorted(d.mappings, key=lambda m: -m.ops)
    ]
    return table(("rule", "from", "to", "A ops", "B ops"), rows, numeric=(3, 4))


def _ms(ms: float) -> str:
    return f"{ms:,.3f}"


def _signed(ms: float) -> str:
    return signed(ms, "+,.3f")
