"""The HTML report in a real browser (headless Chromium: scripts/browser.sh installs it in CI;
elsewhere the test skips without it), with name resolution blocked: every chart is drawn, so
nothing needed the network, and no trace text became markup."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from html_checks import html_report, parse, two_core_trace

from neuron_profiler.reports.html_report import write_html

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def test_charts_draw_offline_and_names_stay_text(tmp_path: Path) -> None:
    browser = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser is None:
        reason = f"no headless browser ({', '.join(BROWSERS)}) installed (scripts/browser.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    page = tmp_path / "report.html"
    write_html([html_report(two_core_trace())], page)
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=10000",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert dom.count('class="plot-container plotly"') == 3, dom[-2000:]
    tags = parse(dom).tags  # the document after the scripts ran
    assert not [t for t, attrs in tags if t == "img" or "onerror" in attrs]
    assert sum(t == "script" for t, _ in tags) == 5  # plotly.js, 3 figures, the boot script


def test_cross_rank_waits_chart_draws(tmp_path: Path) -> None:
    """A page with the cross-rank section (three synthetic ranks): its waits chart is drawn
    offline too, and the straggler is named in the page."""
    from rank_traces import MS, rank_trace

    from neuron_profiler.analysis.distributed import distributed
    from neuron_profiler.analysis.report import analyze, summaries_of
    from neuron_profiler.trace import load_trace

    browser = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser is None:
        reason = f"no headless browser ({', '.join(BROWSERS)}) installed (scripts/browser.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    compute = {0: 5 * MS, 1: 12 * MS, 2: 5 * MS}
    reports = [
        analyze(load_trace(rank_trace(tmp_path / f"r{r}.json", r, compute, world=3)))
        for r in compute
    ]
    page = tmp_path / "ranks.html"
    write_html(reports, page, cross=distributed(summaries_of(reports)))
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=10000",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    tags = parse(dom).tags
    waits = [a for t, a in tags if t == "div" and a.get("id") == "chart-multi-rank-0-waits"]
    assert waits and "js-plotly-plot" in (waits[0].get("class") or ""), dom[-2000:]
    assert "straggler: rank 1" in dom


def test_diff_page_draws_offline_and_names_stay_text(tmp_path: Path) -> None:
    """``diff --html``: each pair's waterfall is drawn offline (two pairs: two charts), and an
    op named as markup stays text."""
    from diff_timeline import BASE, Op, build
    from html_checks import HOSTILE

    from neuron_profiler.analysis.diff import diff
    from neuron_profiler.reports.diff_html import write_diff_html

    browser = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser is None:
        reason = f"no headless browser ({', '.join(BROWSERS)}) installed (scripts/browser.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    a = build(BASE)[0]
    b = build([*BASE[:2], Op(HOSTILE, 10, 40), *BASE[2:]])[0]
    page = tmp_path / "diff.html"
    write_diff_html([diff(a, b), diff(b, a)], page)
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=10000",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert dom.count('class="plot-container plotly"') == 2, dom[-2000:]
    tags = parse(dom).tags
    assert not [t for t, attrs in tags if t == "img" or "onerror" in attrs]
    for i in (0, 1):
        chart = [a for t, a in tags if t == "div" and a.get("id") == f"chart-{i}-waterfall"]
        assert chart and "js-plotly-plot" in (chart[0].get("class") or "")
