"""System-trace parse: runtime_trace.parser vs a straightforward json.loads + dict-loop parser.

    python bench/bench_parse.py                     # 1M records (the issue's size)
    python bench/bench_parse.py --records 200000    # quicker
    python bench/bench_parse.py --shape runtime     # only the real runtime's record shape

The payload is what the emulated runtime's fetch returns (its own recorder and encoder): per op a
host runtime call (nrt_model_submit start/stop) and its device execution (nc_exec_running
start/stop with device-clock stamps and our extension), 4 records per op, plus the sync points.
Both parsers produce the same paired activities (checked) including each row's data as JSON
bytes; the figure is paired activities per second, target >= 0.5M/s.
"""

from __future__ import annotations

import argparse
import json
import time
from operator import attrgetter

import numpy as np

from neuron_profiler.emulator.runtime import EmulatedRuntime
from neuron_profiler.runtime_trace import format as F
from neuron_profiler.runtime_trace import parser
from neuron_profiler.runtime_trace.parser import parse_system_trace

T0 = 1_800_000_000_000_000_000


def make_payload(records: int, shape: str = "emulator") -> bytes:
    """``shape="runtime"``: the same events as the real runtime writes them (the documented data
    keys only, no emulator extension: smaller records, no correlation ids)."""
    rt = EmulatedRuntime(cores=2)
    rt.sys_trace_start(max_events_per_nc=records)
    X = F.EXT_KEY
    ext = shape == "emulator"
    for k in range(records // 4):
        core, t = k % 2, T0 + k * 1_000
        submit = {"exec_id": k, "model_id": 1}
        if ext:
            submit[X] = {F.X_OP: "aten::mm", F.X_CORRELATION_ID: k + 1}
        rt.record_span(core, F.NRT_MODEL_SUBMIT, 4242, t, t + 400, submit, {"exec_id": k})
        d0, d1 = t + 600, t + 600 + 300 + k % 97
        running = {
            "device_core_idx": core,
            "exec_id": k,
            "model_id": 1,
            "nc_timestamp_ns": rt.nc_timestamp_ns(d0),
        }
        if ext:
            running[X] = {
                F.X_OP: "aten::mm",
                F.X_FLOPS: 2 * 128**3,
                F.X_BYTES: 98_304,
                F.X_QUEUE: F.QUEUE_COMPUTE,
                F.X_DTYPE: "bfloat16",
                F.X_CORRELATION_ID: k + 1,
                F.X_LAUNCH_NS: t,
                F.X_MODELLED: True,
            }
        rt.record_span(
            core,
            F.NC_EXEC_RUNNING,
            4242,
            d0,
            d1,
            running,
            {"device_core_idx": core, "exec_id": k, "nc_timestamp_ns": rt.nc_timestamp_ns(d1)},
        )
    payload = rt.sys_trace_fetch()
    rt.sys_trace_stop()
    return payload


def reference_parse(payload: bytes) -> dict[str, np.ndarray]:
    """The obvious implementation: json.loads, sort, one Python loop, lists -> numpy."""
    events = sorted(json.loads(payload)["events"], key=lambda e: e["timestamp_ns"])
    sync: dict[int, tuple[int, int]] = {}
    open_: dict[tuple[str, int], tuple[dict, int]] = {}
    rows: list[tuple] = []

    def host_ns(ev: dict) -> int:
        nc, off = ev["data"].get("nc_timestamp_ns"), sync.get(ev["nc_idx"])
        return ev["timestamp_ns"] if nc is None or off is None else off[1] + nc - off[0]

    def add(ev: dict, start: int, end: int) -> None:
        ext = ev["data"].get(F.EXT_KEY) or {}
        rows.append(
            (
                start,
                max(start, end),
                ev["nc_idx"],
                ev["thread_id"],
                ext.get(F.X_CORRELATION_ID, 0),
                ev["data"].get("exec_id", -1),
                ext.get(F.X_OP) or ev["event_type"],
                json.dumps(ev["data"]).encode(),
            )
        )

    for ev in events:
        if ev["event_type"] == F.TIMESTAMP_SYNC_POINT:
            sync[ev["nc_idx"]] = (ev["data"]["nc_timestamp_ns"], ev["data"]["cpu_timestamp_ns"])
            continue
        ts, key = host_ns(ev), (ev["event_type"], ev.get("tracking_id"))
        if ev["phase"] == F.START:
            open_[key] = (ev, ts)
        elif ev["phase"] == F.STOP and key in open_:
            start, start_ns = open_.pop(key)
            add(start, start_ns, ts)
        else:
            add(ev, ts, ts)
    for start, start_ns in open_.values():
        add(start, start_ns, start_ns)
    cols = list(zip(*rows, strict=True))
    return {
        "start_ns": np.array(cols[0], dtype=np.int64),
        "end_ns": np.array(cols[1], dtype=np.int64),
        "correlation_id": np.array(cols[4], dtype=np.int64),
        "names": cols[6],
        "data": cols[7],
    }


def parse_and_read_data(payload: bytes):
    """What the collector and merge do: parse, then read every row's data bytes."""
    acts = parse_system_trace(payload)
    acts.data[0]
    return acts


_STREAM_FIELDS = (
    "event_type",
    "timestamp_ns",
    "tracking_id",
    "nc_idx",
    "data.exec_id",
    "data.nc_timestamp_ns",
    "phase.code",
)


def floor_decode_and_read(payload: bytes) -> None:
    """A lower bound for any msgspec-based parser: the typed decode plus reading, once, the seven
    per-event fields that pairing and clock mapping need (no pairing, no row columns)."""
    with parser._gc_paused():  # as the parser runs
        events = parser._decode_envelope(payload).events
        for name in _STREAM_FIELDS:
            list(map(attrgetter(name), events))


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3, help="best of N for each parser")
    ap.add_argument(
        "--shape",
        choices=("emulator", "runtime", "both"),
        default="both",
        help="records as the emulator writes them (with its extension) or as the "
        "real runtime does (documented keys only)",
    )
    args = ap.parse_args()
    for shape in ("emulator", "runtime") if args.shape == "both" else (args.shape,):
        run(args.records, args.repeat, shape)


def run(records: int, repeat: int, shape: str) -> None:
    payload = make_payload(records, shape)
    n_events = payload.count(b'"event_type"')
    print(
        f"\n{shape}-shaped payload: {n_events} records, {len(payload) / 1e6:.1f} MB "
        f"({len(payload) / n_events:.0f} bytes/record)"
    )
    ref_t = new_t = data_t = floor_t = float("inf")
    for _ in range(repeat):  # interleaved, best of N: the machine is shared
        ref, t = _timed(reference_parse, payload)
        ref_t = min(ref_t, t)
        acts, t = _timed(parse_system_trace, payload)
        new_t = min(new_t, t)
        _, t = _timed(parse_and_read_data, payload)
        data_t = min(data_t, t)
        _, t = _timed(floor_decode_and_read, payload)
        floor_t = min(floor_t, t)
    order = np.lexsort((ref["end_ns"], ref["start_ns"]))
    same = (
        len(acts) == len(ref["start_ns"])
        and (np.sort(acts.start_ns) == ref["start_ns"][order]).all()
        and (acts.end_ns[np.lexsort((acts.end_ns, acts.start_ns))] == ref["end_ns"][order]).all()
        and int(acts.correlation_id.sum()) == int(ref["correlation_id"].sum())
    )
    print(
        f"same activities from both: {same} ({len(acts)} activities, "
        f"{acts.unpaired} unpaired, {acts.malformed} malformed)"
    )
    print(
        f"reference json.loads + dict loop : {ref_t:7.3f} s  "
        f"{len(acts) / ref_t / 1e6:6.3f} M activities/s"
    )
    print(
        f"runtime_trace.parser              : {new_t:7.3f} s  "
        f"{len(acts) / new_t / 1e6:6.3f} M activities/s  (target >= 0.5)"
    )
    print(
        f"parser, then every row's data     : {data_t:7.3f} s  "
        f"{len(acts) / data_t / 1e6:6.3f} M activities/s  (what collector and merge see)"
    )
    print(
        f"speed-up vs reference             : {ref_t / new_t:6.2f}x (with data: "
        f"{ref_t / data_t:.2f}x)"
    )
    print(
        f"(floor: msgspec typed decode + reading the 7 pairing fields once: {floor_t:.3f} s = "
        f"{len(acts) / floor_t / 1e6:.3f} M activities/s at most for this design)"
    )


if __name__ == "__main__":
    main()
