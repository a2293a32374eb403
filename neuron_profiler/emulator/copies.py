"""Copies and host reads on the emulated device: ``.to``, ``copy_``, ``.cpu()``, ``.item()``.

Host -> device and device -> device copies are DMA transfers that the host does not wait for
(stream-ordered on the core, as in eager CUDA). Device -> host copies and ``.item()`` make the host
really wait until the DMA (and everything before it on that core) is done, unless
``non_blocking=True``; that wait is recorded as a host sync.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

from neuron_profiler.emulator.costs import op_cost
from neuron_profiler.emulator.dispatch import (
    STATE,
    NeuronTensor,
    OpInfo,
    core_of,
    new_device_tensor,
    register_special,
    run_inner,
    wait_pending,
)
from neuron_profiler.emulator.outputs import materialise, output_plan
from neuron_profiler.runtime_trace import format as F

aten = torch.ops.aten
_CPU = torch.device("cpu")


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _move(
    src: int | None,
    dst: int | None,
    elem: torch.Tensor,
    launch_ns: int,
    op: str,
    non_blocking: bool,
    inputs: list[torch.Tensor],
    overhead_from_ns: int = 0,
) -> None:
    """Record the transfer of ``elem``'s bytes from ``src`` to ``dst`` (None: host).
    ``overhead_from_ns``: a same-core copy whose data the host copied (numerics mode) from then
    until ``launch_ns``."""
    tl = STATE.timeline
    assert tl is not None
    nbytes = _nbytes(elem)
    if src is None and dst is not None:
        tl.copy(dst, F.H2D, nbytes, launch_ns=launch_ns, op=op)
    elif src is not None and dst is None:
        end = tl.copy(
            src, F.D2H, nbytes, launch_ns=launch_ns, op=op, not_before_ns=wait_pending(inputs)
        )
        if not non_blocking:
            tl.host_sync([src], "cpu", op=op, until_ns=end)
    elif src is not None and dst is not None and src == dst:
        cost = op_cost(op, inputs=inputs, outputs=[elem], args=())
        tl.kernel(
            dst,
            op,
            flops=cost.flops,
            bytes_moved=cost.bytes_moved,
            dtype=cost.dtype,
            matrix=False,
            launch_ns=launch_ns,
            not_before_ns=wait_pending(inputs),
            overhead_from_ns=overhead_from_ns,
        )
    elif src is not None and dst is not None:
        ready = max(tl.cores[src].stream_ns, wait_pending(inputs))
        tl.copy(dst, F.D2D, nbytes, launch_ns=launch_ns, op=op, not_before_ns=ready)


def to_copy(func: Any, info: OpInfo, args: tuple, kwargs: dict) -> Any:
    launch_ns = time.time_ns()
    x = args[0]
    src = x._core if isinstance(x, NeuronTensor) else None
    elem = x._elem if src is not None else x
    dst = core_of(kwargs["device"]) if kwargs.get("device") is not None else src
    kw = dict(kwargs, device=_CPU)
    kw.pop("pin_memory", None)
    cast = (elem, *args[1:])
    plan = (
        output_plan(func, cast, kw, [elem])
        if src is not None and dst is not None and not STATE.numerics
        else None
    )
    if plan is not None:  # timing mode, device to device: the bytes are not copied
        out = materialise(plan, [elem])[0]
        _move(src, dst, out, launch_ns, info.name, bool(kwargs.get("non_blocking")), [elem])
    else:
        out = run_inner(func, cast, kw)
        on_core = src is not None and src == dst
        _move(
            src,
            dst,
            out,
            time.time_ns() if on_core else launch_ns,
            info.name,
            bool(kwargs.get("non_blocking")),
            [elem],
            launch_ns if on_core else 0,
        )
    return out if dst is None else new_device_tensor(out, dst, True)


def copy_(func: Any, info: OpInfo, args: tuple, kwargs: dict) -> Any:
    """``dst.copy_(src, non_blocking)`` with either side on the host or on any core."""
    non_blocking = bool(kwargs.get("non_blocking") or (len(args) > 2 and args[2]))
    return _copy_into(args[0], args[1], non_blocking, info.name, resize=False)


def copy_from(func: Any, info: OpInfo, args: tuple, kwargs: dict) -> Any:
    """``_copy_from(src, dst)`` / ``_copy_from_and_resize(src, dst)``: copy_ with swapped args."""
    non_blocking = bool(kwargs.get("non_blocking") or (len(args) > 2 and args[2]))
    resize = func is aten._copy_from_and_resize.default
    return _copy_into(args[1], args[0], non_blocking, info.name, resize=resize)


def _copy_into(dst: Any, src: Any, non_blocking: bool, op: str, *, resize: bool) -> Any:
    launch_ns = time.time_ns()
    d = dst._core if isinstance(dst, NeuronTensor) else None
    s = src._core if isinstance(src, NeuronTensor) else None
    d_elem = dst._elem if d is not None else dst
    s_elem = src._elem if s is not None else src
    if type(s_elem) is FakeTensor and type(d_elem) is not FakeTensor:
        # torch.tensor(data, device="neuron") while torch.compile traces: PyTorch fills a real
        # device tensor from the fake of its data (then lifts it to a fake); copy the data
        s_elem = s_elem.constant
        if s_elem is None:
            return dst
    if resize and d_elem.shape != s_elem.shape:
        d_elem.resize_(s_elem.shape)
    if d is not None and s is not None and not STATE.numerics:  # timing mode: bytes not copied
        _move(s, d, d_elem, launch_ns, op, non_blocking, [s_elem])
        return dst
    run_inner(aten.copy_.default, (d_elem, s_elem), {})
    on_core = s is not None and s == d
    _move(
        s,
        d,
        d_elem,
        time.time_ns() if on_core else launch_ns,
        op,
        non_blocking,
        [s_elem],
        launch_ns if on_core else 0,
    )
    return dst


def local_scalar_dense(func: Any, info: OpInfo, args: tuple, kwargs: dict) -> Any:
    """``.item()`` / ``bool(t)``: a tiny DMA to the host, and the host waits for it."""
    launch_ns = time.time_ns()
    x = args[0]
    tl = STATE.timeline
    assert tl is not None
    end = tl.copy(
        x._core,
        F.D2H,
        x._elem.element_size(),
        launch_ns=launch_ns,
        op=info.name,
        not_before_ns=wait_pending([x._elem]),
    )
    tl.host_sync([x._core], "item", op=info.name, until_ns=end)
    return run_inner(func, (x._elem,), kwargs)


def lift_fresh(func: Any, info: OpInfo, args: tuple, kwargs: dict) -> Any:
    """``torch.tensor(data, device="neuron")`` ends in ``lift_fresh``: the tensor itself, or,
    while torch.compile traces with fake tensors, its fake (as for any device's constants)."""
    mode = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
    if mode is None:
        return args[0]
    return mode.fake_tensor_converter.from_real_tensor(mode, args[0], make_constant=True)


def register() -> None:
    register_special(aten.lift_fresh.default, lift_fresh)
    register_special(aten._to_copy.default, to_copy)
    register_special(aten.copy_.default, copy_)
    register_special(aten._copy_from.default, copy_from)
    register_special(aten._copy_from_and_resize.default, copy_from)
    register_special(aten._local_scalar_dense.default, local_scalar_dense)
