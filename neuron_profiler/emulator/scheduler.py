"""Device timelines of the emulated NeuronCores: queues per core, and the events each launch emits.

    tl = DeviceTimeline(get_runtime(), RooflineModel(chip("trn2")), cores=2)
    end_ns = tl.kernel(0, "aten::mm", flops=..., bytes_moved=..., dtype="float32", matrix=True,
                       launch_ns=time.time_ns())
    tl.host_sync([0], "item")                  # the host really waits until core 0 is idle

Torch-free: the dispatch layer computes costs and calls this. Execution is asynchronous as on the
hardware: work launched at host time t starts at ``max(t + launch latency, queue free, inputs
ready)``. Compute and DMA of one core are stream-ordered (like an eager framework's default
stream); collectives run on their own queue and overlap compute, and work that reads a
collective's result waits for it (``not_before_ns``). A collective coupled across ranks is known
only once every rank has arrived: its launch returns at once and its device times are resolved
when something needs them (``launch_collective``). Clocks advance whether or not a system trace
is captured; events are recorded only while one is.
"""

from __future__ import annotations

import heapq
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from neuron_profiler.emulator.runtime import EmulatedRuntime, current_correlation_id
from neuron_profiler.emulator.timing import GRAPH_ENGINE, QueueClock, RooflineModel, engine_for
from neuron_profiler.runtime_trace import format as F

if TYPE_CHECKING:  # costs imports torch; the scheduler does not
    from neuron_profiler.emulator.costs import OpCost

_SLEEP_THRESHOLD_NS = 300_000  # longer waits sleep (then spin the rest); shorter ones spin

_COPY_EVENT = {F.H2D: F.DMEM_BUF_COPYIN, F.D2H: F.DMEM_BUF_COPYOUT, F.D2D: F.EXT_DMA_D2D}
_COPY_CALL = {F.H2D: F.NRT_TENSOR_WRITE, F.D2H: F.NRT_TENSOR_READ, F.D2D: F.NRT_MODEL_SUBMIT}


# -- what the hot path records: plain values, turned into event data at fetch (builders below) --
# Frozen msgspec structs, as runtime.RecordedEvent: named fields, built in C about as fast as a
# tuple, and left out of the garbage collector (a ring can hold a million events).
class GraphOp(msgspec.Struct, frozen=True, gc=False):
    """One op inside a compiled graph's execution: its place and modelled share."""

    op: str
    offset_ns: int
    duration_ns: int
    flops: int
    bytes_moved: int
    engine: str


class GraphExecution(msgspec.Struct, frozen=True, gc=False):
    """One execution of a compiled graph (``compiled.py``): its id, its modelled duration and
    its ops' shares, which add up to the duration."""

    graph_id: int
    duration_ns: int
    ops: tuple[GraphOp, ...]


class KernelDetail(msgspec.Struct, frozen=True, gc=False):
    """A kernel's cost and the peak it is measured against; ``graph`` for a compiled graph."""

    flops: int
    bytes_moved: int
    dtype: str
    engine: str
    peak_flops_per_s: float
    graph: GraphExecution | None


class CopyDetail(msgspec.Struct, frozen=True, gc=False):
    """A DMA transfer: its size, direction (``F.H2D`` / ``F.D2H`` / ``F.D2D``) and link rate."""

    nbytes: int
    direction: str
    link_bytes_per_s: float


class CollectiveDetail(msgspec.Struct, frozen=True, gc=False):
    """A collective: what it is, over which ranks, and its number among this process's
    collectives (the runtime's ``op_id``)."""

    collective: str
    nbytes: int
    ranks: tuple[int, ...]
    algorithm: str
    group: str
    op_id: int


class LaunchRecord(msgspec.Struct, frozen=True, gc=False):
    """A runtime call and the device work it launched (both spans' payload). Device times are
    on the core's own clock (``nc_*``); ``detail``'s type says which queue the work ran on."""

    core: int
    exec_id: int
    model_id: int
    op: str
    correlation_id: int
    launch_ns: int
    nc_start_ns: int
    nc_end_ns: int
    detail: KernelDetail | CopyDetail | CollectiveDetail


class BarrierRecord(msgspec.Struct, frozen=True, gc=False):
    """The device waiting for its replica group before a collective (``cc_exec_barrier``)."""

    core: int
    model_id: int
    op: str
    collective: str
    correlation_id: int
    launch_ns: int
    nc_start_ns: int
    nc_end_ns: int
    ranks: tuple[int, ...]
    group: str
    algorithm: str


class HostSyncRecord(msgspec.Struct, frozen=True, gc=False):
    """The host blocked until ``wait_until_ns`` (``reason``: item, cpu, queue_full, ...)."""

    reason: str
    op: str
    wait_until_ns: int
    correlation_id: int


class OverheadRecord(msgspec.Struct, frozen=True, gc=False):
    """Host time the emulator spent on its own work (``what``: ``F.OVERHEAD_*``); ``before_ns``
    / ``after_ns``: more of it just outside the span (``overhead``)."""

    what: str
    op: str
    correlation_id: int
    before_ns: int = 0
    after_ns: int = 0


class TensorRecord(msgspec.Struct, frozen=True, gc=False):
    """A device buffer allocated or freed."""

    tensor_id: int
    nbytes: int


class ArrivalExchange(Protocol):
    """The group's arrivals being shared, started at a collective's launch (collectives.py: an
    all-gather over the group of each rank's ``(ready_ns, chained_ns)``, as
    ``launch_collective`` computes them): ``is_completed`` asks without blocking, ``latest``
    waits until every rank has sent its pair and returns the largest of each (``chained_ns``
    -1: no rank's arrival follows the group's previous collective)."""

    def is_completed(self) -> bool: ...

    def latest(self) -> tuple[int, int]: ...


_UNRESOLVED_NS = 1 << 62  # a pending collective's end before it is resolved: later than any time


class PendingCollective:
    """A launched collective whose device times wait for its group's arrivals
    (``DeviceTimeline.launch_collective``). ``end_ns()`` resolves it, and first what it follows,
    blocking the host only if a rank has not arrived yet; ``end`` is its device end once
    resolved (``_UNRESOLVED_NS`` before). What the launch knew is kept so that the events
    recorded at resolution are the ones the launch would have recorded: its runtime call,
    thread and correlation id.

    ``ready_ns``: when it could start on its own core, counting everything known at its launch;
    ``after``: the pending collective of the same group it was launched behind on its core
    (chained: its arrival is also after that one's end); ``previous``: the group's collective
    launched before it on this rank (another rank's arrival may follow that one's end).
    ``arrival_ns``: its arrival, ``ready_ns`` until resolved. Links are dropped once
    resolved."""

    __slots__ = (
        "timeline",
        "core",
        "op",
        "collective",
        "nbytes",
        "ranks",
        "group",
        "algorithm",
        "launch_ns",
        "call_end_ns",
        "ready_ns",
        "arrival_ns",
        "duration_ns",
        "exchange",
        "after",
        "previous",
        "data_ready",
        "correlation_id",
        "thread_id",
        "exec_id",
        "op_id",
        "start",
        "end",
    )

    def __init__(
        self,
        timeline: DeviceTimeline,
        core: int,
        op: str,
        collective: str,
        nbytes: int,
        ranks: tuple[int, ...],
        group: str,
        algorithm: str,
        launch_ns: int,
        call_end_ns: int,
        ready_ns: int,
        duration_ns: int,
        exchange: ArrivalExchange | None,
        after: PendingCollective | None = None,
        previous: PendingCollective | None = None,
    ) -> None:
        self.timeline = timeline
        self.core = core
        self.op = op
        self.collective = collective
        self.nbytes = nbytes
        self.ranks = ranks
        self.group = group
        self.algorithm = algorithm
        self.launch_ns = launch_ns
        self.call_end_ns = call_end_ns
        self.ready_ns = ready_ns
        self.arrival_ns = ready_ns
        self.duration_ns = duration_ns
        self.exchange = exchange
        self.after = after
        self.previous = previous
        # waits until the real exchange's values are in its buffers (collectives.py); called by
        # an op about to read them, never under this timeline's locks
        self.data_ready: Callable[[], None] | None = None
        self.correlation_id = current_correlation_id()
        self.thread_id = _native_tid()
        self.exec_id = 0  # ids of a captured launch, taken at the launch (0: not captured)
        self.op_id = 0
        self.start = 0
        self.end = _UNRESOLVED_NS

    @property
    def resolved(self) -> bool:
        return self.end != _UNRESOLVED_NS

    def arrived(self) -> bool:
        """Whether every rank has arrived, for it and for what it follows: resolving it would
        not block."""
        p: PendingCollective | None = self
        while p is not None and p.end == _UNRESOLVED_NS:  # ``after`` is ``previous`` or None
            if p.exchange is not None and not p.exchange.is_completed():
                return False
            p = p.previous
        return True

    def end_ns(self, overhead: bool = True) -> int:
        """The collective's device end, resolving it first (the host may block until the last
        rank of the group has arrived). ``overhead``: record that block as an emulator-overhead
        span (False: the caller records a span around it)."""
        if self.end == _UNRESOLVED_NS:
            self.timeline.resolve(self, overhead)
        return self.end


@dataclass
class CoreQueues:
    """The queues of one core; ``stream_ns`` is when all compute/DMA launched so far is done."""

    compute: QueueClock = field(default_factory=QueueClock)
    dma: QueueClock = field(default_factory=QueueClock)
    collective: QueueClock = field(default_factory=QueueClock)
    stream_ns: int = 0
    # side streams (streams.py): stream id -> when the work launched on it, and the waits it
    # was given, are done; their work shares the compute and DMA queues
    side_ns: dict[int, int] = field(default_factory=dict)
    # device end times of work launched on this core and perhaps not finished (a heap)
    inflight: list[int] = field(default_factory=list)
    # the collectives launched on this core whose group start is not known yet, in launch
    # order (they also count as in flight): all of one group, each chained behind the one
    # before (a collective of another group resolves them at its launch)
    unresolved: list[PendingCollective] = field(default_factory=list)

    def busy_until_ns(self) -> int:
        return max(
            self.stream_ns, self.collective.free_at_ns, self.compute.free_at_ns, self.dma.free_at_ns
        )

    def order_ns(self, stream: int) -> int:
        """When the work already on ``stream`` (0: the default stream) is done."""
        return self.side_ns.get(stream, 0) if stream else self.stream_ns

    def advance(self, stream: int, end_ns: int) -> None:
        if stream:
            self.side_ns[stream] = max(self.side_ns.get(stream, 0), end_ns)
        else:
            self.stream_ns = end_ns


# How many times the host really waited for the modelled device (host_cost.py leaves an op that
# waited out of the emulator's overhead: the wait is the device's time, not the emulator's).
waits = 0


def wait_until(target_ns: int) -> int:
    """Block the calling thread until the host clock reaches ``target_ns``; returns the time."""
    global waits
    now = time.time_ns()
    if now < target_ns:
        waits += 1
    while now < target_ns:
        remaining = target_ns - now
        if remaining > _SLEEP_THRESHOLD_NS:
            time.sleep((remaining - _SLEEP_THRESHOLD_NS // 2) / 1e9)
        now = time.time_ns()
    return now


class DeviceTimeline:
    """Schedules work on the emulated cores and records its events in the runtime."""

    def __init__(
        self,
        runtime: EmulatedRuntime,
        model: RooflineModel,
        cores: int,
        queue_depth: int | None = None,
    ) -> None:
        self.rt = runtime
        self.model = model
        self.latency_ns = model.chip.launch_latency_ns
        depth = model.chip.launch_queue_depth if queue_depth is None else queue_depth
        if not (isinstance(depth, int) and depth >= 1):
            raise ValueError(f"queue_depth must be a positive integer, got {depth!r}")
        self.queue_depth = depth
        self.cores = [CoreQueues() for _ in range(cores)]
        # Ids live in the runtime so that they stay unique when enable() rebuilds the timeline.
        self._exec_ids = runtime.exec_ids
        self._tensor_ids = runtime.tensor_ids
        self._model_ids = runtime.model_ids
        self._lock = threading.Lock()
        # collective launches and resolutions, in order (held while a resolution waits for the
        # group, which blocks only what needs that collective: the next one on its core)
        self._cc_lock = threading.Lock()
        # latest host time at which a thread stopped blocking on a resolution (_after_block)
        self.blocked_until_ns = 0
        self.collectives_launched = 0
        # (group, ranks) -> the group's collective launched last on this rank (launch_collective)
        self.last_of_group: dict[tuple[str, tuple[int, ...]], PendingCollective] = {}
        runtime.settle_device = self.settle  # a capture's stop and fetch resolve what is pending

    # -- device work -----------------------------------------------------------------------
    def kernel(
        self,
        core: int,
        op: str,
        *,
        flops: int,
        bytes_moved: int,
        dtype: str,
        matrix: bool,
        launch_ns: int,
        not_before_ns: int = 0,
        overhead_from_ns: int = 0,
        graph: GraphExecution | None = None,
        stream: int = 0,
        call_end_ns: int | None = None,
    ) -> int:
        """One op on the compute queue, ordered on ``stream`` (0: the default stream); records
        its runtime call and device execution. ``call_end_ns``: where the runtime call's row
        ends (None: now); the dispatch ends it in its own frame, before the frames that schedule
        the launch open, so that the row nests among the host's Python frames (with_stack).

        ``overhead_from_ns`` (> 0): the host spent [overhead_from_ns, launch_ns] on the op's real
        math (numerics mode); that is recorded as an emulator-overhead span, apart from the
        launch. ``graph`` (a compiled graph, ``compiled.py``): the execution of a whole graph
        with its modelled duration and its ops' shares."""
        if overhead_from_ns:
            self.overhead(core, op, F.OVERHEAD_NUMERICS, overhead_from_ns, launch_ns)
        if graph is None:
            dur = self.model.kernel_ns(
                flops=flops, bytes_moved=bytes_moved, dtype=dtype, matrix=matrix
            )
        else:
            dur = graph.duration_ns
        q = self.cores[core]
        if launch_ns < self.blocked_until_ns:
            launch_ns = _after_block(launch_ns)
        if len(q.inflight) + len(q.unresolved) >= self.queue_depth:
            launch_ns = self._admit(core, op, launch_ns)
        with self._lock:  # QueueClock.schedule, inlined: this runs for every op
            clock = q.compute
            start = launch_ns + self.latency_ns
            if clock.free_at_ns > start:
                start = clock.free_at_ns
            order = q.side_ns.get(stream, 0) if stream else q.stream_ns
            if order > start:
                start = order
            if not_before_ns > start:
                start = not_before_ns
            end = start + dur
            clock.free_at_ns = end
            if stream:
                q.side_ns[stream] = end
            else:
                q.stream_ns = end
            heapq.heappush(q.inflight, end)
        if self.rt.capturing:
            engine = GRAPH_ENGINE if graph is not None else engine_for(op, matrix)
            detail = KernelDetail(
                flops, bytes_moved, dtype, engine, self.model.peak_flops_per_s(dtype, matrix), graph
            )
            self._record_launch(
                core,
                F.NRT_MODEL_SUBMIT,
                F.NC_EXEC_RUNNING,
                op,
                launch_ns,
                start,
                end,
                detail,
                call_end_ns=call_end_ns,
            )
        return end

    def copy(
        self,
        core: int,
        direction: str,
        nbytes: int,
        *,
        launch_ns: int,
        op: str,
        not_before_ns: int = 0,
        staged_ns: int = 0,
        stream: int = 0,
        call_end_ns: int | None = None,
    ) -> int:
        """A DMA transfer on the core's DMA queue (h2d / d2h over the host link, d2d on chip).
        ``call_end_ns``: where the runtime call's row ends, as for ``kernel`` (None: the
        submission of a staged copy, else now).

        ``staged_ns`` (> 0): a host -> device copy from pageable memory, which the host staged
        (``stage``) from ``launch_ns`` until then inside the runtime call: the DMA is submitted
        at the staging's end, so it cannot end before the host has the data in the staging
        buffer. The call's row spans the staging: from ``launch_ns`` to ``call_end_ns``, which
        the caller reads after the staging returned."""
        dur = (
            self.model.device_copy_ns(nbytes)
            if direction == F.D2D
            else self.model.host_copy_ns(nbytes)
        )
        if launch_ns < self.blocked_until_ns:
            launch_ns = _after_block(launch_ns)
        submit_ns = max(launch_ns, staged_ns)
        q = self.cores[core]
        if len(q.inflight) + len(q.unresolved) >= self.queue_depth:
            submit_ns = self._admit(core, op, submit_ns)
            if not staged_ns:  # as for kernels: the call starts once the queue had room
                launch_ns = submit_ns
        with self._lock:
            start, end = q.dma.schedule(
                launch_ns=submit_ns,
                duration_ns=dur,
                latency_ns=self.latency_ns,
                not_before_ns=max(q.order_ns(stream), not_before_ns),
            )
            q.advance(stream, end)
            heapq.heappush(q.inflight, end)
        if self.rt.capturing:
            link = (
                self.model.chip.dma_bytes_per_s()
                if direction == F.D2D
                else self.model.chip.host_link_bytes_per_s()
            ) * self.model.speed_factor
            self._record_launch(
                core,
                _COPY_CALL[direction],
                _COPY_EVENT[direction],
                op,
                launch_ns,
                start,
                end,
                CopyDetail(nbytes, direction, link),
                call_end_ns=submit_ns if staged_ns and call_end_ns is None else call_end_ns,
            )
        return end

    def collective(self, core: int, op: str, **launch: Any) -> int:
        """``launch_collective`` (same arguments) resolved at once: returns the collective's
        device end (the host blocks until the group has arrived)."""
        return self.launch_collective(core, op, **launch).end_ns()

    def launch_collective(
        self,
        core: int,
        op: str,
        *,
        collective: str,
        nbytes: int,
        ranks: list[int],
        group: str,
        launch_ns: int,
        algorithm: str = "ring",
        exchange: Callable[[int, int], ArrivalExchange] | None = None,
        not_before_ns: int = 0,
        stream: int = 0,
        chain: bool = True,
    ) -> PendingCollective:
        """A collective on the collective queue: waits for the inputs (stream), not for later
        compute, so it overlaps whatever is launched after it.

        ``exchange(ready_ns, chained_ns)`` starts sharing this rank's arrival with the group,
        which couples the ranks: the arrival is when the collective could start on its own
        queue; it starts when the last rank has arrived, and the wait before is a
        ``cc_exec_barrier`` span on the device (as the real runtime records it). As with the
        real runtime the launch returns at once: the collective is resolved (its start and end
        computed, its events recorded as at the launch) when something needs its end:
        ``end_ns()`` (work reading its output, ``Work.wait()``), a collective of another group
        launched behind it on the core, a full launch queue, a host sync of the core, a
        capture's stop or fetch. Host time spent there waiting for a late rank is an
        emulator-overhead span (``collective_coupling``). Without ``exchange`` it is resolved at
        once. ``stream``: the stream it is launched on (0: the default one); it waits for that
        stream's work, not for the others' (streams.py).

        Launched behind a pending collective of the same group (the group's previous one; the
        same ``group`` and ``ranks``, and ``chain``), it is chained, as a collective queues
        behind another on the device: its arrival is ``max(ready_ns, that one's end)``, with
        ``ready_ns`` what the launch knows (launch plus latency, the queue so far, the stream,
        ``not_before_ns``), so the launch shares ``ready_ns`` and that one's duration
        (``chained_ns``; -1 when not chained). The group's collectives start together at one
        group start on every rank, so from the largest of each pair every rank computes this
        one's group start once it knows the previous one's: ``max(ready_ns, previous start +
        chained_ns)`` over the ranks, the start the launch would have computed had it resolved
        the previous collective first (without blocking). ``chain`` False (a group that cannot
        be told apart from others): a pending collective is resolved at the launch."""
        dur = self.model.collective_ns(nbytes=nbytes, world=len(ranks), collective=collective)
        q = self.cores[core]
        if len(q.inflight) + len(q.unresolved) >= self.queue_depth:
            launch_ns = self._admit(core, op, launch_ns)
        key = (group, tuple(ranks)) if chain and exchange is not None else None
        with self._cc_lock:
            previous = self.last_of_group.get(key) if key is not None else None
            last = q.unresolved[-1] if q.unresolved else None
            after = last if last is not None and last is previous else None
            if last is not None and after is None:  # its end is this collective's queue time
                launch_ns = max(launch_ns, self._resolve_locked(last))
            with self._lock:
                ready = max(
                    launch_ns + self.latency_ns,
                    q.collective.free_at_ns,
                    q.order_ns(stream),
                    not_before_ns,
                )
            call_end = time.time_ns()
            chained = -1 if after is None else after.duration_ns
            pending = PendingCollective(
                self,
                core,
                op,
                collective,
                nbytes,
                tuple(ranks),
                group,
                algorithm,
                launch_ns,
                call_end,
                ready,
                dur,
                None if exchange is None else exchange(ready, chained),
                after,
                previous,
            )
            if self.rt.capturing:  # ids in launch order, as the call is made now
                self.collectives_launched += 1
                pending.op_id = self.collectives_launched
                pending.exec_id = next(self._exec_ids)
            q.unresolved.append(pending)
            if key is not None:
                self.last_of_group[key] = pending
            if exchange is None:
                self._resolve_locked(pending)
        return pending

    def resolve(self, pending: PendingCollective, overhead: bool = True) -> int:
        """Resolve ``pending`` if it is not yet; returns when this thread stopped blocking on
        the group (0: it did not block). ``overhead``: as ``PendingCollective.end_ns``."""
        with self._cc_lock:
            return self._resolve_locked(pending, overhead)

    def settle(self, cores: Iterable[int] | None = None) -> None:
        """Resolve the collectives pending on ``cores`` (None: all), in launch order."""
        queues = self.cores if cores is None else [self.cores[c] for c in cores]
        found = [p for q in queues for p in q.unresolved]
        if found:
            with self._cc_lock:
                for pending in sorted(found, key=lambda p: p.call_end_ns):
                    self._resolve_locked(pending)

    def _resolve_locked(self, pending: PendingCollective, overhead: bool = True) -> int:
        """Resolve ``pending`` and, first, the collectives launched before it on its core (one
        queue, in order) (``_cc_lock`` held). Returns the end of the host's last block (0:
        none)."""
        queue = self.cores[pending.core].unresolved
        blocked = 0
        while pending.end == _UNRESOLVED_NS:
            blocked = max(blocked, self._resolve_first(queue[0], overhead))
        return blocked

    def _resolve_first(self, pending: PendingCollective, overhead: bool) -> int:
        """Wait for the group's arrivals of its core's first pending collective, schedule it
        from the last one (``launch_collective``: a chained rank's arrival follows the group's
        previous collective) and record its events. Returns the end of the host's block (0:
        none)."""
        if pending.after is not None:  # resolved: it was before this one on the queue
            pending.arrival_ns = max(pending.ready_ns, pending.after.end)
        group_start = pending.arrival_ns
        blocked = 0
        exchange = pending.exchange
        if exchange is not None:
            if exchange.is_completed():
                latest, chained = self._latest(pending, exchange)
            else:  # a rank has not arrived: the host really waits (emulator overhead)
                global waits
                waits += 1
                begin = time.time_ns()
                latest, chained = self._latest(pending, exchange)
                blocked = time.time_ns()
                if overhead:
                    self.overhead(pending.core, pending.op, F.OVERHEAD_COUPLING, begin, blocked)
                _thread_ids.blocked_ns = blocked
                if blocked > self.blocked_until_ns:
                    self.blocked_until_ns = blocked
            group_start = max(group_start, latest)
            previous = pending.previous
            if chained >= 0 and previous is not None:  # a rank waits for the previous one
                blocked = max(blocked, self._resolve_locked(previous, overhead))
                group_start = max(group_start, previous.start + chained)  # its group start
        self._schedule(pending, group_start)
        if pending.exec_id:
            self._record_collective(pending)
        return blocked

    def _schedule(self, pending: PendingCollective, group_start: int) -> None:
        """Place its core's first pending collective on the collective queue from
        ``group_start``: it is resolved (its start and end set; no longer pending on the core;
        its links to the collectives before it dropped)."""
        q = self.cores[pending.core]
        with self._lock:
            start, end = q.collective.schedule(
                launch_ns=pending.launch_ns,
                duration_ns=pending.duration_ns,
                latency_ns=self.latency_ns,
                not_before_ns=group_start,
            )
            heapq.heappush(q.inflight, end)
            pending.start, pending.end = start, end
            if q.unresolved and q.unresolved[0] is pending:
                q.unresolved.pop(0)
            pending.after = pending.previous = None

    def _latest(self, pending: PendingCollective, exchange: ArrivalExchange) -> tuple[int, int]:
        """The group's last ready time and longest chained duration (``ArrivalExchange``).
        When the exchange fails (a peer died), the collective is resolved as if its group had
        arrived with it (so nothing waits on it again: the next stop, sync or enable does not
        raise the same error) and the error is raised once."""
        try:
            return exchange.latest()
        except BaseException:
            self._schedule(pending, pending.arrival_ns)
            raise

    def _record_collective(self, p: PendingCollective) -> None:
        """The events of a resolved collective launched while capturing: the device's wait for
        the group (if any), the runtime call and the ``cc_running``, as at its launch."""
        core, start, end = p.core, p.start, p.end
        if start > p.arrival_ns:  # waiting for the group on the device
            epoch = self.rt.nc_epoch_of(core)
            self.rt.record_span_lazy(
                core,
                F.CC_EXEC_BARRIER,
                p.thread_id,
                p.arrival_ns,
                start,
                _barrier_start,
                _barrier_stop,
                BarrierRecord(
                    core=core,
                    model_id=self._model_ids.get(p.op, 0),
                    op=p.op,
                    collective=p.collective,
                    correlation_id=p.correlation_id,
                    launch_ns=p.launch_ns,
                    nc_start_ns=p.arrival_ns - epoch,
                    nc_end_ns=start - epoch,
                    ranks=p.ranks,
                    group=p.group,
                    algorithm=p.algorithm,
                ),
            )
        detail = CollectiveDetail(
            collective=p.collective,
            nbytes=p.nbytes,
            ranks=p.ranks,
            algorithm=p.algorithm,
            group=p.group,
            op_id=p.op_id,
        )
        self._record_launch(
            core,
            F.NRT_MODEL_SUBMIT,
            F.CC_RUNNING,
            p.op,
            p.launch_ns,
            start,
            end,
            detail,
            call_end_ns=p.call_end_ns,
            origin=(p.exec_id, p.correlation_id, p.thread_id),
        )

    def _admit(self, core: int, op: str, launch_ns: int) -> int:
        """The bounded launch queue: with ``queue_depth`` operations launched and unfinished on
        this core, the host really blocks until one finishes (a ``queue_full`` host sync).
        Returns the time the launch proceeds at. Collectives pending on the core count as in
        flight: if the queue is full with them, they are resolved first (their ends may be what
        frees the queue)."""
        q = self.cores[core]
        with self._lock:  # in flight at the launch time: what the launch call would see
            heap = q.inflight
            while heap and heap[0] <= launch_ns:
                heapq.heappop(heap)
            full = len(heap) + len(q.unresolved) >= self.queue_depth
        if full and q.unresolved:
            with self._cc_lock:
                if q.unresolved:
                    launch_ns = max(launch_ns, self._resolve_locked(q.unresolved[-1]))
        with self._lock:
            while heap and heap[0] <= launch_ns:
                heapq.heappop(heap)
            target = 0
            while len(heap) >= self.queue_depth:
                target = heapq.heappop(heap)
        if not target:
            return launch_ns
        now = time.time_ns()
        if target <= now:  # freed while the host was busy elsewhere: no wait, launch then
            return max(launch_ns, target)
        wait_until(target)
        end = time.time_ns()  # read here, not in wait_until: the row nests in this frame
        if self.rt.capturing:
            self.rt.record_span_lazy(
                core,
                F.EXT_HOST_SYNC,
                _native_tid(),
                now,
                end,
                _sync_start,
                _empty,
                HostSyncRecord(F.SYNC_QUEUE_FULL, op, target, current_correlation_id()),
            )
        return max(launch_ns, end)

    def overhead(
        self,
        core: int,
        op: str,
        what: str,
        start_ns: int,
        stop_ns: int,
        before_ns: int = 0,
        after_ns: int = 0,
    ) -> None:
        """Host time the emulator spent on its own work (``what``: F.OVERHEAD_*), recorded as an
        emulator-overhead span so that it never reads as runtime launch cost. ``before_ns`` /
        ``after_ns``: more of it just before / after the span (after < 0: less), kept as
        figures so that the span drawn nests in the host calls around it."""
        if self.rt.capturing:
            self.rt.record_span_lazy(
                core,
                F.EXT_EMULATOR_OVERHEAD,
                _native_tid(),
                start_ns,
                stop_ns,
                _overhead_start,
                _empty,
                OverheadRecord(what, op, current_correlation_id(), before_ns, after_ns),
            )

    def _record_launch(
        self,
        core: int,
        call_type: str,
        work_type: str,
        op: str,
        launch_ns: int,
        start: int,
        end: int,
        detail: KernelDetail | CopyDetail | CollectiveDetail,
        call_end_ns: int | None = None,
        origin: tuple[int, int, int] | None = None,
    ) -> None:
        """``origin``: (exec id, correlation id, thread id) taken at a launch recorded later (a
        resolved collective); None: this launch, now."""
        rt = self.rt
        if origin is None:
            exec_id, correlation_id, thread_id = next(self._exec_ids), current_correlation_id(), 0
        else:
            exec_id, correlation_id, thread_id = origin
        model_id = self._model_ids.get(op)
        if model_id is None:
            model_id = self._model_ids.setdefault(op, len(self._model_ids) + 1)
        epoch = rt.nc_epoch_of(core)
        record = LaunchRecord(
            core,
            exec_id,
            model_id,
            op,
            correlation_id,
            launch_ns,
            start - epoch,
            end - epoch,
            detail,
        )
        rt.record_launch(
            core,
            call_type,
            work_type,
            thread_id or _native_tid(),
            (launch_ns, max(time.time_ns() if call_end_ns is None else call_end_ns, launch_ns)),
            (start, end),
            _BUILDERS,
            record,
        )

    # -- host side ---------------------------------------------------------------------------
    def stage(self, nbytes: int, since_ns: int) -> int:
        """The host copying ``nbytes`` between pageable memory and the runtime's pinned staging
        buffer, from ``since_ns``: it lasts at least the modelled staging time (really waiting
        when the emulator's own copy of the data, which stands for it, was faster). Returns
        when the staging is done. Part of the copy's runtime call: no event of its own."""
        return wait_until(since_ns + self.model.host_staging_ns(nbytes))

    def busy_until_ns(self, cores: Iterable[int]) -> int:
        """When all work launched on the cores is done (their pending collectives resolved)."""
        cores = list(cores)
        self.settle(cores)
        return max((self.cores[c].busy_until_ns() for c in cores), default=0)

    def done_by(self, core: int, now_ns: int) -> bool:
        """Whether the core's work is done at ``now_ns`` without blocking (a stream query): a
        collective whose group has not all arrived is not (its start is later than now)."""
        if not all(p.arrived() for p in list(self.cores[core].unresolved)):
            return False
        return self.busy_until_ns([core]) <= now_ns

    def stream_wait(self, core: int, until_ns: int, stream: int = 0) -> None:
        """``stream`` of the core (0: the default one) waits on the device until ``until_ns``:
        work launched on it later starts no earlier; the host does not wait."""
        with self._lock:
            q = self.cores[core]
            if until_ns > q.order_ns(stream):
                q.advance(stream, until_ns)

    def host_sync(
        self, cores: Iterable[int], reason: str, op: str = "", until_ns: int | None = None
    ) -> int:
        """Really block the host until the cores (or ``until_ns``) are done; records the wait
        once (one host call, however many cores it waits for: one row on the host thread), on
        the core that finishes last. Waiting for the cores resolves their pending collectives;
        waiting ``until_ns`` (one result's time) leaves them pending."""
        cores = list(cores)
        target = self.busy_until_ns(cores) if until_ns is None else until_ns
        begin = time.time_ns()
        wait_until(target)
        end = time.time_ns()  # read here, not in wait_until: the row nests in this frame
        if self.rt.capturing and cores:
            record = HostSyncRecord(reason, op, target, current_correlation_id())
            last = max(cores, key=lambda c: self.cores[c].busy_until_ns())
            self.rt.record_span_lazy(
                last, F.EXT_HOST_SYNC, _native_tid(), begin, end, _sync_start, _empty, record
            )
        return end

    def fallback(
        self,
        core: int,
        op: str,
        *,
        reason: str,
        shapes: list[list[int]],
        dtypes: list[str],
        cost: OpCost,
        start_ns: int,
        stop_ns: int,
    ) -> None:
        """The host-side span of an op run on the CPU (its copies are recorded by ``copy``),
        with the flops, bytes, dtype and engine the op would have cost on the device."""
        if self.rt.capturing:
            ext = {
                F.X_OP: op,
                F.X_REASON: reason,
                F.X_SHAPES: shapes,
                F.X_DTYPES: dtypes,
                F.X_FLOPS: cost.flops,
                F.X_BYTES: cost.bytes_moved,
                F.X_DTYPE: cost.dtype,
                F.X_ENGINE: engine_for(op, cost.matrix),
                F.X_CORRELATION_ID: current_correlation_id(),
            }
            self.rt.record_span(
                core, F.EXT_FALLBACK, _native_tid(), start_ns, stop_ns, {F.EXT_KEY: ext}
            )  # rare: built now

    def allocate(self, core: int, nbytes: int) -> int:
        """A new device buffer: returns its tensor id (recorded as an allocation instant)."""
        tensor_id = next(self._tensor_ids)
        self._instant(core, F.NRT_TENSOR_ALLOCATE, tensor_id, nbytes)
        return tensor_id

    def free(self, core: int, tensor_id: int, nbytes: int) -> None:
        self._instant(core, F.NRT_TENSOR_FREE, tensor_id, nbytes)

    def _instant(self, core: int, event_type: str, tensor_id: int, nbytes: int) -> None:
        if self.rt.capturing:
            self.rt.record_instant_lazy(
                core,
                event_type,
                _native_tid(),
                time.time_ns(),
                _tensor_data,
                TensorRecord(tensor_id, nbytes),
            )


_thread_ids = threading.local()
# The child's one thread is new: forget the id the forking thread cached.
os.register_at_fork(after_in_child=lambda: _thread_ids.__dict__.clear())


def _native_tid() -> int:
    """The OS thread id (what the runtime records), cached per thread: on Linux each
    ``threading.get_native_id()`` is a system call, and the hot path asks for it per event."""
    try:
        return _thread_ids.tid
    except AttributeError:
        _thread_ids.tid = tid = threading.get_native_id()
        return tid


def _after_block(launch_ns: int) -> int:
    """A launch whose call began before this thread blocked resolving a collective (reading its
    output, say): the call starts after the block, which is an emulator-overhead span."""
    return max(launch_ns, getattr(_thread_ids, "blocked_ns", 0))


# -- event data, built at fetch from the records the hot path stored ---------------------------
_QUEUE_OF = {
    KernelDetail: F.QUEUE_COMPUTE,
    CopyDetail: F.QUEUE_DMA,
    CollectiveDetail: F.QUEUE_COLLECTIVE,
}


def _call_start(p: LaunchRecord) -> dict:
    """As the real runtime: the call carries ``model_id`` only. The exec id it launched (which
    the real runtime writes on kbl_exec_* stages the emulator does not record) is ours."""
    return {
        "model_id": p.model_id,
        F.EXT_KEY: {F.X_OP: p.op, F.X_CORRELATION_ID: p.correlation_id, F.X_EXEC_ID: p.exec_id},
    }


def _call_stop(p: LaunchRecord) -> dict:
    return {}


def _work_start(p: LaunchRecord) -> dict:
    d = p.detail
    seconds = max(p.nc_end_ns - p.nc_start_ns, 1) * 1e-9
    ext = {
        F.X_OP: p.op,
        F.X_QUEUE: _QUEUE_OF[type(d)],
        F.X_CORRELATION_ID: p.correlation_id,
        F.X_LAUNCH_NS: p.launch_ns,
        F.X_MODELLED: True,
    }
    data: dict = {
        "device_core_idx": p.core,
        "exec_id": p.exec_id,
        "model_id": p.model_id,
        "nc_timestamp_ns": p.nc_start_ns,
    }
    if type(d) is KernelDetail:
        ext.update(
            {
                F.X_FLOPS: d.flops,
                F.X_BYTES: d.bytes_moved,
                F.X_DTYPE: d.dtype,
                F.X_ENGINE: d.engine,
                F.X_PCT_PEAK: round(100.0 * d.flops / seconds / d.peak_flops_per_s, 3),
            }
        )
        if d.graph is not None:  # one execution of a compiled graph: its id and its ops' shares
            ext.update(
                {
                    F.X_GRAPH_ID: d.graph.graph_id,
                    F.X_GRAPH_OPS: [
                        {
                            F.X_OP: o.op,
                            F.X_OFFSET_NS: o.offset_ns,
                            F.X_DURATION_NS: o.duration_ns,
                            F.X_FLOPS: o.flops,
                            F.X_BYTES: o.bytes_moved,
                            F.X_ENGINE: o.engine,
                        }
                        for o in d.graph.ops
                    ],
                }
            )
    elif type(d) is CopyDetail:  # the real copy keys; its exec id and device stamp are ours
        data = {
            "mem_type": "device",
            "mem_handle": f"0x{0x7F0000 + p.exec_id:x}",
            "offset": 0,
            "size": d.nbytes,
            "nc_timestamp_ns": p.nc_start_ns,
        }
        ext.update({F.X_EXEC_ID: p.exec_id})
        ext.update(
            {
                F.X_BYTES: d.nbytes,
                F.X_DIRECTION: d.direction,
                F.X_PCT_PEAK: round(100.0 * d.nbytes / seconds / d.link_bytes_per_s, 3),
            }
        )
    else:
        data.update({"gid": 0, "op_id": d.op_id, "algorithm": d.algorithm})
        ext.update(
            {
                F.X_COLLECTIVE_OP: d.collective,
                F.X_BYTES: d.nbytes,
                F.X_RANKS: list(d.ranks),
                F.X_ALGORITHM: d.algorithm,
                F.X_GROUP: d.group,
            }
        )
    data[F.EXT_KEY] = ext
    return data


def _work_stop(p: LaunchRecord) -> dict:
    return {"nc_timestamp_ns": p.nc_end_ns}  # the real stop: the device stamp only


_BUILDERS = (_call_start, _call_stop, _work_start, _work_stop)


def _sync_start(p: HostSyncRecord) -> dict:
    return {
        F.EXT_KEY: {
            F.X_SYNC_REASON: p.reason,
            F.X_OP: p.op,
            F.X_WAIT_UNTIL_NS: p.wait_until_ns,
            F.X_CORRELATION_ID: p.correlation_id,
        }
    }


def _barrier_start(p: BarrierRecord) -> dict:
    return {
        "device_core_idx": p.core,
        "model_id": p.model_id,
        "nc_timestamp_ns": p.nc_start_ns,
        F.EXT_KEY: {
            F.X_OP: p.op,
            F.X_COLLECTIVE_OP: p.collective,
            F.X_QUEUE: F.QUEUE_COLLECTIVE,
            F.X_CORRELATION_ID: p.correlation_id,
            F.X_LAUNCH_NS: p.launch_ns,
            F.X_MODELLED: True,
            F.X_COLLECTIVE_WAIT: True,
            F.X_RANKS: list(p.ranks),
            F.X_GROUP: p.group,
            F.X_ALGORITHM: p.algorithm,
        },
    }


def _barrier_stop(p: BarrierRecord) -> dict:
    return {"nc_timestamp_ns": p.nc_end_ns}


def _overhead_start(p: OverheadRecord) -> dict:
    ext = {F.X_OVERHEAD: p.what, F.X_OP: p.op, F.X_CORRELATION_ID: p.correlation_id}
    if p.before_ns or p.after_ns:
        ext[F.X_BEFORE_NS], ext[F.X_AFTER_NS] = p.before_ns, p.after_ns
    return {F.EXT_KEY: ext}


def _empty(p: object) -> dict:
    return {}


def _tensor_data(p: TensorRecord) -> dict:
    return {"tensor_id": p.tensor_id, "size": p.nbytes}
