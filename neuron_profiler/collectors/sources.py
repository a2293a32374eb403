"""Where device activity comes from: one ``Source`` protocol, two implementations.

    src = EmulatorSource()            # the emulated runtime (neuron_profiler.emulator.runtime)
    src = LibnrtSource.load()         # the real runtime through libnrt's nrt_sys_trace_* (ctypes)
    src.start(max_events_per_nc=1_000_000); ...; payload = src.stop()   # system-trace JSON

Both hand out the same system-trace JSON, so one parser (runtime_trace.parser) serves both.
``links_by_correlation`` says how device work is tied to host ops: the emulator stamps the
launching op's correlation id on its events; the real runtime does not, so the session links by
thread and time containment instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Source(Protocol):
    """A runtime event source for one profiling session at a time."""

    name: str
    links_by_correlation: bool

    def start(self, max_events_per_nc: int, correlation: Callable[[], int] | None) -> None:
        """Begin capture; ``correlation`` returns the launching op's id (emulator only)."""

    def stop(self) -> bytes:
        """End capture and return everything captured (system-trace JSON bytes)."""

    def device_properties(self) -> list[dict[str, Any]]:
        """One dict per NeuronCore: id, name, chip, hbm_bytes, peak_bf16_tflops, emulated..."""


class EmulatorSource:
    """The emulated runtime (interface A): capture between start and stop, fetch-once."""

    name = "emulator"
    links_by_correlation = True

    def __init__(self) -> None:
        from neuron_profiler.emulator import runtime

        self._mod = runtime
        self._rt = runtime.get_runtime()

    def start(self, max_events_per_nc: int, correlation: Callable[[], int] | None) -> None:
        if self._rt.capturing:  # a session that never stopped (crashed profiler): end it
            self._rt.sys_trace_stop()
        self._rt.sys_trace_fetch()  # discard leftovers so this session sees only its own window
        self._mod.set_correlation_provider(correlation)
        self._rt.sys_trace_start(max_events_per_nc=max_events_per_nc)

    def stop(self) -> bytes:
        self._mod.set_correlation_provider(None)
        self._rt.sys_trace_stop()
        return self._rt.sys_trace_fetch()

    def device_properties(self) -> list[dict[str, Any]]:
        return self._rt.device_properties()


class LibnrtSource:
    """The real Neuron runtime via ctypes (see libnrt.py); links by containment.

    Not run on Trainium hardware by this project: tested against tests/fake_libnrt only.
    """

    name = "libnrt"
    links_by_correlation = False

    def __init__(self, lib: Any) -> None:
        self._lib = lib  # a libnrt.SysTrace

    @classmethod
    def load(cls, path: str | None = None) -> LibnrtSource:
        from neuron_profiler.collectors.libnrt import SysTrace

        return cls(SysTrace.load(path))

    def start(self, max_events_per_nc: int, correlation: Callable[[], int] | None) -> None:
        self._lib.start(max_events_per_nc=max_events_per_nc)

    def stop(self) -> bytes:
        payload = self._lib.fetch()
        self._lib.stop()
        return payload

    def device_properties(self) -> list[dict[str, Any]]:
        return [{"id": c, "name": f"NeuronCore {c}", "chip": "unknown", "emulated": False}
                for c in self._lib.cores()]
