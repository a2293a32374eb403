"""Honest host cost under ``record_shapes`` (issue 27, point 6(c)): the profiler asks every input
of every op for its whole sizes and strides; on a C++ backend those are field reads, on the
emulated device each is a call into Python (the ``"sizes"`` dispatch policy). That cost is the
emulator's: the queries are answered in ``__torch_dispatch__`` (never the execution point), counted,
and priced at the calibrated whole-array cost inside the op's ``emulator overhead`` span, which
the analyzer discounts.

Tested without a clock: an injected price per whole-array query (10 ms, far above any op's own
dispatch) makes each op's span grow by that price times the queries the profiler made, one
count per tensor input. How close the discount comes to the CPU's host time on a real clock is
measured in bench/bench_record_shapes_cost.py (wall-clock figures belong in bench/)."""

from __future__ import annotations

import json
import time

import pytest

torch = pytest.importorskip("torch")

from torch.profiler import ProfilerActivity, profile  # noqa: E402

import neuron_profiler.emulator as emu  # noqa: E402
from neuron_profiler import NEURON  # noqa: E402
from neuron_profiler.emulator import dispatch, host_cost  # noqa: E402

pytestmark = pytest.mark.torch
PRICE_NS = 10_000_000  # per whole-array query, injected: dwarfs any op's own dispatch time


def _dispatch_spans_ms(record_shapes: bool, tmp_path, queries_before: int = 0) -> dict[str, float]:  # noqa: ANN001
    """Each op's ``emulator overhead: dispatch`` time (ms: the span and its before/after args)
    with the injected price; ops spaced
    wider than their priced queries so no span is clipped by its predecessor's. The capture's
    first op (``aten::neg``) has its queries dropped with any counted before the
    capture (host_cost.account); ``queries_before``: whole-array queries made before it."""
    emu.enable(cores=1, chip="trn2", numerics=False)
    saved = host_cost.LEDGER.boundary
    host_cost.LEDGER.boundary = host_cost.Boundary(0, 0, 0, PRICE_NS)
    x, y = torch.zeros(4, 4).to("neuron"), torch.zeros(4, 4).to("neuron")
    ops = {
        "aten::neg": lambda: x.neg(),
        "aten::add": lambda: x.add(y),
        "aten::t": lambda: x.t(),
        "aten::cat": lambda: torch.cat([x, y, x]),
    }
    for run in ops.values():  # warm: first calls pay one-off costs
        run()
    for _ in range(queries_before):
        x.size()
    try:
        with profile(
            activities=[ProfilerActivity.CPU, NEURON], record_shapes=record_shapes
        ) as prof:
            for run in ops.values():
                time.sleep(0.25)
                run()
    finally:
        host_cost.LEDGER.boundary = saved
    path = tmp_path / f"shapes-{record_shapes}.json"
    prof.export_chrome_trace(str(path))
    return {  # the span and the time its args say lies just before / after it
        e["args"]["op"]: (
            e["dur"] * 1e3
            + e["args"].get("overhead before (ns)", 0)
            + e["args"].get("overhead after (ns)", 0)
        )
        / 1e6
        for e in json.loads(path.read_text())["traceEvents"]
        if e.get("name") == "emulator overhead: dispatch"
    }


def test_record_shapes_queries_are_priced_inside_each_ops_overhead_span(tmp_path) -> None:  # noqa: ANN001
    inputs = {"aten::add": 2, "aten::t": 1, "aten::cat": 3}
    price_ms = PRICE_NS / 1e6
    without = _dispatch_spans_ms(False, tmp_path)
    assert set(without) == {"aten::neg", *inputs}
    assert all(round(ms / price_ms) == 0 for ms in without.values()), without
    shapes = _dispatch_spans_ms(True, tmp_path)
    queries = {op: round(ms / price_ms) for op, ms in shapes.items() if op in inputs}
    per_input = {op: queries[op] / n for op, n in inputs.items()}
    # at least sizes and strides of every tensor input, the same count for each input of any op
    assert len(set(per_input.values())) == 1 and min(per_input.values()) >= 2, queries


def test_queries_made_before_a_capture_are_not_priced_into_it(tmp_path) -> None:  # noqa: ANN001
    """Queries are counted between captures too; 100 of them at the injected price would be a
    second of emulator time that the capture's first op's span reached back over (clipped at
    the capture's start: 0.25 s of the script's host time discounted). None of it is priced."""
    spans = _dispatch_spans_ms(False, tmp_path, queries_before=100)
    price_ms = PRICE_NS / 1e6
    assert all(round(ms / price_ms) == 0 for ms in spans.values()), spans


def test_whole_size_and_stride_queries_skip_the_execution_point(monkeypatch) -> None:  # noqa: ANN001
    """The profiler's sizes/strides queries are answered in ``__torch_dispatch__`` (counted, no
    span per query), never by ``dispatch.execute``."""
    emu.enable(cores=1, chip="trn2", numerics=False)
    seen: list[str] = []
    real = dispatch.execute

    def spy(func, args, kwargs):  # noqa: ANN001, ANN202
        seen.append(str(func))
        return real(func, args, kwargs)

    from neuron_profiler.emulator import tensor

    old = tensor.swap_executor(spy)
    try:
        x = torch.zeros(4, 4).to("neuron")
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True):
            x.t().add(x)
    finally:
        tensor.swap_executor(old)
    assert "aten.t.default" in seen and "aten.add.Tensor" in seen
    assert not {"aten.size.default", "aten.stride.default"} & set(seen)
