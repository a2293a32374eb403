"""Analyses: functions ``(ctx) -> Result`` over one ``AnalysisContext`` (the trace, the options
and the selections every analysis shares, computed once), each returning a frozen dataclass
that renderers and exporters consume. One module per question:

- ``context``: ``AnalysisContext`` and ``Options``; ``selections``: the shared row and name
  rules; ``causes``: one record per cause (rule, advice, docs anchor);
- ``steps``: training steps (ProfilerStep#N, or the whole trace as one step);
- ``breakdown``: per step and device, busy / compute / DMA / collective / not busy (wall - busy) / overlap, host time;
- ``idle``: device idle gaps inside the steps, one cause each (``causes``);
- ``findings``: what to fix first, ranked by recoverable time; CPU-fallback and sync groups;
- ``summary``: the operator and kernel tables;
- ``timeline``: each device queue's busy time and each device's gaps by cause, downsampled to a
  bounded number of segments per series with totals kept (the TensorBoard plugin draws it);
- ``rank_summary`` (one rank) and ``distributed`` (across ranks): stragglers, collective skew;
- ``counters``: device busy % and DMA bandwidth over time (the Perfetto exporter draws them);
- ``compat``: HTA 0.5.0's and torch-tb-profiler 0.4.3's breakdowns, reproduced with those
  tools' own rules (kept apart on purpose);
- ``report``: ``analyze(trace) -> Report``, all of the above composed.

    from neuron_profiler.analysis import analyze
    report = analyze(trace)

Nothing here imports torch, the emulator or the collector, nor pandas (``to_frame`` helpers
import pandas when called).
"""

from neuron_profiler.analysis.report import Options, Report, analyze

__all__ = ["Options", "Report", "analyze"]
