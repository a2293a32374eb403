"""The drawable device timeline (``analysis.timeline``) as JSON: what the TensorBoard plugin's
``timeline`` route serves. Columnar per series, times in the trace's own µs::

    timeline_document(report)   # {"start_us", "end_us", "queues": [...], "idle": [...], ...}

Per series: ``segments`` = {"start_us", "dur_us", "busy_us", "busy_pct"} lists (busy_pct:
the share of the segment covered, 100 for an exact interval); ``exact`` false when the series
was downsampled into bins of ``bin_us``; ``intervals`` how many it had; ``gaps`` (idle series) how
many whole gaps of that cause there are (one gap may give several counted intervals).
"""

from __future__ import annotations

from typing import Any

from neuron_profiler.analysis.report import Report
from neuron_profiler.analysis.timeline import Segments


def _segments(r: Report, s: Segments) -> dict[str, list[float]]:
    dur = s.end_ns - s.start_ns
    return {
        "start_us": [r.to_trace_us(int(t)) for t in s.start_ns.tolist()],
        "dur_us": (dur / 1e3).tolist(),
        "busy_us": (s.busy_ns / 1e3).tolist(),
        "busy_pct": (100.0 * s.busy_ns / dur.clip(min=1)).round(3).tolist(),
    }


def timeline_document(r: Report) -> dict[str, Any]:
    """The report's timeline (``Options.timeline_segments`` set); empty series otherwise."""
    tl = r.timeline
    if tl is None or not (tl.queues or tl.idle):
        return {
            "start_us": None,
            "end_us": None,
            "max_segments": tl.max_segments if tl else 0,
            "bin_us": 0.0,
            "downsampled": False,
            "queues": [],
            "idle": [],
        }
    return {
        "start_us": r.to_trace_us(tl.start_ns),
        "end_us": r.to_trace_us(tl.end_ns),
        "max_segments": tl.max_segments,
        "bin_us": round(tl.bin_ns / 1e3, 3),
        "downsampled": tl.downsampled,
        "queues": [
            {
                "device": q.device,
                "label": q.label,
                "queue": q.queue,
                "name": q.name,
                "busy_ms": q.busy_ns / 1e6,
                "exact": q.segments.exact,
                "intervals": q.segments.intervals,
                "segments": _segments(r, q.segments),
            }
            for q in tl.queues
        ],
        "idle": [
            {
                "device": s.device,
                "label": s.label,
                "cause": s.cause,
                "idle_ms": s.idle_ns / 1e6,
                "exact": s.segments.exact,
                "intervals": s.segments.intervals,
                "gaps": s.gaps,
                "segments": _segments(r, s.segments),
            }
            for s in tl.idle
        ],
    }
