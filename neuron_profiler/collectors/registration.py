"""Registering the NEURON collector: the Kineto bridge built or loaded and registered with
torch's PrivateUse1 profiler registry, and the one Controller its sessions call, with the Source
each session reads. The package (``neuron_profiler.collectors``) registers at import and adds
the user-facing parts (``NEURON``, the unavailable-collector hook); the emulator's ``enable()``
imports this to have the collector registered, as a real device's plugin is once imported.
Nothing here imports the emulator's device: its runtime is read only once a session starts.
"""

from __future__ import annotations

import sys
from typing import Any

from neuron_profiler.errors import CollectorUnavailableError

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
            "profiling with NEURON needs torch (pip install 'neuron-profiler[torch]')"
        ) from err
    from neuron_profiler.collectors._build import load_bridge
    from neuron_profiler.collectors.session import ARG_KEYS, Controller

    bridge = load_bridge()
    if _controller is None:
        _controller = Controller(resolve_source, bridge.current_correlation_id)
        bridge.register_profiler(_controller, ARG_KEYS)
    _import_what_profiling_imports()
    return torch.profiler.ProfilerActivity.PrivateUse1


def _import_what_profiling_imports() -> None:
    """Import now what torch imports on first use inside a profile: ``record_function``'s
    ``__enter__`` imports ``torch.profiler._cupti_monitor`` (torch 2.13). Under
    ``with_stack=True`` the ``<module>`` frame of a module first imported while profiling
    can come back with a name that is not UTF-8, and ``key_averages()`` then raises
    UnicodeDecodeError (seen in 3 of 4 runs of a profile with a ``record_function`` on the
    emulated device, none once the module is imported first)."""
    import importlib

    for name in _PROFILING_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:  # (a torch without it: nothing to import early)
            pass


_PROFILING_IMPORTS = ("torch.profiler._cupti_monitor",)
