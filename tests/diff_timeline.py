"""Synthetic pairs for the diff's tests: a plain timeline (host ops one after another, each
launching its kernel onto one in-order device queue) built into a trace, and the expected rows
from a microsecond-by-microsecond walk of that timeline (independent of the library's interval
code): a busy µs belongs to the op whose kernel runs, an idle µs to the op the host is running
(the device waits for it) unless its gap is a data-loading gap (the DataLoader covers at least
half of it, docs/analysis.md), and otherwise to the idle rows."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np
from trace_factory import Build

from neuron_profiler.trace import EventKind
from neuron_profiler.trace import vocabulary as V

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


@dataclass(frozen=True)
class Op:
    """A host op of ``host_us``, launching a kernel of ``kernel_us`` (0: none); ``fallback_us``:
    a CPU-fallback row inside it; ``loader``: a DataLoader ``__next__`` around it; ``module``:
    the path of the ``nn.Module`` frames around it (``Net_0.Block_0.Linear_0``), "" for none."""

    name: str
    host_us: int
    kernel_us: int = 0
    fallback_us: int = 0
    loader: bool = False
    module: str = ""


@dataclass
class Timeline:
    """What was built: per step its span; per op its key, host span and kernel span (µs)."""

    steps: list[tuple[int, int]]
    ops: list[tuple[str, tuple[int, int], tuple[int, int] | None]]
    loaders: list[tuple[int, int]]


def build(  # noqa: ANN201
    ops: list[Op],
    keys: dict[str, str] | None = None,
    steps: int = 3,
    by_module: bool = False,
    frame: tuple[EventKind, str] = (EventKind.PYTHON, "python_function"),
):
    """The trace of ``steps`` steps running ``ops``, and its timeline. ``keys``: an op name's
    expected row key (default ``forward › <name>``; with ``by_module`` an op in a module: its
    module path). ``frame``: the module frames' kind and category (torch 2.13's by default;
    2021 Kineto's ``cpu_op``, a ``record_function``'s ``user_annotation``)."""
    keys = keys or {}
    b = Build()
    t, timeline = 1000, Timeline([], [], [])
    for n in range(steps):
        start, free = t, t
        spans = []
        for op in ops:
            host = (t, t + op.host_us)
            name = "aten::stack" if op.loader else op.name
            if op.loader:
                b.host(
                    LOADER, t, t + op.host_us, kind=EventKind.USER_ANNOTATION, cat="user_annotation"
                )
                timeline.loaders.append(host)
                host = (t + 1, t + op.host_us - 1)
            b.host(name, *host)
            kernel = None
            if op.kernel_us:
                begin = max(t + 3, free)
                kernel = (begin, begin + op.kernel_us)
                b.kernel(*kernel, launch_us=t + 1, name=f"k_{op.name}")
                free = kernel[1]
            if op.fallback_us:
                b.host(
                    f"{V.FALLBACK_PREFIX}{op.name}",
                    t + 1,
                    t + 1 + op.fallback_us,
                    kind=EventKind.FALLBACK,
                    cat="cpu_fallback",
                )
            key = keys.get(op.name, f"{'DataLoader' if op.loader else 'forward'} › {name}")
            key = op.module if by_module and op.module else key
            spans.append((op.module, host))
            timeline.ops.append((key, host, kernel))
            t += op.host_us
        _module_frames(b, spans, frame)
        sync_end = max(t, free) + 1
        b.host("cudaDeviceSynchronize", t, sync_end, kind=EventKind.RUNTIME, cat="cuda_runtime")
        t = sync_end + 5
        b.step(n + 1, start, t)
        timeline.steps.append((start, t))
    return b.b.build(), timeline


def _module_frames(
    b: Build, spans: list[tuple[str, tuple[int, int]]], frame: tuple[EventKind, str]
) -> None:
    """One ``nn.Module`` python_function frame per level of the ops' module paths, around each
    run of consecutive ops under that level's prefix (outer frames first, as torch writes
    them; a frame starts with its first op and ends with its last, the tie the diff must
    resolve)."""
    paths = [m.split(".") if m else [] for m, _ in spans]
    for level in range(max(map(len, paths), default=0)):
        run: tuple[str, int, int] | None = None
        for path, (_, (s, e)) in zip([*paths, []], [*spans, ("", (0, 0))], strict=True):
            prefix = ".".join(path[: level + 1]) if len(path) > level else ""
            if run and prefix != run[0]:
                name = f"nn.Module: {run[0].rsplit('.', 1)[-1]}"
                b.host(name, run[1], run[2], kind=frame[0], cat=frame[1])
                run = None
            if prefix:
                run = (prefix, run[1] if run else s, e)


def expected(tl: Timeline) -> dict[str, float]:
    """ms per step by row key (all idle rows as one "idle" key), from a walk of every µs."""
    lo, hi = tl.steps[0][0], tl.steps[-1][1]
    busy_by = np.full(hi - lo, -1)
    host_by = np.full(hi - lo, -1)
    loader = np.zeros(hi - lo, bool)
    for i, (_, host, kernel) in enumerate(tl.ops):
        host_by[host[0] - lo : host[1] - lo] = i
        if kernel:
            busy_by[kernel[0] - lo : kernel[1] - lo] = i
    for s, e in tl.loaders:
        loader[s - lo : e - lo] = True
    first_kernel = min(k[0] for _, _, k in tl.ops if k)
    last_kernel = max(k[1] for _, _, k in tl.ops if k)
    idle = busy_by < 0
    idle[: first_kernel - lo] = idle[last_kernel - lo :] = True
    out: dict[str, float] = defaultdict(float)
    u = 0
    while u < hi - lo:  # one gap (a run of idle µs) at a time
        if not idle[u]:
            out[tl.ops[busy_by[u]][0]] += 1
            u += 1
            continue
        v = u
        while v < hi - lo and idle[v]:
            v += 1
        data = 2 * loader[u:v].sum() >= v - u
        for w in range(u, v):
            owner = host_by[w]
            out["idle" if data or owner < 0 else tl.ops[owner][0]] += 1
        u = v
    steps = len(tl.steps)
    return {k: v / steps / 1e3 for k, v in out.items()}


BASE = [
    Op("aten::linear", 10, 100),
    Op("aten::relu", 10, 20),
    Op("aten::linear", 10, 100),
    Op("aten::bincount", 10, 20),
    Op("aten::sum", 10, 30),
]  # the host runs ahead of the device: every kernel waits for the one before

LINEAR, RELU, HEAD, NET = (
    "Net_0.Block_0.Linear_0",
    "Net_0.Block_0.ReLU_0",
    "Net_0.Head_0",
    "Net_0",
)
MODEL = [
    Op("aten::linear", 10, 100, module=LINEAR),
    Op("aten::relu", 10, 20, module=RELU),
    Op("aten::linear", 10, 100, module=HEAD),
    Op("aten::bincount", 10, 20),  # outside any module: keeps its op row
    Op("aten::sum", 10, 30, module=NET),  # in Net_0 itself, a second call of it
]  # BASE in nn.Module frames (build(..., by_module=True) keys the ops by module)


def slower(ops: list[Op], extra_us: dict[str, int]) -> list[Op]:
    """``ops`` with the kernels of the ops of each module in ``extra_us`` that much longer."""
    return [replace(op, kernel_us=op.kernel_us + extra_us.get(op.module, 0)) for op in ops]
