"""HTA-compatible mode: Holistic Trace Analysis 0.5.0's temporal and idle-time breakdowns,
reproduced on the trace model so that users can compare figures with HTA's::

    temporal = hta_temporal_breakdown(trace)          # None when HTA would find no kernel
    idle = hta_idle_time_breakdown(trace)             # per stream: host_wait / kernel_wait / other

HTA's conventions, kept on purpose (docs/breakdown-definitions.md, HTA 0.5.0):
- rows: complete events with a category, except ``Trace``; ``stream`` read with ``int()``;
- ns-resolution traces (some ``ts`` not a whole µs) are rounded inward to whole µs: start up,
  end down, so events shrink and sub-µs events get 0 or -1 µs;
- a device row has ``stream >= 0`` and ``correlation >= 0`` (or is an Event/Context Sync);
- with two or more distinct ``ProfilerStep`` names, host rows from the last step's start on are
  cut, and device rows are kept once per kept host row sharing their correlation;
- temporal: over every ``stream != -1`` row, kernel time = first start to last end of the merged
  intervals, idle = kernel time - busy, compute = merged COMPUTATION kernels (HTA's name rules);
- idle: per stream, each gap to the previous row in start order is host_wait when the launch
  call began after the previous row ended, else kernel_wait when under 30 µs, else other.

Known differences (each far under 1%): HTA compares float µs, we use exact integer ns, so an
end that float rounding puts just under a whole µs can differ by 1 µs; HTA breaks start-time
ties in an unspecified order; a device row whose launch is missing joins HTA's event 0 (an early
row, so never host_wait), ours has no launch (never host_wait).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis._intervals import distinct
from neuron_profiler.analysis._keys import index_of
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import MetaTable, Trace, file_base_ns

HTA_KERNEL_CATEGORIES = (
    "kernel",
    "Kernel",
    "gpu_memset",
    "Memset",
    "gpu_memcpy",
    "Memcpy",
    "mtia_ccp_events",
)
CONSECUTIVE_KERNEL_DELAY_NS = 30_000  # HTA's default 30, compared in trace units (µs)
SYNC_NAMES = ("Event Sync", "Context Sync")
_COMM = re.compile(r"^nccl.*Kernel")
_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def hta_kernel_type(name: str) -> str:
    """HTA's ``get_kernel_type``: COMMUNICATION, MEMORY, COMPUTATION or OTHER, by name."""
    if _COMM.match(name):
        return "COMMUNICATION"
    if _MEMORY.match(name):
        return "MEMORY"
    return "OTHER" if _NOT_COMPUTE.match(name) else "COMPUTATION"


@dataclass(frozen=True)
class HtaTemporal:
    """``get_temporal_breakdown`` for one trace (one rank), in ns (whole µs when rounded)."""

    rank: int
    idle_ns: int
    compute_ns: int
    non_compute_ns: int
    kernel_ns: int

    def pct(self, value_ns: int) -> float:
        """HTA's ``*_pctg``: round(100 * value / kernel time, 2)."""
        return round(100 * value_ns / self.kernel_ns, 2) if self.kernel_ns else float("nan")


@dataclass(frozen=True)
class HtaStreamIdle:
    """One stream of ``get_idle_time_breakdown``. ``categories``: the categories HTA lists for
    it (``other`` always; the others when some gap has them)."""

    stream: int
    host_wait_ns: int
    kernel_wait_ns: int
    other_ns: int
    categories: tuple[str, ...]

    @property
    def idle_ns(self) -> int:
        return self.host_wait_ns + self.kernel_wait_ns + self.other_ns


@dataclass(frozen=True)
class HtaIdle:
    rank: int
    streams: tuple[HtaStreamIdle, ...]


@dataclass(frozen=True)
class _HtaRows:
    """The rows HTA keeps after its cut (device rows repeated as its merge repeats them), those
    with a stream only: the rows its breakdowns read."""

    name_id: np.ndarray
    cat_id: np.ndarray
    start: np.ndarray  # ns from the file's time base (rounded to whole µs when HTA rounds)
    end: np.ndarray
    stream: np.ndarray
    launch: np.ndarray  # start of the correlated host row; int64 min where none
    rank: int


NO_LAUNCH = np.iinfo(np.int64).min
# HTA's merge repeats a device row once per host row of its correlation id: a trace that reuses
# ids would make it (and this reproduction) quadratic; beyond this many rows (and 4 per input
# row) the breakdowns are left out rather than computed into gigabytes
MAX_REPEATED_ROWS = 4_000_000


class HtaTooLarge(Exception):
    """HTA's rules would repeat the trace's rows past ``MAX_REPEATED_ROWS`` (str: how far)."""


def rank_of(trace: Trace) -> int:
    """The rank HTA gives a trace: ``distributedInfo``'s, 0 where there is none (HTA's rule,
    docs/breakdown-definitions.md; reproduced in the HTA section only: the report's own rank is
    None then, ``analysis.report.rank_text``)."""
    info = trace.metadata.get(V.META_DISTRIBUTED)
    try:
        return int(info.get(V.DIST_RANK, 0)) if isinstance(info, dict) else 0
    except (TypeError, ValueError):
        return 0


def hta_rounds(trace: Trace) -> bool:
    """HTA rounds when its ``ts`` column is float: some ``ts`` is not a whole µs (or missing).
    The ``M`` events' times are read as the loader's columns (``MetaTable``: a trace may hold
    hundreds of thousands), else one event at a time."""
    base = file_base_ns(trace.metadata)
    if bool((_sub_us(trace.col(S.TS_NS), base) != 0).any()):
        return True
    metas = trace.meta_events
    if isinstance(metas, MetaTable):
        return bool((~metas.has_ts).any() or (_sub_us(metas.ts_ns[metas.has_ts], base) != 0).any())
    return any(m.ts_ns is None or (m.ts_ns - base) % 1000 for m in metas)


def _sub_us(ts_ns: np.ndarray, base: int) -> np.ndarray:
    """``(ts_ns - base) % 1000`` of int64 times, without the subtraction (it may overflow)."""
    return (ts_ns % 1000 - base % 1000) % 1000


def _hta_rows(trace: Trace, rounding: bool | None) -> _HtaRows:
    c = trace.columns
    trace_cat = trace.string_id("Trace")
    keep = (
        (c[S.PH] == S.Phase.COMPLETE)
        & ((c[S.FORM] & S.Form.NO_CAT) == 0)
        & (c[S.CAT_ID] != trace_cat)
    )
    rows = np.flatnonzero(keep)
    base = file_base_ns(trace.metadata)
    start = c[S.TS_NS][rows] - base
    end = start + c[S.DUR_NS][rows]
    if hta_rounds(trace) if rounding is None else rounding:
        start, end = -((-start) // 1000) * 1000, (end // 1000) * 1000
    stream = c[S.STREAM][rows]  # int(args["stream"]), -1 without one: HTA's rule
    corr = c[S.CORRELATION][rows]
    name_id = c[S.NAME_ID][rows]
    sync_ids = [i for i in (trace.string_id(n) for n in SYNC_NAMES) if i >= 0]
    gpu = ((stream >= 0) & (corr >= 0)) | np.isin(name_id, sync_ids)
    launch = _launch_starts(corr, start, gpu)
    cpu_keep, gpu_repeat, cut_at = _last_step_cut(trace, name_id, start, corr, gpu)
    repeat = np.where(gpu, gpu_repeat, cpu_keep.astype(np.int64))
    repeat[stream == -1] = 0  # (no stream: no kernel row; both breakdowns read only those)
    if cut_at is not None:  # HTA joins launches on the cut frame
        launch = np.where(launch < cut_at, launch, NO_LAUNCH)
    cat_id = c[S.CAT_ID][rows]
    del rows, corr, gpu, cpu_keep, gpu_repeat
    total = int(repeat.sum())
    if total > max(MAX_REPEATED_ROWS, 4 * len(repeat)):
        raise HtaTooLarge(
            f"its merge on correlation ids would repeat {len(repeat):,} rows into {total:,} "
            "(ids reused by many runtime calls)"
        )
    if not (repeat == 1).all():  # rows dropped or repeated: pick (else no copy at all)
        pick = np.repeat(np.arange(len(repeat)), repeat)
        del repeat
        name_id, cat_id, start, end, stream, launch = (
            a[pick] for a in (name_id, cat_id, start, end, stream, launch)
        )
    return _HtaRows(
        name_id=name_id,
        cat_id=cat_id,
        start=start,
        end=end,
        stream=stream,
        launch=launch,
        rank=rank_of(trace),
    )


def _launch_starts(corr: np.ndarray, start: np.ndarray, gpu: np.ndarray) -> np.ndarray:
    """Start of the host row sharing each device row's correlation (HTA's index_correlation)."""
    host = np.flatnonzero(~gpu & (corr != -1))
    out = np.full(len(corr), NO_LAUNCH, dtype=np.int64)
    if len(host) == 0:
        return out
    order = host[np.argsort(corr[host], kind="stable")]
    keys = corr[order]
    # the last host row with the key wins, as HTA's repeated .loc assignment does
    last = np.flatnonzero(np.r_[keys[1:] != keys[:-1], True])
    device = np.flatnonzero(gpu)
    k = index_of(keys[last], corr[device])
    hit = k >= 0
    out[device[hit]] = start[order[last[k[hit]]]]
    return out


def _last_step_cut(
    trace: Trace, name_id: np.ndarray, start: np.ndarray, corr: np.ndarray, gpu: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int | None]:
    """(host rows kept, times each device row is kept, where host rows are cut from), by HTA's
    last-step rule."""
    step_ids = distinct(
        name_id[np.isin(name_id, [i for i, s in enumerate(trace.strings) if "ProfilerStep" in s])]
    )
    if len(step_ids) < 2:
        return ~gpu, gpu.astype(np.int64), None
    is_step = ~gpu & np.isin(name_id, step_ids)
    last_start = start[is_step].max() if is_step.any() else np.iinfo(np.int64).min
    cpu_keep = ~gpu & (start < last_start)
    keys, counts = np.unique(corr[cpu_keep], return_counts=True)
    device = np.flatnonzero(gpu)
    k = index_of(keys, corr[device])
    repeat = np.zeros(len(corr), np.int64)
    repeat[device[k >= 0]] = counts[k[k >= 0]]
    return cpu_keep, repeat, int(last_start)


def _hta_merge(start: np.ndarray, end: np.ndarray) -> tuple[int, int]:
    """HTA's merge_kernel_intervals: (sum of merged lengths, last end - first start). A row
    starts a new group when it starts after every earlier end; negative rows count as is."""
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > np.maximum.accumulate(e)[:-1]
    group = np.cumsum(new) - 1
    g_start = s[new]
    g_end = np.full(len(g_start), np.iinfo(np.int64).min)
    np.maximum.at(g_end, group, e)
    return int((g_end - g_start).sum()), int(g_end[-1] - g_start[0])


def hta_breakdowns(
    trace: Trace,
    *,
    rounding: bool | None = None,
    consecutive_kernel_delay_ns: int = CONSECUTIVE_KERNEL_DELAY_NS,
) -> tuple[HtaTemporal | None, HtaIdle | None]:
    """Both breakdowns from one reading of the trace (what ``analyze`` uses)."""
    r = _hta_rows(trace, rounding)
    return _temporal(trace, r), _idle(trace, r, consecutive_kernel_delay_ns)


def hta_temporal_breakdown(trace: Trace, *, rounding: bool | None = None) -> HtaTemporal | None:
    """HTA's ``get_temporal_breakdown`` for this trace; None where HTA finds no kernel (it
    raises there). ``rounding``: None = HTA's default, False = ``HTA_DISABLE_NS_ROUNDING=1``."""
    return _temporal(trace, _hta_rows(trace, rounding))


def _temporal(trace: Trace, r: _HtaRows) -> HtaTemporal | None:
    kernel = r.stream != -1
    if not kernel.any():
        return None
    busy, span = _hta_merge(r.start[kernel], r.end[kernel])
    names = np.asarray(trace.strings, dtype=object)
    ids = distinct(r.name_id[kernel])
    compute_ids = [i for i in ids.tolist() if hta_kernel_type(names[i]) == "COMPUTATION"]
    comp = kernel & np.isin(r.name_id, compute_ids)
    compute = _hta_merge(r.start[comp], r.end[comp])[0] if comp.any() else 0
    idle = span - busy
    return HtaTemporal(
        rank=r.rank,
        idle_ns=idle,
        compute_ns=compute,
        non_compute_ns=span - compute - idle,
        kernel_ns=span,
    )


def hta_idle_time_breakdown(
    trace: Trace,
    *,
    rounding: bool | None = None,
    consecutive_kernel_delay_ns: int = CONSECUTIVE_KERNEL_DELAY_NS,
) -> HtaIdle | None:
    """HTA's ``get_idle_time_breakdown`` for this trace's rank, every stream; None where HTA
    finds no kernel."""
    return _idle(trace, _hta_rows(trace, rounding), consecutive_kernel_delay_ns)


def _idle(trace: Trace, r: _HtaRows, consecutive_kernel_delay_ns: int) -> HtaIdle | None:
    cats = [i for i in (trace.string_id(c) for c in HTA_KERNEL_CATEGORIES) if i >= 0]
    k = np.flatnonzero((r.stream != -1) & np.isin(r.cat_id, cats))
    if len(k) == 0:
        return None
    k = k[np.lexsort((r.start[k], r.stream[k]))]
    stream, start, end, launch = r.stream[k], r.start[k], r.end[k], r.launch[k]
    first = np.ones(len(k), dtype=bool)
    first[1:] = stream[1:] != stream[:-1]
    prev_end = np.concatenate([[0], end[:-1]])
    gap = start - prev_end
    host_wait = ~first & (launch != NO_LAUNCH) & (launch > prev_end)
    kernel_wait = ~first & ~host_wait & (gap < consecutive_kernel_delay_ns)
    other = ~first & ~host_wait & ~kernel_wait
    out = []
    for s in distinct(stream).tolist():  # one iteration per stream (a handful)
        m = stream == s
        present = (
            ("host_wait",) * bool((host_wait & m).any())
            + ("kernel_wait",) * bool((kernel_wait & m).any())
            + ("other",)
        )
        out.append(
            HtaStreamIdle(
                stream=s,
                host_wait_ns=int(gap[host_wait & m].sum()),
                kernel_wait_ns=int(gap[kernel_wait & m].sum()),
                other_ns=int(gap[other & m].sum()),
                categories=present,
            )
        )
    return HtaIdle(rank=r.rank, streams=tuple(out))
