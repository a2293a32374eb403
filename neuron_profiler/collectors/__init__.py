"""The Kineto collector: NeuronCore activity inside torch.profiler traces::

    from neuron_profiler import NEURON      # or: from neuron_profiler.collectors import NEURON
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, NEURON]) as prof:
        ...

Importing this package registers the collector (building the C++ bridge on first use, cached);
asking for ``NEURON`` also names the PrivateUse1 backend "neuron" when nothing else has.
If the bridge cannot be built or loaded (no compiler, failed compile, unusable extension
directory...), the import still succeeds and ``NEURON`` is still ``ProfilerActivity.PrivateUse1``:
a profile asking for it records CPU events, warns once when it starts
(``CollectorUnavailableWarning``, naming the problem) and carries the problem in its trace
metadata (``META_UNAVAILABLE``). ``unavailable_reason()`` / ``require()`` ask up front. Only
without torch does asking for ``NEURON`` raise ``CollectorUnavailableError``. Device activity
comes from the Source chosen per session: ``set_source`` if called, else the emulated runtime
once ``neuron_profiler.emulator`` is in use, else libnrt when it loads.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from neuron_profiler.absent_device import register_absent_device_module
from neuron_profiler.collectors.registration import last_session, register, set_source
from neuron_profiler.errors import NeuronProfilerError
from neuron_profiler.trace import vocabulary as V

__all__ = [
    "NEURON",
    "CollectorUnavailableWarning",
    "META_UNAVAILABLE",
    "last_session",
    "register",
    "require",
    "set_source",
    "unavailable_reason",
]

BACKEND_NAME = "neuron"
REAL_BACKEND = "torch_neuronx"  # TorchNeuron's package: it registers torch.neuron itself
# Top-level trace metadata key of a profile that asked for NEURON while the collector was
# unavailable; its value is the reason (the CollectorUnavailableError message).
META_UNAVAILABLE = V.META_UNAVAILABLE
_error: NeuronProfilerError | None = None
_HOOK_MARK = "_neuron_profiler_unavailable_hook"


class CollectorUnavailableWarning(UserWarning):
    """A profile asked for NEURON but the collector is unavailable: CPU events only."""


def _name_backend() -> None:
    """Name PrivateUse1 "neuron" if nobody has: torch reads the name when a profile() is built
    and starts no device session without it. Done when NEURON is asked for, not at import, so
    that importing this package first does not stop the emulator from registering itself."""
    import torch

    if os.environ.get("NEURON_PROFILER_EMULATE") == "1":
        import neuron_profiler.emulator  # noqa: F401 - enables the emulated device (env var)
    if torch._C._get_privateuse1_backend_name() == "privateuseone":
        torch.utils.rename_privateuse1_backend(BACKEND_NAME)
    if not hasattr(torch, BACKEND_NAME) and importlib.util.find_spec(REAL_BACKEND) is None:
        # no device module came with the name, and TorchNeuron, which registers one when it is
        # imported (a stand-in would be in its way), is not installed: no device is here
        register_absent_device_module(BACKEND_NAME)


def unavailable_reason() -> str | None:
    """Why NEURON profiles get no device events (one line), or None when the collector works."""
    return None if _error is None else str(_error)


def require() -> None:
    """Raise the CollectorUnavailableError naming the problem when the collector is unavailable
    (for callers such as the demo, for which a CPU-only profile is pointless)."""
    if _error is not None:
        raise _error


def _user_stacklevel() -> int:
    """stacklevel pointing a warning at the first frame outside torch.profiler and this file,
    i.e. the user's ``with profile(...)`` or ``prof.step()`` line, however deep torch calls."""
    import torch.profiler

    internal = (str(Path(torch.profiler.__file__).resolve().parent), str(Path(__file__).resolve()))
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(internal):
        frame, level = frame.f_back, level + 1
    return level


def _warn_unavailable() -> None:
    warnings.warn(
        f"neuron-profiler: NEURON device events unavailable, profiling CPU only: {_error}",
        CollectorUnavailableWarning,
        stacklevel=_user_stacklevel(),
    )


def _install_unavailable_hook() -> None:
    """Wrap torch.profiler's start methods (once per process) so that a profile asking for
    NEURON warns once each time it starts (``with profile(...)`` / ``start()``) and every trace
    it writes carries ``META_UNAVAILABLE``.

    ``profile.start`` and ``_KinetoProfile.start`` are the user-facing starts (``__enter__``
    calls them); ``_KinetoProfile.start_trace`` is the one method every recording cycle runs
    (each ``schedule`` cycle via ``step()``) right after Kineto starts, when metadata can be
    added. Installed only when the collector is unavailable: a working set-up runs torch as is.
    """
    from torch.profiler import ProfilerActivity, profiler

    def asks_neuron(prof: Any) -> bool:
        return _error is not None and ProfilerActivity.PrivateUse1 in prof.activities

    def wrap_start(original: Any) -> Any:
        def start(self: Any) -> None:
            if asks_neuron(self):
                _warn_unavailable()
            original(self)

        return start

    def wrap_start_trace(original: Any) -> Any:
        def start_trace(self: Any) -> None:
            original(self)
            if asks_neuron(self):
                self.add_metadata_json(META_UNAVAILABLE, json.dumps(str(_error)))

        return start_trace

    for cls, method, wrap in (
        (profiler._KinetoProfile, "start", wrap_start),
        (profiler.profile, "start", wrap_start),
        (profiler._KinetoProfile, "start_trace", wrap_start_trace),
    ):
        original = cls.__dict__[method]
        if getattr(original, _HOOK_MARK, False):
            continue
        wrapped = functools.wraps(original)(wrap(original))
        setattr(wrapped, _HOOK_MARK, True)
        setattr(cls, method, wrapped)


def __getattr__(name: str) -> Any:
    if name == "NEURON":
        if _error is None:
            activity = register()
        else:  # still a valid activity: the profile runs CPU-only, warns and says why
            try:
                import torch
            except ImportError:
                raise _error from None  # (its message says torch is needed)
            activity = torch.profiler.ProfilerActivity.PrivateUse1
            _install_unavailable_hook()
        _name_backend()
        return activity
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


try:
    register()
except NeuronProfilerError as _err:  # import succeeds; profiles with NEURON warn with this
    _error = _err
