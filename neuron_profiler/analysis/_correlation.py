"""The host runtime calls that device rows name by correlation id, sorted once per trace: the
work's launch starts (``_device``), its launch sites (``_launches``) and the threads that
launched each device (``AnalysisContext.launch_thread_table``) all look them up::

    calls = runtime_calls(trace)
    k = calls.find(corr)                           # per wanted id: its index in calls.ids, or -1
    calls.rows[calls.first[k]]                     # the id's earliest call (file order among ties)
    calls.rows[calls.first[k] : calls.first[k + 1]]  # every call carrying it
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis._keys import index_of
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import Trace


@dataclass(frozen=True)
class RuntimeCalls:
    """Complete runtime calls with a correlation id (> 0)."""

    rows: np.ndarray  # sorted by (correlation id, start), file order among ties
    ids: np.ndarray  # the distinct ids, sorted
    first: np.ndarray  # index into ``rows`` of each id's first call; len(rows) appended

    def find(self, wanted: np.ndarray) -> np.ndarray:
        """Per wanted id: its index in ``ids``, -1 where no call carries it (ids <= 0 never
        match)."""
        return index_of(self.ids, wanted)


def runtime_calls(trace: Trace) -> RuntimeCalls:
    c = trace.columns
    calls = np.flatnonzero(
        trace.mask(kind=S.EventKind.RUNTIME, ph=S.Phase.COMPLETE) & (c[S.CORRELATION] > 0)
    )
    corr = c[S.CORRELATION][calls]
    order = np.lexsort((c[S.TS_NS][calls], corr))
    rows, corr = calls[order], corr[order]
    new = np.ones(len(rows), bool)
    new[1:] = corr[1:] != corr[:-1]
    first = np.flatnonzero(new)
    return RuntimeCalls(rows=rows, ids=corr[first], first=np.append(first, len(rows)))
