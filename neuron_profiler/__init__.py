"""neuron-profiler: torch.profiler for AWS Trainium (NeuronCore), with an emulated device.

Importing this package never imports torch. ``NEURON`` (the profiler activity) is resolved lazily::

    import torch
    from neuron_profiler import NEURON          # registers the Kineto collector (builds it once)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, NEURON]) as prof:
        ...

Without a usable collector (no compiler...), ``NEURON`` still imports: such profiles record CPU
events, warn once per start and say why in the trace (``neuron_collector_unavailable``).

Analysis and export work on trace files without torch::

    from neuron_profiler.trace import load_trace
    trace = load_trace("worker0.pt.trace.json.gz")
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["NEURON", "__version__"]


def __getattr__(name: str) -> Any:
    # Lazy so that `import neuron_profiler` stays torch-free; only asking for NEURON pulls in
    # torch and registers the collector.
    if name == "NEURON":
        from neuron_profiler.collectors import NEURON

        return NEURON
    raise AttributeError(f"module 'neuron_profiler' has no attribute {name!r}")
