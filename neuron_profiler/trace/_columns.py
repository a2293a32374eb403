"""Decode pieces of a ``traceEvents`` array into typed numpy columns: the loader's fast core.

Each piece (a JSON array of up to about 1 MB of events) is decoded by msgspec into small ``Event``
structs (args kept as ``msgspec.Raw``), turned into columns with whole-list numpy conversions,
names and categories interned through one dict touched once per distinct string, args stored as
one raw buffer per piece. Per-event Python runs only for rare cases: mistyped events (skipped and
counted), metadata ``M`` events, and ``B``/``E`` pairs; attribute reads only for the rows that
need them (instants' scope, flows' id and ``bp``). How each event was spelled (scope, ``"I"``, no
``cat``, ``bp``, digit-string pids, other phase letters) goes to the FORM column so an export can
write it back. The structs of a piece are dropped before the next is decoded, so memory stays
close to the final columns.

    sink = ColumnSink(); sink.add_piece(b'[{"ph":"X","ts":1.5,"dur":2,"name":"k"}]')
    columns = sink.columns()
"""

from __future__ import annotations

import itertools
import operator
import re
from array import array
from collections import defaultdict
from dataclasses import dataclass
from itertools import chain, compress, repeat
from typing import Any

import msgspec
import numpy as np

from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace._metaargs import (
    LazyDicts,
    MetaArgs,
    Part,
    ViewArgs,
    decode_view_args,
    plain,
)
from neuron_profiler.trace._numtext import OK, python_int_column, us_texts_to_ns, value_to_ns
from neuron_profiler.trace._rawargs import RawArgs, RawArgsBuilder
from neuron_profiler.trace.kinds import kind_of
from neuron_profiler.trace.model import (
    META_VIEWS,
    MetaTable,
    view_by_process,
    view_entries,
    view_field,
    view_values,
)
from neuron_profiler.trace.repair import fix_utf8, repair_value, with_headroom

_NONE = msgspec.Raw(b"")
_NO_CAT = "\x00no cat"  # Event.cat when the event has none: interned as id -1, never stored
_UNKNOWN = -2  # _intern's mark of a string not interned yet (ids are >= 0, the no-cat -1)
_FLOAT_EXACT_US = 2.0**43  # below this a float64 µs value still pins down a unique ns
_INT_EXACT_US = 2**53  # integer µs below this: * 1000 fits int64 (the general path's bound)
LABEL_ID_BASE = -(1 << 31)  # string pids/tids get ids from here up: int32, far from real ids
# (CUDA writes tid -1 for context syncs, so ids like -1, -2 must stay real ids)
_META = 255  # ph code of metadata events while a piece is decoded (they never become rows)
_DETAIL_SHIFT = 8  # ph codes while decoding: Phase | Form detail bits << 8 ("I", other letters)
_SCOPE_CODES = {letter: code for code, letter in enumerate(S.SCOPES) if letter}
_AT_INDEX = re.compile(r"at `\$\[(\d+)\]")
# One byte of each args key the id columns read ("External id" and "external id": x,
# "correlation": c, "stream": s) and the escape that could spell one otherwise: where a text
# holds none of them, it holds none of those keys (``_no_ids``)
_ID_KEY_BYTES = (b"x", b"c", b"s", b"\\")
_PYTHON = int(S.EventKind.PYTHON)
_QUIET_ROWS = 512  # python_function rows of a piece worth a buffer of their own
_MAX_SPLITS = 16  # validation errors in one piece before it is decoded event by event
_OUT_OF_RANGE = "Number out of range"  # msgspec: a float beyond float64 (1e400) in a typed field
_INT64 = (-(1 << 63), 1 << 63)
_NOT_UTF8 = "Invalid UTF-8"  # msgspec's message (it gives no offset)
_ROOM_MARGIN = 1.05  # room for rows: 5% more than the rate so far predicts (event sizes vary)
_ROOM_ROWS = 1024
# Phase codes as plain ints: an IntEnum member costs a class __getattr__ per use (3.11), and a
# piece's columns compare against them a dozen times
_INSTANT, _FLOW_START, _FLOW_END, _OTHER = map(
    int, (S.Phase.INSTANT, S.Phase.FLOW_START, S.Phase.FLOW_END, S.Phase.OTHER)
)


class Event(msgspec.Struct, gc=False):
    """The fields of a trace event the model keeps; unknown fields are skipped by msgspec.

    In the order Kineto writes them: msgspec looks a key up from the field after the previous
    one first, so this order decodes faster (about 5%) than any other tried."""

    ph: str = "X"
    # flows' and async events' id: any scalar (``ColumnSink._event_id`` reads it); UNSET: none
    id: int | float | str | bool | None | msgspec.UnsetType = msgspec.UNSET
    cat: str = _NO_CAT
    s: Any = ""  # instant scope (any JSON value: an odd one must not make the event mistyped)
    name: str = ""
    pid: int | float | str = 0  # (a float: pandas / numpy round trips write 100.0)
    tid: int | float | str = 0
    ts: int | float | str | None = None
    dur: int | float | str | None = 0
    args: msgspec.Raw = _NONE
    bp: Any = ""  # flow binding point
    id2: Any = None  # async events' {"local": id} / {"global": id}, read when "id" is absent


class _Times(msgspec.Struct, gc=False):
    """Exact JSON text of ts/dur, decoded only for pieces with floats too large for float64."""

    ts: msgspec.Raw = _NONE
    dur: msgspec.Raw = _NONE


class _ArgIds(msgspec.Struct, gc=False):
    external_id: int | float | str | None = msgspec.field(name=V.ARG_EXTERNAL_ID, default=-1)
    external_id_2021: int | float | str | None = msgspec.field(
        name=V.ARG_EXTERNAL_ID_2021, default=-1
    )
    correlation: int | float | str | None = msgspec.field(name=V.ARG_CORRELATION, default=-1)
    stream: Any = msgspec.field(name=V.ARG_STREAM, default=None)  # any value: int() decides


class _IntArgIds(msgspec.Struct, gc=False):
    """``_ArgIds`` as Kineto writes them (integers, or absent): the usual piece decodes with
    this, so the columns come straight from the values; any other spelling of one of them
    (text, a float, null, a bool, a number beyond int64) fails it, and the piece takes
    ``_ArgIds``, which reads every spelling."""

    external_id: int = msgspec.field(name=V.ARG_EXTERNAL_ID, default=-1)
    external_id_2021: int = msgspec.field(name=V.ARG_EXTERNAL_ID_2021, default=-1)
    correlation: int = msgspec.field(name=V.ARG_CORRELATION, default=-1)
    stream: int = msgspec.field(name=V.ARG_STREAM, default=-1)


_decode_events = msgspec.json.Decoder(list[Event]).decode
_decode_dicts = msgspec.json.Decoder(list[dict]).decode
_VIEW_CODES = {name: code for code, name in enumerate(META_VIEWS)}  # M event name -> its view
_decode_event = msgspec.json.Decoder(Event).decode
_decode_raws = msgspec.json.Decoder(list[msgspec.Raw]).decode
_decode_times = msgspec.json.Decoder(list[_Times]).decode
_decode_time = msgspec.json.Decoder(_Times).decode
_decode_arg_ids = msgspec.json.Decoder(list[_ArgIds]).decode
_decode_arg_id = msgspec.json.Decoder(_ArgIds).decode
_decode_int_arg_ids = msgspec.json.Decoder(list[_IntArgIds]).decode


def _id_value(value: Any) -> tuple[int, bool]:
    """An args id (External id, correlation) as int64, -1 when absent or not an integer;
    True when it was a number beyond int64 (dropped, counted)."""
    if value is None or isinstance(value, bool):
        return -1, False
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):  # "0x1f", 1e400 kept as text, inf
        return -1, _beyond_int64(value)
    if _INT64[0] <= number < _INT64[1]:
        return number, False
    return -1, True


def _id2_text(value: Any) -> str | None:
    """The ``id_labels`` text of an ``id2`` value that is the spec's (one key, "local" or
    "global", a string or an integer), else None (not read: the event has no id)."""
    if type(value) is not dict or len(value) != 1:
        return None
    ((key, the_id),) = value.items()
    if key not in ("local", "global") or type(the_id) not in (str, int):
        return None
    return S.ID2_LABEL + msgspec.json.encode(value).decode()


def _integer_of(value: int | float | str) -> tuple[int | None, str, bool]:
    """The int64 a pid, tid or event id stands for (None: none), the text it is labelled by
    otherwise, and whether it was a number beyond int64. One rule for all of them: an int
    within int64, an integral float within int64 (``100.0``: a pandas / numpy round trip) and
    text in the canonical decimal spelling (``"25738"``) are that integer; any other float is
    labelled by its Python text (``"100.5"``, ``"1e+20"``: the same label as that string),
    other text by itself, an int beyond int64 by its decimal digits."""
    if type(value) is float:
        if value.is_integer() and _INT64[0] <= value < _INT64[1]:
            return int(value), "", False
        value = repr(value)
    if isinstance(value, int):
        if _INT64[0] <= value < _INT64[1]:
            return value, "", False
        return None, str(value), True
    try:
        number = int(value)
    except ValueError:
        return None, value, _beyond_int64(value)
    if not _INT64[0] <= number < _INT64[1]:
        return None, value, True
    return (number, "", False) if str(number) == value else (None, value, False)


def _beyond_int64(value: Any) -> bool:
    """A number (or numeric text, ``"1e400"``) that int64 cannot hold."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return isinstance(value, int)
    return not _INT64[0] <= number < _INT64[1] and number == number  # (NaN is not a number)


def _id_column(values: list[Any]) -> tuple[np.ndarray, int]:
    """int64 ids from Python values and how many were dropped (beyond int64); values numpy
    cannot take go through ``_id_value`` once per distinct value."""
    if values and type(values[0]) is not str:  # strings ("25738", "0x1f"): by distinct value
        try:
            return np.fromiter(values, dtype=np.int64, count=len(values)), 0
        except (TypeError, ValueError, OverflowError):
            pass
    mapping = {v: _id_value(v) for v in set(values)}
    column = np.fromiter((mapping[v][0] for v in values), dtype=np.int64, count=len(values))
    dropped = {v for v, (_, lost) in mapping.items() if lost}
    return column, (sum(map(dropped.__contains__, values)) if dropped else 0)


def _phase_codes() -> dict[str, int]:
    """ph letter -> Phase code plus Form detail bits (<< _DETAIL_SHIFT); M -> _META."""
    codes = {letter: int(phase) for letter, phase in S.PH_CODES.items()}
    codes["I"] |= S.Form.CAPITAL_I << _DETAIL_SHIFT
    for index, letter in enumerate(S.OTHER_PHASES[1:], start=1):
        codes[letter] = int(S.Phase.OTHER) | index << _DETAIL_SHIFT
    codes["M"] = _META
    return codes


def _phase_table(codes: dict[str, int]) -> np.ndarray:
    """``codes`` of the one-letter ASCII phases indexed by the letter's byte (-1: none)."""
    table = np.full(128, -1, dtype=np.int64)
    for letter, code in codes.items():
        if len(letter) == 1 and letter.isascii():
            table[ord(letter)] = code
    return table


# built once: a sink copies the codes (it adds letters outside the format to its copy, which
# then take the dict path) and only reads the table
_PH_CODES = _phase_codes()
_PH_TABLE = _phase_table(_PH_CODES)


def _scope_codes(scopes: list[Any]) -> np.ndarray | int:
    """Form SCOPE bits of instants' ``s`` values (0: absent or not a Chrome scope)."""
    first = scopes[0]
    if isinstance(first, str) and scopes.count(first) == len(scopes):  # usual: one scope
        return _SCOPE_CODES.get(first, 0)
    try:
        return np.fromiter(
            map(_SCOPE_CODES.get, scopes, repeat(0)), dtype=np.uint8, count=len(scopes)
        )
    except TypeError:  # an unhashable value (a list, an object): not a scope
        return np.array(
            [_SCOPE_CODES.get(v, 0) if isinstance(v, str) else 0 for v in scopes], dtype=np.uint8
        )


class ColumnSink:
    """Accumulates decoded pieces; ``columns()`` and the attributes feed the ``Trace``."""

    def __init__(self) -> None:
        self.strings: dict[str, int] = {}
        self._lookup: dict[str, int] = {_NO_CAT: -1}  # strings plus the no-cat marker
        self.labels: dict[str, int] = {}
        self._packed_idents: dict[int | str, int] = {}  # pid/tid -> id * 2 + text flag
        self._metas: list[_MetaChunk] = []  # per piece; ts_ns relative to baseTimeNanoseconds
        self.process_names: dict[int, str] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.process_sort: dict[int, int] = {}
        self.thread_sort: dict[tuple[int, int], int] = {}
        self._views: dict[str, dict[Any, Any]] = {
            "process_names": self.process_names,
            "thread_names": self.thread_names,
            "process_sort_index": self.process_sort,
            "thread_sort_index": self.thread_sort,
        }
        self.skipped = 0
        self.repairs = {
            "replaced_text": 0,
            "replaced_values": 0,
            "replaced_nesting": 0,
            "dropped_ids": 0,
            "relabelled_ids": 0,
        }  # LoadReport fields
        self._relabelled: set[int] = set()  # label ids given to pids/tids beyond int64
        self.rows = 0
        self.seen = 0  # events decoded, whatever became of them
        self._args = RawArgsBuilder()
        self._table = _ColumnTable()
        self.expected_bytes: int | None = None  # the loader's hint: the text to come
        self._bytes_decoded = 0
        self._piece_rows = self._piece_bytes = 0  # the latest piece's (predicts the rest)
        self._cat_kinds: dict[int, int] = {}
        self._ph_codes: dict[str, int] = dict(_PH_CODES)  # (unknown letters are added)

    # ---- decoding -------------------------------------------------------------------------
    def add_piece(self, text: bytes) -> None:
        """Decode one JSON array of events. Raises msgspec.DecodeError if it is malformed and
        RecursionError if it is nested deeper than the decoder allows, both before anything is
        kept (the caller then cuts elsewhere or repairs)."""
        skipped_before = self.skipped
        try:
            events: list[Event] = with_headroom(_decode_events, text)
            raws = None
        except msgspec.ValidationError as err:
            events, raws = self._decode_leniently(text, err)
        except msgspec.DecodeError as err:  # bytes that are not UTF-8 in a name, a category...
            if _NOT_UTF8 not in str(err):
                raise
            return self.add_piece(self._valid_utf8(text))  # (raises if malformed as well)
        self.seen += len(events) + self.skipped - skipped_before
        self._bytes_decoded += len(text)
        if events:
            self._add_events(events, text, raws)

    def _valid_utf8(self, text: bytes) -> bytes:
        """``text`` (the elements of a JSON array) with bytes that are not UTF-8 replaced by
        U+FFFD, counted per event; raises DecodeError if the text is malformed."""
        elements = with_headroom(_decode_raws, text)  # raises before anything is counted
        fixed = [fix_utf8(bytes(e)) for e in elements]
        self.repairs["replaced_text"] += sum(bad for _, bad in fixed)
        return b"[" + b",".join(e for e, _ in fixed) + b"]"

    def _repaired_event(self, raw: bytes) -> tuple[Event, bytes] | None:
        """An event msgspec rejected for a number beyond float range (``1e400``): the number
        kept as text, so that the event stays (its id dropped or relabelled, counted)."""
        fixed, how = repair_value(bytes(raw))
        try:
            event = _decode_event(fixed)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None
        if not times_unusable(fixed):  # else skipped as mistyped, and counted once, there
            self.repairs["replaced_values"] += 1
        return event, fixed

    def _decode_leniently(
        self, text: bytes, err: msgspec.ValidationError
    ) -> tuple[list[Event], list[msgspec.Raw | bytes]]:
        """Skip (and count) the mistyped events of a piece, keeping the rest; an event whose
        only fault is a number beyond float range is kept with that number as text."""
        raws: list[msgspec.Raw] = with_headroom(_decode_raws, text)
        events: list[Event] = []
        kept: list[msgspec.Raw | bytes] = []
        lo, splits = 0, 0
        while lo < len(raws):
            match = _AT_INDEX.search(str(err)) if err is not None else None
            if match is None or splits >= _MAX_SPLITS:
                for raw in raws[lo:]:
                    try:
                        events.append(_decode_event(raw))
                        kept.append(raw)
                    except msgspec.ValidationError as bad:
                        repaired = self._repaired_event(raw) if _OUT_OF_RANGE in str(bad) else None
                        if repaired is None:
                            self.skipped += 1
                        else:
                            events.append(repaired[0])
                            kept.append(repaired[1])
                break
            bad = lo + int(match.group(1))
            if bad > lo:
                events.extend(_decode_events(b"[" + b",".join(raws[lo:bad]) + b"]"))
                kept.extend(raws[lo:bad])
            repaired = self._repaired_event(raws[bad]) if _OUT_OF_RANGE in str(err) else None
            if repaired is None:
                self.skipped += 1
            else:
                events.append(repaired[0])
                kept.append(repaired[1])
            lo, splits, err = bad + 1, splits + 1, None
            if lo < len(raws):
                try:
                    events.extend(_decode_events(b"[" + b",".join(raws[lo:]) + b"]"))
                    kept.extend(raws[lo:])
                    break
                except msgspec.ValidationError as again:
                    err = again
        return events, kept

    def _add_events(self, events: list[Event], text: bytes, raws: list[msgspec.Raw] | None) -> None:
        codes = self._codes([e.ph for e in events])
        keep: np.ndarray | None = None
        if (codes == _META).any():
            keep = codes != _META
            if not keep.any():  # a piece of M events only (a metadata-heavy file opens so)
                self._add_metas(events, text, raws, ~keep)
                return
            self._add_metas(list(compress(events, (~keep).tolist())), text, raws, ~keep)
            events = list(compress(events, keep.tolist()))
            codes = codes[keep]
        if not events:
            return
        n = len(events)
        valid = np.ones(n, dtype=bool)
        ts_ns, dur_ns = self._times(events, text, raws, keep, valid)
        cols: dict[str, np.ndarray] = {S.TS_NS: ts_ns, S.DUR_NS: dur_ns}
        form = (codes >> _DETAIL_SHIFT).astype(np.uint8)
        codes &= 0xFF
        cols[S.PH] = codes.astype(np.uint8)
        cols[S.NAME_ID] = self._intern([e.name for e in events], self.strings)
        cols[S.CAT_ID] = self._intern([e.cat for e in events])
        if cols[S.CAT_ID].min() < 0:  # events without a "cat": "" in the model, NO_CAT in form
            absent = cols[S.CAT_ID] < 0
            form[absent] |= S.Form.NO_CAT
            cols[S.CAT_ID][absent] = self._intern([""])[0]
        cols[S.KIND] = self._kinds(cols[S.CAT_ID])
        for column, flag in ((S.PID, S.Form.PID_TEXT), (S.TID, S.Form.TID_TEXT)):
            values = [e.pid for e in events] if column == S.PID else [e.tid for e in events]
            cols[column], texts = self._idents(values)
            self._count_relabelled(cols[column])
            if texts is not None:
                form[texts] |= flag
        self._phase_details(events, codes, form, cols)
        self._args_columns([e.args for e in events], cols, valid)
        cols[S.FORM] = form
        if not valid.all():
            self.skipped += int((~valid).sum())
            cols = {k: v[valid] for k, v in cols.items()}
        self._piece_rows, self._piece_bytes = len(cols[S.TS_NS]), len(text)
        self.rows += self._piece_rows
        self._table.append(cols, self._capacity_for)

    def _phase_details(
        self, events: list[Event], codes: np.ndarray, form: np.ndarray, cols: dict[str, np.ndarray]
    ) -> None:
        """Instants' scope; flows' ``bp`` and ``id``; the ``id`` of other phases (async
        events). Attributes are read only on the rows of those phases, and a piece holding
        none of them (one count of each phase says so) costs nothing more."""
        n = len(events)
        cols[S.FLOW_ID] = np.full(n, -1, dtype=np.int64)
        present = np.bincount(codes, minlength=_OTHER + 1)
        if present[_INSTANT]:
            instants = (codes == _INSTANT).nonzero()[0]
            form[instants] |= _scope_codes(
                [e.s for e in events]
                if len(instants) == n
                else [events[i].s for i in instants.tolist()]
            )
        if not present[_FLOW_START : _FLOW_END + 1].any() and not present[_OTHER]:
            return
        flows = (codes >= _FLOW_START) & (codes <= _FLOW_END)
        id_rows = (flows | (codes == _OTHER)).nonzero()[0]
        everything = len(id_rows) == n
        ids = [e.id for e in events] if everything else [events[i].id for i in id_rows.tolist()]
        cols[S.FLOW_ID][id_rows] = self._event_ids(
            ids, lambda i: events[i].id2 if codes[i] == _OTHER else None, id_rows
        )
        for rows, kineto in (
            ((codes == _FLOW_END).nonzero()[0], "e"),
            ((flows & (codes != _FLOW_END)).nonzero()[0], ""),
        ):
            if len(rows):  # Kineto writes "bp":"e" on f events only: mark the exceptions
                bps = [events[i].bp for i in rows.tolist()]
                if bps.count(kineto) != len(bps):
                    usual = np.fromiter(
                        map(operator.eq, bps, repeat(kineto)), dtype=bool, count=len(bps)
                    )
                    form[rows[~usual]] |= S.Form.BP_FLIPPED

    def _add_metas(
        self, metas: list[Event], text: bytes, raws: list[msgspec.Raw] | None, where: np.ndarray
    ) -> None:
        """Keep every ``M`` event (``where``: their rows in the piece) and fill the name and
        sort-index dicts, in bulk: one decode of all their args, ids and flags as columns, each
        dict updated in one pass (in file order, so the last event of a key wins)."""
        valid = np.ones(len(metas), dtype=bool)
        times = [e.ts for e in metas]
        ts, exact = _us_to_ns(times, valid, required=False)
        self._exact_times(((ts, exact, "ts"),), text, raws, where, valid)
        if None in times:
            has_ts = np.fromiter(
                map(operator.is_not, times, repeat(None)), dtype=bool, count=len(metas)
            )
        else:
            has_ts = np.ones(len(metas), dtype=bool)
        args, view_args, all_dicts = self._metas_args(metas)
        if not all_dicts and set(map(type, args)) != {dict}:
            valid &= np.fromiter(map(_is_dict, args), dtype=bool, count=len(args))
        self.skipped += int((~valid).sum())
        keep = np.flatnonzero(valid)
        if len(keep) == 0:
            return
        if len(keep) < len(metas):
            pick = keep.tolist()
            if isinstance(args, LazyDicts):  # (a rejected ts: decode now, keep the rest)
                args = args.dicts()
            metas, args = [metas[i] for i in pick], [args[i] for i in pick]
            view_args = [view_args[i] for i in pick]
            ts, has_ts = ts[keep], has_ts[keep]
        pid, pid_text = self._idents([e.pid for e in metas])
        tid, tid_text = self._idents([e.tid for e in metas])
        if self._relabelled:
            self._count_relabelled(np.concatenate([pid, tid]))
        form = np.zeros(len(metas), dtype=np.uint8)
        if pid_text is not None:
            form[pid_text] |= S.Form.PID_TEXT
        if tid_text is not None:
            form[tid_text] |= S.Form.TID_TEXT
        cats = [e.cat for e in metas]
        if cats.count(_NO_CAT) == len(cats):  # usual: M events carry no "cat" (an identity test)
            cats = [None] * len(cats)
        elif _NO_CAT in cats:
            cats = [None if c is _NO_CAT else c for c in cats]
        chunk = _MetaChunk(
            name=[e.name for e in metas],
            pid=pid,
            tid=tid,
            args=args,
            ts_ns=ts,
            has_ts=has_ts,
            cat=cats,
            form=form,
        )
        self._metas.append(chunk)
        self._apply_views(chunk, view_args)

    def _metas_args(self, metas: list[Event]) -> tuple[Part, list[Any], bool]:
        """Every M event's args ({} when absent), what the name and sort-index dicts read of
        them, and True if all are objects. Usually one typed decode of all of them
        (``_metaargs.ViewArgs``) with their text kept, decoded into dicts when first read;
        text a dict decode could read otherwise (``_metaargs.plain``) is decoded into dicts at
        once, and the rare piece the decoder refuses event by event (``_meta_args``'
        repairs)."""
        texts = [e.args for e in metas]
        absent: list[int] = []
        if _NONE in texts:  # (absent args are the default object: found by identity, at once)
            lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
            absent = np.flatnonzero(lengths == 0).tolist()
        for i in absent:
            texts[i] = b"{}"  # decodes to the {} an event without args has
        joined = b"[" + b",".join(texts) + b"]"
        try:
            typed = decode_view_args(joined)
            if plain(joined):
                return LazyDicts(joined, len(texts)), typed, True
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
        try:
            dicts = _decode_dicts(joined)
            return dicts, dicts, True
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
        try:
            anything = msgspec.json.decode(joined)
            return anything, anything, False
        except (msgspec.ValidationError, msgspec.DecodeError):
            out = [self._meta_args(bytes(t)) for t in texts]
            for i in absent:
                out[i] = {}
            return out, out, False

    def _apply_views(self, chunk: _MetaChunk, view_args: list[Any]) -> None:
        """The name and sort-index dicts, by ``MetaEvent.entry``'s rule (``view_by_process``,
        ``view_field``, ``view_entries``), one update per dict. ``view_args``: the events'
        args as dicts or as ``_metaargs.ViewArgs``."""
        views = np.fromiter(
            map(_VIEW_CODES.get, chunk.name, repeat(-1)), dtype=np.int8, count=len(chunk.name)
        )
        typed = bool(view_args) and isinstance(view_args[0], ViewArgs)
        pid, tid = chunk.pid.tolist(), chunk.tid.tolist()
        for code, view in enumerate(META_VIEWS.values()):
            at = np.flatnonzero(views == code).tolist()
            if not at:
                continue
            pick = operator.itemgetter(*at) if len(at) > 1 else _one(at[0])
            keys = pick(pid) if view_by_process(view) else zip(pick(pid), pick(tid), strict=True)
            if typed:
                key, _ = view_field(view)  # (ViewArgs' fields: the keys, absent as .get gives)
                values = view_entries(view, list(map(operator.attrgetter(key), pick(view_args))))
            else:
                values = view_values(view, pick(view_args))
            self._views[view].update(zip(keys, values, strict=True))

    def meta_table(self, base_ns: int) -> MetaTable:
        """Every kept M event, ts made absolute with the file's base (known at the end)."""
        chunks, self._metas = self._metas, []
        ts = np.concatenate([c.ts_ns for c in chunks]) if chunks else np.zeros(0, np.int64)
        has_ts = np.concatenate([c.has_ts for c in chunks]) if chunks else np.zeros(0, bool)
        if base_ns:
            ts = np.where(has_ts, ts + base_ns, ts)
        cat = lambda key: list(chain.from_iterable(getattr(c, key) for c in chunks))  # noqa: E731
        arr = lambda key, dtype: (  # noqa: E731
            np.concatenate([getattr(c, key) for c in chunks]).astype(dtype, copy=False)
            if chunks
            else np.zeros(0, dtype)
        )
        return MetaTable(
            name=cat("name"),
            pid=arr("pid", np.int64),
            tid=arr("tid", np.int64),
            args=MetaArgs([c.args for c in chunks]),
            ts_ns=ts,
            has_ts=has_ts,
            cat=cat("cat"),
            form=arr("form", np.uint8),
        )

    # ---- columns --------------------------------------------------------------------------
    def _times(
        self,
        events: list[Event],
        text: bytes,
        raws: list[msgspec.Raw] | None,
        keep: np.ndarray | None,
        valid: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        ts, ts_exact = _us_to_ns([e.ts for e in events], valid, required=True)
        dur, dur_exact = _us_to_ns([e.dur for e in events], valid, required=False)
        self._exact_times(((ts, ts_exact, "ts"), (dur, dur_exact, "dur")), text, raws, keep, valid)
        return ts, dur

    @staticmethod
    def _exact_times(
        columns: tuple[tuple[np.ndarray, np.ndarray, str], ...],
        text: bytes,
        raws: list[msgspec.Raw] | None,
        keep: np.ndarray | None,
        valid: np.ndarray,
    ) -> None:
        """Large floats: the ns digits come from the JSON text of the rows that need it."""
        if not any(need.any() for _, need, _ in columns):
            return
        times = _decode_times(text) if raws is None else [_decode_time(r) for r in raws]
        if keep is not None:
            times = list(compress(times, keep))
        for column, need, field in columns:
            rows = np.flatnonzero(need)
            if len(rows):
                exact, status = us_texts_to_ns([getattr(times[i], field) for i in rows.tolist()])
                column[rows] = exact
                valid[rows[status != OK]] = False

    def _codes(self, ph: list[str]) -> np.ndarray:
        letters = "".join(ph)
        if len(letters) == len(ph) and letters.isascii():  # usual: one ASCII letter each
            found = _PH_TABLE[np.frombuffer(letters.encode("ascii"), dtype=np.uint8)]
            if (found >= 0).all():
                return found
        codes = self._ph_codes
        try:
            return np.fromiter(map(codes.__getitem__, ph), dtype=np.int64, count=len(ph))
        except KeyError:
            for letter in set(ph).difference(codes):
                codes[letter] = int(S.Phase.OTHER)
        return np.fromiter(map(codes.__getitem__, ph), dtype=np.int64, count=len(ph))

    def _intern(self, values: list[str], lookup: dict[str, int] | None = None) -> np.ndarray:
        """String ids; with the default lookup (categories) the no-cat marker is -1, never
        stored. Names pass ``self.strings``, so a name spelled like the marker is a name.

        One pass numbers the piece's distinct strings in first-seen order (a small dict: a
        piece repeats a few dozen names thousands of times); only those are looked up in (or
        added to, in that order) the trace's strings, and the ids gathered from them."""
        lookup = self._lookup if lookup is None else lookup
        distinct: defaultdict[str, int] = defaultdict(itertools.count().__next__)
        local = np.fromiter(map(distinct.__getitem__, values), dtype=np.int32, count=len(values))
        table = np.fromiter(
            map(lookup.get, distinct, repeat(_UNKNOWN)), dtype=np.int32, count=len(distinct)
        )
        new = (table == _UNKNOWN).nonzero()[0]
        if len(new):
            texts = list(distinct)
            strings = self.strings
            for i in new.tolist():
                text = texts[i]
                strings[text] = len(strings)
                if text != _NO_CAT:
                    self._lookup[text] = strings[text]
                table[i] = lookup[text]
        return table[local]

    def _kinds(self, cat_ids: np.ndarray) -> np.ndarray:
        names = None
        for sid in np.bincount(cat_ids).nonzero()[0].tolist():  # (np.unique imports numpy.ma)
            if sid not in self._cat_kinds:
                names = names or list(self.strings)
                self._cat_kinds[sid] = int(kind_of(names[sid]))
        table = np.zeros(len(self.strings), dtype=np.uint8)
        table[list(self._cat_kinds)] = list(self._cat_kinds.values())
        return table[cat_ids]

    def _ident(self, value: int | float | str) -> int:
        """A pid/tid: the integer it stands for (``_integer_of``), else a label id of its text.
        Only the canonical decimal spelling of text counts as a number, so writing it back
        restores the text; a number beyond int64 (or ``"1e400"``) is labelled too, remembered
        for the count."""
        number, text, beyond = _integer_of(value)
        if number is not None:
            return number
        label = LABEL_ID_BASE + self.labels.setdefault(text, len(self.labels))
        if beyond:
            self._relabelled.add(label)
        return label

    def _event_id(self, value: Any) -> int:
        """A flow's or async event's ``id`` as its ``flow_id``: -1 when it has none (absent or
        null). Ids are compared as chrome://tracing compares them, by their text (Catapult keys
        an async tree by ``cat + ":" + id`` in JavaScript), with ``_integer_of``'s rule for
        numbers: ``3``, ``3.0`` and ``"3"`` are one id; ``3.5`` is the label ``"3.5"`` (the
        same as that string), ``true`` the label ``"true"``; an int beyond int64 (``2**64 -
        1``) the label of its digits. An integer the column cannot hold as itself, -1 (no id)
        and the label ids' band below it, is the label of its digits too, so an explicit
        ``-1`` is an id. Text is never read as hex (``"0x1"`` is not ``1``)."""
        if value is None or value is msgspec.UNSET:
            return -1
        if type(value) is bool:
            value = "true" if value else "false"  # (JavaScript's text of the value)
        number, text, _ = _integer_of(value)
        if number is not None:
            if not LABEL_ID_BASE <= number < 0:
                return number
            text = str(number)
        return LABEL_ID_BASE + self.labels.setdefault(text, len(self.labels))

    def _event_ids(self, ids: list[Any], id2: Any, rows: np.ndarray) -> np.ndarray:
        """``flow_id`` of each ``id`` (``_event_id``); an async event without one gets its
        ``id2`` object's (``id2(row)``) as a label (``schema.ID2_LABEL``). Plain ints within
        int64 (Kineto's flows) take one conversion and one comparison for the band of labels;
        anything else goes through ``_event_id`` once per distinct value."""
        try:  # (array('q') refuses floats, text, None and UNSET; np.fromiter truncates 3.5)
            column = np.frombuffer(array("q", ids), dtype=np.int64)
        except (TypeError, OverflowError):
            column = None
        else:  # it takes bools as 0 and 1: only those values need a look
            if any(type(ids[i]) is bool for i in ((column >> 1) == 0).nonzero()[0].tolist()):
                column = None
        if column is None:  # (bools apart: True == 1 as a dict key)
            keys = list(zip(map(type, ids), ids, strict=True))
            memo = {key: self._event_id(key[1]) for key in dict.fromkeys(keys)}
            column = np.fromiter(map(memo.__getitem__, keys), dtype=np.int64, count=len(ids))
        else:
            band = ((column >= LABEL_ID_BASE) & (column < 0)).nonzero()[0]
            for i in band.tolist():  # (-1, -2, ...: ids, not "none" or a label)
                column[i] = self._event_id(int(column[i]))
        missing = (column == -1).nonzero()[0]
        labels = self.labels
        for i in missing.tolist():
            text = _id2_text(id2(int(rows[i])))
            if text is not None:
                column[i] = LABEL_ID_BASE + labels.setdefault(text, len(labels))
        return column

    def _count_relabelled(self, ids: np.ndarray) -> None:
        """pids/tids beyond int64 that became labels (checked only once there are any)."""
        if self._relabelled:
            self.repairs["relabelled_ids"] += int(
                np.isin(ids, np.fromiter(self._relabelled, dtype=np.int64)).sum()
            )

    def _is_label(self, ident: int) -> bool:
        return LABEL_ID_BASE <= ident < LABEL_ID_BASE + len(self.labels)

    def _idents(self, values: list[int | float | str]) -> tuple[np.ndarray, np.ndarray | None]:
        """pid/tid column, and which rows spelled their number as a string (None: none did).
        Floats take the memo path (``array("q")`` refuses them), so ints cost nothing more."""
        n = len(values)
        if values and type(values[0]) is not str:
            try:  # array('q') refuses strings (np.fromiter would parse "25738"), as fast
                return np.frombuffer(array("q", values), dtype=np.int64), None
            except (TypeError, ValueError, OverflowError):
                pass
        # strings: one pass through a memo of id * 2 + "a number written as text"
        memo = self._packed_idents
        try:
            both = np.fromiter(map(memo.__getitem__, values), dtype=np.int64, count=n)
        except KeyError:
            for value in [v for v in dict.fromkeys(values) if v not in memo]:  # first-seen order
                ident = self._ident(value)
                if not -(2**62) <= ident < 2**62:  # cannot be packed: the plain way
                    return self._idents_unpacked(values)
                memo[value] = ident * 2 + (type(value) is str and not self._is_label(ident))
            both = np.fromiter(map(memo.__getitem__, values), dtype=np.int64, count=n)
        texts = (both & 1).astype(bool)
        return both >> 1, texts if texts.any() else None

    def _idents_unpacked(
        self, values: list[int | float | str]
    ) -> tuple[np.ndarray, np.ndarray | None]:
        mapping = {v: self._ident(v) for v in dict.fromkeys(values)}  # labels in first-seen order
        ids = np.fromiter(map(mapping.__getitem__, values), dtype=np.int64, count=len(values))
        texts = {v for v, i in mapping.items() if type(v) is str and not self._is_label(i)}
        if not texts:
            return ids, None
        return ids, np.fromiter(map(texts.__contains__, values), dtype=bool, count=len(values))

    def _args_columns(
        self, args: list[msgspec.Raw], cols: dict[str, np.ndarray], valid: np.ndarray
    ) -> None:
        n = len(args)
        lengths = np.fromiter(map(len, args), dtype=np.int64, count=n)
        has = lengths > 2  # b"" (absent) and b"{}" carry nothing
        for i in ((lengths > 0) & (lengths <= 4)).nonzero()[0].tolist():  # (usually none)
            size = int(lengths[i])
            if size == 4 and bytes(args[i]) == b"null":
                has[i] = False
            elif size <= 2 and bytes(args[i]) != b"{}":  # 5, [], "": not an object, like
                valid[i] = False  # longer ones
        ext = np.full(n, -1, dtype=np.int64)
        corr = np.full(n, -1, dtype=np.int64)
        args_row = np.full(n, -1, dtype=np.int64)
        stream = np.full(n, -1, dtype=np.int64)
        python = has & (cols[S.KIND] == _PYTHON)
        if np.count_nonzero(python) < _QUIET_ROWS:
            groups = [has]
        else:  # python_function rows apart: their args usually spell no id (``_no_ids``)
            groups = [has & ~python, python]
        for mask in groups:
            group = mask.nonzero()[0]
            if not len(group):
                continue
            chosen = list(args) if len(group) == n else list(compress(args, mask.tolist()))
            buffer, sizes = _args_buffer(chosen, lengths[group])
            if not buffer.isascii() and not _utf8(buffer):  # msgspec skips args' bytes
                for i, raw in enumerate(chosen):
                    chosen[i], bad = fix_utf8(bytes(raw))
                    self.repairs["replaced_text"] += bad
                buffer, sizes = _args_buffer(
                    chosen, np.fromiter(map(len, chosen), dtype=np.int64, count=len(chosen))
                )
            starts = np.cumsum(sizes + 1) - sizes
            if _no_ids(buffer, starts):
                id_columns = None
            else:
                id_columns = _int_id_columns(buffer)
                if id_columns is None:
                    id_columns, buffer, sizes = self._id_columns(
                        chosen, buffer, sizes, group, valid
                    )
                    starts = np.cumsum(sizes + 1) - sizes
            args_row[group] = self._args.add(buffer, starts, sizes) + np.arange(len(group))
            if id_columns is not None:
                ext[group], corr[group], stream[group] = id_columns
        cols[S.EXTERNAL_ID], cols[S.CORRELATION], cols[S.ARGS_ROW] = ext, corr, args_row
        cols[S.STREAM] = stream

    def _id_columns(
        self,
        chosen: list[msgspec.Raw | bytes],
        buffer: bytes,
        sizes: np.ndarray,
        rows: np.ndarray,
        valid: np.ndarray,
    ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], bytes, np.ndarray]:
        """External id, correlation and stream of args spelled any way (``_ArgIds``): ids
        beyond int64 dropped (counted); the buffer is rebuilt if a value had to be repaired."""
        try:
            ids = _decode_arg_ids(buffer)
        except msgspec.ValidationError:  # an args value that is not an object, or 1e400
            ids, fixed = self._arg_ids_one_by_one(chosen, rows, valid)
            if fixed:
                buffer, sizes = _args_buffer(
                    chosen, np.fromiter(map(len, chosen), dtype=np.int64, count=len(chosen))
                )
        # "External id", else 2021 Kineto's "external id" (inline: a call per row costs)
        ext, dropped_ext = _id_column(
            [a.external_id if a.external_id != -1 else a.external_id_2021 for a in ids]
        )
        corr, dropped_corr = _id_column([a.correlation for a in ids])
        self.repairs["dropped_ids"] += dropped_ext + dropped_corr
        stream = python_int_column([a.stream for a in ids])
        return (ext, corr, stream), buffer, sizes

    def _arg_ids_one_by_one(
        self, chosen: list[msgspec.Raw | bytes], rows: np.ndarray, valid: np.ndarray
    ) -> tuple[list[_ArgIds], bool]:
        """Ids of each args object; mistyped args make their event invalid; a number beyond
        float range (``1e400``) is rewritten as text in ``chosen`` (True if any was)."""
        ids: list[_ArgIds] = []
        fixed = False
        for i, (row, raw) in enumerate(zip(rows.tolist(), chosen, strict=True)):
            try:
                ids.append(_decode_arg_id(raw))
                continue
            except msgspec.ValidationError as err:
                if _OUT_OF_RANGE in str(err):
                    text, _ = repair_value(bytes(raw))
                    try:
                        ids.append(_decode_arg_id(text))
                        chosen[i], fixed = text, True
                        self.repairs["replaced_values"] += 1
                        continue
                    except (msgspec.ValidationError, msgspec.DecodeError):
                        pass
            valid[row] = False
            ids.append(_ArgIds())
        return ids, fixed

    def _meta_args(self, text: bytes) -> Any:
        """Decoded args of an ``M`` event; a number beyond float range is kept as text."""
        try:
            return msgspec.json.decode(text)
        except msgspec.ValidationError:  # 1e400
            fixed, _ = repair_value(text)
            try:
                value = msgspec.json.decode(fixed)
            except (msgspec.ValidationError, msgspec.DecodeError):
                return None
            self.repairs["replaced_values"] += 1
            return value
        except msgspec.DecodeError as err:
            fixed, bad = fix_utf8(text)
            if not bad or _NOT_UTF8 not in str(err):
                return None
            self.repairs["replaced_text"] += 1
            return self._meta_args(fixed)

    def _capacity_for(self, rows: int) -> int:
        """Rows to make room for when ``rows`` do not fit: what the rest of the text the loader
        expects (``expected_bytes``: a plain file's size, a gzip file's trailer) will hold (a
        little more) at the rate so far or at the latest piece's, whichever is more, else (no
        hint, or more text than it said: a gzip file of several members) twice as many. (A file
        that opens with its metadata events, which make no rows, would otherwise be predicted
        short again and again, each growth copying every row so far: 5 growths, 37 ms of a
        1.3 s load of 300k ``M`` events then 600k events.)"""
        if (
            not self.expected_bytes
            or not self._bytes_decoded
            or self._bytes_decoded >= self.expected_bytes
        ):
            return 2 * rows
        rate = max(1.0, self.expected_bytes / self._bytes_decoded)
        so_far = int(rows * rate * _ROOM_MARGIN) + _ROOM_ROWS
        rest = max(0, self.expected_bytes - self._bytes_decoded)
        recent = self._piece_rows / max(1, self._piece_bytes)  # rows per byte of this piece
        return max(so_far, rows + int(rest * recent * _ROOM_MARGIN) + _ROOM_ROWS)

    # ---- a second sink's rows appended (the split load) ------------------------------------
    def part(self) -> SinkPart:
        """Everything this sink decoded, to be appended to another sink (``absorb``): the
        loader's child process decodes a file's second half into a sink of its own."""
        return SinkPart(
            columns=self.columns(),
            strings=list(self.strings),
            labels=list(self.labels),
            relabelled=sorted(self._relabelled),
            metas=self._metas,
            views=self._views,
            args=self._args,
            skipped=self.skipped,
            seen=self.seen,
            rows=self.rows,
            repairs=self.repairs,
        )

    def absorb(self, part: SinkPart) -> None:
        """Append the rows of a sink that decoded the events after this one's, as if this sink
        had decoded them: its string ids and label ids renumbered into this sink's (new ones
        in its first-seen order), its args after these, its M events and names after these (so
        a later name still wins), its counts added."""
        strings = self._intern(part.strings, self.strings)  # (new ones added, in order)
        labels = self._label_renumbering(part.labels)
        cols = part.columns
        if len(strings):
            cols[S.NAME_ID] = strings[cols[S.NAME_ID]]
            cols[S.CAT_ID] = strings[cols[S.CAT_ID]]
        for column in (S.PID, S.TID, S.FLOW_ID):  # (text ids are labels too)
            cols[column] = _relabel(cols[column], labels)
        self._relabelled.update(_relabel(np.asarray(part.relabelled, np.int64), labels).tolist())
        has_args = cols[S.ARGS_ROW] >= 0
        cols[S.ARGS_ROW][has_args] += self._args.extend(part.args)
        if len(cols[S.TS_NS]):
            self._table.append_last(cols)
        for chunk in part.metas:
            chunk.pid, chunk.tid = _relabel(chunk.pid, labels), _relabel(chunk.tid, labels)
            self._metas.append(chunk)
        for name, view in part.views.items():
            self._views[name].update(
                {_relabel_key(key, labels): value for key, value in view.items()}
            )
        self.skipped += part.skipped
        self.seen += part.seen
        self.rows += part.rows
        for key, count in part.repairs.items():
            self.repairs[key] += count

    def _label_renumbering(self, labels: list[str]) -> np.ndarray:
        """This sink's label id of each of another sink's labels (added here when new)."""
        return np.fromiter(
            (LABEL_ID_BASE + self.labels.setdefault(text, len(self.labels)) for text in labels),
            dtype=np.int64,
            count=len(labels),
        )

    # ---- result ---------------------------------------------------------------------------
    def columns(self) -> dict[str, np.ndarray]:
        """Every event column, the rows of all pieces in order."""
        table, self._table = self._table, _ColumnTable()
        return table.filled()

    def raw_args(self) -> RawArgs:
        return self._args.build()


class _ColumnTable:
    """The event columns, each piece's rows written in place into arrays with room to spare.

    Concatenating per-piece arrays at the end would allocate (and on a VM fault in, at
    ms per MB) every column a second time and hold both copies at once; room reserved for the
    rows a file is expected to hold is never touched, so it costs no memory."""

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}
        self._rows = 0

    def append(self, cols: dict[str, np.ndarray], capacity_for: Any) -> None:
        """Write a piece's columns after the rows so far; ``capacity_for(rows)`` says how many
        rows to make room for when they do not fit."""
        start = self._rows
        end = start + len(cols[S.TS_NS])
        if not self._arrays or end > len(self._arrays[S.TS_NS]):
            self._grow_to_one_of(max(end, capacity_for(end)), 2 * end, end)
        for name in S.EVENT_COLUMNS:  # (a piece lacking one raises: no row left unwritten)
            self._arrays[name][start:end] = cols[name]
        self._rows = end

    def _grow_to_one_of(self, *capacities: int) -> None:
        """Room for the first of ``capacities`` that maps. A prediction beyond what maps (a
        cut-off gzip file's trailer may claim any size) falls back to twice the rows, as with
        no prediction, before the rows at hand alone: growing by one piece at a time would
        copy every row so far at each piece."""
        for capacity in capacities[:-1]:
            try:
                self._grow(capacity)
                return
            except (MemoryError, ValueError):
                pass
        self._grow(capacities[-1])

    def append_last(self, cols: dict[str, np.ndarray]) -> None:
        """``append`` the last rows there will be: room for exactly these, made by resizing
        each column in place where it can (``realloc``: the rows so far are not copied, which
        on a VM means not faulting every one of them in afresh), else as ``append`` does."""
        end = self._rows + len(cols[S.TS_NS])
        if self._arrays and end > len(self._arrays[S.TS_NS]):
            for array in self._arrays.values():
                if not (array.flags.owndata and array.flags.c_contiguous):
                    break
            else:  # (nothing else refers to these arrays while the table fills them)
                for array in self._arrays.values():
                    array.resize(end, refcheck=False)
        self.append(cols, lambda rows: rows)

    def _grow(self, capacity: int) -> None:
        """Every column with room for ``capacity`` rows (all mapped before any is replaced)."""
        grown = {
            name: np.empty(capacity, dtype=S.COLUMN_DTYPES.get(name, np.int64))
            for name in S.EVENT_COLUMNS
        }
        for name, filled in self._arrays.items():
            grown[name][: self._rows] = filled[: self._rows]
        self._arrays = grown

    def filled(self) -> dict[str, np.ndarray]:
        if not self._arrays:
            return {n: np.zeros(0, dtype=S.COLUMN_DTYPES.get(n, np.int64)) for n in S.EVENT_COLUMNS}
        return {name: self._arrays[name][: self._rows] for name in S.EVENT_COLUMNS}


def _relabel(ids: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """pid/tid ids with another sink's label ids (``LABEL_ID_BASE`` + k) replaced by
    ``labels[k]``; numbers unchanged."""
    if not len(labels):
        return ids
    k = ids - LABEL_ID_BASE
    hit = (k >= 0) & (k < len(labels))
    if not hit.any():
        return ids
    return np.where(hit, labels[np.where(hit, k, 0)], ids)


def _relabel_key(key: Any, labels: np.ndarray) -> Any:
    """A name dict's key (a pid, or a (pid, tid) pair) with ``_relabel``'s renumbering."""
    if not len(labels):
        return key
    if isinstance(key, tuple):
        return tuple(_relabel_key(part, labels) for part in key)
    k = key - LABEL_ID_BASE
    return int(labels[k]) if 0 <= k < len(labels) else key


@dataclass
class SinkPart:
    """A sink's decoded rows and state (``ColumnSink.part``), appended by ``absorb``."""

    columns: dict[str, np.ndarray]
    strings: list[str]  # in id order
    labels: list[str]  # in label-id order
    relabelled: list[int]  # label ids given to numbers beyond int64
    metas: list[_MetaChunk]
    views: dict[str, dict[Any, Any]]
    args: RawArgsBuilder
    skipped: int
    seen: int
    rows: int
    repairs: dict[str, int]


@dataclass
class _MetaChunk:
    """One piece's M events as columns (``MetaTable``'s fields, ts relative to the base)."""

    name: list[str]
    pid: np.ndarray
    tid: np.ndarray
    args: Part  # decoded dicts, or their text (decoded when first read)
    ts_ns: np.ndarray
    has_ts: np.ndarray
    cat: list[str | None]
    form: np.ndarray


def _one(i: int) -> Any:
    """``itemgetter(i)``, but giving a 1-tuple like ``itemgetter(i, j, ...)`` gives tuples."""
    return lambda values: (values[i],)


def _is_dict(value: Any) -> bool:
    return isinstance(value, dict)


def _utf8(text: bytes) -> bool:
    try:
        text.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _int_id_columns(buffer: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """External id (else 2021 Kineto's "external id"), correlation and stream columns of the
    args in ``buffer`` when they are all plain int64 integers (or absent), else None."""
    try:
        ids = _decode_int_arg_ids(buffer)
    except msgspec.ValidationError:
        return None
    n = len(ids)
    try:
        ext = np.fromiter([a.external_id for a in ids], dtype=np.int64, count=n)
        corr = np.fromiter([a.correlation for a in ids], dtype=np.int64, count=n)
        stream = np.fromiter([a.stream for a in ids], dtype=np.int64, count=n)
        absent = (ext == -1).nonzero()[0]
        if len(absent):
            ext[absent] = np.fromiter(
                [ids[i].external_id_2021 for i in absent.tolist()],
                dtype=np.int64,
                count=len(absent),
            )
    except OverflowError:  # beyond int64: dropped and counted by the general path
        return None
    return ext, corr, stream


def _no_ids(buffer: bytes, starts: np.ndarray) -> bool:
    """True if none of the args objects in ``buffer`` (``_args_buffer``'s array) can hold an
    id key: each key has a byte (``_ID_KEY_BYTES``) that is missing from the whole text, and no
    escape could spell one; all are objects. Then their ids are all absent, with no decode.
    (Kineto's python_function args, ``Python id`` / ``parent id`` / ``thread`` / ``module
    id``, hold none of those bytes: a deep trace's commonest rows cost a few ``memchr``
    instead of a decode.)"""
    if any(byte in buffer for byte in _ID_KEY_BYTES):
        return False
    return bool((np.frombuffer(buffer, np.uint8)[starts] == ord("{")).all())


def _args_buffer(chosen: list[msgspec.Raw | bytes], sizes: np.ndarray) -> tuple[bytes, np.ndarray]:
    """``[a,b,...]`` of the args texts, built with one copy (stored as is and decoded)."""
    first, last = chosen[0], chosen[-1]
    chosen[0] = b"[" + bytes(first)
    chosen[-1] = bytes(chosen[-1]) + b"]"
    buffer = b",".join(chosen)
    chosen[0], chosen[-1] = first, last  # (the texts stay reusable one by one)
    return buffer, sizes


def _us_to_ns(
    values: list[Any], valid: np.ndarray, *, required: bool
) -> tuple[np.ndarray, np.ndarray]:
    """ns from µs values (int / float / numeric str) and the rows whose float is too large to
    carry the ns digit (the caller parses their text instead). Unusable values clear ``valid``."""
    n = len(values)
    try:  # usual: integers only (2021 Kineto's epoch µs), below the general path's bound
        whole_us = np.frombuffer(array("q", values), dtype=np.int64)
        if (np.abs(whole_us) < _INT_EXACT_US).all():
            return whole_us * 1000, np.zeros(n, dtype=bool)
    except (TypeError, OverflowError):  # a float (at once, on the first), null, text, huge
        pass
    try:  # usual: numbers, small enough that float64 carries the ns digit
        us = np.frombuffer(array("d", values), dtype=np.float64)
        if (np.abs(us) < _FLOAT_EXACT_US).all():
            return _float_us_to_ns(us), np.zeros(n, dtype=bool)
    except (TypeError, OverflowError):  # null, text, an int beyond float range
        pass
    types = set(map(type, values))
    if types == {type(None)}:  # no value at all (metadata events often have no ts)
        if required:
            valid[:] = False
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
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


def times_unusable(event: bytes) -> bool:
    """Whether an event's ``ts`` or ``dur`` is text that is no time (``"NaN"`` once repaired):
    the columns then skip the event as mistyped (``_numtext.us_texts_to_ns``' rule)."""
    try:
        times = _decode_time(event)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return False
    texts = [
        msgspec.json.decode(raw).encode()
        for raw in (bytes(times.ts), bytes(times.dur))
        if raw.startswith(b'"')
    ]
    return bool(texts) and bool((us_texts_to_ns(texts)[1] != OK).any())
