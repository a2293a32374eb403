"""``torch.neuron`` as a device that is not here: registered by the collector when it names
PyTorch's PrivateUse1 backend "neuron" for profiling and no device module came with the name
(no TorchNeuron, the emulator not enabled). torch.accelerator asks the named backend's module
whether it is available, and without one raises (which broke ``torch.compile`` in CPU-only
programs that imported ``NEURON``). The emulator, enabled later, replaces it. Torch-free at
import; its own module so that the collector and the emulator share it without importing each
other."""

from __future__ import annotations

import sys
import types

_MARK = "_neuron_profiler_absent_device"


def register_absent_device_module(name: str) -> None:
    """Register ``torch.<name>`` answering that no device is here (``is_available()`` False,
    ``device_count()`` 0)."""
    import torch

    module = types.ModuleType(f"torch.{name}")
    module.is_available = lambda: False  # type: ignore[attr-defined]
    module.device_count = lambda: 0  # type: ignore[attr-defined]
    setattr(module, _MARK, True)
    torch._register_device_module(name, module)


def holds_absent_device_module(name: str) -> bool:
    """Whether ``torch.<name>`` is the stand-in (not a device's own module)."""
    import torch

    return bool(getattr(getattr(torch, name, None), _MARK, False))


def drop_absent_device_module(name: str) -> None:
    """Remove the stand-in so that a device's module (the emulator's) can be registered."""
    import torch

    if holds_absent_device_module(name):
        delattr(torch, name)
        sys.modules.pop(f"torch.{name}", None)
        clear = getattr(torch.get_device_module, "cache_clear", None)
        if clear is not None:  # (functools.cache: it would go on answering with the stand-in)
            clear()
