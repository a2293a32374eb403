"""Typed surface of the emulated device's memory extension (device_allocator.cpp), as
emulator.native.load_native() returns it."""

from types import ModuleType

def install(api: ModuleType) -> bool:
    """Register the emulator's PrivateUse1 c10::DeviceAllocator answering from ``api``
    (memory_api); False, nothing changed, when another PrivateUse1 allocator is registered."""

def install_hooks() -> bool:
    """Register the emulator's PrivateUse1 hooks (pinned allocator, generators); False, nothing
    changed, when hooks are registered already."""

def install_device_guard() -> bool:
    """Register the emulator's PrivateUse1 device guard (C++, never calls Python); False,
    nothing changed, when a PrivateUse1 guard is registered already."""

def is_pinned_ptr(address: int) -> bool:
    """Whether ``address`` starts a live buffer of the hooks' pinned allocator."""

def report_memory_usage(
    ptr: int, alloc_size: int, total_allocated: int, total_reserved: int, device_index: int
) -> None:
    """c10::reportMemoryUsageToProfiler for neuron:``device_index`` (``alloc_size`` < 0: a free)."""

def host_reports_off() -> bool:
    """While this thread's profiler records memory: stop the CPU allocator's reports here until
    ``host_reports_on`` (device reports still go through); False: nothing to stop."""

def host_reports_on() -> None:
    """Undo one ``host_reports_off`` that returned True."""

def memory_profiling_enabled() -> bool:
    """c10::memoryProfilingEnabled(): a profiler with profile_memory=True records this thread."""

def record_steps(enabled: bool) -> None:
    """Start/stop noting torch.profiler's ProfilerStep# record functions (memory snapshots)."""

def take_steps() -> list[tuple[str, bool, int]]:
    """The step marks noted since the last call: (name, is start, host epoch us)."""
