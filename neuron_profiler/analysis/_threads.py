"""Host threads as the device sees them: what each thread launched, and which ``cpu_op`` encloses
a row on its thread::

    threads = HostThreads(trace, launch_sites(trace, work.rows))
    idx, launch = threads.launched(pid, tid)      # work indices and launch starts, by start
    threads.parent(trace, row)                    # the innermost enclosing cpu_op, -1: none
"""

from __future__ import annotations

import numpy as np

from neuron_profiler.analysis._launches import LaunchSites
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import Trace

_EMPTY = np.zeros(0, np.int64)


class HostThreads:
    """Per host thread: the device work it launched and its ``cpu_op`` rows, each by start."""

    def __init__(self, trace: Trace, sites: LaunchSites) -> None:
        known = np.flatnonzero(sites.known)
        self.work = known
        self.launch = sites.start_ns[known]
        self._work = _slices(sites.pid[known], sites.tid[known], self.launch)
        c = trace.columns
        ops = np.flatnonzero(trace.mask(kind=S.EventKind.CPU_OP, ph=S.Phase.COMPLETE))
        self.ops = ops
        self.op_start = c[S.TS_NS][ops]
        self.op_end = self.op_start + c[S.DUR_NS][ops]
        # among equal starts the longer first, so the last enclosing op found is the innermost
        self._ops = _slices(c[S.PID][ops], c[S.TID][ops], self.op_start, -self.op_end)

    def launched(self, pid: int, tid: int) -> tuple[np.ndarray, np.ndarray]:
        """(work indices, launch starts) of the work launched on a thread."""
        at = self._work.get((pid, tid), _EMPTY)
        return self.work[at], self.launch[at]

    def parent(self, trace: Trace, row: int) -> int:
        """The innermost other ``cpu_op`` on the row's thread that encloses it (-1: none)."""
        c = trace.columns
        at = self._ops.get((int(c[S.PID][row]), int(c[S.TID][row])), _EMPTY)
        start = int(c[S.TS_NS][row])
        end = start + int(c[S.DUR_NS][row])
        k = int(np.searchsorted(self.op_start[at], start, side="right"))
        before = at[:k]
        enclosing = before[(self.op_end[before] >= end) & (self.ops[before] != row)]
        return int(self.ops[enclosing[-1]]) if len(enclosing) else -1

    def launch_of(self, work_idx: np.ndarray) -> np.ndarray:
        """Launch starts of work that has a known launch."""
        return self.launch[np.searchsorted(self.work, work_idx)]


def _slices(
    pid: np.ndarray, tid: np.ndarray, *sort_keys: np.ndarray
) -> dict[tuple[int, int], np.ndarray]:
    """Indices per (pid, tid), each sorted by the keys (the first key first)."""
    order = np.lexsort((*reversed(sort_keys), tid, pid))
    p, t = pid[order], tid[order]
    cut = np.flatnonzero((p[1:] != p[:-1]) | (t[1:] != t[:-1])) + 1
    if len(order) == 0:
        return {}
    return {(int(pid[g[0]]), int(tid[g[0]])): g for g in np.split(order, cut)}
