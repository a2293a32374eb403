"""Cross-rank analysis on synthetic ranks with known causes: a rank that computes longer before
each all_reduce (the others' wait = the difference), clocks shifted by a known offset (recovered
from collective ends), two profiling windows per rank (two spans), a bad file among good ranks
(one error line, exit 2), ``--fail-on`` over ranks (the worst rank counts), single-rank input
(an explicit empty state), the terminal section within the piped width (120 columns)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from neuron_profiler.analysis.distributed import (
    METRIC_COMPUTE,
    REASON_NO_RANK,
    distributed,
    is_outlier,
)
from neuron_profiler.analysis.report import analyze
from neuron_profiler.cli.main import main
from neuron_profiler.cli.workers import analyze_file as real_analyze_file
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.reports.json_report import schema_text
from neuron_profiler.reports.terminal import PIPED_WIDTH
from neuron_profiler.trace import EventKind, TraceBuilder, load_trace
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V

MS = 1_000_000
STEP_NS, COLL_NS = 20 * MS, 1 * MS


def rank_trace(
    path: Path,
    rank: int,
    compute_ns: dict[int, int],
    *,
    shift_ns: int = 0,
    t0_ns: int = 10**12,
    steps: int = 3,
    world: int | None = 2,
    waits: str = "rows",
) -> Path:
    """One rank of an all_reduce loop: compute, then the collective, which ends on every rank
    ``COLL_NS`` after the slowest rank's compute is done. ``waits``: "rows", the early ranks
    wait in ``CC wait:`` rows (the emulator); "kernel", the collective kernel starts at the
    rank's arrival and spins until all have arrived (NCCL); "none", the device idles until the
    collective starts (the wait is not recorded). Every time on this rank is written
    ``shift_ns`` later (its clock)."""
    b = TraceBuilder()
    if world is not None:
        b.metadata["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": world}
    group = list(range(len(compute_ns)))
    cc_args = {
        V.ARG_COLLECTIVE: "allreduce",
        V.ARG_GROUP_RANKS: group,
        V.ARG_GROUP_SIZE: len(group),
    }
    for k in range(steps):
        s = t0_ns + k * STEP_NS
        meet = s + max(compute_ns.values())
        b.add(
            name=f"ProfilerStep#{k}",
            ts_ns=s + shift_ns,
            dur_ns=STEP_NS,
            kind=EventKind.USER_ANNOTATION,
            cat="user_annotation",
            pid=9,
            tid=9,
        )
        b.add(
            name="TensorE: mm",
            ts_ns=s + shift_ns,
            dur_ns=compute_ns[rank],
            kind=EventKind.KERNEL,
            cat=V.CAT_KERNEL,
            pid=0,
            tid=1,
            args={V.ARG_DEVICE: 0, V.ARG_STREAM: 1},
        )
        if waits == "rows" and meet > s + compute_ns[rank]:
            b.add(
                name=V.COLLECTIVE_WAIT_PREFIX + "allreduce",
                ts_ns=s + compute_ns[rank] + shift_ns,
                dur_ns=meet - s - compute_ns[rank],
                kind=EventKind.KERNEL,
                cat=V.CAT_KERNEL,
                pid=0,
                tid=3,
                args={V.ARG_DEVICE: 0, V.ARG_STREAM: 3, V.ARG_COLLECTIVE_WAIT: True, **cc_args},
            )
        begin = s + compute_ns[rank] if waits == "kernel" else meet
        b.add(
            name="CC: allreduce",
            ts_ns=begin + shift_ns,
            dur_ns=meet + COLL_NS - begin,
            kind=EventKind.KERNEL,
            cat=V.CAT_KERNEL,
            pid=0,
            tid=3,
            args={V.ARG_DEVICE: 0, V.ARG_STREAM: 3, V.ARG_IS_COLLECTIVE: True, **cc_args},
        )
    b.process_names[0] = V.core_process_name(0)
    write_chrome_trace(b.build(), path)
    return path


def summaries(paths: list[Path]):  # noqa: ANN201
    out = []
    for p in paths:
        trace = load_trace(p)
        out.append(analyze(trace).rank_summary)
    return out


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


COMPUTE = {0: 5 * MS, 1: 12 * MS, 2: 5 * MS}  # rank 1: 7 ms more compute before each all_reduce


@pytest.mark.parametrize("waits", ["rows", "kernel"])
def test_late_rank_named_and_the_others_wait_the_extra_compute(tmp_path: Path, waits: str) -> None:
    shifts = {0: 0, 1: 3 * MS, 2: -2 * MS}  # clocks disagree; collective ends do not
    paths = [
        rank_trace(tmp_path / f"r{r}.json", r, COMPUTE, shift_ns=shifts[r], waits=waits, world=3)
        for r in COMPUTE
    ]
    d = distributed(summaries(paths))
    assert d.available and len(d.spans) == 1
    span = d.spans[0]
    rows = {r.rank: r for r in span.rows}
    assert {r: rows[r].clock_offset_ns for r in rows} == shifts
    (skew,) = span.collectives
    assert skew.late_rank == 1 and skew.calls == 3
    extra = COMPUTE[1] - COMPUTE[0]
    assert skew.mean_skew_ns == skew.max_skew_ns == extra
    assert dict(zip(skew.ranks, skew.wait_skew_ns, strict=True)) == {
        0: 3 * extra,
        1: 0,
        2: 3 * extra,
    }
    expect_recorded = (
        {0: 3 * extra, 1: 0, 2: 3 * extra} if waits == "rows" else {0: None, 1: None, 2: None}
    )
    assert {r: rows[r].wait_recorded_ns for r in rows} == expect_recorded
    assert rows[1].late_arrivals == 3 and rows[0].late_arrivals == rows[2].late_arrivals == 0
    assert {r: rows[r].compute_before_mean_ns for r in rows} == COMPUTE
    assert [(s.rank, s.metric) for s in span.stragglers] == [(1, METRIC_COMPUTE)]
    assert span.unmatched == () and span.mismatched_names == 0


def test_outlier_rule() -> None:
    assert is_outlier(1.06e6, [1e6])  # 6% and 60 µs over the others' median
    assert not is_outlier(1.04e6, [1e6])  # under 5%
    assert not is_outlier(1.1e5, [1e5])  # 10% but only 10 µs
    assert not is_outlier(5e6, [])
    assert is_outlier(2e6, [1e6, 1e6, 9e6])  # the median resists one slow other


def test_two_windows_of_each_rank_are_two_spans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two = {0: 5 * MS, 1: 12 * MS}
    paths = [
        rank_trace(tmp_path / f"r{r}_w{w}.json", r, two, t0_ns=10**12 + w * 10**10)
        for r in two
        for w in range(2)
    ]
    d = distributed(summaries(paths))
    assert [sorted(Path(s).name for s in span.sources) for span in d.spans] == [
        ["r0_w0.json", "r1_w0.json"],
        ["r0_w1.json", "r1_w1.json"],
    ]
    assert all(span.reason is None and span.collectives[0].calls == 3 for span in d.spans)
    # one rank, two windows: two spans of one rank each, and no cross-rank analysis
    one = distributed(summaries([p for p in paths if p.name.startswith("r0")]))
    assert len(one.spans) == 2 and not one.available and "only one rank" in one.reason
    code, out, _ = run(["analyze", "--json", *map(str, paths)], capsys)
    assert code == 0
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads(schema_text()))
    assert [s["ranks"] for s in doc["distributed"]["spans"]] == [[0, 1], [0, 1]]


def test_single_rank_input_says_why_there_is_no_cross_rank_analysis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = rank_trace(tmp_path / "plain.json", 0, {0: MS}, world=None)
    code, out, _ = run(["analyze", "--json", str(plain)], capsys)
    assert code == 0
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads(schema_text()))
    assert doc["distributed"]["available"] is False
    assert doc["distributed"]["reason"] == REASON_NO_RANK
    assert doc["distributed"]["spans"] == []
    one = rank_trace(tmp_path / "one.json", 0, {0: MS, 1: MS})
    doc = json.loads(run(["analyze", "--json", str(one)], capsys)[1])
    assert doc["distributed"]["available"] is False
    assert doc["distributed"]["reason"].startswith("only one rank (rank 0)")


def test_bad_file_among_good_ranks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = [rank_trace(tmp_path / f"r{r}.json", r, {0: 5 * MS, 1: 12 * MS}) for r in (0, 1)]
    bad = tmp_path / "r2.json"
    bad.write_text('{"traceEvents": [')
    code, out, err = run(
        ["analyze", "--json", "--jobs", "2", str(good[0]), str(bad), str(good[1])], capsys
    )
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("neuron-prof: error:")]
    assert len(errors) == 2  # the file's line and the summary line
    assert errors[0].startswith(f"neuron-prof: error: {bad}: ")
    doc = json.loads(out)
    assert [t["rank"] for t in doc["traces"]] == [0, 1]
    assert [e["path"] for e in doc["errors"]] == [str(bad)]
    assert doc["distributed"]["available"] and doc["distributed"]["spans"][0]["ranks"] == [0, 1]


def crash_on_marker(path: str, named: bool, options):  # noqa: ANN001, ANN201
    """A worker task that kills its process on files named ``crash*`` (a segfault, the OOM
    killer); the real task otherwise."""
    import os

    if Path(path).name.startswith("crash"):
        os._exit(9)
    return real_analyze_file(path, named, options)


def test_a_worker_that_dies_fails_only_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from neuron_profiler.cli import workers

    paths = [rank_trace(tmp_path / f"r{r}.json", r, {0: 5 * MS, 1: 12 * MS}) for r in (0, 1)]
    crash = rank_trace(tmp_path / "crash.json", 2, {0: MS, 1: MS, 2: MS}, world=3)
    monkeypatch.setattr(workers, "analyze_file", crash_on_marker)
    code, out, err = run(
        ["analyze", "--json", "--jobs", "2", str(paths[0]), str(crash), str(paths[1])], capsys
    )
    assert code == 2
    assert err.count(f"neuron-prof: error: {crash}: worker failed") == 1
    doc = json.loads(out)
    assert [t["rank"] for t in doc["traces"]] == [0, 1]
    assert doc["distributed"]["available"]


def test_fail_on_counts_the_worst_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With the wait unrecorded, rank 0's device idles while it waits: 70% idle; rank 1's 35%."""
    two = {0: 5 * MS, 1: 12 * MS}
    paths = [rank_trace(tmp_path / f"r{r}.json", r, two, waits="none") for r in two]
    idle = {r: 100 * (STEP_NS - two[r] - COLL_NS) / STEP_NS for r in two}
    assert idle == {0: 70.0, 1: 35.0}
    for jobs in ("1", "2"):
        for rule, value in (
            (f"idle_pct>{idle[0] - 5}", idle[0]),
            (f"idle_pct<{idle[1] + 5}", idle[1]),
        ):
            code, _, err = run(
                ["analyze", "--jobs", jobs, "--fail-on", rule, *map(str, paths)], capsys
            )
            assert code == 1 and f"(idle_pct = {value:.3f})" in err, (jobs, rule, err)
        code, _, err = run(
            ["analyze", "--jobs", jobs, "--fail-on", f"idle_pct>{idle[0] + 1}", *map(str, paths)],
            capsys,
        )
        assert code == 0, err


def test_terminal_section_fits_the_piped_width(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = [
        rank_trace(tmp_path / f"rank-{r}-with-a-long-name.json", r, COMPUTE, world=3)
        for r in COMPUTE
    ]
    code, out, _ = run(["analyze", *map(str, paths)], capsys)
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= PIPED_WIDTH
    section = out[out.index("Multi-rank") :]
    assert "straggler: rank 1: compute before collectives 12.000 ms vs 5.000 ms" in section
    assert "1 (3/3)" in section  # the late rank of the all_reduce, 3 of 3 calls


def test_a_wait_cut_by_the_window_end_is_counted_not_dropped(tmp_path: Path) -> None:
    """Rank 0's last step ends mid-wait: its collective is outside the profile. The wait row
    belongs to no call, so it is in no wait figure and counted as an orphan instead."""
    paths = [rank_trace(tmp_path / f"r{r}.json", r, COMPUTE, world=3) for r in COMPUTE]
    trace = load_trace(paths[0])
    rows = trace.select(kind=EventKind.KERNEL)
    names = [trace.name(int(i)) for i in rows]
    last_coll = max(int(i) for i, n in zip(rows, names, strict=True) if n == "CC: allreduce")
    last_wait = max(
        int(i) for i, n in zip(rows, names, strict=True) if n.startswith(V.COLLECTIVE_WAIT_PREFIX)
    )
    b = TraceBuilder()  # the same trace without its last collective
    b.metadata["distributedInfo"] = {"backend": "gloo", "rank": 0, "world_size": 3}
    for i in range(len(trace)):
        if i != last_coll:
            b.add(
                name=trace.name(i),
                ts_ns=int(trace.col(S.TS_NS)[i]),
                dur_ns=int(trace.col(S.DUR_NS)[i]),
                kind=EventKind(int(trace.col(S.KIND)[i])),
                cat=trace.strings[int(trace.col(S.CAT_ID)[i])],
                pid=int(trace.col(S.PID)[i]),
                tid=int(trace.col(S.TID)[i]),
                args=trace.args(i),
            )
    b.process_names[0] = V.core_process_name(0)
    write_chrome_trace(b.build(), paths[0])
    wait_ns = int(trace.col(S.DUR_NS)[last_wait])
    d = distributed(summaries(paths))
    rows0 = {r.rank: r for r in d.spans[0].rows}[0]
    assert (rows0.orphan_waits, rows0.orphan_wait_ns) == (1, wait_ns)
    extra = COMPUTE[1] - COMPUTE[0]
    assert rows0.wait_recorded_ns == 2 * extra  # the two waits that have their collective
    assert all(r.orphan_waits == 0 for r in d.spans[0].rows if r.rank != 0)
