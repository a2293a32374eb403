"""Trace writers: Chrome JSON (chrome.py) and Perfetto protobuf (perfetto.py); they compute nothing
themselves (counter tracks come from neuron_profiler.analysis.counters)."""
