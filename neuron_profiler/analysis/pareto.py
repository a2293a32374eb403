"""The CPU-fallback Pareto: fallback groups by recoverable time, largest first, with the
cumulative share of all of them (fix the first few, win most of it)::

    p = fallback_pareto(report.findings.fallbacks)
    p.groups[0].op, p.recoverable_ns[0], p.cumulative_pct[-1]    # 100.0 unless all are 0
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from neuron_profiler.analysis.findings import FallbackGroup


@dataclass(frozen=True)
class FallbackPareto:
    """Args: groups: by recoverable time, largest first (ties keep their order);
    recoverable_ns: theirs; cumulative_pct: the running sum as a % of total_ns (all 0 when
    total_ns is 0)."""

    groups: tuple[FallbackGroup, ...] = ()
    recoverable_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cumulative_pct: np.ndarray = field(default_factory=lambda: np.zeros(0))
    total_ns: int = 0


def fallback_pareto(groups: tuple[FallbackGroup, ...]) -> FallbackPareto:
    ordered = tuple(sorted(groups, key=lambda g: -g.recoverable_ns))
    ns = np.array([g.recoverable_ns for g in ordered], np.int64)
    total = int(ns.sum())
    cumulative = 100.0 * np.cumsum(ns) / total if total else np.zeros(len(ns))
    return FallbackPareto(
        groups=ordered, recoverable_ns=ns, cumulative_pct=cumulative, total_ns=total
    )
