"""``nn.DataParallel`` over the emulated cores, as over CUDA devices.

DataParallel's autograd functions (``torch.nn.parallel._functions``: Scatter, Gather, Broadcast,
ReduceAddCoalesced) move tensors with ``torch.nn.parallel.comm``, whose four functions are CUDA
C++ (``torch._C._scatter``, ``_gather``, ``_broadcast_coalesced``, ``_reduce_add_coalesced``),
absent from a CPU build of torch. Where the current accelerator is the emulated device, they are
replaced here by the same operations written with device copies (``.to``: DMA transfers on the
modelled timeline), which the autograd functions wrap as on CUDA: inputs are split along ``dim``
across ``device_ids``, parameters broadcast from ``device_ids[0]`` each forward, outputs gathered
on ``output_device``, and gradients reduce-added back onto ``device_ids[0]``.

``DataParallel.parallel_apply`` runs the replicas one after another on the calling thread, each
with its core current, instead of one thread per device: the emulator's state (the current
core, the timeline) is process-wide, and the launches are asynchronous, so the cores' modelled
work still overlaps. ``torch.nn.parallel.data_parallel`` (the function) keeps torch's threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.nn.parallel import comm

_ORIGINAL: dict[str, Any] = {}


def _ours() -> bool:
    """True where DataParallel's integer device ids mean the emulated cores."""
    acc = torch.accelerator.current_accelerator()
    return acc is not None and acc.type == "neuron"


def _device(index: Any) -> torch.device:
    if isinstance(index, torch.device):
        return index
    if index == -1 or index == "cpu":  # comm's "-1 means the CPU" (Gather of a host input)
        return torch.device("cpu")
    return torch.device("neuron", int(index))


def scatter(
    tensor: torch.Tensor,
    devices: Sequence[Any] | None = None,
    chunk_sizes: Sequence[int] | None = None,
    dim: int = 0,
    streams: Any = None,
    *,
    out: Any = None,
) -> tuple[torch.Tensor, ...]:
    """``comm.scatter``: ``tensor`` split along ``dim`` (evenly, or by ``chunk_sizes``), one
    chunk copied to each device."""
    if not _ours() or out is not None or devices is None:
        return _ORIGINAL["scatter"](tensor, devices, chunk_sizes, dim, streams, out=out)
    chunks = (
        tensor.split(list(chunk_sizes), dim) if chunk_sizes else tensor.chunk(len(devices), dim)
    )
    return tuple(c.to(_device(d)) for c, d in zip(chunks, devices, strict=False))


def gather(
    tensors: Sequence[torch.Tensor], dim: int = 0, destination: Any = None, *, out: Any = None
) -> torch.Tensor:
    """``comm.gather``: the tensors concatenated along ``dim`` on ``destination``."""
    if not _ours() or out is not None:
        return _ORIGINAL["gather"](tensors, dim, destination, out=out)
    target = _device(destination if destination is not None else torch.neuron.current_device())
    return torch.cat([t.to(target) for t in tensors], dim)


def broadcast_coalesced(
    tensors: Sequence[torch.Tensor], devices: Sequence[Any], buffer_size: int = 10485760
) -> list[list[torch.Tensor]]:
    """``comm.broadcast_coalesced``: per device, the tensors there (a copy, or themselves on
    their own device, as CUDA's returns them)."""
    if not _ours():
        return _ORIGINAL["broadcast_coalesced"](tensors, devices, buffer_size)
    out = []
    for d in devices:
        dev = _device(d)
        out.append([t if t.device == dev else t.to(dev) for t in tensors])
    return out


def reduce_add_coalesced(
    inputs: Sequence[Sequence[torch.Tensor]], destination: Any = None, buffer_size: int = 10485760
) -> tuple[torch.Tensor, ...]:
    """``comm.reduce_add_coalesced``: position by position, the sum over devices on
    ``destination``."""
    if not _ours():
        return _ORIGINAL["reduce_add_coalesced"](inputs, destination, buffer_size)
    target = _device(destination if destination is not None else torch.neuron.current_device())
    sums = []
    for parts in zip(*inputs, strict=True):
        acc = parts[0].to(target, copy=True)
        for p in parts[1:]:
            acc.add_(p.to(target))
        sums.append(acc)
    return tuple(sums)


def _parallel_apply(
    self: torch.nn.DataParallel, replicas: Sequence[Any], inputs: Sequence[Any], kwargs: Any
) -> list[Any]:
    """The replicas in turn on this thread, each with its core current (module docstring)."""
    if self.src_device_obj.type != "neuron":
        return _ORIGINAL["parallel_apply"](self, replicas, inputs, kwargs)
    outputs = []
    for i, (module, args) in enumerate(zip(replicas, inputs, strict=False)):
        kw = kwargs[i] if kwargs else {}
        args = args if isinstance(args, (list, tuple)) else (args,)
        with torch.neuron.device(self.device_ids[i]):
            outputs.append(module(*args, **kw))
    return outputs


def install() -> None:
    """Route ``torch.nn.parallel.comm`` and ``DataParallel.parallel_apply`` (once per
    process; every other device passes through to torch's own)."""
    if _ORIGINAL:
        return
    for name, fn in (
        ("scatter", scatter),
        ("gather", gather),
        ("broadcast_coalesced", broadcast_coalesced),
        ("reduce_add_coalesced", reduce_add_coalesced),
    ):
        _ORIGINAL[name] = getattr(comm, name)
        setattr(comm, name, fn)
    _ORIGINAL["parallel_apply"] = torch.nn.DataParallel.parallel_apply
    torch.nn.DataParallel.parallel_apply = _parallel_apply  # type: ignore[method-assign]
