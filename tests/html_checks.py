"""Reading an HTML report back as a browser would: its scripts, its embedded figures, its tables
and every tag, with Python's own HTML parser (independent of the renderer); checks that its
charts hold a report's numbers; and a small two-core trace with fallbacks and hostile names."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from trace_factory import Build

from neuron_profiler.analysis import Options, Report, analyze
from neuron_profiler.trace import EventKind
from neuron_profiler.trace import vocabulary as V

HOSTILE = "<img src=x onerror=alert(1)>"
HOSTILE_CORE = "NeuronCore </script><script>alert(2)</script>"
LOADER = V.DATALOADER_PREFIX + "_SingleProcessDataLoaderIter" + V.DATALOADER_SUFFIX


def _fallback(b: Build, op: str, lo: int, hi: int, ext: int) -> None:
    b.host(
        V.FALLBACK_PREFIX + op,
        lo,
        hi,
        kind=EventKind.FALLBACK,
        cat=V.CAT_RUNTIME,
        args={
            V.ARG_EXTERNAL_ID: ext,
            V.ARG_IS_FALLBACK: True,
            V.ARG_OP: op,
            V.ARG_SHAPES: [[8]],
            V.ARG_DTYPES: ["int64"],
            V.ARG_FALLBACK_REASON: HOSTILE,
        },
    )


def _copy(b: Build, lo: int, hi: int, direction: str, ext: int) -> None:
    b.kernel(
        lo,
        hi,
        launch_us=lo,
        kind=EventKind.MEMCPY,
        stream=2,
        name=V.MEMCPY_NAMES[direction],
        args={V.ARG_EXTERNAL_ID: ext, V.ARG_DIRECTION: direction, V.ARG_BYTES: 4000},
    )


def two_core_trace() -> Build:
    """Steps 0-1000 and 1000-2000 µs. Core 0: a fallback named HOSTILE (host 100-400, copies
    100-120 and 380-400: 260 µs idle), then aten::nonzero (host 1300-1350, copy 1300-1310) inside
    a DataLoader stall 1300-1700. Core 1 (named HOSTILE_CORE): compute 0-600, a collective
    500-800, a copy 750-900, then idle to the end."""
    b = Build().step(1, 0, 1000).step(2, 1000, 2000)
    b.b.process_names[1] = HOSTILE_CORE
    b.kernel(0, 100, launch_us=0)
    _fallback(b, HOSTILE, 100, 400, 5)
    _copy(b, 100, 120, "d2h", 5)
    _copy(b, 380, 400, "h2d", 5)
    b.kernel(400, 1000, launch_us=390)
    b.kernel(1000, 1300, launch_us=1000)
    b.host(LOADER, 1300, 1700)
    _fallback(b, "aten::nonzero", 1300, 1350, 6)
    _copy(b, 1300, 1310, "d2h", 6)
    b.kernel(1700, 2000, launch_us=1700)
    b.kernel(0, 600, device=1, launch_us=0)
    b.kernel(500, 800, device=1, launch_us=0, name=f"{V.COLLECTIVE_ENGINE}: all_reduce", stream=3)
    b.kernel(
        750, 900, device=1, launch_us=0, kind=EventKind.MEMCPY, stream=2, name=V.MEMCPY_NAMES["d2d"]
    )
    return b


HTML_OPTIONS = Options(top=50, timeline_segments=2000)  # what `analyze --html` computes


def html_report(b: Build) -> Report:
    return analyze(b.b.build(), HTML_OPTIONS)


URL = re.compile(r"^\s*(https?:)?//", re.IGNORECASE)


@dataclass
class Page:
    scripts: list[tuple[dict[str, str | None], str]] = field(default_factory=list)
    tags: list[tuple[str, dict[str, str | None]]] = field(default_factory=list)
    tables: list[list[list[str]]] = field(default_factory=list)
    text: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, dict[str, Any]]:
        """Embedded figures by the id of the chart they draw."""
        return {
            str(a["data-target"]): json.loads(body)
            for a, body in self.scripts
            if a.get("type") == "application/json" and "figure" in (a.get("class") or "")
        }

    def table_after(self, header: tuple[str, ...]) -> list[list[str]]:
        """Rows (as text) of every table whose header row is ``header``, concatenated."""
        out = []
        for t in self.tables:
            if tuple(t[0]) == header:
                out += t[1:]
        return out


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self._script: dict[str, str | None] | None = None
        self._body: list[str] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.page.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._script, self._body = dict(attrs), []
        elif tag == "table":
            self.page.tables.append([])
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._script is not None:
            self.page.scripts.append((self._script, "".join(self._body)))
            self._script = None
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.page.tables[-1].append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self._body.append(data)
            return
        if self._cell is not None:
            self._cell.append(data)
        self.page.text.append(data)


def parse(html: str) -> Page:
    p = _Parser()
    p.feed(html)
    p.close()
    return p.page


def assert_offline(page: Page) -> None:
    """No script, stylesheet, image or frame names a network location, and no script body
    spells a CDN URL."""
    assert page.scripts, "no script at all"
    for attrs, body in page.scripts:
        assert not URL.match(attrs.get("src") or ""), attrs
        assert "https://cdn" not in body and "http://cdn" not in body
    for tag, attrs in page.tags:
        for key in ("src", "href"):
            value = attrs.get(key) or ""
            assert not URL.match(value), (tag, attrs)


def assert_matches_report(page: Page, report: Any, i: int = 0) -> None:
    """The charts of section ``i`` hold the report's numbers: the breakdown's series per step
    and device (bars adding up to the wall time), every gap counted per device and cause in the
    timeline, and the fallback Pareto (or the empty-state message when there is none)."""
    import numpy as np

    from neuron_profiler.analysis.causes import ALL_CAUSES

    figures = page.figures()
    b = report.breakdown
    if b.devices:
        series = {t["meta"]: t for t in figures[f"chart-{i}-breakdown"]["data"]}
        idle = {d.device: d for d in report.idle.devices}
        for key in ("compute_ns", "collective_only_ns", "dma_only_ns"):
            want = [int(v) for d in b.devices for v in getattr(d, key)]
            assert [round(v * 1e6) for v in series[key]["y"]] == want, key
        for cause in ALL_CAUSES:
            want = [s[cause] for d in b.devices for s in idle[d.device].per_step_by_cause_ns]
            got = series.get(f"idle:{cause}")
            assert (got is None and not any(want)) or [round(v * 1e6) for v in got["y"]] == want, (
                cause
            )
        stack = np.sum([t["y"] for t in series.values() if t["type"] == "bar"], axis=0)
        assert np.allclose(stack * 1e6, np.tile(b.wall_ns, len(b.devices)), atol=1)
    gaps = report.idle
    timeline = figures.get(f"chart-{i}-timeline", {"data": []})["data"]
    for d in gaps.devices:
        mine = gaps.gap_device == d.device
        want = np.bincount(gaps.gap_cause[mine], minlength=len(ALL_CAUSES))
        got = np.zeros(len(ALL_CAUSES), np.int64)
        for t in (t for t in timeline if t["meta"]["device"] == d.device):
            cause = t["meta"]["cause"]
            got[ALL_CAUSES.index(cause)] += t["meta"]["gaps"]
            # bars as long as the idle time they hold: the gaps, or each bin's share
            assert abs(sum(t["x"]) * 1e3 - d.by_cause_ns[cause]) <= 1, (d.device, cause)
            if t["meta"]["exact"]:  # one bar per gap, the whole gap
                assert len(t["x"]) == t["meta"]["intervals"] and t["x"] == [
                    n for _, n in t["customdata"]
                ]
        assert got.tolist() == want.tolist(), d.device
    groups = sorted(report.findings.fallbacks, key=lambda g: -g.recoverable_ns)
    if not groups:
        assert f"chart-{i}-pareto" not in figures
        return
    bars, line = figures[f"chart-{i}-pareto"]["data"]
    assert [round(v * 1e6) for v in bars["y"]] == [g.recoverable_ns for g in groups]
    total = sum(g.recoverable_ns for g in groups)
    running = np.cumsum([g.recoverable_ns for g in groups])
    assert np.allclose(line["y"], 100 * running / total if total else 0 * running)
