"""Neuron Explorer output -> numpy columns, vectorised (pyarrow columns, never a loop per row).

    profile = read_profile("my-profile@latest/")          # a directory of Parquet tables
    profile = read_profile("SystemProfileEvents.parquet")  # or one table's file
    profile = read_profile("system_profile.json")          # or the legacy JSON export
    profile.events.start_ns, profile.events.names[profile.events.name_code]

What is read, and what each column is taken to mean, is in ``schema`` and docs/explorer.md.
Dictionary-encoded columns are read as their values. Bad input (not Parquet, cut off, a required
table or column missing, a column of the wrong type) is a ``TraceLoadError`` naming the file and the problem (exit code 2); odd values inside
a good file (an unparsable flow id, attribute object or id, a null in a required column) are
counted in ``malformed``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from neuron_profiler.errors import TraceLoadError
from neuron_profiler.explorer import schema as X
from neuron_profiler.explorer._arrow import require_pyarrow
from neuron_profiler.explorer.columns import CcOpColumns, EventColumns, ExplorerProfile, HbmColumns

_SOURCE_CODE = {s: i for i, s in enumerate(X.SOURCES)}  # other sources: len(SOURCES)
SOURCE_OTHER = len(X.SOURCES)
_FLOW_TEXT = r"^-?[0-9]{1,18}$"  # a string-encoded flow id that fits int64
_PART = re.compile(r"^(?P<table>[A-Za-z]+)(?:[_-][0-9]+)?$")


# -- finding the tables ---------------------------------------------------------------------------
def is_profile_dir(path: Path) -> bool:
    """A directory holding Explorer's system-profile events (Parquet or the legacy JSON)."""
    return path.is_dir() and bool(table_files(path).get(X.EVENTS) or _legacy_file(path))


def table_files(path: Path) -> dict[str, list[Path]]:
    """The Parquet files of each known table under a profile directory (or the one file)."""
    if path.is_file():
        table = _table_of(path)
        return {table: [path]} if table else {}
    out: dict[str, list[Path]] = {}
    for f in sorted(path.iterdir()):
        if f.is_dir() and f.name in X.TABLES:
            parts = sorted(p for p in f.iterdir() if p.name.endswith(X.PARQUET_SUFFIX))
            out.setdefault(f.name, []).extend(parts)
        elif f.is_file():
            table = _table_of(f)
            if table:
                out.setdefault(table, []).append(f)
    return out


def _table_of(path: Path) -> str | None:
    if not path.name.endswith(X.PARQUET_SUFFIX):
        return None
    m = _PART.match(path.name[: -len(X.PARQUET_SUFFIX)])
    return m.group("table") if m and m.group("table") in X.TABLES else None


def _legacy_file(path: Path) -> Path | None:
    f = path / X.LEGACY_FILE
    return f if f.is_file() else None


# -- reading --------------------------------------------------------------------------------------
def read_profile(path: str | Path) -> ExplorerProfile:
    """Read a profile directory, one table file, or the legacy JSON (see the module doc)."""
    path = Path(path)
    if not path.exists():
        raise TraceLoadError(path, "no such file or directory")
    if path.is_file() and not path.name.endswith(X.PARQUET_SUFFIX):
        from neuron_profiler.explorer.legacy import read_legacy

        return read_legacy(path)
    files = table_files(path)
    if X.EVENTS not in files:
        legacy = _legacy_file(path) if path.is_dir() else None
        if legacy is not None:
            from neuron_profiler.explorer.legacy import read_legacy

            return read_legacy(legacy)
        what = "table" if path.is_file() else "directory"
        raise TraceLoadError(
            path, f"no {X.EVENTS} table in this {what} (not a Neuron Explorer system profile)"
        )
    pa, pc, pq = require_pyarrow(path)
    tables = _Tables(pa, pc, pq)
    events, malformed, nulls = tables.events(files[X.EVENTS])
    dma_n, dma_b = tables.dma(files.get(X.DMA_PACKET, []))
    return ExplorerProfile(
        source=str(path),
        events=events,
        hbm=tables.hbm(files[X.HBM_USAGE]) if X.HBM_USAGE in files else None,
        cc_ops=tables.cc_ops(files[X.CC_OP]) if X.CC_OP in files else None,
        dma_packets=dma_n,
        dma_bytes=dma_b,
        summary=tables.summary(files.get(X.SUMMARY, [])),
        files=tuple(str(f) for fs in files.values() for f in fs),
        malformed=malformed,
        null_required=nulls,
    )


class _Tables:
    """Reads tables with pyarrow; every problem names the file it is in."""

    def __init__(self, pa: Any, pc: Any, pq: Any) -> None:
        self.pa, self.pc, self.pq = pa, pc, pq

    def _read(self, files: list[Path], wanted: tuple[str, ...], required: tuple[str, ...]) -> Any:
        parts = []
        for f in files:
            try:
                names = self.pq.read_schema(f).names
                missing = [c for c in required if c not in names]
                if missing:
                    raise TraceLoadError(f, f"missing column(s) {', '.join(missing)}")
                table = self.pq.read_table(f, columns=[c for c in wanted if c in names])
                parts.append(self._decoded(table))
            except TraceLoadError:
                raise
            except (OSError, self.pa.ArrowException) as err:
                raise TraceLoadError(f, f"not a readable Parquet file ({_one_line(err)})") from None
        if len(parts) == 1:
            return parts[0], files[0]
        try:
            return self.pa.concat_tables(parts, promote_options="default"), files[0]
        except self.pa.ArrowException as err:
            raise TraceLoadError(
                files[0], f"parts do not fit together ({_one_line(err)})"
            ) from None

    def _decoded(self, table: Any) -> Any:
        """``table`` with dictionary-encoded columns (Parquet writers commonly encode strings
        so; also inside lists) cast to their values' type: every reader below sees plain
        types, and parts encoded differently still fit together."""
        schema = self.pa.schema([f.with_type(self._plain(f.type)) for f in table.schema])
        return table if schema.equals(table.schema) else table.cast(schema)

    def _plain(self, t: Any) -> Any:
        types = self.pa.types
        if types.is_dictionary(t):
            return self._plain(t.value_type)
        if types.is_list(t) or types.is_large_list(t):
            make = self.pa.list_ if types.is_list(t) else self.pa.large_list
            return make(t.value_field.with_type(self._plain(t.value_type)))
        return t

    # column helpers ------------------------------------------------------------------------
    def ints(self, table: Any, name: str, where: Path, missing: int = -1) -> np.ndarray:
        if name not in table.column_names:
            return np.full(table.num_rows, missing, dtype=np.int64)
        col = table[name]
        if not (self.pa.types.is_integer(col.type) or self.pa.types.is_null(col.type)):
            raise TraceLoadError(where, f"column {name} is {col.type}, not an integer")
        if self.pa.types.is_null(col.type):
            return np.full(table.num_rows, missing, dtype=np.int64)
        return np.asarray(self.pc.fill_null(col, missing).to_numpy(), dtype=np.int64)

    def codes(self, table: Any, name: str, where: Path) -> tuple[np.ndarray, list[str]]:
        if name not in table.column_names:
            return np.zeros(table.num_rows, dtype=np.int64), [""]
        col = table[name]
        if not (self.pa.types.is_string(col.type) or self.pa.types.is_large_string(col.type)):
            raise TraceLoadError(where, f"column {name} is {col.type}, not a string")
        arr = self.pc.fill_null(col, "").combine_chunks()
        enc = self.pc.dictionary_encode(arr)
        return np.asarray(enc.indices.to_numpy(), dtype=np.int64), enc.dictionary.to_pylist()

    def texts(self, table: Any, name: str, where: Path) -> list[str]:
        code, values = self.codes(table, name, where)
        return [values[i] for i in code.tolist()] if len(values) > 1 else [values[0]] * len(code)

    # tables --------------------------------------------------------------------------------
    def events(self, files: list[Path]) -> tuple[EventColumns, int, dict[str, int]]:
        """The events, the odd values counted, and the nulls of each required column."""
        t, where = self._read(files, X.EVENT_REQUIRED + X.EVENT_OPTIONAL, X.EVENT_REQUIRED)
        nulls, null_rows = self.nulls(t, X.EVENT_REQUIRED)
        source_code, sources = self.codes(t, X.E_SOURCE, where)
        to_source = np.array([_SOURCE_CODE.get(s, SOURCE_OTHER) for s in sources], np.int8)
        name_code, names = self.codes(t, X.E_NAME, where)
        instance_code, instances = self.codes(t, X.E_INSTANCE, where)
        stream_code, streams = self.codes(t, X.E_STREAM, where)
        flow_row, flow_value, bad_flows = self.flows(t, where)
        attrs, exec_id, seq_id, op_id, bad_attrs = self.attributes(t, where)
        start, end = self.ints(t, X.E_START, where), self.ints(t, X.E_END, where)
        cols = EventColumns(
            start_ns=start,
            end_ns=end,
            source=to_source[source_code],
            name_code=name_code,
            names=names,
            instance_code=instance_code,
            instances=instances,
            process_id=self.ints(t, X.E_PROCESS, where),
            thread_id=self.ints(t, X.E_THREAD, where),
            nc_idx=self.ints(t, X.E_NC, where),
            pcore_idx=self.ints(t, X.E_PCORE, where),
            worker_gid=self.ints(t, X.E_WORKER, where),
            flow_row=flow_row,
            flow_value=flow_value,
            exec_id=exec_id,
            seq_id=seq_id,
            op_id=op_id,
            attributes=attrs,
            stream_code=stream_code,
            streams=streams,
        )
        return cols, bad_flows + bad_attrs + null_rows, nulls

    def nulls(self, t: Any, names: tuple[str, ...]) -> tuple[dict[str, int], int]:
        """Per column of ``names`` its null count (only those with any), and how many rows have
        a null in at least one of them: a required value missing is counted, never silent."""
        counts = {c: int(t[c].null_count) for c in names if t[c].null_count}
        if not counts:
            return {}, 0
        rows = np.zeros(t.num_rows, dtype=bool)
        for c in counts:
            rows |= np.asarray(t[c].is_null().to_numpy(), dtype=bool)
        return counts, int(rows.sum())

    def flows(self, t: Any, where: Path) -> tuple[np.ndarray, np.ndarray, int]:
        """(event row, flow id) pairs; flow ids that are not integers are counted."""
        empty = np.zeros(0, dtype=np.int64)
        if X.E_FLOW not in t.column_names:
            return empty, empty, 0
        col = t[X.E_FLOW]
        if not (self.pa.types.is_list(col.type) or self.pa.types.is_large_list(col.type)):
            raise TraceLoadError(where, f"column {X.E_FLOW} is {col.type}, not a list")
        arr = col.combine_chunks()
        flat = self.pc.list_flatten(arr)
        rows = np.asarray(self.pc.list_parent_indices(arr).to_numpy(), dtype=np.int64)
        if self.pa.types.is_integer(flat.type):
            ok = np.asarray(flat.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            values = np.asarray(self.pc.fill_null(flat, 0).to_numpy(), dtype=np.int64)
            return rows[ok], values[ok], int((~ok).sum())
        if not (self.pa.types.is_string(flat.type) or self.pa.types.is_large_string(flat.type)):
            raise TraceLoadError(where, f"column {X.E_FLOW} holds {flat.type}, not strings")
        good = self.pc.fill_null(self.pc.match_substring_regex(flat, _FLOW_TEXT), False)
        ok = np.asarray(good.to_numpy(zero_copy_only=False), dtype=bool)
        values = self.pc.cast(self.pc.filter(flat, good), self.pa.int64()).to_numpy()
        return rows[ok], np.asarray(values, dtype=np.int64), int((~ok).sum())

    def attributes(
        self, t: Any, where: Path
    ) -> tuple[list[bytes], np.ndarray, np.ndarray, np.ndarray, int]:
        n = t.num_rows
        if X.E_EXTRA not in t.column_names:
            minus = np.full(n, -1, dtype=np.int64)
            return [b"{}"] * n, minus, minus.copy(), minus.copy(), 0
        col = t[X.E_EXTRA]
        if not (self.pa.types.is_string(col.type) or self.pa.types.is_large_string(col.type)):
            raise TraceLoadError(where, f"column {X.E_EXTRA} is {col.type}, not a string")
        blank = self.pc.fill_null(self.pc.equal(self.pc.utf8_trim_whitespace(col), ""), True)
        filled = self.pc.if_else(blank, "{}", col)
        raw = filled.cast(self.pa.binary()).to_pylist()
        return decode_attributes(raw)

    def hbm(self, files: list[Path]) -> HbmColumns:
        names = self.pq.read_schema(files[0]).names if files else []
        wanted = (*X.HBM_REQUIRED, X.H_HBM, X.H_INSTANCE) + tuple(
            c for c in names if c.endswith(X.HBM_CATEGORY_SUFFIX) and c != X.H_TOTAL
        )
        t, where = self._read(files, wanted, X.HBM_REQUIRED)
        instance_code, instances = self.codes(t, X.H_INSTANCE, where)
        cats = [c for c in t.column_names if c.endswith(X.HBM_CATEGORY_SUFFIX) and c != X.H_TOTAL]
        return HbmColumns(
            timestamp=self.ints(t, X.H_TIMESTAMP, where),
            total=self.ints(t, X.H_TOTAL, where, 0),
            device_idx=self.ints(t, X.H_DEVICE, where),
            hbm_idx=self.ints(t, X.H_HBM, where, 0),
            instance_code=instance_code,
            instances=instances,
            categories={c: self.ints(t, c, where, 0) for c in cats},
        )

    def cc_ops(self, files: list[Path]) -> CcOpColumns:
        wanted = (X.C_OP_ID, X.C_OPERATION, X.C_ALGORITHM, X.C_INPUT, X.C_OUTPUT, X.C_START)
        t, where = self._read(files, wanted, X.CC_REQUIRED)
        return CcOpColumns(
            op_id=self.ints(t, X.C_OP_ID, where),
            start_ns=self.ints(t, X.C_START, where),
            operation=self.texts(t, X.C_OPERATION, where),
            algorithm=self.texts(t, X.C_ALGORITHM, where),
            input_size=self.ints(t, X.C_INPUT, where),
            output_size=self.ints(t, X.C_OUTPUT, where),
        )

    def dma(self, files: list[Path]) -> tuple[dict[str, int], dict[str, int]]:
        if not files:
            return {}, {}
        t, where = self._read(files, (X.D_TRANSFER, X.D_QUEUE_TYPE), X.DMA_REQUIRED)
        code, kinds = self.codes(t, X.D_QUEUE_TYPE, where)
        nbytes = self.ints(t, X.D_TRANSFER, where, 0)
        counts = np.bincount(code, minlength=len(kinds))
        sums = np.bincount(code, weights=nbytes, minlength=len(kinds))
        return (
            {k or "unknown": int(c) for k, c in zip(kinds, counts.tolist(), strict=True) if c},
            {k or "unknown": int(s) for k, s in zip(kinds, sums.tolist(), strict=True) if s},
        )

    def summary(self, files: list[Path]) -> dict[str, Any]:
        if not files:
            return {}
        t, _ = self._read(files, tuple(self.pq.read_schema(files[0]).names), ())
        if t.num_rows == 0:
            return {}
        row = t.slice(0, 1).to_pylist()[0]
        return {k: v for k, v in row.items() if isinstance(v, int | float | str | bool)}


# -- extra attributes -----------------------------------------------------------------------------
class _Attrs(msgspec.Struct, gc=False):
    exec_id: int | None = None
    nrta_seq_id: int | None = None
    nrt_sequence_id: int | None = None
    op_id: int | None = None


class _TextAttrs(msgspec.Struct, gc=False):
    """The ids where a producer quoted some of them ("exec_id": "1")."""

    exec_id: int | str | None = None
    nrta_seq_id: int | str | None = None
    nrt_sequence_id: int | str | None = None
    op_id: int | str | None = None


_decode_attrs = msgspec.json.Decoder(list[_Attrs]).decode
_decode_text_attrs = msgspec.json.Decoder(list[_TextAttrs]).decode
_decode_one = msgspec.json.Decoder(_TextAttrs).decode
_decode_object = msgspec.json.Decoder(dict[str, Any]).decode
_ATTR_FIELDS = ("exec_id", "nrta_seq_id", "nrt_sequence_id", "op_id")
_ID_TEXT = re.compile(r"-?[0-9]{1,18}").fullmatch  # an integer as text that fits int64
_NOT_AN_ID = np.iinfo(np.int64).min  # marks a value that is no id (never a real one)
_ID_MIN, _ID_MAX = _NOT_AN_ID + 1, np.iinfo(np.int64).max


def decode_attributes(
    raw: list[bytes],
) -> tuple[list[bytes], np.ndarray, np.ndarray, np.ndarray, int]:
    """(attribute objects, exec_id, seq_id, op_id, malformed) of each event's extra attributes:
    one msgspec pass over all rows (a second where ids are quoted); an id may be an integer or
    an integer as text ("1": many JSON producers quote ids; only ``-?[0-9]{1,18}``, nothing
    around it). Rows that are not a JSON object, or with an id that is neither (a float, other
    text, beyond int64), are counted; such an id is dropped, the rest of an object row kept."""
    n = len(raw)
    joined = b"[" + b",".join(raw) + b"]"
    flagged = np.zeros(n, dtype=bool)
    plain = True
    try:
        attrs: list[Any] = _decode_attrs(joined) if n else []
    except (msgspec.DecodeError, msgspec.ValidationError):
        plain = False
        try:
            attrs = _decode_text_attrs(joined)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raw, attrs, flagged = _one_by_one(raw)
    m, odd = _id_matrix(attrs, plain)
    seq = np.where(m[:, 1] >= 0, m[:, 1], m[:, 2])
    return raw, m[:, 0], seq, m[:, 3], int((flagged | odd).sum())


def _id_matrix(attrs: list[Any], plain: bool) -> tuple[np.ndarray, np.ndarray]:
    """(rows x 4 ids, -1 absent; per row whether an id was not one). ``plain``: every id
    decoded as an integer (the common case: one numpy pass unless one is beyond int64)."""
    n = len(attrs)
    values = [v for a in attrs for v in _values(a)]
    if plain:
        try:
            m = np.fromiter((-1 if v is None else v for v in values), np.int64, 4 * n)
            return m.reshape(n, 4), np.zeros(n, dtype=bool)
        except OverflowError:
            pass
    m = np.fromiter(map(_id_value, values), np.int64, 4 * n).reshape(n, 4)
    odd = m == _NOT_AN_ID
    m[odd] = -1
    return m, odd.any(axis=1)


def _id_value(v: Any) -> int:
    """An id as an int (-1 absent; ``_NOT_AN_ID``: a value that is not an id)."""
    if v is None:
        return -1
    if v.__class__ is int:
        return v if _ID_MIN <= v <= _ID_MAX else _NOT_AN_ID
    if v.__class__ is str and _ID_TEXT(v):
        return int(v)
    return _NOT_AN_ID


def _values(a: _Attrs | _TextAttrs) -> tuple[Any, ...]:
    return (a.exec_id, a.nrta_seq_id, a.nrt_sequence_id, a.op_id)


def _one_by_one(raw: list[bytes]) -> tuple[list[bytes], list[_TextAttrs], np.ndarray]:
    """The slow path of bad input: each row on its own; per row whether it was flagged."""
    out_raw, out, bad = [], [], np.zeros(len(raw), dtype=bool)
    for i, r in enumerate(raw):
        try:
            out.append(_decode_one(r))
            out_raw.append(r)
            continue
        except msgspec.ValidationError:  # an object, some id of another type: that id dropped
            try:
                obj = _decode_object(r)
                ids = {k: obj.get(k) for k in _ATTR_FIELDS}
                out.append(_TextAttrs(**{k: v for k, v in ids.items() if _is_id_like(v)}))
                out_raw.append(r)
            except (msgspec.DecodeError, msgspec.ValidationError):
                out.append(_TextAttrs())
                out_raw.append(b"{}")
        except msgspec.DecodeError:
            out.append(_TextAttrs())
            out_raw.append(b"{}")
        bad[i] = True
    return out_raw, out, bad


def _is_id_like(v: Any) -> bool:
    return v.__class__ is int or v.__class__ is str


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:300]
