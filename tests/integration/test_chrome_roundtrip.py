"""Load -> Chrome export -> load is lossless, on every shared trace and on collector output.

Two independent checks per trace:
- the exported file against the original file, both read with plain ``json``/``gzip`` (floats
  as ``Decimal``): the same multiset of events, every field of every event compared (ph, ts and
  dur in absolute ns, name, cat present or not, pid/tid as written, args decoded, id, bp, s, and
  whatever else an event carries), metadata ``M`` events included, and the same top-level keys;
- the reloaded ``Trace`` against the first one: the same multiset of rows (every column, names,
  categories and pids/tids resolved through the string tables, args decoded), the same metadata,
  ``M`` events, process/thread names and sort indices.

Normalisations, all documented in docs/trace-model.md: absolute ns for ``ts`` (a file with
``baseTimeNanoseconds`` must come back with the same one), ``args`` absent, ``null`` or ``{}``
all mean "no args", and the collector's device memory counters, which Kineto writes with its
counter category, come back with ``neuron_hbm_usage`` ("Device memory counters").
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import REPO_ROOT, SHARED_TRACES, all_shared_trace_files, shared_traces_dir

from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.trace import TraceBuilder, load_trace
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

FILES = all_shared_trace_files(SHARED_TRACES) if SHARED_TRACES.is_dir() else [None]
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "chrome_forms.json"


# ---- the independent reference: the JSON text itself --------------------------------------------
def _read_json(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh, parse_float=Decimal)


def _ns(value: Any) -> int:
    """µs as written (int, Decimal or numeric text) -> integer ns, half away from zero."""
    return int((Decimal(value) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _canonical(value: Any) -> str:
    """Decoded JSON as one comparable text: keys sorted, numbers by value ("25738" and 25738
    stay different: a string is not a number)."""
    return json.dumps(value, sort_keys=True, default=float)


def file_events(doc: dict[str, Any]) -> Counter:
    """Every event of a Chrome trace file, every field, ts on the absolute ns clock."""
    base = int(doc.get("baseTimeNanoseconds", 0))
    out: Counter = Counter()
    for event in doc["traceEvents"]:
        event = dict(event)
        if "ts" in event:
            event["ts"] = _ns(event["ts"]) + base
        if "dur" in event:
            event["dur"] = _ns(event["dur"])
        if event.get("args") in (None, {}):
            event.pop("args", None)
        if event.get("cat") == V.CAT_KINETO_COUNTERS and V.is_core_hbm_counter_name(
            event.get("name", "")
        ):
            event["cat"] = V.CAT_HBM_USAGE
        out[_canonical(event)] += 1
    return out


def file_top_level(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "traceEvents"}


# ---- the model side -----------------------------------------------------------------------------
def _resolve(trace: Trace, ident: int) -> int | str:
    return trace.pid_labels.get(ident, trace.tid_labels.get(ident, ident))


def _args_text(raw: bytes) -> bytes:
    return msgspec.json.encode(msgspec.json.decode(raw), order="sorted")


def model_events(trace: Trace) -> Counter:
    """Every row, every column: interned ids replaced by their text, args decoded."""
    c = {k: trace.col(k).tolist() for k in S.EVENT_COLUMNS}
    raw_args = list(trace.raw_args)  # (iterated a buffer at a time: no lookup per row)
    out: Counter = Counter()
    for row in range(len(trace)):
        args = c[S.ARGS_ROW][row]
        out[
            (
                c[S.PH][row],
                c[S.FORM][row],
                c[S.KIND][row],
                c[S.TS_NS][row],
                c[S.DUR_NS][row],
                trace.strings[c[S.NAME_ID][row]],
                trace.strings[c[S.CAT_ID][row]],
                _resolve(trace, c[S.PID][row]),
                _resolve(trace, c[S.TID][row]),
                c[S.EXTERNAL_ID][row],
                c[S.CORRELATION][row],
                trace.id_labels.get(c[S.FLOW_ID][row], c[S.FLOW_ID][row]),  # text ids: text
                b"{}" if args < 0 else _args_text(raw_args[args]),
            )
        ] += 1
    return out


def model_meta(trace: Trace) -> dict[str, Any]:
    """Metadata, ``M`` events and the views derived from them, pids/tids resolved."""
    r = lambda ident: _resolve(trace, ident)  # noqa: E731
    return {
        "metadata": trace.metadata,
        "meta_events": Counter(
            (m.name, r(m.pid), r(m.tid), m.ts_ns, m.cat, m.form, _canonical(m.args))
            for m in trace.meta_events
        ),
        "process_names": {r(p): v for p, v in trace.process_names.items()},
        "thread_names": {(r(p), r(t)): v for (p, t), v in trace.thread_names.items()},
        "process_sort_index": {r(p): v for p, v in trace.process_sort_index.items()},
        "thread_sort_index": {(r(p), r(t)): v for (p, t), v in trace.thread_sort_index.items()},
        "labels": sorted(set(trace.pid_labels.values()) | set(trace.tid_labels.values())),
        "skipped": trace.skipped_events,
        "truncated": trace.truncated,
    }


Original = tuple[Trace, Counter, dict[str, Any]]


def read_original(path: Path) -> Original:
    """The original trace with its rows and metadata as compared (``model_events``,
    ``model_meta``)."""
    original = load_trace(path)
    return original, model_events(original), model_meta(original)


def check_round_trip(
    path: Path, out: Path, *, files: bool = True, originals: dict[Path, Original] | None = None
) -> None:
    """``files``: also compare the exported file with the original one as plain JSON.
    ``originals``: where the original's side, read once, is kept for the next export of it
    (the last trace's only: the two exports of a trace run one after the other)."""
    if originals is None:
        originals = {}
    if path not in originals:
        originals.clear()
        originals[path] = read_original(path)
    original, original_events, original_meta = originals[path]
    write_chrome_trace(original, out)
    again = load_trace(out)
    if files:  # the export holds exactly the original's events and top-level keys
        source, exported = _read_json(path), _read_json(out)
        assert file_top_level(exported) == file_top_level(source)
        want, got = file_events(source), file_events(exported)
        assert got == want, (
            f"lost: {list((want - got).elements())[:3]}\nadded: {list((got - want).elements())[:3]}"
        )
    # the models: equal, whatever the interned ids and args' byte layout
    assert len(again) == len(original)
    assert model_events(again) == original_events
    assert model_meta(again) == original_meta


@pytest.fixture(scope="module")
def shared_originals() -> Iterator[dict[Path, Original]]:
    """Each shared trace's original side, read once for its two exports (.json, .json.gz)."""
    originals: dict[Path, Original] = {}
    yield originals
    originals.clear()


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name if p else "no-shared")
def test_shared_trace_round_trips(
    path: Path | None, suffix: str, tmp_path: Path, shared_originals: dict[Path, Original]
) -> None:
    shared_traces_dir()
    # the file comparison once per trace: the writer's bytes do not depend on the compression
    out = tmp_path / ("out" + suffix)
    check_round_trip(path, out, files=suffix == ".json", originals=shared_originals)
    if suffix == ".json":
        json.loads((tmp_path / "out.json").read_text())  # strict JSON for any other tool


def test_every_chrome_form_round_trips(tmp_path: Path) -> None:
    """What the shared traces lack: instant scopes p and none, ph "I", flows with and without
    ``bp``, flow steps, digit-string tids beside int ones, events without a category, async and
    mark phases, async and flow ids as text (``"0x1f"``), async ``id2`` objects, counters,
    vendor top-level keys, no
    ``baseTimeNanoseconds`` (absolute µs)."""
    check_round_trip(FIXTURE, tmp_path / "out.json")
    trace = load_trace(FIXTURE)
    assert trace.skipped_events == 0 and "baseTimeNanoseconds" not in trace.metadata
    assert len(trace) == len(json.loads(FIXTURE.read_text())["traceEvents"]) - 6


def test_text_ids_keep_their_pairs(tmp_path: Path) -> None:
    """Async ids written as text (the format's own ``"0x1"``): after load -> Chrome JSON ->
    load, each b/e pair still shares one id, distinct from the other pair's and from int ids,
    and the file spells each id as the original did."""
    events = json.loads(FIXTURE.read_text())["traceEvents"]
    want = Counter((e["ph"], e["name"], repr(e["id"])) for e in events if "id" in e)
    out = write_chrome_trace(load_trace(FIXTURE), tmp_path / "out.json")
    got = json.loads(out.read_text())["traceEvents"]
    assert Counter((e["ph"], e["name"], repr(e["id"])) for e in got if "id" in e) == want
    trace = load_trace(out)
    ids: dict[str, set[int]] = {}
    for row in range(len(trace)):
        if trace.name(row) in ("hex id", "text id"):
            ids.setdefault(trace.name(row), set()).add(int(trace.col(S.FLOW_ID)[row]))
    assert all(len(v) == 1 for v in ids.values()) and len(set.union(*ids.values())) == 2
    assert {trace.id_labels[i] for v in ids.values() for i in v} == {"0x1f", "req-2"}


def test_round_trip_detects_a_lost_field(tmp_path: Path) -> None:
    """The comparison is not blind: dropping one instant's scope from the export is caught."""
    original = load_trace(FIXTURE)
    out = write_chrome_trace(original, tmp_path / "out.json")
    text = out.read_text()
    assert text.count('"s":"p"') == 1
    out.write_text(text.replace('"s":"p",', ""))
    assert file_events(_read_json(out)) != file_events(_read_json(FIXTURE))
    assert model_events(load_trace(out)) != model_events(original)


COLLECTOR_SCRIPT = r"""
import sys
import torch
from neuron_profiler import emulator
emulator.enable(cores=2, chip="trn2")
from neuron_profiler import NEURON
from torch.profiler import ProfilerActivity, profile, record_function
dev0, dev1 = torch.device("neuron:0"), torch.device("neuron:1")
x, w = torch.randn(16, 32, device=dev0), torch.randn(32, 8, device=dev0)
with profile(activities=[ProfilerActivity.CPU, NEURON], profile_memory=True) as prof:
    with record_function("step"):
        y = (x @ w).relu().sum()
        (torch.randn(4, 4, device=dev1) * 2).cpu()
        torch.randn(4, dtype=torch.float64).to(dev0).exp().cpu()   # a CPU fallback
    y.item()
prof.export_chrome_trace(sys.argv[1])
print("done")
"""


@pytest.fixture(scope="module")
def collector_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    path = tmp_path_factory.mktemp("collector") / "trace.json"
    proc = subprocess.run(
        [sys.executable, "-c", COLLECTOR_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("done"), proc.stderr[-3000:]
    return path


def test_collector_output_round_trips(collector_trace: Path, tmp_path: Path) -> None:
    doc = _read_json(collector_trace)
    phases = Counter(e["ph"] for e in doc["traceEvents"])
    assert phases["X"] and phases["i"] and phases["s"] and phases["f"] and phases["M"]
    assert any(e.get("cat") == "kernel" for e in doc["traceEvents"])  # the device rows
    assert phases["C"]  # the device memory counters
    check_round_trip(collector_trace, tmp_path / "out.json.gz")


def test_names_a_producer_changes_are_written_over_the_kept_m_events(tmp_path: Path) -> None:
    """The dicts are what a producer edits (the offline merge adds NeuronCore names): an
    export keeps the file's M events, drops those whose entry was removed, and adds or
    overrides the rest, so the reloaded dicts equal the edited ones."""
    original = load_trace(FIXTURE)
    names = {**original.process_names, 7: "renamed", 0: "NeuronCore 0"}
    threads = {}  # every thread name removed
    edited = dataclasses.replace(original, process_names=names, thread_names=threads)
    again = load_trace(write_chrome_trace(edited, tmp_path / "out.json"))
    assert again.process_names == names and again.thread_names == {}
    assert again.thread_sort_index == original.thread_sort_index
    kept = Counter(m.name for m in again.meta_events)
    assert kept["process_labels"] == 1 and kept["thread_name"] == 0


def test_a_built_trace_gets_m_events_for_its_names(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.process_names[5] = "host"
    b.thread_sort_index[(5, 6)] = 2
    b.add(name="op", ts_ns=1_700_000_000_000_000_123, dur_ns=10, pid=5, tid=6)
    again = load_trace(write_chrome_trace(b.build(), tmp_path / "out.json"))
    assert again.process_names == {5: "host"} and again.thread_sort_index == {(5, 6): 2}
    assert again.col(S.TS_NS).tolist() == [1_700_000_000_000_000_123]  # absolute µs, exact
    assert "baseTimeNanoseconds" not in again.metadata
