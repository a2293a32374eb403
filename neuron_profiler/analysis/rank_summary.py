"""One rank's share of the cross-rank analysis: what ``distributed`` needs of one trace, small
enough (kilobytes, whatever the trace size) for a worker process to return beside its report::

    summary = ctx.result(rank_summary)       # Report.rank_summary
    summary.rank, summary.calls[0].arrival_ns

- **Rank**: ``distributedInfo.rank`` (an int, or a string of digits); None: not a
  torch.distributed run. ``world_size`` likewise.
- **Collective calls**: collective-queue device rows (``_device``), one call per collective row;
  collective-wait rows (named ``CC wait: ...`` or carrying the ``collective wait`` arg) before
  it on its device are its recorded wait, and its **arrival** is the start of the first of them
  (else the collective's own start), or the start of its launch call when that is later (a
  device cannot reach work its host has not launched yet). Process group: ``Process Group
  Ranks`` when the row names them, else the device stream (NCCL runs one communicator per
  stream), else the device.
- **Before** a call: its window runs from the previous collective's end on the device (or the
  start of the step holding the arrival, whichever is later) to the arrival; the call keeps what
  the device did there, per activity (``ACTIVITIES``, disjoint): compute, copies while no
  compute runs, other collectives while neither runs, and idle time per idle cause
  (``idle.py``: the gaps inside the steps, less the emulator overhead). **Compute before** is
  the first of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis._device import COLLECTIVE, COMPUTE, DMA, NO_LAUNCH, DeviceWork
from neuron_profiler.analysis.breakdown import step_breakdown
from neuron_profiler.analysis.causes import ALL_CAUSES
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.idle import IdleTime, idle_time
from neuron_profiler.analysis.steps import Steps
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

ACT_COMPUTE, ACT_COPIES, ACT_COLLECTIVES = "compute", "copies", "other collectives"
IDLE_PREFIX = "idle: "  # + an idle cause (causes.ALL_CAUSES)
# what a device did before reaching a collective, disjoint: its busy queues, then its idle time
# by cause; emulator overhead and time outside the steps are in none
ACTIVITIES: tuple[str, ...] = (
    ACT_COMPUTE,
    ACT_COPIES,
    ACT_COLLECTIVES,
    *(IDLE_PREFIX + c for c in ALL_CAUSES),
)


@dataclass(frozen=True)
class CollectiveCall:
    """One collective as one rank saw it (absolute ns on that rank's clock)."""

    group: str
    name: str
    arrival_ns: int  # the device reached it: the start of its wait, else of the collective
    end_ns: int
    wait_ns: int  # recorded: its collective-wait rows (0 when the trace has none)
    compute_before_ns: int  # device compute since the previous collective (or step start)
    # ns per activity in that window (RankSummary.activities' order; compute first)
    before_ns: tuple[int, ...] = ()


@dataclass(frozen=True)
class RankSummary:
    """What the cross-rank analysis needs of one file: kilobytes, whatever the trace size."""

    source: str
    rank: int | None  # None: no rank in distributedInfo
    world_size: int | None
    window_start_ns: int
    window_end_ns: int
    step_wall_ns: tuple[int, ...]
    compute_ns: int  # device compute over the steps (all devices)
    collective_ns: int
    recorded_waits: bool  # the trace has collective-wait rows (its producer records waits)
    calls: tuple[CollectiveCall, ...]
    # collective-wait rows with no collective after them on their device (the profile ended
    # mid-wait): in no call's wait, counted here so nothing is dropped silently
    orphan_waits: int = 0
    orphan_wait_ns: int = 0
    activities: tuple[str, ...] = ACTIVITIES  # the labels of each call's ``before_ns``
    has_device: bool = True  # the trace has device work (False: a CPU-only trace)


def rank_summary(ctx: AnalysisContext) -> RankSummary:
    trace, work, steps, b = ctx.trace, ctx.work, ctx.steps, ctx.result(step_breakdown)
    rank, world = distributed_info(trace)
    return RankSummary(
        source=trace.source,
        rank=rank,
        world_size=world,
        window_start_ns=int(steps.start_ns.min()),
        window_end_ns=int(steps.end_ns.max()),
        step_wall_ns=tuple(steps.wall_ns.tolist()),
        compute_ns=int(b.compute_ns.sum()),
        collective_ns=int(b.collective_ns.sum()),
        has_device=len(work) > 0,
        **_calls(trace, work, steps, ctx),
    )


def distributed_info(trace: Trace) -> tuple[int | None, int | None]:
    """(rank, world size) from ``distributedInfo``; None where the trace gives none."""
    return distributed_info_of(trace.metadata)


def distributed_info_of(metadata: dict) -> tuple[int | None, int | None]:
    """``distributed_info`` of a trace's top-level keys (as ``trace.loader.read_header``
    returns them, before the trace is loaded)."""
    info = metadata.get(V.META_DISTRIBUTED)
    if not isinstance(info, dict):
        return None, None
    return _int_or_none(info.get(V.DIST_RANK)), _int_or_none(info.get(V.DIST_WORLD_SIZE))


def _int_or_none(x: object) -> int | None:
    """A rank or world size as written: an int, digits, or an integral float (1.0, as a pandas
    round trip writes it: the loader reads such pids the same way); else None."""
    if type(x) is int:
        return x
    if isinstance(x, str) and x.isdigit():
        return int(x)
    if type(x) is float and x.is_integer() and abs(x) < 2**63:
        return int(x)
    return None


def _calls(trace: Trace, work: DeviceWork, steps: Steps, ctx: AnalysisContext) -> dict:
    on = np.flatnonzero(work.queue == COLLECTIVE)
    if len(on) == 0:
        return {"recorded_waits": False, "calls": (), "orphan_waits": 0, "orphan_wait_ns": 0}
    rows = work.rows[on]
    args = {k: work.collective_arg(k, on) for k in (V.ARG_COLLECTIVE, V.ARG_GROUP_RANKS)}
    name_id = trace.col(S.NAME_ID)[rows]
    is_wait = work.wait[on]  # the collective-wait slices (``_device``'s one rule)
    stream = trace.col(S.STREAM)[rows]
    device, start, end = work.device[on], work.start[on], work.end[on]
    # point-to-point sends and receives are no collective of their group (their rows name the
    # whole group): the matching by call order would pair them with other ranks' collectives
    p2p = np.isin(trace.col(S.NAME_ID)[rows], ctx.names.point_to_point)
    coll = np.flatnonzero(~is_wait & ~p2p)
    waits = np.flatnonzero(is_wait)
    # each wait belongs to the first collective on its device starting at or after its start
    wait_of = np.zeros(len(coll), np.int64)
    first_wait = start[coll].copy()
    owned = np.zeros(len(waits), bool)
    for d in np.unique(device[coll]).tolist():
        c = coll[device[coll] == d]  # sorted by start (device_work order)
        w = waits[device[waits] == d]
        k = np.searchsorted(start[c], start[w], side="left")
        ok = k < len(c)
        owned[np.flatnonzero(device[waits] == d)[ok]] = True
        pos = np.flatnonzero(device[coll] == d)[k[ok]]
        np.add.at(wait_of, pos, end[w[ok]] - start[w[ok]])
        np.minimum.at(first_wait, pos, start[w[ok]])
    # a device cannot reach a collective before its host launched it
    launch = work.launch[on][coll]
    arrival = np.where(launch != NO_LAUNCH, np.maximum(first_wait, launch), first_wait)
    before = _before(ctx, device[coll], arrival, end[coll], steps)
    several = len(np.unique(device[coll])) > 1  # then each device's calls are matched apart
    group_ranks, coll_names = args[V.ARG_GROUP_RANKS][coll], args[V.ARG_COLLECTIVE][coll]
    groups = _group_labels(
        group_ranks.tolist(), stream[coll].tolist(), device[coll].tolist(), several
    )
    call_names = [
        str(given) if given is not None else trace.strings[int(name_id[i])]
        for i, given in zip(coll.tolist(), coll_names.tolist(), strict=True)
    ]
    before_ns = list(map(tuple, before.tolist()))
    # (column-wise: one call per collective, hundreds of thousands in a large trace)
    calls = list(
        map(
            CollectiveCall,
            groups,
            call_names,
            arrival.tolist(),
            end[coll].tolist(),
            wait_of.tolist(),
            before[:, 0].tolist(),
            before_ns,
        )
    )
    orphan = waits[~owned]
    return {
        "recorded_waits": bool(len(waits)),
        "calls": tuple(calls),
        "orphan_waits": len(orphan),
        "orphan_wait_ns": int((end - start)[orphan].sum()),
    }


def _group_labels(
    ranks: list[object], stream: list[int], device: list[int], several: bool
) -> list[str]:
    """``_group_label`` per call, computed once per distinct (ranks, stream, device): a run's
    calls share a few process groups. (A list's text stands for it: equal texts, equal
    labels; a value that is not a list names no ranks, whatever it is.)"""
    memo: dict[tuple[str | None, int, int], str] = {}
    out = []
    for r, s, d in zip(ranks, stream, device, strict=True):
        key = (repr(r) if isinstance(r, list) else None, s, d)
        label = memo.get(key)
        if label is None:
            label = memo[key] = _group_label(r, s, d, several)
        out.append(label)
    return out


def _group_label(ranks: object, stream: int, device: int, several: bool) -> str:
    """A collective's process group: its ranks, else its stream, else its device (and the
    device too when several devices' calls are matched apart)."""
    group = (
        f"ranks {','.join(str(r) for r in ranks)}"
        if isinstance(ranks, list) and ranks
        else f"stream {stream}"
        if stream >= 0
        else f"device {device}"
    )
    if several and not group.startswith("device"):
        group += f" on device {device}"
    return group


def _before(
    ctx: AnalysisContext, device: np.ndarray, arrival: np.ndarray, end: np.ndarray, steps: Steps
) -> np.ndarray:
    """[call, activity] ns: what each call's device did from the previous collective's end on
    the device (or the start of the step holding the arrival, whichever is later) to the
    arrival, per ``ACTIVITIES`` (disjoint)."""
    out = np.zeros((len(arrival), len(ACTIVITIES)), np.int64)
    k = np.clip(np.searchsorted(steps.start_ns, arrival, side="right") - 1, 0, len(steps) - 1)
    step_start = steps.start_ns[k]
    idle: IdleTime = ctx.result(idle_time)
    for d in np.unique(device).tolist():
        pick = np.flatnonzero(device == d)
        prev_end = np.concatenate([[np.iinfo(np.int64).min], end[pick][:-1]])
        lo = np.minimum(np.maximum(prev_end, step_start[pick]), arrival[pick])
        compute = ctx.busy(d, (COMPUTE,))
        copies = I.subtract(ctx.busy(d, (DMA,)), compute)
        others = I.subtract(ctx.busy(d, (COLLECTIVE,)), ctx.busy(d, (COMPUTE, DMA)))
        parts = [compute, copies, others] + [idle.gaps_of(c, d) for c in ALL_CAUSES]
        for j, part in enumerate(parts):
            out[pick, j] = I.overlap_per_window(part, lo, arrival[pick]).astype(np.int64)
    return out
