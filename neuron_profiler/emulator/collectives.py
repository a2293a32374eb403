"""Collectives on the emulated device: ``c10d::*`` ops on neuron tensors run over the real
process group (gloo) on their host memory, and occupy the core's collective queue.

The data exchange is real (results equal gloo on CPU); the device time is modelled (ring
algorithm, ``RooflineModel.collective_ns``). The collective overlaps compute launched after it;
work that reads its result waits for it on the device (``dispatch.STATE.pending``), ``Work.wait()``
makes the current stream wait for it on the device (streams.py), and host reads (``.item()``,
``.cpu()``, synchronize) wait for it too.

Timing couples the ranks: a collective starts on every rank's device when the last one has
arrived. Each rank's arrival is shared over the group by an all-gather started at the launch and
not waited for there: as with NCCL, the launch returns at once and the host goes on launching,
also behind a pending collective of the same group, which the new one queues behind
(``DeviceTimeline.launch_collective``). The collective is resolved
(``scheduler.PendingCollective``) when something needs its end: work reading its output, its
``Work.wait()``, a collective of another group on the core, a full launch queue, a host sync, a
capture's stop. Only then may the host block for a late rank (an emulator-overhead span). Gloo
tags each collective when it is issued and runs it on its own threads, so ranks that issue them
in the same order (as the real collectives need) may wait for them at any time.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch

from neuron_profiler.emulator.dispatch import (
    STATE,
    OpInfo,
    Unwrapped,
    _set_record_function,
    register_special,
    run_inner,
    stream_of,
    wrap,
)
from neuron_profiler.emulator.process_groups import host_backend
from neuron_profiler.emulator.scheduler import PendingCollective
from neuron_profiler.runtime_trace import format as F

_NAMES = {
    "allreduce_": "allreduce",
    "allreduce_coalesced_": "allreduce",
    "allgather_": "allgather",
    "_allgather_base_": "allgather",
    "allgather_into_tensor_coalesced_": "allgather",
    "allgather_coalesced_": "allgather",
    "reduce_scatter_": "reduce_scatter",
    "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "broadcast_": "broadcast",
    "reduce_": "reduce",
    "alltoall_": "alltoall",
    "alltoall_base_": "alltoall",
    "gather_": "gather",
    "scatter_": "scatter",
    "barrier": "barrier",
    "send": "send",
    "recv_": "recv",
    "recv_any_source_": "recv",
}


def _group(args: tuple) -> Any:
    """The ProcessGroup argument (c10d ops receive it boxed as a ScriptObject)."""
    from torch._C._distributed_c10d import ProcessGroup

    for a in args:
        if isinstance(a, ProcessGroup):
            return a
        if isinstance(a, torch.ScriptObject):
            try:
                return ProcessGroup.unbox(a)
            except RuntimeError:  # another bound class (e.g. the ReduceOp)
                continue
    return None


def _ranks(pg: Any) -> tuple[list[int], str]:
    if pg is None:
        return [0], "default"
    from torch.distributed import distributed_c10d as c10d

    try:
        return list(c10d.get_process_group_ranks(pg)), str(pg.group_name)
    except (ValueError, RuntimeError, KeyError):  # unknown to the Python registry: local ranks
        return list(range(pg.size())), "unknown"


def collective(func: Any, info: OpInfo, args: tuple, kwargs: dict) -> Any:
    launch_ns = time.time_ns()
    u = Unwrapped()
    u.args = tuple(u.take(a) for a in args)
    u.kwargs = {k: u.take(v) for k, v in kwargs.items()}
    pg = _group(args)
    host_backend(pg)  # the exchange runs on the host memory: a CPU collective of the group
    out = run_inner(func, u.args, u.kwargs)
    if u.core is None:  # no device tensor involved (e.g. a CPU barrier)
        return out
    core = u.core
    written: list[torch.Tensor] = []
    result = _device_work(out, wrap(out, u, core, True, written), u.alias)
    tl = STATE.timeline
    if tl is None:
        return result
    device_elems = [t for t in u.inputs if id(t) in u.alias]
    name = _NAMES.get(info.name.split("::", 1)[1], info.name.split("::", 1)[1])
    nbytes = _buffer_bytes(u.args, _BUFFER_ARG.get(name, 0)) or sum(
        t.numel() * t.element_size() for t in device_elems
    )
    ranks, group = _ranks(pg)
    couple = pg is not None and pg.size() > 1 and name not in _POINT_TO_POINT
    pending = tl.launch_collective(
        core,
        info.name,
        collective=name,
        nbytes=nbytes,
        ranks=ranks,
        group=group,
        launch_ns=launch_ns,
        exchange=_arrival_exchange(pg) if couple else None,
        stream=stream_of(core),
        chain=group != "unknown",  # a group torch does not know cannot be told apart
    )
    # every buffer the collective touches is ready only at its end (resolved when first needed)
    # and holds its values once the real exchange is done (``data_ready``, even when resolved)
    pending.data_ready = _data_ready(_futures(out))
    ready = pending if pending.data_ready is not None or not pending.resolved else pending.end
    for t in device_elems:
        STATE.pending[t.untyped_storage().data_ptr()] = ready
    _remember(result, pending)
    return result


# The argument holding the whole buffer the ring moves (timing.collective_ns): the output for
# all-gather (the gathered tensor), the input for reduce-scatter (every rank's full buffer, of
# which each keeps 1/n); others read and write one buffer, their first argument.
_BUFFER_ARG = {"reduce_scatter": 1}


def _buffer_bytes(args: tuple, index: int) -> int:
    if len(args) <= index:
        return 0
    found = args[index] if isinstance(args[index], (list, tuple)) else [args[index]]
    return sum(t.numel() * t.element_size() for t in _flat(found) if isinstance(t, torch.Tensor))


def _pair_up(host: Any, device: Any, by_id: dict[int, Any], by_mem: dict[tuple, Any]) -> None:
    if isinstance(host, torch.Tensor) and isinstance(device, torch.Tensor):
        by_id[id(host)] = device
        by_mem[_mem(host)] = device
    elif isinstance(host, (list, tuple)) and isinstance(device, (list, tuple)):
        for h, d in zip(host, device, strict=False):
            _pair_up(h, d, by_id, by_mem)


def _mem(t: torch.Tensor) -> tuple:
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride())


def _to_device(value: Any, by_id: dict[int, Any], by_mem: dict[tuple, Any]) -> Any:
    if isinstance(value, torch.Tensor):
        dev = by_id.get(id(value))
        if dev is None:
            dev = by_mem.get(_mem(value), value)
        return dev
    if isinstance(value, (list, tuple)):
        return type(value)([_to_device(v, by_id, by_mem) for v in value])
    return value


def _device_work(out: Any, result: Any, alias: dict[int, Any]) -> Any:
    """The op's ``Work`` with a future whose value holds the caller's own device tensors (the
    real exchange ran on their host memory): DDP's reducer then copies device to device, and
    comm hooks that read ``fut.value()`` run on the device, as with NCCL. ``alias`` maps the
    host memory of every device argument to its tensor, so ops that return only a ``Work``
    (the coalesced ones) and nested results (lists of lists) map back too."""
    from torch._C._distributed_c10d import _create_work_from_future

    by_id: dict[int, Any] = dict(alias)
    by_mem: dict[tuple, Any] = {_mem(d._elem): d for d in alias.values()}
    single = not isinstance(out, (list, tuple))
    outs, items = ([out], [result]) if single else (list(out), list(result))
    if not single:
        _pair_up(out, result, by_id, by_mem)
    for i, o in enumerate(outs):
        future = _future_of(o)
        if future is None:
            continue
        fut = future.then(lambda f: _to_device(f.value(), by_id, by_mem))
        items[i] = _create_work_from_future(fut).boxed()
    return items[0] if single else type(result)(items)


_POINT_TO_POINT = frozenset({"send", "recv"})


class _Arrivals:
    """Arrivals being all-gathered over a group (two int64 per rank, ``ready_ns`` and
    ``chained_ns``: scheduler.ArrivalExchange; on the host, next to the real collective):
    started at the launch, waited for when the collective is resolved."""

    __slots__ = ("work", "out")

    def __init__(self, pg: Any, ready_ns: int, chained_ns: int) -> None:
        mine = torch.tensor([ready_ns, chained_ns], dtype=torch.int64)
        self.out = [torch.zeros(2, dtype=torch.int64) for _ in range(pg.size())]
        _set_record_function(False)  # not a user op: keep it out of torch.profiler
        try:
            self.work = pg.allgather([self.out], [mine])
        finally:
            _set_record_function(True)

    def is_completed(self) -> bool:
        return bool(self.work.is_completed())

    def latest(self) -> tuple[int, int]:
        _set_record_function(False)
        try:
            (_original_wait[0] if _original_wait else type(self.work).wait)(self.work)
        finally:
            _set_record_function(True)
        pairs = [t.tolist() for t in self.out]  # no aten op: nothing for torch.profiler
        return max(p[0] for p in pairs), max(p[1] for p in pairs)


def _arrival_exchange(pg: Any) -> Callable[[int, int], _Arrivals]:
    """Start sharing arrivals over ``pg`` (scheduler.ArrivalExchange)."""
    return lambda ready_ns, chained_ns: _Arrivals(pg, ready_ns, chained_ns)


def _data_ready(futures: list[Any]) -> Callable[[], None] | None:
    """Wait until the real exchange's results are in its buffers (``PendingCollective.
    data_ready``): an op reading them before ``Work.wait()`` then sees the reduced values, as
    the device ordering the emulator models says. Its futures are waited, not the works: a
    future is done before its callbacks run (DDP's comm hooks, which dispatch device ops that
    come here), and a work is not. (A gloo work without a future: its values land at wait().)"""
    if not futures:
        return None

    def wait() -> None:
        for future in futures:
            if not future.done():
                future.wait()

    return wait


def _future_of(value: Any) -> Any:
    """The future of a gloo ``Work`` a c10d op returned (boxed); None for anything else, or a
    work without one (gloo's for some ops: "getFuture not implemented")."""
    from torch._C._distributed_c10d import Work

    if not isinstance(value, torch.ScriptObject):
        return None
    try:
        return Work.unbox(value).get_future()
    except RuntimeError:  # another bound class, or no future
        return None


def _futures(out: Any) -> list[Any]:
    """The futures of the works a c10d op returned (alone or in its result tuple)."""
    items = out if isinstance(out, (list, tuple)) else [out]
    return [f for f in map(_future_of, items) if f is not None]


# the Work a device collective returned -> its collective (weak: gone with the Work)
_collective_of: weakref.WeakKeyDictionary[Any, PendingCollective] = weakref.WeakKeyDictionary()
# per thread, the Works the last collective launched on it returned, held until the next one:
# the op hands them to its caller boxed, and torch gives the caller the same Python object
# only while one is alive (else a new one, unknown to ``_collective_of``)
_handoff = threading.local()
_original_wait: list[Any] = []


def _remember(result: Any, pending: PendingCollective) -> None:
    """Map the Works a collective op returned (alone or in its result tuple) to it."""
    from torch._C._distributed_c10d import Work

    works = []
    for item in result if isinstance(result, (list, tuple)) else [result]:
        if isinstance(item, torch.ScriptObject):
            try:
                work = Work.unbox(item)
            except RuntimeError:  # another bound class
                continue
            _collective_of[work] = pending
            works.append(work)
    _handoff.works = works


def _wait(self: Any, *args: Any, **kwargs: Any) -> Any:
    """``Work.wait()`` from Python (``dist.all_reduce`` without ``async_op``, ``handle.wait()``):
    the real exchange is done by the original wait; then, as with NCCL, the *current stream* of
    the collective's core waits on the device until the collective has finished (streams.py):
    later work launched on it starts after the collective, which ends after every collective
    launched before it on its core (one queue, in order); other collectives and other cores are
    left as they are. Placing that wait needs the collective's end, so it is resolved here (with
    those before it). The host blocks only while a rank has not arrived (for the real data or
    the arrival times): NCCL's host would not, so that time is one emulator-overhead span
    (``collective_coupling``). A Work that is no device collective's (a CPU collective, a
    barrier) waits on the host only."""
    from neuron_profiler.emulator.streams import current_stream, wait_on_device

    pending = _collective_of.get(self) if STATE.timeline is not None else None
    if pending is None:
        return _original_wait[0](self, *args, **kwargs)
    begin = time.time_ns()
    blocks = not self.is_completed() or not pending.arrived()
    result = _original_wait[0](self, *args, **kwargs)
    wait_on_device(current_stream(pending.core), pending.end_ns(overhead=False))
    if blocks:
        pending.timeline.overhead(
            pending.core, pending.op, F.OVERHEAD_COUPLING, begin, time.time_ns()
        )
    works = getattr(_handoff, "works", ())
    if any(w is self for w in works):  # its caller has it: no need to hold it any longer
        _handoff.works = ()
    return result


def _patch_wait() -> None:
    from torch.distributed import Work

    if not _original_wait:
        _original_wait.append(Work.wait)
        Work.wait = _wait


def _flat(xs: Any) -> list[Any]:
    out: list[Any] = []
    for x in xs:
        out.extend(_flat(x) if isinstance(x, (list, tuple)) else [x])
    return out


def register() -> None:
    """Route every c10d op that exists in this torch build through ``collective``."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    _patch_wait()
    ns = torch.ops.c10d
    for packet in _NAMES:
        op = getattr(ns, packet, None)
        if op is None:
            continue
        for overload in op.overloads():
            register_special(getattr(op, overload), collective)
