"""Copies and host reads on the emulated device: ``.to``, ``copy_``, ``.cpu()``, ``.item()``.

Host <-> device copies follow what the runtime does with host memory (CUDA documents the same
for its copies, docs/emulator.md "Copies"):

- **host -> device from pageable memory**: the host first copies the data into the runtime's
  pinned staging buffer (``DeviceTimeline.stage``: at least ``bytes / host staging bandwidth``,
  inside the runtime call), then the DMA is submitted: it cannot end before the data was staged.
  The host does not wait for the DMA (stream-ordered on the core, as in eager CUDA);
- **host -> device from pinned memory** (``pin_memory()``, ``pinned.py``): the DMA reads the host
  buffer itself; with ``non_blocking=True`` the call returns after the launch and the DMA
  overlaps what the host does next, otherwise the host waits for the DMA (a host sync, ``h2d``);
- **device -> host into pageable memory** (``.cpu()``, ``copy_`` into an ordinary host tensor,
  ``non_blocking`` or not): the DMA fills the staging buffer, the host waits for it (a host sync,
  ``cpu``) and then copies the data out (at least the staging time);
- **device -> host into pinned memory** (``.to("cpu", non_blocking=True)``, whose result is
  pinned as PyTorch makes it, or ``copy_`` into a pinned tensor): the DMA writes the buffer
  itself; ``non_blocking=True`` returns after the launch, otherwise the host waits for the DMA.

The emulator copies the data for real in every case (device memory is host memory). Where the
hardware's host would not touch the data (pinned memory) that copy is emulator overhead: an
``emulator overhead: pinned_copy`` span before the launch, as for numerics mode's math.

A copy's runtime call row begins and ends in one frame, the one that hands it to the timeline
(``_to_host_device`` / ``_to_host`` read their own launch time; ``to_copy`` / ``_copy_into``
read the end of a device copy's call), so that it nests among with_stack's Python frames
(``DeviceTimeline.kernel``, ``call_end_ns``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

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
    run_inner_on_device,
    stream_of,
    wait_pending,
)
from neuron_profiler.emulator.outputs import computes_for_real, materialise, output_plan
from neuron_profiler.emulator.pinned import is_pinned, pin
from neuron_profiler.runtime_trace import format as F

aten = torch.ops.aten
_CPU = torch.device("cpu")
SYNC_H2D = F.H2D  # host sync reason: a blocking copy from pinned memory waits for its DMA
SYNC_CPU = "cpu"  # host sync reason: a copy to the host waits for its DMA
T = TypeVar("T")


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _to_host_device(
    core: int,
    host: torch.Tensor,
    nbytes: int,
    non_blocking: bool,
    op: str,
    copy: Callable[[], T],
) -> T:
    """Host -> device: ``copy()`` puts the data in device memory. From pageable memory that copy
    stands for the host's staging (the call lasts at least the modelled staging time) and the
    DMA is submitted after it; from pinned memory it is emulator overhead and the DMA is
    launched after it, the host waiting for the DMA unless ``non_blocking``. The call begins
    when this frame opens."""
    launch_ns = time.time_ns()
    tl = STATE.timeline
    assert tl is not None
    pinned = is_pinned(host)
    out = copy()
    if not pinned:
        tl.stage(nbytes, since_ns=launch_ns)
        staged = time.time_ns()  # read here: the call's row, which ends at it, nests
        tl.copy(
            core, F.H2D, nbytes, launch_ns=launch_ns, op=op, staged_ns=staged, call_end_ns=staged
        )
        return out
    launch = time.time_ns()
    tl.overhead(core, op, F.OVERHEAD_PINNED_COPY, launch_ns, launch)
    end = tl.copy(core, F.H2D, nbytes, launch_ns=launch, op=op, call_end_ns=time.time_ns())
    if not non_blocking:
        tl.host_sync([core], SYNC_H2D, op=op, until_ns=end)
    return out


def _to_host(
    core: int,
    device_memory: torch.Tensor,
    nbytes: int,
    pinned: bool,
    non_blocking: bool,
    op: str,
    copy: Callable[[], T],
) -> T:
    """Device -> host: ``copy()`` puts the data in host memory. Into pageable memory the host
    waits for the DMA (into the staging buffer), then that copy stands for copying the data out
    (at least the modelled staging time), ``non_blocking`` or not; into ``pinned`` memory it is
    emulator overhead, the DMA is launched after it, and the host waits for the DMA unless
    ``non_blocking``. The call begins when this frame opens."""
    launch_ns = time.time_ns()
    tl = STATE.timeline
    assert tl is not None
    ready = wait_pending([device_memory])
    if pinned:
        out = copy()
        launch = time.time_ns()
        tl.overhead(core, op, F.OVERHEAD_PINNED_COPY, launch_ns, launch)
        end = tl.copy(
            core,
            F.D2H,
            nbytes,
            launch_ns=launch,
            op=op,
            not_before_ns=ready,
            call_end_ns=time.time_ns(),
        )
        if not non_blocking:
            tl.host_sync([core], SYNC_CPU, op=op, until_ns=end)
        return out
    end = tl.copy(
        core,
        F.D2H,
        nbytes,
        launch_ns=launch_ns,
        op=op,
        not_before_ns=ready,
        call_end_ns=time.time_ns(),
    )
    staging = tl.host_sync([core], SYNC_CPU, op=op, until_ns=end)
    out = copy()
    tl.stage(nbytes, since_ns=staging)
    return out


def _on_device(
    src: int,
    dst: int,
    elem: torch.Tensor,
    launch_ns: int,
    op: str,
    inputs: list[torch.Tensor],
    overhead_from_ns: int = 0,
    *,
    call_end_ns: int,
) -> None:
    """Record a copy between device tensors: a kernel on one core (a cast or a strided copy),
    a DMA between cores. ``overhead_from_ns``: a same-core copy whose data the host copied
    (numerics mode) from then until ``launch_ns``. ``call_end_ns``: where the call's row ends,
    read by the caller (the frame that read ``launch_ns``) before this frame opens."""
    tl = STATE.timeline
    assert tl is not None
    if src == dst:
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
            stream=stream_of(dst),
            call_end_ns=call_end_ns,
        )
    else:
        ready = max(tl.cores[src].stream_ns, wait_pending(inputs))
        tl.copy(
            dst,
            F.D2D,
            _nbytes(elem),
            launch_ns=launch_ns,
            op=op,
            not_before_ns=ready,
            call_end_ns=call_end_ns,
        )


def _pinned_result(func: Any, args: tuple, kwargs: dict) -> torch.Tensor:
    """``_to_copy`` to the host into pinned memory (``non_blocking=True`` or ``pin_memory=True``:
    PyTorch pins the result of an asynchronous copy from an accelerator). Both copies run with
    record-function off: emulator overhead, not ops of the program."""
    return run_inner(_copy_pinned, (func, args, kwargs), {})


def _copy_pinned(func: Any, args: tuple, kwargs: dict) -> torch.Tensor:
    return pin(func(*args, **kwargs))


def to_copy(func: Any, info: OpInfo, args: tuple, kwargs: dict) -> Any:
    launch_ns = time.time_ns()
    x = args[0]
    src = x._core if isinstance(x, NeuronTensor) else None
    elem = x._elem if src is not None else x
    dst = core_of(kwargs["device"]) if kwargs.get("device") is not None else src
    non_blocking = bool(kwargs.get("non_blocking"))
    kw = dict(kwargs, device=_CPU)
    pin_result = bool(kw.pop("pin_memory", None)) or non_blocking
    cast = (elem, *args[1:])
    nbytes = elem.numel() * (kw.get("dtype") or elem.dtype).itemsize
    if src is None and dst is not None:
        copy = functools.partial(run_inner_on_device, func, cast, kw)
        out = _to_host_device(dst, x, nbytes, non_blocking, info.name, copy)
        return new_device_tensor(out, dst, True)
    if src is not None and dst is None:
        copy = functools.partial(_pinned_result if pin_result else run_inner, func, cast, kw)
        return _to_host(src, elem, nbytes, pin_result, non_blocking, info.name, copy)
    if src is None or dst is None:  # host to host: nothing on the device
        return run_inner(func, cast, kw)
    # the plan's shape functions and the zero-filled output: no profiler rows, no host memory
    plan = run_inner(output_plan, (func, cast, kw, [elem]), {}) if not STATE.numerics else None
    if plan is not None:  # timing mode, device to device: the bytes are not copied
        out = run_inner_on_device(materialise, (plan, [elem]), {})[0]
        _on_device(src, dst, out, launch_ns, info.name, [elem], call_end_ns=time.time_ns())
    else:
        out = run_inner_on_device(func, cast, kw)
        on_core = src == dst
        _on_device(
            src,
            dst,
            out,
            time.time_ns() if on_core else launch_ns,
            info.name,
            [elem],
            launch_ns if on_core else 0,
            call_end_ns=time.time_ns(),
        )
    return new_device_tensor(out, dst, True)


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
    copy = functools.partial(run_inner, aten.copy_.default, (d_elem, s_elem), {})
    if s is None and d is not None:
        _to_host_device(d, s_elem, _nbytes(d_elem), non_blocking, op, copy)
        return dst
    if s is not None and d is None:
        pinned = is_pinned(d_elem)
        _to_host(s, s_elem, _nbytes(d_elem), pinned, non_blocking, op, copy)
        return dst
    if s is None or d is None:  # host to host: nothing on the device
        copy()
        return dst
    if not STATE.numerics and not computes_for_real(op, [s_elem], [d_elem]):
        # timing mode, a large copy: the bytes are not copied
        _on_device(s, d, d_elem, launch_ns, op, [s_elem], call_end_ns=time.time_ns())
        return dst
    copy()
    on_core = s == d
    _on_device(
        s,
        d,
        d_elem,
        time.time_ns() if on_core else launch_ns,
        op,
        [s_elem],
        launch_ns if on_core else 0,
        call_end_ns=time.time_ns(),
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
        call_end_ns=time.time_ns(),  # in this frame: the row nests among with_stack's frames
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
