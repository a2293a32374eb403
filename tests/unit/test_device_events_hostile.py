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
        base = {
            "event_type": "nc_exec_running",
            "id": i,
            "nc_idx": core,
            "tracking_id": i,
            "thread_id": 5,
        }
        out += [
            {**base, "phase": "start", "timestamp_ns": T0 + 1000 * i, "data": {"exec_id": i}},
            {**base, "phase": "stop", "timestamp_ns": T0 + 1000 * i + 500, "data": {}},
        ]
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
    want = sum(
        _complete_events_before(p, len(p))
        if form != "list"
        else _complete_events_before(p[1:], len(p) - 1)
        for p in pieces
    )
    halves = len(acts) * 2 - acts.unpaired  # each paired row holds two events
    assert halves == want and acts.truncated == 1


def test_odd_values_are_kept_without_the_bad_field_and_counted() -> None:
    events = _events(3)
    events[0]["nc_idx"] = events[1]["nc_idx"] = -1  # a pair on an impossible core
    events[2]["data"]["neuron_profiler"] = {"flops": 1.5, "bytes": 123456789, "op": "aten::mm"}
    events[4]["data"]["neuron_profiler"] = {"flops": -3, "bytes": 2**70, "op": "aten::mm"}
    data = _env(events).replace(b"123456789", b"1e400")  # out of float range: JSON, no number
    b = TraceBuilder("host.json")
    b.add(
        name="aten::x",
        ts_ns=T0,
        dur_ns=10,
        kind=S.EventKind.CPU_OP,
        cat="cpu_op",
        pid=42,
        tid=5,
        args={"External id": 1},
    )
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
    b.add(
        name="aten::x",
        ts_ns=T0,
        dur_ns=10,
        kind=S.EventKind.CPU_OP,
        cat="cpu_op",
        pid=42,
        tid=5,
        args={"External id": 1},
    )
    host = tmp_path / "host.json"
    write_chrome_trace(b.build(), host)
    data = _env(_events(10))
    dev = tmp_path / "dev.json"
    dev.write_bytes(data[: len(data) // 2])
    assert main(["merge", str(host), str(dev), "-o", str(tmp_path / "out.json")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"neuron-prof: warning: {dev}: cut off; kept every complete event before the "
        "cut (1 envelope(s))"
    ]


def _doc(n: int = 200) -> bytes:
    return _env(_events(n))


def test_gzip_damage_keeps_everything_before_it(tmp_path: Path) -> None:
    """Bad CRC or length, trailing bytes, a second member, a cut: every byte before the damage
    is kept (the whole document for a bad trailer), with one warning naming the file."""
    import gzip
    import warnings

    from neuron_profiler.runtime_trace.merge import read_device_events

    data = _doc()
    g = gzip.compress(data)
    cases = {
        "crc.json.gz": (g[:-8] + bytes([g[-8] ^ 1]) + g[-7:], data, "incorrect data check"),
        "len.json.gz": (g[:-1] + bytes([g[-1] ^ 1]), data, "corrupt gzip"),
        "tail.json.gz": (g + b"junk", data, "4 trailing bytes"),
        "two.json.gz": (g + gzip.compress(b" "), data + b" ", None),
    }
    for name, (raw, want, problem) in cases.items():
        path = tmp_path / name
        path.write_bytes(raw)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert read_device_events(path) == want, name
        messages = [str(w.message) for w in caught]
        assert (
            (messages == [])
            if problem is None
            else (len(messages) == 1 and str(path) in messages[0] and problem in messages[0])
        ), messages
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(g[: len(g) // 2])
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        got = read_device_events(cut)
    assert data.startswith(got) and len(got) > 0
    acts = parse_system_traces([got])
    assert acts.truncated == 1 and len(acts) > 0


def test_lone_surrogates_and_deep_nesting_keep_the_event() -> None:
    events = _events(3)
    events[0]["data"]["note"] = "SURROGATE"
    events[2]["data"]["deep"] = "DEEP"
    raw = (
        _env(events)
        .replace(b'"SURROGATE"', b'"\\ud800"')
        .replace(b'"DEEP"', b"[" * 1500 + b"]" * 1500)
    )
    acts = parse_system_traces([raw])
    assert len(acts) == 3 and acts.malformed == 2 and acts.truncated == 0
    datas = [json.loads(bytes(d)) for d in acts.data]
    assert "\ufffd" in json.dumps(datas, ensure_ascii=False)
    assert any(d.get("neuron_profiler", {}).get("too_deep") for d in datas)
