"""``torch.neuron.Event`` / ``Stream``: what GPU-style code uses to time and order device work.

    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record(); model(x); end.record(); end.synchronize()
    start.elapsed_time(end)          # ms of *modelled* device time between the two points

Each core executes in order (one compute queue, one DMA queue, one collective queue); streams are
orderings on top of them, as CUDA streams share one GPU. Each stream has a clock
(``CoreQueues.order_ns``): when the work launched on it, and the waits it was given, are done.

- Work launched on a stream starts after that stream's clock (and its engine's queue), not after
  the other streams' work: the **default stream** of a core (id 0) and each **side stream**
  (``torch.neuron.Stream()``; FSDP's copy-in, all-gather and reduce-scatter streams) order their
  own work. Side-stream kernels still share the one compute queue, in launch order; copies
  between device buffers go to the DMA queue (dispatch.DEVICE_COPIES), so a side stream's
  copies run beside the default stream's compute.
- ``wait_event`` / ``wait_stream`` raise a stream's clock. ``Work.wait()`` raises the *current*
  stream's clock to the collective's end, as NCCL does; the host blocks only while a rank of the
  group has not arrived (the emulator needs the end: collectives.py). FSDP waits for
  its all-gathers on its all-gather stream, so the default stream keeps computing while they
  run, until it waits for the all-gather's event in the copy-out.
- A collective waits for the clock of the stream it is launched on (its inputs); it runs on
  the collective queue and moves no stream's clock until waited for.
- An event records its stream's clock at the time of recording.
"""

from __future__ import annotations

import contextlib
import itertools
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
    """A stream of a core: ``stream_id`` 0 is the default stream, others are side streams."""

    def __init__(
        self, device: Any = None, priority: int = 0, *, stream_id: int | None = None, **_: Any
    ) -> None:
        self.core = _core(device)
        self.priority = priority
        self.stream_id = next(_stream_ids) if stream_id is None else stream_id

    @property
    def key(self) -> tuple[int, int]:
        return (self.core, self.stream_id)

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
        return tl is None or tl.done_by(self.core, time.time_ns())

    def wait_stream(self, stream: Stream) -> None:
        """Later work on this stream starts after the work launched on ``stream`` so far."""
        self.wait_event(stream.record_event())

    def wait_event(self, event: Event) -> None:
        """Later work on this stream starts after ``event`` (on the device; the host goes on)."""
        if event.device_ns is not None:
            wait_on_device(self, event.device_ns)

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.key == self.key

    def __hash__(self) -> int:
        return hash(("neuron-stream", self.key))


_stream_ids = itertools.count(1)
_current: dict[int, Stream] = {}  # core -> its current stream, when not the default one


def wait_on_device(stream: Stream, until_ns: int) -> None:
    """Later work on ``stream`` starts no earlier than ``until_ns`` (the host goes on)."""
    tl = D.STATE.timeline
    if tl is not None:
        tl.stream_wait(stream.core, until_ns, stream.stream_id)


def done_ns(stream: Stream) -> int:
    """Device time at which the work launched on ``stream`` so far, and the waits it was
    given, are done."""
    tl = D.STATE.timeline
    return tl.cores[stream.core].order_ns(stream.stream_id) if tl is not None else 0


class Event:
    """A point on a core's device timeline (host-clock ns), as ``torch.cuda.Event``."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> None:
        self.enable_timing = enable_timing
        self.core: int | None = None
        self.device_ns: int | None = None

    def record(self, stream: Stream | None = None) -> None:
        stream = stream if stream is not None else current_stream()
        self.core = stream.core
        self.device_ns = max(done_ns(stream), time.time_ns())  # an idle core reaches it now

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
        (stream if stream is not None else current_stream()).wait_event(self)

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds of device time from this event to ``end_event``."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self.device_ns is None or end_event.device_ns is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event.device_ns - self.device_ns) / 1e6


def current_stream(device: Any = None) -> Stream:
    core = _core(device)
    current = _current.get(core)
    return current if current is not None else Stream(core, stream_id=0)


def default_stream(device: Any = None) -> Stream:
    return Stream(_core(device), stream_id=0)


@contextlib.contextmanager
def stream(s: Stream | None) -> Iterator[None]:
    """``with torch.neuron.stream(s):`` switches the current core and its current stream."""
    if s is None:
        yield
        return
    state = D.STATE
    prev_core, prev_stream, prev_side = state.current_core, _current.get(s.core), state.side_stream
    state.current_core = s.core
    _current[s.core] = s
    state.side_stream = s.key if s.stream_id != 0 else None
    try:
        yield
    finally:
        state.current_core = prev_core
        state.side_stream = prev_side
        if prev_stream is None:
            _current.pop(s.core, None)
        else:
            _current[s.core] = prev_stream
