"""The streamed, piece-wise loader against the stdlib ``json`` module on awkward inputs.

Tiny blocks force many pieces, so every cut rule is exercised: ``}`` and ``]`` inside strings,
nested args objects, pretty-printed and compact JSON, events larger than a block, mistyped events
in any piece, cut-off plain and gzip files at many offsets, multi-member gzip."""

from __future__ import annotations

import gc
import gzip
import json
import random
import warnings
from decimal import Decimal
from pathlib import Path

import msgspec
import numpy as np
import pytest

from neuron_profiler.errors import TraceLoadError
from neuron_profiler.trace import _columns, _stream, load_trace
from neuron_profiler.trace import schema as S
from neuron_profiler.trace._numtext import INVALID, MISSING, OK, us_texts_to_ns
from neuron_profiler.trace._rawargs import RawArgsBuilder

NASTY_NAMES = ['a},{"b"', "x]}", 'quote " and \\ backslash', "ünïcødé ✓", "}", "]"]


def _events(n: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        event = {
            "ph": "X",
            "cat": rng.choice(["cpu_op", "kernel", "cuda_runtime"]),
            "name": rng.choice(NASTY_NAMES) + str(i % 7),
            "pid": rng.choice([1, 2]),
            "tid": rng.choice([5, "stream 7"]),
            "ts": round(rng.uniform(0, 5e12), 3),
            "dur": round(rng.uniform(0, 100), 3),
        }
        if i % 3:
            event["args"] = {
                "External id": i,
                "nested": {"k": [{"v": i}, "},"]},
                "pad": "p" * rng.randrange(0, 300),
            }
        if i % 50 == 7:
            event["args"] = {"huge": "z" * 5000, "correlation": i}
        out.append(event)
    return out


def _write(
    path: Path, events: list[dict], *, indent: int | None, gz: bool = False, tail_keys: bool = True
) -> bytes:
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "dev ]}"}],
        "traceEvents": events,
    }
    if tail_keys:
        doc.update({"INFO": ["cpp:976] Enabling [tracing]"], "baseTimeNanoseconds": 10**18})
    text = json.dumps(doc, indent=indent, separators=None if indent else (",", ":")).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return text


def _expected_ts(events: list[dict], base: int) -> list[int]:
    return sorted(int(Decimal(repr(e["ts"])) * 1000) + base for e in events)


@pytest.fixture
def tiny_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_stream, "BLOCK_BYTES", 700)
    monkeypatch.setattr(_stream, "_GZIP_IN", 97)


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("gz", [False, True])
def test_many_pieces_match_stdlib(
    tmp_path: Path, tiny_blocks: None, indent: int | None, gz: bool
) -> None:
    events = _events(400)
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    _write(path, events, indent=indent, gz=gz)
    trace = load_trace(path)
    assert len(trace) == len(events) and trace.skipped_events == 0 and not trace.truncated
    assert trace.metadata["INFO"] == ["cpp:976] Enabling [tracing]"]
    assert trace.metadata["deviceProperties"] == [{"id": 0, "name": "dev ]}"}]
    assert trace.col(S.TS_NS).tolist() == _expected_ts(events, 10**18)
    got = sorted(
        (trace.name(i), int(trace.col(S.EXTERNAL_ID)[i]), json.dumps(trace.args(i)))
        for i in range(len(trace))
    )
    want = sorted(
        (e["name"], e.get("args", {}).get("External id", -1), json.dumps(e.get("args", {})))
        for e in events
    )
    assert got == want
    assert gc.isenabled()


@pytest.mark.parametrize("gz", [False, True])
def test_columns_grow_past_the_rows_first_pieces_predict(
    tmp_path: Path, tiny_blocks: None, gz: bool
) -> None:
    """Large events first, then many small ones: a plain file's room for rows (predicted from
    the first pieces' bytes per event) and a gzip file's (doubled) run out and grow; every row
    keeps its values, in file order."""
    events = [
        {"ph": "X", "name": f"big{i}", "ts": i, "dur": 2, "pid": 1, "tid": 2,
         "args": {"External id": i, "pad": "p" * 3000}}
        for i in range(40)
    ] + [
        {"ph": "X", "name": f"s{i}", "ts": 40 + i, "dur": 1, "pid": 3, "tid": i % 5}
        for i in range(1500)
    ]  # fmt: skip
    path = tmp_path / ("g.json.gz" if gz else "g.json")
    _write(path, events, indent=None, gz=gz, tail_keys=False)
    trace = load_trace(path)
    assert len(trace) == len(events) and trace.skipped_events == 0
    got = list(
        zip(
            [trace.name(i) for i in range(len(trace))],
            *(trace.col(c).tolist() for c in (S.TS_NS, S.DUR_NS, S.PID, S.TID, S.EXTERNAL_ID)),
            strict=True,
        )
    )
    want = [
        (e["name"], e["ts"] * 1000, e["dur"] * 1000, e["pid"], e["tid"],
         e.get("args", {}).get("External id", -1))
        for e in events
    ]  # fmt: skip
    assert got == want


def test_room_beyond_the_address_space_falls_back_to_what_the_rows_need(
    tmp_path: Path, tiny_blocks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prediction of rows no memory can hold (a file of small events first, huge ones
    later, say) makes room for the rows at hand instead of failing the load."""
    monkeypatch.setattr(_columns.ColumnSink, "_capacity_for", lambda self, rows: 1 << 44)
    events = _events(200)
    path = tmp_path / "room.json"
    _write(path, events, indent=None)
    trace = load_trace(path)
    assert trace.col(S.TS_NS).tolist() == _expected_ts(events, 10**18)


def test_mistyped_events_in_many_pieces_are_counted(tmp_path: Path, tiny_blocks: None) -> None:
    events = _events(300)
    bad = set(range(3, 300, 17))
    for i in bad:
        events[i]["ts" if i % 2 else "pid"] = {"oops": [i]}
    path = tmp_path / "typed.json"
    _write(path, events, indent=None)
    trace = load_trace(path)
    assert trace.skipped_events == len(bad)
    good = [e for i, e in enumerate(events) if i not in bad]
    assert trace.col(S.TS_NS).tolist() == _expected_ts(good, 10**18)


def test_mistyped_in_one_big_piece(tmp_path: Path) -> None:
    events = _events(2000)
    bad = {0, 1, 2, 999, 1999} | set(range(100, 140))  # more errors than one split pass takes
    for i in bad:
        events[i]["name"] = 12345
    path = tmp_path / "typed.json"
    _write(path, events, indent=None)
    trace = load_trace(path)
    assert trace.skipped_events == len(bad) and len(trace) == len(events) - len(bad)


def _inflatable(data: bytes) -> int:
    """How many bytes of JSON a reader can get out of a cut gzip stream."""
    inflater = gzip.zlib.decompressobj(wbits=31)
    return len(inflater.decompress(data) + inflater.flush())


@pytest.mark.parametrize("gz", [False, True])
def test_cut_at_many_offsets_keeps_exactly_the_complete_events(
    tmp_path: Path, tiny_blocks: None, gz: bool
) -> None:
    events = _events(120)
    text = json.dumps(
        {"baseTimeNanoseconds": 5, "traceEvents": events}, separators=(",", ":")
    ).encode()
    start = text.index(b"[", text.index(b'"traceEvents"')) + 1
    ends, pos = [], start  # offset just after each event's closing brace
    for event in events:
        pos += len(json.dumps(event, separators=(",", ":")).encode())
        ends.append(pos)
        pos += 1
    rng = random.Random(7)
    whole = gzip.compress(text)
    stop = len(whole) - 8 if gz else len(text) - 30  # before the gzip trailer / the last event
    for offset in sorted(rng.sample(range(20, stop), 25)):
        path = tmp_path / f"cut{offset}.json{'.gz' if gz else ''}"
        path.write_bytes(whole[:offset] if gz else text[:offset])
        cut = _inflatable(whole[:offset]) if gz else offset
        complete = sum(1 for e in ends if e <= cut)
        if complete == 0:
            with pytest.raises(TraceLoadError, match="truncated, no complete event"):
                load_trace(path)
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trace = load_trace(path)
        assert trace.truncated and len(trace) == complete, offset
        assert [str(w.message).count("\n") for w in caught] == [0]
        assert f"kept {complete} complete events" in str(caught[0].message)
        assert trace.col(S.TS_NS).tolist() == _expected_ts(events[:complete], 5)


def test_multi_member_gzip(tmp_path: Path, tiny_blocks: None) -> None:
    events = _events(200)
    text = json.dumps({"traceEvents": events}).encode()
    path = tmp_path / "multi.json.gz"
    path.write_bytes(b"".join(gzip.compress(text[i : i + 3000]) for i in range(0, len(text), 3000)))
    trace = load_trace(path)
    assert len(trace) == 200 and not trace.truncated


def test_corrupt_gzip_keeps_the_events_before_the_damage(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(json.dumps({"traceEvents": _events(500)}).encode()))
    data[len(data) // 2 : len(data) // 2 + 64] = b"\x00" * 64
    path = tmp_path / "bad.json.gz"
    path.write_bytes(bytes(data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = load_trace(path)
    assert trace.truncated and trace.load_report.damage.startswith("damaged gzip data")
    assert 0 < len(trace) < 500
    message = str(caught[-1].message)
    assert "damaged gzip data" in message and "\n" not in message


def test_gzip_damaged_before_any_event_is_one_line_error(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(json.dumps({"traceEvents": _events(500)}).encode()))
    data[10:74] = b"\x00" * 64  # the start of the deflate stream
    path = tmp_path / "bad.json.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(TraceLoadError) as info:
        load_trace(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert "damaged gzip data" in str(info.value)


def test_garbage_mid_file_keeps_events_before_it(tmp_path: Path, tiny_blocks: None) -> None:
    events = _events(100)
    text = json.dumps({"traceEvents": events}, separators=(",", ":")).encode()
    first_50 = len(json.dumps({"traceEvents": events[:50]}, separators=(",", ":"))) - 2
    path = tmp_path / "garbage.json"
    path.write_bytes(text[:first_50] + b",@@garbage@@" + text[first_50:])
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        trace = load_trace(path)
    assert trace.truncated and len(trace) == 50


def test_empty_events_and_no_trailing_keys(tmp_path: Path, tiny_blocks: None) -> None:
    path = tmp_path / "empty.json"
    path.write_text('{"traceEvents": [], "baseTimeNanoseconds": 7}')
    trace = load_trace(path)
    assert len(trace) == 0 and trace.metadata["baseTimeNanoseconds"] == 7
    _write(path, _events(30), indent=None, tail_keys=False)
    assert len(load_trace(path)) == 30


def test_us_text_conversion_is_exact() -> None:
    rng = random.Random(3)
    values = [
        f"{rng.choice('-+'[:1] + ' ')}{rng.randrange(10 ** rng.randrange(1, 16))}"
        f".{rng.randrange(1000):03d}".strip()
        for _ in range(5000)
    ]
    texts = [v.encode() if i % 2 else f'"{v}"'.encode() for i, v in enumerate(values)]
    ns, status = us_texts_to_ns(texts)
    assert (status == OK).all()
    assert ns.tolist() == [int(Decimal(v) * 1000) for v in values]
    odd = [b"", b"null", b"1.5e3", b"true", b'"abc"', b"{}", b"12.3456", b"-0.0005", b"."]
    ns, status = us_texts_to_ns(odd)
    assert status.tolist() == [MISSING, MISSING, OK, INVALID, INVALID, INVALID, OK, OK, INVALID]
    assert ns[2] == 1_500_000 and ns[6] == 12346 and ns[7] == -1


def test_raw_args_sequence() -> None:
    builder = RawArgsBuilder()
    builder.add(b'{"a":1},{"b":[2]}', np.array([0, 8]), np.array([7, 9]))
    builder.add(b'{"c":3}', np.array([0]), np.array([7]))
    args = builder.build()
    assert len(args) == 3 and list(args) == [b'{"a":1}', b'{"b":[2]}', b'{"c":3}']
    assert args[-1] == b'{"c":3}' and args[1:] == [b'{"b":[2]}', b'{"c":3}']
    assert [msgspec.json.decode(a) for a in args] == [{"a": 1}, {"b": [2]}, {"c": 3}]
    with pytest.raises(IndexError):
        args[3]


def test_key_text_inside_a_string_before_the_array(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    events = _events(20)
    path.write_text(
        json.dumps(
            {"traceName": "traceEvents", "note": 'x "traceEvents": [ y', "traceEvents": events}
        )
    )
    trace = load_trace(path)
    assert len(trace) == 20 and trace.metadata["traceName"] == "traceEvents"


def _int_or_minus_one(args: dict, key: str) -> int:
    """Python's int() of the value, -1 when absent, refused, or beyond int64 (HTA's rule)."""
    try:
        value = int(args[key])
    except (KeyError, TypeError, ValueError, OverflowError):
        return -1
    return value if -(2**63) <= value < 2**63 else -1


def test_stream_column_is_int_of_args_stream(tmp_path: Path, tiny_blocks: None) -> None:
    """Odd stream values in many pieces: the column is what int() makes of each; a "stream"
    inside a nested object or a string is not the event's stream."""
    odd = [7, "8", 9.75, True, None, "0x1f", " 12 ", [1], {"s": 2}, -1, 2**70, "1e3", 1e30]
    events = _events(260, seed=3)
    for i, event in enumerate(events):
        if i % 4 == 0:
            event["args"] = {**event.get("args", {}), "stream": odd[i % len(odd)]}
        elif i % 4 == 1:
            event["args"] = {"nested": {"stream": 5}, "note": '"stream": 6'}
    path = tmp_path / "s.json"
    _write(path, events, indent=None)
    trace = load_trace(path)
    assert len(trace) == len(events)
    got = sorted((trace.name(i), int(trace.col(S.STREAM)[i])) for i in range(len(trace)))
    want = sorted((e["name"], _int_or_minus_one(e.get("args", {}), "stream")) for e in events)
    assert got == want
    assert {v for _, v in got} >= {7, 8, 9, 1, 12, -1}


def _id_or_minus_one(value: object) -> tuple[int, bool]:
    """An id as the model keeps it: the integer a number or numeric text names, -1 when absent
    or not an integer; True when it is a number beyond int64 (dropped, counted)."""
    if value is None or isinstance(value, bool):
        return -1, False
    try:
        number = int(value)
    except (TypeError, ValueError):
        return -1, False
    return (number, False) if -(2**63) <= number < 2**63 else (-1, True)


def test_id_columns_read_every_spelling_in_any_piece(tmp_path: Path, tiny_blocks: None) -> None:
    """External id (else 2021 Kineto's "external id") and correlation spelled as integers in
    most pieces and oddly in some: each piece's columns are what a plain reading gives, ids
    beyond int64 dropped and counted."""
    odd = [5, "17", 3.0, None, 2**63, -(2**63) - 1, "0x1f", 2**63 - 1]
    events = _events(300, seed=5)
    for i, event in enumerate(events):
        args = {"correlation": 1000 + i}
        if i % 3 == 0:
            args["external id"] = 50_000 + i  # 2021 Kineto's spelling
        if i % 5 == 1:
            args["External id"] = 60_000 + i
        if i % 37 == 2:
            args["External id"] = odd[i % len(odd)]
        if i % 41 == 3:
            args["correlation"] = odd[(i + 1) % len(odd)]
        event["args"] = args
    path = tmp_path / "ids.json"
    _write(path, events, indent=None)
    trace = load_trace(path)
    assert len(trace) == len(events)
    want, dropped = [], 0
    for event in events:
        args = event["args"]
        given = args.get("External id", -1)
        ext, lost_ext = _id_or_minus_one(args.get("external id") if given == -1 else given)
        corr, lost_corr = _id_or_minus_one(args["correlation"])
        dropped += lost_ext + lost_corr
        want.append((event["name"], ext, corr))
    got = [
        (trace.name(i), ext, corr)
        for i, (ext, corr) in enumerate(
            zip(trace.col(S.EXTERNAL_ID).tolist(), trace.col(S.CORRELATION).tolist(), strict=True)
        )
    ]
    assert sorted(got) == sorted(want)
    assert trace.load_report.dropped_ids == dropped > 0


def _gzip_variants(tmp_path: Path) -> dict[str, Path]:
    """Whole, multi-member with trailing junk, cut off, and damaged gzip files."""
    text = json.dumps({"traceEvents": _events(400)}).encode()
    whole = gzip.compress(text)
    damaged = bytearray(whole)
    damaged[len(damaged) // 2 : len(damaged) // 2 + 64] = b"\x00" * 64
    variants = {
        "whole": whole,
        "members": b"".join(gzip.compress(text[i : i + 2500]) for i in range(0, len(text), 2500))
        + b"junk after the last member",
        "cut": whole[: len(whole) * 2 // 3],
        "damaged": bytes(damaged),
    }
    out = {}
    for name, data in variants.items():
        out[name] = tmp_path / f"{name}.json.gz"
        out[name].write_bytes(data)
    return out


@pytest.mark.parametrize("name", ["whole", "members", "cut", "damaged"])
def test_gzip_read_ahead_equals_reading_in_turn(
    tmp_path: Path, tiny_blocks: None, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Inflating the next block in a worker thread changes nothing: the same events, and the
    same cut, damage and trailing-bytes facts."""
    path = _gzip_variants(tmp_path)[name]

    def load(ahead: bool) -> tuple:
        monkeypatch.setattr(_stream, "READ_AHEAD", ahead)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = load_trace(path)
        return (
            t.col(S.TS_NS).tolist(),
            [t.name(i) for i in range(len(t))],
            t.truncated,
            t.load_report.damage,
            t.load_report.trailing_bytes,
        )

    ahead, in_turn = load(True), load(False)
    assert ahead == in_turn
    assert len(ahead[0]) > 0
    assert (ahead[2], bool(ahead[3]), ahead[4] > 0) == {
        "whole": (False, False, False),
        "members": (False, False, True),
        "cut": (True, False, False),
        "damaged": (True, True, False),
    }[name]


def _count_read_ahead(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes of the blocks the source hands a read-ahead thread, recorded."""
    sizes: list[int] = []

    class Counted(_stream._Ahead):
        def __init__(self, produce, size: int) -> None:  # noqa: ANN001
            sizes.append(size)
            super().__init__(produce, size)

    monkeypatch.setattr(_stream, "_Ahead", Counted)
    return sizes


def test_gzip_reads_ahead_only_past_its_first_blocks(
    tmp_path: Path, tiny_blocks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gzip file whose text fits in the first READ_AHEAD_AFTER_BLOCKS full-size blocks
    starts no read-ahead thread (it would cost more than it hides); a longer one reads
    ahead every block after those, and both load every event."""
    threshold = _stream.READ_AHEAD_AFTER_BLOCKS * _stream.BLOCK_BYTES
    ahead = _count_read_ahead(monkeypatch)
    small, large = tmp_path / "small.json.gz", tmp_path / "large.json.gz"
    few = [e for e in _events(16) if "huge" not in e.get("args", {})]
    many = _events(400)
    small_text = _write(small, few, indent=None, gz=True)
    large_text = _write(large, many, indent=None, gz=True)
    assert 3 * _stream.BLOCK_BYTES < len(small_text) < threshold  # full-size blocks, few
    assert load_trace(small).col(S.TS_NS).tolist() == _expected_ts(few, 10**18)
    assert ahead == []
    assert load_trace(large).col(S.TS_NS).tolist() == _expected_ts(many, 10**18)
    blocks_after = (len(large_text) - threshold) // _stream.BLOCK_BYTES
    assert len(ahead) >= blocks_after - 1 and set(ahead) == {_stream.BLOCK_BYTES}


def test_read_ahead_comparison_reads_ahead(
    tmp_path: Path, tiny_blocks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``test_gzip_read_ahead_equals_reading_in_turn``'s files are long enough that reading
    ahead happens at all (else that comparison would hold trivially)."""
    ahead = _count_read_ahead(monkeypatch)
    load_trace(_gzip_variants(tmp_path)["whole"])
    assert len(ahead) > 10


def _column_growths(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    grown: list[int] = []
    grow = _columns._ColumnTable._grow

    def counted(self, capacity: int) -> None:  # noqa: ANN001
        grown.append(capacity)
        grow(self, capacity)

    monkeypatch.setattr(_columns._ColumnTable, "_grow", counted)
    return grown


def test_gzip_trailer_sizes_the_room_for_rows(
    tmp_path: Path, tiny_blocks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A single-member gzip file's trailer (ISIZE) tells the inflated size, so its columns get
    their room at once, as a plain file's do, instead of doubling piece after piece; several
    members (the last one's size only) give no hint."""
    events = _events(400)
    path = tmp_path / "one.json.gz"
    text = _write(path, events, indent=None, gz=True)
    source = _stream.BlockSource(path)
    try:
        assert source.size_hint == len(text)
    finally:
        source.close()
    grown = _column_growths(monkeypatch)
    trace = load_trace(path)
    assert trace.col(S.TS_NS).tolist() == _expected_ts(events, 10**18)
    assert len(grown) == 1 and grown[0] >= len(events)

    multi = tmp_path / "multi.json.gz"
    multi.write_bytes(
        b"".join(gzip.compress(text[i : i + 3000]) for i in range(0, len(text), 3000))
    )
    source = _stream.BlockSource(multi)
    try:
        assert source.size_hint is None
    finally:
        source.close()
    assert load_trace(multi).col(S.TS_NS).tolist() == _expected_ts(events, 10**18)


def test_room_doubles_past_a_short_size_hint() -> None:
    """More text than the loader was told of (a gzip trailer giving one member's size of
    several): the room for rows doubles, not by the 5% a plain file's last piece may need
    (which would copy every row again at each of many growths)."""
    sink = _columns.ColumnSink()
    sink.expected_bytes = 10_000
    sink._bytes_decoded, sink._piece_rows, sink._piece_bytes = 15_000, 100, 5_000
    assert sink._capacity_for(300) == 600
    sink._bytes_decoded = 5_000  # within the hint: what the rest will hold at the rate so far
    assert sink._capacity_for(300) == max(int(300 * 2 * 1.05), 300 + int(5_000 / 50 * 1.05)) + 1024


def test_room_that_cannot_be_mapped_doubles_instead(
    tmp_path: Path, tiny_blocks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A predicted room no memory can hold (a cut-off gzip file's trailer may claim any size)
    falls back to twice the rows, so the columns grow a few times, not once per piece (each
    growth copies every row so far)."""
    monkeypatch.setattr(_columns.ColumnSink, "_capacity_for", lambda self, rows: 1 << 44)
    grown = _column_growths(monkeypatch)
    events = _events(400)
    path = tmp_path / "room.json"
    _write(path, events, indent=None)
    assert load_trace(path).col(S.TS_NS).tolist() == _expected_ts(events, 10**18)
    mapped = [capacity for capacity in grown if capacity < 1 << 44]
    assert len(grown) == 2 * len(mapped)  # each growth: the prediction refused, then doubled
    assert len(mapped) <= len(events).bit_length() + 1
    assert all(b >= 2 * a for a, b in zip(mapped, mapped[1:], strict=False))
