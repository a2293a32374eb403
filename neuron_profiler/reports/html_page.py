"""The parts every self-contained HTML page of the package shares (the analyzer's report,
the diff's): plotly.js inlined with no network location in it, text escaped for the page and
for the figures' JSON, a chart as a figure embedded as JSON and drawn by one boot script,
tables, and the page's style. So a trace's text can never become markup or close a script
block, whichever page shows it::

    figure("chart-0", {"data": [...], "layout": {...}})    # a <div> and its JSON
    table(("row", "ms"), [("aten::mm", "1.0")], numeric=(1,))
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from typing import Any

from neuron_profiler.reports.text import NAME_LIMIT, shorten

# plotly.js spells two CDN URLs (geo maps' topojson, map icons): traces this page never draws.
# They are replaced so that nothing in the page names a network location.
CDN_PREFIX = "https://cdn"
OFFLINE_PREFIX = "data:,offline-cdn"
JSON_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
BOOT = """
document.querySelectorAll("script.figure").forEach(function (s) {
  var fig = JSON.parse(s.textContent);
  Plotly.newPlot(s.dataset.target, fig.data, fig.layout, {responsive: true, displaylogo: false});
});
"""
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.empty { color: #666; font-style: italic; }
.note { color: #8a6d00; }
section.trace { border-top: 3px solid #444; margin-top: 2em; }
"""


def plotly_js() -> str:
    """plotly.js from the installed plotly package (never the network), safe inside a
    ``<script>`` block."""
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs().replace(CDN_PREFIX, OFFLINE_PREFIX)
    return re.sub(r"</(script)", r"<\\/\1", js, flags=re.IGNORECASE)


def escape(text: object) -> str:
    return html.escape(str(text), quote=True)


def name_text(text: str, limit: int = NAME_LIMIT) -> str:
    """A text from the trace, shortened (``reports.text.shorten``) and escaped."""
    return escape(shorten(text, limit))


def figure_json(obj: Any) -> str:
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False)
    return re.sub("[<>&\u2028\u2029]", lambda m: JSON_ESCAPES[m.group(0)], text)


def figure(tag: str, data: dict[str, Any]) -> str:
    return (
        f'<div id="{tag}" class="chart"></div><script type="application/json" '
        f'class="figure" id="{tag}-data" data-target="{tag}">{figure_json(data)}</script>'
    )


def empty(message: str) -> str:
    return f'<p class="empty">{escape(message)}</p>'


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    numeric: Sequence[int] = (),
) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="n">{escape(v)}</td>' if j in numeric else f"<td>{escape(v)}</td>"
            for j, v in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
