"""One place for each rule in the analyses: the shared selections are computed once per
``analyze``, each cause is one record whose anchor the docs hold, one union serves grouped and
plain interval sets, the package has no import cycle and the tool reproductions stay apart."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from trace_factory import Build

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis import causes as C
from neuron_profiler.analysis import context as ctx_module
from neuron_profiler.analysis import selections as sel
from neuron_profiler.analysis._axis import DeviceAxis
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.idle import idle_time
from neuron_profiler.trace import EventKind
from neuron_profiler.trace import vocabulary as V

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "neuron_profiler"


def _busy_trace():
    """Two steps, a data stall, a sync, a late launch, a copy: every analysis has work."""
    b = Build().step(1, 0, 1000).step(2, 1000, 2000)
    b.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 400)
    b.kernel(450, 600, launch_us=420)
    b.host("aten::item", 600, 700)
    b.host("cudaStreamSynchronize", 610, 690, kind=EventKind.RUNTIME, cat="cuda_runtime")
    b.kernel(900, 950, launch_us=880)
    b.kernel(1000, 1800, launch_us=990)
    b.kernel(1850, 1900, launch_us=1840, kind=EventKind.MEMCPY, name="Memcpy DtoH (Device -> Host)")
    return b.b.build()


def test_each_shared_selection_is_computed_once_per_analyze(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The string-table scan, the host rows, the device work, the steps and the copies are
    selected once per analyze, however many analyses read them."""
    calls: Counter[str] = Counter()

    def counted(name, fn):  # noqa: ANN001, ANN202
        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(
        sel.NameClasses, "of", classmethod(counted("names", sel.NameClasses.of.__func__))
    )
    for name in ("host_rows", "sync_rows", "dataloader_rows", "profiler_overhead_rows"):
        monkeypatch.setattr(sel, name, counted(name, getattr(sel, name)))
    for name in ("device_work", "find_steps", "copy_info", "launch_sites"):
        monkeypatch.setattr(ctx_module, name, counted(name, getattr(ctx_module, name)))
    from neuron_profiler.analysis import Options, analyze

    report = analyze(_busy_trace(), Options(min_gap_ns=10_000))
    assert report.findings.findings  # the analyses did read the selections
    assert calls["names"] == 1 and calls["host_rows"] == 1
    assert calls["device_work"] == 1 and calls["find_steps"] == 1
    assert calls["copy_info"] <= 1 and calls["launch_sites"] <= 1
    assert all(n <= 1 for n in calls.values()), calls


@pytest.mark.parametrize("threaded", [False, True])
def test_the_second_thread_changes_nothing(monkeypatch: pytest.MonkeyPatch, threaded: bool) -> None:
    """A large trace's compatibility breakdowns and op and kernel summary run in a second
    thread: the document is the one a single thread writes, and each shared selection is
    still made once (both threads read the device work and the host rows)."""
    from neuron_profiler.analysis import Options, analyze
    from neuron_profiler.analysis import report as report_module
    from neuron_profiler.reports.json_report import document_text, to_document

    options = Options(min_gap_ns=10_000)
    alone = document_text(to_document([analyze(_busy_trace(), options)]))
    assert '"ops": [' in alone and '"name": "aten::item"' in alone  # the summary has rows
    calls: Counter[str] = Counter()
    for name in ("device_work", "host_rows"):
        fn = getattr(ctx_module if name == "device_work" else sel, name)

        def counted(*args, _name=name, _fn=fn, **kwargs):  # noqa: ANN002, ANN003, ANN202
            calls[_name] += 1
            return _fn(*args, **kwargs)

        monkeypatch.setattr(ctx_module if name == "device_work" else sel, name, counted)
    monkeypatch.setattr(report_module, "THREADED_ROWS", 0 if threaded else 10**9)
    assert document_text(to_document([analyze(_busy_trace(), options)])) == alone
    assert calls == {"device_work": 1, "host_rows": 1}


def test_result_is_computed_once_whoever_asks() -> None:
    ctx = AnalysisContext(_busy_trace())
    seen = []

    def analysis(c: AnalysisContext) -> int:
        seen.append(c)
        return len(c.work)

    assert ctx.result(analysis) == ctx.result(analysis) == 4
    assert seen == [ctx]
    assert ctx.result(idle_time) is ctx.result(idle_time)


def test_busy_union_per_device_and_queue_classes() -> None:
    """ctx.busy is the union of the device's work on the asked queue classes."""
    ctx = AnalysisContext(_busy_trace())
    every = ctx.busy(0)
    assert list(zip(every.start.tolist(), every.end.tolist(), strict=True)) == [
        (450_000, 600_000),
        (900_000, 950_000),
        (1_000_000, 1_800_000),
        (1_850_000, 1_900_000),
    ]
    assert ctx.busy(0, (1,)).total == 50_000  # the DMA queue: the one copy
    assert ctx.busy(0) is every


@pytest.mark.parametrize("seed", range(5))
def test_grouped_union_equals_the_union_of_each_group(seed: int) -> None:
    """One merge rule serves both: per group, union_by_group gives exactly union's intervals
    (on a µs grid, brute force)."""
    rng = np.random.default_rng(seed)
    n = 400
    group = rng.integers(0, 6, n) * 7 - 3  # sparse, negative codes too
    start = rng.integers(-50, 500, n)
    end = start + rng.integers(-5, 40, n)  # empty and negative intervals too
    g, s, e = I.union_by_group(group, start, end)
    for code in np.unique(group).tolist():
        mine = group == code
        expect = I.union(start[mine], end[mine])
        got = g == code
        assert s[got].tolist() == expect.start.tolist()
        assert e[got].tolist() == expect.end.tolist()
        grid = np.zeros(600, bool)
        for a, b in zip(start[mine].tolist(), end[mine].tolist(), strict=True):
            grid[a + 50 : max(b, a) + 50] = True
        assert int(grid.sum()) == int((e[got] - s[got]).sum())
    assert (np.diff(g) >= 0).all()  # sorted by group


@pytest.mark.parametrize(
    "values",
    [
        [],
        [0],
        [3, 3, 3],
        [5, 0, 2, 5, 9, 0],
        [2**40, 7, 2**40],  # too wide for a table: np.unique itself
        [-4, 2, -4, 0],  # negative: np.unique itself
        list(range(100, 0, -1)),
    ],
)
def test_dense_codes_equal_np_unique(values: list[int]) -> None:
    codes, dense = I.dense_codes(np.array(values, dtype=np.int64))
    expect_codes, expect_dense = np.unique(np.array(values, dtype=np.int64), return_inverse=True)
    assert codes.tolist() == expect_codes.tolist()
    assert dense.tolist() == expect_dense.tolist()


def test_dense_codes_of_random_group_codes() -> None:
    rng = np.random.default_rng(11)
    for top in (1, 50, 70_000, 2**20):
        values = rng.integers(0, top, 5_000)
        codes, dense = I.dense_codes(values)
        expect_codes, expect_dense = np.unique(values, return_inverse=True)
        assert np.array_equal(codes, expect_codes) and np.array_equal(dense, expect_dense)


def test_grouped_union_of_absurd_spans_keeps_each_group_apart() -> None:
    start = np.array([-(2**61), 0, 2**61, 5], np.int64)
    end = start + 10
    g, s, e = I.union_by_group(np.array([0, 1, 1, 0]), start, end)
    assert g.tolist() == [0, 0, 1, 1]
    assert s.tolist() == [-(2**61), 5, 0, 2**61]


def test_every_cause_is_one_record_with_its_docs_anchor() -> None:
    """Each cause's docs anchor is a heading of docs/analysis.md; the idle causes' keys are the
    records' names, in rule order; a finding carries its cause's anchor and advice."""
    doc = (ROOT / "docs" / "analysis.md").read_text()
    headings = {
        re.sub(r"[^a-z0-9_ -]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", doc, flags=re.M)
    }
    records = (*C.IDLE_CAUSES, *C.BUSY_PATTERNS, *C.MEMORY_PATTERNS)
    assert len({c.name for c in records}) == len(records)
    for cause in records:
        assert cause.docs == f"docs/analysis.md#{cause.name}"
        assert cause.name in headings, cause.name
        assert cause.advice and cause.title
    assert C.ALL_CAUSES == (
        "collective_wait",
        "data_loading",
        "cpu_fallback",
        "host_sync",
        "host_bound_launch",
        "profiler_overhead",
        "other",
        "short_gaps",
    )
    from neuron_profiler.analysis import Options, analyze

    found = analyze(_busy_trace(), Options(min_gap_ns=10_000)).findings.findings
    by_kind = {f.kind: f for f in found}
    assert by_kind["idle:data_loading"].docs == C.DATA_LOADING.docs
    assert by_kind["idle:data_loading"].suggestion == C.DATA_LOADING.advice
    assert by_kind["host_sync:aten::item"].docs == C.HOST_SYNC.docs


def test_a_rule_whose_precondition_fails_is_not_tried() -> None:
    """Without DataLoader spans the data-loading rule is skipped, so a gap the emulator's
    overhead fills entirely (0 ns of idle) is not called data loading."""
    empty, none = I.EMPTY, C.NO_SPANS
    every = C.LaunchThreads(np.array([-1]), np.zeros(0, np.int64), np.zeros(0, np.int64))
    spans = C.HostSpans(none, none, none, none, none, every)
    axis = DeviceAxis(devices=(0,), index=np.array([0]), base=0, width=1000)
    gaps = C.Gaps(
        start=np.array([0]),
        end=np.array([100]),
        idle_ns=np.array([0]),
        next_launch=np.array([50]),
        next_launch_end=np.array([55]),
        axis=axis,
        axis_start=np.array([0]),
        axis_end=np.array([100]),
        judged=empty,  # (all of it overhead: nothing counted)
        judged_gap=np.zeros(0, np.int64),
        overhead=I.window(0, 100),
        launchers=every,
    )
    assert C.ALL_CAUSES[int(C.classify(gaps, spans, 0)[0])] == "host_bound_launch"
    loading = C.HostSpans(
        C.ThreadSpans(np.array([0]), np.array([100]), np.array([0])), none, none, none, none, every
    )
    assert C.ALL_CAUSES[int(C.classify(gaps, loading, 0)[0])] == "data_loading"


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Every neuron_profiler module ``path`` imports, at any depth (function-level and
    TYPE_CHECKING imports count: a cycle through them is still a cycle)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("neuron_profiler"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.add(full if full in modules else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("neuron_profiler")}
    return out & modules


def test_no_import_cycle_in_the_package() -> None:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    graph = {m: _imports(p, set(modules)) - {m} for m, p in modules.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for other in sorted(graph[module]):
            assert state.get(other) != 1, "import cycle: " + " -> ".join(
                [*path[path.index(other) :], module, other] if other in path else [module, other]
            )
            if other not in state:
                visit(other, [*path, module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


def test_tool_reproductions_share_none_of_our_rules() -> None:
    """compat/ (HTA's and tb-profiler's rules) reads no shared selection, cause or context:
    a change to our rules cannot change theirs."""
    ours = ("context", "causes", "idle", "findings", "steps", "_device", "breakdown")
    for path in (PACKAGE / "analysis" / "compat").glob("*.py"):
        text = path.read_text()
        for module in ours:
            assert f"neuron_profiler.analysis.{module} " not in text
            assert f"neuron_profiler.analysis.{module}\n" not in text
            assert f"analysis import {module}" not in text


def test_host_rows_leave_out_profiler_steps_only() -> None:
    trace = _busy_trace()
    names = sel.NameClasses.of(trace)
    host = sel.host_rows(trace, names)
    got = sorted(trace.strings[i] for i in host.name_id.tolist())
    assert "ProfilerStep#1" not in got and "aten::item" in got
    assert got.count("nrt launch: mm") == 4
    assert names.step_numbers == {
        trace.string_id("ProfilerStep#1"): 1,
        trace.string_id("ProfilerStep#2"): 2,
    }
    assert trace.string_id(V.PROFILER_STEP_PREFIX + "1") in names.profiler_steps.tolist()


def _many_devices(devices: list[int], seed: int = 3) -> Build:
    """Two steps; random kernels and copies on each device, launched from the host thread."""
    rng = np.random.default_rng(seed)
    b = Build().step(1, 0, 2000).step(2, 2000, 4000)
    b.host("aten::item", 900, 1100)
    b.host(
        V.SYNC_PREFIX + "torch.neuron.synchronize",
        950,
        1050,
        kind=EventKind.RUNTIME,
        cat=V.CAT_RUNTIME,
    )
    for d in devices:
        t = int(rng.integers(0, 200))
        while t < 3800:
            dur = int(rng.integers(5, 300))
            kind = EventKind.MEMCPY if rng.random() < 0.2 else EventKind.KERNEL
            b.kernel(
                t,
                t + dur,
                device=d,
                launch_us=max(0, t - int(rng.integers(0, 80))),
                kind=kind,
                stream=2 if kind == EventKind.MEMCPY else 1,
            )
            t += dur + int(rng.integers(0, 250))
    return b


@pytest.mark.parametrize("split", [False, True])
def test_every_device_is_analysed_as_if_alone(monkeypatch: pytest.MonkeyPatch, split: bool) -> None:
    """Devices laid end to end on one axis (or, when the span is too large, several axes): each
    device's idle time by cause and step, its gaps and its breakdown equal those of the same
    trace holding that device alone."""
    from neuron_profiler.analysis import _axis

    axes = []
    real = _axis.device_axes

    def counted(*args):  # noqa: ANN002, ANN202
        for axis, group in real(*args):
            axes.append(len(axis))
            yield axis, group

    monkeypatch.setattr(_axis, "device_axes", counted)
    monkeypatch.setattr("neuron_profiler.analysis.idle.device_axes", counted)
    if split:  # as for a huge span: two devices an axis (the trace spans ~4 ms)
        monkeypatch.setattr(_axis, "_LIMIT", 9_000_000)
    devices = [0, 3, 7, 11, 12]
    built = _many_devices(devices)
    together = built.report(min_gap_us=20)
    assert axes == ([2, 2, 1] if split else [5])
    trace = built.b.build()
    device_row = np.isin(trace.col("kind"), [EventKind.KERNEL, EventKind.MEMCPY])
    for d in devices:
        solo = _filtered_report(trace, (trace.col("pid") == d) | ~device_row)
        assert next(x for x in together.idle.devices if x.device == d) == solo.idle.devices[0]
        mine = next(x for x in together.breakdown.devices if x.device == d)
        for name in (
            "busy_ns",
            "compute_ns",
            "dma_ns",
            "not_busy_ns",
            "emulator_overhead_ns",
            "dma_only_ns",
        ):
            assert getattr(mine, name).tolist() == getattr(solo.breakdown.devices[0], name).tolist()
        k = together.idle.gap_device == d
        assert together.idle.gap_start_ns[k].tolist() == solo.idle.gap_start_ns.tolist()
        assert together.idle.gap_cause[k].tolist() == solo.idle.gap_cause.tolist()
        assert together.idle.gap_idle_ns[k].tolist() == solo.idle.gap_idle_ns.tolist()


def _filtered_report(trace, keep: np.ndarray):  # noqa: ANN001, ANN202
    from dataclasses import replace

    from neuron_profiler.analysis import Options, analyze

    columns = {k: v[keep] for k, v in trace.columns.items()}
    return analyze(replace(trace, columns=columns), Options(min_gap_ns=20_000, top=50))


def test_gap_groups_are_every_device_and_cause_with_gaps() -> None:
    """``IdleTime.gap_groups`` (one sort) gives what one scan per device and cause gives:
    devices in the result's order, causes in ALL_CAUSES order, each group's gaps in order; the
    device timeline's idle series are those groups' counted gaps."""
    from neuron_profiler.analysis import Options, analyze

    devices = [11, 0, 7, 3]
    trace = _many_devices(devices, seed=5).b.build()
    report = analyze(trace, Options(min_gap_ns=20_000, top=50, timeline_segments=10_000))
    idle = report.idle
    naive = [
        (d.device, cause, idle.gap_index(cause, d.device))
        for d in idle.devices
        for cause in C.ALL_CAUSES
        if len(idle.gap_index(cause, d.device))
    ]
    got = idle.gap_groups()
    assert len({cause for _, cause, _ in got}) > 1  # the check sees several causes
    assert [(d, c, k.tolist()) for d, c, k in got] == [(d, c, k.tolist()) for d, c, k in naive]
    series = report.timeline.idle
    assert [(s.device, s.cause, s.gaps) for s in series] == [(d, c, len(k)) for d, c, k in naive]
    assert [s.idle_ns for s in series] == [idle.gaps_of(c, d).total for d, c, _ in naive]


def test_worst_device_is_the_first_with_the_most_idle_of_a_cause() -> None:
    report = _many_devices([4, 9, 2], seed=7).report(min_gap_us=20)
    idle = report.idle
    for cause in C.ALL_CAUSES:
        values = [d.by_cause_ns[cause] for d in idle.devices]
        want = idle.devices[values.index(max(values))].device if max(values) > 0 else None
        assert idle.worst_device(cause) == want


def test_covering_reads_only_nearby_rows_and_finds_every_overlap() -> None:
    """``covering`` through the start index equals a scan of every row: random nested and
    overlapping spans, a few very long ones, zero and negative lengths, windows anywhere, short
    and long (hundreds of rows under them: the order comes in two blocks, ties at the cut)."""
    rng = np.random.default_rng(11)
    n = 5000
    start = np.sort(rng.integers(0, 1_000_000, n))
    dur = rng.integers(0, 400, n)
    dur[rng.choice(n, 60, replace=False)] = rng.integers(50_000, 900_000, 60)  # long ones
    dur[:5] = -3
    host = sel.HostRows(
        rows=np.arange(n), start=start, end=start + dur, name_id=np.zeros(n), kind=np.zeros(n)
    )
    assert 0 < len(host.by_start.long) < n // 50
    blocks = 0
    for s in rng.integers(-1000, 1_001_000, 300).tolist():
        e = s + int(rng.choice([rng.integers(1, 3000), rng.integers(3000, 200_000)]))
        cover = np.minimum(host.end, e) - np.maximum(host.start, s)
        hit = np.flatnonzero(cover > 0)
        want = hit[np.lexsort((host.end[hit] - host.start[hit], -cover[hit]))]
        got = list(sel.covering(host, s, e))
        assert np.concatenate(got).tolist() == want.tolist()
        blocks += len(got) > 1
    assert blocks > 50  # long windows were cut into blocks


def test_a_long_window_is_named_from_the_long_rows_without_reading_the_short_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The long rows covering more of a window than any short row can come first, and the
    short rows are only looked up when the caller asks for more (a long gap's host ops)."""
    n = 1000
    start = np.arange(n, dtype=np.int64) * 100
    dur = np.full(n, 50, np.int64)
    dur[[10, 500]] = [90_000, 40_000]  # two long rows under the window below
    host = sel.HostRows(
        rows=np.arange(n), start=start, end=start + dur, name_id=np.zeros(n), kind=np.zeros(n)
    )
    looked_up: list[tuple[int, int]] = []
    lookup = sel._StartIndex.short_candidates

    def short_candidates(self: sel._StartIndex, s: int, e: int) -> np.ndarray:
        looked_up.append((s, e))
        return lookup(self, s, e)

    monkeypatch.setattr(sel._StartIndex, "short_candidates", short_candidates)
    blocks = sel.covering(host, 0, 99_000)
    assert next(blocks).tolist() == [10, 500] and looked_up == []
    rest = np.concatenate(list(blocks))
    assert looked_up == [(0, 99_000)] and len(rest) == 988  # every other row under it


def test_a_large_trace_is_analysed_beside_a_forked_child_as_in_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A large trace's compatibility breakdowns and op and kernel summary come from a forked
    child (or a thread where forking is not safe): the report is the one computed in turn,
    byte for byte; a child that fails leaves the work to this process."""
    import os

    from neuron_profiler import forked
    from neuron_profiler.analysis import Options
    from neuron_profiler.analysis import report as R
    from neuron_profiler.reports.json_report import document_bytes

    trace = _many_devices([11, 0, 7, 3], seed=5).b.build()

    def document() -> bytes:
        return document_bytes([R.analyze(trace, Options(min_gap_ns=20_000))])

    monkeypatch.setattr(R, "THREADED_ROWS", 10**12)
    in_turn = document()
    assert all(b'"%s": [\n' % k in in_turn for k in (b"kernels", b"ops"))  # (not empty)
    assert b'"hta": {\n    "rank"' in in_turn and b'"tb_profiler_breakdown": [\n' in in_turn
    monkeypatch.setattr(R, "THREADED_ROWS", 0)
    started: list[object] = []
    start = forked.ForkedCall.start

    def counted(call, *args):  # noqa: ANN001, ANN202
        child = start(call, *args)
        started.append(child)
        return child

    monkeypatch.setattr(forked.ForkedCall, "start", staticmethod(counted))
    monkeypatch.setattr(R, "usable_cores", lambda: 2)
    monkeypatch.setattr(forked, "fork_is_safe", lambda: False)
    assert document() == in_turn and started == [None]  # the thread
    monkeypatch.setattr(forked, "fork_is_safe", lambda: True)
    assert document() == in_turn and started[-1] is not None  # the child
    monkeypatch.setattr(R, "usable_cores", lambda: 1)  # no second core: no child to start
    assert document() == in_turn and len(started) == 2
    monkeypatch.setattr(R, "usable_cores", lambda: 2)
    here, beside = os.getpid(), R._beside

    def fails_in_the_child(ctx):  # noqa: ANN001, ANN202
        if os.getpid() != here:
            raise RuntimeError("the child fails")
        return beside(ctx)

    results: list[object] = []
    result = forked.ForkedCall.result
    monkeypatch.setattr(forked.ForkedCall, "result", lambda c: results.append(result(c)))
    monkeypatch.setattr(R, "_beside", fails_in_the_child)
    assert document() == in_turn and started[-1] is not None and len(started) == 3
    assert results == [None]  # the child's outcome: nothing, so this process did its work


def test_no_child_is_forked_when_the_setting_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from neuron_profiler import forked

    monkeypatch.setattr(threading, "active_count", lambda: 1)  # (pytest may run threads)
    monkeypatch.delenv(forked.FORK_ENV, raising=False)
    assert forked.fork_is_safe()
    for off in ("0", "off", "no", "False"):
        monkeypatch.setenv(forked.FORK_ENV, off)
        assert not forked.fork_is_safe()
