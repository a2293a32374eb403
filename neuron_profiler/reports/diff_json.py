"""The ``neuron-prof diff --json`` document, versioned and documented by the JSON Schema shipped
beside it (``diff.schema.json``)::

    doc = diff_document([d])            # one TraceDiff per pair of traces compared
    json.dumps(doc, indent=1)

Units are in the key names: ``_ms`` are ms per compared step (means over the steps), ``_pct``
percentages of trace A's mean step. With rank directories, the top level is the pair whose
mean step changed most (the one a CI gate reads), ``pairs`` lists every pair (with its rank when
paired by rank) and ``pairing`` says how they were paired.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from neuron_profiler.analysis.diff import COMPONENTS, Row, Side, TraceDiff, main_diff
from neuron_profiler.analysis.rank_pairs import BY_FILES, RankPairs

SCHEMA_VERSION = "2"  # 2: mappings once for both sides (a_ops, b_ops), pairing, pair ranks
SCHEMA_FILE = "diff.schema.json"


def schema_text() -> str:
    return resources.files("neuron_profiler.reports").joinpath(SCHEMA_FILE).read_text()


def document_text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1)


def diff_document(
    diffs: list[TraceDiff],
    breaches: list[dict[str, Any]] = (),
    top: int | None = None,  # type: ignore[assignment]
    pairing: RankPairs | None = None,
) -> dict[str, Any]:
    """``diffs``: one per pair (at least one); the top level is ``main_diff``'s. ``top``: rows shown before the rest are folded (default: ``TraceDiff.folded``'s).
    ``pairing``: how rank traces were paired (default: two files)."""
    from neuron_profiler import __version__

    main = main_diff(diffs)
    pairing = pairing or RankPairs((), BY_FILES, (None,) * len(diffs))
    fold = {} if top is None else {"top": top}
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": f"neuron-profiler {__version__}",
        "a": _side(main.a),
        "b": _side(main.b),
        "steps_by": main.steps_by,
        "group_by": main.group_by,
        "delta_ms": _ms(main.delta_ms),
        "delta_pct": round(main.delta_pct, 3),
        "residual_ms": _ms(main.residual_ms),
        "components": list(COMPONENTS),
        "rows": [_row(r) for r in main.folded(**fold)],
        "idle_by_cause": [
            {
                "cause": c.cause,
                "a_ms": _ms(c.a_ms),
                "b_ms": _ms(c.b_ms),
                "delta_ms": _ms(c.delta_ms),
            }
            for c in main.idle
        ],
        "mappings": [
            {
                "rule": m.rule,
                "side": m.side,
                "from": m.raw,
                "to": m.mapped,
                "ops": m.ops,
                "a_ops": m.a_ops,
                "b_ops": m.b_ops,
            }
            for m in main.mappings
        ],
        "alignment": {"segments": main.segments, "by_occurrence": main.by_occurrence},
        "notes": list(main.notes),
        "pairing": {"by": pairing.by, "note": pairing.note},
        "pairs": [
            {
                "rank": rank,
                "a": d.a.source,
                "b": d.b.source,
                "a_step_ms": _ms(d.a.step_ms),
                "b_step_ms": _ms(d.b.step_ms),
                "delta_ms": _ms(d.delta_ms),
                "residual_ms": _ms(d.residual_ms),
            }
            for d, rank in zip(diffs, pairing.ranks, strict=True)
        ],
        "fail_on": list(breaches),
    } | _memory(main)


def _memory(d: TraceDiff) -> dict[str, Any]:
    """``memory_peaks`` when either run recorded memory (no key otherwise)."""
    if not d.memory:
        return {}
    return {
        "memory_peaks": [
            {
                "device": m.device,
                "a_bytes": m.a_bytes,
                "b_bytes": m.b_bytes,
                "delta_bytes": m.delta_bytes,
                "a_held_bytes": m.a_held_bytes,
                "b_held_bytes": m.b_held_bytes,
            }
            for m in d.memory
        ]
    }


def _side(s: Side) -> dict[str, Any]:
    return {
        "source": s.source,
        "step_ms": _ms(s.step_ms),
        "steps": list(s.steps),
        "devices": s.devices,
        "modelled": s.modelled,
    }


def _row(r: Row) -> dict[str, Any]:
    return {
        "key": r.key,
        "kind": r.kind,
        "a_ms": _ms(r.a_ms),
        "b_ms": _ms(r.b_ms),
        "delta_ms": _ms(r.delta_ms),
        "a_parts_ms": dict(zip(COMPONENTS, map(_ms, r.a_parts_ms), strict=True)),
        "b_parts_ms": dict(zip(COMPONENTS, map(_ms, r.b_parts_ms), strict=True)),
        "a_ops_per_step": round(r.a_ops, 3),
        "b_ops_per_step": round(r.b_ops, 3),
        "notes": list(r.notes),
    }


def _ms(value: float) -> float:
    return round(float(value), 6) + 0.0  # (no -0.0)
