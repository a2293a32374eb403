"""``diff(trace_a, trace_b) -> TraceDiff``: where every millisecond of the mean step time
changed between two traces of the same script (docs/diff.md)::

    d = diff(load_trace("before.json"), load_trace("after.json"))
    d.delta_ms, d.residual_ms                  # Δ mean step; what no row explains
    for row in d.folded():                     # largest |Δ| first, the small ones as "other"
        row.key, row.kind, row.a_ms, row.b_ms, row.delta_ms

The traces are aligned first (``align``: steps, anchored segments, op sequences by normalised
name, fused groups). Then each side's compared steps are cut into parts that add up to their
wall time, on every device (then averaged over the devices):

- **busy** time: each instant goes to the work running then, compute first, then collectives,
  then copies (the breakdown's compute + collective_only + dma_only), shared equally by the
  kernels of that class running at once (``_shares``), and each kernel's share to the op that
  launched it (its runtime call's outermost op): the row's ``device`` part (copies included),
  or ``collective`` (collective time no compute overlaps);
- **idle** time, by the analyzer's cause (``idle``): the idle of a host-gated cause
  (``GATING_CAUSES``) while the host runs an op on a thread that launches the device's work is
  that op's ``gating`` part (the device waits for it); what is left of each cause is an
  ``idle`` row of its own, as are data loading, collective waits and profiler overhead;
- the **emulator overhead** the analyzer discounts from idle time: a row of its own (the idle
  rows' time is their ``idle`` part);
- a trace without device work has its host as the device: each op's share of the step's
  wall time is its ``host`` part, the time no op runs an ``idle`` row.

With ``group_by="module"`` (docs/diff.md#rows-by-module) the compared ops inside an
``nn.Module`` frame are summed by their innermost module's path instead (``analysis.modules``;
rows of kind ``module``, matched by path), the other ops keeping their rows: still one row per
op, so the invariant below is unchanged.

A row's A and B figures are means per compared step; Σ rows = mean step on each side, so
Σ Δ + residual = Δ mean step, the residual only what the parts miss (overlapping step spans;
float rounding). The diff never re-reads the files: every figure comes from the trace model
through the analysis contexts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis._axis import DeviceAxis, device_axes
from neuron_profiler.analysis._device import COLLECTIVE, COMPUTE, DMA
from neuron_profiler.analysis._shares import split_among, split_among_cover
from neuron_profiler.analysis.align import (
    FUSED,
    MATCHED,
    UNMATCHED,
    Alignment,
    HostTree,
    MappingUse,
    OpTable,
    StepChoice,
    align,
    first_occurrence,
    thread_codes,
)
from neuron_profiler.analysis.causes import ALL_CAUSES
from neuron_profiler.analysis.context import AnalysisContext, Options
from neuron_profiler.analysis.idle import IdleTime, idle_time
from neuron_profiler.analysis.memory import PeakDelta, compare_peaks, memory_usage
from neuron_profiler.analysis.modules import OpModules, op_modules
from neuron_profiler.analysis.name_map import NameMap
from neuron_profiler.errors import NeuronProfilerError
from neuron_profiler.heap import gc_paused
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

COMPONENTS = ("device", "collective", "gating", "host", "idle")
DEVICE, COLL, GATING, HOST, IDLE_PART = range(len(COMPONENTS))
# idle the host gates: the device waits while the host runs an op (the rest of their time, and
# the other causes, are idle rows of their own)
GATING_CAUSES = ("cpu_fallback", "host_sync", "host_bound_launch", "other", "short_gaps")
IDLE, ANCHOR, OTHER, MODULE = "idle", "anchor", "other", "module"
KINDS = (MATCHED, FUSED, UNMATCHED, MODULE, ANCHOR, IDLE, OTHER)
BY_OP, BY_MODULE = "op", "module"  # ``group_by``: ops' rows by alignment key, or by module
GROUPINGS = (BY_OP, BY_MODULE)
GROUPING_TEXT = {
    BY_OP: "one row per alignment key",
    BY_MODULE: "an op inside an nn.Module frame is in its innermost module's row (by path)",
}
OUTSIDE_STEPS = "ops outside the compared steps"
HOST_IDLE = "idle: host (no op running)"
EMULATOR_OVERHEAD = "emulator overhead (modelled device only)"
DISPLAY_SHARE = 0.005  # rows with |Δ| under this share of the larger step fold into "other"
DISPLAY_ROWS = 25  # at most this many rows shown, the rest folded
KERNEL_NAME_CHARS = 80  # an unlinked kernel's key keeps this much of its name


@dataclass(frozen=True)
class Side:
    """One trace's figures: ``step_ms`` the mean wall time of its compared steps (``steps``:
    their names); ``devices``: devices averaged over (0: host-only, the host is the device);
    ``idle_ms``: the analyzer's idle by cause per step (``causes.ALL_CAUSES``, mean over
    devices); ``modelled``: device timings come from the emulator's model."""

    source: str
    steps: tuple[str, ...]
    step_ms: float
    devices: int
    idle_ms: dict[str, float]
    modelled: bool


@dataclass(frozen=True)
class Row:
    """One row: ms per compared step on each side, split into ``COMPONENTS`` (``a_parts_ms`` /
    ``b_parts_ms``); ``a_ops`` / ``b_ops``: op instances per step behind it; ``notes``: what
    the reader must know (a side ran it as a CPU fallback)."""

    key: str
    kind: str
    a_parts_ms: tuple[float, ...]
    b_parts_ms: tuple[float, ...]
    a_ops: float = 0.0
    b_ops: float = 0.0
    notes: tuple[str, ...] = ()

    @property
    def a_ms(self) -> float:
        return float(sum(self.a_parts_ms))

    @property
    def b_ms(self) -> float:
        return float(sum(self.b_parts_ms))

    @property
    def delta_ms(self) -> float:
        return self.b_ms - self.a_ms

    @property
    def delta_parts_ms(self) -> tuple[float, ...]:
        """Δ of each of ``COMPONENTS``."""
        return tuple(b - a for a, b in zip(self.a_parts_ms, self.b_parts_ms, strict=True))


@dataclass(frozen=True)
class CauseDelta:
    """The analyzer's idle time of one cause per step, on each side (every gap, gated or
    not)."""

    cause: str
    a_ms: float
    b_ms: float

    @property
    def delta_ms(self) -> float:
        return self.b_ms - self.a_ms


@dataclass(frozen=True)
class TraceDiff:
    """Args: rows: every row, largest |Δ| first (``folded`` for display); residual_ms: Δ mean
    step - Σ rows' Δ; idle: the analyzer's causes compared; mappings: name-map rules used;
    steps_by: "number" or "position"; segments / by_occurrence: segment pairs aligned, and
    those matched by occurrence (too large for sequence matching); notes: what the reader
    must know; group_by: "op" or "module" (the ops' rows: docs/diff.md#rows-by-module)."""

    a: Side
    b: Side
    steps_by: str
    rows: tuple[Row, ...]
    residual_ms: float
    idle: tuple[CauseDelta, ...]
    mappings: tuple[MappingUse, ...]
    segments: int = 0
    by_occurrence: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)
    group_by: str = BY_OP
    memory: tuple[PeakDelta, ...] = ()  # device memory peaks of both runs (analysis/memory.py)

    @property
    def delta_ms(self) -> float:
        return self.b.step_ms - self.a.step_ms

    @property
    def delta_pct(self) -> float:
        return self.pct_of_a(self.delta_ms)

    def pct_of_a(self, ms: float) -> float:
        """``ms`` as a percentage of A's mean step (0 when A's step is 0)."""
        return 100 * ms / self.a.step_ms if self.a.step_ms else 0.0

    def folded(self, min_ms: float | None = None, top: int = DISPLAY_ROWS) -> tuple[Row, ...]:
        """The rows to show: at most ``top`` with |Δ| >= ``min_ms`` (default: DISPLAY_SHARE of
        the larger step), the others summed into one "other" row (never dropped)."""
        if min_ms is None:
            min_ms = DISPLAY_SHARE * max(self.a.step_ms, self.b.step_ms)
        shown = [r for r in self.rows[:top] if abs(r.delta_ms) >= min_ms]  # (largest first)
        rest = self.rows[len(shown) :]
        if not rest:
            return tuple(shown)
        zero = (0.0,) * len(COMPONENTS)
        a = tuple(map(sum, zip(zero, *(r.a_parts_ms for r in rest), strict=True)))
        b = tuple(map(sum, zip(zero, *(r.b_parts_ms for r in rest), strict=True)))
        other = Row(f"other ({len(rest)} rows)", OTHER, a, b)
        return (*shown, other)


def main_diff(diffs: Sequence[TraceDiff]) -> TraceDiff:
    """Of several pairs compared (rank by rank), the one a summary leads with: the pair whose
    mean step changed most (the first of equal ones)."""
    return max(diffs, key=lambda d: abs(d.delta_ms))


def diff(
    trace_a: Trace,
    trace_b: Trace,
    *,
    steps: StepChoice | str = "auto",
    names: NameMap | None = None,
    options: Options | None = None,
    group_by: str = BY_OP,
) -> TraceDiff:
    """``group_by``: "op" (rows by alignment key) or "module" (an op inside a module frame
    goes to its innermost module's row, matched by path; the other ops keep their rows)."""
    if group_by not in GROUPINGS:
        raise NeuronProfilerError(
            f"group_by {group_by!r}: expected one of {', '.join(GROUPINGS)}", exit_code=2
        )
    with gc_paused():
        ctx_a, ctx_b = AnalysisContext(trace_a, options), AnalysisContext(trace_b, options)
        al = align(ctx_a, ctx_b, steps, names)
        a = _attribute(ctx_a, al.a, al.steps.a)
        b = _attribute(ctx_b, al.b, al.steps.b)
        modules = (
            (op_modules(ctx_a, al.a), op_modules(ctx_b, al.b)) if group_by == BY_MODULE else None
        )
        rows = _rows(al, a, b, len(al.steps), modules)
        side_a, side_b = _side(ctx_a, al.steps.a), _side(ctx_b, al.steps.b)
        residual = (side_b.step_ms - side_a.step_ms) - sum(r.delta_ms for r in rows)
        return TraceDiff(
            a=side_a,
            b=side_b,
            steps_by=al.steps.by,
            rows=rows,
            residual_ms=residual,
            idle=tuple(
                CauseDelta(c, side_a.idle_ms[c], side_b.idle_ms[c])
                for c in ALL_CAUSES
                if side_a.idle_ms[c] or side_b.idle_ms[c]
            ),
            mappings=al.mappings,
            segments=al.segments,
            by_occurrence=al.by_occurrence,
            notes=_notes(ctx_a, ctx_b, al, side_a, side_b, modules),
            group_by=group_by,
            memory=compare_peaks(ctx_a.result(memory_usage), ctx_b.result(memory_usage)),
        )


# -- one side ----------------------------------------------------------------------------------


@dataclass
class _Ledger:
    """One side's ns over its compared steps, summed over devices (``devices``: to divide by):
    per op and component (``op``), and per row of its own (``extra``: key -> (kind, parts))."""

    op: np.ndarray
    devices: int = 1
    extra: dict[str, tuple[str, np.ndarray]] = field(default_factory=dict)

    def add(self, key: str, kind: str, component: int, ns: float) -> None:
        if key not in self.extra:
            self.extra[key] = (kind, np.zeros(len(COMPONENTS)))
        self.extra[key][1][component] += ns


def _attribute(ctx: AnalysisContext, table: OpTable, steps: np.ndarray) -> _Ledger:
    windows = I.union(ctx.steps.start_ns[steps], ctx.steps.end_ns[steps])
    ledger = _Ledger(op=np.zeros((len(table), len(COMPONENTS))))
    if len(ctx.work) == 0:
        share = split_among(table.start, table.end, windows)
        ledger.op[:, HOST] += share
        ledger.add(HOST_IDLE, IDLE, IDLE_PART, windows.total - share.sum())
        return ledger
    owner, other_key = _owners(ctx, table)
    idle = ctx.result(idle_time)
    work = ctx.work
    ledger.devices = len(work.devices)
    if len(windows) == 0:
        return ledger
    lo = min(int(work.start.min()), int(windows.start[0]))
    hi = max(int(work.end.max()), int(windows.end[-1]))
    gating = _GatingGroups.of(ctx, table)
    for axis, group in device_axes(work, lo, hi):  # every device at once (``_axis``)
        steps_on_axis = axis.replicate(windows)
        _busy(ledger, work, axis, group, steps_on_axis, owner, other_key)
        _idle(ledger, idle, axis, steps_on_axis, table, gating)
    hidden = int(idle.per_device.per_step_emulator_overhead_ns[:, steps].sum())
    if hidden:
        ledger.add(EMULATOR_OVERHEAD, IDLE, IDLE_PART, float(hidden))
    return ledger


def _busy(
    ledger: _Ledger,
    work,  # noqa: ANN001 -- DeviceWork
    axis: DeviceAxis,
    group: np.ndarray,
    windows: I.Intervals,
    owner: np.ndarray,
    other_key: list[str],
) -> None:
    """The axis' devices' busy time in the windows (on the axis), to the work running: compute
    first, then collectives, then copies, each instant shared by the entries of that class
    running on that device."""
    runs = (group >= 0) & ~work.wait
    taken = I.EMPTY
    for queue, component in ((COMPUTE, DEVICE), (COLLECTIVE, COLL), (DMA, DEVICE)):
        entries = np.flatnonzero(runs & (work.queue == queue))
        shift = axis.shift(group[entries])
        start, end = work.start[entries] + shift, work.end[entries] + shift
        own = I.union(start, end)
        share = split_among(start, end, I.intersect(I.subtract(own, taken), windows))
        taken = I.union(np.r_[taken.start, own.start], np.r_[taken.end, own.end])
        who = owner[entries]
        mine = who >= 0
        np.add.at(ledger.op[:, component], who[mine], share[mine])
        keys = -who[~mine] - 1
        total = np.bincount(keys, weights=share[~mine], minlength=len(other_key))
        for k in np.unique(keys).tolist():
            ledger.add(other_key[k], ANCHOR, component, float(total[k]))


def _idle(
    ledger: _Ledger,
    idle: IdleTime,
    axis: DeviceAxis,
    windows: I.Intervals,
    table: OpTable,
    gating: _GatingGroups,
) -> None:
    """The axis' devices' idle time in the windows (on the axis), by cause: a host-gated
    cause's idle shared by the ops running then on a thread that launches that device's work
    (their ``gating`` part), the rest an idle row of its own."""
    counted = axis.replicate(idle.window)
    discount = [
        (g, idle.discount[d]) for g, d in enumerate(axis.devices) if d in idle.discount
    ]  # (the emulator's devices only)
    if discount:
        clip = I.window(axis.base, axis.base + axis.width)
        parts = [(I.intersect(x, clip), axis.shift(g)) for g, x in discount]
        counted = I.subtract(
            counted,
            I.union(
                np.concatenate([x.start + s for x, s in parts]),
                np.concatenate([x.end + s for x, s in parts]),
            ),
        )
    counted = I.intersect(counted, windows)
    device = np.searchsorted(np.asarray(axis.devices, np.int64), idle.gap_device)
    on_axis = device < len(axis.devices)
    on_axis[on_axis] = (
        np.asarray(axis.devices, np.int64)[device[on_axis]] == idle.gap_device[on_axis]
    )
    xs = []
    for c in range(len(ALL_CAUSES)):
        k = np.flatnonzero(on_axis & (idle.gap_cause == c))
        shift = axis.shift(device[k])
        start, end = _clipped(axis, idle.gap_start_ns[k]), _clipped(axis, idle.gap_end_ns[k])
        xs.append(I.intersect(I.union(start + shift, end + shift), counted))
    rest = [float(x.total) for x in xs]
    gated = [c for c, cause in enumerate(ALL_CAUSES) if cause in GATING_CAUSES and len(xs[c])]
    for c in gated:
        group = axis.group_of(xs[c].start)
        shift = axis.shift(group)
        start, end = xs[c].start - shift, xs[c].end - shift  # back in real time
        by_group = gating.of_device[axis.index[group]]
        order = np.argsort(by_group, kind="stable")
        cut = np.flatnonzero(np.r_[True, np.diff(by_group[order]) != 0, True])
        for a, b in zip(cut[:-1].tolist(), cut[1:].tolist(), strict=True):
            ops = gating.ops[int(by_group[order[a]])]
            pick = order[a:b]  # the gaps of that group's devices, one cover
            share = split_among_cover(table.start[ops], table.end[ops], start[pick], end[pick])
            np.add.at(ledger.op[:, GATING], ops, share)
            rest[c] -= share.sum()
    for cause, ns in zip(ALL_CAUSES, rest, strict=True):
        ledger.add(f"idle: {cause}", IDLE, IDLE_PART, ns)


def _clipped(axis: DeviceAxis, t: np.ndarray) -> np.ndarray:
    """Real times held inside the axis' span (what lies outside counts in no window there, and
    placed unclipped it would reach into the next device's)."""
    return np.clip(t, axis.base, axis.base + axis.width - 1)


@dataclass(frozen=True)
class _GatingGroups:
    """Which ops a device's host-gated idle may go to: those on a thread that launched the
    device's work, or every op for a device whose launches the trace does not link
    (``AnalysisContext.on_launch_threads``'s rule). Devices with the same launching threads
    form a group, whose gaps are one cover for its ops (``split_among_cover``): one split per
    group and cause, not per device. ``of_device``: per device (index into ``work.devices``)
    its group; ``ops``: per group, its ops."""

    of_device: np.ndarray
    ops: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, ctx: AnalysisContext, table: OpTable) -> _GatingGroups:
        dev, pid, tid = ctx.launch_thread_table
        c = ctx.trace.columns
        rows = table.tree.rows[table.node]
        code = thread_codes(
            np.r_[pid, c[S.PID][rows].astype(np.int64)], np.r_[tid, c[S.TID][rows].astype(np.int64)]
        )
        pair_thread, op_thread = code[: len(pid)], code[len(pid) :]
        bounds = np.searchsorted(dev, np.arange(len(ctx.work.devices) + 1)).tolist()
        groups: dict[tuple[int, ...], int] = {}  # launching threads -> group (() : unlinked)
        of_device = np.array(
            [
                groups.setdefault(tuple(pair_thread[a:b].tolist()), len(groups))
                for a, b in zip(bounds[:-1], bounds[1:], strict=True)
            ],
            np.int64,
        )
        ops = tuple(
            np.flatnonzero(np.isin(op_thread, threads)) if threads else np.arange(len(table))
            for threads in groups
        )
        return cls(of_device=of_device, ops=ops)


def _launch_nodes(ctx: AnalysisContext, tree: HostTree, rows: np.ndarray) -> np.ndarray:
    """Per work row, its launching call's tree node (-1: none), as every analysis links
    launches (``RuntimeCalls.launching_call``: correlation id, else ac2g flow or External id)."""
    node = np.full(len(rows), -1, np.int64)
    call_row = ctx.runtime_calls.launching_call(ctx.trace, rows)
    nodes = np.flatnonzero(tree.kind == S.EventKind.RUNTIME)
    if not len(nodes) or not (call_row >= 0).any():
        return node
    by_row = np.argsort(tree.rows[nodes])
    sorted_rows = tree.rows[nodes][by_row]
    at = np.minimum(np.searchsorted(sorted_rows, call_row), len(nodes) - 1)
    found = (call_row >= 0) & (sorted_rows[at] == call_row)
    node[found] = nodes[by_row[at[found]]]
    return node


def _owners(ctx: AnalysisContext, table: OpTable) -> tuple[np.ndarray, list[str]]:
    """Per device work entry: the op that launched it (its runtime call's outermost op), or
    ``-k - 1`` for row key ``keys[k]`` of its own: a call outside ops (by its anchor and name),
    work without a launch call (by its kernel name)."""
    tree, c, strings = table.tree, ctx.trace.columns, ctx.trace.strings
    work = ctx.work
    node = _launch_nodes(ctx, tree, work.rows)
    op = np.full(len(node), -1, np.int64)  # (no host node at all: a device-only trace)
    op[node >= 0] = table.of_node[node[node >= 0]]
    alone = np.flatnonzero(op < 0)
    call = node[alone]
    called = call >= 0
    anchor = np.full(len(call), -1, np.int64)
    anchor[called] = tree.anchor[call[called]]
    where = np.full(len(call), -1, np.int64)
    where[anchor >= 0] = tree.name_id[anchor[anchor >= 0]]
    what = c[S.NAME_ID][work.rows[alone]].astype(np.int64)
    what[called] = tree.name_id[call[called]]
    group, first = first_occurrence(called.astype(np.int64), where, what)
    names: dict[str, int] = {}  # (one text per distinct entry kind, anchor and name)
    code = np.array(
        [
            names.setdefault(
                _outside_text(strings, int(call[i]), int(where[i]), int(what[i])), len(names)
            )
            for i in first.tolist()
        ],
        np.int64,
    )
    owner = op.copy()
    owner[alone] = -code[group] - 1
    return owner, list(names)


def _outside_text(strings: list[str], call: int, anchor_name: int, name: int) -> str:
    """The row key of device work no op launched: its call's anchor and name, or (no launch
    call) its kernel name."""
    if call >= 0:
        where = strings[anchor_name] if anchor_name >= 0 else "no anchor"
        return f"{where} › (outside ops) {strings[name]}"
    return f"(no launch call) {strings[name][:KERNEL_NAME_CHARS]}"


def _side(ctx: AnalysisContext, steps: np.ndarray) -> Side:
    n = max(len(steps), 1)
    idle = ctx.result(idle_time).per_device
    per_cause = (
        idle.per_step_by_cause_ns[:, steps, :].sum(axis=1).mean(axis=0)
        if len(idle)
        else np.zeros(len(ALL_CAUSES))
    )
    return Side(
        source=ctx.trace.source,
        steps=tuple(ctx.steps.names[i] for i in steps.tolist()),
        step_ms=float(ctx.steps.wall_ns[steps].sum()) / n / 1e6,
        devices=len(ctx.work.devices),
        idle_ms={
            c: float(v) / n / 1e6 for c, v in zip(ALL_CAUSES, per_cause.tolist(), strict=True)
        },
        modelled=ctx.trace.metadata.get(V.META_MODELLED) is True,
    )


# -- both sides --------------------------------------------------------------------------------


def _rows(
    al: Alignment,
    a: _Ledger,
    b: _Ledger,
    steps: int,
    modules: tuple[OpModules, OpModules] | None = None,
) -> tuple[Row, ...]:
    """Rows of both sides' ledgers, ms per step, by alignment key (ops outside the compared
    steps: one row) or, given ``modules``, by module path for the compared ops inside a module
    frame; then the rows of their own. Each op is in exactly one row (a partition)."""
    n = max(steps, 1)
    scale_a, scale_b = 1e6 * n * a.devices, 1e6 * n * b.devices
    heads = [(k.text, k.kind) for k in al.keys] + [(OUTSIDE_STEPS, ANCHOR)]
    row_a = np.where(al.key_a >= 0, al.key_a, len(al.keys))
    row_b = np.where(al.key_b >= 0, al.key_b, len(al.keys))
    if modules is not None:
        paths = _module_rows(al, modules, row_a, row_b, len(heads))
        heads += [(path, MODULE) for path in paths]
    width = len(heads)
    parts_a = _by_key(a.op, row_a, width) / scale_a
    parts_b = _by_key(b.op, row_b, width) / scale_b
    ops_a = np.bincount(row_a, minlength=width) / n
    ops_b = np.bincount(row_b, minlength=width) / n
    fb_a = np.bincount(row_a[(al.key_a >= 0) & al.a.fallback], minlength=width)
    fb_b = np.bincount(row_b[(al.key_b >= 0) & al.b.fallback], minlength=width)
    rows = []
    for k in range(width):
        if not (parts_a[k].any() or parts_b[k].any() or ops_a[k] or ops_b[k]):
            continue
        key, kind = heads[k]
        notes = tuple(
            f"{side}: CPU fallback ({count / n:g} per step)"
            for side, count in (("A", fb_a[k]), ("B", fb_b[k]))
            if count
        )
        if kind == MODULE and not (ops_a[k] and ops_b[k]):
            notes = (f"only in {'A' if ops_a[k] else 'B'}", *notes)
        rows.append(
            Row(
                key, kind, _ms(parts_a[k]), _ms(parts_b[k]), float(ops_a[k]), float(ops_b[k]), notes
            )
        )
    zero = np.zeros(len(COMPONENTS))
    for key in dict.fromkeys([*a.extra, *b.extra]):
        kind = (a.extra.get(key) or b.extra[key])[0]
        pa = a.extra[key][1] / scale_a if key in a.extra else zero
        pb = b.extra[key][1] / scale_b if key in b.extra else zero
        if pa.any() or pb.any():
            rows.append(Row(key, kind, _ms(pa), _ms(pb)))
    rows.sort(key=lambda r: (-abs(r.delta_ms), -max(r.a_ms, r.b_ms), r.key))
    return tuple(rows)


def _module_rows(
    al: Alignment,
    modules: tuple[OpModules, OpModules],
    row_a: np.ndarray,
    row_b: np.ndarray,
    first: int,
) -> list[str]:
    """Moves each side's compared ops inside a module frame to their module's row (numbered
    from ``first``, one per path on either side: matched by path), in place; the paths."""
    vocab: dict[str, int] = {}
    for m, key, row in ((modules[0], al.key_a, row_a), (modules[1], al.key_b, row_b)):
        ids = np.array([vocab.setdefault(t, len(vocab)) for t in m.texts], np.int64)
        inside = np.flatnonzero((key >= 0) & (m.of_op >= 0))
        row[inside] = first + ids[m.of_op[inside]]
    return list(vocab)


def _by_key(parts: np.ndarray, key: np.ndarray, width: int) -> np.ndarray:
    out = np.zeros((width, parts.shape[1]))
    np.add.at(out, np.where(key >= 0, key, width - 1), parts)
    return out


def _ms(parts: np.ndarray) -> tuple[float, ...]:
    return tuple(float(x) for x in parts.tolist())


def _notes(
    ctx_a: AnalysisContext,
    ctx_b: AnalysisContext,
    al: Alignment,
    a: Side,
    b: Side,
    modules: tuple[OpModules, OpModules] | None = None,
) -> tuple[str, ...]:
    out = []
    for name, m in zip("AB", modules or (), strict=False):
        if not m.frames:
            out.append(
                f"{name}: no module frames ('{V.MODULE_PREFIX}...': torch.profiler writes them "
                "with with_stack=True and with_modules=True): its ops keep their op rows"
            )
    for name, ctx, side in (("A", ctx_a, a), ("B", ctx_b, b)):
        if not ctx.steps.from_profiler_steps:
            out.append(f"{name}: no ProfilerStep annotation: the whole trace is one step")
        if side.devices == 0:
            out.append(f"{name}: no device work: its host is the device (ops' host time)")
        if side.modelled:
            out.append(f"{name}: device timings modelled by the emulator, not measured")
    if al.steps.by == "position":
        out.append(f"steps matched by position (A {', '.join(a.steps)}; B {', '.join(b.steps)})")
    if al.by_occurrence:
        out.append(
            f"{al.by_occurrence} segment pair(s) too large for sequence matching (alone, or "
            "past the diff's budget: align.CELL_BUDGET) were matched by occurrence"
        )
    if a.devices and b.devices and a.devices != b.devices:
        out.append(
            f"A has {a.devices} device{'s' * (a.devices != 1)}, B {b.devices}: per-device means "
            "compared"
        )
    return tuple(out)


# -- metrics for --fail-on ---------------------------------------------------------------------

DIFF_METRICS = (
    "delta_ms",
    "residual_ms",
    "worst_row_ms",
    *(f"{cause}_delta_ms" for cause in ALL_CAUSES),
)  # a threshold in % is of A's mean step (``delta_ms>5%``)


def diff_metrics(d: TraceDiff) -> dict[str, float]:
    """``delta_ms``: Δ mean step; ``residual_ms``: what no row explains; ``worst_row_ms``: the
    largest row Δ (a slowdown hidden by a speed-up elsewhere); ``<cause>_delta_ms``: the
    analyzer's idle of that cause, Δ per step."""
    out = {
        "delta_ms": d.delta_ms,
        "residual_ms": d.residual_ms,
        "worst_row_ms": max((r.delta_ms for r in d.rows), default=0.0),
    }
    for cause in ALL_CAUSES:
        out[f"{cause}_delta_ms"] = d.b.idle_ms[cause] - d.a.idle_ms[cause]
    return out


def metric_value(d: TraceDiff, metric: str, percent: bool) -> float:
    """A metric as a rule reads it: ms, or % of A's mean step."""
    value = diff_metrics(d)[metric]
    return 100 * value / d.a.step_ms if percent and d.a.step_ms else value
