"""The one placement: runtime activities -> torch.profiler trace rows, for the live collector and
the offline merge alike, so both write the same trace::

    placed = place(acts, host_ops=HostOps.from_trace(host), host_pid=pid_lookup,
                   window=None, props=device_properties_from_extensions(exts))
    placed.records          # one ``records.RECORD`` row per trace row, what the bridge converts
    placed.start_ns, placed.pid, placed.names[placed.name_id[i]], placed.args[...]  # field views

What it decides, with the vocabulary of ``neuron_profiler.trace.vocabulary``:

- **Linking.** Host-side rows without a correlation id take the innermost host op around them on
  their thread; device work takes its runtime call's (``linking``). Calls and executions pair
  first-in-first-out per (core, ``exec_id``) and queue, by ``nrta_seq_id`` when both carry one.
- **Window.** A row is kept when it was launched inside the window: a device row at its runtime
  call's start (else the source's launch time, else its own start), a host row at its own start.
  Work that finishes after the window is kept. The merge passes no window.
- **Processes and threads.** Runtime calls, host syncs and CPU fallbacks go on the launching host
  thread; device work on its core's process ("NeuronCore N"), one thread per queue whose tid is
  the queue's stream id; tensor events and unknown types on the core's "other" thread. A core
  whose pid the host already uses moves to the first free pid >= 2**20.
- **Names.** Kernels ``"<engine>: <op>"``, collectives ``"CC: <collective>"``, copies as CUDA's
  (``Memcpy HtoD (Host -> NeuronCore)``), runtime calls, syncs and fallbacks prefixed.
- **Args.** CUDA's ``device``, ``stream`` and ``correlation`` on device work (the runtime call
  carries the ``correlation`` too; it equals the ac2g flow id), then ours. Per-row numbers are
  record fields (the C++ bridge renders them; ``numeric_args`` renders them the same way in
  Python); everything else is a small table of distinct arg tuples. A CPU fallback's ``flops``,
  ``bytes``, ``dtype`` and ``engine`` (the op's cost on the device, for the analyzer's native
  time) are in that table, never per-row numbers: those would get an "achieved" rate of host
  time.
- **Flows.** One ac2g arrow from each kept runtime call to the earliest device work it launched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter, is_not
from typing import Any

import msgspec
import numpy as np

from neuron_profiler.runtime_trace import format as F
from neuron_profiler.runtime_trace._pylists import codes, take
from neuron_profiler.runtime_trace.activities import ActivityKind, DeviceActivities, Queue
from neuron_profiler.runtime_trace.extension import Extension, LooseExtension
from neuron_profiler.runtime_trace.linking import (
    link_by_containment,
    match_runtime_calls,
    with_stage_exec_ids,
)
from neuron_profiler.runtime_trace.parser import decode_rows, sanitized
from neuron_profiler.runtime_trace.records import (
    CATEGORIES,
    KINETO_MEMCPY,
    KINETO_TYPES,
    RECORD,
    with_rates,
)
from neuron_profiler.trace import vocabulary as V

# Category (index into CATEGORIES) of each ActivityKind (index: ActivityKind code).
_CAT_BY_KIND = np.full(len(ActivityKind), 3, dtype=np.uint8)
_CAT_BY_KIND[[ActivityKind.KERNEL, ActivityKind.COLLECTIVE, ActivityKind.COLLECTIVE_WAIT]] = 0
_CAT_BY_KIND[ActivityKind.DMA] = 1
_CAT_BY_KIND[
    [
        ActivityKind.RUNTIME_CALL,
        ActivityKind.HOST_SYNC,
        ActivityKind.FALLBACK,
        ActivityKind.EXEC_STAGE,
    ]
] = 2
_CAT_BY_KIND[ActivityKind.OVERHEAD] = 4
_CAT_BY_KIND[ActivityKind.GRAPH_OP] = 5

ON_HOST_THREAD = np.array(
    [
        ActivityKind.RUNTIME_CALL,
        ActivityKind.HOST_SYNC,
        ActivityKind.FALLBACK,
        ActivityKind.EXEC_STAGE,
        ActivityKind.OVERHEAD,
    ],
    dtype=np.uint8,
)
DEVICE_WORK = np.array(
    [ActivityKind.KERNEL, ActivityKind.DMA, ActivityKind.COLLECTIVE, ActivityKind.COLLECTIVE_WAIT],
    dtype=np.uint8,
)
# Rows launched by nobody but themselves (the window reads their own start).
_SELF_LAUNCHED = np.array([*ON_HOST_THREAD, ActivityKind.INSTANT], dtype=np.uint8)
# Queue index (vocabulary.QUEUE_NAMES order) of each Queue code; HOST never reaches a core.
_QUEUE_INDEX = np.array([0, 1, 2, 3, 3], dtype=np.int64)
# Unknown event types and instants keep their whole runtime data as an arg.
RAW_DATA_KINDS = frozenset({int(ActivityKind.GENERIC), int(ActivityKind.INSTANT)})
_SIMPLE_KINDS = (
    ActivityKind.KERNEL,
    ActivityKind.RUNTIME_CALL,
    ActivityKind.DMA,
    ActivityKind.OVERHEAD,
)
_TYPE_DIRECTION = {F.DMEM_BUF_COPYIN: F.H2D, F.DMEM_BUF_COPYOUT: F.D2H, F.EXT_DMA_D2D: F.D2D}
DISPATCH_FRAMES = V.DISPATCH_FRAMES
# First ac2g flow id (= ``correlation`` arg). CUPTI's correlation ids are large; tools size their
# columns from the values they see: HTA 0.5.0 on pandas >= 2 fails to store row indices in a
# correlation column that small ids made int8. Starting at 2**30 keeps it int32, and below
# Kineto's uint32 flow id limit.
FIRST_FLOW_ID = 1 << 30


# The extension's decoder (runtime_trace.extension): numbers typed so columns come out without a
# loop; its loose twin (same keys, any value) for payloads whose values are odd (floats, nulls).
_Ext = Extension
_LooseExt = LooseExtension


class _Data(msgspec.Struct, gc=False):
    neuron_profiler: _Ext | None = msgspec.field(default=None, name=F.EXT_KEY)
    algorithm: Any = msgspec.field(default=None, name=F.DATA_ALGORITHM)  # a collective's
    size: Any = msgspec.field(default=None, name=F.DATA_SIZE)  # a copy's size in bytes


class _LooseData(msgspec.Struct, gc=False):
    neuron_profiler: _LooseExt | None = msgspec.field(default=None, name=F.EXT_KEY)
    algorithm: Any = msgspec.field(default=None, name=F.DATA_ALGORITHM)
    size: Any = msgspec.field(default=None, name=F.DATA_SIZE)


_NO_EXT = _Ext()
_get_graph_ops = attrgetter("graph_ops")
_decode_loose = msgspec.json.Decoder(_LooseData).decode


def _int_or_missing(v: Any) -> int:
    ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63
    return v if ok else -1


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


def _decode_datas(data: Sequence[bytes]) -> tuple[list[_Data], int]:
    """Each row's data object, and how many numbers were odd (a float, non-finite, negative,
    too large: left out of the row and counted); odd rows go through the loose path."""
    try:
        return decode_rows(data, _Data), 0
    except msgspec.ValidationError:
        pass
    out, odd = [], 0
    try:
        loose = decode_rows(data, _LooseData)
    except msgspec.ValidationError:  # a number no decoder holds (1e400): row by row
        loose = []
        for raw in data:
            try:
                loose.append(_decode_loose(raw))
            except msgspec.ValidationError:
                fixed = sanitized(bytes(raw))
                loose.append(_decode_loose(fixed[0]) if fixed else _LooseData())
                odd += fixed[1] if fixed else 1
    for d in loose:
        e = d.neuron_profiler
        ext = None
        if e is not None:
            numbers = [_int_or_missing(v) for v in (e.flops, e.bytes, e.launch_ns)]
            odd += sum(
                v is not None and n < 0
                for v, n in zip((e.flops, e.bytes, e.launch_ns), numbers, strict=True)
            )
            ext = _Ext(
                op=_text(e.op),
                engine=_text(e.engine),
                dtype=_text(e.dtype),
                flops=numbers[0],
                bytes=numbers[1],
                direction=_text(e.direction),
                launch_ns=numbers[2],
                collective=e.collective,
                ranks=e.ranks,
                algorithm=e.algorithm,
                reason=e.reason,
                shapes=e.shapes,
                dtypes=e.dtypes,
                sync=e.sync,
                overhead=_text(e.overhead),
                pct_of_peak=e.pct_of_peak if isinstance(e.pct_of_peak, int | float) else None,
                collective_wait=e.collective_wait is True,
                graph_id=e.graph_id,
                graph_ops=e.graph_ops,
            )
        out.append(_Data(ext, d.algorithm, d.size))
    return out, odd


@dataclass(frozen=True)
class HostOps:
    """The host ops that device activity links to: per op its thread, span and correlation id
    (torch.profiler's "External id"); ``frame_parent`` maps the id of a dispatch frame
    (``PythonSubclass``...) to the op around it, as the bridge resolves it live; ``pid``: each
    op's process where the source says it (a loaded trace; None from the live bridge), for
    sources that name a thread by (process, thread) (Explorer's ``framework_stream_id``)."""

    tid: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    correlation: np.ndarray
    frame_parent: dict[int, int] = field(default_factory=dict)
    pid: np.ndarray | None = None

    @classmethod
    def empty(cls) -> HostOps:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, z, z)

    @classmethod
    def from_trace(cls, host: Any) -> HostOps:
        """The complete cpu ops of a loaded ``Trace`` that carry an External id; dispatch frames
        are left out and resolved to the op that encloses them."""
        from neuron_profiler.trace import schema as S

        c = host.columns
        ops = host.mask(kind=S.EventKind.CPU_OP, ph=S.Phase.COMPLETE) & (c[S.EXTERNAL_ID] >= 0)
        frame_ids = [i for i, s in enumerate(host.strings) if s in DISPATCH_FRAMES]
        is_frame = ops & np.isin(c[S.NAME_ID], np.asarray(frame_ids, dtype=np.int64))
        real = ops & ~is_frame
        tid, start = c[S.TID][real], c[S.TS_NS][real]
        end, corr = start + c[S.DUR_NS][real], c[S.EXTERNAL_ID][real]
        pid = c[S.PID][real]
        parents: dict[int, int] = {}
        if is_frame.any():
            from neuron_profiler.runtime_trace.linking import innermost_containing

            at = innermost_containing(tid, start, end, c[S.TID][is_frame], c[S.TS_NS][is_frame])
            parent = np.where(at >= 0, corr[np.clip(at, 0, None)] if len(corr) else 0, 0)
            parents = dict(zip(c[S.EXTERNAL_ID][is_frame].tolist(), parent.tolist(), strict=True))
        return cls(tid, start, end, corr, parents, pid)


@dataclass(frozen=True)
class CoreProcess:
    """One NeuronCore's process in the trace."""

    core: int
    pid: int
    name: str
    sort_index: int
    label: str


@dataclass(frozen=True)
class QueueThread:
    pid: int
    tid: int
    name: str
    sort_index: int


@dataclass(frozen=True)
class Placement:
    """Placed rows (the kept activities in activity order, then compiled graphs' ops) and the
    trace structure around them.

    Args:
        records: one ``RECORD`` row per placed row (fields in ``runtime_trace.records``); each
            field reads as an attribute too, a view: ``placed.start_ns`` is
            ``placed.records["start_ns"]``.
        names: what ``name_id`` indexes. args: what ``args_id`` indexes, distinct (key, value)
            tuples (values are plain JSON values, or ``msgspec.Raw`` for runtime data kept as it
            came).
        processes / threads / device_properties: one per core and queue.
        metadata: the counts every trace with device rows carries (vocabulary ``META_*``).
        excluded: rows left out by the window. flows: arrows written.
    """

    records: np.ndarray
    names: list[str]
    args: list[tuple[tuple[str, Any], ...]]
    processes: list[CoreProcess]
    threads: list[QueueThread]
    device_properties: list[dict[str, Any]]
    metadata: dict[str, Any]
    excluded: int = 0
    flows: int = 0

    def __len__(self) -> int:
        return len(self.records)

    def __getattr__(self, name: str) -> np.ndarray:
        if name in RECORD.fields:  # (checked first: no recursion before ``records`` is set)
            return self.records[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def _g6(value: float) -> float | int:
    """C++ ``fmt::format("{:.6g}")`` read back as JSON ("4" is an int there, as here)."""
    return msgspec.json.decode(f"{value:.6g}".encode())


def numeric_args(record: Mapping[str, Any]) -> dict[str, Any]:
    """The per-row numeric args of one ``RECORD`` row (its fields by name: a dict, or a row of
    the array), exactly as the C++ bridge renders them."""
    out: dict[str, Any] = {}
    for key, field_name in (
        (V.ARG_DEVICE, "device"),
        (V.ARG_STREAM, "stream"),
        (V.ARG_CORRELATION, "correlation"),
        (V.ARG_EXEC_ID, "exec_id"),
    ):
        if record[field_name] >= 0:
            out[key] = int(record[field_name])
    flops, nbytes = int(record["flops"]), int(record["bytes"])
    if flops >= 0:
        out[V.ARG_FLOPS] = flops
        out[V.ARG_TFLOPS] = _g6(float(record["tflops"]))
    if nbytes >= 0:
        out[V.ARG_BYTES] = nbytes
        key = V.ARG_BANDWIDTH if record["kineto_type"] == KINETO_MEMCPY else V.ARG_GBPS
        out[key] = _g6(float(record["gbps"]))
    return out


def _filled(records: np.ndarray, **fields: Any) -> np.ndarray:
    """``records`` (``RECORD`` rows) with ``fields`` set; the Kineto type follows the category."""
    for key, value in fields.items():
        records[key] = value
    records["kineto_type"] = KINETO_TYPES[records["category"]]
    return with_rates(records)


def place(
    acts: DeviceActivities,
    *,
    host_ops: HostOps,
    host_pid: int | Callable[[np.ndarray], np.ndarray],
    window: tuple[int, int] | None = None,
    taken_pids: frozenset[int] = frozenset(),
    props: Sequence[dict[str, Any]] = (),
    flow_id_base: int = FIRST_FLOW_ID,
    warmup_ns: int | None = None,
) -> Placement:
    """Lay out ``acts`` as trace rows (see the module docstring).

    Args:
        host_ops: the ops to link host-side rows to by containment.
        host_pid: the host process id, or a function from thread ids to process ids.
        window: keep rows launched inside [start, end] (None: keep all).
        warmup_ns: when capture began before the window (Kineto's configure, a schedule's
            warm-up): device work launched from then on that runs inside the window is kept
            too, unlinked (its op is not in the trace), as Kineto keeps CUDA's by device time
            (Kineto drops a kernel running across the window's start; it is kept here, or the
            device would look idle while it was busy).
        taken_pids: pids the host already uses (a core that would collide moves).
        props: deviceProperties per core (``id`` keys), e.g. from the envelope extension.
        flow_id_base: the first ac2g flow id (above any ac2g id the host trace already has).
    """
    acts = _linked(with_stage_exec_ids(acts), host_ops)
    datas, odd_values = _decode_datas(acts.data)
    exts = [d.neuron_profiler or _NO_EXT for d in datas]
    n = len(acts)
    flops, nbytes, ext_launch = (
        np.fromiter(map(attrgetter(k), exts), dtype=np.int64, count=n)
        for k in ("flops", "bytes", "launch_ns")
    )
    nbytes = _copy_sizes(acts, datas, nbytes)
    host_timed = acts.host_timed if len(acts.host_timed) == n else np.zeros(n, dtype=bool)
    caller = match_runtime_calls(acts)
    launch = _launch_ns(acts, caller, ext_launch)
    keep = (
        np.ones(n, dtype=bool) if window is None else (launch >= window[0]) & (launch <= window[1])
    )
    if window is not None and warmup_ns is not None:
        keep |= (
            np.isin(acts.kind, DEVICE_WORK)
            & (launch >= warmup_ns)
            & (acts.end_ns > window[0])
            & (acts.start_ns <= window[1])
        )
    rows = np.flatnonzero(keep)
    kind = acts.kind[rows]
    on_host = np.isin(kind, ON_HOST_THREAD)
    work = np.isin(kind, DEVICE_WORK)
    cores = sorted(set(acts.core[rows][~on_host].tolist()) | {int(p["id"]) for p in props})
    core_pid = _core_pids(cores, taken_pids)
    queue_index = _QUEUE_INDEX[acts.queue[rows].astype(np.intp)]
    stream = np.array(
        [V.queue_stream(c, 0) for c in range(max(cores, default=-1) + 1)], dtype=np.int64
    )
    core_stream = stream[acts.core[rows]] + queue_index if len(stream) else queue_index
    pid_of_core = np.array(
        [core_pid.get(c, c) for c in range(max(cores, default=-1) + 1)], dtype=np.int64
    )
    thread = acts.thread_id[rows]
    host = (
        np.full(len(rows), host_pid, dtype=np.int64)
        if isinstance(host_pid, int)
        else np.asarray(host_pid(thread), dtype=np.int64)
    )
    device_side_pid = pid_of_core[acts.core[rows]] if len(pid_of_core) else thread
    flow_id, flow_start, correlation = _flows(acts, caller, keep, rows, flow_id_base)
    name_id, names = _names(acts, rows, exts)
    args_id, args = _args(acts, rows, exts, datas, host_timed)
    placed_core = np.where(work, acts.core[rows], -1).astype(np.int64)
    fallback = kind == ActivityKind.FALLBACK  # their flops and bytes are args (_row_args)
    records = _filled(
        np.zeros(len(rows), dtype=RECORD),
        activity=rows,
        start_ns=acts.start_ns[rows],
        end_ns=acts.end_ns[rows],
        kind=kind,
        category=_CAT_BY_KIND[kind],
        pid=np.where(on_host, host, device_side_pid),
        tid=np.where(on_host, thread, core_stream),
        name_id=name_id,
        external_id=acts.correlation_id[rows],
        exec_id=acts.exec_id[rows],
        flops=np.where(fallback, -1, flops[rows]),
        bytes=np.where(fallback, -1, nbytes[rows]),
        device=placed_core,
        stream=np.where(work, core_stream, -1),
        correlation=correlation,
        flow_id=flow_id,
        flow_start=flow_start,
        args_id=args_id,
    )
    return _with_graph_ops(
        exts,
        acts.modelled[rows],
        Placement(
            records=records,
            names=names,
            args=args,
            processes=_processes(cores, core_pid, props),
            threads=_threads(cores, core_pid, used_other=bool((~on_host & ~work).any())),
            device_properties=complete_properties(cores, props),
            metadata=_metadata(acts, rows, props, core_pid, odd_values),
            excluded=int(n - len(rows)),
            flows=int(flow_start.sum()),
        ),
    )


def _with_graph_ops(exts: list[_Ext], modelled: np.ndarray, placed: Placement) -> Placement:
    """Each compiled graph's ops as rows nested in its execution, on the same stream: from the
    op's offset for its modelled share (the shares add up to the execution). Their category is
    CUDA's for ranges on a device stream, and they carry no External id: torch's
    ``key_averages()`` gives an op the device time of every activity linked to it, so linked
    ops would charge the launching op (``CompiledFunction``) their execution's time a second
    time. The execution keeps the link, so the analysis (which reads kernels) is unchanged."""
    kernels = np.flatnonzero(placed.kind == ActivityKind.KERNEL)
    graphs = list(map(_get_graph_ops, take(exts, placed.activity[kernels])))
    found = np.fromiter(map(is_not, graphs, repeat(None)), dtype=bool, count=len(graphs))
    if not found.any():  # the common case: no compiled graph, one C-level pass
        return placed
    parents, ops = [], []
    for j in np.flatnonzero(found).tolist():
        graph = graphs[j]
        for op in graph if isinstance(graph, list) else ():
            if isinstance(op, dict):
                parents.append(int(kernels[j]))
                ops.append(op)
    if not ops:
        return placed
    p = np.asarray(parents, dtype=np.int64)

    def number(key: str) -> np.ndarray:
        return np.array([_int_or_missing(o.get(key)) for o in ops], dtype=np.int64)

    offset, dur = np.maximum(number(F.X_OFFSET_NS), 0), np.maximum(number(F.X_DURATION_NS), 0)
    # the shares fill their execution exactly: the last op of each takes what rounding left
    total = np.bincount(p, weights=dur, minlength=len(placed)).astype(np.int64)
    last = np.flatnonzero(np.append(p[1:] != p[:-1], True))
    left = (placed.end_ns - placed.start_ns - total)[p[last]]
    dur[last] = np.maximum(dur[last] + left, 0)
    start = placed.start_ns[p] + offset
    names = list(placed.names)
    table = {name: k for k, name in enumerate(names)}
    name_id = np.array(
        [
            table.setdefault(
                V.kernel_name(_text(o.get(F.X_ENGINE)), str(o.get(F.X_OP, "op"))), len(table)
            )
            for o in ops
        ],
        dtype=np.int32,
    )
    names = list(table)
    args = list(placed.args)
    graph_id = [exts[placed.activity[j]].graph_id for j in parents]
    arg_ids = np.empty(len(ops), dtype=np.int32)
    for k, (o, g) in enumerate(zip(ops, graph_id, strict=True)):
        entry = tuple(
            (key, value)
            for key, value in (
                (V.ARG_EMULATED, True if modelled[parents[k]] else None),
                (V.ARG_OP, o.get(F.X_OP)),
                (V.ARG_ENGINE, o.get(F.X_ENGINE)),
                (V.ARG_GRAPH_ID, g),
            )
            if value is not None
        )
        arg_ids[k] = len(args)
        args.append(entry)
    # each op starts as its execution's row (activity, pid, tid), then is itself, unlinked
    ops_rows = _filled(
        placed.records[p],
        start_ns=start,
        end_ns=start + dur,
        kind=ActivityKind.GRAPH_OP,
        category=CATEGORIES.index(V.CAT_GRAPH_OP),
        name_id=name_id,
        args_id=arg_ids,
        external_id=0,
        flops=number(F.X_FLOPS),
        bytes=number(F.X_BYTES),
        exec_id=-1,
        device=-1,
        stream=-1,
        correlation=-1,
        flow_id=0,
        flow_start=0,
    )
    return dataclasses.replace(
        placed, records=np.concatenate([placed.records, ops_rows]), names=names, args=args
    )


def _linked(acts: DeviceActivities, ops: HostOps) -> DeviceActivities:
    """Correlation ids from containment (instants count as host-side here: unlinked, torch would
    give them the enclosing op's id and count its device time twice), dispatch frames resolved
    to the op around them."""
    queue = np.where(acts.kind == ActivityKind.INSTANT, np.uint8(Queue.HOST), acts.queue)
    linked = link_by_containment(
        dataclasses.replace(acts, queue=queue), ops.tid, ops.start_ns, ops.end_ns, ops.correlation
    )
    corr = linked.correlation_id
    if ops.frame_parent:
        keys = np.fromiter(ops.frame_parent, dtype=np.int64)
        vals = np.fromiter(ops.frame_parent.values(), dtype=np.int64)
        order = np.argsort(keys)
        keys, vals = keys[order], vals[order]
        pos = np.clip(np.searchsorted(keys, corr), 0, len(keys) - 1)
        hit = keys[pos] == corr
        corr = np.where(hit, vals[pos], corr)
    return dataclasses.replace(linked, queue=acts.queue, correlation_id=corr)


def _launch_ns(acts: DeviceActivities, caller: np.ndarray, ext_launch: np.ndarray) -> np.ndarray:
    """When the host launched each row: its runtime call's start, else the source's launch
    time, else its own start; host-side rows and instants are their own launch."""
    launch = np.where(ext_launch >= 0, ext_launch, acts.start_ns)
    called = caller >= 0
    launch[called] = acts.start_ns[caller[called]]
    own = np.isin(acts.kind, _SELF_LAUNCHED)
    launch[own] = acts.start_ns[own]
    return launch


def _flows(
    acts: DeviceActivities, caller: np.ndarray, keep: np.ndarray, rows: np.ndarray, base: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per kept row: ac2g flow id, flow-start flag, and the ``correlation`` arg (the flow id on a
    call and all its work; 0 on device work that no kept call launched; -1 elsewhere)."""
    n = len(acts)
    is_work = np.isin(acts.kind, DEVICE_WORK)
    linked = np.flatnonzero(keep & is_work & (caller >= 0))
    linked = linked[keep[caller[linked]]]
    calls = np.unique(caller[linked])
    ids = np.zeros(n, dtype=np.int64)
    ids[calls] = np.arange(base, base + len(calls), dtype=np.int64)  # calls in row order
    correlation = np.where(is_work, 0, -1).astype(np.int64)
    correlation[calls] = ids[calls]
    correlation[linked] = ids[caller[linked]]
    # the earliest work of each call ends its flow
    order = np.lexsort((linked, acts.start_ns[linked], caller[linked]))
    by_call = linked[order]
    _, first = np.unique(caller[by_call], return_index=True)
    flow_id = np.zeros(n, dtype=np.int64)
    flow_id[calls] = ids[calls]
    flow_id[by_call[first]] = ids[caller[by_call[first]]]
    flow_start = np.zeros(n, dtype=bool)
    flow_start[calls] = True
    return flow_id[rows], flow_start[rows], correlation[rows]


def _core_pids(cores: list[int], taken: frozenset[int]) -> dict[int, int]:
    """Core -> pid: the core index, unless the host uses it; then the first free pid >= 2**20."""
    out: dict[int, int] = {}
    used = set(taken) | set(cores)
    spare = V.RELOCATED_PID_BASE
    for core in cores:
        if core not in taken:
            out[core] = core
            continue
        while spare in used:
            spare += 1
        out[core] = spare
        used.add(spare)
    return out


def _processes(
    cores: list[int], core_pid: dict[int, int], props: Sequence[dict[str, Any]]
) -> list[CoreProcess]:
    chip = {int(p["id"]): str(p.get(V.PROP_CHIP, V.DEFAULT_CHIP)) for p in props}
    return [
        CoreProcess(
            c,
            core_pid[c],
            V.core_process_name(c),
            V.core_sort_index(c),
            chip.get(c, V.DEFAULT_CHIP),
        )
        for c in cores
    ]


def _threads(cores: list[int], core_pid: dict[int, int], *, used_other: bool) -> list[QueueThread]:
    queues = range(len(V.QUEUE_NAMES) if used_other else len(V.QUEUE_NAMES) - 1)
    return [
        QueueThread(core_pid[c], V.queue_stream(c, q), V.QUEUE_NAMES[q], q)
        for c in cores
        for q in queues
    ]


_PEAK_KEYS = (V.PROP_PEAK_BF16_TFLOPS, V.PROP_HBM_GBPS, V.PROP_PEAK_TFLOPS)


def complete_properties(cores: list[int], props: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """deviceProperties per core: the source's entry, else id and name only; an entry with no
    peak figure says so (``peaks_known: false``) rather than inventing one."""
    by_core = {int(p["id"]): dict(p) for p in props}
    out = []
    for core in cores:
        p = by_core.get(core) or {
            V.PROP_ID: core,
            V.PROP_NAME: V.core_process_name(core),
            V.PROP_EMULATED: False,
        }
        p.setdefault(V.PROP_PEAKS_KNOWN, any(k in p for k in _PEAK_KEYS))
        out.append(p)
    return out


def device_properties_from_extensions(exts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-core deviceProperties the emulator writes in its envelope extension (the first
    envelope that names a core wins); real captures have none."""
    out: dict[int, dict[str, Any]] = {}
    for ext in exts:
        entries = ext.get(F.X_DEVICE_PROPERTIES) if isinstance(ext, dict) else None
        for p in entries if isinstance(entries, list) else ():
            if isinstance(p, dict) and isinstance(p.get(V.PROP_ID), int):
                out.setdefault(p[V.PROP_ID], p)
    return [out[k] for k in sorted(out)]


def _metadata(
    acts: DeviceActivities,
    rows: np.ndarray,
    props: Sequence[dict[str, Any]],
    core_pid: dict[int, int],
    odd_values: int,
) -> dict[str, Any]:
    modelled = bool(acts.modelled.any())
    peaks = "modelled" if any(k in p for p in props for k in _PEAK_KEYS) else "unknown"
    calls = rows[acts.kind[rows] == ActivityKind.RUNTIME_CALL]
    meta: dict[str, Any] = {
        V.META_DROPPED: (
            {str(k): int(v) for k, v in sorted(acts.dropped.items())}
            if acts.drops_known
            else V.DROPS_UNKNOWN
        ),
        V.META_MALFORMED: int(acts.malformed + odd_values),
        V.META_UNPAIRED: int(acts.unpaired),
        V.META_UNMAPPED: int(acts.unmapped),
        V.META_ACTIVITIES: len(rows),
        V.META_MODELLED: modelled,
        V.META_PEAKS: peaks,
        V.META_UNLINKED_CALLS: int((acts.correlation_id[calls] == 0).sum()),
        V.META_HIDDEN_TYPES: sorted(acts.hidden_types),
    }
    numerics = sorted({str(p[V.PROP_NUMERICS]) for p in props if V.PROP_NUMERICS in p})
    if numerics:  # the emulator says whether results were computed (timing mode: skipped)
        meta[V.META_NUMERICS] = numerics[0] if len(numerics) == 1 else "mixed"
    moved = {str(c): p for c, p in core_pid.items() if c != p}
    if moved:
        meta[V.META_RELOCATED_CORES] = moved
    if acts.truncated:
        meta[V.META_TRUNCATED] = int(acts.truncated)
    return meta


def _copy_sizes(acts: DeviceActivities, datas: list[_Data], nbytes: np.ndarray) -> np.ndarray:
    """Copies the real runtime records carry their bytes as ``size`` (its copy calls carry
    ``size`` too; only the copy counts them, so bytes are counted once)."""
    need = np.flatnonzero((acts.kind == ActivityKind.DMA) & (nbytes < 0))
    if len(need) == 0:
        return nbytes
    out = nbytes.copy()
    out[need] = [_int_or_missing(datas[i].size) for i in need.tolist()]
    return out


# -- names --------------------------------------------------------------------------------------
def _row_name(kind: int, base: str, e: _Ext) -> str:
    """The name of one row (see the module docstring); ``base`` is the parser's label."""
    if kind == ActivityKind.KERNEL:
        return V.kernel_name(e.engine, e.op) if e.op else base
    if kind == ActivityKind.COLLECTIVE:
        label = e.collective if e.collective is not None else (e.op or base)
        return f"{V.COLLECTIVE_ENGINE}: {label}"
    if kind == ActivityKind.COLLECTIVE_WAIT:  # named for its collective when the source knows it
        return (
            V.COLLECTIVE_WAIT_PREFIX + str(e.collective)
            if e.collective is not None
            else V.COLLECTIVE_WAIT_NAME
        )
    if kind == ActivityKind.DMA:
        direction = e.direction or _TYPE_DIRECTION.get(base)
        return V.MEMCPY_NAMES.get(direction or "", V.MEMCPY_UNKNOWN)
    if kind == ActivityKind.RUNTIME_CALL:
        return V.RUNTIME_PREFIX + base if "::" in base else base
    if kind == ActivityKind.HOST_SYNC:
        return V.SYNC_PREFIX + (e.op or (str(e.sync) if e.sync is not None else "device"))
    if kind == ActivityKind.FALLBACK:
        return V.fallback_name(e.op or base)
    if kind == ActivityKind.OVERHEAD:
        return V.OVERHEAD_PREFIX + (e.overhead or "host")
    return base


def _names(
    acts: DeviceActivities, rows: np.ndarray, exts: list[_Ext]
) -> tuple[np.ndarray, list[str]]:
    """Name per kept row, rendered once per distinct (kind, label, extension names)."""
    if len(rows) == 0:
        return np.zeros(0, dtype=np.int32), []
    sub = take(exts, rows)
    _, ext_code = codes(map(attrgetter("op", "engine", "direction", "overhead"), sub), len(sub))
    # collectives, their waits and syncs name themselves from values of any type: row by row
    own = np.flatnonzero(
        np.isin(
            acts.kind[rows],
            [ActivityKind.COLLECTIVE, ActivityKind.COLLECTIVE_WAIT, ActivityKind.HOST_SYNC],
        )
    )
    ext_code[own] = len(sub) + np.arange(len(own))
    key = (ext_code * len(acts.names) + acts.name_id[rows]) * len(ActivityKind) + acts.kind[rows]
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    table: dict[str, int] = {}
    ids = [
        table.setdefault(
            _row_name(int(acts.kind[rows[j]]), acts.names[acts.name_id[rows[j]]], sub[j]),
            len(table),
        )
        for j in first.tolist()
    ]
    return np.asarray(ids, dtype=np.int32)[inverse.reshape(-1)], list(table)


# -- args -----------------------------------------------------------------------------------------
def _row_args(
    kind: int, e: _Ext, real_algorithm: Any, raw: bytes, modelled: bool, host_timed: bool = False
) -> tuple[tuple[str, Any], ...]:
    """The args of one row besides the per-row numbers."""
    out: list[tuple[str, Any]] = []
    if modelled:
        out.append((V.ARG_EMULATED, True))
    if host_timed:
        out.append((V.ARG_HOST_TIMED, True))
    if kind == ActivityKind.KERNEL:
        out += [
            (key, value)
            for key, value in (
                (V.ARG_OP, e.op),
                (V.ARG_ENGINE, e.engine),
                (V.ARG_GRAPH_ID, e.graph_id),
                (V.ARG_DTYPE, e.dtype),
                (V.ARG_PCT_PEAK, e.pct_of_peak),
            )
            if value is not None
        ]
    elif kind == ActivityKind.RUNTIME_CALL and e.op is not None:
        out.append((V.ARG_OP, e.op))
    elif kind == ActivityKind.DMA and e.direction is not None:
        out.append((V.ARG_DIRECTION, e.direction))
        if e.pct_of_peak is not None:
            out.append((V.ARG_PCT_PEAK, e.pct_of_peak))
    elif kind == ActivityKind.COLLECTIVE:
        ranks = e.ranks if isinstance(e.ranks, list) else []
        algorithm = e.algorithm if e.algorithm is not None else real_algorithm
        out += [
            (V.ARG_IS_COLLECTIVE, True),
            (V.ARG_COLLECTIVE, str(e.collective)),
            (V.ARG_GROUP_RANKS, ranks),
            (V.ARG_GROUP_SIZE, len(ranks)),
        ]
        if e.op is not None:
            out.append((V.ARG_OP, e.op))
        if algorithm is not None:
            out.append((V.ARG_ALGORITHM, str(algorithm)))
    elif kind == ActivityKind.FALLBACK:  # flops/bytes: the op's cost on the device (args, so
        # that no "achieved" rate of host time is derived from them)
        out += [
            (V.ARG_IS_FALLBACK, True),
            (V.ARG_OP, str(e.op)),
            (V.ARG_FALLBACK_REASON, str(e.reason)),
            (V.ARG_SHAPES, e.shapes),
            (V.ARG_DTYPES, e.dtypes),
        ]
        out += [
            (key, value)
            for key, value in ((V.ARG_FLOPS, e.flops), (V.ARG_BYTES, e.bytes))
            if value >= 0
        ]
        out += [
            (key, value)
            for key, value in ((V.ARG_DTYPE, e.dtype), (V.ARG_ENGINE, e.engine))
            if value is not None
        ]
    elif kind == ActivityKind.HOST_SYNC and e.sync is not None:
        out.append((V.ARG_SYNC, str(e.sync)))
    elif kind == ActivityKind.COLLECTIVE_WAIT:
        out.append((V.ARG_COLLECTIVE_WAIT, True))
        if e.collective is not None:  # the emulator knows which collective it waits for
            ranks = e.ranks if isinstance(e.ranks, list) else []
            out += [
                (V.ARG_COLLECTIVE, str(e.collective)),
                (V.ARG_GROUP_RANKS, ranks),
                (V.ARG_GROUP_SIZE, len(ranks)),
            ]
    elif kind == ActivityKind.OVERHEAD:
        out += [(V.ARG_OVERHEAD, str(e.overhead)), (V.ARG_HIDDEN, 1)] + (
            [(V.ARG_OP, e.op)] if e.op else []
        )
    elif kind in RAW_DATA_KINDS:
        out.append((V.ARG_DATA, msgspec.Raw(raw)))
    return tuple(out)


def _with_reach(
    ids: np.ndarray,
    at: np.ndarray,
    kind: np.ndarray,
    sub: list[_Ext],
    entries: list[tuple[tuple[str, Any], ...]],
) -> None:
    """Overhead spans whose extension gives the emulator's time just before / after them
    (host_cost.py): their shared args plus those two figures, one entry per row (each row's
    own: nearly every row differs, so they are appended, not interned)."""
    for j in np.flatnonzero(kind[at] == ActivityKind.OVERHEAD).tolist():
        e = sub[j]
        reach = tuple(
            (key, value)
            for key, value in (
                (V.ARG_OVERHEAD_BEFORE, e.before_ns),
                (V.ARG_OVERHEAD_AFTER, e.after_ns),
            )
            if type(value) is int and value
        )
        if reach:
            base = entries[ids[at[j]]] if ids[at[j]] >= 0 else ()
            ids[at[j]] = len(entries)
            entries.append(base + reach)


def _args(
    acts: DeviceActivities,
    rows: np.ndarray,
    exts: list[_Ext],
    datas: list[_Data],
    host_timed: np.ndarray,
) -> tuple[np.ndarray, list[tuple[tuple[str, Any], ...]]]:
    """Per kept row an index into a table of distinct arg tuples (-1: none). Kernels, launches,
    DMA and overhead spans depend only on (kind, modelled, the extension fields their args
    show): rendered once per distinct key; the rare other kinds row by row."""
    table: dict[Any, int] = {}
    entries: list[tuple[tuple[str, Any], ...]] = []

    def intern(args: tuple[tuple[str, Any], ...]) -> int:
        if not args:
            return -1
        key = tuple((k, bytes(v) if isinstance(v, msgspec.Raw) else repr(v)) for k, v in args)
        if key not in table:
            table[key] = len(entries)
            entries.append(args)
        return table[key]

    ids = np.full(len(rows), -1, dtype=np.int32)
    kind, modelled, timed = acts.kind[rows], acts.modelled[rows], host_timed[rows]
    simple = np.isin(kind, np.array(_SIMPLE_KINDS, dtype=np.uint8))
    at = np.flatnonzero(simple)
    if len(at):
        sub = take(exts, rows[at])
        _, label = codes(
            map(
                attrgetter(
                    "op",
                    "engine",
                    "dtype",
                    "direction",
                    "overhead",
                    "pct_of_peak",
                ),
                sub,
            ),
            len(sub),
        )
        key = ((label * len(ActivityKind) + kind[at]) * 2 + modelled[at]) * 2 + timed[at]
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        distinct = [
            intern(
                _row_args(
                    int(kind[at[j]]), sub[j], None, b"", bool(modelled[at[j]]), bool(timed[at[j]])
                )
            )
            for j in first.tolist()
        ]
        ids[at] = np.asarray(distinct, dtype=np.int32)[inverse.reshape(-1)]
        _with_reach(ids, at, kind, sub, entries)
    for j in np.flatnonzero(~simple).tolist():
        i, k = int(rows[j]), int(kind[j])
        raw = bytes(acts.data[i]) if k in RAW_DATA_KINDS else b""  # payload bytes only if needed
        ids[j] = intern(_row_args(k, exts[i], datas[i].algorithm, raw, bool(modelled[j])))
    return ids, entries
