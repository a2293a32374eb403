"""Decode pieces of a ``traceEvents`` array into typed numpy columns: the loader's fast core.

Each piece (a JSON array of up to about 1 MB of events) is decoded by msgspec into small ``Event``
structs (args kept as ``msgspec.Raw``), turned into columns with whole-list numpy conversions,
names and categories interned through one dict touched once per distinct string, args stored as
one raw buffer per piece. Per-event Python runs only for rare cases: mistyped events (skipped and
counted), metadata ``M`` events, and ``B``/``E`` pairs. The structs of a piece are dropped before
the next is decoded, so memory stays close to the final columns.

    sink = ColumnSink(); sink.add_piece(b'[{"ph":"X","ts":1.5,"dur":2,"name":"k"}]')
    columns = sink.columns()
"""

from __future__ import annotations

import re
from itertools import compress
from typing import Any

import msgspec
import numpy as np

from neuron_profiler.trace import schema as S
from neuron_profiler.trace._numtext import OK, us_texts_to_ns, value_to_ns
from neuron_profiler.trace._rawargs import RawArgs, RawArgsBuilder
from neuron_profiler.trace.kinds import kind_of

_NONE = msgspec.Raw(b"")
_INT_TYPES = {S.PH: np.uint8, S.KIND: np.uint8, S.NAME_ID: np.int32, S.CAT_ID: np.int32}
_FLOAT_EXACT_US = 2.0**43  # below this a float64 µs value still pins down a unique ns
LABEL_ID_BASE = -(1 << 31)  # string pids/tids get ids from here up: int32, far from real ids
# (CUDA writes tid -1 for context syncs, so ids like -1, -2 must stay real ids)
_META = 255  # ph code of metadata events while a piece is decoded (they never become rows)
_AT_INDEX = re.compile(r"at `\$\[(\d+)\]")
_MAX_SPLITS = 16  # validation errors in one piece before it is decoded event by event


class Event(msgspec.Struct, gc=False):
    """The fields of a trace event the model keeps; unknown fields are skipped by msgspec."""

    ph: str = "X"
    name: str = ""
    cat: str = ""
    ts: int | float | str | None = None
    dur: int | float | str | None = 0
    pid: int | str = 0
    tid: int | str = 0
    id: int | str | None = -1
    args: msgspec.Raw = _NONE


class _Times(msgspec.Struct, gc=False):
    """Exact JSON text of ts/dur, decoded only for pieces with floats too large for float64."""

    ts: msgspec.Raw = _NONE
    dur: msgspec.Raw = _NONE


class _ArgIds(msgspec.Struct, gc=False):
    external_id: int | float | str | None = msgspec.field(name="External id", default=-1)
    correlation: int | float | str | None = -1


_decode_events = msgspec.json.Decoder(list[Event]).decode
_decode_event = msgspec.json.Decoder(Event).decode
_decode_raws = msgspec.json.Decoder(list[msgspec.Raw]).decode
_decode_times = msgspec.json.Decoder(list[_Times]).decode
_decode_time = msgspec.json.Decoder(_Times).decode
_decode_arg_ids = msgspec.json.Decoder(list[_ArgIds]).decode
_decode_arg_id = msgspec.json.Decoder(_ArgIds).decode


def int_or(value: Any, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError, OverflowError):
        return default


def _ints(values: list[Any], convert: Any) -> np.ndarray:
    """int64 column from Python values; values numpy cannot take go through ``convert``."""
    if values and type(values[0]) is not str:  # strings ("25738", "stream 7"): by distinct value
        try:
            return np.fromiter(values, dtype=np.int64, count=len(values))
        except (TypeError, ValueError, OverflowError):
            pass
    mapping = {v: convert(v) for v in set(values)}
    return np.fromiter(map(mapping.__getitem__, values), dtype=np.int64, count=len(values))


class ColumnSink:
    """Accumulates decoded pieces; ``columns()`` and the attributes feed the ``Trace``."""

    def __init__(self) -> None:
        self.strings: dict[str, int] = {}
        self.labels: dict[str, int] = {}
        self.process_names: dict[int, str] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.process_sort: dict[int, int] = {}
        self.thread_sort: dict[tuple[int, int], int] = {}
        self.skipped = 0
        self.rows = 0
        self.seen = 0  # events decoded, whatever became of them
        self._args = RawArgsBuilder()
        self._pieces: list[dict[str, np.ndarray]] = []
        self._cat_kinds: dict[int, int] = {}
        self._ph_codes: dict[str, int] = {k: int(v) for k, v in S.PH_CODES.items()}
        self._ph_codes["M"] = _META

    # ---- decoding -------------------------------------------------------------------------
    def add_piece(self, text: bytes) -> None:
        """Decode one JSON array of events (raises msgspec.DecodeError if it is malformed)."""
        skipped_before = self.skipped
        try:
            events: list[Event] = _decode_events(text)
            raws = None
        except msgspec.ValidationError as err:
            events, raws = self._decode_leniently(text, err)
        self.seen += len(events) + self.skipped - skipped_before
        if events:
            self._add_events(events, text, raws)

    def _decode_leniently(self, text: bytes, err: msgspec.ValidationError
                          ) -> tuple[list[Event], list[msgspec.Raw]]:
        """Skip (and count) the mistyped events of a piece, keeping the rest."""
        raws: list[msgspec.Raw] = _decode_raws(text)
        events: list[Event] = []
        kept: list[msgspec.Raw] = []
        lo, splits = 0, 0
        while lo < len(raws):
            match = _AT_INDEX.search(str(err)) if err is not None else None
            if match is None or splits >= _MAX_SPLITS:
                for raw in raws[lo:]:
                    try:
                        events.append(_decode_event(raw))
                        kept.append(raw)
                    except msgspec.ValidationError:
                        self.skipped += 1
                break
            bad = lo + int(match.group(1))
            if bad > lo:
                events.extend(_decode_events(b"[" + b",".join(raws[lo:bad]) + b"]"))
                kept.extend(raws[lo:bad])
            self.skipped += 1
            lo, splits, err = bad + 1, splits + 1, None
            if lo < len(raws):
                try:
                    events.extend(_decode_events(b"[" + b",".join(raws[lo:]) + b"]"))
                    kept.extend(raws[lo:])
                    break
                except msgspec.ValidationError as again:
                    err = again
        return events, kept

    def _add_events(self, events: list[Event], text: bytes, raws: list[msgspec.Raw] | None
                    ) -> None:
        codes = self._codes([e.ph for e in events])
        keep: np.ndarray | None = None
        if (codes == _META).any():
            keep = codes != _META
            for event in compress(events, (~keep).tolist()):
                self._add_meta(event)
            events = list(compress(events, keep.tolist()))
            codes = codes[keep]
        if not events:
            return
        n = len(events)
        valid = np.ones(n, dtype=bool)
        ts_ns, dur_ns = self._times(events, text, raws, keep, valid)
        cols: dict[str, np.ndarray] = {S.TS_NS: ts_ns, S.DUR_NS: dur_ns}
        cols[S.PH] = codes.astype(np.uint8)
        cols[S.NAME_ID] = self._intern([e.name for e in events])
        cols[S.CAT_ID] = self._intern([e.cat for e in events])
        cols[S.KIND] = self._kinds(cols[S.CAT_ID])
        cols[S.PID] = _ints([e.pid for e in events], self._ident)
        cols[S.TID] = _ints([e.tid for e in events], self._ident)
        flow_rows = np.flatnonzero((codes >= S.Phase.FLOW_START) & (codes <= S.Phase.FLOW_END))
        cols[S.FLOW_ID] = np.full(n, -1, dtype=np.int64)
        if len(flow_rows):
            ids = [e.id for e in events] if len(flow_rows) == n else \
                [events[i].id for i in flow_rows.tolist()]
            cols[S.FLOW_ID][flow_rows] = _ints(ids, lambda v: int_or(v, -1))
        self._args_columns([e.args for e in events], cols, valid)
        if not valid.all():
            self.skipped += int((~valid).sum())
            cols = {k: v[valid] for k, v in cols.items()}
        self.rows += len(cols[S.TS_NS])
        self._pieces.append(cols)

    # ---- columns --------------------------------------------------------------------------
    def _times(self, events: list[Event], text: bytes, raws: list[msgspec.Raw] | None,
               keep: np.ndarray | None, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ts, ts_exact = _us_to_ns([e.ts for e in events], valid, required=True)
        dur, dur_exact = _us_to_ns([e.dur for e in events], valid, required=False)
        if ts_exact.any() or dur_exact.any():  # large floats: take the digits from the text
            times = _decode_times(text) if raws is None else [_decode_time(r) for r in raws]
            if keep is not None:
                times = list(compress(times, keep))
            for column, need, field in ((ts, ts_exact, "ts"), (dur, dur_exact, "dur")):
                rows = np.flatnonzero(need)
                if len(rows):
                    exact, status = us_texts_to_ns([getattr(times[i], field)
                                                    for i in rows.tolist()])
                    column[rows] = exact
                    valid[rows[status != OK]] = False
        return ts, dur

    def _codes(self, ph: list[str]) -> np.ndarray:
        codes = self._ph_codes
        try:
            return np.fromiter(map(codes.__getitem__, ph), dtype=np.int64, count=len(ph))
        except KeyError:
            for letter in set(ph).difference(codes):
                codes[letter] = int(S.Phase.OTHER)
        return np.fromiter(map(codes.__getitem__, ph), dtype=np.int64, count=len(ph))

    def _intern(self, values: list[str]) -> np.ndarray:
        strings = self.strings
        try:  # usual case after the first pieces: every string is known already
            return np.fromiter(map(strings.__getitem__, values), dtype=np.int32,
                               count=len(values))
        except KeyError:
            pass
        for text in dict.fromkeys(values):  # first-seen order keeps ids deterministic
            if text not in strings:
                strings[text] = len(strings)
        return np.fromiter(map(strings.__getitem__, values), dtype=np.int32, count=len(values))

    def _kinds(self, cat_ids: np.ndarray) -> np.ndarray:
        names = None
        for sid in np.flatnonzero(np.bincount(cat_ids)).tolist():  # (np.unique imports numpy.ma)
            if sid not in self._cat_kinds:
                names = names or list(self.strings)
                self._cat_kinds[sid] = int(kind_of(names[sid]))
        table = np.zeros(len(self.strings), dtype=np.uint8)
        table[list(self._cat_kinds)] = list(self._cat_kinds.values())
        return table[cat_ids]

    def _ident(self, value: int | str) -> int:
        if isinstance(value, int):
            return value
        try:
            return int(value)
        except ValueError:
            return LABEL_ID_BASE + self.labels.setdefault(value, len(self.labels))

    def _args_columns(self, args: list[msgspec.Raw], cols: dict[str, np.ndarray],
                      valid: np.ndarray) -> None:
        n = len(args)
        lengths = np.fromiter(map(len, args), dtype=np.int64, count=n)
        has = lengths > 2  # b"" (absent) and b"{}" carry nothing
        for i in np.flatnonzero(lengths == 4).tolist():
            if bytes(args[i]) == b"null":
                has[i] = False
        rows = np.flatnonzero(has)
        ext = np.full(n, -1, dtype=np.int64)
        corr = np.full(n, -1, dtype=np.int64)
        args_row = np.full(n, -1, dtype=np.int64)
        if len(rows):
            chosen = list(args) if len(rows) == n else list(compress(args, has.tolist()))
            chosen[0] = b"[" + bytes(chosen[0])  # one copy: the buffer is stored and decoded
            chosen[-1] = bytes(chosen[-1]) + b"]"
            buffer = b",".join(chosen)
            sizes = lengths[rows]
            starts = np.cumsum(sizes + 1) - sizes
            args_row[rows] = self._args.add(buffer, starts, sizes) + np.arange(len(rows))
            try:
                ids = _decode_arg_ids(buffer)
            except msgspec.ValidationError:  # an args value that is not an object
                ids = []
                for row, raw in zip(rows.tolist(), chosen, strict=True):
                    try:
                        ids.append(_decode_arg_id(raw))
                    except msgspec.ValidationError:
                        valid[row] = False
                        ids.append(_ArgIds())
            ext[rows] = _ints([a.external_id for a in ids], lambda v: int_or(v, -1))
            corr[rows] = _ints([a.correlation for a in ids], lambda v: int_or(v, -1))
        cols[S.EXTERNAL_ID], cols[S.CORRELATION], cols[S.ARGS_ROW] = ext, corr, args_row

    def _add_meta(self, event: Event) -> None:
        try:
            args = msgspec.json.decode(bytes(event.args)) if len(event.args) else {}
            pid, tid = self._ident(event.pid), self._ident(event.tid)
        except (msgspec.DecodeError, ValueError):
            args = None
        if not isinstance(args, dict):
            self.skipped += 1
            return
        if event.name == "process_name":
            self.process_names[pid] = str(args.get("name", ""))
        elif event.name == "thread_name":
            self.thread_names[(pid, tid)] = str(args.get("name", ""))
        elif event.name == "process_sort_index":
            self.process_sort[pid] = int_or(args.get("sort_index"), 0)
        elif event.name == "thread_sort_index":
            self.thread_sort[(pid, tid)] = int_or(args.get("sort_index"), 0)

    # ---- result ---------------------------------------------------------------------------
    def columns(self) -> dict[str, np.ndarray]:
        """All pieces concatenated (pieces are released column by column)."""
        out: dict[str, np.ndarray] = {}
        pieces, self._pieces = self._pieces, []
        for name in S.EVENT_COLUMNS:
            dtype = _INT_TYPES.get(name, np.int64)
            parts = [p.pop(name) for p in pieces]
            out[name] = np.concatenate(parts).astype(dtype, copy=False) if parts else \
                np.zeros(0, dtype=dtype)
        return out

    def raw_args(self) -> RawArgs:
        return self._args.build()


def _us_to_ns(values: list[Any], valid: np.ndarray, *, required: bool
              ) -> tuple[np.ndarray, np.ndarray]:
    """ns from µs values (int / float / numeric str) and the rows whose float is too large to
    carry the ns digit (the caller parses their text instead). Unusable values clear ``valid``."""
    n = len(values)
    types = set(map(type, values))
    if types <= {int, float}:
        us = np.fromiter(values, dtype=np.float64, count=n)
        if int not in types or (np.abs(us) < 2.0**53).all():
            exact = np.abs(us) >= _FLOAT_EXACT_US
            if float not in types:
                exact[:] = False  # ints convert exactly
            elif int in types and exact.any():
                exact &= np.array(list(map(type, values)), dtype=object) == float  # noqa: E721
            return _float_us_to_ns(us), exact
    ns = np.zeros(n, dtype=np.int64)
    exact = np.zeros(n, dtype=bool)
    is_str = np.fromiter(map(_is_str, values), dtype=bool, count=n)
    if is_str.any():  # string timestamps: parsed exactly, vectorised
        rows = np.flatnonzero(is_str)
        ns[rows], status = us_texts_to_ns([values[i].encode() for i in rows.tolist()])
        valid[rows[status != OK]] = False
    rest = np.flatnonzero(~is_str)
    sub = [values[i] for i in rest.tolist()]
    if sub and set(map(type, sub)) <= {int, float} and max(map(abs, sub)) < 2.0**53:
        ns[rest], exact[rest] = _us_to_ns(sub, valid[rest], required=required)
        return ns, exact
    for i, value in zip(rest.tolist(), sub, strict=True):  # nulls, huge ints: per value
        converted = value_to_ns(value) if value is not None else None
        if converted is None or not -(2**63) <= converted < 2**63:
            if value is not None or required:
                valid[i] = False
        else:
            ns[i] = converted
    return ns, exact


def _is_str(value: Any) -> bool:
    return type(value) is str


def _float_us_to_ns(us: np.ndarray) -> np.ndarray:
    """Nearest ns of float µs, split into whole and fraction so the fraction keeps precision."""
    whole = np.trunc(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)
