"""``torch.accelerator.memory`` on the emulated device: a C++ ``c10::DeviceAllocator`` for
PrivateUse1 (in the memory extension, native.py) whose statistics are ``torch.neuron.memory``'s
(memory_api.py), registered by ``enable``.

torch.accelerator.memory asks ``c10::getDeviceAllocator(PrivateUse1)``, which only a C++ class
can answer. Where the extension cannot be built or loaded (no compiler...), one line on stderr
says so, ``torch.accelerator.memory`` stays unavailable and ``torch.neuron``'s functions work.
"""

from __future__ import annotations

import sys

from neuron_profiler.emulator import memory_api, native
from neuron_profiler.errors import CollectorUnavailableError

UNAVAILABLE = "neuron-profiler: torch.accelerator.memory does not reach the emulated device"
_problem: list[str] = []  # why torch.accelerator.memory is unavailable (said once per process)
_installed = False


def install() -> bool:
    """Register the allocator (once; later calls return the first outcome): True when
    ``torch.accelerator.memory`` now reads the emulated device's statistics."""
    global _installed
    if _installed or _problem:
        return _installed
    try:
        module = native.load_native()
    except CollectorUnavailableError as err:
        return _unavailable(str(err))
    if not module.install(memory_api):
        return _unavailable("another PrivateUse1 allocator is registered")
    _installed = True
    return True


def unavailable_reason() -> str | None:
    """Why ``torch.accelerator.memory`` does not reach the emulated device, or None."""
    return _problem[0] if _problem else None


def _unavailable(problem: str) -> bool:
    _problem.append(problem)
    print(f"{UNAVAILABLE}: {problem}", file=sys.stderr, flush=True)
    return False
