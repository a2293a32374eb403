"""``neuron-prof analyze DIR --html``: the page of a rank directory ends with the cross-rank
section, whose figures are the injected truth (synthetic ranks: rank 1 computes 7 ms longer
before each all_reduce; clocks shifted by known offsets): the straggler, what it costs each
waiting rank per step, what it did before arriving, the per-rank table per step, the waits
chart, the collective table. A single trace without a rank gets no such section, an
unavailable analysis over several traces says why, and a rank directory named with HTML stays
text."""

from __future__ import annotations

from pathlib import Path

from html_checks import HOSTILE, assert_offline, parse
from rank_traces import MS, rank_trace

from neuron_profiler.analysis.distributed import REASON_NO_RANK
from neuron_profiler.cli.main import main

COMPUTE = {0: 5 * MS, 1: 12 * MS, 2: 5 * MS}  # rank 1: 7 ms more compute before each all_reduce
SHIFTS = {0: 0, 1: 3 * MS, 2: -2 * MS}  # each rank's clock
EXTRA_MS = 7.0
STEPS = 3


def _rank_dir(root: Path, name: str = "ranks") -> Path:
    folder = root / name
    folder.mkdir()
    for r in COMPUTE:
        rank_trace(folder / f"rank{r}.json", r, COMPUTE, shift_ns=SHIFTS[r], world=3)
    return folder


def _html(args: list[str], out: Path) -> tuple[int, str]:
    code = main(["analyze", *args, "--json", "--html", str(out)])
    return code, out.read_text()


def _section(html: str) -> str:
    return html[html.index('<section class="trace" id="multi-rank">') :]


def test_rank_directory_page_has_the_cross_rank_section(tmp_path: Path) -> None:
    folder = _rank_dir(tmp_path)
    code, html = _html([str(folder)], tmp_path / "out.html")
    assert code == 0
    page = parse(html)
    assert_offline(page)
    assert '<a href="#multi-rank">Multi-rank</a>' in html
    section = parse(_section(html))
    text = " ".join(section.text)
    assert "straggler: rank 1" in text and "last at 3 of 3 collectives" in text
    assert f"costs the ranks waiting for it {EXTRA_MS:.3f} ms per step" in text
    # what it costs each waiting rank, per step (one all_reduce per step)
    assert section.table_after(("rank waiting", "its wait for this rank, ms/step")) == [
        ["0", f"{EXTRA_MS:.3f}"],
        ["2", f"{EXTRA_MS:.3f}"],
    ]
    # before arriving: 12 ms of compute against the others' 5 ms
    before = section.table_after(
        (
            "before its late arrivals",
            "rank 1 ms (per late arrival)",
            "the others ms (before the same collectives)",
            "extra ms",
        )
    )
    assert before[0] == ["compute", "12.000", "5.000", f"{EXTRA_MS:.3f}"]
    # the per-rank table: every time per step, the clocks recovered
    header = (
        "rank",
        "trace",
        "steps",
        "step ms",
        "compute ms/step",
        "collective ms/step",
        "compute before collectives ms/step",
        "late arrivals / collectives",
        "recorded wait ms/step",
        "skew wait ms/step",
        "clock offset µs",
    )
    rows = {row[0]: row for row in section.table_after(header)}
    assert sorted(rows) == ["0", "1 (straggler)", "2"]
    for rank, label in ((0, "0"), (1, "1 (straggler)"), (2, "2")):
        row = rows[label]
        wait = 0.0 if rank == 1 else EXTRA_MS
        assert row[1] == str(folder / f"rank{rank}.json") and row[2] == str(STEPS)
        assert row[6] == f"{COMPUTE[rank] / MS:.3f}"
        assert row[7] == ("3/3" if rank == 1 else "0/3")
        assert row[8] == row[9] == f"{wait:.3f}"
        assert row[10] == f"{SHIFTS[rank] / 1e3:,.1f}"
    # the waits chart: skew and recorded waits per rank and step
    (fig,) = [f for k, f in page.figures().items() if k.startswith("chart-multi-rank-")]
    skew, recorded = fig["data"]
    assert skew["x"] == ["rank 0", "rank 1", "rank 2"]
    assert skew["y"] == recorded["y"] == [EXTRA_MS, 0.0, EXTRA_MS]
    (coll,) = section.table_after(
        ("group", "collective", "calls", "mean skew ms", "max skew ms", "late rank")
    )
    assert coll == ["ranks 0,1,2", "allreduce", "3", "7.000", "7.000", "1 (3/3)"]


def test_no_cross_rank_section_for_one_trace_without_a_rank(tmp_path: Path) -> None:
    plain = rank_trace(tmp_path / "plain.json", 0, {0: MS}, world=None)
    code, html = _html([str(plain)], tmp_path / "one.html")
    assert code == 0 and 'id="multi-rank"' not in html
    other = rank_trace(tmp_path / "other.json", 0, {0: MS}, world=None)
    code, html = _html([str(plain), str(other)], tmp_path / "two.html")
    assert code == 0  # several traces: the section says why there is no analysis
    assert f"no cross-rank analysis: {REASON_NO_RANK}" in " ".join(parse(_section(html)).text)


def test_rank_directory_named_with_html_stays_text(tmp_path: Path) -> None:
    folder = _rank_dir(tmp_path, HOSTILE)
    code, html = _html([str(folder)], tmp_path / "out.html")
    assert code == 0
    section = parse(_section(html))
    assert not [t for t, attrs in section.tags if t == "img" or "onerror" in attrs]
    assert any(HOSTILE in row[1] for t in section.tables for row in t[1:] if len(row) > 1)


def test_terminal_and_page_show_the_same_ranks_under_top(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """--top cuts the analysis' order in both outputs: the per-rank rows by rank (the
    straggler, rank 1, is marked, not moved first), so the terminal's 2 rows are the page's
    first 2."""
    folder = _rank_dir(tmp_path)
    code = main(["analyze", str(folder), "--top", "2", "--html", str(tmp_path / "out.html")])
    assert code == 0
    out = capsys.readouterr().out
    per_rank = out[out.index("Per rank") : out.index("Collective wait skew")]
    shown = [
        line.split("│")[1].split()[0] for line in per_rank.splitlines() if line.startswith("│")
    ]
    page = parse(_section((tmp_path / "out.html").read_text()))
    (table,) = [t for t in page.tables if t and t[0][:2] == ["rank", "trace"]]
    assert shown == [row[0].split()[0] for row in table[1:3]] == ["0", "1"]


def test_top_keeps_the_straggler_row(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """Rows stay by rank under --top, and the straggler's row is always among them: with rank 2
    the straggler of 3 and --top 2, the table showed ranks 0 and 1 under a '* straggler' legend
    with no starred row."""
    folder = tmp_path / "late2"
    folder.mkdir()
    compute = {0: 5 * MS, 1: 5 * MS, 2: 12 * MS}  # rank 2 computes 7 ms more each step
    for r in compute:
        rank_trace(folder / f"rank{r}.json", r, compute, shift_ns=SHIFTS[r], world=3)
    assert main(["analyze", str(folder), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "straggler: rank 2" in out
    per_rank = out[out.index("Per rank") : out.index("Collective wait skew")]
    shown = [
        line.split("│")[1].split()[0] for line in per_rank.splitlines() if line.startswith("│")
    ]
    assert shown == ["0", "2"]
