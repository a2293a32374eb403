"""``neuron-prof project --html FILE``: one self-contained page (plotly.js inlined, nothing
fetched) with the source and projected step, the per-class chart (source vs target), the ops
that decide the result, the fallbacks, the what-if edits and every assumption::

    write_projection_html(p, Path("projection.html"))

It formats an ``analysis.projection.Projection`` and computes nothing; the page's machinery
(the inlined plotly.js, escaping, the figure blocks and their boot script) is the analyzer
report's (``reports.html_report``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neuron_profiler.analysis.projection import OpRow, Projection
from neuron_profiler.reports.html_report import BOOT, STYLE, _e, _figure, _table, plotly_js
from neuron_profiler.reports.text import NAME_LIMIT, TEXT_LIMIT, shorten, signed

SOURCE_COLOUR, TARGET_COLOUR = "#7f7f7f", "#1f77b4"
OP_HEADERS = ("op", "class", "count", "source ms", "target ms")


def write_projection_html(p: Projection, path: Path) -> None:
    """Write the page atomically (a failed write leaves an existing file as it was)."""
    from neuron_profiler.output import atomic_output

    page = render_projection_html(p).encode("utf-8")
    with atomic_output(path) as out:
        out.write(page)


def render_projection_html(p: Projection) -> str:
    from neuron_profiler import __version__

    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>neuron-prof project: {_e(p.source.chip)} → {_e(p.target.chip)}</title>"
        f"<style>{STYLE}</style>\n<script>{plotly_js()}</script></head><body>"
        f"<h1>neuron-prof project</h1><p>neuron-profiler {_e(__version__)}; per step, times in "
        "ms (means over the steps used). Definitions: docs/projection.md.</p>"
        f"{_summary(p)}<h2>By class</h2>{_figure('classes', _classes_figure(p))}"
        f"{_table(('class', 'source ms', 'target ms'), _class_rows(p), numeric=(1, 2))}"
        f"<h2>Ops that decide the result</h2>{_ops(p.ops)}"
        f"<h2>Ops the target runs on the host</h2>{_ops(p.fallbacks)}"
        f"{_what_if(p)}<h2>Assumptions</h2><ul>"
        + "".join(f"<li>{_e(shorten(a, TEXT_LIMIT))}</li>" for a in p.assumptions)
        + f"</ul><script>{BOOT}</script></body></html>\n"
    )


def _summary(p: Projection) -> str:
    rows = [
        ("source", p.source.chip, f"{p.source.step_ms:.3f}", "recorded mean step"),
        (
            "replay",
            p.source.chip,
            f"{p.replay_ms:.3f}",
            f"recorded durations on the rebuilt dependencies ({signed(p.replay_error_pct, '+.2f')}%)",
        ),
        (
            "target",
            p.target.chip,
            f"{p.target.step_ms:.3f}",
            f"range {p.target.low_ms:.3f}-{p.target.high_ms:.3f} ms; {p.priced} of {p.items} "
            "device items priced from recorded shapes",
        ),
    ]
    return _table(("", "chip", "step ms", "note"), rows, numeric=(2,))


def _class_rows(p: Projection) -> list[tuple[str, str, str]]:
    return [(c.cls, f"{c.source_ms:.3f}", f"{c.target_ms:.3f}") for c in p.classes]


def _classes_figure(p: Projection) -> dict[str, Any]:
    names = [c.cls for c in p.classes]
    return {
        "data": [
            {
                "type": "bar",
                "name": f"{side} ({chip})",
                "x": names,
                "y": [getattr(c, f"{side}_ms") for c in p.classes],
                "marker": {"color": colour},
            }
            for side, chip, colour in (
                ("source", _e(p.source.chip), SOURCE_COLOUR),
                ("target", _e(p.target.chip), TARGET_COLOUR),
            )
        ],
        "layout": {
            "barmode": "group",
            "yaxis": {"title": {"text": "ms per step"}},
            "height": 360,
            "margin": {"t": 20},
        },
    }


def _ops(rows: tuple[OpRow, ...]) -> str:
    if not rows:
        return '<p class="empty">none</p>'
    body = [
        (
            shorten(o.name, NAME_LIMIT),
            o.cls,
            str(o.count),
            f"{o.source_ms:.3f}",
            f"{o.target_ms:.3f}",
        )
        for o in rows
    ]
    return _table(OP_HEADERS, body, numeric=(2, 3, 4))


def _what_if(p: Projection) -> str:
    if not p.what_if:
        return ""
    rows = [(w.edit, f"{w.step_ms:.3f}", f"{signed(w.delta_ms, '+.3f')}") for w in p.what_if]
    return "<h2>What if</h2>" + _table(("edit", "step ms", "Δ ms"), rows, numeric=(1, 2))
