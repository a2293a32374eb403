"""Row selections the analyses share, each rule written once (as HTA keeps its filters in one
module); ``AnalysisContext`` computes each once per trace::

    names = NameClasses.of(trace)              # one pass over the string table
    host = host_rows(trace, names)             # host rows without ProfilerStep annotations
    spans = host_spans(trace, names)           # the host spans the idle rules test

Name rules (the names themselves are in ``trace/vocabulary.py``):

- **ProfilerStep**: a name starting with ``ProfilerStep#``; it is a numbered step when the rest
  is a number (``steps.py``). No ProfilerStep row is host work.
- **DataLoader**: ``enumerate(DataLoader)#...__next__`` or ``enumerate(DataPipe)#...`` (and rows
  of the ``dataloader`` category).
- **Host sync candidates**: runtime waits (``HOST_WAIT_NAMES``: stream/device/event
  synchronize, synchronous copies; our ``host sync: ...`` rows) and ops that may sync
  (``SYNC_OP_NAMES``: ``aten::item``, ``_local_scalar_dense``, ``is_nonzero``, ``nonzero``). Which of them
  really waited is ``sync_calls``' rule.
- **Emulator overhead**: ``emulator overhead: ...`` rows (the emulated device's own host work).
- **Profiler overhead**: Kineto's own rows (``Activity Buffer Request``, ``Profiler overhead``)
  and ``overhead``-category rows that are not the emulator's.
- **Collective kernels**: ``CC: ...`` and ``CC wait: ...`` rows (ours), NCCL / RCCL kernels.
- **Collective waits**: ``CC wait: ...`` rows (a real capture's barrier, the emulator's wait).
- **Point-to-point**: sends and receives (``vocabulary.is_point_to_point``), no collective of
  their group.
- **Profiler frames**: Python frames of torch's profiler (``torch/profiler/...``,
  ``torch/autograd/profiler...``): its ``__enter__`` / ``__exit__`` / ``step`` work.
- **FSDP ranges**: FSDP's ``record_function`` ranges, ``FSDP::...`` (FSDP2) and
  ``FullyShardedDataParallel....`` (FSDP1); ``communication`` reads their units from them.
- **Set-up the trace shows** (the advice depends on it): compiled graphs (``Torch-Compiled
  Region``, ``CompiledFunction``), a DataLoader with worker processes
  (``_MultiProcessingDataLoaderIter``), pinned host memory (``aten::pin_memory``, CUDA's
  ``Pinned -> Device`` copies).

User rows are the ops and annotations the user's code ran: complete ``cpu_op`` and
``user_annotation`` rows that are no ProfilerStep and do not start inside a profiler frame on
their thread.

Host rows are complete rows of the host kinds (``HOST_KINDS``: ops, annotations, Python
functions, runtime calls, CPU-fallback and DataLoader rows), ProfilerStep annotations left out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

HOST_KINDS = (
    S.EventKind.CPU_OP,
    S.EventKind.USER_ANNOTATION,
    S.EventKind.PYTHON,
    S.EventKind.RUNTIME,
    S.EventKind.FALLBACK,
    S.EventKind.DATALOADER,
)
STEP_NAME = re.compile(re.escape(V.PROFILER_STEP_PREFIX) + r"(\d+)$")
_COLLECTIVE_NAME = re.compile(
    rf"^({re.escape(V.COLLECTIVE_ENGINE)}: |"
    rf"{re.escape(V.COLLECTIVE_WAIT_PREFIX)}|nccl|rccl)",
    re.IGNORECASE,
)
_FSDP_RANGE = re.compile(r"^(FSDP::|FullyShardedDataParallel\.)")
# autograd's backward ops: the engine's frames, ``*Backward0`` nodes, gradient accumulation
BACKWARD_NAME = re.compile(
    r"^autograd::engine::evaluate_function: |Backward\d*$|^torch::autograd::AccumulateGrad$"
)
_PROFILER_FRAME = re.compile(r"(^|[/\\])torch[/\\](autograd[/\\])?profiler")
# what the trace shows of the user's set-up (the advice depends on it, causes.py): compiled
# graphs (torch.compile's regions, our compiled executions' ops), DataLoader worker processes,
# pinned host memory (pinning ops, CUDA's "Memcpy HtoD (Pinned -> Device)")
_COMPILED_PREFIXES = ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFx")
_PIN_OPS = frozenset({"aten::pin_memory", "aten::_pin_memory"})
_EMPTY = np.zeros(0, np.int64)


def per_name(
    trace: Trace, name_ids: np.ndarray, fn: Callable[[str], Any], dtype: Any = bool
) -> np.ndarray:
    """``fn(name)`` per row (``name_ids``: the rows' string ids), computed once per distinct
    name: a hot path never builds a string per row, nor a fixed-width text array (as wide as
    the longest name: one 1 MB name on a million rows would take 4 TB)."""
    ids, inverse = np.unique(name_ids, return_inverse=True)
    values = [fn(trace.strings[i]) for i in ids.tolist()]
    out = np.empty(len(ids), dtype)
    out[:] = values
    return out[inverse.reshape(-1)]


def is_dataloader_name(name: str) -> bool:
    return (
        name.startswith(V.DATALOADER_PREFIX) and name.endswith(V.DATALOADER_SUFFIX)
    ) or name.startswith(V.DATAPIPE_PREFIX)


def is_wait_name(name: str) -> bool:
    """A runtime wait: it blocks the host until device work is done, by itself."""
    return name in V.HOST_WAIT_NAMES or name.startswith(V.SYNC_PREFIX)


def is_sync_name(name: str) -> bool:
    """A runtime wait or an op that may sync (a sync when it really waited)."""
    return name in V.SYNC_OP_NAMES or is_wait_name(name)


@dataclass(frozen=True)
class NameClasses:
    """String ids of each class of names (see the module docstring), from one pass over the
    trace's string table. ``step_numbers``: the step number of each numbered ProfilerStep
    name, by string id."""

    profiler_steps: np.ndarray
    step_numbers: dict[int, int]
    dataloader: np.ndarray
    sync: np.ndarray
    wait: np.ndarray
    dispatch_frames: np.ndarray
    internal_frames: np.ndarray
    emulator_overhead: np.ndarray
    profiler_overhead: np.ndarray
    collective_kernel: np.ndarray
    collective_wait: np.ndarray
    point_to_point: np.ndarray
    profiler_frames: np.ndarray
    compiled: np.ndarray
    worker_loader: np.ndarray
    pinned: np.ndarray
    fsdp_ranges: np.ndarray
    anchors: np.ndarray  # ranges 2021 Kineto recorded as ops (ANNOTATION_OP_PREFIXES)
    backward: np.ndarray  # autograd's backward ops (BACKWARD_NAME)
    modules: np.ndarray  # nn.Module frames (MODULE_PREFIX)
    aten: np.ndarray  # aten ops

    @classmethod
    def of(cls, trace: Trace) -> NameClasses:
        found: dict[str, list[int]] = {
            f: []
            for f in (
                "profiler_steps",
                "dataloader",
                "sync",
                "wait",
                "dispatch_frames",
                "internal_frames",
                "emulator_overhead",
                "profiler_overhead",
                "collective_kernel",
                "collective_wait",
                "point_to_point",
                "profiler_frames",
                "compiled",
                "worker_loader",
                "pinned",
                "fsdp_ranges",
                "anchors",
                "backward",
                "modules",
                "aten",
            )
        }
        numbers: dict[int, int] = {}
        for i, s in enumerate(trace.strings):
            if s.startswith(V.PROFILER_STEP_PREFIX):
                found["profiler_steps"].append(i)
                if (m := STEP_NAME.match(s)) is not None:
                    numbers[i] = int(m.group(1))
            if is_dataloader_name(s):
                found["dataloader"].append(i)
            if is_sync_name(s):
                found["sync"].append(i)
                if is_wait_name(s):
                    found["wait"].append(i)
            if s in V.DISPATCH_FRAMES:
                found["dispatch_frames"].append(i)
                found["internal_frames"].append(i)
            elif V.EMULATOR_FRAME_MARK in s:
                found["internal_frames"].append(i)
            if s.startswith(V.OVERHEAD_PREFIX):
                found["emulator_overhead"].append(i)
            if s in V.PROFILER_OVERHEAD_NAMES:
                found["profiler_overhead"].append(i)
            if _COLLECTIVE_NAME.match(s):
                found["collective_kernel"].append(i)
            if s.startswith(V.COLLECTIVE_WAIT_PREFIX):
                found["collective_wait"].append(i)
            if V.is_point_to_point(s):
                found["point_to_point"].append(i)
            # the literal first: a substring scan is fast where the pattern's search is not
            # (1.3 s on a 50 MB name, tests/unit/test_long_names.py)
            if "profiler" in s and _PROFILER_FRAME.search(s):
                found["profiler_frames"].append(i)
            if s.startswith(_COMPILED_PREFIXES) or "CompiledFxGraph" in s:
                found["compiled"].append(i)
            if s.startswith(V.DATALOADER_PREFIX) and "MultiProcessing" in s:
                found["worker_loader"].append(i)
            if s in _PIN_OPS or "(Pinned ->" in s:
                found["pinned"].append(i)
            if _FSDP_RANGE.match(s):
                found["fsdp_ranges"].append(i)
            if s.startswith(V.ANNOTATION_OP_PREFIXES):
                found["anchors"].append(i)
            if BACKWARD_NAME.search(s) is not None:
                found["backward"].append(i)
            if s.startswith(V.MODULE_PREFIX):
                found["modules"].append(i)
            if s.startswith(V.ATEN_PREFIX):
                found["aten"].append(i)
        return cls(
            step_numbers=numbers, **{k: np.asarray(v, dtype=np.int64) for k, v in found.items()}
        )


@dataclass(frozen=True)
class HostRows:
    """Host rows (ProfilerStep annotations left out), in file order, with their spans."""

    rows: np.ndarray
    start: np.ndarray
    end: np.ndarray
    name_id: np.ndarray
    kind: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    @cached_property
    def by_start(self) -> _StartIndex:
        return _StartIndex.of(self.start, self.end)


COVERING_FIRST = 64  # rows sorted first by ``covering``: a gap names 3 ops, a finding one
_LONG_QUANTILE = 0.99  # rows longer than this share of rows are scanned apart (few, by design)


@dataclass(frozen=True)
class _StartIndex:
    """Rows that may overlap a window, without a pass over every row: the short rows (at most
    ``longest_short`` ns) sorted by start, so those overlapping [s, e) start in
    (s - longest_short, e), one ``searchsorted``; the long rows (1%) always candidates."""

    short: np.ndarray  # indices of the short rows, by start
    short_start: np.ndarray
    longest_short: int
    long: np.ndarray  # indices of the long rows

    @classmethod
    def of(cls, start: np.ndarray, end: np.ndarray) -> _StartIndex:
        dur = end - start
        bound = int(np.quantile(dur, _LONG_QUANTILE, method="higher")) if len(dur) else 0
        if bool((start[1:] >= start[:-1]).all()):  # (host rows in file order: by start)
            short = np.flatnonzero(dur <= bound)
        else:
            order = np.argsort(start, kind="stable")
            short = order[dur[order] <= bound]
        return cls(short, start[short], bound, np.flatnonzero(dur > bound))

    def short_candidates(self, start: int, end: int) -> np.ndarray:
        """Indices (in start order) of every short row that may overlap [start, end), and a
        few more."""
        a = np.searchsorted(self.short_start, start - self.longest_short, side="left")
        b = np.searchsorted(self.short_start, end, side="left")
        return self.short[a:b]


def host_rows(trace: Trace, names: NameClasses) -> HostRows:
    mask = trace.mask(kind=list(HOST_KINDS), ph=S.Phase.COMPLETE) & ~np.isin(
        trace.col(S.NAME_ID), names.profiler_steps
    )
    rows = np.flatnonzero(mask)
    start = trace.col(S.TS_NS)[rows]
    return HostRows(
        rows=rows,
        start=start,
        end=start + trace.col(S.DUR_NS)[rows],
        name_id=trace.col(S.NAME_ID)[rows],
        kind=trace.col(S.KIND)[rows],
    )


def covering(host: HostRows, start: int, end: int) -> Iterator[np.ndarray]:
    """Indices into ``host`` of the rows overlapping [start, end), those covering most of it
    first (the innermost, i.e. shortest, among equals): what the host was doing there. In
    blocks, in that order: callers want the first few rows of the order, and a long gap has a
    whole step's host rows under it (a full sort of 300,000 rows per gap). First the long rows
    covering more of it than any short row can (a short row covers at most
    ``longest_short``): a long gap's host ops are mostly named from these alone, the short
    rows then never scanned. Then, if asked for, the rest: the rows covering more than the ``COVERING_FIRST``-th of them does, then the others."""
    index = host.by_start
    long = index.long
    cover = np.minimum(host.end[long], end) - np.maximum(host.start[long], start)
    beyond = cover > index.longest_short  # (a short row covers at most its length)
    if beyond.any():
        yield _by_cover(host, long[beyond], -cover[beyond])
    near = np.concatenate([index.short_candidates(start, end), long[~beyond]])
    cover = np.minimum(host.end[near], end) - np.maximum(host.start[near], start)
    hit = near[cover > 0]
    less = -cover[cover > 0]  # the order's first key, then the duration, then the index
    if len(hit) > COVERING_FIRST:
        first = less < np.partition(less, COVERING_FIRST)[COVERING_FIRST]
        yield _by_cover(host, hit[first], less[first])
        hit, less = hit[~first], less[~first]
    yield _by_cover(host, hit, less)


def _by_cover(host: HostRows, hit: np.ndarray, less: np.ndarray) -> np.ndarray:
    return hit[np.lexsort((hit, host.end[hit] - host.start[hit], less))]


@dataclass(frozen=True)
class Spans:
    """(starts, ends) of host rows, in file order."""

    start: np.ndarray
    end: np.ndarray


def spans_of(trace: Trace, rows: np.ndarray) -> Spans:
    start = trace.col(S.TS_NS)[rows]
    return Spans(start, start + trace.col(S.DUR_NS)[rows])


def sync_rows(trace: Trace, names: NameClasses) -> np.ndarray:
    """Host rows of host syncs (idle rule 3's spans, the sync groups' calls)."""
    return np.flatnonzero(
        trace.mask(kind=list(HOST_KINDS), ph=S.Phase.COMPLETE)
        & np.isin(trace.col(S.NAME_ID), names.sync)
    )


def dataloader_rows(trace: Trace, names: NameClasses) -> np.ndarray:
    """DataLoader ``__next__`` spans: host rows by name, and ``dataloader``-category rows."""
    complete = trace.col(S.PH) == S.Phase.COMPLETE
    kind = trace.col(S.KIND)
    host = complete & np.isin(kind, np.array(HOST_KINDS, np.uint8))
    return np.flatnonzero(
        (host & np.isin(trace.col(S.NAME_ID), names.dataloader))
        | (complete & (kind == S.EventKind.DATALOADER))
    )


def emulator_overhead_rows(trace: Trace, names: NameClasses) -> np.ndarray:
    return np.flatnonzero(
        trace.mask(ph=S.Phase.COMPLETE) & np.isin(trace.col(S.NAME_ID), names.emulator_overhead)
    )


def profiler_overhead_rows(trace: Trace, names: NameClasses) -> np.ndarray:
    """Kineto's own host work: its overhead names, or ``overhead``-category rows that are not
    the emulator's (the emulator writes its overhead in that category too)."""
    name_id = trace.col(S.NAME_ID)
    overhead = np.isin(name_id, names.profiler_overhead) | (
        trace.col(S.CAT_ID) == trace.string_id(V.CAT_OVERHEAD)
    )
    return np.flatnonzero(
        trace.mask(ph=S.Phase.COMPLETE) & overhead & ~np.isin(name_id, names.emulator_overhead)
    )


def fallback_rows(trace: Trace) -> np.ndarray:
    """Complete CPU-fallback rows (``CPU fallback: <op>``)."""
    return trace.select(kind=S.EventKind.FALLBACK, ph=S.Phase.COMPLETE)


def user_rows(trace: Trace, names: NameClasses) -> np.ndarray:
    """The user's ops and annotations (see the module docstring), in file order."""
    c = trace.columns
    kinds = [S.EventKind.CPU_OP, S.EventKind.USER_ANNOTATION]
    rows = np.flatnonzero(
        trace.mask(kind=kinds, ph=S.Phase.COMPLETE) & ~np.isin(c[S.NAME_ID], names.profiler_steps)
    )
    frames = np.flatnonzero(
        trace.mask(kind=S.EventKind.PYTHON, ph=S.Phase.COMPLETE)
        & np.isin(c[S.NAME_ID], names.profiler_frames)
    )
    if len(frames) == 0 or len(rows) == 0:
        return rows
    inside = np.zeros(len(rows), bool)
    threads = set(zip(c[S.PID][frames].tolist(), c[S.TID][frames].tolist(), strict=True))
    for pid, tid in threads:  # the threads that ran the profiler: one or two
        f = frames[(c[S.PID][frames] == pid) & (c[S.TID][frames] == tid)]
        spans = I.union(c[S.TS_NS][f], c[S.TS_NS][f] + c[S.DUR_NS][f] + 1)
        mine = (c[S.PID][rows] == pid) & (c[S.TID][rows] == tid)
        at = c[S.TS_NS][rows[mine]]
        inside[mine] = I.overlap_per_window(spans, at, at + 1) > 0
    return rows[~inside]
