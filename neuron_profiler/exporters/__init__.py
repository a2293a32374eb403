"""Trace writers: Chrome JSON (chrome.py) and Perfetto protobuf (perfetto.py), chosen by the
output's suffix through one registry (writers.py: ``write_trace``); they compute nothing
themselves (counter tracks come from neuron_profiler.analysis.counters)."""

from neuron_profiler.exporters.writers import WRITERS, Written, write_trace, writer_for

__all__ = ["WRITERS", "Written", "write_trace", "writer_for"]
