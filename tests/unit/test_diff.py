"""``analysis.diff`` on synthetic pairs with the change injected on purpose, each against the
expected rows of a microsecond walk of its timeline (tests/diff_timeline.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from diff_timeline import BASE, Op, build, expected
from trace_factory import Build

from neuron_profiler.analysis.diff import IDLE, diff
from neuron_profiler.trace import vocabulary as V

TOL_MS = 1e-9


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


def test_steps_without_ops_diff_as_idle_host_time() -> None:
    """A side whose steps hold no op (only step annotations) is all host idle: the other side's
    op is its own row and the invariant holds (it raised IndexError before)."""

    def steps_only(op_us: int):  # noqa: ANN202
        b = Build()
        for n in range(2):
            t = 1000 + n * 1000
            if op_us:
                b.host("aten::mm", t + 10, t + 10 + op_us)
            b.step(n + 1, t, t + 1000)
        return b.b.build()

    empty = steps_only(0)
    same = diff(empty, empty)
    assert same.delta_ms == 0 and all(r.delta_ms == 0 for r in same.rows)
    d = diff(empty, steps_only(200))
    mm = next(r for r in d.rows if r.key.endswith("aten::mm"))
    assert (mm.a_ms, mm.b_ms) == (0.0, pytest.approx(0.200))
    idle = [r for r in d.rows if r.kind == IDLE]
    assert sum(r.a_ms for r in idle) == pytest.approx(1.000)
    assert sum(r.b_ms for r in idle) == pytest.approx(0.800)
    assert sum(r.delta_ms for r in d.rows) + d.residual_ms == pytest.approx(d.delta_ms, abs=1e-12)


def test_device_only_traces_diff_by_kernel() -> None:
    """No host row at all (a profile of device activity only): each side's one step is its
    device work's span (µs: A 1000-1400, B 1000-1500); the kernels are their own rows (no
    launching op): 'k' runs 200 µs in A, 300 in B; the idle between them 200 in both."""

    def side(second_end_us: int):  # noqa: ANN202
        b = Build()
        b.kernel(1000, 1100, name="k")
        b.kernel(1300, second_end_us, name="k")
        return b.b.build()

    d = diff(side(1400), side(1500))
    assert d.delta_ms == pytest.approx(0.1, abs=TOL_MS)
    (k,) = [r for r in d.rows if r.kind != IDLE and r.key.endswith("k")]
    assert (k.a_ms, k.b_ms) == pytest.approx((0.2, 0.3), abs=TOL_MS)
    assert sum(r.delta_ms for r in d.rows if r.kind == IDLE) == pytest.approx(0.0, abs=TOL_MS)
    assert abs(d.residual_ms) <= 1e-9
