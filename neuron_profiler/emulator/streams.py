"""``torch.neuron.Event`` / ``Stream``: what GPU-style code uses to time and order device work.

    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record(); model(x); end.record(); end.synchronize()
    start.elapsed_time(end)          # ms of *modelled* device time between the two points

The emulator models one in-order stream per core (compute and DMA), so every stream of a core is
that stream: ``wait_stream``/``wait_event`` are already satisfied by stream order. An event
records the device time at which everything launched on its core so far is done.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from neuron_profiler.emulator import dispatch as D


def _core(device: Any) -> int:
    if device is None:
        return D.STATE.current_core
    if isinstance(device, int):
        return device
    idx = D.core_of(device)
    return D.STATE.current_core if idx is None else idx


class Stream:
    """The core's (single, in-order) stream."""

    def __init__(self, device: Any = None, priority: int = 0, **_: Any) -> None:
        self.core = _core(device)
        self.priority = priority

    @property
    def device(self) -> Any:
        import torch

        return torch.device("neuron", self.core)

    def synchronize(self) -> None:
        tl = D.STATE.timeline
        if tl is not None:
            tl.host_sync([self.core], "stream_synchronize", op="torch.neuron.Stream.synchronize")

    def query(self) -> bool:
        tl = D.STATE.timeline
        return tl is None or tl.busy_until_ns([self.core]) <= time.time_ns()

    def wait_stream(self, stream: Stream) -> None:
        """Same core: already ordered. Another core: later work there waits on the device."""

    def wait_event(self, event: Event) -> None:
        """Already satisfied by stream order on one core."""

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.core == self.core

    def __hash__(self) -> int:
        return hash(("neuron-stream", self.core))


class Event:
    """A point on a core's device timeline (host-clock ns), as ``torch.cuda.Event``."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> None:
        self.enable_timing = enable_timing
        self.core: int | None = None
        self.device_ns: int | None = None

    def record(self, stream: Stream | None = None) -> None:
        self.core = stream.core if stream is not None else D.STATE.current_core
        tl = D.STATE.timeline
        self.device_ns = tl.busy_until_ns([self.core]) if tl is not None else time.time_ns()
        self.device_ns = max(self.device_ns, time.time_ns())  # an idle core reaches it now

    def query(self) -> bool:
        return self.device_ns is None or self.device_ns <= time.time_ns()

    def synchronize(self) -> None:
        tl = D.STATE.timeline
        if self.device_ns is not None and tl is not None and self.core is not None:
            tl.host_sync(
                [self.core],
                "event_synchronize",
                op="torch.neuron.Event.synchronize",
                until_ns=self.device_ns,
            )

    def wait(self, stream: Stream | None = None) -> None:
        """Already satisfied by stream order on one core."""

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds of device time from this event to ``end_event``."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self.device_ns is None or end_event.device_ns is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event.device_ns - self.device_ns) / 1e6


def current_stream(device: Any = None) -> Stream:
    return Stream(device)


default_stream = current_stream


@contextlib.contextmanager
def stream(s: Stream | None) -> Iterator[None]:
    """``with torch.neuron.stream(s):`` — one stream per core, so only the core switches."""
    if s is None:
        yield
        return
    prev = D.STATE.current_core
    D.STATE.current_core = s.core
    try:
        yield
    finally:
        D.STATE.current_core = prev
