"""The emulated device's memory in C++ (``_allocator/device_allocator.cpp``): what the Python
allocator (memory.py) cannot do from Python, built on first use and cached as the Kineto bridge
is (collectors/_build.py):

- ``torch.accelerator.memory``: a ``c10::DeviceAllocator`` for PrivateUse1 whose statistics are
  ``torch.neuron.memory``'s (memory_api.py), registered by ``enable`` (``install``).
  ``torch.accelerator.memory`` asks ``c10::getDeviceAllocator(PrivateUse1)``, which only a C++
  class can answer;
- torch.profiler's device memory reports (``c10::reportMemoryUsageToProfiler``, no Python
  binding) and the host reports turned off around device ops (memory.py);
- memory snapshots' step annotations, a RecordFunction callback (snapshot.py).

Where it cannot be built or loaded (no compiler...), each user says so in one line on stderr:
``torch.accelerator.memory`` stays unavailable, profiles carry no device memory events,
snapshots no step annotations; ``torch.neuron``'s functions and statistics work.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

from neuron_profiler.emulator import memory_api
from neuron_profiler.errors import CollectorUnavailableError

SOURCE = Path(__file__).resolve().parent / "_allocator" / "device_allocator.cpp"
CFLAGS = ["-O2"]
NAME_PREFIX = "neuron_profiler_emulator_allocator"
WHAT = "the emulated device's memory extension"
BUILDING_NOTICE = (
    "neuron-profiler: building the emulated device's memory extension (torch.accelerator.memory, "
    "profiler memory reports; first use, about 30 s)..."
)
UNAVAILABLE = "neuron-profiler: torch.accelerator.memory does not reach the emulated device"
_problem: list[str] = []  # why torch.accelerator.memory is unavailable (said once per process)
_installed = False
_native: list[ModuleType] = []  # the loaded module, once
_native_problem: list[str] = []  # why it cannot be loaded, once


def load_native() -> ModuleType:
    """The compiled module (built once per process at most; a failure is remembered and raised
    again): ``CollectorUnavailableError`` with one line naming the problem."""
    if _native:
        return _native[0]
    if _native_problem:
        raise CollectorUnavailableError(_native_problem[0])
    from neuron_profiler.collectors._build import extension_name, load_extension

    try:
        name = extension_name(NAME_PREFIX, [SOURCE], CFLAGS)
        _native.append(load_extension(name, SOURCE, BUILDING_NOTICE, WHAT, CFLAGS, kineto=False))
    except CollectorUnavailableError as err:
        _native_problem.append(str(err))
        raise
    return _native[0]


def install() -> bool:
    """Register the allocator (once; later calls return the first outcome): True when
    ``torch.accelerator.memory`` now reads the emulated device's statistics."""
    global _installed
    if _installed or _problem:
        return _installed
    try:
        module = load_native()
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
