"""Device memory over the trace: peaks per device and per step, what is live at the peak and
which ops allocated it, headroom against the device's capacity, and two findings (a step near
capacity, memory that grows step after step)::

    mem = ctx.result(memory_usage)            # None: the trace has no memory events
    d = mem.devices[0]
    d.label, d.peak_bytes, d.peak_ns, d.capacity_bytes, d.headroom_bytes
    d.step_peak_bytes, d.step_floor_bytes     # one entry per step (``ctx.steps``)
    d.live_at_peak[0].op, d.live_at_peak[0].call_site
    d.by_op[0].op, d.by_op[0].live_bytes      # the peak, attributed to the allocating ops
    mem.findings                              # memory_near_capacity, memory_leak

Two sources, each read per device:

- torch.profiler's ``[memory]`` instant events (``profile_memory=True``; CUDA and any other
  device, the emulated NeuronCores included): one per allocation (``Bytes`` > 0) or free (< 0)
  with the block's ``Addr`` and, in torch >= 1.10, the allocator's ``Total Allocated`` and
  ``Total Reserved`` after it. The level is ``Total Allocated`` when every event of the device
  has it (what the allocator held, memory allocated before the capture included: what
  tb-profiler's memory view plots), else the running sum of ``Bytes`` (what the capture
  window allocated; older traces). An allocation is paired with the next free of its
  ``(device, Addr)``; it is live from one to the other (to the end of the trace when its free
  is not in it). Its op is the innermost ``cpu_op`` around it on its thread (as tb-profiler
  attributes it) that is not an allocation primitive (``aten::empty`` ...), through the
  shared host tree (``_tree``).
- counter samples of category ``neuron_hbm_usage`` (Neuron Explorer profiles, libnrt
  captures): per process, args = bytes per usage category, the level is their sum, each
  sample holding until the next.

The walk is vectorised: one sort by (device, time), one segmented cumulative sum, one sort by
(device, Addr) for the pairing, one tree for the ops. Definitions: docs/analysis.md#memory.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import msgspec
import numpy as np

from neuron_profiler.analysis import _tree
from neuron_profiler.analysis import causes as C
from neuron_profiler.analysis._args import arg_values, args_texts, as_float
from neuron_profiler.analysis.callsites import call_sites
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.peaks import device_chip
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

MEMORY_ARGS = (
    V.ARG_MEM_ADDR,
    V.ARG_MEM_BYTES,
    V.ARG_MEM_TOTAL_ALLOCATED,
    V.ARG_MEM_TOTAL_RESERVED,
    V.ARG_MEM_DEVICE_TYPE,
    V.ARG_MEM_DEVICE_ID,
)
# c10::DeviceType codes (c10/core/DeviceType.h) -> the torch device name
DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "hip", 12: "xpu", 13: "mps", 19: "mtia", 20: "neuron"}
CAPACITY_KEYS = ("totalGlobalMem", V.PROP_HBM_BYTES)  # CUDA's, ours (per NeuronCore)
SOURCE_ALLOCATOR, SOURCE_HBM = "allocator", "hbm_usage"
ALLOCATED, RESERVED = "allocated", "reserved"
TIMELINE_POINTS = 2000  # per device: a drawable timeline, the peak of each bin kept
LIVE_TENSORS = 10  # the largest allocations live at the peak, listed
UNKNOWN_OP = "<unknown>"  # no cpu_op around the allocation (tb-profiler's word)
BEFORE_WINDOW = "<allocated before the trace>"  # live at the peak, not allocated in the trace
BYTES_FINDING_UNIT = 2**20


@dataclass(frozen=True)
class MemorySeries:
    """A drawable timeline: ``values[i]`` holds from ``ts_ns`` on (a step plot), one row per
    name (``allocated``/``reserved``, or the HBM usage categories); at most
    ``TIMELINE_POINTS`` points, each bin's highest point kept (the peak is always drawn)."""

    ts_ns: np.ndarray
    names: tuple[str, ...]
    values: np.ndarray  # (len(names), len(ts_ns)) bytes


@dataclass(frozen=True)
class LiveTensor:
    """An allocation live at its device's peak: its size, when it was allocated, its op and
    that op's Python call site ("" when the trace has no stacks)."""

    bytes: int
    alloc_ns: int
    op: str
    call_site: str


@dataclass(frozen=True)
class OpMemory:
    """One op's share of a device's memory: bytes it allocated that were live at the peak,
    and all it allocated in the trace (tb-profiler's "Allocation Size" and "Count")."""

    op: str
    live_bytes: int
    live_tensors: int
    allocated_bytes: int
    allocations: int


@dataclass(frozen=True)
class DeviceMemory:
    """One device's memory. ``absolute``: the level is the allocator's own total (memory
    allocated before the trace included); False: only what the trace allocated (older traces
    without ``Total Allocated``). ``peak_reserved_bytes``: the allocator's reserve at its
    highest (None: not recorded). ``step_peak_bytes`` / ``step_floor_bytes``: the most and the
    least held in each step, the level carried into the step included."""

    label: str
    source: str  # SOURCE_ALLOCATOR or SOURCE_HBM
    device_type: int  # c10 DeviceType (-1: an HBM counter process)
    device_id: int
    absolute: bool
    events: int
    peak_bytes: int
    peak_ns: int
    peak_reserved_bytes: int | None
    capacity_bytes: int | None
    step_peak_bytes: tuple[int, ...]
    step_floor_bytes: tuple[int, ...]
    live_at_peak: tuple[LiveTensor, ...]
    by_op: tuple[OpMemory, ...]
    timeline: MemorySeries

    @property
    def held_bytes(self) -> int:
        """What the device gave up at the peak: the allocator's reserve when recorded."""
        return max(self.peak_bytes, self.peak_reserved_bytes or 0)

    @property
    def headroom_bytes(self) -> int | None:
        return None if self.capacity_bytes is None else self.capacity_bytes - self.held_bytes

    @property
    def capacity_pct(self) -> float | None:
        if not self.capacity_bytes:
            return None
        return round(100 * self.held_bytes / self.capacity_bytes, 3)

    @property
    def growth_per_step_bytes(self) -> int:
        """How much the floor rose from one step to the next, the median over the steps (a
        first step that sets up for the others does not count as growth; 0: one step)."""
        rises = C.MEMORY_LEAK.rises(np.asarray(self.step_floor_bytes, dtype=np.int64))
        return int(np.median(rises)) if len(rises) else 0


@dataclass(frozen=True)
class MemoryFinding:
    """A memory finding: its rule (``kind``, the cause's name), the device, the figure it
    rests on (bytes: the peak held, or the growth per step), when (the peak), its advice and
    the docs anchor of its rule."""

    kind: str
    device: str
    title: str
    bytes: int
    at_ns: int
    suggestion: str
    docs: str


@dataclass(frozen=True)
class MemoryUsage:
    """Every device's memory; ``steps``: the step names the per-step figures follow;
    ``frees_before_trace``: frees of blocks allocated before the trace (no pairing);
    ``without_address``: allocator events with no ``Addr`` (older traces: no pairing, so
    nothing is listed live at the peak); ``without_bytes``: allocator events whose ``Bytes``
    is absent or no number (counted as 0 bytes), and HBM usage values that are no number
    (left out of their sample); ``near_capacity_pct``: how close to its capacity (% of it) a
    device's peak is a finding (the rule's margin, so that reports say it without a copy)."""

    devices: tuple[DeviceMemory, ...]
    findings: tuple[MemoryFinding, ...]
    steps: tuple[str, ...]
    near_capacity_pct: float
    frees_before_trace: int = 0
    without_address: int = 0
    without_bytes: int = 0


def memory_usage(ctx: AnalysisContext) -> MemoryUsage | None:
    """The memory analysis of one trace; None when it has no memory event of either kind."""
    devices, unpaired, no_addr, no_bytes = _allocator_devices(ctx)
    counters, bad_values = _hbm_devices(ctx)
    devices += counters
    if not devices:
        return None
    return MemoryUsage(
        devices=tuple(devices),
        findings=_findings(devices, len(ctx.steps)),
        steps=ctx.steps.names,
        near_capacity_pct=100 * C.MEMORY_NEAR_CAPACITY.margin,
        frees_before_trace=unpaired,
        without_address=no_addr,
        without_bytes=no_bytes + bad_values,
    )


@dataclass(frozen=True)
class PeakDelta:
    """One device's peak in two runs (``neuron-prof diff``): bytes at the peak and held (the
    reserve, else the peak) on each side; None where that side has no such device."""

    device: str
    a_bytes: int | None
    b_bytes: int | None
    a_held_bytes: int | None
    b_held_bytes: int | None

    @property
    def delta_bytes(self) -> int | None:
        known = self.a_bytes is not None and self.b_bytes is not None
        return self.b_bytes - self.a_bytes if known else None  # type: ignore[operator]


def compare_peaks(a: MemoryUsage | None, b: MemoryUsage | None) -> tuple[PeakDelta, ...]:
    """Each device's peak in both runs, matched by label (``cuda:0``, ``neuron:1``, an HBM
    counter process), in A's order then B's new devices; () when neither run has memory."""
    on_a = {d.label: d for d in (a.devices if a else ())}
    on_b = {d.label: d for d in (b.devices if b else ())}
    labels = [*on_a, *(k for k in on_b if k not in on_a)]

    def figures(d: DeviceMemory | None) -> tuple[int | None, int | None]:
        return (None, None) if d is None else (d.peak_bytes, d.held_bytes)

    out = []
    for label in labels:
        (pa, ha), (pb, hb) = figures(on_a.get(label)), figures(on_b.get(label))
        out.append(PeakDelta(label, pa, pb, ha, hb))
    return tuple(out)


# -- torch.profiler's [memory] events ------------------------------------------------------------


@dataclass(frozen=True)
class _Events:
    """The memory events sorted by (device, time): trace rows and their decoded args."""

    rows: np.ndarray
    ts: np.ndarray
    device: np.ndarray  # index into keys
    keys: list[tuple[int, int]]  # (device type, device id)
    nbytes: np.ndarray
    no_bytes: int  # events whose Bytes is absent or no number (0 in nbytes)
    addr: np.ndarray  # float (NaN: none)
    total: np.ndarray  # float (NaN: none)
    reserved: np.ndarray

    def segments(self) -> list[slice]:
        bounds = np.flatnonzero(np.diff(self.device)) + 1
        edges = [0, *bounds.tolist(), len(self.rows)]
        return [slice(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def _memory_events(trace: Trace) -> _Events | None:
    name = trace.string_id(V.MEMORY_EVENT)
    if name < 0:
        return None
    rows = np.flatnonzero((trace.col(S.NAME_ID) == name) & (trace.col(S.PH) == S.Phase.INSTANT))
    if len(rows) == 0:
        return None
    args = _memory_args(trace, rows)
    dtype = np.nan_to_num(args[V.ARG_MEM_DEVICE_TYPE], nan=-1).astype(np.int64)
    did = np.nan_to_num(args[V.ARG_MEM_DEVICE_ID], nan=-1).astype(np.int64)
    # one int64 key per (type, id): np.unique over rows of a 2-D array sorts far slower
    key = (dtype << 32) + (did & 0xFFFFFFFF)
    keys, device = np.unique(key, return_inverse=True)
    order = np.argsort(device, kind="stable")  # rows are in time order already
    pairs = np.stack([keys >> 32, (keys & 0xFFFFFFFF).astype(np.int32)], axis=1)
    ts = trace.col(S.TS_NS)[rows]
    return _Events(
        rows=rows[order],
        ts=ts[order],
        device=device[order],
        keys=[(int(t), int(i)) for t, i in pairs.tolist()],
        nbytes=np.nan_to_num(args[V.ARG_MEM_BYTES][order]).astype(np.int64),
        no_bytes=int(np.isnan(args[V.ARG_MEM_BYTES]).sum()),
        addr=args[V.ARG_MEM_ADDR][order],
        total=args[V.ARG_MEM_TOTAL_ALLOCATED][order],
        reserved=args[V.ARG_MEM_TOTAL_RESERVED][order],
    )


_MemoryArgs = msgspec.defstruct(
    "_MemoryArgs",
    [
        (f"k{i}", float | None, msgspec.field(name=k, default=None))
        for i, k in enumerate(MEMORY_ARGS)
    ],
)
_MEMORY_DECODER = msgspec.json.Decoder(list[_MemoryArgs])
_MEMORY_FIELDS = operator.attrgetter(*(f"k{i}" for i in range(len(MEMORY_ARGS))))
_BATCH = 200_000  # events per decode: bounds the joined buffer


def _memory_args(trace: Trace, rows: np.ndarray) -> dict[str, np.ndarray]:
    """``MEMORY_ARGS`` of each event as floats (NaN: absent), decoded as numbers in C (every
    value torch writes is one; an address is exact below 2**53); a batch with a value of
    another type (a hostile trace) goes through ``arg_values``, which makes it NaN."""
    out = np.full((len(rows), len(MEMORY_ARGS)), np.nan)
    args_rows = trace.col(S.ARGS_ROW)[rows]
    have = np.flatnonzero(args_rows >= 0)
    for lo in range(0, len(have), _BATCH):
        part = have[lo : lo + _BATCH]
        try:
            decoded = _MEMORY_DECODER.decode(
                b"[" + b",".join(args_texts(trace.raw_args, args_rows[part])) + b"]"
            )
        except (msgspec.ValidationError, msgspec.DecodeError):
            picked = arg_values(trace, rows[part], MEMORY_ARGS)
            out[part] = np.stack([as_float(picked[k]) for k in MEMORY_ARGS], axis=1)
            continue
        out[part] = np.array(list(map(_MEMORY_FIELDS, decoded)), dtype=np.float64).reshape(
            len(part), len(MEMORY_ARGS)
        )
    return {k: out[:, i] for i, k in enumerate(MEMORY_ARGS)}


def _allocator_devices(ctx: AnalysisContext) -> tuple[list[DeviceMemory], int, int, int]:
    ev = _memory_events(ctx.trace)
    if ev is None:
        return [], 0, 0, 0
    free_at, unpaired = _pair_frees(ev)
    op_row = _allocating_ops(ctx, ev.rows)
    out = []
    for seg in ev.segments():
        out.append(_allocator_device(ctx, ev, seg, free_at, op_row))
    return out, unpaired, int(np.isnan(ev.addr).sum()), ev.no_bytes


def _pair_frees(ev: _Events) -> tuple[np.ndarray, int]:
    """For each allocation, the position of its block's free (the next event of its
    ``(device, Addr)``, when that is a free; len(events): none in the trace); -1 for frees
    and events without an address. Also: frees with no allocation before them."""
    n = len(ev.rows)
    free_at = np.full(n, -1, dtype=np.int64)
    known = np.flatnonzero(~np.isnan(ev.addr))
    if len(known) == 0:
        return free_at, 0
    order = known[np.lexsort((known, ev.addr[known], ev.device[known]))]
    same = (ev.device[order][1:] == ev.device[order][:-1]) & (
        ev.addr[order][1:] == ev.addr[order][:-1]
    )
    alloc = ev.nbytes[order] > 0
    paired = np.zeros(len(order), bool)
    paired[:-1] = same & alloc[:-1] & ~alloc[1:]
    allocs = order[alloc]
    free_at[allocs] = n
    free_at[order[paired]] = order[1:][paired[:-1]]
    opened = np.zeros(len(order), bool)  # a free whose previous event is its allocation
    opened[1:] = paired[:-1]
    return free_at, int((~alloc & ~opened).sum())


def _allocating_ops(ctx: AnalysisContext, rows: np.ndarray) -> np.ndarray:
    """The trace row of the op that allocated each memory event: the innermost ``cpu_op``
    around it on its thread at its time (start <= t < end, as tb-profiler attributes it),
    passing over the allocation primitives (``vocabulary.ALLOCATION_OPS``) and dispatch frames
    that the op called (the op the program called is named, as ``aten::mm`` rather than the
    ``aten::empty`` inside it); the innermost op of any name where nothing else encloses it;
    -1: none. One containment tree of the host rows and the events together (an instant
    encloses nothing)."""
    trace, host = ctx.trace, ctx.host
    pid, tid = trace.col(S.PID), trace.col(S.TID)
    all_rows = np.concatenate([host.rows, rows])
    start = np.concatenate([host.start, trace.col(S.TS_NS)[rows]])
    end = np.concatenate([host.end, trace.col(S.TS_NS)[rows]])
    p, t = pid[all_rows], tid[all_rows]
    order = np.lexsort((-end, start, t, p))
    new_thread = np.ones(len(order), bool)
    new_thread[1:] = (np.diff(p[order]) != 0) | (np.diff(t[order]) != 0)
    parent = _tree.parents(np.cumsum(new_thread), start[order], end[order])
    is_op = host.kind == S.EventKind.CPU_OP
    named = is_op & ~np.isin(host.name_id, ctx.names.internal_frames)
    names = np.asarray(trace.strings, dtype=object)[host.name_id]
    named &= ~np.isin(names, list(V.ALLOCATION_OPS))
    none = np.zeros(len(rows), bool)
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    events = position[len(host.rows) :]
    found = _tree.innermost_marked(parent, np.concatenate([named, none])[order])[events]
    any_op = _tree.innermost_marked(parent, np.concatenate([is_op, none])[order])[events]
    found = np.where(found >= 0, found, any_op)
    return np.where(found >= 0, all_rows[order][np.maximum(found, 0)], -1)


def _allocator_device(
    ctx: AnalysisContext, ev: _Events, seg: slice, free_at: np.ndarray, op_row: np.ndarray
) -> DeviceMemory:
    dtype, did = ev.keys[int(ev.device[seg.start])]
    nbytes, ts = ev.nbytes[seg], ev.ts[seg]
    total, reserved = ev.total[seg], ev.reserved[seg]
    absolute = not np.isnan(total).any()
    level = total.astype(np.int64) if absolute else np.cumsum(nbytes)
    before = int(level[0] - nbytes[0])
    has_reserved = not np.isnan(reserved).any()
    p = int(np.argmax(level))
    series = (level, reserved.astype(np.int64)) if has_reserved else (level,)
    names = (ALLOCATED, RESERVED) if has_reserved else (ALLOCATED,)
    live, by_op = _attribution(ctx, ev, seg, p, free_at, op_row, int(level[p]), absolute)
    step_peak, step_floor = _per_step(ctx, ts, level, before)
    return DeviceMemory(
        label=_label(dtype, did),
        source=SOURCE_ALLOCATOR,
        device_type=dtype,
        device_id=did,
        absolute=absolute,
        events=seg.stop - seg.start,
        peak_bytes=int(level[p]),
        peak_ns=int(ts[p]),
        peak_reserved_bytes=int(reserved.max()) if has_reserved else None,
        capacity_bytes=_capacity(ctx.trace, dtype, did),
        step_peak_bytes=step_peak,
        step_floor_bytes=step_floor,
        live_at_peak=live,
        by_op=by_op,
        timeline=_timeline(ts, np.stack(series), names),
    )


def _attribution(
    ctx: AnalysisContext,
    ev: _Events,
    seg: slice,
    peak: int,
    free_at: np.ndarray,
    op_row: np.ndarray,
    peak_bytes: int,
    absolute: bool,
) -> tuple[tuple[LiveTensor, ...], tuple[OpMemory, ...]]:
    """The allocations live at the peak (the largest, with op and call site) and every op's
    share: live bytes at the peak, bytes and count allocated. What was live at an absolute
    peak but allocated before the trace is one row of its own."""
    trace = ctx.trace
    at = seg.start + peak
    pos = np.arange(seg.start, seg.stop)
    alloc = ev.nbytes[seg] > 0
    live = alloc & (pos <= at) & (free_at[seg] > at)
    ops = op_row[seg]
    name_of = np.where(ops >= 0, trace.col(S.NAME_ID)[np.maximum(ops, 0)], -1)
    names, code = np.unique(name_of[alloc], return_inverse=True)
    sizes = ev.nbytes[seg][alloc]
    was_live = live[alloc]
    k = len(names)
    allocated = np.bincount(code, weights=sizes, minlength=k).astype(np.int64)
    count = np.bincount(code, minlength=k)
    live_bytes = np.bincount(code, weights=sizes * was_live, minlength=k).astype(np.int64)
    live_count = np.bincount(code, weights=was_live, minlength=k).astype(np.int64)
    rows = [
        OpMemory(_op_name(trace, int(n)), int(lb), int(lc), int(a), int(c))
        for n, lb, lc, a, c in zip(names, live_bytes, live_count, allocated, count, strict=True)
    ]
    before = peak_bytes - int(live_bytes.sum())
    if absolute and before > 0 and not np.isnan(ev.addr[seg]).all():
        rows.append(OpMemory(BEFORE_WINDOW, before, 0, 0, 0))
    rows.sort(key=lambda r: (-r.live_bytes, -r.allocated_bytes, r.op))
    if np.isnan(ev.addr[seg]).all():  # no pairing: nothing known live
        return (), tuple(rows)
    idx = np.flatnonzero(live)
    idx = idx[np.argsort(-ev.nbytes[seg][idx], kind="stable")][:LIVE_TENSORS]
    op_rows = ops[idx]
    sites = call_sites(trace, op_rows[op_rows >= 0]) if (op_rows >= 0).any() else []
    site_of = dict(zip(op_rows[op_rows >= 0].tolist(), sites, strict=True))
    tensors = tuple(
        LiveTensor(
            bytes=int(ev.nbytes[seg][i]),
            alloc_ns=int(ev.ts[seg][i]),
            op=_op_name(trace, int(name_of[i])),
            call_site=site_of.get(int(ops[i]), ""),
        )
        for i in idx.tolist()
    )
    return tensors, tuple(rows)


def _op_name(trace: Trace, name_id: int) -> str:
    return trace.strings[name_id] if name_id >= 0 else UNKNOWN_OP


def _label(device_type: int, device_id: int) -> str:
    kind = DEVICE_TYPES.get(device_type, f"device type {device_type}")
    return "CPU" if device_type == 0 else f"{kind}:{device_id}"


def _capacity(trace: Trace, device_type: int, device_id: int) -> int | None:
    """The device's memory from its ``deviceProperties`` entry (CUDA's ``totalGlobalMem``, our
    per-core ``hbm_bytes``); None for the host or a device the trace does not describe."""
    if device_type == 0:
        return None
    for props in trace.device_properties():
        if props.get(V.PROP_ID) == device_id:
            for key in CAPACITY_KEYS:
                value = props.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
    return None


# -- per step, timeline --------------------------------------------------------------------------


def _per_step(
    ctx: AnalysisContext, ts: np.ndarray, level: np.ndarray, before: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The most and least held in each step: the level carried in (the last one before the
    step, ``before`` the first event) and every level reached in the step."""
    steps = ctx.steps
    a = np.searchsorted(ts, steps.start_ns, side="left")
    b = np.searchsorted(ts, steps.end_ns, side="left")
    carried = np.where(a > 0, level[np.maximum(a - 1, 0)], before)
    peaks, floors = carried.copy(), carried.copy()
    for k in np.flatnonzero(b > a).tolist():  # one slice per step, not per event
        inside = level[a[k] : b[k]]
        peaks[k] = max(peaks[k], inside.max())
        floors[k] = min(floors[k], inside.min())
    return tuple(int(x) for x in peaks), tuple(int(x) for x in floors)


def _timeline(ts: np.ndarray, values: np.ndarray, names: tuple[str, ...]) -> MemorySeries:
    """At most TIMELINE_POINTS points: in each of as many time bins, the point where the first
    row (the level, or the total) is highest."""
    if len(ts) > TIMELINE_POINTS:
        span = int(ts[-1] - ts[0]) + 1
        bins = (ts - ts[0]).astype(np.float64) * TIMELINE_POINTS // span
        score = values.sum(axis=0) if values.shape[0] > 1 and names[0] != ALLOCATED else values[0]
        order = np.lexsort((-score, bins))
        first = np.ones(len(order), bool)
        first[1:] = bins[order][1:] != bins[order][:-1]
        keep = np.sort(order[first])
        ts, values = ts[keep], values[:, keep]
    return MemorySeries(ts_ns=ts.astype(np.int64), names=names, values=values.astype(np.int64))


# -- neuron_hbm_usage counters ---------------------------------------------------------------------


def _hbm_devices(ctx: AnalysisContext) -> tuple[list[DeviceMemory], int]:
    """One device per process of HBM usage samples, and how many of their values were no
    number (counted as absent)."""
    trace = ctx.trace
    cat = trace.string_id(V.CAT_HBM_USAGE)
    if cat < 0:
        return [], 0
    rows = np.flatnonzero((trace.col(S.CAT_ID) == cat) & (trace.col(S.PH) == S.Phase.COUNTER))
    args_rows = trace.col(S.ARGS_ROW)[rows]
    rows, args_rows = rows[args_rows >= 0], args_rows[args_rows >= 0]
    if len(rows) == 0:
        return [], 0
    text = b"[" + b",".join(args_texts(trace.raw_args, args_rows)) + b"]"
    try:
        samples = msgspec.json.decode(text, type=list[dict[str, float]])
        bad = 0
    except (msgspec.ValidationError, msgspec.DecodeError):  # a value that is no number
        raw = [trace.args(int(r)) for r in rows.tolist()]  # (the hostile trace's slow path)
        samples = [{k: v for k, v in a.items() if _is_number(v)} for a in raw]
        bad = sum(len(a) for a in raw) - sum(len(x) for x in samples)
    pid = trace.col(S.PID)[rows]
    out = []
    for p in np.unique(pid).tolist():
        on = np.flatnonzero(pid == p)
        mine = [samples[i] for i in on.tolist()]
        cats = tuple(sorted({k for s in mine for k in s}))
        if not cats:  # no value at all in this process' samples: nothing to draw
            continue
        values = np.array([[s.get(c, 0) for s in mine] for c in cats], dtype=np.float64)
        out.append(_hbm_device(ctx, int(p), trace.col(S.TS_NS)[rows[on]], cats, values))
    return out, bad


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _hbm_device(
    ctx: AnalysisContext, pid: int, ts: np.ndarray, cats: tuple[str, ...], values: np.ndarray
) -> DeviceMemory:
    level = values.sum(axis=0).astype(np.int64)
    p = int(np.argmax(level))
    name = ctx.trace.process_names.get(pid, f"pid {pid}")
    core = name[len(V.CORE_PROCESS_PREFIX) :] if name.startswith(V.CORE_PROCESS_PREFIX) else ""
    device_id = int(core) if core.isdigit() else -1
    capacity = _capacity(ctx.trace, 20, device_id) if device_id >= 0 else None
    if capacity is None and device_id < 0 and (chip := device_chip(ctx.trace)) is not None:
        capacity = int(chip.hbm_gib * 2**30)  # a Neuron device's counters: the chip's HBM
    step_peak, step_floor = _per_step(ctx, ts, level, 0)
    return DeviceMemory(
        label=name,
        source=SOURCE_HBM,
        device_type=-1,
        device_id=device_id,
        absolute=True,
        events=len(ts),
        peak_bytes=int(level[p]),
        peak_ns=int(ts[p]),
        peak_reserved_bytes=None,
        capacity_bytes=capacity,
        step_peak_bytes=step_peak,
        step_floor_bytes=step_floor,
        live_at_peak=(),
        by_op=(),
        timeline=_timeline(ts, values, cats),
    )


# -- findings ------------------------------------------------------------------------------------


def _findings(devices: list[DeviceMemory], n_steps: int) -> tuple[MemoryFinding, ...]:
    """One finding per device and memory pattern that holds (``causes.MEMORY_PATTERNS``)."""
    out = []
    near, leak = C.MEMORY_NEAR_CAPACITY, C.MEMORY_LEAK
    for d in devices:
        cap = d.capacity_bytes
        if near.applies_to(cap) and near.holds(d.held_bytes, cap):  # type: ignore[arg-type]
            out.append(
                MemoryFinding(
                    kind=near.name,
                    device=d.label,
                    title=f"{d.label}: peak {_mib(d.held_bytes)} is {d.capacity_pct:.1f}% of "
                    f"{_mib(cap)}",  # type: ignore[arg-type]
                    bytes=d.held_bytes,
                    at_ns=d.peak_ns,
                    suggestion=near.advice.format(
                        headroom=_mib(d.headroom_bytes),  # type: ignore[arg-type]
                        capacity=_mib(cap),  # type: ignore[arg-type]
                    ),
                    docs=near.docs,
                )
            )
        floors = np.asarray(d.step_floor_bytes)
        if leak.applies_to(n_steps) and leak.holds(floors, d.peak_bytes):
            growth = d.growth_per_step_bytes
            out.append(
                MemoryFinding(
                    kind=leak.name,
                    device=d.label,
                    title=f"{d.label}: memory held between steps grows by {_mib(growth)} a "
                    f"step over {len(floors)} steps",
                    bytes=growth,
                    at_ns=d.peak_ns,
                    suggestion=leak.advice.format(growth=_mib(growth)),
                    docs=leak.docs,
                )
            )
    return tuple(out)


def _mib(n: int) -> str:
    """Bytes for a reader: MiB with 3 decimals, and the exact count under 1 MiB."""
    if abs(n) < BYTES_FINDING_UNIT:
        return f"{n:,} B"
    return f"{n / BYTES_FINDING_UNIT:,.3f} MiB"
