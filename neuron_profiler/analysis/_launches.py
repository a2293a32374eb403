"""Where device rows were launched from: the host thread and start of the launching call::

    site = launch_sites(trace, work.rows)
    site.pid[i], site.tid[i], site.start_ns[i]      # NO_LAUNCH start where none is known

The launching call is the runtime call carrying the row's ``correlation`` (cudaMemcpyAsync,
cudaLaunchKernel, our ``nrt_tensor_read`` / ``nrt launch: ...`` calls) or linked to it by an
ac2g flow or the op's External id (``_correlation``), else the host op whose
``External id`` the row carries (traces whose runtime calls were left out). The CPU-fallback
inference and the sync groups use it to tell which thread launched a copy, and when.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis._correlation import RuntimeCalls, runtime_calls
from neuron_profiler.analysis._device import NO_LAUNCH
from neuron_profiler.analysis._keys import index_of
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import Trace


@dataclass(frozen=True)
class LaunchSites:
    """Per queried row: the launching call's pid, tid and start (-1, -1, NO_LAUNCH: unknown)."""

    pid: np.ndarray
    tid: np.ndarray
    start_ns: np.ndarray

    @property
    def known(self) -> np.ndarray:
        return self.start_ns != NO_LAUNCH


def launch_sites(trace: Trace, rows: np.ndarray, calls: RuntimeCalls | None = None) -> LaunchSites:
    """``calls``: the trace's runtime calls by correlation id (``_correlation``), when the
    caller has them."""
    c = trace.columns
    n = len(rows)
    out = LaunchSites(
        np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.full(n, NO_LAUNCH, np.int64)
    )
    if n == 0:
        return out
    calls = runtime_calls(trace) if calls is None else calls
    call = calls.launching_call(trace, rows)
    at = np.flatnonzero(call >= 0)
    _set(out, at, call[at], c)
    todo = np.flatnonzero(~out.known)
    if len(todo) == 0:
        return out
    by_op = trace.mask(kind=S.EventKind.CPU_OP, ph=S.Phase.COMPLETE) & (c[S.EXTERNAL_ID] > 0)
    hit, source = _first_with_key(
        c[S.EXTERNAL_ID], np.flatnonzero(by_op), c[S.EXTERNAL_ID][rows[todo]], c[S.TS_NS]
    )
    _set(out, todo[hit], source, c)
    return out


def _set(out: LaunchSites, at: np.ndarray, source: np.ndarray, c: Mapping[str, np.ndarray]) -> None:
    """Entries ``at`` were launched by the host rows ``source``."""
    out.pid[at] = c[S.PID][source]
    out.tid[at] = c[S.TID][source]
    out.start_ns[at] = c[S.TS_NS][source]


def _first_with_key(
    key: np.ndarray, candidates: np.ndarray, wanted: np.ndarray, ts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each wanted key: is there a candidate row with it, and the earliest such row."""
    if len(candidates) == 0:
        return np.zeros(len(wanted), bool), np.zeros(0, np.int64)
    order = candidates[np.lexsort((ts[candidates], key[candidates]))]
    keys, first = np.unique(key[order], return_index=True)
    k = index_of(keys, wanted)
    hit = (wanted > 0) & (k >= 0)
    return hit, order[first[k[hit]]]
