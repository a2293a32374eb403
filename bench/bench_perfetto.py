"""Perfetto export: our vectorised writer vs the perfetto package's builder, and .pftrace size vs
our Chrome JSON export, in one run on the same generated trace.

    python bench/bench_perfetto.py                   # ~1M complete events
    python bench/bench_perfetto.py --events 200000   # quicker

The trace is built directly as numpy columns (no JSON parse in the way): a host process whose
two threads run nested cpu_ops with runtime launches inside, ac2g flows to kernels on two
NeuronCores (compute / DMA / collective queues, DMA transfers with a bytes arg, a few
collectives overlapping without nesting), so tracks, lanes, flows, args and counters all get
exercised. Baseline: ``perfetto.trace_builder.proto_builder.StreamingTraceProtoBuilder``, one
``TracePacket`` object per packet serialised one by one, given the very same packets (ours
plans them: nesting, flows, counters; the baseline's time covers only building and writing).
Both files are decoded with perfetto's own protos and their TrackEvent packets compared one by one.
Targets (issue 4): >= 1M slices/s; .pftrace <= 40% of the uncompressed Chrome JSON.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import msgspec
import numpy as np

from neuron_profiler.exporters import perfetto as P
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.trace import EventKind, Phase, Trace
from neuron_profiler.trace import schema as S

HOST_PID, TIDS, CORES = 4242, (4242, 4250), 2
BASE_NS = 1_764_000_000_000_000_000
NAMES = [
    "aten::linear",
    "aten::addmm",
    "aten::mul",
    "aten::add_",
    "aten::softmax",
    "aten::layer_norm",
    "aten::copy_",
    "aten::mm",
]


def make_trace(n_events: int, seed: int = 0) -> Trace:
    """~n_events complete events: per unit 3 nested host events + 1 device event (+2 flows)."""
    rng = np.random.default_rng(seed)
    units = n_events // 4
    strings = NAMES + [
        "nrt_execute",
        "kernel_fwd",
        "dma_copy",
        "all_reduce",
        "cpu_op",
        "privateuse1_runtime",
        "kernel",
        "gpu_memcpy",
        "ac2g",
    ]
    sid = {s: i for i, s in enumerate(strings)}
    thread = np.arange(units) % len(TIDS)
    t0 = BASE_NS + (np.arange(units) // len(TIDS)) * 20_000 + thread * 3_000
    core = rng.integers(0, CORES, units)
    queue = np.where(np.arange(units) % 8 == 0, 1, 0)  # 1 in 8 device events is a DMA transfer
    queue[np.arange(units) % 97 == 0] = 2  # a few collectives, overlapping the next one
    dev_start = t0 + 9_000
    dev_dur = np.where(queue == 2, 30_000, rng.integers(1_000, 8_000, units))
    cols = {
        "ts": [t0, t0 + 500, t0 + 1_000, dev_start],
        "dur": [np.full(units, 12_000), np.full(units, 10_000), np.full(units, 2_000), dev_dur],
        "kind": [
            EventKind.CPU_OP,
            EventKind.CPU_OP,
            EventKind.RUNTIME,
            np.where(
                queue == 1,
                EventKind.MEMCPY,
                np.where(queue == 2, EventKind.COLLECTIVE, EventKind.KERNEL),
            ),
        ],
        "name": [
            rng.integers(0, 4, units),
            rng.integers(4, 8, units),
            sid["nrt_execute"],
            np.choose(queue, [sid["kernel_fwd"], sid["dma_copy"], sid["all_reduce"]]),
        ],
        "cat": [
            sid["cpu_op"],
            sid["cpu_op"],
            sid["privateuse1_runtime"],
            np.where(queue == 1, sid["gpu_memcpy"], sid["kernel"]),
        ],
        "pid": [HOST_PID, HOST_PID, HOST_PID, core],
        "tid": [np.take(TIDS, thread)] * 3 + [queue],
    }
    full = {
        k: np.concatenate([np.broadcast_to(np.asarray(v), units).astype(np.int64) for v in vs])
        for k, vs in cols.items()
    }
    n = len(full["ts"])
    dma_rows = np.flatnonzero(full["kind"] == EventKind.MEMCPY)
    raw_args = [
        msgspec.json.encode({"bytes": int(b)})
        for b in rng.integers(1 << 16, 1 << 24, len(dma_rows))
    ]
    args_row = np.full(n, -1, dtype=np.int64)
    args_row[dma_rows] = np.arange(len(dma_rows))
    flow_ts = np.concatenate([t0 + 1_000, dev_start])
    corr = np.tile(np.arange(units), 2)
    columns = {
        S.TS_NS: np.concatenate([full["ts"], flow_ts]),
        S.DUR_NS: np.concatenate([full["dur"], np.zeros(2 * units, np.int64)]),
        S.PH: np.concatenate(
            [
                np.full(n, Phase.COMPLETE),
                np.full(units, Phase.FLOW_START),
                np.full(units, Phase.FLOW_END),
            ]
        ).astype(np.uint8),
        S.KIND: np.concatenate([full["kind"], np.full(2 * units, EventKind.FLOW)]).astype(np.uint8),
        S.NAME_ID: np.concatenate([full["name"], np.full(2 * units, sid["ac2g"])]).astype(np.int32),
        S.CAT_ID: np.concatenate([full["cat"], np.full(2 * units, sid["ac2g"])]).astype(np.int32),
        S.PID: np.concatenate([full["pid"], np.full(units, HOST_PID), core]),
        S.TID: np.concatenate([full["tid"], np.take(TIDS, thread), queue]),
        S.EXTERNAL_ID: np.full(n + 2 * units, -1, np.int64),
        S.CORRELATION: np.full(n + 2 * units, -1, np.int64),
        S.FLOW_ID: np.concatenate([np.full(n, -1, np.int64), corr]),
        S.ARGS_ROW: np.concatenate([args_row, np.full(2 * units, -1, np.int64)]),
    }
    order = np.argsort(columns[S.TS_NS], kind="stable")
    names = {c: f"NeuronCore {c}" for c in range(CORES)} | {HOST_PID: "python"}
    threads = {
        (c, q): n for c in range(CORES) for q, n in enumerate(("compute", "DMA", "collectives"))
    }
    return Trace(
        columns={k: v[order] for k, v in columns.items()},
        strings=strings,
        raw_args=raw_args,
        process_names=names,
        thread_names=threads,
        source="bench",
    )


def baseline(trace: Trace, path: Path) -> tuple[float, int]:
    """The same packets through the perfetto package's streaming builder, one object each."""
    from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

    sel = P._select(trace)
    tracks, flows = P._plan(trace, sel, None)
    ev = P._events(trace, sel, tracks, flows)
    ch = ev.chunk(0, len(ev))
    header = list(P._header(trace, sel, tracks, int(ch.ts[0])))
    name, cat, row = (np.zeros(len(ch.ts), np.int64) for _ in range(3))
    name[ch.named], cat[ch.named], row[:] = ch.name_iid, ch.cat_iid, -1
    row[ch.named] = ch.named_row
    value = np.zeros(len(ch.ts))
    value[ch.counter] = ch.counter_value
    cols = [a.tolist() for a in (ch.ts, ch.type, ch.track, name, cat, value, row)]
    args_row = trace.col(S.ARGS_ROW).tolist()
    flows: dict[int, list[tuple[int, bool]]] = {}
    for p, uid, term in zip(
        ev.flow_packet.tolist(), ev.flow_uid.tolist(), ev.flow_terminating.tolist(), strict=True
    ):
        flows.setdefault(p, []).append((uid, term))
    start = time.perf_counter()
    with open(path, "wb") as out:
        for data, _ in header:
            out.write(data)
        builder = StreamingTraceProtoBuilder(out)
        for i, (ts, kind, track, name, cat, value, row) in enumerate(zip(*cols, strict=True)):
            packet = builder.create_packet()
            packet.timestamp = ts
            packet.trusted_packet_sequence_id = P.SEQUENCE_ID
            packet.sequence_flags = P.NEEDS_STATE
            te = packet.track_event
            te.type = kind
            te.track_uuid = track
            if name:
                te.name_iid = name
                te.category_iids.append(cat)
            if kind == P.COUNTER:
                te.double_counter_value = value
            for uid, term in flows.get(i, ()):
                (te.terminating_flow_ids if term else te.flow_ids).append(uid)
            if row >= 0 and args_row[row] >= 0:
                ann = te.debug_annotations.add()
                ann.name_iid = 1  # "bytes", the one arg name of this trace
                ann.int_value = msgspec.json.decode(trace.raw_args[args_row[row]])["bytes"]
            builder.write_packet(packet)
    return time.perf_counter() - start, len(cols[0])


def track_events(path: Path) -> list:
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace as PbTrace

    decoded = PbTrace()
    decoded.ParseFromString(path.read_bytes())
    return [p for p in decoded.packet if p.HasField("track_event")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=Path("runs/bench/perfetto"))
    parser.add_argument(
        "--shared",
        type=Path,
        default=Path(__file__).resolve().parents[2] / "shared" / "traces",
        help="real traces to compare sizes on (skipped when absent)",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    trace = make_trace(args.events)
    n_slices = int(((trace.col(S.PH) == Phase.COMPLETE) & (trace.col(S.DUR_NS) > 0)).sum())
    ours_path, base_path = args.out / "ours.pftrace", args.out / "baseline.pftrace"
    load_before = os.getloadavg()[0]
    runs = [_timed(lambda: P.write_perfetto_trace(trace, ours_path)) for _ in range(2)]
    (ours_s, ours_cpu, result), (warm_s, warm_cpu, _) = runs
    base_s, packets = baseline(trace, base_path)
    chrome_path = write_chrome_trace(trace, args.out / "same.json")
    same = track_events(ours_path) == track_events(base_path)
    ours_rate, base_rate = n_slices / ours_s, n_slices / base_s
    size_ratio = os.path.getsize(ours_path) / os.path.getsize(chrome_path)
    print(
        f"trace: {len(trace)} events, {n_slices} slices, {packets} TrackEvent packets, "
        f"{result.flows} flows, {result.overlap_tracks} overlap tracks, "
        f"{result.counter_points} counter points; load average {load_before:.1f} "
        f"on {os.cpu_count()} CPUs (other work slows wall times)"
    )
    print(
        f"ours, end to end (plan + counters + encode + write), first call: {ours_s:.2f} s wall "
        f"= {ours_rate / 1e6:.2f}M slices/s ({packets / ours_s / 1e6:.2f}M packets/s); "
        f"CPU {ours_cpu:.2f} s = {n_slices / ours_cpu / 1e6:.2f}M slices per CPU-second"
    )
    print(
        f"ours, second call: {warm_s:.2f} s wall = {n_slices / warm_s / 1e6:.2f}M slices/s; "
        f"CPU {warm_cpu:.2f} s"
    )
    print(
        f"perfetto builder, one TracePacket per packet (build + write only): {base_s:.2f} s "
        f"= {base_rate / 1e6:.2f}M slices/s ({packets / base_s / 1e6:.2f}M packets/s)"
    )
    print(
        f"speed-up (first call vs builder, wall): {ours_rate / base_rate:.1f}x; TrackEvent "
        f"packets identical when decoded with perfetto's protos: {same}"
    )
    print(
        f"size: .pftrace {os.path.getsize(ours_path) / 1e6:.1f} MB, Chrome JSON "
        f"{os.path.getsize(chrome_path) / 1e6:.1f} MB, ratio {size_ratio:.3f}"
    )
    shared_ratio = _shared_sizes(args.shared, args.out) if args.shared.is_dir() else None
    speed_ok, size_ok = ours_rate >= 1e6, size_ratio <= 0.40
    print(
        f"targets: >= 1M slices/s {'met' if speed_ok else 'NOT met'}; "
        f".pftrace <= 40% of Chrome JSON {'met' if size_ok else 'NOT met'}"
        + (
            ""
            if shared_ratio is None
            else f" (shared traces: {'met' if shared_ratio <= 0.40 else 'NOT met'})"
        )
        + "; "
        f"same packets as perfetto's builder {'yes' if same else 'NO'}"
    )
    return 0 if same else 1


def _shared_sizes(root: Path, out: Path) -> float:
    """.pftrace / Chrome JSON size per real trace in ../shared/traces, and over all of them."""
    from neuron_profiler.trace import load_trace

    total_p = total_c = 0
    print(f"real traces in {root} (.pftrace / uncompressed Chrome JSON of the same trace):")
    for path in sorted(p for p in root.rglob("*") if p.name.endswith((".json", ".json.gz"))):
        trace = load_trace(path)
        size_p = P.write_perfetto_trace(trace, out / "shared.pftrace").bytes_written
        size_c = write_chrome_trace(trace, out / "shared.json").stat().st_size
        total_p, total_c = total_p + size_p, total_c + size_c
        print(f"  {path.relative_to(root)}: {len(trace)} events, {size_p / size_c:.3f}")
    print(
        f"  all together: {total_p / 1e6:.1f} MB / {total_c / 1e6:.1f} MB = {total_p / total_c:.3f}"
    )
    return total_p / total_c


def _timed(fn):  # noqa: ANN001, ANN202 - (wall s, CPU s, result)
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


if __name__ == "__main__":
    sys.exit(main())
