"""Named scalar metrics of a report, and ``--fail-on`` rules over them (for CI)::

    values = metrics(report)                     # {"idle_pct": 41.2, "step_ms": 12.5, ...}
    rule = parse_rule("idle_pct>30")
    rule.breached(values["idle_pct"])

Metrics (over several devices the worst device counts; over several traces, the worst trace;
every metric but ``step_ms`` is None for a trace without device time in its steps):
- ``step_ms``: mean step wall time;
- ``idle_pct``: device idle time, % of the step spans (emulator overhead is not idle time);
- ``idle_ms_per_step``: device idle time per step;
- ``<cause>_ms_per_step``: idle time given that cause per step (``collective_wait``,
  ``data_loading``, ``cpu_fallback``, ``host_sync``, ``host_bound_launch``,
  ``profiler_overhead``, ``other``, ``short_gaps``: ``causes.ALL_CAUSES``);
- ``fallback_ms_per_step``: an alias of ``cpu_fallback_ms_per_step``.

The rule parser is shared: ``neuron-prof diff --fail-on`` passes its own metric names and lets
a threshold end in ``%`` (``delta_ms>5%``: of trace A's mean step).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis.causes import ALL_CAUSES
from neuron_profiler.analysis.report import Report
from neuron_profiler.errors import NeuronProfilerError

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
}
_RULE = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|==|>|<)\s*(-?[0-9]+(?:\.[0-9]*)?)\s*(%?)\s*$")
METRIC_NAMES = ("step_ms", "idle_pct", "idle_ms_per_step", "fallback_ms_per_step") + tuple(
    f"{c}_ms_per_step" for c in ALL_CAUSES
)
DEVICE_METRICS = METRIC_NAMES[1:]  # None (JSON null) for a trace without device time


def metrics(report: Report) -> dict[str, float | None]:
    """The metrics of one report; the device metrics are None where no device has time in the
    steps (a CPU-only trace): a made-up 0 would pass ``idle_pct<1`` and fail ``idle_pct>30``'s
    opposite for a trace that has no device to judge."""
    steps = max(len(report.steps), 1)
    wall = report.steps.wall_ns
    out: dict[str, float | None] = {"step_ms": float(wall.mean()) / 1e6 if len(wall) else 0.0}
    devices = report.idle.per_device
    timed = devices.window_ns > 0
    if not timed.any():
        out.update(dict.fromkeys(DEVICE_METRICS))
        return out
    out["idle_pct"] = _max(100 * devices.idle_ns[timed] / devices.window_ns[timed])
    out["idle_ms_per_step"] = _max(devices.idle_ns / 1e6 / steps)
    for cause in ALL_CAUSES:
        out[f"{cause}_ms_per_step"] = _max(devices.cause_ns(cause) / 1e6 / steps)
    out["fallback_ms_per_step"] = out["cpu_fallback_ms_per_step"]
    return out


def _max(values: np.ndarray) -> float:
    """The largest, 0.0 when there is none (as the per-device figures are worded)."""
    return float(values.max()) if len(values) else 0.0


@dataclass(frozen=True)
class Rule:
    """``metric op threshold``, e.g. ``idle_pct>30``; ``percent``: the threshold ended in
    ``%`` (the caller says of what)."""

    text: str
    metric: str
    op: str
    threshold: float
    percent: bool = False

    def breached(self, value: float) -> bool:
        return _OPS[self.op](value, self.threshold)


def parse_rule(text: str, known: tuple[str, ...] = METRIC_NAMES, *, percent: bool = False) -> Rule:
    """``known``: the metric names; ``percent``: whether a threshold may end in ``%``."""
    m = _RULE.match(text)
    example = f"{known[0]}>5%" if percent else "idle_pct>30"
    if not m or (m.group(4) and not percent):
        raise NeuronProfilerError(
            f"--fail-on {text!r}: expected METRIC OP NUMBER (e.g. {example})", exit_code=2
        )
    if m.group(1) not in known:
        raise NeuronProfilerError(
            f"--fail-on {text!r}: unknown metric {m.group(1)!r} (known: {', '.join(known)})",
            exit_code=2,
        )
    return Rule(
        text=text.strip(),
        metric=m.group(1),
        op=m.group(2),
        threshold=float(m.group(3)),
        percent=bool(m.group(4)),
    )


def worst(values: list[dict[str, float | None]], rule: Rule) -> float | None:
    """The value that counts for a rule over several traces: the one furthest past it; None
    when no trace has the metric (no device time anywhere: the rule cannot be judged)."""
    picked = [v[rule.metric] for v in values if v[rule.metric] is not None]
    if not picked:
        return None
    return min(picked) if rule.op in ("<", "<=") else max(picked)
