"""The one trace model: a columnar, interned, torch-free view of a torch.profiler trace.

Loaders (``loader.py``), the offline merge and the live collector's output all become a
``Trace``; analyses, exporters and the TensorBoard view consume only this. Args stay as raw JSON
bytes and are decoded on demand, which keeps millions of events small in memory::

    trace = load_trace("worker0.pt.trace.json.gz")
    kernels = trace.select(kind=EventKind.KERNEL)
    df = trace.to_frame()            # pandas view with decoded names
    trace.args(row)                  # dict for one event
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np

from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V

_decode_args = msgspec.json.Decoder(dict).decode


@dataclass(frozen=True)
class MetaEvent:
    """One metadata (``M``) event as the file had it, kept so that an export writes every one
    back (``process_labels``, duplicates, their ``ts``), not only what the name dicts hold.

    Args:
        name: ``process_name``, ``thread_sort_index``, ``process_labels``, ...
        pid / tid: ids as in the event columns (labels in ``Trace.pid_labels``).
        args: decoded ``args`` ({} when absent).
        ts_ns: absolute ns like ``TS_NS``; None when the event had no ``ts``.
        cat: the ``cat`` text; None when the event had none.
        form: ``schema.Form`` bits (PID_TEXT / TID_TEXT).
    """

    name: str
    pid: int
    tid: int
    args: dict[str, Any] = field(default_factory=dict)
    ts_ns: int | None = None
    cat: str | None = None
    form: int = 0

    def entry(self) -> tuple[str, Any, Any] | None:
        """The ``Trace`` dict entry this event sets, as (attribute, key, value); None for other
        names (``process_labels``, ...). One rule for the loader and the exporters."""
        view = META_VIEWS.get(self.name)
        if view is None:
            return None
        key = self.pid if view_by_process(view) else (self.pid, self.tid)
        return view, key, view_values(view, [self.args])[0]


@dataclass(frozen=True)
class MetaTable(Sequence[MetaEvent]):
    """Every ``M`` event as columns (what the loader builds: a metadata-heavy trace holds
    hundreds of thousands, one per process and thread name); reads as a sequence of
    ``MetaEvent``, each made when asked for.

    Args: name / args / cat: per event (args as dicts, {} when absent, the loader's decoded on
    first read; cat None when absent);
    pid / tid: int64 ids as in the event columns; ts_ns: int64 absolute ns, ``has_ts`` False
    where the event had no ``ts``; form: uint8 ``schema.Form`` bits.
    """

    name: list[str]
    pid: np.ndarray
    tid: np.ndarray
    args: Sequence[dict[str, Any]]  # a list, or the loader's lazily decoded _metaargs.MetaArgs
    ts_ns: np.ndarray
    has_ts: np.ndarray
    cat: list[str | None]
    form: np.ndarray

    def __len__(self) -> int:
        return len(self.name)

    def __getitem__(self, i: int) -> MetaEvent:  # type: ignore[override]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return MetaEvent(
            name=self.name[i],
            pid=int(self.pid[i]),
            tid=int(self.tid[i]),
            args=self.args[i],
            ts_ns=int(self.ts_ns[i]) if self.has_ts[i] else None,
            cat=self.cat[i],
            form=int(self.form[i]),
        )


# M event name -> the Trace dict it fills
META_VIEWS = {
    "process_name": "process_names",
    "thread_name": "thread_names",
    "process_sort_index": "process_sort_index",
    "thread_sort_index": "thread_sort_index",
}


def view_by_process(view: str) -> bool:
    """Is the ``Trace`` dict keyed by pid (else by (pid, tid))?"""
    return view.startswith("process")


def view_field(view: str) -> tuple[str, Any]:
    """The args key that dict reads, and what ``.get`` gives when the key is absent."""
    return ("name", "") if view.endswith("names") else ("sort_index", None)


def view_values(view: str, args: Sequence[dict[str, Any]]) -> list[Any]:
    """What each M event's args put in that dict: the name, else the sort index (0 when
    odd). For a list of events at once: the loader applies 300,000 of them in bulk."""
    # (a comprehension calling .get is 3x faster than map(methodcaller(...)))
    key, absent = view_field(view)
    return view_entries(view, [a.get(key, absent) for a in args])


def view_entries(view: str, values: list[Any]) -> list[Any]:
    """``view_values`` from the args' values of ``view_field``'s key (absent: its default)."""
    # (the values are checked by type in one C pass and converted only when one is odd)
    if view.endswith("names"):
        if set(map(type, values)) == {str}:
            return values
        return [n if type(n) is str else str(n) for n in values]
    if set(map(type, values)) == {int}:
        return values
    return [i if type(i) is int else int_or(i, 0) for i in values]


def int_or(value: Any, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError, OverflowError):
        return default


def file_base_ns(metadata: dict[str, Any]) -> int:
    """ns that a file's ``ts`` values are relative to: its ``baseTimeNanoseconds``, else 0
    (absolute µs since the epoch, older Kineto)."""
    return base_time_ns(metadata.get(V.META_BASE_TIME)) or 0


def base_time_ns(value: Any) -> int | None:
    """A ``baseTimeNanoseconds`` value as int ns: a number or numeric text (some vendors write
    ``"1700000000000000000"``); None when absent or unusable (null, a list, other text, beyond
    int64)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = int(value) if not isinstance(value, str) else int(Decimal(value.strip()))
    except (ValueError, OverflowError, ArithmeticError):
        return None
    return number if -(1 << 63) <= number < (1 << 63) else None


@dataclass(frozen=True)
class LoadReport:
    """What loading a file had to change or leave out, besides ``Trace.skipped_events`` and
    ``Trace.truncated``: nothing is lost silently. ``lines()`` is what a command prints.

    Args:
        replaced_text: events (and top-level keys) with bytes that are not UTF-8 or lone
            surrogate escapes: replaced by U+FFFD.
        replaced_values: events (and top-level keys) with NaN, Infinity or numbers beyond
            float range: kept as strings.
        replaced_nesting: values nested deeper than the JSON decoder allows (args, top-level
            keys): replaced by ``{vocabulary.ARG_REPLACED: "nested deeper than N levels"}``.
        dropped_ids: External id / correlation values beyond int64: dropped (-1). (A flow's or
            async event's ``id`` beyond int64 is kept, as a label of its digits.)
        relabelled_ids: pid / tid values beyond int64: mapped to labels (``pid_labels``).
        trailing_bytes: bytes after the trace (a second document, bytes after the gzip data):
            ignored.
        damage: why the data stopped early (damaged gzip data, invalid JSON mid-file); events
            before it are kept.
        ignored_base_time: an unusable ``baseTimeNanoseconds`` (its JSON text), treated as
            absent (``ts`` taken as absolute µs).
        negative_durations: events whose duration was below 0 (as written, or an ``E`` before
            its ``B``): read as 0.
        repeated_keys: top-level keys the file writes more than once, with how often:
            ``traceEvents`` (the events of every array kept), other keys with equal values
            (kept once). Differing values are refused when loading.
    """

    replaced_text: int = 0
    replaced_values: int = 0
    replaced_nesting: int = 0
    dropped_ids: int = 0
    relabelled_ids: int = 0
    trailing_bytes: int = 0
    damage: str = ""
    ignored_base_time: str = ""
    negative_durations: int = 0
    repeated_keys: tuple[tuple[str, int], ...] = ()

    def lines(self, source: str) -> list[str]:
        """One line per thing that was changed or left out (none for a clean file)."""
        return [f"{source}: {line}" for line in self.messages()]

    def messages(self) -> list[str]:
        """``lines`` without the file name (for a page that names the file elsewhere)."""

        def n(count: int, what: str) -> str:
            return f"{count} {what}{'s' * (count != 1)}"

        out = []
        if self.replaced_text:
            out.append(
                f"{n(self.replaced_text, 'event')} with invalid UTF-8 or lone "
                "surrogates: replaced by U+FFFD"
            )
        if self.replaced_values:
            out.append(
                f"{n(self.replaced_values, 'event')} with NaN, Infinity or numbers "
                "beyond float range: kept as text"
            )
        if self.replaced_nesting:
            out.append(
                f"{n(self.replaced_nesting, 'value')} nested too deeply: replaced by a marker"
            )
        if self.dropped_ids:
            out.append(
                f"{n(self.dropped_ids, 'id')} beyond 64 bits dropped (External id, correlation)"
            )
        if self.relabelled_ids:
            out.append(f"{n(self.relabelled_ids, 'pid/tid')} beyond 64 bits mapped to labels")
        if self.trailing_bytes:
            out.append(f"{n(self.trailing_bytes, 'byte')} of trailing data after the trace ignored")
        if self.ignored_base_time:
            out.append(
                f"baseTimeNanoseconds {self.ignored_base_time} is not a number: "
                "ignored (ts taken as absolute µs)"
            )
        if self.negative_durations:
            out.append(f"{n(self.negative_durations, 'event')} with a negative duration: read as 0")
        for key, count in self.repeated_keys:
            if key == "traceEvents":
                out.append(
                    f"traceEvents written {count} times: the events of all {count} arrays kept"
                )
            else:
                out.append(
                    f'top-level key "{key}" written {count} times with the same value: kept once'
                )
        return out


@dataclass(frozen=True)
class Trace:
    """One trace: equal-length event columns plus interned strings, raw args and metadata.

    Args:
        columns: ``schema.EVENT_COLUMNS`` -> numpy array, one row per event, sorted by ts_ns.
        strings: interned names and categories (``name_id``/``cat_id`` index this).
        raw_args: one JSON-encoded args object per event that has args (``args_row`` indexes).
        metadata: top-level keys other than traceEvents (deviceProperties, distributedInfo, ...).
        process_names / thread_names: from ``M`` events: pid -> name, (pid, tid) -> name.
        process_sort_index / thread_sort_index: from ``M`` events, when present.
        pid_labels / tid_labels: original string pid/tid for interned (negative) ids.
        id_labels: text of ``flow_id`` values that are labels (async b/n/e, flows): ids that
            are no integer (``"0x1"``, ``3.5``, ``true``) and integers the column cannot hold
            as themselves (``-1``, ``2**64 - 1``: ``schema.integer_label``), interned like
            pid/tid labels so pairs still match.
        meta_events: every ``M`` event of the file, in file order (the name and sort-index
            dicts above are views of them; an export writes these and then whatever the dicts
            add or change).
        source: where it came from (file path or "collector"), for messages.
        skipped_events: events skipped because fields were mistyped (counted, never silent).
        truncated: the file was cut off (or damaged); only complete events before the cut were
            kept.
        load_report: what else the loader changed or left out (``LoadReport``).
    """

    columns: dict[str, np.ndarray]
    strings: list[str]
    raw_args: Sequence[bytes]  # list or trace._rawargs.RawArgs (one buffer per loaded piece)
    metadata: dict[str, Any] = field(default_factory=dict)
    process_names: dict[int, str] = field(default_factory=dict)
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    process_sort_index: dict[int, int] = field(default_factory=dict)
    thread_sort_index: dict[tuple[int, int], int] = field(default_factory=dict)
    pid_labels: dict[int, str] = field(default_factory=dict)
    tid_labels: dict[int, str] = field(default_factory=dict)
    id_labels: dict[int, str] = field(default_factory=dict)
    source: str = ""
    skipped_events: int = 0
    truncated: bool = False
    meta_events: Sequence[MetaEvent] = ()  # a tuple, or the loader's MetaTable
    load_report: LoadReport = LoadReport()

    def __post_init__(self) -> None:
        missing = [c for c in S.EVENT_COLUMNS if c not in self.columns]
        if missing:  # a producer written before a column existed: its "nothing here" value
            rows = len(next(iter(self.columns.values()))) if self.columns else 0
            object.__setattr__(
                self, "columns", {**self.columns, **{c: S.default_column(c, rows) for c in missing}}
            )

    def __len__(self) -> int:
        return len(self.columns[S.TS_NS])

    def load_warnings(self) -> tuple[str, ...]:
        """What loading changed or left out, one line each without the file name: a cut or
        damaged file, mistyped events skipped, then ``load_report.messages()`` (the same facts
        ``neuron-prof`` prints as warnings)."""
        out = []
        damage = self.load_report.damage
        if self.truncated:
            out.append(
                f"{damage or 'file is truncated'}; kept {len(self)} complete events "
                f"before the {'damage' if damage else 'cut'}"
            )
        elif damage:
            out.append(f"{damage}; every event was read, but some may be damaged")
        if self.skipped_events:
            n = self.skipped_events
            out.append(f"{n} event{'s' * (n != 1)} skipped (mistyped fields)")
        return tuple(out + self.load_report.messages())

    def col(self, name: str) -> np.ndarray:
        return self.columns[name]

    def device_properties(self) -> tuple[dict[str, Any], ...]:
        """The ``deviceProperties`` entries that are objects, in file order: the one reading
        every analysis shares (a file may hold anything there: a value that is no list, or
        entries that are no objects, describe no device)."""
        value = self.metadata.get("deviceProperties")
        if not isinstance(value, list):
            return ()
        return tuple(p for p in value if isinstance(p, dict))

    def name(self, row: int) -> str:
        return self.strings[int(self.columns[S.NAME_ID][row])]

    def category(self, row: int) -> str:
        return self.strings[int(self.columns[S.CAT_ID][row])]

    def args(self, row: int) -> dict[str, Any]:
        """Decoded args of one event ({} when it has none). Args the decoder refuses (a number
        beyond float range, nesting deeper than the stack allows here) are decoded repaired
        (see ``trace/repair.py``) rather than raising."""
        args_row = int(self.columns[S.ARGS_ROW][row])
        if args_row < 0:
            return {}
        raw = self.raw_args[args_row]
        try:
            return _decode_args(raw)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            from neuron_profiler.trace.repair import repair_value

            try:
                return _decode_args(repair_value(bytes(raw))[0])
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                return {}

    def string_id(self, text: str) -> int:
        """Id of an interned string, -1 if the trace never uses it."""
        try:
            return self.strings.index(text)
        except ValueError:
            return -1

    def mask(
        self, *, kind: S.EventKind | Sequence[S.EventKind] | None = None, ph: S.Phase | None = None
    ) -> np.ndarray:
        """Boolean row mask by kind(s) and/or phase."""
        keep = np.ones(len(self), dtype=bool)
        if kind is not None:
            kinds = [kind] if isinstance(kind, S.EventKind) else list(kind)
            keep &= np.isin(self.columns[S.KIND], np.array(kinds, dtype=np.uint8))
        if ph is not None:
            keep &= self.columns[S.PH] == ph
        return keep

    def select(self, **criteria: Any) -> np.ndarray:
        """Row indices matching ``mask(**criteria)``."""
        return np.flatnonzero(self.mask(**criteria))

    def to_frame(self, rows: np.ndarray | None = None):  # -> pandas.DataFrame
        """A pandas DataFrame of the event columns with ``name`` and ``cat`` decoded."""
        import pandas as pd

        sel = slice(None) if rows is None else rows
        frame = pd.DataFrame({k: v[sel] for k, v in self.columns.items()})
        strings = np.asarray(self.strings, dtype=object)
        frame["name"] = strings[frame[S.NAME_ID].to_numpy()]
        frame["cat"] = strings[frame[S.CAT_ID].to_numpy()]
        return frame

    @property
    def base_time_ns(self) -> int:
        """Earliest event time (0 for an empty trace): a convenient origin for relative times."""
        ts = self.columns[S.TS_NS]
        return int(ts.min()) if len(ts) else 0


class TraceBuilder:
    """Builds a ``Trace`` row by row: used by tests, the offline merge and small producers.

    Loaders of large files fill columns directly instead (vectorised).
    """

    def __init__(self, source: str = "") -> None:
        self._rows: dict[str, list[int]] = {c: [] for c in S.EVENT_COLUMNS}
        self._strings: dict[str, int] = {}
        self._raw_args: list[bytes] = []
        self.metadata: dict[str, Any] = {}
        self.process_names: dict[int, str] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.process_sort_index: dict[int, int] = {}
        self.thread_sort_index: dict[tuple[int, int], int] = {}
        self.source = source

    def intern(self, text: str) -> int:
        return self._strings.setdefault(text, len(self._strings))

    def add(
        self,
        *,
        name: str,
        ts_ns: int,
        dur_ns: int = 0,
        ph: S.Phase = S.Phase.COMPLETE,
        kind: S.EventKind = S.EventKind.OTHER,
        cat: str = "",
        pid: int = 0,
        tid: int = 0,
        args: dict[str, Any] | None = None,
        flow_id: int = -1,
        form: int = 0,
    ) -> int:
        """Append one event; returns its row (before the final sort by time). ``form``:
        ``schema.Form`` bits, 0 for Kineto's usual spelling."""
        args = args or {}
        row = len(self._rows[S.TS_NS])
        values = {
            S.TS_NS: int(ts_ns),
            S.DUR_NS: int(dur_ns),
            S.PH: int(ph),
            S.KIND: int(kind),
            S.NAME_ID: self.intern(name),
            S.CAT_ID: self.intern(cat),
            S.PID: int(pid),
            S.TID: int(tid),
            S.EXTERNAL_ID: int(args.get(V.ARG_EXTERNAL_ID, args.get(V.ARG_EXTERNAL_ID_2021, -1))),
            S.CORRELATION: int(args.get(V.ARG_CORRELATION, -1)),
            S.STREAM: S.python_int(args.get(V.ARG_STREAM)),
            S.FLOW_ID: int(flow_id),
            S.ARGS_ROW: len(self._raw_args) if args else -1,
            S.FORM: int(form),
        }
        if args:
            self._raw_args.append(msgspec.json.encode(args))
        for key, value in values.items():
            self._rows[key].append(value)
        return row

    def build(self, **extra: Any) -> Trace:
        cols = {
            k: np.asarray(v, dtype=S.COLUMN_DTYPES.get(k, np.int64)) for k, v in self._rows.items()
        }
        order = np.argsort(cols[S.TS_NS], kind="stable")
        cols = {k: v[order] for k, v in cols.items()}
        return Trace(
            columns=cols,
            strings=list(self._strings),
            raw_args=self._raw_args,
            metadata=self.metadata,
            process_names=self.process_names,
            thread_names=self.thread_names,
            process_sort_index=self.process_sort_index,
            thread_sort_index=self.thread_sort_index,
            source=self.source,
            **extra,
        )


def appended_rows(
    trace: Trace, rows: dict[str, Any], name: str | None, cat: str, kind: int
) -> Trace:
    """``trace`` with rows added (columns not given: their "nothing here" value), re-sorted by
    time. ``rows``: event columns by name, plus ``"names"`` = (labels, index per row) when
    ``name`` is None, and ``"args"`` = one raw JSON args object per row."""
    n = len(rows[S.TS_NS])
    strings = list(trace.strings)
    table = {s: i for i, s in enumerate(strings)}

    def intern(text: str) -> int:
        return table.setdefault(text, len(table))

    if name is not None:
        name_id = np.full(n, intern(name), dtype=np.int32)
    else:
        labels, index = rows["names"]
        ids = np.array([intern(s) for s in labels], dtype=np.int32)
        name_id = ids[np.asarray(index, dtype=np.int64)]
    raw_args = list(trace.raw_args)
    args_row = np.full(n, -1, dtype=np.int64)
    if "args" in rows:
        args_row = np.arange(len(raw_args), len(raw_args) + n, dtype=np.int64)
        raw_args += rows["args"]
    added = {
        S.NAME_ID: name_id,
        S.CAT_ID: np.full(n, intern(cat), dtype=np.int32),
        S.KIND: np.full(n, kind, dtype=np.uint8),
        S.ARGS_ROW: args_row,
    }
    columns = {}
    for c in S.EVENT_COLUMNS:
        old = trace.columns[c]
        new = rows.get(c, added.get(c))
        new = S.default_column(c, n) if new is None else np.asarray(new)
        columns[c] = np.concatenate([old, new.astype(old.dtype)])
    order = np.argsort(columns[S.TS_NS], kind="stable")
    columns = {k: v[order] for k, v in columns.items()}
    return dataclasses.replace(trace, columns=columns, strings=list(table), raw_args=raw_args)
