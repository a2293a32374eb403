"""``torch.accelerator.memory`` on the emulated device: a C++ ``c10::DeviceAllocator`` for
PrivateUse1 (``_allocator/device_allocator.cpp``) whose statistics are ``torch.neuron.memory``'s
(memory_api.py), registered by ``enable``.

torch.accelerator.memory asks ``c10::getDeviceAllocator(PrivateUse1)``, which only a C++ class
can answer; the extension is built on first use and cached as the Kineto bridge is
(collectors/_build.py). Where it cannot be built or loaded (no compiler...), one line on stderr
says so, ``torch.accelerator.memory`` stays unavailable and ``torch.neuron``'s functions work.
"""

from __future__ import annotations

import sys
from pathlib import Path

from neuron_profiler.emulator import memory_api

SOURCE = Path(__file__).resolve().parent / "_allocator" / "device_allocator.cpp"
CFLAGS = ["-O2"]
NAME_PREFIX = "neuron_profiler_emulator_allocator"
WHAT = "the emulated device's allocator for torch.accelerator.memory"
BUILDING_NOTICE = (
    "neuron-profiler: building the emulated device's allocator for torch.accelerator.memory "
    "(first use, about 30 s)..."
)
UNAVAILABLE = "neuron-profiler: torch.accelerator.memory does not reach the emulated device"
_problem: list[str] = []  # why it is unavailable (said once per process)
_installed = False


def install() -> bool:
    """Register the allocator (once; later calls return the first outcome): True when
    ``torch.accelerator.memory`` now reads the emulated device's statistics."""
    global _installed
    if _installed or _problem:
        return _installed
    from neuron_profiler.collectors._build import extension_name, load_extension
    from neuron_profiler.errors import CollectorUnavailableError

    try:
        name = extension_name(NAME_PREFIX, [SOURCE], CFLAGS)
        module = load_extension(name, SOURCE, BUILDING_NOTICE, WHAT, CFLAGS, kineto=False)
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
