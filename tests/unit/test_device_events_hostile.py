"""Hostile device-event files: cut-off captures keep every complete event, odd values are kept
without the bad field and counted, and the merge CLI says so in one line each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_profiler.cli.main import main
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.runtime_trace.merge import merge_device_events
from neuron_profiler.runtime_trace.parser import parse_system_traces
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import TraceBuilder

T0 = 1_700_000_000_000_000_000


def _events(n: int, core: int = 0, start: int = 0) -> list[dict]:
    out = []
    for i in range(start, start + n):
        base = {"event_type": "nc_exec_running", "id": i, "nc_idx": core, "tracking_id": i,
                "thread_id": 5}
        out += [{**base, "phase": "start", "timestamp_ns": T0 + 1000 * i,
                 "data": {"exec_id": i}},
                {**base, "phase": "stop", "timestamp_ns": T0 + 1000 * i + 500, "data": {}}]
    return out


def _env(events: list[dict]) -> bytes:
    return json.dumps({"events": events, "data_version": 2}).encode()


def _complete_events_before(data: bytes, cut: int) -> int:
    """Independent count: the event objects whose closing brace lies before the cut."""
    count, depth, in_string, escaped = 0, 0, False, False
    for ch in data[:cut].decode():
        if in_string:
            escaped, in_string = (not escaped and ch == "\\"), in_string and (escaped or ch != '"')
            continue
        if ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            count += depth == 1  # an event closes at depth 2 -> 1 (inside the envelope)
    return count


@pytest.mark.parametrize("form", ["one", "concatenated", "list"])
@pytest.mark.parametrize("fraction", [0.3, 0.55, 0.8, 0.999])
def test_cut_off_capture_keeps_every_complete_event(form: str, fraction: float) -> None:
    first, second = _events(20), _events(20, core=1, start=100)
    if form == "one":
        data = _env(first + second)
    elif form == "concatenated":
        data = _env(first) + b"\n" + _env(second)
    else:
        data = b"[" + _env(first) + b"," + _env(second) + b"]"
    cut = int(len(data) * fraction)
    acts = parse_system_traces([data[:cut]])
    pieces = data[:cut].split(b"\n") if form == "concatenated" else [data[:cut]]
    want = sum(_complete_events_before(p, len(p)) if form != "list" else
               _complete_events_before(p[1:], len(p) - 1) for p in pieces)
    halves = len(acts) * 2 - acts.unpaired  # each paired row holds two events
    assert halves == want and acts.truncated == 1


def test_odd_values_are_kept_without_the_bad_field_and_counted() -> None:
    events = _events(3)
    events[0]["nc_idx"] = events[1]["nc_idx"] = -1  # a pair on an impossible core
    events[2]["data"]["neuron_profiler"] = {"flops": 1.5, "bytes": 123456789, "op": "aten::mm"}
    events[4]["data"]["neuron_profiler"] = {"flops": -3, "bytes": 2**70, "op": "aten::mm"}
    data = _env(events).replace(b"123456789", b"1e400")  # out of float range: JSON, no number
    b = TraceBuilder("host.json")
    b.add(name="aten::x", ts_ns=T0, dur_ns=10, kind=S.EventKind.CPU_OP, cat="cpu_op", pid=42,
          tid=5, args={"External id": 1})
    result = merge_device_events(b.build(), [data])
    assert result.activities == 3  # nothing dropped
    assert result.malformed == 2 + 4  # the two halves' nc_idx, four numbers
    tr = result.trace
    kernels = [i for i in range(len(tr)) if tr.category(i) == V.CAT_KERNEL]
    assert sorted(int(tr.columns[S.PID][i]) for i in kernels) == [0, 0, 0]
    for i in kernels:
        assert V.ARG_FLOPS not in tr.args(i) and V.ARG_BYTES not in tr.args(i)


def test_merge_cli_warns_about_a_cut_off_capture(tmp_path: Path, capsys) -> None:
    b = TraceBuilder("host.json")
    b.add(name="aten::x", ts_ns=T0, dur_ns=10, kind=S.EventKind.CPU_OP, cat="cpu_op", pid=42,
          tid=5, args={"External id": 1})
    host = tmp_path / "host.json"
    write_chrome_trace(b.build(), host)
    data = _env(_events(10))
    dev = tmp_path / "dev.json"
    dev.write_bytes(data[: len(data) // 2])
    assert main(["merge", str(host), str(dev), "-o", str(tmp_path / "out.json")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"neuron-prof: warning: {dev}: cut off; kept every complete event before the "
                   "cut (1 envelope(s))"]
