"""The emulated device's allocator: per-core memory statistics, profiler reports and history.

Every device buffer a new output owns (``dispatch.new_device_tensor``) is registered here and
released when its host storage dies, i.e. when the last tensor holding it (the allocating
tensor, a view, an alias such as the ``grad.detach()`` AccumulateGrad stores as ``.grad``) dies,
as a real allocator frees a block when its storage dies (a weak reference to the storage
object, which torch keeps alive as long as the storage: PyObject preservation). While a profile
records memory a buffer is tracked by its allocating tensor instead, and its storage held, so
that its host memory is freed inside a quiet window (``Allocator.settle``). Three consumers:

- statistics, always on as in any device allocator: ``torch.neuron.memory_allocated`` and the rest
  of ``torch.accelerator.memory``'s functions (``stats``; there is no caching allocator, so
  reserved memory equals allocated memory);
- torch.profiler: with ``profile_memory=True`` each allocation and free goes to
  ``c10::reportMemoryUsageToProfiler`` with a PrivateUse1 device, as a C++ backend's allocator
  reports it (through the memory extension, native.py). Outside a profile the cost is
  one test of ``torch.autograd.profiler._is_profiler_enabled``, a Python flag torch sets while a
  profiler runs;
- snapshots (``torch.neuron.memory._record_memory_history`` / ``_dump_snapshot``): the CUDA
  caching allocator's pickle schema (snapshot.py);
- the collector's device memory counters: while a session runs (``start_samples`` /
  ``stop_samples``, from collectors.sources.EmulatorSource), every change of a core's allocated
  bytes is one (time, core, bytes) sample, up to a cap, past which samples are counted, not kept.
"""

from __future__ import annotations

import sys
import time
import weakref
from collections import deque
from typing import Any

import torch
from torch.autograd import profiler as _autograd_profiler

# Python frames of the emulator's own allocator path are left out of allocation stacks: a stack
# ends in the program's line, as a CUDA snapshot's Python frames do.
_OWN_PREFIX = __file__.rsplit("/", 1)[0] + "/"
# CUDA's caching allocator splits its pools at 1 MiB (torch.cuda.memory_stats' docstring, "large
# pool ... >= 1MB"); snapshot segments carry the same label.
LARGE_SEGMENT_BYTES = 1 << 20
_now_ns = time.time_ns  # the clock torch.profiler stamps ops with (the Kineto bridge's now_ns)


class Buffer(weakref.ref):
    """One live device buffer: a weak reference to its host storage object (``_released`` when
    the storage dies) or, allocated while a profile records memory, to the tensor that
    allocated it (``_tensor_died``), with the host tensor in ``held``."""

    __slots__ = ("core", "nbytes", "addr", "tensor_id", "frames", "held")

    core: int
    nbytes: int
    addr: int
    tensor_id: int  # the runtime's allocate instant (0: not captured)
    frames: list[dict[str, Any]] | None
    held: Any  # the host tensor, kept from a memory profile on (``Allocator.settle``)


class CoreStats:
    """One core's allocation counters (bytes and counts; current, peak, cumulative)."""

    __slots__ = ("allocated", "peak", "count", "peak_count", "allocs", "frees", "bytes_in")
    __slots__ += ("bytes_out",)

    def __init__(self) -> None:
        self.allocated = self.peak = self.count = self.peak_count = 0
        self.allocs = self.frees = self.bytes_in = self.bytes_out = 0


class Samples:
    """A collector session's allocator samples: time ns, core, bytes allocated per change, flat
    (three ints a sample: no tuple per sample for the garbage collector to track)."""

    __slots__ = ("rows", "cap", "dropped")

    def __init__(self, cap: int) -> None:
        self.rows: list[int] = []
        self.cap = 3 * cap  # in ints
        self.dropped = 0

    def add(self, core: int, allocated: int) -> None:
        if len(self.rows) < self.cap:
            self.rows += (_now_ns(), core, allocated)
        else:
            self.dropped += 1


class History:
    """What ``_record_memory_history`` asked for: per-core trace entries, stacks or not."""

    def __init__(self, max_entries: int, stacks: bool, trace: bool) -> None:
        self.max_entries = max_entries
        self.stacks = stacks
        self.trace = trace
        self.entries: dict[int, deque[dict[str, Any]]] = {}
        self.annotations: list[dict[str, Any]] = []

    def add(self, core: int, action: str, buf: Buffer) -> None:
        q = self.entries.get(core)
        if q is None:
            q = self.entries[core] = deque(maxlen=self.max_entries)
        q.append(
            {
                "action": action,
                "addr": buf.addr,
                "size": buf.nbytes,
                "stream": 0,
                "time_us": time.time_ns() // 1000,
                "frames": buf.frames or [],
            }
        )


class Allocator:
    """The process-wide accounting (``ALLOCATOR``)."""

    def __init__(self) -> None:
        self.stats: list[CoreStats] = []
        self.live: dict[int, Buffer] = {}  # id(buffer) -> buffer
        self.history: History | None = None
        self.samples: Samples | None = None  # a collector session's counter samples
        self.timeline: Any = None  # the DeviceTimeline recording runtime tensor events
        # the memory extension (native.py), loaded at the first profiled allocation
        self.native: Any = None
        self.native_error: str | None = None
        # buffers whose host tensor is held (``settle``): freed ones, waiting for a quiet window
        # to drop it, and pending ones, whose allocating tensor died while an alias holds it
        self.kept: list[Buffer] = []

    def configure(self, cores: int, timeline: Any) -> None:
        """``enable``: one stats record per core (kept for cores that stay)."""
        self.stats = self.stats[:cores] + [CoreStats() for _ in range(cores - len(self.stats))]
        self.timeline = timeline

    # -- the hot path ---------------------------------------------------------------------
    def allocate(self, tensor: Any, core: int, nbytes: int, addr: int) -> None:
        """``tensor`` now owns ``nbytes`` of fresh device memory at ``addr`` on ``core``."""
        recording = _autograd_profiler._is_profiler_enabled and self._records_memory()
        if recording:  # its storage is held: the tensor's death is the signal (settle)
            buf = Buffer(tensor, _tensor_died)
            buf.held = tensor._elem
        else:
            buf = Buffer(tensor._elem.untyped_storage(), _released)
            buf.held = None
        buf.core, buf.nbytes, buf.addr, buf.frames = core, nbytes, addr, None
        self.live[id(buf)] = buf
        s = self.stats[core]
        s.allocated += nbytes
        s.count += 1
        s.allocs += 1
        s.bytes_in += nbytes
        if s.allocated > s.peak:
            s.peak = s.allocated
        if s.count > s.peak_count:
            s.peak_count = s.count
        samples = self.samples
        if samples is not None:  # Samples.add, inlined: it runs on every allocation and free
            if len(samples.rows) < samples.cap:
                samples.rows += (_now_ns(), core, s.allocated)
            else:
                samples.dropped += 1
        tl = self.timeline
        buf.tensor_id = (
            tl.allocate(core, nbytes) if tl is not None and tl.rt.tracking_tensors else 0
        )
        if recording:
            self._report(buf, nbytes)
        history = self.history
        if history is not None:
            if history.stacks:
                buf.frames = python_frames()
            if history.trace:
                history.add(core, "alloc", buf)

    def release(self, buf: Buffer) -> None:
        """``buf``'s memory is free: its storage died, or it is released by ``settle``."""
        if self.live.pop(id(buf), None) is None:
            return
        core = buf.core
        if core >= len(self.stats):  # enable() dropped this core since
            return
        s = self.stats[core]
        s.allocated -= buf.nbytes
        s.count -= 1
        s.frees += 1
        s.bytes_out += buf.nbytes
        samples = self.samples
        if samples is not None:  # Samples.add, inlined: it runs on every allocation and free
            if len(samples.rows) < samples.cap:
                samples.rows += (_now_ns(), core, s.allocated)
            else:
                samples.dropped += 1
        tl = self.timeline
        if buf.tensor_id and tl is not None:
            tl.free(core, buf.tensor_id, buf.nbytes)
        if _autograd_profiler._is_profiler_enabled:
            self._report(buf, -buf.nbytes)
        elif self.kept:  # the profile ended: nothing reports, keep only what is aliased
            self.settle()
        history = self.history
        if history is not None and history.trace:
            history.add(core, "free_requested", buf)
            history.add(core, "free_completed", buf)

    def tensor_died(self, buf: Buffer) -> None:
        """The tensor that allocated ``buf`` in a memory profile died. Its storage can outlive
        it through an alias: AccumulateGrad steals a gradient as ``grad.detach()`` (a new
        tensor on the same storage) and ``.grad`` holds it after the gradient's own tensor
        died. Then the buffer stays allocated, pending (``settle``); else it is freed now, and
        its host tensor waits for a quiet window."""
        if _storage_refs(buf.held) > _OWN_STORAGE_REFS:
            self.kept.append(buf)
            return
        self.release(buf)
        if _autograd_profiler._is_profiler_enabled and self._records_memory():
            self.kept.append(buf)
            self.settle()  # a pending buffer whose last alias died since is freed too
        else:
            buf.held = None

    def settle(self, quiet: bool = False) -> None:
        """Go through the buffers whose host tensor is held (``kept``): a pending one no alias
        holds any longer is freed; a held host tensor no alias holds is dropped when no profile
        records memory or inside a quiet window (``quiet``). Called in every quiet window, at
        the frees while a profile records memory, at every free after it while any are kept,
        and before the statistics are read, so that a pending buffer is freed at the first of
        these after its last alias died. Why hold the host tensor: its host allocation was
        made in a quiet window, so c10's CPU allocator does not know its size; freed while it
        reports (its last alias let go of between ops), it would log "Memory block of unknown
        size was allocated before the profiling started", or, where the CPU allocator still
        keeps the size of an earlier host block at that address (allocated while reporting,
        freed while not), read as a host free of that size."""
        kept, self.kept = self.kept, []  # a free inside (the garbage collector) sees a fresh list
        recording = _autograd_profiler._is_profiler_enabled and self._records_memory()
        for buf in kept:
            if _storage_refs(buf.held) > _OWN_STORAGE_REFS:
                self.kept.append(buf)  # an alias still holds the storage
                continue
            if id(buf) in self.live:
                self.release(buf)  # pending: its last alias died
            if recording and not quiet:
                self.kept.append(buf)
            else:
                buf.held = None

    def host_reports_off(self) -> bool:
        """While a profile records memory: stop the CPU allocator's reports on this thread for
        an op whose outputs are device buffers (they are reported here, as device memory);
        True: call ``host_reports_on`` after it."""
        native = self.native or self._load_native()
        return native is not None and native.host_reports_off()

    def host_reports_on(self) -> None:
        """End the quiet window, first settling the kept buffers (``settle``): host tensors
        dropped here are freed while the CPU allocator does not report."""
        if self.kept:
            self.settle(quiet=True)
        self.native.host_reports_on()

    def _records_memory(self) -> bool:
        """A profiler with ``profile_memory=True`` records this thread, outside a quiet window
        (only then does c10's CPU allocator report host frees: a host tensor need not be
        held in a profile that does not record memory, nor inside a quiet window)."""
        native = self.native or self._load_native()
        return native is not None and native.memory_profiling_enabled()

    def _report(self, buf: Buffer, delta: int) -> None:
        native = self.native or self._load_native()
        if native is not None:
            total = self.stats[buf.core].allocated
            native.report_memory_usage(buf.addr, delta, total, total, buf.core)

    def _load_native(self) -> Any:
        if self.native_error is not None:
            return None
        from neuron_profiler.emulator.native import load_native
        from neuron_profiler.errors import CollectorUnavailableError

        try:
            self.native = load_native()
        except CollectorUnavailableError as err:  # stats still work; profiles lack [memory]
            self.native_error = str(err)
            print(
                f"neuron-profiler: device memory not reported to torch.profiler: {err}",
                file=sys.stderr,
            )
        return self.native

    # -- collector samples -------------------------------------------------------------------
    def start_samples(self, cap: int) -> None:
        """Sample every change from now on (at most ``cap``), starting with each core's state."""
        self.samples = Samples(cap)
        for core, s in enumerate(self.stats):
            self.samples.add(core, s.allocated)

    def stop_samples(self) -> Samples | None:
        """End sampling: the samples, each core's state at the end kept past the cap."""
        if self.kept:
            self.settle()  # pending buffers whose last alias died are freed, and sampled
        samples, self.samples = self.samples, None
        if samples is not None:
            now = time.time_ns()
            for core, s in enumerate(self.stats):
                samples.rows += (now, core, s.allocated)
        return samples

    # -- statistics -------------------------------------------------------------------------
    def reset_peak(self, core: int) -> None:
        s = self.stats[core]
        s.peak, s.peak_count = s.allocated, s.count

    def reset_accumulated(self, core: int) -> None:
        s = self.stats[core]
        s.allocs = s.frees = s.bytes_in = s.bytes_out = 0

    def live_buffers(self) -> list[Buffer]:
        """Buffers whose storage is alive, oldest address first per core."""
        if self.kept:
            self.settle()
        return sorted(self.live.values(), key=lambda b: (b.core, b.addr))


# References to a kept host tensor's storage when nothing else holds it: the tensor's own and
# the storage object ``untyped_storage()`` returns (torch keeps one per storage; counting adds it).
_OWN_STORAGE_REFS = 2
_use_count = torch._C._storage_Use_Count  # c10 StorageImpl's strong reference count


def _storage_refs(t: Any) -> int:
    try:
        return _use_count(t.untyped_storage()._cdata)
    except (RuntimeError, NotImplementedError):  # no storage (sparse, nested): nothing aliases
        return 0


def _released(buf: Buffer) -> None:
    ALLOCATOR.release(buf)


def _tensor_died(buf: Buffer) -> None:
    ALLOCATOR.tensor_died(buf)


def python_frames() -> list[dict[str, Any]]:
    """The Python stack of the allocating program, innermost first (CUDA's frame order),
    without the emulator's own frames."""
    frames = []
    f = sys._getframe(1)
    while f is not None:
        filename = f.f_code.co_filename
        if not filename.startswith(_OWN_PREFIX):
            frames.append({"filename": filename, "line": f.f_lineno, "name": f.f_code.co_name})
        f = f.f_back
    return frames


ALLOCATOR = Allocator()
