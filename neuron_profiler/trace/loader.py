"""Load a Kineto Chrome trace (.json / .json.gz) into the one ``Trace`` model.

    trace = load_trace("worker0.pt.trace.json.gz")

Detection rules (documented in docs/trace-model.md):
- ``ts``/``dur`` are microseconds (Kineto's unit) given as numbers or numeric strings.
- When the top level has ``baseTimeNanoseconds``, ``ts`` is relative to it; otherwise ``ts`` is
  absolute µs since the Unix epoch (older Kineto) and is used as is.
- Events whose fields are mistyped are skipped and counted (``Trace.skipped_events``).
- A file cut off mid-write keeps every complete event before the cut (``Trace.truncated``).
"""

from __future__ import annotations

import json
import re
import warnings
import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from neuron_profiler.errors import TraceLoadError
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.kinds import kind_of
from neuron_profiler.trace.model import Trace

_Number = int | float | str


class _Event(msgspec.Struct):
    ph: str = "X"
    name: str = ""
    cat: str = ""
    ts: _Number | None = None
    dur: _Number | None = None
    pid: int | str = 0
    tid: int | str = 0
    id: int | str | None = None
    args: msgspec.Raw = msgspec.Raw(b"")


class _File(msgspec.Struct):
    traceEvents: list[msgspec.Raw]  # noqa: N815 - the format's key


_decode_file = msgspec.json.Decoder(_File).decode
_decode_event = msgspec.json.Decoder(_Event).decode
_decode_top = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


class TruncatedTraceWarning(UserWarning):
    """The file was cut off; complete events before the cut were kept."""


def _read_bytes(path: Path) -> tuple[bytes, bool]:
    """File contents, gunzipped; True when a gzip stream ended early (cut off)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TraceLoadError(path, "no such file") from None
    except OSError as err:
        raise TraceLoadError(path, f"cannot read: {err.strerror or err}") from None
    if raw[:2] != b"\x1f\x8b":
        return raw, False
    inflater = zlib.decompressobj(wbits=31)
    try:
        data = inflater.decompress(raw)
    except zlib.error as err:
        raise TraceLoadError(path, f"corrupt gzip data ({err})") from None
    return data, not inflater.eof


def _salvage_events(data: bytes) -> list[Any]:
    """Complete events of a cut-off file: decode the traceEvents array one event at a time."""
    text = data.decode("utf-8", errors="replace")
    start = text.find('"traceEvents"')
    if start < 0:
        return []
    pos = text.find("[", start)
    if pos < 0:
        return []
    decoder = json.JSONDecoder()
    events: list[Any] = []
    pos += 1
    n = len(text)
    while pos < n:
        while pos < n and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= n or text[pos] == "]":
            break
        try:
            event, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            break
        events.append(event)
    return events


def _to_ns(value: _Number | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, str):
        whole, _, frac = value.strip().partition(".")
        if whole.lstrip("-").isdigit() and (not frac or frac.isdigit()):
            sign = -1 if whole.startswith("-") else 1
            return int(whole) * 1000 + sign * int((frac + "000")[:3])
        value = float(value)
    whole_us = int(value)  # split so absolute µs floats keep sub-µs precision
    return whole_us * 1000 + round((value - whole_us) * 1000)


class _Columns:
    """Accumulates decoded events into column lists (then numpy)."""

    def __init__(self) -> None:
        self.cols: dict[str, list[int]] = {c: [] for c in S.EVENT_COLUMNS}
        self.strings: dict[str, int] = {}
        self.raw_args: list[bytes] = []
        self.labels: dict[str, int] = {}
        self.process_names: dict[int, str] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.process_sort: dict[int, int] = {}
        self.thread_sort: dict[tuple[int, int], int] = {}
        self.skipped = 0

    def _intern(self, text: str) -> int:
        return self.strings.setdefault(text, len(self.strings))

    def _ident(self, value: int | str) -> int:
        if isinstance(value, int):
            return value
        try:
            return int(value)
        except ValueError:
            return -1 - self.labels.setdefault(value, len(self.labels))

    def add(self, ev: _Event, base_ns: int) -> None:
        pid, tid = self._ident(ev.pid), self._ident(ev.tid)
        if ev.ph == "M":
            self._add_meta(ev, pid, tid)
            return
        ts = _to_ns(ev.ts)
        if ts is None:
            self.skipped += 1
            return
        args_raw = bytes(ev.args)
        args: dict[str, Any] = {}
        if args_raw and (b"External id" in args_raw or b"correlation" in args_raw):
            args = msgspec.json.decode(args_raw)
        flow = ev.id if ev.ph in ("s", "t", "f") else None
        c = self.cols
        c[S.TS_NS].append(ts + base_ns)
        c[S.DUR_NS].append(_to_ns(ev.dur) or 0)
        c[S.PH].append(int(S.PH_CODES.get(ev.ph, S.Phase.OTHER)))
        c[S.KIND].append(int(kind_of(ev.cat)))
        c[S.NAME_ID].append(self._intern(ev.name))
        c[S.CAT_ID].append(self._intern(ev.cat))
        c[S.PID].append(pid)
        c[S.TID].append(tid)
        c[S.EXTERNAL_ID].append(_int_or(args.get("External id"), -1))
        c[S.CORRELATION].append(_int_or(args.get("correlation"), -1))
        c[S.FLOW_ID].append(_int_or(flow, -1))
        c[S.ARGS_ROW].append(len(self.raw_args) if args_raw and args_raw != b"{}" else -1)
        if args_raw and args_raw != b"{}":
            self.raw_args.append(args_raw)

    def _add_meta(self, ev: _Event, pid: int, tid: int) -> None:
        args = msgspec.json.decode(bytes(ev.args)) if len(ev.args) else {}
        if not isinstance(args, dict):
            self.skipped += 1
            return
        if ev.name == "process_name":
            self.process_names[pid] = str(args.get("name", ""))
        elif ev.name == "thread_name":
            self.thread_names[(pid, tid)] = str(args.get("name", ""))
        elif ev.name == "process_sort_index":
            self.process_sort[pid] = _int_or(args.get("sort_index"), 0)
        elif ev.name == "thread_sort_index":
            self.thread_sort[(pid, tid)] = _int_or(args.get("sort_index"), 0)


def _int_or(value: Any, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def load_trace(path: str | Path) -> Trace:
    """Load one trace file; raises ``TraceLoadError`` (exit code 2) when nothing is usable."""
    path = Path(path)
    data, gzip_cut = _read_bytes(path)
    if not data.strip():
        raise TraceLoadError(path, "empty file")
    truncated = gzip_cut
    metadata: dict[str, Any] = {}
    try:
        raw_events: list[Any] = _decode_file(data).traceEvents
        top = _decode_top(data)
        metadata = {k: msgspec.json.decode(v) for k, v in top.items() if k != "traceEvents"}
    except msgspec.ValidationError as err:
        raise TraceLoadError(path, f"not a torch.profiler trace ({err})") from None
    except msgspec.DecodeError as err:
        raw_events = _salvage_events(data)
        if not raw_events:
            problem = "truncated, no complete event" if b'"traceEvents"' in data else \
                f"invalid JSON ({err})"
            raise TraceLoadError(path, problem) from None
        truncated = True
        base = re.search(rb'"baseTimeNanoseconds"\s*:\s*(\d+)', data)
        if base:  # keys before the cut still place events on the absolute clock
            metadata["baseTimeNanoseconds"] = int(base.group(1))
    base_ns = _int_or(metadata.get("baseTimeNanoseconds"), 0)
    cols = _Columns()
    for raw in raw_events:
        try:
            if isinstance(raw, msgspec.Raw):
                ev = _decode_event(raw)
            else:  # salvaged dict: re-encode so both paths validate identically
                ev = _decode_event(msgspec.json.encode(raw))
            cols.add(ev, base_ns)
        except (msgspec.ValidationError, msgspec.DecodeError, ValueError, TypeError):
            cols.skipped += 1
    if truncated:
        warnings.warn(f"{path}: file is truncated; kept {sum(1 for _ in cols.cols[S.TS_NS])} "
                      "complete events before the cut", TruncatedTraceWarning, stacklevel=2)
    return _build(cols, metadata, str(path), truncated)


def _build(cols: _Columns, metadata: dict[str, Any], source: str, truncated: bool) -> Trace:
    dtypes = {S.PH: np.uint8, S.KIND: np.uint8, S.NAME_ID: np.int32, S.CAT_ID: np.int32}
    columns = {k: np.asarray(v, dtype=dtypes.get(k, np.int64)) for k, v in cols.cols.items()}
    order = np.argsort(columns[S.TS_NS], kind="stable")
    columns = {k: v[order] for k, v in columns.items()}
    labels = {-1 - i: text for text, i in cols.labels.items()}
    return Trace(columns=columns, strings=list(cols.strings), raw_args=cols.raw_args,
                 metadata=metadata, process_names=cols.process_names,
                 thread_names=cols.thread_names, process_sort_index=cols.process_sort,
                 thread_sort_index=cols.thread_sort, pid_labels=labels, tid_labels=labels,
                 source=source, skipped_events=cols.skipped, truncated=truncated)
