"""Cross-rank analysis on synthetic ranks with known causes: a rank that computes longer before
each all_reduce (the others' wait = the difference), a rank whose host is late (data loading)
while the waiting rank's steps began earlier and are longer, clocks shifted by a known offset
(recovered from collective ends), two profiling windows per rank (two spans), a bad file among
good ranks (one error line, exit 2), ``--fail-on`` over ranks (the worst rank counts),
single-rank input (an explicit empty state), the terminal section within the piped width (120
columns); and the
straggler rule on rank summaries with injected arrivals (who is named, what it costs each other
rank per step, ties, no lateness, the thresholds)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest
from rank_traces import COLL_NS, MS, STEP_NS, collective_row, rank_trace

from neuron_profiler.analysis.distributed import (
    NO_LATE,
    NO_MATCH,
    REASON_NO_RANK,
    STRAGGLER_ABS_NS,
    STRAGGLER_REL,
    distributed,
)
from neuron_profiler.analysis.rank_summary import (
    ACT_COMPUTE,
    ACTIVITIES,
    IDLE_PREFIX,
    CollectiveCall,
    RankSummary,
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


COMPUTE = {0: 5 * MS, 1: 12 * MS, 2: 5 * MS}
COMPUTE_2 = {0: 5 * MS, 1: 12 * MS}  # rank 1: 7 ms more compute before each all_reduce


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
    # every per-rank time is per step (3 steps, one all_reduce each)
    expect_recorded = {0: extra, 1: 0, 2: extra} if waits == "rows" else dict.fromkeys(COMPUTE)
    assert {r: rows[r].wait_recorded_ns_per_step for r in rows} == expect_recorded
    assert {r: rows[r].wait_skew_ns_per_step for r in rows} == {0: extra, 1: 0, 2: extra}
    assert rows[1].late_arrivals == 3 and rows[0].late_arrivals == rows[2].late_arrivals == 0
    assert all(rows[r].instances == 3 for r in rows)
    assert {r: rows[r].compute_before_ns_per_step for r in rows} == COMPUTE
    (x,) = span.stragglers
    assert (x.rank, x.late_arrivals, x.instances) == (1, 3, 3)
    assert dict(x.cost_per_rank) == {0: extra, 2: extra} and x.cost_ns_per_step == extra
    assert x.lateness_ns == extra
    # before arriving it computed: 12 ms per late arrival against the others' 5 ms
    assert x.doing == ACT_COMPUTE
    assert (x.before[0].name, x.before[0].ns, x.before[0].others_ns) == (
        ACT_COMPUTE,
        COMPUTE[1],
        COMPUTE[0],
    )
    assert span.straggler_note is None
    assert span.unmatched == () and span.mismatched_names == 0


def test_sends_are_not_matched_as_collectives_of_the_group(tmp_path: Path) -> None:
    """Rank 0 sends to rank 1 after each all_reduce (a row naming the whole group): matched
    by call order it would pair with rank 1's next all_reduce. Left out, the all_reduces
    match and rank 1, 7 ms late at each, is named."""
    paths = [rank_trace(tmp_path / f"r{r}.json", r, COMPUTE_2, sends=r == 0) for r in COMPUTE_2]
    (span,) = distributed(summaries(paths)).spans
    assert [c.name for c in span.collectives] == ["allreduce"]
    assert span.collectives[0].calls == 3 and not span.mismatched_names
    assert [x.rank for x in span.stragglers] == [1]


def test_host_side_straggler_named_not_the_rank_whose_steps_are_longer(tmp_path: Path) -> None:
    """Rank 1's host spends DELAY in the DataLoader before each step's compute (equal compute on
    both ranks): its device arrives DELAY late at every all_reduce. Rank 0's profiling began
    earlier (its first step is LEAD longer, so its mean step is LEAD/3 longer: over 5%), yet it
    is the rank that waits: rank 1 is named, with rank 0's wait per step = DELAY, and data
    loading as what it was doing."""
    delay, lead, same = 10 * MS, 6 * MS, {0: 5 * MS, 1: 5 * MS}
    paths = [
        rank_trace(
            tmp_path / f"r{r}.json",
            r,
            same,
            host_delay_ns={1: delay},
            step_lead_ns=lead if r == 0 else 0,
        )
        for r in same
    ]
    span = distributed(summaries(paths)).spans[0]
    rows = {r.rank: r for r in span.rows}
    assert rows[0].step_mean_ns - rows[1].step_mean_ns == lead // 3
    assert rows[0].step_mean_ns > (1 + STRAGGLER_REL) * rows[1].step_mean_ns
    (x,) = span.stragglers
    assert (x.rank, x.late_arrivals, x.instances) == (1, 3, 3)
    assert x.cost_per_rank == ((0, delay),) and x.cost_ns_per_step == delay
    assert x.doing == IDLE_PREFIX + "data_loading"
    loading = {a.name: a for a in x.before}[IDLE_PREFIX + "data_loading"]
    assert (loading.ns, loading.others_ns) == (delay, 0)
    assert {a.name: a for a in x.before}[ACT_COMPUTE].excess_ns == 0
    assert rows[0].wait_skew_ns_per_step == delay and rows[1].wait_skew_ns_per_step == 0


# -- the straggler rule on rank summaries with injected arrivals ---------------------------------
STEP = 10 * MS


def summary(
    rank: int,
    arrivals: list[int],
    *,
    idle_ns: int = 0,
    compute_ns: int = 0,
    first_step_ns: int = 0,
    step_ns: int = STEP,
) -> RankSummary:
    """A rank of one all_reduce per step (steps of ``step_ns``, the k-th from k * step_ns, the
    first ``first_step_ns`` longer): it reaches the k-th all_reduce at ``arrivals[k]``, every
    rank leaves it at 90% of the step, and before each arrival its device computed
    ``compute_ns`` and idled ``idle_ns`` while its host loaded data."""
    steps = len(arrivals)
    before = [0] * len(ACTIVITIES)
    before[ACTIVITIES.index(IDLE_PREFIX + "data_loading")] = idle_ns
    before[ACTIVITIES.index(ACT_COMPUTE)] = compute_ns
    return RankSummary(
        source=f"r{rank}.json",
        rank=rank,
        world_size=None,
        window_start_ns=-first_step_ns,
        window_end_ns=steps * step_ns,
        step_wall_ns=(step_ns + first_step_ns,) + (step_ns,) * (steps - 1),
        compute_ns=compute_ns * steps,
        collective_ns=0,
        recorded_waits=False,
        calls=tuple(
            CollectiveCall(
                group="ranks 0,1",
                name="allreduce",
                arrival_ns=a,
                end_ns=k * step_ns + step_ns * 9 // 10,
                wait_ns=0,
                compute_before_ns=compute_ns,
                before_ns=tuple(before),
            )
            for k, a in enumerate(arrivals)
        ),
    )


def test_the_docs_worked_example() -> None:
    """docs/analysis.md, "Straggler": steps of 100 ms; rank 1 loads data 20 ms then computes
    40 ms, ranks 0 and 2 compute 40 and 45 ms; rank 0's profiling began 30 ms earlier."""
    step = 100 * MS
    start = [k * step for k in range(4)]
    span = distributed(
        [
            summary(
                0,
                [t + 40 * MS for t in start],
                compute_ns=40 * MS,
                first_step_ns=30 * MS,
                step_ns=step,
            ),
            summary(
                1, [t + 60 * MS for t in start], compute_ns=40 * MS, idle_ns=20 * MS, step_ns=step
            ),
            summary(2, [t + 45 * MS for t in start], compute_ns=45 * MS, step_ns=step),
        ]
    ).spans[0]
    (x,) = span.stragglers
    assert (x.rank, x.late_arrivals, x.instances, x.lateness_ns) == (1, 4, 4, 15 * MS)
    assert x.cost_per_rank == ((0, 20 * MS), (2, 15 * MS)) and x.cost_ns_per_step == 17.5 * MS
    assert x.doing == IDLE_PREFIX + "data_loading"
    assert [(a.name, a.ns, a.others_ns) for a in x.before] == [
        (IDLE_PREFIX + "data_loading", 20 * MS, 0),
        (ACT_COMPUTE, 40 * MS, 42.5 * MS),
    ]
    # rank 0's mean step is longer (its profiling began earlier): not what decides
    rows = {r.rank: r for r in span.rows}
    assert rows[0].step_mean_ns == step + 30 * MS // 4 > rows[1].step_mean_ns


def test_the_rank_that_arrives_last_is_named_with_its_cost_per_step() -> None:
    late = [k * STEP + 4 * MS for k in range(4)]
    early = [k * STEP + 1 * MS for k in range(4)]
    span = distributed(
        [summary(0, early), summary(1, late, idle_ns=3 * MS), summary(2, [a + MS for a in early])]
    ).spans[0]
    (x,) = span.stragglers
    assert x.rank == 1 and (x.late_arrivals, x.instances) == (4, 4)
    # rank 0 arrives 3 ms before it, rank 2 2 ms before: per step (one all_reduce per step)
    assert x.cost_per_rank == ((0, 3 * MS), (2, 2 * MS))
    assert x.cost_ns_per_step == 2.5 * MS
    assert x.lateness_ns == 2 * MS  # after the next latest rank (rank 2)
    assert x.doing == IDLE_PREFIX + "data_loading"
    assert {r.rank: r.late_arrivals for r in span.rows} == {0: 0, 1: 4, 2: 0}


def test_longer_steps_that_began_earlier_never_name_the_rank_that_arrives_first() -> None:
    """Rank 0's first step began 8 ms earlier (its mean step is 20% longer) but it reaches every
    all_reduce 2 ms before rank 1: rank 1 is named."""
    early = [k * STEP + 1 * MS for k in range(4)]
    late = [a + 2 * MS for a in early]
    span = distributed([summary(0, early, first_step_ns=8 * MS), summary(1, late)]).spans[0]
    rows = {r.rank: r for r in span.rows}
    assert rows[0].step_mean_ns == 1.2 * STEP and rows[1].step_mean_ns == STEP
    assert [x.rank for x in span.stragglers] == [1]
    assert span.stragglers[0].cost_per_rank == ((0, 2 * MS),)


def test_no_straggler_on_ties_or_without_lateness() -> None:
    at = [k * STEP + MS for k in range(4)]
    together = distributed([summary(0, at), summary(1, at)]).spans[0]
    assert together.stragglers == () and together.straggler_note == NO_LATE
    assert together.collectives[0].late_rank is None
    assert {r.rank: r.late_arrivals for r in together.rows} == {0: 0, 1: 0}
    # each rank last twice, by 2 ms: nobody is consistently last
    a = [at[0], at[1] + 2 * MS, at[2], at[3] + 2 * MS]
    b = [at[0] + 2 * MS, at[1], at[2] + 2 * MS, at[3]]
    tie = distributed([summary(0, a), summary(1, b)]).spans[0]
    assert tie.stragglers == () and tie.straggler_note.startswith("ranks 0 and 1 cost the others")
    # a three-rank instance whose two latest ranks tie has no late rank
    three = distributed(
        [summary(0, at), summary(1, [t + MS for t in at]), summary(2, [t + MS for t in at])]
    ).spans[0]
    assert three.stragglers == () and three.straggler_note == NO_LATE
    # no collective at all
    none = [dataclasses.replace(summary(r, at), calls=()) for r in (0, 1)]
    assert distributed(none).spans[0].straggler_note == NO_MATCH


def test_the_rank_that_costs_most_is_named_not_the_one_late_most_often() -> None:
    """Six collectives: rank 1 is 6 ms late at the first (1 of 6), rank 0 is 0.1 ms late at the
    five others (noise at small collectives). Rank 1 costs rank 0 6 ms over 6 steps, 1 ms a
    step, and waited 0.5 ms for it: 0.917 ms a step net, 9.2% of the 10 ms step. Rank 0 is
    last most often but costs less than it waits."""
    at = [k * STEP + MS for k in range(6)]
    r0 = [a + (MS // 10 if k else 0) for k, a in enumerate(at)]
    r1 = [a + (6 * MS if k == 0 else 0) for k, a in enumerate(at)]
    span = distributed([summary(0, r0), summary(1, r1)]).spans[0]
    assert {r.rank: r.late_arrivals for r in span.rows} == {0: 5, 1: 1}
    (x,) = span.stragglers
    assert (x.rank, x.late_arrivals, x.cost_per_rank) == (1, 1, ((0, MS),))


def test_mutual_waits_name_no_straggler() -> None:
    """Each rank is last at half the collectives by the same 1 ms: what each costs the other
    it also waits for; no straggler, however long the waits."""
    at = [k * STEP + MS for k in range(4)]
    r0 = [a + (MS if k % 2 else 0) for k, a in enumerate(at)]
    r1 = [a + (0 if k % 2 else MS) for k, a in enumerate(at)]
    span = distributed([summary(0, r0), summary(1, r1)]).spans[0]
    assert span.stragglers == () and "cost the others equally" in span.straggler_note


@pytest.mark.parametrize(
    ("late_ns", "named"),
    [
        (STRAGGLER_ABS_NS - 1_000, False),  # under 50 µs per step (and under 5% of 10 ms)
        (int(STRAGGLER_REL * STEP) - 1_000, False),  # 490 µs: over 50 µs, under 5% of the step
        (int(STRAGGLER_REL * STEP), True),  # 5% of the step
        (2 * MS, True),
    ],
)
def test_straggler_threshold(late_ns: int, named: bool) -> None:
    at = [k * STEP + MS for k in range(4)]
    span = distributed([summary(0, at), summary(1, [t + late_ns for t in at])]).spans[0]
    assert [x.rank for x in span.stragglers] == ([1] if named else [])
    if not named:
        assert span.straggler_note.startswith("rank 1 (last at 4 of 4 instances) costs")
    assert {r.rank: r.late_arrivals for r in span.rows} == {0: 0, 1: 4}  # late either way


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
    assert "straggler: rank 1, last at 3 of 3 collectives (7.000 ms after the next rank" in section
    assert "costs the ranks waiting for it 7.000 ms per step: rank 0: 7.000, rank 2: 7.000" in (
        section
    )
    assert "before arriving it was doing: compute (ms per late arrival, rank 1 vs the " in section
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
    # the two waits that have their collective, per step (3 steps)
    assert rows0.wait_recorded_ns_per_step == 2 * extra // 3
    assert all(r.orphan_waits == 0 for r in d.spans[0].rows if r.rank != 0)


@pytest.mark.parametrize(("launch_after_ns", "arrival_after_ns"), [(-MS, 0), (2 * MS, 2 * MS)])
def test_arrival_is_never_before_the_collectives_launch(
    tmp_path: Path, launch_after_ns: int, arrival_after_ns: int
) -> None:
    """NCCL-style: the collective kernel starts at the rank's arrival. When its launch call (the
    runtime call with its correlation id) began later than that, the later time is the arrival:
    a device cannot reach work its host has not launched."""
    b = TraceBuilder()
    b.metadata["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": 2}
    t0 = 10**12
    b.add(
        name="ProfilerStep#0",
        ts_ns=t0,
        dur_ns=STEP_NS,
        kind=EventKind.USER_ANNOTATION,
        cat="user_annotation",
        pid=9,
        tid=9,
    )
    b.add(
        name="nrt launch",
        ts_ns=t0 + 5 * MS + launch_after_ns,
        dur_ns=10_000,
        kind=EventKind.RUNTIME,
        cat=V.CAT_RUNTIME,
        pid=9,
        tid=9,
        args={V.ARG_CORRELATION: 7},
    )
    collective_row(
        b,
        "CC: allreduce",
        t0 + 5 * MS,
        4 * MS,
        {V.ARG_IS_COLLECTIVE: True, V.ARG_COLLECTIVE: "allreduce", V.ARG_CORRELATION: 7},
    )
    b.process_names[0] = V.core_process_name(0)
    path = tmp_path / "r0.json"
    write_chrome_trace(b.build(), path)
    (call,) = analyze(load_trace(path)).rank_summary.calls
    assert call.arrival_ns == t0 + 5 * MS + arrival_after_ns


def test_cpu_only_ranks_have_no_cross_rank_analysis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two CPU-only ranks of one run: there is no device time to compare, and the section says
    so (it was 'available' with every device figure 0 and 'clocks aligned' on no collective)."""
    from neuron_profiler.analysis.distributed import REASON_NO_DEVICE

    paths = []
    for rank in (0, 1):
        b = TraceBuilder()
        b.metadata["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": 2}
        for n in range(2):
            b.add(
                name=f"ProfilerStep#{n}",
                ts_ns=n * STEP_NS,
                dur_ns=STEP_NS,
                kind=EventKind.USER_ANNOTATION,
                cat="user_annotation",
                pid=1,
                tid=1,
            )
            b.add(name="aten::mm", ts_ns=n * STEP_NS + MS, dur_ns=5 * MS, pid=1, tid=1)
        paths.append(tmp_path / f"rank{rank}.json")
        write_chrome_trace(b.build(), paths[-1])
    d = distributed(summaries(paths))
    assert not d.available and d.reason == REASON_NO_DEVICE
    assert [s.reason for s in d.spans] == [REASON_NO_DEVICE]
    code, out, _ = run(["analyze", "--json", *map(str, paths)], capsys)
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads(schema_text()))
    assert code == 0 and doc["distributed"]["available"] is False
