"""Offline merge: device events captured separately, placed on a host torch.profiler trace.

    result = merge_files("worker0.pt.trace.json.gz", ["fetch0.json", "fetch1.json"])
    write_trace(result.trace, "merged.json.gz")      # neuron_profiler.exporters.writers

Input device files hold runtime system-trace JSON as fetched (one envelope, several fetches one
after another, or a JSON list of envelopes; the emulator's dump is the same envelope), optionally
gzipped. Rows are laid out by ``runtime_trace.placement``, the same code the live collector uses,
so a merged trace has the live trace's device rows: one process per NeuronCore, one thread per
queue, runtime calls, syncs and fallbacks on the launching host thread, ac2g flows, "External id"
linking device work to the aten op (the source's correlation ids when present, else containment
of the runtime call in the host trace's cpu_op events on the same thread), deviceProperties per
core from the envelope's extension (real captures have none: ``peaks_known: false``) and the
counts in the metadata. A core whose pid the host trace already uses (every CUDA trace has pid
0) moves to the first free pid >= 2**20; its process name still says which core it is.

Device activities are kept even when they fall outside the host trace's time span (counted in
``outside_host_window``): an offline merge has no profiler window to apply.
"""

from __future__ import annotations

import dataclasses
import warnings
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from neuron_profiler.errors import NeuronProfilerError, TraceLoadError
from neuron_profiler.runtime_trace import format as F
from neuron_profiler.runtime_trace.activities import ActivityKind, DeviceActivities
from neuron_profiler.runtime_trace.memory_counters import MemorySamples, with_counters
from neuron_profiler.runtime_trace.parser import (
    envelope_extensions,
    envelope_versions,
    memory_events,
    parse_system_traces,
)
from neuron_profiler.runtime_trace.placement import (
    CATEGORIES,
    FIRST_FLOW_ID,
    HostOps,
    Placement,
    device_properties_from_extensions,
    numeric_args,
    place,
)
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.kinds import kind_of
from neuron_profiler.trace.model import Trace
from neuron_profiler.trace.repair import EMPTY_FILE, Unusable, cannot_read, open_input


@dataclass(frozen=True)
class MergeResult:
    """The merged trace and what happened to the device events.

    Args:
        trace: host events plus device activities and flows, sorted by time.
        activities: device activities placed (paired spans, unpaired halves, instants).
        by_kind: activities per ActivityKind name. flows: ac2g arrows written.
        linked: activities that carry an "External id" (a host op); unlinked: the others.
        malformed / unpaired / dropped: as the parser counted them (dropped: per core, reported
            by the runtime). outside_host_window: activities starting outside the host span.
        relocated_cores: core -> pid, for cores whose own pid the host trace already used.
        truncated: device envelopes that were cut off (every complete event in them is kept).
    """

    trace: Trace
    activities: int
    by_kind: dict[str, int]
    flows: int
    linked: int
    unlinked: int
    malformed: int
    unpaired: int
    dropped: dict[int, int] = field(default_factory=dict)
    outside_host_window: int = 0
    relocated_cores: dict[int, int] = field(default_factory=dict)
    truncated: int = 0
    drops_known: bool = True
    placed: Placement | None = field(default=None, repr=False, compare=False)


def read_device_events(path: str | Path) -> bytes:
    """Bytes of one device-events file (gunzipped); ``TraceLoadError`` when unreadable (the
    wording of ``trace.repair``, the one policy of bad input)."""
    path = Path(path)
    with open_input(path) as fh:
        try:
            raw = fh.read()
        except OSError as err:
            raise TraceLoadError(path, cannot_read(err)) from None
    if raw[:2] == b"\x1f\x8b":
        raw, problem = _gunzip(raw)
        if problem:
            if not raw.strip():
                raise TraceLoadError(path, problem)
            warnings.warn(f"{path}: {problem}; kept the {len(raw)} bytes before it", stacklevel=2)
    if not raw.strip():
        raise TraceLoadError(path, EMPTY_FILE)
    return raw


_GZIP_TRAILER = 8  # CRC-32 and length


def _gunzip(raw: bytes, chunk: int = 1 << 14) -> tuple[bytes, str | None]:
    """Every byte a gzip stream yields before any damage, and what the damage was (None: whole).
    The last trailer (CRC-32 and length) is fed on its own, so a bad one loses no data."""
    out: list[bytes] = []
    while raw[:2] == b"\x1f\x8b":  # one member after another
        d = zlib.decompressobj(wbits=31)
        body_end, pos = len(raw) - _GZIP_TRAILER, 0
        try:
            while not d.eof and pos < len(raw):
                end = min(pos + chunk, body_end) if pos < body_end else len(raw)
                out.append(d.decompress(raw[pos:end]))
                pos = end
        except zlib.error as err:
            return b"".join(out), f"corrupt gzip data ({err})"
        if not d.eof:
            return b"".join(out), "the gzip stream is cut off"
        raw = d.unused_data + raw[pos:]
    if raw.strip(b"\x00"):
        return b"".join(out), f"{len(raw)} trailing bytes after the gzip data ignored"
    return b"".join(out), None


def merge_files(host_path: str | Path, device_paths: Sequence[str | Path]) -> MergeResult:
    """Load the host trace and the device-event files, then ``merge_device_events``."""
    from neuron_profiler.trace.loader import load_trace

    host = load_trace(host_path)
    payloads = [read_device_events(p) for p in device_paths]
    return merge_device_events(host, payloads, sources=[str(p) for p in device_paths])


def merge_device_events(
    host: Trace, payloads: Sequence[bytes], sources: Sequence[str] | None = None
) -> MergeResult:
    """Place the device events of ``payloads`` (system-trace JSON) on ``host``."""
    sources = (
        list(sources) if sources is not None else [f"payload {i}" for i in range(len(payloads))]
    )
    check_data_versions(payloads, sources)
    exts: list[dict[str, Any]] = []
    for payload, source in zip(payloads, sources, strict=True):
        exts += _checked_extensions(payload, source)
    try:
        acts = parse_system_traces(payloads)
    except msgspec.DecodeError as err:  # which file: parse them one by one for the message
        raise _which_payload(payloads, sources, err) from None
    result = merge_activities(host, acts, sources, device_properties_from_extensions(exts))
    return _with_memory_counters(result, payloads)


class VersionMismatch(NeuronProfilerError):
    """Device-event inputs that state different ``data_version`` values (exit code 2)."""

    exit_code = 2


def check_data_versions(payloads: Sequence[bytes], sources: Sequence[str]) -> object | None:
    """The ``data_version`` the inputs' envelopes state (None: none states one).

    All envelopes are parsed as one stream (a start in one file pairs with its stop in the
    next), so envelopes of different format versions would be read by one set of rules: inputs
    whose stated versions differ raise ``VersionMismatch``, one line naming each file and its
    versions. A version this parser was not written for (``format.DATA_VERSION``) is warned
    about and read anyway: new runtimes add fields, which are kept in args. An envelope without
    a version (older tools, hand-made files) states nothing and agrees with any."""
    stated: dict[str, list[object]] = {}
    for payload, source in zip(payloads, sources, strict=True):
        found = {_version_text(v): v for v in map(_same_number, envelope_versions(payload))}
        found.pop("null", None)
        if found:
            stated[source] = [found[k] for k in sorted(found)]
    distinct = {_version_text(v): v for versions in stated.values() for v in versions}
    if len(distinct) > 1:
        files = "; ".join(
            f"{source}: {', '.join(map(_version_text, versions))}"
            for source, versions in stated.items()
        )
        raise VersionMismatch(
            f"device event inputs disagree on data_version ({files}): envelopes of different "
            "runtime format versions are not merged as one stream; merge each version's files "
            "separately",
            exit_code=2,
        )
    if not distinct:
        return None
    (version,) = distinct.values()
    if version != F.DATA_VERSION:
        warnings.warn(
            f"{', '.join(stated)}: data_version {_version_text(version)}, but this parser reads "
            f"version {F.DATA_VERSION}: fields it does not know are kept in args, fields whose "
            "meaning changed may be misread",
            stacklevel=3,
        )
    return version


def _version_text(version: object) -> str:
    """A version as written (any JSON value: an object or a list is compared by its text)."""
    return msgspec.json.encode(version).decode()


def _same_number(version: object) -> object:
    """An integral float is its integer (2.0 is version 2, as the loader reads 100.0 as 100)."""
    if isinstance(version, float) and version.is_integer():
        return int(version)
    return version


def _with_memory_counters(result: MergeResult, payloads: Sequence[bytes]) -> MergeResult:
    """The runtime's device memory reports (nrt_dma_mem_* results) as counters on the cores'
    processes, as the live libnrt path writes them (runtime_trace.memory_counters)."""
    events, unusable = [], 0
    for payload in payloads:
        found, bad = memory_events(payload)
        events += found
        unusable += bad
    if not events and not unusable or result.placed is None:
        return result
    events.sort(key=lambda e: e.ts_ns)
    samples = MemorySamples.from_runtime(events, unusable)
    pids = {p.core: p.pid for p in result.placed.processes}
    return dataclasses.replace(result, trace=with_counters(result.trace, samples, pids))


def merge_activities(
    host: Trace,
    acts: DeviceActivities,
    sources: Sequence[str],
    props: Sequence[dict[str, Any]] = (),
    *,
    host_ops: HostOps | None = None,
    host_pid: Callable[[np.ndarray], np.ndarray] | None = None,
) -> MergeResult:
    """Place runtime activities from any source (the system-trace parser, Neuron Explorer's
    reader) on ``host`` by the one placement; ``host_ops``: the ops to link to (default: the
    host trace's cpu ops); ``host_pid``: thread ids -> their host process, for a source that
    knows it (default: ``host_pid_lookup``, which guesses a thread without ops)."""
    placed = place(
        acts,
        host_ops=HostOps.from_trace(host) if host_ops is None else host_ops,
        host_pid=host_pid_lookup(host) if host_pid is None else host_pid,
        taken_pids=_taken_pids(host),
        props=props,
        flow_id_base=_first_free_flow_id(host),
    )
    span = _host_span(host)
    outside = int(((placed.start_ns < span[0]) | (placed.start_ns > span[1])).sum())
    trace = _merged_trace(host, placed, sources, outside)
    linked = int((placed.external_id != 0).sum())
    kinds = np.bincount(placed.kind, minlength=len(ActivityKind))
    return MergeResult(
        trace=trace,
        activities=len(placed),
        by_kind={k.name: int(kinds[k]) for k in ActivityKind if kinds[k]},
        flows=placed.flows,
        linked=linked,
        unlinked=len(placed) - linked,
        malformed=int(placed.metadata[V.META_MALFORMED]),
        truncated=int(acts.truncated),
        drops_known=acts.drops_known,
        unpaired=acts.unpaired,
        dropped=dict(acts.dropped),
        outside_host_window=outside,
        relocated_cores={p.core: p.pid for p in placed.processes if p.core != p.pid},
        placed=placed,
    )


def _checked_extensions(payload: bytes, source: str) -> list[dict[str, Any]]:
    try:
        return envelope_extensions(payload)
    except msgspec.DecodeError as err:
        raise TraceLoadError(source, f"invalid JSON ({err})") from None


def _which_payload(
    payloads: Sequence[bytes], sources: Sequence[str], err: Exception
) -> TraceLoadError:
    for payload, source in zip(payloads, sources, strict=True):
        try:
            parse_system_traces([payload])
        except Unusable as one:  # cut off or damaged before its first complete event
            return TraceLoadError(source, str(one))
        except msgspec.DecodeError as one:
            return TraceLoadError(source, f"not a runtime system-trace envelope ({one})")
    return TraceLoadError(", ".join(sources), f"not a runtime system-trace envelope ({err})")


def _host_span(host: Trace) -> tuple[int, int]:
    if len(host) == 0:
        return (np.iinfo(np.int64).min, np.iinfo(np.int64).max)
    ts = host.col(S.TS_NS)
    return int(ts.min()), int((ts + host.col(S.DUR_NS)).max())


def host_pid_lookup(host: Trace):  # noqa: ANN202 - a function of thread ids
    """Thread ids -> the host process each runs in: the pid its cpu ops run in, else the pid
    that holds most cpu ops (a thread the host trace never saw)."""
    ops = host.mask(kind=S.EventKind.CPU_OP)
    pid, tid = host.col(S.PID)[ops], host.col(S.TID)[ops]
    if len(pid) == 0:
        pid, tid = host.col(S.PID), host.col(S.TID)

    def lookup(thread_ids: np.ndarray) -> np.ndarray:
        if len(pid) == 0:
            return np.zeros(len(thread_ids), dtype=np.int64)
        values, counts = np.unique(pid, return_counts=True)
        default = values[np.argmax(counts)]
        pairs = np.unique(np.stack([tid, pid]), axis=1)
        known_tid, first = np.unique(pairs[0], return_index=True)
        pos = np.clip(np.searchsorted(known_tid, thread_ids), 0, max(len(known_tid) - 1, 0))
        hit = known_tid[pos] == thread_ids
        return np.where(hit, pairs[1][first][pos], default)

    return lookup


def _taken_pids(host: Trace) -> frozenset[int]:
    """Pids the host trace uses for something other than the NeuronCore of the same number
    (a trace merged before keeps its cores where they are)."""
    used = set(np.unique(host.col(S.PID)).tolist()) | set(host.process_names)
    return frozenset(p for p in used if host.process_names.get(p) != V.core_process_name(p))


def _first_free_flow_id(host: Trace) -> int:
    """Our ac2g ids start above any ac2g id the host trace has (ids pair within a category)."""
    cat = host.string_id(V.CAT_FLOW)
    ids = host.col(S.FLOW_ID)[host.col(S.CAT_ID) == cat] if cat >= 0 else np.zeros(0)
    return max(int(ids.max(initial=0)) + 1, FIRST_FLOW_ID)


def _row_args(placed: Placement, raw_args: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Each placed row's args as JSON bytes, appended to ``raw_args``; returns their rows and
    the STREAM column read from them (as the loader reads it)."""
    encode = msgspec.json.encode
    out = np.full(len(placed), -1, dtype=np.int64)
    stream = np.full(len(placed), -1, dtype=np.int64)
    fields = placed.records.dtype.names
    for i, values in enumerate(placed.records.tolist()):  # (numpy rows read field by field: slow)
        record = dict(zip(fields, values, strict=True))
        args = numeric_args(record)
        if record["external_id"] != 0:
            args[V.ARG_EXTERNAL_ID] = int(record["external_id"])
        if record["args_id"] >= 0:
            args.update(placed.args[record["args_id"]])
        if args:
            out[i] = len(raw_args)
            raw_args.append(encode(args))
            stream[i] = S.python_int(args.get(V.ARG_STREAM))
    return out, stream


def _merged_trace(host: Trace, placed: Placement, sources: Sequence[str], outside: int) -> Trace:
    n = len(placed)
    strings = {s: i for i, s in enumerate(host.strings)}
    intern = lambda text: strings.setdefault(text, len(strings))  # noqa: E731
    cat_of = np.array([intern(c) for c in CATEGORIES], dtype=np.int32)
    kind_of_cat = np.array([kind_of(c) for c in CATEGORIES], dtype=np.uint8)
    name_id = np.array([intern(s) for s in placed.names], dtype=np.int32)
    raw_args = list(host.raw_args)
    args_row, stream = _row_args(placed, raw_args)
    # A fallback has the runtime category (as Kineto writes it) but its own kind.
    kinds = np.where(
        placed.kind == ActivityKind.FALLBACK,
        np.uint8(S.EventKind.FALLBACK),
        kind_of_cat[placed.category],
    ).astype(np.uint8)
    # Kineto's exporter widens every gpu_user_annotation (a compiled graph's op) by 1 ns a side,
    # so it sorts above the work it covers; the merge writes what the live collector's trace has
    widen = (placed.kind == ActivityKind.GRAPH_OP).astype(np.int64)
    device = {
        S.TS_NS: placed.start_ns - widen,
        S.DUR_NS: placed.end_ns - placed.start_ns + 2 * widen,
        S.PH: np.full(n, S.Phase.COMPLETE, dtype=np.uint8),
        S.KIND: kinds,
        S.NAME_ID: name_id[placed.name_id] if n else name_id,
        S.CAT_ID: cat_of[placed.category],
        S.PID: placed.pid,
        S.TID: placed.tid,
        S.EXTERNAL_ID: np.where(placed.external_id != 0, placed.external_id, -1),
        S.CORRELATION: placed.correlation,
        S.STREAM: stream,
        S.FLOW_ID: np.full(n, -1, dtype=np.int64),
        S.ARGS_ROW: args_row,
        S.FORM: S.default_column(S.FORM, n),
    }
    ends = np.flatnonzero((placed.flow_id > 0) & ~placed.flow_start)
    starts = np.flatnonzero(placed.flow_start)
    starts = starts[np.argsort(placed.flow_id[starts], kind="stable")]
    ends = ends[np.argsort(placed.flow_id[ends], kind="stable")]
    flow_rows = np.concatenate([starts, ends])
    m = len(flow_rows)
    flow_cat = intern(V.CAT_FLOW)
    flow = {
        S.TS_NS: placed.start_ns[flow_rows],
        S.DUR_NS: np.zeros(m, dtype=np.int64),
        S.PH: np.repeat(
            np.array([S.Phase.FLOW_START, S.Phase.FLOW_END], dtype=np.uint8),
            [len(starts), len(ends)],
        ),
        S.KIND: np.full(m, kind_of(V.CAT_FLOW), dtype=np.uint8),
        S.NAME_ID: np.full(m, flow_cat, dtype=np.int32),
        S.CAT_ID: np.full(m, flow_cat, dtype=np.int32),
        S.PID: placed.pid[flow_rows],
        S.TID: placed.tid[flow_rows],
        S.EXTERNAL_ID: np.full(m, -1, dtype=np.int64),
        S.CORRELATION: np.full(m, -1, dtype=np.int64),
        S.STREAM: np.full(m, -1, dtype=np.int64),
        S.FLOW_ID: placed.flow_id[flow_rows],
        S.ARGS_ROW: np.full(m, -1, dtype=np.int64),
        S.FORM: S.default_column(S.FORM, m),
    }
    columns = {
        k: np.concatenate(
            [
                host.columns[k],
                device[k].astype(host.columns[k].dtype),
                flow[k].astype(host.columns[k].dtype),
            ]
        )
        for k in S.EVENT_COLUMNS
    }
    order = np.argsort(columns[S.TS_NS], kind="stable")
    columns = {k: v[order] for k, v in columns.items()}
    threads = {(t.pid, t.tid): t.name for t in placed.threads}
    return dataclasses.replace(
        host,
        columns=columns,
        strings=list(strings),
        raw_args=raw_args,
        metadata=_metadata(host, placed, sources, outside),
        process_names={**host.process_names, **{p.pid: p.name for p in placed.processes}},
        process_sort_index={
            **host.process_sort_index,
            **{p.pid: p.sort_index for p in placed.processes},
        },
        thread_names={**host.thread_names, **threads},
        thread_sort_index={
            **host.thread_sort_index,
            **{(t.pid, t.tid): t.sort_index for t in placed.threads},
        },
    )


def _metadata(
    host: Trace, placed: Placement, sources: Sequence[str], outside: int
) -> dict[str, Any]:
    meta = dict(host.metadata)
    existing = meta.get("deviceProperties")  # kept as written when it is a list
    existing = existing if isinstance(existing, list) else []
    names = {p.get("name") for p in host.device_properties()}
    meta["deviceProperties"] = existing + [
        p for p in placed.device_properties if p.get(V.PROP_NAME) not in names
    ]
    meta.update(placed.metadata)
    meta.update(
        {V.META_SOURCE: V.SOURCE_MERGE, V.META_OUTSIDE: outside, V.META_MERGED_FROM: list(sources)}
    )
    return meta
