"""Device memory in use per NeuronCore, by usage category, as counter rows of the collector's trace.

    samples = MemorySamples.from_runtime(events)         # libnrt: nrt_dma_mem_* results
    samples = emulator_source.memory_samples()            # the emulator: allocator + model
    rows, names, args, dropped = counter_records(samples, {core: pid})   # the live collector
    trace = with_counters(trace, samples, {core: pid})                    # the offline merge

One convention for every producer (docs/trace-model.md "Device memory counters"): a counter
("C") event of category ``neuron_hbm_usage`` whose args are the usage categories in bytes; the
device total in use is their sum, at every sample, by construction. The collector puts one
counter per NeuronCore on that core's process (``vocabulary.core_hbm_counter_name``); Neuron
Explorer profiles carry one per HBM on a process per device. Where each category's figures come
from (the allocator, the model, the runtime) is the trace's ``META_HBM_SOURCES`` metadata.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import msgspec
import numpy as np

from neuron_profiler.runtime_trace.records import KINETO_COUNTER, RECORD
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.kinds import kind_of
from neuron_profiler.trace.model import Trace, appended_rows

# The runtime's total not broken down by the usage types seen in the capture (memory allocated
# before it started): reported by the runtime, named by us.
UNATTRIBUTED = "unattributed"
DROPPED_NO_PROCESS = "core without a process in the trace"
DROPPED_OVER_CAP = "over the sample cap"
DROPPED_TOTAL_BELOW_PARTS = "runtime total below its categories' sum"
DROPPED_UNUSABLE = "unusable runtime memory events"  # no usage type or figures, mistyped


@dataclass(frozen=True)
class MemorySamples:
    """Samples in time order: ``values[i, j]`` is category ``categories[j]``'s bytes in use on
    ``core[i]`` at ``ts_ns[i]`` (host clock, Unix-epoch ns); ``sources`` says, per category,
    where its figures come from (``V.HBM_FROM_*``); ``dropped`` counts samples left out."""

    ts_ns: np.ndarray
    core: np.ndarray
    values: np.ndarray
    categories: tuple[str, ...]
    sources: dict[str, str]
    dropped: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ts_ns)

    def totals(self) -> np.ndarray:
        """The device total in use at each sample (the categories' sum)."""
        return self.values.sum(axis=1)

    @classmethod
    def from_runtime(cls, events: Sequence[object], unusable: int = 0) -> MemorySamples:
        """From the runtime's memory results (``parser.memory_events``): after each, the core's
        last figure per usage type, plus ``UNATTRIBUTED`` = the runtime's total minus their sum
        (so the categories add up to the runtime's own total). A result whose total is below
        the sum of its core's categories is dropped and counted."""
        usages = sorted({e.usage_type for e in events})
        col = {u: j for j, u in enumerate(usages)}
        k = len(usages) + 1
        state: dict[int, np.ndarray] = {}
        ts, cores, rows = [], [], []
        below = 0
        for e in events:
            row = state.setdefault(e.core, np.zeros(k, dtype=np.int64))
            row[col[e.usage_type]] = e.usage_total
            rest = e.total - int(row[:-1].sum())
            if rest < 0:
                below += 1
                continue
            row[-1] = rest
            ts.append(e.ts_ns)
            cores.append(e.core)
            rows.append(row.copy())
        categories = (*usages, UNATTRIBUTED)
        dropped = {DROPPED_TOTAL_BELOW_PARTS: below} if below else {}
        if unusable:
            dropped[DROPPED_UNUSABLE] = unusable
        return cls(
            np.asarray(ts, dtype=np.int64),
            np.asarray(cores, dtype=np.int64),
            np.asarray(rows, dtype=np.int64).reshape(len(rows), k),
            categories,
            dict.fromkeys(categories, V.HBM_FROM_RUNTIME),
            dropped,
        )


def counter_records(
    samples: MemorySamples, pid_of_core: Mapping[int, int]
) -> tuple[np.ndarray, list[str], list[list[tuple[str, str]]], dict[str, int]]:
    """``RECORD`` rows (Kineto's counter type, zero length, on the core's process and compute
    queue), the names their ``name_id`` indexes, the args tables their ``args_id`` indexes
    (category -> bytes as JSON text, plus ``hidden`` so that torch leaves them out of
    ``key_averages``) and the samples dropped, by reason (a core with no process)."""
    keep = np.isin(samples.core, np.fromiter(pid_of_core, dtype=np.int64, count=len(pid_of_core)))
    dropped = dict(samples.dropped)
    if (~keep).any():
        dropped[DROPPED_NO_PROCESS] = dropped.get(DROPPED_NO_PROCESS, 0) + int((~keep).sum())
    core = samples.core[keep]
    cores = sorted(set(core.tolist()))
    names = [V.core_hbm_counter_name(c) for c in cores]
    name_index = np.zeros(max(cores, default=0) + 1, dtype=np.int32)
    name_index[cores] = np.arange(len(cores), dtype=np.int32)
    pid_index = np.zeros(max(cores, default=0) + 1, dtype=np.int64)
    pid_index[cores] = [pid_of_core[c] for c in cores]
    n = len(core)
    rows = np.zeros(n, dtype=RECORD)
    for column in ("exec_id", "flops", "bytes", "device", "stream", "correlation"):
        rows[column] = -1
    ts = samples.ts_ns[keep]
    rows["start_ns"] = rows["end_ns"] = ts
    rows["pid"] = pid_index[core]
    rows["tid"] = [V.queue_stream(c, 0) for c in core.tolist()]
    rows["name_id"] = name_index[core]
    rows["args_id"] = np.arange(n, dtype=np.int32)
    rows["kineto_type"] = KINETO_COUNTER
    hidden = (V.ARG_HIDDEN, "1")
    cats = samples.categories
    args = [
        [*zip(cats, map(str, values), strict=True), hidden]
        for values in samples.values[keep].tolist()
    ]
    return rows, names, args, dropped


def with_counters(trace: Trace, samples: MemorySamples, pid_of_core: Mapping[int, int]) -> Trace:
    """``trace`` (a model, e.g. the offline merge's) with the counter rows written straight in
    the convention's category, and the sources and drops in its metadata, as the collector's
    trace reads once loaded."""
    rows, names, args, dropped = counter_records(samples, pid_of_core)
    encode = msgspec.json.encode
    columns = {
        S.TS_NS: rows["start_ns"],
        S.PH: np.full(len(rows), S.Phase.COUNTER, dtype=np.uint8),
        S.PID: rows["pid"],
        S.TID: rows["tid"],
        "names": (names, rows["name_id"]),
        "args": [
            encode({k: int(v) for k, v in args[i] if k != V.ARG_HIDDEN}) for i in rows["args_id"]
        ],
    }
    out = appended_rows(trace, columns, None, V.CAT_HBM_USAGE, kind_of(V.CAT_HBM_USAGE))
    metadata = {**out.metadata, V.META_HBM_SOURCES: dict(samples.sources)}
    if dropped:
        metadata[V.META_HBM_DROPPED] = dropped
    return dataclasses.replace(out, metadata=metadata)
