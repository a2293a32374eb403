"""The HTML report in a real browser (headless Chromium: scripts/browser.sh installs it in CI;
elsewhere the test skips without it), with name resolution blocked: every chart is drawn, so
nothing needed the network, and no trace text became markup.

The three pages are drawn by three browsers at once (``drawn``): most of a browser's 3 s is
its start-up, waiting rather than computing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from html_checks import html_report, parse, two_core_trace

from neuron_profiler.reports.html_report import write_html

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
TIMEOUT_S = 120


def _browser() -> str:
    browser = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser is None:
        reason = f"no headless browser ({', '.join(BROWSERS)}) installed (scripts/browser.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return browser


def _report_page(folder: Path) -> Path:
    page = folder / "report.html"
    write_html([html_report(two_core_trace())], page)
    return page


def _ranks_page(folder: Path) -> Path:
    """A page with the cross-rank section (three synthetic ranks, rank 1 computing longest)."""
    from rank_traces import MS, rank_trace

    from neuron_profiler.analysis.distributed import distributed
    from neuron_profiler.analysis.report import analyze, summaries_of
    from neuron_profiler.trace import load_trace

    compute = {0: 5 * MS, 1: 12 * MS, 2: 5 * MS}
    reports = [
        analyze(load_trace(rank_trace(folder / f"r{r}.json", r, compute, world=3))) for r in compute
    ]
    page = folder / "ranks.html"
    write_html(reports, page, cross=distributed(summaries_of(reports)))
    return page


def _diff_page(folder: Path) -> Path:
    """``diff --html`` of two pairs (A->B, B->A), B with an op named as markup."""
    from diff_timeline import BASE, Op, build
    from html_checks import HOSTILE

    from neuron_profiler.analysis.diff import diff
    from neuron_profiler.reports.diff_html import write_diff_html

    a = build(BASE)[0]
    b = build([*BASE[:2], Op(HOSTILE, 10, 40), *BASE[2:]])[0]
    page = folder / "diff.html"
    write_diff_html([diff(a, b), diff(b, a)], page)
    return page


PAGES = {"report": _report_page, "ranks": _ranks_page, "diff": _diff_page}


@pytest.fixture(scope="module")
def drawn(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each page's document after its scripts ran (``--dump-dom``), offline, by name."""
    browser = _browser()
    folder = tmp_path_factory.mktemp("html_browser")
    procs = {}
    for name, make in PAGES.items():
        procs[name] = subprocess.Popen(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--virtual-time-budget=10000",
                "--host-resolver-rules=MAP * ~NOTFOUND",
                f"--user-data-dir={folder / f'profile-{name}'}",
                "--dump-dom",
                make(folder).as_uri(),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
    try:
        return {name: proc.communicate(timeout=TIMEOUT_S)[0] for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_charts_draw_offline_and_names_stay_text(drawn: dict[str, str]) -> None:
    dom = drawn["report"]
    assert dom.count('class="plot-container plotly"') == 3, dom[-2000:]
    tags = parse(dom).tags  # the document after the scripts ran
    assert not [t for t, attrs in tags if t == "img" or "onerror" in attrs]
    assert sum(t == "script" for t, _ in tags) == 5  # plotly.js, 3 figures, the boot script


def test_cross_rank_waits_chart_draws(drawn: dict[str, str]) -> None:
    """A page with the cross-rank section (three synthetic ranks): its waits chart is drawn
    offline too, and the straggler is named in the page."""
    dom = drawn["ranks"]
    tags = parse(dom).tags
    waits = [a for t, a in tags if t == "div" and a.get("id") == "chart-multi-rank-0-waits"]
    assert waits and "js-plotly-plot" in (waits[0].get("class") or ""), dom[-2000:]
    assert "straggler: rank 1" in dom


def test_diff_page_draws_offline_and_names_stay_text(drawn: dict[str, str]) -> None:
    """``diff --html``: each pair's waterfall is drawn offline (two pairs: two charts), and an
    op named as markup stays text."""
    dom = drawn["diff"]
    assert dom.count('class="plot-container plotly"') == 2, dom[-2000:]
    tags = parse(dom).tags
    assert not [t for t, attrs in tags if t == "img" or "onerror" in attrs]
    for i in (0, 1):
        chart = [a for t, a in tags if t == "div" and a.get("id") == f"chart-{i}-waterfall"]
        assert chart and "js-plotly-plot" in (chart[0].get("class") or "")
