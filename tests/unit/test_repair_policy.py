"""The one policy of bad JSON input (``trace/repair.py``): the trace loader and the runtime
system-trace parser repair, keep, count and refuse the same things, with one-line errors."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from neuron_profiler.cli.main import main
from neuron_profiler.errors import TraceLoadError
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.runtime_trace import format as F
from neuron_profiler.runtime_trace.parser import parse_system_traces
from neuron_profiler.trace import load_trace
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import TraceBuilder
from neuron_profiler.trace.repair import NOTHING_COMPLETE, Unusable

T0 = 1_700_000_000_000_000_000
BAD = {  # what goes where the placeholder "BAD" is, and what it is
    "nan": b"NaN",
    "surrogate": b'"\\ud800"',
    "latin1": b'"caf\xe9"',
    "deep": b"[" * 1500 + b"]" * 1500,
    "word": b"undefined",
}


def _device(n: int = 3, first: dict | None = None, ext: dict | None = None, start: int = 0) -> dict:
    events = []
    for i in range(start, start + n):
        base = {"event_type": F.NC_EXEC_RUNNING, "tracking_id": i, "nc_idx": 0, "thread_id": 5}
        events += [
            {**base, "phase": "start", "timestamp_ns": T0 + 1000 * i, "data": {"exec_id": i}},
            {**base, "phase": "stop", "timestamp_ns": T0 + 1000 * i + 500, "data": {}},
        ]
    if first:
        events[0]["data"].update(first)
    envelope = {"events": events, "data_version": 2}
    if ext is not None:
        envelope[F.EXT_KEY] = ext
    return envelope


def _trace(first_args: dict) -> bytes:
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i}",
            "pid": 1,
            "tid": 2,
            "ts": i * 10,
            "dur": 5,
            "args": {"n": i},
        }
        for i in range(3)
    ]
    events[0]["args"].update(first_args)
    return json.dumps({"traceEvents": events, "baseTimeNanoseconds": 10**18}).encode()


@pytest.mark.parametrize("what", sorted(BAD))
def test_both_readers_keep_and_count_the_same_bad_element(what: str, tmp_path: Path) -> None:
    device = json.dumps(_device(first={"v": "BAD"})).encode().replace(b'"BAD"', BAD[what])
    acts = parse_system_traces([device])
    assert len(acts) == 3 and acts.malformed == 1 and acts.truncated == 0
    path = tmp_path / "t.json"
    path.write_bytes(_trace({"v": "BAD"}).replace(b'"BAD"', BAD[what]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = load_trace(path)
    r = trace.load_report
    assert len(trace) == 3 and r.replaced_text + r.replaced_values + r.replaced_nesting == 1
    row = json.loads(bytes(acts.data[0]))  # the value rule of each reader (trace/repair.py)
    if what in ("nan", "word"):
        assert row["v"] is None and trace.args(0)["v"] == BAD[what].decode()
    if what == "deep":
        assert row == {F.EXT_KEY: {F.X_TOO_DEEP: True}}


def test_a_trailing_comma_is_dropped_and_an_integer_beyond_64_bits_left_out() -> None:
    text = json.dumps(_device(first={"note": "x"})).encode()
    acts = parse_system_traces([text.replace(b'"note": "x"}', b'"note": "x",}', 1)])
    assert len(acts) == 3 and acts.malformed == 0
    big = (
        json.dumps(_device()).encode().replace(b'"tracking_id": 2', b'"tracking_id": %d' % 2**70, 1)
    )
    acts = parse_system_traces([big])
    assert acts.malformed == 1 and len(acts) == 4  # kept without its tracking id: a point
    assert acts.unpaired == 1  # (its stop)


def test_a_bad_envelope_does_not_cost_the_next_one_or_its_drop_counts() -> None:
    first = json.dumps(_device(first={"v": "BAD"}, ext={F.X_DROPPED_EVENTS: {"0": 3}}))
    second = json.dumps(_device(ext={F.X_DROPPED_EVENTS: {"0": 4}}, start=10))
    payload = (first + "\n" + second).encode().replace(b'"BAD"', b"NaN")
    acts = parse_system_traces([payload])
    assert len(acts) == 6 and acts.malformed == 1 and acts.truncated == 0
    assert acts.dropped == {0: 7}


def test_text_after_the_last_envelope_is_damage_after_complete_events() -> None:
    whole = json.dumps(_device()).encode()
    acts = parse_system_traces([whole + b"\n" + whole[:8] + b"junk"])
    assert len(acts) == 3 and acts.truncated == 1 and acts.malformed == 0


def test_a_list_cut_between_envelopes_keeps_the_complete_ones() -> None:
    whole = json.dumps(_device()).encode()
    payload = b"[" + whole + b", " + whole[:10]  # cut before the second one's events
    acts = parse_system_traces([payload.replace(b'"exec_id": 0}', b'"exec_id": 0, "v": NaN}')])
    assert len(acts) == 3 and acts.truncated == 1 and acts.malformed == 1


@pytest.mark.parametrize("cut", [14, 40, 100])
def test_nothing_complete_is_one_error_in_both_readers(
    cut: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    device = json.dumps(_device()).encode()[:cut]
    for payload in (device, b"[" + device):
        with pytest.raises(Unusable, match=NOTHING_COMPLETE):
            parse_system_traces([payload])
    dev, host, trace = tmp_path / "dev.json", tmp_path / "host.json", tmp_path / "cut.json"
    dev.write_bytes(device)
    b = TraceBuilder("host.json")
    b.add(name="op", ts_ns=T0, dur_ns=10, kind=S.EventKind.CPU_OP, cat="cpu_op", pid=1, tid=5)
    write_chrome_trace(b.build(), host)
    trace.write_bytes(_trace({})[:30])
    with pytest.raises(TraceLoadError, match=NOTHING_COMPLETE):
        load_trace(trace)
    for argv, name in ((["merge", str(host), str(dev)], dev), (["export", str(trace)], trace)):
        assert main([*argv, "-o", str(tmp_path / "out.json")]) == 2
        err = capsys.readouterr().err.splitlines()
        assert err == [f"neuron-prof: error: {name}: {NOTHING_COMPLETE}"]
