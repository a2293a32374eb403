"""Cost of the emulated allocator (emulator/memory.py), side by side in one run:

    python bench/bench_memory.py              # ~15 s
    python bench/bench_memory.py --ops 5000 --blocks 9

An allocation-bound loop (16x16 adds: every op allocates its output and frees the previous one,
numerics mode) under six columns:

- ``no-accounting``: the allocator replaced by a no-op (the device without memory statistics);
- ``stats-by-tensor``: statistics alone, each buffer freed when the tensor that allocated it dies
  (a weak reference to the tensor: the accounting before buffers were tracked by their storage);
- ``stats-only``: an allocator that keeps the statistics and nothing else (no profiler check,
  no runtime events, no history), a buffer freed when its host storage dies, as shipped: the
  baseline for the next column;
- ``shipped``: the allocator as shipped, no profiler running (the profiler gate is one flag test);
- ``profile``: inside ``torch.profiler.profile`` without ``profile_memory``;
- ``profile_memory``: the same with ``profile_memory=True`` (each allocation and free reported).

Printed as us/op and ratios: stats-only / stats-by-tensor is what tracking a buffer by its
storage costs, shipped / stats-only what the reporting path costs when no profile asks for
memory, profile_memory / profile what asking costs. A second part times the allocator alone
(allocate, then the free when the owner, the only holder of its host tensor, dies) per buffer,
in ns, where an op's noise does not hide it: the first four columns; ``tensor+use-count``
(``stats-only``'s rule, a buffer freed once its storage dies, found instead by the allocating
tensor's weak reference and c10's use count of the storage at its death); ``no-profiler-gate``
(the shipped allocator minus its profiler checks); ``sampling`` (the shipped allocator while a
collector session samples device memory counters, ``Allocator.start_samples``: one (time,
core, bytes) sample per allocation and free). Blocks are interleaved in a shuffled order and
the best (minimum) block is reported, as timeit does: other load only ever adds time.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import time
from collections.abc import Callable, Iterator

import neuron_profiler.emulator as emu

emu.enable(cores=2, chip="trn2")

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from neuron_profiler.emulator import dispatch, memory  # noqa: E402


class _NoAccounting:
    def allocate(self, tensor: object, core: int, nbytes: int, addr: int) -> None:
        pass


class _StatsOnly(memory.Allocator):
    """Statistics alone: the allocator minus the profiler gate, runtime events and history (a
    buffer freed when its host storage dies, as shipped)."""

    def allocate(self, tensor: object, core: int, nbytes: int, addr: int) -> None:
        buf = memory.Buffer(tensor._elem.untyped_storage(), _stats_only_release)  # type: ignore[attr-defined]
        buf.core, buf.nbytes = core, nbytes
        self.live[id(buf)] = buf
        s = self.stats[core]
        s.allocated += nbytes
        s.count += 1
        s.allocs += 1
        s.bytes_in += nbytes
        if s.allocated > s.peak:
            s.peak = s.allocated
        if s.count > s.peak_count:
            s.peak_count = s.count

    def release(self, buf: memory.Buffer) -> None:
        if self.live.pop(id(buf), None) is None:
            return
        s = self.stats[buf.core]
        s.allocated -= buf.nbytes
        s.count -= 1
        s.frees += 1
        s.bytes_out += buf.nbytes


class _StatsByTensor(_StatsOnly):
    """``stats-only`` with each buffer freed when the tensor that allocated it dies (a weak
    reference to the tensor, the accounting before buffers were tracked by their storage):
    what tracking the storage costs."""

    def allocate(self, tensor: object, core: int, nbytes: int, addr: int) -> None:
        buf = memory.Buffer(tensor, _by_tensor_release)
        buf.core, buf.nbytes = core, nbytes
        self.live[id(buf)] = buf
        s = self.stats[core]
        s.allocated += nbytes
        s.count += 1
        s.allocs += 1
        s.bytes_in += nbytes
        if s.allocated > s.peak:
            s.peak = s.allocated
        if s.count > s.peak_count:
            s.peak_count = s.count


class _ByTensorUseCount(_StatsOnly):
    """Statistics alone, a buffer freed once its storage dies found another way: the tensor
    that allocated it weakly referenced, its host tensor held, and at that tensor's death
    c10's use count of the storage asked whether anything else holds it (the alternative to a
    weak reference to the storage; what an aliased buffer then does is not timed)."""

    def allocate(self, tensor: object, core: int, nbytes: int, addr: int) -> None:
        buf = memory.Buffer(tensor, _use_count_died)
        buf.core, buf.nbytes, buf.held = core, nbytes, tensor._elem  # type: ignore[attr-defined]
        self.live[id(buf)] = buf
        s = self.stats[core]
        s.allocated += nbytes
        s.count += 1
        s.allocs += 1
        s.bytes_in += nbytes
        if s.allocated > s.peak:
            s.peak = s.allocated
        if s.count > s.peak_count:
            s.peak_count = s.count

    def died(self, buf: memory.Buffer) -> None:
        if memory._storage_refs(buf.held) <= memory._OWN_STORAGE_REFS:
            buf.held = None
            self.release(buf)


class _NoProfilerGate(memory.Allocator):
    """The shipped allocator minus its profiler checks (a copy of allocate and release without
    the ``_is_profiler_enabled`` lines, the held host tensor and the kept-buffer test): what the
    profile_memory path costs when off."""

    def allocate(self, tensor: object, core: int, nbytes: int, addr: int) -> None:
        buf = memory.Buffer(tensor._elem.untyped_storage(), _no_gate_release)  # type: ignore[attr-defined]
        buf.core, buf.nbytes, buf.addr, buf.frames = core, nbytes, addr, None
        self.live[id(buf)] = buf
        s = self.stats[core]
        s.allocated += nbytes
        s.count += 1
        s.allocs += 1
        s.bytes_in += nbytes
        if s.allocated > s.peak:
            s.peak = s.allocated
        if s.count > s.peak_count:
            s.peak_count = s.count
        if self.samples is not None:
            self.samples.add(core, s.allocated)
        tl = self.timeline
        buf.tensor_id = (
            tl.allocate(core, nbytes) if tl is not None and tl.rt.tracking_tensors else 0
        )
        history = self.history
        if history is not None:
            if history.stacks:
                buf.frames = memory.python_frames()
            if history.trace:
                history.add(core, "alloc", buf)

    def release(self, buf: memory.Buffer) -> None:
        if self.live.pop(id(buf), None) is None:
            return
        core = buf.core
        if core >= len(self.stats):
            return
        s = self.stats[core]
        s.allocated -= buf.nbytes
        s.count -= 1
        s.frees += 1
        s.bytes_out += buf.nbytes
        if self.samples is not None:
            self.samples.add(core, s.allocated)
        tl = self.timeline
        if buf.tensor_id and tl is not None:
            tl.free(core, buf.tensor_id, buf.nbytes)
        history = self.history
        if history is not None and history.trace:
            history.add(core, "free_requested", buf)
            history.add(core, "free_completed", buf)


_NO_GATE = _NoProfilerGate()
_NO_GATE.configure(2, dispatch.STATE.timeline)


def _no_gate_release(buf: memory.Buffer) -> None:
    _NO_GATE.release(buf)


_STATS_ONLY = _StatsOnly()
_STATS_ONLY.configure(2, None)


def _stats_only_release(buf: memory.Buffer) -> None:
    _STATS_ONLY.release(buf)


_BY_TENSOR = _StatsByTensor()
_BY_TENSOR.configure(2, None)
_USE_COUNT = _ByTensorUseCount()
_USE_COUNT.configure(2, None)


def _use_count_died(buf: memory.Buffer) -> None:
    _USE_COUNT.died(buf)


def _by_tensor_release(buf: memory.Buffer) -> None:
    _BY_TENSOR.release(buf)


@contextlib.contextmanager
def _column(name: str) -> Iterator[None]:
    shipped = dispatch.ALLOCATOR
    if name == "no-accounting":
        dispatch.ALLOCATOR = _NoAccounting()  # type: ignore[assignment]
    elif name == "stats-only":
        dispatch.ALLOCATOR = _STATS_ONLY
    elif name == "stats-by-tensor":
        dispatch.ALLOCATOR = _BY_TENSOR
    try:
        if name.startswith("profile"):
            memory_on = name == "profile_memory"
            with profile(activities=[ProfilerActivity.CPU], profile_memory=memory_on):
                yield
        else:
            yield
    finally:
        dispatch.ALLOCATOR = shipped


COLUMNS = ("no-accounting", "stats-by-tensor", "stats-only", "shipped", "profile", "profile_memory")


def _loop(n: int) -> Callable[[], None]:
    a = torch.ones(16, 16, device="neuron")

    def run() -> None:
        x = a
        for _ in range(n):
            x = x + a

    return run


class _Owner:
    """Stands in for a device tensor: weak-referenceable, holds its host tensor (``_elem``,
    the only holder of its storage), dies when dropped."""

    __slots__ = ("__weakref__", "_elem")

    def __init__(self, elem: torch.Tensor) -> None:
        self._elem = elem


_ALLOCATORS = {
    "no-accounting": _NoAccounting(),
    "stats-by-tensor": _BY_TENSOR,
    "stats-only": _STATS_ONLY,
    "tensor+use-count": _USE_COUNT,
    "no-profiler-gate": _NO_GATE,
}
ALONE = ("no-accounting", "stats-by-tensor", "stats-only", "tensor+use-count")
ALONE += ("no-profiler-gate", "shipped", "sampling")


def alloc_free_ns(name: str, n: int) -> float:
    """ns per allocate + free of one buffer with this column's allocator."""
    allocator = _ALLOCATORS.get(name, dispatch.ALLOCATOR)
    alloc = allocator.allocate
    if name == "sampling":
        allocator.start_samples(4 * n)  # room for every sample: none counted as dropped
    elems = [torch.empty(1) for _ in range(n)]  # made outside the clock
    pop = elems.pop
    t0 = time.perf_counter_ns()
    for _ in range(n):
        alloc(_Owner(pop()), 0, 1024, 4096)  # the owner dies at once: the free runs here
    elapsed = time.perf_counter_ns() - t0
    if name == "sampling":
        allocator.stop_samples()
    return elapsed / n


def op_gate_ns(n: int) -> float:
    """ns per op of the execution point's own profiler test (``dispatch.execute``: host memory
    reports off while a profile records memory), against the same loop without it."""
    from torch.autograd import profiler as autograd_profiler

    allocator = dispatch.ALLOCATOR
    t0 = time.perf_counter_ns()
    for _ in range(n):
        quiet = autograd_profiler._is_profiler_enabled and allocator.host_reports_off()
        if quiet:
            allocator.host_reports_on()
    gated = time.perf_counter_ns() - t0
    t0 = time.perf_counter_ns()
    for _ in range(n):
        quiet = False
        if quiet:
            allocator.host_reports_on()
    return (gated - (time.perf_counter_ns() - t0)) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--blocks", type=int, default=7)
    args = parser.parse_args()
    run = _loop(args.ops)
    run()  # warm the op caches
    best = dict.fromkeys(COLUMNS, float("inf"))
    alone = dict.fromkeys(ALONE, float("inf"))
    op_gate = float("inf")
    order = list(COLUMNS)
    for _ in range(args.blocks):
        random.shuffle(order)
        for name in order:
            with _column(name):
                t0 = time.perf_counter()
                run()
                best[name] = min(best[name], time.perf_counter() - t0)
        op_gate = min(op_gate, op_gate_ns(50 * args.ops))
        for name in random.sample(ALONE, len(ALONE)):
            alone[name] = min(alone[name], alloc_free_ns(name, 20 * args.ops))
    us = {k: v / args.ops * 1e6 for k, v in best.items()}
    print(f"per allocating op (16x16 add, best of {args.blocks} x {args.ops}):")
    for k, v in us.items():
        print(f"  {k:15s} {v:8.2f} us/op")
    print(f"  stats / no accounting          x{us['stats-only'] / us['no-accounting']:.3f}")
    print(f"  stats-only / stats-by-tensor   x{us['stats-only'] / us['stats-by-tensor']:.3f}")
    print(f"  shipped / stats-only           x{us['shipped'] / us['stats-only']:.3f}")
    print(f"  profile_memory / profile       x{us['profile_memory'] / us['profile']:.3f}")
    print(f"per buffer, the allocator alone (allocate + free, best of {args.blocks}):")
    for k, v in alone.items():
        print(f"  {k:15s} {v:8.1f} ns   {v / 10 / us['shipped']:.2f}% of a shipped op")
    keying = alone["stats-only"] - alone["stats-by-tensor"]
    print(f"  tracking the storage (stats-only - stats-by-tensor) {keying:6.1f} ns/buffer,")
    ratio = alone["stats-only"] / alone["stats-by-tensor"]
    print(f"  {keying / 10 / us['shipped']:.2f}% of a shipped op, x{ratio:.3f}")
    other = alone["tensor+use-count"] - alone["stats-by-tensor"]
    print(
        f"  the same by the use count (tensor+use-count - stats-by-tensor) {other:6.1f} ns/buffer"
    )
    gate = alone["shipped"] - alone["no-profiler-gate"]
    print(f"  the profiler gate (shipped - no-profiler-gate) {gate:6.1f} ns/buffer,")
    ratio = alone["shipped"] / alone["no-profiler-gate"]
    print(f"  {gate / 10 / us['shipped']:.2f}% of a shipped op, x{ratio:.3f}")
    sampling = alone["sampling"] - alone["shipped"]
    print(f"  device memory counters sampling (sampling - shipped) {sampling:6.1f} ns/buffer,")
    print(f"  {sampling / 10 / us['shipped']:.2f}% of a shipped op")
    print(f"per op, the execution point's host-report test: {op_gate:.1f} ns,")
    print(f"  {op_gate / 10 / us['shipped']:.2f}% of a shipped op")


if __name__ == "__main__":
    main()
