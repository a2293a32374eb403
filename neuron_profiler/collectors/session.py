"""The Python side of one Kineto session: source start/stop, parse, placement, record buffer.

The C++ bridge calls ``Controller.start()`` when Kineto starts the session and
``Controller.stop(window, correlation intervals)`` when it stops; ``stop`` returns the record
buffer the bridge converts into Kineto activities (placement's rows, one ``records.RECORD`` row
each, with their names and args tables), plus the device infos, deviceProperties and metadata.
``build_session_result`` is a pure function of its inputs, so it is tested without torch or the
compiler::

    result = build_session_result(payload, window=(t0, t1), intervals=Intervals.empty(),
                                  host_pid=os.getpid(), props=[...])

Linking, the window, names, args and flows are ``runtime_trace.placement``'s, shared with the
offline merge: an activity is kept when the host call that launched it lies inside [t0, t1]
(work that finishes after t1 is kept); the rest are excluded and counted apart from drops.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from neuron_profiler.errors import TraceLoadError
from neuron_profiler.runtime_trace.activities import DeviceActivities
from neuron_profiler.runtime_trace.memory_counters import MemorySamples, counter_records
from neuron_profiler.runtime_trace.parser import parse_system_trace
from neuron_profiler.runtime_trace.placement import HostOps, Placement, place
from neuron_profiler.runtime_trace.records import (  # noqa: F401 - Kineto types re-exported
    KINETO_DRIVER,
    KINETO_GPU_USER_ANNOTATION,
    KINETO_KERNEL,
    KINETO_MEMCPY,
    KINETO_OVERHEAD,
    KINETO_RUNTIME,
    RECORD,
)
from neuron_profiler.trace import vocabulary as V

# What the bridge spells (set once at registration): the per-row numbers' args keys, the
# metadata key of a session that failed, and the names of the dispatch frames it looks through.
ARG_KEYS: dict[str, str | list[str]] = {
    "exec_id": V.ARG_EXEC_ID,
    "flops": V.ARG_FLOPS,
    "bytes": V.ARG_BYTES,
    "tflops": V.ARG_TFLOPS,
    "gbps": V.ARG_GBPS,
    "bandwidth": V.ARG_BANDWIDTH,
    "device": V.ARG_DEVICE,
    "stream": V.ARG_STREAM,
    "correlation": V.ARG_CORRELATION,
    "collector_error": V.META_COLLECTOR_ERROR,
    "hidden": V.ARG_HIDDEN,
    "dispatch_frames": sorted(V.DISPATCH_FRAMES),
}

_enc = msgspec.json.encode
_UNSAFE = str.maketrans({"\\": "/", '"': "'", **{chr(c): " " for c in range(32)}})


def _safe(value: Any) -> Any:
    """``value`` without what Kineto's JSON writer breaks: it rewrites every backslash (so JSON
    escapes must never be needed) and drops newlines. Strings lose quotes and control chars."""
    if isinstance(value, str):
        return value.translate(_UNSAFE)
    if isinstance(value, dict):
        return {_safe(str(k)): _safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_safe(v) for v in value]
    return value


def _json(value: Any) -> str:
    """JSON text Kineto writes through unchanged (args, metadata, deviceProperties)."""
    if isinstance(value, msgspec.Raw):  # runtime data kept as it came, unless it needs escapes
        raw = bytes(value)
        return raw.decode() if b"\\" not in raw else _json(msgspec.json.decode(raw))
    return _enc(_safe(value)).decode()


# Columns of the bridge's (n, 5) int64 interval array (``struct Interval`` in neuron_kineto.h);
# the parent is for the bridge itself (dispatch frames).
STACK_COLUMNS = ("tid", "id", "parent", "push_ns", "pop_ns")


@dataclass(frozen=True)
class Intervals:
    """Correlation intervals the C++ stack recorded: (thread, correlation id, push_ns, pop_ns)."""

    tid: np.ndarray
    correlation: np.ndarray
    push_ns: np.ndarray
    pop_ns: np.ndarray

    @classmethod
    def empty(cls) -> Intervals:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, z, z)

    @classmethod
    def from_stack(cls, stack: np.ndarray) -> Intervals:
        """From the bridge's (n, 5) array, one row per interval, columns ``STACK_COLUMNS``."""
        columns = np.ascontiguousarray(stack.reshape(-1, len(STACK_COLUMNS)).T)
        col = dict(zip(STACK_COLUMNS, columns, strict=True))
        return cls(col["tid"], col["id"], col["push_ns"], col["pop_ns"])

    def host_ops(self) -> HostOps:
        """As placement's host ops (the bridge resolves dispatch frames itself)."""
        return HostOps(self.tid, self.push_ns, self.pop_ns, self.correlation)


@dataclass(frozen=True)
class RecordBuffer:
    """What the bridge converts: one ``RECORD`` row per Kineto activity (``struct Record`` in
    neuron_kineto.h), the names ``name_id`` indexes and the args ``args_id`` indexes, as
    (key, JSON text) pairs."""

    rows: np.ndarray
    names: list[str]
    args: list[list[tuple[str, str]]]

    def __len__(self) -> int:
        return len(self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "names": self.names, "args": self.args}


@dataclass(frozen=True)
class SessionResult:
    """Everything one session hands to Kineto, plus the counts it reports.

    Args:
        records: the activities to convert. devices: (pid, sort index, name, label) per core.
        resources: (tid, sort index, pid, name) per queue thread. device_properties: the JSON
            objects for top-level ``deviceProperties``, comma-joined. metadata: key -> JSON value.
        excluded: activities outside the window. source_count: activities parsed from the source.
        placement: the rows as placed (shared with the offline merge).
    """

    records: RecordBuffer
    devices: list[tuple[int, int, str, str]]
    resources: list[tuple[int, int, int, str]]
    device_properties: str
    metadata: dict[str, str]
    excluded: int = 0
    source_count: int = 0
    dropped: dict[int, int] = field(default_factory=dict)
    placement: Placement | None = None

    def to_bridge(self) -> dict[str, Any]:
        return {
            "records": self.records.to_dict(),
            "devices": self.devices,
            "resources": self.resources,
            "device_properties": self.device_properties,
            "metadata": self.metadata,
        }


def build_session_result(
    payload: bytes,
    *,
    window: tuple[int, int],
    intervals: Intervals,
    host_pid: int,
    props: list[dict[str, Any]],
    source_name: str = "emulator",
    dropped: dict[int, int] | None = None,
    provenance: dict[str, Any] | None = None,
    warmup_ns: int | None = None,
) -> SessionResult:
    """Parse, link, apply the window and lay out one session's activities (pure function).
    ``warmup_ns``: when capture began, where that was before the window (``place``)."""
    return build_from_activities(
        parse_system_trace(payload, dropped=dropped),
        window=window,
        warmup_ns=warmup_ns,
        intervals=intervals,
        host_pid=host_pid,
        props=props,
        source_name=source_name,
        provenance=provenance,
    )


def build_from_activities(
    acts: DeviceActivities,
    *,
    window: tuple[int, int],
    intervals: Intervals,
    host_pid: int,
    props: list[dict[str, Any]],
    source_name: str = "emulator",
    provenance: dict[str, Any] | None = None,
    warmup_ns: int | None = None,
) -> SessionResult:
    """``build_session_result`` after the parse: placement, then the bridge's record buffer."""
    placed = place(
        acts,
        host_ops=intervals.host_ops(),
        host_pid=host_pid,
        window=window,
        warmup_ns=warmup_ns,
        taken_pids=frozenset({host_pid}),
        props=props,
    )
    args = [[(k, _json(v)) for k, v in entry] for entry in placed.args]
    records = RecordBuffer(placed.records, placed.names, args)
    metadata = {V.META_SOURCE: _json(source_name), V.META_EXCLUDED: str(placed.excluded)}
    version = (provenance or {}).get("runtime_version")
    if version:
        metadata[V.META_RUNTIME_VERSION] = _json(str(version))
    metadata.update({k: _json(v) for k, v in placed.metadata.items()})
    devices = [(p.pid, p.sort_index, p.name, p.label) for p in placed.processes]
    resources = [(t.tid, t.sort_index, t.pid, t.name) for t in placed.threads]
    return SessionResult(
        records,
        devices,
        resources,
        ",".join(_json(p) for p in placed.device_properties),
        metadata,
        excluded=placed.excluded,
        source_count=len(acts),
        dropped={int(k): int(v) for k, v in acts.dropped.items()},
        placement=placed,
    )


def with_memory_counters(result: SessionResult, samples: MemorySamples) -> SessionResult:
    """``result`` with the device memory counters appended (runtime_trace.memory_counters): one
    counter row per sample, on its core's process; where each category's figures come from and
    the samples left out go into the metadata."""
    pids = {p.core: p.pid for p in result.placement.processes} if result.placement else {}
    rows, names, args, dropped = counter_records(samples, pids)
    rec = result.records
    base_name, base_args = len(rec.names), len(rec.args)
    rows["name_id"] += base_name
    rows["args_id"] += base_args
    records = RecordBuffer(
        np.concatenate([rec.rows, rows]),
        rec.names + names,
        rec.args + args,
    )
    metadata = {**result.metadata, V.META_HBM_SOURCES: _json(samples.sources)}
    if dropped:
        metadata[V.META_HBM_DROPPED] = _json(dropped)
    return dataclasses.replace(result, records=records, metadata=metadata)


def empty_result(source_name: str, problem: str) -> SessionResult:
    """A session with no source: no device rows, the reason in the metadata."""
    return SessionResult(
        RecordBuffer(np.zeros(0, dtype=RECORD), [], []),
        [],
        [],
        "",
        {V.META_SOURCE: _json(source_name), V.META_LINK_ERROR: _json(problem)},
    )


class Controller:
    """What the bridge calls back into: one session at a time.

    ``source_factory`` returns the Source for the next session (or raises
    ``CollectorUnavailableError`` when there is none).
    """

    def __init__(
        self, source_factory: Callable[[], Any], correlation: Callable[[], int] | None
    ) -> None:
        self._factory = source_factory
        self._correlation = correlation
        self._source: Any = None
        self._problem = ""
        self._opened = False  # capture began for the coming session (prepare or start)
        self._warmup_ns: int | None = None
        self.last_result: SessionResult | None = None

    def prepare(self, now_ns: int) -> None:
        """Kineto's ``configure`` (at a schedule's warm-up, or just before ``start``): capture
        begins here, so work launched in the warm-up that runs inside the window is in the
        trace, as CUPTI's records are from the warm-up on (Kineto keeps device activities by
        their own time)."""
        self._open()
        self._warmup_ns = int(now_ns)

    def start(self) -> None:
        if not self._opened:  # a bridge that never prepared
            self._open()
            self._warmup_ns = None

    def _open(self) -> None:
        import warnings

        from neuron_profiler.errors import NeuronProfilerError

        self._source, self._problem, self._opened = None, "", True
        try:
            source = self._factory()
            source.start(max_events_per_nc(), self._correlation)
        except NeuronProfilerError as err:  # the profile goes on without device rows
            self._problem = str(err)
            warnings.warn(f"NEURON: no device activity in this trace: {err}", stacklevel=2)
            return
        self._source = source

    def stop(self, start_ns: int, stop_ns: int, stack: np.ndarray) -> dict[str, Any]:
        result = self._stop(start_ns, stop_ns, Intervals.from_stack(stack))
        extra = fallback_ops_metadata()
        if extra:
            result = dataclasses.replace(result, metadata={**result.metadata, **extra})
        self.last_result = result
        return result.to_bridge()

    def _stop(self, start_ns: int, stop_ns: int, intervals: Intervals) -> SessionResult:
        src, self._source, self._opened = self._source, None, False
        warmup = (
            self._warmup_ns if self._warmup_ns is not None and self._warmup_ns < start_ns else None
        )
        if src is None:
            return empty_result("none", self._problem or "no device source")
        payload = src.stop()
        try:
            result = build_session_result(
                payload,
                window=(int(start_ns), int(stop_ns)),
                warmup_ns=warmup,
                intervals=intervals,
                host_pid=os.getpid(),
                props=src.device_properties(),
                source_name=src.name,
                provenance=getattr(src, "provenance", dict)(),
            )
        except msgspec.DecodeError as err:
            raise TraceLoadError(
                f"{src.name} system-trace fetch output", f"not a system-trace JSON envelope ({err})"
            ) from err
        samples = getattr(src, "memory_samples", lambda: None)()
        if samples is not None:
            result = with_memory_counters(result, samples)
        dropped = sum(result.dropped.values())
        if dropped:  # the ring buffer overflowed: say so once, at the end of the session
            import warnings

            warnings.warn(
                f"NEURON: {dropped} runtime events dropped (at most {dropped} "
                "activities); raise NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC",
                stacklevel=2,
            )
        return result


def fallback_ops_metadata() -> dict[str, str]:
    """``torch_neuronx.get_fallback_ops()`` (the ops TorchNeuron has run on the CPU so far:
    names only, no counts or times) as sorted names under ``META_FALLBACK_OPS``, for the
    analyzer to infer the fallbacks the runtime does not report. Nothing when torch_neuronx is
    not importable or has no ``get_fallback_ops``; a warning when the call fails."""
    import importlib
    import sys
    import warnings

    try:
        module = sys.modules.get("torch_neuronx") or importlib.import_module("torch_neuronx")
    except ImportError:  # not installed: nothing to say
        return {}
    except Exception as err:  # noqa: BLE001 - a broken install must not lose the profile
        problem = f"import torch_neuronx failed ({err!r})"
    else:
        get = getattr(module, "get_fallback_ops", None)
        if not callable(get):
            return {}
        try:
            return {V.META_FALLBACK_OPS: _json(sorted({str(op) for op in get()}))}
        except Exception as err:  # noqa: BLE001 - a failing query must not lose the profile
            problem = f"torch_neuronx.get_fallback_ops() failed ({err!r})"
    warnings.warn(f"NEURON: {problem}; the trace has no fallback set", stacklevel=2)
    return {}


def max_events_per_nc() -> int:
    """Ring size per core: the runtime's own env var, else its default (1,000,000)."""
    value = os.environ.get("NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC", "")
    return int(value) if value.isdigit() and int(value) > 0 else 1_000_000
