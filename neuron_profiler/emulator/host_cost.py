"""The emulator's own host time per op, beyond what the framework would spend: emulator overhead.

On Trainium an eager op costs the host the framework's work (the Python call, autograd, the
dispatcher: these run for real on the emulated device too) plus the backend's: finding the op's
compiled kernel and submitting it, ``ChipSpec.host_launch_ns`` (docs/chips.md). Here the backend
is Python: PyTorch's Python-subclass boundary around ``__torch_dispatch__`` (the arguments turned
into Python objects, the result back), the size/stride queries that the ``"sizes"`` policy routes
through Python (field reads in a C++ backend), and dispatch.py itself. All of it but
``host_launch_ns`` per launching op (nothing for views, allocations and queries) is recorded, while
a trace captures, as an ``emulator overhead: dispatch`` span that the analyzer discounts like the
numerics mode's math. So the host time left in the trace is the framework's plus the modelled
launch cost, what the device would have seen.

The boundary lies outside what dispatch.py can time: ``calibrate`` measures it once per process
(``enable`` calls it: a few ms), and ``account`` places it around the timed dispatch. The span
drawn is the timed dispatch alone (so it nests in the op's host spans and holds the op's runtime
call); the boundary and queries before it and the boundary after it less the framework's launch
cost are figures on it (``before_ns``, ``after_ns``: args ``overhead before (ns)`` / ``overhead
after (ns)``), which the analyzer adds back (``AnalysisContext.emulator_overhead``). Host work that a real device costs too is never counted: CPU-fallback ops, modelled
waits (a full launch queue), copies and syncs (their own host model, copies.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from neuron_profiler.runtime_trace import format as F

_CALIBRATION_RUNS = 300


@dataclass(frozen=True)
class Boundary:
    """Host ns of PyTorch's Python-subclass boundary per dispatched op (before entering and after
    leaving ``__torch_dispatch__``), per scalar metadata query answered in Python (``dim``,
    ``numel``, one size) and per whole-sizes or whole-strides query (a tuple: what the profiler's
    ``record_shapes`` asks of every input of every op)."""

    before_ns: int
    after_ns: int
    query_ns: int
    array_query_ns: int


class Ledger:
    """Per-process accounting state: the boundary (calibrated on first use), the metadata
    queries since the last accounted op (tensor.py counts them: scalar and whole-array ones),
    where the last span ended (the next never reaches back over it) and the capture it was in."""

    __slots__ = ("boundary", "queries", "array_queries", "last_end_ns", "capture_start_ns")

    def __init__(self) -> None:
        self.boundary: Boundary | None = None
        self.queries = 0
        self.array_queries = 0
        self.last_end_ns = 0
        self.capture_start_ns = -1


LEDGER = Ledger()
_UNCALIBRATED = Boundary(0, 0, 0, 0)  # before enable() calibrated: the timed dispatch only


def account(timeline: Any, core: int, op: str, launches: bool, begin_ns: int, end_ns: int) -> None:
    """Record the emulator's share of one op's host time: ``[begin_ns, end_ns]`` is the timed
    dispatch; the boundary and the size queries since the last op come before and after it;
    ``launches``: the op submits device work (``host_launch_ns`` of it is the framework's)."""
    ledger = LEDGER
    b = ledger.boundary or _UNCALIBRATED
    if ledger.capture_start_ns != timeline.rt.capture_start_ns:
        # The first op of a capture: queries are counted between captures too (tensor.py asks
        # no clock), so these may be any number made before it began. Priced, they would reach
        # back to the capture's start and discount host time that was the script's (a data
        # stall before the first op); dropped, this one op keeps a few µs of the emulator's.
        ledger.capture_start_ns = timeline.rt.capture_start_ns
        ledger.queries = ledger.array_queries = 0
    queried = ledger.queries * b.query_ns + ledger.array_queries * b.array_query_ns
    ledger.queries = ledger.array_queries = 0
    start = begin_ns - b.before_ns - queried
    # never before the last span, nor before the capture began (an op whose boundary straddles
    # the start would give a span the collector's window leaves out)
    floor = max(ledger.last_end_ns, timeline.rt.capture_start_ns)
    start = max(start, floor)
    stop = end_ns + b.after_ns
    if launches:
        stop -= timeline.model.chip.host_launch_ns
    if stop > start:
        # drawn: the timed dispatch alone, which nests in the op's host spans and holds its
        # runtime call; the boundary, the queries and the framework's launch cost (taken from
        # the end) are figures on it (``before_ns`` / ``after_ns``)
        drawn_start = max(begin_ns, floor)
        if drawn_start < end_ns:
            timeline.overhead(
                core,
                op,
                F.OVERHEAD_DISPATCH,
                drawn_start,
                end_ns,
                before_ns=drawn_start - start,
                after_ns=stop - end_ns,
            )
        else:  # (the timed dispatch lies before the floor: nothing to draw it on)
            timeline.overhead(core, op, F.OVERHEAD_DISPATCH, start, stop)
        ledger.last_end_ns = stop


def skip() -> None:
    """An op whose host time is not the emulator's (fallback, waits): its queries stay host time."""
    LEDGER.queries = LEDGER.array_queries = 0


def calibrate(
    execute: Callable[[Any, tuple, dict], Any],
    device_tensor: Callable[[torch.Tensor], Any],
    swap_executor: Callable[[Callable], Callable],
    runs: int = _CALIBRATION_RUNS,
    record: bool = False,
) -> Boundary:
    """Measure the Python-subclass boundary around ``execute`` (dispatch.execute) on a view op
    (``aten::t``: no device work, a new device tensor returned as by any op): the least time
    from the call to ``execute``'s entry less the same call on a CPU tensor (the dispatcher's
    own work, real on any backend), from its exit to the return, and of a ``dim`` query and a
    whole-sizes query, each less the CPU one. ``record``: with record functions on (under a
    profiler: its cost per boundary).
    ``device_tensor`` wraps a host tensor as a device one and ``swap_executor`` installs an
    executor, returning the one it replaced (tensor.py's, passed in: tensor.py reads LEDGER).
    """
    x = device_tensor(torch.zeros(2, 2))
    cpu = torch.zeros(2, 2)
    op = torch.ops.aten.t.default
    clock = time.perf_counter_ns
    stamps = [0, 0]

    def timed(func: Any, args: tuple, kwargs: dict) -> Any:
        stamps[0] = clock()
        out = execute(func, args, kwargs)
        stamps[1] = clock()
        return out

    def least(call: Callable[[], Any], best: int) -> int:
        """The smaller of ``best`` and this call's time (each side of a difference alike)."""
        t0 = clock()
        call()
        return min(best, clock() - t0)

    before = after = query = cpu_call = cpu_query = sizes = cpu_sizes = 1 << 62
    saved = swap_executor(timed)
    enable_record = torch._C._autograd._enable_record_function
    enable_record(record)
    try:
        for _ in range(runs):
            t0 = clock()
            op(x)
            t1 = clock()
            before = min(before, stamps[0] - t0)
            after = min(after, t1 - stamps[1])
            cpu_call = least(lambda: op(cpu), cpu_call)
            query, cpu_query = least(x.dim, query), least(cpu.dim, cpu_query)
            sizes, cpu_sizes = least(x.size, sizes), least(cpu.size, cpu_sizes)
    finally:
        enable_record(True)
        swap_executor(saved)
    LEDGER.queries = LEDGER.array_queries = 0
    return Boundary(
        max(0, before - cpu_call),
        max(0, after),
        max(0, query - cpu_query),
        max(0, sizes - cpu_sizes),
    )
