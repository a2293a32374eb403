"""The ``--json`` document: versioned, documented by the JSON Schema shipped beside it
(``report.schema.json``)::

    doc = to_document([report], errors=[("bad.json", "not JSON")])
    json.dumps(doc)

Units are in the key names: ``_ms`` durations, ``_us`` durations in µs, ``start_us`` /
``end_us`` times in the trace's own µs (as Perfetto shows them), ``_pct`` percentages.
``tb_profiler_breakdown`` uses tb-profiler's step labels and category names, in µs.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache, partial
from typing import Any

import msgspec
import numpy as np

from neuron_profiler.analysis.causes import ALL_CAUSES
from neuron_profiler.analysis.communication import CommRow
from neuron_profiler.analysis.distributed import (
    STRAGGLER_ABS_NS,
    STRAGGLER_REL,
    STRAGGLER_RULE,
    Distributed,
    distributed,
)
from neuron_profiler.analysis.memory import DeviceMemory
from neuron_profiler.analysis.metrics import metrics
from neuron_profiler.analysis.report import Report, summaries_of
from neuron_profiler.heap import gc_paused
from neuron_profiler.reports.json_rows import Rows

SCHEMA_VERSION = "6"  # 6: step_breakdown's idle_ms/_pct named not_busy_ms/_pct (wall - busy);
# 5: device metrics null without device time (4 wrote 0); 4: rank null
SCHEMA_FILE = "report.schema.json"
SUMMARY_ROWS = 50  # ops and kernels listed (the largest first): keeps the document bounded


def document_text(doc: dict[str, Any]) -> str:
    """The document as the CLI prints it: JSON indented by one space, ASCII only, as
    ``json.dumps(doc, indent=1)`` writes it but ~15x faster (msgspec: a 70 MB document of
    62,000 devices in 0.2 s instead of 3.2 s; a small number may be spelled ``8e-6`` where the
    standard library writes ``8e-06``). Other characters (names from the trace, "µs") are
    escaped as the standard library escapes them (``\\u00b5``; a surrogate pair beyond the
    BMP); a string msgspec cannot encode (a lone surrogate) sends the document to the standard
    library."""
    with gc_paused():
        try:
            compact = _encode(doc)
        except UnicodeEncodeError:
            return json.dumps(doc, indent=1)
        return _indented(compact).decode()


def document_bytes(
    reports: list[Report],
    errors: list[tuple[str, str]] = (),  # type: ignore[assignment]
    breaches: list[dict[str, Any]] = (),  # type: ignore[assignment]
    cross: Distributed | None = None,
) -> bytes:
    """``document_text(to_document(...))`` as ASCII bytes (:func:`document_pieces` joined)."""
    return b"".join(document_pieces(reports, errors, breaches, cross))


def document_pieces(
    reports: list[Report],
    errors: list[tuple[str, str]] = (),  # type: ignore[assignment]
    breaches: list[dict[str, Any]] = (),  # type: ignore[assignment]
    cross: Distributed | None = None,
) -> Iterator[bytes]:
    """:func:`document_bytes` in pieces, for the CLI to write one after the other (the 100 MB
    text of 60,000 devices is never copied into one buffer, nor held whole): each section is
    encoded as soon as it is built, so only one section's objects exist at a time (a report of
    60,000 devices holds ~250 MB of them), and the text is never a str. The per-device rows
    (:class:`Rows`, ~90% of such a document) stand in the encoded document as placeholders,
    and are laid out already indented into the formatted text as the pieces are asked for
    (:func:`_spliced`): only the rest goes through msgspec's formatter. Every failure (a
    placeholder not found) is raised before the first piece."""
    with gc_paused():
        deferred: list[Rows] = []
        # (os.urandom: what secrets.token_hex reads, without importing hmac and OpenSSL at
        # every start, ~5 ms)
        tag = f"\x00rows {os.urandom(8).hex()} "
        encode = msgspec.json.Encoder(enc_hook=partial(_placeholder, deferred, tag)).encode
        try:
            compact = encode(_document(reports, errors, breaches, cross, _encoded_by(encode)))
        except UnicodeEncodeError:
            text = json.dumps(to_document(reports, errors, breaches, cross), indent=1).encode()
            return iter([text])
        pieces = _spliced(msgspec.json.format(compact, indent=1), _encode(tag)[1:-1], deferred)
    return map(_ascii, pieces)


def _placeholder(deferred: list[Rows], tag: str, value: Any) -> Any:
    """A string standing for :class:`Rows` until the document is formatted."""
    if isinstance(value, Rows):
        deferred.append(value)
        return f"{tag}{len(deferred) - 1}"
    return _numpy_scalar(value)


def _indented(compact: bytes) -> bytes:
    """msgspec's compact JSON indented by one space, other characters than ASCII escaped."""
    return _ascii(msgspec.json.format(compact, indent=1))


def _ascii(data: bytes) -> bytes:
    """UTF-8 JSON text (whole characters) with other characters than ASCII escaped."""
    if data.isascii() and b"\x7f" not in data:
        return data
    return _escaped().sub(_escape, data.decode()).encode()


def _spliced(data: bytes, tag: bytes, deferred: list[Rows]) -> Iterator[bytes]:
    """The formatted document in pieces, each placeholder ``"<tag><k>"`` replaced by row array
    ``k``, indented at the depth of the line it stands on (every placeholder found first, the
    rows laid out as the pieces are asked for)."""
    spans = []
    at = 0
    for k in range(len(deferred)):
        marker = b'"%s%d"' % (tag, k)
        where = data.find(marker, at)
        if where < 0 or data.find(marker, where + 1) >= 0:  # the tag is random: never met
            raise ValueError(f"row placeholder {k} found {data.count(marker)} times")
        line = data[data.rfind(b"\n", 0, where) + 1 : where]
        spans.append((at, where, len(line) - len(line.lstrip(b" "))))
        at = where + len(marker)
    return _pieces(data, spans, deferred, at)


def _pieces(
    data: bytes, spans: list[tuple[int, int, int]], deferred: list[Rows], rest: int
) -> Iterator[bytes]:
    for rows, (at, where, depth) in zip(deferred, spans, strict=True):
        yield data[at:where]
        yield from _rows_text(rows, depth)
    yield data[rest:]


def _rows_text(rows: Rows, depth: int) -> Iterable[bytes]:
    """Rows as formatted at ``depth``: written so directly, or formatted and shifted right."""
    text = rows.text(depth)
    if text is None:
        text = [msgspec.json.format(_encode(rows), indent=1).replace(b"\n", b"\n" + b" " * depth)]
    return text


@lru_cache(maxsize=1)
def _escaped() -> re.Pattern[str]:
    """What ``json.dumps(ensure_ascii=True)`` escapes. Compiled when first needed: its range
    of a million code points takes ~5 ms to compile, at the start of every ``analyze --json``
    otherwise, and most documents are ASCII."""
    return re.compile("[\x7f-\U0010ffff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 | code >> 10:04x}\\u{0xDC00 | code & 0x3FF:04x}"


def _numpy_scalar(value: Any) -> Any:
    """A numpy number as the Python number the standard library writes for it."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")


def _unknown(value: Any) -> Any:
    """Rows written from their columns (``json_rows``); numpy numbers as Python's."""
    if isinstance(value, Rows):
        return value.encodable()
    return _numpy_scalar(value)


_encode = msgspec.json.Encoder(enc_hook=_unknown).encode


def schema_text() -> str:
    from importlib import resources  # only tests and tools read the schema: not at startup

    return resources.files("neuron_profiler.reports").joinpath(SCHEMA_FILE).read_text()


def _ms(ns: float) -> float:
    return round(float(ns) / 1e6, 6)


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 3) if whole else 0.0


# Whole columns at once, each entry the very number the scalar rule above writes (a trace of
# 60,000 devices has millions of them).
_EXACT_NS = 2**53  # int ns below this convert to float exactly


def _ms_column(ns: np.ndarray) -> np.ndarray | list[Any]:
    """``_ms`` of every entry of an int ns array, as a float array of that shape (nested
    lists of Python numbers where a value is too large for that): ns / 1e6 is already what
    ``round(.., 6)`` gives (a whole number of ns has at most 6 decimals in ms)."""
    ns = np.asarray(ns)
    if ns.size and int(np.abs(ns).max()) >= _EXACT_NS:
        return np.vectorize(_ms, otypes=[object])(ns).tolist()
    return ns.astype(np.int64) / 1e6


def _pct_column(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """``_pct`` of int columns: Python's ``round(x, 3)`` (the double nearest the correctly
    rounded decimal) is ``rint(1000 x) / 1000`` except where ``1000 x`` lies within rounding
    error of a half: those few are rounded by ``round`` itself."""
    part, whole = np.asarray(part, np.float64), np.asarray(whole, np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        value = 100.0 * part / whole
        scaled = value * 1000.0
        fraction = np.abs(scaled - np.trunc(scaled))
        halfway = np.abs(fraction - 0.5) < 1e-9 * np.maximum(1.0, np.abs(scaled))
    values = np.rint(scaled) / 1000.0
    exact = halfway | ~np.isfinite(scaled)
    for k in np.flatnonzero(exact).tolist():
        values[k] = round(float(value[k]), 3)
    values[whole == 0] = 0.0
    return values


def _np_pct_column(part: np.ndarray, wall: np.ndarray) -> np.ndarray:
    """``_pct`` of a (devices x steps) int column and each step's wall time, as the scalar
    rule gives it for a numpy part (``round`` of a numpy float is numpy's: ``rint(1000 x) /
    1000`` everywhere); steps with no wall time are 0.0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.round(100.0 * np.asarray(part, np.float64) / wall[np.newaxis, :], 3)
    value[:, wall == 0] = 0.0
    return value


def to_document(
    reports: list[Report],
    errors: list[tuple[str, str]] = (),  # type: ignore[assignment]
    breaches: list[dict[str, Any]] = (),  # type: ignore[assignment]
    cross: Distributed | None = None,
) -> dict[str, Any]:
    """``cross``: the cross-rank analysis of these reports (``analysis.distributed``), reduced
    from their rank summaries when not given."""
    return _document(reports, errors, breaches, cross, _plain)


def _plain(section: Any) -> Any:
    """The section as plain objects: its :class:`Rows` (at its top level) as dicts."""
    if not isinstance(section, dict):
        return section
    return {k: v.dicts() if isinstance(v, Rows) else v for k, v in section.items()}


def _encoded_by(encode: Callable[[Any], bytes]) -> Callable[[Any], msgspec.Raw]:
    return lambda section: msgspec.Raw(encode(section))


def _document(
    reports: list[Report],
    errors: list[tuple[str, str]],
    breaches: list[dict[str, Any]],
    cross: Distributed | None,
    keep: Callable[[Any], Any],
) -> dict[str, Any]:
    """The document, each trace's sections passed through ``keep`` as they are built (as they
    are, or encoded at once so that only one section's objects exist at a time)."""
    from neuron_profiler import __version__

    if cross is None:
        cross = distributed(summaries_of(reports))
    with gc_paused():  # millions of dicts for many devices, no cycles
        traces = [_trace_document(r, keep) for r in reports]
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": f"neuron-profiler {__version__}",
        "traces": traces,
        "errors": [{"path": p, "error": e} for p, e in errors],
        "fail_on": list(breaches),
        "distributed": distributed_document(cross),
    }


def _trace_document(r: Report, keep: Callable[[Any], Any]) -> dict[str, Any]:
    """One trace's sections; ``memory`` only when the trace recorded memory (no key
    otherwise: a trace without memory events gives the document it gave before)."""
    doc = {key: keep(part(r)) for key, part in _TRACE_SECTIONS}
    if r.memory is not None:
        doc["memory"] = keep(memory_document(r))
    return doc


def distributed_document(d: Distributed) -> dict[str, Any]:
    """The cross-rank analysis; ``available: false`` with a ``reason`` when there is none."""
    rule = {
        "rel_pct": 100 * STRAGGLER_REL,
        "abs_us": STRAGGLER_ABS_NS / 1e3,
        "text": STRAGGLER_RULE,
    }
    return {
        "available": d.available,
        "reason": d.reason,
        "files_without_rank": list(d.without_rank),
        "straggler_rule": rule,
        "spans": [_span(s) for s in d.spans],
    }


def _span(s) -> dict[str, Any]:  # noqa: ANN001
    late = {x.rank for x in s.stragglers}
    return {
        "span": s.index,
        "sources": list(s.sources),
        "ranks": list(s.ranks),
        "world_size": s.world_size,
        "reason": s.reason,
        "reference_rank": s.reference_rank,
        "ranks_summary": [
            {
                "rank": r.rank,
                "source": r.source,
                "steps": r.steps,
                "step_mean_ms": _ms(r.step_mean_ns),
                "compute_ms_per_step": _ms(r.compute_ns_per_step),
                "collective_ms_per_step": _ms(r.collective_ns_per_step),
                "compute_before_collective_ms_per_step": _ms(r.compute_before_ns_per_step),
                "instances": r.instances,
                "late_arrivals": r.late_arrivals,
                "wait_recorded_ms_per_step": None
                if r.wait_recorded_ns_per_step is None
                else _ms(r.wait_recorded_ns_per_step),
                "wait_skew_ms_per_step": _ms(r.wait_skew_ns_per_step),
                "clock_offset_us": r.clock_offset_ns / 1e3,
                "clock_aligned": r.clock_aligned,
                "straggler": r.rank in late,
                "orphan_waits": r.orphan_waits,
                "orphan_wait_ms": _ms(r.orphan_wait_ns),
            }
            for r in s.rows
        ],
        "stragglers": [
            {
                "rank": x.rank,
                "late_arrivals": x.late_arrivals,
                "instances": x.instances,
                "wait_cost_ms_per_step": _ms(x.cost_ns_per_step),
                "per_rank": [{"rank": r, "wait_ms_per_step": _ms(ns)} for r, ns in x.cost_per_rank],
                "lateness_ms": _ms(x.lateness_ns),
                "doing": x.doing,
                "before_arrival": [
                    {
                        "activity": a.name,
                        "ms": _ms(a.ns),
                        "others_ms": _ms(a.others_ns),
                        "excess_ms": _ms(a.excess_ns),
                    }
                    for a in x.before
                ],
            }
            for x in s.stragglers
        ],
        "straggler_note": s.straggler_note,
        "collectives": [
            {
                "group": c.group,
                "name": c.name,
                "calls": c.calls,
                "mean_skew_ms": _ms(c.mean_skew_ns),
                "max_skew_ms": _ms(c.max_skew_ns),
                "late_rank": c.late_rank,
                "per_rank": [
                    {
                        "rank": r,
                        "late": n,
                        "wait_skew_ms": _ms(w),
                        "wait_recorded_ms": None if rec is None else _ms(rec),
                    }
                    for r, n, w, rec in zip(
                        c.ranks, c.late_counts, c.wait_skew_ns, c.wait_recorded_ns, strict=True
                    )
                ],
            }
            for c in s.collectives
        ],
        "unmatched": [{"rank": u.rank, "group": u.group, "calls": u.calls} for u in s.unmatched],
        "mismatched_names": s.mismatched_names,
    }


def _ranges(r: Report, ranges: tuple[tuple[int, int], ...]) -> list[dict[str, float]]:
    return [{"start_us": r.to_trace_us(a), "end_us": r.to_trace_us(b)} for a, b in ranges]


def _findings(r: Report) -> list[dict[str, Any]]:
    return [
        {
            "kind": f.kind,
            "title": f.title,
            "recoverable_ms": _ms(f.recoverable_ns),
            "recoverable_ms_per_step": _ms(f.recoverable_ns_per_step),
            "recoverable_pct": f.recoverable_pct,
            "ranges": _ranges(r, f.ranges_ns),
            "host_op": f.host_op,
            "call_site": f.call_site,
            "suggestion": f.suggestion,
            "docs": f.docs,
        }
        for f in r.findings.findings
    ]


def _fallbacks(r: Report) -> list[dict[str, Any]]:
    return [
        {
            "op": g.op,
            "shapes": g.shapes,
            "dtypes": g.dtypes,
            "reason": g.reason,
            "calls": g.calls,
            "host_ms": _ms(g.host_ns),
            "d2h": {"count": g.d2h_count, "bytes": g.d2h_bytes, "ms": _ms(g.d2h_ns)},
            "h2d": {"count": g.h2d_count, "bytes": g.h2d_bytes, "ms": _ms(g.h2d_ns)},
            "idle_ms": _ms(g.idle_ns),
            "native_ms": None if g.native_ns is None else _ms(g.native_ns),
            "recoverable_ms": _ms(g.recoverable_ns),
            "inferred": g.inferred,
            "call_site": g.call_site,
            "ranges": _ranges(r, g.spans_ns),
        }
        for g in r.findings.fallbacks
    ]


def _syncs(r: Report) -> list[dict[str, Any]]:
    return [
        {
            "name": g.name,
            "calls": g.calls,
            "host_ms": _ms(g.host_ns),
            "d2h": {"count": g.d2h_count, "bytes": g.d2h_bytes, "ms": _ms(g.d2h_ns)},
            "idle_ms": _ms(g.idle_ns),
            "call_site": g.call_site,
            "ranges": _ranges(r, g.spans_ns),
        }
        for g in r.findings.syncs
    ]


def _ops(r: Report) -> list[dict[str, Any]]:
    return [
        {
            "name": o.name,
            "calls": o.calls,
            "host_total_ms": _ms(o.host_total_ns),
            "host_self_ms": _ms(o.host_self_ns),
            "device_self_ms": _ms(o.device_self_ns),
            "device_total_ms": _ms(o.device_total_ns),
            "input_shapes": list(o.input_shapes),
        }
        for o in r.summary.ops[:SUMMARY_ROWS]
    ]


def _kernels(r: Report) -> list[dict[str, Any]]:
    return [
        {
            "name": k.name,
            "calls": k.calls,
            "total_ms": _ms(k.total_ns),
            "mean_us": k.mean_ns / 1e3,
            "min_us": k.min_ns / 1e3,
            "max_us": k.max_ns / 1e3,
            "achieved_tflops": k.achieved_tflops,
            "achieved_gbps": k.achieved_gbps,
            "pct_of_peak": k.pct_of_peak,
        }
        for k in r.summary.kernels[:SUMMARY_ROWS]
    ]


def _steps(r: Report) -> list[dict[str, Any]]:
    s = r.steps
    return [
        {
            "step": name,
            "start_us": r.to_trace_us(int(a)),
            "end_us": r.to_trace_us(int(b)),
            "wall_ms": _ms(b - a),
        }
        for name, a, b in zip(s.names, s.start_ns.tolist(), s.end_ns.tolist(), strict=True)
    ]


def _breakdown(r: Report) -> dict[str, Any]:
    """Steps once, then a row per device holding each figure as a series over the steps: a
    trace of 10,000 device queues in 45 steps writes 10,000 small objects, not 450,000."""
    b = r.breakdown
    series = {
        "busy_ms": _ms_column(b.busy_ns),
        "busy_pct": _np_pct_column(b.busy_ns, b.wall_ns),
        "compute_ms": _ms_column(b.compute_ns),
        "dma_ms": _ms_column(b.dma_ns),
        "collective_ms": _ms_column(b.collective_ns),
        "collective_wait_ms": _ms_column(b.collective_wait_ns),
        "overlap_ms": _ms_column(b.overlap_ns),
        "collective_only_ms": _ms_column(b.collective_only_ns),
        "dma_only_ms": _ms_column(b.dma_only_ns),
        "not_busy_ms": _ms_column(b.not_busy_ns),
        "not_busy_pct": _np_pct_column(b.not_busy_ns, b.wall_ns),
        "emulator_overhead_ms": _ms_column(b.emulator_overhead_ns),
    }
    devices = Rows(
        len(b.device),
        {
            "device": b.device,
            "label": list(b.labels),
            **series,
        },
    )
    return {
        "steps": [
            {"step": name, "wall_ms": _ms(wall), "host_ms": _ms(host)}
            for name, wall, host in zip(
                b.names, b.wall_ns.tolist(), b.host_ns.tolist(), strict=True
            )
        ],
        "has_emulator_overhead": b.has_emulator_overhead,
        "devices": devices,
    }


def _idle(r: Report) -> dict[str, Any]:
    idle, cols = r.idle, r.idle.per_device
    per_step = cols.per_step_by_cause_ns  # [device][step][cause]
    devices = Rows(
        len(cols.device),
        {
            "device": cols.device,
            "label": list(cols.labels),
            "window_ms": _ms_column(cols.window_ns),
            "busy_ms": _ms_column(cols.busy_ns),
            "busy_pct": _pct_column(cols.busy_ns, cols.window_ns),
            "idle_ms": _ms_column(cols.idle_ns),
            "idle_pct": _pct_column(cols.idle_ns, cols.window_ns),
            "gaps": cols.gaps,
            "emulator_overhead_ms": _ms_column(cols.emulator_overhead_ns),
            "by_cause_ms": {
                c: _ms_column(cols.by_cause_ns[:, k]) for k, c in enumerate(ALL_CAUSES)
            },
            "per_step_ms": {
                **{c: _ms_column(per_step[:, :, k]) for k, c in enumerate(ALL_CAUSES)},
                "emulator_overhead": _ms_column(cols.per_step_emulator_overhead_ns),
            },
        },
    )
    return {
        "min_gap_us": idle.min_gap_ns / 1e3,
        "steps": list(r.steps.names),
        "by_cause_ms": {c: _ms(v) for c, v in idle.by_cause_ns.items()},
        "emulator_overhead_ms": _ms(idle.emulator_overhead_ns),
        "devices": devices,
        "longest_gaps": [
            {
                "device": g.device,
                "start_us": r.to_trace_us(g.start_ns),
                "at": r.position(g.start_ns).text(),
                "end_us": r.to_trace_us(g.end_ns),
                "dur_ms": _ms(g.dur_ns),
                "idle_ms": _ms(g.idle_ns),
                "emulator_overhead_ms": _ms(g.emulator_overhead_ns),
                "cause": g.cause,
                "step": r.steps.names[g.step],
                "host_activity": list(g.host_activity),
            }
            for g in idle.longest
        ],
    }


def _comm_row(row: CommRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "collectives": row.collectives,
        "collective_ms": _ms(row.collective_ns),
        "hidden_ms": _ms(row.hidden_ns),
        "exposed_ms": _ms(row.exposed_ns),
        "exposed_pct": round(100 * row.exposed_share, 3),
        "peer_wait_ms": _ms(row.peer_wait_ns),
        "exposed_by_kind_ms": {kind: _ms(ns) for kind, ns in row.exposed_by_kind},
    }


def _communication(r: Report) -> dict[str, Any]:
    comm = r.communication
    return {
        "device": comm.device,
        "device_label": comm.device_label,
        "from_fsdp": comm.from_fsdp,
        "total": _comm_row(comm.total),
        "steps": [_comm_row(s) for s in comm.steps],
        "units": [_comm_row(u) for u in comm.units],
        "flagged_units": list(comm.flagged),
    }


def memory_document(r: Report) -> dict[str, Any] | None:
    """The memory section (docs/analysis.md#memory); None when the trace has no memory
    events (the key is then left out). Shared with the TensorBoard Memory view."""
    mem = r.memory
    if mem is None:
        return None
    return {
        "steps": list(mem.steps),
        "frees_before_trace": mem.frees_before_trace,
        "without_address": mem.without_address,
        "without_bytes": mem.without_bytes,
        "near_capacity_pct": mem.near_capacity_pct,
        "devices": [_memory_device(r, d) for d in mem.devices],
        "findings": [
            {
                "kind": f.kind,
                "device": f.device,
                "title": f.title,
                "bytes": f.bytes,
                "at_us": r.to_trace_us(f.at_ns),
                "at": r.position(f.at_ns).text(),
                "suggestion": f.suggestion,
                "docs": f.docs,
            }
            for f in mem.findings
        ],
    }


def _memory_device(r: Report, d: DeviceMemory) -> dict[str, Any]:
    line = d.timeline
    return {
        "device": d.label,
        "source": d.source,
        "device_type": d.device_type,
        "device_id": d.device_id,
        "absolute": d.absolute,
        "events": d.events,
        "peak_bytes": d.peak_bytes,
        "peak_us": r.to_trace_us(d.peak_ns),
        "peak_at": r.position(d.peak_ns).text(),
        "peak_reserved_bytes": d.peak_reserved_bytes,
        "capacity_bytes": d.capacity_bytes,
        "headroom_bytes": d.headroom_bytes,
        "capacity_pct": d.capacity_pct,
        "growth_per_step_bytes": d.growth_per_step_bytes,
        "step_peak_bytes": list(d.step_peak_bytes),
        "step_floor_bytes": list(d.step_floor_bytes),
        "live_at_peak": [
            {
                "bytes": x.bytes,
                "alloc_us": r.to_trace_us(x.alloc_ns),
                "op": x.op,
                "call_site": x.call_site,
            }
            for x in d.live_at_peak
        ],
        "by_op": [
            {
                "op": o.op,
                "live_bytes": o.live_bytes,
                "live_tensors": o.live_tensors,
                "allocated_bytes": o.allocated_bytes,
                "allocations": o.allocations,
            }
            for o in d.by_op
        ],
        "timeline": {
            "ts_us": ((line.ts_ns - r.base_ns) / 1e3).tolist(),
            "series": {name: v.tolist() for name, v in zip(line.names, line.values, strict=True)},
        },
    }


def _finite(x: float) -> float | None:
    return None if math.isnan(x) else x


def _hta(r: Report) -> dict[str, Any] | None:
    t, i = r.hta_temporal, r.hta_idle
    if t is None:
        return None
    return {
        "rank": t.rank,
        "temporal": {
            "idle_time_us": t.idle_ns / 1e3,
            "compute_time_us": t.compute_ns / 1e3,
            "non_compute_time_us": t.non_compute_ns / 1e3,
            "kernel_time_us": t.kernel_ns / 1e3,
            "idle_time_pctg": _finite(t.pct(t.idle_ns)),
            "compute_time_pctg": _finite(t.pct(t.compute_ns)),
            "non_compute_time_pctg": _finite(t.pct(t.non_compute_ns)),
        },
        "idle": [
            {
                "stream": s.stream,
                "host_wait_us": s.host_wait_ns / 1e3,
                "kernel_wait_us": s.kernel_wait_ns / 1e3,
                "other_us": s.other_ns / 1e3,
                "categories": list(s.categories),
            }
            for s in (i.streams if i else ())
        ],
    }


def _options(r: Report) -> dict[str, Any]:
    return {"min_gap_us": r.options.min_gap_ns / 1e3, "top": r.options.top}


def _metrics(r: Report) -> dict[str, float | None]:
    return {k: None if v is None else round(v, 6) for k, v in metrics(r).items()}


def _tb(r: Report) -> Any:
    return r.tb_breakdown.rows() if r.tb_breakdown else None


_TRACE_SECTIONS: tuple[tuple[str, Callable[[Report], Any]], ...] = (
    ("source", lambda r: r.source),
    ("rank", lambda r: r.rank),
    ("has_device", lambda r: r.has_device),
    ("notes", lambda r: list(r.notes)),
    ("load_warnings", lambda r: list(r.load_warnings)),
    ("time_base_ns", lambda r: r.base_ns),
    ("options", _options),
    ("metrics", _metrics),
    ("findings", _findings),
    ("fallbacks", _fallbacks),
    ("syncs", _syncs),
    ("ops", _ops),
    ("kernels", _kernels),
    ("steps", _steps),
    ("step_breakdown", _breakdown),
    ("idle", _idle),
    ("communication", _communication),
    ("hta", _hta),
    ("tb_profiler_breakdown", _tb),
)  # one trace's document, in key order
