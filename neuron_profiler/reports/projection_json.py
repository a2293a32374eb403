"""The ``neuron-prof project --json`` document, versioned and documented by the JSON Schema
shipped beside it (``projection.schema.json``)::

    doc = projection_document(p)
    json.dumps(doc, indent=1)

``_ms`` figures are per step (means over the steps used); ``classes`` rows are per-step means,
the ``compute`` row summing the device's compute kernels (copies and collectives excluded) and
``memory_bound`` the part of them bound by memory.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from neuron_profiler.analysis.projection import OpRow, Projection

SCHEMA_VERSION = "1"
SCHEMA_FILE = "projection.schema.json"


def schema_text() -> str:
    return resources.files("neuron_profiler.reports").joinpath(SCHEMA_FILE).read_text()


def document_text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1)


def projection_document(p: Projection) -> dict[str, Any]:
    from neuron_profiler import __version__

    return {
        "schema_version": SCHEMA_VERSION,
        "tool": f"neuron-profiler {__version__}",
        "source": {"chip": p.source.chip, "step_ms": _ms(p.source.step_ms)},
        "target": {
            "chip": p.target.chip,
            "step_ms": _ms(p.target.step_ms),
            "low_ms": _ms(p.target.low_ms),
            "high_ms": _ms(p.target.high_ms),
        },
        "replay": {"step_ms": _ms(p.replay_ms), "error_pct": round(p.replay_error_pct, 3)},
        "steps": p.steps,
        "items": {"device": p.items, "priced": p.priced},
        "classes": [
            {"class": c.cls, "source_ms": _ms(c.source_ms), "target_ms": _ms(c.target_ms)}
            for c in p.classes
        ],
        "ops": [_op(o) for o in p.ops],
        "fallbacks": [_op(o) for o in p.fallbacks],
        "what_if": [
            {"edit": w.edit, "step_ms": _ms(w.step_ms), "delta_ms": _ms(w.delta_ms)}
            for w in p.what_if
        ],
        "assumptions": list(p.assumptions),
    }


def _op(o: OpRow) -> dict[str, Any]:
    return {
        "name": o.name,
        "class": o.cls,
        "count": o.count,
        "source_ms": _ms(o.source_ms),
        "target_ms": _ms(o.target_ms),
        "fallback": o.fallback,
    }


def _ms(v: float) -> float:
    return round(float(v), 4)
