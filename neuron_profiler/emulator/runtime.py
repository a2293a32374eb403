"""The emulated Neuron runtime's system trace: libnrt's ``nrt_sys_trace_*`` semantics, torch-free.

    from neuron_profiler.emulator.runtime import get_runtime, set_correlation_provider
    rt = get_runtime()
    rt.sys_trace_start(max_events_per_nc=100_000)
    ...                                   # emulated device work records events here
    payload = rt.sys_trace_fetch()        # JSON bytes, {"events": [...], "data_version": 2, ...}
    rt.sys_trace_stop()

Why a separate runtime object: the collector reads the emulator exactly as it reads the real
runtime (capture between start and stop, events handed out once, a bounded ring buffer per core
that drops the oldest events and counts them). Recording is cheap (a ``RecordedEvent`` record
appended to a ``collections.deque`` per core); JSON is produced only at fetch (msgspec).

Clocks: ``timestamp_ns`` is host Unix-epoch ns. Device events also carry ``nc_timestamp_ns`` on the
core's own clock (ns since the emulated device came up); each fetch output starts with one
``timestamp_sync_point`` per core that maps it back (the emulated clocks do not drift).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import msgspec

from neuron_profiler.costmodel.chips import ChipSpec, chip
from neuron_profiler.runtime_trace import format as F

CORE_EPOCH_STEP_NS = 3_600_000_000_000  # one hour between two cores' clock epochs
DEFAULT_MAX_EVENTS_PER_NC = 1_000_000  # the real runtime's default ring size per core

DataBuilder = Callable[[Any], dict[str, Any]]


class RecordedEvent(msgspec.Struct, frozen=True, gc=False):
    """One event in a core's ring buffer, as recorded on the hot path.

    ``data = builder(payload)`` is built only at fetch (``builder`` None: ``payload`` is the data
    dict itself), so recording stores plain values and no dict. ``seq`` numbers a core's events
    0, 1, 2, ...: a gap in what a fetch takes is exactly what the ring dropped (lock-free, exact
    even with recording threads). A frozen msgspec struct, as the emulator's other hot-path
    records (``scheduler.LaunchRecord``...): built in C about as fast as a tuple, and left out
    of the garbage collector (``gc=False``), which matters for a ring of a million events.
    """

    id: int
    event_type: str
    phase: str
    tracking_id: int
    nc_idx: int
    thread_id: int
    timestamp_ns: int
    builder: DataBuilder | None
    payload: Any
    seq: int


class _OutEvent(msgspec.Struct):
    """One event as the real runtime writes it (field order as in its JSON)."""

    event_type: str
    phase: str
    id: int
    tracking_id: int
    nc_idx: int
    nc_local_id: int
    worker_gid: int
    thread_id: int
    timestamp_ns: int
    data: dict[str, Any]


class _Envelope(msgspec.Struct):
    events: list[_OutEvent]
    data_version: int
    neuron_profiler: dict[str, Any]


_encode = msgspec.json.Encoder().encode


class EmulatedRuntime:
    """Process-wide event recorder for the emulated NeuronCores (use ``get_runtime()``).

    Capture state is read on the hot path through plain attributes: ``capturing`` and
    ``wants(core, event_type)``; device clocks advance whether or not a capture runs (that is the
    emulator's job, not this object's).
    """

    def __init__(self, cores: int = 2, chip_name: str = "trn2", speed_factor: float = 1.0) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._tracking = itertools.count(1)
        self.nc_epoch_ns = time.time_ns()  # host time at which the emulated cores' clocks read 0
        # ids the emulated device hands out (exec ids link a runtime call to its device work)
        self.exec_ids = itertools.count(1)
        self.tensor_ids = itertools.count(1)
        self.model_ids: dict[str, int] = {}
        self.capturing = False
        self.capture_start_ns = 0  # host clock (time.time_ns) when the current capture started
        self.tracking_tensors = False  # capturing tensor allocate/free (the device asks per tensor)
        # the emulated device's work whose events are not recorded yet (collectives waiting for
        # their group: scheduler.DeviceTimeline.settle), resolved before a capture stops or is
        # fetched so that no event of the capture is missing
        self.settle_device: Callable[[], None] | None = None
        self._buffers: dict[int, deque[RecordedEvent]] = {}
        self._seq: dict[int, Iterator[int]] = {}  # per-core event numbering
        self._expected: dict[int, int] = {}  # per core: seq of the next event not handed out
        self._cores: frozenset[int] = frozenset()
        self._types: frozenset[str] | None = None
        self.configure(cores, chip_name, speed_factor)

    # -- configuration (the emulator calls this from enable()) ---------------------------------
    def configure(
        self, cores: int, chip_name: str, speed_factor: float, *, numerics: bool = True
    ) -> None:
        if not (isinstance(cores, int) and cores >= 1):
            raise ValueError(f"cores must be a positive integer, got {cores!r}")
        self.chip: ChipSpec = chip(chip_name)
        self.num_cores = cores
        self.speed_factor = float(speed_factor)
        self.numerics = F.NUMERICS_COMPUTED if numerics else F.NUMERICS_SKIPPED

    def device_properties(self) -> list[dict[str, Any]]:
        """One entry per emulated core; figures per logical core of the chosen chip.

        Every peak the timing model uses (compute per engine and dtype, HBM, host link, DMA,
        collective link) *after* the speed factor, so that achieved figures (which the speed
        factor scales too) compare with them directly; ``speed_factor`` is reported next to them.
        """
        from neuron_profiler.emulator.timing import RooflineModel
        from neuron_profiler.trace import vocabulary as V

        c = self.chip
        peaks = RooflineModel(c, speed_factor=self.speed_factor).peaks()
        return [
            {
                V.PROP_ID: i,
                V.PROP_NAME: V.core_process_name(i),
                V.PROP_CHIP: c.name,
                V.PROP_HBM_BYTES: c.hbm_bytes_per_core(),
                **peaks,
                V.PROP_EMULATED: True,
                V.PROP_SPEED_FACTOR: self.speed_factor,
                V.PROP_NUMERICS: self.numerics,
            }
            for i in range(self.num_cores)
        ]

    # -- nrt_sys_trace_* ----------------------------------------------------------------------
    def sys_trace_start(
        self,
        max_events_per_nc: int = DEFAULT_MAX_EVENTS_PER_NC,
        cores: set[int] | None = None,
        event_types: set[str] | None = None,
    ) -> None:
        """Allocate fresh ring buffers and start capturing (libnrt: ``nrt_sys_trace_start``).

        ``cores``/``event_types`` None means all. Raises ``EmulatorError`` if already started.
        """
        from neuron_profiler.errors import EmulatorError

        if not (isinstance(max_events_per_nc, int) and max_events_per_nc >= 1):
            raise ValueError(
                f"max_events_per_nc must be a positive integer, got {max_events_per_nc!r}"
            )
        with self._lock:
            if self.capturing:
                raise EmulatorError(
                    "emulated runtime: system trace already started (call sys_trace_stop first)"
                )
            selected = range(self.num_cores) if cores is None else sorted(int(c) for c in cores)
            self._cores = frozenset(selected)
            self._types = None if event_types is None else frozenset(event_types)
            self._buffers = {c: deque(maxlen=max_events_per_nc) for c in self._cores}
            self._seq = {c: itertools.count() for c in self._cores}
            self._expected = dict.fromkeys(self._cores, 0)
            self.tracking_tensors = self._types is None or bool(self._types & F.TENSOR_EVENT_TYPES)
            self.capture_start_ns = time.time_ns()
            self.capturing = True

    def sys_trace_stop(self) -> None:
        """Stop capturing. Events not yet fetched stay fetchable until the next start."""
        try:
            if self.capturing and self.settle_device is not None:
                self.settle_device()
        finally:  # (a peer's failure raised once: the capture still stops)
            self.capturing = False
            self.tracking_tensors = False

    def sys_trace_fetch(self, nc_idx: int | None = None, max_events: int | None = None) -> bytes:
        """Hand out buffered events once, oldest first (libnrt: ``nrt_sys_trace_fetch_events``).

        ``nc_idx`` selects one core (None: all); ``max_events`` caps the events taken *per core*
        (as ``nrt_sys_trace_fetch_options_set_max_events_per_nc``); the rest stay for the next
        fetch. ``neuron_profiler.dropped_events`` counts, per fetched core, events the ring buffer
        dropped since that core's previous fetch.
        """
        if max_events is not None and not (isinstance(max_events, int) and max_events >= 0):
            raise ValueError(f"max_events must be a non-negative integer, got {max_events!r}")
        if self.capturing and self.settle_device is not None:
            self.settle_device()
        cores = sorted(self._buffers) if nc_idx is None else [int(nc_idx)]
        out: list[_OutEvent] = []
        dropped: dict[str, int] = {}
        with self._lock:
            for core in cores:
                taken = self._take(core, max_events)
                dropped[str(core)] = 0
                if taken:
                    last = max(e.seq for e in taken)  # threads may append slightly out of order
                    dropped[str(core)] = last + 1 - self._expected[core] - len(taken)
                    self._expected[core] = last + 1
                if taken:
                    out.extend(self._sync_point(core, min(e.timestamp_ns for e in taken)))
                    out.extend(map(_out_event, taken))
        ext = {
            F.X_DROPPED_EVENTS: dropped,
            F.X_EMULATED: True,
            F.X_CHIP: self.chip.name,
            F.X_SPEED_FACTOR: self.speed_factor,
            F.X_NUMERICS: self.numerics,
            F.X_DEVICE_PROPERTIES: [p for p in self.device_properties() if p["id"] in cores],
        }
        return _encode(_Envelope(out, F.DATA_VERSION, ext))

    def _take(self, core: int, max_events: int | None) -> list[RecordedEvent]:
        buf = self._buffers.get(core)
        if not buf:
            return []
        # popleft (atomic under the GIL) rather than swapping the deque, so that an event appended
        # by another thread during the fetch stays for the next fetch instead of being lost.
        count = len(buf) if max_events is None else min(max_events, len(buf))
        return [buf.popleft() for _ in range(count)]

    def _sync_point(self, core: int, first_ts_ns: int) -> Iterable[_OutEvent]:
        if self._types is not None and F.TIMESTAMP_SYNC_POINT not in self._types:
            return ()
        nc = self.nc_timestamp_ns(first_ts_ns, core)
        data = {"exec_id": 0, "nc_timestamp_ns": nc, "cpu_timestamp_ns": first_ts_ns}
        return (
            _OutEvent(
                event_type=F.TIMESTAMP_SYNC_POINT,
                phase=F.INSTANT,
                id=next(self._ids),
                tracking_id=next(self._tracking),
                nc_idx=core,
                nc_local_id=core,
                worker_gid=-1,
                thread_id=threading.get_native_id(),
                timestamp_ns=nc,
                data=data,
            ),
        )

    # -- recording (called by the emulated device) -------------------------------------------
    def wants(self, core: int, event_type: str) -> bool:
        return (
            self.capturing
            and core in self._cores
            and (self._types is None or event_type in self._types)
        )

    def new_tracking_id(self) -> int:
        return next(self._tracking)

    def record(
        self,
        core: int,
        event_type: str,
        phase: str,
        tracking_id: int,
        thread_id: int,
        timestamp_ns: int,
        data: dict[str, Any],
    ) -> None:
        """Append one event if capture wants it; a full ring drops its oldest event (counted)."""
        if self.wants(core, event_type):
            self._append(core, event_type, phase, tracking_id, thread_id, timestamp_ns, None, data)

    def record_span(
        self,
        core: int,
        event_type: str,
        thread_id: int,
        start_ns: int,
        stop_ns: int,
        data: dict[str, Any],
        stop_data: dict[str, Any] | None = None,
    ) -> None:
        """A start/stop pair sharing a fresh tracking id (``data`` on the start, ids on the stop)."""
        if not self.wants(core, event_type):
            return
        tracking = next(self._tracking)
        self._append(core, event_type, F.START, tracking, thread_id, start_ns, None, data)
        self._append(
            core,
            event_type,
            F.STOP,
            tracking,
            thread_id,
            stop_ns,
            None,
            {} if stop_data is None else stop_data,
        )

    def record_span_lazy(
        self,
        core: int,
        event_type: str,
        thread_id: int,
        start_ns: int,
        stop_ns: int,
        start_builder: DataBuilder,
        stop_builder: DataBuilder,
        payload: Any,
    ) -> None:
        """``record_span`` whose data dicts are built at fetch from ``payload`` (hot path)."""
        if (
            not self.capturing
            or core not in self._cores
            or (self._types is not None and event_type not in self._types)
        ):
            return
        tracking = next(self._tracking)
        buf = self._buffers[core]
        ids, seq = self._ids, self._seq[core]
        buf.append(
            RecordedEvent(
                next(ids),
                event_type,
                F.START,
                tracking,
                core,
                thread_id,
                start_ns,
                start_builder,
                payload,
                next(seq),
            )
        )
        buf.append(
            RecordedEvent(
                next(ids),
                event_type,
                F.STOP,
                tracking,
                core,
                thread_id,
                stop_ns,
                stop_builder,
                payload,
                next(seq),
            )
        )

    def record_launch(
        self,
        core: int,
        call_type: str,
        work_type: str,
        thread_id: int,
        call_ns: tuple[int, int],
        work_ns: tuple[int, int],
        builders: tuple[DataBuilder, DataBuilder, DataBuilder, DataBuilder],
        payload: Any,
    ) -> None:
        """A host runtime call and the device work it launched: two spans, four events, one
        capture check (the per-op hot path while a trace runs)."""
        types = self._types
        call_start, call_stop, work_start, work_stop = builders
        if (
            not self.capturing
            or core not in self._cores
            or (types is not None and (call_type not in types or work_type not in types))
        ):
            if types is not None:  # one of the two wanted: record it alone
                for event_type, (start_ns, stop_ns), start_builder, stop_builder in (
                    (call_type, call_ns, call_start, call_stop),
                    (work_type, work_ns, work_start, work_stop),
                ):
                    self.record_span_lazy(
                        core,
                        event_type,
                        thread_id,
                        start_ns,
                        stop_ns,
                        start_builder,
                        stop_builder,
                        payload,
                    )
            return
        buf, ids, seq, tracking = self._buffers[core], self._ids, self._seq[core], self._tracking
        t1, t2 = next(tracking), next(tracking)
        (call_start_ns, call_stop_ns), (work_start_ns, work_stop_ns) = call_ns, work_ns
        buf.append(
            RecordedEvent(
                next(ids),
                call_type,
                F.START,
                t1,
                core,
                thread_id,
                call_start_ns,
                call_start,
                payload,
                next(seq),
            )
        )
        buf.append(
            RecordedEvent(
                next(ids),
                call_type,
                F.STOP,
                t1,
                core,
                thread_id,
                call_stop_ns,
                call_stop,
                payload,
                next(seq),
            )
        )
        buf.append(
            RecordedEvent(
                next(ids),
                work_type,
                F.START,
                t2,
                core,
                thread_id,
                work_start_ns,
                work_start,
                payload,
                next(seq),
            )
        )
        buf.append(
            RecordedEvent(
                next(ids),
                work_type,
                F.STOP,
                t2,
                core,
                thread_id,
                work_stop_ns,
                work_stop,
                payload,
                next(seq),
            )
        )

    def record_instant_lazy(
        self,
        core: int,
        event_type: str,
        thread_id: int,
        timestamp_ns: int,
        builder: DataBuilder,
        payload: Any,
    ) -> None:
        """One instant event whose data is built at fetch (allocation/free on the hot path)."""
        if (
            not self.capturing
            or core not in self._cores
            or (self._types is not None and event_type not in self._types)
        ):
            return
        self._append(
            core,
            event_type,
            F.INSTANT,
            next(self._tracking),
            thread_id,
            timestamp_ns,
            builder,
            payload,
        )

    def _append(
        self,
        core: int,
        event_type: str,
        phase: str,
        tracking_id: int,
        thread_id: int,
        timestamp_ns: int,
        builder: DataBuilder | None,
        payload: Any,
    ) -> None:
        self._buffers[core].append(
            RecordedEvent(
                next(self._ids),
                event_type,
                phase,
                tracking_id,
                core,
                thread_id,
                timestamp_ns,
                builder,
                payload,
                next(self._seq[core]),
            )
        )

    def nc_epoch_of(self, core: int) -> int:
        """Host time at which ``core``'s clock reads 0: each core's clock has its own epoch,
        hours from the others', so every emulated capture exercises the clock mapping."""
        return self.nc_epoch_ns - int(core) * CORE_EPOCH_STEP_NS

    def nc_timestamp_ns(self, host_ns: int, core: int = 0) -> int:
        """A host-clock time on ``core``'s own clock (what its device events carry)."""
        return host_ns - self.nc_epoch_of(core)


def _out_event(e: RecordedEvent) -> _OutEvent:
    """One recorded event as fetch writes it: its data built now; device-side events carry
    the device clock in ``timestamp_ns``, as the real runtime's payload override does."""
    data = e.payload if e.builder is None else e.builder(e.payload)
    stamp = data.get("nc_timestamp_ns", e.timestamp_ns) if type(data) is dict else e.timestamp_ns
    return _OutEvent(
        event_type=e.event_type,
        phase=e.phase,
        id=e.id,
        tracking_id=e.tracking_id,
        nc_idx=e.nc_idx,
        nc_local_id=e.nc_idx,
        worker_gid=-1,
        thread_id=e.thread_id,
        timestamp_ns=stamp,
        data=data,
    )


_RUNTIME = EmulatedRuntime()
_correlation_provider: Callable[[], int] | None = None


def get_runtime() -> EmulatedRuntime:
    """The process-wide emulated runtime (configured by ``neuron_profiler.emulator.enable``)."""
    return _RUNTIME


def set_correlation_provider(fn: Callable[[], int] | None) -> None:
    """Install the function the emulator calls on the launching thread at each op launch.

    Its result is stored as ``data["neuron_profiler"]["correlation_id"]`` on the host runtime
    call and on the device work it launches; None uninstalls it (correlation id 0).
    """
    global _correlation_provider
    _correlation_provider = fn


def current_correlation_id() -> int:
    """The provider's id for the op being launched now; 0 without a provider."""
    fn = _correlation_provider
    return int(fn()) if fn is not None else 0
