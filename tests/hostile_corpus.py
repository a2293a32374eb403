"""A hostile-input corpus, generated (no large files committed): named cases, each a function that
writes one input file into a folder, with the behaviour every command must show on it.

    for case in CASES:                       # case.role: "trace" (any trace input) or "device"
        path = case.write(tmp_path)          # the hostile file, written into tmp_path
        for command in commands_for(case):   # export .json/.json.gz/.pftrace, both merge inputs
            argv, out = command.argv(path, tmp_path)
            ...                              # run, then check against case.expected

A command that takes traces (``analyze``, say) is added by appending a ``Command`` to
``COMMANDS``; ``output_names`` reads what an output holds (override ``Command.names`` for
outputs that are not traces). Expected names and counts come from the events each writer put in
the file (or, for damaged gzip, from inflating it independently), never from the loader.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

BASE = 10**18
PID, TID = 4321, 777
N = 12  # events per generated trace
DEEP = 1200  # nesting levels: beyond what any JSON decoder takes on a default Python stack
DEVICE_NAME = "Neuron"  # a device row's name starts with one of these after a merge


# ---- building blocks -------------------------------------------------------------------------


def events(n: int = N, **overrides: dict) -> list[dict]:
    """Kineto-shaped CPU ops op0..op{n-1} on one thread, inside the device fixture's window."""
    out = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i}",
            "pid": PID,
            "tid": TID,
            "ts": 1000 + i * 10,
            "dur": 5,
            "args": {"External id": i + 1},
        }
        for i in range(n)
    ]
    for index, fields in overrides.items():
        out[int(index)].update(fields)
    return out


def document(evs: list[dict], **top: object) -> bytes:
    return json.dumps({"traceEvents": evs, "baseTimeNanoseconds": BASE, **top}).encode()


def names(evs: list[dict]) -> tuple[str, ...]:
    return tuple(e["name"] for e in evs if e.get("ph") != "M")


def device_document(cut: int | None = None, **first: object) -> bytes:
    """One device execution inside the host span (system-trace JSON, as fetched)."""
    from neuron_profiler.runtime_trace import format as F

    t = BASE + 1_000_000 + 20_000
    evs = [
        {
            "event_type": F.NC_EXEC_RUNNING,
            "phase": phase,
            "tracking_id": 1,
            "nc_idx": 0,
            "thread_id": TID,
            "timestamp_ns": ts,
            "data": {},
        }
        for phase, ts in (("start", t), ("stop", t + 3_000))
    ]
    evs[0].update(first)
    text = json.dumps({"events": evs}).encode()
    return text if cut is None else text[:cut]


def write_device(folder: Path, name: str = "device.json") -> Path:
    path = folder / name
    path.write_bytes(device_document())
    return path


def write_host(folder: Path, name: str = "host.json") -> Path:
    path = folder / name
    path.write_bytes(document(events()))
    return path


def _file(name: str, data: bytes) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / name
        path.write_bytes(data)
        return path

    return write


def _replace_once(data: bytes, old: bytes, new: bytes) -> bytes:
    assert data.count(old) == 1, old
    return data.replace(old, new)


def _deep(levels: int = DEEP) -> str:
    return "[" * levels + "]" * levels


# ---- expected behaviour ----------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """What every command shows on a case.

    names: names of the events every command must keep (M events aside), in any order.
    warnings: substrings, each found in a different one-line warning (there may be more lines).
    report: ``Trace.load_report`` fields, and ``truncated`` / ``skipped_events``, as loaded.
    ts_us: name -> absolute µs the event must have (base-time cases).
    exit_code / error: 2 and a substring of the one error line, when nothing is usable.
    """

    names: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    report: dict[str, object] = field(default_factory=dict)
    ts_us: dict[str, float] = field(default_factory=dict)
    exit_code: int = 0
    error: str = ""


@dataclass(frozen=True)
class Case:
    name: str
    write: Callable[[Path], Path]
    expected: Expected
    role: str = "trace"  # "trace": any command's trace input; "device": merge's device input
    known_failure: str = ""  # why this case fails today (a strict xfail until it is fixed)


ALL = names(events())
CLEAN = {
    "truncated": False,
    "skipped_events": 0,
    "replaced_text": 0,
    "replaced_values": 0,
    "replaced_nesting": 0,
    "dropped_ids": 0,
    "relabelled_ids": 0,
    "trailing_bytes": 0,
    "damage": "",
    "ignored_base_time": "",
    "negative_durations": 0,
}


def _clean(**changes: object) -> dict[str, object]:
    return {**CLEAN, **changes}


# rich markup and terminal control sequences: printed as written, never interpreted
MARKUP_NAMES = {
    "2": {"name": "[/]"},
    "3": {"name": "[red]aten::sum"},
    "5": {"name": "op5\x1b[2J\x1b]0;title\x07"},
}


def _renamed(all_names: tuple[str, ...]) -> list[str]:
    out = list(all_names)
    for index, fields in MARKUP_NAMES.items():
        out[int(index)] = fields["name"]
    return out


def _nested_args() -> bytes:
    return _replace_once(
        document(events(**{"5": {"args": {"deep": "HERE"}}})), b'"HERE"', _deep().encode()
    )


def _ids(value: bytes) -> bytes:
    """pid, tid, External id, correlation and a flow's id, each on a different event, set to
    ``value`` (a number's JSON text)."""
    evs = events(
        **{
            "2": {"pid": "PID"},
            "4": {"tid": "TID"},
            "6": {"args": {"External id": "EXT"}},
            "7": {"args": {"correlation": "CORR"}},
        }
    )
    evs.append(
        {"ph": "s", "cat": "ac2g", "name": FLOW, "id": "FLOW", "pid": PID, "tid": TID, "ts": 1001}
    )
    data = document(evs)
    for marker in (b'"PID"', b'"TID"', b'"EXT"', b'"CORR"', b'"FLOW"'):
        data = _replace_once(data, marker, value)
    return data


FLOW = "flow"  # a flow event: an arrow in a .pftrace, not a named row
IDS_NAMES = ALL + (FLOW,)


def _latin1() -> bytes:
    evs = events()
    for e in evs:
        e["name"] = "caf\u00e9 " + e["name"]
    return json.dumps({"traceEvents": evs}, ensure_ascii=False).encode("latin-1")


def _gzip_damaged_mid() -> tuple[bytes, tuple[str, ...]]:
    """3000 events, 16 bytes flipped at 60% of the compressed stream; the names expected are
    those of the complete events in what zlib inflates before it fails, fed a byte at a time
    (independent of the loader, which inflates in larger steps)."""
    data = bytearray(gzip.compress(document(events(3000)), 6, mtime=0))
    at = len(data) * 6 // 10
    data[at : at + 16] = bytes(b ^ 0x5A for b in data[at : at + 16])
    inflater = zlib.decompressobj(wbits=31)
    parts = []
    for i in range(len(data)):
        try:
            parts.append(inflater.decompress(bytes(data[i : i + 1])))
        except zlib.error:
            break
    return bytes(data), _complete_event_names(b"".join(parts))


def _complete_event_names(text: bytes) -> tuple[str, ...]:
    """Names of the complete events at the start of a trace's text (json.raw_decode, one by
    one, stopping at the first that does not decode)."""
    decoder = json.JSONDecoder()
    body = text.decode("utf-8", "replace")
    pos = body.index("[", body.index('"traceEvents"')) + 1
    out = []
    while True:
        while pos < len(body) and body[pos] in " \n\r\t,":
            pos += 1
        try:
            event, pos = decoder.raw_decode(body, pos)
        except ValueError:
            return tuple(out)
        out.append(event["name"])


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def _bad_crc(data: bytes) -> bytes:
    packed = bytearray(_gz(data))
    packed[-8] ^= 0xFF
    return bytes(packed)


def _bad_length(data: bytes) -> bytes:
    packed = bytearray(_gz(data))
    packed[-4:] = b"\x00\x00\x00\x00"
    return bytes(packed)


_GZ_MID, _GZ_MID_NAMES = _gzip_damaged_mid()
_SECOND = document(events(3))
_SURROGATE = {"args": {"s": "LONE"}}
_BASE_DOC = json.dumps({"baseTimeNanoseconds": "BASE", "traceEvents": events()}).encode()
_CUT_AT = document(events()).index(b'"name": "op7"') - 20  # inside event 7
_ARRAY_CUT_AT = json.dumps(events()).encode().index(b'"name": "op7"') - 20  # inside event 7

CASES: list[Case] = [
    # -- point 1 ---------------------------------------------------------------------------
    Case(
        "args_nested_1200_levels",
        _file("deep_args.json", _nested_args()),
        Expected(ALL, ("1 value nested too deeply",), _clean(replaced_nesting=1)),
    ),
    Case(
        "top_key_nested_after_events",
        _file(
            "deep_top.json",
            _replace_once(document(events(), deep="HERE"), b'"HERE"', _deep().encode()),
        ),
        Expected(ALL, ("1 value nested too deeply",), _clean(replaced_nesting=1)),
    ),
    Case(
        "top_key_nested_before_events",
        _file("deep_head.json", b'{"deep": ' + _deep().encode() + b", " + document(events())[1:]),
        Expected(ALL, ("1 value nested too deeply",), _clean(replaced_nesting=1)),
    ),
    Case(
        "invalid_utf8_in_name",
        _file("utf8_name.json", _replace_once(document(events()), b'"op3"', b'"op3\xff"')),
        Expected(
            tuple("op3\ufffd" if n == "op3" else n for n in ALL),
            ("1 event with invalid UTF-8",),
            _clean(replaced_text=1),
        ),
    ),
    Case(
        "invalid_utf8_in_args",
        _file(
            "utf8_args.json",
            _replace_once(
                document(events(**{"4": {"args": {"k": "BAD"}}})), b'"BAD"', b'"v\xc3\x28"'
            ),
        ),
        Expected(ALL, ("1 event with invalid UTF-8",), _clean(replaced_text=1)),
    ),
    Case(
        "latin1_file",
        _file("latin1.json", _latin1()),
        Expected(
            tuple(f"caf\ufffd {n}" for n in ALL),
            (f"{N} events with invalid UTF-8",),
            _clean(replaced_text=N),
        ),
    ),
    Case(
        "ids_beyond_int64",
        _file("big_ids.json", _ids(str(2**64).encode())),
        Expected(
            IDS_NAMES,
            ("2 ids beyond 64 bits dropped", "2 pid/tids beyond 64 bits mapped"),
            _clean(dropped_ids=2, relabelled_ids=2),
        ),
    ),
    Case(
        "ids_just_past_int64",
        _file("edge_ids.json", _ids(str(2**63).encode())),
        Expected(
            IDS_NAMES,
            ("2 ids beyond 64 bits dropped", "2 pid/tids beyond 64 bits mapped"),
            _clean(dropped_ids=2, relabelled_ids=2),
        ),
    ),
    Case(
        "ids_1e400",
        _file("inf_ids.json", _ids(b"1e400")),
        Expected(
            IDS_NAMES,
            (
                "2 ids beyond 64 bits dropped",
                "2 pid/tids beyond 64 bits mapped",
                "5 events with NaN, Infinity or numbers beyond float range",
            ),
            _clean(dropped_ids=2, relabelled_ids=2, replaced_values=5),
        ),
    ),
    Case(
        "number_beyond_float_in_args",
        _file(
            "inf_arg.json",
            _replace_once(document(events(**{"8": {"args": {"k": "INF"}}})), b'"INF"', b"1e400"),
        ),
        Expected(ALL, (), _clean()),
    ),  # kept as written (.json), as text (.pftrace, Trace.args)
    Case(
        "base_time_numeric_string",
        _file("base_str.json", _replace_once(_BASE_DOC, b'"BASE"', b'"1000000000000000000"')),
        Expected(ALL, (), _clean(), ts_us={"op0": BASE / 1000 + 1000}),
    ),
    Case(
        "base_time_null",
        _file("base_null.json", _replace_once(_BASE_DOC, b'"BASE"', b"null")),
        Expected(
            ALL,
            ("baseTimeNanoseconds null is not a number",),
            _clean(ignored_base_time="null"),
            ts_us={"op0": 1000},
        ),
    ),
    Case(
        "base_time_list",
        _file("base_list.json", _replace_once(_BASE_DOC, b'"BASE"', b"[1]")),
        Expected(
            ALL,
            ("baseTimeNanoseconds [1] is not a number",),
            _clean(ignored_base_time="[1]"),
            ts_us={"op0": 1000},
        ),
    ),
    Case(
        "base_time_text",
        _file("base_text.json", _replace_once(_BASE_DOC, b'"BASE"', b'"soon"')),
        Expected(
            ALL,
            ('baseTimeNanoseconds "soon" is not a number',),
            _clean(ignored_base_time='"soon"'),
            ts_us={"op0": 1000},
        ),
    ),
    Case(
        "utf8_bom",
        _file("bom.json", b"\xef\xbb\xbf" + document(events())),
        Expected(ALL, (), _clean()),
    ),
    Case(
        "utf8_bom_gzip",
        _file("bom.json.gz", _gz(b"\xef\xbb\xbf" + document(events()))),
        Expected(ALL, (), _clean()),
    ),
    Case(
        "lone_surrogate_in_first_event",
        _file("surrogate_first.json", _replace_once(document(events()), b'"op0"', b'"op0\\ud800"')),
        Expected(
            tuple("op0\ufffd" if n == "op0" else n for n in ALL),
            ("1 event with invalid UTF-8",),
            _clean(replaced_text=1),
        ),
    ),
    Case(
        "metadata_ts_mistyped",
        _file(
            "meta_ts.json",
            document(
                [
                    {"ph": "M", "name": "process_name", "pid": PID, "ts": "abc", "args": {}},
                    {"ph": "M", "name": "thread_name", "pid": PID, "tid": TID, "ts": 0},
                    *events(),
                ]
            ),
        ),
        Expected(ALL, ("1 event skipped",), _clean(skipped_events=1)),
    ),
    Case(
        "negative_duration",
        _file("negative_dur.json", document(events(**{"4": {"dur": -5}}))),
        Expected(
            ALL, ("1 event with a negative duration: read as 0",), _clean(negative_durations=1)
        ),
    ),
    Case(
        "device_properties_a_number",
        _file("props_number.json", document(events(), deviceProperties=5)),
        Expected(ALL, (), _clean()),
    ),
    Case(
        "names_with_markup_and_terminal_escapes",
        _file("markup.json", document(events(**MARKUP_NAMES))),
        Expected(tuple(_renamed(ALL)), (), _clean()),
    ),
    # -- point 2 ---------------------------------------------------------------------------
    Case(
        "nan_mid_file",
        _file(
            "nan.json",
            _replace_once(document(events(**{"6": {"args": {"v": "NAN"}}})), b'"NAN"', b"NaN"),
        ),
        Expected(ALL, ("1 event with NaN, Infinity",), _clean(replaced_values=1)),
    ),
    Case(
        "nan_in_ts_and_dur",  # no place on the timeline: skipped, counted once (not as repaired)
        _file(
            "nan_ts.json",
            _replace_once(
                _replace_once(
                    document(events(**{"3": {"ts": "TS"}, "5": {"dur": "DUR"}})), b'"TS"', b"NaN"
                ),
                b'"DUR"',
                b"1e400",
            ),
        ),
        Expected(
            tuple(n for n in ALL if n not in ("op3", "op5")),
            ("2 events skipped (mistyped fields)",),
            _clean(skipped_events=2),
        ),
    ),
    Case(
        "infinity_mid_file",
        _file(
            "inf.json",
            _replace_once(
                document(events(**{"6": {"args": {"v": "INF", "w": "NINF"}}})),
                b'"INF", "w": "NINF"',
                b'Infinity, "w": -Infinity',
            ),
        ),
        Expected(ALL, ("1 event with NaN, Infinity",), _clean(replaced_values=1)),
    ),
    Case(
        "lone_surrogate_mid_file",
        _file(
            "surrogate_mid.json",
            _replace_once(document(events(**{"6": _SURROGATE})), b'"LONE"', b'"\\udc00x"'),
        ),
        Expected(ALL, ("1 event with invalid UTF-8",), _clean(replaced_text=1)),
    ),
    Case(
        "nan_in_top_level_key",
        _file(
            "nan_top.json",
            _replace_once(document(events(), deviceProperties=[{"peak": "NAN"}]), b'"NAN"', b"NaN"),
        ),
        Expected(ALL, ("1 event with NaN, Infinity",), _clean(replaced_values=1)),
    ),
    Case(
        "two_traces_concatenated",
        _file("concat.json", document(events()) + b"\n" + _SECOND),
        Expected(
            ALL,
            (f"{len(_SECOND)} bytes of trailing data after the trace ignored",),
            _clean(trailing_bytes=len(_SECOND)),
        ),
    ),
    Case(
        "gzip_bad_crc",
        _file("crc.json.gz", _bad_crc(document(events()))),
        Expected(
            ALL,
            ("damaged gzip data (incorrect data check)",),
            _clean(
                damage=f"damaged gzip data (incorrect data check) after "
                f"{len(document(events()))} bytes"
            ),
        ),
    ),
    Case(
        "gzip_bad_length",
        _file("len.json.gz", _bad_length(document(events()))),
        Expected(ALL, ("damaged gzip data (incorrect length check)",), {"truncated": False}),
    ),
    Case(
        "gzip_trailing_bytes",
        _file("trail.json.gz", _gz(document(events())) + b"garbage!!"),
        Expected(
            ALL, ("9 bytes of trailing data after the trace ignored",), _clean(trailing_bytes=9)
        ),
    ),
    Case(
        "gzip_corrupt_mid_stream",
        _file("mid.json.gz", _GZ_MID),
        Expected(
            _GZ_MID_NAMES,
            (f"kept {len(_GZ_MID_NAMES)} complete events before the damage",),
            {"truncated": True},
        ),
    ),
    Case(
        "cut_off_mid_event",
        _file("cut.json", document(events())[:_CUT_AT]),
        Expected(ALL[:7], ("file is truncated; kept 7 complete events",), {"truncated": True}),
    ),
    # the Trace Event Format's JSON Array Format: a bare array, its closing ] optional
    Case(
        "array_form_without_closing_bracket",
        _file("array_open.json", json.dumps(events()).encode()[:-1] + b",\n"),
        Expected(ALL, (), _clean()),
    ),
    Case(
        "array_form_gzip_cut_mid_event",
        _file("array_cut.json.gz", _gz(json.dumps(events()).encode()[:_ARRAY_CUT_AT])),
        Expected(ALL[:7], ("file is truncated; kept 7 complete events",), {"truncated": True}),
    ),
    # a top-level key written twice: every events array kept; another key refused if it differs
    Case(
        "trace_events_twice",
        _file(
            "events_twice.json",
            document(events()[:5])[:-1]
            + b', "traceEvents": '
            + json.dumps(events()[5:]).encode()
            + b"}",
        ),
        Expected(ALL, ("traceEvents written 2 times",), _clean()),
    ),
    Case(
        "distributed_info_twice_differing",
        _file(
            "rank_twice.json",
            document(events(), distributedInfo={"rank": 0})[:-1]
            + b', "distributedInfo": {"rank": 1}}',
        ),
        Expected(exit_code=2, error='top-level key "distributedInfo" written 2 times'),
    ),
    Case(
        "mistyped_event",
        _file("mistyped.json", document(events(**{"3": {"ts": {"x": 1}}}))),
        Expected(
            tuple(n for n in ALL if n != "op3"),
            ("1 event skipped (mistyped fields)",),
            _clean(skipped_events=1),
        ),
    ),
    Case(
        "nothing_usable",
        _file("nothing.json", document(events())[:30]),
        Expected(exit_code=2, error="truncated, no complete event"),
    ),
    # -- merge's device input (its parser is runtime_trace's: what it already salvages) ------
    Case(
        "device_file_cut_off",
        _file("dev_cut.json", device_document()[:-30]),
        Expected(ALL, ("cut off",)),
        role="device",
    ),
    Case(
        "device_odd_values",
        _file("dev_odd.json", device_document(nc_idx=-1)),
        Expected(ALL, ("device events malformed",)),
        role="device",
    ),
    Case(
        "device_nan_in_data",
        _file("dev_nan.json", _replace_once(device_document(data={"v": "NAN"}), b'"NAN"', b"NaN")),
        Expected(ALL),
        role="device",
    ),
    Case(
        "device_bom",
        _file("dev_bom.json", b"\xef\xbb\xbf" + device_document()),
        Expected(ALL),
        role="device",
    ),
    Case(
        "device_data_nested_1200_levels",
        _file(
            "dev_deep.json",
            _replace_once(device_document(data={"v": "DEEP"}), b'"DEEP"', _deep().encode()),
        ),
        Expected(ALL),
        role="device",
    ),
    Case(
        "device_lone_surrogate",
        _file(
            "dev_surrogate.json",
            _replace_once(device_document(data={"v": "LONE"}), b'"LONE"', b'"\\ud800"'),
        ),
        Expected(ALL),
        role="device",
    ),
    Case(
        "device_gzip_bad_crc",
        _file("dev_crc.json.gz", _bad_crc(device_document())),
        Expected(ALL),
        role="device",
    ),
]


# ---- commands --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One way to run the CLI on a hostile input: ``argv(input, folder)`` -> (argv, output)."""

    name: str
    role: str  # which input the hostile file is: "trace" or "device"
    argv: Callable[[Path, Path], tuple[list[str], Path | None]]
    merges: bool = False  # the output holds device rows too


def _export(ext: str) -> Callable[[Path, Path], tuple[list[str], Path | None]]:
    def argv(path: Path, folder: Path) -> tuple[list[str], Path | None]:
        out = folder / f"out{ext}"
        return ["export", str(path), "-o", str(out)], out

    return argv


def _merge_host(ext: str) -> Callable[[Path, Path], tuple[list[str], Path | None]]:
    def argv(path: Path, folder: Path) -> tuple[list[str], Path | None]:
        out = folder / f"merged{ext}"
        return ["merge", str(path), str(write_device(folder)), "-o", str(out)], out

    return argv


def _merge_device(path: Path, folder: Path) -> tuple[list[str], Path | None]:
    out = folder / "merged.json"
    return ["merge", str(write_host(folder)), str(path), "-o", str(out)], out


COMMANDS: list[Command] = [
    Command("export.json", "trace", _export(".json")),
    Command("export.json.gz", "trace", _export(".json.gz")),
    Command("export.pftrace", "trace", _export(".pftrace")),
    Command("merge-host.json", "trace", _merge_host(".json"), merges=True),
    Command("merge-host.pftrace", "trace", _merge_host(".pftrace"), merges=True),
    Command("merge-device.json", "device", _merge_device, merges=True),
]


def commands_for(case: Case) -> list[Command]:
    return [c for c in COMMANDS if c.role == case.role]


def output_names(path: Path) -> list[str]:
    """Names of the events (M events aside) in a written output, read without the loader:
    Chrome JSON with ``json``, .pftrace with perfetto's own protos."""
    if path.name.endswith(".pftrace"):
        from perfetto_checks import decode_and_check

        decoded = decode_and_check(path)
        return (
            [s[1] for s in decoded.slices]
            + [i[1] for i in decoded.instants]
            + [FLOW] * bool(decoded.flows)
        )
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return [e["name"] for e in json.loads(data)["traceEvents"] if e.get("ph") != "M"]


def output_ts_us(path: Path) -> dict[str, float]:
    """name -> absolute µs of each event of a Chrome JSON output (``ts`` plus its base)."""
    doc = json.loads(path.read_bytes())
    base = doc.get("baseTimeNanoseconds")
    offset = int(base) / 1000 if base is not None else 0.0
    return {e["name"]: float(e["ts"]) + offset for e in doc["traceEvents"] if "ts" in e}
