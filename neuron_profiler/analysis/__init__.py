"""Analyses: pure functions from a ``Trace`` to frozen dataclasses that renderers and exporters
consume. One module per question:

- ``steps``: training steps (ProfilerStep#N, or the whole trace as one step);
- ``breakdown``: per step and device, busy / compute / DMA / collective / idle / overlap, host time;
- ``idle``: device idle gaps inside the steps, one cause each, by documented rules;
- ``hta_compat``: HTA 0.5.0's temporal and idle-time breakdowns, reproduced;
- ``tb_profiler``: torch-tb-profiler 0.4.3's step-time breakdown, reproduced;
- ``counters``: device busy % and DMA bandwidth over time;
- ``timeline``: each device queue's busy time and each device's gaps by cause, downsampled to a
  bounded number of segments per series with totals kept (the TensorBoard plugin draws it);
- ``report``: ``analyze(trace) -> Report``, all of the above composed.

    from neuron_profiler.analysis import analyze
    report = analyze(trace)

Nothing here imports torch, the emulator, the collector or pandas (``to_frame`` helpers import
pandas when called).
"""

from neuron_profiler.analysis.report import Options, Report, analyze

__all__ = ["Options", "Report", "analyze"]
