"""Property-based fuzz of the CLI on hostile traces: event fields of every type, numbers (NaN,
Infinity, 1e400, beyond int64), strings (lone surrogates, bytes that are not UTF-8), nesting
deeper than any decoder takes, top-level keys, gzip, and a cut anywhere in the file.

For any input, run in-process (``neuron_profiler.cli.main.main``): no traceback, exit 0 or 2,
and every complete, well-typed event before the cut is kept (and nothing else). What is
"complete" and "well-typed" is decided here, from the generated values and their byte spans,
never by the loader. Derandomised under CI (``CI=true``), no deadline.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import tempfile
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from hostile_corpus import write_device
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuron_profiler.cli.main import main
from neuron_profiler.trace import load_trace

CI = os.environ.get("CI") == "true"
MAX_EXAMPLES = int(os.environ.get("NEURON_PROFILER_FUZZ_EXAMPLES", "800"))

# markers replaced in the JSON text after json.dumps (which cannot write these)
BAD_BYTE = "@@BADBYTE@@"  # -> a byte that is not UTF-8
E400 = "@@E400@@"  # -> 1e400, a number beyond float range
DEEP = "@@DEEP@@"  # -> an array nested 1200 levels deep
LEVELS = 20_000  # (hypothesis raises the recursion limit by 2000 while it runs)
_MARKERS = {
    json.dumps(BAD_BYTE)[1:-1].encode(): b"\xff",
    json.dumps(E400).encode(): b"1e400",
    json.dumps(DEEP).encode(): b"[" * LEVELS + b"]" * LEVELS,
}
_NUMERIC_TEXT = re.compile(r"\s*-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*\Z")
_MAX_US = 9.2e15  # |µs| * 1000 must fit int64

# ---- strategies --------------------------------------------------------------------------------

names = st.builds(
    lambda text, bad: text if bad is None else text[:3] + bad + text[3:],
    st.text(max_size=12),
    st.sampled_from([None, None, None, "\ud800", "\udc00", BAD_BYTE]),
)
big_ints = st.sampled_from([2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**30])
ident = st.one_of(
    st.integers(-5, 70_000),
    big_ints,
    st.text(max_size=6),
    st.sampled_from([E400, 1.5, 100.0, -1.0, 1e20, True, None, [1], DEEP]),
)
finite = st.floats(-1e13, 1e13, allow_nan=False, allow_infinity=False)
times = st.one_of(
    st.integers(0, 10**12),
    finite,
    big_ints,
    st.builds(lambda x: f"{x:.3f}", st.floats(0, 1e12)),
    st.sampled_from([float("nan"), float("inf"), E400, "soon", "", None, [1], {"a": 1}, True]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-10, 10),
    big_ints,
    st.floats(allow_nan=True, allow_infinity=True),
    names,
    st.sampled_from([E400, DEEP]),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
id_values = st.one_of(
    st.integers(-5, 10**6),
    big_ints,
    finite,
    st.text(max_size=4),
    st.sampled_from([float("nan"), E400, DEEP, None, [2], True]),
)
args = st.one_of(
    st.just(None),
    st.dictionaries(
        st.one_of(st.sampled_from(["External id", "correlation", "k"]), names),
        st.one_of(values, id_values),
        max_size=4,
    ),
    st.sampled_from([[1, 2], 5, "text", DEEP, {"k": E400}, {"k": DEEP}, {"External id": E400}]),
)
PHASES = ["X", "X", "X", "i", "I", "s", "f", "t", "C", "b", "e", "n", "M", "Q", 7]
FIELDS = {
    "ph": st.sampled_from(PHASES),
    "name": st.one_of(names, st.sampled_from([3, DEEP, E400])),
    "cat": st.one_of(names, st.sampled_from([5, None])),
    "pid": ident,
    "tid": ident,
    "ts": times,
    "dur": times,
    "id": id_values,
    "args": args,
    "s": values,
    "bp": values,
}


@st.composite
def events(draw: st.DrawFn) -> dict[str, Any]:
    """An event: usually Kineto-shaped, any field may be missing or hostile."""
    event: dict[str, Any] = {
        "ph": "X",
        "name": draw(names),
        "pid": 1,
        "tid": 2,
        "ts": draw(st.integers(0, 10**9)),
        "dur": 1,
    }
    for key in draw(st.lists(st.sampled_from(sorted(FIELDS)), max_size=4, unique=True)):
        if draw(st.integers(0, 5)) == 0:
            event.pop(key, None)
        else:
            event[key] = draw(FIELDS[key])
    return event


def encode(value: Any) -> bytes:
    text = json.dumps(value).encode()  # (writes NaN/Infinity, escapes lone surrogates)
    for marker, raw in _MARKERS.items():
        text = text.replace(marker, raw)
    return text


@st.composite
def documents(draw: st.DrawFn) -> tuple[bytes, list[dict[str, Any]], list[int]]:
    """(file text, the events, where each event's text ends)."""
    evs = draw(st.lists(events(), max_size=10))
    base = draw(st.sampled_from([None, 10**18, "1000000000000000000", "null", [1], "soon"]))
    before = draw(
        st.sampled_from(
            [
                b"",
                b'"schemaVersion": 1, ',
                b'"pre": NaN, ',
                b'"pre": ' + _MARKERS[json.dumps(DEEP).encode()] + b", ",
            ]
        )
    )
    text = b"{" + before + b'"traceEvents": ['
    ends = []
    for i, event in enumerate(evs):
        text += (b", " if i else b"") + encode(event)
        ends.append(len(text))
    text += b"]"
    if base is not None:
        text += b', "baseTimeNanoseconds": ' + encode(base)
    text += draw(
        st.sampled_from(
            [
                b"",
                b', "deviceProperties": [{"x": Infinity}]',
                b', "post": ' + encode(DEEP),
                b', "post": "\\udc00"',
            ]
        )
    )
    return text + b"}\n", evs, ends


# ---- the oracle ----------------------------------------------------------------------------------


def normalised(value: Any) -> Any:
    """A generated value as the file says it once repaired (docs/trace-model.md): NaN, Infinity
    and numbers beyond float range are kept as text; a value nested too deeply is a marker
    object (``REPLACED``)."""
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, float) and abs(value) == float("inf"):
        return "Infinity" if value > 0 else "-Infinity"
    if value == E400:
        return "1e400"
    if value == DEEP:
        return REPLACED
    if isinstance(value, list):
        return [normalised(v) for v in value]
    if isinstance(value, dict):
        return {k: normalised(v) for k, v in value.items()}
    return value


REPLACED = {"replaced": True}


def _deep_in(value: Any) -> bool:
    if value == DEEP:
        return True
    if isinstance(value, dict):
        return any(map(_deep_in, value.values()))
    return isinstance(value, list) and any(map(_deep_in, value))


def _number(value: Any) -> bool:
    return type(value) in (int, float)


def _time_ok(value: Any, required: bool) -> bool:
    """ts / dur: a number or numeric text whose ns fit int64 (absent or null only for dur)."""
    if value is None:
        return not required
    if _number(value):
        return abs(value) < _MAX_US
    if isinstance(value, str) and _NUMERIC_TEXT.match(value):
        return abs(float(value)) < _MAX_US
    return False


def _typed(value: Any, *types: type) -> bool:
    """Decodes as one of ``types`` (bool is no int, null only if ``type(None)`` is listed)."""
    return type(value) in types


def well_typed(raw: dict[str, Any]) -> bool:
    """What the model reads, typed as docs/trace-model.md says (independent of the loader)."""
    event = {k: normalised(v) for k, v in raw.items()}
    if "args" in raw and _deep_in(raw["args"]):  # the whole args become the marker object
        event["args"] = REPLACED
    ph, args = event.get("ph", "X"), event.get("args")
    if not (
        _typed(ph, str) and _typed(event.get("name", ""), str) and _typed(event.get("cat", ""), str)
    ):
        return False
    if not all(_typed(event.get(k, 0), int, float, str) for k in ("pid", "tid")):
        return False
    if not _typed(event.get("id"), int, float, bool, str, type(None)):  # (any scalar: an id)
        return False
    if not all(_typed(event.get(k), int, float, str, type(None)) for k in ("ts", "dur")):
        return False
    if ph == "M":
        return ("args" not in event or isinstance(args, dict)) and _time_ok(event.get("ts"), False)
    if not (_time_ok(event.get("ts"), True) and _time_ok(event.get("dur"), False)):
        return False
    if args is None:
        return True
    return isinstance(args, dict) and all(
        _typed(args[k], int, float, str, type(None))
        for k in ("External id", "correlation")
        if k in args
    )


def kept_name(raw: dict[str, Any]) -> str:
    """An event's name as the model keeps it: lone surrogates and bad bytes become U+FFFD."""
    name = normalised(raw.get("name", ""))
    return re.sub("[\ud800-\udfff]", "\ufffd", name.replace(BAD_BYTE, "\ufffd"))


# ---- the property ----------------------------------------------------------------------------------


@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=CI,
    database=None if CI else settings.default.database,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
@given(doc=documents(), data=st.data())
def test_any_input_no_traceback_and_every_complete_event_kept(
    doc: tuple[bytes, list[dict[str, Any]], list[int]], data: st.DataObject
) -> None:
    text, evs, ends = doc
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(text))), label="cut")
    packed = data.draw(st.booleans(), label="gzip")
    command = data.draw(
        st.sampled_from(["o.json", "o.json.gz", "o.pftrace", "merge"]), label="command"
    )
    body = text if cut is None else text[:cut]
    complete = [e for e, end in zip(evs, ends, strict=True) if cut is None or end <= cut]
    expected = [e for e in complete if well_typed(e)]
    with tempfile.TemporaryDirectory(prefix="fuzz-") as folder:
        path = Path(folder) / ("in.json.gz" if packed else "in.json")
        path.write_bytes(gzip.compress(body, mtime=0) if packed else body)
        out = Path(folder) / ("m.json" if command == "merge" else command)
        argv = (
            ["merge", str(path), str(write_device(Path(folder))), "-o", str(out)]
            if command == "merge"
            else ["export", str(path), "-o", str(out)]
        )
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = main(argv)  # an exception here is the traceback the user would see
        lines = stderr.getvalue().splitlines()
        assert all(line.startswith("neuron-prof: ") for line in lines), lines
        assert code in (0, 2), lines
        rows = [e for e in expected if e.get("ph", "X") != "M"]
        if code == 2:  # nothing usable: no complete, well-typed event other than metadata
            assert (
                not (complete if command == "merge" else rows)  # (merge: device events usable)
                and len(lines) == 1
                and lines[0].startswith("neuron-prof: error: ")
            ), lines
            return
        assert rows or command == "merge", lines  # (merged: the device events are usable)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trace = load_trace(path)
        assert len(trace) == len(rows) and len(trace.meta_events) == len(expected) - len(rows)
        want = Counter(kept_name(e) for e in rows)
        assert Counter(trace.name(i) for i in range(len(trace))) == want
        if command in ("o.json", "merge"):
            written = json.loads(out.read_bytes())["traceEvents"]
            got = Counter(e["name"] for e in written if e.get("ph") != "M")
            assert got == want if command == "o.json" else want <= got
