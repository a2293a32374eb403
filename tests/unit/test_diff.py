"""``analysis.diff`` on synthetic pairs with the change injected on purpose: each pair is built
from a plain timeline (host ops one after another, each launching its kernel onto one
in-order device queue), and the expected rows come from a microsecond-by-microsecond walk of
that timeline (independent of the library's interval code): a busy µs belongs to the op whose
kernel runs, an idle µs to the op the host is running (the device waits for it) unless its gap
is a data-loading gap (the DataLoader covers at least half of it, docs/analysis.md), and
otherwise to the idle rows."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np
import pytest
from trace_factory import Build

from neuron_profiler.analysis.diff import IDLE, diff
from neuron_profiler.trace import EventKind
from neuron_profiler.trace import vocabulary as V

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
TOL_MS = 1e-9


@dataclass(frozen=True)
class Op:
    """A host op of ``host_us``, launching a kernel of ``kernel_us`` (0: none); ``fallback_us``:
    a CPU-fallback row inside it; ``loader``: a DataLoader ``__next__`` around it."""

    name: str
    host_us: int
    kernel_us: int = 0
    fallback_us: int = 0
    loader: bool = False


@dataclass
class Timeline:
    """What was built: per step its span; per op its key, host span and kernel span (µs)."""

    steps: list[tuple[int, int]]
    ops: list[tuple[str, tuple[int, int], tuple[int, int] | None]]
    loaders: list[tuple[int, int]]


def build(ops: list[Op], keys: dict[str, str] | None = None, steps: int = 3):  # noqa: ANN201
    """The trace of ``steps`` steps running ``ops``, and its timeline. ``keys``: an op name's
    expected row key (default ``forward › <name>``)."""
    keys = keys or {}
    b = Build()
    t, timeline = 1000, Timeline([], [], [])
    for n in range(steps):
        start, free = t, t
        for op in ops:
            host = (t, t + op.host_us)
            name = "aten::stack" if op.loader else op.name
            if op.loader:
                b.host(
                    LOADER, t, t + op.host_us, kind=EventKind.USER_ANNOTATION, cat="user_annotation"
                )
                timeline.loaders.append(host)
                host = (t + 1, t + op.host_us - 1)
            b.host(name, *host)
            kernel = None
            if op.kernel_us:
                begin = max(t + 3, free)
                kernel = (begin, begin + op.kernel_us)
                b.kernel(*kernel, launch_us=t + 1, name=f"k_{op.name}")
                free = kernel[1]
            if op.fallback_us:
                b.host(
                    f"{V.FALLBACK_PREFIX}{op.name}",
                    t + 1,
                    t + 1 + op.fallback_us,
                    kind=EventKind.FALLBACK,
                    cat="cpu_fallback",
                )
            key = keys.get(op.name, f"{'DataLoader' if op.loader else 'forward'} › {name}")
            timeline.ops.append((key, host, kernel))
            t += op.host_us
        sync_end = max(t, free) + 1
        b.host("cudaDeviceSynchronize", t, sync_end, kind=EventKind.RUNTIME, cat="cuda_runtime")
        t = sync_end + 5
        b.step(n + 1, start, t)
        timeline.steps.append((start, t))
    return b.b.build(), timeline


def expected(tl: Timeline) -> dict[str, float]:
    """ms per step by row key (all idle rows as one "idle" key), from a walk of every µs."""
    lo, hi = tl.steps[0][0], tl.steps[-1][1]
    busy_by = np.full(hi - lo, -1)
    host_by = np.full(hi - lo, -1)
    loader = np.zeros(hi - lo, bool)
    for i, (_, host, kernel) in enumerate(tl.ops):
        host_by[host[0] - lo : host[1] - lo] = i
        if kernel:
            busy_by[kernel[0] - lo : kernel[1] - lo] = i
    for s, e in tl.loaders:
        loader[s - lo : e - lo] = True
    first_kernel = min(k[0] for _, _, k in tl.ops if k)
    last_kernel = max(k[1] for _, _, k in tl.ops if k)
    idle = busy_by < 0
    idle[: first_kernel - lo] = idle[last_kernel - lo :] = True
    out: dict[str, float] = defaultdict(float)
    u = 0
    while u < hi - lo:  # one gap (a run of idle µs) at a time
        if not idle[u]:
            out[tl.ops[busy_by[u]][0]] += 1
            u += 1
            continue
        v = u
        while v < hi - lo and idle[v]:
            v += 1
        data = 2 * loader[u:v].sum() >= v - u
        for w in range(u, v):
            owner = host_by[w]
            out["idle" if data or owner < 0 else tl.ops[owner][0]] += 1
        u = v
    steps = len(tl.steps)
    return {k: v / steps / 1e3 for k, v in out.items()}


def check(d, ref_a: dict[str, float], ref_b: dict[str, float]) -> None:  # noqa: ANN001
    """Every row as the walk has it, on both sides; the idle rows together; the invariant."""
    rows = {r.key: r for r in d.rows if r.kind != IDLE}
    assert set(rows) >= (set(ref_a) | set(ref_b)) - {"idle"}
    for key, row in rows.items():
        assert row.a_ms == pytest.approx(ref_a.get(key, 0.0), abs=TOL_MS), key
        assert row.b_ms == pytest.approx(ref_b.get(key, 0.0), abs=TOL_MS), key
    idle = [r for r in d.rows if r.kind == IDLE]
    assert sum(r.a_ms for r in idle) == pytest.approx(ref_a.get("idle", 0.0), abs=TOL_MS)
    assert sum(r.b_ms for r in idle) == pytest.approx(ref_b.get("idle", 0.0), abs=TOL_MS)
    assert abs(d.residual_ms) <= 1e-9
    assert sum(r.delta_ms for r in d.rows) + d.residual_ms == pytest.approx(d.delta_ms, abs=1e-12)


BASE = [
    Op("aten::linear", 10, 100),
    Op("aten::relu", 10, 20),
    Op("aten::linear", 10, 100),
    Op("aten::bincount", 10, 20),
    Op("aten::sum", 10, 30),
]  # the host runs ahead of the device: every kernel waits for the one before


def test_a_trace_against_itself_gives_zero_rows_and_zero_residual() -> None:
    trace, _ = build(BASE)
    d = diff(trace, trace)
    assert d.delta_ms == 0 and d.residual_ms == 0
    assert len(d.rows) > 3 and all(r.delta_ms == 0 for r in d.rows)
    assert [r.kind for r in d.folded()] == ["other"]  # nothing above the display threshold


def test_one_op_slower_is_its_own_row_and_nothing_else_moves() -> None:
    slow = [*BASE[:2], Op("aten::linear", 10, 150), *BASE[3:]]
    (a, ta), (b, tb) = build(BASE), build(slow)
    d = diff(a, b)
    check(d, expected(ta), expected(tb))
    assert d.rows[0].key == "forward › aten::linear"
    assert d.rows[0].delta_ms == pytest.approx(0.050, abs=TOL_MS)  # 50 µs more, once a step
    assert d.delta_ms == pytest.approx(0.050, abs=TOL_MS)
    assert all(r.delta_ms == pytest.approx(0, abs=TOL_MS) for r in d.rows[1:])


def test_one_op_added_is_unmatched_on_its_side() -> None:
    added = [*BASE[:2], Op("aten::gelu", 10, 40), *BASE[2:]]
    (a, ta), (b, tb) = build(BASE), build(added, {"aten::gelu": "only in B: forward › aten::gelu"})
    d = diff(a, b)
    check(d, expected(ta), expected(tb))
    top = d.rows[0]
    assert (top.key, top.kind) == ("only in B: forward › aten::gelu", "unmatched")
    assert top.delta_ms == pytest.approx(0.040, abs=TOL_MS)


def test_fallback_on_one_side_moves_the_device_wait_to_its_op() -> None:
    fallback = [*BASE[:3], Op("aten::bincount", 430, 0, fallback_us=400), BASE[4]]
    (a, ta), (b, tb) = build(BASE), build(fallback)
    d = diff(a, b)
    check(d, expected(ta), expected(tb))
    row = next(r for r in d.rows if r.key == "forward › aten::bincount")
    assert row.notes == ("B: CPU fallback (1 per step)",)
    # no device time on B: the device waits for it (the walk has how long: check)
    assert row.a_parts_ms[0] == pytest.approx(0.020) and row.b_parts_ms[0] == 0
    assert row.b_parts_ms[2] > 0.1 and row.delta_ms == d.rows[0].delta_ms
    assert ("cpu_fallback", "B") in {(m.rule, m.side) for m in d.mappings}


def test_data_stall_added_is_the_data_loading_row() -> None:
    stalled = [Op("loader", 600, loader=True), *BASE]
    (a, ta), (b, tb) = (
        build(BASE),
        build(stalled, {"loader": "only in B: DataLoader › aten::stack"}),
    )
    d = diff(a, b)
    ref_b = expected(tb)
    check(d, expected(ta), ref_b)
    assert d.rows[0].key == "idle: data_loading"
    assert d.rows[0].delta_ms == pytest.approx(d.delta_ms, rel=0.05)  # (one sync µs apart)
    loading = next(c for c in d.idle if c.cause == "data_loading")
    assert loading.a_ms == 0 and loading.delta_ms == pytest.approx(d.rows[0].delta_ms, abs=TOL_MS)


def test_compiled_graph_vs_its_eager_ops_is_one_fused_row() -> None:
    eager = [Op("aten::mm", 10, 30), *BASE[:3], Op("aten::sum", 10, 30)]
    compiled = [
        Op("aten::mm", 10, 30),
        Op("Torch-Compiled Region: 0/0", 25, 170),
        Op("aten::sum", 10, 30),
    ]
    fused = "forward › aten::linear + aten::relu ≈ compiled graph"
    keys = {"aten::linear": fused, "aten::relu": fused, "Torch-Compiled Region: 0/0": fused}
    (a, ta), (b, tb) = build(eager, keys), build(compiled, keys)
    d = diff(a, b)
    check(d, expected(ta), expected(tb))
    row = next(r for r in d.rows if r.key == fused)
    assert row.kind == "fused"
    assert row.a_parts_ms[0] == pytest.approx(0.220, abs=TOL_MS)  # 100 + 20 + 100 µs
    assert row.b_parts_ms[0] == pytest.approx(0.170, abs=TOL_MS)
    assert ("compiled_region", "B") in {(m.rule, m.side) for m in d.mappings}


def test_foreach_op_matches_the_per_tensor_loop() -> None:
    loop = [Op("aten::add_", 5, 10)] * 4
    one = [Op("aten::_foreach_add_", 12, 25)]
    (a, ta), (b, tb) = (
        build(BASE + loop),
        build(BASE + one, {"aten::_foreach_add_": "forward › aten::add_"}),
    )
    d = diff(a, b)
    check(d, expected(ta), expected(tb))
    row = next(r for r in d.rows if r.key == "forward › aten::add_")
    assert (row.a_ops, row.b_ops) == (4, 1)


def test_steps_by_position_when_numbers_differ_and_by_choice() -> None:
    a, _ = build(BASE)
    b, _ = build(BASE, steps=4)
    assert diff(a, b).steps_by == "number"  # steps 1-3 in both
    assert diff(a, b, steps="2-3").a.steps == ("2", "3")
    d = diff(a, _renumber(build(BASE)[0], 10))
    assert d.steps_by == "position" and d.b.steps == ("11", "12", "13")
    assert any("by position" in n for n in d.notes)


def _renumber(trace, offset: int):  # noqa: ANN001, ANN202
    """The same trace with its ProfilerStep numbers shifted."""
    strings = [
        f"{V.PROFILER_STEP_PREFIX}{int(s[len(V.PROFILER_STEP_PREFIX) :]) + offset}"
        if s.startswith(V.PROFILER_STEP_PREFIX)
        else s
        for s in trace.strings
    ]
    return replace(trace, strings=strings)


def test_host_only_traces_diff_their_host_time() -> None:
    def host_only(slow: int):  # noqa: ANN202
        b = Build()
        for n in range(2):
            t = 1000 + n * 1000
            b.host("aten::linear", t + 10, t + 110 + slow)
            b.host("aten::relu", t + 200, t + 250)
            b.step(n + 1, t, t + 900)
        return b.b.build()

    d = diff(host_only(0), host_only(40))
    linear = next(r for r in d.rows if r.key == "forward › aten::linear")
    assert linear.a_parts_ms[3] == pytest.approx(0.100) and linear.delta_ms == pytest.approx(0.040)
    host_idle = next(r for r in d.rows if r.kind == IDLE)
    assert host_idle.a_ms == pytest.approx(0.750) and host_idle.delta_ms == pytest.approx(-0.040)
    assert d.delta_ms == 0 and abs(d.residual_ms) < 1e-12


def test_rows_are_folded_not_dropped() -> None:
    slow = [*BASE[:2], Op("aten::linear", 10, 150), *BASE[3:]]
    d = diff(build(BASE)[0], build(slow)[0])
    shown = d.folded(min_ms=0.01)
    assert shown[-1].kind == "other"
    assert sum(r.delta_ms for r in shown) == pytest.approx(sum(r.delta_ms for r in d.rows))
    assert sum(r.a_ms for r in shown) == pytest.approx(d.a.step_ms)


def test_bad_step_choice_is_one_error() -> None:
    from neuron_profiler.errors import NeuronProfilerError

    a, _ = build(BASE)
    with pytest.raises(NeuronProfilerError, match="step 9 not in both"):
        diff(a, a, steps="9")
    with pytest.raises(NeuronProfilerError, match="expected auto"):
        diff(a, a, steps="five")
