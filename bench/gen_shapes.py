"""Generate the real trace shapes the analysis bench had missed, as Kineto Chrome-trace JSON.

    python bench/gen_shapes.py meta -o runs/bench/traces/shapes/x [--size 60000] [--seed 0]

Shapes (deterministic for a given shape, size and seed; every one loads in ``neuron-prof`` and
in HTA 0.5.0; sizes: ``SHAPES[name].large`` / ``.small``, overridden by ``--size``):

- ``meta``: metadata-heavy. One device process per device queue (size = processes), each with
  ``process_name`` / ``process_labels`` / ``process_sort_index`` / ``thread_name`` /
  ``thread_sort_index`` M events and a couple of kernels, every kernel launched from the host by
  a ``cudaLaunchKernel`` with its correlation id and an ``ac2g`` flow pair, under ``cpu_op`` s
  and ``ProfilerStep#N`` annotations (the shape of a 62,000-queue capture). 15 events per
  queue with every kernel linked as Kineto links it: 60,000 queues are 900k events (the capture
  without host links was 465k). One step per kernel round by default; ``--opt step_ops=450``
  starts a step every 450 launches instead (many steps, each touching few queues).
- ``deep``: ``with_stack=True`` captures: ``python_function`` rows nested 20-40 deep with
  ``Python id`` / ``Python parent id``, the ``cpu_op`` s, launches and kernels under them.
- ``flows``: every op linked: each launch by an ``ac2g`` pair, each forward op to its backward
  op by a ``fwdbwd`` pair, lone ``ac2g`` ``f`` s on runtime calls without device work (as
  Kineto writes them); flow ids of both categories overlap, as sequence numbers and
  correlation ids do in long captures.
- ``old``: the 2021 format (kineto tb_plugin samples): categories ``Operator`` / ``Runtime`` /
  ``Kernel`` / ``Memcpy`` / ``Memset``, flows ``async`` named ``launch``, absolute integer µs
  timestamps and no ``baseTimeNanoseconds``, string tids, ``[memory]`` instants, a ``Trace``
  span, lower-case ``external id`` on device work; one multi-line event per object.
- ``ranks``: a folder of rank files (size = events per rank, ``ranks`` files) with
  ``distributedInfo`` rank / world_size, DDP-like steps ending in NCCL ``allreduce`` buckets
  (``record_param_comms`` with Kineto's collective args, ``nccl:all_reduce``, an
  ``ncclKernel_AllReduce`` kernel on its own stream carrying the collective args): the
  collective ends on every rank together, after the slowest rank's compute.

Each shape is written into its own folder (only the trace files: HTA reads a folder as ranks)
with a manifest next to it (``<folder>.manifest``: parameters, file names, event counts by kind
and each shape's structure), which the bench reads the event count from and the tests read the
expected structure from. The layout follows gen_trace.py (its ops, kernels and header).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_trace import KERNELS, OPS, _header, _Writer  # noqa: E402

VERSION = 2  # bump when a generator changes: cached traces under another version are remade
HOST_PID, MAIN_TID, BWD_TID, STREAM, NCCL_STREAM = 2910249, 2910249, 2919752, 7, 40
START_NS = 4_458_676_388_068_751  # gen_trace.START_US in ns: relative to BASE_TIME_NS below
BASE_TIME_NS = 1711964646000000000
FORWARD_OPS = tuple(op for op in OPS if not op[0].startswith("autograd"))
COMPUTE_KERNELS = tuple(k for k in KERNELS if not k.startswith("nccl"))  # collectives: ranks
LAUNCH_LATENCY_NS = 4_000  # a launch reaches the device 4 µs later at the earliest
STEP_OPS = (300, 600)  # op groups per ProfilerStep (gen_trace.generate's range)
OLD_START_US = 1623142623460016  # the 2021 sample's first timestamp (absolute µs)
OLD_PID, OLD_DEVICES = 25738, 4
DEVICE_SORT_BASE = 16777216  # Kineto's process_sort_index of device 0 (0x1000000)
_ENCODE = msgspec.json.Encoder().encode


def _j(value: Any) -> str:
    return _ENCODE(value).decode()


def _us(ns: int) -> str:
    """Kineto's µs with the ns fraction, exact (no float rounding)."""
    return f"{ns // 1000}.{ns % 1000:03d}"


class Emitter:
    """One trace file's events in Kineto's multi-line layout, counted by what they are (the
    manifest's truth: the tests compare the loader's view with these counts)."""

    def __init__(self, out: IO[str]) -> None:
        self.w, self.counts = _Writer(out, sys.maxsize), Counter()

    def __len__(self) -> int:
        return self.w.count

    def add(self, what: str, text: str) -> None:
        self.w.add(text)
        self.counts[what] += 1

    def meta(self, name: str, pid: int, tid: int, key: str, value: Any) -> None:
        self.add(
            "M",
            f'  {{\n    "name": "{name}", "ph": "M", "ts": {_us(START_NS)}, "pid": {pid}, '
            f'"tid": {tid},\n    "args": {{"{key}": {_j(value)}}}\n  }}',
        )

    def x(self, cat: str, name: str, pid: int, tid: int, ts: int, dur: int, args: dict) -> None:
        self.add(
            cat,
            f'  {{\n    "ph": "X", "cat": "{cat}", "name": {_j(name)}, "pid": {pid}, '
            f'"tid": {tid},\n    "ts": {_us(ts)}, "dur": {_us(dur)},\n    "args": {_j(args)}\n  }}',
        )

    def flow(self, ph: str, cat: str, flow_id: int, pid: int, tid: int, ts: int) -> None:
        end = ', "bp": "e"' if ph == "f" else ""
        self.add(
            f"{cat} {ph}",
            f'  {{\n    "ph": "{ph}", "id": {flow_id}, "pid": {pid}, "tid": {tid}, '
            f'"ts": {_us(ts)},\n    "cat": "{cat}", "name": "{cat}"{end}\n  }}',
        )


@dataclass
class Host:
    """The host side of a modern capture: id counters and the launch rule every shape uses."""

    em: Emitter
    rng: random.Random
    ext: int = 1000
    corr: int = 19832  # the A100 trace's first correlation id
    ev_idx: int = 0

    def next_ext(self) -> int:
        self.ext += 1
        return self.ext

    def op(self, name: str, tid: int, ts: int, dur: int, ext: int, **extra: Any) -> None:
        self.ev_idx += 1
        args = {"External id": ext, "Record function id": ext - 140, **extra}
        self.em.x("cpu_op", name, HOST_PID, tid, ts, dur, {**args, "Ev Idx": self.ev_idx})

    def runtime_only(self, tid: int, ts: int, ext: int) -> None:
        """A runtime call with no device work: Kineto writes a lone ``f`` for it."""
        self.corr += 1
        args = {"External id": ext, "cbid": 203, "correlation": self.corr}
        self.em.x("cuda_runtime", "cudaStreamGetPriority", HOST_PID, tid, ts, 1_284, args)
        self.em.flow("f", "ac2g", self.corr, HOST_PID, tid, ts)

    def launch(
        self,
        tid: int,
        ts: int,
        ext: int,
        device: int,
        stream: int,
        ready: int,
        kernel: tuple[str, int, dict] | None = None,
    ) -> int:
        """``cudaLaunchKernel`` at ``ts`` (+ ``ac2g`` s), its kernel on ``device`` / ``stream``
        when the queue is free (+ ``ac2g`` f); returns the kernel's end. ``kernel``: (name,
        duration ns, extra args), else one of gen_trace's compute kernels for 1.5-90 µs."""
        self.corr += 1
        corr, rng = self.corr, self.rng
        rdur = rng.randrange(3_000, 12_000)
        self.em.x(
            "cuda_runtime",
            "cudaLaunchKernel",
            HOST_PID,
            tid,
            ts,
            rdur,
            {"External id": ext, "cbid": 211, "correlation": corr},
        )
        self.em.flow("s", "ac2g", corr, HOST_PID, tid, ts)
        name, kdur, extra = kernel or (
            COMPUTE_KERNELS[rng.randrange(len(COMPUTE_KERNELS))],
            rng.randrange(1_500, 90_000),
            {},
        )
        start = max(ready, ts + LAUNCH_LATENCY_NS)
        grid = rng.choice((80, 512, 1024, 2048))
        args = {
            "External id": ext,
            "queued": 0,
            "device": device,
            "context": 1,
            "stream": stream,
            "correlation": corr,
            "registers per thread": rng.choice((32, 40, 64, 128)),
            "shared memory": rng.choice((0, 400, 16384)),
            "blocks per SM": round(grid / 108, 6),
            "warps per SM": round(grid * 8 / 108, 6),
            "grid": [grid, 1, 1],
            "block": [256, 1, 1],
            "est. achieved occupancy %": rng.randrange(20, 100),
            **extra,
        }
        self.em.x("kernel", name, device, stream, start, kdur, args)
        self.em.flow("f", "ac2g", corr, device, stream, start)
        return start + kdur

    def step(self, n: int, ts: int, end: int, device: int | None = None, dev: tuple = ()) -> None:
        """``ProfilerStep#n`` on the host (and on ``device`` over ``dev`` = (start, end))."""
        ext = self.next_ext()
        args = {"External id": ext, "Record function id": 0, "Ev Idx": 0}
        self.em.x("user_annotation", f"ProfilerStep#{n}", HOST_PID, MAIN_TID, ts, end - ts, args)
        if device is not None:
            self.em.x(
                "gpu_user_annotation",
                f"ProfilerStep#{n}",
                device,
                STREAM,
                dev[0],
                dev[1] - dev[0],
                {"External id": ext},
            )


def _host_meta(em: Emitter, threads: tuple[int, ...] = (MAIN_TID, BWD_TID)) -> None:
    em.meta("process_name", HOST_PID, 0, "name", "python3.10")
    em.meta("process_labels", HOST_PID, 0, "labels", "CPU")
    em.meta("process_sort_index", HOST_PID, 0, "sort_index", HOST_PID)
    for tid in threads:
        role = "pt_main_thread" if tid == MAIN_TID else "pt_autograd_0"
        em.meta("thread_name", HOST_PID, tid, "name", f"thread {tid} ({role})")
        em.meta("thread_sort_index", HOST_PID, tid, "sort_index", tid)


def _device_meta(em: Emitter, pid: int, streams: tuple[int, ...] = (STREAM,)) -> None:
    em.meta("process_name", pid, 0, "name", "python3.10")
    em.meta("process_labels", pid, 0, "labels", f"GPU {pid}")
    em.meta("process_sort_index", pid, 0, "sort_index", DEVICE_SORT_BASE + pid)
    for s in streams:
        em.meta("thread_name", pid, s, "name", f"stream {s} ")
        em.meta("thread_sort_index", pid, s, "sort_index", s)


def _modern(path: Path, body: Callable[[Emitter], None], rank: int = 0, world: int = 1) -> Emitter:
    """Write one modern (2024 Kineto) trace: header, ``body``'s events, trailing keys."""
    header = _header()
    info = header["distributedInfo"]
    ranks = list(range(world))
    info.update(rank=rank, world_size=world)
    info["pg_config"][0].update(pg_size=world, ranks=ranks)
    tmp = path.with_name(path.name + ".part")
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(tmp, "wt", **({"compresslevel": 6} if path.name.endswith(".gz") else {})) as out:
        out.write(json.dumps(header, indent=2)[:-2] + ',\n  "traceEvents": [\n')
        em = Emitter(out)
        body(em)
        em.w.flush()
        out.write(
            f'\n  ],\n  "traceName": "/tmp/{path.stem}.json",\n  "displayTimeUnit": "ms",\n'
            f'  "baseTimeNanoseconds": {BASE_TIME_NS}\n}}\n'
        )
    tmp.replace(path)
    return em


# -- meta: one device process per queue ---------------------------------------------------------


def gen_meta(folder: Path, size: int, seed: int, kernels: int = 2, step_ops: int = 0) -> dict:
    """``size`` device processes with ``kernels`` kernels each: ``kernels`` rounds, each an op
    per queue in turn launching one kernel on it. A ``ProfilerStep#N`` every ``step_ops`` ops
    (0: one per round, every queue busy in every step, as a profile of ``kernels`` active
    steps records it)."""
    rng = random.Random(seed)
    per_step = step_ops or size
    ready = [START_NS] * size
    steps = 0

    def body(em: Emitter) -> None:
        nonlocal steps
        host = Host(em, rng)
        _host_meta(em, (MAIN_TID,))
        for p in range(size):
            _device_meta(em, p)
        t = step_start = START_NS
        for i in range(size * kernels):
            p, ext, dur = i % size, host.next_ext(), rng.randrange(20_000, 40_000)
            host.op(OPS[rng.randrange(len(OPS))][0], MAIN_TID, t, dur, ext)
            ready[p] = host.launch(MAIN_TID, t + 2_000, ext, p, STREAM, ready[p])
            t += dur + rng.randrange(1_000, 5_000)
            if (i + 1) % per_step == 0 or i + 1 == size * kernels:
                host.step(steps, step_start, t)
                steps, step_start = steps + 1, t + 1_000
                t = step_start + 1_000

    em = _modern(folder / "meta.pt.trace.json", body)
    return {
        "files": {"meta.pt.trace.json": dict(em.counts)},
        "device_processes": size,
        "kernels_per_process": kernels,
        "steps": steps,
    }


# -- deep: python_function stacks --------------------------------------------------------------

ROOT_FRAMES = (
    "train.py(212): <module>",
    "train.py(180): main",
    "train.py(131): train_epoch",
)
STEP_DEPTH = len(ROOT_FRAMES)  # ProfilerStep#N sits inside these; deeper frames stay in a step
FRAME_CYCLE = (
    "torch/nn/modules/module.py(1736): _wrapped_call_impl",
    "torch/nn/modules/module.py(1747): _call_impl",
    "nn.Module: {module}_{i}",
    "model.py({line}): forward",
)
MODULES = ("TransformerBlock", "Attention", "MLP", "Linear", "LayerNorm", "Dropout")
LEAVES = (
    "<built-in method linear of PyCapsule object at 0x7f3a5c1d2e30>",
    "torch/nn/functional.py(2900): layer_norm",
    "<built-in method softmax of Tensor object at 0x7f3a5c0b4d10>",
    "torch/nn/functional.py(1704): gelu",
)


@dataclass
class _Frame:
    pid: int  # its "Python id"
    ts: int
    name: str
    args: dict


class _Stack:
    """Open python frames of the main thread; a frame is written when it closes."""

    def __init__(self, em: Emitter, rng: random.Random) -> None:
        self.em, self.rng, self.frames, self.next_id = em, rng, [], 0
        self.max_depth, self.leaf_depths = 0, []

    def push(self, ts: int, leaf: bool = False) -> None:
        depth, rng = len(self.frames), self.rng
        if leaf:
            name = LEAVES[rng.randrange(len(LEAVES))]
        elif depth < STEP_DEPTH:
            name = ROOT_FRAMES[depth]
        else:
            name = FRAME_CYCLE[(depth - STEP_DEPTH) % len(FRAME_CYCLE)].format(
                module=MODULES[rng.randrange(len(MODULES))], i=depth, line=100 + depth
            )
        self.next_id += 1
        parent = self.frames[-1].pid if self.frames else None
        args = {"Python parent id": parent, "Python id": self.next_id, "Python thread": 0}
        if name.startswith("nn.Module"):
            args["Python module id"] = depth
        self.frames.append(_Frame(self.next_id, ts, name, args))
        self.max_depth = max(self.max_depth, len(self.frames))

    def pop_to(self, depth: int, ts: int) -> int:
        """Close frames down to ``depth`` open, 100 ns apart from ``ts``; returns the time."""
        while len(self.frames) > depth:
            f = self.frames.pop()
            self.em.x("python_function", f.name, HOST_PID, MAIN_TID, f.ts, ts - f.ts, f.args)
            ts += 100
        return ts


def gen_deep(folder: Path, size: int, seed: int, depth: tuple[int, int] = (20, 40)) -> dict:
    """About ``size`` events; each op's stack is ``depth`` frames deep (uniform), sharing all
    but its last 1-8 frames with the op before it, as a model's forward calls do."""
    rng = random.Random(seed)
    stack: _Stack | None = None
    steps = 0

    def body(em: Emitter) -> None:
        nonlocal stack, steps
        host, stack = Host(em, rng), _Stack(em, rng)
        _host_meta(em, (MAIN_TID,))
        _device_meta(em, 0)
        t = ready = START_NS
        for _ in range(STEP_DEPTH):
            stack.push(t)
            t += 200
        while len(em) < size:
            step_start = t + 100
            t = step_start + 100
            for _ in range(rng.randrange(*STEP_OPS) // 4):
                d = rng.randint(*depth)
                keep = max(STEP_DEPTH, min(len(stack.frames), d - rng.randint(1, 8)))
                t = stack.pop_to(keep, t)
                while len(stack.frames) < d:
                    stack.push(t, leaf=len(stack.frames) == d - 1)
                    t += 200
                stack.leaf_depths.append(d)
                ext, dur = host.next_ext(), rng.randrange(20_000, 60_000)
                parent, child = FORWARD_OPS[rng.randrange(len(FORWARD_OPS))]
                host.op(parent, MAIN_TID, t, dur, ext)
                host.op(child, MAIN_TID, t + 1_000, dur - 2_000, ext + 1)
                ready = host.launch(MAIN_TID, t + 3_000, ext + 1, 0, STREAM, ready)
                host.next_ext()
                t += dur + 300
            t = stack.pop_to(STEP_DEPTH, t)
            host.step(steps, step_start, t)
            steps, t = steps + 1, t + 200
        stack.pop_to(0, t)

    em = _modern(folder / "deep.pt.trace.json", body)
    return {
        "files": {"deep.pt.trace.json": dict(em.counts)},
        "python_depth_range": list(depth),
        "python_max_depth": stack.max_depth,
        "python_min_leaf_depth": min(stack.leaf_depths),
        "python_ops": len(stack.leaf_depths),
        "steps": steps,
    }


# -- flows: every op linked --------------------------------------------------------------------


def _backward_name(op: str) -> str:
    """autograd's node name for an aten op: aten::native_layer_norm -> NativeLayerNormBackward0."""
    return "".join(part.capitalize() for part in op.split("::")[-1].split("_")) + "Backward0"


def gen_flows(folder: Path, size: int, seed: int, first_seq: int = 1) -> dict:
    """About ``size`` events: steps of forward ops (1-3 launches each) on the main thread and
    their backward ops on the autograd thread, every forward op ``fwdbwd``-linked to its
    backward op (flow id: its sequence number, from ``first_seq``; ``ac2g`` ids are
    correlation ids, from 19833: past 19832 forward ops the two share ids); 1 op in 10 also
    makes a runtime call with no device work (a lone ``f``)."""
    rng = random.Random(seed)
    seq, steps = first_seq - 1, 0
    ac2g_ids: set[int] = set()

    def ops(host: Host, tid: int, t: int, ready: int, names: list[tuple[int, str, str]]) -> tuple:
        for s, parent, child in names:
            ext, dur = host.next_ext(), rng.randrange(50_000, 120_000)  # 3 launches fit
            extra = {"Sequence number": s, "Fwd thread id": 1}
            if tid == MAIN_TID:
                host.op(parent, tid, t, dur, ext, **extra)
                host.em.flow("s", "fwdbwd", s, HOST_PID, tid, t)
                host.op(child, tid, t + 2_000, dur - 4_000, host.next_ext())
            else:
                grad = _backward_name(child)
                host.op(f"autograd::engine::evaluate_function: {grad}", tid, t, dur, ext, **extra)
                host.op(grad, tid, t + 2_000, dur - 4_000, host.next_ext(), **extra)
                host.em.flow("f", "fwdbwd", s, HOST_PID, tid, t + 2_000)
            launches = rng.randint(1, 3)
            for k in range(launches):
                at = t + 4_000 + k * (dur - 8_000) // launches
                ready = host.launch(tid, at, host.ext, 0, STREAM, ready)
                ac2g_ids.add(host.corr)
            if rng.random() < 0.1:
                host.runtime_only(tid, t + dur - 3_500, host.ext)
            t += dur + rng.randrange(1_000, 8_000)
        return t, ready

    def body(em: Emitter) -> None:
        nonlocal seq, steps
        host = Host(em, rng)
        _host_meta(em)
        _device_meta(em, 0)
        t = ready = START_NS
        while len(em) < size:
            forward = []
            for _ in range(rng.randrange(*STEP_OPS) // 4):
                seq += 1
                forward.append((seq, *FORWARD_OPS[rng.randrange(len(FORWARD_OPS))]))
            step_start, dev_start = t, ready
            t, ready = ops(host, MAIN_TID, t, ready, forward)
            t, ready = ops(host, BWD_TID, t + 5_000, ready, forward[::-1])
            host.step(steps, step_start, t, 0, (dev_start, ready))
            steps, t = steps + 1, t + 10_000

    em = _modern(folder / "flows.pt.trace.json", body)
    counts = em.counts
    return {
        "files": {"flows.pt.trace.json": dict(counts)},
        "flow_pairs": {"ac2g": counts["ac2g s"], "fwdbwd": counts["fwdbwd s"]},
        "shared_flow_ids": len(ac2g_ids & set(range(first_seq, seq + 1))),
        "lone_flow_ends": counts["ac2g f"] - counts["ac2g s"],
        "steps": steps,
    }


# -- old: the 2021 format ----------------------------------------------------------------------


class OldEmitter(Emitter):
    """The 2021 layout: absolute integer µs, string tids on X events, ``async`` flows."""

    def op_x(self, cat: str, name: str, pid: int | str, tid: str, ts: int, dur: int, args: dict):
        body = ",\n      ".join(f"{_j(k)}: {_j(v)}" for k, v in args.items())
        self.add(
            cat,
            f'  {{\n    "ph": "X", "cat": "{cat}", \n    "name": {_j(name)}, "pid": {_j(pid)}, '
            f'"tid": {_j(tid)},\n    "ts": {ts}, "dur": {dur},\n    "args": {{\n      {body}\n'
            "    }\n  }",
        )

    def old_flow(self, ph: str, flow_id: int, pid: int, tid: int | str, ts: int) -> None:
        end = ', "bp": "e"' if ph == "f" else ""
        self.add(
            f"async {ph}",
            f'  {{\n    "ph": "{ph}", "id": {flow_id}, "pid": {pid}, "tid": {_j(tid)}, '
            f'"ts": {ts},\n    "cat": "async", "name": "launch"{end}\n  }}',
        )

    def instant(self, name: str, pid: Any, tid: Any, ts: int, scope: str, args: dict | None):
        tail = f',\n    "args": {_j(args)}' if args else ""
        self.add(
            "instant",
            f'  {{\n    "name": {_j(name)}, "ph": "i", "s": "{scope}",\n    "pid": {_j(pid)}, '
            f'"tid": {_j(tid)}, "ts": {ts}{tail}\n  }}',
        )

    def old_meta(self, name: str, pid: int, tid: int | str, key: str, value: str) -> None:
        self.add(
            "M",
            f'  {{\n    "name": "{name}", "ph": "M", "ts": {OLD_START_US}, "pid": {pid}, '
            f'"tid": {_j(tid)},\n    "args": {{\n      "{key}": {_j(value)}\n    }}\n  }}',
        )


OLD_OPS = (  # (op, its children) as the 2021 resnet50 sample nests them
    ("aten::conv2d", ("aten::convolution", "aten::_convolution", "aten::cudnn_convolution")),
    ("aten::batch_norm", ("aten::_batch_norm_impl_index", "aten::cudnn_batch_norm")),
    ("aten::relu_", ("aten::threshold_",)),
    ("aten::add_", ()),
    ("aten::max_pool2d", ("aten::max_pool2d_with_indices",)),
)
CALL_STACK = (
    "/home/user/envs/kineto/lib/python3.7/site-packages/torch/nn/modules/conv.py(395): forward;"
    "resnet50_profiler_api.py(54): <module>"
)


def gen_old(folder: Path, size: int, seed: int) -> dict:
    """About ``size`` events shaped like the 2021 resnet50 sample (one stream, four GPUs)."""
    rng = random.Random(seed)
    path = folder / "worker0.1623143089861.pt.trace.json.gz"
    device = {"name": "Tesla V100-DGXS-32GB", "totalGlobalMem": 34087305216, "numSms": 80}
    header = {"schemaVersion": 1, "deviceProperties": [{"id": i, **device} for i in range(4)]}
    tid, stream_tid, ext, corr, steps = str(OLD_PID), f"stream {STREAM}", 1, 34000, 0
    tmp = path.with_name(path.name + ".part")
    with gzip.open(tmp, "wt", compresslevel=6) as out:
        out.write(json.dumps(header, indent=2)[:-2] + ',\n  "traceEvents": [\n')
        em = OldEmitter(out)
        t = ready = OLD_START_US + 100

        def common(e: int) -> dict:
            return {"Device": OLD_PID, "External id": e, "Trace name": "PyTorch Profiler"}

        while len(em) < size:
            step_start, step_ext = t, ext
            ext += 1
            for _ in range(rng.randrange(*STEP_OPS) // 4):
                op, children = OLD_OPS[rng.randrange(len(OLD_OPS))]
                dur = rng.randrange(40, 160)
                args = {**common(ext), "Trace iteration": 0, "Input Dims": [[32, 64, 56, 56]]}
                if rng.random() < 0.3:
                    args["Call stack"] = CALL_STACK
                em.op_x("Operator", op, OLD_PID, tid, t, dur, {**args, "Input type": ["float"]})
                for k, child in enumerate(children):
                    em.op_x(
                        "Operator",
                        child,
                        OLD_PID,
                        tid,
                        t + 2 + k,
                        dur - 4 - 2 * k,
                        common(ext + 1 + k),
                    )
                ext += 1 + len(children)
                for _ in range(rng.randrange(3)):
                    args = {"Device Type": 0, "Device Id": -1, "Bytes": rng.choice((4, 512, 8192))}
                    em.instant("[memory]", OLD_PID, OLD_PID, t + 3, "t", args)
                corr += 1
                launch = t + dur // 2
                copy = rng.random() < 0.04
                api = "cudaMemcpyAsync" if copy else "cudaLaunchKernel"
                em.op_x(
                    "Runtime",
                    api,
                    OLD_PID,
                    tid,
                    launch,
                    rng.randrange(3, 12),
                    {
                        "cbid": 41 if copy else 211,
                        "correlation": corr,
                        "external id": ext - 1,
                        "external ts": t,
                    },
                )
                em.old_flow("s", corr, OLD_PID, OLD_PID, launch)
                start, kdur = max(ready, launch + 4), rng.randrange(1, 90)
                dev = {
                    "device": 0,
                    "context": 1,
                    "stream": STREAM,
                    "correlation": corr,
                    "external id": ext - 1,
                }
                if copy:
                    name, cat = "Memcpy HtoD (Pageable -> Device)", "Memcpy"
                    dev.update(bytes=19267584, **{"memory bandwidth (GB/s)": 9.93})
                else:
                    name, cat = COMPUTE_KERNELS[rng.randrange(len(COMPUTE_KERNELS))], "Kernel"
                    dev = {
                        "queued": 0,
                        **dev,
                        "registers per thread": 38,
                        "grid": [50, 1, 1],
                        "block": [256, 1, 1],
                        "est. achieved occupancy %": 8,
                    }
                em.op_x(cat, name, 0, stream_tid, start, kdur, dev)
                em.old_flow("f", corr, 0, stream_tid, start)
                ready = start + kdur
                if rng.random() < 0.03:
                    corr += 1
                    em.op_x(
                        "Runtime",
                        "cudaMemsetAsync",
                        OLD_PID,
                        tid,
                        launch + 12,
                        5,
                        {"cbid": 51, "correlation": corr, "external id": ext - 1},
                    )
                    em.old_flow("s", corr, OLD_PID, OLD_PID, launch + 12)
                    memset = {
                        "device": 0,
                        "context": 1,
                        "stream": STREAM,
                        "correlation": corr,
                        "external id": ext - 1,
                        "bytes": 128000,
                    }
                    em.op_x("Memset", "Memset (Device)", 0, stream_tid, ready + 1, 1, memset)
                    em.old_flow("f", corr, 0, stream_tid, ready + 1)
                    ready += 2
                t += dur + rng.randrange(2, 15)
            em.op_x(
                "Operator",
                f"ProfilerStep#{steps}",
                OLD_PID,
                tid,
                step_start,
                t - step_start,
                {**common(step_ext), "Trace iteration": 0},
            )
            steps, t = steps + 1, t + 20
        for pid, label in ((OLD_PID, "CPU"), *((i, f"GPU {i}") for i in range(OLD_DEVICES))):
            em.old_meta("process_name", pid, 0, "name", "python")
            em.old_meta("process_labels", pid, 0, "labels", label)
        em.old_meta("thread_name", OLD_PID, tid, "name", f"thread {OLD_PID} (python)")
        em.op_x(
            "Trace",
            "PyTorch Profiler (0)",
            "Traces",
            "PyTorch Profiler",
            OLD_START_US,
            t - OLD_START_US,
            {"Op count": 0},
        )
        em.instant(
            "Iteration Start: PyTorch Profiler",
            "Traces",
            "Trace PyTorch Profiler",
            OLD_START_US,
            "g",
            None,
        )
        em.instant("Record Window End", "", "", t + 50, "g", None)
        em.w.flush()
        out.write("\n]}")
    tmp.replace(path)
    return {"files": {path.name: dict(em.counts)}, "steps": steps, "start_us": OLD_START_US}


# -- ranks: a distributed run ------------------------------------------------------------------

COLLECTIVE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
BUCKETS = 3  # gradient buckets all-reduced at each step's end
STRAGGLE = 0.03  # rank r's kernels last (1 + 0.03 r) as long: the last rank is the straggler


def _rank_step(host: Host, r: int, t: int, ready: int, groups: int) -> tuple[int, int]:
    """Rank ``r``'s compute for a step on its device (GPU r, as ``cuda:r``): ``groups`` op
    groups, each a launch on the compute stream; returns (host time, compute stream ready)."""
    rng = host.rng
    for _ in range(groups):
        ext, dur = host.next_ext(), rng.randrange(20_000, 60_000)
        parent, child = OPS[rng.randrange(len(OPS))]
        tid = BWD_TID if parent.startswith("autograd") else MAIN_TID
        host.op(parent, tid, t, dur, ext)
        host.op(child, tid, t + 2_000, dur - 4_000, host.next_ext())
        kdur = round(rng.randrange(5_000, 90_000) * (1 + STRAGGLE * r))
        kernel = (COMPUTE_KERNELS[rng.randrange(len(COMPUTE_KERNELS))], kdur, {})
        ready = host.launch(tid, t + 4_000, host.ext, r, STREAM, ready, kernel)
        t += dur + rng.randrange(1_000, 5_000)
    return t, ready


def gen_ranks(folder: Path, size: int, seed: int, ranks: int = 8) -> dict:
    """``ranks`` files of about ``size`` events each, generated in lockstep: each step's
    buckets are all-reduced on every rank at once, each bucket ending a fixed time after the
    last rank reaches it (the collective kernel of an early rank spins until then)."""
    group = {
        "Process Group Name": "0",
        "Process Group Description": "default_pg",
        "Process Group Ranks": str(list(range(ranks))),
        "Group size": ranks,
        "dtype": "Float",
        "In split size": "[]",
        "Out split size": "[]",
    }
    outs = [
        _RankFile(folder / f"rank-{r}.pt.trace.json.gz", r, ranks, random.Random(seed * 1000 + r))
        for r in range(ranks)
    ]
    step_rng, steps = random.Random(seed), 0
    while min(len(o.em) for o in outs) < size:
        groups = step_rng.randrange(*STEP_OPS) // 4
        starts = [(o.t, o.ready) for o in outs]
        for r, o in enumerate(outs):
            o.t, o.ready = _rank_step(o.host, r, o.t, o.ready, groups)
        for _ in range(BUCKETS):
            nelems = step_rng.choice((2049000, 6637568, 7875584))
            arrive = [max(o.ready, o.t + COLLECTIVE_LAUNCH_NS + LAUNCH_LATENCY_NS) for o in outs]
            end = max(arrive) + nelems // RING_ELEMENTS_PER_NS
            coll = {"Collective name": "allreduce", "In msg nelems": nelems}
            coll.update({"Out msg nelems": nelems, **group})
            for o, at in zip(outs, arrive, strict=True):
                o.allreduce(coll, at, end)
        for o, (t, ready) in zip(outs, starts, strict=True):
            o.synchronize(steps, t, ready)
        steps += 1
    files = {o.path.name: dict(o.close()) for o in outs}
    per_rank = outs[0].collectives
    return {"files": files, "ranks": ranks, "collectives_per_rank": per_rank, "steps": steps}


COLLECTIVE_LAUNCH_NS = 30_000  # record_param_comms start -> its launch (the A100 trace: ~20 µs)
RING_ELEMENTS_PER_NS = 3  # allreduce duration: ~3 elements per ns on the ring


class _RankFile:
    """One rank's open file: header written, events streamed by the lockstep loop."""

    def __init__(self, path: Path, rank: int, world: int, rng: random.Random) -> None:
        self.path, self.tmp = path, path.with_name(path.name + ".part")
        self.out = gzip.open(self.tmp, "wt", compresslevel=6)
        header = _header()
        header["distributedInfo"].update(rank=rank, world_size=world)
        header["distributedInfo"]["pg_config"][0].update(pg_size=world, ranks=list(range(world)))
        self.out.write(json.dumps(header, indent=2)[:-2] + ',\n  "traceEvents": [\n')
        self.em = Emitter(self.out)
        self.host = Host(self.em, rng)
        _host_meta(self.em)
        _device_meta(self.em, rank, (STREAM, NCCL_STREAM))
        self.rank = rank
        self.t = self.ready = START_NS
        self.collectives = 0

    def allreduce(self, coll: dict, arrive: int, end: int) -> None:
        """One bucket: ``record_param_comms`` > ``nccl:all_reduce`` > launch; the kernel runs
        from this rank's arrival to the group's ``end``."""
        host, t = self.host, self.t
        ext = host.next_ext()
        host.op("record_param_comms", BWD_TID, t, 180_000, ext, **coll)
        args = {"External id": host.next_ext()}
        host.em.x("user_annotation", "nccl:all_reduce", HOST_PID, BWD_TID, t + 20_000, 90_000, args)
        kernel = (COLLECTIVE, end - arrive, coll)
        host.launch(BWD_TID, t + COLLECTIVE_LAUNCH_NS, ext, self.rank, NCCL_STREAM, arrive, kernel)
        self.ready, self.t, self.collectives = end, t + 200_000, self.collectives + 1

    def synchronize(self, step: int, start: int, dev_start: int) -> None:
        """The optimizer waits for the gradients (a lone ``f``: no device work), then the
        step's annotations."""
        host = self.host
        host.corr += 1
        args = {"External id": host.next_ext(), "cbid": 131, "correlation": host.corr}
        wait = max(self.ready - self.t, 1_000)
        host.em.x("cuda_runtime", "cudaStreamSynchronize", HOST_PID, MAIN_TID, self.t, wait, args)
        host.em.flow("f", "ac2g", host.corr, HOST_PID, MAIN_TID, self.t)
        self.t = max(self.t, self.ready) + 5_000
        host.step(step, start, self.t, self.rank, (dev_start, self.ready))

    def close(self) -> Counter:
        self.em.w.flush()
        self.out.write(
            f'\n  ],\n  "traceName": "/tmp/{self.path.stem}",\n  "displayTimeUnit": "ms",\n'
            f'  "baseTimeNanoseconds": {BASE_TIME_NS}\n}}\n'
        )
        self.out.close()
        self.tmp.replace(self.path)
        return self.em.counts


# -- registry and cache ------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """One shape: its generator and default sizes (issue 25: >= 400k events large, ~20k small;
    ``meta``'s size counts device processes, ``ranks``' counts events per rank)."""

    generate: Callable[..., dict]
    large: int
    small: int
    large_opts: tuple = ()
    small_opts: tuple = ()


SHAPES: dict[str, Shape] = {
    "meta": Shape(gen_meta, 60_000, 1_400),
    "deep": Shape(gen_deep, 500_000, 20_000),
    "flows": Shape(gen_flows, 500_000, 20_000),
    "old": Shape(gen_old, 400_000, 20_000),
    "ranks": Shape(gen_ranks, 100_000, 5_000, (("ranks", 8),), (("ranks", 4),)),
}


@dataclass(frozen=True)
class Case:
    """A generated shape on disk: what ``neuron-prof`` is given (one file, or the folder of
    rank files), the folder HTA is given, and the manifest."""

    name: str
    target: Path
    folder: Path
    manifest: dict

    @property
    def files(self) -> list[Path]:
        return [self.folder / n for n in self.manifest["files"]]

    @property
    def events(self) -> int:
        return self.manifest["events"]


def generate(name: str, folder: Path, size: int, seed: int = 0, **opts: Any) -> Case:
    """Write shape ``name`` into ``folder`` (made empty first) and its manifest beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    info = SHAPES[name].generate(folder, size, seed, **opts)
    per_file = {n: sum(c.values()) for n, c in info["files"].items()}
    manifest = {
        "shape": name,
        "version": VERSION,
        "size": size,
        "seed": seed,
        "opts": opts,
        "events": sum(per_file.values()),
        "events_per_file": per_file,
        **info,
    }
    folder.with_name(folder.name + ".manifest").write_text(json.dumps(manifest, indent=1))
    return _case(name, folder, manifest)


def _case(name: str, folder: Path, manifest: dict) -> Case:
    files = list(manifest["files"])
    return Case(name, folder if len(files) > 1 else folder / files[0], folder, manifest)


def cached(
    name: str, root: Path, size: int | None = None, small: bool = False, seed: int = 0, **opts: Any
) -> Case:
    """The shape under ``root`` (generated once per name, size, options, seed and VERSION)."""
    spec = SHAPES[name]
    size = size or (spec.small if small else spec.large)
    opts = {**dict(spec.small_opts if small else spec.large_opts), **opts}
    key = "-".join([name, str(size), *(f"{k}{v}" for k, v in sorted(opts.items())), f"s{seed}"])
    folder = root / f"v{VERSION}" / key
    manifest = folder.with_name(key + ".manifest")
    if manifest.exists():
        return _case(name, folder, json.loads(manifest.read_text()))
    print(f"generating {folder} ...", file=sys.stderr, flush=True)
    return generate(name, folder, size, seed, **opts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("-o", "--output", type=Path, required=True, help="folder to write")
    parser.add_argument("--size", type=int, default=None, help="default: the shape's large")
    parser.add_argument("--small", action="store_true", help="the shape's small default")
    parser.add_argument("--ranks", type=int, default=None, help="ranks shape: files")
    parser.add_argument(
        "--opt",
        action="append",
        default=[],
        metavar="NAME=INT",
        help="a generator's keyword (meta: kernels, step_ops; flows: first_seq)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    spec = SHAPES[args.shape]
    opts = dict(spec.small_opts if args.small else spec.large_opts)
    if args.ranks is not None:
        opts["ranks"] = args.ranks
    for pair in args.opt:
        key, _, value = pair.partition("=")
        opts[key] = int(value)
    size = args.size or (spec.small if args.small else spec.large)
    case = generate(args.shape, args.output, size, args.seed, **opts)
    print(f"wrote {case.events} events to {case.target}")


if __name__ == "__main__":
    main()
