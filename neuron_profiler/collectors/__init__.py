"""The Kineto collector: NeuronCore activity inside torch.profiler traces::

    from neuron_profiler import NEURON      # or: from neuron_profiler.collectors import NEURON
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, NEURON]) as prof:
        ...

Importing this package registers the collector (building the C++ bridge on first use, cached);
asking for ``NEURON`` also names the PrivateUse1 backend "neuron" when nothing else has.
If it cannot (no torch, no compiler...), the import still succeeds and asking for ``NEURON``
raises ``CollectorUnavailableError`` naming the missing piece. Device activity comes from the
Source chosen per session: ``set_source`` if called, else the emulated runtime once
``neuron_profiler.emulator`` is in use, else libnrt when it loads.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from neuron_profiler.errors import CollectorUnavailableError, NeuronProfilerError

__all__ = ["NEURON", "register", "set_source", "last_session"]

BACKEND_NAME = "neuron"
_error: NeuronProfilerError | None = None
_controller: Any = None
_source_override: Any = None


def set_source(source: Any) -> None:
    """Use ``source`` (a sources.Source) for the next sessions; None restores the default."""
    global _source_override
    _source_override = source


def resolve_source() -> Any:
    """The Source for a new session (raises CollectorUnavailableError when there is none)."""
    from neuron_profiler.collectors import sources

    if _source_override is not None:
        return _source_override
    if "neuron_profiler.emulator.runtime" in sys.modules:
        return sources.EmulatorSource()
    return sources.LibnrtSource.load()


def last_session() -> Any:
    """The SessionResult of the most recent session (counts for tests and the demo)."""
    return None if _controller is None else _controller.last_result


def register() -> Any:
    """Build/load the bridge and register it with torch's PrivateUse1 profiler registry."""
    global _controller
    try:
        import torch
    except ImportError as err:
        raise CollectorUnavailableError(
            "profiling with NEURON needs torch (pip install 'neuron-profiler[torch]')") from err
    from neuron_profiler.collectors._build import load_bridge
    from neuron_profiler.collectors.session import ARG_KEYS, Controller

    bridge = load_bridge()
    if _controller is None:
        _controller = Controller(resolve_source, bridge.current_correlation_id)
        bridge.register_profiler(_controller, ARG_KEYS)
    return torch.profiler.ProfilerActivity.PrivateUse1


def _name_backend() -> None:
    """Name PrivateUse1 "neuron" if nobody has: torch reads the name when a profile() is built
    and starts no device session without it. Done when NEURON is asked for, not at import, so
    that importing this package first does not stop the emulator from registering itself."""
    import torch

    if os.environ.get("NEURON_PROFILER_EMULATE") == "1":
        import neuron_profiler.emulator  # noqa: F401 - enables the emulated device (env var)
    if torch._C._get_privateuse1_backend_name() == "privateuseone":
        torch.utils.rename_privateuse1_backend(BACKEND_NAME)


def __getattr__(name: str) -> Any:
    if name == "NEURON":
        if _error is not None:
            raise _error
        activity = register()
        _name_backend()
        return activity
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


try:
    register()
except NeuronProfilerError as _err:  # import succeeds; NEURON raises this
    _error = _err
