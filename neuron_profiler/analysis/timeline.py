"""Which idle gaps a timeline draws, and what it leaves out, so a chart of a trace with 100k+
gaps stays small and still accounts for every gap::

    t = idle_timeline(report.idle, max_gaps=3000)
    t.device[k], t.start_ns[k], t.end_ns[k], t.cause[k]    # the k-th gap drawn
    t.counts[0].gaps, t.counts[0].shown, t.counts[0].hidden_ns   # per device and cause

Each device gets an equal share of ``max_gaps`` (at least one) and keeps its longest gaps; the
others are not drawn but counted, per device and cause (number and idle ns), so the drawn and
the counted gaps together are every gap of ``IdleTime``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from neuron_profiler.analysis.idle import ALL_CAUSES, IdleTime

DEFAULT_MAX_GAPS = 3000


@dataclass(frozen=True)
class CauseCount:
    """Gaps of one cause on one device: all of them, how many are drawn, and the idle ns of
    those that are not."""

    device: int
    cause: str
    gaps: int
    shown: int
    hidden_ns: int

    @property
    def hidden(self) -> int:
        return self.gaps - self.shown


@dataclass(frozen=True)
class IdleTimeline:
    """Args: max_gaps: the budget; per_device: each device's share of it; device / start_ns /
    end_ns / cause: the gaps drawn (cause: an index into ALL_CAUSES), by device then start;
    counts: one row per device and cause that has gaps."""

    max_gaps: int = DEFAULT_MAX_GAPS
    per_device: int = DEFAULT_MAX_GAPS
    device: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    start_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    end_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cause: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    counts: tuple[CauseCount, ...] = ()

    @property
    def total_gaps(self) -> int:
        return sum(c.gaps for c in self.counts)

    @property
    def hidden_gaps(self) -> int:
        return sum(c.hidden for c in self.counts)


def idle_timeline(idle: IdleTime, max_gaps: int = DEFAULT_MAX_GAPS) -> IdleTimeline:
    devices = [d.device for d in idle.devices]
    if not devices:
        return IdleTimeline(max_gaps=max_gaps, per_device=max_gaps)
    quota = max(1, max_gaps // len(devices))
    dur = idle.gap_end_ns - idle.gap_start_ns
    keep = np.zeros(len(dur), dtype=bool)
    for device in devices:  # a handful of devices: the selection per device is vectorised
        mine = np.flatnonzero(idle.gap_device == device)
        keep[mine[np.argsort(-dur[mine], kind="stable")[:quota]]] = True
    counts = []
    n = len(ALL_CAUSES)
    for device in devices:
        mine = idle.gap_device == device
        cause = idle.gap_cause[mine]
        gaps = np.bincount(cause, minlength=n)
        shown = np.bincount(cause[keep[mine]], minlength=n)
        hidden_ns = np.bincount(cause[~keep[mine]], weights=dur[mine][~keep[mine]], minlength=n)
        counts += [CauseCount(device=device, cause=ALL_CAUSES[k], gaps=int(gaps[k]),
                              shown=int(shown[k]), hidden_ns=int(hidden_ns[k]))
                   for k in np.flatnonzero(gaps).tolist()]
    drawn = np.flatnonzero(keep)
    drawn = drawn[np.lexsort((idle.gap_start_ns[drawn], idle.gap_device[drawn]))]
    return IdleTimeline(max_gaps=max_gaps, per_device=quota, device=idle.gap_device[drawn],
                        start_ns=idle.gap_start_ns[drawn], end_ns=idle.gap_end_ns[drawn],
                        cause=idle.gap_cause[drawn], counts=tuple(counts))
