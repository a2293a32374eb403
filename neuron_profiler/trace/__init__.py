"""The one trace model and its loaders (torch-free)."""

from neuron_profiler.trace.model import MetaEvent, Trace, TraceBuilder
from neuron_profiler.trace.schema import EventKind, Phase

__all__ = ["EventKind", "MetaEvent", "Phase", "Trace", "TraceBuilder", "load_trace"]


def load_trace(path, **kwargs):  # noqa: ANN001, ANN201 - thin re-export, see loader.load_trace
    from neuron_profiler.trace.loader import load_trace as _load

    return _load(path, **kwargs)
