"""Device counters over time: busy % per device and per queue, DMA bandwidth per device.

    counters = device_counters(trace)                  # bin width chosen from the span
    counters = device_counters(trace, bin_ns=100_000)  # or fixed: 100 µs bins
    counters.busy[0].values                            # percent per bin
    counters.to_frame()                                # long pandas table

Device work = complete kernel / memcpy / memset / collective events on device processes (any pid
holding such events: "NeuronCore N" as well as CUDA or ROCm device pids); queue = the event's tid.
Busy time is the union of the intervals, so overlapping work on one queue (or across the queues
of one device) counts once. A transfer's bytes are spread evenly over its duration (all in one
bin when it lasts 0 ns); GB/s = bytes per bin / bin width in ns. The Perfetto exporter draws
these as counter tracks; it computes nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis._args import arg_values, first_number
from neuron_profiler.analysis._device import work_rows
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

DEFAULT_MAX_BINS = 1000
MIN_BIN_NS = 1000
MAX_BINS = 10_000_000  # per series; a finer grid is a mistake, not a request


@dataclass(frozen=True)
class CounterSeries:
    """One counter on a fixed grid: ``values[i]`` holds from ``ts_ns[i]`` for one bin.

    Args:
        pid: device process id. tid: queue (thread) id, or None for the whole device.
        name: what is counted ("busy %", "DMA bandwidth"). unit: "%" or "GB/s".
        ts_ns: bin starts (absolute ns). values: float64 per bin.
    """

    pid: int
    tid: int | None
    name: str
    unit: str
    ts_ns: np.ndarray
    values: np.ndarray


@dataclass(frozen=True)
class DeviceCounters:
    """Busy % and DMA bandwidth per device on one time grid.

    Args:
        start_ns / bin_ns: the grid (bins of bin_ns from start_ns); n_bins bins.
        busy: per device (tid None) then per queue, percent of each bin covered by work.
        dma_bandwidth: per device, GB/s of memcpy bytes.
        transfers_without_bytes: memcpy events with no usable bytes arg (counted, not guessed).
    """

    start_ns: int
    bin_ns: int
    n_bins: int
    busy: tuple[CounterSeries, ...]
    dma_bandwidth: tuple[CounterSeries, ...]
    transfers_without_bytes: int = 0

    @property
    def series(self) -> tuple[CounterSeries, ...]:
        return self.busy + self.dma_bandwidth

    def to_frame(self):  # -> pandas.DataFrame
        """Long table: pid, tid (-1 = whole device), name, unit, ts_ns, value."""
        import pandas as pd

        frames = [
            pd.DataFrame(
                {
                    "pid": s.pid,
                    "tid": -1 if s.tid is None else s.tid,
                    "name": s.name,
                    "unit": s.unit,
                    "ts_ns": s.ts_ns,
                    "value": s.values,
                }
            )
            for s in self.series
        ]
        columns = ["pid", "tid", "name", "unit", "ts_ns", "value"]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def _nice_bin(span_ns: int, max_bins: int) -> int:
    """Smallest 1/2/5 x 10^k ns bin giving at most max_bins bins."""
    target = max(MIN_BIN_NS, -(-span_ns // max_bins))
    scale = 10 ** (len(str(target)) - 1)
    for step in (1, 2, 5, 10):
        if step * scale >= target:
            return step * scale
    return 10 * scale


def _spread(
    group: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    amount: np.ndarray,
    n_groups: int,
    n_bins: int,
    bin_ns: int,
) -> np.ndarray:
    """(n_groups, n_bins): each interval's amount spread evenly over the bins it covers.

    start/end are relative to the grid origin; a 0 ns interval puts its amount in one bin.
    """
    out = np.zeros(n_groups * n_bins + 1, dtype=np.float64)
    full = np.zeros(n_groups * n_bins + 1, dtype=np.float64)
    dur = end - start
    b0 = start // bin_ns
    b1 = np.where(dur > 0, (end - 1) // bin_ns, b0)
    base = group * n_bins
    rate = np.divide(amount, dur, out=np.zeros(len(dur)), where=dur > 0)
    one = b0 == b1
    np.add.at(out, base[one] + b0[one], amount[one])
    many = ~one
    g, s, e, r, lo, hi = base[many], start[many], end[many], rate[many], b0[many], b1[many]
    np.add.at(out, g + lo, r * ((lo + 1) * bin_ns - s))
    np.add.at(out, g + hi, r * (e - hi * bin_ns))
    inner = hi > lo + 1
    np.add.at(full, g[inner] + lo[inner] + 1, r[inner] * bin_ns)
    np.add.at(full, g[inner] + hi[inner], -r[inner] * bin_ns)
    return (out + np.cumsum(full))[:-1].reshape(n_groups, n_bins)


def _factorize(*keys: np.ndarray) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Dense group code per row and each code's key tuple, sorted by key (hash-based)."""
    import pandas as pd

    codes = np.zeros(len(keys[0]), dtype=np.int64)
    uniques = []
    for key in keys:
        c, u = pd.factorize(key, sort=True)
        codes = codes * len(u) + c
        uniques.append(u)
    dense, combos = pd.factorize(codes, sort=True)
    out = []
    for combo in combos.tolist():
        parts = []
        for u in reversed(uniques):
            combo, i = divmod(combo, len(u))
            parts.append(int(u[i]))
        out.append(tuple(reversed(parts)))
    return dense.astype(np.int64), out


def device_counters(
    trace: Trace, *, bin_ns: int | None = None, max_bins: int = DEFAULT_MAX_BINS
) -> DeviceCounters:
    """Busy % (per device and queue) and DMA bandwidth (per device) over time."""
    rows = work_rows(trace)
    if len(rows) == 0:
        return DeviceCounters(
            start_ns=0, bin_ns=bin_ns or MIN_BIN_NS, n_bins=0, busy=(), dma_bandwidth=()
        )
    start = trace.col(S.TS_NS)[rows]
    end = start + trace.col(S.DUR_NS)[rows]
    origin, stop = int(start.min()), int(end.max())
    bin_ns = int(bin_ns or _nice_bin(stop - origin, max_bins))
    if bin_ns <= 0:
        raise ValueError("bin_ns must be positive")
    n_bins = max(1, -(-(stop - origin) // bin_ns))
    if n_bins > MAX_BINS:
        raise ValueError(f"{n_bins} bins of {bin_ns} ns over {stop - origin} ns: use a wider bin")
    grid = origin + np.arange(n_bins, dtype=np.int64) * bin_ns
    pids, tids = trace.col(S.PID)[rows], trace.col(S.TID)[rows]
    s, e = start - origin, end - origin
    busy = _busy(pids, tids, s, e, grid, bin_ns)
    dma, missing = _dma(trace, rows, pids, s, e, grid, bin_ns)
    return DeviceCounters(
        start_ns=origin,
        bin_ns=bin_ns,
        n_bins=n_bins,
        busy=busy,
        dma_bandwidth=dma,
        transfers_without_bytes=missing,
    )


def _busy(
    pids: np.ndarray, tids: np.ndarray, s: np.ndarray, e: np.ndarray, grid: np.ndarray, bin_ns: int
) -> tuple[CounterSeries, ...]:
    n_bins = len(grid)
    out: list[CounterSeries] = []
    for group, keys in (_factorize(pids), _factorize(pids, tids)):
        g, us, ue = I.union_by_group(group, s, e)
        covered = _spread(g, us, ue, (ue - us).astype(np.float64), len(keys), n_bins, bin_ns)
        for i, key in enumerate(keys):
            pid, tid = key[0], (key[1] if len(key) > 1 else None)
            out.append(
                CounterSeries(
                    pid=pid,
                    tid=tid,
                    name="busy %",
                    unit="%",
                    ts_ns=grid,
                    values=covered[i] * (100.0 / bin_ns),
                )
            )
    return tuple(sorted(out, key=lambda c: (c.pid, c.tid is not None, c.tid or 0)))


def _dma(
    trace: Trace,
    rows: np.ndarray,
    pids: np.ndarray,
    s: np.ndarray,
    e: np.ndarray,
    grid: np.ndarray,
    bin_ns: int,
) -> tuple[tuple[CounterSeries, ...], int]:
    is_copy = trace.col(S.KIND)[rows] == S.EventKind.MEMCPY
    if not is_copy.any():
        return (), 0
    nbytes = first_number(arg_values(trace, rows[is_copy], V.ARG_BYTES_KEYS), V.ARG_BYTES_KEYS)
    known = ~np.isnan(nbytes)
    group, keys = _factorize(pids[is_copy])
    moved = _spread(
        group[known],
        s[is_copy][known],
        e[is_copy][known],
        nbytes[known],
        len(keys),
        len(grid),
        bin_ns,
    )
    series = tuple(
        CounterSeries(
            pid=k[0],
            tid=None,
            name="DMA bandwidth",
            unit="GB/s",
            ts_ns=grid,
            values=moved[i] / bin_ns,
        )
        for i, k in enumerate(keys)
    )
    return series, int((~known).sum())
