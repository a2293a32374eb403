"""The memory analysis' allocation walk (analysis/memory.py) against a per-event Python walk of
the same events, side by side in one process:

    python bench/bench_memory_walk.py                 # 1M [memory] events
    python bench/bench_memory_walk.py --events 4000000 --repeat 3

A generated trace on one thread: 10 ProfilerSteps; each op (``aten::op<k % 50>``) allocates one
block and frees the block allocated ``LIFETIME`` ops before it (so about ``LIFETIME`` blocks are
live at any time, on two devices in turn), with Addr, Bytes, Total Allocated and Total Reserved
as torch >= 1.10 writes them.

- ``ours``: ``memory_usage(AnalysisContext(trace))`` whole: decoding the args, the walk, the
  pairing, the allocating ops (host tree), per-step figures, timelines, findings;
- ``python loop``: the same figures (per device: peak and when, per-step peak and floor, the
  allocations live at the peak by op) by one Python loop over the events, the args already
  decoded (it is given ``arg_values``' arrays and each event's op: its decode and tree are not
  timed), so the ratio understates ours' lead.

Both results are compared (peaks, live bytes by op at the peak) before the times are printed;
the decoding of the args alone (``_memory_args``) is timed too, so that the walk's own time
(ours less decoding) can be set against the loop's. Best of ``--repeat`` runs each.
"""

from __future__ import annotations

import argparse
import time

import msgspec
import numpy as np

from neuron_profiler.analysis._args import arg_values, as_float
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.memory import MEMORY_ARGS, _memory_args, memory_usage
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import Trace

LIFETIME = 64  # ops between a block's allocation and its free
STEPS = 10
OP_NS = 2_000  # each op lasts 1 us, one every 2 us


def generated(events: int) -> Trace:
    """``events`` memory events (half allocations, half frees) inside ``events // 2`` ops."""
    ops = events // 2
    rng = np.random.default_rng(0)
    size = rng.integers(1, 1 << 20, ops) * 512
    device = np.arange(ops) % 2
    t_op = np.arange(ops, dtype=np.int64) * OP_NS
    # op k allocates block k at +100 ns and frees block k - LIFETIME at +200 ns
    freed = np.arange(ops) - LIFETIME
    ok = freed >= 0
    ev_t = np.concatenate([t_op + 100, t_op[ok] + 200])
    ev_block = np.concatenate([np.arange(ops), freed[ok]])
    ev_bytes = np.concatenate([size, -size[freed[ok]]])
    order = np.lexsort((np.arange(len(ev_t)), ev_t))
    ev_t, ev_block, ev_bytes = ev_t[order], ev_block[order], ev_bytes[order]
    ev_dev = device[ev_block]
    total = np.zeros(len(ev_t), dtype=np.int64)
    for d in (0, 1):
        on = ev_dev == d
        total[on] = np.cumsum(ev_bytes[on])
    args = [
        msgspec.json.encode(
            {
                "Device Type": 1,
                "Device Id": int(d),
                "Addr": 0x7F0000000000 + int(b) * 4096,
                "Bytes": int(n),
                "Total Allocated": int(t),
                "Total Reserved": int(t) + (1 << 30),
            }
        )
        for d, b, n, t in zip(
            ev_dev.tolist(), ev_block.tolist(), ev_bytes.tolist(), total.tolist(), strict=True
        )
    ]
    strings = ["[memory]", "cpu_instant_event", "cpu_op", "user_annotation"]
    strings += [f"aten::op{k}" for k in range(50)] + [f"ProfilerStep#{s}" for s in range(STEPS)]
    span = int(t_op[-1] + OP_NS)
    step_t = np.arange(STEPS, dtype=np.int64) * (span // STEPS)
    n_ev, n_ops = len(ev_t), ops
    ts = np.concatenate([ev_t, t_op, step_t])
    cols = {
        S.TS_NS: ts,
        S.DUR_NS: np.concatenate(
            [np.zeros(n_ev, np.int64), np.full(n_ops, 1_000), np.full(STEPS, span // STEPS)]
        ),
        S.PH: np.concatenate(
            [np.full(n_ev, S.Phase.INSTANT), np.full(n_ops + STEPS, S.Phase.COMPLETE)]
        ).astype(np.uint8),
        S.KIND: np.concatenate(
            [
                np.full(n_ev, S.EventKind.CPU_INSTANT),
                np.full(n_ops, S.EventKind.CPU_OP),
                np.full(STEPS, S.EventKind.USER_ANNOTATION),
            ]
        ).astype(np.uint8),
        S.NAME_ID: np.concatenate(
            [np.zeros(n_ev), 4 + np.arange(n_ops) % 50, 54 + np.arange(STEPS)]
        ).astype(np.int32),
        S.CAT_ID: np.concatenate([np.full(n_ev, 1), np.full(n_ops, 2), np.full(STEPS, 3)]).astype(
            np.int32
        ),
        S.PID: np.ones(len(ts), np.int64),
        S.TID: np.ones(len(ts), np.int64),
        S.ARGS_ROW: np.concatenate([np.arange(n_ev), np.full(n_ops + STEPS, -1)]),
    }
    order = np.argsort(ts, kind="stable")
    return Trace(columns={k: v[order] for k, v in cols.items()}, strings=strings, raw_args=args)


def python_walk(trace: Trace, rows: np.ndarray, values: dict, op_of: np.ndarray) -> dict:
    """Per device: (peak, its time, step peaks, step floors, live bytes at the peak by op), one
    Python loop over the events in time order."""
    ts = trace.col(S.TS_NS)
    steps = AnalysisContext(trace).steps
    starts, ends = steps.start_ns.tolist(), steps.end_ns.tolist()
    state: dict = {}
    dev, addr = as_float(values["Device Id"]), as_float(values["Addr"])
    nbytes, total = as_float(values["Bytes"]), as_float(values["Total Allocated"])
    for i, row in enumerate(rows.tolist()):
        d = int(dev[i])
        s = state.setdefault(
            d,
            {"peak": -1, "at": 0, "live": {}, "snapshot": {}, "sp": {}, "sf": {}, "level": None},
        )
        t, level = int(ts[row]), int(total[i])
        if s["level"] is None:
            s["level"] = level - int(nbytes[i])
        if nbytes[i] > 0:
            s["live"][addr[i]] = (int(nbytes[i]), op_of[i])
        else:
            s["live"].pop(addr[i], None)
        for k, (a, b) in enumerate(zip(starts, ends, strict=True)):
            if a <= t < b:
                s["sp"][k] = max(s["sp"].get(k, level), level)
                s["sf"][k] = min(s["sf"].get(k, level), level)
        if level > s["peak"]:
            s["peak"], s["at"] = level, t
            by_op: dict = {}
            for size, op in s["live"].values():
                by_op[op] = by_op.get(op, 0) + size
            s["snapshot"] = by_op
        s["level"] = level
    return state


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    trace = generated(a.events)
    rows = np.flatnonzero(trace.col(S.NAME_ID) == 0)
    ours, loop, decode = [], [], []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        mem = memory_usage(AnalysisContext(trace))
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        _memory_args(trace, rows)
        decode.append(time.perf_counter() - t0)
        values = arg_values(trace, rows, MEMORY_ARGS)
        op_of = (trace.col(S.TS_NS)[rows] // OP_NS) % 50  # each event's op, given
        t0 = time.perf_counter()
        walked = python_walk(trace, rows, values, op_of)
        loop.append(time.perf_counter() - t0)
    assert mem is not None
    for d in mem.devices:
        w = walked[d.device_id]
        assert (d.peak_bytes, d.peak_ns) == (w["peak"], w["at"]), d.label
        assert sum(o.live_bytes for o in d.by_op) == sum(w["snapshot"].values()), d.label
    print(f"{len(rows):,} [memory] events, {len(trace):,} rows, best of {a.repeat}")
    walk = min(ours) - min(decode)
    print(f"ours (decode + walk + pairing + ops + steps): {min(ours):8.3f} s")
    print(f"  of which decoding the args:                 {min(decode):8.3f} s")
    print(f"python loop (args decoded, ops given):         {min(loop):8.3f} s")
    print(f"ratio python loop / ours whole: {min(loop) / min(ours):.1f}x")
    print(f"ratio python loop / ours less decoding: {min(loop) / walk:.1f}x")


if __name__ == "__main__":
    main()
