"""The emulated device's memory in C++ (``_allocator/device_allocator.cpp``), loaded once: what the
Python allocator (memory.py) cannot do from Python, built on first use and cached as the Kineto
bridge is (cpp_extensions.py; loading it neither builds nor registers the bridge):

- ``torch.accelerator.memory``: a ``c10::DeviceAllocator`` for PrivateUse1 whose statistics are
  ``torch.neuron.memory``'s (memory_api.py), registered by ``enable`` (device_allocator.py).
  ``torch.accelerator.memory`` asks ``c10::getDeviceAllocator(PrivateUse1)``, which only a C++
  class can answer;
- torch.profiler's device memory reports (``c10::reportMemoryUsageToProfiler``, no Python
  binding) and the host reports turned off around device ops (memory.py);
- memory snapshots' step annotations, a RecordFunction callback (snapshot.py).
- the PrivateUse1 hooks and device guard (device.py, ``_setup_backend``): a device guard that
  never calls Python, so a backward hook's exception reaches the caller.

Where it cannot be built or loaded (no compiler...), ``torch.accelerator.memory`` stays
unavailable and profiles carry no device memory events, each said in one line on stderr
(device_allocator.py, memory.py); snapshots carry no step annotations; torch's Python device
guard is registered, with which a backward hook's exception ends the process; ``torch.neuron``'s
functions and statistics work.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from neuron_profiler.errors import CollectorUnavailableError

SOURCE = Path(__file__).resolve().parent / "_allocator" / "device_allocator.cpp"
CFLAGS = ["-O2"]
NAME_PREFIX = "neuron_profiler_emulator_allocator"
WHAT = "the emulated device's memory extension"
BUILDING_NOTICE = (
    "neuron-profiler: building the emulated device's memory extension (torch.accelerator.memory, "
    "profiler memory reports; first use, about 30 s)..."
)
_native: list[ModuleType] = []  # the loaded module, once
_native_problem: list[str] = []  # why it cannot be loaded, once


def loaded() -> ModuleType | None:
    """The compiled module if it is loaded already (never builds it)."""
    return _native[0] if _native else None


def load_native() -> ModuleType:
    """The compiled module (built once per process at most; a failure is remembered and raised
    again): ``CollectorUnavailableError`` with one line naming the problem."""
    if _native:
        return _native[0]
    if _native_problem:
        raise CollectorUnavailableError(_native_problem[0])
    from neuron_profiler.cpp_extensions import extension_name, load_extension

    try:
        name = extension_name(NAME_PREFIX, [SOURCE], CFLAGS)
        _native.append(load_extension(name, SOURCE, BUILDING_NOTICE, WHAT, CFLAGS, kineto=False))
    except CollectorUnavailableError as err:
        _native_problem.append(str(err))
        raise
    return _native[0]
