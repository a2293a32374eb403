"""Communication: how much of a device's collective time compute hides, per step and per FSDP
unit (module), and what the exposed part was::

    comm = ctx.result(communication)
    comm.total.collective_ns, comm.total.hidden_ns, comm.total.exposed_ns
    comm.units[0].name, comm.units[0].exposed_by_kind     # e.g. "layers.0", (("all_gather
                                                          #   backward", 4147800), ...)
    comm.flagged                                          # units whose exposure is a finding

On one device (the one with the most exposed collective time; a rank's trace has one):
- collective time: the union of its collective-queue work (our ``CC: ...`` rows, NCCL / RCCL
  kernels on their own stream), waits at a collective left out;
- hidden: the part of it when the compute queue ran too (HTA's comm/compute overlap, as time);
- exposed: the rest, when the device only communicated;
- peer wait: when it waited at a collective for a peer (``AnalysisContext.waits``: idle time,
  the idle analysis's ``collective_wait``, neither hidden nor exposed).

Units: the innermost FSDP ``record_function`` range enclosing the launch of a collective (its
launching call, ``_launches``) names its unit: FSDP2 writes the module's FQN,
``FSDP::all_gather (layers.0)``, ``FSDP::backward_prefetch for layers.1``; its root unit's
ranges carry none (``(root)``); FSDP1's ``FullyShardedDataParallel._pre_forward`` ... name no
module (``(FSDP1 unit)``). A collective launched inside no FSDP range is ``(outside FSDP
units)``. A collective under a range whose name says ``backward`` ran for the backward pass.
Each row's figures are unions of its own collectives, so rows of units whose collectives ran
at the same time (NCCL streams side by side) may sum to more than the total, which counts each
instant once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis import selections as sel
from neuron_profiler.analysis._axis import device_axes
from neuron_profiler.analysis._device import COLLECTIVE, COMPUTE
from neuron_profiler.analysis._tree import innermost_marked, parents
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

ROOT_UNIT = "(root)"
FSDP1_UNIT = "(FSDP1 unit)"
OUTSIDE_UNITS = "(outside FSDP units)"
# A unit is flagged when at least half of its collective time is exposed and it holds at least
# MIN_FLAG_SHARE of the device's exposed collective time (a unit with a sliver of it is not
# what to fix first). The finding needs EXPOSED_FINDING_SHARE of the collective time exposed:
# how much of the step that is, is its recoverable % (ranked against the other findings).
EXPOSED_UNIT_SHARE = 0.5
MIN_FLAG_SHARE = 0.3
EXPOSED_FINDING_SHARE = 0.1

_FQN = re.compile(r" \(([^()]*)\)$|_prefetch for (\S+)$")
_PASSED_KINDS = ("all_gather",)  # kinds split into forward / backward (their advice differs)


@dataclass(frozen=True)
class CommRow:
    """One step's or unit's figures (ns). ``exposed_by_kind``: exposed time per collective kind
    (``all_gather forward`` / ``all_gather backward``, ``reduce_scatter``, ``all_reduce``,
    ``other``), largest first: what the device waited on."""

    name: str
    collectives: int
    collective_ns: int
    hidden_ns: int
    exposed_ns: int
    peer_wait_ns: int
    exposed_by_kind: tuple[tuple[str, int], ...] = ()

    @property
    def exposed_share(self) -> float:
        return self.exposed_ns / self.collective_ns if self.collective_ns else 0.0


@dataclass(frozen=True)
class Communication:
    """``device``: the device analysed (None: the trace has no collective); ``units`` sorted by
    exposed time; ``flagged``: the units whose exposure is a finding (``EXPOSED_UNIT_SHARE``,
    ``MIN_FLAG_SHARE``); ``from_fsdp``: the trace has FSDP ranges."""

    device: int | None
    device_label: str
    total: CommRow
    steps: tuple[CommRow, ...]
    units: tuple[CommRow, ...]
    flagged: tuple[str, ...]
    from_fsdp: bool
    exposed_ranges: I.Intervals = I.EMPTY  # the flagged units' (all, when none) exposed time

    @property
    def exposed_kinds(self) -> tuple[str, ...]:
        """The collective kinds exposed in the flagged units (the advice depends on them)."""
        flagged = [u for u in self.units if u.name in self.flagged]
        return tuple(dict.fromkeys(k for u in flagged for k, ns in u.exposed_by_kind if ns))


NONE = Communication(None, "", CommRow("total", 0, 0, 0, 0, 0), (), (), (), False)


def communication(ctx: AnalysisContext) -> Communication:
    work = ctx.work
    coll = np.flatnonzero(work.queue == COLLECTIVE)
    if len(coll) == 0:
        return NONE
    device = _most_exposed_device(ctx, coll)
    on = coll[work.device[coll] == device]
    unit_names, unit, backward = _units(ctx, on)
    given = work.collective_arg(V.ARG_COLLECTIVE, on)
    kind_names, kind = _kinds(ctx.trace, work.rows[on], given, backward)
    figures = _Figures(ctx, device)
    units = sorted(
        (
            figures.row(name, on[unit == code], kind[unit == code], kind_names)
            for code, name in enumerate(unit_names)  # (units: a few dozen at most)
        ),
        key=lambda u: (-u.exposed_ns, u.name),
    )
    total = figures.row("total", on, kind, kind_names)
    flagged = tuple(
        u.name
        for u in units
        if u.exposed_ns > 0
        and u.name != OUTSIDE_UNITS
        and u.exposed_share >= EXPOSED_UNIT_SHARE
        and u.exposed_ns >= MIN_FLAG_SHARE * total.exposed_ns
    )
    flagged_entries = on[np.isin(unit, [unit_names.index(n) for n in flagged])] if flagged else on
    return Communication(
        device=device,
        device_label=work.labels[device],
        total=total,
        steps=figures.per_step(on, kind, kind_names),
        units=tuple(units),
        flagged=flagged,
        from_fsdp=any(n != OUTSIDE_UNITS for n in unit_names),
        exposed_ranges=figures.sets(flagged_entries)[1],
    )


class _Figures:
    """One device's compute and peer-wait unions, against which sets of its collectives are
    measured."""

    def __init__(self, ctx: AnalysisContext, device: int) -> None:
        self.ctx, self.work = ctx, ctx.work
        self.compute = ctx.busy(device, (COMPUTE,))
        self.busy = ctx.busy(device)
        self._sets: dict[bytes, tuple[I.Intervals, I.Intervals, I.Intervals]] = {}

    def sets(self, entries: np.ndarray) -> tuple[I.Intervals, I.Intervals, I.Intervals]:
        """(collective, exposed, peer wait) unions of these collective-queue entries, computed
        once per set of entries (the total, a trace's one unit, the steps and the exposed
        ranges are often the same entries)."""
        key = np.asarray(entries, np.int64).tobytes()
        if key not in self._sets:
            self._sets[key] = self._unions(entries)
        return self._sets[key]

    def _unions(self, entries: np.ndarray) -> tuple[I.Intervals, I.Intervals, I.Intervals]:
        w = self.work
        work, wait = entries[~w.wait[entries]], entries[w.wait[entries]]
        collective = I.union(w.start[work], w.end[work])
        waited = I.subtract(I.union(w.start[wait], w.end[wait]), self.busy)
        return collective, I.subtract(collective, self.compute), waited

    def row(
        self, name: str, entries: np.ndarray, kind: np.ndarray, kind_names: tuple[str, ...]
    ) -> CommRow:
        collective, exposed, waited = self.sets(entries)
        by_kind = []
        for k, kind_name in enumerate(kind_names):  # (a handful of kinds)
            x = self.sets(entries[kind == k])[1].total
            if x:
                by_kind.append((kind_name, x))
        by_kind.sort(key=lambda p: (-p[1], p[0]))
        return CommRow(
            name=name,
            collectives=int((~self.work.wait[entries]).sum()),
            collective_ns=collective.total,
            hidden_ns=collective.total - exposed.total,
            exposed_ns=exposed.total,
            peer_wait_ns=waited.total,
            exposed_by_kind=tuple(by_kind),
        )

    def per_step(
        self, entries: np.ndarray, kind: np.ndarray, kind_names: tuple[str, ...]
    ) -> tuple[CommRow, ...]:
        """Each step's figures: the parts of the device's sets inside the step's window (the
        exposed time per kind too, as ``row`` gives it); a collective counts for the step it
        starts in."""
        steps, w = self.ctx.steps, self.work
        collective, exposed, waited = self.sets(entries)
        lo, hi = steps.start_ns, steps.end_ns
        starts = np.sort(w.start[entries[~w.wait[entries]]])
        counts = np.searchsorted(starts, hi, "left") - np.searchsorted(starts, lo, "left")
        coll, exp, wait = (I.overlap_per_window(x, lo, hi) for x in (collective, exposed, waited))
        per_kind = [  # (a handful of kinds)
            I.overlap_per_window(self.sets(entries[kind == k])[1], lo, hi).tolist()
            for k in range(len(kind_names))
        ]
        rows = []
        for i, name in enumerate(steps.names):
            by_kind = sorted(
                ((kind_names[k], int(x[i])) for k, x in enumerate(per_kind) if x[i]),
                key=lambda p: (-p[1], p[0]),
            )
            rows.append(
                CommRow(
                    name,
                    int(counts[i]),
                    int(coll[i]),
                    int(coll[i] - exp[i]),
                    int(exp[i]),
                    int(wait[i]),
                    tuple(by_kind),
                )
            )
        return tuple(rows)


def _most_exposed_device(ctx: AnalysisContext, coll: np.ndarray) -> int:
    """The device with the most exposed collective time (the first among equals), every
    device's total at once on the device axis (``_axis``: a merged trace may have thousands)."""
    work = ctx.work
    best, best_ns = int(work.device[coll[0]]), -1
    lo, hi = int(work.start.min()), int(work.end.max())
    collective = (work.queue == COLLECTIVE) & ~work.wait
    compute = (work.queue == COMPUTE) & ~work.wait
    for axis, group in device_axes(work, lo, hi):
        on = group >= 0
        c, k = np.flatnonzero(on & collective), np.flatnonzero(on & compute)
        exposed = I.subtract(axis.union(work, c, group[c]), axis.union(work, k, group[k]))
        totals = axis.total_per_device(exposed)
        has = np.zeros(len(axis.devices), bool)
        has[group[c]] = True
        totals = np.where(has, totals, -1)
        g = int(np.argmax(totals))
        if totals[g] > best_ns:
            best, best_ns = axis.devices[g], int(totals[g])
    return best


def _units(
    ctx: AnalysisContext, entries: np.ndarray
) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
    """(unit names, unit code per entry, launched for the backward pass per entry): the
    innermost FSDP range on the launching thread enclosing each entry's launch call, found with
    the launch as a zero-length row in the ranges' containment tree (``_tree``)."""
    trace, c = ctx.trace, ctx.trace.columns
    ids = ctx.names.fsdp_ranges
    ranges = np.flatnonzero(
        trace.mask(kind=[S.EventKind.USER_ANNOTATION, S.EventKind.CPU_OP], ph=S.Phase.COMPLETE)
        & np.isin(c[S.NAME_ID], ids)
    )
    site = ctx.launch_sites
    known = entries[site.known[entries]]
    n_r, n_p = len(ranges), len(known)
    pid = np.concatenate([c[S.PID][ranges], site.pid[known]])
    tid = np.concatenate([c[S.TID][ranges], site.tid[known]])
    start = np.concatenate([c[S.TS_NS][ranges], site.start_ns[known]])
    end = np.concatenate([c[S.TS_NS][ranges] + c[S.DUR_NS][ranges], site.start_ns[known]])
    probe = np.arange(n_r + n_p) >= n_r
    thread = _thread_codes(pid, tid)
    order = np.lexsort((probe, -end, start, thread))
    parent = parents(thread[order], start[order], end[order])
    range_id = c[S.NAME_ID][ranges]  # (each distinct range name read once: sel.per_name)
    unit = np.concatenate([sel.per_name(trace, range_id, _unit_of, object), [OUTSIDE_UNITS]])
    backward_range = sel.per_name(trace, range_id, _says_backward)
    marked = ~probe[order]
    inner = innermost_marked(parent, marked)
    back = innermost_marked(parent, marked & np.r_[backward_range, np.zeros(n_p, bool)][order])
    at_probe = np.flatnonzero(probe[order])
    probe_entry = known[order[at_probe] - n_r]
    owner = inner[at_probe]
    labels = unit[np.where(owner >= 0, order[np.maximum(owner, 0)], n_r)]
    at = np.searchsorted(entries, probe_entry)  # (entries: sorted; probes: some of them)
    unit_label = np.full(len(entries), OUTSIDE_UNITS, object)
    unit_label[at] = labels
    backward = np.zeros(len(entries), bool)
    backward[at] = back[at_probe] >= 0
    # the distinct labels (a few dozen units) sorted as numpy sorts their text
    distinct: dict[str, int] = {}
    label_code = np.fromiter(
        (distinct.setdefault(x, len(distinct)) for x in unit_label.tolist()),
        np.int64,
        len(entries),
    )
    unit_names, code = np.unique(np.array(list(distinct), dtype=str), return_inverse=True)
    return tuple(unit_names.tolist()), code.ravel()[label_code], backward


def _thread_codes(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Each (pid, tid) pair's rank among the distinct pairs, by pid then tid (what
    ``np.unique(..., axis=0, return_inverse=True)`` gives, without its sort of row records)."""
    pids, p = np.unique(pid, return_inverse=True)
    tids, t = np.unique(tid, return_inverse=True)
    return np.unique(p.ravel() * len(tids) + t.ravel(), return_inverse=True)[1].ravel()


def _unit_of(range_name: str) -> str:
    """The unit an FSDP range names: FSDP2's module FQN, ``(root)`` for FSDP2's unnamed root,
    ``(FSDP1 unit)`` for FSDP1's ranges (which name none)."""
    m = _FQN.search(range_name)
    if m is not None and (m.group(1) or m.group(2)):
        return m.group(1) or m.group(2)
    return ROOT_UNIT if range_name.startswith("FSDP::") else FSDP1_UNIT


def _says_backward(range_name: str) -> bool:
    return "backward" in range_name


def _kinds(
    trace: Trace, rows: np.ndarray, given: np.ndarray, backward: np.ndarray
) -> tuple[tuple[str, ...], np.ndarray]:
    """(kind names, kind code per row): all_gather (forward / backward: prefetching differs),
    reduce_scatter, all_reduce, all_to_all (``vocabulary.collective_kind``) or other, from the
    row's name (``CC: allgather``,
    ``ncclDevKernel_AllGather_RING_LL``) and its ``Collective name`` arg (``given``)."""
    texts: dict[str, int] = {}  # each distinct text, matched once (rows: one per collective)
    text = np.fromiter(
        (
            texts.setdefault(f"{trace.strings[n]} {g or ''}", len(texts))
            for n, g in zip(trace.col(S.NAME_ID)[rows].tolist(), given.tolist(), strict=True)
        ),
        np.int64,
        len(rows),
    )
    base = [V.collective_kind(t) or "other" for t in texts]
    # each (text, backward) pair's label; the labels' sorted order gives the codes
    label = [
        [f"{k} {'backward' if back else 'forward'}" if k in _PASSED_KINDS else k for k in base]
        for back in (False, True)
    ]
    pair, inverse = np.unique(text * 2 + backward, return_inverse=True)
    pair_label = [label[p % 2][p // 2] for p in pair.tolist()]
    names = sorted(set(pair_label))
    code = np.array([names.index(x) for x in pair_label], np.int64)[inverse.ravel()]
    return tuple(names), code
