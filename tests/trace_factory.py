"""Small synthetic traces for analysis tests: host ops, ProfilerSteps, launches and the device
work they launch, in a few lines each (times in µs)."""

from __future__ import annotations

from typing import Any

from neuron_profiler.analysis import Options, analyze
from neuron_profiler.trace import EventKind, TraceBuilder
from neuron_profiler.trace import vocabulary as V

US = 1000
HOST_PID, HOST_TID = 100, 100


class Build:
    """A few lines per trace: host ops, ProfilerSteps, launches and the kernels they launch."""

    def __init__(self) -> None:
        self.b = TraceBuilder("synthetic")
        self.corr = 0

    def step(self, n: int, start_us: int, end_us: int) -> Build:
        self.b.add(
            name=f"ProfilerStep#{n}",
            ts_ns=start_us * US,
            dur_ns=(end_us - start_us) * US,
            kind=EventKind.USER_ANNOTATION,
            cat="user_annotation",
            pid=HOST_PID,
            tid=HOST_TID,
        )
        return self

    def host(
        self,
        name: str,
        start_us: int,
        end_us: int,
        kind: EventKind = EventKind.CPU_OP,
        cat: str = "cpu_op",
        args: dict[str, Any] | None = None,
        tid: int = HOST_TID,
    ) -> Build:
        self.b.add(
            name=name,
            ts_ns=start_us * US,
            dur_ns=(end_us - start_us) * US,
            kind=kind,
            cat=cat,
            pid=HOST_PID,
            tid=tid,
            args=args,
        )
        return self

    def kernel(
        self,
        start_us: int,
        end_us: int,
        *,
        device: int = 0,
        launch_us: int | None = None,
        kind: EventKind = EventKind.KERNEL,
        name: str = "TensorE: mm",
        stream: int = 1,
        args: dict[str, Any] | None = None,
        tid: int = HOST_TID,
    ) -> Build:
        """A work item on ``device``; ``launch_us``: its launch call (on thread ``tid``), none
        when None."""
        self.corr += 1
        args = {
            V.ARG_DEVICE: device,
            V.ARG_STREAM: stream,
            V.ARG_CORRELATION: self.corr,
            **(args or {}),
        }
        if launch_us is not None:
            self.b.add(
                name="nrt launch: mm",
                ts_ns=launch_us * US,
                dur_ns=2 * US,
                kind=EventKind.RUNTIME,
                cat=V.CAT_RUNTIME,
                pid=HOST_PID,
                tid=tid,
                args={V.ARG_CORRELATION: self.corr},
            )
        self.b.add(
            name=name,
            ts_ns=start_us * US,
            dur_ns=(end_us - start_us) * US,
            kind=kind,
            cat="kernel" if kind == EventKind.KERNEL else "gpu_memcpy",
            pid=device,
            tid=stream,
            args=args,
        )
        return self

    def report(self, min_gap_us: int = 50):
        return analyze(self.b.build(), Options(min_gap_ns=min_gap_us * US, top=50))


MM_ARGS = {"Input Dims": [[1024, 1024], [1024, 1024]], "Input type": ["float", "float"]}


def mm_then_sync() -> Build:
    """One step of a CUDA-like trace (µs): aten::mm (0-100, 1024^3 fp32) launches at 10 a
    500 µs kernel that starts at 20; the host waits in cudaDeviceSynchronize from 200 until 5 µs
    after the kernel's end (525), then works until the step ends at 1000 (the projection tests'
    hand-worked step)."""
    b = Build().step(1, 0, 1000)
    b.host("aten::mm", 0, 100, args=MM_ARGS)
    b.kernel(20, 520, launch_us=10, name="volta_sgemm_128x64_nn")
    b.host("cudaDeviceSynchronize", 200, 525, kind=EventKind.RUNTIME, cat="cuda_runtime")
    b.host("aten::sum", 525, 1000)
    return b
