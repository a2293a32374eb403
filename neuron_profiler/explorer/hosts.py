"""Host processes and threads of a profile exported on its own: a process is (instance, pid),
a thread (instance, pid, tid), since AWS says process and thread ids repeat across instances
(and containers repeat them on one instance).

    hosts = HostIds.of(events)
    hosts.pid[row], hosts.tid[row]     # where an event's host rows go while placing
    hosts.host_pid(tids)               # the placement's thread -> process lookup
    trace = hosts.real_threads(trace)  # placing done: each thread back to its own id

A pid that one (instance, pid) alone uses stays as it is; a pid several use gives each of them
a pid of its own from ``SYNTHETIC_PID_BASE`` up (above Linux's largest pid), named after its
instance and real pid. The shared placement keys host threads by thread id alone (containment,
the thread -> process lookup), so a thread id several host threads use is, while placing, a
distinct one from above every real thread id; ``real_threads`` puts the real ids back, which
the distinct pids keep apart. Without a shared pid or tid every id stays as it was.

Merged onto a host trace, the instances other than the host trace's are laid out so
(``HostIds.of(events, apart, taken_pids, taken_tids)``), apart from the ids the host side uses
too; the host trace's instance keeps its real ids, placed on the host trace's threads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from neuron_profiler.explorer.columns import EventColumns, key_codes
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import Trace

SYNTHETIC_PID_BASE = 2**22  # Linux's pid_max is at most 2**22: no real pid is this large


@dataclass(frozen=True)
class HostProcess:
    """One host process: the pid it has in the trace, its instance and real pid."""

    pid: int
    instance: str
    process_id: int

    @property
    def name(self) -> str:
        pid = self.process_id if self.process_id >= 0 else "?"
        return f"{self.instance or 'host'} pid {pid}"


@dataclass(frozen=True)
class HostIds:
    """Per event the pid and tid its host rows are placed with (see the module docstring).

    Args:
        processes: every (instance, pid) of the profile, in that order.
        thread_tid / thread_pid / thread_real: per host thread its placing tid, its trace pid
            and its real thread id (sorted by placing tid: unique).
    """

    pid: np.ndarray
    tid: np.ndarray
    processes: list[HostProcess]
    thread_tid: np.ndarray
    thread_pid: np.ndarray
    thread_real: np.ndarray

    @classmethod
    def of(
        cls,
        ev: EventColumns,
        apart: np.ndarray | None = None,
        taken_pids: frozenset[int] = frozenset(),
        taken_tids: frozenset[int] = frozenset(),
    ) -> HostIds:
        """Every event's host process and thread; ``apart`` (merged onto a host trace): only
        these events' (the other instances'), kept apart from the ids the host trace's side
        uses too (``taken_*``); the other events keep their real thread id (pid -1)."""
        sel = np.arange(len(ev)) if apart is None else np.flatnonzero(apart)
        pid = np.full(len(ev), -1, dtype=np.int64)
        tid = ev.thread_id.astype(np.int64, copy=True)
        if not len(sel):
            z = np.zeros(0, dtype=np.int64)
            return cls(pid, tid, [], z, z, z)
        p_of, proc = key_codes(ev.instance_code[sel], ev.process_id[sel])
        trace_pid = _distinct(proc[1], taken_pids)
        t_of, thread = key_codes(p_of, ev.thread_id[sel])
        placing = _distinct(thread[1], taken_tids)
        order = np.argsort(placing, kind="stable")
        processes = [
            HostProcess(int(p), ev.instances[i], int(real))
            for i, real, p in zip(*(a.tolist() for a in (*proc, trace_pid)), strict=True)
        ]
        pid[sel], tid[sel] = trace_pid[p_of], placing[t_of]
        return cls(
            pid=pid,
            tid=tid,
            processes=processes,
            thread_tid=placing[order],
            thread_pid=trace_pid[thread[0]][order],
            thread_real=thread[1][order],
        )

    @property
    def process_names(self) -> dict[int, str]:
        """Each host process named after its instance and pid ("pid ?": none given)."""
        return {p.pid: p.name for p in self.processes}

    def host_pid(
        self, tids: np.ndarray, otherwise: Callable[[np.ndarray], np.ndarray] | None = None
    ) -> np.ndarray:
        """The trace pid of each placing thread id; one not seen: ``otherwise``'s (a merge:
        the host trace's lookup), else the first process's."""
        tids = np.asarray(tids, dtype=np.int64)
        if not len(self.thread_tid):
            return otherwise(tids) if otherwise else np.zeros(len(tids), dtype=np.int64)
        at = np.clip(np.searchsorted(self.thread_tid, tids), 0, len(self.thread_tid) - 1)
        hit = self.thread_tid[at] == tids
        rest = otherwise(tids) if otherwise else self.processes[0].pid
        return np.where(hit, self.thread_pid[at], rest)

    def real_threads(self, trace: Trace) -> Trace:
        """``trace`` with each host row's placing thread id back to its real one."""
        moved = self.thread_tid != self.thread_real
        if not moved.any():
            return trace
        placing, pid, real = (
            a[moved] for a in (self.thread_tid, self.thread_pid, self.thread_real)
        )
        tid, row_pid = trace.columns[S.TID], trace.columns[S.PID]
        at = np.clip(np.searchsorted(placing, tid), 0, len(placing) - 1)
        hit = (placing[at] == tid) & (pid[at] == row_pid)
        columns = dict(trace.columns)
        columns[S.TID] = np.where(hit, real[at], tid).astype(tid.dtype)
        return dataclasses.replace(trace, columns=columns)

    def as_metadata(self) -> list[dict[str, object]]:
        return [
            {"pid": p.pid, "instance": p.instance, "process_id": p.process_id}
            for p in self.processes
        ]


def _distinct(values: np.ndarray, taken_before: frozenset[int] = frozenset()) -> np.ndarray:
    """``values`` (one per key) where no other key has the same value and ``taken_before``
    lacks it, else a distinct spare value from ``SYNTHETIC_PID_BASE`` (or above every value)
    up, which no key has and ``taken_before`` lacks, in key order."""
    spare = max(SYNTHETIC_PID_BASE, int(values.max()) + 1)
    distinct, counts = np.unique(values, return_counts=True)
    shared = counts[np.searchsorted(distinct, values)] > 1
    if taken_before:
        shared |= np.isin(values, np.fromiter(taken_before, np.int64, len(taken_before)))
    out = values.astype(np.int64, copy=True)
    n = int(shared.sum())
    if n:
        taken = set(values.tolist()) | taken_before
        fresh = []
        while len(fresh) < n:
            if spare not in taken:
                fresh.append(spare)
            spare += 1
        out[shared] = fresh
    return out
