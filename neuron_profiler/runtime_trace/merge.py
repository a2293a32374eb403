"""Offline merge: device events captured separately, placed on a host torch.profiler trace.

    result = merge_files("worker0.pt.trace.json.gz", ["fetch0.json", "fetch1.json"])
    write_chrome_trace(result.trace, "merged.json.gz")

Input device files hold runtime system-trace JSON as fetched (one envelope, several fetches one
after another, or a JSON list of envelopes; the emulator's dump is the same envelope), optionally
gzipped. The result has the structure the live collector writes (runtime_trace/layout.py): one
process per NeuronCore ("NeuronCore N", sorted after the host), one thread per queue, runtime
calls, syncs and fallbacks on the launching host thread, ac2g flows from each runtime call to the
first device work it launched, "External id" linking device work to the aten op (the source's
correlation ids when present, else containment of the runtime call in the host trace's cpu_op
events on the same thread), deviceProperties per core and the counts in the metadata.

Device activities are kept even when they fall outside the host trace's time span (counted in
``outside_host_window``): an offline merge has no profiler window to apply.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from neuron_profiler.errors import NeuronProfilerError, TraceLoadError
from neuron_profiler.runtime_trace import layout as L
from neuron_profiler.runtime_trace.activities import ActivityKind, DeviceActivities, Queue
from neuron_profiler.runtime_trace.linking import link_by_containment, match_runtime_calls
from neuron_profiler.runtime_trace.parser import (
    decode_rows,
    envelope_extensions,
    parse_system_traces,
)
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.kinds import kind_of
from neuron_profiler.trace.model import Trace

# Names, args and metadata keys shared with the live collector (runtime_trace/layout.py).
ARG_EXTERNAL_ID = "External id"
from neuron_profiler.runtime_trace.layout import (  # noqa: E402
    ARG_DATA,
    ARG_DTYPES,
    ARG_EXEC_ID,
    ARG_IS_FALLBACK,
    ARG_SHAPES,
    ARG_SYNC,
    CAT_DRIVER,
    FALLBACK_PREFIX,
    META_ACTIVITIES,
    META_DROPPED,
    META_MALFORMED,
    META_MERGED_FROM,
    META_MODELLED,
    META_OUTSIDE,
    META_SOURCE,
    META_UNPAIRED,
    RUNTIME_PREFIX,
)

_CATEGORY = {ActivityKind.KERNEL: L.CAT_KERNEL, ActivityKind.COLLECTIVE: L.CAT_KERNEL,
             ActivityKind.DMA: L.CAT_MEMCPY, ActivityKind.RUNTIME_CALL: L.CAT_RUNTIME,
             ActivityKind.HOST_SYNC: L.CAT_RUNTIME, ActivityKind.FALLBACK: L.CAT_RUNTIME,
             ActivityKind.GENERIC: CAT_DRIVER, ActivityKind.INSTANT: CAT_DRIVER}
_HOST_KINDS = np.array([ActivityKind.RUNTIME_CALL, ActivityKind.HOST_SYNC, ActivityKind.FALLBACK,
                        ActivityKind.INSTANT], dtype=np.uint8)
_DEVICE_WORK = np.array([ActivityKind.KERNEL, ActivityKind.DMA, ActivityKind.COLLECTIVE],
                        dtype=np.uint8)


class _Ext(msgspec.Struct):
    op: Any = None
    flops: Any = None
    bytes: Any = None
    direction: Any = None
    collective: Any = None
    ranks: Any = None
    algorithm: Any = None
    reason: Any = None
    shapes: Any = None
    dtypes: Any = None
    sync: Any = None


class _Data(msgspec.Struct):
    neuron_profiler: _Ext | None = None
    algorithm: Any = None  # the real runtime's collective field


_decode_any = msgspec.json.Decoder().decode


@dataclass(frozen=True)
class MergeResult:
    """The merged trace and what happened to the device events.

    Args:
        trace: host events plus device activities and flows, sorted by time.
        activities: device activities placed (paired spans, unpaired halves, instants).
        by_kind: activities per ActivityKind name. flows: ac2g arrows written.
        linked_by_correlation / linked_by_containment / unlinked: how each activity got (or did
            not get) its "External id".
        malformed / unpaired / dropped: as the parser counted them (dropped: per core, reported
            by the runtime). outside_host_window: activities starting outside the host span.
    """

    trace: Trace
    activities: int
    by_kind: dict[str, int]
    flows: int
    linked_by_correlation: int
    linked_by_containment: int
    unlinked: int
    malformed: int
    unpaired: int
    dropped: dict[int, int] = field(default_factory=dict)
    outside_host_window: int = 0


def read_device_events(path: str | Path) -> bytes:
    """Bytes of one device-events file (gunzipped); ``TraceLoadError`` when unreadable."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TraceLoadError(path, "no such file") from None
    except OSError as err:
        raise TraceLoadError(path, f"cannot read: {err.strerror or err}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = zlib.decompressobj(wbits=31).decompress(raw)
        except zlib.error as err:
            raise TraceLoadError(path, f"corrupt gzip data ({err})") from None
    if not raw.strip():
        raise TraceLoadError(path, "empty file")
    return raw


def merge_files(host_path: str | Path, device_paths: Sequence[str | Path]) -> MergeResult:
    """Load the host trace and the device-event files, then ``merge_device_events``."""
    from neuron_profiler.trace.loader import load_trace

    host = load_trace(host_path)
    payloads = [read_device_events(p) for p in device_paths]
    return merge_device_events(host, payloads, sources=[str(p) for p in device_paths])


def merge_device_events(host: Trace, payloads: Sequence[bytes],
                        sources: Sequence[str] | None = None) -> MergeResult:
    """Place the device events of ``payloads`` (system-trace JSON) on ``host``."""
    sources = list(sources) if sources is not None else [f"payload {i}"
                                                         for i in range(len(payloads))]
    exts: list[dict[str, Any]] = []
    for payload, source in zip(payloads, sources, strict=True):
        exts += _checked_extensions(payload, source)
    try:
        acts = parse_system_traces(payloads)
    except msgspec.DecodeError as err:  # which file: parse them one by one for the message
        raise _which_payload(payloads, sources, err) from None
    had_corr = acts.correlation_id != 0
    ops = host.mask(kind=S.EventKind.CPU_OP, ph=S.Phase.COMPLETE) & (host.col(S.EXTERNAL_ID) >= 0)
    c = host.columns
    acts = link_by_containment(acts, c[S.TID][ops], c[S.TS_NS][ops],
                               c[S.TS_NS][ops] + c[S.DUR_NS][ops], c[S.EXTERNAL_ID][ops])
    span = _host_span(host)
    outside = int(((acts.start_ns < span[0]) | (acts.start_ns > span[1])).sum())
    trace, flows = _merged_trace(host, acts, _device_properties(acts, exts), sources, outside)
    linked = acts.correlation_id != 0
    kinds = np.bincount(acts.kind, minlength=len(ActivityKind))
    return MergeResult(
        trace=trace, activities=len(acts),
        by_kind={k.name: int(kinds[k]) for k in ActivityKind if kinds[k]}, flows=flows,
        linked_by_correlation=int(had_corr.sum()),
        linked_by_containment=int((linked & ~had_corr).sum()), unlinked=int((~linked).sum()),
        malformed=acts.malformed, unpaired=acts.unpaired, dropped=dict(acts.dropped),
        outside_host_window=outside)


def _checked_extensions(payload: bytes, source: str) -> list[dict[str, Any]]:
    try:
        return envelope_extensions(payload)
    except msgspec.DecodeError as err:
        raise TraceLoadError(source, f"invalid JSON ({err})") from None


def _which_payload(payloads: Sequence[bytes], sources: Sequence[str], err: Exception
                   ) -> TraceLoadError:
    for payload, source in zip(payloads, sources, strict=True):
        try:
            parse_system_traces([payload])
        except msgspec.DecodeError as one:
            return TraceLoadError(source, f"not a runtime system-trace envelope ({one})")
    return TraceLoadError(", ".join(sources), f"not a runtime system-trace envelope ({err})")


def _host_span(host: Trace) -> tuple[int, int]:
    if len(host) == 0:
        return (np.iinfo(np.int64).min, np.iinfo(np.int64).max)
    ts = host.col(S.TS_NS)
    return int(ts.min()), int((ts + host.col(S.DUR_NS)).max())


def _device_properties(acts: DeviceActivities, exts: list[dict[str, Any]]
                       ) -> list[dict[str, Any]]:
    """One entry per core seen, shaped like the emulator's ``device_properties()``."""
    info = next((e for e in exts if e.get("emulated")), exts[0] if exts else {})
    emulated = bool(info.get("emulated", False))
    out = []
    for core in np.unique(acts.core).tolist():
        props: dict[str, Any] = {"id": int(core), "name": L.core_process_name(core),
                                 "emulated": emulated}
        if emulated and isinstance(info.get("chip"), str):
            props.update(_chip_figures(info["chip"]))
            props["speed_factor"] = float(info.get("speed_factor", 1.0))
        out.append(props)
    return out


def _chip_figures(chip_name: str) -> dict[str, Any]:
    """Per-logical-core figures of an emulated chip (the emulator's own table)."""
    from neuron_profiler.emulator.chips import chip

    try:
        c = chip(chip_name)
    except (KeyError, ValueError, NeuronProfilerError):
        return {"chip": chip_name}
    return {"chip": c.name, "hbm_bytes": int(c.hbm_gib * 2**30 / c.logical_cores),
            "peak_bf16_tflops": c.bf16_tflops / c.logical_cores,
            "hbm_gbps": c.hbm_tbps * 1000.0 / c.logical_cores}


def _host_pids(host: Trace, thread_ids: np.ndarray) -> np.ndarray:
    """The host process of each launching thread: the pid its cpu ops run in, else the pid that
    holds most cpu ops (a thread the host trace never saw)."""
    ops = host.mask(kind=S.EventKind.CPU_OP)
    pid, tid = host.col(S.PID)[ops], host.col(S.TID)[ops]
    if len(pid) == 0:
        pid, tid = host.col(S.PID), host.col(S.TID)
    if len(pid) == 0:
        return np.zeros(len(thread_ids), dtype=np.int64)
    values, counts = np.unique(pid, return_counts=True)
    default = values[np.argmax(counts)]
    pairs = np.unique(np.stack([tid, pid]), axis=1)
    known_tid, first = np.unique(pairs[0], return_index=True)
    pos = np.clip(np.searchsorted(known_tid, thread_ids), 0, max(len(known_tid) - 1, 0))
    hit = known_tid[pos] == thread_ids
    return np.where(hit, pairs[1][first][pos], default)


def _check_pids(host: Trace, cores: list[int]) -> None:
    used = set(np.unique(host.col(S.PID)).tolist()) | set(host.process_names)
    for core in cores:
        pid = L.core_pid(core)
        name = host.process_names.get(pid)
        if pid in used and name != L.core_process_name(core):
            raise NeuronProfilerError(
                f"{host.source or 'host trace'}: pid {pid} is already used by the host trace "
                f"({name or 'unnamed'}); cannot place {L.core_process_name(core)} there",
                exit_code=2)


def _names(acts: DeviceActivities) -> list[str]:
    """Row names: fallbacks and runtime launches prefixed so they never read as the aten op."""
    base = np.asarray(acts.names, dtype=object)[acts.name_id] if len(acts) else []
    out = list(base)
    for i in np.flatnonzero(acts.kind == ActivityKind.FALLBACK).tolist():
        out[i] = FALLBACK_PREFIX + out[i]
    for i in np.flatnonzero(acts.kind == ActivityKind.RUNTIME_CALL).tolist():
        if "::" in out[i]:
            out[i] = RUNTIME_PREFIX + out[i]
    return out


def _num(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _g6(value: float) -> float:
    return float(f"{value:.6g}")


def _row_args(kind: int, d: _Data, raw: bytes, modelled: bool, exec_id: int, corr: int,
              dur_ns: int) -> dict[str, Any]:
    """Args of one activity, as the collector's bridge renders them."""
    e = d.neuron_profiler or _Ext()
    out: dict[str, Any] = {}
    if corr:
        out[ARG_EXTERNAL_ID] = corr
    if exec_id >= 0:
        out[ARG_EXEC_ID] = exec_id
    dur = max(dur_ns, 1)
    flops, nbytes = _num(e.flops), _num(e.bytes)
    if flops >= 0:
        out[L.ARG_FLOPS] = flops
        out[L.ARG_TFLOPS] = _g6(flops / dur / 1e3)
    if nbytes >= 0:
        out[L.ARG_BYTES] = nbytes
        out[L.ARG_BANDWIDTH if kind == ActivityKind.DMA else L.ARG_GBPS] = _g6(nbytes / dur)
    if modelled:
        out[L.ARG_EMULATED] = True
    if kind in (ActivityKind.KERNEL, ActivityKind.RUNTIME_CALL) and e.op is not None:
        out[L.ARG_OP] = str(e.op)
    elif kind == ActivityKind.DMA and e.direction is not None:
        out[L.ARG_DIRECTION] = str(e.direction)
    elif kind == ActivityKind.COLLECTIVE:
        ranks = e.ranks if isinstance(e.ranks, list) else []
        algorithm = e.algorithm if e.algorithm is not None else d.algorithm
        out.update({L.ARG_IS_COLLECTIVE: True, L.ARG_COLLECTIVE: str(e.collective),
                    L.ARG_GROUP_RANKS: ranks, L.ARG_GROUP_SIZE: len(ranks)})
        if algorithm is not None:
            out[L.ARG_ALGORITHM] = str(algorithm)
    elif kind == ActivityKind.FALLBACK:
        out.update({ARG_IS_FALLBACK: True, L.ARG_OP: str(e.op),
                    L.ARG_FALLBACK_REASON: str(e.reason), ARG_SHAPES: e.shapes,
                    ARG_DTYPES: e.dtypes})
    elif kind == ActivityKind.HOST_SYNC and e.sync is not None:
        out[ARG_SYNC] = str(e.sync)
    elif kind in (ActivityKind.GENERIC, ActivityKind.INSTANT):
        out[ARG_DATA] = _decode_any(raw)  # unknown events keep every field
    return out


def _flows(acts: DeviceActivities) -> tuple[np.ndarray, np.ndarray]:
    """(runtime-call row, device-work row) per ac2g arrow: each call to its earliest work."""
    caller = match_runtime_calls(acts)
    work = np.flatnonzero(np.isin(acts.kind, _DEVICE_WORK) & (caller >= 0))
    if len(work) == 0:
        return work, work
    work = work[np.lexsort((work, acts.start_ns[work], caller[work]))]
    _, first = np.unique(caller[work], return_index=True)
    return caller[work[first]], work[first]


def _merged_trace(host: Trace, acts: DeviceActivities, props: list[dict[str, Any]],
                  sources: Sequence[str], outside: int) -> tuple[Trace, int]:
    cores = np.unique(acts.core[~np.isin(acts.kind, _HOST_KINDS)]).tolist()
    _check_pids(host, cores)
    n = len(acts)
    on_host = np.isin(acts.kind, _HOST_KINDS)
    queue_tid = np.array([L.QUEUE_TIDS.get(Queue(q), L.QUEUE_TIDS[Queue.OTHER])
                          for q in range(len(Queue))], dtype=np.int64)
    pid = np.where(on_host, _host_pids(host, acts.thread_id), acts.core)
    tid = np.where(on_host, acts.thread_id, queue_tid[acts.queue])
    strings = {s: i for i, s in enumerate(host.strings)}
    intern = lambda text: strings.setdefault(text, len(strings))  # noqa: E731
    cat_of = np.array([intern(_CATEGORY.get(ActivityKind(k), CAT_DRIVER))
                       for k in range(len(ActivityKind))], dtype=np.int32)
    kind_of_cat = np.array([kind_of(_CATEGORY.get(ActivityKind(k), CAT_DRIVER))
                            for k in range(len(ActivityKind))], dtype=np.uint8)
    name_id = np.array([intern(s) for s in _names(acts)], dtype=np.int32)
    datas = decode_rows(acts.data, _Data)
    # Only unknown events keep their whole data: read the payload's bytes only when there are some.
    raws = acts.data if np.isin(acts.kind, list(L.RAW_DATA_KINDS)).any() else repeat(b"", n)
    dur = acts.end_ns - acts.start_ns
    raw_args = list(host.raw_args)
    args_row = np.arange(len(raw_args), len(raw_args) + n, dtype=np.int64)
    encode = msgspec.json.encode
    for i, (k, d, raw, mod, ex, corr, du) in enumerate(zip(
            acts.kind.tolist(), datas, raws, acts.modelled.tolist(), acts.exec_id.tolist(),
            acts.correlation_id.tolist(), dur.tolist(), strict=True)):
        args = _row_args(k, d, raw, mod, ex, corr, du)
        if args:
            raw_args.append(encode(args))
        else:
            args_row[i] = -1
    args_row[args_row >= 0] = np.arange(len(host.raw_args), len(raw_args))
    # A fallback has the runtime category (as Kineto writes it) but its own kind.
    kinds = np.where(acts.kind == ActivityKind.FALLBACK, np.uint8(S.EventKind.FALLBACK),
                     kind_of_cat[acts.kind]).astype(np.uint8)
    device = {
        S.TS_NS: acts.start_ns, S.DUR_NS: dur,
        S.PH: np.full(n, S.Phase.COMPLETE, dtype=np.uint8), S.KIND: kinds,
        S.NAME_ID: name_id, S.CAT_ID: cat_of[acts.kind], S.PID: pid, S.TID: tid,
        S.EXTERNAL_ID: np.where(acts.correlation_id != 0, acts.correlation_id, -1),
        S.CORRELATION: np.full(n, -1, dtype=np.int64), S.FLOW_ID: np.full(n, -1, dtype=np.int64),
        S.ARGS_ROW: args_row, S.FORM: S.default_column(S.FORM, n)}
    calls, work = _flows(acts)
    base = int(max(host.col(S.FLOW_ID).max(initial=-1), 0)) + 1
    ids = np.arange(base, base + len(calls), dtype=np.int64)
    flow_name = intern(L.CAT_FLOW)
    flow = {
        S.TS_NS: np.concatenate([acts.start_ns[calls], acts.start_ns[work]]),
        S.DUR_NS: np.zeros(2 * len(calls), dtype=np.int64),
        S.PH: np.repeat(np.array([S.Phase.FLOW_START, S.Phase.FLOW_END], dtype=np.uint8),
                        len(calls)),
        S.KIND: np.full(2 * len(calls), kind_of(L.CAT_FLOW), dtype=np.uint8),
        S.NAME_ID: np.full(2 * len(calls), flow_name, dtype=np.int32),
        S.CAT_ID: np.full(2 * len(calls), flow_name, dtype=np.int32),
        S.PID: np.concatenate([pid[calls], pid[work]]),
        S.TID: np.concatenate([tid[calls], tid[work]]),
        S.EXTERNAL_ID: np.full(2 * len(calls), -1, dtype=np.int64),
        S.CORRELATION: np.full(2 * len(calls), -1, dtype=np.int64),
        S.FLOW_ID: np.concatenate([ids, ids]),
        S.ARGS_ROW: np.full(2 * len(calls), -1, dtype=np.int64),
        S.FORM: S.default_column(S.FORM, 2 * len(calls))}
    columns = {k: np.concatenate([host.columns[k], device[k].astype(host.columns[k].dtype),
                                  flow[k].astype(host.columns[k].dtype)])
               for k in S.EVENT_COLUMNS}
    order = np.argsort(columns[S.TS_NS], kind="stable")
    columns = {k: v[order] for k, v in columns.items()}
    threads = _queue_threads(acts, cores)
    trace = dataclasses.replace(
        host, columns=columns, strings=list(strings), raw_args=raw_args,
        metadata=_metadata(host, acts, props, sources, outside),
        process_names={**host.process_names, **{L.core_pid(c): L.core_process_name(c)
                                                for c in cores}},
        process_sort_index={**host.process_sort_index, **{L.core_pid(c): L.core_sort_index(c)
                                                          for c in cores}},
        thread_names={**host.thread_names, **threads},
        thread_sort_index={**host.thread_sort_index, **{k: k[1] for k in threads}})
    return trace, len(calls)


def _queue_threads(acts: DeviceActivities, cores: list[int]) -> dict[tuple[int, int], str]:
    """(pid, tid) -> queue name for every core: compute, DMA, collectives (+ other when used)."""
    used_other = bool((~np.isin(acts.kind, _HOST_KINDS) & (acts.queue == Queue.OTHER)).any())
    queues = [Queue.COMPUTE, Queue.DMA, Queue.COLLECTIVE] + ([Queue.OTHER] if used_other else [])
    return {(L.core_pid(c), L.QUEUE_TIDS[q]): L.QUEUE_THREAD_NAMES[q] for c in cores
            for q in queues}


def _metadata(host: Trace, acts: DeviceActivities, props: list[dict[str, Any]],
              sources: Sequence[str], outside: int) -> dict[str, Any]:
    meta = dict(host.metadata)
    existing = list(meta.get("deviceProperties") or [])
    names = {p.get("name") for p in existing if isinstance(p, dict)}
    meta["deviceProperties"] = existing + [p for p in props if p["name"] not in names]
    meta.update({
        META_SOURCE: "merge",
        META_DROPPED: {str(k): v for k, v in sorted(acts.dropped.items())},
        META_MALFORMED: acts.malformed, META_UNPAIRED: acts.unpaired,
        META_ACTIVITIES: len(acts), META_MODELLED: bool(acts.modelled.any()),
        META_OUTSIDE: outside, META_MERGED_FROM: list(sources)})
    return meta
